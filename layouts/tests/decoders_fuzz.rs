//! Every decoder of remote bytes, fed mutated images: none may panic, whatever the bytes.
//!
//! Memory a NIC or another client writes can hold anything (a torn write, a dead writer's
//! half, a hostile client), and the decoders promise a clear error for all of it. Test builds
//! keep overflow checks on, so an arithmetic overflow on a crafted field is caught here as the
//! panic it would be. The fuzzer is a deterministic mutator (no external tool): each round
//! starts from a seed image (all zeros, the right magic in place, or a real encoding) and
//! overwrites a few aligned words with boundary values (0, 1, powers of two, MAX and MAX - k)
//! or random bytes, which reaches the checks past the magic far more often than random bytes
//! alone. `REMORA_FUZZ_ROUNDS` sets the rounds per decoder (default 20,000; CI runs the
//! default).
use remora_layouts::{canrt, catfish, erda, region, sherman, smart};
use std::panic::{AssertUnwindSafe, catch_unwind};

mod common;
use common::{Rng, rounds};

fn interesting(r: &mut Rng) -> u64 {
    let shift = r.below(64);
    match r.below(10) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => u64::MAX - r.below(64),
        4 => 1 << shift,
        5 => (1 << shift) - 1,
        6 => u32::MAX as u64,
        7 => (u32::MAX as u64) << 32 | r.below(1 << 16),
        8 => r.below(1 << 16),
        _ => r.next(),
    }
}

/// Mutates `seeds` (each padded to `len`) `rounds()` times and runs `f` on every image; a
/// panic fails the test with the image that caused it.
fn fuzz(name: &str, len: usize, seeds: &[Vec<u8>], f: impl Fn(&[u8])) {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ (name.len() as u64 * 0x1234_5678));
    let mut zeros = vec![0u8; len];
    let mut all = seeds.to_vec();
    all.push(std::mem::take(&mut zeros));
    for round in 0..rounds() {
        let mut img = all[(round % all.len() as u64) as usize].clone();
        img.resize(len, 0);
        let edits = 1 + r.below(4);
        for _ in 0..edits {
            if len >= 8 && r.below(4) != 0 {
                let w = r.below((len / 8) as u64) as usize * 8;
                img[w..w + 8].copy_from_slice(&interesting(&mut r).to_le_bytes());
            } else if len > 0 {
                let i = r.below(len as u64) as usize;
                img[i] = r.next() as u8;
            }
        }
        // Sometimes a short image: a READ cut short, a message of the wrong length.
        let cut = if r.below(16) == 0 {
            r.below(len as u64 + 1) as usize
        } else {
            len
        };
        let img = &img[..cut];
        if catch_unwind(AssertUnwindSafe(|| f(img))).is_err() {
            let words: Vec<(usize, u64)> = img
                .chunks(8)
                .enumerate()
                .map(|(i, w)| {
                    let mut b = [0u8; 8];
                    b[..w.len()].copy_from_slice(w);
                    (i * 8, u64::from_le_bytes(b))
                })
                .filter(|&(_, w)| w != 0)
                .collect();
            panic!(
                "{name}: the decoder panicked on round {round}, a {}-byte image whose nonzero \
                 words (offset, value) are {words:x?}",
                img.len()
            );
        }
    }
}

fn magic_at0(magic: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[..8].copy_from_slice(&magic.to_le_bytes());
    v
}

#[test]
fn region_header() {
    let good = region::RegionHeader::new(64 << 20, 1 << 20, 4096)
        .unwrap()
        .encode()
        .to_vec();
    fuzz("RegionHeader", region::HEADER_LEN, &[good], |b| {
        let _ = region::RegionHeader::decode(b);
    });
}

#[test]
fn canrt_decoders() {
    let len = canrt::TREE_HEADER_LEN;
    fuzz(
        "canrt::TreeHeader",
        len,
        &[magic_at0(canrt::TREE_MAGIC, len)],
        |b| {
            let _ = canrt::TreeHeader::decode(b);
        },
    );
    fuzz("canrt::Control", canrt::CONTROL_LEN, &[], |b| {
        let _ = canrt::Control::decode(b);
    });
    let g = canrt::DataGeometry::new(8, 16).unwrap();
    fuzz("canrt::DataItem", 64, &[], |b| {
        let _ = g.decode_item(b);
    });
    fuzz("canrt::Segment/Imm", 16, &[], |b| {
        if b.len() >= 16 {
            let w = u64::from_le_bytes(b[..8].try_into().unwrap());
            let v = u64::from_le_bytes(b[8..16].try_into().unwrap());
            let _ = canrt::Segment::decode([w, v]);
            let _ = canrt::Imm::decode(w as u32);
        }
    });
}

#[test]
fn erda_decoders() {
    let len = erda::SUPERBLOCK_LEN;
    let sb = magic_at0(erda::SUPERBLOCK_MAGIC, len);
    fuzz("erda::Superblock", len, &[sb], |b| {
        for region_len in [64 << 20, u64::MAX, 0, 1 << 47] {
            let _ = erda::Superblock::decode(b, region_len);
        }
    });
    fuzz("erda::Bucket", erda::BUCKET_LEN, &[], |b| {
        let _ = erda::Bucket::decode(b);
        if b.len() >= 8 {
            let _ = erda::Meta::decode(u64::from_le_bytes(b[..8].try_into().unwrap()));
        }
    });
    fuzz("erda::object", 256, &[], |b| {
        let _ = erda::decode_object(b);
        let _ = erda::check_key(b);
    });
    fuzz("erda::Request/Reply", erda::REQUEST_LEN, &[], |b| {
        let _ = erda::Request::decode(b);
        let _ = erda::Reply::decode(b);
    });
}

#[test]
fn catfish_decoders() {
    let meta = magic_at0(catfish::META_MAGIC, catfish::META_LEN);
    fuzz("catfish::Meta", catfish::META_LEN, &[meta], |b| {
        let _ = catfish::Meta::decode(b);
    });
    let mut node = vec![0u8; 1024];
    node[..4].copy_from_slice(&catfish::NODE_MAGIC.to_le_bytes());
    fuzz("catfish::Node", 1024, &[node], |b| {
        let _ = catfish::Node::decode(b);
        let _ = catfish::Rect::decode(b, 0);
        let _ = catfish::Rect::decode(b, usize::MAX - 3);
    });
    let mut req = vec![0u8; catfish::REQUEST_LEN];
    req[..2].copy_from_slice(&catfish::REQUEST_MAGIC.to_le_bytes());
    let mut resp = vec![0u8; 256];
    resp[..2].copy_from_slice(&catfish::RESPONSE_MAGIC.to_le_bytes());
    fuzz("catfish::messages", 256, &[req, resp], |b| {
        let _ = catfish::Request::decode(b);
        let _ = catfish::ResponseHeader::decode(b);
        for i in [0, 1, 7, usize::MAX / 2, usize::MAX] {
            let _ = catfish::decode_hit(b, i);
        }
    });
}

#[test]
fn smart_decoders() {
    fuzz("smart::words", 8, &[], |b| {
        if b.len() == 8 {
            let w = u64::from_le_bytes(b.try_into().unwrap());
            let _ = smart::Header::decode(w);
            let _ = smart::decode_reverse(w);
            let _ = smart::LeafStatus::decode(w);
            let _ = smart::LeafMeta::decode(w);
        }
    });
    fuzz("smart::LeafView", 512, &[], |b| {
        for n in [0, 8, 64, 136, 512] {
            if let Ok(v) = smart::LeafView::decode(&b[..n.min(b.len())]) {
                let _ = v.checksummed();
            }
        }
    });
    fuzz("smart::TreeMeta", 32, &[], |b| {
        let _ = smart::TreeMeta::decode(b);
    });
}

#[test]
fn sherman_decoders() {
    for (page, value) in [(256, 8), (1024, 32), (4096, 256)] {
        let g = sherman::Geometry::new(page, value).unwrap();
        fuzz("sherman::PageHeader", page, &[], |b| {
            let _ = sherman::PageHeader::decode(b, &g);
        });
    }
}

/// Cross-field validation of structs decoded elsewhere (or built by a server): every field
/// at a boundary value, no panic.
#[test]
fn header_validation_never_overflows() {
    let mut r = Rng(77);
    for _ in 0..rounds() {
        let mut w = || interesting(&mut r);
        let mut segments = [[0u64; 2]; canrt::MAX_SEGMENTS];
        for s in &mut segments {
            *s = [w(), w()];
        }
        let h = canrt::TreeHeader {
            magic: canrt::TREE_MAGIC,
            epoch: w() as u32,
            key_len: w() as u32,
            slots: w() as u32,
            value_cap: w() as u32,
            height: w() as u32,
            width: w() as u32,
            n_segments: (w() % 20) as u32,
            n_data: w() as u32,
            prefix_off: w(),
            prefix_len: w(),
            data_off: w(),
            data_node_size: w(),
            area_off: w(),
            area_len: w(),
            data_cap: w(),
            array_gen: w(),
            prefix_check: w(),
            header_check: w(),
            reserved: w(),
            segments,
        };
        let r1 = catch_unwind(AssertUnwindSafe(|| {
            let _ = h.validate();
        }));
        assert!(r1.is_ok(), "TreeHeader::validate panicked on {h:?}");
        let mut head_base = [0u64; erda::MAX_HEADS];
        for b in &mut head_base {
            *b = w();
        }
        let sb = erda::Superblock {
            magic: erda::SUPERBLOCK_MAGIC,
            version: erda::SUPERBLOCK_VERSION,
            heads: (w() % 10) as u32,
            buckets: w(),
            neighborhood: (w() % 70) as u32,
            max_clients: w() as u32,
            table_off: w(),
            mailbox_off: w(),
            segment_bytes: w(),
            head_bytes: w(),
            head_base,
        };
        for region_len in [w(), u64::MAX, 64 << 20] {
            let r2 = catch_unwind(AssertUnwindSafe(|| {
                let _ = sb.validate(region_len);
            }));
            assert!(
                r2.is_ok(),
                "Superblock::validate({region_len}) panicked on {sb:?}"
            );
        }
    }
}

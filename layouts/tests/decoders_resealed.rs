//! Every checksummed decoder, fed mutated images that were re-sealed with valid checksums.
//!
//! `decoders_fuzz.rs` mutates raw bytes, so almost every image stops at the checksum. A buggy
//! or hostile client writes valid checksums too: here each mutated image is sealed again the
//! way a writer seals it (the format's own `seal`, `rebind_entry`, or its CRC), so the checks
//! behind the checksum (lengths, offsets, counts) see the crafted values. Mutations start from
//! a valid image and change one to three fields or words, which keeps the other cross-field
//! rules passing and reaches the deep ones. Test builds keep overflow checks on: an overflow
//! on a crafted field fails here as the panic it would be. `REMORA_FUZZ_ROUNDS` sets the
//! rounds (default 20,000).
use remora_layouts::{canrt, catfish, erda, sherman};
use std::panic::{AssertUnwindSafe, catch_unwind};

mod common;
use common::{Rng, rounds};

// SMART leaves and internal nodes, CHIME leaves, CANRT data nodes: one module each.
#[path = "resealed/canrt_data.rs"]
mod canrt_data;
#[path = "resealed/chime.rs"]
mod chime;
#[path = "resealed/smart.rs"]
mod smart;

/// A boundary value, or a small perturbation of `near`.
fn interesting(r: &mut Rng, near: u64) -> u64 {
    let shift = r.below(64);
    match r.below(12) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => u64::MAX - r.below(512),
        4 => 1 << shift,
        5 => (1 << shift) - 1,
        6 => u32::MAX as u64,
        7 => near.wrapping_add(r.below(1024)),
        8 => near.wrapping_sub(r.below(1024)),
        9 => near.wrapping_mul(1 + r.below(4)),
        10 => r.below(1 << 16),
        _ => r.next(),
    }
}

/// Runs `f` and fails the test, naming the round and the input, if it panics.
fn no_panic(name: &str, round: u64, what: &dyn std::fmt::Debug, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        panic!("{name}: the decoder panicked on round {round} on a re-sealed input {what:x?}");
    }
}

/// Overwrites 1-3 aligned words of `img[from..]` with boundary values near their old ones.
fn mutate_words(r: &mut Rng, img: &mut [u8], from: usize) {
    let words = (img.len() - from) / 8;
    for _ in 0..1 + r.below(3) {
        let at = from + r.below(words as u64) as usize * 8;
        let old = u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
        let new = if r.below(3) == 0 {
            // A 32-bit field in either half of the word.
            let half = interesting(r, old & 0xffff_ffff) & 0xffff_ffff;
            if r.below(2) == 0 {
                (old & !0xffff_ffff) | half
            } else {
                (old & 0xffff_ffff) | half << 32
            }
        } else {
            interesting(r, old)
        };
        img[at..at + 8].copy_from_slice(&new.to_le_bytes());
    }
}

/// A valid CANRT tree header (8-byte keys, a 2-way prefix level over the top byte) and its
/// prefix array.
fn canrt_header() -> (canrt::TreeHeader, [u8; 16]) {
    use canrt::{DataGeometry, Segment, TreeHeader};
    let data = DataGeometry::new(16, 8).unwrap();
    let mut segments = [[0u64; 2]; canrt::MAX_SEGMENTS];
    segments[0] = Segment::Gap {
        lo: 8,
        width: 56,
        value: 0,
    }
    .encode();
    segments[1] = Segment::Level {
        lo: 0,
        width: 8,
        fanout: 2,
    }
    .encode();
    let mut prefix = [0u8; 16];
    prefix[0] = 2;
    let mut h = TreeHeader {
        magic: canrt::TREE_MAGIC,
        epoch: 1,
        key_len: 8,
        slots: 16,
        value_cap: 8,
        height: 1,
        width: 2,
        n_segments: 2,
        n_data: 2,
        prefix_off: 4096 + canrt::TREE_HEADER_LEN as u64,
        prefix_len: 16,
        data_off: 8192,
        data_node_size: data.node_size(),
        area_off: 4096,
        area_len: 4096,
        data_cap: 4,
        array_gen: 1,
        prefix_check: 0,
        header_check: 0,
        reserved: 0,
        segments,
    };
    h.seal(&prefix);
    assert!(
        TreeHeader::decode(&h.encode()).is_ok(),
        "the seed header must be valid, or the fuzzer tests only the first rule"
    );
    (h, prefix)
}

#[test]
fn canrt_tree_header_resealed() {
    let (good, prefix) = canrt_header();
    let mut r = Rng(0x00C4_A127);
    let mut accepted = 0u64;
    for round in 0..rounds() {
        let mut h = good;
        for _ in 0..1 + r.below(3) {
            let f = r.below(17);
            let v = |r: &mut Rng, old: u64| interesting(r, old);
            match f {
                0 => h.epoch = v(&mut r, h.epoch as u64) as u32,
                1 => h.key_len = v(&mut r, h.key_len as u64) as u32,
                2 => h.slots = v(&mut r, h.slots as u64) as u32,
                3 => h.value_cap = v(&mut r, h.value_cap as u64) as u32,
                4 => h.height = v(&mut r, h.height as u64) as u32,
                5 => h.width = v(&mut r, h.width as u64) as u32,
                6 => h.n_segments = v(&mut r, h.n_segments as u64) as u32,
                7 => h.n_data = v(&mut r, h.n_data as u64) as u32,
                8 => h.prefix_off = v(&mut r, h.prefix_off),
                9 => h.prefix_len = v(&mut r, h.prefix_len),
                10 => h.data_off = v(&mut r, h.data_off),
                11 => h.data_node_size = v(&mut r, h.data_node_size),
                12 => h.area_off = v(&mut r, h.area_off),
                13 => h.area_len = v(&mut r, h.area_len),
                14 => h.data_cap = v(&mut r, h.data_cap),
                15 => {
                    let i = r.below(canrt::MAX_SEGMENTS as u64) as usize;
                    let j = r.below(2) as usize;
                    h.segments[i][j] = v(&mut r, h.segments[i][j]);
                }
                _ => h.array_gen = v(&mut r, h.array_gen),
            }
        }
        h.seal(&prefix);
        let bytes = h.encode();
        no_panic("canrt::TreeHeader", round, &h, || {
            if let Ok(d) = canrt::TreeHeader::decode(&bytes) {
                accepted += 1;
                // What a client derives from an accepted header must not panic either.
                let _ = d.prefix();
                let _ = d.check_prefix(&prefix);
                for i in 0..canrt::MAX_SEGMENTS + 1 {
                    let _ = d.segment(i);
                }
                let _ = d.data_node_off(d.n_data.saturating_sub(1));
            }
        });
    }
    // Not a vacuous run: some mutations keep the header valid (epoch, array_gen, ...).
    assert!(
        accepted > 0,
        "no mutated header was accepted: the seed is wrong"
    );
}

fn page_header(version: u64, meta: u64) -> sherman::PageHeader {
    sherman::PageHeader {
        front_version: version,
        meta,
        sibling: 0,
        low_fence: 0,
        high_fence: u64::MAX,
        leftmost: 0,
        checksum: 0,
        reserved: 0,
    }
}

#[test]
fn sherman_pages_resealed() {
    let mut r = Rng(0x5BE4_3A11);
    let mut accepted = 0u64;
    for (page, value) in [(256, 8), (1024, 8), (1024, 32)] {
        let g = sherman::Geometry::new(page, value).unwrap();
        // A valid leaf with a few entries, and a valid internal page.
        let mut leaf = vec![0u8; page];
        let h = page_header(4, sherman::PageHeader::pack_meta(0, true, 3));
        h.encode(&mut leaf);
        for s in 0..3 {
            let at = g.leaf_entry_offset(s);
            let size = g.leaf_entry_size();
            sherman::encode_leaf_entry(
                &mut leaf[at..at + size],
                s as u64 * 7 + 1,
                &[s as u8; 8],
                1,
                true,
                4,
            );
        }
        sherman::seal(&mut leaf, &g);
        let mut internal = vec![0u8; page];
        let hi = page_header(2, sherman::PageHeader::pack_meta(1, false, 2));
        hi.encode(&mut internal);
        sherman::set_internal_entry(&mut internal, &g, 0, 0, 4096);
        sherman::set_internal_entry(&mut internal, &g, 1, 1000, 8192);
        sherman::seal(&mut internal, &g);
        for round in 0..rounds() {
            let mut img = if round % 2 == 0 {
                leaf.clone()
            } else {
                internal.clone()
            };
            mutate_words(&mut r, &mut img, 0);
            // Re-seal: every entry re-bound to the page's version, then the page.
            let bind = u64::from_le_bytes(img[0..8].try_into().unwrap());
            for s in 0..g.leaf_capacity() {
                let at = g.leaf_entry_offset(s);
                let size = g.leaf_entry_size();
                if img[at..at + 8] != [0u8; 8] {
                    sherman::rebind_entry(&mut img[at..at + size], bind);
                }
            }
            sherman::seal(&mut img, &g);
            no_panic("sherman page", round, &(page, value), || {
                let _ = sherman::PageHeader::decode_front_rear(&img, &g);
                if let Ok(h) = sherman::PageHeader::decode(&img, &g) {
                    accepted += 1;
                    let _ = h.covers(u64::MAX);
                    let _ = h.count();
                    if h.is_leaf() {
                        let _ = sherman::verify_leaf(&img, &g, bind, |_, _| {});
                        for s in 0..g.leaf_capacity() + 1 {
                            if let Ok(sherman::Slot::Live { len, .. }) =
                                sherman::leaf_slot(&img, &g, s, bind)
                            {
                                let _ = sherman::leaf_value(&img, &g, s, len);
                            }
                        }
                    } else {
                        for i in 0..h.count().min(g.internal_capacity() + 1) {
                            let _ = sherman::internal_entry(&img, &g, i);
                        }
                    }
                }
            });
        }
    }
    assert!(
        accepted > 0,
        "no re-sealed page decoded: the re-sealing is wrong"
    );
}

#[test]
fn erda_objects_resealed() {
    let mut r = Rng(0xE7DA_0B1E);
    let mut good = vec![0u8; 256];
    let len = erda::encode_object(&mut good, b"some-key", &[7u8; 40], false).unwrap();
    let mut accepted = 0u64;
    for round in 0..rounds() {
        let mut img = good.clone();
        mutate_words(&mut r, &mut img[..len + 64], 0);
        // Re-seal with the CRC over what the (mutated) header says the object covers,
        // wherever that fits the image.
        let hdr = u64::from_le_bytes(img[0..8].try_into().unwrap());
        let k = erda::OBJ_KEY_LEN.get(hdr) as usize;
        let v = erda::OBJ_VALUE_LEN.get(hdr) as usize;
        if let Ok(n) = erda::object_len_from_header(&img)
            && n <= img.len()
        {
            let end = 16 + k + v;
            if end <= img.len() {
                let sum = erda::object_crc_sw(&img[0..8], &img[16..end]);
                img[8..16].copy_from_slice(&(sum as u64).to_le_bytes());
            }
        }
        no_panic("erda object", round, &hdr, || {
            if let Ok(o) = erda::decode_object(&img) {
                accepted += 1;
                let _ = erda::check_key(o.key);
            }
            let _ = erda::decode_object(&img[..len]);
        });
    }
    assert!(
        accepted > 0,
        "no re-sealed object decoded: the re-sealing is wrong"
    );
}

#[test]
fn catfish_nodes_resealed() {
    let mut r = Rng(0xCA7F_1540);
    let mut accepted = 0u64;
    for fanout in [catfish::MIN_FANOUT, catfish::FANOUT, catfish::MAX_FANOUT] {
        let mut n = catfish::Node::with_fanout(1, fanout);
        for i in 0..fanout.min(5) as i32 {
            n.push(catfish::Entry {
                rect: catfish::Rect::new(i, i, i + 10, i + 3).unwrap(),
                ptr: 4096 * (i as u64 + 1),
            })
            .unwrap();
        }
        let good = n.encode(6);
        let len = catfish::node_len(fanout);
        let cs = catfish::node_checksum_offset(fanout);
        for round in 0..rounds() / 3 {
            let mut img = good.as_bytes()[..len].to_vec();
            mutate_words(&mut r, &mut img[..cs], 0);
            // Re-seal: tail version = head version (made even), checksum over the image.
            let head = u64::from_le_bytes(img[0..8].try_into().unwrap()) & !1;
            img[0..8].copy_from_slice(&head.to_le_bytes());
            img[cs + 8..cs + 16].copy_from_slice(&head.to_le_bytes());
            let sum = crc::Crc::<u64>::new(&crc::CRC_64_ECMA_182).checksum(&img[..cs]);
            img[cs..cs + 8].copy_from_slice(&sum.to_le_bytes());
            no_panic("catfish node", round, &fanout, || {
                if let Ok(d) = catfish::Node::decode_with(&img, fanout) {
                    accepted += 1;
                    let _ = d.mbr();
                    let _ = d.birth();
                    for e in d.entries() {
                        let _ = e.rect.area();
                        let _ = e.rect.union(&e.rect);
                    }
                }
            });
        }
    }
    assert!(
        accepted > 0,
        "no re-sealed node decoded: the re-sealing is wrong"
    );
}

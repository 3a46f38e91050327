//! The code paths the calibration times: one [`Case`] per (code path, size), each stating
//! the [`Work`] the index code charges for one run of it.
//!
//! Every case runs the function the indexes call (`remora_layouts` and `remora_core`'s public
//! functions) on an input behind [`black_box`], and black-boxes the result, so the compiler
//! can neither hoist the work out of the timing loop nor drop it. Four paths are private to
//! their index's module and are composed here from the same public pieces, line for line:
//! Sherman's `route_for` (the binary search of an internal page, `core/src/sherman/cache.rs`),
//! SMART's `NodeImg::decode` and `check_leaf` (`core/src/smart/remote.rs`), and the entry
//! loop of Catfish's offloaded search (`core/src/catfish/client/offload.rs`).
use super::super::ycsb::{Distribution, KeyChooser, KeyType, Rng, key_of_within};
use remora::core::erda::object_checksum;
use remora::core::work::Work;
use remora::layouts::catfish::{
    Entry, FANOUT, MAX_FANOUT, Node, Rect, node_checksum_offset, node_crc,
};
use remora::layouts::chime::{
    Entry as ChimeEntry, GROUP_LEN, GroupHeader, NEIGHBOURHOOD, decode_group, encode_group,
};
use remora::layouts::sherman::{
    Geometry, KEY_INFINITY, PageHeader, encode_leaf_entry, seal, set_internal_entry, verify_leaf,
};
use remora::layouts::smart::{
    Header, LEAF_CRC_OFFSET, LeafStatus, LeafView, NODE_HEADER_OFFSET, NODE_REV_OFFSET,
    NODE_SLOTS_OFFSET, NodeType, encode_leaf, leaf_bytes, leaf_crc, leaf_crc_table,
};
use std::collections::BTreeMap;
use std::hint::black_box;

/// One timed code path: `run(n)` runs it `n` times.
pub(crate) struct Case {
    /// The code path, as the table names it.
    pub what: &'static str,
    /// The work the index code charges for one run (`None`: a floor another case subtracts).
    pub work: Option<Work>,
    /// A floor case (by index) whose time per run is subtracted from this one's.
    pub minus: Option<usize>,
    pub run: Box<dyn FnMut(u32)>,
}

fn case(what: &'static str, work: Work, run: impl FnMut(u32) + 'static) -> Case {
    Case {
        what,
        work: Some(work),
        minus: None,
        run: Box::new(run),
    }
}

/// A sealed Sherman internal page with `n` separators.
fn internal_page(g: &Geometry, n: usize) -> Vec<u8> {
    let mut p = vec![0u8; g.page_size];
    let h = PageHeader {
        front_version: 2,
        meta: PageHeader::pack_meta(1, false, n),
        low_fence: 0,
        high_fence: KEY_INFINITY,
        leftmost: 8,
        ..Default::default()
    };
    h.encode(&mut p);
    for i in 0..n {
        set_internal_entry(&mut p, g, i, 100 * (i as u64 + 1), 64 * (i as u64 + 2));
    }
    seal(&mut p, g);
    p
}

/// A sealed, full Sherman leaf.
fn full_leaf(g: &Geometry) -> Vec<u8> {
    let mut p = vec![0u8; g.page_size];
    let v = 4;
    let h = PageHeader {
        front_version: v,
        meta: PageHeader::pack_meta(0, true, 0),
        low_fence: 0,
        high_fence: KEY_INFINITY,
        ..Default::default()
    };
    h.encode(&mut p);
    for s in 0..g.leaf_capacity() {
        let at = g.leaf_entry_offset(s);
        let out = &mut p[at..at + g.leaf_entry_size()];
        encode_leaf_entry(out, 1000 + s as u64, &[7u8; 8], 1, true, v);
    }
    seal(&mut p, g);
    p
}

/// A SMART inner node image of type `ty`, every slot filled.
fn smart_node(ty: NodeType) -> Vec<u8> {
    let mut b = vec![0u8; ty.bytes()];
    let h = Header::new(2, ty, &[1, 2]).expect("a header");
    b[NODE_HEADER_OFFSET..NODE_HEADER_OFFSET + 8].copy_from_slice(&h.raw().to_le_bytes());
    b[NODE_REV_OFFSET..NODE_REV_OFFSET + 8].copy_from_slice(&0x40u64.to_le_bytes());
    for i in 0..ty.capacity() {
        let at = NODE_SLOTS_OFFSET + 8 * i;
        let raw = (0x1000u64 + 64 * i as u64) << 16 | (i as u64 & 0xff);
        b[at..at + 8].copy_from_slice(&raw.to_le_bytes());
    }
    b
}

/// A SMART leaf with an 8-byte key and a full value area of `cap` bytes, its checksum
/// set, as a writer leaves it.
fn smart_leaf(cap: usize) -> Vec<u8> {
    let mut b = vec![0u8; leaf_bytes(8, cap)];
    let value = vec![9u8; cap];
    encode_leaf(
        &mut b,
        0x40,
        LeafStatus::live(true),
        0,
        &7u64.to_be_bytes(),
        &value,
        cap,
    )
    .expect("a leaf");
    let c = smart_check_leaf(&b).map_or_else(|c| c, |_| 0);
    b[LEAF_CRC_OFFSET..LEAF_CRC_OFFSET + 8].copy_from_slice(&c.to_le_bytes());
    assert!(smart_check_leaf(&b).is_ok(), "the leaf checks");
    b
}

/// SMART's `check_leaf` (core/src/smart/remote.rs): the leaf decoded, its CRC-64/XZ over
/// the valid bit and the checksummed bytes compared with the stored one. `Err`: the
/// computed checksum (or 0 if the image does not decode).
fn smart_check_leaf(bytes: &[u8]) -> Result<u64, u64> {
    let v = LeafView::decode(bytes).map_err(|_| 0u64)?;
    let c = leaf_crc(v.status.is_valid(), v.checksummed());
    if c != v.checksum {
        return Err(c);
    }
    Ok(v.lock)
}

/// A cached page as Sherman's index cache keeps one (high fence, header, image, counter).
struct Cached {
    _high: u64,
    _header: PageHeader,
    page: Vec<u8>,
    _freq: u32,
}

/// Every case, in table order.
pub(crate) fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // CRC-32C through Erda's object checksum (header word + key + value), both sides of its
    // hardware threshold (CANRT's item checksums are the same function's table line).
    let buf: &'static [u8] = Vec::leak(vec![0x5au8; 8192]);
    for (what, len) in [
        ("erda object_checksum, 40 B", 40usize),
        ("erda object_checksum, 120 B", 120),
        ("erda object_checksum, 256 B", 256),
        ("erda object_checksum, 1 KiB", 1024),
        ("erda object_checksum, 4 KiB", 4000),
    ] {
        v.push(case(what, Work::Crc32c(len), move |n| {
            for i in 0..n as usize {
                let b = black_box(&buf[8 + (i & 7)..len + (i & 7)]);
                black_box(object_checksum(black_box(&buf[..8]), b));
            }
        }));
    }
    // CRC-64, slice-by-16 tables: the line SMART's leaf checksum takes on a CPU without the
    // carry-less multiply (layouts::smart::leaf_crc_table, its fallback). No index charges it
    // on a CPU with PCLMULQDQ.
    for (what, len) in [
        ("smart leaf_crc_table (no clmul), 64 B", 64usize),
        ("smart leaf_crc_table (no clmul), 1 KiB", 1024),
    ] {
        v.push(case(what, Work::Crc64(len), move |n| {
            for i in 0..n as usize {
                black_box(leaf_crc_table(
                    true,
                    black_box(&buf[(i & 7)..len - 1 + (i & 7)]),
                ));
            }
        }));
    }
    // LeafCheck: SMART's leaf check (check_leaf: LeafView::decode, then layouts::smart::
    // leaf_crc, CRC-64/XZ by carry-less multiply, over the valid bit, meta word, key and
    // value area), as read_leaf runs it on every leaf it reads, by the leaf's bytes.
    for (what, cap) in [
        ("smart check_leaf (clmul), 64 B leaf", 8usize),
        ("smart check_leaf (clmul), 256 B leaf", 208),
        ("smart check_leaf (clmul), 1 KiB leaf", 976),
    ] {
        let bytes = leaf_bytes(8, cap);
        let leaves: &'static [Vec<u8>] = Vec::leak((0..8).map(|_| smart_leaf(cap)).collect());
        v.push(case(what, Work::LeafCheck(bytes), move |n| {
            for i in 0..n as usize {
                black_box(smart_check_leaf(black_box(&leaves[i & 7])).ok());
            }
        }));
    }
    // CRC-64/ECMA-182 by carry-less multiply: Catfish's node check (layouts::catfish::
    // node_crc over head version + entries) at the default fanout, 30 and the largest.
    for (what, fanout) in [
        ("catfish node_crc (clmul), fanout 16", FANOUT),
        ("catfish node_crc (clmul), fanout 30", 30),
        ("catfish node_crc (clmul), fanout 130", MAX_FANOUT),
    ] {
        let len = node_checksum_offset(fanout);
        v.push(case(what, Work::Crc64Clmul(len), move |n| {
            for i in 0..n as usize {
                black_box(node_crc(black_box(&buf[(i & 7)..len + (i & 7)])));
            }
        }));
    }
    let g = Geometry::new(1024, 8).expect("Sherman's geometry");
    // Decode: a Sherman internal page checked and decoded (layouts::sherman::PageHeader::
    // decode; the checksum covers the page, so Sherman charges the page's bytes).
    let page: &'static [u8] = Vec::leak(internal_page(&g, g.internal_capacity()));
    v.push(case(
        "sherman PageHeader::decode, internal 1 KiB",
        Work::Decode(g.page_size),
        move |n| {
            for _ in 0..n {
                black_box(PageHeader::decode(black_box(page), &g).ok());
            }
        },
    ));
    // Decode: a Sherman leaf's header (its checksum covers the header only, the slots are
    // checked by the scan; Sherman charges 64 bytes).
    let leaf: &'static [u8] = Vec::leak(full_leaf(&g));
    v.push(case(
        "sherman PageHeader::decode, leaf header",
        Work::Decode(64),
        move |n| {
            for _ in 0..n {
                black_box(PageHeader::decode(black_box(leaf), &g).ok());
            }
        },
    ));
    // GroupDecode: a CHIME group verified and its 8 entries decoded (layouts::chime::
    // decode_group, as CHIME's reads run it per group).
    let mut group = vec![0u8; GROUP_LEN];
    let entries: [ChimeEntry; NEIGHBOURHOOD] = core::array::from_fn(|i| ChimeEntry {
        live: true,
        len: 8,
        hop: 1,
        key: 1000 + i as u64,
        value: [7; 8],
    });
    let gh = GroupHeader {
        stamps: GroupHeader::pack(3, 2, 4),
        sibling: 0x40,
    };
    encode_group(&gh, &entries, &mut group);
    let group: &'static [u8] = Vec::leak(group);
    v.push(case(
        "chime decode_group, 8 entries",
        Work::GroupDecode(1),
        move |n| {
            let mut es = [ChimeEntry::default(); NEIGHBOURHOOD];
            for _ in 0..n {
                black_box(decode_group(black_box(group), &mut es).ok());
                black_box(&es);
            }
        },
    ));
    // NodeDecode: SMART inner nodes (NodeImg::decode; SMART charges the node's slots).
    for (what, ty) in [
        ("smart NodeImg::decode, Node4", NodeType::N4),
        ("smart NodeImg::decode, Node16", NodeType::N16),
        ("smart NodeImg::decode, Node48", NodeType::N48),
        ("smart NodeImg::decode, Node256", NodeType::N256),
    ] {
        let img: &'static [u8] = Vec::leak(smart_node(ty));
        v.push(case(what, Work::NodeDecode(ty.capacity()), move |n| {
            for _ in 0..n {
                black_box(remora::core::smart::calibrate_node_decode(
                    ty,
                    black_box(img),
                ));
            }
        }));
    }
    // Scan: every slot of a full Sherman leaf verified and matched (layouts::sherman::
    // verify_leaf, as core::sherman's find_in_leaf and scans call it).
    v.push(case(
        "sherman verify_leaf, 39 slots",
        Work::Scan(g.leaf_capacity()),
        move |n| {
            for _ in 0..n {
                let mut found = 0u64;
                let r = verify_leaf(black_box(leaf), &g, 4, |s, _| found += s as u64);
                black_box((r.is_ok(), found));
            }
        },
    ));
    // Compare: the binary search of an internal page (Sherman's route_for, as its descent
    // runs it), charged as search_steps(count) steps, on pages of 4, 15 and 59 (full)
    // separators; the keys drawn beforehand.
    for (what, count) in [
        ("sherman route_for, 4 entries", 4usize),
        ("sherman route_for, 15 entries", 15),
        (
            "sherman route_for, 59 entries (full)",
            g.internal_capacity(),
        ),
    ] {
        let page: &'static [u8] = Vec::leak(internal_page(&g, count));
        let h = PageHeader::decode(page, &g).expect("a sealed page");
        let steps = (usize::BITS - count.leading_zeros()) as usize;
        let mut rng = Rng::new(5);
        let keys: Vec<u64> = (0..4096)
            .map(|_| rng.below(100 * (count as u64 + 2)))
            .collect();
        v.push(case(what, Work::Compare(steps), move |n| {
            for i in 0..n as usize {
                let key = black_box(keys[i & 4095]);
                black_box(remora::core::sherman::calibrate_route(
                    black_box(page),
                    &g,
                    black_box(&h),
                    key,
                ));
            }
        }));
    }
    // Probe: Sherman's index cache (per level a BTreeMap of pages by low fence; a lookup is
    // the page with the largest low fence <= key), 4096 cached pages.
    let mut cache: BTreeMap<u64, Cached> = BTreeMap::new();
    for i in 0..4096u64 {
        let c = Cached {
            _high: (i + 1) * 1_000_003,
            _header: PageHeader::default(),
            page: vec![i as u8; 16],
            _freq: 0,
        };
        cache.insert(i * 1_000_003, c);
    }
    let mut rng = Rng::new(7);
    let keys: Vec<u64> = (0..4096).map(|_| rng.below(4096 * 1_000_003)).collect();
    v.push(case(
        "sherman index cache probe, 4096 pages",
        Work::Probe(1),
        move |n| {
            for i in 0..n as usize {
                let k = black_box(keys[i & 4095]);
                black_box(cache.range(..=k).next_back().map(|(_, c)| c.page[0]));
            }
        },
    ));
    // Sort: batches of (key, slot, len) entries, as a Sherman or CANRT scan sorts a leaf's
    // (sort_unstable_by_key on the key), of 8, 20 and 39 (a full leaf) entries. Each run
    // copies a 39-entry batch and sorts its first n; the copy alone is a floor case.
    let mut rng = Rng::new(11);
    let shuffled: &'static [[(u64, usize, usize); 39]] = Vec::leak(
        (0..64)
            .map(|_| core::array::from_fn(|s| (rng.next_u64(), s, 8)))
            .collect(),
    );
    let floor = v.len();
    v.push(Case {
        what: "copy of 39 scan entries (floor)",
        work: None,
        minus: None,
        run: Box::new(move |n| {
            for i in 0..n as usize {
                black_box(*black_box(&shuffled[i & 63]));
            }
        }),
    });
    for (what, len) in [
        ("sort of 8 scan entries", 8usize),
        ("sort of 20 scan entries", 20),
        ("sort of 39 scan entries", 39),
    ] {
        v.push(Case {
            minus: Some(floor),
            ..case(what, Work::Sort(len), move |n| {
                for i in 0..n as usize {
                    let mut b = *black_box(&shuffled[i & 63]);
                    b[..len].sort_unstable_by_key(|e| e.0);
                    black_box(b);
                }
            })
        });
    }
    // Rect: the entry loop of Catfish's offloaded search (core/src/catfish/client/offload.rs)
    // over a node's entries: each entry's rectangle tested against the window, the hits
    // collected; 16 different nodes in turn, so the branch predictor cannot learn one.
    let window = Rect::new(1 << 18, 1 << 18, 1 << 19, 1 << 19).expect("a window");
    for (what, fanout) in [
        ("catfish search loop, 16 entries", FANOUT),
        ("catfish search loop, 130 entries", MAX_FANOUT),
    ] {
        let mut rng = Rng::new(13);
        let nodes: Vec<Node> = (0..16)
            .map(|_| {
                let mut node = Node::with_fanout(0, fanout);
                for p in 0..fanout as u64 {
                    let (x, y) = (rng.below(1 << 20) as i32, rng.below(1 << 20) as i32);
                    let rect = Rect::new(x, y, x + 500, y + 500).expect("a rectangle");
                    node.push(Entry { rect, ptr: p }).expect("room in the node");
                }
                node
            })
            .collect();
        let mut out: Vec<Entry> = Vec::with_capacity(MAX_FANOUT);
        let mut next: Vec<u64> = Vec::with_capacity(MAX_FANOUT);
        v.push(case(what, Work::Rect(fanout), move |n| {
            for i in 0..n as usize {
                let node = black_box(&nodes[i & 15]);
                let w = black_box(window);
                out.clear();
                next.clear();
                remora::core::catfish::calibrate_rect(node, &w, &mut out, &mut next);
                black_box((out.len(), next.len()));
            }
        }));
    }
    // KeyGen: the bench's zipfian chooser and key bytes (bench::ycsb, per operation).
    let mut chooser = KeyChooser::over(Distribution::Zipfian, 1_000_000, 0.99, None);
    let mut rng = Rng::new(17);
    let mut key = [0u8; 32];
    v.push(case(
        "ycsb zipfian key, 8 B int",
        Work::KeyGen(1),
        move |n| {
            for _ in 0..n {
                let k = chooser.next(&mut rng, black_box(1_000_000));
                black_box(key_of_within(KeyType::Int, k, &mut key, 32));
            }
        },
    ));
    v
}

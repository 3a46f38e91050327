//! Bulk loads of variable-length (string) keys (`bulk.rs`) against inserts of the same keys,
//! on the in-memory fabric: the two trees must print the same census (every node's depth,
//! prefix and type, its children by partial key; every leaf's size, key, value, status and
//! reverse pointer), every key must read back, and bad key sets must be refused.
//!
//! Inserts in a shuffled order build the loaded tree wherever no prefix chain is cut by a
//! later key (short keys here); with prefix chains, the inserts run top down (each
//! divergence met before the ones below it: [`top_down`]), the order whose chains the load's
//! are (see `bulk.rs`).
extern crate std;
use super::remote::check_leaf;
use super::tests::{MemEp, block, endpoint, memory};
use super::*;
use core::fmt::Write as _;
use remora_layouts::smart::SlotKind;
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

fn cfg(t: Techniques) -> SmartConfig {
    SmartConfig::new(t, KeyMode::Variable, 8)
}

/// A key's value in both trees.
fn value(key: &[u8]) -> [u8; 8] {
    super::local::hash_key(key).to_le_bytes()
}

/// The tree below the node at `addr` (type `ty`, parent `parent`), printed canonically:
/// children in partial-key order, leaves checked (checksum, live, unlocked, reverse pointer
/// naming their parent) and printed with their key and value.
fn census(s: &Smart<'_, MemEp>, addr: GlobalAddr, ty: NodeType, out: &mut String) {
    let img = block(s.read_node(addr, ty)).unwrap();
    let h = img.header;
    let p = h.prefix();
    let _ = write!(
        out,
        "{:?}@{}[{:?}]{{",
        h.node_type(),
        h.depth(),
        &p[..h.prefix_len()]
    );
    let mut kids: Vec<(u8, SlotKind)> = img.slots[..ty.capacity()]
        .iter()
        .filter(|x| !x.is_empty())
        .map(|x| (x.pkey(), x.kind().unwrap()))
        .collect();
    kids.sort_by_key(|k| k.0);
    for (pkey, kind) in kids {
        let _ = write!(out, "{pkey}:");
        match kind {
            SlotKind::Leaf {
                addr: la, bytes, ..
            } => {
                let mut buf = vec![0u8; bytes];
                block(s.read(la, &mut buf)).unwrap();
                let v = check_leaf(&buf).unwrap();
                assert_eq!(v.reverse, addr.pack48().unwrap(), "leaf reverse pointer");
                assert!(v.status.is_valid() && v.lock == 0, "live, unlocked leaf");
                let _ = write!(out, "L{bytes}{:?}={:?},", v.key, v.value);
            }
            SlotKind::Node { addr: na, ty, .. } => {
                if s.cfg.techniques.lock_free_internal {
                    let mut w = [0u8; 8];
                    block(s.read(na, &mut w)).unwrap();
                    assert_eq!(u64::from_le_bytes(w), addr.pack48().unwrap(), "node rev");
                }
                census(s, na, ty, out);
                out.push(',');
            }
            other => panic!("unexpected slot {other:?}"),
        }
    }
    out.push('}');
}

/// Internal nodes below the root by type, as [`BulkStats::nodes`] counts them.
fn node_types(s: &Smart<'_, MemEp>) -> [u64; 4] {
    let mut n = [0u64; 4];
    let mut todo = vec![(s.root, NodeType::N256)];
    while let Some((addr, ty)) = todo.pop() {
        if addr != s.root {
            n[ty as usize] += 1;
        }
        let img = block(s.read_node(addr, ty)).unwrap();
        for x in &img.slots[..ty.capacity()] {
            if let Ok(SlotKind::Node { addr, ty, .. }) = x.kind() {
                todo.push((addr, ty));
            }
        }
    }
    n
}

/// The order in which inserts build the loaded tree, prefix chains included: under each
/// node, one key of every child group first (the first of them is already in place, as the
/// leaf the second splits), then each group's own keys the same way. `keys` sorted.
fn top_down(keys: &[Vec<u8>]) -> Vec<usize> {
    fn enc(k: &[u8], q: usize) -> u8 {
        k.get(q).copied().unwrap_or(0)
    }
    /// Child groups of `lo..hi` split at byte `q`.
    fn groups(keys: &[Vec<u8>], lo: usize, hi: usize, q: usize) -> Vec<(usize, usize)> {
        let mut g = Vec::new();
        let mut i = lo;
        while i < hi {
            let b = enc(&keys[i], q);
            let j = i + keys[i..hi].partition_point(|k| enc(k, q) == b);
            g.push((i, j));
            i = j;
        }
        g
    }
    fn below(keys: &[Vec<u8>], lo: usize, hi: usize, start: usize, out: &mut Vec<usize>) {
        if hi - lo < 2 {
            return;
        }
        let (a, b) = (&keys[lo], &keys[hi - 1]);
        let q = (start..).find(|&q| enc(a, q) != enc(b, q)).unwrap();
        let g = groups(keys, lo, hi, q);
        out.extend(g[1..].iter().map(|x| x.0));
        for (i, j) in g {
            below(keys, i, j, q + 1, out);
        }
    }
    let mut out = Vec::new();
    let g = groups(keys, 0, keys.len(), 0);
    out.extend(g.iter().map(|x| x.0));
    for (i, j) in g {
        below(keys, i, j, 1, &mut out);
    }
    assert_eq!(out.len(), keys.len());
    out
}

/// Bulk-loads `keys` (sorted) into one tree and inserts them in `order` into another; the
/// censuses must agree, the load's node counts must be the tree's, and every key reads back
/// from the loaded tree (through a handle opened after the load).
fn same_as_inserted(t: Techniques, keys: &[Vec<u8>], order: &[usize]) {
    let (mb, mi) = (memory(32 << 20), memory(32 << 20));
    let (eb, ei) = (endpoint(&mb), endpoint(&mi));
    let loader = block(Smart::open(&eb, cfg(t))).unwrap();
    let st = block(loader.bulk_load(keys, &mut |i, out| {
        out[..8].copy_from_slice(&value(&keys[i]));
        8
    }))
    .unwrap();
    assert_eq!(st.keys, keys.len() as u64);
    let ins = block(Smart::open(&ei, cfg(t))).unwrap();
    for &i in order {
        block(ins.upsert(&keys[i], &value(&keys[i]))).unwrap();
    }
    let (mut a, mut b) = (String::new(), String::new());
    let bulk = block(Smart::open(&eb, cfg(t))).unwrap();
    census(&bulk, bulk.root, NodeType::N256, &mut a);
    census(&ins, ins.root, NodeType::N256, &mut b);
    assert_eq!(a, b, "{t:?}: bulk-loaded (left) and inserted trees differ");
    assert_eq!(st.nodes, node_types(&bulk), "the load's node counts");
    assert_eq!(st.nodes, node_types(&ins));
    let mut out = [0u8; 8];
    for k in keys {
        assert_eq!(block(bulk.get(k, &mut out)).unwrap(), Some(8), "{k:?}");
        assert_eq!(out, value(k));
    }
    // A scan from the start returns the keys in their order.
    let mut got = Vec::new();
    block(bulk.scan(b"\x01", keys.len() + 1, &mut |k, _| got.push(k.to_vec()))).unwrap();
    assert_eq!(got, keys);
}

fn sorted(mut keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    keys.sort();
    keys.dedup();
    keys
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Keys that are prefixes of others, long shared prefixes (chains of several Node4s), 1-byte
/// and 255-byte keys, and enough children under one byte for every node type (`x` and `x`
/// followed by each non-NUL byte: 256 children, the terminator's among them).
fn edge_keys() -> Vec<Vec<u8>> {
    let long = b"the-shared-prefix-is-longer-than-a-header-holds/";
    let mut k: Vec<Vec<u8>> = [&b"a"[..], b"ab", b"abc", b"abd", b"abcd", b"b", b"z"]
        .iter()
        .map(|x| x.to_vec())
        .collect();
    for i in 0..300u32 {
        let mut x = long.to_vec();
        x.extend(format!("{i}").bytes());
        k.push(x);
    }
    k.push(long[..30].to_vec());
    k.push(vec![b'q'; 255]);
    k.push(vec![b'q'; 254]);
    k.push([vec![b'q'; 200], b"r".to_vec()].concat());
    k.push(b"x".to_vec());
    for b in 1..=255u8 {
        k.push(vec![b'x', b]);
    }
    for n in [3usize, 14, 40] {
        for b in 0..n as u8 {
            k.push(vec![b'm', n as u8, b'a' + b % 26, b'0' + b / 26]);
        }
    }
    sorted(k)
}

#[test]
fn edge_keys_load_as_they_insert() {
    let keys = edge_keys();
    for t in [Techniques::SMART, Techniques::BASELINE] {
        same_as_inserted(t, &keys, &top_down(&keys));
    }
}

#[test]
fn single_and_one_byte_keys_load_as_they_insert() {
    let one = vec![b"k".to_vec()];
    same_as_inserted(Techniques::SMART, &one, &[0]);
    let bytes = sorted((1..=255u8).map(|b| vec![b]).collect());
    same_as_inserted(Techniques::SMART, &bytes, &top_down(&bytes));
    let few = sorted([1u8, 7, 255].iter().map(|&b| vec![b]).collect());
    same_as_inserted(Techniques::SMART, &few, &[2, 0, 1]);
}

#[test]
fn random_key_sets_load_as_they_insert() {
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for set in 0..24 {
        // Short keys over a few letters: keys that are prefixes of others, no chain.
        let short = set % 2 == 0;
        let n = 1 + xorshift(&mut rng) % 400;
        let keys = sorted(
            (0..n)
                .map(|_| {
                    let len = 1 + xorshift(&mut rng) % if short { 5 } else { 60 };
                    let shared = if short { 0 } else { xorshift(&mut rng) % 30 };
                    (0..len)
                        .map(|p| {
                            if p < shared {
                                b'P'
                            } else {
                                b'a' + (xorshift(&mut rng) % 4) as u8
                            }
                        })
                        .collect()
                })
                .collect(),
        );
        let order = if short {
            // Any insert order builds the tree: a shuffled one.
            let mut o: Vec<usize> = (0..keys.len()).collect();
            for i in (1..o.len()).rev() {
                o.swap(i, (xorshift(&mut rng) % (i as u64 + 1)) as usize);
            }
            o
        } else {
            top_down(&keys)
        };
        same_as_inserted(Techniques::SMART, &keys, &order);
    }
}

#[test]
fn bad_string_key_sets_are_refused() {
    let m = memory(8 << 20);
    let ep = endpoint(&m);
    let s = block(Smart::open(&ep, cfg(Techniques::SMART))).unwrap();
    let mut none = |_: usize, _: &mut [u8]| 0;
    let cases: [(&[&[u8]], &str); 5] = [
        (&[b"a", b"b\0c"], "NUL"),
        (&[b"", b"a"], "1..=255"),
        (&[b"ab", b"a"], "ascending"),
        (&[b"ab", b"ab"], "ascending"),
        (&[b"a", &[b'x'; 256]], "1..=255"),
    ];
    for (keys, why) in cases {
        let e = block(s.bulk_load(keys, &mut none)).unwrap_err();
        assert!(std::format!("{e}").contains(why), "{keys:?}: {e}");
    }
    // Nothing was written: the tree is still empty and takes a good load.
    let root = block(s.read_node(s.root, NodeType::N256)).unwrap();
    assert!(root.slots.iter().all(|x| x.is_empty()));
    let st = block(s.bulk_load(&[&b"a"[..], b"ab"], &mut none)).unwrap();
    assert_eq!((st.keys, st.nodes), (2, [1, 0, 0, 0]));
    // A loaded tree takes no second load.
    assert!(block(s.bulk_load(&[b"c"], &mut none)).is_err());
}

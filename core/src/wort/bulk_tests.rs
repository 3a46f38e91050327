//! Bulk loading against inserts and a BTreeMap, on a plain in-memory region (the server
//! path, the bench's image and a restart are tested in poller/tests/wort_bulk.rs).
use super::super::layout::{Kind, Ptr, SB_ROOT, VALUE_MAX, decode_leaf_header, leaf_len};
use super::super::nodes::{self, Children};
use super::super::tests::{Mem, key, rng};
use super::super::tree::Tree;
use super::BulkStats;
use crate::server::LocalRegion;
use std_alloc::collections::BTreeMap;
use std_alloc::format;
use std_alloc::vec;
use std_alloc::vec::Vec;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// `n` random keys of the shared-prefix generator (lengths 1..=16, a small alphabet and
/// some wide bytes) with values of 1..=12 bytes; a key drawn twice keeps its last value.
fn model(seed: u64, n: usize) -> Model {
    let mut s = seed;
    let mut k = [0u8; 16];
    let mut m = Model::new();
    for i in 0..n {
        let kl = key(&mut s, &mut k);
        let v: Vec<u8> = (0..1 + i % 12).map(|j| (i + j) as u8).collect();
        m.insert(k[..kl].to_vec(), v);
    }
    m
}

fn pairs(m: &Model) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The tree's bytes in pre-order with every child word's offset left out (its tag kept):
/// each node's whole image (header, bitmap, key slots, NODE48 index, child tags), each
/// leaf's bytes.
fn shape(r: &Mem, t: &Tree) -> Vec<u8> {
    let mut out = Vec::new();
    walk(r, r.load_u64(t.sb + SB_ROOT).unwrap(), &mut out);
    out
}

fn walk(r: &Mem, word: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&(word & 0x3F).to_le_bytes());
    let p = Ptr::decode(word).unwrap();
    match p {
        Ptr::Null => {}
        Ptr::Leaf(o) => {
            let (_, vl) = decode_leaf_header(r.load_u64(o).unwrap()).unwrap();
            let mut b = vec![0u8; leaf_len(vl)];
            r.read(o, &mut b).unwrap();
            out.extend_from_slice(&b);
        }
        _ => {
            let mut b = vec![0u8; nodes::node_len(p)];
            r.read(p.offset(), &mut b).unwrap();
            let mut ch = Children::new();
            nodes::children(r, p, &mut ch).unwrap();
            for c in ch.as_slice() {
                let at = (c.slot - p.offset()) as usize;
                b[at..at + 8].copy_from_slice(&(c.word & 0x3F).to_le_bytes());
            }
            out.extend_from_slice(&b);
            for c in ch.as_slice() {
                walk(r, c.word, out);
            }
        }
    }
}

/// Every key of `m` found with its value, an ordered walk by `next` returns exactly `m`'s
/// keys, and `next` from random probes (inclusive and exclusive) answers as the map does.
fn answers_like(r: &Mem, t: &Tree, m: &Model, seed: u64, what: &str) {
    let (mut kb, mut vb) = ([0u8; 16], [0u8; VALUE_MAX]);
    for (k, v) in m {
        let l = t.get(r, k).unwrap();
        let got = l.map(|l| {
            let (_, vl) = t.read_leaf(r, l, &mut kb, &mut vb).unwrap();
            vb[..vl].to_vec()
        });
        assert_eq!(got.as_ref(), Some(v), "{what}: get {k:?}");
    }
    let mut walked = Vec::new();
    let mut cur = t.next(r, &[0], false).unwrap();
    while let Some(l) = cur {
        let (kl, _) = t.read_leaf(r, l, &mut kb, &mut vb).unwrap();
        walked.push(kb[..kl].to_vec());
        cur = t.next(r, &kb[..kl], true).unwrap();
    }
    assert!(walked.iter().eq(m.keys()), "{what}: ordered walk");
    let mut s = seed ^ 0x5eed;
    let mut k = [0u8; 16];
    for _ in 0..500 {
        let kl = key(&mut s, &mut k);
        let probe = &k[..kl];
        let excl = rng(&mut s).is_multiple_of(2);
        let got = t.next(r, probe, excl).unwrap().map(|l| {
            let (kl, _) = t.read_leaf(r, l, &mut kb, &mut vb).unwrap();
            kb[..kl].to_vec()
        });
        let lo = if excl {
            core::ops::Bound::Excluded(probe)
        } else {
            core::ops::Bound::Included(probe)
        };
        let want = m
            .range::<[u8], _>((lo, core::ops::Bound::Unbounded))
            .next()
            .map(|(k, _)| k.clone());
        assert_eq!(got, want, "{what}: next({probe:?}, excl {excl})");
    }
}

/// (inserted in sorted order, bulk-loaded) trees of `m` on their own regions.
fn both(kind: Kind, m: &Model) -> ((Mem, Tree), (Mem, Tree, BulkStats)) {
    let r1 = Mem::new(16 << 20);
    let mut ins = Tree::format(&r1, kind, 2, 2).unwrap();
    for (k, v) in m {
        assert!(!ins.put(&r1, k, v, false).unwrap());
    }
    let r2 = Mem::new(16 << 20);
    let mut bulk = Tree::format(&r2, kind, 2, 2).unwrap();
    let st = bulk.bulk_load(&r2, &pairs(m)).unwrap();
    ((r1, ins), (r2, bulk, st))
}

/// The bulk-loaded tree is the sorted inserts' tree node for node (same bytes but the
/// child offsets), takes the same heap, answers every key and range like the map, and
/// recovery finds it consistent with every key.
fn same_as_sorted_inserts(kind: Kind, seed: u64, n: usize) {
    let m = model(seed, n);
    let ((r1, ins), (r2, mut bulk, st)) = both(kind, &m);
    let what = format!("{kind:?} seed {seed}");
    assert_eq!(st.keys as usize, m.len(), "{what}");
    assert_eq!(shape(&r2, &bulk), shape(&r1, &ins), "{what}: shapes differ");
    assert_eq!(bulk.heap_used(), ins.heap_used(), "{what}: heap in use");
    assert_eq!(bulk.heap_used(), st.bytes, "{what}");
    assert_eq!(
        st.nodes.iter().sum::<u64>(),
        ins.stats.new_nodes - ins.stats.grows,
        "{what}: inner nodes (inserts made one per new node, grows replaced one)"
    );
    answers_like(&r2, &bulk, &m, seed, &what);
    let (nodes, leaves, repaired) = bulk.recover(&r2).unwrap();
    assert_eq!(
        (nodes, leaves as usize, repaired),
        (st.nodes.iter().sum::<u64>(), m.len(), 0),
        "{what}: recovery"
    );
    assert_eq!(
        bulk.heap_used(),
        st.bytes,
        "{what}: recovery frees nothing reachable"
    );
    answers_like(&r2, &bulk, &m, seed, &what);
}

#[test]
fn wort_bulk_load_is_the_sorted_inserts_tree() {
    for seed in 1..=4 {
        same_as_sorted_inserts(Kind::Wort, seed, 3000);
    }
}

#[test]
fn woart_bulk_load_is_the_sorted_inserts_tree() {
    for seed in 1..=4 {
        same_as_sorted_inserts(Kind::Woart, seed, 3000);
    }
    // Every node size: 256, 40, 10 and 3 children under shared prefixes.
    let mut m = Model::new();
    for (p, n) in [(7u8, 256u16), (8, 40), (9, 10), (10, 3)] {
        for b in 0..n {
            m.insert(vec![p, 0xAB, b as u8], vec![b as u8]);
        }
    }
    let ((r1, ins), (r2, bulk, st)) = both(Kind::Woart, &m);
    assert_eq!(shape(&r2, &bulk), shape(&r1, &ins));
    // The root (4 children) and the 3-child node are NODE4s.
    assert_eq!(st.nodes, [0, 2, 1, 1, 1], "{st:?}");
    assert_eq!(st.height, 2);
}

/// Upserts, updates and deletes on a bulk-loaded tree keep answering like the map, and
/// recovery after them finds every key.
fn writes_after_bulk_load(kind: Kind, seed: u64) {
    let mut m = model(seed, 2000);
    let r = Mem::new(16 << 20);
    let mut t = Tree::format(&r, kind, 2, 2).unwrap();
    t.bulk_load(&r, &pairs(&m)).unwrap();
    let loaded: Vec<Vec<u8>> = m.keys().cloned().collect();
    let mut s = seed ^ 0xabcd;
    let mut k = [0u8; 16];
    for i in 0..3000u64 {
        // Half the writes hit loaded keys, half fresh ones.
        let key: Vec<u8> = if rng(&mut s).is_multiple_of(2) {
            loaded[(rng(&mut s) % loaded.len() as u64) as usize].clone()
        } else {
            let kl = key(&mut s, &mut k);
            k[..kl].to_vec()
        };
        let v = i.to_le_bytes()[..1 + (i % 8) as usize].to_vec();
        match rng(&mut s) % 4 {
            0 | 1 => {
                let was = t.put(&r, &key, &v, false).unwrap();
                assert_eq!(was, m.insert(key, v).is_some());
            }
            2 => {
                let was = t.put(&r, &key, &v, true).unwrap();
                assert_eq!(was, m.contains_key(&key));
                if was {
                    m.insert(key, v);
                }
            }
            _ => assert_eq!(t.delete(&r, &key).unwrap(), m.remove(&key).is_some()),
        }
    }
    let what = format!("{kind:?} seed {seed} after writes");
    answers_like(&r, &t, &m, seed, &what);
    let (_, leaves, repaired) = t.recover(&r).unwrap();
    assert_eq!((leaves as usize, repaired), (m.len(), 0), "{what}");
    answers_like(&r, &t, &m, seed, &what);
}

#[test]
fn writes_after_a_bulk_load_work() {
    for seed in 1..=2 {
        writes_after_bulk_load(Kind::Wort, seed);
        writes_after_bulk_load(Kind::Woart, seed);
    }
}

/// Keys out of order or twice, bad lengths, and a tree that holds keys are refused with
/// nothing published; an empty load leaves an empty tree.
#[test]
fn bad_bulk_loads_are_refused() {
    for kind in [Kind::Wort, Kind::Woart] {
        let r = Mem::new(4 << 20);
        let mut t = Tree::format(&r, kind, 1, 1).unwrap();
        let v = vec![1u8];
        let bad: [Vec<(Vec<u8>, Vec<u8>)>; 5] = [
            vec![(b"b".to_vec(), v.clone()), (b"a".to_vec(), v.clone())],
            vec![(b"a".to_vec(), v.clone()), (b"a".to_vec(), v.clone())],
            vec![(vec![], v.clone())],
            vec![(vec![1; 17], v.clone())],
            vec![(b"a".to_vec(), vec![0; VALUE_MAX + 1])],
        ];
        for p in &bad {
            assert!(t.bulk_load(&r, p).is_err(), "{kind:?} {p:?}");
            assert_eq!(r.load_u64(t.sb + SB_ROOT).unwrap(), 0);
        }
        let none: [(Vec<u8>, Vec<u8>); 0] = [];
        assert_eq!(t.bulk_load(&r, &none).unwrap().keys, 0);
        assert_eq!(t.next(&r, &[0], false).unwrap(), None);
        let one = [(b"k".to_vec(), v.clone())];
        assert_eq!(t.bulk_load(&r, &one).unwrap().keys, 1);
        assert!(t.get(&r, b"k").unwrap().is_some());
        assert!(t.bulk_load(&r, &one).is_err(), "a tree that holds keys");
        // A leaf's header word says its lengths.
        let l = t.get(&r, b"k").unwrap().unwrap();
        assert_eq!(decode_leaf_header(r.load_u64(l).unwrap()), Ok((1, 1)));
    }
}

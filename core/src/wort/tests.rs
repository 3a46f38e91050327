//! Both trees against a BTreeMap on a plain in-memory region (the server path and crashes
//! are tested in poller/tests/wort_*.rs).
use super::layout::{Kind, VALUE_MAX};
use super::tree::Tree;
use crate::fabric::FabricError;
use crate::server::{LocalRegion, out_of_range};
use core::cell::RefCell;
use remora_layouts::NodeId;
use remora_layouts::region::RegionHeader;
use std_alloc::collections::BTreeMap;
use std_alloc::vec;
use std_alloc::vec::Vec;

/// A plain region that counts its flushes: `persist` (clwb) and `persist_evict` (clflush)
/// calls, and the lines each covered.
pub(super) struct Mem(RefCell<Vec<u8>>, Flushes);

#[derive(Default)]
struct Flushes {
    clwb: core::cell::Cell<u64>,
    clflush: core::cell::Cell<u64>,
    clflush_lines: core::cell::Cell<u64>,
}

impl Mem {
    pub(super) fn new(len: usize) -> Mem {
        let mut v = vec![0u8; len];
        let h = RegionHeader::new(len as u64, 4096, 0).unwrap();
        v[..128].copy_from_slice(&h.encode());
        Mem(RefCell::new(v), Flushes::default())
    }
}

impl LocalRegion for Mem {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.0.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let m = self.0.borrow();
        let s = m
            .get(offset as usize..offset as usize + buf.len())
            .ok_or(out_of_range(0, offset, buf.len()))?;
        buf.copy_from_slice(s);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let mut m = self.0.borrow_mut();
        let s = m
            .get_mut(offset as usize..offset as usize + data.len())
            .ok_or(out_of_range(0, offset, data.len()))?;
        s.copy_from_slice(data);
        Ok(())
    }
    fn persist(&self, _offset: u64, _len: usize) {
        self.1.clwb.set(self.1.clwb.get() + 1);
    }
    fn persist_evict(&self, offset: u64, len: usize) {
        let f = &self.1;
        f.clflush.set(f.clflush.get() + 1);
        let lines = (offset + len as u64).div_ceil(64) - offset / 64;
        f.clflush_lines.set(f.clflush_lines.get() + lines);
    }
}

pub(super) fn rng(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Keys from a small alphabet of lengths 1..=16, so they share long prefixes, end inside
/// each other, and fill nodes of every size.
pub(super) fn key(s: &mut u64, out: &mut [u8; 16]) -> usize {
    let len = 1 + (rng(s) % 16) as usize;
    let wide = rng(s).is_multiple_of(4);
    for b in out.iter_mut().take(len) {
        let r = rng(s);
        *b = if wide {
            r as u8
        } else {
            b"\0ab\xff"[(r % 4) as usize]
        };
    }
    len
}

fn check_against_map(kind: Kind, seed: u64, ops: usize) {
    let r = Mem::new(8 << 20);
    let mut t = Tree::format(&r, kind, 4, 4).unwrap();
    let mut map: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut s = seed;
    let mut k = [0u8; 16];
    let (mut kb, mut vb) = ([0u8; 16], [0u8; VALUE_MAX]);
    for i in 0..ops {
        let kl = key(&mut s, &mut k);
        let key = &k[..kl];
        let v = (i as u64).to_le_bytes();
        let vlen = 1 + i % 8;
        match rng(&mut s) % 10 {
            0..=3 => {
                let present = t.put(&r, key, &v[..vlen], false).unwrap();
                let was = map.insert(key.to_vec(), v[..vlen].to_vec()).is_some();
                assert_eq!(present, was, "{kind:?} upsert {key:?}");
            }
            4 => {
                let present = t.put(&r, key, &v[..vlen], true).unwrap();
                assert_eq!(present, map.contains_key(key), "{kind:?} update {key:?}");
                if present {
                    map.insert(key.to_vec(), v[..vlen].to_vec());
                }
            }
            5 | 6 => {
                let present = t.delete(&r, key).unwrap();
                assert_eq!(
                    present,
                    map.remove(key).is_some(),
                    "{kind:?} delete {key:?}"
                );
            }
            7 | 8 => {
                let got = t.get(&r, key).unwrap().map(|l| {
                    let (_, vl) = t.read_leaf(&r, l, &mut kb, &mut vb).unwrap();
                    vb[..vl].to_vec()
                });
                assert_eq!(got.as_ref(), map.get(key), "{kind:?} get {key:?}");
            }
            _ => {
                let excl = rng(&mut s).is_multiple_of(2);
                let got = t.next(&r, key, excl).unwrap().map(|l| {
                    let (kl, _) = t.read_leaf(&r, l, &mut kb, &mut vb).unwrap();
                    kb[..kl].to_vec()
                });
                let want = if excl {
                    map.range::<[u8], _>((
                        core::ops::Bound::Excluded(key),
                        core::ops::Bound::Unbounded,
                    ))
                    .next()
                } else {
                    map.range::<[u8], _>((
                        core::ops::Bound::Included(key),
                        core::ops::Bound::Unbounded,
                    ))
                    .next()
                }
                .map(|(k, _)| k.clone());
                assert_eq!(got, want, "{kind:?} next({key:?}, excl {excl})");
            }
        }
    }
    // A full ordered walk by next() matches the map.
    let mut walked = Vec::new();
    let mut cur = t.next(&r, &[0], false).unwrap();
    while let Some(l) = cur {
        let (kl, _) = t.read_leaf(&r, l, &mut kb, &mut vb).unwrap();
        walked.push(kb[..kl].to_vec());
        cur = t.next(&r, &kb[..kl], true).unwrap();
    }
    let want: Vec<Vec<u8>> = map.keys().cloned().collect();
    assert_eq!(walked, want, "{kind:?} ordered walk");
    // Recovery of a consistent tree changes nothing and counts every key.
    let (_, leaves, repaired) = t.recover(&r).unwrap();
    assert_eq!((leaves as usize, repaired), (map.len(), 0));
    assert!(t.stats.splits > 0 && t.stats.new_nodes > 0, "{:?}", t.stats);
    if kind == Kind::Woart {
        assert!(t.stats.grows > 0, "{:?}", t.stats);
    }
}

#[test]
fn wort_matches_a_btreemap() {
    for seed in 1..=3 {
        check_against_map(Kind::Wort, seed, 3000);
    }
}

#[test]
fn woart_matches_a_btreemap() {
    for seed in 1..=3 {
        check_against_map(Kind::Woart, seed, 3000);
    }
}

#[test]
fn woart_grows_through_every_node_size() {
    let r = Mem::new(4 << 20);
    let mut t = Tree::format(&r, Kind::Woart, 1, 1).unwrap();
    for b in 0..=255u8 {
        t.put(&r, &[7, b], &[b], false).unwrap();
    }
    assert_eq!(t.stats.grows, 3, "4 -> 16 -> 48 -> 256");
    let (mut kb, mut vb) = ([0u8; 16], [0u8; VALUE_MAX]);
    for b in 0..=255u8 {
        let l = t.get(&r, &[7, b]).unwrap().unwrap();
        assert_eq!(t.read_leaf(&r, l, &mut kb, &mut vb).unwrap(), (2, 1));
        assert_eq!(vb[0], b);
    }
}

#[test]
fn bad_keys_values_and_a_full_heap_are_errors() {
    let r = Mem::new(1 << 20);
    let mut t = Tree::format(&r, Kind::Wort, 1, 1).unwrap();
    assert!(t.put(&r, &[], b"v", false).is_err());
    assert!(t.put(&r, &[1; 17], b"v", false).is_err());
    assert!(t.put(&r, b"k", &[0; VALUE_MAX + 1], false).is_err());
    let mut n = 0u64;
    let full = loop {
        match t.put(&r, &n.to_be_bytes(), &[1; 200], false) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(full, super::layout::TreeError::Full);
    assert!(n > 1000, "{n}");
    // Every key acknowledged before the heap filled is still there.
    for i in 0..n {
        assert!(t.get(&r, &i.to_be_bytes()).unwrap().is_some());
    }
}

#[test]
fn a_corrupt_child_word_is_an_error_not_a_wild_access() {
    let r = Mem::new(1 << 20);
    let mut t = Tree::format(&r, Kind::Woart, 1, 1).unwrap();
    t.put(&r, b"a", b"1", false).unwrap();
    t.put(&r, b"b", b"2", false).unwrap();
    // The root word names a node far outside the heap.
    r.store_u64(t.sb + super::layout::SB_ROOT, (1 << 40) | 3)
        .unwrap();
    assert!(matches!(
        t.get(&r, b"a"),
        Err(super::layout::TreeError::Corrupt { .. })
    ));
    assert!(t.recover(&r).is_err());
}

/// Issue 26: churn over a fixed live set (delete one live key, insert a fresh one, with
/// updates between) stays within a heap a few times the live set's size, the region's
/// chunk cursor shows the heap's real use, and a reopened tree (recovery) takes back the
/// free memory. Before, every replaced leaf and node leaked: the heap filled up.
#[test]
fn churn_reuses_freed_leaves_and_nodes() {
    use remora_layouts::region::NEXT_CHUNK_OFFSET;
    for kind in [Kind::Wort, Kind::Woart] {
        let r = Mem::new(4 << 20);
        let mut t = Tree::format(&r, kind, 1, 1).unwrap();
        let claimed0 = r.load_u64(NEXT_CHUNK_OFFSET).unwrap();
        assert!(claimed0 < 1 << 20, "{kind:?}: format claimed {claimed0} B");
        let live_n = 2000u64;
        let mut live: Vec<u64> = (0..live_n).collect();
        let val = [7u8; 24];
        for &k in &live {
            t.put(&r, &k.to_be_bytes(), &val, false).unwrap();
        }
        let loaded = t.heap_used();
        let mut s = 0x5eed_u64;
        let mut most = 0;
        for n in 0..60_000u64 {
            let i = (rng(&mut s) % live_n) as usize;
            assert!(
                t.delete(&r, &live[i].to_be_bytes()).unwrap(),
                "{kind:?} op {n}"
            );
            let fresh = live_n + n;
            t.put(&r, &fresh.to_be_bytes(), &val, false)
                .unwrap_or_else(|e| panic!("{kind:?}: op {n}: {e}"));
            live[i] = fresh;
            let j = (rng(&mut s) % live_n) as usize;
            t.put(&r, &live[j].to_be_bytes(), &[n as u8; 24], true)
                .unwrap();
            most = most.max(t.heap_used());
        }
        assert!(
            most < 3 * loaded,
            "{kind:?}: {loaded} B loaded, up to {most} B in use"
        );
        let claimed = r.load_u64(NEXT_CHUNK_OFFSET).unwrap();
        assert!(
            claimed <= claimed0 + 4 * loaded.next_multiple_of(4096),
            "{kind:?}: the cursor climbed from {claimed0} to {claimed}"
        );
        assert_eq!(claimed - t.sb, (claimed - t.sb).next_multiple_of(4096));
        // Recovery: the free memory comes back as what the tree does not reach.
        let used = t.heap_used();
        let mut t2 = Tree::open(&r, kind, t.sb).unwrap();
        let (_, leaves, _) = t2.recover(&r).unwrap();
        assert_eq!(leaves, live_n);
        assert_eq!(t2.heap_used(), used, "{kind:?}");
        for &k in &live {
            assert!(t2.get(&r, &k.to_be_bytes()).unwrap().is_some());
        }
    }
}

/// WORT's and WOART's flushes are the authors' `flush_buffer`, `clflush` between two
/// `mfence`s (SeKwonLee/WORT, src/wort/wort.c and src/woart/woart.c): every persist the trees
/// make evicts its lines, none is a `clwb` that leaves them cached. And per operation the
/// counts of the FAST'17 design (one flush per published line, one 8-byte commit store):
/// an insert under a node is the new leaf, then the child word (WOART's NODE4/16 add a key
/// word or bitmap); an update writes a new leaf and swaps the child word (2 flushes, where
/// the authors' update stores an 8-byte value pointer in place: 1; remora's values live in
/// the leaf, so a 15-byte value cannot be stored in place failure-atomically).
#[test]
fn every_flush_is_a_clflush_and_an_update_flushes_twice() {
    for kind in [Kind::Wort, Kind::Woart] {
        let r = Mem::new(8 << 20);
        let mut t = Tree::format(&r, kind, 1, 1).unwrap();
        let val = [5u8; 15];
        for k in 0..2000u64 {
            t.put(&r, &k.to_be_bytes(), &val, false).unwrap();
        }
        let before = (r.1.clflush.get(), r.1.clflush_lines.get(), t.stats.persists);
        let n = 500u64;
        for k in 0..n {
            assert!(t.put(&r, &(k * 3).to_be_bytes(), &[9u8; 15], true).unwrap());
        }
        assert_eq!(
            r.1.clwb.get(),
            0,
            "{kind:?}: a clwb, which leaves its lines cached"
        );
        let flushes = r.1.clflush.get() - before.0;
        let lines = r.1.clflush_lines.get() - before.1;
        assert_eq!(t.stats.persists - before.2, flushes, "{kind:?}: counted");
        // Each update: the new leaf (its lines) and the child word (one line); the heap's
        // high-water mark is persisted only when it moves, and freed leaves are reused.
        assert_eq!(
            flushes,
            2 * n,
            "{kind:?}: {flushes} flushes for {n} updates"
        );
        assert!(lines <= 4 * n, "{kind:?}: {lines} lines for {n} updates");
    }
}

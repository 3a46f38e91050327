//! Repairs of what a dead client left, on the in-memory fabric with a test clock and fence:
//! a leaf torn under a dead holder's lock, and memory running out in the middle of a grow.
//! (The sim crash campaign in poller/tests/smart_crash.rs covers every doorbell of every
//! operation; a crash there never tears a WRITE, so torn leaves are made by hand here.)
extern crate std;
use super::remote::build_leaf;
use super::tests::{MemEp, block, endpoint, memory};
use super::*;
use crate::fabric::FabricError;
use crate::lease::{LeaseConfig, owner_word};
use core::cell::RefCell;
use core::future::Future;
use remora_layouts::NodeId;
use remora_layouts::smart::{LEAF_CRC_OFFSET, LeafStatus, SlotKind, leaf_lock_offset};
use std::rc::Rc;
use std::vec::Vec;
use std_alloc::sync::Arc;

/// The in-memory fabric with a clock that `pause` advances, client ids, and a fence that
/// records whom it fenced.
struct ClockEp {
    inner: MemEp,
    id: u32,
    clock: Rc<Cell<u64>>,
    fenced: Rc<RefCell<Vec<u32>>>,
    /// Nanoseconds each reading of the clock advances it (0: only `pause` does).
    tick: u64,
}

impl Endpoint for ClockEp {
    type Qp = <MemEp as Endpoint>::Qp;
    fn qp(&self, node: NodeId) -> Result<&Self::Qp, FabricError> {
        self.inner.qp(node)
    }
    fn nodes(&self) -> &[NodeId] {
        self.inner.nodes()
    }
    fn client_id(&self) -> u32 {
        self.id
    }
    fn now_ns(&self) -> u64 {
        self.clock.set(self.clock.get() + self.tick);
        self.clock.get()
    }
    async fn pause(&self, ns: u64) {
        self.clock.set(self.clock.get() + ns);
    }
    async fn fence(&self, _node: NodeId, client: u32) -> Result<(), FabricError> {
        self.fenced.borrow_mut().push(client);
        Ok(())
    }
}

fn short_lease(t: Techniques) -> SmartConfig {
    let mut cfg = SmartConfig::new(t, KeyMode::Fixed(8), 8);
    cfg.lease = LeaseConfig {
        lease_ns: 50_000,
        min_backoff_ns: 100,
        max_backoff_ns: 5_000,
        deadline_ns: 10_000_000,
        max_attempts: 1_000_000,
    };
    cfg
}

const KEY: [u8; 8] = [0x10, 1, 2, 3, 4, 5, 6, 7];

/// Leaves the leaf of `KEY` as client 9 dying mid-write-back of `new` would: its lock word
/// names its redo slot, which holds the whole new image, and the leaf has the new value
/// words but the old checksum. Returns (leaf, bytes).
fn tear_under_dead_holder(
    m: &Rc<RefCell<Vec<u8>>>,
    s: &Smart<'_, ClockEp>,
    dead: &Smart<'_, ClockEp>,
    new: &[u8],
) -> (GlobalAddr, usize) {
    let root = block(s.read_node(s.root, NodeType::N256)).unwrap();
    let Ok(SlotKind::Leaf { addr, bytes, .. }) = root.slots[KEY[0] as usize].kind() else {
        panic!("the key's leaf is not under the root");
    };
    let slot = block(dead.redo_slot(0)).unwrap();
    let (redo_at, tag) = (slot.at, slot.tag);
    drop(slot);
    let o = addr.offset() as usize;
    let mut img = [0u8; 64];
    let rev = u64::from_le_bytes(m.borrow()[o..o + 8].try_into().unwrap());
    build_leaf(&mut img[..bytes], rev, LeafStatus::live(true), &KEY, new, 8).unwrap();
    let mut mm = m.borrow_mut();
    let r = redo_at.offset() as usize;
    mm[r..r + bytes].copy_from_slice(&img[..bytes]);
    // Every word but the checksum landed (the checksum is the one that did not).
    for w in (8..bytes - 8).step_by(8).filter(|&w| w != LEAF_CRC_OFFSET) {
        mm[o + w..o + w + 8].copy_from_slice(&img[w..w + 8]);
    }
    let lock = owner_word(dead.ep.client_id(), tag).to_le_bytes();
    let l = o + leaf_lock_offset(bytes);
    mm[l..l + 8].copy_from_slice(&lock);
    (addr, bytes)
}

fn clock_ep(
    m: &Rc<RefCell<Vec<u8>>>,
    id: u32,
    clock: &Rc<Cell<u64>>,
    f: &Rc<RefCell<Vec<u32>>>,
) -> ClockEp {
    ClockEp {
        inner: endpoint(m),
        id,
        clock: clock.clone(),
        fenced: f.clone(),
        tick: 0,
    }
}

#[test]
fn a_leaf_torn_under_a_dead_holder_is_rebuilt_from_its_redo_copy() {
    for writer in [false, true] {
        let m = memory(4 << 20);
        let clock = Rc::new(Cell::new(1));
        let fenced = Rc::new(RefCell::new(Vec::new()));
        let (ep, dep) = (
            clock_ep(&m, 7, &clock, &fenced),
            clock_ep(&m, 9, &clock, &fenced),
        );
        let cfg = short_lease(Techniques::SMART);
        let s = block(Smart::open(&ep, cfg)).unwrap();
        let dead = block(Smart::open(&dep, cfg)).unwrap();
        block(s.upsert(&KEY, b"old-valu")).unwrap();
        let (leaf, bytes) = tear_under_dead_holder(&m, &s, &dead, b"new-valu");
        let t0 = clock.get();
        let mut out = [0u8; 8];
        if writer {
            // A writer's search finds the leaf torn under the same word for a lease: it fences
            // client 9, takes the lock over, rebuilds the leaf from the redo copy (the dead
            // write took effect), releases it, then writes.
            assert_eq!(block(s.update(&KEY, b"mine-now")), Ok(true));
            assert_eq!(block(s.get(&KEY, &mut out)), Ok(Some(8)));
            assert_eq!(&out, b"mine-now");
        } else {
            // A reader that keeps finding it torn under the same word does the same.
            assert_eq!(block(s.get(&KEY, &mut out)), Ok(Some(8)));
            assert_eq!(&out, b"new-valu");
        }
        assert!(clock.get() - t0 >= cfg.lease.lease_ns, "waited a lease");
        assert_eq!(*fenced.borrow(), [9], "the dead holder was fenced");
        let st = s.stats();
        assert_eq!((st.takeovers, st.repairs), (1, 1), "{st:?}");
        let l = leaf.offset() as usize + leaf_lock_offset(bytes);
        assert_eq!(
            super::tests::word(&m.borrow(), l),
            0,
            "the lock was released"
        );
    }
}

#[test]
fn a_torn_leaf_without_a_valid_redo_copy_is_an_error() {
    let m = memory(4 << 20);
    let clock = Rc::new(Cell::new(1));
    let fenced = Rc::new(RefCell::new(Vec::new()));
    let (ep, dep) = (
        clock_ep(&m, 7, &clock, &fenced),
        clock_ep(&m, 9, &clock, &fenced),
    );
    let cfg = short_lease(Techniques::SMART);
    let s = block(Smart::open(&ep, cfg)).unwrap();
    let dead = block(Smart::open(&dep, cfg)).unwrap();
    block(s.upsert(&KEY, b"old-valu")).unwrap();
    tear_under_dead_holder(&m, &s, &dead, b"new-valu");
    // Wipe the redo ring: the damage cannot be undone, and must be reported, not hidden.
    {
        let base = dead.redo[0].base.offset() as usize;
        let n = leaflock::REDO_SLOTS * dead.redo[0].slot_bytes;
        m.borrow_mut()[base..base + n].fill(0);
    }
    let r = block(s.upsert(&KEY, b"whatever"));
    assert!(matches!(r, Err(SmartError::Corrupt { .. })), "{r:?}");
}

/// Running out of memory in the middle of a grow used to leave the node frozen for good.
#[test]
fn running_out_of_memory_in_a_grow_freezes_nothing() {
    for t in [Techniques::SMART, Techniques::BASELINE] {
        let m = memory(2 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, SmartConfig::new(t, KeyMode::Fixed(8), 8))).unwrap();
        let key = |b: u8| [0x20, 0, 0, 0, 0, 0, 0, b];
        for b in 0..4 {
            block(s.upsert(&key(b), &[b; 8])).unwrap();
        }
        // Use up the region in blocks of the sizes a grow needs (node, leaf).
        let mut held = Vec::new();
        'fill: loop {
            for size in [256usize, 64] {
                match block(s.alloc_at(0, size)) {
                    Ok(a) => held.push((a, size)),
                    Err(_) => break 'fill,
                }
            }
        }
        let r = block(s.upsert(&key(4), &[4; 8]));
        assert!(matches!(r, Err(SmartError::Alloc(_))), "{r:?}");
        let root = block(s.read_node(s.root, NodeType::N256)).unwrap();
        let Ok(SlotKind::Node { addr, ty, .. }) = root.slots[0x20].kind() else {
            panic!("no node under root slot 0x20");
        };
        let n = block(s.read_node(addr, ty)).unwrap();
        assert_eq!(ty, NodeType::N4);
        assert!(!n.header.is_frozen(), "{t:?}: the node stayed frozen");
        assert!(n.live_slots().iter().all(|s| !s.is_frozen()), "{t:?}");
        // Nothing is frozen: every key reads, and once memory is back, updates and the
        // grow go through.
        let mut out = [0u8; 8];
        for b in 0..4 {
            assert_eq!(block(s.get(&key(b), &mut out)), Ok(Some(8)), "{t:?}");
        }
        for (a, size) in held.drain(..) {
            s.free(a, size);
        }
        for b in 0..4 {
            assert_eq!(block(s.update(&key(b), &[b + 10; 8])), Ok(true), "{t:?}");
        }
        let r = block(s.upsert(&key(4), &[4; 8]));
        assert_eq!(r, Ok(()), "{t:?} {:?}", s.stats());
        assert_eq!(block(s.get(&key(4), &mut out)), Ok(Some(8)));
        assert_eq!(s.stats().grows, 1, "{t:?}");
    }
}

/// After a memory-node restart, the recovery takes back what the tree does not reach, but
/// keeps the redo copy that a dead holder's lock word names: once every spare byte has been
/// handed out and overwritten, the torn leaf is still rebuilt from it, and every other key
/// reads back.
#[test]
fn recovery_keeps_what_the_tree_reaches_and_the_redo_copy_a_lock_names() {
    let m = memory(4 << 20);
    let clock = Rc::new(Cell::new(1));
    let fenced = Rc::new(RefCell::new(Vec::new()));
    let (ep, dep) = (
        clock_ep(&m, 7, &clock, &fenced),
        clock_ep(&m, 9, &clock, &fenced),
    );
    let cfg = short_lease(Techniques::SMART);
    let key = |i: u64| (0x3000_0000_0000_0000 | (i * 0x0101_0101)).to_be_bytes();
    {
        let s = block(Smart::open(&ep, cfg)).unwrap();
        let dead = block(Smart::open(&dep, cfg)).unwrap();
        block(s.upsert(&KEY, b"old-valu")).unwrap();
        // Garbage: keys deleted, nodes grown and compacted.
        for i in 0..300u64 {
            block(s.upsert(&key(i), &i.to_le_bytes())).unwrap();
        }
        for i in (0..300u64).filter(|i| i % 3 != 0) {
            assert_eq!(block(s.delete(&key(i))), Ok(true));
        }
        tear_under_dead_holder(&m, &s, &dead, b"new-valu");
    }
    // The node restarted: both handles are gone with their retire lists.
    let rep_ep = clock_ep(&m, 11, &clock, &fenced);
    let (r, rep) = block(Smart::open_recovering(
        &rep_ep,
        cfg,
        Arc::new(SmartNode::new(&cfg)),
    ))
    .unwrap();
    assert!(rep.free_bytes > 0 && rep.reached_bytes > 0, "{rep:?}");
    assert!(
        rep.free_bytes + rep.reached_bytes <= rep.used_bytes,
        "{rep:?}"
    );
    assert_eq!(rep.leaves, 1 + 100, "{rep:?}");
    // Hand out every spare byte, and scribble over it.
    let mut n = 0;
    while r.reclaim.borrow().spare_bytes > 0 {
        let a = block(r.alloc_at(0, 16)).unwrap();
        let o = a.offset() as usize;
        m.borrow_mut()[o..o + 16].fill(0xEE);
        n += 1;
    }
    // (The redo ring came from spare memory too.)
    let ring = (leaflock::REDO_SLOTS * r.max_leaf_bytes()).next_power_of_two() as u64;
    assert_eq!(n * 16 + ring, rep.free_bytes, "{rep:?}");
    let mut out = [0u8; 8];
    assert_eq!(block(r.get(&KEY, &mut out)), Ok(Some(8)));
    assert_eq!(&out, b"new-valu", "rebuilt from the redo copy");
    for i in 0..300u64 {
        let want = (i % 3 == 0).then_some(8);
        assert_eq!(block(r.get(&key(i), &mut out)), Ok(want), "key {i}");
        if want.is_some() {
            assert_eq!(u64::from_le_bytes(out), i);
        }
    }
}

/// A client thread killed without unwinding (its future never dropped) while it leads a
/// delegated read ties the compute node's local-table entry of its key for one lease, and
/// while it leads a combined write, for the deadline that bounds every wait (a live write
/// leader descheduled for a while looks the same, and may still write a waiter's value it
/// took: it is not replaced at its lease). No longer: the next operation on the key waits,
/// takes the entry over and completes; the one after it does not wait at all.
#[test]
fn a_leader_killed_without_unwinding_ties_its_entry_for_one_lease() {
    for write in [true, false] {
        let m = memory(4 << 20);
        let clock = Rc::new(Cell::new(1));
        let fenced = Rc::new(RefCell::new(Vec::new()));
        let ep = ClockEp {
            tick: 100,
            ..clock_ep(&m, 7, &clock, &fenced)
        };
        let cfg = short_lease(Techniques::SMART);
        let (lease, deadline) = (cfg.lease.lease_ns, cfg.lease.deadline_ns);
        let s = block(Smart::open(&ep, cfg)).unwrap();
        block(s.upsert(&KEY, b"old-valu")).unwrap();
        let mut dead_out = [0u8; 8];
        {
            let mut f: core::pin::Pin<std::boxed::Box<dyn Future<Output = _>>> = if write {
                std::boxed::Box::pin(async { s.upsert(&KEY, b"dead-val").await.map(|_| None) })
            } else {
                std::boxed::Box::pin(s.get(&KEY, &mut dead_out))
            };
            let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
            assert!(f.as_mut().poll(&mut cx).is_pending(), "stopped in its verb");
            // Killed: no unwinding, nothing of it runs again, its claim is never dropped.
            core::mem::forget(f);
        }
        let mut out = [0u8; 8];
        let op = |v: &'static [u8; 8], out: &mut [u8; 8]| {
            if write {
                block(s.upsert(&KEY, v)).map(|_| Some(8))
            } else {
                block(s.get(&KEY, out))
            }
        };
        let t0 = clock.get();
        assert_eq!(op(b"next-val", &mut out), Ok(Some(8)), "write {write}");
        let waited = clock.get() - t0;
        let bound = if write { deadline } else { lease };
        assert!(
            waited >= bound && waited <= bound + lease,
            "write {write}: waited {waited} ns for a bound of {bound} ns"
        );
        std::println!("write {write}: waited {waited} ns (lease {lease} ns)");
        assert_eq!(s.stats().leader_takeovers, 1, "write {write}");
        let t1 = clock.get();
        assert_eq!(op(b"last-val", &mut out), Ok(Some(8)), "write {write}");
        assert!(clock.get() - t1 < lease / 2, "write {write}: tied again");
        assert_eq!(block(s.get(&KEY, &mut out)), Ok(Some(8)));
        assert_eq!(&out, if write { b"last-val" } else { b"old-valu" });
    }
}

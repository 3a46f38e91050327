//! The on-chip lock table (`onchip.rs`): locks land as bits of device-memory words, bits of
//! one word do not block each other, and both lock paths (the baseline's internal nodes,
//! in-place leaves without the rear lock) run whole histories against an oracle.
extern crate std;
use super::onchip::{ChipLock, chip_lock};
use super::tests::{MemEp, block, run_all, with_device, word};
use super::*;
use crate::index::KvIndex;
use core::cell::RefCell;
use core::future::Future;
use core::task::{Context, Poll, Waker};
use remora_layouts::region::RegionHeader;
use remora_layouts::smart::NODE_REV_OFFSET;
use std::boxed::Box;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::vec;
use std::vec::Vec;

/// Device-memory bytes of the test node (the table of 64 locks needs one word).
const DM: usize = 64;

type Mem = Rc<RefCell<Vec<u8>>>;

fn node(len: usize, dm: usize) -> (Mem, Mem) {
    let mut m = vec![0u8; len];
    let h = RegionHeader::new(len as u64, 1 << 16, dm as u64).unwrap();
    m[..128].copy_from_slice(&h.encode());
    (
        Rc::new(RefCell::new(m)),
        Rc::new(RefCell::new(vec![0u8; dm])),
    )
}

fn ep((host, dev): &(Mem, Mem)) -> MemEp {
    with_device(host, dev)
}

fn cfg(t: Techniques, locks: u64) -> SmartConfig {
    let mut c = SmartConfig::new(t, KeyMode::Fixed(8), 8);
    c.cache_mib = 1.0;
    c.onchip_locks = locks;
    c.hocl_handover = false;
    c
}

fn dev_word(m: &(Mem, Mem), lock: ChipLock) -> u64 {
    word(&m.1.borrow(), lock.word.offset() as usize)
}

/// The in-place step before the rear lock (lock-free internal nodes, in-place leaves).
const IN_PLACE: Techniques = Techniques {
    lock_free_internal: true,
    in_place_leaf: true,
    rear_lock: false,
    delegation: false,
    combining: false,
    cache: true,
};

#[test]
fn a_node_lock_is_its_bit_in_device_memory_not_the_nodes_word() {
    let m = node(16 << 20, DM);
    let e = ep(&m);
    let s = block(Smart::open(&e, cfg(Techniques::BASELINE, 64))).unwrap();
    let lock = chip_lock(s.root, 64);
    let rev_at = (s.root.offset() + NODE_REV_OFFSET as u64) as usize;
    let rev = word(&m.0.borrow(), rev_at);
    let held = block(s.lock_node(s.root, &mut [])).unwrap();
    assert_eq!(lock.word.offset(), 0, "a table of 64 locks is one word");
    assert_eq!(dev_word(&m, lock), lock.mask, "only the root's bit is set");
    assert_eq!(
        word(&m.0.borrow(), rev_at),
        rev,
        "the node's own word is untouched"
    );
    block(s.unlock_node(held, None)).unwrap();
    assert_eq!(dev_word(&m, lock), 0);
}

#[test]
fn the_table_must_fit_device_memory() {
    let m = node(16 << 20, 8);
    let e = ep(&m);
    let r = block(Smart::open(&e, cfg(Techniques::BASELINE, 128)));
    assert!(matches!(r, Err(SmartError::Config(_))), "{:?}", r.err());
    // A step whose locks are not in the table (lock-free, rear lock) does not need it.
    assert!(block(Smart::open(&e, cfg(Techniques::SMART, 128))).is_ok());
}

/// Two objects whose locks are different bits of one word, and a third sharing the first's.
fn neighbours() -> (GlobalAddr, GlobalAddr, GlobalAddr) {
    let at = |i: u64| GlobalAddr::new(0, 4096 + 64 * i);
    let a = at(0);
    let b = (1..)
        .map(at)
        .find(|x| chip_lock(*x, 64).mask != chip_lock(a, 64).mask);
    let c = (1..)
        .map(at)
        .find(|x| chip_lock(*x, 64) == chip_lock(a, 64));
    (a, b.unwrap(), c.unwrap())
}

#[test]
fn bits_of_one_word_do_not_block_each_other_but_a_shared_bit_does() {
    let m = node(16 << 20, DM);
    let e = ep(&m);
    let s = block(Smart::open(&e, cfg(Techniques::BASELINE, 64))).unwrap();
    let (a, b, c) = neighbours();
    let (la, lb, lc) = (chip_lock(a, 64), chip_lock(b, 64), chip_lock(c, 64));
    assert_eq!(la.word, lb.word);
    assert!(block(s.lock_chip(la, "a", &mut [], None)).unwrap());
    // The other bit of the same word: granted at once, no failed CAS.
    assert!(block(s.lock_chip(lb, "b", &mut [], None)).unwrap());
    assert_eq!(
        s.stats().lock_waits,
        0,
        "a neighbour's bit failed the masked CAS"
    );
    assert_eq!(dev_word(&m, la), la.mask | lb.mask);
    // The shared bit waits for a's holder, and gets it once a is released.
    let mut fc = Box::pin(s.lock_chip(lc, "c", &mut [], None));
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..20 {
        assert!(
            fc.as_mut().poll(&mut cx).is_pending(),
            "c locked a's held bit"
        );
    }
    block(s.unlock_chip(la)).unwrap();
    assert_eq!(dev_word(&m, lb), lb.mask, "a's unlock cleared b's bit");
    let got = loop {
        if let Poll::Ready(r) = fc.as_mut().poll(&mut cx) {
            break r;
        }
    };
    assert!(got.unwrap());
    assert!(s.stats().lock_waits > 0);
    block(s.unlock_chip(lb)).unwrap();
    block(s.unlock_chip(lc)).unwrap();
    assert_eq!(dev_word(&m, la), 0);
}

#[test]
fn an_in_place_leaf_write_waits_for_its_bit_not_its_own_word() {
    let m = node(16 << 20, DM);
    let e = ep(&m);
    let s = block(Smart::open(&e, cfg(IN_PLACE, 64))).unwrap();
    let key = 7u64.to_be_bytes();
    block(s.upsert(&key, &[1; 8])).unwrap();
    // Every bit of the table held (by other clients, as far as this one knows): the
    // in-place update of the existing leaf must wait, whatever its own lock word says.
    m.1.borrow_mut()[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let mut f = Box::pin(s.upsert(&key, &[2; 8]));
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..50 {
        assert!(
            f.as_mut().poll(&mut cx).is_pending(),
            "wrote without its bit"
        );
    }
    assert!(s.stats().lock_waits > 0);
    // Released: the write takes its bit, writes, and clears it.
    m.1.borrow_mut()[..8].copy_from_slice(&0u64.to_le_bytes());
    loop {
        if let Poll::Ready(r) = f.as_mut().poll(&mut cx) {
            r.unwrap();
            break;
        }
    }
    assert_eq!(word(&m.1.borrow(), 0), 0, "the write left its bit set");
    let mut out = [0u8; 8];
    assert_eq!(block(s.get(&key, &mut out)).unwrap(), Some(8));
    assert_eq!(out, [2; 8]);
}

/// Several handles (sharing one 64-lock word) apply random upserts, updates and deletes,
/// interleaved coroutine by coroutine, then every key is read back against an oracle of the
/// last write per key; the table ends with every bit clear.
fn histories(t: Techniques) {
    let m = node(32 << 20, DM);
    let eps: Vec<MemEp> = (0..4).map(|_| ep(&m)).collect();
    let handles: Vec<_> = eps
        .iter()
        .map(|e| block(Smart::open(e, cfg(t, 64))).unwrap())
        .collect();
    let oracle = RefCell::new(BTreeMap::<u64, u64>::new());
    let mut futs: Vec<core::pin::Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for (h, s) in handles.iter().enumerate() {
        let oracle = &oracle;
        futs.push(Box::pin(async move {
            let mut rng = 0x9E37_79B9u64 + h as u64;
            for i in 0..300u64 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Each handle owns its keys (k % 4 == h): the oracle is exact.
                let k = (rng % 40) * 4 + h as u64;
                let key = k.to_be_bytes();
                let v = i * 8 + h as u64;
                if rng.is_multiple_of(5) {
                    s.delete(&key).await.unwrap();
                    oracle.borrow_mut().remove(&k);
                } else {
                    s.upsert(&key, &v.to_le_bytes()).await.unwrap();
                    oracle.borrow_mut().insert(k, v);
                }
            }
        }));
    }
    run_all(futs);
    let o = oracle.borrow();
    let mut out = [0u8; 8];
    for k in 0..160u64 {
        let got = block(handles[0].get(&k.to_be_bytes(), &mut out)).unwrap();
        assert_eq!(
            got.map(|_| u64::from_le_bytes(out)),
            o.get(&k).copied(),
            "key {k} ({t:?})"
        );
    }
    assert_eq!(word(&m.1.borrow(), 0), 0, "a lock bit stayed set");
}

#[test]
fn baseline_histories_with_on_chip_node_locks() {
    let mut t = Techniques::BASELINE;
    t.cache = true;
    histories(t);
}

#[test]
fn in_place_histories_with_on_chip_leaf_locks() {
    histories(IN_PLACE);
}

/// The in-place step's on-chip leaf locks with the leaf hand-over: 4 handles of one compute
/// node (one `SmartNode`) update one hot key in turn. Returns (hand-overs, masked CASes).
fn hot_key_on_chip(handover: bool) -> (u64, u64) {
    let m = node(32 << 20, DM);
    let eps: Vec<MemEp> = (0..4).map(|_| ep(&m)).collect();
    let mut c = cfg(IN_PLACE, 64);
    c.leaf_handover = handover;
    let shared = Arc::new(SmartNode::new(&c));
    let handles: Vec<_> = eps
        .iter()
        .map(|e| block(Smart::open_on(e, c, shared.clone())).unwrap())
        .collect();
    let key = 77u64.to_be_bytes();
    block(handles[0].upsert(&key, &0u64.to_le_bytes())).unwrap();
    let cas0: u64 = eps
        .iter()
        .map(|e| e.qp.counters().snapshot().verbs[3])
        .sum();
    let mut futs: Vec<core::pin::Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for (h, s) in handles.iter().enumerate() {
        futs.push(Box::pin(async move {
            for i in 1..=30u64 {
                assert!(
                    s.update(&key, &(i << 8 | h as u64).to_le_bytes())
                        .await
                        .unwrap()
                );
            }
        }));
    }
    run_all(futs);
    let mut out = [0u8; 8];
    assert_eq!(block(handles[0].get(&key, &mut out)).unwrap(), Some(8));
    assert_eq!(
        u64::from_le_bytes(out) >> 8,
        30,
        "not some handle's last value"
    );
    assert_eq!(word(&m.1.borrow(), 0), 0, "a lock bit stayed set");
    let cas: u64 = eps
        .iter()
        .map(|e| e.qp.counters().snapshot().verbs[3])
        .sum();
    (
        handles.iter().map(|s| s.stats().handovers).sum(),
        cas - cas0,
    )
}

#[test]
fn on_chip_leaf_locks_are_handed_over_within_the_node() {
    let (handed, cas) = hot_key_on_chip(true);
    let (none, cas_without) = hot_key_on_chip(false);
    assert_eq!(none, 0);
    assert!(handed > 0, "no on-chip leaf lock was handed over");
    assert!(
        cas < cas_without,
        "masked CASes: {cas} with hand-over, {cas_without} without"
    );
}

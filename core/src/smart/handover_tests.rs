//! The lock-based baseline's hand-over of internal-node locks between the clients of one
//! compute node (`handover.rs`): it happens under contention and spares remote lock polls,
//! and a holder or waiter that dies around a hand-over neither blocks the node nor gets a
//! live client fenced.
extern crate std;
use super::tests::{MemEp, MemQp, block, endpoint, memory, run_all};
use super::*;
use crate::block_on::yield_now;
use crate::fabric::{Endpoint, FabricError};
use crate::lease::{holder, owner_word};
use core::cell::{Cell, RefCell};
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Waker};
use remora_layouts::NodeId;
use remora_layouts::smart::NODE_REV_OFFSET;
use std::boxed::Box;
use std::vec::Vec;

/// The in-memory fabric with a client id, a clock that pauses advance, and fences that are
/// recorded (the memory does not enforce them: the tests check who was fenced).
struct Ep<'m> {
    inner: MemEp,
    id: u32,
    clock: &'m Cell<u64>,
    fenced: &'m RefCell<Vec<u32>>,
}

impl Endpoint for Ep<'_> {
    type Qp = MemQp;
    fn qp(&self, node: NodeId) -> Result<&MemQp, FabricError> {
        self.inner.qp(node)
    }
    fn nodes(&self) -> &[NodeId] {
        self.inner.nodes()
    }
    fn client_id(&self) -> u32 {
        self.id
    }
    fn now_ns(&self) -> u64 {
        self.clock.get()
    }
    fn pause(&self, ns: u64) -> impl Future<Output = ()> {
        self.clock.set(self.clock.get() + ns.max(1));
        yield_now()
    }
    fn fence(&self, _node: NodeId, client: u32) -> impl Future<Output = Result<(), FabricError>> {
        self.fenced.borrow_mut().push(client);
        async { Ok(()) }
    }
}

fn cfg(handover: bool) -> SmartConfig {
    let mut c = SmartConfig::new(Techniques::BASELINE, KeyMode::Fixed(8), 8);
    c.hocl_handover = handover;
    c.lease.lease_ns = 50_000;
    c.lease.min_backoff_ns = 100;
    c.lease.max_backoff_ns = 1_000;
    c
}

/// 4 handles of one compute node x 2 coroutines inserting 60 keys each under 4 children of
/// the root. Returns (hand-overs, remote lock polls that found the lock held).
fn contended_inserts(handover: bool) -> (u64, u64) {
    let m = memory(16 << 20);
    let clock = Cell::new(1);
    let fenced = RefCell::new(Vec::new());
    let c = cfg(handover);
    let node = Arc::new(SmartNode::new(&c));
    let eps: Vec<Ep<'_>> = (1..=4)
        .map(|id| Ep {
            inner: endpoint(&m),
            id,
            clock: &clock,
            fenced: &fenced,
        })
        .collect();
    let hs: Vec<Smart<'_, Ep<'_>>> = eps
        .iter()
        .map(|ep| block(Smart::open_on(ep, c, node.clone())).unwrap())
        .collect();
    let key = |j: u64| ((j % 4) << 56 | j).to_be_bytes();
    let mut futs: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for (h, s) in hs.iter().enumerate() {
        for co in 0..2u64 {
            let base = (h as u64 * 2 + co) * 60;
            futs.push(Box::pin(async move {
                for j in base..base + 60 {
                    s.upsert(&key(j), &j.to_le_bytes()).await.unwrap();
                }
            }));
        }
    }
    run_all(futs);
    let mut out = [0u8; 8];
    for j in 0..8 * 60 {
        assert_eq!(
            block(hs[0].get(&key(j), &mut out)).unwrap(),
            Some(8),
            "key {j}"
        );
        assert_eq!(u64::from_le_bytes(out), j);
    }
    assert!(fenced.borrow().is_empty(), "a live client was fenced");
    handovers_and_waits(&hs)
}

#[test]
fn contended_baseline_locks_are_handed_over_within_the_node() {
    let (handed, polls) = contended_inserts(true);
    let (none, polls_without) = contended_inserts(false);
    assert_eq!(none, 0, "hand-over off, yet locks were handed over");
    assert!(handed > 0, "no internal-node lock was handed over");
    assert!(
        polls < polls_without,
        "remote lock polls: {polls} with hand-over, {polls_without} without"
    );
}

/// Three handles of one compute node (clients 1, 2, 3) and the root's lock word.
struct Three<'m> {
    a: Smart<'m, Ep<'m>>,
    b: Smart<'m, Ep<'m>>,
    c: Smart<'m, Ep<'m>>,
}

fn lock_word(m: &core::cell::RefCell<Vec<u8>>, s: &Smart<'_, Ep<'_>>) -> u64 {
    let at = s.root.add(NODE_REV_OFFSET as u64).offset() as usize;
    super::tests::word(&m.borrow(), at)
}

/// Polls `f` once (it must be pending).
fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) {
    let mut cx = Context::from_waker(Waker::noop());
    assert!(f.poll(&mut cx).is_pending());
}

fn three<'m>(eps: &'m [Ep<'m>; 3], node: &Arc<SmartNode>) -> Three<'m> {
    let open = |ep| block(Smart::open_on(ep, cfg(true), node.clone())).unwrap();
    Three {
        a: open(&eps[0]),
        b: open(&eps[1]),
        c: open(&eps[2]),
    }
}

fn eps<'m>(
    m: &std::rc::Rc<RefCell<Vec<u8>>>,
    clock: &'m Cell<u64>,
    fenced: &'m RefCell<Vec<u32>>,
) -> [Ep<'m>; 3] {
    core::array::from_fn(|i| Ep {
        inner: endpoint(m),
        id: i as u32 + 1,
        clock,
        fenced,
    })
}

#[test]
fn a_taker_that_dies_holding_a_handed_lock_is_fenced_not_the_releaser() {
    let m = memory(4 << 20);
    let (clock, fenced) = (Cell::new(1), RefCell::new(Vec::new()));
    let eps = eps(&m, &clock, &fenced);
    let node = Arc::new(SmartNode::new(&cfg(true)));
    let t = three(&eps, &node);
    let root = t.a.root;
    // A holds the root's lock; B queues behind it on the node's table.
    let la = block(t.a.lock_node(root, &mut [])).unwrap();
    assert_eq!(holder(lock_word(&m, &t.a)), 1);
    let mut fb = Box::pin(t.b.lock_node(root, &mut []));
    poll_once(fb.as_mut());
    // A hands the lock over (no unlock: the word still names A).
    block(t.a.unlock_node(la, None)).unwrap();
    assert_eq!(holder(lock_word(&m, &t.a)), 1);
    // B takes it, re-stamps the word with its own, and dies holding it.
    poll_once(fb.as_mut());
    // (Its CAS has landed; its post has not returned to it yet.)
    assert_eq!(holder(lock_word(&m, &t.a)), 2);
    drop(fb);
    // C is neither blocked by B's turn nor misled into fencing A: it waits out B's lease,
    // fences B and takes the lock over.
    let lc = block(t.c.lock_node(root, &mut [])).unwrap();
    assert_eq!(*fenced.borrow(), [2]);
    assert_eq!(holder(lock_word(&m, &t.a)), 3);
    assert_eq!(t.c.stats().takeovers, 1);
    block(t.c.unlock_node(lc, None)).unwrap();
    assert_eq!(lock_word(&m, &t.a), 0);
}

#[test]
fn a_hand_over_whose_waiter_died_is_taken_by_the_next_turn_without_fencing() {
    let m = memory(4 << 20);
    let (clock, fenced) = (Cell::new(1), RefCell::new(Vec::new()));
    let eps = eps(&m, &clock, &fenced);
    let node = Arc::new(SmartNode::new(&cfg(true)));
    let t = three(&eps, &node);
    let root = t.a.root;
    let la = block(t.a.lock_node(root, &mut [])).unwrap();
    let word_a = lock_word(&m, &t.a);
    let mut fb = Box::pin(t.b.lock_node(root, &mut []));
    poll_once(fb.as_mut());
    block(t.a.unlock_node(la, None)).unwrap();
    // B dies before its turn: the lock stays with A's word, handed to nobody.
    drop(fb);
    assert_eq!(lock_word(&m, &t.a), word_a);
    // C's turn is handed A's word: it re-stamps it at once, nobody fenced, no lease waited.
    let t0 = clock.get();
    let lc = block(t.c.lock_node(root, &mut [])).unwrap();
    assert!(fenced.borrow().is_empty());
    assert_eq!(clock.get(), t0, "C waited");
    assert_eq!(t.c.stats().handovers, 1);
    assert_eq!(lock_word(&m, &t.a), owner_word(3, t.c.lock_seq.get()));
    block(t.c.unlock_node(lc, None)).unwrap();
    assert_eq!(lock_word(&m, &t.a), 0);
}

#[test]
fn hand_overs_in_a_row_are_bounded_then_the_lock_is_released() {
    // Two handles that always find the other waiting: the lock is released (its word goes
    // to 0, letting other compute nodes in) after at most MAX_HANDOVERS hand-overs in a row.
    let m = memory(4 << 20);
    let (clock, fenced) = (Cell::new(1), RefCell::new(Vec::new()));
    let eps = eps(&m, &clock, &fenced);
    let node = Arc::new(SmartNode::new(&cfg(true)));
    let t = three(&eps, &node);
    let root = t.a.root;
    let hs = [&t.a, &t.b];
    let mut held = block(t.a.lock_node(root, &mut [])).unwrap();
    let mut in_a_row = 0u32;
    let mut releases = 0u32;
    for i in 0..3 * super::handover::MAX_HANDOVERS as usize {
        let next = hs[(i + 1) % 2];
        let mut f = Box::pin(next.lock_node(root, &mut []));
        poll_once(f.as_mut());
        block(hs[i % 2].unlock_node(held, None)).unwrap();
        if lock_word(&m, &t.a) == 0 {
            releases += 1;
            assert!(
                in_a_row <= super::handover::MAX_HANDOVERS,
                "{in_a_row} in a row"
            );
            in_a_row = 0;
        } else {
            in_a_row += 1;
        }
        held = block(f).unwrap();
    }
    block(t.a.unlock_node(held, None)).unwrap();
    assert!(releases >= 2, "{releases} releases");
    assert!(fenced.borrow().is_empty());
}

/// In-place leaves with the leaf hand-over (`SmartConfig::leaf_handover`), the rear lock on
/// or off (then the lock is the leaf's own word, released by a WRITE after the write-back).
fn leaf_cfg(rear_lock: bool, handover: bool) -> SmartConfig {
    let t = Techniques {
        rear_lock,
        delegation: false,
        combining: false,
        ..Techniques::SMART
    };
    let mut c = SmartConfig::new(t, KeyMode::Fixed(8), 8);
    c.cache_mib = 1.0;
    c.leaf_handover = handover;
    c.lease.lease_ns = 50_000;
    c.lease.min_backoff_ns = 100;
    c.lease.max_backoff_ns = 1_000;
    c
}

/// 4 handles of one compute node x 2 coroutines, each updating 2 hot keys 40 times in turn;
/// then a handle of another compute node updates both keys. Returns (hand-overs, remote
/// lock polls that found a lock held) of the first node's handles.
fn hot_leaf_updates(rear_lock: bool, handover: bool) -> (u64, u64) {
    let m = memory(16 << 20);
    let clock = Cell::new(1);
    let fenced = RefCell::new(Vec::new());
    let c = leaf_cfg(rear_lock, handover);
    let node = Arc::new(SmartNode::new(&c));
    let eps: Vec<Ep<'_>> = (1..=5)
        .map(|id| Ep {
            inner: endpoint(&m),
            id,
            clock: &clock,
            fenced: &fenced,
        })
        .collect();
    let hs: Vec<Smart<'_, Ep<'_>>> = eps[..4]
        .iter()
        .map(|ep| block(Smart::open_on(ep, c, node.clone())).unwrap())
        .collect();
    let hot = |k: u64| (k << 40 | 7).to_be_bytes();
    for k in 0..2 {
        block(hs[0].upsert(&hot(k), &0u64.to_le_bytes())).unwrap();
    }
    let last = RefCell::new(Vec::new());
    let mut futs: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for (h, s) in hs.iter().enumerate() {
        for co in 0..2u64 {
            let last = &last;
            futs.push(Box::pin(async move {
                let who = (h as u64 * 2 + co + 1) << 32;
                for i in 0..40u64 {
                    let v = who | i;
                    assert!(s.update(&hot(i % 2), &v.to_le_bytes()).await.unwrap());
                }
                // Its last value of each key: i = 38 (key 0) and 39 (key 1).
                last.borrow_mut().extend([who | 38, who | 39]);
            }));
        }
    }
    run_all(futs);
    let mut out = [0u8; 8];
    let last = last.into_inner();
    for k in 0..2u64 {
        assert_eq!(block(hs[0].get(&hot(k), &mut out)).unwrap(), Some(8));
        let v = u64::from_le_bytes(out);
        assert!(
            last.contains(&v) && v & 1 == k,
            "key {k} holds {v:#x}, no writer's last value"
        );
    }
    // Every lock was released: another compute node's client takes each at once.
    let other = block(Smart::open(&eps[4], c)).unwrap();
    for k in 0..2u64 {
        assert!(block(other.update(&hot(k), &9u64.to_le_bytes())).unwrap());
    }
    assert_eq!(other.stats().lock_waits, 0, "a leaf lock stayed held");
    assert!(fenced.borrow().is_empty(), "a live client was fenced");
    handovers_and_waits(&hs)
}

#[test]
fn contended_leaf_locks_are_handed_over_within_the_node() {
    for rear_lock in [true, false] {
        let (handed, polls) = hot_leaf_updates(rear_lock, true);
        let (none, polls_without) = hot_leaf_updates(rear_lock, false);
        assert_eq!(none, 0, "hand-over off, yet leaf locks were handed over");
        assert!(
            handed > 0,
            "no leaf lock was handed over (rear lock {rear_lock})"
        );
        assert!(
            polls < polls_without,
            "remote lock polls: {polls} with hand-over, {polls_without} without (rear lock \
             {rear_lock})"
        );
    }
}

/// Hand-overs and remote lock polls that found the lock held, summed over `hs`.
fn handovers_and_waits<E: Endpoint>(hs: &[Smart<'_, E>]) -> (u64, u64) {
    hs.iter().fold((0, 0), |(h, w), s| {
        let st = s.stats();
        (h + st.handovers, w + st.lock_waits)
    })
}

//! Each CANRT server keeps its own resize clock ([`ResizeClock`]): two trees in one process
//! do not mix their counts (the clock was a process-wide static before), and an operation
//! during which its tree's resize was under way, or began, is counted as overlapping it.
use super::*;
use core::sync::atomic::Ordering;
use remora_layouts::canrt::{Control, ControlKind, FRONT_OFF, LOCK_OFF, Meta};

/// A tree of `n` keys (`k << 20`) on its own memory node and server.
fn loaded(n: u64) -> Rc<MemNode> {
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        for k in 0..n {
            t.upsert(&be(k << 20), &k.to_le_bytes()).await.unwrap();
        }
    });
    node
}

fn clock(node: &MemNode) -> ResizeClock {
    node.server.borrow().stats().resize_clock.now()
}

/// Another client takes `tickets` lock tickets on data node `id` and its holder (the first
/// ticket) reports the node full: a resize begins, and drains once every ticket is back.
fn report_full(node: &MemNode, v: &TreeView, id: u32, tickets: u64) -> u64 {
    let off = v.header.data_node_off(id);
    let served = Meta(node.pm.load_u64(off + FRONT_OFF).unwrap()).served();
    let lock = node.pm.load_u64(off + LOCK_OFF).unwrap();
    node.pm.store_u64(off + LOCK_OFF, lock + tickets).unwrap();
    let c = Control::new(
        ControlKind::Resize,
        v.epoch_tag(),
        v.header.array_gen,
        id,
        served,
    );
    node.deliver(RecvKind::Send, None, &c.encode()).unwrap();
    served
}

/// Runs `op` and says whether it overlapped a resize of `node`'s tree, by the clock read
/// before and after it (as the bench does).
fn overlapped<T>(node: &MemNode, op: impl FnOnce() -> T) -> (T, bool) {
    let c0 = clock(node);
    let r = op();
    (r, c0.overlapped(clock(node)))
}

/// Tree A resizes (a resize held under way by an outstanding ticket) while tree B serves
/// operations: B's are not counted as overlapping a resize, A's are, whichever node they
/// touch. With one clock for every server of the process, B's counted too.
#[test]
fn two_trees_keep_their_own_resize_clocks() {
    let (a, b) = (loaded(60), loaded(60));
    let (ep_a, ep_b) = (mem_ep(&a), mem_ep(&b));
    let ta = block_on(Canrt::open(&ep_a, cfg(8))).unwrap();
    let tb = block_on(Canrt::open(&ep_b, cfg(8))).unwrap();
    let mut out = [0u8; 8];
    block_on(ta.get(&be(0), &mut out)).unwrap();
    block_on(tb.get(&be(0), &mut out)).unwrap();
    let b0 = clock(&b);
    assert!(b0.begun > 0, "loading B resized it");
    assert!(!b0.under_way());
    // A's first data node is reported full; a second ticket on it is still out, so the
    // resize cannot finish until that one comes back.
    let v = ta.view();
    let f = v.order()[0];
    let resizes = a.server.borrow().stats().resizes.load(Ordering::Relaxed);
    let served = report_full(&a, &v, f, 2);
    assert!(clock(&a).under_way(), "A's resize is under way");
    assert_eq!(clock(&b), b0, "A's resize moved B's clock");
    // B's operations meanwhile: not during a resize of B's tree.
    for k in 0..60u64 {
        let (got, during) = overlapped(&b, || block_on(tb.get(&be(k << 20), &mut out)));
        assert_eq!(got.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), k);
        assert!(!during, "B's get {k} counted as overlapping A's resize");
    }
    let (r, during) = overlapped(&b, || {
        block_on(tb.update(&be(7 << 20), &70u64.to_le_bytes()))
    });
    assert!(r.unwrap());
    assert!(!during, "B's update counted as overlapping A's resize");
    // A's reads go on, on the frozen node and the others alike, and overlap the resize.
    let last = 59u64 << 20;
    assert_ne!(
        v.locate(u128::from(last)),
        Ok(f),
        "the last key is on another node"
    );
    for k in [0, last] {
        let (got, during) = overlapped(&a, || block_on(ta.get(&be(k), &mut out)));
        assert_eq!(got.unwrap(), Some(8));
        assert!(during, "A's get of {k:#x} during A's resize not counted");
    }
    // The second ticket comes back: the resize drains and publishes.
    let c = Control::new(
        ControlKind::Unlock,
        v.epoch_tag(),
        v.header.array_gen,
        f,
        served + 1,
    );
    a.deliver(RecvKind::Send, None, &c.encode()).unwrap();
    let after = clock(&a);
    assert!(!after.under_way(), "A's resize did not end");
    assert_eq!(
        a.server.borrow().stats().resizes.load(Ordering::Relaxed),
        resizes + 1
    );
    let (got, during) = overlapped(&a, || block_on(ta.get(&be(last), &mut out)));
    assert_eq!(got.unwrap(), Some(8));
    assert!(!during, "an op after the resize counted as overlapping it");
    assert_eq!(clock(&b), b0);
}

/// A resize that begins (and here ends) while a read's node READ is in flight makes that
/// read one that overlapped a resize, though the node it reads is not the one split.
#[test]
fn a_resize_begun_during_a_read_is_counted() {
    let a = loaded(60);
    let ep = mem_ep(&a);
    let t = block_on(Canrt::open(&ep, cfg(8))).unwrap();
    let mut out = [0u8; 8];
    block_on(t.get(&be(0), &mut out)).unwrap();
    let v = t.view();
    let f = v.order()[0];
    let key = 59u64 << 20;
    assert_ne!(v.locate(u128::from(key)), Ok(f));
    let (n, v2) = (a.clone(), v.clone());
    *a.split_next_read.borrow_mut() = Some(SplitRead {
        len: v.header.data_node_size as usize,
        order: SegmentOrder::Shuffled,
        seed: 7,
        pick: 1,
        event: Box::new(move || {
            report_full(&n, &v2, f, 1);
        }),
    });
    let c0 = clock(&a);
    let (got, during) = overlapped(&a, || block_on(t.get(&be(key), &mut out)));
    assert!(
        a.split_next_read.borrow_mut().take().is_none(),
        "the READ was not split"
    );
    assert_eq!(got.unwrap(), Some(8));
    assert_eq!(u64::from_le_bytes(out), 59);
    assert_eq!(clock(&a).begun, c0.begun + 1, "no resize began");
    assert!(during, "a read during which a resize began was not counted");
}

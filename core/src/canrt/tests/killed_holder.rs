//! Issue 26: a writer killed after its item landed in the data node and before the server
//! heard of it (the soft fabric's WRITE_WITH_IMM places the item, then queues its notice; a
//! verbs connection torn down mid-message can do the same). Its ticket is served, its item
//! complete and unprocessed, and no notice will ever come.
use super::issue13::{forge_item, tree_of};
use super::*;
use remora_layouts::canrt::{FRONT_OFF, LOCK_OFF, Meta};

/// [`MemEp`] with a virtual clock that pauses advance, so leases and deadlines run out.
struct ClockEp {
    inner: MemEp,
    now: Cell<u64>,
}

impl Endpoint for ClockEp {
    type Qp = MemQp;
    fn qp(&self, node: NodeId) -> Result<&MemQp, FabricError> {
        self.inner.qp(node)
    }
    fn nodes(&self) -> &[NodeId] {
        self.inner.nodes()
    }
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn pause(&self, ns: u64) -> impl core::future::Future<Output = ()> {
        self.now.set(self.now.get().saturating_add(ns.max(1)));
        crate::block_on::yield_now()
    }
}

fn served_of(region: &dyn LocalRegion, off: u64) -> u64 {
    Meta(region.load_u64(off + FRONT_OFF).unwrap()).served()
}

/// The next writer of the node asks for a skip once the ticket stayed served for a lease;
/// the server applies the dead holder's complete item (as its notice would have) and the
/// next ticket is served. Before the fix the waiter saw the item, took the holder for alive
/// and the server for slow, never reported, and failed with `LockTimeout` ("held
/// (unskipped)") at its deadline.
#[test]
fn a_writer_killed_between_its_item_and_its_notice_is_skipped() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = ClockEp {
        inner: mem_ep(&node),
        now: Cell::new(0),
    };
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        let region: &dyn LocalRegion = &node.pm;
        let v = tree_of(region);
        let id = v.locate(5u128).unwrap();
        let off = v.header.data_node_off(id);
        let served = served_of(region, off);
        // The dead writer: its FETCH_AND_ADD took the served ticket, its item landed whole.
        region.store_u64(off + LOCK_OFF, served + 1).unwrap();
        let (at, _) = forge_item(region, &v, 6, 66, served);
        assert_eq!(at, id, "the forged item went to another node");
        let before = ep.now_ns();
        t.upsert(&be(5), &2u64.to_le_bytes())
            .await
            .expect("the next writer waited on a dead holder for good");
        let waited = ep.now_ns() - before;
        assert!(
            waited < 10 * cfg(8).lease.lease_ns,
            "waited {waited} ns for a dead holder"
        );
        let st = node.server.borrow().stats();
        assert_eq!(st.skipped.load(core::sync::atomic::Ordering::Relaxed), 1);
        // Both tickets served: the dead one (its item applied) and ours.
        assert_eq!(served_of(region, off), served + 2);
    });
    let got = dump(&node.pm);
    assert_eq!(got.get(&5), Some(&2));
    assert_eq!(
        got.get(&6),
        Some(&66),
        "the dead writer's complete item was lost"
    );
}

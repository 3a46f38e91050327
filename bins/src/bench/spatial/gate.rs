//! `--node-serial-reads` (sim only): the Catfish paper's client nodes serve one RDMA READ
//! at a time, whichever of their client threads posted it.
//!
//! The paper measures this on its testbed (seeds/003 §4.4): "when three or more threads are
//! launched on a client node, the average workload completion time among all eight client
//! nodes stays stable, indicating the RDMA connection has been saturated" (Fig. 8(b)), and
//! Fig. 9(b) draws why an offloaded search slows down: "the submitted RDMA reads would
//! interleave with each other ... more RDMA reads from other threads are inserted between
//! the ones of this request". Its offloading therefore scales with client nodes, not with
//! client threads. The sim's NICs have no such limit (a compute node's READs run in
//! parallel up to the NIC's request rate), so offloading there scaled with threads until the
//! memory node's link saturated (4.7 Mops at 256 clients, where the paper has ~533 Kops).
//!
//! The model: each compute node has one [`NodeReads`] its clients share; every READ of a
//! doorbell whose ops are all READs of node images (one level of an offloaded search; an
//! 8-byte READ is a word, not a node image) waits its
//! turn (first come, first served) and holds the node until it completes. One READ, not one
//! doorbell: Fig. 9(b) draws single READs of different threads interleaving, and the
//! paper's multi-issue (one thread's READs of a level pipelined, §4.3) saves at most 15.13%
//! of a search's latency (Fig. 7(b)), so the node serves READs essentially one at a time;
//! its "RDMA offloading" baseline (FaRM's) issues them one by one anyway. Messaging
//! (WRITE_WITH_IMM, receives) is not gated. Nothing here is calibrated: the node's READ
//! rate follows from the sim's round trip and each READ's bytes.
use remora::core::{Counters, Endpoint, FabricError, Op, QueuePair, Recv, Work};
use remora::layouts::NodeId;
use std::cell::Cell;

/// How long a waiting doorbell lets its thread's other work run before it looks again (ns
/// of virtual time): a fraction of one READ round trip (~2 µs), so the node idles at most
/// this long between two doorbells.
const WAIT_NS: u64 = 200;

/// The READ engine of one compute node: tickets served in order.
#[derive(Default)]
pub(super) struct NodeReads {
    next: Cell<u64>,
    serving: Cell<u64>,
}

/// Hands the node to the next ticket when the holder's doorbell ends (or its future is
/// dropped).
struct Turn<'a>(&'a NodeReads);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.serving.set(self.0.serving.get() + 1);
    }
}

/// A client's queue pair; READ-only doorbells wait for the node's turn when gated.
pub(super) struct GatedQp<'a, Q> {
    inner: &'a Q,
    node: Option<&'a NodeReads>,
}

impl<Q: QueuePair> QueuePair for GatedQp<'_, Q> {
    fn peer(&self) -> NodeId {
        self.inner.peer()
    }
    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        // Node images only: an 8-byte READ is a word, not a node (the heartbeat is no READ:
        // the server sends it into the client's memory, as the paper's does).
        let reads = ops.iter().all(|o| matches!(o, Op::Read { .. }))
            && ops
                .iter()
                .any(|o| matches!(o, Op::Read { local, .. } if local.len() > 8));
        let Some(node) = self.node.filter(|_| reads) else {
            return self.inner.post(ops).await;
        };
        // One READ at a time: each takes its own turn, so a multi-issued level's READs are
        // served one after another, interleaved with the other threads' (Fig. 9(b)).
        for i in 0..ops.len() {
            let ticket = node.next.get();
            node.next.set(ticket + 1);
            while node.serving.get() != ticket {
                self.inner.pause(WAIT_NS).await;
            }
            let _turn = Turn(node);
            self.inner.post(&mut ops[i..=i]).await?;
        }
        Ok(())
    }
    async fn post_unsignaled<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        self.inner.post_unsignaled(ops).await
    }
    async fn recv<'a>(&'a self, buf: &'a mut [u8]) -> Result<Recv, FabricError> {
        self.inner.recv(buf).await
    }
    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        self.inner.try_recv(buf)
    }
    fn max_message(&self) -> usize {
        self.inner.max_message()
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn is_broken(&self) -> bool {
        self.inner.is_broken()
    }
    fn clock_ns(&self) -> Option<u64> {
        self.inner.clock_ns()
    }
    async fn pause(&self, ns: u64) {
        self.inner.pause(ns).await
    }
    fn charge(&self, work: Work) {
        self.inner.charge(work)
    }
}

/// A client's endpoint to the one memory node of a spatial run, gated or not.
pub(super) struct GatedEp<'a, E: Endpoint> {
    inner: &'a E,
    qp: GatedQp<'a, E::Qp>,
}

impl<'a, E: Endpoint> GatedEp<'a, E> {
    /// `inner`'s queue pair to memory node 0, its READ doorbells gated by `node` if given.
    pub(super) fn new(inner: &'a E, node: Option<&'a NodeReads>) -> Result<Self, FabricError> {
        Ok(GatedEp {
            inner,
            qp: GatedQp {
                inner: inner.qp(0)?,
                node,
            },
        })
    }
}

impl<'a, E: Endpoint> Endpoint for GatedEp<'a, E> {
    type Qp = GatedQp<'a, E::Qp>;
    fn qp(&self, node: NodeId) -> Result<&Self::Qp, FabricError> {
        if node == self.qp.peer() {
            Ok(&self.qp)
        } else {
            Err(FabricError::UnknownNode { node })
        }
    }
    fn nodes(&self) -> &[NodeId] {
        self.inner.nodes()
    }
    fn client_id(&self) -> u32 {
        self.inner.client_id()
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    async fn pause(&self, ns: u64) {
        self.inner.pause(ns).await
    }
    fn charge(&self, work: Work) {
        self.inner.charge(work)
    }
    async fn fence(&self, node: NodeId, client: u32) -> Result<(), FabricError> {
        self.inner.fence(node, client).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora::core::GlobalAddr;
    use remora::core::block_on::yield_now;
    use std::task::{Context, Waker};

    /// A queue pair whose doorbells take three polls each; it records how many overlap.
    #[derive(Default)]
    struct Slow {
        counters: Counters,
        in_flight: Cell<u32>,
        most: Cell<u32>,
        posts: Cell<u32>,
    }

    impl QueuePair for Slow {
        fn peer(&self) -> NodeId {
            0
        }
        async fn post<'a, 'b>(&'a self, _ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
            self.in_flight.set(self.in_flight.get() + 1);
            self.most.set(self.most.get().max(self.in_flight.get()));
            for _ in 0..3 {
                yield_now().await;
            }
            self.in_flight.set(self.in_flight.get() - 1);
            self.posts.set(self.posts.get() + 1);
            Ok(())
        }
        async fn recv<'a>(&'a self, _buf: &'a mut [u8]) -> Result<Recv, FabricError> {
            Err(FabricError::Flushed)
        }
        fn try_recv(&self, _buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
            Ok(None)
        }
        fn max_message(&self) -> usize {
            4096
        }
        fn counters(&self) -> &Counters {
            &self.counters
        }
        fn is_broken(&self) -> bool {
            false
        }
    }

    /// Four clients of one node each post two doorbells of two READs of `len` bytes, polled
    /// in turn; returns the most doorbells that were in flight at once and how many there
    /// were.
    fn most_in_flight(node: Option<&NodeReads>, len: usize) -> (u32, u32) {
        let qp = Slow::default();
        let mut bufs = [[0u8; 128]; 4];
        let mut clients: Vec<_> = bufs
            .iter_mut()
            .map(|b| {
                let gated = GatedQp { inner: &qp, node };
                Box::pin(async move {
                    for _ in 0..2 {
                        let (x, y) = b.split_at_mut(64);
                        let remote = GlobalAddr::new(0, 0);
                        let mut ops = [
                            Op::Read {
                                remote,
                                local: &mut x[..len],
                            },
                            Op::Read {
                                remote,
                                local: &mut y[..len],
                            },
                        ];
                        gated.post(&mut ops).await.unwrap();
                    }
                })
            })
            .collect();
        let mut cx = Context::from_waker(Waker::noop());
        let mut done = [false; 4];
        for _ in 0..1000 {
            for (d, c) in done.iter_mut().zip(clients.iter_mut()) {
                *d = *d || c.as_mut().poll(&mut cx).is_ready();
            }
        }
        assert!(done.iter().all(|d| *d), "a client never finished");
        (qp.most.get(), qp.posts.get())
    }

    #[test]
    fn a_node_serves_one_read_at_a_time() {
        let node = NodeReads::default();
        // Gated: each READ on its own, one in flight on the node.
        assert_eq!(most_in_flight(Some(&node), 64), (1, 16));
        assert_eq!(most_in_flight(None, 64), (4, 8));
        // An 8-byte word is not a node image: not gated.
        assert_eq!(most_in_flight(Some(&node), 8), (4, 8));
    }
}

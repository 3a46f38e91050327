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
//!
//! `--paper-entry-bytes` ([`Wire`]): a gated READ of a node image carries the paper's node
//! bytes on the wire, not remora's. The paper's entry is a rectangle of "four double
//! precision floating-point variables" (seeds/003 §2) and a child pointer, 40 bytes, where
//! remora's is four i32 and a pointer, 24 (`remora::layouts::catfish::ENTRY_LEN`); an
//! offloaded search of 130-entry nodes then moves 1.66x remora's bytes, which the memory
//! node's one link must carry for every client node (§5.3.2: the offloading client
//! "has to fetch the nodes with more irrelevant rectangles, and this consumes both
//! additional bandwidth and time"). The READ is one READ of the longer length, of the
//! node and the bytes beside it (the node's own image is copied out of it); nothing else
//! changes (the client's CPU charges stay remora's node's).
use remora::core::{Counters, Endpoint, FabricError, GlobalAddr, Op, QueuePair, Recv, Work};
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

/// The paper's node bytes on the wire (`--paper-entry-bytes`, see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wire {
    /// Bytes of remora's node image (`node_len(fanout)`): the READs this applies to.
    pub node_len: usize,
    /// Bytes each such READ carries beyond it: (paper's entry - remora's) x fanout.
    pub pad: usize,
    /// Bytes of the memory node's region: a node near its end is read with the bytes
    /// before it instead of after.
    pub region_len: u64,
}

impl Wire {
    /// The wire of a tree of `fanout` entries a node, each `entry_bytes` in the paper's
    /// layout; `None` when that is not more than remora's entry.
    pub(super) fn new(entry_bytes: usize, fanout: usize, region_len: u64) -> Option<Wire> {
        use remora::layouts::catfish::{ENTRY_LEN, node_len};
        let pad = entry_bytes.checked_sub(ENTRY_LEN)?.checked_mul(fanout)?;
        (pad > 0).then_some(Wire {
            node_len: node_len(fanout),
            pad,
            region_len,
        })
    }

    /// Where the padded READ of the node at `remote` starts, and where the node's own
    /// image lies in what it reads.
    fn span(&self, remote: GlobalAddr) -> (GlobalAddr, usize) {
        let total = (self.node_len + self.pad) as u64;
        let off = remote.offset();
        if off.saturating_add(total) <= self.region_len || off < self.pad as u64 {
            (remote, 0)
        } else {
            (
                GlobalAddr::new(remote.node(), off - self.pad as u64),
                self.pad,
            )
        }
    }
}

/// A client's queue pair; READ-only doorbells wait for the node's turn when gated.
pub(super) struct GatedQp<'a, Q> {
    inner: &'a Q,
    node: Option<&'a NodeReads>,
    /// The paper's node bytes for gated READs of node images.
    wire: Option<Wire>,
    /// The padded READ's buffer (allocated once; taken while a READ is in flight).
    scratch: Cell<Vec<u8>>,
}

impl<'a, Q: QueuePair> GatedQp<'a, Q> {
    fn new(inner: &'a Q, node: Option<&'a NodeReads>, wire: Option<Wire>) -> Self {
        let cap = wire.map_or(0, |w| w.node_len + w.pad);
        GatedQp {
            inner,
            node,
            wire,
            scratch: Cell::new(vec![0; cap]),
        }
    }

    /// Posts the single op `op`: a READ of a node image as the paper's longer node when
    /// `--paper-entry-bytes` asks for it, anything else as it is.
    async fn post_one(&self, op: &mut [Op<'_>]) -> Result<(), FabricError> {
        let wire = match (self.wire, op) {
            (Some(w), [Op::Read { remote, local }]) if local.len() == w.node_len => {
                (w, *remote, local)
            }
            (_, op) => return self.inner.post(op).await,
        };
        let (w, remote, local) = wire;
        let total = w.node_len + w.pad;
        let mut scratch = self.scratch.take();
        if scratch.len() < total {
            // Only if two READs of this queue pair were in flight at once (a client posts
            // one doorbell at a time): a second buffer.
            scratch.resize(total, 0);
        }
        let (start, skip) = w.span(remote);
        let r = {
            let mut padded = [Op::Read {
                remote: start,
                local: &mut scratch[..total],
            }];
            self.inner.post(&mut padded).await
        };
        if r.is_ok() {
            local.copy_from_slice(&scratch[skip..skip + w.node_len]);
        }
        self.scratch.set(scratch);
        r
    }
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
            self.post_one(&mut ops[i..=i]).await?;
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
    /// `inner`'s queue pair to memory node 0, its READ doorbells gated by `node` if given,
    /// its gated READs of node images carrying the paper's node bytes if `wire` is given.
    pub(super) fn new(
        inner: &'a E,
        node: Option<&'a NodeReads>,
        wire: Option<Wire>,
    ) -> Result<Self, FabricError> {
        Ok(GatedEp {
            inner,
            qp: GatedQp::new(inner.qp(0)?, node, wire),
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
        remora::core::post_only_qp!();
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
                let gated = GatedQp::new(&qp, node, None);
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

    /// A memory of `len` bytes (byte i = i mod 251) that records each READ's length.
    struct Mem {
        counters: Counters,
        bytes: Vec<u8>,
        lens: std::cell::RefCell<Vec<usize>>,
    }

    impl Mem {
        fn new(len: usize) -> Mem {
            Mem {
                counters: Counters::default(),
                bytes: (0..len).map(|i| (i % 251) as u8).collect(),
                lens: Default::default(),
            }
        }
    }

    impl QueuePair for Mem {
        remora::core::post_only_qp!();
        async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
            for op in ops.iter_mut() {
                if let Op::Read { remote, local } = op {
                    let at = remote.offset() as usize;
                    let len = local.len();
                    let Some(src) = self.bytes.get(at..at + len) else {
                        return Err(FabricError::RemoteAccess {
                            wr: 0,
                            addr: *remote,
                            len,
                        });
                    };
                    local.copy_from_slice(src);
                    self.lens.borrow_mut().push(len);
                }
            }
            Ok(())
        }
    }

    /// `--paper-entry-bytes 40` on 15-entry nodes: each gated READ of a node image is one
    /// READ of the paper's 632-byte node (remora's 392 + 15 x 16), the client gets its own
    /// node's bytes, also for a node at the region's end; other READs are left alone.
    #[test]
    fn a_node_read_carries_the_papers_node_bytes() {
        use remora::layouts::catfish::node_len;
        let region = 4096usize;
        let mem = Mem::new(region);
        let node = NodeReads::default();
        let wire = Wire::new(40, 15, region as u64).expect("40 > 24");
        assert_eq!((wire.node_len, wire.pad), (node_len(15), 240));
        assert_eq!(Wire::new(24, 15, region as u64), None);
        let gated = GatedQp::new(&mem, Some(&node), Some(wire));
        let len = node_len(15);
        for at in [1000, region - len] {
            let mut img = vec![0u8; len];
            let mut word = [0u8; 16];
            let mut ops = [
                Op::Read {
                    remote: GlobalAddr::new(0, at as u64),
                    local: &mut img,
                },
                Op::Read {
                    remote: GlobalAddr::new(0, 0),
                    local: &mut word,
                },
            ];
            remora::core::block_on::block_on(gated.post(&mut ops)).expect("reads");
            assert_eq!(img, mem.bytes[at..at + len], "node at {at}");
            assert_eq!(word, mem.bytes[..16]);
        }
        assert_eq!(*mem.lens.borrow(), [632, 16, 632, 16]);
        // Without the wire the same READs carry remora's node.
        let plain = Mem::new(region);
        let gated = GatedQp::new(&plain, Some(&node), None);
        let mut img = vec![0u8; len];
        let mut ops = [Op::Read {
            remote: GlobalAddr::new(0, 1000),
            local: &mut img,
        }];
        remora::core::block_on::block_on(gated.post(&mut ops)).expect("read");
        assert_eq!(*plain.lens.borrow(), [len]);
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

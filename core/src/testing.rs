//! Pieces of the in-memory test fabrics that unit tests share: core's own (`#[cfg(test)]`)
//! and, through the `conformance` feature every fabric's tests already use, the bins'.
//!
//! A test fabric here is one memory node, 0, whose queue pairs only post one-sided work.
//! Each test writes its own [`QueuePair::post`] (what its memory does with a doorbell) and
//! takes the rest from [`post_only_qp!`](crate::post_only_qp); [`OneNode`] is the endpoint
//! to such a node.
use crate::fabric::{Endpoint, FabricError, QueuePair};
use remora_layouts::NodeId;

/// The items of a test [`QueuePair`](crate::fabric::QueuePair) to node 0 that only posts
/// one-sided work, for inside its `impl QueuePair` beside its own `post`: `peer` is 0,
/// `recv` is refused as unsupported (a client that waits for messages, as CANRT's turn
/// notices, falls back to polling), `try_recv` finds nothing, `max_message` is 4096, the
/// counters are the type's `counters` field and it is never broken.
#[macro_export]
macro_rules! post_only_qp {
    () => {
        fn peer(&self) -> $crate::NodeId {
            0
        }
        async fn recv<'a>(
            &'a self,
            _buf: &'a mut [u8],
        ) -> Result<$crate::Recv, $crate::FabricError> {
            Err($crate::FabricError::Unsupported { what: "recv" })
        }
        fn try_recv(&self, _buf: &mut [u8]) -> Result<Option<$crate::Recv>, $crate::FabricError> {
            Ok(None)
        }
        fn max_message(&self) -> usize {
            4096
        }
        fn counters(&self) -> &$crate::Counters {
            &self.counters
        }
        fn is_broken(&self) -> bool {
            false
        }
    };
}

/// An endpoint that reaches memory node 0 only, through `qp`.
pub struct OneNode<Q> {
    /// The queue pair to node 0 (tests read its memory and counters through it).
    pub qp: Q,
    nodes: [NodeId; 1],
}

impl<Q> OneNode<Q> {
    /// The endpoint whose queue pair to node 0 is `qp`.
    pub fn new(qp: Q) -> OneNode<Q> {
        OneNode { qp, nodes: [0] }
    }
}

impl<Q: QueuePair> Endpoint for OneNode<Q> {
    type Qp = Q;
    fn qp(&self, node: NodeId) -> Result<&Q, FabricError> {
        if node == 0 {
            Ok(&self.qp)
        } else {
            Err(FabricError::UnknownNode { node })
        }
    }
    fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }
}

/// An endpoint to node 0 on the test's clock ([`crate::delegation::park::testing::Clock`]:
/// the test sets the time, `pause` is a timer of that clock), whose queue pair posts nothing
/// and receives only what the test hands it ([`Stalled::reply`]): for waits whose process is
/// stopped between two looks (the clock jumps) while the peer stays silent or answers.
#[cfg(all(test, feature = "alloc"))]
#[derive(Default)]
pub(crate) struct Stalled {
    pub(crate) clock: crate::delegation::park::testing::Clock,
    /// A SEND of this many bytes (zeros) waits for the next receive.
    pub(crate) reply: core::cell::Cell<Option<u32>>,
    counters: crate::counters::Counters,
}

#[cfg(all(test, feature = "alloc"))]
impl QueuePair for Stalled {
    fn peer(&self) -> NodeId {
        0
    }
    async fn post<'a, 'b>(
        &'a self,
        _ops: &'a mut [crate::fabric::Op<'b>],
    ) -> Result<(), FabricError> {
        Ok(())
    }
    async fn recv<'a>(&'a self, buf: &'a mut [u8]) -> Result<crate::fabric::Recv, FabricError> {
        core::future::poll_fn(|_| match self.try_recv(buf) {
            Ok(Some(r)) => core::task::Poll::Ready(Ok(r)),
            Ok(None) => core::task::Poll::Pending,
            Err(e) => core::task::Poll::Ready(Err(e)),
        })
        .await
    }
    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<crate::fabric::Recv>, FabricError> {
        Ok(self.reply.take().map(|len| {
            buf[..len as usize].fill(0);
            crate::fabric::Recv {
                kind: crate::fabric::RecvKind::Send,
                len,
                imm: None,
            }
        }))
    }
    fn max_message(&self) -> usize {
        4096
    }
    fn counters(&self) -> &crate::counters::Counters {
        &self.counters
    }
    fn is_broken(&self) -> bool {
        false
    }
}

#[cfg(all(test, feature = "alloc"))]
impl Endpoint for Stalled {
    type Qp = Stalled;
    fn qp(&self, node: NodeId) -> Result<&Stalled, FabricError> {
        if node == 0 {
            Ok(self)
        } else {
            Err(FabricError::UnknownNode { node })
        }
    }
    fn nodes(&self) -> &[NodeId] {
        &[0]
    }
    fn now_ns(&self) -> u64 {
        self.clock.now.get()
    }
    fn pause(&self, ns: u64) -> impl core::future::Future<Output = ()> {
        self.clock.timer(ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_on::block_on;
    use crate::counters::Counters;
    use crate::fabric::Op;

    /// A queue pair whose posts do nothing but count.
    struct Idle {
        counters: Counters,
    }

    impl QueuePair for Idle {
        crate::post_only_qp!();
        async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
            self.counters.count_post(ops);
            Ok(())
        }
    }

    #[test]
    fn one_node_reaches_node_0_only_and_its_qp_takes_no_messages() {
        let ep = OneNode::new(Idle {
            counters: Counters::new(),
        });
        assert_eq!(ep.nodes(), [0]);
        assert!(matches!(
            ep.qp(1),
            Err(FabricError::UnknownNode { node: 1 })
        ));
        let qp = ep.qp(0).expect("node 0");
        assert_eq!(
            (qp.peer(), qp.max_message(), qp.is_broken()),
            (0, 4096, false)
        );
        let mut buf = [0u8; 8];
        // CANRT's turn notices depend on these two: nothing waiting, then deaf.
        assert!(matches!(qp.try_recv(&mut buf), Ok(None)));
        assert!(matches!(
            block_on(qp.recv(&mut buf)),
            Err(FabricError::Unsupported { what: "recv" })
        ));
        block_on(qp.post(&mut [])).expect("post");
        assert_eq!(qp.counters().snapshot().doorbells, 1);
        assert!(core::ptr::eq(qp.counters(), &ep.qp.counters));
    }
}

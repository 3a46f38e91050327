//! An endpoint whose queue pairs pass everything through to a fabric's, except that every
//! post goes through a test's [`PostHook`] first: the crash and kill tests count a client's
//! doorbells, tear one of its writes, or stop it holding a lock this way.
//!
//! A copy of `poller/tests/common/hooked.rs` for the `remora-bins` tests, which reach the core
//! crate through the `remora` facade (`remora::core`).
use remora::core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv};
use remora::core::{Counters, NodeId};

/// What a test does with a client's posts. `qp` is the fabric's queue pair; the hook posts
/// `ops` there itself (or not, to stop the client there).
pub trait PostHook<Q: QueuePair> {
    fn post<'a, 'b>(
        &'a self,
        qp: &'a Q,
        ops: &'a mut [Op<'b>],
    ) -> impl Future<Output = Result<(), FabricError>>;
}

/// A queue pair of the fabric's with a hook on its posts.
pub struct HookedQp<'a, Q, H> {
    pub qp: &'a Q,
    pub hook: H,
}

impl<Q: QueuePair, H: PostHook<Q>> QueuePair for HookedQp<'_, Q, H> {
    fn peer(&self) -> NodeId {
        self.qp.peer()
    }
    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        self.hook.post(self.qp, ops).await
    }
    async fn recv<'a>(&'a self, buf: &'a mut [u8]) -> Result<Recv, FabricError> {
        self.qp.recv(buf).await
    }
    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        self.qp.try_recv(buf)
    }
    fn max_message(&self) -> usize {
        self.qp.max_message()
    }
    fn counters(&self) -> &Counters {
        self.qp.counters()
    }
    fn is_broken(&self) -> bool {
        self.qp.is_broken()
    }
    fn clock_ns(&self) -> Option<u64> {
        self.qp.clock_ns()
    }
    async fn pause(&self, ns: u64) {
        self.qp.pause(ns).await
    }
}

/// An endpoint of the fabric's whose queue pairs are hooked.
pub struct HookedEp<'a, E: Endpoint, H> {
    pub ep: &'a E,
    qps: Vec<HookedQp<'a, E::Qp, H>>,
}

impl<'a, E: Endpoint, H> HookedEp<'a, E, H> {
    /// Hooks every queue pair of `ep`, each with the hook `hook(node)` makes.
    pub fn new(ep: &'a E, mut hook: impl FnMut(NodeId) -> H) -> Self {
        let qps = ep
            .nodes()
            .iter()
            .map(|&n| HookedQp {
                qp: ep.qp(n).expect("a connected node"),
                hook: hook(n),
            })
            .collect();
        HookedEp { ep, qps }
    }
}

impl<'a, E: Endpoint, H: PostHook<E::Qp>> Endpoint for HookedEp<'a, E, H> {
    type Qp = HookedQp<'a, E::Qp, H>;
    fn qp(&self, node: NodeId) -> Result<&Self::Qp, FabricError> {
        self.qps
            .iter()
            .find(|q| q.qp.peer() == node)
            .ok_or(FabricError::UnknownNode { node })
    }
    fn nodes(&self) -> &[NodeId] {
        self.ep.nodes()
    }
    fn client_id(&self) -> u32 {
        self.ep.client_id()
    }
    fn now_ns(&self) -> u64 {
        self.ep.now_ns()
    }
    async fn pause(&self, ns: u64) {
        self.ep.pause(ns).await
    }
    async fn fence(&self, node: NodeId, client: u32) -> Result<(), FabricError> {
        self.ep.fence(node, client).await
    }
}

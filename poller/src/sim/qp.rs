//! `SimQp` and `SimEndpoint`: the fabric contract of `remora_core::fabric` on the simulator.
//!
//! A post copies WRITE/SEND payloads into engine-owned pooled buffers at once and hands the
//! batch to the engine; READ data is sampled into engine-owned buffers at the target and
//! copied into the caller's buffers only when the future completes. Dropping a post future
//! early is therefore always safe: the engine finishes the ops (they take effect at the
//! target, as on hardware) and recycles the buffers, and never touches the caller's memory.
//!
//! Counting follows `core/src/counters.rs`: `count_post` once per doorbell when the batch is
//! sent, `count_round_trip` when an awaited post completes, `count_recv` per receive
//! completion taken, `count_error` per failed post or receive.
use super::engine::{BatchState, Kind, NO_CLIENT, NO_TASK, RxDone, World};
use crate::executor::{park_current, veto_park};
use remora_core::counters::Counters;
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv, RecvKind, Work};
use remora_layouts::NodeId;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

pub(crate) type WorldRef = Rc<RefCell<World>>;

const OUTSIDE: FabricError = FabricError::Unsupported {
    what: "sim verbs must be awaited by a task of the simulation (Sim::run)",
};

/// One end of a simulated reliable connection: a client's queue pair to a memory node, or
/// the memory node's side of it (which serves the echo service and can only SEND).
pub struct SimQp {
    w: WorldRef,
    end: u32,
    node: NodeId,
    max_msg: usize,
    counters: Counters,
}

impl SimQp {
    pub(crate) fn new(w: WorldRef, end: u32) -> SimQp {
        let (node, max_msg) = {
            let b = w.borrow();
            (b.ends[end as usize].node, b.tm.max_message)
        };
        SimQp {
            w,
            end,
            node,
            max_msg,
            counters: Counters::new(),
        }
    }

    /// The engine's id of this end (for traces).
    pub fn end_id(&self) -> u32 {
        self.end
    }

    fn take_rx(&self, w: &mut World, rx: RxDone, buf: &mut [u8]) -> Result<Recv, FabricError> {
        w.ends[self.end as usize].rq_credits += 1;
        let kind = rx.kind.unwrap_or(RecvKind::Send);
        let out = if kind == RecvKind::Send && rx.data.len() > buf.len() {
            self.counters.count_error();
            Err(FabricError::LocalLength {
                wr: 0,
                len: rx.data.len(),
                max: buf.len(),
            })
        } else {
            let n = if kind == RecvKind::Send {
                rx.data.len()
            } else {
                0
            };
            buf[..n].copy_from_slice(&rx.data[..n]);
            self.counters.count_recv(n);
            Ok(Recv {
                kind,
                len: rx.len,
                imm: rx.imm,
            })
        };
        w.pool.give(rx.data);
        out
    }
}

/// The future of [`SimQp::post`].
pub(crate) struct PostFuture<'a, 'b> {
    qp: &'a SimQp,
    ops: &'a mut [Op<'b>],
    batch: Option<u32>,
    finished: bool,
}

impl PostFuture<'_, '_> {
    fn start(&mut self, w: &mut World) -> Poll<Result<(), FabricError>> {
        if self.ops.is_empty() {
            return Poll::Ready(Ok(()));
        }
        let task = w.current_task;
        if task == NO_TASK {
            return Poll::Ready(Err(OUTSIDE));
        }
        let end = self.qp.end as usize;
        if w.ends[end].broken {
            self.qp.counters.count_error();
            return Poll::Ready(Err(FabricError::Flushed));
        }
        let client = w.ends[end].client;
        if client != NO_CLIENT {
            let c = &mut w.clients[client as usize];
            let k = c.posts;
            c.posts += 1;
            if c.dead {
                return Poll::Pending;
            }
            if w.faults.client_crash_post(client) == Some(k) {
                w.crash_client(client);
                return Poll::Pending;
            }
        }
        self.qp.counters.count_post(self.ops);
        let mut ids = std::mem::take(&mut w.scratch);
        ids.clear();
        let node = self.qp.node;
        for (wr, op) in self.ops.iter().enumerate() {
            let id = w.ops.alloc();
            let mut buf = Vec::new();
            let mut mask = !0u64;
            let (kind, remote, len, x, y, imm) = match op {
                Op::Read { remote, local } => {
                    buf = w.pool.take(local.len());
                    (Kind::Read, *remote, local.len(), 0, 0, 0)
                }
                Op::Write { remote, local } => {
                    buf = w.pool.take(local.len());
                    buf.copy_from_slice(local);
                    (Kind::Write, *remote, local.len(), 0, 0, 0)
                }
                Op::WriteImm { remote, local, imm } => {
                    buf = w.pool.take(local.len());
                    buf.copy_from_slice(local);
                    (Kind::WriteImm, *remote, local.len(), 0, 0, *imm)
                }
                Op::Cas {
                    remote,
                    compare,
                    swap,
                    ..
                } => (Kind::Cas, *remote, 8, *compare, *swap, 0),
                Op::MaskedCas {
                    remote,
                    compare,
                    swap,
                    mask: m,
                    ..
                } => {
                    mask = *m;
                    (Kind::MaskedCas, *remote, 8, *compare, *swap, 0)
                }
                Op::Faa { remote, add, .. } => (Kind::Faa, *remote, 8, 0, *add, 0),
                Op::Send { local } => {
                    buf = w.pool.take(local.len());
                    buf.copy_from_slice(local);
                    let remote = remora_layouts::GlobalAddr::new(node, 0);
                    (Kind::Send, remote, local.len(), 0, 0, 0)
                }
            };
            let max = if kind == Kind::Send {
                self.qp.max_msg
            } else {
                u32::MAX as usize
            };
            let o = w.ops.get_mut(id);
            o.kind = kind;
            o.remote = remote;
            o.len = len.min(u32::MAX as usize) as u32;
            o.x = x;
            o.y = y;
            o.mask = mask;
            o.imm = imm;
            o.result = 0;
            o.buf = buf;
            o.local_err = (len > max).then_some(FabricError::LocalLength { wr, len, max });
            ids.push(id);
        }
        let b = w.post(self.qp.end, &ids, task);
        w.scratch = ids;
        self.batch = Some(b);
        Poll::Pending
    }

    fn collect(&mut self, w: &mut World, b: u32) -> Result<(), FabricError> {
        let (err, upto) = {
            let batch = w.batches.get(b);
            let upto = if batch.err.is_some() {
                batch.err_wr as usize
            } else {
                batch.ops.len()
            };
            (batch.err, upto)
        };
        for (i, op) in self.ops.iter_mut().enumerate().take(upto) {
            let id = w.batches.get(b).ops[i];
            let slot = w.ops.get(id);
            match op {
                Op::Read { local, .. } => local.copy_from_slice(&slot.buf[..local.len()]),
                Op::Cas { old, .. } | Op::MaskedCas { old, .. } | Op::Faa { old, .. } => {
                    **old = slot.result
                }
                _ => {}
            }
        }
        w.free_batch(b);
        self.qp.counters.count_round_trip();
        match err {
            Some(e) => {
                self.qp.counters.count_error();
                Err(e)
            }
            None => Ok(()),
        }
    }
}

impl Future for PostFuture<'_, '_> {
    type Output = Result<(), FabricError>;
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(Err(FabricError::Flushed));
        }
        let w = this.qp.w.clone();
        let mut w = w.borrow_mut();
        let r = match this.batch {
            None => this.start(&mut w),
            Some(b) => {
                if w.batches.get(b).state != BatchState::Done {
                    let t = w.current_task;
                    if t != NO_TASK {
                        w.batches.get_mut(b).task = t;
                    }
                    Poll::Pending
                } else {
                    this.batch = None;
                    Poll::Ready(this.collect(&mut w, b))
                }
            }
        };
        if r.is_ready() {
            this.finished = true;
        } else if let Some(b) = this.batch {
            // Its completion marks the coroutine (`complete`), which a join then polls.
            let batch = w.batches.get_mut(b);
            if batch.mark.is_none() {
                batch.mark = park_current(true);
            } else {
                park_current(false);
            }
        }
        r
    }
}

impl Drop for PostFuture<'_, '_> {
    fn drop(&mut self) {
        let Some(b) = self.batch.take() else { return };
        // If the world is borrowed (it never is while tasks are dropped), the batch leaks.
        if let Ok(mut w) = self.qp.w.try_borrow_mut() {
            match w.batches.get(b).state {
                BatchState::Done => w.free_batch(b),
                _ => w.batches.get_mut(b).state = BatchState::Abandoned,
            }
        }
    }
}

/// The future of [`SimQp::post_unsignaled`].
pub(crate) struct UnsignaledFuture<'a, 'b> {
    post: PostFuture<'a, 'b>,
    /// Posted unwatched: the wait for the doorbell.
    doorbell: Option<super::cluster::Sleep>,
}

impl Future for UnsignaledFuture<'_, '_> {
    type Output = Result<(), FabricError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(d) = this.doorbell.as_mut() {
            return Pin::new(d).poll(cx).map(|()| Ok(()));
        }
        let wr = this.post.qp.w.clone();
        let unwatched = this.post.batch.is_none()
            && !this.post.finished
            && wr.borrow().tm.unsignaled_at_post
            && this
                .post
                .ops
                .iter()
                .all(|o| matches!(o, Op::Write { .. } | Op::WriteImm { .. } | Op::Send { .. }));
        if !unwatched {
            return Pin::new(&mut this.post).poll(cx);
        }
        let mut w = wr.borrow_mut();
        if let Poll::Ready(r) = this.post.start(&mut w) {
            this.post.finished = true;
            return Poll::Ready(r);
        }
        // Posted (or its client crashed at the post: then it never resolves).
        let Some(b) = this.post.batch.take() else {
            return Poll::Pending;
        };
        this.post.finished = true;
        w.batches.get_mut(b).state = BatchState::Abandoned;
        let client = w.ends[this.post.qp.end as usize].client;
        let at = if client == NO_CLIENT {
            w.now
        } else {
            w.clients[client as usize].cpu_free
        };
        drop(w);
        let d = this
            .doorbell
            .insert(super::cluster::sleep_until(wr.clone(), at));
        Pin::new(d).poll(cx).map(|()| Ok(()))
    }
}

/// The future of [`SimQp::recv`].
pub(crate) struct RecvFuture<'a> {
    qp: &'a SimQp,
    buf: &'a mut [u8],
    /// When the coroutine's CPU debt is paid (set at the first poll).
    paid_at: Option<u64>,
}

impl Future for RecvFuture<'_> {
    type Output = Result<Recv, FabricError>;
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut w = this.qp.w.borrow_mut();
        let end = this.qp.end as usize;
        // The coroutine's stated CPU work is done before it waits for a receive.
        let first = this.paid_at.is_none();
        let paid = *this.paid_at.get_or_insert_with(|| w.pay_debt());
        let t = w.current_task;
        if w.now < paid && t != NO_TASK {
            if first {
                w.schedule(paid, super::engine::Ev::Wake(t));
            }
            veto_park();
            return Poll::Pending;
        }
        if let Some(rx) = w.ends[end].cq.pop_front() {
            return Poll::Ready(this.qp.take_rx(&mut w, rx, this.buf));
        }
        if w.ends[end].broken {
            this.qp.counters.count_error();
            return Poll::Ready(Err(FabricError::Flushed));
        }
        let t = w.current_task;
        if t == NO_TASK {
            return Poll::Ready(Err(OUTSIDE));
        }
        if !w.ends[end].recv_waiters.contains(&t) {
            w.ends[end].recv_waiters.push(t);
        }
        veto_park();
        Poll::Pending
    }
}

impl QueuePair for SimQp {
    fn peer(&self) -> NodeId {
        self.node
    }

    fn post<'a, 'b>(
        &'a self,
        ops: &'a mut [Op<'b>],
    ) -> impl Future<Output = Result<(), FabricError>> {
        PostFuture {
            qp: self,
            ops,
            batch: None,
            finished: false,
        }
    }

    /// With the model's `unsignaled_at_post`, resolves once the doorbell is rung: the batch
    /// (its data copied at post) goes on unwatched and is freed when it completes; an error
    /// breaks the queue pair for later posts. Otherwise (or for a READ or an atomic, whose
    /// results must land) it waits for completion, as [`SimQp::post`] does.
    fn post_unsignaled<'a, 'b>(
        &'a self,
        ops: &'a mut [Op<'b>],
    ) -> impl Future<Output = Result<(), FabricError>> {
        UnsignaledFuture {
            post: PostFuture {
                qp: self,
                ops,
                batch: None,
                finished: false,
            },
            doorbell: None,
        }
    }

    fn recv<'a>(&'a self, buf: &'a mut [u8]) -> impl Future<Output = Result<Recv, FabricError>> {
        RecvFuture {
            qp: self,
            buf,
            paid_at: None,
        }
    }

    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        let mut w = self.w.borrow_mut();
        let end = self.end as usize;
        match w.ends[end].cq.pop_front() {
            Some(rx) => self.take_rx(&mut w, rx, buf).map(Some),
            None if w.ends[end].broken => Err(FabricError::Flushed),
            None => Ok(None),
        }
    }

    fn max_message(&self) -> usize {
        self.max_msg
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn is_broken(&self) -> bool {
        self.w.borrow().ends[self.end as usize].broken
    }

    /// Virtual time, as [`SimEndpoint::now_ns`].
    fn clock_ns(&self) -> Option<u64> {
        Some(self.w.borrow().now / 1000)
    }

    /// A virtual-time wait, as [`SimEndpoint::pause`].
    fn pause(&self, ns: u64) -> impl Future<Output = ()> {
        super::cluster::pause(self.w.clone(), ns)
    }

    /// CPU debt of the calling coroutine, as [`SimEndpoint::charge`].
    fn charge(&self, work: Work) {
        self.w.borrow_mut().charge(work);
    }
}

/// A client's endpoint: one queue pair per memory node.
pub struct SimEndpoint {
    /// The world of its queue pairs (`None` with none), held here too: the index code
    /// reads the clock (`now_ns`) many times a verb, and this saves it the pointer chase
    /// through `qps` to a queue pair that is often out of the host's cache.
    w: Option<WorldRef>,
    qps: Vec<SimQp>,
    nodes: Vec<NodeId>,
    client: u32,
}

impl SimEndpoint {
    pub(crate) fn new(qps: Vec<SimQp>, client: u32) -> SimEndpoint {
        let nodes = qps.iter().map(|q| q.node).collect();
        let w = qps.first().map(|q| q.w.clone());
        SimEndpoint {
            w,
            qps,
            nodes,
            client,
        }
    }
    /// The client thread this endpoint belongs to.
    pub fn client(&self) -> u32 {
        self.client
    }
    /// All queue pairs, indexed by memory node.
    pub fn qps(&self) -> &[SimQp] {
        &self.qps
    }
    /// Counters of all queue pairs added up.
    pub fn snapshot(&self) -> remora_core::Snapshot {
        self.qps
            .iter()
            .fold(remora_core::Snapshot::default(), |acc, q| {
                acc + q.counters.snapshot()
            })
    }
}

impl Endpoint for SimEndpoint {
    type Qp = SimQp;
    fn qp(&self, node: NodeId) -> Result<&SimQp, FabricError> {
        self.qps
            .get(node as usize)
            .ok_or(FabricError::UnknownNode { node })
    }
    fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }
    /// The client thread's number + 1 (0 is "none").
    fn client_id(&self) -> u32 {
        self.client + 1
    }
    fn now_ns(&self) -> u64 {
        self.w.as_ref().map_or(0, |w| w.borrow().now / 1000)
    }
    /// Pays the coroutine's CPU debt, then lets the others run for `ns` of virtual time.
    fn pause(&self, ns: u64) -> impl Future<Output = ()> {
        let w = self.w.clone();
        async move {
            if let Some(w) = w {
                super::cluster::pause(w, ns).await;
            }
        }
    }
    /// A virtual-time timer of `ns` (at least 1) from now; the coroutine's CPU debt stays
    /// owed.
    fn timer(&self, ns: u64) -> impl Future<Output = ()> {
        let w = self.w.clone();
        async move {
            if let Some(w) = w {
                let until = w.borrow().now + ns.max(1) * 1000;
                super::cluster::sleep_until(w, until).await;
            }
        }
    }
    /// Makes `work` CPU debt of the calling coroutine (model parameters `client_*`, times
    /// `client_cpu_scale`): paid on this client thread's CPU, after its other coroutines'
    /// work, before the coroutine's next post, receive or pause, or at
    /// [`ClientCtx::settle`](super::ClientCtx::settle).
    fn charge(&self, work: Work) {
        if let Some(w) = &self.w {
            w.borrow_mut().charge(work);
        }
    }
    /// Breaks every queue pair of client `client - 1` to `node`; later requests of its are
    /// flushed without touching memory. Resolves after `FENCE_SETTLE_NS` of virtual time, by
    /// which any transfer of it already being placed has landed (the longest, 64 KiB at the
    /// link rate, takes ~5 µs), as a memory node's QP error transition waits for its
    /// in-flight requests.
    fn fence(&self, node: NodeId, client: u32) -> impl Future<Output = Result<(), FabricError>> {
        let w = self.w.clone();
        async move {
            let Some(w) = w else {
                return Err(FabricError::UnknownNode { node });
            };
            let until = {
                let mut world = w.borrow_mut();
                let ends: Vec<u32> = (0..world.ends.len() as u32)
                    .filter(|&e| {
                        let end = &world.ends[e as usize];
                        !end.server && end.node == node && end.client.wrapping_add(1) == client
                    })
                    .collect();
                for e in ends {
                    // The node moves its side to the error state too: the connection ends
                    // and its handler hears of it (`on_disconnect`).
                    world.break_end(e);
                    let server = world.ends[e as usize].peer;
                    world.end_connection(server, true);
                }
                world.now + FENCE_SETTLE_NS * 1000
            };
            super::cluster::sleep_until(w, until).await;
            Ok(())
        }
    }
}

/// How long a fence waits for the fenced client's transfers in flight to land.
pub(crate) const FENCE_SETTLE_NS: u64 = 20_000;

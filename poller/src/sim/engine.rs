//! The event engine: virtual clock, event queue, NICs, queue-pair ends, and the simulated
//! life of every verb from doorbell to completion.
//!
//! Events are ordered by `(time, tie, seq)`: `tie` is drawn from the seeded RNG so that
//! simultaneous events interleave differently under different seeds but identically under
//! one seed; `seq` makes the order total. Everything that must stay ordered (the ops of one
//! queue pair, the segments of one transfer) is kept at strictly increasing times, so ties
//! never reorder it.
//!
//! The life of an op (see `target.rs` for the responder side):
//! 1. `post`: the client thread pays the posting coroutine's stated CPU work (its debt, see
//!    [`World::charge`]) and spends `client_post_ns` of CPU, then each op of the batch is
//!    serialized on the client NIC's transmit link and flies `one_way_ns` (+ jitter, + fault
//!    delays, never overtaking an earlier op of its queue pair): an `Arrive` event.
//! 2. `Arrive` at the responder NIC: receive link, NIC engine admission (`nic_mops`), then
//!    the per-verb pipeline, which schedules `Segment`/`Atomic`/`Deliver` events at the
//!    virtual times memory is touched, and the response on the way back: `RespTx` when it is
//!    ready to leave (a READ's response is placed on the link when the READ executes, since
//!    its sampling is timed by it), `RespRx` when its first byte reaches the requester.
//!    Every link is reserved when data reaches it, so a link carrying requests one way and
//!    responses or replies the other (two-sided traffic) queues them as a FIFO would.
//! 3. The ops of a queue pair complete in order once their responses are in; the batch's
//!    `Complete` event fires when its last op has; the waiting coroutine is made ready and
//!    copies the results out of engine-owned buffers.
use super::faults::{FaultKind, Faults};
use super::memory::MemNode;
use super::model::{Model, Ps};
use super::pool::{BufPool, Slab};
use super::queue::{Entry, EventQueue};
use super::rng::Rng;
use super::trace::Trace;
use crate::executor::ChildMark;
use remora_core::fabric::{FabricError, RecvKind, SegmentOrder};
use remora_core::work::{KINDS, Work};
use remora_layouts::{GlobalAddr, NodeId};
use std::collections::VecDeque;

pub(crate) const NO_TASK: u32 = u32::MAX;
pub(crate) const NO_CLIENT: u32 = u32::MAX;

/// Events of the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ev {
    /// The request of op `0` has fully arrived at its responder.
    Arrive(u32),
    /// Segment `1` of op `0` is applied (WRITE) or sampled (READ).
    Segment(u32, u32),
    /// The atomic op `0` executes.
    Atomic(u32),
    /// The receive completion of SEND / WRITE_WITH_IMM op `0` appears at its responder.
    Deliver(u32),
    /// RNR retry of held op `0`.
    RnrRetry(u32),
    /// Batch `0` has completed at its requester.
    Complete(u32),
    /// Task `0` wakes (end of a sleep or a busy-poll step).
    Wake(u32),
    /// Scheduled fault number `0` (see `faults.rs`).
    Fault(u32),
    /// The response of op `0` is ready to leave its responder (its transmit link is
    /// reserved now, in ready-time order).
    RespTx(u32),
    /// The first byte of op `0`'s response reaches its requester (its receive link is
    /// reserved now, in arrival order).
    RespRx(u32),
    /// The connection of server end `0` ends (its client crashed one dead timeout ago).
    Hangup(u32),
    /// Timer `0` ([`World::timers`]) fires: its coroutine is marked and its task made ready.
    Timer(u32),
}

/// Work for a memory node's handler outside its messages, done by `Sim` between task polls
/// (see `server.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    /// `Handler::on_connect` for server end `1` of node `0`, whose client's fabric id is `2`.
    Connect(NodeId, u32, u32),
    /// `Handler::on_disconnect` for server end `1` of node `0`.
    Disconnect(NodeId, u32),
    /// Node `0` restarted: `Handler::recover` on its surviving region (persistent nodes).
    Restart(NodeId),
}

impl Ev {
    /// Packs into one word: kind in bits 60..64, the op/batch/task id in bits 0..32, the
    /// segment number in bits 32..60.
    fn pack(self) -> u64 {
        let (k, a, b) = match self {
            Ev::Arrive(a) => (0u64, a, 0u32),
            Ev::Segment(a, b) => (1, a, b),
            Ev::Atomic(a) => (2, a, 0),
            Ev::Deliver(a) => (3, a, 0),
            Ev::RnrRetry(a) => (4, a, 0),
            Ev::Complete(a) => (5, a, 0),
            Ev::Wake(a) => (6, a, 0),
            Ev::Fault(a) => (7, a, 0),
            Ev::RespTx(a) => (8, a, 0),
            Ev::RespRx(a) => (9, a, 0),
            Ev::Hangup(a) => (10, a, 0),
            Ev::Timer(a) => (11, a, 0),
        };
        (k << 60) | ((b as u64 & 0x0FFF_FFFF) << 32) | a as u64
    }
    fn unpack(w: u64) -> Ev {
        let a = w as u32;
        let b = ((w >> 32) & 0x0FFF_FFFF) as u32;
        match w >> 60 {
            0 => Ev::Arrive(a),
            1 => Ev::Segment(a, b),
            2 => Ev::Atomic(a),
            3 => Ev::Deliver(a),
            4 => Ev::RnrRetry(a),
            5 => Ev::Complete(a),
            6 => Ev::Wake(a),
            7 => Ev::Fault(a),
            8 => Ev::RespTx(a),
            9 => Ev::RespRx(a),
            10 => Ev::Hangup(a),
            _ => Ev::Timer(a),
        }
    }
}

mod crash;
mod respond;
mod timing;
pub(crate) use timing::{Nic, Tm};

/// A receive completion waiting in a queue pair end's completion queue.
#[derive(Debug, Default)]
pub(crate) struct RxDone {
    pub kind: Option<RecvKind>,
    pub len: u32,
    pub imm: Option<u32>,
    pub data: Vec<u8>,
}

/// One end of a reliable connection: the requester side of the ops it posts and the
/// responder side of the ops its peer posts.
#[derive(Debug, Default)]
pub(crate) struct End {
    pub nic: u32,
    pub peer: u32,
    /// The memory node of this connection.
    pub node: NodeId,
    /// Owning client thread (NO_CLIENT for the memory node's side).
    pub client: u32,
    pub server: bool,
    /// Region key this end uses for one-sided access (the key when it connected).
    pub key: u32,
    /// Requester side in the error state.
    pub broken: bool,
    /// Requester side: arrival of the last request sent, completion of the last op.
    pub last_arrival: Ps,
    pub last_done: Ps,
    /// Requester side: ops whose response is on its way, in op order (they complete in it).
    pub responses: VecDeque<u32>,
    /// Responder side: the last time memory was touched by an op from the peer.
    pub last_effect: Ps,
    /// Responder side: an op held for want of a receive (RNR) and the ops behind it.
    pub held: Option<u32>,
    pub backlog: VecDeque<u32>,
    pub rq_credits: u32,
    pub cq: VecDeque<RxDone>,
    pub recv_waiters: Vec<u32>,
    /// Server side only: the memory node's handler thread that serves this connection, and
    /// which of the handlers set on the node (`Sim::set_handler`) it runs.
    pub thread: u32,
    pub handler: u32,
    /// Server side only: made before a crash of its node (the restarted node does not know
    /// it: requests on it go unanswered), and its connection has ended (`on_disconnect` is
    /// called once).
    pub stale: bool,
    pub ended: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Kind {
    #[default]
    Read,
    Write,
    WriteImm,
    Cas,
    /// A masked CMP_AND_SWP (`Op::MaskedCas`; its mask in `OpSlot::mask`).
    MaskedCas,
    Faa,
    Send,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Read => "READ",
            Kind::Write => "WRITE",
            Kind::WriteImm => "WRITE_WITH_IMM",
            Kind::Cas => "CMP_AND_SWP",
            Kind::MaskedCas => "MASKED_CMP_AND_SWP",
            Kind::Faa => "FETCH_AND_ADD",
            Kind::Send => "SEND",
        }
    }
}

/// One op in flight.
#[derive(Debug, Default)]
pub(crate) struct OpSlot {
    pub kind: Kind,
    pub end: u32,
    pub batch: u32,
    pub wr: u32,
    pub remote: GlobalAddr,
    pub len: u32,
    /// WRITE/SEND payload copied at post time, or READ data sampled at the target.
    pub buf: Vec<u8>,
    pub x: u64,
    pub y: u64,
    /// The bits a CMP_AND_SWP compares and swaps (all for a plain one).
    pub mask: u64,
    pub result: u64,
    pub imm: u32,
    /// Fails at the responder with this error (checked locally at post time).
    pub local_err: Option<FabricError>,
    /// Responder timeline: first effect, segment count, when it reached the responder and
    /// when its response left.
    pub t0: Ps,
    pub nseg: u32,
    /// The order its segments are handled in: slot `i` handles segment
    /// `(perm_start + i * perm_stride) % nseg` (see `SegmentOrder`).
    pub perm_start: u32,
    pub perm_stride: u32,
    pub arrived: Ps,
    pub ack_at: Ps,
    /// The response: its size, error, the last memory effect it must follow, and when its
    /// last byte is in at the requester (0 until then).
    pub resp_bytes: u64,
    pub resp_err: Option<FabricError>,
    pub resp_after: Ps,
    pub resp_in: Ps,
    pub rnr_left: u32,
    pub traced: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum BatchState {
    #[default]
    InFlight,
    Done,
    Abandoned,
}

/// One posted batch (one doorbell).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub task: u32,
    pub end: u32,
    pub ops: Vec<u32>,
    pub remaining: u32,
    pub done_at: Ps,
    pub posted_at: Ps,
    pub err: Option<FabricError>,
    /// Index of the op that failed (ops before it took effect).
    pub err_wr: u32,
    pub state: BatchState,
    pub number: u64,
    pub rechecked: bool,
    /// The joined coroutine that waits for it, marked when it completes (see
    /// [`crate::executor::join_all`]).
    pub mark: Option<ChildMark>,
}

/// A client thread on a compute node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Client {
    pub nic: u32,
    pub cpu_free: Ps,
    pub dead: bool,
    pub posts: u64,
}

/// Counts of what the engine did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Events taken off the event queue and handled.
    pub events: u64,
    /// Work requests posted (each op of a batch counts once).
    pub verbs: u64,
    /// Batches posted (one per `post` call, however many ops it carries).
    pub batches: u64,
    /// Times the executor polled a ready task.
    pub polls: u64,
    /// RNR NAKs: a SEND or WRITE_WITH_IMM that found no receive posted, at its first
    /// attempt or at a retry.
    pub rnr_naks: u64,
}

/// The whole simulated cluster's state.
/// A coroutine's armed timer: the task to wake and the mark of the coroutine waiting.
#[derive(Default)]
pub(crate) struct Timer {
    pub task: u32,
    pub mark: Option<ChildMark>,
}

pub(crate) struct World {
    pub now: Ps,
    pub model: Model,
    pub tm: Tm,
    pub seed: u64,
    pub rng: Rng,
    /// How READs sample and WRITEs place their segments, and the stream that shuffles them
    /// (its own, so the order switch leaves every other random choice of a seed alone).
    pub segment_order: SegmentOrder,
    pub seg_rng: Rng,
    events: EventQueue,
    seq: u64,
    pub nics: Vec<Nic>,
    pub nodes: Vec<MemNode>,
    pub ends: Vec<End>,
    pub ops: Slab<OpSlot>,
    pub batches: Slab<Batch>,
    /// Armed timers of coroutines that a join polls only when marked (see
    /// [`World::schedule_timer`]).
    pub timers: Slab<Timer>,
    pub pool: BufPool,
    pub clients: Vec<Client>,
    pub ready: VecDeque<u32>,
    pub queued: Vec<bool>,
    /// Client of each task (NO_CLIENT for server tasks).
    pub task_client: Vec<u32>,
    /// CPU work each task has stated ([`World::charge`]) and not yet paid on its client
    /// thread's CPU.
    pub task_debt: Vec<Ps>,
    pub current_task: u32,
    /// Handler threads (memory node, thread) whose task must be started.
    pub to_serve: Vec<(NodeId, u32)>,
    /// Tasks of crashed clients, to stop.
    pub stopped: Vec<u32>,
    /// Handler work to do between task polls, in order.
    pub notices: Vec<Notice>,
    pub faults: Faults,
    pub trace: Trace,
    pub stats: EngineStats,
    /// Reused list of op ids for posts.
    pub scratch: Vec<u32>,
    next_batch_number: u64,
}

impl World {
    pub fn new(model: Model, seed: u64, faults: Faults, trace: Trace) -> World {
        World {
            now: 0,
            tm: Tm::new(&model),
            model,
            seed,
            rng: Rng::new(seed, 0),
            segment_order: SegmentOrder::default(),
            seg_rng: Rng::new(seed, 0x5E6),
            events: EventQueue::new(),
            seq: 0,
            nics: Vec::new(),
            nodes: Vec::new(),
            ends: Vec::new(),
            ops: Slab::new(),
            batches: Slab::new(),
            timers: Slab::new(),
            pool: BufPool::new(),
            clients: Vec::new(),
            ready: VecDeque::new(),
            queued: Vec::new(),
            task_client: Vec::new(),
            task_debt: Vec::new(),
            current_task: NO_TASK,
            to_serve: Vec::new(),
            stopped: Vec::new(),
            notices: Vec::new(),
            faults,
            trace,
            stats: EngineStats::default(),
            scratch: Vec::new(),
            next_batch_number: 0,
        }
    }

    /// Schedules `ev` at `at` (never in the past).
    pub fn schedule(&mut self, at: Ps, ev: Ev) {
        let tie = self.rng.next_u32() as u64;
        self.seq = self.seq.wrapping_add(1);
        let order = (tie << 32) | (self.seq & 0xFFFF_FFFF);
        self.events.push(Entry {
            at: at.max(self.now),
            order,
            ev: ev.pack(),
        });
    }

    /// Time of the next event.
    pub fn next_time(&mut self) -> Option<Ps> {
        self.events.peek_time()
    }

    /// Pops and handles the next event; false when there is none.
    pub fn step(&mut self) -> bool {
        let Some(e) = self.events.pop() else {
            return false;
        };
        self.now = e.at;
        self.stats.events += 1;
        match Ev::unpack(e.ev) {
            Ev::Arrive(op) => self.arrive(op),
            Ev::Segment(op, i) => self.segment(op, i),
            Ev::Atomic(op) => self.do_atomic(op),
            Ev::Deliver(op) => self.deliver(op),
            Ev::RnrRetry(op) => self.rnr_retry(op),
            Ev::Complete(b) => self.complete(b),
            Ev::Wake(t) => self.make_ready(t),
            Ev::Fault(i) => self.fault(i),
            Ev::RespTx(op) => self.response_leaves(op),
            Ev::RespRx(op) => self.response_arrives(op),
            Ev::Hangup(end) => self.end_connection(end, true),
            Ev::Timer(id) => {
                let timer = self.timers.get_mut(id);
                let task = timer.task;
                if let Some(m) = timer.mark.take() {
                    m.mark();
                }
                self.timers.free(id);
                self.make_ready(task);
            }
        }
        true
    }

    /// Wakes task `task` at `at` (a timer of one of its coroutines): through a timer that
    /// marks the waiting coroutine when `mark` names it (so that a join polls that coroutine
    /// and not its siblings), else as a plain task wake-up.
    pub fn schedule_timer(&mut self, at: Ps, task: u32, mark: Option<ChildMark>) {
        match mark {
            Some(m) => {
                let id = self.timers.alloc();
                let timer = self.timers.get_mut(id);
                timer.task = task;
                timer.mark = Some(m);
                self.schedule(at, Ev::Timer(id));
            }
            None => self.schedule(at, Ev::Wake(task)),
        }
    }

    pub fn make_ready(&mut self, task: u32) {
        let t = task as usize;
        if t < self.queued.len() && !self.queued[t] {
            self.queued[t] = true;
            self.ready.push_back(task);
        }
    }

    /// Client `c` dies: its tasks stop forever (see `faults.rs`).
    pub fn crash_client(&mut self, c: u32) {
        self.clients[c as usize].dead = true;
        // Its connections end when the memory nodes give up on it: one dead timeout on.
        let at = self.now + self.tm.dead_timeout;
        for e in 0..self.ends.len() {
            let end = &self.ends[e];
            if !end.server && end.client == c {
                let peer = end.peer;
                self.schedule(at, Ev::Hangup(peer));
            }
        }
        for (t, &tc) in self.task_client.iter().enumerate() {
            if tc == c {
                self.stopped.push(t as u32);
            }
        }
        if self.trace.enabled() {
            self.trace
                .line(self.now, u64::MAX, format!("client {c} crashed"));
        }
    }

    pub fn add_task(&mut self, client: u32) -> u32 {
        self.task_client.push(client);
        self.task_debt.push(0);
        self.queued.push(false);
        (self.task_client.len() - 1) as u32
    }

    /// Client CPU work `w` stated by the current task: debt it pays on its thread's CPU
    /// before its next post, receive or pause ([`World::pay_debt`]). Work stated outside a
    /// client task (a server task, or no task) costs nothing.
    pub fn charge(&mut self, w: Work) {
        let t = self.current_task as usize;
        if self.task_client.get(t).is_some_and(|&c| c != NO_CLIENT) {
            let d = self.tm.work_ps(w);
            self.task_debt[t] = self.task_debt[t].saturating_add(d);
        }
    }

    /// Pays the current task's CPU debt on its client thread's CPU, after the work already
    /// queued there (its other coroutines', its posts'); returns when that CPU time ends (now
    /// if there is no debt).
    pub fn pay_debt(&mut self) -> Ps {
        let t = self.current_task as usize;
        let now = self.now;
        let Some(&c) = self.task_client.get(t) else {
            return now;
        };
        let debt = std::mem::take(&mut self.task_debt[t]);
        if debt == 0 || c == NO_CLIENT {
            return now;
        }
        let cl = &mut self.clients[c as usize];
        let end = cl.cpu_free.max(now) + debt;
        cl.cpu_free = end;
        end
    }

    /// One-way flight time of one message: base, jitter and injected delay.
    fn flight(&mut self) -> Ps {
        let mut t = self.tm.one_way;
        if self.tm.jitter > 0 {
            t = (t + self.rng.below(2 * self.tm.jitter)).saturating_sub(self.tm.jitter);
        }
        if self.faults.delay_prob > 0.0 && self.rng.chance(self.faults.delay_prob) {
            t += self.rng.below(self.faults.delay_max_ps.max(1));
        }
        t
    }

    /// Posts a batch from `end` for `task`; the caller has built the op slots in `ops`.
    pub fn post(&mut self, end: u32, ops: &[u32], task: u32) -> u32 {
        let now = self.now;
        let b = self.batches.alloc();
        let number = self.next_batch_number;
        self.next_batch_number += 1;
        let traced = self.trace.wants(number);
        {
            let batch = self.batches.get_mut(b);
            batch.task = task;
            batch.end = end;
            batch.ops.clear();
            batch.ops.extend_from_slice(ops);
            batch.remaining = ops.len() as u32;
            batch.done_at = now;
            batch.posted_at = now;
            batch.err = None;
            batch.err_wr = u32::MAX;
            batch.state = BatchState::InFlight;
            batch.number = number;
            batch.rechecked = false;
            batch.mark = None;
        }
        self.stats.batches += 1;
        let e = &self.ends[end as usize];
        let (nic, client) = (e.nic as usize, e.client);
        // Client CPU: building the work requests and ringing the doorbell.
        let mut t = now;
        if client != NO_CLIENT {
            // The posting coroutine's stated work first, then the doorbell.
            let debt = self
                .task_debt
                .get_mut(task as usize)
                .map_or(0, std::mem::take);
            let c = &mut self.clients[client as usize];
            let post = self.nics[nic].scale(self.tm.post);
            t = c.cpu_free.max(now) + debt + post;
            c.cpu_free = t;
        }
        if traced {
            let who = if client == NO_CLIENT {
                format!(
                    "memory node {} (server end {end})",
                    self.ends[end as usize].node
                )
            } else {
                format!("client {client} (qp end {end})")
            };
            self.trace.line(
                now,
                number,
                format!(
                    "post by {who}: {} op(s), doorbell at {}",
                    ops.len(),
                    super::trace::fmt_ps(t)
                ),
            );
        }
        for (wr, &id) in ops.iter().enumerate() {
            let (kind, len) = {
                let o = self.ops.get_mut(id);
                o.batch = b;
                o.wr = wr as u32;
                o.end = end;
                o.traced = traced;
                o.rnr_left = self.tm.rnr_retry;
                (o.kind, o.len as u64)
            };
            let bytes = self.request_bytes(kind, len);
            let w = self.wire(bytes);
            let n = &mut self.nics[nic];
            let tx_start = n.tx.reserve(now, t, w);
            let fly = self.flight();
            let e = &mut self.ends[end as usize];
            // `Arrive` is when the first byte reaches the responder: its receive link is
            // reserved then, so every link is reserved in the order data reaches it.
            let arrive = (tx_start + fly).max(e.last_arrival + 1);
            e.last_arrival = arrive;
            if traced {
                let o = self.ops.get(id);
                self.trace.line(
                    now,
                    number,
                    format!(
                        "  wr {wr}: {} {} B at {}: on the wire {}..{}, first byte arrives {}",
                        kind.name(),
                        len,
                        o.remote,
                        super::trace::fmt_ps(tx_start),
                        super::trace::fmt_ps(tx_start + w),
                        super::trace::fmt_ps(arrive)
                    ),
                );
            }
            self.schedule(arrive, Ev::Arrive(id));
        }
        self.stats.verbs += ops.len() as u64;
        b
    }
}

/// Sets the work-request index of an error that carries one.
pub(crate) fn with_wr(e: FabricError, wr: usize) -> FabricError {
    match e {
        FabricError::RemoteAccess { addr, len, .. } => FabricError::RemoteAccess { wr, addr, len },
        FabricError::RemoteInvalid { addr, why, .. } => {
            FabricError::RemoteInvalid { wr, addr, why }
        }
        FabricError::LocalLength { len, max, .. } => FabricError::LocalLength { wr, len, max },
        other => other,
    }
}

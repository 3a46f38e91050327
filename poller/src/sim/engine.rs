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
            _ => Ev::Hangup(a),
        }
    }
}

/// Model quantities precomputed in picoseconds.
#[derive(Debug, Clone)]
pub(crate) struct Tm {
    pub one_way: Ps,
    pub jitter: Ps,
    pub nic_op: Ps,
    pub pcie_read: Ps,
    pub pcie_write: Ps,
    pub host_atomic: Ps,
    /// A host-memory atomic waiting for its word's lock slot holds the NIC's request engine.
    pub host_atomic_stalls: bool,
    pub dm_atomic: Ps,
    pub post: Ps,
    pub server_poll: Ps,
    pub handler: Ps,
    pub server_reply: Ps,
    /// Server CPU per connection ring a polling thread scans per message (0: event-based).
    pub server_scan: Ps,
    /// Server CPU per cache line a handler persists (persistent regions).
    pub nvm_line: Ps,
    pub step: Ps,
    /// Link serialization in thousandths of a ps per byte.
    pub mppb: u64,
    pub read_step: Ps,
    pub segment: u64,
    pub poll: Ps,
    /// Client CPU work ([`Work`]) by kind: a fixed part per charge (ps) and thousandths of
    /// a ps per unit, `client_cpu_scale` applied.
    pub work: [(Ps, u64); KINDS],
    /// CRC-32C through the instructions (fixed ps, milli-ps per byte), for a `Work::Crc32c`
    /// of at least `crc32c_hw_min` bytes (as `erda::object_checksum` takes them).
    pub crc32c_hw: (Ps, u64),
    pub crc32c_hw_min: usize,
    pub rnr_period: Ps,
    pub rnr_retry: u32,
    pub dead_timeout: Ps,
    pub recv_depth: u32,
    pub max_message: usize,
    /// `unsignaled_at_post`: [`QueuePair::post_unsignaled`](remora_core::fabric::QueuePair::post_unsignaled) resolves at its doorbell.
    pub unsignaled_at_post: bool,
}

impl Tm {
    pub fn new(m: &Model) -> Tm {
        let ps = |ns: f64| (ns * 1000.0).round() as Ps;
        Tm {
            one_way: m.one_way_ps(),
            jitter: ps(m.jitter_ns),
            nic_op: m.nic_op_ps(),
            pcie_read: m.pcie_read_ps(),
            pcie_write: m.pcie_write_ps(),
            host_atomic: m.host_atomic_ps(),
            host_atomic_stalls: m.host_atomic_stalls > 0.0,
            dm_atomic: m.dm_atomic_ps(),
            post: m.post_ps(),
            server_poll: m.server_poll_ps(),
            handler: m.handler_ps(),
            server_reply: m.server_reply_ps(),
            server_scan: ps(m.server_scan_ns),
            nvm_line: ps(m.nvm_write_ns),
            step: m.segment_step_ps(),
            mppb: m.milli_ps_per_byte(),
            read_step: m.read_step_ps(),
            segment: m.segment(),
            poll: ps(m.client_poll_ns).max(1),
            work: work_costs(m),
            crc32c_hw: (
                (m.client_crc32c_hw_call_ns * m.client_cpu_scale * 1000.0).round() as Ps,
                (m.client_crc32c_hw_ns_per_byte * m.client_cpu_scale * 1e6).round() as u64,
            ),
            crc32c_hw_min: m.client_crc32c_hw_min_bytes as usize,
            rnr_period: ps(m.rnr_timer_ns) + 2 * m.one_way_ps(),
            rnr_retry: m.rnr_retry as u32,
            dead_timeout: m.dead_timeout_ps(),
            recv_depth: m.recv_depth as u32,
            max_message: m.max_message as usize,
            unsignaled_at_post: m.unsignaled_at_post > 0.0,
        }
    }
}

/// The per-kind costs of [`Tm::work`] from the model's `client_*` work parameters.
fn work_costs(m: &Model) -> [(Ps, u64); KINDS] {
    let k = m.client_cpu_scale;
    let ps = |ns: f64| (ns * k * 1000.0).round() as Ps;
    let mps = |ns: f64| (ns * k * 1e6).round() as u64;
    let mut t = [(0, 0); KINDS];
    for w in Work::ALL {
        t[w.kind()] = match w {
            Work::Crc32c(_) => (
                ps(m.client_crc32c_call_ns),
                mps(m.client_crc32c_ns_per_byte),
            ),
            Work::Crc64(_) => (ps(m.client_crc64_call_ns), mps(m.client_crc64_ns_per_byte)),
            Work::Decode(_) => (0, mps(m.client_decode_ns_per_byte)),
            Work::Scan(_) => (0, mps(m.client_scan_ns)),
            Work::Probe(_) => (0, mps(m.client_probe_ns)),
            Work::Compare(_) => (0, mps(m.client_compare_ns)),
            Work::Sort(_) => (0, mps(m.client_sort_ns)),
            Work::Rect(_) => (0, mps(m.client_rect_ns)),
            Work::KeyGen(_) => (0, mps(m.client_keygen_ns)),
        };
    }
    t
}

impl Tm {
    /// Virtual CPU time of `w` on a client thread (0 for a count of 0).
    pub fn work_ps(&self, w: Work) -> Ps {
        if w.count() == 0 {
            return 0;
        }
        let line = |(call, per): (Ps, u64)| call + (w.units().saturating_mul(per) + 500) / 1000;
        match w {
            Work::Crc32c(n) if n >= self.crc32c_hw_min => line(self.crc32c_hw),
            _ => line(self.work[w.kind()]),
        }
    }
}

/// One direction of a NIC's link as a calendar of reserved transmission intervals: a
/// message takes the earliest gap at or after the time it is ready, whatever order the
/// reservations are made in. (Responses are reserved when their verb executes, up to a
/// flight ahead of their arrival; a request that arrives in between must not queue behind
/// them, or two-sided traffic, which mixes both on one link, would see phantom delays.)
#[derive(Debug, Clone, Default)]
pub(crate) struct Link {
    /// Reserved intervals `[start, end)`, sorted, disjoint; touching ones are merged.
    busy: VecDeque<(Ps, Ps)>,
    /// The longest transmission reserved so far: no later request starts more than this
    /// before the current time, so older intervals are dropped.
    longest: Ps,
}

impl Link {
    /// Reserves `w` of the link from the earliest instant at or after `at` that leaves it
    /// free for `w`; returns the start. `now` is the current time (for pruning).
    pub fn reserve(&mut self, now: Ps, at: Ps, w: Ps) -> Ps {
        self.longest = self.longest.max(w);
        let horizon = now.saturating_sub(self.longest);
        while self.busy.front().is_some_and(|&(_, e)| e < horizon) {
            self.busy.pop_front();
        }
        if w == 0 {
            return at;
        }
        // First interval that ends after `at`: the gap search starts there. Most messages
        // go after every reservation (ends are sorted): no search then.
        let mut i = if self.busy.back().is_none_or(|&(_, e)| e <= at) {
            self.busy.len()
        } else {
            self.busy.partition_point(|&(_, e)| e <= at)
        };
        let mut start = at;
        while let Some(&(s, e)) = self.busy.get(i) {
            if start + w <= s {
                break;
            }
            start = start.max(e);
            i += 1;
        }
        let end = start + w;
        // Insert at `i` (everything before ends at or before `start`), merging neighbours.
        let joins_prev = i > 0 && self.busy[i - 1].1 == start;
        let joins_next = self.busy.get(i).is_some_and(|&(s, _)| s == end);
        match (joins_prev, joins_next) {
            (true, true) => {
                self.busy[i - 1].1 = self.busy[i].1;
                self.busy.remove(i);
            }
            (true, false) => self.busy[i - 1].1 = end,
            (false, true) => self.busy[i].0 = start,
            (false, false) => self.busy.insert(i, (start, end)),
        }
        start
    }
}

/// A NIC: one per compute node and one per memory node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Nic {
    pub tx: Link,
    pub rx: Link,
    pub engine_free: Ps,
    /// The memory node behind this NIC, if any.
    pub node: Option<NodeId>,
    pub dead: bool,
    /// Service-time multiplier (1.0 normal; a slowed node has more).
    pub slow: f64,
}

impl Nic {
    pub fn scale(&self, t: Ps) -> Ps {
        if self.slow == 1.0 {
            t
        } else {
            (t as f64 * self.slow).round() as Ps
        }
    }
}

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
        }
        true
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

    /// Serialization time of `bytes` (same arithmetic as `Model::wire_ps`).
    pub fn wire(&self, bytes: u64) -> Ps {
        (bytes * self.tm.mppb).div_ceil(1000)
    }

    pub fn request_bytes(&self, kind: Kind, len: u64) -> u64 {
        let m = &self.model;
        match kind {
            Kind::Read => m.msg_bytes(0),
            Kind::Write | Kind::WriteImm | Kind::Send => m.msg_bytes(len),
            Kind::Cas => m.msg_bytes(16),
            Kind::Faa => m.msg_bytes(8),
        }
    }

    pub fn response_bytes(&self, kind: Kind, len: u64) -> u64 {
        let m = &self.model;
        match kind {
            Kind::Read => m.msg_bytes(len),
            Kind::Cas | Kind::Faa => m.msg_bytes(8),
            _ => m.msg_bytes(0),
        }
    }

    /// The response of op `id` (`bytes` on the wire, `err`, never completing before
    /// `last_effect`) is ready to leave its responder at `ready`: its transmit link is
    /// reserved at that time (`Ev::RespTx`), then it flies to the requester.
    pub fn respond_at(
        &mut self,
        id: u32,
        ready: Ps,
        bytes: u64,
        err: Option<FabricError>,
        last_effect: Ps,
    ) {
        let o = self.ops.get_mut(id);
        o.resp_bytes = bytes;
        o.resp_err = err;
        o.resp_after = last_effect;
        o.resp_in = 0;
        let end = o.end as usize;
        self.ends[end].responses.push_back(id);
        self.schedule(ready, Ev::RespTx(id));
    }

    fn response_leaves(&mut self, id: u32) {
        let (end, bytes) = {
            let o = self.ops.get(id);
            (o.end as usize, o.resp_bytes)
        };
        let tnic = self.ends[self.ends[end].peer as usize].nic as usize;
        let now = self.now;
        let tx = self.reserve_tx(tnic, now, bytes);
        self.response_sent(id, tx);
    }

    /// The response of op `id` leaves its responder at `tx_start` (link already reserved:
    /// a READ's response is reserved when the READ executes, its sampling timed by it).
    pub fn respond(
        &mut self,
        id: u32,
        tx_start: Ps,
        bytes: u64,
        err: Option<FabricError>,
        last_effect: Ps,
    ) {
        let o = self.ops.get_mut(id);
        o.resp_bytes = bytes;
        o.resp_err = err;
        o.resp_after = last_effect;
        o.resp_in = 0;
        let end = o.end as usize;
        self.ends[end].responses.push_back(id);
        self.response_sent(id, tx_start);
    }

    fn response_sent(&mut self, id: u32, tx_start: Ps) {
        let fly = self.flight();
        let o = self.ops.get_mut(id);
        o.ack_at = tx_start;
        if o.traced {
            let line = format!(
                "  wr {}: response leaves {} ({} B)",
                o.wr,
                super::trace::fmt_ps(tx_start),
                o.resp_bytes,
            );
            let n = self.batches.get(o.batch).number;
            self.trace.line(self.now, n, line);
        }
        self.schedule(tx_start + fly, Ev::RespRx(id));
    }

    /// The first byte of op `id`'s response is in at the requester: reserve the receive
    /// link, then finish every op of the queue pair whose response is complete, in op order.
    fn response_arrives(&mut self, id: u32) {
        let (end, bytes) = {
            let o = self.ops.get(id);
            (o.end as usize, o.resp_bytes)
        };
        let w = self.wire(bytes);
        let req_nic = self.ends[end].nic as usize;
        let now = self.now;
        let rx = self.nics[req_nic].rx.reserve(now, now, w);
        self.ops.get_mut(id).resp_in = rx + w;
        while let Some(&head) = self.ends[end].responses.front() {
            let (resp_in, after, err) = {
                let o = self.ops.get(head);
                (o.resp_in, o.resp_after, o.resp_err)
            };
            if resp_in == 0 {
                break;
            }
            self.ends[end].responses.pop_front();
            let e = &mut self.ends[end];
            let done = resp_in.max(e.last_done + 1).max(after + 1);
            e.last_done = done;
            let o = self.ops.get(head);
            if o.traced {
                let line = format!(
                    "  wr {}: completes at requester {}{}",
                    o.wr,
                    super::trace::fmt_ps(done),
                    err.map(|e| format!(" with error: {e}")).unwrap_or_default()
                );
                let n = self.batches.get(o.batch).number;
                self.trace.line(self.now, n, line);
            }
            self.finish(head, err, done);
        }
    }

    /// Reserves the responder NIC's transmit link for a `bytes` response from `at`.
    pub fn reserve_tx(&mut self, nic: usize, at: Ps, bytes: u64) -> Ps {
        let w = self.wire(bytes);
        let n = &mut self.nics[nic];
        n.tx.reserve(self.now, at, w)
    }

    /// Op `id` is done at its requester at `done` (with `err`, if it failed).
    pub fn finish(&mut self, id: u32, err: Option<FabricError>, done: Ps) {
        let (b, wr) = {
            let o = self.ops.get(id);
            (o.batch, o.wr)
        };
        let batch = self.batches.get_mut(b);
        batch.remaining = batch.remaining.saturating_sub(1);
        batch.done_at = batch.done_at.max(done);
        // The batch reports its first failing work request (later ones are flushed by it,
        // whichever finished first in virtual time).
        if err.is_some() && (batch.err.is_none() || wr < batch.err_wr) {
            batch.err = err.map(|e| with_wr(e, wr as usize));
            batch.err_wr = wr;
        }
        if batch.remaining == 0 {
            let at = batch.done_at;
            self.schedule(at, Ev::Complete(b));
        }
    }

    /// The requester side of `end` enters the error state.
    pub fn break_end(&mut self, end: u32) {
        let e = &mut self.ends[end as usize];
        if !e.broken {
            e.broken = true;
            let waiters = std::mem::take(&mut e.recv_waiters);
            for &w in &waiters {
                self.make_ready(w);
            }
            self.ends[end as usize].recv_waiters = waiters;
            self.ends[end as usize].recv_waiters.clear();
        }
    }

    fn complete(&mut self, b: u32) {
        // A memory node that crashed before an op's response left never sent it: the
        // requester times out instead.
        let (end, posted) = {
            let batch = self.batches.get(b);
            (batch.end as usize, batch.posted_at)
        };
        let node = self.ends[end].node as usize;
        let server = self.ends[end].server;
        if !server
            && !self.batches.get(b).rechecked
            && node < self.nodes.len()
            && !self.nodes[node].crashes.is_empty()
        {
            let mut lost = None;
            for (i, &id) in self.batches.get(b).ops.iter().enumerate() {
                let o = self.ops.get(id);
                if self.nodes[node].crashed_between(o.arrived, o.ack_at) {
                    lost = Some(i);
                    break;
                }
            }
            if let Some(wr) = lost {
                let batch = self.batches.get_mut(b);
                batch.rechecked = true;
                if batch.err.is_none() || batch.err_wr > wr as u32 {
                    batch.err = Some(FabricError::RetryExceeded {
                        node: node as NodeId,
                    });
                    batch.err_wr = wr as u32;
                }
                let at = posted + self.tm.dead_timeout;
                self.break_end(end as u32);
                self.schedule(at, Ev::Complete(b));
                return;
            }
        }
        let (state, task, number) = {
            let batch = self.batches.get(b);
            (batch.state, batch.task, batch.number)
        };
        if self.trace.wants(number) {
            let err = self.batches.get(b).err;
            self.trace.line(
                self.now,
                number,
                format!(
                    "batch complete{}",
                    err.map(|e| format!(": {e}")).unwrap_or_default()
                ),
            );
        }
        match state {
            BatchState::Abandoned => self.free_batch(b),
            _ => {
                self.batches.get_mut(b).state = BatchState::Done;
                self.make_ready(task);
            }
        }
    }

    /// Returns a batch and its ops' buffers to the pools.
    pub fn free_batch(&mut self, b: u32) {
        let ops = std::mem::take(&mut self.batches.get_mut(b).ops);
        for &id in &ops {
            let buf = std::mem::take(&mut self.ops.get_mut(id).buf);
            self.pool.give(buf);
            self.ops.free(id);
        }
        let batch = self.batches.get_mut(b);
        batch.ops = ops;
        batch.ops.clear();
        self.batches.free(b);
    }

    fn fault(&mut self, i: u32) {
        let Some(f) = self.faults.scheduled.get(i as usize).copied() else {
            return;
        };
        match f.kind {
            FaultKind::CrashNode(n) => self.crash_node(n),
            FaultKind::RestartNode(n) => self.restart_node(n),
            FaultKind::SlowNode(n, factor) => {
                if let Some(nic) = self.nic_of_node(n) {
                    self.nics[nic].slow = factor;
                }
            }
        }
    }

    pub fn nic_of_node(&self, n: NodeId) -> Option<usize> {
        self.nics.iter().position(|x| x.node == Some(n))
    }

    pub fn crash_node(&mut self, n: NodeId) {
        let now = self.now;
        let Some(nic) = self.nic_of_node(n) else {
            return;
        };
        if self.nics[nic].dead {
            return;
        }
        self.nics[nic].dead = true;
        self.nodes[n as usize].crash(now);
        if self.trace.enabled() {
            self.trace
                .line(now, u64::MAX, format!("memory node {n} crashed"));
        }
        // The node's receive queues and held requests vanish with it, and its threads' queues.
        for t in self.nodes[n as usize].threads.iter_mut() {
            t.queue.clear();
        }
        for e in 0..self.ends.len() {
            if self.ends[e].node == n && self.ends[e].server {
                self.ends[e].stale = true;
                let cq = std::mem::take(&mut self.ends[e].cq);
                for rx in cq {
                    self.pool.give(rx.data);
                }
            }
        }
    }

    /// The connection of server end `end` ends: both ends break (`break_client`) or only the
    /// server's, and its handler is told once (`Notice::Disconnect`).
    pub fn end_connection(&mut self, end: u32, break_client: bool) {
        let e = &mut self.ends[end as usize];
        if !e.server || e.ended {
            return;
        }
        e.ended = true;
        let (peer, node) = (e.peer, e.node);
        self.break_end(end);
        if break_client {
            self.break_end(peer);
        }
        self.notices.push(Notice::Disconnect(node, end));
    }

    pub fn restart_node(&mut self, n: NodeId) {
        let Some(nic) = self.nic_of_node(n) else {
            return;
        };
        if self.nics[nic].dead {
            // Every connection of the previous life has ended; the handler hears of each,
            // then recovers the region, before the node serves again.
            for e in 0..self.ends.len() as u32 {
                if self.ends[e as usize].node == n && self.ends[e as usize].server {
                    self.end_connection(e, false);
                }
            }
            self.notices.push(Notice::Restart(n));
        }
        self.nics[nic].dead = false;
        self.nodes[n as usize].restart();
        let depth = self.tm.recv_depth;
        for e in self.ends.iter_mut() {
            if e.node == n && e.server {
                e.rq_credits = depth;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::Link;

    #[test]
    fn link_fills_the_earliest_gap_whatever_the_reservation_order() {
        let mut l = Link::default();
        // A response reserved ahead of time...
        assert_eq!(l.reserve(0, 1000, 10), 1000);
        // ...does not delay a request that is on the wire earlier.
        assert_eq!(l.reserve(0, 500, 10), 500);
        // Overlaps queue behind, and a gap too small is skipped.
        assert_eq!(l.reserve(0, 505, 10), 510);
        assert_eq!(l.reserve(0, 985, 10), 985);
        assert_eq!(l.reserve(0, 990, 10), 1010);
        // Touching intervals merged: [500, 520) [985, 995) [1000, 1020).
        assert_eq!(l.busy.len(), 3);
        assert_eq!(l.reserve(0, 995, 5), 995);
        assert_eq!(l.busy.len(), 2);
        // Old intervals are dropped once no request can reach back to them.
        assert_eq!(l.reserve(10_000, 10_000, 10), 10_000);
        assert_eq!(l.busy.len(), 1);
    }
}

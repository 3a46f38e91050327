//! The CPU of every simulated memory node: `server_threads` handler threads running a
//! `remora_core::server::Handler` (the echo service unless `Sim::set_handler`), as an
//! event-based server does.
//!
//! - Connection k of a node (in connect order) belongs to thread `k mod server_threads`
//!   (round-robin at accept, as event-based servers assign connections).
//! - A receive completion (SEND, or WRITE_WITH_IMM) on a connection is queued at its
//!   thread, first come first served. The thread serves one message at a time, and is busy
//!   only while serving: `server_poll_ns` (take the completion) + `server_scan_ns` x its
//!   share of the node's connections (a polling server's ring scan; 0 for the default
//!   event-based server) + `server_handler_ns` (the fixed part of the service: decode,
//!   dispatch; `server_canrt_apply_ns` instead for a CANRT append notice where that is set;
//!   the handler runs at the end of it and its memory effects happen then) + **the
//!   memory the handler touched** (below) + the CPU time it states for its computation
//!   (`LocalRegion::charge_cpu_ns`, measured costs only) + `server_reply_ns` per reply it queued (each reply
//!   SEND is posted when its post cost is paid, and never waited for: send completions are
//!   reaped lazily). All costs are scaled by a slowed node's factor.
//! - **Memory** (the server CPU model): every `LocalRegion` access of the handler is looked
//!   up, per 64-byte line, in the node's last-level cache (`llc.rs`: CLOCK over
//!   `server_llc_lines`, NIC writes placed in it by DDIO, persisted lines kept). A line counts
//!   once per message: found, `server_llc_hit_ns`; missing, `server_dram_ns` (DRAM node) or
//!   `server_nvm_read_ns` (persistent node). The new lines of one access (one `read`/`write`
//!   call) overlap: the slowest costs its latency, each other 1/`server_mlp` of its own;
//!   separate calls are dependent and add up. The total is charged after the handler
//!   returns, with its persists (`Sim::server_llc_stats` counts the lines, hits and misses).
//!   The received SEND payload (in a receive buffer, not the region) is not charged as
//!   lines: reading it is part of `server_handler_ns`'s decode.
//! - **Blocking threads** (`server_wake_ns`, 0 by default): a thread that found no message
//!   waiting has blocked, and the next message waits that long (the core's wake, no CPU
//!   counted) before its service starts; one already queued when the thread finishes the
//!   previous does not. With `server_wake_cpu_ns` (0 by default) each wake also costs the
//!   thread that much CPU, before the message's service; and its replies are signalled, as
//!   the Erda authors' servers post theirs: a reply's send completion that finds the thread
//!   blocked wakes it once more (the wake's latency, then its CPU), one that comes while it
//!   is serving is reaped for nothing.
//! - The message's receive is reposted (the connection's receive credit returned) when the
//!   handler has consumed it, so a client that outruns the server meets RNR NAKs.
//! - A handler error drops that connection: both ends break (the client's verbs and
//!   receives fail with `Flushed`), the node keeps serving the others.
//! - **Persistence** (persistent nodes, `memory.rs`): the handler's stores land in the
//!   volatile view; `LocalRegion::persist` writes back and fences the range's cache lines,
//!   costing `nvm_write_ns` per line of the thread's CPU, charged after the handler returns
//!   and before its replies are posted (the sim applies a handler's memory effects, the
//!   write-backs included, when it returns).
//! - **Connections end** (`Handler::on_disconnect`, called once per connection, between task
//!   polls at the virtual time the end is noticed, CPU not charged; nothing more is
//!   delivered from the connection afterwards):
//!   - a message of it was refused (the handler returned an error): at once;
//!   - a fence broke it (`Endpoint::fence`): at once, both ends break;
//!   - its client crashed (`Faults::crash_client_at_post`): one dead timeout
//!     (`ack_timeout_ns x (retry_cnt + 1)`) after the crash, when the node's transport gives
//!     up on the silent peer, as a client gives up on a dead node;
//!   - its client reconnected (`ClientCtx::reconnect`): at once;
//!   - its memory node crashed: at the restart, before `Handler::recover`. Requests on a
//!     connection of the node's previous life go unanswered (`RetryExceeded` after the dead
//!     timeout); clients reconnect (`ClientCtx::reconnect`, or a new `Sim::client`).
//! - **Restart** of a persistent node: `Handler::recover` of the node's current handler runs
//!   on the surviving region before any task runs again; its report is kept
//!   (`Sim::recovery_reports`); an error keeps the node down. A handler set with
//!   `Sim::set_handler_with` is made anew at the restart, as a restarted server process
//!   starts with no volatile state; one set with `Sim::set_handler` lives on, its volatile
//!   fields included. A DRAM node restarts on a fresh region without `recover`.
//! - **The structure's lock** (model `server_tree_lock`, 0 by default: none): a handler that
//!   states it holds its structure's lock (`LocalRegion::hold_lock`) holds it from its call
//!   to the end of its service (the memory it touched, the CPU it stated); a thread whose
//!   handler meets the lock held waits, spinning (busy), until the holder's service ends,
//!   then serves. Holders are ordered by their handler calls, so the handler's effects
//!   keep their order; 1 locks only writers (exclusive), 2 is a reader-writer lock.
//! - **Stores in flight** (model `server_store_window`, 0 by default: none): the handler's
//!   stores reach its node's memory at once for the CPU, but the NIC sees each only at its
//!   point in the service: the memory cost, persists and stated CPU charged up to and
//!   including it (a stored line costs at least `server_llc_hit_ns`, touched before or
//!   not), from the service's start after any lock wait. A READ segment executing earlier
//!   copies the bytes the store replaced (`MemNode::land_at`), so a one-sided reader can
//!   catch a seqlocked rewrite half done, as on hardware.
//! - Busy time is accounted per thread (`MemNode::busy_ps`), read by `Sim::server_busy_ns`,
//!   `ClientCtx::server_busy_ns` and, from the handler, `LocalRegion::cpu_clock`.
//!
//! A thread's task is started with its first message, so idle nodes cost nothing.
use super::engine::{BatchState, Ev, Kind, NO_TASK, World};
use super::model::Ps;
use super::qp::WorldRef;
use remora_core::fabric::{FabricError, Recv, RecvKind};
use remora_core::server::{Handler, Replies};
use remora_layouts::{GlobalAddr, NodeId};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

mod region;
pub(crate) use region::SimRegion;

/// One handler thread of a memory node.
#[derive(Debug)]
pub(crate) struct ServerThread {
    /// Server ends with a receive completion waiting, one entry per message, in arrival order.
    pub queue: VecDeque<u32>,
    /// The thread's task (NO_TASK until its first message).
    pub task: u32,
    /// Its task has been asked for and not yet started.
    pub starting: bool,
    /// Its task waits for a message.
    pub(super) waiting: bool,
    /// It found no message waiting since its last one, so it blocked (`server_wake_ns`);
    /// a thread starts blocked.
    slept: bool,
    /// CPU time of finished services, and the service (or reply post) in progress.
    busy_done: Ps,
    cur: (Ps, Ps),
    /// Its signalled replies' batches not yet reaped (`server_wake_cpu_ns` > 0 only).
    replies: Vec<u32>,
}

impl ServerThread {
    pub fn new() -> ServerThread {
        ServerThread {
            queue: VecDeque::new(),
            task: NO_TASK,
            starting: false,
            waiting: false,
            slept: true,
            busy_done: 0,
            cur: (0, 0),
            replies: Vec::new(),
        }
    }

    /// The task to wake for a new message, if it is waiting for one.
    pub fn wake(&mut self) -> Option<u32> {
        if self.waiting && self.task != NO_TASK {
            self.waiting = false;
            Some(self.task)
        } else {
            None
        }
    }

    /// CPU time spent serving up to `now`.
    pub fn busy_ps(&self, now: Ps) -> Ps {
        let (a, b) = self.cur;
        self.busy_done + now.clamp(a, b) - a
    }
}

/// The lock over a memory node's served structure (model `server_tree_lock`), as the
/// virtual times its holders release it.
#[derive(Debug, Default)]
pub(crate) struct TreeLock {
    /// The last writer's release.
    excl_until: Ps,
    /// The latest release of a reader.
    shared_until: Ps,
}

/// What a handler stated of the lock (`SimRegion::held`).
const HELD_NONE: u8 = 0;
const HELD_SHARED: u8 = 1;
const HELD_EXCLUSIVE: u8 = 2;

impl TreeLock {
    /// A service that called its handler at `now`, stated `held` and lasts `hold` from its
    /// start: how long it waits for the lock under model value `mode` (see the module docs);
    /// its hold is recorded.
    fn acquire(&mut self, mode: u8, held: u8, now: Ps, hold: Ps) -> Ps {
        let start = match (mode, held) {
            (0, _) | (_, HELD_NONE) | (1, HELD_SHARED) => return 0,
            (_, HELD_EXCLUSIVE) => now.max(self.excl_until).max(self.shared_until),
            _ => now.max(self.excl_until),
        };
        let end = start + hold;
        if held == HELD_EXCLUSIVE {
            self.excl_until = end;
        } else {
            self.shared_until = self.shared_until.max(end);
        }
        start - now
    }
}

/// The handlers set on the sim's memory nodes; a connection runs the one its node had when
/// it was made (`End::handler`).
pub(crate) type SharedHandler<'a> = Rc<RefCell<Box<dyn Handler + 'a>>>;
pub(crate) type Handlers<'a> = Rc<RefCell<Vec<SharedHandler<'a>>>>;

/// Resolves with the next message queued at thread `thread` of memory node `node`: the
/// server end it arrived on and its receive completion.
struct NextMessage<'w> {
    w: &'w WorldRef,
    node: usize,
    thread: usize,
}

struct Message {
    /// The thread had blocked before it (see `ServerThread::slept`).
    woke: bool,
    end: u32,
    recv: Recv,
    data: Vec<u8>,
}

/// What woke a handler thread: a message, or only its replies' send completions.
enum Next {
    Message(Message),
    Completions,
}

/// Frees the completed reply batches of thread `thread` of node `node`; how many.
fn reap_replies(w: &mut World, node: usize, thread: usize) -> usize {
    let Some(mut replies) = w
        .nodes
        .get_mut(node)
        .and_then(|n| n.threads.get_mut(thread))
        .map(|t| std::mem::take(&mut t.replies))
    else {
        return 0;
    };
    let before = replies.len();
    replies.retain(|&b| {
        let done = w.batches.get(b).state == BatchState::Done;
        if done {
            w.free_batch(b);
        }
        !done
    });
    let reaped = before - replies.len();
    w.nodes[node].threads[thread].replies = replies;
    reaped
}

impl Future for NextMessage<'_> {
    type Output = Next;
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Next> {
        let mut guard = self.w.borrow_mut();
        let w = &mut *guard;
        let task = w.current_task;
        let reaped = reap_replies(w, self.node, self.thread);
        let Some(t) = w
            .nodes
            .get_mut(self.node)
            .and_then(|n| n.threads.get_mut(self.thread))
        else {
            return Poll::Pending;
        };
        t.task = task;
        t.starting = false;
        while let Some(end) = t.queue.pop_front() {
            if let Some(rx) = w.ends[end as usize].cq.pop_front() {
                t.waiting = false;
                let kind = rx.kind.unwrap_or(RecvKind::Send);
                return Poll::Ready(Next::Message(Message {
                    woke: std::mem::take(&mut t.slept),
                    end,
                    recv: Recv {
                        kind,
                        len: rx.len,
                        imm: rx.imm,
                    },
                    data: rx.data,
                }));
            }
        }
        if reaped > 0 && t.slept {
            // Its replies' completions woke the blocked thread: it drains them, then blocks
            // again (a message queued meanwhile is taken in the same poll loop).
            t.waiting = false;
            t.slept = false;
            return Poll::Ready(Next::Completions);
        }
        t.waiting = true;
        t.slept = true;
        Poll::Pending
    }
}

/// Keeps a handler thread busy for `dur`, accounting it as busy time (unless `idle`: then
/// the thread only waits, as a core leaving an idle state does, and no CPU is counted).
struct Busy<'w> {
    w: &'w WorldRef,
    node: usize,
    thread: usize,
    dur: Ps,
    until: Option<Ps>,
    idle: bool,
}

impl Future for Busy<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut w = this.w.borrow_mut();
        let now = w.now;
        let task = w.current_task;
        let Some(t) = w
            .nodes
            .get_mut(this.node)
            .and_then(|n| super::background::thread_mut(n, this.thread))
        else {
            return Poll::Ready(());
        };
        match this.until {
            None if this.dur == 0 || task == NO_TASK => Poll::Ready(()),
            None => {
                let until = now + this.dur;
                if !this.idle {
                    t.cur = (now, until);
                }
                this.until = Some(until);
                w.schedule(until, Ev::Wake(task));
                Poll::Pending
            }
            Some(u) if now >= u => {
                if !this.idle {
                    t.busy_done += this.dur;
                    t.cur = (u, u);
                }
                Poll::Ready(())
            }
            Some(_) => Poll::Pending,
        }
    }
}

/// Keeps thread `thread` of memory node `node` busy for `dur` (see [`Busy`]).
pub(super) fn busy(w: &WorldRef, node: usize, thread: usize, dur: Ps) -> impl Future<Output = ()> {
    Busy {
        w,
        node,
        thread,
        dur,
        until: None,
        idle: false,
    }
}

/// The thread's wake from a blocking wait (`server_wake_ns`): `dur` of time in which its
/// core idles (no CPU counted).
fn waking(w: &WorldRef, node: usize, thread: usize, dur: Ps) -> impl Future<Output = ()> {
    Busy {
        w,
        node,
        thread,
        dur,
        until: None,
        idle: true,
    }
}

/// Runs handler thread `thread` of memory node `node` forever: takes its messages in order,
/// charges their service, runs the handler, reposts the receive, posts the replies. The
/// node's background thread (`background.rs`) runs its own loop.
pub(crate) async fn thread_loop(w: WorldRef, node: NodeId, thread: u32, handlers: Handlers<'_>) {
    if thread == super::background::BACKGROUND {
        return super::background::background_loop(w, node, handlers).await;
    }
    let (n, t) = (node as usize, thread as usize);
    let mut replies = Replies::new();
    loop {
        let next = NextMessage {
            w: &w,
            node: n,
            thread: t,
        }
        .await;
        let msg = match next {
            Next::Message(m) => m,
            Next::Completions => {
                let (wake, cpu) = {
                    let wb = w.borrow();
                    let cpu = wb.tm.server_wake_cpu;
                    let nic = wb.nic_of_node(node);
                    (
                        wb.tm.server_wake,
                        nic.map_or(cpu, |i| wb.nics[i].scale(cpu)),
                    )
                };
                waking(&w, n, t, wake).await;
                busy(&w, n, t, cpu).await;
                continue;
            }
        };
        let (wake, start, work, reply_cost, handler) = {
            let wb = w.borrow();
            let e = &wb.ends[msg.end as usize];
            let nic = &wb.nics[e.nic as usize];
            // A polling server scans its share of the rings for each message it finds.
            let mem = &wb.nodes[n];
            let share = u64::from(mem.conns).div_ceil(mem.threads.len() as u64);
            // A blocking thread woken for this message waits for its wake first, then
            // spends the wake's CPU.
            let (wake, wake_cpu) = if msg.woke {
                (wb.tm.server_wake, wb.tm.server_wake_cpu)
            } else {
                (0, 0)
            };
            let handler = handlers.borrow().get(e.handler as usize).cloned();
            // CANRT's append notices: their measured fixed part (`server_canrt_apply_ns`).
            let fixed = match (wb.tm.canrt_apply, &handler) {
                (Some(a), Some(h))
                    if msg.recv.kind == RecvKind::WriteImm && h.borrow().service() == "canrt" =>
                {
                    a
                }
                _ => wb.tm.handler,
            };
            (
                wake,
                wb.now,
                nic.scale(wake_cpu + wb.tm.server_poll + fixed + wb.tm.server_scan * share),
                nic.scale(wb.tm.server_reply),
                handler,
            )
        };
        waking(&w, n, t, wake).await;
        Busy {
            w: &w,
            node: n,
            thread: t,
            dur: work,
            until: None,
            idle: false,
        }
        .await;
        let end = msg.end;
        if !alive(&w, n, end, start) {
            w.borrow_mut().pool.give(msg.data);
            continue;
        }
        let payload: &[u8] = if msg.recv.kind == RecvKind::Send {
            &msg.data
        } else {
            &[]
        };
        replies.clear();
        let region = SimRegion::new(&w, node);
        region.begin();
        let r = match &handler {
            Some(h) => {
                h.borrow_mut()
                    .on_message(&region, end as usize, msg.recv, payload, &mut replies)
            }
            None => Err(FabricError::Unsupported {
                what: "no handler on this memory node",
            }),
        };
        {
            let mut wb = w.borrow_mut();
            wb.pool.give(msg.data);
            // The handler is done with the message: its receive is posted again.
            wb.ends[end as usize].rq_credits += 1;
            if r.is_err() {
                // A refused message drops its connection, never the node.
                wb.end_connection(end, true);
                continue;
            }
            super::background::kick(&mut wb, n);
        }
        // The memory the handler touched and the write-backs it issued keep its thread busy
        // (their effect is already visible, and durable: the sim applies a handler's memory
        // effects when it returns).
        let flush = {
            let wb = w.borrow();
            let nic = wb.ends[end as usize].nic as usize;
            wb.nics[nic].scale(region.mem_cost.get() + region.persist_cost.get())
        };
        // A lock the handler holds is waited for first, spinning (see `TreeLock`).
        let wait = {
            let mut wb = w.borrow_mut();
            let mode = wb.model.server_tree_lock as u8;
            let now = wb.now;
            wb.nodes.get_mut(n).map_or(0, |m| {
                m.tree_lock.acquire(mode, region.held.get(), now, flush)
            })
        };
        // The stores it made land over the service that follows the wait.
        {
            let mut wb = w.borrow_mut();
            let now = wb.now;
            let nic = wb.ends[end as usize].nic as usize;
            let scale = |ps: Ps| wb.nics[nic].scale(ps);
            let stores: Vec<(u64, Ps)> = region
                .stores
                .borrow()
                .iter()
                .map(|(off, _, at)| (*off, now + wait + scale(*at)))
                .collect();
            if let Some(m) = wb.nodes.get_mut(n) {
                for ((off, at), (_, old, _)) in stores.into_iter().zip(region.stores.take()) {
                    m.land_at(off, old, at, now);
                }
            }
        }
        let flush = flush + wait;
        Busy {
            w: &w,
            node: n,
            thread: t,
            dur: flush,
            until: None,
            idle: false,
        }
        .await;
        for m in replies.iter() {
            Busy {
                w: &w,
                node: n,
                thread: t,
                dur: reply_cost,
                until: None,
                idle: false,
            }
            .await;
            if !alive(&w, n, end, start) {
                break;
            }
            post_reply(&mut w.borrow_mut(), end, m, (n, t));
        }
        // Wake-ups for other connections of this node (`Replies::send_to`): best effort, a
        // connection that is gone or not this node's drops its message.
        for (to, m) in replies.iter_other() {
            let Ok(to) = u32::try_from(to) else { continue };
            let ours = {
                let wb = w.borrow();
                wb.ends
                    .get(to as usize)
                    .is_some_and(|e| e.server && e.node == node)
            };
            if !ours {
                continue;
            }
            Busy {
                w: &w,
                node: n,
                thread: t,
                dur: reply_cost,
                until: None,
                idle: false,
            }
            .await;
            if alive(&w, n, to, start) {
                post_reply(&mut w.borrow_mut(), to, m, (n, t));
            }
        }
    }
}

/// The node has not crashed since `since` and the connection is not broken.
fn alive(w: &WorldRef, node: usize, end: u32, since: Ps) -> bool {
    let w = w.borrow();
    let e = &w.ends[end as usize];
    !w.nics[e.nic as usize].dead
        && !e.broken
        && !w
            .nodes
            .get(node)
            .is_none_or(|m| m.crashed_between(since, w.now))
}

/// Posts one reply SEND from server end `end` for handler thread `by` (node, thread), not
/// waiting for its completion: the engine frees the batch when it completes (an error breaks
/// the server end, as on hardware), or, with `server_wake_cpu_ns`, the thread reaps it
/// (`reap_replies`), its completion waking the thread if it has blocked.
fn post_reply(w: &mut World, end: u32, msg: &[u8], by: (usize, usize)) {
    let id = w.ops.alloc();
    let mut buf = w.pool.take(msg.len());
    buf.copy_from_slice(msg);
    let node = w.ends[end as usize].node;
    let max = w.tm.max_message;
    let o = w.ops.get_mut(id);
    o.kind = Kind::Send;
    o.remote = GlobalAddr::new(node, 0);
    o.len = msg.len().min(u32::MAX as usize) as u32;
    o.x = 0;
    o.y = 0;
    o.imm = 0;
    o.result = 0;
    o.buf = buf;
    o.local_err = (msg.len() > max).then_some(FabricError::LocalLength {
        wr: 0,
        len: msg.len(),
        max,
    });
    let b = w.post(end, &[id], NO_TASK);
    let task = w.current_task;
    let signalled = w.tm.server_wake_cpu > 0 && task != NO_TASK;
    match w.nodes.get_mut(by.0).and_then(|m| m.threads.get_mut(by.1)) {
        Some(t) if signalled => {
            t.replies.push(b);
            w.batches.get_mut(b).task = task;
        }
        _ => w.batches.get_mut(b).state = BatchState::Abandoned,
    }
}

//! One RC queue pair and its data path: the [`QueuePair`] of the verbs fabric.
//!
//! - **Doorbell batching.** A `post` turns its ops into one chain of work requests and rings
//!   the doorbell once (`ibv_post_send` with the chain). Across coroutines too (Kalia et al.,
//!   ATC'16): while other posts of the thread are waiting, a new batch is only queued behind
//!   the queue pair's chain, and the first post future of the round polled again rings every
//!   queue pair's doorbell once for all the batches queued meanwhile (`SendCq::flush`): with
//!   n coroutines posting each round, one `ibv_post_send` per queue pair instead of n. A
//!   post with nothing else waiting (one coroutine, `block_on`), a detached post, a post
//!   finding no room and a dropped future ring at once. Each batch keeps its own signaled
//!   last request, and a queue pair's batches go out in the order they were queued.
//! - **Selective signaling.** Only the last work request of a batch asks for a completion;
//!   on RC its completion implies the others'. A failed request completes on its own (with its
//!   error) and the requests after it are flushed, each with a completion, so the batch is
//!   known to be finished exactly when its last request's completion arrives.
//! - **Inline sends.** WRITE, WRITE_WITH_IMM and SEND payloads up to the queue pair's inline
//!   limit are copied into the work request itself: no registration needed, no bounce.
//! - **Staging.** Local buffers are ordinary slices the NIC cannot reach. Everything else is
//!   bounced through this queue pair's registered staging arena: each batch in flight owns one
//!   slot of it (WRITE data copied in before the doorbell, READ data and atomic results copied
//!   out after the completion). A batch needing more than a slot gets a one-off registration.
//! - **One send completion queue per thread** (`qp/cq.rs`): the queue pairs of an endpoint share
//!   it, and each completion is handed to the queue pair and batch its `wr_id` names, which
//!   wakes the coroutine waiting on that batch and no other (`qp/wake.rs`). While futures
//!   wait on it, the queue is a progress hook of the thread's executor, which drains it (and
//!   the receive queues waited on) once per round; no waiting future wakes itself to look.
//!   Any executor (even a spin `block_on`, where futures poll for themselves) makes progress.
//!   Dropping a post future before it resolves waits for its batch, so the NIC never writes
//!   memory after its owner is gone.
//! - **Refused requests.** rdma-core's providers refuse a misaligned atomic at post time
//!   (rxe does). The ops before it are posted as the batch; then the atomic fails as a target
//!   would fail it (remote access error outside the region, remote invalid request inside)
//!   and the queue pair is moved to the error state, as the contract requires.
//! - **Receives.** Each queue pair keeps [`RQ_DEPTH`] receive buffers of [`RECV_LEN`] bytes
//!   posted; consumed ones are posted again in chains of [`RECV_BATCH`]. A memory node's
//!   queue pairs have none of their own: they take from their server thread's shared receive
//!   queue (SRQ) and report to its receive completion queue (`VerbsQp::create_shared`).
//! - **Footprint.** Staging and receive buffers are mapped and registered on first need: the
//!   first batch that bounces, the first SEND or WRITE_WITH_IMM posted (a message's reply
//!   needs a posted receive), or the first receive wait. A one-sided client (SMART, Sherman:
//!   READs, WRITEs and atomics in its registered frames) never gets either.
mod chain;
pub(crate) mod cq;
mod create;
mod detached;
mod dev;
pub(crate) use dev::set_min_rnr_timer;
mod floor;
mod future;
pub(crate) mod idle;
mod post;
mod recv;
mod remote;
mod ring;
mod room;
mod slot;
mod wake;

use super::arena::Arena;
use super::cm::{Channel, CmId};
use super::error::{FailedOp, VerbsError, sys_err, wc_error};
use super::fake::{FakeNode, FakeQp};
use super::mr::{LOCAL, Mr, Pd};
use super::stats::{Stats, VerbsStats};
use super::sys;
use cq::SendCq;
pub use future::PostFuture;
use post::OneOff;
pub use recv::RecvFuture;
use remora_core::counters::Counters;
use remora_core::fabric::{FabricError, Op, QueuePair, Recv};
use remora_layouts::{GlobalAddr, NodeId};
use remora_poller::frames::{self, FrameStack};
pub(crate) use remote::Remote;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;

/// Send-queue depth (work requests in flight per queue pair).
pub const SQ_DEPTH: u32 = 256;
/// Receive buffers kept posted per queue pair.
pub const RQ_DEPTH: u32 = 64;
/// Consumed receive buffers are posted again in chains of this many (one `ibv_post_recv`).
pub const RECV_BATCH: usize = 16;
/// Bytes per receive buffer: the largest SEND a peer may send us.
pub const RECV_LEN: usize = 4096;
/// The RNR NAK timer each side advertises: IB code 28, 163.84 ms, so a sender's 6 RNR
/// retries give a receiver about 1 s to post a buffer (rdma_cm leaves code 0: 655.36 ms).
pub const MIN_RNR_TIMER: u8 = 28;
/// [`MIN_RNR_TIMER`] in milliseconds.
pub const MIN_RNR_TIMER_MS: f64 = 163.84;
/// Most work requests one post may carry.
pub const MAX_BATCH: usize = 128;
/// Batches in flight per queue pair.
const SLOTS: usize = 64;
/// Staging bytes per in-flight batch.
const STAGE_SLOT: usize = 32 << 10;
/// Inline bytes asked for when creating a queue pair.
const INLINE_WANT: u32 = 128;
const POLL_BATCH: usize = 16;
/// Empty receive rounds between a receive wait's drains of the send completion queue (see
/// `RecvFuture::poll`).
const SEND_POLL_EVERY: u32 = 4096;
/// Concurrent receive waits of one queue pair woken by the progress hook (beyond: they
/// wake themselves).
const RECV_WAITS: usize = 32;

/// The verbs objects of a queue pair, released in dependency order.
struct Raw {
    qp_created: bool,
    disconnect: bool,
    /// This queue pair's own receive completion queue (null: a server thread's shared one).
    recv_cq: *mut sys::ibv_cq,
    /// Set on first need (see the module docs on footprint).
    stage_mr: RefCell<Option<Mr>>,
    recv_mr: RefCell<Option<Mr>>,
    pool_mrs: [Option<Mr>; POOLS],
    /// The thread's frame memory registered at first use after it grew (see
    /// [`VerbsQp::adopt_frames`]), with the stack that keeps it mapped while registered.
    grown: RefCell<Option<(Option<Mr>, Arc<FrameStack>)>>,
    stage: RefCell<Option<Arena>>,
    recv: RefCell<Option<Arena>>,
    /// The thread's send completion queue (destroyed with its last queue pair).
    send: Rc<SendCq>,
    /// None on the fake device.
    pd: Option<Pd>,
    id: Option<CmId>,
    channel: Option<Channel>,
}

/// The device under a queue pair.
enum Dev {
    Real(*mut sys::ibv_qp),
    Fake(FakeQp),
}

/// Registered ranges of the caller's a queue pair uses in place (the endpoint's pool and
/// its coroutine frames).
pub(crate) const POOLS: usize = 2;
/// The range of the coroutine frames (the endpoint's, or the frame memory they grew into).
pub(crate) const FRAMES_RANGE: usize = 1;

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: each object is released once, after everything that uses it: the queue
        // pair before its completion queues and registrations, registrations before their
        // memory and protection domain (fields below), the id before its channel.
        unsafe {
            if let Some(id) = &self.id
                && self.qp_created
            {
                if self.disconnect {
                    sys::rdma_disconnect(id.0);
                }
                sys::rdma_destroy_qp(id.0);
            }
            if !self.recv_cq.is_null() {
                sys::ibv_destroy_cq(self.recv_cq);
            }
        }
        *self.stage_mr.get_mut() = None;
        *self.recv_mr.get_mut() = None;
        self.pool_mrs = [None, None];
        // The registration before the memory (tuple fields drop in order).
        *self.grown.get_mut() = None;
        *self.stage.get_mut() = None;
        *self.recv.get_mut() = None;
    }
}

/// A connected RC queue pair.
pub struct VerbsQp {
    peer: NodeId,
    remote: Remote,
    /// Largest SEND the peer's receive buffers take.
    max_message: usize,
    max_inline: usize,
    dev: Dev,
    /// This queue pair's index at its send completion queue.
    cq_index: u16,
    /// Its number at the device (0 on the fake device).
    qp_num: u32,
    /// Staging and receive buffers, once mapped (null before).
    stage_base: Cell<*mut u8>,
    stage_lkey: Cell<u32>,
    recv_base: Cell<*mut u8>,
    recv_lkey: Cell<u32>,
    /// Receives come from a server thread's shared receive queue (none of its own).
    shared_recv: bool,
    counters: Counters,
    stats: Stats,
    /// The caller's registered ranges, used in place: (base, len, lkey); len 0: none.
    pools: [Cell<(usize, usize, u32)>; POOLS],
    broken: Cell<bool>,
    /// The first failed completion that says the peer is gone (retry or RNR retry
    /// exceeded), `IBV_WC_SUCCESS` until then: the requests flushed after it report it,
    /// since a flush only says "an earlier error" ([`Self::flushed`]).
    cause: Cell<sys::ibv_wc_status>,
    slots: [slot::SlotCell; SLOTS],
    /// The waker of each slot's waiting post, kept for the slot's next batch (see
    /// `wake.rs`).
    wakers: [Cell<Option<Waker>>; SLOTS],
    /// Bit i set: slot i's waker is armed (its post waits for it).
    armed: Cell<u64>,
    /// Post futures of this queue pair waiting for their batch.
    waiting: Cell<u32>,
    /// Bit i set: slot i free.
    free: Cell<u64>,
    /// Work requests posted and not yet known complete.
    sq_used: Cell<u32>,
    /// Unsignaled detached work requests since the last signaled one.
    unsignaled: Cell<u32>,
    /// Receive waits' empty rounds since one last polled the send completion queue (see
    /// `RecvFuture::poll`).
    recv_idle: Cell<u32>,
    /// Posts waiting for send-queue room (see `room.rs`).
    room: room::RoomQueue,
    /// Receive futures waiting on this queue pair.
    recv_waiters: Cell<u32>,
    /// The wakers of its receive waits, one entry each (see `wake.rs`).
    recv_wakers: [Cell<Option<Waker>>; RECV_WAITS],
    /// Bit i: entry i of `recv_wakers` belongs to a receive wait.
    recv_used: Cell<u32>,
    /// Bit i: that wait is armed (woken when a receive arrives).
    recv_armed: Cell<u32>,
    /// A receive completion the progress hook reaped for the receive wait it woke.
    recv_stash: Cell<Option<sys::ibv_wc>>,
    /// Receive buffers consumed and not yet posted again (posted as one chain).
    repost: RefCell<Vec<u32>>,
    /// The work-request chain posts build (see `chain.rs`).
    chain: RefCell<chain::Chain>,
    /// Work requests at the head of `chain` queued and not yet posted (see `PostFuture`).
    queued_wrs: Cell<usize>,
    /// Bit i set: the batch in slot i is among them.
    queued: Cell<u64>,
    oneoff: RefCell<Vec<Option<OneOff>>>,
    raw: Raw,
}

// SAFETY: a queue pair is used by one thread at a time (`&self` methods are not Sync, the
// type is not Sync). libibverbs objects may be used from any thread, and every Cell/RefCell
// here moves with the value, so moving the whole queue pair to another thread is sound. A
// post future borrows the queue pair, so none can be in flight while it moves. The `Rc`s it
// holds (its send completion queue, a fake node) are shared only among the queue pairs of
// one `VerbsEndpoint`, which owns them all and moves them together (a standalone queue pair
// has its own), and a fake endpoint is not `Send` at all (`FakeEndpoint`).
unsafe impl Send for VerbsQp {}

impl VerbsQp {
    /// Its queue pair number (what a shared receive queue's completions name).
    #[inline]
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// Whether staging and receive buffers were mapped (for footprint checks).
    pub fn buffers_mapped(&self) -> (bool, bool) {
        (
            !self.stage_base.get().is_null(),
            !self.recv_base.get().is_null(),
        )
    }

    /// The send completion queue this queue pair posts to (for the next queue pair of the
    /// thread).
    pub(crate) fn send_cq(&self) -> &Rc<SendCq> {
        &self.raw.send
    }

    /// Sets what the peer told at connection time.
    pub(crate) fn set_peer(&mut self, peer: NodeId, remote: Remote, max_message: usize) {
        self.peer = peer;
        self.remote = remote;
        self.max_message = max_message.min(u32::MAX as usize);
    }

    /// The device's queue pair (null on the fake device).
    pub(crate) fn raw_qp(&self) -> *mut sys::ibv_qp {
        match &self.dev {
            Dev::Real(q) => *q,
            Dev::Fake(_) => std::ptr::null_mut(),
        }
    }

    pub(crate) fn cm_id(&self) -> *mut sys::rdma_cm_id {
        self.raw.id.as_ref().map_or(std::ptr::null_mut(), |i| i.0)
    }

    pub(crate) fn channel(&self) -> Option<&Channel> {
        self.raw.channel.as_ref()
    }

    /// Registers `[base, base + len)` with this queue pair as range `which` (< [`POOLS`]),
    /// so that ops whose local buffers lie in it are posted in place instead of through
    /// staging (a second call with the same `which` replaces the first).
    ///
    /// # Safety
    /// The memory stays mapped, and is not handed to anything else that frees it, until this
    /// queue pair is dropped.
    pub(crate) unsafe fn register_pool(
        &mut self,
        which: usize,
        base: *mut u8,
        len: usize,
    ) -> Result<(), VerbsError> {
        self.pools[which].set((0, 0, 0));
        self.raw.pool_mrs[which] = None;
        // SAFETY: the caller keeps the memory mapped for the queue pair's life; the
        // registration is released with `raw`, before the queue pair's end.
        let (mr, lkey) = unsafe { VerbsQp::register(&self.raw, base, len)? };
        self.pools[which].set((base as usize, len, lkey));
        self.raw.pool_mrs[which] = mr;
        Ok(())
    }

    /// The local key of `[p, p + len)` when it lies in the thread's installed frame memory
    /// and that is not registered with this queue pair yet: frame memory grown at a spawn
    /// (`remora_poller::frames`, sized for the coroutines placed in it) is registered here,
    /// once, as range [`FRAMES_RANGE`], at the first post from it. Off the hot path: only a
    /// buffer outside every registered range comes here (else it is bounced).
    #[cold]
    #[inline(never)]
    pub(super) fn adopt_frames(&self, p: *const u8, len: usize) -> Option<u32> {
        let (base, flen) = frames::installed_span()?;
        let (p, end) = (p as usize, (p as usize).checked_add(len)?);
        if p < base as usize || end > base as usize + flen {
            return None;
        }
        let stack = frames::installed()?;
        // SAFETY: the stack kept beside the registration holds its mapping until the
        // registration is released (replaced here, or in `Raw`'s drop, registration first).
        let (mr, lkey) = unsafe { VerbsQp::register(&self.raw, base, flen) }.ok()?;
        self.pools[FRAMES_RANGE].set((0, 0, 0));
        *self.raw.grown.borrow_mut() = Some((mr, stack));
        self.pools[FRAMES_RANGE].set((base as usize, flen, lkey));
        Some(lkey)
    }

    /// What this queue pair's data path cost so far (see [`super::stats`]).
    pub fn stats(&self) -> VerbsStats {
        self.stats.get()
    }

    /// Bytes a WRITE or SEND may have to go inline.
    pub fn max_inline(&self) -> usize {
        self.max_inline
    }

    /// What backs the staging buffers (`None`: none mapped yet, nothing bounced).
    pub fn staging_pages(&self) -> Option<crate::verbs::arena::PageKind> {
        self.raw.stage.borrow().as_ref().map(Arena::kind)
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        // Completions of this queue pair still in the shared queue are dropped by whoever
        // polls them. (Nothing is queued: a queued batch's post future borrows it.)
        self.raw.send.unqueue(self.cq_index);
        self.raw.send.place(self.cq_index, std::ptr::null());
        self.stats.retire();
    }
}

impl QueuePair for VerbsQp {
    fn peer(&self) -> NodeId {
        self.peer
    }

    fn post<'q, 'a>(
        &'q self,
        ops: &'q mut [Op<'a>],
    ) -> impl Future<Output = Result<(), FabricError>> {
        PostFuture::new(self, ops)
    }

    /// Detached (`post_detached`): resolves once posted; READs and atomics are refused.
    fn post_unsignaled<'q, 'a>(
        &'q self,
        ops: &'q mut [Op<'a>],
    ) -> impl Future<Output = Result<(), FabricError>> {
        std::future::ready(self.post_detached(ops).map(|_| ()))
    }

    fn recv<'a>(&'a self, buf: &'a mut [u8]) -> impl Future<Output = Result<Recv, FabricError>> {
        RecvFuture::new(self, buf)
    }

    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        self.poll_recv(buf)
    }

    fn max_message(&self) -> usize {
        self.max_message
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn is_broken(&self) -> bool {
        self.broken.get()
    }

    fn clock_ns(&self) -> Option<u64> {
        Some(super::clock::now_ns())
    }

    fn pause(&self, ns: u64) -> impl Future<Output = ()> {
        super::clock::pause(ns)
    }
}

impl VerbsQp {
    /// Notes a failed completion: the queue pair is broken, and the first status that names
    /// the peer as gone becomes its cause.
    pub(crate) fn note_failure(&self, status: sys::ibv_wc_status) {
        self.broken.set(true);
        if self.cause.get() == sys::IBV_WC_SUCCESS && peer_gone(status) {
            self.cause.set(status);
        }
    }

    /// The error of a request refused or flushed because the queue pair broke earlier: its
    /// cause when that was the peer going away (a client whose memory node died hears that,
    /// whichever of its coroutines asks first), else [`FabricError::Flushed`].
    fn flushed(&self) -> FabricError {
        let cause = self.cause.get();
        if peer_gone(cause) {
            let op = FailedOp {
                wr: 0,
                addr: GlobalAddr::NULL,
                len: 0,
            };
            wc_error(cause, op, self.peer)
        } else {
            FabricError::Flushed
        }
    }
}

/// A failed completion's status that says the peer no longer answers.
fn peer_gone(status: sys::ibv_wc_status) -> bool {
    matches!(
        status,
        sys::IBV_WC_RETRY_EXC_ERR | sys::IBV_WC_RESP_TIMEOUT_ERR | sys::IBV_WC_RNR_RETRY_EXC_ERR
    )
}

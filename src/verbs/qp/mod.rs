//! One RC queue pair and its data path: the [`QueuePair`] of the verbs fabric.
//!
//! - **Doorbell batching.** A `post` turns its ops into one chain of work requests and rings
//!   the doorbell once (`ibv_post_send` with the chain).
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
//! - **Completions drive themselves.** Polling a post future polls the send completion queue
//!   (a receive wait polls only the receive queue's, see `RecvFuture`)
//!   and records every completion in the slot table, so coroutines sharing the queue pair see
//!   each other's completions, and any executor (even a spin `block_on`) makes progress.
//!   Dropping a post future before it resolves waits for its batch, so the NIC never writes
//!   memory after its owner is gone.
//! - **Refused requests.** rdma-core's providers refuse a misaligned atomic at post time
//!   (rxe does). The ops before it are posted as the batch; then the atomic fails as a target
//!   would fail it (remote access error outside the region, remote invalid request inside)
//!   and the queue pair is moved to the error state, as the contract requires.
//! - **Receives.** Each queue pair keeps [`RQ_DEPTH`] receive buffers of [`RECV_LEN`] bytes
//!   posted; every receive completion (SEND or WRITE_WITH_IMM) re-posts its buffer.
mod post;
mod recv;
mod remote;

use super::arena::Arena;
use super::cm::{Channel, CmId};
use super::error::{VerbsError, sys_err};
use super::mr::{LOCAL, Mr, Pd};
use super::stats::{Stats, VerbsStats};
use super::sys;
pub use post::PostFuture;
use post::{FREE, OneOff, Slot};
pub use recv::RecvFuture;
use remora_core::counters::Counters;
use remora_core::fabric::{FabricError, Op, QueuePair, Recv};
use remora_layouts::NodeId;
pub(crate) use remote::Remote;
use std::cell::{Cell, RefCell};
use std::future::Future;

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
/// Most work requests one post may carry.
pub const MAX_BATCH: usize = 128;
/// Batches in flight per queue pair.
const SLOTS: usize = 64;
/// Staging bytes per in-flight batch.
const STAGE_SLOT: usize = 32 << 10;
/// Inline bytes asked for when creating a queue pair.
const INLINE_WANT: u32 = 128;
const POLL_BATCH: usize = 16;

/// The verbs objects of a queue pair, released in dependency order.
struct Raw {
    qp_created: bool,
    disconnect: bool,
    send_cq: *mut sys::ibv_cq,
    recv_cq: *mut sys::ibv_cq,
    stage_mr: Option<Mr>,
    recv_mr: Option<Mr>,
    pool_mr: Option<Mr>,
    stage: Option<Arena>,
    recv: Option<Arena>,
    pd: Pd,
    id: CmId,
    channel: Option<Channel>,
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: each object is released once, after everything that uses it: the queue
        // pair before its completion queues and registrations, registrations before their
        // memory and protection domain (fields below), the id before its channel.
        unsafe {
            if self.qp_created {
                if self.disconnect {
                    sys::rdma_disconnect(self.id.0);
                }
                sys::rdma_destroy_qp(self.id.0);
            }
            if !self.send_cq.is_null() {
                sys::ibv_destroy_cq(self.send_cq);
            }
            if !self.recv_cq.is_null() {
                sys::ibv_destroy_cq(self.recv_cq);
            }
        }
        self.stage_mr = None;
        self.recv_mr = None;
        self.pool_mr = None;
        self.stage = None;
        self.recv = None;
    }
}

/// A connected RC queue pair.
pub struct VerbsQp {
    peer: NodeId,
    remote: Remote,
    /// Largest SEND the peer's receive buffers take.
    max_message: usize,
    max_inline: usize,
    qp: *mut sys::ibv_qp,
    stage_base: *mut u8,
    stage_lkey: u32,
    recv_base: *mut u8,
    recv_lkey: u32,
    counters: Counters,
    stats: Stats,
    /// The caller's registered pool, used in place: (base, len, lkey); len 0: none.
    pool: Cell<(usize, usize, u32)>,
    broken: Cell<bool>,
    slots: [Cell<Slot>; SLOTS],
    /// Bit i set: slot i free.
    free: Cell<u64>,
    /// Work requests posted and not yet known complete.
    sq_used: Cell<u32>,
    /// Unsignaled detached work requests since the last signaled one.
    unsignaled: Cell<u32>,
    /// Post futures waiting for their batch, and their turn counter for polling the
    /// completion queue.
    waiters: Cell<u32>,
    turn: Cell<u32>,
    /// Receive waits' empty rounds since one last polled the send completion queue (see
    /// `RecvFuture::poll`).
    recv_idle: Cell<u32>,
    /// Receive buffers consumed and not yet posted again (posted as one chain).
    repost: RefCell<Vec<u32>>,
    wrs: RefCell<Vec<sys::ibv_send_wr>>,
    sges: RefCell<Vec<sys::ibv_sge>>,
    oneoff: RefCell<Vec<Option<OneOff>>>,
    raw: Raw,
}

// SAFETY: a queue pair is used by one thread at a time (`&self` methods are not Sync, the
// type is not Sync). libibverbs objects may be used from any thread, and every Cell/RefCell
// here moves with the value, so moving the whole queue pair to another thread is sound. A
// post future borrows the queue pair, so none can be in flight while it moves.
unsafe impl Send for VerbsQp {}

impl VerbsQp {
    /// Creates the queue pair on `id` (whose device is resolved), with its completion queues,
    /// staging and receive buffers, and posts the receives. `channel` is owned by the queue
    /// pair on the client side (one channel per connection) and `None` on a memory node.
    pub(crate) fn create(
        id: CmId,
        channel: Option<Channel>,
        pd: Pd,
        peer: NodeId,
        disconnect_on_drop: bool,
    ) -> Result<VerbsQp, VerbsError> {
        // SAFETY: `id` is a live cm id; `verbs` is its device context once resolved.
        let ctx = unsafe { (*id.0).verbs };
        if ctx.is_null() {
            return Err(VerbsError::Sys {
                what: "rdma_cm gave no device for the connection",
                errno: libc::ENODEV,
            });
        }
        let mut raw = Raw {
            qp_created: false,
            disconnect: disconnect_on_drop,
            send_cq: std::ptr::null_mut(),
            recv_cq: std::ptr::null_mut(),
            stage_mr: None,
            recv_mr: None,
            pool_mr: None,
            stage: None,
            recv: None,
            pd,
            id,
            channel,
        };
        // SAFETY: `ctx` is open; completion queues without channels, checked for null.
        raw.send_cq = unsafe {
            sys::ibv_create_cq(
                ctx,
                SQ_DEPTH as i32 + 1,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if raw.send_cq.is_null() {
            return Err(sys_err("ibv_create_cq (send)"));
        }
        // SAFETY: as above.
        raw.recv_cq = unsafe {
            sys::ibv_create_cq(
                ctx,
                RQ_DEPTH as i32 + 1,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if raw.recv_cq.is_null() {
            return Err(sys_err("ibv_create_cq (receive)"));
        }
        let mut max_inline = 0;
        for inline in [INLINE_WANT, 0] {
            let mut attr = sys::ibv_qp_init_attr {
                send_cq: raw.send_cq,
                recv_cq: raw.recv_cq,
                cap: sys::ibv_qp_cap {
                    max_send_wr: SQ_DEPTH,
                    max_recv_wr: RQ_DEPTH,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: inline,
                },
                qp_type: sys::IBV_QPT_RC,
                sq_sig_all: 0,
                ..Default::default()
            };
            // SAFETY: live id, PD and CQs of the same device; `attr` is a valid in/out struct.
            if unsafe { sys::rdma_create_qp(raw.id.0, raw.pd.raw(), &mut attr) } == 0 {
                raw.qp_created = true;
                max_inline = attr.cap.max_inline_data as usize;
                break;
            }
        }
        if !raw.qp_created {
            return Err(sys_err("rdma_create_qp"));
        }
        let stage = raw.stage.insert(Arena::new(SLOTS * STAGE_SLOT)?);
        let (stage_base, stage_len) = (stage.as_ptr(), stage.len());
        // SAFETY: the arena is owned by `raw`, which drops the registration first.
        let stage_mr = raw
            .stage_mr
            .insert(unsafe { Mr::register(&raw.pd, stage_base, stage_len, LOCAL)? });
        let stage_lkey = stage_mr.lkey();
        let recv = raw.recv.insert(Arena::new(RQ_DEPTH as usize * RECV_LEN)?);
        let (recv_base, recv_len) = (recv.as_ptr(), recv.len());
        // SAFETY: as above.
        let recv_mr = raw
            .recv_mr
            .insert(unsafe { Mr::register(&raw.pd, recv_base, recv_len, LOCAL)? });
        let recv_lkey = recv_mr.lkey();
        let qp = VerbsQp {
            peer,
            remote: Remote::default(),
            max_message: RECV_LEN,
            max_inline,
            // SAFETY: created above.
            qp: unsafe { (*raw.id.0).qp },
            stage_base,
            stage_lkey,
            recv_base,
            recv_lkey,
            counters: Counters::new(),
            stats: Stats::default(),
            pool: Cell::new((0, 0, 0)),
            broken: Cell::new(false),
            slots: [const { Cell::new(FREE) }; SLOTS],
            free: Cell::new(u64::MAX),
            sq_used: Cell::new(0),
            unsignaled: Cell::new(0),
            waiters: Cell::new(0),
            turn: Cell::new(0),
            recv_idle: Cell::new(0),
            repost: RefCell::new(Vec::with_capacity(RQ_DEPTH as usize)),
            wrs: RefCell::new(Vec::with_capacity(MAX_BATCH)),
            sges: RefCell::new(Vec::with_capacity(MAX_BATCH)),
            oneoff: RefCell::new((0..SLOTS).map(|_| None).collect()),
            raw,
        };
        qp.repost.borrow_mut().extend(0..RQ_DEPTH);
        qp.post_recvs().map_err(|()| sys_err("ibv_post_recv"))?;
        Ok(qp)
    }

    /// Sets what the peer told at connection time.
    pub(crate) fn set_peer(&mut self, peer: NodeId, remote: Remote, max_message: usize) {
        self.peer = peer;
        self.remote = remote;
        self.max_message = max_message.min(u32::MAX as usize);
    }

    pub(crate) fn cm_id(&self) -> *mut sys::rdma_cm_id {
        self.raw.id.0
    }

    pub(crate) fn channel(&self) -> Option<&Channel> {
        self.raw.channel.as_ref()
    }

    /// Registers `[base, base + len)` with this queue pair, so that ops whose local buffers
    /// lie in it are posted in place instead of through staging (one pool per queue pair; a
    /// second call replaces the first).
    ///
    /// # Safety
    /// The memory stays mapped, and is not handed to anything else that frees it, until this
    /// queue pair is dropped.
    pub(crate) unsafe fn register_pool(
        &mut self,
        base: *mut u8,
        len: usize,
    ) -> Result<(), VerbsError> {
        self.pool.set((0, 0, 0));
        self.raw.pool_mr = None;
        // SAFETY: the caller keeps the memory mapped for the queue pair's life; the
        // registration is released with `raw`, before the queue pair's end.
        let mr = unsafe { Mr::register(&self.raw.pd, base, len, LOCAL)? };
        self.pool.set((base as usize, len, mr.lkey()));
        self.raw.pool_mr = Some(mr);
        Ok(())
    }

    /// What this queue pair's data path cost so far (see [`super::stats`]).
    pub fn stats(&self) -> VerbsStats {
        self.stats.get()
    }

    /// Bytes a WRITE or SEND may have to go inline.
    pub fn max_inline(&self) -> usize {
        self.max_inline
    }

    /// What backs the staging buffers.
    pub fn staging_pages(&self) -> super::arena::PageKind {
        self.raw
            .stage
            .as_ref()
            .map_or(super::arena::PageKind::Small, Arena::kind)
    }

    /// The memory node's side of a fence: moves this (server-side) queue pair to the error
    /// state, after which the responder processes no more packets of the peer — a READ,
    /// WRITE or atomic of the fenced client no longer reaches memory (its requester retries,
    /// then fails with retry exceeded). Checked, unlike the best-effort move on a local error.
    pub(crate) fn cut_off(&self) -> Result<(), VerbsError> {
        self.broken.set(true);
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_ERR,
            ..Default::default()
        };
        // SAFETY: a live queue pair; moving it to the error state is always allowed.
        let rc = unsafe { sys::ibv_modify_qp(self.qp, &mut attr, sys::IBV_QP_STATE as i32) };
        if rc != 0 {
            return Err(VerbsError::Sys {
                what: "ibv_modify_qp to the error state (fencing a client)",
                errno: rc.abs(),
            });
        }
        Ok(())
    }

    /// Sets the receiver-not-ready timer this side advertises ([`MIN_RNR_TIMER`]) instead of
    /// rdma_cm's 0 (which IB reads as 655 ms). A move from RTS to RTS: best effort, a queue
    /// pair whose device refuses keeps the default. Returns whether it took.
    pub(crate) fn set_min_rnr_timer(&self) -> bool {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            cur_qp_state: sys::IBV_QPS_RTS,
            min_rnr_timer: MIN_RNR_TIMER,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE | sys::IBV_QP_CUR_STATE | sys::IBV_QP_MIN_RNR_TIMER;
        // SAFETY: a live, connected queue pair; `attr` is valid for the call.
        unsafe { sys::ibv_modify_qp(self.qp, &mut attr, mask as i32) == 0 }
    }

    fn to_error_state(&self) {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_ERR,
            ..Default::default()
        };
        // SAFETY: a live queue pair; moving it to the error state is always allowed.
        unsafe { sys::ibv_modify_qp(self.qp, &mut attr, sys::IBV_QP_STATE as i32) };
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
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
        Some(remora_poller::clock::monotonic_ns())
    }

    fn pause(&self, ns: u64) -> impl Future<Output = ()> {
        remora_poller::clock::pause(ns)
    }
}

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
//!   wakes the coroutine waiting on that batch and no other (`qp/wake.rs`). One waiting post
//!   of the thread holds the duty to poll it, once per executor round; the others sleep until
//!   their completion wakes them, and resolve without polling (a receive wait polls only its
//!   receive queue, see `RecvFuture`). Any executor (even a spin `block_on`) makes progress.
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
mod detached;
mod post;
mod recv;
mod remote;
mod ring;
mod slot;
mod wake;

use super::arena::Arena;
use super::cm::{Channel, CmId};
use super::error::{VerbsError, sys_err};
use super::fake::{FakeNode, FakeQp};
use super::mr::{LOCAL, Mr, Pd};
use super::stats::{Stats, VerbsStats};
use super::sys;
use cq::SendCq;
use post::OneOff;
pub use post::PostFuture;
pub use recv::RecvFuture;
use remora_core::counters::Counters;
use remora_core::fabric::{FabricError, Op, QueuePair, Recv};
use remora_layouts::NodeId;
pub(crate) use remote::Remote;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
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
    /// Creates the queue pair on `id` (whose device is resolved) on the thread's send
    /// completion queue `cq` when it fits (same device, room left; else on a new one), with
    /// its own receive completion queue. `channel` is owned by the queue pair on the client
    /// side (one channel per connection). The new queue pair's completion queue is
    /// [`Self::send_cq`], for the next one.
    pub(crate) fn create_on(
        id: CmId,
        channel: Option<Channel>,
        pd: Pd,
        peer: NodeId,
        disconnect_on_drop: bool,
        cq: Option<&Rc<SendCq>>,
    ) -> Result<VerbsQp, VerbsError> {
        VerbsQp::create_inner(id, channel, pd, peer, disconnect_on_drop, cq, None)
    }

    /// A memory node's queue pair on `id`: its own send completion queue, and no receive
    /// buffers or receive completion queue of its own: it takes receives from `srq` (a shared
    /// receive queue on `pd`) and reports them to `recv_cq`, both of which must outlive it.
    /// Its receive completions are polled by whoever polls `recv_cq` (`try_recv` refuses).
    pub(crate) fn create_shared(
        id: CmId,
        pd: Pd,
        peer: NodeId,
        srq: *mut sys::ibv_srq,
        recv_cq: *mut sys::ibv_cq,
    ) -> Result<VerbsQp, VerbsError> {
        VerbsQp::create_inner(id, None, pd, peer, true, None, Some((srq, recv_cq)))
    }

    fn create_inner(
        id: CmId,
        channel: Option<Channel>,
        pd: Pd,
        peer: NodeId,
        disconnect_on_drop: bool,
        cq: Option<&Rc<SendCq>>,
        shared: Option<(*mut sys::ibv_srq, *mut sys::ibv_cq)>,
    ) -> Result<VerbsQp, VerbsError> {
        // SAFETY: `id` is a live cm id; `verbs` is its device context once resolved.
        let ctx = unsafe { (*id.0).verbs };
        if ctx.is_null() {
            return Err(VerbsError::Sys {
                what: "rdma_cm gave no device for the connection",
                errno: libc::ENODEV,
            });
        }
        let send = match cq {
            Some(c) if c.fits(ctx) => c.clone(),
            _ => Rc::new(SendCq::real(ctx)?),
        };
        let mut raw = Raw {
            qp_created: false,
            disconnect: disconnect_on_drop,
            recv_cq: std::ptr::null_mut(),
            stage_mr: RefCell::new(None),
            recv_mr: RefCell::new(None),
            pool_mrs: [None, None],
            stage: RefCell::new(None),
            recv: RefCell::new(None),
            send,
            pd: Some(pd),
            id: Some(id),
            channel,
        };
        let (srq, recv_cq) = match shared {
            Some(s) => s,
            None => {
                // SAFETY: `ctx` is open; a completion queue without channel, checked for null.
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
                (std::ptr::null_mut(), raw.recv_cq)
            }
        };
        let (id, pd) = match (&raw.id, &raw.pd) {
            (Some(i), Some(p)) => (i.0, p.raw()),
            _ => unreachable!("set above"),
        };
        let mut max_inline = 0;
        for inline in [INLINE_WANT, 0] {
            let mut attr = sys::ibv_qp_init_attr {
                send_cq: raw.send.raw(),
                recv_cq,
                srq,
                cap: sys::ibv_qp_cap {
                    max_send_wr: SQ_DEPTH,
                    max_recv_wr: if srq.is_null() { RQ_DEPTH } else { 0 },
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: inline,
                },
                qp_type: sys::IBV_QPT_RC,
                sq_sig_all: 0,
                ..Default::default()
            };
            // SAFETY: live id, PD and CQs of the same device; `attr` is a valid in/out struct.
            if unsafe { sys::rdma_create_qp(id, pd, &mut attr) } == 0 {
                raw.qp_created = true;
                max_inline = attr.cap.max_inline_data as usize;
                break;
            }
        }
        if !raw.qp_created {
            return Err(sys_err("rdma_create_qp"));
        }
        // SAFETY: created above.
        let dev = Dev::Real(unsafe { (*id).qp });
        VerbsQp::finish_create(raw, dev, peer, max_inline, !srq.is_null())
    }

    /// A queue pair to `node` on the fake device (see [`super::fake`]), on `cq` when given
    /// and not full.
    pub(crate) fn fake(
        node: &Rc<FakeNode>,
        cq: Option<&Rc<SendCq>>,
    ) -> Result<VerbsQp, VerbsError> {
        let send = match cq {
            Some(c) if c.fits(std::ptr::null_mut()) => c.clone(),
            _ => Rc::new(SendCq::fake()),
        };
        let raw = Raw {
            qp_created: false,
            disconnect: false,
            recv_cq: std::ptr::null_mut(),
            stage_mr: RefCell::new(None),
            recv_mr: RefCell::new(None),
            pool_mrs: [None, None],
            stage: RefCell::new(None),
            recv: RefCell::new(None),
            send,
            pd: None,
            id: None,
            channel: None,
        };
        let dev = Dev::Fake(FakeQp::connect(node, RQ_DEPTH as usize));
        let mut qp = VerbsQp::finish_create(raw, dev, node.node(), INLINE_WANT as usize, false)?;
        let (addr, len) = node.region();
        let (dm_addr, dm_len) = node.dm();
        let remote = Remote {
            region_addr: addr,
            region_rkey: super::fake::FAKE_RKEY,
            region_len: len,
            dm: (dm_len > 0).then_some((
                super::wire::DmKind::Host,
                dm_addr,
                super::fake::FAKE_RKEY,
                dm_len,
            )),
        };
        qp.set_peer(node.node(), remote, RECV_LEN);
        Ok(qp)
    }

    /// Registers `[base, base + len)` with this queue pair's protection domain (nothing to
    /// do on the fake device): the registration, if any, and its local key.
    ///
    /// # Safety
    /// The memory stays mapped while the registration lives.
    unsafe fn register(
        raw: &Raw,
        base: *mut u8,
        len: usize,
    ) -> Result<(Option<Mr>, u32), VerbsError> {
        match &raw.pd {
            Some(pd) => {
                // SAFETY: by the caller's contract.
                let mr = unsafe { Mr::register(pd, base, len, LOCAL)? };
                let k = mr.lkey();
                Ok((Some(mr), k))
            }
            None => Ok((None, 0)),
        }
    }

    /// The common fields (staging and receive buffers come on first need).
    fn finish_create(
        raw: Raw,
        dev: Dev,
        peer: NodeId,
        max_inline: usize,
        shared_recv: bool,
    ) -> Result<VerbsQp, VerbsError> {
        let cq_index = raw.send.join().ok_or(VerbsError::Sys {
            what: "a send completion queue with no room left",
            errno: libc::ENOSPC,
        })?;
        let qp_num = match &dev {
            // SAFETY: a live queue pair created above.
            Dev::Real(q) => unsafe { (**q).qp_num },
            Dev::Fake(_) => 0,
        };
        let qp = VerbsQp {
            qp_num,
            peer,
            remote: Remote::default(),
            max_message: RECV_LEN,
            max_inline,
            dev,
            cq_index,
            stage_base: Cell::new(std::ptr::null_mut()),
            stage_lkey: Cell::new(0),
            recv_base: Cell::new(std::ptr::null_mut()),
            recv_lkey: Cell::new(0),
            shared_recv,
            counters: Counters::new(),
            stats: Stats::default(),
            pools: [const { Cell::new((0, 0, 0)) }; POOLS],
            broken: Cell::new(false),
            slots: [const { slot::SlotCell::free() }; SLOTS],
            wakers: [const { Cell::new(None) }; SLOTS],
            armed: Cell::new(0),
            waiting: Cell::new(0),
            free: Cell::new(u64::MAX),
            sq_used: Cell::new(0),
            unsignaled: Cell::new(0),
            recv_idle: Cell::new(0),
            repost: RefCell::new(Vec::with_capacity(RQ_DEPTH as usize)),
            chain: RefCell::new(chain::Chain::new()),
            queued_wrs: Cell::new(0),
            queued: Cell::new(0),
            oneoff: RefCell::new((0..SLOTS).map(|_| None).collect()),
            raw,
        };
        Ok(qp)
    }

    /// Maps `len` bytes and registers them with this queue pair's protection domain. The
    /// caller keeps the arena in `raw` beside the registration (which `raw` releases first).
    fn map_registered(
        &self,
        len: usize,
        no_memory: &'static str,
        no_registration: &'static str,
    ) -> Result<(Arena, Option<Mr>, u32), FabricError> {
        let arena = Arena::new(len).map_err(|_| FabricError::Unsupported { what: no_memory })?;
        // SAFETY: the caller keeps the arena in `raw`, which releases the registration first.
        let (mr, lkey) = unsafe { VerbsQp::register(&self.raw, arena.as_ptr(), arena.len()) }
            .map_err(|_| FabricError::Unsupported {
                what: no_registration,
            })?;
        Ok((arena, mr, lkey))
    }

    /// Maps and registers the staging buffers if not yet done.
    pub(super) fn ensure_stage(&self) -> Result<(), FabricError> {
        if !self.stage_base.get().is_null() {
            return Ok(());
        }
        let (arena, mr, lkey) = self.map_registered(
            SLOTS * STAGE_SLOT,
            "no memory for staging buffers",
            "could not register staging buffers (locked-memory limit?)",
        )?;
        self.stage_base.set(arena.as_ptr());
        self.stage_lkey.set(lkey);
        *self.raw.stage_mr.borrow_mut() = mr;
        *self.raw.stage.borrow_mut() = Some(arena);
        Ok(())
    }

    /// Maps, registers and posts the receive buffers if not yet done (a queue pair on a
    /// shared receive queue has none: an error).
    pub(super) fn ensure_recvs(&self) -> Result<(), FabricError> {
        if !self.recv_base.get().is_null() {
            return Ok(());
        }
        if self.shared_recv {
            return Err(FabricError::Unsupported {
                what: "a memory node's queue pair receives through its server thread's shared queue",
            });
        }
        let (arena, mr, lkey) = self.map_registered(
            RQ_DEPTH as usize * RECV_LEN,
            "no memory for receive buffers",
            "could not register receive buffers (locked-memory limit?)",
        )?;
        self.recv_base.set(arena.as_ptr());
        self.recv_lkey.set(lkey);
        *self.raw.recv_mr.borrow_mut() = mr;
        *self.raw.recv.borrow_mut() = Some(arena);
        self.repost.borrow_mut().extend(0..RQ_DEPTH);
        if self.post_recvs().is_err() {
            self.broken.set(true);
            return Err(FabricError::Unsupported {
                what: "ibv_post_recv refused the receive buffers",
            });
        }
        Ok(())
    }

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

    /// What this queue pair's data path cost so far (see [`super::stats`]).
    pub fn stats(&self) -> VerbsStats {
        self.stats.get()
    }

    /// Bytes a WRITE or SEND may have to go inline.
    pub fn max_inline(&self) -> usize {
        self.max_inline
    }

    /// What backs the staging buffers (`None`: none mapped yet, nothing bounced).
    pub fn staging_pages(&self) -> Option<super::arena::PageKind> {
        self.raw.stage.borrow().as_ref().map(Arena::kind)
    }

    /// Sets the receiver-not-ready timer this side advertises ([`MIN_RNR_TIMER`]) instead of
    /// rdma_cm's 0 (which IB reads as 655 ms), see [`set_min_rnr_timer`]. Returns whether the
    /// queue pair now has it.
    pub(crate) fn set_min_rnr_timer(&self) -> bool {
        match &self.dev {
            Dev::Real(qp) => set_min_rnr_timer(*qp),
            Dev::Fake(_) => true,
        }
    }

    fn to_error_state(&self) {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_ERR,
            ..Default::default()
        };
        match &self.dev {
            // SAFETY: a live queue pair; moving it to the error state is always allowed.
            Dev::Real(qp) => unsafe {
                sys::ibv_modify_qp(*qp, &mut attr, sys::IBV_QP_STATE as i32);
            },
            Dev::Fake(f) => f.to_error(),
        }
    }

    /// `ibv_post_send` on this queue pair's device.
    #[inline]
    fn post_send(&self, wr: *mut sys::ibv_send_wr, bad: &mut *mut sys::ibv_send_wr) -> i32 {
        match &self.dev {
            // SAFETY: a live queue pair; the caller's chain is valid for the call.
            Dev::Real(qp) => unsafe { sys::ibv_post_send(*qp, wr, bad) },
            Dev::Fake(f) => match self.raw.send.fake_cq() {
                Some(cq) => f.post_send(wr, cq),
                None => -libc::EINVAL,
            },
        }
    }

    /// `ibv_post_recv` on this queue pair's device.
    #[inline]
    fn post_recv(&self, wr: *mut sys::ibv_recv_wr, bad: &mut *mut sys::ibv_recv_wr) -> i32 {
        match &self.dev {
            // SAFETY: a live queue pair; the caller's chain is valid for the call.
            Dev::Real(qp) => unsafe { sys::ibv_post_recv(*qp, wr, bad) },
            Dev::Fake(f) => f.post_recv(wr),
        }
    }

    /// `ibv_poll_cq` on this queue pair's receive completion queue.
    #[inline]
    fn poll_recv_cq(&self, wc: *mut sys::ibv_wc) -> i32 {
        match &self.dev {
            // SAFETY: a live CQ; room for one completion at `wc` (the caller's).
            Dev::Real(_) => unsafe { sys::ibv_poll_cq(self.raw.recv_cq, 1, wc) },
            Dev::Fake(f) => f.recv_cq.poll(1, wc),
        }
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

/// Sets queue pair `qp`'s receiver-not-ready timer to [`MIN_RNR_TIMER`] (a move from RTS to
/// RTS: a queue pair not yet in RTS, or whose device refuses, keeps rdma_cm's default) and
/// reads it back: true when the queue pair has it. `qp` must be live; libibverbs allows the
/// call from any thread.
pub(crate) fn set_min_rnr_timer(qp: *mut sys::ibv_qp) -> bool {
    let mut attr = sys::ibv_qp_attr {
        qp_state: sys::IBV_QPS_RTS,
        min_rnr_timer: MIN_RNR_TIMER,
        ..Default::default()
    };
    let mask = sys::IBV_QP_STATE | sys::IBV_QP_MIN_RNR_TIMER;
    // SAFETY: a live queue pair (the caller's); `attr` is valid for the call.
    if unsafe { sys::ibv_modify_qp(qp, &mut attr, mask as i32) } != 0 {
        return false;
    }
    let mut got = sys::ibv_qp_attr::default();
    let mut init = sys::ibv_qp_init_attr::default();
    // SAFETY: as above; both structs are valid outputs for the call.
    let rc = unsafe {
        sys::ibv_query_qp(
            qp,
            &mut got,
            (sys::IBV_QP_STATE | sys::IBV_QP_MIN_RNR_TIMER) as i32,
            &mut init,
        )
    };
    rc == 0 && got.min_rnr_timer == MIN_RNR_TIMER
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
    /// The floor of the data path, to measure the rest against: `ops` times `per_op` READs
    /// of `size` bytes from the peer's region (at `offset`) into `buf`, each one work
    /// request posted straight to the device and its completion polled straight from the
    /// completion queue: no futures, slots, staging or dispatch. `buf` must lie in this
    /// queue pair's registered ranges, and nothing may be in flight on its completion queue.
    pub fn floor_loop(
        &self,
        ops: u64,
        per_op: u32,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), FabricError> {
        let Some(lkey) = self.pool_lkey(buf.as_ptr(), buf.len()) else {
            return Err(FabricError::Unsupported {
                what: "the floor loop reads into registered memory only",
            });
        };
        if self.raw.send.waiters.get() != 0 || self.sq_used.get() != 0 {
            return Err(FabricError::Unsupported {
                what: "the floor loop needs an idle queue pair",
            });
        }
        let (raddr, rkey) = self
            .remote
            .target(remora_layouts::GlobalAddr::new(self.peer, offset));
        let mut sge = sys::ibv_sge {
            addr: buf.as_mut_ptr() as u64,
            length: buf.len() as u32,
            lkey,
        };
        let mut wr = sys::ibv_send_wr {
            wr_id: u64::MAX,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: sys::IBV_WR_RDMA_READ,
            send_flags: sys::IBV_SEND_SIGNALED,
            ..Default::default()
        };
        wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: raddr,
            rkey,
        };
        let mut wc = std::mem::MaybeUninit::<sys::ibv_wc>::uninit();
        let mut bad = std::ptr::null_mut();
        for _ in 0..ops * u64::from(per_op) {
            if self.post_send(&mut wr, &mut bad) != 0 {
                return Err(FabricError::Unsupported {
                    what: "the device refused the floor loop's READ",
                });
            }
            loop {
                let n = self.raw.send.poll(1, wc.as_mut_ptr());
                if n < 0 {
                    return Err(FabricError::Unsupported {
                        what: "polling the completion queue failed",
                    });
                }
                if n == 1 {
                    // SAFETY: one completion written by the poll.
                    if unsafe { wc.assume_init_ref() }.status != sys::IBV_WC_SUCCESS {
                        self.broken.set(true);
                        return Err(FabricError::Flushed);
                    }
                    break;
                }
            }
        }
        Ok(())
    }
}

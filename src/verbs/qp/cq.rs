//! One send completion queue per thread: every queue pair of an endpoint posts into it, and
//! whoever polls it hands each completion to the queue pair named in its `wr_id`, which
//! marks the batch done in its slot table and wakes the coroutine waiting on it (see
//! `wake.rs`: that coroutine is polled next and finds it done without polling anything).
//!
//! A `wr_id` is `queue pair index << 48 | slot << 16 | work request index`.
use super::VerbsQp;
use crate::verbs::error::{VerbsError, sys_err};
use crate::verbs::fake::FakeCq;
use crate::verbs::sys;
use std::cell::Cell;

/// Queue pairs one completion queue serves.
pub(crate) const QPS_PER_CQ: usize = 16;

/// Work requests one queue pair may have completing at once (its send-queue depth, as every
/// request of a failed batch completes).
const CQE_PER_QP: i32 = super::SQ_DEPTH as i32;

enum Kind {
    Real {
        cq: *mut sys::ibv_cq,
        ctx: *mut sys::ibv_context,
        /// The completion channel this queue and its queue pairs' receive queues report to
        /// when armed (null: none, a memory node's queue pair; see `idle.rs`).
        channel: *mut sys::ibv_comp_channel,
    },
    Fake(FakeCq),
}

/// A send completion queue shared by the queue pairs of one thread.
pub(crate) struct SendCq {
    kind: Kind,
    /// The queue pairs by index, as each last posted (null: gone or never posted).
    qps: [Cell<*const VerbsQp>; QPS_PER_CQ],
    taken: Cell<usize>,
    /// Post futures of all these queue pairs waiting for their batch.
    pub(super) waiters: Cell<u32>,
    /// Bit i set: queue pair i has post futures waiting.
    waiting: Cell<u16>,
    /// Receive futures of these queue pairs waiting for a receive completion.
    pub(super) recv_waiters: Cell<u32>,
    /// Bit i set: queue pair i has receive futures waiting.
    recv_waiting: Cell<u16>,
    /// Registered with this thread's progress hooks (see `wake.rs`).
    pub(super) registered: Cell<bool>,
    /// Times this queue was drained (`VerbsQp::progress`): a waiting post that sees it
    /// unchanged since its last poll knows nobody polls it.
    pub(super) epoch: Cell<u32>,
    /// Bit i set: queue pair i has batches queued and not yet posted (its doorbell is rung
    /// by [`Self::flush`]).
    pending: Cell<u16>,
    /// Blocking when idle (`idle.rs`).
    pub(super) idle: super::idle::Idle,
}

impl SendCq {
    fn with(kind: Kind) -> SendCq {
        SendCq {
            kind,
            qps: [const { Cell::new(std::ptr::null()) }; QPS_PER_CQ],
            taken: Cell::new(0),
            waiters: Cell::new(0),
            waiting: Cell::new(0),
            recv_waiters: Cell::new(0),
            recv_waiting: Cell::new(0),
            registered: Cell::new(false),
            epoch: Cell::new(0),
            pending: Cell::new(0),
            idle: Default::default(),
        }
    }

    /// A completion queue on device context `ctx` with room for [`QPS_PER_CQ`] queue pairs,
    /// with a completion channel (non-blocking) to sleep on when idle if `channel` (a
    /// client's: see `idle.rs`).
    pub(crate) fn real(ctx: *mut sys::ibv_context, channel: bool) -> Result<SendCq, VerbsError> {
        let ch = if channel {
            super::idle::nonblocking_channel(ctx)?
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: `ctx` is open; `ch` is a live channel of it or null; no vector; checked
        // for null.
        let cq = unsafe {
            sys::ibv_create_cq(
                ctx,
                CQE_PER_QP * QPS_PER_CQ as i32 + 1,
                std::ptr::null_mut(),
                ch,
                0,
            )
        };
        if cq.is_null() {
            let e = sys_err("ibv_create_cq (send)");
            if !ch.is_null() {
                // SAFETY: created above, no queue on it.
                unsafe { sys::ibv_destroy_comp_channel(ch) };
            }
            return Err(e);
        }
        Ok(SendCq::with(Kind::Real {
            cq,
            ctx,
            channel: ch,
        }))
    }

    /// The completion channel the queue pairs' own receive completion queues report to
    /// (null: none, and on the fake device).
    pub(crate) fn channel(&self) -> *mut sys::ibv_comp_channel {
        match &self.kind {
            Kind::Real { channel, .. } => *channel,
            Kind::Fake(_) => std::ptr::null_mut(),
        }
    }

    /// The fake device's completion queue.
    pub(crate) fn fake() -> SendCq {
        SendCq::with(Kind::Fake(FakeCq::delayed(
            CQE_PER_QP as usize * QPS_PER_CQ + 1,
        )))
    }

    /// The raw completion queue to create a queue pair on (null on the fake device).
    pub(crate) fn raw(&self) -> *mut sys::ibv_cq {
        match &self.kind {
            Kind::Real { cq, .. } => *cq,
            Kind::Fake(_) => std::ptr::null_mut(),
        }
    }

    pub(crate) fn fake_cq(&self) -> Option<&FakeCq> {
        match &self.kind {
            Kind::Fake(c) => Some(c),
            Kind::Real { .. } => None,
        }
    }

    /// True when a queue pair on `ctx` may join (same device, room left).
    pub(crate) fn fits(&self, ctx: *mut sys::ibv_context) -> bool {
        let same = match &self.kind {
            Kind::Real { ctx: c, .. } => *c == ctx,
            Kind::Fake(_) => ctx.is_null(),
        };
        same && self.taken.get() < QPS_PER_CQ
    }

    /// Takes an index for a new queue pair.
    pub(crate) fn join(&self) -> Option<u16> {
        let i = self.taken.get();
        (i < QPS_PER_CQ).then(|| {
            self.taken.set(i + 1);
            i as u16
        })
    }

    /// Records where queue pair `i` is (it calls this on every post: a queue pair that moved
    /// since has nothing in flight).
    #[inline]
    pub(super) fn place(&self, i: u16, qp: *const VerbsQp) {
        self.qps[i as usize].set(qp);
    }

    /// Notes that queue pair `i` (placed: see [`Self::place`]) has batches queued.
    #[inline]
    pub(super) fn queue(&self, i: u16) {
        self.pending.set(self.pending.get() | 1 << i);
    }

    /// Notes that queue pair `i` has nothing queued any more.
    #[inline]
    pub(super) fn unqueue(&self, i: u16) {
        self.pending.set(self.pending.get() & !(1 << i));
    }

    /// True when some queue pair has batches queued.
    #[inline]
    pub(super) fn has_pending(&self) -> bool {
        self.pending.get() != 0
    }

    /// Rings the doorbell of every queue pair with batches queued: one `ibv_post_send` each,
    /// its queued batches as one chain (see `VerbsQp::ring`).
    pub(super) fn flush(&self) {
        let mut bits = self.pending.get();
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            match self.qp(i) {
                // SAFETY: as in `VerbsQp::dispatch`: the pointer was placed by that queue pair
                // when it queued (it cannot move while a post future borrows it, and it
                // clears its bit when it drops); used on this thread only.
                Some(p) => unsafe { &*p }.ring(),
                None => self.unqueue(i as u16),
            }
        }
    }

    /// The queue pair at index `i`, if it is there.
    pub(super) fn qp(&self, i: usize) -> Option<*const VerbsQp> {
        let p = self.qps.get(i)?.get();
        (!p.is_null()).then_some(p)
    }

    /// Up to `n` completions into `wcs` (`ibv_poll_cq`'s answer).
    #[inline]
    pub(super) fn poll(&self, n: usize, wcs: *mut sys::ibv_wc) -> i32 {
        match &self.kind {
            // SAFETY: a live CQ; room for `n` completions at `wcs` (the caller's).
            Kind::Real { cq, .. } => unsafe { sys::ibv_poll_cq(*cq, n as i32, wcs) },
            Kind::Fake(c) => c.poll(n, wcs),
        }
    }

    /// Notes whether queue pair `i` (placed: see [`Self::place`]) has post futures waiting.
    #[inline]
    pub(super) fn set_waiting(&self, i: u16, on: bool) {
        let bit = 1u16 << i;
        let w = self.waiting.get();
        self.waiting.set(if on { w | bit } else { w & !bit });
    }

    /// Bit i set: queue pair i has post futures waiting.
    #[inline]
    pub(super) fn waiting_qps(&self) -> u16 {
        self.waiting.get()
    }

    /// Notes whether queue pair `i` (placed) has receive futures waiting.
    #[inline]
    pub(super) fn set_recv_waiting(&self, i: u16, on: bool) {
        let bit = 1u16 << i;
        let w = self.recv_waiting.get();
        self.recv_waiting.set(if on { w | bit } else { w & !bit });
    }

    /// Bit i set: queue pair i has receive futures waiting.
    #[inline]
    pub(super) fn recv_waiting_qps(&self) -> u16 {
        self.recv_waiting.get()
    }
}

impl Drop for SendCq {
    fn drop(&mut self) {
        if self.registered.get() {
            // Nothing waits on it any more (a future borrows its queue pair); removed from
            // the thread's hooks all the same, so that no hook names freed memory.
            remora_poller::progress::unregister(std::ptr::from_ref(self).cast());
        }
        if let Kind::Real { cq, channel, .. } = self.kind {
            let unacked = self.idle.unacked.get();
            // SAFETY: every queue pair on it is destroyed (each holds the Rc until after),
            // and with them their receive queues on the channel; the events this queue got
            // are acknowledged before it is destroyed (else `ibv_destroy_cq` waits forever),
            // and the channel is destroyed after its last queue.
            unsafe {
                if unacked > 0 {
                    sys::ibv_ack_cq_events(cq, unacked);
                }
                sys::ibv_destroy_cq(cq);
                if !channel.is_null() {
                    sys::ibv_destroy_comp_channel(channel);
                }
            }
        }
    }
}

/// The `wr_id` of work request `idx` of batch `slot` on queue pair `qp`.
#[inline]
pub(super) fn wr_id(qp: u16, slot: u64, idx: usize) -> u64 {
    (u64::from(qp) << 48) | (slot << 16) | idx as u64
}

/// (queue pair, slot, work request) of a `wr_id`.
#[inline]
pub(super) fn split(wr_id: u64) -> (usize, u64, u16) {
    (
        (wr_id >> 48) as usize,
        (wr_id >> 16) & 0xffff_ffff,
        (wr_id & 0xffff) as u16,
    )
}

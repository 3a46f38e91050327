//! The send side: staging plans, the doorbell, completions into the slot table, and the
//! post future (see the parent module's notes on batching, signaling and staging).
use super::{MAX_BATCH, POLL_BATCH, SLOTS, SQ_DEPTH, STAGE_SLOT, VerbsQp};
use crate::verbs::arena::Arena;
use crate::verbs::error::{FailedOp, wc_error};
use crate::verbs::mr::{LOCAL, Mr};
use crate::verbs::sys;
use remora_core::fabric::{FabricError, Op};
use remora_layouts::GlobalAddr;
use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    Free,
    Posted,
    Done,
}

/// One batch in flight.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    state: SlotState,
    /// Work requests in the batch.
    n: u16,
    /// Index of the last one (the signaled one).
    last: u16,
    /// First failed work request and its status.
    err: Option<(u16, sys::ibv_wc_status)>,
}

pub(super) const FREE: Slot = Slot {
    state: SlotState::Free,
    n: 0,
    last: 0,
    err: None,
};

/// Where one op's local bytes go.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// No local bytes (zero length).
    Nothing,
    /// Copied into the work request.
    Inline,
    /// At this offset of the batch's staging buffer.
    Staged(usize),
}

/// A staging buffer registered for one oversized batch.
pub(super) struct OneOff {
    mr: Mr,
    arena: Arena,
}

impl VerbsQp {
    /// Drains the send completion queue into the slot table.
    pub(super) fn progress(&self) {
        let mut wcs = MaybeUninit::<[sys::ibv_wc; POLL_BATCH]>::uninit();
        loop {
            // SAFETY: a live CQ and room for POLL_BATCH completions; the first `n` are
            // initialized by the call.
            let n = unsafe {
                sys::ibv_poll_cq(self.raw.send_cq, POLL_BATCH as i32, wcs.as_mut_ptr().cast())
            };
            if n < 0 {
                self.fail_all_posted();
                return;
            }
            for k in 0..n as usize {
                // SAFETY: entry k < n was written by ibv_poll_cq.
                let wc = unsafe { &*wcs.as_ptr().cast::<sys::ibv_wc>().add(k) };
                self.complete(wc.wr_id, wc.status);
            }
            if (n as usize) < POLL_BATCH {
                return;
            }
        }
    }

    fn complete(&self, wr_id: u64, status: sys::ibv_wc_status) {
        let (slot, idx) = ((wr_id >> 16) as usize % SLOTS, (wr_id & 0xffff) as u16);
        let mut s = self.slots[slot].get();
        if s.state != SlotState::Posted {
            return;
        }
        if status != sys::IBV_WC_SUCCESS {
            self.broken.set(true);
            if s.err.is_none() {
                s.err = Some((idx, status));
            }
        }
        if idx == s.last {
            s.state = SlotState::Done;
            self.sq_used
                .set(self.sq_used.get().saturating_sub(s.n as u32));
        }
        self.slots[slot].set(s);
    }

    /// The completion queue itself failed: nothing more will complete, so finish every
    /// batch with an error (the queue pair is moved to the error state first, which stops the
    /// NIC using its buffers).
    fn fail_all_posted(&self) {
        self.broken.set(true);
        self.to_error_state();
        for c in &self.slots {
            let mut s = c.get();
            if s.state == SlotState::Posted {
                s.state = SlotState::Done;
                s.err.get_or_insert((0, sys::IBV_WC_GENERAL_ERR));
                c.set(s);
            }
        }
        self.sq_used.set(0);
    }

    /// Where each op's local bytes go; returns the staging bytes the batch needs.
    fn plan(&self, ops: &[Op<'_>], mut f: impl FnMut(usize, Place)) -> usize {
        let mut off = 0usize;
        for (i, op) in ops.iter().enumerate() {
            let place = match op {
                Op::Read { local: [], .. } => Place::Nothing,
                Op::Read { local, .. } => {
                    let p = Place::Staged(off);
                    off = (off + local.len()).next_multiple_of(8);
                    p
                }
                Op::Write { local, .. } | Op::WriteImm { local, .. } | Op::Send { local } => {
                    if local.is_empty() {
                        Place::Nothing
                    } else if local.len() <= self.max_inline {
                        Place::Inline
                    } else {
                        let p = Place::Staged(off);
                        off = (off + local.len()).next_multiple_of(8);
                        p
                    }
                }
                Op::Cas { .. } | Op::Faa { .. } => {
                    let p = Place::Staged(off);
                    off += 8;
                    p
                }
            };
            f(i, place);
        }
        off
    }

    /// The staging buffer of `slot` for a batch of `total` bytes: (base, lkey).
    fn stage_of(&self, slot: usize, total: usize) -> Option<(*mut u8, u32)> {
        if total <= STAGE_SLOT {
            // SAFETY: slot < SLOTS, so the slot lies inside the staging arena.
            return Some((
                unsafe { self.stage_base.add(slot * STAGE_SLOT) },
                self.stage_lkey,
            ));
        }
        let oneoff = self.oneoff.borrow();
        oneoff[slot]
            .as_ref()
            .map(|o| (o.arena.as_ptr(), o.mr.lkey()))
    }

    /// The first op the NIC would refuse at post time (a misaligned atomic), and its error.
    /// The ops before it are posted as the batch; it and those after it are not.
    fn refused(&self, ops: &[Op<'_>]) -> Option<(usize, FabricError)> {
        ops.iter().enumerate().find_map(|(i, op)| match op {
            Op::Cas { remote, .. } | Op::Faa { remote, .. } => {
                self.remote.misaligned_atomic(i, *remote).map(|e| (i, e))
            }
            _ => None,
        })
    }

    /// Breaks the queue pair after a refused op, as the NIC's error would have.
    fn break_now(&self) {
        self.broken.set(true);
        self.to_error_state();
        self.counters.count_error();
    }

    /// Checks and posts a batch. `Ok(None)`: no room yet (send queue or slots full).
    fn start(&self, all: &mut [Op<'_>]) -> Result<Option<usize>, FabricError> {
        let ops: &[Op<'_>] = all;
        if self.broken.get() {
            self.counters.count_error();
            return Err(FabricError::Flushed);
        }
        if ops.len() > MAX_BATCH {
            return Err(FabricError::Unsupported {
                what: "a batch of more than 128 work requests",
            });
        }
        for (wr, op) in ops.iter().enumerate() {
            if let Some(a) = op.remote()
                && a.node() != self.peer
            {
                return Err(FabricError::UnknownNode { node: a.node() });
            }
            let len = op.len();
            if matches!(op, Op::Send { .. }) && len > self.max_message {
                return Err(FabricError::LocalLength {
                    wr,
                    len,
                    max: self.max_message,
                });
            }
            if len > u32::MAX as usize {
                return Err(FabricError::LocalLength {
                    wr,
                    len,
                    max: u32::MAX as usize,
                });
            }
        }
        let ops = match self.refused(ops) {
            Some((0, e)) => {
                self.counters.count_post(ops);
                self.break_now();
                return Err(e);
            }
            Some((k, _)) => &ops[..k],
            None => ops,
        };
        let n = ops.len() as u32;
        if self.free.get() == 0 || self.sq_used.get() + n > SQ_DEPTH {
            return Ok(None);
        }
        let slot = self.free.get().trailing_zeros() as usize;
        let total = self.plan(ops, |_, _| {});
        if total > STAGE_SLOT {
            let arena = Arena::new(total).map_err(|_| FabricError::Unsupported {
                what: "no memory for a staging buffer",
            })?;
            // SAFETY: the arena is kept with its registration until the batch is released.
            let mr = unsafe { Mr::register(&self.raw.pd, arena.as_ptr(), arena.len(), LOCAL) }
                .map_err(|_| FabricError::Unsupported {
                    what: "could not register a staging buffer (locked-memory limit?)",
                })?;
            self.oneoff.borrow_mut()[slot] = Some(OneOff { mr, arena });
        }
        let Some((base, lkey)) = self.stage_of(slot, total) else {
            return Err(FabricError::Unsupported {
                what: "staging buffer missing",
            });
        };
        let mut wrs = self.wrs.borrow_mut();
        let mut sges = self.sges.borrow_mut();
        wrs.clear();
        sges.clear();
        let last = ops.len() - 1;
        self.plan(ops, |i, place| {
            let op = &ops[i];
            let (addr, len, inline) = match place {
                Place::Nothing => (0u64, 0usize, false),
                Place::Inline => {
                    let p = match op {
                        Op::Write { local, .. }
                        | Op::WriteImm { local, .. }
                        | Op::Send { local } => local.as_ptr(),
                        _ => std::ptr::null(),
                    };
                    (p as u64, op.len(), true)
                }
                Place::Staged(off) => {
                    // SAFETY: `off + len` is within the batch's staging buffer (plan's total).
                    let dst = unsafe { base.add(off) };
                    if let Op::Write { local, .. }
                    | Op::WriteImm { local, .. }
                    | Op::Send { local } = op
                    {
                        // SAFETY: `dst` has room for `local.len()` bytes; the NIC does not use
                        // this slot's buffer before the doorbell below.
                        unsafe { std::ptr::copy_nonoverlapping(local.as_ptr(), dst, local.len()) };
                    }
                    (dst as u64, op.len(), false)
                }
            };
            sges.push(sys::ibv_sge {
                addr,
                length: len as u32,
                lkey: if inline { 0 } else { lkey },
            });
            let mut wr = sys::ibv_send_wr {
                wr_id: ((slot as u64) << 16) | i as u64,
                num_sge: i32::from(len > 0),
                send_flags: if inline { sys::IBV_SEND_INLINE } else { 0 }
                    | if i == last { sys::IBV_SEND_SIGNALED } else { 0 },
                ..Default::default()
            };
            let (raddr, rkey) = op.remote().map_or((0, 0), |a| self.remote.target(a));
            match op {
                Op::Read { .. } => {
                    wr.opcode = sys::IBV_WR_RDMA_READ;
                    wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                        remote_addr: raddr,
                        rkey,
                    };
                }
                Op::Write { .. } => {
                    wr.opcode = sys::IBV_WR_RDMA_WRITE;
                    wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                        remote_addr: raddr,
                        rkey,
                    };
                }
                Op::WriteImm { imm, .. } => {
                    wr.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
                    wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                        remote_addr: raddr,
                        rkey,
                    };
                    wr.__bindgen_anon_1.imm_data = imm.to_be();
                }
                Op::Cas { compare, swap, .. } => {
                    wr.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
                    wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                        remote_addr: raddr,
                        compare_add: *compare,
                        swap: *swap,
                        rkey,
                    };
                }
                Op::Faa { add, .. } => {
                    wr.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
                    wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                        remote_addr: raddr,
                        compare_add: *add,
                        swap: 0,
                        rkey,
                    };
                }
                Op::Send { .. } => wr.opcode = sys::IBV_WR_SEND,
            }
            wrs.push(wr);
        });
        // Link the chain now that the vectors no longer move (capacity MAX_BATCH reserved).
        let sge_ptr = sges.as_mut_ptr();
        let wr_ptr = wrs.as_mut_ptr();
        for i in 0..wrs.len() {
            // SAFETY: i and i + 1 index the vectors' initialized elements.
            unsafe {
                wrs[i].sg_list = sge_ptr.add(i);
                wrs[i].next = if i == last {
                    std::ptr::null_mut()
                } else {
                    wr_ptr.add(i + 1)
                };
            }
        }
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: a live queue pair; the chain and its scatter entries stay valid for the call
        // (the provider copies them); staged buffers are registered and owned by this queue
        // pair until the batch completes; inline data is copied during the call.
        let rc = unsafe { sys::ibv_post_send(self.qp, wr_ptr, &mut bad) };
        self.counters.count_post(all);
        self.counters.count_round_trip();
        if rc != 0 {
            // SAFETY: `bad` points into `wrs` when set.
            let posted = if bad.is_null() {
                0
            } else {
                unsafe { bad.offset_from(wr_ptr) }.max(0) as usize
            };
            drop((wrs, sges));
            return Err(self.post_failed(slot, posted, &ops[posted.min(last)]));
        }
        self.slots[slot].set(Slot {
            state: SlotState::Posted,
            n: n as u16,
            last: last as u16,
            err: None,
        });
        self.free.set(self.free.get() & !(1 << slot));
        self.sq_used.set(self.sq_used.get() + n);
        Ok(Some(slot))
    }

    /// `ibv_post_send` refused the request at `posted` (validation above keeps this for
    /// limits the provider knows and we do not). The requests before it went out unsignaled:
    /// move the queue pair to the error state, which flushes what has not executed, and give
    /// them a bounded time (100 ms) to finish before the staging slot is reused.
    fn post_failed(&self, slot: usize, posted: usize, op: &Op<'_>) -> FabricError {
        self.break_now();
        if posted > 0 {
            self.slots[slot].set(Slot {
                state: SlotState::Posted,
                n: posted as u16,
                last: posted as u16 - 1,
                err: None,
            });
            self.sq_used.set(self.sq_used.get() + posted as u32);
            let t0 = std::time::Instant::now();
            while !self.is_done(slot) && t0.elapsed() < std::time::Duration::from_millis(100) {
                self.progress();
            }
            if !self.is_done(slot) {
                self.sq_used
                    .set(self.sq_used.get().saturating_sub(posted as u32));
            }
        }
        self.release(slot);
        FabricError::RemoteInvalid {
            wr: posted,
            addr: op.remote().unwrap_or(GlobalAddr::NULL),
            why: "the local NIC refused to post the work request (beyond its limits)",
        }
    }

    fn is_done(&self, slot: usize) -> bool {
        self.slots[slot].get().state == SlotState::Done
    }

    fn release(&self, slot: usize) {
        self.slots[slot].set(FREE);
        self.oneoff.borrow_mut()[slot] = None;
        self.free.set(self.free.get() | (1 << slot));
    }

    /// Copies results out of a finished batch and frees its slot.
    fn finish(&self, slot: usize, ops: &mut [Op<'_>]) -> Result<(), FabricError> {
        let s = self.slots[slot].get();
        let refused = self.refused(ops);
        let k = refused.map_or(ops.len(), |(k, _)| k);
        let ok_upto = s.err.map_or(k, |(i, _)| (i as usize).min(k));
        let total = self.plan(&ops[..k], |_, _| {});
        if let Some((base, _)) = self.stage_of(slot, total) {
            let mut places = [Place::Nothing; MAX_BATCH];
            self.plan(&ops[..k], |i, p| places[i] = p);
            for (i, op) in ops.iter_mut().enumerate().take(ok_upto) {
                let Place::Staged(off) = places[i] else {
                    continue;
                };
                // SAFETY: the batch's completion arrived, so the NIC is done with the staging
                // buffer; `off` and the op's length lie inside it (plan's total).
                let src = unsafe { base.add(off) };
                match op {
                    // SAFETY: `local.len()` staged bytes at `src`, destination a distinct slice.
                    Op::Read { local, .. } => unsafe {
                        std::ptr::copy_nonoverlapping(src, local.as_mut_ptr(), local.len())
                    },
                    // SAFETY: 8 staged bytes at `src`, 8-aligned by plan.
                    Op::Cas { old, .. } | Op::Faa { old, .. } => {
                        **old = unsafe { src.cast::<u64>().read_volatile() }
                    }
                    _ => {}
                }
            }
        }
        self.release(slot);
        match s.err {
            None => match refused {
                None => Ok(()),
                Some((_, e)) => {
                    self.break_now();
                    Err(e)
                }
            },
            Some((i, status)) => {
                self.broken.set(true);
                self.counters.count_error();
                let i = (i as usize).min(ops.len() - 1);
                let op = FailedOp {
                    wr: i,
                    addr: ops[i].remote().unwrap_or(GlobalAddr::NULL),
                    len: ops[i].len(),
                };
                Err(wc_error(status, op, self.peer))
            }
        }
    }
}

enum PostState {
    Start,
    Posted(usize),
    Finished,
}

/// The future of [`VerbsQp::post`]: posts on first poll, then polls the completion queue.
pub struct PostFuture<'q, 'a> {
    qp: &'q VerbsQp,
    ops: &'q mut [Op<'a>],
    state: PostState,
}

impl<'q, 'a> PostFuture<'q, 'a> {
    pub(super) fn new(qp: &'q VerbsQp, ops: &'q mut [Op<'a>]) -> Self {
        PostFuture {
            qp,
            ops,
            state: PostState::Start,
        }
    }
}

impl Future for PostFuture<'_, '_> {
    type Output = Result<(), FabricError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let PostState::Start = this.state {
            if this.ops.is_empty() {
                this.state = PostState::Finished;
                return Poll::Ready(Ok(()));
            }
            match this.qp.start(this.ops) {
                Err(e) => {
                    this.state = PostState::Finished;
                    return Poll::Ready(Err(e));
                }
                Ok(Some(slot)) => this.state = PostState::Posted(slot),
                Ok(None) => {}
            }
        }
        this.qp.progress();
        match this.state {
            PostState::Posted(slot) if this.qp.is_done(slot) => {
                this.state = PostState::Finished;
                Poll::Ready(this.qp.finish(slot, this.ops))
            }
            PostState::Finished => Poll::Ready(Err(FabricError::Unsupported {
                what: "a post future polled after it finished",
            })),
            _ => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

impl Drop for PostFuture<'_, '_> {
    fn drop(&mut self) {
        if let PostState::Posted(slot) = self.state {
            // The NIC may still write the staging buffer or read the chain's data: wait for
            // the batch. Bounded: the transport's retry limits always end in a completion.
            while !self.qp.is_done(slot) {
                self.qp.progress();
                std::hint::spin_loop();
            }
            self.qp.release(slot);
        }
    }
}

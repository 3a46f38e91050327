//! The send side: staging plans, the doorbell, completions into the slot table, and the
//! post future (see the parent module's notes on batching, signaling and staging).
use super::cq::{split, wr_id};
pub(super) use super::slot::{FREE, Slot, SlotState};
use super::{MAX_BATCH, POLL_BATCH, SLOTS, SQ_DEPTH, STAGE_SLOT, VerbsQp};
use crate::verbs::arena::Arena;
use crate::verbs::error::{FailedOp, wc_error};
use crate::verbs::mr::{LOCAL, Mr};
use crate::verbs::sys;
use remora_core::fabric::{FabricError, Op};
use remora_layouts::GlobalAddr;
use std::mem::MaybeUninit;

/// The slot bits of an unsignaled detached post's work requests (no slot).
pub(super) const NO_SLOT: u64 = 0xffff;

/// How a batch is posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// A post future waits for it: signaled, results copied out by `finish`.
    Wait,
    /// Fire and forget: caller buffers are free when the call returns (copied inline or into
    /// staging, never used in place); unsignaled when it needs no staging and fewer than
    /// [`SIGNAL_EVERY`] unsignaled requests precede it.
    Detached,
}

/// Most unsignaled work requests in a row: the next one is signaled, so that its completion
/// returns their send-queue credit.
pub(super) const SIGNAL_EVERY: u32 = 32;

/// Where one op's local bytes go.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// No local bytes (zero length).
    Nothing,
    /// Copied into the work request.
    Inline,
    /// At this offset of the batch's staging buffer.
    Staged(usize),
    /// In the caller's own buffer, which lies in a registered pool (this lkey).
    Direct(u32),
}

/// A staging buffer registered for one oversized batch.
pub(super) struct OneOff {
    /// None on the fake device (nothing to register); local key 0.
    mr: Option<Mr>,
    arena: Arena,
}

impl VerbsQp {
    /// Drains the thread's send completion queue, handing each completion to the slot table
    /// of the queue pair it names (which wakes the batch's waiting post).
    pub(super) fn progress(&self) {
        let mut wcs = MaybeUninit::<[sys::ibv_wc; POLL_BATCH]>::uninit();
        let cq = &*self.raw.send;
        cq.epoch.set(cq.epoch.get().wrapping_add(1));
        loop {
            let n = cq.poll(POLL_BATCH, wcs.as_mut_ptr().cast());
            if n < 0 {
                self.fail_all_posted();
                for i in 0..super::cq::QPS_PER_CQ {
                    if let Some(p) = cq.qp(i)
                        && i != self.cq_index as usize
                    {
                        // SAFETY: see `dispatch`.
                        unsafe { &*p }.fail_all_posted();
                    }
                }
                return;
            }
            self.stats.bump(|v| {
                v.cq_polls += 1;
                v.empty_polls += u64::from(n == 0);
                v.completions += n as u64;
            });
            if n > 0 {
                cq.touch();
            }
            for k in 0..n as usize {
                // SAFETY: entry k < n was written by ibv_poll_cq.
                let wc = unsafe { &*wcs.as_ptr().cast::<sys::ibv_wc>().add(k) };
                self.dispatch(wc.wr_id, wc.status);
            }
            if (n as usize) < POLL_BATCH {
                return;
            }
        }
    }

    /// Hands a completion to the queue pair its `wr_id` names (this one, or another of the
    /// thread's on the same completion queue; dropped if that one is gone).
    #[inline]
    fn dispatch(&self, wr_id: u64, status: sys::ibv_wc_status) {
        let (qi, _, _) = split(wr_id);
        if qi == self.cq_index as usize {
            return self.complete(wr_id, status);
        }
        if let Some(p) = self.raw.send.qp(qi) {
            // SAFETY: `p` was recorded by that queue pair at its last post and is cleared
            // when it drops; queue pairs share a completion queue only inside one endpoint,
            // which never moves them after connecting (their Vec is not touched again), and
            // all of them are used on this thread only (the queue is not Sync).
            unsafe { &*p }.complete(wr_id, status);
        }
    }

    fn complete(&self, wr_id: u64, status: sys::ibv_wc_status) {
        let (_, slot_bits, idx) = split(wr_id);
        if slot_bits == NO_SLOT {
            // Only an error completes an unsignaled request: nothing waits for it, but the
            // queue pair is broken, so every later post fails.
            if status != sys::IBV_WC_SUCCESS {
                if !self.broken.get() {
                    self.counters.count_error();
                }
                self.note_failure(status);
            }
            return;
        }
        let slot = slot_bits as usize % SLOTS;
        let mut s = self.slots[slot].get();
        if s.state != SlotState::Posted {
            return;
        }
        if status != sys::IBV_WC_SUCCESS {
            self.note_failure(status);
            if s.err.is_none() {
                s.err = Some((idx, status));
            }
        }
        if idx == s.last {
            s.state = SlotState::Done;
            self.sq_used
                .set(self.sq_used.get().saturating_sub(s.n as u32));
            if s.detached {
                self.release(slot);
                return;
            }
            self.slots[slot].set(s);
            self.wake_slot(slot);
            return self.room_returned();
        }
        self.slots[slot].set(s);
    }

    /// The completion queue itself failed: nothing more will complete, so finish every
    /// batch with an error (the queue pair is moved to the error state first, which stops the
    /// NIC using its buffers).
    fn fail_all_posted(&self) {
        self.broken.set(true);
        self.to_error_state();
        // Batches queued and not rung never will be: they finish here with the rest.
        self.queued_wrs.set(0);
        self.queued.set(0);
        self.raw.send.unqueue(self.cq_index);
        for c in &self.slots {
            let mut s = c.get();
            if s.state == SlotState::Posted {
                s.state = SlotState::Done;
                s.err.get_or_insert((0, sys::IBV_WC_GENERAL_ERR));
                c.set(s);
            }
        }
        for slot in 0..SLOTS {
            let s = self.slots[slot].get();
            if s.detached && s.state == SlotState::Done {
                self.release(slot);
            } else if s.state == SlotState::Done {
                self.wake_slot(slot);
            }
        }
        self.sq_used.set(0);
        self.unsignaled.set(0);
    }

    /// Where each op's local bytes go; returns the staging bytes the batch needs (see
    /// [`Self::place_of`]).
    fn plan(&self, ops: &[Op<'_>], in_place: bool, mut f: impl FnMut(usize, Place)) -> usize {
        let mut off = 0usize;
        for (i, op) in ops.iter().enumerate() {
            f(i, self.place_of(op, in_place, &mut off));
        }
        off
    }

    /// Where `op`'s local bytes go, staging from offset `off` on (moved past what it
    /// takes). A buffer inside a registered range is used in place when `in_place` (READ
    /// data and atomic results land in it, WRITE data is read from it); any other buffer is
    /// bounced through staging.
    #[inline(always)]
    fn place_of(&self, op: &Op<'_>, in_place: bool, off: &mut usize) -> Place {
        let pool = |p: *const u8, len: usize| {
            if !in_place {
                return None;
            }
            self.pool_lkey(p, len).or_else(|| self.adopt_frames(p, len))
        };
        let mut staged = |len: usize| {
            let p = Place::Staged(*off);
            *off = (*off + len).next_multiple_of(8);
            p
        };
        match op {
            Op::Read { local: [], .. } => Place::Nothing,
            Op::Read { local, .. } => match pool(local.as_ptr(), local.len()) {
                Some(k) => Place::Direct(k),
                None => staged(local.len()),
            },
            Op::Write { local, .. } | Op::WriteImm { local, .. } | Op::Send { local } => {
                if local.is_empty() {
                    Place::Nothing
                } else if local.len() <= self.max_inline {
                    Place::Inline
                } else {
                    match pool(local.as_ptr(), local.len()) {
                        Some(k) => Place::Direct(k),
                        None => staged(local.len()),
                    }
                }
            }
            Op::Cas { old, .. } | Op::MaskedCas { old, .. } | Op::Faa { old, .. } => {
                let p: *const u64 = &**old;
                match pool(p.cast(), 8) {
                    Some(k) if p.is_aligned() => Place::Direct(k),
                    _ => staged(8),
                }
            }
        }
    }

    /// The local key when `[p, p + len)` lies inside one of the caller's registered ranges
    /// (the endpoint's pool, its coroutine frames).
    #[inline]
    pub(super) fn pool_lkey(&self, p: *const u8, len: usize) -> Option<u32> {
        let p = p as usize;
        let end = p.checked_add(len)?;
        self.pools.iter().find_map(|c| {
            let (base, plen, lkey) = c.get();
            (plen > 0 && p >= base && end <= base + plen).then_some(lkey)
        })
    }

    /// The staging buffer of `slot` for a batch of `total` bytes: (base, lkey).
    fn stage_of(&self, slot: usize, total: usize) -> Option<(*mut u8, u32)> {
        if total == 0 {
            // Nothing staged (the staging buffers may not even be mapped).
            return Some((std::ptr::null_mut(), 0));
        }
        if total <= STAGE_SLOT {
            // SAFETY: slot < SLOTS, so the slot lies inside the staging arena.
            return Some((
                unsafe { self.stage_base.get().add(slot * STAGE_SLOT) },
                self.stage_lkey.get(),
            ));
        }
        let oneoff = self.oneoff.borrow();
        oneoff[slot]
            .as_ref()
            .map(|o| (o.arena.as_ptr(), o.mr.as_ref().map_or(0, Mr::lkey)))
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
    pub(super) fn break_now(&self) {
        self.broken.set(true);
        self.to_error_state();
        self.counters.count_error();
    }

    /// Checks and posts a batch. `Ok(None)`: no room yet (send queue or slots full). A
    /// detached post that needed no slot answers `Some(SLOTS)`.
    pub(super) fn start(
        &self,
        all: &mut [Op<'_>],
        mode: Mode,
    ) -> Result<Option<usize>, FabricError> {
        let ops: &[Op<'_>] = all;
        if self.broken.get() {
            self.counters.count_error();
            return Err(self.flushed());
        }
        if ops.len() > MAX_BATCH {
            return Err(FabricError::Unsupported {
                what: "a batch of more than 128 work requests",
            });
        }
        let in_place = mode == Mode::Wait;
        // One pass: every op checked (a masked atomic anywhere refuses the whole batch,
        // before any other error: see `checked`), the first the NIC would refuse found (the
        // ops before it are the batch), and where the batch's bytes go planned. (Places
        // uninitialized: a batch is mostly one op, and writing all MAX_BATCH would cost more
        // than the pass.)
        let mut places = [MaybeUninit::<Place>::uninit(); MAX_BATCH];
        let mut refused: Option<(usize, FabricError)> = None;
        let (mut total, mut direct, mut messages) = (0usize, 0u64, false);
        for (wr, op) in ops.iter().enumerate() {
            if let Op::MaskedCas { .. } = op {
                return Err(masked_refused());
            }
            if let Some(a) = op.remote()
                && a.node() != self.peer
            {
                return Err(checked(ops, FabricError::UnknownNode { node: a.node() }));
            }
            let len = op.len();
            if matches!(op, Op::Send { .. }) && len > self.max_message {
                return Err(checked(
                    ops,
                    FabricError::LocalLength {
                        wr,
                        len,
                        max: self.max_message,
                    },
                ));
            }
            if len > u32::MAX as usize {
                return Err(checked(
                    ops,
                    FabricError::LocalLength {
                        wr,
                        len,
                        max: u32::MAX as usize,
                    },
                ));
            }
            if refused.is_some() {
                continue;
            }
            if let Op::Cas { remote, .. } | Op::Faa { remote, .. } = op
                && let Some(e) = self.remote.misaligned_atomic(wr, *remote)
            {
                refused = Some((wr, e));
                continue;
            }
            messages |= matches!(op, Op::Send { .. } | Op::WriteImm { .. });
            let place = self.place_of(op, in_place, &mut total);
            if let Place::Direct(_) = place {
                direct += len as u64;
            }
            places[wr].write(place);
        }
        let was_refused = refused.is_some();
        let ops = match refused {
            Some((0, e)) => {
                self.counters.count_post(ops);
                self.break_now();
                return Err(e);
            }
            Some((k, _)) => &ops[..k],
            None => ops,
        };
        let n = ops.len() as u32;
        let signaled = mode == Mode::Wait || total > 0 || self.unsignaled.get() + n >= SIGNAL_EVERY;
        if (signaled && self.free.get() == 0) || self.sq_used.get() + n > SQ_DEPTH {
            // What is queued holds the room: post it, so that its completions return it.
            self.ring();
            return Ok(None);
        }
        if self.queued_wrs.get() + ops.len() > MAX_BATCH {
            self.ring();
        }
        let head = self.queued_wrs.get();
        // A waited-for batch joins the chain queued this executor round when other posts of
        // the thread are waiting (they are being polled in turn and may add theirs): its
        // post future rings the doorbell for all of them when it is polled again, next round.
        let cq = &*self.raw.send;
        let defer = mode == Mode::Wait && (cq.waiters.get() > 0 || cq.has_pending());
        let slot = if signaled {
            self.free.get().trailing_zeros() as usize
        } else {
            SLOTS
        };
        if total > 0 && total <= STAGE_SLOT {
            self.ensure_stage()?;
        }
        // A message's reply needs a posted receive: the first SEND or WRITE_WITH_IMM posts them.
        if messages && self.recv_base.get().is_null() && !self.shared_recv {
            self.ensure_recvs()?;
        }
        if total > STAGE_SLOT {
            self.oneoff_stage(slot, total)?;
        }
        let (base, lkey) = if total == 0 {
            // Nothing staged (the staging buffers may not even be mapped).
            (std::ptr::null_mut(), 0)
        } else {
            match self.stage_of(slot % SLOTS, total) {
                Some(s) => s,
                None => {
                    return Err(FabricError::Unsupported {
                        what: "staging buffer missing",
                    });
                }
            }
        };
        let mut chain = self.chain.borrow_mut();
        let last = ops.len() - 1;
        let mut bounced_write = 0u64;
        let slot_bits = if signaled { slot as u64 } else { NO_SLOT };
        for (i, op) in ops.iter().enumerate() {
            // SAFETY: the pass above wrote the place of every op before the refused one
            // (`ops` ends there), and i < ops.len() <= MAX_BATCH.
            let place = unsafe { places.get_unchecked(i).assume_init() };
            let len = op.len() as u32;
            let (addr, key) = match place {
                Place::Nothing => (0u64, 0),
                Place::Direct(k) => (local_ptr(op) as u64, k),
                Place::Inline => (local_ptr(op) as u64, 0),
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
                        bounced_write += local.len() as u64;
                    }
                    (dst as u64, lkey)
                }
            };
            let flags = if matches!(place, Place::Inline) {
                sys::IBV_SEND_INLINE
            } else {
                0
            } | if i == last && signaled {
                sys::IBV_SEND_SIGNALED
            } else {
                0
            };
            let remote = op.remote().map_or((0, 0), |a| self.remote.target(a));
            chain.set(
                head + i,
                wr_id(self.cq_index, slot_bits, i),
                op,
                (addr, len, key),
                remote,
                flags,
            );
        }
        if defer || head > 0 {
            // Queued behind (or rung with) what this round queued: the doorbell is rung by
            // `ring`, which counts it.
            drop(chain);
            self.count_batch(all, mode, (n, signaled), bounced_write, direct, 0);
            self.sq_used.set(self.sq_used.get() + n);
            self.queued_wrs.set(head + ops.len());
            let at = if signaled {
                self.arm(slot, n, last, mode, total, was_refused);
                self.queued.set(self.queued.get() | 1 << slot);
                slot
            } else {
                self.unsignaled.set(self.unsignaled.get() + n);
                SLOTS
            };
            if defer {
                cq.place(self.cq_index, self);
                cq.queue(self.cq_index);
            } else {
                self.ring();
            }
            return Ok(Some(at));
        }
        let wr_ptr = chain.link(ops.len());
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // Completions of this chain find this queue pair where it is now.
        self.raw.send.place(self.cq_index, self);
        // The chain and its scatter entries stay valid for the call (the provider copies
        // them); staged buffers are registered and owned by this queue pair until the batch
        // completes; inline data is copied during the call.
        let rc = self.post_send(wr_ptr, &mut bad);
        drop(chain);
        self.count_batch(all, mode, (n, signaled), bounced_write, direct, 1);
        if rc != 0 && !signaled {
            // Nothing of an unsignaled post is tracked: the requests before the refused one
            // went out and complete (or flush) on their own, with no buffer of ours to free.
            self.break_now();
            return Err(FabricError::RemoteInvalid {
                wr: 0,
                addr: GlobalAddr::NULL,
                why: "the local NIC refused to post the work request (beyond its limits)",
            });
        }
        if rc != 0 {
            // SAFETY: `bad` points into the chain when set.
            let posted = if bad.is_null() {
                0
            } else {
                unsafe { bad.offset_from(wr_ptr) }.max(0) as usize
            };
            return Err(self.post_failed(slot, posted, &ops[posted.min(last)]));
        }
        self.sq_used.set(self.sq_used.get() + n);
        if !signaled {
            self.unsignaled.set(self.unsignaled.get() + n);
            return Ok(Some(SLOTS));
        }
        self.arm(slot, n, last, mode, total, was_refused);
        Ok(Some(slot))
    }

    /// Counts a batch posted, queued or rung (`doorbells`: 1 when rung here; `ring` counts
    /// the doorbells of queued batches): its work requests (`n`, of which the last is
    /// `signaled` or not), its round trip when waited on, and its bytes.
    #[inline(always)]
    fn count_batch(
        &self,
        ops: &[Op<'_>],
        mode: Mode,
        (n, signaled): (u32, bool),
        bounced_write: u64,
        direct: u64,
        doorbells: u64,
    ) {
        self.counters.count_post(ops);
        if mode == Mode::Wait {
            self.counters.count_round_trip();
        }
        self.stats.bump(|v| {
            v.doorbells += doorbells;
            v.wrs += u64::from(n);
            v.unsignaled += u64::from(n - u32::from(signaled));
            v.bounced_write += bounced_write;
            v.in_place += direct;
        });
    }

    /// Marks `slot` posted for a signaled batch of `n` requests (the last at `last`): its
    /// completion also returns the credit of the unsignaled requests posted before it.
    #[inline(always)]
    fn arm(&self, slot: usize, n: u32, last: usize, mode: Mode, total: usize, refused: bool) {
        let credit = n + self.unsignaled.replace(0);
        self.slots[slot].set(Slot {
            state: SlotState::Posted,
            n: credit as u16,
            last: last as u16,
            err: None,
            detached: mode == Mode::Detached,
            staged: total > 0,
            oneoff: total > STAGE_SLOT,
            refused,
        });
        self.free.set(self.free.get() & !(1 << slot));
    }

    /// Maps (and registers) a staging buffer of `total` bytes for the batch in `slot`, which
    /// a staging slot cannot hold.
    fn oneoff_stage(&self, slot: usize, total: usize) -> Result<(), FabricError> {
        let arena = Arena::new(total).map_err(|_| FabricError::Unsupported {
            what: "no memory for a staging buffer",
        })?;
        let mr = match &self.raw.pd {
            Some(pd) => Some(
                // SAFETY: the arena is kept with its registration until the batch is
                // released.
                unsafe { Mr::register(pd, arena.as_ptr(), arena.len(), LOCAL) }.map_err(|_| {
                    FabricError::Unsupported {
                        what: "could not register a staging buffer (locked-memory limit?)",
                    }
                })?,
            ),
            None => None,
        };
        self.oneoff.borrow_mut()[slot] = Some(OneOff { mr, arena });
        self.stats.bump(|v| v.oneoff_regs += 1);
        Ok(())
    }

    #[inline]
    pub(super) fn is_done(&self, slot: usize) -> bool {
        self.slots[slot].is_done()
    }

    #[inline]
    pub(super) fn release(&self, slot: usize) {
        if self.slots[slot].replace(FREE).oneoff {
            self.oneoff.borrow_mut()[slot] = None;
        }
        self.disarm(slot);
        self.free.set(self.free.get() | (1 << slot));
        self.room_returned();
    }

    /// Copies results out of a finished batch and frees its slot.
    #[inline]
    pub(super) fn finish(&self, slot: usize, ops: &mut [Op<'_>]) -> Result<(), FabricError> {
        let s = self.slots[slot].get();
        if !s.staged && !s.refused && s.err.is_none() {
            // Everything in place or inline, nothing refused or failed: nothing to copy.
            self.release(slot);
            return Ok(());
        }
        self.finish_rest(slot, s, ops)
    }

    /// [`Self::finish`] for a batch with staged results, a refused op or a failure.
    #[inline(never)]
    fn finish_rest(&self, slot: usize, s: Slot, ops: &mut [Op<'_>]) -> Result<(), FabricError> {
        let refused = if s.refused { self.refused(ops) } else { None };
        let k = refused.as_ref().map_or(ops.len(), |(k, _)| *k);
        let ok_upto = s.err.map_or(k, |(i, _)| (i as usize).min(k));
        let total = if s.staged {
            self.plan(&ops[..k], true, |_, _| {})
        } else {
            0
        };
        if s.staged
            && let Some((base, _)) = self.stage_of(slot, total)
        {
            let mut places = [Place::Nothing; MAX_BATCH];
            self.plan(&ops[..k], true, |i, p| places[i] = p);
            let (mut read, mut atomic) = (0u64, 0u64);
            for (i, op) in ops.iter_mut().enumerate().take(ok_upto) {
                let Place::Staged(off) = places[i] else {
                    continue;
                };
                // SAFETY: the batch's completion arrived, so the NIC is done with the staging
                // buffer; `off` and the op's length lie inside it (plan's total).
                let src = unsafe { base.add(off) };
                match op {
                    Op::Read { local, .. } => {
                        // SAFETY: `local.len()` staged bytes at `src`, destination a distinct
                        // slice.
                        unsafe {
                            std::ptr::copy_nonoverlapping(src, local.as_mut_ptr(), local.len())
                        };
                        read += local.len() as u64;
                    }
                    Op::Cas { old, .. } | Op::MaskedCas { old, .. } | Op::Faa { old, .. } => {
                        // SAFETY: 8 staged bytes at `src`, 8-aligned by plan.
                        **old = unsafe { src.cast::<u64>().read_volatile() };
                        atomic += 8;
                    }
                    _ => {}
                }
            }
            self.stats.bump(|v| {
                v.bounced_read += read;
                v.bounced_atomic += atomic;
            });
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
                if status == sys::IBV_WC_WR_FLUSH_ERR {
                    return Err(self.flushed());
                }
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

/// The error of a batch with a masked atomic: masked atomics are an extended verb
/// (MLNX_OFED's experimental API, not upstream rdma-core's `ibv_post_send`), which this
/// fabric does not post.
#[cold]
fn masked_refused() -> FabricError {
    FabricError::Unsupported {
        what: "masked CMP_AND_SWP (an extended atomic upstream rdma-core does not post)",
    }
}

/// `e`, found while checking `ops`, unless a masked atomic among them refuses the batch
/// first (it is refused whatever else is wrong with the batch).
#[cold]
fn checked(ops: &[Op<'_>], e: FabricError) -> FabricError {
    if ops.iter().any(|op| matches!(op, Op::MaskedCas { .. })) {
        masked_refused()
    } else {
        e
    }
}

/// The address of `op`'s local bytes (its buffer, or its atomic's result word).
#[inline]
fn local_ptr(op: &Op<'_>) -> *const u8 {
    match op {
        Op::Read { local, .. } => local.as_ptr(),
        Op::Write { local, .. } | Op::WriteImm { local, .. } | Op::Send { local } => local.as_ptr(),
        Op::Cas { old, .. } | Op::MaskedCas { old, .. } | Op::Faa { old, .. } => {
            let p: *const u64 = &**old;
            p.cast()
        }
    }
}

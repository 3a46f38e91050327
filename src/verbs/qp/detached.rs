//! Posts nobody waits for (detached: the memory node's replies, releases) and the recovery
//! from a chain the provider refused part of.
use super::post::{Mode, Slot, SlotState};
use super::{SLOTS, SQ_DEPTH, VerbsQp};
use remora_core::fabric::{FabricError, Op};
use remora_layouts::GlobalAddr;

impl VerbsQp {
    /// Posts `ops` without waiting for them (see [`Mode::Detached`]): the memory node's
    /// replies, and releases nobody needs to see complete. Errors show on later posts (the
    /// queue pair is then broken). Returns how many rounds it had to wait for send-queue
    /// room or a staging slot, each round draining the send completion queue: 0 unless the
    /// peer is slower than the posts.
    pub(crate) fn post_detached(&self, ops: &mut [Op<'_>]) -> Result<u64, FabricError> {
        if ops.is_empty() {
            return Ok(0);
        }
        if ops.iter().any(|op| {
            matches!(
                op,
                Op::Read { .. } | Op::Cas { .. } | Op::MaskedCas { .. } | Op::Faa { .. }
            )
        }) {
            return Err(FabricError::Unsupported {
                what: "a detached post of an op with a result (READ or atomic)",
            });
        }
        // Reap completions (without waiting) once half the send queue or half the slots
        // are taken, so that room is there before it runs out.
        if self.sq_used.get() >= SQ_DEPTH / 2 || self.free.get().count_ones() < SLOTS as u32 / 2 {
            self.progress();
        }
        let mut waits = 0;
        loop {
            if self.start(ops, Mode::Detached)?.is_some() {
                return Ok(waits);
            }
            waits += 1;
            self.progress();
            std::hint::spin_loop();
        }
    }

    /// Waits until every detached work request posted on this queue pair has run: one
    /// signaled empty WRITE after them (a queue pair executes in order), waited for. For an
    /// endpoint closing its connections: destroying a queue pair flushes what has not run,
    /// and a release posted detached and lost so (Sherman's bare unlock) would leave its lock
    /// held until a waiter's lease ran out. Nothing to do when nothing is outstanding or the
    /// queue pair is broken; bounded by the transport's retry limits, as every post.
    pub(crate) fn settle_detached(&self) {
        if self.broken.get() || self.sq_used.get() == 0 {
            return;
        }
        let mut ops = [Op::Write {
            remote: GlobalAddr::new(self.peer, 0),
            local: &[],
        }];
        // An error breaks the queue pair, which is being closed anyway.
        let _ =
            remora_core::block_on::block_on(remora_core::fabric::QueuePair::post(self, &mut ops));
    }

    /// `ibv_post_send` refused the request at `posted` (validation above keeps this for
    /// limits the provider knows and we do not). The requests before it went out unsignaled:
    /// move the queue pair to the error state, which flushes what has not executed, and give
    /// them a bounded time (100 ms) to finish before the staging slot is reused.
    pub(super) fn post_failed(&self, slot: usize, posted: usize, op: &Op<'_>) -> FabricError {
        self.break_now();
        if posted > 0 {
            self.slots[slot].set(Slot {
                state: SlotState::Posted,
                n: posted as u16,
                last: posted as u16 - 1,
                err: None,
                detached: false,
                staged: true,
                oneoff: true,
                refused: false,
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
}

//! Doorbell batching across coroutines (see the parent module's notes): batches queued on a
//! queue pair while other posts of the thread wait go out as one chain, with one
//! `ibv_post_send`, when the first of their post futures is polled again (`SendCq::flush`),
//! or at once when a post needs the room they hold, a detached post follows them, or a
//! queued future is dropped.
use super::cq::split;
use super::post::{NO_SLOT, SlotState};
use super::{SLOTS, VerbsQp};
use crate::verbs::sys;

impl VerbsQp {
    /// Rings the doorbell for the batches queued on this queue pair: one `ibv_post_send`
    /// with all of them as one chain, in the order they were queued.
    pub(super) fn ring(&self) {
        let n = self.queued_wrs.replace(0);
        let queued = self.queued.replace(0);
        self.raw.send.unqueue(self.cq_index);
        if n == 0 {
            return;
        }
        let mut chain = self.chain.borrow_mut();
        let wr_ptr = chain.link(n);
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        self.raw.send.place(self.cq_index, self);
        // As in `start`: the chain is valid for the call; staged buffers are owned by their
        // slots; inline data is read from callers' buffers, which their queued post futures
        // still borrow.
        let rc = self.post_send(wr_ptr, &mut bad);
        self.stats.bump(|v| v.doorbells += 1);
        if rc == 0 {
            return;
        }
        // SAFETY: `bad` points into the chain when set.
        let posted = if bad.is_null() {
            0
        } else {
            (unsafe { bad.offset_from(wr_ptr) }.max(0) as usize).min(n)
        };
        // Batches whose last (signaled) request did not go out never complete on their own.
        let mut lost = 0u64;
        for k in posted..n {
            let (_, s, _) = split(chain.wr_id(k));
            if s != NO_SLOT {
                lost |= 1 << (s as usize % SLOTS);
            }
        }
        drop(chain);
        self.ring_failed(queued, lost);
    }

    /// The provider refused part of a rung chain (a limit it knows and we do not): the queue
    /// pair is broken, which flushes what went out; the batches that went out whole get a
    /// bounded time (100 ms) to complete, and every batch still open is finished with an
    /// error.
    fn ring_failed(&self, queued: u64, lost: u64) {
        self.break_now();
        let open = |mask: u64| (0..SLOTS).any(|s| mask & (1 << s) != 0 && !self.is_done(s));
        let t0 = std::time::Instant::now();
        while open(queued & !lost) && t0.elapsed() < std::time::Duration::from_millis(100) {
            self.progress();
        }
        for slot in 0..SLOTS {
            if queued & (1 << slot) == 0 {
                continue;
            }
            let mut s = self.slots[slot].get();
            if s.state != SlotState::Posted {
                continue;
            }
            s.state = SlotState::Done;
            s.err.get_or_insert((s.last, sys::IBV_WC_LOC_QP_OP_ERR));
            self.sq_used
                .set(self.sq_used.get().saturating_sub(s.n as u32));
            self.slots[slot].set(s);
            if s.detached {
                self.release(slot);
            } else {
                self.wake_slot(slot);
            }
        }
    }

    /// True while the batch in `slot` is queued (its doorbell not yet rung).
    #[inline]
    pub(super) fn is_queued(&self, slot: usize) -> bool {
        self.queued.get() & (1 << slot) != 0
    }
}

//! Completions to their coroutine: each waiting post's waker, kept in its batch's slot, and
//! the thread's poll duty.
//!
//! A post future that waits stores its waker in its batch's slot ([`VerbsQp::wait_on`]; a
//! fixed table of `SLOTS` per queue pair, no allocation) and arms it. A slot keeps its waker
//! when woken or freed, and a coroutine that posts again mostly takes the slot it just
//! freed, so arming is mostly a comparison: no clone, no reference count. Whoever drains the thread's send completion queue (`VerbsQp::progress`) marks
//! each finished batch done and wakes that batch's waker, and no other: a coroutine is
//! polled again exactly when its work requests completed, never round after round to look.
//!
//! The executors (the poller's ready list, `run_coroutines`) poll only woken coroutines and
//! have no hook of their own to drain a completion queue, so one waiting post of the thread
//! holds the *poll duty*: it drains the completion queue (and rings the doorbells the round
//! queued, see `SendCq::flush`) each time it is polled, and wakes itself to be polled again
//! next round. Every other waiting post sleeps until its completion wakes it. When the duty
//! holder's batch is done (or it is dropped) it hands the duty on, waking one other waiting
//! post ([`SendCq::hand_off`]), which takes it at its next poll. A post polled without being
//! woken (a combinator polling all its children, or a spin `block_on` nested in a coroutine
//! while the duty holder cannot run) whose completion queue nobody polled since its last
//! poll drains it itself, so that it can never wait for a holder that does not run.
use super::VerbsQp;
use super::cq::SendCq;
use super::post::SlotState;
use std::task::Waker;

impl VerbsQp {
    /// Arms `w` as the waker of the batch in `slot`, to be woken when it completes (the
    /// slot's stored waker is kept if it wakes the same task: no clone).
    #[inline]
    pub(super) fn wait_on(&self, slot: usize, w: &Waker) {
        let cell = &self.wakers[slot];
        // Moved out and back (a plain copy of two words, no reference count).
        match cell.take() {
            Some(old) if old.will_wake(w) => cell.set(Some(old)),
            old => {
                cell.set(Some(w.clone()));
                drop(old);
            }
        }
        self.armed.set(self.armed.get() | 1 << slot);
    }

    /// Wakes whoever waits for the batch in `slot`, if armed (nobody is for the duty holder,
    /// a spin `block_on`, a detached batch).
    #[inline]
    pub(super) fn wake_slot(&self, slot: usize) {
        let armed = self.armed.get();
        if armed & (1 << slot) == 0 {
            return;
        }
        self.armed.set(armed & !(1 << slot));
        // Taken out for the call, then put back for the slot's next batch.
        if let Some(w) = self.wakers[slot].take() {
            w.wake_by_ref();
            self.wakers[slot].set(Some(w));
        }
    }

    /// Disarms `slot` (its batch is released; its waker is kept for the next one).
    #[inline]
    pub(super) fn disarm(&self, slot: usize) {
        self.armed.set(self.armed.get() & !(1 << slot));
    }

    /// Wakes the waiter of one batch still in flight, disarming it; true if there was one.
    fn wake_one_waiter(&self) -> bool {
        let mut armed = self.armed.get();
        while armed != 0 {
            let slot = armed.trailing_zeros() as usize;
            armed &= armed - 1;
            if self.slots[slot].get().state == SlotState::Posted {
                self.wake_slot(slot);
                return true;
            }
        }
        false
    }

    /// A post future of this queue pair starts waiting for its batch.
    #[inline]
    pub(super) fn add_waiter(&self) {
        let n = self.waiting.get();
        self.waiting.set(n + 1);
        let cq = &*self.raw.send;
        cq.waiters.set(cq.waiters.get() + 1);
        if n == 0 {
            cq.set_waiting(self.cq_index, true);
        }
    }

    /// A post future of this queue pair stops waiting (finished or dropped).
    #[inline]
    pub(super) fn remove_waiter(&self) {
        let n = self.waiting.get() - 1;
        self.waiting.set(n);
        let cq = &*self.raw.send;
        cq.waiters.set(cq.waiters.get() - 1);
        if n == 0 {
            cq.set_waiting(self.cq_index, false);
        }
    }
}

impl SendCq {
    /// The poll duty's holder gives it up: if posts are still waiting, one of them is woken
    /// to take it at its next poll (see the module docs). When none has a waker to wake,
    /// every waiting post was already woken and is about to be polled: the first of them
    /// still waiting takes the duty.
    pub(super) fn hand_off(&self) {
        self.duty.set(false);
        if self.waiters.get() == 0 {
            return;
        }
        let mut bits = self.waiting_qps();
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(p) = self.qp(i) {
                // SAFETY: queue pair `i` has a waiting post future, which borrows it (so it
                // has not moved or dropped since it placed itself at that post), and it is
                // used on this thread only, as in `VerbsQp::dispatch`.
                if unsafe { &*p }.wake_one_waiter() {
                    return;
                }
            }
        }
    }
}

//! Completions to their coroutine: each waiting post's waker, kept in its batch's slot; each
//! receive wait's waker, kept by its queue pair; and the thread's progress hook that drains
//! the completion queues once per executor round.
//!
//! A post future that waits stores its waker in its batch's slot ([`VerbsQp::wait_on`]; a
//! fixed table of `SLOTS` per queue pair, no allocation) and arms it. A slot keeps its waker
//! when woken or freed, and a coroutine that posts again mostly takes the slot it just
//! freed, so arming is mostly a comparison: no clone, no reference count. Whoever drains the
//! thread's send completion queue (`VerbsQp::progress`) marks each finished batch done and
//! wakes that batch's waker, and no other: a coroutine is polled again exactly when its work
//! requests completed, never round after round to look.
//!
//! Who drains: while futures wait on a send completion queue, it is registered with the
//! thread's progress hooks ([`remora_poller::progress`]), which the executors (the poller's
//! ready list, `run_coroutines`) run once per round before they poll the ready coroutines.
//! Its hook ([`SendCq::round`]) rings the doorbells the round queued (`SendCq::flush`),
//! drains the queue, and polls the receive completion queue of each queue pair with a
//! receive wait, waking the wait whose receive arrived. No verbs future wakes itself then.
//!
//! Without such an executor (a spin `block_on`, an application thread: `progress::driven`
//! is false) a waiting future wakes itself, and a post polled while nobody drained its
//! completion queue since its last poll (also a spin `block_on` nested in a coroutine, whose
//! executor cannot run its round meanwhile) rings and drains it itself, so that it never
//! waits for a hook that does not run.
use super::cq::SendCq;
use super::{SEND_POLL_EVERY, VerbsQp};
use remora_poller::progress;
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

    /// Wakes whoever waits for the batch in `slot`, if armed (nobody is for a spin
    /// `block_on`'s post, a detached batch).
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
        cq.unhook_if_idle();
    }

    /// A receive future of this queue pair starts waiting (it placed the queue pair).
    pub(super) fn add_recv_waiter(&self) {
        let n = self.recv_waiters.get();
        self.recv_waiters.set(n + 1);
        let cq = &*self.raw.send;
        cq.recv_waiters.set(cq.recv_waiters.get() + 1);
        if n == 0 {
            cq.place(self.cq_index, self);
            cq.set_recv_waiting(self.cq_index, true);
        }
    }

    /// A receive future of this queue pair stops waiting (finished or dropped).
    pub(super) fn remove_recv_waiter(&self) {
        let n = self.recv_waiters.get() - 1;
        self.recv_waiters.set(n);
        let cq = &*self.raw.send;
        cq.recv_waiters.set(cq.recv_waiters.get() - 1);
        if n == 0 {
            cq.set_recv_waiting(self.cq_index, false);
        }
        cq.unhook_if_idle();
    }

    /// Keeps `w` as the waker of a receive wait, in its entry `entry` of this queue pair's
    /// table (taken on its first wait), armed to be woken by the thread's hook when a receive
    /// arrives; true when the hook will (false: the caller wakes itself, as without an
    /// executor that runs the hooks, or with all [`RECV_WAITS`](super::RECV_WAITS) entries taken). Concurrent
    /// waits each keep an entry: a receive wakes one of them, never all.
    pub(super) fn wait_recv(&self, entry: &mut Option<u8>, w: &Waker) -> bool {
        if !self.raw.send.hook_here() {
            return false;
        }
        let i = match *entry {
            Some(i) => i as usize,
            None => {
                let used = self.recv_used.get();
                if used == u32::MAX {
                    return false;
                }
                let i = (!used).trailing_zeros() as usize;
                self.recv_used.set(used | 1 << i);
                *entry = Some(i as u8);
                i
            }
        };
        let cell = &self.recv_wakers[i];
        match cell.take() {
            Some(old) if old.will_wake(w) => cell.set(Some(old)),
            old => {
                cell.set(Some(w.clone()));
                drop(old);
            }
        }
        self.recv_armed.set(self.recv_armed.get() | 1 << i);
        true
    }

    /// A receive wait gives back its entry (it finished or was dropped). A wait woken for a
    /// receive it did not take passes it on to another waiting one.
    pub(super) fn leave_recv(&self, entry: &mut Option<u8>) {
        let Some(i) = entry.take() else {
            return;
        };
        let bit = 1u32 << i;
        let was_armed = self.recv_armed.get() & bit != 0;
        self.recv_armed.set(self.recv_armed.get() & !bit);
        self.recv_used.set(self.recv_used.get() & !bit);
        drop(self.recv_wakers[i as usize].take());
        if !was_armed && self.recv_armed.get() != 0 {
            let stashed = self.recv_stash.take();
            let pass = stashed.is_some();
            self.recv_stash.set(stashed);
            if pass {
                self.wake_recv(false);
            }
        }
    }

    /// This queue pair's part of the round (it has a receive wait): polls its receive
    /// completion queue once; a completion (or an error) is kept for the wait and wakes it.
    /// A long wait also drains the send completion queue now and then when no post waits on
    /// it (see `RecvFuture::poll`).
    pub(super) fn recv_round(&self) {
        let stashed = self.recv_stash.take();
        if stashed.is_some() {
            // Woken already, not polled yet.
            self.recv_stash.set(stashed);
            return;
        }
        match self.reap_recv() {
            Ok(None) => self.recv_idle_tick(),
            Ok(Some(wc)) => {
                self.recv_stash.set(Some(wc));
                self.wake_recv(false);
            }
            // `poll_recv` answers it again to the woken waits.
            Err(_) => self.wake_recv(true),
        }
    }

    /// A receive wait found nothing: once every [`SEND_POLL_EVERY`] such rounds, drains the
    /// send completion queue if no post does (a failed send's error state flushes the
    /// receives, but a slow provider may take long to).
    pub(super) fn recv_idle_tick(&self) {
        let idle = self.recv_idle.get() + 1;
        if idle >= SEND_POLL_EVERY {
            self.recv_idle.set(0);
            if self.raw.send.waiters.get() == 0 {
                self.progress();
            }
        } else {
            self.recv_idle.set(idle);
        }
    }

    /// Wakes the oldest-entry armed receive wait (every one with `all`), disarming it.
    fn wake_recv(&self, all: bool) {
        let mut bits = self.recv_armed.get();
        if !all {
            bits &= bits.wrapping_neg();
        }
        self.recv_armed.set(self.recv_armed.get() & !bits);
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(w) = self.recv_wakers[i].take() {
                w.wake_by_ref();
                self.recv_wakers[i].set(Some(w));
            }
        }
    }
}

impl SendCq {
    /// Makes sure this thread's executor drains this queue each round: true when it will
    /// (registered now or before), false when no executor of this thread runs the hooks (or
    /// their table is full): then a waiting future must wake itself.
    #[inline]
    pub(super) fn hook_here(&self) -> bool {
        if self.registered.get() {
            return true;
        }
        if !progress::driven() {
            return false;
        }
        // SAFETY: registered only while futures wait on this queue: each borrows a queue pair
        // holding an `Rc` of it, so it stays where it is and alive until the last of them
        // ends (`unhook_if_idle`, on this thread: the futures are not Send across polls of
        // one executor), and it is unregistered on drop in any case. `round` touches no
        // hook table.
        let ok = unsafe { progress::register(std::ptr::from_ref(self).cast(), SendCq::round) };
        self.registered.set(ok);
        ok
    }

    /// Leaves the thread's hooks when no future waits on this queue any more.
    #[inline]
    pub(super) fn unhook_if_idle(&self) {
        if self.registered.get() && self.waiters.get() == 0 && self.recv_waiters.get() == 0 {
            self.registered.set(false);
            progress::unregister(std::ptr::from_ref(self).cast());
        }
    }

    /// The progress hook: rings the doorbells queued this round, drains the queue (waking
    /// the posts whose batches finished), and polls the receive queues waited on.
    ///
    /// # Safety
    /// `data` is a live `SendCq` used on this thread (see [`Self::hook_here`]).
    unsafe fn round(data: *const ()) {
        // SAFETY: the caller's.
        let cq = unsafe { &*data.cast::<SendCq>() };
        cq.flush();
        if cq.waiters.get() > 0 {
            let bits = cq.waiting_qps();
            if bits != 0
                && let Some(p) = cq.qp(bits.trailing_zeros() as usize)
            {
                // SAFETY: a queue pair with a waiting post: the post borrows it, so it is
                // where it placed itself and alive; used on this thread only (as in
                // `VerbsQp::dispatch`).
                unsafe { &*p }.progress();
            }
        }
        let mut bits = cq.recv_waiting_qps();
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(p) = cq.qp(i) {
                // SAFETY: as above, for a queue pair with a waiting receive future (which
                // placed it when it started waiting).
                unsafe { &*p }.recv_round();
            }
        }
        // Nothing moved for a while: sleep on the completion channel (`idle.rs`).
        cq.idle_round();
    }
}

//! The verbs fabric's pauses (`Endpoint::pause`): a pending pause waits for the thread's
//! progress hook to find its deadline passed, instead of waking itself every round.
//!
//! A pause used to be a loop of `yield_now`: every round the executor polled each pausing
//! coroutine only to read the clock and wait again. Index code races its receives and its
//! routed-reply waits with a deadline pause (Erda's replies, CANRT's turn notices), so every
//! coroutine waiting for a message was polled every round for nothing.
//!
//! Here a pending pause on a thread whose executor runs the progress hooks
//! ([`remora_poller::progress::driven`]) leaves its deadline and waker in the thread's table
//! (a fixed [`TIMERS`] entries: no allocation, no system call) and returns `Pending`. While
//! an entry is in use the table is registered as one of the thread's progress sources: once
//! per round it reads the clock (once, and only while a pause is armed) and wakes the pauses
//! whose deadlines passed, and no other. Without such an executor (a spin `block_on`, an
//! application thread), or with the table full, a pause wakes itself at each poll, as before.
//! A pause polled by anyone (a spin `block_on` nested in a coroutine polls without being
//! woken) checks the clock itself, so it ends on time whoever polls it.
use super::clock::now_ns;
use remora_poller::progress;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Pauses one thread may have pending in its table at once (beyond: they wake themselves).
pub const TIMERS: usize = 128;

struct Table {
    deadline: [Cell<u64>; TIMERS],
    wakers: [Cell<Option<Waker>>; TIMERS],
    /// Bit i: entry i belongs to a live pause.
    used: Cell<u128>,
    /// Bit i: entry i's pause waits to be woken at its deadline.
    armed: Cell<u128>,
    /// The table is registered with the thread's progress hooks.
    registered: Cell<bool>,
}

thread_local! {
    static TABLE: Table = const {
        Table {
            deadline: [const { Cell::new(0) }; TIMERS],
            wakers: [const { Cell::new(None) }; TIMERS],
            used: Cell::new(0),
            armed: Cell::new(0),
            registered: Cell::new(false),
        }
    };
}

impl Table {
    /// A free entry, taken; None when all are in use.
    fn take(&self) -> Option<usize> {
        let used = self.used.get();
        if used == u128::MAX {
            return None;
        }
        let i = (!used).trailing_zeros() as usize;
        self.used.set(used | 1 << i);
        Some(i)
    }

    /// Arms entry `i` to wake `w` at `until`; false when the table cannot be registered
    /// (the caller then wakes itself).
    fn arm(&self, i: usize, until: u64, w: &Waker) -> bool {
        if !self.registered.get() {
            // SAFETY: `data` is this thread's table, alive for as long as the thread (the
            // hook runs on this thread only: the table is thread-local, and so is the hook
            // registry); `round` registers and unregisters nothing. It is unregistered when
            // the last entry is given back (`give_back`).
            let ok = unsafe { progress::register(std::ptr::from_ref(self).cast(), Table::round) };
            if !ok {
                return false;
            }
            self.registered.set(true);
        }
        self.deadline[i].set(until);
        let cell = &self.wakers[i];
        match cell.take() {
            Some(old) if old.will_wake(w) => cell.set(Some(old)),
            old => {
                cell.set(Some(w.clone()));
                drop(old);
            }
        }
        self.armed.set(self.armed.get() | 1 << i);
        true
    }

    /// Gives entry `i` back; the table leaves the progress hooks with its last entry.
    fn give_back(&self, i: usize) {
        let bit = 1u128 << i;
        self.armed.set(self.armed.get() & !bit);
        self.used.set(self.used.get() & !bit);
        drop(self.wakers[i].take());
        if self.used.get() == 0 && self.registered.replace(false) {
            progress::unregister(std::ptr::from_ref(self).cast());
        }
    }

    /// The progress hook: wakes the armed pauses whose deadlines passed.
    ///
    /// # Safety
    /// `data` is this thread's [`Table`] (see [`Table::arm`]).
    unsafe fn round(data: *const ()) {
        // SAFETY: the caller's.
        let t = unsafe { &*data.cast::<Table>() };
        let mut bits = t.armed.get();
        if bits == 0 {
            return;
        }
        let now = now_ns();
        let mut armed = bits;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if t.deadline[i].get() <= now {
                armed &= !(1 << i);
                if let Some(w) = t.wakers[i].take() {
                    w.wake_by_ref();
                    t.wakers[i].set(Some(w));
                }
            }
        }
        t.armed.set(armed);
    }
}

/// The earliest deadline (in [`now_ns`]) of this thread's armed pauses, if any: how long
/// an idle thread may sleep (`qp/idle.rs`).
pub(crate) fn next_deadline() -> Option<u64> {
    TABLE.with(|t| {
        let mut bits = t.armed.get();
        let mut next = None::<u64>;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let d = t.deadline[i].get();
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        next
    })
}

/// Lets the other coroutines of this thread run until `ns` nanoseconds of [`now_ns`] have
/// passed (pending at least once, as a yield).
pub fn pause(ns: u64) -> Pause {
    Pause {
        until: now_ns().saturating_add(ns),
        entry: None,
        first: true,
    }
}

/// The future of [`pause`].
pub struct Pause {
    until: u64,
    /// Its entry in the thread's table, once it waited there.
    entry: Option<usize>,
    first: bool,
}

impl Future for Pause {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if !this.first && now_ns() >= this.until {
            this.release();
            return Poll::Ready(());
        }
        this.first = false;
        if progress::driven() {
            let armed = TABLE.with(|t| {
                let Some(i) = this.entry.or_else(|| t.take()) else {
                    return false;
                };
                this.entry = Some(i);
                t.arm(i, this.until, cx.waker())
            });
            if armed {
                return Poll::Pending;
            }
        }
        this.release();
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Pause {
    fn release(&mut self) {
        if let Some(i) = self.entry.take() {
            // On the thread that took it: a pause with an entry is polled on one thread (an
            // executor's coroutines are not moved between its polls). A table already gone
            // (thread exit) has nothing to give back.
            let _ = TABLE.try_with(|t| t.give_back(i));
        }
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora_poller::executor::run_coroutines;
    use std::rc::Rc;

    /// Coroutines pausing under the executor are polled about once per pause (the first
    /// poll, and the one when the hook finds it due), not once per round: the old yielding
    /// pause was polled every round for the whole 2 ms, thousands of times. A coroutine
    /// that keeps stepping meanwhile makes the rounds.
    #[test]
    fn a_pause_waits_for_its_deadline_not_every_round() {
        // A future polled through a counting wrapper.
        struct Counting<F>(F, Rc<Cell<u32>>);
        impl<F: Future + Unpin> Future for Counting<F> {
            type Output = F::Output;
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
                self.1.set(self.1.get() + 1);
                Pin::new(&mut self.0).poll(cx)
            }
        }
        let polls = Rc::new(Cell::new(0u32));
        let rounds = Rc::new(Cell::new(0u32));
        let r = rounds.clone();
        let start = now_ns();
        let a = Box::pin(async move {
            for _ in 0..3 {
                Counting(
                    Box::pin(super::super::clock::pause(2_000_000)),
                    polls.clone(),
                )
                .await;
            }
            polls.get()
        });
        let b = Box::pin(async move {
            let until = start + 7_000_000;
            while now_ns() < until {
                r.set(r.get() + 1);
                crate::core::block_on::yield_now().await;
            }
            0u32
        });
        let out = run_coroutines(vec![
            a as Pin<Box<dyn Future<Output = u32>>>,
            b as Pin<Box<dyn Future<Output = u32>>>,
        ]);
        assert!(now_ns() - start >= 6_000_000, "three 2 ms pauses took 6 ms");
        // Two polls per pause: armed, then woken once due.
        assert!(out[0] <= 6, "{} polls for 3 pauses", out[0]);
        assert!(rounds.get() > 100, "only {} rounds", rounds.get());
        assert!(!progress::run(), "the timer table left registered");
    }

    /// Without an executor that runs the hooks (a spin `block_on`), a pause still ends, on
    /// time, waking itself; and it leaves no entry behind.
    #[test]
    fn a_pause_under_a_spin_block_on_ends_on_time() {
        let t0 = now_ns();
        crate::core::block_on::block_on(super::super::clock::pause(1_000_000));
        assert!(now_ns() - t0 >= 1_000_000);
        TABLE.with(|t| assert_eq!(t.used.get(), 0));
    }
}

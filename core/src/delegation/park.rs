//! Waiters that park instead of polling: a coroutine that waits for another (of any thread of
//! its compute node) to release or publish something leaves its [`Waker`] in the entry it
//! waits on, under the lock that guards that entry, and whoever changes the entry wakes it
//! under the same lock (so no wake-up is lost between a waiter's look and its parking). Used
//! by the delegation and combining table (this module's parent) and by Sherman's local lock
//! table (`sherman/lock.rs`).
//!
//! On the sim a waiter woken by another task runs at the instant of the wake-up
//! (`poller/src/sim/exec.rs`; by a coroutine of its own task, `client_poll_ns` later); a
//! polling waiter saw the change at its next poll, 0 to `client_poll_ns` after it. Wherever
//! wakers do nothing (the busy-polling executors of soft and verbs), a parked waiter is
//! simply polled as before.
//!
//! Every wait stays bounded: a parked waiter also arms a timer at its next lease or deadline
//! check ([`wait`]), so a dead holder, who wakes nobody, is still found out; that check is at
//! most a sixteenth of the lease or deadline away, which counts only time the waiter watched
//! (`crate::lease`, "Stalls": a timer that fires late after a stop re-arms). The slots are
//! fixed ([`Parked`]): parking allocates nothing, and a waiter that finds them all taken
//! polls as before.
use core::future::{Future, poll_fn};
use core::pin::pin;
use core::task::{Context, Poll, Waker};

/// The wakers of the coroutines parked on one entry, each under a tag (Sherman: its ticket;
/// the delegation table: 0). `N` slots: a waiter that finds none free polls instead.
pub(crate) struct Parked<const N: usize> {
    /// Slots taken: waking, forgetting or clearing an entry nobody parked on (the common
    /// case of an uncontended key) reads no slot.
    taken: u32,
    slots: [Option<(u64, Waker)>; N],
}

impl<const N: usize> Default for Parked<N> {
    fn default() -> Self {
        Parked {
            taken: 0,
            slots: [const { None }; N],
        }
    }
}

impl<const N: usize> Parked<N> {
    /// Parks `waker` under `tag` (once: a waker already there under `tag` that wakes the same
    /// task stays); false when every slot is taken.
    pub(crate) fn park(&mut self, tag: u64, waker: &Waker) -> bool {
        let mut free = None;
        for (i, s) in self.slots.iter().enumerate() {
            match s {
                Some((t, w)) if *t == tag && w.will_wake(waker) => return true,
                None if free.is_none() => free = Some(i),
                _ => {}
            }
        }
        let Some(i) = free else {
            return false;
        };
        self.slots[i] = Some((tag, waker.clone()));
        self.taken += 1;
        true
    }

    /// Wakes (and forgets) the waiters parked under a tag `pick` chooses.
    pub(crate) fn wake_if(&mut self, mut pick: impl FnMut(u64) -> bool) {
        if self.taken == 0 {
            return;
        }
        for s in &mut self.slots {
            if s.as_ref().is_some_and(|(t, _)| pick(*t))
                && let Some((_, w)) = s.take()
            {
                self.taken -= 1;
                w.wake();
            }
        }
    }

    /// Wakes (and forgets) every waiter.
    pub(crate) fn wake_all(&mut self) {
        self.wake_if(|_| true)
    }

    /// Forgets the waiters parked under `tag` without waking them (they stopped waiting).
    pub(crate) fn forget(&mut self, tag: u64) {
        if self.taken == 0 {
            return;
        }
        for s in &mut self.slots {
            if s.as_ref().is_some_and(|(t, _)| *t == tag) {
                *s = None;
                self.taken -= 1;
            }
        }
    }

    /// Forgets every waiter (an entry taken for another key: nobody waits on it).
    pub(crate) fn clear(&mut self) {
        if self.taken != 0 {
            self.slots = [const { None }; N];
            self.taken = 0;
        }
    }

    /// Waiters parked (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let n = self.slots.iter().filter(|s| s.is_some()).count();
        assert_eq!(n, self.taken as usize, "the count of taken slots is kept");
        n
    }
}

/// What one look at the awaited entry found.
pub(crate) enum Check<R> {
    /// The wait is over.
    Done(R),
    /// Parked (the waker is in the entry); the next lease or deadline check is due in this
    /// many ns.
    Park(u64),
    /// Not parked (the entry's lock was busy, or its slots full): look again at the next poll.
    Retry,
}

/// Waits until `check` ends the wait. `check` looks at the entry under its lock: at once,
/// then each time the waiter is woken (by whoever changed the entry, or spuriously) and when
/// the timer `timer(ns)` armed at its last `Check::Park(ns)` fires. The timer is armed once
/// per due check, not per look, and a fired timer's check runs at the next poll (a timer
/// that is ready at once, as on a fabric without a clock, cannot make this spin inside one
/// poll).
pub(crate) async fn wait<R, T: Future<Output = ()>>(
    mut check: impl FnMut(&mut Context<'_>) -> Check<R>,
    timer: impl Fn(u64) -> T,
) -> R {
    let mut armed = pin!(None::<T>);
    poll_fn(move |cx| match check(cx) {
        Check::Done(r) => Poll::Ready(r),
        Check::Retry => {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        Check::Park(ns) => {
            if armed.is_none() {
                armed.set(Some(timer(ns)));
            }
            if let Some(t) = armed.as_mut().as_pin_mut()
                && t.poll(cx).is_ready()
            {
                armed.set(None);
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }
    })
    .await
}

/// A hand-driven executor for the tests of parking waiters: each task is polled only when
/// its waker was woken (or when the test says), and counts its polls; a clock that the test
/// moves, with timers that fire once it reaches them.
#[cfg(test)]
pub(crate) mod testing {
    extern crate std;
    use core::cell::Cell;
    use core::future::Future;
    use core::pin::Pin;
    use core::task::{Context, Poll, Waker};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::Wake;

    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A future under test, with its own waker and a count of its polls.
    pub(crate) struct Task<F: Future> {
        fut: Pin<std::boxed::Box<F>>,
        flag: Arc<Flag>,
        waker: Waker,
        pub(crate) polls: u32,
        pub(crate) out: Option<F::Output>,
    }

    impl<F: Future> Task<F> {
        pub(crate) fn new(f: F) -> Task<F> {
            let flag = Arc::new(Flag(AtomicBool::new(true)));
            Task {
                fut: std::boxed::Box::pin(f),
                waker: Waker::from(flag.clone()),
                flag,
                polls: 0,
                out: None,
            }
        }

        /// Polls it (unless finished), woken or not.
        pub(crate) fn poll(&mut self) -> bool {
            if self.out.is_some() {
                return true;
            }
            self.flag.0.store(false, Ordering::SeqCst);
            self.polls += 1;
            if let Poll::Ready(v) = self
                .fut
                .as_mut()
                .poll(&mut Context::from_waker(&self.waker))
            {
                self.out = Some(v);
            }
            self.out.is_some()
        }

        /// Polls it if it was woken since its last poll.
        pub(crate) fn poll_if_woken(&mut self) -> bool {
            if self.out.is_none() && self.flag.0.load(Ordering::SeqCst) {
                self.poll();
            }
            self.out.is_some()
        }
    }

    /// The test's clock, and the earliest time a pending timer waits for.
    #[derive(Default)]
    pub(crate) struct Clock {
        pub(crate) now: Cell<u64>,
        pub(crate) due: Cell<Option<u64>>,
    }

    impl Clock {
        /// A timer of `ns` from now: ready once the clock reaches it (the test polls its
        /// task then, as the sim does on the timer's event).
        pub(crate) fn timer(&self, ns: u64) -> impl Future<Output = ()> + '_ {
            let until = self.now.get() + ns;
            self.due
                .set(Some(self.due.get().map_or(until, |d| d.min(until))));
            core::future::poll_fn(move |_| {
                if self.now.get() >= until {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
        }
    }
}

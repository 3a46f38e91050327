//! Timers for the soft fabric's pauses ([`pause`]: `Endpoint::pause` and `Endpoint::timer`
//! on soft), so that an executor can sleep while every coroutine waits on one.
//!
//! A soft pause used to yield until its deadline: the task woke itself at every poll, and an
//! executor whose coroutines all waited (for a lock held by a descheduled thread, for a
//! lease) kept its core busy polling clocks. On an oversubscribed host that spinning took
//! the core from the thread that would end the wait (issue 26: a compute node's pollers on
//! CPU 575 ms each while the operations they ran waited on each other).
//!
//! An executor that drives this thread's timers ([`DriveTimers`]) gets them here instead: a
//! pending pause leaves its deadline and waker in a thread-local list and returns `Pending`
//! without waking itself. The executor calls [`fire_due`] when it has nothing ready: it wakes
//! the pauses that are due and says when the next one is, so the executor can spin a bounded
//! time and then sleep until then, or until another thread wakes one of its tasks. On any
//! other executor (the bench's, tokio) a pause yields until its deadline, as before.
use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// Pauses pending at once that the list holds without allocating.
const PREALLOCATED: usize = 256;

thread_local! {
    /// Whether this thread's executor calls [`fire_due`].
    static DRIVEN: Cell<bool> = const { Cell::new(false) };
    /// Pending pauses: (deadline in [`crate::clock::monotonic_ns`], waker).
    static PENDING: RefCell<Vec<(u64, Waker)>> = const { RefCell::new(Vec::new()) };
}

/// While alive, this thread's executor drives its soft pauses with [`fire_due`].
#[derive(Debug)]
#[must_use = "the timers are driven only while the guard lives"]
pub struct DriveTimers {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl DriveTimers {
    /// Marks this thread as one whose executor calls [`fire_due`] whenever it has no task
    /// ready.
    pub fn start() -> DriveTimers {
        PENDING.with(|p| {
            let mut p = p.borrow_mut();
            let want = PREALLOCATED.saturating_sub(p.len());
            p.reserve(want);
        });
        DRIVEN.with(|d| d.set(true));
        DriveTimers {
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for DriveTimers {
    fn drop(&mut self) {
        DRIVEN.with(|d| d.set(false));
        // Whatever still waits is woken: it then yields until its deadline on its own.
        let left: Vec<(u64, Waker)> = PENDING.with(|p| p.borrow_mut().drain(..).collect());
        for (_, w) in left {
            w.wake();
        }
    }
}

/// Wakes this thread's pauses that are due; returns the earliest deadline still pending (in
/// [`crate::clock::monotonic_ns`]). Reads the clock only when a pause is pending.
pub fn fire_due() -> Option<u64> {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_empty() {
            return None;
        }
        let now = crate::clock::monotonic_ns();
        let mut next = None::<u64>;
        let mut i = 0;
        while i < p.len() {
            if p[i].0 <= now {
                let (_, w) = p.swap_remove(i);
                w.wake();
            } else {
                next = Some(next.map_or(p[i].0, |n| n.min(p[i].0)));
                i += 1;
            }
        }
        next
    })
}

/// Lets the other coroutines of this thread run until `ns` nanoseconds have passed: asleep
/// on a driven thread's timer list, else yielding at each poll.
pub async fn pause(ns: u64) {
    let until = crate::clock::monotonic_ns().saturating_add(ns);
    let mut first = true;
    poll_fn(|cx| {
        if !first && crate::clock::monotonic_ns() >= until {
            return Poll::Ready(());
        }
        first = false;
        if DRIVEN.with(Cell::get) {
            PENDING.with(|p| {
                let mut p = p.borrow_mut();
                match p.iter_mut().find(|(_, w)| w.will_wake(cx.waker())) {
                    // The same task pausing again (a wake that found it not yet due).
                    Some(e) => e.0 = until,
                    None => p.push((until, cx.waker().clone())),
                }
            });
        } else {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::task::{Context, Wake};

    struct Count(AtomicU32);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// On a driven thread a pause does not wake itself: `fire_due` wakes it once due, and
    /// says when the next pause is due meanwhile. Undriven, it wakes itself at every poll.
    #[test]
    fn a_driven_pause_waits_for_fire_due() {
        let count = Arc::new(Count(AtomicU32::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        {
            let _d = DriveTimers::start();
            let mut p = std::pin::pin!(pause(2_000_000));
            assert!(p.as_mut().poll(&mut cx).is_pending());
            assert_eq!(count.0.load(Ordering::Relaxed), 0, "no self-wake");
            let now = crate::clock::monotonic_ns();
            let next = fire_due().expect("one pause pending");
            assert!(next > now && next <= now + 2_000_000);
            assert_eq!(count.0.load(Ordering::Relaxed), 0, "not due yet");
            while crate::clock::monotonic_ns() < next {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            assert_eq!(fire_due(), None);
            assert_eq!(count.0.load(Ordering::Relaxed), 1, "woken once due");
            assert!(p.as_mut().poll(&mut cx).is_ready());
        }
        let mut p = std::pin::pin!(pause(1_000_000_000));
        assert!(p.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::Relaxed), 2, "undriven: wakes itself");
        assert_eq!(fire_due(), None, "nothing listed");
    }
}

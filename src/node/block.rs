//! Blocking on a runtime future from an application thread: poll, spin briefly, then park
//! until the poller's completion wakes the thread.
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    /// This thread's waker, made once (no allocation per blocking call).
    static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
}

/// Polls before parking: a soft-fabric operation often finishes within that.
const SPINS: u32 = 64;

/// Times a blocked thread parked (a futex wait; its waker's unpark is one futex wake).
pub(crate) static PARKS: AtomicU64 = AtomicU64::new(0);

/// Runs `fut` to completion on this thread, parking while it waits.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    WAKER.with(|w| {
        let mut cx = Context::from_waker(w);
        let mut spins = 0;
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                PARKS.fetch_add(1, Ordering::Relaxed);
                std::thread::park();
            }
        }
    })
}

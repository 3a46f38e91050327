//! A minimal spin `block_on` for fabrics whose futures complete by being polled (soft) and
//! for setup code. Index hot paths run on the poller's executor instead.
use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};

/// Polls `fut` until it is ready, calling `progress` between polls (e.g. to poll a CQ).
pub fn block_on_with<F: Future>(fut: F, mut progress: impl FnMut()) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        progress();
        core::hint::spin_loop();
    }
}

/// Polls `fut` until it is ready.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    block_on_with(fut, || {})
}

/// A future that returns `Pending` once, waking itself: a yield point for coroutines.
pub struct YieldNow(bool);

/// A future that is pending once, then ready: awaiting it lets the executor run other coroutines.
pub fn yield_now() -> YieldNow {
    YieldNow(false)
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: core::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

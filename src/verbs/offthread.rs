//! Blocking control-path work (an rdma_cm exchange) run on a helper thread, awaited as a
//! future: the poller thread's other coroutines keep running meanwhile, and the helper's
//! end wakes the waiting coroutine (a poller that parked is unparked by that wake).
//!
//! Used for the fence (`VerbsEndpoint::fence`): a connect request answered by a reject,
//! which blocks for up to the connection timeout. It happens once per dead lock holder, so
//! the thread it costs is off every hot path.
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// What the helper and the future share: the result once there, the waker to call then.
struct Shared<R> {
    result: Option<R>,
    waker: Option<Waker>,
}

/// The future of [`off_thread`].
pub(crate) struct OffThread<R> {
    shared: Arc<Mutex<Shared<R>>>,
}

/// Runs `f` on a new thread named `name` and returns a future of its result. If no thread
/// can be started, `f` runs here, blocking this thread as before.
pub(crate) fn off_thread<R: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> OffThread<R> {
    let shared = Arc::new(Mutex::new(Shared {
        result: None,
        waker: None,
    }));
    let theirs = shared.clone();
    // The closure is kept to run here if the thread cannot start.
    let f = Arc::new(Mutex::new(Some(f)));
    let ours = f.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let Some(f) = ours.lock().ok().and_then(|mut g| g.take()) else {
                return;
            };
            let r = f();
            let waker = match theirs.lock() {
                Ok(mut s) => {
                    s.result = Some(r);
                    s.waker.take()
                }
                Err(_) => None,
            };
            if let Some(w) = waker {
                w.wake();
            }
        });
    if spawned.is_err()
        && let Some(f) = f.lock().ok().and_then(|mut g| g.take())
        && let Ok(mut s) = shared.lock()
    {
        s.result = Some(f());
    }
    OffThread { shared }
}

impl<R> Future for OffThread<R> {
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        // A poisoned lock means the helper panicked while holding it: it never will answer.
        let mut s = match self.shared.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if let Some(r) = s.result.take() {
            return Poll::Ready(r);
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora_core::block_on::{block_on, yield_now};
    use remora_poller::executor::run_coroutines;
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    /// While one coroutine waits 100 ms for blocking work, its sibling on the same thread
    /// keeps running (it counts its steps until the wait ends); run inline, the sibling
    /// would not take a step during it.
    #[test]
    fn blocking_work_does_not_block_the_thread() {
        let (steps, done) = (Cell::new(0u64), Cell::new(false));
        let t = Instant::now();
        let waiter = async {
            let r = off_thread("remora-test", || {
                std::thread::sleep(Duration::from_millis(100));
                7u32
            })
            .await;
            done.set(true);
            r
        };
        let sibling = async {
            while !done.get() {
                steps.set(steps.get() + 1);
                yield_now().await;
            }
            0u32
        };
        let coros: Vec<Pin<Box<dyn Future<Output = u32> + '_>>> =
            vec![Box::pin(waiter), Box::pin(sibling)];
        assert_eq!(run_coroutines(coros), vec![7, 0]);
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert!(steps.get() > 100, "{} sibling steps", steps.get());
        // And under a spin block_on (a no-op waker): polled until done.
        assert_eq!(block_on(off_thread("remora-test", || 3u8)), 3);
    }
}

//! Coroutines joined into one sim task are polled when their own wait ends, not whenever a
//! sibling progresses: a coroutine asleep on a timer, or parked on a waker with a far timer
//! (as a delegation or lock waiter is), is not polled while its sibling makes 100 steps.
use remora_core::fabric::Endpoint;
use remora_poller::executor::join_all;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::Waker;

/// Polls of the coroutine that waits, for a wait of each kind.
fn waiter_polls(parked_on_waker: bool) -> u32 {
    let polls = Cell::new(0u32);
    let steps = Cell::new(0u32);
    let saved = RefCell::new(None::<Waker>);
    let mut sim = Sim::new(SimConfig::default()).unwrap();
    let c = sim.client(0).unwrap();
    sim.spawn_with(&c, 0, |ctx| {
        let (polls, steps, saved) = (&polls, &steps, &saved);
        async move {
            let ctx = &ctx;
            let waiter = async move {
                // 1 ms: far beyond the sibling's 100 steps of 100 ns.
                let mut timer = pin!(ctx.ep().timer(1_000_000));
                std::future::poll_fn(|cx| {
                    polls.set(polls.get() + 1);
                    if parked_on_waker {
                        // A waiter whose waker is never woken: only its timer ends the wait.
                        *saved.borrow_mut() = Some(cx.waker().clone());
                    }
                    timer.as_mut().poll(cx)
                })
                .await;
            };
            let stepper = async move {
                for _ in 0..100 {
                    ctx.sleep(100).await;
                    steps.set(steps.get() + 1);
                }
            };
            join_all(vec![
                Box::pin(waiter) as Pin<Box<dyn Future<Output = ()> + '_>>,
                Box::pin(stepper),
            ])
            .await;
        }
    });
    sim.run();
    assert_eq!(steps.get(), 100);
    polls.get()
}

#[test]
fn a_sleeping_coroutine_is_not_polled_while_its_sibling_steps() {
    // Once when it starts waiting, once when its timer fires.
    assert_eq!(waiter_polls(false), 2);
}

#[test]
fn a_parked_coroutine_is_not_polled_while_its_sibling_steps() {
    assert_eq!(waiter_polls(true), 2);
}

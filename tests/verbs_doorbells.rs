//! Doorbell batching across coroutines on the fake verbs device: posts waiting in the same
//! executor round go out as one chain per queue pair, in the order they were queued; a lone
//! post rings at once; a dropped queued post rings before it waits.
#![cfg(feature = "verbs")]

use remora::core::GlobalAddr;
use remora::core::block_on::block_on;
use remora::core::fabric::{Endpoint, QueuePair};
use remora::core::server::Echo;
use remora::poller::executor::run_coroutines;
use remora::verbs::{FakeEndpoint, FakeNode};
use std::future::Future;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

fn node(id: u16) -> Rc<FakeNode> {
    FakeNode::new(id, 4 << 20, 1 << 20, 64 << 10, Box::new(Echo)).unwrap()
}

#[test]
fn eight_coroutines_share_doorbells_and_keep_each_queue_pairs_order() {
    let ep = FakeEndpoint::connect(&[node(0), node(1)]).unwrap();
    let before = ep.stats();
    const ROUNDS: u64 = 200;
    let coros = (0..8u64)
        .map(|c| {
            let ep = &ep;
            async move {
                let n = (c % 2) as u16;
                let qp = ep.qp(n).unwrap();
                let mine = GlobalAddr::new(n, 8192 + 64 * c);
                // Every coroutine writes a shared word of its node and reads it back in one
                // batch: the chain keeps the batch's order, so the READ sees this WRITE
                // whatever the other coroutines queued around it.
                let shared = GlobalAddr::new(n, 4096);
                let mut img = [0u8; 8];
                for round in 0..ROUNDS {
                    let v = ((c << 32) | round).to_ne_bytes();
                    qp.write(mine, &v).await.unwrap();
                    qp.read(mine, &mut img).await.unwrap();
                    assert_eq!(img, v, "coroutine {c} round {round}");
                    let mut back = [0u8; 8];
                    let mut ops = [
                        remora::core::fabric::Op::Write {
                            local: &v,
                            remote: shared,
                        },
                        remora::core::fabric::Op::Read {
                            local: &mut back,
                            remote: shared,
                        },
                    ];
                    qp.post(&mut ops).await.unwrap();
                    assert_eq!(back, v, "coroutine {c} round {round}: order lost");
                }
            }
        })
        .collect();
    run_coroutines(coros);
    let d = ep.stats() - before;
    let posts = 8 * ROUNDS * 3;
    assert_eq!(d.completions, posts, "{d}");
    // Without batching every post rings its own doorbell (posts == doorbells).
    assert!(
        d.doorbells * 3 <= posts,
        "{} doorbells for {posts} posts: not batched ({d})",
        d.doorbells
    );
    assert!(d.polls_per_completion() <= 1.2, "{d}");
}

#[test]
fn a_lone_post_rings_at_once() {
    let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
    let qp = ep.qp(0).unwrap();
    let before = ep.stats();
    let mut buf = [0u8; 16];
    for _ in 0..10 {
        block_on(qp.read(GlobalAddr::new(0, 4096), &mut buf)).unwrap();
    }
    let d = ep.stats() - before;
    assert_eq!((d.doorbells, d.completions), (10, 10), "{d}");
}

#[test]
fn a_dropped_queued_post_rings_and_finishes() {
    let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
    let qp = ep.qp(0).unwrap();
    block_on(qp.write(GlobalAddr::new(0, 4096), &[9u8; 8])).unwrap();
    let before = ep.stats();
    let mut cx = Context::from_waker(Waker::noop());
    let mut a = [0u8; 8];
    let mut first = Box::pin(qp.read(GlobalAddr::new(0, 4096), &mut a));
    // The fake device completes at the doorbell, but a future resolves on a later poll.
    assert!(first.as_mut().poll(&mut cx).is_pending());
    assert_eq!((ep.stats() - before).doorbells, 1);
    let mut b = [0u8; 8];
    {
        let mut second = Box::pin(qp.read(GlobalAddr::new(0, 4096), &mut b));
        // Another post is waiting: this one is queued behind the round's chain, not rung.
        assert!(second.as_mut().poll(&mut cx).is_pending());
        assert_eq!((ep.stats() - before).doorbells, 1);
    }
    // Dropped while queued: it rang its doorbell and waited for its READ (whose result,
    // nobody's now, is not copied out).
    let d = ep.stats() - before;
    assert_eq!((d.doorbells, d.wrs), (2, 2), "{d}");
    assert!(matches!(first.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
    drop(first);
    assert_eq!(a, [9u8; 8]);
}

/// A release posted without a waiter (as Sherman's bare unlock) is settled before the
/// endpoint closes: `settle` posts one signaled request after outstanding detached ones and
/// waits for it (dropping the endpoint does the same), and posts nothing when none is
/// outstanding.
#[test]
fn settle_waits_for_detached_posts_and_only_then() {
    let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
    let qp = ep.qp(0).unwrap();
    let at = GlobalAddr::new(0, 8192);
    let one = 1u64.to_ne_bytes();
    block_on(qp.post_unsignaled(&mut [remora::core::fabric::Op::Write {
        local: &one,
        remote: at,
    }]))
    .unwrap();
    let before = ep.stats();
    assert_eq!(before.unsignaled, 1, "the release went out unsignaled");
    ep.settle();
    let d = ep.stats() - before;
    assert_eq!(
        (d.wrs, d.unsignaled),
        (1, 0),
        "one signaled request settles the detached one"
    );
    let after = ep.stats();
    ep.settle();
    assert_eq!(
        (ep.stats() - after).wrs,
        0,
        "nothing outstanding: nothing posted"
    );
    let mut back = [0u8; 8];
    block_on(qp.read(at, &mut back)).unwrap();
    assert_eq!(back, one);
}

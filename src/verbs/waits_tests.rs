//! Waits that used to wake themselves every round, on the fake device: a post that finds
//! no send-queue room, concurrent receive waits on one queue pair. Each test counts the
//! coroutine polls and fails when the wait polls every round.
use crate::verbs::{FakeEndpoint, FakeNode};
use remora_core::fabric::{Endpoint, QueuePair};
use remora_core::server::Echo;
use remora_layouts::{GlobalAddr, NodeId};
use remora_poller::executor::run_coroutines;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

fn node(id: NodeId) -> Rc<FakeNode> {
    FakeNode::new(id, 4 << 20, 1 << 20, 64 << 10, Box::new(Echo)).unwrap()
}

/// A future polled through a counter.
struct Counted<'c, F> {
    fut: Pin<Box<F>>,
    polls: &'c Cell<u64>,
}

impl<F: Future> Future for Counted<'_, F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.set(self.polls.get() + 1);
        self.fut.as_mut().poll(cx)
    }
}

/// 256 coroutines READ on one queue pair of 64 batch slots: each round 64 batches
/// complete and the rest of the coroutines wait for room. Queued for room and woken as
/// slots free, a coroutine is polled about twice per completion (once to finish and queue
/// its next READ, once to post it); when each waiting post drained the queue and woke
/// itself, all 192 waiting were polled every round as well: 4 polls per completion. Every
/// coroutine finishes (room goes in arrival order).
#[test]
fn posts_waiting_for_room_are_woken_when_it_returns() {
    const COROS: usize = 256;
    const READS: u64 = 40;
    let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
    let qp = ep.qp(0).unwrap();
    let polls = Cell::new(0u64);
    let coros: Vec<_> = (0..COROS)
        .map(|_| Counted {
            fut: Box::pin(async move {
                let mut b = [0u8; 64];
                for _ in 0..READS {
                    qp.read(GlobalAddr::new(0, 8192), &mut b).await.unwrap();
                }
            }),
            polls: &polls,
        })
        .collect();
    let s0 = ep.stats();
    run_coroutines(coros);
    let d = ep.stats() - s0;
    let reads = COROS as u64 * READS;
    assert_eq!(d.completions, reads, "{d}");
    let per = polls.get() as f64 / reads as f64;
    assert!(per <= 2.5, "{per:.2} coroutine polls per completion ({d})");
    assert!(!remora_poller::progress::run(), "a hook left registered");
}

/// Four coroutines wait for a message on one queue pair while a fifth makes 200 READs and
/// then sends four requests (the echo service answers each). Each receive wait keeps its
/// own waker and is woken by one arriving message: a few polls each. (Only the first wait's
/// waker was kept before; the other three woke themselves every round: hundreds of polls.)
#[test]
fn concurrent_receive_waits_are_each_woken_by_a_message() {
    const WAITS: usize = 4;
    let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
    let qp = ep.qp(0).unwrap();
    let (polls, got) = (Cell::new(0u64), Cell::new(0u32));
    let sent = Cell::new(false);
    let mut coros: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = (0..WAITS)
        .map(|_| {
            let (got, sent) = (&got, &sent);
            Box::pin(Counted {
                fut: Box::pin(async move {
                    let mut reply = [0u8; 64];
                    let r = qp.recv(&mut reply).await.unwrap();
                    assert!(sent.get(), "a reply before the request");
                    assert_eq!(reply[..r.len as usize], [7u8; 24]);
                    got.set(got.get() + 1);
                }),
                polls: &polls,
            }) as Pin<Box<dyn Future<Output = ()> + '_>>
        })
        .collect();
    coros.push(Box::pin(async {
        let mut img = [0u8; 64];
        for _ in 0..200 {
            qp.read(GlobalAddr::new(0, 8192), &mut img).await.unwrap();
        }
        sent.set(true);
        for _ in 0..WAITS {
            qp.send(&[7u8; 24]).await.unwrap();
        }
    }));
    run_coroutines(coros);
    assert_eq!(got.get(), WAITS as u32);
    assert!(
        polls.get() <= 3 * WAITS as u64,
        "{} polls of {WAITS} receive waits",
        polls.get()
    );
    assert!(!remora_poller::progress::run(), "a hook left registered");
}

/// A receive wait dropped after it was woken for a message passes the message on: the
/// other wait gets it (it would otherwise wait for the next arrival).
#[test]
fn a_dropped_woken_receive_wait_passes_its_message_on() {
    let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
    let qp = ep.qp(0).unwrap();
    let got = Cell::new(false);
    let first_done = Cell::new(false);
    let coros: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = vec![
        // Waits, then gives up (dropped) the round it is woken, without taking the message.
        Box::pin(async {
            let mut reply = [0u8; 64];
            let mut recv = Box::pin(qp.recv(&mut reply));
            let mut polled = 0;
            std::future::poll_fn(|cx| {
                polled += 1;
                if polled == 1 {
                    assert!(recv.as_mut().poll(cx).is_pending());
                    return Poll::Pending;
                }
                Poll::Ready(())
            })
            .await;
            drop(recv);
            first_done.set(true);
        }),
        Box::pin(async {
            let mut reply = [0u8; 64];
            let r = qp.recv(&mut reply).await.unwrap();
            assert_eq!(r.len, 24);
            got.set(true);
        }),
        Box::pin(async {
            let mut img = [0u8; 64];
            for _ in 0..20 {
                qp.read(GlobalAddr::new(0, 8192), &mut img).await.unwrap();
            }
            qp.send(&[7u8; 24]).await.unwrap();
        }),
    ];
    run_coroutines(coros);
    assert!(first_done.get() && got.get());
}

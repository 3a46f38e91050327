//! The post future: posts on first poll (or waits in the room queue, see `room.rs`), then
//! waits for its batch's completion (see `wake.rs`).
use super::VerbsQp;
use super::post::Mode;
use remora_core::fabric::{FabricError, Op};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

enum PostState {
    Start,
    /// Waiting for room with this ticket of the room queue (see `room.rs`).
    Blocked(u32),
    Posted(usize),
    Finished,
}

/// The future of [`VerbsQp`]'s [`QueuePair::post`](remora_core::fabric::QueuePair::post): posts
/// on first poll, then waits for its batch's completion (see `wake.rs`: it is woken by the
/// thread's progress hook when that reaps it, or, with no executor running the hook, it
/// polls for itself).
pub struct PostFuture<'q, 'a> {
    qp: &'q VerbsQp,
    ops: &'q mut [Op<'a>],
    state: PostState,
    /// The queue's `epoch` at its last poll.
    epoch: u32,
}

impl<'q, 'a> PostFuture<'q, 'a> {
    pub(super) fn new(qp: &'q VerbsQp, ops: &'q mut [Op<'a>]) -> Self {
        PostFuture {
            qp,
            ops,
            state: PostState::Start,
            epoch: 0,
        }
    }
}

impl Future for PostFuture<'_, '_> {
    type Output = Result<(), FabricError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let qp = this.qp;
        let cq = &*qp.raw.send;
        let mut fresh = false;
        let before = match this.state {
            PostState::Start => Some(None),
            PostState::Blocked(t) => Some(Some(t)),
            _ => None,
        };
        if let Some(ticket) = before {
            if this.ops.is_empty() {
                this.state = PostState::Finished;
                return Poll::Ready(Ok(()));
            }
            // Posts waiting for room go first: a new one queues behind them (see `room.rs`).
            let try_now = match ticket {
                None => !qp.room.busy() || !cq.hook_here(),
                Some(t) => {
                    qp.room.polled(t, cx.waker());
                    if cq.epoch.get() == this.epoch {
                        // Polled again and nobody drained the queue meanwhile (a spin
                        // `block_on`): drain it here, as the hook would.
                        cq.flush();
                        qp.progress();
                    }
                    true
                }
            };
            if try_now {
                match qp.start(this.ops, Mode::Wait) {
                    Err(e) => {
                        this.leave_room();
                        this.state = PostState::Finished;
                        return Poll::Ready(Err(e));
                    }
                    Ok(Some(slot)) => {
                        this.leave_room();
                        fresh = true;
                        this.state = PostState::Posted(slot);
                        qp.add_waiter();
                    }
                    Ok(None) => {}
                }
            }
            if !fresh {
                // No room yet (send queue or slots full, what held them rung): wait in the
                // room queue to be woken when a completion or a release returns room.
                if ticket.is_none() {
                    // (Joined only where the hook runs: an entry whose post wakes itself
                    // would hold the queue's head.)
                    let joined = if cq.hook_here() {
                        qp.room.join(cx.waker())
                    } else {
                        None
                    };
                    match joined {
                        Some(t) => {
                            this.state = PostState::Blocked(t);
                            // Counted as waiting, so that the hook drains the queue.
                            qp.add_waiter();
                            cq.place(qp.cq_index, qp);
                            // Room free now and promised to nobody comes to the queue.
                            qp.room_returned();
                        }
                        None => {
                            // No executor runs the hook (or the room queue is full): drain
                            // the queue, which returns room, and try again next poll.
                            qp.progress();
                            cx.waker().wake_by_ref();
                        }
                    }
                }
                this.epoch = cq.epoch.get();
                return Poll::Pending;
            }
        }
        let PostState::Posted(slot) = this.state else {
            return Poll::Ready(Err(FabricError::Unsupported {
                what: "a post future polled after it finished",
            }));
        };
        if !fresh && !qp.is_done(slot) && cq.epoch.get() == this.epoch {
            // Polled again, not done, and nobody drained the queue since its last poll: no
            // executor runs the thread's hook (a spin `block_on`, or one nested in a
            // coroutine while its executor waits for it). Do the hook's work: ring what is
            // queued, then reap.
            cq.flush();
            qp.progress();
        }
        if qp.is_done(slot) {
            this.state = PostState::Finished;
            qp.remove_waiter();
            return Poll::Ready(qp.finish(slot, this.ops));
        }
        this.epoch = cq.epoch.get();
        qp.wait_on(slot, cx.waker());
        if !cq.hook_here() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl PostFuture<'_, '_> {
    /// Leaves the room queue if it waits there (posted, failed, or dropped), passing on room
    /// it was woken for and did not take.
    #[inline(always)]
    fn leave_room(&mut self) {
        if let PostState::Blocked(t) = self.state {
            self.leave_room_at(t);
        }
    }

    #[cold]
    #[inline(never)]
    fn leave_room_at(&mut self, t: u32) {
        self.state = PostState::Start;
        let qp = self.qp;
        qp.remove_waiter();
        if qp.room.leave(t) {
            qp.room_returned();
        }
    }
}

impl Drop for PostFuture<'_, '_> {
    fn drop(&mut self) {
        self.leave_room();
        if let PostState::Posted(slot) = self.state {
            let qp = self.qp;
            if qp.is_queued(slot) {
                qp.ring();
            }
            // The NIC may still write the staging buffer or read the chain's data: wait for
            // the batch. Bounded: the transport's retry limits always end in a completion.
            while !qp.is_done(slot) {
                qp.progress();
                std::hint::spin_loop();
            }
            qp.release(slot);
            qp.remove_waiter();
        }
    }
}

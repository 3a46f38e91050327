//! Posts waiting for send-queue room: a post that finds its queue pair's slots or send
//! queue full waits in a FIFO queue of wakers (a fixed ring of [`ROOM_WAITS`] per queue
//! pair: no allocation) and is woken when room returns (a batch released its slot, a
//! completion returned send-queue credit), instead of draining the completion queue and
//! waking itself every round.
//!
//! Room is handed out in arrival order: while posts wait, a post that did not wait yet
//! queues behind them (else the coroutines whose batches just completed would take every
//! freed slot at once, round after round, and the queued ones would wait forever). Each
//! time room returns, the oldest waiting posts are woken, as many as there are free slots
//! not already promised to a woken one; a woken post that still finds no room (the send
//! queue, not the slots, was full) waits again and is woken by the next return.
//!
//! While a post waits for room it counts among its completion queue's waiters, so the
//! thread's progress hook drains the queue (the completions that return the room) even when
//! no post waits for a batch (the room may be held by detached, unsignaled requests).
use super::{SLOTS, SQ_DEPTH, VerbsQp};
use std::cell::Cell;
use std::task::Waker;

/// Posts one queue pair queues for room (beyond: they drain and wake themselves).
pub(super) const ROOM_WAITS: usize = 256;

/// The state of one entry of the room queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// Free (its post left, or never used).
    Gone,
    /// Its post waits to be woken.
    Waiting,
    /// Woken for room, not yet polled.
    Woken,
}

/// The room queue of one queue pair: tickets `head..tail`, entry `t % ROOM_WAITS`.
pub(super) struct RoomQueue {
    head: Cell<u32>,
    tail: Cell<u32>,
    /// Entries woken and not yet polled (the free slots promised to them).
    woken: Cell<u32>,
    /// Where waking resumes: every entry in `head..scan` is woken or gone (so a wake does
    /// not walk the woken entries again at every release).
    scan: Cell<u32>,
    state: [Cell<Entry>; ROOM_WAITS],
    wakers: [Cell<Option<Waker>>; ROOM_WAITS],
}

impl RoomQueue {
    pub(super) const fn new() -> RoomQueue {
        RoomQueue {
            head: Cell::new(0),
            tail: Cell::new(0),
            woken: Cell::new(0),
            scan: Cell::new(0),
            state: [const { Cell::new(Entry::Gone) }; ROOM_WAITS],
            wakers: [const { Cell::new(None) }; ROOM_WAITS],
        }
    }

    /// Whether posts wait for room (a new post queues behind them).
    #[inline]
    pub(super) fn busy(&self) -> bool {
        self.head.get() != self.tail.get()
    }

    fn at(t: u32) -> usize {
        t as usize % ROOM_WAITS
    }

    /// Keeps `w` in entry `t` (no clone when it wakes the same task).
    fn store(&self, t: u32, w: &Waker) {
        let cell = &self.wakers[Self::at(t)];
        match cell.take() {
            Some(old) if old.will_wake(w) => cell.set(Some(old)),
            old => {
                cell.set(Some(w.clone()));
                drop(old);
            }
        }
    }

    /// A ticket at the tail for a post waking `w`; None when the ring is full.
    pub(super) fn join(&self, w: &Waker) -> Option<u32> {
        let t = self.tail.get();
        if t.wrapping_sub(self.head.get()) as usize >= ROOM_WAITS {
            return None;
        }
        self.tail.set(t.wrapping_add(1));
        self.state[Self::at(t)].set(Entry::Waiting);
        self.store(t, w);
        Some(t)
    }

    /// The post holding ticket `t` was polled: true when it was woken for room (it should
    /// try to post now). Its entry is waiting again until it [`Self::leave`]s or is woken.
    pub(super) fn polled(&self, t: u32, w: &Waker) -> bool {
        let e = &self.state[Self::at(t)];
        let woken = e.get() == Entry::Woken;
        if woken {
            self.woken.set(self.woken.get() - 1);
        }
        e.set(Entry::Waiting);
        self.store(t, w);
        // Waiting again: wakes resume from it at the latest.
        let h = self.head.get();
        if t.wrapping_sub(h) < self.scan.get().wrapping_sub(h) {
            self.scan.set(t);
        }
        woken
    }

    /// The post holding ticket `t` leaves the queue (posted, failed or dropped). Returns
    /// whether it had been woken and not polled since (its promised room is then passed
    /// on by the caller).
    pub(super) fn leave(&self, t: u32) -> bool {
        let e = &self.state[Self::at(t)];
        let woken = e.get() == Entry::Woken;
        if woken {
            self.woken.set(self.woken.get() - 1);
        }
        e.set(Entry::Gone);
        // Gone entries at the head are dropped from the queue.
        let (mut h, tail) = (self.head.get(), self.tail.get());
        while h != tail && self.state[Self::at(h)].get() == Entry::Gone {
            h = h.wrapping_add(1);
        }
        self.head.set(h);
        if self.scan.get().wrapping_sub(h) > tail.wrapping_sub(h) {
            // The cursor fell behind the head.
            self.scan.set(h);
        }
        woken
    }

    /// Wakes up to `budget` of the oldest waiting posts.
    fn wake(&self, mut budget: u32) {
        let (mut t, tail) = (self.scan.get(), self.tail.get());
        while budget > 0 && t != tail {
            let e = &self.state[Self::at(t)];
            if e.get() == Entry::Waiting {
                e.set(Entry::Woken);
                self.woken.set(self.woken.get() + 1);
                budget -= 1;
                if let Some(w) = self.wakers[Self::at(t)].take() {
                    w.wake_by_ref();
                    self.wakers[Self::at(t)].set(Some(w));
                }
            }
            t = t.wrapping_add(1);
        }
        self.scan.set(t);
    }
}

impl VerbsQp {
    /// Room returned (a slot freed, send-queue credit back): wakes as many of the oldest
    /// posts waiting for room as there are free slots not yet promised to a woken one.
    #[inline]
    pub(super) fn room_returned(&self) {
        let q = &self.room;
        if !q.busy() || self.sq_used.get() >= SQ_DEPTH {
            return;
        }
        let free = self.free.get().count_ones().min(SLOTS as u32);
        let budget = free.saturating_sub(q.woken.get());
        if budget > 0 {
            q.wake(budget);
        }
    }
}

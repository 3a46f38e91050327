//! Submission slots: where an application thread leaves an operation for a poller and
//! finds its result.
//!
//! Each poller has a fixed array of slots, allocated when the node starts, each with key and
//! value buffers of the node's maximum sizes. A slot moves FREE -> QUEUED (an application
//! thread filled it and queued its number) -> DONE (the poller wrote the result) -> FREE
//! (the application took the result). An application future dropped while its slot is
//! QUEUED marks it ABANDONED: the poller still runs the operation to its end (so an index
//! never stops halfway through a write, holding a lock), then frees the slot itself and
//! discards the result.
use super::error::Error;
use super::index::{NodeState, Opening};
use super::ring::Ring;
use remora_core::catfish::{Entry, Rect};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Waker;
use std::thread::Thread;
use std::time::Duration;

const FREE: u8 = 0;
const QUEUED: u8 = 1;
const DONE: u8 = 2;
const ABANDONED: u8 = 3;

/// What a slot asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cmd {
    Open(Opening),
    Upsert,
    Update,
    Get,
    Delete,
    /// Up to `limit` pairs from the key, encoded into the value buffer.
    Scan {
        limit: usize,
    },
    /// A spatial insert of `rect` with `value`.
    SpatialInsert {
        rect: Rect,
        value: u64,
    },
    /// A spatial delete of the entry `rect` with `value`.
    SpatialDelete {
        rect: Rect,
        value: u64,
    },
    /// The entries intersecting `rect`, into the slot's hits (at most `limit` are given to
    /// the application).
    SpatialSearch {
        rect: Rect,
        limit: usize,
    },
}

/// What an operation returned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Unit,
    Bool(bool),
    Len(Option<usize>),
    /// Pairs visited by a scan.
    Count(usize),
}

/// A slot's request and result. Only one side touches it at a time (the application thread
/// before QUEUED and after DONE, the poller in between); the mutex is therefore never
/// contended, and keeps that hand-over free of `unsafe`.
pub(crate) struct SlotData {
    pub(crate) cmd: Cmd,
    pub(crate) index: usize,
    pub(crate) key: Box<[u8]>,
    pub(crate) key_len: usize,
    /// The value written, the value read, or a scan's pairs.
    pub(crate) value: Box<[u8]>,
    pub(crate) value_len: usize,
    /// A spatial search's hits (grown to the largest search the slot has run, then reused).
    pub(crate) hits: Vec<Entry>,
    pub(crate) result: Result<Outcome, Error>,
}

pub(crate) struct Slot {
    state: AtomicU8,
    data: Mutex<SlotData>,
    waker: Mutex<Option<Waker>>,
}

impl Slot {
    pub(crate) fn data(&self) -> MutexGuard<'_, SlotData> {
        // A poisoned lock means a task panicked with it; the poller has recorded that as
        // the slot's result, and the data is plain bytes: go on.
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }

    /// Registers the waker to wake when the slot is DONE (replacing an older one).
    pub(crate) fn set_waker(&self, w: &Waker) {
        let mut g = self.waker.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *g {
            Some(old) if old.will_wake(w) => {}
            slot => *slot = Some(w.clone()),
        }
    }
}

/// A poller's thread, for whoever wakes it: a submitter, or another thread waking one of
/// its tasks.
#[derive(Default)]
pub(crate) struct Doze {
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
    /// Times a task's waker (on another thread, or a timer) unparked the sleeping poller.
    pub(crate) task_wakes: AtomicU64,
}

impl Doze {
    /// After making work visible to the poller: unparks it if it sleeps (one load when it
    /// does not: no syscall on the hot path). True if it slept.
    pub(crate) fn wake(&self) -> bool {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
            return true;
        }
        false
    }
}

/// One poller's slots and queues, shared by it and the application threads.
pub(crate) struct PollerShared {
    pub(crate) slots: Box<[Slot]>,
    free: Ring,
    pub(crate) submitted: Ring,
    /// Futures waiting for a free slot.
    waiters: Mutex<Vec<Waker>>,
    has_waiters: AtomicBool,
    /// The poller's thread and whether it sleeps, shared with its tasks' wakers.
    pub(crate) doze: Arc<Doze>,
    pub(crate) stop: AtomicBool,
    pub(crate) completed: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    /// Times the poller parked (idle, nothing queued).
    pub(crate) parks: AtomicU64,
    /// Times a submitter unparked the poller.
    pub(crate) wakes: AtomicU64,
    /// Times the poller parked while it had operations under way, every one waiting (on a
    /// timer, or on another thread's wake).
    pub(crate) busy_parks: AtomicU64,
    /// Each open index's per-compute-node state, by index id, shared by every poller of the
    /// node (set by `ComputeNode::open` before the pollers open their handles).
    pub(crate) states: Arc<[OnceLock<NodeState>]>,
}

impl PollerShared {
    pub(crate) fn new(
        depth: usize,
        max_key: usize,
        value_buf: usize,
        states: Arc<[OnceLock<NodeState>]>,
    ) -> PollerShared {
        let free = Ring::new(depth);
        for i in 0..depth {
            free.push(i as u32);
        }
        PollerShared {
            slots: (0..depth)
                .map(|_| Slot {
                    state: AtomicU8::new(FREE),
                    data: Mutex::new(SlotData {
                        cmd: Cmd::Get,
                        index: 0,
                        key: vec![0; max_key].into_boxed_slice(),
                        key_len: 0,
                        value: vec![0; value_buf].into_boxed_slice(),
                        value_len: 0,
                        hits: Vec::new(),
                        result: Ok(Outcome::Unit),
                    }),
                    waker: Mutex::new(None),
                })
                .collect(),
            free,
            submitted: Ring::new(depth),
            waiters: Mutex::new(Vec::with_capacity(64)),
            has_waiters: AtomicBool::new(false),
            doze: Arc::new(Doze::default()),
            stop: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            parks: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            busy_parks: AtomicU64::new(0),
            states,
        }
    }

    /// A free slot's number, if any.
    pub(crate) fn try_acquire(&self) -> Option<u32> {
        self.free.pop()
    }

    /// Slots free now (a snapshot).
    pub(crate) fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Wakes `w` when a slot is freed (then tries again: a slot freed meanwhile is not
    /// missed, since every waiter is woken at each free).
    pub(crate) fn wait_for_slot(&self, w: &Waker) {
        let mut g = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if !g.iter().any(|o| o.will_wake(w)) {
            g.push(w.clone());
        }
        self.has_waiters.store(true, Ordering::SeqCst);
    }

    /// Queues filled slot `i` for the poller.
    pub(crate) fn submit(&self, i: u32) {
        self.slots[i as usize]
            .state
            .store(QUEUED, Ordering::Release);
        let pushed = self.submitted.push(i);
        debug_assert!(pushed, "the submission ring holds every slot");
        if self.doze.wake() {
            self.wakes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The application gave up on slot `i` before its result: true if the poller will free
    /// it (it is still running), false if the result is there and the caller must free it.
    pub(crate) fn abandon(&self, i: u32) -> bool {
        let s = &self.slots[i as usize];
        s.state
            .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Returns slot `i` to the free list and wakes every future waiting for one.
    pub(crate) fn release(&self, i: u32) {
        let s = &self.slots[i as usize];
        *s.waker.lock().unwrap_or_else(|p| p.into_inner()) = None;
        s.state.store(FREE, Ordering::Release);
        let pushed = self.free.push(i);
        debug_assert!(pushed, "the free ring holds every slot");
        fence(Ordering::SeqCst);
        if self.has_waiters.load(Ordering::SeqCst) {
            let mut g = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            self.has_waiters.store(false, Ordering::SeqCst);
            for w in g.drain(..) {
                w.wake();
            }
        }
    }

    /// The poller finished slot `i`'s operation: wakes its future, or frees the slot if the
    /// future is gone.
    pub(crate) fn complete(&self, i: u32) {
        let s = &self.slots[i as usize];
        self.completed.fetch_add(1, Ordering::Relaxed);
        if s.state.swap(DONE, Ordering::AcqRel) == ABANDONED {
            self.abandoned.fetch_add(1, Ordering::Relaxed);
            self.release(i);
            return;
        }
        let w = s.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = w {
            w.wake();
        }
    }

    /// Called once by the poller thread, so submitters can unpark it.
    pub(crate) fn set_thread(&self) {
        let _ = self.doze.thread.set(std::thread::current());
    }

    /// Parks the poller until a submission or a stop (or 10 ms, a safety net).
    pub(crate) fn sleep(&self) {
        self.doze.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.submitted.is_empty() && !self.stop.load(Ordering::SeqCst) {
            self.parks.fetch_add(1, Ordering::Relaxed);
            std::thread::park_timeout(Duration::from_millis(10));
        }
        self.doze.sleeping.store(false, Ordering::SeqCst);
    }

    /// Parks the poller while its operations under way all wait (a stop waits for them too):
    /// until a submission, a wake of one of its tasks (`nothing_ready` turns false: the waker pushed it, then
    /// called [`Doze::wake`]), or `timeout` (its next timer; at most 10 ms, a safety net).
    pub(crate) fn sleep_busy(&self, timeout: Duration, nothing_ready: impl FnOnce() -> bool) {
        self.doze.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.submitted.is_empty() && nothing_ready() {
            self.busy_parks.fetch_add(1, Ordering::Relaxed);
            std::thread::park_timeout(timeout.min(Duration::from_millis(10)));
        }
        self.doze.sleeping.store(false, Ordering::SeqCst);
    }

    /// Asks the poller to stop once every queued operation has finished.
    pub(crate) fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.doze.thread.get() {
            t.unpark();
        }
    }
}

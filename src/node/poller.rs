//! A poller thread: runs the operations of its submission slots as coroutines on its own
//! endpoint, DPDK style.
//!
//! Each slot has one task place, allocated (pinned, in the fabric's registered frame memory
//! on verbs) when the poller starts; a submitted slot
//! starts a task there, and the task is dropped in place when it finishes, so the loop
//! allocates nothing per operation. A ready list holds the tasks to poll: a task is polled
//! only after its waker was called (soft's yields wake themselves when they return
//! `Pending`; on verbs no future does: once per round, before the ready tasks are polled,
//! the thread's progress hooks ([`remora_poller::progress`]) drain its completion queues and
//! wake the tasks whose work requests finished), and a woken task goes to the back, so the
//! tasks waiting on the fabric take turns. With nothing to run, the poller spins for a
//! while, then parks until the next submission ([`Idle`]); while hooks are registered (verbs
//! work in flight, which nothing would wake it for) it keeps polling them instead.
use super::error::Error;
use super::index::PerThread;
use super::lives::{Gate, Life};
use super::ring::Ring;
use super::slot::{Cmd, Doze, Outcome, PollerShared, Slot};
use super::spin::{Patience, Spin};
use remora_core::fabric::Endpoint;
use remora_poller::frames::Frames;
use std::cell::{Cell, OnceCell};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// How many indexes one compute node can open.
pub(crate) const MAX_INDEXES: usize = 32;

/// Bytes of a scanned pair's header in the value buffer: key length (u16), value length (u32).
pub(crate) const PAIR_HEADER: usize = 6;

/// The ready list: task numbers to poll, each at most once in it.
struct Ready {
    ring: Ring,
    queued: Box<[AtomicBool]>,
    doze: Arc<Doze>,
}

impl Ready {
    fn push(&self, i: usize) {
        if !self.queued[i].swap(true, Ordering::AcqRel) {
            let pushed = self.ring.push(i as u32);
            debug_assert!(pushed, "the ready ring holds every task");
        }
    }

    /// A task's waker: queues it, and unparks the poller if it sleeps.
    fn wake(&self, i: usize) {
        self.push(i);
        if self.doze.wake() {
            self.doze.task_wakes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Task `i`'s waker: puts it on the ready list.
struct TaskWaker {
    ready: Arc<Ready>,
    i: usize,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.ready.wake(self.i);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.wake(self.i);
    }
}

/// One operation, start to end: reads the slot's request, runs it, writes the result.
///
/// The slot's data lock is held across the operation's awaits on purpose: by the slot
/// protocol nobody else takes it until the poller marks the slot DONE (after this task
/// ends), and this poller's other tasks hold other slots' locks.
#[allow(clippy::await_holding_lock)]
pub(crate) async fn task<'a, E: Endpoint>(
    ep: &'a E,
    handles: &'a [OnceCell<PerThread<'a, E>>],
    life: &'a Life,
    slot: &'a Slot,
    depth: usize,
) {
    let states = &life.states[..];
    let mut g = slot.data();
    let d = &mut *g;
    let handle = handles.get(d.index).and_then(OnceCell::get);
    let r = match (d.cmd, handle) {
        (Cmd::Open(cfg), _) => {
            let state = states.get(d.index).and_then(|s| s.get());
            match PerThread::open(ep, &cfg, state, depth).await {
                Ok(h) => {
                    if let Some(place) = handles.get(d.index) {
                        let _ = place.set(h);
                    }
                    life.opened(d.index, cfg);
                    Ok(Outcome::Unit)
                }
                Err(e) => Err(e),
            }
        }
        (_, None) => Err(Error::Config(format!("no index {} is open", d.index))),
        (Cmd::Upsert, Some(h)) => h
            .upsert(&d.key[..d.key_len], &d.value[..d.value_len])
            .await
            .map(|()| Outcome::Unit),
        (Cmd::Update, Some(h)) => h
            .update(&d.key[..d.key_len], &d.value[..d.value_len])
            .await
            .map(Outcome::Bool),
        (Cmd::Get, Some(h)) => h
            .get(&d.key[..d.key_len], &mut d.value)
            .await
            .map(Outcome::Len),
        (Cmd::Delete, Some(h)) => h.delete(&d.key[..d.key_len]).await.map(Outcome::Bool),
        (Cmd::SpatialInsert { rect, value }, Some(h)) => match h.spatial() {
            Ok(c) => c.insert(rect, value).await.map(|()| Outcome::Unit),
            Err(e) => Err(e),
        },
        (Cmd::SpatialDelete { rect, value }, Some(h)) => match h.spatial() {
            Ok(c) => c.delete(rect, value).await.map(Outcome::Bool),
            Err(e) => Err(e),
        },
        (Cmd::SpatialSearch { rect, .. }, Some(h)) => {
            d.hits.clear();
            match h.spatial() {
                Ok(c) => c
                    .search(rect, &mut d.hits)
                    .await
                    .map(|()| Outcome::Count(d.hits.len())),
                Err(e) => Err(e),
            }
        }
        (Cmd::Scan { limit }, Some(h)) => {
            let (key, buf) = (&d.key[..d.key_len], &mut d.value[..]);
            let mut at = 0;
            let mut overflow = None;
            let n = h
                .scan(key, limit, &mut |k, v| {
                    let need = PAIR_HEADER + k.len() + v.len();
                    if overflow.is_some() || at + need > buf.len() || k.len() > u16::MAX as usize {
                        overflow.get_or_insert(need);
                        return;
                    }
                    buf[at..at + 2].copy_from_slice(&(k.len() as u16).to_le_bytes());
                    buf[at + 2..at + 6].copy_from_slice(&(v.len() as u32).to_le_bytes());
                    buf[at + 6..at + 6 + k.len()].copy_from_slice(k);
                    buf[at + 6 + k.len()..at + need].copy_from_slice(v);
                    at += need;
                })
                .await;
            d.value_len = at;
            match (n, overflow) {
                (Err(e), _) => Err(e),
                (Ok(_), Some(need)) => Err(Error::ValueTooLong {
                    len: need - PAIR_HEADER,
                    max: buf.len() - PAIR_HEADER,
                }),
                (Ok(n), None) => Ok(Outcome::Count(n)),
            }
        }
    };
    if r.as_ref().is_err_and(Error::is_connection_lost) {
        life.lost.set(true);
    }
    d.result = r;
}

/// How [`drive`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Asked to stop, with nothing queued or running.
    Stopped,
    /// A task lost the connection (`lost`): it admitted nothing since and every task
    /// started before has finished.
    Lost,
}

/// The loop: admits submissions, polls ready tasks, completes finished ones, until asked to
/// stop or until a task sets `lost`. With a `gate`, it holds it while it runs tasks (never
/// while it spins or sleeps idle).
pub(crate) fn drive<F: Future<Output = ()>>(
    shared: &PollerShared,
    patience: Patience,
    gate: Option<&Gate>,
    lost: &Cell<bool>,
    mut start: impl FnMut(usize) -> F,
) -> End {
    let n = shared.slots.len();
    let ready = Arc::new(Ready {
        ring: Ring::new(n),
        queued: (0..n).map(|_| AtomicBool::new(false)).collect(),
        doze: shared.doze.clone(),
    });
    // The soft fabric's pauses wait on this thread's timer list, fired below.
    let _timers = remora_poller::soft::timer::DriveTimers::start();
    let wakers: Vec<Waker> = (0..n)
        .map(|i| {
            Waker::from(Arc::new(TaskWaker {
                ready: ready.clone(),
                i,
            }))
        })
        .collect();
    // In the thread's frame memory when its fabric installed one (verbs: registered with
    // the NIC, so what a task READs into is written in place), else on the heap.
    let mut tasks: Frames<Option<F>> = Frames::new((0..n).map(|_| None).collect());
    let mut live = 0usize;
    let mut idle = Idle::new(patience);
    let _driving = remora_poller::progress::Driving::start();
    loop {
        let mut worked = false;
        if lost.get() && live == 0 {
            return End::Lost;
        }
        let admit = !lost.get() && !shared.submitted.is_empty();
        if !admit && ready.ring.is_empty() {
            if shared.stop.load(Ordering::SeqCst) && shared.submitted.is_empty() && live == 0 {
                return End::Stopped;
            }
            if live > 0 {
                // Every task waits: on its fabric's completions (drained here by the
                // progress hooks, which wake the tasks they finish), on a timer (fired here
                // once due), or on a wake from another thread (a lock's hand-over). With
                // hooks registered, poll them again; else spin a bounded time, then sleep
                // until the next timer or that wake.
                let polling = {
                    let _gate = gate.map(Gate::enter);
                    remora_poller::progress::run()
                };
                let next = remora_poller::soft::timer::fire_due();
                if ready.ring.is_empty() {
                    if polling {
                        std::hint::spin_loop();
                    } else {
                        idle.wait_busy(shared, next, || ready.ring.is_empty());
                    }
                }
            } else {
                idle.wait(shared);
            }
            continue;
        }
        let _gate = gate.map(Gate::enter);
        // A lost connection admits nothing more: what is queued runs after the reconnect.
        while !lost.get()
            && let Some(i) = shared.submitted.pop()
        {
            let i = i as usize;
            tasks.get(i).set(Some(start(i)));
            live += 1;
            ready.push(i);
            worked = true;
        }
        // The fabric's completions first: they put the tasks they finish on the ready list.
        remora_poller::progress::run();
        // One round: the tasks ready now (a task woken during the round waits for the next).
        for _ in 0..ready.ring.len() {
            let Some(i) = ready.ring.pop() else { break };
            let i = i as usize;
            ready.queued[i].store(false, Ordering::Release);
            let mut place = tasks.get(i);
            let Some(fut) = place.as_mut().as_pin_mut() else {
                continue; // a stale wake of a finished task
            };
            worked = true;
            let mut cx = Context::from_waker(&wakers[i]);
            let polled = catch_unwind(AssertUnwindSafe(|| fut.poll(&mut cx)));
            let finished = match polled {
                Ok(Poll::Pending) => false,
                Ok(Poll::Ready(())) => true,
                Err(_) => {
                    log::error!("remora: an index operation panicked on its poller");
                    shared.slots[i].data().result = Err(Error::Panicked);
                    true
                }
            };
            if finished {
                // Dropping a panicked task may panic again: contain it too.
                let _ = catch_unwind(AssertUnwindSafe(|| place.set(None)));
                live -= 1;
                shared.complete(i as u32);
            }
        }
        if worked {
            idle.busy();
        }
    }
}

/// How a poller with nothing to run waits: it spins (no syscall: a submission is seen at
/// once) for at most `patience.spins` empty turns and an adaptive [`Spin`] budget of at most
/// `patience.spin_for` ([`super::spin::SPIN_AT_MOST`] by default), then parks until a
/// submitter wakes it (one futex wake). A poller whose operations all wait (on a timer, or
/// on another thread: a lock holder's hand-over) spins and parks the same way, and is woken
/// by the wake it waits for or at its next timer ([`Idle::wait_busy`]).
///
/// Spinning pollers were the cause of slow single operations on an oversubscribed host.
/// Pollers that spun 100 000 empty turns after each operation (a millisecond or more of
/// CPU) were preempted, and an operation then waited in the run queue for its poller's next
/// turn. Measured with `examples/node_latency.rs` beside two busy loops (load 23), one
/// thread's Sherman upserts through 2 pollers took 0.3-4.3 ms (soft) and 4.6-13 ms (fake
/// verbs) per operation on average, against 22-36 and 27-200 µs through 1. With this spin
/// they take 17-30 and 42-65 µs (10-81 and 23-46 µs through 1). The same held for a poller
/// whose tasks all waited (4 threads' upserts contending for one Sherman leaf, their lock
/// back-offs soft pauses that yielded until due): it polled clocks until preempted.
pub(crate) struct Idle {
    limit: u32,
    turns: u32,
    spin: Spin,
    /// It parked, and nothing came since: a park's safety-net timeout parks again at once.
    parked: bool,
}

impl Idle {
    /// Spins at most `patience.spins` empty turns per wait (`u32::MAX`: spins for ever,
    /// never parks, for a dedicated core) and at most `patience.spin_for`.
    pub(crate) fn new(patience: Patience) -> Idle {
        Idle {
            limit: patience.spins,
            turns: 0,
            spin: Spin::new(patience.spin_for),
            parked: false,
        }
    }

    /// Work was found: the next idle turn starts a new wait.
    pub(crate) fn busy(&mut self) {
        self.spin.seen();
        self.turns = 0;
        self.parked = false;
    }

    /// One turn of a wait: true to spin again, false when the caller should sleep.
    fn spin_again(&mut self) -> bool {
        if self.limit == u32::MAX {
            std::hint::spin_loop();
            return true;
        }
        if !self.parked && self.turns < self.limit {
            self.turns += 1;
            if self.spin.keep_spinning() {
                return true;
            }
        }
        if self.spin.waiting() {
            self.spin.slept();
        }
        self.parked = true;
        false
    }

    /// One idle turn: spins once, or parks until the next submission (or a stop).
    pub(crate) fn wait(&mut self, shared: &PollerShared) {
        if !self.spin_again() {
            shared.sleep();
        }
    }

    /// One turn with operations under way, none ready: spins once, or parks until one of
    /// them is woken, a submission, or `next` (the next timer's deadline, in
    /// [`remora_poller::clock::monotonic_ns`]).
    pub(crate) fn wait_busy(
        &mut self,
        shared: &PollerShared,
        next: Option<u64>,
        nothing_ready: impl FnOnce() -> bool,
    ) {
        if self.spin_again() {
            return;
        }
        let timeout = next.map_or(std::time::Duration::MAX, |at| {
            std::time::Duration::from_nanos(at.saturating_sub(remora_poller::clock::monotonic_ns()))
        });
        if !timeout.is_zero() {
            shared.sleep_busy(timeout, nothing_ready);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATIENT: Patience = Patience {
        spins: 1,
        spin_for: super::super::spin::SPIN_AT_MOST,
    };

    /// Tasks run as coroutines on the ready list: a task woken by its own waker is polled
    /// again after the others, and every finished task completes its slot.
    #[test]
    fn ready_list_interleaves_and_completes() {
        let shared = PollerShared::new(4, 8, 8, Arc::from([]));
        let log = std::cell::RefCell::new(Vec::new());
        for i in 0..3 {
            let s = shared.try_acquire().unwrap();
            assert_eq!(s, i);
            shared.submit(s);
        }
        shared.request_stop();
        let lost = Cell::new(false);
        let end = drive(&shared, PATIENT, None, &lost, |i| {
            let log = &log;
            async move {
                for step in 0..2 {
                    log.borrow_mut().push((i, step));
                    remora_core::block_on::yield_now().await;
                }
            }
        });
        assert_eq!(end, End::Stopped);
        assert_eq!(
            *log.borrow(),
            vec![(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
        );
        assert!((0..3).all(|i| shared.slots[i].is_done()));
        assert_eq!(shared.completed.load(Ordering::Relaxed), 3);
    }

    /// A pending task is polled again only once its waker is called (here from another
    /// thread, 20 ms later), not round-robin while it waits.
    #[test]
    fn a_task_is_polled_only_when_woken() {
        let shared = PollerShared::new(2, 8, 8, Arc::from([]));
        let polls = std::cell::Cell::new(0u32);
        let s = shared.try_acquire().unwrap();
        shared.submit(s);
        shared.request_stop();
        std::thread::scope(|sc| {
            let lost = Cell::new(false);
            drive(&shared, PATIENT, None, &lost, |_| {
                let polls = &polls;
                std::future::poll_fn(move |cx| {
                    polls.set(polls.get() + 1);
                    if polls.get() > 1 {
                        return Poll::Ready(());
                    }
                    let w = cx.waker().clone();
                    sc.spawn(move || {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        w.wake();
                    });
                    Poll::Pending
                })
            });
        });
        assert_eq!(polls.get(), 2, "polled once, then once per wake");
    }

    /// A poller whose only task waits on another thread parks (after its bounded spin) and
    /// is unparked by that thread's wake, instead of spinning until the wake comes: the
    /// counters say it parked with the task under way and that the task's waker woke it.
    #[test]
    fn a_poller_whose_tasks_all_wait_parks_until_their_wake() {
        let shared = PollerShared::new(2, 8, 8, Arc::from([]));
        shared.set_thread();
        let s = shared.try_acquire().unwrap();
        shared.submit(s);
        shared.request_stop();
        let woke = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|sc| {
            let lost = Cell::new(false);
            let woke = &woke;
            drive(&shared, PATIENT, None, &lost, |_| {
                std::future::poll_fn(move |cx| {
                    if woke.load(Ordering::Acquire) {
                        return Poll::Ready(());
                    }
                    let w = cx.waker().clone();
                    sc.spawn(move || {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        woke.store(true, Ordering::Release);
                        w.wake();
                    });
                    Poll::Pending
                })
            });
        });
        let parks = shared.busy_parks.load(Ordering::Relaxed);
        let wakes = shared.doze.task_wakes.load(Ordering::Relaxed);
        assert!(parks >= 1, "the poller never parked while its task waited");
        assert!(
            wakes >= 1,
            "no wake reached the parked poller ({parks} parks)"
        );
    }

    /// A task in a soft pause (a lock back-off, a lease timer) leaves the poller asleep
    /// until the pause is due: it parks, and the pause still ends on time.
    #[test]
    fn a_soft_pause_lets_its_poller_sleep_until_due() {
        let shared = PollerShared::new(2, 8, 8, Arc::from([]));
        shared.set_thread();
        let s = shared.try_acquire().unwrap();
        shared.submit(s);
        shared.request_stop();
        let lost = Cell::new(false);
        let t = std::time::Instant::now();
        drive(&shared, PATIENT, None, &lost, |_| {
            remora_poller::soft::timer::pause(5_000_000)
        });
        let took = t.elapsed();
        assert!(took >= std::time::Duration::from_millis(5), "{took:?}");
        let parks = shared.busy_parks.load(Ordering::Relaxed);
        assert!(
            parks >= 1,
            "the poller spun through a 5 ms pause ({took:?})"
        );
    }
}

//! The run-to-completion executor: worker threads pinned to cores, each busy-polling its
//! coroutines.
//!
//! DPDK-style: a worker owns its endpoint (queue pairs) and runs N index operations as
//! coroutines (futures). Each round it polls, in ascending index, every unfinished coroutine
//! whose waker was woken since its last poll; a coroutine runs until it waits, then the next
//! one runs. Each coroutine has a waker of its own, built once from its index into the
//! thread's coroutine table (a wake-up sets that coroutine's flag: no allocation, no
//! syscall; a wake-up on the executor's own thread, as the verbs completions', sets a flag
//! only that thread touches, taken without a locked swap). Once per round, before it polls the woken coroutines, it runs the thread's
//! progress hooks ([`crate::progress::run`]): on verbs each hook drains a send completion
//! queue (and the receive queues waited on) and wakes exactly the coroutines whose work
//! requests finished, so no verbs future wakes itself to look. Fabric futures that make
//! progress by being polled (the soft fabric's `yield_now`) wake themselves before they
//! return `Pending`, and a coroutine parked on something another coroutine or thread will
//! wake (a delegation or lock waiter) is not polled until then.
//! The coroutines are pinned in one place before the run: the thread's frame memory when a
//! fabric installed one ([`crate::frames`]: registered memory, where the NIC writes READ
//! results in place), else one heap allocation. The loop itself allocates nothing and makes
//! no system call.
use crate::frames::Frames;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

/// Coroutine polls made by [`run_coroutines`] in this process (all threads), so that a
/// benchmark can report polls per completion.
pub static COROUTINE_POLLS: AtomicU64 = AtomicU64::new(0);

/// Runs `coroutines` to completion on this thread and returns their outputs in order.
pub fn run_coroutines<F: Future>(coroutines: Vec<F>) -> Vec<F::Output> {
    run_coroutines_with(coroutines, || {})
}

/// As [`run_coroutines`], calling `progress` once per round (e.g. to poll a shared CQ; what it
/// completes must wake the coroutines that wait for it), after the coroutines of the round,
/// beside the thread's registered hooks ([`crate::progress`]), which run before them.
pub fn run_coroutines_with<F: Future>(
    coroutines: Vec<F>,
    mut progress: impl FnMut(),
) -> Vec<F::Output> {
    let mut tasks = Frames::new(coroutines);
    let n = tasks.len();
    let (join, wakers) = table(n, thread_mark());
    let mut out: Vec<Option<F::Output>> = (0..n).map(|_| None).collect();
    let mut live = n;
    let mut polls = 0u64;
    let _driving = crate::progress::Driving::start();
    while live > 0 {
        crate::progress::run();
        for (i, slot) in out.iter_mut().enumerate() {
            if slot.is_some() || !join.take(i) {
                continue;
            }
            polls += 1;
            let mut cx = Context::from_waker(&wakers[i]);
            if let Poll::Ready(v) = tasks.get(i).poll(&mut cx) {
                *slot = Some(v);
                live -= 1;
            }
        }
        progress();
    }
    COROUTINE_POLLS.fetch_add(polls, Ordering::Relaxed);
    drop(tasks);
    out.into_iter()
        .map(|v| v.expect("every coroutine finished"))
        .collect()
}

/// A coroutine table of `n` entries, every one woken (to be polled once at the start), and
/// the waker of each entry; run on the thread of mark `owner` (see [`thread_mark`]; 0: on
/// whichever thread polls it).
fn table(n: usize, owner: usize) -> (Arc<Join>, Vec<Waker>) {
    let join = Arc::new(Join {
        first: OnceLock::new(),
        changed: AtomicBool::new(false),
        later: Mutex::new(None),
        woken: (0..n).map(|_| AtomicBool::new(true)).collect(),
        local: (0..n).map(|_| AtomicBool::new(false)).collect(),
        owner,
    });
    let wakers = (0..n)
        .map(|i| {
            Waker::from(Arc::new(ChildWake {
                join: join.clone(),
                i,
            }))
        })
        .collect();
    (join, wakers)
}

/// A future that polls the futures of `futures` in turn each time it is polled, and resolves
/// to all their outputs in order once every one has. It is how one client thread's
/// coroutines run as one task under another executor (the sim's).
///
/// A poll skips a future that is *parked*: one whose last poll ended waiting only for
/// things that mark it when they happen ([`park_current`]: the sim's verbs and timers), and
/// that has been neither marked nor woken through its waker since. Polled, such a future would only
/// have answered `Pending` again; every other future is polled every time, in order, as a
/// busy-polling executor would.
pub fn join_all<F: Future>(futures: Vec<F>) -> JoinAll<F> {
    let n = futures.len();
    // A join is a future, polled on whichever thread runs its task: no owner thread.
    let (join, wakers) = table(n, 0);
    JoinAll {
        futures: Frames::new(futures),
        out: (0..n).map(|_| None).collect(),
        parked: vec![false; n],
        wakers,
        join,
        parent: None,
    }
}

/// The future of [`join_all`]: the futures live in place (they are not moved once polled);
/// the outputs are kept until the last one finishes.
pub struct JoinAll<F: Future> {
    futures: Frames<F>,
    out: Vec<Option<F::Output>>,
    /// Future `i` is parked (see [`join_all`]).
    parked: Vec<bool>,
    /// Future `i`'s waker: marks it woken, then wakes the task.
    wakers: Vec<Waker>,
    join: Arc<Join>,
    /// The task's waker as last handed to `join` (compared without its lock).
    parent: Option<Waker>,
}

/// What a [`JoinAll`] shares with its futures' wakers and marks.
struct Join {
    /// The waker of the task the join runs in: from its first poll, or (`changed`) from its
    /// last poll in `later`. A task's waker seldom changes, so a wake-up seldom locks.
    first: OnceLock<Waker>,
    changed: AtomicBool,
    later: Mutex<Option<Waker>>,
    /// Future `i` was woken or marked since its last poll.
    woken: Box<[AtomicBool]>,
    /// Future `i` was woken on the owner thread since its last poll: set and taken by that
    /// thread only (an atomic for `Sync`, accessed as a plain byte), so taking it needs no
    /// locked swap. Read as part of `woken`.
    local: Box<[AtomicBool]>,
    /// The [`thread_mark`] of the thread that runs the table and takes its flags
    /// ([`run_coroutines`]); 0 for a [`join_all`] (every wake-up goes to `woken`).
    owner: usize,
}

thread_local! {
    static MARK: u8 = const { 0 };
}

/// This thread's mark: the address of a thread-local, distinct among live threads (never 0).
#[inline]
fn thread_mark() -> usize {
    MARK.with(|m| std::ptr::from_ref(m) as usize)
}

struct ChildWake {
    join: Arc<Join>,
    i: usize,
}

impl Wake for ChildWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let j = &self.join;
        if j.owner != 0 && j.owner == thread_mark() {
            // On the thread that takes the flags: nothing to publish to another thread.
            j.local[self.i].store(true, Ordering::Relaxed);
        } else {
            j.woken[self.i].store(true, Ordering::Release);
        }
        if !j.changed.load(Ordering::Acquire) {
            if let Some(w) = j.first.get() {
                w.wake_by_ref();
            }
        } else if let Ok(p) = j.later.lock()
            && let Some(w) = p.as_ref()
        {
            w.wake_by_ref();
        }
    }
}

impl Join {
    /// Whether entry `i` was woken since it was last taken; clears it. A plain load first:
    /// most entries looked at were not woken (no locked swap). Inlined into the generic
    /// polls of other crates: it runs once per coroutine per poll of a join.
    ///
    /// A wake-up on the owner thread is taken with a plain load and store (only that thread
    /// sets or clears its flag); one from elsewhere with the swap, which also makes what the
    /// waking thread wrote visible to the poll that follows.
    #[inline]
    fn take(&self, i: usize) -> bool {
        let flag = &self.woken[i];
        let local = &self.local[i];
        if local.load(Ordering::Relaxed) {
            local.store(false, Ordering::Relaxed);
            if flag.load(Ordering::Relaxed) {
                flag.swap(false, Ordering::AcqRel);
            }
            return true;
        }
        flag.load(Ordering::Relaxed) && flag.swap(false, Ordering::AcqRel)
    }
}

/// A future of a [`join_all`] that waits for something it will be marked for (see
/// [`park_current`]). Marking does not wake the task: whoever marks makes it ready itself.
#[derive(Clone)]
pub struct ChildMark {
    join: Arc<Join>,
    i: u32,
}

impl ChildMark {
    /// The awaited thing happened: the join polls this future at its next poll.
    pub fn mark(&self) {
        self.join.woken[self.i as usize].store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for ChildMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChildMark({})", self.i)
    }
}

/// How the future a join is polling waits, as told by the fabric futures it polls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Park {
    /// Nothing said: polled every time.
    Unsaid,
    /// Everything it waits for marks it.
    Parked,
    /// Something it waits for does not mark it: polled every time.
    Vetoed,
}

thread_local! {
    /// The join and index of the future being polled (null outside a join's poll).
    static CURRENT: Cell<(*const Join, u32)> = const { Cell::new((std::ptr::null(), 0)) };
    static PARK: Cell<Park> = const { Cell::new(Park::Unsaid) };
}

/// Called by a fabric future about to return `Pending` on a wait that will call
/// [`ChildMark::mark`] (and make its task ready) when it ends: parks the [`join_all`] future
/// being polled unless another wait vetoes it ([`veto_park`]). Returns the mark when
/// `want_mark` (None outside a join's poll).
pub fn park_current(want_mark: bool) -> Option<ChildMark> {
    let (join, i) = CURRENT.with(|c| c.get());
    if join.is_null() {
        return None;
    }
    PARK.with(|p| {
        if p.get() == Park::Unsaid {
            p.set(Park::Parked);
        }
    });
    if !want_mark {
        return None;
    }
    // SAFETY: `CURRENT` is non-null only while `JoinAll::poll` polls future `i`, and that
    // join holds an `Arc<Join>` (the pointer came from `Arc::as_ptr` of it) throughout: the
    // count is live, and the increment gives the `Arc` built here a count of its own.
    let join = unsafe {
        Arc::increment_strong_count(join);
        Arc::from_raw(join)
    };
    Some(ChildMark { join, i })
}

/// Called by a fabric future about to return `Pending` on a wait that will not mark (the
/// sim's receives): the [`join_all`] future being polled is polled every time.
pub fn veto_park() {
    if !CURRENT.with(|c| c.get()).0.is_null() {
        PARK.with(|p| p.set(Park::Vetoed));
    }
}

/// Restores `CURRENT` when a join's poll ends, however it ends (a future that panics must
/// not leave it naming a join that may be gone).
struct Current((*const Join, u32));

impl Drop for Current {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

impl<F: Future> Future for JoinAll<F> {
    type Output = Vec<F::Output>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<F::Output>> {
        // SAFETY: JoinAll is not structurally pinned in `out`, `parked`, `wakers` or `join`
        // (plain data, moved freely); the futures stay in their own place (`Frames`), which
        // moving JoinAll does not move.
        let this = unsafe { self.get_unchecked_mut() };
        if !this
            .parent
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            this.parent = Some(cx.waker().clone());
            if this.join.first.set(cx.waker().clone()).is_err() {
                if let Ok(mut p) = this.join.later.lock() {
                    *p = Some(cx.waker().clone());
                }
                this.join.changed.store(true, Ordering::Release);
            }
        }
        // A join inside another's future: its futures are not parked (the outer one would
        // not be told), and the outer future is polled every time.
        let guard = Current(CURRENT.with(|c| c.get()));
        let nested = !guard.0.0.is_null();
        if nested {
            CURRENT.with(|c| c.set((std::ptr::null(), 0)));
        }
        let me = Arc::as_ptr(&this.join);
        let mut pending = false;
        for (i, slot) in this.out.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            if !this.join.take(i) && this.parked[i] {
                pending = true;
                continue;
            }
            if !nested {
                CURRENT.with(|c| c.set((me, i as u32)));
                PARK.with(|p| p.set(Park::Unsaid));
            }
            let mut child_cx = Context::from_waker(&this.wakers[i]);
            let r = this.futures.get(i).poll(&mut child_cx);
            this.parked[i] = !nested && r.is_pending() && PARK.with(|p| p.get()) == Park::Parked;
            match r {
                Poll::Ready(v) => *slot = Some(v),
                Poll::Pending => pending = true,
            }
        }
        drop(guard);
        if nested {
            PARK.with(|p| p.set(Park::Vetoed));
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(
            this.out
                .iter_mut()
                .map(|v| v.take().expect("every future finished"))
                .collect(),
        )
    }
}

/// Whether and where worker threads were pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinning {
    /// Worker i on core `cores[i]`.
    Pinned(Vec<usize>),
    /// Not pinned: asked not to, or the machine does not say which cores exist.
    Unpinned(&'static str),
}

impl std::fmt::Display for Pinning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pinning::Pinned(c) => write!(f, "workers pinned to cores {c:?}"),
            Pinning::Unpinned(why) => write!(f, "workers not pinned ({why})"),
        }
    }
}

/// Where a run's threads go: one core per pinned worker, and the in-process memory node's
/// server thread on a core of its own when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorePlan {
    /// Cores of the workers, in worker order (empty: not pinned).
    pub workers: Vec<usize>,
    /// Core of the memory node's server thread (None: not pinned).
    pub server: Option<usize>,
    /// What the user should know (shared cores and the like), one line each.
    pub warnings: Vec<String>,
}

/// Which core the in-process memory node's server thread should get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCore {
    /// No in-process server thread.
    None,
    /// The first core left after the workers'.
    Auto,
    /// This core.
    Core(usize),
}

/// Plans cores for `threads` workers (pinned if `pin`) and a server thread. More pinned
/// workers than cores this process may use is an error (pinning two busy-polling workers to
/// one core halves both, silently); a server thread that must share a core is a warning,
/// since a busy-polling worker on its core starves it (two-sided verbs collapse ~1000x).
pub fn plan_cores(threads: usize, pin: bool, server: ServerCore) -> Result<CorePlan, String> {
    let allowed: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    let mut plan = CorePlan {
        workers: Vec::new(),
        server: None,
        warnings: Vec::new(),
    };
    if pin && !allowed.is_empty() {
        if threads > allowed.len() {
            return Err(format!(
                "{threads} pinned worker threads but this process may use {} cores ({:?}): \
                 use fewer --threads, more cores (taskset/numactl), or --no-pin to \
                 oversubscribe knowingly",
                allowed.len(),
                allowed
            ));
        }
        plan.workers = allowed[..threads].to_vec();
    }
    match server {
        ServerCore::None => {}
        ServerCore::Core(c) => {
            if !allowed.is_empty() && !allowed.contains(&c) {
                return Err(format!(
                    "--server-core {c} is not one of the cores this process may use ({allowed:?})"
                ));
            }
            if plan.workers.contains(&c) {
                plan.warnings.push(format!(
                    "the memory node's server thread shares core {c} with a busy-polling \
                     worker: two-sided verbs (SEND, WRITE_WITH_IMM) will be starved"
                ));
            }
            plan.server = Some(c);
        }
        ServerCore::Auto => {
            let free = allowed.iter().find(|c| !plan.workers.contains(c));
            match free {
                Some(&c) if pin => plan.server = Some(c),
                Some(_) => {}
                None => plan.warnings.push(format!(
                    "no core left for the in-process memory node's server thread ({threads} \
                     workers on {} cores): two-sided verbs (SEND, WRITE_WITH_IMM) will be \
                     starved; use one thread fewer, or --connect a memnode pinned elsewhere",
                    allowed.len()
                )),
            }
        }
    }
    Ok(plan)
}

/// Runs `threads` worker threads, worker `i` running `body(i)`, each pinned to its own core
/// when `pin` is set (round-robin over the cores this process may use when there are more
/// workers than cores). Returns the bodies' results in worker order and the pinning used.
pub fn run_workers<R: Send>(
    threads: usize,
    pin: bool,
    body: impl Fn(usize) -> R + Sync,
) -> (Vec<R>, Pinning) {
    let cores = if pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let pinning = if !pin {
        Pinning::Unpinned("--no-pin")
    } else if cores.is_empty() {
        Pinning::Unpinned("no core list available")
    } else {
        Pinning::Pinned((0..threads).map(|i| cores[i % cores.len()].id).collect())
    };
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (body, cores) = (&body, &cores);
                std::thread::Builder::new()
                    .name(format!("remora-worker-{i}"))
                    .spawn_scoped(s, move || {
                        if !cores.is_empty() {
                            core_affinity::set_for_current(cores[i % cores.len()]);
                        }
                        body(i)
                    })
                    .expect("spawning a worker thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    (results, pinning)
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora_core::block_on::yield_now;
    use std::cell::RefCell;

    #[test]
    fn coroutines_interleave_and_all_finish() {
        let log = RefCell::new(Vec::new());
        let coros: Vec<_> = (0..3)
            .map(|i| {
                let log = &log;
                async move {
                    for step in 0..2 {
                        log.borrow_mut().push((i, step));
                        yield_now().await;
                    }
                    i * 10
                }
            })
            .collect();
        assert_eq!(run_coroutines(coros), vec![0, 10, 20]);
        assert_eq!(
            *log.borrow(),
            vec![(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
        );
    }

    /// A coroutine woken from another thread is polled again (its wake-up goes through the
    /// shared flag, not the owner thread's), and sees what that thread wrote before waking
    /// it; one woken on the executor's thread too (by another coroutine).
    #[test]
    fn wakes_from_another_thread_and_from_this_one_are_taken() {
        use std::sync::atomic::AtomicU32;
        let shared = Arc::new((AtomicU32::new(0), Mutex::new(None::<Waker>)));
        let local_waker = RefCell::new(None::<Waker>);
        let local_polls = Cell::new(0u32);
        let t = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for round in 1..=100u32 {
                    // Waits until the coroutine has seen the previous value and parked.
                    let w = loop {
                        if let Some(w) = shared.1.lock().unwrap().take() {
                            break w;
                        }
                        std::thread::yield_now();
                    };
                    shared.0.store(round, Ordering::Relaxed);
                    w.wake();
                }
            })
        };
        let remote = std::future::poll_fn(|cx| {
            let seen = shared.0.load(Ordering::Relaxed);
            if seen == 100 {
                return Poll::Ready(seen);
            }
            *shared.1.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        });
        let here = std::future::poll_fn(|cx| {
            local_polls.set(local_polls.get() + 1);
            if local_polls.get() == 3 {
                return Poll::Ready(0);
            }
            *local_waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        });
        let t0 = std::time::Instant::now();
        let waker = std::future::poll_fn(|cx| {
            // Wakes `here` from this thread, once per round, until it is done.
            if let Some(w) = local_waker.borrow_mut().take() {
                w.wake();
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "a wake-up was lost"
            );
            if local_polls.get() >= 3 && shared.0.load(Ordering::Relaxed) == 100 {
                return Poll::Ready(0);
            }
            // Polled again next round, as `yield_now` is.
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        let futs: Vec<std::pin::Pin<Box<dyn Future<Output = u32> + '_>>> =
            vec![Box::pin(remote), Box::pin(here), Box::pin(waker)];
        assert_eq!(run_coroutines(futs), vec![100, 0, 0]);
        assert_eq!(local_polls.get(), 3);
        t.join().unwrap();
    }

    #[test]
    fn join_all_runs_everything_to_completion_in_order() {
        let futs: Vec<_> = (0..4u32)
            .map(|i| async move {
                for _ in 0..i {
                    yield_now().await;
                }
                i * 2
            })
            .collect();
        assert_eq!(run_coroutines(vec![join_all(futs)]), vec![vec![0, 2, 4, 6]]);
    }

    /// A future that waits for `mark` to be set by someone else, telling the join how
    /// (parks with a mark, or vetoes), and counts its polls.
    struct Waits<'a> {
        polls: &'a Cell<u32>,
        done: &'a Cell<bool>,
        slot: &'a RefCell<Option<ChildMark>>,
        veto: bool,
    }

    impl Future for Waits<'_> {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
            self.polls.set(self.polls.get() + 1);
            if self.done.get() {
                return Poll::Ready(());
            }
            if self.veto {
                veto_park();
            }
            let m = park_current(true);
            *self.slot.borrow_mut() = m;
            Poll::Pending
        }
    }

    #[test]
    fn join_all_skips_a_parked_future_until_it_is_marked() {
        for veto in [false, true] {
            let (polls, done) = (Cell::new(0), Cell::new(false));
            let slot = RefCell::new(None);
            let mut join = Box::pin(join_all(vec![
                Box::pin(Waits {
                    polls: &polls,
                    done: &done,
                    slot: &slot,
                    veto,
                }) as Pin<Box<dyn Future<Output = ()>>>,
                Box::pin(async {
                    for _ in 0..5 {
                        yield_now().await;
                    }
                }),
            ]));
            let mut cx = Context::from_waker(Waker::noop());
            for _ in 0..4 {
                assert!(join.as_mut().poll(&mut cx).is_pending());
            }
            // Parked: polled once, then skipped while its sibling runs; vetoed: every time.
            assert_eq!(polls.get(), if veto { 4 } else { 1 });
            done.set(true);
            if !veto {
                assert!(join.as_mut().poll(&mut cx).is_pending());
                assert_eq!(polls.get(), 1, "not marked yet");
                let m = slot.borrow_mut().take().expect("parked with a mark");
                m.mark();
            }
            while join.as_mut().poll(&mut cx).is_pending() {}
            assert!(polls.get() >= 2);
        }
        // Outside a join nothing parks.
        assert!(park_current(true).is_none());
    }

    /// A coroutine waiting on a waker that nobody wakes while its sibling makes 100 steps is
    /// polled once, then once more when the sibling wakes it (polling every coroutine every
    /// round polled it 101 times).
    #[test]
    fn a_waiting_coroutine_is_polled_only_when_its_waker_fires() {
        let (polls, done) = (Cell::new(0u32), Cell::new(false));
        let saved = RefCell::new(None::<Waker>);
        let waiter = std::future::poll_fn(|cx| {
            polls.set(polls.get() + 1);
            if done.get() {
                return Poll::Ready(());
            }
            *saved.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        });
        let stepper = async {
            for _ in 0..100 {
                yield_now().await;
            }
            done.set(true);
            if let Some(w) = saved.borrow_mut().take() {
                w.wake();
            }
        };
        let before = COROUTINE_POLLS.load(Ordering::Relaxed);
        run_coroutines(vec![
            Box::pin(waiter) as Pin<Box<dyn Future<Output = ()>>>,
            Box::pin(stepper),
        ]);
        assert_eq!(polls.get(), 2);
        // The stepper's 101 polls and the waiter's 2 (other tests may add theirs).
        assert!(COROUTINE_POLLS.load(Ordering::Relaxed) - before >= 103);
    }

    #[test]
    fn workers_run_and_report_pinning() {
        let (r, pinning) = run_workers(2, true, |i| i + 1);
        assert_eq!(r, vec![1, 2]);
        if let Pinning::Pinned(c) = pinning {
            assert_eq!(c.len(), 2);
        }
        let (_, p) = run_workers(1, false, |_| ());
        assert_eq!(p, Pinning::Unpinned("--no-pin"));
    }
}

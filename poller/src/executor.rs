//! The run-to-completion executor: worker threads pinned to cores, each busy-polling its
//! coroutines.
//!
//! DPDK-style: a worker owns its endpoint (queue pairs) and runs N index operations as
//! coroutines (futures). Every round it polls each unfinished coroutine once; a coroutine
//! runs until it waits on the fabric, then the next one runs. Wakers are no-ops: every fabric
//! future makes progress by being polled (the soft fabric completes on the next poll, the
//! verbs fabric polls its completion queue), so nothing needs to be woken. The coroutines are
//! pinned in one place before the run: the thread's frame memory when a fabric installed one
//! ([`crate::frames`]: registered memory, where the NIC writes READ results in place), else
//! one heap allocation. The loop itself allocates nothing and makes no system call.
use crate::frames::Frames;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Runs `coroutines` to completion on this thread and returns their outputs in order.
pub fn run_coroutines<F: Future>(coroutines: Vec<F>) -> Vec<F::Output> {
    run_coroutines_with(coroutines, || {})
}

/// As [`run_coroutines`], calling `progress` once per round (e.g. to poll a shared CQ).
pub fn run_coroutines_with<F: Future>(
    coroutines: Vec<F>,
    mut progress: impl FnMut(),
) -> Vec<F::Output> {
    let mut tasks = Frames::new(coroutines);
    let mut out: Vec<Option<F::Output>> = (0..tasks.len()).map(|_| None).collect();
    let mut live = tasks.len();
    let mut cx = Context::from_waker(Waker::noop());
    while live > 0 {
        for (i, slot) in out.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            if let Poll::Ready(v) = tasks.get(i).poll(&mut cx) {
                *slot = Some(v);
                live -= 1;
            }
        }
        progress();
    }
    drop(tasks);
    out.into_iter()
        .map(|v| v.expect("every coroutine finished"))
        .collect()
}

/// A future that polls every future of `futures` in turn each time it is polled, and
/// resolves to all their outputs in order once every one has. It is how one client thread's
/// coroutines run as one task under another executor (the sim's).
pub fn join_all<F: Future>(futures: Vec<F>) -> JoinAll<F> {
    let out = (0..futures.len()).map(|_| None).collect();
    JoinAll {
        futures: Frames::new(futures),
        out,
    }
}

/// The future of [`join_all`]: the futures live in place (they are not moved once polled);
/// the outputs are kept until the last one finishes.
pub struct JoinAll<F: Future> {
    futures: Frames<F>,
    out: Vec<Option<F::Output>>,
}

impl<F: Future> Future for JoinAll<F> {
    type Output = Vec<F::Output>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<F::Output>> {
        // SAFETY: JoinAll is not structurally pinned in `out` (plain data, moved freely); the
        // futures stay in their own place (`Frames`), which moving JoinAll does not move.
        let this = unsafe { self.get_unchecked_mut() };
        let mut pending = false;
        for (i, slot) in this.out.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            match this.futures.get(i).poll(cx) {
                Poll::Ready(v) => *slot = Some(v),
                Poll::Pending => pending = true,
            }
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

//! `remora bench --fabric soft`: worker threads pinned to cores, each one compute-node client.
use super::BenchArgs;
use super::cluster;
use super::index::{Handle, IndexCfg, NodeState, snapshot_of};
use super::phase::{BenchRecord, Ctx, Phase, PhaseOut, Time, phase, record};
use super::resizes::ResizeWatch;
use super::ycsb::Workload;
use remora::core::fabric::Endpoint;
use remora::poller::clock::Clock;
use remora::poller::executor::{ServerCore, plan_cores, run_coroutines, run_workers};
use remora::poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode, control};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

/// Waits at a barrier a fixed number of times in all, the rest when dropped early.
pub(super) struct BarrierGuard<'a> {
    pub(super) barrier: &'a Barrier,
    pub(super) left: std::cell::Cell<usize>,
}

impl BarrierGuard<'_> {
    /// Waits once; true for the barrier's leader.
    pub(super) fn wait(&self) -> bool {
        self.left.set(self.left.get().saturating_sub(1));
        self.barrier.wait().is_leader()
    }
}

impl Drop for BarrierGuard<'_> {
    fn drop(&mut self) {
        while self.left.get() > 0 {
            self.wait();
        }
    }
}

/// How the soft fabric is reached.
enum Target {
    Local(std::sync::Arc<SoftMemoryNode>),
    Remote(PathBuf),
}

impl Target {
    fn endpoint(&self) -> Result<SoftEndpoint, String> {
        match self {
            Target::Local(n) => n.endpoint().map_err(|e| e.to_string()),
            Target::Remote(p) => {
                control::connect_all(std::slice::from_ref(p)).map_err(|e| e.to_string())
            }
        }
    }
}

/// Runs LOAD (and the workload) on the soft fabric with techniques `t`.
pub fn run(
    a: &BenchArgs,
    index: &IndexCfg,
    workload: Workload,
) -> Result<Vec<BenchRecord>, String> {
    let (target, notes, resizes) = match &a.connect {
        Some(p) => {
            let path = PathBuf::from(p);
            let info = control::info(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if let Some(want) = index.service()
                && info.service_name() != want
            {
                return Err(format!(
                    "the memnode at {} runs the `{}` service, but this index needs `{want}`: \
                     start it with `remora memnode --service {want}`",
                    path.display(),
                    info.service_name()
                ));
            }
            (
                Target::Remote(path.clone()),
                vec![format!(
                    "memnode {} at {} ({} MiB region); the tree persists there between runs",
                    info.node_id,
                    path.display(),
                    info.region_len >> 20
                )],
                ResizeWatch::default(),
            )
        }
        None => {
            let (node, watch) = local_memory_node(a, index)?;
            let pages = node.pages();
            (
                Target::Local(node),
                vec![format!(
                    "in-process memory node: {} MiB region on {pages}",
                    super::region_bytes(a) >> 20
                )],
                watch,
            )
        }
    };
    let server_core = match (&target, a.server_core) {
        (Target::Remote(_), Some(_)) => {
            return Err(
                "--server-core applies to the in-process memory node, not --connect \
                        (pin a memnode with `remora memnode --core N`)"
                    .into(),
            );
        }
        (Target::Remote(_), None) => ServerCore::None,
        (Target::Local(_), Some(c)) => ServerCore::Core(c),
        (Target::Local(_), None) => ServerCore::Auto,
    };
    let plan = plan_cores(a.threads, !a.no_pin, server_core)?;
    for w in &plan.warnings {
        eprintln!("remora: warning: {w}");
    }
    let _server = match &target {
        Target::Local(n) => Some(n.spawn_server_on(plan.server)),
        Target::Remote(_) => None,
    };
    let mut notes = notes;
    if matches!(target, Target::Local(_)) {
        let tid = server_thread_id();
        LOCAL_SERVER_TID.store(tid.unwrap_or(0), Ordering::SeqCst);
        if tid.is_some() {
            notes.push(
                concat!(
                    "srv ns/op: the in-process memory node's server thread CPU time ",
                    "(/proc schedstat) per op, its busy-polling included (as `top` in the Erda ",
                    "paper)"
                )
                .into(),
            );
        }
    }
    let make_ep = || target.endpoint();
    let r = run_threads(a, index, workload, "soft", &make_ep, notes, resizes);
    LOCAL_SERVER_TID.store(0, Ordering::SeqCst);
    r
}

/// The thread id of the in-process memory node's server thread while a soft run has one
/// (0: none).
static LOCAL_SERVER_TID: AtomicU64 = AtomicU64::new(0);

/// This process's memory-node server thread (named `remora-memnode-N`), by its name in
/// /proc.
fn server_thread_id() -> Option<u64> {
    for _ in 0..100 {
        for e in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if comm.starts_with("remora-memnode") {
                return e.file_name().to_str()?.parse().ok();
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    None
}

/// CPU time the in-process memory node's server thread has run, in ns (Linux schedstat),
/// while a soft run with a local node is in progress.
pub(super) fn local_server_cpu_ns() -> Option<u64> {
    let tid = LOCAL_SERVER_TID.load(Ordering::SeqCst);
    if tid == 0 {
        return None;
    }
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// LOAD then `workload` on `a.threads` pinned worker threads, each on its own endpoint from
/// `make_ep` running `a.coroutines` coroutines: the real-thread runner of every fabric (soft,
/// verbs). The threads are one compute node: they share its per-node state (one copy per
/// thread with `--per-thread-state`). Appends the pinning and clock to `notes`.
pub(super) fn run_threads<E: Endpoint>(
    a: &BenchArgs,
    index: &IndexCfg,
    workload: Workload,
    fabric: &str,
    make_ep: &(dyn Fn() -> Result<E, String> + Sync),
    mut notes: Vec<String>,
    resizes: ResizeWatch,
) -> Result<Vec<BenchRecord>, String> {
    notes.extend(resizes.note(index));
    let clock = Clock::get();
    let inserted = AtomicU64::new(0);
    let (dist, mut load, run) = Phase::pair(a, workload, &inserted);
    if a.cluster.on() {
        // A cluster run's process loads its share of the records.
        let (from, to) = a.cluster.share(a.records);
        load.next_load = AtomicU64::new(from);
        load.records = to;
    }
    let cluster_err: Mutex<Option<String>> = Mutex::new(None);
    let barrier = Barrier::new(a.threads);
    let shared = NodeState::new(index);
    let (results, pinning) = run_workers(
        a.threads,
        !a.no_pin,
        |w| -> Result<(PhaseOut, Option<PhaseOut>), String> {
            // Every worker passes every barrier, even after an error (the guard does the rest
            // on the way out), and an error stops the other workers' phases.
            let sync = BarrierGuard {
                barrier: &barrier,
                left: std::cell::Cell::new(
                    if workload == Workload::Load { 1 } else { 3 }
                        + if a.cluster.on() { 2 } else { 0 },
                ),
            };
            let stop_all = |e: String| {
                load.stop.store(true, Ordering::SeqCst);
                run.stop.store(true, Ordering::SeqCst);
                e
            };
            let ep = make_ep().map_err(stop_all)?;
            let own;
            let node = if a.per_thread_state {
                own = NodeState::new(index);
                &own
            } else {
                &shared
            };
            // A cluster run: the leader thread meets the other processes at the memory
            // node's barrier while this process's threads wait for it.
            let cluster_failed = |e: String| {
                *cluster_err.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop_all(e));
            };
            let cluster_result = || match &*cluster_err.lock().unwrap_or_else(|p| p.into_inner()) {
                Some(e) => Err(e.clone()),
                None => Ok(()),
            };
            let meet_all = |what: &str| -> Result<(), String> {
                if sync.wait()
                    && let Err(e) = cluster::meet(a, &ep, what)
                {
                    cluster_failed(e);
                }
                sync.wait();
                cluster_result()
            };
            // Rank 0 opens (creates) the index before the others open it.
            let late = a.cluster.on() && a.cluster.cluster_rank != 0;
            if late {
                meet_all("before opening the index")?;
            }
            // On the executor, so that the open's buffers are in the thread's frame memory
            // like the phases' (registered memory under verbs).
            let idx = run_coroutines(vec![Handle::open_on(&ep, index, node)])
                .pop()
                .ok_or_else(|| "opening the index ran nothing".to_string())
                .and_then(|r| r)
                .map_err(stop_all)?;
            if a.cluster.on() && !late {
                meet_all("after opening the index")?;
            }
            let ctx = Ctx {
                a,
                time: Time::Wall(clock),
                resizes: resizes.clone(),
            };
            let snap = || snapshot_of(&ep);
            let stats = || idx.stats();
            sync.wait();
            let l = one(phase(&idx, &ctx, &load, w, &snap, &stats)).map_err(stop_all)?;
            if workload == Workload::Load {
                return Ok((l, None));
            }
            if sync.wait() {
                if a.cluster.on()
                    && let Err(e) = cluster::meet(a, &ep, "before the measured phase")
                {
                    cluster_failed(e);
                }
                if let Some(s) = a.seconds {
                    run.deadline_ns
                        .store(clock.now_ns() + (s * 1e9) as u64, Ordering::SeqCst);
                }
            }
            sync.wait();
            cluster_result()?;
            let r = one(phase(&idx, &ctx, &run, w, &snap, &stats)).map_err(stop_all)?;
            Ok((l, Some(r)))
        },
    );
    load.pb.finish_and_clear();
    run.pb.finish_and_clear();
    notes.push(pinning.to_string());
    notes.push(format!("clock: {}", clock.source()));
    let mut loads = Vec::new();
    let mut runs = Vec::new();
    for r in results {
        let (l, r) = r?;
        loads.push(l);
        if let Some(r) = r {
            runs.push(r);
        }
    }
    let mut out = vec![record(
        a,
        index,
        Workload::Load,
        "load",
        dist,
        &loads,
        fabric,
        notes.clone(),
    )];
    if !runs.is_empty() {
        out.push(record(
            a, index, workload, "run", dist, &runs, fabric, notes,
        ));
    }
    Ok(out)
}

/// Runs one future on this worker thread's busy-poll executor.
pub(super) fn one<F: std::future::Future>(f: F) -> F::Output {
    run_coroutines(vec![f])
        .pop()
        .expect("one future, one output")
}

/// The in-process memory node a soft run uses without `--connect`: a region of the run's
/// size, receive buffers large enough for the index's messages, and the index's server (if
/// it has one) with its resize watch.
pub(super) fn local_memory_node(
    a: &BenchArgs,
    index: &IndexCfg,
) -> Result<(Arc<SoftMemoryNode>, ResizeWatch), String> {
    let mut cfg = NodeConfig {
        region_len: super::region_bytes(a),
        ..NodeConfig::default()
    };
    if let Some(need) = index.max_message() {
        cfg.max_msg = cfg.max_msg.max(need);
    }
    let (node, watch) = match index.server(cfg.region_len, cfg.chunk_size)? {
        Some((h, watch)) => (SoftMemoryNode::create_with(cfg, h), watch),
        None => (SoftMemoryNode::create(cfg), ResizeWatch::default()),
    };
    let node = node.map_err(|e| format!("creating the memory node: {e}"))?;
    Ok((node, watch))
}

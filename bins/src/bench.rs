//! `remora bench`: the YCSB driver (issue 5).
//!
//! Loads `--records` keys (YCSB LOAD), then runs the chosen workload for `--operations`
//! operations or `--seconds` seconds, on worker threads × coroutines, every worker with its
//! own endpoint and index handle (one compute-node client). Any index implementing
//! [`KvIndex`] plugs in; SMART's techniques are flags. Prints a table, writes one JSON record
//! per phase.
#[path = "ycsb.rs"]
mod ycsb;

use crate::args::{FabricKind, SimArgs};
use crate::report::{Latency, PerOp, write_json};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use remora::core::Snapshot;
use remora::core::block_on::block_on;
use remora::core::index::KvIndex;
use remora::core::smart::{KeyMode, Smart, SmartConfig, SmartStats, Techniques};
use remora::poller::clock::Clock;
use remora::poller::executor::{run_coroutines, run_workers};
use remora::poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode, control};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use ycsb::{Distribution, KeyChooser, KeyType, OpKind, Rng, Workload, key_of};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IndexKind {
    /// SMART, the adaptive radix tree on disaggregated memory.
    Smart,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value = "smart")]
    pub index: IndexKind,
    #[arg(long, value_enum, default_value = "soft")]
    pub fabric: FabricKind,
    /// YCSB workload to run after loading (LOAD: only load).
    #[arg(long, value_enum, default_value = "c")]
    pub workload: Workload,
    /// Request distribution (default: latest for D, zipfian otherwise).
    #[arg(long, value_enum)]
    pub distribution: Option<Distribution>,
    /// Zipfian constant θ.
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    #[arg(long, value_enum, default_value = "int")]
    pub keys: KeyType,
    /// Records loaded before the run.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Operations of the run phase (default: as many as records, unless --seconds).
    #[arg(long)]
    pub operations: Option<u64>,
    /// Run for this many seconds instead of a fixed operation count.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 8)]
    pub value_size: usize,
    /// Longest scan of workload E (lengths uniform in 1..=max).
    #[arg(long, default_value_t = 100)]
    pub scan_max: usize,
    /// Worker threads (compute-node clients), each with its own endpoint and index handle.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Coroutines per worker thread.
    #[arg(long, default_value_t = 4)]
    pub coroutines: usize,
    /// A memnode control socket to use instead of an in-process memory node (soft).
    #[arg(long)]
    pub connect: Option<String>,
    /// Region of the in-process memory node, in MiB.
    #[arg(long, default_value_t = 2048)]
    pub region_mib: u64,
    /// Do not pin worker threads.
    #[arg(long)]
    pub no_pin: bool,
    /// Write JSON records (one line per phase) here; `-` for stdout.
    #[arg(long)]
    pub json: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Also run YCSB-C on the same keys against an in-memory std BTreeMap on one core, and
    /// print the throughput ratio.
    #[arg(long)]
    pub compare_btreemap: bool,
    /// Run the factor analysis (baseline, then each SMART technique added) over LOAD, A, B,
    /// C, D and print one table.
    #[arg(long)]
    pub factors: bool,
    #[command(flatten)]
    pub smart: SmartFlags,
    #[command(flatten)]
    pub sim: SimArgs,
}

/// SMART's run-time technique switches.
#[derive(Debug, Clone, Args)]
pub struct SmartFlags {
    /// Start from the "ART on disaggregated memory" baseline (every technique off); the
    /// `--with-*` flags then add techniques back.
    #[arg(long)]
    pub baseline: bool,
    /// Lock-based internal nodes instead of lock-free ones.
    #[arg(long)]
    pub no_lock_free: bool,
    /// Out-of-place leaves instead of in-place ones.
    #[arg(long)]
    pub no_in_place: bool,
    /// Release the leaf lock with a separate WRITE.
    #[arg(long)]
    pub no_rear_lock: bool,
    #[arg(long)]
    pub no_delegation: bool,
    #[arg(long)]
    pub no_combining: bool,
    #[arg(long)]
    pub no_cache: bool,
    /// With --baseline: add the named techniques (comma-separated: lock-free, in-place,
    /// rear-lock, delegation, combining, cache).
    #[arg(long, value_delimiter = ',')]
    pub with: Vec<String>,
    /// Radix cache capacity per client, in MiB.
    #[arg(long, default_value_t = 64.0)]
    pub cache_mib: f64,
}

impl SmartFlags {
    fn techniques(&self) -> Result<Techniques, String> {
        let mut t = if self.baseline {
            Techniques::BASELINE
        } else {
            Techniques::SMART
        };
        for w in &self.with {
            match w.as_str() {
                "lock-free" => t.lock_free_internal = true,
                "in-place" => t.in_place_leaf = true,
                "rear-lock" => t.rear_lock = true,
                "delegation" => t.delegation = true,
                "combining" => t.combining = true,
                "cache" => t.cache = true,
                other => return Err(format!("--with: unknown technique `{other}`")),
            }
        }
        t.lock_free_internal &= !self.no_lock_free;
        t.in_place_leaf &= !self.no_in_place;
        t.rear_lock &= !self.no_rear_lock;
        t.delegation &= !self.no_delegation;
        t.combining &= !self.no_combining;
        t.cache &= !self.no_cache;
        Ok(t)
    }
}

fn technique_names(t: &Techniques) -> String {
    let mut v = Vec::new();
    for (on, n) in [
        (t.lock_free_internal, "lock-free"),
        (t.in_place_leaf, "in-place"),
        (t.rear_lock, "rear-lock"),
        (t.delegation, "delegation"),
        (t.combining, "combining"),
        (t.cache, "cache"),
    ] {
        if on {
            v.push(n);
        }
    }
    if v.is_empty() {
        "baseline".into()
    } else {
        v.join("+")
    }
}

/// Operation counts of a phase.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct OpCounts {
    pub reads: u64,
    pub updates: u64,
    pub inserts: u64,
    pub scans: u64,
    /// Items returned by scans.
    pub scanned: u64,
    /// Reads of a key that was not found (D/E: a key being inserted concurrently).
    pub misses: u64,
}

impl OpCounts {
    fn add(&mut self, o: &OpCounts) {
        self.reads += o.reads;
        self.updates += o.updates;
        self.inserts += o.inserts;
        self.scans += o.scans;
        self.scanned += o.scanned;
        self.misses += o.misses;
    }
    fn total(&self) -> u64 {
        self.reads + self.updates + self.inserts + self.scans
    }
}

/// SMART's own figures for a phase (summed over clients).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SmartSummary {
    pub restarts: u64,
    pub checksum_retries: u64,
    pub lock_waits: u64,
    pub cache_leaf_hits: u64,
    pub cache_invalidations: u64,
    pub delegated_reads: u64,
    pub combined_writes: u64,
    pub grows: u64,
    pub prefix_splits: u64,
    pub leaf_splits: u64,
    pub cache_bytes: u64,
}

impl SmartSummary {
    fn from_delta(a: &SmartStats, b: &SmartStats) -> SmartSummary {
        SmartSummary {
            restarts: b.restarts - a.restarts,
            checksum_retries: b.checksum_retries - a.checksum_retries,
            lock_waits: b.lock_waits - a.lock_waits,
            cache_leaf_hits: b.cache_leaf_hits - a.cache_leaf_hits,
            cache_invalidations: b.cache_invalidations - a.cache_invalidations,
            delegated_reads: b.delegated_reads - a.delegated_reads,
            combined_writes: b.combined_writes - a.combined_writes,
            grows: b.grows - a.grows,
            prefix_splits: b.prefix_splits - a.prefix_splits,
            leaf_splits: b.leaf_splits - a.leaf_splits,
            cache_bytes: b.cache_bytes,
        }
    }
    fn add(&mut self, o: &SmartSummary) {
        self.restarts += o.restarts;
        self.checksum_retries += o.checksum_retries;
        self.lock_waits += o.lock_waits;
        self.cache_leaf_hits += o.cache_leaf_hits;
        self.cache_invalidations += o.cache_invalidations;
        self.delegated_reads += o.delegated_reads;
        self.combined_writes += o.combined_writes;
        self.grows += o.grows;
        self.prefix_splits += o.prefix_splits;
        self.leaf_splits += o.leaf_splits;
        self.cache_bytes += o.cache_bytes;
    }
}

/// One phase of one `remora bench` run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRecord {
    pub tool: &'static str,
    pub index: String,
    pub fabric: String,
    pub workload: String,
    /// "load" or "run".
    pub phase: &'static str,
    pub distribution: String,
    pub theta: f64,
    pub key_type: String,
    pub value_size: usize,
    pub records: u64,
    pub threads: usize,
    pub coroutines: usize,
    pub ops: u64,
    pub op_counts: OpCounts,
    /// Wall-clock seconds (soft) or virtual seconds (sim).
    pub seconds: f64,
    pub mops: f64,
    pub mops_per_thread: f64,
    pub latency: Latency,
    pub per_op: PerOp,
    /// Average key + value bytes of the keys used.
    pub kv_bytes: f64,
    /// Bytes read from remote memory per operation / (key + value bytes).
    pub read_amplification: f64,
    /// Bytes written to remote memory per update or insert / (key + value bytes).
    pub write_amplification: f64,
    pub techniques: String,
    pub smart: SmartSummary,
    pub notes: Vec<String>,
}

/// What one worker measured in one phase.
struct PhaseOut {
    counts: OpCounts,
    hist: Histogram<u64>,
    snap: Snapshot,
    start_ns: u64,
    end_ns: u64,
    smart: SmartSummary,
    key_bytes: u64,
}

/// Shared state of a phase.
struct Phase<'a> {
    workload: Workload,
    dist: Distribution,
    records: u64,
    /// Operation budget (shared) or deadline.
    budget: Option<u64>,
    /// Deadline on the phase clock (0: none).
    deadline_ns: AtomicU64,
    issued: AtomicU64,
    inserted: &'a AtomicU64,
    next_load: AtomicU64,
    stop: AtomicBool,
    pb: ProgressBar,
}

fn value_for(n: u64, size: usize, out: &mut [u8]) {
    let w = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
    for (i, b) in out[..size].iter_mut().enumerate() {
        *b = w[i % 8];
    }
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds are valid")
}

struct Ctx<'a> {
    a: &'a BenchArgs,
    clock: Clock,
}

/// Runs one coroutine of a phase against `idx`.
async fn coroutine<I: KvIndex>(
    idx: &I,
    ctx: &Ctx<'_>,
    ph: &Phase<'_>,
    seed: u64,
    hist: &RefCell<Histogram<u64>>,
    counts: &RefCell<OpCounts>,
    key_bytes: &RefCell<u64>,
) -> Result<(), String> {
    let a = ctx.a;
    let mut rng = Rng::new(seed);
    let mut chooser = KeyChooser::new(ph.dist, ph.records, a.theta);
    let mut key = [0u8; 32];
    let mut val = vec![0u8; a.value_size];
    let mut out = vec![0u8; a.value_size.max(8)];
    let mix = ph.workload.mix();
    let mut local = 0u64;
    loop {
        if ph.stop.load(Ordering::Relaxed) {
            break;
        }
        // Pick the operation and its key number.
        let (op, n) = if ph.workload == Workload::Load {
            let n = ph.next_load.fetch_add(1, Ordering::Relaxed);
            if n >= ph.records {
                break;
            }
            (OpKind::Insert, n)
        } else {
            if let Some(b) = ph.budget
                && ph.issued.fetch_add(1, Ordering::Relaxed) >= b
            {
                break;
            }
            let d = ph.deadline_ns.load(Ordering::Relaxed);
            if d != 0 && local.is_multiple_of(16) && ctx.clock.now_ns() >= d {
                ph.stop.store(true, Ordering::Relaxed);
                break;
            }
            let r = rng.below(100) as u32;
            let op = if r < mix[0] {
                OpKind::Read
            } else if r < mix[0] + mix[1] {
                OpKind::Update
            } else if r < mix[0] + mix[1] + mix[2] {
                OpKind::Insert
            } else {
                OpKind::Scan
            };
            let existing = ph.records + ph.inserted.load(Ordering::Relaxed);
            let n = match op {
                OpKind::Insert => ph.records + ph.inserted.fetch_add(1, Ordering::Relaxed),
                _ => chooser.next(&mut rng, existing),
            };
            (op, n)
        };
        let kl = key_of(a.keys, n, &mut key);
        let k = &key[..kl];
        let t0 = ctx.clock.now_ns();
        let mut c = OpCounts::default();
        match op {
            OpKind::Read => {
                c.reads = 1;
                match idx.get(k, &mut out).await.map_err(|e| e.to_string())? {
                    Some(_) => {}
                    None => c.misses = 1,
                }
            }
            OpKind::Update => {
                c.updates = 1;
                value_for(n ^ t0, a.value_size, &mut val);
                if !idx.update(k, &val).await.map_err(|e| e.to_string())? {
                    c.misses = 1;
                }
            }
            OpKind::Insert => {
                c.inserts = 1;
                value_for(n, a.value_size, &mut val);
                idx.upsert(k, &val).await.map_err(|e| e.to_string())?;
            }
            OpKind::Scan => {
                c.scans = 1;
                let len = 1 + rng.below(a.scan_max.max(1) as u64) as usize;
                c.scanned = idx
                    .scan(k, len, &mut |_, _| {})
                    .await
                    .map_err(|e| e.to_string())? as u64;
            }
        }
        let lat = ctx.clock.now_ns().saturating_sub(t0).max(1);
        let _ = hist.borrow_mut().record(lat);
        counts.borrow_mut().add(&c);
        *key_bytes.borrow_mut() += kl as u64;
        local += 1;
        if local.is_multiple_of(256) {
            ph.pb.inc(256);
        }
    }
    ph.pb.inc(local % 256);
    Ok(())
}

/// Runs one phase of one worker: `coroutines` coroutines on this thread.
fn worker_phase<I: KvIndex>(
    idx: &I,
    ctx: &Ctx<'_>,
    ph: &Phase<'_>,
    worker: usize,
    snapshot: &dyn Fn() -> Snapshot,
    stats: &dyn Fn() -> SmartStats,
) -> Result<PhaseOut, String> {
    let hist = RefCell::new(new_hist());
    let counts = RefCell::new(OpCounts::default());
    let key_bytes = RefCell::new(0u64);
    let s0 = snapshot();
    let st0 = stats();
    let start_ns = ctx.clock.now_ns();
    let phase_salt = ph.workload as u64 * 0x1000_0000;
    let coros: Vec<_> = (0..ctx.a.coroutines)
        .map(|c| {
            let seed = ctx.a.sim.seed ^ phase_salt ^ ((worker * 4096 + c) as u64 + 1);
            coroutine(idx, ctx, ph, seed, &hist, &counts, &key_bytes)
        })
        .collect();
    let results = run_coroutines(coros);
    let end_ns = ctx.clock.now_ns();
    for r in results {
        r?;
    }
    Ok(PhaseOut {
        counts: counts.into_inner(),
        hist: hist.into_inner(),
        snap: snapshot() - s0,
        start_ns,
        end_ns,
        smart: SmartSummary::from_delta(&st0, &stats()),
        key_bytes: key_bytes.into_inner(),
    })
}

fn progress(a: &BenchArgs, len: u64, what: String) -> ProgressBar {
    if a.quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>14} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what);
    pb
}

/// Waits at a barrier a fixed number of times in all, the rest when dropped early.
struct BarrierGuard<'a> {
    barrier: &'a Barrier,
    left: std::cell::Cell<usize>,
}

impl BarrierGuard<'_> {
    /// Waits once; true for the barrier's leader.
    fn wait(&self) -> bool {
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

fn smart_config(a: &BenchArgs, t: Techniques) -> SmartConfig {
    let mode = match a.keys {
        KeyType::Int => KeyMode::Fixed(8),
        KeyType::String => KeyMode::Variable,
    };
    let mut cfg = SmartConfig::new(t, mode, a.value_size);
    cfg.cache_mib = a.smart.cache_mib;
    cfg
}

/// Runs LOAD (and the workload) on the soft fabric with techniques `t`.
fn run_soft(a: &BenchArgs, t: Techniques, workload: Workload) -> Result<Vec<BenchRecord>, String> {
    let (target, mut notes) = match &a.connect {
        Some(p) => {
            let path = PathBuf::from(p);
            let info = control::info(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            (
                Target::Remote(path.clone()),
                vec![format!(
                    "memnode {} at {} ({} MiB region); the tree persists there between runs",
                    info.node_id,
                    path.display(),
                    info.region_len >> 20
                )],
            )
        }
        None => {
            let node = SoftMemoryNode::create(NodeConfig {
                region_len: a.region_mib << 20,
                ..NodeConfig::default()
            })
            .map_err(|e| format!("creating the memory node: {e}"))?;
            let pages = node.pages();
            (
                Target::Local(node),
                vec![format!(
                    "in-process memory node: {} MiB region on {pages}",
                    a.region_mib
                )],
            )
        }
    };
    let _server = match &target {
        Target::Local(n) => Some(n.spawn_server()),
        Target::Remote(_) => None,
    };
    let clock = Clock::get();
    let ctx = Ctx { a, clock };
    let inserted = AtomicU64::new(0);
    let dist = a.distribution.unwrap_or(if workload == Workload::D {
        Distribution::Latest
    } else {
        Distribution::Zipfian
    });
    let load = Phase {
        workload: Workload::Load,
        dist,
        records: a.records,
        budget: None,
        deadline_ns: AtomicU64::new(0),
        issued: AtomicU64::new(0),
        inserted: &inserted,
        next_load: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        pb: progress(a, a.records, "LOAD".into()),
    };
    let ops = a.operations.unwrap_or(if a.seconds.is_some() {
        u64::MAX
    } else {
        a.records
    });
    let run = Phase {
        workload,
        dist,
        records: a.records,
        budget: (ops != u64::MAX).then_some(ops),
        deadline_ns: AtomicU64::new(0),
        issued: AtomicU64::new(0),
        inserted: &inserted,
        next_load: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        pb: progress(
            a,
            if ops == u64::MAX { 0 } else { ops },
            format!("YCSB-{}", workload.name()),
        ),
    };
    let barrier = Barrier::new(a.threads);
    let cfg = smart_config(a, t);
    let (results, pinning) = run_workers(
        a.threads,
        !a.no_pin,
        |w| -> Result<(PhaseOut, Option<PhaseOut>), String> {
            // Every worker passes every barrier, even after an error (the guard does the rest
            // on the way out), and an error stops the other workers' phases.
            let sync = BarrierGuard {
                barrier: &barrier,
                left: std::cell::Cell::new(if workload == Workload::Load { 1 } else { 3 }),
            };
            let stop_all = |e: String| {
                load.stop.store(true, Ordering::SeqCst);
                run.stop.store(true, Ordering::SeqCst);
                e
            };
            let ep = target.endpoint().map_err(stop_all)?;
            let idx = block_on(Smart::open(&ep, cfg)).map_err(|e| stop_all(e.to_string()))?;
            let snap = || ep.snapshot();
            let stats = || idx.stats();
            sync.wait();
            let l = worker_phase(&idx, &ctx, &load, w, &snap, &stats).map_err(stop_all)?;
            if workload == Workload::Load {
                return Ok((l, None));
            }
            if sync.wait()
                && let Some(s) = a.seconds
            {
                run.deadline_ns
                    .store(clock.now_ns() + (s * 1e9) as u64, Ordering::SeqCst);
            }
            sync.wait();
            let r = worker_phase(&idx, &ctx, &run, w, &snap, &stats).map_err(stop_all)?;
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
        t,
        Workload::Load,
        "load",
        dist,
        &loads,
        "soft",
        notes.clone(),
    )];
    if !runs.is_empty() {
        out.push(record(a, t, workload, "run", dist, &runs, "soft", notes));
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn record(
    a: &BenchArgs,
    t: Techniques,
    workload: Workload,
    phase: &'static str,
    dist: Distribution,
    outs: &[PhaseOut],
    fabric: &str,
    notes: Vec<String>,
) -> BenchRecord {
    let mut hist = new_hist();
    let mut counts = OpCounts::default();
    let mut snap = Snapshot::default();
    let mut smart = SmartSummary::default();
    let mut key_bytes = 0u64;
    let start = outs.iter().map(|o| o.start_ns).min().unwrap_or(0);
    let end = outs.iter().map(|o| o.end_ns).max().unwrap_or(0);
    for o in outs {
        let _ = hist.add(&o.hist);
        counts.add(&o.counts);
        snap = snap + o.snap;
        smart.add(&o.smart);
        key_bytes += o.key_bytes;
    }
    let ops = counts.total();
    let seconds = end.saturating_sub(start) as f64 / 1e9;
    let mops = if seconds > 0.0 {
        ops as f64 / seconds / 1e6
    } else {
        0.0
    };
    let kv = if ops > 0 {
        key_bytes as f64 / ops as f64
    } else {
        0.0
    } + a.value_size as f64;
    let per_op = PerOp::new(&snap, ops);
    let writes = counts.updates + counts.inserts;
    BenchRecord {
        tool: "bench",
        index: format!("{:?}", a.index).to_lowercase(),
        fabric: fabric.into(),
        workload: workload.name().into(),
        phase,
        distribution: format!("{dist:?}").to_lowercase(),
        theta: a.theta,
        key_type: format!("{:?}", a.keys).to_lowercase(),
        value_size: a.value_size,
        records: a.records,
        threads: a.threads,
        coroutines: a.coroutines,
        ops,
        op_counts: counts,
        seconds,
        mops,
        mops_per_thread: mops / a.threads.max(1) as f64,
        latency: Latency::from_hist(&hist),
        per_op,
        kv_bytes: kv,
        read_amplification: if kv > 0.0 { per_op.bytes_in / kv } else { 0.0 },
        write_amplification: if writes > 0 && kv > 0.0 {
            snap.bytes_out as f64 / writes as f64 / kv
        } else {
            0.0
        },
        techniques: technique_names(&t),
        smart,
        notes,
    }
}

fn print_table(rows: &[BenchRecord]) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<8} {:<5} {:>9} {:>8} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>8} {:>6} {:>6}  techniques",
        "workload",
        "phase",
        "ops",
        "Mops",
        "p50 ns",
        "p99 ns",
        "p999 ns",
        "RT/op",
        "RD/op",
        "verbs",
        "B in/op",
        "r-amp",
        "w-amp"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<8} {:<5} {:>9} {:>8.3} {:>9.0} {:>9.0} {:>9.0} {:>6.2} {:>6.2} {:>6.2} {:>8.1} {:>6.2} {:>6.2}  {}",
            r.workload,
            r.phase,
            r.ops,
            r.mops,
            r.latency.p50_ns,
            r.latency.p99_ns,
            r.latency.p999_ns,
            r.per_op.round_trips,
            r.per_op.reads,
            r.per_op.verbs,
            r.per_op.bytes_in,
            r.read_amplification,
            r.write_amplification,
            r.techniques
        );
    }
    if let Some(r) = rows.first() {
        for n in &r.notes {
            let _ = writeln!(out, "note: {n}");
        }
    }
}

fn validate(a: &BenchArgs) -> Result<(), String> {
    if a.threads == 0 || a.coroutines == 0 {
        return Err("--threads and --coroutines must be at least 1".into());
    }
    if a.records == 0 {
        return Err("--records must be at least 1".into());
    }
    if !(a.theta > 0.0 && a.theta < 1.0) {
        return Err(format!("--theta must be in (0, 1), got {}", a.theta));
    }
    if a.value_size == 0 || a.value_size > 3000 {
        return Err("--value-size must be 1..=3000".into());
    }
    if let Some(s) = a.seconds
        && !(s.is_finite() && s > 0.0)
    {
        return Err("--seconds must be positive".into());
    }
    Ok(())
}

/// YCSB-C on the same keys against a std BTreeMap on this thread: throughput in Mops.
fn btreemap_c(a: &BenchArgs, ops: u64) -> f64 {
    let mut map: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut key = [0u8; 32];
    let mut val = vec![0u8; a.value_size];
    for n in 0..a.records {
        let kl = key_of(a.keys, n, &mut key);
        value_for(n, a.value_size, &mut val);
        map.insert(key[..kl].to_vec(), val.clone());
    }
    let mut rng = Rng::new(a.sim.seed);
    let mut chooser = KeyChooser::new(
        a.distribution.unwrap_or(Distribution::Zipfian),
        a.records,
        a.theta,
    );
    let clock = Clock::get();
    let t0 = clock.now_ns();
    let mut sum = 0u64;
    for _ in 0..ops {
        let n = chooser.next(&mut rng, a.records);
        let kl = key_of(a.keys, n, &mut key);
        if let Some(v) = map.get(&key[..kl]) {
            sum += v[0] as u64;
        }
    }
    let secs = (clock.now_ns() - t0) as f64 / 1e9;
    std::hint::black_box(sum);
    ops as f64 / secs / 1e6
}

/// (Mops, round trips per op, p50 ns) of one workload.
type FactorCell = (f64, f64, f64);

fn factors(a: &BenchArgs) -> Result<(), String> {
    let mut steps = Vec::new();
    let mut t = Techniques::BASELINE;
    t.cache = true;
    steps.push(("ART baseline (+cache)", t));
    t.lock_free_internal = true;
    steps.push(("+ lock-free internal", t));
    t.in_place_leaf = true;
    steps.push(("+ in-place leaf", t));
    t.rear_lock = true;
    steps.push(("+ rear lock", t));
    t.delegation = true;
    steps.push(("+ delegation", t));
    t.combining = true;
    steps.push(("+ combining", t));
    let workloads = [
        Workload::Load,
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::D,
    ];
    let mut all = Vec::new();
    let mut table: Vec<(String, Vec<FactorCell>)> = Vec::new();
    for (name, t) in &steps {
        let mut row = Vec::new();
        for w in workloads {
            let recs = run_soft(a, *t, w)?;
            let r = recs.last().cloned().ok_or("no record")?;
            row.push((r.mops, r.per_op.round_trips, r.latency.p50_ns));
            all.extend(recs);
        }
        table.push((name.to_string(), row));
    }
    println!(
        "factor analysis on the soft fabric: {} records, {} threads x {} coroutines, {:?} keys, zipfian θ={}",
        a.records, a.threads, a.coroutines, a.keys, a.theta
    );
    print!("{:<24}", "configuration");
    for w in workloads {
        print!(" {:>20}", format!("{} Mops (RT/op)", w.name()));
    }
    println!();
    for (name, row) in &table {
        print!("{name:<24}");
        for (m, rt, _) in row {
            print!(" {:>20}", format!("{m:.3} ({rt:.2})"));
        }
        println!();
    }
    if let Some(p) = &a.json {
        write_json(p, &all).map_err(|e| format!("writing {p}: {e}"))?;
    }
    Ok(())
}

pub fn run(a: &BenchArgs) -> Result<(), String> {
    validate(a)?;
    if a.factors {
        if a.fabric != FabricKind::Soft {
            return Err("--factors runs on --fabric soft in this build".into());
        }
        return factors(a);
    }
    let t = a.smart.techniques()?;
    let mut recs = match a.fabric {
        FabricKind::Soft => run_soft(a, t, a.workload)?,
        FabricKind::Sim => {
            return Err(
                "remora bench --fabric sim is not wired yet: the SMART index runs on the sim \
                 fabric's endpoints, but the YCSB driver for virtual time is still to do"
                    .into(),
            );
        }
        FabricKind::Verbs => return Err("remora bench --fabric verbs is not in this build".into()),
    };
    if a.compare_btreemap {
        let ops = a.operations.unwrap_or(a.records).max(100_000);
        let m = btreemap_c(a, ops);
        if let Some(r) = recs.iter_mut().find(|r| r.phase == "run") {
            r.notes.push(format!(
                "std BTreeMap YCSB-C on one core, same keys and distribution: {m:.3} Mops; \
                 this run / BTreeMap = {:.2}",
                r.mops / m
            ));
        }
    }
    print_table(&recs);
    for r in &recs {
        if r.phase == "run" {
            for n in r.notes.iter().filter(|n| n.contains("BTreeMap")) {
                println!("note: {n}");
            }
        }
    }
    if let Some(p) = &a.json {
        write_json(p, &recs).map_err(|e| format!("writing {p}: {e}"))?;
    }
    Ok(())
}

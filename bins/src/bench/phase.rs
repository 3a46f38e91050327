//! One phase (LOAD or a YCSB workload) of one worker: its coroutines, their latencies and
//! counts, and the JSON record made from all workers' results.
use super::BenchArgs;
use super::index::{ShermanSummary, Stats};
use super::resizes::ResizeWatch;
use super::ycsb::{Distribution, KeyChooser, OpKind, Rng, Workload};
use crate::report::{Latency, PerOp};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use remora::core::Snapshot;
use remora::core::index::KvIndex;
use remora::core::smart::SmartStats;
use remora::core::work::Work;
use remora::poller::clock::Clock;
use remora::poller::executor::join_all;
use remora::poller::sim::{ClientCtx, LlcStats, NvmStats};
use serde::Serialize;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    pub fn add(&mut self, o: &OpCounts) {
        self.reads += o.reads;
        self.updates += o.updates;
        self.inserts += o.inserts;
        self.scans += o.scans;
        self.scanned += o.scanned;
        self.misses += o.misses;
    }
    pub fn total(&self) -> u64 {
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
    pub fn from_delta(a: &SmartStats, b: &SmartStats) -> SmartSummary {
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
    pub fn add(&mut self, o: &SmartSummary) {
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
    /// Memory-node CPU time per operation in ns, the papers' "server CPU cost": on the sim,
    /// the handler threads' busy time from the phase's first start to its last end / ops;
    /// null where not measured.
    pub server_ns_per_op: Option<f64>,
    /// Bytes written to the memory nodes' persistent memory per operation: NIC-placed bytes
    /// plus 64 x the cache lines the handlers wrote back (sim `--persistent` only; null
    /// elsewhere), and its split.
    pub nvm_bytes_per_op: Option<f64>,
    pub nvm_per_op: Option<NvmPerOp>,
    /// NVM bytes stored (NIC WRITE and atomic payloads plus CPU stores, Table 1's measure)
    /// per operation of each type, where the phase tells them apart: its one write type
    /// takes all the bytes (reads write none: YCSB-C shows 0), so LOAD gives creates and
    /// update-only/A/B give updates; null in a phase with two write types, or off the sim's
    /// persistent nodes.
    pub nvm_store_bytes_by_op: Option<NvmByOp>,
    /// What the memory nodes' handlers did per operation in the sim's server CPU model
    /// (messages served, distinct cache lines touched, last-level cache misses); null off the
    /// sim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu: Option<ServerCpuPerOp>,
    pub smart: SmartSummary,
    pub sherman: ShermanSummary,
    /// CANRT's figures (`--index canrt` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canrt: Option<CanrtSummary>,
    /// Catfish's figures (`--index catfish` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spatial: Option<super::spatial::SpatialSummary>,
    /// A cluster run's process (`--cluster-size`): its rank and latency histogram.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_process: Option<super::cluster::ClusterPart>,
    pub notes: Vec<String>,
    /// Cluster shape, seed, model, factor step, warm-up and latency CDF (`meta.rs`).
    #[serde(flatten)]
    pub run: super::meta::RunInfo,
}

/// NVM writes per operation of a phase (see `remora::poller::sim::NvmStats`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct NvmPerOp {
    /// Media writes: NIC-placed bytes + 64 x lines written back.
    pub media: f64,
    /// Placed by the NIC, by verb.
    pub nic_write: f64,
    pub nic_write_imm: f64,
    pub nic_atomic: f64,
    /// Stored by the memory nodes' CPUs (handlers).
    pub cpu_store: f64,
    /// Cache lines the handlers wrote back (persist).
    pub lines_flushed: f64,
}

impl NvmPerOp {
    fn new(n: &NvmStats, ops: u64) -> NvmPerOp {
        let d = ops.max(1) as f64;
        NvmPerOp {
            media: n.media_bytes() as f64 / d,
            nic_write: n.nic_write as f64 / d,
            nic_write_imm: n.nic_write_imm as f64 / d,
            nic_atomic: n.nic_atomic as f64 / d,
            cpu_store: n.cpu_store as f64 / d,
            lines_flushed: n.lines_flushed as f64 / d,
        }
    }
}

/// The memory nodes' handler work per operation (see [`BenchRecord::server_cpu`]).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ServerCpuPerOp {
    pub messages: f64,
    pub lines: f64,
    pub llc_misses: f64,
}

impl ServerCpuPerOp {
    /// From the counts at a phase's start and end.
    pub fn new(first: Option<LlcStats>, last: Option<LlcStats>, ops: u64) -> Option<Self> {
        let d = first.zip(last).map(|(a, b)| b.since(&a))?;
        let n = ops.max(1) as f64;
        Some(ServerCpuPerOp {
            messages: d.invocations as f64 / n,
            lines: d.lines as f64 / n,
            llc_misses: d.misses as f64 / n,
        })
    }
}

/// Stored NVM bytes per operation type (see [`BenchRecord::nvm_store_bytes_by_op`]).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct NvmByOp {
    pub create: Option<f64>,
    pub update: Option<f64>,
    pub read: Option<f64>,
}

impl NvmByOp {
    fn new(n: &NvmStats, c: &OpCounts) -> NvmByOp {
        let bytes = (n.nic_write + n.nic_atomic + n.cpu_store) as f64;
        let only = |ops: u64, others: u64| (ops > 0 && others == 0).then(|| bytes / ops as f64);
        NvmByOp {
            create: only(c.inserts, c.updates),
            update: only(c.updates, c.inserts),
            read: only(c.reads, c.inserts + c.updates),
        }
    }
}

/// What one worker measured in one phase.
pub struct PhaseOut {
    /// The worker (client thread) that ran it.
    worker: usize,
    counts: OpCounts,
    hist: Histogram<u64>,
    snap: Snapshot,
    start_ns: u64,
    end_ns: u64,
    /// The memory nodes' handler busy time (ns) at start and end (sim only).
    busy_ns: Option<(u64, u64)>,
    /// The memory nodes' NVM write counts at start and end (sim with persistent nodes).
    nvm: Option<(NvmStats, NvmStats)>,
    /// The memory nodes' cache counts at start and end (sim only).
    llc: Option<(LlcStats, LlcStats)>,
    smart: SmartSummary,
    sherman: ShermanSummary,
    canrt: remora::core::canrt::ClientStats,
    key_bytes: u64,
    /// Latencies of the operations that overlapped a CANRT resize.
    during_resize: Histogram<u64>,
}

/// Shared state of a phase.
pub struct Phase<'a> {
    pub workload: Workload,
    pub dist: Distribution,
    pub records: u64,
    /// Operation budget (shared) or deadline.
    pub budget: Option<u64>,
    /// Deadline on the phase clock (0: none).
    pub deadline_ns: AtomicU64,
    pub issued: AtomicU64,
    pub inserted: &'a AtomicU64,
    pub next_load: AtomicU64,
    pub stop: AtomicBool,
    pub pb: ProgressBar,
    /// Mixed into every coroutine's seed: a warm-up phase draws other keys than the run.
    pub salt: u64,
}

impl<'a> Phase<'a> {
    pub fn new(
        workload: Workload,
        dist: Distribution,
        records: u64,
        budget: Option<u64>,
        inserted: &'a AtomicU64,
        pb: ProgressBar,
    ) -> Phase<'a> {
        Phase {
            workload,
            dist,
            records,
            budget,
            deadline_ns: AtomicU64::new(0),
            issued: AtomicU64::new(0),
            inserted,
            next_load: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            pb,
            salt: 0,
        }
    }

    /// LOAD and the run phase of `workload`, as the flags ask.
    pub fn pair(
        a: &BenchArgs,
        workload: Workload,
        inserted: &'a AtomicU64,
    ) -> (Distribution, Phase<'a>, Phase<'a>) {
        let dist = a.distribution.unwrap_or(if workload == Workload::D {
            Distribution::Latest
        } else {
            Distribution::Zipfian
        });
        let load = Phase::new(
            Workload::Load,
            dist,
            a.records,
            None,
            inserted,
            super::progress(a, a.records, "LOAD".into()),
        );
        let ops = a.operations.unwrap_or(if a.seconds.is_some() {
            u64::MAX
        } else {
            a.records
        });
        let run = Phase::new(
            workload,
            dist,
            a.records,
            (ops != u64::MAX).then_some(ops),
            inserted,
            super::progress(
                a,
                if ops == u64::MAX { 0 } else { ops },
                format!("YCSB-{}", workload.name()),
            ),
        );
        (dist, load, run)
    }
}

pub fn value_for(n: u64, size: usize, out: &mut [u8]) {
    let w = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
    for (i, b) in out[..size].iter_mut().enumerate() {
        *b = w[i % 8];
    }
}

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds are valid")
}

/// Where a phase's time comes from: the wall clock (soft), or the simulation's virtual
/// clock as seen by one client (sim).
pub enum Time<'c> {
    Wall(Clock),
    Virtual(&'c ClientCtx),
}

pub struct Ctx<'a> {
    pub a: &'a BenchArgs,
    pub time: Time<'a>,
    /// The resize clock of the CANRT server under test, if the bench runs it.
    pub resizes: ResizeWatch,
}

impl Ctx<'_> {
    pub fn now_ns(&self) -> u64 {
        match &self.time {
            Time::Wall(c) => c.now_ns(),
            Time::Virtual(c) => c.now_ns(),
        }
    }
    /// Bytes written to the memory nodes' persistent memory so far (sim with persistent
    /// nodes only).
    pub fn nvm(&self) -> Option<NvmStats> {
        match &self.time {
            Time::Wall(_) => None,
            Time::Virtual(c) if c.persistent() => Some(c.nvm_total()),
            Time::Virtual(_) => None,
        }
    }
    /// The memory nodes' handlers' cache counts so far (sim only).
    pub fn server_llc(&self) -> Option<LlcStats> {
        match &self.time {
            Time::Wall(_) => None,
            Time::Virtual(c) => Some(c.server_llc_total()),
        }
    }
    /// States client CPU work of the calling coroutine (sim only: on real CPUs the work
    /// takes its own time; see `Endpoint::charge`).
    pub fn charge(&self, w: Work) {
        if let Time::Virtual(c) = &self.time {
            c.charge(w);
        }
    }
    /// Pays the client CPU work the calling coroutine stated and has not paid yet (sim only),
    /// so that an operation's latency includes the work after its last post.
    pub async fn settle(&self) {
        if let Time::Virtual(c) = &self.time {
            c.settle().await;
        }
    }
    /// The memory nodes' handler-thread busy time so far (sim only: virtual CPU time).
    pub fn server_busy_ns(&self) -> Option<u64> {
        match &self.time {
            Time::Wall(_) => super::soft::local_server_cpu_ns(),
            Time::Virtual(c) => Some(c.server_busy_ns()),
        }
    }
}

/// Runs one coroutine of a phase against `idx`.
#[allow(clippy::too_many_arguments)]
async fn coroutine<I: KvIndex>(
    idx: &I,
    ctx: &Ctx<'_>,
    ph: &Phase<'_>,
    seed: u64,
    hist: &RefCell<Histogram<u64>>,
    during_resize: &RefCell<Histogram<u64>>,
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
            if d != 0 && local.is_multiple_of(16) && ctx.now_ns() >= d {
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
        let kl = a.key(n, &mut key);
        let k = &key[..kl];
        ctx.charge(Work::KeyGen(1));
        ctx.settle().await;
        let think_us = match op {
            OpKind::Read | OpKind::Scan => a.think_read_us,
            OpKind::Update | OpKind::Insert => a.think_write_us,
        };
        if think_us > 0
            && ph.workload != Workload::Load
            && let Time::Virtual(c) = &ctx.time
        {
            c.sleep(think_us * 1000).await;
        }
        let t0 = ctx.now_ns();
        let rc0 = ctx.resizes.now();
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
                let len = if ph.workload == Workload::Range {
                    a.scan_max.max(1)
                } else {
                    1 + rng.below(a.scan_max.max(1) as u64) as usize
                };
                c.scanned = idx
                    .scan(k, len, &mut |_, _| {})
                    .await
                    .map_err(|e| e.to_string())? as u64;
            }
        }
        ctx.settle().await;
        let lat = ctx.now_ns().saturating_sub(t0).max(1);
        let _ = hist.borrow_mut().record(lat);
        if ResizeWatch::overlapped(rc0, ctx.resizes.now()) {
            // A resize of the CANRT tree was under way when the operation started, or
            // began before it ended.
            let _ = during_resize.borrow_mut().record(lat);
        }
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

/// Runs one phase of one worker: `coroutines` coroutines, joined into one future.
pub async fn phase<I: KvIndex>(
    idx: &I,
    ctx: &Ctx<'_>,
    ph: &Phase<'_>,
    worker: usize,
    snapshot: &dyn Fn() -> Snapshot,
    stats: &dyn Fn() -> Stats,
) -> Result<PhaseOut, String> {
    let hist = RefCell::new(new_hist());
    let during_resize = RefCell::new(new_hist());
    let counts = RefCell::new(OpCounts::default());
    let key_bytes = RefCell::new(0u64);
    let s0 = snapshot();
    let st0 = stats();
    let start_ns = ctx.now_ns();
    let busy0 = ctx.server_busy_ns();
    let nvm0 = ctx.nvm();
    let llc0 = ctx.server_llc();
    let phase_salt = (ph.workload as u64 * 0x1000_0000) ^ ph.salt;
    let coros: Vec<_> = (0..ctx.a.coroutines)
        .map(|c| {
            let seed = ctx.a.sim.seed ^ phase_salt ^ ((worker * 4096 + c) as u64 + 1);
            coroutine(
                idx,
                ctx,
                ph,
                seed,
                &hist,
                &during_resize,
                &counts,
                &key_bytes,
            )
        })
        .collect();
    let results = join_all(coros).await;
    let end_ns = ctx.now_ns();
    let busy_ns = busy0.zip(ctx.server_busy_ns());
    let nvm = nvm0.zip(ctx.nvm());
    let llc = llc0.zip(ctx.server_llc());
    for r in results {
        r?;
    }
    let st1 = stats();
    let sh = |f: fn(&ShermanSummary) -> u64| f(&st1.sherman) - f(&st0.sherman);
    Ok(PhaseOut {
        worker,
        counts: counts.into_inner(),
        hist: hist.into_inner(),
        snap: snapshot() - s0,
        start_ns,
        end_ns,
        busy_ns,
        nvm,
        llc,
        smart: SmartSummary::from_delta(&st0.smart, &st1.smart),
        sherman: ShermanSummary {
            lock_handovers: sh(|s| s.lock_handovers),
            splits: sh(|s| s.splits),
            cache_hits: sh(|s| s.cache_hits),
            cache_misses: sh(|s| s.cache_misses),
        },
        canrt: canrt_delta(&st0.canrt, &st1.canrt),
        key_bytes: key_bytes.into_inner(),
        during_resize: during_resize.into_inner(),
    })
}

/// CANRT's client figures of a phase, summed over its workers.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CanrtSummary {
    /// Full data nodes reported to the server (each starts a resize).
    pub resize_requests: u64,
    /// Resize requests per insert, in percent (the paper's resize frequency).
    pub resize_percent: f64,
    /// READs of a meta word while waiting for a lock ticket (a turn notice was late).
    pub lock_polls: u64,
    /// Data-node READs retried (torn, or changed while read).
    pub torn_retries: u64,
    /// Our lock tickets the server skipped (taken again).
    pub skipped: u64,
    /// `Wait` messages sent (each answered by a turn notice: two server messages).
    pub turn_waits: u64,
    /// Operations that overlapped a resize (one under way when they started, or begun
    /// before they ended), and their latency.
    pub during_resize_ops: u64,
    pub during_resize_p50_ns: u64,
    pub during_resize_p99_ns: u64,
}

fn canrt_delta(
    a: &remora::core::canrt::ClientStats,
    b: &remora::core::canrt::ClientStats,
) -> remora::core::canrt::ClientStats {
    remora::core::canrt::ClientStats {
        torn_retries: b.torn_retries - a.torn_retries,
        lock_waits: b.lock_waits - a.lock_waits,
        refreshes: b.refreshes - a.refreshes,
        resize_requests: b.resize_requests - a.resize_requests,
        skipped: b.skipped - a.skipped,
        skip_requests: b.skip_requests - a.skip_requests,
        turn_waits: b.turn_waits - a.turn_waits,
    }
}

#[allow(clippy::too_many_arguments)]
pub fn record(
    a: &BenchArgs,
    index: &super::index::IndexCfg,
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
    let mut sherman = ShermanSummary::default();
    let mut key_bytes = 0u64;
    let mut canrt = CanrtSummary::default();
    let mut during_resize = new_hist();
    let start = outs.iter().map(|o| o.start_ns).min().unwrap_or(0);
    let end = outs.iter().map(|o| o.end_ns).max().unwrap_or(0);
    // Workers that share one compute node's state (SMART's cache): each reports that one
    // cache's bytes, so they are counted once per state, not once per worker.
    let sharing = if a.per_thread_state {
        1
    } else if a.fabric == crate::args::FabricKind::Sim {
        a.sim.clients_per_node
    } else {
        a.threads
    }
    .max(1);
    for o in outs {
        let _ = hist.add(&o.hist);
        counts.add(&o.counts);
        snap = snap + o.snap;
        let mut s = o.smart;
        if o.worker % sharing != 0 {
            s.cache_bytes = 0;
        }
        smart.add(&s);
        sherman.lock_handovers += o.sherman.lock_handovers;
        sherman.splits += o.sherman.splits;
        sherman.cache_hits += o.sherman.cache_hits;
        sherman.cache_misses += o.sherman.cache_misses;
        key_bytes += o.key_bytes;
        canrt.resize_requests += o.canrt.resize_requests;
        canrt.lock_polls += o.canrt.lock_waits;
        canrt.torn_retries += o.canrt.torn_retries;
        canrt.skipped += o.canrt.skipped;
        canrt.turn_waits += o.canrt.turn_waits;
        let _ = during_resize.add(&o.during_resize);
    }
    canrt.during_resize_ops = during_resize.len();
    canrt.during_resize_p50_ns = during_resize.value_at_quantile(0.5);
    canrt.during_resize_p99_ns = during_resize.value_at_quantile(0.99);
    canrt.resize_percent = 100.0 * canrt.resize_requests as f64 / (counts.inserts.max(1)) as f64;
    let ops = counts.total();
    // Busy time is monotone in time: from the first worker's start to the last one's end.
    let first = outs
        .iter()
        .min_by_key(|o| o.start_ns)
        .and_then(|o| o.busy_ns);
    let last = outs.iter().max_by_key(|o| o.end_ns).and_then(|o| o.busy_ns);
    let server_ns_per_op = first
        .zip(last)
        .map(|((b0, _), (_, b1))| b1.saturating_sub(b0) as f64 / ops.max(1) as f64);
    let server_cpu = ServerCpuPerOp::new(
        outs.iter()
            .min_by_key(|o| o.start_ns)
            .and_then(|o| o.llc.map(|l| l.0)),
        outs.iter()
            .max_by_key(|o| o.end_ns)
            .and_then(|o| o.llc.map(|l| l.1)),
        ops,
    );
    let nvm_first = outs.iter().min_by_key(|o| o.start_ns).and_then(|o| o.nvm);
    let nvm_last = outs.iter().max_by_key(|o| o.end_ns).and_then(|o| o.nvm);
    let nvm_per_op = nvm_first
        .zip(nvm_last)
        .map(|((n0, _), (_, n1))| NvmPerOp::new(&n1.since(&n0), ops));
    let nvm_store_bytes_by_op = nvm_first
        .zip(nvm_last)
        .map(|((n0, _), (_, n1))| NvmByOp::new(&n1.since(&n0), &counts));
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
        index: index.index_name().into(),
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
        techniques: index.techniques(),
        server_ns_per_op,
        nvm_bytes_per_op: nvm_per_op.map(|n| n.media),
        nvm_per_op,
        nvm_store_bytes_by_op,
        server_cpu,
        smart,
        sherman,
        canrt: (index.index_name() == "canrt").then_some(canrt),
        spatial: None,
        cluster_process: super::cluster::ClusterPart::new(a, &hist),
        notes,
        run: super::meta::RunInfo::with_cdf(&hist),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(worker: usize, cache_bytes: u64) -> PhaseOut {
        PhaseOut {
            worker,
            counts: OpCounts::default(),
            hist: new_hist(),
            snap: Snapshot::default(),
            start_ns: 0,
            end_ns: 1,
            busy_ns: None,
            nvm: None,
            llc: None,
            smart: SmartSummary {
                cache_bytes,
                ..SmartSummary::default()
            },
            sherman: ShermanSummary::default(),
            canrt: Default::default(),
            key_bytes: 0,
            during_resize: new_hist(),
        }
    }

    /// Each worker reports its compute node's whole cache: two nodes of two threads hold
    /// two caches, not four.
    #[test]
    fn cache_bytes_count_each_node_once() {
        let line = "--index smart --fabric sim --compute-nodes 2 --clients-per-node 2";
        #[derive(clap::Parser)]
        #[command(no_binary_name = true)]
        struct Line {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let a = <Line as clap::Parser>::try_parse_from(line.split_whitespace())
            .unwrap()
            .bench;
        let idx = super::super::index_cfg(&a).unwrap();
        let outs: Vec<PhaseOut> = (0..4).map(|w| out(w, 100 + (w / 2) as u64)).collect();
        let r = record(
            &a,
            &idx,
            Workload::C,
            "run",
            Distribution::Zipfian,
            &outs,
            "sim",
            vec![],
        );
        assert_eq!(r.smart.cache_bytes, 100 + 101);
        let per_thread = BenchArgs {
            per_thread_state: true,
            ..a.clone()
        };
        let r = record(
            &per_thread,
            &idx,
            Workload::C,
            "run",
            Distribution::Zipfian,
            &outs,
            "sim",
            vec![],
        );
        assert_eq!(r.smart.cache_bytes, 2 * (100 + 101));
    }
}

//! The JSON record of a phase, made from all workers' results: operation counts, the
//! per-index summaries, NVM and server-CPU figures per operation.
use super::{PhaseOut, new_hist};
use crate::bench::BenchArgs;
use crate::bench::index::ShermanSummary;
use crate::bench::ycsb::{Distribution, Workload};
use crate::report::{Latency, PerOp};
use remora::core::Snapshot;
use remora::core::smart::SmartStats;
use remora::poller::sim::{LlcStats, NvmStats};
use serde::Serialize;

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
    /// Leaf-lock acquisitions that met the lock held, and their time from the first failed
    /// CAS to the lock (ns, fabric clock).
    pub leaf_lock_waited: u64,
    pub leaf_lock_wait_ns: u64,
    /// Locks handed over by a client of the same compute node (no remote acquisition).
    pub handovers: u64,
    pub cache_leaf_hits: u64,
    pub cache_invalidations: u64,
    pub delegated_reads: u64,
    pub combined_writes: u64,
    /// Combining leaders' second writes, the writers they covered and their time (ns).
    pub second_writes: u64,
    pub second_write_covered: u64,
    pub second_write_ns: u64,
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
            leaf_lock_waited: b.leaf_lock_waited - a.leaf_lock_waited,
            leaf_lock_wait_ns: b.leaf_lock_wait_ns - a.leaf_lock_wait_ns,
            handovers: b.handovers - a.handovers,
            cache_leaf_hits: b.cache_leaf_hits - a.cache_leaf_hits,
            cache_invalidations: b.cache_invalidations - a.cache_invalidations,
            delegated_reads: b.delegated_reads - a.delegated_reads,
            combined_writes: b.combined_writes - a.combined_writes,
            second_writes: b.second_writes - a.second_writes,
            second_write_covered: b.second_write_covered - a.second_write_covered,
            second_write_ns: b.second_write_ns - a.second_write_ns,
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
        self.leaf_lock_waited += o.leaf_lock_waited;
        self.leaf_lock_wait_ns += o.leaf_lock_wait_ns;
        self.handovers += o.handovers;
        self.cache_leaf_hits += o.cache_leaf_hits;
        self.cache_invalidations += o.cache_invalidations;
        self.delegated_reads += o.delegated_reads;
        self.combined_writes += o.combined_writes;
        self.second_writes += o.second_writes;
        self.second_write_covered += o.second_write_covered;
        self.second_write_ns += o.second_write_ns;
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
    /// The latency of reads (and scans) alone, and of writes (updates and inserts) alone;
    /// null for a phase without that kind, and for Catfish's runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_reads: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_writes: Option<Latency>,
    /// Operations completed in the second half of the measured window over those in the
    /// first (`steady.rs`): ~1 for a run at a steady rate; below 0.8 its throughput fell as
    /// it ran (its Mops depend on its length). Null for a phase of too few operations, and
    /// for LOAD (whose rate follows the growing tree).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady: Option<f64>,
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
    pub spatial: Option<crate::bench::spatial::SpatialSummary>,
    /// A cluster run's process (`--cluster-size`): its rank and latency histogram.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_process: Option<crate::bench::cluster::ClusterPart>,
    pub notes: Vec<String>,
    /// Cluster shape, seed, model, factor step, warm-up and latency CDF (`meta.rs`).
    #[serde(flatten)]
    pub run: crate::bench::meta::RunInfo,
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
    /// Posted appends that waited for a credit (flow control), and the ns they waited.
    pub credit_waits: u64,
    pub credit_wait_ns: u64,
    /// Operations that overlapped a resize (one under way when they started, or begun
    /// before they ended), and their latency.
    pub during_resize_ops: u64,
    pub during_resize_p50_ns: u64,
    pub during_resize_p99_ns: u64,
}

#[allow(clippy::too_many_arguments)]
pub fn record(
    a: &BenchArgs,
    index: &crate::bench::index::IndexCfg,
    workload: Workload,
    phase: &'static str,
    dist: Distribution,
    outs: &[PhaseOut],
    fabric: &str,
    notes: Vec<String>,
) -> BenchRecord {
    let mut hist = new_hist();
    let mut by_kind = [new_hist(), new_hist()];
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
        for (h, oh) in by_kind.iter_mut().zip(&o.by_kind) {
            let _ = h.add(oh);
        }
        counts.add(&o.counts);
        snap = snap + o.snap;
        let mut s = o.smart;
        if o.worker % sharing != 0 {
            s.cache_bytes = 0;
        }
        smart.add(&s);
        sherman.locks_acquired += o.sherman.locks_acquired;
        sherman.lock_handovers += o.sherman.lock_handovers;
        sherman.splits += o.sherman.splits;
        sherman.cache_hits += o.sherman.cache_hits;
        sherman.cache_misses += o.sherman.cache_misses;
        sherman.speculative_tries += o.sherman.speculative_tries;
        sherman.speculative_hits += o.sherman.speculative_hits;
        sherman.group_retries += o.sherman.group_retries;
        sherman.sibling_reads += o.sherman.sibling_reads;
        key_bytes += o.key_bytes;
        canrt.resize_requests += o.canrt.resize_requests;
        canrt.lock_polls += o.canrt.lock_waits;
        canrt.torn_retries += o.canrt.torn_retries;
        canrt.skipped += o.canrt.skipped;
        canrt.turn_waits += o.canrt.turn_waits;
        canrt.credit_waits += o.canrt.credit_waits;
        canrt.credit_wait_ns += o.canrt.credit_wait_ns;
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
        latency_reads: (!by_kind[0].is_empty()).then(|| Latency::from_hist(&by_kind[0])),
        latency_writes: (!by_kind[1].is_empty()).then(|| Latency::from_hist(&by_kind[1])),
        steady: super::steady::of_phase(workload, outs.iter().map(|o| &o.timeline), start, end),
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
        cluster_process: crate::bench::cluster::ClusterPart::new(a, &hist),
        notes,
        run: crate::bench::meta::RunInfo::with_cdf(&hist),
    }
}

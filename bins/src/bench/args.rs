//! `remora bench` flags (`BenchArgs` and its per-index groups) and their checks.

use super::*;

/// `--canrt-ack`: when a CANRT write returns (see `remora::core::canrt::WriteAck`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CanrtAck {
    /// Once the server applied and persisted the item: durable, linearizable (default).
    Applied,
    /// Once the append's WRITE_WITH_IMM completed: the paper's count, weaker.
    Posted,
}

/// `--canrt-growth`: how CANRT's memory node grows the tree (see
/// `remora::core::canrt::Growth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CanrtGrowth {
    /// Split the full node in half in place (remora's default).
    Split,
    /// The paper's: one data node per `k`-character prefix, a full node adds a level.
    WholeLevel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IndexKind {
    /// SMART, the adaptive radix tree on disaggregated memory.
    Smart,
    /// Sherman, the write-optimized B+tree (8-byte integer keys).
    Sherman,
    /// FG+, Sherman's baseline: host-memory locks, whole-page write-back, index cache.
    FgPlus,
    /// CHIME, Sherman with hopscotch-hash leaves (8-byte integer keys, values up to 8 bytes).
    Chime,
    /// CANRT, the client-active persistent radix tree (8-byte integer keys).
    Canrt,
    /// Erda, the log-structured remote NVM hash store (no scans: not workload E).
    Erda,
    /// Erda's Redo Logging baseline: writes and reads are SENDs to the server, which logs
    /// writes and applies them asynchronously to Erda's hash table.
    ErdaRedo,
    /// Erda's Read-After-Write baseline: a write WRITEs its record into a ring slot the server
    /// granted and READs it back; reads are SENDs as in Redo Logging.
    ErdaRaw,
    /// Catfish, the R-tree: the spatial benchmark (`spatial.rs`; workloads C and B).
    Catfish,
    /// WORT, CANRT's baseline: a persistent radix tree behind request rings (server reply).
    Wort,
    /// WOART, WORT with adaptive nodes, behind the same request rings.
    Woart,
}

impl IndexKind {
    /// Erda or one of its baselines (one hash table, one key and value limit).
    pub fn is_erda(self) -> bool {
        matches!(
            self,
            IndexKind::Erda | IndexKind::ErdaRedo | IndexKind::ErdaRaw
        )
    }
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The index, or several comma-separated (each runs the same workload in turn, and one
    /// table compares them).
    #[arg(
        long = "index",
        value_enum,
        value_delimiter = ',',
        default_value = "smart"
    )]
    pub indexes: Vec<IndexKind>,
    /// The index of the run in progress (one of `indexes`).
    #[arg(skip = IndexKind::Smart)]
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
    /// Items the zipfian's ranks run over, each rank hashed onto a loaded key (YCSB's
    /// scrambled zipfian). Default: YCSB's 10^10 items at θ = 0.99 (the record count at other
    /// θ). The hottest key's share is 1/ζ(items, θ): 3.8% at 10^10, 4.2% over the Sherman
    /// paper's 1 billion keys (seeds/002 §3), 4.9% over the 64 Mi-key space of its authors'
    /// benchmark (`kKeySpace`, thustorage/Sherman test/benchmark.cpp)
    #[arg(long)]
    pub zipf_items: Option<u64>,
    #[arg(long, value_enum, default_value = "int")]
    pub keys: KeyType,
    /// Records loaded before the run.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Operations of the run phase (default: as many as records, unless --seconds).
    #[arg(long)]
    pub operations: Option<u64>,
    /// Run for this many seconds instead of a fixed operation count.
    #[arg(long, value_parser = crate::args::positive_seconds)]
    pub seconds: Option<f64>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 8)]
    pub value_size: usize,
    /// Longest scan of workload E (lengths uniform in 1..=max).
    #[arg(long, default_value_t = 100)]
    pub scan_max: usize,
    /// Worker threads (client threads of one compute node), each with its own endpoint and
    /// index handle, sharing the node's per-node state.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Coroutines per worker thread.
    #[arg(long, default_value_t = 4)]
    pub coroutines: usize,
    /// A memnode control socket to use instead of an in-process memory node (soft); the
    /// memory nodes' host:port, comma-separated (verbs).
    #[arg(long)]
    pub connect: Option<String>,
    /// RDMA device name (verbs), e.g. rxe0 or mlx5_0; default: whichever the route picks.
    #[arg(long)]
    pub device: Option<String>,
    /// Region of the in-process (or simulated) memory node, in MiB (default: sized from the
    /// records, operations and value size).
    #[arg(long)]
    pub region_mib: Option<u64>,
    /// Do not pin worker threads.
    #[arg(long)]
    pub no_pin: bool,
    /// Core for the in-process memory node's server thread (default: the first core the
    /// workers leave free; a warning if none is).
    #[arg(long)]
    pub server_core: Option<usize>,
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
    /// Also run YCSB-C on the same keys against congee, an in-memory ART, on one core.
    #[arg(long)]
    pub compare_art: bool,
    /// Run the factor analysis over LOAD, A, B, C, D and print one table: for SMART the ART
    /// baseline then each technique added; for Sherman FG+ then each technique added.
    #[arg(long)]
    pub factors: bool,
    /// With --factors: the workloads to run (default LOAD,A,B,C,D).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub workloads: Vec<Workload>,
    /// Operations of the workload run before the measured phase, unmeasured, so caches are
    /// warm (Catfish: so its adaptive back-off is past its start; sim; all clients start the
    /// measured phase together after it).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// With --seconds (sim): the measured window opens this many virtual seconds into the
    /// run phase, and the clients do not pause at its start: whatever state the workload
    /// has built by then (lock queues, backlogs) is the state measured. A --warmup phase
    /// ends at a barrier where every client stops and queues drain, so a system whose
    /// contention builds up for tens of milliseconds (Sherman's FG+ under YCSB-A) restarts
    /// from empty queues after it and is measured on its way down, not where it settles.
    #[arg(long, value_parser = crate::args::positive_seconds)]
    pub warmup_seconds: Option<f64>,
    /// Run once per value of one parameter: `clients=8,16,32` (client threads in all; on the
    /// sim spread over the compute nodes), or clients-per-node, coroutines, threads,
    /// value-size, records.
    #[arg(long, value_name = "NAME=V1,V2,...")]
    pub sweep: Option<String>,
    /// Print nothing (`remora repro` collects the records itself).
    #[arg(skip)]
    pub silent: bool,
    /// Print Erda's Table 1 instead of a YCSB run: NVM bytes written per create, update and
    /// delete for each `--index` (erda, erda-redo, erda-raw), measured on a simulated
    /// persistent memory node, beside remora's and the paper's formulas.
    #[arg(long)]
    pub table1: bool,
    /// Churn instead of a YCSB run (`churn.rs`): after loading `--records` keys, each of
    /// `--operations` operations deletes one live key and inserts a new one; prints the
    /// remote bytes in use (every memory node's allocator cursor) over the run, then checks
    /// that every live key reads back exactly. Sim and soft fabrics.
    #[arg(long)]
    pub churn: bool,
    /// With --churn: how many times the bytes in use are sampled over the run.
    #[arg(long, default_value_t = 20)]
    pub churn_samples: u64,
    /// With --churn: write the chart of bytes in use over operations to STEM.svg and STEM.png.
    #[arg(long, value_name = "STEM")]
    pub churn_chart: Option<String>,
    /// With --table1: the value sizes (default 16,32,...,4096).
    #[arg(long, value_delimiter = ',')]
    pub table1_sizes: Vec<usize>,
    /// With --table1: keys created, updated and deleted per cell.
    #[arg(long, default_value_t = 64)]
    pub table1_keys: u64,
    /// Give every client thread its own copy of the state the papers share per compute node
    /// (SMART's radix cache and delegation/combining table, Sherman's local lock table and
    /// index cache) instead of one per compute node (sim) or per process (soft, verbs): the
    /// "before" of the sharing.
    #[arg(long)]
    pub per_thread_state: bool,
    /// Load the keys by inserting them through the index (the LOAD phase measured) even where
    /// the run measures another workload. By default, on the sim, SMART (8-byte and string keys),
    /// Sherman and FG+ (`bulk.rs`), CHIME (8-byte keys, `bulk_chime.rs`), CANRT, WORT and WOART (`bulk_canrt.rs`, `bulk_wort.rs`),
    /// Erda (`bulk_erda.rs`) and Catfish (`spatial/load.rs`) are bulk-loaded instead: the
    /// same keys and values, written as the index's image at memory speed (a memory node's
    /// server cache starts as the loading server left it); the run's records then have no
    /// LOAD record, and their notes say how the keys were loaded.
    #[arg(long)]
    pub no_bulk_load: bool,
    /// Bulk-load where the index has a bulk loader (bench's default already). For `remora
    /// repro`, which inserts the keys at `--scale quick`: a series whose command says
    /// `--bulk-load` is bulk-loaded there too (CANRT's range queries, whose 200,000 keys
    /// grown the paper's way take minutes of inserts).
    #[arg(long, conflicts_with = "no_bulk_load")]
    pub bulk_load: bool,
    /// After a bulk load, leave the compute nodes' index caches cold (SMART's radix cache,
    /// Sherman's and CHIME's index cache). By default each compute node's cache is filled before the
    /// warm-up, top down, as far as its capacity goes (`warm_cache` in core's `smart/warm.rs`
    /// and `sherman/warm.rs`): the cache the clients' inserts of the same keys would have
    /// left, as the papers' runs load their keys by inserting them.
    #[arg(long)]
    pub cold_cache: bool,
    /// Keep the bulk-loaded cluster's memory for the next run that loads the same (set for
    /// the points of a `--sweep` and by `remora repro`): load once, measure many.
    #[arg(skip)]
    pub load_once: bool,
    #[command(flatten)]
    pub smart: SmartFlags,
    #[command(flatten)]
    pub sherman: ShermanFlags,
    /// CANRT: lock waiters READ the meta word (backing off) instead of asking the server
    /// for a turn notice (the comparison for the notices).
    #[arg(long)]
    pub canrt_poll: bool,
    /// CANRT: when a write returns. `applied` (default): once the server applied and
    /// persisted it, durable and linearizable. `posted`: once its WRITE_WITH_IMM is posted
    /// (unsignaled: at its doorbell on verbs and on the sim with `unsignaled_at_post`, as in
    /// the canrt profile; at its completion elsewhere), as the CANRT paper counts a write; weaker (not linearizable, an item the server
    /// refuses is lost), for comparison with the paper's figures only.
    #[arg(long, value_enum, default_value = "applied")]
    pub canrt_ack: CanrtAck,
    /// CANRT: data nodes a range scan READs per doorbell (1 to 4). 4 (the default) overlaps
    /// consecutive nodes' READs; 1 reads one node per round trip, as the paper's range query
    /// (§4.4: one request per data node).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub canrt_scan_batch: Option<u32>,
    /// CANRT: DataItem slots per data node (2 to 32; default 32, the 32-bit bitmap of the
    /// 8-byte meta word). Fewer slots leave fewer keys per node READ (the range rows' fill).
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=32))]
    pub canrt_slots: Option<u32>,
    /// CANRT: how a full data node grows the tree. `split` (remora's default) halves the
    /// full node in place, so nodes stay half to fully used; `whole-level` is the paper's
    /// geometry (§3.1, §3.5 addHeight): a data node holds the keys sharing a `k`-character
    /// prefix and a full node adds a level, so random string keys leave a few per node.
    #[arg(long, value_enum, default_value = "split")]
    pub canrt_growth: CanrtGrowth,
    /// Erda: size its log so that the run cleans it (regions of twice the records' share,
    /// cleaning after half a region of appends), as a `--seconds` run always does. Without
    /// it, a fixed-count run's regions are sized so that its appends (records + warm-up +
    /// operations) stay under the cleaning threshold, and below the point where the server
    /// starts zeroing the next region ahead: the paper's YCSB figures exclude cleaning (it
    /// measures cleaning apart, its Fig. 26).
    #[arg(long)]
    pub erda_clean: bool,
    /// Sim only: virtual microseconds each client thread waits before each read it issues
    /// (think time, outside the operation's measured latency). 0 (default): closed loop.
    /// The Erda paper's released latency clients pace their reads so (`usleep(100)`).
    #[arg(long, default_value_t = 0)]
    pub think_read_us: u64,
    /// Sim only: the same before each write (update, insert, delete); the Erda paper's
    /// released latency clients wait `usleep(500)` before each write.
    #[arg(long, default_value_t = 0)]
    pub think_write_us: u64,
    /// Sim only: each think time (`--think-read-us`, `--think-write-us`) lasts up to this
    /// many microseconds more, uniform and seeded: a Linux usleep overshoots its time by up
    /// to the thread's timer slack (50 µs by default, prctl(2) PR_SET_TIMERSLACK), so paced
    /// clients drift apart instead of waking in step. 0 (default): exact think times.
    #[arg(long, default_value_t = 0)]
    pub think_slack_us: u64,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub spatial: spatial::SpatialFlags,
    #[command(flatten)]
    pub cluster: cluster::ClusterFlags,
}

/// SMART's run-time technique switches.
#[derive(Debug, Clone, Args)]
pub struct SmartFlags {
    /// Start from the "ART on disaggregated memory" baseline (every technique off);
    /// `--with` then adds techniques back.
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
    /// No read delegation (concurrent reads of one key on a compute node each go remote).
    #[arg(long)]
    pub no_delegation: bool,
    /// No write combining (concurrent writes of one key on a compute node each go remote).
    #[arg(long)]
    pub no_combining: bool,
    /// No compute-side cache: SMART's radix cache, Sherman's index cache.
    #[arg(long)]
    pub no_cache: bool,
    /// With --baseline: add the named techniques (comma-separated: lock-free, in-place,
    /// rear-lock, delegation, combining, cache). With --index chime: `delegation` and
    /// `combining`, SMART's per-compute-node read delegation and write combining on CHIME
    /// (off by default; on in the authors' build and in `remora repro chime`'s CHIME bars);
    /// `merge`, leaf merges; `lean-update`, remora's updates that READ only the key's
    /// neighbourhood under the lock (`ChimeConfig::lean_update`); `prefix-free`, remora's
    /// writes that READ and WRITE no leaf prefix (`ChimeConfig::prefix_free`);
    /// `paced-locks`, remora's lock waits that pause one round trip, timed on the failed
    /// CAS, before the next (`ShermanConfig::paced_locks`).
    #[arg(long, value_delimiter = ',')]
    pub with: Vec<String>,
    /// Cache capacity per compute node (per client thread with --per-thread-state), in MiB:
    /// SMART's radix cache, Sherman's index cache.
    #[arg(long, default_value_t = 64.0, value_parser = crate::args::positive_f64)]
    pub cache_mib: f64,
    /// SMART: N one-bit locks per memory node in NIC device memory (masked CAS) for the
    /// internal-node locks of lock-based nodes and the leaf locks of in-place leaves without
    /// the rear lock, as the SMART authors' code takes them (`SmartConfig::onchip_locks`);
    /// 0: each lock in its object's own word. For single runs; --factors sets its own
    /// (--factor-locks).
    #[arg(long, default_value_t = 0)]
    pub onchip_locks: u64,
    /// SMART --factors: where the steps before the rear embedded lock take their locks.
    /// `onchip` (default): the authors' table of 1-bit locks in NIC device memory (1M for 60M
    /// keys: `SmartConfig::onchip_locks`), scaled to --records; `host`: each lock in its
    /// object's own word.
    #[arg(long, value_enum, default_value = "onchip")]
    pub factor_locks: FactorLocks,
    /// SMART: with in-place leaves and without write combining, hand a leaf's lock between
    /// the clients of a compute node instead of unlocking (up to 9 in a row), as the SMART
    /// authors' in-place steps do (`SmartConfig::leaf_handover`). For single runs; --factors
    /// turns it on for its steps unless --factor-no-leaf-handover.
    #[arg(long)]
    pub leaf_handover: bool,
    /// SMART, Sherman, FG+ and CHIME: how a lock wait retries: `auto` (default) is the
    /// index's own (SMART spins with write combining and backs off without,
    /// `SmartConfig::spin_locks`; Sherman, FG+ and CHIME spin, `ShermanConfig::spin_locks`);
    /// `spin` retries the CAS at once, as the authors' code does; `backoff` pauses
    /// exponentially from 200 ns to `--lock-max-backoff-ns`.
    #[arg(long, value_enum, default_value = "auto")]
    pub lock_wait: LockWait,
    /// Backing off (or paced): the longest pause of a lock wait, in nanoseconds (default 100000,
    /// `LeaseConfig::max_backoff_ns`).
    #[arg(long)]
    pub lock_max_backoff_ns: Option<u64>,
    /// SMART and CHIME: the write-combining leader writes its own value, then the latest value queued
    /// meanwhile in a second write, instead of picking up the latest queued value once it
    /// holds the leaf's lock and writing once as the SMART authors' leader does (the default,
    /// `SmartConfig::combine_latest`).
    #[arg(long)]
    pub no_combine_latest: bool,
    /// SMART --factors: no leaf-lock hand-over in the in-place steps (the authors' code hands
    /// leaf locks over, `TREE_TEST_HOCL_HANDOVER` in `in_place_update_leaf`, in every step
    /// before write combining).
    #[arg(long)]
    pub factor_no_leaf_handover: bool,
}

/// How SMART's lock waits retry (`--lock-wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LockWait {
    /// Spin with write combining, back off without.
    Auto,
    /// Retry the CAS at once.
    Spin,
    /// Back off exponentially.
    Backoff,
}

/// Where SMART's factor steps before the rear lock take their locks (`--factor-locks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FactorLocks {
    /// The authors' hashed 1-bit locks in NIC device memory.
    Onchip,
    /// Each lock in its object's own word in host memory.
    Host,
}

/// The on-chip lock count of the SMART authors' table (1M locks for the paper's 60M keys)
/// scaled to `records` keys as the quick setup scales the cache (`repro::Scale::llc_lines`):
/// proportionally, at least 64 (one word), at most the authors' count.
pub fn scaled_onchip_locks(records: u64) -> u64 {
    let full = remora::core::smart::AUTHORS_ONCHIP_LOCKS;
    let scaled = (full as f64 * records as f64 / PAPER_SMART_KEYS as f64).round() as u64;
    scaled.clamp(64, full).next_multiple_of(64)
}

/// The SMART paper's key count (60M: its YCSB runs, §5.1).
const PAPER_SMART_KEYS: u64 = 60_000_000;

impl SmartFlags {
    pub fn techniques(&self) -> Result<Techniques, String> {
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

/// Sherman's run-time technique switches (with `--index sherman`; `--index fg-plus` turns
/// them all off but the cache).
#[derive(Debug, Clone, Args)]
pub struct ShermanFlags {
    /// Global locks in host memory instead of NIC device memory.
    #[arg(long)]
    pub no_onchip: bool,
    /// No local lock table / hand-over.
    #[arg(long)]
    pub no_hierarchical: bool,
    /// Sherman/CHIME: at most this many hand-overs of one lock in a row between threads of
    /// a compute node before its global lock is released (default 7: the authors' code serves
    /// at most `kMaxHandOverTime` = 8 holders per global acquisition, the CASing one
    /// included; seeds/INDEX.md, `ShermanConfig::handover_cap`). 0 keeps the local lock table and its queue but hands nothing
    /// over, which isolates the hand-over's effect.
    #[arg(long)]
    pub handover_cap: Option<u32>,
    /// Unlock in its own doorbell after the write-back.
    #[arg(long)]
    pub no_combination: bool,
    /// Write back whole pages instead of single entries.
    #[arg(long)]
    pub no_two_level: bool,
    /// Sherman page size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub page_size: usize,
    /// CHIME (`--index chime`): Sherman's leaves instead of hopscotch leaves (every other
    /// CHIME switch is then moot: the run is Sherman's).
    #[arg(long)]
    pub no_hopscotch: bool,
    /// CHIME: the lock holder READs the whole leaf, not the groups the vacancy bitmap names.
    #[arg(long)]
    pub no_vacancy_lock: bool,
    /// CHIME: no speculative reads (no hotspot cache; all of --cache-mib to the index cache).
    #[arg(long)]
    pub no_speculative: bool,
    /// CHIME: the index cache holds level-1 pages only, as Sherman's own (not the authors'
    /// `CACHE_MORE_INTERNAL_NODE`).
    #[arg(long)]
    pub no_cache_upper: bool,
}

impl BenchArgs {
    /// Longest key the index takes: Erda's (and its baselines') buckets hold keys of up to 16 bytes inline, so
    /// its string keys are the same YCSB keys recoded to fit (`ycsb::key_of_within`).
    pub(crate) fn key_limit(&self) -> usize {
        if self.index.is_erda() || self.sixteen_byte_keys() {
            16
        } else {
            32
        }
    }

    /// CANRT (formatted with 16-byte keys), WORT and WOART run `--keys string` on the CANRT
    /// paper's keys: random strings of exactly 16 bytes (`ycsb::string_key16`).
    pub(crate) fn sixteen_byte_keys(&self) -> bool {
        self.keys == KeyType::String
            && matches!(
                self.index,
                IndexKind::Canrt | IndexKind::Wort | IndexKind::Woart
            )
    }

    /// Writes key number `n` of the run into `out`; returns its length.
    pub(crate) fn key(&self, n: u64, out: &mut [u8; 32]) -> usize {
        if self.sixteen_byte_keys() {
            ycsb::string_key16(n, out)
        } else {
            ycsb::key_of_within(self.keys, n, out, self.key_limit())
        }
    }
}

pub(super) fn validate(a: &BenchArgs) -> Result<(), String> {
    cluster::validate(a)?;
    if a.threads == 0 || a.coroutines == 0 {
        return Err("--threads and --coroutines must be at least 1".into());
    }
    if a.records == 0 {
        return Err("--records must be at least 1".into());
    }
    if !(a.theta > 0.0 && a.theta < 1.0) {
        return Err(format!("--theta must be in (0, 1), got {}", a.theta));
    }
    if a.zipf_items.is_some_and(|n| n < 2) {
        return Err("--zipf-items must be at least 2".into());
    }
    if a.index.is_erda() {
        if a.value_size == 0 || a.value_size > 4096 {
            return Err("--value-size must be 1..=4096 for Erda and its baselines".into());
        }
    } else if a.value_size == 0 || a.value_size > 3000 {
        return Err("--value-size must be 1..=3000".into());
    }
    if let Some(s) = a.seconds
        && !(s.is_finite() && s > 0.0)
    {
        return Err("--seconds must be positive".into());
    }
    if a.index.is_erda()
        && [Workload::E, Workload::Range]
            .iter()
            .any(|w| a.workload == *w || a.workloads.contains(w))
    {
        return Err("Erda is a hash store: it has no range scans for workload E".into());
    }
    let name = match a.index {
        IndexKind::Smart => "SMART",
        IndexKind::Sherman => "Sherman",
        IndexKind::FgPlus => "FG+",
        IndexKind::Chime => "CHIME",
        IndexKind::Canrt => "CANRT",
        IndexKind::Erda => "Erda",
        IndexKind::ErdaRedo => "Erda's Redo Logging baseline",
        IndexKind::ErdaRaw => "Erda's Read-After-Write baseline",
        IndexKind::Catfish => "Catfish",
        IndexKind::Wort => "WORT",
        IndexKind::Woart => "WOART",
    };
    if a.canrt_ack == CanrtAck::Posted && a.index != IndexKind::Canrt {
        return Err("--canrt-ack posted is for --index canrt".into());
    }
    if a.canrt_scan_batch.is_some() && a.index != IndexKind::Canrt {
        return Err("--canrt-scan-batch is for --index canrt".into());
    }
    if a.canrt_growth != CanrtGrowth::Split && a.index != IndexKind::Canrt {
        return Err("--canrt-growth is for --index canrt".into());
    }
    if a.canrt_slots.is_some() && a.index != IndexKind::Canrt {
        return Err("--canrt-slots is for --index canrt".into());
    }
    if a.index == IndexKind::Canrt && a.value_size > remora::core::canrt::MAX_VALUE {
        return Err(format!(
            "{name} values are at most {} bytes: --value-size 1..={}",
            remora::core::canrt::MAX_VALUE,
            remora::core::canrt::MAX_VALUE
        ));
    }
    if matches!(
        a.index,
        IndexKind::Sherman | IndexKind::FgPlus | IndexKind::Canrt
    ) {
        if a.keys == KeyType::String && a.index != IndexKind::Canrt {
            return Err(format!("{name} keys are 8-byte integers: use --keys int"));
        }
        if a.value_size > 256 {
            return Err(format!(
                "{name} values are at most 256 bytes: --value-size 1..=256"
            ));
        }
    }
    // (WORT and WOART take keys of up to 16 bytes: `--keys string` gives them 16.)
    if matches!(a.index, IndexKind::Wort | IndexKind::Woart)
        && a.value_size > remora::core::wort::VALUE_MAX
    {
        return Err(format!(
            "{name} values are at most 256 bytes: --value-size 1..=256"
        ));
    }
    let ps = a.sherman.page_size;
    if matches!(a.index, IndexKind::Sherman | IndexKind::FgPlus)
        && !(ps.is_multiple_of(64) && (256..=65536).contains(&ps))
    {
        return Err(format!(
            "--page-size {ps}: Sherman pages are a multiple of 64 from 256 to 65536 bytes"
        ));
    }
    if a.compare_art && a.keys == KeyType::String {
        return Err("--compare-art needs --keys int (congee takes 8-byte keys)".into());
    }
    if let Some(p) = &a.json {
        crate::report::check_writable(p)?;
    }
    crate::args::check_fabric_flags(&crate::args::FabricFlags {
        fabric: a.fabric,
        sim: &a.sim,
        connect: a.connect.is_some(),
        threads: a.threads,
        no_pin: a.no_pin,
        server_core: a.server_core.is_some(),
        region: a.region_mib.is_some(),
    })?;
    if a.device.is_some() && a.fabric != FabricKind::Verbs {
        return Err("--device names an RDMA device: it is for --fabric verbs".into());
    }
    if (a.think_read_us > 0 || a.think_write_us > 0 || a.think_slack_us > 0)
        && a.fabric != FabricKind::Sim
    {
        return Err(
            "--think-read-us / --think-write-us / --think-slack-us pace sim clients: they need \
             --fabric sim"
                .into(),
        );
    }
    if a.index == IndexKind::Catfish {
        spatial::validate(a)?;
    }
    if a.warmup > 0 && a.fabric != FabricKind::Sim {
        return Err("--warmup runs on --fabric sim".into());
    }
    if a.warmup_seconds.is_some() && (a.fabric != FabricKind::Sim || a.seconds.is_none()) {
        return Err(
            "--warmup-seconds opens a --seconds run's window late: it needs --seconds \
                    and --fabric sim"
                .into(),
        );
    }
    if a.warmup_seconds.is_some() && a.operations.is_some() {
        return Err(
            "--warmup-seconds times the run's window: an --operations budget could \
                    end the run before the window opens"
                .into(),
        );
    }
    Ok(())
}

//! `remora bench`: the YCSB driver.
//!
//! Loads `--records` keys (YCSB LOAD; on the sim SMART, Sherman and FG+ are bulk-loaded
//! where the load is not measured, `bulk.rs`), then runs the chosen workload for `--operations`
//! operations or `--seconds` seconds. On `--fabric soft` every worker thread is one
//! compute-node client with its own endpoint and index handle, running `--coroutines`
//! coroutines; on `--fabric sim` the clients are `--compute-nodes x --clients-per-node`
//! simulated client threads in virtual time; on `--fabric verbs` every worker thread is one
//! client with its own verbs endpoint on the `--connect` memory nodes (`verbs.rs`; one-sided
//! indexes only). Any index implementing `KvIndex` plugs in
//! (`index.rs`); SMART's and Sherman's techniques are flags. Prints a table and writes one
//! JSON record per phase.
pub(crate) mod bulk;
mod churn;
pub(crate) mod cluster;
#[cfg(test)]
mod cpu_calibration;
pub(crate) mod index;
pub(crate) mod meta;
pub(crate) mod phase;
pub(crate) mod resizes;
mod sim;
mod soft;
mod spatial;
pub(crate) mod sweep;
mod table1;
pub(crate) mod tcp;
mod verbs;
mod ycsb;

use crate::args::{FabricKind, SimArgs};
use crate::report::write_json;
use clap::{Args, ValueEnum};
use index::IndexCfg;
use indicatif::{ProgressBar, ProgressStyle};
use phase::{BenchRecord, value_for};
use remora::core::canrt::{CanrtConfig, WriteAck};

/// `--canrt-ack`: when a CANRT write returns (see `remora::core::canrt::WriteAck`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CanrtAck {
    /// Once the server applied and persisted the item: durable, linearizable (default).
    Applied,
    /// Once the append's WRITE_WITH_IMM completed: the paper's count, weaker.
    Posted,
}
use remora::core::chime::ChimeConfig;
use remora::core::erda::baseline::Scheme;
use remora::core::erda::{ErdaClientConfig, ErdaConfig};
use remora::core::sherman::ShermanConfig;
use remora::core::smart::{KeyMode, SmartConfig, Techniques};
use remora::core::wort::Kind;
use remora::poller::clock::Clock;
use std::collections::BTreeMap;
use std::io::Write;
use ycsb::{Distribution, KeyChooser, KeyType, Rng, Workload, key_of};

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
    /// warm (sim; all clients start the measured phase together after it).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
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
    /// the run measures another workload. By default, on the sim, SMART (8-byte keys),
    /// Sherman and FG+ are bulk-loaded instead (`bulk.rs`): the same keys and values,
    /// written as the index's image at memory speed; the run's records then have no LOAD
    /// record, and their notes say how the keys were loaded.
    #[arg(long)]
    pub no_bulk_load: bool,
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
    /// rear-lock, delegation, combining, cache).
    #[arg(long, value_delimiter = ',')]
    pub with: Vec<String>,
    /// Cache capacity per compute node (per client thread with --per-thread-state), in MiB:
    /// SMART's radix cache, Sherman's index cache.
    #[arg(long, default_value_t = 64.0, value_parser = crate::args::positive_f64)]
    pub cache_mib: f64,
}

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

/// The index under test, from the flags.
fn index_cfg(a: &BenchArgs) -> Result<IndexCfg, String> {
    match a.index {
        IndexKind::Smart => {
            let t = a.smart.techniques()?;
            Ok(IndexCfg::Smart {
                cfg: smart_config(a, t),
                t,
            })
        }
        IndexKind::Sherman | IndexKind::FgPlus => {
            let base = if a.index == IndexKind::FgPlus {
                ShermanConfig::fg_plus()
            } else {
                ShermanConfig::sherman()
            };
            let f = &a.sherman;
            let cfg = ShermanConfig {
                page_size: f.page_size,
                value_size: a.value_size,
                onchip_locks: base.onchip_locks && !f.no_onchip,
                hierarchical_locks: base.hierarchical_locks && !f.no_hierarchical,
                combine_commands: base.combine_commands && !f.no_combination,
                two_level_versions: base.two_level_versions && !f.no_two_level,
                index_cache: !a.smart.no_cache,
                cache_bytes: (a.smart.cache_mib * (1 << 20) as f64) as usize,
                ..base
            };
            Ok(IndexCfg::Sherman {
                cfg,
                name: if a.index == IndexKind::FgPlus {
                    "fg+"
                } else {
                    "sherman"
                },
            })
        }
        IndexKind::Chime => {
            let f = &a.sherman;
            let base = ChimeConfig::chime();
            let cfg = ChimeConfig {
                sherman: ShermanConfig {
                    page_size: f.page_size,
                    value_size: a.value_size,
                    onchip_locks: !f.no_onchip,
                    hierarchical_locks: !f.no_hierarchical,
                    combine_commands: !f.no_combination,
                    two_level_versions: !f.no_two_level,
                    index_cache: !a.smart.no_cache,
                    ..base.sherman
                },
                hopscotch: !f.no_hopscotch,
                vacancy_lock: !f.no_vacancy_lock,
                speculative: !f.no_speculative,
                ..base
            }
            .with_cache_for((a.smart.cache_mib * (1 << 20) as f64) as usize, a.records);
            Ok(IndexCfg::Chime { cfg })
        }
        IndexKind::Canrt => Ok(IndexCfg::Canrt {
            cfg: CanrtConfig {
                // Capacities are multiples of 8: a 15-byte value (the paper's) takes 16.
                value_cap: (a.value_size as u32).next_multiple_of(8),
                key_len: if a.keys == KeyType::String { 16 } else { 8 },
                turn_notices: !a.canrt_poll,
                ack: match a.canrt_ack {
                    CanrtAck::Applied => WriteAck::Applied,
                    CanrtAck::Posted => WriteAck::Posted,
                },
                ..CanrtConfig::new(0)
            },
        }),
        IndexKind::Catfish => Err("Catfish is not a key-value index: see bench/spatial.rs".into()),
        IndexKind::Wort => Ok(IndexCfg::Wort { kind: Kind::Wort }),
        IndexKind::Woart => Ok(IndexCfg::Wort { kind: Kind::Woart }),
        IndexKind::Erda => Ok(IndexCfg::Erda {
            server: erda_geometry(a),
            client: ErdaClientConfig {
                value_size: a.value_size,
                ..ErdaClientConfig::default()
            },
        }),
        IndexKind::ErdaRedo | IndexKind::ErdaRaw => Ok(IndexCfg::ErdaBaseline {
            scheme: if a.index == IndexKind::ErdaRedo {
                Scheme::Redo
            } else {
                Scheme::Raw
            },
            server: erda_geometry(a),
            client: ErdaClientConfig {
                value_size: a.value_size,
                ..ErdaClientConfig::default()
            },
        }),
    }
}

/// An Erda store sized for the run: 8 buckets per record (keys take the first free bucket of
/// their 8-bucket neighbourhood; there is no hopscotch displacement yet, so the table is kept
/// sparse), 64 KiB segments, and logs sized for the live data, not for every write: each
/// head is 3 regions of twice its share of the records, and log cleaning starts after half a
/// region of appends (so a `--seconds` run never fills the log: cleaning frees what updates
/// make stale, and a full region chains the next). A run of `--operations` without
/// `--erda-clean` gets regions large enough that it never starts a cleaning.
fn erda_geometry(a: &BenchArgs) -> ErdaConfig {
    let object = 64u64 + a.value_size as u64;
    let segment = 64u64 << 10;
    let heads = 2u64;
    let regions = 3u64;
    // Keys go to a head by their first writer's client id, so one head may hold every live
    // key: each region can, counted in whole segments (an object never spans one: at 1 KiB
    // values a 64 KiB segment holds 60 objects, 4 % of it is left over), and a half more:
    // a cleaning copies every live object into its target region while clients go on
    // appending there (about one object per 64 work units of the cleaner: a few thousand
    // appends while it merges and sweeps the table). A region of only the live bytes
    // overflowed into the ring's last free region and the next cleaning found none:
    // `LogFull` at 1 KiB values (2,000 records, update-only).
    let live = a.records.div_ceil((segment / object).max(1)) * segment;
    let live = (live + live / 2 + 4 * segment)
        .next_multiple_of(segment)
        .max(2 << 20);
    // Without --erda-clean, a fixed-count run (not --seconds) never cleans: every append of
    // the run (as if all went to one head) stays under 70 % of the threshold (half a
    // region), below the 75 % where the server starts zeroing the next region ahead.
    let region = if a.erda_clean || a.seconds.is_some() {
        live
    } else {
        let ops = a.operations.unwrap_or(a.records);
        let appends = (a.records + a.warmup + ops) * object;
        live.max((appends * 2 * 10 / 7).next_multiple_of(segment))
    };
    ErdaConfig {
        heads: heads as u32,
        buckets: (8 * a.records).next_power_of_two().max(1 << 14),
        segment_bytes: segment,
        head_bytes: regions * region,
        regions: regions as u32,
        clean_permille: 500,
        ..ErdaConfig::small()
    }
}

/// Bytes of the memory node's region for this run: what the index needs for the records and
/// every write of the run (no index frees memory back to the node), with room to spare, or
/// `--region-mib`.
pub(crate) fn region_bytes(a: &BenchArgs) -> u64 {
    if let Some(m) = a.region_mib {
        return m << 20;
    }
    let ops = match (a.operations, a.seconds) {
        (Some(o), _) => o,
        // A timed run: a generous guess (about 10 s of a fast soft run's writes).
        (None, Some(s)) => (s * 2e6) as u64,
        (None, None) => a.records,
    };
    let writes = a.records + ops;
    // A leaf or entry, its share of internal nodes, the allocator's slack: 4x the record.
    let per = 4 * (a.value_size as u64 + 64 + 32);
    let erda = {
        let g = erda_geometry(a);
        g.heads as u64 * g.head_bytes + g.buckets * 64 + (8 << 20)
    };
    let want = (writes * per).max(if a.index.is_erda() { erda } else { 0 });
    // Every client carves its objects from chunks of its own, per size class: slack per
    // client, spread over the memory nodes.
    let clients = match a.fabric {
        FabricKind::Sim => (a.sim.compute_nodes * a.sim.clients_per_node) as u64,
        _ => a.threads as u64,
    };
    let per_node = want / a.sim.memory_nodes.max(1) as u64 + clients * (8 << 20);
    (per_node + (32 << 20))
        .next_multiple_of(1 << 20)
        .clamp(64 << 20, 1 << 40)
}

fn smart_config(a: &BenchArgs, t: Techniques) -> SmartConfig {
    let mode = match a.keys {
        KeyType::Int | KeyType::Seq => KeyMode::Fixed(8),
        KeyType::String => KeyMode::Variable,
    };
    let mut cfg = SmartConfig::new(t, mode, a.value_size);
    cfg.cache_mib = a.smart.cache_mib;
    cfg
}

pub(crate) fn progress(a: &BenchArgs, len: u64, what: String) -> ProgressBar {
    if a.quiet || a.silent {
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

fn print_table(rows: &[BenchRecord], json: Option<&str>) {
    let mut out = crate::report::human_out(json);
    let _ = writeln!(
        out,
        "{:<8} {:<5} {:>9} {:>8} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>8} {:>6} {:>6} {:>9} {:>8}  techniques",
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
        "w-amp",
        "srv ns/op",
        "nvm B/op"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<8} {:<5} {:>9} {:>8.3} {:>9.0} {:>9.0} {:>9.0} {:>6.2} {:>6.2} {:>6.2} {:>8.1} {:>6.2} {:>6.2} {:>9} {:>8}  {}",
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
            crate::report::server_cell(r.server_ns_per_op),
            crate::report::server_cell(r.nvm_bytes_per_op),
            r.techniques
        );
    }
    for r in rows {
        if let Some(c) = &r.canrt {
            let _ = writeln!(
                out,
                "canrt {} {}: resize requests {} ({:.2}% of inserts), lock polls {:.3}/op, torn \
                 retries {}, skipped tickets {}, Wait messages {:.3}/op; ops during a resize \
                 {} (p50 {:.1} us, p99 {:.1} us)",
                r.workload,
                r.phase,
                c.resize_requests,
                c.resize_percent,
                c.lock_polls as f64 / r.ops.max(1) as f64,
                c.torn_retries,
                c.skipped,
                c.turn_waits as f64 / r.ops.max(1) as f64,
                c.during_resize_ops,
                c.during_resize_p50_ns as f64 / 1e3,
                c.during_resize_p99_ns as f64 / 1e3
            );
        }
    }
    if let Some(r) = rows.first() {
        for n in &r.notes {
            let _ = writeln!(out, "note: {n}");
        }
    }
}

fn validate(a: &BenchArgs) -> Result<(), String> {
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
        && !(ps.is_power_of_two() && (256..=65536).contains(&ps))
    {
        return Err(format!(
            "--page-size {ps}: Sherman pages are a power of two from 256 to 65536 bytes"
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
    if (a.think_read_us > 0 || a.think_write_us > 0) && a.fabric != FabricKind::Sim {
        return Err(
            "--think-read-us / --think-write-us pace sim clients: they need --fabric sim".into(),
        );
    }
    if a.index == IndexKind::Catfish {
        spatial::validate(a)?;
    }
    if a.warmup > 0 && (a.fabric != FabricKind::Sim || a.index == IndexKind::Catfish) {
        return Err(
            "--warmup runs on --fabric sim with a key-value index (the spatial bench has \
             no client cache to warm)"
                .into(),
        );
    }
    Ok(())
}

/// YCSB-C on the same keys and distribution against an in-memory map on this thread:
/// `insert(key, n)` loads it, `get(key)` reads; throughput in Mops.
fn in_memory_c(
    a: &BenchArgs,
    ops: u64,
    insert: &mut dyn FnMut(&[u8], u64),
    get: &dyn Fn(&[u8]) -> u64,
) -> f64 {
    let mut key = [0u8; 32];
    for n in 0..a.records {
        let kl = key_of(a.keys, n, &mut key);
        insert(&key[..kl], n);
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
        sum = sum.wrapping_add(get(&key[..kl]));
    }
    let secs = (clock.now_ns() - t0) as f64 / 1e9;
    std::hint::black_box(sum);
    ops as f64 / secs / 1e6
}

/// std BTreeMap (values of `--value-size` bytes).
fn btreemap_c(a: &BenchArgs, ops: u64) -> f64 {
    let map = std::cell::RefCell::new(BTreeMap::<Vec<u8>, Vec<u8>>::new());
    let mut val = vec![0u8; a.value_size];
    in_memory_c(
        a,
        ops,
        &mut |k, n| {
            value_for(n, a.value_size, &mut val);
            map.borrow_mut().insert(k.to_vec(), val.clone());
        },
        &|k| map.borrow().get(k).map_or(0, |v| v[0] as u64),
    )
}

/// congee, an in-memory concurrent ART (8-byte integer keys, usize values).
fn art_c(a: &BenchArgs, ops: u64) -> Result<f64, String> {
    if a.keys == KeyType::String {
        return Err("--compare-art needs --keys int (congee takes 8-byte keys)".into());
    }
    let art: congee::Congee<usize, usize> = congee::Congee::default();
    let guard = art.pin();
    let k64 = |k: &[u8]| u64::from_be_bytes(k.try_into().unwrap_or([0; 8])) as usize;
    Ok(in_memory_c(
        a,
        ops,
        &mut |k, n| {
            let _ = art.insert(k64(k), n as usize, &guard);
        },
        &|k| art.get(&k64(k), &guard).unwrap_or(0) as u64,
    ))
}

/// (Mops, round trips per op, p50 ns, p99 ns) of one workload.
type FactorCell = (f64, f64, f64, f64);

/// Runs LOAD and `workload` with `index` on the chosen fabric.
fn run_phases(
    a: &BenchArgs,
    index: &IndexCfg,
    workload: Workload,
) -> Result<Vec<BenchRecord>, String> {
    match a.fabric {
        FabricKind::Soft => soft::run(a, index, workload),
        FabricKind::Sim => sim::run(a, index, workload),
        FabricKind::Verbs => verbs::run(a, index, workload),
    }
}

/// The factor analysis: one technique added per row.
pub(crate) fn factor_steps(a: &BenchArgs) -> Result<Vec<(&'static str, IndexCfg)>, String> {
    let mut steps = Vec::new();
    match a.index {
        IndexKind::Smart => {
            let mut t = Techniques::BASELINE;
            t.cache = true;
            let names = [
                "ART baseline (+cache)",
                "+ lock-free internal",
                "+ in-place leaf",
                "+ rear lock",
                "+ delegation",
                "+ combining",
            ];
            for (i, name) in names.iter().enumerate() {
                match i {
                    1 => t.lock_free_internal = true,
                    2 => t.in_place_leaf = true,
                    3 => t.rear_lock = true,
                    4 => t.delegation = true,
                    5 => t.combining = true,
                    _ => {}
                }
                steps.push((
                    *name,
                    IndexCfg::Smart {
                        cfg: smart_config(a, t),
                        t,
                    },
                ));
            }
        }
        IndexKind::Canrt
        | IndexKind::Erda
        | IndexKind::ErdaRedo
        | IndexKind::ErdaRaw
        | IndexKind::Catfish
        | IndexKind::Wort
        | IndexKind::Woart => {
            return Err(
                "--factors: CANRT, Erda (and its baselines), Catfish, WORT and WOART have no technique switches yet"
                    .into(),
            );
        }
        IndexKind::Chime => {
            // CHIME's Fig. 15a order, at one cache size (the flags'); Sherman first.
            let IndexCfg::Chime { cfg } = index_cfg(a)? else {
                return Err("--factors: CHIME's configuration".into());
            };
            let bytes = cfg.sherman.cache_bytes + cfg.hotspot_bytes;
            let names = [
                "Sherman",
                "+ hopscotch leaf (+ replicated metadata)",
                "+ vacancy-aware lock",
                "+ speculative read",
            ];
            for (i, name) in names.iter().enumerate() {
                let c = ChimeConfig {
                    hopscotch: i >= 1,
                    vacancy_lock: i >= 2,
                    speculative: i >= 3,
                    ..cfg
                }
                .with_cache_for(bytes, a.records);
                steps.push((*name, IndexCfg::Chime { cfg: c }));
            }
        }
        IndexKind::Sherman | IndexKind::FgPlus => {
            let mut c = ShermanConfig {
                page_size: a.sherman.page_size,
                value_size: a.value_size,
                ..ShermanConfig::fg_plus()
            };
            let names = [
                "FG+",
                "+ on-chip lock",
                "+ hierarchical lock",
                "+ combination",
                "+ two-level version",
            ];
            for (i, name) in names.iter().enumerate() {
                match i {
                    1 => c.onchip_locks = true,
                    2 => c.hierarchical_locks = true,
                    3 => c.combine_commands = true,
                    4 => c.two_level_versions = true,
                    _ => {}
                }
                steps.push((*name, IndexCfg::Sherman { cfg: c, name }));
            }
        }
    }
    Ok(steps)
}

fn factors(a: &BenchArgs) -> Result<Vec<BenchRecord>, String> {
    let steps = factor_steps(a)?;
    let workloads = if a.workloads.is_empty() {
        vec![
            Workload::Load,
            Workload::A,
            Workload::B,
            Workload::C,
            Workload::D,
        ]
    } else {
        a.workloads.clone()
    };
    let mut all = Vec::new();
    let mut table: Vec<(String, Vec<FactorCell>)> = Vec::new();
    for (name, cfg) in &steps {
        let mut row = Vec::new();
        for &w in &workloads {
            let mut recs = run_phases(a, cfg, w)?;
            meta::annotate(a, &mut recs)?;
            for r in &mut recs {
                // The step gets its own field; `index` stays the index's name.
                r.run.step = Some(name.to_string());
                r.index = format!("{:?}", a.index).to_lowercase();
            }
            let r = recs.last().cloned().ok_or("no record")?;
            row.push((
                r.mops,
                r.per_op.round_trips,
                r.latency.p50_ns,
                r.latency.p99_ns,
            ));
            all.extend(recs);
        }
        table.push((name.to_string(), row));
    }
    if a.silent {
        return Ok(all);
    }
    let shape = match a.fabric {
        FabricKind::Sim => format!(
            "sim cluster {} compute nodes x {} clients x {} coroutines, {} memory nodes, seed {}",
            a.sim.compute_nodes,
            a.sim.clients_per_node,
            a.coroutines,
            a.sim.memory_nodes,
            a.sim.seed
        ),
        f => format!(
            "{} fabric, {} threads x {} coroutines",
            if f == FabricKind::Verbs {
                "verbs"
            } else {
                "soft"
            },
            a.threads,
            a.coroutines
        ),
    };
    println!(
        "factor analysis, {:?}: {shape}; {} records, {:?} keys, {:?} θ={}",
        a.index,
        a.records,
        a.keys,
        a.distribution.unwrap_or(Distribution::Zipfian),
        a.theta
    );
    print!("{:<24}", "configuration");
    for w in &workloads {
        print!(" {:>30}", format!("{} Mops (RT/op, p50/p99 µs)", w.name()));
    }
    println!();
    for (name, row) in &table {
        print!("{name:<24}");
        for (m, rt, p50, p99) in row {
            print!(
                " {:>30}",
                format!("{m:.3} ({rt:.2}, {:.1}/{:.1})", p50 / 1e3, p99 / 1e3)
            );
        }
        println!();
    }
    Ok(all)
}

pub fn run(a: &BenchArgs) -> Result<(), String> {
    if a.sim.show_model {
        return crate::perf_sim::show_model(&a.sim);
    }
    if a.table1 {
        return table1::run(a);
    }
    if a.churn {
        return churn::run(a);
    }
    let all = records(a)?;
    if let Some(p) = &a.json {
        write_json(p, &all).map_err(|e| format!("writing {p}: {e}"))?;
    }
    Ok(())
}

/// Every record of the runs the flags ask for (each `--sweep` point, each `--index`, each
/// factor step), the tables printed unless `silent`.
pub(crate) fn records(a: &BenchArgs) -> Result<Vec<BenchRecord>, String> {
    if let Some(spec) = &a.sweep {
        let s = sweep::parse(spec)?;
        let mut all = Vec::new();
        for &v in &s.values {
            let mut point = sweep::point(a, &s.name, v)?;
            // The points start from one loaded cluster (where it is bulk-loaded).
            point.load_once = true;
            if !a.silent {
                let mut out = crate::report::human_out(a.json.as_deref());
                let _ = writeln!(out, "\n--sweep {}={v}", s.name);
            }
            let r = records(&point);
            if r.is_err() && !a.load_once {
                bulk::forget();
            }
            all.extend(r?);
        }
        if !a.load_once {
            bulk::forget();
        }
        return Ok(all);
    }
    let mut runs = Vec::new();
    for &kind in &a.indexes {
        let mut one = a.clone();
        one.index = kind;
        validate(&one)?;
        runs.push(one);
    }
    if runs.len() > 1 && a.factors {
        return Err("--factors takes one --index".into());
    }
    let mut all = Vec::new();
    for one in &runs {
        if one.factors {
            return factors(one);
        }
        let mut recs = run_one(one)?;
        meta::annotate(one, &mut recs)?;
        all.extend(recs);
    }
    if runs.len() > 1 && !a.silent {
        let mut out = crate::report::human_out(a.json.as_deref());
        let _ = writeln!(out, "\nside by side (run phase):");
        let _ = writeln!(
            out,
            "{:<10} {:>9} {:>9} {:>9} {:>7} {:>8} {:>9} {:>8}",
            "index", "Mops", "p50 ns", "p99 ns", "RT/op", "B in/op", "srv ns/op", "nvm B/op"
        );
        for r in all
            .iter()
            .filter(|r| r.phase == "run" || a.workload == Workload::Load)
        {
            let _ = writeln!(
                out,
                "{:<10} {:>9.3} {:>9.0} {:>9.0} {:>7.2} {:>8.1} {:>9} {:>8}",
                r.index,
                r.mops,
                r.latency.p50_ns,
                r.latency.p99_ns,
                r.per_op.round_trips,
                r.per_op.bytes_in,
                crate::report::server_cell(r.server_ns_per_op),
                crate::report::server_cell(r.nvm_bytes_per_op)
            );
        }
    }
    Ok(all)
}

/// One index's LOAD and run phases: prints its table, returns its records.
fn run_one(a: &BenchArgs) -> Result<Vec<BenchRecord>, String> {
    if a.index == IndexKind::Catfish {
        let recs = spatial::run(a)?;
        if !a.silent {
            print_table(&recs, a.json.as_deref());
            spatial::print_run_notes(&recs, a.json.as_deref());
        }
        return Ok(recs);
    }
    let index = index_cfg(a)?;
    let mut recs = run_phases(a, &index, a.workload)?;
    let ops = a.operations.unwrap_or(a.records).max(100_000);
    let mut baselines = Vec::new();
    if a.compare_btreemap {
        baselines.push(("std BTreeMap", btreemap_c(a, ops)));
    }
    if a.compare_art {
        baselines.push(("congee (in-memory ART)", art_c(a, ops)?));
    }
    if let Some(r) = recs.iter_mut().find(|r| r.phase == "run") {
        for (name, m) in baselines {
            r.notes.push(format!(
                "{name} YCSB-C on one core, same keys and distribution: {m:.3} Mops; this run / {name} = {:.2}",
                r.mops / m
            ));
        }
    }
    if a.silent {
        return Ok(recs);
    }
    print_table(&recs, a.json.as_deref());
    let mut out = crate::report::human_out(a.json.as_deref());
    for r in &recs {
        if r.phase == "run" {
            for n in r.notes.iter().filter(|n| n.contains("YCSB-C on one core")) {
                let _ = writeln!(out, "note: {n}");
            }
        }
    }
    Ok(recs)
}

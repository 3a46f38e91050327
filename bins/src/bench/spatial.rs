//! `remora bench --index catfish`: the spatial benchmark of the Catfish R-tree.
//!
//! LOAD inserts `--records` objects through the server; the run phase then issues
//! `--operations` operations (or runs `--seconds`):
//! - `--workload c`: search-only; `--workload b`: 90% searches, 10% inserts (the Catfish
//!   paper's mixed workload, not YCSB-B's 95/5); other workloads are refused.
//! - data (`--spatial-data`): `uniform` rectangles (the paper's: edges uniform in
//!   (0, 0.0001] of the side, placed uniformly; inserts placed by the paper's power-law
//!   rule) or `skewed` points clustered around 16 centres; or `--data FILE`, CSV lines
//!   `min_x,min_y,max_x,max_y` or `x,y` (any units: scaled into the space).
//! - a search is a rectangle at the paper's request scale `--window` (0.00001 or 0.01):
//!   its edges drawn uniformly from (0, scale] of the side per axis, placed uniformly in the
//!   space (`spatial/data.rs` gives the paper's wording and our reading of the power law).
//! - `--mode messaging|offloading|adaptive`; adaptive is Algorithm 1 with the server's
//!   heartbeats ([`CatfishClient::search_adaptive`]).
//! - `--node-serial-reads` (sim): each compute node serves one READ of its clients at a
//!   time, as the paper's client nodes did (`spatial/gate.rs`).
//!
//! Each client thread is one [`CatfishClient`] with one outstanding operation (the client
//! serves one request at a time on its queue pair): `--coroutines` does not apply. The
//! record is the bench's usual one, plus `spatial` (the share of searches offloaded, hits
//! per search, the tree height).
//!
//! On the sim the tree is loaded (by one client, in object order) in a sim of its own and
//! each run measures a copy of it, so a process measures one loaded tree at many client
//! counts and modes ([`load`]); where the run measures another workload than LOAD, it is
//! bulk-loaded instead (the same tree, built by the server's inserts without the fabric;
//! `--no-bulk-load` inserts it), and the run has no LOAD record.
//!
//! Parts: the objects and windows ([`data`]), one client's phase ([`client`]), the sim
//! runner ([`sim`]) and its loaded trees ([`load`]), the soft and TCP runners ([`run`]); this
//! file holds the flags and the record.
mod client;
mod data;
mod gate;
mod load;
pub(super) use load::ImageRegion;
mod run;
mod sim;

use super::BenchArgs;
use super::phase::{BenchRecord, OpCounts, new_hist};
use super::ycsb::Workload;
use crate::args::FabricKind;
use crate::report::{Latency, PerOp};
use clap::{Args, ValueEnum};
use data::Data;
use hdrhistogram::Histogram;
use remora::core::Snapshot;
use remora::core::catfish::TreeKind;
use remora::poller::sim::LlcStats;
use run::{run_soft, run_tcp};
use serde::Serialize;
use sim::run_sim;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// Side of the square space objects are placed in.
const SPACE: i64 = 1 << 20;
/// The sim's ring-scan cost per connection for `--serve polling` (one cache miss, assumed).
const POLL_SCAN_NS: f64 = 25.0;
/// Clusters of the skewed data.
const CLUSTERS: u64 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SearchMode {
    /// The server traverses the tree (fast messaging).
    Messaging,
    /// The client traverses with one-sided READs.
    Offloading,
    /// Algorithm 1: the server's heartbeats choose per search.
    Adaptive,
    /// The TCP/IP baseline: the same requests over kernel TCP sockets (`bench/tcp.rs`),
    /// to an in-process server on loopback or a `--tcp-connect`ed one.
    Tcp,
}

/// How the soft memory node's server threads wait for work (`--serve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Serve {
    /// Idle threads give their CPU away (spin, yield, then 50 µs sleeps).
    Event,
    /// Threads poll their connections without pause (on the sim: each message costs a scan
    /// of the thread's share of the rings, `server_scan_ns`, 25 ns per ring unless `--set`).
    Polling,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpatialData {
    /// The paper's rectangles: edges uniform in (0, 0.0001] of the side, placed uniformly;
    /// a run's inserts at the request scale, placed by the paper's power-law rule.
    Uniform,
    /// Points clustered around 16 centres (normal-ish, σ = 1/100 of the space).
    Skewed,
}

/// The `--tree` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TreeArg {
    Guttman,
    Rstar,
    Hilbert,
}

impl TreeArg {
    pub fn kind(self) -> TreeKind {
        match self {
            TreeArg::Guttman => TreeKind::Guttman,
            TreeArg::Rstar => TreeKind::RStar,
            TreeArg::Hilbert => TreeKind::Hilbert,
        }
    }
}

/// Flags of `--index catfish`.
#[derive(Debug, Clone, Args)]
pub struct SpatialFlags {
    /// Catfish searches: messaging, offloading or adaptive.
    #[arg(long, value_enum, default_value = "adaptive")]
    pub mode: SearchMode,
    /// Catfish request scale (the paper's 0.00001 or 0.01, seeds/003 §5.2): each search
    /// window's edges are drawn uniformly from (0, scale] of the space's side, per axis
    /// (not a fraction of the area), and the window is placed uniformly in the space.
    #[arg(long, default_value_t = 0.00001)]
    pub window: f64,
    /// Catfish: each search draws its request scale t from the paper's power law instead of
    /// `--window` (density proportional to t^-0.99 on (0.00001, 0.01], seeds/003 §5.2), then
    /// its edges from (0, t]; so most searches are small.
    #[arg(long)]
    pub power_law_windows: bool,
    /// Catfish: the number of objects the paper's tree holds in the unit square (2 million,
    /// seeds/003 §5.2). With fewer `--records`, every length (the data's edge bound and the
    /// request scale) is multiplied by sqrt(paper objects / records), so the loaded objects
    /// lie as densely, and a search meets as many of them, as in the paper's tree: a run is
    /// the paper's space seen through a smaller patch. 0: lengths as given.
    #[arg(long, default_value_t = 2_000_000)]
    pub paper_objects: u64,
    /// Catfish data: uniform rectangles or skewed (clustered) points.
    #[arg(long, value_enum, default_value = "uniform")]
    pub spatial_data: SpatialData,
    /// Catfish data from a CSV file instead: `min_x,min_y,max_x,max_y` or `x,y` per line
    /// (`#` comments); the first `--records` lines are loaded, the rest are inserted.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Catfish entries per node (4 to 130; the paper runs 15, 30, 70, 130).
    #[arg(long, default_value_t = 30)]
    pub fanout: usize,
    /// Catfish tree created when the memory node holds none: the basic R-tree, the R*-tree
    /// (the paper's main tree) or the Hilbert R-tree.
    #[arg(long, value_enum, default_value = "rstar")]
    pub tree: TreeArg,
    /// Catfish heartbeat interval (Algorithm 1's Inv) in µs, of the server (in-process and
    /// sim) and the clients; a `--connect`ed memnode keeps its own (10 ms).
    #[arg(long, default_value_t = 10_000)]
    pub heartbeat_us: u64,
    /// Catfish server threads: of the in-process soft memory node (each serves its share of
    /// the connections), or of each simulated memory node (the sim's `server_threads`).
    #[arg(long, default_value_t = 1)]
    pub server_threads: usize,
    /// Catfish: how the in-process soft memory node's server threads wait for work.
    #[arg(long, value_enum, default_value = "event")]
    pub serve: Serve,
    /// Catfish `--mode tcp`: the TCP server to use (`remora memnode --service catfish
    /// --tcp-listen ADDR`), instead of one started in-process on loopback.
    #[arg(long, value_name = "HOST:PORT")]
    pub tcp_connect: Option<String>,
    /// Catfish on the sim: each compute node serves one READ (of a node image) of its
    /// clients at a time, as the paper's client nodes did (seeds/003 §4.4, Figs. 8(b), 9(b); see
    /// `spatial/gate.rs`). Off: a node's READs run in parallel, as the sim's NIC model has it.
    #[arg(long)]
    pub node_serial_reads: bool,
    /// Catfish on the sim, with `--node-serial-reads`: each READ of a node image carries
    /// the paper's node bytes, its entries this many bytes each (the paper's rectangle is
    /// "four double precision floating-point variables", seeds/003 §2, and a pointer: 40)
    /// instead of remora's 24 (four i32 and a pointer); see `spatial/gate.rs`. 0: remora's.
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    pub paper_entry_bytes: usize,
    /// Catfish on the sim: a polling server with one polling thread per connection on its
    /// `server_threads` cores, oversubscribed (the Catfish paper's polling server, seeds/003
    /// §4.2, Fig. 6): each message costs this many ns x share^2 more, share = the run's
    /// clients (one connection each) / server threads, rounded up. It sets the sim's
    /// `server_scan_ns` (charged x share a message) to this x share. 0: off.
    #[arg(long, default_value_t = 0.0, value_name = "NS")]
    pub poll_oversub_ns: f64,
    /// Catfish: CPU ns the server states per insert beyond a search's
    /// (`CatfishServer::with_insert_cpu_ns`; the sim charges it, real fabrics spend their
    /// own). For the sim, whose `server_handler_ns` charges every request alike; the repro
    /// passes the cost measured on the real code for the tree kind
    /// (`poller/tests/catfish_server_cost.rs`). 0: an insert costs what a search does.
    #[arg(long, default_value_t = 0, value_name = "NS")]
    pub insert_cpu_ns: u64,
}

/// Catfish's own figures in the JSON record.
#[derive(Debug, Clone, Serialize)]
pub struct SpatialSummary {
    pub mode: String,
    pub data: String,
    /// The request scale (`--window`): window edges uniform in (0, window] of the side.
    pub window: f64,
    pub fanout: usize,
    /// guttman, rstar or hilbert.
    pub tree: String,
    pub searches: u64,
    pub offloaded_searches: u64,
    pub messaging_searches: u64,
    /// offloaded / searches (0 when there were none).
    pub offloaded_share: f64,
    /// Heartbeats the clients took from their slots (adaptive mode).
    pub heartbeats: u64,
    pub hits_per_search: f64,
    /// One-sided node READs per offloaded search (re-reads and restarts included).
    pub node_reads_per_offload: f64,
    /// Read-write conflicts per offloaded search: node images read torn or mid-rewrite
    /// (read again) plus traversals started over (a node born after the search's epoch).
    /// A concurrent insert on the server causes both.
    pub conflicts_per_offload: f64,
    /// Of those, traversals started over per offloaded search.
    pub restarts_per_offload: f64,
    /// Levels of the tree after the phase (leaves included), where measured.
    pub tree_height: Option<u16>,
}

pub fn validate(a: &BenchArgs) -> Result<(), String> {
    if !matches!(a.workload, Workload::C | Workload::B | Workload::Load) {
        return Err(format!(
            "--index catfish runs --workload c (search-only) or b (90% search / 10% insert), \
             not {}",
            a.workload.name()
        ));
    }
    let w = a.spatial.window;
    if !(w > 0.0 && w <= 1.0) {
        return Err(format!(
            "--window is the request scale, a window edge bound as a fraction of the \
             space's side, in (0, 1]; got {w}"
        ));
    }
    remora::layouts::catfish::check_fanout(a.spatial.fanout).map_err(|_| {
        format!(
            "--fanout {}: Catfish nodes hold 4 to 130 entries",
            a.spatial.fanout
        )
    })?;
    if a.fabric == FabricKind::Verbs {
        return Err("--index catfish runs on --fabric sim or soft".into());
    }
    if a.spatial.heartbeat_us == 0 {
        return Err("--heartbeat-us must be at least 1".into());
    }
    if a.spatial.node_serial_reads && a.fabric != FabricKind::Sim {
        return Err("--node-serial-reads models the paper's client nodes on --fabric sim".into());
    }
    let entry = a.spatial.paper_entry_bytes;
    if entry != 0 {
        if !a.spatial.node_serial_reads {
            return Err(
                "--paper-entry-bytes pads the node READs of --node-serial-reads (sim)".into(),
            );
        }
        let own = remora::layouts::catfish::ENTRY_LEN;
        if !(own..=256).contains(&entry) {
            return Err(format!(
                "--paper-entry-bytes is the paper's bytes an entry, {own} (remora's) to 256; \
                 got {entry}"
            ));
        }
    }
    if a.spatial.server_threads == 0 {
        return Err("--server-threads must be at least 1".into());
    }
    let oversub = a.spatial.poll_oversub_ns;
    if !(oversub.is_finite() && oversub >= 0.0) {
        return Err(format!(
            "--poll-oversub-ns is a CPU time in ns, at least 0; got {oversub}"
        ));
    }
    if oversub > 0.0 && (a.fabric != FabricKind::Sim || a.spatial.serve != Serve::Event) {
        return Err(
            "--poll-oversub-ns models an oversubscribed polling server on --fabric sim; it \
             replaces --serve polling's ring scan (give one of them)"
                .into(),
        );
    }
    let tcp = a.spatial.mode == SearchMode::Tcp;
    if tcp && a.fabric != FabricKind::Soft {
        return Err(
            "--mode tcp runs real sockets: --fabric soft (loopback or --tcp-connect)".into(),
        );
    }
    if a.spatial.tcp_connect.is_some() && !tcp {
        return Err("--tcp-connect is for --mode tcp".into());
    }
    let threaded = a.spatial.server_threads != 1 || a.spatial.serve != Serve::Event;
    if threaded && (a.connect.is_some() || tcp) {
        return Err(
            "--server-threads and --serve apply to the in-process memory node and the sim (a \
             memnode takes `remora memnode --threads N [--polling]`; the TCP server runs one \
             thread per connection)"
                .into(),
        );
    }
    if tcp && a.connect.is_some() {
        return Err(
            "--mode tcp talks to a TCP server: --tcp-connect HOST:PORT, not --connect".into(),
        );
    }
    if a.factors || a.compare_art || a.compare_btreemap {
        return Err("--factors and --compare-* are for the key-value indexes".into());
    }
    Ok(())
}

/// State shared by the clients of one run.
struct Shared<'a> {
    a: &'a BenchArgs,
    data: Data,
    records: u64,
    insert_pct: u64,
    budget: Option<u64>,
    issued: AtomicU64,
    /// Operations of the unmeasured warm-up phase (`--warmup`, sim only) not yet issued.
    warm_left: AtomicU64,
    inserted: AtomicU64,
    next_load: AtomicU64,
    deadline_ns: AtomicU64,
    stop: AtomicBool,
}

/// What one client measured in one phase.
#[derive(Clone)]
struct Part {
    hist: Histogram<u64>,
    counts: OpCounts,
    snap: Snapshot,
    start_ns: u64,
    end_ns: u64,
    busy: Option<(u64, u64)>,
    llc: Option<(LlcStats, LlcStats)>,
    offloaded: u64,
    messaging: u64,
    node_reads: u64,
    /// Node images an offloaded search read again (torn or mid-rewrite).
    torn_retries: u64,
    /// Offloaded searches started over (a node born after the search's epoch).
    restarts: u64,
    heartbeats: u64,
    /// When its operations completed (`phase/steady.rs`).
    timeline: super::phase::steady::Timeline,
}

/// A client's LOAD phase (none where another sim loaded the tree: `spatial/load.rs`) and
/// run phase.
type ClientResult = Result<(Option<Part>, Option<Part>), String>;

/// The state a run's clients share, before they start.
fn shared(a: &BenchArgs) -> Result<Shared<'_>, String> {
    Ok(Shared {
        a,
        records: a.records,
        insert_pct: if a.workload == Workload::B { 10 } else { 0 },
        budget: match (a.operations, a.seconds) {
            (Some(o), _) => Some(o),
            (None, Some(_)) => None,
            (None, None) => Some(a.records),
        },
        data: Data::new(a)?,
        issued: AtomicU64::new(0),
        warm_left: AtomicU64::new(a.warmup),
        inserted: AtomicU64::new(0),
        next_load: AtomicU64::new(0),
        deadline_ns: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    })
}

/// Runs LOAD and the workload; returns the records of both phases.
pub fn run(a: &BenchArgs) -> Result<Vec<BenchRecord>, String> {
    let sh = shared(a)?;
    let (results, height, threads, mut notes) = match a.fabric {
        FabricKind::Sim => run_sim(&sh)?,
        _ if a.spatial.mode == SearchMode::Tcp => run_tcp(&sh)?,
        _ => run_soft(&sh)?,
    };
    let mut loads = Vec::new();
    let mut runs = Vec::new();
    for r in results {
        let (l, r) = r?;
        loads.extend(l);
        runs.extend(r);
    }
    notes.push(
        "one outstanding operation per client (a Catfish client serves one request at a \
         time): --coroutines does not apply"
            .into(),
    );
    if let Some(h) = height {
        notes.push(format!(
            "tree height after the run: {h} levels ({} objects loaded, fanout {}; the paper \
             reports 3 levels for 10K and 4 for 100K rectangles at node size 30)",
            a.records, a.spatial.fanout
        ));
    }
    let fabric = match (a.fabric, a.spatial.mode) {
        (FabricKind::Sim, _) => "sim",
        (_, SearchMode::Tcp) => "tcp",
        _ => "soft",
    };
    let mut out = Vec::new();
    // A bulk-loaded tree's load is not measured: no LOAD record, as for the key-value
    // indexes.
    if !load::bulk_wanted(a) {
        out.push(record(
            &sh,
            Workload::Load,
            "load",
            &loads,
            fabric,
            threads,
            height,
            notes.clone(),
        ));
    }
    if !runs.is_empty() {
        out.push(record(
            &sh, a.workload, "run", &runs, fabric, threads, height, notes,
        ));
    }
    Ok(out)
}

/// Prints the notes of the run phase the table leaves out (it prints the first record's).
pub fn print_run_notes(recs: &[BenchRecord], json: Option<&str>) {
    use std::io::Write;
    let mut out = crate::report::human_out(json);
    if let [first, .., run] = recs {
        for n in run.notes.iter().filter(|n| !first.notes.contains(n)) {
            let _ = writeln!(out, "note: {n}");
        }
    }
}

type Outcome = (Vec<ClientResult>, Option<u16>, usize, Vec<String>);

#[allow(clippy::too_many_arguments)]
fn record(
    sh: &Shared<'_>,
    workload: Workload,
    phase: &'static str,
    parts: &[Part],
    fabric: &str,
    threads: usize,
    height: Option<u16>,
    mut notes: Vec<String>,
) -> BenchRecord {
    let a = sh.a;
    let mut hist = new_hist();
    let mut counts = OpCounts::default();
    let mut snap = Snapshot::default();
    let (mut off, mut msg, mut reads, mut beats) = (0u64, 0u64, 0u64, 0u64);
    let (mut torn, mut restarts) = (0u64, 0u64);
    for p in parts {
        let _ = hist.add(&p.hist);
        counts.add(&p.counts);
        snap = snap + p.snap;
        off += p.offloaded;
        msg += p.messaging;
        reads += p.node_reads;
        torn += p.torn_retries;
        restarts += p.restarts;
        beats += p.heartbeats;
    }
    let start = parts.iter().map(|p| p.start_ns).min().unwrap_or(0);
    let end = parts.iter().map(|p| p.end_ns).max().unwrap_or(0);
    let ops = counts.total();
    let first = parts.iter().min_by_key(|p| p.start_ns).and_then(|p| p.busy);
    let last = parts.iter().max_by_key(|p| p.end_ns).and_then(|p| p.busy);
    let server_ns_per_op = first
        .zip(last)
        .map(|((b0, _), (_, b1))| b1.saturating_sub(b0) as f64 / ops.max(1) as f64);
    let seconds = end.saturating_sub(start) as f64 / 1e9;
    let mops = if seconds > 0.0 {
        ops as f64 / seconds / 1e6
    } else {
        0.0
    };
    let searches = counts.reads;
    let share = if searches > 0 {
        off as f64 / searches as f64
    } else {
        0.0
    };
    let mode = format!("{:?}", a.spatial.mode).to_lowercase();
    if searches > 0 {
        notes.insert(
            0,
            format!(
                "{mode} searches: {:.1}% offloaded ({off} of {searches}), {:.1} hits/search, \
                 request scale {}, {} data{}",
                100.0 * share,
                counts.scanned as f64 / searches as f64,
                if a.spatial.power_law_windows {
                    "power law (0.00001..0.01)".to_string()
                } else {
                    a.spatial.window.to_string()
                },
                sh.data.name(),
                sh.data.zoom_note()
            ),
        );
    }
    let per_off = |n: u64| if off > 0 { n as f64 / off as f64 } else { 0.0 };
    if off > 0 {
        notes.push(format!(
            "offloaded searches: {:.2} node READs each; read-write conflicts {:.4} per search \
             ({torn} torn images read again, {restarts} traversals started over)",
            per_off(reads),
            per_off(torn + restarts)
        ));
    }
    let per_op = PerOp::new(&snap, ops);
    let obj = 24.0; // an entry: rectangle + object id
    BenchRecord {
        tool: "bench",
        index: "catfish".into(),
        fabric: fabric.into(),
        workload: workload.name().into(),
        phase,
        distribution: sh.data.name(),
        theta: 0.0,
        key_type: "rect".into(),
        value_size: 8,
        records: a.records,
        threads,
        coroutines: 1,
        ops,
        op_counts: counts,
        seconds,
        mops,
        mops_per_thread: mops / threads.max(1) as f64,
        latency: Latency::from_hist(&hist),
        latency_reads: None,
        latency_writes: None,
        steady: super::phase::steady::of_phase(
            workload,
            parts.iter().map(|p| &p.timeline),
            start,
            end,
        ),
        per_op,
        kv_bytes: obj,
        read_amplification: per_op.bytes_in / obj,
        write_amplification: if counts.inserts > 0 {
            snap.bytes_out as f64 / counts.inserts as f64 / obj
        } else {
            0.0
        },
        techniques: format!(
            "{mode} fanout={} tree={}",
            a.spatial.fanout,
            a.spatial.tree.kind().name()
        ),
        server_ns_per_op,
        // Catfish's nodes are DRAM here: no NVM accounting.
        nvm_bytes_per_op: None,
        nvm_per_op: None,
        nvm_store_bytes_by_op: None,
        server_cpu: super::phase::ServerCpuPerOp::new(
            parts
                .iter()
                .min_by_key(|p| p.start_ns)
                .and_then(|p| p.llc.map(|l| l.0)),
            parts
                .iter()
                .max_by_key(|p| p.end_ns)
                .and_then(|p| p.llc.map(|l| l.1)),
            ops,
        ),
        smart: Default::default(),
        sherman: Default::default(),
        canrt: None,
        spatial: Some(SpatialSummary {
            mode,
            data: sh.data.name(),
            window: a.spatial.window,
            fanout: a.spatial.fanout,
            tree: a.spatial.tree.kind().name().into(),
            searches,
            offloaded_searches: off,
            messaging_searches: msg,
            offloaded_share: share,
            heartbeats: beats,
            hits_per_search: if searches > 0 {
                counts.scanned as f64 / searches as f64
            } else {
                0.0
            },
            node_reads_per_offload: per_off(reads),
            conflicts_per_offload: per_off(torn + restarts),
            restarts_per_offload: per_off(restarts),
            tree_height: height,
        }),
        cluster_process: None,
        notes,
        run: super::meta::RunInfo::with_cdf(&hist),
    }
}

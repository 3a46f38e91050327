//! `remora bench --index catfish`: the spatial benchmark of the Catfish R-tree.
//!
//! LOAD inserts `--records` objects through the server; the run phase then issues
//! `--operations` operations (or runs `--seconds`):
//! - `--workload c`: search-only; `--workload b`: 90% searches, 10% inserts (the Catfish
//!   paper's mixed workload, not YCSB-B's 95/5); other workloads are refused.
//! - data (`--spatial-data`): `uniform` rectangles (side up to 1/1000 of the space) or
//!   `skewed` points clustered around 16 centres; or `--data FILE`, CSV lines
//!   `min_x,min_y,max_x,max_y` or `x,y` (any units: scaled into the space).
//! - a search is a square window of `--window` of the space's area (the paper's 0.00001 and
//!   0.01) centred on a random object already loaded (so windows follow the data).
//! - `--mode messaging|offloading|adaptive`; adaptive is Algorithm 1 with the server's
//!   heartbeats ([`CatfishClient::search_adaptive`]).
//!
//! Each client thread is one [`CatfishClient`] with one outstanding operation (the client
//! serves one request at a time on its queue pair): `--coroutines` does not apply. The
//! record is the bench's usual one, plus `spatial` (the share of searches offloaded, hits
//! per search, the tree height).
use super::BenchArgs;
use super::index::snapshot_of;
use super::phase::{BenchRecord, OpCounts, new_hist};
use super::soft::{BarrierGuard, one};
use super::tcp::{TcpClient, TcpServer};
use super::ycsb::{Rng, Workload};
use crate::args::FabricKind;
use crate::perf_sim::model_from;
use crate::report::{Latency, PerOp};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use remora::core::Snapshot;
use remora::core::block_on::block_on;
use remora::core::catfish::{
    CatfishClient, CatfishError, CatfishServer, ClientStats, Entry, Mode, Rect, TreeKind,
};
use remora::core::fabric::{Endpoint, QueuePair};
use remora::layouts::GlobalAddr;
use remora::layouts::catfish::{META_ROOT_OFFSET, Node, node_len};
use remora::poller::clock::Clock;
use remora::poller::executor::{ServerCore, plan_cores, run_workers};
use remora::poller::sim::{ClientCtx, LlcStats, Sim, SimConfig};
use remora::poller::soft::{NodeConfig, ServeMode, SoftMemoryNode, control};
use serde::Serialize;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    /// Rectangles placed uniformly, sides uniform up to 1/1000 of the space.
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
    /// Catfish search window, as a fraction of the space's area (paper: 0.00001, 0.01).
    #[arg(long, default_value_t = 0.00001)]
    pub window: f64,
    /// Catfish: each search's window fraction drawn from the paper's power law instead of
    /// `--window`: density proportional to t^-0.99 on (0.00001, 0.01] (seeds/003 §5.2),
    /// so most searches are small.
    #[arg(long)]
    pub power_law_windows: bool,
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
}

/// Catfish's own figures in the JSON record.
#[derive(Debug, Clone, Serialize)]
pub struct SpatialSummary {
    pub mode: String,
    pub data: String,
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
    /// One-sided node READs per offloaded search.
    pub node_reads_per_offload: f64,
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
        return Err(format!("--window must be in (0, 1], got {w}"));
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
    if a.spatial.server_threads == 0 {
        return Err("--server-threads must be at least 1".into());
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

/// The objects: generated, or read from a file.
struct Data {
    kind: SpatialData,
    file: Vec<Rect>,
    seed: u64,
}

impl Data {
    fn new(a: &BenchArgs) -> Result<Data, String> {
        let file = match &a.spatial.data {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("--data {}: {e}", p.display()))?;
                parse_csv(&text).map_err(|e| format!("--data {}: {e}", p.display()))?
            }
            None => Vec::new(),
        };
        Ok(Data {
            kind: a.spatial.spatial_data,
            file,
            seed: a.sim.seed,
        })
    }

    fn name(&self) -> String {
        if self.file.is_empty() {
            format!("{:?}", self.kind).to_lowercase()
        } else {
            format!("file ({} objects)", self.file.len())
        }
    }

    /// Object `i` (a file's objects repeat when `i` passes its end).
    fn object(&self, i: u64) -> Rect {
        if !self.file.is_empty() {
            return self.file[(i % self.file.len() as u64) as usize];
        }
        let mut r = Rng::new(self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xda7a);
        let c = |v: i64| v.clamp(0, SPACE) as i32;
        match self.kind {
            SpatialData::Uniform => {
                let x = r.below(SPACE as u64) as i64;
                let y = r.below(SPACE as u64) as i64;
                let w = r.below((SPACE / 1000) as u64) as i64;
                let h = r.below((SPACE / 1000) as u64) as i64;
                rect(c(x), c(y), c(x + w), c(y + h))
            }
            SpatialData::Skewed => {
                let k = r.below(CLUSTERS);
                let mut cr = Rng::new(self.seed ^ 0xc1u64 ^ (k << 32));
                let cx = cr.below(SPACE as u64) as f64;
                let cy = cr.below(SPACE as u64) as f64;
                // Sum of four uniforms: mean 2, σ ≈ 0.577.
                let mut g = || (0..4).map(|_| r.unit()).sum::<f64>() - 2.0;
                let sigma = SPACE as f64 / 100.0 / 0.577;
                let x = (cx + g() * sigma) as i64;
                let y = (cy + g() * sigma) as i64;
                rect(c(x), c(y), c(x), c(y))
            }
        }
    }

    /// A search window of `frac` of the space's area centred on a random object below
    /// `existing`.
    fn window(&self, r: &mut Rng, existing: u64, frac: f64) -> Rect {
        let o = self.object(r.below(existing.max(1)));
        let cx = (o.min_x as i64 + o.max_x as i64) / 2;
        let cy = (o.min_y as i64 + o.max_y as i64) / 2;
        let half = ((frac.sqrt() * SPACE as f64) / 2.0).max(0.5) as i64;
        let c = |v: i64| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
        rect(c(cx - half), c(cy - half), c(cx + half), c(cy + half))
    }
}

/// The paper's power-law request scale (seeds/003 §5.2): `f(t) ∝ t^-0.99` on
/// `(0.00001, 0.01]`, drawn by inverting its distribution function at `u` in `[0, 1)`.
fn power_law_window(u: f64) -> f64 {
    const LO: f64 = 0.00001;
    const HI: f64 = 0.01;
    // F(t) = (t^e - LO^e) / (HI^e - LO^e) with e = 1 - 0.99.
    const E: f64 = 1.0 - 0.99;
    let (a, b) = (LO.powf(E), HI.powf(E));
    (a + u.clamp(0.0, 1.0) * (b - a))
        .powf(1.0 / E)
        .clamp(LO, HI)
}

/// A rectangle from two corners in any order.
fn rect(x0: i32, y0: i32, x1: i32, y1: i32) -> Rect {
    Rect {
        min_x: x0.min(x1),
        min_y: y0.min(y1),
        max_x: x0.max(x1),
        max_y: y0.max(y1),
    }
}

/// CSV lines of 4 (rectangle) or 2 (point) numbers, scaled linearly into `[0, SPACE]`.
fn parse_csv(text: &str) -> Result<Vec<Rect>, String> {
    let mut raw = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v: Vec<f64> = line
            .split(',')
            .map(|f| f.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("line {}: {e}", n + 1))?;
        let r = match v[..] {
            [x, y] => [x, y, x, y],
            [a, b, c, d] => [a, b, c, d],
            _ => {
                return Err(format!(
                    "line {}: {} fields; want x,y or min_x,min_y,max_x,max_y",
                    n + 1,
                    v.len()
                ));
            }
        };
        if r.iter().any(|f| !f.is_finite()) || r[0] > r[2] || r[1] > r[3] {
            return Err(format!(
                "line {}: not a rectangle (non-finite, or a minimum above its maximum)",
                n + 1
            ));
        }
        raw.push(r);
    }
    if raw.is_empty() {
        return Err("no objects".into());
    }
    let lo_x = raw.iter().map(|r| r[0]).fold(f64::INFINITY, f64::min);
    let lo_y = raw.iter().map(|r| r[1]).fold(f64::INFINITY, f64::min);
    let hi_x = raw.iter().map(|r| r[2]).fold(f64::NEG_INFINITY, f64::max);
    let hi_y = raw.iter().map(|r| r[3]).fold(f64::NEG_INFINITY, f64::max);
    let scale = |v: f64, lo: f64, hi: f64| {
        if hi > lo {
            ((v - lo) / (hi - lo) * SPACE as f64).round() as i32
        } else {
            0
        }
    };
    Ok(raw
        .iter()
        .map(|r| Rect {
            min_x: scale(r[0], lo_x, hi_x),
            min_y: scale(r[1], lo_y, hi_y),
            max_x: scale(r[2], lo_x, hi_x),
            max_y: scale(r[3], lo_y, hi_y),
        })
        .collect())
}

/// State shared by the clients of one run.
struct Shared<'a> {
    a: &'a BenchArgs,
    data: Data,
    records: u64,
    insert_pct: u64,
    budget: Option<u64>,
    issued: AtomicU64,
    inserted: AtomicU64,
    next_load: AtomicU64,
    deadline_ns: AtomicU64,
    stop: AtomicBool,
}

/// What one client measured in one phase.
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
    heartbeats: u64,
}

/// The clocks of a client: its time, and the memory node's handler busy time (sim).
trait Clocks {
    fn now_ns(&self) -> u64;
    fn busy_ns(&self) -> Option<u64>;
    fn llc(&self) -> Option<LlcStats>;
}

impl Clocks for ClientCtx {
    fn now_ns(&self) -> u64 {
        ClientCtx::now_ns(self)
    }
    fn busy_ns(&self) -> Option<u64> {
        Some(self.server_busy_ns())
    }
    fn llc(&self) -> Option<LlcStats> {
        Some(self.server_llc_total())
    }
}

impl Clocks for Clock {
    fn now_ns(&self) -> u64 {
        Clock::now_ns(self)
    }
    fn busy_ns(&self) -> Option<u64> {
        None
    }
    fn llc(&self) -> Option<LlcStats> {
        None
    }
}

/// What a client of a run does: the same operations by RDMA or over TCP.
trait SpatialOps {
    async fn insert(&mut self, rect: Rect, id: u64) -> Result<(), CatfishError>;
    async fn search(&mut self, q: Rect, hits: &mut Vec<Entry>) -> Result<(), CatfishError>;
    fn stats(&self) -> ClientStats;
    fn snapshot(&self) -> Snapshot;
}

/// A Catfish client on a fabric endpoint, searching in `mode`.
struct Rdma<'c, E> {
    c: &'c mut CatfishClient,
    ep: &'c E,
    mode: SearchMode,
}

impl<E: Endpoint> SpatialOps for Rdma<'_, E> {
    async fn insert(&mut self, rect: Rect, id: u64) -> Result<(), CatfishError> {
        let qp = self.ep.qp(0)?;
        self.c.insert(qp, rect, id).await
    }
    async fn search(&mut self, q: Rect, hits: &mut Vec<Entry>) -> Result<(), CatfishError> {
        let qp = self.ep.qp(0)?;
        let r = match self.mode {
            SearchMode::Offloading => self.c.search(qp, q, Mode::Offload, hits).await,
            SearchMode::Adaptive => self.c.search_adaptive(self.ep, q, hits).await,
            _ => self.c.search(qp, q, Mode::Messaging, hits).await,
        };
        r.map(|_| ())
    }
    fn stats(&self) -> ClientStats {
        self.c.stats()
    }
    fn snapshot(&self) -> Snapshot {
        snapshot_of(self.ep)
    }
}

/// The TCP baseline's client: counts requests as round trips and bytes with their frames.
impl SpatialOps for TcpClient {
    async fn insert(&mut self, rect: Rect, id: u64) -> Result<(), CatfishError> {
        TcpClient::insert(self, rect, id).map_err(tcp_error)
    }
    async fn search(&mut self, q: Rect, hits: &mut Vec<Entry>) -> Result<(), CatfishError> {
        TcpClient::search(self, q, hits).map_err(tcp_error)
    }
    fn stats(&self) -> ClientStats {
        ClientStats {
            messaging_searches: self.searches,
            ..ClientStats::default()
        }
    }
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            bytes_out: self.bytes_out,
            bytes_in: self.bytes_in,
            round_trips: self.requests,
            doorbells: self.requests,
            ..Snapshot::default()
        }
    }
}

fn tcp_error(e: String) -> CatfishError {
    // The message is printed by the bench; `Protocol` carries a static string only.
    eprintln!("remora: {e}");
    CatfishError::Protocol("the TCP connection failed (see above)")
}

/// One client's LOAD (`load`) or run phase.
async fn part(
    c: &mut impl SpatialOps,
    sh: &Shared<'_>,
    clock: &dyn Clocks,
    worker: usize,
    load: bool,
) -> Result<Part, String> {
    let mut hist = new_hist();
    let mut counts = OpCounts::default();
    let mut rng = Rng::new(sh.a.sim.seed ^ 0x5a71a1 ^ (worker as u64 + 1) << 20);
    let mut hits: Vec<Entry> = Vec::new();
    let s0 = c.snapshot();
    let st0 = c.stats();
    let start_ns = clock.now_ns();
    let busy0 = clock.busy_ns();
    let llc0 = clock.llc();
    let mut local = 0u64;
    loop {
        if sh.stop.load(Ordering::Relaxed) {
            break;
        }
        let insert_id = if load {
            let n = sh.next_load.fetch_add(1, Ordering::Relaxed);
            if n >= sh.records {
                break;
            }
            Some(n)
        } else {
            if let Some(b) = sh.budget
                && sh.issued.fetch_add(1, Ordering::Relaxed) >= b
            {
                break;
            }
            let d = sh.deadline_ns.load(Ordering::Relaxed);
            if d != 0 && local.is_multiple_of(16) && clock.now_ns() >= d {
                sh.stop.store(true, Ordering::Relaxed);
                break;
            }
            (rng.below(100) < sh.insert_pct)
                .then(|| sh.records + sh.inserted.fetch_add(1, Ordering::Relaxed))
        };
        let t0 = clock.now_ns();
        let res: Result<(), CatfishError> = match insert_id {
            Some(id) => {
                counts.inserts += 1;
                c.insert(sh.data.object(id), id).await
            }
            None => {
                counts.reads += 1;
                let existing = sh.records + sh.inserted.load(Ordering::Relaxed);
                let frac = if sh.a.spatial.power_law_windows {
                    power_law_window(rng.unit())
                } else {
                    sh.a.spatial.window
                };
                let q = sh.data.window(&mut rng, existing, frac);
                hits.clear();
                let r = c.search(q, &mut hits).await;
                counts.scanned += hits.len() as u64;
                r
            }
        };
        if let Err(e) = res {
            sh.stop.store(true, Ordering::Relaxed);
            return Err(e.to_string());
        }
        let _ = hist.record(clock.now_ns().saturating_sub(t0).max(1));
        local += 1;
    }
    let st1 = c.stats();
    Ok(Part {
        hist,
        counts,
        snap: c.snapshot() - s0,
        start_ns,
        end_ns: clock.now_ns(),
        busy: busy0.zip(clock.busy_ns()),
        llc: llc0.zip(clock.llc()),
        offloaded: st1.offloaded_searches - st0.offloaded_searches,
        messaging: st1.messaging_searches - st0.messaging_searches,
        node_reads: st1.node_reads - st0.node_reads,
        heartbeats: st1.heartbeats - st0.heartbeats,
    })
}

/// Levels of the tree (leaves included), from its root node's level.
async fn tree_height<Q: QueuePair>(qp: &Q, c: &CatfishClient) -> Result<u16, String> {
    let meta = c.meta();
    let mut w = [0u8; 8];
    let mut last = String::new();
    for _ in 0..64 {
        qp.read(
            GlobalAddr::new(meta.node(), meta.offset() + META_ROOT_OFFSET),
            &mut w,
        )
        .await
        .map_err(|e| e.to_string())?;
        let root = GlobalAddr::from_raw(u64::from_le_bytes(w));
        let mut img = vec![0u8; node_len(c.fanout())];
        qp.read(root, &mut img).await.map_err(|e| e.to_string())?;
        match Node::decode_with(&img, c.fanout()) {
            Ok(n) => return Ok(n.level + 1),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("the root node did not decode: {last}"))
}

/// The Catfish server of an in-process or simulated memory node.
fn server(a: &BenchArgs, max_message: usize) -> CatfishServer {
    CatfishServer::new(max_message).with_heartbeat_interval_ns(a.spatial.heartbeat_us * 1000)
}

/// A client of the tree, with the run's heartbeat interval.
async fn open<Q: QueuePair>(a: &BenchArgs, qp: &Q) -> Result<CatfishClient, String> {
    let mut c = CatfishClient::open(qp).await.map_err(|e| e.to_string())?;
    c.set_heartbeat_interval_ns(a.spatial.heartbeat_us * 1000);
    Ok(c)
}

/// Opens the tree, creating it with the asked fanout and kind if there is none.
async fn open_or_create<Q: QueuePair>(
    qp: &Q,
    fanout: usize,
    kind: TreeKind,
) -> Result<CatfishClient, String> {
    match CatfishClient::open(qp).await {
        Ok(c) if c.kind() != kind => Err(format!(
            "the memory node already holds a Catfish {} tree: run with --tree {} (or restart \
             the memnode for a fresh tree)",
            c.kind().name(),
            c.kind().name()
        )),
        Ok(c) if c.fanout() != fanout => Err(format!(
            "the memory node already holds a Catfish tree of fanout {}: run with --fanout {} \
             (or restart the memnode for a fresh tree)",
            c.fanout(),
            c.fanout()
        )),
        Ok(c) => Ok(c),
        Err(CatfishError::NotCreated) => CatfishClient::create_tree(qp, 1, fanout, kind)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

type ClientResult = Result<(Part, Option<Part>), String>;

/// Runs LOAD and the workload; returns the records of both phases.
pub fn run(a: &BenchArgs) -> Result<Vec<BenchRecord>, String> {
    let data = Data::new(a)?;
    let sh = Shared {
        a,
        records: a.records,
        insert_pct: if a.workload == Workload::B { 10 } else { 0 },
        budget: match (a.operations, a.seconds) {
            (Some(o), _) => Some(o),
            (None, Some(_)) => None,
            (None, None) => Some(a.records),
        },
        data,
        issued: AtomicU64::new(0),
        inserted: AtomicU64::new(0),
        next_load: AtomicU64::new(0),
        deadline_ns: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let (results, height, threads, mut notes) = match a.fabric {
        FabricKind::Sim => run_sim(&sh)?,
        _ if a.spatial.mode == SearchMode::Tcp => run_tcp(&sh)?,
        _ => run_soft(&sh)?,
    };
    let mut loads = Vec::new();
    let mut runs = Vec::new();
    for r in results {
        let (l, r) = r?;
        loads.push(l);
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
    let mut out = vec![record(
        &sh,
        Workload::Load,
        "load",
        &loads,
        fabric,
        threads,
        height,
        notes.clone(),
    )];
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

fn run_sim(sh: &Shared<'_>) -> Result<Outcome, String> {
    let a = sh.a;
    let s = &a.sim;
    if s.compute_nodes == 0 || s.clients_per_node == 0 {
        return Err("--compute-nodes and --clients-per-node must be at least 1".into());
    }
    if s.memory_nodes != 1 {
        return Err("--index catfish runs one memory node: --memory-nodes 1".into());
    }
    let clients = s.compute_nodes * s.clients_per_node;
    let mut model = model_from(s)?;
    if a.spatial.server_threads > 1 {
        model
            .set("server_threads", &a.spatial.server_threads.to_string())
            .map_err(|e| format!("--server-threads: {e}"))?;
    }
    if a.spatial.serve == Serve::Polling && model.get("server_scan_ns") == Some(0.0) {
        model
            .set("server_scan_ns", &POLL_SCAN_NS.to_string())
            .map_err(|e| format!("--serve polling: {e}"))?;
    }
    let created: RefCell<Option<String>> = RefCell::new(None);
    let arrived = Cell::new(0usize);
    let results: RefCell<Vec<ClientResult>> = RefCell::new(Vec::new());
    let height: RefCell<Option<u16>> = RefCell::new(None);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: s.compute_nodes,
        memory_nodes: 1,
        region_len: super::region_bytes(a),
        model: model.clone(),
        seed: s.seed,
        ..SimConfig::default()
    })
    .map_err(|e| e.0)?;
    let max = sim
        .endpoint(0)
        .map_err(|e| e.0)?
        .qp(0)
        .map_err(|e| e.to_string())?
        .max_message();
    sim.set_handler(0, Box::new(server(a, max)))
        .map_err(|e| e.0)?;
    let first = sim.client(0).map_err(|e| e.0)?;
    sim.spawn_with(&first, 0, |ctx| {
        let created = &created;
        async move {
            let r = match ctx.qp(0) {
                Ok(qp) => open_or_create(qp, a.spatial.fanout, a.spatial.tree.kind())
                    .await
                    .map(|_| ()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = r {
                *created.borrow_mut() = Some(e);
            }
        }
    });
    if sim.run().unfinished > 0 {
        return Err(format!(
            "creating the tree on the sim (seed {}) never finished",
            s.seed
        ));
    }
    if let Some(e) = created.borrow().as_ref() {
        return Err(format!(
            "creating the tree on the sim (seed {}): {e}",
            s.seed
        ));
    }
    for node in 0..s.compute_nodes {
        for c in 0..s.clients_per_node {
            let w = node * s.clients_per_node + c;
            let base = sim.client(node).map_err(|e| e.0)?;
            let (arrived, results) = (&arrived, &results);
            sim.spawn_with(&base, 0, move |ctx| async move {
                let r = sim_client(sh, &ctx, w, arrived, clients).await;
                results.borrow_mut().push(r);
            });
        }
    }
    let report = sim.run();
    if report.unfinished > 0 {
        return Err(format!(
            "{} sim clients never finished (seed {}): Catfish stalled in virtual time",
            report.unfinished, report.seed
        ));
    }
    let probe = sim.client(0).map_err(|e| e.0)?;
    sim.spawn_with(&probe, 0, |ctx| {
        let height = &height;
        async move {
            if let Ok(qp) = ctx.qp(0)
                && let Ok(c) = CatfishClient::open(qp).await
            {
                *height.borrow_mut() = tree_height(qp, &c).await.ok();
            }
        }
    });
    sim.run();
    let notes = vec![
        format!("seed {} (same seed, same figures)", s.seed),
        format!(
            "{} compute nodes x {} clients, 1 memory node",
            s.compute_nodes, s.clients_per_node
        ),
        model.summary(),
        "seconds and latencies are virtual (the NIC model's), not wall-clock".into(),
    ];
    drop(sim);
    let h = *height.borrow();
    Ok((results.into_inner(), h, clients, notes))
}

async fn sim_client(
    sh: &Shared<'_>,
    ctx: &ClientCtx,
    w: usize,
    arrived: &Cell<usize>,
    clients: usize,
) -> ClientResult {
    let opened = match ctx.qp(0) {
        Ok(qp) => open(sh.a, qp).await,
        Err(e) => Err(e.to_string()),
    };
    let mut c = match opened {
        Ok(c) => c,
        Err(e) => {
            arrived.set(arrived.get() + 1);
            sh.stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    let mode = sh.a.spatial.mode;
    let mut ops = Rdma {
        c: &mut c,
        ep: ctx.ep(),
        mode,
    };
    let l = part(&mut ops, sh, ctx, w, true).await;
    arrived.set(arrived.get() + 1);
    let l = l?;
    if sh.a.workload == Workload::Load {
        return Ok((l, None));
    }
    while arrived.get() < clients && !sh.stop.load(Ordering::Relaxed) {
        ctx.sleep(1_000).await;
    }
    if let Some(s) = sh.a.seconds {
        let end = ctx.now_ns() + (s * 1e9) as u64;
        let _ = sh
            .deadline_ns
            .compare_exchange(0, end, Ordering::Relaxed, Ordering::Relaxed);
    }
    let r = part(&mut ops, sh, ctx, w, false).await?;
    Ok((l, Some(r)))
}

fn run_soft(sh: &Shared<'_>) -> Result<Outcome, String> {
    let a = sh.a;
    let (local, remote, mut notes) = match &a.connect {
        Some(p) => {
            let path = PathBuf::from(p);
            let info = control::info(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if info.service_name() != "catfish" {
                return Err(format!(
                    "the memnode at {} runs the `{}` service; Catfish needs \
                     `remora memnode --service catfish`",
                    path.display(),
                    info.service_name()
                ));
            }
            let note = format!(
                "memnode {} at {}: the tree persists there, so LOAD adds to earlier runs' objects",
                info.node_id,
                path.display()
            );
            (None, Some(path), vec![note])
        }
        None => {
            let cfg = NodeConfig {
                region_len: super::region_bytes(a),
                ..NodeConfig::default()
            };
            let server = Box::new(server(a, cfg.max_msg));
            let node = SoftMemoryNode::create_with(cfg, server)
                .map_err(|e| format!("creating the memory node: {e}"))?;
            let note = format!(
                "in-process memory node: {} MiB region",
                super::region_bytes(a) >> 20
            );
            (Some(node), None, vec![note])
        }
    };
    let endpoint = || match (&local, &remote) {
        (Some(n), _) => n.endpoint().map_err(|e| e.to_string()),
        (_, Some(p)) => control::connect_all(std::slice::from_ref(p)).map_err(|e| e.to_string()),
        _ => Err("no memory node".to_string()),
    };
    let server_core = match (&local, a.server_core) {
        (None, Some(_)) => {
            return Err("--server-core applies to the in-process memory node".into());
        }
        (None, None) => ServerCore::None,
        (Some(_), Some(c)) => ServerCore::Core(c),
        (Some(_), None) => ServerCore::Auto,
    };
    let plan = plan_cores(a.threads, !a.no_pin, server_core)?;
    for w in &plan.warnings {
        eprintln!("remora: warning: {w}");
    }
    let threads = a.spatial.server_threads;
    let _server = local.as_ref().map(|n| {
        if threads == 1 && a.spatial.serve == Serve::Event {
            n.spawn_server_on(plan.server)
        } else {
            let mode = match a.spatial.serve {
                Serve::Event => ServeMode::Event,
                Serve::Polling => ServeMode::Polling,
            };
            let cores: Vec<usize> = plan.server.into_iter().collect();
            n.spawn_servers(threads, mode, &cores)
        }
    });
    if local.is_some() {
        notes.push(format!(
            "{threads} server thread(s), {:?} mode",
            a.spatial.serve
        ));
    }
    {
        let ep = endpoint()?;
        let qp = ep.qp(0).map_err(|e| e.to_string())?;
        block_on(open_or_create(qp, a.spatial.fanout, a.spatial.tree.kind()))?;
    }
    let clock = Clock::get();
    let barrier = Barrier::new(a.threads);
    let (results, pinning) = run_workers(a.threads, !a.no_pin, |w| -> ClientResult {
        let sync = BarrierGuard {
            barrier: &barrier,
            left: Cell::new(if a.workload == Workload::Load { 1 } else { 3 }),
        };
        let stop = |e: String| {
            sh.stop.store(true, Ordering::SeqCst);
            e
        };
        let ep = endpoint().map_err(stop)?;
        let qp = ep.qp(0).map_err(|e| stop(e.to_string()))?;
        let mut c = block_on(open(a, qp)).map_err(stop)?;
        let mut ops = Rdma {
            c: &mut c,
            ep: &ep,
            mode: a.spatial.mode,
        };
        phases(sh, &clock, &sync, w, &mut ops)
    });
    notes.push(pinning.to_string());
    notes.push(format!("clock: {}", clock.source()));
    let height = endpoint().ok().and_then(|ep| {
        let qp = ep.qp(0).ok()?;
        let c = block_on(CatfishClient::open(qp)).ok()?;
        block_on(tree_height(qp, &c)).ok()
    });
    Ok((results, height, a.threads, notes))
}

/// A worker's LOAD and run phases, in step with the others at `sync`.
fn phases(
    sh: &Shared<'_>,
    clock: &Clock,
    sync: &BarrierGuard<'_>,
    w: usize,
    ops: &mut impl SpatialOps,
) -> ClientResult {
    let a = sh.a;
    sync.wait();
    let l = one(part(ops, sh, clock, w, true))?;
    if a.workload == Workload::Load {
        return Ok((l, None));
    }
    if sync.wait()
        && let Some(s) = a.seconds
    {
        sh.deadline_ns
            .store(clock.now_ns() + (s * 1e9) as u64, Ordering::SeqCst);
    }
    sync.wait();
    let r = one(part(ops, sh, clock, w, false))?;
    Ok((l, Some(r)))
}

/// `--mode tcp`: the same workload over TCP sockets, to an in-process server on loopback
/// or a `--tcp-connect`ed one.
fn run_tcp(sh: &Shared<'_>) -> Result<Outcome, String> {
    let a = sh.a;
    let (_server, addr, mut notes) = match &a.spatial.tcp_connect {
        Some(addr) => {
            let note = format!(
                "TCP server at {addr} (remora memnode --service catfish --tcp-listen): its \
                 tree persists there, so LOAD adds to earlier runs' objects"
            );
            (None, addr.clone(), vec![note])
        }
        None => {
            let s = TcpServer::start(
                "127.0.0.1:0",
                super::region_bytes(a),
                a.spatial.tree.kind(),
                a.spatial.fanout,
                remora::core::catfish::server::MAX_WINDOW,
            )?;
            let addr = s.addr().to_string();
            let note = format!(
                "in-process TCP server on loopback {addr}: one server thread per connection, \
                 kernel TCP both ways (what the RDMA modes avoid)"
            );
            (Some(s), addr, vec![note])
        }
    };
    let plan = plan_cores(a.threads, !a.no_pin, ServerCore::None)?;
    for w in &plan.warnings {
        eprintln!("remora: warning: {w}");
    }
    let clock = Clock::get();
    let barrier = Barrier::new(a.threads);
    let (results, pinning) = run_workers(a.threads, !a.no_pin, |w| -> ClientResult {
        let sync = BarrierGuard {
            barrier: &barrier,
            left: Cell::new(if a.workload == Workload::Load { 1 } else { 3 }),
        };
        let mut c = TcpClient::connect(&addr).inspect_err(|_| {
            sh.stop.store(true, Ordering::SeqCst);
        })?;
        phases(sh, &clock, &sync, w, &mut c)
    });
    notes.push(pinning.to_string());
    notes.push(format!("clock: {}", clock.source()));
    notes
        .push("round trips and bytes per op count TCP requests and framed bytes (no verbs)".into());
    Ok((results, None, a.threads, notes))
}

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
    for p in parts {
        let _ = hist.add(&p.hist);
        counts.add(&p.counts);
        snap = snap + p.snap;
        off += p.offloaded;
        msg += p.messaging;
        reads += p.node_reads;
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
                 window {} of the space, {} data",
                100.0 * share,
                counts.scanned as f64 / searches as f64,
                if a.spatial.power_law_windows {
                    "power law (0.00001..0.01)".to_string()
                } else {
                    a.spatial.window.to_string()
                },
                sh.data.name()
            ),
        );
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
            node_reads_per_offload: if off > 0 {
                reads as f64 / off as f64
            } else {
                0.0
            },
            tree_height: height,
        }),
        cluster_process: None,
        notes,
        run: super::meta::RunInfo::with_cdf(&hist),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_takes_points_and_rectangles_and_scales_them() {
        let r = parse_csv("# c\n0,0\n10,20,30,40\n\n").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0], Rect::new(0, 0, 0, 0).unwrap());
        assert_eq!(r[1].max_x as i64, SPACE);
        assert_eq!(r[1].max_y as i64, SPACE);
        assert_eq!(r[1].min_x as i64, SPACE / 3);
    }

    /// The power law spans the paper's range, and about each decade of it is equally likely
    /// (t^-0.99 is nearly 1/t): a third of the windows below 0.0001, a third above 0.001.
    #[test]
    fn power_law_windows_follow_the_papers_distribution() {
        assert!((power_law_window(0.0) - 0.00001).abs() < 1e-12);
        assert!((power_law_window(1.0) - 0.01).abs() < 1e-9);
        let n = 10_000;
        let ts: Vec<f64> = (0..n)
            .map(|i| power_law_window(i as f64 / n as f64))
            .collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "monotone in u");
        let share = |lim: f64| ts.iter().filter(|t| **t < lim).count() as f64 / n as f64;
        assert!((0.30..0.36).contains(&share(0.0001)), "{}", share(0.0001));
        assert!((0.63..0.69).contains(&share(0.001)), "{}", share(0.001));
    }

    #[test]
    fn csv_rejects_bad_lines() {
        assert!(parse_csv("1,2,3").unwrap_err().contains("line 1"));
        assert!(parse_csv("0,0\n5,5,1,1").unwrap_err().contains("line 2"));
        assert!(parse_csv("a,b").is_err());
        assert!(parse_csv("# only a comment").is_err());
    }
}

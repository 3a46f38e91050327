//! `remora repro`: each paper's headline experiments, in the paper's own cluster shape, on
//! the sim, with a warm-up before every measured phase; JSON + CSV + charts per experiment
//! and one markdown report of the paper's claims next to remora's figures.
//!
//! Each paper is one file (`smart.rs`, `sherman.rs`, `canrt.rs`, `erda.rs`, `catfish/`)
//! holding its experiment list and its claim list: an experiment is a set of `remora bench`
//! command lines (so every figure can be re-run by hand), a claim names the two measured
//! points whose ratio the paper states. Adding a baseline (WORT, Erda's Redo/RAW, ...) when
//! the bench gains it is adding a [`Series`] row and filling the claim's `num`/`den`.
mod canrt;
mod catfish;
mod chime;
mod erda;
pub(crate) mod memory;
pub(crate) mod plot;
pub(crate) mod report;
pub(crate) mod resume;
pub(crate) mod run;
mod sherman;
mod smart;

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Which paper to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PaperSel {
    Smart,
    Sherman,
    Canrt,
    Erda,
    Catfish,
    /// CHIME (SOSP'24), beyond the seeds: not part of `all` (its rows are not in the
    /// committed report).
    Chime,
    All,
}

/// How large the runs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScaleSel {
    /// Small key counts and short runs: the whole `all` in a few minutes (CI).
    Quick,
    /// Each paper as large as an hour of CPU for all five allows on a 2-core machine: SMART
    /// 2M keys (paper 60M), Sherman 4M (paper 1B), CANRT 500k, Erda 600k, Catfish 300k
    /// rectangles (paper 2M); 50k measured ops after 25k warm-up ops (Sherman 100k after
    /// 50k). Runs whose load is not measured bulk-load SMART's and Sherman's trees once per
    /// experiment; the rest insert every key, and that CPU, not memory, is what binds
    /// (measured on a 24 GiB machine, `remora repro all --memory` measures yours: ~95 B per
    /// SMART key, 60 per Sherman key, ~300 per CANRT key, ~1000 per Erda key, 105 per Catfish
    /// rectangle). Also measures the memory first and reports it.
    Full,
    /// A few hundred keys: for tests of the tool itself, not for figures.
    #[value(hide = true)]
    Tiny,
}

#[derive(Debug, Clone, Args)]
pub struct ReproArgs {
    /// The paper whose experiments to run, or all five.
    #[arg(value_enum)]
    pub paper: PaperSel,
    #[arg(long, value_enum, default_value = "quick")]
    pub scale: ScaleSel,
    /// Directory for report.md, report.json, each experiment's JSON/CSV and the charts.
    #[arg(long, default_value = "repro-out")]
    pub out: PathBuf,
    /// After the run, compare its report with this committed report.json: fail if a row
    /// is missing or added, a ratio moved to the other side of 1, or a row's class got worse
    /// (faithful to rough or off, rough to off; sides and classes are not compared for
    /// wall-clock rows, measured on real threads: they depend on the machine's load).
    #[arg(long, value_name = "REPORT_JSON")]
    pub check: Option<PathBuf>,
    /// No per-experiment progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Run only these experiments (ids as in the report, comma-separated); the report keeps
    /// the claims measured from them.
    #[arg(long, value_delimiter = ',', value_name = "ID,...")]
    pub only: Vec<String>,
    /// Only measure how far `--scale full` can go on this machine (a minute or two): each
    /// selected paper's index loaded in child processes at two key counts and two client
    /// counts; bytes and CPU per key, bytes per client, and the most keys that fit this
    /// machine's memory and a CPU budget (memory.md, memory.json). `--scale full` measures
    /// it first and puts it in its report.
    #[arg(long)]
    pub memory: bool,
    /// Run every series at seeds 1..=N instead of its own seed list (most run one seed; the
    /// seed-noisy ones several): each row then gives the median of its N per-seed ratios,
    /// graded, with their smallest and largest beside it. For measuring how far a row moves
    /// with the seed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=99))]
    pub seeds: Option<u64>,
    /// Go on from a run stopped part-way (same --out): an experiment whose <out>/<ID>.json
    /// exists is loaded instead of run if it holds points of every `remora bench` command
    /// this binary runs for it, and of no other, in the same order and under the same
    /// series labels (each point records its command); otherwise it runs again, with one
    /// line on stderr saying why. Same for each index's fit in memory.json (--memory,
    /// --scale full). report.md and report.json list what was reused, from which file and
    /// measured by which build (crate version and git commit, in every point of the files
    /// this binary writes; "unknown" for older files); the rest of the report is the same
    /// as that of a run in one go. The commands do not say which code measured them, so a
    /// file is reused only if every point in it was measured by this same build (same crate
    /// version and git commit; a `-dirty` build names its commit, not its edits): points of
    /// another build, or of a file without build records, are measured again.
    #[arg(long)]
    pub resume: bool,
    /// As --resume, but also reuse points measured by other builds (and files without build
    /// records), listed with their build in the report: only for a change known not to move
    /// the sim's figures.
    #[arg(long)]
    pub resume_any_build: bool,
}

/// The sizes of one scale.
#[derive(Debug, Clone)]
pub struct Scale {
    pub name: &'static str,
    /// Keys loaded (key-value indexes).
    pub records: u64,
    /// Measured operations per run.
    pub ops: u64,
    /// Unmeasured warm-up operations per run.
    pub warmup: u64,
    /// Rectangles loaded (Catfish).
    pub rects: u64,
    /// Client threads per compute node of the throughput-vs-clients curves.
    pub per_node: Vec<usize>,
}

/// Keys (rectangles for Catfish) each paper loads at `--scale full`, and its measured ops
/// and warm-up ops per run, sized so that `remora repro all --scale full` finishes in about
/// an hour of CPU on a 2-core machine (docs/repro-full/README.md has the measured times).
/// Memory does not bind (`--memory`: SMART ~95 B/key, Sherman ~60); CPU spent inserting
/// keys does. A run whose load is not measured bulk-loads (SMART with 8-byte or string keys, Sherman
/// and FG+, `bench/bulk.rs`; CHIME, `bench/bulk_chime.rs`; CANRT, `bench/bulk_canrt.rs`; WORT and WOART, the tree sorted
/// inserts make, `bench/bulk_wort.rs`; Erda, `bench/bulk_erda.rs`) once per experiment and index, and the experiment's other runs
/// start from a copy of it; every other run inserts all its keys, at 6-19 µs of CPU a key
/// (`--memory`: SMART 6.3, Sherman 7.1, CANRT 10-13, Erda 11.3, Catfish 19.2):
/// - SMART, 2M keys (paper 60M): 11 of its runs insert, the three integer-key LOAD bars,
///   the two string-key LOAD bars and each factor step's LOAD (the ten string-key runs
///   inserted until string keys got their bulk loader); at 60M those inserts alone would
///   take about 70 minutes of CPU (11 x 60M x 6.3 µs).
/// - Sherman, 4M keys (paper 1B, 80% full): the five factor steps' LOAD insert every key
///   (5 x 4M x 7.1 µs: 2.4 minutes of CPU; 10 hours at 1B); the rest bulk-loads.
/// - CANRT, 500k keys (the paper states none; 1M assumed for its cache scaling): runs whose
///   load is not measured bulk-load (`bench/bulk_canrt.rs`, 8- and 16-byte keys; WORT and
///   WOART `bench/bulk_wort.rs`, the tree sorted inserts make); its range
///   experiments bulk-load at every scale (`--bulk-load`).
/// - Erda, 600k keys (the paper states none; its baselines' tables hold at most 20k, so
///   the runs scale the LLC up by keys / 20k: `erda/sizing.rs`): runs whose load is not
///   measured bulk-load (`bench/bulk_erda.rs`, the server's cache started as its load left
///   it: at quick's 10,000 keys the 20 Erda points of erda-ycsb, erda-values and
///   erda-clients ran within 1.6% of their inserted Mops and p50 latency).
/// - Catfish, 300k rectangles (paper 2M): runs whose load is not measured bulk-load
///   (`bench/spatial/load.rs`, the server's own inserts: at quick's 2M rectangles the
///   catfish-small points ran within 0.7% of the inserted ones' Mops).
const FULL: &[(&str, u64, u64, u64)] = &[
    ("smart", 2_000_000, 50_000, 25_000),
    ("sherman", 4_000_000, 100_000, 50_000),
    ("canrt", 500_000, 50_000, 25_000),
    ("erda", 600_000, 50_000, 25_000),
    ("catfish", 300_000, 50_000, 0),
];

impl Scale {
    pub fn of(s: ScaleSel) -> Scale {
        match s {
            ScaleSel::Quick => Scale {
                name: "quick",
                records: 10_000,
                ops: 10_000,
                warmup: 5_000,
                rects: 10_000,
                per_node: vec![1, 2, 4],
            },
            ScaleSel::Tiny => Scale {
                name: "tiny",
                records: 200,
                ops: 200,
                warmup: 50,
                rects: 200,
                per_node: vec![1],
            },
            ScaleSel::Full => Scale {
                name: "full",
                records: 500_000,
                ops: 50_000,
                warmup: 25_000,
                rects: 300_000,
                per_node: vec![1, 2, 4],
            },
        }
    }

    /// This scale's sizes for paper `key` (`full` sizes each paper to its CPU budget).
    pub fn for_paper(&self, key: &str) -> Scale {
        let mut s = self.clone();
        if self.name == "full"
            && let Some(&(_, keys, ops, warmup)) = FULL.iter().find(|f| f.0 == key)
        {
            s.records = keys;
            s.rects = keys;
            s.ops = ops;
            s.warmup = warmup;
        }
        s
    }

    /// The flags every key-value run of paper `profile` shares: [`Scale::kv_flags`], the
    /// paper's hardware (`--profile`), and its last-level cache scaled with the data set:
    /// `server_llc_lines` x keys loaded / the paper's keys (at least 64 lines, at most the
    /// profile's), so a run of 10k keys misses the cache as the paper's 60M did instead of
    /// fitting in it whole.
    pub fn sim_flags(&self, profile: &str, paper_keys: u64) -> String {
        format!(
            "{} --profile {profile} --set server_llc_lines={}",
            self.kv_flags(),
            self.llc_lines(profile, paper_keys)
        )
    }

    /// The profile's LLC in lines, scaled by keys loaded / `paper_keys`.
    pub fn llc_lines(&self, profile: &str, paper_keys: u64) -> u64 {
        let full = remora::poller::sim::profiles::profile(profile)
            .map(|p| p.model().server_llc_lines)
            .unwrap_or(remora::poller::sim::Model::default().server_llc_lines);
        let scaled = full * self.records as f64 / paper_keys.max(1) as f64;
        (scaled.round() as u64).clamp(64, full as u64)
    }

    /// The client threads per compute node of a paper's sweep `paper` (its scripts' counts,
    /// ascending): all of them at `full`, the first, a middle one and the last at `quick`
    /// (CI-affordable), the first alone at `tiny`.
    pub fn sweep_points(&self, paper: &[usize]) -> Vec<usize> {
        match (self.name, paper) {
            (_, []) => vec![1],
            ("full", _) => paper.to_vec(),
            ("tiny", _) => vec![paper[0]],
            _ if paper.len() <= 3 => paper.to_vec(),
            _ => vec![paper[0], paper[paper.len() / 2], paper[paper.len() - 1]],
        }
    }

    /// The flags every key-value run of this scale shares.
    pub fn kv_flags(&self) -> String {
        format!(
            "--fabric sim --records {} --operations {} --warmup {}",
            self.records, self.ops, self.warmup
        )
    }

    /// The largest client count of the curves over `nodes` compute nodes.
    pub fn max_clients(&self, nodes: usize) -> usize {
        self.per_node.iter().max().copied().unwrap_or(1) * nodes
    }
}

/// How an experiment is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chart {
    /// Throughput vs client threads, one line per series (plus the latency CDFs at the
    /// largest client count).
    Curve,
    /// Throughput per workload, one bar per series or factor step (plus the latency CDFs).
    Bars,
}

/// One line or bar group of an experiment: a `remora bench` command line, run once per
/// workload.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    /// The bench flags (without `--workload`).
    pub args: String,
    /// Workloads, one bench run each (`--factors` runs take theirs in `args`).
    pub workloads: Vec<&'static str>,
    /// Seeds to run every command at (`--seed N` added to each): a claim whose two points
    /// both have several seeds gets the median of its per-seed ratios and their spread
    /// ([`report::seeds`]). Empty: once, at the command's own seed (the bench default, 1).
    pub seeds: Vec<u64>,
}

impl Series {
    pub fn new(label: &str, args: String, workloads: &[&'static str]) -> Series {
        Series {
            label: label.into(),
            args,
            workloads: workloads.to_vec(),
            seeds: Vec::new(),
        }
    }

    /// Runs every command of the series at seeds `1..=n` (a row from one seed of a noisy
    /// figure, a tail latency, says more about the seed than the system).
    pub fn over_seeds(mut self, n: u64) -> Series {
        self.seeds = (1..=n).collect();
        self
    }

    /// The seeds its commands run at: `over` (`remora repro --seeds N`: 1..=N for every
    /// series) if given, else its own; None: once, at the command's own seed.
    pub fn seeds_to_run(&self, over: Option<u64>) -> Option<Vec<u64>> {
        let seeds = over.map_or_else(|| self.seeds.clone(), |n| (1..=n).collect());
        (!seeds.is_empty()).then_some(seeds)
    }
}

/// `series` with workload `wl` of each series labelled one of `labels` split off into a
/// series of its own run at seeds 1..=`seeds`, in the chart's order (its workloads before
/// `wl`, `wl`, those after); every other series and workload runs as it did.
pub fn seeded_workload(series: Vec<Series>, labels: &[&str], wl: &str, seeds: u64) -> Vec<Series> {
    let mut out = Vec::new();
    for s in series {
        let at = s.workloads.iter().position(|w| *w == wl);
        let Some(i) = at.filter(|_| labels.contains(&s.label.as_str())) else {
            out.push(s);
            continue;
        };
        let part = |w: &[&'static str]| Series {
            workloads: w.to_vec(),
            ..s.clone()
        };
        let (before, after) = (&s.workloads[..i], &s.workloads[i + 1..]);
        if !before.is_empty() {
            out.push(part(before));
        }
        out.push(part(&s.workloads[i..=i]).over_seeds(seeds));
        if !after.is_empty() {
            out.push(part(after));
        }
    }
    out
}

/// `series` with the workloads `wls` of each series split off into series of their own that
/// run over a late window instead of an operation budget: their commands lose `--operations`
/// and `--warmup` and gain `--warmup-seconds warm --seconds window` (`remora bench`: the
/// window opens `warm` into one continuous run, with no barrier to drain the lock queues),
/// in the chart's order; every other workload runs as it did. For workloads whose
/// contention builds over milliseconds (hot-key writes), where a budget after the warm-up's
/// barrier measures a transient.
pub fn over_window(series: Vec<Series>, wls: &[&str], (warm, window): (f64, f64)) -> Vec<Series> {
    let timed = |args: &str| {
        let mut out: Vec<&str> = Vec::new();
        let mut it = args.split_whitespace();
        while let Some(w) = it.next() {
            if w == "--operations" || w == "--warmup" {
                it.next();
            } else {
                out.push(w);
            }
        }
        format!(
            "{} --seconds {window} --warmup-seconds {warm}",
            out.join(" ")
        )
    };
    let mut out = Vec::new();
    for s in series {
        if s.workloads.is_empty() {
            out.push(s);
            continue;
        }
        let mut i = 0;
        while i < s.workloads.len() {
            let on = wls.contains(&s.workloads[i]);
            let n = s.workloads[i..]
                .iter()
                .take_while(|w| wls.contains(w) == on)
                .count();
            out.push(Series {
                workloads: s.workloads[i..i + n].to_vec(),
                args: if on { timed(&s.args) } else { s.args.clone() },
                ..s.clone()
            });
            i += n;
        }
    }
    out
}

#[derive(Debug, Clone)]
pub struct Experiment {
    /// File stem of its outputs, e.g. `smart-ycsb-int`.
    pub id: String,
    pub title: String,
    pub chart: Chart,
    pub series: Vec<Series>,
}

/// Which measured figure a claim compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Throughput: ratio = num Mops / den Mops.
    Mops,
    /// Median latency: ratio = den p50 / num p50 (how many times lower num's is).
    P50,
    /// 99th percentile latency: den p99 / num p99.
    P99,
    /// Mean latency: den mean / num mean.
    Mean,
    /// Server CPU per operation: den ns/op / num ns/op.
    ServerCpu,
    /// NVM bytes stored per create (Erda's Table 1): den B / num B.
    NvmCreate,
    /// NVM bytes stored per update: den B / num B.
    NvmUpdate,
}

impl Metric {
    /// The unit of a point's figure of this metric (and of [`PaperFigures`]).
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Mops => "Mops",
            Metric::ServerCpu => "ns/op",
            Metric::NvmCreate | Metric::NvmUpdate => "B/op",
            _ => "µs",
        }
    }
}

/// One measured point a claim picks: an experiment's series (or factor step) on a workload,
/// at a client count (None: every client count of the experiment; the claim's ratio is the
/// best one, the papers' "up to").
#[derive(Debug, Clone)]
pub struct Pick {
    pub exp: String,
    pub series: String,
    pub workload: &'static str,
    /// Only the point at this client count. A claim one of whose picks names a count pairs
    /// its two points whatever their counts (a gain across client counts of one series).
    pub clients: Option<usize>,
}

impl Pick {
    pub fn new(exp: &str, series: &str, workload: &'static str) -> Pick {
        Pick {
            exp: exp.into(),
            series: series.into(),
            workload,
            clients: None,
        }
    }
    /// The point at `clients` clients only.
    pub fn at(exp: &str, series: &str, workload: &'static str, clients: usize) -> Pick {
        Pick {
            clients: Some(clients),
            ..Pick::new(exp, series, workload)
        }
    }
}

/// A ratio a paper states, and the two points of remora's runs that measure it.
#[derive(Debug, Clone)]
pub struct Claim {
    /// Stable row key of the report (`--check` matches rows by it).
    pub id: &'static str,
    pub what: &'static str,
    /// The paper's figure: a ratio, or a range of ratios.
    pub paper: (f64, f64),
    pub metric: Metric,
    /// "up to": the best ratio over the experiment's client counts; otherwise the ratio at
    /// the largest client count.
    pub up_to: bool,
    /// Numerator and denominator; None: remora cannot measure it yet (see `missing`).
    pub points: Option<(Pick, Pick)>,
    /// Where the ratio cannot be measured: the system's own figure, shown alone.
    pub alone: Option<Pick>,
    /// Why remora has no figure (a missing baseline or mechanism).
    pub missing: &'static str,
    /// Known reasons for a gap between the paper's figure and remora's.
    pub note: &'static str,
    /// The paper's own figures of the two points, where it gives them.
    pub figures: Option<PaperFigures>,
    /// Further experiments an "up to" ranges over: the same two series in each of them too
    /// (the paper's best over its request scales, each scale an experiment here). Empty:
    /// the picks' own experiment only.
    pub across: Vec<String>,
    /// A "same throughput with N times less resource" claim (`Claim::equal_at`): the
    /// numerator series measured at several divisors of the resource; the row's figure is
    /// the divisor at which the numerator's throughput falls to the denominator's,
    /// interpolated (`report/equal.rs`). Empty: an ordinary ratio of two points.
    pub equal_at: Vec<(f64, Pick)>,
}

/// The paper's absolute figures of a claim's two points (not only their ratio): the report
/// puts remora's beside them, with remora / paper.
#[derive(Debug, Clone)]
pub struct PaperFigures {
    /// The numerator's figure, in the claim metric's unit ([`Metric::unit`]).
    pub num: Option<f64>,
    /// The denominator's figure, same unit.
    pub den: Option<f64>,
    /// Where the paper gives them (section, figure or table) and at which point of its runs.
    pub source: &'static str,
}

/// One paper: its setup, its experiments and its claims.
pub struct Paper {
    pub key: &'static str,
    pub name: &'static str,
    /// The paper's own setup, as it states it.
    pub paper_setup: &'static str,
    /// The paper's own key (or object) count, where it states one.
    pub paper_keys: Option<u64>,
    /// remora's setup for it (cluster shape, keys, scale).
    pub setup: String,
    pub experiments: Vec<Experiment>,
    pub claims: Vec<Claim>,
}

impl Claim {
    /// A claim remora measures: `num` over `den`.
    #[allow(clippy::too_many_arguments)]
    pub fn ratio(
        id: &'static str,
        what: &'static str,
        paper: (f64, f64),
        metric: Metric,
        up_to: bool,
        num: Pick,
        den: Pick,
        note: &'static str,
    ) -> Claim {
        Claim {
            id,
            what,
            paper,
            metric,
            up_to,
            points: Some((num, den)),
            alone: None,
            missing: "",
            note,
            figures: None,
            across: Vec::new(),
            equal_at: Vec::new(),
        }
    }

    /// A claim remora cannot measure yet (`missing` says why); `alone` shows the system's
    /// own figure. (No row needs it since CANRT's range-100k is measured at every scale;
    /// kept for the next row that cannot be.)
    #[allow(dead_code)]
    pub fn unmeasured(
        id: &'static str,
        what: &'static str,
        paper: (f64, f64),
        metric: Metric,
        alone: Option<Pick>,
        missing: &'static str,
        note: &'static str,
    ) -> Claim {
        Claim {
            id,
            what,
            paper,
            metric,
            up_to: false,
            points: None,
            alone,
            missing,
            note,
            figures: None,
            across: Vec::new(),
            equal_at: Vec::new(),
        }
    }

    /// The paper's absolute figures of the numerator and the denominator (in
    /// [`Metric::unit`]), and where it gives them.
    pub fn figures(mut self, num: Option<f64>, den: Option<f64>, source: &'static str) -> Claim {
        self.figures = Some(PaperFigures { num, den, source });
        self
    }

    /// A claim of the same throughput with `paper` times less of a resource: `sweep` holds
    /// the numerator's series at each divisor of the resource (`(divisor, pick)`), `den` the
    /// denominator's point with all of it. The row's figure is the divisor at which the
    /// numerator's throughput equals the denominator's, interpolated between the two
    /// measured divisors that bracket it (`report/equal.rs`).
    pub fn equal_at(
        id: &'static str,
        what: &'static str,
        paper: (f64, f64),
        sweep: Vec<(f64, Pick)>,
        den: Pick,
        note: &'static str,
    ) -> Claim {
        let first = sweep.first().map(|(_, p)| p.clone());
        Claim {
            equal_at: sweep,
            ..Claim::ratio(
                id,
                what,
                paper,
                Metric::Mops,
                false,
                first.unwrap_or_else(|| den.clone()),
                den,
                note,
            )
        }
    }

    /// An "up to" over the picks' series in experiments `exps` as well as their own.
    pub fn across(mut self, exps: &[&str]) -> Claim {
        self.across = exps.iter().map(|e| e.to_string()).collect();
        self
    }
}

/// The papers `sel` names, at `scale`.
pub fn papers(sel: PaperSel, scale: &Scale) -> Vec<Paper> {
    let all = [
        PaperSel::Smart,
        PaperSel::Sherman,
        PaperSel::Canrt,
        PaperSel::Erda,
        PaperSel::Catfish,
        PaperSel::Chime,
    ];
    all.iter()
        .filter(|&&p| (sel == PaperSel::All && p != PaperSel::Chime) || sel == p)
        .map(|p| match p {
            PaperSel::Smart => smart::paper(&scale.for_paper("smart")),
            PaperSel::Sherman => sherman::paper(&scale.for_paper("sherman")),
            PaperSel::Canrt => canrt::paper(&scale.for_paper("canrt")),
            PaperSel::Erda => erda::paper(&scale.for_paper("erda")),
            PaperSel::Chime => chime::paper(&scale.for_paper("chime")),
            _ => catfish::paper(&scale.for_paper("catfish")),
        })
        .collect()
}

impl Paper {
    /// Keeps only the experiments `only` names (all if empty) and the claims measured from
    /// them.
    pub fn restrict(mut self, only: &[String]) -> Paper {
        if only.is_empty() {
            return self;
        }
        let keep = |e: &str| only.iter().any(|o| o == e);
        self.experiments.retain(|e| keep(&e.id));
        self.claims.retain(|c| match (&c.points, &c.alone) {
            (Some((n, d)), _) => keep(&n.exp) && keep(&d.exp),
            (None, Some(k)) => keep(&k.exp),
            (None, None) => false,
        });
        self
    }
}

pub fn run(a: &ReproArgs) -> Result<(), String> {
    run::run(a)
}

//! The outputs of `remora repro`: per experiment a JSON and a CSV of its points and its
//! charts; per run `report.json` (the claim rows, which `--check` compares) and
//! `report.md` (the paper's claim, remora's figure, the ratio, its class, setup and seed side
//! by side).
//!
//! `evaluate.rs` computes a claim's row (`seeds.rs`: the median and spread of a row measured
//! over several seeds; `equal.rs`: a "same throughput with N times less" row), `class.rs` grades it against the paper, `why.rs`
//! explains a row on the wrong side of 1, `markdown.rs` writes report.md, `files.rs` the
//! per-experiment JSON, CSV and charts, `check.rs` compares a run with the committed report
//! (`--check`).
mod check;
pub mod class;
mod equal;
mod evaluate;
mod files;
mod markdown;
pub mod seeds;
mod why;

use super::{Claim, Metric, Paper, ReproArgs, Scale};
use crate::bench::phase::BenchRecord;
pub use check::check;
pub use evaluate::evaluate;
use evaluate::wname;
pub use files::{charts, csv, write_points};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use why::{machine_of, reason};

/// One measured point: a series (or factor step) on a workload at a client count.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Point {
    pub series: String,
    pub workload: String,
    /// Client threads in all.
    pub clients: usize,
    pub coroutines: usize,
    pub mops: f64,
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub mean_ns: f64,
    pub round_trips_per_op: f64,
    pub verbs_per_op: f64,
    /// Bytes each way per operation, summed.
    pub bytes_per_op: f64,
    pub server_ns_per_op: Option<f64>,
    /// Share of the memory nodes' link bandwidth the run used (sim model), 0..1.
    pub link_use: Option<f64>,
    /// Share of the memory nodes' NIC message rate the run used (sim model), 0..1.
    pub nic_use: Option<f64>,
    /// Share of the memory node's handler CPU the run used (sim model), 0..1.
    pub server_use: Option<f64>,
    /// Catfish: share of searches offloaded.
    pub offloaded_share: Option<f64>,
    /// Catfish: what an offloaded search cost, where the run offloaded any.
    #[serde(default)]
    pub offload: Option<OffloadFacts>,
    /// NVM bytes stored per create and per update (Erda's Table 1 measure), where the phase
    /// has one write type (LOAD: creates; update-only, A, B: updates).
    #[serde(default)]
    pub nvm_create_bytes: Option<f64>,
    #[serde(default)]
    pub nvm_update_bytes: Option<f64>,
    /// Operations completed in the run's second half over its first (bench's `steady`):
    /// ~1 at a steady rate; None in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady: Option<f64>,
    pub seed: u64,
    pub memory_nodes: usize,
    pub compute_nodes: usize,
    /// `sim` (virtual time, deterministic), or `soft`/`tcp`: real threads and sockets on
    /// the machine that ran it, wall-clock, not deterministic.
    #[serde(default)]
    pub fabric: String,
    /// `[latency ns, fraction]`.
    pub cdf: Vec<[f64; 2]>,
    /// The bench command that measured it.
    pub command: String,
    /// The binary that measured it (crate version, git commit); None in files written
    /// before builds were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::repro::resume::Build>,
    /// Wall-clock points (any fabric but the sim): the machine and its load average when
    /// the point was measured, so a report made later (`--resume`) states the load the
    /// figure had, not the load at report time. None for sim points and older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

impl Point {
    /// The run's steadiness where its rate moved while it ran (bench's `unsteady`).
    pub fn unsteady(&self) -> Option<f64> {
        self.steady
            .filter(|&r| crate::bench::phase::steady::unsteady(r))
    }

    pub fn of(label: &str, command: &str, r: &BenchRecord) -> Point {
        let model = r.run.model.as_ref();
        let param = |n: &str| model.and_then(|m| m.get(n)).copied();
        let mns = r.run.cluster.memory_nodes.max(1) as f64;
        let ops_s = r.mops * 1e6;
        let bytes = r.per_op.bytes_in + r.per_op.bytes_out;
        Point {
            series: r.run.step.clone().unwrap_or_else(|| label.to_string()),
            workload: r.workload.clone(),
            clients: r.run.cluster.clients,
            coroutines: r.run.cluster.coroutines,
            mops: r.mops,
            p50_ns: r.latency.p50_ns,
            p99_ns: r.latency.p99_ns,
            mean_ns: r.latency.mean_ns,
            round_trips_per_op: r.per_op.round_trips,
            verbs_per_op: r.per_op.verbs,
            bytes_per_op: bytes,
            server_ns_per_op: r.server_ns_per_op,
            link_use: param("link_gbps").map(|g| ops_s * bytes * 8.0 / (mns * g * 1e9)),
            nic_use: param("nic_mops").map(|m| ops_s * r.per_op.verbs / (mns * m * 1e6)),
            server_use: r
                .server_ns_per_op
                .zip(param("server_threads"))
                .map(|(ns, t)| ops_s * ns / 1e9 / t.max(1.0)),
            offloaded_share: r.spatial.as_ref().map(|s| s.offloaded_share),
            offload: r
                .spatial
                .as_ref()
                .filter(|s| s.offloaded_searches > 0)
                .map(|s| OffloadFacts {
                    reads: s.node_reads_per_offload,
                    conflicts: s.conflicts_per_offload,
                    tree_height: s.tree_height,
                }),
            nvm_create_bytes: r.nvm_store_bytes_by_op.as_ref().and_then(|n| n.create),
            nvm_update_bytes: r.nvm_store_bytes_by_op.as_ref().and_then(|n| n.update),
            steady: r.steady,
            seed: r.run.seed,
            memory_nodes: r.run.cluster.memory_nodes,
            compute_nodes: r.run.cluster.compute_nodes,
            fabric: r.fabric.clone(),
            cdf: r.run.latency_cdf.clone(),
            command: command.into(),
            build: Some(crate::repro::resume::Build::this()),
            machine: (r.fabric != "sim").then(why::machine),
        }
    }

    fn metric(&self, m: Metric) -> f64 {
        match m {
            Metric::Mops => self.mops,
            Metric::P50 => self.p50_ns,
            Metric::P99 => self.p99_ns,
            Metric::Mean => self.mean_ns,
            Metric::ServerCpu => self.server_ns_per_op.unwrap_or(f64::NAN),
            Metric::NvmCreate => self.nvm_create_bytes.unwrap_or(f64::NAN),
            Metric::NvmUpdate => self.nvm_update_bytes.unwrap_or(f64::NAN),
        }
    }

    /// This point's figure of `m` in [`Metric::unit`] (µs for latencies).
    fn in_unit(&self, m: Metric) -> f64 {
        match m {
            Metric::P50 | Metric::P99 | Metric::Mean => self.metric(m) / 1e3,
            _ => self.metric(m),
        }
    }

    /// What bounds this point, if the model says anything is near saturation.
    fn bound(&self) -> Option<String> {
        let mut b = Vec::new();
        for (what, u) in [
            ("memory-node link bandwidth", self.link_use),
            ("memory-node NIC message rate", self.nic_use),
            ("server CPU", self.server_use),
        ] {
            if let Some(u) = u.filter(|u| *u >= 0.7) {
                b.push(format!("{what} {:.0}% used", 100.0 * u.min(9.99)));
            }
        }
        (!b.is_empty()).then(|| b.join(", "))
    }
}

/// What a Catfish run's offloaded searches cost (`bench/spatial.rs`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct OffloadFacts {
    /// Node READs per offloaded search.
    pub reads: f64,
    /// Read-write conflicts (torn images read again, traversals started over) per
    /// offloaded search.
    pub conflicts: f64,
    /// Levels of the tree after the run.
    pub tree_height: Option<u16>,
}

/// A paper range whose top is this or more reads "more than the bottom".
pub const OPEN_ENDED: f64 = 100.0;

/// A claim's row in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub paper: String,
    pub id: String,
    pub what: String,
    pub paper_lo: f64,
    pub paper_hi: f64,
    /// remora's ratio (None: not measurable yet).
    pub remora: Option<f64>,
    /// "above" or "below" 1 (or "none"): what `--check` compares.
    pub side: String,
    /// remora's ratio on the same side of 1 as the paper's.
    pub agrees: Option<bool>,
    /// remora / the paper's (the middle of its range).
    pub of_paper: Option<f64>,
    /// Where remora measured it (client count, workload), and the two figures.
    pub measured: String,
    /// What the model says about the two points (saturated resources, RT/op, bytes/op).
    pub diagnosis: String,
    pub note: String,
    pub missing: String,
    pub seed: Option<u64>,
    /// Measured on real threads (soft fabric, TCP sockets), wall-clock on the machine that
    /// ran it: `--check` compares the row's presence, not its side of 1 (on a busy 2-core
    /// machine the side does not hold from run to run).
    #[serde(default)]
    pub wall_clock: bool,
    /// Where remora's ratio is on the other side of 1 from the paper's: why, from the two
    /// points' measurements (what saturates, queueing, cost per operation).
    #[serde(default)]
    pub reason: String,
    /// How close to the paper ([`class::Class`]): `faithful` (of_paper 0.67-1.5), `rough`
    /// (0.33-3), `off`, `direction only` (the paper says "more than 1x"), `unmeasured`.
    #[serde(default)]
    pub class: String,
    /// An "up to" claim: `remora` is the best ratio over the sweep's client counts.
    #[serde(default)]
    pub up_to: bool,
    /// The smallest and the largest ratio over the sweep's client counts (rows measured at
    /// more than one), so an "up to" pick cannot hide a point on the wrong side of 1.
    #[serde(default)]
    pub sweep_min: Option<SweepEnd>,
    #[serde(default)]
    pub sweep_max: Option<SweepEnd>,
    /// The paper's absolute figures of the two points beside remora's.
    #[serde(default)]
    pub figures: Vec<Figure>,
    /// Measured over several seeds: `remora` is the median of the per-seed ratios (its
    /// class too), this their spread and every seed's ratio; `seed`, `measured` and the
    /// figures are the median seed's. None: one seed (and reports from before seeds).
    #[serde(default)]
    pub seeds: Option<seeds::Seeds>,
    /// The row's points (of the seed shown) whose run's rate moved while it ran (bench's
    /// `steady` outside 0.8-1.25): `series: ratio`. Their figures hold for the run's length
    /// only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsteady: Vec<String>,
}

/// A ratio of a sweep and the client count it was measured at.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SweepEnd {
    pub ratio: f64,
    pub clients: usize,
    /// The experiment, where the row's "up to" ranges across several (`Claim::across`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<String>,
}

impl SweepEnd {
    /// Where it was measured: `32 clients`, or `catfish-basic-large, 32 clients`.
    pub fn at(&self) -> String {
        match &self.exp {
            Some(e) => format!("{e}, {} clients", self.clients),
            None => format!("{} clients", self.clients),
        }
    }
}

/// One of the paper's absolute figures beside remora's at the same point of the claim.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    /// The series (system) it is the figure of.
    pub series: String,
    /// The client count of remora's figure: the sweep's largest.
    #[serde(default)]
    pub clients: usize,
    /// Its unit: Mops, µs, ns/op, B/op.
    pub unit: String,
    pub paper: f64,
    /// remora's figure at the claim's picked point (None: not measured).
    pub remora: Option<f64>,
    /// remora / paper.
    pub of_paper: Option<f64>,
    /// Its class by the ratio classes' thresholds (remora / paper within 0.67-1.5
    /// faithful, 0.33-3 rough, off further; unmeasured): [`class::of_figure`]. Counted
    /// apart from the rows' classes ([`Report::figure_classes`]).
    #[serde(default)]
    pub class: String,
    /// Where the paper gives it.
    pub source: String,
}

impl Row {
    fn paper_text(&self) -> String {
        if self.paper_hi >= OPEN_ENDED {
            format!("> {:.0}x", self.paper_lo.floor())
        } else if (self.paper_hi - self.paper_lo).abs() < 1e-9 {
            format!("{:.2}x", self.paper_lo)
        } else {
            format!("{:.2}-{:.2}x", self.paper_lo, self.paper_hi)
        }
    }
}

/// One experiment's outputs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExpReport {
    pub id: String,
    pub title: String,
    pub curve: bool,
    /// Chart file stems (an SVG and a PNG each).
    pub charts: Vec<String>,
    #[serde(skip)]
    pub points: Vec<Point>,
    /// Bench runs that failed, with their error.
    pub failures: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaperReport {
    pub key: String,
    pub name: String,
    pub paper_setup: String,
    pub setup: String,
    pub scale: String,
    pub experiments: Vec<ExpReport>,
    pub rows: Vec<Row>,
}

/// `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub command: String,
    pub scale: String,
    pub papers: Vec<PaperReport>,
    /// How many rows of each class (`faithful`, `rough`, `off`, `direction only`,
    /// `unmeasured`): see [`class::Class`].
    #[serde(default)]
    pub classes: BTreeMap<String, usize>,
    /// How many of the rows' absolute figures (`figures`: remora's beside the paper's) are
    /// of each class (`faithful`, `rough`, `off`, `unmeasured`, by remora / paper): a count
    /// of its own, not part of `classes`.
    #[serde(default)]
    pub figure_classes: BTreeMap<String, usize>,
    /// `--memory`: how far `--scale full` goes on the machine that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<super::memory::MemoryReport>,
    /// `--resume`: the experiments (and memory.json) whose points were loaded from an
    /// earlier run's files instead of measured by this one. Empty (and absent) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reused: Vec<super::resume::Reused>,
}

/// The `remora repro` command as run: every flag it was given (`--resume`,
/// `--resume-any-build`, `--check`, `--quiet` too), so the report names how its points came
/// to be (reused or measured) as well as what they measure.
pub fn command(a: &ReproArgs, scale: &Scale) -> String {
    let mut c = format!(
        "remora repro {} --scale {} --out {}",
        format!("{:?}", a.paper).to_lowercase(),
        scale.name,
        a.out.display()
    );
    if !a.only.is_empty() {
        let _ = write!(c, " --only {}", a.only.join(","));
    }
    if let Some(n) = a.seeds {
        let _ = write!(c, " --seeds {n}");
    }
    if a.memory {
        c.push_str(" --memory");
    }
    if a.resume {
        c.push_str(" --resume");
    }
    if a.resume_any_build {
        c.push_str(" --resume-any-build");
    }
    if let Some(p) = &a.check {
        let _ = write!(c, " --check {}", p.display());
    }
    if a.quiet {
        c.push_str(" --quiet");
    }
    c
}

impl Report {
    pub fn new(a: &ReproArgs, scale: &Scale, papers: Vec<PaperReport>) -> Report {
        Report {
            tool: "repro".into(),
            command: command(a, scale),
            scale: scale.name.into(),
            classes: class::counts(papers.iter().flat_map(|p| p.rows.iter())),
            figure_classes: class::figure_counts(papers.iter().flat_map(|p| p.rows.iter())),
            papers,
            memory: None,
            reused: Vec::new(),
        }
    }

    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        self.papers.iter().flat_map(|p| p.rows.iter())
    }

    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let json = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        let p = dir.join("report.json");
        std::fs::write(&p, json + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
        let p = dir.join("report.md");
        std::fs::write(&p, self.markdown()).map_err(|e| format!("{}: {e}", p.display()))
    }
}

#[cfg(test)]
mod tests;

//! The outputs of `remora repro`: per experiment a JSON and a CSV of its points and its
//! charts; per run `report.json` (the claim rows, which `--check` compares) and
//! `report.md` (the paper's claim, remora's figure, the ratio, its class, setup and seed side
//! by side).
//!
//! `class.rs` grades each row against the paper, `why.rs` explains a row on the wrong side
//! of 1, `markdown.rs` writes report.md, `files.rs` the per-experiment JSON, CSV and charts,
//! `check.rs` compares a run with the committed report (`--check`).
mod check;
pub mod class;
mod files;
mod markdown;
mod why;

use super::{Claim, Metric, Paper, ReproArgs, Scale};
use crate::bench::phase::BenchRecord;
pub use check::check;
pub use files::{charts, write_points};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use why::{machine, reason};

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
}

impl Point {
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
            seed: r.run.seed,
            memory_nodes: r.run.cluster.memory_nodes,
            compute_nodes: r.run.cluster.compute_nodes,
            fabric: r.fabric.clone(),
            cdf: r.run.latency_cdf.clone(),
            command: command.into(),
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
}

/// A ratio of a sweep and the client count it was measured at.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct SweepEnd {
    pub ratio: f64,
    pub clients: usize,
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

/// Where a ratio lies against 1: "near" within 3% of it (so a tie does not flip sides on
/// noise), or within 0.8..1.25 for a claim of "no considerable difference" (a paper range
/// that holds 1).
pub(crate) fn side(v: Option<f64>, near_one: bool) -> String {
    let band = if near_one { 0.8..=1.25 } else { 0.97..=1.03 };
    match v {
        Some(v) if band.contains(&v) => "near",
        Some(v) if v > 1.0 => "above",
        Some(v) if v < 1.0 => "below",
        Some(_) => "near",
        None => "none",
    }
    .into()
}

fn wname(w: &str) -> String {
    if w == "LOAD" {
        "LOAD".to_string()
    } else {
        format!("YCSB-{w}")
    }
}

fn figure(pt: &Point, m: Metric) -> String {
    match m {
        Metric::Mops => format!("{:.3} Mops", pt.mops),
        Metric::P50 => format!("p50 {:.1} µs", pt.p50_ns / 1e3),
        Metric::P99 => format!("p99 {:.1} µs", pt.p99_ns / 1e3),
        Metric::Mean => format!("mean {:.1} µs", pt.mean_ns / 1e3),
        Metric::ServerCpu => format!(
            "server {:.0} ns/op",
            pt.server_ns_per_op.unwrap_or(f64::NAN)
        ),
        Metric::NvmCreate => format!("NVM {:.0} B/create", pt.metric(m)),
        Metric::NvmUpdate => format!("NVM {:.0} B/update", pt.metric(m)),
    }
}

/// The points of pick `k` in `exps`, by client count.
fn picked<'a>(exps: &'a [ExpReport], k: &super::Pick) -> Vec<&'a Point> {
    exps.iter()
        .filter(|e| e.id == k.exp)
        .flat_map(|e| e.points.iter())
        .filter(|p| p.series == k.series && p.workload.eq_ignore_ascii_case(k.workload))
        .filter(|p| k.clients.is_none_or(|c| p.clients == c))
        .collect()
}

/// The paper's absolute figures of claim `c` beside remora's at the picked points `n` (of
/// series `ns`) and `d` (of `ds`).
fn figures(c: &Claim, n: Option<&Point>, d: Option<&Point>, ns: &str, ds: &str) -> Vec<Figure> {
    let Some(f) = &c.figures else {
        return Vec::new();
    };
    [(f.num, n, ns), (f.den, d, ds)]
        .into_iter()
        .filter_map(|(paper, pt, series)| {
            let paper = paper?;
            let remora = pt.map(|p| p.in_unit(c.metric)).filter(|v| v.is_finite());
            Some(Figure {
                clients: pt.map_or(0, |p| p.clients),
                series: series.into(),
                unit: c.metric.unit().into(),
                paper,
                remora,
                of_paper: remora.map(|v| v / paper),
                source: f.source.into(),
            })
        })
        .collect()
}

/// remora's figure for claim `c`.
pub fn evaluate(p: &Paper, c: &Claim, exps: &[ExpReport]) -> Row {
    let mut row = Row {
        paper: p.key.into(),
        id: c.id.into(),
        what: c.what.into(),
        paper_lo: c.paper.0,
        paper_hi: c.paper.1,
        remora: None,
        side: side(None, false),
        agrees: None,
        of_paper: None,
        measured: String::new(),
        diagnosis: String::new(),
        note: c.note.into(),
        missing: c.missing.into(),
        seed: None,
        wall_clock: false,
        reason: String::new(),
        class: class::Class::Unmeasured.name().into(),
        up_to: c.up_to,
        sweep_min: None,
        sweep_max: None,
        figures: Vec::new(),
    };
    let near_one = c.paper.0 <= 1.0 && c.paper.1 >= 1.0;
    let Some((num, den)) = &c.points else {
        if let Some(pt) = c
            .alone
            .as_ref()
            .and_then(|k| picked(exps, k).into_iter().max_by_key(|p| p.clients))
        {
            row.measured = format!(
                "{} alone, {} clients, {}: {}",
                pt.series,
                pt.clients,
                wname(&pt.workload),
                figure(pt, c.metric)
            );
            row.seed = Some(pt.seed);
            row.figures = figures(c, Some(pt), None, &pt.series, "");
        }
        return row;
    };
    let (ns, ds) = (picked(exps, num), picked(exps, den));
    // Pairs at the same client count (any count where a pick names its own).
    let any = num.clients.is_some() || den.clients.is_some();
    let mut pairs: Vec<(&Point, &Point)> = ns
        .iter()
        .filter_map(|n| {
            ds.iter()
                .find(|d| any || d.clients == n.clients)
                .map(|d| (*n, *d))
        })
        .collect();
    pairs.sort_by_key(|(n, _)| n.clients);
    let ratio = |n: &Point, d: &Point| {
        let (a, b) = (n.metric(c.metric), d.metric(c.metric));
        let r = match c.metric {
            Metric::Mops => a / b,
            _ => b / a,
        };
        r.is_finite().then_some(r)
    };
    let all: Vec<SweepEnd> = pairs
        .iter()
        .filter_map(|(n, d)| {
            ratio(n, d).map(|r| SweepEnd {
                ratio: r,
                clients: n.clients,
            })
        })
        .collect();
    if all.len() > 1 {
        row.sweep_min = all
            .iter()
            .copied()
            .min_by(|a, b| a.ratio.total_cmp(&b.ratio));
        row.sweep_max = all
            .iter()
            .copied()
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio));
    }
    let best = if c.up_to {
        pairs
            .iter()
            .filter_map(|(n, d)| ratio(n, d).map(|r| (r, *n, *d)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    } else {
        pairs
            .last()
            .and_then(|(n, d)| ratio(n, d).map(|r| (r, *n, *d)))
    };
    let Some((r, n, d)) = best else {
        row.missing = format!(
            "no measured pair: {} / {} in {}",
            num.series, den.series, num.exp
        );
        return row;
    };
    row.remora = Some(r);
    row.side = side(Some(r), near_one);
    row.wall_clock = n.fabric != "sim" || d.fabric != "sim";
    let paper_mid = (c.paper.0 + c.paper.1) / 2.0;
    row.agrees = Some(row.side == side(Some(paper_mid), near_one));
    row.of_paper = class::of_paper(Some(r), c.paper.0, c.paper.1);
    row.class = class::with_side(class::classify(Some(r), c.paper.0, c.paper.1), row.agrees)
        .name()
        .into();
    // The paper's absolute figures are of its largest client count (or its peak): beside
    // them, remora's at the sweep's largest, whichever client count the ratio is from.
    row.figures = match pairs.last() {
        Some((ln, ld)) => figures(c, Some(ln), Some(ld), &num.series, &den.series),
        None => Vec::new(),
    };
    row.seed = Some(n.seed);
    row.measured = format!(
        "{} clients, {}: {} {} / {}{} {}{}",
        n.clients,
        wname(&n.workload),
        num.series,
        figure(n, c.metric),
        den.series,
        if d.clients == n.clients {
            String::new()
        } else {
            format!(" at {} clients", d.clients)
        },
        figure(d, c.metric),
        if row.wall_clock {
            format!(" (wall-clock, real threads: {})", machine())
        } else {
            String::new()
        }
    );
    let facts = |pt: &Point, name: &str| {
        let mut s = format!(
            "{name}: {:.2} RT/op, {:.0} B/op",
            pt.round_trips_per_op, pt.bytes_per_op
        );
        if let Some(o) = pt.offloaded_share {
            let _ = write!(s, ", {:.0}% of searches offloaded", 100.0 * o);
        }
        if let Some(f) = pt.offload {
            let _ = write!(
                s,
                " ({:.2} node READs and {:.4} read-write conflicts per offloaded search",
                f.reads, f.conflicts
            );
            if let Some(h) = f.tree_height {
                let _ = write!(s, ", tree of {h} levels");
            }
            s.push(')');
        }
        if let Some(b) = pt.bound() {
            let _ = write!(s, ", {b}");
        }
        s
    };
    row.diagnosis = format!("{}; {}", facts(n, &num.series), facts(d, &den.series));
    if row.agrees == Some(false) {
        row.reason = reason(c.metric, r, n, d, &num.series, &den.series);
    }
    row
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
    /// `--memory`: how far `--scale full` goes on the machine that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<super::memory::MemoryReport>,
}

impl Report {
    pub fn new(a: &ReproArgs, scale: &Scale, papers: Vec<PaperReport>) -> Report {
        Report {
            tool: "repro".into(),
            command: format!(
                "remora repro {} --scale {} --out {}{}",
                format!("{:?}", a.paper).to_lowercase(),
                scale.name,
                a.out.display(),
                if a.only.is_empty() {
                    String::new()
                } else {
                    format!(" --only {}", a.only.join(","))
                }
            ),
            scale: scale.name.into(),
            classes: class::counts(papers.iter().flat_map(|p| p.rows.iter())),
            papers,
            memory: None,
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
mod tests {
    use super::*;
    use crate::repro::Pick;

    pub(super) fn pt(series: &str, w: &str, clients: usize, mops: f64, p50: f64) -> Point {
        Point {
            series: series.into(),
            workload: w.into(),
            clients,
            coroutines: 4,
            mops,
            p50_ns: p50,
            p99_ns: p50 * 3.0,
            mean_ns: p50,
            round_trips_per_op: 2.0,
            verbs_per_op: 3.0,
            bytes_per_op: 100.0,
            server_ns_per_op: None,
            link_use: Some(0.9),
            nic_use: Some(0.1),
            server_use: None,
            offloaded_share: None,
            offload: None,
            nvm_create_bytes: None,
            nvm_update_bytes: None,
            seed: 7,
            memory_nodes: 2,
            compute_nodes: 16,
            fabric: "sim".into(),
            cdf: vec![[1000.0, 0.0], [p50, 0.5], [p50 * 4.0, 1.0]],
            command: "remora bench --x, y".into(),
        }
    }

    pub(super) fn paper(claims: Vec<Claim>) -> Paper {
        Paper {
            key: "t",
            name: "T",
            paper_setup: "s",
            paper_keys: None,
            setup: "s".into(),
            experiments: vec![],
            claims,
        }
    }

    pub(super) fn claim(
        id: &'static str,
        metric: Metric,
        up_to: bool,
        pts: Option<(Pick, Pick)>,
    ) -> Claim {
        Claim {
            id,
            what: "w",
            paper: (2.0, 3.0),
            metric,
            up_to,
            points: pts,
            alone: None,
            missing: "baseline not in bench",
            note: "",
            figures: None,
        }
    }

    pub(super) fn exps() -> Vec<ExpReport> {
        vec![ExpReport {
            id: "e".into(),
            title: "E".into(),
            curve: true,
            charts: vec![],
            points: vec![
                pt("a", "C", 8, 4.0, 2000.0),
                pt("a", "C", 16, 6.0, 3000.0),
                pt("b", "C", 8, 1.0, 4000.0),
                pt("b", "C", 16, 3.0, 6000.0),
            ],
            failures: vec![],
        }]
    }

    #[test]
    fn ratios_pick_the_right_points() {
        let pick = || Some((Pick::new("e", "a", "c"), Pick::new("e", "b", "C")));
        let p = paper(vec![]);
        // At the largest client count: 6 / 3.
        let r = evaluate(&p, &claim("x", Metric::Mops, false, pick()), &exps());
        assert_eq!(r.remora, Some(2.0));
        assert_eq!(r.side, "above");
        assert_eq!(r.agrees, Some(true));
        assert!(r.measured.contains("16 clients"), "{}", r.measured);
        assert!(
            r.diagnosis.contains("link bandwidth 90%"),
            "{}",
            r.diagnosis
        );
        // Up to: the best over client counts, 4 / 1.
        let r = evaluate(&p, &claim("x", Metric::Mops, true, pick()), &exps());
        assert_eq!(r.remora, Some(4.0));
        // Latency: the baseline's over the system's.
        let r = evaluate(&p, &claim("x", Metric::P50, false, pick()), &exps());
        assert_eq!(r.remora, Some(2.0));
        // Not measurable.
        let r = evaluate(&p, &claim("x", Metric::Mops, false, None), &exps());
        assert_eq!((r.remora, r.side.as_str()), (None, "none"));
        assert!(r.reason.is_empty(), "a row that agrees needs no reason");
        // The other way round the paper's side: the reason names what saturates (both
        // points use 90% of the link) and each side's cost per op.
        let swapped = Some((Pick::new("e", "b", "C"), Pick::new("e", "a", "C")));
        let r = evaluate(&p, &claim("x", Metric::Mops, false, swapped), &exps());
        assert_eq!(r.agrees, Some(false));
        assert!(r.reason.starts_with("bandwidth bound"), "{}", r.reason);
        assert!(r.reason.contains("per op: b 2.00 RT"), "{}", r.reason);
        // A latency claim lost to a system that runs more throughput: closed-loop queueing.
        let mut e = exps();
        e[0].points[1].p50_ns = 9000.0;
        e[0].points[1].mean_ns = 2000.0;
        let r = evaluate(&p, &claim("x", Metric::P50, false, pick()), &e);
        assert_eq!(r.agrees, Some(false));
        assert!(r.reason.contains("queueing (closed loop)"), "{}", r.reason);
        assert!(r.reason.contains("2.00x b's throughput"), "{}", r.reason);
        assert!(
            r.reason.contains("by mean latency the ratio is 3.00x"),
            "{}",
            r.reason
        );
        // A pick that matches nothing says so.
        let bad = Some((Pick::new("e", "zz", "C"), Pick::new("e", "b", "C")));
        let r = evaluate(&p, &claim("x", Metric::Mops, false, bad), &exps());
        assert!(r.remora.is_none() && r.missing.contains("zz"), "{r:?}");
    }

    /// Picks at named client counts pair across counts: one series' gain from 8 to 16
    /// clients (6 / 4), not the ratio at a shared count.
    #[test]
    fn picks_at_client_counts_pair_across_counts() {
        let gain = Some((Pick::at("e", "a", "C", 16), Pick::at("e", "a", "C", 8)));
        let r = evaluate(
            &paper(vec![]),
            &claim("g", Metric::Mops, false, gain),
            &exps(),
        );
        assert_eq!(r.remora, Some(1.5));
        assert!(r.measured.contains("a at 8 clients"), "{}", r.measured);
        // A count nobody ran: no pair.
        let none = Some((Pick::at("e", "a", "C", 32), Pick::at("e", "a", "C", 8)));
        let r = evaluate(
            &paper(vec![]),
            &claim("g", Metric::Mops, false, none),
            &exps(),
        );
        assert!(r.remora.is_none(), "{r:?}");
    }

    pub(super) fn report(rows: Vec<Row>) -> Report {
        Report {
            classes: class::counts(rows.iter()),
            tool: "repro".into(),
            command: "c".into(),
            scale: "quick".into(),
            papers: vec![PaperReport {
                key: "t".into(),
                name: "T".into(),
                paper_setup: "p".into(),
                setup: "s".into(),
                scale: "quick".into(),
                experiments: exps(),
                rows,
            }],
            memory: None,
        }
    }

    /// An "up to" row carries the sweep's smallest and largest ratio (a wrong-side point
    /// shows), its class, and the paper's absolute figures beside remora's; report.md leads
    /// with the class counts and shows them all.
    #[test]
    fn up_to_rows_show_the_sweep_and_the_papers_figures() {
        let pick = Some((Pick::new("e", "a", "C"), Pick::new("e", "b", "C")));
        let mut e = exps();
        // At 16 clients a runs below b: 2.0 / 3.0.
        e[0].points[1].mops = 2.0;
        let c = claim("x", Metric::Mops, true, pick).figures(
            Some(5.0),
            Some(0.5),
            "Fig. 9, 256 clients",
        );
        let r = evaluate(&paper(vec![]), &c, &e);
        assert_eq!(r.remora, Some(4.0));
        assert!(r.up_to);
        let (lo, hi) = (r.sweep_min.unwrap(), r.sweep_max.unwrap());
        assert_eq!((lo.clients, hi.clients), (16, 8));
        assert!(
            (lo.ratio - 2.0 / 3.0).abs() < 1e-9 && hi.ratio == 4.0,
            "{lo:?} {hi:?}"
        );
        // 4.0 against 2-3x: over the nearest end, 4/3: faithful.
        assert_eq!(r.class, "faithful");
        assert!((r.of_paper.unwrap() - 4.0 / 3.0).abs() < 1e-9);
        // The figures at the sweep's largest client count (16), whichever the ratio is
        // from (the paper's are of its largest): a 2 Mops, b 3 Mops.
        assert_eq!(r.figures.len(), 2);
        assert_eq!(
            (r.figures[0].series.as_str(), r.figures[0].remora),
            ("a", Some(2.0))
        );
        assert_eq!(
            (r.figures[0].of_paper, r.figures[0].clients),
            (Some(0.4), 16)
        );
        assert_eq!(
            (r.figures[1].series.as_str(), r.figures[1].of_paper),
            ("b", Some(6.0))
        );
        assert_eq!(r.figures[1].unit, "Mops");
        // Latency figures are in µs.
        let both = Some((Pick::new("e", "a", "C"), Pick::new("e", "b", "C")));
        let l = claim("l", Metric::P50, false, both).figures(Some(3.0), None, "Fig. 10");
        let lr = evaluate(&paper(vec![]), &l, &e);
        assert_eq!(lr.figures.len(), 1);
        assert_eq!(
            lr.figures[0].remora,
            Some(3.0),
            "a's p50 at 16 clients is 3000 ns"
        );
        let md = report(vec![r.clone(), lr]).markdown();
        assert!(md.contains("Classes (remora's ratio / the paper's): faithful 2, rough 0, off 0, direction only 0, unmeasured 0"), "{md}");
        assert!(
            md.contains(
                "sweep 0.67x (16 clients) .. 4.00x (8 clients), **wrong side of 1 at 16 clients**"
            ),
            "{md}"
        );
        assert!(
            md.contains("at 16 clients: a 2.000 Mops vs paper 5.000 (0.40x)"),
            "{md}"
        );
        assert!(md.contains("Fig. 9, 256 clients"), "{md}");
        // The row is in report.json with its class and figures.
        let json = serde_json::to_string(&report(vec![r])).unwrap();
        for f in [
            "\"class\":\"faithful\"",
            "\"sweep_min\"",
            "\"figures\"",
            "\"classes\"",
        ] {
            assert!(json.contains(f), "{f} in {json}");
        }
    }
}

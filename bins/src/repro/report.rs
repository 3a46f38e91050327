//! The outputs of `remora repro`: per experiment a JSON and a CSV of its points and its
//! charts; per run `report.json` (the claim rows, which `--check` compares) and
//! `report.md` (the paper's claim, remora's figure, the ratio, setup and seed side by side).
use super::plot::{self, ChartSpec};
use super::{Claim, Experiment, Metric, Paper, ReproArgs, Scale};
use crate::bench::phase::BenchRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

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
fn side(v: Option<f64>, near_one: bool) -> String {
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
    }
}

/// The points of pick `k` in `exps`, by client count.
fn picked<'a>(exps: &'a [ExpReport], k: &super::Pick) -> Vec<&'a Point> {
    exps.iter()
        .filter(|e| e.id == k.exp)
        .flat_map(|e| e.points.iter())
        .filter(|p| p.series == k.series && p.workload.eq_ignore_ascii_case(k.workload))
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
        }
        return row;
    };
    let (ns, ds) = (picked(exps, num), picked(exps, den));
    // Pairs at the same client count.
    let mut pairs: Vec<(&Point, &Point)> = ns
        .iter()
        .filter_map(|n| ds.iter().find(|d| d.clients == n.clients).map(|d| (*n, *d)))
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
    row.of_paper = (c.paper.1 < OPEN_ENDED).then_some(r / paper_mid);
    row.seed = Some(n.seed);
    row.measured = format!(
        "{} clients, {}: {} {} / {} {}{}",
        n.clients,
        wname(&n.workload),
        num.series,
        figure(n, c.metric),
        den.series,
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

/// Why a ratio landed on the other side of 1 from the paper's, from what the two points
/// measured: the resources the model saw saturated, closed-loop queueing (for latency
/// claims), the cost per operation of each side, the adaptive client's choices, and the
/// machine's scheduling for wall-clock points. Starts with the kind of cause.
fn reason(m: Metric, r: f64, n: &Point, d: &Point, num: &str, den: &str) -> String {
    let us = |ns: f64| ns / 1e3;
    let mut kind = Vec::new();
    let mut why = Vec::new();
    if n.fabric != "sim" || d.fabric != "sim" {
        kind.push("machine load (wall-clock)");
        why.push(format!(
            "real threads on {}: {num} p50 {:.1} µs but p99 {:.1} µs, {den} p50 {:.1} µs, \
             p99 {:.1} µs{}",
            machine(),
            us(n.p50_ns),
            us(n.p99_ns),
            us(d.p50_ns),
            us(d.p99_ns),
            if n.p99_ns > 20.0 * n.p50_ns {
                format!(
                    ": {num}'s tail is {:.0}x its median, threads waiting for a CPU",
                    n.p99_ns / n.p50_ns.max(1.0)
                )
            } else {
                String::new()
            }
        ));
    }
    let bound = |p: &Point| {
        [
            ("memory-node link bandwidth", p.link_use),
            ("memory-node NIC message rate", p.nic_use),
            ("server CPU", p.server_use),
        ]
        .into_iter()
        .filter_map(|(w, u)| u.filter(|u| *u >= 0.7).map(|u| (w, u)))
        .collect::<Vec<_>>()
    };
    let (bn, bd) = (bound(n), bound(d));
    for (b, name) in [(&bn, num), (&bd, den)] {
        for (w, u) in b {
            kind.push(match *w {
                "server CPU" => "server CPU bound (model parameter: server_threads x handler cost)",
                "memory-node link bandwidth" => "bandwidth bound",
                _ => "NIC message-rate bound",
            });
            why.push(format!(
                "{name} saturates the {w} ({:.0}% used)",
                100.0 * u.min(9.99)
            ));
        }
    }
    if let (Some(a), Some(b)) = (n.server_ns_per_op, d.server_ns_per_op)
        && bn.iter().chain(&bd).any(|(w, _)| *w == "server CPU")
    {
        why.push(format!(
            "server CPU per op: {num} {a:.0} ns, {den} {b:.0} ns"
        ));
    }
    if matches!(m, Metric::P50 | Metric::P99 | Metric::Mean) {
        let tp = n.mops / d.mops;
        if r < 1.0 && tp > 1.03 {
            kind.push("queueing (closed loop)");
            why.push(format!(
                "{num} runs {tp:.2}x {den}'s throughput at the same {} clients x {} \
                 coroutines, so more of its operations are in flight at the memory nodes",
                n.clients, n.coroutines
            ));
        }
        if m == Metric::P50 {
            let mean = d.mean_ns / n.mean_ns;
            if (mean > 1.0) != (r > 1.0) {
                kind.push("latency distribution");
                why.push(format!(
                    "by mean latency the ratio is {mean:.2}x ({num} {:.1} µs, {den} {:.1} µs; \
                     p99 {:.1} vs {:.1} µs): the medians and the tails disagree",
                    us(n.mean_ns),
                    us(d.mean_ns),
                    us(n.p99_ns),
                    us(d.p99_ns)
                ));
            }
        }
    }
    if let Some(o) = n.offloaded_share.filter(|o| *o < 0.05) {
        kind.push("adaptive choice");
        why.push(format!("{num} offloaded {:.0}% of its searches", 100.0 * o));
    }
    if kind.is_empty() {
        kind.push("mechanism cost");
        if m == Metric::Mops && n.round_trips_per_op < 0.97 * d.round_trips_per_op {
            why.push(format!(
                "{num} saves {:.0}% of the round trips per op but not time: nothing the model \
                 meters is saturated, so the wait is elsewhere (locks, atomics, retries: p50 \
                 {:.1} vs {:.1} µs, p99 {:.1} vs {:.1} µs)",
                100.0 * (1.0 - n.round_trips_per_op / d.round_trips_per_op),
                us(n.p50_ns),
                us(d.p50_ns),
                us(n.p99_ns),
                us(d.p99_ns)
            ));
        }
    }
    why.push(format!(
        "per op: {num} {:.2} RT, {:.0} B; {den} {:.2} RT, {:.0} B",
        n.round_trips_per_op, n.bytes_per_op, d.round_trips_per_op, d.bytes_per_op
    ));
    kind.dedup();
    format!("{}: {}", kind.join(", "), why.join("; "))
}

/// This machine, for wall-clock rows: cores, CPU model, load average when measured.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into());
    format!("{cores} cores, {model}, load average {load}")
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

    /// The markdown report.
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(
            m,
            "# remora repro: the papers' headline claims on the sim\n"
        );
        let _ = writeln!(
            m,
            "Generated by `{}` (scale `{}`). Every figure is from remora's deterministic \
             simulated cluster (virtual time, the NIC model written in each point's JSON): \
             same seed, same figures; except rows marked wall-clock (Catfish vs TCP/IP: kernel \
             sockets are not in the sim), measured on real threads of the machine that ran \
             the report, whose load they depend on. Each run loads its keys, runs an unmeasured warm-up of \
             the workload, then the measured phase. A ratio is the system's figure over the \
             baseline's (throughput), or the baseline's over the system's (latency: times \
             lower). `agrees`: remora's ratio is on the same side of 1 as the paper's. \
             Each point's JSON names the `remora bench` command that measures it.\n",
            self.command, self.scale
        );
        let _ = writeln!(
            m,
            "| paper | claim | paper | remora | agrees | remora / paper | measured at |\n\
             |---|---|---:|---:|:---:|---:|---|"
        );
        for r in self.rows() {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.paper,
                r.what,
                r.paper_text(),
                r.remora.map_or("—".into(), |v| format!("{v:.2}x")),
                match r.agrees {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "—",
                },
                r.of_paper.map_or("—".into(), |v| format!("{v:.2}")),
                if r.remora.is_some() {
                    r.measured.clone()
                } else {
                    format!("not measured: {} {}", r.missing, r.measured)
                }
            );
        }
        let no: Vec<&Row> = self.rows().filter(|r| r.agrees == Some(false)).collect();
        if !no.is_empty() {
            let _ = writeln!(
                m,
                "\nWhy the rows marked **no** are on the other side of 1 (from the two points' \
                 measurements; the model's view per point is in each paper's table):\n"
            );
            for r in no {
                let _ = writeln!(m, "- {} / {}: {}", r.paper, r.what, r.reason);
            }
        }
        match &self.memory {
            Some(mem) => {
                let _ = write!(m, "\n{}", mem.markdown());
            }
            None => {
                let _ = writeln!(
                    m,
                    "\nHow far `--scale full` goes on a machine (the sim's bytes and CPU per \
                     key and bytes per client of each paper's index, and the most keys that \
                     fit its memory): `remora repro all --memory` measures it there and adds \
                     it to the report (`--scale full` always does)."
                );
            }
        }
        for p in &self.papers {
            let _ = writeln!(m, "\n## {}\n", p.name);
            let _ = writeln!(m, "- paper's setup: {}", p.paper_setup);
            let _ = writeln!(m, "- remora's setup (scale `{}`): {}\n", p.scale, p.setup);
            let _ = writeln!(
                m,
                "| claim | paper | remora | measured | model's view (why) | note |\n\
                 |---|---:|---:|---|---|---|"
            );
            for r in &p.rows {
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} | {} |",
                    r.what,
                    r.paper_text(),
                    r.remora.map_or("—".into(), |v| format!("{v:.2}x")),
                    if r.remora.is_some() {
                        format!("{} (seed {})", r.measured, r.seed.unwrap_or_default())
                    } else {
                        format!("not measured: {} {}", r.missing, r.measured)
                    },
                    if r.reason.is_empty() {
                        r.diagnosis.clone()
                    } else {
                        format!("{} — **not reproduced**: {}", r.diagnosis, r.reason)
                    },
                    r.note
                );
            }
            for e in &p.experiments {
                let _ = writeln!(m, "\n### {}\n", e.title);
                let _ = writeln!(
                    m,
                    "Data: [`{0}.json`]({0}.json), [`{0}.csv`]({0}.csv).\n",
                    e.id
                );
                for f in &e.failures {
                    let _ = writeln!(m, "**Run failed**: {f}\n");
                }
                for c in &e.charts {
                    let _ = writeln!(m, "![{c}]({c}.png) ([SVG]({c}.svg))\n");
                }
                let _ = writeln!(
                    m,
                    "| series | workload | clients | Mops | p50 µs | p99 µs | RT/op | B/op |\n\
                     |---|---|---:|---:|---:|---:|---:|---:|"
                );
                for pt in &e.points {
                    let _ = writeln!(
                        m,
                        "| {} | {} | {} | {:.3} | {:.1} | {:.1} | {:.2} | {:.0} |",
                        pt.series,
                        pt.workload,
                        pt.clients,
                        pt.mops,
                        pt.p50_ns / 1e3,
                        pt.p99_ns / 1e3,
                        pt.round_trips_per_op,
                        pt.bytes_per_op
                    );
                }
            }
        }
        m
    }
}

/// Writes `id.json` (the points, CDFs and commands) and `id.csv` (one line per point).
pub fn write_points(dir: &Path, id: &str, pts: &[Point]) -> Result<(), String> {
    let p = dir.join(format!("{id}.json"));
    let json = serde_json::to_string_pretty(pts).map_err(|e| e.to_string())?;
    std::fs::write(&p, json + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
    let p = dir.join(format!("{id}.csv"));
    std::fs::write(&p, csv(pts)).map_err(|e| format!("{}: {e}", p.display()))
}

/// A CSV field: quoted when it holds a comma or a quote.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn csv(pts: &[Point]) -> String {
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    let mut s = String::from(
        "series,workload,clients,coroutines,mops,p50_ns,p99_ns,mean_ns,round_trips_per_op,\
         verbs_per_op,bytes_per_op,server_ns_per_op,link_use,nic_use,server_use,\
         offloaded_share,seed,command\n",
    );
    for p in pts {
        let _ = writeln!(
            s,
            "{},{},{},{},{:.6},{:.0},{:.0},{:.1},{:.3},{:.3},{:.1},{},{},{},{},{},{},{}",
            field(&p.series),
            p.workload,
            p.clients,
            p.coroutines,
            p.mops,
            p.p50_ns,
            p.p99_ns,
            p.mean_ns,
            p.round_trips_per_op,
            p.verbs_per_op,
            p.bytes_per_op,
            opt(p.server_ns_per_op),
            opt(p.link_use),
            opt(p.nic_use),
            opt(p.server_use),
            opt(p.offloaded_share),
            p.seed,
            field(&p.command)
        );
    }
    s
}

/// Names in first-seen order.
fn ordered<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for s in it {
        if !v.iter().any(|x| x == s) {
            v.push(s.to_string());
        }
    }
    v
}

/// Draws an experiment's charts; returns their file stems.
pub fn charts(dir: &Path, e: &Experiment, pts: &[Point]) -> Result<Vec<String>, String> {
    let series = ordered(pts.iter().map(|p| p.series.as_str()));
    let workloads = ordered(pts.iter().map(|p| p.workload.as_str()));
    let mut stems = Vec::new();
    if e.chart == super::Chart::Curve {
        let wl = &workloads;
        let lines = series
            .iter()
            .flat_map(|s| {
                wl.iter().map(move |w| {
                    let name = if wl.len() > 1 {
                        format!("{s} {}", wname(w))
                    } else {
                        s.clone()
                    };
                    let mut v: Vec<(f64, f64)> = pts
                        .iter()
                        .filter(|p| &p.series == s && &p.workload == w)
                        .map(|p| (p.clients as f64, p.mops))
                        .collect();
                    v.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (name, v)
                })
            })
            .filter(|l| !l.1.is_empty())
            .collect();
        plot::write(
            &dir.join(&e.id),
            &ChartSpec::Curve {
                title: e.title.clone(),
                x_label: "client threads".into(),
                y_label: "throughput (Mops, virtual time)".into(),
                lines,
            },
        )?;
    } else {
        let vals = series
            .iter()
            .map(|s| {
                let v = workloads
                    .iter()
                    .map(|w| {
                        pts.iter()
                            .filter(|p| &p.series == s && &p.workload == w)
                            .max_by_key(|p| p.clients)
                            .map_or(f64::NAN, |p| p.mops)
                    })
                    .collect();
                (s.clone(), v)
            })
            .collect();
        plot::write(
            &dir.join(&e.id),
            &ChartSpec::Bars {
                title: e.title.clone(),
                y_label: "throughput (Mops, virtual time)".into(),
                groups: workloads.iter().map(|w| wname(w)).collect(),
                series: vals,
            },
        )?;
    }
    stems.push(e.id.clone());
    // Latency CDFs at the largest client count, per series and workload.
    let most = pts.iter().map(|p| p.clients).max().unwrap_or(0);
    let lines: Vec<plot::Line> = pts
        .iter()
        .filter(|p| p.clients == most && !p.cdf.is_empty())
        .map(|p| {
            (
                format!("{} {}", p.series, wname(&p.workload)),
                p.cdf.iter().map(|c| (c[0] / 1e3, c[1])).collect(),
            )
        })
        .collect();
    if !lines.is_empty() {
        let stem = format!("{}-cdf", e.id);
        plot::write(
            &dir.join(&stem),
            &ChartSpec::Cdf {
                title: format!("{}: latency CDF at {most} clients", e.title),
                lines,
            },
        )?;
        stems.push(stem);
    }
    Ok(stems)
}

/// The differences in shape between the committed report at `path` and `now`: rows added
/// or gone, ratios measured in one and not the other, ratios on the other side of 1 (not
/// for wall-clock rows: their side depends on the machine's load).
pub fn check(path: &Path, now: &Report) -> Result<Vec<String>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--check {}: {e}", path.display()))?;
    let old: Report = serde_json::from_str(&text)
        .map_err(|e| format!("--check {}: not a repro report.json: {e}", path.display()))?;
    Ok(diff(&old, now))
}

pub fn diff(old: &Report, now: &Report) -> Vec<String> {
    let key = |r: &Row| format!("{}/{}", r.paper, r.id);
    let mut d = Vec::new();
    if old.scale != now.scale {
        d.push(format!(
            "scale {} committed, {} now (compare like with like)",
            old.scale, now.scale
        ));
    }
    let ok: BTreeSet<String> = old.rows().map(key).collect();
    let nk: BTreeSet<String> = now.rows().map(key).collect();
    for k in ok.difference(&nk) {
        d.push(format!("row {k} is gone"));
    }
    for k in nk.difference(&ok) {
        d.push(format!("row {k} is new: regenerate the committed report"));
    }
    for o in old.rows() {
        let Some(n) = now.rows().find(|n| key(n) == key(o)) else {
            continue;
        };
        if o.side != n.side && !o.wall_clock && !n.wall_clock {
            d.push(format!(
                "{}: ratio {} 1 committed ({}), {} now ({})",
                key(o),
                o.side,
                o.remora.map_or("none".into(), |v| format!("{v:.2}x")),
                n.side,
                n.remora.map_or("none".into(), |v| format!("{v:.2}x"))
            ));
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repro::{Chart, Pick, Series};

    fn pt(series: &str, w: &str, clients: usize, mops: f64, p50: f64) -> Point {
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
            seed: 7,
            memory_nodes: 2,
            compute_nodes: 16,
            fabric: "sim".into(),
            cdf: vec![[1000.0, 0.0], [p50, 0.5], [p50 * 4.0, 1.0]],
            command: "remora bench --x, y".into(),
        }
    }

    fn paper(claims: Vec<Claim>) -> Paper {
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

    fn claim(id: &'static str, metric: Metric, up_to: bool, pts: Option<(Pick, Pick)>) -> Claim {
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
        }
    }

    fn exps() -> Vec<ExpReport> {
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

    fn report(rows: Vec<Row>) -> Report {
        Report {
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

    #[test]
    fn check_compares_rows_and_sides() {
        let p = paper(vec![]);
        let up = evaluate(
            &p,
            &claim(
                "x",
                Metric::Mops,
                false,
                Some((Pick::new("e", "a", "C"), Pick::new("e", "b", "C"))),
            ),
            &exps(),
        );
        let mut down = up.clone();
        down.remora = Some(0.5);
        down.side = side(Some(0.5), false);
        let other = evaluate(&p, &claim("y", Metric::Mops, false, None), &exps());
        let a = report(vec![up.clone(), other.clone()]);
        assert!(diff(&a, &a).is_empty());
        // Same side, other value: same shape.
        let mut up2 = up.clone();
        up2.remora = Some(1.5);
        assert!(diff(&a, &report(vec![up2, other.clone()])).is_empty());
        // A tie is "near" 1, not above or below it.
        assert_eq!(side(Some(1.01), false), "near");
        assert_eq!(side(Some(1.2), true), "near");
        assert_eq!(side(Some(1.2), false), "above");
        // Flipped side, lost row, new row: each reported.
        let d = diff(&a, &report(vec![down.clone(), other.clone()]));
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("t/x") && d[0].contains("below"), "{d:?}");
        // A wall-clock row (soft fabric, sockets) may change sides; it may not go.
        let mut soft_up = up.clone();
        soft_up.wall_clock = true;
        let mut soft_down = down.clone();
        soft_down.wall_clock = true;
        let s = report(vec![soft_up, other.clone()]);
        assert!(diff(&s, &report(vec![soft_down, other.clone()])).is_empty());
        assert!(!diff(&s, &report(vec![other.clone()])).is_empty());
        let d = diff(&a, &report(vec![up.clone()]));
        assert!(d.iter().any(|s| s.contains("t/y is gone")), "{d:?}");
        let mut extra = other.clone();
        extra.id = "z".into();
        let d = diff(&a, &report(vec![up.clone(), other, extra]));
        assert!(d.iter().any(|s| s.contains("t/z is new")), "{d:?}");
        // report.json round-trips, and --check reads it.
        let dir = std::env::temp_dir().join(format!("remora-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        a.write(&dir).unwrap();
        assert!(check(&dir.join("report.json"), &a).unwrap().is_empty());
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("| t | w | 2.00-3.00x | 2.00x | yes |"), "{md}");
        std::fs::write(dir.join("bad.json"), "{").unwrap();
        assert!(check(&dir.join("bad.json"), &a).is_err());
    }

    #[test]
    fn csv_quotes_fields_and_charts_draw() {
        let pts = exps().remove(0).points;
        let c = csv(&pts);
        assert_eq!(c.lines().count(), 5);
        assert!(c.contains("\"remora bench --x, y\""), "{c}");
        let dir = std::env::temp_dir().join(format!("remora-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for chart in [Chart::Curve, Chart::Bars] {
            let e = Experiment {
                id: format!("e{chart:?}"),
                title: "E".into(),
                chart,
                series: vec![Series::new("a", String::new(), &["c"])],
            };
            let stems = charts(&dir, &e, &pts).unwrap();
            assert_eq!(stems.len(), 2);
            for s in stems {
                assert!(dir.join(format!("{s}.png")).exists());
                assert!(dir.join(format!("{s}.svg")).exists());
            }
        }
        write_points(&dir, "e", &pts).unwrap();
        let back: Vec<Point> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("e.json")).unwrap()).unwrap();
        assert_eq!(back, pts);
    }
}

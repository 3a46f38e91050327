//! Grading one claim: the ratio of the picked points (the median over seeds where they
//! were measured at several), its side of 1, the figures beside it.

use super::seeds::{self, SeedRatio};
use super::*;

/// Where a ratio lies against 1: "near" within 3% of it (so a tie does not flip sides on
/// noise), or within 0.67..1.5 for a claim of "the same", "similar" (a closeness band, a
/// paper range that holds 1: `class::Kind::Close`), the band whose ratios it grades rough
/// or better (`class::near_band`), so such a row is off exactly when it is outside it.
pub(crate) fn side(v: Option<f64>, near_one: bool) -> String {
    let band = if near_one {
        (1.0 / class::FAITHFUL)..=class::FAITHFUL
    } else {
        0.97..=1.03
    };
    match v {
        Some(v) if band.contains(&v) => "near",
        Some(v) if v > 1.0 => "above",
        Some(v) if v < 1.0 => "below",
        Some(_) => "near",
        None => "none",
    }
    .into()
}

/// Whether remora's ratio `r` meets the paper's range `lo..=hi` on its side of 1: the side
/// of the range's middle ([`same_side`]), but an open range from below 1 ("at least 0.97x":
/// about the same or better) is met by any ratio from `lo` up, where its middle would ask
/// for a ratio above 1.
pub(crate) fn agrees(r: f64, lo: f64, hi: f64, near_one: bool) -> bool {
    if hi >= OPEN_ENDED && lo < 1.0 {
        return r >= lo;
    }
    same_side(r, (lo + hi) / 2.0, near_one)
}

/// Whether remora's ratio `r` is on the paper's side of 1. A ratio within the noise band
/// around 1 (`side`'s "near") agrees with a paper's on the same strict side of 1: a paper's
/// 1.02x ("about equal, slightly above") is met by 1.07x, and 1.10x by 1.02x, but a paper's
/// 1.34x is not met by 0.99x, nor a 1.02x by 0.95x. How far apart they are is the class's
/// business (`class::of_paper`), not the side's.
pub(crate) fn same_side(r: f64, paper: f64, near_one: bool) -> bool {
    let (sr, sp) = (side(Some(r), near_one), side(Some(paper), near_one));
    let strictly = |v: f64| (v > 1.0, v < 1.0);
    sr == sp || ((sr == "near" || sp == "near") && r != 1.0 && strictly(r) == strictly(paper))
}

pub(super) fn wname(w: &str) -> String {
    if w == "LOAD" {
        "LOAD".to_string()
    } else if w == "WI" {
        "write-intensive (50% insert, 50% read)".to_string()
    } else {
        format!("YCSB-{w}")
    }
}

pub(super) fn figure(pt: &Point, m: Metric) -> String {
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
pub(super) fn picked<'a>(exps: &'a [ExpReport], k: &crate::repro::Pick) -> Vec<&'a Point> {
    exps.iter()
        .filter(|e| e.id == k.exp)
        .flat_map(|e| e.points.iter())
        .filter(|p| p.series == k.series && p.workload.eq_ignore_ascii_case(k.workload))
        .filter(|p| k.clients.is_none_or(|c| p.clients == c))
        .collect()
}

/// The paper's absolute figures of claim `c` beside remora's at the picked points `n` (of
/// series `ns`) and `d` (of `ds`).
pub(super) fn figures(
    c: &Claim,
    n: Option<&Point>,
    d: Option<&Point>,
    ns: &str,
    ds: &str,
) -> Vec<Figure> {
    let Some(f) = &c.figures else {
        return Vec::new();
    };
    [(f.num, n, ns), (f.den, d, ds)]
        .into_iter()
        .filter_map(|(paper, pt, series)| {
            let paper = paper?;
            let remora = pt.map(|p| p.in_unit(c.metric)).filter(|v| v.is_finite());
            let mut fig = Figure {
                clients: pt.map_or(0, |p| p.clients),
                series: series.into(),
                unit: c.metric.unit().into(),
                paper,
                remora,
                of_paper: remora.map(|v| v / paper),
                class: String::new(),
                source: f.source.into(),
            };
            fig.class = class::of_figure(&fig).name().into();
            Some(fig)
        })
        .collect()
}

/// What the two picks' points of one seed measure.
struct Measured<'a> {
    /// The claim's ratio: at the largest client count, or the best over the sweep ("up to").
    r: f64,
    /// The two points it is from.
    n: &'a Point,
    d: &'a Point,
    /// The experiment they are from, where the claim ranges `across` several (None: one).
    exp: Option<&'a str>,
    /// The ratio at every client count, ascending.
    sweep: Vec<SweepEnd>,
    /// The pair at the largest client count (the paper's absolute figures are beside it).
    last: Option<(&'a Point, &'a Point)>,
}

/// Claim `c`'s ratio from its picks' points `ns` and `ds` (one seed's, of experiment `exp`
/// where the claim ranges across several), paired at the same client count (`any`:
/// whatever their counts, where a pick names its own).
fn measure<'a>(
    c: &Claim,
    ns: &[&'a Point],
    ds: &[&'a Point],
    any: bool,
    exp: Option<&'a str>,
) -> Option<Measured<'a>> {
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
    let sweep = pairs
        .iter()
        .filter_map(|(n, d)| {
            ratio(n, d).map(|r| SweepEnd {
                ratio: r,
                clients: n.clients,
                exp: exp.map(String::from),
            })
        })
        .collect();
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
    best.map(|(r, n, d)| Measured {
        r,
        n,
        d,
        exp,
        sweep,
        last: pairs.last().copied(),
    })
}

/// An "up to" over several experiments: the best of `all`'s ratios (the first is the picks'
/// own experiment), their sweeps together, and the own experiment's largest client count
/// (the paper's absolute figures are of its point there).
fn best_across(mut all: Vec<Measured<'_>>) -> Option<Measured<'_>> {
    let last = all.first()?.last;
    let sweep: Vec<SweepEnd> = all.iter().flat_map(|m| m.sweep.iter().cloned()).collect();
    let i = (0..all.len()).max_by(|&a, &b| all[a].r.total_cmp(&all[b].r))?;
    let mut best = all.swap_remove(i);
    best.sweep = sweep;
    best.last = last;
    Some(best)
}

/// remora's figure for claim `c`: over several seeds (both picks measured at them), the
/// median of the per-seed ratios, with their spread in `seeds`, graded by the median.
pub fn evaluate<'a>(p: &Paper, c: &Claim, exps: &'a [ExpReport]) -> Row {
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
        unsteady: Vec::new(),
        seeds: None,
    };
    if !c.equal_at.is_empty() {
        return super::equal::evaluate_equal(row, c, exps);
    }
    let near_one = class::kind(c.paper.0, c.paper.1) == class::Kind::Close;
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
    // Pairs at the same client count (any count where a pick names its own), seed by seed:
    // the seeds both picks were measured at.
    let any = num.clients.is_some() || den.clients.is_some();
    let mut seeds: Vec<u64> = ns
        .iter()
        .map(|p| p.seed)
        .filter(|s| ds.iter().any(|d| d.seed == *s))
        .collect();
    seeds.sort_unstable();
    seeds.dedup();
    let at = |pts: &[&'a Point], s: u64| -> Vec<&'a Point> {
        pts.iter().copied().filter(|p| p.seed == s).collect()
    };
    // The other experiments an "up to" ranges across: the same two series there.
    let across: Vec<(&str, Vec<&Point>, Vec<&Point>)> = c
        .across
        .iter()
        .map(|e| {
            let there = |k: &crate::repro::Pick| crate::repro::Pick {
                exp: e.clone(),
                ..k.clone()
            };
            (
                e.as_str(),
                picked(exps, &there(num)),
                picked(exps, &there(den)),
            )
        })
        .collect();
    let own = (!across.is_empty()).then_some(num.exp.as_str());
    let per_seed: Vec<(u64, Measured)> = seeds
        .iter()
        .filter_map(|&s| {
            let m = measure(c, &at(&ns, s), &at(&ds, s), any, own)?;
            if !c.up_to || across.is_empty() {
                return Some((s, m));
            }
            let mut all = vec![m];
            all.extend(
                across
                    .iter()
                    .filter_map(|(e, n, d)| measure(c, &at(n, s), &at(d, s), any, Some(e))),
            );
            best_across(all).map(|m| (s, m))
        })
        .collect();
    let spread = seeds::aggregate(
        &per_seed
            .iter()
            .map(|(seed, m)| SeedRatio {
                seed: *seed,
                ratio: m.r,
            })
            .collect::<Vec<_>>(),
    );
    // One seed: its ratio. Several: the median, shown with its own seed's points.
    let shown = match &spread {
        Some(sp) => per_seed
            .iter()
            .find(|(s, _)| *s == sp.shown)
            .map(|(_, m)| (sp.median, m)),
        None => per_seed.first().map(|(_, m)| (m.r, m)),
    };
    let Some((r, m)) = shown else {
        row.missing = format!(
            "no measured pair: {} / {} in {}",
            num.series, den.series, num.exp
        );
        return row;
    };
    let (n, d) = (m.n, m.d);
    if m.sweep.len() > 1 {
        row.sweep_min = m
            .sweep
            .iter()
            .min_by(|a, b| a.ratio.total_cmp(&b.ratio))
            .cloned();
        row.sweep_max = m
            .sweep
            .iter()
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
            .cloned();
    }
    row.seeds = spread;
    row.remora = Some(r);
    row.side = side(Some(r), near_one);
    row.wall_clock = n.fabric != "sim" || d.fabric != "sim";
    row.agrees = Some(agrees(r, c.paper.0, c.paper.1, near_one));
    row.of_paper = class::of_paper(Some(r), c.paper.0, c.paper.1);
    row.class = class::with_side(class::classify(Some(r), c.paper.0, c.paper.1), row.agrees)
        .name()
        .into();
    // The paper's absolute figures are of its largest client count (or its peak): beside
    // them, remora's at the sweep's largest, whichever client count the ratio is from.
    row.figures = match m.last {
        Some((ln, ld)) => figures(c, Some(ln), Some(ld), &num.series, &den.series),
        None => Vec::new(),
    };
    row.seed = Some(n.seed);
    row.measured = format!(
        "{}{} clients, {}: {} {} / {}{} {}{}",
        m.exp.map(|e| format!("{e}, ")).unwrap_or_default(),
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
            format!(" (wall-clock, real threads: {})", machine_of(n))
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
        if let Some(r) = pt.unsteady() {
            let _ = write!(
                s,
                ", unsteady: its run's second half completed {r:.2}x the operations of its first"
            );
        }
        s
    };
    row.diagnosis = format!("{}; {}", facts(n, &num.series), facts(d, &den.series));
    row.unsteady = [(n, &num.series), (d, &den.series)]
        .into_iter()
        .filter_map(|(pt, name)| pt.unsteady().map(|r| format!("{name}: {r:.2}")))
        .collect();
    if row.agrees == Some(false) {
        row.reason = reason(c.metric, r, n, d, &num.series, &den.series);
    }
    row
}

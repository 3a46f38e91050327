//! Each experiment's files: its points as JSON and CSV, and its charts.
use super::{Point, wname};
use crate::repro::Experiment;
use crate::repro::plot::{self, ChartSpec};
use std::fmt::Write as _;
use std::path::Path;

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

/// One point per series, workload and client count: where several seeds measured it, the
/// seed of median throughput (the lower middle of an even count), so a chart draws one
/// line or bar per series, not one per seed.
pub fn median_seed_points(pts: &[Point]) -> Vec<Point> {
    let mut out: Vec<Point> = Vec::new();
    for p in pts {
        let same =
            |o: &Point| o.series == p.series && o.workload == p.workload && o.clients == p.clients;
        if out.iter().any(same) {
            continue;
        }
        let mut group: Vec<&Point> = pts.iter().filter(|o| same(o)).collect();
        group.sort_by(|a, b| a.mops.total_cmp(&b.mops).then(a.seed.cmp(&b.seed)));
        out.push(group[(group.len() - 1) / 2].clone());
    }
    out
}

/// Draws an experiment's charts; returns their file stems. Points measured over several
/// seeds are drawn at their median-throughput seed ([`median_seed_points`]).
pub fn charts(dir: &Path, e: &Experiment, pts: &[Point]) -> Result<Vec<String>, String> {
    let seeds = pts
        .first()
        .is_some_and(|f| pts.iter().any(|p| p.seed != f.seed));
    let pts = &median_seed_points(pts)[..];
    let title = if seeds {
        format!("{} (median-throughput seed)", e.title)
    } else {
        e.title.clone()
    };
    let series = ordered(pts.iter().map(|p| p.series.as_str()));
    let workloads = ordered(pts.iter().map(|p| p.workload.as_str()));
    let mut stems = Vec::new();
    if e.chart == crate::repro::Chart::Curve {
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
                title: title.clone(),
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
                title: title.clone(),
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
                title: format!("{title}: latency CDF at {most} clients"),
                lines,
            },
        )?;
        stems.push(stem);
    }
    Ok(stems)
}

#[cfg(test)]
mod tests {
    use super::super::tests::exps;
    use super::*;
    use crate::repro::{Chart, Series};

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
        // Over seeds, a chart draws each point at its median-throughput seed.
        let mut seeded = pts.clone();
        for (seed, mops) in [(2, 9.0), (3, 1.0)] {
            let mut p = pts[0].clone();
            (p.seed, p.mops) = (seed, mops);
            seeded.push(p);
        }
        let m = median_seed_points(&seeded);
        assert_eq!(m.len(), pts.len());
        assert_eq!((m[0].seed, m[0].mops), (pts[0].seed, pts[0].mops));
        seeded[0].mops = 20.0;
        assert_eq!(median_seed_points(&seeded)[0].seed, 2);
        write_points(&dir, "e", &pts).unwrap();
        let back: Vec<Point> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("e.json")).unwrap()).unwrap();
        assert_eq!(back, pts);
    }
}

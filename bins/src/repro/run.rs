//! Runs a paper's experiments through `remora bench` (in-process, one command line per
//! series and workload) and reduces each bench record to a [`Point`].
use super::memory;
use super::report::{self, Point};
use super::resume::{self, Reused};
use super::{Chart, Experiment, Paper, ReproArgs, Scale, Series};
use crate::bench::phase::BenchRecord;
use crate::bench::{self, BenchArgs};
use clap::Parser;
use std::time::Instant;

/// A bench command line, parsed as `remora bench` parses its flags.
#[derive(Parser)]
#[command(no_binary_name = true)]
struct BenchLine {
    #[command(flatten)]
    bench: BenchArgs,
}

/// The bench flags of `line`.
pub fn parse_bench(line: &str) -> Result<BenchArgs, String> {
    BenchLine::try_parse_from(line.split_whitespace())
        .map(|l| l.bench)
        .map_err(|e| format!("bench flags `{line}`: {e}"))
}

/// The command lines of a series: one per workload, or one for a `--factors` run.
pub fn commands(s: &Series) -> Vec<String> {
    if s.args.contains("--factors") {
        vec![s.args.clone()]
    } else {
        s.workloads
            .iter()
            .map(|w| format!("{} --workload {w}", s.args))
            .collect()
    }
}

/// The command lines of a series at each of its seeds ([`Series::seeds_to_run`]; `over`:
/// `remora repro --seeds N`): [`commands`] once per seed, `--seed N` added, seed by seed.
/// A series whose flags name a seed of their own cannot run over seeds: an error.
pub fn seeded_commands(s: &Series, over: Option<u64>) -> Result<Vec<String>, String> {
    let Some(seeds) = s.seeds_to_run(over) else {
        return Ok(commands(s));
    };
    if s.args.split_whitespace().any(|w| w == "--seed") {
        return Err(format!(
            "series {}: its flags set --seed, and it is to run over seeds {seeds:?}",
            s.label
        ));
    }
    Ok(seeds
        .iter()
        .flat_map(|n| {
            commands(s)
                .into_iter()
                .map(move |c| format!("{c} --seed {n}"))
        })
        .collect())
}

/// What the bench runs of `e` cost: how many runs (one per workload, sweep point and factor
/// step; a bulk-loaded run whose load an earlier run of the experiment made starts from a
/// copy of it; each seed a series runs at counts) and the most client threads of any of
/// them.
pub fn plan(e: &Experiment) -> Result<(usize, usize), String> {
    let mut runs = 0;
    let mut most = 0;
    for s in &e.series {
        for cmd in seeded_commands(s, None)? {
            let a = parse_bench(&cmd)?;
            let clients = |a: &BenchArgs| match a.fabric {
                crate::args::FabricKind::Sim => a.sim.compute_nodes * a.sim.clients_per_node,
                _ => a.threads,
            };
            let (points, top) = match &a.sweep {
                Some(spec) => {
                    let sw = crate::bench::sweep::parse(spec)?;
                    let mut top = 0;
                    for &v in &sw.values {
                        top = top.max(clients(&crate::bench::sweep::point(&a, &sw.name, v)?));
                    }
                    (sw.values.len(), top)
                }
                None => (1, clients(&a)),
            };
            let steps = if a.factors {
                crate::bench::factor_steps(&a)?.len() * a.workloads.len().max(1)
            } else {
                1
            };
            runs += points * steps;
            most = most.max(top);
        }
    }
    Ok((runs, most))
}

/// The points of one bench run's records: run phases, and the LOAD phase where the series
/// lists `load` (once per series, client count and seed).
pub fn points(s: &Series, command: &str, recs: &[BenchRecord], out: &mut Vec<Point>) {
    let wants_load = s.workloads.contains(&"load");
    for r in recs {
        let load = r.phase == "load";
        if load && !wants_load {
            continue;
        }
        let p = Point::of(&s.label, command, r);
        if load
            && out.iter().any(|o| {
                o.series == p.series
                    && o.workload == p.workload
                    && o.clients == p.clients
                    && o.seed == p.seed
            })
        {
            continue;
        }
        out.push(p);
    }
}

/// One bench run of an experiment, as [`experiment`] runs it.
#[derive(Debug, Clone)]
pub struct Run {
    /// Its series' index in the experiment (a series split by [`super::seeded_workload`]
    /// keeps its label in each part).
    pub series: usize,
    /// Its series' label.
    pub label: String,
    /// The bench flags as run ([`as_run`]), without `remora bench`.
    pub cmd: String,
    /// Whether its load is bulk-loaded.
    pub bulk: bool,
}

impl Run {
    /// The command its points record.
    pub fn recorded(&self) -> String {
        format!("remora bench {}", self.cmd)
    }

    /// The series labels its points get: the series' own, or each factor step's name for
    /// a `--factors` run.
    pub fn labels(&self) -> Result<Vec<String>, String> {
        let mut a = parse_bench(&self.cmd)?;
        // `bench` sets the run's index from `--index` (one per run); a factors run has one.
        if let Some(&kind) = a.indexes.first() {
            a.index = kind;
        }
        if a.factors {
            Ok(crate::bench::factor_steps(&a)?
                .into_iter()
                .map(|(name, _)| name.to_string())
                .collect())
        } else {
            Ok(vec![self.label.clone()])
        }
    }
}

/// The bench runs of `e`, in order: each series' command lines at each of its seeds
/// ([`seeded_commands`]), bulk-loading where `bulk` or the command says `--bulk-load`
/// (Erda's store and Catfish's tree too, their servers' caches started as their loads left
/// them: at quick's key counts their points ran within 1.6% of the inserted ones' Mops). Known before anything runs: what `--resume` checks a file
/// against.
pub fn runs(e: &Experiment, bulk: bool, seeds: Option<u64>) -> Result<Vec<Run>, String> {
    let mut out = Vec::new();
    for (i, s) in e.series.iter().enumerate() {
        for cmd in seeded_commands(s, seeds)? {
            // A series may ask for its bulk load at every scale (`--bulk-load`).
            let bulk = bulk || cmd.split_whitespace().any(|w| w == "--bulk-load");
            out.push(Run {
                series: i,
                label: s.label.clone(),
                cmd: as_run(&cmd, bulk),
                bulk,
            });
        }
    }
    Ok(out)
}

/// Runs every series of `e`: its points, and the runs that failed (a failing index does
/// not stop the report; the failure is in it).
///
/// `bulk`: runs whose load is not measured bulk-load it (`bench/bulk.rs`) and share one
/// loaded cluster (load once, measure many). Off at `--scale quick`: its committed report's
/// rows were measured on insert-loaded trees, and bulk-loaded trees (Sherman's 80% full
/// leaves, as the paper loads them) move some of them. A series whose command says
/// `--bulk-load` bulk-loads whatever `bulk` says.
///
/// A series with seeds runs each command once per seed ([`seeded_commands`]; `seeds`:
/// `remora repro --seeds N` for every series); each point keeps its seed.
pub fn experiment(
    e: &Experiment,
    quiet: bool,
    bulk: bool,
    seeds: Option<u64>,
) -> Result<(Vec<Point>, Vec<String>), String> {
    let mut pts = Vec::new();
    let mut failed = Vec::new();
    for r in runs(e, bulk, seeds)? {
        let s = &e.series[r.series];
        let t = Instant::now();
        let cmd = &r.cmd;
        let mut a = parse_bench(cmd)?;
        a.silent = true;
        a.quiet = true;
        // The series' commands (one per workload, sweep point) share one bulk-loaded
        // cluster where their loads are the same: load once, measure many.
        a.load_once = r.bulk;
        a.no_bulk_load |= !r.bulk;
        let recs = match memory::check_fits(&a).and_then(|()| bench::records(&a)) {
            Ok(r) => r,
            Err(err) => {
                eprintln!("  {:<28} FAILED: remora bench {cmd}: {err}", s.label);
                failed.push(format!("`remora bench {cmd}`: {err}"));
                continue;
            }
        };
        if !quiet {
            eprintln!(
                "  {:<28} {:>6.1} s  remora bench {cmd}",
                s.label,
                t.elapsed().as_secs_f64()
            );
        }
        points(s, &r.recorded(), &recs, &mut pts);
    }
    crate::bench::bulk::forget();
    Ok((pts, failed))
}

/// The command line a series' run is recorded under: `cmd` as it runs, with
/// `--no-bulk-load` where the report inserts its keys (`bulk` off, as at `--scale quick`),
/// so the command a CSV row shows reproduces that row's figures.
pub fn as_run(cmd: &str, bulk: bool) -> String {
    if bulk || cmd.split_whitespace().any(|w| w == "--no-bulk-load") {
        cmd.to_string()
    } else {
        format!("{cmd} --no-bulk-load")
    }
}

/// Runs, writes and charts one paper; returns its report section. With `--resume`, an
/// experiment whose file holds every run this binary would make of it is loaded, not run
/// (its CSV and charts drawn again from it), and added to `reused`.
pub fn paper(
    p: &Paper,
    a: &ReproArgs,
    scale: &Scale,
    reused: &mut Vec<Reused>,
) -> Result<report::PaperReport, String> {
    let mut exps = Vec::new();
    let bulk = scale.name != "quick";
    for e in &p.experiments {
        let t = Instant::now();
        if !a.quiet {
            eprintln!("{}: {}", e.id, e.title);
        }
        let found = if a.resume || a.resume_any_build {
            resume::load(&a.out, &e.id, &runs(e, bulk, a.seeds)?, a.resume_any_build)
        } else {
            resume::Found::Absent
        };
        let (pts, failures) = match found {
            resume::Found::Reuse(pts, r) => {
                eprintln!(
                    "resume: {}: reusing {} ({} points, measured by {})",
                    e.id,
                    r.file,
                    pts.len(),
                    r.build
                );
                let csv = a.out.join(format!("{}.csv", e.id));
                std::fs::write(&csv, report::csv(&pts))
                    .map_err(|err| format!("{}: {err}", csv.display()))?;
                reused.push(r);
                (pts, Vec::new())
            }
            found => {
                if let resume::Found::Mismatch(why) = found {
                    eprintln!("resume: {}: running it again: {why}", e.id);
                }
                let (pts, failures) = experiment(e, a.quiet, bulk, a.seeds)?;
                report::write_points(&a.out, &e.id, &pts)?;
                (pts, failures)
            }
        };
        let charts = report::charts(&a.out, e, &pts)?;
        if !a.quiet {
            eprintln!("  done in {:.1} s", t.elapsed().as_secs_f64());
        }
        exps.push(report::ExpReport {
            id: e.id.clone(),
            title: e.title.clone(),
            curve: e.chart == Chart::Curve,
            charts,
            points: pts,
            failures,
        });
    }
    let rows = p
        .claims
        .iter()
        .map(|c| report::evaluate(p, c, &exps))
        .collect();
    Ok(report::PaperReport {
        key: p.key.into(),
        name: p.name.into(),
        paper_setup: p.paper_setup.into(),
        setup: p.setup.clone(),
        scale: scale.name.into(),
        experiments: exps,
        rows,
    })
}

/// Share of this machine's memory one run may use, and the CPU budget of one paper's
/// `--scale full` runs, in the memory report's fits.
const USABLE: f64 = 0.8;
const CPU_BUDGET_S: f64 = 900.0;

/// `--memory`: measures each selected paper's index in child processes and fits its
/// `--scale full` plan to this machine (see `memory.rs`).
///
/// With `--resume`, a fit in `<out>/memory.json` measured as this binary measures it
/// ([`resume::memory_fit`]) is reused, not measured again, and added to `reused`; the fits
/// to this machine and plan are computed again either way.
pub fn memory_report(
    a: &ReproArgs,
    reused: &mut Vec<Reused>,
) -> Result<memory::MemoryReport, String> {
    let full = Scale::of(super::ScaleSel::Full);
    let papers = super::papers(a.paper, &full);
    let machine = memory::machine_bytes().ok_or("cannot read MemTotal from /proc/meminfo")?;
    let old = (a.resume || a.resume_any_build)
        .then(|| resume::load_memory(&a.out))
        .flatten();
    let mut fits = Vec::new();
    for pr in memory::probes() {
        let Some(p) = papers.iter().find(|p| p.key == pr.paper) else {
            continue;
        };
        let t = Instant::now();
        let shrink = if a.scale == super::ScaleSel::Tiny {
            100
        } else {
            1
        };
        let fit = match old
            .as_ref()
            .map(|m| resume::memory_fit(m, &memory::shrunk(&pr, shrink), a.resume_any_build))
        {
            Some(Ok(f)) => {
                let r = resume::memory_reused(&a.out, &f);
                eprintln!(
                    "resume: {}: reusing its fit in {} (measured by {})",
                    r.what, r.file, r.build
                );
                reused.push(r);
                f
            }
            Some(Err(why)) => {
                eprintln!("resume: memory: measuring {} again: {why}", pr.index);
                memory::measure(&pr, &a.out, shrink)?
            }
            None => memory::measure(&pr, &a.out, shrink)?,
        };
        let (mut runs, mut clients) = (0, 0);
        for e in &p.experiments {
            let (r, c) = plan(e)?;
            runs += r;
            clients = clients.max(c);
        }
        let keys = full.for_paper(p.key).records;
        let row = memory::FitRow {
            keys_fit_memory: fit.keys_fitting(USABLE * machine as f64, clients as f64),
            keys_fit_cpu: if fit.cpu_us_per_key > 0.0 {
                CPU_BUDGET_S * 1e6 / (fit.cpu_us_per_key * runs.max(1) as f64)
            } else {
                f64::INFINITY
            },
            fit,
            full_clients: clients,
            full_runs: runs,
            full_keys: keys,
            paper_keys: p.paper_keys,
        };
        if !a.quiet {
            eprintln!(
                "memory: {} ({}): {:.0} B/key, {:.1} µs CPU/key, {:.2} MiB/client; {} keys fit \
                 {:.0}% of {:.1} GiB at {} clients ({:.0} s)",
                row.fit.index,
                row.fit.paper,
                row.fit.bytes_per_key,
                row.fit.cpu_us_per_key,
                row.fit.bytes_per_client / (1u64 << 20) as f64,
                memory::count(row.keys_fit_memory),
                100.0 * USABLE,
                machine as f64 / (1u64 << 30) as f64,
                clients,
                t.elapsed().as_secs_f64()
            );
        }
        fits.push(row);
    }
    let m = memory::MemoryReport {
        machine_bytes: machine,
        usable: USABLE,
        cpu_budget_s: CPU_BUDGET_S,
        fits,
    };
    let p = a.out.join("memory.json");
    let json = serde_json::to_string_pretty(&m).map_err(|e| e.to_string())?;
    std::fs::write(&p, json + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(m)
}

pub fn run(a: &ReproArgs) -> Result<(), String> {
    let scale = Scale::of(a.scale);
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let t = Instant::now();
    let mut reused = Vec::new();
    let memory = if a.memory || a.scale == super::ScaleSel::Full {
        Some(memory_report(a, &mut reused)?)
    } else {
        None
    };
    if let Some(m) = memory.as_ref().filter(|_| a.memory) {
        let md = m.markdown();
        let p = a.out.join("memory.md");
        std::fs::write(&p, &md).map_err(|e| format!("{}: {e}", p.display()))?;
        println!("{md}\n(memory.json and memory.md in {})", a.out.display());
        return Ok(());
    }
    let mut reports = Vec::new();
    let known: Vec<String> = super::papers(a.paper, &scale)
        .iter()
        .flat_map(|p| p.experiments.iter().map(|e| e.id.clone()))
        .collect();
    if let Some(bad) = a.only.iter().find(|o| !known.contains(o)) {
        return Err(format!(
            "--only {bad}: no such experiment here (one of: {})",
            known.join(", ")
        ));
    }
    for p in super::papers(a.paper, &scale) {
        let p = p.restrict(&a.only);
        if !p.experiments.is_empty() {
            reports.push(paper(&p, a, &scale, &mut reused)?);
        }
    }
    let mut full = report::Report::new(a, &scale, reports);
    full.memory = memory;
    full.reused = reused;
    full.write(&a.out)?;
    println!(
        "remora repro {:?} --scale {}: {} claims, {} experiments in {:.1} s; report in {}",
        a.paper,
        scale.name,
        full.rows().count(),
        full.papers
            .iter()
            .map(|p| p.experiments.len())
            .sum::<usize>(),
        t.elapsed().as_secs_f64(),
        a.out.join("report.md").display()
    );
    println!(
        "classes (remora's ratio / the paper's): {}",
        report::class::summary(&full.classes)
    );
    if let Some(committed) = &a.check {
        let diffs = report::check(committed, &full)?;
        if !diffs.is_empty() {
            return Err(format!(
                "the report differs from {} (rows, sides of 1, or classes that got worse):\n  {}",
                committed.display(),
                diffs.join("\n  ")
            ));
        }
        println!(
            "check: same rows, every ratio on the same side of 1 and no class worse than {}",
            committed.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_lines_parse_and_bad_ones_fail() {
        let a =
            parse_bench("--fabric sim --index sherman --sweep clients=8,16 --warmup 5").unwrap();
        assert_eq!(a.warmup, 5);
        assert_eq!(a.sweep.as_deref(), Some("clients=8,16"));
        assert!(parse_bench("--no-such-flag").is_err());
        let s = Series::new("x", "--fabric sim".into(), &["load", "a"]);
        assert_eq!(
            commands(&s),
            vec!["--fabric sim --workload load", "--fabric sim --workload a"]
        );
        let f = Series::new("f", "--factors --workloads a".into(), &["a"]);
        assert_eq!(commands(&f).len(), 1);
    }

    #[test]
    fn a_series_over_seeds_runs_each_command_at_each_seed() {
        let s = Series::new("x", "--fabric sim".into(), &["a", "b"]).over_seeds(2);
        assert_eq!(
            seeded_commands(&s, None).unwrap(),
            vec![
                "--fabric sim --workload a --seed 1",
                "--fabric sim --workload b --seed 1",
                "--fabric sim --workload a --seed 2",
                "--fabric sim --workload b --seed 2",
            ]
        );
        // `--seeds 3` for every series, whatever its own.
        assert_eq!(seeded_commands(&s, Some(3)).unwrap().len(), 6);
        let once = Series::new("y", "--fabric sim".into(), &["a"]);
        assert_eq!(seeded_commands(&once, None).unwrap(), commands(&once));
        // A series fixing its own seed cannot run over seeds.
        let fixed = Series::new("z", "--fabric sim --seed 4".into(), &["a"]);
        assert_eq!(seeded_commands(&fixed, None).unwrap().len(), 1);
        assert!(seeded_commands(&fixed.over_seeds(2), None).is_err());
        // The plan counts a run per seed.
        let e = Experiment {
            id: "e".into(),
            title: "E".into(),
            chart: Chart::Bars,
            series: vec![s, once],
        };
        assert_eq!(plan(&e).unwrap().0, 5);
    }

    #[test]
    fn a_recorded_command_says_whether_its_keys_were_inserted() {
        let cmd = "--fabric sim --index smart --workload a";
        // Quick scale inserts the keys: the recorded line must, or it bulk-loads and
        // measures another tree (SMART YCSB-A at 64 clients: 23.96 against 25.42 Mops).
        assert!(parse_bench(&as_run(cmd, false)).unwrap().no_bulk_load);
        assert!(!parse_bench(&as_run(cmd, true)).unwrap().no_bulk_load);
        let given = format!("{cmd} --no-bulk-load");
        assert_eq!(as_run(&given, false), given);
        assert_eq!(as_run(&given, true), given);
    }

    /// Every index's runs bulk-load where the scale does (Erda's and Catfish's too), and at
    /// quick only a series that asks for `--bulk-load`.
    #[test]
    fn runs_bulk_load_where_the_scale_or_the_series_says() {
        let series = |cmd: &str| Series::new("s", cmd.into(), &["c"]);
        let e = Experiment {
            id: "e".into(),
            title: "E".into(),
            chart: Chart::Bars,
            series: vec![
                series("--fabric sim --index erda"),
                series("--fabric sim --index catfish --tree rstar"),
                series("--fabric sim --index smart"),
                series("--fabric sim --index catfish --bulk-load"),
                series("--fabric sim --index erda-redo"),
            ],
        };
        let r = runs(&e, true, None).unwrap();
        let bulk: Vec<bool> = r.iter().map(|r| r.bulk).collect();
        assert_eq!(bulk, [true; 5]);
        assert!(!parse_bench(&r[0].cmd).unwrap().no_bulk_load);
        assert!(!parse_bench(&r[1].cmd).unwrap().no_bulk_load);
        let quick: Vec<bool> = runs(&e, false, None)
            .unwrap()
            .iter()
            .map(|r| r.bulk)
            .collect();
        assert_eq!(quick, [false, false, false, true, false]);
    }
}

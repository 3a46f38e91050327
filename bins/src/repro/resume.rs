//! `remora repro --resume`: a run stopped part-way (killed, out of session time) goes on
//! from the experiment files it already wrote instead of measuring them again.
//!
//! An experiment's `<out>/<id>.json` is reused only when it provably holds the experiment
//! this binary would run: the command lines of an experiment are known before it runs
//! ([`super::run::runs`]: each series' flags, workload, seed and `--no-bulk-load` as
//! recorded), and each point records the `remora bench` command that measured it, so the
//! file must hold points of exactly those commands, in the order they run (a command with no
//! point, a failed run, or a point of a command this binary does not run: measured again),
//! each point under the series label (or factor step) this binary gives that command's
//! points. What the command line does not say (the bench's and the sim's own code) is in
//! each point's `build` (crate version and git commit, `bins/build.rs`): a point is reused
//! only if this same build measured it (`--resume-any-build` also takes other builds' points
//! and files written before builds were recorded, "unknown"), and report.md shows the build
//! beside every reused file.
//!
//! `memory.json` (the `--memory` fits `--scale full` measures first) follows the same rule
//! per index: a fit is reused when its base command, key counts, client counts, compute
//! nodes and cache (which name every child run [`memory::measure`] makes) are this binary's.
use super::memory::{self, Fit, MemoryReport, Probe};
use super::report::Point;
use super::run::Run;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The binary that wrote a file: its crate version and the git commit it was built from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Build {
    pub version: String,
    /// `git rev-parse HEAD` at build time, `-dirty` if tracked files differed; `unknown`
    /// where the build had no git checkout.
    pub commit: String,
}

impl Build {
    /// This binary (constants set at build time).
    pub fn this() -> Build {
        Build {
            version: env!("CARGO_PKG_VERSION").into(),
            commit: env!("REMORA_GIT_COMMIT").into(),
        }
    }

    /// "remora 0.1.0 (commit …)", or "an unknown build" for a file without build records.
    pub fn text(b: Option<&Build>) -> String {
        match b {
            Some(b) => format!("remora {} (commit {})", b.version, b.commit),
            None => "an unknown build (the file predates build records)".into(),
        }
    }
}

/// An experiment (or the memory fits) `--resume` loaded instead of measuring.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reused {
    /// The experiment's id, or `memory: <index>`.
    pub what: String,
    /// The file its figures came from.
    pub file: String,
    /// The binaries that measured them ([`Build::text`]).
    pub build: String,
}

/// What `--resume` found for one experiment.
#[derive(Debug)]
pub enum Found {
    /// No file: run it.
    Absent,
    /// A file this binary cannot take as the experiment: run it again, for this reason.
    Mismatch(String),
    /// The file's points, and what to report about them.
    Reuse(Vec<Point>, Reused),
}

/// The builds of `builds`, first-seen order, as one text.
fn builds_text<'a>(builds: impl Iterator<Item = Option<&'a Build>>) -> String {
    let mut seen: Vec<Option<&Build>> = Vec::new();
    for b in builds {
        if !seen.contains(&b) {
            seen.push(b);
        }
    }
    seen.into_iter()
        .map(Build::text)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why points of `builds` are not taken as this binary's, if they are not (`any_build`:
/// every build is taken).
fn other_build<'a>(
    mut builds: impl Iterator<Item = Option<&'a Build>>,
    any_build: bool,
) -> Option<String> {
    let this = Build::this();
    let other = builds.find(|b| *b != Some(&this))?;
    (!any_build).then(|| {
        format!(
            "measured by {}, not by this binary ({}): its code may measure otherwise \
             (--resume-any-build takes it)",
            Build::text(other),
            Build::text(Some(&this))
        )
    })
}

/// `<dir>/<id>.json`, if it holds experiment `id` as this binary runs it (`runs`), measured
/// by this build (or any, with `any_build`).
pub fn load(dir: &Path, id: &str, runs: &[Run], any_build: bool) -> Found {
    let path = dir.join(format!("{id}.json"));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Found::Absent,
        Err(e) => return Found::Mismatch(format!("{}: {e}", path.display())),
    };
    let pts: Vec<Point> = match serde_json::from_str(&text) {
        Ok(p) => p,
        Err(e) => return Found::Mismatch(format!("{}: {e}", path.display())),
    };
    if let Err(why) = check(runs, &pts) {
        return Found::Mismatch(format!("{}: {why}", path.display()));
    }
    if let Some(why) = other_build(pts.iter().map(|p| p.build.as_ref()), any_build) {
        return Found::Mismatch(format!("{}: {why}", path.display()));
    }
    let reused = Reused {
        what: id.into(),
        file: path.display().to_string(),
        build: builds_text(pts.iter().map(|p| p.build.as_ref())),
    };
    Found::Reuse(pts, reused)
}

/// Items of `it` once each, in first-seen order.
fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = Vec::new();
    for s in it {
        if !v.contains(&s) {
            v.push(s);
        }
    }
    v
}

/// Whether `pts` are the points of `runs`: the same commands, none missing, none extra, in
/// the same order, each point under a label this binary gives its command's points.
pub fn check(runs: &[Run], pts: &[Point]) -> Result<(), String> {
    // A run of a LOAD alone whose series already has its LOAD point from an earlier run
    // (that run inserted the same keys first) leaves no point: `run::points` keeps one LOAD
    // point per series, client count and seed. Its command is not looked for.
    let runs: Vec<&Run> = runs.iter().filter(|r| !load_given(r, pts)).collect();
    let recorded: Vec<String> = runs.iter().map(|r| r.recorded()).collect();
    let want = distinct(recorded.iter().map(String::as_str));
    let have = distinct(pts.iter().map(|p| p.command.as_str()));
    let missing = want.iter().find(|c| !have.contains(c));
    let extra = have.iter().find(|c| !want.contains(c));
    let why = [
        missing.map(|c| format!("no point measured by `{c}`")),
        extra.map(|c| format!("a point measured by `{c}`, which this binary does not run for it")),
    ];
    if missing.is_some() || extra.is_some() {
        return Err(why.into_iter().flatten().collect::<Vec<_>>().join("; "));
    }
    if want != have {
        return Err("its commands ran in another order than this binary runs them".into());
    }
    let mut labels: Vec<(&str, Vec<String>)> = Vec::new();
    for (r, c) in runs.iter().zip(&recorded) {
        let l = r.labels()?;
        match labels.iter_mut().find(|(k, _)| k == c) {
            Some((_, v)) => v.extend(l),
            None => labels.push((c, l)),
        }
    }
    for p in pts {
        let ok = labels
            .iter()
            .find(|(c, _)| *c == p.command)
            .is_some_and(|(_, l)| l.contains(&p.series));
        if !ok {
            return Err(format!(
                "a point of `{}` is labelled `{}`, not as this binary labels it",
                p.command, p.series
            ));
        }
    }
    Ok(())
}

/// Whether `r` runs a LOAD alone (`--workload load`) whose point `pts` already has from
/// another command of its series, so that `r` left none of its own.
fn load_given(r: &Run, pts: &[Point]) -> bool {
    let words: Vec<&str> = r.cmd.split_whitespace().collect();
    let cmd = r.recorded();
    words.windows(2).any(|w| w == ["--workload", "load"])
        && !pts.iter().any(|p| p.command == cmd)
        && pts
            .iter()
            .any(|p| p.series == r.label && p.workload.eq_ignore_ascii_case("load"))
}

/// `<dir>/memory.json`, if readable (None: absent; a file that does not parse is reported
/// on stderr and measured again).
pub fn load_memory(dir: &Path) -> Option<MemoryReport> {
    let path = dir.join("memory.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            eprintln!("resume: measuring memory again: {}: {e}", path.display());
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("resume: measuring memory again: {}: {e}", path.display());
            None
        }
    }
}

/// The fit of `m` measured as this binary measures probe `p` (already shrunk), by this
/// build (or any, with `any_build`), or why not.
pub fn memory_fit(m: &MemoryReport, p: &Probe, any_build: bool) -> Result<Fit, String> {
    let f = m
        .fits
        .iter()
        .map(|r| &r.fit)
        .find(|f| f.paper == p.paper && f.index == p.index)
        .ok_or_else(|| format!("no fit of {} ({})", p.index, p.paper))?;
    let n = p.compute_nodes;
    let want = memory::base_command(p);
    let clients = (p.per_node.0 * n, p.per_node.1 * n);
    let cache = p.cache_mib.map(|c| c * (1u64 << 20) as f64);
    if f.command != want {
        return Err(format!(
            "its {} fit was measured by `{}`, not `{want}`",
            p.index, f.command
        ));
    }
    if f.keys != p.keys || f.clients != clients || f.compute_nodes != n || f.cache_bytes != cache {
        return Err(format!(
            "its {} fit has keys {:?}, clients {:?}, {} compute nodes, cache {:?} B; this \
             binary measures keys {:?}, clients {clients:?}, {n} compute nodes, cache {cache:?} B",
            p.index, f.keys, f.clients, f.compute_nodes, f.cache_bytes, p.keys
        ));
    }
    if let Some(why) = other_build(std::iter::once(f.build.as_ref()), any_build) {
        return Err(format!("its {} fit was {why}", p.index));
    }
    Ok(f.clone())
}

/// What report.md says of a reused fit.
pub fn memory_reused(dir: &Path, f: &Fit) -> Reused {
    Reused {
        what: format!("memory: {} ({})", f.index, f.paper),
        file: dir.join("memory.json").display().to_string(),
        build: Build::text(f.build.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repro::run::runs;
    use crate::repro::{Chart, Experiment, Series};

    fn exp() -> Experiment {
        Experiment {
            id: "e".into(),
            title: "E".into(),
            chart: Chart::Bars,
            series: vec![
                Series::new("A", "--fabric sim --index smart".into(), &["a", "c"]),
                Series::new("B", "--fabric sim --index sherman".into(), &["a"]).over_seeds(2),
            ],
        }
    }

    fn pt(series: &str, command: &str) -> Point {
        Point {
            series: series.into(),
            workload: "a".into(),
            clients: 4,
            coroutines: 1,
            mops: 0.1 + 0.2,
            p50_ns: 1.0 / 3.0,
            p99_ns: 2.0,
            mean_ns: 1.5,
            round_trips_per_op: 2.0,
            verbs_per_op: 3.0,
            bytes_per_op: 100.0,
            server_ns_per_op: None,
            link_use: Some(0.9),
            nic_use: None,
            server_use: None,
            offloaded_share: None,
            offload: None,
            nvm_create_bytes: None,
            nvm_update_bytes: None,
            steady: None,
            seed: 1,
            memory_nodes: 1,
            compute_nodes: 1,
            fabric: "sim".into(),
            cdf: vec![[1000.0, 0.5], [2000.0, 1.0]],
            command: command.into(),
            build: Some(Build::this()),
            machine: None,
        }
    }

    /// One point per run, labelled as the run labels them.
    fn points_of(rs: &[Run]) -> Vec<Point> {
        rs.iter().map(|r| pt(&r.label, &r.recorded())).collect()
    }

    #[test]
    fn a_load_run_whose_load_point_an_earlier_run_gave_is_not_looked_for() {
        // As canrt-latency: the series' update-only run inserts the keys first (its LOAD
        // point), so the run of the LOAD alone keeps none (`run::points`).
        let e = Experiment {
            id: "e".into(),
            title: "E".into(),
            chart: Chart::Bars,
            series: vec![Series::new(
                "A",
                "--fabric sim --index canrt".into(),
                &["update-only", "load"],
            )],
        };
        let rs = runs(&e, false, None).unwrap();
        assert_eq!(rs.len(), 2);
        assert!(rs[1].cmd.contains("--workload load"), "{}", rs[1].cmd);
        let mut load = pt("A", &rs[0].recorded());
        load.workload = "LOAD".into();
        let upd = pt("A", &rs[0].recorded());
        assert_eq!(check(&rs, &[load.clone(), upd.clone()]), Ok(()));
        // Without the earlier LOAD point the load run's own is missing: measured again.
        let err = check(&rs, std::slice::from_ref(&upd)).unwrap_err();
        assert!(err.contains("--workload load"), "{err}");
        // The load run's own point, where it has one, is still looked for in its place.
        let mut own = pt("A", &rs[1].recorded());
        own.workload = "LOAD".into();
        assert_eq!(check(&rs, &[upd.clone(), own.clone()]), Ok(()));
        assert!(check(&rs, &[own, upd]).is_err());
    }

    #[test]
    fn only_a_file_of_the_same_runs_is_taken_for_the_experiment() {
        let e = exp();
        let rs = runs(&e, false, None).unwrap();
        assert_eq!(rs.len(), 4);
        let good = points_of(&rs);
        assert_eq!(check(&rs, &good), Ok(()));
        // A run with no point (it failed, or the run was cut): measured again.
        let err = check(&rs, &good[1..]).unwrap_err();
        assert!(err.contains("no point measured by"), "{err}");
        // A point of a command this binary does not run.
        let mut extra = good.clone();
        extra.push(pt(
            "A",
            "remora bench --fabric sim --index smart --workload b",
        ));
        assert!(check(&rs, &extra).unwrap_err().contains("does not run"));
        // The same commands in another order.
        let mut swapped = good.clone();
        swapped.swap(0, 1);
        assert!(check(&rs, &swapped).unwrap_err().contains("another order"));
        // A point under another series label.
        let mut relabelled = good.clone();
        relabelled[2].series = "A".into();
        assert!(check(&rs, &relabelled).unwrap_err().contains("labelled"));
        // Another scale's bulk loading, or --seeds N, makes other commands.
        assert!(check(&runs(&e, true, None).unwrap(), &good).is_err());
        assert!(check(&runs(&e, false, Some(3)).unwrap(), &good).is_err());
        // Points of one command may be several (sweeps, seeds, the LOAD phase).
        let mut more = good.clone();
        more.insert(1, pt("A", &rs[0].recorded()));
        assert_eq!(check(&rs, &more), Ok(()));
    }

    #[test]
    fn a_factors_run_labels_its_points_by_step() {
        let s = Series::new(
            "factors",
            "--fabric sim --index sherman --factors --workloads a".into(),
            &["a"],
        );
        let e = Experiment {
            series: vec![s],
            ..exp()
        };
        let rs = runs(&e, false, None).unwrap();
        let steps = rs[0].labels().unwrap();
        // Sherman's steps, not the default index's (SMART's): the labels a Sherman factors
        // run gives its points (their file was never reused before).
        assert_eq!(steps.first().map(String::as_str), Some("FG+"), "{steps:?}");
        assert!(steps.len() > 1, "{steps:?}");
        let pts: Vec<Point> = steps.iter().map(|l| pt(l, &rs[0].recorded())).collect();
        assert_eq!(check(&rs, &pts), Ok(()));
        let err = check(&rs, &[pt("factors", &rs[0].recorded())]).unwrap_err();
        assert!(err.contains("labelled"), "{err}");
    }

    #[test]
    fn load_reuses_a_matching_file_and_says_why_it_does_not_reuse_another() {
        let dir = std::env::temp_dir().join(format!("remora-resume-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = exp();
        let rs = runs(&e, false, None).unwrap();
        let _ = std::fs::remove_file(dir.join("e.json"));
        assert!(matches!(load(&dir, "e", &rs, false), Found::Absent));
        let pts = points_of(&rs);
        crate::repro::report::write_points(&dir, "e", &pts).unwrap();
        match load(&dir, "e", &rs, false) {
            Found::Reuse(got, r) => {
                // Read back to the last bit (float_roundtrip).
                assert_eq!(got, pts);
                assert_eq!(r.what, "e");
                assert!(r.file.ends_with("e.json"), "{}", r.file);
                assert_eq!(r.build, Build::text(Some(&Build::this())));
            }
            f => panic!("{f:?}"),
        }
        // A file cut short, and one missing a field: measured again, with the reason.
        let text = std::fs::read_to_string(dir.join("e.json")).unwrap();
        std::fs::write(dir.join("e.json"), &text[..text.len() / 2]).unwrap();
        assert!(matches!(load(&dir, "e", &rs, false), Found::Mismatch(w) if w.contains("e.json")));
        std::fs::write(dir.join("e.json"), text.replace("\"mops\"", "\"mopz\"")).unwrap();
        assert!(matches!(load(&dir, "e", &rs, false), Found::Mismatch(w) if w.contains("mops")));
        // Points without a build (files of older binaries) load.
        let old: Vec<Point> = pts
            .iter()
            .map(|p| Point {
                build: None,
                ..p.clone()
            })
            .collect();
        crate::repro::report::write_points(&dir, "e", &old).unwrap();
        assert!(
            !std::fs::read_to_string(dir.join("e.json"))
                .unwrap()
                .contains("build")
        );
        // Measured again by default (another build's code may measure otherwise), reused
        // with any_build.
        assert!(
            matches!(load(&dir, "e", &rs, false), Found::Mismatch(w) if w.contains("--resume-any-build")),
        );
        match load(&dir, "e", &rs, true) {
            Found::Reuse(_, r) => assert!(r.build.contains("unknown"), "{}", r.build),
            f => panic!("{f:?}"),
        }
        // A point of another commit among this build's: measured again.
        let mut mixed = pts.clone();
        mixed[0].build = Some(Build {
            commit: "0000000".into(),
            ..Build::this()
        });
        crate::repro::report::write_points(&dir, "e", &mixed).unwrap();
        assert!(matches!(load(&dir, "e", &rs, false), Found::Mismatch(w) if w.contains("0000000")),);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every committed experiment file (written by binaries before build records) loads,
    /// and writes back byte for byte: what `--resume` reads is what the run wrote.
    #[test]
    fn committed_experiment_files_load_and_write_back_unchanged() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/repro");
        let mut n = 0;
        for f in std::fs::read_dir(&dir).unwrap() {
            let p = f.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if !name.ends_with(".json") || name == "report.json" || name == "memory.json" {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let pts: Vec<Point> =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!pts.is_empty(), "{name}");
            let again = serde_json::to_string_pretty(&pts).unwrap() + "\n";
            assert!(again == text, "{name} does not write back unchanged");
            n += 1;
        }
        assert!(n >= 20, "only {n} experiment files in {}", dir.display());
    }

    #[test]
    fn a_memory_fit_is_reused_only_as_this_binary_measures_it() {
        let p = memory::probes()[0];
        let n = p.compute_nodes;
        let fit = Fit {
            paper: p.paper.into(),
            index: p.index.into(),
            command: memory::base_command(&p),
            keys: p.keys,
            clients: (p.per_node.0 * n, p.per_node.1 * n),
            runs: [memory::Usage {
                max_rss_bytes: 1,
                cpu_s: 0.1,
            }; 5],
            bytes_per_key: 100.0,
            cpu_us_per_key: 8.0,
            bytes_per_client: 1.0,
            fixed_bytes: 1.0,
            cache_bytes: p.cache_mib.map(|c| c * (1u64 << 20) as f64),
            compute_nodes: n,
            build: Some(Build::this()),
        };
        let report = |f: Fit| MemoryReport {
            machine_bytes: 1 << 30,
            usable: 0.8,
            cpu_budget_s: 900.0,
            fits: vec![memory::FitRow {
                fit: f,
                full_clients: 1,
                full_runs: 1,
                full_keys: 1,
                paper_keys: None,
                keys_fit_memory: 1.0,
                keys_fit_cpu: 1.0,
            }],
        };
        assert_eq!(memory_fit(&report(fit.clone()), &p, false), Ok(fit.clone()));
        // A fit of an older binary (no build): measured again, unless any build is taken.
        let old = Fit {
            build: None,
            ..fit.clone()
        };
        assert!(
            memory_fit(&report(old.clone()), &p, false).is_err_and(|e| e.contains("any-build"))
        );
        assert_eq!(memory_fit(&report(old.clone()), &p, true), Ok(old));
        // The tool's tests' shrunk probe is another measurement.
        let small = memory::shrunk(&p, 100);
        assert!(memory_fit(&report(fit.clone()), &small, false).is_err());
        let other_keys = Fit {
            keys: (p.keys.0, p.keys.1 * 2),
            ..fit.clone()
        };
        assert!(
            memory_fit(&report(other_keys), &p, false)
                .unwrap_err()
                .contains("keys")
        );
        let other_cmd = Fit {
            command: fit.command.replace("--memory-nodes 2", "--memory-nodes 4"),
            ..fit.clone()
        };
        assert!(
            memory_fit(&report(other_cmd), &p, false)
                .unwrap_err()
                .contains("measured by")
        );
        let other_index = memory::probes()[1];
        assert!(
            memory_fit(&report(fit), &other_index, false)
                .unwrap_err()
                .contains("no fit")
        );
    }
}

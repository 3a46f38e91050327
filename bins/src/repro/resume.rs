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
//! points. What the command line does not say (the bench's own code) is in each point's
//! `build` (crate version and git commit, `bins/build.rs`), which report.md shows beside
//! every reused file; files written before builds were recorded load as "unknown".
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

/// `<dir>/<id>.json`, if it holds experiment `id` as this binary runs it (`runs`).
pub fn load(dir: &Path, id: &str, runs: &[Run]) -> Found {
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
    let recorded: Vec<String> = runs.iter().map(Run::recorded).collect();
    let want = distinct(recorded.iter().map(String::as_str));
    let have = distinct(pts.iter().map(|p| p.command.as_str()));
    if let Some(c) = want.iter().find(|c| !have.contains(c)) {
        return Err(format!("no point measured by `{c}`"));
    }
    if let Some(c) = have.iter().find(|c| !want.contains(c)) {
        return Err(format!(
            "a point measured by `{c}`, which this binary does not run for it"
        ));
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

/// The fit of `m` measured as this binary measures probe `p` (already shrunk), or why not.
pub fn memory_fit(m: &MemoryReport, p: &Probe) -> Result<Fit, String> {
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

//! A cluster run: N compute-node processes (`remora bench --connect ... --cluster-size N
//! --cluster-rank I`), on N hosts or one, start each phase together through a barrier held
//! in the memory node ([`remora::core::barrier`]); each loads its share of the records and
//! writes its record with its latency histogram; `remora merge` then sums their throughput
//! and merges their histograms.
use super::BenchArgs;
use super::ycsb::Workload;
use clap::Args;
use hdrhistogram::Histogram;
use remora::core::barrier::{self, Bound};
use remora::core::fabric::Endpoint;
use serde::Serialize;
use serde_json::Value;
use std::io::Write;

/// `--cluster-size` and `--cluster-rank`.
#[derive(Debug, Clone, Args)]
pub struct ClusterFlags {
    /// Compute-node processes in the cluster run (with `--connect`): each phase starts when
    /// all have reached it, through a barrier word in the (first) memory node.
    #[arg(long, default_value_t = 1)]
    pub cluster_size: u64,
    /// This process's rank in 0..cluster-size: rank 0 opens (creates) the index first, and
    /// each rank loads its share of the records.
    #[arg(long, default_value_t = 0)]
    pub cluster_rank: u64,
    /// How long a process waits at the barrier for the others, in seconds.
    #[arg(long, default_value_t = 60.0, value_parser = crate::args::positive_seconds)]
    pub cluster_timeout: f64,
}

impl ClusterFlags {
    /// True in a cluster run of more than one process.
    pub fn on(&self) -> bool {
        self.cluster_size > 1
    }

    /// The first and one-past-last record this rank loads.
    pub fn share(&self, records: u64) -> (u64, u64) {
        let n = self.cluster_size.max(1);
        let part = |r: u64| (records as u128 * r as u128 / n as u128) as u64;
        (part(self.cluster_rank), part(self.cluster_rank + 1))
    }
}

/// Refuses flags a cluster run cannot honour.
pub fn validate(a: &BenchArgs) -> Result<(), String> {
    let c = &a.cluster;
    if c.cluster_rank >= c.cluster_size {
        return Err(format!(
            "--cluster-rank {} is not in 0..{} (--cluster-size)",
            c.cluster_rank, c.cluster_size
        ));
    }
    if !c.on() {
        return Ok(());
    }
    if a.connect.is_none() || a.fabric == super::FabricKind::Sim {
        return Err(
            "--cluster-size needs --connect: the processes meet at a memnode (soft or verbs)"
                .into(),
        );
    }
    if matches!(a.workload, Workload::D | Workload::E | Workload::Wi) {
        return Err(format!(
            "--cluster-size runs workloads without inserts (LOAD, A, B, C, F): the processes \
             of YCSB-{} would insert the same new keys",
            a.workload.name()
        ));
    }
    if a.index == super::IndexKind::Catfish {
        return Err("--cluster-size runs the key-value indexes (not catfish)".into());
    }
    if a.sweep.is_some() || a.factors || a.indexes.len() > 1 || a.warmup > 0 {
        return Err(
            "--cluster-size runs one index once (no --sweep, --factors, --warmup or index list)"
                .into(),
        );
    }
    Ok(())
}

/// Waits at the memory node's barrier until all `a.cluster.cluster_size` processes arrive
/// (`what` names the point in the error).
pub fn meet<E: Endpoint>(a: &BenchArgs, ep: &E, what: &str) -> Result<(), String> {
    let node = *ep
        .nodes()
        .first()
        .ok_or("cluster barrier: no memory node")?;
    let qp = ep.qp(node).map_err(|e| e.to_string())?;
    let bound = Bound {
        timeout_ns: (a.cluster.cluster_timeout * 1e9) as u64,
        max_polls: u64::MAX,
        pause_ns: 20_000,
    };
    super::soft::one(barrier::wait(qp, a.cluster.cluster_size, bound))
        .map(|_| ())
        .map_err(|e| format!("rank {} at the barrier {what}: {e}", a.cluster.cluster_rank))
}

/// What a cluster process adds to its record: its place and its latency histogram.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterPart {
    pub size: u64,
    pub rank: u64,
    /// The latency histogram as (highest equivalent value in ns, count) pairs, one per
    /// recorded bucket.
    pub hist: Vec<[u64; 2]>,
}

impl ClusterPart {
    pub fn new(a: &BenchArgs, h: &Histogram<u64>) -> Option<ClusterPart> {
        a.cluster.on().then(|| ClusterPart {
            size: a.cluster.cluster_size,
            rank: a.cluster.cluster_rank,
            hist: h
                .iter_recorded()
                .map(|v| [v.value_iterated_to(), v.count_at_value()])
                .collect(),
        })
    }
}

/// `remora merge`: the records of a cluster run's processes, one file each.
#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// The JSON record files (`remora bench --json`), one per process.
    #[arg(required = true)]
    pub files: Vec<String>,
}

/// One phase merged over the processes.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub workload: String,
    pub phase: String,
    pub processes: usize,
    pub ops: u64,
    /// Operations over the common interval: from the barrier that started everyone to the
    /// last process's end (the longest process's seconds).
    pub mops: f64,
    /// The processes' own Mops summed (each over its own interval).
    pub mops_sum: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// The smallest and largest of the processes' own p50, p99, p999.
    pub p50_range: (f64, f64),
    pub p99_range: (f64, f64),
    pub p999_range: (f64, f64),
    pub round_trips: f64,
    pub reads: f64,
    pub verbs: f64,
    pub bytes_in: f64,
}

fn num(v: &Value, path: &[&str]) -> Result<f64, String> {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .ok_or_else(|| format!("record has no number at {}", path.join(".")))
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or("?").to_string()
}

/// Merges the records of `files` phase by phase; every file must hold the same phases of a
/// cluster run, each rank once.
pub fn merge_files(files: &[String]) -> Result<Vec<Merged>, String> {
    let mut per_file = Vec::new();
    for f in files {
        let s = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
        let recs: Vec<Value> = s
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| format!("{f}: {e}")))
            .collect::<Result<_, _>>()?;
        if recs.is_empty() {
            return Err(format!("{f}: no records"));
        }
        per_file.push((f, recs));
    }
    let first = &per_file[0].1;
    let mut out = Vec::new();
    for (i, r0) in first.iter().enumerate() {
        let mut group = Vec::new();
        for (f, recs) in &per_file {
            let r = recs
                .get(i)
                .ok_or_else(|| format!("{f}: fewer records than {}", files[0]))?;
            if text(r, "phase") != text(r0, "phase") || text(r, "workload") != text(r0, "workload")
            {
                return Err(format!(
                    "{f}: record {i} is another phase than in {}",
                    files[0]
                ));
            }
            if r["cluster_process"].is_null() {
                return Err(format!(
                    "{f}: not a cluster record (run bench with --cluster-size)"
                ));
            }
            group.push((f, r));
        }
        out.push(merge_group(&group)?);
    }
    Ok(out)
}

fn merge_group(group: &[(&&String, &Value)]) -> Result<Merged, String> {
    let size = num(group[0].1, &["cluster_process", "size"])? as usize;
    let mut ranks: Vec<u64> = Vec::new();
    let mut hist = super::phase::new_hist();
    let (mut ops, mut mops_sum, mut seconds) = (0u64, 0.0f64, 0.0f64);
    let (mut rt, mut rd, mut verbs, mut bin) = (0.0, 0.0, 0.0, 0.0);
    let range = |q: &str| -> Result<(f64, f64), String> {
        let mut lo = f64::INFINITY;
        let mut hi = 0.0f64;
        for (_, r) in group {
            let v = num(r, &["latency", q])?;
            lo = lo.min(v);
            hi = hi.max(v);
        }
        Ok((lo, hi))
    };
    for (f, r) in group {
        let rank = num(r, &["cluster_process", "rank"])? as u64;
        if num(r, &["cluster_process", "size"])? as usize != size {
            return Err(format!("{f}: another --cluster-size than the first file"));
        }
        if ranks.contains(&rank) {
            return Err(format!("{f}: rank {rank} twice"));
        }
        ranks.push(rank);
        let n = num(r, &["ops"])? as u64;
        ops += n;
        mops_sum += num(r, &["mops"])?;
        seconds = seconds.max(num(r, &["seconds"])?);
        let w = n as f64;
        rt += num(r, &["per_op", "round_trips"])? * w;
        rd += num(r, &["per_op", "reads"])? * w;
        verbs += num(r, &["per_op", "verbs"])? * w;
        bin += num(r, &["per_op", "bytes_in"])? * w;
        let pairs = r["cluster_process"]["hist"]
            .as_array()
            .ok_or_else(|| format!("{f}: no histogram"))?;
        for p in pairs {
            let (v, c) = (p[0].as_u64(), p[1].as_u64());
            let (Some(v), Some(c)) = (v, c) else {
                return Err(format!("{f}: bad histogram entry {p}"));
            };
            hist.record_n(v, c)
                .map_err(|e| format!("{f}: histogram value {v}: {e}"))?;
        }
    }
    if group.len() != size {
        return Err(format!(
            "{} files for a cluster of {size} processes",
            group.len()
        ));
    }
    let d = ops.max(1) as f64;
    let q = |x: f64| hist.value_at_quantile(x);
    Ok(Merged {
        workload: text(group[0].1, "workload"),
        phase: text(group[0].1, "phase"),
        processes: group.len(),
        ops,
        mops: if seconds > 0.0 {
            ops as f64 / seconds / 1e6
        } else {
            0.0
        },
        mops_sum,
        p50_ns: q(0.5),
        p99_ns: q(0.99),
        p999_ns: q(0.999),
        p50_range: range("p50_ns")?,
        p99_range: range("p99_ns")?,
        p999_range: range("p999_ns")?,
        round_trips: rt / d,
        reads: rd / d,
        verbs: verbs / d,
        bytes_in: bin / d,
    })
}

/// `remora merge`: prints the merged table.
pub fn run_merge(m: &MergeArgs) -> Result<(), String> {
    let rows = merge_files(&m.files)?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<8} {:<5} {:>5} {:>10} {:>8} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>8}",
        "workload",
        "phase",
        "procs",
        "ops",
        "Mops",
        "p50 ns",
        "p99 ns",
        "p999 ns",
        "RT/op",
        "RD/op",
        "verbs",
        "B in/op"
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "{:<8} {:<5} {:>5} {:>10} {:>8.3} {:>9} {:>9} {:>9} {:>6.2} {:>6.2} {:>6.2} {:>8.1}",
            r.workload,
            r.phase,
            r.processes,
            r.ops,
            r.mops,
            r.p50_ns,
            r.p99_ns,
            r.p999_ns,
            r.round_trips,
            r.reads,
            r.verbs,
            r.bytes_in
        );
    }
    for r in &rows {
        let _ = writeln!(
            out,
            "note: {} {}: Mops = all ops over the longest process's measured interval (all \
             start at the barrier); the processes' own Mops sum to {:.3}; their p50 {:.0}..{:.0}, \
             p99 {:.0}..{:.0}, p999 {:.0}..{:.0} ns",
            r.workload,
            r.phase,
            r.mops_sum,
            r.p50_range.0,
            r.p50_range.1,
            r.p99_range.0,
            r.p99_range.1,
            r.p999_range.0,
            r.p999_range.1
        );
    }
    Ok(())
}

//! Results of `remora perf` and `remora bench`: a human table and one JSON record per run.
use hdrhistogram::Histogram;
use remora::core::Snapshot;
use remora::core::fabric::Verb;
use serde::Serialize;
use std::io::Write;

/// Latency percentiles in nanoseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub p999_ns: f64,
    pub mean_ns: f64,
    pub max_ns: f64,
}

impl Latency {
    pub fn from_hist(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            p50_ns: h.value_at_quantile(0.50) as f64,
            p99_ns: h.value_at_quantile(0.99) as f64,
            p999_ns: h.value_at_quantile(0.999) as f64,
            mean_ns: h.mean(),
            max_ns: h.max() as f64,
        }
    }
}

/// Counters divided by completed operations.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PerOp {
    pub verbs: f64,
    pub reads: f64,
    pub writes: f64,
    pub write_imms: f64,
    pub cas: f64,
    pub faa: f64,
    pub sends: f64,
    pub recvs: f64,
    pub bytes_out: f64,
    pub bytes_in: f64,
    pub doorbells: f64,
    pub round_trips: f64,
}

impl PerOp {
    pub fn new(s: &Snapshot, ops: u64) -> PerOp {
        let d = ops.max(1) as f64;
        PerOp {
            verbs: s.posted_verbs() as f64 / d,
            reads: s.verb(Verb::Read) as f64 / d,
            writes: s.verb(Verb::Write) as f64 / d,
            write_imms: s.verb(Verb::WriteImm) as f64 / d,
            cas: s.verb(Verb::Cas) as f64 / d,
            faa: s.verb(Verb::Faa) as f64 / d,
            sends: s.verb(Verb::Send) as f64 / d,
            recvs: s.verb(Verb::Recv) as f64 / d,
            bytes_out: s.bytes_out as f64 / d,
            bytes_in: s.bytes_in as f64 / d,
            doorbells: s.doorbells as f64 / d,
            round_trips: s.round_trips as f64 / d,
        }
    }
}

/// One `remora perf` measurement: one verb at one message size.
#[derive(Debug, Clone, Serialize)]
pub struct PerfRecord {
    pub tool: &'static str,
    pub fabric: String,
    pub verb: String,
    pub size: usize,
    pub threads: usize,
    pub coroutines: usize,
    /// Completed operations.
    pub ops: u64,
    /// Wall-clock seconds (soft, verbs) or virtual seconds (sim).
    pub seconds: f64,
    pub mops: f64,
    pub mops_per_thread: f64,
    /// Payload bandwidth in GB/s (10^9 bytes).
    pub gbps: f64,
    pub latency: Latency,
    pub per_op: PerOp,
    /// Memory-node CPU time per operation in ns, the papers' "server CPU cost" (sim: the
    /// handler threads' busy time over the window / ops; null where not measured).
    pub server_ns_per_op: Option<f64>,
    /// Free-form facts about the run (arena kind, pinning, sim model, seed...).
    pub notes: Vec<String>,
}

/// A server CPU figure for a table cell ("-" where not measured).
pub fn server_cell(ns: Option<f64>) -> String {
    ns.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

pub fn print_perf_table(rows: &[PerfRecord], json: Option<&str>) {
    let mut out = human_out(json);
    let _ = writeln!(
        out,
        "{:<15} {:>7} {:>4}x{:<4} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9}",
        "verb",
        "size",
        "thr",
        "co",
        "ops",
        "Mops",
        "Mops/thr",
        "GB/s",
        "p50 ns",
        "p99 ns",
        "RT/op",
        "srv ns/op"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<15} {:>7} {:>4}x{:<4} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.0} {:>9.0} {:>7.2} {:>9}",
            r.verb,
            r.size,
            r.threads,
            r.coroutines,
            r.ops,
            r.mops,
            r.mops_per_thread,
            r.gbps,
            r.latency.p50_ns,
            r.latency.p99_ns,
            r.per_op.round_trips,
            server_cell(r.server_ns_per_op)
        );
    }
    // Notes every row shares once; a row's own notes under its verb and size.
    let common: Vec<&String> = rows
        .first()
        .map(|r| {
            r.notes
                .iter()
                .filter(|n| rows.iter().all(|o| o.notes.contains(n)))
                .collect()
        })
        .unwrap_or_default();
    for n in &common {
        let _ = writeln!(out, "note: {n}");
    }
    for r in rows {
        for n in r.notes.iter().filter(|n| !common.contains(n)) {
            let _ = writeln!(out, "note [{} {} B]: {n}", r.verb, r.size);
        }
    }
}

/// Writes records as JSON lines to `path` ("-" for stdout).
/// Where the human-readable table goes: stdout, unless the JSON records go there
/// (`--json -`), in which case stderr, so that `| jq` sees JSON only.
pub fn human_out(json: Option<&str>) -> Box<dyn std::io::Write> {
    if json == Some("-") {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    }
}

/// Fails now, before a long run, if `path` cannot be written later.
pub fn check_writable(path: &str) -> Result<(), String> {
    if path == "-" {
        return Ok(());
    }
    let existed = std::path::Path::new(path).exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("--json {path}: cannot write there: {e}"))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

pub fn write_json<T: Serialize>(path: &str, records: &[T]) -> std::io::Result<()> {
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    if path == "-" {
        std::io::stdout().lock().write_all(text.as_bytes())
    } else {
        std::fs::write(path, text)
    }
}

//! `remora bench`: the YCSB driver.
//!
//! Loads `--records` keys (YCSB LOAD; on the sim SMART, Sherman, FG+, CHIME, CANRT, WORT, WOART,
//! Erda and Catfish are bulk-loaded where the load is not measured, `bulk*.rs`,
//! `spatial/load.rs`), then runs the chosen workload for `--operations`
//! operations or `--seconds` seconds. On `--fabric soft` every worker thread is one
//! compute-node client with its own endpoint and index handle, running `--coroutines`
//! coroutines; on `--fabric sim` the clients are `--compute-nodes x --clients-per-node`
//! simulated client threads in virtual time; on `--fabric verbs` every worker thread is one
//! client with its own verbs endpoint on the `--connect` memory nodes (`verbs.rs`; one-sided
//! indexes only). Any index implementing `KvIndex` plugs in
//! (`index.rs`); SMART's and Sherman's techniques are flags. Prints a table and writes one
//! JSON record per phase.
pub(crate) mod bulk;
pub(crate) mod bulk_canrt;
pub(crate) mod bulk_chime;
pub(crate) mod bulk_erda;
pub(crate) mod bulk_wort;
mod churn;
pub(crate) mod cluster;
pub(crate) mod cpu_calibration;
pub(crate) mod index;
pub(crate) mod meta;
pub(crate) mod phase;
pub(crate) mod resizes;
mod sim;
mod soft;
mod spatial;
pub(crate) mod sweep;
mod table1;
pub(crate) mod tcp;
mod verbs;
mod ycsb;

use crate::args::{FabricKind, SimArgs};
use crate::report::write_json;
use clap::{Args, ValueEnum};
use index::IndexCfg;
use indicatif::{ProgressBar, ProgressStyle};
use phase::{BenchRecord, value_for};
use remora::core::canrt::{CanrtConfig, Growth, WriteAck};
use remora::core::chime::ChimeConfig;
use remora::core::erda::baseline::Scheme;
use remora::core::erda::{ErdaClientConfig, ErdaConfig};
use remora::core::sherman::ShermanConfig;
use remora::core::smart::{KeyMode, SmartConfig, Techniques};
use remora::core::wort::Kind;
use remora::poller::clock::Clock;
use std::collections::BTreeMap;
use std::io::Write;
use ycsb::{Distribution, KeyChooser, KeyType, Rng, Workload, key_of};

mod args;
mod config;
mod factors;
pub use args::*;
pub(crate) use config::*;
pub(crate) use factors::factor_steps;
use factors::*;

pub(crate) fn progress(a: &BenchArgs, len: u64, what: String) -> ProgressBar {
    if a.quiet || a.silent {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>14} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what);
    pb
}

fn print_table(rows: &[BenchRecord], json: Option<&str>) {
    let mut out = crate::report::human_out(json);
    let _ = writeln!(
        out,
        "{:<8} {:<5} {:>9} {:>8} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>8} {:>6} {:>6} {:>9} {:>8}  techniques",
        "workload",
        "phase",
        "ops",
        "Mops",
        "p50 ns",
        "p99 ns",
        "p999 ns",
        "RT/op",
        "RD/op",
        "verbs",
        "B in/op",
        "r-amp",
        "w-amp",
        "srv ns/op",
        "nvm B/op"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<8} {:<5} {:>9} {:>8.3} {:>9.0} {:>9.0} {:>9.0} {:>6.2} {:>6.2} {:>6.2} {:>8.1} {:>6.2} {:>6.2} {:>9} {:>8}  {}",
            r.workload,
            r.phase,
            r.ops,
            r.mops,
            r.latency.p50_ns,
            r.latency.p99_ns,
            r.latency.p999_ns,
            r.per_op.round_trips,
            r.per_op.reads,
            r.per_op.verbs,
            r.per_op.bytes_in,
            r.read_amplification,
            r.write_amplification,
            crate::report::server_cell(r.server_ns_per_op),
            crate::report::server_cell(r.nvm_bytes_per_op),
            r.techniques
        );
    }
    for r in rows {
        if let Some(s) = r.steady.filter(|&s| phase::steady::unsteady(s)) {
            // The rate moved while the phase ran: its Mops are of this length only.
            let _ = writeln!(
                out,
                "{} {} unsteady: its second half completed {:.2}x the operations of its first \
                 ({}): this throughput holds for this run's length only",
                r.workload,
                r.phase,
                s,
                if s < 1.0 {
                    "the rate fell as it ran"
                } else {
                    "the rate rose as it ran, still warming up"
                }
            );
        }
        if let (Some(rd), Some(wr)) = (&r.latency_reads, &r.latency_writes) {
            // Where a mixed phase's tail comes from: each kind's own percentiles.
            let _ = writeln!(
                out,
                "{} {} latency by kind: reads p50 {:.0} p99 {:.0} p999 {:.0} ns, writes p50 \
                 {:.0} p99 {:.0} p999 {:.0} ns",
                r.workload,
                r.phase,
                rd.p50_ns,
                rd.p99_ns,
                rd.p999_ns,
                wr.p50_ns,
                wr.p99_ns,
                wr.p999_ns
            );
        }
        let m = &r.smart;
        if m.lock_waits > 0 {
            // SMART's lock waits: failed lock CASes, and the write operations that met a
            // held leaf lock and how long they waited for it.
            let _ = writeln!(
                out,
                "smart {} {}: {} failed lock CASes ({:.3}/op), {} leaf locks waited for, \
                 {:.1} us each on average",
                r.workload,
                r.phase,
                m.lock_waits,
                m.lock_waits as f64 / r.ops.max(1) as f64,
                m.leaf_lock_waited,
                m.leaf_lock_wait_ns as f64 / m.leaf_lock_waited.max(1) as f64 / 1e3
            );
        }
        if m.delegated_reads + m.combined_writes > 0 {
            // SMART's read delegation and write combining at work, per compute node unless
            // --per-thread-state.
            let c = &r.op_counts;
            let pct = |n: u64, of: u64| 100.0 * n as f64 / of.max(1) as f64;
            let _ = writeln!(
                out,
                "smart {} {}: {} reads delegated ({:.1}% of reads), {} writes combined ({:.1}% \
                 of writes); leaders' second writes {} ({:.1}% of writes, covering {} writers, \
                 {:.1} us each on average)",
                r.workload,
                r.phase,
                m.delegated_reads,
                pct(m.delegated_reads, c.reads),
                m.combined_writes,
                pct(m.combined_writes, c.updates + c.inserts),
                m.second_writes,
                pct(m.second_writes, c.updates + c.inserts),
                m.second_write_covered,
                m.second_write_ns as f64 / m.second_writes.max(1) as f64 / 1e3
            );
        }
        let s = &r.sherman;
        if s.locks_acquired > 0 {
            // Sherman's hierarchical lock at work: the locks a thread of the same compute
            // node handed over (HOCL's local level: taken without a remote CAS).
            let _ = writeln!(
                out,
                "sherman {} {}: {} locks taken ({:.2}/op), {} handed over within a compute node \
                 ({:.1}%)",
                r.workload,
                r.phase,
                s.locks_acquired,
                s.locks_acquired as f64 / r.ops.max(1) as f64,
                s.lock_handovers,
                100.0 * s.lock_handovers as f64 / s.locks_acquired as f64
            );
        }
        if s.speculative_tries + s.group_retries + s.sibling_reads > 0 {
            // CHIME's reads beyond one neighbourhood per lookup: index-cache misses (a
            // level-1 page read), speculative reads and their hits, group READs retried,
            // sibling low-key READs.
            let per = |n: u64| n as f64 / r.ops.max(1) as f64;
            let _ = writeln!(
                out,
                "chime {} {}: {} index-cache misses ({:.3}/op, {} hits), {} speculative \
                 reads ({} found their key), {} group READs retried ({:.3}/op), {} sibling \
                 low-key READs ({:.3}/op)",
                r.workload,
                r.phase,
                s.cache_misses,
                per(s.cache_misses),
                s.cache_hits,
                s.speculative_tries,
                s.speculative_hits,
                s.group_retries,
                per(s.group_retries),
                s.sibling_reads,
                per(s.sibling_reads)
            );
        }
        if let Some(c) = &r.canrt {
            let _ = writeln!(
                out,
                "canrt {} {}: resize requests {} ({:.2}% of inserts), lock polls {:.3}/op, torn \
                 retries {}, skipped tickets {}, Wait messages {:.3}/op, credit waits {:.3}/op \
                 ({:.2} us per op); ops during a resize {} (p50 {:.1} us, p99 {:.1} us)",
                r.workload,
                r.phase,
                c.resize_requests,
                c.resize_percent,
                c.lock_polls as f64 / r.ops.max(1) as f64,
                c.torn_retries,
                c.skipped,
                c.turn_waits as f64 / r.ops.max(1) as f64,
                c.credit_waits as f64 / r.ops.max(1) as f64,
                c.credit_wait_ns as f64 / 1e3 / r.ops.max(1) as f64,
                c.during_resize_ops,
                c.during_resize_p50_ns as f64 / 1e3,
                c.during_resize_p99_ns as f64 / 1e3
            );
        }
    }
    if let Some(r) = rows.first() {
        for n in &r.notes {
            let _ = writeln!(out, "note: {n}");
        }
    }
}

pub fn run(a: &BenchArgs) -> Result<(), String> {
    if a.sim.show_model {
        return crate::perf_sim::show_model(&a.sim);
    }
    if a.table1 {
        return table1::run(a);
    }
    if a.churn {
        return churn::run(a);
    }
    let all = records(a)?;
    if let Some(p) = &a.json {
        write_json(p, &all).map_err(|e| format!("writing {p}: {e}"))?;
    }
    Ok(())
}

/// Every record of the runs the flags ask for (each `--sweep` point, each `--index`, each
/// factor step), the tables printed unless `silent`.
pub(crate) fn records(a: &BenchArgs) -> Result<Vec<BenchRecord>, String> {
    if let Some(spec) = &a.sweep {
        let s = sweep::parse(spec)?;
        let mut all = Vec::new();
        for &v in &s.values {
            let mut point = sweep::point(a, &s.name, v)?;
            // The points start from one loaded cluster (where it is bulk-loaded).
            point.load_once = true;
            if !a.silent {
                let mut out = crate::report::human_out(a.json.as_deref());
                let _ = writeln!(out, "\n--sweep {}={v}", s.name);
            }
            let r = records(&point);
            if r.is_err() && !a.load_once {
                bulk::forget();
            }
            all.extend(r?);
        }
        if !a.load_once {
            bulk::forget();
        }
        return Ok(all);
    }
    let mut runs = Vec::new();
    for &kind in &a.indexes {
        let mut one = a.clone();
        one.index = kind;
        validate(&one)?;
        runs.push(one);
    }
    if runs.len() > 1 && a.factors {
        return Err("--factors takes one --index".into());
    }
    let mut all = Vec::new();
    for one in &runs {
        if one.factors {
            return factors(one);
        }
        let mut recs = run_one(one)?;
        meta::annotate(one, &mut recs)?;
        all.extend(recs);
    }
    if runs.len() > 1 && !a.silent {
        let mut out = crate::report::human_out(a.json.as_deref());
        let _ = writeln!(out, "\nside by side (run phase):");
        let _ = writeln!(
            out,
            "{:<10} {:>9} {:>9} {:>9} {:>7} {:>8} {:>9} {:>8}",
            "index", "Mops", "p50 ns", "p99 ns", "RT/op", "B in/op", "srv ns/op", "nvm B/op"
        );
        for r in all
            .iter()
            .filter(|r| r.phase == "run" || a.workload == Workload::Load)
        {
            let _ = writeln!(
                out,
                "{:<10} {:>9.3} {:>9.0} {:>9.0} {:>7.2} {:>8.1} {:>9} {:>8}",
                r.index,
                r.mops,
                r.latency.p50_ns,
                r.latency.p99_ns,
                r.per_op.round_trips,
                r.per_op.bytes_in,
                crate::report::server_cell(r.server_ns_per_op),
                crate::report::server_cell(r.nvm_bytes_per_op)
            );
        }
    }
    Ok(all)
}

/// One index's LOAD and run phases: prints its table, returns its records.
fn run_one(a: &BenchArgs) -> Result<Vec<BenchRecord>, String> {
    if a.index == IndexKind::Catfish {
        let recs = spatial::run(a)?;
        if !a.silent {
            print_table(&recs, a.json.as_deref());
            spatial::print_run_notes(&recs, a.json.as_deref());
        }
        return Ok(recs);
    }
    let index = index_cfg(a)?;
    let mut recs = run_phases(a, &index, a.workload)?;
    let ops = a.operations.unwrap_or(a.records).max(100_000);
    let mut baselines = Vec::new();
    if a.compare_btreemap {
        baselines.push(("std BTreeMap", btreemap_c(a, ops)));
    }
    if a.compare_art {
        baselines.push(("congee (in-memory ART)", art_c(a, ops)?));
    }
    if let Some(r) = recs.iter_mut().find(|r| r.phase == "run") {
        for (name, m) in baselines {
            r.notes.push(format!(
                "{name} YCSB-C on one core, same keys and distribution: {m:.3} Mops; this run / {name} = {:.2}",
                r.mops / m
            ));
        }
    }
    if a.silent {
        return Ok(recs);
    }
    print_table(&recs, a.json.as_deref());
    let mut out = crate::report::human_out(a.json.as_deref());
    for r in &recs {
        if r.phase == "run" {
            for n in r.notes.iter().filter(|n| n.contains("YCSB-C on one core")) {
                let _ = writeln!(out, "note: {n}");
            }
        }
    }
    Ok(recs)
}

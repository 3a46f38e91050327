//! `remora perf --fabric sim` and `remora check --fabric sim`: the verb microbenchmark and
//! the fabric conformance suite on the deterministic simulated cluster.
//!
//! Each (verb, size) point runs `--compute-nodes x --clients-per-node` client threads with
//! `--coroutines` coroutines each for `--seconds` of *virtual* time (after a warm-up of a
//! tenth of that, at most 1 ms); the record's notes give the seed, the model, the model's
//! own analytic figures for the point (round trip, throughput bound, server CPU per op) next
//! to the measured ones, and the simulator's speed. `server_ns_per_op` is the memory nodes'
//! handler-thread busy time over the window divided by the ops (SEND and WRITE_WITH_IMM are
//! answered by the echo service; one-sided verbs cost the server nothing).
use crate::args::{PerfArgs, PerfVerb, SimArgs};
use crate::report::{Latency, PerOp, PerfRecord};
use hdrhistogram::Histogram;
use remora::core::conformance;
use remora::poller::sim::harness::SimHarness;
use remora::poller::sim::perf::{PerfPoint, run_point};
use remora::poller::sim::profiles::profile;
use remora::poller::sim::{Model, ModelVerb, SimConfig, TraceSel};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The model: defaults, then `--profile NAME`, then `--model FILE`, then each
/// `--set name=value`.
pub fn model_from(s: &SimArgs) -> Result<Model, String> {
    let mut m = Model::default();
    profile(&s.profile)?
        .apply(&mut m)
        .map_err(|e| format!("--profile {}: {e}", s.profile))?;
    if let Some(p) = &s.model {
        let text = std::fs::read_to_string(p)
            .map_err(|e| format!("reading model file {}: {e}", p.display()))?;
        m.apply_file_text(&text)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    for o in &s.overrides {
        m.set_pair(o).map_err(|e| format!("--set {o}: {e}"))?;
    }
    Ok(m)
}

/// `--show-model`: the profile's table and the resulting model file (every parameter with
/// its value and source), printed to stdout.
pub fn show_model(s: &SimArgs) -> Result<(), String> {
    let m = model_from(s)?;
    println!("{}", profile(&s.profile)?.table());
    println!(
        "# the model (profile, then --model, then --set):\n{}",
        m.describe()
    );
    Ok(())
}

/// The note naming the run's hardware profile.
pub fn profile_note(s: &SimArgs) -> String {
    format!(
        "hardware profile: {} (--profile; --show-model lists its sources)",
        s.profile
    )
}

fn model_verb(v: PerfVerb) -> ModelVerb {
    match v {
        PerfVerb::Read => ModelVerb::Read,
        PerfVerb::Write => ModelVerb::Write,
        PerfVerb::WriteImm => ModelVerb::WriteImm,
        PerfVerb::Cas => ModelVerb::Cas,
        PerfVerb::Faa => ModelVerb::Faa,
        PerfVerb::Send => ModelVerb::Send,
    }
}

fn check_shape(a: &PerfArgs) -> Result<(), String> {
    let s = &a.sim;
    if s.compute_nodes == 0 || s.clients_per_node == 0 || s.memory_nodes == 0 || a.coroutines == 0 {
        return Err(
            "--compute-nodes, --clients-per-node, --memory-nodes and --coroutines must \
                    be at least 1"
                .into(),
        );
    }
    if s.compute_nodes > 4096 || s.memory_nodes > 4096 {
        return Err("at most 4096 compute nodes and 4096 memory nodes".into());
    }
    let co = s.compute_nodes as u64 * s.clients_per_node as u64 * a.coroutines as u64;
    if co > 4_000_000 {
        return Err(format!(
            "{co} coroutines in total is more than the simulator supports (4M)"
        ));
    }
    if !(a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 3600.0) {
        return Err(format!(
            "--seconds must be in (0, 3600] virtual seconds, got {}",
            a.seconds
        ));
    }
    if a.region_mib == 0 || a.region_mib > (1 << 20) {
        return Err(format!(
            "--region-mib must be 1..=1048576, got {}",
            a.region_mib
        ));
    }
    Ok(())
}

pub fn run(a: &PerfArgs) -> Result<Vec<PerfRecord>, String> {
    check_shape(a)?;
    let model = model_from(&a.sim)?;
    let s = &a.sim;
    let measure_ns = ((a.seconds * 1e9) as u64).max(1000);
    let warmup_ns = (measure_ns / 10).clamp(1000, 1_000_000);
    let region_len = a.region_mib << 20;
    let chunk_size = (region_len / 4)
        .clamp(64, 1 << 20)
        .next_power_of_two()
        .min(1 << 20);
    let mut points: Vec<(PerfVerb, usize)> = Vec::new();
    for &v in &a.verbs {
        if v.is_atomic() {
            if !points.contains(&(v, 8)) {
                points.push((v, 8));
            }
        } else {
            for &size in &a.sizes {
                points.push((v, size));
            }
        }
    }
    let threads = s.compute_nodes * s.clients_per_node;
    let mut rows = Vec::new();
    for (verb, size) in points {
        let cfg = SimConfig {
            compute_nodes: s.compute_nodes,
            memory_nodes: s.memory_nodes,
            region_len,
            dm_len: 256 << 10,
            chunk_size,
            persistent: s.persistent,
            model: model.clone(),
            seed: s.seed,
            faults: Default::default(),
            trace: s.trace.map(|n| TraceSel {
                first: n,
                count: 1,
                stderr: true,
            }),
            segment_order: Default::default(),
        };
        let p = PerfPoint {
            verb: model_verb(verb),
            size,
            clients_per_node: s.clients_per_node,
            coroutines: a.coroutines,
            hot: a.hot,
            warmup_ns,
            measure_ns,
        };
        let mut hist = Histogram::<u64>::new_with_bounds(1, 1 << 42, 3)
            .map_err(|e| format!("latency histogram: {e}"))?;
        let r = run_point(cfg, &p, &mut |ns| {
            let _ = hist.record(ns.clamp(1, 1 << 42));
        })
        .map_err(|e| format!("{} {size} B (seed {}): {e}", verb.name(), s.seed))?;
        if r.errors > 0 {
            return Err(format!(
                "{} {size} B: {} ops failed in a fault-free run (seed {}): a simulator bug",
                verb.name(),
                r.errors,
                s.seed
            ));
        }
        let mops = r.mops();
        // Little's law: with every coroutine busy, latency = outstanding / throughput.
        let outstanding = (threads * a.coroutines) as f64;
        let loaded = r
            .expected_latency_ns
            .max(outstanding / r.expected_mops * 1e3);
        let size_moved = if verb.is_atomic() { 8 } else { size };
        let notes = vec![
            format!("seed {} (same seed, same figures)", r.seed),
            format!(
                "{} compute x {} clients x {} coroutines, {} memory node(s)",
                s.compute_nodes, s.clients_per_node, a.coroutines, s.memory_nodes
            ),
            model.summary(),
            profile_note(s),
            format!(
                "analytic: idle round trip {:.1} ns, throughput bound {:.3} Mops{}",
                r.expected_latency_ns,
                r.expected_mops,
                if a.hot { " (hot word)" } else { "" }
            ),
            format!(
                "measured vs analytic: {:.3} Mops ({:+.2}%), mean latency {:.1} ns vs \
                 max(idle round trip, outstanding / bound) = {:.1} ns ({:+.2}%)",
                mops,
                pct(mops, r.expected_mops),
                r.mean_latency_ns,
                loaded,
                pct(r.mean_latency_ns, loaded)
            ),
            format!(
                "server CPU: {:.1} ns/op vs model {:.1} ns/op ({}), handler threads {:.1}% busy \
                 ({} x {} thread(s))",
                r.server_ns_per_op(),
                r.expected_server_ns_per_op,
                if r.expected_server_ns_per_op > 0.0 {
                    format!(
                        "{:+.2}%",
                        pct(r.server_ns_per_op(), r.expected_server_ns_per_op)
                    )
                } else {
                    "one-sided: no server CPU".into()
                },
                r.server_utilization() * 100.0,
                r.memory_nodes,
                r.server_threads
            ),
            format!(
                "simulator: {} verbs, {} events, {} RNR NAKs",
                r.stats.verbs, r.stats.events, r.stats.rnr_naks
            ),
        ];
        // Wall-clock figures stay out of the record so that one seed gives identical JSON.
        if !a.quiet {
            eprintln!(
                "sim {} {size} B: {:.3} Mops, mean {:.0} ns; {} verbs in {:.3} s wall = {:.2} M \
                 simulated verbs per wall second",
                verb.name(),
                mops,
                r.mean_latency_ns,
                r.stats.verbs,
                r.wall_seconds,
                r.sim_verbs_per_wall_second() / 1e6
            );
        }
        rows.push(PerfRecord {
            tool: "perf",
            fabric: "sim".into(),
            verb: verb.name().into(),
            size: size_moved,
            threads,
            coroutines: a.coroutines,
            ops: r.ops,
            seconds: r.seconds,
            mops,
            mops_per_thread: mops / threads as f64,
            gbps: r.ops as f64 * size_moved as f64 / r.seconds / 1e9,
            latency: Latency::from_hist(&hist),
            per_op: PerOp::new(&r.counters, r.ops),
            server_ns_per_op: Some(r.server_ns_per_op()),
            notes,
        });
    }
    Ok(rows)
}

fn pct(measured: f64, expected: f64) -> f64 {
    if expected == 0.0 {
        0.0
    } else {
        (measured / expected - 1.0) * 100.0
    }
}

type Check = fn(&SimHarness);

const CHECKS: [(&str, Check); 14] = [
    (
        "read_write_round_trip",
        conformance::read_write_round_trip::<SimHarness>,
    ),
    (
        "batch_takes_effect_in_order",
        conformance::batch_takes_effect_in_order::<SimHarness>,
    ),
    (
        "order_is_visible_to_other_clients",
        conformance::order_is_visible_to_other_clients::<SimHarness>,
    ),
    (
        "torn_reads_are_observable",
        conformance::torn_reads_are_observable::<SimHarness>,
    ),
    (
        "faa_is_linearizable",
        conformance::faa_is_linearizable::<SimHarness>,
    ),
    (
        "cas_is_linearizable",
        conformance::cas_is_linearizable::<SimHarness>,
    ),
    (
        "misaligned_atomic_is_refused",
        conformance::misaligned_atomic_is_refused::<SimHarness>,
    ),
    (
        "out_of_range_fails_without_touching_memory",
        conformance::out_of_range_fails_without_touching_memory::<SimHarness>,
    ),
    (
        "unknown_node_is_an_error",
        conformance::unknown_node_is_an_error::<SimHarness>,
    ),
    (
        "write_imm_delivers_its_immediate",
        conformance::write_imm_delivers_its_immediate::<SimHarness>,
    ),
    (
        "send_recv_round_trip",
        conformance::send_recv_round_trip::<SimHarness>,
    ),
    ("device_memory", conformance::device_memory::<SimHarness>),
    (
        "counters_count_what_was_done",
        conformance::counters_count_what_was_done::<SimHarness>,
    ),
    (
        "revoked_key_is_refused",
        conformance::revoked_key_is_refused::<SimHarness>,
    ),
];

/// Runs every conformance check on a fresh simulated memory node and prints pass/fail.
pub fn check(a: &PerfArgs) -> Result<(), String> {
    let model = model_from(&a.sim)?;
    let seed = a.sim.seed;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failed = 0;
    for (name, f) in CHECKS {
        let h = SimHarness::standard(seed, model.clone())?;
        match catch_unwind(AssertUnwindSafe(|| f(&h))) {
            Ok(()) => println!("PASS {name}"),
            Err(p) => {
                failed += 1;
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".into());
                println!("FAIL {name}: {msg} (seed {seed})");
            }
        }
    }
    std::panic::set_hook(hook);
    println!(
        "sim fabric, {}, seed {seed}: {} of {} checks passed",
        model.summary(),
        CHECKS.len() - failed,
        CHECKS.len()
    );
    if failed == 0 {
        Ok(())
    } else {
        Err(format!(
            "{failed} conformance check(s) failed on the sim fabric (replay with --seed {seed})"
        ))
    }
}

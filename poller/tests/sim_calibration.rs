//! Calibration: with the default model, the simulator reproduces the model's own analytic
//! figures. Every expectation is computed from the model's parameters, never hard-coded.
use remora_poller::sim::perf::{PerfPoint, PerfResult, run_point};
use remora_poller::sim::{Model, ModelVerb, SimConfig};

fn point(verb: ModelVerb, size: usize, clients: usize, co: usize, hot: bool) -> PerfPoint {
    PerfPoint {
        verb,
        size,
        clients_per_node: clients,
        coroutines: co,
        hot,
        warmup_ns: 20_000,
        measure_ns: 100_000,
    }
}

fn run(cn: usize, p: &PerfPoint) -> PerfResult {
    let cfg = SimConfig {
        compute_nodes: cn,
        seed: 3,
        ..SimConfig::default()
    };
    let r = run_point(cfg, p, &mut |_| {}).expect("perf point");
    assert_eq!(r.errors, 0, "errors in a healthy run (seed {})", r.seed);
    r
}

fn within(measured: f64, expected: f64, tol: f64, what: &str) {
    let err = (measured - expected).abs() / expected;
    assert!(
        err <= tol,
        "{what}: measured {measured:.4}, model says {expected:.4} ({:.2}% off, tolerance {:.1}%)",
        err * 100.0,
        tol * 100.0
    );
}

#[test]
fn small_read_latency_is_the_configured_round_trip() {
    let m = Model::default();
    let r = run(1, &point(ModelVerb::Read, 64, 1, 1, false));
    let rtt = m.idle_latency_ps(ModelVerb::Read, 64, false) as f64 / 1000.0;
    // Jitter is symmetric: the mean round trip is the analytic one.
    within(r.mean_latency_ns, rtt, 0.01, "64 B READ mean latency (ns)");
    within(r.expected_latency_ns, rtt, 1e-9, "perf's expectation");
    assert!(r.ops > 10, "{r:?}");
    // One READ per op, one doorbell, one round trip.
    let c = r.counters;
    assert_eq!(c.doorbells, c.round_trips);
    assert_eq!(c.bytes_in, 64 * c.doorbells);
}

#[test]
fn small_read_latency_without_jitter_is_exact() {
    let mut m = Model::default();
    m.set("jitter_ns", "0").unwrap();
    let cfg = SimConfig {
        model: m.clone(),
        ..SimConfig::default()
    };
    let p = point(ModelVerb::Read, 64, 1, 1, false);
    let r = run_point(cfg, &p, &mut |_| {}).unwrap();
    let rtt = m.idle_latency_ps(ModelVerb::Read, 64, false) as f64 / 1000.0;
    within(
        r.mean_latency_ns,
        rtt,
        1e-6,
        "64 B READ latency without jitter (ns)",
    );
    for (v, s) in [
        (ModelVerb::Write, 64),
        (ModelVerb::Faa, 8),
        (ModelVerb::Read, 4096),
    ] {
        let cfg = SimConfig {
            model: m.clone(),
            ..SimConfig::default()
        };
        let r = run_point(cfg, &point(v, s, 1, 1, false), &mut |_| {}).unwrap();
        let want = m.idle_latency_ps(v, s as u64, false) as f64 / 1000.0;
        within(
            r.mean_latency_ns,
            want,
            1e-6,
            &format!("{v:?} {s} B latency"),
        );
    }
}

#[test]
fn many_clients_saturate_at_the_message_rate() {
    let m = Model::default();
    let (cn, clients, co) = (4, 8, 16);
    let r = run(cn, &point(ModelVerb::Read, 64, clients, co, false));
    let rate = m.nic_mops;
    // The bound the model computes is the NIC rate here (the links and CPUs are faster).
    within(
        r.expected_mops,
        rate,
        1e-4,
        "model bound (rounded to whole ps)",
    );
    within(r.mops(), rate, 0.05, "64 B READ throughput (Mops)");
}

#[test]
fn large_reads_saturate_the_link() {
    let m = Model::default();
    let size = 64 << 10;
    let r = run(1, &point(ModelVerb::Read, size, 4, 8, false));
    let link_bytes_per_s = m.link_gbps * 1e9 / 8.0;
    let goodput = link_bytes_per_s * size as f64 / m.msg_bytes(size as u64) as f64;
    let measured = r.ops as f64 * size as f64 / r.seconds;
    within(measured, goodput, 0.05, "64 KiB READ goodput (B/s)");
    within(
        measured,
        link_bytes_per_s,
        0.05,
        "64 KiB READ vs raw link bandwidth (B/s)",
    );
}

#[test]
fn hot_cas_saturates_at_the_atomic_rate() {
    let m = Model::default();
    let (cn, clients, co) = (2, 4, 8);
    let r = run(cn, &point(ModelVerb::Cas, 8, clients, co, true));
    let rate = 1e3 / m.host_atomic_ns; // Mops
    within(
        r.expected_mops,
        rate,
        1e-4,
        "model bound (rounded to whole ps)",
    );
    within(r.mops(), rate, 0.05, "hot CAS throughput (Mops)");
}

#[test]
fn device_memory_is_faster_for_hot_atomics() {
    // Not a calibration of its own: the dm path must not be slower than host atomics.
    let m = Model::default();
    assert!(
        m.idle_latency_ps(ModelVerb::Cas, 8, true) < m.idle_latency_ps(ModelVerb::Cas, 8, false)
    );
}

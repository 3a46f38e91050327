//! `server_wake_ns`: a blocking handler thread (one waiting in ibv_get_cq_event, as the Erda
//! authors' servers do) makes a message that finds it asleep wait for its wake (no CPU
//! counted), and one already queued when it finishes the previous wait for nothing. Expectations come from the
//! model's own figures, never hard-coded.
use remora_poller::sim::perf::{PerfPoint, PerfResult, run_point};
use remora_poller::sim::{Model, ModelVerb, SimConfig};

const WAKE_NS: f64 = 3000.0;

fn point(clients: usize, co: usize) -> PerfPoint {
    PerfPoint {
        verb: ModelVerb::Send,
        size: 64,
        clients_per_node: clients,
        coroutines: co,
        hot: false,
        warmup_ns: 20_000,
        measure_ns: 200_000,
    }
}

fn model(wake_ns: f64) -> Model {
    let mut m = Model::default();
    m.set("jitter_ns", "0").unwrap();
    m.set("server_wake_ns", &wake_ns.to_string()).unwrap();
    m
}

fn run(m: &Model, cn: usize, p: &PerfPoint) -> PerfResult {
    let cfg = SimConfig {
        compute_nodes: cn,
        model: m.clone(),
        seed: 3,
        ..SimConfig::default()
    };
    let r = run_point(cfg, p, &mut |_| {}).expect("perf point");
    assert_eq!(r.errors, 0, "errors in a healthy run");
    r
}

fn within(measured: f64, expected: f64, tol: f64, what: &str) {
    let err = (measured - expected).abs() / expected;
    assert!(
        err <= tol,
        "{what}: measured {measured:.3}, expected {expected:.3} ({:.2}% off)",
        err * 100.0
    );
}

#[test]
fn a_lone_request_wakes_the_thread() {
    // One synchronous client: every SEND finds the handler thread asleep.
    let m = model(WAKE_NS);
    let r = run(&m, 1, &point(1, 1));
    let echo = m.echo_latency_ps(ModelVerb::Send, 64) as f64 / 1000.0;
    within(
        r.mean_latency_ns,
        echo + WAKE_NS,
        1e-6,
        "echo latency + wake",
    );
    within(
        r.server_ns_per_op(),
        m.service_ps(1) as f64 / 1000.0,
        0.01,
        "server CPU per op: one service, the wake is idle time",
    );
    // The default (0) is the busy-polling server, unchanged.
    let r0 = run(&model(0.0), 1, &point(1, 1));
    within(r0.mean_latency_ns, echo, 1e-6, "echo latency without wake");
}

#[test]
fn a_loaded_thread_does_not_sleep() {
    // 4 x 4 x 4 messages in flight keep the one thread's queue non-empty: the wake is paid
    // about once, and throughput stays the service bound.
    let m = model(WAKE_NS);
    let r = run(&m, 4, &point(4, 4));
    let bound = 1e6 / m.service_ps(1) as f64;
    within(r.mops(), bound, 0.05, "server-bound Mops with wakes");
    within(
        r.server_ns_per_op(),
        m.service_ps(1) as f64 / 1000.0,
        0.05,
        "server CPU per op at saturation",
    );
}

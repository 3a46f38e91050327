//! `server_wake_ns`: a blocking handler thread (one waiting in ibv_get_cq_event, as the Erda
//! authors' servers do) makes a message that finds it asleep wait for its wake (no CPU
//! counted), and one already queued when it finishes the previous wait for nothing.
//! `server_wake_cpu_ns`: each wake costs the thread CPU, counted in the node's: an idle
//! server wakes twice per request (the request, its reply's send completion), a loaded one
//! never. Expectations come from the model's own figures, never hard-coded.
use remora_core::fabric::QueuePair;
use remora_poller::sim::perf::{PerfPoint, PerfResult, run_point};
use remora_poller::sim::{Model, ModelVerb, Sim, SimConfig};
use std::cell::Cell;

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

const WAKE_CPU_NS: f64 = 2000.0;

fn model_cpu(wake_ns: f64, cpu_ns: f64) -> Model {
    let mut m = model(wake_ns);
    m.set("server_wake_cpu_ns", &cpu_ns.to_string()).unwrap();
    m
}

/// One client sends `n` echo requests, each after `think_ns` of sleep (so that the server
/// has blocked again, replies' completions included, before the next); the server's CPU
/// time per request, in ns.
fn paced_server_ns_per_request(m: &Model, n: u64, think_ns: u64) -> f64 {
    let cfg = SimConfig {
        model: m.clone(),
        seed: 5,
        ..SimConfig::default()
    };
    let done = Cell::new(0u64);
    let done_ref = &done;
    let mut sim = Sim::new(cfg).expect("sim");
    let ctx = sim.client(0).expect("client");
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let qp = ctx.qp(0).expect("qp");
        let mut msg = vec![0u8; qp.max_message()];
        for _ in 0..n {
            ctx.sleep(think_ns).await;
            qp.send(&[7u8; 64]).await.expect("send");
            qp.recv(&mut msg).await.expect("recv");
            done_ref.set(done_ref.get() + 1);
        }
    });
    sim.run();
    assert_eq!(done.get(), n, "every request answered");
    let busy = sim.server_busy_total_ns();
    drop(ctx);
    drop(sim);
    busy as f64 / n as f64
}

#[test]
fn an_idle_server_pays_two_wakes_of_cpu_per_request() {
    // 20 µs between requests: the thread has blocked for the request and blocks again
    // before its reply's completion comes back, so each request wakes it twice.
    let m = model_cpu(WAKE_NS, WAKE_CPU_NS);
    let service = m.service_ps(1) as f64 / 1000.0;
    within(
        paced_server_ns_per_request(&m, 200, 20_000),
        service + 2.0 * WAKE_CPU_NS,
        0.01,
        "server CPU per idle request: its service and two wakes",
    );
    // Without the parameter a wake costs nothing, whatever its latency.
    within(
        paced_server_ns_per_request(&model(WAKE_NS), 200, 20_000),
        service,
        0.01,
        "server CPU per idle request without wake CPU",
    );
}

#[test]
fn a_loaded_server_pays_no_wake_cpu() {
    // 4 x 4 x 4 messages in flight: the thread always finds the next message (and its
    // replies' completions) waiting, so it never blocks after the first.
    let m = model_cpu(WAKE_NS, WAKE_CPU_NS);
    let r = run(&m, 4, &point(4, 4));
    let service = m.service_ps(1) as f64 / 1000.0;
    within(
        r.server_ns_per_op(),
        service,
        0.05,
        "server CPU per op at saturation with wake CPU",
    );
    within(
        r.mops(),
        1e6 / m.service_ps(1) as f64,
        0.05,
        "server-bound Mops with wake CPU",
    );
}

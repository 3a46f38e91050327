//! Calibration: with the default model, the simulator reproduces the model's own analytic
//! figures. Every expectation is computed from the model's parameters, never hard-coded.
use remora_core::fabric::{FabricError, QueuePair, Recv};
use remora_core::server::{CpuClock, Echo, Handler, LocalRegion, Replies};
use remora_poller::sim::perf::{PerfPoint, PerfResult, run_point};
use remora_poller::sim::{Model, ModelVerb, Sim, SimConfig};
use std::cell::RefCell;
use std::rc::Rc;

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

// ---- two-sided verbs: the memory node's handler threads (see poller/src/sim/server.rs) ----

fn model_with(pairs: &[(&str, &str)]) -> Model {
    let mut m = Model::default();
    for (k, v) in pairs {
        m.set(k, v).unwrap();
    }
    m
}

fn run_model(m: &Model, cn: usize, p: &PerfPoint) -> PerfResult {
    let cfg = SimConfig {
        compute_nodes: cn,
        model: m.clone(),
        seed: 3,
        ..SimConfig::default()
    };
    let r = run_point(cfg, p, &mut |_| {}).expect("perf point");
    assert_eq!(r.errors, 0, "errors in a healthy run (seed {})", r.seed);
    r
}

/// One line of the calibration table (`cargo test ... -- --nocapture` prints it).
fn row(what: &str, threads: &str, model: f64, measured: f64, unit: &str) {
    println!(
        "calibration | {what:<40} | server_threads {threads:>2} | model {model:>10.3} {unit:<4} | \
         measured {measured:>10.3} {unit:<4} | {:+.2}%",
        (measured / model - 1.0) * 100.0
    );
}

#[test]
fn echo_latency_is_the_model_round_trip() {
    for threads in ["1", "4"] {
        for v in [ModelVerb::Send, ModelVerb::WriteImm] {
            let m = model_with(&[("server_threads", threads)]);
            let r = run_model(&m, 1, &point(v, 64, 1, 1, false));
            // post, request, receive completion, poll + handler + one reply post, reply.
            let want = m.echo_latency_ps(v, 64) as f64 / 1000.0;
            row(
                &format!("{v:?} 64 B echo latency, 1 client x 1"),
                threads,
                want,
                r.mean_latency_ns,
                "ns",
            );
            within(
                r.mean_latency_ns,
                want,
                0.05,
                &format!("{v:?} echo latency"),
            );
            within(r.expected_latency_ns, want, 1e-9, "perf's expectation");
            // The server CPU cost per op is exactly one service with one reply.
            let cpu = m.service_ps(1) as f64 / 1000.0;
            within(r.server_ns_per_op(), cpu, 0.05, "server CPU ns per op");
            within(
                r.expected_server_ns_per_op,
                cpu,
                1e-9,
                "perf's CPU expectation",
            );
        }
    }
}

#[test]
fn echo_latency_without_jitter_is_exact() {
    let m = model_with(&[("jitter_ns", "0")]);
    for (v, size) in [
        (ModelVerb::Send, 64),
        (ModelVerb::Send, 1000),
        (ModelVerb::WriteImm, 256),
    ] {
        let r = run_model(&m, 1, &point(v, size, 1, 1, false));
        let want = m.echo_latency_ps(v, size as u64) as f64 / 1000.0;
        within(
            r.mean_latency_ns,
            want,
            1e-6,
            &format!("{v:?} {size} B echo latency"),
        );
    }
}

#[test]
fn many_clients_saturate_the_server_threads() {
    // 4 compute nodes x 4 clients x 4 coroutines: 16 connections, round-robin over the
    // threads, 64 messages in flight (Little's law allows ~29 Mops): the CPU is the bound.
    for threads in [1u32, 4] {
        let t = threads.to_string();
        let m = model_with(&[("server_threads", &t)]);
        for v in [ModelVerb::Send, ModelVerb::WriteImm] {
            let r = run_model(&m, 4, &point(v, 64, 4, 4, false));
            let want = threads as f64 * 1e6 / m.service_ps(1) as f64; // Mops
            within(r.expected_mops, want, 1e-9, "model bound is the server's");
            row(
                &format!("{v:?} 64 B throughput, 16 clients x 4"),
                &t,
                want,
                r.mops(),
                "Mops",
            );
            within(r.mops(), want, 0.05, &format!("{v:?} server-bound Mops"));
            assert!(
                r.server_utilization() > 0.95 && r.server_utilization() <= 1.0 + 1e-9,
                "handler threads should be saturated, not over-booked: {:.4}",
                r.server_utilization()
            );
            within(
                r.server_ns_per_op(),
                m.service_ps(1) as f64 / 1000.0,
                0.05,
                "server CPU ns per op at saturation",
            );
        }
    }
}

#[test]
fn one_client_is_limited_only_by_the_model() {
    // The echo service's one thread is the bound for one client with many coroutines...
    let m = Model::default();
    let r = run_model(&m, 1, &point(ModelVerb::Send, 64, 1, 16, false));
    let want = 1e6 / m.service_ps(1) as f64;
    within(r.expected_mops, want, 1e-9, "model bound");
    row(
        "Send 64 B throughput, 1 client x 16",
        "1",
        want,
        r.mops(),
        "Mops",
    );
    within(r.mops(), want, 0.05, "one client, 16 coroutines, 1 thread");
    // ...and with a client thread slower than the server, the client's CPU is.
    let m = model_with(&[("client_post_ns", "1000"), ("server_threads", "4")]);
    let r = run_model(&m, 1, &point(ModelVerb::Send, 64, 1, 32, false));
    let want = 1e6 / m.post_ps() as f64;
    within(r.expected_mops, want, 1e-9, "model bound is the client's");
    row(
        "Send 64 B client-bound, 1 client x 32",
        "4",
        want,
        r.mops(),
        "Mops",
    );
    within(r.mops(), want, 0.05, "client-bound Mops");
    assert!(r.server_utilization() < 0.75, "{}", r.server_utilization());
}

#[test]
fn a_client_outrunning_the_server_meets_rnr_and_loses_nothing() {
    // Four receives per queue pair, a slow handler, sixteen coroutines on one connection:
    // SENDs find no receive, get RNR NAKs and retry until the server reposts one.
    let m = model_with(&[("recv_depth", "4"), ("server_handler_ns", "2000")]);
    for v in [ModelVerb::Send, ModelVerb::WriteImm] {
        let r = run_model(&m, 1, &point(v, 64, 1, 16, false));
        assert!(r.stats.rnr_naks > 0, "{v:?}: no RNR NAK with 4 receives");
        assert!(r.ops > 10, "{v:?}: {r:?}");
    }
    // With the default 64 receives the same load never runs out of them.
    let m = model_with(&[("server_handler_ns", "2000")]);
    let r = run_model(&m, 1, &point(ModelVerb::Send, 64, 1, 16, false));
    assert_eq!(r.stats.rnr_naks, 0);
}

/// The echo service, noting the node's CPU clock at every message.
struct Metered(Rc<RefCell<Vec<CpuClock>>>);

impl Handler for Metered {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        if let Some(c) = region.cpu_clock() {
            self.0.borrow_mut().push(c);
        }
        Echo.on_message(region, conn, recv, msg, replies)
    }
}

#[test]
fn handlers_read_real_idle_time() {
    // One client, one coroutine, back-to-back echoes: the thread is busy one service per
    // round trip, idle otherwise; the handler sees exactly that through `cpu_clock`.
    let m = model_with(&[("jitter_ns", "0"), ("server_threads", "2")]);
    let clocks = Rc::new(RefCell::new(Vec::new()));
    let mut sim = Sim::new(SimConfig {
        model: m.clone(),
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(Metered(clocks.clone())))
        .unwrap();
    let c = sim.client(0).unwrap();
    sim.spawn_with(&c, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..100 {
            qp.send(&[7u8; 64]).await.unwrap();
            qp.recv(&mut buf).await.unwrap();
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    let busy = sim.server_busy_ns(0).unwrap();
    drop(sim);
    let clocks = clocks.borrow();
    assert_eq!(clocks.len(), 100);
    assert!(clocks.iter().all(|c| c.threads == 2));
    let service_ns = m.service_ps(1) / 1000;
    assert_eq!(busy, 100 * service_ns, "every message costs one service");
    let (first, last) = (clocks[0], clocks[99]);
    assert_eq!(last.busy_ns - first.busy_ns, 99 * service_ns);
    // Busy one service per echo round trip, on one of the two threads.
    let rtt = m.echo_latency_ps(ModelVerb::Send, 64) as f64 / 1000.0;
    let want = 1000.0 * service_ns as f64 / rtt / 2.0;
    let got = last.load_permille_since(&first).unwrap() as f64;
    assert!(
        (got - want).abs() <= 2.0,
        "load {got} per mille, model {want:.1}"
    );
}

#[test]
fn large_send_echoes_saturate_both_link_directions() {
    // 4 KiB SENDs echoed back: each link direction carries a request (or reply) and the
    // other side's ack per op; four handler threads keep the CPU out of the way. Links are
    // reserved in the order data reaches them, so jitter costs no bandwidth.
    let m = model_with(&[("server_threads", "4")]);
    let size = 4096u64;
    let r = run_model(&m, 1, &point(ModelVerb::Send, size as usize, 4, 8, false));
    let per_op = m.wire_ps(m.msg_bytes(size)) + m.wire_ps(m.msg_bytes(0));
    let want = 1e6 / per_op as f64;
    within(r.expected_mops, want, 1e-9, "model bound is the link's");
    row(
        "Send 4096 B link-bound, 4 clients x 8",
        "4",
        want,
        r.mops(),
        "Mops",
    );
    within(r.mops(), want, 0.05, "4 KiB SEND echo Mops");
}

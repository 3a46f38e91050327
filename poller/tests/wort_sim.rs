//! WORT and WOART behind their request rings on the simulated cluster: linearizable under 16
//! racing clients (`remora_core::lincheck`), linearizable across a memory-node crash and
//! restart (`Handler::recover` on the sim's persistent region, where only what the server
//! persisted survives), and malformed requests answered with an error without harming other
//! clients.
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair};
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_core::wort::layout::{HELLO, REPLY_MAX, SLOT_LEN, Status, decode_reply, imm};
use remora_core::wort::{Kind, Wort, WortClientConfig, WortError, WortServer};
use remora_poller::sim::{ClientCtx, Faults, Sim, SimConfig, SimEndpoint};
use std::cell::RefCell;

const CLIENTS: u32 = 16;
const OPS: u64 = 200;

fn open<'e>(
    ep: &'e SimEndpoint,
) -> impl std::future::Future<Output = Result<Wort<'e, SimEndpoint>, WortError>> {
    Wort::open(
        ep,
        WortClientConfig {
            deadline_ns: 5_000_000,
            ..WortClientConfig::default()
        },
    )
}

fn linearizable(kind: Kind, seed: u64) {
    let rec = Recorder::new(
        (CLIENTS as u64 * OPS) as usize,
        (CLIENTS as u64 * OPS * 17) as usize,
    );
    let errors = RefCell::new(Vec::<String>::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        persistent: true,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(WortServer::new(kind))).unwrap();
    for c in 0..CLIENTS {
        let ctx = sim.client(c as usize % 4).unwrap();
        let (rec, errors) = (&rec, &errors);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let t = match open(ctx.ep()).await {
                Ok(t) => t,
                Err(e) => return errors.borrow_mut().push(format!("client {c}: open: {e}")),
            };
            let spec = LinSpec {
                cold: 32,
                ..LinSpec::new(1 + c, OPS, seed, true)
            };
            let clock = || ctx.now_ns();
            if let Err(e) = lin_client(&t, &spec, rec, &clock).await {
                errors.borrow_mut().push(format!("client {c}: {e}"));
            }
        });
    }
    let r = sim.run();
    assert!(
        errors.borrow().is_empty(),
        "{kind:?} seed {seed}: {:?}",
        errors.borrow()
    );
    assert_eq!(r.unfinished, 0, "{kind:?} seed {seed}");
    drop(sim);
    let h = rec.finish().expect("recorder sized for the run");
    assert_eq!(h.events.len() as u64, CLIENTS as u64 * OPS);
    let report = check(&h, &CheckConfig::new(seed));
    println!("{kind:?} seed {seed}: {report}");
    assert!(report.is_ok(), "{kind:?} seed {seed}: {report}");
    assert!(report.scans > 20 && report.keys > 100, "{report}");
}

#[test]
fn wort_is_linearizable_on_the_sim() {
    for seed in 1..=2 {
        linearizable(Kind::Wort, seed);
    }
}

#[test]
fn woart_is_linearizable_on_the_sim() {
    for seed in 1..=2 {
        linearizable(Kind::Woart, seed);
    }
}

const CRASH_NS: u64 = 1_500_000;
const RESTART_NS: u64 = 2_500_000;

/// 8 clients run until the memory node crashes (their last operations stay unknown),
/// reconnect after the restart and go on; the history of both lives is linearizable, so no
/// acknowledged write was lost and nothing unacknowledged came back half-done.
fn across_restart(kind: Kind, seed: u64) {
    let rec = Recorder::new(100_000, 100_000 * 17);
    let errors = RefCell::new(Vec::<String>::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        persistent: true,
        seed,
        faults: Faults::none()
            .crash_node_at(0, CRASH_NS)
            .restart_node_at(0, RESTART_NS),
        ..SimConfig::default()
    })
    .unwrap();
    // A new server at the restart, as a restarted process: only the region survives.
    sim.set_handler_with(0, move || Box::new(WortServer::new(kind)))
        .unwrap();
    for c in 0..8u32 {
        let ctx = sim.client(c as usize % 2).unwrap();
        let (rec, errors) = (&rec, &errors);
        sim.spawn_with(&ctx, 0, move |ctx: ClientCtx| async move {
            let clock = || ctx.now_ns();
            if let Ok(t) = open(ctx.ep()).await {
                let spec = LinSpec {
                    cold: 16,
                    ..LinSpec::new(1 + c, 1_000_000, seed, true)
                };
                // Runs until the crash makes an operation fail.
                let _ = lin_client(&t, &spec, rec, &clock).await;
            }
            if ctx.now_ns() < RESTART_NS {
                ctx.sleep(RESTART_NS - ctx.now_ns()).await;
            }
            let fresh = ctx.reconnect();
            let t = match open(fresh.ep()).await {
                Ok(t) => t,
                Err(e) => return errors.borrow_mut().push(format!("client {c}: reopen: {e}")),
            };
            let spec = LinSpec {
                cold: 16,
                ..LinSpec::new(9 + c, 150, seed ^ 0xA5, true)
            };
            if let Err(e) = lin_client(&t, &spec, rec, &clock).await {
                errors
                    .borrow_mut()
                    .push(format!("client {c} after the restart: {e}"));
            }
        });
    }
    let r = sim.run();
    assert!(
        errors.borrow().is_empty(),
        "{kind:?} seed {seed}: {:?}",
        errors.borrow()
    );
    assert_eq!(r.unfinished, 0, "{kind:?} seed {seed}: {r:?}");
    let reports = sim.recovery_reports();
    assert_eq!(reports.len(), 1);
    let report = reports[0].report.clone().unwrap();
    println!("{kind:?} seed {seed}: recovery: {report}");
    assert!(report.contains("keys"), "{report}");
    drop(sim);
    let h = rec.finish().expect("recorder sized for the run");
    let before = h.events.iter().filter(|e| e.client <= 8).count();
    assert!(
        before > 100,
        "{kind:?} seed {seed}: only {before} operations before the crash"
    );
    let lin = check(&h, &CheckConfig::new(seed));
    println!("{kind:?} seed {seed}: {lin}");
    assert!(lin.is_ok(), "{kind:?} seed {seed}: {lin}");
}

#[test]
fn wort_history_across_a_restart_is_linearizable() {
    for seed in 1..=2 {
        across_restart(Kind::Wort, seed);
    }
}

#[test]
fn woart_history_across_a_restart_is_linearizable() {
    for seed in 1..=2 {
        across_restart(Kind::Woart, seed);
    }
}

/// A request that does not decode is answered `BadRequest`; one naming another client's
/// ring drops only the sender's connection; the other client keeps being served.
#[test]
fn malformed_requests_are_refused_and_hurt_no_one_else() {
    let out = RefCell::new(Vec::<String>::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        seed: 7,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(WortServer::new(Kind::Woart)))
        .unwrap();
    let good = sim.client(0).unwrap();
    let bad = sim.client(1).unwrap();
    let out_ref = &out;
    sim.spawn_with(&good, 0, move |ctx| async move {
        let t = open(ctx.ep()).await.unwrap();
        t.upsert(b"k", b"v1").await.unwrap();
        ctx.sleep(200_000).await;
        // After the other client misbehaved.
        t.upsert(b"k", b"v2").await.unwrap();
        let mut v = [0u8; 8];
        let n = t.get(b"k", &mut v).await.unwrap();
        out_ref
            .borrow_mut()
            .push(format!("good {:?}", n.map(|n| v[..n].to_vec())));
        assert!(matches!(
            t.upsert(&[1; 17], b"v").await,
            Err(WortError::BadKey { len: 17 })
        ));
    });
    sim.spawn_with(&bad, 0, move |ctx| async move {
        ctx.sleep(50_000).await;
        let qp = ctx.ep().qp(0).unwrap();
        qp.send(&HELLO).await.unwrap();
        let mut buf = [0u8; REPLY_MAX];
        let n = qp.recv(&mut buf).await.unwrap().len as usize;
        let welcome = decode_reply(&buf[..n]).unwrap();
        assert_eq!(welcome.status, Status::Welcome);
        let me = welcome.seq;
        let ring = u64::from_le_bytes(buf[32 + 8..32 + 16].try_into().unwrap());
        let slots = u64::from_le_bytes(buf[32 + 16..32 + 24].try_into().unwrap());
        let mine = ring + me as u64 * slots * SLOT_LEN as u64;
        // Garbage in its own slot 0: answered BadRequest.
        let garbage = [0x5Au8; 64];
        qp.post(&mut [Op::WriteImm {
            remote: remora_layouts::GlobalAddr::new(0, mine),
            local: &garbage,
            imm: imm(me, 0),
        }])
        .await
        .unwrap();
        let n = qp.recv(&mut buf).await.unwrap().len as usize;
        let r = decode_reply(&buf[..n]).unwrap();
        out_ref.borrow_mut().push(format!("garbage {:?}", r.status));
        // A request naming the other client's ring: the connection is dropped.
        let other = if me == 0 { 1 } else { 0 };
        let res = qp
            .post(&mut [Op::WriteImm {
                remote: remora_layouts::GlobalAddr::new(0, mine),
                local: &garbage,
                imm: imm(other, 0),
            }])
            .await;
        let later = qp.send(&HELLO).await;
        out_ref.borrow_mut().push(format!(
            "foreign {} then {}",
            res.is_ok(),
            matches!(later, Err(FabricError::Flushed) | Err(_))
        ));
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    let out = out.borrow();
    assert!(out.contains(&"garbage BadRequest".to_string()), "{out:?}");
    assert!(
        out.iter()
            .any(|s| s.starts_with("foreign") && s.ends_with("then true")),
        "{out:?}"
    );
    assert!(out.contains(&"good Some([118, 50])".to_string()), "{out:?}");
}

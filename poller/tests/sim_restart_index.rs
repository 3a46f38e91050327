//! A persistent memory node crashes under an index's writers and restarts on the same sim:
//! its handler recovers the surviving region before serving, every writer sees the crash as
//! `RetryExceeded`, reconnects, reopens the index, and finds every acknowledged write.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::index::KvIndex;
use remora_poller::sim::{ClientCtx, Faults, Sim, SimConfig, SimEndpoint};
use std::cell::RefCell;
use std::collections::BTreeMap;

const CRASH_NS: u64 = 1_500_000;
const RESTART_NS: u64 = 2_500_000;

#[derive(Default)]
struct Log {
    /// Per key: the last acknowledged value and the one acknowledged before it.
    acked: BTreeMap<u64, (u64, Option<u64>)>,
    in_flight: Option<(u64, u64)>,
    error: Option<String>,
    checked: usize,
    /// It got past the restart: reconnected, reopened, checked, wrote.
    done: bool,
}

/// Writers upsert until the crash; then each reconnects after the restart, reopens the
/// index (`$open`, with the endpoint as `$ep`, yields `Option<index>`), checks its
/// acknowledged keys and writes once more. `rollback`: a key may come back with the value
/// acknowledged before its last one. `stuck`: writers that may wait forever for the reply to
/// a request the node took before it crashed.
macro_rules! crash_restart {
    ($handler:expr, |$ep:ident| $open:expr, $what:expr, rollback: $rollback:expr, stuck: $stuck:expr) => {{
        for seed in 1..=restart_seeds() {
            let what = format!("{} seed {seed}", $what);
            let writers = 4u64;
            let logs: Vec<RefCell<Log>> = (0..writers).map(|_| RefCell::default()).collect();
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
            // A new handler at the restart, as a restarted server process.
            sim.set_handler_with(0, $handler).unwrap();
            // The index exists before the writers start.
            let first = sim.client(0).unwrap();
            sim.spawn_with(&first, 0, move |ctx| async move {
                let $ep: &SimEndpoint = ctx.ep();
                assert!($open.is_some());
            });
            sim.run();
            for (c, log) in logs.iter().enumerate() {
                let ctx = sim.client(c % 2).unwrap();
                sim.spawn_with(&ctx, 0, move |ctx: ClientCtx| async move {
                    let c = c as u64;
                    {
                        let $ep: &SimEndpoint = ctx.ep();
                        let Some(t) = $open else {
                            log.borrow_mut().error = Some("open before the crash".into());
                            return;
                        };
                        for i in 1..u64::MAX {
                            let key = (c + 1) << 32 | (i * 7 % 53);
                            log.borrow_mut().in_flight = Some((key, i));
                            if t.upsert(&key.to_be_bytes(), &i.to_le_bytes())
                                .await
                                .is_err()
                            {
                                break;
                            }
                            let mut l = log.borrow_mut();
                            let prev = l.acked.get(&key).map(|p| p.0);
                            l.acked.insert(key, (i, prev));
                            l.in_flight = None;
                        }
                    }
                    if ctx.now_ns() < RESTART_NS {
                        log.borrow_mut().error = Some(format!("failed at {} ns", ctx.now_ns()));
                        return;
                    }
                    let fresh = ctx.reconnect();
                    let $ep: &SimEndpoint = fresh.ep();
                    let Some(t) = $open else {
                        log.borrow_mut().error = Some("reopen after the restart".into());
                        return;
                    };
                    let acked: Vec<(u64, (u64, Option<u64>))> =
                        log.borrow().acked.iter().map(|(k, v)| (*k, *v)).collect();
                    let in_flight = log.borrow().in_flight;
                    let mut out = [0u8; 8];
                    for (k, (v, prev)) in acked {
                        let got = match t.get(&k.to_be_bytes(), &mut out).await {
                            Ok(Some(8)) => Some(u64::from_le_bytes(out)),
                            Ok(_) => None,
                            Err(e) => {
                                log.borrow_mut().error = Some(format!("get {k:#x}: {e:?}"));
                                return;
                            }
                        };
                        let ok = got == Some(v)
                            || in_flight.is_some_and(|(fk, fv)| fk == k && got == Some(fv))
                            || ($rollback && prev.is_some() && got == prev);
                        if !ok {
                            log.borrow_mut().error =
                                Some(format!("key {k:#x}: acknowledged {v}, found {got:?}"));
                            return;
                        }
                        log.borrow_mut().checked += 1;
                    }
                    let key = (c + 1) << 40;
                    if let Err(e) = t.upsert(&key.to_be_bytes(), &1u64.to_le_bytes()).await {
                        log.borrow_mut().error = Some(format!("write after the restart: {e:?}"));
                    }
                    log.borrow_mut().done = true;
                });
            }
            let r = sim.run();
            let stuck = logs.iter().filter(|l| !l.borrow().done).count();
            assert_eq!(r.unfinished, stuck, "{what}: {r:?}");
            assert!(
                stuck <= $stuck,
                "{what}: {stuck} writers never got past the crash"
            );
            for l in logs.iter().filter(|l| !l.borrow().done) {
                let l = l.borrow();
                assert!(
                    l.error.is_none() && l.in_flight.is_some(),
                    "{what}: {:?}",
                    l.error
                );
            }
            let reports = sim.recovery_reports();
            assert_eq!(reports.len(), 1, "{what}");
            assert_eq!(reports[0].at_ns, RESTART_NS);
            let report = reports[0].report.clone().unwrap();
            println!("{what}: recovery: {report}");
            let mut checked = 0;
            for (c, l) in logs.iter().enumerate() {
                let l = l.borrow();
                assert!(l.error.is_none(), "{what} writer {c}: {:?}", l.error);
                checked += l.checked;
            }
            assert!(
                checked > 20,
                "{what}: only {checked} acknowledged keys checked"
            );
        }
    }};
}

/// Seeds per index (`RESTART_SEEDS` for a longer sweep).
fn restart_seeds() -> u64 {
    std::env::var("RESTART_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

#[test]
fn erda_recovers_on_restart_and_its_clients_reconnect() {
    crash_restart!(
        || Box::new(ErdaServer::new(ErdaConfig::small())),
        |ep| Erda::open(ep, ErdaClientConfig::default()).await.ok(),
        "erda",
        // Acknowledged means durable (the flush READ and the durable mark), and every wait
        // has a deadline: no rollback, and no writer stuck on a reply the node never sent.
        rollback: false,
        stuck: 0
    );
}

#[test]
fn canrt_recovers_on_restart_and_its_clients_reconnect() {
    let cfg = CanrtConfig {
        slots: 8,
        ..CanrtConfig::new(0)
    };
    crash_restart!(
        || Box::new(CanrtServer::new()),
        |ep| Canrt::open(ep, cfg).await.ok(),
        "canrt",
        rollback: false,
        stuck: 0
    );
}

/// The whole history across a memory-node crash and restart is linearizable: 8 clients run
/// `lin_client` on shared hot keys until the crash (their in-flight operations stay unknown),
/// reconnect after the restart, reopen the index and go on as new clients; the checker sees
/// every operation of both lives in one history.
macro_rules! lin_across_restart {
    ($handler:expr, |$ep:ident| $open:expr, $what:expr, scans: $scans:expr) => {{
        let bad = lin_across_restart!($handler, |$ep| $open, $what, scans: $scans, violations);
        assert_eq!(bad, 0, "{}: {bad} seeds not linearizable", $what);
    }};
    ($handler:expr, |$ep:ident| $open:expr, $what:expr, scans: $scans:expr, violations) => {{
        use remora_core::lincheck::driver::{LinSpec, lin_client};
        use remora_core::lincheck::{CheckConfig, Recorder, check};
        let mut bad = 0;
        for seed in 1..=restart_seeds() {
            let what = format!("{} seed {seed}", $what);
            let rec = Recorder::new(200_000, 200_000 * 17);
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
            sim.set_handler_with(0, $handler).unwrap();
            let first = sim.client(0).unwrap();
            sim.spawn_with(&first, 0, move |ctx| async move {
                let $ep: &SimEndpoint = ctx.ep();
                assert!($open.is_some());
            });
            sim.run();
            for c in 0..8u32 {
                let ctx = sim.client(c as usize % 2).unwrap();
                let (rec, errors) = (&rec, &errors);
                sim.spawn_with(&ctx, 0, move |ctx: ClientCtx| async move {
                    let clock = || ctx.now_ns();
                    {
                        let $ep: &SimEndpoint = ctx.ep();
                        let Some(t) = $open else {
                            errors.borrow_mut().push(format!("client {c}: open"));
                            return;
                        };
                        let spec = LinSpec {
                            cold: 16,
                            ..LinSpec::new(1 + c, 1_000_000, seed, $scans)
                        };
                        // Runs until the crash makes an operation fail.
                        let _ = lin_client(&t, &spec, rec, &clock).await;
                    }
                    if ctx.now_ns() < RESTART_NS {
                        ctx.sleep(RESTART_NS - ctx.now_ns()).await;
                    }
                    let fresh = ctx.reconnect();
                    let $ep: &SimEndpoint = fresh.ep();
                    let Some(t) = $open else {
                        errors.borrow_mut().push(format!("client {c}: reopen"));
                        return;
                    };
                    let spec = LinSpec {
                        cold: 16,
                        ..LinSpec::new(9 + c, 300, seed ^ 0xA5, $scans)
                    };
                    if let Err(e) = lin_client(&t, &spec, rec, &clock).await {
                        errors
                            .borrow_mut()
                            .push(format!("client {c} after the restart: {e}"));
                    }
                });
            }
            let r = sim.run();
            let errs = errors.borrow();
            assert!(errs.is_empty(), "{what}: {errs:?}");
            assert_eq!(r.unfinished, 0, "{what}: {r:?}");
            drop(errs);
            drop(sim);
            let h = rec.finish().expect("recorder sized for the run");
            let after = h.events.iter().filter(|e| e.client > 8).count();
            assert_eq!(after, 8 * 300, "{what}: the second lives did not all run");
            let report = check(&h, &CheckConfig::new(seed));
            println!("{what}: {report}");
            bad += usize::from(!report.is_ok());
        }
        bad
    }};
}

#[test]
fn erda_history_across_a_restart_is_linearizable() {
    lin_across_restart!(
        || Box::new(ErdaServer::new(ErdaConfig::small())),
        |ep| Erda::open(ep, ErdaClientConfig::default()).await.ok(),
        "erda",
        scans: false
    );
}

#[test]
fn canrt_history_across_a_restart_is_linearizable() {
    let cfg = CanrtConfig {
        slots: 8,
        ..CanrtConfig::new(0)
    };
    lin_across_restart!(
        || Box::new(CanrtServer::new()),
        |ep| Canrt::open(ep, cfg).await.ok(),
        "canrt",
        scans: true
    );
}

#[test]
fn erda_without_its_flush_fails_the_check_across_a_restart() {
    // The mutant: acknowledge a write before a READ has flushed it. A crash then loses
    // acknowledged writes, and the history across the restart is not linearizable.
    let bad = lin_across_restart!(
        || Box::new(ErdaServer::new(ErdaConfig::small())),
        |ep| Erda::open(
            ep,
            ErdaClientConfig {
                unflushed_writes: true,
                ..ErdaClientConfig::default()
            }
        )
        .await
        .ok(),
        "erda without flush",
        scans: false,
        violations
    );
    assert!(
        bad > 0,
        "the checker missed lost acknowledged writes in every seed"
    );
}

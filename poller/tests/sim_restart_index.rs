//! A persistent memory node crashes under an index's writers and restarts on the same sim:
//! its handler recovers the surviving region before serving, every writer sees the crash as
//! `RetryExceeded`, reconnects, reopens the index, and finds every acknowledged write.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::fabric::{FabricError, Recv};
use remora_core::index::KvIndex;
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_poller::sim::{ClientCtx, Faults, Sim, SimConfig, SimEndpoint};
use std::cell::RefCell;
use std::collections::BTreeMap;

const CRASH_NS: u64 = 1_500_000;
const RESTART_NS: u64 = 2_500_000;

/// CANRT's server with its crash recovery as the handler's `recover` (`CanrtServer` offers
/// recovery as an inherent method; its `Handler` impl keeps the default).
struct CanrtRecovering(CanrtServer);

impl Handler for CanrtRecovering {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        self.0.on_message(region, conn, recv, msg, replies)
    }
    fn recover(&mut self, region: &dyn LocalRegion) -> Result<String, FabricError> {
        self.0.recover(region).map(|r| format!("{r:?}"))
    }
    fn on_disconnect(&mut self, region: &dyn LocalRegion, conn: usize) {
        self.0.on_disconnect(region, conn)
    }
}

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
        || Box::new(CanrtRecovering(CanrtServer::new())),
        |ep| Canrt::open(ep, cfg).await.ok(),
        "canrt",
        rollback: false,
        stuck: 0
    );
}

//! Durable memory nodes on the sim: CPU stores survive a crash only once persisted, a
//! restarted persistent node runs its handler's recovery before serving, connections end with
//! `on_disconnect` (refused, fenced, crashed client, reconnect), and NVM writes are counted.
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv};
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::GlobalAddr;
use remora_poller::sim::{Faults, Model, NvmStats, Sim, SimConfig};
use std::cell::RefCell;
use std::collections::HashMap;

/// Two words in different cache lines.
const X: u64 = 1 << 20;
const Y: u64 = (1 << 20) + 4096;
const A: u64 = 0xAAAA_AAAA_AAAA_AAAA;
const B: u64 = 0xBBBB_BBBB_BBBB_BBBB;

/// Messages are `[verb, tag]`: `s` stores A at X then B at Y and persists Y (and X too when
/// `persist_both`); `x` is refused. Every event lands in `log`.
struct Store<'l> {
    persist_both: bool,
    log: &'l RefCell<Vec<String>>,
    tags: HashMap<usize, u8>,
}

impl<'l> Store<'l> {
    fn new(persist_both: bool, log: &'l RefCell<Vec<String>>) -> Store<'l> {
        Store {
            persist_both,
            log,
            tags: HashMap::new(),
        }
    }
}

fn now(region: &dyn LocalRegion) -> u64 {
    region.cpu_clock().map_or(0, |c| c.now_ns)
}

impl Handler for Store<'_> {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        _recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let (verb, tag) = (msg.first().copied(), msg.get(1).copied().unwrap_or(0));
        self.tags.insert(conn, tag);
        match verb {
            Some(b's') => {
                region.store_u64(X, A)?;
                region.store_u64(Y, B)?;
                region.persist(Y, 8);
                if self.persist_both {
                    region.persist(X, 8);
                }
                replies.send(b"ok");
                Ok(())
            }
            _ => Err(FabricError::Unsupported { what: "refused" }),
        }
    }

    fn recover(&mut self, region: &dyn LocalRegion) -> Result<String, FabricError> {
        let (x, y) = (region.load_u64(X)?, region.load_u64(Y)?);
        let report = format!("x={x:#x} y={y:#x}");
        self.log.borrow_mut().push(format!("recover {report}"));
        Ok(report)
    }

    fn on_disconnect(&mut self, region: &dyn LocalRegion, conn: usize) {
        let tag = self.tags.get(&conn).copied().unwrap_or(0);
        self.log
            .borrow_mut()
            .push(format!("disconnect {tag} at {}", now(region)));
    }
}

async fn call(qp: &impl QueuePair, verb: u8, tag: u8) -> Result<(), FabricError> {
    qp.send(&[verb, tag]).await?;
    let mut buf = [0u8; 64];
    let r = qp.recv(&mut buf).await?;
    assert_eq!(&buf[..r.len as usize], b"ok");
    Ok(())
}

/// One store-store-persist message, a crash and a restart: what survives, what it cost.
fn store_then_crash(persistent: bool, persist_both: bool) -> (u64, u64, NvmStats, u64, String) {
    let log = RefCell::new(Vec::new());
    let mut sim = Sim::new(SimConfig {
        persistent,
        faults: Faults::none()
            .crash_node_at(0, 200_000)
            .restart_node_at(0, 300_000),
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(Store::new(persist_both, &log)))
        .unwrap();
    let ctx = sim.client(0).unwrap();
    sim.spawn_with(&ctx, 0, |ctx| async move {
        call(ctx.qp(0).unwrap(), b's', 1).await.unwrap();
    });
    sim.run_for(100_000);
    // Before the crash the volatile view has both stores.
    assert_eq!(sim.host_bytes(0, X, 8).unwrap(), A.to_le_bytes());
    assert_eq!(sim.host_bytes(0, Y, 8).unwrap(), B.to_le_bytes());
    assert_eq!(sim.unpersisted(0), usize::from(persistent && !persist_both));
    let busy = sim.server_busy_ns(0).unwrap();
    let nvm = sim.nvm_stats(0).unwrap();
    // Past the crash and the restart (the client finished long before).
    sim.run_for(300_000);
    let word = |off| u64::from_le_bytes(sim.host_bytes(0, off, 8).unwrap().try_into().unwrap());
    let reports = sim.recovery_reports();
    let report = match reports.as_slice() {
        [] => String::new(),
        [r] => {
            assert_eq!((r.node, r.at_ns), (0, 300_000));
            r.report.clone().unwrap()
        }
        more => panic!("one restart, {} recoveries", more.len()),
    };
    (word(X), word(Y), nvm, busy, report)
}

#[test]
fn a_cpu_store_survives_a_crash_only_once_persisted() {
    let (x, y, nvm, busy_one, report) = store_then_crash(true, false);
    assert_eq!(y, B, "the persisted store survives");
    assert_eq!(x, 0, "the store that was never persisted is lost");
    assert_eq!(
        report,
        format!("x=0x0 y={B:#x}"),
        "recovery saw the durable image"
    );
    assert_eq!(nvm.cpu_store, 16);
    assert_eq!(nvm.lines_flushed, 1);
    assert_eq!(nvm.nic_bytes(), 0, "a SEND places nothing in the region");

    let (x, y, nvm, busy_both, report) = store_then_crash(true, true);
    assert_eq!((x, y), (A, B), "both persisted, both survive");
    assert_eq!(report, format!("x={A:#x} y={B:#x}"));
    assert_eq!(nvm.lines_flushed, 2);
    assert_eq!(nvm.media_bytes(), 128);
    // Each line written back costs nvm_write_ns of the handler thread.
    let line = Model::default().nvm_write_ns as u64;
    assert_eq!(busy_both - busy_one, line, "{busy_both} vs {busy_one}");

    // DRAM: persist is free and nothing survives; no recovery runs on a fresh region.
    let (x, y, nvm, busy_dram_both, report) = store_then_crash(false, true);
    let (_, _, _, busy_dram_one, _) = store_then_crash(false, false);
    assert_eq!((x, y), (0, 0));
    assert_eq!(nvm, NvmStats::default());
    assert_eq!(busy_dram_both, busy_dram_one);
    assert_eq!(report, "");
}

#[test]
fn a_restarted_node_recovers_before_serving_and_clients_reconnect() {
    let log = RefCell::new(Vec::new());
    let results = RefCell::new(Vec::new());
    let m = Model::default();
    let dead_ns = (m.ack_timeout_ns * (m.retry_cnt + 1.0)) as u64;
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        persistent: true,
        faults: Faults::none()
            .crash_node_at(0, 100_000)
            .restart_node_at(0, 1_000_000),
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(Store::new(true, &log)))
        .unwrap();
    let (c1, c2) = (sim.client(0).unwrap(), sim.client(1).unwrap());
    let results = &results;
    // Client 1 is caught by the crash mid-call, then reconnects.
    sim.spawn_with(&c1, 0, |ctx| async move {
        call(ctx.qp(0).unwrap(), b's', 1).await.unwrap();
        ctx.sleep(150_000).await;
        let r = call(ctx.qp(0).unwrap(), b's', 1).await;
        results.borrow_mut().push(("during", r, ctx.now_ns()));
        let fresh = ctx.reconnect();
        let r = call(fresh.qp(0).unwrap(), b's', 3).await;
        results.borrow_mut().push(("reconnected", r, ctx.now_ns()));
    });
    // Client 2 sleeps through crash and restart, then uses its old queue pair.
    sim.spawn_with(&c2, 0, |ctx| async move {
        call(ctx.qp(0).unwrap(), b's', 2).await.unwrap();
        ctx.sleep(2_000_000).await;
        let r = call(ctx.qp(0).unwrap(), b's', 2).await;
        results.borrow_mut().push(("stale", r, ctx.now_ns()));
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "{r:?}");
    let results = results.borrow();
    let get = |what: &str| results.iter().find(|r| r.0 == what).unwrap();
    let during = get("during");
    assert_eq!(during.1, Err(FabricError::RetryExceeded { node: 0 }));
    assert!(during.2 >= 150_000 + dead_ns, "gave up at {}", during.2);
    let stale = get("stale");
    assert_eq!(
        stale.1,
        Err(FabricError::RetryExceeded { node: 0 }),
        "a queue pair of the node's previous life goes unanswered"
    );
    assert_eq!(get("reconnected").1, Ok(()));
    // Both old connections ended at the restart, then recovery ran; the reconnect ended
    // client 1's old connection (already over: no second notice).
    let log = log.borrow();
    assert_eq!(
        log.as_slice(),
        &[
            "disconnect 1 at 1000000".to_string(),
            "disconnect 2 at 1000000".to_string(),
            format!("recover x={A:#x} y={B:#x}"),
        ],
    );
    assert_eq!(sim.recovery_reports().len(), 1);
}

#[test]
fn connections_end_when_refused_fenced_or_their_client_dies() {
    let log = RefCell::new(Vec::new());
    let m = Model::default();
    let dead_ns = (m.ack_timeout_ns * (m.retry_cnt + 1.0)) as u64;
    // Client 2 (the third made) dies at its second post.
    let mut sim = Sim::new(SimConfig {
        faults: Faults::none().crash_client_at_post(2, 1),
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(Store::new(false, &log)))
        .unwrap();
    let refused = sim.client(0).unwrap();
    let fenced = sim.client(0).unwrap();
    let dies = sim.client(0).unwrap();
    let fencer = sim.client(0).unwrap();
    let fenced_id = fenced.ep().client_id();
    sim.spawn_with(&refused, 0, |ctx| async move {
        ctx.sleep(10_000).await;
        let qp = ctx.qp(0).unwrap();
        qp.send(&[b'x', 1]).await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(qp.recv(&mut buf).await, Err(FabricError::Flushed));
    });
    sim.spawn_with(&fenced, 0, |ctx| async move {
        call(ctx.qp(0).unwrap(), b's', 2).await.unwrap();
        ctx.sleep(50_000).await;
        let r = ctx.qp(0).unwrap().send(&[b's', 2]).await;
        assert_eq!(r, Err(FabricError::Flushed), "fenced");
    });
    sim.spawn_with(&dies, 0, |ctx| async move {
        call(ctx.qp(0).unwrap(), b's', 3).await.unwrap();
        ctx.sleep(30_000).await;
        let _ = ctx.qp(0).unwrap().send(&[b's', 3]).await;
        unreachable!("a crashed client runs no further");
    });
    sim.spawn_with(&fencer, 0, |ctx| async move {
        ctx.sleep(40_000).await;
        ctx.ep().fence(0, fenced_id).await.unwrap();
    });
    let r = sim.run();
    assert_eq!(
        r.unfinished, 1,
        "only the crashed client's coroutine: {r:?}"
    );
    // The memory node gives up on the dead client one dead timeout after it died.
    sim.run_for(dead_ns);
    let log = log.borrow();
    assert_eq!(log.len(), 3, "{log:?}");
    let at = |tag: u8| -> u64 {
        let p = format!("disconnect {tag} at ");
        let l = log.iter().find(|l| l.starts_with(&p)).unwrap();
        l[p.len()..].parse().unwrap()
    };
    assert!((10_000..20_000).contains(&at(1)), "refused at {}", at(1));
    assert!((40_000..41_000).contains(&at(2)), "fenced at {}", at(2));
    let died = at(3);
    assert!(
        died >= 30_000 + dead_ns && died < 40_000 + dead_ns,
        "the crashed client's connection ended at {died}, dead timeout {dead_ns}"
    );
}

#[test]
fn nic_writes_are_counted_by_verb_on_persistent_nodes_only() {
    for persistent in [true, false] {
        let mut sim = Sim::new(SimConfig {
            persistent,
            ..SimConfig::default()
        })
        .unwrap();
        let ctx = sim.client(0).unwrap();
        sim.spawn_with(&ctx, 0, |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let a = GlobalAddr::new(0, X);
            qp.write(a, &[1u8; 100]).await.unwrap();
            qp.post(&mut [Op::WriteImm {
                remote: GlobalAddr::new(0, Y),
                local: &[2u8; 40],
                imm: 7,
            }])
            .await
            .unwrap();
            assert_eq!(qp.cas(GlobalAddr::new(0, Y + 64), 0, 5).await, Ok(0));
            assert_eq!(qp.cas(GlobalAddr::new(0, Y + 64), 0, 6).await, Ok(5));
            qp.faa(GlobalAddr::new(0, Y + 64), 1).await.unwrap();
        });
        sim.run();
        let n = sim.nvm_stats(0).unwrap();
        if persistent {
            assert_eq!(
                n,
                NvmStats {
                    nic_write: 100,
                    nic_write_imm: 40,
                    nic_atomic: 16,
                    cpu_store: 0,
                    lines_flushed: 0,
                },
                "a CAS that failed wrote nothing"
            );
            assert_eq!(sim.nvm_total(), n);
        } else {
            assert_eq!(n, NvmStats::default());
        }
    }
}

//! A persistent memory node serving Catfish crashes and restarts ten times on the sim, with
//! churn between the crashes: three quarters of the entries deleted and as many inserted,
//! by a client that reconnects after each restart. The restarted server gets its arenas'
//! free space back ([`remora_core::catfish::arenas`]): the nodes its previous life retired
//! or had ready, the mailbox blocks, the arenas' tails. So the memory the allocator hands
//! the tree stays within a small factor of its live nodes, where before every restart lost
//! all of that and the clients granted new chunks each cycle. Every entry survives every
//! restart, by messaging and offloaded searches alike.
use remora_core::catfish::{CatfishClient, CatfishError, Mode, Rect, Transport, TreeKind};
use remora_core::fabric::{Endpoint, QueuePair};
use remora_layouts::catfish::node_len;
use remora_layouts::region::NEXT_CHUNK_OFFSET;
use remora_poller::sim::{Faults, Sim, SimConfig};
use std::cell::RefCell;
use std::collections::BTreeSet;

const CYCLES: u64 = 10;
/// Virtual time between crashes: the churn of one cycle takes a few ms.
const PERIOD_NS: u64 = 40_000_000;
/// How long the node stays down.
const DOWN_NS: u64 = 1_000_000;
const ENTRIES: usize = 400;
const CHUNK: u64 = 16 << 10;
const FANOUT: usize = 8;

fn crash_ns(k: u64) -> u64 {
    (k + 1) * PERIOD_NS
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn everything() -> Rect {
    Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap()
}

/// The tree's entries by both kinds of search equal `live`.
async fn same<Q: QueuePair>(
    c: &mut CatfishClient,
    qp: &Q,
    live: &[(Rect, u64)],
) -> Result<(), String> {
    let want: BTreeSet<(Rect, u64)> = live.iter().copied().collect();
    for mode in [Mode::Messaging, Mode::Offload] {
        let mut hits = Vec::new();
        c.search(qp, everything(), mode, &mut hits)
            .await
            .map_err(|e| format!("{mode:?} search: {e}"))?;
        let got: BTreeSet<(Rect, u64)> = hits.iter().map(|e| (e.rect, e.ptr)).collect();
        if got != want || hits.len() != want.len() {
            return Err(format!(
                "{mode:?} search found {} entries, {} expected",
                hits.len(),
                want.len()
            ));
        }
    }
    Ok(())
}

async fn insert<Q: QueuePair>(
    c: &mut CatfishClient,
    qp: &Q,
    live: &mut Vec<(Rect, u64)>,
    rng: &mut u64,
    id: &mut u64,
) -> Result<(), CatfishError> {
    let (x, y) = (
        (xorshift(rng) % 10_000) as i32,
        (xorshift(rng) % 10_000) as i32,
    );
    let rect = Rect::new(x, y, x + 60, y + 60).unwrap();
    *id += 1;
    c.insert(qp, rect, *id).await?;
    live.push((rect, *id));
    Ok(())
}

/// (bytes the allocator handed out, live nodes the recovery found) after each cycle.
fn run(kind: TreeKind, seed: u64) -> Vec<(u64, u64)> {
    let mut faults = Faults::none();
    for k in 0..CYCLES {
        faults = faults
            .crash_node_at(0, crash_ns(k))
            .restart_node_at(0, crash_ns(k) + DOWN_NS);
    }
    // Before the sim, which borrows them.
    let error = RefCell::new(None::<String>);
    let done = RefCell::new(0u64);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: 16 << 20,
        chunk_size: CHUNK,
        persistent: true,
        seed,
        faults,
        ..SimConfig::default()
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    // A new server at every restart, as a restarted process.
    sim.set_handler_with(0, move || {
        Box::new(remora_core::catfish::CatfishServer::new(max))
    })
    .unwrap();
    let next_chunk = |sim: &Sim| {
        u64::from_le_bytes(
            sim.host_bytes(0, NEXT_CHUNK_OFFSET, 8)
                .unwrap()
                .try_into()
                .unwrap(),
        )
    };
    let base = next_chunk(&sim);
    let ctx = sim.client(0).unwrap();
    {
        let (error, done) = (&error, &done);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let r: Result<(), String> = async {
                let mut rng = seed | 1;
                let mut live: Vec<(Rect, u64)> = Vec::new();
                let mut id = 0u64;
                let mut ctx = ctx;
                let mut c = CatfishClient::create_tree(ctx.qp(0).unwrap(), 1, FANOUT, kind)
                    .await
                    .map_err(|e| format!("create: {e}"))?;
                // Requests go into a mailbox block, which a restart frees with the rest.
                c.set_transport(Transport::WriteImm);
                for _ in 0..ENTRIES {
                    insert(&mut c, ctx.qp(0).unwrap(), &mut live, &mut rng, &mut id)
                        .await
                        .map_err(|e| format!("load: {e}"))?;
                }
                for k in 0..=CYCLES {
                    if k > 0 {
                        // Past the restart: a new connection and a new client.
                        let back = crash_ns(k - 1) + DOWN_NS + 1000;
                        ctx.sleep(back.saturating_sub(ctx.now_ns())).await;
                        let fresh = ctx.reconnect();
                        if k == CYCLES {
                            // (Last, as a dead connection takes its timeout to report.) The
                            // old client finds its connection broken, and then refuses
                            // to write its old mailbox (free memory now) through the new one.
                            let qp = fresh.qp(0).unwrap();
                            let (rect, id) = (everything(), u64::MAX);
                            if c.insert(ctx.qp(0).unwrap(), rect, id).await.is_ok() {
                                return Err("an insert on a dead connection".into());
                            }
                            let posts = qp.counters().snapshot().doorbells;
                            if c.insert(qp, rect, id).await.is_ok()
                                || qp.counters().snapshot().doorbells != posts
                            {
                                return Err(
                                    "the old client wrote through the new connection".into()
                                );
                            }
                        }
                        ctx = fresh;
                        c = CatfishClient::open(ctx.qp(0).unwrap())
                            .await
                            .map_err(|e| format!("cycle {k}: open: {e}"))?;
                        c.set_transport(Transport::WriteImm);
                        same(&mut c, ctx.qp(0).unwrap(), &live)
                            .await
                            .map_err(|e| format!("cycle {k}, after the restart: {e}"))?;
                    }
                    if k == CYCLES {
                        break;
                    }
                    let qp = ctx.qp(0).unwrap();
                    for n in 0..live.len() * 3 / 4 {
                        let at = (xorshift(&mut rng) % live.len() as u64) as usize;
                        let (rect, gone) = live.swap_remove(at);
                        match c.delete(qp, rect, gone).await {
                            Ok(true) => {}
                            Ok(false) => return Err(format!("cycle {k}: {gone} not found")),
                            Err(e) => return Err(format!("cycle {k}: delete {n}: {e}")),
                        }
                        insert(&mut c, qp, &mut live, &mut rng, &mut id)
                            .await
                            .map_err(|e| format!("cycle {k}: insert {n}: {e}"))?;
                    }
                    same(&mut c, qp, &live)
                        .await
                        .map_err(|e| format!("cycle {k}, after the churn: {e}"))?;
                    if ctx.now_ns() >= crash_ns(k) {
                        return Err(format!("cycle {k}: the churn outlasted the period"));
                    }
                    *done.borrow_mut() += 1;
                    ctx.sleep(crash_ns(k) + DOWN_NS / 2 - ctx.now_ns()).await;
                }
                Ok(())
            }
            .await;
            if let Err(e) = r {
                *error.borrow_mut() = Some(e);
            }
        });
    }
    // Sampled just before each crash, after that cycle's churn.
    let mut out = Vec::new();
    for k in 0..CYCLES {
        sim.run_for(crash_ns(k) - 1000 - sim.now_ns());
        assert!(error.borrow().is_none(), "{kind:?}: {:?}", error.borrow());
        out.push(next_chunk(&sim) - base);
    }
    let r = sim.run();
    assert!(error.borrow().is_none(), "{kind:?}: {:?}", error.borrow());
    assert_eq!(r.unfinished, 0, "{kind:?}: {r:?}");
    assert_eq!(*done.borrow(), CYCLES, "{kind:?}");
    let reports = sim.recovery_reports();
    assert_eq!(reports.len() as u64, CYCLES, "{kind:?}");
    // "… entries in N nodes …" of each recovery.
    let nodes: Vec<u64> = reports
        .iter()
        .map(|r| {
            let said = r.report.clone().unwrap();
            let at = said.find(" nodes").expect(&said);
            said[..at]
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect(&said)
        })
        .collect();
    println!(
        "{kind:?}: {}",
        reports[CYCLES as usize - 1].report.clone().unwrap()
    );
    out.into_iter().zip(nodes).collect()
}

#[test]
fn restarts_with_churn_keep_the_memory_granted_bounded() {
    let len = node_len(FANOUT) as u64;
    for (i, kind) in [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert]
        .into_iter()
        .enumerate()
    {
        let c = run(kind, 7 + i as u64);
        let nodes: Vec<(u64, u64)> = c.iter().map(|&(b, n)| (b / len, n)).collect();
        println!("{kind:?}: (allocator bytes as nodes, live nodes) per restart {nodes:?}");
        let (first, last) = (nodes[0], nodes[nodes.len() - 1]);
        let chunk = CHUNK / len;
        assert!(
            last.0 <= 2 * last.1 + 4 * chunk,
            "{kind:?}: {} nodes' worth handed out for {} live: {nodes:?}",
            last.0,
            last.1
        );
        assert!(
            last.0 <= first.0 + 2 * chunk,
            "{kind:?}: the tree grows at every restart: {nodes:?}"
        );
    }
}

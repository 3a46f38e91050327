//! CANRT on the simulated cluster: the memory node's CPU runs the metadata applier
//! (`CanrtServer` as its handler); 4 compute nodes × 4 clients run oracle-checked histories
//! (`remora_core::kvcheck`), with jitter, for several seeds; and the per-operation verb and
//! round-trip figures of a warm tree.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
use remora_core::fabric::{QueuePair, SegmentOrder, Verb};
use remora_core::index::KvIndex;
use remora_core::kvcheck::{History, client_history};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;

#[path = "common/crash_writes.rs"]
mod crash_writes;
#[path = "common/mem_region.rs"]
mod mem_region;
#[path = "common/sim_run.rs"]
mod sim_run;
use crash_writes::{Writes, assert_recovered, scan_all, write_until_error};
use sim_run::run_on;

fn cfg() -> CanrtConfig {
    CanrtConfig {
        slots: 8,
        ..CanrtConfig::new(0)
    }
}

/// 16 clients' histories on one seed, READ and WRITE segments landing in `order`; returns
/// the server's resize count and the clients' data-node snapshots retried as torn.
fn histories_in(seed: u64, order: SegmentOrder) -> (u64, u64) {
    histories_with(seed, order, cfg().scan_batch)
}

/// [`histories_in`] with scans reading `scan_batch` data nodes per doorbell.
fn histories_with(seed: u64, order: SegmentOrder, scan_batch: u32) -> (u64, u64) {
    let failures = RefCell::new(Vec::<String>::new());
    let torn = Cell::new(0u64);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        seed,
        segment_order: order,
        ..SimConfig::default()
    })
    .unwrap();
    let server = CanrtServer::new();
    let stats = server.stats();
    sim.set_handler(0, Box::new(server)).unwrap();
    for node in 0..4 {
        for c in 0..4u64 {
            let ctx = sim.client(node).unwrap();
            let failures = &failures;
            let torn = &torn;
            let client = 1 + node as u64 * 4 + c;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let cfg = CanrtConfig {
                    scan_batch,
                    ..cfg()
                };
                let t = match Canrt::open(ctx.ep(), cfg).await {
                    Ok(t) => t,
                    Err(e) => {
                        failures
                            .borrow_mut()
                            .push(format!("client {client}: open: {e}"));
                        return;
                    }
                };
                let h = History {
                    client,
                    ops: 400,
                    range: 200,
                    hot: 4,
                    seed,
                    value_size: 8,
                    scans: true,
                };
                if let Err(e) = client_history(&t, &h).await {
                    failures.borrow_mut().push(e);
                }
                torn.set(torn.get() + t.stats().torn_retries);
            });
        }
    }
    let r = sim.run();
    let f = failures.borrow();
    assert!(
        f.is_empty(),
        "seed {seed}: {} clients disagreed, first: {}",
        f.len(),
        f[0]
    );
    assert_eq!(
        r.unfinished, 0,
        "seed {seed}: {} clients never finished",
        r.unfinished
    );
    assert_eq!(stats.rejected.load(Ordering::Relaxed), 0);
    (stats.resizes.load(Ordering::Relaxed), torn.get())
}

/// [`histories_in`] with the sim's default (shuffled) segment order; the resize count.
fn histories(seed: u64) -> u64 {
    histories_in(seed, SegmentOrder::default()).0
}

/// Scans of one data node per round trip (the paper's range) hold the histories too.
#[test]
fn histories_hold_with_one_node_per_scan_round_trip() {
    for seed in 1..=2 {
        let (resizes, _) = histories_with(seed, SegmentOrder::Shuffled, 1);
        assert!(resizes > 3, "seed {seed}: the tree never grew");
    }
}

#[test]
fn canrt_histories_on_the_sim_cluster() {
    // CANRT_SIM_SEEDS=n runs seeds 1..=n (a longer soak than CI's 4).
    let seeds = std::env::var("CANRT_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4u64);
    let mut torn = 0;
    for seed in 1..=seeds {
        let (resizes, t) = histories_in(seed, SegmentOrder::Shuffled);
        println!("seed {seed}: {resizes} resizes, {t} torn snapshots re-read");
        assert!(resizes > 3, "seed {seed}: the tree never grew");
        torn += t;
    }
    // Segments landing in any order tear snapshots, and the histories still hold.
    assert!(torn > 0, "no snapshot ever tore: the race is not exercised");
    // And in ascending order (the old fabric) too.
    let (resizes, _) = histories_in(1, SegmentOrder::Ascending);
    assert!(resizes > 3);
}

#[test]
fn sim_runs_are_deterministic() {
    assert_eq!(histories(9), histories(9));
}

/// Per-operation figures on the sim's counters: a warm lookup, an update, a scan.
#[test]
fn per_operation_figures_on_the_sim() {
    let mut sim = Sim::new(SimConfig::default()).unwrap();
    sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
    let (get, get_ns, upd, upd_ns, scan, seen) = run_on(&mut sim, 0, async |ctx| {
        let t = Canrt::open(
            ctx.ep(),
            CanrtConfig {
                slots: 32,
                ..CanrtConfig::new(0)
            },
        )
        .await
        .unwrap();
        const N: u64 = 3000;
        for k in 0..N {
            t.upsert(&(k * 104_729).to_be_bytes(), &k.to_le_bytes())
                .await
                .unwrap();
        }
        let qp = ctx.qp(0).unwrap();
        let mut buf = [0u8; 8];
        t.get(&0u64.to_be_bytes(), &mut buf).await.unwrap();
        let t0 = ctx.now_ns();
        let before = qp.counters().snapshot();
        for k in 0..N {
            assert_eq!(
                t.get(&(k * 104_729).to_be_bytes(), &mut buf).await.unwrap(),
                Some(8)
            );
        }
        let get = qp.counters().snapshot() - before;
        let get_ns = (ctx.now_ns() - t0) / N;
        let t0 = ctx.now_ns();
        let before = qp.counters().snapshot();
        for i in 0..N {
            let k = i * 997 % N;
            assert!(
                t.update(&(k * 104_729).to_be_bytes(), &i.to_le_bytes())
                    .await
                    .unwrap()
            );
        }
        let upd = qp.counters().snapshot() - before;
        let upd_ns = (ctx.now_ns() - t0) / N;
        let before = qp.counters().snapshot();
        let mut seen = 0;
        for i in 0..100u64 {
            seen += t
                .scan(&(i * 30 * 104_729).to_be_bytes(), 100, &mut |_, _| {})
                .await
                .unwrap();
        }
        let scan = qp.counters().snapshot() - before;
        (get, get_ns, upd, upd_ns, scan, seen)
    });
    let n = 3000.0;
    println!(
        "sim lookup: {:.2} verbs ({:.2} READ), {:.2} round trips, {:.0} B in, {get_ns} ns per op",
        get.posted_verbs() as f64 / n,
        get.verb(Verb::Read) as f64 / n,
        get.round_trips as f64 / n,
        get.bytes_in as f64 / n
    );
    println!(
        "sim update: {:.2} verbs ({:.2} FAA, {:.2} READ, {:.2} WRITE_WITH_IMM), {:.2} round trips, {:.0} B out, {upd_ns} ns per op",
        upd.posted_verbs() as f64 / n,
        upd.verb(Verb::Faa) as f64 / n,
        upd.verb(Verb::Read) as f64 / n,
        upd.verb(Verb::WriteImm) as f64 / n,
        upd.round_trips as f64 / n,
        upd.bytes_out as f64 / n
    );
    println!(
        "sim scan of 100: {:.1} READs, {:.1} round trips per scan ({seen} pairs in 100 scans)",
        scan.verb(Verb::Read) as f64 / 100.0,
        scan.round_trips as f64 / 100.0
    );
    // The node READ bracketed by two 8-byte READs of its meta word: one doorbell.
    assert_eq!(get.verb(Verb::Read), 3 * 3000);
    assert_eq!(get.posted_verbs(), 3 * 3000);
    assert_eq!(get.doorbells, 3000);
    assert_eq!(get.round_trips, 3000);
    assert_eq!(upd.verb(Verb::Faa), 3000);
    assert_eq!(upd.verb(Verb::WriteImm), 3000);
    let want: usize = (0..100).map(|i| (3000 - 30 * i).min(100)).sum();
    assert_eq!(seen, want);
}

/// Key-value pairs a scan returned.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Doorbells and READs of 20 scans of 200 keys with `scan_batch` data nodes per doorbell,
/// and the pairs they returned.
fn scans_with_batch(batch: u32) -> (u64, u64, Pairs) {
    let mut sim = Sim::new(SimConfig::default()).unwrap();
    sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
    run_on(&mut sim, 0, async |ctx| {
        let t = Canrt::open(
            ctx.ep(),
            CanrtConfig {
                slots: 32,
                scan_batch: batch,
                ..CanrtConfig::new(0)
            },
        )
        .await
        .unwrap();
        for k in 0..2000u64 {
            t.upsert(&(k * 104_729).to_be_bytes(), &k.to_le_bytes())
                .await
                .unwrap();
        }
        let qp = ctx.qp(0).unwrap();
        let before = qp.counters().snapshot();
        let mut pairs = Vec::new();
        for i in 0..20u64 {
            t.scan(&(i * 90 * 104_729).to_be_bytes(), 200, &mut |k, v| {
                pairs.push((k.to_vec(), v.to_vec()))
            })
            .await
            .unwrap();
        }
        let c = qp.counters().snapshot() - before;
        (c.doorbells, c.verb(Verb::Read), pairs)
    })
}

/// `scan_batch: 1` reads one data node per round trip (the paper's range query, one request
/// per node); the default overlaps several; both return the same pairs.
#[test]
fn a_scan_batch_of_one_reads_one_node_per_round_trip() {
    let (rt1, reads1, pairs1) = scans_with_batch(1);
    let (rt4, reads4, pairs4) = scans_with_batch(CanrtConfig::new(0).scan_batch);
    assert_eq!(pairs1, pairs4);
    assert_eq!(pairs1.len(), 20 * 200);
    // Each node snapshot is three READs (the node bracketed by two meta-word READs).
    println!("scan batch 1: {rt1} doorbells, {reads1} READs; batch 4: {rt4}, {reads4}");
    assert_eq!(3 * rt1, reads1, "one node per doorbell");
    // The default reads up to 4 nodes per doorbell (past the scan's end in its last one).
    assert!(
        3 * rt4 < reads4 / 2,
        "the default overlaps nodes: {rt4}, {reads4}"
    );
    assert!(rt4 < rt1 / 2 && reads4 >= reads1, "{rt4} vs {rt1}");
}

/// A persistent memory node crashes in the middle of 8 writers' upserts (resizes included);
/// recovery on its image, then a fresh cluster on the recovered image: every acknowledged
/// write is there, nothing else is except the writes in flight, and the tree takes writes.
#[test]
fn a_memory_node_crash_loses_no_acknowledged_write() {
    for (seed, crash_ns) in [(1u64, 700_000u64), (2, 2_000_000), (3, 5_000_000)] {
        let cfg = SimConfig {
            compute_nodes: 2,
            memory_nodes: 1,
            persistent: true,
            seed,
            faults: remora_poller::sim::Faults::none().crash_node_at(0, crash_ns),
            ..SimConfig::default()
        };
        let logs = RefCell::new(vec![Writes::default(); 8]);
        let mut sim = Sim::new(cfg.clone()).unwrap();
        sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
        for c in 0..8u64 {
            let ctx = sim.client((c % 2) as usize).unwrap();
            let logs = &logs;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let Ok(t) = Canrt::open(ctx.ep(), cfg_small()).await else {
                    return;
                };
                let _ = write_until_error(&t, c, 61, logs).await;
            });
        }
        let r = sim.run();
        assert_eq!(r.unfinished, 0, "seed {seed}: writers hung after the crash");
        let mut images = sim.into_images();
        let acked: usize = logs.borrow().iter().map(|l| l.acked.len()).sum();
        assert!(
            acked > 50,
            "seed {seed}: only {acked} keys written before the crash"
        );
        // Recovery, on the node's CPU, before anyone connects.
        let report = mem_region::on_image(&mut images[0].host, |img| {
            CanrtServer::new().recover(img).unwrap()
        });
        let mut sim = Sim::with_images(
            SimConfig {
                faults: remora_poller::sim::Faults::none(),
                ..cfg.clone()
            },
            images,
        )
        .unwrap();
        sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
        let found = run_on(&mut sim, 0, async |ctx| {
            let t = Canrt::open(ctx.ep(), cfg_small()).await.unwrap();
            let found = scan_all(&t).await;
            // The recovered tree takes writes (and resizes).
            for k in 0..100u64 {
                t.upsert(&(k << 48).to_be_bytes(), &k.to_le_bytes())
                    .await
                    .unwrap();
            }
            let mut out = [0u8; 8];
            for k in 0..100u64 {
                assert_eq!(
                    t.get(&(k << 48).to_be_bytes(), &mut out).await.unwrap(),
                    Some(8)
                );
            }
            found
        });
        drop(sim);
        assert_recovered(&logs.borrow(), &found, &format!("seed {seed}"));
        println!(
            "seed {seed}: crash at {crash_ns} ns after {acked} acknowledged keys; recovery {report:?}"
        );
    }
}

fn cfg_small() -> CanrtConfig {
    CanrtConfig {
        slots: 8,
        ..CanrtConfig::new(0)
    }
}

/// A writer dies at one of its doorbells (for some, after taking a lock ticket and before
/// appending): the other writer's writes to that node wait about a lease, then the server
/// skips the dead ticket and they go on (they used to end in `LockTimeout`); its lookups
/// keep working, and nothing it reads was never written. (`canrt_crash.rs` has the full
/// campaign.)
#[test]
fn a_client_dying_with_a_lock_costs_a_lease_not_an_error() {
    let mut slow = 0;
    for post in 8..40u64 {
        let outcome = RefCell::new(None);
        let mut sim = Sim::new(SimConfig {
            compute_nodes: 2,
            seed: post,
            faults: remora_poller::sim::Faults::none().crash_client_at_post(0, post),
            ..SimConfig::default()
        })
        .unwrap();
        sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
        let dying = sim.client(0).unwrap();
        assert_eq!(dying.client_id(), 0);
        sim.spawn_with(&dying, 0, move |ctx| async move {
            let t = Canrt::open(ctx.ep(), cfg_small()).await.unwrap();
            for i in 0..1000u64 {
                t.upsert(&(i % 4).to_be_bytes(), &(1 << 32 | i).to_le_bytes())
                    .await
                    .unwrap();
            }
        });
        let survivor = sim.client(1).unwrap();
        let outcome_ref = &outcome;
        sim.spawn_with(&survivor, 0, move |ctx| async move {
            ctx.sleep(20_000).await;
            let t = Canrt::open(ctx.ep(), cfg_small()).await.unwrap();
            let start = ctx.now_ns();
            let mut out = [0u8; 8];
            let mut result = Ok(());
            for i in 0..200u64 {
                if let Err(e) = t
                    .upsert(&(i % 4).to_be_bytes(), &(2 << 32 | i).to_le_bytes())
                    .await
                {
                    result = Err(e);
                    break;
                }
            }
            for k in 0..4u64 {
                if let Some(n) = t.get(&k.to_be_bytes(), &mut out).await.unwrap() {
                    assert_eq!(n, 8);
                    let v = u64::from_le_bytes(out);
                    assert!(v >> 32 == 1 || v >> 32 == 2, "invented value {v:#x}");
                }
            }
            *outcome_ref.borrow_mut() = Some(result.map(|()| ctx.now_ns() - start));
        });
        let r = sim.run();
        assert_eq!(
            r.unfinished, 1,
            "post {post}: only the dead writer may be unfinished"
        );
        drop(sim);
        match outcome.into_inner() {
            Some(Ok(ns)) if ns > 10_000_000 => slow += 1,
            Some(Ok(_)) => {}
            other => panic!("post {post}: survivor ended with {other:?}"),
        }
    }
    println!("{slow} of 32 crash points left a dead lock holder (a lease each)");
    assert!(slow > 0, "no crash point hit a held lock");
}

/// A long scan racing writers that split data nodes all the time (every split gives every
/// data node a new epoch, so the scan meets stale nodes again and again): it completes, and
/// returns every key present throughout it exactly once, in order. It used to start over
/// on each stale node; with the scanner's retry budget small, it never finished.
#[test]
fn a_long_scan_resumes_through_resizes() {
    const STABLE: u64 = 3_000;
    let done = Cell::new(false);
    let result = RefCell::new(None::<Result<(Vec<u64>, u64), String>>);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 3,
        seed: 7,
        ..SimConfig::default()
    })
    .unwrap();
    let server = CanrtServer::new();
    let stats = server.stats();
    sim.set_handler(0, Box::new(server)).unwrap();
    let loader = sim.client(0).unwrap();
    sim.spawn_with(&loader, 0, move |ctx| async move {
        let t = Canrt::open(ctx.ep(), cfg()).await.unwrap();
        for i in 0..STABLE {
            t.upsert(&(2 * i).to_be_bytes(), &i.to_le_bytes())
                .await
                .unwrap();
        }
    });
    assert_eq!(sim.run().unfinished, 0, "load did not finish");
    let resizes_before = stats.resizes.load(Ordering::Relaxed);
    for w in 1..3u64 {
        let ctx = sim.client(w as usize).unwrap();
        let done = &done;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let t = Canrt::open(ctx.ep(), cfg()).await.unwrap();
            // Ascending keys past the stable ones (the last data node splits every few
            // inserts), until the scan is over.
            for i in 0..200_000u64 {
                if done.get() {
                    break;
                }
                let k = 2 * STABLE + 2 * i + w;
                t.upsert(&k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
            }
        });
    }
    let scanner = sim.client(0).unwrap();
    let (done, result) = (&done, &result);
    sim.spawn_with(&scanner, 0, move |ctx| async move {
        let small = CanrtConfig {
            read_retries: 16,
            ..cfg()
        };
        let t = Canrt::open(ctx.ep(), small).await.unwrap();
        ctx.sleep(50_000).await;
        let mut keys = Vec::new();
        let r = t
            .scan(&0u64.to_be_bytes(), usize::MAX, &mut |k, _| {
                keys.push(u64::from_be_bytes(k.try_into().unwrap()))
            })
            .await;
        done.set(true);
        let resumes = t.scan_resumes();
        *result.borrow_mut() = Some(r.map(|_| (keys, resumes)).map_err(|e| e.to_string()));
    });
    assert_eq!(sim.run().unfinished, 0, "scan or writers did not finish");
    let resizes = stats.resizes.load(Ordering::Relaxed) - resizes_before;
    let (keys, resumes) = result.borrow_mut().take().unwrap().expect("scan failed");
    println!(
        "{resizes} resizes raced a scan of {} keys: {resumes} resumes",
        keys.len()
    );
    assert!(resizes > 16, "only {resizes} resizes raced the scan");
    // Each resume is owed to a resize published during the scan (at most one per resize).
    assert!(
        resumes > 0 && resumes <= resizes,
        "{resumes} resumes for {resizes} resizes"
    );
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "scan not in order or repeats a key"
    );
    let stable: Vec<u64> = keys.iter().copied().filter(|&k| k < 2 * STABLE).collect();
    assert_eq!(stable, (0..STABLE).map(|i| 2 * i).collect::<Vec<_>>());
}

/// A resize freezes only the data nodes it splits: while it waits for a slow lock holder of
/// the full node, a write to a node it leaves alone completes at once, and lookups stay
/// right. (Before, every data node froze: that write waited until the slow ticket was
/// skipped, leases later, after the resize.)
#[test]
fn writes_to_other_nodes_go_on_during_a_resize() {
    use remora_core::fabric::Endpoint;
    use remora_layouts::GlobalAddr;
    use remora_layouts::canrt::{Control, ControlKind, FRONT_OFF, LOCK_OFF, Meta};
    let out = RefCell::new(None);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        seed: 3,
        ..SimConfig::default()
    })
    .unwrap();
    let server = CanrtServer::new();
    let stats = server.stats();
    sim.set_handler(0, Box::new(server)).unwrap();
    let client = sim.client(0).unwrap();
    let out_ref = &out;
    sim.spawn_with(&client, 0, move |ctx| async move {
        let t = Canrt::open(ctx.ep(), cfg()).await.unwrap();
        for k in 0..200u64 {
            t.upsert(&(k << 20).to_be_bytes(), &k.to_le_bytes())
                .await
                .unwrap();
        }
        let mut w = [0u8; 8];
        t.get(&0u64.to_be_bytes(), &mut w).await.unwrap();
        let v = t.view();
        let qp = ctx.ep().qp(0).unwrap();
        let meta = async |id: u32| {
            let mut b = [0u8; 8];
            let at = GlobalAddr::new(0, v.header.data_node_off(id) + FRONT_OFF);
            qp.read(at, &mut b).await.unwrap();
            Meta(u64::from_le_bytes(b))
        };
        // Take the full node's lock and queue a slow holder behind it, then report it full.
        let full = v.locate(0).unwrap();
        let served = meta(full).await.served();
        let lock = GlobalAddr::new(0, v.header.data_node_off(full) + LOCK_OFF);
        qp.faa(lock, 1).await.unwrap();
        qp.faa(lock, 1).await.unwrap();
        let resizes = stats.resizes.load(Ordering::Relaxed);
        let (e, array) = (v.epoch_tag(), v.header.array_gen);
        let report = Control::new(ControlKind::Resize, e, array, full, served);
        qp.send(&report.encode()).await.unwrap();
        ctx.sleep(5_000).await;
        assert!(meta(full).await.frozen(), "the full node is not frozen");
        // A key whose node the resize leaves alone.
        let mut other = None;
        for k in (0..200u64).map(|k| k << 20) {
            let id = v.locate(u128::from(k)).unwrap();
            if id != full && !meta(id).await.frozen() {
                other = Some(k);
                break;
            }
        }
        let other = other.expect("every data node frozen");
        let start = ctx.now_ns();
        t.upsert(&other.to_be_bytes(), &7u64.to_le_bytes())
            .await
            .unwrap();
        let took = ctx.now_ns() - start;
        let during = stats.resizes.load(Ordering::Relaxed) == resizes;
        t.get(&other.to_be_bytes(), &mut w).await.unwrap();
        let read_back = u64::from_le_bytes(w);
        // The slow holder's turn: it hands its ticket back, the resize finishes.
        let unlock = Control::new(ControlKind::Unlock, e, array, full, served + 1);
        qp.send(&unlock.encode()).await.unwrap();
        t.upsert(&0u64.to_be_bytes(), &9u64.to_le_bytes())
            .await
            .unwrap();
        let mut wrong = 0;
        for k in 0..200u64 {
            let want = match k << 20 {
                0 => 9,
                x if x == other => 7,
                _ => k,
            };
            t.get(&(k << 20).to_be_bytes(), &mut w).await.unwrap();
            wrong += (u64::from_le_bytes(w) != want) as u32;
        }
        let done = stats.resizes.load(Ordering::Relaxed) - resizes;
        *out_ref.borrow_mut() = Some((took, during, read_back, done, wrong));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let (took, during, read_back, done, wrong) = out.into_inner().unwrap();
    println!("a write to another node took {took} ns during the resize");
    assert!(during, "the write waited for the resize ({took} ns)");
    assert!(took < 1_000_000, "the write took {took} ns");
    assert_eq!(read_back, 7);
    assert!(done >= 1, "the resize never finished");
    assert_eq!(wrong, 0, "lookups after the resize");
}

/// A writer queued behind a dead lock holder while a split of another data node gives every
/// node a new epoch: its view is now stale, and it still reports the dead ticket after a
/// lease, so the server skips it and the write goes on (hands its turn back, writes again on
/// the new tree). It used to re-read the node on every poll because of the epoch and never
/// report the stuck ticket: it waited until `lock_polls` ran out (2 million polls in the
/// default configuration, hours; the rare `lin_soft canrt` run that never finished).
#[test]
fn a_waiter_with_a_stale_view_still_reports_a_dead_ticket() {
    use remora_core::fabric::Endpoint;
    use remora_layouts::GlobalAddr;
    use remora_layouts::canrt::{Control, ControlKind, FRONT_OFF, LOCK_OFF, Meta};
    let out = RefCell::new(None);
    let waiting = Cell::new(None::<u32>);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        seed: 5,
        ..SimConfig::default()
    })
    .unwrap();
    let server = CanrtServer::new();
    let stats = server.stats();
    sim.set_handler(0, Box::new(server)).unwrap();
    // Polls enough for many leases of waiting, not for the old endless wait.
    let wcfg = CanrtConfig {
        lock_polls: 20_000,
        ..cfg()
    };
    let lease = wcfg.lease.lease_ns;
    let setup = sim.client(0).unwrap();
    let waiting_ref = &waiting;
    let stats_ref = stats.clone();
    sim.spawn_with(&setup, 0, move |ctx| async move {
        let t = Canrt::open(ctx.ep(), cfg()).await.unwrap();
        for k in 0..40u64 {
            t.upsert(&(k << 20).to_be_bytes(), &k.to_le_bytes())
                .await
                .unwrap();
        }
        let v = t.view();
        let qp = ctx.ep().qp(0).unwrap();
        let word = async |at: GlobalAddr| {
            let mut b = [0u8; 8];
            qp.read(at, &mut b).await.unwrap();
            u64::from_le_bytes(b)
        };
        let node_of = |k: u64| v.locate(u128::from(k << 20)).unwrap();
        let (x, y) = (node_of(0), node_of(39));
        assert_ne!(x, y, "one data node holds every key");
        let lock = |id: u32| GlobalAddr::new(0, v.header.data_node_off(id) + LOCK_OFF);
        let front = |id: u32| GlobalAddr::new(0, v.header.data_node_off(id) + FRONT_OFF);
        // A dead holder on node x: its ticket is served, it never appends nor hands back.
        qp.faa(lock(x), 1).await.unwrap();
        waiting_ref.set(Some(x));
        // Wait until the writer queued behind it.
        let served = Meta(word(front(x)).await).served();
        while word(lock(x)).await.wrapping_sub(served) & 0xffff < 2 {
            ctx.sleep(1_000).await;
        }
        // Split node y: take its lock and report it full (it drains at once).
        let ticket = Meta(word(front(y)).await).served();
        qp.faa(lock(y), 1).await.unwrap();
        let resizes = stats_ref.resizes.load(Ordering::Relaxed);
        let c = Control::new(
            ControlKind::Resize,
            v.epoch_tag(),
            v.header.array_gen,
            y,
            ticket,
        );
        qp.send(&c.encode()).await.unwrap();
        ctx.sleep(100_000).await;
        assert!(
            stats_ref.resizes.load(Ordering::Relaxed) > resizes,
            "the split did not happen"
        );
    });
    let writer = sim.client(1).unwrap();
    let out_ref = &out;
    sim.spawn_with(&writer, 0, move |ctx| async move {
        let t = Canrt::open(ctx.ep(), wcfg).await.unwrap();
        while waiting_ref.get().is_none() {
            ctx.sleep(1_000).await;
        }
        let start = ctx.now_ns();
        let r = t.upsert(&0u64.to_be_bytes(), &7u64.to_le_bytes()).await;
        let took = ctx.now_ns() - start;
        let mut w = [0u8; 8];
        let got = t.get(&0u64.to_be_bytes(), &mut w).await.unwrap();
        *out_ref.borrow_mut() = Some((r.map_err(|e| e.to_string()), took, got, w));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let (r, took, got, w) = out.into_inner().unwrap();
    println!("the write behind a dead holder took {took} ns ({r:?})");
    assert_eq!(r, Ok(()), "the write behind the dead ticket failed");
    assert!(
        stats.skipped.load(Ordering::Relaxed) >= 1,
        "the dead ticket was never skipped"
    );
    assert!(took < 20 * lease, "the write took {took} ns");
    assert_eq!((got, u64::from_le_bytes(w)), (Some(8), 7));
}

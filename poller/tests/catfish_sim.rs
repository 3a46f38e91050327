//! Catfish on the deterministic sim: four compute nodes insert concurrently through the
//! server, then search in every mode against a brute-force oracle; offloaded searches
//! interleaved with inserts at verb granularity never miss an entry inserted before they
//! began nor invent one; the adaptive mode follows the server's reported load.
use remora_core::catfish::{CatfishClient, CatfishServer, Entry, Mode, Rect, Transport};
use remora_core::fabric::{Endpoint, QueuePair, SegmentOrder};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

const SPACE: i32 = 50_000;
const CLIENTS: usize = 4;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn data_rect(i: u64) -> Rect {
    let h = mix(i + 17);
    let x = (h % SPACE as u64) as i32;
    let y = ((h >> 20) % SPACE as u64) as i32;
    let w = ((h >> 40) % 1500) as i32;
    let d = ((h >> 52) % 1500) as i32;
    Rect::new(x, y, x + w, y + d).unwrap()
}

fn query_rect(seed: u64) -> Rect {
    let h = mix(seed ^ 0x5eed);
    let x = (h % SPACE as u64) as i32 - 3000;
    let y = ((h >> 20) % SPACE as u64) as i32 - 3000;
    let w = ((h >> 40) % 8000) as i32;
    Rect::new(x, y, x + w, y + w + 1).unwrap()
}

fn oracle(ids: impl Iterator<Item = u64>, q: &Rect) -> Vec<u64> {
    let mut v: Vec<u64> = ids.filter(|&i| data_rect(i).intersects(q)).collect();
    v.sort_unstable();
    v
}

fn ids_of(hits: &[Entry]) -> Vec<u64> {
    let mut v: Vec<u64> = hits.iter().map(|e| e.ptr).collect();
    v.sort_unstable();
    v
}

fn sim<'a>(seed: u64, probe: Option<Arc<AtomicU32>>) -> Sim<'a> {
    sim_in(seed, probe, SegmentOrder::default())
}

/// A sim whose READs and WRITEs move their segments in `order`, with a formatted tree.
fn sim_in<'a>(seed: u64, probe: Option<Arc<AtomicU32>>, order: SegmentOrder) -> Sim<'a> {
    sim_model(seed, probe, order, remora_poller::sim::Model::default())
}

/// [`sim_in`] under `model`.
fn sim_model<'a>(
    seed: u64,
    probe: Option<Arc<AtomicU32>>,
    order: SegmentOrder,
    model: remora_poller::sim::Model,
) -> Sim<'a> {
    let mut sim = Sim::new(SimConfig {
        compute_nodes: CLIENTS,
        seed,
        chunk_size: 128 << 10,
        segment_order: order,
        model,
        ..SimConfig::default()
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    let mut server = CatfishServer::new(max);
    if let Some(p) = probe {
        server = server.with_load_probe(p);
    }
    sim.set_handler(0, Box::new(server)).unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, |ctx| async move {
        CatfishClient::create(ctx.qp(0).unwrap(), 1).await.unwrap();
    });
    assert_eq!(sim.run().unfinished, 0, "creating the tree did not finish");
    sim
}

#[test]
fn sim_searches_match_the_oracle_in_every_mode() {
    const PER: u64 = 300;
    for seed in [1, 2] {
        let failures = RefCell::new(Vec::<String>::new());
        let figures = RefCell::new(Vec::new());
        let mut sim = sim(seed, None);
        for n in 0..CLIENTS {
            let ctx = sim.client(n).unwrap();
            let (failures, figures) = (&failures, &figures);
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let qp = ctx.qp(0).unwrap();
                let mut c = CatfishClient::open(qp).await.unwrap();
                if n % 2 == 1 {
                    c.set_transport(Transport::WriteImm);
                }
                let t = n as u64;
                for i in t * PER..(t + 1) * PER {
                    c.insert(qp, data_rect(i), i).await.unwrap();
                }
                // Wait until every client's inserts are in: poll the whole tree.
                let all = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
                let mut hits = Vec::new();
                loop {
                    hits.clear();
                    c.search(qp, all, Mode::Messaging, &mut hits).await.unwrap();
                    if hits.len() as u64 == CLIENTS as u64 * PER {
                        break;
                    }
                    ctx.sleep(20_000).await;
                }
                let everyone = 0..CLIENTS as u64 * PER;
                for mode in [Mode::Messaging, Mode::Offload, Mode::Adaptive] {
                    let before = qp.counters().snapshot();
                    let t0 = ctx.now_ns();
                    let n = 40;
                    for k in 0..n {
                        let q = query_rect(t * 1000 + k);
                        hits.clear();
                        c.search(qp, q, mode, &mut hits).await.unwrap();
                        if ids_of(&hits) != oracle(everyone.clone(), &q) {
                            failures.borrow_mut().push(format!("{mode:?} {q:?}"));
                        }
                    }
                    let after = qp.counters().snapshot();
                    let rt = after.round_trips - before.round_trips;
                    if (mode == Mode::Messaging && rt != n) || rt > 4 * n {
                        failures
                            .borrow_mut()
                            .push(format!("{mode:?}: {rt} round trips"));
                    }
                    figures.borrow_mut().push((
                        mode,
                        (after.round_trips - before.round_trips) as f64 / n as f64,
                        (after.posted_verbs() - before.posted_verbs()) as f64 / n as f64,
                        (after.bytes_in - before.bytes_in) as f64 / n as f64,
                        (ctx.now_ns() - t0) as f64 / n as f64,
                    ));
                }
                hits.clear();
                c.search(qp, all, Mode::Offload, &mut hits).await.unwrap();
                if ids_of(&hits) != everyone.collect::<Vec<_>>() {
                    failures.borrow_mut().push("offloaded full scan".into());
                }
            });
        }
        let r = sim.run();
        assert_eq!(r.unfinished, 0, "seed {seed}: clients never finished");
        let f = failures.borrow();
        assert!(
            f.is_empty(),
            "seed {seed}: {} wrong answers, first {}",
            f.len(),
            f[0]
        );
        for (mode, rt, verbs, bytes, ns) in figures.borrow().iter() {
            println!(
                "seed {seed} {mode:?}: {rt:.2} round trips, {verbs:.2} verbs, {bytes:.0} bytes in, {ns:.0} ns per search"
            );
        }
    }
}

/// Offloading searches racing the server's in-place node rewrites, READ segments landing
/// in any order (and in ascending order, the old fabric): every search finds every entry
/// inserted before it began and invents none. (A rewrite seldom falls inside one node
/// READ here; the torn images themselves are tested in `remora_core::catfish`'s unit tests
/// and on the soft fabric.)
#[test]
fn sim_offloaded_searches_interleaved_with_inserts_are_exact() {
    for seed in [3, 4, 5] {
        interleaved(seed, SegmentOrder::Shuffled);
    }
    interleaved(3, SegmentOrder::Ascending);
}

/// The same race with the server's stores in flight over its service (model
/// `server_store_window`, the `catfish` profile's): readers catch node rewrites half done,
/// read them again, and still answer exactly. Without the window a READ tears only when its
/// segments straddle the one instant a handler's stores land, so fewer images tear.
#[test]
fn sim_offloaded_searches_catch_rewrites_in_flight_and_stay_exact() {
    let (mut on, mut off) = (0, 0);
    for seed in [3, 4, 5] {
        let mut m = remora_poller::sim::Model::default();
        m.set("server_store_window", "1").unwrap();
        on += interleaved_in(seed, SegmentOrder::Shuffled, m);
        off += interleaved_in(
            seed,
            SegmentOrder::Shuffled,
            remora_poller::sim::Model::default(),
        );
    }
    println!("torn images re-read: {on} with the window, {off} without");
    assert!(on > off, "{on} torn images with the window, {off} without");
}

/// One run of the race.
fn interleaved(seed: u64, order: SegmentOrder) {
    interleaved_in(seed, order, remora_poller::sim::Model::default());
}

/// One run of the race under `model`; returns the torn node images read again.
fn interleaved_in(seed: u64, order: SegmentOrder, model: remora_poller::sim::Model) -> u64 {
    const N: u64 = 800;
    let begun = Cell::new(0u64);
    let done = Cell::new(0u64);
    let torn = Cell::new(0u64);
    let failures = RefCell::new(Vec::<String>::new());
    let mut sim = sim_model(seed, None, order, model);
    let writer = sim.client(0).unwrap();
    let (b, d) = (&begun, &done);
    sim.spawn_with(&writer, 0, move |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut c = CatfishClient::open(qp).await.unwrap();
        for i in 0..N {
            b.set(i + 1);
            c.insert(qp, data_rect(i), i).await.unwrap();
            d.set(i + 1);
        }
    });
    for n in 1..CLIENTS {
        let ctx = sim.client(n).unwrap();
        let (b, d, failures, torn) = (&begun, &done, &failures, &torn);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::open(qp).await.unwrap();
            let mut hits = Vec::new();
            let mut k = 0;
            loop {
                let finished = d.get();
                let q = query_rect(n as u64 * 10_000 + k);
                k += 1;
                hits.clear();
                c.search(qp, q, Mode::Offload, &mut hits).await.unwrap();
                let got = ids_of(&hits);
                let must = oracle(0..finished, &q);
                let may = oracle(0..b.get(), &q);
                if !must.iter().all(|i| got.binary_search(i).is_ok())
                    || !got.iter().all(|i| may.binary_search(i).is_ok())
                {
                    failures.borrow_mut().push(format!("{q:?}: {got:?}"));
                }
                if finished == N {
                    break;
                }
            }
            torn.set(torn.get() + c.stats().torn_retries);
        });
    }
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    let f = failures.borrow();
    assert!(
        f.is_empty(),
        "seed {seed}, {order:?}: {} wrong answers, first {}",
        f.len(),
        f[0]
    );
    println!(
        "seed {seed}, {order:?}: {} torn node images re-read",
        torn.get()
    );
    torn.get()
}

#[test]
fn sim_adaptive_mode_follows_the_reported_load() {
    let probe = Arc::new(AtomicU32::new(200));
    let modes = RefCell::new(Vec::<(u32, Mode)>::new());
    let mut sim = sim(4, Some(probe.clone()));
    let ctx = sim.client(1).unwrap();
    let (modes_ref, p) = (&modes, probe.clone());
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut c = CatfishClient::open(qp).await.unwrap();
        for i in 0..200 {
            c.insert(qp, data_rect(i), i).await.unwrap();
        }
        let mut hits = Vec::new();
        for phase in [200u32, 990, 200] {
            p.store(phase, Ordering::Relaxed);
            for k in 0..150 {
                let q = query_rect(k);
                hits.clear();
                let m = c.search(qp, q, Mode::Adaptive, &mut hits).await.unwrap();
                assert_eq!(ids_of(&hits), oracle(0..200, &q));
                modes_ref.borrow_mut().push((phase, m));
            }
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let modes = modes.into_inner();
    let offloaded = |range: std::ops::Range<usize>| {
        modes[range]
            .iter()
            .filter(|(_, m)| *m == Mode::Offload)
            .count()
    };
    assert_eq!(offloaded(0..150), 0, "calm server: all messaging");
    let busy = offloaded(150..300);
    assert!(busy > 120, "busy server: most offloaded, got {busy}/150");
    assert_eq!(
        modes[449].1,
        Mode::Messaging,
        "calm again: back to messaging"
    );
    println!(
        "adaptive: offloaded {busy}/150 while busy, {} of the 150 after",
        offloaded(300..450)
    );
}

/// A sim of `clients` client threads (spread over the compute nodes) with a formatted tree,
/// the server built by `server` and the faults given.
fn sim_with<'a>(
    seed: u64,
    faults: remora_poller::sim::Faults,
    server: impl FnOnce(usize) -> CatfishServer,
) -> Sim<'a> {
    let mut sim = Sim::new(SimConfig {
        compute_nodes: CLIENTS,
        seed,
        chunk_size: 128 << 10,
        faults,
        ..SimConfig::default()
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    sim.set_handler(0, Box::new(server(max))).unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, |ctx| async move {
        CatfishClient::create(ctx.qp(0).unwrap(), 1).await.unwrap();
    });
    assert_eq!(sim.run().unfinished, 0, "creating the tree did not finish");
    sim
}

/// Issue 14.4: with no load probe the server measures its CPU by the sim's real busy time
/// (`LocalRegion::cpu_clock`), not by counting events (which read 100 % on the sim, where the
/// loop never idles, and sent 95-97 % of one lone client's searches to offloading). One
/// client leaves the server mostly idle: almost all searches go by messaging. Many clients
/// saturate it: the heartbeats say so and the clients offload.
#[test]
fn sim_adaptive_mode_follows_the_measured_cpu_load() {
    const DATA: u64 = 300;
    let run = |threads: usize, searches: u64, heartbeats: bool| {
        let counts = RefCell::new((0u64, 0u64, 0u64));
        let mut sim = sim_with(11, remora_poller::sim::Faults::none(), |max| {
            CatfishServer::new(max).with_heartbeat_interval_ns(100_000)
        });
        let ctx = sim.client(0).unwrap();
        sim.spawn_with(&ctx, 0, |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::open(qp).await.unwrap();
            for i in 0..DATA {
                c.insert(qp, data_rect(i), i).await.unwrap();
            }
        });
        assert_eq!(sim.run().unfinished, 0);
        let busy0 = sim.server_busy_ns(0).unwrap();
        let t0 = sim.now_ns();
        for t in 0..threads {
            let ctx = sim.client(t % CLIENTS).unwrap();
            let counts = &counts;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let qp = ctx.qp(0).unwrap();
                let mut c = CatfishClient::open(qp).await.unwrap();
                c.set_backoff(Default::default(), t as u64 + 1);
                c.set_heartbeat_interval_ns(100_000);
                let mut hits = Vec::new();
                for k in 0..searches {
                    let q = query_rect(t as u64 * 1000 + k);
                    hits.clear();
                    let m = if heartbeats {
                        c.search_adaptive(ctx.ep(), q, &mut hits).await.unwrap()
                    } else {
                        c.search(qp, q, Mode::Adaptive, &mut hits).await.unwrap()
                    };
                    let mut n = counts.borrow_mut();
                    n.0 += 1;
                    n.1 += u64::from(m == Mode::Offload);
                    n.2 += u64::from(ids_of(&hits) != oracle(0..DATA, &q));
                }
            });
        }
        assert_eq!(sim.run().unfinished, 0);
        let util = (sim.server_busy_ns(0).unwrap() - busy0) as f64 / (sim.now_ns() - t0) as f64;
        drop(sim);
        let (n, off, wrong) = counts.into_inner();
        assert_eq!(wrong, 0, "wrong answers");
        (off as f64 / n as f64, util)
    };
    // Load piggybacked on replies (Mode::Adaptive), then Algorithm 1's heartbeats.
    for heartbeats in [false, true] {
        let (lone, lone_util) = run(1, 600, heartbeats);
        let (crowd, crowd_util) = run(64, 60, heartbeats);
        println!(
            "heartbeats {heartbeats}: 1 client: {:.1} % offloaded (server CPU {:.0} %); \
             64 clients: {:.1} % offloaded (server CPU {:.0} %)",
            lone * 100.0,
            lone_util * 100.0,
            crowd * 100.0,
            crowd_util * 100.0
        );
        assert!(lone < 0.05, "one client offloaded {:.1} %", lone * 100.0);
        assert!(
            crowd > 0.2,
            "a saturated server offloaded only {:.1} %",
            crowd * 100.0
        );
    }
}

/// Issue 10: a client that dies in the middle of a long search reply (at any of its first
/// posts) leaves the server serving everyone else, right.
#[test]
fn sim_a_client_dying_mid_request_leaves_the_others_served() {
    const DATA: u64 = 1200;
    for crash_at in [3u64, 4, 5, 6, 8] {
        // Client 0 only asks the message size, client 1 creates the tree, client 2 fills
        // it, client 3 dies, 4 and 5 search.
        let faults = remora_poller::sim::Faults::none().crash_client_at_post(3, crash_at);
        let filled = Cell::new(false);
        let wrong = Cell::new(0u32);
        let mut sim = sim_with(21 + crash_at, faults, |max| {
            CatfishServer::new(max).with_window(2)
        });
        let everything = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
        let ctx = sim.client(1).unwrap();
        let f = &filled;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::open(qp).await.unwrap();
            for i in 0..DATA {
                c.insert(qp, data_rect(i), i).await.unwrap();
            }
            f.set(true);
        });
        for t in 3..6u64 {
            let ctx = sim.client(t as usize % CLIENTS).unwrap();
            assert_eq!(ctx.client_id() as u64, t);
            let (f, wrong) = (&filled, &wrong);
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                while !f.get() {
                    ctx.sleep(50_000).await;
                }
                let qp = ctx.qp(0).unwrap();
                let mut c = CatfishClient::open(qp).await.unwrap();
                if t == 3 {
                    c.set_transport(Transport::WriteImm);
                }
                let mut hits = Vec::new();
                for k in 0..5 {
                    hits.clear();
                    c.search(qp, everything, Mode::Messaging, &mut hits)
                        .await
                        .unwrap();
                    if hits.len() as u64 != DATA {
                        wrong.set(wrong.get() + 1);
                    }
                    let q = query_rect(t * 100 + k);
                    hits.clear();
                    c.search(qp, q, Mode::Messaging, &mut hits).await.unwrap();
                    if ids_of(&hits) != oracle(0..DATA, &q) {
                        wrong.set(wrong.get() + 1);
                    }
                }
            });
        }
        let r = sim.run();
        drop(sim);
        assert_eq!(
            r.unfinished, 1,
            "crash at post {crash_at}: only the dead client stops"
        );
        assert_eq!(wrong.get(), 0, "crash at post {crash_at}: wrong answers");
    }
}

/// Issue 14.5: the fanout is chosen when the tree is created (the paper's 15/30/70/130);
/// every other client learns it from the superblock and sizes its node READs by it.
#[test]
fn sim_trees_of_the_papers_fanouts_answer_right() {
    const DATA: u64 = 400;
    for fanout in [15usize, 30, 70, 130] {
        let wrong = RefCell::new(Vec::<String>::new());
        let mut sim = Sim::new(SimConfig {
            compute_nodes: CLIENTS,
            seed: fanout as u64,
            chunk_size: 128 << 10,
            ..SimConfig::default()
        })
        .unwrap();
        let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
        sim.set_handler(0, Box::new(CatfishServer::new(max)))
            .unwrap();
        let c0 = sim.client(0).unwrap();
        sim.spawn_with(&c0, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::create_with_fanout(qp, 1, fanout)
                .await
                .unwrap();
            for i in 0..DATA {
                c.insert(qp, data_rect(i), i).await.unwrap();
            }
        });
        assert_eq!(sim.run().unfinished, 0);
        let ctx = sim.client(1).unwrap();
        let w = &wrong;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::open(qp).await.unwrap();
            if c.fanout() != fanout {
                w.borrow_mut()
                    .push(format!("opened with fanout {}", c.fanout()));
            }
            let mut hits = Vec::new();
            for mode in [Mode::Messaging, Mode::Offload] {
                for k in 0..30 {
                    let q = query_rect(k);
                    hits.clear();
                    c.search(qp, q, mode, &mut hits).await.unwrap();
                    if ids_of(&hits) != oracle(0..DATA, &q) {
                        w.borrow_mut().push(format!("{mode:?} {q:?}"));
                    }
                }
            }
        });
        assert_eq!(sim.run().unfinished, 0);
        drop(sim);
        let wrong = wrong.into_inner();
        assert!(wrong.is_empty(), "fanout {fanout}: {wrong:?}");
    }
}

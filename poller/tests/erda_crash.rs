//! Erda survives dead clients at every verb (issue 10's must-show, with issue 12's log
//! cleaning), on the simulated cluster: a client dies at every doorbell of one insert,
//! update, delete, get, or a write made while its head is being cleaned (by post count,
//! across seeds), while six others race on the same hot keys. The survivors all finish
//! without an error, the history is linearizable (the dead client's last operation pending:
//! it may or may not have happened), and virtual time stays bounded. Prints the crash points
//! covered and the survivors' stalls. `ERDA_CRASH_SEEDS=n` runs seeds 1..=n (default 2).
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::fabric::{Endpoint, QueuePair};
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::hot_key;
use remora_core::lincheck::{Op, Outcome, tag};
use remora_layouts::GlobalAddr;
use remora_layouts::erda::HeadState;
use remora_poller::sim::{Faults, Sim, SimConfig};
use std::cell::Cell;

#[path = "common/survivors.rs"]
mod survivors;
use survivors::{Survivors, pct};
#[path = "common/env.rs"]
mod env;
use env::env_count;

const SURVIVORS: u32 = 6;
const OPS: u64 = 40;
/// Virtual time a run may take: a grant left in flight costs its key's writers about one
/// lease (100 ms) and a fence.
const BOUND_NS: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Insert,
    Update,
    Delete,
    Get,
    /// An update made once the dying client saw its head's state word say "cleaning".
    CleaningWrite,
}

/// One head of four 32 KiB regions; a cleaning starts after 8 KiB of appends.
fn store() -> ErdaConfig {
    ErdaConfig {
        heads: 1,
        buckets: 2048,
        segment_bytes: 8192,
        head_bytes: 4 * 32768,
        regions: 4,
        clean_permille: 250,
        ..ErdaConfig::small()
    }
}

struct Run {
    /// The dying client's doorbells before and after its target operation (dry run only).
    posts: (u64, u64),
    /// Whether the head was cleaning when the target operation started.
    cleaning: bool,
    /// Survivors' operation latencies (ns).
    latencies: Vec<u64>,
    end_ns: u64,
}

async fn head_cleaning<E: Endpoint>(ep: &E, e: &Erda<'_, E>) -> bool {
    let mut w = [0u8; 8];
    let at = GlobalAddr::new(0, e.superblock().head_state_off(0));
    ep.qp(0).unwrap().read(at, &mut w).await.unwrap();
    HeadState::decode(u64::from_le_bytes(w)).is_ok_and(|s| s.cleaning())
}

fn run(seed: u64, kind: Kind, crash: Option<u64>) -> Run {
    let mut faults = Faults::none();
    if let Some(p) = crash {
        faults = faults.crash_client_at_post(0, p);
    }
    let survivors = Survivors::new(SURVIVORS, OPS);
    let rec = &survivors.rec;
    let posts = Cell::new((0u64, 0u64));
    let cleaning = Cell::new(false);
    // Set when the dying client starts its target operation: the survivors start then.
    let go = Cell::new(false);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 16 << 20,
        seed,
        faults,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(store())))
        .unwrap();
    let cfg = ErdaClientConfig::default();
    // The client that dies: client 0 of the sim, lincheck client 1.
    let dying = sim.client(0).unwrap();
    {
        let (posts, cleaning, go) = (&posts, &cleaning, &go);
        sim.spawn_with(&dying, 0, move |ctx| async move {
            let e = Erda::open(ctx.ep(), cfg).await.unwrap();
            let qp = ctx.ep().qp(0).unwrap();
            // Filler keys outside the checked key space: about 20 KiB of live data, so
            // cleanings start and take a while.
            for i in 0..150u32 {
                e.upsert(format!("fill{i}").as_bytes(), &[7u8; 100])
                    .await
                    .unwrap();
            }
            for (seq, k) in [(1, 0), (2, 1)] {
                let kb = hot_key(k);
                let v = tag(1, seq);
                let key = u64::from_be_bytes(kb);
                let slot = rec
                    .invoke(1, Op::Upsert { key, value: v }, ctx.now_ns())
                    .unwrap();
                e.upsert(&kb, &v.to_le_bytes()).await.unwrap();
                rec.complete(slot, Outcome::Done, ctx.now_ns());
            }
            if kind == Kind::CleaningWrite {
                let mut i = 0u32;
                while !head_cleaning(ctx.ep(), &e).await {
                    e.upsert(format!("fill{}", i % 150).as_bytes(), &[8u8; 100])
                        .await
                        .unwrap();
                    i += 1;
                    assert!(i < 2000, "no cleaning started");
                }
            }
            cleaning.set(head_cleaning(ctx.ep(), &e).await);
            go.set(true);
            let before = qp.counters().snapshot().doorbells;
            let kb = hot_key(0);
            let key = u64::from_be_bytes(kb);
            let v = tag(1, 100);
            let (slot, r) = match kind {
                Kind::Insert => {
                    let s = rec
                        .invoke(1, Op::Upsert { key, value: v }, ctx.now_ns())
                        .unwrap();
                    let r = e.upsert(&kb, &v.to_le_bytes()).await;
                    (s, r.map(|()| Outcome::Done))
                }
                Kind::Update | Kind::CleaningWrite => {
                    let s = rec
                        .invoke(1, Op::Update { key, value: v }, ctx.now_ns())
                        .unwrap();
                    let r = e.update(&kb, &v.to_le_bytes()).await;
                    (s, r.map(Outcome::Present))
                }
                Kind::Delete => {
                    let s = rec.invoke(1, Op::Delete { key }, ctx.now_ns()).unwrap();
                    (s, e.delete(&kb).await.map(Outcome::Present))
                }
                Kind::Get => {
                    let s = rec.invoke(1, Op::Get { key }, ctx.now_ns()).unwrap();
                    let mut out = [0u8; 8];
                    let r = e.get(&kb, &mut out).await;
                    let o = r.map(|g| Outcome::Value(g.map(|_| u64::from_le_bytes(out))));
                    (s, o)
                }
            };
            rec.complete(slot, r.unwrap(), ctx.now_ns());
            posts.set((before, qp.counters().snapshot().doorbells));
        });
    }
    for node in 1..4 {
        for c in 0..2u32 {
            let ctx = sim.client(node).unwrap();
            let (survivors, go) = (&survivors, &go);
            let client = 2 + (node as u32 - 1) * 2 + c;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                // Start as the dying client starts its operation (or dies before), staggered
                // by seed: with it, or just after.
                let mut waited = 0u64;
                while !go.get() && waited < 5_000_000 {
                    ctx.sleep(1_000).await;
                    waited += 1_000;
                }
                ctx.sleep((seed % 3) * 2_000 + 500 * c as u64 + 300 * node as u64)
                    .await;
                match Erda::open(ctx.ep(), cfg).await {
                    Ok(e) => survivors.run(&e, client, OPS, seed, || ctx.now_ns()).await,
                    Err(err) => survivors.fail(format!("client {client}: open: {err}")),
                }
            });
        }
    }
    let r = sim.run();
    drop(sim);
    let at = format!("seed {seed} {kind:?} crash {crash:?}");
    let latencies = survivors.check(&at, &r, crash.is_some(), BOUND_NS);
    Run {
        posts: posts.get(),
        cleaning: cleaning.get(),
        latencies,
        end_ns: r.now_ns,
    }
}

#[test]
fn a_client_dying_at_any_verb_of_any_operation_leaves_the_others_going() {
    let seeds = env_count("ERDA_CRASH_SEEDS", 2);
    let kinds = [
        Kind::Insert,
        Kind::Update,
        Kind::Delete,
        Kind::Get,
        Kind::CleaningWrite,
    ];
    let mut points = Vec::new();
    let mut worst = Vec::new();
    let mut all = Vec::new();
    let mut longest_run = 0;
    for seed in 1..=seeds {
        for kind in kinds {
            let dry = run(seed, kind, None);
            let (a, b) = dry.posts;
            assert!(
                b > a,
                "seed {seed} {kind:?}: the operation rang no doorbell"
            );
            if kind == Kind::CleaningWrite {
                assert!(
                    dry.cleaning,
                    "seed {seed}: the write was not made while cleaning"
                );
            }
            for post in a..b {
                let mut r = run(seed, kind, Some(post));
                points.push((kind, post - a));
                longest_run = longest_run.max(r.end_ns);
                worst.push(r.latencies.iter().copied().max().unwrap_or(0));
                all.append(&mut r.latencies);
            }
        }
    }
    for kind in kinds {
        let n = points.iter().filter(|p| p.0 == kind).count();
        println!("{kind:?}: {n} crash points");
    }
    println!(
        "{} crash points ({seeds} seeds x insert/update/delete/get/write-while-cleaning, every \
         doorbell); longest run {longest_run} ns virtual",
        points.len()
    );
    println!(
        "survivors' operation latency: p50 {} ns, p99 {} ns; longest stall per crash point: \
         p50 {} ns, p99 {} ns",
        pct(&mut all, 50),
        pct(&mut all, 99),
        pct(&mut worst, 50),
        pct(&mut worst, 99)
    );
    for kind in kinds {
        assert!(
            points.iter().filter(|p| p.0 == kind).count() >= seeds as usize,
            "{kind:?}: no crash point"
        );
    }
}

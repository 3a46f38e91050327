//! CANRT survives dead clients (issue 10), on the simulated cluster: a writer dies at every
//! doorbell of one insert, update or delete (by post count, across seeds) while six others
//! race on the same hot keys. The survivors all finish without an error (no `LockTimeout`:
//! a ticket its holder never uses is skipped after a lease), the history is linearizable
//! (the dead writer's last operation pending: it may or may not have happened), and virtual
//! time stays bounded. Prints the crash points covered and the survivors' time to progress.
//! `CANRT_CRASH_SEEDS=n` runs seeds 1..=n (CI: 6).
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
use remora_core::fabric::{Endpoint, QueuePair};
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::hot_key;
use remora_core::lincheck::{Op, Outcome, tag};
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
/// Virtual time a run may take: a dead ticket costs its waiters about one lease (10 ms).
const BOUND_NS: u64 = 200_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Insert,
    Update,
    Delete,
}

fn cfg() -> CanrtConfig {
    CanrtConfig {
        slots: 8,
        ..CanrtConfig::new(0)
    }
}

/// What one run saw.
struct Run {
    /// The dying writer's doorbells before and after its target operation (dry run only).
    posts: (u64, u64),
    /// Survivors' operation latencies (ns).
    latencies: Vec<u64>,
    end_ns: u64,
    skipped: u64,
}

/// One run of `kind` on `seed`, the writer dying at its doorbell `crash` (None: it lives).
fn run(seed: u64, kind: Kind, crash: Option<u64>) -> Run {
    let mut faults = Faults::none();
    if let Some(p) = crash {
        faults = faults.crash_client_at_post(0, p);
    }
    let survivors = Survivors::new(SURVIVORS, OPS);
    let rec = &survivors.rec;
    let posts = Cell::new((0u64, 0u64));
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 16 << 20,
        seed,
        faults,
        ..SimConfig::default()
    })
    .unwrap();
    let server = CanrtServer::new();
    let stats = server.stats();
    sim.set_handler(0, Box::new(server)).unwrap();
    // The writer that dies: client 0 of the sim, lincheck client 1.
    let dying = sim.client(0).unwrap();
    {
        let posts = &posts;
        sim.spawn_with(&dying, 0, move |ctx| async move {
            let t = Canrt::open(ctx.ep(), cfg()).await.unwrap();
            let qp = ctx.ep().qp(0).unwrap();
            let key = u64::from_be_bytes(hot_key(0));
            for (seq, k) in [(1, 0), (2, 1)] {
                let kb = hot_key(k);
                let v = tag(1, seq);
                let slot = rec
                    .invoke(
                        1,
                        Op::Upsert {
                            key: u64::from_be_bytes(kb),
                            value: v,
                        },
                        ctx.now_ns(),
                    )
                    .unwrap();
                t.upsert(&kb, &v.to_le_bytes()).await.unwrap();
                rec.complete(slot, Outcome::Done, ctx.now_ns());
            }
            let before = qp.counters().snapshot().doorbells;
            let kb = key.to_be_bytes();
            let v = tag(1, 100);
            let (o, r) = match kind {
                Kind::Insert => {
                    let s = rec
                        .invoke(1, Op::Upsert { key, value: v }, ctx.now_ns())
                        .unwrap();
                    (
                        s,
                        t.upsert(&kb, &v.to_le_bytes())
                            .await
                            .map(|()| Outcome::Done),
                    )
                }
                Kind::Update => {
                    let s = rec
                        .invoke(1, Op::Update { key, value: v }, ctx.now_ns())
                        .unwrap();
                    (
                        s,
                        t.update(&kb, &v.to_le_bytes()).await.map(Outcome::Present),
                    )
                }
                Kind::Delete => {
                    let s = rec.invoke(1, Op::Delete { key }, ctx.now_ns()).unwrap();
                    (s, t.delete(&kb).await.map(Outcome::Present))
                }
            };
            rec.complete(o, r.unwrap(), ctx.now_ns());
            posts.set((before, qp.counters().snapshot().doorbells));
        });
    }
    for node in 1..4 {
        for c in 0..2u32 {
            let ctx = sim.client(node).unwrap();
            let survivors = &survivors;
            let client = 2 + (node as u32 - 1) * 2 + c;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                // Odd seeds: race the dying writer from the start (its last operation waits
                // for tickets, and it may die waiting); even: start as it reaches it.
                let start = if seed % 2 == 1 { 0 } else { 15_000 };
                ctx.sleep(start + 2_000 * c as u64).await;
                match Canrt::open(ctx.ep(), cfg()).await {
                    Ok(t) => survivors.run(&t, client, OPS, seed, || ctx.now_ns()).await,
                    Err(e) => survivors.fail(format!("client {client}: open: {e}")),
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
        latencies,
        end_ns: r.now_ns,
        skipped: stats.skipped.load(std::sync::atomic::Ordering::Relaxed),
    }
}

#[test]
fn a_writer_dying_at_any_verb_leaves_the_others_going() {
    let seeds = env_count("CANRT_CRASH_SEEDS", 6);
    let mut points = 0;
    let mut skips = 0;
    let mut worst = Vec::new();
    let mut all = Vec::new();
    let mut longest_run = 0;
    for seed in 1..=seeds {
        for kind in [Kind::Insert, Kind::Update, Kind::Delete] {
            let dry = run(seed, kind, None);
            let (a, b) = dry.posts;
            assert!(
                b > a,
                "seed {seed} {kind:?}: the operation rang no doorbell"
            );
            for post in a..b {
                let mut r = run(seed, kind, Some(post));
                points += 1;
                skips += r.skipped;
                longest_run = longest_run.max(r.end_ns);
                worst.push(r.latencies.iter().copied().max().unwrap_or(0));
                all.append(&mut r.latencies);
            }
        }
    }
    println!(
        "{points} crash points ({seeds} seeds x insert/update/delete, every doorbell); \
         {skips} tickets skipped; longest run {longest_run} ns virtual"
    );
    println!(
        "survivors' operation latency: p50 {} ns, p99 {} ns; longest wait per crash point: \
         p50 {} ns, p99 {} ns",
        pct(&mut all, 50),
        pct(&mut all, 99),
        pct(&mut worst, 50),
        pct(&mut worst, 99)
    );
    assert!(points >= 3 * seeds as usize * 2);
    assert!(skips > 0, "no crash point left a ticket to skip");
}

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
use remora_core::lincheck::driver::{LinSpec, hot_key, lin_client};
use remora_core::lincheck::{CheckConfig, Op, Outcome, Recorder, check, tag};
use remora_poller::sim::{Faults, Sim, SimConfig};
use std::cell::{Cell, RefCell};

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
    let rec = Recorder::new(
        (SURVIVORS as u64 * OPS + 8) as usize,
        (SURVIVORS as u64 * OPS * 17) as usize,
    );
    let errors = RefCell::new(Vec::<String>::new());
    let posts = Cell::new((0u64, 0u64));
    let latencies = RefCell::new(Vec::new());
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
        let (rec, posts) = (&rec, &posts);
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
            let (rec, errors, latencies) = (&rec, &errors, &latencies);
            let client = 2 + (node as u32 - 1) * 2 + c;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                // Odd seeds: race the dying writer from the start (its last operation waits
                // for tickets, and it may die waiting); even: start as it reaches it.
                let start = if seed % 2 == 1 { 0 } else { 15_000 };
                ctx.sleep(start + 2_000 * c as u64).await;
                let t = match Canrt::open(ctx.ep(), cfg()).await {
                    Ok(t) => t,
                    Err(e) => {
                        errors
                            .borrow_mut()
                            .push(format!("client {client}: open: {e}"));
                        return;
                    }
                };
                let spec = LinSpec {
                    hot: 2,
                    cold: 8,
                    hot_percent: 70,
                    ..LinSpec::new(client, OPS, seed, false)
                };
                let last = Cell::new(ctx.now_ns());
                let clock = || {
                    let now = ctx.now_ns();
                    latencies.borrow_mut().push(now - last.replace(now));
                    now
                };
                if let Err(e) = lin_client(&t, &spec, rec, &clock).await {
                    errors.borrow_mut().push(format!("client {client}: {e}"));
                }
            });
        }
    }
    let r = sim.run();
    let errs = errors.borrow();
    assert!(
        errs.is_empty(),
        "seed {seed} {kind:?} crash {crash:?}: {} survivors failed, first: {}",
        errs.len(),
        errs[0]
    );
    drop(errs);
    let expect_unfinished = usize::from(crash.is_some());
    assert!(
        r.unfinished <= expect_unfinished,
        "seed {seed} {kind:?} crash {crash:?}: {} tasks never finished",
        r.unfinished
    );
    assert!(
        r.now_ns < BOUND_NS,
        "seed {seed} {kind:?} crash {crash:?}: ran {} ns of virtual time",
        r.now_ns
    );
    drop(sim);
    let h = rec.finish().expect("recorder sized for the workload");
    let report = check(&h, &CheckConfig::new(seed));
    assert!(
        report.is_ok(),
        "seed {seed} {kind:?} crash {crash:?}: {report}"
    );
    Run {
        posts: posts.get(),
        latencies: latencies.into_inner(),
        end_ns: r.now_ns,
        skipped: stats.skipped.load(std::sync::atomic::Ordering::Relaxed),
    }
}

fn pct(v: &mut [u64], p: usize) -> u64 {
    v.sort_unstable();
    v.get((v.len() * p / 100).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0)
}

#[test]
fn a_writer_dying_at_any_verb_leaves_the_others_going() {
    let seeds = std::env::var("CANRT_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6u64);
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

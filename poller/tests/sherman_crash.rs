//! Sherman and FG+ survive a client that dies at any verb of an operation (issue 10).
//!
//! For each kind of operation — an upsert that splits the root, an upsert that splits a leaf
//! under a deeper tree, an upsert in place, a delete, a lookup — a dry run finds the victim
//! client's doorbells of that operation (a counting endpoint numbers its posts exactly as the
//! sim does), then one run per doorbell kills the victim right there
//! (`Faults::crash_client_at_post`: that batch is never sent, the client's coroutines stop
//! holding whatever they held). Three survivors run `lin_client` workloads meanwhile, and an
//! auditor then reads every key of the victim and inserts around them (so splits and lookups
//! go through whatever the victim left half-done). Every run must have: all survivors and the
//! auditor finishing without any error (a lock timeout, an unsettled tree, a corrupt page), a
//! linearizable history (the victim's in-flight operation recorded as unknown), and bounded
//! virtual time. The survivors' stall after the crash (longest time any of their operations
//! waited past the crash) is reported as p50/p99 over the crash points.
//!
//! CHIME (built on Sherman: its leaves hopscotch tables, `remora_core::chime`) runs the same
//! campaign, with scripts long enough to split its 64-slot leaves; its first leaf's split
//! links a separator into the root rather than growing it.
//!
//! `SHERMAN_CRASH_SEEDS` (default 2) sets the seeds per operation kind; the default covers
//! every doorbell of every kind on the three trees in a few seconds of a debug build.
use remora_core::chime::ChimeConfig;
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, History, Op as LinOp, Outcome, Recorder, check, tag};
use remora_core::sherman::{RepairStats, ShermanConfig};
use remora_poller::sim::{Faults, Sim, SimConfig};
use std::cell::{Cell, RefCell};

#[path = "common/hooked.rs"]
mod hooked;
#[path = "common/post_count.rs"]
mod post_count;
use post_count::count_ep_timed as count_ep;
#[path = "common/sherman.rs"]
mod sherman;
use sherman::{add_repairs, tree_cfg};
#[path = "common/env.rs"]
mod env;
use env::env_count;
#[path = "common/trees.rs"]
mod trees;
use trees::Base;

/// The lincheck client number of the victim. Its keys ([`vkey`]) lie below every survivor's
/// (`client << 40 | x`) and the hot keys, so the survivors never fill or split its leaves.
const VICTIM: u32 = 200;
/// The auditor's lincheck client number.
const AUDITOR: u32 = 201;
const SURVIVORS: u32 = 3;
const SURVIVOR_OPS: u64 = 60;
const LEASE_NS: u64 = 1_000_000;
/// No run may take longer than this in virtual time (a crash costs about one lease).
const TIME_BOUND_NS: u64 = 200 * LEASE_NS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An upsert that splits the root leaf of a fresh tree (the root is grown after).
    SplitRoot,
    /// An upsert that splits a leaf of a deeper tree (its separator goes to a parent).
    SplitLeaf,
    /// An upsert of a present key (in place: one entry for Sherman, the page for FG+); an
    /// update (`KvIndex::update`) for CHIME with lean updates, which takes their path.
    Update,
    Delete,
    Lookup,
}

const KINDS: [Kind; 5] = [
    Kind::SplitRoot,
    Kind::SplitLeaf,
    Kind::Update,
    Kind::Delete,
    Kind::Lookup,
];

/// Keys loaded before the victim starts, between its keys and the survivors' (CHIME).
const BARRIER: u64 = 1 << 32;

fn vkey(x: u64) -> u64 {
    0x1000 + x
}

/// Keys the victim loads into a leaf before the operation under test (and inserts between
/// them): enough to split one of the tree's leaves (Sherman's 256-byte pages hold 11 keys,
/// CHIME's leaves 64 slots).
fn leaf_keys(base: Base) -> u64 {
    match base {
        Base::Sherman(_) => 40,
        Base::Chime(_) => 80,
    }
}

/// The victim's script: what it does before the operation under test, and candidates for it.
fn script(kind: Kind, base: Base) -> Vec<LinOp> {
    let n = leaf_keys(base);
    let mut ops = Vec::new();
    let prefill = if kind == Kind::SplitRoot { 0 } else { n };
    for i in 0..prefill {
        ops.push(LinOp::Upsert {
            key: vkey(i * 16),
            value: 0,
        });
    }
    match kind {
        Kind::SplitRoot | Kind::SplitLeaf => {
            // New keys between the old ones until one splits (the dry run tells which).
            for i in 0..prefill.max(n) {
                ops.push(LinOp::Upsert {
                    key: vkey(i * 16 + 5),
                    value: 0,
                });
            }
        }
        Kind::Update if matches!(base, Base::Chime(c) if c.lean_update) => {
            ops.push(LinOp::Update {
                key: vkey(5 * 16),
                value: 0,
            })
        }
        Kind::Update => ops.push(LinOp::Upsert {
            key: vkey(5 * 16),
            value: 0,
        }),
        Kind::Delete => ops.push(LinOp::Delete { key: vkey(7 * 16) }),
        Kind::Lookup => ops.push(LinOp::Get { key: vkey(9 * 16) }),
    }
    ops
}

/// Runs one recorded operation of a scripted client; `seq` makes the value's tag unique.
async fn run_op<I: KvIndex>(
    t: &I,
    client: u32,
    seq: u32,
    op: LinOp,
    rec: &Recorder,
    now: &dyn Fn() -> u64,
) -> Result<(), String> {
    let op = match op {
        LinOp::Upsert { key, .. } => LinOp::Upsert {
            key,
            value: tag(client, seq),
        },
        LinOp::Update { key, .. } => LinOp::Update {
            key,
            value: tag(client, seq),
        },
        other => other,
    };
    let slot = rec.invoke(client, op, now()).ok_or("recorder full")?;
    let outcome = match op {
        LinOp::Upsert { key, value } => t
            .upsert(&key.to_be_bytes(), &value.to_le_bytes())
            .await
            .map(|()| Outcome::Done),
        LinOp::Update { key, value } => t
            .update(&key.to_be_bytes(), &value.to_le_bytes())
            .await
            .map(Outcome::Present),
        LinOp::Delete { key } => t.delete(&key.to_be_bytes()).await.map(Outcome::Present),
        LinOp::Get { key } => {
            let mut out = [0u8; 8];
            t.get(&key.to_be_bytes(), &mut out)
                .await
                .map(|r| Outcome::Value(r.map(|_| u64::from_le_bytes(out))))
        }
        other => panic!("not scripted: {other:?}"),
    };
    match outcome {
        Ok(o) => {
            rec.complete(slot, o, now());
            Ok(())
        }
        Err(e) => Err(format!("client {client}: {op:?}: {e}")),
    }
}

/// What the dry run learned about the operation under test.
#[derive(Debug, Clone, Copy)]
struct Target {
    /// Index of the operation in the victim's script.
    op: usize,
    /// The victim's doorbells of it: `first..end`.
    first: u64,
    end: u64,
}

/// The outcome of one run.
struct RunResult {
    /// (post count before, posts after, splits before, splits after) per scripted op run.
    victim_ops: Vec<(u64, u64, u64, u64)>,
    victim_id: u32,
    crash_ns: u64,
    now_ns: u64,
    unfinished: usize,
    errors: Vec<String>,
    history: History,
    /// Repairs made by the survivors and the auditor, summed.
    repairs: RepairStats,
}

/// Virtual time of the tree's creation being over, of the operation under test, and of the
/// survivors' start (just before it, so that they are mid-workload when the victim dies).
const START_NS: u64 = 1_000_000;
const TARGET_NS: u64 = START_NS + 2_000_000;
const SURVIVORS_NS: u64 = TARGET_NS - 20_000;

/// When the survivors start: just before the operation under test, or (root split) just
/// after it began, so that the victim, not a survivor, splits the root.
fn survivors_ns(kind: Kind) -> u64 {
    if kind == Kind::SplitRoot {
        TARGET_NS + 2_000
    } else {
        SURVIVORS_NS
    }
}

/// One sim run: the victim runs `kind`'s script (if `target` is given: up to that op, which
/// starts at `TARGET_NS`, dying at post `crash` if given), three survivors run lincheck
/// workloads from `SURVIVORS_NS`, then the auditor.
fn run(
    base: Base,
    kind: Kind,
    seed: u64,
    target: Option<usize>,
    crash_at: Option<(u32, u64)>,
) -> RunResult {
    let cfg = base.with(tree_cfg(base.sherman(), LEASE_NS));
    let ops = script(kind, base);
    let victim_ops = RefCell::new(Vec::new());
    let (posts, last_post) = (Cell::new(0u64), Cell::new(0u64));
    let errors = RefCell::new(Vec::<String>::new());
    let rec = Recorder::new(2000, 20_000);
    let victim_done = Cell::new(false);
    let repairs = Cell::new(RepairStats::default());
    let add_repairs = |r: RepairStats| repairs.set(add_repairs(repairs.get(), r));
    let add_repairs = &add_repairs;
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 2,
        region_len: 16 << 20,
        seed,
        faults: match crash_at {
            Some((c, p)) => Faults::none().crash_client_at_post(c, p),
            None => Faults::none(),
        },
        ..SimConfig::default()
    })
    .unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        let t = cfg.create(ctx.ep()).await.unwrap();
        if matches!(cfg, Base::Chime(_)) && kind != Kind::SplitRoot {
            // A barrier: CHIME's 64-slot leaves would otherwise put the victim's highest
            // keys in the leaf that runs up to the survivors' (which then split it first).
            for j in 0..100u64 {
                let k = (BARRIER + j).to_be_bytes();
                t.upsert(&k, &k).await.unwrap();
            }
        }
    });
    assert_eq!(sim.run().unfinished, 0, "creating the tree");
    let vctx = sim.client(0).unwrap();
    let victim_id = vctx.client_id();
    {
        let (ops, victim_ops, posts, last_post, rec, errors, victim_done) = (
            &ops,
            &victim_ops,
            &posts,
            &last_post,
            &rec,
            &errors,
            &victim_done,
        );
        sim.spawn_with(&vctx, 1, move |ctx| async move {
            ctx.sleep(START_NS - ctx.now_ns()).await;
            let ep = count_ep(ctx.ep(), posts, last_post);
            let t = cfg.open(&ep).await.unwrap();
            let now = || ctx.now_ns();
            let n = target.map_or(ops.len(), |s| (s + 1).min(ops.len()));
            for (i, &op) in ops[..n].iter().enumerate() {
                if target == Some(i) {
                    assert!(ctx.now_ns() < TARGET_NS, "the victim's script is too slow");
                    ctx.sleep(TARGET_NS - ctx.now_ns()).await;
                }
                let (p0, s0) = (posts.get(), t.sherman().stats().splits);
                if let Err(e) = run_op(&t, VICTIM, i as u32 + 1, op, rec, &now).await {
                    errors.borrow_mut().push(e);
                    return;
                }
                victim_ops
                    .borrow_mut()
                    .push((p0, posts.get(), s0, t.sherman().stats().splits));
            }
            victim_done.set(true);
        });
    }
    let survivors_done = Cell::new(0u32);
    for s in 0..SURVIVORS {
        let ctx = sim.client(1 + s as usize).unwrap();
        let (rec, errors, survivors_done) = (&rec, &errors, &survivors_done);
        sim.spawn_with(&ctx, 2 + s as u64, move |ctx| async move {
            ctx.sleep(survivors_ns(kind) - ctx.now_ns()).await;
            let t = cfg.open(ctx.ep()).await.unwrap();
            let spec = LinSpec {
                hot: 4,
                cold: 16,
                ..LinSpec::new(1 + s, SURVIVOR_OPS, seed, true)
            };
            let clock = || ctx.now_ns();
            if let Err(e) = lin_client(&t, &spec, rec, &clock).await {
                errors.borrow_mut().push(format!("survivor {}: {e}", 1 + s));
            }
            add_repairs(t.sherman().repairs());
            survivors_done.set(survivors_done.get() + 1);
        });
    }
    // The auditor: once the survivors are done (or the victim, without a crash), reads every
    // key the victim may have written and inserts around them, through whatever it left.
    let actx = sim.client(1).unwrap();
    {
        let (ops, rec, errors, survivors_done) = (&ops, &rec, &errors, &survivors_done);
        sim.spawn_with(&actx, 9, move |ctx| async move {
            while survivors_done.get() < SURVIVORS {
                ctx.sleep(20_000).await;
            }
            let t = cfg.open(ctx.ep()).await.unwrap();
            let now = || ctx.now_ns();
            let mut seq = 0;
            let keys: Vec<u64> = ops
                .iter()
                .filter_map(|op| match *op {
                    LinOp::Upsert { key, .. } | LinOp::Delete { key } | LinOp::Get { key } => {
                        Some(key)
                    }
                    _ => None,
                })
                .collect();
            for phase in 0..3 {
                for &key in &keys {
                    let op = match phase {
                        1 => LinOp::Upsert {
                            key: key + 9,
                            value: 0,
                        },
                        _ => LinOp::Get { key },
                    };
                    seq += 1;
                    if let Err(e) = run_op(&t, AUDITOR, seq, op, rec, &now).await {
                        errors.borrow_mut().push(format!("auditor: {e}"));
                        return;
                    }
                }
            }
            add_repairs(t.sherman().repairs());
        });
    }
    let r = sim.run();
    drop(sim);
    let errors = errors.into_inner();
    let history = rec.finish().expect("recorder sized for the runs");
    RunResult {
        victim_ops: victim_ops.into_inner(),
        victim_id,
        crash_ns: last_post.get(),
        now_ns: r.now_ns,
        unfinished: r.unfinished,
        errors,
        history,
        repairs: repairs.get(),
    }
}

/// The dry runs: which scripted op is the one under test (the whole script run before the
/// survivors start), then its doorbells when it runs at `TARGET_NS`, as in the crash runs.
fn find_target(base: Base, kind: Kind, seed: u64) -> (Target, u32) {
    let ops = script(kind, base);
    let r = run(base, kind, seed, None, None);
    assert!(r.errors.is_empty(), "dry run: {:?}", r.errors);
    assert_eq!(r.unfinished, 0, "dry run");
    assert_eq!(r.victim_ops.len(), ops.len());
    let op = match kind {
        Kind::SplitRoot | Kind::SplitLeaf => {
            let prefill = if kind == Kind::SplitRoot {
                0
            } else {
                leaf_keys(base) as usize
            };
            (prefill..ops.len())
                .find(|&i| r.victim_ops[i].3 > r.victim_ops[i].2)
                .expect("one of the victim's inserts splits")
        }
        _ => ops.len() - 1,
    };
    let r = run(base, kind, seed, Some(op), None);
    assert!(r.errors.is_empty(), "dry run: {:?}", r.errors);
    assert_eq!(r.unfinished, 0, "dry run");
    let (first, end, s0, s1) = r.victim_ops[op];
    assert!(end > first);
    if matches!(kind, Kind::SplitRoot | Kind::SplitLeaf) {
        assert!(s1 > s0, "{kind:?}: the op under test splits");
    }
    (Target { op, first, end }, r.victim_id)
}

fn percentile(v: &mut [u64], p: usize) -> u64 {
    v.sort_unstable();
    v[((v.len() - 1) * p) / 100]
}

/// The campaign on one tree: every doorbell of every kind of operation, over `seeds` seeds.
fn campaign(name: &str, base: Base, seeds: u64) {
    let mut stalls = Vec::new();
    let mut points = 0;
    let mut repaired_states = 0;
    for kind in KINDS {
        let mut kind_points = 0;
        let mut fixed = RepairStats::default();
        for seed in 1..=seeds {
            let (target, victim) = find_target(base, kind, seed);
            for post in target.first..target.end {
                let r = run(base, kind, seed, Some(target.op), Some((victim, post)));
                let at = format!("{name} {kind:?} seed {seed}, crash at post {post}");
                assert!(r.errors.is_empty(), "{at}: {:?}", r.errors);
                assert_eq!(r.unfinished, 1, "{at}: only the victim may be unfinished");
                assert!(
                    r.now_ns < TIME_BOUND_NS + 1_000_000,
                    "{at}: virtual time {} ns",
                    r.now_ns
                );
                let report = check(&r.history, &CheckConfig::new(seed));
                assert!(report.is_ok(), "{at}: {report}");
                let unknown = r
                    .history
                    .events
                    .iter()
                    .filter(|e| e.client == VICTIM && e.outcome == Outcome::Unknown)
                    .count();
                assert_eq!(unknown, 1, "{at}: the victim's op in flight is unknown");
                // The survivors' stall: the longest any of their operations waited past the
                // crash.
                let stall = r
                    .history
                    .events
                    .iter()
                    .filter(|e| e.client >= 1 && e.client <= SURVIVORS && e.ret_ns > r.crash_ns)
                    .map(|e| e.ret_ns - e.call_ns.max(r.crash_ns))
                    .max()
                    .unwrap_or(0);
                stalls.push(stall);
                fixed = add_repairs(fixed, r.repairs);
                repaired_states += usize::from(stall >= LEASE_NS);
                kind_points += 1;
            }
        }
        println!("{name}: {kind:?}: {kind_points} crash points over {seeds} seeds; {fixed:?}");
        match kind {
            // Some crash falls between the split and the root's growth / the separator's
            // insert: the survivors finish that split.
            Kind::SplitRoot if matches!(base, Base::Sherman(_)) => {
                assert!(fixed.roots_grown > 0, "{name}: {fixed:?}")
            }
            // CHIME's first leaf hangs under a level-1 root: its split links a separator.
            Kind::SplitRoot => assert!(fixed.separators_linked > 0, "{name}: {fixed:?}"),
            Kind::SplitLeaf => assert!(fixed.separators_linked > 0, "{name}: {fixed:?}"),
            Kind::Lookup => {}
            Kind::Update | Kind::Delete => assert!(fixed.takeovers > 0, "{name}: {fixed:?}"),
        }
        points += kind_points;
    }
    let (p50, p99) = (percentile(&mut stalls, 50), percentile(&mut stalls, 99));
    println!(
        "{name}: {points} crash points, all linearizable with every survivor finishing; \
         survivors' stall after the crash p50 {p50} ns, p99 {p99} ns, max {} ns (lease {LEASE_NS} ns); \
         {repaired_states} runs waited out a dead holder's lease",
        stalls.last().copied().unwrap_or(0)
    );
    assert!(points >= 20, "{name}: only {points} crash points");
    assert!(
        repaired_states > 0,
        "{name}: no crash ever left a lock held (the campaign tests nothing)"
    );
}

#[test]
fn sherman_survives_a_client_dying_at_any_verb() {
    campaign(
        "sherman",
        Base::Sherman(ShermanConfig::sherman()),
        env_count("SHERMAN_CRASH_SEEDS", 2),
    );
}

#[test]
fn fg_plus_survives_a_client_dying_at_any_verb() {
    campaign(
        "fg+",
        Base::Sherman(ShermanConfig::fg_plus()),
        env_count("SHERMAN_CRASH_SEEDS", 2),
    );
}

#[test]
fn chime_survives_a_client_dying_at_any_verb() {
    campaign(
        "chime",
        Base::Chime(ChimeConfig::chime().with_cache(1 << 20)),
        env_count("SHERMAN_CRASH_SEEDS", 2),
    );
}

/// With remora's lean updates (`ChimeConfig::lean_update`): the victim's in-place write is
/// an update, and the survivors' updates are lean too.
#[test]
fn chime_with_lean_updates_survives_a_client_dying_at_any_verb() {
    campaign(
        "chime lean-update",
        Base::Chime(
            ChimeConfig {
                lean_update: true,
                ..ChimeConfig::chime()
            }
            .with_cache(1 << 20),
        ),
        env_count("SHERMAN_CRASH_SEEDS", 2),
    );
}

/// With remora's prefix-free writes (`ChimeConfig::prefix_free`): the victim's writes log
/// and write no prefix, so a torn leaf is told by its groups alone.
#[test]
fn chime_prefix_free_survives_a_client_dying_at_any_verb() {
    campaign(
        "chime prefix-free",
        Base::Chime(
            ChimeConfig {
                prefix_free: true,
                ..ChimeConfig::chime()
            }
            .with_cache(1 << 20),
        ),
        env_count("SHERMAN_CRASH_SEEDS", 2),
    );
}

/// With remora's paced lock waits (`ShermanConfig::paced_locks`): the survivors wait for the
/// victim's lock pausing a round trip between CASes, and still reach its lease, fence it and
/// take the lock over.
#[test]
fn chime_with_paced_locks_survives_a_client_dying_at_any_verb() {
    let mut cfg = ChimeConfig::chime().with_cache(1 << 20);
    cfg.sherman.paced_locks = true;
    campaign(
        "chime paced-locks",
        Base::Chime(cfg),
        env_count("SHERMAN_CRASH_SEEDS", 2),
    );
}

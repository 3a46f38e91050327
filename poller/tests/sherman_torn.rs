//! A leaf torn *inside* one WRITE by a client that dies in the middle of it is repaired from
//! the dead writer's redo record by the next holder of the leaf's lock (issue 10; design in
//! `remora_core::sherman`, `redo.rs`).
//!
//! The sim drops a dying client's whole doorbell, so the tear is made here: a wrapping queue
//! pair finds the victim's doorbell that writes the leaf (the first one, once armed, with two
//! WRITEs of more than a word: the redo record and the page or entry), and instead posts the
//! ops ahead of the page write whole and a random proper subset of the page write's changed
//! words (a WRITE whose segments landed in some order and stopped half-way; aligned words are
//! atomic), reads the target back to prove it is a mix of the old and new images, and then
//! rings the original doorbell, at which `Faults::crash_client_at_post` kills the client (the
//! unlock is never sent). A reader and a writer, running meanwhile, must never see a wrong or
//! missing value, no operation of theirs may stall more than 1.5 leases past the crash, and
//! the torn leaf must end up whole with the dead writer's new value (its record re-applied:
//! `leaves_redone` is 1).
//!
//! Four cases (Sherman's one-entry write-back, FG+'s whole page — rebuilt from the torn
//! image and a one-entry record — each for an update in place, and for a split whose left
//! page tears: a whole-page record), `SHERMAN_TORN_SEEDS` seeds each (default 3);
//! each seed picks another subset of words and other timings. CHIME (`remora_core::chime`,
//! its leaves' records in `chime/redo.rs`) runs the same cases and an insert, whose doorbell
//! writes several groups and the leaf prefix: each seed tears another of those WRITEs (the
//! ones before it land whole, the ones after never do).
use remora_core::chime::ChimeConfig;
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, SegmentOrder};
use remora_core::index::KvIndex;
use remora_core::sherman::{RepairStats, ShermanConfig};
use remora_poller::sim::{Faults, Sim, SimConfig, SimEndpoint, SimQp};
use std::cell::{Cell, RefCell};

#[path = "common/hooked.rs"]
mod hooked;
use hooked::{HookedEp, PostHook};
#[path = "common/sherman.rs"]
mod sherman;
use sherman::{add_repairs, tree_cfg};
#[path = "common/env.rs"]
mod env;
use env::env_count;
#[path = "common/trees.rs"]
mod trees;
use trees::Base;

const LEASE_NS: u64 = 1_000_000;
/// Survivors must be done this long after the crash (a lease, plus the repair and their own
/// work, with room).
const BOUND_NS: u64 = 5 * LEASE_NS;
/// What the wrapper does and saw.
#[derive(Default)]
struct Tear {
    posts: Cell<u64>,
    armed: Cell<bool>,
    /// Tear (else only note) the doorbell that writes the leaf.
    tear: Cell<bool>,
    /// Tear any of the leaf WRITEs after the first (by the seed), not only the last.
    any: Cell<bool>,
    seed: Cell<u64>,
    /// The number of that doorbell.
    target: Cell<Option<u64>>,
    /// The target range after the tear was neither the old nor the new image.
    torn: Cell<bool>,
    crash_ns: Cell<u64>,
}

/// The victim's hook: tears its leaf write (see the module doc).
struct TearHook<'a> {
    ep: &'a SimEndpoint,
    s: &'a Tear,
}

impl TearHook<'_> {
    /// Posts `ops[..t]` whole and part of the WRITE `ops[t]` (some of the words that differ
    /// from what is there), then checks that the target holds a mix.
    async fn tear(&self, qp: &SimQp, ops: &[Op<'_>], t: usize) -> Result<(), FabricError> {
        let Op::Write { remote, local: new } = ops[t] else {
            unreachable!("the target is a WRITE");
        };
        let mut old = vec![0u8; new.len()];
        qp.read(remote, &mut old).await?;
        let words = new.len() / 8;
        let differ: Vec<usize> = (0..words)
            .filter(|&i| new[i * 8..i * 8 + 8] != old[i * 8..i * 8 + 8])
            .collect();
        assert!(differ.len() >= 2, "a leaf write changes at least two words");
        let (start, stride) = SegmentOrder::permutation(differ.len(), self.s.seed.get());
        let n = 1 + (self.s.seed.get() as usize >> 8) % (differ.len() - 1);
        let mut part: Vec<Op<'_>> = ops[..t]
            .iter()
            .map(|op| match *op {
                Op::Write { remote, local } => Op::Write { remote, local },
                _ => unreachable!("only WRITEs go ahead of the page write"),
            })
            .collect();
        for j in 0..n {
            let i = differ[(start + j * stride) % differ.len()];
            part.push(Op::Write {
                remote: remote.add(i as u64 * 8),
                local: &new[i * 8..i * 8 + 8],
            });
        }
        qp.post(&mut part).await?;
        let mut now = vec![0u8; new.len()];
        qp.read(remote, &mut now).await?;
        self.s.torn.set(now != old && now != new);
        self.s.crash_ns.set(self.ep.now_ns());
        Ok(())
    }
}

impl PostHook<SimQp> for TearHook<'_> {
    async fn post<'a, 'b>(
        &'a self,
        qp: &'a SimQp,
        ops: &'a mut [Op<'b>],
    ) -> Result<(), FabricError> {
        if ops.is_empty() || qp.is_broken() {
            return qp.post(ops).await;
        }
        let n = self.s.posts.get();
        self.s.posts.set(n + 1);
        if self.s.armed.get() && self.s.target.get().is_none() {
            let big: Vec<usize> = (0..ops.len())
                .filter(|&i| matches!(ops[i], Op::Write { local, .. } if local.len() > 8))
                .collect();
            if big.len() >= 2 {
                self.s.target.set(Some(n));
                if self.s.tear.get() {
                    let pick = if self.s.any.get() {
                        big[1 + (self.s.seed.get() >> 16) as usize % (big.len() - 1)]
                    } else {
                        *big.last().expect("two")
                    };
                    self.tear(qp, ops, pick).await?;
                    // The sim kills the client at this doorbell: the rest never lands.
                }
            }
        }
        qp.post(ops).await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// An upsert of a present key: Sherman writes one entry, FG+ the whole page.
    Update,
    /// An insert into a full leaf: the left page of the split tears.
    Split,
    /// An insert of a new key that does not split (CHIME: groups and the prefix written).
    Insert,
}

fn key(i: u64) -> [u8; 8] {
    (0x100 + i * 16).to_be_bytes()
}

/// The victim's value for key `i` before the operation under test, and the one it writes.
const fn old_value(i: u64) -> u64 {
    i + 1
}
const NEW_VALUE: u64 = 0xdead;
/// The survivors work on the first keys of the victim's (all of a Sherman leaf's; CHIME's
/// split leaf holds more, and its torn left leaf holds these).
const SURVIVOR_KEYS: u64 = 16;

const START_NS: u64 = 1_000_000;
const TARGET_NS: u64 = 3_000_000;

struct RunResult {
    victim: u32,
    target: Option<u64>,
    torn: bool,
    crash_ns: u64,
    now_ns: u64,
    unfinished: usize,
    errors: Vec<String>,
    repairs: RepairStats,
    /// The longest any survivor operation waited past the crash.
    stall_ns: u64,
}

/// One run: the victim loads a leaf and runs the operation under test at `TARGET_NS` (torn,
/// and killed at post `crash` if given); a reader and a writer work on that leaf from then on.
fn run(base: Base, case: Case, seed: u64, crash: Option<(u32, u64)>) -> RunResult {
    let cfg = base.with(tree_cfg(base.sherman(), LEASE_NS));
    let tear = Tear::default();
    tear.seed
        .set(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1);
    tear.tear.set(crash.is_some());
    tear.any.set(case == Case::Insert);
    let errors = RefCell::new(Vec::<String>::new());
    let repairs = Cell::new(RepairStats::default());
    let stall = Cell::new(0u64);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 3,
        memory_nodes: 1,
        region_len: 16 << 20,
        seed,
        faults: match crash {
            Some((c, p)) => Faults::none().crash_client_at_post(c, p),
            None => Faults::none(),
        },
        ..SimConfig::default()
    })
    .unwrap();
    let vctx = sim.client(0).unwrap();
    let victim = vctx.client_id();
    let (prefill, target_key) = match (case, cfg) {
        (Case::Split, Base::Chime(_)) => {
            let at = chime_split_point(cfg);
            (at, at)
        }
        (_, Base::Chime(_)) => (SURVIVOR_KEYS, 2),
        (_, Base::Sherman(c)) => {
            let g = remora_layouts::sherman::Geometry::new(c.page_size, c.value_size).unwrap();
            match case {
                Case::Split => (g.leaf_capacity() as u64, g.leaf_capacity() as u64),
                _ => (g.leaf_capacity() as u64 - 1, 2),
            }
        }
    };
    // The key the operation under test writes: a present one, the next in line (a split),
    // or a new one between two present ones (an insert).
    let target = match case {
        Case::Insert => u64::from_be_bytes(key(target_key)) + 3,
        _ => u64::from_be_bytes(key(target_key)),
    };
    {
        let (tear, errors) = (&tear, &errors);
        sim.spawn_with(&vctx, 1, move |ctx| async move {
            let ep = HookedEp::new(ctx.ep(), |_| TearHook {
                ep: ctx.ep(),
                s: tear,
            });
            ctx.sleep(START_NS - ctx.now_ns()).await;
            let t = cfg.create(&ep).await.unwrap();
            for i in 0..prefill {
                t.upsert(&key(i), &old_value(i).to_le_bytes())
                    .await
                    .unwrap();
            }
            ctx.sleep(TARGET_NS - ctx.now_ns()).await;
            tear.armed.set(true);
            let splits = t.sherman().stats().splits;
            if let Err(e) = t
                .upsert(&target.to_be_bytes(), &NEW_VALUE.to_le_bytes())
                .await
            {
                errors.borrow_mut().push(format!("victim: {e}"));
            }
            let split = t.sherman().stats().splits - splits;
            assert_eq!(split, u64::from(case == Case::Split), "{case:?}");
        });
    }
    let add = |r: RepairStats| repairs.set(add_repairs(repairs.get(), r));
    for s in 1..3u64 {
        let ctx = sim.client(s as usize).unwrap();
        let (tear, errors, add, stall) = (&tear, &errors, &add, &stall);
        sim.spawn_with(&ctx, 1 + s, move |ctx| async move {
            ctx.sleep(TARGET_NS + 200 * s - ctx.now_ns()).await;
            let t = cfg.open(ctx.ep()).await.unwrap();
            let mut out = [0u8; 8];
            let timed = |call: u64| {
                let past = ctx.now_ns().saturating_sub(call.max(tear.crash_ns.get()));
                if tear.crash_ns.get() != 0 {
                    stall.set(stall.get().max(past));
                }
            };
            let r: Result<(), String> = async {
                for round in 0..20u64 {
                    for i in 0..prefill.min(SURVIVOR_KEYS) {
                        let call = ctx.now_ns();
                        if s == 2 {
                            // The writer: new keys between the victim's (into the torn leaf).
                            let k = u64::from_be_bytes(key(i)) + 1 + round % 8;
                            t.upsert(&k.to_be_bytes(), &k.to_le_bytes())
                                .await
                                .map_err(|e| format!("writer: {e}"))?;
                        }
                        let got = t
                            .get(&key(i), &mut out)
                            .await
                            .map_err(|e| format!("survivor {s}: key {i}: {e}"))?
                            .map(|_| u64::from_le_bytes(out));
                        timed(call);
                        let ok = if i == target_key && case != Case::Insert {
                            got == Some(old_value(i))
                                || got == Some(NEW_VALUE)
                                || (case == Case::Split && got.is_none())
                        } else {
                            got == Some(old_value(i))
                        };
                        if !ok {
                            return Err(format!("survivor {s}: key {i} read {got:?}"));
                        }
                    }
                }
                Ok(())
            }
            .await;
            if let Err(e) = r {
                errors.borrow_mut().push(e);
            }
            add(t.sherman().repairs());
        });
    }
    let r = sim.run();
    drop(sim);
    RunResult {
        victim,
        target: tear.target.get(),
        torn: tear.torn.get(),
        crash_ns: tear.crash_ns.get(),
        now_ns: r.now_ns,
        unfinished: r.unfinished,
        errors: errors.into_inner(),
        repairs: repairs.get(),
        stall_ns: stall.get(),
    }
}

/// The index of the first key (of `key(0)`, `key(1)`, ... inserted in order) whose insert
/// splits a CHIME leaf: the victim's prefill and split key.
fn chime_split_point(cfg: Base) -> u64 {
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: 16 << 20,
        ..SimConfig::default()
    })
    .unwrap();
    let ctx = sim.client(0).unwrap();
    let at = Cell::new(None);
    let at_ref = &at;
    sim.spawn_with(&ctx, 1, move |ctx| async move {
        let t = cfg.create(ctx.ep()).await.unwrap();
        for i in 0..200u64 {
            t.upsert(&key(i), &old_value(i).to_le_bytes())
                .await
                .unwrap();
            if t.sherman().stats().splits > 0 {
                at_ref.set(Some(i));
                return;
            }
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    at.get().expect("200 keys split a CHIME leaf")
}

fn campaign(name: &str, base: Base, cases: &[Case]) {
    let mut stalls = Vec::new();
    for &case in cases {
        for seed in 1..=env_count("SHERMAN_TORN_SEEDS", 3) {
            let at = format!("{name} {case:?} seed {seed}");
            let dry = run(base, case, seed, None);
            assert!(dry.errors.is_empty(), "{at}: dry run: {:?}", dry.errors);
            assert_eq!(dry.unfinished, 0, "{at}: dry run");
            let post = dry.target.expect("the victim writes the leaf");
            // Post `post` reads the old image, `post + 1` tears, `post + 2` reads it back,
            // `post + 3` (the original doorbell) is where the victim dies.
            let r = run(base, case, seed, Some((dry.victim, post + 3)));
            assert_eq!(r.target, Some(post), "{at}: same doorbell as the dry run");
            assert!(r.torn, "{at}: the leaf write was not torn");
            assert!(r.errors.is_empty(), "{at}: {:?}", r.errors);
            assert_eq!(r.unfinished, 1, "{at}: only the victim may be unfinished");
            assert_eq!(r.repairs.leaves_redone, 1, "{at}: {:?}", r.repairs);
            assert!(r.repairs.takeovers >= 1, "{at}: {:?}", r.repairs);
            assert!(
                r.now_ns < r.crash_ns + BOUND_NS,
                "{at}: survivors done {} ns after the crash",
                r.now_ns - r.crash_ns
            );
            // One lease: a reader that met the torn leaf noted its lock word then, so the lock
            // is taken over as soon as that word has not changed for a lease.
            assert!(
                r.stall_ns < LEASE_NS * 3 / 2,
                "{at}: a survivor stalled {} ns",
                r.stall_ns
            );
            stalls.push(r.stall_ns);
        }
    }
    stalls.sort_unstable();
    println!(
        "{name}: {} torn leaf writes repaired; survivors' longest stall after the crash: \
         p50 {} ns, max {} ns (lease {LEASE_NS} ns)",
        stalls.len(),
        stalls[(stalls.len() - 1) / 2],
        stalls[stalls.len() - 1],
    );
}

#[test]
fn sherman_repairs_a_leaf_entry_torn_by_a_dying_writer() {
    campaign(
        "sherman",
        Base::Sherman(ShermanConfig::sherman()),
        &[Case::Update, Case::Split],
    );
}

#[test]
fn fg_plus_repairs_a_leaf_page_torn_by_a_dying_writer() {
    campaign(
        "fg+",
        Base::Sherman(ShermanConfig::fg_plus()),
        &[Case::Update, Case::Split],
    );
}

#[test]
fn chime_repairs_a_leaf_torn_by_a_dying_writer() {
    campaign(
        "chime",
        Base::Chime(ChimeConfig::chime().with_cache(1 << 20)),
        &[Case::Update, Case::Insert, Case::Split],
    );
}

/// With remora's prefix-free writes (`ChimeConfig::prefix_free`): no prefix in the record
/// or the write, the torn leaf told by its groups alone.
#[test]
fn chime_prefix_free_repairs_a_leaf_torn_by_a_dying_writer() {
    campaign(
        "chime prefix-free",
        Base::Chime(
            ChimeConfig {
                prefix_free: true,
                ..ChimeConfig::chime()
            }
            .with_cache(1 << 20),
        ),
        &[Case::Update, Case::Insert, Case::Split],
    );
}

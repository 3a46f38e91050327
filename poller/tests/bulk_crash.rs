//! Crash campaigns on bulk-loaded trees (issue 25: "the crash campaigns then run on
//! bulk-loaded trees too"): SMART, Sherman (its pages 80% full, `PAPER_FILL_PERCENT`, so
//! that the first inserts split loaded pages) and CANRT (built by its memory node's server
//! into the region image) start from `N` bulk-loaded keys. A victim client then runs a
//! script on the loaded keys: inserts between neighbouring loaded keys (Sherman: they split
//! a loaded leaf), an upsert in place, an update, a delete, a lookup and a scan. A dry run
//! counts the victim's doorbells of its script (`common/post_count.rs`); then, for every one
//! of them, the run is repeated with the victim dying right there
//! (`Faults::crash_client_at_post`: that batch never leaves, its locks stay taken, its
//! half-done split stays half done). Three survivors run oracle-checked `lin_client`
//! workloads (`common/survivors.rs`; their keys lie above the loaded ones, in the same tree)
//! from the victim's start. Once they are done, an auditor reads back every loaded key and
//! every write of the victim (each must hold its loaded value, the victim's acknowledged one,
//! or, for the key of the operation it died in, that operation's), scans the loaded range
//! (exactly those keys, in order), then inserts between the loaded keys around the victim's
//! (through its locks and half-done splits) and reads all of them back. Every run: no
//! survivor or auditor error, a linearizable history, bounded virtual time.
//!
//! CHIME too (`Chime::bulk_load`: hopscotch leaves under Sherman's internal levels), its
//! leaves packed until a key finds no room (fill 100%: the fullest leaves its loader makes,
//! so that the victim's inserts hop and split loaded leaves; `remora bench` loads them as
//! random inserts fill them, `INSERT_FILL_PERCENT`). `BULK_CRASH_SEEDS` (default 2) sets the
//! seeds per tree.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer, ServerStats};
use remora_core::chime::{Chime, ChimeConfig, INTERNAL_FILL_PERCENT};
use remora_core::fabric::Endpoint;
use remora_core::index::KvIndex;
use remora_core::lease::LeaseConfig;
use remora_core::server::Handler;
use remora_core::sherman::{PAPER_FILL_PERCENT, Sherman, ShermanConfig};
use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
use remora_layouts::canrt::DataGeometry;
use remora_poller::sim::{ClientCtx, Faults, Sim, SimConfig};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[path = "common/env.rs"]
mod env;
#[path = "common/hooked.rs"]
mod hooked;
#[path = "common/loaded_keys.rs"]
mod loaded_keys;
#[path = "common/mem_region.rs"]
mod mem_region;
#[path = "common/post_count.rs"]
mod post_count;
#[allow(dead_code)] // Its `add_repairs` is the Sherman campaigns'.
#[path = "common/sherman.rs"]
mod sherman;
#[path = "common/survivors.rs"]
mod survivors;
use env::env_count;
use loaded_keys::{BASE, scanned_exactly, value};
use mem_region::on_image;
use post_count::count_ep;
use sherman::tree_cfg;
use survivors::{Survivors, pct};

/// Keys loaded (Sherman's 256-byte pages hold 11 entries, 8 or 9 of them loaded: about 70
/// leaves under a tree of three levels).
const N: u64 = if cfg!(debug_assertions) { 300 } else { 600 };
const SURVIVORS: u32 = 3;
const OPS: u64 = 40;
/// CHIME's leaf fill here: packed until a key finds no room (module docs).
const CHIME_FILL: u8 = 100;
/// The loaded keys the victim's script works on (its inserts go between `FIRST` and the
/// next keys).
const FIRST: u64 = N / 2;
const INSERTS: u64 = 6;
/// No run may take longer than this in virtual time (a dead holder costs its waiters about
/// a lease: 1 ms for Sherman, 0.2 ms for SMART, 10 ms for CANRT).
const BOUND_NS: u64 = 300_000_000;

/// Loaded key `i`, 8 bytes big-endian.
fn key(i: u64) -> u64 {
    BASE + 3 * i
}

fn val(v: [u8; 8]) -> u64 {
    u64::from_le_bytes(v)
}

/// Which tree, configured for the campaign.
#[derive(Debug, Clone, Copy)]
enum Tree {
    Smart(SmartConfig),
    Sherman(ShermanConfig),
    Chime(ChimeConfig),
    Canrt(CanrtConfig),
}

impl Tree {
    fn name(self) -> &'static str {
        match self {
            Tree::Smart(_) => "smart",
            Tree::Sherman(_) => "sherman",
            Tree::Chime(_) => "chime",
            Tree::Canrt(_) => "canrt",
        }
    }

    fn sim_cfg(self, seed: u64, faults: Faults) -> SimConfig {
        SimConfig {
            compute_nodes: 4,
            memory_nodes: if matches!(self, Tree::Canrt(_)) { 1 } else { 2 },
            region_len: 32 << 20,
            seed,
            faults,
            ..SimConfig::default()
        }
    }

    /// A cluster holding the loaded tree: CANRT's built into the image by its server (and
    /// recovered from it), SMART's and Sherman's by a client, through the fabric; CANRT's
    /// server's counters.
    fn loaded<'a>(self, seed: u64, faults: Faults) -> (Sim<'a>, Option<Arc<ServerStats>>) {
        match self {
            Tree::Canrt(c) => {
                let mut images = Sim::new(self.sim_cfg(seed, Faults::none()))
                    .unwrap()
                    .into_images();
                let g = DataGeometry::new(c.slots, c.value_cap)
                    .and_then(|g| g.with_key_len(c.key_len))
                    .unwrap();
                let pairs: Vec<(u128, Vec<u8>)> = (0..N)
                    .map(|i| (key(i) as u128, value(i).to_vec()))
                    .collect();
                let mut server = CanrtServer::new();
                on_image(&mut images[0].host, |img| server.bulk_load(img, g, &pairs)).unwrap();
                let mut server = CanrtServer::new();
                on_image(&mut images[0].host, |img| {
                    Handler::recover(&mut server, img)
                })
                .unwrap();
                let stats = server.stats();
                let mut sim = Sim::with_images(self.sim_cfg(seed, faults), images).unwrap();
                sim.set_handler(0, Box::new(server)).unwrap();
                // The loader's client number, as the other trees' (the victim is client 1).
                sim.client(0).unwrap();
                (sim, Some(stats))
            }
            _ => {
                let mut sim = Sim::new(self.sim_cfg(seed, faults)).unwrap();
                let c0 = sim.client(0).unwrap();
                sim.spawn_with(&c0, 0, move |ctx| async move {
                    let keys: Vec<[u8; 8]> = (0..N).map(|i| key(i).to_be_bytes()).collect();
                    match self {
                        Tree::Smart(c) => {
                            let t = Smart::open(ctx.ep(), c).await.unwrap();
                            let mut v = |i: usize, out: &mut [u8]| {
                                out[..8].copy_from_slice(&value(i as u64));
                                8
                            };
                            t.bulk_load(&keys, &mut v).await.unwrap();
                        }
                        Tree::Sherman(c) => {
                            let t = Sherman::create(ctx.ep(), c).await.unwrap();
                            let mut entry = |i: u64, out: &mut [u8]| {
                                out[..8].copy_from_slice(&value(i));
                                (keys[i as usize], 8)
                            };
                            let st = t.bulk_load(N, PAPER_FILL_PERCENT, &mut entry).await;
                            st.unwrap();
                        }
                        Tree::Chime(c) => {
                            let t = Chime::create(ctx.ep(), c).await.unwrap();
                            let mut entry = |i: u64, out: &mut [u8]| {
                                out[..8].copy_from_slice(&value(i));
                                (keys[i as usize], 8)
                            };
                            t.bulk_load(N, CHIME_FILL, INTERNAL_FILL_PERCENT, &mut entry)
                                .await
                                .unwrap();
                        }
                        Tree::Canrt(_) => unreachable!(),
                    }
                });
                assert_eq!(sim.run().unfinished, 0, "seed {seed}: the bulk load");
                (sim, None)
            }
        }
    }

    /// Opens the loaded tree.
    async fn open<E: Endpoint>(self, ep: &E) -> Result<Loaded<'_, E>, String> {
        let e = |e: &dyn std::fmt::Display| format!("open: {e}");
        Ok(match self {
            Tree::Smart(c) => Loaded::Smart(Smart::open(ep, c).await.map_err(|x| e(&x))?),
            Tree::Sherman(c) => Loaded::Sherman(Sherman::open(ep, c).await.map_err(|x| e(&x))?),
            Tree::Chime(c) => Loaded::Chime(Chime::create(ep, c).await.map_err(|x| e(&x))?),
            Tree::Canrt(c) => Loaded::Canrt(Canrt::open(ep, c).await.map_err(|x| e(&x))?),
        })
    }
}

/// A handle on the loaded tree (one per test client, never moved: its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Loaded<'e, E: Endpoint> {
    Smart(Smart<'e, E>),
    Sherman(Sherman<'e, E>),
    Chime(Chime<'e, E>),
    Canrt(Canrt<'e, E>),
}

impl<E: Endpoint> Loaded<'_, E> {
    /// Locks taken over from a dead holder and half-done changes finished, by this handle
    /// (CANRT's dead holders' tickets are skipped by its server instead).
    fn fixes(&self) -> u64 {
        match self {
            Loaded::Smart(t) => t.stats().takeovers + t.stats().repairs,
            Loaded::Sherman(t) => {
                let r = t.repairs();
                r.takeovers + r.separators_linked + r.roots_grown + r.pages_rederived
            }
            Loaded::Chime(t) => {
                let r = t.sherman().repairs();
                r.takeovers + r.separators_linked + r.roots_grown + r.leaves_redone
            }
            Loaded::Canrt(_) => 0,
        }
    }

    /// Leaf splits this handle made (Sherman, CHIME; 0 for the others).
    fn splits(&self) -> u64 {
        match self {
            Loaded::Sherman(t) => t.stats().splits,
            Loaded::Chime(t) => t.stats().splits,
            _ => 0,
        }
    }
}

/// Runs `$call` on whichever tree `$self` holds, its error as text.
macro_rules! each {
    ($self:expr, |$t:ident| $call:expr) => {
        match $self {
            Loaded::Smart($t) => $call.await.map_err(|e| e.to_string()),
            Loaded::Sherman($t) => $call.await.map_err(|e| e.to_string()),
            Loaded::Chime($t) => $call.await.map_err(|e| e.to_string()),
            Loaded::Canrt($t) => $call.await.map_err(|e| e.to_string()),
        }
    };
}

impl<E: Endpoint> KvIndex for Loaded<'_, E> {
    type Error = String;
    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        each!(self, |t| t.upsert(key, value))
    }
    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, String> {
        each!(self, |t| t.update(key, value))
    }
    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, String> {
        each!(self, |t| t.get(key, out))
    }
    async fn delete(&self, key: &[u8]) -> Result<bool, String> {
        each!(self, |t| t.delete(key))
    }
    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, String> {
        each!(self, |t| t.scan(from, limit, visit))
    }
}

/// One operation of the victim's script.
#[derive(Debug, Clone, Copy)]
enum Step {
    Upsert(u64),
    Update(u64),
    Delete(u64),
    Get(u64),
    Scan(u64),
}

/// The victim's script: inserts between loaded keys `FIRST..FIRST + INSERTS` and their next
/// ones, an upsert in place, an update, a delete, a lookup, a scan over them all.
fn script() -> Vec<Step> {
    let mut s: Vec<Step> = (0..INSERTS)
        .map(|j| Step::Upsert(key(FIRST + j) + 1))
        .collect();
    s.push(Step::Upsert(key(FIRST + INSERTS)));
    s.push(Step::Update(key(FIRST + INSERTS + 1)));
    s.push(Step::Delete(key(FIRST + INSERTS + 2)));
    s.push(Step::Get(key(FIRST + INSERTS + 3)));
    s.push(Step::Scan(key(FIRST)));
    s
}

/// The victim's value of step `j`.
fn victim_value(j: usize) -> u64 {
    0x7EC7_1500_0000_0000 | j as u64
}

/// What the victim did: per key it wrote, what it left there (acknowledged), and the write
/// it died in (key, what that write would leave).
#[derive(Default, Clone)]
struct Done {
    acked: BTreeMap<u64, Option<u64>>,
    in_flight: Option<(u64, Option<u64>)>,
}

impl Done {
    /// What `k` may hold: its acknowledged value (else its loaded one, if it is loaded key
    /// `i`), or the write in flight's.
    fn allowed(&self, k: u64) -> Vec<Option<u64>> {
        let loaded = (k >= BASE && (k - BASE).is_multiple_of(3) && (k - BASE) / 3 < N)
            .then(|| val(value((k - BASE) / 3)));
        let mut a = vec![self.acked.get(&k).copied().unwrap_or(loaded)];
        if let Some((f, v)) = self.in_flight
            && f == k
        {
            a.push(v);
        }
        a
    }
}

/// Runs the victim's script on `t`, recording what it did in `done`.
async fn victim(t: &Loaded<'_, impl Endpoint>, done: &RefCell<Done>) -> Result<(), String> {
    let mut out = [0u8; 8];
    for (j, step) in script().into_iter().enumerate() {
        let v = victim_value(j);
        match step {
            Step::Upsert(k) | Step::Update(k) => {
                done.borrow_mut().in_flight = Some((k, Some(v)));
                if let Step::Upsert(_) = step {
                    t.upsert(&k.to_be_bytes(), &v.to_le_bytes()).await?;
                } else if !t.update(&k.to_be_bytes(), &v.to_le_bytes()).await? {
                    return Err(format!("victim: update of loaded key {k:#x} found none"));
                }
                done.borrow_mut().acked.insert(k, Some(v));
            }
            Step::Delete(k) => {
                done.borrow_mut().in_flight = Some((k, None));
                if !t.delete(&k.to_be_bytes()).await? {
                    return Err(format!("victim: delete of loaded key {k:#x} found none"));
                }
                done.borrow_mut().acked.insert(k, None);
            }
            Step::Get(k) => {
                let got = t.get(&k.to_be_bytes(), &mut out).await?.map(|_| val(out));
                let want = done.borrow().allowed(k);
                if !want.contains(&got) {
                    return Err(format!("victim: get {k:#x}: {got:?}, wanted {want:?}"));
                }
            }
            Step::Scan(from) => {
                t.scan(&from.to_be_bytes(), 16, &mut |_, _| {}).await?;
            }
        }
        done.borrow_mut().in_flight = None;
    }
    Ok(())
}

/// After the victim and the survivors: every loaded key and every victim write read back,
/// the loaded range scanned, then inserts between loaded keys around the victim's (through
/// whatever it left) read back too.
async fn audit(t: &Loaded<'_, impl Endpoint>, done: &Done) -> Result<(), String> {
    let mut out = [0u8; 8];
    let mut keys: Vec<u64> = (0..N).map(key).collect();
    keys.extend(done.acked.keys());
    keys.extend(done.in_flight.map(|f| f.0));
    keys.sort_unstable();
    keys.dedup();
    let mut present = Vec::new();
    for &k in &keys {
        let got = t.get(&k.to_be_bytes(), &mut out).await?.map(|_| val(out));
        let want = done.allowed(k);
        if !want.contains(&got) {
            return Err(format!(
                "auditor: get {k:#x}: {got:?}, wanted one of {want:?}"
            ));
        }
        if got.is_some() {
            present.push(k);
        }
    }
    let mut scanned = Vec::new();
    t.scan(&key(0).to_be_bytes(), present.len(), &mut |k, _| {
        scanned.push(u64::from_be_bytes(k.try_into().unwrap_or([0; 8])))
    })
    .await?;
    scanned_exactly(&scanned, &present).map_err(|e| format!("auditor: {e}"))?;
    let around: Vec<u64> = (FIRST.saturating_sub(8)..FIRST + INSERTS + 8)
        .map(|i| key(i) + 2)
        .collect();
    for &k in &around {
        t.upsert(&k.to_be_bytes(), &k.to_le_bytes()).await?;
    }
    for &k in &around {
        match t.get(&k.to_be_bytes(), &mut out).await? {
            Some(8) if val(out) == k => {}
            other => return Err(format!("auditor: inserted {k:#x}, read {other:?}")),
        }
    }
    Ok(())
}

/// One run's outcome.
struct Run {
    /// The victim's doorbells before and after its script (dry run).
    posts: (u64, u64),
    latencies: Vec<u64>,
    fixes: u64,
    splits: u64,
    now_ns: u64,
}

/// One run on `seed`, the victim (client 1) dying at its doorbell `crash` (None: it lives).
fn run(tree: Tree, seed: u64, crash: Option<u64>) -> Run {
    let faults = crash.map_or(Faults::none(), |p| {
        Faults::none().crash_client_at_post(1, p)
    });
    let survivors = Survivors::new(SURVIVORS, OPS);
    let (done, posts, start_posts) = (RefCell::new(Done::default()), Cell::new(0), Cell::new(0));
    let (victim_over, survivors_over) = (Cell::new(false), Cell::new(0u32));
    let (fixes, splits) = (Cell::new(0u64), Cell::new(0u64));
    let (mut sim, server) = tree.loaded(seed, faults);
    let start_ns = sim.now_ns();
    let vctx = sim.client(0).unwrap();
    assert_eq!(vctx.client_id(), 1);
    {
        let (done, posts, start_posts, victim_over, splits) =
            (&done, &posts, &start_posts, &victim_over, &splits);
        let survivors = &survivors;
        sim.spawn_with(&vctx, 0, move |ctx: ClientCtx| async move {
            let ep = count_ep(ctx.ep(), posts);
            let r = match tree.open(&ep).await {
                Ok(t) => {
                    start_posts.set(posts.get());
                    let r = victim(&t, done).await;
                    splits.set(t.splits());
                    r
                }
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                survivors.fail(format!("victim: {e}"));
            }
            victim_over.set(true);
        });
    }
    for s in 0..SURVIVORS {
        let ctx = sim.client(1 + s as usize).unwrap();
        let (survivors, survivors_over, fixes) = (&survivors, &survivors_over, &fixes);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            match tree.open(ctx.ep()).await {
                Ok(t) => {
                    survivors.run(&t, 1 + s, OPS, seed, || ctx.now_ns()).await;
                    fixes.set(fixes.get() + t.fixes());
                }
                Err(e) => survivors.fail(format!("survivor {}: {e}", 1 + s)),
            }
            survivors_over.set(survivors_over.get() + 1);
        });
    }
    let actx = sim.client(3).unwrap();
    {
        let (survivors, done, posts, victim_over, survivors_over, fixes) = (
            &survivors,
            &done,
            &posts,
            &victim_over,
            &survivors_over,
            &fixes,
        );
        sim.spawn_with(&actx, 0, move |ctx| async move {
            // The victim is over once it finished or rang its fatal doorbell.
            let dead = || crash.is_some_and(|p| posts.get() > p);
            while survivors_over.get() < SURVIVORS || !(victim_over.get() || dead()) {
                ctx.sleep(20_000).await;
            }
            let r = match tree.open(ctx.ep()).await {
                Ok(t) => {
                    // The victim is over: what it did is final.
                    let d = done.borrow().clone();
                    let r = audit(&t, &d).await;
                    fixes.set(fixes.get() + t.fixes());
                    r
                }
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                survivors.fail(e);
            }
        });
    }
    let r = sim.run();
    drop(sim);
    let at = format!("{} seed {seed} crash at {crash:?}", tree.name());
    assert!(
        crash.is_some() || victim_over.get(),
        "{at}: the victim never finished"
    );
    let latencies = survivors.check(&at, &r, crash.is_some(), start_ns + BOUND_NS);
    Run {
        posts: (start_posts.get(), posts.get()),
        latencies,
        fixes: fixes.get() + server.map_or(0, |s| s.skipped.load(Ordering::Relaxed)),
        splits: splits.get(),
        now_ns: r.now_ns - start_ns,
    }
}

/// The campaign on `tree`: for each seed a dry run, then one run per doorbell of the
/// victim's script.
fn campaign(tree: Tree) {
    let name = tree.name();
    let seeds = env_count("BULK_CRASH_SEEDS", 2);
    let (mut points, mut fixes, mut longest) = (0u64, 0u64, 0u64);
    let mut latencies = Vec::new();
    for seed in 1..=seeds {
        let dry = run(tree, seed, None);
        let (from, to) = dry.posts;
        assert!(
            to > from + 10,
            "{name} seed {seed}: the script rang {from}..{to}"
        );
        if let Tree::Sherman(_) | Tree::Chime(_) = tree {
            assert!(
                dry.splits > 0,
                "{name} seed {seed}: the victim's inserts split no loaded leaf"
            );
        }
        for p in from..to {
            let r = run(tree, seed, Some(p));
            points += 1;
            fixes += r.fixes;
            longest = longest.max(r.now_ns);
            latencies.extend(r.latencies);
        }
    }
    let (p50, p99) = (pct(&mut latencies, 50), pct(&mut latencies, 99));
    println!(
        "{name}: {N} keys bulk-loaded; {points} crash points over {seeds} seeds, all \
         linearizable, every loaded key and victim write read back; survivors' operations \
         p50 {p50} ns, p99 {p99} ns; {fixes} takeovers, repairs and skipped tickets; longest run {longest} ns \
         of virtual time"
    );
    assert!(points >= 20, "{name}: only {points} crash points");
    assert!(fixes > 0, "{name}: no crash left a lock or change to fix");
}

#[test]
fn bulk_loaded_smart_survives_a_client_dying_at_any_verb() {
    let mut c = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    c.lease = LeaseConfig {
        lease_ns: 200_000,
        min_backoff_ns: 200,
        max_backoff_ns: 20_000,
        deadline_ns: 100_000_000,
        max_attempts: 1_000_000,
    };
    campaign(Tree::Smart(c));
}

#[test]
fn bulk_loaded_sherman_survives_a_client_dying_at_any_verb() {
    campaign(Tree::Sherman(tree_cfg(ShermanConfig::sherman(), 1_000_000)));
}

#[test]
fn bulk_loaded_chime_survives_a_client_dying_at_any_verb() {
    let mut c = ChimeConfig::chime();
    c.sherman = tree_cfg(c.sherman, 1_000_000);
    campaign(Tree::Chime(c.with_cache(1 << 20)));
}

#[test]
fn bulk_loaded_canrt_survives_a_client_dying_at_any_verb() {
    campaign(Tree::Canrt(CanrtConfig {
        key_len: 8,
        ..CanrtConfig::new(0)
    }));
}

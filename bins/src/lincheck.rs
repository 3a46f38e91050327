//! `remora check --linearizability`: records `lin_client` histories of an index on the sim
//! or soft fabric, one per seed, and checks each for a linearization
//! (`remora_core::lincheck`). Prints, per run, the histories, operations checked and
//! violations (each with its seed and a minimal failing sub-history); exits non-zero on a
//! violation or an inconclusive key.
use crate::args::{FabricKind, PerfArgs};
use crate::bench::IndexKind;
use crate::bench::index::{Handle, IndexCfg, NodeState};
use clap::Args;
use remora::core::canrt::CanrtConfig;
use remora::core::erda::{ErdaClientConfig, ErdaConfig};
use remora::core::lincheck::driver::{LinSpec, lin_client};
use remora::core::lincheck::{CheckConfig, History, Recorder, Report, check};
use remora::core::sherman::ShermanConfig;
use remora::core::smart::{KeyMode, SmartConfig, Techniques};
use remora::poller::executor::{ServerCore, plan_cores, run_coroutines};
use remora::poller::sim::{Sim, SimConfig};
use remora::poller::soft::{NodeConfig, SoftMemoryNode};
use std::cell::{Cell, RefCell};
use std::time::Instant;

#[path = "check_bulk.rs"]
mod check_bulk;

/// `remora check`: the fabric conformance suite, or with `--linearizability` an index's
/// histories.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub lin: LinArgs,
    #[command(flatten)]
    pub perf: PerfArgs,
    /// With --connect: also run the key-revocation check, which revokes the memnode's region
    /// key and breaks its other clients (only against a private memnode).
    #[arg(long)]
    pub allow_revoke: bool,
}

impl CheckArgs {
    /// Refuses the `perf` flags that `check` would ignore (the conformance suite and the
    /// linearizability check size their own work), naming them.
    pub fn refuse_unused(&self) -> Result<(), String> {
        let p = &self.perf;
        let mut unused = Vec::new();
        if p.verbs != [crate::args::PerfVerb::Read] {
            unused.push("--verbs");
        }
        if p.sizes != [64] {
            unused.push("--sizes");
        }
        if p.seconds != 2.0 {
            unused.push("--seconds");
        }
        if p.hot {
            unused.push("--hot");
        }
        if p.json.is_some() {
            unused.push("--json");
        }
        if p.cpu_calibration {
            unused.push("--cpu-calibration (a perf mode)");
        }
        if p.no_pin {
            unused.push("--no-pin");
        }
        if p.server_core.is_some() {
            unused.push("--server-core");
        }
        if !self.lin.linearizability && (p.threads != 1 || p.coroutines != 8) {
            unused.push("--threads/--coroutines (only with --linearizability)");
        }
        if self.lin.linearizability && (p.connect.is_some() || self.allow_revoke) {
            unused.push("--connect/--allow-revoke (the linearizability check runs its own node)");
        }
        if !self.lin.linearizability && self.lin.bulk_load > 0 {
            unused.push("--bulk-load (only with --linearizability)");
        }
        if self.allow_revoke && p.connect.is_none() {
            unused.push("--allow-revoke (only with --connect)");
        }
        if unused.is_empty() {
            Ok(())
        } else {
            Err(format!("remora check does not use {}", unused.join(", ")))
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct LinArgs {
    /// Check an index's histories for linearizability (instead of the fabric conformance suite).
    #[arg(long)]
    pub linearizability: bool,
    /// The index to check.
    #[arg(long, value_enum, default_value = "smart")]
    pub index: IndexKind,
    /// Seeds, one history each: `A..B` (B excluded), `A..=B`, or one number.
    #[arg(long, default_value = "1..=4")]
    pub seeds: String,
    /// Operations per history, over all clients.
    #[arg(long, default_value_t = 4800)]
    pub ops: u64,
    /// Clients on the sim (spread over 4 compute nodes); on soft, `--threads` × `--coroutines`.
    #[arg(long, default_value_t = 16)]
    pub clients: u32,
    /// Shared hot keys.
    #[arg(long, default_value_t = 4)]
    pub hot_keys: u64,
    /// Cold keys per client.
    #[arg(long, default_value_t = 32)]
    pub cold_keys: u64,
    /// Percentage of operations on hot keys.
    #[arg(long, default_value_t = 50)]
    pub hot_percent: u64,
    /// Percentage of operations turned into deletes on top of the mix's 15% (CHIME's
    /// merges run only where deletes empty leaves: `--index chime --extra-deletes 40`).
    #[arg(long, default_value_t = 0)]
    pub extra_deletes: u64,
    /// Fill-and-drain phases of N operations per client (0: none): 70% upserts, then 70%
    /// deletes, over and over, so leaves fill and empty (`--index chime --with merge
    /// --cold-keys 64 --hot-percent 20 --waves 400` runs CHIME's merges under the check; the merge count is
    /// printed per seed).
    #[arg(long, default_value_t = 0)]
    pub waves: u64,
    /// Lock leases of N µs instead of the index's default (smart, sherman, fg-plus, chime).
    /// CHIME reuses a merged leaf only three attempt leases (each two lock leases) after its
    /// merge, so a history of a few virtual milliseconds reuses leaves only with short leases
    /// (`--index chime --with merge --waves 400 --lease-us 1000`). A lock held past its
    /// lease may be taken over and its holder fenced (its queue pair broken: the history
    /// then ends with an index error): at 200 µs a live merger under hot-key load was.
    #[arg(long)]
    pub lease_us: Option<u64>,
    /// Key bytes: 8 (big-endian integers) or 16 (CANRT, formatted with 16-byte keys, and
    /// WORT/WOART: `lincheck::driver::wide_key`).
    #[arg(long, default_value_t = 8)]
    pub key_bytes: usize,
    /// With --index chime: SMART's read delegation and write combining, which the authors'
    /// build of CHIME has on and `ChimeConfig::chime()` off (comma-separated: delegation,
    /// combining), leaf merges (merge), lean updates (lean-update), writes without the leaf
    /// prefix (prefix-free), paced lock waits (paced-locks). With --index canrt:
    /// `whole-level`, the paper's growth (a data node per key prefix, every resize a rebuild)
    /// instead of splits.
    #[arg(long, value_delimiter = ',')]
    pub with: Vec<String>,
    /// With --index smart: the factor analysis's first step, the ART baseline with the cache
    /// (lock-based internal nodes, whose locks a compute node hands over between its clients;
    /// out-of-place leaves).
    #[arg(long)]
    pub baseline: bool,
    /// With --index smart: SMART's techniques to turn off (comma-separated:
    /// lock-free-internal, in-place-leaf, rear-lock, delegation, combining, cache), to find
    /// which one a failing history needs.
    #[arg(long, value_delimiter = ',')]
    pub without: Vec<String>,
    /// With --index smart: N one-bit locks per memory node in NIC device memory (masked CAS)
    /// for lock-based internal nodes (--baseline) and in-place leaves without the rear lock
    /// (--without rear-lock), as the factor analysis's steps before the rear lock take them
    /// (`SmartConfig::onchip_locks`; few locks make objects share bits and words).
    #[arg(long, default_value_t = 0)]
    pub onchip_locks: u64,
    /// With --index smart: hand in-place leaves' locks between a compute node's clients, as
    /// the factor analysis's in-place steps do (`SmartConfig::leaf_handover`).
    #[arg(long)]
    pub leaf_handover: bool,
    /// With --index smart: the write-combining leader writes its own value, then the latest
    /// queued one in a second write, instead of picking up the latest queued value once it
    /// holds the leaf's lock (the default, `SmartConfig::combine_latest`).
    #[arg(long)]
    pub no_combine_latest: bool,
    /// Bulk-load the index with N keys before the clients start (below every key of the
    /// workload, read back after it), to check a loaded tree: smart, sherman, fg-plus and
    /// chime on the sim and soft, canrt and erda on the sim (`check_bulk.rs`).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub bulk_load: u64,
    /// Write the whole history of every seed with a violation or an inconclusive key to
    /// `DIR/seed-N.txt` (one operation a line, by invocation time), to read beside the
    /// report's minimal sub-history.
    #[arg(long, value_name = "DIR")]
    pub dump_violations: Option<std::path::PathBuf>,
}

/// Writes `h` to `dir/seed-<seed>.txt`, its events ordered by invocation time.
fn dump(dir: &std::path::Path, seed: u64, h: &History) -> Result<std::path::PathBuf, String> {
    struct Events(History);
    impl std::fmt::Display for Events {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.write_events(f)
        }
    }
    let mut order: Vec<_> = h.events.iter().collect();
    order.sort_by_key(|e| (e.call_ns, e.client));
    let mut sorted = History::default();
    for e in order {
        sorted.push(*e, h.items_of(e));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("seed-{seed}.txt"));
    std::fs::write(&path, Events(sorted).to_string())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The switch of SMART's technique `name` (as `--without` spells it).
fn smart_switch<'t>(t: &'t mut Techniques, name: &str) -> Result<&'t mut bool, String> {
    Ok(match name {
        "lock-free-internal" => &mut t.lock_free_internal,
        "in-place-leaf" => &mut t.in_place_leaf,
        "rear-lock" => &mut t.rear_lock,
        "delegation" => &mut t.delegation,
        "combining" => &mut t.combining,
        "cache" => &mut t.cache,
        _ => {
            return Err(format!(
                "--without {name}: SMART's techniques are lock-free-internal, in-place-leaf, \
                 rear-lock, delegation, combining, cache"
            ));
        }
    })
}

/// Parses `A..B`, `A..=B` or `N`.
fn seeds(s: &str) -> Result<std::ops::RangeInclusive<u64>, String> {
    let num = |x: &str| {
        x.trim()
            .parse::<u64>()
            .map_err(|e| format!("--seeds {s:?}: {e}"))
    };
    if let Some((a, b)) = s.split_once("..=") {
        Ok(num(a)?..=num(b)?)
    } else if let Some((a, b)) = s.split_once("..") {
        let b = num(b)?;
        if b == 0 {
            return Err(format!("--seeds {s:?}: empty range"));
        }
        Ok(num(a)?..=b - 1)
    } else {
        let n = num(s)?;
        Ok(n..=n)
    }
}

/// Refuses a configuration whose writes are not linearizable by design (CANRT's
/// `WriteAck::Posted`, the paper's count of a write): checking it would report the
/// semantics it states, not a bug.
fn refuse_weak(cfg: &IndexCfg) -> Result<(), String> {
    match cfg {
        IndexCfg::Canrt { cfg, .. } if !cfg.linearizable() => Err(format!(
            "CANRT with --canrt-ack {} is not linearizable by design (a write returns before \
             the server applies it): the linearizability check runs the default, applied",
            cfg.ack.name()
        )),
        _ => Ok(()),
    }
}

/// The index as the lincheck tests configure it: small nodes so a few hundred keys split,
/// resize and collide.
fn index_cfg(kind: IndexKind, key_bytes: usize) -> Result<IndexCfg, String> {
    if key_bytes != 8
        && !(key_bytes == 16
            && matches!(kind, IndexKind::Canrt | IndexKind::Wort | IndexKind::Woart))
    {
        return Err(format!(
            "--key-bytes {key_bytes}: keys are 8 bytes, or 16 for canrt, wort and woart"
        ));
    }
    Ok(match kind {
        IndexKind::Smart => IndexCfg::Smart {
            cfg: SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8),
            t: Techniques::SMART,
        },
        IndexKind::Sherman | IndexKind::FgPlus => {
            let (base, name) = if kind == IndexKind::FgPlus {
                (ShermanConfig::fg_plus(), "fg+")
            } else {
                (ShermanConfig::sherman(), "sherman")
            };
            IndexCfg::Sherman {
                cfg: ShermanConfig {
                    page_size: 256,
                    ..base
                },
                name,
            }
        }
        // Small internal pages so level 1 splits too (a leaf holds 64 keys).
        IndexKind::Chime => IndexCfg::Chime {
            cfg: remora::core::chime::ChimeConfig {
                sherman: ShermanConfig {
                    page_size: 256,
                    ..remora::core::chime::ChimeConfig::chime().sherman
                },
                ..remora::core::chime::ChimeConfig::chime()
            }
            .with_cache(1 << 20),
        },
        IndexKind::Canrt => IndexCfg::Canrt {
            cfg: CanrtConfig {
                slots: 8,
                key_len: key_bytes as u32,
                ..CanrtConfig::new(0)
            },
            growth: Default::default(),
        },
        IndexKind::Erda => IndexCfg::Erda {
            server: ErdaConfig::small(),
            client: ErdaClientConfig::default(),
        },
        IndexKind::ErdaRedo | IndexKind::ErdaRaw => IndexCfg::ErdaBaseline {
            scheme: if kind == IndexKind::ErdaRedo {
                remora::core::erda::baseline::Scheme::Redo
            } else {
                remora::core::erda::baseline::Scheme::Raw
            },
            server: ErdaConfig::small(),
            client: ErdaClientConfig::default(),
        },
        IndexKind::Wort => IndexCfg::Wort {
            kind: remora::core::wort::Kind::Wort,
        },
        IndexKind::Woart => IndexCfg::Wort {
            kind: remora::core::wort::Kind::Woart,
        },
        IndexKind::Catfish => {
            return Err(
                "Catfish is not a key-value index: its linearizability test is \
                 poller/tests/catfish_lin.rs"
                    .into(),
            );
        }
    })
}

fn spec(a: &LinArgs, client: u32, clients: u32, seed: u64, scans: bool) -> LinSpec {
    LinSpec {
        hot: a.hot_keys,
        cold: a.cold_keys,
        hot_percent: a.hot_percent,
        key_len: a.key_bytes,
        extra_deletes: a.extra_deletes,
        waves: a.waves,
        ..LinSpec::new(client, a.ops.div_ceil(clients as u64), seed, scans)
    }
}

/// `cfg` with lock leases of `ns` (`--lease-us`).
fn with_lease(mut cfg: IndexCfg, ns: u64) -> Result<IndexCfg, String> {
    let lease = match &mut cfg {
        IndexCfg::Smart { cfg, .. } => &mut cfg.lease,
        IndexCfg::Sherman { cfg, .. } => &mut cfg.lease,
        IndexCfg::Chime { cfg } => &mut cfg.sherman.lease,
        _ => return Err("--lease-us: only with --index smart, sherman, fg-plus or chime".into()),
    };
    if ns == 0 || ns >= lease.deadline_ns {
        return Err(format!(
            "--lease-us: a lease of 1 µs up to the deadline ({} µs)",
            lease.deadline_ns / 1000
        ));
    }
    lease.lease_ns = ns;
    Ok(cfg)
}

/// CHIME's merge counters summed over a history's clients (zero for other indexes): a
/// history meant to check merges shows that it ran some.
#[derive(Debug, Default, Clone, Copy)]
struct Merges {
    merges: u64,
    retired: u64,
    reused: u64,
}

impl Merges {
    fn add<E: remora::core::fabric::Endpoint>(&mut self, h: &Handle<'_, E>) {
        if let Handle::Chime(c) = h {
            let s = c.stats();
            self.merges += s.merges;
            self.retired += s.retired;
            self.reused += s.reused;
        }
    }

    fn sum(parts: impl IntoIterator<Item = Merges>) -> Merges {
        parts.into_iter().fold(Merges::default(), |a, b| Merges {
            merges: a.merges + b.merges,
            retired: a.retired + b.retired,
            reused: a.reused + b.reused,
        })
    }
}

/// One seed on the sim: 4 compute nodes, `clients` clients, virtual time.
fn sim_history(a: &LinArgs, cfg: &IndexCfg, seed: u64) -> Result<(History, Merges), String> {
    let clients = a.clients;
    let per = a.ops.div_ceil(clients as u64) as usize * clients as usize;
    let rec = Recorder::new(per, per * 17);
    let errors = RefCell::new(Vec::<String>::new());
    let merges = Cell::new(Merges::default());
    let scfg = SimConfig {
        compute_nodes: 4,
        region_len: 64 << 20,
        seed,
        ..SimConfig::default()
    };
    let mut server = cfg.server_handler(scfg.region_len, scfg.chunk_size)?;
    // The clients of one compute node share its per-node state, as in `remora bench`.
    let states: Vec<NodeState> = (0..4).map(|_| NodeState::new(cfg)).collect();
    let scfg = SimConfig {
        memory_nodes: if server.is_some() { 1 } else { 2 },
        ..scfg
    };
    let (n, said) = (a.bulk_load, RefCell::new(None));
    let mut sim = match server.as_mut() {
        Some(h) if n > 0 && check_bulk::server_built(cfg) => {
            let mut images = Sim::new(scfg.clone()).map_err(|e| e.0)?.into_images();
            *said.borrow_mut() = Some(check_bulk::build_image(
                cfg,
                &mut images,
                &scfg,
                h.as_mut(),
                n,
                a.key_bytes,
            )?);
            Sim::with_images(scfg, images)
        }
        _ => Sim::new(scfg),
    }
    .map_err(|e| e.0)?;
    if let Some(h) = server {
        sim.set_handler(0, h).map_err(|e| e.0)?;
    }
    let first = sim.client(0).map_err(|e| e.0)?;
    let (errs, said_r) = (&errors, &said);
    sim.spawn_with(&first, 0, move |ctx| async move {
        let r = match Handle::open(ctx.ep(), cfg).await {
            Ok(h) if n > 0 && !check_bulk::server_built(cfg) => {
                check_bulk::client_load(&h, n).await.map(|s| {
                    *said_r.borrow_mut() = Some(s);
                })
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            errs.borrow_mut().push(format!("creating the index: {e}"));
        }
    });
    sim.run();
    if let Some(e) = errors.borrow().first() {
        return Err(format!("seed {seed}: {e}"));
    }
    if let Some(s) = said.borrow().as_ref()
        && seed_is_first(a, seed)
    {
        println!("{s}");
    }
    let scans = !matches!(cfg, IndexCfg::Erda { .. } | IndexCfg::ErdaBaseline { .. });
    for c in 0..clients {
        let base = sim.client(c as usize % 4).map_err(|e| e.0)?;
        let state = &states[c as usize % 4];
        let (rec, errs, merges) = (&rec, &errors, &merges);
        let s = spec(a, 1 + c, clients, seed, scans);
        sim.spawn_with(&base, 0, move |ctx| async move {
            let idx = match Handle::open_on(ctx.ep(), cfg, state).await {
                Ok(i) => i,
                Err(e) => return errs.borrow_mut().push(format!("client {}: {e}", s.client)),
            };
            let clock = || ctx.now_ns();
            if let Err(e) = lin_client(&idx, &s, rec, &clock).await {
                errs.borrow_mut().push(format!("client {}: {e}", s.client));
            }
            let mut m = merges.get();
            m.add(&idx);
            merges.set(m);
        });
    }
    let mut r = sim.run();
    if n > 0 && r.unfinished == 0 && errors.borrow().is_empty() {
        // The loaded keys, read back after the workload.
        let c = sim.client(0).map_err(|e| e.0)?;
        let errs = &errors;
        let key_bytes = a.key_bytes;
        sim.spawn_with(&c, 0, move |ctx| async move {
            let r = match Handle::open_on(ctx.ep(), cfg, &NodeState::new(cfg)).await {
                Ok(h) => check_bulk::read_back(&h, n, key_bytes).await,
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                errs.borrow_mut()
                    .push(format!("reading the loaded keys back: {e}"));
            }
        });
        r = sim.run();
    }
    drop(sim);
    if r.unfinished > 0 {
        return Err(format!(
            "seed {seed}: {} clients never finished",
            r.unfinished
        ));
    }
    if let Some(e) = errors.borrow().first() {
        return Err(format!("seed {seed}: {e}"));
    }
    let h = rec.finish().map_err(|e| e.to_string())?;
    Ok((h, merges.get()))
}

fn seed_is_first(a: &LinArgs, seed: u64) -> bool {
    seeds(&a.seeds).is_ok_and(|r| *r.start() == seed)
}

/// One seed on soft threads: `threads` × `coroutines` clients, one recorder per thread,
/// merged by a shared clock.
fn soft_history(
    a: &LinArgs,
    cfg: &IndexCfg,
    seed: u64,
    threads: usize,
    coros: usize,
) -> Result<(History, Merges), String> {
    let clients = (threads * coros) as u32;
    if clients == 0 || clients > 255 {
        return Err("--threads × --coroutines must be 1..=255 clients".into());
    }
    let ncfg = NodeConfig {
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    };
    let node = match cfg.server_handler(ncfg.region_len, ncfg.chunk_size)? {
        Some(h) => SoftMemoryNode::create_with(ncfg, h),
        None => SoftMemoryNode::create(ncfg),
    }
    .map_err(|e| format!("memory node: {e}"))?;
    // Busy-polling clients and the node's server thread each get a core where there are
    // enough; a server sharing a core with a client starves (see `plan_cores`).
    let plan = plan_cores(threads, true, ServerCore::Auto)?;
    if seed_is_first(a, seed) {
        for w in &plan.warnings {
            eprintln!("remora: warning: {w}");
        }
    }
    let _srv = node.spawn_server_on(plan.server);
    let n = a.bulk_load;
    {
        let ep = node.endpoint().map_err(|e| e.to_string())?;
        let h = remora::core::block_on::block_on(Handle::open(&ep, cfg))
            .map_err(|e| format!("creating the index: {e}"))?;
        if n > 0 {
            // Loaded by one client through the fabric before the others open the tree.
            let said = remora::core::block_on::block_on(check_bulk::client_load(&h, n))
                .map_err(|e| format!("creating the index: {e}"))?;
            if seed_is_first(a, seed) {
                println!("{said}");
            }
        }
    }
    let scans = !matches!(cfg, IndexCfg::Erda { .. } | IndexCfg::ErdaBaseline { .. });
    let start = Instant::now();
    // The threads are one compute node: they share its per-node state.
    let shared = NodeState::new(cfg);
    let parts: Result<Vec<(History, Merges)>, String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                let (node, plan, shared) = (&node, &plan, &shared);
                s.spawn(move || -> Result<(History, Merges), String> {
                    if let Some(&c) = plan.workers.get(th) {
                        core_affinity::set_for_current(core_affinity::CoreId { id: c });
                    }
                    let ep = node.endpoint().map_err(|e| e.to_string())?;
                    let idx = remora::core::block_on::block_on(Handle::open_on(&ep, cfg, shared))?;
                    let per = a.ops.div_ceil(clients as u64) as usize * coros;
                    let rec = Recorder::new(per, per * 17);
                    let clock = || start.elapsed().as_nanos() as u64;
                    let futs: Vec<_> = (0..coros)
                        .map(|c| {
                            let s = spec(a, 1 + (th * coros + c) as u32, clients, seed, scans);
                            let (idx, rec, clock) = (&idx, &rec, &clock);
                            async move {
                                lin_client(idx, &s, rec, clock)
                                    .await
                                    .map_err(|e| format!("client {}: {e}", s.client))
                            }
                        })
                        .collect();
                    for r in run_coroutines(futs) {
                        r?;
                    }
                    let mut m = Merges::default();
                    m.add(&idx);
                    Ok((rec.finish().map_err(|e| e.to_string())?, m))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "a client thread panicked".to_string())?
            })
            .collect()
    });
    let parts = parts.map_err(|e| format!("seed {seed}: {e}"))?;
    if n > 0 {
        // The loaded keys, read back after the workload.
        let ep = node.endpoint().map_err(|e| e.to_string())?;
        remora::core::block_on::block_on(async {
            let h = Handle::open_on(&ep, cfg, &NodeState::new(cfg)).await?;
            check_bulk::read_back(&h, n, a.key_bytes).await
        })
        .map_err(|e| format!("seed {seed}: reading the loaded keys back: {e}"))?;
    }
    let (parts, merges): (Vec<History>, Vec<Merges>) = parts.into_iter().unzip();
    Ok((History::merge(parts), Merges::sum(merges)))
}

/// SMART's configuration in `cfg`, for a flag that only SMART takes.
fn smart<'c>(cfg: &'c mut IndexCfg, flag: &str) -> Result<&'c mut SmartConfig, String> {
    match cfg {
        IndexCfg::Smart { cfg, .. } => Ok(cfg),
        _ => Err(format!("{flag}: only with --index smart")),
    }
}

/// The index configuration `a` asks for: `--index` with `--with`, `--baseline`,
/// `--without`, `--onchip-locks`, `--leaf-handover`, `--no-combine-latest` and `--lease-us`.
fn configured(a: &LinArgs) -> Result<IndexCfg, String> {
    let cfg = match (index_cfg(a.index, a.key_bytes)?, a.with.is_empty()) {
        (IndexCfg::Chime { cfg }, _) => IndexCfg::Chime {
            cfg: crate::bench::chime_with(cfg, &a.with)?,
        },
        (IndexCfg::Canrt { cfg, .. }, false) if a.with == ["whole-level"] => IndexCfg::Canrt {
            cfg,
            growth: remora::core::canrt::Growth::WholeLevel,
        },
        (cfg, true) => cfg,
        (_, false) => {
            return Err(
                "--with: only with --index chime (delegation, combining) or --index canrt \
                 (whole-level)"
                    .into(),
            );
        }
    };
    let cfg = match (cfg, a.baseline) {
        (IndexCfg::Smart { .. }, true) => {
            let mut t = Techniques::BASELINE;
            t.cache = true;
            IndexCfg::Smart {
                cfg: SmartConfig::new(t, KeyMode::Fixed(8), 8),
                t,
            }
        }
        (_, true) => return Err("--baseline: only with --index smart".into()),
        (cfg, false) => cfg,
    };
    let cfg = match (cfg, a.without.is_empty()) {
        (IndexCfg::Smart { cfg: c, mut t }, false) => {
            for w in &a.without {
                *smart_switch(&mut t, w)? = false;
            }
            IndexCfg::Smart {
                cfg: SmartConfig { techniques: t, ..c },
                t,
            }
        }
        (_, false) => return Err("--without: only with --index smart".into()),
        (cfg, true) => cfg,
    };
    let mut cfg = cfg;
    if a.onchip_locks > 0 {
        smart(&mut cfg, "--onchip-locks")?.onchip_locks = a.onchip_locks;
    }
    if a.leaf_handover {
        smart(&mut cfg, "--leaf-handover")?.leaf_handover = true;
    }
    if a.no_combine_latest {
        match &mut cfg {
            IndexCfg::Chime { cfg } => cfg.combine_latest = false,
            c => {
                smart(c, "--no-combine-latest")
                    .map_err(|e| format!("{e} or chime"))?
                    .combine_latest = false
            }
        }
    }
    match a.lease_us {
        Some(us) => with_lease(cfg, us.saturating_mul(1000)),
        None => Ok(cfg),
    }
}

/// Runs `remora check --linearizability` (`threads` × `coros` clients on soft).
pub fn run(a: &LinArgs, fabric: FabricKind, threads: usize, coros: usize) -> Result<(), String> {
    let seeds = seeds(&a.seeds)?;
    if !(1..=255).contains(&a.clients) {
        return Err("--clients must be 1..=255".into());
    }
    let cfg = configured(a)?;
    refuse_weak(&cfg)?;
    check_bulk::refuse(&cfg, fabric, a.bulk_load)?;
    let (mut histories, mut ops, mut violations, mut inconclusive) = (0u64, 0u64, 0usize, 0usize);
    let (mut check_s, wall) = (0f64, Instant::now());
    for seed in seeds {
        let (h, merges) = match fabric {
            FabricKind::Sim => sim_history(a, &cfg, seed)?,
            FabricKind::Soft => soft_history(a, &cfg, seed, threads, coros)?,
            FabricKind::Verbs => {
                return Err("--linearizability runs on --fabric sim or soft".into());
            }
        };
        let t0 = Instant::now();
        let r: Report = check(&h, &CheckConfig::new(seed));
        check_s += t0.elapsed().as_secs_f64();
        histories += 1;
        ops += r.ops as u64;
        violations += r.violations.len() + r.unlisted;
        inconclusive += r.inconclusive.len();
        let merged = match (&cfg, merges) {
            (IndexCfg::Chime { cfg }, m) if cfg.merge => format!(
                " ({} merges, {} leaves retired, {} reused)",
                m.merges, m.retired, m.reused
            ),
            _ => String::new(),
        };
        if r.is_ok() {
            println!(
                "seed {seed}: {} ops, {} keys, {} scans: linearizable{merged}",
                r.ops, r.keys, r.scans
            );
        } else {
            print!("{r}");
            if let Some(dir) = &a.dump_violations {
                println!(
                    "seed {seed}: whole history in {}",
                    dump(dir, seed, &h)?.display()
                );
            }
        }
    }
    println!(
        "{}: {histories} histories, {ops} operations checked ({:.0} ops/s checking, {:.1} s in \
         all), {violations} violations, {inconclusive} inconclusive",
        cfg.index_name(),
        ops as f64 / check_s.max(1e-9),
        wall.elapsed().as_secs_f64()
    );
    if violations + inconclusive > 0 {
        return Err(format!(
            "{} is not shown linearizable: {violations} violations, {inconclusive} inconclusive",
            cfg.index_name()
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "lincheck_tests.rs"]
mod tests;

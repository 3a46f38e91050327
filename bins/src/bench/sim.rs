//! `remora bench --fabric sim`: the YCSB run on the simulated cluster, in virtual time.
//!
//! Every client thread (`--compute-nodes x --clients-per-node`) is one task of the sim,
//! holding its own index handle and running `--coroutines` coroutines joined; the client
//! threads of one compute node share its per-node state (SMART's cache and delegation /
//! combining table; one copy per thread with `--per-thread-state`). All clients
//! load together, meet at a barrier, then run the workload. Throughput and latency are in
//! virtual time, so they are the model's figures, reproducible by seed.
use super::BenchArgs;
use super::index::{Handle, IndexCfg, NodeState, snapshot_of};
use super::phase::{BenchRecord, Ctx, Phase, PhaseOut, Time, phase, record};
use super::resizes::ResizeWatch;
use super::ycsb::Workload;
use crate::perf_sim::model_from;
use remora::core::server::Handler;
use remora::poller::sim::{ClientCtx, NodeImage, Sim, SimConfig};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

type ClientResult = Result<(PhaseOut, Option<PhaseOut>), String>;

/// Waits in virtual time until `clients` have arrived (or the phase stopped).
async fn barrier(ctx: &ClientCtx, arrived: &Cell<usize>, clients: usize, run: &Phase<'_>) {
    while arrived.get() < clients && !run.stop.load(Ordering::Relaxed) {
        ctx.sleep(1_000).await;
    }
}

/// One client thread: open, load, barrier, (warm up, barrier,) run.
#[allow(clippy::too_many_arguments)]
async fn client(
    a: &BenchArgs,
    index: &IndexCfg,
    node: &NodeState,
    ctx: &ClientCtx,
    w: usize,
    load: &Phase<'_>,
    warm: Option<&Phase<'_>>,
    run: &Phase<'_>,
    arrived: &Cell<usize>,
    warmed: &Cell<usize>,
    clients: usize,
    resizes: &ResizeWatch,
    warm_cache: Option<&RefCell<Option<String>>>,
) -> ClientResult {
    let stop_all = |e: String| {
        load.stop.store(true, Ordering::Relaxed);
        run.stop.store(true, Ordering::Relaxed);
        e
    };
    let idx = match Handle::open_on(ctx.ep(), index, node).await {
        Ok(i) => i,
        Err(e) => {
            arrived.set(arrived.get() + 1);
            return Err(stop_all(e));
        }
    };
    let tctx = Ctx {
        a,
        time: Time::Virtual(ctx),
        resizes: resizes.clone(),
    };
    let snap = || snapshot_of(ctx.ep());
    let stats = || idx.stats();
    let mut l = phase(&idx, &tctx, load, w, &snap, &stats).await;
    // After a bulk load, one client per compute-node state fills its cache (as the load's
    // inserts would have) before the others pass the barrier.
    if let (Some(note), Ok(_)) = (warm_cache, &l) {
        match idx.warm_cache().await {
            Ok(what) => {
                if note.borrow().is_none() {
                    *note.borrow_mut() = what;
                }
            }
            Err(e) => l = Err(e),
        }
    }
    arrived.set(arrived.get() + 1);
    let l = l.map_err(stop_all)?;
    if run.workload == Workload::Load {
        return Ok((l, None));
    }
    barrier(ctx, arrived, clients, run).await;
    if let Some(warm) = warm {
        let r = phase(&idx, &tctx, warm, w, &snap, &stats).await;
        warmed.set(warmed.get() + 1);
        r.map_err(stop_all)?;
        barrier(ctx, warmed, clients, run).await;
    }
    if let Some(s) = a.seconds {
        // The first client past the barrier sets the window for all: it opens
        // `--warmup-seconds` into the run (at once without it) and lasts `--seconds`.
        let from = ctx.now_ns() + a.warmup_seconds.map_or(0, |w| (w * 1e9) as u64);
        if a.warmup_seconds.is_some() {
            let _ =
                run.measure_from_ns
                    .compare_exchange(0, from, Ordering::Relaxed, Ordering::Relaxed);
        }
        let end = from + (s * 1e9) as u64;
        let _ = run
            .deadline_ns
            .compare_exchange(0, end, Ordering::Relaxed, Ordering::Relaxed);
    }
    let r = phase(&idx, &tctx, run, w, &snap, &stats)
        .await
        .map_err(stop_all)?;
    Ok((l, Some(r)))
}

/// The first client creates the index (and bulk-loads it) before the others open it.
/// With a bulk load, the run starts from a fresh sim over the loaded memory (saved for the
/// next run with `load_once`), so that a run's figures are the same whether its load was
/// made or found saved. A CANRT, WORT, WOART or Erda bulk load is written into the memory
/// node's image by its server's code instead (`bulk_canrt.rs`, `bulk_wort.rs`,
/// `bulk_erda.rs`), with no client. `handler` is the memory node's
/// server, set on the sim the run measures (recovered from the image when it starts from
/// one).
#[allow(clippy::too_many_arguments)]
fn create<'a>(
    mut sim: Sim<'a>,
    a: &'a BenchArgs,
    index: &'a IndexCfg,
    cfg: &SimConfig,
    bulk: Option<&'a super::bulk::BulkPlan>,
    served: Option<&super::bulk_wort::ServerPlan>,
    handler: Option<Box<dyn Handler + Send>>,
    identity: Option<String>,
    created: &'a RefCell<Option<String>>,
    bulked: &'a RefCell<Option<(String, f64)>>,
) -> Result<Sim<'a>, String> {
    if let Some(p) = served {
        let mut images = sim.into_images();
        let t = Instant::now();
        let what = p.build(index, &mut images, cfg)?;
        *bulked.borrow_mut() = Some((what, t.elapsed().as_secs_f64()));
        if let (true, Some(id)) = (a.load_once, identity) {
            super::bulk::save(id, &images);
        }
        return start_from(cfg, images, handler);
    }
    let image_start = bulk.is_some();
    let mut handler = handler;
    if !image_start && let Some(h) = handler.take() {
        sim.set_handler(0, h).map_err(|e| e.0)?;
    }
    let first = sim.client(0).map_err(|e| e.0)?;
    sim.spawn_with(&first, 0, |ctx| async move {
        let r = async {
            let h = Handle::open(ctx.ep(), index).await?;
            if let Some(p) = bulk {
                let t = Instant::now();
                let what = h.bulk_load(a, p).await?;
                *bulked.borrow_mut() = Some((what, t.elapsed().as_secs_f64()));
            }
            Ok::<(), String>(())
        };
        if let Err(e) = r.await {
            *created.borrow_mut() = Some(e);
        }
    });
    let r = sim.run();
    if let Some(e) = created.borrow().as_ref() {
        return Err(format!(
            "creating the index on the sim (seed {}): {e}",
            r.seed
        ));
    }
    if !image_start {
        return Ok(sim);
    }
    let images = sim.into_images();
    if let (true, Some(id)) = (a.load_once, identity) {
        super::bulk::save(id, &images);
    }
    start_from(cfg, images, handler)
}

/// A fresh sim over `images`, memory node 0 served by `handler` (if any) once it has
/// recovered its state from node 0's image, as a restarted server would.
fn start_from<'a>(
    cfg: &SimConfig,
    mut images: Vec<NodeImage>,
    handler: Option<Box<dyn Handler + Send>>,
) -> Result<Sim<'a>, String> {
    let mut handler = handler;
    if let Some(h) = handler.as_mut() {
        super::bulk_canrt::recover(h.as_mut(), &mut images, 0)?;
    }
    let mut sim = Sim::with_images(cfg.clone(), images).map_err(|e| e.0)?;
    if let Some(h) = handler {
        sim.set_handler(0, h).map_err(|e| e.0)?;
    }
    Ok(sim)
}

pub fn run(
    a: &BenchArgs,
    index: &IndexCfg,
    workload: Workload,
) -> Result<Vec<BenchRecord>, String> {
    let s = &a.sim;
    if s.compute_nodes == 0 || s.clients_per_node == 0 || s.memory_nodes == 0 {
        return Err(
            "--compute-nodes, --clients-per-node and --memory-nodes must be at least 1".into(),
        );
    }
    let clients = s.compute_nodes * s.clients_per_node;
    let mut model = model_from(s)?;
    // The Erda baselines SEND values of up to 4 KiB with a header: receive buffers must
    // hold them.
    if let Some(need) = index.max_message()
        && model.get("max_message").is_some_and(|m| m < need as f64)
    {
        model
            .set_pair(&format!("max_message={need}"))
            .map_err(|e| format!("max_message: {e}"))?;
    }
    let cfg = SimConfig {
        compute_nodes: s.compute_nodes,
        memory_nodes: s.memory_nodes,
        region_len: super::region_bytes(a),
        model: model.clone(),
        seed: s.seed,
        persistent: s.persistent,
        ..SimConfig::default()
    };
    let inserted = AtomicU64::new(0);
    let (dist, load, run) = Phase::pair(a, workload, &inserted);
    let warm = (a.warmup > 0 && workload != Workload::Load).then(|| {
        let mut p = Phase::new(
            workload,
            dist,
            a.records,
            Some(a.warmup),
            &inserted,
            indicatif::ProgressBar::hidden(),
        );
        // Other keys than the measured phase draws: the warm-up warms the distribution,
        // not the run's exact key sequence.
        p.salt = 0x5741_524d;
        p
    });
    let warmed = Cell::new(0usize);
    let arrived = Cell::new(0usize);
    let results: RefCell<Vec<ClientResult>> = RefCell::new(Vec::new());
    let created: RefCell<Option<String>> = RefCell::new(None);
    // Bulk loading, and load once: a run whose load was saved (`--sweep`, `repro`) starts
    // from a copy of the loaded cluster's memory.
    let bulk_wanted = super::bulk::wanted(a, index, workload);
    let identity = bulk_wanted.then(|| super::bulk::load_identity(a, index, &cfg));
    let found = identity
        .as_deref()
        .filter(|_| a.load_once)
        .and_then(|id| super::bulk::saved(id, cfg.region_len));
    let restored = found.is_some();
    // CANRT's, WORT's and WOART's trees, and Erda's store, are built by their server into
    // the image.
    let by_server = super::bulk_wort::ServerPlan::used_by(index);
    let bulk = (bulk_wanted && !restored && !by_server).then(|| super::bulk::plan(a));
    let served = match bulk_wanted && !restored {
        true => super::bulk_wort::ServerPlan::of(a, index)?,
        false => None,
    };
    // Keys planned and the time sorting them took (for the load's note).
    let planned = bulk
        .as_ref()
        .map(|p| (p.keys.len() + p.strings.len(), p.sort_s))
        .or(served.as_ref().map(|p| p.planned()));
    let bulked: RefCell<Option<(String, f64)>> = RefCell::new(None);
    let cache_warmed: RefCell<Option<String>> = RefCell::new(None);
    let warms = super::bulk::warms(a, bulk_wanted);
    let wall = Instant::now();
    let server = index.server(cfg.region_len, cfg.chunk_size)?;
    let resizes: ResizeWatch = server.as_ref().map(|(_, w)| w.clone()).unwrap_or_default();
    // Declared before the sim: its tasks borrow them.
    let states: Vec<NodeState> = (0..if a.per_thread_state {
        clients
    } else {
        s.compute_nodes
    })
        .map(|_| NodeState::new(index))
        .collect();
    let handler = server.map(|(h, _)| h);
    let mut sim = match found {
        Some(images) => start_from(&cfg, images, handler)?,
        None => create(
            Sim::new(cfg.clone()).map_err(|e| e.0)?,
            a,
            index,
            &cfg,
            bulk.as_ref(),
            served.as_ref(),
            handler,
            identity,
            &created,
            &bulked,
        )?,
    };
    if bulk_wanted {
        // Loaded: every client's LOAD phase finds no key left to insert.
        load.next_load.store(a.records, Ordering::Relaxed);
    }
    for node in 0..s.compute_nodes {
        for c in 0..s.clients_per_node {
            let w = node * s.clients_per_node + c;
            let state = &states[if a.per_thread_state { w } else { node }];
            let base = sim.client(node).map_err(|e| e.0)?;
            let (load, run, arrived, results) = (&load, &run, &arrived, &results);
            let (warm, warmed, resizes) = (warm.as_ref(), &warmed, &resizes);
            let warm_cache = (warms && (a.per_thread_state || c == 0)).then_some(&cache_warmed);
            sim.spawn_with(&base, 0, move |ctx| async move {
                let r = client(
                    a, index, state, &ctx, w, load, warm, run, arrived, warmed, clients, resizes,
                    warm_cache,
                )
                .await;
                results.borrow_mut().push(r);
            });
        }
    }
    let cpu0 = thread_cpu_s();
    let report = sim.run();
    let cpu = thread_cpu_s() - cpu0;
    load.pb.finish_and_clear();
    run.pb.finish_and_clear();
    let stats = sim.stats();
    drop(sim);
    if report.unfinished > 0 {
        return Err(format!(
            "{} sim clients never finished (seed {}): the index stalled in virtual time",
            report.unfinished, report.seed
        ));
    }
    let mut loads = Vec::new();
    let mut runs = Vec::new();
    for r in results.into_inner() {
        let (l, r) = r.map_err(|e| format!("seed {}: {e}", report.seed))?;
        loads.push(l);
        runs.extend(r);
    }
    if !a.silent {
        eprintln!(
            "sim: {:.3} virtual s in {:.2} wall s ({:?})",
            report.now_ns as f64 / 1e9,
            wall.elapsed().as_secs_f64(),
            stats
        );
        // The sim's speed with the index code in the loop: the warm-up and measured phases
        // (and the LOAD when it is inserted), not the bulk load before them.
        eprintln!(
            "sim speed: {} verbs in {cpu:.2} CPU s of the run: {:.3} M simulated verbs per CPU second",
            stats.verbs,
            stats.verbs as f64 / cpu.max(1e-9) / 1e6
        );
    }
    let mut notes = vec![
        format!("seed {} (same seed, same figures)", s.seed),
        format!(
            "{} compute nodes x {} clients x {} coroutines, {} memory node(s)",
            s.compute_nodes, s.clients_per_node, a.coroutines, s.memory_nodes
        ),
        format!(
            "warm-up: {} unmeasured operations of the workload before the measured phase",
            if workload == Workload::Load {
                0
            } else {
                a.warmup
            }
        ),
        model.summary(),
        "seconds and latencies are virtual (the NIC model's), not wall-clock".into(),
    ];
    if let (Some(w), Some(s)) = (a.warmup_seconds, a.seconds)
        && workload != Workload::Load
    {
        notes.push(format!(
            "window: the measured {s} s open {w} s into the run phase; the clients run on \
             through its start (no barrier), so it measures the state the workload built"
        ));
    }
    if restored {
        notes.push(
            "load: bulk-loaded once for the sweep or report, not measured; this run started \
             from a copy of the loaded cluster's memory"
                .into(),
        );
    }
    if let Some(what) = cache_warmed.borrow().as_ref() {
        notes.push(format!(
            "load: each compute node's cache filled after the bulk load, as the load's inserts \
             would have left it (--cold-cache leaves it cold); the first node's: {what}"
        ));
    }
    if let (Some((keys, sort_s)), Some((what, secs))) = (planned, bulked.borrow().as_ref()) {
        let rate = keys as f64 / (sort_s + secs).max(1e-9);
        // The JSON stays a function of the seed: the load's wall-clock rate goes to stderr.
        notes.push(format!(
            "load: bulk-loaded, not measured ({what}); {keys} keys (--no-bulk-load inserts them)",
        ));
        if !a.silent {
            eprintln!(
                "bulk load: {rate:.0} keys/s ({keys} keys, sort {sort_s:.2} s, image {secs:.2} s)"
            );
        }
    }
    let state_bytes: u64 = states.iter().map(NodeState::bytes).sum();
    drop(states);
    if state_bytes > 0 {
        notes.push(format!(
            "client state: {} per-node state(s) ({}), {} B in all, {} B per client thread",
            if a.per_thread_state {
                clients
            } else {
                s.compute_nodes
            },
            if a.per_thread_state {
                "one per client thread, --per-thread-state"
            } else {
                "one per compute node, shared by its client threads"
            },
            state_bytes,
            state_bytes / clients as u64
        ));
    }
    if s.persistent {
        notes.push(
            "persistent memory nodes: nvm B/op = NIC-placed bytes + 64 x cache lines the \
             handlers wrote back, per op (split in nvm_per_op)"
                .into(),
        );
    }
    let threads = clients;
    let shaped = BenchArgs {
        threads,
        ..a.clone()
    };
    let mut out = Vec::new();
    if !bulk_wanted {
        out.push(record(
            &shaped,
            index,
            Workload::Load,
            "load",
            dist,
            &loads,
            "sim",
            notes.clone(),
        ));
    }
    if !runs.is_empty() {
        out.push(record(
            &shaped, index, workload, "run", dist, &runs, "sim", notes,
        ));
    }
    Ok(out)
}

/// CPU seconds this thread has used (the sim runs on the calling thread).
fn thread_cpu_s() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if r != 0 {
        return 0.0;
    }
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

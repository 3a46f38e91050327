//! The deterministic sim runner of a spatial run. The tree is loaded in a sim of its own
//! and measured in a fresh one started from a copy of its memory (`spatial/load.rs`: load
//! once, measure many); `--workload load` measures the load itself, in one sim.
use super::client::{Phase, Rdma, part};
use super::gate::{GatedEp, NodeReads, Wire};
use super::load::{self, ImageRegion};
use super::run::{open, open_or_create, server, tree_height};
use super::{ClientResult, Outcome, POLL_SCAN_NS, Part, Serve, Shared};
use crate::bench::bulk::copy_images;
use crate::bench::ycsb::Workload;
use crate::perf_sim::model_from;
use remora::core::catfish::CatfishClient;
use remora::core::fabric::{Endpoint, QueuePair};
use remora::core::server::Handler;
use remora::poller::sim::{ClientCtx, NodeImage, Sim, SimConfig};
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A load's LOAD phases, memory images and tree height.
type LoadedSim = (Vec<Part>, Vec<NodeImage>, Option<u16>);
/// The measured clients' run phases and the tree's height after.
type Measured = (Vec<Result<Part, String>>, Option<u16>);

pub(super) fn run_sim(sh: &Shared<'_>) -> Result<Outcome, String> {
    let a = sh.a;
    let s = &a.sim;
    if s.compute_nodes == 0 || s.clients_per_node == 0 {
        return Err("--compute-nodes and --clients-per-node must be at least 1".into());
    }
    if s.memory_nodes != 1 {
        return Err("--index catfish runs one memory node: --memory-nodes 1".into());
    }
    let clients = s.compute_nodes * s.clients_per_node;
    let mut model = model_from(s)?;
    if a.spatial.server_threads > 1 {
        model
            .set("server_threads", &a.spatial.server_threads.to_string())
            .map_err(|e| format!("--server-threads: {e}"))?;
    }
    if a.spatial.serve == Serve::Polling && model.get("server_scan_ns") == Some(0.0) {
        model
            .set("server_scan_ns", &POLL_SCAN_NS.to_string())
            .map_err(|e| format!("--serve polling: {e}"))?;
    }
    let oversub = oversub_scan_ns(&model, a.spatial.poll_oversub_ns, clients)?;
    if let Some(scan) = oversub {
        model
            .set("server_scan_ns", &scan.to_string())
            .map_err(|e| format!("--poll-oversub-ns: {e}"))?;
    }
    let cfg = SimConfig {
        compute_nodes: s.compute_nodes,
        memory_nodes: 1,
        region_len: crate::bench::region_bytes(a),
        model: model.clone(),
        seed: s.seed,
        ..SimConfig::default()
    };
    let mut notes = vec![
        format!("seed {} (same seed, same figures)", s.seed),
        format!(
            "{} compute nodes x {} clients, 1 memory node",
            s.compute_nodes, s.clients_per_node
        ),
        model.summary(),
        "seconds and latencies are virtual (the NIC model's), not wall-clock".into(),
    ];
    if let Some(scan) = oversub {
        notes.push(format!(
            "oversubscribed polling server (--poll-oversub-ns {}): {scan} ns of ring scan x \
             each thread's share of the {clients} connections, a message",
            a.spatial.poll_oversub_ns
        ));
    }
    if let Some(w) = Wire::new(
        a.spatial.paper_entry_bytes,
        a.spatial.fanout,
        cfg.region_len,
    ) {
        notes.push(format!(
            "node READs carry the paper's node (--paper-entry-bytes {}): {} B a node of {} \
             entries, remora's {} B and {} B beside it",
            a.spatial.paper_entry_bytes,
            w.node_len + w.pad,
            a.spatial.fanout,
            w.node_len,
            w.pad
        ));
    }
    if a.workload == Workload::Load {
        let (parts, _, height) = load_sim(sh, &cfg, s.compute_nodes, s.clients_per_node)?;
        let results = parts.into_iter().map(|p| Ok((Some(p), None))).collect();
        return Ok((results, height, clients, notes));
    }
    let id = load::identity(a);
    let bulk = load::bulk_wanted(a);
    let max = model
        .get("max_message")
        .ok_or("the sim model has no max_message")? as usize;
    let (mut images, loads) = match load::saved(&id, &model.summary(), cfg.region_len) {
        Some(found) => found,
        None if bulk => {
            let t = Instant::now();
            let (images, what) = load::bulk(sh, &cfg, max)?;
            let secs = t.elapsed().as_secs_f64();
            notes.push(format!("load: bulk-loaded, not measured ({what})"));
            if !a.silent {
                // The JSON stays a function of the seed: the wall-clock rate goes to stderr.
                eprintln!(
                    "bulk load: {:.0} objects/s ({} objects, image {secs:.2} s)",
                    a.records as f64 / secs.max(1e-9),
                    a.records
                );
            }
            let copy = copy_images(&images, cfg.region_len);
            load::save(id, images, model.summary(), Vec::new());
            (copy, Vec::new())
        }
        None => {
            let (parts, images, _) = load_sim(sh, &cfg, 1, 1)?;
            let copy = copy_images(&images, cfg.region_len);
            load::save(id, images, model.summary(), parts.clone());
            (copy, parts)
        }
    };
    if bulk {
        notes.push(
            "the tree was bulk-loaded (the server's inserts of the objects in object order, \
             without the fabric: the tree one client's load makes; --no-bulk-load inserts \
             them through the sim); the run starts from a copy of its memory, the server \
             recovering the tree from the region (load once, measure many)"
                .into(),
        );
    } else {
        notes.push(
            "the tree was loaded by one client, in object order, in a sim of its own; the run \
             starts from a copy of its memory, the server recovering the tree from the region \
             (load once, measure many)"
                .into(),
        );
        if loads.is_empty() {
            notes.push(
                "no LOAD figures: this tree's load was timed in another sim model (an earlier \
                 run of this process)"
                    .into(),
            );
        }
    }
    let mut handler = server(a, max);
    let said = recover(&mut handler, &mut images)?;
    notes.push(said);
    let (runs, height) = measure_sim(sh, &cfg, images, handler)?;
    let mut results: Vec<ClientResult> = loads.into_iter().map(|l| Ok((Some(l), None))).collect();
    results.extend(runs.into_iter().map(|r| r.map(|r| (None, Some(r)))));
    Ok((results, height, clients, notes))
}

/// The `server_scan_ns` of `--poll-oversub-ns k` with `clients` connections: k x share, share
/// = clients / `server_threads` rounded up as the sim's server rounds it, so a message costs
/// k x share^2 (`server.rs` charges the scan x share). None when k is 0. An error when the
/// model's `server_scan_ns` is already set: two polling models in one run.
fn oversub_scan_ns(
    model: &remora::poller::sim::Model,
    k: f64,
    clients: usize,
) -> Result<Option<f64>, String> {
    if k <= 0.0 {
        return Ok(None);
    }
    if model.get("server_scan_ns") != Some(0.0) {
        return Err(
            "--poll-oversub-ns sets server_scan_ns from the run's connections: do not also \
             --set server_scan_ns"
                .into(),
        );
    }
    let threads = model
        .get("server_threads")
        .ok_or("the sim model has no server_threads")?
        .max(1.0) as usize;
    Ok(Some(k * clients.div_ceil(threads) as f64))
}

/// Recovers the loaded tree in memory node 0's image into `handler`; what it found.
fn recover(
    handler: &mut remora::core::catfish::CatfishServer,
    images: &mut [NodeImage],
) -> Result<String, String> {
    let img = images.first_mut().ok_or("no memory image to recover")?;
    let said = handler
        .recover(&ImageRegion::new(&mut img.host, 0))
        .map_err(|e| format!("recovering the loaded tree: {e}"))?;
    if said.contains("tree checked") {
        Ok(said)
    } else {
        Err(format!("recovering the loaded tree: {said}"))
    }
}

/// Creates the tree and loads `--records` objects by `per_node` clients on each of the first
/// `nodes` compute nodes; their LOAD phases, the memory images and the tree's height.
fn load_sim(
    sh: &Shared<'_>,
    cfg: &SimConfig,
    nodes: usize,
    per_node: usize,
) -> Result<LoadedSim, String> {
    let a = sh.a;
    let seed = cfg.seed;
    let created: RefCell<Option<String>> = RefCell::new(None);
    let results: RefCell<Vec<Result<Part, String>>> = RefCell::new(Vec::new());
    let height: RefCell<Option<u16>> = RefCell::new(None);
    let mut sim = Sim::new(cfg.clone()).map_err(|e| e.0)?;
    let max = sim
        .endpoint(0)
        .map_err(|e| e.0)?
        .qp(0)
        .map_err(|e| e.to_string())?
        .max_message();
    sim.set_handler(0, Box::new(server(a, max)))
        .map_err(|e| e.0)?;
    let first = sim.client(0).map_err(|e| e.0)?;
    sim.spawn_with(&first, 0, |ctx| {
        let created = &created;
        async move {
            let r = match ctx.qp(0) {
                Ok(qp) => open_or_create(qp, a.spatial.fanout, a.spatial.tree.kind())
                    .await
                    .map(|_| ()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = r {
                *created.borrow_mut() = Some(e);
            }
        }
    });
    if sim.run().unfinished > 0 {
        return Err(format!(
            "creating the tree on the sim (seed {seed}) never finished"
        ));
    }
    if let Some(e) = created.borrow().as_ref() {
        return Err(format!("creating the tree on the sim (seed {seed}): {e}"));
    }
    for node in 0..nodes.min(cfg.compute_nodes) {
        for c in 0..per_node {
            let w = node * per_node + c;
            let base = sim.client(node).map_err(|e| e.0)?;
            let results = &results;
            sim.spawn_with(&base, 0, move |ctx| async move {
                let r = match ctx.qp(0) {
                    Ok(qp) => match open(a, qp).await {
                        Ok(mut c) => {
                            let mut ops = Rdma {
                                c: &mut c,
                                ep: ctx.ep(),
                                mode: a.spatial.mode,
                            };
                            part(&mut ops, sh, &ctx, w, Phase::Load).await
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e.to_string()),
                };
                if r.is_err() {
                    sh.stop.store(true, Ordering::Relaxed);
                }
                results.borrow_mut().push(r);
            });
        }
    }
    let report = sim.run();
    if report.unfinished > 0 {
        return Err(format!(
            "{} sim clients never finished loading (seed {seed}): Catfish stalled in \
             virtual time",
            report.unfinished
        ));
    }
    probe_height(&mut sim, &height)?;
    // The server's cache as the inserts left it goes with the image (as a bulk load's does,
    // `load.rs`), so the measured sim starts with it.
    let warm = sim.cached_lines(0);
    let mut images = sim.into_images();
    if let Some(img) = images.first_mut() {
        img.warm = warm;
    }
    let parts = results.into_inner().into_iter().collect::<Result<_, _>>()?;
    let h = *height.borrow();
    Ok((parts, images, h))
}

/// Measures the run phase of every client on a sim started from `images`, whose server
/// `handler` has recovered the tree; the clients' run phases and the tree's height after.
fn measure_sim(
    sh: &Shared<'_>,
    cfg: &SimConfig,
    images: Vec<NodeImage>,
    handler: remora::core::catfish::CatfishServer,
) -> Result<Measured, String> {
    let a = sh.a;
    let s = &a.sim;
    let clients = s.compute_nodes * s.clients_per_node;
    let arrived = Cell::new(0usize);
    let warmed = Cell::new(0usize);
    let results: RefCell<Vec<Result<Part, String>>> = RefCell::new(Vec::new());
    let height: RefCell<Option<u16>> = RefCell::new(None);
    // Before the sim: its clients borrow them.
    let gates: Vec<NodeReads> = (0..s.compute_nodes).map(|_| NodeReads::default()).collect();
    let mut sim = Sim::with_images(cfg.clone(), images).map_err(|e| e.0)?;
    sim.set_handler(0, Box::new(handler)).map_err(|e| e.0)?;
    for node in 0..s.compute_nodes {
        for c in 0..s.clients_per_node {
            let w = node * s.clients_per_node + c;
            let base = sim.client(node).map_err(|e| e.0)?;
            let (arrived, warmed, results) = (&arrived, &warmed, &results);
            let gate = gates.get(node).filter(|_| a.spatial.node_serial_reads);
            sim.spawn_with(&base, 0, move |ctx| async move {
                let met = Barriers { arrived, warmed };
                let r = sim_client(sh, &ctx, w, gate, met, clients).await;
                results.borrow_mut().push(r);
            });
        }
    }
    let report = sim.run();
    if report.unfinished > 0 {
        return Err(format!(
            "{} sim clients never finished (seed {}): Catfish stalled in virtual time",
            report.unfinished, report.seed
        ));
    }
    probe_height(&mut sim, &height)?;
    drop(sim);
    let h = *height.borrow();
    Ok((results.into_inner(), h))
}

/// Reads the tree's height from a client of compute node 0.
fn probe_height<'a>(sim: &mut Sim<'a>, height: &'a RefCell<Option<u16>>) -> Result<(), String> {
    let probe = sim.client(0).map_err(|e| e.0)?;
    sim.spawn_with(&probe, 0, |ctx| async move {
        if let Ok(qp) = ctx.qp(0)
            && let Ok(c) = CatfishClient::open(qp).await
        {
            *height.borrow_mut() = tree_height(qp, &c).await.ok();
        }
    });
    sim.run();
    Ok(())
}

/// The counts the measured sim's clients meet at: opened (`arrived`) and warmed up.
#[derive(Clone, Copy)]
struct Barriers<'a> {
    arrived: &'a Cell<usize>,
    warmed: &'a Cell<usize>,
}

/// Waits (in virtual time) until `count` reaches `clients` or the run is stopped.
async fn meet(ctx: &ClientCtx, sh: &Shared<'_>, count: &Cell<usize>, clients: usize) {
    count.set(count.get() + 1);
    while count.get() < clients && !sh.stop.load(Ordering::Relaxed) {
        ctx.sleep(1_000).await;
    }
}

/// One client of the measured sim: opens the tree, waits for every client, runs the
/// unmeasured warm-up (`--warmup` operations shared by all clients, so the adaptive
/// back-off and the server's heartbeats are past their start when measuring begins), waits
/// for every client again, and runs its measured phase.
async fn sim_client(
    sh: &Shared<'_>,
    ctx: &ClientCtx,
    w: usize,
    gate: Option<&NodeReads>,
    met: Barriers<'_>,
    clients: usize,
) -> Result<Part, String> {
    let arrived = met.arrived;
    let opened = match ctx.qp(0) {
        Ok(qp) => open(sh.a, qp).await,
        Err(e) => Err(e.to_string()),
    };
    let wire = Wire::new(
        sh.a.spatial.paper_entry_bytes,
        sh.a.spatial.fanout,
        crate::bench::region_bytes(sh.a),
    );
    let ep = GatedEp::new(ctx.ep(), gate, wire).map_err(|e| e.to_string());
    let (mut c, ep) = match (opened, ep) {
        (Ok(c), Ok(ep)) => (c, ep),
        (Err(e), _) | (_, Err(e)) => {
            arrived.set(arrived.get() + 1);
            sh.stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    meet(ctx, sh, arrived, clients).await;
    let mut ops = Rdma {
        c: &mut c,
        ep: &ep,
        mode: sh.a.spatial.mode,
    };
    if sh.a.warmup > 0 {
        let warm = part(&mut ops, sh, ctx, w, Phase::Warm).await;
        meet(ctx, sh, met.warmed, clients).await;
        warm?;
    }
    if let Some(s) = sh.a.seconds {
        let end = ctx.now_ns() + (s * 1e9) as u64;
        let _ = sh
            .deadline_ns
            .compare_exchange(0, end, Ordering::Relaxed, Ordering::Relaxed);
    }
    part(&mut ops, sh, ctx, w, Phase::Run).await
}

#[cfg(test)]
mod tests {
    use crate::bench::BenchArgs;

    fn args(line: &str) -> BenchArgs {
        let mut a = crate::repro::run::parse_bench(line).expect("bench flags");
        a.silent = true;
        a.quiet = true;
        a
    }

    /// The measured phase's throughput of a messaging run with `per_node` clients on each of
    /// two compute nodes, two server threads, and `extra` flags.
    fn messaging_mops(per_node: usize, extra: &str) -> f64 {
        let a = args(&format!(
            "--index catfish --fabric sim --workload c --records 3000 --operations 600 \
             --compute-nodes 2 --clients-per-node {per_node} --mode messaging --tree rstar \
             --heartbeat-us 100 --server-threads 2 {extra}"
        ));
        let r = super::super::run(&a).expect("messaging run");
        r.iter()
            .find(|r| r.phase == "run")
            .expect("a run phase")
            .mops
    }

    /// An oversubscribed polling server (`--poll-oversub-ns`) loses throughput as its
    /// connections outnumber its threads (the Catfish paper's Fig. 6 polling server), where
    /// the event-based one keeps its saturated throughput.
    #[test]
    fn an_oversubscribed_polling_server_slows_with_more_connections() {
        let (event_few, event_many) = (messaging_mops(1, ""), messaging_mops(8, ""));
        assert!(
            event_many >= 0.95 * event_few,
            "{event_few} -> {event_many}"
        );
        let flag = "--poll-oversub-ns 20000";
        let (poll_few, poll_many) = (messaging_mops(1, flag), messaging_mops(8, flag));
        assert!(poll_many < 0.5 * poll_few, "{poll_few} -> {poll_many}");
        assert!(poll_few < event_few, "{poll_few} vs {event_few}");
    }

    /// `--poll-oversub-ns` is refused beside a `--set server_scan_ns` or off the sim.
    #[test]
    fn oversubscription_refuses_a_second_polling_model() {
        let a = args(
            "--index catfish --fabric sim --workload c --records 300 --operations 60 \
             --poll-oversub-ns 100 --set server_scan_ns=25",
        );
        let e = super::super::run(&a).expect_err("two polling models");
        assert!(e.contains("server_scan_ns"), "{e}");
        let a = args("--index catfish --fabric soft --workload c --poll-oversub-ns 100");
        assert!(super::super::validate(&a).is_err());
    }

    /// The bulk loader builds the tree one client's inserts in object order make, byte for
    /// byte over every byte the region allocated (the superblock's heartbeat word aside: the
    /// server's load, which a bulk load has none of), for each tree kind; a run on it
    /// measures what a run on the inserted tree does (search-only, where the heartbeat
    /// word is not read before the server's first heartbeat rewrites it).
    #[test]
    fn a_bulk_load_builds_the_tree_one_clients_inserts_make() {
        use remora::layouts::GlobalAddr;
        use remora::layouts::catfish::{META_HEARTBEAT_OFFSET, ROOT_SLOT};
        use remora::layouts::region::{NEXT_CHUNK_OFFSET, root_offset};
        use remora::poller::sim::SimConfig;
        let word = |img: &[u8], at: u64| {
            u64::from_le_bytes(img[at as usize..at as usize + 8].try_into().unwrap())
        };
        for tree in ["guttman", "rstar", "hilbert"] {
            let line = format!(
                "--index catfish --fabric sim --workload c --records 4000 --operations 400 \
                 --compute-nodes 2 --clients-per-node 2 --mode offloading --tree {tree} \
                 --heartbeat-us 100 --fanout 8"
            );
            let a = args(&line);
            let sh = super::super::shared(&a).unwrap();
            let cfg = SimConfig {
                compute_nodes: 1,
                memory_nodes: 1,
                region_len: crate::bench::region_bytes(&a),
                model: crate::perf_sim::model_from(&a.sim).unwrap(),
                seed: 1,
                ..SimConfig::default()
            };
            let max = cfg.model.get("max_message").unwrap() as usize;
            let (_, inserted, _) = super::load_sim(&sh, &cfg, 1, 1).unwrap();
            let (bulk, what) = super::load::bulk(&sh, &cfg, max).unwrap();
            let (mut ins, blk) = (inserted[0].host.clone(), &bulk[0].host);
            let used = word(&ins, NEXT_CHUNK_OFFSET);
            assert_eq!(used, word(blk, NEXT_CHUNK_OFFSET), "{tree}: chunks taken");
            let meta = GlobalAddr::from_raw(word(blk, root_offset(ROOT_SLOT))).offset();
            assert_eq!(word(blk, meta + META_HEARTBEAT_OFFSET), 0);
            let hb = (meta + META_HEARTBEAT_OFFSET) as usize;
            ins[hb..hb + 8].fill(0);
            let differ = (0..used as usize).filter(|&i| ins[i] != blk[i]).count();
            assert_eq!(differ, 0, "{tree}: {differ} bytes differ ({what})");
            assert!(what.contains("4000 objects"), "{what}");
            // The run on each: the same figures; the bulk-loaded one has no LOAD record.
            let run = |r: &[crate::bench::phase::BenchRecord]| {
                let r = r.iter().find(|r| r.phase == "run").expect("a run phase");
                (
                    r.ops,
                    r.mops,
                    r.latency.p50_ns,
                    r.latency.p99_ns,
                    r.per_op.bytes_in,
                )
            };
            let by_inserts = super::super::run(&args(&format!("{line} --no-bulk-load"))).unwrap();
            let by_bulk = super::super::run(&a).unwrap();
            assert_eq!(by_inserts.len(), 2);
            assert_eq!(by_bulk.len(), 1, "{tree}: a LOAD record of a bulk load");
            assert_eq!(run(&by_inserts), run(&by_bulk), "{tree}");
            assert!(
                by_bulk[0].notes.iter().any(|n| n.contains("bulk-loaded")),
                "{:?}",
                by_bulk[0].notes
            );
        }
    }

    /// A run that finds its tree loaded (the second of two in one process) measures exactly
    /// what the run that loaded it did, and its server recovers the whole tree.
    #[test]
    fn a_found_load_measures_what_a_made_one_does() {
        let a = args(
            "--index catfish --fabric sim --workload c --records 3000 --operations 600 \
             --compute-nodes 2 --clients-per-node 3 --mode offloading --tree rstar \
             --heartbeat-us 100",
        );
        let first = super::super::run(&a).expect("first run");
        let second = super::super::run(&a).expect("second run");
        let run = |r: &[crate::bench::phase::BenchRecord]| {
            let r = r.iter().find(|r| r.phase == "run").expect("a run phase");
            (r.ops, r.mops, r.latency.p50_ns, r.per_op.round_trips)
        };
        assert_eq!(run(&first), run(&second));
        let notes = &first.last().expect("records").notes;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("tree checked: 3000 entries")),
            "{notes:?}"
        );
        let s = first
            .last()
            .and_then(|r| r.spatial.as_ref())
            .expect("spatial");
        assert_eq!(s.offloaded_searches, 600);
        assert!(
            s.node_reads_per_offload >= 2.0,
            "{}",
            s.node_reads_per_offload
        );
        assert_eq!(s.conflicts_per_offload, 0.0, "search-only: no writer");
    }
}

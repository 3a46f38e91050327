//! The runners of a spatial run: the deterministic sim, the in-process or connected soft
//! memory node, and the TCP baseline; each creates or opens the tree, runs every client's
//! LOAD and run phases, and measures the tree's height.
use super::client::{Phase, Rdma, SpatialOps, part};
use super::{ClientResult, Outcome, Serve, Shared};
use crate::bench::BenchArgs;
use crate::bench::soft::{BarrierGuard, one};
use crate::bench::tcp::{TcpClient, TcpServer};
use crate::bench::ycsb::Workload;
use remora::core::block_on::block_on;
use remora::core::catfish::{CatfishClient, CatfishError, CatfishServer, TreeKind};
use remora::core::fabric::{Endpoint, QueuePair};
use remora::layouts::GlobalAddr;
use remora::layouts::catfish::{META_ROOT_OFFSET, Node, node_len};
use remora::poller::clock::Clock;
use remora::poller::executor::{ServerCore, plan_cores, run_workers};
use remora::poller::soft::{NodeConfig, ServeMode, SoftMemoryNode, control};
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::atomic::Ordering;

/// Levels of the tree (leaves included), from its root node's level.
pub(super) async fn tree_height<Q: QueuePair>(qp: &Q, c: &CatfishClient) -> Result<u16, String> {
    let meta = c.meta();
    let mut w = [0u8; 8];
    let mut last = String::new();
    for _ in 0..64 {
        qp.read(
            GlobalAddr::new(meta.node(), meta.offset() + META_ROOT_OFFSET),
            &mut w,
        )
        .await
        .map_err(|e| e.to_string())?;
        let root = GlobalAddr::from_raw(u64::from_le_bytes(w));
        let mut img = vec![0u8; node_len(c.fanout())];
        qp.read(root, &mut img).await.map_err(|e| e.to_string())?;
        match Node::decode_with(&img, c.fanout()) {
            Ok(n) => return Ok(n.level + 1),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("the root node did not decode: {last}"))
}

/// The Catfish server of an in-process or simulated memory node.
pub(super) fn server(a: &BenchArgs, max_message: usize) -> CatfishServer {
    CatfishServer::new(max_message)
        .with_heartbeat_interval_ns(a.spatial.heartbeat_us * 1000)
        .with_insert_cpu_ns(a.spatial.insert_cpu_ns)
}

/// A client of the tree, with the run's heartbeat interval.
pub(super) async fn open<Q: QueuePair>(a: &BenchArgs, qp: &Q) -> Result<CatfishClient, String> {
    let mut c = CatfishClient::open(qp).await.map_err(|e| e.to_string())?;
    c.set_heartbeat_interval_ns(a.spatial.heartbeat_us * 1000);
    Ok(c)
}

/// Opens the tree, creating it with the asked fanout and kind if there is none.
pub(super) async fn open_or_create<Q: QueuePair>(
    qp: &Q,
    fanout: usize,
    kind: TreeKind,
) -> Result<CatfishClient, String> {
    match CatfishClient::open(qp).await {
        Ok(c) if c.kind() != kind => Err(format!(
            "the memory node already holds a Catfish {} tree: run with --tree {} (or restart \
             the memnode for a fresh tree)",
            c.kind().name(),
            c.kind().name()
        )),
        Ok(c) if c.fanout() != fanout => Err(format!(
            "the memory node already holds a Catfish tree of fanout {}: run with --fanout {} \
             (or restart the memnode for a fresh tree)",
            c.fanout(),
            c.fanout()
        )),
        Ok(c) => Ok(c),
        Err(CatfishError::NotCreated) => CatfishClient::create_tree(qp, 1, fanout, kind)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

pub(super) fn run_soft(sh: &Shared<'_>) -> Result<Outcome, String> {
    let a = sh.a;
    let (local, remote, mut notes) = match &a.connect {
        Some(p) => {
            let path = PathBuf::from(p);
            let info = control::info(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if info.service_name() != "catfish" {
                return Err(format!(
                    "the memnode at {} runs the `{}` service; Catfish needs \
                     `remora memnode --service catfish`",
                    path.display(),
                    info.service_name()
                ));
            }
            let note = format!(
                "memnode {} at {}: the tree persists there, so LOAD adds to earlier runs' objects",
                info.node_id,
                path.display()
            );
            (None, Some(path), vec![note])
        }
        None => {
            let cfg = NodeConfig {
                region_len: crate::bench::region_bytes(a),
                ..NodeConfig::default()
            };
            let server = Box::new(server(a, cfg.max_msg));
            let node = SoftMemoryNode::create_with(cfg, server)
                .map_err(|e| format!("creating the memory node: {e}"))?;
            let note = format!(
                "in-process memory node: {} MiB region",
                crate::bench::region_bytes(a) >> 20
            );
            (Some(node), None, vec![note])
        }
    };
    let endpoint = || match (&local, &remote) {
        (Some(n), _) => n.endpoint().map_err(|e| e.to_string()),
        (_, Some(p)) => control::connect_all(std::slice::from_ref(p)).map_err(|e| e.to_string()),
        _ => Err("no memory node".to_string()),
    };
    let server_core = match (&local, a.server_core) {
        (None, Some(_)) => {
            return Err("--server-core applies to the in-process memory node".into());
        }
        (None, None) => ServerCore::None,
        (Some(_), Some(c)) => ServerCore::Core(c),
        (Some(_), None) => ServerCore::Auto,
    };
    let plan = plan_cores(a.threads, !a.no_pin, server_core)?;
    for w in &plan.warnings {
        eprintln!("remora: warning: {w}");
    }
    let threads = a.spatial.server_threads;
    let _server = local.as_ref().map(|n| {
        if threads == 1 && a.spatial.serve == Serve::Event {
            n.spawn_server_on(plan.server)
        } else {
            let mode = match a.spatial.serve {
                Serve::Event => ServeMode::Event,
                Serve::Polling => ServeMode::Polling,
            };
            let cores: Vec<usize> = plan.server.into_iter().collect();
            n.spawn_servers(threads, mode, &cores)
        }
    });
    if local.is_some() {
        notes.push(format!(
            "{threads} server thread(s), {:?} mode",
            a.spatial.serve
        ));
    }
    {
        let ep = endpoint()?;
        let qp = ep.qp(0).map_err(|e| e.to_string())?;
        block_on(open_or_create(qp, a.spatial.fanout, a.spatial.tree.kind()))?;
    }
    let clock = Clock::get();
    let barrier = Barrier::new(a.threads);
    let (results, pinning) = run_workers(a.threads, !a.no_pin, |w| -> ClientResult {
        let sync = BarrierGuard {
            barrier: &barrier,
            left: Cell::new(if a.workload == Workload::Load { 1 } else { 3 }),
        };
        let stop = |e: String| {
            sh.stop.store(true, Ordering::SeqCst);
            e
        };
        let ep = endpoint().map_err(stop)?;
        let qp = ep.qp(0).map_err(|e| stop(e.to_string()))?;
        let mut c = block_on(open(a, qp)).map_err(stop)?;
        let mut ops = Rdma {
            c: &mut c,
            ep: &ep,
            mode: a.spatial.mode,
        };
        phases(sh, &clock, &sync, w, &mut ops)
    });
    notes.push(pinning.to_string());
    notes.push(format!("clock: {}", clock.source()));
    let height = endpoint().ok().and_then(|ep| {
        let qp = ep.qp(0).ok()?;
        let c = block_on(CatfishClient::open(qp)).ok()?;
        block_on(tree_height(qp, &c)).ok()
    });
    Ok((results, height, a.threads, notes))
}

/// A worker's LOAD and run phases, in step with the others at `sync`.
pub(super) fn phases(
    sh: &Shared<'_>,
    clock: &Clock,
    sync: &BarrierGuard<'_>,
    w: usize,
    ops: &mut impl SpatialOps,
) -> ClientResult {
    let a = sh.a;
    sync.wait();
    let l = Some(one(part(ops, sh, clock, w, Phase::Load))?);
    if a.workload == Workload::Load {
        return Ok((l, None));
    }
    if sync.wait()
        && let Some(s) = a.seconds
    {
        sh.deadline_ns
            .store(clock.now_ns() + (s * 1e9) as u64, Ordering::SeqCst);
    }
    sync.wait();
    let r = one(part(ops, sh, clock, w, Phase::Run))?;
    Ok((l, Some(r)))
}

/// `--mode tcp`: the same workload over TCP sockets, to an in-process server on loopback
/// or a `--tcp-connect`ed one.
pub(super) fn run_tcp(sh: &Shared<'_>) -> Result<Outcome, String> {
    let a = sh.a;
    let (_server, addr, mut notes) = match &a.spatial.tcp_connect {
        Some(addr) => {
            let note = format!(
                "TCP server at {addr} (remora memnode --service catfish --tcp-listen): its \
                 tree persists there, so LOAD adds to earlier runs' objects"
            );
            (None, addr.clone(), vec![note])
        }
        None => {
            let s = TcpServer::start(
                "127.0.0.1:0",
                crate::bench::region_bytes(a),
                a.spatial.tree.kind(),
                a.spatial.fanout,
                remora::core::catfish::server::MAX_WINDOW,
            )?;
            let addr = s.addr().to_string();
            let note = format!(
                "in-process TCP server on loopback {addr}: one server thread per connection, \
                 kernel TCP both ways (what the RDMA modes avoid)"
            );
            (Some(s), addr, vec![note])
        }
    };
    let plan = plan_cores(a.threads, !a.no_pin, ServerCore::None)?;
    for w in &plan.warnings {
        eprintln!("remora: warning: {w}");
    }
    let clock = Clock::get();
    let barrier = Barrier::new(a.threads);
    let (results, pinning) = run_workers(a.threads, !a.no_pin, |w| -> ClientResult {
        let sync = BarrierGuard {
            barrier: &barrier,
            left: Cell::new(if a.workload == Workload::Load { 1 } else { 3 }),
        };
        let mut c = TcpClient::connect(&addr).inspect_err(|_| {
            sh.stop.store(true, Ordering::SeqCst);
        })?;
        phases(sh, &clock, &sync, w, &mut c)
    });
    notes.push(pinning.to_string());
    notes.push(format!("clock: {}", clock.source()));
    notes
        .push("round trips and bytes per op count TCP requests and framed bytes (no verbs)".into());
    Ok((results, None, a.threads, notes))
}

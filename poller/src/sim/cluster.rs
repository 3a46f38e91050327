//! The public face of the simulator: [`SimConfig`], [`Sim`], [`ClientCtx`].
use super::engine::{Client, End, EngineStats, Ev, NO_CLIENT, NO_TASK, Nic, Notice, World};
use super::exec::{Executor, Stop};
use super::faults::Faults;
use super::llc::LlcStats;
use super::memory::{MemNode, NodeImage, NvmStats};
use super::model::{Model, Ps};
use super::qp::{SimEndpoint, SimQp, WorldRef};
use super::rng::Rng;
use super::server::{Handlers, SharedHandler, SimRegion, thread_loop};
use super::trace::{Trace, TraceSel};
use remora_core::fabric::{FabricError, SegmentOrder};
use remora_core::server::{Echo, Handler};
use remora_layouts::NodeId;
use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

/// The shape of a simulated cluster.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Compute nodes (1..=65535), each with one NIC shared by its client threads.
    pub compute_nodes: usize,
    /// Memory nodes (1..=65535), each with its own NIC, host region and CPU; their `NodeId`s
    /// are `0..memory_nodes`.
    pub memory_nodes: usize,
    /// Bytes of each memory node's host region, header included.
    pub region_len: u64,
    /// Bytes of device (on-chip) memory per memory node (0: none).
    pub dm_len: u64,
    /// Allocator chunk size written in the region header.
    pub chunk_size: u64,
    /// Host regions are persistent memory (see `memory.rs`); else DRAM, lost at a crash.
    pub persistent: bool,
    /// The NIC, network and CPU model (see [`Model::PARAMS`] for each parameter).
    pub model: Model,
    /// Seed of every random choice of the run: the same seed and inputs give the same run.
    pub seed: u64,
    /// Faults to inject (none by default).
    pub faults: Faults,
    /// Which batches to trace, if any.
    pub trace: Option<TraceSel>,
    /// How READs sample and WRITEs place their 64-byte segments (default: shuffled).
    pub segment_order: SegmentOrder,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            compute_nodes: 1,
            memory_nodes: 1,
            region_len: 64 << 20,
            dm_len: 256 << 10,
            chunk_size: 1 << 20,
            persistent: false,
            model: Model::default(),
            seed: 1,
            faults: Faults::none(),
            trace: None,
            segment_order: SegmentOrder::default(),
        }
    }
}

/// A configuration the simulator refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError(pub String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sim: {}", self.0)
    }
}
impl std::error::Error for SimError {}

/// The outcome of [`Sim::run`] / [`Sim::run_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunReport {
    /// Why the run stopped.
    pub stop: Stop,
    /// Virtual time at the end, in nanoseconds.
    pub now_ns: u64,
    /// User tasks that did not finish (waiting forever, cut by the time limit, or crashed).
    pub unfinished: usize,
    /// The simulation's seed: running the same inputs under it replays this run.
    pub seed: u64,
}

/// A handle on a memory node's region key.
#[derive(Clone)]
pub struct KeyHandle(Arc<AtomicU32>);

impl KeyHandle {
    /// Revokes the key and registers the region again under a new one: queue pairs made
    /// before get remote access errors; endpoints made after use the new key.
    pub fn revoke(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
    /// The key's current value (each [`revoke`](Self::revoke) adds one).
    pub fn current(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }
}

/// What `Handler::recover` said when a persistent memory node restarted (see
/// [`Sim::recovery_reports`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The memory node that restarted.
    pub node: NodeId,
    /// Virtual time of the restart, in nanoseconds.
    pub at_ns: u64,
    /// The handler's report, or its error (the node then stays down).
    pub report: Result<String, FabricError>,
}

/// A simulated cluster. `'a` bounds the futures it runs (they may borrow from the caller).
pub struct Sim<'a> {
    w: WorldRef,
    exec: Executor<'a>,
    compute_nodes: usize,
    /// Server-side logic: one echo service per memory node, then every `set_handler`.
    handlers: Handlers<'a>,
    /// Per memory node, what makes its handler (`set_handler_with`): called again at each
    /// restart, as a restarted node runs a new process.
    factories: Factories<'a>,
    recoveries: Rc<RefCell<Vec<Recovery>>>,
}

type Factory<'a> = Box<dyn Fn() -> Box<dyn Handler + 'a> + 'a>;
type Factories<'a> = Rc<RefCell<Vec<Option<Factory<'a>>>>>;

impl World {
    fn add_client(&mut self, compute_node: usize) -> u32 {
        let nic = compute_node as u32;
        self.clients.push(Client {
            nic,
            ..Client::default()
        });
        (self.clients.len() - 1) as u32
    }

    /// Connects client `c` to every memory node; returns the client-side end ids.
    fn connect(&mut self, c: u32) -> Vec<u32> {
        let cnic = self.clients[c as usize].nic;
        let depth = self.tm.recv_depth;
        let mut out = Vec::new();
        for n in 0..self.nodes.len() {
            let mnic = self.nic_of_node(n as NodeId).unwrap_or(0) as u32;
            let a = self.ends.len() as u32;
            let key = self.nodes[n].key_now();
            let node = &mut self.nodes[n];
            let thread = node.conns % node.threads.len() as u32;
            node.conns += 1;
            let handler = node.handler;
            self.ends.push(End {
                nic: cnic,
                peer: a + 1,
                node: n as NodeId,
                client: c,
                key,
                rq_credits: depth,
                recv_waiters: Vec::new(),
                ..End::default()
            });
            self.ends.push(End {
                nic: mnic,
                peer: a,
                node: n as NodeId,
                client: NO_CLIENT,
                server: true,
                key,
                thread,
                handler,
                rq_credits: depth,
                recv_waiters: Vec::new(),
                ..End::default()
            });
            // The handler learns the client's fabric id (`ClientCtx::client_id`, what
            // `fence` takes) before the first message.
            self.notices
                .push(Notice::Connect(n as NodeId, a + 1, c.wrapping_add(1)));
            out.push(a);
        }
        out
    }
}

impl<'a> Sim<'a> {
    /// A cluster with fresh memory nodes (zeroed, region header at offset 0).
    pub fn new(cfg: SimConfig) -> Result<Sim<'a>, SimError> {
        let mut images = Vec::new();
        for n in 0..cfg.memory_nodes {
            let img = NodeImage::fresh(cfg.region_len, cfg.chunk_size, cfg.dm_len)
                .map_err(|e| SimError(format!("memory node {n}: region header: {e:?}")))?;
            images.push(img);
        }
        Sim::with_images(cfg, images)
    }

    /// A cluster whose memory nodes start from `images` (e.g. from [`Sim::into_images`]);
    /// `region_len`/`dm_len` of `cfg` are ignored in favour of the images'. A node whose
    /// image carries warm lines ([`NodeImage::warm`]) starts its last-level cache with
    /// them.
    pub fn with_images(cfg: SimConfig, images: Vec<NodeImage>) -> Result<Sim<'a>, SimError> {
        if cfg.compute_nodes == 0 || cfg.compute_nodes > u16::MAX as usize {
            return Err(SimError(format!(
                "compute_nodes must be 1..=65535, got {}",
                cfg.compute_nodes
            )));
        }
        if images.is_empty() || images.len() > u16::MAX as usize {
            return Err(SimError(format!(
                "memory_nodes must be 1..=65535, got {}",
                images.len()
            )));
        }
        if images.len() != cfg.memory_nodes {
            return Err(SimError(format!(
                "{} memory images for {} memory nodes",
                images.len(),
                cfg.memory_nodes
            )));
        }
        for (i, s) in cfg.faults.scheduled.iter().enumerate() {
            let n = match s.kind {
                super::faults::FaultKind::CrashNode(n)
                | super::faults::FaultKind::RestartNode(n)
                | super::faults::FaultKind::SlowNode(n, _) => n,
            };
            if n as usize >= images.len() {
                return Err(SimError(format!(
                    "fault {i} names memory node {n}, which does not exist"
                )));
            }
        }
        let m = &cfg.model;
        let images_len = images.len();
        let mut w = World::new(
            cfg.model.clone(),
            cfg.seed,
            cfg.faults.clone(),
            Trace::new(cfg.trace),
        );
        w.segment_order = cfg.segment_order;
        for _ in 0..cfg.compute_nodes {
            w.nics.push(Nic {
                slow: 1.0,
                ..Nic::default()
            });
        }
        for (n, mut img) in images.into_iter().enumerate() {
            w.nics.push(Nic {
                node: Some(n as NodeId),
                slow: 1.0,
                ..Nic::default()
            });
            let warm = std::mem::take(&mut img.warm);
            let mut node = MemNode::new(
                n as NodeId,
                img,
                cfg.chunk_size,
                cfg.persistent,
                m.persist_window as usize,
                m.atomic_slots as usize,
                m.server_threads as usize,
            );
            // The cache the CPU's writing of the image left (`llc.rs`), counting nothing.
            node.llc.warm(m.server_llc_lines as usize, &warm);
            w.nodes.push(node);
        }
        for i in 0..w.faults.scheduled.len() {
            let at = w.faults.scheduled[i].at;
            w.schedule(at, Ev::Fault(i as u32));
        }
        let nodes = images_len;
        Ok(Sim {
            w: Rc::new(RefCell::new(w)),
            exec: Executor::new(),
            compute_nodes: cfg.compute_nodes,
            handlers: Rc::new(RefCell::new(
                (0..nodes)
                    .map(|_| -> SharedHandler<'a> { Rc::new(RefCell::new(Box::new(Echo))) })
                    .collect(),
            )),
            factories: Rc::new(RefCell::new((0..nodes).map(|_| None).collect())),
            recoveries: Rc::new(RefCell::new(Vec::new())),
        })
    }

    /// A new client thread on `compute_node`, with its own endpoint (one queue pair per
    /// memory node, using each region's current key).
    pub fn endpoint(&mut self, compute_node: usize) -> Result<SimEndpoint, SimError> {
        if compute_node >= self.compute_nodes {
            return Err(SimError(format!(
                "compute node {compute_node} does not exist ({} compute nodes)",
                self.compute_nodes
            )));
        }
        let (c, ends) = {
            let mut w = self.w.borrow_mut();
            let c = w.add_client(compute_node);
            (c, w.connect(c))
        };
        let qps = ends
            .into_iter()
            .map(|e| SimQp::new(self.w.clone(), e))
            .collect();
        Ok(SimEndpoint::new(qps, c))
    }

    /// A new client thread on `compute_node`, as a context its coroutines share.
    pub fn client(&mut self, compute_node: usize) -> Result<ClientCtx, SimError> {
        let ep = self.endpoint(compute_node)?;
        let seed = self.w.borrow().seed;
        let c = ep.client();
        Ok(ClientCtx {
            w: self.w.clone(),
            ep: Rc::new(ep),
            client: c,
            rng: RefCell::new(Rng::new(seed, 1 + ((c as u64) << 20))),
        })
    }

    /// Spawns a coroutine of client thread `client` (see [`SimEndpoint::client`]).
    pub fn spawn<F: Future<Output = ()> + 'a>(&mut self, client: u32, fut: F) {
        let id = self.w.borrow_mut().add_task(client);
        self.exec.add(&self.w, id, Box::pin(fut), true);
    }

    /// Spawns coroutine `i` of the client of `ctx`: `f` gets its own context (same endpoint
    /// and CPU, its own random stream).
    pub fn spawn_with<F, Fut>(&mut self, ctx: &ClientCtx, i: u64, f: F)
    where
        F: FnOnce(ClientCtx) -> Fut,
        Fut: Future<Output = ()> + 'a,
    {
        let c = ctx.fork(i);
        let client = c.client;
        self.spawn(client, f(c));
    }

    /// Runs `handler` (server-side logic, see `remora_core::server`) on memory node `node`'s
    /// handler threads for every connection opened after this call, instead of the echo
    /// service. Each message costs `server_poll_ns + server_handler_ns` of the CPU of its
    /// connection's thread, and each reply `server_reply_ns` (see `server.rs`). `on_idle` is
    /// not called: a node's background work must be driven by messages; a handler that
    /// meters its load reads real busy time from `LocalRegion::cpu_clock` instead.
    pub fn set_handler(
        &mut self,
        node: NodeId,
        handler: Box<dyn Handler + 'a>,
    ) -> Result<(), SimError> {
        if let Some(f) = self.factories.borrow_mut().get_mut(node as usize) {
            *f = None;
        }
        let mut w = self.w.borrow_mut();
        let slot = w
            .nodes
            .get_mut(node as usize)
            .ok_or_else(|| SimError(format!("no memory node {node}")))?;
        let mut hs = self.handlers.borrow_mut();
        slot.handler = hs.len() as u32;
        hs.push(Rc::new(RefCell::new(handler)));
        Ok(())
    }

    /// [`Sim::set_handler`] with a handler made by `make`, which makes a new one each time
    /// the node restarts (`Faults::restart_node_at`): the restarted node's handler starts
    /// with no volatile state, as a restarted server process does, and its `recover` runs
    /// on the surviving region. (With `set_handler` the one handler object lives on across
    /// restarts, its volatile fields included.)
    pub fn set_handler_with(
        &mut self,
        node: NodeId,
        make: impl Fn() -> Box<dyn Handler + 'a> + 'a,
    ) -> Result<(), SimError> {
        self.set_handler(node, make())?;
        if let Some(f) = self.factories.borrow_mut().get_mut(node as usize) {
            *f = Some(Box::new(make));
        }
        Ok(())
    }

    /// CPU time memory node `node`'s handler threads have been busy so far, in ns (summed
    /// over its threads; a service in progress counts up to now).
    pub fn server_busy_ns(&self, node: NodeId) -> Option<u64> {
        let w = self.w.borrow();
        w.nodes.get(node as usize).map(|n| n.busy_ps(w.now) / 1000)
    }

    /// [`Sim::server_busy_ns`] summed over all memory nodes.
    pub fn server_busy_total_ns(&self) -> u64 {
        busy_total_ns(&self.w)
    }

    /// The cache lines memory node `node`'s handlers have touched so far, hits and misses of
    /// its last-level cache (the server CPU model, `llc.rs`).
    pub fn server_llc_stats(&self, node: NodeId) -> Option<LlcStats> {
        self.w
            .borrow()
            .nodes
            .get(node as usize)
            .map(|n| n.llc.stats)
    }

    /// [`Sim::server_llc_stats`] summed over all memory nodes.
    pub fn server_llc_total(&self) -> LlcStats {
        llc_total(&self.w)
    }

    fn run_inner(&mut self, limit: Option<Ps>, until_done: bool) -> RunReport {
        let w = self.w.clone();
        let handlers = &self.handlers;
        let mut spawn_server = |ex: &mut Executor<'a>, node: NodeId, thread: u32| {
            let id = w.borrow_mut().add_task(NO_CLIENT);
            let task = thread_loop(w.clone(), node, thread, handlers.clone());
            ex.add(&w, id, Box::pin(task), false);
        };
        let recoveries = &self.recoveries;
        let factories = &self.factories;
        let mut notice = |n: Notice| handle_notice(&w, handlers, factories, recoveries, n);
        let stop = self
            .exec
            .run(&self.w, limit, until_done, &mut spawn_server, &mut notice);
        let wb = self.w.borrow();
        RunReport {
            stop,
            now_ns: wb.now / 1000,
            unfinished: self.exec.unfinished_user(),
            seed: wb.seed,
        }
    }

    /// Runs until every spawned task has finished, or until nothing more can happen.
    pub fn run(&mut self) -> RunReport {
        self.run_inner(None, true)
    }

    /// Runs `ns` more nanoseconds of virtual time (tasks still running stay suspended and
    /// continue at the next run).
    pub fn run_for(&mut self, ns: u64) -> RunReport {
        let limit = self.w.borrow().now + ns * 1000;
        self.run_inner(Some(limit), false)
    }

    /// Current virtual time in nanoseconds (rounded down).
    pub fn now_ns(&self) -> u64 {
        self.w.borrow().now / 1000
    }
    /// Current virtual time in picoseconds (the engine's resolution).
    pub fn now_ps(&self) -> Ps {
        self.w.borrow().now
    }
    /// The seed the simulation was made with ([`SimConfig::seed`]).
    pub fn seed(&self) -> u64 {
        self.w.borrow().seed
    }
    /// A copy of the model the simulation runs.
    pub fn model(&self) -> Model {
        self.w.borrow().model.clone()
    }
    /// The engine's counters since the simulation began.
    pub fn stats(&self) -> EngineStats {
        self.w.borrow().stats
    }
    /// Traced lines so far (see `trace.rs`).
    pub fn trace_lines(&self) -> Vec<String> {
        self.w.borrow().trace.lines.clone()
    }
    /// The region key of memory node `node`.
    pub fn key(&self, node: NodeId) -> Option<KeyHandle> {
        self.w
            .borrow()
            .nodes
            .get(node as usize)
            .map(|n| KeyHandle(n.key.clone()))
    }
    /// Copies `len` bytes of memory node `node`'s host region at `off` (for checks).
    pub fn host_bytes(&self, node: NodeId, off: u64, len: usize) -> Option<Vec<u8>> {
        let w = self.w.borrow();
        let h = &w.nodes.get(node as usize)?.host;
        let o = usize::try_from(off).ok()?;
        h.get(o..o.checked_add(len)?).map(|s| s.to_vec())
    }
    /// What each persistent memory node's handler recovered at its restarts, in order (see
    /// `Handler::recover`; the restart fault of `faults.rs`).
    pub fn recovery_reports(&self) -> Vec<Recovery> {
        self.recoveries.borrow().clone()
    }
    /// Bytes written to memory node `node`'s persistent region so far, by cause (all zero on
    /// a DRAM node; see `memory.rs`).
    pub fn nvm_stats(&self, node: NodeId) -> Option<NvmStats> {
        self.w.borrow().nodes.get(node as usize).map(|n| n.nvm)
    }
    /// [`Sim::nvm_stats`] summed over all memory nodes.
    pub fn nvm_total(&self) -> NvmStats {
        nvm_total(&self.w)
    }
    /// Un-persisted writes at memory node `node` (persistent regions).
    pub fn unpersisted(&self, node: NodeId) -> usize {
        self.w
            .borrow()
            .nodes
            .get(node as usize)
            .map_or(0, |n| n.unpersisted())
    }
    /// The lines memory node `node`'s last-level cache holds now (empty if it never
    /// started), to start another simulation's node with ([`NodeImage::warm`]): a cluster
    /// loaded in one sim and measured in another keeps its server's cache.
    pub fn cached_lines(&self, node: NodeId) -> super::llc::WarmLines {
        self.w
            .borrow()
            .nodes
            .get(node as usize)
            .map(|n| n.llc.cached())
            .unwrap_or_default()
    }
    /// The memory nodes' contents, to start another simulation from.
    pub fn into_images(self) -> Vec<NodeImage> {
        let Sim { w, exec, .. } = self;
        drop(exec);
        let nodes = std::mem::take(&mut w.borrow_mut().nodes);
        nodes.into_iter().map(MemNode::image).collect()
    }
}

mod client;
pub use client::{ClientCtx, Sleep};
pub(crate) use client::{pause, sleep_until};

fn llc_total(w: &WorldRef) -> LlcStats {
    w.borrow()
        .nodes
        .iter()
        .fold(LlcStats::default(), |a, n| a.plus(&n.llc.stats))
}

fn nvm_total(w: &WorldRef) -> NvmStats {
    w.borrow()
        .nodes
        .iter()
        .fold(NvmStats::default(), |a, n| a.plus(&n.nvm))
}

/// Does the handler work the engine queued (see `Notice`): `on_disconnect` for an ended
/// connection, with the handler that served it; `recover` for a restarted persistent node,
/// with a new handler from the node's factory if it has one, else its current handler. Both
/// run on the node's CPU at the current virtual time, and their CPU time is not charged
/// (they are rare).
fn handle_notice<'a>(
    w: &WorldRef,
    handlers: &Handlers<'a>,
    factories: &Factories<'a>,
    recoveries: &Rc<RefCell<Vec<Recovery>>>,
    n: Notice,
) {
    if let Notice::Restart(node) = n
        && let Some(make) = factories
            .borrow()
            .get(node as usize)
            .and_then(|f| f.as_ref())
    {
        let mut hs = handlers.borrow_mut();
        let mut wb = w.borrow_mut();
        if let Some(m) = wb.nodes.get_mut(node as usize) {
            m.handler = hs.len() as u32;
            hs.push(Rc::new(RefCell::new(make())));
        }
    }
    let (node, hix) = {
        let wb = w.borrow();
        match n {
            Notice::Disconnect(node, end) | Notice::Connect(node, end, _) => {
                (node, wb.ends[end as usize].handler)
            }
            Notice::Restart(node) => match wb.nodes.get(node as usize) {
                Some(m) if m.persistent => (node, m.handler),
                _ => return,
            },
        }
    };
    let Some(h) = handlers.borrow().get(hix as usize).cloned() else {
        return;
    };
    let region = SimRegion::new(w, node);
    if !matches!(n, Notice::Connect(..)) {
        // (A connection's introduction is no handler invocation of the CPU model: it
        // touches no memory in any service here.)
        region.begin();
    }
    match n {
        Notice::Disconnect(_, end) => h.borrow_mut().on_disconnect(&region, end as usize),
        Notice::Connect(_, end, peer) => h.borrow_mut().on_connect(&region, end as usize, peer),
        Notice::Restart(_) => {
            let report = h.borrow_mut().recover(&region);
            let mut wb = w.borrow_mut();
            if report.is_err() {
                // A region the service cannot repair is not served.
                if let Some(nic) = wb.nic_of_node(node) {
                    wb.nics[nic].dead = true;
                }
            }
            let at_ns = wb.now / 1000;
            recoveries.borrow_mut().push(Recovery {
                node,
                at_ns,
                report,
            });
        }
    }
}

fn busy_total_ns(w: &WorldRef) -> u64 {
    let w = w.borrow();
    w.nodes.iter().map(|n| n.busy_ps(w.now)).sum::<Ps>() / 1000
}

//! The soft fabric's memory node: a registered region (and device memory) in shared memory,
//! its key, its connections, and the echo service on their receive queues.
use super::qp::{Channel, SoftEndpoint, SoftQp};
use super::serve::{fence_farewell, last_words, serve_connection};
use super::words;
use super::words::{Persist, WordRegion};
use crate::arena::{Mapping, PageKind};
use remora_core::fabric::SegmentOrder;
use remora_core::server::{Echo, Handler, Replies};
use remora_layouts::NodeId;
use remora_layouts::region::RegionHeader;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a memory node is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeConfig {
    /// The node's id: queue pairs to it name it, and its `GlobalAddr`s carry it.
    pub node_id: NodeId,
    /// Host region bytes, header included.
    pub region_len: u64,
    /// Device-memory bytes (0: none).
    pub dm_len: u64,
    /// Allocator chunk size (power of two, >= 64).
    pub chunk_size: u64,
    /// Receive slots per queue pair (posted receives).
    pub ring_depth: usize,
    /// Largest SEND payload.
    pub max_msg: usize,
    /// Segment order of the queue pairs this node hands out in-process (clients of other
    /// processes choose their own with `SoftQp::set_segment_order`).
    pub segment_order: SegmentOrder,
    /// Emulated NVM write latency, in ns per cache line the service persists (0: none).
    pub nvm_write_ns: u32,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            node_id: 0,
            region_len: 64 << 20,
            dm_len: 256 << 10,
            chunk_size: 1 << 20,
            ring_depth: 64,
            max_msg: 4096,
            segment_order: SegmentOrder::default(),
            nvm_write_ns: 0,
        }
    }
}

pub(crate) const CTL_MAGIC: u64 = u64::from_le_bytes(*b"REMORAK1");
/// The control page: magic, region key, then one word per client slot (see [`NodeMem::slot`]).
pub(crate) const CTL_LEN: usize = SLOTS_AT + 8 * MAX_SLOTS;
const CTL_KEY: usize = 8;
const SLOTS_AT: usize = 4096;
/// Client slots of a node (its live connections at most).
pub const MAX_SLOTS: usize = 4096;
/// A slot word: in use by a live connection, and fenced (its client may no longer touch the
/// region); the low 16 bits are the slot's generation, bumped at every allocation.
pub(crate) const SLOT_IN_USE: u64 = 1 << 63;
pub(crate) const SLOT_FENCED: u64 = 1 << 62;
const HEADER_BYTES: usize = remora_layouts::region::HEADER_LEN;

/// What holds a memory node's host region.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Backing {
    /// Anonymous shared memory (memfd): gone with the node's process.
    #[default]
    Memory,
    /// A file mapped shared. `dax`: persistent memory (a DAX file, `MAP_SYNC`), where
    /// `persist` makes stores durable across power loss; otherwise an ordinary file, which
    /// survives the node's process (the page cache) but not the machine. A node started on a
    /// file that holds a region runs its service's recovery before it accepts clients.
    File {
        /// The file (created with the region's length if it is new or empty).
        path: std::path::PathBuf,
        /// The file is on a DAX filesystem: map it with `MAP_SYNC`.
        dax: bool,
    },
}

/// What opening a node found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The region held a previous life's state.
    pub restarted: bool,
    /// The service's recovery report (empty for a fresh region).
    pub recovery: String,
}

/// A node's shared memory as any process maps it.
pub(crate) struct NodeMem {
    pub(crate) node_id: NodeId,
    pub(crate) region: Mapping,
    /// `persist` flushes and fences (a file or persistent memory behind the region).
    pub(crate) durable: bool,
    /// Emulated NVM write latency per flushed cache line (0: none).
    pub(crate) nvm_write_ns: u32,
    pub(crate) region_len: u64,
    pub(crate) dm: Option<Mapping>,
    pub(crate) dm_len: u64,
    pub(crate) ctl: Mapping,
    /// Bytes written to the host region, if it is persistent (see `nvm.rs`).
    pub(crate) nvm: super::nvm::NvmCounters,
}

impl NodeMem {
    /// The region key; revocation changes it.
    pub(crate) fn key(&self) -> &AtomicU64 {
        // SAFETY: CTL_KEY is an aligned offset inside the CTL_LEN-byte control mapping,
        // which lives as long as self.
        unsafe { words::word(self.ctl.as_ptr().add(CTL_KEY)) }
    }

    /// The word of client slot `i` (`i < MAX_SLOTS`).
    pub(crate) fn slot(&self, i: usize) -> &AtomicU64 {
        assert!(i < MAX_SLOTS, "slot {i} out of range");
        // SAFETY: SLOTS_AT + 8 * i < CTL_LEN for i < MAX_SLOTS; aligned; the mapping lives as
        // long as self.
        unsafe { words::word(self.ctl.as_ptr().add(SLOTS_AT + 8 * i)) }
    }

    /// Takes a free client slot: `(slot, expected word)` for the new connection's queue pair.
    pub(crate) fn alloc_slot(&self) -> Option<(u16, u64)> {
        (0..MAX_SLOTS).find_map(|i| {
            let w = self.slot(i);
            let cur = w.load(Ordering::Acquire);
            if cur & SLOT_IN_USE != 0 {
                return None;
            }
            let generation = (cur + 1) & 0xFFFF;
            let new = SLOT_IN_USE | generation;
            w.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
                .ok()
                .map(|_| (i as u16, new))
        })
    }

    /// Frees slot `i` (its connection ended): whoever still holds it is fenced by that.
    pub(crate) fn free_slot(&self, i: u16) {
        let w = self.slot(i as usize);
        let cur = w.load(Ordering::Acquire);
        w.store(cur & 0xFFFF, Ordering::Release);
    }

    /// Fences client `client` ([`client_id`]): its queue pairs fail every later access.
    /// A client that is gone or fenced already: nothing to do.
    pub(crate) fn fence(&self, client: u32) {
        let Some((slot, generation)) = split_client_id(client) else {
            return;
        };
        if slot as usize >= MAX_SLOTS {
            return;
        }
        let w = self.slot(slot as usize);
        let live = SLOT_IN_USE | generation as u64;
        let _ = w.compare_exchange(
            live,
            live | SLOT_FENCED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    pub(crate) fn ctl_magic(&self) -> u64 {
        // SAFETY: offset 0 of the control mapping, aligned, alive with self.
        unsafe { words::word(self.ctl.as_ptr()) }.load(Ordering::Acquire)
    }
}

/// The fabric client id of slot `slot` in generation `generation` (never 0).
pub(crate) fn client_id(slot: u16, generation: u16) -> u32 {
    (slot as u32 + 1) << 16 | generation as u32
}

fn split_client_id(id: u32) -> Option<(u16, u16)> {
    let slot = (id >> 16).checked_sub(1)?;
    Some((slot as u16, id as u16))
}

/// A memory node of the soft fabric.
pub struct SoftMemoryNode {
    mem: Arc<NodeMem>,
    cfg: NodeConfig,
    /// Live connections: (id, server end, client slot).
    conns: Mutex<Vec<(usize, SoftQp, u16)>>,
    next_conn: std::sync::atomic::AtomicUsize,
    /// Connections taken out of `conns` by the threads of `spawn_servers` (their own shares).
    owned: std::sync::atomic::AtomicUsize,
    /// Connections their serving handler has not yet been told of (`Handler::on_connect`),
    /// with their client's fabric id.
    fresh: Mutex<Vec<(usize, u32)>>,
    service: Mutex<Service>,
    log: Mutex<VecDeque<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave these plain collections inconsistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SoftMemoryNode {
    /// Creates the node's shared memory and writes the region header; its connections are
    /// served by the echo service.
    pub fn create(cfg: NodeConfig) -> io::Result<Arc<SoftMemoryNode>> {
        Self::create_with(cfg, Box::new(Echo))
    }

    /// Creates the node with `handler` serving its connections (see `remora_core::server`).
    pub fn create_with(
        cfg: NodeConfig,
        handler: Box<dyn Handler + Send>,
    ) -> io::Result<Arc<SoftMemoryNode>> {
        Ok(Self::create_backed(cfg, handler, &Backing::Memory)?.0)
    }

    /// Creates the node on `backing`. On a file that already holds a region, the region's
    /// own header decides its geometry (`cfg.region_len` must agree or be 0), and the
    /// handler's `recover` runs before the node is returned, so before any client connects.
    pub fn create_backed(
        mut cfg: NodeConfig,
        mut handler: Box<dyn Handler + Send>,
        backing: &Backing,
    ) -> io::Result<(Arc<SoftMemoryNode>, Opened)> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if cfg.max_msg < 256 || cfg.ring_depth == 0 {
            return Err(invalid("max_msg >= 256 and ring_depth >= 1 needed".into()));
        }
        let (region, restarted, durable) = match backing {
            Backing::Memory => (
                Mapping::shared("remora-region", cfg.region_len as usize)?,
                false,
                false,
            ),
            Backing::File { path, dax } => {
                let want = (cfg.region_len > 0).then_some(cfg.region_len as usize);
                let (m, existed) = Mapping::file(path, want, *dax)?;
                (m, existed, true)
            }
        };
        let shown = match backing {
            Backing::File { path, .. } => path.display().to_string(),
            Backing::Memory => "memory".into(),
        };
        if restarted {
            let mut b = [0u8; remora_layouts::region::HEADER_LEN];
            // SAFETY: the mapping is at least one page long and ours.
            unsafe { words::read(region.as_ptr(), &mut b) };
            let h = RegionHeader::decode(&b).map_err(|e| {
                invalid(format!(
                    "{shown} does not hold a remora region ({e}): give a new file, or the file \
                     of a remora memnode"
                ))
            })?;
            if h.region_len != region.len() as u64 {
                return Err(invalid(format!(
                    "{shown}: its header says {} bytes but the file has {}: not a region \
                     remora wrote, or truncated",
                    h.region_len,
                    region.len()
                )));
            }
            cfg.region_len = h.region_len;
            cfg.chunk_size = h.chunk_size;
            cfg.dm_len = h.dm_len;
        } else {
            let header = RegionHeader::new(region.len() as u64, cfg.chunk_size, cfg.dm_len)
                .map_err(|e| invalid(format!("memory node config: {e}")))?;
            cfg.region_len = region.len() as u64;
            // SAFETY: the header fits (region_len >= first chunk > 128 bytes, checked by
            // RegionHeader::new) and the mapping is ours.
            unsafe { words::write(region.as_ptr(), &header.encode()) };
            if durable {
                // SAFETY: the header's bytes lie in the mapping.
                unsafe { remora_pmem::flush::persist(region.as_ptr(), HEADER_BYTES) };
            }
        }
        let dm = match cfg.dm_len {
            0 => None,
            n => Some(Mapping::shared("remora-dm", n as usize)?),
        };
        let ctl = Mapping::shared("remora-ctl", CTL_LEN)?;
        // SAFETY: the control mapping is fresh, ours, and CTL_LEN bytes long.
        unsafe {
            words::write(ctl.as_ptr(), &CTL_MAGIC.to_le_bytes());
            words::write(ctl.as_ptr().add(CTL_KEY), &1u64.to_le_bytes());
        }
        let mem = NodeMem {
            node_id: cfg.node_id,
            region,
            durable,
            nvm_write_ns: cfg.nvm_write_ns,
            region_len: cfg.region_len,
            dm,
            dm_len: cfg.dm_len,
            ctl,
            nvm: Default::default(),
        };
        let recovery = if restarted {
            let region = mem.local();
            handler.recover(&region).map_err(|e| {
                io::Error::other(format!(
                    "{shown}: the {} service's recovery failed: {e}",
                    handler.service()
                ))
            })?
        } else {
            String::new()
        };
        let node = Self::assemble(cfg, mem, handler);
        Ok((
            node,
            Opened {
                restarted,
                recovery,
            },
        ))
    }

    fn assemble(
        cfg: NodeConfig,
        mem: NodeMem,
        handler: Box<dyn Handler + Send>,
    ) -> Arc<SoftMemoryNode> {
        Arc::new(SoftMemoryNode {
            mem: Arc::new(mem),
            cfg,
            conns: Mutex::new(Vec::new()),
            next_conn: std::sync::atomic::AtomicUsize::new(0),
            owned: std::sync::atomic::AtomicUsize::new(0),
            fresh: Mutex::new(Vec::new()),
            service: Mutex::new(Service {
                handler,
                replies: Replies::new(),
            }),
            log: Mutex::new(VecDeque::new()),
        })
    }

    /// Bytes written to this node's persistent host region since it was created, by cause
    /// (counted as the sim counts them: see `nvm.rs`; clients of this process only). `None`
    /// when the region is not persistent (no durable backing, no `nvm_write_ns`).
    pub fn nvm_stats(&self) -> Option<crate::sim::NvmStats> {
        self.mem.persistent().then(|| self.mem.nvm.snapshot())
    }

    /// The configuration the node was made with.
    pub fn config(&self) -> NodeConfig {
        self.cfg
    }

    /// What backs the host region.
    pub fn pages(&self) -> PageKind {
        self.mem.region.pages()
    }

    pub(crate) fn mem(&self) -> &Arc<NodeMem> {
        &self.mem
    }

    /// A queue pair from this process, with a new connection (and echo service) behind it.
    pub fn qp(&self) -> io::Result<SoftQp> {
        let bytes = Channel::bytes(self.cfg.ring_depth, self.cfg.max_msg);
        let chan = Arc::new(Channel {
            map: Mapping::anonymous(bytes)?,
            depth: self.cfg.ring_depth,
            max_msg: self.cfg.max_msg,
        });
        let (slot, word) = self.mem.alloc_slot().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!(
                    "all {MAX_SLOTS} client slots of memory node {} are taken",
                    self.cfg.node_id
                ),
            )
        })?;
        self.adopt(SoftQp::server(chan.clone(), None), slot);
        let qp = SoftQp::client(self.mem.clone(), chan, None, (slot, word));
        qp.set_segment_order(self.cfg.segment_order);
        Ok(qp)
    }

    /// An endpoint from this process reaching this node only.
    pub fn endpoint(&self) -> io::Result<SoftEndpoint> {
        Ok(SoftEndpoint::new(vec![self.qp()?]))
    }

    /// Registers the server end of a connection (client slot `slot`).
    pub(crate) fn adopt(&self, server_end: SoftQp, slot: u16) {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        // The client's id is the slot's in its current generation (what its queue pair's
        // `client_id` says). Listed before the connection can be served.
        let generation = self.mem.slot(slot as usize).load(Ordering::Acquire) as u16;
        lock(&self.fresh).push((id, client_id(slot, generation)));
        lock(&self.conns).push((id, server_end, slot));
        self.mem.ring_doorbell();
    }

    /// Tells `handler` of the new connections `mine` selects (`Handler::on_connect`). A
    /// connection is listed in `fresh` before it is in `conns`, so one taken from `conns`
    /// is told of here before its first message.
    fn introduce(
        &self,
        handler: &mut dyn Handler,
        region: &WordRegion<'_>,
        mine: impl Fn(usize) -> bool,
    ) {
        let mut fresh = lock(&self.fresh);
        fresh.retain(|&(id, peer)| {
            if mine(id) {
                handler.on_connect(region, id, peer);
                false
            } else {
                true
            }
        });
    }

    /// Whether the client on slot `slot` was fenced (`Endpoint::fence`): its connection
    /// ends (the handler hears of it, as of any other end).
    fn fenced(&self, slot: u16) -> bool {
        self.mem.slot(slot as usize).load(Ordering::Acquire) & SLOT_FENCED != 0
    }

    /// Revokes the region key and issues a new one; returns it.
    pub fn revoke_key(&self) -> u64 {
        let k = self.mem.key().fetch_add(1, Ordering::AcqRel) + 1;
        self.log(format!("region key revoked; new key {k}"));
        k
    }

    /// Logs an event (the `log` crate, level info) and keeps the last 256 for inspection.
    pub fn log(&self, msg: String) {
        log::info!("memnode {}: {msg}", self.cfg.node_id);
        let mut l = lock(&self.log);
        if l.len() == 256 {
            l.pop_front();
        }
        l.push_back(msg);
    }

    /// The last logged events, oldest first.
    pub fn recent_log(&self) -> Vec<String> {
        lock(&self.log).iter().cloned().collect()
    }

    /// The name of the service this node runs (told to connecting clients).
    pub fn service(&self) -> &'static str {
        lock(&self.service).handler.service()
    }

    /// Live connections.
    pub fn connections(&self) -> usize {
        lock(&self.conns).len() + self.owned.load(Ordering::Relaxed)
    }

    /// Hands every message waiting on every connection to the node's handler and sends its
    /// replies, runs the handler's idle work when nothing came, and drops the connections whose
    /// peer died or whose handling failed. Returns how many messages it handled.
    pub fn serve_once(&self, buf: &mut [u8], check_liveness: bool) -> usize {
        let mut service = lock(&self.service);
        let Service { handler, replies } = &mut *service;
        let region = self.mem.local();
        let mut conns = lock(&self.conns);
        self.introduce(&mut **handler, &region, |_| true);
        let mut served = 0;
        let mut dead = Vec::new();
        let mut others = Vec::new();
        for (i, (id, qp, slot)) in conns.iter().enumerate() {
            let r = serve_connection(&mut **handler, replies, &region, *id, qp, buf, &mut others);
            // Wake-ups for other connections (`Replies::send_to`), best effort.
            for (to, m) in others.drain(..) {
                if let Some((_, q, _)) = conns.iter().find(|c| c.0 == to) {
                    let _ = q.send_or_queue(&m);
                }
            }
            match r {
                Ok(n) => served += n,
                Err(_) if qp.is_closed() => {
                    // The client hung up with replies pending: nothing to report.
                    dead.push((i, String::new()));
                    continue;
                }
                Err(e) => {
                    qp.refuse(&format!("memory node {}: {e}", self.cfg.node_id));
                    dead.push((i, format!("dropping connection {id}: {e}")));
                    continue;
                }
            }
            if qp.is_closed() {
                last_words(&mut **handler, replies, &region, *id, qp, buf);
                dead.push((i, String::new()));
            } else if self.fenced(*slot) {
                qp.refuse(&fence_farewell(self.cfg.node_id));
                dead.push((i, format!("client of connection {id} was fenced")));
            } else if check_liveness && !qp.peer_alive() {
                last_words(&mut **handler, replies, &region, *id, qp, buf);
                dead.push((i, format!("client of connection {id} went away")));
            }
        }
        if served == 0 {
            handler.on_idle(&region);
        }
        for (i, why) in dead.into_iter().rev() {
            let (id, _, slot) = conns.swap_remove(i);
            self.mem.free_slot(slot);
            handler.on_disconnect(&region, id);
            if !why.is_empty() {
                drop(conns);
                self.log(why);
                conns = lock(&self.conns);
            }
        }
        served
    }

    /// Runs the node's service on a background thread until the handle is dropped.
    pub fn spawn_server(self: &Arc<Self>) -> ServerHandle {
        self.spawn_server_on(None)
    }

    /// Runs the node's service on a background thread pinned to `core` (if given).
    pub fn spawn_server_on(self: &Arc<Self>, core: Option<usize>) -> ServerHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let (node, flag) = (self.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("remora-memnode-{}", self.cfg.node_id))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(core_affinity::CoreId { id: c });
                }
                node.serve_until(&flag, None)
            })
            .expect("spawning the memnode server thread");
        ServerHandle {
            stop,
            threads: vec![thread],
        }
    }

    /// Runs the node's service on `threads` background threads (the multi-threaded server):
    /// connection `k` (in connect order) belongs to thread `k mod threads`, which alone
    /// serves it, so one connection's messages stay in order and a slow connection only ever
    /// costs its own thread a receive check. Each thread runs its own handler from
    /// [`Handler::fork`] (services that cannot fork share the node's one handler, taking
    /// turns). Thread `t` is pinned to `cores[t % cores.len()]` if `cores` is not empty.
    /// `mode` says how an idle thread waits ([`ServeMode`]).
    pub fn spawn_servers(
        self: &Arc<Self>,
        threads: usize,
        mode: ServeMode,
        cores: &[usize],
    ) -> ServerHandle {
        let n = threads.max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::with_capacity(n);
        for t in 0..n {
            let own = if t == 0 {
                None
            } else {
                lock(&self.service).handler.fork()
            };
            let (node, flag) = (self.clone(), stop.clone());
            let core = (!cores.is_empty()).then(|| cores[t % cores.len()]);
            let thread = std::thread::Builder::new()
                .name(format!("remora-memnode-{}-{t}", self.cfg.node_id))
                .spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(core_affinity::CoreId { id: c });
                    }
                    let own = own.map(|handler| Service {
                        handler,
                        replies: Replies::new(),
                    });
                    node.serve_share(t, n, own, mode, &flag)
                })
                .expect("spawning a memnode server thread");
            handles.push(thread);
        }
        ServerHandle {
            stop,
            threads: handles,
        }
    }

    /// One thread of [`SoftMemoryNode::spawn_servers`]: serves the connections `k` with
    /// `k mod n == t` until `stop`.
    fn serve_share(
        &self,
        t: usize,
        n: usize,
        mut own: Option<Service>,
        mode: ServeMode,
        stop: &AtomicBool,
    ) {
        let mut buf = vec![0u8; self.cfg.max_msg];
        let mut mine: Vec<(usize, SoftQp, u16)> = Vec::new();
        // When this thread last found nothing to serve (None: it just served).
        let mut idle: Option<Instant> = None;
        let mut last_check = Instant::now();
        let mut dead = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            {
                // Take this thread's new connections.
                let mut conns = lock(&self.conns);
                let mut i = 0;
                while i < conns.len() {
                    if conns[i].0 % n == t {
                        mine.push(conns.swap_remove(i));
                        self.owned.fetch_add(1, Ordering::Relaxed);
                    } else {
                        i += 1;
                    }
                }
            }
            let check = last_check.elapsed() > Duration::from_millis(20);
            if check {
                last_check = Instant::now();
            }
            let mut shared;
            let service = match own.as_mut() {
                Some(s) => s,
                None => {
                    shared = lock(&self.service);
                    &mut *shared
                }
            };
            let Service { handler, replies } = service;
            let region = self.mem.local();
            let mut served = 0;
            let mut others = Vec::new();
            self.introduce(&mut **handler, &region, |id| id % n == t);
            for (i, (id, qp, slot)) in mine.iter().enumerate() {
                let r = serve_connection(
                    &mut **handler,
                    replies,
                    &region,
                    *id,
                    qp,
                    &mut buf,
                    &mut others,
                );
                // Wake-ups for other connections (`Replies::send_to`), best effort: one
                // another thread owns is not reached (its client looks for itself).
                for (to, m) in others.drain(..) {
                    if let Some((_, q, _)) = mine.iter().find(|c| c.0 == to) {
                        let _ = q.send_or_queue(&m);
                    }
                }
                match r {
                    Ok(k) => served += k,
                    Err(_) if qp.is_closed() => {
                        // The client hung up with replies pending: nothing to report.
                        dead.push((i, String::new()));
                        continue;
                    }
                    Err(e) => {
                        qp.refuse(&format!("memory node {}: {e}", self.cfg.node_id));
                        dead.push((i, format!("dropping connection {id}: {e}")));
                        continue;
                    }
                }
                if qp.is_closed() {
                    last_words(&mut **handler, replies, &region, *id, qp, &mut buf);
                    dead.push((i, String::new()));
                } else if self.fenced(*slot) {
                    qp.refuse(&fence_farewell(self.cfg.node_id));
                    dead.push((i, format!("client of connection {id} was fenced")));
                } else if check && !qp.peer_alive() {
                    last_words(&mut **handler, replies, &region, *id, qp, &mut buf);
                    dead.push((i, format!("client of connection {id} went away")));
                }
            }
            if served == 0 {
                handler.on_idle(&region);
            }
            for (i, why) in dead.drain(..).rev() {
                let (id, _, slot) = mine.swap_remove(i);
                self.owned.fetch_sub(1, Ordering::Relaxed);
                self.mem.free_slot(slot);
                handler.on_disconnect(&region, id);
                if !why.is_empty() {
                    self.log(why);
                }
            }
            if served > 0 {
                idle = None;
                continue;
            }
            let since = *idle.get_or_insert_with(Instant::now);
            match mode {
                ServeMode::Polling => std::hint::spin_loop(),
                ServeMode::Event if since.elapsed() < super::futex::SPIN_BEFORE_SLEEP => {
                    std::hint::spin_loop()
                }
                ServeMode::Event => self.mem.sleep(super::futex::IDLE_SLEEP, || {
                    mine.iter().any(|c| c.1.has_queued())
                        || lock(&self.conns).iter().any(|c| c.0 % n == t)
                }),
            }
        }
        // The node may be served again later: hand the connections back.
        let k = mine.len();
        lock(&self.conns).append(&mut mine);
        self.owned.fetch_sub(k, Ordering::Relaxed);
    }

    /// Serves until `stop` is set (or `deadline` passes): busy-polls while there is work,
    /// backs off to short sleeps when idle.
    pub fn serve_until(&self, stop: &AtomicBool, deadline: Option<Instant>) {
        let mut buf = vec![0u8; self.cfg.max_msg];
        let mut idle: Option<Instant> = None;
        let mut last_check = Instant::now();
        while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
            let check = last_check.elapsed() > Duration::from_millis(20);
            if check {
                last_check = Instant::now();
            }
            if self.serve_once(&mut buf, check) > 0 {
                idle = None;
            } else {
                let since = *idle.get_or_insert_with(Instant::now);
                if since.elapsed() < super::futex::SPIN_BEFORE_SLEEP {
                    std::hint::spin_loop();
                } else {
                    // Asleep until a client pushes (see `NodeMem::ring_doorbell`): yielding
                    // instead gave a busy loop on this core the CPU a time slice at a time.
                    self.mem.sleep(super::futex::IDLE_SLEEP, || {
                        lock(&self.conns).iter().any(|c| c.1.has_queued())
                    });
                }
            }
        }
    }
}

/// How an idle server thread of [`SoftMemoryNode::spawn_servers`] waits for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServeMode {
    /// Gives its CPU away when idle, as a thread blocked on a completion channel does: spins
    /// briefly, then sleeps on the node's doorbell (a futex a client rings after a push while
    /// a server thread sleeps), at most 500 µs at a time.
    #[default]
    Event,
    /// Polls its connections' receive rings without pause (the paper's polling server): the
    /// lowest latency, and the whole CPU, whether messages come or not.
    Polling,
}

/// Stops the node's server threads when dropped.
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

struct Service {
    handler: Box<dyn Handler + Send>,
    replies: Replies,
}

/// Serves what is waiting on one connection; returns how many messages. Messages the
/// handler queued for other connections are added to `others`.
impl NodeMem {
    /// The host region as the node's own CPU sees it (see [`WordRegion`]).
    pub(crate) fn local(&self) -> WordRegion<'_> {
        let persist = if self.persistent() {
            Persist::Flush {
                nvm_write_ns: self.nvm_write_ns,
            }
        } else {
            Persist::Nothing
        };
        // SAFETY: the region mapping is region_len bytes long and lives as long as self.
        let r = unsafe {
            WordRegion::new(self.region.as_ptr(), self.region_len, self.node_id, persist)
        };
        if self.persistent() {
            r.counting(&self.nvm)
        } else {
            r
        }
    }

    /// The host region is persistent memory: `persist` writes back (a durable backing or
    /// emulated NVM latency), and writes to it are counted (`nvm.rs`).
    pub(crate) fn persistent(&self) -> bool {
        self.durable || self.nvm_write_ns > 0
    }
}

//! The compute-node runtime: how an application embeds remora.
//!
//! A [`ComputeNode`] is one per process (or per NUMA node). It owns the connections to the
//! memory nodes and N poller threads, one per core of a core list given as `numactl` takes
//! it (`2-9`, `0,2,4`), each pinned to its core unless asked not to be. Each poller has its
//! own endpoint (queue pairs) and runs many operations at once as coroutines, DPDK style
//! (see `poller.rs`).
//!
//! [`ComputeNode::open`] opens any index the same way ([`IndexConfig`]) and returns an
//! [`Index`]: a handle that is `Clone + Send + Sync`, for any application thread. Each
//! operation is copied into a bounded, preallocated submission slot of a poller and resolved
//! as a future ([`Op`]) that works under tokio or any executor (the poller wakes it), or
//! blocked on with [`Op::wait`]. An operation dropped halfway still runs to its end on the
//! poller, its result discarded: it never leaves an index lock held.
//!
//! ```
//! use remora::node::{ComputeNode, IndexConfig};
//!
//! let node = ComputeNode::builder().in_process_default().start()?;
//! let smart = node.open(IndexConfig::smart(64))?;
//! smart.upsert(b"apple", b"red").wait()?;
//! assert_eq!(smart.get(b"apple").wait()?, Some(b"red".to_vec()));
//! assert_eq!(smart.get(b"pear").wait()?, None);
//! # Ok::<(), remora::node::Error>(())
//! ```
//!
//! [`ComputeNode::open_spatial`] opens Catfish, the spatial index, the same way: its
//! [`Spatial`] handle inserts and deletes rectangles with `u64` values and searches windows
//! (at most a limit of hits), with the same [`Op`] futures and [`Error`].
//!
//! The memory nodes are in-process or `remora memnode` processes on the soft fabric, or,
//! with feature `verbs`, `remora memnode --fabric verbs` processes reached over RDMA
//! (`Builder::verbs`): each poller then runs its own verbs endpoint.
//!
//! A poller whose connection is lost (a broken queue pair, a memory node gone or restarted,
//! a revoked region key) fails the operation that found out, and its next operation
//! connects again with bounded retries ([`Error::Reconnect`] if it cannot) and reopens its
//! indexes there (see `lives.rs`).
//!
//! Per-compute-node index state (SMART's cache and delegation/combining table, Sherman's
//! local lock table with hand-over and its index cache, CANRT's prefix cache) is built once
//! per node in [`ComputeNode::open`] and shared by the handles every poller opens on it, as
//! the papers share it between the threads of one compute node.
#![warn(missing_docs)]
mod block;
mod cores;
mod error;
mod handle;
#[cfg(test)]
mod idle_tests;
mod index;
mod lives;
mod poller;
#[cfg(test)]
mod reconnect_tests;
mod ring;
mod slot;
mod spatial;
mod spin;
#[cfg(test)]
mod tests;
#[cfg(feature = "verbs")]
mod verbs;
#[cfg(all(test, feature = "verbs"))]
mod verbs_tests;

pub use cores::{CoreList, CoreListError};
pub use error::Error;
pub use handle::{Index, Op, Scan};
pub use index::{FG_PLUS_ROOT_SLOT, IndexConfig, Service};
use index::{NodeState, Opening};
pub use remora_core::catfish::{Entry, Mode as SearchMode, Rect, TreeKind};
pub use remora_poller::soft::NodeConfig;
pub use spatial::{CatfishConfig, Spatial, SpatialConfig};

use remora_core::fabric::Endpoint;
use remora_poller::soft::{ServerHandle, SoftEndpoint, SoftMemoryNode, control};
use slot::{Cmd, PollerShared};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

/// Where the memory nodes are.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Memory {
    /// A memory node inside this process, on the soft fabric (shared memory), running
    /// `service` for the indexes that need one.
    InProcess {
        /// Its region and queue settings.
        config: NodeConfig,
        /// Its server-side logic.
        service: Service,
    },
    /// `remora memnode` processes of this machine, by their control sockets (soft fabric).
    Memnodes(Vec<PathBuf>),
    /// `remora memnode --fabric verbs` processes, by their `host:port` (the real verbs
    /// fabric: each poller connects its own RC queue pairs through rdma_cm).
    #[cfg(feature = "verbs")]
    Verbs {
        /// The memory nodes, `host:port` each, in node order.
        addrs: Vec<String>,
        /// The device and connection timeout.
        options: crate::verbs::ConnectOptions,
    },
    /// The verbs fabric's data path over the fake device ([`crate::verbs::fake`]): one
    /// memory node in this process, for testing without a NIC. Every poller connects its own
    /// queue pair (and client id) to it, as over real verbs; the device runs each work
    /// request at post time, one poller at a time.
    #[cfg(feature = "verbs")]
    VerbsFake {
        /// Its region's geometry (`region_len`, `chunk_size`, `dm_len`, `node_id`).
        config: NodeConfig,
        /// Its server-side logic.
        service: Service,
    },
}

/// Sizes of the submission slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_key: usize,
    pub(crate) max_value: usize,
    pub(crate) scan_bytes: usize,
}

impl Limits {
    /// Bytes of a slot's value buffer: a value, or a scan batch.
    fn value_buf(&self) -> usize {
        self.max_value.max(self.scan_bytes)
    }

    /// Pairs per scan batch: as many of the largest pair as the buffer holds.
    pub(crate) fn scan_batch(&self) -> usize {
        (self.value_buf() / (poller::PAIR_HEADER + self.max_key + self.max_value)).max(1)
    }
}

/// How a [`ComputeNode`] is set up; [`Builder::start`] starts it.
#[derive(Debug, Clone)]
pub struct Builder {
    memory: Memory,
    cores: Option<CoreList>,
    pollers: usize,
    pin: bool,
    depth: usize,
    limits: Limits,
    patience: spin::Patience,
    server_core: Option<usize>,
}

impl Builder {
    /// An in-process memory node of `config` running `service`.
    pub fn in_process(mut self, config: NodeConfig, service: Service) -> Builder {
        self.memory = Memory::InProcess { config, service };
        self
    }

    /// An in-process memory node with the default settings (64 MiB) and no service (SMART
    /// and Sherman).
    pub fn in_process_default(self) -> Builder {
        self.in_process(NodeConfig::default(), Service::None)
    }

    /// The `remora memnode` listening on control socket `path`.
    pub fn memnode(mut self, path: impl Into<PathBuf>) -> Builder {
        self.memory = Memory::Memnodes(vec![path.into()]);
        self
    }

    /// The `remora memnode --fabric verbs` processes at `addrs` (`host:port` each): every
    /// poller connects its own queue pairs to each, over the real verbs fabric.
    #[cfg(feature = "verbs")]
    pub fn verbs<S: Into<String>>(
        mut self,
        addrs: impl IntoIterator<Item = S>,
        options: crate::verbs::ConnectOptions,
    ) -> Builder {
        self.memory = Memory::Verbs {
            addrs: addrs.into_iter().map(Into::into).collect(),
            options,
        };
        self
    }

    /// Where the memory nodes are.
    pub fn memory(mut self, memory: Memory) -> Builder {
        self.memory = memory;
        self
    }

    /// One poller per core of `cores`, pinned to it (unless [`Builder::no_pin`]).
    pub fn cores(mut self, cores: CoreList) -> Builder {
        self.cores = Some(cores);
        self
    }

    /// `n` pollers, not pinned (when no core list is given; 1 by default).
    pub fn pollers(mut self, n: usize) -> Builder {
        self.pollers = n;
        self
    }

    /// Do not pin the pollers (one per listed core still).
    pub fn no_pin(mut self) -> Builder {
        self.pin = false;
        self
    }

    /// Operations each poller runs at once: its submission slots (64 by default).
    pub fn queue_depth(mut self, depth: usize) -> Builder {
        self.depth = depth;
        self
    }

    /// Longest key an operation may carry (256 bytes by default).
    pub fn max_key(mut self, bytes: usize) -> Builder {
        self.limits.max_key = bytes;
        self
    }

    /// Longest value an operation may carry (4096 bytes by default).
    pub fn max_value(mut self, bytes: usize) -> Builder {
        self.limits.max_value = bytes;
        self
    }

    /// Empty loops a poller spins before it parks until the next submission: at most this
    /// many (100 000 by default; 0 parks at once) and at most 50 µs, less while its spins
    /// end in sleep, so that pollers on an oversubscribed host sleep instead of holding the
    /// cores the application's threads need. `u32::MAX` busy-polls for ever (DPDK style, for dedicated cores).
    pub fn idle_spins(mut self, spins: u32) -> Builder {
        self.patience.spins = spins;
        self
    }

    /// The longest a poller spins before it parks, idle or with every operation it runs
    /// waiting (on a lock holder of another thread, a back-off timer): 50 µs by default (its
    /// adaptive budget then stays between 2 µs and this). A spin sees an event without a
    /// syscall; a park costs a futex wait, and its waker a futex wake. On an oversubscribed
    /// host a shorter spin gives the core sooner to the thread the poller waits for.
    pub fn spin_at_most(mut self, spin: std::time::Duration) -> Builder {
        self.patience.spin_for = spin;
        self
    }

    /// The core of the in-process memory node's server thread (not pinned by default).
    pub fn server_core(mut self, core: usize) -> Builder {
        self.server_core = Some(core);
        self
    }

    /// Starts the memory node (if in-process), connects every poller, pins it, and returns
    /// the node once all are running.
    pub fn start(self) -> Result<ComputeNode, Error> {
        let (cores, pin) = match &self.cores {
            Some(c) => {
                if self.pin {
                    c.check_allowed()?;
                }
                (c.cores().to_vec(), self.pin)
            }
            None => (vec![0; self.pollers], false),
        };
        if cores.is_empty() {
            return Err(Error::Config(
                "a compute node needs at least one poller".into(),
            ));
        }
        if self.depth == 0 || self.depth > u32::MAX as usize / 2 {
            return Err(Error::Config(format!(
                "queue depth {} (1 to 2^31 operations per poller)",
                self.depth
            )));
        }
        if self.limits.max_key == 0 || self.limits.max_key > u16::MAX as usize {
            return Err(Error::Config("max_key must be 1 to 65535 bytes".into()));
        }
        let (local, server, serves, connect): (_, _, String, Connect) = match &self.memory {
            Memory::InProcess { config, service } => {
                let handler =
                    service.handler(config.region_len, config.chunk_size, config.max_msg)?;
                let node = match handler {
                    Some(h) => SoftMemoryNode::create_with(*config, h),
                    None => SoftMemoryNode::create(*config),
                }
                .map_err(|e| io("creating the in-process memory node", e))?;
                let server = node.spawn_server_on(self.server_core);
                let serves = node.service().to_string();
                let n = node.clone();
                (
                    Some(node),
                    Some(server),
                    serves,
                    Connect::Soft(Arc::new(move || {
                        n.endpoint()
                            .map_err(|e| io("connecting to the in-process memory node", e))
                    })),
                )
            }
            Memory::Memnodes(paths) => {
                let first = paths
                    .first()
                    .ok_or_else(|| Error::Config("no memnode to connect to".into()))?;
                let info = control::info(first)
                    .map_err(|e| io(&format!("asking memnode {}", first.display()), e))?;
                let paths = paths.clone();
                (
                    None,
                    None,
                    info.service_name().to_string(),
                    Connect::Soft(Arc::new(move || {
                        control::connect_all(&paths).map_err(|e| io("connecting to memnodes", e))
                    })),
                )
            }
            #[cfg(feature = "verbs")]
            Memory::Verbs { addrs, options } => {
                let serves = verbs::service_of(addrs, options)?;
                (
                    None,
                    None,
                    serves,
                    Connect::Verbs {
                        addrs: addrs.clone(),
                        options: options.clone(),
                    },
                )
            }
            #[cfg(feature = "verbs")]
            Memory::VerbsFake { config, service } => {
                let fake = verbs::SharedFake::new(config, service)?;
                (None, None, fake.service(), Connect::VerbsFake(fake))
            }
        };
        let connect = Arc::new(connect);
        let states: Arc<[OnceLock<NodeState>]> =
            (0..poller::MAX_INDEXES).map(|_| OnceLock::new()).collect();
        let pollers: Vec<Arc<PollerShared>> = cores
            .iter()
            .map(|_| {
                Arc::new(PollerShared::new(
                    self.depth,
                    self.limits.max_key,
                    self.limits.value_buf(),
                    states.clone(),
                ))
            })
            .collect();
        let mut inner = Inner {
            pollers,
            threads: Vec::new(),
            limits: self.limits,
            serves,
            next_index: AtomicUsize::new(0),
            spatial: Mutex::new(None),
            pinned: if pin { cores.clone() } else { Vec::new() },
            _server: server,
            local,
        };
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), Error>>();
        for (i, &core) in cores.iter().enumerate() {
            let (shared, connect, tx) = (inner.pollers[i].clone(), connect.clone(), tx.clone());
            let spins = self.patience;
            let t = std::thread::Builder::new()
                .name(format!("remora-poller-{i}"))
                .spawn(move || {
                    if pin && !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
                        let _ = tx.send(Err(Error::Config(format!(
                            "could not pin poller {i} to core {core}"
                        ))));
                        return;
                    }
                    match &*connect {
                        Connect::Soft(f) => serve(&**f, tx, &shared, spins, None),
                        #[cfg(feature = "verbs")]
                        Connect::Verbs { addrs, options } => serve(
                            &|| {
                                crate::verbs::VerbsEndpoint::connect(addrs, options)
                                    .map_err(Error::Verbs)
                            },
                            tx,
                            &shared,
                            spins,
                            None,
                        ),
                        #[cfg(feature = "verbs")]
                        Connect::VerbsFake(fake) => {
                            serve(&|| fake.endpoint(), tx, &shared, spins, Some(fake.gate()))
                        }
                    }
                })
                .map_err(|e| io("starting a poller thread", e))?;
            inner.threads.push(t);
        }
        drop(tx);
        for _ in 0..cores.len() {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e), // dropping `inner` stops the others
                Err(_) => return Err(Error::Stopped),
            }
        }
        log::debug!(
            "remora: compute node started: {} pollers ({})",
            cores.len(),
            if pin { "pinned" } else { "not pinned" }
        );
        Ok(ComputeNode {
            inner: Arc::new(inner),
        })
    }
}

/// How a poller thread gets its endpoint (made on the poller's thread: a verbs endpoint
/// installs its registered coroutine frames there).
enum Connect {
    Soft(Arc<dyn Fn() -> Result<SoftEndpoint, Error> + Send + Sync + 'static>),
    #[cfg(feature = "verbs")]
    Verbs {
        addrs: Vec<String>,
        options: crate::verbs::ConnectOptions,
    },
    #[cfg(feature = "verbs")]
    VerbsFake(Arc<verbs::SharedFake>),
}

/// A poller thread's body: connects, reports the outcome to `start`, then runs the poller on
/// the endpoint (and on new ones from `connect` after lost connections) until the node
/// stops.
fn serve<E: Endpoint>(
    connect: &dyn Fn() -> Result<E, Error>,
    tx: std::sync::mpsc::Sender<Result<(), Error>>,
    shared: &PollerShared,
    spins: spin::Patience,
    gate: Option<&lives::Gate>,
) {
    let ep = {
        let _g = gate.map(lives::Gate::enter);
        connect()
    };
    match ep {
        Ok(ep) => {
            let _ = tx.send(Ok(()));
            drop(tx);
            lives::run(shared, ep, connect, spins, gate);
        }
        Err(e) => {
            let _ = tx.send(Err(e));
        }
    }
}

fn io(what: &str, source: std::io::Error) -> Error {
    Error::Io {
        what: what.to_string(),
        source,
    }
}

/// What the handles share: the pollers, and the memory node if it is in-process. Dropped
/// with the node and its last handle: the pollers then finish every queued operation and
/// exit, then the memory node stops.
pub(crate) struct Inner {
    pub(crate) pollers: Vec<Arc<PollerShared>>,
    threads: Vec<JoinHandle<()>>,
    pub(crate) limits: Limits,
    serves: String,
    next_index: AtomicUsize,
    /// The spatial index, once opened (one per node: its client is per poller).
    spatial: Mutex<Option<Spatial>>,
    pinned: Vec<usize>,
    // Dropped after the pollers have stopped (Drop below runs first).
    _server: Option<ServerHandle>,
    local: Option<Arc<SoftMemoryNode>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for p in &self.pollers {
            p.request_stop();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A compute node: the memory-node connections and the poller threads (see the module
/// docs). Dropping it leaves the handles working; the pollers stop with the last of them.
pub struct ComputeNode {
    inner: Arc<Inner>,
}

/// Figures of a running node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// Operations the pollers have finished.
    pub completed: u64,
    /// Of those, operations whose future was dropped before their result.
    pub abandoned: u64,
    /// Submission slots free now, over all pollers.
    pub free_slots: usize,
    /// Submission slots in all.
    pub slots: usize,
    /// Times a poller parked, idle (it then sleeps until a submission wakes it).
    pub parks: u64,
    /// Times a submitter woke a parked poller.
    pub wakes: u64,
    /// Times a poller parked while every operation it ran waited (a timer, another
    /// thread's wake), instead of spinning on.
    pub busy_parks: u64,
    /// Times a task's wake (another thread's, e.g. a lock hand-over) unparked its poller.
    pub task_wakes: u64,
    /// Times an application thread blocked in [`Op::wait`] parked until its result came
    /// (process-wide).
    pub thread_parks: u64,
}

impl ComputeNode {
    /// A builder with the defaults: one unpinned poller, an in-process memory node.
    pub fn builder() -> Builder {
        Builder {
            memory: Memory::InProcess {
                config: NodeConfig::default(),
                service: Service::None,
            },
            cores: None,
            pollers: 1,
            pin: true,
            depth: 64,
            limits: Limits {
                max_key: 256,
                max_value: 4096,
                scan_bytes: 16 << 10,
            },
            patience: spin::Patience {
                spins: 100_000,
                spin_for: spin::SPIN_AT_MOST,
            },
            server_core: None,
        }
    }

    /// Opens `cfg`'s index on every poller (creating it on its memory node if it is not
    /// there) and returns a handle on it. Blocks until every poller has it open.
    pub fn open(&self, cfg: IndexConfig) -> Result<Index, Error> {
        self.open_on_pollers(Opening::Kv(cfg))
    }

    /// Opens `cfg`'s spatial index (Catfish) the same way as [`ComputeNode::open`]: on every
    /// poller, creating its tree if the memory node holds none. A node opens one spatial
    /// index: opening it again returns the first handle (the first configuration's search
    /// mode holds).
    ///
    /// ```
    /// use remora::node::{ComputeNode, NodeConfig, Rect, Service, SpatialConfig};
    ///
    /// let node = ComputeNode::builder()
    ///     .in_process(NodeConfig::default(), Service::Catfish)
    ///     .start()?;
    /// let tree = node.open_spatial(SpatialConfig::catfish())?;
    /// let r = |x, y, w| Rect { min_x: x, min_y: y, max_x: x + w, max_y: y + w };
    /// tree.insert(r(0, 0, 10), 1).wait()?;
    /// tree.insert(r(100, 100, 10), 2).wait()?;
    /// let hits = tree.search(r(5, 5, 20), 100).wait()?;
    /// assert_eq!(hits.iter().map(|e| e.ptr).collect::<Vec<_>>(), [1]);
    /// assert!(tree.delete(r(0, 0, 10), 1).wait()?);
    /// assert!(tree.search(r(5, 5, 20), 100).wait()?.is_empty());
    /// # Ok::<(), remora::node::Error>(())
    /// ```
    pub fn open_spatial(&self, cfg: SpatialConfig) -> Result<Spatial, Error> {
        let mut g = self.inner.spatial.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = &*g {
            return Ok(s.clone());
        }
        let s = Spatial {
            index: self.open_on_pollers(Opening::Spatial(cfg))?,
        };
        *g = Some(s.clone());
        Ok(s)
    }

    fn open_on_pollers(&self, cfg: Opening) -> Result<Index, Error> {
        if let Some(needs) = cfg.service()
            && needs != self.inner.serves
        {
            return Err(Error::Service {
                needs,
                serves: self.inner.serves.clone(),
            });
        }
        let id = self.inner.next_index.fetch_add(1, Ordering::Relaxed);
        if id >= poller::MAX_INDEXES {
            return Err(Error::TooManyIndexes {
                max: poller::MAX_INDEXES,
            });
        }
        // The index's per-compute-node state, built once and shared by every poller's
        // handle (SMART's cache and delegation/combining table, Sherman's local lock table
        // and index cache, CANRT's prefix cache).
        if let Some(first) = self.inner.pollers.first() {
            let _ = first.states[id].set(NodeState::new(&cfg));
        }
        for (p, shared) in self.inner.pollers.iter().enumerate() {
            let open = OpenOn {
                shared,
                cmd: Cmd::Open(cfg),
                id,
            };
            block::block_on(open.run()).map_err(|e| {
                log::warn!("remora: opening {} on poller {p} failed: {e}", cfg.name());
                e
            })?;
        }
        Ok(Index {
            inner: self.inner.clone(),
            id,
            name: cfg.name(),
        })
    }

    /// How many pollers run, and the cores they are pinned to (empty: not pinned).
    pub fn pollers(&self) -> (usize, &[usize]) {
        (self.inner.pollers.len(), &self.inner.pinned)
    }

    /// The service the memory node runs (`echo` for none, `canrt`, `erda`, `catfish`).
    pub fn service(&self) -> &str {
        &self.inner.serves
    }

    /// The in-process memory node, if there is one (e.g. to serve it to other processes
    /// with [`remora_poller::soft::control::listen`]).
    pub fn memory_node(&self) -> Option<&Arc<SoftMemoryNode>> {
        self.inner.local.as_ref()
    }

    /// Operations finished and slots free now.
    pub fn stats(&self) -> NodeStats {
        let p = &self.inner.pollers;
        NodeStats {
            completed: p.iter().map(|s| s.completed.load(Ordering::Relaxed)).sum(),
            abandoned: p.iter().map(|s| s.abandoned.load(Ordering::Relaxed)).sum(),
            free_slots: p.iter().map(|s| s.free_slots()).sum(),
            slots: p.iter().map(|s| s.slots.len()).sum(),
            parks: p.iter().map(|s| s.parks.load(Ordering::Relaxed)).sum(),
            wakes: p.iter().map(|s| s.wakes.load(Ordering::Relaxed)).sum(),
            busy_parks: p.iter().map(|s| s.busy_parks.load(Ordering::Relaxed)).sum(),
            task_wakes: p
                .iter()
                .map(|s| s.doze.task_wakes.load(Ordering::Relaxed))
                .sum(),
            thread_parks: block::PARKS.load(Ordering::Relaxed),
        }
    }
}

/// An open command for one poller (it must run there, not on any free poller).
struct OpenOn<'a> {
    shared: &'a PollerShared,
    cmd: Cmd,
    id: usize,
}

impl OpenOn<'_> {
    async fn run(self) -> Result<(), Error> {
        let i = std::future::poll_fn(|cx| match self.shared.try_acquire() {
            Some(i) => std::task::Poll::Ready(i),
            None => {
                self.shared.wait_for_slot(cx.waker());
                match self.shared.try_acquire() {
                    Some(i) => std::task::Poll::Ready(i),
                    None => std::task::Poll::Pending,
                }
            }
        })
        .await;
        {
            let mut d = self.shared.slots[i as usize].data();
            d.cmd = self.cmd;
            d.index = self.id;
            d.key_len = 0;
            d.value_len = 0;
        }
        self.shared.submit(i);
        let slot = &self.shared.slots[i as usize];
        std::future::poll_fn(|cx| {
            if !slot.is_done() {
                slot.set_waker(cx.waker());
                if !slot.is_done() {
                    return std::task::Poll::Pending;
                }
            }
            std::task::Poll::Ready(())
        })
        .await;
        let r = std::mem::replace(&mut slot.data().result, Ok(slot::Outcome::Unit));
        self.shared.release(i);
        r.map(|_| ())
    }
}

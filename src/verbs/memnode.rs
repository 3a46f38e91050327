//! The memory node of the verbs fabric: a registered host region (offset 0 holds the region
//! header, so the core `RemoteAllocator` works), device memory (the NIC's, or host memory
//! standing in for it), an rdma_cm listener, and a service on every connection: the echo
//! service, or any `remora_core::server::Handler` (CANRT's applier, Erda's metadata server,
//! Catfish's server), which reaches the region through the soft fabric's
//! `WordRegion`.
//!
//! Clients learn where everything is from the accept's private data (`wire::Welcome`); a
//! connect request carrying a revocation hello re-registers the region under a new key and is
//! answered by a reject carrying that key (`wire::Revoked`).
//!
//! **Client ids and fencing** (the verbs side of `remora_core::lease`). Every connection
//! belongs to a client id: a client's first memory node assigns one (node id in the top 8
//! bits, a per-node connection counter below, never 0) and the client claims the same id at
//! every other node. A connect request carrying a fence hello for client `c` cuts `c` off:
//! each of `c`'s queue pairs here is moved to the error state (`ibv_modify_qp`, checked) and
//! disconnected, its handler learns the connection ended, and `c` is remembered so that it
//! cannot connect again under that id; only then is the request answered (a reject carrying
//! `wire::Fenced`). From that answer on, no verb of `c` reaches this node's memory: a queue pair
//! in the error state processes no incoming packets (its requester retries and fails with
//! retry exceeded), so a holder whose lease ran out cannot write under a lock taken over
//! after the fence. If the queue pair cannot be moved, the request is refused and the waiter
//! reports the lock held instead of breaking it.
//!
//! **Server threads** ([`MemnodeConfig::threads`], see `shard.rs`): each serves its share of
//! the connections from its own shared receive queue and never waits for a reply; idle, it
//! sleeps on its receive completion queues' channels (`idle.rs`); the thread that calls
//! [`Memnode::serve`] handles connection events.
//!
//! **Keys.** With [`MemnodeConfig::key`] (`remora memnode --key-file`), every connect request
//! (connection, revocation, fence) must prove the key (`wire::Gate`, see `wire.rs`); any other
//! is rejected with `wire::Unauthorized`, which the client reports as its error.
use super::arena::{Arena, PageKind};
use super::cm::{Channel, CmId, Event, SockAddr, TRANSPORT_RETRIES, set_ack_timeout};
use super::device::{check_port, context_name, limits, probe};
use super::error::{VerbsError, sys_err};
use super::mr::{LOCAL, Mr, Pd, REMOTE};
use super::qp::{RECV_LEN, VerbsQp};
use super::stats::{Stats, VerbsStats};
use super::sys;
use super::wire::{
    DmKind, Fenced, Gate, Hello, Request, Revoked, Unauthorized, Welcome, service_bytes,
};
use remora_core::fabric::{Op, QueuePair, Recv, RecvKind};
use remora_core::server::{Echo, Handler, Replies};
use remora_layouts::NodeId;
use remora_layouts::region::RegionHeader;
use remora_poller::soft::words::{Persist, WordRegion};
use shard::{Conn, Ctl, Hub, Server, Srq, ThreadHandler, lock};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod control;
mod device_state;
mod fake_srq;
mod idle;
#[cfg(test)]
mod idle_tests;
mod shard;
pub use shard::SRQ_DEPTH;

/// What a memory node serves.
#[derive(Debug, Clone)]
pub struct MemnodeConfig {
    /// host:port to listen on (an address of an interface with an RDMA device).
    pub listen: String,
    /// The node's id: what clients' `GlobalAddr`s name it by (unique among the memory nodes
    /// a client connects to).
    pub node: NodeId,
    /// Host region bytes, header included.
    pub region_len: u64,
    /// Bytes of the chunks the region's allocator hands out (a power of two, at least 64;
    /// written into the region header).
    pub chunk_size: u64,
    /// Device-memory bytes (0: none).
    pub dm_len: u64,
    /// The RDMA device connections must arrive on (`None`: any).
    pub device: Option<String>,
    /// Log one line per connection (connects, ends, fences, key revocations) at info level,
    /// which the command's logger shows; without it at debug level. The library never
    /// prints (issue 23).
    pub verbose: bool,
    /// Admit only requests that prove this key (`wire`'s module docs; `None`: anyone who
    /// reaches the port).
    pub key: Option<remora_poller::soft::auth::Key>,
    /// Client ids and their keys (the key file's `<id> <key>` lines,
    /// `remora_poller::soft::auth::read_keys`): when any is listed, a client claiming an id
    /// must prove that id's key (`wire`'s module docs).
    pub client_keys: Vec<(u32, remora_poller::soft::auth::Key)>,
    /// Server threads (at least 1; `remora memnode --threads`), each with its own shared
    /// receive queue and its share of the connections.
    pub threads: usize,
}

/// The device memory of one device.
enum Dm {
    None,
    /// NIC memory, registered zero-based.
    Device(DeviceMem),
    /// Host memory standing in for it.
    Host {
        mr: Mr,
    },
}

/// On-chip memory and its registration, released in that order.
struct DeviceMem {
    mr: Option<Mr>,
    dm: *mut sys::ibv_dm,
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        self.mr = None;
        // SAFETY: the device memory's only registration was released just above.
        unsafe { sys::ibv_free_dm(self.dm) };
    }
}

/// What the node keeps per RDMA device connections arrive on. Field order is release order.
struct DevState {
    ctx: *mut sys::ibv_context,
    /// One shared receive queue per server thread.
    srqs: Vec<Arc<Srq>>,
    region_mr: Mr,
    dm: Dm,
    pd: Pd,
    rd: u8,
    init_rd: u8,
}

/// A running memory node. Field order is release order: connections, then per-device
/// registrations, then the memory, then the listener.
pub struct Memnode {
    /// The connections, each with its server thread (in its inbox between serves).
    hub: Arc<Hub>,
    /// The open connections as the control thread sees them.
    ctls: Vec<Arc<Ctl>>,
    devs: Vec<DevState>,
    dm_host: Option<Arena>,
    region: Arena,
    listen: CmId,
    channel: Channel,
    cfg: MemnodeConfig,
    handler: Arc<Mutex<Box<dyn Handler + Send>>>,
    service: &'static str,
    /// Per server thread of the running serve: it has a handler of its own (`fork`).
    forked: Vec<bool>,
    connections: u64,
    /// Connections whose queue pair took the node's receiver-not-ready timer.
    rnr_set: u64,
    /// Clients fenced off this node: they may not connect again under their id.
    fenced: BTreeSet<u32>,
    /// The key check of every connect request (with `MemnodeConfig::key`).
    gate: Option<Gate>,
    /// Memory one connection costs this process (measured across the first accept).
    per_connection: Option<u64>,
    /// Messages served and waits on its own replies.
    server: Stats,
}

/// A one-line summary of the node, for logs.
#[derive(Debug, Clone)]
pub struct MemnodeSummary {
    /// The address listened on (host:port).
    pub listen: String,
    /// The RDMA device connections arrive on (a placeholder until the first connection).
    pub device: String,
    /// What backs the host region.
    pub region_pages: PageKind,
    /// What backs device memory, in words (`none`, the NIC's on-chip memory, or host
    /// memory standing in for it; `not set up yet` before the first connection).
    pub dm: &'static str,
    /// The service on every connection (`Handler::service`).
    pub service: &'static str,
}

impl Memnode {
    /// Registers the region and starts listening, with the echo service.
    pub fn start(cfg: MemnodeConfig) -> Result<Memnode, VerbsError> {
        Self::start_with(cfg, Box::new(Echo))
    }

    /// Registers the region and starts listening, with `handler` serving every connection.
    pub fn start_with(
        cfg: MemnodeConfig,
        handler: Box<dyn Handler + Send>,
    ) -> Result<Memnode, VerbsError> {
        probe(cfg.device.as_deref())?;
        let header =
            RegionHeader::new(cfg.region_len, cfg.chunk_size, cfg.dm_len).map_err(|e| {
                VerbsError::BadAddress {
                    addr: cfg.listen.clone(),
                    why: format!("bad region geometry: {e:?}"),
                }
            })?;
        let region = Arena::new(cfg.region_len as usize)?;
        let bytes = header.encode();
        // SAFETY: the fresh arena has at least region_len >= HEADER_LEN bytes and no
        // registration yet, so nothing else accesses it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), region.as_ptr(), bytes.len()) };
        let mut sa = SockAddr::parse(&cfg.listen)?;
        let channel = Channel::new()?;
        let listen = CmId::new(&channel)?;
        // SAFETY: live id; `sa` is a valid address for the call.
        if unsafe { sys::rdma_bind_addr(listen.0, sa.as_ptr()) } != 0 {
            return Err(VerbsError::Resolve {
                addr: cfg.listen.clone(),
                why: "cannot bind it (address not on this machine, or port in use)",
            });
        }
        // SAFETY: a bound id.
        if unsafe { sys::rdma_listen(listen.0, 64) } != 0 {
            return Err(sys_err("rdma_listen"));
        }
        let gate = Gate::for_keys(cfg.key, &cfg.client_keys);
        let service = handler.service();
        let mut node = Memnode {
            hub: Arc::new(Hub::new(cfg.threads)?),
            ctls: Vec::new(),
            devs: Vec::new(),
            dm_host: None,
            region,
            listen,
            channel,
            cfg,
            handler: Arc::new(Mutex::new(handler)),
            service,
            forked: Vec::new(),
            connections: 0,
            rnr_set: 0,
            fenced: BTreeSet::new(),
            gate,
            per_connection: None,
            server: Stats::default(),
        };
        // SAFETY: a bound id; `verbs` is set when the address belongs to an RDMA device.
        let ctx = unsafe { (*node.listen.0).verbs };
        if !ctx.is_null() {
            node.device(ctx)?;
        }
        Ok(node)
    }

    /// What the node runs on (device memory kind known once a device is set up).
    pub fn summary(&self) -> MemnodeSummary {
        let (device, dm) = match self.devs.first() {
            None => ("(first connection's)".to_string(), "not set up yet"),
            Some(d) => (
                context_name(d.ctx),
                match d.dm {
                    Dm::None => "none",
                    Dm::Device(_) => "on-chip device memory (ibv_alloc_dm)",
                    Dm::Host { .. } => "host memory (the NIC has no on-chip memory)",
                },
            ),
        };
        MemnodeSummary {
            listen: self.cfg.listen.clone(),
            device,
            region_pages: self.region.kind(),
            dm,
            service: self.service,
        }
    }

    /// Serves until `stop` is set or `limit` has passed: [`MemnodeConfig::threads`] server
    /// threads serve the connections (see `shard.rs`) while the calling thread handles
    /// connection events.
    pub fn serve(&mut self, stop: &AtomicBool, limit: Option<Duration>) -> Result<(), VerbsError> {
        let t0 = Instant::now();
        let n = self.hub.threads();
        // A handler per extra thread where the service has them (sharing its state); else
        // the threads take turns on the node's.
        let own: Vec<Option<Box<dyn Handler + Send>>> = (0..n)
            .map(|t| {
                if t == 0 {
                    None
                } else {
                    lock(&self.handler).fork()
                }
            })
            .collect();
        self.forked = own.iter().map(Option::is_some).collect();
        let quit = AtomicBool::new(false);
        let (hub, handler) = (self.hub.clone(), self.handler.clone());
        let (base, len, node) = (
            self.region.as_ptr() as usize,
            self.region.len() as u64,
            self.cfg.node,
        );
        let verbose = self.cfg.verbose;
        let result = std::thread::scope(|s| {
            let quit = &quit;
            let threads: Vec<_> = own
                .into_iter()
                .enumerate()
                .map(|(t, own)| {
                    let (hub, handler) = (&*hub, &*handler);
                    std::thread::Builder::new()
                        .name(format!("remora-verbs-srv-{t}"))
                        .spawn_scoped(s, move || {
                            // SAFETY: the region arena is mapped for the whole scope (the
                            // node outlives `serve`).
                            let region = unsafe {
                                WordRegion::new(base as *mut u8, len, node, Persist::Nothing)
                            };
                            Server {
                                t,
                                hub,
                                handler: match own {
                                    Some(h) => ThreadHandler::Own(h),
                                    None => ThreadHandler::Shared(handler),
                                },
                                region,
                                verbose,
                            }
                            .run(quit)
                        })
                })
                .collect();
            let mut r = Ok(());
            while r.is_ok()
                && !stop.load(Ordering::Relaxed)
                && limit.is_none_or(|l| t0.elapsed() < l)
                && threads
                    .iter()
                    .all(|t| t.as_ref().is_ok_and(|h| !h.is_finished()))
            {
                r = self
                    .channel
                    .next(Duration::from_millis(20))
                    .and_then(|ev| ev.map_or(Ok(()), |ev| self.on_event(ev)));
            }
            quit.store(true, Ordering::Relaxed);
            for t in threads {
                match t {
                    Ok(h) => match h.join() {
                        Ok(v) => self.server.bump(|s| *s = *s + v),
                        Err(_) => {
                            r = r.and(Err(VerbsError::Sys {
                                what: "a memnode server thread panicked",
                                errno: libc::EIO,
                            }))
                        }
                    },
                    Err(e) => {
                        r = r.and(Err(VerbsError::Sys {
                            what: "spawning a memnode server thread",
                            errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
                        }))
                    }
                }
            }
            r
        });
        self.forked.clear();
        result
    }

    /// The memory one connection costs this process: its resident plus hugetlb memory grown
    /// across the first accept (receive ring, staging, queue pair and CQs; `None` before a
    /// connection, or where `/proc/self/status` cannot be read).
    pub fn per_connection_bytes(&self) -> Option<u64> {
        self.per_connection
    }

    /// Connections whose queue pair was read back with the receiver-not-ready timer
    /// [`super::qp::MIN_RNR_TIMER`] (the rest kept rdma_cm's default, 655 ms).
    pub fn rnr_timer_set(&self) -> u64 {
        self.rnr_set
    }

    /// Messages served and connections accepted so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.hub.served.load(Ordering::Relaxed), self.connections)
    }

    /// The data path's counters: the node's own (messages, waits on its replies), its open
    /// connections', and those of every queue pair of this process already released.
    pub fn verbs_stats(&self) -> VerbsStats {
        self.server.get() + super::stats::totals() + self.hub.stats()
    }
}

/// The node's registered region as its own CPU sees it: the soft fabric's [`WordRegion`]
/// (bounds-checked, word-wise atomic: the NIC writes the same memory concurrently) over the
/// registered arena.
fn local_region(region: &Arena, node: NodeId) -> WordRegion<'_> {
    // SAFETY: the arena is `len()` bytes, mapped for as long as the borrow lives.
    unsafe { WordRegion::new(region.as_ptr(), region.len() as u64, node, Persist::Nothing) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora_core::server::LocalRegion;

    /// Touching 32 MiB of fresh pages grows the figure by at least half of it. Fresh: a
    /// `Vec` could reuse pages another test of this process freed (resident already), and a
    /// test freeing memory meanwhile can shrink the process, so up to three tries.
    #[test]
    fn process_memory_sees_memory_this_process_touches() {
        const LEN: usize = 32 << 20;
        let mut seen = Vec::new();
        for _ in 0..3 {
            let before = control::process_memory().expect("/proc/self/status is readable");
            // SAFETY: a private anonymous mapping of LEN bytes, written only within it and
            // unmapped below; nothing else refers to it.
            let after = unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    LEN,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED, "an anonymous mapping");
                let bytes = p.cast::<u8>();
                for off in (0..LEN).step_by(4096) {
                    bytes.add(off).write_volatile(1);
                }
                let after = control::process_memory().expect("/proc/self/status is readable");
                libc::munmap(p, LEN);
                after
            };
            if after >= before + (LEN as u64 / 2) {
                return;
            }
            seen.push((before, after));
        }
        panic!("{seen:?}: (before, after) bytes, touching 32 MiB of fresh pages");
    }

    #[test]
    fn region_is_bounds_checked_and_word_atomic() {
        let arena = Arena::new(1 << 16).expect("an arena");
        let r = local_region(&arena, 3);
        assert_eq!((r.node(), r.len()), (3, 1 << 16));
        r.write(13, b"hello, region").unwrap();
        let mut b = [0u8; 13];
        r.read(13, &mut b).unwrap();
        assert_eq!(&b, b"hello, region");
        r.store_u64(64, 7).unwrap();
        assert_eq!(
            r.cas_u64(64, 6, 9).unwrap(),
            7,
            "a failed CAS returns the value"
        );
        assert_eq!(r.cas_u64(64, 7, 9).unwrap(), 7);
        assert_eq!(r.load_u64(64).unwrap(), 9);
        // Out of range, overflowing, or unaligned: errors, never a stray access.
        assert!(r.read((1 << 16) - 4, &mut [0u8; 8]).is_err());
        assert!(r.write(u64::MAX - 2, b"abcd").is_err());
        assert!(r.load_u64(1 << 16).is_err());
        assert!(r.store_u64(56, 1).is_ok());
        assert!(r.store_u64(60, 1).is_err(), "4-aligned is not 8-aligned");
        assert!(r.cas_u64(4, 0, 1).is_err());
    }
}

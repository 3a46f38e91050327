//! The client side: connecting queue pairs to memory nodes through rdma_cm, and the
//! [`Endpoint`] holding one per node.
use super::cm::{Channel, CmId, Event, SockAddr, TRANSPORT_RETRIES, set_ack_timeout};
use super::device::{check_port, context_name, limits};
use super::error::VerbsError;
use super::fake::FakeNode;
use super::mr::Pd;
use super::pool::Pool;
use super::qp::cq::SendCq;
use super::qp::{RECV_LEN, Remote, VerbsQp};
use super::stats::VerbsStats;
use super::sys;
use super::wire::{DmKind, Hello, Request, Revoked, Unauthorized, Welcome};
use remora_core::fabric::{Endpoint, FabricError};
use remora_layouts::NodeId;
use remora_poller::arena::Mapping;
use remora_poller::frames::{self, FrameStack};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How clients connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The RDMA device connections must go through (`None`: whichever the route picks).
    pub device: Option<String>,
    /// Longest wait for each connection step.
    pub timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            device: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// What a client learned about a memory node when connecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The address connected to (host:port, as given).
    pub addr: String,
    /// The node's id, as `GlobalAddr`s name it.
    pub node: NodeId,
    /// The local RDMA device the connection goes through.
    pub device: String,
    /// Bytes of the node's host region.
    pub region_len: u64,
    /// Bytes of its device memory (0 when it has none).
    pub dm_len: u64,
    /// What its device-memory addresses point at.
    pub dm_kind: DmKind,
    /// Bytes a WRITE or SEND on this queue pair may carry inline in the work request.
    pub max_inline: usize,
    /// The service the node runs (`echo`, `canrt`, `erda`, `catfish`).
    pub service: String,
    /// This client's id at the node (the first node's, claimed at every other).
    pub client: u32,
}

const RESOLVE_MS: i32 = 5000;

pub(super) fn expect(
    ev: Event,
    want: sys::rdma_cm_event_type,
    addr: &str,
    stage: &'static str,
) -> Result<Event, VerbsError> {
    if ev.kind == want {
        return Ok(ev);
    }
    Err(match ev.kind {
        sys::RDMA_CM_EVENT_ADDR_ERROR => VerbsError::Resolve {
            addr: addr.into(),
            why: "no RDMA device has a route to this address",
        },
        sys::RDMA_CM_EVENT_ROUTE_ERROR => VerbsError::Resolve {
            addr: addr.into(),
            why: "route resolution failed",
        },
        sys::RDMA_CM_EVENT_REJECTED => match Unauthorized::decode(&ev.private) {
            Some(u) => VerbsError::Unauthorized {
                addr: addr.into(),
                why: u.explain(),
            },
            None => VerbsError::Refused { addr: addr.into() },
        },
        sys::RDMA_CM_EVENT_UNREACHABLE | sys::RDMA_CM_EVENT_CONNECT_ERROR => {
            VerbsError::Unreachable {
                addr: addr.into(),
                stage,
            }
        }
        _ => VerbsError::Protocol {
            addr: addr.into(),
            why: "unexpected rdma_cm event",
        },
    })
}

/// A fresh channel and id resolved to the device and route that reach `addr`.
fn resolve(addr: &str, opts: &ConnectOptions) -> Result<(Channel, CmId), VerbsError> {
    let mut sa = SockAddr::parse(addr)?;
    let ch = Channel::new()?;
    let id = CmId::new(&ch)?;
    // SAFETY: live id; `sa` holds a valid socket address for the call.
    if unsafe { sys::rdma_resolve_addr(id.0, std::ptr::null_mut(), sa.as_ptr(), RESOLVE_MS) } != 0 {
        return Err(VerbsError::Resolve {
            addr: addr.into(),
            why: "no RDMA device has an address that reaches it",
        });
    }
    expect(
        ch.wait(opts.timeout, addr, "address resolution")?,
        sys::RDMA_CM_EVENT_ADDR_RESOLVED,
        addr,
        "address",
    )?;
    // SAFETY: live id with a resolved address.
    if unsafe { sys::rdma_resolve_route(id.0, RESOLVE_MS) } != 0 {
        return Err(VerbsError::Resolve {
            addr: addr.into(),
            why: "route resolution failed",
        });
    }
    expect(
        ch.wait(opts.timeout, addr, "route resolution")?,
        sys::RDMA_CM_EVENT_ROUTE_RESOLVED,
        addr,
        "route",
    )?;
    // SAFETY: a resolved id has its device context and port set.
    let (ctx, port) = unsafe { ((*id.0).verbs, (*id.0).port_num) };
    let via = context_name(ctx);
    if let Some(want) = &opts.device
        && *want != via
    {
        return Err(VerbsError::WrongDevice {
            addr: addr.into(),
            via,
            wanted: want.clone(),
        });
    }
    check_port(ctx, port)?;
    set_ack_timeout(id.0);
    Ok((ch, id))
}

/// Connects one queue pair to the memory node listening at `addr` (host:port), as a new
/// client (the node assigns its id).
pub fn connect_qp(addr: &str, opts: &ConnectOptions) -> Result<(VerbsQp, NodeInfo), VerbsError> {
    connect_qp_as(addr, opts, 0)
}

/// [`connect_qp`] as client `client` (0: a new client, whose id the node assigns).
pub fn connect_qp_as(
    addr: &str,
    opts: &ConnectOptions,
    client: u32,
) -> Result<(VerbsQp, NodeInfo), VerbsError> {
    connect_qp_on(addr, opts, client, None)
}

/// [`connect_qp_as`] on the thread's send completion queue `cq` when it fits.
fn connect_qp_on(
    addr: &str,
    opts: &ConnectOptions,
    client: u32,
    cq: Option<&Rc<SendCq>>,
) -> Result<(VerbsQp, NodeInfo), VerbsError> {
    let (ch, id) = resolve(addr, opts)?;
    // SAFETY: resolved id: its context is open.
    let ctx = unsafe { (*id.0).verbs };
    let (_, rd, init_rd, _) = limits(ctx)?;
    let device = context_name(ctx);
    let pd = Pd::alloc(ctx)?;
    let mut qp = VerbsQp::create_on(id, Some(ch), pd, 0, true, cq)?;
    let hello = Hello {
        request: Request::Connect,
        recv_len: RECV_LEN as u32,
        client,
    }
    .encode();
    let mut param = sys::rdma_conn_param {
        private_data: hello.as_ptr().cast(),
        private_data_len: hello.len() as u8,
        responder_resources: rd,
        initiator_depth: init_rd,
        retry_count: TRANSPORT_RETRIES,
        rnr_retry_count: 6,
        ..Default::default()
    };
    // SAFETY: the id has its queue pair; `param` and its private data live through the call.
    if unsafe { sys::rdma_connect(qp.cm_id(), &mut param) } != 0 {
        return Err(VerbsError::Unreachable {
            addr: addr.into(),
            stage: "rdma_connect failed",
        });
    }
    let ch = qp.channel().ok_or(VerbsError::Protocol {
        addr: addr.into(),
        why: "no channel",
    })?;
    let ev = expect(
        ch.wait(opts.timeout, addr, "connection")?,
        sys::RDMA_CM_EVENT_ESTABLISHED,
        addr,
        "connection",
    )?;
    let w = Welcome::decode(&ev.private).map_err(|why| VerbsError::Protocol {
        addr: addr.into(),
        why,
    })?;
    qp.set_peer(w.node, Remote::from_welcome(&w), w.recv_len as usize);
    qp.set_min_rnr_timer();
    let info = NodeInfo {
        addr: addr.into(),
        node: w.node,
        device,
        region_len: w.region_len,
        dm_len: if w.dm_kind == DmKind::None {
            0
        } else {
            w.dm_len
        },
        dm_kind: w.dm_kind,
        max_inline: qp.max_inline(),
        service: w.service_name(),
        client: w.client,
    };
    if client != 0 && w.client != client {
        return Err(VerbsError::Protocol {
            addr: addr.into(),
            why: "the node gave another client id than the one claimed",
        });
    }
    Ok((qp, info))
}

/// Asks the memory node at `addr` to revoke its region's key and register the region again
/// under a new one; returns the new key. Queue pairs connected before keep the old key and
/// get remote access errors; connections made after get the new key.
///
/// The request is a connect request carrying a revocation hello (`wire::Hello`), which the node answers
/// by rejecting it with the new key in the reject's private data (rdma_cm only, no side
/// channel).
pub fn revoke_key(addr: &str, opts: &ConnectOptions) -> Result<u32, VerbsError> {
    let ev = ask(addr, opts, Request::RevokeKey, 0, "key revocation")?;
    if ev.kind != sys::RDMA_CM_EVENT_REJECTED {
        return Err(VerbsError::Protocol {
            addr: addr.into(),
            why: "the node did not answer the revocation",
        });
    }
    let r = Revoked::decode(&ev.private).map_err(|why| VerbsError::Protocol {
        addr: addr.into(),
        why,
    })?;
    Ok(r.new_rkey)
}

/// Sends the node at `addr` a connect request carrying `request`'s hello (naming `client`),
/// which the node answers with a reject carrying its reply (revocations and fences: rdma_cm
/// only, no side channel); returns the event that came back, waiting up to `opts.timeout`.
pub(super) fn ask(
    addr: &str,
    opts: &ConnectOptions,
    request: Request,
    client: u32,
    stage: &'static str,
) -> Result<Event, VerbsError> {
    let (ch, id) = resolve(addr, opts)?;
    let hello = Hello {
        request,
        recv_len: 0,
        client,
    }
    .encode();
    let mut param = sys::rdma_conn_param {
        private_data: hello.as_ptr().cast(),
        private_data_len: hello.len() as u8,
        retry_count: TRANSPORT_RETRIES,
        // No queue pair: the request is answered by a reject before any would be used (queue
        // pair 1, the GSI's number, which no connected queue pair has: see `fence.rs`).
        qp_num: 1,
        ..Default::default()
    };
    // SAFETY: a resolved id; `param` and its private data live through the call.
    if unsafe { sys::rdma_connect(id.0, &mut param) } != 0 {
        return Err(VerbsError::Unreachable {
            addr: addr.into(),
            stage: "rdma_connect failed",
        });
    }
    let ev = ch.wait(opts.timeout, addr, stage)?;
    drop(id);
    drop(ch);
    Ok(ev)
}

/// Bytes of an endpoint's registered pool.
const POOL_BYTES: usize = 2 << 20;
/// Bytes of each buffer of that pool.
const POOL_CHUNK: usize = 4096;
/// Bytes of an endpoint's coroutine frames at first (see [`remora_poller::frames`]): a
/// spawn of more (coroutine count x future size, e.g. 256 SMART lookups of 32 KiB each)
/// replaces them by frame memory sized for it, which each queue pair registers at its first
/// post from it (`VerbsQp::adopt_frames`).
const FRAME_BYTES: usize = 4 << 20;

/// A client's endpoint: one RC queue pair per memory node, all under one client id (the
/// first node's), all on one send completion queue, and the thread's registered memory: a
/// buffer pool and the coroutine frames, which the endpoint installs as its thread's frame
/// memory (so what coroutines READ into and their atomics' result words are in registered
/// memory, written in place by the NIC). Frame memory grows at a spawn that needs more (see
/// [`FRAME_BYTES`]); a spawn nested in live frames that does not fit goes on the heap, its
/// READs bounced (counted: `remora_poller::frames::HEAP_FALLBACK_BYTES`, the bounced bytes). Field order is release order: the queue pairs (and
/// their registrations) before the pool.
pub struct VerbsEndpoint {
    nodes: Vec<NodeId>,
    qps: Vec<VerbsQp>,
    info: Vec<NodeInfo>,
    client: u32,
    opts: ConnectOptions,
    frames: Arc<FrameStack>,
    pool: Pool,
}

impl VerbsEndpoint {
    /// Connects to every memory node in `addrs` (host:port each), and makes this endpoint's
    /// coroutine frames the calling thread's frame memory.
    pub fn connect<S: AsRef<str>>(
        addrs: &[S],
        opts: &ConnectOptions,
    ) -> Result<VerbsEndpoint, VerbsError> {
        let mut ep = VerbsEndpoint::empty(opts.clone())?;
        for a in addrs {
            let cq = ep.qps.last().map(|q| q.send_cq().clone());
            let (qp, info) = connect_qp_on(a.as_ref(), opts, ep.client, cq.as_ref())?;
            ep.client = info.client;
            if ep.nodes.contains(&info.node) {
                return Err(VerbsError::Protocol {
                    addr: info.addr,
                    why: "two memory nodes have the same node id",
                });
            }
            ep.add(qp, info.node)?;
            ep.info.push(info);
        }
        frames::install_growable(ep.frames.clone());
        Ok(ep)
    }

    fn empty(opts: ConnectOptions) -> Result<VerbsEndpoint, VerbsError> {
        super::clock::calibrate();
        let mem = Mapping::anonymous(FRAME_BYTES).map_err(|e| VerbsError::Sys {
            what: "mmap of the coroutine frames",
            errno: e.raw_os_error().unwrap_or(0),
        })?;
        Ok(VerbsEndpoint {
            nodes: Vec::new(),
            qps: Vec::new(),
            info: Vec::new(),
            client: 0,
            opts,
            frames: FrameStack::new(Arc::new(mem)),
            pool: Pool::new(POOL_BYTES, POOL_CHUNK)?,
        })
    }

    /// Registers the pool and frames with `qp` and adds it.
    fn add(&mut self, mut qp: VerbsQp, node: NodeId) -> Result<(), VerbsError> {
        let (base, len) = self.pool.span();
        let (fbase, flen) = self.frames.span();
        // SAFETY: the pool is dropped after the queue pairs (field order); the frames'
        // mapping lives as long as any holder of the stack, this endpoint included.
        unsafe {
            qp.register_pool(0, base, len)?;
            qp.register_pool(1, fbase, flen)?;
        }
        self.nodes.push(node);
        self.qps.push(qp);
        Ok(())
    }

    /// What each memory node told at connection time.
    pub fn info(&self) -> &[NodeInfo] {
        &self.info
    }

    /// The queue pairs, in the order of [`Self::nodes`].
    pub fn qps(&self) -> &[VerbsQp] {
        &self.qps
    }

    /// This thread's registered buffers: ops on them are posted in place (see [`Pool`]).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// What the queue pairs' data path cost so far, summed.
    pub fn stats(&self) -> VerbsStats {
        self.qps
            .iter()
            .fold(VerbsStats::default(), |a, q| a + q.stats())
    }

    /// Waits until every work request posted without a waiter (unsignaled releases such as
    /// Sherman's bare unlock) has run on its memory node: one signaled empty WRITE per queue
    /// pair with any outstanding, waited for. Dropping the endpoint does this first, since
    /// destroying a queue pair flushes what has not run and a release lost so would leave
    /// its lock held until a waiter's lease ran out.
    pub fn settle(&self) {
        for qp in &self.qps {
            qp.settle_detached();
        }
    }
}

impl Drop for VerbsEndpoint {
    fn drop(&mut self) {
        // Releases posted detached must reach the memory nodes before the queue pairs go.
        self.settle();
        frames::uninstall(&self.frames);
    }
}

/// An endpoint on the fake device ([`super::fake`]): the verbs data path over memory nodes
/// in this process. Not `Send`: its nodes are shared with the caller.
pub struct FakeEndpoint {
    ep: VerbsEndpoint,
    _one_thread: PhantomData<Rc<FakeNode>>,
}

impl FakeEndpoint {
    /// Connects to every node of `nodes` (one queue pair each, as client 1).
    pub fn connect(nodes: &[Rc<FakeNode>]) -> Result<FakeEndpoint, VerbsError> {
        let mut ep = VerbsEndpoint::empty(ConnectOptions::default())?;
        ep.client = 1;
        for n in nodes {
            let cq = ep.qps.last().map(|q| q.send_cq().clone());
            let qp = VerbsQp::fake(n, cq.as_ref())?;
            if ep.nodes.contains(&n.node()) {
                return Err(VerbsError::Protocol {
                    addr: "fake device".into(),
                    why: "two memory nodes have the same node id",
                });
            }
            ep.add(qp, n.node())?;
        }
        frames::install_growable(ep.frames.clone());
        Ok(FakeEndpoint {
            ep,
            _one_thread: PhantomData,
        })
    }

    /// What the queue pairs' data path cost so far, summed.
    pub fn stats(&self) -> VerbsStats {
        self.ep.stats()
    }

    /// See [`VerbsEndpoint::settle`].
    pub fn settle(&self) {
        self.ep.settle()
    }

    /// The registered buffer pool (see [`VerbsEndpoint::pool`]).
    pub fn pool(&self) -> &Pool {
        &self.ep.pool
    }
}

impl Endpoint for FakeEndpoint {
    type Qp = VerbsQp;

    fn qp(&self, node: NodeId) -> Result<&VerbsQp, FabricError> {
        self.ep.qp(node)
    }

    fn nodes(&self) -> &[NodeId] {
        &self.ep.nodes
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        self.ep.now_ns()
    }

    fn client_id(&self) -> u32 {
        self.ep.client
    }

    fn pause(&self, ns: u64) -> impl std::future::Future<Output = ()> {
        self.ep.pause(ns)
    }
}

impl Endpoint for VerbsEndpoint {
    type Qp = VerbsQp;

    fn qp(&self, node: NodeId) -> Result<&VerbsQp, FabricError> {
        match self.nodes.iter().position(|&n| n == node) {
            Some(i) => Ok(&self.qps[i]),
            None => Err(FabricError::UnknownNode { node }),
        }
    }

    fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        super::clock::now_ns()
    }

    fn client_id(&self) -> u32 {
        self.client
    }

    fn pause(&self, ns: u64) -> impl std::future::Future<Output = ()> {
        super::clock::pause(ns)
    }

    /// Through the rdma_cm control path ([`super::fence`]): the node moves the client's queue
    /// pairs to the error state before it answers. The exchange (bounded by the connection
    /// timeout) runs on a helper thread, so this thread's other coroutines keep running while
    /// it waits; a fence happens once per dead holder, after a lease. A node that does not
    /// fence (an older one, or one whose queue pair would not move) is `Unsupported`, so the
    /// waiter reports the lock held instead of breaking it; an unreachable node is
    /// `RetryExceeded`.
    async fn fence(&self, node: NodeId, client: u32) -> Result<(), FabricError> {
        let i = self
            .nodes
            .iter()
            .position(|&n| n == node)
            .ok_or(FabricError::UnknownNode { node })?;
        let (addr, opts) = (self.info[i].addr.clone(), self.opts.clone());
        let r = super::offthread::off_thread("remora-fence", move || {
            super::fence::fence_patiently(&addr, client, &opts)
        })
        .await;
        if let Err(e) = &r {
            // The fabric's error keeps no text: the reason is logged for whoever reads why a
            // lock could not be taken over.
            log::warn!("fencing client {client:#x} off memory node {node}: {e}");
        }
        match r {
            Ok(_) => Ok(()),
            Err(VerbsError::Protocol { .. }) => Err(FabricError::Unsupported {
                what: "the memory node did not fence the client",
            }),
            Err(_) => Err(FabricError::RetryExceeded { node }),
        }
    }
}

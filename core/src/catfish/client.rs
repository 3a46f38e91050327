//! The Catfish client: fast messaging, RDMA offloading with multi-issue, and the adaptive
//! switch between them.
//!
//! A client serves one coroutine at a time on its queue pair (replies are matched to the one
//! outstanding request by id). Inserts always go to the server by fast messaging; searches
//! take the mode asked for, or the back-off's choice in [`Mode::Adaptive`].
mod offload;
pub(crate) use offload::intersecting;

use super::CatfishError;
use super::adaptive::{Backoff, BackoffConfig};
use super::server::HEARTBEAT_REQ_ID;
use crate::alloc::RemoteAllocator;
use crate::fabric::{Endpoint, FabricError, Op, QueuePair, Work};
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::{
    Entry, FANOUT, FLAG_LAST, FLAG_MORE, META_LEN, Meta, Opcode, ROOT_SLOT, Rect, Request,
    ResponseHeader, Status, decode_hit,
};
use remora_layouts::catfish::{TreeKind, check_fanout, init_arg, node_len};
use remora_layouts::region::root_offset;
use std_alloc::vec::Vec;

/// Node READs posted in one doorbell (the multi-issue width).
pub const MULTI_ISSUE: usize = 32;
/// Times one node is re-read after torn images before the search gives up. Generous: on a
/// shared-memory fabric the server thread can be descheduled in the middle of a rewrite.
pub const TORN_RETRIES: u32 = 1 << 16;
/// Times an offloaded search starts over after meeting a node born after its grace period
/// (possibly a reused one, see [`super::reclaim`]) before it gives up with
/// [`CatfishError::Lapped`].
pub const REUSE_RESTARTS: u32 = 64;
/// Times an insert asks for more space before giving up.
pub(super) const GROW_RETRIES: u32 = 4;
/// How long a client waits for each reply message by default (see
/// [`CatfishClient::set_reply_timeout_ns`]): about what a NIC takes to report a dead peer
/// (the sim's `ack_timeout x (retry_cnt + 1)` is 0.54 s), with room for a descheduled server.
pub const DEFAULT_REPLY_TIMEOUT_NS: u64 = 2_000_000_000;

/// How a search is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The server traverses the tree and replies with the hits.
    Messaging,
    /// The client traverses with one-sided READs, one doorbell per level.
    Offload,
    /// The back-off chooses per search.
    Adaptive,
}

/// How requests reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A two-sided SEND.
    Send,
    /// An RDMA WRITE_WITH_IMM of the request into this client's mailbox on the memory node
    /// (the paper's event-based fast messaging); the immediate is the mailbox offset / 8.
    WriteImm,
}

/// What this client's searches cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Searches answered by the server (fast messaging).
    pub messaging_searches: u64,
    /// Searches the client ran itself, by one-sided READs (RDMA offloading).
    pub offloaded_searches: u64,
    /// Node images read one-sidedly (retries included).
    pub node_reads: u64,
    /// Node images that were torn or mid-write and were read again.
    pub torn_retries: u64,
    /// Superblock READs that found the cached root stale.
    pub root_refreshes: u64,
    /// Offloaded searches started over because a node was born after the search's epoch
    /// (possibly reused under it, see [`super::reclaim`]).
    pub reuse_restarts: u64,
    /// Inserts that had to give the server another arena.
    pub grows: u64,
    /// Heartbeats taken by Algorithm 1 ([`CatfishClient::search_adaptive`]).
    pub heartbeats: u64,
}

/// One client of a Catfish tree on one memory node, over one connection: pass it the same
/// queue pair every time. After that connection breaks or the node restarts, open a new
/// client on the new connection: this one's request mailbox (and flow-control count)
/// belonged to the old one, and after a restart that memory may hold a tree node
/// ([`super::arenas`]). A client that saw its connection fail refuses to send again.
pub struct CatfishClient {
    meta: GlobalAddr,
    root: GlobalAddr,
    /// The tree's entries per node (from the superblock) and its node image length.
    fanout: usize,
    node_len: usize,
    /// The tree's kind, from the superblock.
    kind: TreeKind,
    /// The reclamation epoch of the latest superblock READ that completed: the epoch an
    /// offloaded search starts from ([`super::reclaim`]).
    epoch: u64,
    alloc: RemoteAllocator,
    transport: Transport,
    mailbox: GlobalAddr,
    next_req: u32,
    /// Reply messages received on this queue pair, modulo 256 (sent with every request:
    /// the server's flow control).
    received: u8,
    /// A chunk taken from the node that the server did not accept as an arena: used for the
    /// next Grow instead of taking another.
    spare: Option<GlobalAddr>,
    backoff: Backoff,
    /// Load seen by the latest search, not yet fed to the back-off.
    observed: Option<u16>,
    last_heartbeat_seq: u64,
    /// Algorithm 1's `Inv` and `t0` (the client's clock when it last took a heartbeat).
    heartbeat_interval_ns: u64,
    t0: u64,
    /// Algorithm 1's `u_serv`: the load of the latest heartbeat message the server sent to
    /// this client, not taken yet (`None`: zeroed).
    u_serv: Option<u16>,
    stats: ClientStats,
    /// The bound on each reply wait, and the error that closed messaging after one ran out.
    reply_timeout_ns: u64,
    closed: Option<CatfishError>,
    reply: Vec<u8>,
    nodes: Vec<u8>,
    frontier: Vec<GlobalAddr>,
    next: Vec<GlobalAddr>,
    pending: Vec<usize>,
}

impl CatfishClient {
    /// Formats a new tree of the default fanout ([`FANOUT`] entries per node) on `qp`'s
    /// memory node with `chunks` allocator chunks as its first arenas, and opens it.
    pub async fn create<Q: QueuePair>(
        qp: &Q,
        chunks: usize,
    ) -> Result<CatfishClient, CatfishError> {
        CatfishClient::create_with_fanout(qp, chunks, FANOUT).await
    }

    /// [`CatfishClient::create`] with `fanout` entries per node (4 to 130; the paper runs
    /// 15, 30, 70 and 130). Every client learns it from the superblock.
    pub async fn create_with_fanout<Q: QueuePair>(
        qp: &Q,
        chunks: usize,
        fanout: usize,
    ) -> Result<CatfishClient, CatfishError> {
        CatfishClient::create_tree(qp, chunks, fanout, TreeKind::Guttman).await
    }

    /// [`CatfishClient::create_with_fanout`] for a tree of `kind` (the basic R-tree, the
    /// R*-tree or the Hilbert R-tree; recorded in the superblock).
    pub async fn create_tree<Q: QueuePair>(
        qp: &Q,
        chunks: usize,
        fanout: usize,
        kind: TreeKind,
    ) -> Result<CatfishClient, CatfishError> {
        let fanout = check_fanout(fanout)?;
        let alloc = RemoteAllocator::open(qp).await?;
        let mut c = CatfishClient::with_alloc(qp, alloc, GlobalAddr::NULL)?;
        for i in 0..chunks.max(1) {
            let chunk = c.alloc.alloc_chunk(qp).await?;
            let (op, arg1) = if i == 0 {
                (Opcode::Init, init_arg(c.alloc.chunk_size(), kind, fanout))
            } else {
                (Opcode::Grow, c.alloc.chunk_size())
            };
            let status = c.arena_request_with(qp, op, chunk, arg1).await?;
            if status != Status::Ok {
                return Err(CatfishError::Server(status));
            }
        }
        c.refresh_meta(qp).await?;
        Ok(c)
    }

    /// Opens the tree published in root slot [`ROOT_SLOT`] of `qp`'s memory node.
    pub async fn open<Q: QueuePair>(qp: &Q) -> Result<CatfishClient, CatfishError> {
        let alloc = RemoteAllocator::open(qp).await?;
        let mut c = CatfishClient::with_alloc(qp, alloc, GlobalAddr::NULL)?;
        c.refresh_meta(qp).await?;
        Ok(c)
    }

    fn with_alloc<Q: QueuePair>(
        qp: &Q,
        alloc: RemoteAllocator,
        meta: GlobalAddr,
    ) -> Result<CatfishClient, CatfishError> {
        let max = qp.max_message();
        Ok(CatfishClient {
            meta,
            root: GlobalAddr::NULL,
            fanout: FANOUT,
            node_len: node_len(FANOUT),
            kind: TreeKind::Guttman,
            epoch: 0,
            alloc,
            transport: Transport::Send,
            mailbox: GlobalAddr::NULL,
            next_req: 1,
            received: 0,
            spare: None,
            backoff: Backoff::new(
                BackoffConfig::default(),
                0x9e37_79b9_7f4a_7c15 ^ qp.peer() as u64,
            ),
            observed: None,
            last_heartbeat_seq: 0,
            heartbeat_interval_ns: super::server::HEARTBEAT_NS,
            t0: 0,
            u_serv: None,
            stats: ClientStats::default(),
            reply_timeout_ns: DEFAULT_REPLY_TIMEOUT_NS,
            closed: None,
            reply: std_alloc::vec![0u8; max],
            nodes: Vec::new(),
            frontier: Vec::new(),
            next: Vec::new(),
            pending: Vec::new(),
        })
    }

    /// Replaces the back-off parameters; `seed` decorrelates clients.
    pub fn set_backoff(&mut self, cfg: BackoffConfig, seed: u64) {
        self.backoff = Backoff::new(cfg, seed);
    }

    /// Algorithm 1's `Inv`: how old the last heartbeat taken must be before the client looks
    /// for a new one ([`super::server::HEARTBEAT_NS`] by default; agree it with the server's
    /// [`super::CatfishServer::with_heartbeat_interval_ns`]).
    pub fn set_heartbeat_interval_ns(&mut self, ns: u64) {
        self.heartbeat_interval_ns = ns.max(1);
    }

    /// Bounds every wait for a reply message to `ns` of the fabric's clock
    /// ([`QueuePair::clock_ns`]; virtual time on the sim), [`DEFAULT_REPLY_TIMEOUT_NS`] by
    /// default. A wait that runs out fails with [`CatfishError::NoReply`] and closes this
    /// client's messaging for good: every later request fails the same way at once (a late
    /// reply would otherwise be taken for the next request's); offloaded searches still run.
    /// On a fabric without a clock the wait is unbounded here and ends only when the fabric
    /// reports the peer dead.
    pub fn set_reply_timeout_ns(&mut self, ns: u64) {
        self.reply_timeout_ns = ns.max(1);
    }

    /// Chooses how requests travel (SEND by default).
    pub fn set_transport(&mut self, t: Transport) {
        self.transport = t;
    }

    /// A snapshot of this client's counters.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    async fn refresh_meta<Q: QueuePair>(&mut self, qp: &Q) -> Result<Meta, CatfishError> {
        if self.meta.is_null() {
            let mut slot = [0u8; 8];
            qp.read(
                GlobalAddr::new(qp.peer(), root_offset(ROOT_SLOT)),
                &mut slot,
            )
            .await?;
            let raw = u64::from_le_bytes(slot);
            if raw == 0 {
                return Err(CatfishError::NotCreated);
            }
            self.meta = GlobalAddr::from_raw(raw);
        }
        let mut buf = [0u8; META_LEN];
        qp.read(self.meta, &mut buf).await?;
        let meta = Meta::decode(&buf)?;
        self.root = GlobalAddr::from_raw(meta.root);
        self.fanout = meta.fanout;
        self.node_len = node_len(meta.fanout);
        self.kind = meta.kind;
        self.epoch = meta.epoch;
        Ok(meta)
    }

    fn request_id(&mut self) -> u32 {
        let id = self.next_req;
        self.next_req = self.next_req.wrapping_add(1).max(1);
        id
    }

    /// Sends one request and waits for its first reply message (left in `self.reply`).
    async fn call<Q: QueuePair>(
        &mut self,
        qp: &Q,
        mut req: Request,
    ) -> Result<(ResponseHeader, usize), CatfishError> {
        if let Some(e) = self.closed {
            return Err(e);
        }
        if self.transport == Transport::WriteImm && self.mailbox.is_null() {
            self.mailbox = self.request_mailbox(qp).await?;
        }
        req.acked = self.received;
        let bytes = req.encode();
        let sent = match self.transport {
            Transport::Send => qp.send(&bytes).await,
            Transport::WriteImm => {
                let imm = u32::try_from(self.mailbox.offset() / 8)
                    .map_err(|_| CatfishError::Protocol("mailbox beyond 32 GiB: use SEND"))?;
                qp.post(&mut [Op::WriteImm {
                    remote: self.mailbox,
                    local: &bytes,
                    imm,
                }])
                .await
            }
        };
        sent.map_err(|e| self.broken(e))?;
        // The mailbox is reused only after this reply: the server has read it by then.
        self.recv_reply(qp, req.req_id).await
    }

    /// A verb of the messaging path failed: the queue pair is in the error state (RC), so
    /// messaging on this client is closed like after [`CatfishError::NoReply`]. Above all it
    /// never writes its request mailbox again through another connection: after the memory
    /// node restarts, that memory is free again and may hold a tree node
    /// ([`super::arenas`]). Open a new client on the new connection.
    fn broken(&mut self, e: FabricError) -> CatfishError {
        let e = CatfishError::Fabric(e);
        self.closed = Some(e);
        e
    }

    /// Sends one request by SEND whatever the transport (arena and mailbox requests, which
    /// may be needed before a mailbox exists) and waits for its first reply message.
    async fn call_send<Q: QueuePair>(
        &mut self,
        qp: &Q,
        mut req: Request,
    ) -> Result<(ResponseHeader, usize), CatfishError> {
        if let Some(e) = self.closed {
            return Err(e);
        }
        req.acked = self.received;
        qp.send(&req.encode()).await.map_err(|e| self.broken(e))?;
        self.recv_reply(qp, req.req_id).await
    }

    async fn recv_reply<Q: QueuePair>(
        &mut self,
        qp: &Q,
        req_id: u32,
    ) -> Result<(ResponseHeader, usize), CatfishError> {
        // Heartbeats may precede the reply: at most the server's window of them.
        for _ in 0..=super::server::MAX_WINDOW {
            if let Some(e) = self.closed {
                return Err(e);
            }
            let r = match qp.clock_ns() {
                None => qp.recv(&mut self.reply).await.map_err(|e| self.broken(e))?,
                Some(t0) => {
                    let ns = self.reply_timeout_ns;
                    match within(qp, ns, qp.recv(&mut self.reply)).await {
                        Some(r) => r.map_err(|e| self.broken(e))?,
                        None => {
                            let waited_ns = qp.clock_ns().unwrap_or(t0).saturating_sub(t0);
                            let e = CatfishError::NoReply {
                                node: qp.peer(),
                                waited_ns,
                            };
                            self.closed = Some(e);
                            return Err(e);
                        }
                    }
                }
            };
            self.received = self.received.wrapping_add(1);
            let len = r.len as usize;
            let msg = self.reply.get(..len).ok_or(CatfishError::Protocol(
                "reply longer than the receive buffer",
            ))?;
            let h = ResponseHeader::decode(msg)?;
            if h.req_id == HEARTBEAT_REQ_ID {
                self.u_serv = Some(h.load_permille);
                continue;
            }
            if h.req_id != req_id {
                return Err(CatfishError::Protocol("reply to another request"));
            }
            return Ok((h, len));
        }
        Err(CatfishError::Protocol(
            "more unread messages than the server's window",
        ))
    }

    /// Takes the heartbeat messages already received (without waiting): the latest load
    /// goes to `u_serv`. Anything else waiting there is a protocol error (no request is
    /// outstanding between two calls). Nothing to take once messaging is closed.
    fn take_heartbeats<Q: QueuePair>(&mut self, qp: &Q) -> Result<(), CatfishError> {
        if self.closed.is_some() {
            // Messaging is closed: no heartbeat is taken, the client may still offload.
            return Ok(());
        }
        // At most the server's window of messages can be unread; bound the loop by it.
        for _ in 0..=super::server::MAX_WINDOW {
            let Some(r) = qp.try_recv(&mut self.reply).map_err(|e| self.broken(e))? else {
                return Ok(());
            };
            self.received = self.received.wrapping_add(1);
            let msg = self
                .reply
                .get(..r.len as usize)
                .ok_or(CatfishError::Protocol(
                    "reply longer than the receive buffer",
                ))?;
            let h = ResponseHeader::decode(msg)?;
            if h.req_id != HEARTBEAT_REQ_ID {
                return Err(CatfishError::Protocol("a reply no request waits for"));
            }
            self.u_serv = Some(h.load_permille);
        }
        Err(CatfishError::Protocol(
            "more unread messages than the server's window",
        ))
    }

    /// Asks the server for this connection's request mailbox (by SEND), growing the tree's
    /// arenas if the server has no room for it.
    async fn request_mailbox<Q: QueuePair>(&mut self, qp: &Q) -> Result<GlobalAddr, CatfishError> {
        for _ in 0..=GROW_RETRIES {
            let req = Request {
                op: Opcode::Mailbox,
                acked: self.received,
                req_id: self.request_id(),
                rect: Rect::new(0, 0, 0, 0)?,
                arg0: 0,
                arg1: 0,
            };
            let (h, len) = self.call_send(qp, req).await?;
            match h.status {
                Status::Ok if h.count == 1 && h.flags & FLAG_LAST != 0 => {
                    let addr = GlobalAddr::from_raw(decode_hit(&self.reply[..len], 0)?.ptr);
                    if addr.node() != qp.peer() {
                        return Err(CatfishError::Protocol("mailbox on another node"));
                    }
                    return Ok(addr);
                }
                Status::Ok => return Err(CatfishError::Protocol("malformed mailbox reply")),
                Status::Full => self.grow(qp).await?,
                other => return Err(CatfishError::Server(other)),
            }
        }
        Err(CatfishError::Server(Status::Full))
    }

    /// Gives the server another allocator chunk as an arena. A chunk the server refuses is
    /// kept for the next attempt, never leaked; no chunk left on the node is
    /// [`CatfishError::NodeFull`].
    async fn grow<Q: QueuePair>(&mut self, qp: &Q) -> Result<(), CatfishError> {
        let chunk = match self.spare.take() {
            Some(c) => c,
            None => match self.alloc.alloc_chunk(qp).await {
                Ok(c) => c,
                Err(crate::alloc::AllocError::OutOfMemory { node, region_len }) => {
                    return Err(CatfishError::NodeFull { node, region_len });
                }
                Err(e) => return Err(e.into()),
            },
        };
        self.stats.grows += 1;
        match self.arena_request(qp, Opcode::Grow, chunk).await {
            Ok(Status::Ok) => Ok(()),
            Ok(s) => {
                self.spare = Some(chunk);
                Err(CatfishError::Server(s))
            }
            Err(e) => {
                self.spare = Some(chunk);
                Err(e)
            }
        }
    }

    async fn arena_request<Q: QueuePair>(
        &mut self,
        qp: &Q,
        op: Opcode,
        chunk: GlobalAddr,
    ) -> Result<Status, CatfishError> {
        let len = self.alloc.chunk_size();
        self.arena_request_with(qp, op, chunk, len).await
    }

    async fn arena_request_with<Q: QueuePair>(
        &mut self,
        qp: &Q,
        op: Opcode,
        chunk: GlobalAddr,
        arg1: u64,
    ) -> Result<Status, CatfishError> {
        let req = Request {
            op,
            acked: 0,
            req_id: self.request_id(),
            rect: Rect::new(0, 0, 0, 0)?,
            arg0: chunk.raw(),
            arg1,
        };
        Ok(self.call_send(qp, req).await?.0.status)
    }

    /// Inserts `rect` with object id `id` (through the server, always). If the server's
    /// arenas are full, gives it another allocator chunk and retries.
    pub async fn insert<Q: QueuePair>(
        &mut self,
        qp: &Q,
        rect: Rect,
        id: u64,
    ) -> Result<(), CatfishError> {
        self.write_growing(qp, Opcode::Insert, rect, id).await?;
        Ok(())
    }

    /// Deletes the entry with rectangle `rect` and object id `id` (through the server,
    /// always); `Ok(false)` if there was none. A delete that condenses the tree may need
    /// room for copies: if the server's arenas are full, gives it another chunk and retries.
    pub async fn delete<Q: QueuePair>(
        &mut self,
        qp: &Q,
        rect: Rect,
        id: u64,
    ) -> Result<bool, CatfishError> {
        let h = self.write_growing(qp, Opcode::Delete, rect, id).await?;
        if h.flags & FLAG_LAST != 0 {
            Ok(h.count == 1)
        } else {
            Err(CatfishError::Protocol("malformed delete reply"))
        }
    }

    /// One tree-changing request (`op` on `rect`, object `id`) through the server; while
    /// the server's arenas are full, gives it another allocator chunk and asks again. The
    /// reply's header when the server says `Ok`.
    async fn write_growing<Q: QueuePair>(
        &mut self,
        qp: &Q,
        op: Opcode,
        rect: Rect,
        id: u64,
    ) -> Result<ResponseHeader, CatfishError> {
        if !rect.is_valid() {
            return Err(CatfishError::Server(Status::BadRequest));
        }
        for _ in 0..=GROW_RETRIES {
            let req = Request {
                op,
                acked: 0,
                req_id: self.request_id(),
                rect,
                arg0: id,
                arg1: 0,
            };
            let (h, _) = self.call(qp, req).await?;
            self.observed = Some(h.load_permille);
            match h.status {
                Status::Ok => return Ok(h),
                Status::Full => self.grow(qp).await?,
                other => return Err(CatfishError::Server(other)),
            }
        }
        Err(CatfishError::Server(Status::Full))
    }

    /// Appends every entry intersecting `rect` to `out`; returns the mode actually used.
    pub async fn search<Q: QueuePair>(
        &mut self,
        qp: &Q,
        rect: Rect,
        mode: Mode,
        out: &mut Vec<Entry>,
    ) -> Result<Mode, CatfishError> {
        if !rect.is_valid() {
            return Err(CatfishError::Server(Status::BadRequest));
        }
        let mode = match mode {
            Mode::Adaptive => {
                self.backoff.observe(self.observed.take());
                self.backoff.next_mode()
            }
            m => m,
        };
        match mode {
            Mode::Offload => self.search_offload(qp, rect, out).await?,
            _ => self.search_messaging(qp, rect, out).await?,
        }
        Ok(mode)
    }

    /// The paper's adaptive search (Algorithm 1) with the server's heartbeats. The server
    /// sends each connection a heartbeat message every `Inv` (seeds/003 §4.1: the heartbeat
    /// "is sent to all active clients by the aforementioned fast messaging design", into
    /// `u_serv`, "the memory region where the heartbeats are written"), so looking at it is
    /// local: before the search, if the last heartbeat taken is older than `Inv` (by `ep`'s
    /// clock), the client takes the heartbeats already in its receive queue (no network
    /// operation; a reply wait takes them too); the latest is `U`, `u_serv` is cleared and
    /// `t0` restarts. Then the back-off ([`Backoff::observe`], lines 11-16) picks messaging
    /// or offloading. A fabric without a clock (`now_ns` always 0) looks before every
    /// search. Returns the mode used.
    pub async fn search_adaptive<E: Endpoint>(
        &mut self,
        ep: &E,
        rect: Rect,
        out: &mut Vec<Entry>,
    ) -> Result<Mode, CatfishError> {
        if !rect.is_valid() {
            return Err(CatfishError::Server(Status::BadRequest));
        }
        let qp = ep.qp(self.alloc.node())?;
        if self.mailbox.is_null() {
            // The connection's block: the server sends heartbeats to connections holding one.
            self.mailbox = self.request_mailbox(qp).await?;
        }
        let t = ep.now_ns();
        let mut u = None;
        if t == 0 || t.saturating_sub(self.t0) > self.heartbeat_interval_ns {
            self.take_heartbeats(qp)?;
            if let Some(load) = self.u_serv.take() {
                u = Some(load);
                self.t0 = t;
                self.stats.heartbeats += 1;
            }
        }
        self.backoff.observe(u);
        let mode = self.backoff.next_mode();
        match mode {
            Mode::Offload => self.search_offload(qp, rect, out).await?,
            _ => self.search_messaging(qp, rect, out).await?,
        }
        // Piggybacked loads are for `Mode::Adaptive`; this path uses heartbeats only.
        self.observed = None;
        Ok(mode)
    }

    /// Fast messaging: one SEND, the hits come back in one or more SENDs.
    pub async fn search_messaging<Q: QueuePair>(
        &mut self,
        qp: &Q,
        rect: Rect,
        out: &mut Vec<Entry>,
    ) -> Result<(), CatfishError> {
        let req = Request {
            op: Opcode::Search,
            acked: 0,
            req_id: self.request_id(),
            rect,
            arg0: 0,
            arg1: 0,
        };
        let (mut h, mut len) = self.call(qp, req).await?;
        loop {
            if h.status != Status::Ok {
                return Err(CatfishError::Server(h.status));
            }
            qp.charge(Work::Decode(len));
            for i in 0..h.count as usize {
                out.push(decode_hit(&self.reply[..len], i)?);
            }
            if h.flags & FLAG_LAST != 0 {
                break;
            }
            if h.flags & FLAG_MORE != 0 {
                // The window is read: ask for the next one.
                let more = Request {
                    op: Opcode::More,
                    ..req
                };
                (h, len) = self.call(qp, more).await?;
            } else {
                (h, len) = self.recv_reply(qp, req.req_id).await?;
            }
        }
        self.observed = Some(h.load_permille);
        self.stats.messaging_searches += 1;
        Ok(())
    }

    /// Reads the root address afresh (after another client may have created the tree).
    pub async fn reload<Q: QueuePair>(&mut self, qp: &Q) -> Result<(), CatfishError> {
        self.refresh_meta(qp).await.map(|_| ())
    }

    /// Entries per node of the open tree.
    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// The open tree's kind.
    pub fn kind(&self) -> TreeKind {
        self.kind
    }

    /// The reclamation epoch of the latest superblock READ ([`super::reclaim`]).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The superblock address.
    pub fn meta(&self) -> GlobalAddr {
        self.meta
    }
}

/// Runs `fut` until it resolves, or until `ns` of *watched* time of `qp`'s clock have passed
/// (`None` then; the unfinished `fut` is dropped, which every fabric's receive allows).
///
/// Watched time ([`crate::lease::Watched`]): the wait runs in pauses of `ns / 16`, and each
/// one counts at most twice its length, however long it took. A pause that overran by far means this thread was not
/// running (descheduled on a loaded machine), and that time says nothing about whether the
/// server is hung: on a 2-core machine at load 25, clients of a live soft memory node
/// reported `NoReply` after 5.3 s of a 2 s deadline. A fabric whose clock only moves while
/// the client waits (the sim) ends every pause on time, so its deadline is `ns` as before.
async fn within<Q: QueuePair, F: core::future::Future>(
    qp: &Q,
    ns: u64,
    fut: F,
) -> Option<F::Output> {
    let mut fut = core::pin::pin!(fut);
    // A fabric without a clock: each pause counts its whole length.
    let mut now = qp.clock_ns().unwrap_or(0);
    let mut w = crate::lease::Watched::new(now, ns);
    while w.note(now) > 0 {
        let pause = w.pause_ns();
        let mut timer = core::pin::pin!(qp.pause(pause));
        let done = core::future::poll_fn(|cx| {
            if let core::task::Poll::Ready(v) = fut.as_mut().poll(cx) {
                return core::task::Poll::Ready(Some(v));
            }
            if timer.as_mut().poll(cx).is_ready() {
                return core::task::Poll::Ready(None);
            }
            core::task::Poll::Pending
        })
        .await;
        if done.is_some() {
            return done;
        }
        now = qp.clock_ns().unwrap_or(now.saturating_add(pause));
    }
    None
}

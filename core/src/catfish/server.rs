//! The Catfish server: fast messaging on the memory node's CPU.
//!
//! Every request (a SEND, or a WRITE_WITH_IMM into the connection's mailbox whose
//! immediate is the mailbox offset / 8) is handled to completion by the node's event loop
//! (the paper's event-based fast messaging: the server sleeps on its completion queue
//! instead of polling ring buffers). Replies go back as SENDs; a search's hits may span
//! several messages, the last flagged [`FLAG_LAST`].
//!
//! - Flow control: at most a window of reply messages is left unread at a client (see
//!   [`CatfishServer::on_message`](Handler::on_message)); the rest waits here until the
//!   client asks with [`Opcode::More`], so a client that stops reading never blocks the
//!   event loop, and the others are served meanwhile.
//! - Per-connection state (queued replies, the connection's block: its request mailbox,
//!   handed out by [`Opcode::Mailbox`] and validated on every
//!   WRITE_WITH_IMM) is released in [`Handler::on_disconnect`]; blocks are reused.
//! - Load: busy time over the node's clock where the fabric reports it
//!   ([`LocalRegion::cpu_clock`]), else an event-loop meter ([`LoadMeter`]). Every reply
//!   carries it; every heartbeat interval it is written to the superblock's heartbeat word
//!   (offloading clients READ it with their first doorbell) and sent to every connection
//!   holding a block, as a heartbeat message (a reply header with request id
//!   [`HEARTBEAT_REQ_ID`]): the paper's heartbeat, "sent to all active clients by the
//!   aforementioned fast messaging design" into the client's `u_serv` (seeds/003 §4.1), so
//!   the client reads it locally. The handler has no timer of its own: a heartbeat that
//!   falls due while the loop is idle goes out with the next message it handles.
use super::CatfishError;
use super::bulk::BulkStats;
use super::shared::SharedTree;
use super::tree::Tree;
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{CpuClock, Handler, LocalRegion, Replies};
use core::sync::atomic::{AtomicU32, Ordering};
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::{
    CLIENT_BLOCK_LEN, ENTRY_LEN, Entry, FANOUT, FLAG_LAST, FLAG_MORE, Heartbeat,
    META_HEARTBEAT_OFFSET, Opcode, REQUEST_LEN, RESPONSE_FLAGS_BYTE, Rect, Request, ResponseHeader,
    Status, TreeKind, encode_entry, hits_per_message, split_init_arg,
};
use remora_layouts::region::{HEADER_LEN, NEXT_CHUNK_OFFSET, REGION_MAGIC};
use std_alloc::collections::{BTreeMap, VecDeque};
use std_alloc::format;
use std_alloc::string::String;
use std_alloc::sync::Arc;
use std_alloc::vec::Vec;

/// Events between two heartbeats where the fabric reports no CPU clock (the paper sends one
/// every 10 ms; without a clock the server counts handled events instead).
pub const HEARTBEAT_EVERY: u64 = 16;
/// The heartbeat interval where the fabric reports the node's CPU clock (the paper's 10 ms).
pub const HEARTBEAT_NS: u64 = 10_000_000;
/// The request id of a heartbeat message (clients never number a request 0).
pub const HEARTBEAT_REQ_ID: u32 = 0;
/// Reply messages the server leaves unread at one client before it waits for the client to
/// ask for more (see [`CatfishServer::with_window`]).
pub const DEFAULT_WINDOW: usize = 8;
/// Largest window: acknowledgements count messages modulo 256, so a window must stay
/// below half of that; 64 is also the default receive depth of every fabric.
pub const MAX_WINDOW: usize = 64;

/// Estimates the server's CPU utilisation.
///
/// - Where the fabric reports the node's CPU clock ([`LocalRegion::cpu_clock`]: the sim),
///   the load is the real busy time over the last heartbeat interval of the node's clock.
/// - Elsewhere, an exponential moving average (weight 1/16) of busy (a message) versus idle
///   (nothing arrived) events of the event loop.
/// - A probe, if given, overrides both (tests and external monitors).
#[derive(Debug)]
pub struct LoadMeter {
    ema: u32,
    probe: Option<Arc<AtomicU32>>,
    /// The clock at the start of the current interval, and the load of the last interval.
    clock: Option<CpuClock>,
    clock_load: Option<u16>,
    interval_ns: u64,
}

impl Default for LoadMeter {
    fn default() -> Self {
        LoadMeter {
            ema: 0,
            probe: None,
            clock: None,
            clock_load: None,
            interval_ns: HEARTBEAT_NS,
        }
    }
}

impl LoadMeter {
    /// Records one event; true when a heartbeat is due.
    fn record(&mut self, region: &dyn LocalRegion, busy: bool, events: u64) -> bool {
        if let Some(now) = region.cpu_clock() {
            let Some(start) = self.clock else {
                self.clock = Some(now);
                return false;
            };
            if now.now_ns.saturating_sub(start.now_ns) < self.interval_ns {
                return false;
            }
            self.clock_load = now.load_permille_since(&start);
            self.clock = Some(now);
            return true;
        }
        let sample = if busy { 1000 * 16 } else { 0 };
        self.ema = self.ema - self.ema / 16 + sample / 16;
        events.is_multiple_of(HEARTBEAT_EVERY)
    }
    /// Utilisation in per-mille.
    pub fn load(&self) -> u16 {
        match (&self.probe, self.clock_load) {
            (Some(p), _) => p.load(Ordering::Relaxed).min(1000) as u16,
            (None, Some(l)) => l,
            (None, None) if self.clock.is_some() => 0,
            (None, None) => (self.ema / 16).min(1000) as u16,
        }
    }
}

/// What the server keeps for one connection; all of it is released in
/// [`Handler::on_disconnect`].
#[derive(Debug, Default)]
struct Conn {
    /// Reply messages sent on this connection, modulo 256 (heartbeats included).
    sent: u8,
    /// The client's count of messages received, from its latest request.
    acked: u8,
    /// Reply messages not sent yet (flow control): `bytes[start..ends[0]]` is the next.
    bytes: Vec<u8>,
    ends: VecDeque<usize>,
    start: usize,
    /// The request whose reply is queued.
    queued_req: u32,
    /// This connection's request mailbox (offset), if it asked for one.
    mailbox: Option<u64>,
}

impl Conn {
    fn queue(&mut self, replies: &Replies) {
        for m in replies.iter() {
            self.bytes.extend_from_slice(m);
            self.ends.push_back(self.bytes.len());
        }
    }

    /// Moves up to `budget` queued messages to `replies`; the last one sent is flagged
    /// [`FLAG_MORE`] if others stay queued.
    fn flush(&mut self, budget: usize, replies: &mut Replies, scratch: &mut Vec<u8>) {
        let n = budget.min(self.ends.len());
        for k in 0..n {
            let Some(end) = self.ends.pop_front() else {
                break;
            };
            let m = &self.bytes[self.start..end];
            if k + 1 == n && !self.ends.is_empty() {
                scratch.clear();
                scratch.extend_from_slice(m);
                scratch[RESPONSE_FLAGS_BYTE] |= FLAG_MORE;
                replies.send(scratch);
            } else {
                replies.send(m);
            }
            self.start = end;
            self.sent = self.sent.wrapping_add(1);
        }
        if self.ends.is_empty() {
            self.bytes.clear();
            self.start = 0;
        }
    }
}

/// The fast-messaging server as a [`Handler`]. One per server thread of a node
/// ([`Handler::fork`]); the threads share the tree ([`SharedTree`]: writers under a lock,
/// searches lock-free as offloading clients read).
pub struct CatfishServer {
    tree: Arc<SharedTree>,
    stack: Vec<(u64, u16)>,
    meter: LoadMeter,
    max_message: usize,
    window: usize,
    events: u64,
    hits: Vec<Entry>,
    msg: Vec<u8>,
    out: Replies,
    handled: u64,
    conns: BTreeMap<usize, Conn>,
    /// A heartbeat is due to the connections (sent with the next message handled).
    heartbeat_due: bool,
    /// Retirements per reclamation epoch of the trees this server formats or recovers.
    reclaim_batch: u64,
    /// CPU an insert costs beyond a search, stated to the fabric (see
    /// [`CatfishServer::with_insert_cpu_ns`]).
    insert_cpu_ns: u64,
}

impl CatfishServer {
    /// A server whose clients' receive buffers take `max_message` bytes.
    pub fn new(max_message: usize) -> CatfishServer {
        CatfishServer {
            tree: Arc::new(SharedTree::default()),
            stack: Vec::new(),
            meter: LoadMeter::default(),
            max_message,
            window: DEFAULT_WINDOW,
            events: 0,
            hits: Vec::new(),
            msg: Vec::with_capacity(max_message),
            out: Replies::new(),
            handled: 0,
            conns: BTreeMap::new(),
            heartbeat_due: false,
            reclaim_batch: super::reclaim::DEFAULT_BATCH,
            insert_cpu_ns: 0,
        }
    }

    /// A server for another thread of this node: the same tree and settings, its own
    /// connections and load meter (each thread reports its own utilisation to the clients it
    /// serves).
    pub fn thread(&self) -> CatfishServer {
        let mut s = CatfishServer::new(self.max_message);
        s.tree = self.tree.clone();
        s.window = self.window;
        s.meter.probe = self.meter.probe.clone();
        s.meter.interval_ns = self.meter.interval_ns;
        s.reclaim_batch = self.reclaim_batch;
        s.insert_cpu_ns = self.insert_cpu_ns;
        s
    }

    /// States `ns` of CPU per insert request beyond what a search costs
    /// ([`LocalRegion::charge_cpu_ns`]: the sim charges it, real fabrics spend it). A
    /// fabric model that charges a request a fixed cost derived from search throughput (the
    /// sim's `server_handler_ns`) would otherwise charge an insert, which descends the tree as
    /// a search does and then rewrites, splits and (R*-tree) reinserts, what a search costs.
    /// The value is measured on the real code (`poller/tests/catfish_server_cost.rs`: mean
    /// insert minus mean search of the server's own code on the tree kind served). Default
    /// 0.
    pub fn with_insert_cpu_ns(mut self, ns: u64) -> CatfishServer {
        self.insert_cpu_ns = ns;
        self
    }

    /// Steps the reclamation epoch of the tree this server formats or recovers after every
    /// `batch` retired nodes (default [`super::reclaim::DEFAULT_BATCH`]; tests use small
    /// ones to reuse nodes often under offloaded readers).
    pub fn with_reclaim_batch(mut self, batch: u64) -> CatfishServer {
        self.reclaim_batch = batch.max(1);
        self
    }

    /// Builds in `region` (no tree there yet) the tree that inserting `objects` (rectangle,
    /// object id) in order through this server makes, without the fabric, and serves it
    /// ([`Tree::bulk_load`]: same code, same arenas, same bytes).
    pub fn bulk_load(
        &mut self,
        region: &dyn LocalRegion,
        fanout: usize,
        kind: TreeKind,
        objects: impl IntoIterator<Item = (Rect, u64)>,
    ) -> Result<BulkStats, CatfishError> {
        let (t, st) = Tree::bulk_load(region, fanout, kind, self.reclaim_batch, objects)?;
        self.tree.lock().tree = Some(t);
        Ok(st)
    }

    /// The served tree's (nodes retired, retired nodes reused, epoch), if there is one.
    pub fn reclaim_stats(&self) -> Option<(u64, u64, u64)> {
        let w = self.tree.lock();
        w.tree
            .as_ref()
            .map(|t| (t.retired(), t.reused(), t.epoch()))
    }

    /// Reports `probe` (per-mille) as the load instead of the server's own measure.
    pub fn with_load_probe(mut self, probe: Arc<AtomicU32>) -> CatfishServer {
        self.meter.probe = Some(probe);
        self
    }

    /// Leaves at most `window` (1 to [`MAX_WINDOW`]) reply messages unread at a client:
    /// it must be at most the clients' receive depth, so that sending a reply never waits.
    pub fn with_window(mut self, window: usize) -> CatfishServer {
        self.window = window.clamp(1, MAX_WINDOW);
        self
    }

    /// Measures the load over `ns` of the node's clock where the fabric has one (the heartbeat
    /// interval, [`HEARTBEAT_NS`] by default).
    pub fn with_heartbeat_interval_ns(mut self, ns: u64) -> CatfishServer {
        self.meter.interval_ns = ns.max(1);
        self
    }

    /// The load the server reports now (per-mille).
    pub fn load_permille(&self) -> u16 {
        self.meter.load()
    }

    /// Connections holding server state (queued replies or a mailbox).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Reply messages queued for all connections, waiting for their clients to ask.
    pub fn queued_replies(&self) -> usize {
        self.conns.values().map(|c| c.ends.len()).sum()
    }

    fn tick(&mut self, region: &dyn LocalRegion, busy: bool) {
        self.events += 1;
        if self.meter.record(region, busy, self.events)
            && let Some(meta) = self.tree.meta()
        {
            let hb = Heartbeat {
                load_permille: self.meter.load(),
                seq: self.tree.next_seq(),
            };
            // A failed store means the superblock is outside the region: nothing to report to.
            let _ = region.store_u64(meta + META_HEARTBEAT_OFFSET, hb.encode());
            self.heartbeat_due = true;
        }
    }

    /// Sends the due heartbeat to every connection holding a block whose client has room
    /// for it (fewer than the window unread: a heartbeat is never worth a receive slot the
    /// replies need, and a newer one replaces it anyway).
    fn send_heartbeats(&mut self, replies: &mut Replies) {
        if !core::mem::take(&mut self.heartbeat_due) {
            return;
        }
        let msg = self.header(Status::Ok, 0, HEARTBEAT_REQ_ID, 0).encode();
        for (&id, c) in self.conns.iter_mut() {
            if c.mailbox.is_some() && usize::from(c.sent.wrapping_sub(c.acked)) < self.window {
                replies.send_to(id, &msg);
                c.sent = c.sent.wrapping_add(1);
            }
        }
    }

    fn header(&self, status: Status, flags: u8, req_id: u32, count: u32) -> ResponseHeader {
        ResponseHeader {
            status,
            flags,
            req_id,
            load_permille: self.meter.load(),
            count,
        }
    }

    fn reply(&mut self, status: Status, req_id: u32) {
        let h = self.header(status, FLAG_LAST, req_id, 0).encode();
        self.out.send(&h);
    }

    /// Serves one request into `self.out`.
    fn serve(&mut self, region: &dyn LocalRegion, conn: &mut Conn, req: &Request) -> Status {
        let arena = || {
            let a = GlobalAddr::from_raw(req.arg0);
            // In a region with an allocator, only memory it has handed out (below its bump
            // pointer): a chunk no client was given yet would later be refused, as
            // overlapping, to the client that gets it.
            let len = match req.op {
                Opcode::Init => split_init_arg(req.arg1).map_or(0, |(len, _, _)| len),
                _ => req.arg1,
            };
            let end = a.offset().saturating_add(len);
            let allocated = region.load_u64(0).ok() != Some(REGION_MAGIC)
                || region.load_u64(NEXT_CHUNK_OFFSET).is_ok_and(|n| end <= n);
            (a.node() == region.node() && !a.is_device() && allocated)
                .then_some((a.offset(), req.arg1))
        };
        if req.op == Opcode::Search {
            // Lock-free, as an offloading client reads (see `super::shared`); stated as a
            // reader's hold so that a fabric modelling the paper's reader-writer lock
            // (seeds/003 §3.2) charges it.
            region.hold_lock(false);
            self.hits.clear();
            let r = self
                .tree
                .search(region, &req.rect, &mut self.hits, &mut self.stack);
            return match r {
                Ok(()) => {
                    self.send_hits(req.req_id);
                    Status::Ok
                }
                Err(CatfishError::NotCreated) => Status::NotInitialized,
                Err(_) => Status::Corrupt,
            };
        }
        let tree = self.tree.clone();
        let mut w = tree.lock();
        region.hold_lock(true);
        let w = &mut *w;
        let result = match (req.op, w.tree.as_mut()) {
            // Formatting over a live tree would strand its clients.
            (Opcode::Init, Some(_)) => return Status::BadRequest,
            (Opcode::Init, None) => match arena() {
                Some((base, arg1)) => match split_init_arg(arg1) {
                    Ok((len, kind, fanout)) => {
                        let fanout = if fanout == 0 { FANOUT } else { fanout };
                        Tree::format_kind(region, base, len, fanout, kind).map(|mut t| {
                            t.set_reclaim_batch(self.reclaim_batch);
                            w.tree = Some(t);
                        })
                    }
                    Err(_) => return Status::BadRequest,
                },
                None => return Status::BadRequest,
            },
            (_, None) => return Status::NotInitialized,
            (Opcode::Grow, Some(t)) => match arena() {
                Some((base, len)) => t.grow(region, base, len),
                None => return Status::BadRequest,
            },
            (Opcode::Insert, Some(t)) => {
                region.charge_cpu_ns(self.insert_cpu_ns);
                t.insert(region, req.rect, req.arg0)
            }
            (Opcode::Delete, Some(t)) => match t.delete(region, req.rect, req.arg0) {
                Ok(found) => {
                    // The reply carries the deleted entry, or nothing if there was none.
                    let h = self.header(Status::Ok, FLAG_LAST, req.req_id, u32::from(found));
                    self.msg.clear();
                    self.msg.extend_from_slice(&h.encode());
                    if found {
                        let mut e = [0u8; ENTRY_LEN];
                        let entry = Entry {
                            rect: req.rect,
                            ptr: req.arg0,
                        };
                        encode_entry(&entry, &mut e);
                        self.msg.extend_from_slice(&e);
                    }
                    self.out.send(&self.msg);
                    return Status::Ok;
                }
                Err(e) => Err(e),
            },
            // Served above, without the lock.
            (Opcode::Search, Some(_)) => return Status::BadRequest,
            (Opcode::Mailbox, Some(t)) => {
                let at = match conn.mailbox {
                    Some(at) => Ok(at),
                    None => match w.free_mailboxes.pop() {
                        Some(at) => Ok(at),
                        None => t.carve_block(CLIENT_BLOCK_LEN as u64),
                    },
                };
                match at {
                    Ok(at) => {
                        conn.mailbox = Some(at);
                        let h = self.header(Status::Ok, FLAG_LAST, req.req_id, 1);
                        let entry = Entry {
                            rect: Rect {
                                min_x: 0,
                                min_y: 0,
                                max_x: 0,
                                max_y: 0,
                            },
                            ptr: GlobalAddr::new(region.node(), at).raw(),
                        };
                        let mut e = [0u8; ENTRY_LEN];
                        encode_entry(&entry, &mut e);
                        self.msg.clear();
                        self.msg.extend_from_slice(&h.encode());
                        self.msg.extend_from_slice(&e);
                        self.out.send(&self.msg);
                        return Status::Ok;
                    }
                    Err(e) => Err(e),
                }
            }
            // Handled by the caller before serving.
            (Opcode::More, Some(_)) => return Status::BadRequest,
        };
        match result {
            Ok(()) => Status::Ok,
            Err(CatfishError::Full) => Status::Full,
            Err(CatfishError::Layout(_)) if matches!(req.op, Opcode::Init | Opcode::Grow) => {
                Status::BadRequest
            }
            Err(CatfishError::Layout(_))
                if matches!(req.op, Opcode::Insert | Opcode::Delete) && !req.rect.is_valid() =>
            {
                Status::BadRequest
            }
            Err(_) => Status::Corrupt,
        }
    }

    fn send_hits(&mut self, req_id: u32) {
        let per = hits_per_message(self.max_message).max(1);
        if self.hits.is_empty() {
            self.reply(Status::Ok, req_id);
            return;
        }
        let n = self.hits.len().div_ceil(per);
        for (k, chunk) in self.hits.chunks(per).enumerate() {
            let flags = if k + 1 == n { FLAG_LAST } else { 0 };
            let h = self.header(Status::Ok, flags, req_id, chunk.len() as u32);
            self.msg.clear();
            self.msg.extend_from_slice(&h.encode());
            let mut e = [0u8; ENTRY_LEN];
            for hit in chunk {
                encode_entry(hit, &mut e);
                self.msg.extend_from_slice(&e);
            }
            self.out.send(&self.msg);
        }
    }

    /// Requests served so far.
    pub fn handled(&self) -> u64 {
        self.handled
    }

    fn refuse(what: &'static str) -> FabricError {
        FabricError::Unsupported { what }
    }
}

impl Handler for CatfishServer {
    /// Flow control: every request carries how many reply messages its client has received
    /// on this connection (modulo 256), so the server knows how many it has sent that are
    /// still unread, and sends at most `window` unread ones. The rest of a long reply stays
    /// queued here; the last message of a window is flagged [`FLAG_MORE`], and the client
    /// asks for the next window with [`Opcode::More`] once it has read this one. A client
    /// that stops reading thus holds at most `window` of its own receive slots, and the event
    /// loop never waits on it. A request other than `More` while a reply is still queued
    /// (pipelining, which the client never does) drops the connection, so a connection's
    /// queue never holds more than one reply.
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        self.tick(region, true);
        self.send_heartbeats(replies);
        let mut state = self
            .conns
            .get_mut(&conn)
            .map(core::mem::take)
            .unwrap_or_default();
        let r = self.handle(region, &mut state, recv, msg, replies);
        // An empty state holds nothing worth keeping.
        if state.mailbox.is_some() || !state.ends.is_empty() || state.sent != 0 {
            self.conns.insert(conn, state);
        } else {
            self.conns.remove(&conn);
        }
        r
    }

    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        self.tick(region, false);
        false
    }

    /// Releases the connection's queued replies and returns its mailbox to the pool. A
    /// request is served whole inside one `on_message`, so a client that died mid-request
    /// left nothing else behind.
    fn on_disconnect(&mut self, _region: &dyn LocalRegion, conn: usize) {
        if let Some(c) = self.conns.remove(&conn)
            && let Some(m) = c.mailbox
        {
            self.tree.lock().free_mailboxes.push(m);
        }
    }

    /// Opens and checks the tree a previous life left in the region (see [`Tree::recover`]).
    fn recover(&mut self, region: &dyn LocalRegion) -> Result<String, FabricError> {
        self.conns.clear();
        let tree = self.tree.clone();
        let mut w = tree.lock();
        w.free_mailboxes.clear();
        Ok(match Tree::recover(region) {
            Ok(None) => {
                w.tree = None;
                String::from("catfish: no tree in the region; waiting for Init")
            }
            Ok(Some((mut t, r))) => {
                t.set_reclaim_batch(self.reclaim_batch);
                let said = format!(
                    "catfish: tree checked: {} entries in {} nodes, height {}, {} underfull \
                     nodes; {} arenas recovered with room for {} more nodes; epoch now {}",
                    r.entries,
                    r.nodes,
                    r.height,
                    r.underfull,
                    t.arenas(),
                    t.free_nodes(),
                    t.epoch()
                );
                w.tree = Some(t);
                said
            }
            Err(e) => {
                // Serving a broken tree would answer wrongly: refuse every request instead.
                w.tree = None;
                format!("catfish: the region's tree is broken ({e}); not serving it")
            }
        })
    }

    fn service(&self) -> &'static str {
        "catfish"
    }

    fn fork(&mut self) -> Option<std_alloc::boxed::Box<dyn Handler + Send>> {
        Some(std_alloc::boxed::Box::new(self.thread()))
    }
}

impl CatfishServer {
    fn handle(
        &mut self,
        region: &dyn LocalRegion,
        conn: &mut Conn,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let mut mailbox = [0u8; REQUEST_LEN];
        let bytes = match recv.kind {
            RecvKind::Send => msg,
            // The request was written into this connection's mailbox; the immediate names it.
            RecvKind::WriteImm => {
                let at = u64::from(recv.imm.unwrap_or(0)) * 8;
                if recv.len as usize != REQUEST_LEN
                    || at < HEADER_LEN as u64
                    || conn.mailbox != Some(at)
                {
                    return Err(Self::refuse(
                        "WRITE_WITH_IMM that is not a request in this connection's mailbox",
                    ));
                }
                region.read(at, &mut mailbox)?;
                &mailbox[..]
            }
        };
        // A request that does not decode has no id to answer: drop the connection.
        let req = Request::decode(bytes).map_err(|_| Self::refuse("malformed Catfish request"))?;
        let unread = usize::from(conn.sent.wrapping_sub(req.acked));
        if unread > self.window {
            return Err(Self::refuse(
                "the client acknowledged replies it was never sent",
            ));
        }
        conn.acked = req.acked;
        let budget = self.window - unread;
        if req.op == Opcode::More {
            if conn.ends.is_empty() || conn.queued_req != req.req_id {
                return Err(Self::refuse("More for a reply that is not queued"));
            }
        } else {
            if !conn.ends.is_empty() {
                return Err(Self::refuse("a request while the previous reply is queued"));
            }
            self.handled += 1;
            self.out.clear();
            let status = self.serve(region, conn, &req);
            if status != Status::Ok
                || !matches!(req.op, Opcode::Search | Opcode::Mailbox | Opcode::Delete)
            {
                self.out.clear();
                self.reply(status, req.req_id);
            }
            conn.queue(&self.out);
            conn.queued_req = req.req_id;
        }
        conn.flush(budget, replies, &mut self.msg);
        Ok(())
    }
}

//! The CANRT client: node-oriented reads (Algorithm 2) and waiting for resizes
//! over a cached copy of the prefix nodes (lock-based appends, Algorithm 1, are in `write.rs`;
//! range scans in `scan.rs`).
use super::node::CanrtNode;
use super::view::{Found, NodeView, TreeView};
use super::{CanrtConfig, CanrtError, WriteAck};
use crate::fabric::{Endpoint, Op, QueuePair, Work};
use crate::index::KvIndex;
use crate::lease::{Verdict, Waiter};
use core::cell::{Cell, RefCell};
use remora_layouts::canrt::{
    Control, ControlKind, DataGeometry, FRONT_OFF, ItemOp, Meta, ROOT_SLOT, SKIP_DRAIN,
    TREE_HEADER_LEN, TreeHeader,
};
use remora_layouts::region::{NEXT_CHUNK_OFFSET, root_offset};
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::sync::Arc;
use std_alloc::vec::Vec;

pub(super) use remora_layouts::canrt::MAX_ITEM;
/// Data nodes a scan READs per doorbell.
pub const SCAN_BATCH: usize = 4;

/// What a handle has done beyond plain verbs (the fabric counters have those).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    /// Data-node READs retried because the meta word changed while the node was read, or a
    /// live item failed its checksum.
    pub torn_retries: u64,
    /// Re-reads while a lock ticket waited to be served.
    pub lock_waits: u64,
    /// Prefix-array reloads after a resize.
    pub refreshes: u64,
    /// Full data nodes reported to the server.
    pub resize_requests: u64,
    /// Our lock tickets the server skipped before we took our turn (we took new ones).
    pub skipped: u64,
    /// `Skip` requests sent (a served ticket, or a resize drain, stuck for a lease).
    pub skip_requests: u64,
    /// `Wait` requests sent (a lock ticket not yet served: the server sends a turn notice).
    pub turn_waits: u64,
    /// Posted appends ([`super::WriteAck::Posted`]) that waited for a credit: their writer
    /// had a window of appends the server had not yet consumed (flow control, `credit.rs`).
    pub credit_waits: u64,
    /// Nanoseconds (fabric clock) those appends waited for their credit, summed.
    pub credit_wait_ns: u64,
}

/// Largest data node a lookup reads into its own frame instead of a pooled buffer.
pub(super) const FRAME_NODE: usize = 1024;

/// Largest prefix array a view load reads into its own frame (then copies into the view)
/// instead of a heap buffer.
const FRAME_PREFIX: usize = 8192;

/// Data-node buffers, one per coroutine in flight, reused (no zeroing or allocation per
/// operation once warm).
pub(super) struct BufPool(RefCell<Vec<Vec<u8>>>);

/// A buffer taken from the pool; goes back when dropped.
pub(super) struct Buf<'p> {
    pool: &'p BufPool,
    pub(super) buf: NodeBuf,
}

/// A data node's bytes: inline (in the coroutine's frame, wherever the `Buf` is kept across
/// an `.await`: registered memory under verbs, so the NIC writes it in place) for nodes up to
/// [`FRAME_NODE`] bytes, else a pooled heap buffer.
pub(super) struct NodeBuf {
    frame: [u8; FRAME_NODE],
    len: usize,
    heap: Option<Vec<u8>>,
}

impl core::ops::Deref for NodeBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.heap {
            Some(h) => h,
            None => &self.frame[..self.len],
        }
    }
}

impl core::ops::DerefMut for NodeBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.heap {
            Some(h) => h,
            None => &mut self.frame[..self.len],
        }
    }
}

impl BufPool {
    pub(super) fn take(&self, size: usize) -> Buf<'_> {
        let heap = (size > FRAME_NODE).then(|| {
            let mut buf = self.0.borrow_mut().pop().unwrap_or_default();
            if buf.len() != size {
                buf.resize(size, 0);
            }
            buf
        });
        Buf {
            pool: self,
            buf: NodeBuf {
                frame: [0u8; FRAME_NODE],
                len: size.min(FRAME_NODE),
                heap,
            },
        }
    }
}

impl Drop for Buf<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.buf.heap.take() {
            self.pool.0.borrow_mut().push(h);
        }
    }
}

/// One compute thread's handle on a CANRT tree.
pub struct Canrt<'e, E: Endpoint> {
    pub(super) ep: &'e E,
    pub(super) cfg: CanrtConfig,
    /// This handle's view of the tree (the node's, or newer while not yet shared).
    pub(super) view: RefCell<Arc<TreeView>>,
    /// The compute node's shared prefix cache, and this handle's reader shard of it.
    pub(super) node: Arc<CanrtNode>,
    pub(super) shard: usize,
    pub(super) bufs: BufPool,
    /// Scan buffers reused from scan to scan (see `scan.rs`).
    pub(super) scan_bufs: super::scan::ScanPool,
    pub(super) torn: Cell<u64>,
    pub(super) waits: Cell<u64>,
    pub(super) refreshes: Cell<u64>,
    pub(super) resizes: Cell<u64>,
    pub(super) skips: Cell<u64>,
    pub(super) skip_requests: Cell<u64>,
    pub(super) turn_waits: Cell<u64>,
    /// Appends that waited for a credit, and the fabric nanoseconds they waited.
    pub(super) credit_waits: Cell<u64>,
    pub(super) credit_wait_ns: Cell<u64>,
    /// Scans resumed in a newer tree after meeting a stale node.
    pub(super) scan_resumes: Cell<u64>,
    /// Resize waits begun (names each in its drain `Skip`s).
    pub(super) drain_waits: Cell<u64>,
    /// Bytes in the memory node's region (to bound speculative READs).
    pub(super) region_len: u64,
    /// Smoothed time one lock ticket takes to be served (ns; 0 until measured): waiters
    /// pause about this long per ticket ahead of theirs.
    pub(super) ticket_ns: Cell<u64>,
    /// Lock waiters of this handle's coroutines and the turn notices the server sent them.
    pub(super) mailbox: super::turn::Mailbox,
    /// Test-only mutant: trust the node READ's own copy of the meta word as the "before"
    /// read, as a reader may if the READ observes memory in ascending address order (the
    /// meta word first); no READ of the meta word alone precedes the node.
    #[cfg(test)]
    pub(super) ascending_check: Cell<bool>,
}

/// The meta word READ alone just before and just after a data node (bytes 0..8 and 8..16).
pub(super) type Bracket = [u8; 16];

/// Reads the published tree: root slot, header, prefix array. The server may be rewriting
/// an area a slow client still reads (a view two resizes old), and one READ's segments
/// observe memory in any order, so a torn header or prefix array is caught by its checksum
/// ([`TreeHeader::decode`], [`TreeView::new`]) and read again. An intact old tree is a
/// valid (stale) view: data nodes' epochs send its holder to the newer one.
async fn load_view<Q: QueuePair>(qp: &Q, tries: u32) -> Result<TreeView, CanrtError> {
    let slot = GlobalAddr::new(qp.peer(), root_offset(ROOT_SLOT));
    let mut last = CanrtError::NoTree { slot: ROOT_SLOT };
    for _ in 0..tries.max(1) {
        let root = read_word(qp, slot).await?;
        let at = GlobalAddr::from_raw(root);
        let corrupt = |why| CanrtError::Corrupt { addr: at, why };
        if root == 0 {
            return Err(CanrtError::NoTree { slot: ROOT_SLOT });
        }
        if at.node() != qp.peer() || at.is_device() {
            return Err(corrupt(LayoutError::OutOfRange {
                field: "root slot",
                value: root,
            }));
        }
        let mut hb = [0u8; TREE_HEADER_LEN];
        qp.read(at, &mut hb).await?;
        let h = match TreeHeader::decode(&hb) {
            Ok(h) if h.area_off == at.offset() => h,
            Ok(_) => {
                last = corrupt(LayoutError::Inconsistent {
                    what: "tree header names another area",
                });
                continue;
            }
            Err(why) => {
                last = corrupt(why);
                continue;
            }
        };
        let len = h.prefix_len as usize;
        let mut frame = [0u8; FRAME_PREFIX];
        let mut heap = Vec::new();
        let buf: &mut [u8] = if len <= FRAME_PREFIX {
            &mut frame[..len]
        } else {
            heap.resize(len, 0);
            &mut heap
        };
        qp.read(GlobalAddr::new(at.node(), h.prefix_off), buf)
            .await?;
        let prefix = if len <= FRAME_PREFIX {
            frame[..len].to_vec()
        } else {
            heap
        };
        match TreeView::new(h, root, prefix) {
            Ok(v) => return Ok(v),
            Err(why) => last = corrupt(why),
        }
    }
    Err(last)
}

/// What a data node's meta word says about the view it was found with.
pub(super) enum Fresh {
    /// The node is the view's (frozen or not): its contents are the valid tree's.
    Yes,
    /// A newer tree is published (and now cached): start over with it.
    NewView,
    /// The node has a newer epoch but no newer tree is published yet (a resize is about to
    /// publish it): look again.
    NotYet,
}

pub(super) enum Wrote {
    Done(bool),
    /// The tree was replaced or is being resized: start over on the new one.
    Again,
}

impl<'e, E: Endpoint> Canrt<'e, E> {
    /// Opens the tree on `cfg.node`; if none is published yet, asks the server to format one
    /// with `cfg.slots` and `cfg.value_cap` and waits for it. The handle shares `node` (the
    /// prefix cache) with the other handles of its compute node.
    pub async fn open_on(
        ep: &'e E,
        cfg: CanrtConfig,
        node: Arc<CanrtNode>,
    ) -> Result<Canrt<'e, E>, CanrtError> {
        let geometry = cfg.validate()?;
        let qp = ep.qp(cfg.node)?;
        let slot = GlobalAddr::new(cfg.node, root_offset(ROOT_SLOT));
        let mut root = read_word(qp, slot).await?;
        if root == 0 {
            room_for_tree(qp, geometry).await?;
            qp.send(&Control::format(geometry).encode()).await?;
            let mut w = Waiter::new(cfg.lease, ep.now_ns());
            let mut polls = 0;
            while root == 0 {
                polls += 1;
                match w.observe(1, ep.now_ns()) {
                    _ if polls > cfg.resize_polls => {
                        return Err(CanrtError::NoTree { slot: ROOT_SLOT });
                    }
                    Verdict::GiveUp { .. } => return Err(CanrtError::NoTree { slot: ROOT_SLOT }),
                    Verdict::Wait(ns) => ep.pause(ns).await,
                    Verdict::Expired { .. } => {}
                }
                root = match read_word(qp, slot).await {
                    Ok(r) => r,
                    // The server dropped us: say why if it is the usual reason.
                    Err(e) => {
                        room_for_tree(qp, geometry).await?;
                        return Err(e);
                    }
                };
            }
        }
        let view = load_view(qp, cfg.read_retries).await?;
        let region_len = read_word(qp, GlobalAddr::new(cfg.node, 16)).await?;
        let shard = node.shard();
        let t = Canrt {
            ep,
            cfg,
            view: RefCell::new(node.share(shard, Arc::new(view))),
            node,
            shard,
            bufs: BufPool(RefCell::new(Vec::new())),
            scan_bufs: Default::default(),
            torn: Cell::new(0),
            waits: Cell::new(0),
            refreshes: Cell::new(0),
            resizes: Cell::new(0),
            skips: Cell::new(0),
            skip_requests: Cell::new(0),
            turn_waits: Cell::new(0),
            credit_waits: Cell::new(0),
            credit_wait_ns: Cell::new(0),
            scan_resumes: Cell::new(0),
            ticket_ns: Cell::new(0),
            drain_waits: Cell::new(0),
            mailbox: Default::default(),
            region_len,
            #[cfg(test)]
            ascending_check: Cell::new(false),
        };
        if cfg.ack == WriteAck::Posted {
            // Our writes do not wait for the server's acknowledgement: spare it the SENDs,
            // but have it count our appends (flow control, `credit.rs`). (An `Applied`
            // handle on this connection then hears none either and reads the meta word
            // instead: slower, still correct.)
            t.ask_credit().await?;
        }
        Ok(t)
    }

    /// A snapshot of this handle's counters.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            torn_retries: self.torn.get(),
            lock_waits: self.waits.get(),
            refreshes: self.refreshes.get(),
            resize_requests: self.resizes.get(),
            skipped: self.skips.get(),
            skip_requests: self.skip_requests.get(),
            turn_waits: self.turn_waits.get(),
            credit_waits: self.credit_waits.get(),
            credit_wait_ns: self.credit_wait_ns.get(),
        }
    }

    /// Key bytes of the tree (8 or 16), fixed when it was formatted.
    pub fn key_len(&self) -> u32 {
        self.view.borrow().header.key_len
    }

    /// The key `bytes` name, if they have the tree's key width.
    fn key_of(&self, bytes: &[u8]) -> Result<u128, CanrtError> {
        super::keys::key_of(&self.view.borrow().data(), bytes)
    }

    /// The cached tree.
    pub fn view(&self) -> Arc<TreeView> {
        self.view.borrow().clone()
    }

    pub(super) fn qp(&self) -> Result<&'e E::Qp, CanrtError> {
        Ok(self.ep.qp(self.cfg.node)?)
    }

    pub(super) fn node_addr(&self, v: &TreeView, id: u32) -> GlobalAddr {
        GlobalAddr::new(self.cfg.node, v.header.data_node_off(id))
    }

    pub(super) fn bump(c: &Cell<u64>) {
        c.set(c.get() + 1);
    }

    /// Pushes the READs of one data-node snapshot: the meta word alone, the whole node, the
    /// meta word alone again. On one queue pair each takes effect after the one before it
    /// completed, so the two lone words bracket the node READ however its segments landed.
    pub(super) fn push_snapshot<'a, const N: usize>(
        &self,
        ops: &mut heapless::Vec<Op<'a>, N>,
        addr: GlobalAddr,
        bracket: &'a mut Bracket,
        node: &'a mut [u8],
    ) -> Result<(), CanrtError> {
        let (before, after) = bracket.split_at_mut(8);
        #[cfg(test)]
        let lone_before = !self.ascending_check.get();
        #[cfg(not(test))]
        let lone_before = true;
        let full = |_| CanrtError::Retries {
            what: "doorbell has no room for a node snapshot",
        };
        if lone_before {
            ops.push(Op::Read {
                remote: addr.add(FRONT_OFF),
                local: before,
            })
            .map_err(full)?;
        }
        ops.push(Op::Read {
            remote: addr,
            local: node,
        })
        .map_err(full)?;
        ops.push(Op::Read {
            remote: addr.add(FRONT_OFF),
            local: after,
        })
        .map_err(full)
    }

    /// One data-node snapshot in one doorbell (see [`Self::push_snapshot`]).
    pub(super) async fn read_snapshot(
        &self,
        addr: GlobalAddr,
        bracket: &mut Bracket,
        node: &mut [u8],
    ) -> Result<(), CanrtError> {
        let mut ops: heapless::Vec<Op<'_>, 3> = heapless::Vec::new();
        self.push_snapshot(&mut ops, addr, bracket, node)?;
        self.qp()?.post(&mut ops).await?;
        Ok(())
    }

    /// The node of a snapshot, or None if it changed while it was read (read it again).
    pub(super) fn snapshot<'b>(
        &self,
        g: DataGeometry,
        bracket: &Bracket,
        node: &'b [u8],
    ) -> Result<Option<NodeView<'b>>, LayoutError> {
        let nv = NodeView::parse(g, node)?;
        // Whoever takes a snapshot scans its applied items, checksumming each (`find`,
        // `for_each_live`).
        for _ in nv.live_slots() {
            self.ep.charge(Work::Scan(1));
            self.ep.charge(Work::Crc32c(g.item_size() as usize));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bracket[i..i + 8]);
            u64::from_le_bytes(w)
        };
        #[cfg(test)]
        if self.ascending_check.get() {
            return Ok((nv.front.0 == word(8)).then_some(nv));
        }
        Ok(nv.stable(word(0), word(8)).then_some(nv))
    }

    /// Re-reads the root slot and the published header's epoch; reloads the prefix array if
    /// a newer tree is published. True if the cached view changed.
    pub(super) async fn refresh(&self) -> Result<bool, CanrtError> {
        let qp = self.qp()?;
        let cur = self.view();
        // The root slot and our area's epoch word in one doorbell (areas alternate: the
        // same root word may name a newer tree).
        let (mut rb, mut eb) = ([0u8; 8], [0u8; 8]);
        qp.post(&mut [
            Op::Read {
                remote: GlobalAddr::new(self.cfg.node, root_offset(ROOT_SLOT)),
                local: &mut rb,
            },
            Op::Read {
                remote: GlobalAddr::from_raw(cur.root).add(8),
                local: &mut eb,
            },
        ])
        .await?;
        let root = u64::from_le_bytes(rb);
        if root == cur.root && u64::from_le_bytes(eb) as u32 == cur.header.epoch {
            return Ok(false);
        }
        // Another thread of the node may have loaded the newer tree already.
        if let Some(v) = self.node.newer(self.shard, cur.header.epoch)
            && v.root == root
        {
            let mut slot = self.view.borrow_mut();
            if slot.header.epoch < v.header.epoch {
                *slot = v;
                return Ok(true);
            }
            return Ok(slot.header.epoch != cur.header.epoch);
        }
        let guess = (2 * cur.header.prefix_len).max(1024);
        let v = match self.load_view_at(root, guess).await? {
            Some(v) => v,
            None => load_view(qp, self.cfg.read_retries).await?,
        };
        Self::bump(&self.refreshes);
        let mut slot = self.view.borrow_mut();
        if slot.header.epoch < v.header.epoch {
            *slot = self.node.share(self.shard, Arc::new(v));
            return Ok(true);
        }
        Ok(slot.header.epoch != cur.header.epoch)
    }

    /// The tree whose area `root` names, header and (if its prefix array is at most `guess`
    /// bytes) prefix array in one doorbell. None if that did not work out (a prefix array
    /// larger than the guess, a torn or moved header): the caller reads it the long way.
    async fn load_view_at(&self, root: u64, guess: u64) -> Result<Option<TreeView>, CanrtError> {
        let at = GlobalAddr::from_raw(root);
        let end = at
            .offset()
            .saturating_add(TREE_HEADER_LEN as u64)
            .saturating_add(guess);
        if root == 0 || at.node() != self.cfg.node || at.is_device() || end > self.region_len {
            return Ok(None);
        }
        let mut hb = [0u8; TREE_HEADER_LEN];
        let guess = guess as usize;
        let mut frame = [0u8; FRAME_PREFIX];
        let mut heap = Vec::new();
        let buf: &mut [u8] = if guess <= FRAME_PREFIX {
            &mut frame[..guess]
        } else {
            heap.resize(guess, 0);
            &mut heap
        };
        self.qp()?
            .post(&mut [
                Op::Read {
                    remote: at,
                    local: &mut hb,
                },
                Op::Read {
                    remote: at.add(TREE_HEADER_LEN as u64),
                    local: buf,
                },
            ])
            .await?;
        let Ok(h) = TreeHeader::decode(&hb) else {
            return Ok(None);
        };
        if h.area_off != at.offset()
            || h.prefix_off != at.offset() + TREE_HEADER_LEN as u64
            || h.prefix_len > guess as u64
        {
            return Ok(None);
        }
        let len = h.prefix_len as usize;
        let prefix = if guess <= FRAME_PREFIX {
            frame[..len].to_vec()
        } else {
            heap.truncate(len);
            heap
        };
        Ok(TreeView::new(h, root, prefix).ok())
    }

    /// One back-off while a resize of `v`'s tree drains; each lease without a new tree asks
    /// the server to skip tickets that did not move (dead holders would stop the drain).
    ///
    /// The server compares a drain `Skip` only with the previous one of the same wait (`wait`
    /// names it, `leases` counts its leases), so two reports are always a lease apart.
    pub(super) async fn resize_wait(
        &self,
        w: &mut Waiter,
        v: &TreeView,
        wait: u64,
        leases: &mut u32,
    ) -> Result<(), CanrtError> {
        match w.observe(1 << 63 | v.header.epoch as u64, self.ep.now_ns()) {
            Verdict::Wait(ns) => {
                Self::bump(&self.waits);
                self.ep.pause(ns).await;
                Ok(())
            }
            Verdict::Expired { .. } => {
                Self::bump(&self.skip_requests);
                *leases += 1;
                self.control(ControlKind::Skip, v, *leases, SKIP_DRAIN, wait)
                    .await
            }
            Verdict::GiveUp { .. } => Err(CanrtError::Retries {
                what: "waiting for a resize",
            }),
        }
    }

    /// Waits until the data node at `addr` (found with view `v`) may take writes again: it
    /// thaws (the end of a resize that published `v`'s tree itself), or a newer tree is
    /// published (a resize of `v`'s tree finished).
    pub(super) async fn await_thaw(
        &self,
        v: &TreeView,
        addr: GlobalAddr,
    ) -> Result<(), CanrtError> {
        let qp = self.qp()?;
        // Leases of time watched (`crate::lease`, "Stalls"): a client stopped while it waits
        // does not ask for live holders' tickets to be skipped.
        let mut w = Waiter::new(self.cfg.lease, self.ep.now_ns()).watching();
        let wait = self.drain_waits.get();
        self.drain_waits.set(wait.wrapping_add(1));
        let mut leases = 0;
        for i in 0..self.cfg.resize_polls {
            if i > 0 {
                self.resize_wait(&mut w, v, wait, &mut leases).await?;
            }
            let m = Meta(read_word(qp, addr.add(FRONT_OFF)).await?);
            if !m.frozen() && m.epoch() == v.epoch_tag() {
                return Ok(());
            }
            if (m.epoch() != v.epoch_tag() || i % 8 == 7) && self.refresh().await? {
                return Ok(());
            }
            if self.view().header.epoch != v.header.epoch {
                return Ok(());
            }
        }
        Err(CanrtError::Retries {
            what: "waiting for a resize",
        })
    }

    /// Whether node contents found with view `v` belong to the valid tree.
    pub(super) async fn fresh(&self, v: &TreeView, nv: &NodeView<'_>) -> Result<Fresh, CanrtError> {
        if !nv.front.frozen() && nv.front.epoch() == v.epoch_tag() {
            return Ok(Fresh::Yes);
        }
        self.refresh().await?;
        if self.view().header.epoch != v.header.epoch {
            return Ok(Fresh::NewView);
        }
        if nv.front.epoch() != v.epoch_tag() {
            return Ok(Fresh::NotYet);
        }
        Ok(Fresh::Yes)
    }

    /// Algorithm 2: one READ of the whole data node (bracketed by two 8-byte READs of its
    /// meta word in the same doorbell: still one round trip).
    async fn lookup(&self, key: u128, out: &mut [u8]) -> Result<Option<usize>, CanrtError> {
        let mut last = None;
        for _ in 0..self.cfg.read_retries {
            let v = self.view();
            self.ep.charge(Work::Probe(1));
            let id = v.locate(key).map_err(|why| CanrtError::Corrupt {
                addr: GlobalAddr::from_raw(v.root),
                why,
            })?;
            let addr = self.node_addr(&v, id);
            // Data nodes up to FRAME_NODE bytes are read into the coroutine's own frame
            // (registered memory under verbs: the NIC writes it in place); larger ones into
            // a pooled heap buffer.
            let size = v.header.data_node_size as usize;
            let mut frame = [0u8; FRAME_NODE];
            let mut pooled;
            let buf: &mut [u8] = if size <= FRAME_NODE {
                &mut frame[..size]
            } else {
                pooled = self.bufs.take(size);
                &mut pooled.buf
            };
            let mut bracket = Bracket::default();
            self.read_snapshot(addr, &mut bracket, buf).await?;
            let nv = match self.snapshot(v.data(), &bracket, buf) {
                Ok(Some(nv)) => nv,
                Ok(None) => {
                    Self::bump(&self.torn);
                    continue;
                }
                Err(why) => {
                    last = Some(CanrtError::Corrupt { addr, why });
                    Self::bump(&self.torn);
                    continue;
                }
            };
            if !matches!(self.fresh(&v, &nv).await?, Fresh::Yes) {
                continue;
            }
            match nv.find(key) {
                Ok(Found::Present(val)) => {
                    let got = out.len();
                    let dst = out.get_mut(..val.len()).ok_or(CanrtError::BufferTooSmall {
                        need: val.len(),
                        got,
                    })?;
                    dst.copy_from_slice(val);
                    return Ok(Some(val.len()));
                }
                Ok(Found::Absent) => return Ok(None),
                Err(why) => {
                    last = Some(CanrtError::Corrupt { addr, why });
                    Self::bump(&self.torn);
                }
            }
        }
        Err(last.unwrap_or(CanrtError::Retries {
            what: "data node read",
        }))
    }
}

/// Bytes the server allocates for a new tree of geometry `g` (its first data array and one
/// header area; see `resize.rs`), or less.
const FIRST_TREE_NODES: u64 = 16;

/// [`CanrtError::NodeFull`] if the region's allocator (its header, READ) has no room left for
/// the first data array of a tree of geometry `g`.
async fn room_for_tree<Q: QueuePair>(qp: &Q, g: DataGeometry) -> Result<(), CanrtError> {
    let node = qp.peer();
    let mut hdr = [0u8; 40];
    qp.read(GlobalAddr::new(node, 0), &mut hdr).await?;
    let word = |o: usize| u64::from_le_bytes(hdr[o..o + 8].try_into().unwrap_or([0; 8]));
    let (len, chunk, used) = (word(16), word(24), word(NEXT_CHUNK_OFFSET as usize));
    let need = (FIRST_TREE_NODES * g.node_size()).next_multiple_of(chunk.max(1));
    if used.saturating_add(need) > len {
        return Err(CanrtError::NodeFull { node, used, len });
    }
    Ok(())
}

impl<E: Endpoint> Canrt<'_, E> {
    /// [`CanrtError::NodeFull`] if the region's allocator has no room left for what growing
    /// tree `v` takes next: a chunk (a new header area), or a data array twice as large
    /// when its data array is full.
    pub(super) async fn room_to_grow(&self, v: &TreeView) -> Result<(), CanrtError> {
        let qp = self.qp()?;
        let node = qp.peer();
        let mut hdr = [0u8; 40];
        qp.read(GlobalAddr::new(node, 0), &mut hdr).await?;
        let word = |o: usize| u64::from_le_bytes(hdr[o..o + 8].try_into().unwrap_or([0; 8]));
        let (len, chunk, used) = (word(16), word(24), word(NEXT_CHUNK_OFFSET as usize));
        let h = &v.header;
        let need = if h.n_data as u64 >= h.data_cap {
            (2 * h.data_cap).saturating_mul(h.data_node_size)
        } else {
            h.prefix_len + TREE_HEADER_LEN as u64
        };
        if used.saturating_add(need.next_multiple_of(chunk.max(1))) > len {
            return Err(CanrtError::NodeFull { node, used, len });
        }
        Ok(())
    }
}

pub(super) async fn read_word<Q: QueuePair>(qp: &Q, at: GlobalAddr) -> Result<u64, CanrtError> {
    let mut b = [0u8; 8];
    qp.read(at, &mut b).await?;
    Ok(u64::from_le_bytes(b))
}

impl<E: Endpoint> KvIndex for Canrt<'_, E> {
    type Error = CanrtError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), CanrtError> {
        self.write(ItemOp::Insert, self.key_of(key)?, value).await?;
        Ok(())
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, CanrtError> {
        self.write(ItemOp::Update, self.key_of(key)?, value).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, CanrtError> {
        self.lookup(self.key_of(key)?, out).await
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, CanrtError> {
        self.write(ItemOp::Delete, self.key_of(key)?, &[]).await
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, CanrtError> {
        self.range(self.key_of(from)?, limit, visit).await
    }
}

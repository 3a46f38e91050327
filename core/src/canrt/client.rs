//! The CANRT client: node-oriented reads (Algorithm 2) and lock-based appends (Algorithm 1)
//! over a cached copy of the prefix nodes.
use super::view::{Found, NodeView, TreeView};
use super::{CanrtConfig, CanrtError};
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::index::KvIndex;
use core::cell::{Cell, RefCell};
use remora_layouts::canrt::{
    Control, ControlKind, DataGeometry, FRONT_OFF, Imm, ItemOp, LOCK_OFF, MAX_VALUE, Meta,
    ROOT_SLOT, TICKET_MASK, TREE_HEADER_LEN, TreeHeader,
};
use remora_layouts::region::root_offset;
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::rc::Rc;
use std_alloc::vec;
use std_alloc::vec::Vec;

const MAX_ITEM: usize = 16 + MAX_VALUE;
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
}

/// Data-node buffers, one per coroutine in flight, reused (no zeroing or allocation per
/// operation once warm).
struct BufPool(RefCell<Vec<Vec<u8>>>);

/// A buffer taken from the pool; goes back when dropped.
struct Buf<'p> {
    pool: &'p BufPool,
    buf: Vec<u8>,
}

impl BufPool {
    fn take(&self, size: usize) -> Buf<'_> {
        let mut buf = self.0.borrow_mut().pop().unwrap_or_default();
        if buf.len() != size {
            buf.resize(size, 0);
        }
        Buf { pool: self, buf }
    }
}

impl Drop for Buf<'_> {
    fn drop(&mut self) {
        self.pool
            .0
            .borrow_mut()
            .push(core::mem::take(&mut self.buf));
    }
}

/// One compute thread's handle on a CANRT tree.
pub struct Canrt<'e, E: Endpoint> {
    ep: &'e E,
    cfg: CanrtConfig,
    view: RefCell<Rc<TreeView>>,
    bufs: BufPool,
    torn: Cell<u64>,
    waits: Cell<u64>,
    refreshes: Cell<u64>,
    resizes: Cell<u64>,
    /// Test-only mutant: trust the node READ's own copy of the meta word as the "before"
    /// read, as a reader may if the READ observes memory in ascending address order (the
    /// meta word first); no READ of the meta word alone precedes the node.
    #[cfg(test)]
    pub(super) ascending_check: Cell<bool>,
}

/// The meta word READ alone just before and just after a data node (bytes 0..8 and 8..16).
type Bracket = [u8; 16];

fn key_of(key: &[u8]) -> Result<u64, CanrtError> {
    let b: [u8; 8] = key
        .try_into()
        .map_err(|_| CanrtError::BadKey { len: key.len() })?;
    Ok(u64::from_be_bytes(b))
}

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
        let mut prefix = vec![0u8; h.prefix_len as usize];
        qp.read(GlobalAddr::new(at.node(), h.prefix_off), &mut prefix)
            .await?;
        match TreeView::new(h, root, prefix) {
            Ok(v) => return Ok(v),
            Err(why) => last = corrupt(why),
        }
    }
    Err(last)
}

/// What a data node's meta word says about the view it was found with.
enum Fresh {
    /// The node is the view's (frozen or not): its contents are the valid tree's.
    Yes,
    /// A newer tree is published (and now cached): start over with it.
    NewView,
    /// The node has a newer epoch but no newer tree is published yet (a resize is about to
    /// publish it): look again.
    NotYet,
}

enum Wrote {
    Done(bool),
    /// The tree was replaced or is being resized: start over on the new one.
    Again,
}

impl<'e, E: Endpoint> Canrt<'e, E> {
    /// Opens the tree on `cfg.node`; if none is published yet, asks the server to format one
    /// with `cfg.slots` and `cfg.value_cap` and waits for it.
    pub async fn open(ep: &'e E, cfg: CanrtConfig) -> Result<Canrt<'e, E>, CanrtError> {
        let geometry = cfg.validate()?;
        let qp = ep.qp(cfg.node)?;
        let slot = GlobalAddr::new(cfg.node, root_offset(ROOT_SLOT));
        let mut root = read_word(qp, slot).await?;
        if root == 0 {
            qp.send(&Control::format(geometry).encode()).await?;
            let mut polls = 0;
            while root == 0 {
                polls += 1;
                if polls > cfg.resize_polls {
                    return Err(CanrtError::NoTree { slot: ROOT_SLOT });
                }
                root = read_word(qp, slot).await?;
            }
        }
        let view = load_view(qp, cfg.read_retries).await?;
        Ok(Canrt {
            ep,
            cfg,
            view: RefCell::new(Rc::new(view)),
            bufs: BufPool(RefCell::new(Vec::new())),
            torn: Cell::new(0),
            waits: Cell::new(0),
            refreshes: Cell::new(0),
            resizes: Cell::new(0),
            #[cfg(test)]
            ascending_check: Cell::new(false),
        })
    }

    pub fn stats(&self) -> ClientStats {
        ClientStats {
            torn_retries: self.torn.get(),
            lock_waits: self.waits.get(),
            refreshes: self.refreshes.get(),
            resize_requests: self.resizes.get(),
        }
    }

    /// The cached tree.
    pub fn view(&self) -> Rc<TreeView> {
        self.view.borrow().clone()
    }

    fn qp(&self) -> Result<&'e E::Qp, CanrtError> {
        Ok(self.ep.qp(self.cfg.node)?)
    }

    fn node_addr(&self, v: &TreeView, id: u32) -> GlobalAddr {
        GlobalAddr::new(self.cfg.node, v.header.data_node_off(id))
    }

    fn bump(c: &Cell<u64>) {
        c.set(c.get() + 1);
    }

    /// Pushes the READs of one data-node snapshot: the meta word alone, the whole node, the
    /// meta word alone again. On one queue pair each takes effect after the one before it
    /// completed, so the two lone words bracket the node READ however its segments landed.
    fn push_snapshot<'a, const N: usize>(
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
    async fn read_snapshot(
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
    fn snapshot<'b>(
        &self,
        g: DataGeometry,
        bracket: &Bracket,
        node: &'b [u8],
    ) -> Result<Option<NodeView<'b>>, LayoutError> {
        let nv = NodeView::parse(g, node)?;
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
    async fn refresh(&self) -> Result<bool, CanrtError> {
        let qp = self.qp()?;
        let cur = self.view();
        let root = read_word(qp, GlobalAddr::new(self.cfg.node, root_offset(ROOT_SLOT))).await?;
        if root == cur.root {
            // Areas alternate: the same root word may name a newer tree.
            let at = GlobalAddr::from_raw(root).add(8);
            if read_word(qp, at).await? as u32 == cur.header.epoch {
                return Ok(false);
            }
        }
        let v = load_view(qp, self.cfg.read_retries).await?;
        Self::bump(&self.refreshes);
        let mut slot = self.view.borrow_mut();
        if slot.header.epoch < v.header.epoch {
            *slot = Rc::new(v);
            return Ok(true);
        }
        Ok(slot.header.epoch != cur.header.epoch)
    }

    /// Waits until a tree newer than `old` is published (a resize finished).
    async fn await_new_tree(&self, old: &TreeView) -> Result<(), CanrtError> {
        for _ in 0..self.cfg.resize_polls {
            self.refresh().await?;
            if self.view().header.epoch != old.header.epoch {
                return Ok(());
            }
        }
        Err(CanrtError::Retries {
            what: "waiting for a resize",
        })
    }

    /// Waits until the data node at `addr` (found with view `v`) may take writes again: it
    /// thaws (the end of a resize that published `v`'s tree itself), or a newer tree is
    /// published (a resize of `v`'s tree finished).
    async fn await_thaw(&self, v: &TreeView, addr: GlobalAddr) -> Result<(), CanrtError> {
        let qp = self.qp()?;
        for i in 0..self.cfg.resize_polls {
            let m = Meta(read_word(qp, addr.add(FRONT_OFF)).await?);
            if !m.frozen() && m.epoch() == v.epoch_tag() {
                return Ok(());
            }
            if (m.epoch() != v.epoch_tag() || i % 64 == 63) && self.refresh().await? {
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
    async fn fresh(&self, v: &TreeView, nv: &NodeView<'_>) -> Result<Fresh, CanrtError> {
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
    async fn lookup(&self, key: u64, out: &mut [u8]) -> Result<Option<usize>, CanrtError> {
        let mut last = None;
        for _ in 0..self.cfg.read_retries {
            let v = self.view();
            let id = v.locate(key).map_err(|why| CanrtError::Corrupt {
                addr: GlobalAddr::from_raw(v.root),
                why,
            })?;
            let addr = self.node_addr(&v, id);
            let mut b = self.bufs.take(v.header.data_node_size as usize);
            let buf = &mut b.buf;
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

    /// SENDs a control message about data node `id` of view `v`'s data array, whose meta
    /// word showed `epoch`.
    async fn control(
        &self,
        kind: ControlKind,
        v: &TreeView,
        epoch: u32,
        id: u32,
        ticket: u64,
    ) -> Result<(), CanrtError> {
        let c = Control::new(kind, epoch, v.header.array_gen, id, ticket);
        self.qp()?.send(&c.encode()).await?;
        Ok(())
    }

    async fn unlock(
        &self,
        v: &TreeView,
        epoch: u32,
        id: u32,
        ticket: u64,
    ) -> Result<(), CanrtError> {
        self.control(ControlKind::Unlock, v, epoch, id, ticket)
            .await
    }

    /// Algorithm 1: lock by FETCH_AND_ADD, check the bitmap, append with WRITE_WITH_IMM.
    async fn write(&self, op: ItemOp, key: u64, value: &[u8]) -> Result<bool, CanrtError> {
        let max = self.view().header.value_cap as usize;
        if value.len() > max {
            return Err(CanrtError::ValueTooLong {
                len: value.len(),
                max,
            });
        }
        for _ in 0..self.cfg.write_retries {
            match self.write_once(op, key, value).await? {
                Wrote::Done(present) => return Ok(present),
                Wrote::Again => continue,
            }
        }
        Err(CanrtError::Retries { what: "write" })
    }

    async fn write_once(&self, op: ItemOp, key: u64, value: &[u8]) -> Result<Wrote, CanrtError> {
        let qp = self.qp()?;
        let v = self.view();
        let g = v.data();
        if value.len() > g.value_cap as usize {
            return Err(CanrtError::ValueTooLong {
                len: value.len(),
                max: g.value_cap as usize,
            });
        }
        let id = v.locate(key).map_err(|why| CanrtError::Corrupt {
            addr: GlobalAddr::from_raw(v.root),
            why,
        })?;
        let addr = self.node_addr(&v, id);
        let mut b = self.bufs.take(v.header.data_node_size as usize);
        let buf = &mut b.buf;
        // Locking phase: the ticket and a snapshot of the node in one doorbell (the READs run
        // after the FETCH_AND_ADD at the target, so they see our ticket counted).
        let mut ticket = 0u64;
        let mut bracket = Bracket::default();
        {
            let mut ops: heapless::Vec<Op<'_>, 4> = heapless::Vec::new();
            // Cannot fail: the doorbell is empty.
            let _ = ops.push(Op::Faa {
                remote: addr.add(LOCK_OFF),
                add: 1,
                old: &mut ticket,
            });
            self.push_snapshot(&mut ops, addr, &mut bracket, buf)?;
            qp.post(&mut ops).await?;
        }
        let t = ticket & TICKET_MASK;
        let mut polls = 0u32;
        let mut bad = 0u32;
        loop {
            let nv = match self.snapshot(g, &bracket, buf) {
                Ok(Some(nv)) => Some(nv),
                Ok(None) => None,
                Err(why) => {
                    bad += 1;
                    if bad > self.cfg.read_retries {
                        return Err(CanrtError::Corrupt { addr, why });
                    }
                    None
                }
            };
            if let Some(nv) = nv {
                let served = nv.front.served();
                let current = !nv.front.frozen() && nv.front.epoch() == v.epoch_tag();
                if served == t && current {
                    return self.append(&v, id, addr, &nv, op, key, value, t).await;
                }
                if served == t {
                    // Our turn, on a node being drained for a resize or of a newer epoch:
                    // hand the lock back (with the epoch the node has), then start over on
                    // the next tree.
                    self.unlock(&v, nv.front.epoch(), id, t).await?;
                    self.await_thaw(&v, addr).await?;
                    return Ok(Wrote::Again);
                }
                if !current
                    && matches!(self.fresh(&v, &nv).await?, Fresh::NewView)
                    && self.view().header.array_gen != v.header.array_gen
                {
                    // The node is in a retired data array: nobody serves tickets there.
                    return Ok(Wrote::Again);
                }
                // Tickets ahead of ours wait; one behind means ours was skipped.
                let ahead = t.wrapping_sub(served) & TICKET_MASK;
                if ahead > TICKET_MASK / 2 {
                    return Err(CanrtError::LockLost { node: addr });
                }
            } else {
                Self::bump(&self.torn);
            }
            // Wait for our turn on the meta word alone (8 bytes a poll), then re-read the
            // node. A frozen node is re-read now and then, to notice a new tree.
            loop {
                polls += 1;
                if polls > self.cfg.lock_polls {
                    return Err(CanrtError::LockTimeout { node: addr });
                }
                Self::bump(&self.waits);
                let m = Meta(read_word(qp, addr.add(FRONT_OFF)).await?);
                if m.served() == t
                    || m.epoch() != v.epoch_tag()
                    || (m.frozen() && polls.is_multiple_of(32))
                {
                    break;
                }
            }
            self.read_snapshot(addr, &mut bracket, buf).await?;
        }
    }

    /// Checking and writing phases, holding the lock (ticket `t`).
    #[allow(clippy::too_many_arguments)]
    async fn append(
        &self,
        v: &TreeView,
        id: u32,
        addr: GlobalAddr,
        nv: &NodeView<'_>,
        op: ItemOp,
        key: u64,
        value: &[u8],
        t: u64,
    ) -> Result<Wrote, CanrtError> {
        let g = v.data();
        let present = match nv.find_applied(key) {
            Ok(Found::Present(_)) => true,
            Ok(Found::Absent) => false,
            // We hold the lock, so the applied items are stable: this is corruption.
            Err(why) => {
                self.unlock(v, v.epoch_tag(), id, t).await?;
                return Err(CanrtError::Corrupt { addr, why });
            }
        };
        if !present && op != ItemOp::Insert {
            // Update or delete of an absent key: nothing to append.
            self.unlock(v, v.epoch_tag(), id, t).await?;
            return Ok(Wrote::Done(false));
        }
        let free = !nv.front.bitmap() & g.full_bitmap();
        if free == 0 {
            // Lines 21-22: the node is full; the server resizes the tree.
            Self::bump(&self.resizes);
            self.control(ControlKind::Resize, v, v.epoch_tag(), id, t)
                .await?;
            self.await_new_tree(v).await?;
            return Ok(Wrote::Again);
        }
        let slot = free.trailing_zeros();
        let mut item = [0u8; MAX_ITEM];
        let isz = g.item_size() as usize;
        g.encode_item(&mut item[..isz], key, value, op, t, true)
            .map_err(CanrtError::Config)?;
        let imm = Imm {
            epoch: v.epoch_tag(),
            node: id,
            slot,
        }
        .encode()
        .map_err(CanrtError::Config)?;
        let remote = addr.add(g.slot_off(slot));
        if self.cfg.flush_appends {
            // A READ after the WRITE on the same queue pair completes only once the written
            // bytes left the NIC for memory: the item is durable when the write returns.
            let mut flush = [0u8; 8];
            self.qp()?
                .post(&mut [
                    Op::WriteImm {
                        remote,
                        local: &item[..isz],
                        imm,
                    },
                    Op::Read {
                        remote: remote.add(isz as u64 - 8),
                        local: &mut flush,
                    },
                ])
                .await?;
        } else {
            self.qp()?
                .post(&mut [Op::WriteImm {
                    remote,
                    local: &item[..isz],
                    imm,
                }])
                .await?;
        }
        Ok(Wrote::Done(present))
    }

    /// Range scan: data nodes in key order (the prefix array's NodeIDs left to right) from
    /// the one holding `from`, [`SCAN_BATCH`] node snapshots per doorbell (paper §4.4).
    async fn range(
        &self,
        from: u64,
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, CanrtError> {
        let qp = self.qp()?;
        let mut pairs: Vec<(u64, Vec<u8>)> = Vec::new();
        'again: for _ in 0..self.cfg.read_retries {
            pairs.clear();
            let v = self.view();
            let size = v.header.data_node_size as usize;
            let mut bufs = vec![0u8; size * SCAN_BATCH];
            let mut brackets = [Bracket::default(); SCAN_BATCH];
            let corrupt = |why| CanrtError::Corrupt {
                addr: GlobalAddr::from_raw(v.root),
                why,
            };
            let first = v.locate(from).map_err(corrupt)?;
            let mut r = v.rank(first).ok_or(corrupt(LayoutError::Inconsistent {
                what: "located data node missing from key order",
            }))?;
            let order = v.order();
            while pairs.len() < limit && r < order.len() {
                let ids = &order[r..(r + SCAN_BATCH).min(order.len())];
                {
                    let mut ops: heapless::Vec<Op<'_>, { 3 * SCAN_BATCH }> = heapless::Vec::new();
                    for ((&id, b), br) in ids.iter().zip(bufs.chunks_mut(size)).zip(&mut brackets) {
                        // ids.len() <= SCAN_BATCH: three READs each fit.
                        self.push_snapshot(&mut ops, self.node_addr(&v, id), br, b)?;
                    }
                    qp.post(&mut ops).await?;
                }
                for (i, &id) in ids.iter().enumerate() {
                    let addr = self.node_addr(&v, id);
                    let buf = &mut bufs[i * size..(i + 1) * size];
                    let bracket = &mut brackets[i];
                    let start = pairs.len();
                    let mut tries = 0;
                    loop {
                        if tries > 0 {
                            self.read_snapshot(addr, bracket, buf).await?;
                        }
                        tries += 1;
                        if tries > self.cfg.read_retries {
                            return Err(CanrtError::Retries { what: "scan read" });
                        }
                        let nv = match self.snapshot(v.data(), bracket, buf) {
                            Ok(Some(nv)) => nv,
                            _ => {
                                Self::bump(&self.torn);
                                continue;
                            }
                        };
                        if !matches!(self.fresh(&v, &nv).await?, Fresh::Yes) {
                            continue 'again;
                        }
                        pairs.truncate(start);
                        // Only the keys this tree routes here (a split leaves copies behind
                        // for an instant).
                        let res = nv.for_each_live(|k, val| {
                            if k >= from && v.locate(k).ok() == Some(id) {
                                pairs.push((k, val.to_vec()));
                            }
                        });
                        if res.is_ok() {
                            break;
                        }
                        Self::bump(&self.torn);
                    }
                    pairs[start..].sort_unstable_by_key(|p| p.0);
                    if pairs.len() >= limit {
                        break;
                    }
                }
                r += ids.len();
            }
            let n = pairs.len().min(limit);
            for (k, val) in &pairs[..n] {
                visit(&k.to_be_bytes(), val);
            }
            return Ok(n);
        }
        Err(CanrtError::Retries { what: "scan" })
    }
}

async fn read_word<Q: QueuePair>(qp: &Q, at: GlobalAddr) -> Result<u64, CanrtError> {
    let mut b = [0u8; 8];
    qp.read(at, &mut b).await?;
    Ok(u64::from_le_bytes(b))
}

impl<E: Endpoint> KvIndex for Canrt<'_, E> {
    type Error = CanrtError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), CanrtError> {
        self.write(ItemOp::Insert, key_of(key)?, value).await?;
        Ok(())
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, CanrtError> {
        self.write(ItemOp::Update, key_of(key)?, value).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, CanrtError> {
        self.lookup(key_of(key)?, out).await
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, CanrtError> {
        self.write(ItemOp::Delete, key_of(key)?, &[]).await
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, CanrtError> {
        self.range(key_of(from)?, limit, visit).await
    }
}

//! The memory node's side of CANRT: the metadata applier (paper §3.3, a
//! [`crate::server::Handler`]), resizing (§3.5) and crash recovery (§3.6).
//!
//! Per appended DataItem (a WRITE_WITH_IMM notice) the applier:
//! 1. checks the item (checksum, ticket = the node's served ticket, slot free) and persists it;
//! 2. flips the bitmap bits (new slot on, the key's old slot off) in the meta word and
//!    persists it: the commit point, one 8-byte store;
//! 3. clears the item's `valid` bit and persists it (the item is processed);
//! 4. releases the lock: `served + 1` in the meta word.
//!
//! Resizing is in `resize.rs`.
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{Handler, LocalRegion, Replies};
use core::sync::atomic::{AtomicU64, Ordering};
use remora_layouts::canrt::{
    Control, ControlKind, DataGeometry, FRONT_OFF, Imm, ItemOp, LOCK_OFF, Meta, ROOT_SLOT,
    SHORT_EPOCH_MASK, TICKET_MASK, TREE_HEADER_LEN, TreeHeader, tail_processed, tail_valid,
};
use remora_layouts::region::root_offset;
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::sync::Arc;
use std_alloc::vec::Vec;

/// What the applier has done; shared so a test or an operator can watch a running node.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub applied: AtomicU64,
    pub unlocks: AtomicU64,
    pub resizes: AtomicU64,
    pub formats: AtomicU64,
    /// Messages refused (torn or forged items, unlocks by non-holders, stale immediates).
    pub rejected: AtomicU64,
}

impl ServerStats {
    pub(super) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// What [`CanrtServer::recover`] repaired.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Data nodes scanned.
    pub nodes: u32,
    /// Unprocessed complete DataItems whose metadata update was replayed.
    pub replayed: u32,
    /// Committed DataItems whose `valid` bit was still set.
    pub finished: u32,
    /// Data nodes found frozen by an interrupted resize.
    pub unfrozen: u32,
    /// Live items that fail their checksum (media corruption; left in place).
    pub corrupt: u32,
    /// Live items dropped from a data node the tree no longer routes them to (a split that
    /// crashed after publishing).
    pub trimmed: u32,
}

/// The CANRT metadata applier of one memory node.
pub struct CanrtServer {
    pub(super) tree: Option<TreeHeader>,
    /// Frozen, waiting for the last lock tickets to be served.
    pub(super) resizing: bool,
    /// The data node whose holder reported it full.
    pub(super) split: Option<u32>,
    /// The area (offset, length) not published: the next resize writes its header there.
    pub(super) shadow: Option<(u64, u64)>,
    /// Smallest and largest key each data node has held since it was last split or built
    /// (wider than its live keys after deletes; never overlapping another node's).
    pub(super) bounds: Vec<Option<(u64, u64)>>,
    pub(super) heap: (u64, u64),
    pub(super) stats: Arc<ServerStats>,
    pub(super) scratch: Vec<u8>,
}

impl Default for CanrtServer {
    fn default() -> Self {
        CanrtServer::new()
    }
}

pub(super) fn invalid(region: &dyn LocalRegion, off: u64, why: &'static str) -> FabricError {
    FabricError::RemoteInvalid {
        wr: 0,
        addr: GlobalAddr::try_new(region.node(), off).unwrap_or(GlobalAddr::NULL),
        why,
    }
}

pub(super) fn bad_layout(
    region: &dyn LocalRegion,
    off: u64,
) -> impl Fn(LayoutError) -> FabricError + '_ {
    move |_| invalid(region, off, "malformed CANRT structure or message")
}

impl CanrtServer {
    pub fn new() -> CanrtServer {
        CanrtServer {
            tree: None,
            resizing: false,
            split: None,
            shadow: None,
            bounds: Vec::new(),
            heap: (0, 0),
            stats: Arc::new(ServerStats::default()),
            scratch: Vec::new(),
        }
    }

    pub fn stats(&self) -> Arc<ServerStats> {
        self.stats.clone()
    }

    /// The valid tree's header (read from the root slot the first time).
    pub fn tree(&mut self, region: &dyn LocalRegion) -> Result<TreeHeader, FabricError> {
        if let Some(h) = self.tree {
            return Ok(h);
        }
        let root = region.load_u64(root_offset(ROOT_SLOT))?;
        if root == 0 {
            return Err(invalid(
                region,
                root_offset(ROOT_SLOT),
                "no CANRT tree formatted",
            ));
        }
        let at = GlobalAddr::from_raw(root);
        let mut hb = [0u8; TREE_HEADER_LEN];
        region.read(at.offset(), &mut hb)?;
        let h = TreeHeader::decode(&hb).map_err(bad_layout(region, at.offset()))?;
        self.tree = Some(h);
        Ok(h)
    }

    fn node_off(
        &self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        node: u32,
    ) -> Result<u64, FabricError> {
        if node >= h.n_data {
            return Err(invalid(region, h.data_off, "data node id beyond the tree"));
        }
        Ok(h.data_node_off(node))
    }

    pub(super) fn front(
        &self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        off: u64,
    ) -> Result<Meta, FabricError> {
        Meta(region.load_u64(off + FRONT_OFF)?)
            .check(h.slots)
            .map_err(bad_layout(region, off))
    }

    pub(super) fn store_meta(
        region: &dyn LocalRegion,
        off: u64,
        m: Meta,
    ) -> Result<(), FabricError> {
        region.store_u64(off + FRONT_OFF, m.0)
    }

    /// Step 4: the next ticket is served.
    fn release(region: &dyn LocalRegion, off: u64, m: Meta) -> Result<(), FabricError> {
        Self::store_meta(region, off, m.with_served((m.served() + 1) & TICKET_MASK))
    }

    /// Steps 1-3 for the item in `slot` (already checked): returns the committed meta word.
    fn commit(
        region: &dyn LocalRegion,
        g: DataGeometry,
        off: u64,
        slot: u32,
        key: u64,
        op: ItemOp,
        front: Meta,
    ) -> Result<Meta, FabricError> {
        region.persist(off + g.slot_off(slot), g.item_size() as usize);
        let mut bm = front.bitmap();
        for s in 0..g.slots {
            if s != slot && bm & (1 << s) != 0 && region.load_u64(off + g.slot_off(s))? == key {
                bm &= !(1 << s);
            }
        }
        if op != ItemOp::Delete {
            bm |= 1 << slot;
        }
        let m = front.with_bitmap(bm);
        Self::store_meta(region, off, m)?;
        region.persist(off + FRONT_OFF, 8);
        let tail_off = off + g.tail_off(slot);
        let tail = region.load_u64(tail_off)?;
        region.store_u64(tail_off, tail_processed(tail))?;
        region.persist(tail_off, 8);
        Ok(m)
    }

    /// A WRITE_WITH_IMM notice: apply the appended DataItem.
    fn apply(&mut self, region: &dyn LocalRegion, imm: u32) -> Result<(), FabricError> {
        let h = self.tree(region)?;
        let g = h.data();
        let imm = Imm::decode(imm).map_err(bad_layout(region, h.data_off))?;
        if imm.epoch != h.epoch & SHORT_EPOCH_MASK {
            return Err(invalid(region, h.data_off, "append to a retired tree"));
        }
        let off = self.node_off(region, &h, imm.node)?;
        if imm.slot >= g.slots {
            return Err(invalid(region, off, "append beyond the node's slots"));
        }
        let front = self.front(region, &h, off)?;
        let isz = g.item_size() as usize;
        let mut item = [0u8; 16 + remora_layouts::canrt::MAX_VALUE];
        region.read(off + g.slot_off(imm.slot), &mut item[..isz])?;
        let decoded = g
            .decode_item(&item[..isz])
            .map(|it| (it.key, it.op, it.ticket));
        let (key, op) = match decoded {
            Ok((_, _, ticket)) if ticket != front.served() => {
                // Not the holder's item: leave the lock to its holder.
                return Err(invalid(
                    region,
                    off,
                    "append by a client that does not hold the lock",
                ));
            }
            Ok(_) if front.bitmap() & (1 << imm.slot) != 0 => {
                Self::release(region, off, front)?;
                return Err(invalid(region, off, "append into a live slot"));
            }
            Ok((key, op, _)) => (key, op),
            Err(_) => {
                Self::release(region, off, front)?;
                return Err(invalid(region, off, "torn or corrupt DataItem"));
            }
        };
        let m = Self::commit(region, g, off, imm.slot, key, op, front)?;
        Self::release(region, off, m)?;
        if op != ItemOp::Delete
            && let Some(b) = self.bounds.get_mut(imm.node as usize)
        {
            *b = super::resize::widen(*b, key);
        }
        ServerStats::bump(&self.stats.applied);
        Ok(())
    }

    /// The holder of `c.ticket` hands its lock back. False if `c` names a retired tree.
    /// The holder of `c.ticket` hands its lock back. A node of an older data array (a full
    /// rebuild moved every item out of it) needs no release: false. The node's epoch may
    /// have changed since the holder read it (a split published meanwhile): the ticket is
    /// still this node's, and is released.
    fn unlock(&mut self, region: &dyn LocalRegion, c: &Control) -> Result<bool, FabricError> {
        let h = self.tree(region)?;
        if c.arg != h.array_gen as u32 || c.node >= h.n_data {
            return Ok(false);
        }
        let off = self.node_off(region, &h, c.node)?;
        let front = self.front(region, &h, off)?;
        if front.served() != c.ticket as u64 {
            return Err(invalid(
                region,
                off,
                "unlock by a client that does not hold the lock",
            ));
        }
        Self::release(region, off, front)?;
        ServerStats::bump(&self.stats.unlocks);
        Ok(true)
    }

    /// Crash recovery (§3.6), run before any client connects: finishes committed items,
    /// replays complete unprocessed ones, unfreezes an interrupted resize's tree (the root
    /// slot still names it, so the resize never happened), and resets every lock to free.
    pub fn recover(&mut self, region: &dyn LocalRegion) -> Result<RecoveryReport, FabricError> {
        *self = CanrtServer {
            stats: self.stats.clone(),
            ..CanrtServer::new()
        };
        let mut r = RecoveryReport::default();
        if region.load_u64(root_offset(ROOT_SLOT))? == 0 {
            return Ok(r);
        }
        let h = self.tree(region)?;
        let view = self.view_of(region, &h)?;
        let g = h.data();
        let isz = g.item_size() as usize;
        let mut item = [0u8; 16 + remora_layouts::canrt::MAX_VALUE];
        for id in 0..h.n_data {
            let off = h.data_node_off(id);
            r.nodes += 1;
            let mut m = self.front(region, &h, off)?;
            if m.frozen() {
                r.unfrozen += 1;
            }
            for s in 0..g.slots {
                let tail_off = off + g.tail_off(s);
                let tail = region.load_u64(tail_off)?;
                if m.bitmap() & (1 << s) != 0 {
                    region.read(off + g.slot_off(s), &mut item[..isz])?;
                    if g.decode_item(&item[..isz]).is_err() {
                        r.corrupt += 1;
                    } else if tail_valid(tail) {
                        region.store_u64(tail_off, tail_processed(tail))?;
                        region.persist(tail_off, 8);
                        r.finished += 1;
                    }
                }
            }
            // At most one unprocessed item per node: only the lock holder appends, and
            // every processed item's valid bit is persisted clear before the release.
            for s in 0..g.slots {
                if m.bitmap() & (1 << s) != 0 {
                    continue;
                }
                region.read(off + g.slot_off(s), &mut item[..isz])?;
                if let Ok(it) = g.decode_item(&item[..isz])
                    && it.valid
                {
                    let (key, op) = (it.key, it.op);
                    m = Self::commit(region, g, off, s, key, op, m)?;
                    r.replayed += 1;
                }
            }
            // Items this tree routes elsewhere: a split published before its moved items
            // left the full node.
            let mut bm = m.bitmap();
            for s in 0..g.slots {
                if bm & (1 << s) != 0 {
                    let k = region.load_u64(off + g.slot_off(s))?;
                    if view.rank(id).is_none() || view.locate(k).ok() != Some(id) {
                        bm &= !(1 << s);
                        r.trimmed += 1;
                    }
                }
            }
            let m = m.with_bitmap(bm).with_frozen(false).with_epoch(h.epoch);
            Self::store_meta(region, off, m)?;
            region.store_u64(off + LOCK_OFF, m.served())?;
            region.persist(off, g.node_size() as usize);
        }
        self.load_bounds(region, &h)?;
        Ok(r)
    }
}

impl Handler for CanrtServer {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        _conn: usize,
        recv: Recv,
        msg: &[u8],
        _replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let r = match recv.kind {
            RecvKind::WriteImm => match recv.imm {
                Some(imm) => self.apply(region, imm),
                None => Err(invalid(region, 0, "WRITE_WITH_IMM without an immediate")),
            },
            RecvKind::Send => match Control::decode(msg) {
                Ok(c) => match c.kind() {
                    Ok(ControlKind::Format) => match DataGeometry::new(c.arg, c.value_cap as u32) {
                        Ok(g) => self.format(region, g),
                        Err(_) => Err(invalid(region, 0, "format with a bad geometry")),
                    },
                    Ok(ControlKind::Unlock) => self.unlock(region, &c).map(|_| ()),
                    Ok(ControlKind::Resize) => match self.unlock(region, &c) {
                        Ok(true) => self.start_resize(region, c.node),
                        Ok(false) => Ok(()),
                        Err(e) => Err(e),
                    },
                    Err(_) => Err(invalid(region, 0, "unknown CANRT control message")),
                },
                Err(_) => Err(invalid(region, 0, "malformed CANRT control message")),
            },
        };
        if r.is_err() {
            ServerStats::bump(&self.stats.rejected);
        }
        // A resize may finish whatever the message was.
        let p = if self.resizing {
            self.progress(region)
        } else {
            Ok(())
        };
        r.and(p)
    }

    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        let was = self.resizing;
        let _ = self.progress(region);
        was && !self.resizing
    }
}

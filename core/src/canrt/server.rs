//! The memory node's side of CANRT: the metadata applier (paper §3.3, a
//! [`crate::server::Handler`]), resizing (§3.5) and crash recovery (§3.6).
//!
//! Per appended DataItem (a WRITE_WITH_IMM notice) the applier:
//! 1. checks the item (checksum, ticket = the node's served ticket, slot free), clears its
//!    `valid` bit (the item is processed) and persists it;
//! 2. flips the bitmap bits (new slot on, the key's old slot off) and releases the lock
//!    (`served + 1`) in one 8-byte store of the meta word, persisted: the commit point;
//! 3. acknowledges the append to its writer (a [`Turn`] SEND), unless the writer's
//!    connection asked for none ([`ControlKind::Quiet`]: writers that count a write done
//!    once posted, the paper's count, whose server sends nothing back).
//!
//! Two write-backs per write (the item's lines, the meta word's line).
//!
//! Resizing is in `resize.rs`.
use super::resize_stats::ResizeCounts;
use super::view::TreeView;
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{Handler, LocalRegion, Replies};
use core::sync::atomic::Ordering;
use remora_layouts::canrt::{
    Control, ControlKind, DataGeometry, FRONT_OFF, Imm, ItemOp, MAX_ITEM, MAX_SLOTS, Meta,
    ROOT_SLOT, SHORT_EPOCH_MASK, TICKET_MASK, TREE_HEADER_LEN, TreeHeader, Turn, hole_tail,
    tail_processed, tail_valid,
};
use remora_layouts::region::root_offset;
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::collections::{BTreeMap, BTreeSet};
use std_alloc::format;
use std_alloc::string::String;
use std_alloc::sync::Arc;
use std_alloc::vec::Vec;

/// One statistics counter, readable from another thread. 64-bit where the target has 64-bit
/// atomics; elsewhere (thumbv7em and other 32-bit MCUs) a 32-bit atomic that wraps.
#[derive(Debug, Default)]
pub struct Counter(
    #[cfg(target_has_atomic = "64")] core::sync::atomic::AtomicU64,
    #[cfg(not(target_has_atomic = "64"))] core::sync::atomic::AtomicU32,
);

impl Counter {
    /// The count, read with `order`.
    #[allow(clippy::useless_conversion)] // u32 to u64 on targets without 64-bit atomics
    pub fn load(&self, order: Ordering) -> u64 {
        u64::from(self.0.load(order))
    }
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the applier has done; shared so a test or an operator can watch a running node.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Items (appends) applied to data nodes.
    pub applied: Counter,
    /// Locks handed back without an append by their holders.
    pub unlocks: Counter,
    /// Resizes (data node splits or rebuilds) finished.
    pub resizes: Counter,
    /// Empty trees formatted in the root slot.
    pub formats: Counter,
    /// Messages refused (torn or forged items, unlocks by non-holders, stale immediates).
    pub rejected: Counter,
    /// Lock tickets skipped because their holder stalled for a lease (dead or fenced).
    pub skipped: Counter,
    /// Appends and unlocks that came after their ticket was skipped (ignored).
    pub late: Counter,
    /// Appends under the tree before a split whose key the new tree routes to another
    /// node (refused; their writers write again).
    pub refused: Counter,
    /// Resizes that could not be done (no room on the memory node, or no tree shape): the
    /// old tree stays valid.
    pub failed_resizes: Counter,
    /// Resizes begun and ended: this server's resize clock ([`ResizeCounts`]).
    pub resize_clock: ResizeCounts,
    /// Data arrays retired by rebuilds (their memory went to the free pool, `pool.rs`).
    pub arrays_retired: Counter,
    /// Data arrays built in memory a retired one freed (no new chunks claimed).
    pub arrays_reused: Counter,
}

impl ServerStats {
    pub(super) fn bump(c: &Counter) {
        c.bump();
    }
}

/// What [`CanrtServer::recover`] repaired.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Data nodes scanned.
    pub nodes: u32,
    /// Unprocessed complete DataItems whose metadata update was replayed.
    pub replayed: u32,
    /// Reserved slots dropped (skipped lock holders' holes and late appends: their
    /// connections are gone).
    pub unreserved: u32,
    /// Data nodes found frozen by an interrupted resize.
    pub unfrozen: u32,
    /// Live items that fail their checksum (media corruption; left in place).
    pub corrupt: u32,
    /// Live items dropped from a data node the tree no longer routes them to (a split that
    /// crashed after publishing).
    pub trimmed: u32,
}

/// One client's resize wait as the drain `Skip`s it sent describe it.
pub(super) struct DrainSeen {
    pub(super) conn: usize,
    pub(super) wait: u32,
    pub(super) leases: u8,
    /// (frozen data node, its served ticket)
    pub(super) served: Vec<(u32, u64)>,
}

/// How the server grows the tree when a data node is full (§3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Growth {
    /// remora's default: the full node (and every node three-quarters full) is split in
    /// half in place, and the prefix array is replanned from the nodes' key bounds; when
    /// the data array is out of room every item is repacked half full. Nodes stay half to
    /// fully used.
    #[default]
    Split,
    /// The paper's geometry: a data node holds the keys sharing a `k`-character prefix
    /// (one per last-level character, §3.1), and a full node grows the tree by a whole
    /// level (addHeight, §3.5): every item is repacked into the smallest height at which
    /// no data node is full. Nodes hold what the key distribution puts under each prefix
    /// (random strings: a few keys), so a range reads more nodes per key.
    WholeLevel,
}

/// The CANRT metadata applier of one memory node.
pub struct CanrtServer {
    pub(super) tree: Option<TreeHeader>,
    /// How a full data node grows the tree.
    pub(super) growth: Growth,
    /// [`Growth::WholeLevel`]: keys applied since the last rebuild whose prefix has no
    /// character of its own in the prefix array (the paper's last data node gathers them,
    /// and once it is full, addWidth gives them characters: §3.2, §3.5).
    pub(super) foreign: u32,
    /// A resize is under way: the nodes it splits (or, for a rebuild, every node) are
    /// frozen, waiting for their last lock tickets to be served.
    pub(super) resizing: bool,
    /// The data nodes this resize splits, frozen (those reported full first); every other
    /// node keeps taking writes. Empty for a rebuild.
    pub(super) split: Vec<u32>,
    /// This resize repacks the data array: every data node is frozen.
    pub(super) rebuild: bool,
    /// Frozen nodes whose lock tickets handed out are not all served yet. Only a release
    /// (a message about the node, or an idle check) can drain one: each message re-checks
    /// only the nodes it touched.
    pub(super) undrained: BTreeSet<u32>,
    /// The (full) epoch of the oldest tree of the current data array this server knows:
    /// the one it formatted or rebuilt, or the one its first split replaced. An append
    /// named with any epoch from it to the valid one's ([`Self::same_array`]) is to a node
    /// of this data array (splits keep nodes where they are): it is still applied if the
    /// valid tree routes its key there (its writer read the meta word before one or more
    /// splits were published: a holder descheduled between its turn and its append).
    pub(super) array_epoch: Option<u32>,
    /// The valid tree's prefix array, read when an append must be routed (see
    /// `array_epoch`); dropped at each publish.
    pub(super) view: Option<TreeView>,
    /// The area (offset, length) not published: the next resize writes its header there.
    pub(super) shadow: Option<(u64, u64)>,
    /// Smallest and largest key each data node has held since it was last split or built
    /// (wider than its live keys after deletes; never overlapping another node's).
    pub(super) bounds: Vec<Option<(u128, u128)>>,
    pub(super) heap: (u64, u64),
    pub(super) stats: Arc<ServerStats>,
    pub(super) scratch: Vec<u8>,
    /// Per resize wait of a client (connection, the wait's name): its last drain `Skip`'s
    /// lease count and each data node's served ticket then (see [`ControlKind::Skip`]).
    pub(super) drain_seen: Vec<DrainSeen>,
    /// Lock waiters to tell when their ticket is served: (data node, ticket) -> connection.
    pub(super) waiters: BTreeMap<(u32, u16), usize>,
    /// Data nodes whose served ticket this message may have moved (their waiters are told).
    pub(super) touched: Vec<u32>,
    /// Slots reserved for skipped lock holders' late appends: (data node, slot) -> the
    /// skipped ticket (see [`Self::skip_ticket`]). Of the current data array only.
    pub(super) reserved: BTreeMap<(u32, u32), u16>,
    /// Per data node, reserved slots no append can land in any more (the late append
    /// landed, or its holder handed the ticket back): freed by the node's next release.
    pub(super) freeing: BTreeMap<u32, u32>,
    /// Connections whose writers hear no acknowledgement of an applied item
    /// ([`ControlKind::Quiet`]: they count a write done once posted).
    /// Per such connection, its posted appends' flow control (`credit.rs`).
    pub(super) quiet: BTreeMap<usize, super::credit::Credit>,
    /// Memory of retired data arrays, free for later ones (`pool.rs`).
    pub(super) pool: super::pool::Pool,
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
    /// A server with no tree loaded: it opens the published tree, or formats one on a client's request, when messages arrive.
    pub fn new() -> CanrtServer {
        CanrtServer {
            tree: None,
            growth: Growth::Split,
            foreign: 0,
            resizing: false,
            split: Vec::new(),
            rebuild: false,
            undrained: BTreeSet::new(),
            array_epoch: None,
            view: None,
            shadow: None,
            bounds: Vec::new(),
            heap: (0, 0),
            stats: Arc::new(ServerStats::default()),
            scratch: Vec::new(),
            drain_seen: Vec::new(),
            waiters: BTreeMap::new(),
            touched: Vec::new(),
            reserved: BTreeMap::new(),
            freeing: BTreeMap::new(),
            quiet: BTreeMap::new(),
            pool: Default::default(),
        }
    }

    /// A server that grows the tree as `growth` says (the default is [`Growth::Split`]).
    pub fn with_growth(growth: Growth) -> CanrtServer {
        CanrtServer {
            growth,
            ..CanrtServer::new()
        }
    }

    /// Bytes of retired data arrays free for reuse (the pool, `pool.rs`).
    pub fn free_bytes(&self) -> u64 {
        self.pool.free_bytes()
    }

    /// The server's counters, shared: they keep counting after this call.
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

    pub(super) fn node_off(
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

    /// Step 4: the next ticket is served. Persisted, so that recovery knows which ticket
    /// held the lock at the crash: the one complete unapplied item it may replay is that
    /// ticket's, and an item the applier refused (another ticket) stays out.
    pub(super) fn release(region: &dyn LocalRegion, off: u64, m: Meta) -> Result<(), FabricError> {
        Self::store_meta(region, off, m.with_served((m.served() + 1) & TICKET_MASK))?;
        region.persist(off + FRONT_OFF, 8);
        Ok(())
    }

    /// Steps 1-3 for the item in `slot` (already checked): returns the committed meta word.
    /// Step 3 comes first and step 4 (with `release`: the applier) rides on step 2: the
    /// item is written back already marked processed, and one persisted store of the meta
    /// word both makes it live and serves the next ticket (two write-backs per write, not
    /// four). A crash before that store loses the item, which nobody was told was written
    /// (acknowledgements follow the store). Recovery (`release` false) does the same (a
    /// crash during recovery, before that store, loses the unacknowledged item it was
    /// replaying): a live slot whose item is unprocessed is then always a reserved one (see
    /// [`Self::skip_ticket`]), never an item of the tree.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit(
        region: &dyn LocalRegion,
        g: DataGeometry,
        off: u64,
        slot: u32,
        key: u128,
        op: ItemOp,
        front: Meta,
        release: bool,
    ) -> Result<Meta, FabricError> {
        let tail_off = off + g.tail_off(slot);
        let tail = region.load_u64(tail_off)?;
        region.store_u64(tail_off, tail_processed(tail))?;
        region.persist(off + g.slot_off(slot), g.item_size() as usize);
        let mut bm = front.bitmap();
        // The key's older item: the live slots' keys, read in one pass over the node (a
        // contiguous scan the core's prefetchers overlap, as the paper's server does when
        // it "marks the old DataItem as invalid"), not one dependent load per slot.
        let others = bm & !(1 << slot);
        if others != 0 {
            let (lo, hi) = (others.trailing_zeros(), 31 - others.leading_zeros());
            let (isz, klen) = (g.item_size() as usize, g.key_len as usize);
            let mut buf = [0u8; MAX_SLOTS * MAX_ITEM];
            let len = (hi - lo) as usize * isz + klen;
            let keys = buf
                .get_mut(..len)
                .ok_or_else(|| invalid(region, off, "bitmap marks slots beyond the node"))?;
            region.read(off + g.slot_off(lo), keys)?;
            for s in lo..=hi {
                let at = (s - lo) as usize * isz;
                if others & (1 << s) != 0
                    && g.stored_key(&keys[at..at + klen])
                        .map_err(bad_layout(region, off + g.slot_off(s)))?
                        == key
                    && !Self::reserved_slot(region, g, off, s)?
                {
                    bm &= !(1 << s);
                }
            }
        }
        if op != ItemOp::Delete {
            bm |= 1 << slot;
        }
        let mut m = front.with_bitmap(bm);
        if release {
            m = m.with_served((m.served() + 1) & TICKET_MASK);
        }
        Self::store_meta(region, off, m)?;
        region.persist(off + FRONT_OFF, 8);
        Ok(m)
    }

    /// Whether live slot `s` of the node at `off` is reserved (its tail has `valid` set:
    /// see [`Self::skip_ticket`]); its bytes are then no item of the tree.
    pub(super) fn reserved_slot(
        region: &dyn LocalRegion,
        g: DataGeometry,
        off: u64,
        s: u32,
    ) -> Result<bool, FabricError> {
        Ok(tail_valid(region.load_u64(off + g.tail_off(s))?))
    }

    /// Makes free slot `s` of the node at `off` a hole for skipped ticket `ticket`: its tail
    /// gets `valid` set, persisted (before the bitmap store that marks the slot live, so no
    /// old processed item there ever shows). The holder's append may be landing meanwhile:
    /// a tail of its that landed first is left as it is (it has `valid` set too), and a
    /// compare-and-swap keeps the server from overwriting one that lands at the same time.
    pub(super) fn reserve(
        region: &dyn LocalRegion,
        g: DataGeometry,
        off: u64,
        s: u32,
        ticket: u64,
    ) -> Result<(), FabricError> {
        let tail_off = off + g.tail_off(s);
        let tail = region.load_u64(tail_off)?;
        if !tail_valid(tail) {
            region.cas_u64(tail_off, tail, hole_tail(ticket))?;
        }
        region.persist(tail_off, 8);
        Ok(())
    }

    /// `front` with the reserved slots of data node `id` no append can land in any more
    /// cleared (forgotten here): the caller stores it with the next ticket served. Only a
    /// store that serves a new ticket may change a node's bitmap outside a resize: the
    /// slot a lock holder appends into is the first free one of the bitmap it saw when its
    /// turn came, and `skip_ticket` must know which.
    pub(super) fn unreserve(&mut self, id: u32, front: Meta) -> Meta {
        match self.freeing.remove(&id) {
            Some(bits) => front.with_bitmap(front.bitmap() & !bits),
            None => front,
        }
    }

    /// A WRITE_WITH_IMM naming a slot reserved for skipped ticket `ticket` of data node
    /// `id`: if that holder's item is in it, whole, its late append has landed (no byte of
    /// it can come after its notice), and the slot is freed at the node's next release.
    /// True if so.
    fn late_landed(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        id: u32,
        slot: u32,
        ticket: u16,
    ) -> Result<bool, FabricError> {
        let g = h.data();
        if id >= h.n_data || slot >= g.slots {
            return Ok(false);
        }
        let off = h.data_node_off(id);
        let isz = g.item_size() as usize;
        let mut item = [0u8; remora_layouts::canrt::MAX_ITEM];
        region.read(off + g.slot_off(slot), &mut item[..isz])?;
        let landed = g
            .decode_item(&item[..isz])
            .is_ok_and(|it| it.valid && it.ticket == ticket as u64);
        if landed {
            self.reserved.remove(&(id, slot));
            *self.freeing.entry(id).or_insert(0) |= 1 << slot;
        }
        Ok(landed)
    }

    /// Tells a skipped holder whose append came late that it was refused (a stale
    /// acknowledgement naming its ticket): it writes again.
    fn refuse_late(replies: &mut Replies, node: u32, ticket: u64, meta: Meta) {
        let t = Turn {
            stale: true,
            applied: true,
            ticket: ticket as u16,
            node,
            meta,
        };
        replies.send(&t.encode());
    }

    /// A WRITE_WITH_IMM notice: apply the appended DataItem.
    /// The appender hears that its item is applied (a [`Turn`] naming its ticket, with the
    /// meta word after the release): its write returns then, once the item is durable and
    /// visible to readers.
    fn apply(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        imm: u32,
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        // A quiet connection's writers do not wait for the acknowledgement: none is sent.
        let ack = !self.quiet.contains_key(&conn);
        let h = self.tree(region)?;
        let g = h.data();
        let imm = Imm::decode(imm).map_err(bad_layout(region, h.data_off))?;
        if let Some(&t) = self.reserved.get(&(imm.node, imm.slot))
            && self.late_landed(region, &h, imm.node, imm.slot, t)?
        {
            // The late append of a holder whose ticket was skipped, into the slot reserved
            // for it (whatever tree it located its key with: reservations last through
            // splits): never applied; its writer reads back that it was skipped (or hears
            // so) and writes again.
            ServerStats::bump(&self.stats.late);
            self.touched.push(imm.node);
            let front = self.front(region, &h, h.data_node_off(imm.node))?;
            Self::refuse_late(replies, imm.node, t as u64, front);
            return Ok(());
        }
        let current = imm.epoch == h.epoch & SHORT_EPOCH_MASK;
        if !current && !self.same_array(&h, imm.epoch) {
            // An append to a retired data array: only a holder whose ticket was skipped (it
            // stalled for a lease, and a rebuild went on without it) sends one. Its item
            // lies in a free slot under an old ticket, which nobody takes; it reads back
            // that it was skipped and writes again. (An append under an older tree of this
            // data array is checked below: its node took writes through the splits.)
            ServerStats::bump(&self.stats.late);
            return Ok(());
        }
        let off = self.node_off(region, &h, imm.node)?;
        self.touched.push(imm.node);
        if imm.slot >= g.slots {
            return Err(invalid(region, off, "append beyond the node's slots"));
        }
        let front = self.front(region, &h, off)?;
        let isz = g.item_size() as usize;
        let mut item = [0u8; remora_layouts::canrt::MAX_ITEM];
        region.read(off + g.slot_off(imm.slot), &mut item[..isz])?;
        let decoded = g
            .decode_item(&item[..isz])
            .map(|it| (it.key, it.op, it.ticket));
        let reserved =
            front.bitmap() & (1 << imm.slot) != 0 && Self::reserved_slot(region, g, off, imm.slot)?;
        let (key, op) = match decoded {
            Ok((_, _, ticket)) if reserved && ticket != front.served() => {
                // A slot reserved for another skipped holder (a notice about another data
                // array's slot, or one whose item was never in it): not this append's, and
                // not the lock holder's. Ignored.
                ServerStats::bump(&self.stats.late);
                return Ok(());
            }
            Err(_) if reserved => {
                ServerStats::bump(&self.stats.late);
                return Ok(());
            }
            Ok((_, _, ticket))
                if ticket != front.served()
                    && !tail_valid(region.load_u64(off + g.tail_off(imm.slot))?) =>
            {
                // Applied already (by a skip request that found it before its notice came).
                if ack {
                    Self::ack(replies, imm.node, ticket, front);
                }
                return Ok(());
            }
            Ok((_, _, ticket)) if behind(ticket, front.served()) => {
                // A skipped holder's late append outside a reserved slot (under a data array
                // a rebuild retired, or one a skip found whole but refused): left where it
                // is, unprocessed (readers and recovery take only the served ticket's item);
                // its writer reads back that its ticket was skipped and writes again.
                ServerStats::bump(&self.stats.late);
                Self::refuse_late(replies, imm.node, ticket, front);
                return Ok(());
            }
            Ok((_, _, ticket)) if ticket != front.served() => {
                // Not the holder's item (a ticket not yet served: a forgery): leave the lock
                // to its holder, and drop this connection.
                return Err(invalid(
                    region,
                    off,
                    "append by a client that does not hold the lock",
                ));
            }
            Ok(_) if front.bitmap() & (1 << imm.slot) != 0 => {
                Self::release(region, off, self.unreserve(imm.node, front))?;
                return Err(invalid(region, off, "append into a live slot"));
            }
            Ok((key, op, _)) => (key, op),
            Err(_) => {
                Self::release(region, off, self.unreserve(imm.node, front))?;
                return Err(invalid(region, off, "torn or corrupt DataItem"));
            }
        };
        if !current && !self.routes_to(region, &h, key, imm.node)? {
            // Its writer located the key with a tree before one or more splits, and the valid
            // tree sends it to another node: refused (lock released, item left unprocessed
            // under a passed ticket, which readers and recovery never take). The writer
            // hears so (a stale acknowledgement, or its item still unprocessed behind the
            // served ticket) and writes again.
            Self::release(region, off, self.unreserve(imm.node, front))?;
            let t = Turn {
                stale: true,
                applied: true,
                ticket: front.served() as u16,
                node: imm.node,
                meta: front.with_served((front.served() + 1) & TICKET_MASK),
            };
            replies.send(&t.encode());
            ServerStats::bump(&self.stats.refused);
            return Ok(());
        }
        let free = self.unreserve(imm.node, front);
        let m = Self::commit(region, g, off, imm.slot, key, op, free, true)?;
        if ack {
            Self::ack(replies, imm.node, front.served(), m);
        }
        if op != ItemOp::Delete
            && let Some(b) = self.bounds.get_mut(imm.node as usize)
        {
            *b = super::resize::widen(*b, key);
        }
        ServerStats::bump(&self.stats.applied);
        if self.growth == Growth::WholeLevel
            && m.bitmap().count_ones() > free.bitmap().count_ones()
            && !self.exact(region, &h, key)?
        {
            // A new key without a character of its own: the paper's last data node takes
            // it. That node holds `slots` of them; once they are as many, addWidth (here a
            // rebuild at the smallest height and width that give every prefix its node).
            self.foreign += 1;
            if self.foreign >= g.slots && !self.resizing {
                self.start_resize(region, imm.node)?;
            }
        }
        Ok(())
    }

    /// Whether the valid tree `h` has a character of its own for every level of `key`.
    fn exact(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        key: u128,
    ) -> Result<bool, FabricError> {
        if self.view.as_ref().is_none_or(|v| v.header.epoch != h.epoch) {
            self.view = Some(self.view_of(region, h)?);
        }
        Ok(self
            .view
            .as_ref()
            .and_then(|v| v.locate_exact(key).ok())
            .is_some_and(|(_, e)| e))
    }

    /// Whether short epoch `short` (an append's) names a tree of the valid tree `h`'s data
    /// array that this server published or replaced (see `array_epoch`). Short epochs
    /// wrap: an append more than 2^7 trees old may be taken for a younger one's (then
    /// checked like any other: its slot holds no item of the served ticket's).
    pub(super) fn same_array(&self, h: &TreeHeader, short: u32) -> bool {
        let Some(first) = self.array_epoch else {
            return false;
        };
        let span = h.epoch.wrapping_sub(first);
        let age = (h.epoch & SHORT_EPOCH_MASK).wrapping_sub(short) & SHORT_EPOCH_MASK;
        age <= span
    }

    /// Whether the valid tree `h` sends `key` to data node `id`.
    pub(super) fn routes_to(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        key: u128,
        id: u32,
    ) -> Result<bool, FabricError> {
        if self.view.as_ref().is_none_or(|v| v.header.epoch != h.epoch) {
            self.view = Some(self.view_of(region, h)?);
        }
        Ok(self.view.as_ref().and_then(|v| v.locate(key).ok()) == Some(id))
    }

    /// Tells an appender that its item (ticket `ticket` on `node`) is applied.
    fn ack(replies: &mut Replies, node: u32, ticket: u64, meta: Meta) {
        let t = Turn {
            stale: false,
            applied: true,
            ticket: ticket as u16,
            node,
            meta,
        };
        replies.send(&t.encode());
    }
}

/// Whether ticket `t` is one the node has already served past (mod 2^16: tickets at most
/// half the ticket space behind).
pub(super) fn behind(t: u64, served: u64) -> bool {
    let d = served.wrapping_sub(t) & TICKET_MASK;
    d != 0 && d <= TICKET_MASK / 2
}

impl Handler for CanrtServer {
    fn service(&self) -> &'static str {
        "canrt"
    }

    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let r = match recv.kind {
            RecvKind::WriteImm => {
                // Its receive is free again, whatever becomes of the item.
                self.consumed(conn, replies);
                match recv.imm {
                    Some(imm) => self.apply(region, conn, imm, replies),
                    None => Err(invalid(region, 0, "WRITE_WITH_IMM without an immediate")),
                }
            }
            RecvKind::Send => match Control::decode(msg) {
                Ok(c) => match c.kind() {
                    Ok(ControlKind::Format) => match c.format_geometry() {
                        Ok(g) => self.format(region, g),
                        Err(_) => Err(invalid(region, 0, "format with a bad geometry")),
                    },
                    Ok(ControlKind::Unlock) => self.unlock(region, &c).map(|_| ()),
                    Ok(ControlKind::Resize) => match self.unlock(region, &c) {
                        Ok(true) => self.start_resize(region, c.node),
                        Ok(false) => Ok(()),
                        Err(e) => Err(e),
                    },
                    Ok(ControlKind::Skip) => self.skip(region, conn, &c),
                    Ok(ControlKind::Wait) => self.wait(region, conn, &c, replies),
                    Ok(ControlKind::Quiet) => {
                        self.quiet(conn, &c, replies);
                        Ok(())
                    }
                    Err(_) => Err(invalid(region, 0, "unknown CANRT control message")),
                },
                Err(_) => Err(invalid(region, 0, "malformed CANRT control message")),
            },
        };
        if r.is_err() {
            ServerStats::bump(&self.stats.rejected);
        }
        // A resize may finish whatever the message was (once the nodes it froze drained:
        // only the nodes this message touched can have).
        if self.resizing && !self.undrained.is_empty() {
            let touched = core::mem::take(&mut self.touched);
            self.note_drained(region, &touched);
            self.touched = touched;
        }
        self.wake(region, conn, replies);
        let p = if self.resizing {
            self.progress(region)
        } else {
            Ok(())
        };
        r.and(p)
    }

    fn recover(&mut self, region: &dyn LocalRegion) -> Result<String, FabricError> {
        let r = CanrtServer::recover(self, region)?;
        Ok(format!(
            "canrt: {} data nodes, {} items replayed, {} reserved slots dropped, {} unfrozen, \
             {} trimmed, {} corrupt",
            r.nodes, r.replayed, r.unreserved, r.unfrozen, r.trimmed, r.corrupt
        ))
    }

    /// The lock tickets of a connection are not known to the server (the lock word is a bare
    /// counter that NIC atomics bump): a dead client's ticket is skipped once a waiter has
    /// seen it stuck for a lease (see `Skip`). What the server does keep per connection,
    /// its resize waits' drain reports, goes.
    fn on_disconnect(&mut self, _region: &dyn LocalRegion, conn: usize) {
        self.drain_seen.retain(|d| d.conn != conn);
        self.waiters.retain(|_, c| *c != conn);
        self.quiet.remove(&conn);
    }

    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        let was = self.resizing;
        self.recheck_drains(region);
        let _ = self.progress(region);
        was && !self.resizing
    }
}

//! Growing the tree (paper §3.5), on the memory node's CPU.
//!
//! A client that finds its data node full reports it (`Resize`). The server freezes the data
//! nodes the split moves keys out of: the reported one and every node at least
//! three-quarters full, as many as the data array has room for (their writers hand their
//! lock back and wait; lookups go on). Every other data node keeps taking writes throughout.
//! Once every lock ticket handed out on a frozen node has been served (each message
//! re-checks only the frozen nodes it touched), the server:
//!
//! - **split** (the usual case): the full node keeps the lower half of its keys and the upper
//!   half moves to a new data node appended to the data array; the other data nodes stay
//!   where they are, untouched but for their epoch. A new header and prefix array are planned
//!   from each data node's key bounds (enough: key order is data-node order) and written into
//!   the *shadow* area, the one not published (the two areas alternate, tick-tock). Every data
//!   node takes the new epoch, the root slot is switched to the shadow area (one persisted
//!   8-byte store: the commit), the moved items are dropped from the full node, and the tree
//!   is unfrozen.
//!   A writer of a node that was not split may have read its meta word just before the new
//!   epoch reached it and append under the old one: the append is applied if the new tree
//!   routes its key to that node, else refused (lock released, item left unprocessed; the
//!   writer hears a stale acknowledgement, or sees its ticket passed with its item untouched,
//!   and writes again).
//! - **rebuild** (when the data array is out of room, or no prefix array within the format's
//!   limits separates the nodes): every data node is frozen and drained (repacking moves
//!   every item, so here every writer waits), then every live item is repacked half-full
//!   into a new data array twice as large, with a new prefix array. The old array stays
//!   frozen, and its memory goes to the server's free pool: a later rebuild builds its
//!   array there when it fits (`pool.rs` says why that is safe while stale clients may
//!   still address the old array).
//!
//! Clients READ the shadow area while it is rewritten only if their view is two resizes
//! old. The header and the prefix array carry CRC-64s ([`TreeHeader::seal`]) that a torn
//! copy fails, whatever order its words were read in; the server still zeroes the magic
//! first and writes it last, so the area is never a valid header while half written.
use super::build::{Plan, plan, plan_units};
use super::bulk::repack_plan;
use super::keys::load_key;
use super::pool::{area_need, table_off};
use super::server::{CanrtServer, Growth, ServerStats, bad_layout, invalid};
use super::view::{NodeView, TreeView};
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use remora_layouts::GlobalAddr;
use remora_layouts::canrt::{
    DataGeometry, EPOCH_MASK, FRONT_OFF, ItemOp, LOCK_OFF, MAX_DATA_NODES, MAX_SEGMENTS, Meta,
    ROOT_SLOT, TICKET_MASK, TREE_HEADER_LEN, TREE_MAGIC, TreeHeader,
};
use remora_layouts::region::{NEXT_CHUNK_OFFSET, root_offset};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// Key-value pairs sorted by key.
type Pairs = Vec<(u128, Vec<u8>)>;

/// Data nodes of the first data array.
const FIRST_CAPACITY: u64 = 16;

impl CanrtServer {
    /// Carves `len` bytes from the server's heap, taking chunks from the region allocator
    /// with the node's CPU. CANRT clients never allocate; another index sharing this node
    /// allocates with NIC atomics, which the CPU's compare-and-swap does not exclude (rule 3).
    pub(super) fn alloc(&mut self, region: &dyn LocalRegion, len: u64) -> Result<u64, FabricError> {
        let len = len.next_multiple_of(64);
        if self.heap.1 - self.heap.0 >= len {
            let at = self.heap.0;
            self.heap.0 += len;
            return Ok(at);
        }
        let chunk = region.load_u64(24)?;
        let region_len = region.load_u64(16)?;
        if !chunk.is_power_of_two() {
            return Err(invalid(region, 24, "region header chunk size is corrupt"));
        }
        let take = len.next_multiple_of(chunk);
        let mut cur = region.load_u64(NEXT_CHUNK_OFFSET)?;
        loop {
            let end = cur
                .checked_add(take)
                .filter(|&e| e <= region_len)
                .ok_or_else(|| invalid(region, NEXT_CHUNK_OFFSET, "memory node full"))?;
            let seen = region.cas_u64(NEXT_CHUNK_OFFSET, cur, end)?;
            if seen == cur {
                region.persist(NEXT_CHUNK_OFFSET, 8);
                self.heap = (cur + len, end);
                return Ok(cur);
            }
            cur = seen;
        }
    }

    /// A zeroed data array for `cap` nodes (lock words 0: no client has seen it).
    pub(super) fn new_array(
        &mut self,
        region: &dyn LocalRegion,
        g: DataGeometry,
        cap: u64,
    ) -> Result<u64, FabricError> {
        let len = cap * g.node_size();
        let off = self.alloc(region, len)?;
        let zero = [0u8; 4096];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zero.len() as u64) as usize;
            region.write(off + at, &zero[..n])?;
            at += n as u64;
        }
        Ok(off)
    }

    /// Writes a data node's meta words and `pairs` as its items (everything but the lock
    /// word, which only NIC atomics touch) into the frame at `off`. Its served ticket starts
    /// at the frame's lock count (0 in new memory; a reused frame keeps its count, see
    /// `pool.rs`), and slots its frame carries reserved for late appends stay reserved
    /// (their bytes untouched): returned as (slot, ticket), for the caller to note under the
    /// node's id. On an error the frame keeps them.
    fn write_node(
        &mut self,
        region: &dyn LocalRegion,
        g: DataGeometry,
        off: u64,
        pairs: &[(u128, Vec<u8>)],
        meta: Meta,
    ) -> Result<(Meta, Vec<(u32, u16)>), FabricError> {
        let holes = self.pool.holes.remove(&off).unwrap_or_default();
        let r = self.write_frame(region, g, off, pairs, meta, &holes);
        match r {
            Ok(m) => Ok((m, holes)),
            Err(e) => {
                if !holes.is_empty() {
                    self.pool.holes.insert(off, holes);
                }
                Err(e)
            }
        }
    }

    fn write_frame(
        &mut self,
        region: &dyn LocalRegion,
        g: DataGeometry,
        off: u64,
        pairs: &[(u128, Vec<u8>)],
        meta: Meta,
        holes: &[(u32, u16)],
    ) -> Result<Meta, FabricError> {
        let reserved = holes.iter().fold(0u32, |b, &(s, _)| b | 1 << s);
        if pairs.len() + reserved.count_ones() as usize > g.slots as usize {
            return Err(invalid(
                region,
                off,
                "no room beside the frame's reserved slots",
            ));
        }
        let mut node = core::mem::take(&mut self.scratch);
        node.clear();
        node.resize(g.node_size() as usize, 0);
        let isz = g.item_size() as usize;
        let mut bitmap = reserved;
        let mut free = (0..g.slots).filter(|s| reserved & (1 << s) == 0);
        for ((k, v), slot) in pairs.iter().zip(&mut free) {
            let at = g.slot_off(slot) as usize;
            g.encode_item(&mut node[at..at + isz], *k, v, ItemOp::Insert, 0, false)
                .map_err(bad_layout(region, off))?;
            bitmap |= 1 << slot;
        }
        let lock = region.load_u64(off + LOCK_OFF)?;
        let m = meta.with_bitmap(bitmap).with_served(lock & TICKET_MASK);
        let front = FRONT_OFF as usize;
        node[front..front + 8].copy_from_slice(&m.0.to_le_bytes());
        let r = if reserved == 0 {
            region.write(off + FRONT_OFF, &node[front..])
        } else {
            // Holes first (their tails persisted valid before the bitmap store marks them
            // live), then every other slot, then the meta word.
            let mut r = Ok(());
            for &(s, t) in holes {
                r = r.and(Self::reserve(region, g, off, s, t as u64));
            }
            for s in (0..g.slots).filter(|s| reserved & (1 << s) == 0) {
                let at = g.slot_off(s) as usize;
                r = r.and(region.write(off + at as u64, &node[at..at + isz]));
            }
            r.and(region.write(off + FRONT_OFF, &node[front..front + 8]))
        };
        self.scratch = node;
        r?;
        region.persist(off, g.node_size() as usize);
        Ok(m)
    }

    /// Writes a header and prefix array into the shadow area (or a new, larger one), header
    /// magic last; returns the header with its area filled in. Nothing points to it yet.
    /// The area also holds the pool table for the tree once published (`pool.rs`): the
    /// free runs, with `retiring` (the data array a rebuild replaces) among them.
    fn write_area(
        &mut self,
        region: &dyn LocalRegion,
        mut h: TreeHeader,
        plan: &Plan,
        retiring: Option<(u64, u64)>,
    ) -> Result<TreeHeader, FabricError> {
        let need = area_need(plan.geometry.total_len());
        let (off, len) = match self.shadow.take() {
            Some((off, len)) if len >= need => (off, len),
            small => {
                // A shadow too small for this tree waits for a smaller one (areas are only
                // ever reused as areas: see `pool.rs`).
                if let Some(a) = small {
                    self.pool.areas.push(a);
                }
                match self.pool.take_area(need) {
                    Some(a) => a,
                    None => {
                        let len = super::pool::area_len(need);
                        (self.alloc(region, len)?, len)
                    }
                }
            }
        };
        h.area_off = off;
        h.area_len = len;
        h.prefix_off = off + TREE_HEADER_LEN as u64;
        h.prefix_len = plan.geometry.total_len();
        h.height = plan.geometry.height;
        h.width = plan.geometry.widths.iter().copied().max().unwrap_or(1) as u32;
        h.n_segments = plan.segments.len() as u32;
        h.segments = [[0u64; 2]; MAX_SEGMENTS];
        for (i, s) in plan.segments.iter().enumerate() {
            h.segments[i] = s.encode();
        }
        h.validate().map_err(bad_layout(region, off))?;
        h.seal(&plan.prefix);
        region.store_u64(off, 0)?;
        region.write(h.prefix_off, &plan.prefix)?;
        // Once published, the area the valid tree has now is the shadow.
        let shadow = self.tree.map(|t| (t.area_off, t.area_len));
        let table = self.write_table(region, &h, retiring, shadow)?;
        let enc = h.encode();
        region.write(off + 8, &enc[8..])?;
        region.store_u64(off, TREE_MAGIC)?;
        region.persist(off, (table_off(&h) + table - off) as usize);
        Ok(h)
    }

    /// Makes `h` the valid tree: one persisted 8-byte store of the root slot. The area it
    /// replaces becomes the shadow.
    fn publish(&mut self, region: &dyn LocalRegion, h: TreeHeader) -> Result<(), FabricError> {
        let root = GlobalAddr::try_new(region.node(), h.area_off)
            .map_err(bad_layout(region, h.area_off))?;
        region.store_u64(root_offset(ROOT_SLOT), root.raw())?;
        region.persist(root_offset(ROOT_SLOT), 8);
        self.view = None;
        if let Some(old) = self.tree.replace(h) {
            self.shadow = Some((old.area_off, old.area_len));
        }
        Ok(())
    }

    /// The tree header for `geometry` at `epoch`, data array at `data_off` (area fields are
    /// filled by [`Self::write_area`]).
    fn header(
        g: DataGeometry,
        epoch: u32,
        data_off: u64,
        n_data: u32,
        data_cap: u64,
        array_gen: u64,
    ) -> TreeHeader {
        TreeHeader {
            magic: TREE_MAGIC,
            epoch,
            key_len: g.key_len,
            slots: g.slots,
            value_cap: g.value_cap,
            height: 0,
            width: 0,
            n_segments: 0,
            n_data,
            prefix_off: 0,
            prefix_len: 0,
            data_off,
            data_node_size: g.node_size(),
            area_off: 0,
            area_len: 0,
            data_cap,
            array_gen,
            prefix_check: 0,
            header_check: 0,
            reserved: 0,
            segments: [[0u64; 2]; MAX_SEGMENTS],
        }
    }

    /// Builds and publishes the empty tree if none is.
    pub(super) fn format(
        &mut self,
        region: &dyn LocalRegion,
        g: DataGeometry,
    ) -> Result<(), FabricError> {
        if region.load_u64(root_offset(ROOT_SLOT))? != 0 {
            self.tree(region)?;
            return Ok(());
        }
        let p = plan(&[], 1, g.key_len)
            .map_err(bad_layout(region, 0))?
            .ok_or_else(|| invalid(region, 0, "no shape for the empty tree"))?;
        self.rebuild_into(region, g, 1, &p, &[])?;
        ServerStats::bump(&self.stats.formats);
        Ok(())
    }

    /// Writes `pairs` placed by `p` into a new data array, then a header and prefix array,
    /// and publishes them.
    pub(super) fn rebuild_into(
        &mut self,
        region: &dyn LocalRegion,
        g: DataGeometry,
        epoch: u32,
        p: &Plan,
        pairs: &[(u128, Vec<u8>)],
    ) -> Result<(), FabricError> {
        let n = p.groups.len() as u64;
        let ns = g.node_size();
        let (data_off, cap, reused) = self.array_for(region, g, n, data_capacity(n))?;
        let meta = Meta::new(0, 0, false, epoch & EPOCH_MASK);
        let mut bounds = Vec::with_capacity(n as usize);
        // Reserved slots the reused frames carry: (node, slot) -> ticket.
        let mut carried = Vec::new();
        let mut r = Ok(());
        for (id, &(a, b)) in p.groups.iter().enumerate() {
            let off = data_off + id as u64 * ns;
            match self.write_node(region, g, off, &pairs[a..b], meta) {
                Ok((_, holes)) => carried.extend(holes.into_iter().map(|(s, t)| (id as u32, s, t))),
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
            bounds.push(bounds_of(&pairs[a..b]));
        }
        let old = self.tree;
        let array_gen = old.map_or(1, |t| t.array_gen + 1);
        let retiring = old.map(|t| (t.data_off, t.data_cap * t.data_node_size));
        let r = r.and_then(|()| {
            region.persist(data_off, (cap * ns) as usize);
            let h = Self::header(g, epoch, data_off, n as u32, cap, array_gen);
            let h = self.write_area(region, h, p, retiring)?;
            self.publish(region, h)?;
            Ok(h)
        });
        let h = match r {
            Ok(h) => h,
            Err(e) => {
                // Nothing published: the array's memory, and the reservations its frames
                // carried, go back to the pool.
                for &(id, s, t) in &carried {
                    let frame = self.pool.holes.entry(data_off + id as u64 * ns);
                    frame.or_default().push((s, t));
                }
                self.pool.release(data_off, cap * ns);
                return Err(e);
            }
        };
        self.array_epoch = Some(h.epoch);
        self.bounds = bounds;
        self.foreign = 0;
        // The old data array's memory goes to the pool, and the slots reserved in it stay
        // with their frames (late appends may still land there: see `pool.rs`).
        if let Some(o) = old {
            self.retire(&o);
        }
        self.reserved.clear();
        self.freeing.clear();
        for (id, s, t) in carried {
            self.reserved.insert((id, s), t);
        }
        if reused {
            ServerStats::bump(&self.stats.arrays_reused);
        }
        Ok(())
    }

    /// Starts a resize for data node `full`, reported full by its lock holder (or adds it
    /// to the resize under way). Only the nodes the split moves keys out of are frozen: the
    /// reported node and every node at least three-quarters full, as many as the data
    /// array has room for (their writers hand their lock back and wait); every other node
    /// keeps taking writes. With no room in the data array, every node is frozen for a
    /// rebuild.
    pub(super) fn start_resize(
        &mut self,
        region: &dyn LocalRegion,
        full: u32,
    ) -> Result<(), FabricError> {
        let h = self.tree(region)?;
        if full >= h.n_data {
            return Ok(());
        }
        let room = h.data_cap - h.n_data as u64;
        if self.resizing {
            if self.rebuild || self.split.contains(&full) {
                return Ok(());
            }
            if (self.split.len() as u64) < room {
                self.freeze(region, &h, full)?;
                self.split.push(full);
                return Ok(());
            }
            return self.freeze_all(region, &h);
        }
        self.resizing = true;
        self.stats.resize_clock.begin();
        self.rebuild = false;
        self.split.clear();
        self.undrained.clear();
        self.drain_seen.clear();
        if room == 0 || self.growth == Growth::WholeLevel {
            return self.freeze_all(region, &h);
        }
        self.freeze(region, &h, full)?;
        self.split.push(full);
        let nearly = (h.slots * 3).div_ceil(4);
        for id in 0..h.n_data {
            if self.split.len() as u64 >= room {
                break;
            }
            let off = h.data_node_off(id);
            if id != full && self.front(region, &h, off)?.bitmap().count_ones() >= nearly {
                self.freeze(region, &h, id)?;
                self.split.push(id);
            }
        }
        Ok(())
    }

    /// Freezes data node `id`: its next lock holders hand their tickets back. It drains
    /// once every ticket handed out is served.
    fn freeze(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        id: u32,
    ) -> Result<(), FabricError> {
        let off = h.data_node_off(id);
        let m = self.front(region, h, off)?;
        if !m.frozen() {
            Self::store_meta(region, off, m.with_frozen(true))?;
        }
        if Self::outstanding(region, off, m)? != 0 {
            self.undrained.insert(id);
        }
        Ok(())
    }

    /// Turns the resize under way into a rebuild: every data node frozen.
    fn freeze_all(&mut self, region: &dyn LocalRegion, h: &TreeHeader) -> Result<(), FabricError> {
        self.rebuild = true;
        self.split.clear();
        for id in 0..h.n_data {
            self.freeze(region, h, id)?;
        }
        Ok(())
    }

    /// Drops the frozen nodes among `ids` (the nodes a message touched) that have drained.
    pub(super) fn note_drained(&mut self, region: &dyn LocalRegion, ids: &[u32]) {
        let Some(h) = self.tree else {
            return;
        };
        for &id in ids {
            if id < h.n_data && self.undrained.contains(&id) {
                let off = h.data_node_off(id);
                let drained = self
                    .front(region, &h, off)
                    .and_then(|m| Self::outstanding(region, off, m));
                if drained == Ok(0) {
                    self.undrained.remove(&id);
                }
            }
        }
    }

    /// Re-checks every frozen node not yet drained (the server is idle: a drain seen late
    /// costs nothing then).
    pub(super) fn recheck_drains(&mut self, region: &dyn LocalRegion) {
        let ids: Vec<u32> = self.undrained.iter().copied().collect();
        self.note_drained(region, &ids);
    }

    /// Finishes a resize once every frozen node has drained (each message checks only the
    /// nodes it touched: see [`Self::note_drained`]).
    pub(super) fn progress(&mut self, region: &dyn LocalRegion) -> Result<(), FabricError> {
        if !self.resizing || !self.undrained.is_empty() {
            return Ok(());
        }
        let h = self.tree(region)?;
        let r = if self.rebuild {
            self.rebuild_all(region, &h)
        } else {
            match self.split_node(region, &h) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    // No split fits (no prefix array separates the nodes): repack, once
                    // every node has drained.
                    self.freeze_all(region, &h)?;
                    if !self.undrained.is_empty() {
                        return Ok(());
                    }
                    self.rebuild_all(region, &h)
                }
                Err(e) => Err(e),
            }
        };
        // Whatever happened, the valid tree's nodes are writable again (a failed resize
        // leaves the old tree valid; a published one's nodes are unfrozen here).
        let cur = self.tree(region)?;
        let thaw: Vec<u32> = if self.rebuild {
            (0..cur.n_data).collect()
        } else {
            let new = if cur.array_gen == h.array_gen {
                h.n_data..cur.n_data
            } else {
                0..0
            };
            self.split.iter().copied().chain(new).collect()
        };
        for id in thaw {
            if id < cur.n_data {
                let off = cur.data_node_off(id);
                let m = self.front(region, &cur, off)?;
                Self::store_meta(region, off, m.with_frozen(false))?;
            }
        }
        self.resizing = false;
        self.stats.resize_clock.end();
        self.rebuild = false;
        self.split.clear();
        self.undrained.clear();
        match r {
            Ok(()) => ServerStats::bump(&self.stats.resizes),
            Err(_) => {
                // The old tree stays (nothing was published). The resize runs inside some
                // client's message, not necessarily the reporter's: refusing that message
                // would drop an innocent connection. Writers of the full node find it still
                // full and ask again, or (no room left on the node) report the node full.
                ServerStats::bump(&self.stats.failed_resizes);
                // A failed split may have narrowed bounds it did not publish.
                self.bounds.clear();
            }
        }
        Ok(())
    }

    /// The valid tree as a client sees it (header and prefix array from the region).
    pub(super) fn view_of(
        &self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
    ) -> Result<TreeView, FabricError> {
        let mut prefix = vec![0u8; h.prefix_len as usize];
        region.read(h.prefix_off, &mut prefix)?;
        let root = GlobalAddr::try_new(region.node(), h.area_off)
            .map_err(bad_layout(region, h.area_off))?;
        TreeView::new(*h, root.raw(), prefix).map_err(bad_layout(region, h.prefix_off))
    }

    /// Key bounds of every data node, from its live items (after a restart).
    pub(super) fn load_bounds(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
    ) -> Result<(), FabricError> {
        let g = h.data();
        let mut bounds = Vec::with_capacity(h.n_data as usize);
        for id in 0..h.n_data {
            let off = h.data_node_off(id);
            let m = self.front(region, h, off)?;
            let mut b = None;
            for s in 0..g.slots {
                if m.bitmap() & (1 << s) != 0 && !Self::reserved_slot(region, g, off, s)? {
                    let k = load_key(region, &g, off + g.slot_off(s))?;
                    b = widen(b, k);
                }
            }
            bounds.push(b);
        }
        self.bounds = bounds;
        Ok(())
    }

    /// The live pairs of data node `id`, sorted by key.
    fn node_pairs(
        &self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        id: u32,
    ) -> Result<Pairs, FabricError> {
        let g = h.data();
        let off = h.data_node_off(id);
        let mut buf = vec![0u8; g.node_size() as usize];
        region.read(off, &mut buf)?;
        let nv = NodeView::parse(g, &buf).map_err(bad_layout(region, off))?;
        let mut pairs = Vec::new();
        for s in nv.live_slots() {
            match nv.item(s) {
                Ok(it) => pairs.push((it.key, it.value.to_vec())),
                Err(_) => ServerStats::bump(&self.stats.rejected),
            }
        }
        pairs.sort_by_key(|p| p.0);
        pairs.dedup_by_key(|p| p.0);
        Ok(pairs)
    }

    /// The in-place split of the reported node, and of every other node at least
    /// three-quarters full while the data array has room (fewer resizes to come). False
    /// when it cannot be done (no room in the data array, or no prefix array separates the
    /// nodes): then the caller rebuilds.
    fn split_node(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
    ) -> Result<bool, FabricError> {
        let g = h.data();
        let mut room = h.data_cap - h.n_data as u64;
        if room == 0 {
            return Ok(false);
        }
        if self.bounds.len() != h.n_data as usize {
            self.load_bounds(region, h)?;
        }
        let view = match self.view.take() {
            Some(v) if v.header.epoch == h.epoch => v,
            _ => self.view_of(region, h)?,
        };
        // (node, its new sibling, the pairs that move there)
        let mut splits: Vec<(u32, u32, Pairs)> = Vec::new();
        let mut next = h.n_data;
        let frozen = self.split.clone();
        // Per data node, its entry in `splits` (a node is split once).
        let mut split_of: Vec<u32> = vec![u32::MAX; h.n_data as usize];
        for &id in &frozen {
            if room == 0 || id >= h.n_data || split_of[id as usize] != u32::MAX {
                continue;
            }
            let mut pairs = self.node_pairs(region, h, id)?;
            if pairs.len() < 2 {
                continue;
            }
            let high = pairs.split_off(pairs.len() / 2);
            self.bounds[id as usize] = bounds_of(&pairs);
            split_of[id as usize] = splits.len() as u32;
            splits.push((id, next, high));
            next += 1;
            room -= 1;
        }
        if splits.is_empty() {
            return Ok(false);
        }
        // Boundary keys of every reachable node in key order, split nodes in two (key order
        // is data-node order, so bounds are all a prefix array needs to separate nodes).
        let mut keys = Vec::new();
        let mut units = Vec::new();
        let mut push = |b: Option<(u128, u128)>, id: u32| {
            if let Some((lo, hi)) = b {
                keys.push(lo);
                units.push(id);
                if hi != lo {
                    keys.push(hi);
                    units.push(id);
                }
            }
        };
        for &id in view.order() {
            push(self.bounds[id as usize], id);
            let split = split_of
                .get(id as usize)
                .and_then(|&i| splits.get(i as usize));
            if let Some((_, new, high)) = split {
                push(bounds_of(high), *new);
            }
        }
        let planned = if keys.windows(2).any(|w| w[0] >= w[1]) {
            // Bounds that touch (corrupt): let the rebuild sort it out.
            None
        } else {
            plan_units(&keys, &units, h.key_len).map_err(bad_layout(region, h.area_off))?
        };
        let Some(p) = planned else {
            self.bounds.clear();
            return Ok(false);
        };
        let epoch = h.epoch.wrapping_add(1);
        // The new nodes (never seen by a client: lock words 0, so is their served).
        let meta = Meta::new(0, 0, true, epoch & EPOCH_MASK);
        for (_, new, high) in &splits {
            let (_, holes) = self.write_node(region, g, h.data_node_off(*new), high, meta)?;
            // Slots its frame carried from a retired array stay reserved in the new node.
            for (s, t) in holes {
                self.reserved.insert((*new, s), t);
            }
        }
        let mut nh = *h;
        nh.epoch = epoch;
        nh.n_data = next;
        let nh = self.write_area(region, nh, &p, None)?;
        // Every node takes the new epoch (the split ones still frozen): a client with an
        // older view that reads one refreshes before trusting it. A writer of a node that
        // was not split may have read its meta word just before, and append under the old
        // epoch: `apply` takes that append if the new tree routes its key there too.
        for id in 0..h.n_data {
            let off = h.data_node_off(id);
            let m = self.front(region, h, off)?;
            Self::store_meta(region, off, m.with_epoch(epoch))?;
        }
        self.publish(region, nh)?;
        // The replaced tree is of the same data array (a server that did not publish the
        // array's first tree knows it from here on).
        self.array_epoch.get_or_insert(h.epoch);
        // The moved items leave the split nodes (recovery does the same after a crash here).
        // Reserved slots stay reserved: the node keeps its memory, and a skipped holder's
        // late append may still land in one.
        for (id, _, high) in &splits {
            let off = h.data_node_off(*id);
            let m = self.front(region, h, off)?;
            let mut bm = m.bitmap();
            for s in 0..g.slots {
                if bm & (1 << s) != 0 && !Self::reserved_slot(region, g, off, s)? {
                    let k = load_key(region, &g, off + g.slot_off(s))?;
                    if high.binary_search_by_key(&k, |p| p.0).is_ok() {
                        bm &= !(1 << s);
                    }
                }
            }
            Self::store_meta(region, off, m.with_bitmap(bm))?;
            region.persist(off + FRONT_OFF, 8);
        }
        for (_, _, high) in &splits {
            self.bounds.push(bounds_of(high));
        }
        Ok(true)
    }

    /// The full rebuild: every live item repacked half full into a new data array.
    fn rebuild_all(&mut self, region: &dyn LocalRegion, h: &TreeHeader) -> Result<(), FabricError> {
        let view = self.view_of(region, h)?;
        let mut pairs = Vec::new();
        for &id in view.order() {
            for (k, v) in self.node_pairs(region, h, id)? {
                if view.locate(k).ok() == Some(id) {
                    pairs.push((k, v));
                }
            }
        }
        pairs.sort_by_key(|p| p.0);
        pairs.dedup_by_key(|p| p.0);
        let keys: Vec<u128> = pairs.iter().map(|p| p.0).collect();
        // The repack rule (`bulk.rs`, shared with bulk loading): half full under split
        // growth, one slot short of full per character under the paper's.
        let p = repack_plan(self.growth, h.slots, &keys, h.key_len)
            .map_err(bad_layout(region, h.area_off))?
            .ok_or_else(|| invalid(region, h.area_off, "no tree shape holds the keys"))?;
        self.rebuild_into(region, h.data(), h.epoch.wrapping_add(1), &p, &pairs)
    }
}

/// The capacity of a new data array for `n` nodes: twice the nodes (room to split into),
/// but never past what a header may name. (A capacity past it made every rebuild past 2^19
/// nodes fail, and fail again at each resize after: a 10M-key load never finished.)
pub(super) fn data_capacity(n: u64) -> u64 {
    (2 * n).clamp(FIRST_CAPACITY, MAX_DATA_NODES).max(n)
}

/// Smallest and largest key of sorted pairs.
fn bounds_of(pairs: &[(u128, Vec<u8>)]) -> Option<(u128, u128)> {
    Some((pairs.first()?.0, pairs.last()?.0))
}

/// `b` widened to hold `k`.
pub(super) fn widen(b: Option<(u128, u128)>, k: u128) -> Option<(u128, u128)> {
    Some(match b {
        Some((lo, hi)) => (lo.min(k), hi.max(k)),
        None => (k, k),
    })
}

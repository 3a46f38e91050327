//! The compute-side radix cache: copies of internal nodes by address, bounded in bytes.
//!
//! A lookup walks cached nodes from the root down to the slot of its key and reads the leaf
//! directly (one READ). Entries can be stale; the reverse pointer of whatever is read next
//! (leaf or node) must name the cached node it was reached from, otherwise the entry is
//! dropped (the reverse check). Correctness never rests on the cache: a leaf is accepted
//! only with the right key, and absence is only decided on a freshly read node.
//!
//! Layout, for a cheap walk: one pool per node type, each entry one cache-line-aligned
//! block holding the node's address, header and slots inline, and next to every slot a
//! *hint*: the entry id of the child that slot led to last time. A hint is only a guess —
//! it is used only if the entry it names still caches the child's address (so eviction and
//! moves never make it wrong, just useless), otherwise the address index is probed and the
//! hint refreshed. A walk thus costs about one entry (one or two lines) per level.
//!
//! Replacement, under pressure: the least recently used of a few sampled entries goes,
//! the deeper one on a tie, never the pinned root. Every walk stamps each entry it passes
//! (through [`RadixCache::lookup`] and [`RadixCache::child`]), root first, so a node is
//! stamped at least as recently as any descendant a walk reached through it (a fill is
//! one epoch newer than the walk that led to it): of the nodes every lookup crosses, the
//! hot ones stay, as long as the cache can hold them at all, and the cache keeps a
//! connected top of the tree (a walk from the root cannot use a node whose parent was
//! evicted). Pools grow to the budget once, then reuse their memory.
//!
//! The authors' cache (dmemsys/SMART `src/RadixCache.cpp`) is keyed by key prefix
//! instead: a lookup starts at the deepest cached node on its key's path whatever is
//! cached above it, so it can evict first-in-first-out (a queue of insertions,
//! `eviction_list`; a hit does not reorder it) without losing the nodes below. It never
//! caches the root (`add_to_cache` returns at depth 0), and counts an entry's bytes as its
//! slots (8 B each) plus 9 B (`CacheEntry::content_size`) and its prefix-tree records.
use super::remote::{Find, NodeImg};
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use remora_layouts::GlobalAddr;
use remora_layouts::smart::{Header, NodeType, Slot};
use std_alloc::vec::Vec;

/// Entries compared per eviction (each a random pick): an approximation of least recently
/// used that costs a bounded few loads, whatever the cache holds.
const EVICT_SAMPLES: usize = 8;

/// A cached entry: the pool (node type) in the top bits, the position in the pool below.
pub(crate) type EntryId = u32;
const CLASS_SHIFT: u32 = 28;
const POS_MASK: u32 = (1 << CLASS_SHIFT) - 1;
const NONE: u32 = u32::MAX;

fn class(ty: NodeType) -> u32 {
    match ty {
        NodeType::N4 => 0,
        NodeType::N16 => 1,
        NodeType::N48 => 2,
        NodeType::N256 => 3,
    }
}

/// One cached internal node of `N` slots, slots and child hints inline. Hints are atomics:
/// walks refresh them under a shared guard of the node's cache (a hint is only a guess, so
/// a lost refresh costs one index probe later).
#[repr(C, align(64))]
struct Entry<const N: usize> {
    addr: GlobalAddr,
    header: Header,
    slots: [Slot; N],
    hints: [AtomicU32; N],
}

/// A read-only view of a cached node.
#[derive(Clone, Copy)]
pub(crate) struct NodeRef<'a> {
    pub header: Header,
    pub slots: &'a [Slot],
}

impl NodeRef<'_> {
    pub fn find(&self, b: u8) -> Find {
        find_in(self.header, self.slots, b)
    }
}

/// [`NodeImg::find`] over a cached copy.
pub(crate) fn find_in(header: Header, slots: &[Slot], b: u8) -> Find {
    if header.node_type() == NodeType::N256 {
        let Some(&s) = slots.get(b as usize) else {
            return Find::Absent {
                free: None,
                frozen: false,
            };
        };
        return if s.is_empty() {
            Find::Absent {
                free: Some(b as usize),
                frozen: s.is_frozen(),
            }
        } else {
            Find::Match {
                idx: b as usize,
                slot: s,
            }
        };
    }
    let mut frozen = false;
    for (idx, s) in slots.iter().enumerate() {
        frozen |= s.is_frozen();
        if s.is_empty() {
            return Find::Absent {
                free: Some(idx),
                frozen,
            };
        }
        if s.pkey() == b {
            return Find::Match { idx, slot: *s };
        }
    }
    Find::Absent { free: None, frozen }
}

/// One pool: the entries of one node size, and beside them (not inside: an `Entry<4>` is
/// one line exactly) the epoch at which each was last used.
struct Slab<const N: usize> {
    e: Vec<Entry<N>>,
    used: Vec<AtomicU32>,
}

impl<const N: usize> Slab<N> {
    const fn new() -> Slab<N> {
        Slab {
            e: Vec::new(),
            used: Vec::new(),
        }
    }
    fn clear(&mut self) {
        self.e.clear();
        self.used.clear();
    }
    fn capacity_bytes(&self) -> usize {
        self.e.capacity() * core::mem::size_of::<Entry<N>>()
            + self.used.capacity() * core::mem::size_of::<AtomicU32>()
    }
}

/// What the cache needs of one pool, whatever its node size.
trait Pool {
    fn len(&self) -> usize;
    fn addr(&self, pos: usize) -> Option<GlobalAddr>;
    fn view(&self, pos: usize) -> Option<NodeRef<'_>>;
    /// Overwrites the header and slots of entry `pos` (same node type); hints kept.
    fn refresh(&mut self, pos: usize, header: Header, slots: &[Slot]);
    fn set_slot(&mut self, pos: usize, idx: usize, slot: Slot);
    fn hint(&self, pos: usize, idx: usize) -> EntryId;
    fn set_hint(&self, pos: usize, idx: usize, hint: EntryId);
    /// Appends an entry last used at `epoch`.
    fn push(&mut self, addr: GlobalAddr, header: Header, slots: &[Slot], epoch: u32);
    /// The epoch entry `pos` was last used at.
    fn used(&self, pos: usize) -> u32;
    /// Marks entry `pos` used at `epoch` (a shared-guard write, like a hint's).
    fn touch(&self, pos: usize, epoch: u32);
    /// Removes entry `pos`; the last entry moves into its place.
    fn swap_remove(&mut self, pos: usize);
    /// Bytes charged per entry (the entry and its index slots).
    fn cost(&self) -> usize;
}

impl<const N: usize> Pool for Slab<N> {
    fn len(&self) -> usize {
        self.e.len()
    }
    fn addr(&self, pos: usize) -> Option<GlobalAddr> {
        self.e.get(pos).map(|e| e.addr)
    }
    fn view(&self, pos: usize) -> Option<NodeRef<'_>> {
        self.e.get(pos).map(|e| NodeRef {
            header: e.header,
            slots: &e.slots,
        })
    }
    fn refresh(&mut self, pos: usize, header: Header, slots: &[Slot]) {
        if let Some(e) = self.e.get_mut(pos) {
            e.header = header;
            let n = slots.len().min(N);
            e.slots[..n].copy_from_slice(&slots[..n]);
            e.slots[n..].fill(Slot::EMPTY);
        }
    }
    fn set_slot(&mut self, pos: usize, idx: usize, slot: Slot) {
        if let Some(s) = self.e.get_mut(pos).and_then(|e| e.slots.get_mut(idx)) {
            *s = slot;
        }
    }
    fn hint(&self, pos: usize, idx: usize) -> EntryId {
        self.e
            .get(pos)
            .and_then(|e| e.hints.get(idx))
            .map_or(NONE, |h| h.load(Relaxed))
    }
    fn set_hint(&self, pos: usize, idx: usize, hint: EntryId) {
        if let Some(h) = self.e.get(pos).and_then(|e| e.hints.get(idx)) {
            h.store(hint, Relaxed);
        }
    }
    fn push(&mut self, addr: GlobalAddr, header: Header, slots: &[Slot], epoch: u32) {
        let mut e = Entry {
            addr,
            header,
            slots: [Slot::EMPTY; N],
            hints: core::array::from_fn(|_| AtomicU32::new(NONE)),
        };
        let n = slots.len().min(N);
        e.slots[..n].copy_from_slice(&slots[..n]);
        self.e.push(e);
        self.used.push(AtomicU32::new(epoch));
    }
    fn used(&self, pos: usize) -> u32 {
        self.used.get(pos).map_or(0, |u| u.load(Relaxed))
    }
    fn touch(&self, pos: usize, epoch: u32) {
        // Written only when it changes: a hot entry's line is not dirtied by every walk.
        if let Some(u) = self.used.get(pos)
            && u.load(Relaxed) != epoch
        {
            u.store(epoch, Relaxed);
        }
    }
    fn swap_remove(&mut self, pos: usize) {
        if pos < self.e.len() {
            self.e.swap_remove(pos);
            self.used.swap_remove(pos);
        }
    }
    fn cost(&self) -> usize {
        // The entry, its epoch, plus two index slots (the index stays at most half full).
        core::mem::size_of::<Entry<N>>()
            + core::mem::size_of::<AtomicU32>()
            + 2 * core::mem::size_of::<u32>()
    }
}

pub(crate) struct RadixCache {
    /// Open-addressing index from node address to entry id.
    index: Vec<EntryId>,
    n4: Slab<4>,
    n16: Slab<16>,
    n48: Slab<48>,
    n256: Slab<256>,
    bytes: usize,
    budget: usize,
    rng: u64,
    /// The replacement clock: advanced by every fill (a miss), read by walks to stamp the
    /// entries they pass.
    epoch: u32,
    pinned: GlobalAddr,
    /// Where the pinned node (the root) was last found.
    pinned_id: AtomicU32,
    /// Fabric time when the cache was last emptied (reclamation bounds its age).
    pub(crate) started: u64,
}

/// Runs `$body` with `$p` bound to the pool of class `$class` (static dispatch, hot path).
macro_rules! on_pool {
    ($self:expr, $class:expr, |$p:ident| $body:expr) => {
        match $class {
            0 => {
                let $p = &$self.n4;
                $body
            }
            1 => {
                let $p = &$self.n16;
                $body
            }
            2 => {
                let $p = &$self.n48;
                $body
            }
            _ => {
                let $p = &$self.n256;
                $body
            }
        }
    };
}

fn hash(addr: GlobalAddr) -> usize {
    (addr.raw().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize
}

fn id(class: u32, pos: usize) -> EntryId {
    (class << CLASS_SHIFT) | pos as u32
}

fn split(id: EntryId) -> (u32, usize) {
    (id >> CLASS_SHIFT, (id & POS_MASK) as usize)
}

impl RadixCache {
    /// A cache of at most `budget` bytes (0: disabled).
    pub fn new(budget: usize) -> RadixCache {
        let mut c = RadixCache {
            index: Vec::new(),
            n4: Slab::new(),
            n16: Slab::new(),
            n48: Slab::new(),
            n256: Slab::new(),
            bytes: 0,
            budget,
            rng: 0x2545_F491_4F6C_DD1D,
            epoch: 0,
            pinned: GlobalAddr::NULL,
            pinned_id: AtomicU32::new(NONE),
            started: 0,
        };
        if budget > 0 {
            let slots = (2 * budget / c.n4.cost())
                .clamp(64, 1 << 24)
                .next_power_of_two();
            c.index = std_alloc::vec![NONE; slots];
        }
        c
    }

    fn pool(&self, class: u32) -> &dyn Pool {
        on_pool!(self, class, |p| p)
    }

    fn pool_mut(&mut self, class: u32) -> &mut dyn Pool {
        match class {
            0 => &mut self.n4,
            1 => &mut self.n16,
            2 => &mut self.n48,
            _ => &mut self.n256,
        }
    }

    pub fn enabled(&self) -> bool {
        !self.index.is_empty()
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn len(&self) -> usize {
        self.n4.e.len() + self.n16.e.len() + self.n48.e.len() + self.n256.e.len()
    }
    /// Bytes the cache holds in memory: its preallocated index and its pools' capacity.
    pub fn footprint(&self) -> usize {
        self.index.capacity() * core::mem::size_of::<EntryId>()
            + self.n4.capacity_bytes()
            + self.n16.capacity_bytes()
            + self.n48.capacity_bytes()
            + self.n256.capacity_bytes()
    }
    /// The node never evicted (`NULL`: none yet).
    pub fn pinned(&self) -> GlobalAddr {
        self.pinned
    }
    /// Never evict this node (the root).
    pub fn pin(&mut self, addr: GlobalAddr) {
        self.pinned = addr;
        self.pinned_id.store(NONE, Relaxed);
    }

    fn addr_of(&self, id: EntryId) -> Option<GlobalAddr> {
        let (c, pos) = split(id);
        on_pool!(self, c, |p| p.e.get(pos).map(|e| e.addr))
    }

    /// (position in the index, entry id if present)
    fn probe(&self, addr: GlobalAddr) -> (usize, Option<EntryId>) {
        let mask = self.index.len() - 1;
        let mut p = hash(addr) & mask;
        loop {
            match self.index[p] {
                NONE => return (p, None),
                i if self.addr_of(i) == Some(addr) => return (p, Some(i)),
                _ => p = (p + 1) & mask,
            }
        }
    }

    /// The entry caching `addr`, if any.
    pub fn lookup(&self, addr: GlobalAddr) -> Option<EntryId> {
        if !self.enabled() {
            return None;
        }
        let pinned_id = self.pinned_id.load(Relaxed);
        if addr == self.pinned && self.addr_of(pinned_id) == Some(addr) {
            return Some(pinned_id);
        }
        let found = self.probe(addr).1?;
        if addr == self.pinned {
            self.pinned_id.store(found, Relaxed);
        }
        self.touch(found);
        Some(found)
    }

    /// Marks entry `id` used now.
    fn touch(&self, id: EntryId) {
        let (c, pos) = split(id);
        on_pool!(self, c, |p| Pool::touch(p, pos, self.epoch));
    }

    /// The node cached in entry `id` (as returned by [`Self::lookup`] or [`Self::child`],
    /// with no insertion or removal since).
    pub fn node(&self, id: EntryId) -> Option<NodeRef<'_>> {
        let (c, pos) = split(id);
        on_pool!(self, c, |p| Pool::view(p, pos))
    }

    /// The entry caching `child`, which slot `idx` of entry `id` points at: the slot's hint
    /// when it still names `child`'s entry, else an index probe (which refreshes the hint).
    pub fn child(&self, id: EntryId, idx: usize, child: GlobalAddr) -> Option<EntryId> {
        let (c, pos) = split(id);
        let hint = on_pool!(self, c, |p| Pool::hint(p, pos, idx));
        if hint != NONE && self.addr_of(hint) == Some(child) {
            self.touch(hint);
            return Some(hint);
        }
        let found = self.probe(child).1?;
        self.pool(c).set_hint(pos, idx, found);
        self.touch(found);
        Some(found)
    }

    /// For tests: the address the entry caching `addr` holds, found by the index alone.
    #[cfg(test)]
    pub fn get(&self, addr: GlobalAddr) -> Option<GlobalAddr> {
        if !self.enabled() {
            return None;
        }
        self.probe(addr).1.and_then(|i| self.addr_of(i))
    }

    /// Whether one more node of type `ty` fits without evicting another.
    pub fn fits(&self, ty: NodeType) -> bool {
        let cost = self.pool(class(ty)).cost();
        self.enabled() && self.bytes + cost <= self.budget && self.len() < self.index.len() / 2
    }

    /// Caches (or refreshes) a freshly read node.
    pub fn put(&mut self, img: &NodeImg) {
        if !self.enabled() || img.header.is_obsolete() {
            return;
        }
        let slots = img.live_slots();
        let cls = class(img.ty());
        // A fill is a miss: it advances the replacement clock.
        self.epoch = self.epoch.wrapping_add(1);
        if let (_, Some(i)) = self.probe(img.addr) {
            let (c, pos) = split(i);
            if c == cls {
                let epoch = self.epoch;
                let pool = self.pool_mut(c);
                pool.refresh(pos, img.header, slots);
                pool.touch(pos, epoch);
                return;
            }
            // Same address, another type: re-file it in the right pool.
            self.remove(img.addr);
        }
        let cost = self.pool(cls).cost();
        if cost > self.budget {
            return;
        }
        while self.bytes + cost > self.budget || self.len() + 1 > self.index.len() / 2 {
            if !self.evict_one() {
                return;
            }
        }
        let (p, _) = self.probe(img.addr);
        let pos = self.pool(cls).len();
        if pos > POS_MASK as usize {
            return;
        }
        let epoch = self.epoch;
        let pool = self.pool_mut(cls);
        pool.push(img.addr, img.header, slots, epoch);
        self.index[p] = id(cls, pos);
        self.bytes += cost;
    }

    /// Updates one cached slot after this client changed it remotely.
    pub fn set_slot(&mut self, addr: GlobalAddr, idx: usize, slot: Slot) {
        if !self.enabled() {
            return;
        }
        if let (_, Some(i)) = self.probe(addr) {
            let (c, pos) = split(i);
            self.pool_mut(c).set_slot(pos, idx, slot);
        }
    }

    /// Drops an entry; true if there was one.
    pub fn remove(&mut self, addr: GlobalAddr) -> bool {
        if !self.enabled() {
            return false;
        }
        let (mut hole, Some(i)) = self.probe(addr) else {
            return false;
        };
        // Backward-shift deletion keeps every probe chain unbroken.
        let mask = self.index.len() - 1;
        let mut p = (hole + 1) & mask;
        while self.index[p] != NONE {
            let moved = self.addr_of(self.index[p]).unwrap_or(GlobalAddr::NULL);
            let home = hash(moved) & mask;
            // Move p into the hole if its home is not in (hole, p].
            let dist_home = p.wrapping_sub(home) & mask;
            let dist_hole = p.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                self.index[hole] = self.index[p];
                hole = p;
            }
            p = (p + 1) & mask;
        }
        self.index[hole] = NONE;
        let (c, pos) = split(i);
        let pool = self.pool_mut(c);
        let cost = pool.cost();
        let last = pool.len() - 1;
        pool.swap_remove(pos);
        self.bytes -= cost;
        if pos != last {
            // The entry that moved from `last` to `pos` must be re-pointed. (Hints naming
            // either position fail their address check and are refreshed on use.)
            let moved = self.pool(c).addr(pos).unwrap_or(GlobalAddr::NULL);
            let (from, to) = (id(c, last), id(c, pos));
            let mut p = hash(moved) & mask;
            while self.index[p] != NONE {
                if self.index[p] == from {
                    self.index[p] = to;
                    break;
                }
                p = (p + 1) & mask;
            }
        }
        true
    }

    /// Drops every entry (keeping the memory), as of fabric time `now`.
    pub fn clear(&mut self, now: u64) {
        self.index.fill(NONE);
        self.n4.clear();
        self.n16.clear();
        self.n48.clear();
        self.n256.clear();
        self.bytes = 0;
        self.pinned_id.store(NONE, Relaxed);
        self.started = now;
    }

    /// The entry at position `k` of all pools in turn (N4s first), if any.
    fn nth(&self, mut k: usize) -> Option<EntryId> {
        for c in 0..4 {
            let n = self.pool(c).len();
            if k < n {
                return Some(id(c, k));
            }
            k -= n;
        }
        None
    }

    /// Evicts the least recently used of [`EVICT_SAMPLES`] random entries (the deepest on
    /// a tie), never the pinned root; false if nothing could be evicted.
    fn evict_one(&mut self) -> bool {
        let n = self.len();
        if n == 0 {
            return false;
        }
        // (age in epochs, depth, address) of the best victim so far.
        let mut best: Option<(u32, usize, GlobalAddr)> = None;
        for i in 0..EVICT_SAMPLES {
            let k = if n <= EVICT_SAMPLES {
                // Few entries: look at each (a sample could miss the only candidate).
                if i >= n {
                    break;
                }
                i
            } else {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                (self.rng % n as u64) as usize
            };
            let Some(e) = self.nth(k) else { continue };
            let (c, pos) = split(e);
            let pool = self.pool(c);
            let (Some(addr), Some(view)) = (pool.addr(pos), pool.view(pos)) else {
                continue;
            };
            if addr == self.pinned {
                continue;
            }
            let age = self.epoch.wrapping_sub(pool.used(pos));
            let depth = view.header.prefix_start();
            if best.is_none_or(|(a, d, _)| (age, depth) > (a, d)) {
                best = Some((age, depth, addr));
            }
        }
        match best {
            Some((_, _, victim)) => self.remove(victim),
            // Every entry looked at was the root (it alone is cached, or a vanishing chance
            // with more): the fill is skipped.
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(off: u64, ty: NodeType) -> NodeImg {
        at_depth(off, ty, 1)
    }

    fn at_depth(off: u64, ty: NodeType, depth: usize) -> NodeImg {
        NodeImg {
            addr: GlobalAddr::new(0, off),
            rev: 0,
            header: Header::new(depth, ty, &[]).unwrap(),
            slots: [Slot::EMPTY; 256],
            t0: 0,
        }
    }

    /// Under pressure the nodes every lookup crosses stay: a walk root -> 256-way node ->
    /// small node, repeated between fills of nodes used once, keeps its whole path cached,
    /// however many fills evict. (With random eviction instead, this fails.)
    #[test]
    fn hot_top_levels_survive_pressure() {
        let n256 = RadixCache::new(1 << 20).pool(class(NodeType::N256)).cost();
        let n4 = RadixCache::new(1 << 20).pool(class(NodeType::N4)).cost();
        // The root, 8 second-level 256-way nodes, and some 30 small nodes.
        let mut c = RadixCache::new(9 * n256 + 30 * n4);
        let root = GlobalAddr::new(0, 1 << 20);
        c.pin(root);
        c.put(&at_depth(1 << 20, NodeType::N256, 0));
        let l1 = |i: u64| GlobalAddr::new(0, (2 << 20) + i * 4096);
        let deep = |i: u64| GlobalAddr::new(0, (8 << 20) + i * 64);
        for i in 0..8 {
            c.put(&at_depth(l1(i).offset(), NodeType::N256, 1));
        }
        // Hot paths: second-level nodes 0..3, each with one small child below.
        for i in 0..4 {
            c.put(&at_depth(deep(i).offset(), NodeType::N4, 2));
        }
        let walk = |c: &RadixCache, i: u64| -> bool {
            let Some(r) = c.lookup(root) else {
                return false;
            };
            let Some(m) = c.child(r, i as usize, l1(i)) else {
                return false;
            };
            c.child(m, 0, deep(i)).is_some()
        };
        for round in 0..2000u64 {
            for i in 0..4 {
                assert!(walk(&c, i), "round {round}: hot path {i} evicted");
            }
            // A node read once (a cold key's), below a cold second-level node.
            c.put(&at_depth(deep(100 + round).offset(), NodeType::N4, 2));
            assert!(c.bytes() <= 9 * n256 + 30 * n4);
        }
        // The cold nodes did get evicted: the cache is full and cycling.
        assert!(c.get(deep(100)).is_none());
        assert!(c.get(deep(2099)).is_some());
    }

    #[test]
    fn put_get_remove_and_evict() {
        let mut c = RadixCache::new(8 << 10);
        for i in 1..200u64 {
            let ty = NodeType::ALL[(i % 3) as usize];
            c.put(&img(i * 64, ty));
            assert!(c.bytes() <= 8 << 10);
        }
        let present: Vec<u64> = (1..200u64)
            .filter(|i| c.get(GlobalAddr::new(0, i * 64)).is_some())
            .collect();
        assert_eq!(present.len(), c.len());
        for i in &present {
            assert!(c.remove(GlobalAddr::new(0, i * 64)));
            assert!(c.get(GlobalAddr::new(0, i * 64)).is_none());
            // Every other remaining entry is still found after the backward shift.
            for j in &present {
                if j > i {
                    let a = GlobalAddr::new(0, j * 64);
                    assert_eq!(c.get(a), Some(a), "lost {j} after {i}");
                }
            }
        }
        assert_eq!(c.len(), 0);
        assert_eq!(c.bytes(), 0);
        let mut off = RadixCache::new(0);
        off.put(&img(64, NodeType::N4));
        assert!(off.get(GlobalAddr::new(0, 64)).is_none());
        assert!(off.lookup(GlobalAddr::new(0, 64)).is_none());
    }

    #[test]
    fn hints_survive_eviction_and_moves() {
        let mut c = RadixCache::new(1 << 20);
        let root = GlobalAddr::new(0, 64);
        c.pin(root);
        let mut r = img(64, NodeType::N256);
        for b in 0..8u64 {
            let child = GlobalAddr::new(0, 4096 * (b + 1));
            r.slots[b as usize] = Slot::node(b as u8, child, NodeType::N4).unwrap();
            c.put(&img(4096 * (b + 1), NodeType::N4));
        }
        c.put(&r);
        let rid = c.lookup(root).unwrap();
        for b in 0..8u64 {
            let child = GlobalAddr::new(0, 4096 * (b + 1));
            let cid = c.child(rid, b as usize, child).unwrap();
            assert_eq!(c.addr_of(cid), Some(child));
        }
        // Removing child 0 moves the last N4 entry into its place: every hint must still
        // resolve to the right node or to nothing.
        assert!(c.remove(GlobalAddr::new(0, 4096)));
        let rid = c.lookup(root).unwrap();
        assert!(c.child(rid, 0, GlobalAddr::new(0, 4096)).is_none());
        for b in 1..8u64 {
            let child = GlobalAddr::new(0, 4096 * (b + 1));
            let cid = c.child(rid, b as usize, child).unwrap();
            assert_eq!(c.addr_of(cid), Some(child));
        }
        // A node re-read with another type is re-filed; its old hint is not trusted.
        c.put(&img(4096 * 2, NodeType::N16));
        let rid = c.lookup(root).unwrap();
        let cid = c.child(rid, 1, GlobalAddr::new(0, 8192)).unwrap();
        let n = c.node(cid).unwrap();
        assert_eq!(c.addr_of(cid), Some(GlobalAddr::new(0, 8192)));
        assert_eq!(n.header.node_type(), NodeType::N16);
        assert_eq!(n.slots.len(), 16);
    }
}

//! The B-link tree itself: the handle, its page pool, lock and node lookups, and the
//! key-value API. Its mechanisms live beside it: `read.rs` (traversal, lookups, scans),
//! `write.rs` (writes, splits, separators), `repair.rs` (redo records, takeovers, torn
//! pages); the descriptor and opening a tree are in `open.rs`.
use super::lock::{Got, Locks};
use super::node::NodeCache;
use super::open::NodeLocks;
use super::wait::Patience;
use super::write::Change;
use super::{PageCheck, ShermanConfig, ShermanError};
use crate::alloc::RemoteAllocator;
use crate::fabric::Endpoint;
use crate::index::KvIndex;
use crate::lease::LeaseConfig;
use core::cell::{Cell, RefCell};
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{Geometry, KEY_INFINITY, PageHeader, encode_leaf_entry, seal};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// A leaf's live entries as a scan sorts them: key, slot, value length.
pub(super) type ScanBatch = Vec<(u64, usize, usize)>;

/// A handle's lock and split counters ([`Sherman::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShermanStats {
    /// Page and leaf locks taken: remotely, by hand-over or by takeover.
    pub locks_acquired: u64,
    /// Of those, the ones a thread of the same compute node handed over (HOCL's local
    /// level): taken without a remote CAS.
    pub lock_handovers: u64,
    /// Leaf and internal splits made.
    pub splits: u64,
}

/// What a handle repaired of what other (dead or slow) clients left half-done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairStats {
    /// Locks taken over from a holder fenced after its lease ran out.
    pub takeovers: u64,
    /// Separators of finished splits inserted into a parent that lacked them.
    pub separators_linked: u64,
    /// Roots grown over a split root.
    pub roots_grown: u64,
    /// Internal pages found torn by a dead writer and re-derived from the level below.
    pub pages_rederived: u64,
    /// Leaves found torn by a dead writer and rewritten from its redo record.
    pub leaves_redone: u64,
}

/// One compute node's handle on a Sherman tree (see [`super`]).
pub struct Sherman<'e, E: Endpoint> {
    pub(super) ep: &'e E,
    pub(super) cfg: ShermanConfig,
    pub(super) g: Geometry,
    pub(super) desc: GlobalAddr,
    pub(super) onchip: bool,
    pub(super) root: Cell<GlobalAddr>,
    pub(super) nodes: Vec<NodeLocks>,
    pub(super) allocs: Vec<RemoteAllocator>,
    pub(super) next_alloc: Cell<usize>,
    pub(super) locks: Locks,
    /// The compute node's index cache (its local lock table is in `locks`).
    pub(super) node: NodeCache,
    pub(super) pool: RefCell<Vec<Vec<u8>>>,
    /// A scan's sort buffers (a leaf's live keys), kept between scans as `pool` keeps pages,
    /// so a scan in steady state allocates nothing.
    pub(super) batches: RefCell<Vec<ScanBatch>>,
    /// Leaf and page locks this handle took (remotely, by hand-over or by takeover).
    pub(super) acquired: Cell<u64>,
    /// Of those, the ones handed over by a thread of the same compute node.
    pub(super) handovers: Cell<u64>,
    pub(super) splits: Cell<u64>,
    /// A link a traversal found missing (a page reached through its parent or left
    /// neighbour whose right sibling the parent does not know): (parent level, separator,
    /// child). The next write of this handle inserts it.
    pub(super) missing: Cell<Option<(u8, u64, GlobalAddr)>>,
    /// Repairs made of what other clients left half-done.
    pub(super) repairs: Cell<RepairStats>,
    /// Free redo slots of this handle, per memory node (index as in `nodes`).
    pub(super) redo_slots: RefCell<Vec<Vec<GlobalAddr>>>,
    /// Buffers for redo record images.
    pub(super) records: RefCell<Vec<Vec<u8>>>,
}

/// Largest page a lookup reads into its own frame (the paper's 1 KiB pages) instead of a
/// pooled heap page.
pub(super) const FRAME_PAGE: usize = 1024;

/// `len` bytes of `frame` when they fit (the coroutine's frame: registered memory under
/// verbs, so the NIC reads and writes them in place), else of `heap`, grown to `len`.
pub(super) fn frame_or_heap<'a>(
    frame: &'a mut [u8; FRAME_PAGE],
    heap: &'a mut Vec<u8>,
    len: usize,
) -> &'a mut [u8] {
    if len <= FRAME_PAGE {
        &mut frame[..len]
    } else {
        heap.resize(len, 0);
        heap
    }
}

pub(super) fn key_of(key: &[u8]) -> Result<u64, ShermanError> {
    let k: [u8; 8] = key
        .try_into()
        .map_err(|_| ShermanError::BadKey { len: key.len() })?;
    let k = u64::from_be_bytes(k);
    if k == KEY_INFINITY {
        return Err(ShermanError::BadKey { len: 8 });
    }
    Ok(k)
}

/// The page version leaf entries are bound to: the page's own version, except in the
/// front == rear mutant, whose entries (like the authors') are not bound.
pub(super) fn bind_of(check: PageCheck, version: u64) -> u64 {
    match check {
        PageCheck::Checksums => version,
        #[cfg(any(test, feature = "conformance"))]
        PageCheck::FrontRearOnly => 0,
    }
}

/// Encodes a whole leaf image into `img`: version `version`, fences `[low, high)`, `entries`
/// (key, value) in the first slots, every other slot free, all bound to the version; sealed.
#[allow(clippy::too_many_arguments)]
pub(super) fn encode_leaf(
    img: &mut [u8],
    g: &Geometry,
    check: PageCheck,
    version: u64,
    low: u64,
    high: u64,
    sibling: u64,
    entries: &[(u64, Vec<u8>)],
) {
    encode_leaf_with(img, g, check, version, (low, high, sibling), |s| {
        entries.get(s).map(|(k, v)| (*k, v.as_slice()))
    });
}

/// [`encode_leaf`] with slot `s`'s entry given by `entry(s)` (None: the slot is free), so a
/// caller that has its values in place (a split's page image) copies nothing first.
pub(super) fn encode_leaf_with<'v>(
    img: &mut [u8],
    g: &Geometry,
    check: PageCheck,
    version: u64,
    (low, high, sibling): (u64, u64, u64),
    entry: impl Fn(usize) -> Option<(u64, &'v [u8])>,
) {
    let h = PageHeader {
        front_version: version,
        meta: PageHeader::pack_meta(0, true, 0),
        sibling,
        low_fence: low,
        high_fence: high,
        ..Default::default()
    };
    h.encode(img);
    let bind = bind_of(check, version);
    for s in 0..g.leaf_capacity() {
        let at = g.leaf_entry_offset(s);
        let out = &mut img[at..at + g.leaf_entry_size()];
        match entry(s) {
            Some((k, v)) => encode_leaf_entry(out, k, v, 1, true, bind),
            None => encode_leaf_entry(out, 0, &[], 0, false, bind),
        }
    }
    seal(img, g);
}

/// Word `i` of a page image, unverified (each aligned word is atomic: an old or a new value).
pub(super) fn raw_word(page: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&page[i * 8..i * 8 + 8]);
    u64::from_le_bytes(w)
}

/// The level of a page from its (unverified) meta word: `Some` for a plausible one.
pub(super) fn raw_level(page: &[u8]) -> Option<u8> {
    let h = PageHeader {
        meta: raw_word(page, 1),
        ..Default::default()
    };
    let level = h.level();
    (level <= 32 && h.is_leaf() == (level == 0)).then_some(level)
}

/// The (unverified) header says: an internal page.
pub(super) fn raw_internal(page: &[u8]) -> bool {
    raw_level(page).is_some_and(|l| l > 0)
}

/// Spreads page addresses over lock words (Fibonacci hashing: the high bits of the product).
/// Comparisons of a binary search over `n` entries.
pub(super) fn search_steps(n: usize) -> usize {
    (usize::BITS - n.leading_zeros()) as usize
}

pub(super) fn hash(a: GlobalAddr) -> u64 {
    (a.raw() >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// The page geometry (page and value sizes) this handle uses.
    pub fn geometry(&self) -> Geometry {
        self.g
    }

    /// This handle's lock and split counters.
    pub fn stats(&self) -> ShermanStats {
        ShermanStats {
            locks_acquired: self.acquired.get(),
            lock_handovers: self.handovers.get(),
            splits: self.splits.get(),
        }
    }

    /// Counts a lock acquisition, and whether it came by hand-over.
    pub(super) fn count_acquired(&self, got: Got) {
        self.acquired.set(self.acquired.get() + 1);
        if got == Got::HandedOver {
            self.handovers.set(self.handovers.get() + 1);
        }
    }

    /// Repairs this handle made of what other (dead or slow) clients left half-done.
    pub fn repairs(&self) -> RepairStats {
        self.repairs.get()
    }

    pub(super) fn repaired(&self, f: impl FnOnce(&mut RepairStats)) {
        let mut r = self.repairs.get();
        f(&mut r);
        self.repairs.set(r);
    }

    /// Index-cache hits and misses of this handle, and bytes in the node's cache.
    pub fn cache_stats(&self) -> (u64, u64, usize) {
        self.node.stats()
    }

    pub(super) fn page(&self) -> Vec<u8> {
        self.pool
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| vec![0u8; self.g.page_size])
    }

    pub(super) fn give(&self, p: Vec<u8>) {
        self.pool.borrow_mut().push(p);
    }

    /// A scan's sort buffer, empty, with room for a leaf's entries.
    pub(super) fn batch(&self) -> ScanBatch {
        let mut b = self.batches.borrow_mut().pop().unwrap_or_default();
        b.clear();
        b.reserve(self.g.leaf_capacity());
        b
    }

    pub(super) fn give_batch(&self, b: ScanBatch) {
        self.batches.borrow_mut().push(b);
    }

    /// The bounds of every wait (the lease config, attempts capped by `lock_retries`).
    pub(super) fn patience(&self) -> Patience {
        Patience::new(LeaseConfig {
            max_attempts: self.cfg.lock_retries,
            ..self.cfg.lease
        })
    }

    pub(super) fn qp(&self, a: GlobalAddr) -> Result<&'e E::Qp, ShermanError> {
        Ok(self.ep.qp_for(a)?)
    }

    pub(super) fn lock_for(&self, page: GlobalAddr) -> Result<GlobalAddr, ShermanError> {
        let n = self
            .nodes
            .iter()
            .find(|n| n.node == page.node())
            .ok_or(ShermanError::Fabric(
                crate::fabric::FabricError::UnknownNode { node: page.node() },
            ))?;
        Ok(if self.onchip {
            GlobalAddr::device(n.node, (hash(page) & (n.dm_locks - 1)) * 8)
        } else {
            n.host_table.add((hash(page) & (n.host_locks - 1)) * 8)
        })
    }

    /// The redo pointer of the lock word that guards `page` (same index in its table).
    pub(super) fn redo_ptr(&self, page: GlobalAddr) -> Result<GlobalAddr, ShermanError> {
        let i = self.node_index(page)?;
        let n = &self.nodes[i];
        let count = if self.onchip {
            n.dm_locks
        } else {
            n.host_locks
        };
        Ok(n.redo_table.add((hash(page) & (count - 1)) * 8))
    }

    pub(super) fn node_index(&self, page: GlobalAddr) -> Result<usize, ShermanError> {
        self.nodes
            .iter()
            .position(|n| n.node == page.node())
            .ok_or(ShermanError::Fabric(
                crate::fabric::FabricError::UnknownNode { node: page.node() },
            ))
    }

    pub(super) async fn alloc_page(&self) -> Result<GlobalAddr, ShermanError> {
        let i = self.next_alloc.get() % self.allocs.len();
        self.next_alloc.set(i + 1);
        let a = &self.allocs[i];
        Ok(a.alloc(self.ep.qp(a.node())?, self.g.page_size as u64)
            .await?)
    }

    pub(super) fn decode(&self, page: &[u8]) -> Result<PageHeader, remora_layouts::LayoutError> {
        match self.cfg.page_check {
            PageCheck::Checksums => PageHeader::decode(page, &self.g),
            #[cfg(any(test, feature = "conformance"))]
            PageCheck::FrontRearOnly => PageHeader::decode_front_rear(page, &self.g),
        }
    }

    pub(super) fn bind(&self, h: &PageHeader) -> u64 {
        bind_of(self.cfg.page_check, h.front_version)
    }
}

impl<E: Endpoint> KvIndex for Sherman<'_, E> {
    type Error = ShermanError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), ShermanError> {
        self.modify(key_of(key)?, value, Change::Upsert)
            .await
            .map(drop)
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, ShermanError> {
        self.modify(key_of(key)?, value, Change::Update).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, ShermanError> {
        self.lookup(key_of(key)?, out).await
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, ShermanError> {
        self.modify(key_of(key)?, &[], Change::Delete).await
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ShermanError> {
        self.scan_from(key_of(from)?, limit, visit).await
    }
}

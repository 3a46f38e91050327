//! The index cache: copies of level-1 internal pages (the parents of leaves), keyed by their
//! low fence, so a lookup goes straight to its leaf in one READ.
//!
//! One per compute node ([`super::node::ShermanNode`]). Only verified images enter the cache: pages a READ proved whole (`PageHeader::decode`:
//! checksum over the whole internal page) or images this handle wrote itself.
//!
//! A cached page can be stale; the leaf's fence keys tell. A leaf whose range is left of the
//! key sends the reader along the sibling chain (and drops the stale copy); anything else that
//! does not fit drops the copy and the reader descends from the root.
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{Geometry, PageHeader, internal_entry};
use std_alloc::collections::BTreeMap;
use std_alloc::vec::Vec;

struct Cached {
    high: u64,
    header: PageHeader,
    page: Vec<u8>,
}

pub(super) struct IndexCache {
    map: BTreeMap<u64, Cached>,
    bytes: usize,
    cap: usize,
    enabled: bool,
    evict_cursor: u64,
}

/// The child of an internal page that covers `key` (largest separator <= key).
pub(super) fn child_for(page: &[u8], g: &Geometry, h: &PageHeader, key: u64) -> Option<GlobalAddr> {
    let (mut lo, mut hi) = (0usize, h.count());
    while lo < hi {
        let mid = (lo + hi) / 2;
        let (k, _) = internal_entry(page, g, mid).ok()?;
        if k <= key { lo = mid + 1 } else { hi = mid }
    }
    let child = if lo == 0 {
        h.leftmost
    } else {
        internal_entry(page, g, lo - 1).ok()?.1
    };
    (child != 0).then(|| GlobalAddr::from_raw(child))
}

impl IndexCache {
    pub(super) fn new(enabled: bool, cap: usize) -> IndexCache {
        IndexCache {
            map: BTreeMap::new(),
            bytes: 0,
            cap,
            enabled,
            evict_cursor: 0,
        }
    }

    /// The leaf a cached level-1 page points `key` to.
    pub(super) fn leaf_for(&self, key: u64, g: &Geometry) -> Option<GlobalAddr> {
        if !self.enabled {
            return None;
        }
        self.map
            .range(..=key)
            .next_back()
            .filter(|(_, c)| key < c.high)
            .and_then(|(_, c)| child_for(&c.page, g, &c.header, key))
    }

    /// Remembers a level-1 page just read whole.
    pub(super) fn insert(&mut self, h: &PageHeader, page: &[u8]) {
        if !self.enabled || h.level() != 1 || page.len() > self.cap {
            return;
        }
        if let Some(old) = self.map.remove(&h.low_fence) {
            self.bytes -= old.page.len();
        }
        while self.bytes + page.len() > self.cap {
            // Evict round-robin by key: cheap, no per-access bookkeeping.
            let victim = self
                .map
                .range(self.evict_cursor..)
                .next()
                .or_else(|| self.map.iter().next())
                .map(|(k, _)| *k);
            let Some(k) = victim else { break };
            self.evict_cursor = k.wrapping_add(1);
            if let Some(old) = self.map.remove(&k) {
                self.bytes -= old.page.len();
            }
        }
        self.bytes += page.len();
        self.map.insert(
            h.low_fence,
            Cached {
                high: h.high_fence,
                header: *h,
                page: page.to_vec(),
            },
        );
    }

    /// Drops the cached page that covers `key`.
    pub(super) fn invalidate(&mut self, key: u64) {
        let k = self.map.range(..=key).next_back().map(|(k, _)| *k);
        if let Some(k) = k
            && let Some(old) = self.map.remove(&k)
        {
            self.bytes -= old.page.len();
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

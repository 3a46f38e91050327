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
    charge: CacheCharge,
    evict_cursor: u64,
}

/// What a cached level-1 page costs against the index cache's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheCharge {
    /// The whole page image (Sherman's: remora's Sherman caches page images).
    #[default]
    WholePage,
    /// Its live entries, as CHIME's authors count a cached internal node
    /// (`include/InternalNode.h`, `InternalNode::consumed_cache_size`: an 8-byte pointer, the
    /// 43-byte `InternalMetadata` and a 17-byte `InternalEntry` per live record). Their
    /// Sherman baseline is the same code with CHIME's switches off, so it counts the same.
    LiveEntries,
}

/// The authors' bytes of a cached internal node besides its entries: 8 (pointer) + 43
/// (`InternalMetadata`: version 1, level and valid 2, three 8-byte pointers, two 8-byte
/// fences), `include/InternalNode.h` and `include/Common.h` (`internalMetadataSize`).
pub const LIVE_PAGE_BYTES: usize = 8 + 43;
/// The authors' bytes per live entry of a cached internal node (`internalEntrySize`:
/// version 1, key 8, child pointer 8; `include/Common.h`).
pub const LIVE_ENTRY_BYTES: usize = 17;

impl CacheCharge {
    /// The bytes `page` (header `h`) costs.
    fn of(self, h: &PageHeader, page: &[u8]) -> usize {
        match self {
            CacheCharge::WholePage => page.len(),
            CacheCharge::LiveEntries => LIVE_PAGE_BYTES + LIVE_ENTRY_BYTES * h.count(),
        }
    }
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
    pub(super) fn new(enabled: bool, cap: usize, charge: CacheCharge) -> IndexCache {
        IndexCache {
            map: BTreeMap::new(),
            bytes: 0,
            cap,
            enabled,
            charge,
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
        let cost = self.charge.of(h, page);
        if !self.enabled || h.level() != 1 || cost > self.cap {
            return;
        }
        if let Some(old) = self.map.remove(&h.low_fence) {
            self.bytes -= self.charge.of(&old.header, &old.page);
        }
        while self.bytes + cost > self.cap {
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
                self.bytes -= self.charge.of(&old.header, &old.page);
            }
        }
        self.bytes += cost;
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
            self.bytes -= self.charge.of(&old.header, &old.page);
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level1(low: u64, count: usize) -> PageHeader {
        PageHeader {
            meta: PageHeader::pack_meta(1, false, count),
            low_fence: low,
            high_fence: low + 100,
            ..PageHeader::default()
        }
    }

    #[test]
    fn a_page_costs_its_image_or_its_live_entries_as_the_authors_count() {
        let page = [0u8; 1024];
        // Whole pages: a 2 KiB cache holds two 1 KiB pages, whatever their entries.
        let mut whole = IndexCache::new(true, 2048, CacheCharge::WholePage);
        for i in 0..4 {
            whole.insert(&level1(i * 100, 20), &page);
        }
        assert_eq!((whole.map.len(), whole.bytes()), (2, 2048));
        // Live entries: 8 + 43 + 17 x 20 = 391 bytes a page, five in 2 KiB.
        let mut live = IndexCache::new(true, 2048, CacheCharge::LiveEntries);
        for i in 0..6 {
            live.insert(&level1(i * 100, 20), &page);
        }
        assert_eq!((live.map.len(), live.bytes()), (5, 5 * 391));
        // Replacing and dropping a page returns what it was charged.
        live.insert(&level1(500, 30), &page);
        live.invalidate(550);
        assert_eq!(live.bytes(), live.map.len() * 391);
    }
}

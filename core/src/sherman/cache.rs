//! The index cache: copies of level-1 internal pages (the parents of leaves), keyed by their
//! low fence, so a lookup goes straight to its leaf in one READ; with `upper` (CHIME's
//! experiment: the authors' `CACHE_MORE_INTERNAL_NODE`) also the pages above level 1, so a
//! lookup whose level-1 page is not cached starts its descent at the lowest cached page that
//! covers its key instead of at the root.
//!
//! One per compute node ([`super::node::ShermanNode`]). Only verified images enter the cache: pages a READ proved whole (`PageHeader::decode`:
//! checksum over the whole internal page) or images this handle wrote itself.
//!
//! A cached page can be stale; the leaf's fence keys tell. A leaf whose range is left of the
//! key sends the reader along the sibling chain (and drops the stale copy); anything else that
//! does not fit drops the copy and the reader descends from the root. A cached upper page is
//! checked the same way by the page it points to: a child that is not at the level below or
//! does not cover the key drops the cached copy and the descent starts again one cached level
//! higher (or at the root), as the authors' `Tree::search` retries after
//! `TreeCache::invalidate`; the pages read on the way are cached afresh.
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{Geometry, KEY_INFINITY, PageHeader};
use std_alloc::collections::BTreeMap;
use std_alloc::vec::Vec;

struct Cached {
    high: u64,
    header: PageHeader,
    page: Vec<u8>,
}

/// The highest level cached: a tree of 1 KiB pages is a handful of levels high, and a level
/// byte above this in a verified page is not worth a map.
const MAX_LEVEL: usize = 16;

pub(super) struct IndexCache {
    /// Per level (index 0: level 1), pages by low fence.
    levels: Vec<BTreeMap<u64, Cached>>,
    /// Per level, where the round-robin eviction goes on.
    cursors: Vec<u64>,
    bytes: usize,
    cap: usize,
    enabled: bool,
    upper: bool,
    charge: CacheCharge,
    /// The image buffer of the page dropped last, for the next insert to copy into: a cache
    /// that keeps evicting (its capacity below the tree's level-1 pages, as in CHIME's cache
    /// sweeps) reuses the evicted page's buffer instead of allocating one per miss. Not
    /// charged: it holds no page.
    spare: Vec<u8>,
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
    route_for(page, g, h, key).map(|r| r.child)
}

/// Where an internal page sends a key: the child, the key range the page gives it, and the
/// child the page names for the keys from `high` on.
///
/// A separator is its child's low key (a split links its new right page or leaf under the
/// key it starts at; a page split makes the separator it pushes up the right page's low
/// fence and that separator's child its leftmost), and a child's low key never changes, so
/// whatever a (possibly stale) image says of `next`, `next`'s low key is `high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    /// The child covering the key (as of the image).
    pub(crate) child: GlobalAddr,
    /// The child's keys start here (the separator, or the page's low fence).
    pub(crate) low: u64,
    /// The next separator, or the page's high fence.
    pub(crate) high: u64,
    /// The raw address of the child whose keys start at `high` (0: none, `high` is +∞);
    /// `None` when it is not on this page (the child is the page's last).
    pub(crate) next: Option<u64>,
}

/// The [`Route`] of `key` through an internal page (largest separator <= key). `None` if the
/// page image is shorter than its `count` entries or the child is null.
pub(super) fn route_for(page: &[u8], g: &Geometry, h: &PageHeader, key: u64) -> Option<Route> {
    // The entries as 16-byte arrays, sliced once: the search's reads need no bounds checks
    // or errors of their own.
    let n = h.count();
    let entries = page.get(g.internal_entry_offset(0)..g.internal_entry_offset(n))?;
    let (entries, _) = entries.as_chunks::<16>();
    let entry = |i: usize| -> (u64, u64) {
        let (w, _) = entries[i].as_chunks::<8>();
        (u64::from_le_bytes(w[0]), u64::from_le_bytes(w[1]))
    };
    let (mut lo, mut hi) = (0usize, entries.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if entry(mid).0 <= key {
            lo = mid + 1
        } else {
            hi = mid
        }
    }
    let (low, child) = if lo == 0 {
        (h.low_fence, h.leftmost)
    } else {
        entry(lo - 1)
    };
    let (high, next) = if lo < entries.len() {
        let (k, c) = entry(lo);
        (k, Some(c))
    } else {
        (h.high_fence, (h.high_fence == KEY_INFINITY).then_some(0))
    };
    (child != 0).then(|| Route {
        child: GlobalAddr::from_raw(child),
        low,
        high,
        next,
    })
}

impl IndexCache {
    /// A cache of `cap` bytes (`enabled`), pages charged by `charge`; `upper`: pages above
    /// level 1 too.
    pub(super) fn new(enabled: bool, cap: usize, charge: CacheCharge, upper: bool) -> IndexCache {
        let n = if upper { MAX_LEVEL } else { 1 };
        IndexCache {
            levels: (0..n).map(|_| BTreeMap::new()).collect(),
            cursors: (0..n).map(|_| 0).collect(),
            bytes: 0,
            cap,
            enabled,
            upper,
            charge,
            spare: Vec::new(),
        }
    }

    /// Whether pages above level 1 are cached.
    pub(super) fn upper(&self) -> bool {
        self.enabled && self.upper
    }

    /// The cached page of `level` covering `key`.
    fn covering(&self, level: usize, key: u64) -> Option<&Cached> {
        self.levels
            .get(level.checked_sub(1)?)?
            .range(..=key)
            .next_back()
            .map(|(_, c)| c)
            .filter(|c| key < c.high)
    }

    /// The leaf a cached level-1 page points `key` to.
    pub(super) fn leaf_for(&self, key: u64, g: &Geometry) -> Option<GlobalAddr> {
        if !self.enabled {
            return None;
        }
        let c = self.covering(1, key)?;
        child_for(&c.page, g, &c.header, key)
    }

    /// The [`Route`] a cached level-1 page gives `key`; when its child is the page's last,
    /// `next` is taken from the cached right neighbour page (its leftmost child), if any.
    pub(super) fn route_for(&self, key: u64, g: &Geometry) -> Option<Route> {
        if !self.enabled {
            return None;
        }
        let c = self.covering(1, key)?;
        let mut r = route_for(&c.page, g, &c.header, key)?;
        if r.next.is_none()
            && let Some(right) = self.levels[0].get(&c.high)
            && right.header.leftmost != 0
        {
            r.next = Some(right.header.leftmost);
        }
        Some(r)
    }

    /// Where a descent to `key` can start without the root: the child that the lowest cached
    /// page of level 2 or above covering `key` points it to, and that page's level (the
    /// child is one below). `None` without `upper` or with no such page.
    pub(super) fn start_for(&self, key: u64, g: &Geometry) -> Option<(GlobalAddr, u8)> {
        if !self.upper() {
            return None;
        }
        (2..=self.levels.len()).find_map(|level| {
            let c = self.covering(level, key)?;
            Some((child_for(&c.page, g, &c.header, key)?, level as u8))
        })
    }

    /// Whether `page` (header `h`) would be kept without evicting another page: the cache
    /// holds its level and has room for its cost.
    pub(super) fn fits(&self, h: &PageHeader, page: &[u8]) -> bool {
        let level = usize::from(h.level());
        self.enabled
            && level >= 1
            && level <= self.levels.len()
            && self.bytes + self.charge.of(h, page) <= self.cap
    }

    /// Remembers an internal page just read whole: level 1, or any level with `upper`.
    pub(super) fn insert(&mut self, h: &PageHeader, page: &[u8]) {
        let cost = self.charge.of(h, page);
        let level = usize::from(h.level());
        if !self.enabled || level == 0 || level > self.levels.len() || cost > self.cap {
            return;
        }
        self.remove(level, h.low_fence);
        while self.bytes + cost > self.cap {
            if !self.evict_one() {
                break;
            }
        }
        self.bytes += cost;
        let mut image = core::mem::take(&mut self.spare);
        image.clear();
        image.extend_from_slice(page);
        self.levels[level - 1].insert(
            h.low_fence,
            Cached {
                high: h.high_fence,
                header: *h,
                page: image,
            },
        );
    }

    /// Evicts one page, round-robin by key in the lowest level that has one (the authors'
    /// eviction samples random keys and so nearly always finds a level-1 page; the few upper
    /// pages, which every descent passes, go last). False if the cache is empty.
    fn evict_one(&mut self) -> bool {
        let Some(i) = self.levels.iter().position(|m| !m.is_empty()) else {
            return false;
        };
        // Cheap, no per-access bookkeeping.
        let m = &self.levels[i];
        let victim = m
            .range(self.cursors[i]..)
            .next()
            .or_else(|| m.iter().next())
            .map(|(k, _)| *k);
        let Some(k) = victim else { return false };
        self.cursors[i] = k.wrapping_add(1);
        self.remove(i + 1, k);
        true
    }

    /// Drops the page of `level` whose low fence is `low`, returning what it was charged.
    fn remove(&mut self, level: usize, low: u64) {
        if let Some(old) = self.levels[level - 1].remove(&low) {
            self.bytes -= self.charge.of(&old.header, &old.page);
            self.spare = old.page;
        }
    }

    /// Drops the cached level-1 page that covers `key`.
    pub(super) fn invalidate(&mut self, key: u64) {
        self.invalidate_at(1, key)
    }

    /// Drops the cached page of `level` that covers `key` (or the last one left of it).
    pub(super) fn invalidate_at(&mut self, level: usize, key: u64) {
        let Some(m) = level.checked_sub(1).and_then(|i| self.levels.get(i)) else {
            return;
        };
        if let Some(k) = m.range(..=key).next_back().map(|(k, _)| *k) {
            self.remove(level, k);
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std_alloc::vec;

    fn level1(low: u64, count: usize) -> PageHeader {
        PageHeader {
            meta: PageHeader::pack_meta(1, false, count),
            low_fence: low,
            high_fence: low + 100,
            ..PageHeader::default()
        }
    }

    /// The binary search routes every key as a linear scan of the separators does: the
    /// child of the largest separator <= key (the leftmost below the first), the range it
    /// gives, and the next child; on pages with 0 to 10 entries, the last one +∞-fenced.
    #[test]
    fn route_for_agrees_with_a_linear_scan() {
        use remora_layouts::sherman::{internal_entry, set_internal_entry};
        let g = Geometry::new(1024, 8).unwrap();
        for count in 0..=10usize {
            for high in [1000, KEY_INFINITY] {
                let h = PageHeader {
                    meta: PageHeader::pack_meta(1, false, count),
                    low_fence: 100,
                    high_fence: high,
                    leftmost: 7,
                    ..PageHeader::default()
                };
                let mut page = [0u8; 1024];
                for i in 0..count {
                    let k = 150 + 50 * i as u64;
                    set_internal_entry(&mut page, &g, i, k, 1000 + i as u64);
                }
                for key in 100..(100 + 60 * 11) {
                    let mut at = None;
                    for i in 0..count {
                        if internal_entry(&page, &g, i).unwrap().0 <= key {
                            at = Some(i);
                        }
                    }
                    let (low, child) =
                        at.map_or((100, 7), |i| internal_entry(&page, &g, i).unwrap());
                    let nx = at.map_or(0, |i| i + 1);
                    let (hi, next) = if nx < count {
                        let (k, c) = internal_entry(&page, &g, nx).unwrap();
                        (k, Some(c))
                    } else {
                        (high, (high == KEY_INFINITY).then_some(0))
                    };
                    let want = Route {
                        child: GlobalAddr::from_raw(child),
                        low,
                        high: hi,
                        next,
                    };
                    assert_eq!(
                        route_for(&page, &g, &h, key),
                        Some(want),
                        "count {count} key {key}"
                    );
                }
                // A page image too short for its count routes nothing.
                assert_eq!(
                    route_for(&page[..64 + 16 * count.saturating_sub(1)], &g, &h, 120).is_none(),
                    count > 0
                );
            }
        }
    }

    #[test]
    fn a_page_costs_its_image_or_its_live_entries_as_the_authors_count() {
        let page = [0u8; 1024];
        // Whole pages: a 2 KiB cache holds two 1 KiB pages, whatever their entries.
        let mut whole = IndexCache::new(true, 2048, CacheCharge::WholePage, false);
        for i in 0..4 {
            whole.insert(&level1(i * 100, 20), &page);
        }
        assert_eq!((whole.levels[0].len(), whole.bytes()), (2, 2048));
        // Live entries: 8 + 43 + 17 x 20 = 391 bytes a page, five in 2 KiB.
        let mut live = IndexCache::new(true, 2048, CacheCharge::LiveEntries, false);
        for i in 0..6 {
            live.insert(&level1(i * 100, 20), &page);
        }
        assert_eq!((live.levels[0].len(), live.bytes()), (5, 5 * 391));
        // Replacing and dropping a page returns what it was charged.
        live.insert(&level1(500, 30), &page);
        live.invalidate(550);
        assert_eq!(live.bytes(), live.levels[0].len() * 391);
    }

    /// A reference model of the cache: per level, pages by low fence in a `BTreeMap`, found
    /// by a scan of every page, routed by a scan of every separator, evicted round-robin by
    /// key in the lowest non-empty level, charged by `CacheCharge::of`.
    struct Model {
        levels: Vec<BTreeMap<u64, (PageHeader, Vec<u8>)>>,
        cursors: Vec<u64>,
        bytes: usize,
        cap: usize,
        charge: CacheCharge,
    }

    impl Model {
        fn covering(&self, level: usize, key: u64) -> Option<&(PageHeader, Vec<u8>)> {
            let m = self.levels.get(level.checked_sub(1)?)?;
            let best = m.iter().rfind(|(low, _)| **low <= key)?.1;
            (key < best.0.high_fence).then_some(best)
        }

        fn route(page: &[u8], g: &Geometry, h: &PageHeader, key: u64) -> Option<Route> {
            use remora_layouts::sherman::internal_entry;
            let n = h.count();
            if page.len() < g.internal_entry_offset(n) {
                return None;
            }
            let e = |i| internal_entry(page, g, i).unwrap();
            let at = (0..n).rfind(|&i| e(i).0 <= key);
            let (low, child) = at.map_or((h.low_fence, h.leftmost), e);
            let nx = at.map_or(0, |i| i + 1);
            let (high, next) = if nx < n {
                (e(nx).0, Some(e(nx).1))
            } else {
                (h.high_fence, (h.high_fence == KEY_INFINITY).then_some(0))
            };
            (child != 0).then(|| Route {
                child: GlobalAddr::from_raw(child),
                low,
                high,
                next,
            })
        }

        fn route_for(&self, key: u64, g: &Geometry) -> Option<Route> {
            let (h, page) = self.covering(1, key)?;
            let mut r = Self::route(page, g, h, key)?;
            if r.next.is_none()
                && let Some((rh, _)) = self.levels[0].get(&h.high_fence)
                && rh.leftmost != 0
            {
                r.next = Some(rh.leftmost);
            }
            Some(r)
        }

        fn start_for(&self, key: u64, g: &Geometry) -> Option<(GlobalAddr, u8)> {
            (2..=self.levels.len()).find_map(|l| {
                let (h, page) = self.covering(l, key)?;
                Some((Self::route(page, g, h, key)?.child, l as u8))
            })
        }

        fn drop_page(&mut self, level: usize, low: u64) {
            if let Some((h, page)) = self.levels[level - 1].remove(&low) {
                self.bytes -= self.charge.of(&h, &page);
            }
        }

        fn insert(&mut self, h: &PageHeader, page: &[u8]) {
            let cost = self.charge.of(h, page);
            let level = usize::from(h.level());
            if level == 0 || level > self.levels.len() || cost > self.cap {
                return;
            }
            self.drop_page(level, h.low_fence);
            while self.bytes + cost > self.cap {
                let Some(i) = self.levels.iter().position(|m| !m.is_empty()) else {
                    break;
                };
                let keys: Vec<u64> = self.levels[i].keys().copied().collect();
                let k = keys
                    .iter()
                    .copied()
                    .find(|k| *k >= self.cursors[i])
                    .unwrap_or(keys[0]);
                self.cursors[i] = k.wrapping_add(1);
                self.drop_page(i + 1, k);
            }
            self.bytes += cost;
            self.levels[level - 1].insert(h.low_fence, (*h, page.to_vec()));
        }

        fn invalidate_at(&mut self, level: usize, key: u64) {
            let Some(m) = level.checked_sub(1).and_then(|i| self.levels.get(i)) else {
                return;
            };
            if let Some(k) = m.keys().copied().rfind(|k| *k <= key) {
                self.drop_page(level, k);
            }
        }
    }

    /// Random inserts (of overlapping, stale-looking, replaced and too-short pages, some
    /// with null children), invalidations and evictions, and after each step lookups of
    /// random keys: the cache answers `leaf_for`, `route_for`, `start_for`, `fits` and
    /// `bytes` as the model does, for both charges, with and without upper levels.
    #[test]
    fn the_cache_agrees_with_a_reference_model() {
        use remora_layouts::sherman::set_internal_entry;
        let g = Geometry::new(1024, 8).unwrap();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for (charge, upper, cap) in [
            (CacheCharge::WholePage, false, 8 * 1024),
            (CacheCharge::WholePage, true, 12 * 1024),
            (CacheCharge::LiveEntries, false, 2000),
            (CacheCharge::LiveEntries, true, 3000),
        ] {
            let mut c = IndexCache::new(true, cap, charge, upper);
            let n = c.levels.len();
            let mut m = Model {
                levels: (0..n).map(|_| BTreeMap::new()).collect(),
                cursors: vec![0; n],
                bytes: 0,
                cap,
                charge,
            };
            for step in 0..3000 {
                match rnd(10) {
                    0..=6 => {
                        let level = 1 + rnd(if upper { 3 } else { 2 }) as u8;
                        let low = 1000 * rnd(40);
                        let high = if rnd(8) == 0 {
                            KEY_INFINITY
                        } else {
                            low + 1000 * (1 + rnd(4))
                        };
                        let count = rnd(30) as usize;
                        let mut page = vec![0u8; 1024];
                        let mut k = low;
                        for i in 0..count {
                            k += 1 + rnd(60);
                            set_internal_entry(&mut page, &g, i, k, rnd(16) * 64);
                        }
                        let h = PageHeader {
                            meta: PageHeader::pack_meta(level, false, count),
                            low_fence: low,
                            high_fence: high,
                            leftmost: rnd(16) * 64,
                            ..PageHeader::default()
                        };
                        // Now and then an image shorter than its count says.
                        let len = if rnd(20) == 0 {
                            g.internal_entry_offset(count / 2)
                        } else {
                            1024
                        };
                        assert_eq!(c.fits(&h, &page[..len]), {
                            let l = usize::from(level);
                            l <= n && m.bytes + charge.of(&h, &page[..len]) <= cap
                        });
                        c.insert(&h, &page[..len]);
                        m.insert(&h, &page[..len]);
                    }
                    7 => {
                        let key = rnd(45_000);
                        c.invalidate(key);
                        m.invalidate_at(1, key);
                    }
                    _ => {
                        let (level, key) = (1 + rnd(4) as usize, rnd(45_000));
                        c.invalidate_at(level, key);
                        m.invalidate_at(level, key);
                    }
                }
                assert_eq!(c.bytes(), m.bytes, "step {step}");
                for _ in 0..20 {
                    let key = if rnd(10) == 0 {
                        KEY_INFINITY - 1
                    } else {
                        rnd(45_000)
                    };
                    let want = m.route_for(key, &g);
                    assert_eq!(c.route_for(key, &g), want, "step {step} key {key}");
                    assert_eq!(c.leaf_for(key, &g), want.map(|r| r.child), "key {key}");
                    let start = if upper { m.start_for(key, &g) } else { None };
                    assert_eq!(c.start_for(key, &g), start, "step {step} key {key}");
                }
            }
            // Round-robin eviction left both holding the same pages.
            for (l, lm) in m.levels.iter().enumerate() {
                let keys: Vec<u64> = c.levels[l].keys().copied().collect();
                assert_eq!(keys, lm.keys().copied().collect::<Vec<_>>());
            }
        }
    }
}

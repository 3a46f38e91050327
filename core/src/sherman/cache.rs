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
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{Geometry, KEY_INFINITY, PageHeader};
use std_alloc::collections::BTreeMap;
use std_alloc::vec::Vec;

struct Cached {
    high: u64,
    header: PageHeader,
    page: Vec<u8>,
    /// Lookups this page served ([`CacheEviction::SampledLfu`] only; else 0), saturating.
    /// Counted under the cache's shared guard, so atomic; 32 bits because the no_std core
    /// builds for targets without 64-bit atomics (thumbv7em).
    freq: AtomicU32,
}

/// The eviction sampler's first state (any nonzero xorshift64 state).
const RNG_SEED: u64 = 0x2545_F491_4F6C_DD1D;

/// The highest level cached: a tree of 1 KiB pages is a handful of levels high, and a level
/// byte above this in a verified page is not worth a map.
const MAX_LEVEL: usize = 16;

/// Ghost entries (hit counts of pages no longer cached) kept per level of the index cache:
/// 65,536 (about 3 MB per level at ~48 B an entry) is more pages than a level of the caches
/// remora's experiments size holds, so no experiment forgets one; it bounds a long-running
/// client's memory under churn (issue 26), where every split makes a page with new fences.
pub(super) const MAX_GHOSTS: usize = 1 << 16;

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
    eviction: CacheEviction,
    /// Per level, the hit counts of pages no longer cached, by (low, high) fence
    /// ([`CacheEviction::SampledLfu`]): the authors' skip list keeps an evicted or
    /// invalidated node's entry and its `cache_entry_freq` (`TreeCache::invalidate` only
    /// nulls the entry's pointer), so a page cached again under the same fences goes on
    /// with its count. Their skip list grows with the distinct pages ever cached; this map
    /// keeps at most [`MAX_GHOSTS`] per level, so a client that runs for months under splits
    /// and churn does not grow without bound (past it, the lowest-keyed ghost is forgotten:
    /// that page, cached again, starts its count from 0).
    ghosts: Vec<BTreeMap<(u64, u64), u64>>,
    /// xorshift64 state of the eviction's samples (deterministic: the sim replays it).
    rng: u64,
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

/// Which cached page makes room for a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheEviction {
    /// Round-robin by key in the lowest level that has a page (remora's Sherman: no
    /// per-access bookkeeping).
    #[default]
    RoundRobin,
    /// CHIME's authors' `TreeCache::evict_one` (`include/TreeCache.h`): every lookup a
    /// cached node serves adds one to its count (`search_from_cache`,
    /// `search_ptr_from_cache`); to make room, two cached nodes are sampled, each the one at
    /// a random key (`get_a_random_entry`: `seek_entry(dsm->getRandomKey())`), and the one
    /// with the lower count is dropped (the second on a tie), until the budget holds again;
    /// the new node is added first (`add_to_cache`), so it can be the one dropped. Two
    /// different pages are compared when the level has two (`evict_sampled`). Their
    /// random key is a loaded key; remora's cache does not know the keys, so it samples a
    /// key uniformly between the lowest level's first and last low fence plus one mean page
    /// span (keys are hashed, so a page's share of that range is its share of the keys),
    /// and takes the page covering it. Their `seek_entry` nearly always lands on a level-1
    /// node (the narrowest entry ending at or after the key); this samples the lowest level
    /// that has a page.
    SampledLfu,
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
    /// A cache of `cap` bytes (`enabled`), pages charged by `charge`, evicted by `eviction`;
    /// `upper`: pages above level 1 too.
    pub(super) fn new(
        enabled: bool,
        cap: usize,
        charge: CacheCharge,
        eviction: CacheEviction,
        upper: bool,
    ) -> IndexCache {
        let n = if upper { MAX_LEVEL } else { 1 };
        IndexCache {
            levels: (0..n).map(|_| BTreeMap::new()).collect(),
            cursors: (0..n).map(|_| 0).collect(),
            bytes: 0,
            cap,
            enabled,
            upper,
            charge,
            eviction,
            ghosts: (0..n).map(|_| BTreeMap::new()).collect(),
            rng: RNG_SEED,
            spare: Vec::new(),
        }
    }

    /// Counts a lookup `c` served ([`CacheEviction::SampledLfu`]).
    fn hit(&self, c: &Cached) {
        if self.eviction == CacheEviction::SampledLfu {
            // A load and a store, not a read-modify-write: two threads counting at once may
            // lose one hit, which a sampled eviction does not notice, and no cache line is
            // locked on the lookup path. Saturates instead of wrapping to a cold count.
            let n = c.freq.load(Relaxed);
            if n < u32::MAX {
                c.freq.store(n + 1, Relaxed);
            }
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
        let child = child_for(&c.page, g, &c.header, key)?;
        self.hit(c);
        Some(child)
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
        self.hit(c);
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
            let child = child_for(&c.page, g, &c.header, key)?;
            self.hit(c);
            Some((child, level as u8))
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
        let lfu = self.eviction == CacheEviction::SampledLfu;
        // Round-robin makes room first; the authors' eviction adds the page, then drops
        // pages (maybe this one) until the budget holds.
        while !lfu && self.bytes + cost > self.cap {
            if !self.evict_one() {
                break;
            }
        }
        self.bytes += cost;
        let mut image = core::mem::take(&mut self.spare);
        image.clear();
        image.extend_from_slice(page);
        let freq = if lfu {
            self.ghosts[level - 1]
                .remove(&(h.low_fence, h.high_fence))
                .unwrap_or(0)
        } else {
            0
        };
        self.levels[level - 1].insert(
            h.low_fence,
            Cached {
                high: h.high_fence,
                header: *h,
                page: image,
                freq: AtomicU32::new(u32::try_from(freq).unwrap_or(u32::MAX)),
            },
        );
        while lfu && self.bytes > self.cap {
            if !self.evict_sampled() {
                break;
            }
        }
    }

    /// The next xorshift64 draw.
    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// The low fence of a page of level index `i` sampled as [`CacheEviction::SampledLfu`]
    /// says, and its count; `None` if the level is empty.
    fn sample(&mut self, i: usize) -> Option<(u64, u64)> {
        let m = &self.levels[i];
        let first = *m.keys().next()?;
        let last = *m.keys().next_back()?;
        let n = m.len() as u64;
        let gap = if n > 1 { (last - first) / (n - 1) } else { 0 };
        let span = (last - first).saturating_add(gap).max(1);
        let r = self.next_rand();
        let key = first.saturating_add(r % span);
        let (low, c) = self.levels[i].range(..=key).next_back()?;
        Some((*low, u64::from(c.freq.load(Relaxed))))
    }

    /// Drops the less-used of two sampled pages of the lowest level that has a page (the
    /// authors' `evict_one`). False if the cache is empty.
    fn evict_sampled(&mut self) -> bool {
        let Some(i) = self.levels.iter().position(|m| !m.is_empty()) else {
            return false;
        };
        let (Some((a, fa)), Some((mut b, mut fb))) = (self.sample(i), self.sample(i)) else {
            return false;
        };
        // Two different pages when there are two: the same one twice would drop it
        // whatever its count. The authors sample ~20k cached nodes (100 MB / 8.7 of ~600 B
        // nodes), where that is a 1-in-20k event; remora's scaled caches hold a few pages.
        if a == b {
            let m = &self.levels[i];
            let next = m.range(a.saturating_add(1)..).next();
            if let Some((&low, c)) = next.or_else(|| m.iter().next()) {
                (b, fb) = (low, u64::from(c.freq.load(Relaxed)));
            }
        }
        self.remove(i + 1, if fa < fb { a } else { b });
        true
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
            if self.eviction == CacheEviction::SampledLfu {
                let freq = u64::from(old.freq.load(Relaxed));
                let ghosts = &mut self.ghosts[level - 1];
                ghosts.insert((low, old.high), freq);
                if ghosts.len() > MAX_GHOSTS {
                    ghosts.pop_first();
                }
            }
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

    /// Drops every cached level-1 page (CHIME's reuse of merged leaves bounds how long a
    /// page naming leaves may be used: `crate::chime`'s `reuse.rs`). Not used by Sherman.
    pub(super) fn clear_level1(&mut self) {
        let lows: Vec<u64> = self
            .levels
            .first()
            .map_or(Vec::new(), |m| m.keys().copied().collect());
        for low in lows {
            self.remove(1, low);
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;

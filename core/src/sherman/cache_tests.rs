//! Tests of the index cache (`cache.rs`): routing against a linear scan, the two charges,
//! the authors' sampled eviction, and a reference model of the whole cache.
use super::*;
use std_alloc::vec;

const RR: CacheEviction = CacheEviction::RoundRobin;
const LFU: CacheEviction = CacheEviction::SampledLfu;

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
                let (low, child) = at.map_or((100, 7), |i| internal_entry(&page, &g, i).unwrap());
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
    let mut whole = IndexCache::new(true, 2048, CacheCharge::WholePage, RR, false);
    for i in 0..4 {
        whole.insert(&level1(i * 100, 20), &page);
    }
    assert_eq!((whole.levels[0].len(), whole.bytes()), (2, 2048));
    // Live entries: 8 + 43 + 17 x 20 = 391 bytes a page, five in 2 KiB.
    let mut live = IndexCache::new(true, 2048, CacheCharge::LiveEntries, RR, false);
    for i in 0..6 {
        live.insert(&level1(i * 100, 20), &page);
    }
    assert_eq!((live.levels[0].len(), live.bytes()), (5, 5 * 391));
    // Replacing and dropping a page returns what it was charged.
    live.insert(&level1(500, 30), &page);
    live.invalidate(550);
    assert_eq!(live.bytes(), live.levels[0].len() * 391);
}

/// The authors' eviction keeps the pages lookups use: one page hit on every round
/// survives 200 inserts into a cache of four pages, and a page evicted and read again
/// comes back with its count; round-robin evicts the hot page as any other.
#[test]
fn sampled_lfu_keeps_the_pages_lookups_use() {
    let g = Geometry::new(1024, 8).unwrap();
    let page = [0u8; 1024];
    let with_child = |low: u64| {
        let mut h = level1(low, 0);
        h.leftmost = 64;
        h
    };
    for (eviction, kept) in [(LFU, true), (RR, false)] {
        let mut c = IndexCache::new(true, 4 * 1024, CacheCharge::WholePage, eviction, false);
        for i in 0..4 {
            c.insert(&with_child(i * 100), &page);
        }
        let mut survived = true;
        for i in 4..204 {
            survived &= c.leaf_for(150, &g).is_some();
            c.insert(&with_child(i * 100), &page);
            assert!(c.bytes() <= 4 * 1024);
        }
        survived &= c.leaf_for(150, &g).is_some();
        assert_eq!(survived, kept, "{eviction:?}");
    }
    // A count outlives its page: evicted, then cached again under the same fences.
    let mut c = IndexCache::new(true, 1024, CacheCharge::WholePage, LFU, false);
    c.insert(&with_child(100), &page);
    for _ in 0..5 {
        c.leaf_for(150, &g);
    }
    c.insert(&with_child(900), &page);
    c.insert(&with_child(100), &page);
    let freq = |c: &IndexCache| c.levels[0].get(&100).map(|p| p.freq.load(Relaxed));
    assert_eq!(freq(&c), Some(5));
}

/// The ghost counts of pages no longer cached are bounded per level: a client whose tree
/// keeps splitting caches pages under ever new fences, and must not keep one entry for each.
#[test]
fn ghost_counts_are_bounded_per_level() {
    let page = [0u8; 1024];
    let mut c = IndexCache::new(true, 1024, CacheCharge::WholePage, LFU, false);
    for i in 0..(MAX_GHOSTS as u64 + 100) {
        let mut h = level1(i * 10, 0);
        h.leftmost = 64;
        h.high_fence = i * 10 + 10;
        c.insert(&h, &page);
    }
    assert_eq!(c.ghosts[0].len(), MAX_GHOSTS);
    // The lowest-keyed ghosts went first: of the MAX_GHOSTS + 99 pages evicted (all but
    // the one cached), the 99 lowest are forgotten.
    let lowest = c.ghosts[0].keys().next().map(|k| k.0);
    assert!(lowest >= Some(990), "{lowest:?}");
}

/// A reference model of the cache: per level, pages by low fence in a `BTreeMap`, found
/// by a scan of every page, routed by a scan of every separator, evicted round-robin by
/// key in the lowest non-empty level or (`lfu`) as the authors' `evict_one` (the same
/// xorshift draws, the sampled page found by a scan), charged by `CacheCharge::of`.
struct Model {
    levels: Vec<BTreeMap<u64, (PageHeader, Vec<u8>)>>,
    cursors: Vec<u64>,
    bytes: usize,
    cap: usize,
    charge: CacheCharge,
    lfu: bool,
    /// Hits per (level index, low, high), cached or not.
    freq: BTreeMap<(usize, u64, u64), u64>,
    rng: u64,
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

    fn hit(&mut self, level: usize, h: &PageHeader) {
        if self.lfu {
            *self
                .freq
                .entry((level - 1, h.low_fence, h.high_fence))
                .or_default() += 1;
        }
    }

    fn route_for(&mut self, key: u64, g: &Geometry) -> Option<Route> {
        let (h, page) = self.covering(1, key)?;
        let h = *h;
        let mut r = Self::route(page, g, &h, key)?;
        if r.next.is_none()
            && let Some((rh, _)) = self.levels[0].get(&h.high_fence)
            && rh.leftmost != 0
        {
            r.next = Some(rh.leftmost);
        }
        self.hit(1, &h);
        Some(r)
    }

    fn start_for(&mut self, key: u64, g: &Geometry) -> Option<(GlobalAddr, u8)> {
        let (l, h, child) = (2..=self.levels.len()).find_map(|l| {
            let (h, page) = self.covering(l, key)?;
            Some((l, *h, Self::route(page, g, h, key)?.child))
        })?;
        self.hit(l, &h);
        Some((child, l as u8))
    }

    fn drop_page(&mut self, level: usize, low: u64) {
        if let Some((h, page)) = self.levels[level - 1].remove(&low) {
            self.bytes -= self.charge.of(&h, &page);
        }
    }

    /// A page of level index `i` as `CacheEviction::SampledLfu` samples it, by scans.
    fn sample(&mut self, i: usize) -> (u64, u64) {
        let lows: Vec<u64> = self.levels[i].keys().copied().collect();
        let (first, last) = (lows[0], lows[lows.len() - 1]);
        let n = lows.len() as u64;
        let gap = if n > 1 { (last - first) / (n - 1) } else { 0 };
        let span = (last - first).saturating_add(gap).max(1);
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let key = first.saturating_add(self.rng % span);
        let low = lows.into_iter().rfind(|l| *l <= key).unwrap();
        let high = self.levels[i][&low].0.high_fence;
        (low, self.freq.get(&(i, low, high)).copied().unwrap_or(0))
    }

    fn insert(&mut self, h: &PageHeader, page: &[u8]) {
        let cost = self.charge.of(h, page);
        let level = usize::from(h.level());
        if level == 0 || level > self.levels.len() || cost > self.cap {
            return;
        }
        self.drop_page(level, h.low_fence);
        if self.lfu {
            self.bytes += cost;
            self.levels[level - 1].insert(h.low_fence, (*h, page.to_vec()));
            while self.bytes > self.cap {
                let i = self.levels.iter().position(|m| !m.is_empty()).unwrap();
                let (a, fa) = self.sample(i);
                let (mut b, mut fb) = self.sample(i);
                if a == b {
                    let lows: Vec<u64> = self.levels[i].keys().copied().collect();
                    b = lows.iter().copied().find(|l| *l > a).unwrap_or(lows[0]);
                    let high = self.levels[i][&b].0.high_fence;
                    fb = self.freq.get(&(i, b, high)).copied().unwrap_or(0);
                }
                self.drop_page(i + 1, if fa < fb { a } else { b });
            }
            return;
        }
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
    for (charge, eviction, upper, cap) in [
        (CacheCharge::WholePage, RR, false, 8 * 1024),
        (CacheCharge::WholePage, RR, true, 12 * 1024),
        (CacheCharge::LiveEntries, RR, false, 2000),
        (CacheCharge::LiveEntries, RR, true, 3000),
        (CacheCharge::WholePage, LFU, true, 12 * 1024),
        (CacheCharge::LiveEntries, LFU, false, 2000),
        (CacheCharge::LiveEntries, LFU, true, 3000),
    ] {
        let mut c = IndexCache::new(true, cap, charge, eviction, upper);
        let n = c.levels.len();
        let mut m = Model {
            levels: (0..n).map(|_| BTreeMap::new()).collect(),
            cursors: vec![0; n],
            bytes: 0,
            cap,
            charge,
            lfu: eviction == LFU,
            freq: BTreeMap::new(),
            rng: RNG_SEED,
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
                // The model counts leaf_for's hit as a second route_for's.
                let again = m.route_for(key, &g).map(|r| r.child);
                assert_eq!(c.leaf_for(key, &g), again, "key {key}");
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

//! CHIME's index cache above level 1 (`ShermanConfig::cache_upper_levels`, the authors'
//! `CACHE_MORE_INTERNAL_NODE`), on the soft fabric: a lookup whose level-1 page is not cached
//! starts at the cached page above it, not at the root; and cached pages that went stale
//! (their children split, the root grew) are caught, dropped and read afresh.
use remora_core::block_on::block_on;
use remora_core::chime::{Chime, ChimeConfig, ChimeNode};
use remora_core::index::KvIndex;
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode};
use std::sync::Arc;

fn node() -> Arc<SoftMemoryNode> {
    SoftMemoryNode::create(NodeConfig {
        node_id: 0,
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap()
}

/// 256-byte internal pages (a few thousand keys make three internal levels), no hotspot
/// cache (every lookup descends), `cache` bytes of index cache, upper levels cached or not.
fn cfg(cache: usize, upper: bool) -> ChimeConfig {
    let mut c = ChimeConfig {
        speculative: false,
        ..ChimeConfig::chime()
    };
    c.sherman.page_size = 256;
    c.sherman.cache_upper_levels = upper;
    c.with_cache(cache)
}

fn k(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

/// A handle of a compute node of its own (its own, cold, index cache) on the tree.
async fn open(ep: &SoftEndpoint, c: ChimeConfig) -> Chime<'_, SoftEndpoint> {
    Chime::create_on(ep, c, Arc::new(ChimeNode::new(&c)))
        .await
        .unwrap()
}

/// Looks up every `step`-th key below `n` (each must hold its own number), and returns the
/// round trips per lookup on `ep`.
async fn read_all(t: &Chime<'_, SoftEndpoint>, ep: &SoftEndpoint, n: u64, step: usize) -> f64 {
    read_keys(t, ep, (0..n).step_by(step)).await
}

/// `count` keys below `n` in a scattered order: consecutive lookups fall in other level-1
/// pages, and the order sweeps the key space in cycles, so a cache that holds a fraction of
/// the level-1 pages misses nearly every time.
fn scattered(n: u64, count: u64) -> impl Iterator<Item = u64> {
    (0..count).map(move |i| i * 7919 % n)
}

/// Looks up `keys` (each must hold its own number), and returns the round trips per lookup
/// on `ep`.
async fn read_keys(
    t: &Chime<'_, SoftEndpoint>,
    ep: &SoftEndpoint,
    keys: impl Iterator<Item = u64>,
) -> f64 {
    let before = ep.snapshot();
    let mut out = [0u8; 8];
    let mut count = 0;
    for x in keys {
        assert_eq!(t.get(&k(x), &mut out).await.unwrap(), Some(8), "key {x}");
        assert_eq!(u64::from_le_bytes(out), x, "key {x}");
        count += 1;
    }
    (ep.snapshot() - before).round_trips as f64 / count as f64
}

/// Bytes the whole index (every internal page, charged as CHIME's authors charge it) takes
/// in a cache: a fresh node with room for all of it reads every `step`-th key below `n`.
async fn index_bytes(ep: &SoftEndpoint, n: u64, step: usize) -> usize {
    let t = open(ep, cfg(64 << 20, true)).await;
    read_all(&t, ep, n, step).await;
    t.sherman().cache_stats().2
}

#[test]
fn a_level_1_miss_starts_below_the_root_when_upper_pages_are_cached() {
    const N: u64 = 20_000;
    let n = node();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let w = open(&ep, cfg(64 << 20, true)).await;
        for x in 0..N {
            w.upsert(&k(x), &x.to_le_bytes()).await.unwrap();
        }
        // An eighth of the index: the few upper pages fit, most level-1 pages do not.
        let cap = index_bytes(&ep, N, 1).await / 8;
        let mut rts = Vec::new();
        for upper in [true, false] {
            let t = open(&ep, cfg(cap, upper)).await;
            // Warm up once, then measure lookups spread across every leaf.
            read_keys(&t, &ep, scattered(N, 2000)).await;
            rts.push(read_keys(&t, &ep, scattered(N, 5000)).await);
        }
        let (with, without) = (rts[0], rts[1]);
        eprintln!("round trips per lookup: {with:.2} with upper pages, {without:.2} without");
        // A lookup READs its leaf's neighbourhood (1), and on a level-1 miss the level-1 page
        // first: with the level-2 pages cached that is all (+1), without them the READs
        // start at the root (+3: three internal levels). The misses are as many either way.
        assert!(with > 1.1, "{with}: too few level-1 misses to tell");
        assert!(
            without - 1.0 >= 2.5 * (with - 1.0),
            "{without} round trips per lookup without against {with} with"
        );
    });
}

#[test]
fn stale_cached_upper_pages_are_dropped_and_read_afresh() {
    const N: u64 = 48_000;
    let n = node();
    let (ep, wep) = (n.endpoint().unwrap(), n.endpoint().unwrap());
    block_on(async {
        let w = open(&wep, cfg(64 << 20, true)).await;
        // A small tree first (two internal levels), with every 16th key.
        for x in (0..N).step_by(16) {
            w.upsert(&k(x), &x.to_le_bytes()).await.unwrap();
        }
        // Room for four times the small tree's index: all of it now, a quarter of it once
        // grown (its upper pages and some of its level-1 pages).
        let cap = 4 * index_bytes(&ep, N, 16).await;
        let r = open(&ep, cfg(cap, true)).await;
        read_all(&r, &ep, N, 16).await;
        // Another node fills the gaps: every page the reader cached splits, again and again,
        // and the root grows a level.
        for x in 0..N {
            w.upsert(&k(x), &x.to_le_bytes()).await.unwrap();
        }
        // The reader's cached copies now point to pages that cover less than they did (the
        // old root's copy covers every key): each lookup still finds its key, and the copies
        // it finds stale are dropped and read afresh.
        read_all(&r, &ep, N, 1).await;
        // Refreshed: a level-1 miss now costs one READ more than a hit (the level-1 page,
        // from a fresh level-2 copy), not a walk along siblings from a stale copy.
        let (hits, misses, _) = r.sherman().cache_stats();
        let rt = read_keys(&r, &ep, scattered(N, 10_000)).await;
        let (hits, misses) = (
            r.sherman().cache_stats().0 - hits,
            r.sherman().cache_stats().1 - misses,
        );
        let miss = misses as f64 / (hits + misses) as f64;
        eprintln!("after the refresh: {rt:.2} round trips per lookup, {miss:.2} level-1 misses");
        assert!(miss > 0.1, "{miss}: too few level-1 misses to tell");
        assert!(
            rt - 1.0 <= miss + 0.05,
            "{rt} round trips per lookup with {miss} level-1 misses"
        );
    });
}

/// Sibling-based validation (`remora_core::chime`, `read.rs`): the leaves' group headers
/// carry no fences, so a reader (or writer) routed by a cached level-1 page older than a
/// split reaches the split leaf and must tell from the route and the leaf's sibling pointer
/// that the key moved right. With the check (`sibling_check`) every lookup finds its key and
/// an upsert through the stale page lands in the leaf that holds the key; without it the
/// same lookups miss keys that moved, which is what this test would see if the check were
/// removed.
#[test]
fn a_route_older_than_a_split_is_caught_by_the_sibling_check() {
    const N: u64 = 4_000;
    for check in [true, false] {
        let n = node();
        let (ep, wep) = (n.endpoint().unwrap(), n.endpoint().unwrap());
        let c = ChimeConfig {
            sibling_check: check,
            ..cfg(64 << 20, true)
        };
        let misses = block_on(async {
            let w = open(&wep, c).await;
            // Every 8th key: leaves about full, so the gaps split nearly every one.
            for x in (0..N).step_by(8) {
                w.upsert(&k(x), &x.to_le_bytes()).await.unwrap();
            }
            // The reader caches every level-1 page as it is now.
            let r = open(&ep, c).await;
            read_all(&r, &ep, N, 8).await;
            // Another node fills the gaps: the leaves split under the reader's cached pages.
            for x in 0..N {
                w.upsert(&k(x), &x.to_le_bytes()).await.unwrap();
            }
            let before = r.stats().sibling_reads;
            let mut out = [0u8; 8];
            let mut misses = 0;
            for x in 0..N {
                match r.get(&k(x), &mut out).await.unwrap() {
                    Some(8) => assert_eq!(u64::from_le_bytes(out), x, "key {x}"),
                    _ => misses += 1,
                }
            }
            if check {
                assert_eq!(misses, 0, "keys missed with the sibling check");
                assert!(r.stats().sibling_reads > before, "no sibling was checked");
                // Upserts through the reader's (refreshed where it was found stale, else
                // still stale) cache land where a fresh node finds them.
                let r2 = open(&ep, c).await;
                for x in (0..N).step_by(3) {
                    r.upsert(&k(x), &(x + 1).to_le_bytes()).await.unwrap();
                }
                let fresh = open(&ep, c).await;
                for x in 0..N {
                    let want = if x % 3 == 0 { x + 1 } else { x };
                    for t in [&fresh, &r2] {
                        assert_eq!(t.get(&k(x), &mut out).await.unwrap(), Some(8), "key {x}");
                        assert_eq!(u64::from_le_bytes(out), want, "key {x}");
                    }
                }
                let mut seen = Vec::new();
                fresh
                    .scan(&k(0), N as usize + 1, &mut |kk, _| {
                        seen.push(u64::from_be_bytes(kk.try_into().unwrap()))
                    })
                    .await
                    .unwrap();
                assert_eq!(seen, (0..N).collect::<Vec<_>>(), "one copy of each key");
            }
            misses
        });
        eprintln!("sibling check {check}: {misses} of {N} lookups missed");
        if !check {
            assert!(
                misses > 0,
                "no lookup was routed by a stale page: the test shows nothing"
            );
        }
    }
}

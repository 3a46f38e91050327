//! CHIME's bulk load (`Chime::bulk_load`, core's `chime/bulk.rs`): the tree it builds has the
//! shape random inserts of the same keys grow (leaves as full, within 10%), every key reads
//! back with its value, a scan returns them all in order, and the loaded tree takes inserts
//! (hops and splits of loaded leaves), updates and deletes afterwards; it refuses a tree
//! that is not empty and keys out of order. Also with hopscotch leaves off (Sherman's load).
use remora_core::block_on::block_on;
use remora_core::chime::{
    Chime, ChimeBulkStats, ChimeConfig, INSERT_FILL_PERCENT, INTERNAL_FILL_PERCENT,
};
use remora_core::index::KvIndex;
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode};
use std::sync::Arc;

/// Keys inserted and loaded.
const KEYS: u64 = if cfg!(debug_assertions) {
    5_000
} else {
    20_000
};

/// Key number `n`: a bijection of the integers (an odd multiplier), so keys spread over the
/// key space as hashed YCSB keys do (as `chime_churn`).
fn key(n: u64) -> u64 {
    n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 1
}

fn node() -> Arc<SoftMemoryNode> {
    SoftMemoryNode::create(NodeConfig {
        node_id: 0,
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap()
}

fn cfg(hopscotch: bool) -> ChimeConfig {
    let mut c = ChimeConfig::chime();
    c.sherman.page_size = 256;
    if !hopscotch {
        c.hopscotch = false;
        c.vacancy_lock = false;
        c.speculative = false;
    }
    c.with_cache(1 << 20)
}

/// The keys sorted, with their key numbers.
fn sorted() -> Vec<(u64, u64)> {
    let mut ks: Vec<(u64, u64)> = (0..KEYS).map(|n| (key(n), n)).collect();
    ks.sort_unstable();
    ks
}

async fn load(
    t: &Chime<'_, SoftEndpoint>,
    ks: &[(u64, u64)],
    fill: u8,
) -> Result<ChimeBulkStats, String> {
    let mut entry = |i: u64, out: &mut [u8]| {
        let (k, n) = ks[i as usize];
        out[..8].copy_from_slice(&n.to_le_bytes());
        (k.to_be_bytes(), 8)
    };
    t.bulk_load(ks.len() as u64, fill, INTERNAL_FILL_PERCENT, &mut entry)
        .await
        .map_err(|e| e.to_string())
}

/// Every key reads back its key number, through a fresh handle (cold caches), and a scan
/// from the lowest returns them all in order.
async fn check_all(t: &Chime<'_, SoftEndpoint>, ks: &[(u64, u64)]) {
    let mut out = [0u8; 8];
    for &(k, n) in ks {
        assert_eq!(
            t.get(&k.to_be_bytes(), &mut out).await.unwrap(),
            Some(8),
            "key {k:#x}"
        );
        assert_eq!(u64::from_le_bytes(out), n, "key {k:#x}");
    }
    let mut seen = Vec::with_capacity(ks.len());
    t.scan(&0u64.to_be_bytes(), ks.len() + 1, &mut |k, _| {
        seen.push(u64::from_be_bytes(k.try_into().unwrap()))
    })
    .await
    .unwrap();
    assert!(
        seen.iter().copied().eq(ks.iter().map(|p| p.0)),
        "the scan returned {} keys, not the {} loaded in order",
        seen.len(),
        ks.len()
    );
}

/// Inserts between the loaded keys, updates, deletes: the loaded tree is an ordinary one.
async fn mutate(t: &Chime<'_, SoftEndpoint>, ks: &[(u64, u64)]) {
    let mut out = [0u8; 8];
    let step = (ks.len() / 500).max(1);
    let fresh: Vec<u64> = ks.iter().step_by(step).map(|p| p.0 + 1).collect();
    for &k in &fresh {
        t.upsert(&k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
    }
    for (i, &(k, _)) in ks.iter().enumerate().step_by(7) {
        if i % 2 == 0 {
            assert!(t.update(&k.to_be_bytes(), &[7; 8]).await.unwrap());
        } else {
            assert!(t.delete(&k.to_be_bytes()).await.unwrap());
        }
    }
    for &k in &fresh {
        assert_eq!(t.get(&k.to_be_bytes(), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), k);
    }
    for (i, &(k, n)) in ks.iter().enumerate() {
        let got = t.get(&k.to_be_bytes(), &mut out).await.unwrap();
        let want = match (i % 7, i % 2) {
            (0, 0) => Some(u64::from_le_bytes([7; 8])),
            (0, _) => None,
            _ => Some(n),
        };
        assert_eq!(got.map(|_| u64::from_le_bytes(out)), want, "key {i}");
    }
}

/// The bulk-loaded tree has as many leaves as random inserts grow (within 10%), holds every
/// key, and takes writes. Prints both trees' leaf counts (`--nocapture`): the measurement
/// behind `INSERT_FILL_PERCENT`.
#[test]
fn a_bulk_loaded_chime_is_the_tree_inserts_grow() {
    let ks = sorted();
    let (inserted, loaded) = (node(), node());
    let (ei, el) = (inserted.endpoint().unwrap(), loaded.endpoint().unwrap());
    block_on(async {
        let t = Chime::create(&ei, cfg(true)).await.unwrap();
        for n in 0..KEYS {
            t.upsert(&key(n).to_be_bytes(), &n.to_le_bytes())
                .await
                .unwrap();
        }
        let grown = t.leaf_spread().await.unwrap();
        let b = Chime::create(&el, cfg(true)).await.unwrap();
        let st = load(&b, &ks, INSERT_FILL_PERCENT).await.unwrap();
        let built = b.leaf_spread().await.unwrap();
        eprintln!(
            "{KEYS} random keys inserted: {} leaves, {:.1} keys a leaf ({:.1}% of 64), {} to {}; \
             bulk-loaded at {INSERT_FILL_PERCENT}%: {} leaves, {:.1} keys a leaf, {} to {}; \
             {:?}",
            grown.leaves,
            grown.entries as f64 / grown.leaves as f64,
            100.0 * grown.entries as f64 / grown.leaves as f64 / 64.0,
            grown.min,
            grown.max,
            built.leaves,
            built.entries as f64 / built.leaves as f64,
            built.min,
            built.max,
            st
        );
        assert_eq!((built.entries, grown.entries), (KEYS, KEYS));
        assert_eq!(built.leaves, st.tree.leaves);
        let (g, l) = (grown.leaves as f64, built.leaves as f64);
        assert!(
            (l - g).abs() <= 0.1 * g,
            "bulk-loaded {l} leaves, inserts grew {g}"
        );
        assert!(st.displaced > 0, "no entry off its home: no hop was taken");
        // A fresh handle: nothing cached from the load.
        let r = Chime::create(&el, cfg(true)).await.unwrap();
        let w = r.warm_cache().await.unwrap();
        assert!(w.cached > 0 && w.levels >= 1, "{w:?}");
        check_all(&r, &ks).await;
        mutate(&r, &ks).await;
        assert!(
            r.stats().splits > 0 || r.stats().hops > 0,
            "{:?}",
            r.stats()
        );
    });
}

/// Packed full (fill 100%: until a key finds no room), inserts between the loaded keys split
/// loaded leaves; every key still reads back.
#[test]
fn full_loaded_leaves_split_under_inserts() {
    let ks = sorted();
    let n = node();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let t = Chime::create(&ep, cfg(true)).await.unwrap();
        let st = load(&t, &ks, 100).await.unwrap();
        assert!(st.no_room > 0, "{st:?}");
        let s = t.leaf_spread().await.unwrap();
        assert!(s.entries as f64 / s.leaves as f64 > 40.0, "{s:?}");
        let r = Chime::create(&ep, cfg(true)).await.unwrap();
        mutate(&r, &ks).await;
        assert!(r.stats().splits > 0, "{:?}", r.stats());
    });
}

/// With hopscotch leaves off the tree is Sherman's, and so is its load.
#[test]
fn without_hopscotch_the_load_is_shermans() {
    let ks = sorted();
    let n = node();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let t = Chime::create(&ep, cfg(false)).await.unwrap();
        let st = load(&t, &ks, INTERNAL_FILL_PERCENT).await.unwrap();
        assert_eq!(st.tree.keys, KEYS);
        let r = Chime::create(&ep, cfg(false)).await.unwrap();
        check_all(&r, &ks).await;
        mutate(&r, &ks).await;
    });
}

/// A tree with a key in it, or keys out of order, are refused.
#[test]
fn a_used_tree_and_unsorted_keys_are_refused() {
    let ks = sorted();
    for hopscotch in [true, false] {
        let n = node();
        let ep = n.endpoint().unwrap();
        block_on(async {
            let t = Chime::create(&ep, cfg(hopscotch)).await.unwrap();
            t.upsert(&5u64.to_be_bytes(), &[1; 8]).await.unwrap();
            let e = load(&t, &ks[..10], 60).await.unwrap_err();
            assert!(e.contains("empty"), "{e}");
        });
        let n = node();
        let ep = n.endpoint().unwrap();
        block_on(async {
            let t = Chime::create(&ep, cfg(hopscotch)).await.unwrap();
            let mut bad = ks[..10].to_vec();
            bad.swap(3, 4);
            let e = load(&t, &bad, 60).await.unwrap_err();
            assert!(e.contains("ascending"), "{e}");
        });
    }
}

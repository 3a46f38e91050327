//! Sherman on the soft fabric: oracle-checked histories (single client, concurrent threads),
//! splits racing lookups, scans racing inserts, the counters behind the paper's claims, and
//! bad input (a dead lock holder, a corrupt page).
use proptest::prelude::*;
use remora_core::block_on::block_on;
use remora_core::fabric::{Endpoint, QueuePair};
use remora_core::index::KvIndex;
use remora_core::kvcheck::{History, client_history};
use remora_core::lease::{LeaseConfig, owner_word};
use remora_core::sherman::{Sherman, ShermanConfig, ShermanError};
use remora_core::{GlobalAddr, Snapshot};
use remora_poller::executor::run_coroutines;
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

fn node() -> Arc<SoftMemoryNode> {
    SoftMemoryNode::create(NodeConfig {
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap()
}

/// Small pages so that a few hundred keys make a three-level tree.
fn small(mut c: ShermanConfig) -> ShermanConfig {
    c.page_size = 256;
    c
}

fn k(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}
fn v(x: u64) -> [u8; 8] {
    x.to_le_bytes()
}

async fn get(t: &Sherman<'_, SoftEndpoint>, key: u64) -> Option<u64> {
    let mut out = [0u8; 8];
    t.get(&k(key), &mut out)
        .await
        .unwrap()
        .map(|_| u64::from_le_bytes(out))
}

async fn scan(t: &Sherman<'_, SoftEndpoint>, from: u64, n: usize) -> Vec<(u64, u64)> {
    let mut got = Vec::new();
    t.scan(&k(from), n, &mut |kk, vv| {
        got.push((
            u64::from_be_bytes(kk.try_into().unwrap()),
            u64::from_le_bytes(vv.try_into().unwrap()),
        ))
    })
    .await
    .unwrap();
    got
}

#[derive(Debug, Clone)]
enum Cmd {
    Upsert(u64, u64),
    Update(u64, u64),
    Delete(u64),
    Get(u64),
    Scan(u64, usize),
}

fn cmd() -> impl Strategy<Value = Cmd> {
    let key = 0u64..400;
    prop_oneof![
        4 => (key.clone(), any::<u64>()).prop_map(|(a, b)| Cmd::Upsert(a, b)),
        1 => (key.clone(), any::<u64>()).prop_map(|(a, b)| Cmd::Update(a, b)),
        1 => key.clone().prop_map(Cmd::Delete),
        2 => key.clone().prop_map(Cmd::Get),
        1 => (key, 1usize..40).prop_map(|(a, n)| Cmd::Scan(a, n)),
    ]
}

fn check_history(cfg: ShermanConfig, cmds: &[Cmd]) {
    let n = node();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let t = Sherman::create(&ep, cfg).await.unwrap();
        let mut oracle = BTreeMap::new();
        for c in cmds {
            match *c {
                Cmd::Upsert(a, b) => {
                    t.upsert(&k(a), &v(b)).await.unwrap();
                    oracle.insert(a, b);
                }
                Cmd::Update(a, b) => {
                    let present = t.update(&k(a), &v(b)).await.unwrap();
                    assert_eq!(present, oracle.contains_key(&a), "update({a})");
                    if present {
                        oracle.insert(a, b);
                    }
                }
                Cmd::Delete(a) => assert_eq!(
                    t.delete(&k(a)).await.unwrap(),
                    oracle.remove(&a).is_some(),
                    "delete({a})"
                ),
                Cmd::Get(a) => assert_eq!(get(&t, a).await, oracle.get(&a).copied(), "get({a})"),
                Cmd::Scan(a, m) => {
                    let want: Vec<_> = oracle.range(a..).take(m).map(|(x, y)| (*x, *y)).collect();
                    assert_eq!(scan(&t, a, m).await, want, "scan({a}, {m})");
                }
            }
        }
        for (a, b) in &oracle {
            assert_eq!(get(&t, *a).await, Some(*b));
        }
        assert_eq!(scan(&t, 0, usize::MAX).await.len(), oracle.len());
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn sherman_matches_a_btreemap(cmds in proptest::collection::vec(cmd(), 1..600)) {
        check_history(small(ShermanConfig::sherman()), &cmds);
    }

    #[test]
    fn fg_plus_matches_a_btreemap(cmds in proptest::collection::vec(cmd(), 1..600)) {
        check_history(small(ShermanConfig::fg_plus()), &cmds);
    }
}

#[test]
fn ascending_and_descending_loads_build_deep_trees() {
    let n = node();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let t = Sherman::create(&ep, small(ShermanConfig::sherman()))
            .await
            .unwrap();
        for i in 0..3000u64 {
            let key = if i % 2 == 0 { i } else { 1_000_000 - i };
            t.upsert(&k(key), &v(key * 3)).await.unwrap();
        }
        for i in 0..3000u64 {
            let key = if i % 2 == 0 { i } else { 1_000_000 - i };
            assert_eq!(get(&t, key).await, Some(key * 3));
        }
        assert!(
            t.stats().1 > 300,
            "expected many splits, got {:?}",
            t.stats()
        );
        let all = scan(&t, 0, usize::MAX).await;
        assert_eq!(all.len(), 3000);
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    });
}

/// Threads × coroutines, each running an oracle-checked history (`remora_core::kvcheck`):
/// exact on its own key range, and never a torn, invented or backwards value on hot keys.
fn concurrent_history(cfg: ShermanConfig) {
    const THREADS: u64 = 4;
    let n = node();
    {
        let ep = n.endpoint().unwrap();
        block_on(Sherman::create(&ep, cfg)).unwrap();
    }
    std::thread::scope(|s| {
        for w in 0..THREADS {
            let n = n.clone();
            s.spawn(move || {
                let ep = n.endpoint().unwrap();
                let t = block_on(Sherman::open(&ep, cfg)).unwrap();
                // two coroutines per thread, so the local lock table and hand-over are used
                let coros = (0..2u64)
                    .map(|c| {
                        let t = &t;
                        let h = History {
                            client: 1 + w * 2 + c,
                            ops: 1500,
                            range: 300,
                            hot: 8,
                            seed: 42,
                            value_size: 8,
                            scans: true,
                        };
                        async move { client_history(t, &h).await.unwrap() }
                    })
                    .collect();
                run_coroutines(coros);
            });
        }
    });
}

#[test]
fn concurrent_threads_agree_with_their_oracles_sherman() {
    concurrent_history(small(ShermanConfig::sherman()));
}

#[test]
fn concurrent_threads_agree_with_their_oracles_fg_plus() {
    concurrent_history(small(ShermanConfig::fg_plus()));
}

/// The authors' tracker reports "not found" for present keys under concurrent updates; here
/// readers must find every key while other threads update them and split their leaves.
#[test]
fn lookups_never_miss_present_keys_under_updates_and_splits() {
    let n = node();
    let cfg = small(ShermanConfig::sherman());
    {
        let ep = n.endpoint().unwrap();
        let t = block_on(Sherman::create(&ep, cfg)).unwrap();
        for i in 0..200u64 {
            block_on(t.upsert(&k(i * 1000), &v(i))).unwrap();
        }
    }
    let stop = AtomicBool::new(false);
    let inserted = AtomicU64::new(0);
    let lookups = AtomicU64::new(0);
    std::thread::scope(|s| {
        // updater of the present keys
        s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let t = block_on(Sherman::open(&ep, cfg)).unwrap();
            let mut r = 0u64;
            while !stop.load(Relaxed) {
                r += 1;
                block_on(t.update(&k((r % 200) * 1000), &v(r))).unwrap();
            }
        });
        // inserter between them: splits every leaf many times
        s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let t = block_on(Sherman::open(&ep, cfg)).unwrap();
            for j in 1..999u64 {
                for i in 0..200u64 {
                    block_on(t.upsert(&k(i * 1000 + j), &v(j))).unwrap();
                }
                inserted.store(j, Release);
                if j >= 15 {
                    break;
                }
            }
            stop.store(true, Relaxed);
        });
        s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let t = block_on(Sherman::open(&ep, cfg)).unwrap();
            let mut r = 0u64;
            while !stop.load(Relaxed) {
                r = r
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let i = (r >> 33) % 200;
                assert!(
                    block_on(async { get(&t, i * 1000).await }).is_some(),
                    "present key {} not found",
                    i * 1000
                );
                let j = inserted.load(Acquire);
                if j > 0 {
                    let kk = i * 1000 + 1 + (r >> 20) % j;
                    assert!(
                        block_on(get(&t, kk)).is_some(),
                        "inserted key {kk} not found"
                    );
                }
                lookups.fetch_add(1, Relaxed);
            }
        });
    });
    assert!(lookups.load(SeqCst) > 100);
}

/// A scan racing inserts returns sorted, unique keys and every key inserted before it began.
#[test]
fn scans_do_not_miss_concurrent_inserts() {
    let n = node();
    let cfg = small(ShermanConfig::sherman());
    {
        let ep = n.endpoint().unwrap();
        block_on(Sherman::create(&ep, cfg)).unwrap();
    }
    let done = AtomicBool::new(false);
    let watermark = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let t = block_on(Sherman::open(&ep, cfg)).unwrap();
            // inserts 0, 2, 4, ... in a scrambled order within blocks, publishing a watermark
            for block in 0..40u64 {
                for i in 0..50u64 {
                    let key = (block * 50 + (i * 37) % 50) * 2;
                    block_on(t.upsert(&k(key), &v(key))).unwrap();
                }
                watermark.store((block + 1) * 50, Release);
            }
            done.store(true, Release);
        });
        s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let t = block_on(Sherman::open(&ep, cfg)).unwrap();
            let mut scans = 0;
            while !done.load(Acquire) || scans < 3 {
                let before = watermark.load(Acquire);
                let got = block_on(scan(&t, 0, usize::MAX));
                assert!(
                    got.windows(2).all(|w| w[0].0 < w[1].0),
                    "scan not sorted/unique"
                );
                let keys: std::collections::BTreeSet<u64> = got.iter().map(|e| e.0).collect();
                for i in 0..before {
                    assert!(
                        keys.contains(&(i * 2)),
                        "scan missed key {} inserted before it began",
                        i * 2
                    );
                }
                scans += 1;
            }
        });
    });
}

fn counters_of(ep: &SoftEndpoint) -> Snapshot {
    ep.snapshot()
}

/// Bytes and round trips of a non-split update: Sherman writes back one entry and unlocks in
/// the same doorbell; FG+ writes the whole page and unlocks in a second one.
#[test]
fn update_costs_entry_bytes_and_fewer_round_trips_than_fg_plus() {
    let measure = |cfg: ShermanConfig| -> (f64, f64) {
        let n = node();
        let ep = n.endpoint().unwrap();
        block_on(async {
            let t = Sherman::create(&ep, cfg).await.unwrap();
            for i in 0..100u64 {
                t.upsert(&k(i), &v(i)).await.unwrap();
            }
            let mut out = [0u8; 8];
            for i in 0..100u64 {
                t.get(&k(i), &mut out).await.unwrap(); // warm the index cache
            }
            let before = counters_of(&ep);
            for i in 0..100u64 {
                assert!(t.update(&k(i), &v(i + 1)).await.unwrap());
            }
            let d = counters_of(&ep) - before;
            (d.bytes_out as f64 / 100.0, d.round_trips as f64 / 100.0)
        })
    };
    let (sb, sr) = measure(ShermanConfig::sherman());
    let (fb, fr) = measure(ShermanConfig::fg_plus());
    let no_combine = measure(ShermanConfig {
        combine_commands: false,
        ..ShermanConfig::sherman()
    });
    eprintln!(
        "per update: sherman {sb} B out, {sr} RT; fg+ {fb} B out, {fr} RT; sherman w/o combination {} RT",
        no_combine.1
    );
    // lock CAS (16) + redo record (32 + entry) + redo pointer (8) + entry (24) + unlock (8)
    // vs lock CAS + redo record (32 + page) + redo pointer + whole page (1024) + unlock: the
    // record is what lets the next lock holder repair a write torn by a dying writer.
    assert_eq!(sb, 16.0 + (32.0 + 24.0) + 8.0 + 24.0 + 8.0);
    assert_eq!(fb, 16.0 + (32.0 + 1024.0) + 8.0 + 1024.0 + 8.0);
    // lock, read, write-back+unlock vs lock, read, write-back, unlock
    assert_eq!(sr, 3.0);
    assert_eq!(fr, 4.0);
    assert_eq!(no_combine.1, 4.0);
}

/// Leases short enough for a test to wait one out.
fn short_lease(c: ShermanConfig) -> ShermanConfig {
    ShermanConfig {
        lease: LeaseConfig {
            lease_ns: 2_000_000,
            deadline_ns: 500_000_000,
            ..LeaseConfig::default()
        },
        ..c
    }
}

/// Locks whose holder died (Sherman's on-chip words, FG+'s host table): after one lease the
/// writer fences the holder and takes over; the holder, fenced, can no longer write.
#[test]
fn a_dead_lock_holder_is_fenced_and_its_locks_taken_over() {
    for base in [ShermanConfig::sherman(), ShermanConfig::fg_plus()] {
        let n = node();
        let ep = n.endpoint().unwrap();
        let dead = n.endpoint().unwrap();
        let cfg = short_lease(base);
        block_on(async {
            let t = Sherman::create(&ep, cfg).await.unwrap();
            t.upsert(&k(1), &v(1)).await.unwrap();
            // Another client takes every lock word of the tree, then stops.
            let _other = Sherman::open(&dead, cfg).await.unwrap();
            let qd = dead.qp(0).unwrap();
            let word = owner_word(dead.client_id(), 7);
            let words: Vec<GlobalAddr> = if base.onchip_locks {
                (0..n.config().dm_len / 8)
                    .map(|i| GlobalAddr::device(0, i * 8))
                    .collect()
            } else {
                host_lock_table(&ep, cfg).await
            };
            for &w in &words {
                qd.cas(w, 0, word).await.unwrap();
            }
            let t0 = std::time::Instant::now();
            t.upsert(&k(1), &v(2)).await.unwrap();
            assert!(t0.elapsed().as_nanos() >= cfg.lease.lease_ns as u128);
            assert_eq!(get(&t, 1).await, Some(2));
            assert!(t.repairs().takeovers >= 1, "the takeover is counted");
            let r = qd.write(words[0], &[0u8; 8]).await;
            assert!(r.is_err(), "the fenced holder still writes: {r:?}");
        });
    }
}

/// The host lock table's words (FG+), from the tree's descriptor.
async fn host_lock_table(ep: &SoftEndpoint, cfg: ShermanConfig) -> Vec<GlobalAddr> {
    let qp = ep.qp(0).unwrap();
    let mut d = [0u8; 8];
    let slot = remora_layouts::region::root_offset(cfg.root_slot);
    qp.read(GlobalAddr::new(0, slot), &mut d).await.unwrap();
    let desc = GlobalAddr::from_raw(u64::from_le_bytes(d));
    qp.read(desc.add(48), &mut d).await.unwrap();
    let count = u64::from_le_bytes(d);
    let count = 1u64 << (63 - count.leading_zeros());
    qp.read(desc.add(64), &mut d).await.unwrap();
    let table = GlobalAddr::from_raw(u64::from_le_bytes(d));
    (0..count).map(|i| table.add(i * 8)).collect()
}

/// A lock word that names no client cannot be fenced: a clear error naming it after the
/// deadline, not a hang and not a broken lock.
#[test]
fn an_unfenceable_lock_holder_is_an_error_not_a_hang() {
    let n = node();
    let ep = n.endpoint().unwrap();
    let cfg = ShermanConfig {
        lock_retries: 200,
        ..short_lease(ShermanConfig::sherman())
    };
    block_on(async {
        let t = Sherman::create(&ep, cfg).await.unwrap();
        t.upsert(&k(1), &v(1)).await.unwrap();
        // Every device-memory lock word taken by a word that names no client.
        let qp = ep.qp(0).unwrap();
        let dm = n.config().dm_len;
        for i in 0..dm / 8 {
            qp.cas(GlobalAddr::device(0, i * 8), 0, 0xDEAD)
                .await
                .unwrap();
        }
        match t.upsert(&k(1), &v(2)).await {
            Err(ShermanError::LockHeld {
                holder: 0,
                word: 0xDEAD,
                ..
            }) => {}
            other => panic!("expected a held lock, got {other:?}"),
        }
        assert_eq!(
            get(&t, 1).await,
            Some(1),
            "lookups are lock-free and still work"
        );
    });
}

/// The rightmost level-1 page (where ascending inserts add separators) and its image.
async fn rightmost_level_1(ep: &SoftEndpoint, cfg: ShermanConfig) -> (GlobalAddr, Vec<u8>) {
    use remora_layouts::sherman::{COUNT, LEVEL};
    let qp = ep.qp(0).unwrap();
    let mut d = [0u8; 8];
    let slot = remora_layouts::region::root_offset(cfg.root_slot);
    qp.read(GlobalAddr::new(0, slot), &mut d).await.unwrap();
    let desc = GlobalAddr::from_raw(u64::from_le_bytes(d));
    qp.read(desc.add(8), &mut d).await.unwrap();
    let mut page = GlobalAddr::from_raw(u64::from_le_bytes(d));
    let mut img = vec![0u8; cfg.page_size];
    let word = |img: &[u8], at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    loop {
        qp.read(page, &mut img).await.unwrap();
        let meta = word(&img, 8);
        assert!(LEVEL.get(meta) >= 1, "the tree has grown");
        if LEVEL.get(meta) == 1 {
            return (page, img);
        }
        let count = COUNT.get(meta) as usize;
        page = GlobalAddr::from_raw(if count == 0 {
            word(&img, 40)
        } else {
            word(&img, 64 + (count - 1) * 16 + 8)
        });
    }
}

/// An internal page torn by a writer that died inside its WRITE (half the old image, half
/// the new): it is re-derived from the level below, and every key is found again.
#[test]
fn a_torn_internal_page_is_rederived_from_the_level_below() {
    for base in [ShermanConfig::sherman(), ShermanConfig::fg_plus()] {
        let n = node();
        let ep = n.endpoint().unwrap();
        let cfg = ShermanConfig {
            index_cache: false,
            ..short_lease(small(base))
        };
        block_on(async {
            let t = Sherman::create(&ep, cfg).await.unwrap();
            for i in 0..60 {
                t.upsert(&k(i * 10), &v(i)).await.unwrap();
            }
            let (root, old) = rightmost_level_1(&ep, cfg).await;
            for i in 60..70 {
                t.upsert(&k(i * 10), &v(i)).await.unwrap();
            }
            let mut new = vec![0u8; cfg.page_size];
            ep.qp(0).unwrap().read(root, &mut new).await.unwrap();
            assert_ne!(old, new, "the inserts changed the page");
            let mut torn = new.clone();
            torn[128..].copy_from_slice(&old[128..]);
            let qp = ep.qp(0).unwrap();
            qp.write(root, &torn).await.unwrap();
            // A fresh handle (no cached root image) reads the torn root.
            let u = Sherman::open(&ep, cfg).await.unwrap();
            let mut out = [0u8; 8];
            for i in 0..70 {
                assert_eq!(
                    u.get(&k(i * 10), &mut out).await.unwrap(),
                    Some(8),
                    "key {i}"
                );
                assert_eq!(out, v(i));
            }
            assert_eq!(u.repairs().pages_rederived, 1, "{:?}", u.repairs());
            for i in 70..200 {
                u.upsert(&k(i * 10), &v(i)).await.unwrap();
            }
            for i in 0..200 {
                assert_eq!(get(&u, i * 10).await, Some(i), "key {i}");
            }
        });
    }
}

/// A page overwritten with garbage: lookups report it, they do not panic or loop.
#[test]
fn a_corrupt_page_is_reported() {
    let n = node();
    let ep = n.endpoint().unwrap();
    let cfg = ShermanConfig {
        index_cache: false,
        ..short_lease(ShermanConfig::sherman())
    };
    block_on(async {
        let t = Sherman::create(&ep, cfg).await.unwrap();
        t.upsert(&k(5), &v(5)).await.unwrap();
        let qp = ep.qp(0).unwrap();
        // the root slot points at the descriptor; its second word is the root page
        let mut d = [0u8; 8];
        qp.read(
            GlobalAddr::new(
                0,
                remora_layouts::region::root_offset(ShermanConfig::sherman().root_slot),
            ),
            &mut d,
        )
        .await
        .unwrap();
        let desc = GlobalAddr::from_raw(u64::from_le_bytes(d));
        qp.read(desc.add(8), &mut d).await.unwrap();
        let root = GlobalAddr::from_raw(u64::from_le_bytes(d));
        qp.write(root, &[0xA5u8; 1024]).await.unwrap();
        let mut out = [0u8; 8];
        match t.get(&k(5), &mut out).await {
            Err(ShermanError::Corrupt { .. }) => {}
            other => panic!("expected a corrupt-page error, got {other:?}"),
        }
        assert!(matches!(
            t.upsert(&[1, 2, 3], &v(1)).await,
            Err(ShermanError::BadKey { len: 3 })
        ));
    });
}

/// One leaf, two keys updated in place as fast as one thread can, read as fast as another
/// can: torn entries must be re-read, never reported missing or returned half-written.
#[test]
fn torn_entries_are_reread_not_reported_missing() {
    let n = node();
    let cfg = ShermanConfig::sherman();
    {
        let ep = n.endpoint().unwrap();
        let t = block_on(Sherman::create(&ep, cfg)).unwrap();
        for key in [7u64, 8] {
            block_on(t.upsert(&k(key), &v(key << 32))).unwrap();
        }
    }
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let t = block_on(Sherman::open(&ep, cfg)).unwrap();
            for i in 1..=30_000u64 {
                let key = 7 + (i & 1);
                // the value repeats the key in its high half: a torn value would not
                block_on(t.update(&k(key), &v(key << 32 | i))).unwrap();
            }
            done.store(true, Release);
        });
        s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let t = block_on(Sherman::open(&ep, cfg)).unwrap();
            let mut i = 0u64;
            while !done.load(Acquire) {
                i += 1;
                let key = 7 + (i & 1);
                let got =
                    block_on(get(&t, key)).unwrap_or_else(|| panic!("key {key} reported missing"));
                assert_eq!(
                    got >> 32,
                    key,
                    "value {got:#x} was never written to key {key}"
                );
            }
            reads.store(i, SeqCst);
        });
    });
    assert!(reads.load(SeqCst) > 1000);
}

/// `get` returns exactly the bytes upserted (not padded to the value size), through updates,
/// splits and whole-page write-backs; a buffer smaller than the value is `BufferTooSmall`.
fn exact_values(cfg: ShermanConfig) {
    let n = node();
    let ep = n.endpoint().unwrap();
    let cfg = ShermanConfig {
        page_size: 512, // 9 entries of 48 bytes a leaf
        value_size: 32,
        ..cfg
    };
    let val = |key: u64, round: u64| -> Vec<u8> {
        let len = ((key * 7 + round) % 33) as usize;
        (0..len)
            .map(|i| (key as u8) ^ (round as u8) ^ i as u8)
            .collect()
    };
    block_on(async {
        let t = Sherman::create(&ep, cfg).await.unwrap();
        let mut out = [0u8; 32];
        t.upsert(&k(1), &[7, 8, 9]).await.unwrap();
        assert_eq!(t.get(&k(1), &mut out).await.unwrap(), Some(3));
        assert_eq!(&out[..3], &[7, 8, 9]);
        let mut small_buf = [0u8; 2];
        assert_eq!(
            t.get(&k(1), &mut small_buf).await,
            Err(ShermanError::BufferTooSmall { need: 3, got: 2 })
        );
        let mut exact = [0u8; 3];
        assert_eq!(t.get(&k(1), &mut exact).await.unwrap(), Some(3));
        t.upsert(&k(2), &[]).await.unwrap();
        assert_eq!(t.get(&k(2), &mut []).await.unwrap(), Some(0));
        assert!(matches!(
            t.upsert(&k(3), &[0u8; 33]).await,
            Err(ShermanError::ValueTooLong { len: 33, max: 32 })
        ));
        // enough keys for many splits, then rewrite them all with other lengths
        for round in 0..2u64 {
            for key in 0..300u64 {
                t.upsert(&k(key), &val(key, round)).await.unwrap();
            }
            for key in 0..300u64 {
                let want = val(key, round);
                assert_eq!(
                    t.get(&k(key), &mut out).await.unwrap(),
                    Some(want.len()),
                    "key {key}"
                );
                assert_eq!(&out[..want.len()], &want[..], "key {key}");
            }
        }
        assert!(t.update(&k(5), &[1]).await.unwrap());
        assert_eq!(t.get(&k(5), &mut out).await.unwrap(), Some(1));
        let mut seen = 0;
        t.scan(&k(0), usize::MAX, &mut |kk, vv| {
            let key = u64::from_be_bytes(kk.try_into().unwrap());
            let want = if key == 5 { vec![1] } else { val(key, 1) };
            assert_eq!(vv, &want[..], "scan of key {key}");
            seen += 1;
        })
        .await
        .unwrap();
        assert_eq!(seen, 300);
    });
}

#[test]
fn values_read_back_exactly_sherman() {
    exact_values(ShermanConfig::sherman());
}

#[test]
fn values_read_back_exactly_fg_plus() {
    exact_values(ShermanConfig::fg_plus());
}

/// What the page verification costs per READ, against the old front == rear check: CPU per
/// page image (1 KiB, 8-byte values: a full leaf of 39 entries and a full internal page of 59)
/// and per lookup on the soft fabric. Prints the figures (run with `--release --nocapture`
/// for meaningful numbers) and checks that both checks decide the same on whole pages.
#[test]
fn verification_cost_per_read() {
    use remora_core::fabric::SegmentOrder;
    use remora_core::sherman::PageCheck;
    use remora_layouts::sherman::{
        Geometry, KEY_INFINITY, PageHeader, Slot, encode_leaf_entry, leaf_slot, seal,
        set_internal_entry, verify_leaf,
    };
    use std::hint::black_box;
    use std::time::Instant;
    let g = Geometry::new(1024, 8).unwrap();
    let header = |level: u8, count: usize| PageHeader {
        front_version: 41,
        meta: PageHeader::pack_meta(level, level == 0, count),
        low_fence: 0,
        high_fence: KEY_INFINITY,
        leftmost: 64,
        ..Default::default()
    };
    let mut leaf = vec![0u8; 1024];
    header(0, 0).encode(&mut leaf);
    for s in 0..g.leaf_capacity() {
        let at = g.leaf_entry_offset(s);
        let key = 1000 - s as u64;
        encode_leaf_entry(&mut leaf[at..at + 24], key, &v(key), 1, true, 41);
    }
    seal(&mut leaf, &g);
    let mut internal = vec![0u8; 1024];
    header(1, g.internal_capacity()).encode(&mut internal);
    for i in 0..g.internal_capacity() {
        set_internal_entry(&mut internal, &g, i, i as u64 * 10, 4096 * (i as u64 + 2));
    }
    seal(&mut internal, &g);
    let want = 1000 - 20; // in slot 20
    let new_leaf = |p: &[u8]| -> Option<usize> {
        let h = PageHeader::decode(p, &g).ok()?;
        let mut found = None;
        verify_leaf(p, &g, h.front_version, |s, slot| {
            if matches!(slot, Slot::Live { key, .. } if key == want) {
                found = Some(s);
            }
        })
        .ok()?;
        found
    };
    let old_leaf = |p: &[u8]| -> Option<usize> {
        PageHeader::decode_front_rear(p, &g).ok()?;
        (0..g.leaf_capacity()).find(|&s| {
            let at = g.leaf_entry_offset(s);
            p[at + 8..at + 16] == want.to_le_bytes()
                && matches!(leaf_slot(p, &g, s, 41), Ok(Slot::Live { .. }))
        })
    };
    assert_eq!(new_leaf(&leaf), Some(20));
    assert_eq!(old_leaf(&leaf), Some(20));
    assert!(PageHeader::decode(&internal, &g).is_ok());
    let iters = 20_000u32;
    let time = |f: &dyn Fn() -> bool| {
        let t0 = Instant::now();
        for _ in 0..iters {
            assert!(black_box(f()));
        }
        t0.elapsed().as_nanos() as f64 / iters as f64
    };
    let leaf_new = time(&|| new_leaf(black_box(&leaf)).is_some());
    let leaf_old = time(&|| old_leaf(black_box(&leaf)).is_some());
    let int_new = time(&|| PageHeader::decode(black_box(&internal), &g).is_ok());
    let int_old = time(&|| PageHeader::decode_front_rear(black_box(&internal), &g).is_ok());
    eprintln!(
        "verify a 1 KiB page: leaf {leaf_new:.0} ns (front==rear + one entry: {leaf_old:.0} ns), \
         internal {int_new:.0} ns (front==rear: {int_old:.0} ns)"
    );

    // End to end, on ascending segments so that the old check is sound there too.
    let per_lookup = |check: PageCheck| -> f64 {
        let n = SoftMemoryNode::create(NodeConfig {
            region_len: 64 << 20,
            chunk_size: 256 << 10,
            segment_order: SegmentOrder::Ascending,
            ..NodeConfig::default()
        })
        .unwrap();
        let ep = n.endpoint().unwrap();
        block_on(async {
            let cfg = ShermanConfig {
                page_check: check,
                ..ShermanConfig::sherman()
            };
            let t = Sherman::create(&ep, cfg).await.unwrap();
            for i in 0..2000u64 {
                t.upsert(&k(i * 7), &v(i)).await.unwrap();
            }
            let mut out = [0u8; 8];
            let t0 = Instant::now();
            for r in 0..20_000u64 {
                let i = r * 7919 % 2000;
                assert_eq!(t.get(&k(i * 7), &mut out).await.unwrap(), Some(8));
                assert_eq!(out, v(i));
            }
            t0.elapsed().as_nanos() as f64 / 20_000.0
        })
    };
    let (new, old) = (
        per_lookup(PageCheck::Checksums),
        per_lookup(PageCheck::FrontRearOnly),
    );
    eprintln!("soft-fabric lookup: {new:.0} ns (front==rear: {old:.0} ns)");
}

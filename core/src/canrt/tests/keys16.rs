//! 16-byte keys (the paper's: random strings, with 15-byte values) next to 8-byte integer
//! keys: a tree's key width is fixed at format time, items carry the whole key, levels read
//! key bytes, and writes, reads, scans, resizes and recovery work alike for both widths.
use super::*;
use remora_layouts::canrt::Segment;

fn cfg16(slots: u32) -> CanrtConfig {
    CanrtConfig {
        slots,
        value_cap: 16,
        key_len: 16,
        ..CanrtConfig::new(0)
    }
}

/// xorshift64.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A random 16-byte string key of letters and digits.
fn string_key(x: &mut u64) -> [u8; 16] {
    const ALNUM: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut k = [0u8; 16];
    for b in &mut k {
        *b = ALNUM[(next(x) % 62) as usize];
    }
    k
}

/// A 15-byte value (the paper's) naming its version.
fn value15(v: u64) -> [u8; 15] {
    let mut out = *b"value-000000000";
    out[7..15].copy_from_slice(&v.to_be_bytes());
    out
}

type Model = BTreeMap<[u8; 16], Vec<u8>>;

/// Drives `keys` through inserts, updates and deletes against `model` (what the tree holds),
/// checking gets and ordered scans on the way; returns the model.
async fn churn(
    t: &Canrt<'_, MemEp>,
    keys: &[[u8; 16]],
    ops: usize,
    seed: u64,
    mut model: Model,
) -> Model {
    let mut x = seed | 1;
    let mut out = [0u8; 16];
    for i in 0..ops {
        let k = keys[(next(&mut x) % keys.len() as u64) as usize];
        let v = value15(i as u64);
        match next(&mut x) % 8 {
            0..=4 => {
                t.upsert(&k, &v).await.unwrap();
                model.insert(k, v.to_vec());
            }
            5 => {
                let p = t.update(&k, &v).await.unwrap();
                assert_eq!(p, model.contains_key(&k), "update presence");
                if p {
                    model.insert(k, v.to_vec());
                }
            }
            _ => {
                let p = t.delete(&k).await.unwrap();
                assert_eq!(p, model.remove(&k).is_some(), "delete presence");
            }
        }
        let probe = keys[(next(&mut x) % keys.len() as u64) as usize];
        let got = t.get(&probe, &mut out).await.unwrap();
        assert_eq!(
            got.map(|n| out[..n].to_vec()),
            model.get(&probe).cloned(),
            "get after {i} ops"
        );
        if i % 101 == 0 {
            let from = keys[(next(&mut x) % keys.len() as u64) as usize];
            let mut got = Vec::new();
            t.scan(&from, 25, &mut |k, v| got.push((k.to_vec(), v.to_vec())))
                .await
                .unwrap();
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .range(from..)
                .take(25)
                .map(|(k, v)| (k.to_vec(), v.clone()))
                .collect();
            assert_eq!(got, want, "scan after {i} ops");
        }
    }
    model
}

/// Every pair of the tree by one scan from the least key, in key order.
async fn scan_all(t: &Canrt<'_, MemEp>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut got = Vec::new();
    t.scan(&[0u8; 16], usize::MAX, &mut |k, v| {
        got.push((k.to_vec(), v.to_vec()))
    })
    .await
    .unwrap();
    got
}

#[test]
fn string_keys_and_15_byte_values_match_a_btreemap_through_resizes() {
    let node = MemNode::new(Pm::new(8 << 20, 1 << 16));
    let ep = mem_ep(&node);
    let mut x = 0x5EED_u64;
    let keys: Vec<[u8; 16]> = (0..600).map(|_| string_key(&mut x)).collect();
    block_on(async {
        let t = Canrt::open(&ep, cfg16(8)).await.unwrap();
        assert_eq!(t.key_len(), 16);
        let model = churn(&t, &keys, 3000, 3, Model::new()).await;
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
        assert_eq!(scan_all(&t).await, want, "a whole scan in key order");
        // The prefix nodes' characters are key bytes: every level reads one whole byte.
        let v = t.view();
        assert_eq!(v.header.key_len, 16);
        assert!(v.header.height >= 2, "height {}", v.header.height);
        for i in 0..v.header.n_segments as usize {
            let s = v.header.segment(i).unwrap();
            assert_eq!(
                (s.lo() % 8, s.width() % 8),
                (0, 0),
                "{s:?} is not whole bytes"
            );
        }
    });
    let resizes = node
        .server
        .borrow()
        .stats()
        .resizes
        .load(core::sync::atomic::Ordering::Relaxed);
    assert!(resizes > 10, "only {resizes} resizes");
    // The durable image holds every key whole.
    let img = dump_keys(&node.pm);
    assert!(img.keys().all(|k| keys.contains(&k.to_be_bytes())));
}

/// Keys equal in their first 12 bytes: the shared bytes are gaps (a gap holds at most 64
/// bits, so two), the last four bytes the levels; resizes split and rebuild them.
#[test]
fn keys_sharing_a_twelve_byte_prefix_plan_route_and_resize() {
    let node = MemNode::new(Pm::new(8 << 20, 1 << 16));
    let ep = mem_ep(&node);
    let mut x = 77u64;
    let keys: Vec<[u8; 16]> = (0..800)
        .map(|_| {
            let mut k = *b"shared-prefix...";
            k[12..].copy_from_slice(&(next(&mut x) as u32).to_be_bytes());
            k
        })
        .collect();
    block_on(async {
        let t = Canrt::open(&ep, cfg16(8)).await.unwrap();
        for (i, k) in keys.iter().enumerate() {
            t.upsert(k, &value15(i as u64)).await.unwrap();
        }
        let mut out = [0u8; 16];
        let mut model = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            model.insert(*k, value15(i as u64).to_vec());
        }
        for (k, v) in &model {
            assert_eq!(t.get(k, &mut out).await.unwrap(), Some(15));
            assert_eq!(&out[..15], &v[..]);
        }
        // A key past the shared prefix, above and below, is absent (and routes somewhere).
        assert_eq!(t.get(b"shared-prefix/..", &mut out).await.unwrap(), None);
        assert_eq!(
            t.get(b"shared-prefix-...", &mut out).await.unwrap_err(),
            CanrtError::BadKey { len: 17, width: 16 }
        );
        assert_eq!(t.get(b"shared-prefiw...", &mut out).await.unwrap(), None);
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
        assert_eq!(scan_all(&t).await, want);
        let v = t.view();
        let gaps: Vec<Segment> = (0..v.header.n_segments as usize)
            .map(|i| v.header.segment(i).unwrap())
            .filter(|s| matches!(s, Segment::Gap { .. }))
            .collect();
        assert_eq!(
            gaps.iter().map(|s| s.width()).sum::<u32>(),
            96,
            "the 12 shared bytes are gaps: {gaps:?}"
        );
        assert!(gaps.iter().all(|s| s.width() <= 64));
        // Splits in place and at least one rebuild into a larger data array.
        assert!(v.header.array_gen > 1, "no rebuild");
        // Mixed deletes and a churn after the resizes.
        let model = churn(&t, &keys, 1500, 9, model).await;
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
        assert_eq!(scan_all(&t).await, want);
    });
    let resizes = node
        .server
        .borrow()
        .stats()
        .resizes
        .load(core::sync::atomic::Ordering::Relaxed);
    assert!(resizes > 10, "only {resizes} resizes");
}

#[test]
fn a_key_of_the_wrong_width_is_refused_naming_the_trees() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        assert!(matches!(
            Canrt::open(
                &ep,
                CanrtConfig {
                    key_len: 12,
                    ..cfg16(8)
                }
            )
            .await,
            Err(CanrtError::KeyLen { key_len: 12 })
        ));
        let t = Canrt::open(&ep, cfg16(8)).await.unwrap();
        let e = t.upsert(&7u64.to_be_bytes(), b"v").await.unwrap_err();
        assert_eq!(e, CanrtError::BadKey { len: 8, width: 16 });
        assert_eq!(
            e.to_string(),
            "canrt: this tree's keys are 16 bytes, got a 8-byte key"
        );
        let mut out = [0u8; 16];
        assert!(t.get(b"short", &mut out).await.is_err());
        assert!(t.scan(b"short", 1, &mut |_, _| {}).await.is_err());
        // A 16-byte value does not fit a capacity of 16? It does; 17 bytes do not.
        t.upsert(b"0123456789abcdef", &[7; 16]).await.unwrap();
        assert_eq!(
            t.upsert(b"0123456789abcdef", &[7; 17]).await,
            Err(CanrtError::ValueTooLong { len: 17, max: 16 })
        );
        // A client asking for 8-byte keys opens the existing 16-byte tree as it is.
        let t8 = Canrt::open(&ep, cfg(8)).await.unwrap();
        assert_eq!(t8.key_len(), 16);
        assert_eq!(
            t8.get(b"0123456789abcdef", &mut out).await.unwrap(),
            Some(16)
        );
    });
    // And the other way round: an 8-byte tree refuses 16-byte keys.
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        assert_eq!(
            t.upsert(b"0123456789abcdef", b"v").await,
            Err(CanrtError::BadKey { len: 16, width: 8 })
        );
    });
}

#[test]
fn every_crash_image_of_a_16_byte_tree_recovers() {
    crash_history(21, 50, 16);
}

/// Plans over 16-byte keys place every key and keep key order for any probe, also for keys
/// that differ only in their last bytes or only in their first.
#[test]
fn sixteen_byte_plans_keep_key_order() {
    let mut x = 5u64;
    for shape in 0..4 {
        let mut keys: Vec<u128> = (0..500)
            .map(|_| {
                let r = (next(&mut x) as u128) << 64 | next(&mut x) as u128;
                match shape {
                    0 => r,
                    1 => r & 0xFFFF_FFFF,
                    2 => r & (0xFFFF << 112),
                    _ => r & 0x00FF_0000_0000_0000_0000_0000_0000_FF00 | 0x4142 << 100,
                }
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let p = plan(&keys, 4, 16).unwrap().expect("a plan");
        let v = view_keyed(&p, 8, 16);
        for (id, &(a, b)) in p.groups.iter().enumerate() {
            assert!(b - a <= 4);
            for k in &keys[a..b] {
                assert_eq!(v.locate(*k).unwrap(), id as u32, "shape {shape} key {k:#x}");
            }
        }
        let mut probes: Vec<u128> = (0..300)
            .map(|_| (next(&mut x) as u128) << 64 | next(&mut x) as u128)
            .chain(keys.iter().map(|k| k ^ 1))
            .chain([0, u128::MAX])
            .chain(keys.iter().copied())
            .collect();
        probes.sort_unstable();
        let ids: Vec<u32> = probes.iter().map(|k| v.locate(*k).unwrap()).collect();
        assert!(
            ids.windows(2).all(|w| w[0] <= w[1]),
            "shape {shape}: not monotone"
        );
    }
    // Keys wider than an 8-byte tree's are refused by its planner.
    assert!(plan(&[1 << 64], 4, 8).is_err());
}

//! Damaged pages: a torn internal page is re-derived from the level below, a corrupt page is
//! reported, torn leaf entries are re-read.
use super::*;

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

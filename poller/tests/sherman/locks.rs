//! Bad lock holders: a dead one is fenced and its locks taken over after a lease; one that
//! names no client is an error after the deadline, not a hang.
use super::*;

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

//! CHIME's leaves under churn (deletes and inserts over a fixed live set, as `remora bench
//! --churn`). Without merges (`merge: false`, CHIME's own behaviour) the leaf count only
//! grows; the first test checks that the growth settles (splits that allocate happen only to
//! leaves a fresh table cannot hold, `hopscotch::pack`). With merges (`--with merge`,
//! `merge.rs`) sparse leaves merge into their neighbours and splits reuse the retired ones
//! (`reuse.rs`): the second test checks that the leaf count stays flat and that, past the
//! warm-up, splits take retired leaves instead of fresh memory. Both: every live key reads
//! back.
use remora_core::block_on::block_on;
use remora_core::chime::census::LeafSpread;
use remora_core::chime::{Chime, ChimeConfig, ChimeStats};
use remora_core::index::KvIndex;
use remora_core::lease::LeaseConfig;
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode};

/// Key number `n`: a bijection of the integers (an odd multiplier), so keys spread over the
/// key space as hashed YCSB keys do.
fn key(n: u64) -> [u8; 8] {
    (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 1).to_be_bytes()
}

async fn spread(t: &Chime<'_, SoftEndpoint>) -> LeafSpread {
    t.leaf_spread().await.unwrap()
}

/// Loads `live` keys into `t`, then runs `ops` churn operations (a delete of a uniformly
/// chosen live key and an insert of a fresh one each) and checks that every live key reads
/// back. Returns the leaves after the load, and the leaves and the handle's counters at each
/// quarter of the churn.
async fn churn(
    t: &Chime<'_, SoftEndpoint>,
    live_n: u64,
    ops: u64,
) -> (LeafSpread, Vec<LeafSpread>, Vec<ChimeStats>) {
    for n in 0..live_n {
        t.upsert(&key(n), &n.to_le_bytes()).await.unwrap();
    }
    let loaded = spread(t).await;
    let mut live: Vec<u64> = (0..live_n).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let (mut at, mut stats) = (Vec::new(), Vec::new());
    for done in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let slot = (x % live_n) as usize;
        assert!(t.delete(&key(live[slot])).await.unwrap(), "op {done}");
        let new = live_n + done;
        t.upsert(&key(new), &new.to_le_bytes()).await.unwrap();
        live[slot] = new;
        if (done + 1) % (ops / 4) == 0 {
            at.push(spread(t).await);
            stats.push(t.stats());
        }
    }
    let mut out = [0u8; 8];
    for &n in &live {
        assert_eq!(t.get(&key(n), &mut out).await.unwrap(), Some(8), "key {n}");
        assert_eq!(u64::from_le_bytes(out), n, "key {n}");
    }
    (loaded, at, stats)
}

/// 2,000 live keys, 400,000 churn operations (a delete of a uniformly chosen live key and an
/// insert of a fresh one each). Measured (this test's `--nocapture`): 52 leaves after
/// the load, then 71, 76, 79, 84 at each quarter of the churn (+24 in the first half, +8 in
/// the second), 23.8 keys per leaf (7 to 39) at the end. Fails if
/// leaves were allocated at a steady rate (a leak: the second half of the churn would add
/// as many as the first; here it must add at most half), or if it ends above 1.8x the
/// leaves after the load (1.62x here). Splits that stopped rebuilding leaves in place
/// (`pack` forced to make two leaves of every failed hop) end at 105 leaves, 2.02x: that
/// mutation fails it.
#[test]
fn chime_leaf_count_settles_under_churn() {
    const LIVE: u64 = 2_000;
    const OPS: u64 = 400_000;
    let node = SoftMemoryNode::create(NodeConfig {
        node_id: 0,
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap();
    let ep = node.endpoint().unwrap();
    block_on(async {
        let mut cfg = ChimeConfig::chime();
        cfg.merge = false;
        cfg.sherman.page_size = 256;
        let t = Chime::create(&ep, cfg.with_cache(1 << 20)).await.unwrap();
        let (loaded, at, _) = churn(&t, LIVE, OPS).await;
        let leaves: Vec<u64> = core::iter::once(&loaded)
            .chain(&at)
            .map(|s| s.leaves)
            .collect();
        eprintln!("leaves at 0, 1/4, 1/2, 3/4, 1 of the churn: {leaves:?}");
        eprintln!("at the end: {:?}", at[3]);
        assert!(at.iter().all(|s| s.entries == LIVE), "{at:?}");
        let first_half = leaves[2] - leaves[0];
        let second_half = leaves[4] - leaves[2];
        assert!(
            second_half * 2 <= first_half,
            "the leaf count does not settle: +{first_half} then +{second_half} ({leaves:?})"
        );
        // 1.62x here; 2.02x (52 -> 105) with every split forced to allocate a leaf.
        assert!(
            at[3].leaves * 10 <= loaded.leaves * 18,
            "{} leaves after the churn, {} after the load: leaves split while a fresh table \
             held their keys ({:?})",
            at[3].leaves,
            loaded.leaves,
            at[3]
        );
    });
}

/// 2,000 live keys, 400,000 churn operations with merges and reuse (leases of 20 ms, so the
/// grace period, about 120 ms, passes many times over the run). Measured (`--nocapture`):
/// 52 leaves after the load, then 68, 70, 70, 71 at each quarter (1.37x; 84, 1.62x, without
/// merges: the test above); fresh leaves taken 70, 70, 70, 72 (19 merges, 17 reuses, 202
/// splits). Fails if the leaf count at the end exceeds 1.5x the count after the load (merges
/// off exceed it), if the second half added more than a twentieth of the loaded leaves, if
/// no leaf was reused, or if the second half of the churn took more fresh leaves (splits not
/// served by a retired one) than a tenth of the first half's splits: with reuse off
/// (retired leaves never taken) every split past the warm-up takes fresh memory.
#[test]
fn chime_merges_and_reuses_leaves_under_churn() {
    const LIVE: u64 = 2_000;
    const OPS: u64 = 400_000;
    let node = SoftMemoryNode::create(NodeConfig {
        node_id: 0,
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap();
    let ep = node.endpoint().unwrap();
    block_on(async {
        let mut cfg = ChimeConfig::chime();
        cfg.merge = true;
        cfg.sherman.page_size = 256;
        cfg.sherman.lease = LeaseConfig {
            lease_ns: 20_000_000,
            ..LeaseConfig::default()
        };
        let t = Chime::create(&ep, cfg.with_cache(1 << 20)).await.unwrap();
        let (loaded, at, stats) = churn(&t, LIVE, OPS).await;
        let leaves: Vec<u64> = core::iter::once(&loaded)
            .chain(&at)
            .map(|s| s.leaves)
            .collect();
        // Fresh leaves: those splits allocated and did not take from the retired ones.
        let fresh: Vec<u64> = stats.iter().map(|s| s.new_leaves - s.reused).collect();
        let last = stats[3];
        eprintln!("leaves at 0, 1/4, 1/2, 3/4, 1 of the churn: {leaves:?}");
        eprintln!("fresh leaves taken by 1/4, 1/2, 3/4, 1: {fresh:?}");
        eprintln!(
            "merges {}, retired {}, reused {}, splits {}, stale attempts {}",
            last.merges, last.retired, last.reused, last.splits, last.stale_attempts
        );
        assert!(at.iter().all(|s| s.entries == LIVE), "{at:?}");
        assert!(last.merges > 0 && last.reused > 0, "{last:?}");
        assert!(
            at[3].leaves * 2 <= loaded.leaves * 3,
            "{} leaves after the churn, {} after the load ({leaves:?})",
            at[3].leaves,
            loaded.leaves
        );
        assert!(
            leaves[4].saturating_sub(leaves[2]) * 20 <= loaded.leaves,
            "the leaf count does not settle ({leaves:?})"
        );
        let second_half = fresh[3] - fresh[1];
        let first_half_splits = stats[1].splits;
        assert!(
            second_half * 10 <= first_half_splits,
            "{second_half} fresh leaves in the second half ({first_half_splits} splits in the \
             first): retired leaves are not reused ({fresh:?})"
        );
    });
}

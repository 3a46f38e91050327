//! CHIME's reuse of merged leaves (`core/src/chime/reuse.rs`) against a compute node whose
//! cached level-1 pages still name them: client A (its own compute node) loads keys and
//! caches every route; client B (another compute node) deletes most keys of a range, so
//! its leaves merge into their left neighbours with a few live keys each (their cached
//! routes still name the retired leaves), then inserts keys elsewhere, so splits reuse the
//! retired leaves. A then reads every key. With the guard (retired leaves reused only a
//! grace period after retirement, attempts and cached routes aged: SMART's scheme) every
//! answer is right and leaves were reused; with it off (`Mutation::reuse_unguarded`: reuse
//! at once, A's cached routes kept) A follows its stale routes into reused leaves and some
//! live key is reported absent or wrong.
use remora_core::block_on::block_on;
use remora_core::chime::{Chime, ChimeConfig, ChimeNode, Mutation};
use remora_core::index::KvIndex;
use remora_core::lease::LeaseConfig;
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode};
use std::sync::Arc;
use std::time::Duration;

#[path = "common/chime_small.rs"]
mod chime_small;
use chime_small::k;

const LEASE_NS: u64 = 5_000_000;

fn cfg(unguarded: bool) -> ChimeConfig {
    chime_small::merging(
        LEASE_NS,
        1_000_000_000,
        Mutation {
            reuse_unguarded: unguarded,
            ..Mutation::default()
        },
    )
}

async fn value(t: &Chime<'_, SoftEndpoint>, i: u64) -> Option<u64> {
    let mut out = [0u8; 8];
    t.get(&k(i), &mut out)
        .await
        .unwrap()
        .map(|_| u64::from_le_bytes(out))
}

/// Runs the scenario; returns A's wrong answers and B's (merges, retired, reused) counts.
fn run(unguarded: bool) -> (Vec<String>, (u64, u64, u64)) {
    const N: u64 = 800;
    let node = SoftMemoryNode::create(NodeConfig {
        node_id: 0,
        region_len: 16 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap();
    let (ea, eb) = (node.endpoint().unwrap(), node.endpoint().unwrap());
    let c = cfg(unguarded);
    block_on(async {
        let a = Chime::create_on(&ea, c, Arc::new(ChimeNode::new(&c)))
            .await
            .unwrap();
        for i in 0..N {
            a.upsert(&k(i), &i.to_le_bytes()).await.unwrap();
        }
        for i in 0..N {
            assert_eq!(value(&a, i).await, Some(i));
        }
        let b = Chime::create_on(&eb, c, Arc::new(ChimeNode::new(&c)))
            .await
            .unwrap();
        // Keep one key in 16 of [N/4, N/2): their leaves merge with live keys in them.
        let kept = |i: u64| !(N / 4..N / 2).contains(&i) || i.is_multiple_of(16);
        for i in (N / 4..N / 2).filter(|&i| !kept(i)) {
            assert!(b.delete(&k(i)).await.unwrap());
        }
        if !unguarded {
            // Past the grace period: the retired leaves are reusable now.
            let grace_ns = (2 * LEASE_NS + LeaseConfig::default().max_backoff_ns) * 3;
            std::thread::sleep(Duration::from_nanos(grace_ns * 2));
        }
        // New keys above the range: their splits take the retired leaves.
        for i in N..2 * N {
            b.upsert(&k(i), &i.to_le_bytes()).await.unwrap();
        }
        let s = b.stats();
        let mut wrong = Vec::new();
        for i in 0..2 * N {
            let want = kept(i).then_some(i);
            let got = value(&a, i).await;
            if got != want {
                wrong.push(format!("key {i}: {got:?}, not {want:?}"));
            }
        }
        (wrong, (s.merges, s.retired, s.reused))
    })
}

#[test]
fn a_stale_route_never_reaches_a_reused_leaf() {
    let (wrong, (merges, retired, reused)) = run(false);
    eprintln!("guarded: {merges} merges, {retired} retired, {reused} reused");
    assert!(wrong.is_empty(), "{wrong:?}");
    assert!(retired > 0 && reused > 0, "{merges} {retired} {reused}");
}

#[test]
fn without_the_guard_a_stale_route_reads_a_reused_leaf() {
    let (wrong, (merges, retired, reused)) = run(true);
    eprintln!(
        "unguarded: {merges} merges, {retired} retired, {reused} reused, {} wrong: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(reused > 0);
    assert!(!wrong.is_empty(), "no stale route reached a reused leaf");
}

//! Reusing retired data arrays (issue 26): churn over a fixed live set stays in a fixed
//! amount of memory, and the free pool comes back after a memory-node crash.
use super::*;
use core::sync::atomic::Ordering::Relaxed;
use remora_layouts::region::NEXT_CHUNK_OFFSET;

/// The region's allocator cursor: bytes handed out so far.
fn cursor(node: &MemNode) -> u64 {
    node.pm.load_u64(NEXT_CHUNK_OFFSET).unwrap()
}

/// Loads keys `lo .. lo + live`.
async fn load<E: Endpoint>(t: &Canrt<'_, E>, lo: u64, live: u64) {
    for k in lo..lo + live {
        t.upsert(&be(k), &k.to_le_bytes()).await.unwrap();
    }
}

/// Churns `ops` times over the live keys `lo .. lo + live`: deletes the oldest live key and
/// inserts the next one (every insert goes to the last data node, so the data array fills
/// and is rebuilt again and again). Returns the cursor's peak over the churn; every live
/// key reads back at the end, and the last deleted one does not.
async fn churn<E: Endpoint>(t: &Canrt<'_, E>, node: &MemNode, lo: u64, live: u64, ops: u64) -> u64 {
    let mut peak = cursor(node);
    for i in 0..ops {
        let old = lo + i;
        assert!(t.delete(&be(old)).await.unwrap(), "key {old} was live");
        let new = lo + live + i;
        t.upsert(&be(new), &new.to_le_bytes()).await.unwrap();
        peak = peak.max(cursor(node));
    }
    let mut out = [0u8; 8];
    for k in lo + ops..lo + ops + live {
        assert_eq!(t.get(&be(k), &mut out).await.unwrap(), Some(8), "key {k}");
        assert_eq!(u64::from_le_bytes(out), k);
    }
    assert_eq!(t.get(&be(lo + ops - 1), &mut out).await.unwrap(), None);
    peak
}

const LIVE: u64 = 2000;

/// Without reuse each rebuild claims a new data array and the region fills (this failed
/// with `NodeFull` before the pool); with it the cursor stops growing once the churn has
/// two arrays to alternate between.
#[test]
fn churn_over_a_fixed_live_set_reuses_retired_arrays() {
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        load(&t, 0, LIVE).await;
        let loaded = cursor(&node);
        let first = churn(&t, &node, 0, LIVE, 8_000).await;
        let s = node.server.borrow().stats();
        let retired = s.arrays_retired.load(Relaxed);
        // The same churn again, over the same number of live keys.
        let second = churn(&t, &node, 8_000, LIVE, 16_000).await;
        let (retired2, reused) = (
            s.arrays_retired.load(Relaxed),
            s.arrays_reused.load(Relaxed),
        );
        std::eprintln!(
            "loaded {loaded} B, peak {first} B then {second} B; {retired} then {retired2} \
             arrays retired, {reused} reused, {} B free",
            node.server.borrow().free_bytes()
        );
        assert!(
            retired2 >= retired + 6,
            "the churn rebuilt the tree {retired2} times"
        );
        assert_eq!(second, first, "the cursor climbed in the second churn");
        assert!(
            first <= 3 * loaded,
            "cursor climbed from {loaded} to {first}"
        );
    });
}

/// The free pool is in the server's memory, and also in the published area's pool table:
/// a memory node that crashes (its durable image only) and recovers gets every free run
/// back, and the churn goes on without claiming new memory. Without the table, recovery
/// forgot the retired arrays and the next rebuilds claimed new chunks.
#[test]
fn free_memory_comes_back_after_a_memory_node_crash() {
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    let (free, peak) = block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        load(&t, 0, LIVE).await;
        let peak = churn(&t, &node, 0, LIVE, 8_000).await;
        (node.server.borrow().free_bytes(), peak)
    });
    assert!(free > 0, "the churn left retired arrays free");
    // Crash: only the durable image survives; a new server recovers it.
    let image = node.pm.durable.borrow().clone();
    let node = MemNode::new(Pm::from_image(image));
    node.server.borrow_mut().recover(&node.pm).unwrap();
    assert_eq!(
        node.server.borrow().free_bytes(),
        free,
        "free runs recovered"
    );
    assert_eq!(cursor(&node), peak);
    let ep = MemEp::new(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        let after = churn(&t, &node, 8_000, LIVE, 8_000).await;
        let s = node.server.borrow().stats();
        assert!(
            s.arrays_reused.load(Relaxed) >= 3,
            "rebuilds after the crash reused memory"
        );
        assert_eq!(after, peak, "the cursor climbed after the crash");
    });
}

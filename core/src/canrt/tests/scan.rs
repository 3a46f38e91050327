//! Range scans (paper §4.4): the pairs match a BTreeMap model, and a scan READs each data
//! node of its range once, `scan_batch` nodes a round trip: its cost grows with the nodes
//! its range covers, not faster (no node read twice, no round trip per key).
use super::*;

fn scan_cfg(slots: u32, batch: u32) -> CanrtConfig {
    CanrtConfig {
        slots,
        scan_batch: batch,
        ..CanrtConfig::new(0)
    }
}

/// A tree of 3,000 spread keys (a few hundred deleted again) in nodes of `slots`.
async fn filled(t: &Canrt<'_, MemEp>) -> BTreeMap<u64, u64> {
    let mut model = BTreeMap::new();
    for i in 0..3000u64 {
        let k = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 4;
        t.upsert(&be(k), &i.to_le_bytes()).await.unwrap();
        model.insert(k, i);
    }
    let dead: Vec<u64> = model.keys().copied().step_by(7).collect();
    for k in dead {
        assert!(t.delete(&be(k)).await.unwrap());
        model.remove(&k);
    }
    model
}

/// Scans from `from` for `limit` pairs; checks them against the model and returns the
/// data nodes (in key order) from the one holding `from` to the one holding the last pair
/// visited, or to the last node if the scan ran out of keys.
async fn checked_scan(
    t: &Canrt<'_, MemEp>,
    model: &BTreeMap<u64, u64>,
    from: u64,
    limit: usize,
) -> u64 {
    let want = scan_matches(t, model, from, limit).await;
    let v = t.view();
    let rank = |k: u64| v.rank(v.locate(u128::from(k)).unwrap()).unwrap();
    let first = rank(from);
    let last = match want.last() {
        Some(&(k, _)) if want.len() == limit => rank(k),
        _ => v.order().len() - 1,
    };
    (last - first + 1) as u64
}

#[test]
fn a_scan_reads_each_node_of_its_range_once_one_a_round_trip() {
    let node = MemNode::new(Pm::new(16 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, scan_cfg(16, 1)).await.unwrap();
        let model = filled(&t).await;
        assert!(
            t.view().order().len() > 200,
            "{} nodes",
            t.view().order().len()
        );
        let c = ep.qp.counters();
        let mut per_node = Vec::new();
        for (from, limit) in [
            (0, 1),
            (0, 10),
            (0, 100),
            (0, 1000),
            (0, usize::MAX),
            (u64::MAX >> 5, 50),
            (u64::MAX >> 3, 500),
            (u64::MAX >> 3, 5000),
            (u64::MAX - 1, 10),
        ] {
            let before = c.snapshot();
            let nodes = checked_scan(&t, &model, from, limit).await;
            let d = c.snapshot() - before;
            // One doorbell and one round trip a node, three READs in it (the node between
            // two READs of its meta word); nothing else.
            assert_eq!(d.round_trips, nodes, "from {from:#x}, limit {limit}");
            assert_eq!(d.doorbells, nodes);
            assert_eq!(d.verb(Verb::Read), 3 * nodes);
            assert_eq!(d.posted_verbs(), 3 * nodes);
            per_node.push((limit, nodes));
        }
        // Ten times the keys, about ten times the nodes (the keys are spread evenly).
        let nodes_of = |l: usize| per_node.iter().find(|p| p.0 == l).unwrap().1;
        let (a, b) = (nodes_of(100), nodes_of(1000));
        assert!(
            b >= 7 * a && b <= 13 * a,
            "{a} nodes for 100 keys, {b} for 1000"
        );
    });
}

#[test]
fn a_batched_scan_reads_its_nodes_four_a_round_trip() {
    let node = MemNode::new(Pm::new(16 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, scan_cfg(16, 4)).await.unwrap();
        let model = filled(&t).await;
        let c = ep.qp.counters();
        for (from, limit) in [(0, 1), (0, 77), (0, usize::MAX), (u64::MAX >> 2, 300)] {
            let before = c.snapshot();
            let nodes = checked_scan(&t, &model, from, limit).await;
            let d = c.snapshot() - before;
            let v = t.view();
            let rest =
                (v.order().len() - v.rank(v.locate(u128::from(from)).unwrap()).unwrap()) as u64;
            let trips = nodes.div_ceil(4);
            assert_eq!(d.round_trips, trips, "from {from:#x}, limit {limit}");
            // The last doorbell's nodes are all read, up to the tree's last.
            assert_eq!(d.verb(Verb::Read), 3 * (4 * trips).min(rest));
        }
    });
}

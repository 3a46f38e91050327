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
    let ep = mem_ep(&node);
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
    let ep = mem_ep(&node);
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
    let ep = mem_ep(&node);
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

/// A skipped lock holder's late append may land after its data array was retired, and
/// after that memory was reused for a new array: the reserved slot goes with the frame,
/// and the node written there keeps it reserved, so the append lands in a hole. Writing
/// the node over the whole frame instead (no holes carried) fails the hole check: the slot
/// is the new node's to fill, and a late append landing there would overwrite an item of
/// the tree (readers skip a live slot whose item is marked unprocessed, so its key would
/// read back missing).
#[test]
fn a_late_append_into_a_reused_array_lands_in_a_hole() {
    use super::issue13::tree_of;
    use remora_layouts::canrt::{
        Control, ControlKind, FRONT_OFF, ItemOp, LOCK_OFF, Meta, tail_valid,
    };
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        let qp = ep.qp(0).unwrap();
        load(&t, 1000, LIVE).await;
        // An array of the churn's size (the load's last one is smaller).
        churn(&t, &node, 1000, LIVE, 4000).await;
        let mut lo = 5000;
        // Empty data node 0, then hold its lock as a holder whose turn came and who stalls:
        // a waiter's Skip reserves slot 0 (the first free one) for its append.
        let v = tree_of(&node.pm);
        let first = v.header.data_off;
        let emptied: Vec<u64> = (lo..lo + LIVE)
            .filter(|&k| v.locate(u128::from(k)) == Ok(0))
            .collect();
        for &k in &emptied {
            assert!(t.delete(&be(k)).await.unwrap());
        }
        let ticket = qp
            .faa(GlobalAddr::new(0, first + LOCK_OFF), 1)
            .await
            .unwrap()
            & 0xFFFF;
        let skip = Control::new(
            ControlKind::Skip,
            v.epoch_tag(),
            v.header.array_gen,
            0,
            ticket,
        );
        qp.send(&skip.encode()).await.unwrap();
        let reserved = |at: u64| {
            let m = Meta(node.pm.load_u64(at + FRONT_OFF).unwrap());
            let g = v.data();
            m.bitmap() & 1 != 0 && tail_valid(node.pm.load_u64(at + g.tail_off(0)).unwrap())
        };
        assert!(
            reserved(first),
            "slot 0 of node 0 reserved for the stalled holder"
        );
        // Its keys come back, around the hole.
        for &k in &emptied {
            t.upsert(&be(k), &k.to_le_bytes()).await.unwrap();
        }
        // Churn until a rebuild builds its array over node 0's frame again.
        let s = node.server.borrow().stats();
        let gen0 = v.header.array_gen;
        let mut again = false;
        for _ in 0..40 {
            churn(&t, &node, lo, LIVE, 500).await;
            lo += 500;
            let now = tree_of(&node.pm);
            let h = &now.header;
            let span = h.data_off..h.data_off + h.n_data as u64 * h.data_node_size;
            if h.array_gen > gen0 + 1 && span.contains(&first) {
                // Frames stay on one grid: the frame is a node of the new array.
                assert_eq!((first - h.data_off) % h.data_node_size, 0);
                again = true;
                break;
            }
        }
        assert!(
            again,
            "no rebuild reused the first array ({} reused)",
            s.arrays_reused.load(Relaxed)
        );
        // The node of the new array in that frame kept slot 0 reserved.
        assert!(reserved(first), "the reused frame's node keeps the hole");
        // The stalled holder's append lands at last (key 7, under its old ticket).
        let g = v.data();
        let mut item = [0u8; remora_layouts::canrt::MAX_ITEM];
        let isz = g.item_size() as usize;
        g.encode_item(
            &mut item[..isz],
            7,
            &7u64.to_le_bytes(),
            ItemOp::Insert,
            ticket,
            true,
        )
        .unwrap();
        qp.write(GlobalAddr::new(0, first + g.slot_off(0)), &item[..isz])
            .await
            .unwrap();
        let mut out = [0u8; 8];
        for k in lo..lo + LIVE {
            assert_eq!(t.get(&be(k), &mut out).await.unwrap(), Some(8), "key {k}");
            assert_eq!(u64::from_le_bytes(out), k);
        }
        assert_eq!(t.get(&be(7), &mut out).await.unwrap(), None);
    });
}

/// Issue 26, `remora bench --churn --keys seq` (random deletes over sequential keys): the
/// node count at a rebuild drifts (690 to 774 over 1M operations at 10,000 live keys) and
/// the prefix array grows as the live keys spread. A rebuild of 769 nodes must take the
/// retired 1,150-node array (room for a quarter as many again), and an area must have room
/// for the next need measured in that churn. Before, both claimed new memory: the cursor
/// climbed from 3.1 to 8.4 MiB.
#[test]
fn a_drifting_churn_reuses_its_arrays_and_areas() {
    let pm = Pm::new(64 << 20, 1 << 20);
    let g = cfg(16).validate().unwrap();
    let ns = g.node_size();
    let mut s = CanrtServer::new();
    let run = 8 << 20;
    s.pool.release(run, 1150 * ns);
    let (off, cap, reused) = s
        .array_for(&pm, g, 769, super::super::resize::data_capacity(769))
        .unwrap();
    assert_eq!((off, cap, reused), (run, 1150, true));
    let first = super::super::pool::area_len(128_960);
    assert!(first >= 194_536, "an area of {first} B");
}

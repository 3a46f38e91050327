//! Non-blocking resizing under readers and writers, and ascending vs random loads.
use super::*;

/// Non-blocking resizing: while a resize waits for a slow lock holder of the full node, the
/// valid tree still serves every lookup, and writes to the nodes it does not split go on; once the holder hands its ticket back the new
/// tree is built, published, and takes writes.
#[test]
fn reads_go_on_while_a_resize_drains() {
    use remora_layouts::canrt::{Control, ControlKind, FRONT_OFF, LOCK_OFF, Meta};
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        for k in 0..200u64 {
            t.upsert(&be(k << 20), &k.to_le_bytes()).await.unwrap();
        }
        t.get(&be(0), &mut [0u8; 8]).await.unwrap();
        let v = t.view();
        assert!(v.header.n_data >= 3);
        let qp = ep.qp(0).unwrap();
        // Take the lock of two data nodes as another client would (FETCH_AND_ADD).
        let holder = |id: u32| {
            let off = v.header.data_node_off(id);
            let served = Meta(node.pm.load_u64(off + FRONT_OFF).unwrap()).served();
            (off, served)
        };
        // The holder of node 1, and a slow client queued behind it.
        let (full_off, full_ticket) = holder(1);
        qp.faa(GlobalAddr::new(0, full_off + LOCK_OFF), 1)
            .await
            .unwrap();
        let slow_ticket = full_ticket + 1;
        qp.faa(GlobalAddr::new(0, full_off + LOCK_OFF), 1)
            .await
            .unwrap();
        // The holder of node 1 reports it full: node 1 freezes and drains.
        let resize = Control::new(
            ControlKind::Resize,
            v.epoch_tag(),
            v.header.array_gen,
            1,
            full_ticket,
        );
        qp.send(&resize.encode()).await.unwrap();
        assert!(Meta(node.pm.load_u64(full_off + FRONT_OFF).unwrap()).frozen());
        let stats = node.server.borrow().stats();
        let resizes = stats.resizes.load(core::sync::atomic::Ordering::Relaxed);
        // Lookups go on, on the frozen tree.
        let mut out = [0u8; 8];
        for k in 0..200u64 {
            assert_eq!(t.get(&be(k << 20), &mut out).await.unwrap(), Some(8));
            assert_eq!(u64::from_le_bytes(out), k);
        }
        // (A writer of node 1 would queue behind the slow holder, whose turn finds the node
        // frozen.)
        let impatient = Canrt::open(
            &ep,
            CanrtConfig {
                resize_polls: 5,
                ..cfg(8)
            },
        )
        .await
        .unwrap();
        let on = |id: u32| {
            (0..200u64)
                .find(|k| v.locate(u128::from(k << 20)) == Ok(id))
                .unwrap()
                << 20
        };
        assert!(on(1) > 0);
        // Writes to a node the resize does not split go on meanwhile.
        let other = (0..v.header.n_data)
            .find(|&id| {
                let m = Meta(
                    node.pm
                        .load_u64(v.header.data_node_off(id) + FRONT_OFF)
                        .unwrap(),
                );
                !m.frozen() && v.rank(id).is_some()
            })
            .expect("a node the resize leaves alone");
        impatient
            .upsert(&be(on(other)), &77u64.to_le_bytes())
            .await
            .unwrap();
        assert_eq!(
            stats.resizes.load(core::sync::atomic::Ordering::Relaxed),
            resizes
        );
        // The slow holder's turn comes, on a frozen node: it hands its ticket back, the
        // drain ends, the new tree is published.
        let unlock = Control::new(
            ControlKind::Unlock,
            v.epoch_tag(),
            v.header.array_gen,
            1,
            slow_ticket,
        );
        qp.send(&unlock.encode()).await.unwrap();
        assert_eq!(
            stats.resizes.load(core::sync::atomic::Ordering::Relaxed),
            resizes + 1
        );
        t.upsert(&be(5), &55u64.to_le_bytes()).await.unwrap();
        assert!(t.view().header.epoch > v.header.epoch);
        for k in 0..200u64 {
            assert_eq!(t.get(&be(k << 20), &mut out).await.unwrap(), Some(8));
            let want = if k << 20 == on(other) { 77 } else { k };
            assert_eq!(u64::from_le_bytes(out), want);
        }
        assert_eq!(t.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 55);
    });
}

/// Ascending inserts all land in the rightmost data node, so the tree resizes every
/// `slots / 2` inserts there; this records what that costs (resizes, region bytes taken by
/// trees, retired ones included) next to a random order of the same keys.
#[test]
fn ascending_and_random_loads_resize_and_stay_correct() {
    for ascending in [true, false] {
        let node = MemNode::new(Pm::new(64 << 20, 1 << 16));
        let ep = mem_ep(&node);
        const N: u64 = 2000;
        block_on(async {
            let t = Canrt::open(&ep, cfg(32)).await.unwrap();
            for i in 0..N {
                let k = if ascending { i } else { i * 7919 % N };
                t.upsert(&be(k), &k.to_le_bytes()).await.unwrap();
            }
            let mut got = 0u64;
            let n = t
                .scan(&be(0), N as usize + 1, &mut |k, v| {
                    assert_eq!(k, be(got));
                    assert_eq!(v, got.to_le_bytes());
                    got += 1;
                })
                .await
                .unwrap();
            assert_eq!(n as u64, N);
        });
        let resizes = node
            .server
            .borrow()
            .stats()
            .resizes
            .load(core::sync::atomic::Ordering::Relaxed);
        let used = node.pm.load_u64(32).unwrap();
        std::println!(
            "{} load of {N} keys: {resizes} resizes, {} KiB of region taken by trees",
            if ascending { "ascending" } else { "random" },
            used >> 10
        );
        assert!(resizes < N);
    }
}

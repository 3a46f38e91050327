//! A resize freezes only the data nodes it splits (issue 13): a split may publish while a
//! writer of another node is between reading its turn and its append landing.
use super::*;
use remora_layouts::canrt::{Control, ControlKind, FRONT_OFF, LOCK_OFF, Meta};

/// A writer of node X holds its lock and has read the meta word (old epoch); before its
/// append lands, another node is reported full and split: the split publishes at once (X is
/// not frozen, so the resize does not wait for X's holder), and the append, named with the
/// old epoch, is still applied (the new tree routes its key to X). Before, the resize froze
/// X too and waited for its holder: nothing was published before the append.
#[test]
fn a_split_publishes_while_another_nodes_holder_appends() {
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(
            &ep,
            CanrtConfig {
                lock_polls: 200,
                ..cfg(8)
            },
        )
        .await
        .unwrap();
        for k in 0..200u64 {
            t.upsert(&be(k << 20), &k.to_le_bytes()).await.unwrap();
        }
        t.get(&be(0), &mut [0u8; 8]).await.unwrap();
        let v = t.view();
        let stats = node.server.borrow().stats();
        let fill = |id: u32| {
            let off = v.header.data_node_off(id) + FRONT_OFF;
            Meta(node.pm.load_u64(off).unwrap()).bitmap().count_ones()
        };
        // F: the node reported full; X: a node under three-quarters full (not split).
        let f = v.order()[0];
        let x = *v
            .order()
            .iter()
            .rev()
            .find(|&&id| id != f && fill(id) < 6)
            .expect("a node under three-quarters full");
        let key = (0..200u64)
            .map(|k| k << 20)
            .find(|&k| v.locate(u128::from(k)) == Ok(x))
            .unwrap();
        let before = stats.resizes.load(core::sync::atomic::Ordering::Relaxed);
        let published_first = Rc::new(Cell::new(false));
        let (n2, v2, st2, flag) = (
            node.clone(),
            v.clone(),
            stats.clone(),
            published_first.clone(),
        );
        *node.before_next_append.borrow_mut() = Some(Box::new(move || {
            // Another client takes F's lock (FETCH_AND_ADD) and reports it full.
            let off = v2.header.data_node_off(f);
            let served = Meta(n2.pm.load_u64(off + FRONT_OFF).unwrap()).served();
            let lock = n2.pm.load_u64(off + LOCK_OFF).unwrap();
            n2.pm.store_u64(off + LOCK_OFF, lock + 1).unwrap();
            let c = Control::new(
                ControlKind::Resize,
                v2.epoch_tag(),
                v2.header.array_gen,
                f,
                served,
            );
            n2.deliver(RecvKind::Send, None, &c.encode()).unwrap();
            flag.set(st2.resizes.load(core::sync::atomic::Ordering::Relaxed) > before);
        }));
        t.upsert(&be(key), &99u64.to_le_bytes()).await.unwrap();
        assert!(
            published_first.get(),
            "the split waited for the holder of a node it does not split"
        );
        assert_eq!(
            stats.refused.load(core::sync::atomic::Ordering::Relaxed),
            0,
            "the append was refused though the new tree routes its key to its node"
        );
        let mut out = [0u8; 8];
        for k in 0..200u64 {
            assert_eq!(t.get(&be(k << 20), &mut out).await.unwrap(), Some(8));
            let want = if k << 20 == key { 99 } else { k };
            assert_eq!(u64::from_le_bytes(out), want, "key {k}");
        }
    });
}

/// A rebuild's data array is one a header may name: at most 2^20 nodes (past 2^19 nodes,
/// twice the nodes was more, and every rebuild failed).
#[test]
fn a_rebuilt_data_array_fits_the_header() {
    use super::super::resize::data_capacity;
    use remora_layouts::canrt::MAX_DATA_NODES;
    assert_eq!(data_capacity(1), 16);
    assert_eq!(data_capacity(1000), 2000);
    for n in [(1 << 19) + 1, 625_000, MAX_DATA_NODES] {
        let cap = data_capacity(n);
        assert!(
            cap >= n && cap <= MAX_DATA_NODES,
            "{n} nodes: capacity {cap}"
        );
    }
}

/// As above, with two splits published between the holder's read of its turn and its
/// append landing (a descheduled holder, under load): the append names an epoch two trees
/// old, and it is the lock holder's all the same (same data array, X split by neither). It
/// is applied (the valid tree routes its key to X). Before, the server took an append
/// older than the previous tree for a skipped holder's: it neither applied it nor released
/// the lock, and the holder waited for its acknowledgement until it gave up (a
/// `LockTimeout` in `lin_soft canrt` under load, or a hang behind it).
#[test]
fn two_splits_publish_while_another_nodes_holder_appends() {
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(
            &ep,
            CanrtConfig {
                lock_polls: 200,
                ..cfg(8)
            },
        )
        .await
        .unwrap();
        for k in 0..200u64 {
            t.upsert(&be(k << 20), &k.to_le_bytes()).await.unwrap();
        }
        t.get(&be(0), &mut [0u8; 8]).await.unwrap();
        let v = t.view();
        let stats = node.server.borrow().stats();
        let fill = |id: u32| {
            let off = v.header.data_node_off(id) + FRONT_OFF;
            Meta(node.pm.load_u64(off).unwrap()).bitmap().count_ones()
        };
        // F1, F2: nodes reported full one after the other; X: a node under three-quarters
        // full (split by neither).
        let (f1, f2) = (v.order()[0], v.order()[1]);
        let x = *v
            .order()
            .iter()
            .rev()
            .find(|&&id| id != f1 && id != f2 && fill(id) < 6)
            .expect("a node under three-quarters full");
        assert!(fill(f1) >= 2 && fill(f2) >= 2, "nothing to split");
        let key = (0..200u64)
            .map(|k| k << 20)
            .find(|&k| v.locate(u128::from(k)) == Ok(x))
            .unwrap();
        let before = stats.resizes.load(core::sync::atomic::Ordering::Relaxed);
        let published = Rc::new(Cell::new(0));
        let (n2, v2, st2, flag) = (node.clone(), v.clone(), stats.clone(), published.clone());
        *node.before_next_append.borrow_mut() = Some(Box::new(move || {
            for f in [f1, f2] {
                // Another client takes F's lock (FETCH_AND_ADD) and reports it full.
                let off = v2.header.data_node_off(f);
                let served = Meta(n2.pm.load_u64(off + FRONT_OFF).unwrap()).served();
                let lock = n2.pm.load_u64(off + LOCK_OFF).unwrap();
                n2.pm.store_u64(off + LOCK_OFF, lock + 1).unwrap();
                let c = Control::new(
                    ControlKind::Resize,
                    v2.epoch_tag(),
                    v2.header.array_gen,
                    f,
                    served,
                );
                n2.deliver(RecvKind::Send, None, &c.encode()).unwrap();
            }
            flag.set(st2.resizes.load(core::sync::atomic::Ordering::Relaxed) - before);
        }));
        let r = t.upsert(&be(key), &99u64.to_le_bytes()).await;
        assert_eq!(
            published.get(),
            2,
            "both splits published before the append"
        );
        assert!(tree_epoch(&node) >= v.header.epoch + 2);
        r.unwrap();
        assert_eq!(
            stats.refused.load(core::sync::atomic::Ordering::Relaxed),
            0,
            "the append was refused though the valid tree routes its key to its node"
        );
        let mut out = [0u8; 8];
        for k in 0..200u64 {
            assert_eq!(t.get(&be(k << 20), &mut out).await.unwrap(), Some(8));
            let want = if k << 20 == key { 99 } else { k };
            assert_eq!(u64::from_le_bytes(out), want, "key {k}");
        }
    });
}

/// The epoch of the tree the root slot names.
fn tree_epoch(node: &MemNode) -> u32 {
    let root = node.pm.load_u64(root_offset(ROOT_SLOT)).unwrap();
    let off = GlobalAddr::from_raw(root).offset();
    let mut hb = [0u8; remora_layouts::canrt::TREE_HEADER_LEN];
    node.pm.read(off, &mut hb).unwrap();
    TreeHeader::decode(&hb).unwrap().epoch
}

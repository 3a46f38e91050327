//! Single-client basics: a BTreeMap oracle through resizes, the one-round-trip warm
//! lookup, torn appends, and a holder's item staying invisible until applied.
use super::*;

#[test]
fn single_client_matches_a_btreemap_through_resizes() {
    let node = MemNode::new(Pm::new(8 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        let mut model = BTreeMap::new();
        let mut out = [0u8; 8];
        for (i, a) in script(3000, 7, 700).into_iter().enumerate() {
            run_act(&t, a, &mut model).await;
            if i % 97 == 0 {
                // Scans from a few points agree with the model.
                let from = (i as u64 % 700) * 0x1_0000_0001;
                scan_matches(&t, &model, from, 20).await;
            }
        }
        for (k, v) in &model {
            assert_eq!(t.get(&be(*k), &mut out).await.unwrap(), Some(8));
            assert_eq!(u64::from_le_bytes(out), *v);
        }
        assert_eq!(t.get(&be(3), &mut out).await.unwrap(), None);
        assert_eq!(dump(&node.pm), model);
        let st = node.server.borrow().stats();
        assert!(st.resizes.load(core::sync::atomic::Ordering::Relaxed) > 3);
        assert!(t.stats().refreshes > 3);
        // Bad input is refused with errors.
        assert!(matches!(
            t.get(b"short", &mut out).await,
            Err(CanrtError::BadKey { len: 5, width: 8 })
        ));
        assert!(matches!(
            t.upsert(&be(1), &[0; 9]).await,
            Err(CanrtError::ValueTooLong { len: 9, max: 8 })
        ));
    });
}

#[test]
fn warm_lookup_is_one_doorbell_and_one_round_trip() {
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(32)).await.unwrap();
        for k in 0..500u64 {
            t.upsert(&be(k * 977), &k.to_le_bytes()).await.unwrap();
        }
        let c = ep.qp.counters();
        let before = c.snapshot();
        let mut out = [0u8; 8];
        for k in 0..500u64 {
            assert_eq!(t.get(&be(k * 977), &mut out).await.unwrap(), Some(8));
        }
        let d = c.snapshot() - before;
        // The node READ and the meta word alone before and after it, in one doorbell.
        assert_eq!(d.verb(Verb::Read), 3 * 500);
        assert_eq!(d.posted_verbs(), 3 * 500);
        assert_eq!(d.doorbells, 500);
        assert_eq!(d.round_trips, 500);
        // An uncontended upsert: FETCH_AND_ADD + the meta word's READ in one doorbell (an
        // insert appends without reading the node: Algorithm 1's 8-byte fetch), then
        // WRITE_WITH_IMM
        let before = c.snapshot();
        for k in 0..100u64 {
            t.upsert(&be(k * 977), &(k + 1).to_le_bytes())
                .await
                .unwrap();
        }
        let d = c.snapshot() - before;
        assert_eq!(d.verb(Verb::Faa), 100);
        // (and in the WRITE_WITH_IMM's doorbell the meta word, to notice a skipped ticket,
        // and the read-after-write flush READ)
        assert_eq!(d.verb(Verb::Read), 3 * 100);
        assert_eq!(d.verb(Verb::WriteImm), 100);
        assert_eq!(d.doorbells, 200);
        assert_eq!(d.round_trips, 200);
    });
}

#[test]
fn a_torn_append_is_refused_and_never_read() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        node.corrupt_next.set(true);
        // The applier refuses the torn item (the connection would drop) but frees the lock.
        assert!(t.upsert(&be(5), &2u64.to_le_bytes()).await.is_err());
        let mut out = [0u8; 8];
        assert_eq!(t.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 1);
        t.upsert(&be(5), &3u64.to_le_bytes()).await.unwrap();
        assert_eq!(t.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 3);
    });
}

#[test]
fn a_holders_item_stays_invisible_until_the_applier_runs() {
    // Hand-made node: the holder (ticket 1) has written its item but the server has not
    // applied (persisted and committed) it. Readers see only the applied value: the NIC's
    // write may not be durable yet, so a value read from it could vanish in a crash (issue
    // 13). The write path still recognizes the holder's record (`pending`), a torn copy of
    // it not.
    let g = remora_layouts::canrt::DataGeometry::new(4, 8).unwrap();
    let mut node = vec![0u8; g.node_size() as usize];
    let put = |node: &mut Vec<u8>, slot: u32, k: u64, v: u64, op, ticket, valid| {
        let at = g.slot_off(slot) as usize;
        g.encode_item(
            &mut node[at..at + 24],
            k.into(),
            &v.to_le_bytes(),
            op,
            ticket,
            valid,
        )
        .unwrap();
    };
    let put_item = |node: &mut Vec<u8>, slot: u32, k: u64, v: u64, op, ticket| {
        put(node, slot, k, v, op, ticket, true)
    };
    // Applied: processed (valid clear).
    put(&mut node, 0, 7, 70, ItemOpT::Insert, 0, false);
    let m = remora_layouts::canrt::Meta::new(0b1, 1, false, 1);
    node[8..16].copy_from_slice(&m.0.to_le_bytes());
    node[0..8].copy_from_slice(&2u64.to_le_bytes()); // ticket 1 handed out
    put_item(&mut node, 1, 7, 71, ItemOpT::Update, 1);
    let nv = NodeView::parse(g, &node).unwrap();
    assert_eq!(nv.find(7).unwrap(), Found::Present(&70u64.to_le_bytes()));
    assert_eq!(
        nv.pending().map(|p| p.value),
        Some(&71u64.to_le_bytes()[..])
    );
    let mut seen = Vec::new();
    nv.for_each_live(|k, v| seen.push((k, v.to_vec()))).unwrap();
    assert_eq!(seen, vec![(7, 70u64.to_le_bytes().to_vec())]);
    // Torn: the key word of the pending item is stale.
    let mut torn = node.clone();
    torn[g.slot_off(1) as usize] ^= 0x40;
    let nv = NodeView::parse(g, &torn).unwrap();
    assert!(nv.pending().is_none());
    assert_eq!(nv.find(7).unwrap(), Found::Present(&70u64.to_le_bytes()));
    // A pending delete does not hide the key before it is applied either.
    put_item(&mut node, 1, 7, 0, ItemOpT::Delete, 1);
    assert_eq!(
        NodeView::parse(g, &node).unwrap().find(7).unwrap(),
        Found::Present(&70u64.to_le_bytes())
    );
    // A processed item (valid bit clear) with the served ticket, as a free slot keeps one
    // 2^16 tickets later, is not the holder's.
    let tail_at = g.tail_off(1) as usize;
    let tail = u64::from_le_bytes(node[tail_at..tail_at + 8].try_into().unwrap());
    let mut old = node.clone();
    old[tail_at..tail_at + 8]
        .copy_from_slice(&remora_layouts::canrt::tail_processed(tail).to_le_bytes());
    assert!(NodeView::parse(g, &old).unwrap().pending().is_none());
    // No holder (lock == served): a stale item with the served ticket is not pending.
    node[0..8].copy_from_slice(&1u64.to_le_bytes());
    assert!(NodeView::parse(g, &node).unwrap().pending().is_none());
    // A snapshot holds only if the meta word read alone before and after is the node's.
    let nv = NodeView::parse(g, &node).unwrap();
    assert!(nv.stable(m.0, m.0));
    let m2 = m.with_served(2);
    assert!(!nv.stable(m.0, m2.0));
    assert!(!nv.stable(m2.0, m2.0));
    // A live slot whose tail has `valid` set is reserved (a skipped holder's hole, or its
    // late append, whole or landing): skipped, whatever its other bytes hold, never an
    // error to retry on.
    let mut res = node.clone();
    res[8..16].copy_from_slice(&m.with_bitmap(0b111).0.to_le_bytes());
    put(&mut res, 2, 9, 90, ItemOpT::Insert, 0, false);
    let at = g.tail_off(1) as usize;
    res[at..at + 8].copy_from_slice(&remora_layouts::canrt::hole_tail(1).to_le_bytes());
    let nv = NodeView::parse(g, &res).unwrap();
    assert!(nv.reserved(1) && !nv.reserved(0) && !nv.reserved(2));
    assert_eq!(nv.live_slots().collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(nv.find(7).unwrap(), Found::Present(&70u64.to_le_bytes()));
    let mut seen = Vec::new();
    nv.for_each_live(|k, _| seen.push(k)).unwrap();
    assert_eq!(seen, vec![7, 9]);
    // A late item of key 7 landing in it (whole, or torn) does not show either.
    put_item(&mut res, 1, 7, 71, ItemOpT::Update, 1);
    assert_eq!(
        NodeView::parse(g, &res).unwrap().find(7).unwrap(),
        Found::Present(&70u64.to_le_bytes())
    );
    res[g.slot_off(1) as usize] ^= 0x40;
    assert_eq!(
        NodeView::parse(g, &res).unwrap().find(7).unwrap(),
        Found::Present(&70u64.to_le_bytes())
    );
}

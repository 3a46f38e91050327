//! Regression tests for issue 13 (and the server's side of issue 10): each fails on the code
//! before its fix.
use super::*;
use remora_layouts::canrt::{
    Control, ControlKind, FRONT_OFF, Imm, LOCK_OFF, Meta, SKIP_DRAIN, TREE_HEADER_LEN,
};

/// The published tree of a region (header, prefix array).
pub(super) fn tree_of(region: &dyn LocalRegion) -> TreeView {
    let root = region.load_u64(root_offset(ROOT_SLOT)).unwrap();
    let off = GlobalAddr::from_raw(root).offset();
    let mut hb = [0u8; TREE_HEADER_LEN];
    region.read(off, &mut hb).unwrap();
    let h = TreeHeader::decode(&hb).unwrap();
    let mut prefix = vec![0u8; h.prefix_len as usize];
    region.read(h.prefix_off, &mut prefix).unwrap();
    TreeView::new(h, root, prefix).unwrap()
}

fn meta_of(region: &dyn LocalRegion, v: &TreeView, id: u32) -> Meta {
    Meta(
        region
            .load_u64(v.header.data_node_off(id) + FRONT_OFF)
            .unwrap(),
    )
}

/// Writes a complete, unprocessed item for `key` with `ticket` into the first free slot of
/// the data node that holds `key`; returns (node, slot).
pub(super) fn forge_item(
    region: &dyn LocalRegion,
    v: &TreeView,
    key: u64,
    val: u64,
    ticket: u64,
) -> (u32, u32) {
    let g = v.data();
    let id = v.locate(key.into()).unwrap();
    let free = !meta_of(region, v, id).bitmap() & g.full_bitmap();
    let slot = free.trailing_zeros();
    forge_item_at(region, v, id, slot, key, val, ticket);
    (id, slot)
}

/// Writes a complete, unprocessed item for `key` with `ticket` into `slot` of data node
/// `id` (an append landing there, its notice not yet handled).
fn forge_item_at(
    region: &dyn LocalRegion,
    v: &TreeView,
    id: u32,
    slot: u32,
    key: u64,
    val: u64,
    ticket: u64,
) {
    let g = v.data();
    let off = v.header.data_node_off(id);
    let mut item = vec![0u8; g.item_size() as usize];
    g.encode_item(
        &mut item,
        key.into(),
        &val.to_le_bytes(),
        ItemOpT::Insert,
        ticket,
        true,
    )
    .unwrap();
    region.write(off + g.slot_off(slot), &item).unwrap();
}

/// Reserved slots (live, `valid` set) in the published tree's data nodes.
fn reserved_slots(region: &dyn LocalRegion) -> usize {
    let v = tree_of(region);
    let mut buf = vec![0u8; v.header.data_node_size as usize];
    let mut n = 0;
    for id in 0..v.header.n_data {
        region.read(v.header.data_node_off(id), &mut buf).unwrap();
        let nv = NodeView::parse(v.data(), &buf).unwrap();
        n += (0..v.header.slots)
            .filter(|&s| nv.front.bitmap() & (1 << s) != 0 && nv.reserved(s))
            .count();
    }
    n
}

fn control(node: &MemNode, c: Control) -> Result<(), FabricError> {
    node.deliver(RecvKind::Send, None, &c.encode())
}

/// An item the applier refused at run time (not the lock holder's ticket) stays out after a
/// crash; the holder's own unapplied item is replayed.
#[test]
fn recovery_replays_only_the_lock_holders_item() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
    });
    let v = tree_of(&node.pm);
    let served = meta_of(&node.pm, &v, 0).served();
    // A forged item two tickets ahead, announced: refused, the lock untouched.
    let (id, slot) = forge_item(&node.pm, &v, 6, 66, served + 2);
    let imm = Imm {
        epoch: v.epoch_tag(),
        node: id,
        slot,
    }
    .encode()
    .unwrap();
    assert!(node.deliver(RecvKind::WriteImm, Some(imm), &[]).is_err());
    assert_eq!(meta_of(&node.pm, &v, id).served(), served);
    let mut srv = CanrtServer::new();
    let r = srv.recover(&node.pm).unwrap();
    assert_eq!(r.replayed, 0, "{r:?}");
    let got = dump(&node.pm);
    assert_eq!(got.get(&6), None, "a refused item came back: {got:?}");
    assert_eq!(got.get(&5), Some(&1));
    // The holder's item (ticket = served, one ticket handed out) is replayed.
    let off = v.header.data_node_off(id);
    node.pm.store_u64(off + LOCK_OFF, served + 1).unwrap();
    forge_item(&node.pm, &v, 7, 77, served);
    let r = srv.recover(&node.pm).unwrap();
    assert_eq!(r.replayed, 1, "{r:?}");
    assert_eq!(dump(&node.pm).get(&7), Some(&77));
}

/// Unlock and Resize from a client that holds no ticket are refused: `served` never runs
/// ahead of the lock word (which froze every later write and resize).
#[test]
fn unlock_or_resize_without_the_lock_is_refused() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        let v = tree_of(&node.pm);
        let m = meta_of(&node.pm, &v, 0);
        let array_gen = v.header.array_gen;
        for kind in [ControlKind::Unlock, ControlKind::Resize] {
            let c = Control::new(kind, m.epoch(), array_gen, 0, m.served());
            assert!(control(&node, c).is_err(), "{kind:?} without the lock");
            let now = meta_of(&node.pm, &v, 0);
            assert_eq!(now.served(), m.served(), "{kind:?} moved the served ticket");
            assert!(!now.frozen(), "{kind:?} froze the tree");
        }
        // Writes go on.
        for k in 0..20u64 {
            t.upsert(&be(k), &k.to_le_bytes()).await.unwrap();
        }
        let mut out = [0u8; 8];
        assert_eq!(t.get(&be(19), &mut out).await.unwrap(), Some(8));
    });
}

/// A Skip of a ticket served for a lease: the holder's complete item is applied (its notice
/// may come later and is then ignored); a holder that wrote nothing is skipped, and its late
/// append is refused. Skips of a free lock, or of a ticket that moved on, change nothing.
#[test]
fn a_stuck_ticket_is_applied_or_skipped_on_request() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
    });
    let v = tree_of(&node.pm);
    let off = v.header.data_node_off(0);
    let array_gen = v.header.array_gen;
    let s0 = meta_of(&node.pm, &v, 0).served();
    let skip = |ticket| Control::new(ControlKind::Skip, v.epoch_tag(), array_gen, 0, ticket);
    // Nobody holds the lock: nothing happens.
    control(&node, skip(s0)).unwrap();
    assert_eq!(meta_of(&node.pm, &v, 0).served(), s0);
    // A holder took ticket s0 and wrote its item, then died before the notice.
    node.pm.store_u64(off + LOCK_OFF, s0 + 1).unwrap();
    let (_, slot) = forge_item(&node.pm, &v, 6, 66, s0);
    control(&node, skip(s0)).unwrap();
    assert_eq!(meta_of(&node.pm, &v, 0).served(), s0 + 1);
    assert_eq!(dump(&node.pm).get(&6), Some(&66));
    // Its notice arriving late is harmless.
    let imm = Imm {
        epoch: v.epoch_tag(),
        node: 0,
        slot,
    }
    .encode()
    .unwrap();
    node.deliver(RecvKind::WriteImm, Some(imm), &[]).unwrap();
    assert_eq!(meta_of(&node.pm, &v, 0).served(), s0 + 1);
    // A holder of s0 + 1 that never appended: skipped; a stale skip changes nothing.
    node.pm.store_u64(off + LOCK_OFF, s0 + 3).unwrap();
    control(&node, skip(s0 + 1)).unwrap();
    control(&node, skip(s0 + 1)).unwrap();
    assert_eq!(meta_of(&node.pm, &v, 0).served(), s0 + 2);
    // The slot it would append into is reserved.
    assert_eq!(reserved_slots(&node.pm), 1);
    // Its late append and its late unlock are ignored (its writer reads back that it was
    // skipped), the lock left to s0 + 2; the item never shows.
    let (_, slot) = forge_item(&node.pm, &v, 8, 88, s0 + 1);
    let imm = Imm {
        epoch: v.epoch_tag(),
        node: 0,
        slot,
    }
    .encode()
    .unwrap();
    node.deliver(RecvKind::WriteImm, Some(imm), &[]).unwrap();
    control(
        &node,
        Control::new(ControlKind::Unlock, v.epoch_tag(), array_gen, 0, s0 + 1),
    )
    .unwrap();
    assert_eq!(meta_of(&node.pm, &v, 0).served(), s0 + 2);
    // Handed back, the ticket can have no append coming: its slot is freed with the next
    // ticket served (not before: the holder of s0 + 2 picked its slot already).
    assert!(node.server.borrow().reserved.is_empty());
    assert_eq!(reserved_slots(&node.pm), 1);
    let mut buf = vec![0u8; v.header.data_node_size as usize];
    node.pm.read(off, &mut buf).unwrap();
    let nv = NodeView::parse(v.data(), &buf).unwrap();
    assert_eq!(
        nv.find(8).unwrap(),
        Found::Absent,
        "a skipped ticket's item shows"
    );
    // A message of a ticket not served yet is a forgery: refused.
    assert!(
        control(
            &node,
            Control::new(ControlKind::Unlock, v.epoch_tag(), array_gen, 0, s0 + 3),
        )
        .is_err()
    );
    control(
        &node,
        Control::new(ControlKind::Unlock, v.epoch_tag(), array_gen, 0, s0 + 2),
    )
    .unwrap();
    assert_eq!(reserved_slots(&node.pm), 0);
    // A drain skip outside a resize does nothing.
    control(
        &node,
        Control::new(ControlKind::Skip, v.epoch_tag(), array_gen, SKIP_DRAIN, 0),
    )
    .unwrap();
    assert_eq!(meta_of(&node.pm, &v, 0).served(), s0 + 3);
    assert_eq!(
        node.server
            .borrow()
            .stats()
            .skipped
            .load(core::sync::atomic::Ordering::Relaxed),
        2
    );
}

/// Keys whose differing bits alternate, next to dense small keys: every constant run as a
/// gap used up the 16 segments before the bits that separate the dense keys, and no tree
/// shape held them (the node stayed unwritable).
#[test]
fn alternating_bits_next_to_dense_keys_still_plan() {
    let mut keys: Vec<u64> = (0..64).collect();
    keys.push(0xAAAA_AAAA_AAAA_AA80);
    keys.push(0x8AAA_AAAA_AAAA_AA80);
    keys.sort_unstable();
    let wide: Vec<u128> = keys.iter().map(|&k| k.into()).collect();
    let p = plan(&wide, 4, 8)
        .unwrap()
        .expect("a shape holds any key set");
    assert!(p.groups.iter().all(|&(a, b)| b - a <= 4));
    assert_eq!(
        p.groups.iter().map(|&(a, b)| b - a).sum::<usize>(),
        keys.len()
    );
    let v = view_of(&p, 8);
    for (i, &(a, b)) in p.groups.iter().enumerate() {
        for &k in &keys[a..b] {
            assert_eq!(v.locate(k.into()).unwrap(), i as u32, "key {k:#x}");
        }
    }
    // End to end: the resizes that plan them succeed.
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        for &k in keys.iter().rev() {
            t.upsert(&be(k), &k.to_le_bytes()).await.unwrap();
        }
        let mut out = [0u8; 8];
        for &k in &keys {
            assert_eq!(t.get(&be(k), &mut out).await.unwrap(), Some(8), "{k:#x}");
            assert_eq!(u64::from_le_bytes(out), k);
        }
    });
}

/// A memory node with no room for the tree says so (it said "no tree in root slot 3").
#[test]
fn a_full_memory_node_is_reported_as_full() {
    let node = MemNode::new(Pm::new(16 << 10, 1 << 12));
    let ep = mem_ep(&node);
    block_on(async {
        let e = Canrt::open(&ep, cfg(32))
            .await
            .err()
            .expect("no room for a tree");
        assert!(matches!(e, CanrtError::NodeFull { node: 0, .. }), "{e:?}");
        assert!(e.to_string().contains("memory node 0 is full"), "{e}");
    });
}

/// The memory node's handler runs CANRT's recovery and names its service.
#[test]
fn the_handler_recovers_and_names_canrt() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
    });
    let mut srv = CanrtServer::new();
    assert_eq!(Handler::service(&srv), "canrt");
    let report = Handler::recover(&mut srv, &node.pm).unwrap();
    assert!(
        report.starts_with("canrt: 1 data nodes, 0 items replayed"),
        "{report}"
    );
}

/// A holder that stalls for a lease after its turn came and before its append lands is
/// skipped; its append lands anyway, the server ignores it, and the holder reads back (in
/// the append's doorbell) that its ticket was passed with its item unprocessed, and writes
/// again on a new ticket: the write happens once, nobody's connection drops.
#[test]
fn a_holder_skipped_before_its_append_writes_again() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        let v = tree_of(&node.pm);
        let served = meta_of(&node.pm, &v, 0).served();
        // A waiter's Skip of our ticket (served, nothing appended yet) arrives first.
        let n = node.clone();
        let skip = Control::new(
            ControlKind::Skip,
            v.epoch_tag(),
            v.header.array_gen,
            0,
            served,
        );
        *node.before_next_append.borrow_mut() = Some(Box::new(move || {
            n.deliver(RecvKind::Send, None, &skip.encode()).unwrap();
        }));
        t.upsert(&be(5), &2u64.to_le_bytes()).await.unwrap();
        assert!(
            node.before_next_append.borrow().is_none(),
            "no append happened"
        );
        assert_eq!(t.stats().skipped, 1, "{:?}", t.stats());
        let st = node.server.borrow().stats();
        assert_eq!(st.skipped.load(core::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(st.late.load(core::sync::atomic::Ordering::Relaxed), 1);
        let mut out = [0u8; 8];
        assert_eq!(t.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 2);
        // Two tickets taken (the skipped one and the one that wrote), both served.
        let now = meta_of(&node.pm, &v, 0);
        assert_eq!(now.served(), served + 2);
        assert_eq!(
            node.pm
                .load_u64(v.header.data_node_off(0) + LOCK_OFF)
                .unwrap()
                & 0xFFFF,
            served + 2
        );
    });
    assert_eq!(dump(&node.pm).get(&5), Some(&2));
}

/// A resize waits for every ticket handed out; a ticket nobody will use stops it until the
/// drain `Skip`s of one client's wait, a lease apart (consecutive lease counts), find it
/// unmoved. Reports of different waits, or repeated ones, are never compared.
#[test]
fn a_drain_stuck_on_a_dead_ticket_is_skipped_by_one_waits_reports() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
    });
    let v = tree_of(&node.pm);
    let off = v.header.data_node_off(0);
    let s0 = meta_of(&node.pm, &v, 0).served();
    let array_gen = v.header.array_gen;
    // Two tickets: ours (s0), which asks for a resize, and a dead client's (s0 + 1).
    node.pm.store_u64(off + LOCK_OFF, s0 + 2).unwrap();
    control(
        &node,
        Control::new(ControlKind::Resize, v.epoch_tag(), array_gen, 0, s0),
    )
    .unwrap();
    assert!(meta_of(&node.pm, &v, 0).frozen(), "the resize drains");
    let drain = |wait: u64, leases: u32| {
        control(
            &node,
            Control::new(ControlKind::Skip, leases, array_gen, SKIP_DRAIN, wait),
        )
        .unwrap()
    };
    drain(7, 1);
    drain(8, 1);
    drain(7, 1);
    drain(8, 3);
    assert!(
        meta_of(&node.pm, &v, 0).frozen(),
        "skipped on unrelated reports"
    );
    assert_eq!(meta_of(&node.pm, &v, 0).served(), s0 + 1);
    drain(7, 2);
    let st = node.server.borrow().stats();
    assert_eq!(st.skipped.load(core::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(st.resizes.load(core::sync::atomic::Ordering::Relaxed), 1);
    let nv = tree_of(&node.pm);
    assert!(nv.header.epoch > v.header.epoch, "no new tree");
    assert_eq!(dump(&node.pm).get(&5), Some(&1));
    // Its connection gone, the server forgets the wait's reports.
    Handler::on_disconnect(&mut *node.server.borrow_mut(), &node.pm, 0);
    assert!(node.server.borrow().drain_seen.is_empty());
}

/// A memory node that fills while the tree grows says so, to the writer whose insert needs
/// the room; before, the failed resize dropped the connection of whichever client's message
/// ran it (a "flushed" or "retry exceeded" error, or a writer retrying for good).
#[test]
fn a_node_that_fills_while_growing_is_reported_as_full() {
    let node = MemNode::new(Pm::new(96 << 10, 1 << 12));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        let mut err = None;
        let mut inserted = 0u64;
        for k in 0..100_000u64 {
            match t.upsert(&be(k * 7919), &k.to_le_bytes()).await {
                Ok(()) => inserted += 1,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let e = err.expect("the node never filled");
        assert!(matches!(e, CanrtError::NodeFull { node: 0, .. }), "{e:?}");
        assert!(e.to_string().contains("memory node 0 is full"), "{e}");
        assert!(inserted > 100, "{inserted}");
        // What was inserted is still there, and the handle still works.
        let mut out = [0u8; 8];
        for k in 0..inserted {
            assert_eq!(t.get(&be(k * 7919), &mut out).await.unwrap(), Some(8));
        }
        assert!(t.upsert(&be(7919), &1u64.to_le_bytes()).await.is_ok());
    });
}

/// The stalled-holder window of the module docs: holder A reads its turn and stalls for a
/// lease before its append lands; a waiter's `Skip` passes A's ticket; B takes the next
/// ticket, appends, is applied and acknowledged; then A's append lands. Before the fix, B
/// appended into the slot A had picked (the first free one, the same for both), and A's late
/// WRITE_WITH_IMM overwrote B's acknowledged item (key 6 read back as absent). The skip now
/// reserves A's slot, so B writes elsewhere; A reads back that it was skipped and writes
/// again.
#[test]
fn a_late_append_after_a_skip_never_overwrites_an_acknowledged_item() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    // B's handle lives in the hook, which must be 'static.
    let ep2: &'static MemEp = Box::leak(Box::new(mem_ep(&node)));
    block_on(async {
        let a = Canrt::open(&ep, cfg(8)).await.unwrap();
        let b = Rc::new(Canrt::open(ep2, cfg(8)).await.unwrap());
        a.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        let v = tree_of(&node.pm);
        let served = meta_of(&node.pm, &v, 0).served();
        let skip = Control::new(
            ControlKind::Skip,
            v.epoch_tag(),
            v.header.array_gen,
            0,
            served,
        );
        let (n, b2) = (node.clone(), b.clone());
        // A's append is about to land (its turn seen, its slot picked): first a waiter's
        // Skip passes A's ticket, then B writes key 6 on the next ticket.
        *node.before_next_append.borrow_mut() = Some(Box::new(move || {
            n.deliver(RecvKind::Send, None, &skip.encode()).unwrap();
            block_on(async {
                b2.upsert(&be(6), &66u64.to_le_bytes()).await.unwrap();
            });
        }));
        a.upsert(&be(5), &2u64.to_le_bytes()).await.unwrap();
        assert!(node.before_next_append.borrow().is_none(), "no append");
        assert_eq!(a.stats().skipped, 1, "{:?}", a.stats());
        let mut out = [0u8; 8];
        assert_eq!(
            b.get(&be(6), &mut out).await.unwrap(),
            Some(8),
            "key 6 lost"
        );
        assert_eq!(u64::from_le_bytes(out), 66);
        assert_eq!(a.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 2, "A's retry did not land");
    });
    let got = dump(&node.pm);
    assert_eq!((got.get(&5), got.get(&6)), (Some(&2), Some(&66)));
}

/// The late append lands after a resize of its node: the skip reserved A's slot, B fills
/// the node, the server splits it in place (the lower half of its keys stays in their
/// slots), and B writes more keys into it; then A's append lands (under the old tree).
/// The split kept the slot reserved (B's keys went elsewhere), the late item is refused
/// and never read, A writes again, and the slot is freed once the late append is in.
#[test]
fn a_reservation_outlives_a_split_of_its_node() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    let ep2: &'static MemEp = Box::leak(Box::new(mem_ep(&node)));
    block_on(async {
        let a = Canrt::open(&ep, cfg(8)).await.unwrap();
        let b = Rc::new(Canrt::open(ep2, cfg(8)).await.unwrap());
        a.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        // Slot 1 keeps an old item of key 14 (moved to slot 2 by its update): the hole A's
        // skip leaves there holds that key's bytes, a key the split moves out.
        a.upsert(&be(14), &1u64.to_le_bytes()).await.unwrap();
        a.upsert(&be(14), &140u64.to_le_bytes()).await.unwrap();
        let v = tree_of(&node.pm);
        let served = meta_of(&node.pm, &v, 0).served();
        let skip = Control::new(
            ControlKind::Skip,
            v.epoch_tag(),
            v.header.array_gen,
            0,
            served,
        );
        let (n, b2) = (node.clone(), b.clone());
        let split = Rc::new(Cell::new(false));
        let split2 = split.clone();
        *node.before_next_append.borrow_mut() = Some(Box::new(move || {
            n.deliver(RecvKind::Send, None, &skip.encode()).unwrap();
            // A's slot (1, the first free one) is reserved.
            let m = meta_of(&n.pm, &v, 0);
            assert_eq!(m.served(), served + 1);
            assert_ne!(m.bitmap() & 0b10, 0, "A's slot not reserved");
            block_on(async {
                // Node 0 fills (5, the hole, 10..=15), and splits: 12..=16 move out.
                for k in 10..=16u64 {
                    b2.upsert(&be(k), &(k * 10).to_le_bytes()).await.unwrap();
                }
                let w = tree_of(&n.pm);
                split2.set(w.header.epoch > v.header.epoch);
                assert_eq!(w.header.array_gen, v.header.array_gen, "a rebuild");
                // The hole is still reserved in node 0 (same memory, its keys < 12).
                assert_eq!(w.locate(5).unwrap(), 0);
                assert_ne!(meta_of(&n.pm, &w, 0).bitmap() & 0b10, 0, "split freed it");
                // More keys into node 0: none takes slot 1.
                for k in 1..=4u64 {
                    b2.upsert(&be(k), &(k * 10).to_le_bytes()).await.unwrap();
                }
            });
        }));
        a.upsert(&be(5), &2u64.to_le_bytes()).await.unwrap();
        assert!(split.get(), "node 0 was not split");
        assert_eq!(a.stats().skipped, 1, "{:?}", a.stats());
        let mut out = [0u8; 8];
        for k in (1..=4u64).chain(10..=16) {
            assert_eq!(b.get(&be(k), &mut out).await.unwrap(), Some(8), "key {k}");
            assert_eq!(u64::from_le_bytes(out), k * 10, "key {k}");
        }
        assert_eq!(a.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 2, "A's retry did not land");
        // The late append came in: the slot was freed once node 0's lock moved on (A's
        // retry found node 0 full again, and its resize request released it).
        let st = node.server.borrow().stats();
        assert_eq!(st.late.load(core::sync::atomic::Ordering::Relaxed), 1);
        assert!(node.server.borrow().reserved.is_empty());
        assert!(node.server.borrow().freeing.is_empty());
        assert_eq!(reserved_slots(&node.pm), 0, "never freed");
    });
    let got = dump(&node.pm);
    assert_eq!(got.len(), 12, "{got:?}");
    assert_eq!(got.get(&5), Some(&2));
}

/// Recovery after a skip: holder A's ticket was skipped (its slot reserved), B's write was
/// acknowledged, then A's late item landed in the reserved slot and the memory node crashed
/// before its notice was handled. Recovery drops the reservation and never replays the late
/// item as data, not even one carrying the served ticket (as a late item may, 2^16 tickets
/// on); the recovered node writes into the freed slot. Before the reservations, B's item
/// was in that slot and the late item destroyed it.
#[test]
fn recovery_drops_reservations_and_never_replays_a_late_append() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    let v = block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        let v = tree_of(&node.pm);
        let off = v.header.data_node_off(0);
        let served = meta_of(&node.pm, &v, 0).served();
        // A took ticket `served`, saw its turn (slot 1, the first free one, is its) and
        // stalled; a waiter's Skip passes it.
        node.pm.store_u64(off + LOCK_OFF, served + 1).unwrap();
        control(
            &node,
            Control::new(
                ControlKind::Skip,
                v.epoch_tag(),
                v.header.array_gen,
                0,
                served,
            ),
        )
        .unwrap();
        // B's write, acknowledged.
        t.upsert(&be(6), &66u64.to_le_bytes()).await.unwrap();
        // A's late item lands in its slot; no notice (the node crashes first).
        forge_item_at(&node.pm, &v, 0, 1, 5, 2, served);
        let mut out = [0u8; 8];
        assert_eq!(
            t.get(&be(6), &mut out).await.unwrap(),
            Some(8),
            "key 6 lost"
        );
        assert_eq!(u64::from_le_bytes(out), 66);
        assert_eq!(t.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 1, "a late item was read");
        v
    });
    let served = meta_of(&node.pm, &v, 0).served();
    for ticket in [served - 2, served] {
        forge_item_at(&node.pm, &v, 0, 1, 5, 2, ticket);
        let pm = Pm::from_image(node.pm.cur.borrow().clone());
        let mut srv = CanrtServer::new();
        let r = srv.recover(&pm).unwrap();
        assert_eq!((r.unreserved, r.replayed, r.corrupt), (1, 0, 0), "{r:?}");
        let got = dump(&pm);
        assert_eq!(got.len(), 2, "ticket {ticket}: {got:?}");
        assert_eq!((got.get(&5), got.get(&6)), (Some(&1), Some(&66)), "{got:?}");
        // Recovered once more (a crash right after): nothing comes back.
        let r = CanrtServer::new().recover(&pm).unwrap();
        assert_eq!((r.unreserved, r.replayed), (0, 0), "{r:?}");
        assert_eq!(dump(&pm), got);
        // The recovered node's next write takes the freed slot.
        let node2 = MemNode::new(pm);
        *node2.server.borrow_mut() = srv;
        let ep2 = mem_ep(&node2);
        block_on(async {
            let t = Canrt::open(&ep2, cfg(8)).await.unwrap();
            t.upsert(&be(7), &77u64.to_le_bytes()).await.unwrap();
        });
        assert_ne!(meta_of(&node2.pm, &v, 0).bitmap() & 0b10, 0);
        let got = dump(&node2.pm);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got.get(&7), Some(&77));
    }
}

/// The skip finds holder A's append half landed (its tail word not yet) in the first free
/// slot: the same case as an append still to come, so that slot is reserved. B's write
/// goes elsewhere; the rest of A's append lands (before the reservations, on B's applied
/// item, which then failed its checksum: key 7 unreadable), then its notice, which frees
/// the slot at the next release. No reader ever sees A's item.
#[test]
fn a_torn_append_found_by_a_skip_is_reserved_like_a_late_one() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        let v = tree_of(&node.pm);
        let g = v.data();
        let off = v.header.data_node_off(0);
        let served = meta_of(&node.pm, &v, 0).served();
        node.pm.store_u64(off + LOCK_OFF, served + 1).unwrap();
        // A's item for key 6 in slot 1, all but its tail word landed.
        let isz = g.item_size() as usize;
        let mut item = vec![0u8; isz];
        g.encode_item(
            &mut item,
            6,
            &66u64.to_le_bytes(),
            ItemOpT::Insert,
            served,
            true,
        )
        .unwrap();
        node.pm
            .write(off + g.slot_off(1), &item[..isz - 8])
            .unwrap();
        control(
            &node,
            Control::new(
                ControlKind::Skip,
                v.epoch_tag(),
                v.header.array_gen,
                0,
                served,
            ),
        )
        .unwrap();
        assert_eq!(meta_of(&node.pm, &v, 0).served(), served + 1);
        assert_eq!(reserved_slots(&node.pm), 1);
        let mut out = [0u8; 8];
        assert_eq!(t.get(&be(6), &mut out).await.unwrap(), None);
        // B's write, acknowledged; then the rest of A's append, and its notice.
        t.upsert(&be(7), &77u64.to_le_bytes()).await.unwrap();
        node.pm
            .write(off + g.tail_off(1), &item[isz - 8..])
            .unwrap();
        let imm = Imm {
            epoch: v.epoch_tag(),
            node: 0,
            slot: 1,
        }
        .encode()
        .unwrap();
        node.deliver(RecvKind::WriteImm, Some(imm), &[]).unwrap();
        assert_eq!(meta_of(&node.pm, &v, 0).served(), served + 2);
        assert_eq!(t.get(&be(7), &mut out).await.unwrap(), Some(8), "key 7");
        assert_eq!(u64::from_le_bytes(out), 77);
        assert_eq!(t.get(&be(6), &mut out).await.unwrap(), None);
        // Freed with the next ticket served.
        assert_eq!(reserved_slots(&node.pm), 1);
        t.upsert(&be(8), &88u64.to_le_bytes()).await.unwrap();
        assert_eq!(reserved_slots(&node.pm), 0);
    });
    let got = dump(&node.pm);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got.get(&6), None);
}

//! Handles of one compute node sharing its [`SmartNode`]: delegation and combining across
//! handles, and waiters that outlive a leader that died mid-operation.
extern crate std;
use super::tests::{block, endpoint, memory, run_all};
use super::*;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::boxed::Box;
use std::vec::Vec;

fn cfg() -> SmartConfig {
    SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8)
}

#[test]
fn a_read_in_flight_on_one_handle_serves_another_handle_of_the_node() {
    // One reading coroutine per handle: with a table per handle, no read could ever be
    // delegated (nobody else on the handle reads); with the node's table, each handle's
    // reader is served by the other's reads.
    let m = memory(4 << 20);
    let (ep1, ep2) = (endpoint(&m), endpoint(&m));
    let node = Arc::new(SmartNode::new(&cfg()));
    let s1 = block(Smart::open_on(&ep1, cfg(), node.clone())).unwrap();
    let s2 = block(Smart::open_on(&ep2, cfg(), node.clone())).unwrap();
    block(s1.upsert(&5u64.to_be_bytes(), &7u64.to_le_bytes())).unwrap();
    let mut futs: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for s in [&s1, &s2] {
        futs.push(Box::pin(async move {
            let mut out = [0u8; 8];
            for _ in 0..100 {
                assert_eq!(s.get(&5u64.to_be_bytes(), &mut out).await.unwrap(), Some(8));
                assert_eq!(u64::from_le_bytes(out), 7);
            }
        }));
    }
    run_all(futs);
    let (a, b) = (s1.stats(), s2.stats());
    // Each handle has one reader: every delegated read was served by the other handle's.
    assert!(
        a.delegated_reads + b.delegated_reads >= 50,
        "delegated {} / {}",
        a.delegated_reads,
        b.delegated_reads
    );
    assert_eq!(node.footprint().handles, 2);
}

#[test]
fn writes_of_two_handles_of_the_node_are_combined() {
    let m = memory(4 << 20);
    let (ep1, ep2, ep3) = (endpoint(&m), endpoint(&m), endpoint(&m));
    let node = Arc::new(SmartNode::new(&cfg()));
    let hs = [
        block(Smart::open_on(&ep1, cfg(), node.clone())).unwrap(),
        block(Smart::open_on(&ep2, cfg(), node.clone())).unwrap(),
        block(Smart::open_on(&ep3, cfg(), node.clone())).unwrap(),
    ];
    let mut futs: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for (t, s) in hs.iter().enumerate() {
        futs.push(Box::pin(async move {
            for i in 0..100u64 {
                s.upsert(&9u64.to_be_bytes(), &(i * 4 + t as u64).to_le_bytes())
                    .await
                    .unwrap();
            }
        }));
    }
    run_all(futs);
    let combined: u64 = hs.iter().map(|s| s.stats().combined_writes).sum();
    assert!(combined > 0, "no write was combined across handles");
    // The last value standing is one of the last writes.
    let mut out = [0u8; 8];
    block(hs[0].get(&9u64.to_be_bytes(), &mut out)).unwrap();
    assert!(u64::from_le_bytes(out) >= 99 * 4);
}

/// Polls `f` once and drops it: a thread that died (or a future dropped) mid-operation.
fn start_and_abandon<F: Future>(f: F) {
    let mut f = Box::pin(f);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(f.as_mut().poll(&mut cx), Poll::Pending));
}

#[test]
fn a_leader_that_dies_mid_read_hands_its_lead_over_at_once() {
    let m = memory(4 << 20);
    let (ep1, ep2) = (endpoint(&m), endpoint(&m));
    let mut c = cfg();
    // This test fabric has no clock: the poll cap bounds the wait instead.
    c.lease.max_attempts = 1000;
    let node = Arc::new(SmartNode::new(&c));
    let s1 = block(Smart::open_on(&ep1, c, node.clone())).unwrap();
    let s2 = block(Smart::open_on(&ep2, c, node.clone())).unwrap();
    block(s1.upsert(&5u64.to_be_bytes(), &7u64.to_le_bytes())).unwrap();
    let mut dead = [0u8; 8];
    start_and_abandon(s1.get(&5u64.to_be_bytes(), &mut dead));
    let mut out = [0u8; 8];
    assert_eq!(
        block(s2.get(&5u64.to_be_bytes(), &mut out)).unwrap(),
        Some(8)
    );
    assert_eq!(u64::from_le_bytes(out), 7);
    // The dropped leader's claim released its lead: the next reader led without waiting
    // for a lease (a leader that stalls instead is replaced: `local::tests`).
    assert_eq!(s2.stats().leader_takeovers, 0);
    // The entry keeps working for later readers: they lead their own reads.
    assert_eq!(
        block(s1.get(&5u64.to_be_bytes(), &mut out)).unwrap(),
        Some(8)
    );
}

#[test]
fn a_leader_that_dies_mid_write_is_replaced_by_a_waiter() {
    let m = memory(4 << 20);
    let (ep1, ep2) = (endpoint(&m), endpoint(&m));
    let mut c = cfg();
    c.lease.max_attempts = 1000;
    let node = Arc::new(SmartNode::new(&c));
    let s1 = block(Smart::open_on(&ep1, c, node.clone())).unwrap();
    let s2 = block(Smart::open_on(&ep2, c, node.clone())).unwrap();
    block(s1.upsert(&5u64.to_be_bytes(), &1u64.to_le_bytes())).unwrap();
    start_and_abandon(s1.upsert(&5u64.to_be_bytes(), &2u64.to_le_bytes()));
    block(s2.upsert(&5u64.to_be_bytes(), &3u64.to_le_bytes())).unwrap();
    assert_eq!(s2.stats().leader_takeovers, 1);
    let mut out = [0u8; 8];
    assert_eq!(
        block(s2.get(&5u64.to_be_bytes(), &mut out)).unwrap(),
        Some(8)
    );
    assert_eq!(u64::from_le_bytes(out), 3);
}

#[test]
fn a_node_state_serves_one_tree_and_its_value_size() {
    let m = memory(8 << 20);
    let ep = endpoint(&m);
    let node = Arc::new(SmartNode::new(&cfg()));
    block(Smart::open_on(&ep, cfg(), node.clone())).unwrap();
    let other_tree = SmartConfig {
        root_slot: 2,
        ..cfg()
    };
    assert!(matches!(
        block(Smart::open_on(&ep, other_tree, node.clone())),
        Err(SmartError::Config(_))
    ));
    let bigger = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 16);
    assert!(matches!(
        block(Smart::open_on(
            &ep,
            SmartConfig {
                root_slot: 3,
                ..bigger
            },
            node
        )),
        Err(SmartError::Config(_))
    ));
}

//! The verbs data path allocates nothing on the hot path: after warm-up, the fabric's verbs,
//! and lookups and updates of SMART, Sherman, Erda and CANRT, on the fake verbs device
//! (`remora::verbs::fake`: the same queue-pair code as over rdma-core), make no heap
//! allocation (counted by a global allocator wrapper, per thread).
#![cfg(feature = "verbs")]

use remora::core::GlobalAddr;
use remora::core::block_on::block_on;
use remora::core::fabric::{Endpoint, QueuePair};
use remora::core::server::{Echo, Handler};
use remora::verbs::{FakeEndpoint, FakeNode};
use std::rc::Rc;

#[path = "../poller/tests/common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{check_index, count};

fn node(handler: Box<dyn Handler>) -> Rc<FakeNode> {
    FakeNode::new(0, 64 << 20, 1 << 20, 256 << 10, handler).unwrap()
}

#[test]
fn verbs_allocate_nothing() {
    let ep = FakeEndpoint::connect(&[node(Box::new(Echo))]).unwrap();
    let qp = ep.qp(0).unwrap();
    let a = GlobalAddr::new(0, 1 << 20);
    // One buffer in the registered pool (in place), one on the stack (staged).
    let mut pooled = ep.pool().take(64).unwrap();
    let mut plain = [0u8; 64];
    let mut run = || {
        block_on(async {
            for _ in 0..1000 {
                qp.read(a, &mut pooled).await.unwrap();
                qp.read(a, &mut plain).await.unwrap();
                qp.write(a, &[7u8; 64]).await.unwrap();
                qp.write(a, &[7u8; 1024]).await.unwrap();
                qp.cas(a, 0, 1).await.unwrap();
                qp.faa(a, 1).await.unwrap();
            }
        })
    };
    let _ = count(&mut run);
    assert_eq!(count(&mut run), 0, "fabric verbs allocated");
    let s = ep.stats();
    assert!(s.in_place > 0 && s.bounced_read > 0, "{s}");
}

#[test]
fn smart_lookups_and_updates_allocate_nothing() {
    use remora::core::smart::{KeyMode, Smart, SmartConfig, Techniques};
    let ep = FakeEndpoint::connect(&[node(Box::new(Echo))]).unwrap();
    let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    let t = block_on(Smart::open(&ep, cfg)).unwrap();
    check_index(&t, "smart");
}

#[test]
fn sherman_lookups_and_updates_allocate_nothing() {
    use remora::core::sherman::{Sherman, ShermanConfig};
    let ep = FakeEndpoint::connect(&[node(Box::new(Echo))]).unwrap();
    let t = block_on(Sherman::create(&ep, ShermanConfig::sherman())).unwrap();
    check_index(&t, "sherman");
}

#[test]
fn erda_lookups_and_updates_allocate_nothing() {
    use remora::core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
    let n = node(Box::new(ErdaServer::new(ErdaConfig::small())));
    let ep = FakeEndpoint::connect(&[n]).unwrap();
    let t = block_on(Erda::open(&ep, ErdaClientConfig::default())).unwrap();
    check_index(&t, "erda");
}

#[test]
fn canrt_lookups_and_appends_allocate_nothing() {
    use remora::core::canrt::{Canrt, CanrtConfig, CanrtServer};
    let ep = FakeEndpoint::connect(&[node(Box::new(CanrtServer::new()))]).unwrap();
    let t = block_on(Canrt::open(&ep, CanrtConfig::new(0))).unwrap();
    check_index(&t, "canrt");
}

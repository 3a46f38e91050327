//! The verbs data path allocates nothing on the hot path: after warm-up, the fabric's verbs,
//! and lookups and updates of SMART, Sherman, Erda and CANRT, on the fake verbs device
//! (`remora::verbs::fake`: the same queue-pair code as over rdma-core), make no heap
//! allocation (counted by a global allocator wrapper, per thread).
#![cfg(feature = "verbs")]

use remora::core::GlobalAddr;
use remora::core::block_on::block_on;
use remora::core::fabric::{Endpoint, QueuePair};
use remora::core::index::KvIndex;
use remora::core::server::{Echo, Handler};
use remora::verbs::{FakeEndpoint, FakeNode};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::rc::Rc;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: p was allocated by System with layout l.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: p was allocated by System with layout l.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Allocations made by `f` on this thread.
fn count(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(|c| c.get());
    f();
    ALLOCS.with(|c| c.get()) - before
}

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

fn check_index<I: KvIndex>(t: &I, name: &str) {
    let keys: Vec<[u8; 8]> = (0..2000u64)
        .map(|i| (i * 7919 % 100_000).to_be_bytes())
        .collect();
    block_on(async {
        for k in &keys {
            t.upsert(k, &[1u8; 8]).await.unwrap();
        }
    });
    let mut out = [0u8; 8];
    let mut pass = |update: bool| {
        count(|| {
            block_on(async {
                for k in &keys {
                    if update {
                        assert!(t.update(k, &[2u8; 8]).await.unwrap());
                    } else {
                        assert!(t.get(k, &mut out).await.unwrap().is_some());
                    }
                }
            })
        })
    };
    let _ = (pass(false), pass(true)); // warm caches and pools
    assert_eq!(pass(false), 0, "{name}: lookups allocated");
    assert_eq!(pass(true), 0, "{name}: in-place updates allocated");
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

//! What the no-allocation tests share: a global allocator that counts the allocations of
//! each thread, and the lookup/update check they run on every index.
//!
//! Included by the tests that use it: `#[path = "common/counting_alloc.rs"] mod
//! counting_alloc;` (the root crate's `tests/verbs_fake_no_alloc.rs` names it from there).
//! It installs the test binary's `#[global_allocator]`, so a binary includes it once.
use remora_core::block_on::block_on;
use remora_core::index::KvIndex;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

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
pub fn count(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(|c| c.get());
    f();
    ALLOCS.with(|c| c.get()) - before
}

/// Upserts 2000 keys into `t`, then checks that, once warm, looking them all up and
/// updating them all in place allocate nothing.
pub fn check_index<I: KvIndex>(t: &I, name: &str) {
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

/// The counter sees an allocation (so a test that asserts none can fail).
#[test]
fn the_counter_sees_an_allocation() {
    let n = count(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(64))));
    assert_eq!(n, 1);
    assert_eq!(count(|| {}), 0);
}

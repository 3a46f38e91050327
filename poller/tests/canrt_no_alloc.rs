//! CANRT's hot path allocates nothing on the client: after warm-up, lookups and appends
//! (lock, append, flush) make no heap allocation (counted per thread by a global allocator
//! wrapper; the memory node's applier runs on its own thread).
use remora_core::block_on::block_on;
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
use remora_core::index::KvIndex;
use remora_poller::soft::{NodeConfig, SoftMemoryNode};
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

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn canrt_lookups_and_appends_do_not_allocate() {
    let node = SoftMemoryNode::create_with(
        NodeConfig {
            region_len: 32 << 20,
            chunk_size: 1 << 16,
            ..NodeConfig::default()
        },
        Box::new(CanrtServer::new()),
    )
    .unwrap();
    let _srv = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let t = block_on(Canrt::open(&ep, CanrtConfig::new(0))).unwrap();
    for k in 0..1000u64 {
        block_on(t.upsert(&(k * 31).to_be_bytes(), &k.to_le_bytes())).unwrap();
    }
    let mut out = [0u8; 8];
    // Warm: the last resize's tree is cached.
    block_on(t.get(&0u64.to_be_bytes(), &mut out)).unwrap();
    let before = allocs();
    for k in 0..1000u64 {
        assert_eq!(
            block_on(t.get(&(k * 31).to_be_bytes(), &mut out)).unwrap(),
            Some(8)
        );
        assert!(block_on(t.update(&(k * 31).to_be_bytes(), &(k + 1).to_le_bytes())).unwrap());
    }
    assert_eq!(allocs() - before, 0, "the hot path allocated");
}

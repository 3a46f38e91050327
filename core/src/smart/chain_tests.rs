//! Forward chains of out-of-place leaves stay short, whatever the radix cache says: a writer
//! whose cached slot is not the remote slot's value still swings the remote slot past the
//! leaf it replaced (on the in-memory fabric, deterministic).
extern crate std;
use super::tests::{block, endpoint, memory};
use super::*;

fn out_of_place() -> Techniques {
    Techniques {
        in_place_leaf: false,
        rear_lock: false,
        delegation: false,
        combining: false,
        ..Techniques::SMART
    }
}

#[test]
fn a_cache_ahead_of_the_remote_slot_does_not_grow_the_chain() {
    // Handle `a` and handle `c` (another compute node) update one key. `c`'s swing fails
    // once (its cached slot is behind), and a lookup of `c` then points its cached slot at
    // the live end of the chain, ahead of the remote slot. Before the fix every later write
    // of `c` failed its swing (it expected the cached value), the chain grew by one leaf per
    // write, and once longer than the forward limit a fresh lookup restarted forever
    // (`Contention`: "lookup kept meeting inconsistent nodes"), with reclamation or without.
    for reclaim in [false, true] {
        chain_stays_short(reclaim, false);
    }
}

#[test]
fn hot_updates_on_a_bulk_loaded_tree_keep_the_chain_short() {
    // The same on a bulk-loaded tree of 5,000 keys (the full-scale factor step "+ lock-free
    // internal, cache" on 400k bulk-loaded keys gave up with "write kept failing its CAS or
    // meeting inconsistent nodes": docs/repro-full, bug 1).
    chain_stays_short(true, true);
}

fn chain_stays_short(reclaim: bool, bulk: bool) {
    let m = memory(16 << 20);
    let (ep_a, ep_c, ep_d) = (endpoint(&m), endpoint(&m), endpoint(&m));
    let mut cfg = SmartConfig::new(out_of_place(), KeyMode::Fixed(8), 8);
    cfg.reclaim = reclaim;
    let key = 77u64.to_be_bytes();
    // Fresh reads of the path: the root; when bulk-loaded, a node for byte 6 and one for 7.
    let mut path = 1;
    if bulk {
        let ep = endpoint(&m);
        let l = block(Smart::open(&ep, cfg)).unwrap();
        let keys: std::vec::Vec<[u8; 8]> =
            (0..5000u64).map(|i| (i * 3 + 1).to_be_bytes()).collect();
        let mut with_77 = keys.clone();
        with_77.push(key);
        with_77.sort();
        block(l.bulk_load(&with_77, &mut |_, out| {
            out.fill(0);
            8
        }))
        .unwrap();
        path = 3;
    }
    let a = block(Smart::open(&ep_a, cfg)).unwrap();
    let c = block(Smart::open(&ep_c, cfg)).unwrap();
    let mut out = [0u8; 8];
    block(a.upsert(&key, &0u64.to_le_bytes())).unwrap();
    assert_eq!(block(c.get(&key, &mut out)).unwrap(), Some(8));
    block(a.upsert(&key, &1u64.to_le_bytes())).unwrap();
    block(c.upsert(&key, &2u64.to_le_bytes())).unwrap();
    assert_eq!(block(c.get(&key, &mut out)).unwrap(), Some(8));
    for v in 3..=200u64 {
        block(c.upsert(&key, &v.to_le_bytes())).unwrap();
    }
    // A fresh compute node: no cache, the chain from the remote slot is all it has.
    let d = block(Smart::open(&ep_d, cfg)).unwrap();
    let before = d.counters();
    assert_eq!(block(d.get(&key, &mut out)).unwrap(), Some(8));
    assert_eq!(u64::from_le_bytes(out), 200);
    let reads = (d.counters() - before).verb(crate::fabric::Verb::Read);
    // The path, then the leaf the remote slot names and at most one forward: the slot names
    // the live leaf or its predecessor.
    assert!(
        reads <= path + 2,
        "reclaim {reclaim}: a fresh lookup took {reads} READs"
    );
}

//! What one cached lookup reads from the memory nodes, SMART against Sherman: the per-op
//! cost behind the SMART paper's YCSB-C comparison (its "2.8x under read-only workloads").
//!
//! The authors' code (dmemsys/SMART src/Tree.cpp `Tree::search`; their Sherman fork,
//! River861/Sherman src/Tree.cpp `Tree::search` and `page_search`) does, for a lookup whose
//! path is in the compute node's cache:
//! - SMART: the cached node's slot gives the leaf; one READ of the leaf alone
//!   (`read_leaf(p.addr(), .., max(kv_len, sizeof(Leaf)))`: 34 B packed for 8-byte keys and
//!   values), no internal node read.
//! - Sherman: the cached level-1 page gives the leaf; one READ of the whole page
//!   (`read_sync(page_buffer, page_addr, max(kLeafPageSize, kInternalPageSize))`: 623 B at
//!   span 32), no partial read.
//!
//! remora's sim must do the same: one READ per lookup each, of one leaf (SMART) and of one
//! whole page (Sherman). With both caches warm, every loaded key is read back through a
//! reader handle and the fabric's counters give READs and bytes per lookup. The test fails if
//! either index reads a second object, reads part of a Sherman page, or reads more than a
//! SMART leaf.
use remora_core::Snapshot;
use remora_core::fabric::Verb;
use remora_core::index::KvIndex;
use remora_core::sherman::{PAPER_FILL_PERCENT, Sherman, ShermanConfig, ShermanNode};
use remora_core::smart::{KeyMode, Smart, SmartConfig, SmartNode, Techniques};
use remora_layouts::smart::leaf_bytes;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;
use std::sync::Arc;

const N: u64 = 5_000;
/// The SMART repro's Sherman page (bins/src/repro/smart.rs `SHERMAN_PAGE`: the authors'
/// 623 B span-32 leaf in whole 64-byte lines).
const SHERMAN_PAGE: usize = 640;

fn key(i: u64) -> [u8; 8] {
    // Hashed over the key space as YCSB's keys are.
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1).to_be_bytes()
}
fn value(i: u64) -> [u8; 8] {
    (i | 1 << 40).to_le_bytes()
}

fn sim_cfg() -> SimConfig {
    SimConfig {
        compute_nodes: 1,
        memory_nodes: 2,
        region_len: 64 << 20,
        seed: 7,
        ..SimConfig::default()
    }
}

fn sorted_keys() -> Vec<([u8; 8], u64)> {
    let mut k: Vec<([u8; 8], u64)> = (0..N).map(|i| (key(i), i)).collect();
    k.sort_unstable();
    k
}

/// Lookups found and the reader's counters over them.
#[derive(Debug, Clone, Copy)]
struct Cost {
    found: u64,
    reads: u64,
    verbs: u64,
    round_trips: u64,
    bytes_in: u64,
}

fn cost(found: u64, d: Snapshot) -> Cost {
    Cost {
        found,
        reads: d.verbs[Verb::ALL.iter().position(|v| *v == Verb::Read).unwrap()],
        verbs: d.verbs.iter().sum(),
        round_trips: d.round_trips,
        bytes_in: d.bytes_in,
    }
}

fn smart_lookups() -> Cost {
    let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    let keys = sorted_keys();
    let out = RefCell::new(None);
    let mut sim = Sim::new(sim_cfg()).unwrap();
    let c = sim.client(0).unwrap();
    sim.spawn_with(&c, 0, |ctx| {
        let (out, keys) = (&out, &keys);
        async move {
            let ep = ctx.ep();
            let loader = Smart::open(ep, cfg).await.unwrap();
            let ks: Vec<[u8; 8]> = keys.iter().map(|k| k.0).collect();
            loader
                .bulk_load(&ks, &mut |i, v: &mut [u8]| {
                    v[..8].copy_from_slice(&value(keys[i].1));
                    8
                })
                .await
                .unwrap();
            let node = Arc::new(SmartNode::new(&cfg));
            let warmer = Smart::open_on(ep, cfg, node.clone()).await.unwrap();
            warmer.warm_cache().await.unwrap();
            let reader = Smart::open_on(ep, cfg, node).await.unwrap();
            let before = ep.snapshot();
            let mut found = 0;
            let mut buf = [0u8; 8];
            for i in 0..N {
                if reader.get(&key(i), &mut buf).await.unwrap() == Some(8) && buf == value(i) {
                    found += 1;
                }
            }
            *out.borrow_mut() = Some(cost(found, ep.snapshot() - before));
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    out.into_inner().unwrap()
}

fn sherman_lookups() -> Cost {
    let cfg = ShermanConfig {
        page_size: SHERMAN_PAGE,
        cache_bytes: 64 << 20,
        ..ShermanConfig::sherman()
    };
    let keys = sorted_keys();
    let out = RefCell::new(None);
    let mut sim = Sim::new(sim_cfg()).unwrap();
    let c = sim.client(0).unwrap();
    sim.spawn_with(&c, 0, |ctx| {
        let (out, keys) = (&out, &keys);
        async move {
            let ep = ctx.ep();
            let loader = Sherman::create(ep, cfg).await.unwrap();
            loader
                .bulk_load(N, PAPER_FILL_PERCENT, &mut |i, v: &mut [u8]| {
                    let (k, n) = keys[i as usize];
                    v[..8].copy_from_slice(&value(n));
                    (k, 8)
                })
                .await
                .unwrap();
            let node = Arc::new(ShermanNode::new(&cfg));
            let warmer = Sherman::create_on(ep, cfg, node.clone()).await.unwrap();
            warmer.warm_cache().await.unwrap();
            let reader = Sherman::create_on(ep, cfg, node).await.unwrap();
            let before = ep.snapshot();
            let mut found = 0;
            let mut buf = [0u8; 8];
            for i in 0..N {
                if reader.get(&key(i), &mut buf).await.unwrap() == Some(8) && buf == value(i) {
                    found += 1;
                }
            }
            *out.borrow_mut() = Some(cost(found, ep.snapshot() - before));
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    out.into_inner().unwrap()
}

#[test]
fn a_cached_smart_lookup_reads_one_leaf_and_sherman_one_whole_page() {
    let smart = smart_lookups();
    let sherman = sherman_lookups();
    let leaf = leaf_bytes(8, 8) as u64;
    println!(
        "SMART: {smart:?} ({:.2} READs, {:.1} B per lookup; leaf {leaf} B)\nSherman: {sherman:?} \
         ({:.2} READs, {:.1} B per lookup; page {SHERMAN_PAGE} B)",
        smart.reads as f64 / N as f64,
        smart.bytes_in as f64 / N as f64,
        sherman.reads as f64 / N as f64,
        sherman.bytes_in as f64 / N as f64,
    );
    assert_eq!((smart.found, sherman.found), (N, N));
    // SMART: one READ of one leaf per lookup, nothing else (no delegation: one client).
    assert_eq!(smart.verbs, N, "SMART issued other verbs: {smart:?}");
    assert_eq!(smart.reads, N, "SMART read more than one object: {smart:?}");
    assert_eq!(smart.round_trips, N, "{smart:?}");
    assert_eq!(smart.bytes_in, N * leaf, "SMART read more than its leaf");
    // Sherman: one READ of one whole page per lookup, as the authors' page_search does.
    assert_eq!(sherman.verbs, N, "Sherman issued other verbs: {sherman:?}");
    assert_eq!(
        sherman.reads, N,
        "Sherman read more than one page: {sherman:?}"
    );
    assert_eq!(sherman.round_trips, N, "{sherman:?}");
    assert_eq!(
        sherman.bytes_in,
        N * SHERMAN_PAGE as u64,
        "Sherman read part of a page or more than one"
    );
    // The bytes ratio behind the paper's claim: a lookup of Sherman moves 10x SMART's bytes
    // in the same single READ, so the two bind on different memory-node resources.
    assert!(sherman.bytes_in >= 10 * smart.bytes_in);
}

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
use remora_core::sherman::ShermanConfig;
use remora_core::smart::{KeyMode, SmartConfig, Techniques};
use remora_layouts::smart::leaf_bytes;
use remora_poller::sim::{Sim, SimConfig};

#[path = "common/cached_reads.rs"]
mod cached_reads;
#[path = "common/sim_run.rs"]
mod sim_run;
use cached_reads::{found, sherman_reader, smart_reader};
use sim_run::run_on;

const N: u64 = 5_000;
/// The SMART repro's Sherman page (bins/src/repro/smart.rs `SHERMAN_PAGE`: the authors'
/// 623 B span-32 leaf in whole 64-byte lines).
const SHERMAN_PAGE: usize = 640;

fn sim_cfg() -> SimConfig {
    SimConfig {
        compute_nodes: 1,
        memory_nodes: 2,
        region_len: 64 << 20,
        seed: 7,
        ..SimConfig::default()
    }
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
    run_on(&mut Sim::new(sim_cfg()).unwrap(), 0, async |ctx| {
        let ep = ctx.ep();
        let (reader, _) = smart_reader(ep, cfg, N, true).await;
        let before = ep.snapshot();
        let found = found(&reader, N).await;
        cost(found, ep.snapshot() - before)
    })
}

fn sherman_lookups() -> Cost {
    let cfg = ShermanConfig {
        page_size: SHERMAN_PAGE,
        cache_bytes: 64 << 20,
        ..ShermanConfig::sherman()
    };
    run_on(&mut Sim::new(sim_cfg()).unwrap(), 0, async |ctx| {
        let ep = ctx.ep();
        let (reader, _) = sherman_reader(ep, cfg, N, true).await;
        let before = ep.snapshot();
        let found = found(&reader, N).await;
        cost(found, ep.snapshot() - before)
    })
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

//! Warming a compute node's index cache after a bulk load (`smart/warm.rs`,
//! `sherman/warm.rs`) on the simulated cluster: a tree is bulk-loaded, one handle warms its
//! node's cache, and every loaded key is then read back through another handle of the same
//! node. With the whole tree's internal nodes in the cache a lookup reads no internal node
//! (SMART) and hits the cache every time (Sherman); a handle of a node left cold reads
//! internal nodes (misses), so the test can tell the two apart. A cache too small for the
//! tree stops the warm-up at its capacity (it never evicts what it kept) and lookups stay
//! correct.
use remora_core::sherman::{ShermanConfig, WarmStats};
use remora_core::smart::{KeyMode, SmartConfig, Techniques};
use remora_poller::sim::{Sim, SimConfig};

#[path = "common/cached_reads.rs"]
mod cached_reads;
#[path = "common/sim_run.rs"]
mod sim_run;
use cached_reads::{found, sherman_reader, smart_reader};
use sim_run::run_on;

const N: u64 = 20_000;

fn sim_cfg() -> SimConfig {
    SimConfig {
        compute_nodes: 2,
        memory_nodes: 2,
        region_len: 64 << 20,
        seed: 5,
        ..SimConfig::default()
    }
}

/// What a warm-up kept and what reading every loaded key back cost the reading handle.
#[derive(Debug)]
struct Seen {
    warm: Option<WarmStats>,
    /// SMART: internal nodes read; Sherman: index-cache misses.
    remote: u64,
    found: u64,
}

fn smart_run(cache_mib: f64, warm: bool) -> Seen {
    let cfg = SmartConfig {
        cache_mib,
        ..SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8)
    };
    run_on(&mut Sim::new(sim_cfg()).unwrap(), 0, async |ctx| {
        let ep = ctx.ep();
        let (reader, w) = smart_reader(ep, cfg, N, warm).await;
        let before = reader.stats().node_reads;
        let found = found(&reader, N).await;
        Seen {
            warm: w,
            remote: reader.stats().node_reads - before,
            found,
        }
    })
}

fn sherman_run(cache_bytes: usize, warm: bool) -> Seen {
    let cfg = ShermanConfig {
        page_size: 256,
        cache_bytes,
        ..ShermanConfig::sherman()
    };
    run_on(&mut Sim::new(sim_cfg()).unwrap(), 0, async |ctx| {
        let ep = ctx.ep();
        let (reader, w) = sherman_reader(ep, cfg, N, warm).await;
        let found = found(&reader, N).await;
        Seen {
            warm: w,
            remote: reader.cache_stats().1,
            found,
        }
    })
}

#[test]
fn a_warmed_smart_cache_serves_every_lookup_from_its_internal_nodes() {
    let warm = smart_run(64.0, true);
    let cold = smart_run(64.0, false);
    println!("warm {warm:?}\ncold {cold:?}");
    assert_eq!((warm.found, cold.found), (N, N));
    let w = warm.warm.unwrap();
    assert!(!w.full && w.cached == w.read && w.levels >= 2, "{w:?}");
    assert_eq!(warm.remote, 0, "a lookup read an internal node");
    // Cold, the reader fills the cache itself: it reads the internal nodes the warm-up read.
    assert!(
        cold.remote >= w.read / 2,
        "a cold cache should read internal nodes"
    );
    // A cache smaller than the tree: the warm-up stops at its capacity, lookups stay right.
    let small = smart_run(0.05, true);
    println!("small {small:?}");
    let s = small.warm.unwrap();
    assert!(s.full && s.cached < w.cached && s.cached > 0, "{s:?}");
    assert_eq!(small.found, N);
    assert!(small.remote > 0);
}

#[test]
fn a_warmed_sherman_cache_hits_on_every_lookup() {
    let warm = sherman_run(64 << 20, true);
    let cold = sherman_run(64 << 20, false);
    println!("warm {warm:?}\ncold {cold:?}");
    assert_eq!((warm.found, cold.found), (N, N));
    let w = warm.warm.unwrap();
    assert!(!w.full && w.cached > 1 && w.levels >= 2, "{w:?}");
    assert_eq!(warm.remote, 0, "a lookup missed the index cache");
    assert!(cold.remote > 0, "a cold cache should miss");
    let small = sherman_run(8 << 10, true);
    println!("small {small:?}");
    let s = small.warm.unwrap();
    assert!(s.full && s.cached < w.cached && s.cached > 0, "{s:?}");
    assert_eq!(small.found, N);
    assert!(small.remote > 0);
}

//! Linearizability on the soft fabric (`remora_core::lincheck`): real threads, real tearing
//! between 8-byte words. 4 threads × 4 coroutines run `lin_client` workloads on one index;
//! each thread records its own history with a shared clock (`Instant` from one start), the
//! histories are merged by time, and the whole is checked for a linearization.
//!
//! Erda failed this check before its deletes became server-written (a get returned a value
//! after a delete of that key returned false); it is here as the regression test.
use remora_core::block_on::block_on;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, History, Recorder, Report, check};
use remora_poller::executor::run_coroutines;
use remora_poller::soft::{NodeConfig, SoftMemoryNode};
use std::sync::Arc;
use std::time::Instant;

/// One test at a time: each spins 4 client threads and a server thread, and several at
/// once on a small machine slow each other down many times over.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const THREADS: u32 = 4;
const COROS: u32 = 4;
const OPS: u64 = 300;

/// Runs the workload on `$node` (its server thread started here); `$open` opens the index on
/// `$ep` (run once alone first, to create it).
macro_rules! lin_soft {
    ($node:expr, $seed:expr, scans: $scans:expr, |$ep:ident| $open:expr) => {
        lin_soft!($node, $seed, threads: THREADS, scans: $scans, |$ep| $open)
    };
    ($node:expr, $seed:expr, threads: $threads:expr, scans: $scans:expr, |$ep:ident| $open:expr) => {{
        let threads: u32 = $threads;
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let node: Arc<SoftMemoryNode> = $node;
        let seed: u64 = $seed;
        let _srv = node.spawn_server();
        {
            let ep0 = node.endpoint().unwrap();
            let $ep = &ep0;
            block_on($open).unwrap();
        }
        let start = Instant::now();
        let parts: Vec<History> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|th| {
                    let node = &node;
                    s.spawn(move || {
                        let ep1 = node.endpoint().unwrap();
                        let $ep = &ep1;
                        let index = block_on($open).unwrap();
                        let per = (COROS as u64 * OPS) as usize;
                        let rec = Recorder::new(per, per * 17);
                        let clock = || start.elapsed().as_nanos() as u64;
                        let coros: Vec<_> = (0..COROS)
                            .map(|c| {
                                let (index, rec, clock) = (&index, &rec, &clock);
                                let spec = LinSpec {
                                    cold: 32,
                                    ..LinSpec::new(1 + th * COROS + c, OPS, seed, $scans)
                                };
                                async move {
                                    lin_client(index, &spec, rec, clock)
                                        .await
                                        .map_err(|e| format!("client {}: {e}", spec.client))
                                }
                            })
                            .collect();
                        for r in run_coroutines(coros) {
                            r.unwrap();
                        }
                        rec.finish().expect("recorder sized for the workload")
                    })
                })
                .collect();
            handles.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let h = History::merge(parts);
        assert_eq!(h.events.len() as u64, (threads * COROS) as u64 * OPS);
        check(&h, &CheckConfig::new(seed))
    }};
}

fn plain_node() -> Arc<SoftMemoryNode> {
    SoftMemoryNode::create(NodeConfig {
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap()
}

fn assert_ok(index: &str, r: &Report) {
    println!("{index}: {r}");
    assert!(r.is_ok(), "{index}: {r}");
    assert!(r.keys > 100, "{index}: {r}");
}

#[test]
fn smart_is_linearizable_on_soft_threads() {
    use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
    let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    for seed in 1..=2 {
        let r = lin_soft!(plain_node(), seed, scans: true, |ep| Smart::open(ep, cfg));
        assert_ok("smart", &r);
    }
}

#[test]
fn sherman_is_linearizable_on_soft_threads() {
    use remora_core::sherman::{Sherman, ShermanConfig};
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::sherman()
    };
    for seed in 1..=2 {
        let r = lin_soft!(plain_node(), seed, scans: true, |ep| Sherman::create(ep, cfg));
        assert_ok("sherman", &r);
    }
}

#[test]
fn fg_plus_is_linearizable_on_soft_threads() {
    use remora_core::sherman::{Sherman, ShermanConfig};
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::fg_plus()
    };
    for seed in 1..=2 {
        let r = lin_soft!(plain_node(), seed, scans: true, |ep| Sherman::create(ep, cfg));
        assert_ok("fg-plus", &r);
    }
}

#[test]
fn canrt_is_linearizable_on_soft_threads() {
    use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
    let mut cfg = CanrtConfig {
        slots: 8,
        ..CanrtConfig::new(0)
    };
    if let Ok(ms) = std::env::var("CANRT_LEASE_MS") {
        cfg.lease.lease_ns = ms.parse::<u64>().unwrap() * 1_000_000;
    }
    let seed = 1;
    {
        let node = SoftMemoryNode::create_with(
            NodeConfig {
                region_len: 32 << 20,
                chunk_size: 1 << 16,
                ..NodeConfig::default()
            },
            Box::new(CanrtServer::new()),
        )
        .unwrap();
        // Two threads: CANRT's clients wait on locks held by descheduled threads, and with
        // four threads and the server on a 2-core machine the test takes minutes.
        let r = lin_soft!(node, seed, threads: 2, scans: true, |ep| Canrt::open(ep, cfg));
        assert_ok("canrt", &r);
    }
}

#[test]
fn erda_is_linearizable_on_soft_threads() {
    use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
    for seed in 1..=2 {
        let node = SoftMemoryNode::create_with(
            NodeConfig {
                region_len: 64 << 20,
                chunk_size: 256 << 10,
                ..NodeConfig::default()
            },
            Box::new(ErdaServer::new(ErdaConfig::small())),
        )
        .unwrap();
        let r = lin_soft!(node, seed, threads: 2, scans: false, |ep| Erda::open(ep, ErdaClientConfig::default()));
        assert_ok("erda", &r);
    }
}

//! A persistent memory node crashing among writers: acknowledged means durable.
use super::crash_writes::{Writes, get_all, lost, write_until_error, writer_keys};
use super::*;

/// Virtual time by which a persistent node has created an `ErdaConfig::small()` store.
const STORE_SETUP_NS: u64 = 5_000_000;

/// 8 writers upsert their own keys (20 each, over and over) on a persistent memory node that
/// crashes at `crash_ns` and restarts (a fresh server recovers the store on the node's
/// image before anyone connects); then every key is read back. Returns the keys whose
/// recovered value is neither the last acknowledged one nor the one in flight, and how many
/// writes had been acknowledged.
fn node_crash(seed: u64, crash_ns: u64, unflushed: bool) -> (Vec<String>, usize) {
    let cfg = SimConfig {
        compute_nodes: 2,
        memory_nodes: 1,
        region_len: 32 << 20,
        persistent: true,
        seed,
        segment_order: SegmentOrder::Shuffled,
        faults: Faults::none().crash_node_at(0, crash_ns),
        ..SimConfig::default()
    };
    let client = ErdaClientConfig {
        unflushed_writes: unflushed,
        ..ErdaClientConfig::default()
    };
    let logs = RefCell::new(vec![Writes::default(); 8]);
    let mut sim = Sim::new(cfg.clone()).unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    for c in 0..8u64 {
        let ctx = sim.client((c % 2) as usize).unwrap();
        let logs = &logs;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let Ok(e) = Erda::open(ctx.ep(), client).await else {
                return;
            };
            let _ = write_until_error(&e, c, 20, logs).await;
        });
    }
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "seed {seed}: writers hung after the crash");
    let images = sim.into_images();
    let found = RefCell::new(std::collections::BTreeMap::new());
    let keys = writer_keys(20);
    // The restart: a fresh server on the persistent image (recovery runs on its first
    // message, before it answers anyone), and one reader.
    let mut sim = Sim::with_images(
        SimConfig {
            faults: Faults::none(),
            ..cfg.clone()
        },
        images,
    )
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    let ctx = sim.client(0).unwrap();
    let (found_ref, keys_ref) = (&found, &keys);
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
            .await
            .unwrap();
        *found_ref.borrow_mut() = get_all(&e, keys_ref).await;
        let mut out = [0u8; 8];
        // The recovered store takes writes.
        e.upsert(b"after", &[1u8; 8]).await.unwrap();
        assert_eq!(e.get(b"after", &mut out).await.unwrap(), Some(8));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    lost(&logs.borrow(), &found.into_inner())
}

/// Issue 11: acknowledged means durable. A persistent memory node crashes among 8 writers,
/// over seeds and crash times; after recovery every key holds its last acknowledged value
/// (or the newer one in flight). The paper's write (no flushing READ) loses some.
#[test]
fn a_memory_node_crash_loses_no_acknowledged_write() {
    // ERDA_NODE_CRASH_SEEDS=100 for a longer sweep.
    let seeds: u64 = std::env::var("ERDA_NODE_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let (mut mutant_lost, mut keys) = (0, 0);
    for seed in 1..=seeds {
        // Crashes from 0.37 ms to 1.2 ms into the writing, at odd instants. Creating the
        // store comes first: on a persistent node its server persists the table line by line
        // (`nvm_write_ns` each), which takes a few ms of virtual time.
        let crash_ns = STORE_SETUP_NS + 200_000 + (seed % 6 + 1) * 170_000 + seed * 1_337 % 9_000;
        let (lost, acked) = node_crash(seed, crash_ns, false);
        assert!(
            acked > 50,
            "seed {seed}: only {acked} writes before the crash"
        );
        assert!(lost.is_empty(), "seed {seed}: {lost:?}");
        keys += acked;
        mutant_lost += node_crash(seed, crash_ns, true).0.len();
    }
    assert!(mutant_lost > 0, "unflushed writes survived every crash");
    println!(
        "erda node crashes: {seeds} crashes, {keys} acknowledged keys checked after recovery, \
         none lost; with unflushed writes {mutant_lost} lost"
    );
}

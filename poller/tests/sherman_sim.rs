//! Sherman on the simulated cluster: 4 compute nodes × 4 clients on 2 memory nodes, every
//! client running an oracle-checked history, tearing and jitter on, for several seeds.
mod common;
use common::sim_histories;
use remora_core::fabric::SegmentOrder;
use remora_core::index::KvIndex;
use remora_core::sherman::{PageCheck, Sherman, ShermanConfig};
use remora_poller::sim::{Model, Sim, SimConfig};
use std::cell::Cell;

#[test]
fn sherman_histories_on_the_sim_cluster() {
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::sherman()
    };
    for seed in 1..=4 {
        sim_histories!(seed, |ep| Sherman::create(ep, cfg));
    }
}

#[test]
fn fg_plus_histories_on_the_sim_cluster() {
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::fg_plus()
    };
    for seed in 1..=2 {
        sim_histories!(seed, |ep| Sherman::create(ep, cfg));
    }
}

/// A writer inserts keys in descending order, so every split is of the leftmost leaf and
/// compacts its entries into reversed slots; readers look up the keys inserted last (already
/// acknowledged, so present), which live in that leaf. Returns (lookups that went wrong — a
/// present key missing, a wrong value, or an error —, lookups).
fn lookups_during_splits(
    base: ShermanConfig,
    order: SegmentOrder,
    check: PageCheck,
    seed: u64,
) -> (u64, u64) {
    const INSERTS: u64 = 1200;
    let cfg = ShermanConfig {
        page_check: check,
        ..base
    };
    // declared before the sim, which borrows them
    let lowest = Cell::new(u64::MAX);
    let (bad, lookups) = (Cell::new(0u64), Cell::new(0u64));
    // Slow responder PCIe reads (a 64-byte segment per microsecond) stretch each READ of a
    // page over the split WRITEs racing it, so a test run sees many races; virtual time
    // costs nothing.
    let mut model = Model::default();
    model.set("pcie_gbps", "0.5").unwrap();
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        seed,
        segment_order: order,
        model,
        ..SimConfig::default()
    })
    .unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        Sherman::create(ctx.ep(), cfg).await.unwrap();
    });
    assert_eq!(sim.run().unfinished, 0);
    let w = sim.client(0).unwrap();
    sim.spawn_with(&w, 0, |ctx| {
        let lowest = &lowest;
        async move {
            let t = Sherman::open(ctx.ep(), cfg).await.unwrap();
            for key in (1..=INSERTS).rev() {
                t.upsert(&key.to_be_bytes(), &key.to_le_bytes())
                    .await
                    .unwrap();
                lowest.set(key);
            }
            lowest.set(0);
        }
    });
    for node in 1..4 {
        for c in 0..4u64 {
            let ctx = sim.client(node).unwrap();
            let (lowest, bad, lookups) = (&lowest, &bad, &lookups);
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let t = Sherman::open(ctx.ep(), cfg).await.unwrap();
                let mut r = seed ^ (node as u64) << 8 ^ c;
                let mut out = [0u8; 8];
                loop {
                    let low = lowest.get();
                    if low == 0 {
                        break;
                    }
                    if low > INSERTS {
                        ctx.sleep(1000).await;
                        continue;
                    }
                    r = r
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let key = (low + (r >> 33) % 20).min(INSERTS);
                    let got = t.get(&key.to_be_bytes(), &mut out).await;
                    if got != Ok(Some(8)) || u64::from_le_bytes(out) != key {
                        bad.set(bad.get() + 1);
                    }
                    lookups.set(lookups.get() + 1);
                }
            });
        }
    }
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "seed {seed}: clients never finished");
    (bad.get(), lookups.get())
}

/// The page check holds in any segment order; the authors' front == rear check (kept as a
/// test-only mutant) holds with ascending segments and is caught with shuffled ones.
#[test]
fn front_rear_versions_need_ascending_segments_checksums_do_not() {
    let sherman = ShermanConfig::sherman();
    for (seed, base) in [(1, sherman), (2, sherman), (3, ShermanConfig::fg_plus())] {
        let (bad, n) =
            lookups_during_splits(base, SegmentOrder::Shuffled, PageCheck::Checksums, seed);
        assert_eq!(bad, 0, "seed {seed}: {bad} of {n} lookups went wrong");
    }
    for seed in 1..=2 {
        let (bad, n) = lookups_during_splits(
            sherman,
            SegmentOrder::Ascending,
            PageCheck::FrontRearOnly,
            seed,
        );
        assert_eq!(
            bad, 0,
            "seed {seed}: the mutant failed even with ascending segments ({bad} of {n})"
        );
    }
    let caught = (1..=2).map(|seed| {
        let (bad, n) = lookups_during_splits(
            sherman,
            SegmentOrder::Shuffled,
            PageCheck::FrontRearOnly,
            seed,
        );
        eprintln!("seed {seed}: mutant on shuffled segments: {bad} of {n} lookups wrong");
        bad
    });
    assert!(
        caught.sum::<u64>() > 0,
        "the mutant went unnoticed on shuffled segments"
    );
}

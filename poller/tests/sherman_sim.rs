//! Sherman on the simulated cluster: 4 compute nodes × 4 clients on 2 memory nodes, every
//! client running an oracle-checked history, tearing and jitter on, for several seeds.
mod common;
use common::sim_histories;
use remora_core::fabric::{QueuePair, SegmentOrder};
use remora_core::index::KvIndex;
use remora_core::sherman::{PageCheck, Sherman, ShermanConfig};
use remora_layouts::GlobalAddr;
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

/// Virtual ns for 4 compute nodes x 2 client threads x 4 coroutines (one handle per thread,
/// as `remora bench` runs them) to update 8 hot keys of one leaf 40 times per coroutine.
fn hot_leaf_updates_ns(cfg: ShermanConfig) -> u64 {
    hot_leaf_run_ns(cfg, 2, 4, Model::default())
}

/// Virtual ns for 4 compute nodes x `threads` client threads x `coroutines` coroutines to
/// update 8 hot keys of one leaf 40 times per coroutine, on `model`.
fn hot_leaf_run_ns(cfg: ShermanConfig, threads: u64, coroutines: u64, model: Model) -> u64 {
    use remora_poller::executor::join_all;
    const NODES: usize = 4;
    let errs = std::cell::RefCell::new(Vec::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: NODES,
        memory_nodes: 1,
        seed: 7,
        model,
        ..SimConfig::default()
    })
    .unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        let t = Sherman::create(ctx.ep(), cfg).await.unwrap();
        for k in 0..8u64 {
            t.upsert(&k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    let start = sim.now_ns();
    for node in 0..NODES {
        for thread in 0..threads {
            let ctx = sim.client(node).unwrap();
            let errs = &errs;
            sim.spawn_with(&ctx, thread, move |ctx| async move {
                let t = Sherman::open(ctx.ep(), cfg).await.unwrap();
                let co = (0..coroutines).map(|co| {
                    let t = &t;
                    async move {
                        for i in 0..40u64 {
                            let k = (i + co + thread) % 8;
                            if let Err(e) = t.update(&k.to_be_bytes(), &i.to_le_bytes()).await {
                                errs.borrow_mut().push(format!("{e}"));
                                return;
                            }
                        }
                    }
                });
                join_all(co.collect()).await;
            });
        }
    }
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    assert!(errs.borrow().is_empty(), "{:?}", errs.borrow());
    r.now_ns - start
}

/// The paper's FG+ spins on a host-memory lock word (the authors' `try_lock_addr` retries
/// the CAS at once): on a hot leaf every failed CAS holds the word in the NIC's atomic unit
/// for `host_atomic_ns` and, by per-queue-pair order, holds up the verbs its thread's other
/// coroutines post behind it, the lock holder's write-back and unlock among them. Sherman's
/// on-chip, hierarchical lock avoids both. Backing off instead hides the storm.
#[test]
fn a_spinning_fg_plus_collapses_on_a_hot_leaf_and_sherman_does_not() {
    let sherman = hot_leaf_updates_ns(ShermanConfig::sherman());
    let fg = hot_leaf_updates_ns(ShermanConfig::fg_plus());
    let fg_backoff = hot_leaf_updates_ns(ShermanConfig {
        spin_locks: false,
        ..ShermanConfig::fg_plus()
    });
    eprintln!("hot leaf: sherman {sherman} ns, fg+ {fg} ns, fg+ backing off {fg_backoff} ns");
    assert!(fg > 5 * sherman, "fg+ {fg} ns vs sherman {sherman} ns");
    assert!(
        fg > 2 * fg_backoff,
        "spinning {fg} ns vs backing off {fg_backoff} ns"
    );
}

/// Synchronous threads (the authors' benchmark: no coroutines) spinning on FG+'s host-memory
/// lock word: only when a waiting CAS holds the memory node's request engine
/// (`host_atomic_stalls`, the Sherman profile's) does the retry storm slow the holder's own
/// verbs and FG+ collapse; Sherman's on-chip words are untouched by it.
#[test]
fn host_atomic_stalls_collapse_synchronous_fg_plus_only() {
    let stalls = Model {
        host_atomic_stalls: 1.0,
        ..Model::default()
    };
    let fg = hot_leaf_run_ns(ShermanConfig::fg_plus(), 8, 1, Model::default());
    let fg_stalls = hot_leaf_run_ns(ShermanConfig::fg_plus(), 8, 1, stalls.clone());
    let sh = hot_leaf_run_ns(ShermanConfig::sherman(), 8, 1, Model::default());
    let sh_stalls = hot_leaf_run_ns(ShermanConfig::sherman(), 8, 1, stalls);
    eprintln!("sync hot leaf: fg+ {fg} -> {fg_stalls} ns, sherman {sh} -> {sh_stalls} ns");
    assert!(
        fg_stalls > 3 * fg,
        "fg+ {fg} ns, with stalls {fg_stalls} ns"
    );
    assert!(
        sh_stalls < sh + sh / 5,
        "sherman {sh} ns, with stalls {sh_stalls} ns"
    );
}

/// The latency (ns) of a READ posted while `waiting` CASes wait for one host-memory word
/// that another CAS holds (each from its own compute node), with `host_atomic_stalls` =
/// `units` and a 10 µs slot occupancy, so the waits outlast the READ's round trip.
fn read_behind_waiting_cas_ns(units: f64, waiting: usize) -> u64 {
    let model = Model {
        host_atomic_stalls: units,
        host_atomic_ns: 10_000.0,
        jitter_ns: 0.0,
        ..Model::default()
    };
    let latency = Cell::new(0);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: waiting + 2,
        memory_nodes: 1,
        model,
        ..SimConfig::default()
    })
    .unwrap();
    let hot = GlobalAddr::new(0, (1 << 20) + 64);
    let other = GlobalAddr::new(0, (1 << 20) + 8192);
    for c in 0..=waiting {
        let ctx = sim.client(c).unwrap();
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            // The holder's CAS (c = 0) gets the slot on arrival, the others queue behind it.
            ctx.sleep(100 * c as u64).await;
            ctx.qp(0).unwrap().cas(hot, 0, 1).await.unwrap();
        });
    }
    let ctx = sim.client(waiting + 1).unwrap();
    let l = &latency;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        ctx.sleep(1_000).await;
        let t0 = ctx.now_ns();
        let mut b = [0u8; 8];
        ctx.qp(0).unwrap().read(other, &mut b).await.unwrap();
        l.set(ctx.now_ns() - t0);
    });
    assert_eq!(sim.run().unfinished, 0);
    latency.get()
}

/// `host_atomic_stalls` = N models N NIC processing units: a host-memory CAS waiting for its
/// word keeps one, so N - 1 waiting CASes leave a READ to another word its idle latency and
/// N stall it until the first of them gets the word (10 µs here). The former model (any
/// N > 0 held the whole engine) fails the N - 1 case for N > 1.
#[test]
fn waiting_atomics_stall_the_nic_only_when_they_keep_every_unit() {
    let idle = read_behind_waiting_cas_ns(0.0, 4);
    for n in [1usize, 2, 4, 8] {
        let free = read_behind_waiting_cas_ns(n as f64, n - 1);
        let stalled = read_behind_waiting_cas_ns(n as f64, n);
        eprintln!(
            "{n} unit(s): READ {free} ns behind {} waiting CAS, {stalled} ns behind {n} (idle {idle} ns)",
            n - 1
        );
        assert_eq!(free, idle, "{n} unit(s), {} waiting", n - 1);
        assert!(
            stalled > idle + 5_000,
            "{n} unit(s): {stalled} ns, idle {idle} ns"
        );
    }
}

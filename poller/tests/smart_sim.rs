//! SMART on the simulated cluster: 4 compute nodes × 4 clients on 2 memory nodes, every
//! client running an oracle-checked history (`remora_core::kvcheck`), tearing and jitter on,
//! for several seeds and for the ART baseline too.
use remora_core::kvcheck::{History, client_history};
use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

fn run(seed: u64, t: Techniques) {
    let failures = RefCell::new(Vec::new());
    let cfg = SmartConfig::new(t, KeyMode::Fixed(8), 8);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 2,
        seed,
        ..SimConfig::default()
    })
    .unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        Smart::open(ctx.ep(), cfg).await.unwrap();
    });
    assert_eq!(
        sim.run().unfinished,
        0,
        "seed {seed}: creating the tree did not finish"
    );
    for node in 0..4 {
        for c in 0..4u64 {
            let ctx = sim.client(node).unwrap();
            let failures = &failures;
            let client = 1 + node as u64 * 4 + c;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let t = Smart::open(ctx.ep(), cfg).await.unwrap();
                let h = History {
                    client,
                    ops: 400,
                    range: 200,
                    hot: 4,
                    seed,
                    value_size: 8,
                };
                if let Err(e) = client_history(&t, &h).await {
                    failures.borrow_mut().push(e);
                }
            });
        }
    }
    let r = sim.run();
    let f = failures.borrow();
    assert!(
        f.is_empty(),
        "seed {seed}: {} clients disagreed, first: {}",
        f.len(),
        f[0]
    );
    assert_eq!(
        r.unfinished, 0,
        "seed {seed}: {} clients never finished",
        r.unfinished
    );
}

/// Seed 2 livelocked before structural changes refused to swing a frozen parent slot
/// (a grow of a child landing in a parent already copied by its own grow).
#[test]
fn smart_histories_on_the_sim_cluster() {
    for seed in 1..=6 {
        run(seed, Techniques::SMART);
    }
}

#[test]
fn art_baseline_histories_on_the_sim_cluster() {
    for seed in 1..=3 {
        run(seed, Techniques::BASELINE);
    }
}

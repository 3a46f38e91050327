//! Sherman on the simulated cluster: 4 compute nodes × 4 clients on 2 memory nodes, every
//! client running an oracle-checked history, tearing and jitter on, for several seeds.
use remora_core::kvcheck::{History, client_history};
use remora_core::sherman::{Sherman, ShermanConfig};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

fn run(seed: u64, cfg: ShermanConfig) {
    let failures = RefCell::new(Vec::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 2,
        seed,
        ..SimConfig::default()
    })
    .unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        Sherman::create(ctx.ep(), cfg).await.unwrap();
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
                let t = Sherman::open(ctx.ep(), cfg).await.unwrap();
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
    assert!(
        failures.borrow().is_empty(),
        "seed {seed}: {:?}",
        failures.borrow()
    );
    assert_eq!(
        r.unfinished, 0,
        "seed {seed}: {} clients never finished",
        r.unfinished
    );
}

#[test]
fn sherman_histories_on_the_sim_cluster() {
    for seed in 1..=4 {
        run(
            seed,
            ShermanConfig {
                page_size: 256,
                ..ShermanConfig::sherman()
            },
        );
    }
}

#[test]
fn fg_plus_histories_on_the_sim_cluster() {
    for seed in 1..=2 {
        run(
            seed,
            ShermanConfig {
                page_size: 256,
                ..ShermanConfig::fg_plus()
            },
        );
    }
}

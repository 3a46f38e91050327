//! Erda on the simulated cluster: 4 compute nodes × 4 clients on one memory node running the
//! Erda server, every client running an oracle-checked history (no scans: a hash store),
//! tearing and jitter on, for several seeds.
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::kvcheck::{History, client_history};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

fn histories(seed: u64, value_size: usize) {
    let failures = RefCell::new(Vec::<String>::new());
    let totals = RefCell::new((0u64, 0u64, 0u64));
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    let cfg = ErdaClientConfig {
        value_size,
        ..ErdaClientConfig::default()
    };
    for node in 0..4 {
        for c in 0..4u64 {
            let ctx = sim.client(node).unwrap();
            let (failures, totals) = (&failures, &totals);
            let client = 1 + node as u64 * 4 + c;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let e = match Erda::open(ctx.ep(), cfg).await {
                    Ok(e) => e,
                    Err(err) => {
                        failures.borrow_mut().push(format!("open: {err}"));
                        return;
                    }
                };
                let h = History {
                    client,
                    ops: 400,
                    range: 100,
                    hot: 3,
                    seed,
                    value_size,
                    scans: false,
                };
                match client_history(&e, &h).await {
                    Ok(t) => {
                        let mut s = totals.borrow_mut();
                        s.0 += t.hot_reads;
                        s.1 += e.stats().fallbacks;
                        s.2 += e.stats().rereads;
                    }
                    Err(msg) => failures.borrow_mut().push(msg),
                }
            });
        }
    }
    let r = sim.run();
    let (hot_reads, fallbacks, rereads) = *totals.borrow();
    println!(
        "seed {seed}: {} ns virtual, {hot_reads} hot reads, {fallbacks} fallbacks to the \
         previous object, {rereads} re-reads",
        r.now_ns
    );
    assert!(hot_reads > 0, "no hot key was read");
    let f = failures.borrow();
    assert!(
        f.is_empty(),
        "seed {seed}: {} clients disagreed, first: {}",
        f.len(),
        f[0]
    );
    assert_eq!(r.unfinished, 0, "seed {seed}: clients never finished");
}

#[test]
fn erda_histories_on_the_sim_cluster() {
    for seed in 1..=4 {
        histories(seed, 8);
    }
    histories(5, 64);
}

#[test]
fn erda_sim_runs_are_deterministic() {
    let run = |seed| {
        let mut sim = Sim::new(SimConfig {
            compute_nodes: 2,
            seed,
            ..SimConfig::default()
        })
        .unwrap();
        sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
            .unwrap();
        for node in 0..2 {
            let ctx = sim.client(node).unwrap();
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
                    .await
                    .unwrap();
                let h = History {
                    client: 1 + node as u64,
                    ops: 200,
                    range: 50,
                    hot: 3,
                    seed,
                    value_size: 8,
                    scans: false,
                };
                client_history(&e, &h).await.unwrap();
            });
        }
        let r = sim.run();
        assert_eq!(r.unfinished, 0);
        (r.now_ns, sim.stats())
    };
    assert_eq!(format!("{:?}", run(3)), format!("{:?}", run(3)));
}

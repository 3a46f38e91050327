//! Shared by the index tests on the sim cluster.

/// Runs oracle-checked histories (`remora_core::kvcheck`) of 4 compute nodes × 4 clients on
/// 2 memory nodes of a sim cluster seeded `$seed`. `$open` is an async expression opening
/// (or creating) the index on endpoint `$ep`; it runs once alone first, then in each client.
macro_rules! sim_histories {
    ($seed:expr, |$ep:ident| $open:expr) => {
        sim_histories!($seed, scans: true, |$ep| $open)
    };
    ($seed:expr, scans: $scans:expr, |$ep:ident| $open:expr) => {{
        use remora_core::kvcheck::{History, client_history};
        use remora_poller::sim::{Sim, SimConfig};
        let seed: u64 = $seed;
        let failures = std::cell::RefCell::new(Vec::<String>::new());
        let mut sim = Sim::new(SimConfig {
            compute_nodes: 4,
            memory_nodes: 2,
            seed,
            ..SimConfig::default()
        })
        .unwrap();
        let c0 = sim.client(0).unwrap();
        sim.spawn_with(&c0, 0, move |ctx| async move {
            let $ep = ctx.ep();
            $open.await.unwrap();
        });
        assert_eq!(
            sim.run().unfinished,
            0,
            "seed {seed}: creating the index did not finish"
        );
        for node in 0..4 {
            for c in 0..4u64 {
                let ctx = sim.client(node).unwrap();
                let failures = &failures;
                let client = 1 + node as u64 * 4 + c;
                sim.spawn_with(&ctx, 0, move |ctx| async move {
                    let $ep = ctx.ep();
                    let t = $open.await.unwrap();
                    let h = History {
                        client,
                        ops: 400,
                        range: 200,
                        hot: 4,
                        seed,
                        value_size: 8,
                        scans: $scans,
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
    }};
}
pub(crate) use sim_histories;

//! SMART reusing retired memory (`core/src/smart/reclaim.rs`) under 16 racing clients on the
//! simulated cluster (tearing and jitter on): with leases short enough that the grace period
//! passes many times during the run, deleted leaves and replaced nodes are reused while other
//! clients still race on the same hot keys, and the recorded history is linearizable
//! (`remora_core::lincheck`).
use remora_core::lease::LeaseConfig;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::{Cell, RefCell};

const CLIENTS: u32 = 16;
const OPS: u64 = 400;

/// Leases of 200 µs: the grace period is 3 x (2 x 200 + 20) µs = 1.26 ms of virtual time,
/// a fraction of the run.
fn short_leases(t: Techniques) -> SmartConfig {
    let mut cfg = SmartConfig::new(t, KeyMode::Fixed(8), 8);
    cfg.reclaim = true;
    cfg.lease = LeaseConfig {
        lease_ns: 200_000,
        min_backoff_ns: 200,
        max_backoff_ns: 20_000,
        deadline_ns: 1_000_000_000,
        max_attempts: 1_000_000,
    };
    cfg
}

/// Runs the clients; returns (objects reused, objects retired) summed over the handles.
fn linearizable_with_reuse(cfg: SmartConfig, seed: u64) -> (u64, u64) {
    let rec = Recorder::new(
        (CLIENTS as u64 * OPS) as usize,
        (CLIENTS as u64 * OPS * 17) as usize,
    );
    let errors = RefCell::new(Vec::<String>::new());
    let (reused, retired) = (Cell::new(0u64), Cell::new(0u64));
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 2,
        seed,
        ..SimConfig::default()
    })
    .unwrap();
    for c in 0..CLIENTS {
        let ctx = sim.client(c as usize % 4).unwrap();
        let (rec, errors, reused, retired) = (&rec, &errors, &reused, &retired);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let t = match Smart::open(ctx.ep(), cfg).await {
                Ok(t) => t,
                Err(e) => return errors.borrow_mut().push(format!("client {c}: open: {e}")),
            };
            // Few keys, many deletes of shared hot keys: leaves are retired and reused
            // while other clients still reach them.
            let spec = LinSpec {
                cold: 8,
                hot_percent: 70,
                ..LinSpec::new(1 + c, OPS, seed, true)
            };
            let clock = || ctx.now_ns();
            if let Err(e) = lin_client(&t, &spec, rec, &clock).await {
                errors.borrow_mut().push(format!("client {c}: {e}"));
            }
            let s = t.stats();
            reused.set(reused.get() + s.reused);
            retired.set(retired.get() + s.retired);
        });
    }
    let r = sim.run();
    assert!(
        errors.borrow().is_empty(),
        "seed {seed}: {:?}",
        errors.borrow()
    );
    assert_eq!(r.unfinished, 0, "seed {seed}");
    drop(sim);
    let h = rec.finish().expect("recorder sized for the run");
    let report = check(&h, &CheckConfig::new(seed));
    println!(
        "seed {seed}: {report}; retired {}, reused {}",
        retired.get(),
        reused.get()
    );
    assert!(report.is_ok(), "seed {seed}: {report}");
    (reused.get(), retired.get())
}

#[test]
fn smart_reuses_retired_memory_and_stays_linearizable() {
    for seed in 1..=4 {
        let (reused, retired) = linearizable_with_reuse(short_leases(Techniques::SMART), seed);
        assert!(
            retired > 100,
            "seed {seed}: deletes retire leaves: {retired}"
        );
        assert!(
            reused > 50,
            "seed {seed}: retired memory was reused: {reused}"
        );
    }
}

#[test]
fn art_baseline_reuses_retired_memory_and_stays_linearizable() {
    for seed in 1..=2 {
        let (reused, retired) = linearizable_with_reuse(short_leases(Techniques::BASELINE), seed);
        assert!(retired > 100, "seed {seed}: {retired}");
        assert!(reused > 50, "seed {seed}: {reused}");
    }
}

#[test]
fn nothing_is_reused_with_reclamation_off() {
    let cfg = SmartConfig {
        reclaim: false,
        ..short_leases(Techniques::SMART)
    };
    let (reused, _) = linearizable_with_reuse(cfg, 1);
    assert_eq!(reused, 0);
}

//! Fault injection and traces on the sim fabric.
use remora_core::fabric::{FabricError, Op, QueuePair};
use remora_layouts::GlobalAddr;
use remora_poller::sim::perf::{PerfPoint, run_point};
use remora_poller::sim::{Faults, Model, ModelVerb, Sim, SimConfig, Stop, TraceSel};
use std::cell::{Cell, RefCell};

const LOCK: u64 = 1 << 20;
const DATA: u64 = (1 << 20) + 64;

#[test]
fn crashed_client_stops_holding_its_lock() {
    let tries = Cell::new(0u32);
    // Client 0 takes the lock (post 0), writes (post 1) and dies at post 2 (the unlock).
    let faults = Faults::none().crash_client_at_post(0, 2);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        faults,
        ..SimConfig::default()
    })
    .unwrap();
    let holder = sim.client(0).unwrap();
    let other = sim.client(1).unwrap();
    let tries = &tries;
    sim.spawn_with(&holder, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        assert_eq!(qp.cas(GlobalAddr::new(0, LOCK), 0, 1).await, Ok(0));
        qp.write(GlobalAddr::new(0, DATA), &[7u8; 8]).await.unwrap();
        let _ = qp.cas(GlobalAddr::new(0, LOCK), 1, 0).await;
        unreachable!("a crashed client runs no further");
    });
    sim.spawn_with(&other, 0, |ctx| async move {
        ctx.sleep(20_000).await;
        let qp = ctx.qp(0).unwrap();
        for _ in 0..50 {
            tries.set(tries.get() + 1);
            if qp.cas(GlobalAddr::new(0, LOCK), 0, 1).await == Ok(0) {
                panic!("took a lock its crashed holder never released");
            }
        }
    });
    let r = sim.run();
    assert_eq!(r.stop, Stop::AllDone, "{r:?}");
    assert_eq!(
        r.unfinished, 1,
        "the crashed client's coroutine never finishes"
    );
    assert_eq!(tries.get(), 50);
    assert_eq!(sim.host_bytes(0, LOCK, 8).unwrap(), 1u64.to_le_bytes());
    assert_eq!(sim.host_bytes(0, DATA, 8).unwrap(), [7u8; 8]);
}

#[test]
fn dead_memory_node_times_out_and_dram_is_lost() {
    let back = RefCell::new(Vec::new());
    let seen = RefCell::new(None);
    let m = Model::default();
    let faults = Faults::none()
        .crash_node_at(0, 50_000)
        .restart_node_at(0, 2_000_000_000);
    let mut sim = Sim::new(SimConfig {
        faults,
        ..SimConfig::default()
    })
    .unwrap();
    let ctx = sim.client(0).unwrap();
    let seen = &seen;
    sim.spawn_with(&ctx, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        qp.write(GlobalAddr::new(0, DATA), &[9u8; 8]).await.unwrap();
        ctx.sleep(100_000).await;
        let t0 = ctx.now_ns();
        let mut b = [0u8; 8];
        let r = qp.read(GlobalAddr::new(0, DATA), &mut b).await;
        *seen.borrow_mut() = Some((r, ctx.now_ns() - t0));
        assert!(qp.is_broken());
    });
    sim.run();
    let (r, waited) = seen.borrow_mut().take().unwrap();
    assert_eq!(r, Err(FabricError::RetryExceeded { node: 0 }));
    let timeout_ns = (m.ack_timeout_ns * (m.retry_cnt + 1.0)) as u64;
    assert!(
        waited + 200 >= timeout_ns && waited <= timeout_ns + 10_000,
        "waited {waited} ns"
    );
    // After the restart: a fresh DRAM region (header back, data gone), a new key. Queue
    // pairs made before the restart hold the old key; make a new client after it.
    let now = sim.now_ns();
    sim.run_for(2_000_001_000 - now);
    let ctx2 = sim.client(0).unwrap();
    let back = &back;
    sim.spawn_with(&ctx2, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let a = remora_core::alloc::RemoteAllocator::open(qp)
            .await
            .expect("header rewritten");
        assert!(a.alloc_chunk(qp).await.is_ok());
        let mut b = [0u8; 8];
        qp.read(GlobalAddr::new(0, DATA), &mut b).await.unwrap();
        back.borrow_mut().extend_from_slice(&b);
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "{r:?}");
    assert_eq!(*back.borrow(), [0u8; 8], "DRAM contents survived a crash");
}

#[test]
fn persistent_region_keeps_only_what_was_persisted() {
    let faults = Faults::none()
        .crash_node_at(0, 30_000)
        .restart_node_at(0, 40_000);
    let cfg = SimConfig {
        persistent: true,
        faults,
        ..SimConfig::default()
    };
    let mut sim = Sim::new(cfg).unwrap();
    let ctx = sim.client(0).unwrap();
    sim.spawn_with(&ctx, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let a = GlobalAddr::new(0, DATA);
        qp.write(a, &1u64.to_le_bytes()).await.unwrap();
        let mut b = [0u8; 8];
        qp.read(a, &mut b).await.unwrap(); // read-after-write: the 1 is persisted
        qp.write(a, &2u64.to_le_bytes()).await.unwrap(); // acknowledged, not persisted
        qp.write(GlobalAddr::new(0, DATA + 8), &3u64.to_le_bytes())
            .await
            .unwrap();
    });
    sim.run_for(20_000);
    assert_eq!(sim.unpersisted(0), 2);
    assert_eq!(sim.host_bytes(0, DATA, 8).unwrap(), 2u64.to_le_bytes());
    sim.run_for(30_000);
    assert_eq!(
        sim.host_bytes(0, DATA, 8).unwrap(),
        1u64.to_le_bytes(),
        "persisted value survives"
    );
    assert_eq!(
        sim.host_bytes(0, DATA + 8, 8).unwrap(),
        [0u8; 8],
        "un-persisted write is lost"
    );
}

#[test]
fn delays_reorder_across_queue_pairs_never_within_one() {
    let backwards = Cell::new(0u32);
    let last_posted = Cell::new(0u64);
    let next = Cell::new(1u64);
    let mut m = Model::default();
    m.set("jitter_ns", "300").unwrap();
    let faults = Faults::none().delays(0.3, 5_000);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        model: m,
        faults,
        seed: 11,
        ..SimConfig::default()
    })
    .unwrap();
    let writer = sim.client(0).unwrap();
    let reader = sim.client(1).unwrap();
    let (next, last_posted) = (&next, &last_posted);
    for co in 0..16 {
        sim.spawn_with(&writer, co, |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            for _ in 0..100 {
                let v = next.get();
                next.set(v + 1);
                last_posted.set(v);
                qp.post(&mut [Op::Write {
                    remote: GlobalAddr::new(0, DATA),
                    local: &v.to_le_bytes(),
                }])
                .await
                .unwrap();
            }
        });
    }
    let backwards = &backwards;
    sim.spawn_with(&reader, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut prev = 0;
        for _ in 0..3000 {
            let mut b = [0u8; 8];
            qp.read(GlobalAddr::new(0, DATA), &mut b).await.unwrap();
            let v = u64::from_le_bytes(b);
            if v < prev {
                backwards.set(backwards.get() + 1);
            }
            prev = v;
        }
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    assert_eq!(
        backwards.get(),
        0,
        "one queue pair's writes were applied out of order"
    );
    assert_eq!(
        sim.host_bytes(0, DATA, 8).unwrap(),
        last_posted.get().to_le_bytes()
    );
}

#[test]
fn slow_node_halves_the_hot_atomic_rate() {
    let m = Model::default();
    let p = PerfPoint {
        verb: ModelVerb::Cas,
        size: 8,
        clients_per_node: 4,
        coroutines: 8,
        hot: true,
        warmup_ns: 20_000,
        measure_ns: 100_000,
    };
    let faults = Faults::none().slow_node_at(0, 0, 2.0);
    let cfg = SimConfig {
        faults,
        ..SimConfig::default()
    };
    let r = run_point(cfg, &p, &mut |_| {}).unwrap();
    let want = 1e3 / m.host_atomic_ns / 2.0;
    assert!(
        (r.mops() - want).abs() / want < 0.05,
        "{} Mops, want {want}",
        r.mops()
    );
}

#[test]
fn trace_follows_one_operation() {
    let trace = Some(TraceSel::op(1));
    let mut sim = Sim::new(SimConfig {
        trace,
        ..SimConfig::default()
    })
    .unwrap();
    let ctx = sim.client(0).unwrap();
    sim.spawn_with(&ctx, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        qp.write(GlobalAddr::new(0, DATA), &[1u8; 200])
            .await
            .unwrap();
        let mut b = [0u8; 200];
        qp.read(GlobalAddr::new(0, DATA), &mut b).await.unwrap();
    });
    sim.run();
    let lines = sim.trace_lines();
    let text = lines.join("\n");
    assert!(lines.iter().all(|l| l.contains("op#1")), "{text}");
    assert!(text.contains("post by client 0"), "{text}");
    assert_eq!(
        lines.iter().filter(|l| l.ends_with(") sampled")).count(),
        4,
        "{text}"
    );
    assert!(text.contains("batch complete"), "{text}");
}

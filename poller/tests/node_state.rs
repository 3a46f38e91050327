//! The state the papers keep per compute node, shared by the client threads (handles) of one
//! simulated compute node: Sherman's local lock table hands a lock over between threads,
//! SMART's local table delegates reads and combines writes between threads. Each test runs
//! the same clients with per-thread state too, where none of it can happen (one coroutine
//! per handle: nobody on the handle to hand over to, delegate to, or combine with).
use remora_core::index::KvIndex;
use remora_core::sherman::{Sherman, ShermanConfig, ShermanNode};
use remora_core::smart::{KeyMode, Smart, SmartConfig, SmartNode, Techniques};
use remora_poller::sim::faults::Faults;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::Cell;
use std::sync::Arc;

const THREADS: usize = 4;

fn sim<'a>() -> Sim<'a> {
    Sim::new(SimConfig {
        compute_nodes: 2,
        memory_nodes: 1,
        seed: 7,
        ..SimConfig::default()
    })
    .unwrap()
}

/// Hand-overs received by `THREADS` one-coroutine clients of compute node 0 writing one key,
/// and the locks they took in all.
fn sherman_handovers(shared: bool) -> (u64, u64) {
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::sherman()
    };
    let handovers = Cell::new(0u64);
    let acquired = Cell::new(0u64);
    let node = Arc::new(ShermanNode::new(&cfg));
    let mut sim = sim();
    let c0 = sim.client(1).unwrap();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        Sherman::create(ctx.ep(), cfg).await.unwrap();
    });
    assert_eq!(sim.run().unfinished, 0);
    for th in 0..THREADS as u64 {
        let ctx = sim.client(0).unwrap();
        let n = if shared {
            node.clone()
        } else {
            Arc::new(ShermanNode::new(&cfg))
        };
        let (handovers, acquired) = (&handovers, &acquired);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let t = Sherman::open_on(ctx.ep(), cfg, n).await.unwrap();
            for i in 0..200u64 {
                t.upsert(&7u64.to_be_bytes(), &(i * 8 + th).to_le_bytes())
                    .await
                    .unwrap();
            }
            let st = t.stats();
            handovers.set(handovers.get() + st.lock_handovers);
            acquired.set(acquired.get() + st.locks_acquired);
        });
    }
    assert_eq!(sim.run().unfinished, 0);
    (handovers.get(), acquired.get())
}

#[test]
fn sherman_hands_a_lock_over_between_threads_of_one_node() {
    let writes = THREADS as u64 * 200;
    // One key in one leaf: every write takes its lock exactly once, by a remote CAS or, with
    // the node's table shared, by hand-over; a hand-over is counted as an acquisition too.
    assert_eq!(sherman_handovers(false), (0, writes));
    let (n, taken) = sherman_handovers(true);
    assert_eq!(taken, writes);
    assert!(n > 0, "no hand-over between the node's threads");
}

/// Delegated reads and combined writes of `THREADS` one-coroutine clients of compute node 0
/// reading and writing one hot key.
fn smart_sharing(shared: bool) -> (u64, u64) {
    let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    let (delegated, combined) = (Cell::new(0u64), Cell::new(0u64));
    let node = Arc::new(SmartNode::new(&cfg));
    let mut sim = sim();
    let c0 = sim.client(1).unwrap();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        let s = Smart::open(ctx.ep(), cfg).await.unwrap();
        s.upsert(&5u64.to_be_bytes(), &0u64.to_le_bytes())
            .await
            .unwrap();
    });
    assert_eq!(sim.run().unfinished, 0);
    for th in 0..THREADS as u64 {
        let ctx = sim.client(0).unwrap();
        let n = if shared {
            node.clone()
        } else {
            Arc::new(SmartNode::new(&cfg))
        };
        let (delegated, combined) = (&delegated, &combined);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let s = Smart::open_on(ctx.ep(), cfg, n).await.unwrap();
            let mut out = [0u8; 8];
            let mut seen = [0u64; THREADS];
            for i in 1..=200u64 {
                if th % 2 == 0 {
                    s.upsert(&5u64.to_be_bytes(), &(i * 8 + th).to_le_bytes())
                        .await
                        .unwrap();
                } else {
                    assert_eq!(s.get(&5u64.to_be_bytes(), &mut out).await.unwrap(), Some(8));
                    // A writer's values only go up, as this reader sees them.
                    let v = u64::from_le_bytes(out);
                    let w = (v % 8) as usize;
                    assert!(v == 0 || w < THREADS, "unknown writer of {v}");
                    if v > 0 {
                        assert!(v >= seen[w], "went backwards: {v} after {}", seen[w]);
                        seen[w] = v;
                    }
                }
            }
            let st = s.stats();
            delegated.set(delegated.get() + st.delegated_reads);
            combined.set(combined.get() + st.combined_writes);
        });
    }
    assert_eq!(sim.run().unfinished, 0);
    (delegated.get(), combined.get())
}

#[test]
fn smart_delegates_and_combines_between_threads_of_one_node() {
    assert_eq!(smart_sharing(false), (0, 0));
    let (d, c) = smart_sharing(true);
    assert!(d > 0, "no read delegated between the node's threads");
    assert!(c > 0, "no write combined between the node's threads");
}

/// A client thread of node 0 reads a hot key and dies at its `crash_at`-th doorbell, maybe
/// while it leads a delegated READ; another thread of node 0 then reads the key. Returns the
/// survivor's leader takeovers (it must finish, with the right value, either way).
fn smart_survivor_of_a_dead_leader(crash_at: u64) -> u64 {
    let mut cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    cfg.lease.lease_ns = 1_000_000;
    let takeovers = Cell::new(u64::MAX);
    let node = Arc::new(SmartNode::new(&cfg));
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        memory_nodes: 1,
        seed: 3,
        faults: Faults::none().crash_client_at_post(1, crash_at),
        ..SimConfig::default()
    })
    .unwrap();
    // Clients are numbered in creation order: the creator is 0, the victim 1.
    let creator = sim.client(1).unwrap();
    sim.spawn_with(&creator, 0, move |ctx| async move {
        let s = Smart::open(ctx.ep(), cfg).await.unwrap();
        s.upsert(&5u64.to_be_bytes(), &9u64.to_le_bytes())
            .await
            .unwrap();
    });
    assert_eq!(sim.run().unfinished, 0);
    let victim = sim.client(0).unwrap();
    assert_eq!(victim.client_id(), 1);
    let n = node.clone();
    sim.spawn_with(&victim, 0, move |ctx| async move {
        let s = Smart::open_on(ctx.ep(), cfg, n).await.unwrap();
        let mut out = [0u8; 8];
        for _ in 0..20 {
            s.get(&5u64.to_be_bytes(), &mut out).await.unwrap();
        }
    });
    let survivor = sim.client(0).unwrap();
    let takeovers_ref = &takeovers;
    sim.spawn_with(&survivor, 0, move |ctx| async move {
        let s = Smart::open_on(ctx.ep(), cfg, node).await.unwrap();
        let mut out = [0u8; 8];
        for _ in 0..50 {
            assert_eq!(s.get(&5u64.to_be_bytes(), &mut out).await.unwrap(), Some(8));
            assert_eq!(u64::from_le_bytes(out), 9);
        }
        takeovers_ref.set(s.stats().leader_takeovers);
    });
    let r = sim.run();
    assert!(r.unfinished <= 1, "crash at {crash_at}: {r:?}");
    assert_ne!(
        takeovers.get(),
        u64::MAX,
        "crash at {crash_at}: the survivor never finished"
    );
    takeovers.get()
}

#[test]
fn smart_waiters_outlive_a_thread_that_dies_leading_a_delegated_read() {
    let takeovers: u64 = (0..40).map(smart_survivor_of_a_dead_leader).sum();
    assert!(
        takeovers > 0,
        "no crash point left a delegated read without its leader"
    );
}

//! remora's own idea on CHIME (`ChimeConfig::{delegation, combining}`): the threads of one
//! compute node share their operations on a hot key. On the sim, 16 client threads of one
//! node hammer one key; with the switches on, the node posts far fewer verbs per operation
//! than CHIME, and every operation still returns a value some writer wrote.
use remora_core::chime::{Chime, ChimeConfig, ChimeNode};
use remora_core::index::KvIndex;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::Cell;
use std::sync::Arc;

const THREADS: u64 = 16;
const OPS: u64 = 30;
const HOT: u64 = 42;

fn cfg(delegation: bool, combining: bool) -> ChimeConfig {
    ChimeConfig {
        delegation,
        combining,
        ..ChimeConfig::chime()
    }
    .with_cache(1 << 20)
}

/// Verbs per operation of `THREADS` threads of one compute node doing `OPS` operations each
/// on the hot key (`write`: updates, else gets), and the operations served by another
/// thread's (delegated reads, combined writes).
fn verbs_per_op(cfg: ChimeConfig, write: bool) -> (f64, u64) {
    let shared = Cell::new(0u64);
    let bad = Cell::new(0u64);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: 128 << 20,
        seed: 7,
        ..SimConfig::default()
    })
    .unwrap();
    let node = Arc::new(ChimeNode::new(&cfg));
    let c0 = sim.client(0).unwrap();
    let n0 = node.clone();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        let t = Chime::create_on(ctx.ep(), cfg, n0).await.unwrap();
        // A few hundred keys: the hot one shares its leaf with others.
        for k in 0..300u64 {
            t.upsert(&k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    let before = sim.stats().verbs;
    for c in 0..THREADS {
        let ctx = sim.client(0).unwrap();
        let (node, shared, bad) = (node.clone(), &shared, &bad);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let t = Chime::create_on(ctx.ep(), cfg, node).await.unwrap();
            let mut out = [0u8; 8];
            for i in 0..OPS {
                if write {
                    let v = 1000 + c * OPS + i;
                    assert!(
                        t.update(&HOT.to_be_bytes(), &v.to_le_bytes())
                            .await
                            .unwrap()
                    );
                } else {
                    let n = t.get(&HOT.to_be_bytes(), &mut out).await.unwrap();
                    let v = u64::from_le_bytes(out);
                    // Only the loaded value was ever written.
                    if n != Some(8) || v != HOT {
                        bad.set(bad.get() + 1);
                    }
                }
            }
            let s = t.stats();
            shared.set(shared.get() + s.delegated_reads + s.combined_writes);
        });
    }
    assert_eq!(sim.run().unfinished, 0);
    assert_eq!(bad.get(), 0, "a get returned a value never written");
    let verbs = sim.stats().verbs - before;
    (verbs as f64 / (THREADS * OPS) as f64, shared.get())
}

/// The final value of the hot key after the writers, read by a fresh handle.
fn final_value(cfg: ChimeConfig) -> u64 {
    let got = Cell::new(0);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: 128 << 20,
        seed: 3,
        ..SimConfig::default()
    })
    .unwrap();
    let node = Arc::new(ChimeNode::new(&cfg));
    let c0 = sim.client(0).unwrap();
    let n0 = node.clone();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        let t = Chime::create_on(ctx.ep(), cfg, n0).await.unwrap();
        t.upsert(&HOT.to_be_bytes(), &0u64.to_le_bytes())
            .await
            .unwrap();
    });
    assert_eq!(sim.run().unfinished, 0);
    for c in 0..THREADS {
        let ctx = sim.client(0).unwrap();
        let node = node.clone();
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let t = Chime::create_on(ctx.ep(), cfg, node).await.unwrap();
            for i in 0..OPS {
                // Each thread writes increasing values: the last one of some thread wins.
                let v = (c << 32) | (i + 1);
                t.upsert(&HOT.to_be_bytes(), &v.to_le_bytes())
                    .await
                    .unwrap();
            }
        });
    }
    assert_eq!(sim.run().unfinished, 0);
    let ctx = sim.client(0).unwrap();
    let got_ref = &got;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let t = Chime::create(ctx.ep(), cfg).await.unwrap();
        let mut out = [0u8; 8];
        assert_eq!(t.get(&HOT.to_be_bytes(), &mut out).await.unwrap(), Some(8));
        got_ref.set(u64::from_le_bytes(out));
    });
    assert_eq!(sim.run().unfinished, 0);
    got.get()
}

#[test]
fn delegation_cuts_the_verbs_of_hot_key_lookups() {
    let (chime, none) = verbs_per_op(cfg(false, false), false);
    let (ours, delegated) = verbs_per_op(cfg(true, false), false);
    println!("gets: CHIME {chime:.2} verbs/op, with delegation {ours:.2} ({delegated} delegated)");
    assert_eq!(none, 0);
    assert!(delegated > THREADS * OPS / 4, "{delegated} delegated");
    assert!(
        ours < chime * 0.6,
        "verbs/op {ours:.2} with delegation, {chime:.2} without"
    );
}

#[test]
fn combining_cuts_the_verbs_of_hot_key_updates() {
    let (chime, none) = verbs_per_op(cfg(false, false), true);
    let (ours, combined) = verbs_per_op(cfg(false, true), true);
    println!("updates: CHIME {chime:.2} verbs/op, with combining {ours:.2} ({combined} combined)");
    assert_eq!(none, 0);
    assert!(combined > THREADS * OPS / 4, "{combined} combined");
    assert!(
        ours < chime * 0.6,
        "verbs/op {ours:.2} with combining, {chime:.2} without"
    );
}

#[test]
fn combined_upserts_leave_the_last_value_of_a_writer() {
    for c in [cfg(false, false), cfg(true, true)] {
        let v = final_value(c);
        assert_eq!(v & 0xffff_ffff, OPS, "{v:#x}: not some thread's last write");
        assert!(v >> 32 < THREADS);
    }
}

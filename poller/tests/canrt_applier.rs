//! What CANRT's server thread does per posted update, against what the paper's does.
//!
//! The paper's server (seeds/000 §3.3) runs one "background thread" that takes each
//! WRITE_WITH_IMM completion, locates the DataItem from the immediate, checks its opflag,
//! flips the node's bitmap bits (an update also "marks the old DataItem as invalid": the
//! server must find the key's older item in the node) with the lock reset in the same 8-byte
//! word, clears the item's `valid` field, and persists "with clwb and mfence". remora's
//! applier (`core/src/canrt/server.rs`) does that work and no more on the write path: one
//! message per write (credits ride on one reply per half window), one read of the node's
//! live keys, two write-backs (the item's lines and the meta word's). This test counts them,
//! and prints the server time per write split into the model's charges (zeroing each in
//! turn), the figure behind the write-only rows:
//! `cargo test --release -p remora-poller --test canrt_applier -- --nocapture`.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer, WriteAck};
use remora_core::index::KvIndex;
use remora_poller::sim::profiles::profile;
use remora_poller::sim::{Model, Sim, SimConfig};
use std::cell::RefCell;

/// Keys loaded, then updated one at a time.
const KEYS: u64 = 2_000;
const UPDATES: u64 = 500;

fn rng(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn key(i: u64) -> [u8; 16] {
    let mut s = 0x5eed_u64 ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&rng(&mut s).to_be_bytes());
    k[8..].copy_from_slice(&rng(&mut s).to_be_bytes());
    k
}

/// The applier's work per update, each update alone (the applier idle when it lands).
#[derive(Clone, Copy)]
struct PerWrite {
    /// Server CPU ns.
    busy_ns: f64,
    /// Messages the server handled.
    messages: f64,
    /// Cache lines it touched, and of them missed (Optane reads).
    lines: f64,
    misses: f64,
    /// Cache lines it wrote back (`persist`).
    flushed: f64,
}

/// `KEYS` random 16-byte keys (15-byte values, the paper's) loaded by one client, then
/// `UPDATES` posted updates of them, on the canrt profile with `set` on top; the LLC is
/// scaled as the repro scales it (24 MiB x keys / the paper's assumed 1M keys).
fn run(set: &[(&str, f64)]) -> PerWrite {
    let mut model: Model = profile("canrt").unwrap().model();
    model.server_llc_lines = (model.server_llc_lines * KEYS as f64 / 1e6).round();
    for (name, v) in set {
        model.set(name, &v.to_string()).unwrap();
    }
    let phase = RefCell::new(0u8);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        persistent: true,
        model,
        seed: 5,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
    let ctx = sim.client(0).unwrap();
    let phase_ref = &phase;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let cfg = CanrtConfig {
            key_len: 16,
            value_cap: 16,
            ack: WriteAck::Posted,
            ..CanrtConfig::new(0)
        };
        let t = Canrt::open(ctx.ep(), cfg).await.unwrap();
        for i in 0..KEYS {
            t.upsert(&key(i), &[7u8; 15]).await.unwrap();
        }
        // The load's last items applied: the counters are read in the quiet that follows.
        ctx.sleep(20_000_000).await;
        *phase_ref.borrow_mut() = 1;
        ctx.sleep(1_000_000).await;
        let mut s = 0x0dd5_u64;
        for _ in 0..UPDATES {
            t.upsert(&key(rng(&mut s) % KEYS), &[9u8; 15])
                .await
                .unwrap();
            // The applier idle again before the next write lands.
            ctx.sleep(20_000).await;
        }
        ctx.sleep(100_000).await;
        // Every update applied: each key reads back its new value or its loaded one.
        let mut v = [0u8; 16];
        for i in 0..KEYS {
            assert!(
                t.get(&key(i), &mut v).await.unwrap().is_some(),
                "key {i} lost"
            );
        }
        *phase_ref.borrow_mut() = 2;
    });
    while *phase.borrow() == 0 {
        let r = sim.run_for(10_000);
        assert!(
            *phase.borrow() != 0 || r.unfinished > 0,
            "the load did not finish"
        );
    }
    let (busy, llc, nvm) = (
        sim.server_busy_total_ns(),
        sim.server_llc_total(),
        sim.nvm_total(),
    );
    assert_eq!(sim.run().unfinished, 0);
    assert_eq!(*phase.borrow(), 2);
    let (busy2, llc2, nvm2) = (
        sim.server_busy_total_ns(),
        sim.server_llc_total(),
        sim.nvm_total(),
    );
    let n = UPDATES as f64;
    PerWrite {
        busy_ns: (busy2 - busy) as f64 / n,
        messages: (llc2.invocations - llc.invocations) as f64 / n,
        lines: (llc2.lines - llc.lines) as f64 / n,
        misses: (llc2.misses - llc.misses) as f64 / n,
        flushed: (nvm2.lines_flushed - nvm.lines_flushed) as f64 / n,
    }
}

#[test]
fn the_applier_does_the_papers_work_per_write_and_no_more() {
    let base = run(&[]);
    println!(
        "posted update, applier idle: {:.0} ns of server time, {:.2} messages, {:.1} lines \
         ({:.2} missed), {:.2} lines written back",
        base.busy_ns, base.messages, base.lines, base.misses, base.flushed
    );
    // The parts: each charge zeroed alone (Optane reads priced as cache hits).
    let m = profile("canrt").unwrap().model();
    for (what, set) in [
        (
            "server_handler_ns (flat per message)",
            ("server_handler_ns", 0.0),
        ),
        ("write-backs (nvm_write_ns)", ("nvm_write_ns", 0.0)),
        (
            "Optane misses (server_nvm_read_ns)",
            ("server_nvm_read_ns", m.server_llc_hit_ns),
        ),
        ("completion poll (server_poll_ns)", ("server_poll_ns", 0.0)),
    ] {
        let r = run(&[set]);
        println!("  {what}: {:.0} ns", base.busy_ns - r.busy_ns);
    }
    // One message per write: the WRITE_WITH_IMM's (no Wait, Unlock or acknowledgement).
    assert!(
        base.messages <= 1.01,
        "{:.2} messages per write",
        base.messages
    );
    // Two write-backs: the item's lines (one, or two where the item straddles a line) and
    // the meta word's line.
    assert!(
        (2.0..=3.0).contains(&base.flushed),
        "{:.2} lines written back per write",
        base.flushed
    );
    // The node's live keys read in one access (the old item's search), not one dependent
    // load per slot: the memory the write waits for is at most two dependent Optane misses
    // (the meta word, the keys' read, whose other lines overlap) and a cache hit per line.
    let own = m.server_poll_ns + m.server_handler_ns + base.flushed * m.nvm_write_ns;
    let memory = base.busy_ns - own;
    assert!(
        memory <= 2.0 * m.server_nvm_read_ns + base.lines * m.server_llc_hit_ns,
        "{memory:.0} ns of memory per write"
    );
}

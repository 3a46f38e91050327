//! CANRT's paper-semantics write (`WriteAck::Posted`) on the simulated cluster: it returns
//! once its WRITE_WITH_IMM completes, before the server applied it, so it is faster than the
//! default (`WriteAck::Applied`, which waits for the server's acknowledgement) and is not
//! read-your-writes at once; the server still applies every item, so a later read sees it.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer, WriteAck};
use remora_core::index::KvIndex;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

const KEYS: u64 = 64;

/// Mean virtual ns per upsert of `KEYS` keys by one client, and how many of the keys a
/// reader found with their value after a pause of 100 µs.
fn run(ack: WriteAck) -> (u64, u64) {
    let out = RefCell::new(None);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        seed: 3,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
    let ctx = sim.client(0).unwrap();
    let out_ref = &out;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let cfg = CanrtConfig {
            slots: 8,
            ack,
            ..CanrtConfig::new(0)
        };
        let t = Canrt::open(ctx.ep(), cfg).await.unwrap();
        // Load first (with splits), then time updates of the loaded keys.
        for k in 0..KEYS {
            t.upsert(&(k << 20).to_be_bytes(), &0u64.to_le_bytes())
                .await
                .unwrap();
        }
        ctx.sleep(100_000).await;
        let start = ctx.now_ns();
        for k in 0..KEYS {
            t.upsert(&(k << 20).to_be_bytes(), &(k + 1).to_le_bytes())
                .await
                .unwrap();
        }
        let per = (ctx.now_ns() - start) / KEYS;
        ctx.sleep(100_000).await;
        let mut found = 0;
        let mut w = [0u8; 8];
        for k in 0..KEYS {
            if t.get(&(k << 20).to_be_bytes(), &mut w)
                .await
                .unwrap()
                .is_some()
                && u64::from_le_bytes(w) == k + 1
            {
                found += 1;
            }
        }
        *out_ref.borrow_mut() = Some((per, found));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    out.into_inner().unwrap()
}

#[test]
fn posted_writes_return_before_the_server_applies_and_are_applied_later() {
    let (applied, found_a) = run(WriteAck::Applied);
    let (posted, found_p) = run(WriteAck::Posted);
    println!("update: applied {applied} ns, posted {posted} ns");
    assert_eq!(found_a, KEYS);
    assert_eq!(found_p, KEYS, "the server applies every posted item");
    // The applied write also waits for the server's apply and its acknowledgement (and
    // posts a flush READ): at least the server's service and a one-way trip more.
    assert!(
        posted + 500 < applied,
        "posted {posted} ns, applied {applied} ns"
    );
    assert!(
        !CanrtConfig {
            ack: WriteAck::Posted,
            ..CanrtConfig::new(0)
        }
        .linearizable()
    );
    assert!(CanrtConfig::new(0).linearizable());
}

//! More coroutines than request mailboxes on one Erda handle: they queue for the mailboxes,
//! and each gets one in turn. Before the queue, the coroutines that kept running retook the
//! mailboxes they had just freed, and a waiter sleeping through its back-off could starve
//! past its deadline ("every request mailbox of this handle stayed in use"; seen over verbs
//! with 256 coroutines on 64 mailboxes).
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::index::KvIndex;
use remora_core::lease::LeaseConfig;
use remora_poller::executor::join_all;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

#[test]
fn coroutines_beyond_the_mailboxes_all_get_their_turn() {
    const COROUTINES: u64 = 256;
    const OPS: u64 = 20;
    let failures = RefCell::new(Vec::<String>::new());
    let slowest = RefCell::new(0u64);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: 64 << 20,
        seed: 3,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(
        0,
        Box::new(ErdaServer::new(ErdaConfig {
            buckets: 8192,
            segment_bytes: 64 << 10,
            head_bytes: 4 << 20,
            ..ErdaConfig::small()
        })),
    )
    .unwrap();
    let (failures_r, slowest_r) = (&failures, &slowest);
    let ctx = sim.client(0).unwrap();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        // A deadline far shorter than the default's second, still far above a reply's wait
        // (at most 64 requests in flight): a mailbox wait may fail only when no mailbox was
        // freed for that long, not because other coroutines kept taking them.
        let cfg = ErdaClientConfig {
            lease: LeaseConfig {
                deadline_ns: 500_000,
                ..LeaseConfig::default()
            },
            ..ErdaClientConfig::default()
        };
        let e = Erda::open(ctx.ep(), cfg).await.unwrap();
        assert!(
            (e.slots() as u64) < COROUTINES,
            "the test needs more coroutines than the handle's {} mailboxes",
            e.slots()
        );
        let (e, ctx) = (&e, &ctx);
        let coros = (0..COROUTINES).map(|c| async move {
            for i in 0..OPS {
                let k = (c * 1000 + i).to_be_bytes();
                let t0 = ctx.now_ns();
                if let Err(err) = e.upsert(&k, &[c as u8; 8]).await {
                    failures_r
                        .borrow_mut()
                        .push(format!("coroutine {c} op {i}: {err}"));
                    return;
                }
                let waited = ctx.now_ns() - t0;
                let mut s = slowest_r.borrow_mut();
                *s = (*s).max(waited);
            }
        });
        join_all(coros.collect()).await;
        if !failures_r.borrow().is_empty() {
            return;
        }
        for c in 0..COROUTINES {
            for i in 0..OPS {
                let mut buf = [0u8; 64];
                let got = e
                    .get(&(c * 1000 + i).to_be_bytes(), &mut buf)
                    .await
                    .unwrap();
                assert_eq!(got, Some(8), "coroutine {c} op {i} reads back");
                assert_eq!(buf[..8], [c as u8; 8]);
            }
        }
    });
    let r = sim.run();
    let failures = failures.borrow();
    assert!(
        failures.is_empty(),
        "{} failed, first: {:?}",
        failures.len(),
        failures.first()
    );
    assert_eq!(r.unfinished, 0);
    println!("slowest upsert {} ns", slowest.borrow());
}

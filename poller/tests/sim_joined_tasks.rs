//! Coroutines joined into one sim task (how `remora bench --fabric sim` runs a client thread):
//! a group of spinning coroutines must not multiply the task's wake-ups and freeze virtual
//! time, and Sherman's local lock queue must hand the lock on in order.
use remora_core::index::KvIndex;
use remora_core::sherman::{Sherman, ShermanConfig};
use remora_poller::executor::join_all;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

#[test]
fn sherman_coroutines_of_one_client_share_locks_on_the_sim() {
    let errs = RefCell::new(Vec::new());
    let mut sim = Sim::new(SimConfig::default()).unwrap();
    let c = sim.client(0).unwrap();
    let cfg = ShermanConfig {
        lock_retries: 20_000,
        ..ShermanConfig::sherman()
    };
    sim.spawn_with(&c, 0, |ctx| {
        let errs = &errs;
        async move {
            let t = Sherman::create(ctx.ep(), cfg).await.unwrap();
            let futs: Vec<_> = (0..4u64)
                .map(|co| {
                    let t = &t;
                    async move {
                        for i in 0..3000u64 {
                            let k = (i * 7919 + co * 13) % 5000;
                            if let Err(e) = t.upsert(&k.to_be_bytes(), &i.to_le_bytes()).await {
                                errs.borrow_mut().push(format!("co {co} op {i}: {e}"));
                                return;
                            }
                        }
                    }
                })
                .collect();
            join_all(futs).await;
        }
    });
    let r = sim.run();
    assert!(
        errs.borrow().is_empty(),
        "{:?} at {}",
        errs.borrow(),
        r.now_ns
    );
}

#[test]
fn three_spinning_coroutines_let_virtual_time_advance() {
    use remora_core::block_on::yield_now;
    use std::cell::Cell;
    let polls = Cell::new(0u64);
    let mut sim = Sim::new(SimConfig::default()).unwrap();
    let c = sim.client(0).unwrap();
    sim.spawn_with(&c, 0, |ctx| {
        let polls = &polls;
        async move {
            let start = ctx.now_ns();
            let spinners: Vec<_> = (0..3)
                .map(|_| async {
                    while ctx.now_ns() < start + 10_000 && polls.get() < 5_000 {
                        polls.set(polls.get() + 1);
                        yield_now().await;
                    }
                })
                .collect();
            join_all(spinners).await;
        }
    });
    sim.run();
    // 10 us of 50 ns polls: about 200 rounds of 3 spinners, not an explosion.
    assert!(
        polls.get() < 2_000,
        "{} polls for 10 us of virtual time",
        polls.get()
    );
}

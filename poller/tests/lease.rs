//! The lease-and-fence protocol (`remora_core::lease`) on the soft and sim fabrics: a holder
//! that stops making progress loses its lock after one lease, is fenced (its later verbs fail
//! without touching memory), and the waiter gets the lock.
use remora_core::block_on::block_on;
use remora_core::fabric::{Endpoint, FabricError, QueuePair};
use remora_core::lease::{Acquired, LeaseConfig, LockError, acquire, holder, owner_word};
use remora_layouts::GlobalAddr;
use remora_poller::sim::{Sim, SimConfig};
use remora_poller::soft::{NodeConfig, SoftMemoryNode};
use std::cell::Cell;

const LOCK: GlobalAddr = GlobalAddr::new(0, 1 << 20);
const DATA: GlobalAddr = GlobalAddr::new(0, (1 << 20) + 64);

fn short() -> LeaseConfig {
    LeaseConfig {
        lease_ns: 2_000_000,
        deadline_ns: 2_000_000_000,
        ..LeaseConfig::default()
    }
}

#[test]
fn soft_a_stuck_holder_is_fenced_and_its_lock_taken_over() {
    let node = SoftMemoryNode::create(NodeConfig {
        region_len: 4 << 20,
        ..NodeConfig::default()
    })
    .unwrap();
    let (a, b) = (node.endpoint().unwrap(), node.endpoint().unwrap());
    assert_ne!(a.client_id(), b.client_id());
    assert_ne!(a.client_id(), 0);
    let mine = owner_word(a.client_id(), 1);
    assert_eq!(
        block_on(acquire(&a, LOCK, mine, short())).unwrap(),
        Acquired::Clean
    );
    // A holds the lock and stops. B waits one lease, fences A, takes over.
    let t = std::time::Instant::now();
    let got = block_on(acquire(&b, LOCK, owner_word(b.client_id(), 1), short())).unwrap();
    let waited = t.elapsed();
    assert_eq!(
        got,
        Acquired::TookOver {
            from: a.client_id()
        }
    );
    assert!(waited.as_nanos() >= short().lease_ns as u128, "{waited:?}");
    eprintln!(
        "took over after {waited:?} (lease {} ms)",
        short().lease_ns / 1_000_000
    );
    // A, fenced, can no longer write under the lock it lost — nor anywhere else.
    let qa = a.qp(0).unwrap();
    let r = block_on(qa.write(DATA, &[7u8; 8]));
    assert!(matches!(r, Err(FabricError::RemoteAccess { .. })), "{r:?}");
    let qb = b.qp(0).unwrap();
    let mut w = [0u8; 8];
    block_on(qb.read(DATA, &mut w)).unwrap();
    assert_eq!(w, [0; 8], "the fenced write touched memory");
    block_on(qb.read(LOCK, &mut w)).unwrap();
    assert_eq!(holder(u64::from_le_bytes(w)), b.client_id());
    // A new connection gets a fresh identity and works.
    let c = node.endpoint().unwrap();
    block_on(c.qp(0).unwrap().write(DATA, &[1u8; 8])).unwrap();
}

#[test]
fn soft_a_live_holder_that_releases_is_never_fenced() {
    let node = SoftMemoryNode::create(NodeConfig {
        region_len: 4 << 20,
        ..NodeConfig::default()
    })
    .unwrap();
    std::thread::scope(|s| {
        for n in [1u32, 2] {
            let node = &node;
            s.spawn(move || {
                let ep = &node.endpoint().unwrap();
                for i in 1..=300u32 {
                    let mine = owner_word(ep.client_id(), i);
                    // A lease far above a scheduler's time slice: on a loaded 2-core
                    // machine a live holder can be preempted for milliseconds.
                    let cfg = LeaseConfig {
                        lease_ns: 500_000_000,
                        ..short()
                    };
                    assert_eq!(
                        block_on(acquire(ep, LOCK, mine, cfg)).unwrap(),
                        Acquired::Clean,
                        "client {n}"
                    );
                    let q = ep.qp(0).unwrap();
                    block_on(q.write(DATA, &i.to_le_bytes())).unwrap();
                    block_on(q.write(LOCK, &0u64.to_le_bytes())).unwrap();
                }
            });
        }
    });
}

#[test]
fn sim_a_crashed_holder_is_fenced_within_a_lease_of_virtual_time() {
    let result = Cell::new(None);
    let fenced = Cell::new(None);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        ..SimConfig::default()
    })
    .unwrap();
    let (ca, cb) = (sim.client(0).unwrap(), sim.client(1).unwrap());
    let cfg = LeaseConfig {
        lease_ns: 50_000,
        ..LeaseConfig::default()
    };
    let result = &result;
    let fenced = &fenced;
    sim.spawn_with(&ca, 0, move |ctx| async move {
        let ep = ctx.ep();
        let mine = owner_word(ep.client_id(), 1);
        acquire(ep, LOCK, mine, cfg).await.unwrap();
        // Stalls for 1 ms holding the lock, then tries to write under it.
        ctx.sleep(1_000_000).await;
        fenced.set(Some(ep.qp(0).unwrap().write(DATA, &[9u8; 8]).await));
    });
    sim.spawn_with(&cb, 0, move |ctx| async move {
        let ep = ctx.ep();
        ctx.sleep(1_000).await;
        let t = ctx.now_ns();
        let got: Result<Acquired, LockError> =
            acquire(ep, LOCK, owner_word(ep.client_id(), 1), cfg).await;
        result.set(Some((got, ctx.now_ns() - t)));
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    let (got, waited) = result.take().unwrap();
    assert!(matches!(got, Ok(Acquired::TookOver { .. })), "{got:?}");
    assert!((50_000..200_000).contains(&waited), "waited {waited} ns");
    assert!(
        fenced.take().unwrap().is_err(),
        "the fenced holder still wrote"
    );
}

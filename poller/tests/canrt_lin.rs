//! CANRT's linearizability on the simulated cluster over many seeds (`remora_core::lincheck`):
//! 16 clients race on shared hot keys (upserts, updates, deletes, gets, scans) while the
//! tree splits, READ and WRITE segments landing in shuffled order (and ascending, the old
//! fabric), with and without delayed messages. `CANRT_LIN_SEEDS=n` runs seeds 1..=n of each
//! variant (CI: 3). One variant runs a tree of 16-byte keys (the paper's width).
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer, ServerStats};
use remora_core::fabric::SegmentOrder;
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, Recorder, Report, check};
use remora_poller::sim::{Faults, Sim, SimConfig};
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

const CLIENTS: u32 = 16;
const OPS: u64 = 300;

/// One history of 16 clients on one seed, checked.
fn history(seed: u64, order: SegmentOrder, delays: bool, slots: u32, key_len: u32) -> Report {
    let faults = if delays {
        Faults::none().delays(0.05, 20_000)
    } else {
        Faults::none()
    };
    let cfg = CanrtConfig {
        slots,
        key_len,
        ..CanrtConfig::new(0)
    };
    history_with(seed, order, faults, cfg, 0).0
}

/// Live keys of the churn before a history (see [`history_with`]), above every key the
/// history uses.
const WARM_LIVE: u64 = 400;
const WARM_BASE: u64 = 0xFFFF_0000_0000_0000;

/// One history of 16 clients on one seed with these faults and client settings, checked;
/// the server's counters. With `warm` > 0, one client first churns `warm` times over
/// [`WARM_LIVE`] ascending keys of its own (rebuilds that retire arrays) and deletes them
/// all before the history begins. Also returns the arrays reused before the history.
fn history_with(
    seed: u64,
    order: SegmentOrder,
    faults: Faults,
    cfg: CanrtConfig,
    warm: u64,
) -> (Report, Arc<ServerStats>, u64) {
    let key_len = cfg.key_len;
    let rec = Recorder::new(
        (CLIENTS as u64 * OPS) as usize,
        (CLIENTS as u64 * OPS * 17) as usize,
    );
    let errors = RefCell::new(Vec::<String>::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        faults,
        segment_order: order,
        ..SimConfig::default()
    })
    .unwrap();
    let server = CanrtServer::new();
    let stats = server.stats();
    sim.set_handler(0, Box::new(server)).unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, move |ctx| async move {
        let t = Canrt::open(ctx.ep(), cfg).await.unwrap();
        let key = |i: u64| (WARM_BASE + i).to_be_bytes();
        let live = if warm > 0 { WARM_LIVE } else { 0 };
        for i in 0..live {
            t.upsert(&key(i), &i.to_le_bytes()).await.unwrap();
        }
        for i in 0..warm {
            assert!(t.delete(&key(i)).await.unwrap());
            t.upsert(&key(live + i), &i.to_le_bytes()).await.unwrap();
        }
        for i in warm..warm + live {
            assert!(t.delete(&key(i)).await.unwrap());
        }
    });
    assert_eq!(sim.run().unfinished, 0, "seed {seed}: open did not finish");
    let reused_before = stats.arrays_reused.load(Ordering::Relaxed);
    for node in 0..4 {
        for c in 0..4u32 {
            let ctx = sim.client(node).unwrap();
            let (rec, errors) = (&rec, &errors);
            let client = 1 + node as u32 * 4 + c;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let t = match Canrt::open(ctx.ep(), cfg).await {
                    Ok(t) => t,
                    Err(e) => {
                        errors
                            .borrow_mut()
                            .push(format!("client {client}: open: {e}"));
                        return;
                    }
                };
                let spec = LinSpec {
                    cold: 32,
                    hot_percent: 60,
                    key_len: key_len as usize,
                    ..LinSpec::new(client, OPS, seed, true)
                };
                let clock = || ctx.now_ns();
                if let Err(e) = lin_client(&t, &spec, rec, &clock).await {
                    errors.borrow_mut().push(format!("client {client}: {e}"));
                }
            });
        }
    }
    let r = sim.run();
    let errs = errors.borrow();
    assert!(
        errs.is_empty(),
        "seed {seed}: {} clients failed, first: {}",
        errs.len(),
        errs[0]
    );
    assert_eq!(r.unfinished, 0, "seed {seed}: clients never finished");
    drop(errs);
    drop(sim);
    let h = rec.finish().expect("recorder sized for the workload");
    assert_eq!(h.events.len() as u64, CLIENTS as u64 * OPS);
    (check(&h, &CheckConfig::new(seed)), stats, reused_before)
}

fn seeds() -> u64 {
    std::env::var("CANRT_LIN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

fn run(name: &str, order: SegmentOrder, delays: bool, slots: u32) {
    run_keyed(name, order, delays, slots, 8)
}

fn run_keyed(name: &str, order: SegmentOrder, delays: bool, slots: u32, key_len: u32) {
    for seed in 1..=seeds() {
        let r = history(seed, order, delays, slots, key_len);
        println!("{name}: {r}");
        assert!(r.is_ok(), "{name}: {r}");
        assert!(r.scans > 50, "{name}: {r}");
    }
}

#[test]
fn canrt_is_linearizable_with_shuffled_segments() {
    run("shuffled", SegmentOrder::Shuffled, false, 8);
}

#[test]
fn canrt_is_linearizable_with_shuffled_segments_and_delays() {
    // Four slots a node: the tree splits all the time.
    run("shuffled+delays", SegmentOrder::Shuffled, true, 4);
}

#[test]
fn canrt_is_linearizable_with_ascending_segments() {
    run("ascending", SegmentOrder::Ascending, true, 8);
}

#[test]
fn canrt_is_linearizable_with_16_byte_keys() {
    run_keyed(
        "16-byte keys, shuffled+delays",
        SegmentOrder::Shuffled,
        true,
        4,
        16,
    );
}

/// Lock holders that stall past their lease between seeing their turn and their append
/// landing: leases of 20 us, and one message in 20 delayed by up to 60 us (an append's
/// WRITE_WITH_IMM among them). Waiters skip the stalled tickets, the next holders append,
/// and the stalled appends land late, into the slots the skips reserved for them. Before
/// the reservations, a late append landed on the next holder's acknowledged item (a later
/// get missed it, which the checker rejects).
#[test]
fn canrt_is_linearizable_when_holders_stall_past_short_leases() {
    let (mut skipped, mut late) = (0, 0);
    for seed in 1..=seeds() {
        let mut cfg = CanrtConfig {
            slots: 8,
            ..CanrtConfig::new(0)
        };
        cfg.lease.lease_ns = 20_000;
        let faults = Faults::none().delays(0.05, 60_000);
        let (r, st, _) = history_with(seed, SegmentOrder::Shuffled, faults, cfg, 0);
        let (s, l) = (
            st.skipped.load(Ordering::Relaxed),
            st.late.load(Ordering::Relaxed),
        );
        println!("stalls, seed {seed}: {r}; {s} tickets skipped, {l} late appends");
        assert!(r.is_ok(), "stalls, seed {seed}: {r}");
        assert_eq!(st.rejected.load(Ordering::Relaxed), 0, "seed {seed}");
        skipped += s;
        late += l;
    }
    assert!(
        skipped > 0 && late > 0,
        "no holder stalled: {skipped} skips, {late} late"
    );
}

/// Rebuilds that build their data array in a retired one's memory (issue 26: `pool.rs`)
/// while 16 clients race, some holders stall past 20 us leases (their late appends may
/// land in a retired array, or in one rebuilt there), and four-slot nodes keep the tree
/// splitting and rebuilding. Clients keep views of retired arrays, READ and FETCH_AND_ADD
/// in them after their memory is reused: histories stay linearizable.
#[test]
fn canrt_is_linearizable_while_retired_arrays_are_reused() {
    let (mut reused, mut late) = (0, 0);
    for seed in 1..=seeds() {
        let mut cfg = CanrtConfig {
            slots: 4,
            ..CanrtConfig::new(0)
        };
        cfg.lease.lease_ns = 20_000;
        let faults = Faults::none().delays(0.05, 60_000);
        let (r, st, before) = history_with(seed, SegmentOrder::Shuffled, faults, cfg, 3_300);
        let (u, l) = (
            st.arrays_reused.load(Ordering::Relaxed) - before,
            st.late.load(Ordering::Relaxed),
        );
        println!(
            "reuse, seed {seed}: {r}; {} arrays retired, {u} reused during the history, \
             {l} late appends",
            st.arrays_retired.load(Ordering::Relaxed)
        );
        assert!(r.is_ok(), "reuse, seed {seed}: {r}");
        reused += u;
        late += l;
    }
    assert!(
        reused > 0 && late > 0,
        "{reused} arrays reused, {late} late"
    );
}

//! Erda's baselines (Redo Logging, Read-After-Write) on the simulated cluster: the
//! linearizability checker over 16 clients racing on hot keys (the ring small enough to
//! wrap), several coroutines sharing one handle (replies handed over between them), and a
//! store that rejects a corrupt record.
use remora_core::erda::ErdaClientConfig;
use remora_core::erda::ErdaConfig;
use remora_core::erda::baseline::{Baseline, BaselineServer, Scheme};
use remora_core::fabric::{Endpoint, QueuePair};
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::LinSpec;
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_poller::executor::join_all;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

#[path = "common/crash_writes.rs"]
mod crash_writes;
#[path = "common/sim_run.rs"]
mod sim_run;
use crash_writes::{Writes, get_all, lost, writer_keys};
use sim_run::{lin_run, run_on, spawn_lin_clients};

const CLIENTS: u64 = 16;
const OPS: u64 = 250;

/// A store whose 64 KiB ring wraps a few times in a run.
fn store() -> ErdaConfig {
    ErdaConfig {
        buckets: 4096,
        segment_bytes: 8 << 10,
        head_bytes: 64 << 10,
        ..ErdaConfig::small()
    }
}

fn sim_cfg(seed: u64) -> SimConfig {
    SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 16 << 20,
        seed,
        ..SimConfig::default()
    }
}

fn linearizable(scheme: Scheme, seed: u64) {
    let rec = Recorder::new((CLIENTS * OPS) as usize, (CLIENTS * OPS * 17) as usize);
    let errors = RefCell::new(Vec::<String>::new());
    let mut sim = Sim::new(sim_cfg(seed)).unwrap();
    sim.set_handler(0, Box::new(BaselineServer::new(scheme, store())))
        .unwrap();
    let rec_r = &rec;
    spawn_lin_clients(&mut sim, &errors, |ctx, client, _| async move {
        let index = Baseline::open(ctx.ep(), scheme, ErdaClientConfig::default())
            .await
            .map_err(|e| e.to_string())?;
        let spec = LinSpec {
            cold: 32,
            ..LinSpec::new(client, OPS, seed, false)
        };
        lin_run(&index, &spec, rec_r, &ctx).await
    });
    let r = sim.run();
    let errs = errors.borrow();
    assert!(errs.is_empty(), "{scheme:?} seed {seed}: {errs:?}");
    assert_eq!(
        r.unfinished, 0,
        "{scheme:?} seed {seed}: clients never finished"
    );
    drop(errs);
    drop(sim);
    let h = rec.finish().expect("recorder sized for the workload");
    assert_eq!(h.events.len() as u64, CLIENTS * OPS);
    let report = check(&h, &CheckConfig::new(seed));
    println!("{scheme:?} seed {seed}: {report}");
    assert!(report.is_ok(), "{scheme:?} seed {seed}: {report}");
    assert!(report.keys > 100, "{report}");
}

#[test]
fn redo_logging_is_linearizable_on_the_sim() {
    for seed in 1..=2 {
        linearizable(Scheme::Redo, seed);
    }
}

#[test]
fn read_after_write_is_linearizable_on_the_sim() {
    for seed in 1..=2 {
        linearizable(Scheme::Raw, seed);
    }
}

/// Eight coroutines share one handle (one queue pair): every reply reaches its own request,
/// values of 1 KiB and more travel both ways, and everything reads back after a drain.
#[test]
fn coroutines_share_a_handle_and_large_values_round_trip() {
    for scheme in [Scheme::Redo, Scheme::Raw] {
        let failures = RefCell::new(Vec::<String>::new());
        let handed = RefCell::new(0u64);
        let mut sim = Sim::new(sim_cfg(7)).unwrap();
        let big = ErdaConfig {
            head_bytes: 1 << 20,
            ..store()
        };
        sim.set_handler(0, Box::new(BaselineServer::new(scheme, big)))
            .unwrap();
        let ctx = sim.client(0).unwrap();
        let (failures_r, handed_r) = (&failures, &handed);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let h = Baseline::open(ctx.ep(), scheme, ErdaClientConfig::default())
                .await
                .unwrap();
            let h = &h;
            let work = (0..8u64).map(|c| async move {
                let mut out = vec![0u8; 2048];
                for i in 0..20u64 {
                    let key = (c * 100 + i).to_be_bytes();
                    let v = vec![(c * 7 + i) as u8; 1000 + (i as usize * 50)];
                    h.upsert(&key, &v).await.map_err(|e| e.to_string())?;
                    let n = h.get(&key, &mut out).await.map_err(|e| e.to_string())?;
                    if n != Some(v.len()) || out[..v.len()] != v[..] {
                        return Err(format!("coroutine {c} key {i}: read {n:?}"));
                    }
                }
                Ok::<(), String>(())
            });
            for r in join_all(work.collect()).await {
                if let Err(e) = r {
                    failures_r.borrow_mut().push(e);
                }
            }
            assert_eq!(h.drain().await.unwrap(), 0, "everything applied");
            let mut out = vec![0u8; 2048];
            for c in 0..8u64 {
                let key = (c * 100 + 19).to_be_bytes();
                let n = h.get(&key, &mut out).await.unwrap();
                assert_eq!(n, Some(1000 + 19 * 50), "{scheme:?}: read from the table");
            }
            assert!(h.delete(&(5u64).to_be_bytes()).await.unwrap());
            assert!(!h.delete(&(5u64).to_be_bytes()).await.unwrap());
            assert!(!h.update(&(5u64).to_be_bytes(), b"x").await.unwrap());
            *handed_r.borrow_mut() = h.stats().handed_over;
        });
        let r = sim.run();
        assert_eq!(r.unfinished, 0, "{scheme:?}");
        let f = failures.borrow();
        assert!(f.is_empty(), "{scheme:?}: {f:?}");
        // Replies come back in request order, so the receiving coroutine mostly takes its
        // own; hand-overs happen when a coroutine's request overtakes another's.
        println!("{scheme:?}: {} replies handed over", handed.borrow());
    }
}

/// A Redo write whose record does not verify is refused (`BadRequest`), not logged, and the
/// connection goes on serving.
#[test]
fn a_corrupt_redo_record_is_refused() {
    let mut sim = Sim::new(sim_cfg(3)).unwrap();
    sim.set_handler(0, Box::new(BaselineServer::new(Scheme::Redo, store())))
        .unwrap();
    let ok = run_on(&mut sim, 0, async |ctx| {
        let h = Baseline::open(ctx.ep(), Scheme::Redo, ErdaClientConfig::default())
            .await
            .unwrap();
        h.upsert(b"k1", b"good").await.unwrap();
        // A hand-made Write request: header (op 3, seq 999), then a record with a bad CRC.
        let mut msg = vec![0u8; 16 + 8 + 2 + 4];
        msg[0] = 3;
        msg[8..12].copy_from_slice(&999u32.to_le_bytes());
        msg[16] = 1; // upsert
        msg[17] = 2;
        msg[18..20].copy_from_slice(&4u16.to_le_bytes());
        msg[20..24].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        msg[24..26].copy_from_slice(b"k1");
        msg[26..30].copy_from_slice(b"evil");
        let qp = ctx.ep().qp(0).unwrap();
        qp.send(&msg).await.unwrap();
        let mut buf = [0u8; 64];
        let r = qp.recv(&mut buf).await.unwrap();
        assert_eq!(r.len, 24);
        assert_eq!(buf[0], 5, "BadRequest");
        let mut out = [0u8; 8];
        assert_eq!(h.get(b"k1", &mut out).await.unwrap(), Some(4));
        assert_eq!(&out[..4], b"good");
        true
    });
    assert!(ok);
}

/// Every acknowledged write of 8 writers (and the newest one in flight) after a persistent
/// memory node crashes and restarts (the new server recovers on its first message): `(lost,
/// acknowledged)`. Up to `APPLY_LAG` acknowledged records wait in the ring at any time, so a
/// restart that did not replay them would lose writes.
fn node_crash(scheme: Scheme, seed: u64, crash_ns: u64) -> (Vec<String>, usize) {
    use remora_poller::sim::Faults;
    let cfg = SimConfig {
        compute_nodes: 2,
        memory_nodes: 1,
        region_len: 16 << 20,
        persistent: true,
        seed,
        faults: Faults::none().crash_node_at(0, crash_ns),
        ..SimConfig::default()
    };
    // A 16 KiB ring: about 680 of these records per lap, so it laps a few times before the
    // crash and recovery must find its window from the durable applied position.
    let small = ErdaConfig {
        head_bytes: 16 << 10,
        ..store()
    };
    let logs = RefCell::new(vec![Writes::default(); 8]);
    let mut sim = Sim::new(cfg.clone()).unwrap();
    sim.set_handler(0, Box::new(BaselineServer::new(scheme, small)))
        .unwrap();
    for c in 0..8u64 {
        let ctx = sim.client((c % 2) as usize).unwrap();
        let logs = &logs;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let Ok(h) = Baseline::open(ctx.ep(), scheme, ErdaClientConfig::default()).await else {
                return;
            };
            for i in 1..u64::MAX {
                let key = (c + 1) << 32 | (i * 7 % 20);
                logs.borrow_mut()[c as usize].in_flight = Some((key, i));
                let r = if i % 5 == 0 {
                    h.update(&key.to_be_bytes(), &i.to_le_bytes()).await
                } else {
                    h.upsert(&key.to_be_bytes(), &i.to_le_bytes())
                        .await
                        .map(|()| true)
                };
                let mut l = logs.borrow_mut();
                match r {
                    Ok(true) => {
                        l[c as usize].acked.insert(key, i);
                    }
                    Ok(false) => {}
                    Err(_) => return,
                }
                l[c as usize].in_flight = None;
            }
        });
    }
    assert_eq!(sim.run().unfinished, 0, "seed {seed}: writers hung");
    let images = sim.into_images();
    let found = RefCell::new(std::collections::BTreeMap::new());
    let keys = writer_keys(20);
    let mut sim = Sim::with_images(
        SimConfig {
            faults: Faults::none(),
            ..cfg
        },
        images,
    )
    .unwrap();
    sim.set_handler(0, Box::new(BaselineServer::new(scheme, small)))
        .unwrap();
    let ctx = sim.client(0).unwrap();
    let (found_ref, keys_ref) = (&found, &keys);
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let h = Baseline::open(ctx.ep(), scheme, ErdaClientConfig::default())
            .await
            .unwrap();
        *found_ref.borrow_mut() = get_all(&h, keys_ref).await;
        let mut out = [0u8; 8];
        h.upsert(b"after", &[1u8; 8]).await.unwrap();
        assert_eq!(h.get(b"after", &mut out).await.unwrap(), Some(8));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    lost(&logs.borrow(), &found.into_inner())
}

/// A persistent memory node crashes among 8 writers (the ring laps several times before); after the restart's replay every key holds its last acknowledged value or the
/// newer one in flight, for both baselines.
#[test]
fn a_memory_node_crash_loses_no_acknowledged_write() {
    for scheme in [Scheme::Redo, Scheme::Raw] {
        for seed in 1..=4u64 {
            let crash_ns = 1_500_000 + seed * 310_000 + seed * 1_337 % 9_000;
            let (lost, acked) = node_crash(scheme, seed, crash_ns);
            println!("{scheme:?} seed {seed}: {acked} keys acknowledged, none lost");
            assert!(
                acked > 100,
                "{scheme:?} seed {seed}: only {acked} acknowledged"
            );
            assert!(lost.is_empty(), "{scheme:?} seed {seed}: {lost:?}");
        }
    }
}

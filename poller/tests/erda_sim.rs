//! Erda on the simulated cluster: 4 compute nodes × 4 clients on one memory node running the
//! Erda server, every client running an oracle-checked history (no scans: a hash store),
//! tearing, shuffled READ/WRITE segments and jitter on, for several seeds; granted writes
//! that have not landed, and linearizability on hot keys. Writers that die or stall
//! mid-write in `erda_sim/writer_crash.rs`, a memory node crashing in
//! `erda_sim/node_crash.rs`.
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::fabric::{Op, QueuePair, SegmentOrder};
use remora_core::index::KvIndex;
use remora_core::kvcheck::{History, client_history};
use remora_layouts::GlobalAddr;
use remora_layouts::erda::{
    BUCKET_LEN, Bucket, OBJECT_MAX, Reply, ReqOp, Request, Status, decode_object, encode_object,
};
use remora_poller::sim::{ClientCtx, Faults, Sim, SimConfig, SimEndpoint};
use std::cell::RefCell;

fn histories(seed: u64, value_size: usize) {
    let failures = RefCell::new(Vec::<String>::new());
    let totals = RefCell::new((0u64, 0u64, 0u64));
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        segment_order: SegmentOrder::Shuffled,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    let cfg = ErdaClientConfig {
        value_size,
        ..ErdaClientConfig::default()
    };
    for node in 0..4 {
        for c in 0..4u64 {
            let ctx = sim.client(node).unwrap();
            let (failures, totals) = (&failures, &totals);
            let client = 1 + node as u64 * 4 + c;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let e = match Erda::open(ctx.ep(), cfg).await {
                    Ok(e) => e,
                    Err(err) => {
                        failures.borrow_mut().push(format!("open: {err}"));
                        return;
                    }
                };
                let h = History {
                    client,
                    ops: 400,
                    range: 100,
                    hot: 3,
                    seed,
                    value_size,
                    scans: false,
                };
                match client_history(&e, &h).await {
                    Ok(t) => {
                        let mut s = totals.borrow_mut();
                        s.0 += t.hot_reads;
                        s.1 += e.stats().fallbacks;
                        s.2 += e.stats().rereads;
                    }
                    Err(msg) => failures.borrow_mut().push(msg),
                }
            });
        }
    }
    let r = sim.run();
    let (hot_reads, fallbacks, rereads) = *totals.borrow();
    println!(
        "seed {seed}: {} ns virtual, {hot_reads} hot reads, {fallbacks} fallbacks to the \
         previous object, {rereads} re-reads",
        r.now_ns
    );
    assert!(hot_reads > 0, "no hot key was read");
    let f = failures.borrow();
    assert!(
        f.is_empty(),
        "seed {seed}: {} clients disagreed, first: {}",
        f.len(),
        f[0]
    );
    assert_eq!(r.unfinished, 0, "seed {seed}: clients never finished");
}

#[test]
fn erda_histories_on_the_sim_cluster() {
    for seed in 1..=4 {
        histories(seed, 8);
    }
    histories(5, 64);
}

#[test]
fn erda_sim_runs_are_deterministic() {
    let run = |seed| {
        let mut sim = Sim::new(SimConfig {
            compute_nodes: 2,
            seed,
            ..SimConfig::default()
        })
        .unwrap();
        sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
            .unwrap();
        for node in 0..2 {
            let ctx = sim.client(node).unwrap();
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
                    .await
                    .unwrap();
                let h = History {
                    client: 1 + node as u64,
                    ops: 200,
                    range: 50,
                    hot: 3,
                    seed,
                    value_size: 8,
                    scans: false,
                };
                client_history(&e, &h).await.unwrap();
            });
        }
        let r = sim.run();
        assert_eq!(r.unfinished, 0);
        (r.now_ns, sim.stats())
    };
    assert_eq!(format!("{:?}", run(3)), format!("{:?}", run(3)));
}

/// Sends a write request by hand through `e`'s mailbox (as `e` would) and returns the
/// server's reply, without writing any object: a client that stalls or dies after its grant.
async fn raw_request(
    ctx: &ClientCtx,
    e: &Erda<'_, SimEndpoint>,
    op: ReqOp,
    key: &[u8],
    value_len: usize,
) -> Reply {
    let qp = ctx.qp(0).unwrap();
    let req = Request::new(op, 77, key, value_len).unwrap().encode();
    qp.post(&mut [Op::WriteImm {
        remote: GlobalAddr::new(0, e.superblock().mailbox(e.client_id())),
        local: &req,
        imm: e.client_id(),
    }])
    .await
    .unwrap();
    let mut buf = [0u8; 64];
    let r = qp.recv(&mut buf).await.unwrap();
    Reply::decode(&buf[..r.len as usize]).unwrap()
}

/// What the three clients of [`delete_in_flight`] observed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Observed {
    /// Client 1's delete was granted (the key was present at its grant).
    delete_granted: bool,
    /// Client 2's update answer.
    update: Option<bool>,
    /// Client 3's get, started after client 2's update returned: the value's first byte.
    get: Option<Option<u8>>,
}

/// A hand-scheduled history on the sim: key K holds value 1. Client 1 asks the server to
/// delete K (its request is granted) and then stalls for a long time before writing anything
/// further (a slow writer: its own WRITE, if the protocol wants one, comes 2 ms later). While
/// it stalls, client 2 updates K to 2, and after that update has returned client 3 reads K.
fn delete_in_flight(seed: u64) -> Observed {
    let seen = RefCell::new(Observed::default());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 3,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    let cfg = ErdaClientConfig::default();
    const K: &[u8] = b"contested";
    // Client 1: creates K, then sends a raw delete request and stalls before its WRITE.
    let ctx = sim.client(0).unwrap();
    let s = &seen;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), cfg).await.unwrap();
        e.upsert(K, &[1u8; 8]).await.unwrap();
        ctx.sleep(20_000).await;
        let sb = e.superblock();
        let qp = ctx.qp(0).unwrap();
        let reply = raw_request(&ctx, &e, ReqOp::Delete, K, 0).await;
        let granted = reply.status == Status::Granted;
        s.borrow_mut().delete_granted = granted;
        // The slow writer: its delete object lands 2 ms later.
        ctx.sleep(2_000_000).await;
        if granted {
            let mut obj = [0u8; OBJECT_MAX];
            let n = encode_object(&mut obj, K, &[], true).unwrap();
            let at = sb.object_off(reply.head, reply.arg as u32).unwrap();
            qp.write(GlobalAddr::new(0, at), &obj[..n]).await.unwrap();
        }
    });
    // Client 2: updates K while client 1's delete is in flight.
    let ctx = sim.client(1).unwrap();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), cfg).await.unwrap();
        ctx.sleep(200_000).await;
        let r = e.update(K, &[2u8; 8]).await.unwrap();
        s.borrow_mut().update = Some(r);
    });
    // Client 3: reads K once client 2's update has returned.
    let ctx = sim.client(2).unwrap();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), cfg).await.unwrap();
        let mut waited = 0;
        while s.borrow().update.is_none() {
            ctx.sleep(1_000).await;
            waited += 1;
            assert!(waited < 1_000, "client 2's update never returned");
        }
        let mut out = [0u8; 8];
        let g = e.get(K, &mut out).await.unwrap();
        s.borrow_mut().get = Some(g.map(|_| out[0]));
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "seed {seed}: a client never finished");
    drop(sim);
    seen.into_inner()
}

/// Issue 9: the server used to answer update/delete from the log space it had *granted*,
/// while readers see only objects that have *landed*. With client 1's delete granted but not
/// landed, client 2's update answered "absent" and client 3's later get still returned the
/// old value: no sequential order explains both. Every outcome allowed by a linearization of
/// {delete (pending or done), update, then get} is listed here.
#[test]
fn an_update_racing_a_granted_delete_is_linearizable() {
    for seed in 1..=3 {
        let o = delete_in_flight(seed);
        assert!(
            o.delete_granted,
            "seed {seed}: the delete was not granted: {o:?}"
        );
        let allowed = [
            // delete, update (absent), get (absent)
            (Some(false), Some(None)),
            // update, get, delete (still pending when the get ran)
            (Some(true), Some(Some(2))),
            // update, delete, get
            (Some(true), Some(None)),
        ];
        assert!(
            allowed.contains(&(o.update, o.get)),
            "seed {seed}: not linearizable: {o:?}"
        );
    }
}

/// A writer dies after its upsert creating key J was granted (its object never lands).
/// Client 2 then deletes J; after that, client 3 reads J, updates it, and reads it again.
/// Returns (delete, get, update, get).
fn upsert_never_lands(seed: u64) -> (bool, Option<u8>, bool, Option<u8>) {
    type Seen = (Option<bool>, Option<u8>, bool, Option<u8>);
    let seen: RefCell<Seen> = RefCell::new((None, None, false, None));
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 3,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    let cfg = ErdaClientConfig::default();
    const J: &[u8] = b"never-written";
    let s = &seen;
    let ctx = sim.client(0).unwrap();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), cfg).await.unwrap();
        let reply = raw_request(&ctx, &e, ReqOp::Upsert, J, 8).await;
        assert_eq!(reply.status, Status::Granted);
        // Dies: never writes its object.
    });
    let ctx = sim.client(1).unwrap();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), cfg).await.unwrap();
        ctx.sleep(200_000).await;
        s.borrow_mut().0 = Some(e.delete(J).await.unwrap());
    });
    let ctx = sim.client(2).unwrap();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), cfg).await.unwrap();
        let mut waited = 0;
        // Client 2 waits out the dead writer's lease (100 ms), then fences it.
        while s.borrow().0.is_none() {
            ctx.sleep(100_000).await;
            waited += 1;
            assert!(waited < 10_000, "client 2's delete never returned");
        }
        let mut out = [0u8; 8];
        let g = e.get(J, &mut out).await.unwrap().map(|_| out[0]);
        let u = e.update(J, &[3u8; 8]).await.unwrap();
        let g2 = e.get(J, &mut out).await.unwrap().map(|_| out[0]);
        let mut w = s.borrow_mut();
        (w.1, w.2, w.3) = (g, u, g2);
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "seed {seed}: a client never finished");
    drop(sim);
    let (d, g, u, g2) = seen.into_inner();
    (d.unwrap(), g, u, g2)
}

/// The pending upsert may take effect at any point after its grant, or never; its value is
/// never readable. Every outcome a linearization allows is listed.
#[test]
fn a_dead_writers_grant_is_a_pending_write() {
    for seed in 1..=3 {
        let o = upsert_never_lands(seed);
        let allowed = [
            // upsert, delete, get, update (absent), get
            (true, None, false, None),
            // delete (absent), get, update (absent), get; the upsert never takes effect
            (false, None, false, None),
            // delete (absent), get, upsert, update, get
            (false, None, true, Some(3)),
        ];
        assert!(allowed.contains(&o), "seed {seed}: not linearizable: {o:?}");
    }
}

/// One sim run of `clients` lincheck workloads sharing 4 hot keys (and a few cold keys each)
/// on one Erda store; returns the checker's report.
fn lin_run(
    seed: u64,
    clients: u32,
    ops: u64,
    crash: Option<(u32, u64)>,
) -> remora_core::lincheck::Report {
    use remora_core::lincheck::driver::{LinSpec, lin_client};
    use remora_core::lincheck::{CheckConfig, Recorder, check};
    let rec = Recorder::new((clients as u64 * ops) as usize, 0);
    let errors = RefCell::new(Vec::<String>::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        segment_order: SegmentOrder::Shuffled,
        // A fifth of the messages late by up to 20 µs: objects land long after their grant,
        // so gets and conditional writes of other clients run inside that window.
        faults: match crash {
            Some((c, post)) => Faults::none().crash_client_at_post(c, post),
            None => Faults::none(),
        }
        .delays(0.2, 20_000),
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    let mut ids = Vec::new();
    for c in 0..clients {
        let ctx = sim.client(c as usize % 4).unwrap();
        ids.push(ctx.client_id());
        let (rec, errors) = (&rec, &errors);
        sim.spawn_with(&ctx, c as u64, move |ctx| async move {
            let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
                .await
                .unwrap();
            let spec = LinSpec {
                hot: 4,
                cold: 8,
                hot_percent: 80,
                ..LinSpec::new(1 + c, ops, seed, false)
            };
            let clock = || ctx.now_ns();
            if let Err(err) = lin_client(&e, &spec, rec, &clock).await {
                errors.borrow_mut().push(format!("client {c}: {err}"));
            }
        });
    }
    let r = sim.run();
    let dead = crash.is_some_and(|(c, _)| ids.contains(&c)) as usize;
    assert!(r.unfinished <= dead, "seed {seed}: clients never finished");
    drop(sim);
    let errors = errors.into_inner();
    assert!(errors.is_empty(), "seed {seed}: {errors:?}");
    let history = rec.finish().expect("recorder sized for every operation");
    check(&history, &CheckConfig::new(seed))
}

/// Erda's histories on shared hot keys (upsert, update, delete, get from 12 clients at once,
/// messages delayed, sometimes a client dying mid-operation) are linearizable, over many
/// seeds. (With the server answering from grants and clients writing their delete objects,
/// as before issue 9, seed 2 already fails.)
#[test]
fn erda_is_linearizable_with_late_messages_and_dead_clients() {
    // ERDA_LIN_SEEDS=400 for a longer sweep.
    let seeds: u64 = std::env::var("ERDA_LIN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let mut ops = 0;
    for seed in 1..=seeds {
        // Every third run, a client dies at some doorbell (maybe right after a grant).
        let crash = (seed % 3 == 0).then(|| (0, 100 + seed * 7));
        let report = lin_run(seed, 12, 150, crash);
        assert!(report.is_ok(), "{report}");
        ops += report.ops;
    }
    println!("erda lincheck: {ops} operations over {seeds} seeds, all linearizable");
}

#[path = "common/crash_writes.rs"]
mod crash_writes;
#[path = "erda_sim/node_crash.rs"]
mod node_crash;
#[path = "erda_sim/writer_crash.rs"]
mod writer_crash;

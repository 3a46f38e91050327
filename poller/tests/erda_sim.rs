//! Erda on the simulated cluster: 4 compute nodes × 4 clients on one memory node running the
//! Erda server, every client running an oracle-checked history (no scans: a hash store),
//! tearing, shuffled READ/WRITE segments and jitter on, for several seeds.
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

/// One run of [`a_writer_dying_at_any_verb_stalls_nobody_for_long`].
struct CrashRun {
    /// The victim died (its crash post was reached).
    crashed: bool,
    /// The longest any survivor's operation took, in virtual ns.
    stall_ns: u64,
    /// Writers the survivors fenced (grants left in flight by the victim).
    fenced: u64,
    now_ns: u64,
    ops: u64,
}

/// A victim client upserts the 4 hot keys in turn (`upserts` times) and dies at its `post`-th
/// doorbell; 6 survivors run lincheck workloads on the same hot keys meanwhile.
fn crash_run(seed: u64, post: u64, upserts: u32) -> CrashRun {
    use remora_core::lincheck::driver::{LinSpec, hot_key, lin_client};
    use remora_core::lincheck::{CheckConfig, Op as LinOp, Outcome, Recorder, check, tag};
    const SURVIVORS: u32 = 6;
    const OPS: u64 = 60;
    const VICTIM: u32 = 200;
    let rec = Recorder::new((SURVIVORS as u64 * OPS) as usize + upserts as usize, 0);
    let errors = RefCell::new(Vec::<String>::new());
    let fenced = RefCell::new(0u64);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        segment_order: SegmentOrder::Shuffled,
        faults: Faults::none()
            .crash_client_at_post(0, post)
            .delays(0.2, 20_000),
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    // The victim: client 0 of the sim.
    let ctx = sim.client(0).unwrap();
    assert_eq!(ctx.client_id(), 0);
    let r = &rec;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
            .await
            .unwrap();
        for i in 1..=upserts {
            let key = u64::from_be_bytes(hot_key(u64::from(i) % 4));
            let t = tag(VICTIM, i);
            let slot = r
                .invoke(VICTIM, LinOp::Upsert { key, value: t }, ctx.now_ns())
                .unwrap();
            e.upsert(&key.to_be_bytes(), &t.to_le_bytes())
                .await
                .unwrap();
            r.complete(slot, Outcome::Done, ctx.now_ns());
        }
    });
    for c in 0..SURVIVORS {
        let ctx = sim.client(1 + c as usize % 3).unwrap();
        let (rec, errors, fenced) = (&rec, &errors, &fenced);
        sim.spawn_with(&ctx, c as u64, move |ctx| async move {
            let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
                .await
                .unwrap();
            let spec = LinSpec {
                hot: 4,
                cold: 4,
                hot_percent: 80,
                ..LinSpec::new(1 + c, OPS, seed, false)
            };
            let clock = || ctx.now_ns();
            if let Err(err) = lin_client(&e, &spec, rec, &clock).await {
                errors.borrow_mut().push(format!("client {c}: {err}"));
            }
            *fenced.borrow_mut() += e.stats().fenced;
        });
    }
    let run = sim.run();
    assert!(
        run.unfinished <= 1,
        "seed {seed} post {post}: survivors hung"
    );
    drop(sim);
    let errors = errors.into_inner();
    assert!(
        errors.is_empty(),
        "seed {seed} post {post}: a survivor failed: {errors:?}"
    );
    let history = rec.finish().expect("recorder sized for every operation");
    let report = check(&history, &CheckConfig::new(seed));
    assert!(report.is_ok(), "seed {seed} post {post}: {report}");
    let stall_ns = history
        .events
        .iter()
        .filter(|e| e.client != VICTIM && e.ret_ns >= e.call_ns)
        .map(|e| e.ret_ns - e.call_ns)
        .max()
        .unwrap_or(0);
    CrashRun {
        crashed: run.unfinished == 1,
        stall_ns,
        fenced: fenced.into_inner(),
        now_ns: run.now_ns,
        ops: report.ops as u64,
    }
}

/// Issue 10: a writer dies at each doorbell of its upserts (posts 0 and 1 open its session;
/// each upsert is a request, then one doorbell with its object, the flushing READ and the
/// durable mark, so the crash points alternate between "request never sent" and "granted,
/// nothing written"), over seeds. The survivors never fail (no `Incomplete`, no `Held`),
/// their histories with the victim's are linearizable (its last upsert of unknown outcome),
/// a grant left in flight costs them about one lease (100 ms) and a fence, and virtual time
/// stays bounded.
#[test]
fn a_writer_dying_at_any_verb_stalls_nobody_for_long() {
    // ERDA_CRASH_SEEDS=50 for a longer sweep.
    let seeds: u64 = std::env::var("ERDA_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let lease = remora_core::erda::LEASE_NS;
    let (mut points, mut held, mut ops) = (0u64, 0u64, 0u64);
    // The longest survivor operation of each run, where the victim left a grant in flight,
    // and where it did not.
    let (mut stalls, mut others) = (Vec::new(), Vec::new());
    for seed in 1..=seeds {
        for post in 2..=9 {
            let run = crash_run(seed, post, 4);
            assert!(run.crashed, "seed {seed}: post {post} was never reached");
            assert!(
                run.now_ns < 20 * lease,
                "seed {seed} post {post}: {} ns of virtual time",
                run.now_ns
            );
            points += 1;
            held += (run.fenced > 0) as u64;
            ops += run.ops;
            if run.fenced > 0 {
                stalls.push(run.stall_ns);
            } else {
                others.push(run.stall_ns);
            }
            if run.fenced > 0 {
                assert!(run.stall_ns >= lease, "a fence before the lease ran out");
            }
            assert!(
                run.stall_ns < 3 * lease,
                "seed {seed} post {post}: a survivor waited {} ns",
                run.stall_ns
            );
        }
    }
    assert!(held > 0, "no crash left a grant in flight");
    assert!(held < points, "every crash left a grant in flight");
    let pct = |v: &mut Vec<u64>, p: usize| {
        v.sort_unstable();
        v[(v.len() * p / 100).min(v.len() - 1)]
    };
    println!(
        "erda dead writers: {points} crash points, {ops} operations, all linearizable. The \
         longest survivor operation of a run: {held} runs with a grant left in flight (its \
         writer fenced by a survivor): p50 {} ns, p99 {} ns; {} runs without: p50 {} ns, \
         p99 {} ns",
        pct(&mut stalls, 50),
        pct(&mut stalls, 99),
        others.len(),
        pct(&mut others, 50),
        pct(&mut others, 99),
    );
}

/// What one writer of [`node_crash`] had acknowledged, and what it had in flight.
#[derive(Debug, Clone, Default)]
struct Writes {
    acked: std::collections::BTreeMap<u64, u64>,
    in_flight: Option<(u64, u64)>,
}

/// 8 writers upsert their own keys (20 each, over and over) on a persistent memory node that
/// crashes at `crash_ns` and restarts (a fresh server recovers the store on the node's
/// image before anyone connects); then every key is read back. Returns the keys whose
/// recovered value is neither the last acknowledged one nor the one in flight, and how many
/// writes had been acknowledged.
/// Virtual time by which a persistent node has created an `ErdaConfig::small()` store.
const STORE_SETUP_NS: u64 = 5_000_000;

fn node_crash(seed: u64, crash_ns: u64, unflushed: bool) -> (Vec<String>, usize) {
    let cfg = SimConfig {
        compute_nodes: 2,
        memory_nodes: 1,
        region_len: 32 << 20,
        persistent: true,
        seed,
        segment_order: SegmentOrder::Shuffled,
        faults: Faults::none().crash_node_at(0, crash_ns),
        ..SimConfig::default()
    };
    let client = ErdaClientConfig {
        unflushed_writes: unflushed,
        ..ErdaClientConfig::default()
    };
    let logs = RefCell::new(vec![Writes::default(); 8]);
    let mut sim = Sim::new(cfg.clone()).unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    for c in 0..8u64 {
        let ctx = sim.client((c % 2) as usize).unwrap();
        let logs = &logs;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let Ok(e) = Erda::open(ctx.ep(), client).await else {
                return;
            };
            for i in 1..u64::MAX {
                let key = (c + 1) << 32 | (i * 7 % 20);
                logs.borrow_mut()[c as usize].in_flight = Some((key, i));
                if e.upsert(&key.to_be_bytes(), &i.to_le_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                let mut l = logs.borrow_mut();
                l[c as usize].acked.insert(key, i);
                l[c as usize].in_flight = None;
            }
        });
    }
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "seed {seed}: writers hung after the crash");
    let images = sim.into_images();
    let found = RefCell::new(std::collections::BTreeMap::new());
    let keys: Vec<u64> = (0..8u64)
        .flat_map(|c| (0..20u64).map(move |x| (c + 1) << 32 | x))
        .collect();
    // The restart: a fresh server on the persistent image (recovery runs on its first
    // message, before it answers anyone), and one reader.
    let mut sim = Sim::with_images(
        SimConfig {
            faults: Faults::none(),
            ..cfg.clone()
        },
        images,
    )
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    let ctx = sim.client(0).unwrap();
    let (found_ref, keys_ref) = (&found, &keys);
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
            .await
            .unwrap();
        let mut out = [0u8; 8];
        for &k in keys_ref {
            let got = e.get(&k.to_be_bytes(), &mut out).await.unwrap();
            found_ref
                .borrow_mut()
                .insert(k, got.map(|_| u64::from_le_bytes(out)));
        }
        // The recovered store takes writes.
        e.upsert(b"after", &[1u8; 8]).await.unwrap();
        assert_eq!(e.get(b"after", &mut out).await.unwrap(), Some(8));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let found = found.into_inner();
    let mut lost = Vec::new();
    let mut acked = 0;
    for (c, l) in logs.borrow().iter().enumerate() {
        acked += l.acked.len();
        for (k, v) in &l.acked {
            let got = found.get(k).copied().flatten();
            let in_flight = got.is_some() && l.in_flight == Some((*k, got.unwrap_or(0)));
            if got != Some(*v) && !in_flight {
                lost.push(format!(
                    "writer {c} key {k:#x}: acknowledged {v}, recovered {got:?}"
                ));
            }
        }
    }
    (lost, acked)
}

/// Issue 11: acknowledged means durable. A persistent memory node crashes among 8 writers,
/// over seeds and crash times; after recovery every key holds its last acknowledged value
/// (or the newer one in flight). The paper's write (no flushing READ) loses some.
#[test]
fn a_memory_node_crash_loses_no_acknowledged_write() {
    // ERDA_NODE_CRASH_SEEDS=100 for a longer sweep.
    let seeds: u64 = std::env::var("ERDA_NODE_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let (mut mutant_lost, mut keys) = (0, 0);
    for seed in 1..=seeds {
        // Crashes from 0.37 ms to 1.2 ms into the writing, at odd instants. Creating the
        // store comes first: on a persistent node its server persists the table line by line
        // (`nvm_write_ns` each), which takes a few ms of virtual time.
        let crash_ns = STORE_SETUP_NS + 200_000 + (seed % 6 + 1) * 170_000 + seed * 1_337 % 9_000;
        let (lost, acked) = node_crash(seed, crash_ns, false);
        assert!(
            acked > 50,
            "seed {seed}: only {acked} writes before the crash"
        );
        assert!(lost.is_empty(), "seed {seed}: {lost:?}");
        keys += acked;
        mutant_lost += node_crash(seed, crash_ns, true).0.len();
    }
    assert!(mutant_lost > 0, "unflushed writes survived every crash");
    println!(
        "erda node crashes: {seeds} crashes, {keys} acknowledged keys checked after recovery, \
         none lost; with unflushed writes {mutant_lost} lost"
    );
}

/// A writer stalls after its object landed whole but before its durable mark (a slow
/// process, not a dead one). A reader sees the object; an updater waits one lease, fences the
/// writer and has the server adopt the object (a durable copy); then the update lands. The
/// stalled writer's late mark is refused by the fence. Returns (first get, update, second
/// get, the late mark's result was an error, the updater's fences, virtual ns the update took,
/// the value of the object the word names before the update's).
fn stalled_whole_writer(seed: u64) -> (Option<u8>, bool, Option<u8>, bool, u64, u64, Option<u8>) {
    type Seen = (
        Option<u8>,
        Option<bool>,
        Option<u8>,
        Option<bool>,
        u64,
        u64,
        Option<u8>,
    );
    let seen: RefCell<Seen> = RefCell::new((None, None, None, None, 0, 0, None));
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        segment_order: SegmentOrder::Shuffled,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    const K: &[u8] = b"stalled";
    let s = &seen;
    let ctx = sim.client(0).unwrap();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
            .await
            .unwrap();
        e.upsert(K, &[1u8; 8]).await.unwrap();
        let reply = raw_request(&ctx, &e, ReqOp::Upsert, K, 8).await;
        assert_eq!(reply.status, Status::Granted);
        let units = reply.arg as u32;
        let at = GlobalAddr::new(0, e.superblock().object_off(reply.head, units).unwrap());
        let mut obj = [0u8; OBJECT_MAX];
        let n = encode_object(&mut obj, K, &[2u8; 8], false).unwrap();
        let qp = ctx.qp(0).unwrap();
        qp.write(at, &obj[..n]).await.unwrap();
        // Stalls for 500 ms before its durable mark.
        ctx.sleep(500_000_000).await;
        let mark = remora_layouts::erda::durable_mark(units).to_le_bytes();
        s.borrow_mut().3 = Some(qp.write(at.add(n as u64), &mark).await.is_err());
    });
    let ctx = sim.client(1).unwrap();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
            .await
            .unwrap();
        ctx.sleep(200_000).await;
        let mut out = [0u8; 8];
        let g = e.get(K, &mut out).await.unwrap().map(|_| out[0]);
        let t = ctx.now_ns();
        let u = e.update(K, &[3u8; 8]).await.unwrap();
        let took = ctx.now_ns() - t;
        let g2 = e.get(K, &mut out).await.unwrap().map(|_| out[0]);
        // The word now names the update and, before it, the adopted copy (not the value 1
        // from before the stalled write, as a revert would have left).
        let sb = e.superblock();
        let qp = ctx.qp(0).unwrap();
        let mut nb = vec![0u8; sb.neighborhood as usize * BUCKET_LEN];
        let home = GlobalAddr::new(0, sb.bucket_off(sb.home(K)));
        qp.read(home, &mut nb).await.unwrap();
        let b = nb
            .chunks(BUCKET_LEN)
            .filter_map(|c| Bucket::decode(c).ok())
            .find(|b| b.holds(K))
            .unwrap();
        let mut obj = [0u8; 64];
        let old = sb.object_off(b.head(), b.meta().old_off()).unwrap();
        qp.read(GlobalAddr::new(0, old), &mut obj).await.unwrap();
        let before = decode_object(&obj).ok().map(|o| o.value[0]);
        let mut w = s.borrow_mut();
        (w.0, w.1, w.2, w.4, w.5) = (g, Some(u), g2, e.stats().fenced, took);
        w.6 = before;
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "seed {seed}: a client never finished");
    drop(sim);
    let (g, u, g2, late, fenced, took, before) = seen.into_inner();
    (g, u.unwrap(), g2, late.unwrap(), fenced, took, before)
}

#[test]
fn a_stalled_writers_whole_object_is_adopted_after_a_fence() {
    let lease = remora_core::erda::LEASE_NS;
    for seed in 1..=3 {
        let (g, u, g2, late_refused, fenced, took, before) = stalled_whole_writer(seed);
        assert_eq!(before, Some(2), "seed {seed}: the object before the update");
        assert_eq!(g, Some(2), "seed {seed}: the whole object is the value");
        assert!(u, "seed {seed}: the update found the key");
        assert_eq!(g2, Some(3), "seed {seed}");
        assert!(late_refused, "seed {seed}: the fenced writer's mark landed");
        assert_eq!(fenced, 1, "seed {seed}");
        assert!(
            (lease..2 * lease).contains(&took),
            "seed {seed}: the update took {took} ns"
        );
    }
}

/// A handle's own request whose reply was never taken (here: sent by hand through its
/// mailbox and its grant never written) is an orphan: the handle's next write of the key
/// settles it at once, with no lease and no fence.
#[test]
fn a_handles_orphaned_grant_is_settled_without_a_lease() {
    let out = RefCell::new(None);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed: 7,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    const K: &[u8] = b"orphan";
    let ctx = sim.client(0).unwrap();
    let o = &out;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
            .await
            .unwrap();
        e.upsert(K, &[1u8; 8]).await.unwrap();
        let reply = raw_request(&ctx, &e, ReqOp::Upsert, K, 8).await;
        assert_eq!(reply.status, Status::Granted);
        let t = ctx.now_ns();
        e.upsert(K, &[2u8; 8]).await.unwrap();
        let took = ctx.now_ns() - t;
        let mut v = [0u8; 8];
        let got = e.get(K, &mut v).await.unwrap().map(|_| v[0]);
        *o.borrow_mut() = Some((took, got, e.stats()));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let (took, got, st) = out.into_inner().unwrap();
    assert_eq!(got, Some(2));
    assert_eq!((st.busy, st.fenced), (1, 0), "{st:?}");
    assert!(
        took < remora_core::erda::LEASE_NS / 100,
        "the orphan cost {took} ns"
    );
}

//! Erda on the soft fabric (real threads, real tearing between 8-byte words): a single
//! client against a BTreeMap, concurrent oracle-checked histories, torn and corrupt objects
//! never returned, the server refusing bad requests, recovery after a crash, and the verbs
//! and round trips per operation.
use remora_core::GlobalAddr;
use remora_core::block_on::block_on;
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaError, ErdaServer};
use remora_core::fabric::{Endpoint, Op, QueuePair, Recv, RecvKind, Verb};
use remora_core::index::KvIndex;
use remora_core::kvcheck::{History, client_history};
use remora_core::lease::LeaseConfig;
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::erda::{
    Bucket, HELLO, Reply, ReqOp, Request, Status, Superblock, decode_object, durable_mark,
    encode_object, hello, object_len,
};
use remora_poller::executor::run_coroutines;
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;

#[path = "common/erda_direct.rs"]
mod erda_direct;
#[path = "common/mem_region.rs"]
mod mem_region;
use mem_region::{CrashImages, MemRegion};

fn node() -> Arc<SoftMemoryNode> {
    SoftMemoryNode::create_with(
        NodeConfig {
            region_len: 32 << 20,
            ..NodeConfig::default()
        },
        Box::new(ErdaServer::new(ErdaConfig::small())),
    )
    .unwrap()
}

fn k(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

async fn get(e: &Erda<'_, SoftEndpoint>, key: u64) -> Option<u64> {
    let mut out = [0u8; 64];
    e.get(&k(key), &mut out)
        .await
        .unwrap()
        .map(|n| u64::from_le_bytes(out[..8].try_into().unwrap()) + n as u64 - 8)
}

fn val(x: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[..8].copy_from_slice(&x.to_le_bytes());
    v
}

#[test]
fn single_client_matches_a_btreemap() {
    let n = node();
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let e = Erda::open(&ep, ErdaClientConfig::default()).await.unwrap();
        let mut oracle: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
        let mut rng = 0x1234_5678_9abc_def1u64;
        for i in 0..3000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let key = rng % 300;
            // Values of 8 to 64 bytes: longer than the read hint takes a second READ.
            let len = 8 + (rng >> 50) as usize % 57;
            match (rng >> 32) % 10 {
                0..=3 => {
                    e.upsert(&k(key), &val(i, len)).await.unwrap();
                    oracle.insert(key, (i, len));
                }
                4 => {
                    let present = e.update(&k(key), &val(i, len)).await.unwrap();
                    assert_eq!(present, oracle.contains_key(&key), "update {key}");
                    if present {
                        oracle.insert(key, (i, len));
                    }
                }
                5 | 6 => {
                    let present = e.delete(&k(key)).await.unwrap();
                    assert_eq!(present, oracle.remove(&key).is_some(), "delete {key}");
                }
                _ => {
                    let want = oracle.get(&key).map(|(x, l)| x + *l as u64 - 8);
                    assert_eq!(get(&e, key).await, want, "get {key}");
                }
            }
        }
        for (key, (x, l)) in &oracle {
            assert_eq!(get(&e, *key).await, Some(x + *l as u64 - 8));
        }
        assert!(
            e.stats().long_reads > 0,
            "no value longer than the read hint"
        );
        assert_eq!(e.stats().fallbacks, 0, "a lone client never falls back");
        // Bad input: clear errors, no panic.
        let mut out = [0u8; 4];
        assert!(matches!(
            e.upsert(&[0u8; 17], b"x").await,
            Err(ErdaError::BadKey { len: 17 })
        ));
        assert!(matches!(
            e.upsert(b"", b"x").await,
            Err(ErdaError::BadKey { len: 0 })
        ));
        assert!(matches!(
            e.upsert(b"k", &vec![0u8; 4097]).await,
            Err(ErdaError::ValueTooLong { .. })
        ));
        e.upsert(b"long", &[1u8; 100]).await.unwrap();
        assert!(matches!(
            e.get(b"long", &mut out).await,
            Err(ErdaError::BufferTooSmall { len: 4, need: 100 })
        ));
        assert!(matches!(
            e.scan(&k(0), 10, &mut |_, _| {}).await,
            Err(ErdaError::Unsupported { .. })
        ));
        // String keys up to 16 bytes and a 4 KiB value.
        let big = vec![0xA5u8; 4096];
        e.upsert(b"sixteen-byte-key", &big).await.unwrap();
        let mut out = vec![0u8; 4096];
        assert_eq!(
            e.get(b"sixteen-byte-key", &mut out).await.unwrap(),
            Some(4096)
        );
        assert_eq!(out, big);
    });
}

/// Values on both sides of the client's small object buffer (512 B: objects of up to 480-B
/// values with an 8-byte key) up to the largest, read back whole, with a neighborhood of 32
/// buckets (past the small neighborhood buffer of 16) and a value-size hint of 8 (small first
/// READ) or 1024 (large first READ, whose object may be shorter).
#[test]
fn values_past_the_small_buffers_read_back_whole() {
    for hint in [8usize, 1024] {
        let n = SoftMemoryNode::create_with(
            NodeConfig {
                region_len: 32 << 20,
                ..NodeConfig::default()
            },
            Box::new(ErdaServer::new(ErdaConfig {
                neighborhood: 32,
                ..ErdaConfig::small()
            })),
        )
        .unwrap();
        let _srv = n.spawn_server();
        let ep = n.endpoint().unwrap();
        block_on(async {
            let cfg = ErdaClientConfig {
                value_size: hint,
                ..ErdaClientConfig::default()
            };
            let e = Erda::open(&ep, cfg).await.unwrap();
            assert_eq!(e.superblock().neighborhood, 32);
            let lens = [8usize, 472, 480, 488, 496, 1000, 1024, 2048, 4095, 4096];
            let value = |i: usize, len: usize| -> Vec<u8> {
                (0..len).map(|j| (i * 31 + j * 7) as u8 | 1).collect()
            };
            for (i, &len) in lens.iter().enumerate() {
                e.upsert(&k(i as u64), &value(i, len)).await.unwrap();
            }
            let mut out = vec![0u8; 4096];
            for (i, &len) in lens.iter().enumerate() {
                let got = e.get(&k(i as u64), &mut out).await.unwrap();
                assert_eq!(got, Some(len), "length of value {i}, hint {hint}");
                assert!(
                    out[..len] == value(i, len)[..],
                    "bytes of value {i}, hint {hint}"
                );
            }
            assert_eq!(e.get(&k(99), &mut out).await.unwrap(), None);
            let long = e.stats().long_reads;
            assert!(long > 0, "a value longer than the hint took a second READ");
        });
    }
}

#[test]
fn verbs_and_round_trips_per_operation() {
    let n = node();
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let e = Erda::open(&ep, ErdaClientConfig::default()).await.unwrap();
        for i in 0..100u64 {
            e.upsert(&k(i), &val(i, 8)).await.unwrap();
        }
        let before = ep.snapshot();
        for i in 0..100u64 {
            e.upsert(&k(i), &val(i + 1, 8)).await.unwrap();
        }
        let put = ep.snapshot() - before;
        let before = ep.snapshot();
        for i in 0..100u64 {
            assert_eq!(get(&e, i).await, Some(i + 1));
        }
        let got = ep.snapshot() - before;
        let before = ep.snapshot();
        for i in 1000..1100u64 {
            assert_eq!(get(&e, i).await, None);
        }
        let miss = ep.snapshot() - before;
        let per = |s: remora_core::Snapshot, v: Verb| s.verb(v) as f64 / 100.0;
        println!(
            "erda put: {:.2} WRITE_WITH_IMM + {:.2} WRITE + {:.2} READ + {:.2} RECV, {:.2} round \
             trips, {:.1} B out, {:.1} B in",
            per(put, Verb::WriteImm),
            per(put, Verb::Write),
            per(put, Verb::Read),
            per(put, Verb::Recv),
            put.round_trips as f64 / 100.0,
            put.bytes_out as f64 / 100.0,
            put.bytes_in as f64 / 100.0
        );
        println!(
            "erda get (hit): {:.2} READ, {:.2} round trips, {:.1} B in; get (miss): {:.2} READ, \
             {:.2} round trips",
            per(got, Verb::Read),
            got.round_trips as f64 / 100.0,
            got.bytes_in as f64 / 100.0,
            per(miss, Verb::Read),
            miss.round_trips as f64 / 100.0
        );
        // The paper's costs: a get is two one-sided round trips, a put one request and one
        // WRITE. Each get doorbell also READs the head state words (issue 12: the epoch a
        // get checks across a log cleaning), so four READs in two round trips.
        assert_eq!(got.verb(Verb::Read), 400);
        assert_eq!(got.posted_verbs(), 400, "no server CPU on reads");
        // A miss cannot trust one READ whose words may be observed in any order: the fast
        // doorbell, then one validated doorbell (stripe words, neighborhood, stripe words).
        assert_eq!(miss.verb(Verb::Read), 500);
        assert_eq!(miss.round_trips, 200);
        assert_eq!(got.round_trips, 200);
        assert_eq!(e.stats().validated, 100, "only the misses were validated");
        // The request, then one doorbell: the object, the READ that flushes it, the durable
        // mark.
        assert_eq!(put.verb(Verb::WriteImm), 100);
        assert_eq!(put.verb(Verb::Write), 200);
        assert_eq!(put.verb(Verb::Read), 100);
        assert_eq!(put.round_trips, 200);
        // A delete is one request: the server writes the deleted object.
        let before = ep.snapshot();
        for i in 0..100u64 {
            assert!(e.delete(&k(i)).await.unwrap());
        }
        let del = ep.snapshot() - before;
        println!(
            "erda delete: {:.2} WRITE_WITH_IMM + {:.2} WRITE, {:.2} round trips",
            per(del, Verb::WriteImm),
            per(del, Verb::Write),
            del.round_trips as f64 / 100.0
        );
        assert_eq!(del.verb(Verb::WriteImm), 100);
        assert_eq!(del.verb(Verb::Write), 0);
    });
}

#[test]
fn concurrent_histories_on_threads() {
    let n = node();
    let _srv = n.spawn_server();
    let failures = Mutex::new(Vec::<String>::new());
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (n, failures) = (&n, &failures);
            s.spawn(move || {
                let ep = n.endpoint().unwrap();
                // No writer dies here: a lease far above any scheduler stall of a loaded
                // 2-core CI machine (10 ms ones were seen), so no live writer is fenced.
                let cfg = ErdaClientConfig {
                    lease: LeaseConfig {
                        lease_ns: 5_000_000_000,
                        deadline_ns: 60_000_000_000,
                        ..LeaseConfig::default()
                    },
                    ..ErdaClientConfig::default()
                };
                let e = block_on(Erda::open(&ep, cfg)).unwrap();
                let e = &e;
                // Two coroutines per thread share one handle (and its mailbox).
                let coros: Vec<_> = (0..2u64)
                    .map(|c| async move {
                        let h = History {
                            client: 1 + t * 2 + c,
                            ops: 1500,
                            range: 100,
                            hot: 3,
                            seed: 7,
                            value_size: 16,
                            scans: false,
                        };
                        client_history(e, &h).await
                    })
                    .collect();
                for r in run_coroutines(coros) {
                    match r {
                        // kvcheck picks a hot key and read-or-write from the same random
                        // word: an odd number of hot keys keeps both happening on each.
                        Ok(t) => assert!(t.hot_reads > 0, "no hot key was read"),
                        Err(msg) => failures.lock().unwrap().push(msg),
                    }
                }
                let st = e.stats();
                if st.fenced > 0 {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("thread {t} fenced {} live writers", st.fenced));
                }
            });
        }
    });
    let f = failures.lock().unwrap();
    assert!(f.is_empty(), "{} histories failed: {:?}", f.len(), &f[..]);
}

/// The object the metadata word of `key` names as newest (or previous), as a remote address.
fn object_of(
    e: &Erda<'_, SoftEndpoint>,
    ep: &SoftEndpoint,
    key: &[u8],
    newest: bool,
) -> GlobalAddr {
    let sb = e.superblock();
    let qp = ep.qp(0).unwrap();
    let home = sb.home(key);
    let mut buf = vec![0u8; sb.neighborhood as usize * 32];
    block_on(qp.read(GlobalAddr::new(0, sb.bucket_off(home)), &mut buf)).unwrap();
    let b = buf
        .chunks(32)
        .map(|c| Bucket::decode(c).unwrap())
        .find(|b| b.holds(key))
        .unwrap();
    let m = b.meta();
    let units = if newest { m.new_off() } else { m.old_off() };
    GlobalAddr::new(0, sb.object_off(b.head(), units).unwrap())
}

#[test]
fn torn_and_corrupt_objects_are_never_returned() {
    let n = node();
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    let cfg = ErdaClientConfig {
        lease: LeaseConfig {
            deadline_ns: 5_000_000_000,
            max_attempts: 20,
            ..LeaseConfig::default()
        },
        ..ErdaClientConfig::default()
    };
    block_on(async {
        let e = Erda::open(&ep, cfg).await.unwrap();
        let qp = ep.qp(0).unwrap();
        e.upsert(b"key", &val(1, 32)).await.unwrap();
        e.upsert(b"key", &val(2, 32)).await.unwrap();
        // Tear the newest object: one word of it is from "another write".
        let newest = object_of(&e, &ep, b"key", true);
        qp.write(newest.add(24), &[0xFFu8; 8]).await.unwrap();
        let mut out = [0u8; 64];
        assert_eq!(e.get(b"key", &mut out).await.unwrap(), Some(32));
        assert_eq!(
            u64::from_le_bytes(out[..8].try_into().unwrap()),
            1,
            "fell back to the old"
        );
        assert_eq!(e.stats().fallbacks, 1);
        // Corrupt the previous one too: an error after bounded re-reads, never garbage.
        let old = object_of(&e, &ep, b"key", false);
        qp.write(old.add(8), &[0u8; 8]).await.unwrap();
        assert!(matches!(
            e.get(b"key", &mut out).await,
            Err(ErdaError::Incomplete { .. })
        ));
        // A new write makes the key readable again.
        e.upsert(b"key", &val(3, 32)).await.unwrap();
        assert_eq!(e.get(b"key", &mut out).await.unwrap(), Some(32));
        assert_eq!(u64::from_le_bytes(out[..8].try_into().unwrap()), 3);
        // A first object never written (its writer died after the grant): absent, not garbage.
        e.upsert(b"fresh", &val(9, 32)).await.unwrap();
        let fresh = object_of(&e, &ep, b"fresh", true);
        qp.write(fresh, &[0u8; 48]).await.unwrap();
        assert_eq!(e.get(b"fresh", &mut out).await.unwrap(), None);
    });
}

#[test]
fn the_server_refuses_bad_requests() {
    let n = node();
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    let ep2 = n.endpoint().unwrap();
    block_on(async {
        let e = Erda::open(&ep, ErdaClientConfig::default()).await.unwrap();
        let e2 = Erda::open(&ep2, ErdaClientConfig::default()).await.unwrap();
        assert_ne!(e.client_id(), e2.client_id());
        let sb = e.superblock();
        let qp2 = ep2.qp(0).unwrap();
        let mut buf = [0u8; 64];
        let mut reply = |qp: &remora_poller::soft::SoftQp| {
            let r = block_on(qp.recv(&mut buf)).unwrap();
            Reply::decode(&buf[..r.len as usize]).unwrap()
        };
        // Another client's mailbox id: refused.
        let req = Request::new(ReqOp::Upsert, 1, b"x", 8).unwrap().encode();
        qp2.post(&mut [Op::WriteImm {
            remote: GlobalAddr::new(0, sb.mailbox(e.client_id())),
            local: &req,
            imm: e.client_id(),
        }])
        .await
        .unwrap();
        assert_eq!(reply(qp2).status, Status::BadRequest);
        // Garbage in its own mailbox: refused.
        qp2.post(&mut [Op::WriteImm {
            remote: GlobalAddr::new(0, sb.mailbox(e2.client_id())),
            local: &[0xEEu8; 24],
            imm: e2.client_id(),
        }])
        .await
        .unwrap();
        assert_eq!(reply(qp2).status, Status::BadRequest);
        // An unknown SEND and an out-of-range client id: refused.
        qp2.send(b"what?").await.unwrap();
        assert_eq!(reply(qp2).status, Status::BadRequest);
        qp2.post(&mut [Op::WriteImm {
            remote: GlobalAddr::new(0, sb.mailbox(0)),
            local: &[0u8; 8],
            imm: 1 << 30,
        }])
        .await
        .unwrap();
        assert_eq!(reply(qp2).status, Status::BadRequest);
        // Both handles still work.
        e.upsert(b"a", b"12345678").await.unwrap();
        e2.upsert(b"b", b"87654321").await.unwrap();
        let mut out = [0u8; 8];
        assert_eq!(e2.get(b"a", &mut out).await.unwrap(), Some(8));
        assert_eq!(&out, b"12345678");
        assert!(!e.update(b"nope", b"x").await.unwrap());
        assert!(!e.delete(b"nope").await.unwrap());
    });
}

// ------------------------------------------------------------- server alone: recovery

#[path = "erda_soft/server_alone.rs"]
mod server_alone;

/// Linearizability on soft threads (what `remora check --linearizability --index erda
/// --fabric soft` runs): 4 threads × 4 coroutines, the coroutines of a thread sharing one
/// handle; every client's errors and every handle's fences are reported.
fn soft_lin(seed: u64, lease: LeaseConfig) -> (remora_core::lincheck::Report, Vec<String>) {
    use remora_core::lincheck::driver::{LinSpec, lin_client};
    use remora_core::lincheck::{CheckConfig, History, Recorder, check};
    let n = node();
    let _srv = n.spawn_server();
    let start = std::time::Instant::now();
    let errors = Mutex::new(Vec::<String>::new());
    let parts: Vec<History> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u32)
            .map(|th| {
                let (n, errors) = (&n, &errors);
                s.spawn(move || {
                    let ep = n.endpoint().unwrap();
                    let cfg = ErdaClientConfig {
                        lease,
                        ..ErdaClientConfig::default()
                    };
                    let e = block_on(Erda::open(&ep, cfg)).unwrap();
                    let rec = Recorder::new(4 * 150, 0);
                    let clock = || start.elapsed().as_nanos() as u64;
                    let futs: Vec<_> = (0..4u32)
                        .map(|c| {
                            let spec = LinSpec {
                                hot: 4,
                                cold: 16,
                                hot_percent: 50,
                                ..LinSpec::new(1 + th * 4 + c, 150, seed, false)
                            };
                            let (e, rec, clock) = (&e, &rec, &clock);
                            async move { lin_client(e, &spec, rec, clock).await }
                        })
                        .collect();
                    for (c, r) in run_coroutines(futs).into_iter().enumerate() {
                        if let Err(err) = r {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("client {}: {err}", th as usize * 4 + c));
                        }
                    }
                    if e.stats().fenced > 0 {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("thread {th} fenced {} writers", e.stats().fenced));
                    }
                    rec.finish().unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let history = History::merge(parts);
    (
        check(&history, &CheckConfig::new(seed)),
        errors.into_inner().unwrap(),
    )
}

/// No writer dies here, so a lease far above any stall: with spinning waiters and this
/// binary's other tests on a loaded 2-core machine, a server reply was seen to take over 1 s
/// (the default 100 ms lease then fences live writers; run alone, it did not in 6 runs).
#[test]
fn erda_is_linearizable_on_soft_threads() {
    let lease = LeaseConfig {
        lease_ns: 5_000_000_000,
        deadline_ns: 60_000_000_000,
        ..LeaseConfig::default()
    };
    for seed in 1..=2 {
        let (report, errors) = soft_lin(seed, lease);
        assert!(errors.is_empty(), "seed {seed}: {errors:?}");
        assert!(report.is_ok(), "seed {seed}: {report}");
    }
}

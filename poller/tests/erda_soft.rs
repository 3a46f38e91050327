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

/// A memory node's region in a test: plain bytes behind a lock; while recording, the image at
/// every persistence point (a crash right after it).
type Mem = MemRegion<CrashImages>;

/// Drives a server directly: a hello on connection `conn`, then requests through its mailbox.
struct Session<'a> {
    srv: &'a mut ErdaServer,
    mem: &'a Mem,
    conn: usize,
    id: u32,
    seq: u32,
}

impl<'a> Session<'a> {
    fn open(srv: &'a mut ErdaServer, mem: &'a Mem, conn: usize) -> Session<'a> {
        Session::open_as(srv, mem, conn, None)
    }
    /// A session whose hello names fabric client id `fabric` (a bare hello if `None`).
    fn open_as(
        srv: &'a mut ErdaServer,
        mem: &'a Mem,
        conn: usize,
        fabric: Option<u32>,
    ) -> Session<'a> {
        let mut r = Replies::new();
        let recv = Recv {
            kind: RecvKind::Send,
            len: 8,
            imm: None,
        };
        let msg = fabric.map_or(HELLO.to_vec(), |id| hello(id).to_vec());
        if let Some(id) = fabric {
            srv.on_connect(mem, conn, id); // the fabric's word for it: quoted to waiters
        }
        srv.on_message(mem, conn, recv, &msg, &mut r).unwrap();
        let rep = Reply::decode(r.iter().next().unwrap()).unwrap();
        assert_eq!(rep.status, Status::Welcome);
        Session {
            srv,
            mem,
            conn,
            id: rep.seq,
            seq: 0,
        }
    }
    fn sb(&self) -> Superblock {
        self.srv.superblock().unwrap().1
    }
    /// Asks for space and, if `write`, writes the object there; returns the reply.
    fn put(&mut self, op: ReqOp, key: &[u8], value: &[u8], write: bool) -> Reply {
        self.put_full(op, key, value, write, write, 0)
    }
    /// As `put`, but the durable mark is written only if `mark`, and the request names a
    /// fenced writer's grant `revoke`.
    fn put_full(
        &mut self,
        op: ReqOp,
        key: &[u8],
        value: &[u8],
        write: bool,
        mark: bool,
        revoke: u32,
    ) -> Reply {
        self.seq += 1;
        let vlen = if op == ReqOp::Delete { 0 } else { value.len() };
        let req = Request::new(op, self.seq, key, vlen)
            .unwrap()
            .with_revoke(revoke)
            .encode();
        let sb = self.sb();
        self.mem.write(sb.mailbox(self.id), &req).unwrap();
        let mut r = Replies::new();
        let recv = Recv {
            kind: RecvKind::WriteImm,
            len: 24,
            imm: Some(self.id),
        };
        self.srv
            .on_message(self.mem, self.conn, recv, &[], &mut r)
            .unwrap();
        let rep = Reply::decode(r.iter().next().unwrap()).unwrap();
        if rep.status == Status::Granted && write {
            let mut obj = vec![0u8; object_len(key.len(), vlen)];
            encode_object(&mut obj, key, value, op == ReqOp::Delete).unwrap();
            let off = sb.object_off(rep.head, rep.arg as u32).unwrap();
            self.mem.write(off, &obj).unwrap();
            if op != ReqOp::Delete && mark {
                // Durable (this memory has no caches): the grant is finished.
                let mark = durable_mark(rep.arg as u32).to_le_bytes();
                self.mem.write(off + obj.len() as u64, &mark).unwrap();
            }
        }
        rep
    }
}

/// What a reader of `key` would get from the region (newest object, else the previous).
fn read_back(mem: &Mem, sb: &Superblock, key: &[u8]) -> Option<Vec<u8>> {
    let home = sb.home(key);
    for j in 0..sb.neighborhood as u64 {
        let mut b = [0u8; 32];
        mem.read(sb.bucket_off(home + j), &mut b).unwrap();
        let b = Bucket::decode(&b).unwrap();
        // The first holder with a non-empty metadata word, as a client's get takes it.
        if !b.holds(key) || b.meta().is_empty() {
            continue;
        }
        for units in [b.meta().new_off(), b.meta().old_off()] {
            if units == 0 {
                return None;
            }
            let room = sb.head_remaining(units).min(4200) as usize;
            let mut obj = vec![0u8; room];
            mem.read(sb.object_off(b.head(), units).unwrap(), &mut obj)
                .unwrap();
            if let Ok(o) = decode_object(&obj) {
                return (!o.delete).then(|| o.value.to_vec());
            }
        }
        return None;
    }
    None
}

#[test]
fn recovery_reverts_unfinished_objects_and_never_reuses_granted_space() {
    let mem = Mem::new(16 << 20);
    let mut srv = ErdaServer::new(ErdaConfig::small());
    let mut s = Session::open(&mut srv, &mem, 1);
    assert_eq!(
        s.put(ReqOp::Upsert, b"a", b"a-one", true).status,
        Status::Granted
    );
    assert_eq!(
        s.put(ReqOp::Upsert, b"a", b"a-two", true).status,
        Status::Granted
    );
    s.put(ReqOp::Upsert, b"b", b"b-one", true);
    s.put(ReqOp::Delete, b"b", b"", true);
    s.put(ReqOp::Upsert, b"c", b"c-one", true);
    // The client dies after its grant: c's newest and d's first object are never written.
    let dead = s.put(ReqOp::Upsert, b"c", b"c-two", false);
    let dead_d = s.put(ReqOp::Upsert, b"d", b"d-one", false);
    assert_eq!(
        s.put(ReqOp::Update, b"zz", b"x", true).status,
        Status::Absent
    );
    assert_eq!(
        s.put(ReqOp::Delete, b"zz", b"", true).status,
        Status::Absent
    );
    let _ = s;
    // The server restarts on the same memory.
    let mut srv2 = ErdaServer::new(ErdaConfig::small());
    // A restarting memory node recovers before any client connects.
    let said = srv2.recover(&mem).unwrap();
    assert!(said.contains("1 metadata words reverted"), "{said}");
    assert_eq!(srv2.service(), "erda");
    let st = srv2.stats();
    assert_eq!((st.reverted, st.emptied), (1, 1), "{st:?}");
    let sb = srv2.superblock().unwrap().1;
    assert_eq!(read_back(&mem, &sb, b"a").as_deref(), Some(&b"a-two"[..]));
    assert_eq!(read_back(&mem, &sb, b"b"), None);
    assert_eq!(read_back(&mem, &sb, b"c").as_deref(), Some(&b"c-one"[..]));
    assert_eq!(read_back(&mem, &sb, b"d"), None);
    // Presence was rebuilt: update/delete answer from the recovered state.
    let mut s = Session::open(&mut srv2, &mem, 7);
    assert_eq!(
        s.put(ReqOp::Update, b"b", b"x", true).status,
        Status::Absent
    );
    assert_eq!(
        s.put(ReqOp::Update, b"d", b"x", true).status,
        Status::Absent
    );
    let r = s.put(ReqOp::Update, b"c", b"c-three", true);
    assert_eq!(r.status, Status::Granted);
    // The abandoned grant's space is not handed out again.
    assert!(
        r.head != dead.head || r.arg > dead.arg,
        "{r:?} reuses {dead:?}"
    );
    // Nor is the space of an emptied key's never-written first object.
    assert!(
        r.head != dead_d.head || r.arg > dead_d.arg,
        "{r:?} reuses {dead_d:?}"
    );
    assert_eq!(read_back(&mem, &sb, b"c").as_deref(), Some(&b"c-three"[..]));
    // A corrupt mailbox and a foreign client id are refused, not fatal.
    let mut rep = Replies::new();
    let recv = Recv {
        kind: RecvKind::WriteImm,
        len: 24,
        imm: Some(s.id + 1),
    };
    s.srv.on_message(&mem, 7, recv, &[], &mut rep).unwrap();
    assert_eq!(
        Reply::decode(rep.iter().next().unwrap()).unwrap().status,
        Status::BadRequest
    );
}

#[test]
fn logs_fill_segment_by_segment_and_then_refuse() {
    let mem = Mem::new(8 << 20);
    let cfg = ErdaConfig {
        heads: 1,
        buckets: 256,
        segment_bytes: 8192,
        head_bytes: 3 * 8192,
        // One region: no chaining, no cleaning.
        regions: 1,
        ..ErdaConfig::small()
    };
    let mut srv = ErdaServer::new(cfg);
    let mut s = Session::open(&mut srv, &mem, 1);
    let value = vec![7u8; 3000];
    let mut grants = Vec::new();
    loop {
        let r = s.put(ReqOp::Upsert, b"big", &value, true);
        if r.status != Status::Granted {
            assert_eq!(r.status, Status::LogFull);
            break;
        }
        grants.push(r.arg * 8);
    }
    // 3024-byte objects: two per 8 KiB segment (the first starts after 64 bytes), never
    // spanning a segment boundary.
    // Each is followed by its 8-byte durable mark.
    assert_eq!(grants, vec![64, 3096, 8192, 11224, 16384, 19416]);
    for g in &grants {
        assert_eq!(
            g / 8192,
            (g + 3024 - 1) / 8192,
            "object at {g} spans a segment"
        );
    }
    let sb = s.sb();
    assert_eq!(read_back(&mem, &sb, b"big").as_deref(), Some(&value[..]));
}

/// Buckets of `key`'s neighborhood holding it.
fn holders(mem: &Mem, sb: &Superblock, key: &[u8]) -> usize {
    let home = sb.home(key);
    (0..sb.neighborhood as u64)
        .filter(|j| {
            let mut b = [0u8; 32];
            mem.read(sb.bucket_off(home + j), &mut b).unwrap();
            Bucket::decode(&b).unwrap().holds(key)
        })
        .count()
}

#[test]
fn a_crash_in_the_middle_of_a_displacement_loses_no_key() {
    // 64 home buckets, neighborhoods of 4: displacement starts around half full.
    let cfg = ErdaConfig {
        heads: 1,
        buckets: 64,
        neighborhood: 4,
        max_clients: 4,
        segment_bytes: 8192,
        head_bytes: 8 * 8192,
        regions: 1,
        clean_permille: 1000,
    };
    let key = |x: u64| x.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
    let mem = Mem::new(1 << 20);
    let mut srv = ErdaServer::new(cfg);
    let mut s = Session::open(&mut srv, &mem, 1);
    let mut found = None;
    for x in 0..64u64 {
        let before = s.srv.stats().displaced;
        mem.obs.record(true);
        let r = s.put(ReqOp::Upsert, &key(x), &val(x, 8), true);
        let images = mem.obs.record(false);
        assert_eq!(r.status, Status::Granted, "key {x}");
        let moved = s.srv.stats().displaced - before;
        if moved > 0 {
            found = Some((x, moved, images));
            break;
        }
    }
    let (last, moved, images) = found.expect("no insert displaced an entry");
    let sb = s.sb();
    // Per move four persistence points, then the new key's bucket (two).
    assert_eq!(images.len() as u64, 4 * moved + 2, "{moved} moves");
    let mut deduplicated = 0;
    let odd_stripes = |m: &Mem| {
        (0..sb.stripes())
            .filter(|&i| m.load_u64(sb.stripe_word_off(i)).unwrap() & 1 == 1)
            .count()
    };
    let points = images.len();
    for (point, image) in images.into_iter().enumerate() {
        let m = Mem::from_image(image);
        // Every persist point lies inside a stripe section (a move, or the new key's bucket
        // fill) except the last (the new key's metadata word): readers see them as changing.
        let odd = odd_stripes(&m);
        assert_eq!(
            odd > 0,
            point + 1 < points,
            "crash point {point}: {odd} odd stripes"
        );
        let mut srv2 = ErdaServer::new(cfg);
        srv2.open(&m).unwrap();
        assert_eq!(odd_stripes(&m), 0, "recovery leaves no stripe odd");
        deduplicated += srv2.stats().deduplicated;
        for x in 0..last {
            assert_eq!(
                read_back(&m, &sb, &key(x)),
                Some(val(x, 8)),
                "crash point {point}: key {x}"
            );
            assert_eq!(holders(&m, &sb, &key(x)), 1, "crash point {point}: key {x}");
        }
        // The new key's object was never written: absent.
        assert_eq!(read_back(&m, &sb, &key(last)), None, "crash point {point}");
        // The recovered store takes writes to every key, moved or not.
        let mut s2 = Session::open(&mut srv2, &m, 2);
        for x in 0..last {
            let r = s2.put(ReqOp::Update, &key(x), &val(x + 100, 8), true);
            assert_eq!(r.status, Status::Granted, "crash point {point}: key {x}");
            assert_eq!(read_back(&m, &sb, &key(x)), Some(val(x + 100, 8)));
        }
        let r = s2.put(ReqOp::Upsert, &key(last), &val(7, 8), true);
        assert_eq!(r.status, Status::Granted);
        assert_eq!(read_back(&m, &sb, &key(last)), Some(val(7, 8)));
    }
    // The points between a move's copy and the end of its clear leave a duplicate.
    assert!(
        deduplicated >= 2 * moved,
        "{deduplicated} duplicates for {moved} moves"
    );
}

/// The KvIndex contract, exactly: `get` returns the value's own length whatever the buffer,
/// writes nothing past it, and a buffer smaller than the value is `BufferTooSmall` (also when
/// the value comes from the previous object because the newest is torn).
#[test]
fn get_returns_the_values_own_length_and_refuses_small_buffers() {
    let n = node();
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let e = Erda::open(&ep, ErdaClientConfig::default()).await.unwrap();
        let value: Vec<u8> = (1..=13).collect();
        e.upsert(b"k13", &value).await.unwrap();
        let mut big = [0xEEu8; 64];
        assert_eq!(e.get(b"k13", &mut big).await.unwrap(), Some(13));
        assert_eq!(&big[..13], &value[..]);
        assert!(big[13..].iter().all(|&b| b == 0xEE), "wrote past the value");
        let mut exact = [0u8; 13];
        assert_eq!(e.get(b"k13", &mut exact).await.unwrap(), Some(13));
        assert_eq!(&exact[..], &value[..]);
        let mut small = [0u8; 12];
        assert!(matches!(
            e.get(b"k13", &mut small).await,
            Err(ErdaError::BufferTooSmall { len: 12, need: 13 })
        ));
        // An empty value is present, with length 0, even into an empty buffer.
        e.upsert(b"empty", b"").await.unwrap();
        assert_eq!(e.get(b"empty", &mut []).await.unwrap(), Some(0));
        assert_eq!(e.get(b"missing", &mut []).await.unwrap(), None);
        // A shorter value after a longer one: its own length.
        e.upsert(b"k13", b"abc").await.unwrap();
        assert_eq!(e.get(b"k13", &mut big).await.unwrap(), Some(3));
        assert_eq!(&big[..3], b"abc");
        // The newest object torn: the previous one (13 bytes) answers, with its own length
        // and the same refusal of a small buffer.
        e.upsert(b"k13", &value).await.unwrap();
        e.upsert(b"k13", &[9u8; 40]).await.unwrap();
        let newest = object_of(&e, &ep, b"k13", true);
        ep.qp(0)
            .unwrap()
            .write(newest.add(24), &[0xFFu8; 8])
            .await
            .unwrap();
        assert!(matches!(
            e.get(b"k13", &mut small).await,
            Err(ErdaError::BufferTooSmall { len: 12, need: 13 })
        ));
        assert_eq!(e.get(b"k13", &mut big).await.unwrap(), Some(13));
        assert_eq!(&big[..13], &value[..]);
        assert_eq!(e.stats().fallbacks, 1, "the torn newest object was skipped");
    });
}

#[test]
fn a_crash_at_any_persist_point_of_a_delete_leaves_it_done_or_undone() {
    let mem = Mem::new(16 << 20);
    let mut srv = ErdaServer::new(ErdaConfig::small());
    let mut s = Session::open(&mut srv, &mem, 1);
    s.put(ReqOp::Upsert, b"a", b"a-one", true);
    s.put(ReqOp::Upsert, b"a", b"a-two", true);
    let sb = s.sb();
    mem.obs.record(true);
    // The client writes nothing for a delete: the server wrote the deleted object.
    let r = s.put(ReqOp::Delete, b"a", b"", false);
    let images = mem.obs.record(false);
    assert_eq!(r.status, Status::Granted);
    assert_eq!(
        read_back(&mem, &sb, b"a"),
        None,
        "the delete is done at its grant"
    );
    // The metadata word, then the deleted object (a crash between reverts the word).
    assert_eq!(images.len(), 2);
    for (point, image) in images.into_iter().enumerate() {
        let m = Mem::from_image(image);
        let mut srv2 = ErdaServer::new(ErdaConfig::small());
        srv2.open(&m).unwrap();
        let got = read_back(&m, &sb, b"a");
        let want = if point == 0 {
            Some(&b"a-two"[..])
        } else {
            None
        };
        assert_eq!(got.as_deref(), want, "crash point {point}");
        // The recovered server answers from what readers see.
        let mut s2 = Session::open(&mut srv2, &m, 2);
        let u = s2.put(ReqOp::Update, b"a", b"a-three", true);
        let expect = if want.is_some() {
            Status::Granted
        } else {
            Status::Absent
        };
        assert_eq!(u.status, expect, "crash point {point}");
    }
}

#[test]
fn a_disconnected_clients_mailbox_is_reused() {
    let mem = Mem::new(16 << 20);
    let cfg = ErdaConfig {
        max_clients: 2,
        ..ErdaConfig::small()
    };
    let mut srv = ErdaServer::new(cfg);
    let hello = |srv: &mut ErdaServer, conn: usize| {
        let mut r = Replies::new();
        let recv = Recv {
            kind: RecvKind::Send,
            len: 8,
            imm: None,
        };
        srv.on_message(&mem, conn, recv, &HELLO, &mut r).unwrap();
        Reply::decode(r.iter().next().unwrap()).unwrap()
    };
    let a = hello(&mut srv, 1);
    let b = hello(&mut srv, 2);
    assert_eq!((a.status, b.status), (Status::Welcome, Status::Welcome));
    assert_eq!(hello(&mut srv, 3).status, Status::TooManyClients);
    srv.on_disconnect(&mem, 1);
    let c = hello(&mut srv, 3);
    assert_eq!(
        (c.status, c.seq),
        (Status::Welcome, a.seq),
        "connection 1's id again"
    );
    // The old connection no longer owns it: its requests are refused.
    let mut s = Session {
        srv: &mut srv,
        mem: &mem,
        conn: 1,
        id: a.seq,
        seq: 0,
    };
    assert_eq!(
        s.put(ReqOp::Upsert, b"k", b"v", true).status,
        Status::BadRequest
    );
}

#[test]
fn recovery_never_grants_a_reverted_slot_again() {
    let mem = Mem::new(8 << 20);
    let cfg = ErdaConfig {
        heads: 1,
        buckets: 256,
        segment_bytes: 8192,
        head_bytes: 4 * 8192,
        ..ErdaConfig::small()
    };
    let mut srv = ErdaServer::new(cfg);
    let mut s = Session::open(&mut srv, &mem, 1);
    let value = vec![7u8; 3000];
    // Two 3024-byte objects fill segment 0; the third starts segment 1 and is never written
    // (its client died after the grant).
    s.put(ReqOp::Upsert, b"x", &value, true);
    s.put(ReqOp::Upsert, b"x", &value, true);
    let dead = s.put(ReqOp::Upsert, b"y", &value, false);
    assert_eq!(dead.arg * 8, 8192, "{dead:?}");
    let _ = s;
    let mut srv2 = ErdaServer::new(cfg);
    srv2.open(&mem).unwrap();
    assert_eq!(srv2.stats().emptied, 1);
    let mut s = Session::open(&mut srv2, &mem, 2);
    let r = s.put(ReqOp::Upsert, b"z", &value, true);
    assert_eq!(r.status, Status::Granted);
    assert!(r.arg > dead.arg, "{r:?} reuses the dead grant {dead:?}");
}

/// The object of `key` its bucket's word names (newest if `newest`, else the previous), as
/// (units, value), `None` where it does not verify.
fn named(mem: &Mem, sb: &Superblock, key: &[u8], newest: bool) -> (u32, Option<Vec<u8>>) {
    let home = sb.home(key);
    for j in 0..sb.neighborhood as u64 {
        let mut b = [0u8; 32];
        mem.read(sb.bucket_off(home + j), &mut b).unwrap();
        let b = Bucket::decode(&b).unwrap();
        if !b.holds(key) {
            continue;
        }
        let units = if newest {
            b.meta().new_off()
        } else {
            b.meta().old_off()
        };
        if units == 0 {
            return (0, None);
        }
        let mut obj = vec![0u8; 4200];
        mem.read(sb.object_off(b.head(), units).unwrap(), &mut obj)
            .unwrap();
        return (units, decode_object(&obj).ok().map(|o| o.value.to_vec()));
    }
    (0, None)
}

/// Issue 10 on the server: one write of a key in flight at a time. A second request is
/// answered `Busy` naming the grant and its writer; a request naming that grant as fenced
/// settles it (reverted: the slot never held a whole object); a disconnected writer's grant
/// whose object is whole but never marked durable is adopted (a durable copy by the server,
/// the older object still named).
#[test]
fn a_second_write_waits_and_a_dead_writers_grant_is_settled() {
    let mem = Mem::new(16 << 20);
    let mut srv = ErdaServer::new(ErdaConfig::small());
    // Writer A (fabric client 41): k = "one", then a grant for "two" it never writes.
    let mut a = Session::open_as(&mut srv, &mem, 1, Some(41));
    let sb = a.sb();
    a.put(ReqOp::Upsert, b"k", b"one", true);
    let stuck = a.put(ReqOp::Upsert, b"k", b"two", false);
    assert_eq!(stuck.status, Status::Granted);
    // j = "old", then "new" written whole but its durable mark never stored.
    a.put(ReqOp::Upsert, b"j", b"old", true);
    let unmarked = a.put_full(ReqOp::Upsert, b"j", b"new", true, false, 0);
    let a_id = a.id;
    let _ = a;
    let mut b = Session::open_as(&mut srv, &mem, 2, Some(42));
    // k: busy, naming A's grant; a revoke naming another slot changes nothing.
    for revoke in [0, stuck.arg as u32 + 1] {
        let r = b.put_full(ReqOp::Update, b"k", b"three", false, false, revoke);
        assert_eq!(r.status, Status::Busy, "revoke {revoke}");
        assert_eq!((r.head, r.arg), (stuck.head, 41 << 32 | stuck.arg));
    }
    // Naming the grant settles nothing while A's connection lives (no fence ended it).
    let r = b.put_full(ReqOp::Update, b"k", b"three", true, true, stuck.arg as u32);
    assert_eq!(r.status, Status::Busy);
    let _ = b;
    // B fenced A, which ends A's connection: the grant is reverted ("one" is the value
    // again), and the unmarked "new" of j adopted (below); then B's granted.
    srv.on_disconnect(&mem, 1);
    let mut b = Session {
        srv: &mut srv,
        mem: &mem,
        conn: 2,
        id: a_id ^ 1,
        seq: 50,
    };
    let r = b.put_full(ReqOp::Update, b"k", b"three", true, true, stuck.arg as u32);
    assert_eq!(r.status, Status::Granted);
    assert_eq!(read_back(&mem, &sb, b"k").as_deref(), Some(&b"three"[..]));
    assert_eq!(
        named(&mem, &sb, b"k", false).1.as_deref(),
        Some(&b"one"[..])
    );
    let mut slot = vec![0xAAu8; object_len(1, 3) + 8];
    mem.read(
        sb.object_off(stuck.head, stuck.arg as u32).unwrap(),
        &mut slot,
    )
    .unwrap();
    assert!(slot.iter().all(|&x| x == 0), "the reverted slot is zeroed");
    // j: adopted when A's connection ended.
    let _ = b;
    let (units, value) = named(&mem, &sb, b"j", true);
    assert_eq!(
        value.as_deref(),
        Some(&b"new"[..]),
        "the whole object stays"
    );
    assert_ne!(units as u64, unmarked.arg, "named through a durable copy");
    assert_eq!(
        named(&mem, &sb, b"j", false).1.as_deref(),
        Some(&b"old"[..])
    );
    let st = srv.stats();
    assert_eq!((st.revoked_reverted, st.revoked_adopted), (1, 1));
    assert!(st.busy >= 3);
    let mut b = Session {
        srv: &mut srv,
        mem: &mem,
        conn: 2,
        id: a_id ^ 1,
        seq: 100,
    };
    assert_eq!(
        b.put(ReqOp::Upsert, b"j", b"newer", true).status,
        Status::Granted
    );
    assert_eq!(read_back(&mem, &sb, b"j").as_deref(), Some(&b"newer"[..]));
}

/// Finished grants are forgotten: on the writer's next request, or by the idle sweep.
#[test]
fn finished_grants_do_not_pile_up() {
    let mem = Mem::new(16 << 20);
    let mut srv = ErdaServer::new(ErdaConfig::small());
    let mut s = Session::open(&mut srv, &mem, 1);
    for i in 0..300u32 {
        let k = i.to_be_bytes();
        assert_eq!(s.put(ReqOp::Upsert, &k, b"v", true).status, Status::Granted);
    }
    // Only the latest is still known (its writer has not asked again).
    assert_eq!(s.srv.unfinished_grants(), 1);
    // Two grants of other keys written, their writer never asking again.
    s.put(ReqOp::Upsert, b"x", b"v", true);
    let _ = s;
    let mut t = Session::open(&mut srv, &mem, 2);
    t.put(ReqOp::Upsert, b"y", b"v", true);
    let _ = t;
    let mut u = Session::open(&mut srv, &mem, 3);
    u.put(ReqOp::Upsert, b"z", b"v", false);
    let _ = u;
    assert_eq!(srv.unfinished_grants(), 3);
    while srv.on_idle(&mem) {}
    srv.on_idle(&mem);
    assert_eq!(srv.unfinished_grants(), 1, "the unwritten one stays");
}

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

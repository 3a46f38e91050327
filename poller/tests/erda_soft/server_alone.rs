//! Erda's server driven directly (no fabric): format, recovery after a crash at every
//! persistence point, segment-by-segment log fill, displacement crashes, sessions and the
//! settling of dead writers' grants.
use super::erda_direct::read_back;
use super::*;

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

//! Read-After-Write's reservation lease (`mod.rs`, "Reservation lease"), on the server alone.
use super::{
    BaselineServer, Op, REPLY_HEADER, RESERVATION_LEASE, RecOp, ReplyHeader, ReqHeader, Scheme,
    encode_record, raw_slot_len, record_len, void_word,
};
use crate::erda::ErdaConfig;
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{Handler, LocalRegion, Replies};
use core::cell::RefCell;
use remora_layouts::NodeId;
use remora_layouts::erda::Status;
use remora_layouts::region::{HEADER_LEN, RegionHeader};
use std_alloc::vec;
use std_alloc::vec::Vec;

struct Mem(RefCell<Vec<u8>>);

impl LocalRegion for Mem {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.0.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let o = offset as usize;
        buf.copy_from_slice(&self.0.borrow()[o..o + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let o = offset as usize;
        self.0.borrow_mut()[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }
}

/// A RAW server on a fresh region, and its ring (offset, length).
struct Node {
    mem: Mem,
    srv: BaselineServer,
    ring: (u64, u64),
    seq: u32,
}

fn config() -> ErdaConfig {
    ErdaConfig {
        buckets: 1 << 10,
        head_bytes: 1 << 20,
        ..ErdaConfig::small()
    }
}

impl Node {
    fn new() -> Node {
        let len = 8u64 << 20;
        let h = RegionHeader::new(len, 1 << 20, 0).expect("header");
        let mut m = vec![0u8; len as usize];
        m[..HEADER_LEN].copy_from_slice(&h.encode());
        let mut n = Node {
            mem: Mem(RefCell::new(m)),
            srv: BaselineServer::new(Scheme::Raw, config()),
            ring: (0, 0),
            seq: 0,
        };
        let w = n.call(Op::Hello, 0, b"", 0, &[]);
        assert_eq!(w.status, Status::Welcome);
        n.ring = (w.arg, w.aux);
        n
    }

    fn call(&mut self, op: Op, rec: u8, key: &[u8], vlen: usize, body: &[u8]) -> ReplyHeader {
        self.seq += 1;
        let h = ReqHeader {
            op,
            rec,
            key_len: key.len() as u8,
            value_len: vlen as u16,
            seq: self.seq,
            aux: 0,
        };
        let mut msg = h.encode().to_vec();
        msg.extend_from_slice(key);
        msg.extend_from_slice(body);
        let recv = Recv {
            kind: RecvKind::Send,
            len: msg.len() as u32,
            imm: None,
        };
        let mut r = Replies::new();
        self.srv
            .on_message(&self.mem, 1, recv, &msg, &mut r)
            .unwrap();
        let reply = r.iter().next().expect("a reply").to_vec();
        ReplyHeader::decode(&reply[..REPLY_HEADER]).expect("decodes")
    }

    fn reserve(&mut self, key: &[u8], value: &[u8]) -> ReplyHeader {
        self.call(Op::Reserve, RecOp::Upsert as u8, key, value.len(), &[])
    }

    /// The client's doorbell: WRITE the record at `pos`, READ the void word back; true if
    /// the void word was there.
    fn write(&mut self, pos: u64, key: &[u8], value: &[u8]) -> bool {
        let mut rec = [0u8; 64];
        let n = encode_record(&mut rec, RecOp::Upsert, key, value, pos).unwrap();
        let at = self.ring.0 + pos % self.ring.1;
        self.mem.write(at, &rec[..n]).unwrap();
        let word = self
            .mem
            .load_u64(at + (n as u64).next_multiple_of(8))
            .unwrap();
        word == void_word(pos)
    }

    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.seq += 1;
        let h = ReqHeader {
            op: Op::Get,
            rec: 0,
            key_len: key.len() as u8,
            value_len: 0,
            seq: self.seq,
            aux: 0,
        };
        let mut msg = h.encode().to_vec();
        msg.extend_from_slice(key);
        let recv = Recv {
            kind: RecvKind::Send,
            len: msg.len() as u32,
            imm: None,
        };
        let mut r = Replies::new();
        self.srv
            .on_message(&self.mem, 1, recv, &msg, &mut r)
            .unwrap();
        let reply = r.iter().next().expect("a reply").to_vec();
        match ReplyHeader::decode(&reply[..REPLY_HEADER]).unwrap().status {
            Status::Granted => Some(reply[REPLY_HEADER..].to_vec()),
            _ => None,
        }
    }

    /// A lease of server steps passes (idle calls).
    fn wait_a_lease(&mut self) {
        for _ in 0..RESERVATION_LEASE {
            self.srv.on_idle(&self.mem);
        }
    }
}

/// Finding 3 of the hostile-client campaign: a reservation nobody writes blocked its key
/// (every later write `Busy`) and the ring's apply order for good. Now it is voided once it
/// has been in flight for a lease of server steps and blocks something.
#[test]
fn an_unwritten_reservation_stops_blocking_its_key_and_the_ring() {
    let mut n = Node::new();
    let stuck = n.reserve(b"k", b"v1");
    assert_eq!(stuck.status, Status::Granted);
    assert_eq!(n.reserve(b"k", b"v2").status, Status::Busy, "one in flight");
    // Records of other keys queue up behind the stuck one.
    for i in 0..40u8 {
        let key = [b'o', i];
        let r = n.reserve(&key, b"x");
        assert_eq!(r.status, Status::Granted);
        assert!(!n.write(r.arg, &key, b"x"));
    }
    assert!(
        n.srv.backlog() > 40,
        "the apply stops at the unwritten record"
    );
    assert_eq!(
        n.reserve(b"k", b"v2").status,
        Status::Busy,
        "within its lease"
    );
    n.wait_a_lease();
    let r = n.reserve(b"k", b"v2");
    assert_eq!(
        r.status,
        Status::Granted,
        "the stuck reservation was voided"
    );
    assert!(!n.write(r.arg, b"k", b"v2"));
    assert_eq!(n.get(b"k").as_deref(), Some(&b"v2"[..]));
    let drained = n.call(Op::Drain, 0, b"", 0, &[]);
    assert_eq!((drained.status, drained.arg), (Status::Granted, 0));
    assert_eq!(n.srv.stats().voided, 1);
    assert_eq!(n.get(b"o\x07").as_deref(), Some(&b"x"[..]));
}

/// A writer slower than the lease is never acknowledged for a record the server dropped:
/// its READ finds the void word and the server says the write took no effect; a record that
/// landed in time counts, whatever the lease; recovery does not replay a voided record.
#[test]
fn a_late_writer_is_told_its_write_was_voided_and_recovery_skips_it() {
    let mut n = Node::new();
    let late = n.reserve(b"k", b"late");
    let on_time = n.reserve(b"j", b"ok");
    assert_eq!(
        (late.status, on_time.status),
        (Status::Granted, Status::Granted)
    );
    assert!(!n.write(on_time.arg, b"j", b"ok"));
    n.wait_a_lease();
    // The apply reaches the unwritten record and voids it (its lease ran out).
    assert_eq!(n.call(Op::Drain, 0, b"", 0, &[]).arg, 0);
    assert_eq!(n.srv.stats().voided, 1);
    // Its writer's WRITE lands now: the READ back shows the void word; the server says so.
    assert!(
        n.write(late.arg, b"k", b"late"),
        "the void word is read back"
    );
    let check = n.call(Op::Check, 0, b"", 0, &late.arg.to_le_bytes());
    assert_eq!(check.status, Status::Busy, "voided: write again");
    let check = n.call(Op::Check, 0, b"", 0, &on_time.arg.to_le_bytes());
    assert_eq!(check.status, Status::Granted, "landed in time: counts");
    assert_eq!(n.get(b"k"), None);
    assert_eq!(n.get(b"j").as_deref(), Some(&b"ok"[..]));
    // A restart replays the ring from the applied position: the voided record stays out.
    let mut again = BaselineServer::new(Scheme::Raw, config());
    again.recover(&n.mem).unwrap();
    n.srv = again;
    assert_eq!(n.get(b"k"), None, "a voided record is not replayed");
    assert_eq!(n.get(b"j").as_deref(), Some(&b"ok"[..]));
    // Slots leave room for the void word.
    assert_eq!(raw_slot_len(record_len(1, 4) as u64), 24);
}

//! What Erda's server believes of a client: only what the fabric told it (the connection's
//! client id, `Handler::on_connect`), never what the client says of itself or of others.
use super::{ErdaConfig, ErdaServer};
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{Handler, LocalRegion, Replies};
use core::cell::RefCell;
use remora_layouts::NodeId;
use remora_layouts::erda::{
    REQUEST_LEN, Reply, ReqOp, Request, Status, Superblock, durable_mark, encode_object,
    hello_slots, object_len,
};
use remora_layouts::region::{HEADER_LEN, RegionHeader};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// A region of plain memory (one thread).
struct Mem(RefCell<Vec<u8>>);

impl Mem {
    fn new(len: u64) -> Mem {
        let h = RegionHeader::new(len, 1 << 20, 0).expect("header");
        let mut m = vec![0u8; len as usize];
        m[..HEADER_LEN].copy_from_slice(&h.encode());
        Mem(RefCell::new(m))
    }
}

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

fn one_reply(r: &Replies) -> Reply {
    Reply::decode(r.iter().next().expect("a reply")).expect("decodes")
}

/// A hello on `conn` naming fabric id `claimed`.
fn hello(srv: &mut ErdaServer, mem: &Mem, conn: usize, claimed: u32) -> Reply {
    let mut r = Replies::new();
    let msg = hello_slots(claimed, 1);
    let recv = Recv {
        kind: RecvKind::Send,
        len: msg.len() as u32,
        imm: None,
    };
    srv.on_message(mem, conn, recv, &msg, &mut r).unwrap();
    one_reply(&r)
}

fn sb(srv: &ErdaServer) -> Superblock {
    srv.superblock().expect("opened").1
}

/// A write request of `key` from mailbox `id` on `conn`, naming grant `revoke`; if granted
/// and `write`, the object and its durable mark are written.
fn put(
    srv: &mut ErdaServer,
    mem: &Mem,
    (conn, id): (usize, u32),
    key: &[u8],
    revoke: u32,
    write: bool,
) -> Reply {
    let req = Request::new(ReqOp::Upsert, 1, key, 3)
        .unwrap()
        .with_revoke(revoke)
        .encode();
    let sb = sb(srv);
    mem.write(sb.mailbox(id), &req).unwrap();
    let mut r = Replies::new();
    let recv = Recv {
        kind: RecvKind::WriteImm,
        len: REQUEST_LEN as u32,
        imm: Some(id),
    };
    srv.on_message(mem, conn, recv, &[], &mut r).unwrap();
    let rep = one_reply(&r);
    if rep.status == Status::Granted && write {
        let mut obj = vec![0u8; object_len(key.len(), 3)];
        encode_object(&mut obj, key, b"val", false).unwrap();
        let off = sb.object_off(rep.head, rep.arg as u32).unwrap();
        mem.write(off, &obj).unwrap();
        mem.write(
            off + obj.len() as u64,
            &durable_mark(rep.arg as u32).to_le_bytes(),
        )
        .unwrap();
    }
    rep
}

/// Finding 4a of the hostile-client campaign: a hello naming another client's fabric id
/// was believed, and `Busy` answers quoted it as the writer to fence, so a hostile client
/// could have an honest one fenced. Now the connection's id as the fabric told it is quoted,
/// and a hello naming another id is refused.
#[test]
fn a_hello_naming_another_clients_id_is_refused_and_never_quoted() {
    let mem = Mem::new(48 << 20);
    let mut srv = ErdaServer::new(ErdaConfig::small());
    // Honest client 41 on connection 1; hostile client 66 on connection 2; 77 on 3.
    srv.on_connect(&mem, 1, 41);
    srv.on_connect(&mem, 2, 66);
    srv.on_connect(&mem, 3, 77);
    let honest = hello(&mut srv, &mem, 1, 41);
    assert_eq!(honest.status, Status::Welcome);
    let lie = hello(&mut srv, &mem, 2, 41);
    assert_eq!(
        lie.status,
        Status::BadRequest,
        "claims the honest client's id"
    );
    // Naming none is allowed: the connection's own id is used.
    let hostile = hello(&mut srv, &mem, 2, 0);
    assert_eq!(hostile.status, Status::Welcome);
    let other = hello(&mut srv, &mem, 3, 77);
    assert_eq!(other.status, Status::Welcome);
    // The hostile client takes a grant it never writes; a waiter is told to fence 66.
    let g = put(&mut srv, &mem, (2, hostile.seq), b"k", 0, false);
    assert_eq!(g.status, Status::Granted);
    let busy = put(&mut srv, &mem, (3, other.seq), b"k", 0, false);
    assert_eq!(busy.status, Status::Busy);
    assert_eq!(busy.arg >> 32, 66, "the holder as the fabric knows it");
    // And the honest client's own grants are quoted as 41.
    let h = put(&mut srv, &mem, (1, honest.seq), b"h", 0, false);
    assert_eq!(h.status, Status::Granted);
    let busy = put(&mut srv, &mem, (3, other.seq), b"h", 0, false);
    assert_eq!(busy.arg >> 32, 41);
}

/// Finding 4b: a request whose `revoke` named another writer's grant (its units are in any
/// `Busy` answer) had the server settle it without any fence, so a slow writer's object
/// could be reverted under it. Now only the grant's own connection may revoke it (an orphan
/// of its own), and another writer's grant is settled when its connection ends (a fence
/// ends it).
#[test]
fn a_revoke_without_a_fence_settles_nothing() {
    let mem = Mem::new(48 << 20);
    let mut srv = ErdaServer::new(ErdaConfig::small());
    srv.on_connect(&mem, 1, 41);
    srv.on_connect(&mem, 2, 42);
    let a = hello(&mut srv, &mem, 1, 41).seq;
    let b = hello(&mut srv, &mem, 2, 42).seq;
    let g = put(&mut srv, &mem, (1, a), b"k", 0, false);
    assert_eq!(g.status, Status::Granted);
    let units = g.arg as u32;
    for _ in 0..3 {
        let r = put(&mut srv, &mem, (2, b), b"k", units, false);
        assert_eq!(r.status, Status::Busy, "B named A's grant without a fence");
        assert_eq!(r.arg as u32 & 0x7FFF_FFFF, units);
    }
    assert_eq!(srv.unfinished_grants(), 1);
    assert_eq!(srv.stats().revoked_reverted, 0);
    // A's own orphan: A may settle it itself.
    let again = put(&mut srv, &mem, (1, a), b"k", units, true);
    assert_eq!(
        again.status,
        Status::Granted,
        "an orphan of its own connection"
    );
    assert_eq!(srv.stats().revoked_reverted, 1);
    // A takes another grant and stalls; B's fence of A ends A's connection, which settles it.
    let g2 = put(&mut srv, &mem, (1, a), b"j", 0, false);
    assert_eq!(g2.status, Status::Granted);
    let r = put(&mut srv, &mem, (2, b), b"j", g2.arg as u32, false);
    assert_eq!(r.status, Status::Busy);
    srv.on_disconnect(&mem, 1);
    assert_eq!(srv.stats().revoked_reverted, 2);
    let r = put(&mut srv, &mem, (2, b), b"j", 0, true);
    assert_eq!(r.status, Status::Granted);
}

/// A connection the fabric never introduced (a harness calling the handler directly) is
/// served, but its self-declared id is never quoted: waiters are told of no one to fence.
#[test]
fn an_unintroduced_connections_claim_is_not_quoted() {
    let mem = Mem::new(48 << 20);
    let mut srv = ErdaServer::new(ErdaConfig::small());
    let a = hello(&mut srv, &mem, 1, 41);
    assert_eq!(a.status, Status::Welcome);
    let b = hello(&mut srv, &mem, 2, 42).seq;
    assert_eq!(
        put(&mut srv, &mem, (1, a.seq), b"k", 0, false).status,
        Status::Granted
    );
    let r = put(&mut srv, &mem, (2, b), b"k", 0, false);
    assert_eq!((r.status, r.arg >> 32), (Status::Busy, 0));
}

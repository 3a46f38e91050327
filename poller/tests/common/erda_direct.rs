//! Drives an Erda server directly, without a fabric: a session's requests through its
//! mailboxes, the client's object WRITE and durable mark done by hand, and a one-sided
//! reader's view of a key.
//!
//! Included by the tests that use it (`#[path = "common/erda_direct.rs"] mod erda_direct;`),
//! next to `common/mem_region.rs` (the `mem_region` module).
#![allow(dead_code)] // Each test uses a part.

use super::mem_region::{CrashImages, MemRegion};
use remora_core::erda::ErdaServer;
use remora_core::fabric::{Recv, RecvKind};
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::erda::{
    Bucket, Reply, ReqOp, Request, Status, Superblock, decode_object, durable_mark, encode_object,
    hello, object_len,
};

/// A memory node's region: plain bytes; while recording, the image at every persist call
/// (a crash right after that persistence point).
pub type Mem = MemRegion<CrashImages>;

/// Drives the server directly: requests through mailbox `id` of connection 1, the client's
/// object WRITE and durable mark done by hand.
pub struct Client {
    pub id: u32,
    pub seq: u32,
}

impl Client {
    pub fn open(srv: &mut ErdaServer, mem: &Mem) -> Client {
        let mut r = Replies::new();
        let recv = Recv {
            kind: RecvKind::Send,
            len: 12,
            imm: None,
        };
        srv.on_message(mem, 1, recv, &hello(1), &mut r).unwrap();
        let rep = Reply::decode(r.iter().next().unwrap()).unwrap();
        assert_eq!(rep.status, Status::Welcome);
        Client {
            id: rep.seq,
            seq: 0,
        }
    }
    pub fn put(
        &mut self,
        srv: &mut ErdaServer,
        mem: &Mem,
        op: ReqOp,
        key: &[u8],
        value: &[u8],
    ) -> Reply {
        let rep = self.ask(srv, mem, op, key, value.len());
        if rep.status == Status::Granted && op != ReqOp::Delete {
            Client::land(srv, mem, &rep, key, value);
        }
        rep
    }
    /// The request alone: a grant whose object is not written yet.
    pub fn ask(
        &mut self,
        srv: &mut ErdaServer,
        mem: &Mem,
        op: ReqOp,
        key: &[u8],
        vlen: usize,
    ) -> Reply {
        self.seq += 1;
        let vlen = if op == ReqOp::Delete { 0 } else { vlen };
        let req = Request::new(op, self.seq, key, vlen).unwrap().encode();
        let sb = srv.superblock().unwrap().1;
        mem.write(sb.mailbox(self.id), &req).unwrap();
        let mut r = Replies::new();
        let recv = Recv {
            kind: RecvKind::WriteImm,
            len: 32,
            imm: Some(self.id),
        };
        srv.on_message(mem, 1, recv, &[], &mut r).unwrap();
        Reply::decode(r.iter().next().unwrap()).unwrap()
    }
    /// The client's doorbell for grant `rep`: the object, its durable mark, and the flushing
    /// READ (the object and its mark are durable).
    pub fn land(srv: &ErdaServer, mem: &Mem, rep: &Reply, key: &[u8], value: &[u8]) {
        let sb = srv.superblock().unwrap().1;
        let mut obj = vec![0u8; object_len(key.len(), value.len())];
        encode_object(&mut obj, key, value, false).unwrap();
        let off = sb.object_off(rep.head, rep.arg as u32).unwrap();
        mem.write(off, &obj).unwrap();
        let mark = durable_mark(rep.arg as u32).to_le_bytes();
        mem.write(off + obj.len() as u64, &mark).unwrap();
        mem.persist(off, obj.len() + 8);
    }
}

/// What a one-sided reader of `key` takes from the region (newest whole object, else the
/// previous one).
pub fn read_back(mem: &impl LocalRegion, sb: &Superblock, key: &[u8]) -> Option<Vec<u8>> {
    let home = sb.home(key);
    for j in 0..sb.neighborhood as u64 {
        let mut b = [0u8; 32];
        mem.read(sb.bucket_off(home + j), &mut b).unwrap();
        let b = Bucket::decode(&b).unwrap();
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

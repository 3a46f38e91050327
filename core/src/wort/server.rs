//! The memory node's CPU: sessions, the request rings, the tree, the replies.
use super::layout::*;
use super::tree::{Tree, TreeStats};
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{Handler, LocalRegion, Replies, out_of_range};
use remora_layouts::region::root_offset;
use std_alloc::format;
use std_alloc::string::String;
use std_alloc::vec;
use std_alloc::vec::Vec;

/// Request rings the server keeps: one per client session.
pub const MAX_CLIENTS: u32 = 256;
/// Slots of each ring: requests one client handle has in flight at once.
pub const RING_SLOTS: u32 = 32;

/// What the server did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Client sessions accepted (hellos welcomed).
    pub sessions: u64,
    /// Requests taken from the rings, decoded or not.
    pub requests: u64,
    /// Requests that did not decode, answered [`Status::BadRequest`](crate::wort::layout::Status::BadRequest).
    pub bad_requests: u64,
    /// Writes refused because the heap was full.
    pub full: u64,
    /// The tree's own counters.
    pub tree: TreeStats,
}

/// WORT or WOART as a [`Handler`]: formats the region on the first message if no store of
/// its kind is published, else opens (and repairs) the published one.
pub struct WortServer {
    kind: Kind,
    tree: Option<Tree>,
    /// Connection owning each ring.
    owners: Vec<Option<usize>>,
    rings: (u32, u32, u64),
    stats: ServerStats,
    reply: [u8; REPLY_MAX],
    key: [u8; KEY_MAX],
    value: [u8; VALUE_MAX],
    req: [u8; SLOT_LEN],
}

fn fail(r: &dyn LocalRegion, e: TreeError) -> FabricError {
    match e {
        TreeError::Fabric(f) => f,
        TreeError::Corrupt { off, .. } => out_of_range(r.node(), off, 0),
        TreeError::Full => FabricError::Unsupported {
            what: "the memory node's heap is full",
        },
    }
}

impl WortServer {
    /// A server of `kind`; it formats or opens its store when the first message arrives.
    pub fn new(kind: Kind) -> WortServer {
        WortServer {
            kind,
            tree: None,
            owners: Vec::new(),
            rings: (0, 0, 0),
            stats: ServerStats::default(),
            reply: [0; REPLY_MAX],
            key: [0; KEY_MAX],
            value: [0; VALUE_MAX],
            req: [0; SLOT_LEN],
        }
    }

    /// A snapshot of the server's and its tree's counters.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            tree: self.tree.as_ref().map(|t| t.stats).unwrap_or_default(),
            ..self.stats
        }
    }

    /// The tree, once opened (tests read it directly).
    pub fn tree(&self) -> Option<&Tree> {
        self.tree.as_ref()
    }

    /// Which tree this server runs.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub(super) fn tree_mut(&mut self) -> Option<&mut Tree> {
        self.tree.as_mut()
    }

    /// Formats the region, or opens and repairs the published store; returns the repair
    /// report. Idempotent.
    pub fn open(&mut self, r: &dyn LocalRegion) -> Result<String, FabricError> {
        if self.tree.is_some() {
            return Ok(String::new());
        }
        let sb = r.load_u64(root_offset(self.kind.root_slot()))?;
        let (tree, report) = if sb == 0 {
            let t = Tree::format(r, self.kind, MAX_CLIENTS, RING_SLOTS).map_err(|e| fail(r, e))?;
            (t, String::new())
        } else {
            let mut t = Tree::open(r, self.kind, sb).map_err(|e| fail(r, e))?;
            let (nodes, leaves, repaired) = t.recover(r).map_err(|e| fail(r, e))?;
            let report = format!(
                "{}: {nodes} inner nodes, {leaves} keys, {repaired} node headers repaired, heap {} KiB in use",
                self.kind.name(),
                t.heap_used() >> 10
            );
            (t, report)
        };
        self.rings = tree.rings(r).map_err(|e| fail(r, e))?;
        self.owners = vec![None; self.rings.0 as usize];
        self.tree = Some(tree);
        Ok(report)
    }

    fn hello(&mut self, conn: usize, replies: &mut Replies) {
        // A connection has one ring: a repeated hello is answered with the ring it has
        // (else one connection could take every ring and lock all other clients out).
        let mine = self.owners.iter().position(|o| *o == Some(conn));
        let status = match mine.or_else(|| self.owners.iter().position(|o| o.is_none())) {
            Some(id) => {
                if mine.is_none() {
                    self.stats.sessions += 1;
                }
                self.owners[id] = Some(conn);
                let mut v = [0u8; 24];
                let sb = self.tree.as_ref().map_or(0, |t| t.sb);
                v[..8].copy_from_slice(&sb.to_le_bytes());
                v[8..16].copy_from_slice(&self.rings.2.to_le_bytes());
                v[16..24].copy_from_slice(&(self.rings.1 as u64).to_le_bytes());
                let n = encode_reply(&mut self.reply, Status::Welcome, 0, id as u32, &[], &v);
                replies.send(&self.reply[..n]);
                return;
            }
            None => Status::TooManyClients,
        };
        let n = encode_reply(&mut self.reply, status, 0, 0, &[], &[]);
        replies.send(&self.reply[..n]);
    }

    fn serve(
        &mut self,
        r: &dyn LocalRegion,
        conn: usize,
        imm: u32,
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let (client, slot) = (imm >> 16, (imm & 0xFFFF) as u16);
        let (clients, slots, ring_off) = self.rings;
        if client >= clients || slot as u32 >= slots || self.owners[client as usize] != Some(conn) {
            // Not this connection's ring: a protocol violation, the connection goes.
            return Err(FabricError::RemoteInvalid {
                wr: 0,
                addr: remora_layouts::GlobalAddr::NULL,
                why: "a WORT request names a ring this connection does not own",
            });
        }
        self.stats.requests += 1;
        let at = ring_off + (client as u64 * slots as u64 + slot as u64) * SLOT_LEN as u64;
        r.read(at, &mut self.req[..REQ_HEAD])?;
        let req = match decode_request(&self.req[..REQ_HEAD]) {
            Ok(q) => q,
            Err(_) => {
                self.stats.bad_requests += 1;
                let n = encode_reply(&mut self.reply, Status::BadRequest, slot, 0, &[], &[]);
                replies.send(&self.reply[..n]);
                return Ok(());
            }
        };
        if req.value_len > 0 {
            r.read(
                at + REQ_HEAD as u64,
                &mut self.req[REQ_HEAD..REQ_HEAD + req.value_len],
            )?;
        }
        let Some(tree) = self.tree.as_mut() else {
            return Err(FabricError::Unsupported {
                what: "the WORT store is not open",
            });
        };
        let value = &self.req[REQ_HEAD..REQ_HEAD + req.value_len];
        let mut out: (&[u8], &[u8]) = (&[], &[]);
        let result = match req.op {
            ReqOp::Get => tree.get(r, req.key()).map(|l| l.map(|l| (l, true))),
            ReqOp::Next => tree
                .next(r, req.key(), req.flags & FLAG_EXCLUSIVE != 0)
                .map(|l| l.map(|l| (l, true))),
            ReqOp::Upsert => tree
                .put(r, req.key(), value, false)
                .map(|_| Some((0, false))),
            ReqOp::Update => tree
                .put(r, req.key(), value, true)
                .map(|p| p.then_some((0, false))),
            ReqOp::Delete => tree.delete(r, req.key()).map(|p| p.then_some((0, false))),
        };
        let status = match result {
            Ok(Some((leaf, true))) => {
                let (kl, vl) = tree
                    .read_leaf(r, leaf, &mut self.key, &mut self.value)
                    .map_err(|e| fail(r, e))?;
                out = (&self.key[..kl], &self.value[..vl]);
                Status::Ok
            }
            Ok(Some(_)) => Status::Ok,
            Ok(None) => Status::Absent,
            Err(TreeError::Full) => {
                self.stats.full += 1;
                Status::Full
            }
            Err(e) => return Err(fail(r, e)),
        };
        let n = encode_reply(&mut self.reply, status, slot, req.seq, out.0, out.1);
        replies.send(&self.reply[..n]);
        Ok(())
    }
}

impl Handler for WortServer {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        self.open(region)?;
        match recv.kind {
            RecvKind::Send if msg.len() >= 8 && msg[..8] == HELLO => {
                self.hello(conn, replies);
                Ok(())
            }
            RecvKind::Send => Err(FabricError::RemoteInvalid {
                wr: 0,
                addr: remora_layouts::GlobalAddr::NULL,
                why: "a WORT server takes a hello SEND, then WRITE_WITH_IMM requests",
            }),
            RecvKind::WriteImm => self.serve(region, conn, recv.imm.unwrap_or(u32::MAX), replies),
        }
    }

    fn recover(&mut self, region: &dyn LocalRegion) -> Result<String, FabricError> {
        self.tree = None;
        self.owners.clear();
        self.open(region)
    }

    fn on_disconnect(&mut self, _region: &dyn LocalRegion, conn: usize) {
        for o in self.owners.iter_mut() {
            if *o == Some(conn) {
                *o = None;
            }
        }
    }

    fn service(&self) -> &'static str {
        self.kind.name()
    }
}

//! The Catfish server: fast messaging on the memory node's CPU.
//!
//! Every request (a SEND, or a WRITE_WITH_IMM into the client's mailbox whose immediate is
//! the mailbox offset / 8) is handled to completion by the node's event loop (the paper's
//! event-based fast messaging: the server sleeps on its completion queue instead of polling
//! ring buffers). Replies go back as SENDs; a search's hits may span several messages, the
//! last flagged [`FLAG_LAST`]. Every reply carries the server's load, and the load is also
//! published as a heartbeat word in the superblock, where offloading clients READ it with
//! their first doorbell.
use super::CatfishError;
use super::tree::Tree;
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{Handler, LocalRegion, Replies};
use core::sync::atomic::{AtomicU32, Ordering};
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::{
    ENTRY_LEN, Entry, FLAG_LAST, Heartbeat, META_HEARTBEAT_OFFSET, Opcode, REQUEST_LEN, Request,
    ResponseHeader, Status, encode_entry, hits_per_message,
};
use remora_layouts::region::HEADER_LEN;
use std_alloc::sync::Arc;
use std_alloc::vec::Vec;

/// Events between two heartbeats (the paper sends one every 10 ms; the server has no clock,
/// so it counts handled events instead).
pub const HEARTBEAT_EVERY: u64 = 16;

/// Estimates the server's CPU utilisation from what its event loop does: an exponential
/// moving average (weight 1/16) of busy (a message) versus idle (nothing arrived) events.
/// On a fabric that never reports idle time (the sim), a probe can supply the load instead.
#[derive(Debug, Default)]
pub struct LoadMeter {
    ema: u32,
    probe: Option<Arc<AtomicU32>>,
}

impl LoadMeter {
    fn record(&mut self, busy: bool) {
        let sample = if busy { 1000 * 16 } else { 0 };
        self.ema = self.ema - self.ema / 16 + sample / 16;
    }
    /// Utilisation in per-mille.
    pub fn load(&self) -> u16 {
        match &self.probe {
            Some(p) => p.load(Ordering::Relaxed).min(1000) as u16,
            None => (self.ema / 16).min(1000) as u16,
        }
    }
}

/// The fast-messaging server as a [`Handler`].
pub struct CatfishServer {
    tree: Option<Tree>,
    meter: LoadMeter,
    max_message: usize,
    events: u64,
    seq: u64,
    hits: Vec<Entry>,
    msg: Vec<u8>,
    handled: u64,
}

impl CatfishServer {
    /// A server whose clients' receive buffers take `max_message` bytes.
    pub fn new(max_message: usize) -> CatfishServer {
        CatfishServer {
            tree: None,
            meter: LoadMeter::default(),
            max_message,
            events: 0,
            seq: 0,
            hits: Vec::new(),
            msg: Vec::with_capacity(max_message),
            handled: 0,
        }
    }

    /// Reports `probe` (per-mille) as the load instead of the event-loop estimate.
    pub fn with_load_probe(mut self, probe: Arc<AtomicU32>) -> CatfishServer {
        self.meter.probe = Some(probe);
        self
    }

    fn tick(&mut self, region: &dyn LocalRegion, busy: bool) {
        self.meter.record(busy);
        self.events += 1;
        if self.events.is_multiple_of(HEARTBEAT_EVERY)
            && let Some(t) = &self.tree
        {
            self.seq += 1;
            let hb = Heartbeat {
                load_permille: self.meter.load(),
                seq: self.seq,
            };
            // A failed store means the superblock is outside the region: nothing to report to.
            let _ = region.store_u64(t.meta() + META_HEARTBEAT_OFFSET, hb.encode());
        }
    }

    fn header(&self, status: Status, flags: u8, req_id: u32, count: u32) -> ResponseHeader {
        ResponseHeader {
            status,
            flags,
            req_id,
            load_permille: self.meter.load(),
            count,
        }
    }

    fn reply(&self, replies: &mut Replies, status: Status, req_id: u32) {
        replies.send(&self.header(status, FLAG_LAST, req_id, 0).encode());
    }

    fn serve(&mut self, region: &dyn LocalRegion, req: &Request, replies: &mut Replies) -> Status {
        let arena = || {
            let a = GlobalAddr::from_raw(req.arg0);
            (a.node() == region.node() && !a.is_device()).then_some((a.offset(), req.arg1))
        };
        let result = match (req.op, self.tree.as_mut()) {
            // Formatting over a live tree would strand its clients.
            (Opcode::Init, Some(_)) => return Status::BadRequest,
            (Opcode::Init, None) => match arena() {
                Some((base, len)) => Tree::format(region, base, len).map(|t| {
                    self.tree = Some(t);
                }),
                None => return Status::BadRequest,
            },
            (_, None) => return Status::NotInitialized,
            (Opcode::Grow, Some(t)) => match arena() {
                Some((base, len)) => t.grow(region, base, len),
                None => return Status::BadRequest,
            },
            (Opcode::Insert, Some(t)) => t.insert(region, req.rect, req.arg0),
            (Opcode::Search, Some(t)) => {
                self.hits.clear();
                match t.search(region, &req.rect, &mut self.hits) {
                    Ok(()) => {
                        self.send_hits(req.req_id, replies);
                        return Status::Ok;
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match result {
            Ok(()) => Status::Ok,
            Err(CatfishError::Full) => Status::Full,
            Err(CatfishError::Layout(_)) if matches!(req.op, Opcode::Init | Opcode::Grow) => {
                Status::BadRequest
            }
            Err(CatfishError::Layout(_)) if req.op == Opcode::Insert && !req.rect.is_valid() => {
                Status::BadRequest
            }
            Err(_) => Status::Corrupt,
        }
    }

    fn send_hits(&mut self, req_id: u32, replies: &mut Replies) {
        let per = hits_per_message(self.max_message).max(1);
        let mut chunks = self.hits.chunks(per).peekable();
        if chunks.peek().is_none() {
            self.reply(replies, Status::Ok, req_id);
            return;
        }
        while let Some(chunk) = chunks.next() {
            let flags = if chunks.peek().is_none() {
                FLAG_LAST
            } else {
                0
            };
            let h = self.header(Status::Ok, flags, req_id, chunk.len() as u32);
            self.msg.clear();
            self.msg.extend_from_slice(&h.encode());
            let mut e = [0u8; ENTRY_LEN];
            for hit in chunk {
                encode_entry(hit, &mut e);
                self.msg.extend_from_slice(&e);
            }
            replies.send(&self.msg);
        }
    }

    /// Requests served so far.
    pub fn handled(&self) -> u64 {
        self.handled
    }
}

impl Handler for CatfishServer {
    fn service(&self) -> &'static str {
        "catfish"
    }

    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        _conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        self.tick(region, true);
        let mut mailbox = [0u8; REQUEST_LEN];
        let bytes = match recv.kind {
            RecvKind::Send => msg,
            // The request was written into the client's mailbox; the immediate names it.
            RecvKind::WriteImm => {
                let at = u64::from(recv.imm.unwrap_or(0)) * 8;
                if recv.len as usize != REQUEST_LEN || at < HEADER_LEN as u64 {
                    return Err(FabricError::Unsupported {
                        what: "WRITE_WITH_IMM that is not a Catfish request",
                    });
                }
                region.read(at, &mut mailbox)?;
                &mailbox[..]
            }
        };
        // A request that does not decode has no id to answer: drop the connection.
        let req = Request::decode(bytes).map_err(|_| FabricError::Unsupported {
            what: "malformed Catfish request",
        })?;
        self.handled += 1;
        let status = self.serve(region, &req, replies);
        if status != Status::Ok || req.op != Opcode::Search {
            self.reply(replies, status, req.req_id);
        }
        Ok(())
    }

    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        self.tick(region, false);
        false
    }
}

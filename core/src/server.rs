//! Code that runs on a memory node's CPU: the contract between server-side logic (CANRT's
//! metadata applier, Erda's metadata server, Catfish's server, the echo service) and the
//! fabric that delivers its messages.
//!
//! A fabric's memory node calls [`Handler::on_message`] for every receive completion on any
//! of its connections (a SEND's payload, or a WRITE_WITH_IMM notice with its immediate), and
//! [`Handler::on_idle`] when nothing arrived, and sends the replies the handler queued back
//! on the same connection. The handler reaches the node's own memory through
//! [`LocalRegion`]: bounds-checked, words atomic (the NIC writes the same memory
//! concurrently), and `persist` for what must survive a crash.
use crate::fabric::{FabricError, Recv};
use remora_layouts::region::{HEADER_LEN, NEXT_CHUNK_OFFSET, RegionHeader};
use remora_layouts::{GlobalAddr, NodeId};
use std_alloc::string::String;
use std_alloc::vec::Vec;

/// A memory node's host region as its own CPU sees it.
pub trait LocalRegion {
    /// The memory node this region belongs to.
    fn node(&self) -> NodeId;
    /// Bytes in the region, header included.
    fn len(&self) -> u64;
    /// Whether the region has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies bytes out (word-wise atomic loads: a concurrent NIC write may tear between words).
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError>;
    /// Copies bytes in (word-wise atomic stores).
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError>;
    /// An aligned 8-byte word. The default reads it with [`LocalRegion::read`]; a region that
    /// other CPU threads touch concurrently overrides the three word methods with atomics
    /// (the soft fabric's region does).
    fn load_u64(&self, offset: u64) -> Result<u64, FabricError> {
        let mut b = [0u8; 8];
        aligned(self, offset)?;
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    /// Stores an aligned 8-byte word (little-endian). The default writes it with [`LocalRegion::write`].
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), FabricError> {
        aligned(self, offset)?;
        self.write(offset, &value.to_le_bytes())
    }
    /// Compare-and-swap on an aligned word; returns the prior value. Atomic against the CPU
    /// only: a NIC atomic on the same word is not ordered with it (the contract's rule 3).
    /// The default is a read then a write: right for a region only one thread touches.
    fn cas_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, FabricError> {
        let old = self.load_u64(offset)?;
        if old == current {
            self.store_u64(offset, new)?;
        }
        Ok(old)
    }
    /// Makes `[offset, offset + len)` durable: flush and fence on persistent memory, nothing
    /// on DRAM.
    fn persist(&self, _offset: u64, _len: usize) {}
    /// [`LocalRegion::persist`] with `clflush`: the range's lines are written back, fenced
    /// and dropped from the CPU's caches, so the next access to them misses (WORT's and
    /// WOART's `flush_buffer` is `clflush` between two `mfence`s). The default is
    /// [`LocalRegion::persist`]: a fabric that models no cache has nothing to drop.
    fn persist_evict(&self, offset: u64, len: usize) {
        self.persist(offset, len)
    }
    /// The node's clock and the CPU time its handler threads have spent serving, where the
    /// fabric accounts it (the sim does, in virtual time); `None` elsewhere. A load meter
    /// reads it twice and takes [`CpuClock::load_permille_since`]: real idle time, not a
    /// count of events.
    fn cpu_clock(&self) -> Option<CpuClock> {
        None
    }
    /// States `ns` of CPU time the handler spends computing beyond what the fabric sees of
    /// it (its memory accesses): the sim charges it to the serving thread with the message's
    /// memory; real fabrics ignore it (the time is really spent). A handler states only
    /// measured costs (Catfish's insert: `catfish::server`).
    fn charge_cpu_ns(&self, _ns: u64) {}
    /// States that the handler holds its served structure's lock for the rest of this
    /// message's service: `exclusive` as a writer, else shared as a reader. The sim
    /// serialises the services of its threads under one such lock per node, in virtual time
    /// (model `server_tree_lock`); real fabrics ignore it (the handler's own lock, if any,
    /// does it). Catfish's server states it (`catfish::server`).
    fn hold_lock(&self, _exclusive: bool) {}
}

/// A memory node's CPU accounting at one instant (see [`LocalRegion::cpu_clock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuClock {
    /// The node's clock, in nanoseconds (virtual time on the sim).
    pub now_ns: u64,
    /// CPU time all handler threads together have been busy serving, in nanoseconds.
    pub busy_ns: u64,
    /// Handler threads.
    pub threads: u32,
}

impl CpuClock {
    /// Utilisation of all handler threads between `earlier` and `self`, in per-mille
    /// (`None` if no time passed).
    pub fn load_permille_since(&self, earlier: &CpuClock) -> Option<u16> {
        let span = self.now_ns.checked_sub(earlier.now_ns)?;
        let capacity = span.checked_mul(u64::from(self.threads.max(1)))?;
        if capacity == 0 {
            return None;
        }
        let busy = self.busy_ns.saturating_sub(earlier.busy_ns);
        Some((busy.saturating_mul(1000) / capacity).min(1000) as u16)
    }
}

fn aligned<R: LocalRegion + ?Sized>(r: &R, offset: u64) -> Result<(), FabricError> {
    if offset.is_multiple_of(8) {
        Ok(())
    } else {
        Err(out_of_range(r.node(), offset, 8))
    }
}

/// Claims `len` bytes (rounded up to the region's chunk size) from the region's chunk
/// allocator with the memory node's own CPU, as a server formatting its store does: a CAS
/// loop on the region header's next-chunk word. `Ok(None)`: the region has no room.
///
/// The CPU's CAS is not atomic against a NIC FETCH_AND_ADD on the same word (contract rule
/// 3): on hardware, claim before clients allocate on this node.
pub fn claim_chunks(region: &dyn LocalRegion, len: u64) -> Result<Option<u64>, FabricError> {
    let mut hdr = [0u8; HEADER_LEN];
    region.read(0, &mut hdr)?;
    let h = RegionHeader::decode(&hdr).map_err(|_| FabricError::Unsupported {
        what: "region header does not decode",
    })?;
    let Some(need) = len.checked_next_multiple_of(h.chunk_size) else {
        return Ok(None);
    };
    let mut cur = region.load_u64(NEXT_CHUNK_OFFSET)?;
    loop {
        let Some(end) = cur.checked_add(need).filter(|&e| e <= region.len()) else {
            return Ok(None);
        };
        let seen = region.cas_u64(NEXT_CHUNK_OFFSET, cur, end)?;
        if seen == cur {
            return Ok(Some(cur));
        }
        cur = seen;
    }
}

/// The error of an out-of-range local access, in the contract's terms.
pub fn out_of_range(node: NodeId, offset: u64, len: usize) -> FabricError {
    FabricError::RemoteAccess {
        wr: 0,
        addr: GlobalAddr::try_new(node, offset).unwrap_or(GlobalAddr::NULL),
        len,
    }
}

/// Replies a handler queues for the connection it is serving; sent in order after
/// `on_message` returns. Reused between messages, so steady-state serving allocates nothing.
///
/// A handler may also queue a SEND to *another* connection ([`Replies::send_to`]): a wake-up
/// for a client that asked to be told when something happens (a CANRT lock waiter whose
/// ticket is served by another client's message). Such a SEND is best effort: a connection
/// that is gone (or a fabric whose server loop does not deliver them) drops it, so the
/// client waiting for it must also look for itself now and then.
#[derive(Default)]
pub struct Replies {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// Per message: the connection it goes to (`CURRENT`: the one being served).
    to: Vec<usize>,
}

const CURRENT: usize = usize::MAX;

impl Replies {
    /// No messages queued.
    pub fn new() -> Replies {
        Replies::default()
    }
    /// Queues one SEND back to the client.
    pub fn send(&mut self, msg: &[u8]) {
        self.push(CURRENT, msg);
    }
    /// Queues one SEND to connection `conn` (another client of this node); see the type's
    /// docs. `conn` is the id `Handler::on_message` names connections by.
    pub fn send_to(&mut self, conn: usize, msg: &[u8]) {
        self.push(conn, msg);
    }
    fn push(&mut self, to: usize, msg: &[u8]) {
        self.bytes.extend_from_slice(msg);
        self.ends.push(self.bytes.len());
        self.to.push(to);
    }
    /// Whether no message is queued.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    fn all(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let mut start = 0;
        self.ends.iter().zip(&self.to).map(move |(&end, &to)| {
            let m = &self.bytes[start..end];
            start = end;
            (to, m)
        })
    }
    /// The queued messages for the connection being served, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.all().filter(|m| m.0 == CURRENT).map(|m| m.1)
    }
    /// The queued messages for other connections, in order, with their connection.
    pub fn iter_other(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.all().filter(|m| m.0 != CURRENT)
    }
    /// Drops every queued message.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.to.clear();
    }
}

/// Server-side logic of a memory node.
pub trait Handler {
    /// A receive completion on connection `conn`: `msg` is a SEND's payload (empty for a
    /// WRITE_WITH_IMM, whose data is already in the region). An error drops that connection
    /// (the client sees its queue pair fail), never the node.
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError>;

    /// Connection `conn` is new: `peer` is its client's fabric id, as the fabric knows it
    /// (what that client's [`Endpoint::client_id`](crate::fabric::Endpoint::client_id)
    /// returns for this node and [`Endpoint::fence`](crate::fabric::Endpoint::fence) takes;
    /// 0 if the fabric assigns none). Called before any message of `conn`. A client can say
    /// anything about itself in its messages; this is the identity a handler may quote to
    /// other clients (as the holder to fence). Fencing a client ends its connections here:
    /// the fabric calls [`Handler::on_disconnect`] for each.
    fn on_connect(&mut self, _region: &dyn LocalRegion, _conn: usize, _peer: u32) {}

    /// Nothing arrived: background work (log cleaning, resizing); true if it did any.
    fn on_idle(&mut self, _region: &dyn LocalRegion) -> bool {
        false
    }

    /// Background work the service does on a thread of its own (Erda's log cleaner, the
    /// baselines' asynchronous apply: the authors' servers run each in a pthread of its own).
    /// A fabric that gives the node such a thread calls this on it, again while it returns
    /// true (it did some work) and again after each later message; its CPU time is that
    /// thread's, not the request threads'. A handler that has been called here leaves that
    /// work to this call from then on, instead of doing it inline after its messages. A
    /// fabric without such a thread never calls it (and the handler keeps its work inline,
    /// or on [`Handler::on_idle`]). Default: no background work.
    fn on_background(&mut self, _region: &dyn LocalRegion) -> bool {
        false
    }

    /// The node restarts on a region that holds a previous life's state (a file or
    /// persistent memory): repair it before any client connects, and say what was repaired.
    /// The default trusts the region as it is.
    fn recover(&mut self, _region: &dyn LocalRegion) -> Result<String, FabricError> {
        Ok(String::new())
    }

    /// Connection `conn` has ended, cleanly or not (its client hung up, died, or a message
    /// of it was refused). Every per-client resource (sessions, mailboxes, tickets, grants)
    /// is released or fenced here; the fabric delivers nothing more from `conn`.
    fn on_disconnect(&mut self, _region: &dyn LocalRegion, _conn: usize) {}

    /// The service's name, told to every connecting client so that a client of another
    /// service can say what it found instead of failing obscurely. At most 8 ASCII bytes.
    fn service(&self) -> &'static str {
        "custom"
    }

    /// A handler for one more server thread of the same node, sharing this handler's
    /// service state (a node with N threads asks N - 1 times; each thread then serves its
    /// own share of the connections, so each connection sees one handler only). `None`: this
    /// service runs on one thread, and the node's threads take turns on this handler.
    fn fork(&mut self) -> Option<std_alloc::boxed::Box<dyn Handler + Send>> {
        None
    }
}

/// The echo service as a [`Handler`] (see [`crate::echo`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Echo;

impl Handler for Echo {
    fn on_message(
        &mut self,
        _region: &dyn LocalRegion,
        _conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        match recv.kind {
            crate::fabric::RecvKind::Send => replies.send(msg),
            crate::fabric::RecvKind::WriteImm => {
                replies.send(&crate::echo::imm_reply(recv.imm.unwrap_or(0), recv.len))
            }
        }
        Ok(())
    }

    fn service(&self) -> &'static str {
        "echo"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std_alloc::vec;

    #[test]
    fn replies_keep_order_and_reuse_their_buffers() {
        let mut r = Replies::new();
        r.send(b"one");
        r.send(b"");
        r.send(b"three");
        r.send_to(7, b"other");
        let got: Vec<&[u8]> = r.iter().collect();
        assert_eq!(got, vec![&b"one"[..], b"", b"three"]);
        let other: Vec<(usize, &[u8])> = r.iter_other().collect();
        assert_eq!(other, vec![(7, &b"other"[..])]);
        let cap = r.bytes.capacity();
        r.clear();
        assert!(r.is_empty());
        r.send(b"x");
        assert_eq!(r.bytes.capacity(), cap);
    }

    #[test]
    fn cpu_clock_load_is_busy_over_capacity() {
        let a = CpuClock {
            now_ns: 1_000,
            busy_ns: 500,
            threads: 2,
        };
        let b = CpuClock {
            now_ns: 2_000,
            busy_ns: 1_250,
            threads: 2,
        };
        assert_eq!(b.load_permille_since(&a), Some(375));
        assert_eq!(a.load_permille_since(&a), None, "no time passed");
        assert_eq!(a.load_permille_since(&b), None, "time ran backwards");
    }
}

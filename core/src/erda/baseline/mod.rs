//! Erda's two baselines (seeds/004, section 5, "Comparisons"), on Erda's hash table (the same
//! 32-byte buckets, home and neighborhood, hopscotch displacement) and the same server
//! contract ([`crate::server::Handler`]):
//!
//! - **Redo Logging** ([`Scheme::Redo`], a CPU-involvement scheme): the client SENDs the write
//!   (a log record: header with a CRC-32C, key, value) to the server, which verifies the CRC,
//!   appends the record to its redo log in NVM, persists it, answers, and applies it to the
//!   destination storage asynchronously (the key's hash-table entry and its data slot).
//! - **Read-After-Write** ([`Scheme::Raw`], a network-dominant scheme): the client SENDs a
//!   request and gets an address in the server's ring buffer, WRITEs the record there and READs
//!   it back in the same doorbell (the READ forces the WRITE out of the NIC: persistent with
//!   ADR, see `erda/mod.rs`, "Durability"); the server polls the ring, verifies each record's
//!   CRC and applies it asynchronously, as Redo does.
//! - **Reads**, in both: a SEND answered by the server, from the log if the key has a record
//!   not yet applied, else from the table and the data slot.
//!
//! # Decisions where the paper is vague (written here, tested in `poller/tests/erda_baselines*`)
//!
//! - *Asynchronous apply.* The server keeps the records not yet applied in log order and
//!   applies the oldest ones when more than [`APPLY_LAG`] are waiting (so on a busy server
//!   each write pays about one apply, after the records of earlier requests), everything on
//!   `on_idle`, and everything on a [`Op::Drain`] request (tests and `--table1` use it to
//!   settle all NVM writes before counting). Where the fabric gives the node a background
//!   thread (`Handler::on_background`; the sim's `background_threads`, set by the erda
//!   profile after the authors' `rbflush` pthread), the lag is kept there and the request
//!   path applies only what exceeds [`BACKGROUND_BACKLOG`]; otherwise (the sim's server
//!   never idles) the lag is kept inline, charged to the message that triggers it.
//! - *Read-After-Write ordering.* One write of a key is in flight at a time: a reservation
//!   for a key whose previous reserved record has not landed (its CRC does not verify yet) is
//!   answered `Busy` and the client asks again after a back-off (bounded by its deadline).
//!   So the write takes effect when
//!   its record lands whole, which is between the reservation and the end of the client's
//!   doorbell; a read that finds the reserved record whole answers from it, else from the
//!   key's previous state. Update and delete are answered present/absent at reservation
//!   time from the settled state (no other write of the key is in flight then).
//! - *Reservation lease* (not in the paper, whose clients never die). A reservation whose
//!   record has not landed after [`RESERVATION_LEASE`] server steps (messages handled and
//!   idle calls: the server has no clock, and counts its own progress, which no client
//!   states) is **voided** when it blocks something: a request for its key, or the apply at
//!   the ring's tail. Otherwise a writer that died (or a client that never meant to write)
//!   would block its key, and the ring's apply order, for good. Voiding is safe for a
//!   writer that was only slow: a RAW slot is the record, padded to 8 bytes, then a *void
//!   word*; the server stores [`void_word`]`(pos)` there with a compare-and-swap (a full
//!   barrier) and only *then* looks whether the record has landed. The writer's doorbell
//!   READs the void word back after its WRITE. If it reads no void word, its WRITE landed
//!   before the server's store, so the server found the record whole and kept it; if it
//!   reads one, it asks the server ([`Op::Check`]) which of the two happened: kept
//!   (`Granted`) or voided (`Busy`: the write took no effect, and the client writes again).
//!   A voided slot's word is persisted, and recovery does not replay a record followed by
//!   its void word. Residual window: a writer that stalls for a lease and then a whole lap
//!   of the ring *between* its reservation reply and its WRITE landing can have that late
//!   WRITE land in a slot reserved again (as CANRT's skipped holder, `canrt/mod.rs`).
//! - *Ring buffer.* Records never span the ring's end. A record's CRC covers its absolute
//!   ring position too (Redo's server re-stamps the client's CRC with it), so a stale record
//!   of an earlier lap never verifies. Space is reused
//!   once applied. A full ring answers `LogFull` after applying what it can; clients back off.
//! - *Destination storage.* A key's data slot is allocated at create in a data area (head 0
//!   of the store; the ring is head 1), sized for its value; an update of the same size or
//!   smaller rewrites the slot in place (the paper's update writes no metadata), a larger one
//!   moves it (new slot, new metadata word). Deleted keys' slots are not reused (nothing in the
//!   baseline comparison deletes at scale).
//! - *Crash recovery*: every record is persisted before its write is acknowledged (Redo: by
//!   the server; RAW: by the client's READ after its WRITE), and the apply persists each
//!   change. The applied position is durable (advanced before the ring laps it), so a restart
//!   replays every whole record in `[applied, applied + ring)`, in position order (each
//!   record's CRC covers its position, so stale laps are skipped). A RAW slot
//!   reserved but never written leaves a hole that the replay steps over.
//!
//! NVM bytes each operation writes, in this format and in the paper's, are in [`table1`].
mod client;
#[cfg(test)]
mod lease_tests;
mod server;
pub mod table1;

pub use client::{Baseline, BaselineStats};
pub use server::{BaselineServer, BaselineServerStats};

use remora_layouts::erda::{KEY_MAX, Status, VALUE_MAX};

/// Which baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Redo Logging: writes are SENT into the server's redo log.
    Redo,
    /// Read-After-Write: writes are WRITTEN into a ring slot and read back.
    Raw,
}

impl Scheme {
    /// The memory-node service name (at most 8 ASCII bytes).
    pub const fn service(self) -> &'static str {
        match self {
            Scheme::Redo => "erdaredo",
            Scheme::Raw => "erda-raw",
        }
    }
    /// The scheme's name in reports (`erda-redo` or `erda-raw`).
    pub const fn name(self) -> &'static str {
        match self {
            Scheme::Redo => "erda-redo",
            Scheme::Raw => "erda-raw",
        }
    }
}

/// Records waiting to be applied before the server applies the oldest.
pub const APPLY_LAG: usize = 16;

/// Records a background apply ([`crate::server::Handler::on_background`]) may fall behind
/// before the request path applies the excess itself: the authors' ring buffer holds 210
/// records (`RBUFFERSIZE`, Redo Logging/DS_s.h and Read After Write/DS_s.h), and their
/// request thread waits (`wait()`, server.c) while it is nearly full, so a write never
/// outruns the apply by more than a ring.
pub const BACKGROUND_BACKLOG: usize = 210;

/// Root slot of the region header naming a baseline store (Erda's is 4, CANRT's 3).
pub const ROOT_SLOT: usize = 6;

/// Bytes of a request's header, of a reply's header, of a log record's header.
pub(crate) const REQ_HEADER: usize = 16;
pub(crate) const REPLY_HEADER: usize = 24;
pub(crate) const REC_HEADER: usize = 8;

/// The largest message either side sends: a reply carrying a 4 KiB value, or a Redo write
/// carrying a 4 KiB record. A fabric with smaller receive buffers refuses such values (the
/// bench raises the sim's `max_message` and the soft node's `max_msg` for these indexes).
pub const MAX_MESSAGE: usize = REQ_HEADER + REC_HEADER + KEY_MAX + VALUE_MAX;

/// Request kinds (byte 0 of a request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Op {
    Hello = 1,
    Get = 2,
    /// A Redo write: the record follows the header.
    Write = 3,
    /// A Read-After-Write reservation: the key follows the header.
    Reserve = 4,
    /// Apply every landed record now; the reply's `arg` is how many are left waiting.
    Drain = 5,
    /// RAW: whether the record reserved at ring position `pos` (8 bytes little-endian after
    /// the header) counts: `Granted` if it was kept, `Busy` if its reservation was voided
    /// (see "Reservation lease"), `BadRequest` if the server no longer knows.
    Check = 6,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Hello,
            2 => Op::Get,
            3 => Op::Write,
            4 => Op::Reserve,
            5 => Op::Drain,
            6 => Op::Check,
            _ => return None,
        })
    }
}

/// Record kinds (byte 0 of a log record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RecOp {
    Upsert = 1,
    Update = 2,
    Delete = 3,
}

impl RecOp {
    pub(crate) fn from_u8(b: u8) -> Option<RecOp> {
        Some(match b {
            1 => RecOp::Upsert,
            2 => RecOp::Update,
            3 => RecOp::Delete,
            _ => return None,
        })
    }
}

/// A request's header: kind, record kind (Reserve), key and value lengths, sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReqHeader {
    pub op: Op,
    pub rec: u8,
    pub key_len: u8,
    pub value_len: u16,
    pub seq: u32,
    /// Hello: the fabric client id.
    pub aux: u32,
}

impl ReqHeader {
    pub fn encode(&self) -> [u8; REQ_HEADER] {
        let mut b = [0u8; REQ_HEADER];
        b[0] = self.op as u8;
        b[1] = self.rec;
        b[2] = self.key_len;
        b[4..6].copy_from_slice(&self.value_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.seq.to_le_bytes());
        b[12..16].copy_from_slice(&self.aux.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Option<ReqHeader> {
        if b.len() < REQ_HEADER {
            return None;
        }
        Some(ReqHeader {
            op: Op::from_u8(b[0])?,
            rec: b[1],
            key_len: b[2],
            value_len: u16::from_le_bytes([b[4], b[5]]),
            seq: u32::from_le_bytes(b[8..12].try_into().ok()?),
            aux: u32::from_le_bytes(b[12..16].try_into().ok()?),
        })
    }
}

/// A reply's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplyHeader {
    pub status: Status,
    pub seq: u32,
    /// Get: the value's length; Reserve: the ring position; Hello: the ring's offset.
    pub arg: u64,
    /// Hello: the ring's length in bytes.
    pub aux: u64,
}

impl ReplyHeader {
    pub fn encode(&self) -> [u8; REPLY_HEADER] {
        let mut b = [0u8; REPLY_HEADER];
        b[0] = self.status as u8;
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..16].copy_from_slice(&self.arg.to_le_bytes());
        b[16..24].copy_from_slice(&self.aux.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Option<ReplyHeader> {
        if b.len() < REPLY_HEADER {
            return None;
        }
        Some(ReplyHeader {
            status: Status::from_u8(b[0]).ok()?,
            seq: u32::from_le_bytes(b[4..8].try_into().ok()?),
            arg: u64::from_le_bytes(b[8..16].try_into().ok()?),
            aux: u64::from_le_bytes(b[16..24].try_into().ok()?),
        })
    }
}

/// Server steps (messages handled, idle calls) after which a RAW reservation whose record
/// has not landed is voided when it blocks its key or the apply (see the module docs). An
/// honest writer's record lands one round trip after its reservation's reply, while the
/// server handles about one message per client in flight: far fewer.
pub const RESERVATION_LEASE: u64 = 1024;

/// The void word of the RAW slot at ring position `pos` (never 0 for a real position).
pub const fn void_word(pos: u64) -> u64 {
    pos ^ 0xD0D0_5107_0000_0000
}

/// Ring bytes a RAW reservation of a record of `len` bytes takes: the record, padded to 8
/// bytes, then its void word.
pub const fn raw_slot_len(len: u64) -> u64 {
    len.next_multiple_of(8) + 8
}

/// Bytes of a log record for a key and value of these lengths (its header, key and value;
/// the next record starts at the next multiple of 8).
pub const fn record_len(key_len: usize, value_len: usize) -> usize {
    REC_HEADER + key_len + value_len
}

/// Writes a log record into `out` (at least [`record_len`] bytes); returns its length. The
/// CRC-32C covers `pos` (the record's ring position; 0 for Redo, whose server writes the log
/// itself), the header's first four bytes, the key and the value.
pub(crate) fn encode_record(
    out: &mut [u8],
    op: RecOp,
    key: &[u8],
    value: &[u8],
    pos: u64,
) -> Option<usize> {
    let n = record_len(key.len(), value.len());
    if key.is_empty() || key.len() > KEY_MAX || value.len() > VALUE_MAX || out.len() < n {
        return None;
    }
    out[0] = op as u8;
    out[1] = key.len() as u8;
    out[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
    out[REC_HEADER..REC_HEADER + key.len()].copy_from_slice(key);
    out[REC_HEADER + key.len()..n].copy_from_slice(value);
    let crc = record_crc(&out[..n], pos);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    Some(n)
}

pub(crate) fn record_crc(rec: &[u8], pos: u64) -> u32 {
    let mut h = [0u8; 12];
    h[..8].copy_from_slice(&pos.to_le_bytes());
    h[8..].copy_from_slice(&rec[..4]);
    super::object_checksum(&h, &rec[REC_HEADER..])
}

/// A decoded log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub op: RecOp,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Decodes and verifies the record at the start of `b` (written for position `pos`): `None`
/// if it is torn, stale, not yet written or malformed.
pub(crate) fn decode_record(b: &[u8], pos: u64) -> Option<Record<'_>> {
    if b.len() < REC_HEADER {
        return None;
    }
    let op = RecOp::from_u8(b[0])?;
    let kl = b[1] as usize;
    let vl = u16::from_le_bytes([b[2], b[3]]) as usize;
    if kl == 0 || kl > KEY_MAX || vl > VALUE_MAX || (op == RecOp::Delete && vl != 0) {
        return None;
    }
    let n = record_len(kl, vl);
    if b.len() < n {
        return None;
    }
    let crc = u32::from_le_bytes(b[4..8].try_into().ok()?);
    if record_crc(&b[..n], pos) != crc {
        return None;
    }
    Some(Record {
        op,
        key: &b[REC_HEADER..REC_HEADER + kl],
        value: &b[REC_HEADER + kl..n],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_verify_only_at_their_position_and_whole() {
        let mut b = [0u8; 64];
        let n = encode_record(&mut b, RecOp::Upsert, b"key", b"value!", 4096).unwrap();
        assert_eq!(n, record_len(3, 6));
        let r = decode_record(&b[..n], 4096).unwrap();
        assert_eq!(
            (r.op, r.key, r.value),
            (RecOp::Upsert, &b"key"[..], &b"value!"[..])
        );
        assert!(
            decode_record(&b[..n], 4096 + 8 * 1024).is_none(),
            "a stale lap"
        );
        assert!(decode_record(&b[..n - 1], 4096).is_none(), "short");
        let mut torn = b;
        torn[n - 1] ^= 1;
        assert!(decode_record(&torn[..n], 4096).is_none(), "torn");
        assert!(decode_record(&[0u8; 32], 0).is_none(), "never written");
    }

    #[test]
    fn headers_round_trip_and_reject_junk() {
        let h = ReqHeader {
            op: Op::Reserve,
            rec: RecOp::Delete as u8,
            key_len: 8,
            value_len: 4096,
            seq: 7,
            aux: 9,
        };
        assert_eq!(ReqHeader::decode(&h.encode()), Some(h));
        assert_eq!(ReqHeader::decode(&[0u8; 16]), None);
        assert_eq!(ReqHeader::decode(&[1u8; 8]), None);
        let r = ReplyHeader {
            status: Status::Busy,
            seq: 3,
            arg: 1 << 40,
            aux: 5,
        };
        assert_eq!(ReplyHeader::decode(&r.encode()), Some(r));
        assert_eq!(ReplyHeader::decode(&[0u8; 24]), None);
    }
}

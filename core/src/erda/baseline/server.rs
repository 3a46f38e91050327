//! The baselines' memory-node CPU: the redo log / ring buffer, the asynchronous apply to
//! the hash table and data slots, and the SEND-answered reads (see `mod.rs`).
use super::{
    APPLY_LAG, MAX_MESSAGE, Op, REC_HEADER, REPLY_HEADER, RESERVATION_LEASE, ROOT_SLOT, RecOp,
    ReplyHeader, ReqHeader, Scheme, decode_record, raw_slot_len, record_len, void_word,
};
use crate::erda::server::corrupt;
mod apply;
mod recovery;
use crate::erda::{ErdaConfig, displace, stripe};
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{Handler, LocalRegion, Replies};
use remora_layouts::erda::{
    BUCKET_LEN, Bucket, KEY_MAX, MAILBOX_LEN, MAX_HEADS, Meta, STRIPE_BUCKETS, SUPERBLOCK_LEN,
    SUPERBLOCK_MAGIC, SUPERBLOCK_VERSION, Status, Superblock, VALUE_MAX, check_key,
};
use remora_layouts::region::root_offset;
use std_alloc::collections::{BTreeMap, VecDeque};
use std_alloc::string::String;
use std_alloc::vec;
use std_alloc::vec::Vec;

/// Head 0 of the store holds the data slots, head 1 the log (ring).
const DATA: u8 = 0;
const RING: u8 = 1;
/// First data byte used (units 0 means "no slot").
const DATA_START: u64 = 64;
/// Bytes of a data slot's header: key length, value length, value capacity.
pub(crate) const SLOT_HEADER: usize = 8;

/// What the server did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BaselineServerStats {
    /// Client sessions accepted (hellos answered).
    pub sessions: u64,
    /// Records appended (Redo) or reserved (RAW).
    pub logged: u64,
    /// Records applied to the table and data slots.
    pub applied: u64,
    /// Reads answered from a record not yet applied.
    pub reads_from_log: u64,
    /// Reads answered from the table.
    pub reads_from_table: u64,
    /// Requests answered `Busy` (RAW: the key's previous record has not landed).
    pub busy: u64,
    /// Writes refused: bad CRC or request, table or log full.
    pub refused: u64,
    /// Entries moved by hopscotch displacement.
    pub displaced: u64,
    /// Ring records replayed by recovery.
    pub replayed: u64,
    /// RAW reservations voided: their record had not landed a lease after they were
    /// granted, and they blocked their key or the apply (see `mod.rs`, "Reservation lease").
    pub voided: u64,
    /// Reservations found landed just as they were to be voided (kept).
    pub kept_late: u64,
}

/// Voided ring positions the server remembers for [`Op::Check`].
const VOIDED_KEPT: usize = 4096;

type KeyBuf = ([u8; KEY_MAX], u8);

fn key_buf(key: &[u8]) -> KeyBuf {
    let mut k = [0u8; KEY_MAX];
    let n = key.len().min(KEY_MAX);
    k[..n].copy_from_slice(&key[..n]);
    (k, n as u8)
}

/// A record in the log, not yet applied.
#[derive(Debug, Clone, Copy)]
struct Queued {
    pos: u64,
    len: u64,
    key: KeyBuf,
    op: RecOp,
    /// Whole (Redo: always; RAW: once its CRC verified).
    landed: bool,
    /// The server's step count when it was reserved (its lease runs from there).
    at: u64,
}

/// A key's records not yet applied: the newest landed one, and (RAW) the one reserved and
/// not yet landed.
#[derive(Debug, Clone, Copy, Default)]
struct KeyState {
    latest: Option<(u64, u64, RecOp)>,
    inflight: Option<(u64, u64, RecOp)>,
}

struct State {
    sb: Superblock,
    /// Next free byte of the data area.
    data_cursor: u64,
    /// Next ring position (absolute, grows forever; the slot is `pos % head_bytes`).
    cursor: u64,
    queue: VecDeque<Queued>,
    /// Data-area bytes the queued records may still need (each at most its record's length:
    /// a slot's header is as long as a record's).
    queued_bytes: u64,
    keys: BTreeMap<KeyBuf, KeyState>,
    present: Vec<bool>,
    /// The durable applied position (every record before it is applied): recovery replays
    /// the ring's records in `[applied, applied + ring)`. Stored in the store's one mailbox
    /// word, advanced when the ring is about to lap it.
    applied: u64,
    scratch: Vec<u8>,
    rec: Vec<u8>,
    /// Messages handled and idle calls so far: the server's clock-free measure of leases.
    steps: u64,
    /// The latest voided RAW positions (at most `VOIDED_KEPT`), and the newest one forgotten.
    voided: VecDeque<u64>,
    forgot: Option<u64>,
}

/// Redo Logging's or Read-After-Write's server ([`Handler`]). Formats its store on the
/// first message (root slot [`ROOT_SLOT`]).
pub struct BaselineServer {
    scheme: Scheme,
    cfg: ErdaConfig,
    st: Option<State>,
    stats: BaselineServerStats,
    /// The fabric runs the apply on a thread of its own ([`Handler::on_background`]):
    /// messages no longer apply.
    background: bool,
}

impl BaselineServer {
    /// `cfg` gives the table geometry and `head_bytes`, the size of the data area and of
    /// the log ring each (`heads` is ignored: always 2).
    pub fn new(scheme: Scheme, cfg: ErdaConfig) -> BaselineServer {
        BaselineServer {
            scheme,
            cfg,
            st: None,
            stats: BaselineServerStats::default(),
            background: false,
        }
    }

    /// A snapshot of the server's counters.
    pub fn stats(&self) -> BaselineServerStats {
        self.stats
    }

    /// Records logged and not yet applied.
    pub fn backlog(&self) -> usize {
        self.st.as_ref().map_or(0, |s| s.queue.len())
    }

    fn reply(&mut self, replies: &mut Replies, status: Status, seq: u32, arg: u64, aux: u64) {
        if matches!(
            status,
            Status::BadRequest | Status::LogFull | Status::TableFull
        ) {
            self.stats.refused += 1;
        }
        if status == Status::Busy {
            self.stats.busy += 1;
        }
        replies.send(
            &ReplyHeader {
                status,
                seq,
                arg,
                aux,
            }
            .encode(),
        );
    }

    fn handle(
        &mut self,
        region: &dyn LocalRegion,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let Some(h) = ReqHeader::decode(msg) else {
            self.reply(replies, Status::BadRequest, 0, 0, 0);
            return Ok(());
        };
        let body = &msg[super::REQ_HEADER..];
        match h.op {
            Op::Hello => {
                self.stats.sessions += 1;
                let st = self.st.as_ref().expect("opened");
                let (ring, len) = (st.sb.head_base[RING as usize], st.sb.head_bytes);
                self.reply(replies, Status::Welcome, h.seq, ring, len);
            }
            Op::Drain => {
                self.pump(region, usize::MAX)?;
                let left = self.backlog() as u64;
                self.reply(replies, Status::Granted, h.seq, left, 0);
            }
            Op::Get => self.get(region, &h, body, replies)?,
            Op::Write if self.scheme == Scheme::Redo => {
                self.redo_write(region, &h, body, replies)?
            }
            Op::Reserve if self.scheme == Scheme::Raw => self.reserve(region, &h, body, replies)?,
            Op::Check if self.scheme == Scheme::Raw => self.check(&h, body, replies),
            Op::Write | Op::Reserve | Op::Check => {
                self.reply(replies, Status::BadRequest, h.seq, 0, 0)
            }
        }
        // The asynchronous apply: keep at most APPLY_LAG records waiting (on the background
        // thread, if the fabric gives one: `on_background`). A background apply that falls
        // behind by more than BACKGROUND_BACKLOG records is helped here, as the authors'
        // request thread waits for its ring to drain (`wait()` in their server.c).
        if !self.background {
            self.apply_lag(region)?;
        } else {
            let over = self.backlog().saturating_sub(super::BACKGROUND_BACKLOG);
            if over > 0 {
                self.pump(region, over)?;
            }
        }
        Ok(())
    }

    /// Applies the oldest records until at most [`APPLY_LAG`] wait; how many it applied.
    fn apply_lag(&mut self, region: &dyn LocalRegion) -> Result<usize, FabricError> {
        let lag = self.backlog().saturating_sub(APPLY_LAG);
        if lag == 0 {
            return Ok(0);
        }
        self.pump(region, lag)
    }

    /// Whether `key` is present once its landed records are applied (no record in flight).
    fn settled_present(
        &mut self,
        region: &dyn LocalRegion,
        key: &[u8],
    ) -> Result<bool, FabricError> {
        let st = self.st.as_mut().expect("opened");
        if let Some((_, _, op)) = st.keys.get(&key_buf(key)).and_then(|k| k.latest) {
            return Ok(op != RecOp::Delete);
        }
        Ok(locate(region, st, key)?.is_some_and(|(_, b)| !b.meta().is_empty()))
    }

    fn redo_write(
        &mut self,
        region: &dyn LocalRegion,
        h: &ReqHeader,
        body: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        // The server verifies the record's integrity (the paper's redo log).
        let Some(rec) = decode_record(body, 0) else {
            self.reply(replies, Status::BadRequest, h.seq, 0, 0);
            return Ok(());
        };
        let (op, key) = (rec.op, key_buf(rec.key));
        let len = record_len(rec.key.len(), rec.value.len()) as u64;
        if op != RecOp::Upsert && !self.settled_present(region, &key.0[..key.1 as usize])? {
            self.reply(replies, Status::Absent, h.seq, 0, 0);
            return Ok(());
        }
        if !self.data_room(len) {
            self.reply(replies, Status::TableFull, h.seq, 0, 0);
            return Ok(());
        }
        let Some(pos) = self.reserve_ring(region, len)? else {
            self.reply(replies, Status::LogFull, h.seq, 0, 0);
            return Ok(());
        };
        let st = self.st.as_mut().expect("opened");
        st.queued_bytes += len.next_multiple_of(8);
        let off = ring_off(&st.sb, pos);
        // The log's copy carries a CRC over its position too (recovery tells this lap's
        // records from stale ones by it), as RAW's ring records do.
        let n = len as usize;
        st.rec[..n].copy_from_slice(&body[..n]);
        let crc = super::record_crc(&st.rec[..n], pos);
        st.rec[4..8].copy_from_slice(&crc.to_le_bytes());
        region.write(off, &st.rec[..n])?;
        region.persist(off, n);
        let at = st.steps;
        st.queue.push_back(Queued {
            pos,
            len,
            key,
            op,
            landed: true,
            at,
        });
        st.keys.entry(key).or_default().latest = Some((pos, len, op));
        self.stats.logged += 1;
        self.reply(replies, Status::Granted, h.seq, 0, 0);
        Ok(())
    }

    fn reserve(
        &mut self,
        region: &dyn LocalRegion,
        h: &ReqHeader,
        body: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let kl = h.key_len as usize;
        let op = super::RecOp::from_u8(h.rec);
        let vl = h.value_len as usize;
        let (Some(op), true) = (
            op,
            body.len() >= kl
                && check_key(&body[..kl.min(body.len())]).is_ok()
                && vl <= VALUE_MAX
                && !(op == Some(RecOp::Delete) && vl != 0),
        ) else {
            self.reply(replies, Status::BadRequest, h.seq, 0, 0);
            return Ok(());
        };
        let key = &body[..kl];
        let kb = key_buf(key);
        if self.land(region, kb)? {
            self.reply(replies, Status::Busy, h.seq, 0, 0);
            return Ok(());
        }
        if op != RecOp::Upsert && !self.settled_present(region, key)? {
            self.reply(replies, Status::Absent, h.seq, 0, 0);
            return Ok(());
        }
        let len = record_len(kl, vl) as u64;
        if !self.data_room(len) {
            self.reply(replies, Status::TableFull, h.seq, 0, 0);
            return Ok(());
        }
        let Some(pos) = self.reserve_ring(region, raw_slot_len(len))? else {
            self.reply(replies, Status::LogFull, h.seq, 0, 0);
            return Ok(());
        };
        let st = self.st.as_mut().expect("opened");
        // (The slot's void word is not cleared: one left by an earlier lap names another
        // position.)
        st.queued_bytes += len.next_multiple_of(8);
        let at = st.steps;
        st.queue.push_back(Queued {
            pos,
            len,
            key: kb,
            op,
            landed: false,
            at,
        });
        st.keys.entry(kb).or_default().inflight = Some((pos, len, op));
        self.stats.logged += 1;
        self.reply(replies, Status::Granted, h.seq, pos, 0);
        Ok(())
    }

    /// Ring bytes a record of `len` bytes takes (RAW: with its void word).
    fn slot_len(&self, len: u64) -> u64 {
        match self.scheme {
            Scheme::Raw => raw_slot_len(len),
            Scheme::Redo => len.next_multiple_of(8),
        }
    }

    /// Whether the reservation at `pos` has been in flight for a lease of server steps.
    fn stale(&self, pos: u64) -> bool {
        let st = self.st.as_ref().expect("opened");
        st.queue
            .iter()
            .find(|q| q.pos == pos)
            .is_some_and(|q| st.steps.saturating_sub(q.at) >= RESERVATION_LEASE)
    }

    /// Voids the RAW reservation at `pos` (a record of `len` bytes) unless its record has
    /// landed: stores its void word first (a compare-and-swap: a full barrier between that
    /// store and the look at the record, so a writer that READs back no void word after its
    /// WRITE had its record found whole here), then looks. Returns whether it was voided;
    /// if so it is out of the queue and its key has nothing in flight.
    fn void(&mut self, region: &dyn LocalRegion, pos: u64, len: u64) -> Result<bool, FabricError> {
        let st = self.st.as_mut().expect("opened");
        let at = ring_off(&st.sb, pos) + len.next_multiple_of(8);
        let tag = void_word(pos);
        let mut cur = region.load_u64(at)?;
        for _ in 0..4 {
            let seen = region.cas_u64(at, cur, tag)?;
            if seen == cur {
                break;
            }
            cur = seen;
        }
        if verify(region, st, pos, len)? {
            // Landed before the void word: it counts (a writer that saw the word asks).
            region.store_u64(at, 0)?;
            self.stats.kept_late += 1;
            return Ok(false);
        }
        // Durable: recovery does not replay a record that lands after this.
        region.store_u64(at, tag)?;
        region.persist(at, 8);
        let Some(i) = st.queue.iter().position(|q| q.pos == pos) else {
            return Ok(true);
        };
        let q = st.queue.remove(i).expect("found");
        st.queued_bytes = st.queued_bytes.saturating_sub(len.next_multiple_of(8));
        if let Some(ks) = st.keys.get_mut(&q.key) {
            if ks.inflight.is_some_and(|(p, _, _)| p == pos) {
                ks.inflight = None;
            }
            if ks.latest.is_none() && ks.inflight.is_none() {
                st.keys.remove(&q.key);
            }
        }
        st.voided.push_back(pos);
        if st.voided.len() > VOIDED_KEPT {
            st.forgot = st.voided.pop_front();
        }
        self.stats.voided += 1;
        Ok(true)
    }

    /// RAW [`Op::Check`]: did the record reserved at `pos` count?
    fn check(&mut self, h: &ReqHeader, body: &[u8], replies: &mut Replies) {
        let st = self.st.as_ref().expect("opened");
        let pos = body
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        let status = match pos {
            Some(p) if st.voided.contains(&p) => Status::Busy,
            // Reserved once, and not voided since the oldest void remembered.
            Some(p) if p < st.cursor && st.forgot.is_none_or(|f| p > f) => Status::Granted,
            _ => Status::BadRequest,
        };
        self.reply(replies, status, h.seq, 0, 0);
    }

    /// RAW: if `key` has a reserved record, promotes it to landed when it verifies now.
    /// Returns whether one is still in flight.
    fn land(&mut self, region: &dyn LocalRegion, key: KeyBuf) -> Result<bool, FabricError> {
        let st = self.st.as_mut().expect("opened");
        let Some((pos, len, op)) = st.keys.get(&key).and_then(|k| k.inflight) else {
            return Ok(false);
        };
        if !verify(region, st, pos, len)? {
            if !self.stale(pos) {
                return Ok(true);
            }
            if self.void(region, pos, len)? {
                return Ok(false);
            }
            // It landed just as its lease ran out: kept.
        }
        let st = self.st.as_mut().expect("opened");
        if let Some(q) = st.queue.iter_mut().find(|q| q.pos == pos) {
            q.landed = true;
        }
        let ks = st.keys.entry(key).or_default();
        ks.inflight = None;
        ks.latest = Some((pos, len, op));
        Ok(false)
    }

    fn get(
        &mut self,
        region: &dyn LocalRegion,
        h: &ReqHeader,
        body: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let kl = h.key_len as usize;
        if body.len() < kl || check_key(&body[..kl]).is_err() {
            self.reply(replies, Status::BadRequest, h.seq, 0, 0);
            return Ok(());
        }
        let key = &body[..kl];
        let kb = key_buf(key);
        self.land(region, kb)?;
        let st = self.st.as_mut().expect("opened");
        if let Some((pos, len, _)) = st.keys.get(&kb).and_then(|k| k.latest) {
            // The newest landed record not yet applied answers (the paper's "first looks for
            // the object in the redo log").
            self.stats.reads_from_log += 1;
            let n = len as usize;
            region.read(ring_off(&st.sb, pos), &mut st.rec[..n])?;
            let Some(r) = decode_record(&st.rec[..n], pos) else {
                return Err(corrupt(region, ring_off(&st.sb, pos)));
            };
            let (op, vl) = (r.op, r.value.len());
            let start = REC_HEADER + kl;
            let mut out = [0u8; REPLY_HEADER];
            if op == RecOp::Delete {
                self.reply(replies, Status::Absent, h.seq, 0, 0);
                return Ok(());
            }
            out.copy_from_slice(
                &ReplyHeader {
                    status: Status::Granted,
                    seq: h.seq,
                    arg: vl as u64,
                    aux: 0,
                }
                .encode(),
            );
            let st = self.st.as_mut().expect("opened");
            // Reuse the record buffer: header in front of the value.
            st.rec.copy_within(start..start + vl, REPLY_HEADER);
            st.rec[..REPLY_HEADER].copy_from_slice(&out);
            replies.send(&st.rec[..REPLY_HEADER + vl]);
            return Ok(());
        }
        self.stats.reads_from_table += 1;
        let found = locate(region, st, key)?;
        let Some((_, b)) = found.filter(|(_, b)| !b.meta().is_empty()) else {
            self.reply(replies, Status::Absent, h.seq, 0, 0);
            return Ok(());
        };
        let slot = st
            .sb
            .object_off(DATA, b.meta().new_off())
            .map_err(|_| corrupt(region, st.sb.table_off))?;
        let mut sh = [0u8; SLOT_HEADER];
        region.read(slot, &mut sh)?;
        let (skl, vl, _) = slot_header(&sh);
        if skl != kl || vl > VALUE_MAX {
            return Err(corrupt(region, slot));
        }
        let n = REPLY_HEADER + vl;
        region.read(
            slot + (SLOT_HEADER + kl) as u64,
            &mut st.rec[REPLY_HEADER..n],
        )?;
        st.rec[..REPLY_HEADER].copy_from_slice(
            &ReplyHeader {
                status: Status::Granted,
                seq: h.seq,
                arg: vl as u64,
                aux: 0,
            }
            .encode(),
        );
        replies.send(&st.rec[..n]);
        Ok(())
    }

    /// Whether the data area can take every queued record and one more of `len` bytes (a
    /// write that could not be applied is refused up front, never after its answer).
    fn data_room(&self, len: u64) -> bool {
        let st = self.st.as_ref().expect("opened");
        st.data_cursor + st.queued_bytes + len.next_multiple_of(8) <= st.sb.head_bytes
    }

    /// Ring space for a record of `len` bytes (never across the ring's end), applying what
    /// can be applied when the ring is full.
    fn reserve_ring(
        &mut self,
        region: &dyn LocalRegion,
        len: u64,
    ) -> Result<Option<u64>, FabricError> {
        for attempt in 0..2 {
            let st = self.st.as_mut().expect("opened");
            let ring = st.sb.head_bytes;
            let mut pos = st.cursor;
            if pos % ring + len > ring {
                pos = (pos / ring + 1) * ring;
            }
            let tail = st.queue.front().map_or(pos, |q| q.pos);
            if pos + len - tail <= ring {
                if pos + len > st.applied + ring {
                    // Recovery must find this record inside [applied, applied + ring).
                    let at = st.sb.mailbox(0);
                    region.store_u64(at, tail)?;
                    region.persist(at, 8);
                    st.applied = tail;
                }
                st.cursor = (pos + len).next_multiple_of(8);
                return Ok(Some(pos));
            }
            if attempt == 0 {
                self.pump(region, usize::MAX)?;
            }
        }
        Ok(None)
    }
}

fn ring_off(sb: &Superblock, pos: u64) -> u64 {
    sb.head_base[RING as usize] + pos % sb.head_bytes
}

/// Whether the record reserved at `pos` is whole (RAW).
fn verify(
    region: &dyn LocalRegion,
    st: &mut State,
    pos: u64,
    len: u64,
) -> Result<bool, FabricError> {
    let n = len as usize;
    region.read(ring_off(&st.sb, pos), &mut st.rec[..n])?;
    Ok(decode_record(&st.rec[..n], pos).is_some())
}

fn slot_header(b: &[u8; SLOT_HEADER]) -> (usize, usize, usize) {
    (
        b[0] as usize,
        u16::from_le_bytes([b[2], b[3]]) as usize,
        u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize,
    )
}

/// The bucket holding `key`, if any.
fn locate(
    region: &dyn LocalRegion,
    st: &mut State,
    key: &[u8],
) -> Result<Option<(u64, Bucket)>, FabricError> {
    crate::erda::server::locate_in(region, &st.sb, &mut st.scratch, key)
}

impl Handler for BaselineServer {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        _conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        self.open(region)?;
        if let Some(st) = self.st.as_mut() {
            st.steps += 1;
        }
        match recv.kind {
            RecvKind::Send => self.handle(region, msg, replies),
            RecvKind::WriteImm => {
                self.reply(replies, Status::BadRequest, 0, 0, 0);
                Ok(())
            }
        }
    }

    /// The asynchronous apply: everything that has landed.
    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        let Some(st) = self.st.as_mut() else {
            return false;
        };
        st.steps += 1;
        // An error here (a corrupt record or a full area) is met again, and reported, by
        // the next request that needs the apply.
        self.pump(region, usize::MAX).is_ok_and(|n| n > 0)
    }

    /// The asynchronous apply on a thread of its own, as the authors' `rbflush` pthread
    /// (Redo Logging/server.c, Read After Write/server.c): the same lag as inline (at most
    /// [`APPLY_LAG`] records wait), true while it applied some. From the first call on,
    /// messages no longer apply (a full ring still applies what it can, as inline).
    fn on_background(&mut self, region: &dyn LocalRegion) -> bool {
        self.background = true;
        if self.st.is_none() {
            return false;
        }
        // An error is met again, and reported, by the next request that needs the apply.
        self.apply_lag(region).is_ok_and(|n| n > 0)
    }

    fn service(&self) -> &'static str {
        self.scheme.service()
    }

    /// Formats, or recovers a store of a previous life, before any client connects.
    fn recover(&mut self, region: &dyn LocalRegion) -> Result<String, FabricError> {
        let before = self.stats.replayed;
        self.open(region)?;
        Ok(std_alloc::format!(
            "{}: {} ring records replayed",
            self.scheme.name(),
            self.stats.replayed - before
        ))
    }
}

//! Erda's memory-node CPU: sessions, hash-table management, log-space allocation, the
//! metadata word, format and recovery.
use super::ErdaConfig;
use super::clean::{self, Cleaner, Prep, Space, region_of, region_start};
use super::displace;
use super::geometry::{ErdaConfigError, Plan, plan};
use super::stripe;
mod bulk;
mod recovery;
use crate::fabric::{FabricError, Recv, RecvKind};
use crate::server::{Handler, LocalRegion, Replies};
pub use bulk::BulkStats;
use recovery::settle;
use remora_layouts::erda::{
    BUCKET_LEN, Bucket, DURABLE_MARK_LEN, GOODBYE, HeadState, KEY_MAX, MAX_HEADS, Meta, REQ_SEQ,
    REQUEST_LEN, ROOT_SLOT, Reply, ReqOp, Request, SUPERBLOCK_LEN, Status, Superblock,
    decode_hello_slots, decode_object_with, durable_mark, encode_object_with, object_len,
    object_len_from_header,
};
use remora_layouts::region::root_offset;
use std_alloc::collections::BTreeMap;
use std_alloc::string::String;
use std_alloc::vec;
use std_alloc::vec::Vec;

/// First byte of every head log used by objects (units 0 means "no object").
pub(super) const LOG_START: u64 = 64;
/// Most request mailboxes one session gets (the count travels in a reply's 16-bit `aux`;
/// a handle tracks its slots in a 64-bit mask).
pub const MAX_SLOTS: u32 = 64;
/// Buckets past a full neighborhood searched for a free one to displace towards.
pub(super) const MAX_PROBE: u64 = 4096;

/// What the server did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Client sessions accepted (hellos welcomed).
    pub sessions: u64,
    /// Write grants handed out.
    pub grants: u64,
    /// Requests answered `Absent`: the key is missing.
    pub absent: u64,
    /// Requests refused (full, too many clients, or undecodable).
    pub refused: u64,
    /// Buckets filled for new keys.
    pub inserts: u64,
    /// Persist calls (flush + fence) on the write path.
    pub persists: u64,
    /// Metadata words reverted by recovery to their previous object (the newest did not verify).
    pub reverted: u64,
    /// Buckets emptied by recovery (no whole object, or undecodable).
    pub emptied: u64,
    /// Bucket entries moved closer to their home by hopscotch displacement.
    pub displaced: u64,
    /// Duplicate buckets (a displacement cut short by a crash) cleared by recovery.
    pub deduplicated: u64,
    /// Requests answered `Busy`: another write of the key was granted and not yet durable.
    pub busy: u64,
    /// Grants of fenced or disconnected writers reverted (the object was not whole).
    pub revoked_reverted: u64,
    /// Grants of fenced or disconnected writers adopted (the server wrote a durable copy).
    pub revoked_adopted: u64,
    /// Regions chained to a head whose last region was full (instead of `LogFull`).
    pub chained: u64,
    /// Log cleanings started (see `clean.rs`).
    pub cleanings_started: u64,
    /// Log cleanings finished.
    pub cleanings_done: u64,
    /// Live objects the cleaner copied out of the regions it empties.
    pub cleaned_objects: u64,
    /// Bytes of those objects.
    pub cleaned_bytes: u64,
    /// Bytes of log freed by finished cleanings (the emptied regions, less the copies).
    pub reclaimed_bytes: u64,
    /// Buckets of deleted keys emptied by the cleaner.
    pub buckets_reclaimed: u64,
    /// Reads answered through the server ([`ReqOp::Get`], the SEND path while cleaning).
    pub located: u64,
    /// Bytes of free log regions zeroed (and persisted) ahead of their chaining, a bounded
    /// amount per message or idle call (see `clean.rs`).
    pub zeroed_bytes: u64,
    /// Chains put off because the next region was not yet zeroed whole (the grant that
    /// needed it was answered `Busy`, to be asked again).
    pub chain_waits: u64,
}

/// A key as a map key: its bytes, zero-padded, and its length.
pub(super) type KeyBuf = ([u8; KEY_MAX], u8);

pub(super) fn key_buf(key: &[u8]) -> KeyBuf {
    let mut k = [0u8; KEY_MAX];
    let n = key.len().min(KEY_MAX);
    k[..n].copy_from_slice(&key[..n]);
    (k, n as u8)
}

/// A value grant whose object is not yet known durable (no durable mark seen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pending {
    /// Mailbox id and connection of the writer.
    client: u32,
    conn: usize,
    head: u8,
    units: u32,
    /// The object's bytes (its durable mark follows them).
    len: u64,
}

pub(super) struct State {
    pub(super) sb: Superblock,
    sb_off: u64,
    /// Next free byte of each head's log.
    pub(super) cursor: [u64; MAX_HEADS],
    /// Whether each bucket's newest granted object is a live value (volatile; rebuilt by
    /// recovery): what update and delete answer.
    pub(super) present: Vec<bool>,
    /// Connection owning each client id.
    owners: Vec<Option<usize>>,
    /// Fabric client id of each session's connection as the fabric told it
    /// (`Handler::on_connect`; 0: unknown), quoted to waiters as the writer to fence. Never
    /// what the client says of itself.
    fabric: Vec<u32>,
    /// The value grant of each key still in flight (at most one per key: see the module
    /// docs, "Dead writers"). Volatile: a restart finds every grant settled by recovery.
    pub(super) pending: BTreeMap<KeyBuf, Pending>,
    /// Each client's latest value grant, looked at (and forgotten if finished) on its next
    /// request, so finished grants of keys nobody writes again do not pile up.
    last_grant: Vec<Option<KeyBuf>>,
    /// Where the idle sweep of `pending` goes on.
    sweep_from: Option<KeyBuf>,
    scratch: Vec<u8>,
    /// A delete object being written (keys are at most 16 bytes).
    scratch_obj: [u8; object_len(KEY_MAX, 0)],
    /// Each head's state word (persisted copy in the region: regions, run, cleaning).
    pub(super) runs: [HeadState; MAX_HEADS],
    /// Bytes of one log region.
    pub(super) region_bytes: u64,
    /// Bytes clients appended to each head since its last cleaning started.
    pub(super) appended: [u64; MAX_HEADS],
    /// Appended bytes that start a cleaning.
    pub(super) threshold: u64,
    /// Each head's cleaner (volatile: a restart begins a cleaning in progress again).
    pub(super) cleaners: [Cleaner; MAX_HEADS],
    /// How far each head's next free region is zeroed (volatile: a restart zeroes again).
    pub(super) prep: [Prep; MAX_HEADS],
    /// Bytes of zeroing the current message (or idle call) may still do.
    pub(super) zero_budget: u64,
}

/// Erda's server-side handler. Formats the region on the first message if no store is
/// published in root slot [`ROOT_SLOT`], else recovers the published one.
pub struct ErdaServer {
    cfg: ErdaConfig,
    st: Option<State>,
    stats: ServerStats,
    /// Each live connection's client, as the fabric knows it (`Handler::on_connect`).
    peers: BTreeMap<usize, u32>,
    /// The fabric runs the cleaner on a thread of its own ([`Handler::on_background`]):
    /// messages no longer step it.
    background: bool,
}

pub(super) fn corrupt(region: &dyn LocalRegion, off: u64) -> FabricError {
    crate::server::out_of_range(region.node(), off, 0)
}

impl ErdaServer {
    /// A server of `cfg`'s store; the geometry is checked when it formats the region (at
    /// the first message: a bad one drops that client's connection). Builders that know the
    /// region use [`ErdaServer::for_region`] to refuse a bad geometry before serving.
    pub fn new(cfg: ErdaConfig) -> ErdaServer {
        ErdaServer {
            cfg,
            st: None,
            stats: ServerStats::default(),
            peers: BTreeMap::new(),
            background: false,
        }
    }

    /// A server of `cfg`'s store for a fresh region of `region_len` bytes in `chunk_size`
    /// chunks, or why that geometry cannot be served there ([`ErdaConfig::check`]): every
    /// builder that starts a memory node with this service refuses a bad geometry at start.
    pub fn for_region(
        cfg: ErdaConfig,
        region_len: u64,
        chunk_size: u64,
    ) -> Result<ErdaServer, ErdaConfigError> {
        cfg.check(region_len, chunk_size)?;
        Ok(ErdaServer::new(cfg))
    }

    /// A snapshot of the server's counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// Value grants the server has not yet seen finished (durable mark) or settled.
    pub fn unfinished_grants(&self) -> usize {
        self.st.as_ref().map_or(0, |s| s.pending.len())
    }

    /// Where the superblock is, once opened.
    pub fn superblock(&self) -> Option<(u64, Superblock)> {
        self.st.as_ref().map(|s| (s.sb_off, s.sb))
    }

    /// Formats the region (nothing published) or recovers the published store. Called by
    /// the first message; tests call it directly to run recovery on a crash image.
    pub fn open(&mut self, region: &dyn LocalRegion) -> Result<(), FabricError> {
        if self.st.is_some() {
            return Ok(());
        }
        let root = region.load_u64(root_offset(ROOT_SLOT))?;
        let st = if root == 0 {
            self.format(region)?
        } else {
            self.recover(region, root)?
        };
        self.st = Some(st);
        Ok(())
    }

    /// A new session: `slots` consecutive request mailboxes (client ids), fewer if no free
    /// run is that long. One session per connection: handles on one endpoint share its
    /// receive queue and would take each other's replies, so a second hello on a connection
    /// with an open session is refused ([`Status::SessionOpen`]) until a goodbye.
    ///
    /// `claimed` is the fabric id the hello names. The session is known by its connection's
    /// id as the fabric told it ([`Handler::on_connect`]), which is what `Busy` answers quote
    /// as the writer to fence: a hello naming another id (not 0, "none named") is refused
    /// ([`Status::BadRequest`]), so no client can have another one fenced in its place. A
    /// connection the fabric never introduced (a harness calling the handler directly) is
    /// known as 0: nobody is ever fenced for its grants.
    fn hello(&mut self, conn: usize, claimed: u32, slots: u32, replies: &mut Replies) {
        let known = self.peers.get(&conn).copied().unwrap_or(0);
        let st = self.st.as_mut().expect("opened");
        let refuse = |status| Reply {
            status,
            head: 0,
            seq: 0,
            arg: 0,
            aux: 0,
        };
        if st.owners.contains(&Some(conn)) {
            self.stats.refused += 1;
            replies.send(&refuse(Status::SessionOpen).encode());
            return;
        }
        if claimed != 0 && known != 0 && claimed != known {
            self.stats.refused += 1;
            replies.send(&refuse(Status::BadRequest).encode());
            return;
        }
        // The longest free run, up to `slots`, and at most a quarter of the free mailboxes
        // (at least one), so later sessions still find some.
        let free = st.owners.iter().filter(|o| o.is_none()).count();
        let want = (slots.clamp(1, MAX_SLOTS) as usize).min((free / 4).max(1));
        let (mut best, mut best_len, mut run) = (0usize, 0usize, 0usize);
        for (i, o) in st.owners.iter().enumerate() {
            run = if o.is_none() { run + 1 } else { 0 };
            if run > best_len {
                (best, best_len) = (i + 1 - run, run);
                if best_len == want {
                    break;
                }
            }
        }
        if best_len == 0 {
            self.stats.refused += 1;
            replies.send(&refuse(Status::TooManyClients).encode());
            return;
        }
        for id in best..best + best_len {
            st.owners[id] = Some(conn);
            st.fabric[id] = known;
        }
        self.stats.sessions += 1;
        let reply = Reply {
            status: Status::Welcome,
            head: 0,
            seq: best as u32,
            arg: st.sb_off,
            aux: best_len as u16,
        };
        replies.send(&reply.encode());
    }

    /// Ends connection `conn`'s session (a goodbye or a disconnect): every grant it held and
    /// had not finished is settled at once, as after a fence (the session writes nothing
    /// more), and its mailboxes are free for new sessions.
    fn end_session(&mut self, region: &dyn LocalRegion, conn: usize) {
        if let Some(st) = self.st.as_mut() {
            let mine: Vec<(KeyBuf, Pending)> = st
                .pending
                .iter()
                .filter(|(_, p)| p.conn == conn)
                .map(|(k, p)| (*k, *p))
                .collect();
            for (k, p) in mine {
                st.pending.remove(&k);
                if !is_durable(region, &st.sb, &p) {
                    // An error leaves the grant to recovery (readers fall back meanwhile).
                    let _ = settle(region, st, &mut self.stats, &k.0[..k.1 as usize], &p);
                }
            }
            for (i, o) in st.owners.iter_mut().enumerate() {
                if *o == Some(conn) {
                    *o = None;
                    st.last_grant[i] = None;
                }
            }
        }
    }

    fn refuse(&mut self, status: Status, seq: u32, replies: &mut Replies) {
        self.stats.refused += 1;
        replies.send(
            &Reply {
                status,
                head: 0,
                seq,
                arg: 0,
                aux: 0,
            }
            .encode(),
        );
    }

    /// One write request from client `client` on connection `conn`.
    fn request(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        client: u32,
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let st = self.st.as_mut().expect("opened");
        clean::set_zero_budget(st, clean::ZERO_PER_MESSAGE);
        let owned = st.owners.get(client as usize).copied().flatten() == Some(conn);
        let mut raw = [0u8; REQUEST_LEN];
        if client < st.sb.max_clients {
            region.read(st.sb.mailbox(client), &mut raw)?;
        }
        // A refusal names the request's sequence when its first word has one: the client
        // routes replies by it.
        let seq = REQ_SEQ.get(u64::from_le_bytes(raw[..8].try_into().unwrap_or([0; 8]))) as u32;
        let req = match Request::decode(&raw) {
            Ok(req) if owned => req,
            _ => {
                self.refuse(Status::BadRequest, seq, replies);
                return Ok(());
            }
        };
        // The client's previous value grant is most likely finished by now: forget it.
        if let Some(k) = st
            .last_grant
            .get_mut(client as usize)
            .and_then(Option::take)
            && let Some(p) = st.pending.get(&k)
            && p.client == client
            && is_durable(region, &st.sb, p)
        {
            st.pending.remove(&k);
        }
        let reply = if req.op == ReqOp::Get {
            self.get(region, &req)?
        } else {
            self.grant(region, conn, client, &req)?
        };
        match reply.status {
            Status::Granted => self.stats.grants += 1,
            Status::Absent => self.stats.absent += 1,
            Status::Busy => self.stats.busy += 1,
            Status::Located => self.stats.located += 1,
            _ => self.stats.refused += 1,
        }
        replies.send(&reply.encode());
        self.after_request(region);
        Ok(())
    }

    /// What follows every write request. Without a thread of its own (`on_background`), the
    /// cleaner shares this thread: a bounded step after every request (a busy server would
    /// starve it in `on_idle`). An error leaves the cleaning where it is, to be tried again
    /// on the next message. So does zeroing the next log region ahead of its chaining: with
    /// any zeroing a chain did in the request, at most `ZERO_PER_MESSAGE` bytes per message.
    fn after_request(&mut self, region: &dyn LocalRegion) {
        if !self.background
            && let Some(st) = self.st.as_mut()
        {
            let _ = clean::step(region, st, &mut self.stats, clean::STEP_AFTER_MESSAGE);
            let _ = clean::zero_ahead(region, st, &mut self.stats, false);
        }
    }

    /// A read through the server (the SEND path, while the key's head is being cleaned):
    /// the newest whole object the key's word names, as a reader would take it, with the
    /// head's epoch (the client checks it did not change before its READ of the object).
    fn get(&mut self, region: &dyn LocalRegion, req: &Request) -> Result<Reply, FabricError> {
        let st = self.st.as_mut().expect("opened");
        let sb = st.sb;
        let key = req.key();
        let reply = |status, head, arg| Reply {
            status,
            head,
            seq: req.seq,
            arg,
            aux: 0,
        };
        let Some((_, b)) = locate(region, st, key)? else {
            return Ok(reply(Status::Absent, 0, 0));
        };
        let meta = b.meta();
        let head = b.head();
        let epoch = st.runs.get(head as usize).map_or(0, |r| r.epoch);
        let mut obj = vec![0u8; remora_layouts::erda::OBJECT_MAX];
        for u in [meta.new_off(), meta.old_off()] {
            if u == 0 {
                // The key's first object has not landed: absent.
                break;
            }
            match read_object_at(region, &sb, head, u, key, &mut obj) {
                (true, true, _) => return Ok(reply(Status::Absent, head, 0)),
                (true, false, _) => {
                    return Ok(reply(
                        Status::Located,
                        head,
                        u64::from(epoch) << 32 | u64::from(u),
                    ));
                }
                _ => {}
            }
        }
        if meta.old_off() != 0 {
            // Neither object whole (never so for a word the server keeps): ask again.
            return Ok(reply(Status::Busy, head, 0));
        }
        Ok(reply(Status::Absent, head, 0))
    }

    fn grant(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        client: u32,
        req: &Request,
    ) -> Result<Reply, FabricError> {
        let st = self.st.as_mut().expect("opened");
        let sb = st.sb;
        let key = req.key();
        // One write of a key in flight at a time (module docs, "Dead writers").
        let kb = key_buf(key);
        if let Some(p) = st.pending.get(&kb).copied() {
            if is_durable(region, &sb, &p) {
                st.pending.remove(&kb);
            } else if req.revoke == p.units && p.conn == conn {
                // p is the requester's own orphan (none of its coroutines writes it): settle
                // it. Another writer's grant is never settled on a request's word: a fence
                // ends that writer's connection, and `on_disconnect` settles it then (a
                // revoke naming it is only the requester's hint that it fenced).
                st.pending.remove(&kb);
                settle(region, st, &mut self.stats, key, &p)?;
            } else {
                let holder = st.fabric.get(p.client as usize).copied().unwrap_or(0);
                return Ok(Reply {
                    status: Status::Busy,
                    head: p.head,
                    seq: req.seq,
                    arg: (holder as u64) << 32 | p.units as u64,
                    aux: (p.len / 8) as u16,
                });
            }
        }
        let home = sb.home(key);
        region.read(sb.bucket_off(home), &mut st.scratch)?;
        let mut found = None;
        let mut free = None;
        for j in 0..sb.neighborhood as usize {
            let b = Bucket::decode(&st.scratch[j * BUCKET_LEN..(j + 1) * BUCKET_LEN])
                .map_err(|_| corrupt(region, sb.bucket_off(home + j as u64)))?;
            if b.holds(key) {
                found = Some((home + j as u64, b));
                break;
            }
            if !b.is_used() && free.is_none() {
                free = Some(home + j as u64);
            }
        }
        let answer = |status, head, units: u32| Reply {
            status,
            head,
            seq: req.seq,
            arg: units as u64,
            aux: 0,
        };
        let present = found.is_some_and(|(i, _)| st.present[i as usize]);
        if req.op != ReqOp::Upsert && !present {
            return Ok(answer(Status::Absent, 0, 0));
        }
        let (idx, head, meta) = match (found, free) {
            (Some((i, b)), _) => (i, b.head(), b.meta()),
            (None, Some(i)) => (i, (client % sb.heads) as u8, Meta::EMPTY),
            (None, None) => match displace::make_room(region, &sb, home, &mut st.present)? {
                Some((i, moves)) => {
                    self.stats.displaced += moves;
                    self.stats.persists += 4 * moves;
                    (i, (client % sb.heads) as u8, Meta::EMPTY)
                }
                None => return Ok(answer(Status::TableFull, 0, 0)),
            },
        };
        // Reserve log space: an object never spans a segment.
        let value_len = if req.op == ReqOp::Delete {
            0
        } else {
            req.value_len as usize
        };
        let obj_len = object_len(key.len(), value_len) as u64;
        // A client-written object is followed by its durable mark.
        let len = if req.op == ReqOp::Delete {
            obj_len
        } else {
            obj_len + DURABLE_MARK_LEN as u64
        };
        let units = match clean::reserve(region, st, &mut self.stats, head, len, true)? {
            Space::At(units) => units,
            Space::Full => return Ok(answer(Status::LogFull, head, 0)),
            // The head's next region is still being zeroed (a bounded share per message):
            // `Busy` naming no grant, so the client backs off briefly and asks again. Nothing
            // changed yet (a bucket is filled only once space is reserved).
            Space::Preparing => return Ok(answer(Status::Busy, head, 0)),
        };
        let new_meta = meta
            .advance(units)
            .map_err(|_| corrupt(region, sb.bucket_off(idx)))?;
        let off = sb.bucket_off(idx);
        if found.is_none() {
            // Key and control word first (durable), the metadata word last: a reader that
            // sees the word sees the key.
            let b = Bucket::new(key, head, Meta::EMPTY)
                .map_err(|_| corrupt(region, off))?
                .encode();
            // Inside its stripe's version change, so a validating reader never takes a
            // half-written key (see `stripe.rs`).
            let section = stripe::Section::enter(region, &sb, &[idx])?;
            region.write(off + 8, &b[8..])?;
            region.persist(off + 8, BUCKET_LEN - 8);
            section.leave(region)?;
            self.stats.inserts += 1;
            self.stats.persists += 1;
        }
        // The paper's 8-byte atomic write: flip the tag, new offset over the older one.
        region.store_u64(off, new_meta.encode())?;
        region.persist(off, 8);
        self.stats.persists += 1;
        if req.op == ReqOp::Delete {
            // A delete object carries no value: the server writes it itself, durably, before
            // it answers or handles any other request. So a delete has landed by its grant's
            // reply, and the presence the server answers from (its latest grant) is what
            // readers see. Written after the word names it: a crash before it is whole
            // reverts the word (the delete never happened), and no whole object is ever left
            // in a slot no word names (recovery could hand that slot out again).
            let obj_off = sb
                .object_off(head, units)
                .map_err(|_| corrupt(region, off))?;
            let n = encode_object_with(&mut st.scratch_obj, key, &[], true, super::object_checksum)
                .map_err(|_| corrupt(region, obj_off))?;
            region.write(obj_off, &st.scratch_obj[..n])?;
            region.persist(obj_off, n);
            self.stats.persists += 1;
        }
        st.present[idx as usize] = req.op != ReqOp::Delete;
        if req.op != ReqOp::Delete {
            if let Some(l) = st.last_grant.get_mut(client as usize) {
                *l = Some(kb);
            }
            st.pending.insert(
                kb,
                Pending {
                    client,
                    conn,
                    head,
                    units,
                    len: obj_len,
                },
            );
        }
        Ok(answer(Status::Granted, head, units))
    }
}

/// Reads the object at (head, units) and says whether it verifies for `key`; returns
/// (valid, deleted, length).
pub(super) fn read_object_at(
    region: &dyn LocalRegion,
    sb: &Superblock,
    head: u8,
    units: u32,
    key: &[u8],
    buf: &mut [u8],
) -> (bool, bool, u64) {
    let Ok(off) = sb.object_off(head, units) else {
        return (false, false, 0);
    };
    let avail = sb.head_remaining(units).min(buf.len() as u64) as usize;
    if avail < 8 || region.read(off, &mut buf[..8]).is_err() {
        return (false, false, 0);
    }
    let Ok(len) = object_len_from_header(&buf[..8]) else {
        return (false, false, 0);
    };
    if len > avail || region.read(off, &mut buf[..len]).is_err() {
        return (false, false, 0);
    }
    match decode_object_with(&buf[..len], super::object_checksum) {
        Ok(o) if o.key == key => (true, o.delete, len as u64),
        _ => (false, false, 0),
    }
}

/// Whether the writer of `p` stored its durable mark (so its object is whole and durable).
pub(super) fn is_durable(region: &dyn LocalRegion, sb: &Superblock, p: &Pending) -> bool {
    sb.object_off(p.head, p.units)
        .ok()
        .and_then(|off| region.load_u64(off + p.len).ok())
        == Some(durable_mark(p.units))
}

/// The bucket holding `key`, if any.
pub(super) fn locate(
    region: &dyn LocalRegion,
    st: &mut State,
    key: &[u8],
) -> Result<Option<(u64, Bucket)>, FabricError> {
    locate_in(region, &st.sb, &mut st.scratch, key)
}

/// The bucket holding `key` in the table `sb` describes, if any; `scratch` (one
/// neighborhood of buckets) is left holding `key`'s neighborhood. Erda's server and its
/// baselines share it.
pub(super) fn locate_in(
    region: &dyn LocalRegion,
    sb: &Superblock,
    scratch: &mut [u8],
    key: &[u8],
) -> Result<Option<(u64, Bucket)>, FabricError> {
    let home = sb.home(key);
    region.read(sb.bucket_off(home), scratch)?;
    for j in 0..sb.neighborhood as usize {
        let raw = &scratch[j * BUCKET_LEN..(j + 1) * BUCKET_LEN];
        let b = Bucket::decode(raw).map_err(|_| corrupt(region, sb.bucket_off(home + j as u64)))?;
        if b.holds(key) {
            return Ok(Some((home + j as u64, b)));
        }
    }
    Ok(None)
}

impl Handler for ErdaServer {
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
            RecvKind::Send if decode_hello_slots(msg).is_some() => {
                let (id, slots) = decode_hello_slots(msg).unwrap_or((0, 1));
                self.hello(conn, id, slots, replies);
                Ok(())
            }
            RecvKind::Send if msg == GOODBYE => {
                self.end_session(region, conn);
                replies.send(
                    &Reply {
                        status: Status::Closed,
                        head: 0,
                        seq: 0,
                        arg: 0,
                        aux: 0,
                    }
                    .encode(),
                );
                Ok(())
            }
            RecvKind::WriteImm => match recv.imm {
                Some(client) => self.request(region, conn, client, replies),
                None => {
                    self.refuse(Status::BadRequest, 0, replies);
                    Ok(())
                }
            },
            RecvKind::Send => {
                self.refuse(Status::BadRequest, 0, replies);
                Ok(())
            }
        }
    }

    /// Steps the cleaner, zeroes up to `ZERO_WHEN_IDLE` bytes of each head's next free log
    /// region ahead of need, and forgets finished grants (durable mark found), up to 64 per
    /// call, resuming where the last call stopped: the volatile table of unfinished grants
    /// stays about as large as the number of writes in flight.
    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        let Some(st) = self.st.as_mut() else {
            return false;
        };
        clean::set_zero_budget(st, clean::ZERO_WHEN_IDLE);
        let cleaned =
            clean::step(region, st, &mut self.stats, clean::STEP_WHEN_IDLE).unwrap_or(false);
        let zeroed = clean::zero_ahead(region, st, &mut self.stats, true).unwrap_or(0);
        let mut done = Vec::new();
        let mut next = None;
        let from = st.sweep_from.take();
        let range = match from {
            Some(k) => st.pending.range(k..),
            None => st.pending.range(..),
        };
        for (i, (k, p)) in range.enumerate() {
            if i == 64 {
                next = Some(*k);
                break;
            }
            if is_durable(region, &st.sb, p) {
                done.push(*k);
            }
        }
        st.sweep_from = next;
        for k in &done {
            st.pending.remove(k);
        }
        cleaned || zeroed > 0 || !done.is_empty()
    }

    /// The cleaner on a thread of its own, as the authors' `logcleaning` pthread
    /// (Erda/server/server_logclean.c): one bounded step per call, and the paced zeroing of
    /// the next free regions (at most `ZERO_PER_MESSAGE` bytes a call), true while it works.
    /// From the first call on, messages do neither (a grant that must chain still zeroes
    /// within its message's budget).
    fn on_background(&mut self, region: &dyn LocalRegion) -> bool {
        self.background = true;
        let Some(st) = self.st.as_mut() else {
            return false;
        };
        let cleaned =
            clean::step(region, st, &mut self.stats, clean::STEP_WHEN_IDLE).unwrap_or(false);
        clean::set_zero_budget(st, clean::ZERO_PER_MESSAGE);
        let zeroed = clean::zero_ahead(region, st, &mut self.stats, false).unwrap_or(0);
        cleaned || zeroed > 0
    }

    /// Formats or recovers the store before any client connects (a restart on a persistent
    /// region), instead of on the first message.
    fn recover(&mut self, region: &dyn LocalRegion) -> Result<String, FabricError> {
        let before = self.stats;
        self.open(region)?;
        let s = self.stats;
        Ok(std_alloc::format!(
            "erda: {} metadata words reverted to their previous object, {} emptied, {} \
             duplicate buckets of an interrupted move cleared",
            s.reverted - before.reverted,
            s.emptied - before.emptied,
            s.deduplicated - before.deduplicated
        ))
    }

    /// The client id (mailbox) of a connection that ended is free for a new session, and
    /// every grant it held and had not finished is settled at once (as after a fence: the
    /// fabric delivers nothing more of that connection): adopted if its object is whole,
    /// else reverted. Waiters on those keys proceed without waiting out a lease.
    fn on_disconnect(&mut self, region: &dyn LocalRegion, conn: usize) {
        self.end_session(region, conn);
        self.peers.remove(&conn);
    }

    /// The connection's client as the fabric knows it: what this server quotes to waiters
    /// (see `hello`).
    fn on_connect(&mut self, _region: &dyn LocalRegion, conn: usize, peer: u32) {
        self.peers.insert(conn, peer);
    }

    fn service(&self) -> &'static str {
        "erda"
    }
}

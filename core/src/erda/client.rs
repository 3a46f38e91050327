//! Erda's client handle: one-sided reads, request-then-WRITE writes.
use super::{ErdaClientConfig, ErdaError};
mod read;
use crate::fabric::{Endpoint, FabricError, Op, QueuePair, RecvKind, Work};
use crate::index::KvIndex;
use crate::lease::{Verdict, Waiter, Watched, holder, race, recv_within};
use core::cell::{Cell, RefCell};
use core::future::poll_fn;
use core::pin::pin;
use core::task::{Poll, Waker};
use remora_layouts::GlobalAddr;
use remora_layouts::erda::{
    BUCKET_LEN, Bucket, DURABLE_MARK_LEN, GOODBYE, HeadState, KEY_MAX, MAX_HEADS, OBJECT_MAX,
    REPLY_LEN, Reply, ReqOp, Request, SUPERBLOCK_LEN, Status, Superblock, VALUE_MAX, check_key,
    decode_object_with, durable_mark, encode_object_with, hello_slots, object_len,
    object_len_from_header,
};
use std_alloc::vec::Vec;

/// Largest neighborhood a client reads (64 buckets, 2 KiB).
const MAX_NEIGHBORHOOD: usize = 64;
/// Neighborhoods up to this many buckets (512 B) are read into a buffer of this size, so a
/// get zeroes 512 B of frame rather than 2 KiB (the default neighborhood is 8 buckets).
const SMALL_NEIGHBORHOOD: usize = 16;
/// Objects up to this many bytes are read (and encoded) in a buffer of this size, so an
/// operation on small values zeroes 512 B of frame rather than [`OBJECT_MAX`] (4 KiB).
const SMALL_OBJECT: usize = 512;

/// What one handle observed (per-handle, not atomic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Gets answered by the previous object because the newest did not verify.
    pub fallbacks: u64,
    /// Whole re-reads (bucket and objects) because neither object verified.
    pub rereads: u64,
    /// Second READs of an object larger than the configured value size.
    pub long_reads: u64,
    /// Neighborhood READs validated by the stripe version words (the fast path could not
    /// answer: a miss, or no whole object of the key).
    pub validated: u64,
    /// Validated READs that a concurrent fill or move overlapped (read again).
    pub unstable: u64,
    /// Write requests answered `Busy` (another write of the key in flight), asked again.
    pub busy: u64,
    /// Writers fenced by this handle after their grant outlived a lease.
    pub fenced: u64,
    /// Gets answered through the server (the SEND path: the key's head was being cleaned).
    pub server_reads: u64,
    /// Gets started over because the head's epoch changed under them (a cleaning started
    /// or ended between the metadata word and the object).
    pub epoch_retries: u64,
}

/// One compute node's (thread's) handle on an Erda store.
pub struct Erda<'e, E: Endpoint> {
    ep: &'e E,
    cfg: ErdaClientConfig,
    sb: Superblock,
    /// The first of this session's request mailboxes (client ids), and how many it has.
    client: u32,
    slots: u32,
    seq: Cell<u32>,
    /// The mailboxes free for a new request (bit `i`: mailbox `client + i`).
    free: Cell<u64>,
    /// Coroutines waiting for a mailbox, and how many mailboxes were ever freed (the
    /// handle's progress): see [`Self::request`].
    mail_waiters: Cell<u32>,
    mail_freed: Cell<u64>,
    /// Per mailbox: the request waiting for its reply, its reply once received.
    inbox: RefCell<Vec<Slot>>,
    /// Whether a coroutine is taking replies off the queue pair for all of them.
    receiving: Cell<bool>,
    fallbacks: Cell<u64>,
    rereads: Cell<u64>,
    long_reads: Cell<u64>,
    validated: Cell<u64>,
    unstable: Cell<u64>,
    busy: Cell<u64>,
    fenced: Cell<u64>,
    server_reads: Cell<u64>,
    epoch_retries: Cell<u64>,
    /// Offsets of the grants this handle's coroutines are writing now, and how many more
    /// are being written untracked (the list was full): a `Busy` naming a grant of this
    /// handle that none of its coroutines is writing names an orphan (a request whose reply
    /// never came back), which the handle may have settled without waiting for a lease.
    writing: RefCell<heapless::Vec<u32, 64>>,
    untracked: Cell<u32>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// The outcome of reading one object.
enum Obj {
    Value(usize),
    Deleted,
    Invalid,
}

impl<'e, E: Endpoint> Erda<'e, E> {
    /// Opens a session: the server assigns a client id (its mailbox) and names the
    /// superblock, which gives the head array and the table geometry.
    pub async fn open(ep: &'e E, cfg: ErdaClientConfig) -> Result<Self, ErdaError> {
        let qp = ep.qp(cfg.node)?;
        let want = cfg.slots.clamp(1, 64);
        qp.send(&hello_slots(ep.client_id(), want)).await?;
        let mut w = Watched::new(ep.now_ns(), cfg.lease.deadline_ns);
        let reply = recv_reply(ep, qp, &mut w).await?;
        if reply.status != Status::Welcome {
            return Err(ErdaError::Refused {
                status: reply.status,
            });
        }
        let sb_addr =
            GlobalAddr::try_new(cfg.node, reply.arg).map_err(|why| ErdaError::Corrupt {
                addr: GlobalAddr::NULL,
                why,
            })?;
        let mut raw = [0u8; SUPERBLOCK_LEN];
        qp.read(sb_addr, &mut raw).await?;
        let sb = Superblock::decode(&raw, GlobalAddr::MAX_OFFSET)
            .map_err(|why| ErdaError::Corrupt { addr: sb_addr, why })?;
        // A server that predates request slots grants one mailbox and leaves `aux` 0.
        let slots = u32::from(reply.aux).clamp(1, want);
        if sb.neighborhood as usize > MAX_NEIGHBORHOOD
            || reply
                .seq
                .checked_add(slots)
                .is_none_or(|end| end > sb.max_clients)
        {
            return Err(ErdaError::Protocol {
                what: "superblock neighborhood or client id out of range",
            });
        }
        Ok(Erda {
            ep,
            cfg,
            sb,
            client: reply.seq,
            slots,
            seq: Cell::new(0),
            free: Cell::new(if slots == 64 {
                u64::MAX
            } else {
                (1u64 << slots) - 1
            }),
            inbox: RefCell::new((0..slots).map(|_| Slot::default()).collect()),
            receiving: Cell::new(false),
            mail_waiters: Cell::new(0),
            mail_freed: Cell::new(0),
            fallbacks: Cell::new(0),
            rereads: Cell::new(0),
            long_reads: Cell::new(0),
            validated: Cell::new(0),
            unstable: Cell::new(0),
            busy: Cell::new(0),
            fenced: Cell::new(0),
            server_reads: Cell::new(0),
            epoch_retries: Cell::new(0),
            writing: RefCell::new(heapless::Vec::new()),
            untracked: Cell::new(0),
        })
    }

    /// The session's first request mailbox (client id).
    pub fn client_id(&self) -> u32 {
        self.client
    }

    /// Request mailboxes of this session: write requests it can have in flight at once.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Ends the session: the server settles any grant of it still unfinished and frees its
    /// mailboxes, so another handle can open on this endpoint.
    pub async fn close(self) -> Result<(), ErdaError> {
        let qp = self.qp()?;
        qp.send(&GOODBYE).await?;
        for _ in 0..4 {
            let mut w = Watched::new(self.ep.now_ns(), self.cfg.lease.deadline_ns);
            let r = recv_reply(self.ep, qp, &mut w).await?;
            if r.status == Status::Closed {
                return Ok(());
            }
        }
        Err(ErdaError::Protocol {
            what: "no answer to the goodbye",
        })
    }

    /// The superblock this client read when it connected.
    pub fn superblock(&self) -> Superblock {
        self.sb
    }

    /// A snapshot of this client's counters.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            fallbacks: self.fallbacks.get(),
            rereads: self.rereads.get(),
            long_reads: self.long_reads.get(),
            validated: self.validated.get(),
            unstable: self.unstable.get(),
            busy: self.busy.get(),
            fenced: self.fenced.get(),
            server_reads: self.server_reads.get(),
            epoch_retries: self.epoch_retries.get(),
        }
    }

    fn qp(&self) -> Result<&'e E::Qp, ErdaError> {
        Ok(self.ep.qp(self.cfg.node)?)
    }

    fn addr(&self, off: u64) -> GlobalAddr {
        GlobalAddr::new(self.cfg.node, off)
    }

    /// The remote address of the object at (head, units), or a corrupt-metadata error.
    fn object_addr(&self, head: u8, units: u32) -> Result<GlobalAddr, ErdaError> {
        self.sb
            .object_off(head, units)
            .map(|o| self.addr(o))
            .map_err(|why| ErdaError::Corrupt {
                addr: self.addr(self.sb.head_base[0]),
                why,
            })
    }

    /// Asks the server: WRITE_WITH_IMM of the request into one of this session's mailboxes
    /// (a free one: each coroutine's request has its own), then its reply. Returns the
    /// reply, and whether a grant it carries was recorded in `writing` (see [`Self::deliver`]).
    async fn request(
        &self,
        op: ReqOp,
        key: &[u8],
        value_len: usize,
        revoke: u32,
    ) -> Result<(Reply, bool), ErdaError> {
        // More coroutines than mailboxes queue for them. A coroutine already waiting goes
        // before one that arrives (often the one that just freed a mailbox and asks again):
        // without that, the coroutines that keep running keep retaking the mailboxes they
        // free, and a waiter that sleeps through its back-off can starve past its deadline
        // (verbs, 256 coroutines on 64 mailboxes). The holders are this handle's own
        // coroutines, so a wait fails if no mailbox was freed for a whole deadline, or (a
        // bound on a waiter that others keep overtaking) after eight deadlines in all (both
        // in time watched: `crate::lease`, "Stalls"). The
        // clock is read only when no mailbox is free at once.
        let free = self.free.get();
        let slot = if free != 0 && self.mail_waiters.get() == 0 {
            let i = free.trailing_zeros();
            self.free.set(free & !(1u64 << i));
            i
        } else {
            self.wait_mailbox().await?
        };
        let r = self.request_in(slot, op, key, value_len, revoke).await;
        // A mailbox whose request got no answer in time stays taken: the server may still
        // read it, and a new request there would be read twice.
        if !matches!(r, Err(ErdaError::Retries { .. })) {
            self.free.set(self.free.get() | 1u64 << slot);
            self.mail_freed.set(self.mail_freed.get().wrapping_add(1));
        }
        r
    }

    /// Queues for a request mailbox (see [`Self::request`]) and takes it.
    async fn wait_mailbox(&self) -> Result<u32, ErdaError> {
        let start = self.ep.now_ns();
        let mut w = Waiter::new(self.cfg.lease, start);
        // The eight deadlines in all, in time watched (`crate::lease`, "Stalls").
        let mut all = Watched::new(start, self.cfg.lease.deadline_ns.saturating_mul(8));
        let mut freed = self.mail_freed.get();
        let mut queued: Option<MailQueue<'_>> = None;
        loop {
            let free = self.free.get();
            if free != 0 && (queued.is_some() || self.mail_waiters.get() == 0) {
                let i = free.trailing_zeros();
                self.free.set(free & !(1u64 << i));
                return Ok(i);
            }
            if queued.is_none() {
                queued = Some(MailQueue::join(&self.mail_waiters));
            }
            let now = self.ep.now_ns();
            let overtaken = all.note(now) == 0;
            if self.mail_freed.get() != freed && !overtaken {
                freed = self.mail_freed.get();
                w = Waiter::new(self.cfg.lease, now);
            }
            // Word 0: only backs off, up to the deadline (the holders are this handle's).
            match w.observe(0, now) {
                Verdict::Wait(ns) => self.ep.pause(ns).await,
                _ => {
                    return Err(ErdaError::Retries {
                        what: "every request mailbox of this handle stayed in use",
                    });
                }
            }
        }
    }

    async fn request_in(
        &self,
        slot: u32,
        op: ReqOp,
        key: &[u8],
        value_len: usize,
        revoke: u32,
    ) -> Result<(Reply, bool), ErdaError> {
        // The sequence names the mailbox in its low 6 bits: replies are routed by it.
        let mut n = self.seq.get().wrapping_add(1);
        if n << 6 == 0 {
            // Sequence 0 is "no request waiting" in a slot.
            n = 1;
        }
        self.seq.set(n);
        let seq = n << 6 | slot;
        let req = Request::new(op, seq, key, value_len)
            .map_err(|_| ErdaError::BadKey { len: key.len() })?
            .with_revoke(revoke);
        let qp = self.qp()?;
        let bytes = req.encode();
        let id = self.client + slot;
        {
            let mut inbox = self.inbox.borrow_mut();
            inbox[slot as usize] = Slot {
                want: seq,
                ..Slot::default()
            };
        }
        let clear = Unwait(self, slot);
        qp.post(&mut [Op::WriteImm {
            remote: self.addr(self.sb.mailbox(id)),
            local: &bytes,
            imm: id,
        }])
        .await?;
        let r = self.await_reply(slot, seq).await;
        drop(clear);
        r
    }

    /// Routes a reply to the mailbox its sequence names, if a request there waits for it
    /// (a reply to an abandoned request is dropped). A grant is recorded in `writing` at
    /// once, before any other coroutine runs: another coroutine of this handle answered
    /// `Busy` on the same key must not take it for an orphan.
    fn deliver(&self, reply: Reply) {
        let slot = (reply.seq & 63) as usize;
        let mut inbox = self.inbox.borrow_mut();
        let Some(s) = inbox.get_mut(slot) else {
            return;
        };
        if s.want != reply.seq || reply.seq == 0 || s.reply.is_some() {
            return;
        }
        s.tracked = false;
        if reply.status == Status::Granted {
            let units = (reply.arg & 0x7FFF_FFFF) as u32;
            if self.writing.borrow_mut().push(units).is_ok() {
                s.tracked = true;
            } else {
                self.untracked.set(self.untracked.get() + 1);
            }
        }
        s.reply = Some(reply);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    /// Waits for the reply to `seq` in mailbox `slot`. One waiting coroutine at a time takes
    /// replies off the queue pair and routes them; the others wait for theirs to be routed
    /// (or for the receiving role to be free), each up to the deadline, counted in watched
    /// time ([`Watched`]: a client descheduled on a loaded machine does not call a live
    /// server dead).
    async fn await_reply(&self, slot: u32, seq: u32) -> Result<(Reply, bool), ErdaError> {
        let mut w = Watched::new(self.ep.now_ns(), self.cfg.lease.deadline_ns);
        let qp = self.qp()?;
        let timeout = ErdaError::Retries {
            what: "no reply from the Erda server within the deadline (is the memory node down?)",
        };
        loop {
            if let Some(r) = self.take(slot) {
                return Ok(r);
            }
            if w.note(self.ep.now_ns()) == 0 {
                return Err(timeout);
            }
            if !self.receiving.get() {
                // Take replies off the queue pair, routing each, until this one's came.
                let _role = Receiving::take(self);
                loop {
                    if w.note(self.ep.now_ns()) == 0 {
                        return Err(timeout);
                    }
                    let r = recv_reply(self.ep, qp, &mut w).await?;
                    let refused = r.seq == seq && r.status == Status::BadRequest;
                    self.deliver(r);
                    if refused {
                        let _ = self.take(slot);
                        return Err(ErdaError::Refused {
                            status: Status::BadRequest,
                        });
                    }
                    if let Some(r) = self.take(slot) {
                        return Ok(r);
                    }
                }
            }
            let routed = {
                let wait = pin!(poll_fn(|cx| {
                    let mut inbox = self.inbox.borrow_mut();
                    let s = &mut inbox[slot as usize];
                    if s.reply.is_some() || !self.receiving.get() {
                        return Poll::Ready(());
                    }
                    s.waker = Some(cx.waker().clone());
                    Poll::Pending
                }));
                let timer = pin!(self.ep.pause(w.pause_ns()));
                race(wait, timer).await
            };
            if routed.is_none() && w.note(self.ep.now_ns()) == 0 {
                return Err(timeout);
            }
        }
    }

    /// The reply routed to `slot`, if there is one.
    fn take(&self, slot: u32) -> Option<(Reply, bool)> {
        let mut inbox = self.inbox.borrow_mut();
        let s = &mut inbox[slot as usize];
        let r = s.reply.take()?;
        Some((r, s.tracked))
    }

    /// Forgets the grant at `units` recorded by [`Self::deliver`] (its object is written, or
    /// will never be).
    fn untrack(&self, units: u32, tracked: bool) {
        if tracked {
            let mut w = self.writing.borrow_mut();
            if let Some(i) = w.iter().position(|&u| u == units) {
                w.swap_remove(i);
            }
        } else {
            self.untracked.set(self.untracked.get().saturating_sub(1));
        }
    }

    /// The shared write path; returns whether the server granted space (the key was
    /// present, for update and delete).
    async fn write(&self, op: ReqOp, key: &[u8], value: &[u8]) -> Result<bool, ErdaError> {
        check_key(key).map_err(|_| ErdaError::BadKey { len: key.len() })?;
        if value.len() > VALUE_MAX {
            return Err(ErdaError::ValueTooLong {
                len: value.len(),
                max: VALUE_MAX,
            });
        }
        let delete = op == ReqOp::Delete;
        let vlen = if delete { 0 } else { value.len() };
        let (reply, tracked) = self.request_turn(op, key, vlen).await?;
        let units = (reply.arg & 0x7FFF_FFFF) as u32;
        if reply.status == Status::Granted && (delete || reply.arg > 0x7FFF_FFFF) {
            self.untrack(units, tracked);
        }
        match reply.status {
            // The server wrote the delete object itself before granting (see the module
            // docs): nothing left to write.
            Status::Granted if delete => return Ok(true),
            Status::Granted => {}
            Status::Absent => return Ok(false),
            status => return Err(ErdaError::Refused { status }),
        }
        if reply.arg > 0x7FFF_FFFF {
            return Err(ErdaError::Protocol {
                what: "granted offset beyond 31 bits",
            });
        }
        // Zero-copy: the object goes straight to its place in the log. In the same doorbell,
        // a READ of its last word flushes it (acknowledged means durable: see the module
        // docs, "Durability"), then the durable mark tells the server the grant is finished:
        // the queue pair places the mark only after the READ completed. The grant stays in
        // `writing` (recorded when its reply was routed) until the doorbell is done.
        let r = self.write_granted(reply.head, units, key, value).await;
        self.untrack(units, tracked);
        r.map(|()| true)
    }

    async fn write_granted(
        &self,
        head: u8,
        units: u32,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), ErdaError> {
        let addr = self.object_addr(head, units)?;
        // Zeroed per write: only the bytes a small object needs (see [`SMALL_OBJECT`]).
        let mut small = [0u8; SMALL_OBJECT];
        let mut large: [u8; OBJECT_MAX];
        let obj: &mut [u8] = if object_len(key.len(), value.len()) <= SMALL_OBJECT {
            &mut small
        } else {
            large = [0u8; OBJECT_MAX];
            &mut large
        };
        let len = encode_object_with(obj, key, value, false, super::object_checksum)
            .map_err(|why| ErdaError::Corrupt { addr, why })?;
        self.ep.charge(Work::Crc32c(len));
        if self.sb.head_remaining(units) < (len + DURABLE_MARK_LEN) as u64 {
            return Err(ErdaError::Protocol {
                what: "granted space runs past the head's log",
            });
        }
        self.write_object(addr, &obj[..len], units).await
    }

    /// The doorbell that writes a granted object (see [`Self::write`]).
    async fn write_object(
        &self,
        addr: GlobalAddr,
        obj: &[u8],
        units: u32,
    ) -> Result<(), ErdaError> {
        let len = obj.len();
        let mark = durable_mark(units).to_le_bytes();
        let mut flush = [0u8; 8];
        if self.cfg.unflushed_writes {
            self.qp()?
                .post(&mut [
                    Op::Write {
                        remote: addr,
                        local: obj,
                    },
                    Op::Write {
                        remote: addr.add(len as u64),
                        local: &mark,
                    },
                ])
                .await?;
            return Ok(());
        }
        self.qp()?
            .post(&mut [
                Op::Write {
                    remote: addr,
                    local: obj,
                },
                Op::Read {
                    remote: addr.add(len as u64 - 8),
                    local: &mut flush,
                },
                Op::Write {
                    remote: addr.add(len as u64),
                    local: &mark,
                },
            ])
            .await?;
        Ok(())
    }

    /// Asks for a grant until the key has no other write in flight: a `Busy` answer names
    /// the grant in flight and its writer; this handle backs off on the fabric clock, and
    /// once the same grant has been in flight for a whole lease it fences the writer and asks
    /// the server to settle that grant (the protocol of [`crate::lease`]).
    async fn request_turn(
        &self,
        op: ReqOp,
        key: &[u8],
        vlen: usize,
    ) -> Result<(Reply, bool), ErdaError> {
        let mut w: Option<Waiter> = None;
        let mut revoke = 0u32;
        let mut orphan = 0u32;
        loop {
            let (reply, tracked) = self.request(op, key, vlen, revoke).await?;
            if reply.status != Status::Busy {
                return Ok((reply, tracked));
            }
            bump(&self.busy);
            revoke = 0;
            // The grant in flight as a lock word: its writer and its slot (never 0).
            let word = reply.arg | 1 << 31;
            let who = holder(reply.arg);
            let units = (reply.arg & 0x7FFF_FFFF) as u32;
            let now = self.ep.now_ns();
            if who != 0
                && who == self.ep.client_id()
                && self.untracked.get() == 0
                && !self.writing.borrow().contains(&units)
                && orphan != units
            {
                // This handle's own grant that none of its coroutines is writing: an orphan
                // (its request's reply never came back). Nobody will write it: settle it now.
                (revoke, orphan) = (units, units);
                continue;
            }
            // Only watched time counts (see `Waiter::watching`): this thread's own stall does
            // not fence a holder that was descheduled with it.
            let w = w.get_or_insert_with(|| Waiter::new(self.cfg.lease, now).watching());
            let held = |waited_ns| ErdaError::Held {
                holder: who,
                head: reply.head,
                units,
                waited_ns,
            };
            // Where the grant's durable mark will be: watched with one-sided READs (no
            // server CPU) between requests.
            let len = u64::from(reply.aux) * 8;
            let mark_at = self
                .object_addr(reply.head, units)
                .ok()
                .filter(|_| len > 0 && self.sb.head_remaining(units) >= len + 8)
                .map(|a| a.add(len));
            let mut polls = 0u32;
            loop {
                match w.observe(word, self.ep.now_ns()) {
                    Verdict::Wait(ns) => self.ep.pause(ns).await,
                    // A writer of this very handle (another coroutine) is never fenced; an
                    // unnamed one cannot be.
                    Verdict::Expired { .. } if who == 0 || who == self.ep.client_id() => break,
                    Verdict::Expired { .. } => match self.ep.fence(self.cfg.node, who).await {
                        Ok(()) => {
                            bump(&self.fenced);
                            revoke = units;
                            break;
                        }
                        Err(FabricError::Unsupported { .. }) => {
                            return Err(held(self.ep.now_ns().saturating_sub(now)));
                        }
                        Err(e) => return Err(e.into()),
                    },
                    Verdict::GiveUp { waited_ns, .. } => return Err(held(waited_ns)),
                }
                polls += 1;
                // Ask the server again once the mark is there, and every 16 looks anyway
                // (another waiter may have had the grant settled, and a new one be in flight).
                let Some(at) = mark_at else { break };
                if polls.is_multiple_of(16) {
                    break;
                }
                let mut m = [0u8; 8];
                self.qp()?.read(at, &mut m).await?;
                if u64::from_le_bytes(m) == durable_mark(units) {
                    break;
                }
            }
        }
    }
}

/// A coroutine's place among those waiting for a request mailbox: counted while it waits,
/// uncounted when it takes one or is dropped.
struct MailQueue<'a>(&'a Cell<u32>);

impl<'a> MailQueue<'a> {
    fn join(waiters: &'a Cell<u32>) -> Self {
        waiters.set(waiters.get() + 1);
        MailQueue(waiters)
    }
}

impl Drop for MailQueue<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// One request mailbox's routing state.
#[derive(Default)]
struct Slot {
    /// The sequence of the request waiting in it (0: none).
    want: u32,
    reply: Option<Reply>,
    /// Whether the grant in `reply` was recorded in `writing`.
    tracked: bool,
    waker: Option<Waker>,
}

/// Clears a mailbox's waiting request when its coroutine is done with it (or dropped).
struct Unwait<'h, 'e, E: Endpoint>(&'h Erda<'e, E>, u32);

impl<E: Endpoint> Drop for Unwait<'_, '_, E> {
    fn drop(&mut self) {
        let (reply, tracked) = {
            let mut inbox = self.0.inbox.borrow_mut();
            let s = &mut inbox[self.1 as usize];
            let r = (s.reply.take(), s.tracked);
            *s = Slot::default();
            r
        };
        // Routed but never taken (its coroutine was dropped): nobody writes that grant.
        if let Some(r) = reply
            && r.status == Status::Granted
        {
            self.0.untrack((r.arg & 0x7FFF_FFFF) as u32, tracked);
        }
    }
}

/// The receiving role: released (and the coroutines waiting for a reply woken, so that one
/// of them takes the role over) when dropped.
struct Receiving<'h, 'e, E: Endpoint>(&'h Erda<'e, E>);

impl<'h, 'e, E: Endpoint> Receiving<'h, 'e, E> {
    fn take(h: &'h Erda<'e, E>) -> Self {
        h.receiving.set(true);
        Receiving(h)
    }
}

impl<E: Endpoint> Drop for Receiving<'_, '_, E> {
    fn drop(&mut self) {
        self.0.receiving.set(false);
        for s in self.0.inbox.borrow_mut().iter_mut() {
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }
}

/// What a bucket's objects say (see [`Erda::answer`]).
enum Answer {
    Found(Option<usize>),
    NoOlder,
    Unsure,
}

/// The server's next reply, waiting at most what is left of `w` (watched time on the fabric
/// clock): a memory node that crashed after taking the request never answers, and its
/// receive would never complete. (A reply that comes after all is skipped by the next
/// request: its sequence is older.)
async fn recv_reply<E: Endpoint>(ep: &E, qp: &E::Qp, w: &mut Watched) -> Result<Reply, ErdaError> {
    let mut buf = [0u8; 64];
    let r = recv_within(ep, qp, &mut buf, w)
        .await
        .ok_or(ErdaError::Retries {
            what: "no reply from the Erda server within the deadline (is the memory node down?)",
        })??;
    if r.kind != RecvKind::Send || r.len as usize != REPLY_LEN {
        return Err(ErdaError::Protocol {
            what: "the server's reply is not a 16-byte SEND",
        });
    }
    Reply::decode(&buf[..REPLY_LEN]).map_err(|why| ErdaError::Corrupt {
        addr: GlobalAddr::new(qp.peer(), 0),
        why,
    })
}

impl<E: Endpoint> KvIndex for Erda<'_, E> {
    type Error = ErdaError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), ErdaError> {
        self.write(ReqOp::Upsert, key, value).await.map(|_| ())
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, ErdaError> {
        self.write(ReqOp::Update, key, value).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, ErdaError> {
        self.lookup(key, out).await
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, ErdaError> {
        self.write(ReqOp::Delete, key, &[]).await
    }

    /// Erda is a hash store: no key order to scan in.
    async fn scan(
        &self,
        _from: &[u8],
        _limit: usize,
        _visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ErdaError> {
        Err(ErdaError::Unsupported {
            what: "range scan (Erda is a hash store)",
        })
    }
}

const _: () = assert!(KEY_MAX <= 16);

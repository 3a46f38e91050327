//! The baselines' client handle: every operation is a SEND answered by the server; RAW
//! writes then WRITE their record into the granted ring slot and READ it back.
use super::{
    MAX_MESSAGE, Op, REPLY_HEADER, REQ_HEADER, RecOp, ReplyHeader, ReqHeader, Scheme,
    encode_record, raw_slot_len, record_len, void_word,
};
use crate::erda::{ErdaClientConfig, ErdaError};
use crate::fabric::{Endpoint, Op as Verb, QueuePair, RecvKind, Work};
use crate::index::KvIndex;
use crate::lease::{Verdict, Waiter, Watched, recv_within};
use core::cell::{Cell, RefCell};
use core::future::poll_fn;
use core::task::{Poll, Waker};
use remora_layouts::GlobalAddr;
use remora_layouts::erda::{Status, VALUE_MAX, check_key};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// What one handle observed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BaselineStats {
    /// Requests answered `Busy` or `LogFull` and asked again.
    pub retries: u64,
    /// Replies received by one coroutine for another (several in flight on one handle).
    pub handed_over: u64,
}

/// A reply taken off the queue pair by one coroutine for another.
struct Stashed {
    seq: u32,
    len: usize,
    buf: Vec<u8>,
}

/// One compute node's (thread's) handle on a Redo Logging or Read-After-Write store.
/// Coroutines of the handle share its queue pair: each request carries a sequence number,
/// one coroutine at a time receives, and hands other coroutines' replies over.
pub struct Baseline<'e, E: Endpoint> {
    ep: &'e E,
    scheme: Scheme,
    cfg: ErdaClientConfig,
    ring_off: u64,
    ring_len: u64,
    seq: Cell<u32>,
    receiving: Cell<bool>,
    stash: RefCell<Vec<Stashed>>,
    waiters: RefCell<Vec<Waker>>,
    /// Receives that ended with the deadline spent (the server silent): a coroutine that
    /// waited meanwhile for the receiver gives up with it.
    silences: Cell<u64>,
    retries: Cell<u64>,
    handed_over: Cell<u64>,
}

impl<'e, E: Endpoint> Baseline<'e, E> {
    /// Opens a session with the memory node `cfg.node` running `scheme`'s server.
    pub async fn open(ep: &'e E, scheme: Scheme, cfg: ErdaClientConfig) -> Result<Self, ErdaError> {
        let qp = ep.qp(cfg.node)?;
        if qp.max_message() < MAX_MESSAGE.min(REQ_HEADER + 64) {
            return Err(ErdaError::Protocol {
                what: "the fabric's messages are too small for the baseline protocol",
            });
        }
        let h = Baseline {
            ep,
            scheme,
            cfg,
            ring_off: 0,
            ring_len: 0,
            seq: Cell::new(0),
            receiving: Cell::new(false),
            stash: RefCell::new(Vec::new()),
            waiters: RefCell::new(Vec::new()),
            silences: Cell::new(0),
            retries: Cell::new(0),
            handed_over: Cell::new(0),
        };
        let mut buf = [0u8; REPLY_HEADER];
        let (r, _) = h.call(Op::Hello, 0, &[], 0, &[], &mut buf).await?;
        if r.status != Status::Welcome || r.aux == 0 {
            return Err(ErdaError::Refused { status: r.status });
        }
        Ok(Baseline {
            ring_off: r.arg,
            ring_len: r.aux,
            ..h
        })
    }

    /// Which baseline this client speaks.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// A snapshot of this client's counters.
    pub fn stats(&self) -> BaselineStats {
        BaselineStats {
            retries: self.retries.get(),
            handed_over: self.handed_over.get(),
        }
    }

    /// Asks the server to apply every record that has landed; returns how many are still
    /// waiting (RAW records not yet written).
    pub async fn drain(&self) -> Result<u64, ErdaError> {
        let mut buf = [0u8; REPLY_HEADER];
        Ok(self.call(Op::Drain, 0, &[], 0, &[], &mut buf).await?.0.arg)
    }

    /// One request and its reply (copied into `out`: header, then payload); returns the
    /// reply's header and its length.
    async fn call(
        &self,
        op: Op,
        rec: u8,
        key: &[u8],
        value_len: usize,
        body: &[u8],
        out: &mut [u8],
    ) -> Result<(ReplyHeader, usize), ErdaError> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let h = ReqHeader {
            op,
            rec,
            key_len: key.len() as u8,
            value_len: value_len as u16,
            seq,
            aux: if op == Op::Hello {
                self.ep.client_id()
            } else {
                0
            },
        };
        let mut msg = [0u8; MAX_MESSAGE];
        msg[..REQ_HEADER].copy_from_slice(&h.encode());
        let mut n = REQ_HEADER;
        for part in [key, body] {
            msg[n..n + part.len()].copy_from_slice(part);
            n += part.len();
        }
        let qp = self.ep.qp(self.cfg.node)?;
        qp.send(&msg[..n]).await?;
        let len = self.await_reply(seq, out).await?;
        let r = ReplyHeader::decode(&out[..len]).ok_or(ErdaError::Protocol {
            what: "the server's reply does not decode",
        })?;
        if r.seq != seq {
            return Err(ErdaError::Protocol {
                what: "a reply with another request's sequence",
            });
        }
        Ok((r, len))
    }

    /// Waits for the reply with sequence `seq`: from the stash if another coroutine took it,
    /// else by receiving (one coroutine at a time), stashing replies for others.
    async fn await_reply(&self, seq: u32, out: &mut [u8]) -> Result<usize, ErdaError> {
        // The deadline in time watched (`crate::lease`, "Stalls"): a client stopped while it
        // waits does not give up on a live server for that.
        let mut w = Watched::new(self.ep.now_ns(), self.cfg.lease.deadline_ns);
        loop {
            if let Some(n) = self.take_stashed(seq, out)? {
                return Ok(n);
            }
            if self.receiving.get() {
                // Another coroutine receives: wait until it hands something over or stops
                // (it watches the server meanwhile: its deadline is this one's too).
                let silences = self.silences.get();
                let mut registered = false;
                poll_fn(|cx| {
                    if registered {
                        return Poll::Ready(());
                    }
                    registered = true;
                    self.waiters.borrow_mut().push(cx.waker().clone());
                    Poll::Pending
                })
                .await;
                if self.silences.get() != silences {
                    return Err(NO_REPLY);
                }
                w.note(self.ep.now_ns());
                continue;
            }
            let mut buf = [0u8; MAX_MESSAGE];
            let r = {
                // Released (and the waiters woken) however the receive ends, a dropped
                // future included.
                let _turn = Turn::take(self);
                self.receive_one(&mut w, &mut buf).await
            };
            let (got, n) = r?;
            if got == seq {
                if n > out.len() {
                    return Err(ErdaError::BufferTooSmall {
                        len: out.len(),
                        need: n,
                    });
                }
                out[..n].copy_from_slice(&buf[..n]);
                return Ok(n);
            }
            // Someone else's: hand it over.
            self.handed_over.set(self.handed_over.get() + 1);
            let mut st = self.stash.borrow_mut();
            let slot = match st.iter().position(|s| s.len == 0) {
                Some(i) => i,
                None => {
                    st.push(Stashed {
                        seq: 0,
                        len: 0,
                        buf: vec![0u8; MAX_MESSAGE],
                    });
                    st.len() - 1
                }
            };
            st[slot].seq = got;
            st[slot].len = n;
            st[slot].buf[..n].copy_from_slice(&buf[..n]);
        }
    }

    fn take_stashed(&self, seq: u32, out: &mut [u8]) -> Result<Option<usize>, ErdaError> {
        let mut st = self.stash.borrow_mut();
        let Some(s) = st.iter_mut().find(|s| s.len > 0 && s.seq == seq) else {
            return Ok(None);
        };
        let n = s.len;
        if n > out.len() {
            return Err(ErdaError::BufferTooSmall {
                len: out.len(),
                need: n,
            });
        }
        out[..n].copy_from_slice(&s.buf[..n]);
        s.len = 0;
        Ok(Some(n))
    }

    /// Receives one reply into `buf`, within what is left of the deadline `w`; returns its
    /// sequence and length.
    async fn receive_one(
        &self,
        w: &mut Watched,
        buf: &mut [u8; MAX_MESSAGE],
    ) -> Result<(u32, usize), ErdaError> {
        let qp = self.ep.qp(self.cfg.node)?;
        let Some(r) = recv_within(self.ep, qp, buf, w).await else {
            self.silences.set(self.silences.get() + 1);
            return Err(NO_REPLY);
        };
        let r = r?;
        let n = r.len as usize;
        if r.kind != RecvKind::Send || n < REPLY_HEADER || n > buf.len() {
            return Err(ErdaError::Protocol {
                what: "the server's reply is not a SEND with a reply header",
            });
        }
        let seq = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        Ok((seq, n))
    }

    fn check(&self, key: &[u8], value: &[u8]) -> Result<(), ErdaError> {
        check_key(key).map_err(|_| ErdaError::BadKey { len: key.len() })?;
        if value.len() > VALUE_MAX {
            return Err(ErdaError::ValueTooLong {
                len: value.len(),
                max: VALUE_MAX,
            });
        }
        Ok(())
    }

    /// A write of either scheme; true if the server took it (the key was present, for
    /// update and delete).
    async fn write(&self, op: RecOp, key: &[u8], value: &[u8]) -> Result<bool, ErdaError> {
        self.check(key, value)?;
        let mut w = Waiter::new(self.cfg.lease, self.ep.now_ns());
        let mut rec = [0u8; MAX_MESSAGE];
        let mut out = [0u8; REPLY_HEADER];
        loop {
            let r = match self.scheme {
                Scheme::Redo => {
                    let n = encode_record(&mut rec, op, key, value, 0)
                        .ok_or(ErdaError::BadKey { len: key.len() })?;
                    self.ep.charge(Work::Crc32c(n));
                    self.call(Op::Write, 0, &[], 0, &rec[..n], &mut out)
                        .await?
                        .0
                }
                Scheme::Raw => {
                    let mut r = self
                        .call(Op::Reserve, op as u8, key, value.len(), &[], &mut out)
                        .await?
                        .0;
                    if r.status == Status::Granted
                        && self.write_slot(op, key, value, r.arg, &mut rec).await?
                    {
                        // The reservation's lease ran out around our WRITE: the server
                        // says whether it kept the record (`Granted`) or voided it (`Busy`:
                        // it took no effect; write again).
                        let pos = r.arg.to_le_bytes();
                        r = self.call(Op::Check, 0, &[], 0, &pos, &mut out).await?.0;
                        if !matches!(r.status, Status::Granted | Status::Busy) {
                            return Err(ErdaError::Protocol {
                                what: "the server no longer knows whether a voided write counted",
                            });
                        }
                    }
                    r
                }
            };
            match r.status {
                Status::Granted => return Ok(true),
                Status::Absent => return Ok(false),
                Status::Busy | Status::LogFull => {
                    self.retries.set(self.retries.get() + 1);
                    match w.observe(0, self.ep.now_ns()) {
                        Verdict::Wait(ns) => self.ep.pause(ns).await,
                        _ => {
                            return Err(ErdaError::Retries {
                                what: "the key's previous write never landed, or the ring stayed full",
                            });
                        }
                    }
                }
                status => return Err(ErdaError::Refused { status }),
            }
        }
    }

    /// RAW: WRITE the record into its ring slot and READ its last word and the slot's void
    /// word back, one doorbell. Returns whether the void word was there (the server voided
    /// the reservation, or was about to: ask it which).
    async fn write_slot(
        &self,
        op: RecOp,
        key: &[u8],
        value: &[u8],
        pos: u64,
        rec: &mut [u8],
    ) -> Result<bool, ErdaError> {
        let len = record_len(key.len(), value.len());
        if pos % self.ring_len + raw_slot_len(len as u64) > self.ring_len {
            return Err(ErdaError::Protocol {
                what: "granted ring slot runs past the ring",
            });
        }
        let n =
            encode_record(rec, op, key, value, pos).ok_or(ErdaError::BadKey { len: key.len() })?;
        self.ep.charge(Work::Crc32c(n));
        let at = GlobalAddr::try_new(self.cfg.node, self.ring_off + pos % self.ring_len).map_err(
            |why| ErdaError::Corrupt {
                addr: GlobalAddr::NULL,
                why,
            },
        )?;
        // The record's last 8 bytes, its padding, the void word.
        let tail = n.next_multiple_of(8) + 16 - n;
        let mut flush = [0u8; 23];
        self.ep
            .qp(self.cfg.node)?
            .post(&mut [
                Verb::Write {
                    remote: at,
                    local: &rec[..n],
                },
                Verb::Read {
                    remote: at.add(n as u64 - 8),
                    local: &mut flush[..tail],
                },
            ])
            .await?;
        let word = u64::from_le_bytes(flush[tail - 8..tail].try_into().unwrap_or([0; 8]));
        Ok(word == void_word(pos))
    }
}

/// A reply wait whose deadline was spent.
const NO_REPLY: ErdaError = ErdaError::Retries {
    what: "no reply from the baseline server within the deadline",
};

/// The receiving turn of a handle's coroutines (see [`Baseline::await_reply`]).
struct Turn<'a, 'e, E: Endpoint>(&'a Baseline<'e, E>);

impl<'a, 'e, E: Endpoint> Turn<'a, 'e, E> {
    fn take(h: &'a Baseline<'e, E>) -> Self {
        h.receiving.set(true);
        Turn(h)
    }
}

impl<E: Endpoint> Drop for Turn<'_, '_, E> {
    fn drop(&mut self) {
        self.0.receiving.set(false);
        let wake: Vec<Waker> = self.0.waiters.borrow_mut().drain(..).collect();
        for w in wake {
            w.wake();
        }
    }
}

impl<E: Endpoint> KvIndex for Baseline<'_, E> {
    type Error = ErdaError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), ErdaError> {
        self.write(RecOp::Upsert, key, value).await.map(|_| ())
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, ErdaError> {
        self.write(RecOp::Update, key, value).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, ErdaError> {
        self.check(key, &[])?;
        let mut buf = [0u8; MAX_MESSAGE];
        let (r, n) = self.call(Op::Get, 0, key, 0, &[], &mut buf).await?;
        match r.status {
            Status::Absent => Ok(None),
            Status::Granted => {
                let vl = r.arg as usize;
                if REPLY_HEADER + vl != n {
                    return Err(ErdaError::Protocol {
                        what: "a get reply whose length does not match its value",
                    });
                }
                if vl > out.len() {
                    return Err(ErdaError::BufferTooSmall {
                        len: out.len(),
                        need: vl,
                    });
                }
                out[..vl].copy_from_slice(&buf[REPLY_HEADER..n]);
                Ok(Some(vl))
            }
            status => Err(ErdaError::Refused { status }),
        }
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, ErdaError> {
        self.write(RecOp::Delete, key, &[]).await
    }

    /// A hash store: no key order to scan in.
    async fn scan(
        &self,
        _from: &[u8],
        _limit: usize,
        _visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ErdaError> {
        Err(ErdaError::Unsupported {
            what: "range scan (the Erda baselines are hash stores)",
        })
    }
}

//! A compute node's handle on a WORT or WOART store: every operation is one request written
//! into this client's ring with WRITE_WITH_IMM and one reply SEND (the server-reply path).
use super::layout::*;
use super::{WortClientConfig, WortError};
use crate::fabric::{Endpoint, Op, QueuePair, RecvKind, Work};
use crate::index::KvIndex;
use crate::lease::{Watched, recv_within};
use core::cell::{Cell, RefCell};
use remora_layouts::GlobalAddr;
use std_alloc::vec;
use std_alloc::vec::Vec;

/// How long a coroutine waiting for another's receive sleeps between looks at its inbox.
const POLL_NS: u64 = 100;

/// One compute node's (thread's) handle. Its coroutines share the ring (one slot each) and
/// the queue pair's receives: whichever coroutine is receiving files every reply under the
/// slot it names.
pub struct Wort<'e, E: Endpoint> {
    ep: &'e E,
    cfg: WortClientConfig,
    client: u32,
    ring: u64,
    slots: u32,
    seq: Cell<u32>,
    /// Bit i set: slot i is free.
    free: Cell<u64>,
    receiving: Cell<bool>,
    /// Per slot: the reply's length (0: none yet) and bytes.
    inbox: RefCell<Vec<u8>>,
    inbox_len: RefCell<Vec<usize>>,
}

impl<'e, E: Endpoint> Wort<'e, E> {
    /// Opens a session: the server assigns this handle a ring.
    pub async fn open(ep: &'e E, cfg: WortClientConfig) -> Result<Self, WortError> {
        let qp = ep.qp(cfg.node)?;
        let mut hello = [0u8; 12];
        hello[..8].copy_from_slice(&HELLO);
        hello[8..].copy_from_slice(&ep.client_id().to_le_bytes());
        qp.send(&hello).await?;
        let mut buf = [0u8; REPLY_MAX];
        let mut w = Watched::new(ep.now_ns(), cfg.deadline_ns);
        let n = recv_within(ep, qp, &mut buf, &mut w)
            .await
            .ok_or(WortError::Timeout {
                waited_ns: w.wall_ns(ep.now_ns()),
            })??;
        if n.kind != RecvKind::Send {
            return Err(WortError::Protocol {
                what: "the server's welcome is not a SEND",
            });
        }
        let r = decode_reply(&buf[..n.len as usize]).map_err(|_| WortError::Protocol {
            what: "the server's welcome does not decode (is the memory node running another service?)",
        })?;
        if r.status != Status::Welcome {
            return Err(WortError::Refused { status: r.status });
        }
        if r.value_len != 24 {
            return Err(WortError::Protocol {
                what: "welcome without the ring geometry",
            });
        }
        let w = |i: usize| {
            let at = REPLY_HEAD + 8 * i;
            u64::from_le_bytes(buf[at..at + 8].try_into().unwrap_or([0; 8]))
        };
        let (ring_off, slots) = (w(1), w(2).min(64) as u32);
        if slots == 0 {
            return Err(WortError::Protocol {
                what: "a ring of no slots",
            });
        }
        Ok(Wort {
            ep,
            cfg,
            client: r.seq,
            ring: ring_off + r.seq as u64 * w(2) * SLOT_LEN as u64,
            slots,
            seq: Cell::new(0),
            free: Cell::new(if slots == 64 {
                u64::MAX
            } else {
                (1 << slots) - 1
            }),
            receiving: Cell::new(false),
            inbox: RefCell::new(vec![0u8; slots as usize * REPLY_MAX]),
            inbox_len: RefCell::new(vec![0; slots as usize]),
        })
    }

    /// The ring the server gave this handle.
    pub fn client_id(&self) -> u32 {
        self.client
    }

    fn now(&self) -> u64 {
        self.ep.now_ns()
    }

    /// The deadline of one request, from now: in time watched (`crate::lease`, "Stalls": a
    /// client stopped while it waits does not give up on a live server for that), one more
    /// ns (a request fails once it waited more than `deadline_ns`).
    fn deadline(&self) -> Watched {
        Watched::new(self.now(), self.cfg.deadline_ns.saturating_add(1))
    }

    async fn take_slot(&self, w: &mut Watched) -> Result<u16, WortError> {
        loop {
            let f = self.free.get();
            if f != 0 {
                let i = f.trailing_zeros();
                self.free.set(f & !(1 << i));
                return Ok(i as u16);
            }
            if w.note(self.now()) == 0 {
                return Err(WortError::Timeout {
                    waited_ns: w.wall_ns(self.now()),
                });
            }
            self.ep.pause(POLL_NS).await;
        }
    }

    /// One request and its reply; `out` gets the reply's bytes; returns the reply header.
    async fn call(
        &self,
        op: ReqOp,
        flags: u64,
        key: &[u8],
        value: &[u8],
        out: &mut [u8; REPLY_MAX],
    ) -> Result<Reply, WortError> {
        if key.is_empty() || key.len() > KEY_MAX {
            return Err(WortError::BadKey { len: key.len() });
        }
        if value.len() > VALUE_MAX {
            return Err(WortError::ValueTooLong {
                len: value.len(),
                max: VALUE_MAX,
            });
        }
        let mut w = self.deadline();
        let slot = self.take_slot(&mut w).await?;
        let r = self.call_in(slot, op, flags, key, value, out, &mut w).await;
        self.inbox_len.borrow_mut()[slot as usize] = 0;
        self.free.set(self.free.get() | 1 << slot);
        r
    }

    #[allow(clippy::too_many_arguments)]
    async fn call_in(
        &self,
        slot: u16,
        op: ReqOp,
        flags: u64,
        key: &[u8],
        value: &[u8],
        out: &mut [u8; REPLY_MAX],
        w: &mut Watched,
    ) -> Result<Reply, WortError> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut req = [0u8; SLOT_LEN];
        let n = encode_request(&mut req, op, flags, seq, key, value);
        let qp = self.ep.qp(self.cfg.node)?;
        self.inbox_len.borrow_mut()[slot as usize] = 0;
        qp.post(&mut [Op::WriteImm {
            remote: GlobalAddr::new(self.cfg.node, self.ring + slot as u64 * SLOT_LEN as u64),
            local: &req[..n],
            imm: imm(self.client, slot),
        }])
        .await?;
        loop {
            let len = self.inbox_len.borrow()[slot as usize];
            if len > 0 {
                let at = slot as usize * REPLY_MAX;
                out[..len].copy_from_slice(&self.inbox.borrow()[at..at + len]);
                self.inbox_len.borrow_mut()[slot as usize] = 0;
                self.ep.charge(Work::Decode(len));
                let r = decode_reply(&out[..len]).map_err(|_| WortError::Protocol {
                    what: "a reply that does not decode",
                })?;
                if r.status == Status::BadRequest {
                    return Err(WortError::Refused { status: r.status });
                }
                if r.seq == seq {
                    return Ok(r);
                }
                // A late reply to an abandoned request of this slot: wait on.
                continue;
            }
            if w.note(self.now()) == 0 {
                return Err(WortError::Timeout {
                    waited_ns: w.wall_ns(self.now()),
                });
            }
            if self.receiving.get() {
                self.ep.pause(POLL_NS).await;
                continue;
            }
            self.receiving.set(true);
            let got = self.receive_one(qp, w).await;
            self.receiving.set(false);
            got?;
        }
    }

    /// Takes one completion off the queue pair and files it in its slot's inbox; returns
    /// without one once `w` is spent.
    async fn receive_one(&self, qp: &E::Qp, w: &mut Watched) -> Result<(), WortError> {
        let mut buf = [0u8; REPLY_MAX];
        let Some(got) = recv_within(self.ep, qp, &mut buf, w).await else {
            return Ok(());
        };
        let c = got?;
        let len = c.len as usize;
        if c.kind != RecvKind::Send || !(REPLY_HEAD..=REPLY_MAX).contains(&len) {
            return Err(WortError::Protocol {
                what: "the server's reply is not a SEND of a reply's size",
            });
        }
        let s = u16::from_le_bytes([buf[4], buf[5]]) as usize;
        if s < self.slots as usize {
            let at = s * REPLY_MAX;
            self.inbox.borrow_mut()[at..at + len].copy_from_slice(&buf[..len]);
            self.inbox_len.borrow_mut()[s] = len;
        }
        Ok(())
    }

    fn status(r: &Reply) -> Result<bool, WortError> {
        match r.status {
            Status::Ok => Ok(true),
            Status::Absent => Ok(false),
            s => Err(WortError::Refused { status: s }),
        }
    }
}

impl<E: Endpoint> KvIndex for Wort<'_, E> {
    type Error = WortError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), WortError> {
        let mut out = [0u8; REPLY_MAX];
        let r = self.call(ReqOp::Upsert, 0, key, value, &mut out).await?;
        Self::status(&r).map(|_| ())
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, WortError> {
        let mut out = [0u8; REPLY_MAX];
        let r = self.call(ReqOp::Update, 0, key, value, &mut out).await?;
        Self::status(&r)
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, WortError> {
        let mut msg = [0u8; REPLY_MAX];
        let r = self.call(ReqOp::Get, 0, key, &[], &mut msg).await?;
        if !Self::status(&r)? {
            return Ok(None);
        }
        let v = &msg[REPLY_HEAD..REPLY_HEAD + r.value_len];
        let have = out.len();
        let dst = out.get_mut(..v.len()).ok_or(WortError::BufferTooSmall {
            len: have,
            need: v.len(),
        })?;
        dst.copy_from_slice(v);
        Ok(Some(v.len()))
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, WortError> {
        let mut out = [0u8; REPLY_MAX];
        let r = self.call(ReqOp::Delete, 0, key, &[], &mut out).await?;
        Self::status(&r)
    }

    /// One request per key, as the CANRT paper's WORT and WOART baselines: each asks the
    /// server for the next key after the previous one.
    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, WortError> {
        let mut key = [0u8; KEY_MAX];
        let mut kl = from.len();
        if kl == 0 || kl > KEY_MAX {
            return Err(WortError::BadKey { len: kl });
        }
        key[..kl].copy_from_slice(from);
        let mut msg = [0u8; REPLY_MAX];
        let mut n = 0;
        while n < limit {
            let flags = if n == 0 { 0 } else { FLAG_EXCLUSIVE };
            let r = self
                .call(ReqOp::Next, flags, &key[..kl], &[], &mut msg)
                .await?;
            if !Self::status(&r)? {
                break;
            }
            if r.key_len == 0 {
                return Err(WortError::Protocol {
                    what: "a next reply without its key",
                });
            }
            kl = r.key_len;
            key[..kl].copy_from_slice(&msg[16..16 + kl]);
            visit(&key[..kl], &msg[REPLY_HEAD..REPLY_HEAD + r.value_len]);
            n += 1;
        }
        Ok(n)
    }
}

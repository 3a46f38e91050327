//! The read path of Erda's client: the neighborhood and object READs, the checksum
//! fallback to the previous object, the validated re-read, and reads through the server
//! while a head is being cleaned.
use super::*;

impl<E: Endpoint> Erda<'_, E> {
    /// Reads the object at (head, units) and checks it is a whole object of `key`. The same
    /// doorbell then reads the head's state word into `state` (see [`Self::lookup`]).
    pub(super) async fn read_object(
        &self,
        head: u8,
        units: u32,
        key: &[u8],
        out: &mut [u8],
        state: &mut u64,
    ) -> Result<Obj, ErdaError> {
        let addr = self.object_addr(head, units)?;
        let at = self.addr(self.sb.head_state_off(head));
        let room = self.sb.head_remaining(units).min(OBJECT_MAX as u64) as usize;
        let mut sw = [0u8; 8];
        let hint = object_len(key.len(), self.cfg.value_size.min(VALUE_MAX)).min(room);
        // Zeroed per call: only the [`SMALL_OBJECT`] bytes an object of the configured
        // value size needs, the whole [`OBJECT_MAX`] only for a larger one.
        let mut small = [0u8; SMALL_OBJECT];
        let mut large: [u8; OBJECT_MAX];
        let mut buf: &mut [u8] = if hint <= SMALL_OBJECT {
            &mut small
        } else {
            large = [0u8; OBJECT_MAX];
            &mut large
        };
        let qp = self.qp()?;
        qp.post(&mut [
            Op::Read {
                remote: addr,
                local: &mut buf[..hint],
            },
            Op::Read {
                remote: at,
                local: &mut sw,
            },
        ])
        .await?;
        *state = u64::from_le_bytes(sw);
        let Ok(len) = object_len_from_header(&buf[..hint]) else {
            return Ok(Obj::Invalid);
        };
        if len > room {
            return Ok(Obj::Invalid);
        }
        if len > hint {
            bump(&self.long_reads);
            if len > buf.len() {
                large = [0u8; OBJECT_MAX];
                buf = &mut large;
            }
            qp.post(&mut [
                Op::Read {
                    remote: addr,
                    local: &mut buf[..len],
                },
                Op::Read {
                    remote: at,
                    local: &mut sw,
                },
            ])
            .await?;
            *state = u64::from_le_bytes(sw);
        }
        self.ep.charge(Work::Crc32c(len));
        match decode_object_with(&buf[..len], crate::erda::object_checksum) {
            Ok(o) if o.key == key => {
                if o.delete {
                    return Ok(Obj::Deleted);
                }
                let v = o.value;
                if v.len() > out.len() {
                    return Err(ErdaError::BufferTooSmall {
                        len: out.len(),
                        need: v.len(),
                    });
                }
                out[..v.len()].copy_from_slice(v);
                Ok(Obj::Value(v.len()))
            }
            _ => Ok(Obj::Invalid),
        }
    }

    /// The first bucket of the neighborhood image `buf` (read at `addr`) that holds `key`
    /// with a non-empty metadata word.
    pub(super) fn holder(
        &self,
        buf: &[u8],
        addr: GlobalAddr,
        key: &[u8],
    ) -> Result<Option<Bucket>, ErdaError> {
        // The neighbourhood lookup: hash the key to its home bucket, then scan.
        self.ep.charge(Work::Probe(1));
        for j in 0..self.sb.neighborhood as usize {
            self.ep.charge(Work::Scan(1));
            let raw = &buf[j * BUCKET_LEN..(j + 1) * BUCKET_LEN];
            // A zero control word is an unused bucket (or one being filled or cleared, which
            // a validated image never shows): skip it whatever its metadata word says.
            if raw[8..16] == [0u8; 8] {
                continue;
            }
            let b = Bucket::decode(raw).map_err(|why| ErdaError::Corrupt {
                addr: addr.add((j * BUCKET_LEN) as u64),
                why,
            })?;
            if b.holds(key) && !b.meta().is_empty() {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    /// What the objects named by `b`'s metadata word say about `key`. `Unsure` when neither
    /// object is a whole object of `key` and the word names an older one (readers retry), or
    /// when the newest is not whole and there is no older one (absent if the word is known
    /// to be the key's; see [`Self::lookup`]).
    pub(super) async fn answer(
        &self,
        b: &Bucket,
        key: &[u8],
        out: &mut [u8],
        state: &mut u64,
    ) -> Result<Answer, ErdaError> {
        let meta = b.meta();
        match self
            .read_object(b.head(), meta.new_off(), key, out, state)
            .await?
        {
            Obj::Value(n) => return Ok(Answer::Found(Some(n))),
            Obj::Deleted => return Ok(Answer::Found(None)),
            Obj::Invalid => {}
        }
        // The newest object is being written, torn, or abandoned: the previous one.
        if meta.old_off() == 0 {
            return Ok(Answer::NoOlder);
        }
        let found = match self
            .read_object(b.head(), meta.old_off(), key, out, state)
            .await?
        {
            Obj::Value(n) => Some(n),
            Obj::Deleted => None,
            Obj::Invalid => return Ok(Answer::Unsure),
        };
        bump(&self.fallbacks);
        Ok(Answer::Found(found))
    }

    /// The state word of `head` in an image of the state words.
    pub(super) fn state_in(
        &self,
        states: &[u8; 8 * MAX_HEADS],
        head: u8,
    ) -> Result<HeadState, ErdaError> {
        let i = head as usize * 8;
        let w = states
            .get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0);
        HeadState::decode(w).map_err(|why| ErdaError::Corrupt {
            addr: self.addr(self.sb.head_state_off(head)),
            why,
        })
    }

    /// A get, started over (bounded by the lease's deadline and attempts, from the first
    /// failed attempt) while a cleaning
    /// starts or ends under it: see [`Self::lookup_once`].
    pub(super) async fn lookup(
        &self,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<Option<usize>, ErdaError> {
        check_key(key).map_err(|_| ErdaError::BadKey { len: key.len() })?;
        // The clock is first read when a get has to start over (most never do): the bound
        // runs from the first failed attempt.
        let mut w: Option<Waiter> = None;
        loop {
            if let Some(r) = self.lookup_once(key, out).await? {
                return Ok(r);
            }
            bump(&self.epoch_retries);
            let now = self.ep.now_ns();
            let w = w.get_or_insert_with(|| Waiter::new(self.cfg.lease, now));
            match w.observe(0, now) {
                Verdict::Wait(ns) => self.ep.pause(ns).await,
                _ => {
                    return Err(ErdaError::Retries {
                        what: "the key's log head kept changing its epoch under the get",
                    });
                }
            }
        }
    }

    /// A read through the server while the key's head is being cleaned (the paper's SEND
    /// path): the server names the newest whole object and the head's epoch; the object is
    /// READ with the state word, and taken if the epoch is still that one. `None`: again.
    pub(super) async fn read_via_server(
        &self,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<Option<Option<usize>>, ErdaError> {
        bump(&self.server_reads);
        let (reply, _) = self.request(ReqOp::Get, key, 0, 0).await?;
        match reply.status {
            Status::Absent => Ok(Some(None)),
            Status::Located => {
                let units = (reply.arg & 0x7FFF_FFFF) as u32;
                let epoch = (reply.arg >> 32) as u32;
                let mut sw = 0u64;
                let got = self
                    .read_object(reply.head, units, key, out, &mut sw)
                    .await?;
                let same = HeadState::decode(sw).is_ok_and(|s| s.epoch == epoch);
                Ok(match got {
                    Obj::Value(n) if same => Some(Some(n)),
                    Obj::Deleted if same => Some(None),
                    _ => None,
                })
            }
            Status::Busy => Ok(None),
            status => Err(ErdaError::Refused { status }),
        }
    }

    /// A get. The fast path is the paper's: one READ of the neighborhood, one READ of the
    /// newest object (and of the previous one if the newest is not whole). Its answer stands
    /// when an object the metadata word names verifies as `key`'s: a metadata word naming an
    /// object of `key` is only ever held by `key`'s bucket (and, during a move, by its copy,
    /// with the same value), so it was `key`'s word when read, however the READ's words were
    /// ordered. Anything else (no holder, no whole object of the key) proves nothing under
    /// an unordered READ, so the get re-reads the neighborhood *validated* by the stripe
    /// version words (`stripe.rs`) and answers from that image.
    ///
    /// Epochs: the fast path's doorbell first READs the heads' state words, and every object
    /// READ is followed by a READ of its head's word; an answer taken from an object stands
    /// only if that head's epoch did not change in between (else `None`: start over). While
    /// the head is being cleaned, and `send_reads_while_cleaning`, the get goes through the
    /// server instead (the paper's SEND path).
    pub(super) async fn lookup_once(
        &self,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<Option<Option<usize>>, ErdaError> {
        let home = self.sb.home(key);
        let addr = self.addr(self.sb.bucket_off(home));
        let n = self.sb.neighborhood as usize * BUCKET_LEN;
        // Zeroed per get: [`SMALL_NEIGHBORHOOD`] buckets unless the neighborhood is larger.
        let mut small = [0u8; SMALL_NEIGHBORHOOD * BUCKET_LEN];
        let mut large: [u8; MAX_NEIGHBORHOOD * BUCKET_LEN];
        let buf: &mut [u8] = if n <= small.len() {
            &mut small
        } else {
            large = [0u8; MAX_NEIGHBORHOOD * BUCKET_LEN];
            &mut large
        };
        let qp = self.qp()?;
        let mut last = addr;
        // The fast path, once, after the heads' state words.
        let mut states = [0u8; 8 * MAX_HEADS];
        let heads = (self.sb.heads as usize).min(MAX_HEADS) * 8;
        qp.post(&mut [
            Op::Read {
                remote: self.addr(self.sb.head_state_off(0)),
                local: &mut states[..heads],
            },
            Op::Read {
                remote: addr,
                local: &mut buf[..n],
            },
        ])
        .await?;
        let mut after = 0u64;
        if let Some(b) = self.holder(&buf[..n], addr, key)? {
            let before = self.state_in(&states, b.head())?;
            if before.cleaning() && self.cfg.send_reads_while_cleaning {
                return self.read_via_server(key, out).await;
            }
            let same = |after: u64| HeadState::decode(after).is_ok_and(|s| s.epoch == before.epoch);
            match self.answer(&b, key, out, &mut after).await? {
                Answer::Found(r) if same(after) => return Ok(Some(r)),
                Answer::Found(_) => return Ok(None),
                // Only a validated image proves the key absent or its word its own.
                Answer::NoOlder if self.cfg.assume_ascending_reads => {
                    return Ok(same(after).then_some(None));
                }
                Answer::NoOlder | Answer::Unsure => {}
            }
        } else if self.cfg.assume_ascending_reads {
            return Ok(Some(None));
        }
        let stripes = self.addr(self.sb.stripe_word_off(self.sb.stripe_of(home)));
        let start = self.ep.now_ns();
        let mut w = Waiter::new(self.cfg.lease, start);
        let mut attempt = 0u32;
        loop {
            if attempt > 0 {
                bump(&self.rereads);
                // Back off on the fabric clock, up to the lease's deadline (word 0: nobody
                // is fenced for a read).
                match w.observe(0, self.ep.now_ns()) {
                    Verdict::Wait(ns) => self.ep.pause(ns).await,
                    _ => break,
                }
            }
            attempt += 1;
            bump(&self.validated);
            let (mut before, mut after) = ([0u8; 16], [0u8; 16]);
            qp.post(&mut [
                Op::Read {
                    remote: stripes,
                    local: &mut before,
                },
                Op::Read {
                    remote: addr,
                    local: &mut buf[..n],
                },
                Op::Read {
                    remote: stripes,
                    local: &mut after,
                },
            ])
            .await?;
            let odd = before.chunks(8).any(|w| w[0] & 1 == 1);
            if before != after || odd {
                // A fill or a move overlapped the READ.
                bump(&self.unstable);
                continue;
            }
            let Some(b) = self.holder(&buf[..n], addr, key)? else {
                return Ok(Some(None));
            };
            let was = self.state_in(&states, b.head())?;
            if was.cleaning() && self.cfg.send_reads_while_cleaning {
                return self.read_via_server(key, out).await;
            }
            let mut sw = 0u64;
            let answer = self.answer(&b, key, out, &mut sw).await?;
            if !HeadState::decode(sw).is_ok_and(|s| s.epoch == was.epoch) {
                // A cleaning started or ended since the state words were read.
                return Ok(None);
            }
            match answer {
                Answer::Found(r) => return Ok(Some(r)),
                // The word is the key's: its first object is not there yet.
                Answer::NoOlder => return Ok(Some(None)),
                Answer::Unsure => {}
            }
            last = self.object_addr(b.head(), b.meta().new_off())?;
        }
        Err(ErdaError::Incomplete {
            addr: last,
            attempts: attempt,
            waited_ns: self.ep.now_ns().saturating_sub(start),
        })
    }
}

//! Write combining: writers that find a write of their key in flight leave their value in
//! the entry, and the leader writes the latest one once for all of them (see the parent
//! module's doc).
use super::{At, Bytes, Claim, Counted, Entry, Flavor, Host, Lead, Stuck, Table};

impl<F: Flavor> Entry<F> {
    /// Records what the write of sequence number `seq` returned (a later one already
    /// recorded stays), and wakes the waiters (the ones it covered return). Only once every
    /// writer the previous write covered has picked up its result (`unserved` is 0):
    /// `false` and the caller waits (or, with `force`, past the deadline, publishes all the
    /// same: those writers are dead).
    pub(super) fn apply(&mut self, seq: u64, r: Result<bool, F::Error>, force: bool) -> bool {
        if seq <= self.applied_seq {
            return true;
        }
        if self.unserved > 0 && !force {
            return false;
        }
        self.applied_seq = seq;
        self.applied = r;
        self.unserved = self.inflight;
        self.inflight = 0;
        self.parked.wake_all();
        true
    }

    /// A leader takes the pending value of sequence number `seq`; `me`: the taker is a
    /// writer that deposited it (it returns its own write's result, covering nobody).
    pub(super) fn take(&mut self, seq: u64, me: bool) {
        self.inflight += self.open.saturating_sub(u32::from(me));
        self.open = 0;
        self.taken_seq = seq;
    }

    /// Writer `seq` leaves without picking up a result (its future dropped, or it writes its
    /// value itself).
    pub(super) fn leave(&mut self, seq: u64) {
        let n = if seq <= self.applied_seq {
            &mut self.unserved
        } else if seq <= self.taken_seq {
            &mut self.inflight
        } else {
            &mut self.open
        };
        *n = n.saturating_sub(1);
        // A leader may be waiting for the last unserved writer.
        self.parked.wake_all();
    }
}

impl<F: Flavor> Table<F> {
    /// A write of `value` (of `kind`) to `key` with combining; returns what `write` (the
    /// index's own write, of a kind and a value) returned for it. The caller has checked
    /// that `value` fits the table's values.
    pub(crate) async fn write(
        &self,
        host: &impl Host,
        key: &[u8],
        kind: F::Kind,
        value: &[u8],
        write: impl AsyncFn(F::Kind, &[u8]) -> Result<bool, F::Error>,
    ) -> Result<bool, F::Error> {
        // `lead`: Some(None) = lead with my own value; Some(Some(seq)) = lead with my
        // deposited value `seq`; None = wait.
        let mut lead: Option<Option<u64>> = None;
        let mut my_seq = None;
        let mut my_gen = 0;
        let claimed = self.claim(key, |e| {
            if !e.writing {
                e.writing = true;
                e.write_gen += 1;
                my_gen = e.write_gen;
                lead = Some(None);
            } else if e.pending.is_none() || e.pending == Some(kind) {
                e.pending = Some(kind);
                e.pending_val.set(value);
                e.pending_seq += 1;
                e.open += 1;
                my_seq = Some(e.pending_seq);
            }
        });
        let Some((at, ())) = claimed.await else {
            return write(kind, value).await;
        };
        let mut claim = Claim {
            table: self,
            at,
            lead: lead.map(|_| Lead::Write(my_gen)),
            seq: my_seq,
            armed: true,
        };
        let lease = host.lease();
        let mut stuck = Stuck::new();
        loop {
            if let Some(own_seq) = lead {
                let r = write(kind, value).await;
                if let Some(s) = own_seq {
                    self.publish(at, host, s, r).await;
                }
                // Serve the latest pending value once (if still the leader).
                let mut buf = F::scratch();
                let buf = buf.as_mut();
                let taken = self
                    .with(at, |e| {
                        if e.write_gen != my_gen {
                            return None;
                        }
                        let seq = e.pending_seq;
                        e.pending.take().map(|k| {
                            let n = e.pending_val.get().len();
                            buf[..n].copy_from_slice(e.pending_val.get());
                            e.take(seq, false);
                            (k, n, seq)
                        })
                    })
                    .await;
                if let Some((k, n, seq)) = taken {
                    let r2 = write(k, &buf[..n]).await;
                    self.publish(at, host, seq, r2).await;
                }
                self.with(at, |e| {
                    // Replaced (stuck for a lease): the replacer released our count.
                    if e.write_gen == my_gen {
                        e.writing = false;
                        e.users -= 1;
                        // One of the waiters leads next.
                        e.parked.wake_all();
                    }
                })
                .await;
                claim.armed = false;
                return r;
            }
            let served = self
                .park(at, host, |e, now| {
                    if let Some(s) = my_seq
                        && e.applied_seq >= s
                    {
                        // The result of the first write at or after ours: no later one is
                        // published before we took it.
                        e.users -= 1;
                        e.unserved = e.unserved.saturating_sub(1);
                        if e.unserved == 0 {
                            e.parked.wake_all();
                        }
                        return Ok(Some(e.applied));
                    }
                    // A leader whose future was dropped is replaced after a lease. A live
                    // one may hold a waiter's value it has yet to write: replaced, it would
                    // write that value late, over writes that returned since (seen under
                    // CPU contention: a leader descheduled for milliseconds). So a live
                    // leader is waited for, up to the deadline that bounds every wait.
                    let bound = if e.write_abandoned == e.write_gen {
                        lease.lease_ns
                    } else {
                        lease.deadline_ns
                    };
                    let take_over = e.writing && stuck.expired(e.write_gen, now, bound, &lease);
                    if !e.writing || take_over {
                        match my_seq {
                            Some(s) if e.pending_seq == s && e.pending.is_some() => {
                                e.pending = None;
                                e.take(s, true);
                                lead = Some(Some(s));
                            }
                            // My value was superseded (its successor's writer will return
                            // for me), or taken by a leader that is stuck: write it myself.
                            Some(s) if take_over => {
                                e.leave(s);
                                lead = Some(None);
                            }
                            Some(_) => {}
                            None => lead = Some(None),
                        }
                        if take_over {
                            // The stuck leader releases nothing if it comes back.
                            e.users -= 1;
                            host.count(Counted::TakenOver);
                        }
                        if lead.is_some() {
                            e.writing = true;
                            e.write_gen += 1;
                            my_gen = e.write_gen;
                            return Ok(None);
                        }
                    }
                    // Parked until a write is applied or the leader ends, or its lease
                    // check (with nobody writing, the lease: the writer that took the
                    // latest value leads, and ends the wait).
                    Err(if e.writing {
                        stuck.left(now, bound)
                    } else {
                        lease.lease_ns.max(1)
                    })
                })
                .await;
            if let Some(r) = served {
                claim.armed = false;
                host.count(Counted::Combined);
                return r;
            }
            claim.lead = lead.map(|_| Lead::Write(my_gen));
            if lead.is_some() {
                // A leader now: it returns its own write's result, and picks up none.
                claim.seq = None;
            }
        }
    }

    /// Publishes what the write of sequence number `seq` returned, once the writers the
    /// previous write covered have picked up its result ([`Entry::apply`]); a writer that
    /// has not within the deadline is dead, and is published over.
    async fn publish(&self, at: At, host: &impl Host, seq: u64, r: Result<bool, F::Error>) {
        let lease = host.lease();
        // The writers still to pick up stand where a stuck leader does: dead once they have
        // held this publish for the deadline (or `max_attempts` polls without a clock).
        let mut stuck = Stuck::new();
        self.park(at, host, |e, now| {
            let dead = stuck.expired(seq, now, lease.deadline_ns, &lease);
            if e.apply(seq, r, dead) {
                Ok(())
            } else {
                Err(lease.lease_ns.max(1))
            }
        })
        .await
    }
}

//! Write combining: writers that find a write of their key in flight leave their value in
//! the entry, and the leader writes the latest one once for all of them (see the parent
//! module's doc).
use super::{At, Bytes, Claim, Counted, Entry, Flavor, Host, Lead, Stuck, Table};

/// A write leader's pick-up of the latest value queued for its key, as the SMART authors'
/// leader takes the combining buffer's latest value once it holds the remote lock
/// (dmemsys/SMART `get_combining_value`), with [`Host::combine_latest`] on: the index's
/// write calls [`Self::latest`] once it holds the lock and is sure to leave the key present
/// (past its checks, with nothing left that restarts the attempt), and writes that value in
/// place of the leader's own, once. The writers it covers (every one queued before the
/// pick-up) linearize at that write, after the leader's own (each overwriting the previous:
/// the write takes effect after each of them arrived and before each returns); a writer
/// that arrives after the pick-up has a later sequence number and is not acknowledged by it.
/// Off (or no entry), [`Self::latest`] picks nothing.
pub(crate) struct Pick<'t, F: Flavor> {
    /// The leader's entry and generation (`None` once picked, or off).
    pub(super) src: Option<(&'t Table<F>, At, u64)>,
    kind: F::Kind,
    /// The sequence number picked up.
    taken: Option<u64>,
}

impl<'t, F: Flavor> Pick<'t, F> {
    /// A pick-up that picks nothing (a write outside the table, or the switch off).
    pub(crate) fn none(kind: F::Kind) -> Pick<'t, F> {
        Pick {
            src: None,
            kind,
            taken: None,
        }
    }

    /// Takes the latest value queued for the leader's key, if one of the leader's kind is
    /// and it still leads: copies it into `buf` and returns its length. At most once.
    pub(crate) async fn latest(&mut self, buf: &mut [u8]) -> Option<usize> {
        let (table, at, lead_gen) = self.src.take()?;
        let kind = self.kind;
        let (seq, n) = table
            .with(at, |e| {
                if e.write_gen != lead_gen || e.pending != Some(kind) {
                    return None;
                }
                let v = e.pending_val.get();
                let n = v.len();
                buf.get_mut(..n)?.copy_from_slice(v);
                e.pending = None;
                let seq = e.pending_seq;
                e.take(seq, false);
                Some((seq, n))
            })
            .await?;
        self.taken = Some(seq);
        Some(n)
    }
}

/// Records of results kept per entry. A leader publishes without waiting while one of them
/// is free, that is, unless its writers are still picking up the results of this many earlier
/// groups (threads descheduled, or not polled yet under load).
pub(super) const RESULTS: usize = 4;

/// What the write of sequence number `seq` returned, for the `left` writers it covered that
/// have yet to pick it up (the record is free at 0).
#[derive(Clone, Copy)]
pub(super) struct Applied<E> {
    seq: u64,
    r: Result<bool, E>,
    pub(super) left: u32,
}

impl<E> Applied<E> {
    /// A free record, of no write (sequence numbers start at 1).
    pub(super) const EMPTY: Applied<E> = Applied {
        seq: 0,
        r: Ok(false),
        left: 0,
    };
}

impl<F: Flavor> Entry<F> {
    /// Records what the write of sequence number `seq` returned (a later one already
    /// recorded stays), and wakes the waiters (the ones it covered return). The writers it
    /// covered find it in a free record of [`Self::results`]; with none free, `false` and the
    /// caller waits (or, with `force`, past the deadline, publishes over the oldest record:
    /// its writers are dead).
    pub(super) fn apply(&mut self, seq: u64, r: Result<bool, F::Error>, force: bool) -> bool {
        if seq <= self.applied_seq {
            return true;
        }
        if self.inflight > 0 {
            let free = self.results.iter().position(|a| a.left == 0);
            let slot = match free {
                Some(i) => i,
                None if force => {
                    let oldest = self.results.iter().enumerate().min_by_key(|(_, a)| a.seq);
                    oldest.map_or(0, |(i, _)| i)
                }
                None => {
                    self.publisher_waits = true;
                    return false;
                }
            };
            self.results[slot] = Applied {
                seq,
                r,
                left: self.inflight,
            };
            self.inflight = 0;
        }
        self.applied_seq = seq;
        self.applied = r;
        self.parked.wake_all();
        true
    }

    /// The record a writer of sequence number `seq` (at most `applied_seq`) picks up from:
    /// the first write at or after its own, the one that covered it. Records are made in
    /// the order of sequence numbers, and one is reused only once its writers all picked it
    /// up (or past the deadline: they are dead), so it is still there.
    fn record(&mut self, seq: u64) -> Option<&mut Applied<F::Error>> {
        self.results
            .iter_mut()
            .filter(|a| a.seq >= seq)
            .min_by_key(|a| a.seq)
    }

    /// Writer `seq` (at most `applied_seq`) picks up its write's result, and leaves.
    pub(super) fn pick_up(&mut self, seq: u64) -> Result<bool, F::Error> {
        let Some(a) = self.record(seq) else {
            return self.applied;
        };
        let r = a.r;
        self.picked(seq);
        r
    }

    /// Writer `seq` (at most `applied_seq`) no longer holds its record; the last one out of
    /// it wakes a leader waiting for a free record, if one is (and nobody else: readers and
    /// writers of the entry wait on the same slots, and a wake-up costs each a poll).
    fn picked(&mut self, seq: u64) {
        let Some(a) = self.record(seq) else {
            return;
        };
        a.left = a.left.saturating_sub(1);
        if a.left == 0 && self.publisher_waits {
            self.publisher_waits = false;
            self.parked.wake_all();
        }
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
        if seq <= self.applied_seq {
            self.picked(seq);
        } else if seq <= self.taken_seq {
            self.inflight = self.inflight.saturating_sub(1);
        } else {
            self.open = self.open.saturating_sub(1);
        }
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
        write: impl AsyncFn(F::Kind, &[u8], &mut Pick<'_, F>) -> Result<bool, F::Error>,
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
            return write(kind, value, &mut Pick::none(kind)).await;
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
                let latest = host.combine_latest();
                let mut pick = Pick::none(kind);
                if latest {
                    pick.src = Some((self, at, my_gen));
                }
                let r = write(kind, value, &mut pick).await;
                match (pick.taken, own_seq) {
                    // The picked writers (and those my own deposited value covered) return
                    // with my write: linearized after mine, they find the key present.
                    (Some(seq), _) => self.publish(at, host, seq, r.map(|_| true)).await,
                    (None, Some(s)) => self.publish(at, host, s, r).await,
                    (None, None) => {}
                }
                // Without the pick-up: serve the latest pending value once (if still the
                // leader). With it, values queued since are left to the next leader (one
                // of their writers, once this one ends).
                let mut buf = F::scratch();
                let buf = buf.as_mut();
                let taken = self
                    .with(at, |e| {
                        if latest || e.write_gen != my_gen {
                            return None;
                        }
                        let seq = e.pending_seq;
                        e.pending.take().map(|k| {
                            let n = e.pending_val.get().len();
                            buf[..n].copy_from_slice(e.pending_val.get());
                            let covered = e.open;
                            e.take(seq, false);
                            (k, n, seq, covered)
                        })
                    })
                    .await;
                if let Some((k, n, seq, covered)) = taken {
                    let t0 = host.now_ns();
                    let r2 = write(k, &buf[..n], &mut Pick::none(k)).await;
                    let ns = host.now_ns().saturating_sub(t0);
                    host.count(Counted::SecondWrite { covered, ns });
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
                        // The result of the first write at or after ours, kept until we
                        // took it (later ones go to other records).
                        e.users -= 1;
                        return Ok(Some(e.pick_up(s)));
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
                            // for me), or taken by a leader that is stuck, or by one that
                            // was replaced and never applied it (nobody writes: the write
                            // leaders since have ended; without this, a waiter whose value
                            // a dropped leader had taken, not the one that replaced it,
                            // waited for a later write of the key, maybe forever): write it
                            // myself.
                            Some(s) if take_over || (s <= e.taken_seq && s > e.applied_seq) => {
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
                        stuck.left(bound)
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

    /// Publishes what the write of sequence number `seq` returned into a free record of the
    /// entry's results ([`Entry::apply`]): at once unless the writers of every record have
    /// yet to pick theirs up; then it waits for one, and a writer that has not picked up
    /// within the deadline is dead, and is published over.
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

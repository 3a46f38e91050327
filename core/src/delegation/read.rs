//! Read delegation: a reader that finds a read of its key in flight waits for the next one,
//! issued by one of the waiting readers (see the parent module's doc).
use super::{Bytes, Claim, Counted, Entry, Flavor, Host, Lead, Stuck, Table};

impl<F: Flavor> Entry<F> {
    /// A reader joins: it leads a new read (`true`) if none is in flight, else waits for the
    /// next one; with the generation it leads or waits for.
    pub(super) fn join_read(&mut self) -> (bool, u64) {
        if self.reading {
            (false, self.read_gen + 1)
        } else {
            self.reading = true;
            self.read_gen += 1;
            (true, self.read_gen)
        }
    }
}

impl<F: Flavor> Table<F> {
    /// A read of `key` into `out` with delegation: `read` is the index's own read (into a
    /// buffer of at most [`Host::value_cap`] bytes, or `out` itself when `key`'s bucket is
    /// full).
    pub(crate) async fn get(
        &self,
        host: &impl Host,
        key: &[u8],
        out: &mut [u8],
        mut read: impl AsyncFnMut(&mut [u8]) -> Result<Option<usize>, F::Error>,
    ) -> Result<Option<usize>, F::Error> {
        let claimed = self.claim(key, Entry::join_read);
        let Some((at, (mut leader, mut my_gen))) = claimed.await else {
            return read(out).await;
        };
        let mut claim = Claim {
            table: self,
            at,
            lead: leader.then_some(Lead::Read(my_gen)),
            seq: None,
            armed: true,
        };
        let lease = host.lease();
        let mut stuck = Stuck::new();
        loop {
            if leader {
                // The value lands in `out` (no buffer of the largest value to clear per
                // read), limited to the tree's values so that the table holds it.
                let cap = host.value_cap();
                let room = out.len().min(cap);
                let r = read(&mut out[..room]).await;
                let publish = match &r {
                    Ok(_) => true,
                    // Too small for our buffer, not for the waiters': publish nothing, and
                    // hand the read on to one of them.
                    Err(e) if room < cap && F::is_too_small(e) => false,
                    Err(_) => F::SHARES_ERRORS,
                };
                self.with(at, |e| {
                    // Replaced as the leader (stuck for a lease): publish nothing, and
                    // leave the user count alone (the replacer released ours).
                    if e.reading && e.read_gen == my_gen {
                        if publish {
                            // With no other user, nobody can take the value (the entry is
                            // free once this leader leaves): not copied.
                            if e.users > 1 {
                                e.value.set(match r {
                                    Ok(Some(n)) => &out[..n],
                                    _ => &[],
                                });
                            }
                            e.result = r;
                            e.done_gen = my_gen;
                        }
                        e.reading = false;
                        e.users -= 1;
                        // Served, or one of them leads next.
                        e.parked.wake_all();
                    }
                })
                .await;
                claim.armed = false;
                return r;
            }
            let served = self
                .park(at, host, |e, now| {
                    if e.done_gen >= my_gen {
                        e.users -= 1;
                        return Ok(Some(copy_out::<F>(e.result, e.value.get(), out)));
                    }
                    if !e.reading {
                        // A fresh generation, opened after every waiter it will serve
                        // arrived.
                        e.reading = true;
                        e.read_gen += 1;
                        my_gen = e.read_gen;
                        leader = true;
                        return Ok(None);
                    }
                    if stuck.expired(e.read_gen, now, lease.lease_ns, &lease) {
                        // The leader made no progress for a lease: lead a new read, and
                        // release its user count (it releases nothing if it comes back).
                        e.users -= 1;
                        e.read_gen = e.read_gen.max(my_gen) + 1;
                        my_gen = e.read_gen;
                        leader = true;
                        host.count(Counted::TakenOver);
                        return Ok(None);
                    }
                    // Parked until the leader publishes or ends, or its lease check.
                    Err(stuck.left(lease.lease_ns))
                })
                .await;
            if let Some(r) = served {
                claim.armed = false;
                host.count(Counted::Delegated);
                return r;
            }
            claim.lead = leader.then_some(Lead::Read(my_gen));
        }
    }
}

/// A published read result, copied into a waiter's `out`.
fn copy_out<F: Flavor>(
    r: Result<Option<usize>, F::Error>,
    val: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, F::Error> {
    match r {
        Ok(Some(n)) => {
            let got = out.len();
            out.get_mut(..n)
                .ok_or(F::too_small(n, got))?
                .copy_from_slice(&val[..n]);
            Ok(Some(n))
        }
        other => other,
    }
}

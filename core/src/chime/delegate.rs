//! remora's own idea on CHIME (not the paper's; off unless `ChimeConfig::delegation`): read
//! delegation per compute node. Under a skewed workload many threads of one compute node
//! look up the same hot key at once, and CHIME sends each one's READs (the entry, or the
//! neighbourhood) to the memory node, whose link is then the bottleneck. Here the threads of
//! a node share a small table of keys being read: the first reader of a key leads (it runs
//! the whole lookup), and readers that arrive while that lookup is in flight wait for the
//! *next* one, which one of them leads once the current one completes, and take its result.
//! So at most two lookups per key are in flight per node, whatever the skew. SMART
//! (`smart/local.rs`) does this for its ART leaves; this is its mechanism applied to CHIME's
//! lookups, written for CHIME's fixed 8-byte keys and values (no allocation).
//!
//! Linearizable: a waiter never takes the result of the lookup in flight when it arrived
//! (it may predate the waiter's call); it takes that of a lookup of a later generation,
//! which starts only after the waiter arrived (a generation is opened under the bucket lock
//! after the previous one closed) and ends before the waiter returns, so its linearization
//! point lies within the waiter's interval. A leader whose lookup fails publishes nothing:
//! a waiter then leads the next lookup itself.
//!
//! A leader that makes no progress for a lease (`ShermanConfig::lease`, on the waiter's own
//! clock, or its attempt cap on fabrics without one) is replaced by a waiter, which opens a
//! new generation and releases the old leader's user count; the old leader, should it come
//! back, publishes and releases nothing. A reader whose future is dropped halfway releases
//! its count (and its lead) at once through its claim's drop. Buckets are try-locks held
//! only between awaits, never across one (SMART's `TryLock`).
use super::write::Change;
use super::{Chime, ChimeError};
use crate::block_on::yield_now;
use crate::fabric::Endpoint;
use crate::lease::LeaseConfig;
use crate::sherman::ShermanError;
use crate::smart::shared::{TryLock, TryLockGuard};
use remora_layouts::chime::MAX_VALUE;
use std_alloc::vec::Vec;

/// Entries per bucket: a key's entry is in its home bucket or nowhere.
const PROBE: usize = 8;

/// Entries of a node's table: a few per client thread of the paper's 64 per node. A key
/// whose bucket is full of other keys being read goes to the memory node directly.
pub const DELEGATION_ENTRIES: usize = 256;

#[derive(Clone, Copy)]
struct Slot {
    users: u32,
    key: u64,
    /// A lookup of generation `read_gen` is in flight.
    reading: bool,
    read_gen: u64,
    /// The latest generation that published its result.
    done_gen: u64,
    /// The published result: the value's length (None: the key is absent) and bytes.
    found: Option<usize>,
    value: [u8; MAX_VALUE],
    // Combining.
    /// A write leader is at work (generation `write_gen`; a replacer bumps it).
    writing: bool,
    write_gen: u64,
    /// The latest value left by a writer that found a write in flight, its kind and length.
    pending: Option<(Change, usize)>,
    pending_val: [u8; MAX_VALUE],
    pending_seq: u64,
    /// The latest deposited value written, and what its write returned.
    applied_seq: u64,
    applied: Result<bool, ChimeError>,
}

impl Slot {
    /// Records what the write of deposit `seq` returned (a later one recorded stays).
    fn apply(&mut self, seq: u64, r: Result<bool, ChimeError>) {
        if seq > self.applied_seq {
            self.applied_seq = seq;
            self.applied = r;
        }
    }
}

const FREE: Slot = Slot {
    users: 0,
    key: 0,
    reading: false,
    read_gen: 0,
    done_gen: 0,
    found: None,
    value: [0; MAX_VALUE],
    writing: false,
    write_gen: 0,
    pending: None,
    pending_val: [0; MAX_VALUE],
    pending_seq: 0,
    applied_seq: 0,
    applied: Ok(false),
};

type Bucket = [Slot; PROBE];

/// One compute node's table of keys being read, shared by its threads.
pub(crate) struct Delegation {
    buckets: Vec<TryLock<Bucket>>,
}

/// Where a claimed slot is: bucket and position.
#[derive(Clone, Copy)]
struct At(usize, usize);

fn spread(key: u64) -> u64 {
    key.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(31)
}

impl Delegation {
    /// A table of `entries` (rounded up to whole buckets of a power of two; none at 0).
    pub(crate) fn new(entries: usize) -> Delegation {
        let n = if entries == 0 {
            0
        } else {
            entries.div_ceil(PROBE).next_power_of_two()
        };
        Delegation {
            buckets: (0..n).map(|_| TryLock::new([FREE; PROBE])).collect(),
        }
    }

    /// Bytes the table takes.
    pub(crate) fn bytes(&self) -> usize {
        self.buckets.len() * core::mem::size_of::<TryLock<Bucket>>()
    }

    async fn lock(&self, b: usize) -> TryLockGuard<'_, Bucket> {
        loop {
            if let Some(g) = self.buckets[b].try_lock() {
                return g;
            }
            yield_now().await;
        }
    }

    /// Joins `key`'s slot, or takes a free one, and runs `f` on it under the same hold of
    /// its bucket's lock; `None` if the bucket has no room (then the caller goes to the
    /// memory node directly).
    async fn claim<R>(&self, key: u64, f: impl FnOnce(&mut Slot) -> R) -> Option<(At, R)> {
        if self.buckets.is_empty() {
            return None;
        }
        let b = (spread(key) as usize) & (self.buckets.len() - 1);
        let mut g = self.lock(b).await;
        let mut free = None;
        for (i, s) in g.iter_mut().enumerate() {
            if s.users > 0 && s.key == key {
                s.users += 1;
                return Some((At(b, i), f(s)));
            }
            if s.users == 0 && free.is_none() {
                free = Some(i);
            }
        }
        let i = free?;
        g[i] = Slot {
            users: 1,
            key,
            ..FREE
        };
        Some((At(b, i), f(&mut g[i])))
    }

    /// [`Self::claim`] for a reader: whether it leads, and the generation it leads or waits
    /// for.
    async fn claim_read(&self, key: u64) -> Option<(At, bool, u64)> {
        let (at, (lead, gen_)) = self
            .claim(key, |s| {
                if s.reading {
                    (false, s.read_gen + 1)
                } else {
                    s.reading = true;
                    s.read_gen += 1;
                    (true, s.read_gen)
                }
            })
            .await?;
        Some((at, lead, gen_))
    }

    async fn with<R>(&self, at: At, f: impl FnOnce(&mut Slot) -> R) -> R {
        let mut g = self.lock(at.0).await;
        f(&mut g[at.1])
    }

    /// Users counted on `key`'s slot (tests).
    #[cfg(test)]
    fn users(&self, key: u64) -> u32 {
        let b = (spread(key) as usize) & (self.buckets.len() - 1);
        let g = self.buckets[b].try_lock().expect("bucket free between ops");
        g.iter()
            .filter(|s| s.key == key && s.users > 0)
            .map(|s| s.users)
            .sum()
    }
}

/// What a claim leads, if anything: the read of this generation, or a write.
#[derive(Clone, Copy)]
enum Lead {
    Read(u64),
    Write,
}

/// A user's claim on a slot while its operation runs. Dropped armed (its future dropped
/// halfway, its thread unwinding), it releases the user's count, and a read leader's lead
/// if it still leads, so a waiter leads at once instead of after a lease. A write leader's
/// lead and count are left to the waiter that replaces it after a lease: it may have taken
/// a waiter's value, which only a replacer rewrites.
struct Claim<'t> {
    table: &'t Delegation,
    at: At,
    lead: Option<Lead>,
    armed: bool,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Bucket locks are held only between awaits: the wait is short.
        let mut g = loop {
            if let Some(g) = self.table.buckets[self.at.0].try_lock() {
                break g;
            }
            core::hint::spin_loop();
        };
        let s = &mut g[self.at.1];
        match self.lead {
            None => s.users -= 1,
            Some(Lead::Read(gen_)) if s.reading && s.read_gen == gen_ => {
                s.reading = false;
                s.users -= 1;
            }
            // Replaced as the read leader (the replacer released the count), or a write
            // leader (its replacer will).
            Some(_) => {}
        }
    }
}

/// How long a waiter has seen one generation in flight, on its own clock and in polls.
struct Stuck {
    gen_: u64,
    since: u64,
    polls: u32,
}

impl Stuck {
    fn expired(&mut self, gen_: u64, now: u64, lease: &LeaseConfig) -> bool {
        if gen_ != self.gen_ {
            *self = Stuck {
                gen_,
                since: now,
                polls: 0,
            };
            return false;
        }
        self.polls = self.polls.saturating_add(1);
        now.saturating_sub(self.since) >= lease.lease_ns || self.polls > lease.max_attempts
    }
}

impl<'e, E: Endpoint> Chime<'e, E> {
    /// `get` through the node's delegation table (`key` decoded).
    pub(super) async fn get_delegated(
        &self,
        key: u64,
        out: &mut [u8],
    ) -> Result<Option<usize>, ChimeError> {
        let table = &self.node.delegation;
        let Some((at, mut leader, mut my_gen)) = table.claim_read(key).await else {
            return self.lookup(key, out).await;
        };
        let mut claim = Claim {
            table,
            at,
            lead: leader.then_some(Lead::Read(my_gen)),
            armed: true,
        };
        let lease = self.cfg.sherman.lease;
        let ep = self.tree.endpoint();
        let mut stuck = Stuck {
            gen_: u64::MAX,
            since: 0,
            polls: 0,
        };
        loop {
            if leader {
                // The leader reads into a buffer of the tree's largest value, so that what it
                // publishes fits every waiter's buffer that the value fits.
                let mut buf = [0u8; MAX_VALUE];
                let r = self.lookup(key, &mut buf).await;
                table
                    .with(at, |s| {
                        // Replaced (stuck for a lease): publish nothing, release nothing.
                        if s.reading && s.read_gen == my_gen {
                            if let Ok(found) = r {
                                s.found = found;
                                s.value = buf;
                                s.done_gen = my_gen;
                            }
                            s.reading = false;
                            s.users -= 1;
                        }
                    })
                    .await;
                claim.armed = false;
                return r.and_then(|found| copy_out(found, &buf, out));
            }
            yield_now().await;
            let now = ep.now_ns();
            let served = table
                .with(at, |s| {
                    if s.done_gen >= my_gen {
                        s.users -= 1;
                        return Some((s.found, s.value));
                    }
                    if !s.reading {
                        // A fresh generation (numbers only grow: one that failed is never
                        // reused), opened after every waiter it will serve arrived.
                        s.reading = true;
                        s.read_gen += 1;
                        my_gen = s.read_gen;
                        leader = true;
                    } else if stuck.expired(s.read_gen, now, &lease) {
                        // The leader made no progress for a lease: lead a new generation and
                        // release its count (it releases nothing if it comes back).
                        s.users -= 1;
                        s.read_gen = s.read_gen.max(my_gen) + 1;
                        my_gen = s.read_gen;
                        leader = true;
                    }
                    None
                })
                .await;
            if let Some((found, value)) = served {
                claim.armed = false;
                self.count(|st| st.delegated_reads += 1);
                return copy_out(found, &value, out);
            }
            claim.lead = leader.then_some(Lead::Read(my_gen));
        }
    }

    /// An update or upsert through the node's table (`key` decoded): a writer that finds a
    /// write of its key in flight leaves its value there; when the write finishes, its
    /// writer writes the latest value left once, and every writer whose value that covered
    /// returns (their writes linearize just before the one applied, each overwriting the
    /// previous: the applied write starts after each of them arrived and ends before each
    /// returns). Only writes of one kind combine; deletes go direct.
    pub(super) async fn modify_combined(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
    ) -> Result<bool, ChimeError> {
        let max = self.cfg.sherman.value_size.min(MAX_VALUE);
        if value.len() > max {
            return Err(ShermanError::ValueTooLong {
                len: value.len(),
                max,
            });
        }
        let table = &self.node.delegation;
        // `lead`: Some(None) = lead with my own value; Some(Some(seq)) = lead with my
        // deposited value `seq`; None = wait.
        let mut lead: Option<Option<u64>> = None;
        let mut my_seq = None;
        let mut my_gen = 0;
        let claimed = table.claim(key, |s| {
            if !s.writing {
                s.writing = true;
                s.write_gen += 1;
                my_gen = s.write_gen;
                lead = Some(None);
            } else if s.pending.is_none_or(|(k, _)| k == change) {
                s.pending = Some((change, value.len()));
                s.pending_val[..value.len()].copy_from_slice(value);
                s.pending_seq += 1;
                my_seq = Some(s.pending_seq);
            }
        });
        let Some((at, ())) = claimed.await else {
            return self.modify(key, value, change).await;
        };
        let mut claim = Claim {
            table,
            at,
            lead: lead.map(|_| Lead::Write),
            armed: true,
        };
        let lease = self.cfg.sherman.lease;
        let ep = self.tree.endpoint();
        let mut stuck = Stuck {
            gen_: u64::MAX,
            since: 0,
            polls: 0,
        };
        loop {
            if let Some(own_seq) = lead {
                let r = self.modify(key, value, change).await;
                // Then the latest value left meanwhile, once (if still the leader).
                let mut buf = [0u8; MAX_VALUE];
                let taken = table
                    .with(at, |s| {
                        if let Some(q) = own_seq {
                            s.apply(q, r);
                        }
                        if s.write_gen != my_gen {
                            return None;
                        }
                        s.pending.take().map(|(k, n)| {
                            buf[..n].copy_from_slice(&s.pending_val[..n]);
                            (k, n, s.pending_seq)
                        })
                    })
                    .await;
                if let Some((k, n, seq)) = taken {
                    let r2 = self.modify(key, &buf[..n], k).await;
                    table.with(at, |s| s.apply(seq, r2)).await;
                }
                table
                    .with(at, |s| {
                        // Replaced (stuck for a lease): the replacer released our count.
                        if s.write_gen == my_gen {
                            s.writing = false;
                            s.users -= 1;
                        }
                    })
                    .await;
                claim.armed = false;
                return r;
            }
            yield_now().await;
            let now = ep.now_ns();
            let served = table
                .with(at, |s| {
                    if let Some(q) = my_seq
                        && s.applied_seq >= q
                    {
                        s.users -= 1;
                        return Some(s.applied);
                    }
                    let take_over = s.writing && stuck.expired(s.write_gen, now, &lease);
                    if !s.writing || take_over {
                        match my_seq {
                            Some(q) if s.pending_seq == q && s.pending.is_some() => {
                                s.pending = None;
                                lead = Some(Some(q));
                            }
                            // My value was superseded (its successor's writer will return
                            // for me), or taken by a leader that is stuck: write it myself.
                            Some(_) if take_over => lead = Some(None),
                            Some(_) => {}
                            None => lead = Some(None),
                        }
                        if take_over {
                            // The stuck leader releases nothing if it comes back.
                            s.users -= 1;
                        }
                        if lead.is_some() {
                            s.writing = true;
                            s.write_gen += 1;
                            my_gen = s.write_gen;
                        }
                    }
                    None
                })
                .await;
            if let Some(r) = served {
                claim.armed = false;
                self.count(|st| st.combined_writes += 1);
                return r;
            }
            claim.lead = lead.map(|_| Lead::Write);
        }
    }
}

fn copy_out(
    found: Option<usize>,
    value: &[u8; MAX_VALUE],
    out: &mut [u8],
) -> Result<Option<usize>, ChimeError> {
    let Some(n) = found else { return Ok(None) };
    let got = out.len();
    out.get_mut(..n)
        .ok_or(ShermanError::BufferTooSmall { need: n, got })?
        .copy_from_slice(&value[..n]);
    Ok(Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::future::Future;
    use core::pin::pin;
    use core::task::{Context, Poll, Waker};

    fn poll<F: Future>(f: core::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    fn claim(t: &Delegation, key: u64) -> Option<(At, bool, u64)> {
        match poll(pin!(t.claim_read(key))) {
            Poll::Ready(r) => r,
            Poll::Pending => panic!("bucket busy"),
        }
    }

    #[test]
    fn a_second_reader_waits_for_the_next_generation() {
        let t = Delegation::new(16);
        let (a, lead, g) = claim(&t, 7).unwrap();
        assert!(lead && g == 1);
        // Arrives while generation 1 is in flight: waits for generation 2, not 1's result.
        let (b, lead, g) = claim(&t, 7).unwrap();
        assert!(!lead && g == 2);
        assert_eq!((a.0, a.1), (b.0, b.1));
        assert_eq!(t.users(7), 2);
        // Another key takes a slot of its own.
        let (_, lead, _) = claim(&t, 8).unwrap();
        assert!(lead);
    }

    #[test]
    fn a_dropped_leader_releases_its_lead_and_count() {
        let t = Delegation::new(16);
        let (at, _, g) = claim(&t, 3).unwrap();
        let _ = claim(&t, 3).unwrap();
        drop(Claim {
            table: &t,
            at,
            lead: Some(Lead::Read(g)),
            armed: true,
        });
        assert_eq!(t.users(3), 1, "the waiter's count is left");
        let g = t.buckets[at.0].try_lock().unwrap();
        assert!(!g[at.1].reading, "the waiter may lead at once");
    }

    #[test]
    fn a_full_bucket_sends_the_reader_direct() {
        let t = Delegation::new(PROBE);
        for k in 0..PROBE as u64 {
            assert!(claim(&t, k).is_some());
        }
        assert!(claim(&t, 1000).is_none());
        assert!(Delegation::new(0).buckets.is_empty());
        let empty = Delegation::new(0);
        assert!(claim(&empty, 1).is_none());
    }
}

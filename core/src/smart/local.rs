//! Read delegation and write combining: a table of local entries per compute node, shared by
//! every client thread's handle of the node and all their coroutines ([`super::SmartNode`]).
//!
//! Delegation is linearizable: a reader that finds a read of its key in flight does not take
//! that read's result (it may predate the reader); it waits for the *next* read, which one of
//! the waiting readers issues once the current one completes, and which therefore starts
//! after every reader it serves arrived. Combining: writers that find a write of their key in
//! flight leave their value in the entry; when the writer finishes, it writes the latest
//! pending value once, and every writer whose value it covered returns (their writes are
//! linearized just before the one that was applied, each overwriting the previous).
//!
//! Sharing between threads: the table is split into buckets of [`PROBE`] entries, each under
//! a try-lock held only between awaits (a few hundred nanoseconds), never across one; a
//! coroutine that finds its bucket busy yields to its executor and polls again, so no thread
//! ever blocks on another. A leader's read result is its `lookup`'s, whose leaf the CRC
//! verified (a torn leaf is re-read, never handed out). Waiting on a leader of another thread
//! is polled through the executor (`yield_now`, which the sim charges as a busy-poll
//! iteration). A leader that makes no progress for a lease (`SmartConfig::lease`, on the
//! waiter's own clock) — a thread that died mid-READ, or a future dropped halfway — is
//! replaced: a waiter becomes the leader with a new generation and releases the old leader's
//! user count for it, and the old leader, should it come back, publishes nothing and releases
//! nothing (its generation is gone). A user whose operation is dropped halfway (its future
//! dropped, its thread unwinding) releases its count at once through its claim's drop, and a
//! read leader its lead too. So an entry whose users died returns to the free pool once the
//! others are done, instead of staying with its key for the life of the node state.
use super::Smart;
use super::bump;
use super::config::SmartError;
use super::key::Key;
use super::shared::{TryLock, TryLockGuard};
use super::write::WriteKind;
use crate::block_on::yield_now;
use crate::fabric::Endpoint;
use crate::lease::LeaseConfig;
use remora_layouts::smart::MAX_LEAF_BYTES;
use std_alloc::vec::Vec;

/// FNV-1a: places leaves and local entries.
pub(crate) fn hash_key(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

struct Entry {
    users: u32,
    key: Vec<u8>,
    // Delegation.
    reading: bool,
    read_gen: u64,
    done_gen: u64,
    result: Result<Option<usize>, SmartError>,
    value: Vec<u8>,
    // Combining.
    writing: bool,
    /// Generation of the current write leader (a waiter that replaces a stuck one bumps it).
    write_gen: u64,
    pending: Option<WriteKind>,
    pending_seq: u64,
    applied_seq: u64,
    applied: Result<bool, SmartError>,
    pending_val: Vec<u8>,
}

impl Entry {
    fn new(value_cap: usize) -> Entry {
        Entry {
            users: 0,
            key: Vec::with_capacity(remora_layouts::smart::MAX_KEY_LEN),
            reading: false,
            read_gen: 0,
            done_gen: 0,
            result: Ok(None),
            value: Vec::with_capacity(value_cap),
            writing: false,
            write_gen: 0,
            pending: None,
            pending_seq: 0,
            applied_seq: 0,
            applied: Ok(false),
            pending_val: Vec::with_capacity(value_cap),
        }
    }

    /// Records what the write of sequence number `seq` returned (a later one already
    /// recorded stays).
    fn apply(&mut self, seq: u64, r: Result<bool, SmartError>) {
        if seq > self.applied_seq {
            self.applied_seq = seq;
            self.applied = r;
        }
    }
}

/// Entries per bucket: a key's entry is in its home bucket or nowhere.
pub(crate) const PROBE: usize = 8;

type Bucket = [Entry; PROBE];

/// The node's table: buckets of [`PROBE`] entries, each under its own try-lock.
pub(crate) struct LocalTable {
    buckets: Vec<TryLock<Bucket>>,
    value_cap: usize,
}

/// Where a claimed entry is: bucket and position in it.
#[derive(Clone, Copy)]
struct At(usize, usize);

/// What a claim leads, if anything: the read of this generation, or a write.
#[derive(Clone, Copy)]
enum Lead {
    Read(u64),
    Write,
}

/// A user's claim on an entry while its operation runs. Dropped armed (the operation's
/// future dropped halfway, or its thread unwinding), it releases the user count of a waiter,
/// and of a read leader (if still the leader) with its lead, so that a waiter leads at once
/// instead of after a lease. A write leader's lead and count are left to the waiter that
/// replaces it after a lease: it may have taken a waiter's value, which only a replacer
/// rewrites.
struct Claim<'t> {
    table: &'t LocalTable,
    at: At,
    lead: Option<Lead>,
    armed: bool,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Bucket locks are held only between awaits, never across one: the wait is short.
        let bucket = &self.table.buckets[self.at.0];
        let mut g = loop {
            if let Some(g) = bucket.try_lock() {
                break g;
            }
            core::hint::spin_loop();
        };
        let e = &mut g[self.at.1];
        match self.lead {
            None => e.users -= 1,
            Some(Lead::Read(gen_)) if e.reading && e.read_gen == gen_ => {
                e.reading = false;
                e.users -= 1;
            }
            // Replaced as the read leader (the replacer released our count), or a write
            // leader (its replacer will).
            Some(_) => {}
        }
    }
}

/// How long a waiter has seen one leader generation in flight, on its own clock (and in
/// polls, for fabrics without a clock).
struct Stuck {
    leader: u64,
    since: u64,
    polls: u32,
}

impl Stuck {
    fn new() -> Stuck {
        Stuck {
            leader: u64::MAX,
            since: 0,
            polls: 0,
        }
    }

    /// True once generation `leader` has led for a lease of this waiter's watching (or for
    /// `max_attempts` polls).
    fn expired(&mut self, leader: u64, now: u64, lease: &LeaseConfig) -> bool {
        if leader != self.leader {
            *self = Stuck {
                leader,
                since: now,
                polls: 0,
            };
            return false;
        }
        self.polls = self.polls.saturating_add(1);
        now.saturating_sub(self.since) >= lease.lease_ns || self.polls > lease.max_attempts
    }
}

impl LocalTable {
    pub fn new(n: usize, value_cap: usize) -> LocalTable {
        let buckets = (n.max(PROBE).next_power_of_two() / PROBE).max(1);
        LocalTable {
            buckets: (0..buckets)
                .map(|_| TryLock::new(core::array::from_fn(|_| Entry::new(value_cap))))
                .collect(),
            value_cap,
        }
    }

    /// Bytes the table holds (entries and their preallocated key and value buffers).
    pub fn footprint(&self) -> usize {
        let buffers = remora_layouts::smart::MAX_KEY_LEN + 2 * self.value_cap;
        self.buckets.len() * (core::mem::size_of::<TryLock<Bucket>>() + PROBE * buffers)
    }

    /// The largest value the entries were sized for.
    pub fn value_cap(&self) -> usize {
        self.value_cap
    }

    /// The bucket of `b`, locked: polls the executor while another thread holds it.
    async fn lock(&self, b: usize) -> TryLockGuard<'_, Bucket> {
        loop {
            if let Some(g) = self.buckets[b].try_lock() {
                return g;
            }
            yield_now().await;
        }
    }

    /// The entry of `key` (joining its users), a fresh one, or `None` when its bucket is full
    /// of other keys (then the caller goes to remote memory directly). `f` runs on the
    /// claimed entry under the same hold of the bucket lock.
    async fn claim<R>(&self, key: &[u8], f: impl FnOnce(&mut Entry) -> R) -> Option<(At, R)> {
        let b = (hash_key(key) as usize) & (self.buckets.len() - 1);
        let mut g = self.lock(b).await;
        let mut free = None;
        for (i, e) in g.iter_mut().enumerate() {
            if e.users > 0 && e.key == key {
                e.users += 1;
                return Some((At(b, i), f(e)));
            }
            if e.users == 0 && free.is_none() {
                free = Some(i);
            }
        }
        let i = free?;
        let e = &mut g[i];
        e.users = 1;
        e.key.clear();
        e.key.extend_from_slice(key);
        e.reading = false;
        e.read_gen = 0;
        e.done_gen = 0;
        e.writing = false;
        e.write_gen = 0;
        e.pending = None;
        e.pending_seq = 0;
        e.applied_seq = 0;
        Some((At(b, i), f(e)))
    }

    /// Users counted on `key`'s entries (tests).
    #[cfg(test)]
    fn users(&self, key: &[u8]) -> u32 {
        let b = (hash_key(key) as usize) & (self.buckets.len() - 1);
        let g = self.buckets[b]
            .try_lock()
            .expect("bucket free between operations");
        g.iter().filter(|e| e.key == key).map(|e| e.users).sum()
    }

    /// Runs `f` on the claimed entry `at` under its bucket's lock.
    async fn with<R>(&self, at: At, f: impl FnOnce(&mut Entry) -> R) -> R {
        let mut g = self.lock(at.0).await;
        f(&mut g[at.1])
    }
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// `get` with read delegation (`key` encoded).
    pub(crate) async fn get_delegated(
        &self,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<Option<usize>, SmartError> {
        if !self.cfg.techniques.delegation {
            return self.get_direct(key, out).await;
        }
        let local = &self.node.local;
        let claimed = local.claim(key, |e| {
            if e.reading {
                (false, e.read_gen + 1)
            } else {
                e.reading = true;
                e.read_gen += 1;
                (true, e.read_gen)
            }
        });
        let Some((at, (mut leader, mut my_gen))) = claimed.await else {
            return self.get_direct(key, out).await;
        };
        let mut claim = Claim {
            table: local,
            at,
            lead: None,
            armed: true,
        };
        claim.lead = leader.then_some(Lead::Read(my_gen));
        let lease = &self.cfg.lease;
        let mut stuck = Stuck::new();
        loop {
            if leader {
                // The value lands in `out` (no buffer of the largest leaf to clear per
                // lookup), limited to the tree's values so that the table holds it.
                let cap = self.cfg.value_cap;
                let room = out.len().min(cap);
                let r = self.get_direct(key, &mut out[..room]).await;
                if room < cap && matches!(r, Err(SmartError::BufferTooSmall { .. })) {
                    // Too small for our buffer, not for the waiters': publish nothing, and
                    // let the claim's drop hand the read on to one of them.
                    return r;
                }
                local
                    .with(at, |e| {
                        // Replaced as the leader (stuck for a lease): publish nothing, and
                        // leave the user count alone (the replacer released ours).
                        if e.reading && e.read_gen == my_gen {
                            e.value.clear();
                            if let Ok(Some(n)) = r {
                                e.value.extend_from_slice(&out[..n]);
                            }
                            e.result = r;
                            e.done_gen = my_gen;
                            e.reading = false;
                            e.users -= 1;
                        }
                    })
                    .await;
                claim.armed = false;
                return r;
            }
            yield_now().await;
            let now = self.ep.now_ns();
            let served = local
                .with(at, |e| {
                    if e.done_gen >= my_gen {
                        e.users -= 1;
                        return Some(copy_out(e.result, &e.value, out));
                    }
                    if !e.reading {
                        e.reading = true;
                        e.read_gen = my_gen;
                        leader = true;
                    } else if stuck.expired(e.read_gen, now, lease) {
                        // The leader made no progress for a lease: lead a new read, and
                        // release its user count (it releases nothing if it comes back).
                        e.users -= 1;
                        e.read_gen = e.read_gen.max(my_gen) + 1;
                        my_gen = e.read_gen;
                        leader = true;
                        bump(&self.stats.leader_takeovers);
                    }
                    None
                })
                .await;
            if let Some(r) = served {
                claim.armed = false;
                bump(&self.stats.delegated_reads);
                return r;
            }
            claim.lead = leader.then_some(Lead::Read(my_gen));
        }
    }

    /// `upsert`/`update` with write combining; returns whether the key was present.
    pub(crate) async fn write_combined(
        &self,
        kind: WriteKind,
        key: &Key,
        value: &[u8],
    ) -> Result<bool, SmartError> {
        if value.len() > self.cfg.value_cap {
            return Err(SmartError::ValueTooLarge {
                len: value.len(),
                cap: self.cfg.value_cap,
            });
        }
        if !self.cfg.techniques.combining {
            return self.write_op(kind, key, value).await;
        }
        let local = &self.node.local;
        // `lead`: Some(None) = lead with my own value; Some(Some(seq)) = lead with my
        // deposited value `seq`; None = wait.
        let mut lead: Option<Option<u64>> = None;
        let mut my_seq = None;
        let mut my_gen = 0;
        let claimed = local.claim(key.bytes(), |e| {
            if !e.writing {
                e.writing = true;
                e.write_gen += 1;
                my_gen = e.write_gen;
                lead = Some(None);
            } else if e.pending.is_none() || e.pending == Some(kind) {
                e.pending = Some(kind);
                e.pending_val.clear();
                e.pending_val.extend_from_slice(value);
                e.pending_seq += 1;
                my_seq = Some(e.pending_seq);
            }
        });
        let Some((at, ())) = claimed.await else {
            return self.write_op(kind, key, value).await;
        };
        let mut claim = Claim {
            table: local,
            at,
            lead: None,
            armed: true,
        };
        claim.lead = lead.map(|_| Lead::Write);
        let lease = &self.cfg.lease;
        let mut stuck = Stuck::new();
        loop {
            if let Some(own_seq) = lead {
                let r = self.write_op(kind, key, value).await;
                // Serve the latest pending value once (if still the leader).
                let mut buf = [0u8; MAX_LEAF_BYTES];
                let taken = local
                    .with(at, |e| {
                        if let Some(s) = own_seq {
                            e.apply(s, r);
                        }
                        if e.write_gen != my_gen {
                            return None;
                        }
                        e.pending.take().map(|k| {
                            let n = e.pending_val.len();
                            buf[..n].copy_from_slice(&e.pending_val);
                            (k, n, e.pending_seq)
                        })
                    })
                    .await;
                if let Some((k, n, seq)) = taken {
                    let r2 = self.write_op(k, key, &buf[..n]).await;
                    local.with(at, |e| e.apply(seq, r2)).await;
                }
                local
                    .with(at, |e| {
                        // Replaced (stuck for a lease): the replacer released our count.
                        if e.write_gen == my_gen {
                            e.writing = false;
                            e.users -= 1;
                        }
                    })
                    .await;
                claim.armed = false;
                return r;
            }
            yield_now().await;
            let now = self.ep.now_ns();
            let served = local
                .with(at, |e| {
                    if let Some(s) = my_seq
                        && e.applied_seq >= s
                    {
                        e.users -= 1;
                        return Some(e.applied);
                    }
                    let take_over = e.writing && stuck.expired(e.write_gen, now, lease);
                    if !e.writing || take_over {
                        match my_seq {
                            Some(s) if e.pending_seq == s && e.pending.is_some() => {
                                e.pending = None;
                                lead = Some(Some(s));
                            }
                            // My value was superseded or taken by a leader that is stuck:
                            // write it myself.
                            Some(_) if take_over => lead = Some(None),
                            Some(_) => {}
                            None => lead = Some(None),
                        }
                        if take_over {
                            // The stuck leader releases nothing if it comes back.
                            e.users -= 1;
                            bump(&self.stats.leader_takeovers);
                        }
                        if lead.is_some() {
                            e.writing = true;
                            e.write_gen += 1;
                            my_gen = e.write_gen;
                        }
                    }
                    None
                })
                .await;
            if let Some(r) = served {
                claim.armed = false;
                bump(&self.stats.combined_writes);
                return r;
            }
            claim.lead = lead.map(|_| Lead::Write);
        }
    }
}

fn copy_out(
    r: Result<Option<usize>, SmartError>,
    val: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, SmartError> {
    match r {
        Ok(Some(n)) => {
            if n > out.len() {
                return Err(SmartError::BufferTooSmall {
                    need: n,
                    got: out.len(),
                });
            }
            out[..n].copy_from_slice(&val[..n]);
            Ok(Some(n))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::tests::{block, endpoint, memory};
    use super::super::*;
    use core::future::Future;
    use core::pin::pin;
    use core::task::{Context, Waker};

    /// SMART with every technique, and waiters that replace a leader after 50 polls (the
    /// in-memory fabric has no clock).
    fn cfg() -> SmartConfig {
        let mut cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
        cfg.lease.max_attempts = 50;
        cfg
    }

    /// Polls `f` once: a leader stopped inside its remote access.
    fn poll_once<F: Future>(f: core::pin::Pin<&mut F>) {
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            f.poll(&mut cx).is_pending(),
            "stopped before its first verb"
        );
    }

    #[test]
    fn a_dead_read_leader_releases_its_entry_at_once() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 5u64.to_be_bytes();
        block(s.upsert(&key, &[1; 8])).unwrap();
        let mut out = [0u8; 8];
        {
            // Dies (its future dropped) in the middle of the read it leads.
            let mut dead = [0u8; 8];
            poll_once(pin!(s.get(&key, &mut dead)));
        }
        // Before: 1 for ever (the dead leader's), and the entry never left its key.
        assert_eq!(
            s.node.local.users(&key),
            0,
            "the dead leader's count was released"
        );
        assert_eq!(block(s.get(&key, &mut out)).unwrap(), Some(8));
        assert_eq!(
            s.stats().leader_takeovers,
            0,
            "led at once, no lease waited"
        );
        assert_eq!(s.node.local.users(&key), 0);
    }

    #[test]
    fn a_dead_waiter_releases_its_count() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 8u64.to_be_bytes();
        block(s.upsert(&key, &[6; 8])).unwrap();
        let (mut lead_out, mut dead) = ([0u8; 8], [0u8; 8]);
        let mut leader = pin!(s.get(&key, &mut lead_out));
        poll_once(leader.as_mut());
        // A second reader joins as a waiter, and dies.
        poll_once(pin!(s.get(&key, &mut dead)));
        assert_eq!(
            s.node.local.users(&key),
            1,
            "only the leader's count is left"
        );
        assert_eq!(block(leader).unwrap(), Some(8));
        assert_eq!(s.node.local.users(&key), 0);
    }

    #[test]
    fn a_read_leader_with_a_small_buffer_hands_the_read_on() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 9u64.to_be_bytes();
        block(s.upsert(&key, &[7; 8])).unwrap();
        let (mut first, mut small, mut out) = ([0u8; 8], [0u8; 4], [0u8; 8]);
        {
            // A read in flight; two readers arrive, so they wait for the next read.
            let mut lead1 = pin!(s.get(&key, &mut first));
            poll_once(lead1.as_mut());
            let mut lead2 = pin!(s.get(&key, &mut small));
            poll_once(lead2.as_mut());
            let mut waiter = pin!(s.get(&key, &mut out));
            poll_once(waiter.as_mut());
            assert_eq!(block(lead1).unwrap(), Some(8));
            // The reader with the small buffer leads the next read; the other waits on it.
            poll_once(lead2.as_mut());
            poll_once(waiter.as_mut());
            assert!(matches!(
                block(lead2),
                Err(SmartError::BufferTooSmall { need: 8, got: 4 })
            ));
            // Too small for the leader, not for the waiter: it reads the value itself.
            assert_eq!(block(waiter).unwrap(), Some(8));
        }
        assert_eq!(out, [7; 8]);
        assert_eq!(s.node.local.users(&key), 0);
    }

    #[test]
    fn a_slow_read_leader_coming_back_releases_nothing_twice() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 6u64.to_be_bytes();
        block(s.upsert(&key, &[2; 8])).unwrap();
        let (mut slow_out, mut out) = ([0u8; 8], [0u8; 8]);
        {
            let mut slow = pin!(s.get(&key, &mut slow_out));
            poll_once(slow.as_mut());
            // Replaced while stopped, then resumed: it publishes nothing, releases nothing.
            assert_eq!(block(s.get(&key, &mut out)).unwrap(), Some(8));
            assert_eq!(block(slow).unwrap(), Some(8));
        }
        assert_eq!(slow_out, [2; 8]);
        assert_eq!(s.node.local.users(&key), 0);
    }

    #[test]
    fn a_dead_write_leader_releases_its_entry() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 7u64.to_be_bytes();
        block(s.upsert(&key, &[3; 8])).unwrap();
        poll_once(pin!(s.upsert(&key, &[4; 8])));
        assert_eq!(s.node.local.users(&key), 1);
        block(s.upsert(&key, &[5; 8])).unwrap();
        assert_eq!(s.stats().leader_takeovers, 1);
        assert_eq!(
            s.node.local.users(&key),
            0,
            "the dead leader's count was released"
        );
        let mut out = [0u8; 8];
        assert_eq!(block(s.get(&key, &mut out)).unwrap(), Some(8));
        assert_eq!(out, [5; 8]);
    }
}

//! Read delegation and write combining: one table of local entries per compute node, shared
//! by every client thread's handle of the node and all their coroutines. SMART uses it for
//! its leaves (`smart/local.rs`), CHIME for its hopscotch entries (`chime/delegate.rs`); each
//! brings a [`Flavor`] (how an entry stores its key and values, which errors it shares) and a
//! [`Host`] (its clock, lease and counters), and passes its own remote read and write.
//!
//! Delegation is linearizable: a reader that finds a read of its key in flight does not take
//! that read's result (it may predate the reader); it waits for the *next* read, which one of
//! the waiting readers issues once the current one completes, and which therefore starts
//! after every reader it serves arrived (a generation is opened under the bucket lock after
//! the previous one closed, and numbers only grow: one that failed is never reused). So at
//! most two reads per key are in flight per node, whatever the skew. Combining: writers that
//! find a write of their key in flight leave their value in the entry; when the writer
//! finishes, it writes the latest pending value once, and every writer whose value it covered
//! returns (their writes are linearized just before the one that was applied, each
//! overwriting the previous) with that write's result, kept for them in a short ring of
//! results per entry until they all picked it up, so a writer whose thread was descheduled
//! meanwhile finds its own write's result, never a later one's (a leader waits only while every
//! record of the ring is still held). Only writes of one kind combine. With
//! [`Host::combine_latest`] (SMART's `combine_latest`, the authors' leader), the leader
//! instead picks up the latest pending value once its index's write holds the key's lock
//! ([`Pick`]) and writes once: the writers queued before the pick-up return with that write,
//! linearized after the leader's own; those queued after it wait for the next leader.
//!
//! Sharing between threads: the table is split into buckets of [`PROBE`] entries, each under
//! a try-lock held only between awaits (a few hundred nanoseconds), never across one; a
//! coroutine that finds its bucket busy yields to its executor and polls again, so no thread
//! ever blocks on another. A waiter parks ([`park`]): it leaves its waker in the entry, and
//! the leader wakes the entry's waiters when it publishes, applies or ends (a waiter is not
//! polled while the read or write it waits for is in flight), with a timer at its next lease
//! check ([`Host::pause`]). A leader that makes no progress for a lease (the host's lease, on
//! the waiter's own clock, or its attempt cap on fabrics without one) — a thread that died mid-READ, or a future dropped halfway — is
//! replaced: a waiter becomes the leader with a new generation and releases the old leader's
//! user count for it, and the old leader, should it come back, publishes nothing and releases
//! nothing (its generation is gone). A user whose operation is dropped halfway (its future
//! dropped, its thread unwinding) releases its count at once through its claim's drop, and a
//! read leader its lead too. So an entry whose users died returns to the free pool once the
//! others are done, instead of staying with its key for the life of the node state.
use crate::block_on::yield_now;
use crate::lease::{LeaseConfig, Watched};
use crate::smart::shared::{TryLock, TryLockGuard};
use core::future::Future;
use park::{Check, Parked};
use std_alloc::vec::Vec;

pub(crate) mod park;
mod read;
mod write;
pub(crate) use write::Pick;

/// Coroutines that can park on one entry (more poll: they are served all the same).
const PARKED: usize = 8;

/// Entries per bucket: a key's entry is in its home bucket or nowhere.
pub(crate) const PROBE: usize = 8;

/// Where an entry keeps bytes (its key, its published value, a pending value): preallocated
/// at the table's creation, so that the hot path never allocates.
pub(crate) trait Bytes {
    /// Storage for up to `cap` bytes.
    fn with_capacity(cap: usize) -> Self;
    /// Replaces the bytes held with `b` (at most the capacity it was made with).
    fn set(&mut self, b: &[u8]);
    /// The bytes held.
    fn get(&self) -> &[u8];
    /// Bytes kept outside the entry for a capacity of `cap` (the heap's share).
    fn heap(cap: usize) -> usize;
}

impl Bytes for Vec<u8> {
    fn with_capacity(cap: usize) -> Self {
        Vec::with_capacity(cap)
    }
    fn set(&mut self, b: &[u8]) {
        self.clear();
        self.extend_from_slice(b);
    }
    fn get(&self) -> &[u8] {
        self
    }
    fn heap(cap: usize) -> usize {
        cap
    }
}

/// Up to `N` bytes inside the entry, with their length.
#[derive(Clone, Copy)]
pub(crate) struct Inline<const N: usize> {
    len: usize,
    bytes: [u8; N],
}

impl<const N: usize> Bytes for Inline<N> {
    fn with_capacity(_: usize) -> Self {
        Inline {
            len: 0,
            bytes: [0; N],
        }
    }
    fn set(&mut self, b: &[u8]) {
        self.bytes[..b.len()].copy_from_slice(b);
        self.len = b.len();
    }
    fn get(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
    fn heap(_: usize) -> usize {
        0
    }
}

/// What one index keeps in its entries.
pub(crate) trait Flavor {
    /// Storage of an entry's key.
    type Key: Bytes;
    /// Storage of an entry's published and pending values.
    type Value: Bytes;
    /// Kinds of write (only writes of one kind combine).
    type Kind: Copy + PartialEq;
    /// The index's error.
    type Error: Copy;
    /// A write leader's buffer for the pending value it takes: the largest value.
    type Scratch: AsMut<[u8]>;
    /// The longest key.
    const KEY_CAP: usize;
    /// Whether a read leader's error is handed to its waiters (otherwise one of them reads
    /// again).
    const SHARES_ERRORS: bool;
    /// The hash that picks a key's bucket.
    fn home(key: &[u8]) -> u64;
    /// A zeroed [`Self::Scratch`].
    fn scratch() -> Self::Scratch;
    /// The error of an `out` of `got` bytes for a value of `need`.
    fn too_small(need: usize, got: usize) -> Self::Error;
    /// Whether `e` is [`Self::too_small`]'s error.
    fn is_too_small(e: &Self::Error) -> bool;
}

/// What a handle tells the table while it waits.
pub(crate) trait Host {
    /// The waiter's clock.
    fn now_ns(&self) -> u64;
    /// When a leader counts as stuck.
    fn lease(&self) -> LeaseConfig;
    /// The largest value of the tree (what a read leader reads into its buffer).
    fn value_cap(&self) -> usize;
    /// Counts one event.
    fn count(&self, what: Counted);
    /// Whether a write leader picks up the latest value queued for its key once it holds
    /// the key's lock and writes once ([`Pick`], the SMART authors' leader), instead of
    /// writing its own value and then the latest queued one. Off for a host that does not
    /// say; SMART and CHIME take it from their configs, where it is on.
    fn combine_latest(&self) -> bool {
        false
    }
    /// Lets the waiter's other coroutines run for about `ns` (the timer of a parked waiter,
    /// at its next lease check); the default yields once (then the waiter polls).
    fn pause(&self, _ns: u64) -> impl Future<Output = ()> {
        yield_now()
    }
}

/// Events a [`Host`] counts.
#[derive(Clone, Copy)]
pub(crate) enum Counted {
    /// A read served by another reader's read.
    Delegated,
    /// A write whose value another writer applied.
    Combined,
    /// A stuck leader replaced.
    TakenOver,
    /// A leader's second write, of the latest value left while its own was in flight: the
    /// writers it covered and its time on the host's clock (ns). The leader returns only after
    /// it, so it adds that time to the leader's operation and to each writer it covers.
    SecondWrite { covered: u32, ns: u64 },
}

struct Entry<F: Flavor> {
    users: u32,
    key: F::Key,
    // Delegation.
    reading: bool,
    read_gen: u64,
    done_gen: u64,
    result: Result<Option<usize>, F::Error>,
    value: F::Value,
    // Combining.
    writing: bool,
    /// Generation of the current write leader (a waiter that replaces a stuck one bumps it).
    write_gen: u64,
    /// The write generation whose leader's future was dropped halfway (0: none).
    write_abandoned: u64,
    pending: Option<F::Kind>,
    pending_seq: u64,
    /// The latest write applied (its sequence number, and what it returned: a writer whose
    /// record was published over past the deadline, counted dead, gets it).
    applied_seq: u64,
    applied: Result<bool, F::Error>,
    pending_val: F::Value,
    /// Writers whose deposited value is pending (not yet taken by a leader).
    open: u32,
    /// Writers whose value (or a later one that superseded it) a leader took and has yet
    /// to apply, up to sequence number `taken_seq`.
    inflight: u32,
    taken_seq: u64,
    /// The results of the last writes that covered other writers, each kept until all of
    /// them picked it up ([`write::Applied`]): a writer picks up the result of the first
    /// write at or after its own sequence number, and a later result (its thread descheduled
    /// meanwhile) could be another write's (`false` from an update after a delete, while its
    /// own value was written). A write's result is published only into a record nobody
    /// still has to pick up from.
    results: [write::Applied<F::Error>; write::RESULTS],
    /// A leader waits for one of [`Self::results`] to be free (set when it finds none,
    /// cleared by the wake-up of the writer that frees one).
    publisher_waits: bool,
    /// Readers and writers waiting on this entry, woken when it changes.
    parked: Parked<PARKED>,
}

impl<F: Flavor> Entry<F> {
    fn new(value_cap: usize) -> Entry<F> {
        Entry {
            users: 0,
            key: F::Key::with_capacity(F::KEY_CAP),
            reading: false,
            read_gen: 0,
            done_gen: 0,
            result: Ok(None),
            value: F::Value::with_capacity(value_cap),
            writing: false,
            write_gen: 0,
            write_abandoned: 0,
            pending: None,
            pending_seq: 0,
            applied_seq: 0,
            applied: Ok(false),
            pending_val: F::Value::with_capacity(value_cap),
            open: 0,
            inflight: 0,
            taken_seq: 0,
            results: [write::Applied::EMPTY; write::RESULTS],
            publisher_waits: false,
            parked: Parked::default(),
        }
    }
}

/// [`PROBE`] entries under one lock, with a bit per entry that may have users (set when
/// an entry is claimed for a key, cleared lazily by a claim that finds its users gone): a
/// claim looks only at those entries, and takes a free one without reading the others, so
/// that an uncontended claim touches the bucket's first line and the entry it takes rather
/// than every entry of the bucket. Invariant (under the lock): an entry with users has its
/// bit set (users go from 0 to 1 only in [`Table::claim`], which sets it). `repr(C)`: the
/// bits lead the bucket, on the line of its first entry.
#[repr(C)]
struct Bucket<F: Flavor> {
    live: u8,
    entries: [Entry<F>; PROBE],
}

const _: () = assert!(PROBE <= 8, "one bit of `Bucket::live` per entry");

impl<F: Flavor> core::ops::Deref for Bucket<F> {
    type Target = [Entry<F>; PROBE];
    fn deref(&self) -> &[Entry<F>; PROBE] {
        &self.entries
    }
}

impl<F: Flavor> core::ops::DerefMut for Bucket<F> {
    fn deref_mut(&mut self) -> &mut [Entry<F>; PROBE] {
        &mut self.entries
    }
}

/// A node's table: buckets of [`PROBE`] entries, each under its own try-lock.
pub(crate) struct Table<F: Flavor> {
    buckets: Vec<TryLock<Bucket<F>>>,
    value_cap: usize,
}

/// Where a claimed entry is: bucket and position in it.
#[derive(Clone, Copy)]
struct At(usize, usize);

/// What a claim leads, if anything: the read of this generation, or a write.
#[derive(Clone, Copy)]
enum Lead {
    Read(u64),
    /// A write leader of this generation.
    Write(u64),
}

/// A user's claim on an entry while its operation runs. Dropped armed (the operation's
/// future dropped halfway, or its thread unwinding), it releases the user count of a waiter,
/// and of a read leader (if still the leader) with its lead, so that a waiter leads at once
/// instead of after a lease. A write leader's lead and count are left to the waiter that
/// replaces it after a lease: it may have taken a waiter's value, which only a replacer
/// rewrites.
struct Claim<'t, F: Flavor> {
    table: &'t Table<F>,
    at: At,
    lead: Option<Lead>,
    /// A waiting writer's deposited sequence number.
    seq: Option<u64>,
    armed: bool,
}

impl<F: Flavor> Drop for Claim<'_, F> {
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
            None => {
                e.users -= 1;
                if let Some(s) = self.seq {
                    e.leave(s);
                }
            }
            Some(Lead::Read(gen_)) if e.reading && e.read_gen == gen_ => {
                e.reading = false;
                e.users -= 1;
                // One of the waiters leads now.
                e.parked.wake_all();
            }
            // A write leader dropped halfway: it will never write again, so a waiter may
            // replace it after a lease (a WRITE it had posted has landed by then).
            Some(Lead::Write(gen_)) if e.writing && e.write_gen == gen_ => {
                e.write_abandoned = gen_;
                e.parked.wake_all();
            }
            // Replaced as the read leader (the replacer released our count), or a write
            // leader (its replacer did).
            Some(_) => {}
        }
    }
}

/// How long a waiter has seen one leader generation in flight, in time it watched on its own
/// clock (`crate::lease`, "Stalls": a waiter stopped with its process replaces no live
/// leader, a sibling stopped with it), and in polls for fabrics without a clock.
struct Stuck {
    leader: u64,
    /// The bound being watched for, and the time watched against it (restarted when the
    /// bound changes: a leader abandoned meanwhile is watched for a lease from then).
    watch: Option<(u64, Watched)>,
    polls: u32,
}

impl Stuck {
    fn new() -> Stuck {
        Stuck {
            leader: u64::MAX,
            watch: None,
            polls: 0,
        }
    }

    /// True once generation `leader` has led for `bound_ns` of this waiter's watching (or,
    /// on a fabric without a clock, where `now` stays 0, for `max_attempts` polls). Polls
    /// never count where there is a clock: a waiter that polls fast would otherwise replace a
    /// live leader that was only descheduled for a few milliseconds.
    fn expired(&mut self, leader: u64, now: u64, bound_ns: u64, lease: &LeaseConfig) -> bool {
        if leader != self.leader {
            *self = Stuck {
                leader,
                watch: Some((bound_ns, Watched::new(now, bound_ns))),
                polls: 0,
            };
            return false;
        }
        self.polls = self.polls.saturating_add(1);
        if now == 0 {
            return self.polls > lease.max_attempts;
        }
        match &mut self.watch {
            Some((b, w)) if *b == bound_ns => w.note(now) == 0,
            w => {
                *w = Some((bound_ns, Watched::new(now, bound_ns)));
                false
            }
        }
    }

    /// Nanoseconds (at least 1) until the next look: when the generation being watched will
    /// have led for `bound_ns`, or a sixteenth of it if sooner (a parked waiter's timer: one
    /// that fires late because the process was stopped counts two sixteenths).
    fn left(&self, bound_ns: u64) -> u64 {
        match &self.watch {
            Some((b, w)) if *b == bound_ns => w.pause_ns(),
            _ => (bound_ns / 16).max(1),
        }
    }
}

impl<F: Flavor> Table<F> {
    /// A table of `entries` (rounded up to whole buckets of a power of two; none at 0, and
    /// then every operation goes to remote memory directly) for values up to `value_cap`.
    pub(crate) fn with_entries(entries: usize, value_cap: usize) -> Table<F> {
        let n = if entries == 0 {
            0
        } else {
            entries.div_ceil(PROBE).next_power_of_two()
        };
        Table {
            buckets: (0..n)
                .map(|_| {
                    TryLock::new(Bucket {
                        live: 0,
                        entries: core::array::from_fn(|_| Entry::new(value_cap)),
                    })
                })
                .collect(),
            value_cap,
        }
    }

    /// Bytes the table holds (entries and their preallocated key and value buffers).
    pub(crate) fn footprint(&self) -> usize {
        let buffers = F::Key::heap(F::KEY_CAP) + 2 * F::Value::heap(self.value_cap);
        self.buckets.len() * (core::mem::size_of::<TryLock<Bucket<F>>>() + PROBE * buffers)
    }

    /// The largest value the entries were sized for.
    pub(crate) fn value_cap(&self) -> usize {
        self.value_cap
    }

    /// The bucket of `b`, locked: polls the executor while another thread holds it.
    async fn lock(&self, b: usize) -> TryLockGuard<'_, Bucket<F>> {
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
    async fn claim<R>(&self, key: &[u8], f: impl FnOnce(&mut Entry<F>) -> R) -> Option<(At, R)> {
        if self.buckets.is_empty() {
            return None;
        }
        let b = (F::home(key) as usize) & (self.buckets.len() - 1);
        let mut g = self.lock(b).await;
        let g = &mut *g;
        // Only the entries that may have users: one of them is `key`'s, or has none left
        // (its bit cleared, and it may be taken).
        let mut free = None;
        let mut bits = g.live;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let e = &mut g.entries[i];
            if e.users == 0 {
                g.live &= !(1 << i);
                free = free.or(Some(i));
            } else if e.key.get() == key {
                e.users += 1;
                return Some((At(b, i), f(e)));
            }
        }
        // Else any entry without its bit (it has no users), the first one.
        let i = match free {
            Some(i) => i,
            None if g.live == u8::MAX >> (8 - PROBE) => return None,
            None => g.live.trailing_ones() as usize,
        };
        g.live |= 1 << i;
        let e = &mut g.entries[i];
        e.users = 1;
        e.key.set(key);
        e.reading = false;
        e.writing = false;
        e.pending = None;
        // Generations and sequence numbers go on from the entry's last users, never back to
        // 0: a leader replaced at its lease (its count released by its replacer) may still
        // come back, and must find no generation or sequence number of its own among the
        // new users' (it would publish its old READ as their read, or mark their values
        // applied, under another key's users even).
        e.done_gen = e.read_gen;
        e.applied_seq = e.pending_seq;
        e.taken_seq = e.pending_seq;
        (e.open, e.inflight) = (0, 0);
        // Every record's writers are gone with the entry's users (its sequence numbers are
        // all below the new users').
        for a in &mut e.results {
            a.left = 0;
        }
        e.publisher_waits = false;
        // Nobody waits on an entry without users.
        e.parked.clear();
        Some((At(b, i), f(e)))
    }

    /// Runs `f` on the claimed entry `at` under its bucket's lock.
    async fn with<R>(&self, at: At, f: impl FnOnce(&mut Entry<F>) -> R) -> R {
        let mut g = self.lock(at.0).await;
        f(&mut g[at.1])
    }

    /// Waits on the claimed entry `at`: `decide` runs under its bucket's lock, with the
    /// waiter's clock, at once and each time the waiter is woken or its timer fires; `Ok`
    /// ends the wait, `Err(ns)` parks the waiter in the entry (woken by whoever changes
    /// it next) with a timer of `ns` (its next lease check).
    async fn park<R>(
        &self,
        at: At,
        host: &impl Host,
        mut decide: impl FnMut(&mut Entry<F>, u64) -> Result<R, u64>,
    ) -> R {
        let check = |cx: &mut core::task::Context<'_>| {
            let now = host.now_ns();
            let Some(mut g) = self.buckets[at.0].try_lock() else {
                return Check::Retry;
            };
            let e = &mut g[at.1];
            match decide(e, now) {
                Ok(r) => Check::Done(r),
                Err(ns) if e.parked.park(0, cx.waker()) => Check::Park(ns),
                // Every slot taken: poll.
                Err(_) => Check::Retry,
            }
        };
        park::wait(check, |ns| host.pause(ns)).await
    }

    /// Users counted on `key`'s entries (tests).
    #[cfg(test)]
    pub(crate) fn users(&self, key: &[u8]) -> u32 {
        let b = (F::home(key) as usize) & (self.buckets.len() - 1);
        let g = self.buckets[b]
            .try_lock()
            .expect("bucket free between operations");
        g.iter()
            .filter(|e| e.users > 0 && e.key.get() == key)
            .map(|e| e.users)
            .sum()
    }
}

#[cfg(test)]
mod tests;

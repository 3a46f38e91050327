//! Owned locks with leases, and how a waiter takes over from a dead holder: the one place
//! that states the protocol every index's remote locks follow.
//!
//! In disaggregated memory the clients hold the locks, and a client can die (or stall) at any
//! verb while holding one. A lock that only says "taken" would then stop everyone for good.
//!
//! # The lock word
//! An aligned 8-byte word: 0 when free, else [`owner_word`]`(client, tag)`: the holder's
//! fabric client id ([`Endpoint::client_id`]) in the high 32 bits and a nonzero tag of the
//! holder's choosing in the low 32 (a per-acquisition counter, so that every acquisition — and
//! every refresh — writes a word never seen before). Locks are taken by CMP_AND_SWP from 0 and
//! released by a WRITE (or CAS) of 0, ordered after the protected writes by the queue pair.
//!
//! # Waiting, and the lease
//! A waiter never spins on a budget of attempts alone. It backs off exponentially
//! ([`Waiter`], `min_backoff_ns` doubling to `max_backoff_ns`, measured on the fabric clock,
//! virtual on the sim), and it watches the lock word: a word that stays *the same* for a
//! whole lease (`lease_ns`, measured on the waiter's own clock, so no clock is compared
//! across machines) means its holder made no progress for that long. A waiter that looks at
//! a steady pace can count only the time it spent watching ([`Waiter::watching`]: a gap
//! between two of its looks adds at most [`Waiter::max_gap`], since a waiter descheduled for
//! longer cannot vouch that the holder had the CPU meanwhile). A live holder whose critical
//! section can outlast a lease refreshes the word (CAS to a new tag) before then.
//!
//! # Taking over
//! Once the lease has run out on a word `w`:
//! 1. **Fence** the holder: [`Endpoint::fence`]`(node, holder(w))`. When it resolves, the
//!    memory node has revoked the holder's access (its queue pair or key), so a holder that
//!    was only slow can no longer write under a lock it lost — the safety of the takeover
//!    rests on this step, not on timing.
//! 2. **CAS** the lock word from `w` to the waiter's own word. Failure means the holder
//!    released it in time or another waiter won: go back to waiting.
//! 3. **Repair** what the holder may have left half-done (a torn page, a half-applied split),
//!    from what the data structure itself records, before using the protected data. That is
//!    each index's business; the lock only says that it must happen.
//!
//! A fabric that cannot fence (see [`Endpoint::fence`]) makes step 1 fail: the waiter then
//! reports the lock as held by an unresponsive client instead of breaking it unsafely.
//!
//! # Bounds
//! Every wait has a deadline (`deadline_ns` on the fabric clock) and, for fabrics without a
//! clock, a cap on attempts; past either the operation fails with an error that names the lock
//! word and its holder. With the defaults a dead holder costs its waiters about one lease.
//!
//! # Stalls: deadlines count the time the waiter watched
//! A waiter's own process can be stopped (SIGSTOP, a descheduled guest vCPU, a loaded host)
//! for longer than any deadline, and whatever it waits for (a sibling coroutine's lock, a
//! reply) was most likely stopped with it: a deadline on wall time would fail a wait whose
//! holder is alive and about to release. So every deadline of a wait is a [`Watched`] budget,
//! the one helper for it: it is spent in looks at most a sixteenth of it apart, and a gap
//! between two looks counts at most two sixteenths, however long it really was. A waiter that
//! parks (on a timer) arms the timer for at most [`Watched::pause_ns`], so a timer that fires
//! late (its process was stopped) counts only that much and the waiter re-arms for what it did
//! not see, instead of failing ([`recv_within`]: the one wait for a server's reply). Waits stay
//! bounded: the attempt cap stays, and a wait also ends once [`STALL_BOUND`] times its budget
//! has passed on the clock, stalls included. A lease that decides a holder is dead (and
//! fences it, or reports its ticket, or repairs what it protects) counts time watched the same
//! way, a gap at most [`LeaseConfig::max_gap`] ([`Waiter::watching`], [`Stretch`]). On the
//! sim's virtual clock a waiter never sees a gap above the cap, so a budget is spent exactly
//! as a plain deadline would be.
//!
//! Clock time that must not be shortened stays clock time: how long an operation attempt has
//! run against memory that may be reused (SMART's and CHIME's reclamation), and grace periods
//! before reuse. A stall there only makes the waiter more careful.
use crate::fabric::{Endpoint, FabricError, QueuePair, Recv};
use core::future::{Future, poll_fn};
use core::pin::{Pin, pin};
use core::task::Poll;
use remora_layouts::GlobalAddr;

/// The lock word of `client` holding with `tag` (nonzero).
pub const fn owner_word(client: u32, tag: u32) -> u64 {
    (client as u64) << 32 | (if tag == 0 { 1 } else { tag }) as u64
}

/// The client id named by a lock word.
pub const fn holder(word: u64) -> u32 {
    (word >> 32) as u32
}

/// How long waiters wait, and when a holder counts as dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    /// A lock word unchanged for this long has a dead (or fenced-to-be) holder.
    pub lease_ns: u64,
    /// The first pause after a failed attempt, in nanoseconds; each retry doubles it.
    pub min_backoff_ns: u64,
    /// The longest pause between attempts, in nanoseconds.
    pub max_backoff_ns: u64,
    /// A wait that lasts longer fails (several leases: takeovers can chain).
    pub deadline_ns: u64,
    /// For fabrics without a clock: attempts before failing.
    pub max_attempts: u32,
}

impl LeaseConfig {
    /// The bounds of a spinning wait that started at `now` (fabric clock): every retry
    /// pauses the least the fabric allows (1 ns: the waiter's other coroutines still run),
    /// as the authors' codes of Sherman and SMART retry a lock CAS at once. On a fabric whose
    /// clock runs (`now > 0`) only the lease and the deadline end the wait: a spinner makes
    /// attempts at the pace of CAS round trips, so the attempt cap would cut short a wait
    /// that a backing-off waiter survives.
    pub const fn spinning(self, now: u64) -> LeaseConfig {
        LeaseConfig {
            min_backoff_ns: 1,
            max_backoff_ns: 1,
            max_attempts: if now > 0 { u32::MAX } else { self.max_attempts },
            ..self
        }
    }

    /// The most one gap between two looks adds to a lease counted in time watched
    /// ([`Waiter::watching`], [`Stretch`]): an eighth of it, and at least two of the longest
    /// back-offs (a waiter's ordinary pace is one back-off and a round trip).
    pub const fn max_gap(&self) -> u64 {
        let g = self.lease_ns / 8;
        let b = self.max_backoff_ns.saturating_mul(2);
        let g = if g > b { g } else { b };
        if g > 1 { g } else { 1 }
    }

    /// 10 ms leases: far above any critical section of remora's indexes (microseconds) and
    /// above a scheduler time slice, so a preempted holder is rarely fenced.
    pub const fn default_lease() -> LeaseConfig {
        LeaseConfig {
            lease_ns: 10_000_000,
            min_backoff_ns: 200,
            max_backoff_ns: 100_000,
            deadline_ns: 1_000_000_000,
            max_attempts: 1_000_000,
        }
    }
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self::default_lease()
    }
}

/// What a waiter should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Pause this long, then try again.
    Wait(u64),
    /// The word has not changed for a whole lease: fence its holder and take over.
    Expired {
        /// The unchanged lock word, naming the holder to fence.
        word: u64,
    },
    /// The wait is over its deadline or attempt budget.
    GiveUp {
        /// The lock word as last observed.
        word: u64,
        /// Nanoseconds waited (fabric clock).
        waited_ns: u64,
    },
}

/// A wait that lasts this many times its budget on the clock, stalls included, fails anyway
/// (the bound that keeps a [`Watched`] wait from lasting forever; far above any stall a
/// process is meant to survive).
pub const STALL_BOUND: u64 = 60;

/// A wait budget on the fabric clock that counts only the time its waiter watched (the
/// module's "Stalls"): spent in pauses of at most a sixteenth of it ([`Self::pause_ns`]), a
/// stretch between two looks counting at most two such pauses. Also spent once
/// [`STALL_BOUND`] times the budget has passed on the clock.
#[derive(Debug, Clone, Copy)]
pub struct Watched {
    left: u64,
    step: u64,
    last: u64,
    start: u64,
    wall: u64,
}

impl Watched {
    /// A budget of `budget_ns`, starting at clock reading `now`.
    pub fn new(now: u64, budget_ns: u64) -> Watched {
        Watched {
            left: budget_ns,
            step: (budget_ns / 16).max(1),
            last: now,
            start: now,
            wall: budget_ns.saturating_mul(STALL_BOUND),
        }
    }

    /// Notes clock reading `now` and returns what is left of the budget (0: spent). The
    /// stretch since the last note counts at most two pauses ([`Self::pause_ns`]); a reading
    /// before the last one counts nothing.
    pub fn note(&mut self, now: u64) -> u64 {
        let d = now.saturating_sub(self.last).min(2 * self.step);
        self.last = self.last.max(now);
        self.left = self.left.saturating_sub(d);
        if self.last.saturating_sub(self.start) > self.wall {
            self.left = 0;
        }
        self.left
    }

    /// How long the next pause (or parked waiter's timer) may be: every wait under this
    /// budget lasts at most this long before it notes the clock again.
    pub fn pause_ns(&self) -> u64 {
        self.step.min(self.left).max(1)
    }

    /// Clock time since the budget started, stalls included (for error messages).
    pub fn wall_ns(&self, now: u64) -> u64 {
        now.saturating_sub(self.start)
    }
}

/// `a`'s output, or `None` if `b` finishes first.
pub async fn race<A: Future, B: Future>(
    mut a: Pin<&mut A>,
    mut b: Pin<&mut B>,
) -> Option<A::Output> {
    poll_fn(move |cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        if b.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// A RECV on `qp` into `buf`, waited for at most what is left of `w` (time watched: a
/// client stopped while it waits for a reply does not call a live server dead for that):
/// `w` noted now and whenever a timer of at most [`Watched::pause_ns`] fires. `None` once
/// `w` is spent (a server that took the request and crashed never answers).
pub async fn recv_within<E: Endpoint>(
    ep: &E,
    qp: &E::Qp,
    buf: &mut [u8],
    w: &mut Watched,
) -> Option<Result<Recv, FabricError>> {
    let mut recv = pin!(qp.recv(buf));
    while w.note(ep.now_ns()) > 0 {
        let timer = pin!(ep.pause(w.pause_ns()));
        if let Some(r) = race(recv.as_mut(), timer).await {
            return Some(r);
        }
    }
    None
}

/// One waiter's view of one lock word (see the module docs).
///
/// By default the lease runs from the first observation of a word, every gap counted in
/// full. A [`Waiter::watching`] waiter counts only time it watched: between two
/// observations of the same word at most [`Waiter::max_gap`] (a caller that had watched the
/// word before, as Sherman's reader that met a torn leaf, hands that time over:
/// [`Waiter::seen_for`]). A waiter that was itself
/// descheduled for longer saw nothing of the holder meanwhile, and on an oversubscribed
/// machine the holder was most likely descheduled with it: counting that gap fenced live
/// holders that resumed microseconds later (Erda's soft lincheck under load, 144 ms between
/// two looks, the grant finished right after). A dead holder is still found after one lease
/// of watching.
#[derive(Debug, Clone, Copy)]
pub struct Waiter {
    cfg: LeaseConfig,
    start: u64,
    /// The deadline, in time watched (the module's "Stalls"; one more ns: a wait fails once
    /// it watched more than `deadline_ns`).
    deadline: Watched,
    seen: u64,
    /// How long the waiter has watched `seen` (gaps capped: uncapped unless
    /// [`Waiter::watching`]).
    lease: Stretch,
    backoff: u64,
    attempts: u32,
}

/// How long a waiter has watched something (a lock word, a torn page) on the fabric clock:
/// the stretches between its looks, each counted up to a cap, so that a waiter stopped
/// between two looks counts at most the cap for that gap (the module's "Stalls"). The lease
/// of a [`Waiter::watching`] waiter; a reader hands one to the [`Waiter`] that takes over
/// ([`Waiter::seen_for`]).
#[derive(Debug, Clone, Copy)]
pub struct Stretch {
    watched: u64,
    last: u64,
    cap: u64,
}

impl Stretch {
    /// Nothing watched yet, from clock reading `now`; each gap between looks counts at most
    /// `cap` (for a lease: [`LeaseConfig::max_gap`]).
    pub const fn new(now: u64, cap: u64) -> Stretch {
        Stretch {
            watched: 0,
            last: now,
            cap,
        }
    }

    /// A look at clock reading `now`; returns the time watched so far. A reading before the
    /// last one counts nothing.
    pub fn note(&mut self, now: u64) -> u64 {
        let gap = now.saturating_sub(self.last);
        self.watched = self.watched.saturating_add(gap.min(self.cap));
        self.last = self.last.max(now);
        self.watched
    }
}

impl Waiter {
    /// A waiter whose wait starts at `now` (fabric clock, nanoseconds).
    pub fn new(cfg: LeaseConfig, now: u64) -> Waiter {
        Waiter {
            cfg,
            start: now,
            deadline: Watched::new(now, cfg.deadline_ns.saturating_add(1)),
            seen: 0,
            lease: Stretch::new(now, u64::MAX),
            backoff: cfg.min_backoff_ns.max(1),
            attempts: 0,
        }
    }

    /// When the wait started (fabric clock).
    pub fn started(&self) -> u64 {
        self.start
    }

    /// This waiter counts only the time it watched (see the type's docs): for a waiter that
    /// looks at a steady pace (its back-off and a round trip).
    pub fn watching(mut self) -> Waiter {
        self.lease.cap = self.max_gap();
        self
    }

    /// [`Self::watching`], for a waiter whose looks are up to `pause_ns` apart by design (a
    /// wait for a notice, with a timer to look anyway): a gap counts up to two such pauses
    /// too.
    pub fn watching_paced(mut self, pause_ns: u64) -> Waiter {
        self.lease.cap = self.max_gap().max(pause_ns.saturating_mul(2));
        self
    }

    /// A first look that found `word` at `now`, a word the caller had already watched for
    /// `before` (noted again at `now`): its lease counts that time too (a reader that met
    /// a torn page and watched its lock word, [`Stretch`], before waiting for the lock).
    pub fn seen_for(&mut self, word: u64, before: Stretch, now: u64) {
        let mut before = before;
        let watched = before.note(now);
        // A verdict on a first look is moot.
        let _ = self.observe(word, now);
        if word != 0 && word == self.seen {
            self.lease.watched = watched;
        }
    }

    /// The lock was found holding `word` at `now`.
    pub fn observe(&mut self, word: u64, now: u64) -> Verdict {
        self.attempts = self.attempts.saturating_add(1);
        if word != self.seen {
            self.seen = word;
            self.lease = Stretch::new(now, self.lease.cap);
        } else {
            self.lease.note(now);
        }
        if self.deadline.note(now) == 0 || self.attempts > self.cfg.max_attempts {
            return Verdict::GiveUp {
                word,
                waited_ns: now.saturating_sub(self.start),
            };
        }
        if word != 0 && self.lease.watched >= self.cfg.lease_ns {
            // Start a fresh lease on this word, in case the takeover fails and it stays.
            self.lease.watched = 0;
            return Verdict::Expired { word };
        }
        let pause = self.backoff;
        self.backoff = (self.backoff * 2).min(self.cfg.max_backoff_ns.max(1));
        Verdict::Wait(pause)
    }

    /// The most one gap between two observations adds to the lease of a
    /// [`Waiter::watching`] waiter ([`LeaseConfig::max_gap`]).
    pub fn max_gap(&self) -> u64 {
        self.cfg.max_gap()
    }
}

/// Why a lock could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockError {
    /// The fabric failed a request.
    Fabric(FabricError),
    /// Held past the deadline by `holder`, whom the fabric could not fence.
    Held {
        /// The lock word's address.
        at: GlobalAddr,
        /// The lock word as last read.
        word: u64,
        /// The fabric client id the word names.
        holder: u32,
        /// Nanoseconds waited (fabric clock).
        waited_ns: u64,
    },
}

impl From<FabricError> for LockError {
    fn from(e: FabricError) -> Self {
        LockError::Fabric(e)
    }
}

impl core::fmt::Display for LockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            LockError::Fabric(e) => write!(f, "{e}"),
            LockError::Held {
                at,
                word,
                holder,
                waited_ns,
            } => write!(
                f,
                "lock at {at} held by client {holder} (word {word:#018x}) for {waited_ns} ns \
                 past its lease, and it could not be fenced"
            ),
        }
    }
}

/// Whether the caller got the lock clean, or took it over from a dead holder (and must
/// repair what it may have left half-done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The lock was free, or released, when taken.
    Clean,
    /// Taken over from a holder silent for a whole lease, now fenced: the caller repairs what
    /// it may have left half-done.
    TookOver {
        /// The fabric client id of the dead holder.
        from: u32,
    },
}

/// Takes the lock word at `at` for `mine` (an [`owner_word`]) under the protocol above: CAS
/// from 0, back off while the word changes, fence and take over once it has not changed for a
/// lease. An index whose lock CAS travels with other verbs (a READ in the same doorbell)
/// drives a [`Waiter`] itself instead.
pub async fn acquire<E: Endpoint>(
    ep: &E,
    at: GlobalAddr,
    mine: u64,
    cfg: LeaseConfig,
) -> Result<Acquired, LockError> {
    let qp = ep.qp_for(at)?;
    let mut w = Waiter::new(cfg, ep.now_ns());
    let mut expected = 0u64;
    let mut took_from = None;
    loop {
        let found = crate::fabric::QueuePair::cas(qp, at, expected, mine).await?;
        if found == expected {
            return Ok(match took_from {
                Some(from) if expected != 0 => Acquired::TookOver { from },
                _ => Acquired::Clean,
            });
        }
        expected = 0;
        took_from = None;
        match w.observe(found, ep.now_ns()) {
            Verdict::Wait(ns) => ep.pause(ns).await,
            Verdict::Expired { word } => match ep.fence(at.node(), holder(word)).await {
                Ok(()) => {
                    expected = word;
                    took_from = Some(holder(word));
                }
                Err(FabricError::Unsupported { .. }) => {
                    return Err(LockError::Held {
                        at,
                        word,
                        holder: holder(word),
                        waited_ns: ep.now_ns().saturating_sub(w.start),
                    });
                }
                Err(e) => return Err(LockError::Fabric(e)),
            },
            Verdict::GiveUp { word, waited_ns } => {
                return Err(LockError::Held {
                    at,
                    word,
                    holder: holder(word),
                    waited_ns,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1 us lease, back-off from 10 ns to `max_backoff_ns`, a deadline, no attempt cap.
    fn test_cfg(max_backoff_ns: u64, deadline_ns: u64) -> LeaseConfig {
        LeaseConfig {
            lease_ns: 1000,
            min_backoff_ns: 10,
            max_backoff_ns,
            deadline_ns,
            max_attempts: 1_000_000,
        }
    }

    #[test]
    fn a_changing_word_never_expires_and_a_stuck_one_does() {
        let cfg = test_cfg(80, 100_000);
        let mut w = Waiter::new(cfg, 0);
        // A holder that hands the lock on keeps changing the word: only waiting.
        let mut pauses = [0u64; 6];
        for (i, p) in pauses.iter_mut().enumerate() {
            match w.observe(owner_word(i as u32 + 1, 1), i as u64 * 900) {
                Verdict::Wait(ns) => *p = ns,
                v => panic!("{v:?}"),
            }
        }
        assert_eq!(pauses, [10, 20, 40, 80, 80, 80], "exponential, capped");
        // The same word for a whole lease: expired, once per lease.
        let stuck = owner_word(9, 3);
        assert!(matches!(w.observe(stuck, 10_000), Verdict::Wait(_)));
        assert!(matches!(w.observe(stuck, 10_999), Verdict::Wait(_)));
        assert_eq!(w.observe(stuck, 11_000), Verdict::Expired { word: stuck });
        assert!(matches!(w.observe(stuck, 11_500), Verdict::Wait(_)));
        // Watched at a steady pace, it gives up past the deadline (expiring once a lease).
        let mut t = 11_500;
        while !matches!(w.observe(stuck, t), Verdict::GiveUp { .. }) {
            t += 80;
        }
        assert!(t > 100_000 && t <= 100_080, "{t}");
        assert_eq!(holder(stuck), 9);
    }

    #[test]
    fn time_the_waiter_was_not_watching_does_not_count() {
        let cfg = test_cfg(40, 100_000);
        // Without `watching`, the gap counts in full.
        let mut plain = Waiter::new(cfg, 0);
        let stuck = owner_word(9, 3);
        assert!(matches!(plain.observe(stuck, 0), Verdict::Wait(_)));
        assert_eq!(plain.observe(stuck, 3000), Verdict::Expired { word: stuck });
        let mut w = Waiter::new(cfg, 0).watching();
        assert_eq!(w.max_gap(), 125);
        assert!(matches!(w.observe(stuck, 0), Verdict::Wait(_)));
        // The waiter was descheduled for three leases between two looks: that gap adds
        // `max_gap`, not a lease (the holder was likely descheduled with it).
        assert!(matches!(w.observe(stuck, 3000), Verdict::Wait(_)));
        // Watching on at its ordinary pace, it expires the word once the looks span a lease.
        let mut t = 3000;
        while let Verdict::Wait(_) = w.observe(stuck, t + 50) {
            t += 50;
            assert!(t < 5000, "never expired");
        }
        // 125 ns credited for the gap, then 18 looks 50 ns apart: 125 + 900 >= 1000.
        assert_eq!(t + 50, 3000 + 18 * 50);
    }

    #[test]
    fn a_watched_budget_is_spent_exactly() {
        let mut w = Watched::new(1_000, 1_600);
        let mut now = 1_000;
        let mut pauses = 0;
        while w.note(now) > 0 {
            now += w.pause_ns();
            pauses += 1;
        }
        assert_eq!(pauses, 16);
        assert_eq!(now, 2_600);
    }

    #[test]
    fn time_the_waiter_was_away_counts_two_pauses_at_most() {
        let mut w = Watched::new(0, 1_600);
        // Descheduled for ten times the budget between two looks.
        assert_eq!(w.note(16_000), 1_400);
        assert_eq!(w.note(16_050), 1_350);
        // A clock that goes backwards (another core's reading) counts nothing, nor does the
        // stretch back up to the latest reading.
        assert_eq!(w.note(10), 1_350);
        assert_eq!(w.note(16_060), 1_340);
        // Past STALL_BOUND budgets of clock time the wait is over, however little it watched.
        assert_eq!(w.note(STALL_BOUND * 1_600), 1_340 - 200);
        assert_eq!(w.note(STALL_BOUND * 1_600 + 1), 0);
        assert_eq!(w.wall_ns(STALL_BOUND * 1_600 + 1), STALL_BOUND * 1_600 + 1);
    }

    /// Issue 26: a waiter whose process was stopped for five deadlines between two looks (a
    /// sibling coroutine held the lock, stopped with it) waits on instead of giving up; a
    /// holder that never lets go still ends the wait after one deadline of watching, and the
    /// attempt cap and the wall bound still end it.
    #[test]
    fn a_stall_between_two_looks_does_not_spend_the_deadline() {
        let cfg = test_cfg(40, 16_000);
        let sibling = owner_word(7, 1);
        let mut w = Waiter::new(cfg, 0);
        assert!(matches!(w.observe(sibling, 0), Verdict::Wait(_)));
        // Stopped for 5 deadlines: the next look is still a wait (it was a GiveUp when the
        // deadline counted wall time).
        assert!(
            !matches!(w.observe(sibling, 80_000), Verdict::GiveUp { .. }),
            "a stall of 5 deadlines spent the deadline"
        );
        // The holder, still there, is watched on at a steady pace: the wait ends once the
        // looks span the rest of the deadline (a stall counts 2/16 of it).
        let mut t = 80_000;
        let waited = loop {
            t += 40;
            if let Verdict::GiveUp { waited_ns, .. } = w.observe(sibling, t) {
                break waited_ns;
            }
            assert!(t < 200_000, "never gave up");
        };
        assert_eq!(waited, t, "reports clock time waited");
        assert!(t > 80_000 + 14_000 && t <= 80_000 + 16_040, "{t}");
        // The wall bound: a waiter stalled again and again gives up after STALL_BOUND
        // deadlines of clock time.
        let mut w = Waiter::new(cfg, 0);
        let mut t = 0;
        let end = loop {
            if let Verdict::GiveUp { waited_ns, .. } = w.observe(sibling, t) {
                break waited_ns;
            }
            // Seven stalls of ten deadlines watch 7 x 2/16 of the deadline.
            t += 160_000;
        };
        assert_eq!(
            end,
            7 * 160_000,
            "past {STALL_BOUND} deadlines of clock time"
        );
    }

    /// Issue 26: a reader that watched a torn page's lock word and was then stopped for five
    /// leases hands the lock's waiter only the time it watched ([`Stretch`]: the stall
    /// counts one gap), so the waiter does not expire the word on its first look; a reader
    /// that watched the word for a whole lease at its pace hands over an expired lease.
    #[test]
    fn a_readers_stall_does_not_count_towards_the_lease_it_hands_over() {
        let cfg = test_cfg(40, 100_000);
        let stuck = owner_word(9, 3);
        // Watched at its pace (50 ns) for a lease: the waiter's first look expires it.
        let mut r = Stretch::new(0, cfg.max_gap());
        for t in (50..=1000).step_by(50) {
            r.note(t);
        }
        let mut w = Waiter::new(cfg, 1000).watching();
        w.seen_for(stuck, r, 1000);
        assert_eq!(w.observe(stuck, 1010), Verdict::Expired { word: stuck });
        // Watched 100 ns, then stopped for five leases: the gap counts `max_gap` (125 ns).
        let mut r = Stretch::new(0, cfg.max_gap());
        r.note(100);
        let mut w = Waiter::new(cfg, 5100).watching();
        w.seen_for(stuck, r, 5100);
        assert!(
            matches!(w.observe(stuck, 5110), Verdict::Wait(_)),
            "a stall of the reader expired a live holder's lease"
        );
        // The holder, still silent, is watched on: expired once 225 ns + the looks reach a
        // lease.
        let mut t = 5110;
        while let Verdict::Wait(_) = w.observe(stuck, t + 40) {
            t += 40;
            assert!(t < 7000, "never expired");
        }
        // 225 ns handed over, so 775 ns watched after the stall: the first look past them.
        assert!(t < 5100 + 775 && t + 40 >= 5100 + 775, "{t}");
        // A word that changed meanwhile starts a lease of its own.
        let mut w = Waiter::new(cfg, 1000).watching();
        let mut r = Stretch::new(0, cfg.max_gap());
        r.note(1000);
        w.seen_for(stuck, r, 1000);
        assert!(matches!(
            w.observe(owner_word(9, 4), 1010),
            Verdict::Wait(_)
        ));
    }

    /// Issue 26: a reply wait ([`recv_within`], WORT's and the Erda clients') whose process is
    /// stopped for five budgets between two looks waits on, and gets the reply that came
    /// meanwhile; a server that never answers still ends it after one budget of watching.
    #[test]
    #[cfg(feature = "alloc")]
    fn a_reply_wait_stopped_past_its_deadline_waits_on() {
        use crate::delegation::park::testing::Task;
        let ep = crate::testing::Stalled::default();
        ep.clock.now.set(1_000);
        let mut w = Watched::new(1_000, 1_600);
        let mut buf = [0u8; 16];
        let mut t = Task::new(recv_within(&ep, &ep, &mut buf, &mut w));
        assert!(!t.poll());
        assert_eq!(ep.clock.due.take(), Some(1_100), "a timer of a sixteenth");
        // Stopped: the timer fires five budgets late, the reply came meanwhile.
        ep.clock.now.set(1_000 + 5 * 1_600);
        assert!(!t.poll(), "gave up after a stall: {:?}", t.out);
        ep.reply.set(Some(8));
        assert!(t.poll());
        assert!(matches!(t.out, Some(Some(Ok(Recv { len: 8, .. })))));
        drop(t);
        assert_eq!(w.note(9_000), 1_400, "the stall counted two sixteenths");
        // Silent: ends once it watched the rest of its budget, timer by timer.
        let mut w = Watched::new(9_000, 1_600);
        let mut t = Task::new(recv_within(&ep, &ep, &mut buf, &mut w));
        ep.clock.now.set(9_000);
        let mut fired = 0;
        while !t.poll() {
            let due = ep.clock.due.take().expect("a timer");
            ep.clock.now.set(due);
            fired += 1;
            assert!(fired < 100);
        }
        assert!(matches!(t.out, Some(None)));
        assert_eq!((fired, ep.clock.now.get()), (16, 9_000 + 1_600));
    }

    #[test]
    fn a_clockless_fabric_is_bounded_by_attempts() {
        let cfg = LeaseConfig {
            max_attempts: 5,
            ..LeaseConfig::default()
        };
        let mut w = Waiter::new(cfg, 0);
        let mut n = 0;
        while let Verdict::Wait(_) = w.observe(owner_word(1, 1), 0) {
            n += 1;
            assert!(n < 100);
        }
        assert_eq!(n, 5);
    }
}

//! Bounded waits on the fabric clock: every loop of the tree that waits for something another
//! client must do (a page to verify, a root change to show, a sibling chain to settle) backs
//! off exponentially and ends at a deadline, never after a bare count of spins. A fabric
//! without a clock (`now_ns` stuck at 0) is bounded by the attempt cap instead. The clock is
//! first read at the first failed attempt, so a wait that never waits costs nothing.
//!
//! Deadline and lease count only the time the wait watched (`crate::lease`, "Stalls"): a
//! reader stopped while a page is torn under a live writer neither gives up nor takes that
//! writer for dead because of its own stall.
use crate::fabric::Endpoint;
use crate::lease::{LeaseConfig, Stretch, Watched};

pub(crate) struct Patience {
    cfg: LeaseConfig,
    /// The deadline in time watched, from the first failed attempt.
    watch: Option<Watched>,
    /// The time watched from the first failed attempt, each gap between looks counted up to
    /// [`LeaseConfig::max_gap`]: the measure of [`Self::past_lease`].
    lease: Option<Stretch>,
    /// The lock word noted while waiting ([`Self::saw`]), and the time watched since.
    word: Option<(u64, Stretch)>,
    backoff: u64,
    attempts: u32,
    /// Whether the deadline is spent.
    spent: bool,
}

impl Patience {
    pub(crate) fn new(cfg: LeaseConfig) -> Patience {
        Patience {
            cfg,
            watch: None,
            lease: None,
            word: None,
            backoff: cfg.min_backoff_ns.max(1),
            attempts: 0,
            spent: false,
        }
    }

    /// Nanoseconds since the first failed attempt (clock time, stalls included: for error
    /// messages).
    pub(crate) fn waited<E: Endpoint>(&self, ep: &E) -> u64 {
        self.watch.map_or(0, |w| w.wall_ns(ep.now_ns()))
    }

    /// The wait has watched for a lease or more (or, without a clock, made a tenth of the
    /// attempts): what it waits for has a dead client behind it and needs repairing.
    pub(crate) fn past_lease<E: Endpoint>(&mut self, ep: &E) -> bool {
        let now = ep.now_ns();
        self.lease.as_mut().map_or(0, |s| s.note(now)) >= self.cfg.lease_ns
            || self.attempts >= self.cfg.max_attempts / 10
    }

    /// Notes lock word `word`, just read, as the one that guards what this waits for (once:
    /// the first one noted stays).
    pub(crate) fn saw<E: Endpoint>(&mut self, word: u64, ep: &E) {
        if self.word.is_none() {
            self.word = Some((word, Stretch::new(ep.now_ns(), self.cfg.max_gap())));
        }
    }

    /// Whether a lock word was noted ([`Self::saw`]).
    pub(crate) fn saw_word(&self) -> bool {
        self.word.is_some()
    }

    /// The lock word noted and the time watched since, for the lock's waiter
    /// ([`crate::lease::Waiter::seen_for`]): if the word has not changed, its lease runs from
    /// when it was noted.
    pub(crate) fn seen<E: Endpoint>(&mut self, ep: &E) -> Option<(u64, Stretch)> {
        let now = ep.now_ns();
        self.word.as_mut().map(|(w, s)| {
            s.note(now);
            (*w, *s)
        })
    }

    /// Counts one more attempt without pausing (a step that makes progress, e.g. a move to a
    /// sibling); false once the deadline (time watched) or the attempt cap is passed.
    pub(crate) fn step<E: Endpoint>(&mut self, ep: &E) -> bool {
        self.attempts = self.attempts.saturating_add(1);
        let now = ep.now_ns();
        let w = self
            .watch
            .get_or_insert_with(|| Watched::new(now, self.cfg.deadline_ns.saturating_add(1)));
        self.spent = self.spent || w.note(now) == 0;
        let cap = self.cfg.max_gap();
        self.lease
            .get_or_insert_with(|| Stretch::new(now, cap))
            .note(now);
        if let Some((_, s)) = self.word.as_mut() {
            s.note(now);
        }
        self.attempts <= self.cfg.max_attempts && !self.spent
    }

    /// Backs off before the next attempt; false (without pausing) once the deadline or the
    /// attempt cap is passed.
    pub(crate) async fn pause<E: Endpoint>(&mut self, ep: &E) -> bool {
        if !self.step(ep) {
            return false;
        }
        ep.pause(self.backoff).await;
        self.backoff = (self.backoff * 2).min(self.cfg.max_backoff_ns.max(1));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{Waiter, owner_word};
    use crate::testing::Stalled;

    fn cfg() -> LeaseConfig {
        LeaseConfig {
            lease_ns: 1000,
            min_backoff_ns: 10,
            max_backoff_ns: 40,
            deadline_ns: 100_000,
            max_attempts: 1_000_000,
        }
    }

    /// Issue 26: a reader stopped for five leases while a leaf is torn under a live writer
    /// does not find the leaf torn "for a lease" when it resumes (it would take the lock and
    /// fence the writer), nor hand the lock's waiter a lease run out; a leaf that stays torn
    /// while it watches at its pace is past the lease after one lease.
    #[test]
    fn a_readers_stall_does_not_put_a_torn_page_past_its_lease() {
        let ep = Stalled::default();
        let word = owner_word(5, 1);
        let mut p = Patience::new(cfg());
        assert!(!p.past_lease(&ep), "no failed attempt yet");
        // The first failed attempt at 0 notes the lock word; one more look at 100.
        p.saw(word, &ep);
        assert!(p.saw_word());
        assert!(p.step(&ep));
        ep.clock.now.set(100);
        assert!(p.step(&ep));
        // Stopped for five leases: the gap counts `max_gap` (125 ns).
        ep.clock.now.set(5_100);
        assert!(
            !p.past_lease(&ep),
            "a stall put a live writer's leaf past its lease"
        );
        assert!(p.step(&ep), "nor spent the deadline");
        let (w, before) = p.seen(&ep).expect("the word");
        assert_eq!(w, word);
        let mut lock = Waiter::new(cfg(), 5_100).watching();
        lock.seen_for(word, before, 5_100);
        assert!(
            matches!(lock.observe(word, 5_110), crate::lease::Verdict::Wait(_)),
            "the lock's waiter got a lease run out"
        );
        // Torn on, watched at its pace: past the lease once 225 + 775 ns were watched.
        let mut t = 5_100;
        while !p.past_lease(&ep) {
            t += 40;
            ep.clock.now.set(t);
            assert!(p.step(&ep));
        }
        assert!((5_100 + 775..5_100 + 775 + 40).contains(&t), "{t}");
        assert_eq!(p.waited(&ep), t, "errors report clock time");
    }
}

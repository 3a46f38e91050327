//! How long a waiter spins before it sleeps: a poller with nothing to run, an application
//! thread blocked on an operation.
//!
//! Spinning sees the awaited event within nanoseconds and makes no syscall; sleeping costs
//! a futex wait and the waker's futex wake. On free cores events follow each other within
//! microseconds, so a waiter that spins a little never sleeps. On an oversubscribed host a
//! spinner holds a core that a thread it waits for may be queued on: Linux's scheduler
//! (EEVDF) lets the running thread finish its slice before a woken one preempts it, so the
//! awaited thread runs only once the spinner stops. There spinning only adds its own length
//! to every hand-over.
//!
//! So the spin adapts, as glibc's adaptive mutexes do: each wait spins at most its
//! `budget` (at most [`SPIN_AT_MOST`]); a spin that ends in sleep halves the budget (down to
//! [`SPIN_AT_LEAST`]), and one that sees its event after `t` raises it to `2t`. One wait in
//! [`PROBE_EVERY`] spins the full [`SPIN_AT_MOST`], so a budget shrunk under load grows back
//! once the cores are free again. The clock is read through the vDSO (no syscall), once at
//! the start and every 32 turns.
use std::time::{Duration, Instant};

/// The longest a waiter spins before it sleeps.
pub(crate) const SPIN_AT_MOST: Duration = Duration::from_micros(50);

/// The shortest spin budget, reached after spins that ended in sleep.
pub(crate) const SPIN_AT_LEAST: Duration = Duration::from_micros(2);

/// One wait in this many spins the full [`SPIN_AT_MOST`], whatever the budget.
pub(crate) const PROBE_EVERY: u32 = 16;

/// Turns between clock reads.
const CLOCK_EVERY: u32 = 32;

/// How a poller waits: at most `spins` empty turns and at most `spin_for` of spinning per
/// wait (the adaptive [`Spin`]'s ceiling), then it parks. `spins == u32::MAX` never parks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Patience {
    pub(crate) spins: u32,
    pub(crate) spin_for: Duration,
}

/// An adaptive spin: [`Spin::start`] a wait, [`Spin::keep_spinning`] each turn while the
/// event has not come, then [`Spin::slept`] (the caller slept) or [`Spin::seen`] (it came).
#[derive(Debug)]
pub(crate) struct Spin {
    /// The longest spin ([`SPIN_AT_MOST`] unless configured).
    most: Duration,
    budget: Duration,
    /// This wait's limit: the budget, or [`SPIN_AT_MOST`] when probing.
    limit: Duration,
    since: Option<Instant>,
    turns: u32,
    waits: u32,
}

impl Default for Spin {
    fn default() -> Spin {
        Spin::new(SPIN_AT_MOST)
    }
}

impl Spin {
    /// A spin of at most `most` per wait (the budget starts there).
    pub(crate) fn new(most: Duration) -> Spin {
        Spin {
            most,
            budget: most,
            limit: most,
            since: None,
            turns: 0,
            waits: 0,
        }
    }

    /// Whether a wait is under way (started, neither seen nor slept yet).
    pub(crate) fn waiting(&self) -> bool {
        self.since.is_some()
    }

    /// One turn of a wait (starting it if none is under way): true to spin again (after a
    /// `spin_loop` hint), false when the wait's limit has passed and the caller should sleep.
    pub(crate) fn keep_spinning(&mut self) -> bool {
        let Some(since) = self.since else {
            self.since = Some(Instant::now());
            self.turns = 0;
            self.waits = self.waits.wrapping_add(1);
            self.limit = if self.waits.is_multiple_of(PROBE_EVERY) {
                self.most
            } else {
                self.budget
            };
            std::hint::spin_loop();
            return true;
        };
        self.turns = self.turns.wrapping_add(1);
        if !self.turns.is_multiple_of(CLOCK_EVERY) || since.elapsed() < self.limit {
            std::hint::spin_loop();
            return true;
        }
        false
    }

    /// The event came during the wait: a budget below twice the time it took grows to it.
    pub(crate) fn seen(&mut self) {
        if let Some(since) = self.since.take() {
            let want = (since.elapsed() * 2).min(self.most);
            self.budget = self.budget.max(want);
        }
    }

    /// The wait ended in sleep: the spin was wasted, the next one is half as long.
    pub(crate) fn slept(&mut self) {
        self.since = None;
        self.budget = (self.budget / 2).max(SPIN_AT_LEAST.min(self.most));
    }

    /// The current budget (for tests and figures).
    #[cfg(test)]
    pub(crate) fn budget(&self) -> Duration {
        self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin_out(s: &mut Spin) -> u32 {
        let mut turns = 0;
        while s.keep_spinning() {
            turns += 1;
        }
        s.slept();
        turns
    }

    /// Spins that end in sleep halve the budget down to its floor; an event seen at once
    /// leaves a small budget small; a probe that sees an event late grows it back.
    #[test]
    fn the_budget_shrinks_on_sleeps_and_grows_back_on_probes() {
        let mut s = Spin::default();
        assert_eq!(s.budget(), SPIN_AT_MOST);
        for _ in 0..10 {
            spin_out(&mut s);
        }
        assert_eq!(s.budget(), SPIN_AT_LEAST);
        // Seen at once: stays near the floor.
        assert!(s.keep_spinning());
        s.seen();
        assert!(s.budget() < Duration::from_micros(10), "{:?}", s.budget());
        // Waits until the next probe spin out at the small budget; the probe spins longer
        // and sees its event after ~10 µs: the budget doubles that.
        while (s.waits + 1) % PROBE_EVERY != 0 {
            spin_out(&mut s);
        }
        assert!(s.keep_spinning(), "the probe's first turn");
        let t = Instant::now();
        // (Descheduled past the probe's limit, it ends: `seen` then counts the full time.)
        while t.elapsed() < Duration::from_micros(10) && s.keep_spinning() {}
        s.seen();
        assert!(s.budget() >= Duration::from_micros(20), "{:?}", s.budget());
    }

    /// A wait spins about its limit, then says to sleep.
    #[test]
    fn a_wait_ends_after_its_limit() {
        let mut s = Spin::default();
        let t = Instant::now();
        spin_out(&mut s);
        let took = t.elapsed();
        assert!(took >= SPIN_AT_MOST, "{took:?}");
    }
}

//! Bounded waits on the fabric clock: every loop of the tree that waits for something another
//! client must do (a page to verify, a root change to show, a sibling chain to settle) backs
//! off exponentially and ends at a deadline, never after a bare count of spins. A fabric
//! without a clock (`now_ns` stuck at 0) is bounded by the attempt cap instead. The clock is
//! first read at the first failed attempt, so a wait that never waits costs nothing.
use crate::fabric::Endpoint;
use crate::lease::{LeaseConfig, Watched};

pub(crate) struct Patience {
    cfg: LeaseConfig,
    /// The deadline in time watched (`crate::lease`, "Stalls"), from the first failed
    /// attempt.
    watch: Option<Watched>,
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
            backoff: cfg.min_backoff_ns.max(1),
            attempts: 0,
            spent: false,
        }
    }

    /// Nanoseconds since the first failed attempt (clock time).
    pub(crate) fn waited<E: Endpoint>(&self, ep: &E) -> u64 {
        self.watch.map_or(0, |w| w.wall_ns(ep.now_ns()))
    }

    /// The wait has lasted a lease or more (or, without a clock, a tenth of the attempts):
    /// what it waits for has a dead client behind it and needs repairing.
    pub(crate) fn past_lease<E: Endpoint>(&self, ep: &E) -> bool {
        self.waited(ep) >= self.cfg.lease_ns || self.attempts >= self.cfg.max_attempts / 10
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

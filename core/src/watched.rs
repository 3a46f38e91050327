//! Deadlines that count only the time their waiter watched.
//!
//! A client that waits for a memory node's reply must give up some time (a crashed node never
//! answers), but on a loaded machine the waiting thread itself can be descheduled for
//! hundreds of milliseconds: that time says nothing about the node, and a deadline that counts
//! it calls a live node dead. [`Watched`] is a budget spent in pauses of at most a sixteenth of
//! it; a stretch between two looks at the clock counts at most two such pauses, however long it
//! really was. A fabric whose clock only moves while its clients wait (the sim's virtual time)
//! spends exactly the budget, as a plain deadline would.

/// A wait budget on the fabric clock (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Watched {
    left: u64,
    step: u64,
    last: u64,
}

impl Watched {
    /// A budget of `budget_ns`, starting at clock reading `now`.
    pub fn new(now: u64, budget_ns: u64) -> Watched {
        Watched {
            left: budget_ns,
            step: (budget_ns / 16).max(1),
            last: now,
        }
    }

    /// Notes clock reading `now` and returns what is left of the budget (0: spent). The
    /// stretch since the last note counts at most two pauses ([`Self::pause_ns`]).
    pub fn note(&mut self, now: u64) -> u64 {
        let d = now.saturating_sub(self.last).min(2 * self.step);
        self.last = now;
        self.left = self.left.saturating_sub(d);
        self.left
    }

    /// How long the next pause may be: every wait under this budget lasts at most this long
    /// before it notes the clock again.
    pub fn pause_ns(&self) -> u64 {
        self.step.min(self.left).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::Watched;

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
        // A clock that goes backwards (another core's reading) counts nothing.
        assert_eq!(w.note(10), 1_350);
    }
}

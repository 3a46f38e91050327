//! The adaptive switch between fast messaging and RDMA offloading: the paper's Algorithm 1,
//! line by line.
//!
//! Before each search the client takes `U`, the server's CPU utilisation from a fresh
//! heartbeat, or 0 when none arrived (lines 4-10). Then (lines 11-16):
//!
//! ```text
//! if U > T and r_off <= r_busy * N:  r_busy += 1;  r_off = rand() % N + (r_busy - 1) * N
//! else:                              r_busy = 0
//! if r_off > 0: r_off -= 1; offload    else: fast messaging
//! ```
//!
//! How "binary exponential back-off" is read here: the paper borrows the name from
//! Ethernet (a random draw from a window that moves away while the medium stays busy), but
//! its Algorithm 1 (line 13) and its text ("[0, N), then [N, 2N) ... without an upper
//! bound") move the window by N per consecutive busy round: stage k draws from
//! `[(k-1)N, kN)`. This module follows the algorithm as printed, not a doubling window
//! (`[2^(k-2)N, 2^(k-1)N)`, which an earlier version of this module used). Two more
//! consequences of taking it literally: a busy report while still offloading re-draws
//! (extends) the rounds, as the paper says ("the offloading rounds will extend"), and a
//! search without a fresh heartbeat (U = 0) resets `r_busy` but lets the drawn rounds run
//! out.
use super::client::Mode;

/// Parameters of the back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// N: the first window of offloaded rounds (the paper uses 8).
    pub window: u64,
    /// T: load (per-mille) above which the server is busy (the paper uses 95 %).
    pub busy_permille: u16,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            window: 8,
            busy_permille: 950,
        }
    }
}

/// One client's back-off state.
#[derive(Debug, Clone)]
pub struct Backoff {
    cfg: BackoffConfig,
    /// Consecutive busy observations (r_busy).
    busy_streak: u32,
    /// Searches still to offload (r_off).
    offload_left: u64,
    rng: u64,
}

impl Backoff {
    /// A back-off in its initial state (messaging everything), its random draws seeded with `seed`.
    pub fn new(cfg: BackoffConfig, seed: u64) -> Backoff {
        Backoff {
            cfg,
            busy_streak: 0,
            offload_left: 0,
            rng: seed | 1,
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Lines 4-16 of Algorithm 1 for the next search: `load_permille` is the utilisation of
    /// a fresh heartbeat, `None` when none arrived (U = 0).
    pub fn observe(&mut self, load_permille: Option<u16>) {
        let u = load_permille.unwrap_or(0);
        let n = self.cfg.window.max(1);
        let busy = u64::from(self.busy_streak);
        if u > self.cfg.busy_permille && self.offload_left <= busy.saturating_mul(n) {
            self.busy_streak = self.busy_streak.saturating_add(1);
            let base = u64::from(self.busy_streak - 1).saturating_mul(n);
            self.offload_left = base.saturating_add(self.next_random() % n);
        } else {
            self.busy_streak = 0;
        }
    }

    /// Consecutive busy rounds (r_busy).
    pub fn busy_streak(&self) -> u32 {
        self.busy_streak
    }

    /// The mode of the next search (consumes one offloaded round).
    pub fn next_mode(&mut self) -> Mode {
        if self.offload_left > 0 {
            self.offload_left -= 1;
            Mode::Offload
        } else {
            Mode::Messaging
        }
    }

    /// Searches still to be offloaded.
    pub fn offload_left(&self) -> u64 {
        self.offload_left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_algorithm_1_as_printed() {
        let n = 8u64;
        let mut b = Backoff::new(BackoffConfig::default(), 7);
        b.observe(None);
        assert_eq!(b.next_mode(), Mode::Messaging, "no heartbeat: U = 0");
        b.observe(Some(950));
        assert_eq!(b.next_mode(), Mode::Messaging, "T itself is not busy");
        // Consecutive busy rounds: stage k draws r_off from [(k-1)N, kN), and a busy report
        // while offloading extends the rounds.
        for k in 1..=40u64 {
            b.observe(Some(990));
            assert_eq!(u64::from(b.busy_streak()), k);
            let drawn = b.offload_left();
            assert!(((k - 1) * n..k * n).contains(&drawn), "stage {k}: {drawn}");
            if drawn > 0 {
                assert_eq!(b.next_mode(), Mode::Offload);
            }
        }
        // A round without a fresh heartbeat resets r_busy; the drawn rounds run out.
        let left = b.offload_left();
        b.observe(None);
        assert_eq!((b.busy_streak(), b.offload_left()), (0, left));
        for _ in 0..left {
            assert_eq!(b.next_mode(), Mode::Offload);
        }
        assert_eq!(b.next_mode(), Mode::Messaging);
        // Busy again after the reset: back to the first window.
        b.observe(Some(1000));
        assert!(b.offload_left() < n && b.busy_streak() == 1);
        // r_off > r_busy * N: a busy report does not re-draw (and resets r_busy), as line 11.
        let mut b = Backoff::new(BackoffConfig::default(), 3);
        b.busy_streak = 1;
        b.offload_left = 9;
        b.observe(Some(1000));
        assert_eq!((b.busy_streak(), b.offload_left()), (0, 9));
        // The draws of one stage cover the window.
        let mut seen = [false; 8];
        let mut b = Backoff::new(BackoffConfig::default(), 11);
        for _ in 0..400 {
            b.busy_streak = 0;
            b.offload_left = 0;
            b.observe(Some(1000));
            seen[b.offload_left() as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "{seen:?}");
    }
}

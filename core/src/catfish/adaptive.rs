//! The adaptive switch between fast messaging and RDMA offloading (the paper's Algorithm 1,
//! a binary exponential back-off driven by the server's load reports).
//!
//! Each search observes the server's load (piggybacked on a messaging reply, or read from
//! the heartbeat word in the offloading search's first doorbell). When a search finds the
//! server busy (load above the threshold `T`), the client offloads its next `n` searches,
//! `n` drawn from `[0, N)`; if the server is still busy on the next observation, from
//! `[N, 2N)`, then `[2N, 4N)`, and so on without bound. A calm observation resets the
//! back-off stage but lets the rounds already drawn run out, so clients drift back to
//! messaging at different times. No observation (no heartbeat) changes nothing.
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

    /// Feeds the load seen by the last search (None: no fresh report).
    pub fn observe(&mut self, load_permille: Option<u16>) {
        let Some(load) = load_permille else { return };
        if self.offload_left > 0 {
            // Re-sensed once the drawn rounds are over, as Ethernet's back-off does.
            return;
        }
        if load <= self.cfg.busy_permille {
            self.busy_streak = 0;
            return;
        }
        self.busy_streak = self.busy_streak.saturating_add(1);
        let n = self.cfg.window.max(1);
        let (lo, hi) = if self.busy_streak == 1 {
            (0, n)
        } else {
            let shift = (self.busy_streak - 2).min(40);
            (n << shift, n << (shift + 1))
        };
        let draw = lo + self.next_random() % (hi - lo);
        self.offload_left = draw;
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
    use std_alloc::vec::Vec;

    #[test]
    fn backs_off_exponentially_while_busy_and_returns_when_calm() {
        let mut b = Backoff::new(BackoffConfig::default(), 7);
        assert_eq!(b.next_mode(), Mode::Messaging);
        b.observe(None);
        assert_eq!(
            b.next_mode(),
            Mode::Messaging,
            "no heartbeat changes nothing"
        );
        let mut windows = Vec::new();
        for _ in 0..6 {
            b.observe(Some(990));
            let drawn = b.offload_left();
            windows.push(drawn);
            b.observe(Some(990));
            assert_eq!(
                b.offload_left(),
                drawn,
                "no re-sensing before the rounds are over"
            );
            for _ in 0..drawn {
                assert_eq!(b.next_mode(), Mode::Offload);
            }
        }
        assert!(windows[0] < 8, "{windows:?}");
        for (k, w) in windows.iter().enumerate().skip(1) {
            let lo = 8u64 << (k - 1);
            assert!((lo..2 * lo).contains(w), "stage {k}: {windows:?}");
        }
        b.observe(Some(100));
        assert_eq!(b.next_mode(), Mode::Messaging);
        b.observe(Some(990));
        assert!(
            b.offload_left() < 8,
            "a calm report resets the back-off stage"
        );
        let mut b = Backoff::new(BackoffConfig::default(), 9);
        for _ in 0..100 {
            b.observe(Some(1000));
            b.offload_left = 0;
        }
        b.observe(Some(1000));
        assert!(
            b.offload_left() >= 8 << 40,
            "the back-off has no upper bound (capped shift)"
        );
    }
}

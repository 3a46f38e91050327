//! Whether a phase ran at a steady rate: the operations completed in the second half of the
//! measured window against those in the first half.
//!
//! A closed-loop run that settles into a steady state completes as many operations in each
//! half (ratio ~1). A run whose throughput keeps falling (a queue that grows for as long as it
//! runs, a metastable collapse) or rising (caches still warming) does not, and its Mops then
//! depend on how long it ran: a figure a researcher should not quote without its length. Each
//! worker bins its completion times into [`BINS`] bins whose width doubles (pairs merged)
//! whenever a completion falls past the last one, so the memory is fixed whatever the run's
//! length and the resolution is 1/[`BINS`] of the worker's span or better.

/// Bins per worker.
const BINS: usize = 64;

/// The first bin width, ns.
const FIRST_WIDTH_NS: u64 = 256;

/// Below this ratio of second-half to first-half completions (or above its inverse) a phase
/// is reported unsteady.
pub const UNSTEADY_BELOW: f64 = 0.8;

/// Fewer completions than this in a phase give no verdict (too few to split in halves).
const MIN_OPS: u64 = 1000;

/// One worker's completion times, binned.
#[derive(Debug, Clone)]
pub struct Timeline {
    origin_ns: u64,
    width_ns: u64,
    bins: [u64; BINS],
}

impl Timeline {
    /// An empty timeline whose first bin starts at `origin_ns` (the worker's phase start).
    pub fn new(origin_ns: u64) -> Timeline {
        Timeline {
            origin_ns,
            width_ns: FIRST_WIDTH_NS,
            bins: [0; BINS],
        }
    }

    /// Counts one operation completed at `at_ns` (times before the origin count in bin 0).
    pub fn record(&mut self, at_ns: u64) {
        let off = at_ns.saturating_sub(self.origin_ns);
        while off / self.width_ns >= BINS as u64 {
            for i in 0..BINS / 2 {
                self.bins[i] = self.bins[2 * i] + self.bins[2 * i + 1];
            }
            self.bins[BINS / 2..].fill(0);
            self.width_ns = self.width_ns.saturating_mul(2);
        }
        self.bins[(off / self.width_ns) as usize] += 1;
    }

    /// Completions before and after `mid_ns`, each bin counted wholly on the side of its
    /// midpoint.
    fn halves(&self, mid_ns: u64) -> (u64, u64) {
        let (mut first, mut second) = (0, 0);
        for (i, &n) in self.bins.iter().enumerate() {
            let centre = self
                .origin_ns
                .saturating_add((i as u64).saturating_mul(self.width_ns))
                .saturating_add(self.width_ns / 2);
            if centre < mid_ns {
                first += n;
            } else {
                second += n;
            }
        }
        (first, second)
    }
}

/// Operations completed in the second half of `[start_ns, end_ns]` over those completed in the
/// first half, summed over the workers' timelines; None for a phase too short to tell.
pub fn steadiness<'a>(
    timelines: impl Iterator<Item = &'a Timeline>,
    start_ns: u64,
    end_ns: u64,
) -> Option<f64> {
    if end_ns <= start_ns {
        return None;
    }
    let mid = start_ns + (end_ns - start_ns) / 2;
    let (mut first, mut second) = (0u64, 0u64);
    for t in timelines {
        let (f, s) = t.halves(mid);
        first += f;
        second += s;
    }
    (first + second >= MIN_OPS && first > 0).then(|| second as f64 / first as f64)
}

/// [`steadiness`] of a phase of `workload`; None for LOAD, whose rate follows the tree it
/// grows (no steady state to expect).
pub fn of_phase<'a>(
    workload: crate::bench::ycsb::Workload,
    timelines: impl Iterator<Item = &'a Timeline>,
    start_ns: u64,
    end_ns: u64,
) -> Option<f64> {
    if workload == crate::bench::ycsb::Workload::Load {
        return None;
    }
    steadiness(timelines, start_ns, end_ns)
}

/// Whether a steadiness ratio says the phase's rate moved while it ran.
pub fn unsteady(ratio: f64) -> bool {
    !(UNSTEADY_BELOW..=1.0 / UNSTEADY_BELOW).contains(&ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A steady rate reads ~1 at any length; the bins keep doubling and the memory is fixed.
    #[test]
    fn a_steady_rate_reads_one_at_any_length() {
        for n in [1_000u64, 100_000, 10_000_000] {
            let mut t = Timeline::new(5_000);
            for i in 0..n {
                t.record(5_000 + i * 300);
            }
            let r = steadiness([&t].into_iter(), 5_000, 5_000 + n * 300).unwrap();
            assert!((r - 1.0).abs() < 0.05, "{n} ops: {r}");
            assert!(!unsteady(r));
            assert_eq!(t.bins.iter().sum::<u64>(), n);
        }
    }

    /// A rate that halves midway reads ~0.5, and is reported; one that doubles reads ~2.
    #[test]
    fn a_falling_or_rising_rate_is_unsteady() {
        let mut falling = Timeline::new(0);
        let mut rising = Timeline::new(0);
        // First 1 ms: one completion per 100 ns; second 1 ms: one per 200 ns.
        for i in 0..10_000u64 {
            falling.record(i * 100);
            rising.record(i * 200);
        }
        for i in 0..5_000u64 {
            falling.record(1_000_000 + i * 200);
        }
        for i in 0..10_000u64 {
            rising.record(2_000_000 + i * 100);
        }
        let f = steadiness([&falling].into_iter(), 0, 2_000_000).unwrap();
        assert!((f - 0.5).abs() < 0.05, "{f}");
        assert!(unsteady(f));
        let r = steadiness([&rising].into_iter(), 0, 3_000_000).unwrap();
        assert!(r > 1.25, "{r}");
        assert!(unsteady(r));
    }

    /// Workers with different origins and spans are split at the phase's common midpoint.
    #[test]
    fn workers_are_split_at_the_common_midpoint() {
        let mut early = Timeline::new(0);
        let mut late = Timeline::new(1_000_000);
        for i in 0..1_000u64 {
            early.record(i * 1_000); // all in [0, 1 ms)
            late.record(1_000_000 + i * 1_000); // all in [1 ms, 2 ms)
        }
        let r = steadiness([&early, &late].into_iter(), 0, 2_000_000).unwrap();
        assert!((r - 1.0).abs() < 0.02, "{r}");
        let only_late = steadiness([&late].into_iter(), 0, 2_000_000);
        assert_eq!(only_late, None, "no completion in the first half: no ratio");
    }

    /// A completion at the far end of the clock widens the bins, never overflows.
    #[test]
    fn extreme_times_are_binned() {
        let mut t = Timeline::new(0);
        t.record(5);
        t.record(u64::MAX);
        assert_eq!(t.bins.iter().sum::<u64>(), 2);
        assert_eq!(t.halves(u64::MAX / 2), (1, 1));
    }

    #[test]
    fn too_few_operations_give_no_verdict() {
        let mut t = Timeline::new(0);
        for i in 0..(MIN_OPS - 1) {
            t.record(i);
        }
        assert_eq!(steadiness([&t].into_iter(), 0, MIN_OPS), None);
    }
}

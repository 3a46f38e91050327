//! Busy-wait delays for emulating NVM write latency on DRAM.
//!
//! The delay spins on the time-stamp counter when the CPU has an invariant TSC (CPUID
//! 0x8000_0007:EDX\[8\]): reading it costs a few nanoseconds and no system call. Its rate is
//! calibrated once against the monotonic clock ([`std::time::Instant`]) over about 2 ms, pairing
//! each TSC read with a clock read and keeping the tightest pair so a preemption during
//! calibration cannot skew the rate. Without an invariant TSC (or on other targets) the spin
//! reads [`Instant`] directly, which costs a few tens of nanoseconds per read.
//!
//! A delay is a lower bound: preemption can only make it longer.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The clock a delay spins on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SpinClock {
    /// Invariant TSC, with its calibrated rate in ticks per nanosecond.
    Tsc {
        /// TSC ticks per nanosecond (the TSC frequency in GHz), measured at calibration.
        ticks_per_ns: f64,
    },
    /// The monotonic clock (`Instant`).
    Monotonic,
}

static CLOCK: OnceLock<SpinClock> = OnceLock::new();

/// The spin clock, calibrated on first call (about 2 ms), then cached.
pub fn spin_clock() -> SpinClock {
    *CLOCK.get_or_init(calibrate)
}

/// Busy-waits at least `ns` nanoseconds (returns at once for 0).
pub fn spin_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    match spin_clock() {
        SpinClock::Tsc { ticks_per_ns } => {
            // Round up so the wait is never shorter than asked.
            let ticks = (ns as f64 * ticks_per_ns).ceil() as u64;
            let start = rdtsc();
            while rdtsc().wrapping_sub(start) < ticks {
                core::hint::spin_loop();
            }
        }
        SpinClock::Monotonic => {
            let start = Instant::now();
            let d = Duration::from_nanos(ns);
            while start.elapsed() < d {
                core::hint::spin_loop();
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC is available on every x86_64 CPU, user mode included on Linux; it reads
    // the counter and touches no memory.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    0
}

#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // `__cpuid` is an `unsafe fn` before Rust 1.87 and safe after.
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86_64 CPU and only reads identification registers.
    let max_ext = unsafe { __cpuid(0x8000_0000) }.eax;
    if max_ext < 0x8000_0007 {
        return false;
    }
    // SAFETY: as above; the leaf exists because the maximum extended leaf covers it.
    unsafe { __cpuid(0x8000_0007) }.edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

/// A TSC value and an `Instant` read as close together as the scheduler allowed.
fn paired_read() -> (u64, Instant) {
    let mut best: Option<(u64, u64, Instant)> = None;
    for _ in 0..8 {
        let a = rdtsc();
        let t = Instant::now();
        let b = rdtsc();
        let gap = b.wrapping_sub(a);
        let mid = a.wrapping_add(gap / 2);
        if best.is_none_or(|(g, _, _)| gap < g) {
            best = Some((gap, mid, t));
        }
    }
    let (_, tsc, t) = best.unwrap_or((0, rdtsc(), Instant::now()));
    (tsc, t)
}

fn calibrate() -> SpinClock {
    if !invariant_tsc() {
        return SpinClock::Monotonic;
    }
    let (c0, t0) = paired_read();
    while t0.elapsed() < Duration::from_millis(2) {
        core::hint::spin_loop();
    }
    let (c1, t1) = paired_read();
    let ns = t1.duration_since(t0).as_nanos() as f64;
    let ticks = c1.wrapping_sub(c0) as f64;
    let ticks_per_ns = ticks / ns;
    // A plausible TSC runs between 0.1 and 20 GHz; anything else means the read was bogus.
    if ns > 0.0 && (0.1..20.0).contains(&ticks_per_ns) {
        SpinClock::Tsc { ticks_per_ns }
    } else {
        SpinClock::Monotonic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_lasts_at_least_the_request() {
        let _ = spin_clock();
        for ns in [0u64, 500, 20_000, 300_000] {
            let t = Instant::now();
            spin_ns(ns);
            let got = t.elapsed().as_nanos() as u64;
            // The calibration error of the TSC rate is far below 1%: allow 1% + 50 ns.
            assert!(
                got + got / 100 + 50 >= ns,
                "asked {ns} ns, spun {got} ns ({:?})",
                spin_clock()
            );
        }
    }
}

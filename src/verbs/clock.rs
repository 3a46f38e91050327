//! The verbs fabric's clock (`Endpoint::now_ns`, `QueuePair::clock_ns`, `pause`): on the
//! `CLOCK_MONOTONIC` time base, read without a call into the vDSO where it can be.
//!
//! Index code reads it on its hot path (SMART dates every search and checks it for
//! staleness: two readings per lookup), and `clock_gettime` costs about as much as a whole
//! post on the fake device. Where the time-stamp counter is invariant (x86_64 with Linux's
//! `constant_tsc` and `nonstop_tsc` flags: one rate, ticking through sleep states, the same
//! on every core) a reading is `rdtsc` scaled by a rate calibrated once per process against
//! `CLOCK_MONOTONIC` ([`calibrate`], ~10 ms, on the first endpoint's creation), offset so that
//! it starts where `CLOCK_MONOTONIC` was. Elsewhere it is `CLOCK_MONOTONIC` itself.
//!
//! Readings on one thread never go backwards (each is at least the thread's previous one), and
//! resolve nanoseconds. Over long runs the TSC reading drifts from `CLOCK_MONOTONIC` by the
//! calibration's error (about 1e-5: tens of µs over seconds); only differences one client
//! measures mean anything (the `Endpoint::now_ns` contract), and those are off by the same
//! relative error.
use std::cell::Cell;
use std::sync::OnceLock;

/// Fixed-point fraction bits of the nanoseconds-per-tick rate.
const SHIFT: u32 = 32;

/// A TSC reading's map to `CLOCK_MONOTONIC`: `mono0 + (tsc - tsc0) * mult >> SHIFT`.
#[derive(Debug, Clone, Copy)]
struct Tsc {
    tsc0: u64,
    mono0: u64,
    mult: u64,
}

#[derive(Debug, Clone, Copy)]
enum Source {
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Tsc(Tsc),
    Os,
}

static SOURCE: OnceLock<Source> = OnceLock::new();

thread_local! {
    /// The thread's last reading (readings never go backwards on a thread).
    static LAST: Cell<u64> = const { Cell::new(0) };
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64 (user mode may read the TSC on Linux).
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Whether the kernel reports the TSC invariant (`constant_tsc` and `nonstop_tsc` in every
/// processor's flags).
#[cfg(target_arch = "x86_64")]
fn tsc_invariant() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    let mut cpus = 0;
    for line in info.lines().filter(|l| l.starts_with("flags")) {
        let has = |f: &str| line.split_whitespace().any(|w| w == f);
        if !(has("constant_tsc") && has("nonstop_tsc")) {
            return false;
        }
        cpus += 1;
    }
    cpus > 0
}

/// One (CLOCK_MONOTONIC, TSC) pair: the TSC read between two clock readings, the pair with
/// the narrowest bracket of a few, dated at the bracket's middle.
#[cfg(target_arch = "x86_64")]
fn pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..16 {
        let a = monotonic_ns();
        let t = rdtsc();
        let b = monotonic_ns();
        if b.saturating_sub(a) < best.0 {
            best = (b.saturating_sub(a), a + (b - a) / 2, t);
        }
    }
    (best.1, best.2)
}

/// Measures the TSC's rate against `CLOCK_MONOTONIC` over `span_ms`; `None` when the TSC is
/// not invariant or its rate is implausible (under 100 MHz or over 20 GHz).
#[cfg(target_arch = "x86_64")]
fn calibrate_tsc(span_ms: u64) -> Option<Tsc> {
    if !tsc_invariant() {
        return None;
    }
    let (m0, t0) = pair();
    std::thread::sleep(std::time::Duration::from_millis(span_ms));
    let (m1, t1) = pair();
    let (dm, dt) = (m1.checked_sub(m0)?, t1.checked_sub(t0)?);
    let ghz = dt as f64 / dm.max(1) as f64;
    if !(0.1..=20.0).contains(&ghz) {
        return None;
    }
    let mult = ((u128::from(dm) << SHIFT) / u128::from(dt)) as u64;
    Some(Tsc {
        tsc0: t1,
        mono0: m1,
        mult,
    })
}

/// Picks the clock's source (once per process; later calls are free). The first endpoint
/// calls it, so that the ~10 ms calibration is paid at connection time, not on the first
/// reading of a hot path.
pub fn calibrate() {
    source();
}

#[inline]
fn source() -> Source {
    *SOURCE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = calibrate_tsc(10) {
            return Source::Tsc(t);
        }
        Source::Os
    })
}

/// Which source the clock reads: `"tsc"` or `"clock_gettime"`.
pub fn source_name() -> &'static str {
    match source() {
        Source::Tsc(_) => "tsc",
        Source::Os => "clock_gettime",
    }
}

/// Nanoseconds on the `CLOCK_MONOTONIC` time base (see the module docs).
#[inline]
pub fn now_ns() -> u64 {
    let t = match source() {
        #[cfg(target_arch = "x86_64")]
        Source::Tsc(c) => {
            let dt = rdtsc().saturating_sub(c.tsc0);
            c.mono0 + ((u128::from(dt) * u128::from(c.mult)) >> SHIFT) as u64
        }
        _ => monotonic_ns(),
    };
    LAST.with(|l| {
        let v = t.max(l.get());
        l.set(v);
        v
    })
}

/// Lets the other coroutines of this thread run until `ns` nanoseconds of [`now_ns`] have
/// passed (`Endpoint::pause`): woken by the thread's progress hook once due, not polled
/// every round (see [`super::timer`]).
pub fn pause(ns: u64) -> super::timer::Pause {
    super::timer::pause(ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn never_goes_backwards_and_resolves_microseconds() {
        calibrate();
        let mut last = now_ns();
        let start = last;
        let mut steps = 0u32;
        while last - start < 2_000_000 {
            let t = now_ns();
            assert!(t >= last, "{t} after {last} ({})", source_name());
            if t > last {
                steps += 1;
            }
            last = t;
        }
        // Over 2 ms of readings, a clock of µs resolution or better advances at least 2000
        // times.
        assert!(steps >= 2000, "{steps} steps in 2 ms ({})", source_name());
    }

    #[test]
    fn agrees_with_instant_over_a_sleep() {
        calibrate();
        let (a, i) = (now_ns(), Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (d, e) = (now_ns() - a, i.elapsed().as_nanos() as u64);
        // The readings bracket Instant's at most a few µs apart; the rate is off by the
        // calibration's ~1e-5: within 0.1% plus 20 µs.
        let tol = e / 1000 + 20_000;
        assert!(
            d.abs_diff(e) <= tol,
            "clock {d} ns vs Instant {e} ns ({})",
            source_name()
        );
    }

    #[test]
    fn reads_the_tsc_where_the_kernel_calls_it_invariant() {
        #[cfg(target_arch = "x86_64")]
        if tsc_invariant() {
            assert_eq!(source_name(), "tsc");
            return;
        }
        assert_eq!(source_name(), "clock_gettime");
    }

    #[test]
    fn stays_on_the_monotonic_time_base() {
        calibrate();
        let (m, t) = (monotonic_ns(), now_ns());
        // The calibration started from CLOCK_MONOTONIC, and tests run for seconds, not
        // hours: the two stay within a millisecond.
        assert!(
            t.abs_diff(m) < 1_000_000,
            "now {t} vs CLOCK_MONOTONIC {m} ({})",
            source_name()
        );
    }
}

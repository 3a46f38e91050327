//! A cheap monotonic clock for latency measurement: the TSC on x86_64 (calibrated against
//! the OS clock once), the OS clock elsewhere. Reading it is not a system call.
use std::sync::OnceLock;
use std::time::Instant;

/// Nanoseconds since an arbitrary origin.
#[derive(Clone, Copy)]
pub struct Clock {
    #[cfg(target_arch = "x86_64")]
    ns_per_tick: f64,
    origin: Instant,
    tsc: bool,
}

fn calibrate() -> Clock {
    let origin = Instant::now();
    #[cfg(target_arch = "x86_64")]
    {
        let tsc_ok = std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| s.contains("constant_tsc") && s.contains("nonstop_tsc"))
            .unwrap_or(false);
        if tsc_ok {
            // SAFETY: rdtsc has no preconditions on x86_64.
            let t0 = unsafe { core::arch::x86_64::_rdtsc() };
            let i0 = Instant::now();
            while i0.elapsed().as_millis() < 20 {
                std::hint::spin_loop();
            }
            // SAFETY: as above.
            let t1 = unsafe { core::arch::x86_64::_rdtsc() };
            let ns = i0.elapsed().as_nanos() as f64;
            if t1 > t0 {
                return Clock {
                    ns_per_tick: ns / (t1 - t0) as f64,
                    origin,
                    tsc: true,
                };
            }
        }
        Clock {
            ns_per_tick: 0.0,
            origin,
            tsc: false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    Clock { origin, tsc: false }
}

impl Clock {
    /// The process-wide clock (calibrated on first use, ~20 ms).
    pub fn get() -> Clock {
        static C: OnceLock<Clock> = OnceLock::new();
        *C.get_or_init(calibrate)
    }

    /// Nanoseconds since this clock's origin (its first use in the process). Monotonic, but
    /// TSC readings are scaled by a rate calibrated over 20 ms, so long intervals may be off
    /// by that calibration's error.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            // SAFETY: rdtsc has no preconditions on x86_64.
            let t = unsafe { core::arch::x86_64::_rdtsc() };
            return (t as f64 * self.ns_per_tick) as u64;
        }
        self.origin.elapsed().as_nanos() as u64
    }

    /// Which source is used.
    pub fn source(&self) -> &'static str {
        if self.tsc {
            "invariant TSC (rdtsc)"
        } else {
            "OS monotonic clock"
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine (what the
/// soft and verbs fabrics give index code as `Endpoint::now_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Yields to the other coroutines of this thread until `ns` nanoseconds have passed (the
/// back-off of `Endpoint::pause` on real-time fabrics).
pub async fn pause(ns: u64) {
    let until = monotonic_ns().saturating_add(ns);
    loop {
        remora_core::block_on::yield_now().await;
        if monotonic_ns() >= until {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_like_the_os_clock() {
        let c = Clock::get();
        let (a, i) = (c.now_ns(), Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(30));
        let (d, e) = (c.now_ns() - a, i.elapsed().as_nanos() as u64);
        assert!(
            d as f64 > e as f64 * 0.8 && (d as f64) < e as f64 * 1.2,
            "clock {d} ns vs os {e} ns"
        );
    }
}

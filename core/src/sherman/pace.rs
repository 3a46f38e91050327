//! Paced lock waits ([`super::ShermanConfig::paced_locks`], remora's idea, CHIME's
//! `--with paced-locks`): a waiter whose CAS found the global lock word held pauses for one
//! round trip, timed on that CAS, before it tries again.
//!
//! The authors' waiters retry at once (Sherman's and CHIME's spin): one CAS per round trip per
//! waiting compute node, each a message the memory node's NIC must serve, and a run bound by
//! that NIC's message rate (CHIME's YCSB-A) loses to them the messages its operations need.
//! A paced waiter sends half as many. The pause is the waiter's own measured round trip
//! (queueing at the memory node included), so it follows the fabric and its load with no
//! constant to fit, unlike an exponential back-off (200 ns doubling to 100 µs here). It is
//! not longer, nor doubled while the same holder stays, because the release is not seen: a
//! lock freed during a long pause sits idle, and on CHIME's insert workloads (YCSB-D, E,
//! 10,000 operations at 640 clients) pausing two round trips cost 2-4% and doubling up to
//! 10%, where one round trip costs under 1% (measured by `remora repro chime`'s bars; the
//! rows `idea-paced-locks-*` of `docs/repro-chime`).
use crate::lease::LeaseConfig;

/// The pause before the next CAS of a wait whose last CAS took `rtt` nanoseconds (fabric
/// clock), within the lease's back-off bounds.
pub(super) fn pause(rtt: u64, lease: &LeaseConfig) -> u64 {
    rtt.min(lease.max_backoff_ns.max(1))
        .max(lease.min_backoff_ns.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_the_last_cas_round_trip() {
        let lease = LeaseConfig::default_lease();
        assert_eq!(pause(3_000, &lease), 3_000);
        assert_eq!(pause(5_000, &lease), 5_000);
    }

    #[test]
    fn a_pause_stays_within_the_leases_back_off_bounds() {
        let lease = LeaseConfig::default_lease();
        assert_eq!(pause(0, &lease), lease.min_backoff_ns);
        assert_eq!(pause(u64::MAX, &lease), lease.max_backoff_ns);
        let odd = LeaseConfig {
            min_backoff_ns: 0,
            max_backoff_ns: 0,
            ..lease
        };
        assert_eq!(pause(7, &odd), 1);
    }
}

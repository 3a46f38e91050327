//! The survivors of the sim crash tests (`canrt_crash`, `erda_crash`): clients that run
//! oracle-checked `lin_client` workloads on hot keys while another client dies, their errors
//! and operation latencies, and the checks every crash run must pass.
//!
//! Included by the tests that use it (`#[path = "common/survivors.rs"] mod survivors;`).
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_poller::sim::RunReport;
use std::cell::{Cell, RefCell};

/// What the survivors of one run share.
pub struct Survivors {
    pub rec: Recorder,
    errors: RefCell<Vec<String>>,
    latencies: RefCell<Vec<u64>>,
}

impl Survivors {
    /// For `clients` survivors of `ops` operations each (and a few of the dying client's).
    pub fn new(clients: u32, ops: u64) -> Survivors {
        Survivors {
            rec: Recorder::new(
                (clients as u64 * ops + 8) as usize,
                (clients as u64 * ops * 17) as usize,
            ),
            errors: RefCell::new(Vec::new()),
            latencies: RefCell::new(Vec::new()),
        }
    }

    /// Notes that a survivor failed.
    pub fn fail(&self, e: String) {
        self.errors.borrow_mut().push(e);
    }

    /// Survivor `client`'s workload on `index`: `ops` operations, 70% on 2 hot keys shared by
    /// all, the rest on 8 of its own; the time between two of its clock readings (`now`) is
    /// noted as an operation's latency.
    pub async fn run<I: KvIndex>(
        &self,
        index: &I,
        client: u32,
        ops: u64,
        seed: u64,
        now: impl Fn() -> u64,
    ) {
        let spec = LinSpec {
            hot: 2,
            cold: 8,
            hot_percent: 70,
            ..LinSpec::new(client, ops, seed, false)
        };
        let last = Cell::new(now());
        let clock = || {
            let t = now();
            self.latencies.borrow_mut().push(t - last.replace(t));
            t
        };
        if let Err(e) = lin_client(index, &spec, &self.rec, &clock).await {
            self.fail(format!("client {client}: {e}"));
        }
    }

    /// The checks of one run `at` (its name in messages) that ended as `r`: no survivor
    /// failed, no task but the dying client's (if `crashed`) is unfinished, virtual time
    /// stayed under `bound_ns`, and the history is linearizable. Returns the latencies.
    pub fn check(self, at: &str, r: &RunReport, crashed: bool, bound_ns: u64) -> Vec<u64> {
        let errs = self.errors.into_inner();
        assert!(
            errs.is_empty(),
            "{at}: {} survivors failed, first: {}",
            errs.len(),
            errs[0]
        );
        assert!(
            r.unfinished <= usize::from(crashed),
            "{at}: {} tasks never finished",
            r.unfinished
        );
        assert!(
            r.now_ns < bound_ns,
            "{at}: ran {} ns of virtual time",
            r.now_ns
        );
        let h = self.rec.finish().expect("recorder sized for the workload");
        let report = check(&h, &CheckConfig::new(r.seed));
        assert!(report.is_ok(), "{at}: {report}");
        self.latencies.into_inner()
    }
}

/// The `p`th percentile of `v` (sorts it); 0 if empty.
pub fn pct(v: &mut [u64], p: usize) -> u64 {
    v.sort_unstable();
    v.get((v.len() * p / 100).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0)
}

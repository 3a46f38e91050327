//! The sim's receiver-not-ready retry (contract rule 6, `sim/target.rs`): a SEND that finds no
//! receive is NAKed, then retried every RNR period (`rnr_timer_ns` + a round trip) at most
//! `rnr_retry` times; the NAK of its last retry fails it with `RnrRetryExceeded`. That is the
//! count of the soft fabric's `RnrPolicy::retries` and of verbs' `rnr_retry` (retries after
//! the first attempt; 0: none), whose 7 ("infinite" on hardware) the sim keeps finite.
use remora_core::fabric::{FabricError, Op, QueuePair};
use remora_poller::sim::{Model, Sim, SimConfig};
use std::cell::RefCell;

/// The RNR timer of these runs: far longer than a flight, so the retries dominate the time.
const TIMER_NS: u64 = 1_000_000;

/// What the second SEND of [`second_send`] met.
struct Outcome {
    result: Result<(), FabricError>,
    /// From its post to its completion.
    took_ns: u64,
    /// RNR NAKs of the whole run (the first SEND meets none).
    naks: u64,
    /// The RNR period: timer plus a round trip.
    period_ns: u64,
}

/// One SEND takes the memory node's only receive, and its handler holds it `hold_ns` before
/// reposting it; a second SEND on the same queue pair, posted once the first is acked, finds
/// no receive until then.
fn second_send(retries: u32, hold_ns: u64) -> Outcome {
    let mut m = Model::default();
    for (k, v) in [
        ("recv_depth", "1".to_string()),
        ("server_handler_ns", hold_ns.to_string()),
        ("rnr_timer_ns", TIMER_NS.to_string()),
        ("rnr_retry", retries.to_string()),
        ("jitter_ns", "0".to_string()),
    ] {
        m.set(k, &v).unwrap();
    }
    let period_ns = TIMER_NS + 2 * m.one_way_ps() / 1000;
    let out = RefCell::new(None);
    let mut sim = Sim::new(SimConfig {
        model: m,
        ..SimConfig::default()
    })
    .unwrap();
    let ctx = sim.client(0).unwrap();
    let o = &out;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        qp.post(&mut [Op::Send { local: b"first" }]).await.unwrap();
        let t0 = ctx.now_ns();
        let result = qp.post(&mut [Op::Send { local: b"second" }]).await;
        *o.borrow_mut() = Some((result, ctx.now_ns() - t0));
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "the sender never finished");
    let (result, took_ns) = out.take().expect("the sender ran");
    Outcome {
        result,
        took_ns,
        naks: sim.stats().rnr_naks,
        period_ns,
    }
}

#[test]
fn a_send_fails_after_exactly_rnr_retry_retries() {
    for retries in [0, 1, 3, 7] {
        // The receive comes back long after any retry.
        let o = second_send(retries, 1_000_000_000);
        assert_eq!(
            o.result,
            Err(FabricError::RnrRetryExceeded),
            "rnr_retry {retries}"
        );
        // The first attempt and every retry were NAKed...
        assert_eq!(o.naks, u64::from(retries) + 1, "rnr_retry {retries}: NAKs");
        // ...and the error came with the last retry's NAK: `retries` periods after the
        // first attempt, plus the flights (microseconds), not one period more.
        let want = u64::from(retries) * o.period_ns;
        assert!(
            o.took_ns >= want && o.took_ns < want + o.period_ns / 10,
            "rnr_retry {retries}: failed after {} ns, want {want} ns + flights (period {} ns)",
            o.took_ns,
            o.period_ns
        );
    }
}

#[test]
fn a_receive_reposted_before_the_last_retry_is_taken_and_after_it_is_not() {
    // The receive is back 2.5 periods after the first attempt: the third retry finds it.
    let hold = 5 * TIMER_NS / 2;
    let o = second_send(3, hold);
    assert_eq!(o.result, Ok(()));
    assert_eq!(o.naks, 3, "the first attempt and two retries NAKed");
    // With two retries allowed the receive is one retry too late.
    let o = second_send(2, hold);
    assert_eq!(o.result, Err(FabricError::RnrRetryExceeded));
    assert_eq!(o.naks, 3);
}

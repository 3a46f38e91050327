//! The soft fabric's receiver-not-ready retry ([`RnrPolicy`], contract rule 6): a sender that
//! outruns a stalled server waits for it through the policy's retries, and fails with
//! `RnrRetryExceeded` only once they are spent.
use super::{NodeConfig, RnrPolicy, SoftMemoryNode};
use remora_core::block_on::block_on;
use remora_core::fabric::{FabricError, QueuePair, Recv};
use remora_core::server::{Handler, LocalRegion, Replies};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A service that stalls on its first message: for `stall`, or until `release` is raised
/// (at most 10 s), as a server thread busy with a long handler step or descheduled.
struct Stall {
    stall: Duration,
    release: Arc<AtomicBool>,
    seen: Arc<AtomicU64>,
}

impl Handler for Stall {
    fn on_message(
        &mut self,
        _region: &dyn LocalRegion,
        _conn: usize,
        _recv: Recv,
        _msg: &[u8],
        _replies: &mut Replies,
    ) -> Result<(), FabricError> {
        if self.seen.fetch_add(1, Ordering::AcqRel) == 0 {
            let t = Instant::now();
            while t.elapsed() < self.stall.min(Duration::from_secs(10))
                && !self.release.load(Ordering::Acquire)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }
}

const DEPTH: usize = 4;

fn node(stall: Duration) -> (Arc<SoftMemoryNode>, Arc<AtomicBool>, Arc<AtomicU64>) {
    let release = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let cfg = NodeConfig {
        region_len: 4 << 20,
        dm_len: 0,
        ring_depth: DEPTH,
        ..NodeConfig::default()
    };
    let handler = Stall {
        stall,
        release: release.clone(),
        seen: seen.clone(),
    };
    let node = SoftMemoryNode::create_with(cfg, Box::new(handler)).unwrap();
    (node, release, seen)
}

#[test]
fn a_sender_waits_out_a_server_stalled_past_the_old_500_ms_budget() {
    // 800 ms: the old fixed budget (500 ms) failed this send; the default policy's retries
    // (7 x 500 ms) wait it out.
    let (node, _release, seen) = node(Duration::from_millis(800));
    let _srv = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = &ep.qps()[0];
    assert_eq!(qp.rnr(), RnrPolicy::DEFAULT);
    let t = Instant::now();
    for i in 0..DEPTH as u8 + 4 {
        block_on(qp.send(&[i; 8])).unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "the server never stalled the sender ({:?})",
        t.elapsed()
    );
    assert!(qp.rnr_naks() >= 1, "the sender met no RNR NAK");
    let t = Instant::now();
    while seen.load(Ordering::Acquire) < DEPTH as u64 + 4 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        seen.load(Ordering::Acquire),
        DEPTH as u64 + 4,
        "a message was lost"
    );
}

#[test]
fn a_sender_fails_only_once_its_retries_are_spent() {
    let (node, release, _seen) = node(Duration::from_secs(10));
    let _srv = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = &ep.qps()[0];
    let policy = RnrPolicy {
        timer: Duration::from_millis(30),
        retries: 3,
    };
    qp.set_rnr(policy);
    // The first message stalls the server; DEPTH more fill its receives.
    let mut sent = 0;
    let (err, took, naks) = loop {
        let (t, naks) = (Instant::now(), qp.rnr_naks());
        match block_on(qp.send(&[sent; 8])) {
            Ok(()) => sent += 1,
            Err(e) => break (e, t.elapsed(), qp.rnr_naks() - naks),
        }
        assert!(
            sent <= DEPTH as u8 + 1,
            "{sent} sends into {DEPTH} receives"
        );
    };
    release.store(true, Ordering::Release);
    assert_eq!(err, FabricError::RnrRetryExceeded);
    assert!(
        sent >= DEPTH as u8,
        "only {sent} sends before the ring was full"
    );
    // The first NAK, then 3 retries a timer apart: 90 ms at least.
    assert!(took >= policy.budget(), "failed after {took:?}");
    assert!(took < Duration::from_secs(5), "failed after {took:?}");
    assert_eq!(naks, 1 + 3, "the first NAK and 3 retries");
    // The queue pair is in the error state, as after any failed verb.
    assert!(qp.is_broken());
    assert_eq!(block_on(qp.send(&[0; 8])), Err(FabricError::Flushed));
}

#[test]
fn no_retries_fail_at_the_first_nak() {
    let (node, release, seen) = node(Duration::from_secs(10));
    let _srv = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = &ep.qps()[0];
    qp.set_rnr(RnrPolicy {
        timer: Duration::from_secs(60),
        retries: 0,
    });
    // The server has taken the first message (it stalls on it) once `seen` says so; then
    // DEPTH sends fill its receives and the next meets a full ring.
    block_on(qp.send(&[0; 8])).unwrap();
    let t = Instant::now();
    while seen.load(Ordering::Acquire) == 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..DEPTH as u8 {
        block_on(qp.send(&[i; 8])).unwrap();
    }
    assert_eq!(qp.rnr_naks(), 0);
    let t = Instant::now();
    let err = block_on(qp.send(&[9; 8])).unwrap_err();
    release.store(true, Ordering::Release);
    assert_eq!(err, FabricError::RnrRetryExceeded);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(qp.rnr_naks(), 1);
}

/// Answers every message with `n` replies, numbered.
struct Burst {
    n: u8,
}

impl Handler for Burst {
    fn on_message(
        &mut self,
        _region: &dyn LocalRegion,
        _conn: usize,
        _recv: Recv,
        _msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        for i in 0..self.n {
            replies.send(&[i; 8]);
        }
        Ok(())
    }
}

/// A client that posts no receives for a while (descheduled, SIGSTOPped) is slow, not dead:
/// the memory node keeps the replies its ring has no room for and serves on. Before, the
/// server thread waited 0.5 s for the client's receives (serving nobody else meanwhile),
/// then dropped the connection as "receiver not ready" (issue 26).
#[test]
fn a_client_that_stops_receiving_for_a_while_keeps_its_connection_and_replies() {
    let cfg = NodeConfig {
        region_len: 4 << 20,
        dm_len: 0,
        ring_depth: DEPTH,
        ..NodeConfig::default()
    };
    let n = 4 * DEPTH as u8;
    let node = SoftMemoryNode::create_with(cfg, Box::new(Burst { n })).unwrap();
    let _srv = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = &ep.qps()[0];
    let other = node.endpoint().unwrap();
    block_on(qp.send(&[7; 8])).unwrap();
    // The client reads nothing for 1.5 s; another client is served meanwhile.
    let t = Instant::now();
    block_on(other.qps()[0].send(&[1; 8])).unwrap();
    let mut buf = [0u8; 64];
    for i in 0..n {
        let r = block_on(other.qps()[0].recv(&mut buf)).unwrap();
        assert_eq!((r.len, buf[0]), (8, i));
    }
    assert!(
        t.elapsed() < Duration::from_millis(400),
        "the other client waited {:?} for the stalled one",
        t.elapsed()
    );
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(t.elapsed()));
    for i in 0..n {
        let r = block_on(qp.recv(&mut buf))
            .unwrap_or_else(|e| panic!("reply {i} of {n} after the pause: {e}"));
        assert_eq!((r.len, buf[0]), (8, i), "reply {i} out of order");
    }
    assert_eq!(node.connections(), 2, "{:?}", node.recent_log());
    // And it is served as before.
    block_on(qp.send(&[8; 8])).unwrap();
    let r = block_on(qp.recv(&mut buf)).unwrap();
    assert_eq!((r.len, buf[0]), (8, 0));
}

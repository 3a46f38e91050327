//! Linearizability on the soft fabric (`remora_core::lincheck`): real threads, real tearing
//! between 8-byte words. 4 threads × 4 coroutines run `lin_client` workloads on one index;
//! each thread records its own history with a shared clock (`Instant` from one start), the
//! histories are merged by time, and the whole is checked for a linearization.
//!
//! Erda failed this check before its deletes became server-written (a get returned a value
//! after a delete of that key returned false); it is here as the regression test.
use remora_core::block_on::block_on;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, History, Recorder, Report, check};
use remora_poller::executor::run_coroutines;
use remora_poller::soft::{NodeConfig, SoftMemoryNode};
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

/// One test at a time: each spins 4 client threads and a server thread, and several at
/// once on a small machine slow each other down many times over.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const THREADS: u32 = 4;
const COROS: u32 = 4;
const OPS: u64 = 300;

/// A run still going after this long fails with what it has (a hang, not a slow machine:
/// runs take seconds to a minute). `LIN_SOFT_DEADLINE_S` overrides it.
const DEADLINE: Duration = Duration::from_secs(600);

/// Stops every client of a run once one fails (or the run passes its deadline): without
/// it, a client's error left the other threads running, and one waiting on a lock the
/// failed client held (or on a notice it would have caused) kept `std::thread::scope`
/// waiting forever, the error unseen.
struct Stop {
    flag: AtomicBool,
    first: Mutex<Option<String>>,
    start: Instant,
    deadline: Duration,
}

impl Stop {
    fn new(start: Instant) -> Stop {
        let deadline = std::env::var("LIN_SOFT_DEADLINE_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(DEADLINE, Duration::from_secs);
        Stop {
            flag: AtomicBool::new(false),
            first: Mutex::new(None),
            start,
            deadline,
        }
    }

    /// Records `why` (the first failure is the one reported first) and stops every client.
    fn fail(&self, why: String) -> String {
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(why.clone());
        }
        self.flag.store(true, Ordering::SeqCst);
        why
    }

    fn first(&self) -> String {
        let first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        format!(
            "first failure: {}",
            first.as_deref().unwrap_or("none recorded")
        )
    }

    /// Runs client `fut`, ending it early (an error) once any client failed or the deadline
    /// passed; its own error stops the others. `run_coroutines` polls every unfinished
    /// coroutine each round, so a stopped client ends within a round, whatever it awaits.
    async fn guard<T>(&self, fut: impl Future<Output = Result<T, String>>) -> Result<T, String> {
        let mut fut = pin!(fut);
        poll_fn(|cx| {
            if self.flag.load(Ordering::SeqCst) {
                return Poll::Ready(Err(
                    "stopped (another client failed, or the deadline passed)".to_string(),
                ));
            }
            let elapsed = self.start.elapsed();
            if elapsed > self.deadline {
                let why = format!(
                    "still running after {elapsed:?} (deadline {:?})",
                    self.deadline
                );
                return Poll::Ready(Err(self.fail(why)));
            }
            match fut.as_mut().poll(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(self.fail(e))),
                r => r,
            }
        })
        .await
    }
}

/// Runs the workload on `$node` (its server thread started here); `$open` opens the index on
/// `$ep` (run once alone first, to create it).
macro_rules! lin_soft {
    ($node:expr, $seed:expr, scans: $scans:expr, |$ep:ident| $open:expr) => {
        lin_soft!($node, $seed, threads: THREADS, scans: $scans, |$ep| $open)
    };
    ($node:expr, $seed:expr, threads: $threads:expr, scans: $scans:expr, |$ep:ident| $open:expr) => {{
        let threads: u32 = $threads;
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let node: Arc<SoftMemoryNode> = $node;
        let seed: u64 = $seed;
        let _srv = node.spawn_server();
        {
            let ep0 = node.endpoint().unwrap();
            let $ep = &ep0;
            block_on($open).unwrap();
        }
        let start = Instant::now();
        let stop = Stop::new(start);
        let results: Vec<Result<History, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|th| {
                    let (node, stop) = (&node, &stop);
                    s.spawn(move || -> Result<History, String> {
                        let ep1 = node
                            .endpoint()
                            .map_err(|e| stop.fail(format!("thread {th}: endpoint: {e}")))?;
                        let $ep = &ep1;
                        let index = block_on($open)
                            .map_err(|e| stop.fail(format!("thread {th}: open: {e:?}")))?;
                        let per = (COROS as u64 * OPS) as usize;
                        let rec = Recorder::new(per, per * 17);
                        let clock = || start.elapsed().as_nanos() as u64;
                        let coros: Vec<_> = (0..COROS)
                            .map(|c| {
                                let (index, rec, clock) = (&index, &rec, &clock);
                                let spec = LinSpec {
                                    cold: 32,
                                    ..LinSpec::new(1 + th * COROS + c, OPS, seed, $scans)
                                };
                                stop.guard(async move {
                                    lin_client(index, &spec, rec, clock)
                                        .await
                                        .map_err(|e| format!("client {}: {e}", spec.client))
                                })
                            })
                            .collect();
                        let errors: Vec<String> = run_coroutines(coros)
                            .into_iter()
                            .filter_map(Result::err)
                            .collect();
                        if !errors.is_empty() {
                            return Err(format!(
                                "thread {th} ({} of {per} operations recorded): {}",
                                rec.len(),
                                errors.join("; ")
                            ));
                        }
                        rec.finish().map_err(|e| format!("thread {th}: {e:?}"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(th, t)| {
                    t.join()
                        .unwrap_or_else(|_| Err(stop.fail(format!("thread {th} panicked"))))
                })
                .collect()
        });
        let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        if !failed.is_empty() {
            let threads: Vec<&str> = failed.iter().map(|e| e.as_str()).collect();
            panic!("{}\nper thread:\n{}", stop.first(), threads.join("\n"));
        }
        let parts: Vec<History> = results.into_iter().filter_map(Result::ok).collect();
        let h = History::merge(parts);
        assert_eq!(h.events.len() as u64, (threads * COROS) as u64 * OPS);
        check(&h, &CheckConfig::new(seed))
    }};
}

fn plain_node() -> Arc<SoftMemoryNode> {
    SoftMemoryNode::create(NodeConfig {
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap()
}

fn assert_ok(index: &str, r: &Report) {
    println!("{index}: {r}");
    assert!(r.is_ok(), "{index}: {r}");
    assert!(r.keys > 100, "{index}: {r}");
}

#[test]
fn smart_is_linearizable_on_soft_threads() {
    use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
    let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    for seed in 1..=2 {
        let r = lin_soft!(plain_node(), seed, scans: true, |ep| Smart::open(ep, cfg));
        assert_ok("smart", &r);
    }
}

#[test]
fn sherman_is_linearizable_on_soft_threads() {
    use remora_core::sherman::{Sherman, ShermanConfig};
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::sherman()
    };
    for seed in 1..=2 {
        let r = lin_soft!(plain_node(), seed, scans: true, |ep| Sherman::create(ep, cfg));
        assert_ok("sherman", &r);
    }
}

#[test]
fn fg_plus_is_linearizable_on_soft_threads() {
    use remora_core::sherman::{Sherman, ShermanConfig};
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::fg_plus()
    };
    for seed in 1..=2 {
        let r = lin_soft!(plain_node(), seed, scans: true, |ep| Sherman::create(ep, cfg));
        assert_ok("fg-plus", &r);
    }
}

/// CHIME (Sherman with hopscotch leaves): its 64-slot leaves split under the 16 clients'
/// keys, and its speculative reads (hotspot cache) race the writers' in-place updates.
#[test]
fn chime_is_linearizable_on_soft_threads() {
    use remora_core::chime::{Chime, ChimeConfig};
    let cfg = ChimeConfig::chime().with_cache(1 << 20);
    for seed in 1..=2 {
        let r = lin_soft!(plain_node(), seed, scans: true, |ep| Chime::create(ep, cfg));
        assert_ok("chime", &r);
    }
}

#[test]
fn canrt_is_linearizable_on_soft_threads() {
    use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
    let mut cfg = CanrtConfig {
        slots: 8,
        ..CanrtConfig::new(0)
    };
    if let Ok(ms) = std::env::var("CANRT_LEASE_MS") {
        cfg.lease.lease_ns = ms.parse::<u64>().unwrap() * 1_000_000;
    }
    let seed = 1;
    {
        let node = SoftMemoryNode::create_with(
            NodeConfig {
                region_len: 32 << 20,
                chunk_size: 1 << 16,
                ..NodeConfig::default()
            },
            Box::new(CanrtServer::new()),
        )
        .unwrap();
        // Two threads: CANRT's clients wait on locks held by descheduled threads, and with
        // four threads and the server on a 2-core machine the test takes minutes.
        let r = lin_soft!(node, seed, threads: 2, scans: true, |ep| Canrt::open(ep, cfg));
        assert_ok("canrt", &r);
    }
}

#[test]
fn erda_is_linearizable_on_soft_threads() {
    use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
    for seed in 1..=2 {
        let node = SoftMemoryNode::create_with(
            NodeConfig {
                region_len: 64 << 20,
                chunk_size: 256 << 10,
                ..NodeConfig::default()
            },
            Box::new(ErdaServer::new(ErdaConfig::small())),
        )
        .unwrap();
        let r = lin_soft!(node, seed, threads: 2, scans: false, |ep| Erda::open(ep, ErdaClientConfig::default()));
        assert_ok("erda", &r);
    }
}

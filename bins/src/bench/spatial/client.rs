//! One client's phase of a spatial run: the same operations by RDMA (a [`CatfishClient`]
//! searching by messaging, offloading or adaptively) or over TCP, timed on the sim's or the
//! host's clock.
use super::{Part, SearchMode, Shared};
use crate::bench::index::snapshot_of;
use crate::bench::phase::{OpCounts, new_hist};
use crate::bench::tcp::TcpClient;
use crate::bench::ycsb::Rng;
use remora::core::Snapshot;
use remora::core::catfish::{CatfishClient, CatfishError, ClientStats, Entry, Mode, Rect};
use remora::core::fabric::Endpoint;
use remora::poller::clock::Clock;
use remora::poller::sim::{ClientCtx, LlcStats};
use std::sync::atomic::Ordering;

/// The clocks of a client: its time, and the memory node's handler busy time (sim).
pub(super) trait Clocks {
    fn now_ns(&self) -> u64;
    fn busy_ns(&self) -> Option<u64>;
    fn llc(&self) -> Option<LlcStats>;
}

impl Clocks for ClientCtx {
    fn now_ns(&self) -> u64 {
        ClientCtx::now_ns(self)
    }
    fn busy_ns(&self) -> Option<u64> {
        Some(self.server_busy_ns())
    }
    fn llc(&self) -> Option<LlcStats> {
        Some(self.server_llc_total())
    }
}

impl Clocks for Clock {
    fn now_ns(&self) -> u64 {
        Clock::now_ns(self)
    }
    fn busy_ns(&self) -> Option<u64> {
        None
    }
    fn llc(&self) -> Option<LlcStats> {
        None
    }
}

/// What a client of a run does: the same operations by RDMA or over TCP.
pub(super) trait SpatialOps {
    async fn insert(&mut self, rect: Rect, id: u64) -> Result<(), CatfishError>;
    async fn search(&mut self, q: Rect, hits: &mut Vec<Entry>) -> Result<(), CatfishError>;
    fn stats(&self) -> ClientStats;
    fn snapshot(&self) -> Snapshot;
}

/// A Catfish client on a fabric endpoint, searching in `mode`.
pub(super) struct Rdma<'c, E> {
    pub(super) c: &'c mut CatfishClient,
    pub(super) ep: &'c E,
    pub(super) mode: SearchMode,
}

impl<E: Endpoint> SpatialOps for Rdma<'_, E> {
    async fn insert(&mut self, rect: Rect, id: u64) -> Result<(), CatfishError> {
        let qp = self.ep.qp(0)?;
        self.c.insert(qp, rect, id).await
    }
    async fn search(&mut self, q: Rect, hits: &mut Vec<Entry>) -> Result<(), CatfishError> {
        let qp = self.ep.qp(0)?;
        let r = match self.mode {
            SearchMode::Offloading => self.c.search(qp, q, Mode::Offload, hits).await,
            SearchMode::Adaptive => self.c.search_adaptive(self.ep, q, hits).await,
            _ => self.c.search(qp, q, Mode::Messaging, hits).await,
        };
        r.map(|_| ())
    }
    fn stats(&self) -> ClientStats {
        self.c.stats()
    }
    fn snapshot(&self) -> Snapshot {
        snapshot_of(self.ep)
    }
}

/// The TCP baseline's client: counts requests as round trips and bytes with their frames.
impl SpatialOps for TcpClient {
    async fn insert(&mut self, rect: Rect, id: u64) -> Result<(), CatfishError> {
        TcpClient::insert(self, rect, id).map_err(tcp_error)
    }
    async fn search(&mut self, q: Rect, hits: &mut Vec<Entry>) -> Result<(), CatfishError> {
        TcpClient::search(self, q, hits).map_err(tcp_error)
    }
    fn stats(&self) -> ClientStats {
        ClientStats {
            messaging_searches: self.searches,
            ..ClientStats::default()
        }
    }
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            bytes_out: self.bytes_out,
            bytes_in: self.bytes_in,
            round_trips: self.requests,
            doorbells: self.requests,
            ..Snapshot::default()
        }
    }
}

fn tcp_error(e: String) -> CatfishError {
    // The message is printed by the bench; `Protocol` carries a static string only.
    eprintln!("remora: {e}");
    CatfishError::Protocol("the TCP connection failed (see above)")
}

/// Which phase [`part`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// LOAD: inserts the data set's objects.
    Load,
    /// The unmeasured warm-up (`--warmup`): the workload, from its own share of operations
    /// and its own random stream, so the measured phase draws what it drew without it.
    Warm,
    /// The measured run phase.
    Run,
}

/// One client's LOAD, warm-up or run phase.
pub(super) async fn part(
    c: &mut impl SpatialOps,
    sh: &Shared<'_>,
    clock: &dyn Clocks,
    worker: usize,
    phase: Phase,
) -> Result<Part, String> {
    let load = phase == Phase::Load;
    let mut hist = new_hist();
    let mut counts = OpCounts::default();
    let warm_salt = if phase == Phase::Warm { 0x3a2b_0000 } else { 0 };
    let mut rng = Rng::new(sh.a.sim.seed ^ 0x5a71a1 ^ warm_salt ^ (worker as u64 + 1) << 20);
    let mut hits: Vec<Entry> = Vec::new();
    let s0 = c.snapshot();
    let st0 = c.stats();
    let start_ns = clock.now_ns();
    let mut timeline = crate::bench::phase::steady::Timeline::new(start_ns);
    let busy0 = clock.busy_ns();
    let llc0 = clock.llc();
    let mut local = 0u64;
    loop {
        if sh.stop.load(Ordering::Relaxed) {
            break;
        }
        let insert_id = if load {
            let n = sh.next_load.fetch_add(1, Ordering::Relaxed);
            if n >= sh.records {
                break;
            }
            Some(n)
        } else if phase == Phase::Warm {
            let left = sh
                .warm_left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            if left.is_err() {
                break;
            }
            (rng.below(100) < sh.insert_pct)
                .then(|| sh.records + sh.inserted.fetch_add(1, Ordering::Relaxed))
        } else {
            if let Some(b) = sh.budget
                && sh.issued.fetch_add(1, Ordering::Relaxed) >= b
            {
                break;
            }
            let d = sh.deadline_ns.load(Ordering::Relaxed);
            if d != 0 && local.is_multiple_of(16) && clock.now_ns() >= d {
                sh.stop.store(true, Ordering::Relaxed);
                break;
            }
            (rng.below(100) < sh.insert_pct)
                .then(|| sh.records + sh.inserted.fetch_add(1, Ordering::Relaxed))
        };
        let t0 = clock.now_ns();
        let res: Result<(), CatfishError> = match insert_id {
            Some(id) => {
                counts.inserts += 1;
                c.insert(sh.data.object(id), id).await
            }
            None => {
                counts.reads += 1;
                let q = sh.data.window(&mut rng);
                hits.clear();
                let r = c.search(q, &mut hits).await;
                counts.scanned += hits.len() as u64;
                r
            }
        };
        if let Err(e) = res {
            sh.stop.store(true, Ordering::Relaxed);
            return Err(e.to_string());
        }
        let done = clock.now_ns();
        let _ = hist.record(done.saturating_sub(t0).max(1));
        timeline.record(done);
        local += 1;
    }
    let st1 = c.stats();
    Ok(Part {
        hist,
        counts,
        snap: c.snapshot() - s0,
        start_ns,
        end_ns: clock.now_ns(),
        busy: busy0.zip(clock.busy_ns()),
        llc: llc0.zip(clock.llc()),
        offloaded: st1.offloaded_searches - st0.offloaded_searches,
        messaging: st1.messaging_searches - st0.messaging_searches,
        node_reads: st1.node_reads - st0.node_reads,
        torn_retries: st1.torn_retries - st0.torn_retries,
        restarts: st1.reuse_restarts - st0.reuse_restarts,
        heartbeats: st1.heartbeats - st0.heartbeats,
        timeline,
    })
}

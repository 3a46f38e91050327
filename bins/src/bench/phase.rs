//! One phase (LOAD or a YCSB workload) of one worker: its coroutines, their latencies and
//! counts, and the JSON record made from all workers' results.
use super::BenchArgs;
use super::index::{ShermanSummary, Stats};
use super::resizes::ResizeWatch;
use super::ycsb::{Distribution, KeyChooser, OpKind, Rng, Workload};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use remora::core::Snapshot;
use remora::core::index::KvIndex;
use remora::core::work::Work;
use remora::poller::clock::Clock;
use remora::poller::executor::join_all;
use remora::poller::sim::{ClientCtx, LlcStats, NvmStats};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod record;
pub mod steady;
pub use record::*;
use steady::Timeline;

/// What one worker measured in one phase.
pub struct PhaseOut {
    /// The worker (client thread) that ran it.
    worker: usize,
    counts: OpCounts,
    hist: Histogram<u64>,
    /// The same latencies split by kind: reads and scans, updates and inserts.
    by_kind: [Histogram<u64>; 2],
    snap: Snapshot,
    start_ns: u64,
    end_ns: u64,
    /// The memory nodes' handler busy time (ns) at start and end (sim only).
    busy_ns: Option<(u64, u64)>,
    /// The memory nodes' NVM write counts at start and end (sim with persistent nodes).
    nvm: Option<(NvmStats, NvmStats)>,
    /// The memory nodes' cache counts at start and end (sim only).
    llc: Option<(LlcStats, LlcStats)>,
    smart: SmartSummary,
    sherman: ShermanSummary,
    canrt: remora::core::canrt::ClientStats,
    key_bytes: u64,
    /// Latencies of the operations that overlapped a CANRT resize.
    during_resize: Histogram<u64>,
    /// When its operations completed (whether the phase ran at a steady rate).
    timeline: Timeline,
}

/// Shared state of a phase.
pub struct Phase<'a> {
    pub workload: Workload,
    pub dist: Distribution,
    pub records: u64,
    /// Operation budget (shared) or deadline.
    pub budget: Option<u64>,
    /// Deadline on the phase clock (0: none).
    pub deadline_ns: AtomicU64,
    /// Start of the measured window on the phase clock, when it opens after the phase
    /// starts (`--warmup-seconds`; 0: the phase is measured from its start). Operations
    /// completing before it are run and not counted, and no client pauses at it.
    pub measure_from_ns: AtomicU64,
    pub issued: AtomicU64,
    pub inserted: &'a AtomicU64,
    pub next_load: AtomicU64,
    pub stop: AtomicBool,
    pub pb: ProgressBar,
    /// Mixed into every coroutine's seed: a warm-up phase draws other keys than the run.
    pub salt: u64,
}

impl<'a> Phase<'a> {
    pub fn new(
        workload: Workload,
        dist: Distribution,
        records: u64,
        budget: Option<u64>,
        inserted: &'a AtomicU64,
        pb: ProgressBar,
    ) -> Phase<'a> {
        Phase {
            workload,
            dist,
            records,
            budget,
            deadline_ns: AtomicU64::new(0),
            measure_from_ns: AtomicU64::new(0),
            issued: AtomicU64::new(0),
            inserted,
            next_load: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            pb,
            salt: 0,
        }
    }

    /// LOAD and the run phase of `workload`, as the flags ask.
    pub fn pair(
        a: &BenchArgs,
        workload: Workload,
        inserted: &'a AtomicU64,
    ) -> (Distribution, Phase<'a>, Phase<'a>) {
        let dist = a.distribution.unwrap_or(if workload == Workload::D {
            Distribution::Latest
        } else {
            Distribution::Zipfian
        });
        let load = Phase::new(
            Workload::Load,
            dist,
            a.records,
            None,
            inserted,
            super::progress(a, a.records, "LOAD".into()),
        );
        let ops = a.operations.unwrap_or(if a.seconds.is_some() {
            u64::MAX
        } else {
            a.records
        });
        let run = Phase::new(
            workload,
            dist,
            a.records,
            (ops != u64::MAX).then_some(ops),
            inserted,
            super::progress(
                a,
                if ops == u64::MAX { 0 } else { ops },
                format!("YCSB-{}", workload.name()),
            ),
        );
        (dist, load, run)
    }
}

pub fn value_for(n: u64, size: usize, out: &mut [u8]) {
    let w = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
    for (i, b) in out[..size].iter_mut().enumerate() {
        *b = w[i % 8];
    }
}

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds are valid")
}

/// Where a phase's time comes from: the wall clock (soft), or the simulation's virtual
/// clock as seen by one client (sim).
pub enum Time<'c> {
    Wall(Clock),
    Virtual(&'c ClientCtx),
}

pub struct Ctx<'a> {
    pub a: &'a BenchArgs,
    pub time: Time<'a>,
    /// The resize clock of the CANRT server under test, if the bench runs it.
    pub resizes: ResizeWatch,
}

impl Ctx<'_> {
    pub fn now_ns(&self) -> u64 {
        match &self.time {
            Time::Wall(c) => c.now_ns(),
            Time::Virtual(c) => c.now_ns(),
        }
    }
    /// Bytes written to the memory nodes' persistent memory so far (sim with persistent
    /// nodes only).
    pub fn nvm(&self) -> Option<NvmStats> {
        match &self.time {
            Time::Wall(_) => None,
            Time::Virtual(c) if c.persistent() => Some(c.nvm_total()),
            Time::Virtual(_) => None,
        }
    }
    /// The memory nodes' handlers' cache counts so far (sim only).
    pub fn server_llc(&self) -> Option<LlcStats> {
        match &self.time {
            Time::Wall(_) => None,
            Time::Virtual(c) => Some(c.server_llc_total()),
        }
    }
    /// States client CPU work of the calling coroutine (sim only: on real CPUs the work
    /// takes its own time; see `Endpoint::charge`).
    pub fn charge(&self, w: Work) {
        if let Time::Virtual(c) = &self.time {
            c.charge(w);
        }
    }
    /// Pays the client CPU work the calling coroutine stated and has not paid yet (sim only),
    /// so that an operation's latency includes the work after its last post.
    pub async fn settle(&self) {
        if let Time::Virtual(c) = &self.time {
            c.settle().await;
        }
    }
    /// The memory nodes' handler-thread busy time so far (sim only: virtual CPU time).
    pub fn server_busy_ns(&self) -> Option<u64> {
        match &self.time {
            Time::Wall(_) => super::soft::local_server_cpu_ns(),
            Time::Virtual(c) => Some(c.server_busy_ns()),
        }
    }
}

/// Runs one coroutine of a phase against `idx`.
#[allow(clippy::too_many_arguments)]
async fn coroutine<I: KvIndex>(
    idx: &I,
    ctx: &Ctx<'_>,
    ph: &Phase<'_>,
    seed: u64,
    hist: &RefCell<Histogram<u64>>,
    by_kind: &RefCell<[Histogram<u64>; 2]>,
    during_resize: &RefCell<Histogram<u64>>,
    counts: &RefCell<OpCounts>,
    key_bytes: &RefCell<u64>,
    timeline: &RefCell<Timeline>,
) -> Result<(), String> {
    let a = ctx.a;
    let mut rng = Rng::new(seed);
    let mut chooser = KeyChooser::over(ph.dist, ph.records, a.theta, a.zipf_items);
    let mut key = [0u8; 32];
    let mut val = vec![0u8; a.value_size];
    let mut out = vec![0u8; a.value_size.max(8)];
    let mix = ph.workload.mix();
    let mut local = 0u64;
    loop {
        if ph.stop.load(Ordering::Relaxed) {
            break;
        }
        // Pick the operation and its key number.
        let (op, n) = if ph.workload == Workload::Load {
            let n = ph.next_load.fetch_add(1, Ordering::Relaxed);
            if n >= ph.records {
                break;
            }
            (OpKind::Insert, n)
        } else {
            if let Some(b) = ph.budget
                && ph.issued.fetch_add(1, Ordering::Relaxed) >= b
            {
                break;
            }
            let d = ph.deadline_ns.load(Ordering::Relaxed);
            if d != 0 && local.is_multiple_of(16) && ctx.now_ns() >= d {
                ph.stop.store(true, Ordering::Relaxed);
                break;
            }
            let r = rng.below(100) as u32;
            let op = if r < mix[0] {
                OpKind::Read
            } else if r < mix[0] + mix[1] {
                OpKind::Update
            } else if r < mix[0] + mix[1] + mix[2] {
                OpKind::Insert
            } else {
                OpKind::Scan
            };
            let existing = ph.records + ph.inserted.load(Ordering::Relaxed);
            let n = match op {
                OpKind::Insert => ph.records + ph.inserted.fetch_add(1, Ordering::Relaxed),
                _ => chooser.next(&mut rng, existing),
            };
            (op, n)
        };
        let kl = a.key(n, &mut key);
        let k = &key[..kl];
        ctx.charge(Work::KeyGen(1));
        ctx.settle().await;
        let think_us = match op {
            OpKind::Read | OpKind::Scan => a.think_read_us,
            OpKind::Update | OpKind::Insert => a.think_write_us,
        };
        if think_us > 0
            && ph.workload != Workload::Load
            && let Time::Virtual(c) = &ctx.time
        {
            let slack = match a.think_slack_us {
                0 => 0,
                us => rng.below(us * 1000 + 1),
            };
            c.sleep(think_us * 1000 + slack).await;
        }
        let t0 = ctx.now_ns();
        let rc0 = ctx.resizes.now();
        let mut c = OpCounts::default();
        match op {
            OpKind::Read => {
                c.reads = 1;
                match idx.get(k, &mut out).await.map_err(|e| e.to_string())? {
                    Some(_) => {}
                    None => c.misses = 1,
                }
            }
            OpKind::Update => {
                c.updates = 1;
                value_for(n ^ t0, a.value_size, &mut val);
                if !idx.update(k, &val).await.map_err(|e| e.to_string())? {
                    c.misses = 1;
                }
            }
            OpKind::Insert => {
                c.inserts = 1;
                value_for(n, a.value_size, &mut val);
                idx.upsert(k, &val).await.map_err(|e| e.to_string())?;
            }
            OpKind::Scan => {
                c.scans = 1;
                let len = if ph.workload == Workload::Range {
                    a.scan_max.max(1)
                } else {
                    1 + rng.below(a.scan_max.max(1) as u64) as usize
                };
                c.scanned = idx
                    .scan(k, len, &mut |_, _| {})
                    .await
                    .map_err(|e| e.to_string())? as u64;
            }
        }
        ctx.settle().await;
        let done = ctx.now_ns();
        let d = ph.deadline_ns.load(Ordering::Relaxed);
        if d != 0 && done > d {
            // A timed run counts what completes within its window, as a benchmark that samples
            // completed operations per interval does (the SMART authors' ycsb_test: `tp`
            // counters read every second): an operation still in flight at the deadline,
            // however long it waits, neither counts nor stretches the window.
            ph.stop.store(true, Ordering::Relaxed);
            break;
        }
        if done < ph.measure_from_ns.load(Ordering::Relaxed) {
            // Before the window opens (`--warmup-seconds`): run, not counted.
            continue;
        }
        let lat = done.saturating_sub(t0).max(1);
        let _ = hist.borrow_mut().record(lat);
        timeline.borrow_mut().record(done);
        let kind = usize::from(matches!(op, OpKind::Update | OpKind::Insert));
        let _ = by_kind.borrow_mut()[kind].record(lat);
        if ResizeWatch::overlapped(rc0, ctx.resizes.now()) {
            // A resize of the CANRT tree was under way when the operation started, or
            // began before it ended.
            let _ = during_resize.borrow_mut().record(lat);
        }
        counts.borrow_mut().add(&c);
        *key_bytes.borrow_mut() += kl as u64;
        local += 1;
        if local.is_multiple_of(256) {
            ph.pb.inc(256);
        }
    }
    ph.pb.inc(local % 256);
    Ok(())
}

/// A coroutine of a phase, or the timer that opens its window late.
type Task<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + 'a>>;

/// The counters a phase's figures are differences of, read where its measured window opens.
struct Marks {
    snap: Snapshot,
    stats: Stats,
    at_ns: u64,
    busy: Option<u64>,
    nvm: Option<NvmStats>,
    llc: Option<LlcStats>,
}

impl Marks {
    fn read(ctx: &Ctx<'_>, snapshot: &dyn Fn() -> Snapshot, stats: &dyn Fn() -> Stats) -> Marks {
        Marks {
            snap: snapshot(),
            stats: stats(),
            at_ns: ctx.now_ns(),
            busy: ctx.server_busy_ns(),
            nvm: ctx.nvm(),
            llc: ctx.server_llc(),
        }
    }
}

/// Runs one phase of one worker: `coroutines` coroutines, joined into one future.
pub async fn phase<I: KvIndex>(
    idx: &I,
    ctx: &Ctx<'_>,
    ph: &Phase<'_>,
    worker: usize,
    snapshot: &dyn Fn() -> Snapshot,
    stats: &dyn Fn() -> Stats,
) -> Result<PhaseOut, String> {
    let hist = RefCell::new(new_hist());
    let by_kind = RefCell::new([new_hist(), new_hist()]);
    let during_resize = RefCell::new(new_hist());
    let counts = RefCell::new(OpCounts::default());
    let key_bytes = RefCell::new(0u64);
    let now = ctx.now_ns();
    // A window that opens later (`--warmup-seconds`, sim): its counters are read when it
    // opens, by a timer beside the coroutines, while they run on.
    let from = ph.measure_from_ns.load(Ordering::Relaxed);
    let opens = match &ctx.time {
        Time::Virtual(c) if from > now => Some((*c, from)),
        _ => None,
    };
    let marks = RefCell::new(Marks::read(ctx, snapshot, stats));
    let timeline = RefCell::new(Timeline::new(opens.map_or(now, |(_, from)| from)));
    let phase_salt = (ph.workload as u64 * 0x1000_0000) ^ ph.salt;
    let coros: Vec<_> = (0..ctx.a.coroutines)
        .map(|c| {
            let seed = ctx.a.sim.seed ^ phase_salt ^ ((worker * 4096 + c) as u64 + 1);
            coroutine(
                idx,
                ctx,
                ph,
                seed,
                &hist,
                &by_kind,
                &during_resize,
                &counts,
                &key_bytes,
                &timeline,
            )
        })
        .collect();
    let results = match opens {
        None => join_all(coros).await,
        Some((c, from)) => {
            let timer = async {
                c.sleep(from - now).await;
                *marks.borrow_mut() = Marks::read(ctx, snapshot, stats);
                Ok(())
            };
            let mut all: Vec<Task<'_>> =
                coros.into_iter().map(|f| Box::pin(f) as Task<'_>).collect();
            all.push(Box::pin(timer));
            join_all(all).await
        }
    };
    let Marks {
        snap: s0,
        stats: st0,
        at_ns: start_ns,
        busy: busy0,
        nvm: nvm0,
        llc: llc0,
    } = marks.into_inner();
    // A timed run's window ends at its deadline (operations completing later are not
    // counted, see `coroutine`).
    let end_ns = match ph.deadline_ns.load(Ordering::Relaxed) {
        0 => ctx.now_ns(),
        d => ctx.now_ns().min(d),
    };
    let busy_ns = busy0.zip(ctx.server_busy_ns());
    let nvm = nvm0.zip(ctx.nvm());
    let llc = llc0.zip(ctx.server_llc());
    for r in results {
        r?;
    }
    let st1 = stats();
    let sh = |f: fn(&ShermanSummary) -> u64| f(&st1.sherman) - f(&st0.sherman);
    Ok(PhaseOut {
        worker,
        counts: counts.into_inner(),
        hist: hist.into_inner(),
        by_kind: by_kind.into_inner(),
        snap: snapshot() - s0,
        start_ns,
        end_ns,
        busy_ns,
        nvm,
        llc,
        smart: SmartSummary::from_delta(&st0.smart, &st1.smart),
        sherman: ShermanSummary {
            locks_acquired: sh(|s| s.locks_acquired),
            lock_handovers: sh(|s| s.lock_handovers),
            splits: sh(|s| s.splits),
            cache_hits: sh(|s| s.cache_hits),
            cache_misses: sh(|s| s.cache_misses),
            speculative_tries: sh(|s| s.speculative_tries),
            speculative_hits: sh(|s| s.speculative_hits),
            group_retries: sh(|s| s.group_retries),
            sibling_reads: sh(|s| s.sibling_reads),
        },
        canrt: canrt_delta(&st0.canrt, &st1.canrt),
        key_bytes: key_bytes.into_inner(),
        timeline: timeline.into_inner(),
        during_resize: during_resize.into_inner(),
    })
}

fn canrt_delta(
    a: &remora::core::canrt::ClientStats,
    b: &remora::core::canrt::ClientStats,
) -> remora::core::canrt::ClientStats {
    remora::core::canrt::ClientStats {
        torn_retries: b.torn_retries - a.torn_retries,
        lock_waits: b.lock_waits - a.lock_waits,
        refreshes: b.refreshes - a.refreshes,
        resize_requests: b.resize_requests - a.resize_requests,
        skipped: b.skipped - a.skipped,
        skip_requests: b.skip_requests - a.skip_requests,
        turn_waits: b.turn_waits - a.turn_waits,
        credit_waits: b.credit_waits - a.credit_waits,
        credit_wait_ns: b.credit_wait_ns - a.credit_wait_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(worker: usize, cache_bytes: u64) -> PhaseOut {
        PhaseOut {
            worker,
            counts: OpCounts::default(),
            hist: new_hist(),
            by_kind: [new_hist(), new_hist()],
            snap: Snapshot::default(),
            start_ns: 0,
            end_ns: 1,
            busy_ns: None,
            nvm: None,
            llc: None,
            smart: SmartSummary {
                cache_bytes,
                ..SmartSummary::default()
            },
            sherman: ShermanSummary::default(),
            canrt: Default::default(),
            key_bytes: 0,
            during_resize: new_hist(),
            timeline: Timeline::new(0),
        }
    }

    /// Each worker reports its compute node's whole cache: two nodes of two threads hold
    /// two caches, not four.
    #[test]
    fn cache_bytes_count_each_node_once() {
        let line = "--index smart --fabric sim --compute-nodes 2 --clients-per-node 2";
        #[derive(clap::Parser)]
        #[command(no_binary_name = true)]
        struct Line {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let a = <Line as clap::Parser>::try_parse_from(line.split_whitespace())
            .unwrap()
            .bench;
        let idx = super::super::index_cfg(&a).unwrap();
        let outs: Vec<PhaseOut> = (0..4).map(|w| out(w, 100 + (w / 2) as u64)).collect();
        let r = record(
            &a,
            &idx,
            Workload::C,
            "run",
            Distribution::Zipfian,
            &outs,
            "sim",
            vec![],
        );
        assert_eq!(r.smart.cache_bytes, 100 + 101);
        let per_thread = BenchArgs {
            per_thread_state: true,
            ..a.clone()
        };
        let r = record(
            &per_thread,
            &idx,
            Workload::C,
            "run",
            Distribution::Zipfian,
            &outs,
            "sim",
            vec![],
        );
        assert_eq!(r.smart.cache_bytes, 2 * (100 + 101));
    }
}

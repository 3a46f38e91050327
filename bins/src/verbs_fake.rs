//! `remora perf --fabric verbs --fake`: the client's CPU per lookup on the fake verbs device
//! (`remora::verbs::fake`), which completes work requests in memory at post time, so that
//! what is measured is the client: index code, executor, and the verbs data path (chains,
//! slots, completion dispatch, copies). Beside each index, a floor loop on the same device
//! that only posts and polls the same READs (as many per lookup as the index's work requests,
//! of their mean size, one work request each, straight to the device: what any lookup must at
//! least do, the results landing in place), and the ratio of the two; then the same READs
//! as the fabric's `qp.read` futures on the same coroutines (what the verbs data path and
//! executor add to the floor, without the index).
//!
//! One thread, `--coroutines` coroutines, `--seconds` of lookups per index after loading
//! [`KEYS`] keys and one warm-up pass. CPU is the thread's (`CLOCK_THREAD_CPUTIME_ID`). The
//! fake device's own work (the copies a NIC would do, Erda's server on a SEND) runs on this
//! thread too, in the index's figure and in its floor alike; lookups of all three indexes
//! are one-sided READs, so no server work is in them.
use crate::Service;
use crate::args::PerfArgs;
use remora::core::block_on::block_on;
use remora::core::erda::{Erda, ErdaClientConfig};
use remora::core::fabric::{Endpoint, QueuePair};
use remora::core::index::KvIndex;
use remora::core::sherman::{Sherman, ShermanConfig};
use remora::core::smart::{KeyMode, Smart, SmartConfig, Techniques};
use remora::poller::executor::{COROUTINE_POLLS, run_coroutines};
use remora::poller::frames;
use remora::verbs::qp::RECV_LEN;
use remora::verbs::{FakeEndpoint, FakeNode, VerbsStats};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Keys loaded into each index.
pub const KEYS: u64 = 10_000;
const REGION: u64 = 256 << 20;
const CHUNK: u64 = 1 << 20;
const DM: u64 = 256 << 10;

/// What one index's lookups cost.
struct Row {
    name: &'static str,
    ops: u64,
    cpu_ns: f64,
    floor_ns: f64,
    /// The same READs as `qp.read` futures on the same coroutines.
    fabric_ns: f64,
    d: VerbsStats,
    bytes_in: u64,
    /// Coroutine polls the executor made during the measured lookups.
    co_polls: u64,
    /// Bytes of one lookup coroutine's future (its frame).
    frame: usize,
    /// Frame memory replaced by a bigger one, and bytes of futures placed on the heap
    /// (outside registered memory), at the warm-up's and the measured lookups' spawns.
    grown: u64,
    heap_frames: u64,
}

fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn key(i: u64) -> [u8; 8] {
    (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).to_be_bytes()
}

fn node(service: Service) -> Result<Rc<FakeNode>, String> {
    let handler = crate::memnode::handler_for(service, REGION, CHUNK, RECV_LEN)?;
    FakeNode::new(0, REGION, CHUNK, DM, handler).map_err(|e| e.to_string())
}

/// The value every key holds.
const VALUE: [u8; 8] = [7u8; 8];

/// One coroutine of a pass: lookups of keys `c`, `c + co`, ... (checked), all of them,
/// again until `deadline`. Its own async fn, not one async block that can also upsert: a
/// coroutine's frame holds the largest future it may await, so a block with both carried
/// the upsert's frame into every lookup-only coroutine (SMART's 30,424 B for `get`'s
/// 17,392 B).
async fn lookups<I: KvIndex>(
    name: &str,
    idx: &I,
    c: usize,
    co: usize,
    deadline: Option<Instant>,
    done: &Cell<u64>,
) -> Result<(), String> {
    let mut out = [0u8; 8];
    loop {
        let mut i = c as u64;
        while i < KEYS {
            let hit = idx
                .get(&key(i), &mut out)
                .await
                .map_err(|e| format!("{name} lookup: {e:?}"))?;
            if hit.is_none() || out != VALUE {
                return Err(format!("{name}: key {i} lost or wrong"));
            }
            done.set(done.get() + 1);
            i += co as u64;
        }
        if deadline.is_none_or(|d| Instant::now() >= d) {
            return Ok(());
        }
    }
}

/// As [`lookups`], upserting each key (its value unchanged).
async fn upserts<I: KvIndex>(
    name: &str,
    idx: &I,
    c: usize,
    co: usize,
    deadline: Option<Instant>,
    done: &Cell<u64>,
) -> Result<(), String> {
    loop {
        let mut i = c as u64;
        while i < KEYS {
            idx.upsert(&key(i), &VALUE)
                .await
                .map_err(|e| format!("{name} upsert: {e:?}"))?;
            done.set(done.get() + 1);
            i += co as u64;
        }
        if deadline.is_none_or(|d| Instant::now() >= d) {
            return Ok(());
        }
    }
}

/// Runs `coros` to the end (the first error, if any), noting one coroutine's frame size.
fn drive<F: Future<Output = Result<(), String>>>(
    coros: Vec<F>,
    frame: &Cell<usize>,
) -> Result<(), String> {
    frame.set(coros.first().map_or(0, std::mem::size_of_val));
    for r in run_coroutines(coros) {
        r?;
    }
    Ok(())
}

/// Loads, warms up, then measures lookups of `idx` for `secs` on `co` coroutines, and the
/// floor loop for the same READs.
fn measure<I: KvIndex>(
    name: &'static str,
    ep: &FakeEndpoint,
    idx: &I,
    co: usize,
    secs: f64,
    writes: bool,
) -> Result<Row, String> {
    block_on(async {
        for i in 0..KEYS {
            idx.upsert(&key(i), &VALUE)
                .await
                .map_err(|e| format!("{name} load: {e:?}"))?;
        }
        Ok::<(), String>(())
    })?;
    let frame = Cell::new(0usize);
    let pass = |deadline: Option<Instant>| -> Result<u64, String> {
        let done = Cell::new(0u64);
        let done = &done;
        if writes {
            let coros = (0..co)
                .map(|c| upserts(name, idx, c, co, deadline, done))
                .collect();
            drive(coros, &frame)?;
        } else {
            let coros = (0..co)
                .map(|c| lookups(name, idx, c, co, deadline, done))
                .collect();
            drive(coros, &frame)?;
        }
        Ok(done.get())
    };
    let (g0, h0) = (
        frames::GROWN.load(Ordering::Relaxed),
        frames::HEAP_FALLBACK_BYTES.load(Ordering::Relaxed),
    );
    pass(None)?;
    let qp = ep.qp(0).map_err(|e| e.to_string())?;
    let (s0, c0) = (ep.stats(), qp.counters().snapshot());
    let p0 = COROUTINE_POLLS.load(Ordering::Relaxed);
    let t0 = thread_cpu_ns();
    let ops = pass(Some(Instant::now() + Duration::from_secs_f64(secs)))?;
    let cpu = thread_cpu_ns() - t0;
    let co_polls = COROUTINE_POLLS.load(Ordering::Relaxed) - p0;
    let grown = frames::GROWN.load(Ordering::Relaxed) - g0;
    let heap_frames = frames::HEAP_FALLBACK_BYTES.load(Ordering::Relaxed) - h0;
    let d = ep.stats() - s0;
    let bytes_in = (qp.counters().snapshot() - c0).bytes_in;
    // The floor: as many READs per lookup as the index posted (work requests, not doorbells:
    // batching puts several lookups' READs behind one doorbell), of their mean size, each
    // posted and polled alone, straight to the device.
    let per_op = (d.wrs as f64 / ops as f64).round().max(1.0) as u32;
    let size = (bytes_in / d.wrs.max(1)).clamp(8, 4096) as usize;
    let mut buf = ep
        .pool()
        .take(size)
        .ok_or("no registered buffer for the floor loop")?;
    let floor_ops = ops.max(1);
    let f0 = thread_cpu_ns();
    qp.floor_loop(floor_ops, per_op, 4096, &mut buf)
        .map_err(|e| format!("floor loop: {e}"))?;
    let floor = thread_cpu_ns() - f0;
    drop(buf);
    // The same READs through the fabric's own post futures, on the same coroutines.
    let remote = remora::core::GlobalAddr::new(0, 4096);
    let each = floor_ops.div_ceil(co as u64);
    let coros = (0..co)
        .map(|_| async move {
            let mut frame = [0u8; 4096];
            for _ in 0..each * u64::from(per_op) {
                qp.read(remote, &mut frame[..size]).await?;
            }
            Ok::<(), remora::core::FabricError>(())
        })
        .collect();
    let p0 = thread_cpu_ns();
    for r in run_coroutines(coros) {
        r.map_err(|e| format!("fabric loop: {e}"))?;
    }
    let fabric = thread_cpu_ns() - p0;
    Ok(Row {
        name,
        ops,
        cpu_ns: cpu as f64 / ops.max(1) as f64,
        floor_ns: floor as f64 / floor_ops as f64,
        fabric_ns: fabric as f64 / (each * co as u64) as f64,
        d,
        bytes_in,
        co_polls,
        frame: frame.get(),
        grown,
        heap_frames,
    })
}

/// Runs the three indexes and prints the table.
pub fn run(a: &PerfArgs) -> Result<(), String> {
    if a.connect.is_some() || a.threads != 1 {
        return Err(
            "--fake runs one thread against memory nodes in this process: drop \
                    --connect and --threads"
                .into(),
        );
    }
    let (co, secs) = (a.coroutines.max(1), a.seconds);
    let mut rows = Vec::new();
    {
        let n = node(Service::Echo)?;
        let ep = FakeEndpoint::connect(&[n]).map_err(|e| e.to_string())?;
        let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
        let t = block_on(Smart::open(&ep, cfg)).map_err(|e| format!("smart: {e:?}"))?;
        rows.push(measure("smart", &ep, &t, co, secs, false)?);
    }
    {
        let n = node(Service::Echo)?;
        let ep = FakeEndpoint::connect(&[n]).map_err(|e| e.to_string())?;
        let t = block_on(Sherman::create(&ep, ShermanConfig::sherman()))
            .map_err(|e| format!("sherman: {e:?}"))?;
        rows.push(measure("sherman", &ep, &t, co, secs, false)?);
    }
    {
        let n = node(Service::Erda)?;
        let ep = FakeEndpoint::connect(&[n]).map_err(|e| e.to_string())?;
        let t = block_on(Erda::open(&ep, ErdaClientConfig::default()))
            .map_err(|e| format!("erda: {e:?}"))?;
        rows.push(measure("erda", &ep, &t, co, secs, false)?);
    }
    {
        // Erda's upserts: a WRITE_WITH_IMM request and the server's SEND reply, one
        // coroutine receiving for all (its receive raced with a deadline pause), the others
        // waiting for their reply to be routed (also raced with a pause).
        let n = node(Service::Erda)?;
        let ep = FakeEndpoint::connect(&[n]).map_err(|e| e.to_string())?;
        let t = block_on(Erda::open(&ep, ErdaClientConfig::default()))
            .map_err(|e| format!("erda: {e:?}"))?;
        // More coroutines than the handle's 64 mailboxes can starve one past its deadline
        // (a freed mailbox goes to whoever asks first): reported, the other rows kept.
        match measure("erda-upsert", &ep, &t, co, secs, true) {
            Ok(r) => rows.push(r),
            Err(e) => eprintln!("erda-upsert row skipped: {e}"),
        }
    }
    println!(
        "fake verbs device, 1 thread x {co} coroutines, {KEYS} keys, 8-byte values, {secs} s \
         of lookups per index; CPU of the client thread"
    );
    println!(
        "{:<11} {:>9} {:>10} {:>9} {:>6} {:>10} {:>6} {:>9} {:>7} {:>8} {:>8} {:>7} {:>10} {:>10} {:>10}",
        "index",
        "lookups",
        "ns/lookup",
        "floor ns",
        "ratio",
        "fabric ns",
        "ratio",
        "doorbells",
        "bytes",
        "polls/cq",
        "co polls",
        "co/op",
        "bounced rd",
        "bounced at",
        "bounced wr"
    );
    for r in &rows {
        let per = |v: u64| v as f64 / r.ops.max(1) as f64;
        println!(
            "{:<11} {:>9} {:>10.0} {:>9.0} {:>5.1}x {:>10.0} {:>5.2}x {:>9.2} {:>7.0} {:>8.2} {:>8.2} {:>7.2} {:>10} {:>10} {:>10}",
            r.name,
            r.ops,
            r.cpu_ns,
            r.floor_ns,
            r.cpu_ns / r.floor_ns.max(1e-9),
            r.fabric_ns,
            r.fabric_ns / r.floor_ns.max(1e-9),
            per(r.d.doorbells),
            per(r.bytes_in),
            r.d.polls_per_completion(),
            r.co_polls as f64 / r.d.completions.max(1) as f64,
            per(r.co_polls),
            r.d.bounced_read,
            r.d.bounced_atomic,
            r.d.bounced_write,
        );
    }
    for r in &rows {
        println!("{} data path (measured lookups): {}", r.name, r.d);
    }
    for r in &rows {
        println!(
            "{} frames: {} B per coroutine x {co} = {} KiB; frame memory grown {}x, {} B of \
             futures on the heap (warm-up and measured spawns)",
            r.name,
            r.frame,
            r.frame * co / 1024,
            r.grown,
            r.heap_frames
        );
    }
    println!(
        "polls/cq: send CQ polls per completion; co polls: coroutine polls per send completion; \
         co/op: coroutine polls per lookup (per upsert)"
    );
    Ok(())
}

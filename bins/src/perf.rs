//! `remora perf`: perftest-style latency and throughput of each verb, over message sizes,
//! worker threads and coroutines. [`run_generic`] drives any fabric's endpoints on the pinned
//! executor; [`run`] and [`check`] are the soft fabric's entry points.
use crate::args::{PerfArgs, PerfVerb};
use crate::report::{Latency, PerOp, PerfRecord};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use remora::core::alloc::RemoteAllocator;
use remora::core::block_on::block_on;
use remora::core::fabric::{Endpoint, Op, QueuePair};
use remora::core::{GlobalAddr, Snapshot};
use remora::poller::clock::Clock;
use remora::poller::executor::{ServerCore, plan_cores, run_coroutines, run_workers};
use remora::poller::soft::harness::{SoftHarness, run_checks};
use remora::poller::soft::{NodeConfig, SoftMemoryNode, control};
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The word hot atomics (`--hot`) hit: the region header's first reserved word.
pub const HOT_WORD_OFFSET: u64 = 48;

/// What one worker thread measured.
struct WorkerResult {
    hist: Histogram<u64>,
    measured_ops: u64,
    all_ops: u64,
    counters: Snapshot,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// The (verb, size) points to measure; atomics only at 8 bytes.
fn points(a: &PerfArgs) -> Vec<(PerfVerb, usize)> {
    let mut v = Vec::new();
    for &verb in &a.verbs {
        if verb.is_atomic() {
            v.push((verb, 8));
        } else {
            v.extend(a.sizes.iter().map(|&s| (verb, s)));
        }
    }
    v
}

/// One coroutine's loop of `verb` at `remote` until `stop`.
async fn drive<Q: QueuePair>(
    qp: &Q,
    verb: PerfVerb,
    size: usize,
    remote: GlobalAddr,
    flags: (&AtomicBool, &AtomicBool),
    hist: &RefCell<Histogram<u64>>,
    ops: (&Cell<u64>, &Cell<u64>),
) -> Result<(), String> {
    let (measuring, stop) = flags;
    let clock = Clock::get();
    // Up to 4 KiB the buffer is part of the coroutine's frame: registered memory under verbs
    // (see `remora::poller::frames`), which the NIC reads and writes in place.
    let mut frame = [0u8; 4096];
    let mut heap = Vec::new();
    let buf: &mut [u8] = if size <= frame.len() {
        &mut frame[..size]
    } else {
        heap.resize(size, 0);
        &mut heap
    };
    buf.fill(0x5a);
    let mut reply = vec![0u8; qp.max_message()];
    let mut expect = 0u64;
    while !stop.load(Relaxed) {
        let t0 = clock.now_ns();
        let r = match verb {
            PerfVerb::Read => qp.read(remote, buf).await,
            PerfVerb::Write => qp.write(remote, buf).await,
            PerfVerb::Cas => qp.cas(remote, expect, expect + 1).await.map(|old| {
                expect = if old == expect { old + 1 } else { old };
            }),
            PerfVerb::Faa => qp.faa(remote, 1).await.map(drop),
            PerfVerb::WriteImm => {
                let r = qp
                    .post(&mut [Op::WriteImm {
                        remote,
                        local: buf,
                        imm: size as u32,
                    }])
                    .await;
                match r {
                    Ok(()) => qp.recv(&mut reply).await.map(drop),
                    Err(e) => Err(e),
                }
            }
            PerfVerb::Send => match qp.send(buf).await {
                Ok(()) => qp.recv(&mut reply).await.map(drop),
                Err(e) => Err(e),
            },
        };
        r.map_err(|e| format!("{} of {size} bytes at {remote}: {e}", verb.name()))?;
        let dt = clock.now_ns().saturating_sub(t0).max(1);
        ops.1.set(ops.1.get() + 1);
        if measuring.load(Relaxed) {
            let _ = hist.borrow_mut().record(dt);
            ops.0.set(ops.0.get() + 1);
        }
    }
    Ok(())
}

fn worker<E: Endpoint>(
    a: &PerfArgs,
    ep: E,
    verb: PerfVerb,
    size: usize,
    flags: (&AtomicBool, &AtomicBool),
) -> Result<WorkerResult, String> {
    let node = *ep
        .nodes()
        .first()
        .ok_or("the endpoint reaches no memory node")?;
    let qp = ep.qp(node).map_err(|e| e.to_string())?;
    if matches!(verb, PerfVerb::Send) && size > qp.max_message() {
        return Err(format!(
            "SEND of {size} bytes exceeds the memory node's {} byte receive buffers",
            qp.max_message()
        ));
    }
    let alloc = block_on(RemoteAllocator::open(qp)).map_err(|e| e.to_string())?;
    let slot = (size as u64).max(64).next_multiple_of(64);
    let mut targets = Vec::with_capacity(a.coroutines);
    for _ in 0..a.coroutines {
        let t = if verb.is_atomic() && a.hot {
            GlobalAddr::new(node, HOT_WORD_OFFSET)
        } else if slot > alloc.chunk_size() {
            return Err(format!(
                "{size} bytes do not fit the memory node's {} byte chunks",
                alloc.chunk_size()
            ));
        } else {
            block_on(alloc.alloc(qp, slot)).map_err(|e| e.to_string())?
        };
        targets.push(t);
    }
    let hist = RefCell::new(histogram());
    let (measured, all) = (Cell::new(0u64), Cell::new(0u64));
    let before = qp.counters().snapshot();
    let coros = targets
        .iter()
        .map(|&t| drive(qp, verb, size, t, flags, &hist, (&measured, &all)))
        .collect();
    for r in run_coroutines(coros) {
        r?;
    }
    Ok(WorkerResult {
        hist: hist.into_inner(),
        measured_ops: measured.get(),
        all_ops: all.get(),
        counters: qp.counters().snapshot() - before,
    })
}

/// Measures every (verb, size) point on endpoints made by `make_ep(worker_index)`.
pub fn run_generic<E: Endpoint>(
    a: &PerfArgs,
    fabric: &str,
    make_ep: impl Fn(usize) -> Result<E, String> + Sync,
    mut notes: Vec<String>,
) -> Result<Vec<PerfRecord>, String> {
    if a.threads == 0 || a.coroutines == 0 || a.seconds <= 0.0 {
        return Err("--threads, --coroutines and --seconds must be positive".into());
    }
    let points = points(a);
    let warmup = (a.seconds * 0.1).clamp(0.05, 1.0);
    let bar = if a.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(points.len() as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .expect("valid progress template"),
    );
    notes.push(format!("clock: {}", Clock::get().source()));
    let mut rows = Vec::new();
    for (verb, size) in points {
        bar.set_message(format!("{} {size} B", verb.name()));
        let (measuring, stop) = (AtomicBool::new(false), AtomicBool::new(false));
        let mut window = Duration::ZERO;
        let (results, pinning) = std::thread::scope(|s| {
            let timer = s.spawn(|| {
                std::thread::sleep(Duration::from_secs_f64(warmup));
                measuring.store(true, Relaxed);
                let t = Instant::now();
                while t.elapsed().as_secs_f64() < a.seconds {
                    std::thread::sleep(Duration::from_millis(20));
                    bar.tick();
                }
                stop.store(true, Relaxed);
                t.elapsed()
            });
            let out = run_workers(a.threads, !a.no_pin, |i| {
                let r = make_ep(i).and_then(|ep| worker(a, ep, verb, size, (&measuring, &stop)));
                if r.is_err() {
                    stop.store(true, Relaxed);
                }
                r
            });
            window = timer.join().unwrap_or_default();
            out
        });
        let results = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        let mut hist = histogram();
        let (mut ops, mut all, mut counters) = (0, 0, Snapshot::default());
        for r in &results {
            hist.add(&r.hist).map_err(|e| e.to_string())?;
            ops += r.measured_ops;
            all += r.all_ops;
            counters = counters + r.counters;
        }
        let secs = window.as_secs_f64();
        let mops = ops as f64 / secs / 1e6;
        let mut row_notes = notes.clone();
        row_notes.push(pinning.to_string());
        rows.push(PerfRecord {
            tool: "remora perf",
            fabric: fabric.to_string(),
            verb: verb.name().to_string(),
            size,
            threads: a.threads,
            coroutines: a.coroutines,
            ops,
            seconds: secs,
            mops,
            mops_per_thread: mops / a.threads as f64,
            gbps: ops as f64 * size as f64 / secs / 1e9,
            latency: Latency::from_hist(&hist),
            per_op: PerOp::new(&counters, all),
            server_ns_per_op: None,
            notes: row_notes,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// `remora perf --fabric soft`.
pub fn run(a: &PerfArgs) -> Result<Vec<PerfRecord>, String> {
    match &a.connect {
        Some(path) => {
            if a.server_core.is_some() {
                return Err("--server-core applies to the in-process memory node, not \
                            --connect (pin a memnode with `remora memnode --core N`)"
                    .into());
            }
            plan_cores(a.threads, !a.no_pin, ServerCore::None)?;
            let path = PathBuf::from(path);
            let info = control::info(&path).map_err(|e| e.to_string())?;
            let notes = vec![format!(
                "memory node {} at {} ({} MiB region)",
                info.node_id,
                path.display(),
                info.region_len >> 20
            )];
            run_generic(
                a,
                "soft",
                |_| control::connect_all(std::slice::from_ref(&path)).map_err(|e| e.to_string()),
                notes,
            )
        }
        None => {
            let cfg = NodeConfig {
                region_len: a.region_mib << 20,
                ..NodeConfig::default()
            };
            let node = SoftMemoryNode::create(cfg).map_err(|e| e.to_string())?;
            let server = a.server_core.map_or(ServerCore::Auto, ServerCore::Core);
            let plan = plan_cores(a.threads, !a.no_pin, server)?;
            for w in &plan.warnings {
                eprintln!("remora: warning: {w}");
            }
            let _server = node.spawn_server_on(plan.server);
            let notes = vec![format!(
                "in-process memory node: {} MiB region on {}",
                a.region_mib,
                node.pages()
            )];
            run_generic(
                a,
                "soft",
                |_| node.endpoint().map_err(|e| e.to_string()),
                notes,
            )
        }
    }
}

/// `remora check --fabric soft`: the conformance suite, in-process or against `--connect`.
pub fn check(a: &PerfArgs, allow_revoke: bool) -> Result<(), String> {
    if let Some(p) = &a.connect {
        let info = control::info(std::path::Path::new(p)).map_err(|e| e.to_string())?;
        if info.service_name() != "echo" {
            return Err(format!(
                "the memnode at {p} runs the `{}` service; the conformance suite needs the \
                 `echo` service (start a separate `remora memnode --service echo` to check \
                 the fabric)",
                info.service_name()
            ));
        }
    }
    let h = match &a.connect {
        Some(p) => SoftHarness::remote(PathBuf::from(p)),
        None => SoftHarness::in_process(NodeConfig {
            region_len: a.region_mib << 20,
            chunk_size: 64 << 10,
            ..NodeConfig::default()
        }),
    }
    .map_err(|e| e.to_string())?;
    print_checks(&run_checks(&h, allow_revoke))
}

/// Prints one PASS/FAIL/SKIP line per check; an error if any failed.
pub fn print_checks(results: &[(&str, Result<(), String>)]) -> Result<(), String> {
    let (mut failed, mut skipped) = (0, 0);
    for (name, r) in results {
        match r {
            Ok(()) => println!("PASS {name}"),
            Err(e) if e.starts_with("SKIP") => {
                skipped += 1;
                println!("SKIP {name}: {}", e.trim_start_matches("SKIP: "));
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {name}: {e}");
            }
        }
    }
    let passed = results.len() - failed - skipped;
    if skipped > 0 {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    if failed > 0 {
        Err(format!("{failed} conformance checks failed"))
    } else {
        Ok(())
    }
}

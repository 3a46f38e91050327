//! Application threads' blocking operations (one thread by default) through a compute node of N pollers: the
//! latency of single operations, and where each thread's wall time went (on a CPU, waiting
//! for one, asleep), from Linux's per-thread scheduler figures. Exits non-zero on a wrong
//! answer.
//!
//! `cargo run --release --example node_latency [-- --pollers N --threads N --ops N --idle-spins N --spin-us N --fake]`
//!
//! Sherman upserts of 8-byte keys on an in-process memory node (soft fabric), or with
//! `--fake` (feature `verbs`) on the fake verbs device. Run it beside busy loops (e.g. two
//! `nice -n 19 sh -c 'while :; do :; done'`) to see the node on an oversubscribed host.
use remora::node::{ComputeNode, IndexConfig};
use std::time::Instant;

struct Args {
    pollers: usize,
    threads: u64,
    ops: u64,
    idle_spins: Option<u32>,
    spin_us: Option<u64>,
    fake: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        pollers: 2,
        threads: 1,
        ops: 2000,
        idle_spins: None,
        spin_us: None,
        fake: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--pollers" => a.pollers = val()?.parse().map_err(|e| format!("--pollers: {e}"))?,
            "--threads" => a.threads = val()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--ops" => a.ops = val()?.parse().map_err(|e| format!("--ops: {e}"))?,
            "--idle-spins" => {
                a.idle_spins = Some(val()?.parse().map_err(|e| format!("--idle-spins: {e}"))?)
            }
            "--spin-us" => a.spin_us = Some(val()?.parse().map_err(|e| format!("--spin-us: {e}"))?),
            "--fake" => a.fake = true,
            other => {
                return Err(format!(
                    "unknown argument {other} (usage: node_latency [--pollers N] [--threads N] \
                     [--ops N] [--idle-spins N] [--spin-us N] [--fake])"
                ));
            }
        }
    }
    if a.ops == 0 || a.pollers == 0 || a.threads == 0 {
        return Err("--ops, --pollers and --threads must be positive".into());
    }
    Ok(a)
}

/// A thread's scheduler figures: ns on a CPU, ns runnable but waiting for one, and its
/// voluntary and involuntary context switches (`/proc/self/task/<tid>/{schedstat,status}`).
#[derive(Default, Clone, Copy)]
struct Sched {
    run_ns: u64,
    wait_ns: u64,
    voluntary: u64,
    involuntary: u64,
}

impl std::ops::Sub for Sched {
    type Output = Sched;
    fn sub(self, o: Sched) -> Sched {
        Sched {
            run_ns: self.run_ns.saturating_sub(o.run_ns),
            wait_ns: self.wait_ns.saturating_sub(o.wait_ns),
            voluntary: self.voluntary.saturating_sub(o.voluntary),
            involuntary: self.involuntary.saturating_sub(o.involuntary),
        }
    }
}

/// Every thread of this process: (name, figures). Empty where `/proc` is missing.
fn threads() -> Vec<(String, Sched)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out: Vec<(String, Sched)> = dir
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let name = std::fs::read_to_string(p.join("comm")).ok()?;
            let stat = std::fs::read_to_string(p.join("schedstat")).ok()?;
            let mut f = stat
                .split_whitespace()
                .map(|v| v.parse::<u64>().unwrap_or(0));
            let mut s = Sched {
                run_ns: f.next()?,
                wait_ns: f.next()?,
                ..Sched::default()
            };
            let status = std::fs::read_to_string(p.join("status")).ok()?;
            for l in status.lines() {
                let num = || l.split_whitespace().nth(1).and_then(|v| v.parse().ok());
                if l.starts_with("voluntary_ctxt_switches") {
                    s.voluntary = num().unwrap_or(0);
                } else if l.starts_with("nonvoluntary_ctxt_switches") {
                    s.involuntary = num().unwrap_or(0);
                }
            }
            Some((
                format!("{}/{}", name.trim(), e.file_name().to_string_lossy()),
                s,
            ))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let mut b = ComputeNode::builder().pollers(a.pollers);
    if let Some(n) = a.idle_spins {
        b = b.idle_spins(n);
    }
    if let Some(us) = a.spin_us {
        b = b.spin_at_most(std::time::Duration::from_micros(us));
    }
    if a.fake {
        #[cfg(feature = "verbs")]
        {
            use remora::node::{Memory, NodeConfig, Service};
            b = b.memory(Memory::VerbsFake {
                config: NodeConfig {
                    region_len: 64 << 20,
                    ..NodeConfig::default()
                },
                service: Service::None,
            });
        }
        #[cfg(not(feature = "verbs"))]
        return Err("--fake needs feature verbs".into());
    } else {
        b = b.in_process_default();
    }
    let node = b.start()?;
    let tree = node.open(IndexConfig::sherman())?;
    // Warm up: the tree's first leaves, the pollers' caches.
    for k in 0..50u64 {
        tree.upsert(&(1u64 << 40 | k).to_be_bytes(), &k.to_le_bytes())
            .wait()?;
    }
    let before = threads();
    let stats0 = node.stats();
    let t = Instant::now();
    // Thread `w` writes keys w + 1, w + 1 + threads, ...: `ops` keys in all.
    let mut lat = std::thread::scope(|s| {
        let workers: Vec<_> = (0..a.threads)
            .map(|w| {
                let tree = &tree;
                s.spawn(move || -> Result<Vec<u64>, remora::node::Error> {
                    let mut lat = Vec::new();
                    for k in (w..a.ops).step_by(a.threads as usize) {
                        let t0 = Instant::now();
                        tree.upsert(&(k + 1).to_be_bytes(), &(k * 3).to_le_bytes())
                            .wait()?;
                        lat.push(t0.elapsed().as_nanos() as u64);
                    }
                    Ok(lat)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(a.ops as usize);
        for w in workers {
            all.extend(w.join().map_err(|_| "a worker panicked")??);
        }
        Ok::<_, Box<dyn std::error::Error>>(all)
    })?;
    let wall = t.elapsed();
    let after = threads();
    for k in (0..a.ops).step_by(97) {
        let v = tree.get(&(k + 1).to_be_bytes()).wait()?;
        if v != Some((k * 3).to_le_bytes().to_vec()) {
            return Err(format!("key {k}: read {v:?}").into());
        }
    }
    lat.sort_unstable();
    let q = |f: f64| lat[((lat.len() - 1) as f64 * f) as usize] as f64 / 1e3;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "node_latency: {} poller(s), {}, {} sherman upserts from {} thread(s) in {:.3} s: \
         mean {:.1} us/op, p50 {:.1}, p99 {:.1}, max {:.1} us; load {}",
        a.pollers,
        if a.fake { "fake verbs" } else { "soft" },
        a.ops,
        a.threads,
        wall.as_secs_f64(),
        wall.as_secs_f64() * 1e6 / a.ops as f64,
        q(0.5),
        q(0.99),
        q(1.0),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let s = node.stats();
    let (parks, wakes) = (s.parks - stats0.parks, s.wakes - stats0.wakes);
    let (busy, task_wakes) = (
        s.busy_parks - stats0.busy_parks,
        s.task_wakes - stats0.task_wakes,
    );
    let thread_parks = s.thread_parks - stats0.thread_parks;
    println!(
        "  pollers: {parks} parks idle, {wakes} wakes by a submitter, {busy} parks with \
         operations waiting, {task_wakes} wakes by a task's waker; application threads: \
         {thread_parks} parks; futex calls per op (parks + wakes, about): {:.2}",
        (parks + wakes + busy + task_wakes + 2 * thread_parks) as f64 / a.ops as f64
    );
    println!(
        "  thread                     on-cpu ms  runnable ms  vol.sw  invol.sw  (during the timed ops)"
    );
    for (name, now) in &after {
        let was = before
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| *s)
            .unwrap_or_default();
        let d = *now - was;
        if d.run_ns == 0 && d.wait_ns == 0 {
            continue;
        }
        println!(
            "  {name:<26} {:>9.1}  {:>11.1}  {:>6}  {:>8}",
            d.run_ns as f64 / 1e6,
            d.wait_ns as f64 / 1e6,
            d.voluntary,
            d.involuntary
        );
    }
    Ok(())
}

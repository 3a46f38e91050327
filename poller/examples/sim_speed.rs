//! Simulator speed: simulated verbs per wall-clock second on one core.
//!
//! `cargo run --release -p remora-poller --example sim_speed [virtual_ms]`
//!
//! Runs 64 B READs (and 8 B FAAs, 64 B WRITEs) from 4 compute nodes x 8 clients x 16
//! coroutines to one memory node, saturating its NIC, and prints how many verbs the
//! simulator executed per second of wall time. The issue asks for at least 2 million.
use remora_poller::sim::perf::{PerfPoint, run_point};
use remora_poller::sim::{ModelVerb, SimConfig};

/// CPU time this process has used, in seconds (the figure "on one core", whatever else runs
/// on the machine).
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_PROCESS_CPUTIME_ID is always supported
    // on Linux, and on failure the call leaves `ts` zeroed, which only makes the figure wrong.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() {
    let ms: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let mut worst = f64::INFINITY;
    let mut worst_cpu = f64::INFINITY;
    let only: Option<usize> = std::env::args().nth(2).and_then(|a| a.parse().ok());
    for (k, (verb, size, cn, clients, co)) in [
        (ModelVerb::Read, 64, 4, 8, 16),
        (ModelVerb::Write, 64, 4, 8, 16),
        (ModelVerb::Faa, 8, 4, 8, 16),
        (ModelVerb::Read, 64, 16, 64, 4),
    ]
    .into_iter()
    .enumerate()
    {
        if only.is_some_and(|o| o != k) {
            continue;
        }
        let p = PerfPoint {
            verb,
            size,
            clients_per_node: clients,
            coroutines: co,
            hot: false,
            warmup_ns: 10_000,
            measure_ns: ms * 1_000_000,
        };
        let cfg = SimConfig {
            compute_nodes: cn,
            seed: 1,
            ..SimConfig::default()
        };
        let cpu0 = cpu_seconds();
        let r = match run_point(cfg, &p, &mut |_| {}) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("sim_speed: {e}");
                std::process::exit(1);
            }
        };
        let cpu = cpu_seconds() - cpu0;
        let speed = r.sim_verbs_per_wall_second();
        let cpu_speed = r.stats.verbs as f64 / cpu.max(1e-9);
        worst = worst.min(speed);
        worst_cpu = worst_cpu.min(cpu_speed);
        println!(
            "{:<6} {:>3} B {:>3}x{:<3}x{:<3} clients: {:>8} verbs ({} ms virtual, {:.1} Mops simulated, {:.2} events/verb) in {:.3} s wall / {:.3} s CPU = {:.2} M verbs per wall second, {:.2} M per CPU second",
            format!("{verb:?}"),
            size,
            cn,
            clients,
            co,
            r.stats.verbs,
            ms,
            r.mops(),
            r.stats.events as f64 / r.stats.verbs.max(1) as f64,
            r.wall_seconds,
            cpu,
            speed / 1e6,
            cpu_speed / 1e6,
        );
    }
    println!(
        "slowest: {:.2} M simulated verbs per wall-clock second, {:.2} M per CPU second (target >= 2)",
        worst / 1e6,
        worst_cpu / 1e6
    );
}

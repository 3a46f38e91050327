//! Why a row landed on the other side of 1 from the paper's, from its two points.
use super::Point;
use crate::repro::Metric;

/// Why a ratio landed on the other side of 1 from the paper's, from what the two points
/// measured: the resources the model saw saturated, closed-loop queueing (for latency
/// claims), the cost per operation of each side, the adaptive client's choices, and the
/// machine's scheduling for wall-clock points. Starts with the kind of cause.
pub(super) fn reason(m: Metric, r: f64, n: &Point, d: &Point, num: &str, den: &str) -> String {
    let us = |ns: f64| ns / 1e3;
    let mut kind = Vec::new();
    let mut why = Vec::new();
    if n.fabric != "sim" || d.fabric != "sim" {
        kind.push("machine load (wall-clock)");
        why.push(format!(
            "real threads on {}: {num} p50 {:.1} µs but p99 {:.1} µs, {den} p50 {:.1} µs, \
             p99 {:.1} µs{}",
            machine_of(n),
            us(n.p50_ns),
            us(n.p99_ns),
            us(d.p50_ns),
            us(d.p99_ns),
            if n.p99_ns > 20.0 * n.p50_ns {
                format!(
                    ": {num}'s tail is {:.0}x its median, threads waiting for a CPU",
                    n.p99_ns / n.p50_ns.max(1.0)
                )
            } else {
                String::new()
            }
        ));
    }
    let bound = |p: &Point| {
        [
            ("memory-node link bandwidth", p.link_use),
            ("memory-node NIC message rate", p.nic_use),
            ("server CPU", p.server_use),
        ]
        .into_iter()
        .filter_map(|(w, u)| u.filter(|u| *u >= 0.7).map(|u| (w, u)))
        .collect::<Vec<_>>()
    };
    let (bn, bd) = (bound(n), bound(d));
    for (b, name) in [(&bn, num), (&bd, den)] {
        for (w, u) in b {
            kind.push(match *w {
                "server CPU" => "server CPU bound (model parameter: server_threads x handler cost)",
                "memory-node link bandwidth" => "bandwidth bound",
                _ => "NIC message-rate bound",
            });
            why.push(format!(
                "{name} saturates the {w} ({:.0}% used)",
                100.0 * u.min(9.99)
            ));
        }
    }
    if let (Some(a), Some(b)) = (n.server_ns_per_op, d.server_ns_per_op)
        && bn.iter().chain(&bd).any(|(w, _)| *w == "server CPU")
    {
        why.push(format!(
            "server CPU per op: {num} {a:.0} ns, {den} {b:.0} ns"
        ));
    }
    if matches!(m, Metric::P50 | Metric::P99 | Metric::Mean) {
        let tp = n.mops / d.mops;
        if r < 1.0 && tp > 1.03 {
            kind.push("queueing (closed loop)");
            why.push(if (n.clients, n.coroutines) == (d.clients, d.coroutines) {
                format!(
                    "{num} runs {tp:.2}x {den}'s throughput at the same {} clients x {} \
                     coroutines, so more of its operations are in flight at the memory nodes",
                    n.clients, n.coroutines
                )
            } else {
                format!(
                    "{num} runs {tp:.2}x {den}'s throughput with {} operations in flight \
                     ({} clients x {} coroutines) against {den}'s {} ({} x {}), so its \
                     operations queue longer at the memory nodes",
                    n.clients * n.coroutines,
                    n.clients,
                    n.coroutines,
                    d.clients * d.coroutines,
                    d.clients,
                    d.coroutines
                )
            });
        }
        if m == Metric::P50 {
            let mean = d.mean_ns / n.mean_ns;
            if (mean > 1.0) != (r > 1.0) {
                kind.push("latency distribution");
                why.push(format!(
                    "by mean latency the ratio is {mean:.2}x ({num} {:.1} µs, {den} {:.1} µs; \
                     p99 {:.1} vs {:.1} µs): the medians and the tails disagree",
                    us(n.mean_ns),
                    us(d.mean_ns),
                    us(n.p99_ns),
                    us(d.p99_ns)
                ));
            }
        }
    }
    if let Some(o) = n.offloaded_share.filter(|o| *o < 0.05) {
        kind.push("adaptive choice");
        why.push(format!("{num} offloaded {:.0}% of its searches", 100.0 * o));
    }
    if kind.is_empty() {
        kind.push("mechanism cost");
        if m == Metric::Mops && n.round_trips_per_op < 0.97 * d.round_trips_per_op {
            why.push(format!(
                "{num} saves {:.0}% of the round trips per op but not time: nothing the model \
                 meters is saturated, so the wait is elsewhere (locks, atomics, retries: p50 \
                 {:.1} vs {:.1} µs, p99 {:.1} vs {:.1} µs)",
                100.0 * (1.0 - n.round_trips_per_op / d.round_trips_per_op),
                us(n.p50_ns),
                us(d.p50_ns),
                us(n.p99_ns),
                us(d.p99_ns)
            ));
        }
    }
    why.push(format!(
        "per op: {num} {:.2} RT, {:.0} B; {den} {:.2} RT, {:.0} B",
        n.round_trips_per_op, n.bytes_per_op, d.round_trips_per_op, d.bytes_per_op
    ));
    kind.dedup();
    format!("{}: {}", kind.join(", "), why.join("; "))
}

/// The machine of wall-clock point `p` as recorded when it was measured; for a point of a
/// file written before that was recorded, this machine now, saying so.
pub fn machine_of(p: &Point) -> String {
    p.machine
        .clone()
        .unwrap_or_else(|| format!("{} (now: not recorded when measured)", machine()))
}

/// This machine, for wall-clock rows: cores, CPU model, load average now (called when a
/// point is measured: [`Point::machine`]).
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into());
    format!("{cores} cores, {model}, load average {load}")
}

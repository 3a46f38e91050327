//! `remora repro ... --memory`: how far `--scale full` can go on this machine. For each
//! paper's index, in the paper's cluster shape, it runs `remora bench --workload load` as a
//! child process at two key counts and two client counts, reads each child's peak RSS and
//! CPU time (`wait4`), and derives bytes and CPU per loaded key, bytes per client thread, and
//! the largest key count that fits this machine's memory and a CPU budget.
//!
//! The child processes measure the sim's whole footprint: the memory nodes' regions (zeroed
//! lazily, so only what the index touches counts), the clients' own state (SMART's radix
//! cache and Sherman's index cache live per compute node, shared by its client threads and
//! bounded by `--cache-mib`: the fit counts one full cache per compute node, not one per
//! client thread), the sim's queues and the bench's histograms.
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// One index to measure, in its paper's shape.
#[derive(Clone, Copy)]
pub struct Probe {
    pub paper: &'static str,
    pub index: &'static str,
    /// Bench flags (without `--records`, `--clients-per-node`, `--workload`).
    pub flags: &'static str,
    pub compute_nodes: usize,
    /// The two key counts (small, large) and client threads per node (few, many).
    pub keys: (u64, u64),
    pub per_node: (usize, usize),
    /// A per-compute-node cache bounded by `--cache-mib` (default 64 MiB) that fills as keys
    /// grow: the runs over keys take `--no-cache` (so bytes per key are the index's own, not
    /// every node's copy of it), the fit counts each compute node's cache full.
    pub cache_mib: Option<f64>,
}

/// The probes of every paper: the index (or indexes) its experiments load.
pub fn probes() -> Vec<Probe> {
    let p = |paper, index, flags, compute_nodes, keys, per_node, cache_mib| Probe {
        paper,
        index,
        flags,
        compute_nodes,
        keys,
        per_node,
        cache_mib,
    };
    vec![
        p(
            "smart",
            "smart",
            "--fabric sim --index smart --compute-nodes 16 --memory-nodes 2",
            16,
            (100_000, 400_000),
            (1, 4),
            Some(64.0),
        ),
        p(
            "sherman",
            "sherman",
            "--fabric sim --index sherman --compute-nodes 8 --memory-nodes 8",
            8,
            (100_000, 400_000),
            (1, 4),
            Some(64.0),
        ),
        p(
            "canrt",
            "canrt",
            "--fabric sim --index canrt --persistent --compute-nodes 2 --memory-nodes 1 \
             --value-size 16",
            2,
            (10_000, 40_000),
            (1, 8),
            None,
        ),
        p(
            "canrt",
            "wort",
            "--fabric sim --index wort --persistent --compute-nodes 2 --memory-nodes 1 \
             --value-size 16",
            2,
            (10_000, 40_000),
            (1, 8),
            None,
        ),
        p(
            "erda",
            "erda",
            "--fabric sim --index erda --persistent --compute-nodes 2 --memory-nodes 1 \
             --value-size 64",
            2,
            (25_000, 100_000),
            (1, 8),
            None,
        ),
        p(
            "catfish",
            "catfish",
            "--fabric sim --index catfish --tree rstar --mode adaptive --compute-nodes 8 \
             --memory-nodes 1",
            8,
            (25_000, 100_000),
            (1, 4),
            None,
        ),
    ]
}

/// One child run: its peak resident set and CPU time.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub max_rss_bytes: u64,
    pub cpu_s: f64,
}

/// Runs `remora ARGS` (this executable) as a child and returns its peak RSS and CPU time
/// (user + system), from `wait4`: the child's own figures, not this process's.
pub fn child_usage(args: &[String], log: &Path) -> Result<Usage, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this executable: {e}"))?;
    let err = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err))
        .spawn()
        .map_err(|e| format!("starting remora {}: {e}", args.join(" ")))?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let got = loop {
        // SAFETY: `pid` is our own child, not waited for yet (`child` is never waited on
        // through std); `status` and `ru` are valid, writable and live for the call.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break r;
    };
    drop(child);
    if got != pid {
        return Err(format!(
            "waiting for remora {}: {}",
            args.join(" "),
            std::io::Error::last_os_error()
        ));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let tail = std::fs::read_to_string(log).unwrap_or_default();
        let tail: String = tail.lines().rev().take(3).collect::<Vec<_>>().join(" / ");
        return Err(format!("remora {} failed: {tail}", args.join(" ")));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Usage {
        // Linux reports ru_maxrss in KiB.
        max_rss_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
        cpu_s: secs(ru.ru_utime) + secs(ru.ru_stime),
    })
}

/// What one probe measured and what it implies.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fit {
    pub paper: String,
    pub index: String,
    /// The bench command of the base run (small keys, few clients).
    pub command: String,
    pub keys: (u64, u64),
    pub clients: (usize, usize),
    /// Base run, more clients, more keys, and the two runs over keys that bytes per key come
    /// from (without caches where the index has them).
    pub runs: [Usage; 5],
    pub bytes_per_key: f64,
    pub cpu_us_per_key: f64,
    pub bytes_per_client: f64,
    /// Peak RSS not explained by keys or clients (the binary, the sim, fixed buffers).
    pub fixed_bytes: f64,
    /// A per-compute-node cache that fills up to this bound at large key counts.
    pub cache_bytes: Option<f64>,
    /// Compute nodes of the paper's shape: one cache each.
    #[serde(default)]
    pub compute_nodes: usize,
    /// The binary that measured it; None in files written before builds were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::repro::resume::Build>,
}

impl Fit {
    /// Bytes at `keys` keys and `clients` client threads over the paper's compute nodes
    /// (one cache per compute node, counted full when `full_caches`).
    pub fn bytes_at(&self, keys: f64, clients: f64, full_caches: bool) -> f64 {
        let caches = if full_caches {
            self.cache_bytes.unwrap_or(0.0) * self.compute_nodes.max(1) as f64
        } else {
            0.0
        };
        self.fixed_bytes + keys * self.bytes_per_key + clients * self.bytes_per_client + caches
    }

    /// The most keys that fit in `mem` bytes at `clients` client threads with full caches
    /// (one per compute node).
    pub fn keys_fitting(&self, mem: f64, clients: f64) -> f64 {
        let left = mem - self.bytes_at(0.0, clients, true);
        if self.bytes_per_key <= 0.0 || left <= 0.0 {
            0.0
        } else {
            left / self.bytes_per_key
        }
    }
}

/// `p` with its key counts divided by `shrink` (the tool's own tests measure a hundredth).
pub fn shrunk(p: &Probe, shrink: u64) -> Probe {
    Probe {
        keys: (p.keys.0 / shrink.max(1), p.keys.1 / shrink.max(1)),
        ..*p
    }
}

/// The `remora` arguments of one child run of `p`.
fn child_line(p: &Probe, keys: u64, per_node: usize, no_cache: bool) -> String {
    format!(
        "bench {} --records {keys} --clients-per-node {per_node} --workload load --quiet{}",
        p.flags,
        if no_cache { " --no-cache" } else { "" }
    )
}

/// The command a fit of `p` records (its base run): with `p`'s key counts, client counts,
/// compute nodes and cache it names every child run [`measure`] makes.
pub fn base_command(p: &Probe) -> String {
    format!("remora {}", child_line(p, p.keys.0, p.per_node.0, false))
}

/// Runs one probe's children (`shrink` divides its key counts: the tool's own tests).
pub fn measure(p: &Probe, dir: &Path, shrink: u64) -> Result<Fit, String> {
    let p = &shrunk(p, shrink);
    let run = |keys: u64, per_node: usize, no_cache: bool| {
        let line = child_line(p, keys, per_node, no_cache);
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        let log = dir.join(format!(
            "memory-{}-{keys}-{per_node}-{no_cache}.log",
            p.index
        ));
        child_usage(&args, &log).map(|u| (u, format!("remora {line}")))
    };
    let (k0, k1) = p.keys;
    let (c0, c1) = p.per_node;
    let cached = p.cache_mib.is_some();
    let (base, command) = run(k0, c0, false)?;
    let (more_clients, _) = run(k0, c1, false)?;
    let (more_keys, _) = run(k1, c0, false)?;
    let (bytes_base, bytes_more) = if cached {
        (run(k0, c0, true)?.0, run(k1, c0, true)?.0)
    } else {
        (base, more_keys)
    };
    let n = p.compute_nodes;
    let runs = [base, more_clients, more_keys, bytes_base, bytes_more];
    Ok(fit(p, command, runs, n))
}

/// `runs`: base (small keys, few clients), more clients, more keys, and the two runs over
/// keys that bytes per key come from (the base and more keys again, or both without caches).
fn fit(p: &Probe, command: String, runs: [Usage; 5], nodes: usize) -> Fit {
    let [base, mc, ck, kb, mk] = runs;
    let (k0, k1) = (p.keys.0 as f64, p.keys.1 as f64);
    let (c0, c1) = ((p.per_node.0 * nodes) as f64, (p.per_node.1 * nodes) as f64);
    let rss = |u: Usage| u.max_rss_bytes as f64;
    let bytes_per_key = ((rss(mk) - rss(kb)) / (k1 - k0)).max(0.0);
    let bytes_per_client = ((rss(mc) - rss(base)) / (c1 - c0)).max(0.0);
    let cpu_us_per_key = ((ck.cpu_s - base.cpu_s) / (k1 - k0) * 1e6).max(0.0);
    Fit {
        paper: p.paper.into(),
        index: p.index.into(),
        command,
        keys: p.keys,
        clients: (c0 as usize, c1 as usize),
        runs,
        bytes_per_key,
        cpu_us_per_key,
        bytes_per_client,
        fixed_bytes: (rss(base) - k0 * bytes_per_key - c0 * bytes_per_client).max(0.0),
        cache_bytes: p.cache_mib.map(|m| m * (1u64 << 20) as f64),
        compute_nodes: nodes,
        build: Some(crate::repro::resume::Build::this()),
    }
}

/// This machine's memory (`MemTotal` of /proc/meminfo), if readable.
pub fn machine_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The most bytes this process can still allocate: what the address-space limit (`ulimit
/// -v`, RLIMIT_AS) leaves beside the address space it already maps (`VmSize`), and this
/// machine's memory (Linux's default heuristic overcommit refuses one allocation larger
/// than RAM + swap), whichever is lower; `None` if neither is known.
pub fn allocation_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable rlimit for the call's duration.
    let as_limit = (unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) } == 0
        && rl.rlim_cur != libc::RLIM_INFINITY)
        .then(|| rl.rlim_cur.saturating_sub(mapped_bytes().unwrap_or(0)));
    match (as_limit, machine_bytes()) {
        (Some(a), Some(m)) => Some(a.min(m)),
        (a, m) => a.or(m),
    }
}

/// The address space this process maps now (`VmSize` of /proc/self/status), if readable.
fn mapped_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with("VmSize:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuses, before it starts, a bench run whose memory-node regions (`region_bytes` for each
/// memory node, summed; every `--index` and every point of a `--sweep`) cannot be
/// allocated here: the run would end
/// the whole process in an allocation abort (Erda's 4 KiB values at 600k keys asked 48.9 GB).
pub fn check_fits(a: &crate::bench::BenchArgs) -> Result<(), String> {
    let Some(limit) = allocation_limit() else {
        return Ok(());
    };
    let mut runs = Vec::new();
    // `--index` fills `indexes`; bench sets `index` for each run.
    for &kind in &a.indexes {
        let mut one = a.clone();
        one.index = kind;
        match &a.sweep {
            Some(spec) => {
                let sw = crate::bench::sweep::parse(spec)?;
                for &v in &sw.values {
                    runs.push(crate::bench::sweep::point(&one, &sw.name, v)?);
                }
            }
            None => runs.push(one),
        }
    }
    for r in &runs {
        let region = crate::bench::region_bytes(r) * r.sim.memory_nodes.max(1) as u64;
        if region > limit {
            return Err(format!(
                "does not fit: its memory nodes' regions are {:.2} GiB ({} records of {} B \
                 values), above the {:.2} GiB this process can still allocate (the lower of \
                 what `ulimit -v` leaves and MemTotal); fewer --records or --operations",
                region as f64 / (1u64 << 30) as f64,
                r.records,
                r.value_size,
                limit as f64 / (1u64 << 30) as f64,
            ));
        }
    }
    Ok(())
}

/// The memory section: every fit, and how many keys fit `mem` bytes at `clients(paper)`
/// client threads (the paper's shape at `--scale full`) and `cpu_s` seconds of CPU for
/// `runs(paper)` loads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryReport {
    pub machine_bytes: u64,
    /// Share of the machine the statement lets one run use.
    pub usable: f64,
    pub cpu_budget_s: f64,
    pub fits: Vec<FitRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FitRow {
    pub fit: Fit,
    /// Client threads of the paper's largest `--scale full` run.
    pub full_clients: usize,
    /// Bench runs (each loads its keys afresh) of the paper at `--scale full`.
    pub full_runs: usize,
    /// Keys `--scale full` loads for this paper.
    pub full_keys: u64,
    /// The paper's own key count, where it states one.
    pub paper_keys: Option<u64>,
    pub keys_fit_memory: f64,
    pub keys_fit_cpu: f64,
}

impl MemoryReport {
    pub fn markdown(&self) -> String {
        let gib = |b: f64| b / (1u64 << 30) as f64;
        let mut m = String::new();
        let _ = writeln!(
            m,
            "## How far `--scale full` goes (measured on this machine: {:.1} GiB)\n",
            gib(self.machine_bytes as f64)
        );
        let _ = writeln!(
            m,
            "Each index, in its paper's cluster shape, loaded by `remora bench --workload \
             load` as a child process at two key counts and two client counts; peak RSS and \
             CPU of each child from `wait4`. Bytes per key: the slope over keys (the memory \
             nodes' regions are zeroed lazily, so this is what the index touches: nodes, \
             leaves, logs, allocator slack; measured with `--no-cache` where the index has a \
             per-compute-node cache). Bytes per client: the slope over client threads \
             (the client's own state: buffers, histograms, queue pairs); an index with a \
             per-compute-node cache (`cache` column) fills it up to `--cache-mib` at large \
             key counts, so the fit counts every compute node's cache full. Fit: the most \
             keys whose bytes fit {:.0}% of the machine at the paper's `--scale full` client \
             count, and the most whose loads fit {:.0} s of CPU over the paper's `--scale \
             full` runs (every run loads its keys afresh).\n",
            100.0 * self.usable,
            self.cpu_budget_s
        );
        let _ = writeln!(
            m,
            "| paper | index | B/key | CPU µs/key | MiB/client | cache MiB/node | fixed MiB \
             | full: clients, runs, keys | paper's keys | keys fitting memory | keys fitting \
             CPU | measured by |\n|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"
        );
        let mib = |b: f64| b / (1u64 << 20) as f64;
        for r in &self.fits {
            let f = &r.fit;
            let _ = writeln!(
                m,
                "| {} | {} | {:.0} | {:.1} | {:.2} | {} | {:.0} | {}, {}, {} | {} | {} | {} | \
                 `{}` (+ {} keys, {} clients) |",
                f.paper,
                f.index,
                f.bytes_per_key,
                f.cpu_us_per_key,
                mib(f.bytes_per_client),
                f.cache_bytes
                    .map_or("—".into(), |c| format!("{:.0}", mib(c))),
                mib(f.fixed_bytes),
                r.full_clients,
                r.full_runs,
                count(r.full_keys as f64),
                r.paper_keys.map_or("—".into(), |k| count(k as f64)),
                count(r.keys_fit_memory),
                count(r.keys_fit_cpu),
                f.command,
                f.keys.1,
                f.clients.1
            );
        }
        m
    }
}

/// 1.2M, 340k, 60M, 1.1B.
pub fn count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.1}B", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose regions pass what this process can allocate is refused with a message
    /// before it starts; a small one passes.
    #[test]
    fn a_run_that_cannot_be_allocated_is_refused_before_it_starts() {
        let huge = crate::repro::run::parse_bench(
            "--fabric sim --index erda --records 1000 --region-mib 1048576",
        )
        .unwrap();
        let err = check_fits(&huge).unwrap_err();
        assert!(
            err.contains("does not fit") && err.contains("--records"),
            "{err}"
        );
        let small = crate::repro::run::parse_bench("--fabric sim --index erda --records 1000");
        assert_eq!(check_fits(&small.unwrap()), Ok(()));
    }

    #[test]
    fn fit_separates_keys_from_clients_and_caps_at_the_machine() {
        let p = Probe {
            paper: "t",
            index: "t",
            flags: "",
            compute_nodes: 4,
            keys: (1000, 3000),
            per_node: (1, 2),
            cache_mib: Some(1.0),
        };
        let u = |mb: u64, s: f64| Usage {
            max_rss_bytes: mb,
            cpu_s: s,
        };
        // 100 B/key, 1000 B/client, 50,000 B fixed; 10 µs CPU per key.
        let base = 50_000 + 1000 * 100 + 4 * 1000;
        let f = fit(
            &p,
            "c".into(),
            [
                u(base, 1.0),
                u(base + 4 * 1000, 1.0),
                u(base + 2000 * 300, 1.02),
                u(base - 4000, 2.0),
                u(base - 4000 + 2000 * 100, 9.0),
            ],
            4,
        );
        assert!((f.bytes_per_key - 100.0).abs() < 1e-9, "{f:?}");
        assert!((f.bytes_per_client - 1000.0).abs() < 1e-9, "{f:?}");
        assert!((f.fixed_bytes - 50_000.0).abs() < 1e-6, "{f:?}");
        assert!((f.cpu_us_per_key - 10.0).abs() < 1e-6, "{f:?}");
        // 10 clients over 4 compute nodes, one full 1 MiB cache per node (not per client),
        // then 100 B a key.
        assert_eq!(f.compute_nodes, 4);
        let mem = 50_000.0 + 10.0 * 1000.0 + 4.0 * 1048576.0 + 100.0 * 5000.0;
        assert!((f.keys_fitting(mem, 10.0) - 5000.0).abs() < 1e-6);
        assert_eq!(f.keys_fitting(1.0, 10.0), 0.0);
        assert_eq!(count(60e6), "60.0M");
        assert_eq!(count(1.5e9), "1.5B");
    }
}

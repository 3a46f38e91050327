//! The client-CPU calibration table: each kind of client work the sim charges
//! (`remora::core::work::Work`) timed on this host with the code paths that do it, beside the
//! sim model's figure for the same work.
//!
//! `remora perf --cpu-calibration [--out docs/cpu-calibration.md]` prints the table (and
//! writes it as markdown); `cargo test --release -p remora-bins cpu_calibration --
//! --nocapture` runs the same measurement as a test.
//!
//! What is timed ([`cases`]): the functions the indexes call (Erda's `object_checksum`,
//! SMART's `leaf_crc`, Catfish's `node_crc` and `Rect::intersects`, Sherman's
//! `PageHeader::decode` and `verify_leaf`, the bench's YCSB key chooser), on inputs behind
//! `black_box`, each case stating the `Work` its index charges for one run. How: the thread
//! is pinned to one core; each case is first warmed up and sized to a batch of about
//! [`BATCH_NS`]; then [`ROUNDS`] rounds each time one batch of every case, in an order that
//! rotates every round (so a burst of load on the shared host hits all kinds alike); a run's
//! figure for a case is the minimum over the rounds of its batch's mean time per run
//! (interference only ever adds time). The whole is repeated [`RUNS`] times; the table
//! shows the median of the runs' figures (the figure compared with the model) and their
//! range, a measure of the host's noise.
//!
//! The test fails when a ratio model / measured leaves 0.67-1.5x (a model that
//! drifted, or a code path that changed cost). The 10% goal is shown by the committed
//! table, generated on a quiet host, not by a timed test on a shared one.
mod cases;

use cases::{Case, cases};
use remora::core::work::Work;
use remora::poller::sim::Model;
use std::fmt::Write as _;
use std::time::Instant;

/// Rounds of the interleaved measurement.
const ROUNDS: usize = 400;
/// Measurements (each of [`ROUNDS`] rounds) whose median the table shows.
pub const RUNS: usize = 9;

/// Target time of one timed batch, in ns: short enough that most batches see no
/// preemption, long enough that the clock's own cost (~20-40 ns a read) is amortised.
const BATCH_NS: f64 = 20_000.0;
/// The "within" band of the table: |model / measured - 1| at most this.
pub const WITHIN: f64 = 0.10;

/// One row of the table.
pub struct Row {
    pub what: &'static str,
    pub work: Work,
    /// Each run's figure: the minimum over its rounds of the mean ns per run (after any
    /// floor subtracted), sorted.
    pub runs: Vec<f64>,
    pub model_ns: f64,
}

impl Row {
    /// The measured figure: the median of the runs'.
    pub fn ns(&self) -> f64 {
        self.runs
            .get(self.runs.len() / 2)
            .copied()
            .unwrap_or(f64::NAN)
    }
    /// The least and greatest of the runs' figures.
    pub fn range(&self) -> (f64, f64) {
        (
            self.runs.first().copied().unwrap_or(f64::NAN),
            self.runs.last().copied().unwrap_or(f64::NAN),
        )
    }
    pub fn ratio(&self) -> f64 {
        self.model_ns / self.ns().max(1e-3)
    }
    pub fn within(&self) -> bool {
        (self.ratio() - 1.0).abs() <= WITHIN
    }
}

/// The sim's CPU time for `w` under model `m`, in ns, as the engine computes it
/// (`poller/src/sim/engine/timing.rs`, `Tm::work_ps`): a fixed part per charge and a cost
/// per unit, CRC-32C from `client_crc32c_hw_min_bytes` on the instruction line.
pub fn model_ns(m: &Model, w: Work) -> f64 {
    let [call, per] = params(w);
    let get = |p: &str| {
        if p.is_empty() {
            0.0
        } else {
            m.get(p).unwrap_or(f64::NAN)
        }
    };
    let n = w.units() as f64;
    m.client_cpu_scale * (get(call) + n * get(per))
}

/// The model parameters charging `w`: [fixed part per charge ("" if none), per unit].
pub fn params(w: Work) -> [&'static str; 2] {
    let hw_min = Model::default().client_crc32c_hw_min_bytes;
    match w {
        Work::Crc32c(b) if b as f64 >= hw_min => {
            ["client_crc32c_hw_call_ns", "client_crc32c_hw_ns_per_byte"]
        }
        Work::Crc32c(_) => ["client_crc32c_call_ns", "client_crc32c_ns_per_byte"],
        Work::Crc64(_) => ["client_crc64_call_ns", "client_crc64_ns_per_byte"],
        Work::Crc64Clmul(_) => ["client_crc64clmul_call_ns", "client_crc64clmul_ns_per_byte"],
        Work::Decode(_) => ["client_decode_call_ns", "client_decode_ns_per_byte"],
        Work::NodeDecode(_) => [
            "client_node_decode_call_ns",
            "client_node_decode_ns_per_slot",
        ],
        Work::GroupDecode(_) => ["", "client_group_decode_ns"],
        Work::LeafCheck(_) => ["client_leaf_check_call_ns", "client_leaf_check_ns_per_byte"],
        Work::Scan(_) => ["", "client_scan_ns"],
        Work::Probe(_) => ["", "client_probe_ns"],
        Work::Compare(_) => ["client_compare_call_ns", "client_compare_ns"],
        Work::Sort(_) => ["client_sort_call_ns", "client_sort_ns"],
        Work::Rect(_) => ["client_rect_call_ns", "client_rect_ns"],
        Work::KeyGen(_) => ["", "client_keygen_ns"],
    }
}

/// Pins this thread to the host's last core (the first is where the OS tends to put its
/// own work); the core, or `None` if pinning is not possible here.
fn pin() -> Option<usize> {
    let id = core_affinity::get_core_ids()?.into_iter().last()?;
    core_affinity::set_for_current(id).then_some(id.id)
}

/// Runs every case `runs` times as the module doc says; rows in table order, and the
/// pinned core.
pub fn measure(m: &Model, runs: usize) -> (Vec<Row>, Option<usize>) {
    let core = pin();
    let mut cs: Vec<Case> = cases();
    let mut rows: Vec<Row> = cs
        .iter()
        .filter_map(|c| {
            let work = c.work?;
            Some(Row {
                what: c.what,
                work,
                runs: Vec::with_capacity(runs),
                model_ns: model_ns(m, work),
            })
        })
        .collect();
    for _ in 0..runs {
        let mins = measure_once(&mut cs);
        let measured = cs.iter().enumerate().filter(|(_, c)| c.work.is_some());
        for (row, (i, c)) in rows.iter_mut().zip(measured) {
            let floor = c.minus.map_or(0.0, |j| mins[j]);
            row.runs.push((mins[i] - floor).max(0.0));
        }
    }
    for r in rows.iter_mut() {
        r.runs.sort_by(f64::total_cmp);
    }
    (rows, core)
}

/// One run: every case warmed up, sized, and timed over [`ROUNDS`] interleaved rounds; each
/// case's minimum over the rounds of its batch's mean time per run, in ns.
fn measure_once(cs: &mut [Case]) -> Vec<f64> {
    let mut iters = Vec::with_capacity(cs.len());
    for c in cs.iter_mut() {
        let mut n = 1u32;
        loop {
            let t = Instant::now();
            (c.run)(n);
            let dt = t.elapsed().as_nanos() as f64;
            if dt >= BATCH_NS || n >= 1 << 24 {
                // Once more at the size found, then settle on it.
                n = ((n as f64 * BATCH_NS / dt.max(1.0)).ceil() as u32).max(1);
                (c.run)(n);
                break;
            }
            n *= 2;
        }
        iters.push(n);
    }
    let k = cs.len();
    let mut min = vec![f64::MAX; k];
    for r in 0..ROUNDS {
        for j in 0..k {
            let i = (r + j) % k;
            let t = Instant::now();
            (cs[i].run)(iters[i]);
            min[i] = min[i].min(t.elapsed().as_nanos() as f64 / iters[i] as f64);
        }
    }
    min
}

/// The host's CPU (Linux): model name, family, model and clock, for the table's heading.
/// A VM's model name may hide the generation ("AMD EPYC"); family and model tell which
/// core the parameters were fitted on.
fn cpu_name() -> String {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return "unknown CPU".into();
    };
    let field = |name: &str| {
        info.lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(name))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
    };
    let mut out = field("model name").unwrap_or_else(|| "unknown CPU".into());
    if let (Some(f), Some(m)) = (field("cpu family"), field("model")) {
        out.push_str(&format!(" (family {f}, model {m})"));
    }
    if let Some(mhz) = field("cpu MHz").and_then(|s| s.parse::<f64>().ok()) {
        out.push_str(&format!(" at {:.1} GHz", mhz / 1000.0));
    }
    out
}

/// Today's UTC date, yyyy-mm-dd (civil from days since 1970-01-01, H. Hinnant's algorithm).
fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}")
}

fn work_label(w: Work) -> String {
    format!("{}({})", w.name(), w.count())
}

fn param_label(w: Work) -> String {
    let [call, per] = params(w);
    if call.is_empty() {
        per.to_string()
    } else {
        format!("{call} + {per}")
    }
}

/// The table as plain text.
pub fn text_table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<44} | {:<16} | {:>8} | {:>8} | {:>13} | {:>5} | {:<4} | parameter\n",
        "code path", "work", "model ns", "ns", "runs' range", "ratio", "10%?"
    );
    for r in rows {
        let (lo, hi) = r.range();
        let _ = writeln!(
            s,
            "{:<44} | {:<16} | {:>8.1} | {:>8.1} | {:>13} | {:>5.2} | {:<4} | {}",
            r.what,
            work_label(r.work),
            r.model_ns,
            r.ns(),
            format!("{lo:.1}-{hi:.1}"),
            r.ratio(),
            if r.within() { "yes" } else { "NO" },
            param_label(r.work)
        );
    }
    let n = rows.iter().filter(|r| r.within()).count();
    let _ = writeln!(s, "{n} of {} rows within 10%", rows.len());
    s
}

/// The table as markdown, with its command, host and each parameter's value and source.
pub fn markdown(rows: &[Row], m: &Model, core: Option<usize>, runs: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Client-CPU calibration\n");
    let _ = writeln!(
        s,
        "Generated by `remora perf --cpu-calibration --out docs/cpu-calibration.md` \
         (bins/src/bench/cpu_calibration.rs) on {}, {}, pinned to core {}: {} runs, each of \
         {} interleaved rounds of ~{} us batches per code path. *model ns*: the sim's charge \
         for the work the index states (`client_cpu_scale` {}); a run's figure is the \
         minimum over its rounds of a batch's mean time per run; *measured ns*: the median \
         of the runs' figures (the figure compared); *runs' range*: their least and \
         greatest, a measure of the host's noise. Within 10%: |model / measured - 1| <= \
         0.10.\n",
        utc_date(),
        cpu_name(),
        core.map_or("none (not pinned)".into(), |c| c.to_string()),
        runs,
        ROUNDS,
        BATCH_NS / 1000.0,
        m.client_cpu_scale,
    );
    let _ = writeln!(
        s,
        "| code path | work | model ns | measured ns | runs' range | model / measured | within 10% | parameter |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|:---:|---|");
    for r in rows {
        let (lo, hi) = r.range();
        let _ = writeln!(
            s,
            "| {} | `{}` | {:.1} | {:.1} | {:.1}-{:.1} | {:.2} | {} | `{}` |",
            r.what,
            work_label(r.work),
            r.model_ns,
            r.ns(),
            lo,
            hi,
            r.ratio(),
            if r.within() { "yes" } else { "**no**" },
            param_label(r.work)
        );
    }
    let n = rows.iter().filter(|r| r.within()).count();
    let _ = writeln!(s, "\n{n} of {} rows within 10%.\n", rows.len());
    let _ = writeln!(
        s,
        "## Parameters\n\n| parameter | value | source |\n|---|---:|---|"
    );
    let mut seen: Vec<&str> = Vec::new();
    for r in rows {
        for p in params(r.work) {
            if p.is_empty() || seen.contains(&p) {
                continue;
            }
            seen.push(p);
            let info = Model::PARAMS.iter().find(|i| i.name == p);
            let _ = writeln!(
                s,
                "| `{p}` | {} {} | {} |",
                m.get(p).unwrap_or(f64::NAN),
                info.map_or("", |i| i.unit),
                info.map_or("", |i| i.source)
            );
        }
    }
    s
}

/// `remora perf --cpu-calibration`: measures, prints the table, and writes it as markdown
/// to `out` if given.
pub fn run(m: &Model, out: Option<&std::path::Path>) -> Result<(), String> {
    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; the timings mean nothing (build with --release)");
    }
    let (rows, core) = measure(m, RUNS);
    match core {
        Some(c) => println!("# pinned to core {c}; {RUNS} runs of {ROUNDS} interleaved rounds"),
        None => println!("# not pinned (no core affinity here); {RUNS} runs of {ROUNDS} rounds"),
    }
    print!("{}", text_table(&rows));
    if let Some(p) = out {
        std::fs::write(p, markdown(&rows, m, core, RUNS))
            .map_err(|e| format!("writing {}: {e}", p.display()))?;
        println!("# wrote {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The band the test holds under load (model / the least of its runs' figures).
    const TEST_BAND: (f64, f64) = (0.67, 1.5);

    #[test]
    fn client_cpu_model_matches_the_host() {
        if cfg!(debug_assertions) {
            eprintln!("client-CPU calibration: timings are only meaningful in release; skipped");
            return;
        }
        let m = Model::default();
        // The least of three runs: a burst of load that spans one whole run of a row does
        // not fail the test, a drifted model does. A row outside the band is measured again
        // (up to ATTEMPTS times, each row keeping its least figure of all): another process
        // busy on this 2-core machine for a whole measurement (seen: a repro beside the
        // tests, every row 0.48-0.65x) passes once it is gone, a drifted model never does.
        const ATTEMPTS: usize = 4;
        let mut least: Vec<f64> = Vec::new();
        let mut bad = Vec::new();
        for attempt in 1..=ATTEMPTS {
            let (rows, _) = measure(&m, 3);
            print!("{}", text_table(&rows));
            least.resize(rows.len(), f64::INFINITY);
            for (l, r) in least.iter_mut().zip(&rows) {
                *l = l.min(r.range().0);
            }
            bad = rows
                .iter()
                .zip(&least)
                .map(|(r, l)| (r.what, r.model_ns / l.max(1e-3)))
                .filter(|(_, q)| !(TEST_BAND.0..=TEST_BAND.1).contains(q))
                .collect();
            if bad.is_empty() {
                break;
            }
            eprintln!(
                "attempt {attempt}: {} rows outside the band, measuring again",
                bad.len()
            );
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        assert!(
            bad.is_empty(),
            "client CPU model outside {TEST_BAND:?}x of this host's least figure: {bad:?}"
        );
    }

    #[test]
    fn model_ns_is_the_engines_line() {
        let m = Model::default();
        // The CRC-32C lines switch at the hardware threshold, as erda::object_checksum does.
        let hw = model_ns(&m, Work::Crc32c(128));
        assert_eq!(
            hw,
            m.client_crc32c_hw_call_ns + 128.0 * m.client_crc32c_hw_ns_per_byte
        );
        let sw = model_ns(&m, Work::Crc32c(127));
        assert_eq!(
            sw,
            m.client_crc32c_call_ns + 127.0 * m.client_crc32c_ns_per_byte
        );
        // Sort is per n log2 n; the scale multiplies everything.
        let mut s = m.clone();
        s.set("client_cpu_scale", "2").unwrap();
        assert_eq!(
            model_ns(&s, Work::Sort(8)),
            2.0 * (m.client_sort_call_ns + 32.0 * m.client_sort_ns)
        );
        for w in Work::ALL {
            assert!(
                model_ns(&m, w).is_finite(),
                "{w:?} names a parameter the model lacks"
            );
        }
    }
}

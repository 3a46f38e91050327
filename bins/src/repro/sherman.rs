//! Sherman (SIGMOD'22): 8 servers, each one compute node and one memory node; 8-byte keys
//! and values, zipfian 0.99; FG+ and each technique added (the paper's Figure 2).
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series, over_window};

const NODES: usize = 8;
/// The paper's keys (1 billion): the modelled cache is scaled by keys loaded / this.
const PAPER_KEYS: u64 = 1_000_000_000;
/// Client threads per compute server: the paper runs 22 on each (176 in all); the curves
/// sweep up to it. Each thread is synchronous here (`--coroutines 1`).
const THREADS: &[usize] = &[1, 2, 4, 8, 16, 22];
/// Seeds of the factor analysis's YCSB-A, YCSB-D and LOAD runs: each row from them is the
/// median of its ratio at seeds 1..=SEEDS. Measured at quick scale (`remora repro sherman
/// --only sherman-factors --seeds 5`): one seed's ratio moves the class of the p99 row
/// (41.5-82.6x against the paper's 30.2x: faithful at seed 1 only), the p50 row (1.43-2.89x),
/// YCSB-D's (0.94-3.02x) and LOAD's (30.9-36.7x, rough at seed 1 only); YCSB-B's
/// (1.02-1.18x, all faithful) runs once.
const SEEDS: u64 = 5;

/// YCSB-A's and YCSB-B's measured window, in virtual seconds: it opens `.0` into the run
/// phase, with no pause of the clients at its start, and lasts `.1` (`--warmup-seconds`,
/// `--seconds`). Under YCSB-A, FG+'s hot-leaf lock queues build up for tens of milliseconds, and a
/// barrier drains them: after a 100k-operation warm-up and its barrier, FG+ runs 1.07 Mops
/// over the next 10 ms and 0.52 over 30 ms (quick scale, seed 1), falling all along, while
/// counted from 10, 30 and 100 ms into one continuous run it settles at 0.32, 0.28 and 0.21
/// Mops (the paper's one-sided bound: under 0.4). An operation budget ends in a drain
/// instead (176 threads, 10k operations: Sherman's last ~half of them run at ~0.04x the
/// rate of the first). Sherman's steps settle within the first milliseconds (13.2-14.1 Mops
/// at seeds 1-3, `--warmup-seconds 0.01 --seconds 0.005`); FG+'s 5 ms window holds 0.9-1.7k
/// of its operations, bursty (0.17-0.35 Mops at seeds 1-3): the rows take the median of
/// seeds 1-[`SEEDS`].
fn a_window(s: &Scale) -> (f64, f64) {
    match s.name {
        "tiny" => (0.000_2, 0.000_1),
        "quick" => (0.01, 0.005),
        _ => (0.03, 0.01),
    }
}

pub fn paper(s: &Scale) -> Paper {
    let most = THREADS[THREADS.len() - 1];
    let pts = s.sweep_points(THREADS);
    let top = pts.iter().max().copied().unwrap_or(1);
    // Every thread warmed by ~50 operations of its own (its index cache) before measuring.
    let warm = s.warmup.max(50 * (top * NODES) as u64);
    let base = format!(
        "{} --compute-nodes {NODES} --memory-nodes {NODES} --coroutines 1",
        s.sim_flags("sherman", PAPER_KEYS).replace(
            &format!("--warmup {}", s.warmup),
            &format!("--warmup {warm}")
        )
    );
    let at_max = format!("{base} --clients-per-node {top}");
    let v: Vec<String> = pts.iter().map(|t| (t * NODES).to_string()).collect();
    let sweep = format!("{base} --sweep clients={}", v.join(","));
    // YCSB-A and YCSB-B over their window instead of an operation budget.
    let (warm_s, window_s) = a_window(s);
    let timed = |series| over_window(series, &["a", "b"], (warm_s, window_s));
    let experiments = vec![
        Experiment {
            id: "sherman-factors".into(),
            title: "Sherman: FG+ then each technique (write- and read-intensive)".into(),
            chart: Chart::Bars,
            // The seed-noisy workloads over SEEDS seeds, YCSB-B once; in the chart's order.
            series: timed(vec![
                Series::new(
                    "factors",
                    format!("{at_max} --index sherman --factors --workloads a"),
                    &["a"],
                )
                .over_seeds(SEEDS),
                Series::new(
                    "factors",
                    format!("{at_max} --index sherman --factors --workloads b"),
                    &["b"],
                ),
                Series::new(
                    "factors",
                    format!("{at_max} --index sherman --factors --workloads d,load"),
                    &["d", "load"],
                )
                .over_seeds(SEEDS),
            ]),
        },
        Experiment {
            id: "sherman-clients-a".into(),
            title: "Sherman vs FG+: YCSB-A throughput vs clients".into(),
            chart: Chart::Curve,
            series: timed(vec![
                Series::new("Sherman", format!("{sweep} --index sherman"), &["a"]),
                Series::new("FG+", format!("{sweep} --index fg-plus"), &["a"]),
            ]),
        },
    ];
    let p = |s: &str, w| Pick::new("sherman-factors", s, w);
    let full = "+ two-level version";
    // An upper bound, not a measured point: "< 0.4 Mops with ~20ms tail latency".
    const FG_BOUND: &str = "seeds/002 §1: the one-sided approach (FG) under write-intensive \
                            high contention, < 0.4 Mops (a bound) with ~20 ms tail latency";
    let claims = vec![
        Claim::ratio(
            "write-throughput",
            "Sherman / FG+ throughput, write-intensive",
            (23.6, 23.6),
            Metric::Mops,
            false,
            p(full, "a"),
            p("FG+", "a"),
            "paper's write-intensive mix is '50% insert and 50% lookup' (seeds/002 §3) under \
             zipfian 0.99; remora runs YCSB-A (50% update / 50% read of loaded keys), as the \
             authors' benchmark does (test/benchmark.cpp: 22 synchronous threads per compute \
             server, every key zipfian over a key space 80% loaded beforehand, so its hot \
             'inserts' are upserts of loaded keys). Inserts of new keys only \
             (`--workloads wi`, 50% insert of new hashed keys / 50% zipfian read) spread \
             the writes over all leaves, no lock is hot and FG+ does not collapse: 1.23x \
             (27.1 against 33.3 Mops at quick scale). FG+ collapses here because a CAS waiting on \
             a hot host-memory lock word keeps one of the memory node's NIC processing units \
             (the sherman profile's host_atomic_stalls: 44 units, assumed, see the profile) \
             and FG+'s 176 synchronous threads spinning on the hottest leaves keep them all \
             (the paper's 'consumes RDMA IOPS'; the unit count moves this row little, see \
             read-throughput); without the stall (`--set host_atomic_stalls=0`) FG+ is bound \
             only by the hot leaf's critical section (CAS, READ, WRITE round trips) and does \
             not collapse. The collapse takes \
             tens of milliseconds to settle and a barrier undoes it, so YCSB-A is counted over \
             a window opened 10 ms into one continuous run (`a_window`; over 10k operations \
             the row read 29x, a drain: Sherman's last operations ran at ~0.04x the rate of \
             its first). Measured at quick scale, seeds 1-5: FG+ 0.26-0.46 Mops (seeds 1-3: \
             0.46, 0.26, 0.28), about the paper's one-sided bound (under 0.4 Mops, ~20 ms \
             tails; FG+'s p99 7.1-11.0 ms), and Sherman 13.1-14.0 Mops, steady (0.98-1.10): \
             176 synchronous threads at a mean of 12.7-13.5 µs, set by the hottest leaves' \
             lock queues (p99 381-434 µs); per seed 28.7-50.4x (44.2x with the whole-engine \
             stall, host_atomic_stalls=1). So \
             the gap to the paper's 23.6x is Sherman's own rate: with FG+ at the bound, \
             23.6x puts the paper's Sherman under ~9.4 Mops, a mean over ~19 µs for its 176 \
             threads; the paper gives no absolute Sherman figure to place it",
        )
        .figures(None, Some(0.4), FG_BOUND),
        Claim::ratio(
            "write-p50",
            "FG+ / Sherman median latency, write-intensive",
            (1.4, 1.4),
            Metric::P50,
            false,
            p(full, "a"),
            p("FG+", "a"),
            "",
        ),
        Claim::ratio(
            "write-p99",
            "FG+ / Sherman 99th-percentile latency, write-intensive",
            (30.2, 30.2),
            Metric::P99,
            false,
            p(full, "a"),
            p("FG+", "a"),
            "measured over YCSB-A's window (see write-throughput), the row the median over \
             seeds 1-5: 18.3-26.8x at quick scale (FG+ 7.1-11.0 ms, Sherman 381-434 µs; \
             21.8-27.5x with the whole-engine stall). Over an operation budget it read 42-83x (seeds 1-6, geomean 63x; 55x with 100k \
             ops, 62x at full scale), where FG+'s slowest operations were those of a drain \
             at the run's end. Before the window, the following was measured: set as the \
             authors' code, the hand-over cap (7 hand-overs: the default now, was 8) moves \
             it within the seed noise; the paper's 500 MB index cache (`--cache-mib 500`) \
             changes nothing (10k keys fit); the on-chip lock table has the authors' 32768 \
             words and remora's densely placed pages hash to distinct words. The zipfian over \
             the paper's 1 billion keys (`--zipf-items 1000000000`; the default is YCSB's \
             10^10 items) or the authors' 64 Mi (`--zipf-items 67108864`) raises Sherman's \
             p99 toward the ~660 µs the paper's ratio implies (100k ops: 355, 438, 521 µs) \
             but FG+'s in proportion (19.7, 24.3, 28.4 ms): 54-56x",
        )
        .figures(None, Some(20_000.0), FG_BOUND),
        Claim::ratio(
            "read-throughput",
            "Sherman / FG+ throughput, read-intensive (paper: no considerable gain)",
            (0.9, 1.1),
            Metric::Mops,
            false,
            p(full, "b"),
            p("FG+", "b"),
            "paper's read-intensive mix is 5% insert / 95% lookup; remora runs YCSB-B (5% updates \
             of zipfian keys; YCSB-D's 5% inserts are the next row), counted over YCSB-A's \
             window (see write-throughput). FG+'s hot updates spin CASes on the hottest leaves' \
             host-memory lock words, each waiting CAS keeping one of the memory node's NIC \
             processing units (host_atomic_stalls, see write-throughput): at 5% writes fewer \
             than the profile's 44 wait at once, the NIC goes on serving the reads, and FG+ \
             runs 62.2 Mops, steady (1.00), against Sherman's 63.8 at quick scale: the \
             paper's 'no considerable gain'. The unit count decides this row, not YCSB-A's. \
             Measured at quick scale with this experiment's commands and `--set \
             host_atomic_stalls=N`, for N = 1 (the whole engine, the former model), 2, 4, \
             8, 16 and 44 (the profile): this row 16.2, 18.2, 18.7, 12.1, 1.40, 1.02x; \
             write-throughput 44.2, 51.8, 46.7, 50.5, 44.0, 40.6x; write-p99 25.1, 24.7, \
             23.5, 25.2, 23.2, 25.4x; read-throughput-inserts 1.13, 1.16, 0.90, 1.01, 1.03, \
             0.97x; write-throughput-inserts 33.0, 33.0, 32.2, 34.8, 31.0, 23.8x (each \
             seed-noisy row the median of seeds 1-5). Under YCSB-A FG+'s threads keep every \
             unit at any of these counts, under YCSB-B at 8 or fewer: with the whole engine \
             FG+ collapsed here too, slowly (4.28 Mops counted from 10 ms into the run, 3.24 \
             from 30 ms; 15.1 Mops at full scale's 4M keys over 10 ms), and without any \
             stall (`--set host_atomic_stalls=0`) it ran 65.8 Mops at full scale, 1.06x",
        ),
        Claim::ratio(
            "read-throughput-inserts",
            "Sherman / FG+ throughput, read-intensive with inserts (YCSB-D; paper: no \
             considerable gain)",
            (0.9, 1.1),
            Metric::Mops,
            false,
            p(full, "d"),
            p("FG+", "d"),
            "the paper's read-intensive mix is 5% insert / 95% lookup, YCSB-D's (whose reads \
             favour the latest keys)",
        ),
        Claim::ratio(
            "write-throughput-inserts",
            "Sherman / FG+ throughput, insert-only (LOAD) (paper: no insert-only figure; its \
             techniques aim at writes)",
            (1.01, 100.0),
            Metric::Mops,
            false,
            p(full, "LOAD"),
            p("FG+", "LOAD"),
            "no paper figure to meet: the paper's 'write-intensive workloads (50% insert and \
             50% lookup)' are upserts of loaded keys under the zipfian, the write-throughput \
             row's YCSB-A (this row compared LOAD with that row's 23.6x until stop 52: 23.8x \
             at quick, 1.75x at full, a proxy that met the figure only while the tree was \
             small). LOAD is 100% insert (hashed keys, each insert a leaf write under its \
             lock). The literal mix, 50% insert of new keys / 50% zipfian lookup \
             (`--workloads wi`), gives 1.23x: the paper's zipfian writes are upserts of \
             loaded keys (see write-throughput). Measured: the proxy follows the tree's size \
             while it loads, not the paper's setup: FG+ collapses only while a few leaves \
             take every insert, 19.2-25.2x over seeds 1-5 at 10k keys (the row: their median; \
             28-37x over seeds 1-6 with the whole-engine stall, host_atomic_stalls=1, which \
             gave 17.8x at 100k, `--records 100000`, and 1.9x at full scale's 4M); the \
             hand-over cap moves it within that noise and the zipfian's span not at all \
             (LOAD draws no zipfian)",
        ),
        Claim::ratio(
            "on-chip-lock",
            "factor: + on-chip lock, write-intensive (paper: every technique contributes)",
            (1.01, 100.0),
            Metric::Mops,
            false,
            p("+ on-chip lock", "a"),
            p("FG+", "a"),
            "the paper gives no per-step figure in the text, only that each step helps",
        ),
        Claim::ratio(
            "hierarchical-lock",
            "factor: + hierarchical lock, write-intensive",
            (1.01, 100.0),
            Metric::Mops,
            false,
            p("+ hierarchical lock", "a"),
            p("+ on-chip lock", "a"),
            "",
        ),
        Claim::ratio(
            "combination",
            "factor: + command combination, write-intensive",
            (1.01, 100.0),
            Metric::Mops,
            false,
            p("+ combination", "a"),
            p("+ hierarchical lock", "a"),
            "measured (over an operation budget, before YCSB-A's window): combination \
             removes the unlock's round trip from every global \
             release (RT/op and p50 fall), but 176 synchronous threads run at 176 / mean \
             latency, and under zipfian 0.99 over 10k keys the mean (about 3x the p50) is set \
             by the tail, the hottest leaves' lock queues (p99 over 200 µs with and without \
             combination). With shorter lock queues the step pays: at 8 x 4 threads (zipfian) \
             8.2 against 7.0 Mops, at 8 x 22 uniform 38.2 against 33.3 (`--clients-per-node \
             4`, `--distribution uniform`)",
        ),
        Claim::ratio(
            "two-level-version",
            "factor: + two-level version, write-intensive",
            (1.01, 100.0),
            Metric::Mops,
            false,
            p(full, "a"),
            p("+ combination", "a"),
            "measured (over an operation budget, before YCSB-A's window): the step writes \
             back an entry instead of the page (B/op 1608 -> \
             1100, link use 19% -> 13%: the link was not the bound) and its p50 falls (5.0 \
             -> 4.8 µs) at every seed, but 176 synchronous threads run at 176 / mean \
             latency, set by the hot leaves' lock queues: over seeds 1-6 (`--no-two-level` \
             against the default) 1.00-1.09x (geomean 1.04x; 0.95-1.07x with the earlier cap \
             of 8 hand-overs, 0.99x at seed 1), 1.04x with 100k measured ops: a small gain \
             whose sign at one seed of 10k ops is noise (the row: the median of seeds \
             1-5)",
        ),
    ];
    Paper {
        key: "sherman",
        name: "Sherman (SIGMOD'22)",
        paper_setup: "8 servers, each one compute and one memory node, ConnectX-5 100 Gb; \
                      8-byte keys and values, 1 billion keys bulk-loaded, zipfian 0.99",
        paper_keys: Some(1_000_000_000),
        setup: format!(
            "sim, profile sherman (ConnectX-5 100 Gb, 2 memory-node cores, DRAM; `remora perf \
             --fabric sim --profile sherman --show-model`), LLC scaled to {} lines; {NODES} \
             compute nodes x {top} synchronous client threads (the paper: {most}; curves: {} \
             per node), {NODES} memory nodes; {} keys loaded by inserts, {} measured ops after \
             {warm} warm-up ops (YCSB-A: the operations completing in a {window_s} s window \
             opened {warm_s} s into one continuous run), zipfian 0.99, seed 1 (the factor \
             analysis's YCSB-A, YCSB-D and LOAD at seeds 1-{SEEDS}: their rows give the \
             median ratio)",
            s.llc_lines("sherman", PAPER_KEYS),
            super::smart::list(&pts),
            s.records,
            s.ops,
        ),
        experiments,
        claims,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repro::ScaleSel;

    /// YCSB-A (the factor analysis's and the curves') and YCSB-B run over a window that
    /// opens late, with no operation budget; the other workloads keep theirs.
    #[test]
    fn ycsb_a_and_b_run_over_a_late_window() {
        for sel in [ScaleSel::Tiny, ScaleSel::Quick, ScaleSel::Full] {
            let s = Scale::of(sel).for_paper("sherman");
            let (warm, window) = a_window(&s);
            let p = paper(&s);
            let series = p.experiments.iter().flat_map(|e| e.series.iter());
            for ser in series {
                let a = ser.workloads == ["a"] || ser.workloads == ["b"];
                let timed = format!("--seconds {window} --warmup-seconds {warm}");
                assert_eq!(ser.args.contains(&timed), a, "{}: {}", s.name, ser.args);
                assert_eq!(ser.args.contains("--operations"), !a, "{}", ser.args);
            }
        }
    }
}

//! SMART (OSDI'23): 16 compute nodes, 2 memory nodes, YCSB LOAD/A/B/C/D, zipfian 0.99,
//! 8-byte integer and string keys, 8-byte values; SMART vs Sherman vs ART ported to
//! disaggregated memory, and the factor analysis (ART, then each technique added).
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};

const NODES: usize = 16;
const ALL: &[&str] = &["load", "a", "b", "c", "d"];
/// Coroutines per client thread (the bench's default).
const COROUTINES: u64 = 4;
/// The paper's keys (60M): the modelled cache is scaled by keys loaded / this.
const PAPER_KEYS: u64 = 60_000_000;
/// Client threads per compute node the authors' scripts sweep: up to 22 for YCSB-A, up to 56
/// for YCSB-C (16 compute nodes: 352 and 896 threads). Each thread is synchronous here (one
/// operation in flight: `--coroutines 1`).
const THREADS_A: &[usize] = &[1, 2, 4, 8, 16, 22];
const THREADS_C: &[usize] = &[1, 2, 4, 8, 16, 32, 56];

pub fn paper(s: &Scale) -> Paper {
    let sim = s.sim_flags("smart", PAPER_KEYS);
    let base = format!("{sim} --compute-nodes {NODES} --memory-nodes 2");
    // SMART's cache and read-delegation table are per client thread here (per compute node
    // in the paper), so the warm-up gives every coroutine of the largest run a few hundred
    // operations: a warm-up spread thinner leaves them cold (604 B/op read at 64 clients,
    // 96 B/op warm).
    let per_node = s.max_clients(NODES) / NODES;
    let warm = s.warmup.max(200 * (per_node * NODES) as u64 * COROUTINES);
    let at_max = format!(
        "--fabric sim --profile smart --set server_llc_lines={} --records {} --operations {} \
         --warmup {warm} --compute-nodes {NODES} --memory-nodes 2 --clients-per-node {per_node}",
        s.llc_lines("smart", PAPER_KEYS),
        s.records,
        s.ops
    );
    // Unloaded: one client of one coroutine per compute node, for median latencies that are
    // not queueing (a closed loop's p50 at saturation is in-flight operations / throughput).
    let unloaded = format!("{base} --clients-per-node 1 --coroutines 1");
    // The paper's thread sweeps, synchronous threads; every thread's cache warmed by ~50
    // operations of its own before the measured phase.
    let paper_sweep = |threads: &[usize]| {
        let pts = s.sweep_points(threads);
        let most = pts.iter().max().copied().unwrap_or(1) * NODES;
        let v: Vec<String> = pts.iter().map(|t| (t * NODES).to_string()).collect();
        format!(
            "--fabric sim --profile smart --set server_llc_lines={} --records {} --operations {} \
             --warmup {} --compute-nodes {NODES} --memory-nodes 2 --coroutines 1 \
             --sweep clients={}",
            s.llc_lines("smart", PAPER_KEYS),
            s.records,
            s.ops,
            s.warmup.max(50 * most as u64),
            v.join(",")
        )
    };
    let sweep_a = paper_sweep(THREADS_A);
    let sweep_c = paper_sweep(THREADS_C);
    // The three indexes of the paper's comparison; the lead adds rows here.
    let trio = |flags: &str, keys: &str, wl: &[&'static str]| {
        let mut v = vec![
            Series::new("SMART", format!("{flags} --index smart --keys {keys}"), wl),
            Series::new(
                "ART on DM",
                format!("{flags} --index smart --baseline --keys {keys}"),
                wl,
            ),
        ];
        if keys == "int" {
            v.insert(
                1,
                Series::new("Sherman", format!("{flags} --index sherman --keys int"), wl),
            );
        }
        v
    };
    let experiments = vec![
        Experiment {
            id: "smart-ycsb-int".into(),
            title: "SMART: YCSB, 8-byte integer keys".into(),
            chart: Chart::Bars,
            series: trio(&at_max, "int", ALL),
        },
        Experiment {
            id: "smart-ycsb-string".into(),
            title: "SMART: YCSB, string keys (Sherman takes integers only)".into(),
            chart: Chart::Bars,
            series: trio(&at_max, "string", ALL),
        },
        Experiment {
            id: "smart-clients-a".into(),
            title: "SMART: YCSB-A throughput vs clients".into(),
            chart: Chart::Curve,
            series: trio(&sweep_a, "int", &["a"]),
        },
        Experiment {
            id: "smart-clients-c".into(),
            title: "SMART: YCSB-C throughput vs clients".into(),
            chart: Chart::Curve,
            series: trio(&sweep_c, "int", &["c"]),
        },
        Experiment {
            id: "smart-unloaded".into(),
            title: "SMART vs Sherman unloaded: one client of one coroutine per compute node".into(),
            chart: Chart::Bars,
            series: trio(&unloaded, "int", &["a", "c"])
                .into_iter()
                .filter(|x| x.label != "ART on DM")
                .collect(),
        },
        Experiment {
            id: "smart-factors".into(),
            title: "SMART: factor analysis (ART, then each technique added)".into(),
            chart: Chart::Bars,
            series: vec![Series::new(
                "factors",
                format!("{at_max} --index smart --factors --workloads load,a,b,c,d"),
                ALL,
            )],
        },
    ];
    let p = |e: &str, s: &str, w| Pick::new(e, s, w);
    let claims = vec![
        Claim::ratio(
            "write-throughput",
            "SMART / Sherman throughput, write-intensive (YCSB-A), up to",
            (6.1, 6.1),
            Metric::Mops,
            true,
            p("smart-clients-a", "SMART", "a"),
            p("smart-clients-a", "Sherman", "a"),
            "paper: up to 6.1x over its client sweep (many threads per compute node)",
        ),
        Claim::ratio(
            "write-latency",
            "Sherman / SMART median latency, YCSB-A",
            (1.4, 1.4),
            Metric::P50,
            false,
            p("smart-ycsb-int", "SMART", "a"),
            p("smart-ycsb-int", "Sherman", "a"),
            "",
        ),
        Claim::ratio(
            "read-throughput",
            "SMART / Sherman throughput, read-only (YCSB-C), up to",
            (2.8, 2.8),
            Metric::Mops,
            true,
            p("smart-clients-c", "SMART", "c"),
            p("smart-clients-c", "Sherman", "c"),
            "the paper's gain comes from the memory nodes' IOPS: Sherman reads a 1 KB leaf \
             per lookup, SMART one small leaf",
        ),
        Claim::ratio(
            "read-latency",
            "Sherman / SMART median latency, YCSB-C, unloaded (paper: similar)",
            (0.9, 1.1),
            Metric::P50,
            false,
            p("smart-unloaded", "SMART", "c"),
            p("smart-unloaded", "Sherman", "c"),
            "measured unloaded (1 client x 1 coroutine per compute node): loaded, Sherman's \
             1 KB leaf reads saturate the memory nodes' links and a closed loop's p50 becomes \
             in-flight operations / throughput",
        ),
        Claim::ratio(
            "factor-lock-free",
            "factor: + lock-free internal nodes, LOAD",
            (1.5, 1.5),
            Metric::Mops,
            false,
            p("smart-factors", "+ lock-free internal", "LOAD"),
            p("smart-factors", "ART baseline (+cache)", "LOAD"),
            "",
        ),
        Claim::ratio(
            "factor-in-place",
            "factor: + update-in-place leaves, YCSB-B",
            (1.5, 1.5),
            Metric::Mops,
            false,
            p("smart-factors", "+ in-place leaf", "b"),
            p("smart-factors", "+ lock-free internal", "b"),
            "",
        ),
        Claim::ratio(
            "factor-rear-lock",
            "factor: + rear embedded lock, YCSB-A",
            (3.0, 3.0),
            Metric::Mops,
            false,
            p("smart-factors", "+ rear lock", "a"),
            p("smart-factors", "+ in-place leaf", "a"),
            "",
        ),
    ];
    Paper {
        key: "smart",
        name: "SMART (OSDI'23)",
        paper_setup: "16 compute nodes, 2 memory nodes, ConnectX-6 100 Gb; YCSB LOAD/A/B/C/D, \
                      60M keys, zipfian 0.99, 8-byte integer or email keys, 8-byte values",
        paper_keys: Some(60_000_000),
        setup: format!(
            "sim, profile smart (ConnectX-6 100 Gb, DRAM memory nodes; `remora perf --fabric \
             sim --profile smart --show-model`), LLC scaled to {} lines ({} keys of the \
             paper's 60M); {NODES} compute nodes x {per_node} client threads x {COROUTINES} \
             coroutines (curves: the authors' thread sweeps, synchronous threads, {} per node \
             for YCSB-A and {} for YCSB-C; unloaded: 1 x 1 coroutine), 2 memory nodes; {} \
             measured ops after {} warm-up ops ({warm} for the YCSB and factor runs at the \
             largest client count, 50 per thread for the curves), zipfian 0.99, 8-byte \
             values, seed 1",
            s.llc_lines("smart", PAPER_KEYS),
            s.records,
            list(&s.sweep_points(THREADS_A)),
            list(&s.sweep_points(THREADS_C)),
            s.ops,
            s.warmup
        ),
        experiments,
        claims,
    }
}

/// `1/4/22`.
pub(super) fn list(v: &[usize]) -> String {
    let v: Vec<String> = v.iter().map(|c| c.to_string()).collect();
    v.join("/")
}

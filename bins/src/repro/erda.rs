//! Erda (zero-copy log-structured remote NVM): one server with persistent memory, clients
//! on other machines; YCSB-C/B/A and update-only, latency vs value size, throughput vs
//! threads; Erda vs Redo Logging and Read-After-Write.
//!
//! `remora bench` has Erda only today: its figures are shown alone, and each ratio row
//! waits for the baselines (issue 12). When `--index erda-redo|erda-raw` land, add their
//! series below and turn the `unmeasured` claims into `ratio` ones.
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};

const NODES: usize = 2;
const NO_BASELINE: &str = "Redo Logging and Read-After-Write are not in `remora bench` yet \
                           (issue 12);";

pub fn paper(s: &Scale) -> Paper {
    let base = format!(
        "{} --compute-nodes {NODES} --memory-nodes 1 --persistent --value-size 64 --index erda",
        s.kv_flags()
    );
    let threads: &[usize] = if s.name == "quick" {
        &[4, 16]
    } else {
        &[2, 4, 8, 16, 32]
    };
    let sweep: Vec<String> = threads.iter().map(|t| t.to_string()).collect();
    let experiments = vec![
        Experiment {
            id: "erda-ycsb".into(),
            title: "Erda: YCSB at 16 client threads".into(),
            chart: Chart::Bars,
            series: vec![Series::new(
                "Erda",
                format!("{base} --clients-per-node 8"),
                &["a", "b", "c"],
            )],
        },
        Experiment {
            id: "erda-clients".into(),
            title: "Erda: throughput vs client threads".into(),
            chart: Chart::Curve,
            series: vec![Series::new(
                "Erda",
                format!("{base} --sweep clients={}", sweep.join(",")),
                &["c", "a"],
            )],
        },
    ];
    let e = |w| Some(Pick::new("erda-ycsb", "Erda", w));
    let claims = vec![
        Claim::unmeasured(
            "c-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-C (96.35 / 62.93 KOp/s)",
            (1.53, 1.53),
            Metric::Mops,
            e("c"),
            NO_BASELINE,
            "",
        ),
        Claim::unmeasured(
            "c-throughput-raw",
            "Erda / Read-After-Write throughput, YCSB-C (96.35 / 63.28 KOp/s)",
            (1.52, 1.52),
            Metric::Mops,
            e("c"),
            NO_BASELINE,
            "",
        ),
        Claim::unmeasured(
            "b-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-B (92.57 / 61.78 KOp/s)",
            (1.50, 1.50),
            Metric::Mops,
            e("b"),
            NO_BASELINE,
            "",
        ),
        Claim::unmeasured(
            "a-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-A (79.77 / 57.60 KOp/s)",
            (1.38, 1.38),
            Metric::Mops,
            e("a"),
            NO_BASELINE,
            "",
        ),
        Claim::unmeasured(
            "c-latency-redo",
            "Redo Logging / Erda mean latency, YCSB-C (92.7 / 62.84 µs)",
            (1.48, 1.48),
            Metric::Mean,
            e("c"),
            NO_BASELINE,
            "",
        ),
        Claim::unmeasured(
            "update-only-latency",
            "Redo Logging / Erda mean latency, update-only (103.89 / 102.1 µs)",
            (1.02, 1.02),
            Metric::Mean,
            None,
            "the baselines and the update-only workload are not in `remora bench` yet \
             (issue 12);",
            "",
        ),
        Claim::unmeasured(
            "b-cpu-redo",
            "Redo Logging / Erda server CPU per op, YCSB-B",
            (20.09, 20.09),
            Metric::Mops,
            None,
            NO_BASELINE,
            "Erda's server CPU per op is in erda-ycsb.json (server_ns_per_op)",
        ),
    ];
    Paper {
        key: "erda",
        name: "Erda",
        paper_setup: "one server with NVM, clients on other machines, RDMA; YCSB-C/B/A and \
                      update-only, values 16 B to 4 KB, throughput vs threads",
        setup: format!(
            "sim with persistent memory nodes, {NODES} compute nodes x 8 client threads x 4 \
             coroutines (curves: {} clients), 1 memory node running Erda's server; {} \
             8-byte integer keys, 64-byte values, {} measured ops after {} warm-up ops, \
             zipfian 0.99, seed 1",
            sweep.join("/"),
            s.records,
            s.ops,
            s.warmup
        ),
        experiments,
        claims,
    }
}

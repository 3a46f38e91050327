//! Erda (zero-copy log-structured remote NVM): one server with persistent memory, clients
//! on other machines; YCSB-C/B/A and update-only, latency vs value size, throughput vs
//! threads; Erda vs Redo Logging and Read-After-Write.
//!
//! Every row is measured on the sim (`--index erda|erda-redo|erda-raw`, `--persistent`
//! memory node); latency vs value size and log cleaning are not repro experiments yet.
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};

const NODES: usize = 2;

pub fn paper(s: &Scale) -> Paper {
    let base = format!(
        "{} --compute-nodes {NODES} --memory-nodes 1 --persistent --value-size 64",
        s.kv_flags()
    );
    let threads: &[usize] = if s.name == "quick" {
        &[4, 16]
    } else {
        &[2, 4, 8, 16, 32]
    };
    let sweep: Vec<String> = threads.iter().map(|t| t.to_string()).collect();
    // Erda and the paper's two baselines, on the same hash table and server contract.
    let three = |flags: &str, wl: &[&'static str]| {
        [
            ("Erda", "erda"),
            ("Redo Logging", "erda-redo"),
            ("Read-After-Write", "erda-raw"),
        ]
        .iter()
        .map(|(label, idx)| Series::new(label, format!("{flags} --index {idx}"), wl))
        .collect::<Vec<_>>()
    };
    let experiments = vec![
        Experiment {
            id: "erda-ycsb".into(),
            title: "Erda vs Redo Logging vs Read-After-Write: YCSB at 16 client threads".into(),
            chart: Chart::Bars,
            series: three(
                &format!("{base} --clients-per-node 8"),
                &["c", "b", "a", "update-only"],
            ),
        },
        Experiment {
            id: "erda-clients".into(),
            title: "Erda vs Redo Logging vs Read-After-Write: throughput vs client threads".into(),
            chart: Chart::Curve,
            series: three(
                &format!("{base} --sweep clients={}", sweep.join(",")),
                &["c", "a"],
            ),
        },
    ];
    let p = |s: &str, w| Pick::new("erda-ycsb", s, w);
    let (erda, redo, raw) = ("Erda", "Redo Logging", "Read-After-Write");
    let claims = vec![
        Claim::ratio(
            "c-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-C (96.35 / 62.93 KOp/s)",
            (1.53, 1.53),
            Metric::Mops,
            false,
            p(erda, "c"),
            p(redo, "c"),
            "",
        ),
        Claim::ratio(
            "c-throughput-raw",
            "Erda / Read-After-Write throughput, YCSB-C (96.35 / 63.28 KOp/s)",
            (1.52, 1.52),
            Metric::Mops,
            false,
            p(erda, "c"),
            p(raw, "c"),
            "",
        ),
        Claim::ratio(
            "b-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-B (92.57 / 61.78 KOp/s)",
            (1.50, 1.50),
            Metric::Mops,
            false,
            p(erda, "b"),
            p(redo, "b"),
            "",
        ),
        Claim::ratio(
            "a-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-A (79.77 / 57.60 KOp/s)",
            (1.38, 1.38),
            Metric::Mops,
            false,
            p(erda, "a"),
            p(redo, "a"),
            "",
        ),
        Claim::ratio(
            "update-only-throughput-redo",
            "Erda / Redo Logging throughput, update-only (paper: approximately equal)",
            (0.9, 1.1),
            Metric::Mops,
            false,
            p(erda, "UPD"),
            p(redo, "UPD"),
            "",
        ),
        Claim::ratio(
            "c-latency-redo",
            "Redo Logging / Erda mean latency, YCSB-C (92.7 / 62.84 µs)",
            (1.48, 1.48),
            Metric::Mean,
            false,
            p(erda, "c"),
            p(redo, "c"),
            "",
        ),
        Claim::ratio(
            "update-only-latency",
            "Redo Logging / Erda mean latency, update-only (103.89 / 102.1 µs)",
            (1.02, 1.02),
            Metric::Mean,
            false,
            p(erda, "UPD"),
            p(redo, "UPD"),
            "",
        ),
        Claim::ratio(
            "b-cpu-redo",
            "Redo Logging / Erda server CPU per op, YCSB-B",
            (20.09, 20.09),
            Metric::ServerCpu,
            false,
            p(erda, "b"),
            p(redo, "b"),
            "server CPU per op from the sim's handler busy time",
        ),
        Claim::ratio(
            "a-cpu-redo",
            "Redo Logging / Erda server CPU per op, YCSB-A",
            (1.89, 1.89),
            Metric::ServerCpu,
            false,
            p(erda, "a"),
            p(redo, "a"),
            "",
        ),
    ];
    Paper {
        key: "erda",
        name: "Erda",
        paper_setup: "one server with NVM, clients on other machines, RDMA; YCSB-C/B/A and \
                      update-only, values 16 B to 4 KB, throughput vs threads",
        paper_keys: None,
        setup: format!(
            "sim with persistent memory nodes, {NODES} compute nodes x 8 client threads x 4 \
             coroutines (curves: {} clients), 1 memory node running the store's server; {} \
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

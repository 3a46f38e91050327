//! CANRT (client-active NVM radix tree): one server with persistent memory, two client
//! machines, 16 client threads; YCSB write-only / write-heavy / read-heavy / read-only;
//! CANRT vs WORT and WOART behind a server-reply ring buffer.
//!
//! `remora bench` has CANRT only today: its figures are shown alone, and each ratio row
//! waits for the baselines (issue 13). When `--index wort|woart` land, add their series to
//! the experiments below and turn the `unmeasured` claims into `ratio` ones.
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};

const NODES: usize = 2;
const NO_BASELINE: &str = "WORT and WOART are not in `remora bench` yet (issue 13);";

pub fn paper(s: &Scale) -> Paper {
    let base = format!(
        "{} --compute-nodes {NODES} --memory-nodes 1 --value-size 16 --index canrt",
        s.kv_flags()
    );
    let threads: &[usize] = if s.name == "quick" {
        &[2, 4, 8, 16]
    } else {
        &[2, 4, 8, 16, 32]
    };
    let sweep: Vec<String> = threads.iter().map(|t| t.to_string()).collect();
    let experiments = vec![
        Experiment {
            id: "canrt-ycsb".into(),
            title: "CANRT: YCSB at 16 client threads".into(),
            chart: Chart::Bars,
            series: vec![Series::new(
                "CANRT",
                format!("{base} --clients-per-node 8"),
                &["a", "b", "c"],
            )],
        },
        Experiment {
            id: "canrt-clients".into(),
            title: "CANRT: scalability, write-heavy and read-heavy".into(),
            chart: Chart::Curve,
            series: vec![Series::new(
                "CANRT",
                format!("{base} --sweep clients={}", sweep.join(",")),
                &["a", "b"],
            )],
        },
    ];
    let c = |w| Some(Pick::new("canrt-ycsb", "CANRT", w));
    let claims = vec![
        Claim::unmeasured(
            "ycsb-write-heavy",
            "CANRT / WORT, WOART throughput, YCSB (up to, write-intensive)",
            (7.44, 11.15),
            Metric::Mops,
            c("a"),
            NO_BASELINE,
            "",
        ),
        Claim::unmeasured(
            "write-latency",
            "WORT, WOART / CANRT write latency",
            (1.67, 1.72),
            Metric::P50,
            c("a"),
            NO_BASELINE,
            "paper: 16-byte string keys, 15-byte values; remora's CANRT takes 8-byte integer \
             keys today",
        ),
        Claim::unmeasured(
            "read-latency",
            "WORT, WOART / CANRT read latency",
            (1.19, 1.22),
            Metric::P50,
            c("c"),
            NO_BASELINE,
            "",
        ),
        Claim::unmeasured(
            "range-10k",
            "WORT, WOART / CANRT range query latency, 10,000 keys",
            (3.1, 3.1),
            Metric::Mean,
            None,
            "WORT/WOART and a range-query workload are not in `remora bench` yet (issue 13);",
            "",
        ),
        Claim::unmeasured(
            "range-100k",
            "WORT, WOART / CANRT range query latency, 100,000 keys",
            (3.7, 3.83),
            Metric::Mean,
            None,
            "WORT/WOART and a range-query workload are not in `remora bench` yet (issue 13);",
            "",
        ),
    ];
    Paper {
        key: "canrt",
        name: "CANRT",
        paper_setup: "3 machines with Optane DC PM (AppDirect), ConnectX-5: 1 server, 2 client \
                      machines, 16 client threads; 16-byte keys, 15-byte values; YCSB \
                      write-only / write-heavy / read-heavy / read-only",
        setup: format!(
            "sim (DRAM memory node: with --persistent CANRT's runs at 2 and 4 clients fail with \
             `work request flushed`, see docs/repro notes), {NODES} compute nodes x 8 client threads x 4 \
             coroutines (curves: {} clients), 1 memory node running CANRT's server; {} \
             8-byte integer keys, 16-byte values (CANRT takes multiples of 8), {} measured ops after {} warm-up ops, \
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

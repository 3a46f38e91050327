//! Sherman (SIGMOD'22): 8 servers, each one compute node and one memory node; 8-byte keys
//! and values, zipfian 0.99; FG+ and each technique added (the paper's Figure 2).
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};

const NODES: usize = 8;

pub fn paper(s: &Scale) -> Paper {
    let base = format!(
        "{} --compute-nodes {NODES} --memory-nodes {NODES}",
        s.kv_flags()
    );
    let at_max = format!("{base} --clients-per-node {}", s.max_clients(NODES) / NODES);
    let sweep = format!("{base} {}", s.client_sweep(NODES));
    let experiments = vec![
        Experiment {
            id: "sherman-factors".into(),
            title: "Sherman: FG+ then each technique (write- and read-intensive)".into(),
            chart: Chart::Bars,
            series: vec![Series::new(
                "factors",
                format!("{at_max} --index sherman --factors --workloads a,b"),
                &["a", "b"],
            )],
        },
        Experiment {
            id: "sherman-clients-a".into(),
            title: "Sherman vs FG+: YCSB-A throughput vs clients".into(),
            chart: Chart::Curve,
            series: vec![
                Series::new("Sherman", format!("{sweep} --index sherman"), &["a"]),
                Series::new("FG+", format!("{sweep} --index fg-plus"), &["a"]),
            ],
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
            "paper's write-intensive mix is 50% insert / 50% lookup; remora runs YCSB-A \
             (50% update / 50% read of loaded keys)",
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
            "",
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
            "paper's read-intensive mix is 5% insert / 95% lookup; remora runs YCSB-B",
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
            "",
        ),
        Claim::ratio(
            "two-level-version",
            "factor: + two-level version, write-intensive",
            (1.01, 100.0),
            Metric::Mops,
            false,
            p(full, "a"),
            p("+ combination", "a"),
            "",
        ),
    ];
    Paper {
        key: "sherman",
        name: "Sherman (SIGMOD'22)",
        paper_setup: "8 servers, each one compute and one memory node, ConnectX-5 100 Gb; \
                      8-byte keys and values, 1 billion keys bulk-loaded, zipfian 0.99",
        paper_keys: Some(1_000_000_000),
        setup: format!(
            "sim, {NODES} compute nodes x {} client threads x 4 coroutines, {NODES} memory \
             nodes (curves: {} clients per node); {} keys loaded by inserts, {} measured ops \
             after {} warm-up ops, zipfian 0.99, seed 1",
            s.max_clients(NODES) / NODES,
            s.per_node_list(),
            s.records,
            s.ops,
            s.warmup
        ),
        experiments,
        claims,
    }
}

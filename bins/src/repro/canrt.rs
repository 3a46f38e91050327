//! CANRT (client-active NVM radix tree): one server with persistent memory, two client
//! machines, 16 client threads; YCSB write-only / write-heavy / read-heavy / read-only;
//! CANRT vs WORT and WOART behind a server-reply ring buffer.
//!
//! The trees run on the sim (`--index canrt|wort|woart`) with a persistent memory node.
//! Range queries: one client, `--workload range` (every operation a range of exactly
//! `--scan-max` keys; WORT and WOART answer it one request per key, as in the paper); the
//! 100,000-key range needs 200,000 keys loaded and runs at `--scale full` only (minutes).
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};

const NODES: usize = 2;

pub fn paper(s: &Scale) -> Paper {
    let base = format!(
        "{} --persistent --compute-nodes {NODES} --memory-nodes 1 --keys string --value-size 15",
        s.kv_flags()
    );
    let threads: &[usize] = if s.name == "quick" {
        &[2, 4, 8, 16]
    } else {
        &[2, 4, 8, 16, 32]
    };
    let sweep: Vec<String> = threads.iter().map(|t| t.to_string()).collect();
    // The three trees of the paper's comparison (WORT and WOART: server-side trees behind
    // the paper's request ring buffers).
    let trees = |flags: &str, wl: &[&'static str]| {
        [("CANRT", "canrt"), ("WORT", "wort"), ("WOART", "woart")]
            .iter()
            .map(|(label, idx)| Series::new(label, format!("{flags} --index {idx}"), wl))
            .collect::<Vec<_>>()
    };
    // Range queries of `scan` keys over `2 * scan` loaded keys, one client, a few queries.
    let range = |scan: u64| {
        let flags = format!(
            "--fabric sim --persistent --records {} --operations 5 --compute-nodes 1 \
             --memory-nodes 1 --clients-per-node 1 --coroutines 1 --keys string --value-size 15 \
             --scan-max {scan}",
            2 * scan
        );
        Experiment {
            id: format!("canrt-range-{}k", scan / 1000),
            title: format!("CANRT vs WORT vs WOART: range queries of {scan} keys, one client"),
            chart: Chart::Bars,
            series: trees(&flags, &["range"]),
        }
    };
    let mut experiments = vec![
        Experiment {
            id: "canrt-ycsb".into(),
            title: "CANRT vs WORT vs WOART: YCSB at 16 client threads".into(),
            chart: Chart::Bars,
            series: trees(
                &format!("{base} --clients-per-node 8"),
                &["update-only", "a", "b", "c"],
            ),
        },
        Experiment {
            id: "canrt-clients".into(),
            title: "CANRT vs WORT vs WOART: scalability, write-heavy and read-heavy".into(),
            chart: Chart::Curve,
            series: trees(
                &format!("{base} --sweep clients={}", sweep.join(",")),
                &["a", "b"],
            ),
        },
        Experiment {
            id: "canrt-latency".into(),
            title: "CANRT vs WORT vs WOART: latency, one client, random string keys".into(),
            chart: Chart::Bars,
            series: trees(
                &format!(
                    "{} --persistent --compute-nodes 1 --memory-nodes 1 --clients-per-node 1 \
                     --coroutines 1 --keys string --value-size 15",
                    s.kv_flags()
                ),
                &["update-only", "c"],
            ),
        },
        range(10_000),
    ];
    let full = s.name == "full";
    if full {
        experiments.push(range(100_000));
    }
    let p = |s: &str, w| Pick::new("canrt-ycsb", s, w);
    let mut claims = Vec::new();
    for base_tree in ["WORT", "WOART"] {
        claims.extend([
            Claim::ratio(
                if base_tree == "WORT" {
                    "write-only-wort"
                } else {
                    "write-only-woart"
                },
                if base_tree == "WORT" {
                    "CANRT / WORT throughput, YCSB write-only (paper: up to, write-intensive)"
                } else {
                    "CANRT / WOART throughput, YCSB write-only"
                },
                (7.44, 11.15),
                Metric::Mops,
                false,
                p("CANRT", "UPD"),
                p(base_tree, "UPD"),
                "a remora CANRT write returns when the server has applied it (linearizable, \
                 durable): the server takes the append, persists item and meta word and SENDs \
                 the writer its acknowledgement, about 740 ns of its one thread per write \
                 (`srv ns/op`), so zipfian writes are server bound as WORT's are; the paper's \
                 write is done when posted and its server sends nothing",
            ),
            Claim::ratio(
                if base_tree == "WORT" {
                    "write-heavy-wort"
                } else {
                    "write-heavy-woart"
                },
                if base_tree == "WORT" {
                    "CANRT / WORT throughput, YCSB write-heavy (A)"
                } else {
                    "CANRT / WOART throughput, YCSB write-heavy (A)"
                },
                (7.44, 11.15),
                Metric::Mops,
                false,
                p("CANRT", "a"),
                p(base_tree, "a"),
                "",
            ),
        ]);
        for wl in ["b", "c"] {
            claims.push(Claim::ratio(
                if base_tree == "WORT" {
                    if wl == "b" {
                        "read-heavy-wort"
                    } else {
                        "read-only-wort"
                    }
                } else if wl == "b" {
                    "read-heavy-woart"
                } else {
                    "read-only-woart"
                },
                if base_tree == "WORT" {
                    if wl == "b" {
                        "CANRT / WORT throughput, YCSB read-heavy (B)"
                    } else {
                        "CANRT / WORT throughput, YCSB read-only (C)"
                    }
                } else if wl == "b" {
                    "CANRT / WOART throughput, YCSB read-heavy (B)"
                } else {
                    "CANRT / WOART throughput, YCSB read-only (C)"
                },
                (7.44, 11.15),
                Metric::Mops,
                false,
                p("CANRT", wl),
                p(base_tree, wl),
                if wl == "c" {
                    "CANRT's reads are one-sided whole-node READs, bound by the memory node's \
                     link; WORT's every read is a request its server answers"
                } else {
                    ""
                },
            ));
        }
    }
    claims.extend([
        Claim::ratio(
            "write-latency",
            "WORT / CANRT write latency (p50, one client, random string keys)",
            (1.67, 1.72),
            Metric::P50,
            false,
            Pick::new("canrt-latency", "CANRT", "UPD"),
            Pick::new("canrt-latency", "WORT", "UPD"),
            "a remora CANRT write is 2 round trips (lock FETCH_AND_ADD with the node READ, then \
             the append with its flush READ) and then waits for the server's acknowledgement \
             that the item is applied and persisted (linearizable, durable); the paper counts \
             a write done when its WRITE_WITH_IMM is posted (about 1.5 round trips) and \
             makes it visible later",
        ),
        Claim::ratio(
            "read-latency",
            "WORT / CANRT read latency (p50, one client, random string keys)",
            (1.19, 1.22),
            Metric::P50,
            false,
            Pick::new("canrt-latency", "CANRT", "c"),
            Pick::new("canrt-latency", "WORT", "c"),
            "",
        ),
        Claim::ratio(
            "range-10k",
            "WORT / CANRT range query latency, 10,000 keys",
            (3.1, 3.1),
            Metric::Mean,
            false,
            Pick::new("canrt-range-10k", "CANRT", "RANGE"),
            Pick::new("canrt-range-10k", "WORT", "RANGE"),
            "WORT answers a range with one request per key (as in the paper); remora's CANRT \
             reads whole data nodes, many keys per READ",
        ),
        if full {
            Claim::ratio(
                "range-100k",
                "WORT / CANRT range query latency, 100,000 keys",
                (3.7, 3.83),
                Metric::Mean,
                false,
                Pick::new("canrt-range-100k", "CANRT", "RANGE"),
                Pick::new("canrt-range-100k", "WORT", "RANGE"),
                "",
            )
        } else {
            Claim::unmeasured(
                "range-100k",
                "WORT / CANRT range query latency, 100,000 keys",
                (3.7, 3.83),
                Metric::Mean,
                None,
                "at --scale full only (200,000 keys loaded into each tree take minutes of \
                 simulation);",
                "",
            )
        },
    ]);
    Paper {
        key: "canrt",
        name: "CANRT",
        paper_setup: "3 machines with Optane DC PM (AppDirect), ConnectX-5: 1 server, 2 client \
                      machines, 16 client threads; 16-byte keys, 15-byte values; YCSB \
                      write-only / write-heavy / read-heavy / read-only",
        paper_keys: None,
        setup: format!(
            "sim (persistent memory node), {NODES} compute nodes x 8 client threads x 4 \
             coroutines (curves: {} clients), 1 memory node running the tree's server (CANRT's applier, or WORT/WOART behind request rings); {} \
             random 16-byte string keys, 15-byte values (the paper's), {} measured ops after {} warm-up ops; latency: one client of one coroutine; \
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

//! Catfish (RDMA R-tree): one server, eight client nodes (4 to 32 clients each), 2 million
//! rectangles; search-only and 90/10 search/insert at request scales 0.00001 (server-CPU
//! bound) and 0.01 (bandwidth bound); fast messaging vs RDMA offloading vs the adaptive
//! switch (Catfish).
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};

const NODES: usize = 8;
/// Heartbeat interval (Algorithm 1's Inv) in µs. The paper's 10 ms is longer than a whole
/// measured phase here (a few ms of virtual time), so no heartbeat would ever arrive and the
/// adaptive client would never offload; 100 µs keeps tens of heartbeats per run.
const HEARTBEAT_US: u64 = 100;
/// Objects loaded and searches of the wall-clock (soft fabric vs TCP) experiment, at most.
const SOFT_OBJECTS: u64 = 3_000;

pub fn paper(s: &Scale) -> Paper {
    let sweep = s.client_sweep(NODES);
    let base = format!(
        "--fabric sim --index catfish --tree rstar --heartbeat-us {HEARTBEAT_US} \
         --compute-nodes {NODES} --memory-nodes 1 --records {} --operations {} {sweep}",
        s.rects, s.ops
    );
    let modes = |window: &str| {
        ["adaptive", "messaging", "offloading"]
            .iter()
            .map(|m| {
                let label = match *m {
                    "adaptive" => "Catfish (adaptive)",
                    "messaging" => "fast messaging",
                    _ => "RDMA offloading",
                };
                Series::new(
                    label,
                    format!("{base} --mode {m} --window {window}"),
                    &["c"],
                )
            })
            .collect::<Vec<_>>()
    };
    // The TCP/IP baseline runs kernel sockets, which the sim does not model: Catfish and the
    // baseline both run on real threads here (the soft fabric: shared memory in one
    // process; TCP over loopback), wall-clock, a few thousand objects, 1 and 2 clients.
    let soft = format!(
        "--fabric soft --no-pin --index catfish --tree rstar --records {} --operations {} \
         --sweep clients=1,2 --window 0.00001",
        s.rects.min(SOFT_OBJECTS),
        s.ops.min(SOFT_OBJECTS)
    );
    let mut mixed = modes("0.00001");
    for m in &mut mixed {
        m.workloads = vec!["b"];
    }
    let experiments = vec![
        Experiment {
            id: "catfish-small".into(),
            title: "Catfish: search-only, request scale 0.00001 (server-CPU bound)".into(),
            chart: Chart::Curve,
            series: modes("0.00001"),
        },
        Experiment {
            id: "catfish-large".into(),
            title: "Catfish: search-only, request scale 0.01 (bandwidth bound)".into(),
            chart: Chart::Curve,
            series: modes("0.01"),
        },
        Experiment {
            id: "catfish-tcp".into(),
            title: "Catfish vs TCP/IP: search-only, real threads (soft fabric vs loopback \
                    sockets, wall-clock)"
                .into(),
            chart: Chart::Curve,
            series: vec![
                Series::new(
                    "Catfish (adaptive, soft)",
                    format!("{soft} --mode adaptive"),
                    &["c"],
                ),
                Series::new("TCP/IP (loopback)", format!("{soft} --mode tcp"), &["c"]),
            ],
        },
        Experiment {
            id: "catfish-mixed".into(),
            title: "Catfish: 90% search / 10% insert, request scale 0.00001".into(),
            chart: Chart::Curve,
            series: mixed,
        },
    ];
    let p = |e: &str, s: &str, w| Pick::new(e, s, w);
    let cat = "Catfish (adaptive)";
    let claims = vec![
        Claim::ratio(
            "vs-messaging-small",
            "Catfish / fast messaging throughput, search-only, scale 0.00001, up to",
            (2.32, 2.32),
            Metric::Mops,
            true,
            p("catfish-small", cat, "c"),
            p("catfish-small", "fast messaging", "c"),
            "paper: up to 2.32x over all its search-only runs (R*-tree; remora's tree is \
             Guttman's basic R-tree until issue 14)",
        ),
        Claim::ratio(
            "vs-offloading-small",
            "Catfish / RDMA offloading throughput, search-only, scale 0.00001, up to",
            (3.09, 3.09),
            Metric::Mops,
            true,
            p("catfish-small", cat, "c"),
            p("catfish-small", "RDMA offloading", "c"),
            "",
        ),
        Claim::ratio(
            "vs-messaging-large",
            "Catfish / fast messaging throughput, search-only, scale 0.01, up to",
            (2.32, 2.32),
            Metric::Mops,
            true,
            p("catfish-large", cat, "c"),
            p("catfish-large", "fast messaging", "c"),
            "",
        ),
        Claim::ratio(
            "vs-offloading-large",
            "Catfish / RDMA offloading throughput, search-only, scale 0.01, up to",
            (3.09, 3.09),
            Metric::Mops,
            true,
            p("catfish-large", cat, "c"),
            p("catfish-large", "RDMA offloading", "c"),
            "",
        ),
        Claim::ratio(
            "latency-vs-messaging",
            "fast messaging / Catfish mean latency, search-only, scale 0.00001, up to",
            (3.25, 3.25),
            Metric::Mean,
            true,
            p("catfish-small", cat, "c"),
            p("catfish-small", "fast messaging", "c"),
            "",
        ),
        Claim::ratio(
            "latency-vs-offloading",
            "RDMA offloading / Catfish mean latency, search-only, scale 0.00001, up to",
            (3.07, 3.07),
            Metric::Mean,
            true,
            p("catfish-small", cat, "c"),
            p("catfish-small", "RDMA offloading", "c"),
            "",
        ),
        Claim::ratio(
            "mixed-vs-messaging",
            "Catfish / fast messaging throughput, 90/10 search/insert, up to",
            (2.23, 2.23),
            Metric::Mops,
            true,
            p("catfish-mixed", cat, "b"),
            p("catfish-mixed", "fast messaging", "b"),
            "",
        ),
        Claim::ratio(
            "mixed-vs-offloading",
            "Catfish / RDMA offloading throughput, 90/10 search/insert, up to",
            (4.28, 4.28),
            Metric::Mops,
            true,
            p("catfish-mixed", cat, "b"),
            p("catfish-mixed", "RDMA offloading", "b"),
            "",
        ),
        Claim::ratio(
            "vs-tcp",
            "Catfish / TCP/IP throughput, search-only, up to (wall-clock, this machine)",
            (16.46, 16.46),
            Metric::Mops,
            true,
            p("catfish-tcp", "Catfish (adaptive, soft)", "c"),
            p("catfish-tcp", "TCP/IP (loopback)", "c"),
            "measured on real threads, not the sim: the paper's 16.46x is RDMA over 100 Gb \
             InfiniBand against kernel TCP between machines; here both run in one machine \
             (TCP over loopback: no wire, no NIC), and the soft fabric's client and server \
             threads poll (spin, yield, then sleep) while TCP's block in the kernel, so on a \
             machine with fewer free cores than polling threads Catfish waits for a CPU: its \
             median is lower than TCP's but its tail (p99) is the scheduler's time slice. \
             `--check` does not compare this row's side of 1",
        ),
    ];
    Paper {
        key: "catfish",
        name: "Catfish (TPDS)",
        paper_setup: "9 nodes, 100 Gb InfiniBand (ConnectX-5): 1 server, 8 client nodes with \
                      4-32 clients each (32-256 clients); R*-tree of 2 million rectangles, node \
                      size 30; 10,000 searches per client; request scales 0.00001, 0.01, \
                      power law",
        paper_keys: Some(2_000_000),
        setup: format!(
            "sim, {NODES} compute nodes x {} clients (one outstanding search each), 1 memory \
             node running Catfish's server; R*-tree of {} uniform rectangles, fanout \
             30; {} measured ops; seed 1; heartbeats every {HEARTBEAT_US} µs (the paper's \
             10 ms is longer than the run); no warm-up (clients keep no cache; the server's \
             heartbeats start with the run). Catfish vs TCP/IP (`catfish-tcp`): not on the \
             sim but on real threads of the machine that ran the report (soft fabric vs TCP \
             over loopback, 1 and 2 clients, {} rectangles, {} searches), wall-clock, not \
             deterministic",
            s.per_node_list(),
            s.rects,
            s.ops,
            s.rects.min(SOFT_OBJECTS),
            s.ops.min(SOFT_OBJECTS)
        ),
        experiments,
        claims,
    }
}

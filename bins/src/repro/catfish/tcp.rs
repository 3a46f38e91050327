//! Catfish vs TCP/IP (seeds/003 §5.2.1, Fig. 11): not on the sim (kernel sockets are not in
//! it) but on real threads of the machine that runs the report, wall-clock.
use super::{SOFT_OBJECTS, p};
use crate::repro::{Chart, Claim, Experiment, Metric, Scale, Series};

/// The soft fabric's Catfish against TCP over loopback, 1 and 2 clients.
pub(super) fn experiment(s: &Scale) -> Experiment {
    let soft = format!(
        "--fabric soft --no-pin --index catfish --tree rstar --records {} --operations {} \
         --sweep clients=1,2 --window 0.00001",
        s.rects.min(SOFT_OBJECTS),
        s.ops.min(SOFT_OBJECTS)
    );
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
    }
}

/// Its row.
pub(super) fn claim() -> Claim {
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
    )
}

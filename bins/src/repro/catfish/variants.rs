//! Search-only on the basic R-tree (seeds/003 §5.2.2, Figs. 15-16) and the Hilbert R-tree
//! (§5.2.3, Figs. 19-20) at request scale 0.00001.
use super::{CAT, Ctx, p};
use crate::repro::{Chart, Claim, Experiment, Metric};

/// Basic R-tree figures (seeds/003 §5.2.2): fast messaging's peak, offloading at 256 clients.
const BASIC_SRC: &str = "seeds/003 §5.2.2, Fig. 15: fast messaging's peak, RDMA offloading at \
                         256 clients, scale 0.00001";
/// Hilbert R-tree figures (seeds/003 §5.2.3).
const HILBERT_SRC: &str = "seeds/003 §5.2.3, Fig. 19: Catfish's peak, RDMA offloading at 256 \
                           clients, scale 0.00001";

/// The basic R-tree's.
pub(super) fn basic(c: &Ctx) -> Experiment {
    Experiment {
        id: "catfish-basic".into(),
        title: "Catfish on the basic R-tree: search-only, request scale 0.00001 (Figs. \
                15-16)"
            .into(),
        chart: Chart::Curve,
        series: c.modes_on("guttman", "--window 0.00001", "c"),
    }
}

/// The Hilbert R-tree's.
pub(super) fn hilbert(c: &Ctx) -> Experiment {
    Experiment {
        id: "catfish-hilbert".into(),
        title: "Catfish on the Hilbert R-tree: search-only, request scale 0.00001 (Figs. \
                19-20)"
            .into(),
        chart: Chart::Curve,
        series: c.modes_on("hilbert", "--window 0.00001", "c"),
    }
}

/// The basic R-tree's rows.
pub(super) fn basic_claims() -> Vec<Claim> {
    vec![
        Claim::ratio(
            "basic-vs-messaging",
            "Catfish / fast messaging throughput, basic R-tree, search-only, up to",
            (2.50, 2.50),
            Metric::Mops,
            true,
            p("catfish-basic", CAT, "c"),
            p("catfish-basic", "fast messaging", "c"),
            "the paper's up-to figures for the basic R-tree span its three request scales (remora \
             runs scale 0.00001 only). Measured at 256 clients: Catfish offloads 39% of its \
             searches, each ~17 node READs through its client node's one READ at a time \
             (§4.4), and leaves the server 48% used: 0.559 Mops, level with fast messaging \
             (0.562); Algorithm 1 offloads on server load alone, whatever an offloaded \
             search costs on this tree",
        )
        .figures(None, Some(0.63891), BASIC_SRC),
        Claim::ratio(
            "basic-vs-offloading",
            "Catfish / RDMA offloading throughput, basic R-tree, search-only, up to",
            (5.88, 5.88),
            Metric::Mops,
            true,
            p("catfish-basic", CAT, "c"),
            p("catfish-basic", "RDMA offloading", "c"),
            "",
        )
        .figures(None, Some(0.19375), BASIC_SRC),
        Claim::ratio(
            "basic-latency-vs-messaging",
            "fast messaging / Catfish mean latency, basic R-tree, search-only, up to",
            (2.65, 2.65),
            Metric::Mean,
            true,
            p("catfish-basic", CAT, "c"),
            p("catfish-basic", "fast messaging", "c"),
            "",
        ),
        Claim::ratio(
            "basic-latency-vs-offloading",
            "RDMA offloading / Catfish mean latency, basic R-tree, search-only, up to",
            (5.09, 5.09),
            Metric::Mean,
            true,
            p("catfish-basic", CAT, "c"),
            p("catfish-basic", "RDMA offloading", "c"),
            "",
        ),
    ]
}

/// The Hilbert R-tree's rows.
pub(super) fn hilbert_claims() -> Vec<Claim> {
    vec![
        Claim::ratio(
            "hilbert-vs-messaging",
            "Catfish / fast messaging throughput, Hilbert R-tree, search-only, up to",
            (1.69, 1.69),
            Metric::Mops,
            true,
            p("catfish-hilbert", CAT, "c"),
            p("catfish-hilbert", "fast messaging", "c"),
            "",
        )
        .figures(Some(1.07206), None, HILBERT_SRC),
        Claim::ratio(
            "hilbert-vs-offloading",
            "Catfish / RDMA offloading throughput, Hilbert R-tree, search-only, up to",
            (2.33, 2.33),
            Metric::Mops,
            true,
            p("catfish-hilbert", CAT, "c"),
            p("catfish-hilbert", "RDMA offloading", "c"),
            "",
        )
        .figures(Some(1.07206), Some(0.74567), HILBERT_SRC),
        Claim::ratio(
            "hilbert-latency-vs-messaging",
            "fast messaging / Catfish mean latency, Hilbert R-tree, search-only, up to",
            (2.01, 2.01),
            Metric::Mean,
            true,
            p("catfish-hilbert", CAT, "c"),
            p("catfish-hilbert", "fast messaging", "c"),
            "",
        ),
        Claim::ratio(
            "hilbert-latency-vs-offloading",
            "RDMA offloading / Catfish mean latency, Hilbert R-tree, search-only, up to",
            (2.09, 2.09),
            Metric::Mean,
            true,
            p("catfish-hilbert", CAT, "c"),
            p("catfish-hilbert", "RDMA offloading", "c"),
            "",
        ),
    ]
}

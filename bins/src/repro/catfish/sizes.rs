//! Tree sizes (seeds/003 §5.3.1, Fig. 23) and node sizes (§5.3.2, Fig. 24): fixed 128
//! clients, power-law request scales, one series per mode and size.
use super::{Ctx, FIXED_CLIENTS, MODES, NODES, PAPER_ENTRY_BYTES, POWER, llc_lines, mode_flags, p};
use crate::repro::{Chart, Claim, Experiment, Metric, Scale, Series};

/// What the tree-size runs measure (128 clients, power-law scales, `remora bench ... --tree
/// rstar --mode offloading --power-law-windows --clients-per-node 16 --records 10000|100000
/// --fanout 30 --paper-objects 0`).
const TREE_SIZE_NOTE: &str = "the paper's two smallest trees, 10K and 100K rectangles (3 and \
    4 levels at node size 30, as §5.3.1 reports): an offloaded search READs 2.89 nodes of the \
    10K tree and 4.44 of the 100K one, so offloading falls from 1.050 to 0.747 Mops (measured \
    alone, 2026-11-30). With 1K and 10K rectangles, the quick scale's sizes before, both trees \
    had 3 levels and offloading ran 1.049 and 1.050 Mops";

/// What the node-size offloading runs measure (`remora bench ... --tree rstar --mode
/// offloading --power-law-windows --clients-per-node 16 --records 10000 --fanout 15|130
/// --paper-entry-bytes 40`; the 1M-rectangle figures with `--records 1000000
/// --paper-objects 1000000`).
const NODE_SIZE_NOTE: &str = "the paper puts its offloading's fall down to fetching 'nodes \
    with more irrelevant rectangles, [which] consumes both additional bandwidth and time' \
    (§5.3.2). What an offloaded search costs here, 128 clients, 10K rectangles: client CPU \
    (the sim charges each node a CRC-64 over twice its bytes and one rectangle test per \
    entry, core/src/catfish/client/offload.rs, at the calibrated client_crc64clmul_* and \
    client_rect_* x the profile's 1.3, docs/cpu-calibration.md): 0.07 µs a 15-entry node \
    (376 B), 0.57 µs a 130-entry one (3,136 B), paid outside the client node's READ turn, so it \
    adds latency and bounds nothing; the client nodes' links (8 NICs for 128 clients, each \
    carrying its 16 clients' bytes): 1.4 GB/s at 130 entries, 11% of 100 Gb; the memory \
    node's one link, which carries every byte read: with the paper's 40-byte entries \
    (4 doubles + a pointer, §2; a 130-entry node 5,232 B, `--paper-entry-bytes 40`) 0.946 \
    Mops x 11.6 KB = 11.0 GB/s, 88% of it (remora's 24-byte entries: 1.148 Mops, 7.0 KB, \
    64%). Each client node serves one READ at a time (the paper's §4.4 saturation, \
    `--node-serial-reads`), so a search costs its READs x (round trip + its bytes' time): 15 entries 5.98 READs at \
    1.96 µs, 130 entries 3.21 at 2.63 µs: 0.683 against 0.946 Mops (0.72x; 0.60x with \
    24-byte entries). The 130-entry tree falls below the 15-entry one only when its searches \
    are bound by the memory node's link below the 15-entry tree's READ-bound rate: more than \
    12.5 GB/s / 0.683 Mops = 18.3 KB a search, 1.6x what remora's R*-tree reads. At the \
    paper's 1M-rectangle trees (remora's entries, offloading alone, measured 2026-11-30) the \
    gap is wider: 15 entries (6 levels, as the paper's) 0.367 Mops, 10.21 READs and 4.0 KB \
    a search; 130 entries (3 levels) 0.811 Mops, 3.49 READs and 11.0 KB (0.45x), where the \
    link would bind the 130-entry tree only above 34 KB a search. The paper gives no node \
    READ count or bytes to tell which of its costs (more leaves a search, a larger node \
    image, a per-byte client cost) makes up the difference. From these runs' own figures \
    (issue 22): a READ's turn on a client node costs 1.96 µs at 535 bytes and 2.63 µs at \
    3,614 (0.683 and 0.946 Mops over 8 nodes, 5.98 and 3.21 READs a search), so 1.84 µs \
    plus 0.22 ns a byte; the 130-entry tree would fall to the 15-entry one's rate only at \
    0.61 ns a byte (1.6 GB/s, 13 Gb/s a client node, an eighth of the paper's 100 Gb \
    link): its irrelevant rectangles cost bytes, and bytes cost less than the round trips \
    its shallower tree saves";

/// Rectangles of the tree-size runs: the paper's 10K, 100K (quick: its two smallest, whose
/// heights, 3 and 4 levels, differ as the paper's do) and as many as the scale loads.
pub(super) fn tree_sizes(s: &Scale) -> Vec<u64> {
    match s.name {
        "quick" => vec![10_000, 100_000],
        "tiny" => vec![50, 200],
        _ => vec![10_000, 100_000, s.rects],
    }
}

/// Entries per node of the node-size runs.
pub(super) fn node_sizes(s: &Scale) -> &'static [u64] {
    if s.name == "full" {
        &[15, 30, 70, 130]
    } else {
        &[15, 130]
    }
}

/// One series per mode and tree size (`records`) or node size (`fanout`). The tree-size runs
/// keep the paper's lengths unzoomed (`--paper-objects 0`): its 10K to 10M trees lie in one
/// unit square, denser as they grow, and so do these.
fn fixed(c: &Ctx, sizes: &[(u64, usize)], by_fanout: bool) -> Vec<Series> {
    // The node-size runs READ the paper's node bytes (its 40-byte entries): what Fig. 24's
    // claim is about.
    let zoom = if by_fanout {
        format!(" --paper-entry-bytes {PAPER_ENTRY_BYTES}")
    } else {
        " --paper-objects 0".to_string()
    };
    let mut v = Vec::new();
    for (m, label) in MODES {
        for &(records, fanout) in sizes {
            let x = if by_fanout { fanout as u64 } else { records };
            v.push(Series::new(
                &format!("{label} {x}"),
                format!(
                    "{} --set server_llc_lines={}{} --tree rstar --mode {m} {POWER} \
                     --clients-per-node {} --records {records} --fanout {fanout}{zoom}",
                    c.common,
                    llc_lines(c.s.rects),
                    mode_flags(m),
                    FIXED_CLIENTS / NODES
                ),
                &["c"],
            ));
        }
    }
    v
}

/// Fig. 23.
pub(super) fn trees(c: &Ctx) -> Experiment {
    let tree_sizes = tree_sizes(c.s);
    Experiment {
        id: "catfish-tree-sizes".into(),
        title: format!(
            "Catfish: R*-trees of {} rectangles, {FIXED_CLIENTS} clients, power-law \
             scales (Fig. 23)",
            tree_sizes
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join("/")
        ),
        chart: Chart::Bars,
        series: fixed(
            c,
            &tree_sizes.iter().map(|&t| (t, 30)).collect::<Vec<_>>(),
            false,
        ),
    }
}

/// Fig. 24.
pub(super) fn nodes(c: &Ctx) -> Experiment {
    let node_sizes = node_sizes(c.s);
    Experiment {
        id: "catfish-node-sizes".into(),
        title: format!(
            "Catfish: R*-tree nodes of {} entries, {FIXED_CLIENTS} clients, power-law \
             scales (Fig. 24)",
            node_sizes
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join("/")
        ),
        chart: Chart::Bars,
        series: fixed(
            c,
            &node_sizes
                .iter()
                .map(|&f| (c.s.rects, f as usize))
                .collect::<Vec<_>>(),
            true,
        ),
    }
}

/// The rows of Figs. 23 and 24.
pub(super) fn claims(s: &Scale) -> Vec<Claim> {
    let tree_sizes = tree_sizes(s);
    vec![
        Claim::ratio(
            "tree-size-offloading",
            "RDMA offloading throughput, smallest / largest R*-tree (Fig. 23: falls as the \
             tree grows)",
            (1.01, crate::repro::report::OPEN_ENDED),
            Metric::Mops,
            false,
            p(
                "catfish-tree-sizes",
                &format!("RDMA offloading {}", tree_sizes[0]),
                "c",
            ),
            p(
                "catfish-tree-sizes",
                &format!("RDMA offloading {}", tree_sizes[tree_sizes.len() - 1]),
                "c",
            ),
            TREE_SIZE_NOTE,
        ),
        Claim::ratio(
            "tree-size-messaging",
            "fast messaging throughput, smallest / largest R*-tree (Fig. 23: stable)",
            (0.9, 1.1),
            Metric::Mops,
            false,
            p(
                "catfish-tree-sizes",
                &format!("fast messaging {}", tree_sizes[0]),
                "c",
            ),
            p(
                "catfish-tree-sizes",
                &format!("fast messaging {}", tree_sizes[tree_sizes.len() - 1]),
                "c",
            ),
            "",
        ),
        Claim::ratio(
            "node-size-offloading",
            "RDMA offloading throughput, 15-entry / 130-entry R*-tree nodes (Fig. 24: falls \
             as nodes grow)",
            (1.01, crate::repro::report::OPEN_ENDED),
            Metric::Mops,
            false,
            p("catfish-node-sizes", "RDMA offloading 15", "c"),
            p("catfish-node-sizes", "RDMA offloading 130", "c"),
            NODE_SIZE_NOTE,
        ),
        Claim::ratio(
            "node-size-messaging",
            "fast messaging throughput, 15-entry / 130-entry R*-tree nodes (Fig. 24: hardly \
             affected)",
            (0.9, 1.1),
            Metric::Mops,
            false,
            p("catfish-node-sizes", "fast messaging 15", "c"),
            p("catfish-node-sizes", "fast messaging 130", "c"),
            "",
        ),
    ]
}

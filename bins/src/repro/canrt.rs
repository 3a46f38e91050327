//! CANRT (client-active NVM radix tree): one server with persistent memory, two client
//! machines, 16 client threads; YCSB write-only / write-heavy / read-heavy / read-only;
//! CANRT vs WORT and WOART behind a server-reply ring buffer.
//!
//! The trees run on the sim (`--index canrt|wort|woart`) with a persistent memory node.
//! Range queries: one client, `--workload range` (every operation a range of exactly
//! `--scan-max` keys over twice as many keys loaded; WORT and WOART answer it one request per
//! key, as in the paper). CANRT's range trees are bulk-loaded at every scale (`--bulk-load`,
//! `bench/bulk_canrt.rs`: the tree the server's repack of the keys makes): grown the paper's
//! way by inserts, every resize repacks the whole tree, and the 200,000 keys of the
//! 100,000-key range took over 9 minutes; bulk-loaded, about a second.
//!
//! The paper prints no absolute figure (no Mops or µs in its text: Figs. 5 and 6 are plots
//! whose values it gives only as ratios), so no row puts a paper's absolute figure beside
//! remora's. Its read-latency ratio is the one figure that prices a server: the canrt
//! profile's `server_handler_ns` is derived from it, and that row checks the derivation.
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};

const NODES: usize = 2;
/// The paper's key count, which it does not state: assumed 1M (it loads at least the
/// 100,000 keys of its largest range query). The modelled cache is scaled by keys loaded /
/// this, so a quick run's tree does not sit whole in the 24 MB LLC.
const PAPER_KEYS: u64 = 1_000_000;
/// The CANRT paper's count of a write (done once its WRITE_WITH_IMM is posted): weaker than
/// remora's default, used only for the series that compare with the paper's figures.
const POSTED: &str = "CANRT (posted)";
/// CANRT's range with remora's default scan: 4 data nodes READ per doorbell (the `CANRT`
/// range series reads one per request, as the paper's).
const SCAN4: &str = "CANRT (4 nodes per doorbell)";
/// CANRT's range over a tree grown remora's default way (a full data node split in half:
/// nodes half to fully used), beside the `CANRT` series' paper geometry (`--canrt-growth
/// whole-level`: a data node per key prefix, a full node adds a level).
const SPLIT: &str = "CANRT (split growth)";

/// The paper's count of a write, named in every write row's note: the rows that compare
/// with the paper use it; remora's default (durable, linearizable) write is a semantic
/// choice whose figures stay in the experiments' `CANRT` series.
macro_rules! posted_semantics {
    () => {
        "CANRT with the paper's write (`--canrt-ack posted`: done once its WRITE_WITH_IMM is \
         posted, §3.3: 'from the perspective of clients, a remote write operation is completed \
         once the WRITE_WITH_IMM request has been successfully posted'), weaker than remora's \
         default (not linearizable; an item the server refuses is lost). remora's default \
         write, returning once the server applied and persisted the item, is a semantic \
         choice: its figures are the `CANRT` series of the same csv, not compared with the \
         paper. "
    };
}

/// The write-only rows: where the applier's time goes, and what the paper's server does.
const WRITE_ONLY_NOTE: &str = concat!(
    posted_semantics!(),
    "Measured cause: the applier, which does the paper's work per write and no more, on one \
    thread as the paper's. The paper's server runs one 'background thread' that 'will \
    process the appending messages' (§3.3): it takes each WRITE_WITH_IMM completion, flips \
    the item's bitmap bits (an update 'marks the old DataItem as invalid': it must find the \
    key's older item in the node), resets the node's lock in the same meta word and persists \
    'with clwb and mfence'; only then may another writer lock that node, so its rate bounds \
    sustained writes. remora's applier does one message, one read of the node's live keys \
    and two write-backs (the item's lines, the meta word's) per write: `cargo test --release \
    -p remora-poller --test canrt_applier -- --nocapture` counts them and prices an idle \
    applier's write at 617 ns (this row: 624 ns, server_ns_per_op in canrt-ycsb.csv, the \
    applier 99.6% busy), each charge zeroed alone: its fixed part server_canrt_apply_ns 66 \
    (the code's own time measured on this host by the same test, 60 ns, x 1.1 for the \
    paper's Xeon; the flat server_handler_ns 270, derived from WORT's read, made it 821 ns), \
    write-backs 223 (2.48 lines x nvm_write_ns 90), Optane misses 235 (the old item's \
    search), the completion poll 50, cached lines ~43: the paper's own steps at this \
    model's Optane prices. The client's side is the paper's: Algorithm 1 locks with one \
    8-byte FETCH_AND_ADD of the meta word (remora: the FETCH_AND_ADD of the lock word and an \
    8-byte READ of the meta word in one doorbell), then posts the append: 2.03 us p50 at one \
    client, 190 B a write at 16 (remora's posted write used to READ the whole 1.3 KB node \
    with its lock: 2.61 us, 1.5 KB, and 4.65 Mops with the applier's costs zeroed). With the \
    applier's three costs zeroed (`--set server_canrt_apply_ns=0 --set nvm_write_ns=0 --set \
    server_nvm_read_ns=10` on this row's command) CANRT makes 6.74 Mops, 9.6x WORT's 0.704, \
    inside the paper's 7.44-11.15x (re-measured at build 3e42979: 1.596 -> 6.739 Mops, p99 \
    164.1 -> 8.4 us, server ns per op 624 -> 103): the applier alone keeps the row off. 7.44x needs the \
    applier at ~190 ns a write or less (with the three zeroed, `--set server_poll_ns=140` \
    leaves it 209 ns a write: 4.77 Mops, 6.8x; 190, 265 ns: 3.76 Mops), under its own two \
    clwb+mfence (2 x 90 ns) and one completion poll; four applier threads (`--set \
    server_threads=4`, where the paper names one) make 5.64 Mops. WORT is charged about \
    what the paper's own write-latency ratio implies: its 1.67-1.72x at this CANRT write \
    leaves WORT 1.71-1.81 us of server time per write where remora's takes 1.42 (that \
    slower WORT would make ~0.55-0.59 Mops, and this row 2.6-2.8x). So the paper's figure \
    either had an applier under ~190 ns a write or counts posted writes its applier had not \
    applied when the run ended (no sustained run can: remora's writers never wait for \
    credits, 0.000 credit waits per op, only for a node whose last write is not yet \
    applied, 0.10 lock polls and 0.06 Wait messages per write, as the paper's lock makes \
    them). The paper prints no absolute figure to tell which; nothing is set to land the row"
);

/// The write-heavy rows: half the operations are writes through the one applier thread.
const WRITE_HEAVY_NOTE: &str = concat!(
    posted_semantics!(),
    "Measured cause as the write-only rows': half the operations are writes, which the \
     applier thread serves one at a time (317 ns of server time per operation, ~634 per \
     write, server CPU 99.7%; writes p99 94.7 us against reads' 2.6 us, bench's 'latency by \
     kind' on this row's command: writers waiting for a node's last write to be applied), while CANRT's reads are one-sided READs the server never \
     sees; the row falls between the write-only row (applier bound) and the read-only one \
     (link bound). With the applier's three costs zeroed (`--set server_canrt_apply_ns=0 \
     --set nvm_write_ns=0 --set server_nvm_read_ns=10` on this row's command) CANRT makes \
     6.77 Mops (writes p99 6.5 us): 8.2x WORT's 0.828 and 7.1x WOART's 0.952, inside the \
     paper's range"
);

/// The 2-to-16-thread scaling row.
const SCALING_NOTE: &str = "measured cause: the applier thread. At 2 clients a posted write \
    is one round trip (the lock FETCH_AND_ADD with the meta word's 8-byte READ) and its \
    doorbell, and the applier is 27% busy (server_use in canrt-clients.csv); 45% at 4 \
    clients, 85% at 8 and saturated at 16 (99.7%), so the curve stops at 1 / (its ~634 ns \
    per write x the write share 0.5): bench's 'latency by kind' on the two runs gives writes \
    p99 2.2 us at 2 clients and 94.7 us at 16 (writers waiting for a node whose last write \
    the applier has not applied: 0.000 and 0.049 lock polls, 0.000 and 0.030 Wait messages \
    per op), reads p99 2.5 and 2.6 us. The paper's 10.88x is more than the 8x that 16 \
    synchronous threads can gain over 2 at the same latency per operation (§4.5 calls it \
    'almost proportional'); with the applier's three costs zeroed (`--set \
    server_canrt_apply_ns=0 --set nvm_write_ns=0 --set server_nvm_read_ns=10` on this row's \
    two runs) remora gains 7.47x (0.907 -> 6.772 Mops, writes p99 6.5 us at 16; measured at \
    build 3e42979), the synchronous clients' own bound less their waits on zipfian-hot \
    nodes. A fix that would move the row: an applier under ~190 ns a write (predicted, at \
    most the zeroed runs' 7.47x: 0.69 of the paper's, faithful), which the paper's Optane steps \
    (two clwb+mfence) do not allow at this model's prices";

/// The 10,000-key range row.
const RANGE_NOTE: &str = "CANRT reads one data node per round trip, one after another \
    (`--canrt-scan-batch 1`, the paper's range: 'we integrate consecutive requests for the same \
    data node into one request', §4.4; remora's default overlaps 4 nodes per doorbell). \
    WORT's range is the paper's too ('calling a remote read request for each key', §4.4): \
    one request per key. The ratio is about the keys each node READ returns times the \
    read-latency ratio (1.2x): the paper's 3.1x means ~2.6 keys per request. CANRT's tree \
    here grows the paper's way (`--canrt-growth whole-level`: a data node per key prefix, \
    §3.1; a full node adds a level, addHeight, and a node's worth of keys with no prefix of \
    their own, the paper's last data node, adds characters, addWidth, §3.5), no node size \
    tuned: 32 slots, bulk-loaded (`--bulk-load`: the tree the server's repack of the keys \
    makes; grown by inserts, 1,727.0 node READs per range where this one reads 1,730.4). \
    The 20,000 random 62-character keys loaded take two levels (3,844 prefixes, 5.2 keys \
    each): 5.8 keys per node READ. Grown remora's default way (the `CANRT (split growth)` \
    series, bulk-loaded: nodes half full, the rebuild's packing), ~14.5 keys per READ, \
    14.4x (grown by inserts, nodes half to fully used: ~17.6 keys, 16.6x). The paper gives neither its key count nor its alphabet: had the tree held \
    only the 10,000 keys queried, 62 characters would give 2.6 keys per prefix, its figure";

/// The 100,000-key range row (figures from `remora repro canrt --scale quick`, the
/// canrt-range-100k csv).
const RANGE_100K_NOTE: &str = "as the 10,000-key row (one data node per request, the paper's \
    geometry, WORT one request per key), over 200,000 random 62-character keys, bulk-loaded \
    (the tree the server's repack makes, `bench/bulk_canrt.rs`; at 20,000 keys it reads \
    1,730.4 nodes per range where the insert-grown tree reads 1,727.0). At 200,000 keys the \
    paper's rule, no data node over one slot short of full, takes three levels (62^3 = \
    238,328 prefixes, 138,291 of them used): 1.45 keys per data node (54,563 node READs \
    for WORT's 78,936 requests per range, the ranges that start near the end being \
    shorter), so each READ returns fewer keys than at 10,000 and the ratio falls (1.92x), \
    where the paper's rises (3.1x to 3.7-3.83x). The scan itself is linear in the range: \
    over this 200,000-key tree a 10,000-key range (this row's commands with `--scan-max \
    10000`) reads 6,891.4 nodes, 1.41 us per key as the 100,000-key range does, and WORT \
    takes 2.70 us per key (2.72 here): 1.92x at both lengths. The two rows differ by their \
    trees (twice the range: 5.3 keys per node READ at 20,000 keys, 1.45 at 200,000), not \
    by the scan. Grown remora's default way (`CANRT \
    (split growth)`: nodes half full after a bulk load) a READ returns ~13.8 keys: 14.6x. \
    At --scale quick WOART and CANRT's 4-node scan are left out of this experiment (their \
    time, not the row's). The paper gives neither its key count nor its \
    alphabet: its ratio means ~3.1 keys per request";

pub fn paper(s: &Scale) -> Paper {
    // The paper's clients are synchronous threads: one operation in flight each.
    let sim = s.sim_flags("canrt", PAPER_KEYS);
    let base = format!(
        "{sim} --persistent --compute-nodes {NODES} --memory-nodes 1 --keys string \
         --value-size 15 --coroutines 1"
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
    // The trees, and CANRT with the paper's write (`--canrt-ack posted`) on `posted_wl`.
    let with_posted = |flags: &str, wl: &[&'static str], posted_wl: &[&'static str]| {
        let mut v = trees(flags, wl);
        v.insert(
            1,
            Series::new(
                POSTED,
                format!("{flags} --index canrt --canrt-ack posted"),
                posted_wl,
            ),
        );
        v
    };
    // Range queries of `scan` keys over `2 * scan` loaded keys, one client, a few queries.
    let range = |scan: u64| {
        let flags = format!(
            "--fabric sim --profile canrt --set server_llc_lines={} --persistent --records {} \
             --operations 5 --compute-nodes 1 \
             --memory-nodes 1 --clients-per-node 1 --coroutines 1 --keys string --value-size 15 \
             --scan-max {scan}",
            Scale {
                records: 2 * scan,
                ..s.clone()
            }
            .llc_lines("canrt", PAPER_KEYS),
            2 * scan
        );
        // The paper's geometry (whole-level growth), bulk-loaded (`--bulk-load`: grown by
        // inserts, 200,000 keys rebuild the whole tree thousands of times, a load ran over 9
        // minutes without finishing). At 200,000 keys its data array (138,291 nodes of 32
        // slots, twice that capacity) needs a region of 512 MiB.
        let canrt = if scan <= 10_000 {
            "--index canrt --bulk-load"
        } else {
            "--index canrt --bulk-load --region-mib 512"
        };
        let growth = " --canrt-growth whole-level";
        let lean = s.name == "quick" && scan > 10_000;
        Experiment {
            id: format!("canrt-range-{}k", scan / 1000),
            title: format!("CANRT vs WORT vs WOART: range queries of {scan} keys, one client"),
            chart: Chart::Bars,
            series: {
                // CANRT's range as the paper's: its tree's geometry (a data node per key
                // prefix, grown a whole level at a time, §3.1-3.5) and one data node per
                // request (§4.4); remora's default scan (4 nodes per doorbell) and default
                // growth (split in half) beside it.
                let mut v = trees(&flags, &["range"]);
                v[0] = Series::new(
                    "CANRT",
                    format!("{flags} {canrt} --canrt-scan-batch 1{growth}"),
                    &["range"],
                );
                v.insert(
                    1,
                    Series::new(
                        SCAN4,
                        format!("{flags} {canrt} --canrt-scan-batch 4{growth}"),
                        &["range"],
                    ),
                );
                v.insert(
                    2,
                    Series::new(
                        SPLIT,
                        format!("{flags} {canrt} --canrt-scan-batch 1"),
                        &["range"],
                    ),
                );
                if lean {
                    // Quick: only what the row compares (CANRT, WORT) and the split-growth
                    // CANRT beside it; WOART's 100,000 requests per range and CANRT's
                    // overlapped scan run at full scale.
                    v.retain(|x| x.label != SCAN4 && x.label != "WOART");
                }
                v
            },
        }
    };
    let one = format!(
        "{sim} --persistent --compute-nodes 1 --memory-nodes 1 --clients-per-node 1 \
         --coroutines 1 --value-size 15"
    );
    let experiments = vec![
        Experiment {
            id: "canrt-ycsb".into(),
            title: "CANRT vs WORT vs WOART: YCSB at 16 synchronous client threads".into(),
            chart: Chart::Bars,
            series: with_posted(
                &format!("{base} --clients-per-node 8"),
                &["update-only", "a", "b", "c"],
                &["update-only", "a"],
            ),
        },
        Experiment {
            id: "canrt-clients".into(),
            title: "CANRT vs WORT vs WOART: scalability, write-heavy and read-heavy".into(),
            chart: Chart::Curve,
            series: with_posted(
                &format!("{base} --sweep clients={}", sweep.join(",")),
                &["a", "b"],
                &["a"],
            ),
        },
        Experiment {
            id: "canrt-latency".into(),
            title: "CANRT vs WORT vs WOART: latency, one client, random string keys".into(),
            chart: Chart::Bars,
            series: with_posted(
                &format!("{one} --keys string"),
                &["update-only", "c", "load"],
                &["update-only", "load"],
            ),
        },
        Experiment {
            id: "canrt-seq".into(),
            title: "CANRT vs WORT vs WOART: latency, one client, sequential keys (Fig. 5)".into(),
            chart: Chart::Bars,
            series: with_posted(&format!("{one} --keys seq"), &["load", "c"], &["load"]),
        },
        range(10_000),
        range(100_000),
    ];
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
                    "CANRT (paper's write: done when posted) / WORT throughput, YCSB write-only \
                     (paper: up to, write-intensive)"
                } else {
                    "CANRT (paper's write: done when posted) / WOART throughput, YCSB write-only"
                },
                (7.44, 11.15),
                Metric::Mops,
                false,
                p(POSTED, "UPD"),
                p(base_tree, "UPD"),
                WRITE_ONLY_NOTE,
            ),
            Claim::ratio(
                if base_tree == "WORT" {
                    "write-heavy-wort"
                } else {
                    "write-heavy-woart"
                },
                if base_tree == "WORT" {
                    "CANRT (paper's write) / WORT throughput, YCSB write-heavy (A)"
                } else {
                    "CANRT (paper's write) / WOART throughput, YCSB write-heavy (A)"
                },
                (7.44, 11.15),
                Metric::Mops,
                false,
                p(POSTED, "a"),
                p(base_tree, "a"),
                WRITE_HEAVY_NOTE,
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
            "scaling-2-16",
            "CANRT (paper's write) throughput gain from 2 to 16 client threads, YCSB-A",
            (10.88, 10.88),
            Metric::Mops,
            false,
            Pick::at("canrt-clients", POSTED, "a", 16),
            Pick::at("canrt-clients", POSTED, "a", 2),
            SCALING_NOTE,
        ),
        Claim::ratio(
            "seq-write-latency",
            "CANRT (paper's write) insert latency, random / sequential keys (paper: 7.94% \
             slower sequential)",
            (0.926, 0.926),
            Metric::P50,
            false,
            Pick::new("canrt-seq", POSTED, "LOAD"),
            Pick::new("canrt-latency", POSTED, "LOAD"),
            "sequential keys are 8-byte integers in order (`--keys seq`), random ones 16-byte \
             strings; one client, the LOAD phase's inserts. The paper's cause, data-node \
             conflicts, is remora's too, larger: each sequential insert goes to the node the \
             previous one appended to, and its FETCH_AND_ADD lands (a doorbell and a one-way \
             trip after that append) before the applier (~1.8 us per insert, splits \
             included: server_ns_per_op in canrt-seq.csv) has released the lock, so the \
             lock's 8-byte fetch finds it held and the insert reads the node to wait its \
             turn (2.29 RT/op and 1,322 B per insert sequential, against 1.03 and 60 B \
             random). Splits add to it: the rightmost node fills every slots/2 inserts (6% \
             of inserts resize, 0.2% random). They grow with the tree: each split rewrites the \
             prefix array (sized by the data nodes) and every client reloads it, and the \
             lower half a split leaves behind never fills again. One client, posted, 100,000 keys (`--records 100000 --set \
             server_llc_lines=39322` on this row's commands): sequential p50 4.6 us, server \
             4.7 us and 3.2 KB READ per insert, 6.25% of inserts resize (random: 2.0 us, 1.6 \
             us, 114 B, 0.03%)",
        ),
        Claim::ratio(
            "seq-read-latency",
            "CANRT read latency, random / sequential keys (paper: almost no difference)",
            (0.9, 1.1),
            Metric::P50,
            false,
            Pick::new("canrt-seq", "CANRT", "c"),
            Pick::new("canrt-latency", "CANRT", "c"),
            "",
        ),
        Claim::ratio(
            "write-latency",
            "WORT / CANRT (paper's write) write latency (p50, one client, random string keys)",
            (1.67, 1.72),
            Metric::P50,
            false,
            Pick::new("canrt-latency", POSTED, "UPD"),
            Pick::new("canrt-latency", "WORT", "UPD"),
            concat!(
                posted_semantics!(),
                "The paper's count: the write returns once its WRITE_WITH_IMM is posted \
                 (unsignaled, the canrt profile's unsignaled_at_post): one round trip \
                 (Algorithm 1's 8-byte lock fetch: the FETCH_AND_ADD with an 8-byte READ of \
                 the meta word, no node READ) and the append's doorbell, the paper's 'about \
                 1.5' counting the WRITE as a half (§4.2). remora's default write is 2 \
                 round trips (the lock, then the append with its flush READ) and the applier's \
                 acknowledgement (p50 in the CANRT series, ~2.4x this one). WORT's side: its \
                 server takes 1.42 us per write (server_ns_per_op in canrt-latency.csv: poll + \
                 handler 320, reply 100, two flushes of 2.75 lines ~250, its radix path's 11 \
                 lines ~750 with 2.4 Optane misses: every flush is the authors' clflush, \
                 which evicts what it writes back, 1.7 misses before), where the \
                 paper's ratio at this CANRT write would need 1.71-1.81 us; the paper names the \
                 parts ('request polling, key locating, data persistence, and posting reply \
                 message', §4.2) but not their times"
            ),
        ),
        Claim::ratio(
            "read-latency",
            "WORT / CANRT read latency (p50, one client, random string keys)",
            (1.19, 1.22),
            Metric::P50,
            false,
            Pick::new("canrt-latency", "CANRT", "c"),
            Pick::new("canrt-latency", "WORT", "c"),
            "a check of the canrt profile's server_handler_ns, not a confirmation: that \
             charge is derived from this ratio (1.19-1.22x leaves WORT's server 270-340 ns of \
             handler time per read over its memory and reply; 270 is kept, the low end)",
        ),
        Claim::ratio(
            "range-10k",
            "WORT / CANRT range query latency, 10,000 keys",
            (3.1, 3.1),
            Metric::Mean,
            false,
            Pick::new("canrt-range-10k", "CANRT", "RANGE"),
            Pick::new("canrt-range-10k", "WORT", "RANGE"),
            RANGE_NOTE,
        ),
        Claim::ratio(
            "range-100k",
            "WORT / CANRT range query latency, 100,000 keys",
            (3.7, 3.83),
            Metric::Mean,
            false,
            Pick::new("canrt-range-100k", "CANRT", "RANGE"),
            Pick::new("canrt-range-100k", "WORT", "RANGE"),
            RANGE_100K_NOTE,
        ),
    ]);
    Paper {
        key: "canrt",
        name: "CANRT",
        paper_setup: "3 machines with Optane DC PM (AppDirect), ConnectX-5: 1 server, 2 client \
                      machines, 16 client threads; 16-byte keys, 15-byte values; YCSB \
                      write-only / write-heavy / read-heavy / read-only",
        paper_keys: None,
        setup: format!(
            "sim, profile canrt (ConnectX-5, Optane DC PMM, 24 MB LLC, one server thread; \
             `remora perf --fabric sim --profile canrt --show-model`), LLC scaled to {} lines \
             ({} keys of an assumed 1M: the paper gives no count), persistent memory node; \
             {NODES} compute nodes x 8 synchronous client threads (curves: {} clients), 1 \
             memory node running the tree's server (CANRT's applier, or WORT/WOART behind \
             request rings); random 16-byte string keys (sequential: 8-byte integers in \
             order), 15-byte values (the paper's), {} measured ops after {} warm-up ops; \
             latency: one client of one coroutine; zipfian 0.99, seed 1. CANRT (posted): the \
             paper's write, locking with 8-byte words as Algorithm 1 (no node READ) and \
             returning once its WRITE_WITH_IMM is posted (`--canrt-ack \
             posted`, not linearizable; unsignaled, the profile's unsignaled_at_post; \
             flow-controlled by credits against the server's receives); CANRT: remora's \
             default, returning once the server applied and persisted it (the write rows compare the posted write; the default's figures \
             are shown, not compared). Range: CANRT reads one data node per request, one \
             after another, as the paper's (`--canrt-scan-batch 1`); {SCAN4}: remora's \
             default scan; CANRT's range trees grow the paper's way (`--canrt-growth \
             whole-level`: a data node per key prefix, a full node adds a level), \
             bulk-loaded at every scale (`--bulk-load`: the server's repack of the keys); \
             {SPLIT}: remora's default growth, full nodes split in half (shown, not \
             compared)",
            s.llc_lines("canrt", PAPER_KEYS),
            s.records,
            sweep.join("/"),
            s.ops,
            s.warmup
        ),
        experiments,
        claims,
    }
}

//! Erda (zero-copy log-structured remote NVM): one server with persistent memory, clients
//! on other machines; YCSB-C/B/A and update-only: throughput vs threads (Figs. 18-21),
//! latency and server CPU vs value size (Figs. 14-17, 22-25), latency during log cleaning
//! (Fig. 26) and NVM bytes per write (Table 1); Erda vs Redo Logging and Read-After-Write.
//!
//! Every row is measured on the sim (`--index erda|erda-redo|erda-raw`, `--persistent`
//! memory node) in the paper's hardware profile (`--profile erda`: ConnectX-3 40 Gb, 8
//! server cores, DRAM + 150 ns NVM writes, one request thread and one background thread:
//! the profile's source says why) and synchronous clients (one operation outstanding each, `--coroutines 1`), as the paper's.
//! The write-heavy latency rows (`erda-paced`), the update-only throughput rows
//! (`erda-paced-clients`, `erda-server-threads`) and the cleaning rows also pace the
//! writers as the paper's released clients do (500 µs before each write, [`PACED`]); the
//! server-CPU rows (`erda-cpu`) pace reads too, as those clients do ([`CPU_PACE_BASELINE`]).
use super::{Chart, Claim, Experiment, Metric, Paper, Pick, Scale, Series};
mod cpu;
mod sizing;
use cpu::{CPU_A_RAW, CPU_B, CPU_UPD_RAW, CPU_UPD_REDO};
use sizing::{SIZED, VALUES_RUN_BYTES, records_at, sized_flags, sized_flags_on};

const NODES: usize = 2;
/// The value size of the latency, CPU, cleaning and Table 1 rows: the paper's Fig. 25 and
/// Fig. 26 size (its latency figures are averages over 16 B to 4 KiB).
const VALUE: usize = 1024;
/// seeds/004 §5.3: average throughputs over its thread counts (Figs. 18-20), KOp/s.
const THREADS_SRC: &str = "seeds/004 §5.3, Figs. 18-20: averages over its thread counts";
/// seeds/004 §5.2: average latencies over value sizes 16 B-4 KiB (Figs. 14-17), µs.
const LATENCY_SRC: &str = "seeds/004 §5.2, Figs. 14-17: averages over 16 B-4 KiB values";
/// Table 1's N (key + value bytes) at `VALUE` with 8-byte keys.
const N: f64 = (8 + VALUE) as f64;
/// The write-heavy latency rows (YCSB-A, update-only: `erda-paced`) and the cleaning rows
/// pace their writers as the paper's released clients of all three systems do:
/// `usleep(500)` before every write (csXinxinLiu/Erda: `Erda/client/client_tput.c`,
/// `client_latency.c` and `client_logclean.c`, `Redo Logging/Client_tput.c` and
/// `Client_latency.c`, and Read After Write's). The paper's latency is (wall time - the
/// sleeps) / operations over those runs (Figs. 14-17), so its server was lightly loaded by
/// writes; 16 closed-loop sim writers instead keep the request thread 100 % busy, and the
/// baselines' write latencies are mostly queueing behind their server work (RAW 1 KiB
/// update-only: 25.9 µs, 2.5x Erda's; Redo YCSB-A 30.5 µs, 5.2x). The released clients pace reads differently per system (Redo and RAW:
/// `usleep(100)` before each read; Erda: none, and `usleep(2)`-`usleep(3)` between its two
/// READs, which the paper's figures include), so the read-dominated rows keep closed-loop
/// clients; measured with paced writers, YCSB-B's server is lightly loaded and a baseline's
/// one-round-trip read beats Erda's two dependent READs (Redo/Erda 1 KiB YCSB-B 0.84x).
/// The think time is outside each operation's measured latency.
const PACED: &str = "--think-write-us 500";
/// Seeds of the YCSB-B server-CPU runs (rows b-cpu-redo and b-cpu-raw-values): each row is
/// the median of its ratio at seeds 1..=CPU_B_SEEDS. Their one paced client's seeded
/// think-time slack ([`CPU_PACE_BASELINE`]) sets how many of the server's wakes a read
/// pays: measured at quick scale (`remora repro erda --scale quick --seeds 5`), 18.8-22.2x
/// (Redo / Erda, 64 B) and 19.1-22.5x (RAW / Erda, 1 KiB), a spread of 18% (all faithful
/// against the paper's 20.09x and 20.81x), where every other row of the paper moves by
/// under 4% over seeds 1-5 and runs once.
const CPU_B_SEEDS: u64 = 5;
/// The server-CPU rows (`erda-cpu`) pace every client as the paper's released clients pace
/// theirs, reads too, per system (csXinxinLiu/Erda: Redo Logging's and Read After Write's
/// `Client_tput.c` sleep `usleep(100)` before each get and `usleep(500)` before each put;
/// Erda's `client_tput.c` only before each put), so that each server is as lightly loaded
/// as the paper's was when `top` measured it (§5.4), and a server that blocks between
/// requests (`server_wake_ns`, `server_wake_cpu_ns`) pays its wakes. Each sleep lasts up to
/// 50 µs more, seeded (`--think-slack-us`): a usleep's overshoot within Linux's default
/// timer slack, without which 16 clients with equal think times wake in step and reach
/// the server in one burst.
const CPU_PACE_BASELINE: &str = "--think-write-us 500 --think-read-us 100 --think-slack-us 50";
/// [`CPU_PACE_BASELINE`] for Erda's clients: no sleep before a read.
const CPU_PACE_ERDA: &str = "--think-write-us 500 --think-slack-us 50";
/// The server-CPU rows' clients (on one compute node): one thread, as the paper's
/// value-size runs (Figs. 14-17 and 22-25 vary the value size, not the threads; §5.4 states
/// no thread count). The authors' README names `client.c` / `Client.c` the normal case, and
/// those and the latency clients (`client_latency.c`, `Client_latency.c`, in all three
/// systems) run the workload on one thread (`on_connection` calls `load_workloads` then
/// `run_workloads`), against a server that serves one connection (`server.c`; multiple
/// clients need `server_multiconnection.c`); only the throughput clients (`*_tput.c`) start
/// more threads. The paper's valuesize is a compile-time `#define` in the same `DS.h`.
/// At 16 threads the baselines' reads (one per ~125 µs per thread) often found the server
/// still awake from the request before and paid no wake: Redo / Erda YCSB-B 11.5x.
const CPU_CLIENTS: &str = "--clients-per-node 1";
/// The note of the update-only throughput rows (erda-paced-clients).
const PACED_TPUT: &str = "writers wait 500 µs before each write as the paper's released \
     clients do (`PACED`): a paced client does one write per 500 µs + its latency whatever the \
     system, so the three throughputs are approximately equal, as Fig. 21's; closed loop \
     (erda-ycsb, erda-clients tables) the request thread is the bound instead: Erda's server \
     costs ~0.6 µs per 64-byte update, Redo's request path ~0.8 µs of its ~1.2 µs (the \
     apply on the background thread), RAW's ~0.4 µs of its ~0.8 µs";
/// The note of the Redo / Erda YCSB-A latency row (erda-paced): why it stays off.
const A_LATENCY: &str = "measured with writers paced as the paper's (erda-paced table): \
     Erda 8.0 µs at 2.00 round trips per op, Redo 10.6 µs at 1.00, the server lightly \
     loaded, so its request thread has gone to sleep before most requests: the profile's \
     `server_wake_ns` (3 µs, the Westmere core's C1 exit; the authors' servers block in \
     ibv_get_cq_event) and the wake's CPU before the service (`server_wake_cpu_ns`, 4.4 µs) \
     delay every Redo operation and only Erda's writes (without both, `--set \
     server_wake_ns=0 --set server_wake_cpu_ns=0`: p50 Erda 5.0, Redo 5.6 µs). remora's figures are \
     completion times, ~13x below the paper's: its released latency clients \
     (Redo Logging/Client_latency.c, Erda/client/client_latency.c) post each put and get \
     without waiting for it (another thread reaps the completions) and report (wall time - \
     the nominal usleep time) / operations, so each figure is the usleeps' overshoot past \
     their nominal time (at least Linux's 50 µs default timer slack) plus the posts: Redo \
     sleeps before every operation (500 µs before a write, 100 µs before a read), Erda before \
     writes only (and usleep(2) inside a read, not subtracted); remora models no sleep \
     overshoot";
/// The note of the Redo / Erda update-only latency row (erda-paced).
const PACED_UPD_LATENCY: &str = "writers wait 500 µs before each write as the paper's \
     released clients do (closed loop at 64 bytes, erda-ycsb table: queueing behind Redo's \
     request thread, 100 % busy); Redo's 1 KiB write is one round trip plus 3.3 µs of \
     request-path server work (the record persisted, 17 lines at 150 ns), Erda's two round \
     trips plus 0.6 µs, and a paced write finds either server asleep (server_wake_ns), so \
     the two land within a few percent, as the paper's 1.02x. The ratio follows the value \
     size (erda-paced-clients table, paced at 64 bytes: Erda's second round trip is not \
     paid for by a smaller persist), where the paper's figures are flat (~100 µs): they are \
     the usleep(500) overshoot of its latency clients (see the YCSB-A latency row), not the \
     writes' completion times";

pub fn paper(s: &Scale) -> Paper {
    let base = sized_flags(s);
    // The authors' throughput clients run at most 16 threads (`pthread_t t[16]` and 16
    // run_workloads functions in Erda/client/client_tput.c; Redo Logging's and Read After
    // Write's Client_tput.c the same, 2 of them left uncommented): the sweep stops there. At
    // 32 (the full sweep's last point before) Erda's one-sided reads scale on with the NIC
    // while Redo's request thread has bound since 8, so "at the most client threads" read
    // 4.15x where the paper's ratio of averages is 1.50x.
    let threads: &[usize] = if s.name == "quick" {
        &[4, 16]
    } else {
        &[2, 4, 8, 16]
    };
    let sizes: &[usize] = if s.name == "quick" {
        &[16, VALUE]
    } else {
        &[16, 64, 256, VALUE, 4096]
    };
    let sweep: Vec<String> = threads.iter().map(|t| t.to_string()).collect();
    const SYSTEMS: [(&str, &str); 3] = [
        ("Erda", "erda"),
        ("Redo Logging", "erda-redo"),
        ("Read-After-Write", "erda-raw"),
    ];
    // Erda and the paper's two baselines, on the same hash table and server contract.
    let three = |flags: &str, wl: &[&'static str]| {
        SYSTEMS
            .iter()
            .map(|(label, idx)| Series::new(label, format!("{flags} --index {idx}"), wl))
            .collect::<Vec<_>>()
    };
    let all = ["c", "b", "a", "update-only"];
    let at16 = format!("{base} {SIZED}");
    let paced = format!("{at16} {PACED}");
    let mut by_size = Vec::new();
    let mut size_keys = Vec::new();
    for &v in sizes {
        let keys = records_at(s, v);
        size_keys.push(format!("{keys} at {v} B"));
        let mut sv = s.clone();
        sv.records = keys;
        for (label, idx) in SYSTEMS {
            by_size.push(Series::new(
                &format!("{label} {v} B"),
                format!(
                    "{} {SIZED} --value-size {v} --index {idx}",
                    sized_flags(&sv)
                ),
                &all,
            ));
        }
    }
    // Cleaning at the paper's 1 KiB values (Fig. 26).
    // The authors' log-cleaning client paces its writes as their others do (`usleep(500)`
    // before every UPDATE/INSERT, Erda/client/client_logclean.c); reads stay closed-loop.
    let at_clean = format!("{paced} --value-size {VALUE} --index erda");
    // The sensitivity of Erda / Redo Logging to the server's threads: the paper does not
    // say how many it ran; the profile's 1 comes from its §5.3 and its released server's
    // one completion-queue thread (poller/src/sim/profiles.rs). Writers are paced as the
    // paper's (`PACED`): this changes the update-only runs only (YCSB-C has no write to
    // pace).
    let mut by_server = Vec::new();
    for t in [1, 2, 4, 8] {
        for (label, idx) in &SYSTEMS[..2] {
            by_server.push(Series::new(
                &format!("{label}, {t} server threads"),
                format!("{paced} --value-size 64 --set server_threads={t} --index {idx}"),
                &["c", "update-only"],
            ));
        }
    }
    // The write-heavy latency rows with writers paced as the paper's (`PACED`).
    let paced_series = SYSTEMS
        .iter()
        .map(|(label, idx)| {
            Series::new(
                label,
                format!("{paced} --value-size {VALUE} --index {idx}"),
                &["a", "update-only"],
            )
        })
        .collect::<Vec<_>>();
    // Update-only throughput vs client threads with writers paced as the paper's (Fig. 21):
    // every operation of the workload is a write, so the authors' clients sleep before each
    // one (`PACED`), at the value size of their released code (`valuesize 64`, Redo
    // Logging/DS_s.h).
    let paced_clients = SYSTEMS
        .iter()
        .map(|(label, idx)| {
            Series::new(
                label,
                format!(
                    "{base} --value-size 64 {PACED} --sweep clients={} --index {idx}",
                    sweep.join(",")
                ),
                &["update-only"],
            )
        })
        .collect::<Vec<_>>();
    let table1 = format!("{base} --clients-per-node 1 --value-size {VALUE}");
    // Server CPU per op, one client thread paced as the paper's (`CPU_PACE_BASELINE`,
    // `CPU_CLIENTS`), at 64 B (the erda-ycsb rows' size) and at the paper's 1 KiB (Fig. 25).
    let mut cpu_series = Vec::new();
    for (v, systems) in [(64, &SYSTEMS[..2]), (VALUE, &SYSTEMS[..])] {
        let mut sv = s.clone();
        sv.records = records_at(s, v);
        for (label, idx) in systems {
            let pace = if *idx == "erda" {
                CPU_PACE_ERDA
            } else {
                CPU_PACE_BASELINE
            };
            cpu_series.push(Series::new(
                &format!("{label} {v} B"),
                format!(
                    "{} {CPU_CLIENTS} --value-size {v} {pace} --index {idx}",
                    sized_flags_on(&sv, 1)
                ),
                &["b", "a", "update-only"],
            ));
        }
    }
    // The YCSB-B runs of the systems the b-cpu rows compare, over seeds (`CPU_B_SEEDS`).
    let cpu_series = super::seeded_workload(
        cpu_series,
        &[
            "Erda 64 B",
            "Redo Logging 64 B",
            &format!("Erda {VALUE} B"),
            &format!("Read-After-Write {VALUE} B"),
        ],
        "b",
        CPU_B_SEEDS,
    );
    let experiments = vec![
        Experiment {
            id: "erda-ycsb".into(),
            title: "Erda vs Redo Logging vs Read-After-Write: YCSB at 16 client threads, \
                    64-byte values"
                .into(),
            chart: Chart::Bars,
            series: three(&format!("{at16} --value-size 64"), &all),
        },
        Experiment {
            id: "erda-clients".into(),
            title: "Erda vs Redo Logging vs Read-After-Write: throughput vs client threads \
                    (Figs. 18-21)"
                .into(),
            chart: Chart::Curve,
            series: three(
                &format!("{base} --value-size 64 --sweep clients={}", sweep.join(",")),
                &all,
            ),
        },
        Experiment {
            id: "erda-values".into(),
            title: "Erda vs Redo Logging vs Read-After-Write: latency and server CPU vs value \
                    size, 16 client threads (Figs. 14-17, 22-25)"
                .into(),
            chart: Chart::Bars,
            series: by_size,
        },
        Experiment {
            id: "erda-paced".into(),
            title: format!(
                "Erda vs Redo Logging vs Read-After-Write: latency of the write-heavy \
                 workloads with writers paced as the paper's (usleep(500) before each write), \
                 16 client threads, {VALUE}-byte values (Figs. 16, 17)"
            ),
            chart: Chart::Bars,
            series: paced_series,
        },
        Experiment {
            id: "erda-paced-clients".into(),
            title: "Erda vs Redo Logging vs Read-After-Write: update-only throughput vs client \
                    threads, writers paced as the paper's (usleep(500) before each write), \
                    64-byte values (Fig. 21)"
                .into(),
            chart: Chart::Curve,
            series: paced_clients,
        },
        Experiment {
            id: "erda-cleaning".into(),
            title: format!(
                "Erda: latency during log cleaning vs without, {VALUE}-byte values, writers \
                 paced as the paper's (Fig. 26)"
            ),
            chart: Chart::Bars,
            series: vec![
                Series::new("Erda", at_clean.clone(), &all),
                Series::new(
                    "Erda (log cleaning)",
                    format!("{at_clean} --erda-clean"),
                    &all,
                ),
            ],
        },
        Experiment {
            id: "erda-table1".into(),
            title: format!(
                "Erda's Table 1: NVM bytes per create (LOAD) and update, {VALUE}-byte values"
            ),
            chart: Chart::Bars,
            series: three(&table1, &["load", "update-only"]),
        },
        Experiment {
            id: "erda-cpu".into(),
            title: "Erda vs Redo Logging vs Read-After-Write: server CPU per op with one \
                    client thread paced as the paper's (usleep(500) before each write; the \
                    baselines' usleep(100) before each read), 64 B and 1 KiB values (Figs. \
                    22-25)"
                .into(),
            chart: Chart::Bars,
            series: cpu_series,
        },
        Experiment {
            id: "erda-server-threads".into(),
            title: "Erda vs Redo Logging vs the server's threads (the paper does not say how \
                    many): YCSB-C and update-only (writers paced as the paper's), 16 client \
                    threads, 64-byte values"
                .into(),
            chart: Chart::Bars,
            series: by_server,
        },
    ];
    let p = |s: &str, w| Pick::new("erda-ycsb", s, w);
    let v = |s: &str, w| Pick::new("erda-values", s, w);
    let cpu = |s: &str, w| Pick::new("erda-cpu", s, w);
    let (erda, redo, raw) = ("Erda", "Redo Logging", "Read-After-Write");
    let (erda_v, redo_v, raw_v) = (
        &format!("Erda {VALUE} B"),
        &format!("Redo Logging {VALUE} B"),
        &format!("Read-After-Write {VALUE} B"),
    );
    let kops = |k: f64| Some(k / 1e3);
    let mut claims = vec![
        Claim::ratio(
            "c-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-C (96.35 / 62.93 KOp/s)",
            (1.53, 1.53),
            Metric::Mops,
            false,
            p(erda, "c"),
            p(redo, "c"),
            "remora's absolute figures are ~37x the paper's: the paper's clients sleep inside \
             every operation (Erda's released client_tput.c: usleep(3) between a get's two \
             READs, usleep(500) before each put; Redo's: usleep(100) before each get), and \
             a Linux usleep lasts at least the 50 µs default timer slack (prctl(2), \
             PR_SET_TIMERSLACK), so a paper client does at most ~20 KOp/s of reads whatever \
             the system; remora's synchronous clients do not sleep",
        )
        .figures(kops(96.35), kops(62.93), THREADS_SRC),
        Claim::ratio(
            "c-throughput-raw",
            "Erda / Read-After-Write throughput, YCSB-C (96.35 / 63.28 KOp/s)",
            (1.52, 1.52),
            Metric::Mops,
            false,
            p(erda, "c"),
            p(raw, "c"),
            "",
        )
        .figures(kops(96.35), kops(63.28), THREADS_SRC),
        Claim::ratio(
            "b-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-B (92.57 / 61.78 KOp/s)",
            (1.50, 1.50),
            Metric::Mops,
            false,
            p(erda, "b"),
            p(redo, "b"),
            "",
        )
        .figures(kops(92.57), kops(61.78), THREADS_SRC),
        Claim::ratio(
            "b-throughput-raw",
            "Erda / Read-After-Write throughput, YCSB-B (92.57 / 62.57 KOp/s)",
            (1.48, 1.48),
            Metric::Mops,
            false,
            p(erda, "b"),
            p(raw, "b"),
            "",
        )
        .figures(kops(92.57), kops(62.57), "seeds/004 §5.3, Fig. 19"),
        Claim::ratio(
            "a-throughput-redo",
            "Erda / Redo Logging throughput, YCSB-A (79.77 / 57.60 KOp/s)",
            (1.38, 1.38),
            Metric::Mops,
            false,
            p(erda, "a"),
            p(redo, "a"),
            "",
        )
        .figures(kops(79.77), kops(57.60), THREADS_SRC),
        Claim::ratio(
            "a-throughput-raw",
            "Erda / Read-After-Write throughput, YCSB-A (79.77 / 58.32 KOp/s)",
            (1.37, 1.37),
            Metric::Mops,
            false,
            p(erda, "a"),
            p(raw, "a"),
            "",
        )
        .figures(kops(79.77), kops(58.32), "seeds/004 §5.3, Fig. 20"),
        Claim::ratio(
            "update-only-throughput-redo",
            "Erda / Redo Logging throughput, update-only, paced writers (paper: approximately \
             equal)",
            (0.9, 1.1),
            Metric::Mops,
            false,
            Pick::new("erda-paced-clients", erda, "UPD"),
            Pick::new("erda-paced-clients", redo, "UPD"),
            PACED_TPUT,
        ),
        Claim::ratio(
            "b-throughput-redo-threads",
            "Erda / Redo Logging throughput, YCSB-B, at the most client threads (Fig. 19)",
            (1.50, 1.50),
            Metric::Mops,
            false,
            Pick::new("erda-clients", erda, "b"),
            Pick::new("erda-clients", redo, "b"),
            "the paper's 1.50x is the ratio of its averages over thread counts",
        ),
        Claim::ratio(
            "update-only-throughput-raw-threads",
            "Erda / Read-After-Write throughput, update-only, at the most client threads \
             (Fig. 21: approximately equal)",
            (0.9, 1.1),
            Metric::Mops,
            false,
            Pick::new("erda-paced-clients", erda, "UPD"),
            Pick::new("erda-paced-clients", raw, "UPD"),
            PACED_TPUT,
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
        )
        .figures(Some(62.84), Some(92.7), LATENCY_SRC),
        Claim::ratio(
            "update-only-latency",
            "Redo Logging / Erda mean latency, update-only, 1 KiB values, paced writers \
             (103.89 / 102.1 µs)",
            (1.02, 1.02),
            Metric::Mean,
            false,
            Pick::new("erda-paced", erda, "UPD"),
            Pick::new("erda-paced", redo, "UPD"),
            PACED_UPD_LATENCY,
        )
        .figures(Some(102.1), Some(103.89), LATENCY_SRC),
        Claim::ratio(
            "c-latency-raw-values",
            "Read-After-Write / Erda mean latency, YCSB-C, 1 KiB values (92.48 / 62.84 µs)",
            (1.47, 1.47),
            Metric::Mean,
            false,
            v(erda_v, "c"),
            v(raw_v, "c"),
            "the paper's figures are averages over 16 B-4 KiB values",
        )
        .figures(Some(62.84), Some(92.48), LATENCY_SRC),
        Claim::ratio(
            "b-latency-redo-values",
            "Redo Logging / Erda mean latency, YCSB-B, 1 KiB values (94.71 / 62.76 µs)",
            (1.51, 1.51),
            Metric::Mean,
            false,
            v(erda_v, "b"),
            v(redo_v, "b"),
            "",
        )
        .figures(Some(62.76), Some(94.71), LATENCY_SRC),
        Claim::ratio(
            "a-latency-redo-values",
            "Redo Logging / Erda mean latency, YCSB-A, 1 KiB values, paced writers (100 / \
             74.64 µs)",
            (1.34, 1.34),
            Metric::Mean,
            false,
            Pick::new("erda-paced", erda, "a"),
            Pick::new("erda-paced", redo, "a"),
            A_LATENCY,
        )
        .figures(Some(74.64), Some(100.0), LATENCY_SRC),
        Claim::ratio(
            "update-only-latency-raw-values",
            "Read-After-Write / Erda mean latency, update-only, 1 KiB values, paced writers \
             (105.47 / 102.1 µs)",
            (1.03, 1.03),
            Metric::Mean,
            false,
            Pick::new("erda-paced", erda, "UPD"),
            Pick::new("erda-paced", raw, "UPD"),
            "writers wait 500 µs before each write as the paper's released clients do \
             (closed loop, erda-values table: 2.5x, the request thread 100 % busy and the \
             apply thread too); RAW's apply (17 lines persisted at 150 ns) runs on the \
             profile's background thread, as the authors' rbflush pthread (Read After \
             Write/server.c)",
        )
        .figures(Some(102.1), Some(105.47), LATENCY_SRC),
        Claim::ratio(
            "b-cpu-redo",
            "Redo Logging / Erda server CPU per op, YCSB-B",
            (20.09, 20.09),
            Metric::ServerCpu,
            false,
            cpu("Erda 64 B", "b"),
            cpu("Redo Logging 64 B", "b"),
            CPU_B,
        ),
        Claim::ratio(
            "a-cpu-redo",
            "Redo Logging / Erda server CPU per op, YCSB-A",
            (1.89, 1.89),
            Metric::ServerCpu,
            false,
            cpu("Erda 64 B", "a"),
            cpu("Redo Logging 64 B", "a"),
            "measured as the Redo update-only CPU row says, at 64 B (Fig. 23): one paced \
             client, Redo 9.64 µs per op (each read and write wakes its server) against \
             Erda's 4.68 (its writes only, half the ops): 2.06x (16 paced client threads: \
             6.32 / 3.25 µs, 1.95x); closed loop (erda-ycsb, no wakes) it was 0.84 / 0.37 µs, \
             2.76x",
        ),
        Claim::ratio(
            "b-cpu-raw-values",
            "Read-After-Write / Erda server CPU per op, YCSB-B, 1 KiB values (paper: its average \
             over Figs. 22-25, 16 B-1 KiB)",
            (20.81, 20.81),
            Metric::ServerCpu,
            false,
            cpu(erda_v, "b"),
            cpu(raw_v, "b"),
            CPU_B,
        ),
        Claim::ratio(
            "a-cpu-raw-values",
            "Read-After-Write / Erda server CPU per op, YCSB-A, 1 KiB values (paper: its average \
             over Figs. 22-25, 16 B-1 KiB)",
            (1.96, 1.96),
            Metric::ServerCpu,
            false,
            cpu(erda_v, "a"),
            cpu(raw_v, "a"),
            CPU_A_RAW,
        ),
        Claim::ratio(
            "update-only-cpu-redo-values",
            "Redo Logging / Erda server CPU per op, update-only, 1 KiB values (paper: its average \
             over Figs. 22-25, 16 B-1 KiB)",
            (1.17, 1.17),
            Metric::ServerCpu,
            false,
            cpu(erda_v, "UPD"),
            cpu(redo_v, "UPD"),
            CPU_UPD_REDO,
        ),
        Claim::ratio(
            "update-only-cpu-raw-values",
            "Read-After-Write / Erda server CPU per op, update-only, 1 KiB values (paper: its \
             average over Figs. 22-25, 16 B-1 KiB)",
            (1.11, 1.11),
            Metric::ServerCpu,
            false,
            cpu(erda_v, "UPD"),
            cpu(raw_v, "UPD"),
            CPU_UPD_RAW,
        ),
        Claim::ratio(
            "cleaning-update-only-latency",
            "Erda mean latency during log cleaning / without, update-only (Fig. 26: \
             approximately equal)",
            (0.9, 1.1),
            Metric::Mean,
            false,
            Pick::new("erda-cleaning", "Erda", "UPD"),
            Pick::new("erda-cleaning", "Erda (log cleaning)", "UPD"),
            "measured at 1 KiB, 16 clients pacing their writes as the authors' \
             client_logclean.c does (usleep(500) before each write), 1 request thread and \
             the profile's background thread (erda-cleaning table). The cleaner runs on the \
             background thread, as the authors' logcleaning pthread \
             (Erda/server/server_logclean.c), so a reply never waits for it; it costs 16.6 \
             µs of server CPU per update while it runs (0.64 µs without): it zeroes each \
             target region whole and copies every live object, persisted at 150 ns a line, \
             where the authors' copies with strncpy without emulated NVM latency and zeroes \
             nothing. With closed-loop writers it cannot keep up, the log fills, and \
             writers wait for it (4.5x)",
        ),
        Claim::ratio(
            "cleaning-c-latency",
            "Erda mean latency during log cleaning / without, YCSB-C (Fig. 26: higher, reads \
             go through the server)",
            (1.01, super::report::OPEN_ENDED),
            Metric::Mean,
            false,
            Pick::new("erda-cleaning", "Erda", "c"),
            Pick::new("erda-cleaning", "Erda (log cleaning)", "c"),
            "a cleaning starts after half a region of appends: a read-only run appends \
             nothing, so it cleans only if its load did",
        ),
        Claim::ratio(
            "table1-create-redo",
            "Redo Logging / Erda NVM bytes per create, 1 KiB values (Table 1: \
             Size(key)+12+2N / Size(key)+10+N)",
            ((20.0 + 2.0 * N) / (18.0 + N), (20.0 + 2.0 * N) / (18.0 + N)),
            Metric::NvmCreate,
            false,
            Pick::new("erda-table1", erda, "load"),
            Pick::new("erda-table1", redo, "load"),
            "remora's formats differ from the paper's by headers and padding (`remora bench \
             --table1` itemises them)",
        )
        .figures(
            Some(18.0 + N),
            Some(20.0 + 2.0 * N),
            "seeds/004 §5.6, Table 1, N = 8-byte key + value",
        ),
        Claim::ratio(
            "table1-update-redo",
            "Redo Logging / Erda NVM bytes per update, 1 KiB values (Table 1: 4+2N / 9+N)",
            ((4.0 + 2.0 * N) / (9.0 + N), (4.0 + 2.0 * N) / (9.0 + N)),
            Metric::NvmUpdate,
            false,
            Pick::new("erda-table1", erda, "UPD"),
            Pick::new("erda-table1", redo, "UPD"),
            "",
        )
        .figures(
            Some(9.0 + N),
            Some(4.0 + 2.0 * N),
            "seeds/004 §5.6, Table 1, N = 8-byte key + value",
        ),
        Claim::ratio(
            "table1-update-raw",
            "Read-After-Write / Erda NVM bytes per update, 1 KiB values (Table 1: 4+2N / 9+N)",
            ((4.0 + 2.0 * N) / (9.0 + N), (4.0 + 2.0 * N) / (9.0 + N)),
            Metric::NvmUpdate,
            false,
            Pick::new("erda-table1", erda, "UPD"),
            Pick::new("erda-table1", raw, "UPD"),
            "",
        )
        .figures(
            Some(9.0 + N),
            Some(4.0 + 2.0 * N),
            "seeds/004 §5.6, Table 1, N = 8-byte key + value",
        ),
    ];
    let st = |s: &str, t: usize, w| {
        Pick::new(
            "erda-server-threads",
            &format!("{s}, {t} server threads"),
            w,
        )
    };
    claims.extend([
        Claim::ratio(
            "c-throughput-redo-8-server-threads",
            "Erda / Redo Logging throughput, YCSB-C, 8 server threads (one per core)",
            (1.53, 1.53),
            Metric::Mops,
            false,
            st(erda, 8, "c"),
            st(redo, 8, "c"),
            "the paper does not state its server threads (the erda-server-threads table has \
             Erda and Redo at 1, 2, 4 and 8, 16 synchronous clients): at 8, Redo's read is one \
             SEND round trip plus 0.45 µs of server work and a wake, Erda's two dependent \
             READs (4.4 µs); Redo's server binds at 1 thread (2.20 Mops, 100 % used). The \
             paper's text (§5.3) and its released server (one completion-queue thread) point \
             to 1, which the other Erda rows use; the paper's throughput clients also sleep inside every \
             operation (see the YCSB-C row), so its figures are not closed-loop ones. Its \
             servers block in ibv_get_cq_event between requests (poll_cq in each server.c): \
             at 8 threads each is mostly asleep, and the profile's `server_wake_ns` (3 µs, the \
             Westmere core's C1 exit) and the wake's CPU (`server_wake_cpu_ns`, 4.4 µs, \
             spent before the service) delay each Redo read (9.4 µs, 1.68 Mops against \
             Erda's 3.58: 2.13x; without the wake's CPU, `--set server_wake_cpu_ns=0`: 5.4 \
             µs, 2.91 Mops, 1.23x; without either: 2.4 µs, 6.39 Mops, 0.56x); at 1 and 2 \
             threads the busy server rarely sleeps (2.20 and 4.40 Mops)",
        ),
        Claim::ratio(
            "update-only-throughput-redo-8-server-threads",
            "Erda / Redo Logging throughput, update-only, 8 server threads (paper: \
             approximately equal)",
            (0.9, 1.1),
            Metric::Mops,
            false,
            st(erda, 8, "UPD"),
            st(redo, 8, "UPD"),
            "writers wait 500 µs before each write as the paper's released clients do \
             (`PACED`), so a client's rate is one write per 500 µs + its latency whatever \
             the system (erda-server-threads table: the same at 1, 2, 4 and 8 server \
             threads); closed loop it was 0.61x: Redo's one round trip (1.00 RT/op) against \
             Erda's two (2.00), once 8 threads keep Redo's server (1.2 µs per write, twice \
             Erda's) from binding",
        ),
    ]);
    Paper {
        key: "erda",
        name: "Erda",
        paper_setup: "one server (2 x 4-core Xeon E5620, ConnectX-3 40 Gb InfiniBand, NVM \
                      emulated as DRAM + 150 ns writes), clients on other machines; YCSB-C/B/A \
                      and update-only, zipfian 0.99, values 16 B to 4 KB, throughput vs \
                      threads",
        paper_keys: None,
        setup: format!(
            "sim in the paper's profile (`--profile erda`) with 1 server thread (server-thread \
             rows: 1/2/4/8) and a background thread (cleaning, the baselines' apply), \
             persistent memory node, writers paced 500 µs per write in the \
             erda-paced, erda-paced-clients, erda-server-threads and erda-cleaning rows \
             (`{PACED}`), and the erda-cpu rows' one client thread as the paper's (`{CPU_PACE_BASELINE}`; \
             Erda's: `{CPU_PACE_ERDA}`), {NODES} compute nodes x 8 synchronous client threads (one operation each; curves: \
             {} clients), 1 memory node running the store's server; {} 8-byte integer keys{}, \
             64-byte values (value-size rows: {}; cleaning and Table 1: {VALUE} B), {} \
             measured ops after {} warm-up ops, zipfian 0.99, seed 1; the value-size rows \
             load {} keys: the scale's, or fewer where a run's memory-node region (about 17x \
             its appended bytes, allocated whole) would pass {} GiB (a third of this 24 GiB \
             machine, under the 12 GB `ulimit -v` of the full runs): the most keys that keep \
             it within",
            sweep.join("/"),
            s.records,
            match sizing::llc_lines(s) {
                Some(l) => format!(
                    " (more than the paper's can have been, {}: the LLC scaled to {l} lines)",
                    sizing::PAPER_KEYS_MAX
                ),
                None => String::new(),
            },
            sizes
                .iter()
                .map(|v| format!("{v} B"))
                .collect::<Vec<_>>()
                .join("/"),
            s.ops,
            s.warmup,
            size_keys.join(", "),
            VALUES_RUN_BYTES >> 30
        ),
        experiments,
        claims,
    }
}

#[cfg(test)]
mod tests;

//! `remora bench` and `remora check` figures on the sim and soft fabrics: reproducible by seed,
//! every figure reported, server CPU, NVM bytes, linearizability, think time.
use super::*;

#[test]
fn bench_on_the_sim_is_reproducible_by_seed() {
    let args = |seed: &'static str| {
        [
            "--fabric",
            "sim",
            "--index",
            "sherman",
            "--workload",
            "a",
            "--records",
            "3000",
            "--operations",
            "6000",
            "--compute-nodes",
            "2",
            "--clients-per-node",
            "2",
            "--coroutines",
            "2",
            "--seed",
            seed,
        ]
    };
    let a = bench_json(&args("1"), "s1");
    let b = bench_json(&args("1"), "s1b");
    let c = bench_json(&args("2"), "s2");
    assert_eq!(a, b, "same seed, different results");
    assert_ne!(a, c, "different seeds, same results");
    // Sherman is bulk-loaded on the sim unless the workload is LOAD: one (run) record.
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["phase"].as_str(), Some("run"));
    assert_eq!(a[0]["ops"].as_u64(), Some(6000));
    assert!(a[0]["per_op"]["round_trips"].as_f64().unwrap() >= 1.0);
    // The inserted load is as reproducible, and is reported as its own phase.
    let with = |seed: &'static str| {
        let mut v = args(seed).to_vec();
        v.push("--no-bulk-load");
        v
    };
    let d = bench_json(&with("1"), "s1i");
    let e = bench_json(&with("1"), "s1ib");
    assert_eq!(d, e, "same seed, different results (inserted load)");
    assert_eq!(d.len(), 2);
    assert_eq!(d[0]["phase"].as_str(), Some("load"));
}

#[test]
fn bench_on_the_soft_fabric_reports_every_figure() {
    for index in ["smart", "sherman", "fg-plus", "canrt", "erda"] {
        let recs = bench_json(
            &[
                "--index",
                index,
                "--workload",
                "c",
                "--records",
                "2000",
                "--operations",
                "4000",
                "--region-mib",
                "64",
                "--coroutines",
                "2",
            ],
            index,
        );
        assert_eq!(recs.len(), 2, "{index}: a load and a run record");
        let run = &recs[1];
        assert_eq!(run["phase"], "run");
        assert_eq!(run["ops"].as_u64(), Some(4000), "{index}");
        assert_eq!(
            run["op_counts"]["misses"].as_u64(),
            Some(0),
            "{index}: loaded keys not found"
        );
        assert!(run["mops"].as_f64().unwrap() > 0.0);
        assert!(
            run["latency"]["p99_ns"].as_f64().unwrap()
                >= run["latency"]["p50_ns"].as_f64().unwrap()
        );
        assert!(
            run["read_amplification"].as_f64().unwrap() >= 1.0,
            "{index}"
        );
        assert!(run["per_op"]["reads"].as_f64().unwrap() >= 1.0, "{index}");
    }
}

#[test]
fn sim_reports_the_server_cpu_per_operation() {
    // perf: SEND is answered by the echo handler (poll 50 + handler 270 + reply 100 ns with
    // the default model; the echo touches no region memory, so no cache lines on top), READ
    // never touches the server's CPU.
    let json = std::env::temp_dir().join(format!("remora-cli-{}-srv.json", std::process::id()));
    let out = remora(&[
        "perf",
        "--fabric",
        "sim",
        "--verbs",
        "read,send",
        "--seconds",
        "0.0001",
        "--clients-per-node",
        "4",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("srv ns/op"), "{table}");
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    let recs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0]["server_ns_per_op"].as_f64(), Some(0.0), "READ");
    let send = recs[1]["server_ns_per_op"].as_f64().unwrap();
    assert!((send - 420.0).abs() < 25.0, "SEND: {send} ns/op");
    // bench: CANRT's appends are WRITE_WITH_IMMs its server applies; the figure is there.
    let recs = bench_json(
        &[
            "--fabric",
            "sim",
            "--index",
            "canrt",
            "--workload",
            "a",
            "--records",
            "1000",
            "--operations",
            "2000",
        ],
        "canrt-srv",
    );
    let per_op = recs[0]["server_ns_per_op"].as_f64().unwrap();
    assert!(per_op > 100.0, "CANRT load: {per_op} server ns/op");
    assert!(
        recs[0]["nvm_bytes_per_op"].is_null(),
        "DRAM nodes: no NVM figure"
    );
}

#[test]
fn sim_bench_on_persistent_nodes_reports_nvm_bytes_per_op() {
    let recs = bench_json(
        &[
            "--fabric",
            "sim",
            "--persistent",
            "--index",
            "erda",
            "--workload",
            "a",
            "--records",
            "500",
            "--operations",
            "1000",
            "--no-bulk-load",
        ],
        "erda-nvm",
    );
    let load = &recs[0];
    let media = load["nvm_bytes_per_op"].as_f64().unwrap();
    let split = &load["nvm_per_op"];
    let nic = ["nic_write", "nic_write_imm", "nic_atomic"]
        .iter()
        .map(|k| split[k].as_f64().unwrap())
        .sum::<f64>();
    let lines = split["lines_flushed"].as_f64().unwrap();
    // Every insert writes its entry by the NIC and the server persists its bucket.
    assert!(nic > 0.0 && lines >= 1.0, "{split}");
    assert!((media - (nic + 64.0 * lines)).abs() < 1e-6, "{load}");
    // --persistent shapes the sim only.
    let out = remora(&["bench", "--fabric", "soft", "--persistent"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--persistent"), "{}", stderr(&out));
}

#[test]
fn linearizability_check_on_the_sim() {
    let out = remora(&[
        "check",
        "--linearizability",
        "--index",
        "smart",
        "--fabric",
        "sim",
        "--seeds",
        "1..3",
        "--ops",
        "1600",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("seed 2: 1600 ops"), "{stdout}");
    assert!(
        stdout.contains("smart: 2 histories, 3200 operations checked"),
        "{stdout}"
    );
    assert!(stdout.contains("0 violations, 0 inconclusive"), "{stdout}");
    let out = remora(&["check", "--linearizability", "--seeds", "one..two"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--seeds"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// `--think-write-us` paces each writer (the Erda paper's clients wait 500 µs before each
/// write): a paced client completes one operation per think time plus its latency, the
/// think time is outside the measured latency, and a fabric with no virtual clock refuses
/// the flag.
#[test]
fn think_time_paces_sim_writers_outside_their_latency() {
    let run = |think: &'static str, tag: &str| {
        let recs = bench_json(
            &[
                "--fabric",
                "sim",
                "--persistent",
                "--index",
                "erda-redo",
                "--records",
                "500",
                "--operations",
                "400",
                "--warmup",
                "100",
                "--coroutines",
                "1",
                "--clients-per-node",
                "2",
                "--workload",
                "update-only",
                "--think-write-us",
                think,
            ],
            tag,
        );
        let r = recs
            .into_iter()
            .find(|r| r["phase"] == "run")
            .expect("a run row");
        (
            r["mops"].as_f64().unwrap(),
            r["latency"]["mean_ns"].as_f64().unwrap(),
            r["threads"].as_u64().unwrap() as f64,
        )
    };
    let (closed, closed_lat, _) = run("0", "think-0");
    let (paced, paced_lat, clients) = run("500", "think-500");
    // One operation per (500 µs + latency) per client.
    let want = clients / (500e3 + paced_lat) * 1e3;
    assert!(
        (paced / want - 1.0).abs() < 0.05,
        "paced {paced} Mops, want {want} ({clients} clients, mean {paced_lat} ns)"
    );
    assert!(
        closed > 20.0 * paced,
        "closed loop {closed} vs paced {paced} Mops"
    );
    // The think time is not in the latency (a lightly loaded server is, if anything, faster).
    assert!(
        paced_lat <= closed_lat * 1.05,
        "{paced_lat} ns vs {closed_lat} ns"
    );
    let out = remora(&[
        "bench",
        "--fabric",
        "soft",
        "--index",
        "erda",
        "--think-write-us",
        "500",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--fabric sim"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_timed_sim_run_counts_what_completes_within_its_window() {
    // `--seconds` counts as a benchmark that samples completed operations per interval: an
    // operation still in flight at the deadline is not counted and does not stretch the
    // window (before, the run ended when its slowest operation returned).
    let window = 0.000_2;
    let recs = bench_json(
        &[
            "--fabric",
            "sim",
            "--index",
            "sherman",
            "--workload",
            "a",
            "--records",
            "2000",
            "--seconds",
            "0.0002",
            "--warmup",
            "200",
            "--compute-nodes",
            "2",
            "--clients-per-node",
            "4",
            "--coroutines",
            "2",
        ],
        "window",
    );
    let r = recs
        .into_iter()
        .find(|r| r["phase"] == "run")
        .expect("a run row");
    let seconds = r["seconds"].as_f64().unwrap();
    assert!(
        (seconds / window - 1.0).abs() < 1e-6,
        "measured over {seconds} s, window {window} s"
    );
    let ops = r["ops"].as_u64().unwrap() as f64;
    assert!(ops > 0.0, "nothing completed in the window");
    let mops = r["mops"].as_f64().unwrap();
    assert!(
        (mops * 1e6 * window / ops - 1.0).abs() < 1e-6,
        "{mops} Mops over {window} s is not {ops} operations"
    );
}

#[test]
fn a_late_window_counts_only_what_completes_after_it_opens() {
    // `--warmup-seconds W --seconds S`: the clients run on through the window's start (no
    // barrier); the run row covers S, and counts the operations completing in it only.
    let args = |extra: &[&'static str]| {
        let mut v = vec![
            "--fabric",
            "sim",
            "--index",
            "sherman",
            "--workload",
            "a",
            "--records",
            "2000",
            "--seconds",
            "0.0002",
            "--compute-nodes",
            "2",
            "--clients-per-node",
            "4",
            "--coroutines",
            "2",
        ];
        v.extend_from_slice(extra);
        v
    };
    let run = |extra: &[&'static str], tag: &str| {
        bench_json(&args(extra), tag)
            .into_iter()
            .find(|r| r["phase"] == "run")
            .expect("a run row")
    };
    let late = run(&["--warmup-seconds", "0.0003"], "late");
    let early = run(&[], "early");
    let seconds = late["seconds"].as_f64().unwrap();
    assert!(
        (seconds / 0.0002 - 1.0).abs() < 1e-6,
        "measured over {seconds} s"
    );
    assert_eq!(late["warmup_s"].as_f64(), Some(0.0003));
    assert_eq!(early["warmup_s"].as_f64(), Some(0.0));
    // Had the 0.3 ms before the window been counted, the late run would show ~2.5x the
    // operations of the early one over the same 0.2 ms.
    let (l, e) = (
        late["ops"].as_f64().unwrap(),
        early["ops"].as_f64().unwrap(),
    );
    assert!(
        l > 0.0 && l < 1.5 * e,
        "late window {l} ops, from the start {e}"
    );
    let o = remora(&["bench", "--fabric", "sim", "--warmup-seconds", "0.001"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("needs --seconds"), "{}", stderr(&o));
    let o = remora(&[
        "bench",
        "--fabric",
        "sim",
        "--seconds",
        "0.001",
        "--warmup-seconds",
        "0.001",
        "--operations",
        "100",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--operations budget"), "{}", stderr(&o));
}

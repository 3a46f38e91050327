//! End-to-end tests of the `remora` command itself.
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

fn remora(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .output()
        .expect("running remora")
}

struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn memnode(name: &str) -> (Kid, PathBuf) {
    let path = std::env::temp_dir().join(format!("remora-cli-{}-{name}.sock", std::process::id()));
    let kid = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "memnode",
            "--listen",
            path.to_str().unwrap(),
            "--region-mib",
            "32",
            "--chunk-kib",
            "64",
            "--seconds",
            "120",
        ])
        .spawn()
        .expect("starting remora memnode");
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "memnode did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (Kid(kid), path)
}

#[test]
fn check_passes_against_a_memnode_process() {
    let (_m, path) = memnode("check");
    let out = remora(&[
        "check",
        "--fabric",
        "soft",
        "--connect",
        path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("PASS torn_reads_are_observable"),
        "{stdout}"
    );
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

#[test]
fn perf_against_a_memnode_process_writes_json() {
    let (_m, path) = memnode("perf");
    let json = std::env::temp_dir().join(format!("remora-cli-{}.json", std::process::id()));
    let out = remora(&[
        "perf",
        "--connect",
        path.to_str().unwrap(),
        "--verbs",
        "read,faa,send",
        "--sizes",
        "64",
        "--coroutines",
        "4",
        "--seconds",
        "0.2",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("READ") && stdout.contains("FETCH_AND_ADD"),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["ops"].as_u64().unwrap() > 0, "{l}");
        assert!(v["latency"]["p50_ns"].as_f64().unwrap() > 0.0, "{l}");
        assert!(v["per_op"]["round_trips"].as_f64().unwrap() >= 1.0, "{l}");
    }
}

#[test]
fn bad_arguments_are_one_clear_error() {
    let out = remora(&["perf", "--threads", "0", "--seconds", "0.1", "--quiet"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must be positive"), "{err}");
    let out = remora(&["perf", "--connect", "/nonexistent/remora.sock", "--quiet"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is `remora memnode` running?"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn bench_over_verbs_errors_are_one_line() {
    let one_line_error = |args: &[&str], want: &str| {
        let out = remora(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let e = stderr(&out);
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    };
    // Refused before any device or connection is looked at, in every build.
    one_line_error(
        &[
            "bench",
            "--fabric",
            "verbs",
            "--server-core",
            "1",
            "--connect",
            "192.0.2.1:7471",
        ],
        "--server-core applies to the in-process soft memory node",
    );
    one_line_error(
        &["bench", "--device", "rxe0", "--records", "10"],
        "--device names an RDMA device: it is for --fabric verbs",
    );
    for index in ["smart", "canrt"] {
        let bench = ["bench", "--fabric", "verbs", "--index", index, "--quiet"];
        if cfg!(feature = "verbs") {
            one_line_error(&bench, "needs `--connect host:port`");
        } else {
            one_line_error(&bench, "rebuild with `cargo build --features verbs`");
        }
    }
}

fn bench_json(args: &[&str], tag: &str) -> Vec<serde_json::Value> {
    let json = std::env::temp_dir().join(format!("remora-cli-{}-{tag}.json", std::process::id()));
    let mut all = vec!["bench", "--quiet", "--json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = remora(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

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

/// `--keys string` on CANRT, WORT and WOART: the CANRT paper's random 16-byte string keys
/// and 15-byte values (CANRT formats a tree of 16-byte keys); every loaded key is found.
#[test]
fn canrt_and_its_baselines_bench_16_byte_string_keys() {
    for index in ["canrt", "wort", "woart"] {
        let recs = bench_json(
            &[
                "--fabric",
                "sim",
                "--index",
                index,
                "--keys",
                "string",
                "--value-size",
                "15",
                "--workload",
                "c",
                "--records",
                "1500",
                "--operations",
                "1500",
            ],
            &format!("{index}-s16"),
        );
        assert_eq!(recs.len(), 2, "{index}: a load and a run record");
        assert_eq!(recs[1]["ops"].as_u64(), Some(1500), "{index}");
        assert_eq!(
            recs[1]["op_counts"]["misses"].as_u64(),
            Some(0),
            "{index}: loaded keys not found"
        );
    }
    // A value CANRT's items cannot hold is refused in CANRT's words.
    let out = remora(&[
        "bench",
        "--fabric",
        "sim",
        "--index",
        "canrt",
        "--value-size",
        "250",
    ]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("CANRT values are at most 248 bytes"), "{e}");
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

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn nan_and_infinite_seconds_are_clear_errors_not_panics() {
    for args in [
        &["perf", "--seconds", "nan"][..],
        &["perf", "--seconds", "inf"],
        &["perf", "--seconds", "0"],
        &["memnode", "--seconds", "nan"],
        &["bench", "--seconds", "NaN"],
    ] {
        let out = remora(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains("finite number greater than 0"), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
    }
}

#[test]
fn bench_refuses_an_erda_store_that_does_not_fit_its_region_at_start() {
    // 1000 records make a 13 MiB store; a 4 MiB region cannot hold it. The memory node's
    // builder says so before any client runs (it used to be found by the first message, and
    // the sim reported only a flushed work request).
    for fabric in ["sim", "soft"] {
        let out = remora(&[
            "bench",
            "--fabric",
            fabric,
            "--index",
            "erda",
            "--records",
            "1000",
            "--operations",
            "1000",
            "--region-mib",
            "4",
            "--quiet",
        ]);
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{fabric}: {e}");
        assert_eq!(
            e.trim(),
            "remora: erda's memory node cannot start: erda store does not fit: its table and \
             logs take 13631488 bytes (13 MiB) and a 4194304-byte (4 MiB) region has 3145728 \
             free; give the node a larger region or the store fewer heads, smaller logs or \
             fewer buckets",
            "{fabric}"
        );
    }
}

#[test]
fn memnode_listen_leaves_files_and_live_memnodes_alone() {
    let regular = std::env::temp_dir().join(format!("remora-cli-{}-regular", std::process::id()));
    std::fs::write(&regular, b"keep me").unwrap();
    let out = remora(&[
        "memnode",
        "--listen",
        regular.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not a socket"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&regular).unwrap(), b"keep me");
    std::fs::remove_file(&regular).unwrap();
    // A second memnode on a live memnode's path refuses; the first keeps serving.
    let (_m, path) = memnode("twice");
    let out = remora(&[
        "memnode",
        "--listen",
        path.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("already listening"),
        "{}",
        stderr(&out)
    );
    let out = remora(&["check", "--connect", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn memnode_on_a_file_restarts_on_it_and_refuses_a_second_user() {
    let dir = std::env::temp_dir();
    let id = std::process::id();
    let file = dir.join(format!("remora-cli-{id}-region.img"));
    let sock = dir.join(format!("remora-cli-{id}-file.sock"));
    let _ = std::fs::remove_file(&file);
    let start = |secs: &str| {
        Command::new(env!("CARGO_BIN_EXE_remora"))
            .args(["memnode", "--listen", sock.to_str().unwrap(), "--file"])
            .arg(&file)
            .args(["--region-mib", "16", "--chunk-kib", "64", "--seconds", secs])
            .output()
            .unwrap()
    };
    let first = start("0.5");
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(!String::from_utf8_lossy(&first.stdout).contains("restarted"));
    let again = start("0.5");
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("restarted on its region"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    // The wrong size, a file that is not a region, and a file in use are clear errors.
    let out = remora(&[
        "memnode",
        "--listen",
        "/tmp/x.sock",
        "--file",
        file.to_str().unwrap(),
        "--region-mib",
        "32",
        "--seconds",
        "1",
    ]);
    assert!(
        stderr(&out).contains("holds a region of 16777216 bytes"),
        "{}",
        stderr(&out)
    );
    let junk = dir.join(format!("remora-cli-{id}-junk.img"));
    std::fs::write(&junk, vec![7u8; 1 << 20]).unwrap();
    let out = remora(&[
        "memnode",
        "--listen",
        "/tmp/y.sock",
        "--file",
        junk.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(
        stderr(&out).contains("does not hold a remora region"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_file(&junk);
    let _holder = Kid(Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["memnode", "--listen", sock.to_str().unwrap(), "--file"])
        .arg(&file)
        .args(["--seconds", "20"])
        .spawn()
        .unwrap());
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let other = dir.join(format!("remora-cli-{id}-other.sock"));
    let out = remora(&[
        "memnode",
        "--listen",
        other.to_str().unwrap(),
        "--file",
        file.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(
        stderr(&out).contains("in use by another memory node"),
        "{}",
        stderr(&out)
    );
    drop(_holder);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn pmem_refuses_a_file_that_is_not_on_dax() {
    let f = std::env::temp_dir().join(format!("remora-cli-{}-pmem.img", std::process::id()));
    let _ = std::fs::remove_file(&f);
    let out = remora(&[
        "memnode",
        "--listen",
        "/tmp/z.sock",
        "--pmem",
        f.to_str().unwrap(),
        "--region-mib",
        "16",
        "--seconds",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not on a DAX filesystem"),
        "{}",
        stderr(&out)
    );
    assert!(!f.exists(), "a refused --pmem file is left behind");
}

#[test]
fn check_leaves_a_live_memnode_and_its_clients_alone() {
    let (_m, path) = memnode("harmless");
    // A client connected before the check keeps working through and after it.
    let qp = remora::poller::soft::control::connect(&path).unwrap();
    let at = remora::core::GlobalAddr::new(0, 1 << 20);
    remora::core::block_on::block_on(remora::core::QueuePair::write(&qp, at, &[5u8; 8])).unwrap();
    let out = remora(&["check", "--connect", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(stdout.contains("SKIP revoked_key_is_refused"), "{stdout}");
    assert!(stdout.contains(" 0 failed, 1 skipped"), "{stdout}");
    let mut b = [0u8; 8];
    remora::core::block_on::block_on(remora::core::QueuePair::read(&qp, at, &mut b))
        .expect("the check broke a concurrent client");
    assert_eq!(b, [5u8; 8]);
}

#[test]
fn a_client_of_another_service_hears_both_names() {
    let dir = std::env::temp_dir();
    let sock = dir.join(format!("remora-cli-{}-names.sock", std::process::id()));
    let _m = Kid(Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "memnode",
            "--listen",
            sock.to_str().unwrap(),
            "--service",
            "erda",
        ])
        .args(["--region-mib", "64", "--seconds", "60"])
        .spawn()
        .unwrap());
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = remora(&["check", "--connect", sock.to_str().unwrap()]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("`erda` service") && e.contains("`echo`"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    let out = remora(&[
        "bench",
        "--index",
        "canrt",
        "--connect",
        sock.to_str().unwrap(),
        "--records",
        "10",
    ]);
    let e = stderr(&out);
    assert!(e.contains("`erda` service") && e.contains("`canrt`"), "{e}");
}

#[test]
fn flags_a_fabric_would_ignore_are_refused() {
    for (args, what) in [
        (
            &["perf", "--fabric", "sim", "--threads", "4"][..],
            "--threads",
        ),
        (
            &["perf", "--fabric", "sim", "--connect", "/tmp/x.sock"],
            "--connect",
        ),
        (
            &["perf", "--connect", "/tmp/x.sock", "--region-mib", "8"],
            "--region-mib",
        ),
        (&["perf", "--compute-nodes", "4"], "--compute-nodes"),
        (&["bench", "--fabric", "sim", "--threads", "2"], "--threads"),
        (
            &["bench", "--index", "sherman", "--page-size", "100000"],
            "--page-size 100000",
        ),
        (
            &["bench", "--compare-art", "--keys", "string"],
            "--compare-art",
        ),
        (&["bench", "--json", "/nonexistent-dir/x.json"], "--json"),
    ] {
        let out = remora(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr(&out).contains(what), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn json_to_stdout_is_json_only() {
    let out = remora(&[
        "bench",
        "--records",
        "200",
        "--operations",
        "200",
        "--json",
        "-",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.is_empty());
    for line in stdout.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON on stdout: {line}"
        );
    }
    assert!(
        stderr(&out).contains("workload"),
        "the table goes to stderr"
    );
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

#[test]
fn catfish_bench_on_the_sim_reports_the_offloaded_share() {
    let args = [
        "--fabric",
        "sim",
        "--index",
        "catfish",
        "--mode",
        "adaptive",
        "--workload",
        "b",
        "--records",
        "1000",
        "--operations",
        "3000",
        "--compute-nodes",
        "8",
        "--clients-per-node",
        "2",
        "--heartbeat-us",
        "20",
    ];
    let json = std::env::temp_dir().join(format!("remora-cli-{}-cf.json", std::process::id()));
    let mut all = vec!["bench", "--quiet", "--json", json.to_str().unwrap()];
    all.extend_from_slice(&args);
    let out = remora(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("srv ns/op"), "{table}");
    assert!(table.contains("adaptive fanout=30"), "{table}");
    assert!(table.contains("% offloaded"), "{table}");
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    let recs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 2);
    let run = &recs[1];
    assert_eq!(run["index"], "catfish");
    assert_eq!(run["ops"].as_u64(), Some(3000));
    let s = &run["spatial"];
    let searches = s["searches"].as_u64().unwrap();
    let inserts = run["op_counts"]["inserts"].as_u64().unwrap();
    assert_eq!(searches + inserts, 3000);
    assert!((200..400).contains(&inserts), "{inserts} inserts of 3000");
    // The server is saturated: adaptive clients offload some searches, not all.
    let off = s["offloaded_searches"].as_u64().unwrap();
    assert!(off > 0 && off < searches, "{off} of {searches} offloaded");
    assert_eq!(off + s["messaging_searches"].as_u64().unwrap(), searches);
    let share = s["offloaded_share"].as_f64().unwrap();
    assert!((share - off as f64 / searches as f64).abs() < 1e-9);
    assert!(s["heartbeats"].as_u64().unwrap() > 0);
    assert!(s["tree_height"].as_u64().unwrap() >= 2);
    assert!(run["server_ns_per_op"].as_f64().unwrap() > 0.0);
    assert!(run["latency"]["p99_ns"].as_f64().unwrap() > 0.0);
    assert!(run["per_op"]["round_trips"].as_f64().unwrap() >= 1.0);

    // Objects from a CSV file (points and rectangles); bad lines are one clear error.
    let csv = std::env::temp_dir().join(format!("remora-cli-{}-cf.csv", std::process::id()));
    let lines: String = (0..300)
        .map(|i| match i % 2 {
            0 => format!("{},{}\n", i % 17, i % 23),
            _ => format!("{},{},{},{}\n", i % 13, i % 7, i % 13 + 1, i % 7 + 2),
        })
        .collect();
    std::fs::write(&csv, lines).unwrap();
    let data = [
        "--fabric",
        "sim",
        "--index",
        "catfish",
        "--mode",
        "offloading",
        "--data",
        csv.to_str().unwrap(),
        "--records",
        "300",
        "--operations",
        "200",
        // Request scale 0.5: window edges up to half the side, so searches find objects.
        "--window",
        "0.5",
    ];
    let recs = bench_json(&data, "cfcsv");
    let s = &recs[1]["spatial"];
    assert_eq!(s["offloaded_searches"].as_u64(), Some(200));
    assert!(s["hits_per_search"].as_f64().unwrap() >= 1.0);
    std::fs::write(&csv, "1,2\n3,4,5\n").unwrap();
    let mut bad = vec!["bench", "--quiet"];
    bad.extend_from_slice(&data);
    let out = remora(&bad);
    let _ = std::fs::remove_file(&csv);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("line 2"), "{}", stderr(&out));
}

#[test]
fn check_refuses_flags_it_would_ignore_and_memnode_offers_no_sim() {
    for (args, what) in [
        (&["check", "--verbs", "send"][..], "--verbs"),
        (&["check", "--seconds", "5"], "--seconds"),
        (&["check", "--threads", "2"], "--threads"),
        (&["check", "--allow-revoke"], "--allow-revoke"),
        (
            &["check", "--linearizability", "--connect", "/tmp/x.sock"],
            "--connect",
        ),
    ] {
        let out = remora(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr(&out).contains(what), "{args:?}: {}", stderr(&out));
    }
    let out = remora(&["memnode", "--fabric", "sim"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("invalid value 'sim'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_with_allow_revoke_runs_the_revocation_on_a_private_memnode() {
    let (_m, path) = memnode("revoke");
    let out = remora(&[
        "check",
        "--connect",
        path.to_str().unwrap(),
        "--allow-revoke",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(stdout.contains("PASS revoked_key_is_refused"), "{stdout}");
    assert!(!stdout.contains("SKIP"), "{stdout}");
}

#[test]
fn check_against_a_memnode_that_dies_ends_with_an_error_not_a_panic_or_hang() {
    let (mut m, path) = memnode("dies");
    let check = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["check", "--connect", path.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let _ = m.0.kill();
    let _ = m.0.wait();
    let t = Instant::now();
    let out = check.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "check hung after the memnode died"
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("panicked at"), "{text}");
    assert!(!text.contains("stack backtrace"), "{text}");
    assert!(!text.contains("a scoped thread panicked"), "{text}");
}

/// Erda and its two baselines side by side on a persistent sim node: update-only puts every
/// NVM byte on updates (Erda about half of Redo and RAW at 1 KiB), reads cost the baselines'
/// server CPU and not Erda's, and `--table1` prints the table.
#[test]
fn erda_and_its_baselines_compare_on_the_sim() {
    let base = [
        "--fabric",
        "sim",
        "--persistent",
        "--index",
        "erda,erda-redo,erda-raw",
        "--records",
        "300",
        "--operations",
        "600",
        "--value-size",
        "1024",
        "--clients-per-node",
        "2",
    ];
    let mut upd = base.to_vec();
    upd.extend_from_slice(&["--workload", "update-only"]);
    let recs = bench_json(&upd, "erda-upd");
    let runs: Vec<_> = recs.iter().filter(|r| r["phase"] == "run").collect();
    assert_eq!(runs.len(), 3);
    let per_update = |i: usize| {
        assert_eq!(runs[i]["op_counts"]["updates"].as_u64(), Some(600));
        runs[i]["nvm_store_bytes_by_op"]["update"].as_f64().unwrap()
    };
    let (erda, redo, raw) = (per_update(0), per_update(1), per_update(2));
    assert_eq!(runs[1]["index"], "erda-redo");
    assert!(erda > 1024.0 && erda < 0.6 * redo, "{erda} vs {redo}");
    assert!((redo - raw).abs() < 16.0, "{redo} vs {raw}");
    let mut c = base.to_vec();
    c.extend_from_slice(&["--workload", "c"]);
    let recs = bench_json(&c, "erda-c");
    let srv: Vec<f64> = recs
        .iter()
        .filter(|r| r["phase"] == "run")
        .map(|r| r["server_ns_per_op"].as_f64().unwrap())
        .collect();
    assert_eq!(srv[0], 0.0, "Erda reads are one-sided");
    assert!(srv[1] > 100.0 && srv[2] > 100.0, "{srv:?}");
    let out = remora(&[
        "bench",
        "--index",
        "erda,erda-raw",
        "--table1",
        "--table1-sizes",
        "16,4096",
        "--table1-keys",
        "4",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        table.contains("Table 1") && table.contains("paper"),
        "{table}"
    );
    assert_eq!(table.lines().filter(|l| l.starts_with("erda")).count(), 12);
}

#[test]
fn a_memnode_serves_erda_and_its_baselines_to_bench() {
    for (service, other) in [
        ("erda", "erda-redo"),
        ("erda-redo", "erda-raw"),
        ("erda-raw", "erda-redo"),
    ] {
        let sock = std::env::temp_dir().join(format!(
            "remora-cli-{}-svc-{service}.sock",
            std::process::id()
        ));
        let _m = Kid(Command::new(env!("CARGO_BIN_EXE_remora"))
            .args(["memnode", "--listen", sock.to_str().unwrap()])
            .args([
                "--service",
                service,
                "--region-mib",
                "64",
                "--seconds",
                "60",
            ])
            .spawn()
            .unwrap());
        let t = Instant::now();
        while !sock.exists() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let run = |index: &str| {
            remora(&[
                "bench",
                "--connect",
                sock.to_str().unwrap(),
                "--index",
                index,
                "--workload",
                "a",
                "--records",
                "200",
                "--operations",
                "500",
                "--threads",
                "1",
                "--value-size",
                "1024",
                "--quiet",
            ])
        };
        let out = run(service);
        assert!(out.status.success(), "{service}: {}", stderr(&out));
        // The other baseline is refused by name, not run against the wrong server.
        let out = run(other);
        assert!(!out.status.success(), "{other} ran against {service}");
        assert!(stderr(&out).contains("service"), "{}", stderr(&out));
    }
}

/// CANRT's "ops during a resize" come from the resize clock of the server the bench runs:
/// counted on the sim (the load resizes the tree), and on a memory node in another process,
/// whose server the bench cannot read, left at 0 with a note saying why.
#[test]
fn canrt_ops_during_a_resize_come_from_the_benchs_own_server() {
    let recs = bench_json(
        &[
            "--fabric",
            "sim",
            "--index",
            "canrt",
            "--workload",
            "load",
            "--records",
            "3000",
            "--coroutines",
            "4",
        ],
        "canrt-resizes",
    );
    let c = &recs[0]["canrt"];
    let during = c["during_resize_ops"].as_u64().unwrap();
    assert!(c["resize_requests"].as_u64().unwrap() > 0, "{c}");
    assert!(during > 0 && during < 3000, "{c}");
    let (p50, p99) = (
        c["during_resize_p50_ns"].as_u64().unwrap(),
        c["during_resize_p99_ns"].as_u64().unwrap(),
    );
    assert!(p50 > 0 && p99 >= p50, "{c}");
    let sock = std::env::temp_dir().join(format!(
        "remora-cli-{}-canrt-resizes.sock",
        std::process::id()
    ));
    let _m = Kid(Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["memnode", "--service", "canrt", "--listen"])
        .arg(&sock)
        .args(["--region-mib", "32", "--seconds", "120"])
        .spawn()
        .expect("starting remora memnode"));
    let t = Instant::now();
    while !sock.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "memnode did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let recs = bench_json(
        &[
            "--index",
            "canrt",
            "--connect",
            sock.to_str().unwrap(),
            "--workload",
            "load",
            "--records",
            "500",
            "--coroutines",
            "2",
        ],
        "canrt-resizes-remote",
    );
    assert_eq!(recs[0]["canrt"]["during_resize_ops"].as_u64(), Some(0));
    let notes = recs[0]["notes"].to_string();
    assert!(
        notes.contains("ops during a resize: not observed"),
        "{notes}"
    );
}

/// Erda's log cleaning keeps a 1 KiB-value log from filling. The bench's regions used to be
/// only the live bytes: objects do not span 64 KiB segments (60 of 1,088 bytes fit, 4 % is
/// left over), so the live data alone overflowed a region, a cleaning's copies and the
/// writes during it spilled into the ring's last free region and the next cleaning found
/// none: `erda server refused: LogFull` at 2,000 records.
#[test]
fn erda_cleaning_keeps_a_1kib_log_from_filling() {
    let recs = bench_json(
        &[
            "--fabric",
            "sim",
            "--persistent",
            "--index",
            "erda",
            "--erda-clean",
            "--records",
            "2000",
            "--operations",
            "4000",
            "--warmup",
            "2000",
            "--value-size",
            "1024",
            "--coroutines",
            "1",
            "--clients-per-node",
            "1",
            "--workload",
            "update-only",
        ],
        "erda-clean-1k",
    );
    let run = recs
        .iter()
        .find(|r| r["phase"] == "run")
        .expect("a run row");
    assert_eq!(run["op_counts"]["updates"].as_u64(), Some(4000));
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

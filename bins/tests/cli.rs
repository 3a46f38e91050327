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
    assert_eq!(a.len(), 2);
    assert_eq!(a[1]["ops"].as_u64(), Some(6000));
    assert!(a[1]["per_op"]["round_trips"].as_f64().unwrap() >= 1.0);
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

//! End-to-end tests of the `remora` command itself. Here: the helpers and the refusals of
//! bad arguments and flags; memory nodes and `check` against them in `cli/memnodes.rs`,
//! bench and check figures on the sim and soft fabrics in `cli/bench.rs`, each paper's
//! own bench figures in `cli/papers.rs`, `repro --resume` in `cli/resume.rs`.
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
            &["bench", "--index", "sherman", "--page-size", "1000"],
            "multiple of 64",
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

#[path = "cli/bench.rs"]
mod bench;
#[path = "cli/memnodes.rs"]
mod memnodes;
#[path = "cli/papers.rs"]
mod papers;
#[path = "cli/resume.rs"]
mod resume;

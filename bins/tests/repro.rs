//! End-to-end tests of `remora repro` and the bench fields it relies on, at a tiny scale
//! (a few hundred keys: the tool is under test here, not the figures).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn remora(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .output()
        .expect("running remora")
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-repro-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn report(d: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(d.join("report.json")).unwrap()).unwrap()
}

#[test]
fn sherman_report_charts_and_check() {
    let d = dir("sherman");
    let out = d.to_str().unwrap();
    ok(&remora(&[
        "repro",
        "sherman",
        "--scale",
        "tiny",
        "--only",
        "sherman-factors",
        "--out",
        out,
        "--quiet",
    ]));
    let md = std::fs::read_to_string(d.join("report.md")).unwrap();
    assert!(
        md.contains("Sherman / FG+ throughput, write-intensive"),
        "{md}"
    );
    assert!(md.contains("23.60x"), "the paper's figure is in the report");
    for f in [
        "sherman-factors.json",
        "sherman-factors.csv",
        "sherman-factors.png",
        "sherman-factors.svg",
        "sherman-factors-cdf.png",
    ] {
        assert!(d.join(f).exists(), "{f} missing");
    }
    assert!(
        !d.join("sherman-clients-a.json").exists(),
        "--only ran another experiment"
    );
    // Every factor step has its own row in the CSV, with its command.
    let csv = std::fs::read_to_string(d.join("sherman-factors.csv")).unwrap();
    for step in ["FG+", "+ on-chip lock", "+ two-level version"] {
        assert!(csv.contains(step), "{step} missing from\n{csv}");
    }
    let r = report(&d);
    let rows = r["papers"][0]["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["remora"].is_number()), "{rows:?}");
    // The seed-noisy rows (YCSB-A, YCSB-D, LOAD) are medians over seeds 1-5, graded by it;
    // YCSB-B's row is one seed's.
    let row = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap();
    for id in [
        "write-p99",
        "read-throughput-inserts",
        "write-throughput-inserts",
    ] {
        let s = &row(id)["seeds"];
        assert_eq!(s["n"], 5, "{id}: {s}");
        assert_eq!(row(id)["remora"], s["median"], "{id}");
        assert_eq!(row(id)["seed"], s["shown"], "{id}");
    }
    assert!(row("read-throughput")["seeds"].is_null());
    assert!(md.contains("median of 5 seeds"), "{md}");
    let pts: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(d.join("sherman-factors.json")).unwrap())
            .unwrap();
    for seed in 1..=5 {
        let at: Vec<_> = pts.iter().filter(|p| p["seed"] == seed).collect();
        // Five steps of YCSB-A, YCSB-D and LOAD at every seed; YCSB-B at seed 1.
        assert_eq!(at.len(), if seed == 1 { 20 } else { 15 }, "seed {seed}");
        assert!(
            at.iter().all(|p| p["command"]
                .as_str()
                .unwrap()
                .contains(&format!("--seed {seed}"))
                || p["workload"] == "B"),
            "seed {seed}"
        );
    }
    // A committed report whose first ratio sits on the other side of 1 fails the check of
    // a regenerated one, naming that row and only that row (the sim is deterministic: every
    // other row matches).
    let mut bad = r.clone();
    let row = &mut bad["papers"][0]["rows"][0];
    let flipped = if row["side"] == "above" {
        "below"
    } else {
        "above"
    };
    row["side"] = flipped.into();
    let tampered = d.join("tampered.json");
    std::fs::write(&tampered, serde_json::to_string(&bad).unwrap()).unwrap();
    let d2 = dir("sherman2");
    let o = remora(&[
        "repro",
        "sherman",
        "--scale",
        "tiny",
        "--only",
        "sherman-factors",
        "--out",
        d2.to_str().unwrap(),
        "--quiet",
        "--check",
        tampered.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("sherman/write-throughput"), "{err}");
    assert_eq!(err.matches("\n  ").count(), 1, "one difference only: {err}");
    // `--seeds N` runs every series at seeds 1..=N.
    let d3 = dir("sherman3");
    ok(&remora(&[
        "repro",
        "sherman",
        "--scale",
        "tiny",
        "--only",
        "sherman-clients-a",
        "--seeds",
        "2",
        "--out",
        d3.to_str().unwrap(),
        "--quiet",
    ]));
    let pts: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(d3.join("sherman-clients-a.json")).unwrap())
            .unwrap();
    let seeds: Vec<u64> = pts.iter().map(|p| p["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds, vec![1, 2, 1, 2], "Sherman and FG+ at seeds 1 and 2");
    // An unknown experiment is refused before anything runs.
    let o = remora(&["repro", "sherman", "--only", "nope", "--out", out]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("sherman-factors"));
}

/// `--memory` runs each probe's bench as a child process and reads its peak RSS and CPU
/// (tiny key counts here: the plumbing is under test, not the figures).
#[test]
fn memory_probe_measures_child_processes() {
    let d = dir("memory");
    let out = d.to_str().unwrap();
    let o = remora(&[
        "repro", "erda", "--memory", "--scale", "tiny", "--out", out, "--quiet",
    ]);
    ok(&o);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("memory.json")).unwrap()).unwrap();
    let fits = m["fits"].as_array().unwrap();
    assert_eq!(fits.len(), 1, "erda has one index to probe: {m}");
    let f = &fits[0];
    assert_eq!(f["fit"]["index"], "erda");
    for run in f["fit"]["runs"].as_array().unwrap() {
        // Every child ran: a few MiB resident at least, some CPU.
        assert!(run["max_rss_bytes"].as_u64().unwrap() > 1 << 20, "{run}");
        assert!(run["cpu_s"].as_f64().unwrap() > 0.0, "{run}");
    }
    assert!(f["full_runs"].as_u64().unwrap() > 10, "{f}");
    assert!(m["machine_bytes"].as_u64().unwrap() > 1 << 28);
    let md = std::fs::read_to_string(d.join("memory.md")).unwrap();
    assert!(md.contains("How far `--scale full` goes"), "{md}");
    assert!(!d.join("report.md").exists(), "--memory runs no experiment");
    // An output directory that cannot be made is an error, not a panic.
    let bad = remora(&["repro", "erda", "--memory", "--out", "/proc/no-such-dir"]);
    assert!(!bad.status.success());
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("panicked"));
}

#[test]
fn bench_json_has_run_fields_and_sweeps() {
    let d = dir("bench");
    std::fs::create_dir_all(&d).unwrap();
    let j = d.join("b.json");
    ok(&remora(&[
        "bench",
        "--fabric",
        "sim",
        "--compute-nodes",
        "2",
        "--memory-nodes",
        "2",
        "--records",
        "300",
        "--operations",
        "300",
        "--warmup",
        "100",
        "--workload",
        "a",
        "--sweep",
        "clients=2,4",
        // The LOAD phase measured too (by default SMART's is bulk-loaded: no LOAD record).
        "--no-bulk-load",
        "--seed",
        "9",
        "--quiet",
        "--json",
        j.to_str().unwrap(),
    ]));
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(&j)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 4, "LOAD and run at each of 2 sweep points");
    let clients: Vec<u64> = recs
        .iter()
        .map(|r| r["cluster"]["clients"].as_u64().unwrap())
        .collect();
    assert_eq!(clients, vec![2, 2, 4, 4]);
    for r in &recs {
        assert_eq!(r["seed"], 9);
        assert_eq!(r["cluster"]["memory_nodes"], 2);
        assert!(r["model"]["link_gbps"].is_number());
        let cdf = r["latency_cdf"].as_array().unwrap();
        assert!(cdf.len() > 10);
        // Monotone in both latency and fraction, ending at 1.
        let v: Vec<(f64, f64)> = cdf
            .iter()
            .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
            .collect();
        assert!(v.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
        assert_eq!(v.last().unwrap().1, 1.0);
    }
    assert_eq!(recs[1]["warmup_ops"], 100);
    assert_eq!(recs[0]["warmup_ops"], 0, "no warm-up before LOAD");
    // Factor mode: `index` stays the index, the step has its own field.
    let f = d.join("f.json");
    ok(&remora(&[
        "bench",
        "--fabric",
        "sim",
        "--index",
        "sherman",
        "--factors",
        "--workloads",
        "a",
        "--records",
        "300",
        "--quiet",
        "--json",
        f.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(&f).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["index"], "sherman");
    assert_eq!(first["step"], "FG+");
    // Bad sweeps and a warm-up the fabric cannot run are refused before anything runs.
    for (bad, why) in [
        (
            &[
                "--fabric",
                "sim",
                "--sweep",
                "clients=3",
                "--compute-nodes",
                "2",
            ][..],
            "multiple of 2",
        ),
        (
            &["--fabric", "sim", "--sweep", "cores=1"][..],
            "unknown parameter",
        ),
        (
            &["--fabric", "soft", "--warmup", "10"][..],
            "--warmup runs on",
        ),
    ] {
        let mut args = vec!["bench", "--records", "100", "--quiet"];
        args.extend_from_slice(bad);
        let o = remora(&args);
        assert!(!o.status.success(), "{bad:?} was accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why), "{bad:?}: {err}");
    }
}

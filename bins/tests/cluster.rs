//! A cluster run end to end: one `remora memnode`, four `remora bench --cluster-size 4`
//! processes meeting at its barrier, and `remora merge` of their records.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REMORA: &str = env!("CARGO_BIN_EXE_remora");

struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn memnode(sock: &Path) -> Kid {
    let kid = Command::new(REMORA)
        .args(["memnode", "--listen", sock.to_str().unwrap()])
        .args(["--region-mib", "32", "--seconds", "120"])
        .stdout(Stdio::null())
        .spawn()
        .expect("starting remora memnode");
    let t = Instant::now();
    while !sock.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "memnode never came up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Kid(kid)
}

fn bench(sock: &Path, size: u64, rank: u64, json: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(REMORA);
    c.args(["bench", "--connect", sock.to_str().unwrap()])
        .args(["--index", "smart", "--workload", "a", "--records", "20000"])
        .args([
            "--operations",
            "20000",
            "--threads",
            "1",
            "--coroutines",
            "2",
        ])
        .args(["--no-pin", "--quiet", "--json", json.to_str().unwrap()])
        .args(["--cluster-size", &size.to_string()])
        .args(["--cluster-rank", &rank.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn records(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn four_processes_meet_at_the_memnode_and_their_records_merge() {
    let d = dir();
    let sock = d.join("m.sock");
    let _m = memnode(&sock);

    // A process alone in a cluster of 2 gives up with the count, and takes its arrival back
    // (else the run below would be released one process early and its last one stranded).
    let lone = bench(
        &sock,
        2,
        0,
        &d.join("lone.json"),
        &["--cluster-timeout", "0.5"],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&lone.stderr);
    assert!(!lone.status.success(), "a lone process must not run");
    assert!(err.contains("1 of 2"), "{err}");

    let files: Vec<PathBuf> = (0..4).map(|i| d.join(format!("r{i}.json"))).collect();
    let kids: Vec<Child> = (0..4u64)
        .map(|i| bench(&sock, 4, i, &files[i as usize], &[]).spawn().unwrap())
        .collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let merged = Command::new(REMORA)
        .arg("merge")
        .args(&files)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&merged.stdout).to_string();
    assert!(merged.status.success(), "{text}");

    let per: Vec<Vec<Value>> = files.iter().map(|f| records(f)).collect();
    for (phase, want_total) in [("load", Some(20000u64)), ("run", None)] {
        let recs: Vec<&Value> = per
            .iter()
            .map(|r| r.iter().find(|x| x["phase"] == phase).unwrap())
            .collect();
        let ops: Vec<u64> = recs.iter().map(|r| r["ops"].as_u64().unwrap()).collect();
        let sum: u64 = ops.iter().sum();
        if let Some(t) = want_total {
            assert_eq!(sum, t, "each process loads its share: {ops:?}");
        }
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(phase))
            .unwrap_or_else(|| panic!("no {phase} row in\n{text}"))
            .split_whitespace()
            .collect();
        assert_eq!(row[2], "4", "{text}");
        assert_eq!(row[3].parse::<u64>().unwrap(), sum, "merged ops: {text}");
        for (col, q) in [(5, "p50_ns"), (6, "p99_ns"), (7, "p999_ns")] {
            let v: f64 = row[col].parse().unwrap();
            let each: Vec<f64> = recs
                .iter()
                .map(|r| r["latency"][q].as_f64().unwrap())
                .collect();
            let lo = each.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = each.iter().cloned().fold(0.0, f64::max);
            assert!(
                (lo..=hi).contains(&v),
                "{phase} merged {q} {v} outside {each:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

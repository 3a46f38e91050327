//! `remora bench --churn` on the sim: the bytes in use are sampled over the run and the live
//! set reads back at the end.
use std::process::Command;

/// Runs a small churn of `index` on the sim; returns (exit success, the JSON record, stderr).
fn churn(
    index: &str,
    records: &str,
    operations: &str,
    region_mib: &str,
) -> (bool, serde_json::Value, String) {
    let json =
        std::env::temp_dir().join(format!("remora-churn-{}-{index}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "bench",
            "--fabric",
            "sim",
            "--index",
            index,
            "--churn",
            "--records",
            records,
            "--operations",
            operations,
            "--churn-samples",
            "10",
            "--region-mib",
            region_mib,
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .expect("running remora");
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    let _ = std::fs::remove_file(&json);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let rec = serde_json::from_str(text.lines().next().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("no JSON record ({e}); stderr: {stderr}"));
    (out.status.success(), rec, stderr)
}

fn totals(rec: &serde_json::Value) -> Vec<u64> {
    rec["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| {
            s["bytes_in_use"]
                .as_array()
                .expect("bytes_in_use")
                .iter()
                .map(|b| b.as_u64().unwrap())
                .sum()
        })
        .collect()
}

#[test]
fn sherman_churn_stays_flat_and_reads_back() {
    let (ok, rec, err) = churn("sherman", "2000", "20000", "64");
    assert!(ok, "churn failed: {err}");
    let t = totals(&rec);
    assert_eq!(t.len(), 11, "one sample at 0 and ten over the run: {rec}");
    assert!(t[0] > 0, "the allocator cursor was read: {t:?}");
    assert_eq!(t.first(), t.last(), "sherman reuses its memory: {t:?}");
    assert_eq!(rec["final_mismatches"], 0, "{rec}");
    assert_eq!(rec["resurrected"], 0, "{rec}");
    assert!(rec["samples"][3]["live_keys"] == 2000, "{rec}");
}

/// SMART reuses the memory of deleted leaves and replaced nodes (`core/src/smart/reclaim.rs`):
/// after a warm-up of one grace period its bytes in use stay flat under churn.
#[test]
fn smart_churn_stays_flat_and_reads_back() {
    let (ok, rec, err) = churn("smart", "2000", "40000", "64");
    assert!(ok, "churn failed: {err}");
    let t = totals(&rec);
    assert_eq!(t.len(), 11, "one sample at 0 and ten over the run: {rec}");
    // Allow the first grace period's worth of retired objects (one more chunk), no growth.
    assert!(t[2] <= t[0] + (1 << 20), "{t:?}");
    assert_eq!(t[2], *t.last().unwrap(), "smart reuses its memory: {t:?}");
    assert_eq!(rec["final_mismatches"], 0, "{rec}");
    assert_eq!(rec["resurrected"], 0, "{rec}");
}

/// A node that fills mid-run stops the churn with the allocator's error, and the samples
/// up to that point are still written (they are the finding).
#[test]
fn smart_churn_out_of_memory_keeps_the_samples() {
    // 6,000 keys nearly fill the 2 MiB region; the churn needs room for a grace period's
    // retired objects on top (SMART reuses memory, so a smaller live set would not fill it).
    let (ok, rec, _) = churn("smart", "6000", "100000", "2");
    assert!(!ok, "a full node fails the run: {rec}");
    let err = rec["error"].as_str().expect("the error is recorded");
    assert!(err.contains("is full"), "{err}");
    let t = totals(&rec);
    assert!(t.len() >= 2, "samples before the error: {rec}");
    assert_eq!(*t.last().unwrap(), 2 << 20, "full at the end: {t:?}");
    assert!(rec["final_mismatches"].is_null(), "{rec}");
}

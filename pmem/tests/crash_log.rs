//! The crash-testing recipe on a tiny log with a commit word: replay every crash image at
//! every persistence point, recover, and check that nothing acknowledged is lost. A
//! deliberately wrong append order must be caught.

use remora_pmem::{CrashState, PersistMem, PmemError, Recorder};

/// Layout: the commit word (number of committed payload bytes) at offset 0, payload from 64.
const COMMIT: usize = 0;
const PAYLOAD: usize = 64;
const SIZE: usize = 64 * 12;

/// Entries appended by the tests: lengths chosen to straddle cache lines.
fn entries() -> Vec<Vec<u8>> {
    [100usize, 37, 200, 8, 130]
        .iter()
        .enumerate()
        .map(|(e, &n)| (0..n).map(|i| (e * 50 + i % 50 + 1) as u8).collect())
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Order {
    /// Payload, persist, commit word, persist.
    Correct,
    /// Commit word first, then the payload, both persisted by one final persist.
    CommitFirst,
    /// Payload written, commit word written, both persisted together (one fence).
    OneFence,
}

/// Appends `entry` to the log in `m`; returns after the append is acknowledged.
fn append<M: PersistMem>(m: &M, entry: &[u8], order: Order) -> Result<(), PmemError> {
    let tail = m.load_u64(COMMIT)? as usize;
    let at = PAYLOAD + tail;
    let new_tail = (tail + entry.len()) as u64;
    match order {
        Order::Correct => {
            m.write(at, entry)?;
            m.persist(at, entry.len())?;
            m.store_u64(COMMIT, new_tail)?;
            m.persist(COMMIT, 8)?;
        }
        Order::CommitFirst => {
            m.store_u64(COMMIT, new_tail)?;
            m.persist(COMMIT, 8)?;
            m.write(at, entry)?;
            m.persist(at, entry.len())?;
        }
        Order::OneFence => {
            m.write(at, entry)?;
            m.store_u64(COMMIT, new_tail)?;
            m.flush(at, entry.len())?;
            m.flush(COMMIT, 8)?;
            m.fence();
        }
    }
    Ok(())
}

/// Recovery: reads the commit word and returns the committed payload.
fn recover<M: PersistMem>(m: &M) -> Result<Vec<u8>, String> {
    let tail = m.load_u64(COMMIT).map_err(|e| e.to_string())? as usize;
    let mut buf = vec![0u8; tail];
    m.read(PAYLOAD, &mut buf)
        .map_err(|e| format!("commit word {tail} points past the log: {e}"))?;
    Ok(buf)
}

/// Checks a recovered log: it must be exactly the first `j` entries for some `j >= acked`.
fn check(recovered: &[u8], acked: usize) -> Result<(), String> {
    let all = entries();
    let mut prefix = Vec::new();
    for j in 0..=all.len() {
        if j > 0 {
            prefix.extend_from_slice(&all[j - 1]);
        }
        if prefix.len() == recovered.len() {
            if prefix != recovered {
                return Err(format!(
                    "committed {j} entries but the payload is not complete"
                ));
            }
            if j < acked {
                return Err(format!("{acked} appends acknowledged, only {j} recovered"));
            }
            return Ok(());
        }
    }
    Err(format!(
        "commit word {} is on no entry boundary",
        recovered.len()
    ))
}

/// Runs every append with `order` under the recorder; then replays every crash image of every
/// persistence point (and of the final state) through recovery. Returns the number of images
/// checked and the failures found.
fn crash_test(order: Order) -> (usize, Vec<String>) {
    let r = Recorder::new(SIZE);
    r.record_points(true);
    let fences_per_append = match order {
        Order::Correct | Order::CommitFirst => 2,
        Order::OneFence => 1,
    };
    for e in entries() {
        append(&r, &e, order).expect("append in bounds");
    }
    let mut states: Vec<CrashState> = r.persistence_points();
    states.push(r.snapshot());
    let mut checked = 0;
    let mut failures = Vec::new();
    for s in &states {
        // Appends acknowledged before this state: those whose last fence had completed.
        let acked = (s.fences_completed() / fences_per_append) as usize;
        for c in s.crash_images(42, 256) {
            checked += 1;
            let after = Recorder::from_image(c.image);
            let verdict = recover(&after).and_then(|log| check(&log, acked));
            if let Err(e) = verdict {
                failures.push(format!(
                    "point {} lines {:?}: {e}",
                    s.fences_completed(),
                    c.reached_lines
                ));
            }
        }
    }
    (checked, failures)
}

#[test]
fn correct_log_append_survives_every_crash_image() {
    let (checked, failures) = crash_test(Order::Correct);
    eprintln!("correct order: {checked} crash images checked");
    assert!(checked > 20, "too few images: {checked}");
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn commit_before_payload_is_caught() {
    let (checked, failures) = crash_test(Order::CommitFirst);
    eprintln!(
        "commit-first: {} of {checked} crash images bad",
        failures.len()
    );
    assert!(
        failures.iter().any(|f| f.contains("not complete")),
        "the recorder should expose a committed but incomplete payload: {failures:#?}"
    );
}

#[test]
fn payload_and_commit_in_one_fence_is_caught() {
    let (checked, failures) = crash_test(Order::OneFence);
    eprintln!(
        "one fence: {} of {checked} crash images bad",
        failures.len()
    );
    assert!(!failures.is_empty());
}

#[test]
fn recovery_is_the_same_code_on_a_real_region() {
    #[cfg(target_os = "linux")]
    {
        use remora_pmem::{DramBacking, PersistentRegion};
        let r = PersistentRegion::dram(SIZE, DramBacking::Memfd, 0).unwrap();
        for e in entries() {
            append(&r, &e, Order::Correct).unwrap();
        }
        let log = recover(&r).unwrap();
        check(&log, entries().len()).unwrap();
        assert_eq!(log.len(), entries().iter().map(Vec::len).sum::<usize>());
    }
}

//! The crash-image recorder: durability rules, enumeration, persistence points.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use remora_pmem::recorder::EXHAUSTIVE_LIMIT;
use remora_pmem::{CrashState, PersistMem, PmemError, Recorder};

#[test]
fn unflushed_write_is_not_durable() {
    let r = Recorder::new(256);
    r.write(10, b"hello").unwrap();
    assert_eq!(&r.current_image()[10..15], b"hello");
    assert_eq!(&r.durable_image()[10..15], &[0; 5]);
    // A fence without a flush does not help.
    r.fence();
    assert_eq!(&r.durable_image()[10..15], &[0; 5]);
    assert_eq!(r.pending_lines(), 1);
    // But the line may have been evicted: some crash image has it.
    let s = r.snapshot();
    assert!(s.crash_images(0, 8).any(|c| &c.image[10..15] == b"hello"));
}

#[test]
fn flushed_unfenced_is_possible_but_not_durable_then_fence_makes_it_durable() {
    let r = Recorder::new(256);
    r.write(70, b"abc").unwrap();
    r.flush(70, 3).unwrap();
    assert_eq!(&r.durable_image()[70..73], &[0; 3]);
    let s = r.snapshot();
    assert_eq!(s.pending().len(), 1);
    assert!(s.pending()[0].flushed && !s.pending()[0].dirty);
    let images: Vec<_> = s.crash_images(0, 8).collect();
    assert_eq!(images.len(), 2);
    assert!(images.iter().any(|c| &c.image[70..73] == b"abc"));
    assert!(images.iter().any(|c| c.image[70..73] == [0; 3]));

    r.fence();
    assert_eq!(&r.durable_image()[70..73], b"abc");
    assert_eq!(r.pending_lines(), 0);
    assert_eq!(r.fences(), 1);
    // No pending line: the only crash image is the durable one.
    let s = r.snapshot();
    let only: Vec<_> = s.crash_images(0, 8).collect();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].image, r.durable_image());
}

#[test]
fn write_after_flush_keeps_the_flushed_version_only() {
    let r = Recorder::new(128);
    r.write(0, b"v1").unwrap();
    r.flush(0, 2).unwrap();
    r.write(0, b"v2").unwrap();
    r.fence();
    // The fence made v1 durable; v2 is still pending.
    assert_eq!(&r.durable_image()[0..2], b"v1");
    assert_eq!(&r.current_image()[0..2], b"v2");
    assert_eq!(r.pending_lines(), 1);
    r.persist(0, 2).unwrap();
    assert_eq!(&r.durable_image()[0..2], b"v2");
    assert_eq!(r.pending_lines(), 0);
}

#[test]
fn flush_covers_every_touched_line_only() {
    let r = Recorder::new(64 * 4);
    r.write(60, &[1; 72]).unwrap(); // lines 0, 1, 2
    assert_eq!(r.pending_lines(), 3);
    r.persist(64, 1).unwrap(); // line 1 only
    let d = r.durable_image();
    assert_eq!(d[59..64], [0; 5]);
    assert_eq!(d[64..128], [1; 64]);
    assert_eq!(d[128..132], [0; 4]);
    assert_eq!(r.pending_lines(), 2);
    r.persist(60, 72).unwrap();
    assert_eq!(r.durable_image(), r.current_image());
}

/// Builds a state with exactly `k` pending lines, line `i` holding byte `i + 1`.
fn state_with_pending(k: usize) -> CrashState {
    let r = Recorder::new(64 * k.max(1));
    for i in 0..k {
        r.write(i * 64, &[i as u8 + 1; 64]).unwrap();
        if i % 2 == 0 {
            r.flush(i * 64, 64).unwrap(); // mix flushed-unfenced and dirty lines
        }
    }
    r.snapshot()
}

#[test]
fn small_states_enumerate_every_subset() {
    for k in 0..=EXHAUSTIVE_LIMIT {
        let s = state_with_pending(k);
        assert_eq!(s.pending().len(), k);
        assert!(s.is_exhaustive());
        let images: Vec<_> = s.crash_images(99, 3).collect();
        assert_eq!(images.len(), 1 << k, "k={k}");
        let subsets: BTreeSet<Vec<usize>> =
            images.iter().map(|c| c.reached_lines.clone()).collect();
        assert_eq!(subsets.len(), 1 << k, "duplicate subsets for k={k}");
        for c in &images {
            for i in 0..k {
                let want = if c.reached_lines.contains(&i) {
                    i as u8 + 1
                } else {
                    0
                };
                assert!(c.image[i * 64..i * 64 + 64].iter().all(|&b| b == want));
            }
        }
        let distinct: BTreeSet<&Vec<u8>> = images.iter().map(|c| &c.image).collect();
        assert_eq!(distinct.len(), 1 << k);
    }
}

#[test]
fn large_states_are_sampled_boundedly_and_reproducibly() {
    let k = 20;
    let s = state_with_pending(k);
    assert!(!s.is_exhaustive());
    let a: Vec<_> = s.crash_images(7, 100).collect();
    assert_eq!(a.len(), 100);
    assert!(a[0].reached_lines.is_empty());
    assert_eq!(a[0].image, s.durable_image());
    assert_eq!(a[1].image, s.newest_image());
    for i in 0..k {
        assert_eq!(a[2 + i].reached_lines, vec![i], "singleton {i}");
        assert_eq!(a[2 + k + i].reached_lines.len(), k - 1);
        assert!(!a[2 + k + i].reached_lines.contains(&i));
    }
    let b: Vec<_> = s.crash_images(7, 100).collect();
    assert_eq!(a, b, "same seed, same images");
    let c: Vec<_> = s.crash_images(8, 100).collect();
    assert_ne!(
        a[2 + 2 * k..],
        c[2 + 2 * k..],
        "different seed, different samples"
    );
    assert_eq!(s.crash_images(7, 0).len(), 2);
}

#[test]
fn aligned_words_never_tear_but_line_crossing_writes_can() {
    let r = Recorder::new(256);
    r.store_u64(56, u64::MAX).unwrap(); // last word of line 0
    r.write(124, &[0xAB; 8]).unwrap(); // crosses lines 1 and 2
    let s = r.snapshot();
    let mut torn = false;
    for c in s.crash_images(0, 16) {
        let w = &c.image[56..64];
        assert!(w == [0; 8] || w == [0xFF; 8], "torn aligned word {w:?}");
        let x = &c.image[124..132];
        torn |= x != [0; 8] && x != [0xAB; 8];
    }
    assert!(
        torn,
        "an unaligned store across two lines should tear in some image"
    );
}

#[test]
fn persistence_points_are_captured_before_every_fence() {
    let r = Recorder::new(128);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = Arc::clone(&seen);
    r.set_fence_hook(move |s: &CrashState| seen2.lock().unwrap().push(s.fences_completed()));
    r.record_points(true);
    r.write(0, b"a").unwrap();
    r.persist(0, 1).unwrap();
    r.write(64, b"b").unwrap();
    r.persist(64, 1).unwrap();
    r.fence();
    let pts = r.persistence_points();
    assert_eq!(pts.len(), 3);
    assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2]);
    // Point 0: "a" pending, nothing durable.
    assert_eq!(pts[0].durable_image()[0], 0);
    assert_eq!(pts[0].newest_image()[0], b'a');
    // Point 1: "a" durable, "b" pending.
    assert_eq!(pts[1].durable_image()[0], b'a');
    assert_eq!(pts[1].durable_image()[64], 0);
    assert_eq!(pts[1].pending().len(), 1);
    // Point 2: nothing pending.
    assert!(pts[2].pending().is_empty());
    assert_eq!(pts[2].durable_image()[64], b'b');
    r.clear_fence_hook();
    r.fence();
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(r.persistence_points().len(), 4);
}

#[test]
fn recorder_words_and_bounds() {
    let r = Recorder::from_image(vec![0xFF; 64]);
    assert_eq!(r.durable_image(), vec![0xFF; 64]);
    assert_eq!(r.load_u64(0).unwrap(), u64::MAX);
    assert_eq!(r.cas_u64(8, 0, 5).unwrap(), u64::MAX);
    assert_eq!(r.pending_lines(), 0, "a failed CAS writes nothing");
    assert_eq!(r.cas_u64(8, u64::MAX, 5).unwrap(), u64::MAX);
    assert_eq!(r.load_u64(8).unwrap(), 5);
    assert_eq!(r.pending_lines(), 1);
    assert!(matches!(
        r.store_u64(60, 1),
        Err(PmemError::OutOfBounds { .. })
    ));
    assert!(matches!(r.load_u64(9), Err(PmemError::Misaligned { .. })));
    assert!(matches!(
        r.write(63, b"ab"),
        Err(PmemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        r.flush(0, usize::MAX),
        Err(PmemError::OutOfBounds { .. })
    ));
    let mut buf = [0u8; 2];
    assert!(matches!(
        r.read(usize::MAX, &mut buf),
        Err(PmemError::OutOfBounds { .. })
    ));
    // A region whose length is not a multiple of 64 has a short last line.
    let r = Recorder::new(100);
    r.write(90, &[3; 10]).unwrap();
    let s = r.snapshot();
    assert_eq!(s.pending()[0].newest.len(), 36);
    assert_eq!(s.crash_images(0, 4).count(), 2);
    r.persist(90, 10).unwrap();
    assert_eq!(r.durable_image()[90..], [3; 10]);
}

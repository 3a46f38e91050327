//! Property tests: the recorder against an independent replay oracle.
//!
//! The oracle keeps only the history of operations. The durable content of a line is found
//! by replaying the writes up to the last flush of that line that some later fence completed.

use proptest::prelude::*;
use remora_pmem::{PersistMem, Recorder};

const SIZE: usize = 64 * 6 + 20; // short last line on purpose

#[derive(Clone, Debug)]
enum Op {
    Write(usize, Vec<u8>),
    Flush(usize, usize),
    Fence,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SIZE, prop::collection::vec(any::<u8>(), 1..100)).prop_map(|(off, mut d)| {
            d.truncate(SIZE - off);
            Op::Write(off, d)
        }),
        2 => (0..SIZE, 1..200usize).prop_map(|(off, len)| Op::Flush(off, len.min(SIZE - off))),
        1 => Just(Op::Fence),
    ]
}

fn replay(ops: &[Op]) -> Vec<u8> {
    let mut img = vec![0u8; SIZE];
    for op in ops {
        if let Op::Write(off, d) = op {
            img[*off..off + d.len()].copy_from_slice(d);
        }
    }
    img
}

/// Oracle durable image after `ops`.
fn oracle_durable(ops: &[Op]) -> Vec<u8> {
    let mut durable = vec![0u8; SIZE];
    let last_fence = ops.iter().rposition(|o| matches!(o, Op::Fence));
    for line in 0..SIZE.div_ceil(64) {
        let (lo, hi) = (line * 64, ((line + 1) * 64).min(SIZE));
        let Some(f) = last_fence else { continue };
        // The last flush of this line before the last fence.
        let flush = ops[..f].iter().rposition(
            |o| matches!(o, Op::Flush(off, len) if *len > 0 && *off < hi && off + len > lo),
        );
        if let Some(i) = flush {
            durable[lo..hi].copy_from_slice(&replay(&ops[..i])[lo..hi]);
        }
    }
    durable
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn recorder_matches_replay_oracle(ops in prop::collection::vec(op(), 0..40)) {
        let r = Recorder::new(SIZE);
        for o in &ops {
            match o {
                Op::Write(off, d) => r.write(*off, d).unwrap(),
                Op::Flush(off, len) => r.flush(*off, *len).unwrap(),
                Op::Fence => r.fence(),
            }
        }
        let current = replay(&ops);
        prop_assert_eq!(r.current_image(), current.clone());
        let durable = oracle_durable(&ops);
        prop_assert_eq!(r.durable_image(), durable.clone());

        // Every crash image agrees with the durable image outside pending lines, and each
        // pending line is either its durable or its current content.
        let s = r.snapshot();
        let pending: Vec<usize> = s.pending().iter().map(|p| p.line).collect();
        for c in s.crash_images(1, 64) {
            for line in 0..SIZE.div_ceil(64) {
                let (lo, hi) = (line * 64, ((line + 1) * 64).min(SIZE));
                let got = &c.image[lo..hi];
                if c.reached_lines.contains(&line) {
                    prop_assert_eq!(got, &current[lo..hi]);
                } else {
                    prop_assert_eq!(got, &durable[lo..hi]);
                }
                if !pending.contains(&line) {
                    prop_assert_eq!(&durable[lo..hi], &current[lo..hi]);
                }
            }
        }

        // Persisting everything makes the current image durable.
        r.persist(0, SIZE).unwrap();
        prop_assert_eq!(r.durable_image(), current);
        prop_assert_eq!(r.pending_lines(), 0);
    }
}

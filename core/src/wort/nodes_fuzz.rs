//! WORT / WOART inner nodes and leaves fed mutated images: 1-3 words of a built tree's heap
//! (node headers, child words, NODE4/16 bitmaps and keys, NODE48 indexes, leaf headers) get
//! boundary values, then every read path runs over the damaged tree. The store is written
//! only by the memory node's CPU and carries no checksum, so a mutated image is already what
//! a buggy server or a torn persist leaves: the checks behind it (tags, alignment, depths,
//! prefix lengths, lengths) must give an error or a value, never a panic, an out-of-bounds
//! index or an unbounded walk. `REMORA_FUZZ_ROUNDS` sets the rounds (default 20,000, spread
//! over both kinds).
extern crate std;

use super::layout::{Kind, VALUE_MAX};
use super::tests::{Mem, key, rng};
use super::tree::Tree;
use crate::server::LocalRegion;
use std::panic::{AssertUnwindSafe, catch_unwind};

fn rounds() -> u64 {
    std::env::var("REMORA_FUZZ_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

/// A boundary value, or a small perturbation of `near`.
fn interesting(s: &mut u64, near: u64) -> u64 {
    let shift = rng(s) % 64;
    match rng(s) % 10 {
        0 => 0,
        1 => u64::MAX,
        2 => 1 << shift,
        3 => near ^ (1 << shift),
        4 => near.wrapping_add(rng(s) % 1024),
        5 => near.wrapping_sub(rng(s) % 1024),
        6 => (near & !0xff) | (rng(s) % 256),
        7 => (near & !0xff00) | ((rng(s) % 256) << 8),
        8 => (near & !0x3f) | (rng(s) % 64),
        _ => rng(s),
    }
}

fn fuzz(kind: Kind, seed: u64) {
    let r = Mem::new(1 << 20);
    let mut t = Tree::format(&r, kind, 1, 1).unwrap();
    let mut s = seed;
    let mut k = [0u8; 16];
    for i in 0..400u64 {
        let kl = key(&mut s, &mut k);
        t.put(
            &r,
            &k[..kl],
            &i.to_le_bytes()[..1 + (i % 8) as usize],
            false,
        )
        .unwrap();
    }
    // The used bytes: from the superblock to the last non-zero word.
    let mut good = std_alloc::vec![0u8; r.len() as usize];
    r.read(0, &mut good).unwrap();
    let lo = t.sb as usize;
    let hi = (good.iter().rposition(|&b| b != 0).unwrap() + 1).next_multiple_of(8);
    assert!(hi > lo + 4096, "the tree is too small to fuzz");
    let (mut kb, mut vb) = ([0u8; 16], [0u8; VALUE_MAX]);
    let mut errors = 0u64;
    for round in 0..rounds() / 2 {
        r.write(lo as u64, &good[lo..hi]).unwrap();
        let mut at = 0;
        for _ in 0..1 + rng(&mut s) % 3 {
            at = lo + (rng(&mut s) as usize % ((hi - lo) / 8)) * 8;
            let old = r.load_u64(at as u64).unwrap();
            let new = interesting(&mut s, old);
            r.store_u64(at as u64, new).unwrap();
        }
        let kl = key(&mut s, &mut k);
        let ok = catch_unwind(AssertUnwindSafe(|| {
            let Ok(mut t) = Tree::open(&r, kind, t.sb) else {
                errors += 1;
                return;
            };
            let key = &k[..kl];
            match t.get(&r, key) {
                Ok(Some(l)) => {
                    if let Ok((kl2, vl)) = t.read_leaf(&r, l, &mut kb, &mut vb) {
                        assert!(kl2 <= kb.len() && vl <= VALUE_MAX);
                    }
                }
                Ok(None) => {}
                Err(_) => errors += 1,
            }
            for excl in [false, true] {
                if let Ok(Some(l)) = t.next(&r, key, excl) {
                    let _ = t.read_leaf(&r, l, &mut kb, &mut vb);
                }
            }
            match rng(&mut s) % 3 {
                0 => errors += t.put(&r, key, b"v", false).is_err() as u64,
                1 => errors += t.delete(&r, key).is_err() as u64,
                _ => errors += t.recover(&r).is_err() as u64,
            }
        }));
        assert!(
            ok.is_ok(),
            "{kind:?}: a read or write panicked on round {round} (seed {seed:#x}), word at {at:#x} mutated"
        );
    }
    // Not a vacuous run: some mutations are caught as corruption.
    assert!(
        errors > 0,
        "{kind:?}: no mutation was refused: the fuzzer misses the nodes"
    );
}

#[test]
fn wort_nodes_mutated() {
    fuzz(Kind::Wort, 0x3017_0001);
}

#[test]
fn woart_nodes_mutated() {
    fuzz(Kind::Woart, 0x3017_0002);
}

/// What `wort_nodes_mutated` found: a WORT node's child word naming another key's leaf that
/// agrees with the inserted key on every digit below the node ("a" and "b" differ only in
/// digit 1). The insert walked past the key's last digit (`index out of bounds: the len is 17
/// but the index is 17` in `Kind::digit`); it now refuses the leaf as misplaced.
#[test]
fn wort_put_over_a_misplaced_leaf_is_refused() {
    use super::layout::{Ptr, SB_ROOT};
    use super::nodes;
    let r = Mem::new(1 << 20);
    let mut t = Tree::format(&r, Kind::Wort, 1, 1).unwrap();
    t.put(&r, b"a", b"1", false).unwrap();
    t.put(&r, b"b", b"2", false).unwrap();
    let root = Ptr::decode(r.load_u64(t.sb + SB_ROOT).unwrap()).unwrap();
    assert!(matches!(root, Ptr::N16Direct(_)), "{root:?}");
    // 'a' = 0x61 and 'b' = 0x62: the node sits at digit 1; its child 2 now names a's leaf.
    let a = nodes::find_child(&r, root, 1).unwrap().unwrap();
    let b = nodes::find_child(&r, root, 2).unwrap().unwrap();
    r.store_u64(b, r.load_u64(a).unwrap()).unwrap();
    assert!(t.put(&r, b"b", b"3", false).is_err());
    assert!(t.put(&r, b"a", b"4", false).is_ok());
}

/// What `wort_nodes_mutated` and `woart_nodes_mutated` found in the dev profile: a child word
/// whose offset is near 2^64 overflowed the heap bounds check (`attempt to add with overflow`
/// in `Tree::check`; in release the sum wrapped and the check passed). It is now refused.
#[test]
fn a_child_word_near_the_top_of_the_address_space_is_refused() {
    use super::layout::{Ptr, SB_ROOT};
    for kind in [Kind::Wort, Kind::Woart] {
        let r = Mem::new(1 << 20);
        let mut t = Tree::format(&r, kind, 1, 1).unwrap();
        t.put(&r, b"a", b"1", false).unwrap();
        for p in [Ptr::Leaf(!0x3f), Ptr::N256(!0x3f)] {
            r.store_u64(t.sb + SB_ROOT, p.encode()).unwrap();
            assert!(t.get(&r, b"a").is_err(), "{kind:?} {p:?}");
            assert!(t.put(&r, b"a", b"2", false).is_err(), "{kind:?} {p:?}");
        }
    }
}

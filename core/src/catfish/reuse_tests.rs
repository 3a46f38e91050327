//! Node reuse under one-sided readers ([`super::reclaim`]).
//!
//! A served tree reuses the nodes it replaced once their grace period of epochs is over; a
//! reader may be slower than that. Here an offloading search is replayed against a batch of
//! several operations of a tree that steps its epoch after every retirement (the most
//! aggressive reuse): it takes its epoch from a superblock READ that completed before its
//! first node READ, reads the root pointer, then every node at its own later moment, each
//! 64-byte segment of a node READ at its own moment in shuffled order (a torn or mid-write
//! image is read again later), and restarts when a node was born after its epoch's grace.
//! Every answer it gives must hold every entry present throughout the batch that meets its
//! window and nothing never present. The mutant ignores the birth epoch and must be caught
//! giving wrong answers; and the tree must stay within a small factor of its live nodes.
extern crate std;
use super::tests::{LogRegion, Logged};
use super::tree::Tree;
use crate::fabric::SegmentOrder;
use core::cell::RefCell;
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::{
    META_EPOCH_OFFSET, META_ROOT_OFFSET, Node, REUSE_GRACE, Rect, TreeKind, node_len,
};
use std::collections::BTreeSet;
use std::vec;
use std::vec::Vec;

struct Replay<'a> {
    base: &'a [u8],
    log: &'a [Logged],
}

impl Replay<'_> {
    /// Bytes `[at, at + len)` after the first `moment` writes of the batch.
    fn read(&self, at: u64, len: usize, moment: usize) -> Vec<u8> {
        let mut img = self.base[at as usize..at as usize + len].to_vec();
        for (w, _, new) in &self.log[..moment] {
            let (lo, hi) = (at.max(*w), (at + len as u64).min(*w + new.len() as u64));
            if lo < hi {
                img[(lo - at) as usize..(hi - at) as usize]
                    .copy_from_slice(&new[(lo - w) as usize..(hi - w) as usize]);
            }
        }
        img
    }

    fn word(&self, at: u64, moment: usize) -> u64 {
        u64::from_le_bytes(self.read(at, 8, moment).try_into().unwrap())
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// What one replayed search came to.
enum Outcome {
    Found(BTreeSet<(Rect, u64)>),
    /// It met a node born after its epoch's grace and would start over.
    Restart,
    /// It could not go on (an image never decoded before the batch ended, a child at the
    /// wrong level): the real client reports an error, which is no wrong answer, but the
    /// mutant's only such cause is a reused node.
    Stuck,
}

/// One schedule of a search for `window` (the birth check skipped by the mutant).
fn search(
    rp: &Replay<'_>,
    meta: u64,
    fanout: usize,
    window: &Rect,
    rng: &mut u64,
    check_birth: bool,
) -> Outcome {
    let n = rp.log.len();
    let len = node_len(fanout);
    let pick = |lo: usize, rng: &mut u64| lo + (xorshift(rng) % (n - lo + 1) as u64) as usize;
    // The epoch of a READ that completed before the search's first READ was posted.
    let me = pick(0, rng);
    let epoch0 = rp.word(meta + META_EPOCH_OFFSET, me);
    let m0 = pick(me, rng);
    let root = rp.word(meta + META_ROOT_OFFSET, m0);
    let mut pending = vec![(GlobalAddr::from_raw(root).offset(), m0, u16::MAX)];
    let mut found = BTreeSet::new();
    while let Some((off, after, level)) = pending.pop() {
        let mut m = pick(after, rng);
        let (node, done) = loop {
            // Each segment observes memory at its own moment from `m` on, in shuffled order.
            let mut img = vec![0u8; len];
            let mut order = xorshift(rng);
            let mut when = xorshift(rng);
            let mut last = m;
            SegmentOrder::Shuffled.for_each_segment(off, len, false, &mut order, |s, e| {
                last = pick(last, &mut when).min(m + 3);
                img[s..e].copy_from_slice(&rp.read(off + s as u64, e - s, last));
            });
            match Node::decode_with(&img, fanout) {
                Ok(node) => break (node, last),
                Err(_) if m < n => m += 1,
                Err(_) => return Outcome::Stuck,
            }
        };
        if check_birth && node.born_after_grace(epoch0) {
            return Outcome::Restart;
        }
        if level != u16::MAX && node.level + 1 != level {
            return Outcome::Stuck;
        }
        for e in node.entries().iter().filter(|e| e.rect.intersects(window)) {
            if node.level == 0 {
                found.insert((e.rect, e.ptr));
            } else {
                // The child's READ is posted once the parent's completed.
                pending.push((GlobalAddr::from_raw(e.ptr).offset(), done, node.level));
            }
        }
    }
    Outcome::Found(found)
}

fn all(t: &mut Tree, region: &LogRegion) -> BTreeSet<(Rect, u64)> {
    let mut hits = Vec::new();
    let everything = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
    t.search(region, &everything, &mut hits).unwrap();
    hits.into_iter().map(|e| (e.rect, e.ptr)).collect()
}

#[derive(Debug, Default)]
struct Tally {
    answers: u64,
    restarts: u64,
    stuck: u64,
    /// Answers missing an entry present throughout, or holding one never present.
    wrong: u64,
    reused: u64,
    carved: u64,
    live: u64,
}

/// Batches of `ops` inserts and deletes, each replayed against 12 searches.
fn run(kind: TreeKind, check_birth: bool) -> Tally {
    let fanout = 6;
    let region = LogRegion {
        mem: RefCell::new(vec![0u8; 4 << 20]),
        log: RefCell::new(Vec::new()),
    };
    let mut t = Tree::format_kind(&region, 4096, (4 << 20) - 4096, fanout, kind).unwrap();
    t.set_reclaim_batch(1);
    let mut rng = 0xC0FF_EE00_D15E_A5E5u64 ^ kind as u64;
    let mut live: Vec<(Rect, u64)> = Vec::new();
    let mut tally = Tally::default();
    let mut id = 0u64;
    for batch in 0..150u64 {
        let before = all(&mut t, &region);
        let base = region.mem.borrow().clone();
        region.log.borrow_mut().clear();
        let mut inserted = BTreeSet::new();
        for _ in 0..6 {
            if live.len() < 80 || xorshift(&mut rng).is_multiple_of(2) {
                let (x, y) = (
                    (xorshift(&mut rng) % 1000) as i32,
                    (xorshift(&mut rng) % 1000) as i32,
                );
                let rect = Rect::new(x, y, x + 20, y + 20).unwrap();
                t.insert(&region, rect, id).unwrap();
                live.push((rect, id));
                inserted.insert((rect, id));
                id += 1;
            } else {
                let k = (xorshift(&mut rng) % live.len() as u64) as usize;
                let (rect, id) = live.swap_remove(k);
                assert!(t.delete(&region, rect, id).unwrap());
            }
        }
        let after = all(&mut t, &region);
        let log = region.log.borrow();
        if batch < 15 || log.is_empty() {
            continue;
        }
        let rp = Replay {
            base: &base,
            log: &log,
        };
        // Ids are never reused: in both snapshots means present throughout the batch.
        let throughout: BTreeSet<_> = before.intersection(&after).copied().collect();
        for _ in 0..12 {
            let (x, y) = (
                (xorshift(&mut rng) % 900) as i32,
                (xorshift(&mut rng) % 900) as i32,
            );
            let window = Rect::new(x, y, x + 300, y + 300).unwrap();
            match search(&rp, t.meta(), fanout, &window, &mut rng, check_birth) {
                Outcome::Restart => tally.restarts += 1,
                Outcome::Stuck => tally.stuck += 1,
                Outcome::Found(got) => {
                    tally.answers += 1;
                    let missed = throughout
                        .iter()
                        .any(|e| e.0.intersects(&window) && !got.contains(e));
                    let ghost = got
                        .iter()
                        .any(|e| !before.contains(e) && !inserted.contains(e));
                    if missed || ghost {
                        tally.wrong += 1;
                    }
                }
            }
        }
    }
    tally.reused = t.reused();
    tally.carved = t.nodes();
    tally.live = t.check(&region).unwrap().nodes;
    tally
}

#[test]
fn a_slow_reader_never_takes_a_reused_node_for_the_one_it_wanted() {
    for kind in [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert] {
        let t = run(kind, true);
        std::println!("{kind:?}: {t:?}");
        assert!(t.reused > 100, "{kind:?}: only {} nodes reused", t.reused);
        assert!(t.answers > 800, "{kind:?}: only {} answers", t.answers);
        assert_eq!(t.wrong, 0, "{kind:?}: wrong answers: {t:?}");
        // A real client reports a stuck search as an error; with the check it never is.
        assert_eq!(t.stuck, 0, "{kind:?}: {t:?}");
        // Reuse keeps the region near the live tree (one retirement per epoch here).
        assert!(t.carved <= 2 * t.live + 16, "{kind:?}: {t:?}");
    }
    // Without the birth check a slow reader reads reused nodes as the ones it wanted.
    let mut caught = 0;
    for kind in [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert] {
        let t = run(kind, false);
        std::println!("no birth check, {kind:?}: {t:?}");
        caught += t.wrong;
    }
    assert!(caught > 0, "no wrong answer from reading reused nodes");
}

/// A recovered tree gets its arenas back and reuses what its previous life retired or left
/// ready, but only born past any epoch a reader from before the restart can hold: after the
/// restart, old memory changes only inside a node the tree links at the end, and one that
/// was not linked at the restart (reused memory) is born at or after the recovered epoch,
/// which is the old one plus `REUSE_GRACE + 1` (a reader from before holds at most the old
/// one plus 1, and restarts on it). The epoch only grows.
#[test]
fn a_recovered_tree_reuses_what_its_previous_life_retired_born_past_its_readers() {
    use super::tree::tests::mem;
    use remora_layouts::catfish::MAX_LEVEL;
    let fanout = 6;
    let len = node_len(fanout) as u64;
    let r = mem(4 << 20);
    let old_end = 1u64 << 20;
    let mut t = Tree::format_kind(&r, 4096, old_end - 4096, fanout, TreeKind::RStar).unwrap();
    t.set_reclaim_batch(4);
    let rect = |i: u64| {
        let (x, y) = ((i * 7919 % 5000) as i32, (i * 104_729 % 5000) as i32);
        Rect::new(x, y, x + 30, y + 30).unwrap()
    };
    for i in 0..1500 {
        t.insert(&r, rect(i), i).unwrap();
        if i % 3 == 0 {
            assert!(t.delete(&r, rect(i / 2), i / 2).unwrap() || i / 2 % 3 == 0);
        }
    }
    let (waiting, ready) = t.reclaiming();
    assert!(t.reused() > 0 && waiting + ready > 0, "{waiting} {ready}");
    let epoch = t.epoch();
    let before: Vec<u64> = (0..old_end / 8)
        .map(|w| crate::server::LocalRegion::load_u64(&r, w * 8).unwrap())
        .collect();
    let (mut t, report) = Tree::recover(&r).unwrap().unwrap();
    let epoch = epoch + REUSE_GRACE + 1;
    assert_eq!(t.epoch(), epoch);
    // The nodes the recovered tree links.
    let mut linked = BTreeSet::new();
    let mut stack = vec![t.root_offset()];
    while let Some(off) = stack.pop() {
        assert!(linked.len() as u64 <= report.nodes && (linked.len() as u16) < u16::MAX);
        linked.insert(off);
        let n = super::tree::read_node(&r, off, fanout).unwrap();
        assert!(n.level <= MAX_LEVEL);
        if n.level > 0 {
            stack.extend(
                n.entries()
                    .iter()
                    .map(|e| GlobalAddr::from_raw(e.ptr).offset()),
            );
        }
    }
    assert_eq!(linked.len() as u64, report.nodes);
    // The new life's memory: one fresh arena past everything the old one had.
    t.grow(&r, old_end, 2 << 20).unwrap();
    for i in 1500..3000 {
        t.insert(&r, rect(i), i).unwrap();
        if i % 3 == 0 {
            t.delete(&r, rect(i - 700), i - 700).unwrap();
        }
    }
    assert!(t.reused() > 0, "the new life reused nothing");
    // The nodes linked now.
    let mut now = BTreeSet::new();
    let mut stack = vec![t.root_offset()];
    while let Some(off) = stack.pop() {
        now.insert(off);
        let n = super::tree::read_node(&r, off, fanout).unwrap();
        if n.level > 0 {
            stack.extend(
                n.entries()
                    .iter()
                    .map(|e| GlobalAddr::from_raw(e.ptr).offset()),
            );
        }
    }
    // A node linked now either is an image of the previous life (linked at the restart,
    // maybe rewritten in place: same birth) or was written fresh since, born late enough.
    let mut reborn = 0;
    for &off in &now {
        let birth = super::tree::read_node(&r, off, fanout).unwrap().birth();
        if linked.contains(&off) {
            let w = (off / 8) as usize;
            let old: Vec<u8> = before[w..w + len as usize / 8]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            let old = Node::decode_with(&old, fanout).unwrap().birth();
            assert!(
                birth == old || birth >= epoch,
                "node {off}: birth {old} -> {birth}"
            );
        } else {
            assert!(
                birth >= epoch,
                "node {off} written since the restart at birth {birth}"
            );
            if off < old_end {
                reborn += 1;
            }
        }
    }
    assert!(
        reborn > 0,
        "no memory of the previous life (retired, ready or free) was reused"
    );
    let report = t.check(&r).unwrap();
    assert!(report.entries > 1500, "{report:?}");
}

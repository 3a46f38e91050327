//! Tests of the server-side tree ([`super`]): a plain-memory region, arenas, check and
//! recover, and the tree against brute force.
use super::*;
use remora_layouts::catfish::NODE_LEN;

/// A region in plain memory: the server-side tree tested without a fabric.
pub(in crate::catfish) struct MemRegion(Vec<core::sync::atomic::AtomicU64>);

impl LocalRegion for MemRegion {
    fn node(&self) -> remora_layouts::NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.0.len() as u64 * 8
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), crate::FabricError> {
        for (k, chunk) in buf.chunks_mut(8).enumerate() {
            let w = self.load_u64(offset + 8 * k as u64)?.to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), crate::FabricError> {
        for (k, chunk) in data.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.store_u64(offset + 8 * k as u64, u64::from_le_bytes(w))?;
        }
        Ok(())
    }
    fn load_u64(&self, offset: u64) -> Result<u64, crate::FabricError> {
        let w = self
            .0
            .get((offset / 8) as usize)
            .ok_or(crate::server::out_of_range(0, offset, 8))?;
        Ok(w.load(core::sync::atomic::Ordering::Acquire))
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), crate::FabricError> {
        let w = self
            .0
            .get((offset / 8) as usize)
            .ok_or(crate::server::out_of_range(0, offset, 8))?;
        w.store(value, core::sync::atomic::Ordering::Release);
        Ok(())
    }
    fn cas_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, crate::FabricError> {
        let w = self
            .0
            .get((offset / 8) as usize)
            .ok_or(crate::server::out_of_range(0, offset, 8))?;
        Ok(
            match w.compare_exchange(
                current,
                new,
                core::sync::atomic::Ordering::AcqRel,
                core::sync::atomic::Ordering::Acquire,
            ) {
                Ok(v) | Err(v) => v,
            },
        )
    }
}

pub(in crate::catfish) fn mem(bytes: usize) -> MemRegion {
    MemRegion(
        (0..bytes / 8)
            .map(|_| core::sync::atomic::AtomicU64::new(0))
            .collect(),
    )
}

/// Issue 14.1: the overlap check used the arenas' free tails, so an arena naming the
/// superblock and the root was accepted.
#[test]
fn grow_refuses_memory_the_tree_already_has() {
    let r = mem(1 << 20);
    let mut t = Tree::format(&r, 4096, 8192).unwrap();
    let refused = |t: &mut Tree, base: u64, len: u64| {
        assert!(
            matches!(t.grow(&r, base, len), Err(CatfishError::Layout(_))),
            "[{base}, +{len}) accepted"
        );
    };
    refused(&mut t, 4096, 480); // the superblock and the root
    refused(&mut t, 4096 + 64, NODE_LEN as u64); // the root alone
    refused(&mut t, 4096 + 4096, 4096); // the free tail
    refused(&mut t, 4000, 4096); // straddles the start
    refused(&mut t, 4096 + 8000, 4096); // straddles the end
    refused(&mut t, 1 << 19, 100); // smaller than a node
    t.grow(&r, 4096 + 8192, 4096).unwrap(); // right after: fine
    t.grow(&r, 64 << 10, 4096).unwrap(); // and before a later one
    refused(&mut t, 60 << 10, 8192);
    refused(&mut t, 4096 + 8192 + 64, 512);
    // The tree still works and still opens.
    for id in 0..200u64 {
        let x = (id * 37 % 1000) as i32;
        let rect = Rect::new(x, x, x + 5, x + 5).unwrap();
        match t.insert(&r, rect, id) {
            Err(CatfishError::Full) => {
                t.grow(&r, (128 << 10) + id * 8192, 8192).unwrap();
                t.insert(&r, rect, id).unwrap();
            }
            other => other.unwrap(),
        }
    }
    let (_, report) = Tree::recover(&r).unwrap().unwrap();
    assert_eq!(report.entries, 200);
}

/// Issue 14.3: the tree was capped at 64 arenas whatever the region.
#[test]
fn the_tree_takes_as_many_arenas_as_the_region_holds() {
    let r = mem(8 << 20);
    let chunk = 2048u64;
    let mut next = 4096u64;
    let mut t = Tree::format(&r, next, chunk).unwrap();
    next += chunk;
    let n = 4000u64;
    for id in 0..n {
        let x = ((id * 7919) % 100_000) as i32;
        let y = ((id * 104_729) % 100_000) as i32;
        let rect = Rect::new(x, y, x + 50, y + 50).unwrap();
        loop {
            match t.insert(&r, rect, id) {
                Ok(()) => break,
                Err(CatfishError::Full) => {
                    t.grow(&r, next, chunk).unwrap();
                    next += chunk;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(
        t.arenas() > 64,
        "only {} arenas (the old cap was 64)",
        t.arenas()
    );
    let (depth, total, _) = check(&r, t.root, true);
    assert_eq!(total, n);
    let report = t.check(&r).unwrap();
    assert_eq!((report.entries, report.height), (n, depth + 1));
    let mut hits = Vec::new();
    t.search(
        &r,
        &Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap(),
        &mut hits,
    )
    .unwrap();
    assert_eq!(hits.len() as u64, n);
}

#[test]
fn check_and_recover_find_a_broken_tree() {
    let r = mem(1 << 20);
    assert!(Tree::recover(&r).unwrap().is_none(), "no tree yet");
    let mut t = Tree::format(&r, 4096, 256 << 10).unwrap();
    for id in 0..300u64 {
        let x = (id * 31 % 3000) as i32;
        t.insert(&r, Rect::new(x, 0, x + 3, 9).unwrap(), id)
            .unwrap();
    }
    let (_, report) = Tree::recover(&r).unwrap().unwrap();
    assert_eq!(report.entries, 300);
    assert!(report.height >= 2 && report.underfull == 0, "{report:?}");
    // A child rectangle that escapes its parent's entry.
    let root = read_node(&r, t.root, FANOUT).unwrap();
    let child = GlobalAddr::from_raw(root.entries[0].ptr).offset();
    let mut c = read_node(&r, child, FANOUT).unwrap();
    c.entries[0].rect = Rect::new(-1_000_000, 0, -999_999, 1).unwrap();
    write_in_place(&r, child, &mut c).unwrap();
    assert!(matches!(Tree::recover(&r), Err(CatfishError::Corrupt(_))));
    // A node that no longer decodes.
    r.store_u64(child + 64, 0xdead).unwrap();
    assert!(matches!(Tree::recover(&r), Err(CatfishError::Layout(_))));
}

/// Checks the R-tree invariants below `off` (default fanout).
fn check(region: &MemRegion, off: u64, root: bool) -> (u16, u64, Option<Rect>) {
    check_with(region, off, root, FANOUT)
}

/// Checks the R-tree invariants below `off`; returns (leaf depth, entries, mbr).
pub(in crate::catfish) fn check_with(
    region: &MemRegion,
    off: u64,
    root: bool,
    fanout: usize,
) -> (u16, u64, Option<Rect>) {
    let node = read_node(region, off, fanout).unwrap();
    assert_eq!(node.fanout as usize, fanout);
    if !root {
        assert!(node.count as usize >= min_fill(fanout), "underfull node");
    }
    if node.level == 0 {
        return (0, node.count as u64, node.mbr());
    }
    let mut total = 0;
    for e in node.entries() {
        let (depth, n, mbr) =
            check_with(region, GlobalAddr::from_raw(e.ptr).offset(), false, fanout);
        assert_eq!(depth + 1, node.level, "leaves at different depths");
        let mbr = mbr.unwrap();
        assert_eq!(e.rect.union(&mbr), e.rect, "entry does not cover its child");
        total += n;
    }
    (node.level, total, node.mbr())
}

#[test]
fn tree_matches_brute_force_and_keeps_its_invariants() {
    brute_force(FANOUT, 3000);
}

/// Issue 14.5: the node size is a run-time parameter; the paper's fanouts.
#[test]
fn trees_of_the_papers_fanouts_match_brute_force() {
    for fanout in [15, 30, 70, 130] {
        brute_force(fanout, 2000);
    }
    let r = mem(1 << 20);
    for bad in [0, 3, 131, 1000] {
        assert!(
            Tree::format_with(&r, 4096, 64 << 10, bad).is_err(),
            "fanout {bad}"
        );
    }
}

fn brute_force(fanout: usize, n: u64) {
    let region = MemRegion(
        (0..(8 << 20) / 8)
            .map(|_| core::sync::atomic::AtomicU64::new(0))
            .collect(),
    );
    // Small arenas, so the tree must be given more as it grows.
    let mut t = Tree::format_with(&region, 4096, 64 << 10, fanout).unwrap();
    assert_eq!(Tree::recover(&region).unwrap().unwrap().0.fanout(), fanout);
    let mut grows = 0u64;
    assert!(matches!(
        t.grow(&region, 4096 + 512, 4096),
        Err(CatfishError::Layout(_))
    ));
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut all = Vec::new();
    let mut hits = Vec::new();
    for id in 0..n {
        let (x, y) = ((next() % 10_000) as i32, (next() % 10_000) as i32);
        let (w, h) = ((next() % 300) as i32, (next() % 300) as i32);
        let r = Rect::new(x, y, x + w, y + h).unwrap();
        match t.insert(&region, r, id) {
            Ok(()) => {}
            Err(CatfishError::Full) => {
                grows += 1;
                t.grow(&region, (1 << 20) + grows * (64 << 10), 64 << 10)
                    .unwrap();
                t.insert(&region, r, id).unwrap();
            }
            Err(e) => panic!("{e}"),
        }
        all.push((r, id));
        if id % 500 == 499 {
            let (_, n, _) = check_with(&region, t.root, true, fanout);
            assert_eq!(n, id + 1, "entries lost or duplicated");
            for _ in 0..50 {
                let (x, y) = ((next() % 10_000) as i32, (next() % 10_000) as i32);
                let q = Rect::new(x, y, x + 700, y + 400).unwrap();
                hits.clear();
                t.search(&region, &q, &mut hits).unwrap();
                let mut got: Vec<u64> = hits.iter().map(|e| e.ptr).collect();
                got.sort_unstable();
                let want: Vec<u64> = all
                    .iter()
                    .filter(|(r, _)| r.intersects(&q))
                    .map(|&(_, i)| i)
                    .collect();
                assert_eq!(got, want);
            }
        }
    }
    let min_level = if fanout < 70 { 2 } else { 1 };
    assert!(
        read_node(&region, t.root, fanout).unwrap().level >= min_level,
        "the root split more than once"
    );
}

/// Issue 22: a Hilbert insert recomputed every entry's key of each node it rewrote and, for
/// a child the transaction had changed, that child's keys down to its leaves, at each level
/// and again at the commit (~30 leaf keys per level, ~270 per insert at height 4). Now each
/// node's largest Hilbert value (LHV) is stored and only the path's are updated: a few keys
/// per insert (its own, a binary search of its leaf, the leaf's LHV), a node's worth when
/// the leaf splits. The stored LHVs stay those a full recomputation finds.
#[test]
fn hilbert_insert_computes_o_path_keys_and_keeps_lhvs_exact() {
    use core::sync::atomic::Ordering::Relaxed;
    let r = mem(96 << 20);
    let fanout = remora_layouts::catfish::FANOUT;
    let mut t = Tree::format_kind(&r, 4096, 90 << 20, fanout, TreeKind::Hilbert).unwrap();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut rect = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let (x, y) = ((rng % 1_000_000) as i32, ((rng >> 32) % 1_000_000) as i32);
        Rect::new(x, y, x + ((rng >> 20) % 50) as i32, y + 10).unwrap()
    };
    let mut placed = Vec::new();
    for id in 0..50_000u64 {
        let q = rect();
        t.insert(&r, q, id).unwrap();
        placed.push((q, id));
    }
    let height = t.check(&r).unwrap().height as u64;
    let (mut most, mut total) = (0u64, 0u64);
    let n = 2_000u64;
    for id in 50_000..50_000 + n {
        let before = t.keys.load(Relaxed);
        t.insert(&r, rect(), id).unwrap();
        let k = t.keys.load(Relaxed) - before;
        most = most.max(k);
        total += k;
    }
    let f = fanout as u64;
    assert!(
        total <= n * (height + f / 2),
        "{} keys per insert at height {height} (most {most})",
        total as f64 / n as f64
    );
    assert!(most <= 3 * f + 2 * height, "{most} keys in one insert");
    // Deletes (condense-tree reinserts) keep them exact too.
    for (q, id) in placed.iter().step_by(7) {
        assert!(t.delete(&r, *q, *id).unwrap());
    }
    let rep = t.check(&r).unwrap();
    assert_eq!(
        rep.entries,
        50_000 + n - placed.iter().step_by(7).count() as u64
    );
    let stored = t.lhv.clone();
    t.lhv.clear();
    t.rebuild_lhv(&r, t.root, 0).unwrap();
    assert!(t.lhv.len() as u64 == rep.nodes);
    for (off, v) in &t.lhv {
        assert_eq!(stored.get(off), Some(v), "node {off}'s stored LHV");
    }
}

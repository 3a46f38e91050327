//! A restarted server gets its tree's free space back ([`super::arenas`]).
//!
//! - Crash-restart cycles with churn between them: the memory the tree was given stays
//!   within a small factor of its live nodes (before arena records, every restart lost the
//!   free and retired nodes and the arenas' tails, and the clients granted new chunks).
//! - A recovered tree whose previous life left retired and ready nodes (overwritten with
//!   garbage here: free memory is never trusted) and mailbox blocks answers every query as an
//!   oracle does, reuses that memory without growing, and writes every reused node born past
//!   any epoch a reader of the previous life can hold.
//! - Every crash image of an operation (un-persisted writes lost) recovers to the tree before
//!   or after it, and the recovered tree, carving from what the crash left free (nodes of the
//!   cut-short operation among them), stays right through more operations and another restart.
extern crate std;
use super::CatfishError;
use super::tree::{Tree, read_node};
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use core::cell::{Cell, RefCell};
use remora_layouts::catfish::{
    CLIENT_BLOCK_LEN, META_EPOCH_OFFSET, REUSE_GRACE, Rect, TreeKind, node_len,
};
use remora_layouts::{GlobalAddr, NodeId};
use std::collections::{BTreeMap, BTreeSet};
use std::format;
use std::vec;
use std::vec::Vec;

const KINDS: [TreeKind; 3] = [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert];
/// Where the first arena starts.
const BASE: u64 = 4096;

/// A region in plain memory that can log its writes and the points where they were made
/// durable, so that any crash image (the writes up to a persist point) can be rebuilt.
struct CrashLog {
    mem: RefCell<Vec<u8>>,
    logging: Cell<bool>,
    log: RefCell<Vec<(u64, Vec<u8>)>>,
    /// Writes logged when each persist came.
    points: RefCell<Vec<usize>>,
}

impl CrashLog {
    fn new(mem: Vec<u8>) -> CrashLog {
        CrashLog {
            mem: RefCell::new(mem),
            logging: Cell::new(false),
            log: RefCell::new(Vec::new()),
            points: RefCell::new(Vec::new()),
        }
    }

    /// `base` with the first `writes` logged writes applied.
    fn image(&self, base: &[u8], writes: usize) -> Vec<u8> {
        let mut img = base.to_vec();
        for (at, bytes) in &self.log.borrow()[..writes] {
            img[*at as usize..*at as usize + bytes.len()].copy_from_slice(bytes);
        }
        img
    }
}

impl LocalRegion for CrashLog {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.mem.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let m = self.mem.borrow();
        let src = m
            .get(offset as usize..offset as usize + buf.len())
            .ok_or(crate::server::out_of_range(0, offset, buf.len()))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let mut m = self.mem.borrow_mut();
        let dst = m
            .get_mut(offset as usize..offset as usize + data.len())
            .ok_or(crate::server::out_of_range(0, offset, data.len()))?;
        dst.copy_from_slice(data);
        if self.logging.get() {
            self.log.borrow_mut().push((offset, data.to_vec()));
        }
        Ok(())
    }
    fn persist(&self, _offset: u64, _len: usize) {
        if self.logging.get() {
            let n = self.log.borrow().len();
            self.points.borrow_mut().push(n);
        }
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn everything() -> Rect {
    Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap()
}

/// A server's tree, the clients' allocator (chunks handed out in order from [`BASE`]) and
/// an oracle of the entries.
struct Rig {
    r: CrashLog,
    t: Tree,
    fanout: usize,
    chunk: u64,
    /// The next chunk the allocator hands out.
    next: u64,
    live: Vec<(Rect, u64)>,
    id: u64,
    rng: u64,
}

impl Rig {
    fn new(kind: TreeKind, fanout: usize, chunk: u64, region: usize, seed: u64) -> Rig {
        let r = CrashLog::new(vec![0u8; region]);
        let t = Tree::format_kind(&r, BASE, chunk, fanout, kind).unwrap();
        Rig {
            r,
            t,
            fanout,
            chunk,
            next: BASE + chunk,
            live: Vec::new(),
            id: 0,
            rng: seed | 1,
        }
    }

    /// Runs `op`, granting the tree another chunk whenever it is full (as a client does).
    fn grown<T>(
        &mut self,
        mut op: impl FnMut(&mut Tree, &CrashLog) -> Result<T, CatfishError>,
    ) -> T {
        loop {
            match op(&mut self.t, &self.r) {
                Ok(v) => return v,
                Err(CatfishError::Full) => {
                    self.t.grow(&self.r, self.next, self.chunk).unwrap();
                    self.next += self.chunk;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn insert(&mut self) {
        let (x, y) = (
            (xorshift(&mut self.rng) % 10_000) as i32,
            (xorshift(&mut self.rng) % 10_000) as i32,
        );
        let (w, h) = (
            (xorshift(&mut self.rng) % 150) as i32,
            (xorshift(&mut self.rng) % 150) as i32,
        );
        let rect = Rect::new(x, y, x + w, y + h).unwrap();
        self.id += 1;
        let id = self.id;
        self.grown(|t, r| t.insert(r, rect, id));
        self.live.push((rect, id));
    }

    fn delete(&mut self) {
        let k = (xorshift(&mut self.rng) % self.live.len() as u64) as usize;
        let (rect, id) = self.live.swap_remove(k);
        assert!(self.grown(|t, r| t.delete(r, rect, id)), "{id} not found");
    }

    /// Deletes three quarters of the entries and inserts as many, interleaved.
    fn churn(&mut self) {
        for _ in 0..self.live.len() * 3 / 4 {
            self.delete();
            self.insert();
        }
    }

    /// The server restarts: a new handle on what the region holds.
    fn restart(&mut self) {
        self.t = Tree::recover(&self.r).unwrap().expect("a tree").0;
    }

    /// Nodes' worth of memory the allocator granted the tree.
    fn granted(&self) -> u64 {
        (self.next - BASE) / node_len(self.fanout) as u64
    }

    /// Reachable node offsets and their images' birth epochs.
    fn linked(&self) -> BTreeMap<u64, u64> {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.t.root_offset()];
        while let Some(off) = stack.pop() {
            let n = read_node(&self.r, off, self.fanout).unwrap();
            assert!(out.insert(off, n.birth()).is_none(), "{off} linked twice");
            if n.level > 0 {
                stack.extend(
                    n.entries()
                        .iter()
                        .map(|e| GlobalAddr::from_raw(e.ptr).offset()),
                );
            }
        }
        out
    }

    /// Every query answers what the oracle holds, and the tree keeps its invariants.
    fn answers_right(&mut self, queries: usize) {
        let report = self.t.check(&self.r).unwrap();
        assert_eq!(report.entries, self.live.len() as u64);
        let mut hits = Vec::new();
        for k in 0..=queries {
            let q = if k == 0 {
                everything()
            } else {
                let (x, y) = (
                    (xorshift(&mut self.rng) % 10_000) as i32,
                    (xorshift(&mut self.rng) % 10_000) as i32,
                );
                Rect::new(x, y, x + 800, y + 500).unwrap()
            };
            hits.clear();
            self.t.search(&self.r, &q, &mut hits).unwrap();
            let mut got: Vec<(Rect, u64)> = hits.iter().map(|e| (e.rect, e.ptr)).collect();
            got.sort_unstable();
            let mut want: Vec<(Rect, u64)> = self
                .live
                .iter()
                .filter(|e| e.0.intersects(&q))
                .copied()
                .collect();
            want.sort_unstable();
            assert_eq!(got, want, "query {q:?}");
        }
    }
}

/// (nodes' worth of memory granted, live nodes) after each of 10 cycles of churn and restart.
fn cycles(kind: TreeKind) -> Vec<(u64, u64)> {
    let mut rig = Rig::new(
        kind,
        8,
        16 << 10,
        32 << 20,
        0x9E37_79B9_7F4A_7C15 ^ kind as u64,
    );
    for _ in 0..600 {
        rig.insert();
    }
    let mut out = Vec::new();
    for _ in 0..10 {
        rig.churn();
        rig.restart();
        let live = rig.t.check(&rig.r).unwrap().nodes;
        out.push((rig.granted(), live));
    }
    rig.answers_right(20);
    out
}

#[test]
fn crash_restart_cycles_keep_the_memory_granted_bounded() {
    for kind in KINDS {
        let c = cycles(kind);
        std::println!("{kind:?}: (granted, live) per cycle {c:?}");
        let (first, last) = (c[0], c[c.len() - 1]);
        let chunk_nodes = (16 << 10) / node_len(8) as u64;
        assert!(
            last.0 <= 2 * last.1 + 4 * chunk_nodes,
            "{kind:?}: {} nodes' worth granted for {} live after 10 restarts: {c:?}",
            last.0,
            last.1
        );
        assert!(
            last.0 <= first.0 + 2 * chunk_nodes,
            "{kind:?}: the tree keeps growing across restarts: {c:?}"
        );
    }
}

#[test]
fn a_recovered_tree_reuses_its_free_and_retired_nodes_and_answers_right() {
    for kind in KINDS {
        let fanout = 6;
        let len = node_len(fanout) as u64;
        let mut rig = Rig::new(kind, fanout, 256 << 10, 8 << 20, 0xC0FF_EE00 ^ kind as u64);
        rig.t.set_reclaim_batch(8);
        for i in 0..1500 {
            rig.insert();
            if i % 3 == 0 {
                rig.delete();
            }
            if i % 500 == 0 {
                // Mailbox blocks among the nodes: free after a restart too.
                rig.grown(|t, _| t.carve_block(CLIENT_BLOCK_LEN as u64));
            }
        }
        let before = rig.linked();
        for _ in 0..100 {
            rig.delete();
            rig.insert();
        }
        let (waiting, ready) = rig.t.reclaiming();
        assert!(waiting + ready > 0, "{kind:?}: nothing retired or ready");
        // What the tree stopped linking (retired, waiting or ready): overwrite it with
        // garbage, as a torn write or a crash may leave free memory.
        let linked = rig.linked();
        let dropped: Vec<u64> = before
            .keys()
            .filter(|o| !linked.contains_key(o))
            .copied()
            .collect();
        assert!(!dropped.is_empty(), "{kind:?}: nothing dropped");
        for &off in &dropped {
            rig.r.write(off, &vec![0xA5; len as usize]).unwrap();
        }
        let (granted, epoch) = (rig.next, rig.t.epoch());
        rig.restart();
        // The epoch moves past what a reader of the previous life can hold (persisted).
        let epoch = epoch + REUSE_GRACE + 1;
        assert_eq!(rig.t.epoch(), epoch, "{kind:?}");
        let meta = rig.t.meta();
        assert_eq!(rig.r.load_u64(meta + META_EPOCH_OFFSET).unwrap(), epoch);
        rig.answers_right(30);
        // The new life works from the old life's free memory: no grant.
        for i in 0..600 {
            rig.delete();
            rig.insert();
            if i % 200 == 0 {
                rig.grown(|t, _| t.carve_block(CLIENT_BLOCK_LEN as u64));
                rig.answers_right(10);
            }
        }
        assert_eq!(
            rig.next, granted,
            "{kind:?}: the new life needed more memory"
        );
        // Nodes written fresh since the restart are born late enough that a reader of the
        // previous life (epoch at most `epoch - REUSE_GRACE`) restarts on them; the others
        // are untouched images of the previous life.
        let now = rig.linked();
        let reused = dropped.iter().filter(|o| now.contains_key(o)).count();
        assert!(reused > 0, "{kind:?}: no dropped node was reused");
        for (off, birth) in &now {
            assert!(
                *birth >= epoch || linked.get(off) == Some(birth),
                "{kind:?}: node {off} born {birth}, the restart's epoch is {epoch}"
            );
        }
        rig.answers_right(30);
        std::println!(
            "{kind:?}: {} nodes dropped before the restart, {reused} of them linked again after",
            dropped.len()
        );
    }
}

#[test]
fn every_crash_image_of_an_operation_recovers_to_a_right_tree_that_reuses_its_free_space() {
    let (mut images, mut reusing) = (0u64, 0u64);
    for kind in KINDS {
        let fanout = 6;
        let mut rig = Rig::new(kind, fanout, 32 << 10, 2 << 20, 0x0BAD_C0DE ^ kind as u64);
        rig.t.set_reclaim_batch(4);
        // Every node offset the tree ever linked.
        let mut ever = BTreeSet::new();
        for i in 0..300 {
            rig.insert();
            if i % 4 == 0 {
                rig.delete();
            }
            ever.extend(rig.linked().into_keys());
        }
        for step in 0..20 {
            let base = rig.r.mem.borrow().clone();
            let before: BTreeSet<(Rect, u64)> = rig.live.iter().copied().collect();
            rig.r.log.borrow_mut().clear();
            rig.r.points.borrow_mut().clear();
            rig.r.logging.set(true);
            if step % 2 == 0 {
                rig.insert();
            } else {
                rig.delete();
            }
            rig.r.logging.set(false);
            let after: BTreeSet<(Rect, u64)> = rig.live.iter().copied().collect();
            let points = rig.r.points.borrow().clone();
            assert!(
                !points.is_empty(),
                "{kind:?}: an operation persisted nothing"
            );
            for (k, &writes) in points.iter().enumerate() {
                images += 1;
                let what = format!("{kind:?} operation {step}, crash at persist {k}");
                let r = CrashLog::new(rig.r.image(&base, writes));
                let t = match Tree::recover(&r) {
                    Ok(Some((t, _))) => t,
                    Ok(None) => panic!("{what}: no tree"),
                    Err(e) => panic!("{what}: {e}"),
                };
                let mut img = Rig {
                    r,
                    t,
                    fanout,
                    chunk: rig.chunk,
                    next: rig.next,
                    live: Vec::new(),
                    id: rig.id + 1_000_000,
                    rng: rig.rng ^ (k as u64 + 1) << 32,
                };
                // The tree before or after the operation.
                let mut hits = Vec::new();
                img.t.search(&img.r, &everything(), &mut hits).unwrap();
                let got: BTreeSet<(Rect, u64)> = hits.iter().map(|e| (e.rect, e.ptr)).collect();
                assert!(got == before || got == after, "{what}: a third tree");
                img.live = got.into_iter().collect();
                let at_recovery = img.linked();
                for _ in 0..15 {
                    img.insert();
                    img.delete();
                }
                img.answers_right(5);
                if img
                    .linked()
                    .keys()
                    .any(|o| ever.contains(o) && !at_recovery.contains_key(o))
                {
                    reusing += 1;
                }
                img.restart();
                img.answers_right(5);
            }
            ever.extend(rig.linked().into_keys());
        }
    }
    std::println!("{images} crash images, {reusing} of them reused memory the crash left free");
    assert!(images > 150, "only {images} crash images");
    assert!(
        reusing * 2 > images,
        "only {reusing} of {images} recovered trees reused free memory"
    );
}

/// A bulk load ([`Tree::bulk_load`], the server's inserts without the fabric) builds a tree
/// holding exactly its objects, checked whole; every crash image of it (each persistence
/// point of the load, un-persisted writes lost) recovers to the tree of a prefix of the
/// objects, that prefix never shrinking from one image to the next, and the last to all of
/// them; a recovered tree takes more inserts and deletes and answers right. A region that
/// already holds a tree, and an inverted rectangle, are refused.
#[test]
fn a_bulk_load_recovers_from_every_crash_image_to_a_prefix_of_its_objects() {
    use remora_layouts::region::RegionHeader;
    const N: u64 = 240;
    let mut images = 0;
    for kind in KINDS {
        let mut mem = vec![0u8; 2 << 20];
        let h = RegionHeader::new(mem.len() as u64, 4 << 10, 0).unwrap();
        mem[..h.encode().len()].copy_from_slice(&h.encode());
        let base = mem.clone();
        let r = CrashLog::new(mem);
        let mut rng = 0x5EED ^ kind as u64;
        let objects: Vec<(Rect, u64)> = (0..N)
            .map(|i| {
                let (x, y) = (
                    (xorshift(&mut rng) % 5000) as i32,
                    (xorshift(&mut rng) % 5000) as i32,
                );
                let (w, h) = (
                    (xorshift(&mut rng) % 40) as i32,
                    (xorshift(&mut rng) % 40) as i32,
                );
                (Rect::new(x, y, x + w, y + h).unwrap(), 1000 + i)
            })
            .collect();
        r.logging.set(true);
        let (mut t, st) = Tree::bulk_load(&r, 6, kind, 4, objects.iter().copied()).unwrap();
        r.logging.set(false);
        assert_eq!(st.objects, N);
        assert!(
            st.arenas > 1,
            "{kind:?}: the load never grew its arenas: {st:?}"
        );
        let rep = t.check(&r).unwrap();
        assert_eq!((rep.entries, rep.underfull), (N, 0), "{kind:?}: {rep:?}");
        let all = |t: &mut Tree, r: &CrashLog| {
            let mut hits = Vec::new();
            t.search(r, &everything(), &mut hits).unwrap();
            hits.iter()
                .map(|e| (e.rect, e.ptr))
                .collect::<BTreeSet<_>>()
        };
        assert_eq!(all(&mut t, &r), objects.iter().copied().collect());
        // Refused: a second load over the tree, and (in a fresh region) an inverted rectangle.
        assert!(Tree::bulk_load(&r, 6, kind, 4, objects.iter().copied()).is_err());
        let bad = Rect {
            min_x: 5,
            min_y: 0,
            max_x: 1,
            max_y: 1,
        };
        let fresh = CrashLog::new(base.clone());
        assert!(Tree::bulk_load(&fresh, 6, kind, 4, [(bad, 1)]).is_err());
        // Every crash image: the tree of a prefix of the objects.
        let points = r.points.borrow().clone();
        let mut prefix = 0;
        for (k, &writes) in points.iter().enumerate() {
            images += 1;
            let img = CrashLog::new(r.image(&base, writes));
            let what = format!("{kind:?}: crash at persist {k} of {}", points.len());
            let Some((mut t, _)) = Tree::recover(&img).unwrap_or_else(|e| panic!("{what}: {e}"))
            else {
                // Before the root slot was published: no tree yet.
                assert_eq!(prefix, 0, "{what}: the tree vanished");
                continue;
            };
            let got = all(&mut t, &img);
            let m = got.len();
            assert!(m >= prefix, "{what}: {m} objects after {prefix}");
            assert_eq!(got, objects[..m].iter().copied().collect(), "{what}");
            prefix = m;
        }
        assert_eq!(prefix, N as usize, "{kind:?}: the last image lost objects");
        // The recovered whole load takes more operations.
        let (t, _) = Tree::recover(&r).unwrap().unwrap();
        // Further chunks from the region's cursor, as the clients' allocator hands them out.
        let next = r
            .load_u64(remora_layouts::region::NEXT_CHUNK_OFFSET)
            .unwrap();
        let mut rig = Rig {
            r,
            t,
            fanout: 6,
            chunk: 4 << 10,
            next,
            live: objects,
            id: 1 << 40,
            rng,
        };
        for _ in 0..40 {
            rig.insert();
            rig.delete();
        }
        rig.answers_right(10);
    }
    std::println!("{images} crash images of bulk loads");
    assert!(images > 300, "only {images} crash images");
}

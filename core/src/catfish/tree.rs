//! The R-tree as the server CPU keeps it in its own region (Guttman's R-tree with the
//! quadratic split).
//!
//! Only the server writes the tree (the paper's rule: writes always go through fast
//! messaging), and it runs one handler at a time, so writers never race each other. Readers
//! do race it: offloading clients READ nodes one-sidedly. Two rules keep them right:
//!
//! - An in-place node rewrite is a seqlock (head version odd, body + checksum + tail, head
//!   even); a reader that catches it mid-way fails [`Node::decode`]'s CRC-64 over version
//!   and body, in whatever order its READ's segments observed the node, and re-reads.
//! - A split never rewrites the node it splits: both halves go to fresh nodes, then the
//!   parent is rewritten once to point at them (or a fresh root is published in the
//!   superblock). A reader holding the old parent still finds every entry in the old node,
//!   so a search never misses an entry that was inserted before it started. Split-off nodes
//!   are not reclaimed (no epochs yet).
use super::CatfishError;
use crate::server::LocalRegion;
use remora_layouts::catfish::{
    Entry, FANOUT, MAX_LEVEL, META_HEARTBEAT_OFFSET, META_LEN, META_MAGIC, META_MAGIC_OFFSET,
    META_ROOT_OFFSET, MIN_FILL, NODE_LEN, Node, ROOT_SLOT, Rect,
};
use remora_layouts::region::{HEADER_LEN, root_offset};
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::vec::Vec;

/// Arenas a tree can be given (one by `Init`, the rest by `Grow`).
pub const MAX_ARENAS: usize = 64;

/// One step of an insert's descent: the node, its offset, and which entry was followed.
#[derive(Clone, Copy)]
struct Step {
    off: u64,
    node: Node,
    idx: usize,
}

/// The server's handle on a formatted tree.
pub struct Tree {
    meta: u64,
    root: u64,
    /// Bump arenas `(cursor, end)`, offsets in the region.
    arenas: heapless::Vec<(u64, u64), MAX_ARENAS>,
    path: Vec<Step>,
    stack: Vec<u64>,
    nodes: u64,
}

fn bad(what: &'static str) -> CatfishError {
    CatfishError::Layout(LayoutError::Inconsistent { what })
}

impl Tree {
    /// Formats an empty tree in the arena `[base, base + len)` and publishes its superblock
    /// in root slot [`ROOT_SLOT`].
    pub fn format(region: &dyn LocalRegion, base: u64, len: u64) -> Result<Tree, CatfishError> {
        let mut t = Tree {
            meta: 0,
            root: 0,
            arenas: heapless::Vec::new(),
            path: Vec::with_capacity(MAX_LEVEL as usize + 1),
            stack: Vec::new(),
            nodes: 0,
        };
        t.grow(region, base, len)?;
        t.meta = t.carve(META_LEN.next_multiple_of(64) as u64)?;
        t.root = t.carve(NODE_LEN as u64)?;
        write_fresh(region, t.root, &Node::empty(0))?;
        let node = region.node();
        region.store_u64(
            t.meta + META_ROOT_OFFSET,
            GlobalAddr::new(node, t.root).raw(),
        )?;
        region.store_u64(t.meta + META_HEARTBEAT_OFFSET, 0)?;
        region.store_u64(t.meta + META_MAGIC_OFFSET, META_MAGIC)?;
        region.persist(t.meta, META_LEN);
        let slot = root_offset(ROOT_SLOT);
        region.store_u64(slot, GlobalAddr::new(node, t.meta).raw())?;
        region.persist(slot, 8);
        Ok(t)
    }

    /// Offset of the superblock.
    pub fn meta(&self) -> u64 {
        self.meta
    }

    /// Nodes carved so far (live and split-off).
    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    /// Adds the arena `[base, base + len)` to carve nodes from.
    pub fn grow(
        &mut self,
        region: &dyn LocalRegion,
        base: u64,
        len: u64,
    ) -> Result<(), CatfishError> {
        let start = base.next_multiple_of(64);
        let end = base.checked_add(len).ok_or(bad("arena end overflows"))?;
        if base < HEADER_LEN as u64 || end > region.len() || start >= end {
            return Err(bad("arena outside the region or empty"));
        }
        if self.arenas.iter().any(|&(c, e)| start < e && c < end) {
            return Err(bad("arena overlaps one the tree already has"));
        }
        self.arenas
            .push((start, end))
            .map_err(|_| bad("too many arenas"))
    }

    /// Nodes that still fit in the arenas.
    fn room(&self) -> u64 {
        self.arenas
            .iter()
            .map(|&(c, e)| (e - c) / NODE_LEN as u64)
            .sum()
    }

    fn carve(&mut self, size: u64) -> Result<u64, CatfishError> {
        for a in self.arenas.iter_mut() {
            if a.1 - a.0 >= size {
                let at = a.0;
                a.0 = (at + size).next_multiple_of(8);
                self.nodes += 1;
                return Ok(at);
            }
        }
        Err(CatfishError::Full)
    }

    /// Current root offset and level.
    fn root(&self, region: &dyn LocalRegion) -> Result<(u64, Node), CatfishError> {
        Ok((self.root, read_node(region, self.root)?))
    }

    /// Inserts `rect` with object id `id`.
    pub fn insert(
        &mut self,
        region: &dyn LocalRegion,
        rect: Rect,
        id: u64,
    ) -> Result<(), CatfishError> {
        if !rect.is_valid() {
            return Err(bad("inverted rectangle"));
        }
        let (root_off, root) = self.root(region)?;
        // Worst case: every level splits into two fresh nodes, plus a fresh root.
        if self.room() < 2 * (root.level as u64 + 1) + 1 {
            return Err(CatfishError::Full);
        }
        self.path.clear();
        let (mut off, mut node) = (root_off, root);
        while node.level > 0 {
            let idx = choose_subtree(&node, &rect).ok_or(bad("internal node without entries"))?;
            self.path.push(Step { off, node, idx });
            let child = node.entries[idx].ptr;
            let child_off = GlobalAddr::from_raw(child).offset();
            let child_node = read_node(region, child_off)?;
            if child_node.level + 1 != node.level {
                return Err(bad("child level is not parent level - 1"));
            }
            off = child_off;
            node = child_node;
        }
        // Enlarge the ancestors top-down first, so a reader that finds the new entry in a
        // node always reached it through covering rectangles.
        for s in self.path.iter_mut() {
            let e = &mut s.node.entries[s.idx];
            let grown = e.rect.union(&rect);
            if grown != e.rect {
                e.rect = grown;
                write_in_place(region, s.off, &mut s.node)?;
            }
        }
        let mut carry = Entry { rect, ptr: id };
        let mut target = (off, node);
        loop {
            let (toff, mut tnode) = target;
            if !tnode.is_full() {
                tnode.push(carry)?;
                return write_in_place(region, toff, &mut tnode);
            }
            let (a, b) = quadratic_split(&tnode, carry)?;
            let a_off = self.carve(NODE_LEN as u64)?;
            let b_off = self.carve(NODE_LEN as u64)?;
            write_fresh(region, a_off, &a)?;
            write_fresh(region, b_off, &b)?;
            let node_id = region.node();
            let ea = Entry {
                rect: a.mbr().ok_or(bad("empty split half"))?,
                ptr: GlobalAddr::new(node_id, a_off).raw(),
            };
            let eb = Entry {
                rect: b.mbr().ok_or(bad("empty split half"))?,
                ptr: GlobalAddr::new(node_id, b_off).raw(),
            };
            match self.path.pop() {
                Some(parent) => {
                    let mut p = parent.node;
                    p.entries[parent.idx] = ea;
                    carry = eb;
                    target = (parent.off, p);
                }
                None => {
                    let mut r = Node::empty(tnode.level + 1);
                    if r.level > MAX_LEVEL {
                        return Err(bad("tree taller than MAX_LEVEL"));
                    }
                    r.push(ea)?;
                    r.push(eb)?;
                    let r_off = self.carve(NODE_LEN as u64)?;
                    write_fresh(region, r_off, &r)?;
                    let raw = GlobalAddr::new(node_id, r_off).raw();
                    region.store_u64(self.meta + META_ROOT_OFFSET, raw)?;
                    region.persist(self.meta + META_ROOT_OFFSET, 8);
                    self.root = r_off;
                    return Ok(());
                }
            }
        }
    }

    /// Appends to `out` every leaf entry intersecting `rect`.
    pub fn search(
        &mut self,
        region: &dyn LocalRegion,
        rect: &Rect,
        out: &mut Vec<Entry>,
    ) -> Result<(), CatfishError> {
        self.stack.clear();
        self.stack.push(self.root);
        let mut visited = 0u64;
        while let Some(off) = self.stack.pop() {
            visited += 1;
            if visited > self.nodes {
                return Err(bad("search visited more nodes than exist: a cycle"));
            }
            let node = read_node(region, off)?;
            for e in node.entries() {
                if e.rect.intersects(rect) {
                    if node.level == 0 {
                        out.push(*e);
                    } else {
                        self.stack.push(GlobalAddr::from_raw(e.ptr).offset());
                    }
                }
            }
        }
        Ok(())
    }
}

/// Reads and validates one node (the server is the only writer, so it never tears here).
pub fn read_node(region: &dyn LocalRegion, off: u64) -> Result<Node, CatfishError> {
    let mut buf = [0u8; NODE_LEN];
    region.read(off, &mut buf)?;
    Ok(Node::decode(&buf)?)
}

/// Writes a node no reader can reach yet.
fn write_fresh(region: &dyn LocalRegion, off: u64, node: &Node) -> Result<(), CatfishError> {
    region.write(off, &node.encode(2))?;
    region.persist(off, NODE_LEN);
    Ok(())
}

/// Rewrites a reachable node as a seqlock: head odd, body and tail, head even.
fn write_in_place(region: &dyn LocalRegion, off: u64, node: &mut Node) -> Result<(), CatfishError> {
    let v = node.version;
    node.version = v + 2;
    let img = node.encode(v + 2);
    region.store_u64(off, v + 1)?;
    region.write(off + 8, &img[8..])?;
    region.store_u64(off, v + 2)?;
    region.persist(off, NODE_LEN);
    Ok(())
}

/// The entry needing the least enlargement to cover `rect`; ties go to the smaller area.
fn choose_subtree(node: &Node, rect: &Rect) -> Option<usize> {
    node.entries()
        .iter()
        .enumerate()
        .min_by_key(|(_, e)| {
            let area = e.rect.area();
            (e.rect.union(rect).area() - area, area)
        })
        .map(|(i, _)| i)
}

/// Guttman's quadratic split of a full node plus one entry into two nodes of its level.
fn quadratic_split(node: &Node, extra: Entry) -> Result<(Node, Node), CatfishError> {
    let mut all = [extra; FANOUT + 1];
    all[..FANOUT].copy_from_slice(node.entries());
    let n = all.len();
    // Seeds: the pair wasting the most area if put together.
    let (mut s1, mut s2, mut worst) = (0, 1, i128::MIN);
    for i in 0..n {
        for j in i + 1..n {
            let waste = all[i].rect.union(&all[j].rect).area() as i128
                - all[i].rect.area() as i128
                - all[j].rect.area() as i128;
            if waste > worst {
                (s1, s2, worst) = (i, j, waste);
            }
        }
    }
    let mut a = Node::empty(node.level);
    let mut b = Node::empty(node.level);
    let mut placed = [false; FANOUT + 1];
    a.push(all[s1])?;
    b.push(all[s2])?;
    placed[s1] = true;
    placed[s2] = true;
    let (mut ra, mut rb) = (all[s1].rect, all[s2].rect);
    let mut left = n - 2;
    while left > 0 {
        // A group that needs every remaining entry to reach the minimum takes them all.
        let force = if (a.count as usize) + left <= MIN_FILL {
            Some(true)
        } else if (b.count as usize) + left <= MIN_FILL {
            Some(false)
        } else {
            None
        };
        let pick = (0..n)
            .filter(|&i| !placed[i])
            .max_by_key(|&i| {
                let da = ra.union(&all[i].rect).area() - ra.area();
                let db = rb.union(&all[i].rect).area() - rb.area();
                da.abs_diff(db)
            })
            .ok_or(bad("split ran out of entries"))?;
        let to_a = force.unwrap_or_else(|| {
            let da = ra.union(&all[pick].rect).area() - ra.area();
            let db = rb.union(&all[pick].rect).area() - rb.area();
            (da, ra.area(), a.count) <= (db, rb.area(), b.count)
        });
        if to_a {
            a.push(all[pick])?;
            ra = ra.union(&all[pick].rect);
        } else {
            b.push(all[pick])?;
            rb = rb.union(&all[pick].rect);
        }
        placed[pick] = true;
        left -= 1;
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_every_entry_and_the_minimum_fill() {
        let mut node = Node::empty(0);
        for i in 0..FANOUT as i32 {
            let r = Rect::new(i * i, i, i * i + 2, i + 1).unwrap();
            node.push(Entry {
                rect: r,
                ptr: i as u64,
            })
            .unwrap();
        }
        let extra = Entry {
            rect: Rect::new(-50, -50, -40, -40).unwrap(),
            ptr: 999,
        };
        let (a, b) = quadratic_split(&node, extra).unwrap();
        assert!(a.count as usize >= MIN_FILL && b.count as usize >= MIN_FILL);
        let mut ids: Vec<u64> = a
            .entries()
            .iter()
            .chain(b.entries())
            .map(|e| e.ptr)
            .collect();
        ids.sort_unstable();
        let mut want: Vec<u64> = (0..FANOUT as u64).collect();
        want.push(999);
        assert_eq!(ids, want);
    }

    /// A region in plain memory: the server-side tree tested without a fabric.
    struct MemRegion(Vec<core::sync::atomic::AtomicU64>);

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

    /// Checks the R-tree invariants below `off`; returns (leaf depth, entries, mbr).
    fn check(region: &MemRegion, off: u64, root: bool) -> (u16, u64, Option<Rect>) {
        let node = read_node(region, off).unwrap();
        if !root {
            assert!(node.count as usize >= MIN_FILL, "underfull node");
        }
        if node.level == 0 {
            return (0, node.count as u64, node.mbr());
        }
        let mut total = 0;
        for e in node.entries() {
            let (depth, n, mbr) = check(region, GlobalAddr::from_raw(e.ptr).offset(), false);
            assert_eq!(depth + 1, node.level, "leaves at different depths");
            let mbr = mbr.unwrap();
            assert_eq!(e.rect.union(&mbr), e.rect, "entry does not cover its child");
            total += n;
        }
        (node.level, total, node.mbr())
    }

    #[test]
    fn tree_matches_brute_force_and_keeps_its_invariants() {
        let region = MemRegion(
            (0..(4 << 20) / 8)
                .map(|_| core::sync::atomic::AtomicU64::new(0))
                .collect(),
        );
        // Small arenas, so the tree must be given more as it grows.
        let mut t = Tree::format(&region, 4096, 64 << 10).unwrap();
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
        for id in 0..3000u64 {
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
                let (_, n, _) = check(&region, t.root, true);
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
        assert!(
            read_node(&region, t.root).unwrap().level >= 2,
            "the root split more than once"
        );
    }
}

//! Inserting an entry at a level of the tree inside a transaction ([`super::txn`]), for
//! every [`TreeKind`]: the R*-tree's and the Hilbert R-tree's inserts, and the reinsertions
//! of forced reinsert and of delete's condense-tree (the basic R-tree's own inserts take the
//! copy-on-split path in [`super::tree`]).
use super::CatfishError;
use super::hilbert;
use super::quadratic::{choose_subtree, quadratic_split};
use super::rstar;
use super::tree::{Tree, bad};
use crate::server::LocalRegion;
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::{Entry, MAX_LEVEL, Node, TreeKind, min_fill};
use std_alloc::vec::Vec;

/// One step of a descent: a node's offset and the entry followed.
pub(super) type Path = Vec<(u64, usize)>;

impl Tree {
    /// The Hilbert key of an entry of a node at `level`: its centre's Hilbert value in a
    /// leaf, its child's largest Hilbert value above.
    pub(super) fn entry_key(
        &self,
        region: &dyn LocalRegion,
        level: u16,
        e: &Entry,
    ) -> Result<u64, CatfishError> {
        if level == 0 {
            return Ok(hilbert::key(&e.rect));
        }
        let off = GlobalAddr::from_raw(e.ptr).offset();
        match self.tx.over.get(&off) {
            Some(n) => self.node_lhv(region, n),
            None => Ok(self.lhv.get(&off).copied().unwrap_or(0)),
        }
    }

    /// The largest Hilbert value of a node's entries (0 when empty).
    pub(super) fn node_lhv(&self, region: &dyn LocalRegion, n: &Node) -> Result<u64, CatfishError> {
        let mut m = 0;
        for e in n.entries() {
            m = m.max(self.entry_key(region, n.level, e)?);
        }
        Ok(m)
    }

    /// Orders a Hilbert tree's node by its entries' keys (other kinds keep their order).
    pub(super) fn order(&self, region: &dyn LocalRegion, n: &mut Node) -> Result<(), CatfishError> {
        if self.kind != TreeKind::Hilbert {
            return Ok(());
        }
        let count = n.count as usize;
        let mut keyed: Vec<(u64, Entry)> = Vec::with_capacity(count);
        for e in n.entries() {
            keyed.push((self.entry_key(region, n.level, e)?, *e));
        }
        keyed.sort_by_key(|k| k.0);
        for (slot, (_, e)) in n.entries[..count].iter_mut().zip(keyed) {
            *slot = e;
        }
        Ok(())
    }

    fn node_of(&self, level: u16, entries: &[Entry]) -> Result<Node, CatfishError> {
        let mut n = Node::with_fanout(level, self.fanout);
        for e in entries {
            n.push(*e)?;
        }
        Ok(n)
    }

    /// Inserts `e` into a node of `level` (0: a leaf entry; above: a subtree of level - 1).
    /// `reinserted` has bit `l` set once level `l` had its forced reinsert (R*-tree).
    pub(super) fn insert_at(
        &mut self,
        region: &dyn LocalRegion,
        e: Entry,
        level: u16,
        reinserted: &mut u64,
    ) -> Result<(), CatfishError> {
        let mut path = Path::new();
        let mut off = self.tx.root;
        let mut node = self.get(region, off)?;
        if node.level < level {
            return Err(bad("reinsert above the root"));
        }
        let key = match self.kind {
            TreeKind::Hilbert => self.entry_key(region, level, &e)?,
            _ => 0,
        };
        while node.level > level {
            let idx = match self.kind {
                TreeKind::Guttman => choose_subtree(&node, &e.rect),
                TreeKind::RStar => rstar::choose_subtree(node.entries(), node.level, &e.rect),
                TreeKind::Hilbert => {
                    let mut pick = None;
                    for (i, c) in node.entries().iter().enumerate() {
                        if self.entry_key(region, node.level, c)? >= key {
                            pick = Some(i);
                            break;
                        }
                    }
                    pick.or(node.entries().len().checked_sub(1))
                }
            }
            .ok_or(CatfishError::Corrupt("internal node without entries"))?;
            path.push((off, idx));
            (off, node) = self.child(region, off, &node, idx)?;
        }
        self.place(region, path, off, node, e, reinserted)
    }

    /// Puts `carry` into `node` (at `off`, reached by `path`), treating overflows the kind's
    /// way, and adjusts the ancestors.
    fn place(
        &mut self,
        region: &dyn LocalRegion,
        mut path: Path,
        mut off: u64,
        mut node: Node,
        mut carry: Entry,
        reinserted: &mut u64,
    ) -> Result<(), CatfishError> {
        loop {
            let level = node.level;
            if !node.is_full() {
                node.push(carry)?;
                self.order(region, &mut node)?;
                self.put(off, node);
                return self.adjust(region, &path, off, node, false);
            }
            let mut all: Vec<Entry> = node.entries().to_vec();
            all.push(carry);
            if self.kind == TreeKind::RStar && !path.is_empty() && *reinserted & (1 << level) == 0 {
                *reinserted |= 1 << level;
                let (kept, out) = rstar::pick_reinsert(&all, self.fanout);
                let n = self.node_of(level, &kept)?;
                self.put(off, n);
                self.adjust(region, &path, off, n, true)?;
                for r in out {
                    self.insert_at(region, r, level, reinserted)?;
                }
                return Ok(());
            }
            if self.kind == TreeKind::Hilbert
                && let Some(&(poff, idx)) = path.last()
            {
                let mut parent = self.get(region, poff)?;
                if parent.count >= 2 {
                    path.pop();
                    let sidx = if idx + 1 < parent.count as usize {
                        idx + 1
                    } else {
                        idx - 1
                    };
                    let (soff, sib) = self.child(region, poff, &parent, sidx)?;
                    all.extend_from_slice(sib.entries());
                    let mut keyed: Vec<(u64, Entry)> = Vec::with_capacity(all.len());
                    for e in &all {
                        keyed.push((self.entry_key(region, level, e)?, *e));
                    }
                    keyed.sort_by_key(|k| k.0);
                    let sorted: Vec<Entry> = keyed.into_iter().map(|k| k.1).collect();
                    let (lo, hi) = (idx.min(sidx), idx.max(sidx));
                    let (lo_off, hi_off) = if idx < sidx { (off, soff) } else { (soff, off) };
                    let n = sorted.len();
                    if n <= 2 * self.fanout {
                        // Deferred split: the two cooperating siblings share the entries.
                        let a = self.node_of(level, &sorted[..n / 2])?;
                        let b = self.node_of(level, &sorted[n / 2..])?;
                        self.put(lo_off, a);
                        self.put(hi_off, b);
                        parent.entries[lo] = self.entry_of(region, lo_off, &a)?;
                        parent.entries[hi] = self.entry_of(region, hi_off, &b)?;
                        self.order(region, &mut parent)?;
                        self.put(poff, parent);
                        return self.adjust(region, &path, poff, parent, false);
                    }
                    // 2-to-3 split: the two siblings and a new node share them.
                    let (k1, k2) = (n / 3, 2 * n / 3);
                    let a = self.node_of(level, &sorted[..k1])?;
                    let b = self.node_of(level, &sorted[k1..k2])?;
                    let c = self.node_of(level, &sorted[k2..])?;
                    self.put(lo_off, a);
                    self.put(hi_off, b);
                    let c_off = self.alloc(c)?;
                    parent.entries[lo] = self.entry_of(region, lo_off, &a)?;
                    parent.entries[hi] = self.entry_of(region, hi_off, &b)?;
                    carry = self.entry_of(region, c_off, &c)?;
                    (off, node) = (poff, parent);
                    continue;
                }
            }
            // Split in two.
            let (a, b) = match self.kind {
                TreeKind::Guttman => quadratic_split(&node, carry)?,
                TreeKind::RStar => {
                    let (ga, gb) = rstar::split(&all, min_fill(self.fanout));
                    (self.node_of(level, &ga)?, self.node_of(level, &gb)?)
                }
                TreeKind::Hilbert => {
                    let mut keyed: Vec<(u64, Entry)> = Vec::with_capacity(all.len());
                    for e in &all {
                        keyed.push((self.entry_key(region, level, e)?, *e));
                    }
                    keyed.sort_by_key(|k| k.0);
                    let sorted: Vec<Entry> = keyed.into_iter().map(|k| k.1).collect();
                    let h = sorted.len() / 2;
                    (
                        self.node_of(level, &sorted[..h])?,
                        self.node_of(level, &sorted[h..])?,
                    )
                }
            };
            self.put(off, a);
            let b_off = self.alloc(b)?;
            let ea = self.entry_of(region, off, &a)?;
            let eb = self.entry_of(region, b_off, &b)?;
            match path.pop() {
                None => {
                    if level + 1 > MAX_LEVEL {
                        return Err(bad("tree taller than MAX_LEVEL"));
                    }
                    let mut r = Node::with_fanout(level + 1, self.fanout);
                    r.push(ea)?;
                    r.push(eb)?;
                    self.order(region, &mut r)?;
                    let r_off = self.alloc(r)?;
                    self.tx.root = r_off;
                    return Ok(());
                }
                Some((poff, idx)) => {
                    let mut p = self.get(region, poff)?;
                    p.entries[idx] = ea;
                    carry = eb;
                    (off, node) = (poff, p);
                }
            }
        }
    }

    /// Brings the ancestors on `path` up to date with the node at `off`: their entries
    /// grow to cover it (or, with `tighten`, become its exact bounding rectangle), and a
    /// Hilbert tree reorders them by the new keys.
    pub(super) fn adjust(
        &mut self,
        region: &dyn LocalRegion,
        path: &[(u64, usize)],
        off: u64,
        node: Node,
        tighten: bool,
    ) -> Result<(), CatfishError> {
        let node_id = region.node();
        let (mut child_off, mut child) = (off, node);
        for &(poff, idx) in path.iter().rev() {
            let mut p = self.get(region, poff)?;
            let ptr = GlobalAddr::new(node_id, child_off).raw();
            let i = match p.entries().get(idx) {
                Some(e) if e.ptr == ptr => idx,
                _ => p
                    .entries()
                    .iter()
                    .position(|e| e.ptr == ptr)
                    .ok_or(CatfishError::Corrupt("parent lost its child"))?,
            };
            let m = child.mbr().ok_or(bad("empty node has no rectangle"))?;
            let r = if tighten {
                m
            } else {
                p.entries[i].rect.union(&m)
            };
            let before = p;
            p.entries[i].rect = r;
            self.order(region, &mut p)?;
            if p.entries() != before.entries() {
                self.put(poff, p);
            } else if self.kind == TreeKind::Hilbert {
                // Unchanged, but its largest key may have grown: recomputed at the commit.
                self.tx.touched.push(poff);
            } else {
                // Nothing above changes either.
                return Ok(());
            }
            (child_off, child) = (poff, p);
        }
        Ok(())
    }
}

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
    /// leaf, its child's largest Hilbert value (LHV) above, as stored for the child (by the
    /// transaction if it changed the child, else by the tree), never recomputed from below.
    pub(super) fn entry_key(&self, level: u16, e: &Entry) -> u64 {
        if level == 0 {
            #[cfg(test)]
            self.keys
                .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            return hilbert::key(&e.rect);
        }
        let off = GlobalAddr::from_raw(e.ptr).offset();
        self.tx
            .lhv
            .get(&off)
            .or_else(|| self.lhv.get(&off))
            .copied()
            .unwrap_or(0)
    }

    /// The largest Hilbert value of a node's entries (0 when empty): a Hilbert tree keeps
    /// every node in key order, so its last entry's key.
    pub(super) fn node_lhv(&self, n: &Node) -> u64 {
        n.entries().last().map_or(0, |e| self.entry_key(n.level, e))
    }

    /// Orders a Hilbert tree's node by its entries' keys (other kinds keep their order).
    pub(super) fn order(&self, n: &mut Node) {
        if self.kind != TreeKind::Hilbert {
            return;
        }
        let count = n.count as usize;
        let level = n.level;
        n.entries[..count].sort_by_cached_key(|e| self.entry_key(level, e));
    }

    /// Moves entry `i` of a Hilbert tree's node, whose key alone changed, to its place in
    /// key order (a few look-ups: the rest of the node is already in order).
    fn reposition(&self, n: &mut Node, mut i: usize) {
        if self.kind != TreeKind::Hilbert {
            return;
        }
        let count = n.count as usize;
        let k = self.entry_key(n.level, &n.entries[i]);
        while i > 0 && self.entry_key(n.level, &n.entries[i - 1]) > k {
            n.entries.swap(i - 1, i);
            i -= 1;
        }
        while i + 1 < count && self.entry_key(n.level, &n.entries[i + 1]) < k {
            n.entries.swap(i, i + 1);
            i += 1;
        }
    }

    /// The first entry of a Hilbert tree's node (kept in key order) whose key is at least
    /// `key`: a binary search over the stored keys.
    fn first_at_least(&self, n: &Node, key: u64) -> usize {
        let (mut lo, mut hi) = (0, n.count as usize);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.entry_key(n.level, &n.entries[mid]) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Adds `e` to a node with room: a Hilbert tree's at its place in key order, found by
    /// binary search (other kinds append).
    fn push_in_order(&self, n: &mut Node, e: Entry) -> Result<(), CatfishError> {
        let at = match self.kind {
            TreeKind::Hilbert => self.first_at_least(n, self.entry_key(n.level, &e)),
            _ => n.count as usize,
        };
        n.push(e)?;
        n.entries[at..n.count as usize].rotate_right(1);
        Ok(())
    }

    /// Sorts `all` (entries of a node at `level`) by key, each key computed once.
    fn sorted(&self, level: u16, all: Vec<Entry>) -> Vec<Entry> {
        let mut all = all;
        all.sort_by_cached_key(|e| self.entry_key(level, e));
        all
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
            TreeKind::Hilbert => self.entry_key(level, &e),
            _ => 0,
        };
        while node.level > level {
            let idx = match self.kind {
                TreeKind::Guttman => choose_subtree(&node, &e.rect),
                TreeKind::RStar => rstar::choose_subtree(node.entries(), node.level, &e.rect),
                // The first child whose LHV reaches `key`; past every LHV, the last child.
                TreeKind::Hilbert => (node.count as usize)
                    .checked_sub(1)
                    .map(|last| self.first_at_least(&node, key).min(last)),
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
                self.push_in_order(&mut node, carry)?;
                if level > 0 {
                    // A split below changed the keys of two entries, not only the new one's.
                    self.order(&mut node);
                }
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
                    let sorted = self.sorted(level, all);
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
                        self.order(&mut parent);
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
                    let sorted = self.sorted(level, all);
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
                    self.order(&mut r);
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
    /// grow to cover it (or, with `tighten`, become its exact bounding rectangle), and in a
    /// Hilbert tree the changed entry moves to its place by its child's new LHV and each
    /// ancestor's LHV is stored anew: O(1) look-ups per level, nothing recomputed below.
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
            self.reposition(&mut p, i);
            if p.entries() != before.entries() {
                self.put(poff, p);
            } else if self.kind == TreeKind::Hilbert {
                // Unchanged, but its largest key may have grown.
                self.note_node_lhv(poff, &p);
            } else {
                // Nothing above changes either.
                return Ok(());
            }
            (child_off, child) = (poff, p);
        }
        Ok(())
    }
}

//! Delete with condense-tree (Guttman's CondenseTree, for every [`TreeKind`]): the entry is
//! removed from its leaf; a non-root node left below the minimum fill is dropped from its
//! parent, up the path, and the entries of every dropped node are reinserted at their own
//! level (the kind's insert: R*'s with its forced reinsert, the Hilbert tree's by key); a
//! root left with one child is replaced by it. The whole delete is one transaction
//! ([`super::txn`]): a delete that leaves every node full enough is written in place
//! (leaf first, then the shrunk ancestors), one that condenses is published by copy on
//! write, so an offloading search never misses an entry present throughout and never sees
//! one deleted before it began.
use super::CatfishError;
use super::insert::Path;
use super::tree::{Tree, bad};
use crate::server::LocalRegion;
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::{Entry, Node, Rect, min_fill};
use std_alloc::vec::Vec;

impl Tree {
    /// Deletes one entry with rectangle `rect` and object id `id`; `Ok(false)` if there is
    /// none. On `Full` (no arena room for the copies) nothing changed.
    pub fn delete(
        &mut self,
        region: &dyn LocalRegion,
        rect: Rect,
        id: u64,
    ) -> Result<bool, CatfishError> {
        if !rect.is_valid() {
            return Err(bad("inverted rectangle"));
        }
        self.begin();
        match self.delete_in_txn(region, rect, id) {
            Ok(true) => self.commit(region).map(|()| true),
            Ok(false) => {
                self.abort();
                Ok(false)
            }
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    fn delete_in_txn(
        &mut self,
        region: &dyn LocalRegion,
        rect: Rect,
        id: u64,
    ) -> Result<bool, CatfishError> {
        let mut path = Path::new();
        let root = self.tx.root;
        let root_node = self.get(region, root)?;
        let Some((mut off, mut node, pos)) =
            self.find(region, root, root_node, &rect, id, &mut path, 0)?
        else {
            return Ok(false);
        };
        let count = node.count as usize;
        node.entries.copy_within(pos + 1..count, pos);
        node.count -= 1;
        let min = min_fill(self.fanout);
        let mut orphans: Vec<(Entry, u16)> = Vec::new();
        while let Some((poff, idx)) = path.pop() {
            let mut p = self.get(region, poff)?;
            if (node.count as usize) < min {
                orphans.extend(node.entries().iter().map(|e| (*e, node.level)));
                let pc = p.count as usize;
                p.entries.copy_within(idx + 1..pc, idx);
                p.count -= 1;
                self.free(off);
            } else {
                self.put(off, node);
                if let Some(m) = node.mbr() {
                    p.entries[idx].rect = m;
                }
                self.order(&mut p);
            }
            (off, node) = (poff, p);
        }
        if node.level > 0 && node.count == 0 {
            return Err(CatfishError::Corrupt("condense emptied an internal root"));
        }
        self.put(off, node);
        // Subtrees first, then leaf entries, each at its own level.
        orphans.sort_by_key(|o| core::cmp::Reverse(o.1));
        for (e, level) in orphans {
            let mut reinserted = 0u64;
            self.insert_at(region, e, level, &mut reinserted)?;
        }
        loop {
            let root = self.get(region, self.tx.root)?;
            if root.level == 0 || root.count != 1 {
                break;
            }
            let child = GlobalAddr::from_raw(root.entries[0].ptr).offset();
            self.free(self.tx.root);
            self.tx.root = child;
        }
        Ok(true)
    }

    /// Finds the leaf holding (`rect`, `id`) below `node` (at `off`), following only entries
    /// whose rectangle contains `rect`; the path to it is left in `path`.
    #[allow(clippy::too_many_arguments)]
    fn find(
        &mut self,
        region: &dyn LocalRegion,
        off: u64,
        node: Node,
        rect: &Rect,
        id: u64,
        path: &mut Path,
        depth: usize,
    ) -> Result<Option<(u64, Node, usize)>, CatfishError> {
        if node.level == 0 {
            let pos = node
                .entries()
                .iter()
                .position(|e| e.ptr == id && e.rect == *rect);
            return Ok(pos.map(|p| (off, node, p)));
        }
        if depth > remora_layouts::catfish::MAX_LEVEL as usize {
            return Err(CatfishError::Corrupt("delete descended past MAX_LEVEL"));
        }
        for i in 0..node.count as usize {
            if node.entries[i].rect.union(rect) != node.entries[i].rect {
                continue;
            }
            path.push((off, i));
            let (coff, child) = self.child(region, off, &node, i)?;
            if let Some(hit) = self.find(region, coff, child, rect, id, path, depth + 1)? {
                return Ok(Some(hit));
            }
            path.pop();
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tree::tests::{check_with, mem};
    use super::*;
    use remora_layouts::catfish::TreeKind;

    /// Inserts and deletes at random against a plain list, for every kind; the tree keeps
    /// its invariants (no underfull node, covering rectangles, one leaf depth) and answers
    /// like the list.
    #[test]
    fn deletes_condense_and_match_brute_force_for_every_kind() {
        for kind in [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert] {
            let r = mem(16 << 20);
            let mut t = Tree::format_kind(&r, 4096, 15 << 20, 8, kind).unwrap();
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut live: Vec<(Rect, u64)> = Vec::new();
            for step in 0..3000u64 {
                if live.len() < 40 || next() % 5 < 3 {
                    let (x, y) = ((next() % 5000) as i32, (next() % 5000) as i32);
                    let rect = Rect::new(x, y, x + (next() % 80) as i32, y + 9).unwrap();
                    t.insert(&r, rect, step).unwrap();
                    live.push((rect, step));
                } else {
                    let k = (next() % live.len() as u64) as usize;
                    let (rect, id) = live.swap_remove(k);
                    assert!(t.delete(&r, rect, id).unwrap(), "{kind:?}: {id} not found");
                    assert!(!t.delete(&r, rect, id).unwrap(), "{kind:?}: {id} twice");
                }
                if step % 250 == 249 {
                    let (_, n, _) = check_with(&r, t.root_offset(), true, 8);
                    assert_eq!(n, live.len() as u64, "{kind:?} at step {step}");
                    let rep = t.check(&r).unwrap();
                    assert_eq!(rep.underfull, 0, "{kind:?}: {rep:?}");
                    let q = Rect::new(1000, 1000, 2500, 2000).unwrap();
                    let mut hits = Vec::new();
                    t.search(&r, &q, &mut hits).unwrap();
                    let mut got: Vec<u64> = hits.iter().map(|e| e.ptr).collect();
                    got.sort_unstable();
                    let mut want: Vec<u64> = live
                        .iter()
                        .filter(|(x, _)| x.intersects(&q))
                        .map(|l| l.1)
                        .collect();
                    want.sort_unstable();
                    assert_eq!(got, want, "{kind:?} at step {step}");
                }
            }
            // Delete everything: the tree ends as one empty leaf.
            for (rect, id) in live.drain(..) {
                assert!(t.delete(&r, rect, id).unwrap());
            }
            let rep = t.check(&r).unwrap();
            assert_eq!((rep.entries, rep.height), (0, 1), "{kind:?}");
            assert!(t.retired() > 0, "{kind:?}: condensing copies nodes");
        }
    }
}

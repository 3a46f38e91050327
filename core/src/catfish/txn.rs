//! Restructuring transactions: how the server changes the tree under one-sided readers
//! when entries move between nodes (R*'s forced reinsert, the Hilbert tree's redistribution
//! and 2-to-3 split, delete's condense-tree).
//!
//! An offloading search reads one level per round, and the nodes of one round at arbitrary
//! moments. If an entry moved from node A to node B by two in-place rewrites, a search could
//! read B before the entry arrived and A after it left, and miss an entry present the whole
//! time. So a transaction works on an overlay: every node it changes is kept in server memory
//! until [`Tree::commit`], which either
//!
//! - writes them in place, if nothing moved: every changed node only gained entries and grew
//!   rectangles (written top-down, so a reader that finds an entry always came through
//!   covering rectangles), or only lost entries and shrank rectangles (written bottom-up);
//!   that is the common insert and delete, or
//! - copies on write: every changed node and its ancestors up to the changes' lowest
//!   common ancestor go to fresh nodes, and that ancestor is rewritten once in place (or,
//!   if the root changes, everything up to it is copied and one store of the root pointer
//!   publishes the new tree). A search that read the ancestor (or root) before sees the old
//!   subtree whole (its replaced nodes are never written again), one that read it after
//!   sees the new one; entries present throughout are in both, entries deleted before the
//!   search began are in neither.
//!
//! Replaced and dropped nodes are retired once the new tree is published, and reused after
//! a grace period of epochs that offloaded readers check ([`super::reclaim`]). A
//! transaction that runs out of arena space leaves the region untouched and reports `Full`
//! (its carved nodes are kept for the next one).
//!
//! With no concurrent readers ([`Tree::set_exclusive`], an offline build) the overlay is
//! written in place and dropped nodes are reused: the tree's shape is the same either way.
use super::CatfishError;
use super::tree::{Tree, bad, read_node, write_fresh, write_in_place};
use crate::server::LocalRegion;
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::{Entry, META_ROOT_OFFSET, Node, TreeKind};
use std_alloc::collections::{BTreeMap, BTreeSet};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// The overlay of one transaction.
#[derive(Default)]
pub(super) struct Txn {
    /// Current images of the nodes the transaction changed or created, by offset.
    pub(super) over: BTreeMap<u64, Node>,
    /// Nodes carved by this transaction (no reader can reach them before the commit).
    pub(super) fresh: BTreeSet<u64>,
    /// Nodes of the published tree the transaction changed.
    pub(super) dirty: BTreeSet<u64>,
    /// Nodes of the published tree the transaction dropped.
    pub(super) freed: Vec<u64>,
    /// Parent of each node reached in this transaction.
    pub(super) parent: BTreeMap<u64, u64>,
    /// The root as the transaction sees it.
    pub(super) root: u64,
    /// Largest Hilbert value of every node the transaction changed or whose largest value
    /// it moved (Hilbert trees): set when the node is put, children before parents, so a
    /// parent reads its children's values here instead of recomputing them.
    pub(super) lhv: BTreeMap<u64, u64>,
}

/// How one changed node differs from its published image.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Same,
    Grew,
    Shrank,
    Other,
}

fn change(old: &Node, new: &Node) -> Change {
    if old.level != new.level {
        return Change::Other;
    }
    // Does every entry of `small` have its own entry in `big` with the same pointer and a
    // rectangle containing (grew) or contained in (shrank) it?
    let covers = |small: &Node, big: &Node, grow: bool| {
        let mut used = [false; remora_layouts::catfish::MAX_FANOUT];
        small.entries().iter().all(|s| {
            let hit = big.entries().iter().enumerate().position(|(k, b)| {
                let inside = if grow {
                    b.rect.union(&s.rect) == b.rect
                } else {
                    s.rect.union(&b.rect) == s.rect
                };
                !used[k] && b.ptr == s.ptr && inside
            });
            hit.map(|k| used[k] = true).is_some()
        })
    };
    let grew = covers(old, new, true);
    if grew && old.count == new.count && covers(new, old, true) {
        Change::Same
    } else if grew {
        Change::Grew
    } else if covers(new, old, false) {
        Change::Shrank
    } else {
        Change::Other
    }
}

impl Tree {
    /// Starts a transaction on the published tree.
    pub(super) fn begin(&mut self) {
        self.tx = Txn {
            root: self.root,
            ..Txn::default()
        };
    }

    /// The node at `off` as the transaction sees it.
    pub(super) fn get(&self, region: &dyn LocalRegion, off: u64) -> Result<Node, CatfishError> {
        match self.tx.over.get(&off) {
            Some(n) => Ok(*n),
            None => read_node(region, off, self.fanout),
        }
    }

    /// The child of `node` (at `off`) named by entry `idx`, remembering its parent.
    pub(super) fn child(
        &mut self,
        region: &dyn LocalRegion,
        off: u64,
        node: &Node,
        idx: usize,
    ) -> Result<(u64, Node), CatfishError> {
        let e = node
            .entries()
            .get(idx)
            .ok_or(bad("entry index out of range"))?;
        let c = GlobalAddr::from_raw(e.ptr);
        if c.node() != region.node() || c.is_device() {
            return Err(CatfishError::Corrupt("child on another node"));
        }
        let child = self.get(region, c.offset())?;
        if child.level + 1 != node.level {
            return Err(CatfishError::Corrupt("child level is not parent level - 1"));
        }
        self.tx.parent.insert(c.offset(), off);
        Ok((c.offset(), child))
    }

    /// Sets the transaction's image of the node at `off`.
    pub(super) fn put(&mut self, off: u64, node: Node) {
        if !self.tx.fresh.contains(&off) {
            self.tx.dirty.insert(off);
        }
        self.note_node_lhv(off, &node);
        self.tx.over.insert(off, node);
    }

    /// Records the largest Hilbert value of `node` (at `off`) for the transaction (Hilbert
    /// trees): O(fanout) look-ups of its children's stored values, one key in a leaf.
    pub(super) fn note_node_lhv(&mut self, off: u64, node: &Node) {
        if self.kind == TreeKind::Hilbert {
            let v = self.node_lhv(node);
            self.tx.lhv.insert(off, v);
        }
    }

    /// A fresh node holding `node`; returns its offset.
    pub(super) fn alloc(&mut self, node: Node) -> Result<u64, CatfishError> {
        let off = self.carve_node()?;
        self.tx.fresh.insert(off);
        self.note_node_lhv(off, &node);
        self.tx.over.insert(off, node);
        Ok(off)
    }

    /// Drops the node at `off` from the tree.
    pub(super) fn free(&mut self, off: u64) {
        self.tx.over.remove(&off);
        self.tx.lhv.remove(&off);
        self.tx.dirty.remove(&off);
        if self.tx.fresh.remove(&off) {
            self.reclaim.give_back(off);
        } else {
            self.tx.freed.push(off);
        }
    }

    /// The entry naming the node at `off` (its bounding rectangle and address).
    pub(super) fn entry_of(
        &self,
        region: &dyn LocalRegion,
        off: u64,
        node: &Node,
    ) -> Result<Entry, CatfishError> {
        Ok(Entry {
            rect: node.mbr().ok_or(bad("empty node has no rectangle"))?,
            ptr: GlobalAddr::new(region.node(), off).raw(),
        })
    }

    /// Forgets the transaction; nodes it carved are kept for the next one.
    pub(super) fn abort(&mut self) {
        let fresh = core::mem::take(&mut self.tx.fresh);
        for off in fresh {
            self.reclaim.give_back(off);
        }
        self.tx = Txn::default();
    }

    /// Writes the transaction to the region (see the module documentation). On `Full` the
    /// region is untouched.
    pub(super) fn commit(&mut self, region: &dyn LocalRegion) -> Result<(), CatfishError> {
        let r = self.commit_inner(region);
        if r.is_err() {
            self.abort();
        } else {
            self.tx = Txn::default();
        }
        r
    }

    fn commit_inner(&mut self, region: &dyn LocalRegion) -> Result<(), CatfishError> {
        if self.exclusive {
            return self.commit_exclusive(region);
        }
        if self.tx.fresh.is_empty() && self.tx.freed.is_empty() && self.tx.root == self.root {
            let mut kinds = Vec::new();
            for &off in &self.tx.dirty {
                let old = read_node(region, off, self.fanout)?;
                let new = self.tx.over[&off];
                let c = change(&old, &new);
                if c != Change::Same {
                    kinds.push((c, new.level, off, old.version));
                }
            }
            let all = |c: Change| kinds.iter().all(|k| k.0 == c);
            let grew = all(Change::Grew);
            if grew || all(Change::Shrank) {
                // Grown nodes top-down, shrunk ones bottom-up.
                kinds.sort_by_key(|k| k.1);
                if grew {
                    kinds.reverse();
                }
                for (_, _, off, version) in kinds {
                    let mut n = self.tx.over[&off];
                    n.version = version;
                    write_in_place(region, off, &mut n)?;
                }
                self.note_lhv(&BTreeMap::new());
                return Ok(());
            }
        }
        self.commit_cow(region)
    }

    /// No concurrent readers: write everything where it is, reuse what was dropped.
    fn commit_exclusive(&mut self, region: &dyn LocalRegion) -> Result<(), CatfishError> {
        let over = core::mem::take(&mut self.tx.over);
        let birth = self.birth();
        for (&off, node) in &over {
            if self.tx.fresh.contains(&off) {
                write_fresh(region, off, node, birth)?;
            } else {
                let mut n = *node;
                n.version = read_node(region, off, self.fanout)?.version;
                write_in_place(region, off, &mut n)?;
            }
        }
        self.tx.over = over;
        self.note_lhv(&BTreeMap::new());
        self.publish_root(region, self.tx.root)?;
        let freed = core::mem::take(&mut self.tx.freed);
        for off in freed {
            self.retire(region, off)?;
        }
        Ok(())
    }

    /// Copy on write up to the root, then one store of the root pointer.
    fn commit_cow(&mut self, region: &dyn LocalRegion) -> Result<(), CatfishError> {
        // The path from the root to every changed published node.
        let mut chains: Vec<Vec<u64>> = Vec::new();
        for &d in &self.tx.dirty {
            let mut chain = vec![d];
            let mut at = d;
            while at != self.tx.root {
                match self.tx.parent.get(&at) {
                    Some(&p) => at = p,
                    None if at == self.root => break,
                    None => return Err(CatfishError::Corrupt("transaction lost a parent")),
                }
                chain.push(at);
                if chain.len() > remora_layouts::catfish::MAX_LEVEL as usize + 2 {
                    return Err(CatfishError::Corrupt("transaction parents form a cycle"));
                }
            }
            chain.reverse();
            chains.push(chain);
        }
        // If the root stays, every change lies below one node, their lowest common
        // ancestor: the nodes below it are copied and it is rewritten once in place (a reader
        // that read it before sees only old nodes below, after only new ones). Otherwise
        // everything up to the root is copied and the new root published.
        let lca = match chains.first() {
            Some(first) if self.tx.root == self.root && first[0] == self.root => {
                let mut k = 0;
                while chains
                    .iter()
                    .all(|c| c[0] == self.root && c.len() > k + 1 && c[k + 1] == first[k + 1])
                {
                    k += 1;
                }
                chains.iter().all(|c| c[0] == self.root).then_some(first[k])
            }
            _ => None,
        };
        let mut copy: BTreeSet<u64> = BTreeSet::new();
        for c in &chains {
            let from = match lca {
                Some(l) => c.iter().position(|&x| x == l).map_or(0, |p| p + 1),
                None => 0,
            };
            copy.extend(c[from..].iter().copied());
        }
        // Carve every copy before writing anything, so `Full` leaves the region untouched.
        let mut moved: BTreeMap<u64, u64> = BTreeMap::new();
        for &off in &copy {
            let to = self.carve_node()?;
            self.tx.fresh.insert(to);
            moved.insert(off, to);
        }
        let node_id = region.node();
        let remap = |n: &mut Node| {
            let count = n.count as usize;
            for e in n.entries[..count].iter_mut() {
                let a = GlobalAddr::from_raw(e.ptr);
                if n.level > 0
                    && let Some(&to) = moved.get(&a.offset())
                {
                    e.ptr = GlobalAddr::new(node_id, to).raw();
                }
            }
        };
        let mut out: BTreeMap<u64, Node> = BTreeMap::new();
        for &off in &copy {
            let mut n = match self.tx.over.get(&off) {
                Some(n) => *n,
                None => read_node(region, off, self.fanout)?,
            };
            remap(&mut n);
            out.insert(moved[&off], n);
        }
        for (&off, n) in &self.tx.over {
            if !copy.contains(&off) && Some(off) != lca {
                let mut n = *n;
                remap(&mut n);
                out.insert(off, n);
            }
        }
        let birth = self.birth();
        for (&off, n) in &out {
            write_fresh(region, off, n, birth)?;
        }
        if let Some(l) = lca {
            let old = read_node(region, l, self.fanout)?;
            let mut n = self.tx.over.get(&l).copied().unwrap_or(old);
            remap(&mut n);
            n.version = old.version;
            write_in_place(region, l, &mut n)?;
            out.insert(l, n);
        }
        let root = moved.get(&self.tx.root).copied().unwrap_or(self.tx.root);
        self.tx.over = out;
        self.note_lhv(&moved);
        for &off in moved.keys().chain(&self.tx.freed) {
            self.lhv.remove(&off);
        }
        self.publish_root(region, root)?;
        // Unlinked now: the replaced and the dropped nodes wait out their grace period.
        let freed = core::mem::take(&mut self.tx.freed);
        for off in moved.into_keys().chain(freed) {
            self.retire(region, off)?;
        }
        Ok(())
    }

    fn publish_root(&mut self, region: &dyn LocalRegion, root: u64) -> Result<(), CatfishError> {
        if root != self.root {
            let raw = GlobalAddr::new(region.node(), root).raw();
            region.store_u64(self.meta + META_ROOT_OFFSET, raw)?;
            region.persist(self.meta + META_ROOT_OFFSET, 8);
            self.root = root;
        }
        Ok(())
    }

    /// Keeps the largest Hilbert value of every node the transaction changed (Hilbert
    /// trees), under its published offset (`moved`: where copy on write put a node). Only
    /// the transaction's nodes are touched: O(path) per insert.
    fn note_lhv(&mut self, moved: &BTreeMap<u64, u64>) {
        if self.kind != TreeKind::Hilbert {
            return;
        }
        let lhv = core::mem::take(&mut self.tx.lhv);
        for (&from, &to) in moved {
            let v = lhv
                .get(&from)
                .or_else(|| self.lhv.get(&from))
                .copied()
                .unwrap_or(0);
            self.lhv.insert(to, v);
        }
        for (off, v) in lhv {
            if !moved.contains_key(&off) {
                self.lhv.insert(off, v);
            }
        }
    }
}

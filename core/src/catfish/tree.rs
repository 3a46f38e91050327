//! The R-tree as the server CPU keeps it in its own region: Guttman's R-tree with the
//! quadratic split, the R*-tree or the Hilbert R-tree ([`TreeKind`], chosen when the tree
//! is formatted and recorded in the superblock; the node format is the same for all three,
//! so searches, by messaging or offloading, do not depend on it).
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
//!   so a search never misses an entry that was inserted before it started.
//! - Changes that move entries between nodes (R*'s forced reinsert, the Hilbert tree's
//!   redistribution, delete's condense-tree; the basic tree's splits above) are
//!   transactions ([`super::txn`]): in place when nothing moved, else copy on write up to a
//!   new root published by one store.
//!
//! Replaced and dropped nodes are reclaimed by epochs ([`super::reclaim`]): a node retired
//! in epoch `e` is reused only from epoch `e + 2` on, and carries its birth epoch in its
//! version word, so a one-sided reader that could still hold a pointer to its old self
//! recognises it and restarts.
//!
//! Nodes are carved from arenas the clients give the server (allocator chunks, by `Init`
//! and `Grow`; [`super::arenas`]). A new arena is refused if it overlaps any memory an earlier
//! one was given (the whole `[start, end)`, carved part included), and there is no fixed cap
//! on how many arenas a tree takes: each holds its record and at least one node, so the
//! region bounds their number. Each arena's record is persistent, so a restarted server
//! gets back everything in them the tree does not reach ([`Tree::recover`]).
use super::CatfishError;
use super::arenas::{Arenas, SUPERBLOCK_LEN};
use super::quadratic::{choose_subtree, quadratic_split};
use super::reclaim::Reclaim;
use super::txn::Txn;
use crate::server::LocalRegion;
use remora_layouts::catfish::{
    Entry, FANOUT, MAX_LEVEL, MAX_NODE_LEN, META_EPOCH_OFFSET, META_FANOUT_OFFSET,
    META_HEARTBEAT_OFFSET, META_KIND_OFFSET, META_LEN, META_MAGIC, META_MAGIC_OFFSET,
    META_ROOT_OFFSET, Node, REUSE_GRACE, ROOT_SLOT, Rect, TreeKind, VERSION_SEQ_BITS, check_fanout,
    min_fill, next_version, node_len, node_version,
};
use remora_layouts::region::root_offset;
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::collections::BTreeMap;
use std_alloc::vec::Vec;

/// One step of an insert's descent: the node, its offset, and which entry was followed.
#[derive(Clone, Copy)]
struct Step {
    off: u64,
    node: Node,
    idx: usize,
}

/// The server's handle on a formatted tree.
pub struct Tree {
    /// Entries per node, and the bytes of a node image.
    pub(super) fanout: usize,
    node_len: u64,
    pub(super) meta: u64,
    pub(super) root: u64,
    pub(super) kind: TreeKind,
    /// The transaction in progress ([`super::txn`]).
    pub(super) tx: Txn,
    /// Retired nodes waiting for their grace period, nodes ready for reuse, and the epoch.
    pub(super) reclaim: Reclaim,
    /// No concurrent readers: transactions write in place and reuse dropped nodes.
    pub(super) exclusive: bool,
    /// Largest Hilbert value below each node (Hilbert trees; server memory only, rebuilt
    /// by [`Tree::recover`]).
    pub(super) lhv: BTreeMap<u64, u64>,
    /// The arenas and their free space ([`super::arenas`]). Their number is bounded by the
    /// region, not by a constant: each holds its record and at least one node.
    arenas: Arenas,
    /// Leaf Hilbert keys computed by inserts and deletes (tests count them).
    #[cfg(test)]
    pub(super) keys: core::sync::atomic::AtomicU64,
    path: Vec<Step>,
    stack: Vec<u64>,
    nodes: u64,
}

/// What [`Tree::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeReport {
    /// Reachable nodes.
    pub nodes: u64,
    /// Leaf entries.
    pub entries: u64,
    /// Levels, leaves included.
    pub height: u16,
    /// Non-root nodes below the minimum fill (legal only in a tree that lost a split).
    pub underfull: u64,
}

pub(super) fn bad(what: &'static str) -> CatfishError {
    CatfishError::Layout(LayoutError::Inconsistent { what })
}

impl Tree {
    /// Formats an empty tree of the default fanout (see [`Tree::format_with`]).
    pub fn format(region: &dyn LocalRegion, base: u64, len: u64) -> Result<Tree, CatfishError> {
        Tree::format_with(region, base, len, FANOUT)
    }

    /// Formats an empty tree of `fanout` entries per node (`MIN_FANOUT` to [`MAX_FANOUT`](remora_layouts::catfish::MAX_FANOUT))
    /// in the arena `[base, base + len)` and publishes its superblock in root slot
    /// [`ROOT_SLOT`].
    pub fn format_with(
        region: &dyn LocalRegion,
        base: u64,
        len: u64,
        fanout: usize,
    ) -> Result<Tree, CatfishError> {
        Tree::format_kind(region, base, len, fanout, TreeKind::Guttman)
    }

    /// [`Tree::format_with`] for a tree of `kind`.
    pub fn format_kind(
        region: &dyn LocalRegion,
        base: u64,
        len: u64,
        fanout: usize,
        kind: TreeKind,
    ) -> Result<Tree, CatfishError> {
        let fanout = check_fanout(fanout)?;
        let mut t = Tree {
            fanout,
            node_len: node_len(fanout) as u64,
            meta: 0,
            root: 0,
            kind,
            tx: Txn::default(),
            reclaim: Reclaim::default(),
            exclusive: false,
            lhv: BTreeMap::new(),
            arenas: Arenas::new(node_len(fanout) as u64),
            #[cfg(test)]
            keys: Default::default(),
            path: Vec::with_capacity(MAX_LEVEL as usize + 1),
            stack: Vec::new(),
            nodes: 0,
        };
        t.arenas.add(region, base, len)?;
        t.meta = t.carve(SUPERBLOCK_LEN)?;
        t.root = t.carve(t.node_len)?;
        write_fresh(region, t.root, &Node::with_fanout(0, fanout), 0)?;
        let node = region.node();
        region.store_u64(t.meta + META_EPOCH_OFFSET, 0)?;
        region.store_u64(
            t.meta + META_ROOT_OFFSET,
            GlobalAddr::new(node, t.root).raw(),
        )?;
        region.store_u64(t.meta + META_HEARTBEAT_OFFSET, 0)?;
        region.store_u64(t.meta + META_FANOUT_OFFSET, fanout as u64)?;
        region.store_u64(t.meta + META_KIND_OFFSET, kind as u64)?;
        region.store_u64(t.meta + META_MAGIC_OFFSET, META_MAGIC)?;
        region.persist(t.meta, META_LEN);
        t.arenas.link(region, t.meta)?;
        let slot = root_offset(ROOT_SLOT);
        region.store_u64(slot, GlobalAddr::new(node, t.meta).raw())?;
        region.persist(slot, 8);
        Ok(t)
    }

    /// Opens the tree a previous life of the server left in root slot [`ROOT_SLOT`] (a
    /// persistent region after a restart), checking its whole structure first (a node that
    /// does not decode, torn or not, refuses the tree). `Ok(None)`: no tree was ever published.
    ///
    /// The tree gets its arenas back from their records, and everything in them that is not
    /// reachable from the root is free again: what the previous life retired or had ready for
    /// reuse, nodes of a transaction cut short, mailbox blocks, uncarved tails
    /// ([`super::arenas`]; a tree formatted before arena records gets none back). Those nodes
    /// are reused at once, so the reclamation epoch moves past anything a reader of the
    /// previous life can have seen: the superblock's epoch `e` becomes `e + REUSE_GRACE + 1`
    /// (persisted before anything is written; the previous life persisted every epoch step
    /// before the next, so a reader saw at most `e + 1`), and every node written fresh from now
    /// on is born at or after `e0 + REUSE_GRACE` for any epoch `e0` such a reader holds, which
    /// makes it restart ([`super::reclaim`]). The epoch only grows across restarts.
    pub fn recover(region: &dyn LocalRegion) -> Result<Option<(Tree, TreeReport)>, CatfishError> {
        let raw = region.load_u64(root_offset(ROOT_SLOT))?;
        if raw == 0 {
            return Ok(None);
        }
        let meta = GlobalAddr::from_raw(raw);
        if meta.node() != region.node() || meta.is_device() {
            return Err(bad("root slot names another node's memory"));
        }
        let meta = meta.offset();
        if region.load_u64(meta + META_MAGIC_OFFSET)? != META_MAGIC {
            return Err(CatfishError::Layout(LayoutError::BadMagic {
                expected: META_MAGIC,
                found: region.load_u64(meta + META_MAGIC_OFFSET)?,
            }));
        }
        let root = GlobalAddr::from_raw(region.load_u64(meta + META_ROOT_OFFSET)?);
        if root.node() != region.node() || root.is_device() {
            return Err(bad("superblock root names another node's memory"));
        }
        let fanout = usize::try_from(region.load_u64(meta + META_FANOUT_OFFSET)?)
            .map_err(|_| bad("fanout out of range"))
            .and_then(|f| check_fanout(f).map_err(CatfishError::Layout))?;
        let kind = TreeKind::decode(region.load_u64(meta + META_KIND_OFFSET)?)?;
        let epoch = region.load_u64(meta + META_EPOCH_OFFSET)?;
        let mut t = Tree {
            fanout,
            node_len: node_len(fanout) as u64,
            meta,
            root: root.offset(),
            kind,
            tx: Txn::default(),
            reclaim: Reclaim::default(),
            exclusive: false,
            lhv: BTreeMap::new(),
            arenas: Arenas::new(node_len(fanout) as u64),
            #[cfg(test)]
            keys: Default::default(),
            path: Vec::with_capacity(MAX_LEVEL as usize + 1),
            stack: Vec::new(),
            nodes: region.len() / node_len(fanout) as u64,
        };
        let mut live = Vec::new();
        let report = t.walk(region, |off| live.push(off))?;
        t.arenas = Arenas::recover(region, meta, t.node_len, &live)?;
        drop(live);
        t.nodes = report.nodes;
        if kind == TreeKind::Hilbert {
            t.rebuild_lhv(region, t.root, 0)?;
        }
        // Checked whole: only now write anything.
        let epoch = epoch
            .checked_add(REUSE_GRACE + 1)
            .filter(|e| *e < 1 << (64 - VERSION_SEQ_BITS))
            .ok_or(CatfishError::Corrupt("reclamation epoch out of range"))?;
        region.store_u64(meta + META_EPOCH_OFFSET, epoch)?;
        region.persist(meta + META_EPOCH_OFFSET, 8);
        t.reclaim.set_epoch(epoch);
        Ok(Some((t, report)))
    }

    /// Walks the whole tree and checks the R-tree invariants: every node decodes, each
    /// child is one level below its parent, each entry's rectangle covers its child, no node
    /// is reached twice, every non-root node holds at least [`min_fill`] entries.
    pub fn check(&mut self, region: &dyn LocalRegion) -> Result<TreeReport, CatfishError> {
        self.walk(region, |_| ())
    }

    /// [`Tree::check`], telling `seen` the offset of every node it reaches.
    fn walk(
        &self,
        region: &dyn LocalRegion,
        mut seen: impl FnMut(u64),
    ) -> Result<TreeReport, CatfishError> {
        let root = read_node(region, self.root, self.fanout)?;
        let mut report = TreeReport {
            nodes: 0,
            entries: 0,
            height: root.level + 1,
            underfull: 0,
        };
        let limit = region.len() / self.node_len;
        let mut stack: Vec<(u64, Option<Rect>, u16)> = Vec::new();
        stack.push((self.root, None, root.level));
        while let Some((off, cover, level)) = stack.pop() {
            report.nodes += 1;
            if report.nodes > limit {
                return Err(CatfishError::Corrupt(
                    "the tree reaches a node twice: a cycle",
                ));
            }
            let node = read_node(region, off, self.fanout)?;
            seen(off);
            if node.level != level {
                return Err(CatfishError::Corrupt("child level is not parent level - 1"));
            }
            if cover.is_some() && (node.count as usize) < min_fill(self.fanout) {
                report.underfull += 1;
            }
            if let (Some(c), Some(m)) = (cover, node.mbr())
                && c.union(&m) != c
            {
                return Err(CatfishError::Corrupt("an entry does not cover its child"));
            }
            if node.level == 0 {
                report.entries += node.count as u64;
                continue;
            }
            if node.count == 0 {
                return Err(CatfishError::Corrupt("internal node without entries"));
            }
            for e in node.entries() {
                let child = GlobalAddr::from_raw(e.ptr);
                if child.node() != region.node() || child.is_device() {
                    return Err(CatfishError::Corrupt("child on another node"));
                }
                stack.push((child.offset(), Some(e.rect), node.level - 1));
            }
        }
        Ok(report)
    }

    /// Entries per node.
    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// Which R-tree this is.
    pub fn kind(&self) -> TreeKind {
        self.kind
    }

    /// Offset of the root node.
    pub fn root_offset(&self) -> u64 {
        self.root
    }

    /// Nodes replaced or dropped while readers may hold them (split-off, copied on write or
    /// condensed away), since this server opened the tree.
    pub fn retired(&self) -> u64 {
        self.reclaim.retired()
    }

    /// Retired nodes written again after their grace period (each one a node the tree
    /// would otherwise have carved).
    pub fn reused(&self) -> u64 {
        self.reclaim.reused()
    }

    /// Retired nodes still in their grace period, and nodes ready for reuse.
    pub fn reclaiming(&self) -> (u64, u64) {
        self.reclaim.waiting()
    }

    /// The reclamation epoch (the superblock's copy).
    pub fn epoch(&self) -> u64 {
        self.reclaim.epoch()
    }

    /// Retirements per epoch (at least 1; default [`super::reclaim::DEFAULT_BATCH`]): fewer
    /// reclaim sooner, more make an offloaded reader's restart rarer.
    pub fn set_reclaim_batch(&mut self, batch: u64) {
        self.reclaim.set_batch(batch);
    }

    /// Declares that no client reads the tree one-sidedly (an offline build): transactions
    /// then write in place and reuse dropped nodes. The tree's shape does not depend on it.
    pub fn set_exclusive(&mut self, exclusive: bool) {
        self.exclusive = exclusive;
    }

    /// Recomputes the largest Hilbert value of every node below `off`.
    fn rebuild_lhv(
        &mut self,
        region: &dyn LocalRegion,
        off: u64,
        depth: usize,
    ) -> Result<u64, CatfishError> {
        if depth > MAX_LEVEL as usize {
            return Err(CatfishError::Corrupt("tree deeper than MAX_LEVEL"));
        }
        let node = read_node(region, off, self.fanout)?;
        let mut m = 0;
        for e in node.entries() {
            let k = if node.level == 0 {
                super::hilbert::key(&e.rect)
            } else {
                self.rebuild_lhv(region, GlobalAddr::from_raw(e.ptr).offset(), depth + 1)?
            };
            m = m.max(k);
        }
        self.lhv.insert(off, m);
        Ok(m)
    }

    /// Offset of the superblock.
    pub fn meta(&self) -> u64 {
        self.meta
    }

    /// Nodes carved so far (live and split-off).
    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    /// Adds the arena `[base, base + len)` to carve nodes from, recorded so that a restart
    /// finds it again ([`super::arenas`]). Refused if it lies outside the region, holds no
    /// whole node past its 64-byte record, or overlaps memory the tree was already given (its
    /// superblock, its nodes, or free space of an earlier arena).
    pub fn grow(
        &mut self,
        region: &dyn LocalRegion,
        base: u64,
        len: u64,
    ) -> Result<(), CatfishError> {
        self.arenas.add(region, base, len)?;
        self.arenas.link(region, self.meta)
    }

    /// Nodes that still fit in the arenas, or are ready for reuse.
    fn room(&self) -> u64 {
        self.arenas.room() + self.reclaim.ready()
    }

    /// Nodes that still fit in the free space of the arenas, or are ready for reuse.
    pub fn free_nodes(&self) -> u64 {
        self.room()
    }

    /// Arenas the tree has been given.
    pub fn arenas(&self) -> usize {
        self.arenas.count()
    }

    /// Carves `size` bytes at an `align`-aligned offset from the first arena with room.
    fn carve_aligned(&mut self, size: u64, align: u64) -> Result<u64, CatfishError> {
        let at = self.arenas.carve_aligned(size, align)?;
        self.nodes += 1;
        Ok(at)
    }

    /// Carves one node (or the superblock).
    fn carve(&mut self, size: u64) -> Result<u64, CatfishError> {
        self.carve_aligned(size, 8)
    }

    /// A node's worth of memory: a reclaimed one first, else carved.
    pub(super) fn carve_node(&mut self) -> Result<u64, CatfishError> {
        match self.reclaim.take() {
            Some(off) => Ok(off),
            None => self.carve(self.node_len),
        }
    }

    /// Drops the node at `off`, which readers may still hold: reused after the grace
    /// period (at once with no concurrent readers). Call once the tree no longer links it.
    pub(super) fn retire(
        &mut self,
        region: &dyn LocalRegion,
        off: u64,
    ) -> Result<(), CatfishError> {
        self.lhv.remove(&off);
        if self.exclusive {
            self.reclaim.give_back(off);
            return Ok(());
        }
        self.reclaim
            .retire(region, self.meta + META_EPOCH_OFFSET, off)
    }

    /// The epoch a node written fresh now is born in.
    pub(super) fn birth(&self) -> u64 {
        self.reclaim.epoch()
    }

    /// Carves a 64-byte aligned block of `size` bytes for the server's own use (a client's
    /// request mailbox); it is never part of the tree.
    pub fn carve_block(&mut self, size: u64) -> Result<u64, CatfishError> {
        let at = self.carve_aligned(size, 64)?;
        self.nodes -= 1;
        Ok(at)
    }

    /// Current root offset and level.
    fn root(&self, region: &dyn LocalRegion) -> Result<(u64, Node), CatfishError> {
        Ok((self.root, read_node(region, self.root, self.fanout)?))
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
        if self.kind != TreeKind::Guttman {
            self.begin();
            let mut reinserted = 0u64;
            return match self.insert_at(region, Entry { rect, ptr: id }, 0, &mut reinserted) {
                Ok(()) => self.commit(region),
                Err(e) => {
                    self.abort();
                    Err(e)
                }
            };
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
            let child_node = read_node(region, child_off, self.fanout)?;
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
        // Nodes split in two: retired once the tree no longer links them.
        let mut split = [0u64; MAX_LEVEL as usize + 1];
        let mut splits = 0;
        loop {
            let (toff, mut tnode) = target;
            if !tnode.is_full() {
                tnode.push(carry)?;
                write_in_place(region, toff, &mut tnode)?;
                for &off in &split[..splits] {
                    self.retire(region, off)?;
                }
                return Ok(());
            }
            let (a, b) = quadratic_split(&tnode, carry)?;
            let a_off = self.carve_node()?;
            let b_off = self.carve_node()?;
            let birth = self.birth();
            write_fresh(region, a_off, &a, birth)?;
            write_fresh(region, b_off, &b, birth)?;
            *split
                .get_mut(splits)
                .ok_or(bad("tree taller than MAX_LEVEL"))? = toff;
            splits += 1;
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
                    let mut r = Node::with_fanout(tnode.level + 1, self.fanout);
                    if r.level > MAX_LEVEL {
                        return Err(bad("tree taller than MAX_LEVEL"));
                    }
                    r.push(ea)?;
                    r.push(eb)?;
                    let r_off = self.carve_node()?;
                    write_fresh(region, r_off, &r, self.birth())?;
                    let raw = GlobalAddr::new(node_id, r_off).raw();
                    region.store_u64(self.meta + META_ROOT_OFFSET, raw)?;
                    region.persist(self.meta + META_ROOT_OFFSET, 8);
                    self.root = r_off;
                    for &off in &split[..splits] {
                        self.retire(region, off)?;
                    }
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
            let node = read_node(region, off, self.fanout)?;
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

/// Reads and validates one node of a tree of `fanout` (the server is the only writer, so
/// it never tears here).
pub fn read_node(region: &dyn LocalRegion, off: u64, fanout: usize) -> Result<Node, CatfishError> {
    let mut buf = [0u8; MAX_NODE_LEN];
    let len = node_len(check_fanout(fanout)?);
    region.read(off, &mut buf[..len])?;
    Ok(Node::decode_with(&buf[..len], fanout)?)
}

/// Writes a node no reader can reach through the published tree, born in epoch `birth`
/// (the current epoch: a reader holding a pointer to a former node at `off` tells them
/// apart by it, see [`super::reclaim`]).
pub(super) fn write_fresh(
    region: &dyn LocalRegion,
    off: u64,
    node: &Node,
    birth: u64,
) -> Result<(), CatfishError> {
    let img = node.encode(node_version(birth, 2));
    region.write(off, &img)?;
    region.persist(off, img.len());
    Ok(())
}

/// Rewrites a reachable node as a seqlock: head odd, body and tail, head even.
pub(super) fn write_in_place(
    region: &dyn LocalRegion,
    off: u64,
    node: &mut Node,
) -> Result<(), CatfishError> {
    let (next, busy) = next_version(node.version);
    node.version = next;
    let img = node.encode(next);
    region.store_u64(off, busy)?;
    region.write(off + 8, &img[8..])?;
    region.store_u64(off, next)?;
    region.persist(off, img.len());
    Ok(())
}

#[cfg(test)]
#[path = "tree_tests.rs"]
pub(super) mod tests;

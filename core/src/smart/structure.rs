//! Changing internal nodes: one slot by CAS (or under the node lock in the baseline), and
//! the structural modifications built on it — insert into an empty slot, leaf split, prefix
//! split, grow. Each builds its new objects off to the side, publishes them with one slot
//! change, and on failure frees them (they were never reachable) and asks for a restart.
use super::config::SmartError;
use super::remote::{NodeImg, build_leaf};
use super::search::Parent;
use super::{Smart, bump};
use crate::fabric::{Endpoint, Op, QueuePair, Work};
use remora_layouts::smart::{
    Header, LeafStatus, MAX_LEAF_BYTES, MAX_NODE_BYTES, MAX_PREFIX, NODE_HEADER_OFFSET,
    NODE_REV_OFFSET, NODE_SLOTS_OFFSET, NodeType, Slot, SlotKind, leaf_bytes, slot_offset,
};
use remora_layouts::{GlobalAddr, LayoutError};

/// Outcome of a slot change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Swap {
    Done,
    /// The slot held another value (returned).
    Failed(Slot),
    /// The node changed under us (lock mode: its header is not what we read).
    Stale,
}

fn layout(what: &'static str) -> impl Fn(LayoutError) -> SmartError {
    move |err| SmartError::Corrupt { what, err }
}

/// A slot that names a leaf or node (neither empty nor dead): what a copy keeps.
pub(crate) fn is_live(s: &Slot) -> bool {
    !s.is_empty() && !s.is_dead()
}

/// The smallest node type holding `n` slots (the type of a compacted copy).
pub(crate) fn fit(n: usize) -> NodeType {
    NodeType::ALL
        .into_iter()
        .find(|t| t.capacity() >= n)
        .unwrap_or(NodeType::N256)
}

/// Whether a delete that leaves a node of type `ty` with `others` live slots replaces it by
/// a compacted copy (the freeze, copy and swing of a grow: [`Smart::remove_node`]): it is
/// removed when no live slot is left, and a Node16 or Node48 shrinks once its live slots
/// would fill at most half of the next smaller type (to the smallest type holding them with
/// one slot free, as a grow's compaction sizes its copy). Without the shrink a node never left its largest type
/// while it held a key: under churn the tree's memory drifted into Node16s with two or three
/// keys, whose freed bytes the smaller classes (leaves, Node4s) cannot use. The half-full
/// margin keeps a node hovering around one size from being copied back and forth at every
/// insert and delete. Node256s are left alone (the root, and nodes of dense key bytes).
pub(crate) fn compacts(ty: NodeType, others: usize) -> bool {
    let half_of_smaller = match ty {
        NodeType::N16 => NodeType::N4.capacity() / 2,
        NodeType::N48 => NodeType::N16.capacity() / 2,
        NodeType::N4 | NodeType::N256 => 0,
    };
    others == 0 || others <= half_of_smaller
}

fn pack(a: GlobalAddr) -> Result<u64, SmartError> {
    a.pack48().map_err(layout("address beyond 48 bits"))
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// Changes slot `idx` of `node` from `expected` to `new`. A frozen `expected` is never
    /// changed ([`Swap::Stale`]): its node is being copied by a grow.
    pub(crate) async fn change_slot(
        &self,
        node: GlobalAddr,
        header: Header,
        idx: usize,
        expected: Slot,
        new: Slot,
    ) -> Result<Swap, SmartError> {
        if expected.is_frozen() {
            // A frozen slot belongs to a node that a grow is copying, or has copied and
            // retired: the copy already holds the slot's value, so a change made here would
            // be lost and leave the copy pointing at whatever we replaced. (The CAS below
            // would succeed, since it compares the whole word, frozen bit included.) The
            // caller restarts and finds the copy.
            return Ok(Swap::Stale);
        }
        let at = node.add(slot_offset(idx) as u64);
        if self.cfg.techniques.lock_free_internal {
            let old = self.cas(at, expected.raw(), new.raw()).await?;
            return Ok(if old == expected.raw() {
                Swap::Done
            } else {
                Swap::Failed(Slot::from_raw(old))
            });
        }
        // Lock-based baseline: take the node lock (with the header and the slot read in the
        // same doorbell), check that no grow froze the node, write the slot, unlock (or hand
        // the lock over to a client of this compute node: `handover.rs`).
        let hdr = node.add(NODE_HEADER_OFFSET as u64);
        let mut front = [0u8; 8];
        let mut cur = [0u8; 8];
        let lock = self
            .lock_node(node, &mut [(hdr, &mut front[..]), (at, &mut cur[..])])
            .await?;
        let current = u64::from_le_bytes(cur);
        let now_h = u64::from_le_bytes(front);
        if now_h != header.frozen(false).raw() {
            self.unlock_node(lock, None).await?;
            return Ok(Swap::Stale);
        }
        if current != expected.raw() {
            self.unlock_node(lock, None).await?;
            return Ok(Swap::Failed(Slot::from_raw(current)));
        }
        let nw = new.raw().to_le_bytes();
        self.unlock_node(lock, Some((at, &nw[..]))).await?;
        Ok(Swap::Done)
    }

    /// The reverse pointer new internal nodes get: the parent's address, except in
    /// lock-based mode, where the word is the node's lock (free: 0).
    fn node_rev(&self, parent: GlobalAddr) -> Result<u64, SmartError> {
        if self.cfg.techniques.lock_free_internal {
            pack(parent)
        } else {
            Ok(0)
        }
    }

    /// Inserts a new leaf for `key` into slot `free` of `img`, empty or dead (`was`).
    pub(crate) async fn insert_at(
        &self,
        img: &NodeImg,
        free: usize,
        was: Slot,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool, SmartError> {
        let d = img.header.depth();
        let bytes = leaf_bytes(key.len(), self.cfg.value_cap);
        let la = self.alloc_leaf(key, bytes).await?;
        let mut leaf = [0u8; MAX_LEAF_BYTES];
        self.ep.charge(Work::Crc64Clmul(bytes));
        build_leaf(
            &mut leaf[..bytes],
            pack(img.addr)?,
            LeafStatus::live(true),
            key,
            value,
            self.cfg.value_cap,
        )
        .map_err(layout("new leaf"))?;
        let new = Slot::leaf(key[d], la, bytes).map_err(layout("new leaf slot"))?;
        let done = if self.cfg.techniques.lock_free_internal && la.node() == img.addr.node() {
            // One doorbell: the WRITE lands before the CAS (per-QP order).
            let mut old = 0u64;
            self.qp(la)?
                .post(&mut [
                    Op::Write {
                        remote: la,
                        local: &leaf[..bytes],
                    },
                    Op::Cas {
                        remote: img.addr.add(slot_offset(free) as u64),
                        compare: was.raw(),
                        swap: new.raw(),
                        old: &mut old,
                    },
                ])
                .await?;
            old == was.raw()
        } else {
            self.write(la, &leaf[..bytes]).await?;
            self.change_slot(img.addr, img.header, free, was, new)
                .await?
                == Swap::Done
        };
        if done {
            if let Some(mut c) = self.node.cache_mut() {
                c.set_slot(img.addr, free, new);
            }
        } else {
            self.free(la, bytes);
        }
        Ok(done)
    }

    /// Replaces the leaf of another key in slot `idx` of `img` by a chain of new internal
    /// nodes ending in a Node4 holding both leaves.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn leaf_split(
        &self,
        img: &NodeImg,
        idx: usize,
        slot: Slot,
        other: GlobalAddr,
        other_bytes: usize,
        other_key: &[u8],
        key: &[u8],
        value: &[u8],
    ) -> Result<bool, SmartError> {
        let d = img.header.depth();
        let lcp = key[d + 1..]
            .iter()
            .zip(&other_key[d + 1..])
            .take_while(|(a, b)| a == b)
            .count();
        let q = d + 1 + lcp;
        if q >= key.len() || q >= other_key.len() {
            return Err(SmartError::BadKey {
                why: "one key is a prefix of another (mixed fixed key lengths?)",
            });
        }
        // Chain nodes: (depth, prefix start), each dispatching on key[depth].
        let mut levels: heapless::Vec<(usize, usize), 64> = heapless::Vec::new();
        let mut p = d + 1;
        while q - p > MAX_PREFIX {
            let _ = levels.push((p + MAX_PREFIX, p));
            p += MAX_PREFIX + 1;
        }
        let _ = levels.push((q, p));
        let mut addrs: heapless::Vec<GlobalAddr, 64> = heapless::Vec::new();
        for _ in 0..levels.len() {
            let a = self.alloc_node(NodeType::N4).await?;
            let _ = addrs.push(a);
        }
        let lbytes = leaf_bytes(key.len(), self.cfg.value_cap);
        let la = self.alloc_leaf(key, lbytes).await?;
        let last = *addrs.last().unwrap_or(&img.addr);
        // The chain's images in a buffer of the handle's (`split_scratch.rs`).
        let mut images = self
            .split_scratch
            .image(levels.len() * NodeType::N4.bytes());
        for (i, &(depth, start)) in levels.iter().enumerate() {
            let parent = if i == 0 { img.addr } else { addrs[i - 1] };
            let h = Header::new(depth, NodeType::N4, &key[start..depth])
                .map_err(layout("chain header"))?;
            let mut n = NodeImg {
                addr: addrs[i],
                rev: self.node_rev(parent)?,
                header: h,
                slots: [Slot::EMPTY; 256],
                t0: 0,
            };
            if i + 1 < levels.len() {
                n.slots[0] = Slot::node(key[depth], addrs[i + 1], NodeType::N4)
                    .map_err(layout("chain slot"))?;
            } else {
                n.slots[0] =
                    Slot::leaf(other_key[q], other, other_bytes).map_err(layout("leaf slot"))?;
                n.slots[1] = Slot::leaf(key[q], la, lbytes).map_err(layout("leaf slot"))?;
            }
            let sz = NodeType::N4.bytes();
            n.encode(&mut images[i * sz..(i + 1) * sz]);
        }
        let mut leaf = [0u8; MAX_LEAF_BYTES];
        self.ep.charge(Work::Crc64Clmul(lbytes));
        build_leaf(
            &mut leaf[..lbytes],
            pack(last)?,
            LeafStatus::live(true),
            key,
            value,
            self.cfg.value_cap,
        )
        .map_err(layout("new leaf"))?;
        let mut writes: heapless::Vec<(GlobalAddr, &[u8]), 65> = heapless::Vec::new();
        let sz = NodeType::N4.bytes();
        for (i, a) in addrs.iter().enumerate() {
            let _ = writes.push((*a, &images[i * sz..(i + 1) * sz]));
        }
        let _ = writes.push((la, &leaf[..lbytes]));
        let r = self.write_all(&writes).await;
        drop(writes);
        self.split_scratch.give_image(images);
        r?;
        let new = Slot::node(key[d], addrs[0], NodeType::N4).map_err(layout("split slot"))?;
        if self
            .change_slot(img.addr, img.header, idx, slot, new)
            .await?
            != Swap::Done
        {
            for a in &addrs {
                self.free(*a, NodeType::N4.bytes());
            }
            self.free(la, lbytes);
            return Ok(false);
        }
        bump(&self.stats.leaf_splits);
        if let Some(mut c) = self.node.cache_mut() {
            c.set_slot(img.addr, idx, new);
        }
        // The moved leaf's reverse pointer now names its new parent.
        self.write(
            other.add(NODE_REV_OFFSET as u64),
            &pack(last)?.to_le_bytes(),
        )
        .await?;
        Ok(true)
    }

    /// Splits the compressed prefix of `img` at key position `at`: a new Node4 takes the
    /// common part and holds `img` (with a shorter prefix) and the new leaf.
    pub(crate) async fn prefix_split(
        &self,
        img: &NodeImg,
        parent: &Parent,
        at: usize,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool, SmartError> {
        if parent.slot.is_frozen() {
            // The parent is being grown: its slot cannot change (see `change_slot`).
            return Ok(false);
        }
        let h = img.header;
        let s = h.prefix_start();
        let j = at - s;
        let prefix = h.prefix();
        let new_h = Header::new(h.depth(), h.node_type(), &prefix[j + 1..h.prefix_len()])
            .map_err(layout("split header"))?;
        let pa = self.alloc_node(NodeType::N4).await?;
        let lbytes = leaf_bytes(key.len(), self.cfg.value_cap);
        let la = self.alloc_leaf(key, lbytes).await?;
        let mut p = NodeImg {
            addr: pa,
            rev: self.node_rev(parent.addr)?,
            header: Header::new(at, NodeType::N4, &key[s..at])
                .map_err(layout("split parent header"))?,
            slots: [Slot::EMPTY; 256],
            t0: 0,
        };
        p.slots[0] =
            Slot::node(prefix[j], img.addr, h.node_type()).map_err(layout("split slot"))?;
        p.slots[1] = Slot::leaf(key[at], la, lbytes).map_err(layout("split leaf slot"))?;
        let mut pimg = [0u8; 48];
        p.encode(&mut pimg);
        let mut leaf = [0u8; MAX_LEAF_BYTES];
        self.ep.charge(Work::Crc64Clmul(lbytes));
        build_leaf(
            &mut leaf[..lbytes],
            pack(pa)?,
            LeafStatus::live(true),
            key,
            value,
            self.cfg.value_cap,
        )
        .map_err(layout("new leaf"))?;
        self.write_all(&[(pa, &pimg[..]), (la, &leaf[..lbytes])])
            .await?;
        // Publish first (the linearization point): the parent slot swings to the new
        // Node4, whose slot 0 leads to this node. Its header still has the long prefix, which
        // every reader recognizes (a prefix starting before its parent allows) and shortens
        // with one CAS: so a splitter that dies here leaves nothing anyone cannot finish.
        let pslot =
            Slot::node(parent.slot.pkey(), pa, NodeType::N4).map_err(layout("parent slot"))?;
        if self
            .change_slot(parent.addr, parent.header, parent.idx, parent.slot, pslot)
            .await?
            != Swap::Done
        {
            self.free(pa, NodeType::N4.bytes());
            self.free(la, lbytes);
            return Ok(false);
        }
        debug_assert_eq!(new_h.prefix_start(), at + 1);
        self.finish_prefix_split(img.addr, h, at + 1).await?;
        bump(&self.stats.prefix_splits);
        if let Some(mut c) = self.node.cache_mut() {
            c.set_slot(parent.addr, parent.idx, pslot);
            c.remove(img.addr);
        }
        if self.cfg.techniques.lock_free_internal {
            self.write(
                img.addr.add(NODE_REV_OFFSET as u64),
                &pack(pa)?.to_le_bytes(),
            )
            .await?;
        }
        Ok(true)
    }

    /// Shortens the prefix of the node at `addr` (header `h`) so that it starts at key
    /// position `start`, where its parent (a prefix split's new node) expects it: the second
    /// half of a prefix split, done by the splitter or by any reader that finds it undone.
    /// A CAS from `h`: if the header changed meanwhile (another finisher, or a grow froze
    /// it and its copy will be finished in turn), nothing happens. Returns whether our CAS
    /// did it.
    pub(crate) async fn finish_prefix_split(
        &self,
        addr: GlobalAddr,
        h: Header,
        start: usize,
    ) -> Result<bool, SmartError> {
        let s = h.prefix_start();
        if start <= s || start > h.depth() {
            return Ok(false);
        }
        let p = h.prefix();
        let short = Header::new(h.depth(), h.node_type(), &p[start - s..h.prefix_len()])
            .map_err(layout("shortened header"))?;
        Ok(self
            .cas(addr.add(NODE_HEADER_OFFSET as u64), h.raw(), short.raw())
            .await?
            == h.raw())
    }

    /// Freezes the slots of a node whose header is frozen (by us or by a grower we are
    /// helping), so that nobody changes them while it is copied. Returns their final
    /// (unfrozen) values. Idempotent: any number of helpers may run it at once. `None`: our
    /// image of the node grew too old to go on (`reclaim.rs`).
    pub(crate) async fn complete_freeze(
        &self,
        img: &NodeImg,
    ) -> Result<Option<[Slot; 256]>, SmartError> {
        let cap = img.ty().capacity();
        let mut want = img.slots;
        if !self.cfg.techniques.lock_free_internal {
            // Slot writers hold the node lock and check the header under it: take the lock,
            // read the slots as they are now, write them back frozen.
            let mut raw = [0u8; MAX_NODE_BYTES];
            let n = cap * 8;
            let slots_at = img.addr.add(NODE_SLOTS_OFFSET as u64);
            let lock = self
                .lock_node(img.addr, &mut [(slots_at, &mut raw[..n])])
                .await?;
            for (i, w) in want.iter_mut().enumerate().take(cap) {
                let v = u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
                *w = Slot::from_raw(v).frozen(false);
                raw[8 * i..8 * i + 8].copy_from_slice(&w.frozen(true).raw().to_le_bytes());
            }
            self.unlock_node(lock, Some((slots_at, &raw[..n]))).await?;
            return Ok(Some(want));
        }
        let qp = self.qp(img.addr)?;
        let mut done = [false; 256];
        for (i, w) in want.iter_mut().enumerate().take(cap) {
            if w.is_frozen() {
                *w = w.frozen(false);
                done[i] = true;
            }
        }
        let mut pace = None;
        let mut rounds = 0u32;
        loop {
            if self.stale(img.t0) {
                // The node may have been replaced and its memory reused meanwhile: leave the
                // rest of the freeze to a fresher reader.
                return Ok(None);
            }
            let mut olds = [0u64; 256];
            // The batch and its slot numbers in buffers of the handle's (`split_scratch.rs`).
            let mut ops = self.split_scratch.ops();
            ops.reserve(cap);
            let mut which = self.split_scratch.slots();
            which.reserve(cap);
            for (i, old) in olds.iter_mut().enumerate().take(cap) {
                if !done[i] {
                    which.push(i);
                    ops.push(Op::Cas {
                        remote: img.addr.add(slot_offset(i) as u64),
                        compare: want[i].raw(),
                        swap: want[i].frozen(true).raw(),
                        old,
                    });
                }
            }
            if ops.is_empty() {
                self.split_scratch.give_ops(ops);
                self.split_scratch.give_slots(which);
                return Ok(Some(want));
            }
            let posted = qp.post(&mut ops).await;
            self.split_scratch.give_ops(ops);
            if let Err(e) = posted {
                self.split_scratch.give_slots(which);
                return Err(e.into());
            }
            for &i in &which {
                let old = Slot::from_raw(olds[i]);
                if olds[i] == want[i].raw() {
                    done[i] = true;
                } else if old.is_frozen() {
                    // Another helper froze it: that is its final value.
                    want[i] = old.frozen(false);
                    done[i] = true;
                } else {
                    want[i] = old;
                }
            }
            rounds += 1;
            let all_done = which.iter().all(|&i| done[i]);
            self.split_scratch.give_slots(which);
            if all_done {
                return Ok(Some(want));
            }
            // Slot writers kept changing slots between our read and our CAS.
            if !self.back_off(&mut pace).await {
                return Err(SmartError::Contention {
                    what: "could not freeze the slots of a node being grown",
                    tries: rounds,
                });
            }
        }
    }

    /// Builds the copy of frozen node `img` (slots `slots`, plus `extra` if it fits) as a
    /// node of type `ty` at `na`, under `parent`. Returns the copy's image.
    pub(crate) fn copy_of(
        &self,
        img: &NodeImg,
        slots: &[Slot; 256],
        na: GlobalAddr,
        ty: NodeType,
        parent: &Parent,
        extra: Option<Slot>,
    ) -> Result<NodeImg, SmartError> {
        let parent_depth = parent.header.depth();
        // A node frozen before a prefix split above it was finished still has the long
        // prefix: the copy gets the one its parent expects.
        let h = img.header.clean().with_type(ty);
        let (s, start) = (h.prefix_start(), parent_depth + 1);
        let header = if start > s && start <= h.depth() {
            let p = h.prefix();
            Header::new(h.depth(), ty, &p[start - s..h.prefix_len()])
                .map_err(layout("copied header"))?
        } else {
            h
        };
        let mut n = NodeImg {
            addr: na,
            rev: self.node_rev(parent.addr)?,
            header,
            slots: [Slot::EMPTY; 256],
            t0: 0,
        };
        let live = slots[..img.ty().capacity()]
            .iter()
            .filter(|s| is_live(s))
            .chain(extra.as_ref());
        let mut k = 0;
        for s in live {
            if ty == NodeType::N256 {
                n.slots[s.pkey() as usize] = *s;
            } else if k < ty.capacity() {
                n.slots[k] = *s;
                k += 1;
            } else {
                return Err(SmartError::Corrupt {
                    what: "grown node",
                    err: LayoutError::Inconsistent {
                        what: "more live slots than the copy holds",
                    },
                });
            }
        }
        Ok(n)
    }

    /// Publishes the copy `n` of frozen node `img` in the parent slot (no copy: `img` had no
    /// live slot left, and the parent slot empties or dies), then marks `img` obsolete,
    /// points the children's reverse pointers at the copy and retires `img` for reuse.
    pub(crate) async fn swing_to_copy(
        &self,
        img: &NodeImg,
        parent: &Parent,
        n: Option<&NodeImg>,
        live: &[Slot],
    ) -> Result<bool, SmartError> {
        if self.stale(img.t0) {
            return Ok(false);
        }
        let pslot = match n {
            Some(n) => {
                Slot::node(parent.slot.pkey(), n.addr, n.ty()).map_err(layout("grown slot"))?
            }
            None if parent.header.node_type() == NodeType::N256 => Slot::EMPTY,
            None => Slot::dead(parent.slot.pkey()),
        };
        if self
            .change_slot(parent.addr, parent.header, parent.idx, parent.slot, pslot)
            .await?
            != Swap::Done
        {
            return Ok(false);
        }
        if let Some(mut c) = self.node.cache_mut() {
            c.remove(img.addr);
            c.set_slot(parent.addr, parent.idx, pslot);
            if let Some(n) = n {
                c.put(n);
            }
        }
        let dead = img.header.frozen(true).obsolete().raw().to_le_bytes();
        let rev = pack(n.map_or(GlobalAddr::NULL, |n| n.addr))?.to_le_bytes();
        // The writes in a buffer of the handle's (`split_scratch.rs`).
        let mut writes = self.split_scratch.writes();
        writes.reserve(live.len() + 1);
        writes.push((img.addr.add(NODE_HEADER_OFFSET as u64), &dead[..]));
        for s in live.iter().filter(|_| n.is_some()) {
            match s.kind() {
                Ok(SlotKind::Leaf { addr, .. }) => writes.push((addr, &rev[..])),
                // In lock-based mode a node's reverse-pointer word is its lock.
                Ok(SlotKind::Node { addr, .. }) if self.cfg.techniques.lock_free_internal => {
                    writes.push((addr, &rev[..]))
                }
                _ => {}
            }
        }
        let r = self.write_all(&writes).await;
        self.split_scratch.give_writes(writes);
        r?;
        self.retire(img.addr, img.ty().bytes());
        Ok(true)
    }

    /// Grows the full node `img` into the next type, with the new leaf for `key` in it,
    /// and swings the parent slot to the copy.
    ///
    /// Memory for the copy and the leaf is allocated before anything is frozen, so running
    /// out of it changes nothing. Once the header is frozen the node is replaced, whatever
    /// happens: if our swing fails (the parent changed: a prefix split above the node, or the
    /// parent's own grow), `froze` names the node and the caller's restart finishes the grow
    /// at once ([`Self::help_grow`]); if we die, anyone does after a lease.
    pub(crate) async fn grow(
        &self,
        img: &NodeImg,
        parent: &Parent,
        key: &[u8],
        value: &[u8],
        froze: &mut Option<GlobalAddr>,
    ) -> Result<bool, SmartError> {
        let Some(new_ty) = img.ty().grown() else {
            return Err(SmartError::Corrupt {
                what: "full Node256",
                err: LayoutError::Inconsistent {
                    what: "Node256 has a slot for every byte",
                },
            });
        };
        if parent.slot.is_frozen() {
            // The parent is being grown: its slot cannot change (see `change_slot`).
            return Ok(false);
        }
        let mut na = self.alloc_node(new_ty).await?;
        let lbytes = leaf_bytes(key.len(), self.cfg.value_cap);
        let la = match self.alloc_leaf(key, lbytes).await {
            Ok(la) => la,
            Err(e) => {
                self.free(na, new_ty.bytes());
                return Err(e);
            }
        };
        let mut new_ty = new_ty;
        let give_up = |s: &Self, na: GlobalAddr, ty: NodeType| {
            s.free(na, ty.bytes());
            s.free(la, lbytes);
        };
        let h = img.header;
        let hdr = img.addr.add(NODE_HEADER_OFFSET as u64);
        if self.stale(img.t0) || self.cas(hdr, h.raw(), h.frozen(true).raw()).await? != h.raw() {
            give_up(self, na, new_ty);
            return Ok(false);
        }
        *froze = Some(img.addr);
        let Some(slots) = self.complete_freeze(img).await? else {
            give_up(self, na, new_ty);
            return Ok(false);
        };
        let d = h.depth();
        let b = key[d];
        let cap = img.ty().capacity();
        let live = &slots[..cap];
        // The key's slot may have appeared before the freeze: then the copy goes without our
        // leaf and the restart finds the key.
        let ours = !live.iter().any(|s| is_live(s) && s.pkey() == b);
        // Dead slots are dropped: the copy may fit a smaller type (a compaction).
        let count = live.iter().filter(|s| is_live(s)).count() + ours as usize;
        let want = fit(count + 1).min(new_ty);
        if want != new_ty
            && let Ok(a) = self.alloc_node(want).await
        {
            self.free(na, new_ty.bytes());
            (na, new_ty) = (a, want);
        }
        let new_leaf = Slot::leaf(b, la, lbytes).map_err(layout("grown leaf slot"))?;
        let n = self.copy_of(img, &slots, na, new_ty, parent, ours.then_some(new_leaf))?;
        let mut nimg = [0u8; MAX_NODE_BYTES];
        let nb = n.encode(&mut nimg);
        let mut leaf = [0u8; MAX_LEAF_BYTES];
        self.ep.charge(Work::Crc64Clmul(lbytes));
        build_leaf(
            &mut leaf[..lbytes],
            pack(na)?,
            LeafStatus::live(true),
            key,
            value,
            self.cfg.value_cap,
        )
        .map_err(layout("new leaf"))?;
        if ours {
            self.write_all(&[(na, &nimg[..nb]), (la, &leaf[..lbytes])])
                .await?;
        } else {
            self.write(na, &nimg[..nb]).await?;
        }
        if !self.swing_to_copy(img, parent, Some(&n), live).await? {
            give_up(self, na, new_ty);
            return Ok(false);
        }
        *froze = None;
        bump(&self.stats.grows);
        if !ours {
            self.free(la, lbytes);
        }
        Ok(ours)
    }
}

//! Changing internal nodes: one slot by CAS (or under the node lock in the baseline), and
//! the structural modifications built on it — insert into an empty slot, leaf split, prefix
//! split, grow. Each builds its new objects off to the side, publishes them with one slot
//! change, and on failure frees them (they were never reachable) and asks for a restart.
use super::config::SmartError;
use super::remote::{NodeImg, build_leaf};
use super::search::Parent;
use super::{Smart, bump};
use crate::block_on::yield_now;
use crate::fabric::{Endpoint, Op, QueuePair};
use remora_layouts::smart::{
    Header, LeafStatus, MAX_LEAF_BYTES, MAX_NODE_BYTES, MAX_PREFIX, NODE_HEADER_OFFSET,
    NODE_REV_OFFSET, NODE_SLOTS_OFFSET, NodeType, Slot, leaf_bytes, slot_offset,
};
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::vec::Vec;

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
        // Lock-based baseline: lock the header (CAS), read the slot, write it, unlock.
        let hdr = node.add(NODE_HEADER_OFFSET as u64);
        let unlocked = header.frozen(false);
        let locked = header.frozen(true);
        let qp = self.qp(node)?;
        let mut spins = 0u32;
        let current = loop {
            let (mut old, mut cur) = (0u64, [0u8; 8]);
            qp.post(&mut [
                Op::Cas {
                    remote: hdr,
                    compare: unlocked.raw(),
                    swap: locked.raw(),
                    old: &mut old,
                },
                Op::Read {
                    remote: at,
                    local: &mut cur,
                },
            ])
            .await?;
            if old == unlocked.raw() {
                break u64::from_le_bytes(cur);
            }
            if old != locked.raw() {
                return Ok(Swap::Stale);
            }
            spins += 1;
            bump(&self.stats.lock_waits);
            if spins >= self.cfg.max_lock_spins {
                return Err(SmartError::Contention {
                    what: "internal node lock stayed taken",
                    tries: spins,
                });
            }
            yield_now().await;
        };
        let unlock = unlocked.raw().to_le_bytes();
        if current != expected.raw() {
            self.write(hdr, &unlock).await?;
            return Ok(Swap::Failed(Slot::from_raw(current)));
        }
        let nw = new.raw().to_le_bytes();
        qp.post(&mut [
            Op::Write {
                remote: at,
                local: &nw,
            },
            Op::Write {
                remote: hdr,
                local: &unlock,
            },
        ])
        .await?;
        Ok(Swap::Done)
    }

    /// Inserts a new leaf for `key` into the empty slot `free` of `img`.
    pub(crate) async fn insert_at(
        &self,
        img: &NodeImg,
        free: usize,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool, SmartError> {
        let d = img.header.depth();
        let bytes = leaf_bytes(key.len(), self.cfg.value_cap);
        let la = self.alloc_leaf(key, bytes).await?;
        let mut leaf = [0u8; MAX_LEAF_BYTES];
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
                        compare: Slot::EMPTY.raw(),
                        swap: new.raw(),
                        old: &mut old,
                    },
                ])
                .await?;
            old == Slot::EMPTY.raw()
        } else {
            self.write(la, &leaf[..bytes]).await?;
            self.change_slot(img.addr, img.header, free, Slot::EMPTY, new)
                .await?
                == Swap::Done
        };
        if done {
            self.cache.borrow_mut().set_slot(img.addr, free, new);
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
        let mut images: Vec<u8> = std_alloc::vec![0u8; levels.len() * NodeType::N4.bytes()];
        for (i, &(depth, start)) in levels.iter().enumerate() {
            let parent = if i == 0 { img.addr } else { addrs[i - 1] };
            let h = Header::new(depth, NodeType::N4, &key[start..depth])
                .map_err(layout("chain header"))?;
            let mut n = NodeImg {
                addr: addrs[i],
                rev: pack(parent)?,
                header: h,
                slots: [Slot::EMPTY; 256],
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
        self.write_all(&writes).await?;
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
        self.cache.borrow_mut().set_slot(img.addr, idx, new);
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
            rev: pack(parent.addr)?,
            header: Header::new(at, NodeType::N4, &key[s..at])
                .map_err(layout("split parent header"))?,
            slots: [Slot::EMPTY; 256],
        };
        p.slots[0] =
            Slot::node(prefix[j], img.addr, h.node_type()).map_err(layout("split slot"))?;
        p.slots[1] = Slot::leaf(key[at], la, lbytes).map_err(layout("split leaf slot"))?;
        let mut pimg = [0u8; 48];
        p.encode(&mut pimg);
        let mut leaf = [0u8; MAX_LEAF_BYTES];
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
        let hdr = img.addr.add(NODE_HEADER_OFFSET as u64);
        let give_up = |s: &Self| {
            s.free(pa, NodeType::N4.bytes());
            s.free(la, lbytes);
        };
        if self.cas(hdr, h.raw(), new_h.raw()).await? != h.raw() {
            give_up(self);
            return Ok(false);
        }
        let pslot =
            Slot::node(parent.slot.pkey(), pa, NodeType::N4).map_err(layout("parent slot"))?;
        if self
            .change_slot(parent.addr, parent.header, parent.idx, parent.slot, pslot)
            .await?
            != Swap::Done
        {
            // Nobody else touches a header that disagrees with its parent: put it back.
            let back = self.cas(hdr, new_h.raw(), h.raw()).await?;
            give_up(self);
            if back != new_h.raw() {
                return Err(SmartError::Contention {
                    what: "could not restore a node header after a failed prefix split",
                    tries: 1,
                });
            }
            return Ok(false);
        }
        bump(&self.stats.prefix_splits);
        {
            let mut c = self.cache.borrow_mut();
            c.set_slot(parent.addr, parent.idx, pslot);
            c.remove(img.addr);
        }
        self.write(
            img.addr.add(NODE_REV_OFFSET as u64),
            &pack(pa)?.to_le_bytes(),
        )
        .await?;
        Ok(true)
    }

    /// Freezes every word of `img` so that nobody changes it while it is copied. Returns
    /// the node's final slots (unfrozen values), or `None` if the header changed first.
    async fn freeze(&self, img: &NodeImg) -> Result<Option<[Slot; 256]>, SmartError> {
        let h = img.header;
        let hdr = img.addr.add(NODE_HEADER_OFFSET as u64);
        if self.cas(hdr, h.raw(), h.frozen(true).raw()).await? != h.raw() {
            return Ok(None);
        }
        let cap = img.ty().capacity();
        let qp = self.qp(img.addr)?;
        let mut want = img.slots;
        if !self.cfg.techniques.lock_free_internal {
            // The header lock keeps slot writers out; read the slots as they are now and
            // mark them frozen so readers know not to decide absence on them.
            let mut raw = [0u8; MAX_NODE_BYTES];
            let n = cap * 8;
            self.read(img.addr.add(NODE_SLOTS_OFFSET as u64), &mut raw[..n])
                .await?;
            for (i, w) in want.iter_mut().enumerate().take(cap) {
                let v = u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
                *w = Slot::from_raw(v).frozen(false);
                raw[8 * i..8 * i + 8].copy_from_slice(&w.frozen(true).raw().to_le_bytes());
            }
            self.write(img.addr.add(NODE_SLOTS_OFFSET as u64), &raw[..n])
                .await?;
            return Ok(Some(want));
        }
        let mut done = [false; 256];
        for _round in 0..self.cfg.max_restarts {
            let mut olds = [0u64; 256];
            let mut ops: Vec<Op<'_>> = Vec::with_capacity(cap);
            let mut which: Vec<usize> = Vec::with_capacity(cap);
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
                return Ok(Some(want));
            }
            qp.post(&mut ops).await?;
            drop(ops);
            for &i in &which {
                let old = Slot::from_raw(olds[i]);
                if olds[i] == want[i].raw() {
                    done[i] = true;
                } else if old.is_frozen() {
                    // Only the header's holder freezes slots: this is not a tree we know.
                    return Err(SmartError::Corrupt {
                        what: "frozen slot in a node whose header we froze",
                        err: LayoutError::Inconsistent {
                            what: "two freezers",
                        },
                    });
                } else {
                    want[i] = old;
                }
            }
        }
        Err(SmartError::Contention {
            what: "could not freeze a node for growing",
            tries: self.cfg.max_restarts,
        })
    }

    /// Undoes [`Self::freeze`]: plain WRITEs, since nobody changes frozen words.
    async fn unfreeze(&self, img: &NodeImg, slots: &[Slot; 256]) -> Result<(), SmartError> {
        let cap = img.ty().capacity();
        let mut raw = [0u8; MAX_NODE_BYTES];
        for (i, s) in slots.iter().enumerate().take(cap) {
            raw[8 * i..8 * i + 8].copy_from_slice(&s.frozen(false).raw().to_le_bytes());
        }
        let h = img.header.frozen(false).raw().to_le_bytes();
        self.qp(img.addr)?
            .post(&mut [
                Op::Write {
                    remote: img.addr.add(NODE_SLOTS_OFFSET as u64),
                    local: &raw[..8 * cap],
                },
                Op::Write {
                    remote: img.addr.add(NODE_HEADER_OFFSET as u64),
                    local: &h,
                },
            ])
            .await?;
        Ok(())
    }

    /// Grows the full node `img` into the next type, with the new leaf for `key` in it,
    /// and swings the parent slot to the copy.
    pub(crate) async fn grow(
        &self,
        img: &NodeImg,
        parent: &Parent,
        key: &[u8],
        value: &[u8],
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
        let Some(slots) = self.freeze(img).await? else {
            return Ok(false);
        };
        let d = img.header.depth();
        let b = key[d];
        let cap = img.ty().capacity();
        let live = &slots[..cap];
        if live.iter().any(|s| !s.is_empty() && s.pkey() == b) || live.iter().any(|s| s.is_empty())
        {
            // The node changed before we froze it: the key's slot appeared, or it was not
            // full after all. Undo and look again.
            self.unfreeze(img, &slots).await?;
            return Ok(false);
        }
        let na = self.alloc_node(new_ty).await?;
        let lbytes = leaf_bytes(key.len(), self.cfg.value_cap);
        let la = self.alloc_leaf(key, lbytes).await?;
        let mut n = NodeImg {
            addr: na,
            rev: pack(parent.addr)?,
            header: img.header.clean().with_type(new_ty),
            slots: [Slot::EMPTY; 256],
        };
        let new_leaf = Slot::leaf(b, la, lbytes).map_err(layout("grown leaf slot"))?;
        if new_ty == NodeType::N256 {
            for s in live {
                n.slots[s.pkey() as usize] = *s;
            }
            n.slots[b as usize] = new_leaf;
        } else {
            n.slots[..cap].copy_from_slice(live);
            n.slots[cap] = new_leaf;
        }
        let mut nimg = [0u8; MAX_NODE_BYTES];
        let nb = n.encode(&mut nimg);
        let mut leaf = [0u8; MAX_LEAF_BYTES];
        build_leaf(
            &mut leaf[..lbytes],
            pack(na)?,
            LeafStatus::live(true),
            key,
            value,
            self.cfg.value_cap,
        )
        .map_err(layout("new leaf"))?;
        self.write_all(&[(na, &nimg[..nb]), (la, &leaf[..lbytes])])
            .await?;
        let pslot = Slot::node(parent.slot.pkey(), na, new_ty).map_err(layout("grown slot"))?;
        if self
            .change_slot(parent.addr, parent.header, parent.idx, parent.slot, pslot)
            .await?
            != Swap::Done
        {
            self.unfreeze(img, &slots).await?;
            self.free(na, new_ty.bytes());
            self.free(la, lbytes);
            return Ok(false);
        }
        bump(&self.stats.grows);
        {
            let mut c = self.cache.borrow_mut();
            c.remove(img.addr);
            c.set_slot(parent.addr, parent.idx, pslot);
            c.put(&n);
        }
        // Retire the old node and point the children's reverse pointers at the copy.
        let dead = img.header.frozen(true).obsolete().raw().to_le_bytes();
        let rev = pack(na)?.to_le_bytes();
        let mut writes: Vec<(GlobalAddr, &[u8])> = Vec::with_capacity(cap + 1);
        writes.push((img.addr.add(NODE_HEADER_OFFSET as u64), &dead[..]));
        for s in live {
            if let Ok(
                remora_layouts::smart::SlotKind::Leaf { addr, .. }
                | remora_layouts::smart::SlotKind::Node { addr, .. },
            ) = s.kind()
            {
                writes.push((addr, &rev[..]));
            }
        }
        self.write_all(&writes).await?;
        Ok(true)
    }
}

//! Upsert, update and delete: in place under the rear lock, or out of place with a forward
//! pointer; inserts of new keys through the structural changes.
use super::Smart;
use super::config::SmartError;
use super::handover::Release;
use super::key::Key;
use super::leaflock::{Got, LeafHold};
use super::local::Leaves;
use super::remote::{build_leaf, check_leaf, is_retired, retired_status, verified_leaf};
use super::search::{Miss, Pos};
use super::structure::Swap;
use crate::delegation::Pick;
use crate::fabric::{Endpoint, Op, QueuePair, Work};
use crate::lease::owner_word;
use remora_layouts::GlobalAddr;
use remora_layouts::smart::{
    Header, LEAF_STATUS_OFFSET, LeafStatus, MAX_KEY_LEN, MAX_LEAF_BYTES, Slot, leaf_bytes,
    leaf_lock_offset,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteKind {
    /// Insert or overwrite.
    Upsert,
    /// Overwrite only if present.
    Update,
    /// Clear the valid bit.
    Delete,
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// One write operation; returns whether the key was present (valid) before.
    pub(crate) async fn write_op(
        &self,
        kind: WriteKind,
        key: &Key,
        value: &[u8],
    ) -> Result<bool, SmartError> {
        self.write_picking(kind, key, value, &mut Pick::none(kind))
            .await
    }

    /// [`Self::write_op`] of a combining leader: an in-place write, once it holds the leaf's
    /// lock and the key is sure to be present after it, writes the latest value queued for
    /// the key instead of `value` if `pick` picks one up (`delegation::Pick`).
    pub(crate) async fn write_picking(
        &self,
        kind: WriteKind,
        key: &Key,
        value: &[u8],
        pick: &mut Pick<'_, Leaves>,
    ) -> Result<bool, SmartError> {
        if value.len() > self.cfg.value_cap {
            return Err(SmartError::ValueTooLarge {
                len: value.len(),
                cap: self.cfg.value_cap,
            });
        }
        let k = key.bytes();
        let mut buf = [0u8; MAX_LEAF_BYTES];
        let mut pace = self.pace();
        let mut frozen = None;
        let mut froze: Option<GlobalAddr> = None;
        let mut use_cache = true;
        loop {
            let t0 = self.ep.now_ns();
            let done = match self.search(k, &mut buf, use_cache).await? {
                None => None,
                Some(Pos::Frozen {
                    node,
                    parent,
                    grand,
                }) => {
                    let mine = froze == Some(node.addr);
                    let path = (parent, grand);
                    self.wait_frozen(&mut pace, &mut frozen, &node, path, !use_cache, mine)
                        .await?;
                    use_cache = false;
                    continue;
                }
                Some(Pos::Leaf {
                    node,
                    header,
                    idx,
                    slot,
                    leaf,
                    bytes,
                    compact,
                    others,
                    ..
                }) => {
                    let done = if self.cfg.techniques.in_place_leaf {
                        self.write_in_place(kind, leaf, bytes, k, value, t0, pick)
                            .await?
                    } else if self.stale(t0) {
                        None
                    } else {
                        self.write_out_of_place(
                            kind,
                            (node, header, idx, slot),
                            t0,
                            leaf,
                            &buf[..bytes],
                            k,
                            value,
                        )
                        .await?
                    };
                    if kind == WriteKind::Delete && done == Some(true) {
                        // The delete took effect (the leaf is marked retired): unlink it,
                        // and drop its node from the parent if it holds no other key, or
                        // shrink it if its other keys fit a smaller type (`compacts`).
                        let mut finished = false;
                        if !self.stale(t0)
                            && self
                                .unlink_leaf(node, header, idx, slot, leaf, bytes)
                                .await?
                        {
                            if let Some(p) = compact.filter(|_| !self.stale(t0)) {
                                self.remove_node(node, header, &p).await?;
                            }
                            // A dropped node may leave its parent empty: look again then.
                            finished = compact.is_none() || others > 0;
                        }
                        if !finished {
                            // This attempt went stale (or lost the unlink to a grow), or
                            // emptied a node: finish with fresh searches. Left to whoever
                            // meets the marked leaf, a deleted key's leaf stayed linked for
                            // good under churn, which never searches a deleted key again.
                            self.finish_delete(k, &mut buf).await?;
                        }
                    }
                    done
                }
                Some(Pos::Miss {
                    node,
                    parent,
                    grand,
                    miss,
                }) => {
                    if kind != WriteKind::Upsert {
                        return Ok(false);
                    }
                    // A grow or prefix split needs the parent slot; frozen, it belongs to the
                    // parent's grow: wait for (or finish) that first.
                    let needs_parent =
                        matches!(miss, Miss::Empty { free: None } | Miss::Prefix { .. });
                    if let Some(p) = parent.filter(|p| needs_parent && p.slot.is_frozen()) {
                        let pimg = self.read_node(p.addr, p.header.node_type()).await?;
                        if pimg.header.is_frozen() && !pimg.header.is_obsolete() {
                            let mine = froze == Some(p.addr);
                            self.wait_frozen(
                                &mut pace,
                                &mut frozen,
                                &pimg,
                                (grand, None),
                                !use_cache,
                                mine,
                            )
                            .await?;
                            use_cache = false;
                            continue;
                        }
                    }
                    if self.stale(t0) {
                        use_cache = false;
                        self.restart(&mut pace, "write attempts kept outliving their lease")
                            .await?;
                        continue;
                    }
                    let inserted = match (miss, parent) {
                        (Miss::Empty { free: Some(j) }, _) => {
                            self.insert_at(&node, j, Slot::EMPTY, k, value).await?
                        }
                        (Miss::Dead { idx, slot }, _) => {
                            self.insert_at(&node, idx, slot, k, value).await?
                        }
                        (Miss::Empty { free: None }, Some(p)) => {
                            self.grow(&node, &p, k, value, &mut froze).await?
                        }
                        (
                            Miss::OtherLeaf {
                                idx,
                                slot,
                                leaf,
                                bytes,
                            },
                            _,
                        ) => {
                            let v = verified_leaf(&buf[..bytes])?;
                            let mut other = [0u8; MAX_KEY_LEN];
                            let ol = v.key.len();
                            other[..ol].copy_from_slice(v.key);
                            self.leaf_split(&node, idx, slot, leaf, bytes, &other[..ol], k, value)
                                .await?
                        }
                        (Miss::Prefix { at }, Some(p)) => {
                            self.prefix_split(&node, &p, at, k, value).await?
                        }
                        // The root has neither a prefix nor a size limit.
                        (_, None) => false,
                    };
                    inserted.then_some(false)
                }
            };
            match done {
                Some(was) => return Ok(was),
                None => {
                    use_cache = false;
                    self.restart(
                        &mut pace,
                        "write kept failing its CAS or meeting inconsistent nodes",
                    )
                    .await?;
                }
            }
        }
    }

    /// After a delete took effect (its leaf marked retired) but its own attempt could not
    /// unlink the leaf or drop the node it emptied (or dropped one): fresh searches of the
    /// key until no slot names the leaf (a search that meets it finishes the unlink and
    /// retires it) and no node on its path below the root is left with no live slot (each is
    /// dropped from its parent, bottom up). Bounded by the restart pace; past it the marked
    /// leaf is left to whoever meets it.
    async fn finish_delete(&self, k: &[u8], buf: &mut [u8]) -> Result<(), SmartError> {
        use super::structure::is_live;
        use remora_layouts::smart::NodeType;
        let mut pace = self.pace();
        let mut frozen = None;
        // The node last dropped.
        let mut last = None;
        loop {
            match self.search(k, buf, false).await? {
                // Unlinked it on the way (or met an inconsistency): look again.
                None => {}
                Some(Pos::Miss {
                    node,
                    parent: Some(p),
                    miss: Miss::Dead { .. } | Miss::Empty { .. },
                    ..
                }) if node.ty() != NodeType::N256
                    && !node.slots[..node.ty().capacity()].iter().any(is_live) =>
                {
                    // Met again, its removal failed (a race): back off below first.
                    let first = last != Some(node.addr);
                    if first && !self.stale(node.t0) {
                        // Then look again at once: the parent may be left empty in turn.
                        last = Some(node.addr);
                        self.remove_node(node.addr, node.header, &p).await?;
                        continue;
                    }
                }
                // Frozen: a grow copies the marked leaf along; wait for (or finish) it.
                Some(Pos::Frozen {
                    node,
                    parent,
                    grand,
                }) => {
                    let path = (parent, grand);
                    if self
                        .wait_frozen(&mut pace, &mut frozen, &node, path, true, false)
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                    continue;
                }
                // No slot names the leaf any more (or the key was inserted again).
                Some(_) => return Ok(()),
            }
            if self
                .restart(&mut pace, "unlinking a deleted leaf")
                .await
                .is_err()
            {
                return Ok(());
            }
        }
    }

    /// In-place write under the leaf's rear lock (an owned lock with a lease, see
    /// `leaflock`), or without the rear lock under its on-chip bit (`onchip.rs`), released
    /// after the write-back. `None`: restart. Past its checks (nothing restarts it then), it
    /// writes the value `pick` picks up, if any, in place of `value`.
    #[allow(clippy::too_many_arguments)]
    async fn write_in_place(
        &self,
        kind: WriteKind,
        leaf: GlobalAddr,
        bytes: usize,
        key: &[u8],
        value: &[u8],
        t0: u64,
        pick: &mut Pick<'_, Leaves>,
    ) -> Result<Option<bool>, SmartError> {
        let lock_at = leaf.add(leaf_lock_offset(bytes) as u64);
        let qp = self.qp(leaf)?;
        let redo = self.redo_slot(leaf.node()).await?;
        let mine = owner_word(self.ep.client_id(), redo.tag);
        let mut img = [0u8; MAX_LEAF_BYTES];
        let Some(LeafHold { got, turn }) = self.lock_leaf(leaf, bytes, mine, &mut img, t0).await?
        else {
            return Ok(None);
        };
        // After a takeover the leaf may be torn: rebuild it from the dead holder's redo copy
        // (and write it back even if we change nothing).
        let repaired = match got {
            Got::Clean => false,
            Got::TookOver(dead) => {
                match self.repair_taken_leaf(leaf, &mut img[..bytes], dead).await {
                    Ok(r) => r,
                    Err(e) => {
                        self.unlock_leaf(leaf, lock_at, turn).await?;
                        return Err(e);
                    }
                }
            }
        };
        let (was_valid, same_key) = match check_leaf(&img[..bytes]) {
            // Deleted and being unlinked: restart (and help the unlink on the way).
            Ok(v) if is_retired(v.status, leaf) => (false, false),
            Ok(v) => (v.status.is_valid(), v.key == key),
            Err(err) => {
                self.unlock_leaf(leaf, lock_at, turn).await?;
                return Err(SmartError::Corrupt {
                    what: "leaf under our lock (torn, with no dead holder to blame)",
                    err,
                });
            }
        };
        if !same_key || (!was_valid && kind != WriteKind::Upsert) {
            if repaired {
                self.write_back(leaf, lock_at, &img[..bytes], None, true)
                    .await?;
                if let Some(t) = turn {
                    t.finish(false).await;
                }
            } else {
                self.unlock_leaf(leaf, lock_at, turn).await?;
            }
            return Ok(if same_key { Some(false) } else { None });
        }
        let rev = u64::from_le_bytes(img[..8].try_into().unwrap_or([0; 8]));
        // The combining leader's pick-up, under the lock: the key is present after this
        // write whatever it was (an upsert, or an update of a valid leaf).
        let mut latest = [0u8; MAX_LEAF_BYTES];
        let value = match pick.latest(&mut latest).await {
            Some(n) => &latest[..n],
            None => value,
        };
        let (status, v) = match kind {
            WriteKind::Delete => (
                retired_status(leaf).map_err(|err| SmartError::Corrupt {
                    what: "leaf address",
                    err,
                })?,
                &[][..],
            ),
            _ => (LeafStatus::live(true), value),
        };
        self.ep.charge(Work::Crc64Clmul(bytes));
        build_leaf(&mut img[..bytes], rev, status, key, v, self.cfg.value_cap).map_err(|err| {
            SmartError::Corrupt {
                what: "leaf image",
                err,
            }
        })?;
        // With the leaf hand-over, a client of this compute node waiting for the lock takes it
        // from us: the write-back leaves it held (the authors' `write_without_unlock`).
        let release = match &turn {
            Some(t) => t.decide().await,
            None => Release::Unlock,
        };
        let unlock = release == Release::Unlock;
        let r = if self.cfg.techniques.rear_lock && self.cfg.assume_tail_last {
            // Redo copy, then write-back and release in one WRITE: the lock word is the last
            // one written (only where the fabric places a WRITE's last word last). Handing
            // over, the lock word is left out.
            let end = if unlock { bytes } else { bytes - 8 };
            qp.post(&mut [
                Op::Write {
                    remote: redo.at,
                    local: &img[..bytes],
                },
                Op::Write {
                    remote: leaf.add(LEAF_STATUS_OFFSET as u64),
                    local: &img[LEAF_STATUS_OFFSET..end],
                },
            ])
            .await
            .map_err(SmartError::from)
        } else if self.cfg.techniques.rear_lock {
            // Redo copy, write-back, release: one doorbell, per-queue-pair order.
            self.write_back(leaf, lock_at, &img[..bytes], Some(redo.at), unlock)
                .await
        } else {
            let w = qp
                .post(&mut [
                    Op::Write {
                        remote: redo.at,
                        local: &img[..bytes],
                    },
                    Op::Write {
                        remote: leaf.add(LEAF_STATUS_OFFSET as u64),
                        local: &img[LEAF_STATUS_OFFSET..bytes - 8],
                    },
                ])
                .await
                .map_err(SmartError::from);
            match (w, unlock) {
                (Ok(()), true) => match self.leaf_chip_lock(leaf) {
                    Some(c) => self.unlock_chip(c).await,
                    None => self.write(lock_at, &0u64.to_le_bytes()).await,
                },
                (w, _) => w,
            }
        };
        if let Some(t) = turn {
            t.finish(!unlock && r.is_ok()).await;
        }
        r?;
        drop(redo);
        Ok(Some(was_valid))
    }

    /// `[redo copy,] leaf body[, unlock]` in one doorbell (no unlock: the lock is handed over).
    async fn write_back(
        &self,
        leaf: GlobalAddr,
        lock_at: GlobalAddr,
        img: &[u8],
        redo: Option<GlobalAddr>,
        unlock: bool,
    ) -> Result<(), SmartError> {
        let bytes = img.len();
        let zero = 0u64.to_le_bytes();
        let mut ops: heapless::Vec<Op<'_>, 3> = heapless::Vec::new();
        if let Some(at) = redo {
            let _ = ops.push(Op::Write {
                remote: at,
                local: img,
            });
        }
        let _ = ops.push(Op::Write {
            remote: leaf.add(LEAF_STATUS_OFFSET as u64),
            local: &img[LEAF_STATUS_OFFSET..bytes - 8],
        });
        if unlock {
            let _ = ops.push(Op::Write {
                remote: lock_at,
                local: &zero,
            });
        }
        self.qp(leaf)?.post(&mut ops).await?;
        Ok(())
    }

    /// Out-of-place write: a new leaf, then the old leaf's status CASed to forward to it
    /// (the linearization point), then the parent slot swung (best effort).
    #[allow(clippy::too_many_arguments)]
    async fn write_out_of_place(
        &self,
        kind: WriteKind,
        at: (GlobalAddr, Header, usize, Slot),
        t0: u64,
        leaf: GlobalAddr,
        current: &[u8],
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<bool>, SmartError> {
        let (node, header, idx, slot) = at;
        let v = verified_leaf(current)?;
        let st = v.status;
        let was_valid = st.is_valid();
        if !was_valid && kind != WriteKind::Upsert {
            return Ok(Some(false));
        }
        let status_at = leaf.add(LEAF_STATUS_OFFSET as u64);
        if kind == WriteKind::Delete {
            // Mark the leaf retired (the linearization point); the caller unlinks it.
            // The valid bit stays as it was: it is under the leaf's checksum.
            let gone = st.forwarded(leaf).map_err(|err| SmartError::Corrupt {
                what: "leaf address",
                err,
            })?;
            let old = self.cas(status_at, st.raw(), gone.raw()).await?;
            return Ok((old == st.raw()).then_some(was_valid));
        }
        let bytes = leaf_bytes(key.len(), self.cfg.value_cap);
        let na = self.alloc_leaf(key, bytes).await?;
        let mut img = [0u8; MAX_LEAF_BYTES];
        let (valid, val) = match kind {
            WriteKind::Delete => (false, &[][..]),
            _ => (true, value),
        };
        let rev = node.pack48().map_err(|err| SmartError::Corrupt {
            what: "node address",
            err,
        })?;
        self.ep.charge(Work::Crc64Clmul(bytes));
        build_leaf(
            &mut img[..bytes],
            rev,
            LeafStatus::live(valid),
            key,
            val,
            self.cfg.value_cap,
        )
        .map_err(|err| SmartError::Corrupt {
            what: "leaf image",
            err,
        })?;
        let fwd = st.forwarded(na).map_err(|err| SmartError::Corrupt {
            what: "leaf address",
            err,
        })?;
        let old = if na.node() == leaf.node() {
            let mut old = 0u64;
            self.qp(na)?
                .post(&mut [
                    Op::Write {
                        remote: na,
                        local: &img[..bytes],
                    },
                    Op::Cas {
                        remote: status_at,
                        compare: st.raw(),
                        swap: fwd.raw(),
                        old: &mut old,
                    },
                ])
                .await?;
            old
        } else {
            self.write(na, &img[..bytes]).await?;
            self.cas(status_at, st.raw(), fwd.raw()).await?
        };
        if old != st.raw() {
            self.free(na, bytes);
            return Ok(None);
        }
        if !slot.is_frozen() {
            let new = Slot::leaf(slot.pkey(), na, bytes).map_err(|err| SmartError::Corrupt {
                what: "leaf slot",
                err,
            })?;
            let h = header.frozen(false);
            let swung = match self.change_slot(node, h, idx, slot, new).await? {
                Swap::Done => Some(slot),
                // The remote slot is not the value the search used (a cached slot ahead of
                // it, pointed at the live end of the chain by a lookup): swing it from its
                // real value if that is an earlier leaf of our chain. Without this a cache
                // ahead of the remote slot failed every later swing, the chain grew by a
                // leaf per write, and past `MAX_FORWARDS` fresh searches restarted forever.
                Swap::Failed(cur) if self.behind_new_leaf(cur, slot, na, t0).await? => {
                    (self.change_slot(node, h, idx, cur, new).await? == Swap::Done).then_some(cur)
                }
                _ => None,
            };
            if let Some(head) = swung {
                if let Some(mut c) = self.node.cache_mut() {
                    c.set_slot(node, idx, new);
                }
                // Unreachable now but through stale reads: retire the replaced leaf (and
                // the head of its chain; links between them stay unreclaimed).
                self.retire(leaf, current.len());
                if let Ok(remora_layouts::smart::SlotKind::Leaf { addr, .. }) = head.kind()
                    && addr != leaf
                {
                    self.retire(addr, current.len());
                }
            }
        }
        Ok(Some(was_valid))
    }

    /// After a failed swing to our new leaf `na` (expecting `slot`): true when the
    /// remote slot's value `cur` is sure to name an earlier leaf of `na`'s chain, so that
    /// swinging it to `na` skips only replaced leaves. It is when `cur` is a leaf slot of
    /// the same partial key, not frozen, and `na` has not been replaced since (one READ of its
    /// status, after the CAS that returned `cur`): a slot moves only forward along a key's
    /// chain, and leaves it only when the chain's live end is retired (`na` is not). A
    /// stale attempt (`reclaim.rs`) does not try.
    async fn behind_new_leaf(
        &self,
        cur: Slot,
        slot: Slot,
        na: GlobalAddr,
        t0: u64,
    ) -> Result<bool, SmartError> {
        use remora_layouts::smart::SlotKind;
        let leafy = matches!(cur.kind(), Ok(SlotKind::Leaf { addr, .. }) if addr != na);
        if !leafy || cur.is_frozen() || cur.pkey() != slot.pkey() || self.stale(t0) {
            return Ok(false);
        }
        let mut word = [0u8; 8];
        self.read(na.add(LEAF_STATUS_OFFSET as u64), &mut word)
            .await?;
        let live = LeafStatus::decode(u64::from_le_bytes(word)).is_ok_and(|s| !s.is_obsolete());
        Ok(live && !self.stale(t0))
    }
}

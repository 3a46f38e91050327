//! Upsert, update and delete: in place under the rear lock, or out of place with a forward
//! pointer; inserts of new keys through the structural changes.
use super::config::SmartError;
use super::key::Key;
use super::remote::{build_leaf, check_leaf, verified_leaf};
use super::search::{Miss, Pos};
use super::structure::Swap;
use super::{Smart, bump};
use crate::block_on::yield_now;
use crate::fabric::{Endpoint, Op, QueuePair};
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

/// Tag a handle writes into a leaf lock it holds.
const LOCK_TAG: u64 = 1;

impl<'e, E: Endpoint> Smart<'e, E> {
    /// One write operation; returns whether the key was present (valid) before.
    pub(crate) async fn write_op(
        &self,
        kind: WriteKind,
        key: &Key,
        value: &[u8],
    ) -> Result<bool, SmartError> {
        if value.len() > self.cfg.value_cap {
            return Err(SmartError::ValueTooLarge {
                len: value.len(),
                cap: self.cfg.value_cap,
            });
        }
        let k = key.bytes();
        let mut buf = [0u8; MAX_LEAF_BYTES];
        let mut tries = 0;
        let mut use_cache = true;
        loop {
            let done = match self.search(k, &mut buf, use_cache).await? {
                None => None,
                Some(Pos::Leaf {
                    node,
                    header,
                    idx,
                    slot,
                    leaf,
                    bytes,
                    ..
                }) => {
                    if self.cfg.techniques.in_place_leaf {
                        self.write_in_place(kind, leaf, bytes, k, value).await?
                    } else {
                        self.write_out_of_place(
                            kind,
                            (node, header, idx, slot),
                            leaf,
                            &buf[..bytes],
                            k,
                            value,
                        )
                        .await?
                    }
                }
                Some(Pos::Miss { node, parent, miss }) => {
                    if kind != WriteKind::Upsert {
                        return Ok(false);
                    }
                    let inserted = match (miss, parent) {
                        (Miss::Empty { free: Some(j) }, _) => {
                            self.insert_at(&node, j, k, value).await?
                        }
                        (Miss::Empty { free: None }, Some(p)) => {
                            self.grow(&node, &p, k, value).await?
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
                        &mut tries,
                        "write kept failing its CAS or meeting inconsistent nodes",
                    )
                    .await?;
                }
            }
        }
    }

    /// In-place write under the leaf's rear lock. `None`: restart.
    async fn write_in_place(
        &self,
        kind: WriteKind,
        leaf: GlobalAddr,
        bytes: usize,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<bool>, SmartError> {
        let lock_at = leaf.add(leaf_lock_offset(bytes) as u64);
        let qp = self.qp(leaf)?;
        let mut img = [0u8; MAX_LEAF_BYTES];
        let mut spins = 0u32;
        loop {
            // Lock, then read the leaf as the lock holder sees it (same doorbell, in order).
            let mut old = 0u64;
            qp.post(&mut [
                Op::Cas {
                    remote: lock_at,
                    compare: 0,
                    swap: LOCK_TAG,
                    old: &mut old,
                },
                Op::Read {
                    remote: leaf,
                    local: &mut img[..bytes],
                },
            ])
            .await?;
            if old == 0 {
                break;
            }
            spins += 1;
            bump(&self.stats.lock_waits);
            if spins >= self.cfg.max_lock_spins {
                return Err(SmartError::Contention {
                    what: "leaf lock stayed taken (a writer died holding it?)",
                    tries: spins,
                });
            }
            yield_now().await;
        }
        let unlock = 0u64.to_le_bytes();
        let (was_valid, same_key) = match check_leaf(&img[..bytes]) {
            Ok(v) => (v.status.is_valid(), v.key == key),
            Err(err) => {
                self.write(lock_at, &unlock).await?;
                return Err(SmartError::Corrupt {
                    what: "leaf under our lock (a writer died mid-write?)",
                    err,
                });
            }
        };
        if !same_key {
            self.write(lock_at, &unlock).await?;
            return Ok(None);
        }
        if !was_valid && kind != WriteKind::Upsert {
            self.write(lock_at, &unlock).await?;
            return Ok(Some(false));
        }
        let rev = u64::from_le_bytes(img[..8].try_into().unwrap_or([0; 8]));
        let (valid, v) = match kind {
            WriteKind::Delete => (false, &[][..]),
            _ => (true, value),
        };
        build_leaf(
            &mut img[..bytes],
            rev,
            LeafStatus::live(valid),
            key,
            v,
            self.cfg.value_cap,
        )
        .map_err(|err| SmartError::Corrupt {
            what: "leaf image",
            err,
        })?;
        if self.cfg.techniques.rear_lock && self.cfg.assume_tail_last {
            // Write-back and release in one WRITE: the lock word is the last one written
            // (only where the fabric places a WRITE's last word last).
            self.write(
                leaf.add(LEAF_STATUS_OFFSET as u64),
                &img[LEAF_STATUS_OFFSET..bytes],
            )
            .await?;
        } else if self.cfg.techniques.rear_lock {
            // Write-back, then release, in one doorbell: the release is a WRITE of its own,
            // which per-queue-pair order places after the whole write-back.
            qp.post(&mut [
                Op::Write {
                    remote: leaf.add(LEAF_STATUS_OFFSET as u64),
                    local: &img[LEAF_STATUS_OFFSET..bytes - 8],
                },
                Op::Write {
                    remote: lock_at,
                    local: &unlock,
                },
            ])
            .await?;
        } else {
            self.write(
                leaf.add(LEAF_STATUS_OFFSET as u64),
                &img[LEAF_STATUS_OFFSET..bytes - 8],
            )
            .await?;
            self.write(lock_at, &unlock).await?;
        }
        Ok(Some(was_valid))
    }

    /// Out-of-place write: a new leaf, then the old leaf's status CASed to forward to it
    /// (the linearization point), then the parent slot swung (best effort).
    async fn write_out_of_place(
        &self,
        kind: WriteKind,
        at: (GlobalAddr, Header, usize, Slot),
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
        let status_at = leaf.add(LEAF_STATUS_OFFSET as u64);
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
            if self
                .change_slot(node, header.frozen(false), idx, slot, new)
                .await?
                == Swap::Done
            {
                self.cache.borrow_mut().set_slot(node, idx, new);
            }
        }
        Ok(Some(was_valid))
    }
}

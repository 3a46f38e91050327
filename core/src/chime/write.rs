//! Writes under the leaf's lock: value updates in place (one entry and its group's header),
//! inserts (with hops) and deletes (whole groups under new stamps), and splits that repack
//! the leaf into two or more leaves (`hopscotch::pack`), linked upward through Sherman's
//! separator inserts.
use super::delegate::{Entries, Kind};
use super::hopscotch::{NoRoom, Table, pack};
use super::leaf::{
    Meta, Run, dirty_ranges, encode_group_of, encode_groups, encode_leaf, groups_of, stamps_from,
};
use super::merge::MERGE_AT;
use super::read::{At, Reach};
use super::redo::{ALL_UNITS, entry_unit};
use super::reuse::is_stale;
use super::{Chime, ChimeError};
use crate::delegation::Pick;
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::sherman::{Batch, ShermanError};
use remora_layouts::GlobalAddr;
use remora_layouts::chime::{
    ENTRY_LEN, Entry, GroupHeader, LEAF_LEN, LeafPrefix, MAX_VALUE, NEIGHBOURHOOD, PREFIX_LEN,
    SLOTS, group_offset, home, slot_offset,
};
use std_alloc::vec::Vec;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Upsert,
    Update,
    Delete,
}

/// What a locked step decided.
enum Step {
    Done(bool),
    /// A delete left leaf `leaf` (low key `low`) with at most `merge::MERGE_AT` keys.
    Sparse {
        leaf: GlobalAddr,
        low: u64,
    },
    /// The leaf does not cover the key (lock released): where to go.
    Elsewhere(Reach),
}

/// A split's buffers (the leaf's entries and the new one in key order, the packed parts
/// with their low keys, their addresses, their images), kept by the handle between splits
/// (`Chime::split_bufs`) with the room the largest split so far needed.
#[derive(Default)]
pub(super) struct SplitBufs {
    all: Vec<Entry>,
    parts: Vec<(u64, Table)>,
    addrs: Vec<GlobalAddr>,
    images: Vec<[u8; LEAF_LEN]>,
}

const FULL: &str = "a doorbell batch holds at most 8 work requests";

impl<'e, E: Endpoint> Chime<'e, E> {
    /// Refuses a value longer than the tree's value size (or CHIME's largest).
    pub(super) fn check_value(&self, value: &[u8]) -> Result<(), ChimeError> {
        let max = self.cfg.sherman.value_size.min(MAX_VALUE);
        if value.len() > max {
            return Err(ShermanError::ValueTooLong {
                len: value.len(),
                max,
            });
        }
        Ok(())
    }

    /// An upsert, update or delete of `key`, restarted (bounded) when an attempt grew older
    /// than the reuse of merged leaves allows (`reuse.rs`: it wrote nothing); a delete that
    /// leaves its leaf sparse then merges it (`merge.rs`).
    pub(super) async fn modify(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
    ) -> Result<bool, ChimeError> {
        self.modify_picking(key, value, change, &mut Pick::none(Kind(change)))
            .await
    }

    /// [`Self::modify`] of a combining leader (`delegate.rs`): an update in place, once it
    /// holds the leaf's lock, past every check that restarts it, and with the key present,
    /// writes the latest value queued for the key instead of `value` if `pick` picks one
    /// up, as the authors' leaf update does (`get_combining_value` before the write-back,
    /// dmemsys/CHIME src/Tree.cpp `leaf_node_update`).
    pub(super) async fn modify_picking(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
        pick: &mut Pick<'_, Entries>,
    ) -> Result<bool, ChimeError> {
        self.check_value(value)?;
        let mut p = self.tree.wait();
        loop {
            self.begin();
            match self.modify_once(key, value, change, pick).await {
                Err(e) if is_stale(&e) && p.step(self.tree.endpoint()) => {}
                Ok(Step::Sparse { leaf, low }) => {
                    // The delete is done; the merge is housekeeping, and a merge that
                    // cannot finish now (a lock held, a stale attempt) is left undone.
                    match self.merge(leaf, low).await {
                        Err(ShermanError::Fabric(e)) => return Err(e.into()),
                        _ => return Ok(true),
                    }
                }
                Ok(Step::Done(r)) => return Ok(r),
                // Not returned (`modify_once` moves on itself); were it, the next attempt
                // starts over.
                Ok(Step::Elsewhere(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }

    async fn modify_once(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
        pick: &mut Pick<'_, Entries>,
    ) -> Result<Step, ChimeError> {
        let mut at = self.locate(key).await?;
        let mut p = self.tree.wait();
        let mut leaf = [0u8; LEAF_LEN];
        loop {
            let lock = self.lock(at.addr, None).await?;
            if let Err(e) = self.fresh() {
                return self.bail(at.addr, lock, Err(e)).await;
            }
            match self
                .modify_locked(at, lock, (key, value, change), &mut leaf, pick)
                .await?
            {
                Step::Elsewhere(r) => {
                    self.step(key, r, &mut at, &mut p).await?;
                }
                done => {
                    self.tree.finish_links().await?;
                    return Ok(done);
                }
            }
        }
    }

    /// Releases `lock` of `addr` with nothing written, then returns `r`.
    async fn bail<T>(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        r: Result<T, ChimeError>,
    ) -> Result<T, ChimeError> {
        self.tree.unlock_leaf(addr, lock, &mut Batch::new()).await?;
        r
    }

    async fn modify_locked(
        &self,
        at: At,
        lock: GlobalAddr,
        (key, value, change): (u64, &[u8], Change),
        leaf: &mut [u8; LEAF_LEN],
        pick: &mut Pick<'_, Entries>,
    ) -> Result<Step, ChimeError> {
        let addr = at.addr;
        let h = home(key);
        let mut t = Table::empty();
        // Vacancy-aware: the prefix and the key's neighbourhood in one doorbell; else the
        // whole leaf. A lean update (`lean_update`) READs the prefix only if it misses: an
        // update in place needs neither the vacancy bitmap nor the low key.
        let mut known = if self.cfg.vacancy_lock {
            Run::window(h)
        } else {
            Run::ALL
        };
        // Prefix-free (`prefix_free`): no prefix READ; a write that may rewrite groups
        // READs the headers beside them too, for their stamps (an update in place rewrites
        // no stamp).
        let free_of_prefix = self.cfg.prefix_free;
        let beside = free_of_prefix && change != Change::Update;
        let lean = (self.cfg.lean_update || free_of_prefix) && change == Change::Update;
        let with_prefix = !lean && !free_of_prefix;
        let read = if beside {
            self.read_run_beside(addr, known, leaf, &mut t).await
        } else {
            self.read_run(addr, known, with_prefix, true, leaf, &mut t)
                .await
        };
        let hdr = match read {
            Ok(hdr) => hdr,
            Err(e) => return self.bail(addr, lock, Err(e)).await,
        };
        let found = t.find(key);
        if lean
            && !free_of_prefix
            && found.is_none()
            && let Err(e) = self.read_prefix(addr, leaf).await
        {
            return self.bail(addr, lock, Err(e)).await;
        }
        // (Not READ by a lean update that found its key, nor by a prefix-free writer: its
        // stamps are then the headers', its low key unknown.)
        let mut prefix = match LeafPrefix::decode(&leaf[..]) {
            Ok(p) => p,
            Err(why) => {
                return self
                    .bail(addr, lock, Err(ShermanError::Corrupt { addr, why }))
                    .await;
            }
        };
        if free_of_prefix {
            stamps_from(&leaf[..], known.widened(), &mut prefix);
        }
        // Sibling-based validation under the lock (`read.rs`, `At`): the leaf cannot split
        // now, so its range is `[prefix.low, sibling's low)` until the unlock. A leaf that
        // holds the key covers it; one that does not is checked. Prefix-free (no merges):
        // no leaf is reused, so one reached has its low key at most the key (`read.rs`).
        let low = (!free_of_prefix).then_some(prefix.low);
        if found.is_none() {
            match self.reach(key, &at, hdr.sibling, low).await {
                Ok(Reach::Here) => {}
                Ok(r) => return self.bail(addr, lock, Ok(Step::Elsewhere(r))).await,
                Err(e) => return self.bail(addr, lock, Err(e)).await,
            }
        }
        let mut meta = Meta::of(&hdr, &prefix);
        let len = value.len() as u8;
        let mut val = [0u8; MAX_VALUE];
        val[..value.len()].copy_from_slice(value);
        let dirty = match (found, change) {
            (Some(s), Change::Upsert | Change::Update) => {
                let g = s / NEIGHBOURHOOD;
                let gh = GroupHeader::decode(&leaf[group_offset(g)..])
                    .map_err(|why| ShermanError::Corrupt { addr, why });
                let gh = match gh {
                    Ok(gh) => gh,
                    Err(e) => return self.bail(addr, lock, Err(e)).await,
                };
                if let Err(e) = self.fresh() {
                    return self.bail(addr, lock, Err(e)).await;
                }
                // Past the last check that restarts the attempt: the latest queued value,
                // if the pick-up takes one, is the one written.
                let mut picked = [0u8; MAX_VALUE];
                let (val, len) = match pick.latest(&mut picked).await {
                    Some(n) => (picked, n as u8),
                    None => (val, len),
                };
                // In place: one entry, and its group's header (its stamps unchanged, its
                // states and checksum new).
                t.e[s].value = val;
                t.e[s].len = len;
                encode_group_of(&mut leaf[..], &t, g, &gh);
                let (hd, o) = (group_offset(g), slot_offset(s));
                let logged = match self.log(addr, entry_unit(s), &leaf[..]).await {
                    Ok(l) => l,
                    Err(e) => return self.bail(addr, lock, Err(e)).await,
                };
                let mut ops = Batch::new();
                logged.ops(&mut ops);
                // One WRITE from the header to the entry (a tear of it can leave any mix).
                ops.push(Op::Write {
                    remote: addr.add(hd as u64),
                    local: &leaf[hd..o + ENTRY_LEN],
                })
                .expect(FULL);
                let r = self.tree.unlock_leaf(addr, lock, &mut ops).await;
                drop(ops);
                self.unlog(logged);
                r?;
                return Ok(Step::Done(true));
            }
            (Some(s), Change::Delete) => {
                self.node.hot.drop_key(key);
                t.remove(s)
            }
            (None, Change::Update | Change::Delete) => {
                return self.bail(addr, lock, Ok(Step::Done(false))).await;
            }
            (None, Change::Upsert) => 'insert: {
                // Prefix-free: the free slots the READ shows, where the write's groups
                // have their neighbours read.
                let free = if free_of_prefix {
                    t.vacancy() & known.widened().usable_from(h)
                } else {
                    prefix.vacancy
                };
                let j = (0..SLOTS)
                    .map(|d| (h + d) % SLOTS)
                    .find(|&s| free & (1 << s) != 0);
                let reach = j.map(|j| Run::span(h, j));
                if let Some(r) = reach
                    && r.count > known.count
                    && !free_of_prefix
                {
                    // The free slot is past the neighbourhood: READ the groups up to it.
                    if let Err(e) = self.read_run(addr, r, false, true, leaf, &mut t).await {
                        return self.bail(addr, lock, Err(e)).await;
                    }
                    known = r;
                }
                match t.insert(key, len, val, free) {
                    Ok((_, dirty)) => {
                        if dirty.count_ones() > 2 {
                            self.count(|s| s.hops += 1);
                        }
                        dirty
                    }
                    Err(NoRoom) => {
                        if known.count < Run::ALL.count
                            && let Err(e) = self
                                .read_run(addr, Run::ALL, false, true, leaf, &mut t)
                                .await
                        {
                            return self.bail(addr, lock, Err(e)).await;
                        }
                        // Prefix-free: every free slot (and stamp) is known now; the key
                        // may fit after all. Else the split needs the prefix's low key.
                        if free_of_prefix {
                            stamps_from(&leaf[..], Run::ALL, &mut prefix);
                            if known.count < Run::ALL.count
                                && let Ok((_, dirty)) = t.insert(key, len, val, t.vacancy())
                            {
                                if dirty.count_ones() > 2 {
                                    self.count(|s| s.hops += 1);
                                }
                                break 'insert dirty;
                            }
                            if let Err(e) = self.read_prefix(addr, leaf).await {
                                return self.bail(addr, lock, Err(e)).await;
                            }
                            prefix.low = match LeafPrefix::decode(&leaf[..]) {
                                Ok(p) => p.low,
                                Err(why) => {
                                    let e = ShermanError::Corrupt { addr, why };
                                    return self.bail(addr, lock, Err(e)).await;
                                }
                            };
                            meta = Meta::of(&hdr, &prefix);
                        }
                        let e = Entry {
                            live: true,
                            len,
                            hop: 0,
                            key,
                            value: val,
                        };
                        return self
                            .split(addr, lock, &t, e, meta, prefix)
                            .await
                            .map(|()| Step::Done(true));
                    }
                }
            }
        };
        let groups = groups_of(dirty);
        encode_groups(&mut leaf[..], &t, groups, meta, &mut prefix);
        if let Err(e) = self.fresh() {
            return self.bail(addr, lock, Err(e)).await;
        }
        // Prefix-free: neither logged nor written (stale between splits).
        let units = (groups as u16) << 1 | u16::from(!free_of_prefix);
        let logged = match self.log(addr, units, &leaf[..]).await {
            Ok(l) => l,
            Err(e) => return self.bail(addr, lock, Err(e)).await,
        };
        let mut ops = Batch::new();
        logged.ops(&mut ops);
        for (a, b) in dirty_ranges(groups) {
            ops.push(Op::Write {
                remote: addr.add(a as u64),
                local: &leaf[a..b],
            })
            .expect(FULL);
        }
        if !free_of_prefix {
            ops.push(Op::Write {
                remote: addr,
                local: &leaf[..remora_layouts::chime::PREFIX_LEN],
            })
            .expect(FULL);
        }
        let r = self.tree.unlock_leaf(addr, lock, &mut ops).await;
        drop(ops);
        self.unlog(logged);
        r?;
        let live = SLOTS - prefix.vacancy.count_ones() as usize;
        if change == Change::Delete && self.cfg.merge && live <= MERGE_AT && meta.low != 0 {
            return Ok(Step::Sparse {
                leaf: addr,
                low: meta.low,
            });
        }
        Ok(Step::Done(true))
    }

    /// READs the prefix of leaf `addr`, locked, into `leaf` (a lean update that missed, a
    /// prefix-free insert about to split).
    async fn read_prefix(
        &self,
        addr: GlobalAddr,
        leaf: &mut [u8; LEAF_LEN],
    ) -> Result<(), ChimeError> {
        let qp = self.tree.qp_of(addr)?;
        qp.read(addr, &mut leaf[..PREFIX_LEN]).await?;
        Ok(())
    }

    /// Splits the locked leaf `addr` (every slot in `t`) while inserting `new`: its entries
    /// and `new` repacked into two or more leaves in key order, the new ones written before
    /// the old one (which keeps the lowest keys) is rewritten and unlocked, then linked into
    /// level 1 left to right.
    async fn split(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        t: &Table,
        new: Entry,
        meta: Meta,
        prefix: LeafPrefix,
    ) -> Result<(), ChimeError> {
        // The buffers come from the handle's pool (kept between splits), so a split in
        // steady state allocates nothing; they go back whatever the outcome.
        let mut bufs = self.split_bufs.borrow_mut().pop().unwrap_or_default();
        let r = self
            .split_in(addr, lock, t, new, meta, prefix, &mut bufs)
            .await;
        self.split_bufs.borrow_mut().push(bufs);
        r
    }

    /// [`Self::split`] in `bufs`.
    #[allow(clippy::too_many_arguments)]
    async fn split_in(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        t: &Table,
        new: Entry,
        meta: Meta,
        prefix: LeafPrefix,
        bufs: &mut SplitBufs,
    ) -> Result<(), ChimeError> {
        let SplitBufs {
            all,
            parts,
            addrs,
            images,
        } = bufs;
        all.clear();
        all.extend(t.live().copied().chain(core::iter::once(new)));
        all.sort_unstable_by_key(|e| e.key);
        parts.clear();
        pack(all, SLOTS, &mut |first, table| {
            parts.push((all[first].key, *table))
        });
        self.count(|s| {
            s.splits += 1;
            s.extra_leaves += parts.len().saturating_sub(2) as u64;
            s.new_leaves += parts.len().saturating_sub(1) as u64;
        });
        addrs.clear();
        addrs.push(addr);
        for _ in 1..parts.len() {
            match self.alloc_leaf().await {
                Ok(a) => addrs.push(a),
                Err(e) => return self.bail(addr, lock, Err(e)).await,
            }
        }
        images.clear();
        images.resize(parts.len(), [0u8; LEAF_LEN]);
        for (i, (img, (low, part))) in images.iter_mut().zip(parts.iter()).enumerate() {
            let last = i + 1 == parts.len();
            // No high ends: each part's is its sibling's low key (the last's, the old
            // sibling's, as before the split).
            let m = Meta {
                sibling: if last {
                    meta.sibling
                } else {
                    addrs[i + 1].raw()
                },
                low: if i == 0 { meta.low } else { *low },
            };
            let mut pf = if i == 0 {
                prefix
            } else {
                LeafPrefix::default()
            };
            encode_leaf(img, part, m, &mut pf);
        }
        if let Err(e) = self.fresh() {
            // Nothing written: the leaves allocated are nobody's.
            self.give_back(&addrs[1..]);
            return self.bail(addr, lock, Err(e)).await;
        }
        let (parts, addrs, images) = (&*parts, &*addrs, &*images);
        // The new leaves first: in the unlock's doorbell when on the same node (per-queue-
        // pair order lands them first), else written and acknowledged before.
        // The old leaf's record (all of it) goes first; the new leaves are unreachable until
        // the old leaf's image lands, so they need none.
        let logged = match self.log(addr, ALL_UNITS, &images[0]).await {
            Ok(l) => l,
            Err(e) => return self.bail(addr, lock, Err(e)).await,
        };
        let mut ops = Batch::new();
        logged.ops(&mut ops);
        for (i, img) in images.iter().enumerate().skip(1) {
            let a = addrs[i];
            if a.node() == addr.node() && self.cfg.sherman.combine_commands && ops.len() < 6 {
                ops.push(Op::Write {
                    remote: a,
                    local: img,
                })
                .expect(FULL);
            } else if let Err(e) = self.tree.qp_of(a)?.write(a, img).await {
                drop(ops);
                self.unlog(logged);
                return self.bail(addr, lock, Err(e.into())).await;
            }
        }
        ops.push(Op::Write {
            remote: addr,
            local: &images[0],
        })
        .expect(FULL);
        let r = self.tree.unlock_leaf(addr, lock, &mut ops).await;
        drop(ops);
        self.unlog(logged);
        r?;
        for (i, (low, _)) in parts.iter().enumerate().skip(1) {
            self.tree.link_leaf(*low, addrs[i]).await?;
        }
        Ok(())
    }
}

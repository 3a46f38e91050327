//! Reads: group READs that verify (retried, bounded), the way to a key's leaf, lookups
//! (speculative first), and scans.
use super::hopscotch::Table;
use super::leaf::{Run, decode_run};
use super::{Chime, ChimeError};
use crate::fabric::{Endpoint, Op, QueuePair, Work};
use crate::sherman::{Patience, ShermanError};
use remora_layouts::GlobalAddr;
use remora_layouts::chime::{
    Entry, GROUP_HEADER_LEN, GROUP_LEN, GroupHeader, KEY_INFINITY, LEAF_LEN, NEIGHBOURHOOD,
    PREFIX_LEN, decode_group, group_offset, home,
};
use std_alloc::vec::Vec;

/// Bytes of the frame an internal page is read into on the way down.
pub(super) const FRAME: usize = 1024;

/// Where a key's leaf was found, and whether its parent routed there (a page that then does
/// not cover the key is a split its parent does not know yet).
#[derive(Clone, Copy)]
pub(super) struct At {
    pub(super) addr: GlobalAddr,
    pub(super) from_parent: bool,
}

impl<'e, E: Endpoint> Chime<'e, E> {
    /// The leaf covering `key` as the level-1 pages (cached, or read) say.
    pub(super) async fn locate(&self, key: u64) -> Result<At, ChimeError> {
        let mut frame = [0u8; FRAME];
        let (addr, cached) = self
            .tree
            .leaf_of(key, &mut frame[..self.cfg.sherman.page_size])
            .await?;
        Ok(At {
            addr,
            from_parent: !cached,
        })
    }

    /// READs the groups of `run` of leaf `addr` into `leaf` (at their offsets) until they
    /// verify, into `t`; returns the leaf's metadata as their headers carry it. With
    /// `prefix` (a lock holder) the leaf prefix is read in the same doorbell. `locked`: the
    /// caller holds the leaf's lock; else a leaf torn for a lease is repaired (its writer
    /// died: its lock's next holder redoes it, `redo.rs`).
    pub(super) async fn read_run(
        &self,
        addr: GlobalAddr,
        run: Run,
        prefix: bool,
        locked: bool,
        leaf: &mut [u8; LEAF_LEN],
        t: &mut Table,
    ) -> Result<GroupHeader, ChimeError> {
        let qp = self.tree.qp_of(addr)?;
        let ep = self.tree.endpoint();
        let mut p = self.tree.wait();
        let (mut seen, mut repaired) = (None, false);
        loop {
            {
                let ranges = run.ranges();
                let (pre, rest) = leaf.split_at_mut(PREFIX_LEN);
                let mut ops: heapless::Vec<Op<'_>, 3> = heapless::Vec::new();
                if prefix {
                    let _ = ops.push(Op::Read {
                        remote: addr,
                        local: pre,
                    });
                }
                // Groups start after the prefix; a wrapped run is the head groups (its
                // second range, from group 0) and the tail groups (its first range).
                let (r0, r1) = (ranges[0], ranges.get(1).copied());
                let cut = r1.map_or(0, |r| r.1 - PREFIX_LEN);
                let (head, tail) = rest.split_at_mut(cut);
                if let Some(r1) = r1 {
                    let _ = ops.push(Op::Read {
                        remote: addr.add(r1.0 as u64),
                        local: &mut head[r1.0 - PREFIX_LEN..],
                    });
                }
                let _ = ops.push(Op::Read {
                    remote: addr.add(r0.0 as u64),
                    local: &mut tail[r0.0 - PREFIX_LEN - cut..r0.1 - PREFIX_LEN - cut],
                });
                qp.post(&mut ops).await?;
            }
            ep.charge(Work::Decode(run.count * GROUP_HEADER_LEN));
            ep.charge(Work::Scan(run.count * NEIGHBOURHOOD));
            let why = match decode_run(&leaf[..], run, t) {
                Ok(h) => return Ok(h),
                Err(why) => why,
            };
            self.count(|s| s.retries += 1);
            if !locked && seen.is_none() {
                seen = Some(self.tree.lock_word_of(addr).await?);
            }
            if !locked && !repaired && p.past_lease(ep) {
                repaired = true;
                self.repair(addr, seen).await?;
                continue;
            }
            if !p.pause(ep).await {
                return Err(ShermanError::Corrupt { addr, why });
            }
        }
    }

    /// Moves `at` for `key` after a leaf whose metadata is `h` was read there: `Ok(true)` if
    /// the leaf covers the key, else `at` is the next leaf to try (its right sibling, or the
    /// leaf the level-1 pages name again).
    pub(super) async fn follow(
        &self,
        key: u64,
        h: &GroupHeader,
        at: &mut At,
        p: &mut Patience,
    ) -> Result<bool, ChimeError> {
        if h.covers(key) {
            return Ok(true);
        }
        let ep = self.tree.endpoint();
        if !p.step(ep) {
            return Err(ShermanError::Unsettled {
                what: "chime: the key's leaf was not reached",
                at: at.addr,
                waited_ns: p.waited(ep),
            });
        }
        self.tree.forget(key);
        if key >= h.high && h.sibling != 0 {
            if at.from_parent {
                self.tree
                    .note_missing(h.high, GlobalAddr::from_raw(h.sibling));
            }
            *at = At {
                addr: GlobalAddr::from_raw(h.sibling),
                from_parent: false,
            };
        } else {
            p.pause(ep).await;
            *at = self.locate(key).await?;
        }
        Ok(false)
    }

    /// A speculative read of `key` in `slot` of leaf `addr`: the slot's group, header and
    /// entries (one READ; its checksum covers them all). `Some(len)` if the verified group
    /// holds the key in that slot and its fences cover it; `None`: fall back to the
    /// neighbourhood.
    async fn speculate(
        &self,
        addr: GlobalAddr,
        slot: usize,
        key: u64,
        out: &mut [u8],
    ) -> Result<Option<usize>, ChimeError> {
        self.count(|s| s.speculative_tries += 1);
        let qp = self.tree.qp_of(addr)?;
        let mut gb = [0u8; GROUP_LEN];
        qp.read(addr.add(group_offset(slot / NEIGHBOURHOOD) as u64), &mut gb)
            .await?;
        self.tree.endpoint().charge(Work::Decode(GROUP_LEN));
        let mut es = [Entry::default(); NEIGHBOURHOOD];
        match decode_group(&gb, &mut es) {
            Ok(h)
                if es[slot % NEIGHBOURHOOD].live
                    && es[slot % NEIGHBOURHOOD].key == key
                    && h.covers(key) =>
            {
                self.count(|s| s.speculative_hits += 1);
                Ok(Some(copy_value(&es[slot % NEIGHBOURHOOD], out)?))
            }
            _ => {
                self.node.hot.drop_key(key);
                Ok(None)
            }
        }
    }

    pub(super) async fn lookup(
        &self,
        key: u64,
        out: &mut [u8],
    ) -> Result<Option<usize>, ChimeError> {
        let mut at = self.locate(key).await?;
        if self.cfg.speculative
            && let Some(slot) = self.node.hot.get(key, at.addr)
            && let Some(len) = self.speculate(at.addr, slot, key, out).await?
        {
            return Ok(Some(len));
        }
        let mut leaf = [0u8; LEAF_LEN];
        let mut t = Table::empty();
        let mut p = self.tree.wait();
        let run = Run::window(home(key));
        loop {
            let h = self
                .read_run(at.addr, run, false, false, &mut leaf, &mut t)
                .await?;
            if !self.follow(key, &h, &mut at, &mut p).await? {
                continue;
            }
            self.tree.endpoint().charge(Work::Probe(1));
            return match t.find(key) {
                Some(s) => {
                    if self.cfg.speculative {
                        self.node.hot.put(key, at.addr, s);
                    }
                    Ok(Some(copy_value(&t.e[s], out)?))
                }
                None => Ok(None),
            };
        }
    }

    pub(super) async fn scan_from(
        &self,
        from: u64,
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ChimeError> {
        let mut key = from;
        let mut seen = 0;
        let mut at = self.locate(key).await?;
        let mut leaf = [0u8; LEAF_LEN];
        let mut t = Table::empty();
        let mut p = self.tree.wait();
        let mut batch: Vec<(u64, usize)> = Vec::with_capacity(remora_layouts::chime::SLOTS);
        while seen < limit {
            let h = self
                .read_run(at.addr, Run::ALL, false, false, &mut leaf, &mut t)
                .await?;
            if !self.follow(key, &h, &mut at, &mut p).await? {
                continue;
            }
            batch.clear();
            batch.extend(
                t.e.iter()
                    .enumerate()
                    .filter(|(_, e)| e.live && e.key >= key && e.key < h.high)
                    .map(|(s, e)| (e.key, s)),
            );
            self.tree.endpoint().charge(Work::Sort(batch.len()));
            batch.sort_unstable();
            for &(k, s) in &batch {
                if seen >= limit {
                    break;
                }
                let e = &t.e[s];
                visit(&k.to_be_bytes(), &e.value[..e.len as usize]);
                seen += 1;
            }
            if h.high == KEY_INFINITY || h.sibling == 0 {
                break;
            }
            key = h.high;
            at = At {
                addr: GlobalAddr::from_raw(h.sibling),
                from_parent: false,
            };
        }
        Ok(seen)
    }
}

impl<E: Endpoint> Chime<'_, E> {
    /// Walks the leaf chain from the leftmost leaf, READing every leaf whole: how many
    /// leaves, live entries and free slots the tree has now (a churn's census; not atomic
    /// against concurrent writers).
    pub async fn census(&self) -> Result<super::ChimeCensus, ChimeError> {
        let mut at = self.locate(0).await?;
        let mut leaf = [0u8; LEAF_LEN];
        let mut t = Table::empty();
        let mut p = self.tree.wait();
        let mut key = 0;
        let mut c = super::ChimeCensus::default();
        loop {
            let h = self
                .read_run(at.addr, Run::ALL, false, false, &mut leaf, &mut t)
                .await?;
            if !self.follow(key, &h, &mut at, &mut p).await? {
                continue;
            }
            let live = t.live().count() as u64;
            c.leaves += 1;
            c.entries += live;
            c.free_slots += remora_layouts::chime::SLOTS as u64 - live;
            if h.high == KEY_INFINITY || h.sibling == 0 {
                return Ok(c);
            }
            key = h.high;
            at = At {
                addr: GlobalAddr::from_raw(h.sibling),
                from_parent: false,
            };
        }
    }
}

fn copy_value(e: &Entry, out: &mut [u8]) -> Result<usize, ChimeError> {
    let len = e.len as usize;
    let got = out.len();
    out.get_mut(..len)
        .ok_or(ShermanError::BufferTooSmall { need: len, got })?
        .copy_from_slice(&e.value[..len]);
    Ok(len)
}

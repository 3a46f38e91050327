//! Reads: group READs that verify (retried, bounded), the way to a key's leaf, lookups
//! (speculative first), and scans.
use super::hopscotch::Table;
use super::leaf::{Run, decode_run};
use super::{Chime, ChimeError};
use crate::fabric::{Endpoint, Op, QueuePair, Work};
use crate::sherman::{Patience, ShermanError};
use remora_layouts::GlobalAddr;
use remora_layouts::chime::{
    Entry, GROUP_HEADER_LEN, GROUP_LEN, GROUPS, GroupHeader, LEAF_LEN, LOW_OFFSET, NEIGHBOURHOOD,
    PREFIX_LEN, decode_group, group_offset, home,
};

/// Bytes of the frame an internal page is read into on the way down.
pub(super) const FRAME: usize = 1024;

/// Where a key's leaf was found: the leaf, whether its parent routed there (a leaf that
/// then does not cover the key is a split its parent does not know yet), and the leaf the
/// route named next, the one whose low key is the routed range's high end (raw, 0: none,
/// the range is open; `None`: not known, the route was the last child of its page or a
/// sibling pointer).
///
/// **Sibling-based validation** (CHIME §4.3, the authors' `Tree::leaf_node_search`): the
/// groups carry no fences. A route always ends at a leaf whose low key is at most the key (a
/// separator is its child's low key, a leaf's low key never changes, and a sibling is
/// followed only to a key at least its low key). Its high end, in any image, is its
/// sibling's low key. A leaf holds only keys it covers, so one that holds the key needs no
/// check (a split rewrites every group of the leaf, under its lock, before any writer can
/// reach the keys that moved). A leaf read without the key, whose sibling is the one the route named next covers
/// the key (its high end is the route's, above the key); one with no sibling covers it
/// (its range is open); otherwise the leaf split since the route was made (or the route did
/// not name a next leaf), and one 8-byte READ of the sibling's low key (fixed since the
/// sibling was made, and written before any leaf pointed to it) says whether the key is
/// still here or to the right ([`Reach`]).
#[derive(Clone, Copy)]
pub(super) struct At {
    pub(super) addr: GlobalAddr,
    pub(super) from_parent: bool,
    pub(super) next: Option<u64>,
}

/// Whether the leaf read covered the key then ([`Chime::reach`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Reach {
    /// It did.
    Here,
    /// The key is at or beyond the leaf's sibling `addr`, whose low key is `low`.
    Right { addr: GlobalAddr, low: u64 },
    /// The leaf's low key is above the key: the route was wrong; descend again.
    Lost,
    /// The leaf was merged into `left` (`merge.rs`): the key is there or to its right.
    Retired { left: GlobalAddr },
}

impl<'e, E: Endpoint> Chime<'e, E> {
    /// The leaf covering `key` as the level-1 pages (cached, or read) say.
    pub(super) async fn locate(&self, key: u64) -> Result<At, ChimeError> {
        let mut frame = [0u8; FRAME];
        let (r, cached) = self
            .tree
            .leaf_route(
                key,
                &mut frame[..self.cfg.sherman.page_size],
                self.routes_cached(),
            )
            .await?;
        Ok(At {
            addr: r.child,
            from_parent: !cached,
            next: r.next,
        })
    }

    /// Whether the leaf at `at`, read with sibling `sibling` (and, for a lock holder, low key
    /// `low` from its prefix), covered `key` at that read ([`At`]).
    pub(super) async fn reach(
        &self,
        key: u64,
        at: &At,
        sibling: u64,
        low: Option<u64>,
    ) -> Result<Reach, ChimeError> {
        if let Some(left) = super::merge::retired(sibling) {
            return Ok(Reach::Retired { left });
        }
        if low.is_some_and(|l| key < l) {
            return Ok(Reach::Lost);
        }
        if !self.cfg.sibling_check || sibling == 0 || at.next == Some(sibling) {
            return Ok(Reach::Here);
        }
        let addr = GlobalAddr::from_raw(sibling);
        let mut w = [0u8; 8];
        self.tree
            .qp_of(addr)?
            .read(addr.add(LOW_OFFSET as u64), &mut w)
            .await?;
        self.count(|s| s.sibling_reads += 1);
        let low = u64::from_le_bytes(w);
        Ok(if key < low {
            Reach::Here
        } else {
            Reach::Right { addr, low }
        })
    }

    /// Moves `at` for `key` after a leaf there was found not to cover it (`r`): to its
    /// sibling, or to the leaf the level-1 pages name again. Bounded by `p`.
    pub(super) async fn step(
        &self,
        key: u64,
        r: Reach,
        at: &mut At,
        p: &mut Patience,
    ) -> Result<(), ChimeError> {
        let ep = self.tree.endpoint();
        if !p.step(ep) {
            return Err(ShermanError::Unsettled {
                what: "chime: the key's leaf was not reached",
                at: at.addr,
                waited_ns: p.waited(ep),
            });
        }
        self.tree.forget(key);
        match r {
            Reach::Right { addr, low } => {
                // A leaf found missing from its parent is linked here (a splitter that died
                // before linking it) only without merges: with them, the leaf may have been
                // merged away since it was read, and its link would name a retired leaf
                // (`merge.rs`). It stays reached through its left sibling.
                if at.from_parent && !self.cfg.merge {
                    self.tree.note_missing(low, addr);
                }
                *at = At {
                    addr,
                    from_parent: false,
                    next: None,
                };
            }
            Reach::Retired { left } => {
                *at = At {
                    addr: left,
                    from_parent: false,
                    next: None,
                };
            }
            Reach::Here | Reach::Lost => {
                p.pause(ep).await;
                *at = self.locate(key).await?;
            }
        }
        Ok(())
    }

    /// [`Self::reach`], then [`Self::step`] if the leaf did not cover the key: `Ok(true)` if
    /// it did.
    pub(super) async fn follow(
        &self,
        key: u64,
        h: &GroupHeader,
        at: &mut At,
        p: &mut Patience,
    ) -> Result<bool, ChimeError> {
        match self.reach(key, at, h.sibling, None).await? {
            Reach::Here => Ok(true),
            r => self.step(key, r, at, p).await.map(|()| false),
        }
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
        self.read_run_in(addr, run, (prefix, false), locked, leaf, t)
            .await
    }

    /// [`Self::read_run`] of a prefix-free writer (`ChimeConfig::prefix_free`): no prefix;
    /// in the same doorbell the headers of the groups before and after `run` (a run of
    /// fewer than 7 groups), for their stamps, unverified (their checksums cover their
    /// entries too; under the lock a group is as its last writer left it, or as a lock
    /// takeover's redo left it: `redo.rs`). The header after the run rides in the run's
    /// READ when it follows it in the leaf.
    pub(super) async fn read_run_beside(
        &self,
        addr: GlobalAddr,
        run: Run,
        leaf: &mut [u8; LEAF_LEN],
        t: &mut Table,
    ) -> Result<GroupHeader, ChimeError> {
        self.read_run_in(addr, run, (false, true), true, leaf, t)
            .await
    }

    async fn read_run_in(
        &self,
        addr: GlobalAddr,
        run: Run,
        (prefix, beside): (bool, bool),
        locked: bool,
        leaf: &mut [u8; LEAF_LEN],
        t: &mut Table,
    ) -> Result<GroupHeader, ChimeError> {
        let qp = self.tree.qp_of(addr)?;
        let ep = self.tree.endpoint();
        let mut p = self.tree.wait();
        let mut repaired = false;
        let beside = beside && run.count + 2 <= GROUPS;
        loop {
            {
                let mut ranges = run.ranges();
                // The header before the run, and the one after it (appended to the range
                // it follows, if any).
                let before = group_offset((run.first + GROUPS - 1) % GROUPS);
                let next = group_offset((run.first + run.count) % GROUPS);
                let mut after = beside.then_some(next);
                if beside && let Some(r) = ranges.iter_mut().find(|r| r.1 == next) {
                    r.1 += GROUP_HEADER_LEN;
                    after = None;
                }
                let (pre, rest) = leaf.split_at_mut(PREFIX_LEN);
                let mut ops: heapless::Vec<Op<'_>, 4> = heapless::Vec::new();
                if prefix {
                    let _ = ops.push(Op::Read {
                        remote: addr,
                        local: pre,
                    });
                }
                // Groups start after the prefix: split `rest` at each range, in order.
                let mut wanted: heapless::Vec<(usize, usize), 4> = heapless::Vec::new();
                if beside {
                    let _ = wanted.push((before, before + GROUP_HEADER_LEN));
                }
                if let Some(a) = after {
                    let _ = wanted.push((a, a + GROUP_HEADER_LEN));
                }
                // A wrapped run is the head groups (its second range, from group 0) and
                // the tail groups (its first range).
                for r in ranges.iter().rev() {
                    let _ = wanted.push(*r);
                }
                let mut order: heapless::Vec<(usize, usize), 4> = wanted.clone();
                order.sort_unstable();
                let mut rest = rest;
                let mut at = PREFIX_LEN;
                let mut bufs: heapless::Vec<(usize, &mut [u8]), 4> = heapless::Vec::new();
                for (a, b) in order {
                    let (_, tail) = core::mem::take(&mut rest).split_at_mut(a - at);
                    let (mine, tail) = tail.split_at_mut(b - a);
                    let _ = bufs.push((a, mine));
                    rest = tail;
                    at = b;
                }
                // Posted in the order wanted (as before this helper: the prefix, a wrapped
                // run's head, its tail).
                for (a, _) in wanted {
                    if let Some(i) = bufs.iter().position(|(x, _)| *x == a) {
                        let (_, local) = bufs.swap_remove(i);
                        let _ = ops.push(Op::Read {
                            remote: addr.add(a as u64),
                            local,
                        });
                    }
                }
                qp.post(&mut ops).await?;
            }
            ep.charge(Work::GroupDecode(run.count));
            ep.charge(Work::Scan(run.count * NEIGHBOURHOOD));
            let why = match decode_run(&leaf[..], run, t) {
                Ok(h) => {
                    // Trusted only if no reuse of the leaf can have happened (`reuse.rs`).
                    self.fresh()?;
                    return Ok(h);
                }
                Err(why) => why,
            };
            self.count(|s| s.retries += 1);
            if !locked && !p.saw_word() {
                let word = self.tree.lock_word_of(addr).await?;
                p.saw(word, ep);
            }
            if !locked && !repaired && p.past_lease(ep) {
                repaired = true;
                let seen = p.seen(ep);
                self.repair(addr, seen).await?;
                continue;
            }
            if !p.pause(ep).await {
                return Err(ShermanError::Corrupt { addr, why });
            }
        }
    }

    /// A speculative read of `key` in `slot` of leaf `addr`: the slot's group, header and
    /// entries (one READ; its checksum covers them all). `Some(len)` if the verified group
    /// holds the key in that slot (a leaf holds only keys it covers, and a split rewrites
    /// every group of the leaf it splits); `None`: fall back to the neighbourhood.
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
        self.fresh()?;
        self.tree.endpoint().charge(Work::GroupDecode(1));
        let mut es = [Entry::default(); NEIGHBOURHOOD];
        match decode_group(&gb, &mut es) {
            Ok(_) if es[slot % NEIGHBOURHOOD].live && es[slot % NEIGHBOURHOOD].key == key => {
                self.count(|s| s.speculative_hits += 1);
                Ok(Some(copy_value(&es[slot % NEIGHBOURHOOD], out)?))
            }
            _ => {
                self.node.hot.drop_key(key);
                Ok(None)
            }
        }
    }

    /// A lookup of `key`, restarted (bounded) when an attempt grew older than the reuse of
    /// merged leaves allows (`reuse.rs`).
    pub(super) async fn lookup(
        &self,
        key: u64,
        out: &mut [u8],
    ) -> Result<Option<usize>, ChimeError> {
        let mut p = self.tree.wait();
        loop {
            self.begin();
            match self.lookup_once(key, out).await {
                Err(e) if super::reuse::is_stale(&e) && p.step(self.tree.endpoint()) => {}
                r => return r,
            }
        }
    }

    async fn lookup_once(&self, key: u64, out: &mut [u8]) -> Result<Option<usize>, ChimeError> {
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
            self.tree.endpoint().charge(Work::Probe(1));
            // Found: the leaf covers the key (a leaf holds only keys it covers), no check.
            if let Some(s) = t.find(key) {
                if self.cfg.speculative {
                    self.node.hot.put(key, at.addr, s);
                }
                return Ok(Some(copy_value(&t.e[s], out)?));
            }
            // Not found: absent only if the leaf covered the key when read.
            if self.follow(key, &h, &mut at, &mut p).await? {
                return Ok(None);
            }
        }
    }

    /// A scan needs no validation: its first leaf's low key is at most `from` ([`At`]),
    /// each leaf holds only keys below its sibling's low key, and the sibling's keys are all
    /// at least that; so the keys at least `from` of each leaf in turn along the siblings
    /// are in order, and a leaf that split before it was read just has fewer of them.
    pub(super) async fn scan_from(
        &self,
        from: u64,
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ChimeError> {
        let mut seen = 0;
        // The least key still to visit: a restarted attempt (`reuse.rs`) or a leaf found
        // retired (its keys moved into its left neighbour, `merge.rs`) goes on from it.
        let mut lo = from;
        let mut p = self.tree.wait();
        self.begin();
        let mut at = self.locate(from).await?.addr;
        let mut leaf = [0u8; LEAF_LEN];
        let mut t = Table::empty();
        // A leaf's live keys at least `from`: at most its SLOTS, in the frame (no allocation).
        let mut batch: heapless::Vec<(u64, usize), { remora_layouts::chime::SLOTS }> =
            heapless::Vec::new();
        while seen < limit {
            let h = match self
                .read_run(at, Run::ALL, false, false, &mut leaf, &mut t)
                .await
            {
                Ok(h) => h,
                Err(e) if super::reuse::is_stale(&e) && p.step(self.tree.endpoint()) => {
                    self.begin();
                    at = self.locate(lo).await?.addr;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(left) = super::merge::retired(h.sibling) {
                if !p.step(self.tree.endpoint()) {
                    return Err(ShermanError::Unsettled {
                        what: "chime: a scan kept meeting retired leaves",
                        at,
                        waited_ns: p.waited(self.tree.endpoint()),
                    });
                }
                at = left;
                continue;
            }
            batch.clear();
            for (s, e) in t.e.iter().enumerate().take(batch.capacity()) {
                if e.live && e.key >= lo {
                    // Room for every slot: `take` bounds the slots to the capacity.
                    let _ = batch.push((e.key, s));
                }
            }
            self.tree.endpoint().charge(Work::Sort(batch.len()));
            batch.sort_unstable();
            for &(k, s) in &batch {
                if seen >= limit {
                    break;
                }
                let e = &t.e[s];
                visit(&k.to_be_bytes(), &e.value[..e.len as usize]);
                seen += 1;
                lo = k + 1;
            }
            if h.sibling == 0 {
                break;
            }
            at = GlobalAddr::from_raw(h.sibling);
        }
        Ok(seen)
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

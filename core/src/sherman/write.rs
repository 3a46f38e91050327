//! Writes: upserts, updates and deletes under the leaf's lock, leaf and internal splits,
//! separator inserts and root growth.
use super::lock::Batch;
use super::open::D_ROOT;
use super::repair::Logged;
use super::tree::{FRAME_PAGE, Sherman, encode_leaf_with, frame_or_heap};
use super::{PageCheck, ShermanError};
use crate::fabric::{Endpoint, Op, QueuePair};
use core::cmp::Ordering;
use core::ops::Range;
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{
    Geometry, KEY_INFINITY, PageHeader, Slot, encode_leaf_entry, internal_entry, leaf_slot,
    leaf_value, rebind_entry, seal, set_internal_entry,
};
use std_alloc::vec::Vec;

/// The first of `0..n` for which `below` is false (`below` true on a prefix), as
/// `slice::partition_point` finds it.
fn partition_point(n: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let m = lo + (hi - lo) / 2;
        if below(m) {
            lo = m + 1;
        } else {
            hi = m;
        }
    }
    lo
}

/// What a locked leaf step decided.
pub(super) enum Step {
    Done(bool),
    /// To the right sibling (address, separator: the page's high fence).
    MoveTo(GlobalAddr, u64),
    Restart,
}

/// The slot a split's sort buffer names for the entry being inserted (no leaf slot).
const NEW_SLOT: usize = usize::MAX;

/// Encodes a split half as `tree::encode_leaf` does: version `version`, fences and sibling
/// `(low, high, sibling)`, `part`'s entries (key, slot, length; the value is
/// `value_of(slot, length)`) in the first slots, every other slot free, all bound to the
/// version; sealed.
fn encode_split_leaf<'v>(
    img: &mut [u8],
    g: &Geometry,
    check: PageCheck,
    version: u64,
    fences: (u64, u64, u64),
    part: &[(u64, usize, usize)],
    value_of: impl Fn(usize, usize) -> &'v [u8],
) {
    encode_leaf_with(img, g, check, version, fences, |s| {
        part.get(s).map(|&(k, slot, len)| (k, value_of(slot, len)))
    });
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Upsert,
    Update,
    Delete,
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// Ops writing sealed page image `img` whole: one WRITE (readers verify its content, so
    /// the order its segments land in does not matter). The mutant writes rear version,
    /// body, front version as three ordered WRITEs, as its check needs.
    pub(super) fn page_write_ops<'b>(&self, addr: GlobalAddr, img: &'b [u8], ops: &mut Batch<'b>) {
        if self.cfg.page_check == PageCheck::Checksums {
            ops.push(Op::Write {
                remote: addr,
                local: img,
            })
            .expect("a doorbell batch holds at most 8 work requests");
            return;
        }
        let rear = self.g.rear_offset();
        ops.push(Op::Write {
            remote: addr.add(rear as u64),
            local: &img[rear..],
        })
        .expect("a doorbell batch holds at most 8 work requests");
        ops.push(Op::Write {
            remote: addr.add(8),
            local: &img[8..rear],
        })
        .expect("a doorbell batch holds at most 8 work requests");
        ops.push(Op::Write {
            remote: addr,
            local: &img[..8],
        })
        .expect("a doorbell batch holds at most 8 work requests");
    }

    pub(super) async fn modify(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
    ) -> Result<bool, ShermanError> {
        if value.len() > self.g.value_size {
            return Err(ShermanError::ValueTooLong {
                len: value.len(),
                max: self.g.value_size,
            });
        }
        // As in `lookup`: small pages in the coroutine's frame.
        if self.g.page_size <= FRAME_PAGE {
            let mut frame = [0u8; FRAME_PAGE];
            return self
                .modify_in(key, value, change, &mut frame[..self.g.page_size])
                .await;
        }
        let mut buf = self.page();
        let r = self.modify_in(key, value, change, &mut buf).await;
        self.give(buf);
        r
    }

    pub(super) async fn modify_in(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
        buf: &mut [u8],
    ) -> Result<bool, ShermanError> {
        let (mut addr, mut cached) = self.locate(key, buf).await?;
        let mut p = self.patience();
        loop {
            let (lock, _) = self.acquire_page(addr, None).await?;
            let step = self
                .modify_locked(addr, lock, key, value, change, buf)
                .await?;
            if !matches!(step, Step::Done(_)) && !p.step(self.ep) {
                return Err(ShermanError::Unsettled {
                    what: "write did not reach the key's leaf",
                    at: addr,
                    waited_ns: p.waited(self.ep),
                });
            }
            match step {
                Step::Done(r) => {
                    self.link_missing().await?;
                    return Ok(r);
                }
                Step::MoveTo(next, sep) => {
                    if !cached {
                        // Reached from a parent that routed the key here: it lacks the
                        // separator of this leaf's right sibling.
                        self.missing.set(Some((1, sep, next)));
                    }
                    self.node.cache_invalidate(key);
                    // (Every page passed from a parent's pointer lacks its separator there.)
                    addr = next;
                }
                Step::Restart => {
                    self.node.cache_invalidate(key);
                    p.pause(self.ep).await;
                    (addr, cached) = self.locate(key, buf).await?;
                }
            }
        }
    }

    /// Under the leaf's lock: apply the change, write back, release.
    pub(super) async fn modify_locked(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        key: u64,
        value: &[u8],
        change: Change,
        buf: &mut [u8],
    ) -> Result<Step, ShermanError> {
        let qp = self.qp(addr)?;
        let read = self.read_leaf(addr, buf, key, true).await;
        let (h, found) = match read {
            Ok(r) => r,
            Err(e) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Err(e);
            }
        };
        if !h.covers(key) {
            self.locks.release(qp, lock, &mut Batch::new()).await?;
            return Ok(if key >= h.high_fence {
                Step::MoveTo(GlobalAddr::from_raw(h.sibling), h.high_fence)
            } else {
                Step::Restart
            });
        }
        let bind = self.bind(&h);
        let (slot, valid) = match (found, change) {
            (Some((s, _)), Change::Upsert | Change::Update) => (s, true),
            (Some((s, _)), Change::Delete) => (s, false),
            (None, Change::Update | Change::Delete) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Ok(Step::Done(false));
            }
            (None, Change::Upsert) => {
                let free = (0..self.g.leaf_capacity())
                    .find(|&s| matches!(leaf_slot(buf, &self.g, s, bind), Ok(Slot::Free { .. })));
                match free {
                    Some(s) => (s, true),
                    None => {
                        self.split_leaf(addr, lock, &h, key, value, buf).await?;
                        return Ok(Step::Done(true));
                    }
                }
            }
        };
        let version = match leaf_slot(buf, &self.g, slot, bind) {
            Ok(Slot::Live { version, .. } | Slot::Free { version }) => version.wrapping_add(1),
            Err(_) => 0,
        };
        let at = self.g.leaf_entry_offset(slot);
        let entry = at..at + self.g.leaf_entry_size();
        // A delete keeps the entry's key and value bytes and changes only its meta word
        // (valid bit, version, checksum): with two-level versions it is one aligned 8-byte
        // WRITE, which no crash can tear.
        let mut kept = [0u8; remora_layouts::sherman::MAX_VALUE];
        let val: &[u8] = match found {
            _ if valid => value,
            Some((_, len)) => {
                kept[..len].copy_from_slice(leaf_value(buf, &self.g, slot, len));
                &kept[..len]
            }
            None => &[],
        };
        if self.cfg.two_level_versions {
            encode_leaf_entry(&mut buf[entry.clone()], key, val, version, valid, bind);
            let written = if valid { entry } else { at..at + 8 };
            // A delete's one aligned word cannot tear: no redo record.
            let logged = if valid {
                match self.log(addr, at, &buf[written.clone()], 0).await {
                    Ok(l) => Some(l),
                    Err(e) => {
                        self.locks.release(qp, lock, &mut Batch::new()).await?;
                        return Err(e);
                    }
                }
            } else {
                None
            };
            let mut ops = Batch::new();
            if let Some(l) = &logged {
                self.log_ops(l, &mut ops);
            }
            ops.push(Op::Write {
                remote: addr.add(at as u64),
                local: &buf[written],
            })
            .expect("a doorbell batch holds at most 8 work requests");
            let r = self.locks.release(qp, lock, &mut ops).await;
            drop(ops);
            if let Some(l) = logged {
                self.unlog(l);
            }
            r?;
        } else {
            // Whole page under a new version: every slot (verified under the lock) is
            // rebound to it.
            let mut nh = h;
            nh.front_version = h.front_version.wrapping_add(1).max(1);
            let nbind = self.bind(&nh);
            for s in 0..self.g.leaf_capacity() {
                let at = self.g.leaf_entry_offset(s);
                rebind_entry(&mut buf[at..at + self.g.leaf_entry_size()], nbind);
            }
            encode_leaf_entry(&mut buf[entry.clone()], key, val, version, valid, nbind);
            nh.encode(buf);
            seal(buf, &self.g);
            // The record is the entry and the new version (the rest is rebuilt from the page).
            let logged = match self.log(addr, at, &buf[entry], nh.front_version).await {
                Ok(l) => l,
                Err(e) => {
                    self.locks.release(qp, lock, &mut Batch::new()).await?;
                    return Err(e);
                }
            };
            let mut ops = Batch::new();
            self.log_ops(&logged, &mut ops);
            self.page_write_ops(addr, buf, &mut ops);
            let r = self.locks.release(qp, lock, &mut ops).await;
            drop(ops);
            self.unlog(logged);
            r?;
        }
        Ok(Step::Done(found.is_some() || change == Change::Upsert))
    }

    /// Splits a full leaf (locked) while inserting `key`, then links the new page upward.
    pub(super) async fn split_leaf(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        h: &PageHeader,
        key: u64,
        value: &[u8],
        buf: &mut [u8],
    ) -> Result<(), ShermanError> {
        let qp = self.qp(addr)?;
        let bind = self.bind(h);
        // The leaf's live entries and the new one as (key, slot, value length), sorted, in a
        // sort buffer of the handle's (the scans' pool), so a split allocates nothing; the
        // values stay in `buf`, the new one's slot is `NEW_SLOT`.
        let mut entries = self.batch();
        entries.reserve(self.g.leaf_capacity() + 1);
        for s in 0..self.g.leaf_capacity() {
            if let Ok(Slot::Live { key: k, len, .. }) = leaf_slot(buf, &self.g, s, bind) {
                entries.push((k, s, len));
            }
        }
        entries.push((key, NEW_SLOT, value.len()));
        entries.sort_unstable_by_key(|e| e.0);
        let mid = entries.len() / 2;
        let sep = entries[mid].0;
        let right_addr = match self.alloc_page().await {
            Ok(a) => a,
            Err(e) => {
                self.give_batch(entries);
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Err(e);
            }
        };
        let value_of = |slot: usize, len: usize| {
            if slot == NEW_SLOT {
                value
            } else {
                leaf_value(buf, &self.g, slot, len)
            }
        };
        let leaf_image = |img: &mut [u8],
                          version: u64,
                          low: u64,
                          high: u64,
                          sibling: u64,
                          part: &[(u64, usize, usize)]| {
            let check = self.cfg.page_check;
            let fences = (low, high, sibling);
            encode_split_leaf(img, &self.g, check, version, fences, part, value_of);
        };
        // The images in the coroutine's frame when the page is small (see `frame_or_heap`).
        let (mut right_frame, mut right_heap) = ([0u8; FRAME_PAGE], Vec::new());
        let (mut left_frame, mut left_heap) = ([0u8; FRAME_PAGE], Vec::new());
        let right = frame_or_heap(&mut right_frame, &mut right_heap, self.g.page_size);
        leaf_image(right, 1, sep, h.high_fence, h.sibling, &entries[mid..]);
        let left = frame_or_heap(&mut left_frame, &mut left_heap, self.g.page_size);
        leaf_image(
            left,
            h.front_version.wrapping_add(1).max(1),
            h.low_fence,
            sep,
            right_addr.raw(),
            &entries[..mid],
        );
        self.give_batch(entries);
        let (right, left) = (&*right, &*left);
        let logged = match self.log(addr, 0, left, 0).await {
            Ok(l) => l,
            Err(e) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Err(e);
            }
        };
        let r = self
            .write_split(addr, lock, right_addr, right, left, Some(&logged))
            .await;
        self.unlog(logged);
        r?;
        self.splits.set(self.splits.get() + 1);
        let pending = if h.low_fence == 0 && h.high_fence == KEY_INFINITY {
            self.grow_root(addr, 0, sep, right_addr).await?
        } else {
            Some((1, sep, right_addr))
        };
        match pending {
            Some((level, sep, child)) => self.insert_separator(level, sep, child).await.map(drop),
            None => Ok(()),
        }
    }

    /// Writes the new right page, then the left page whole (after its redo record, if
    /// `logged`: a leaf), then unlocks the left page. One doorbell when both pages live on
    /// one node and commands are combined (per-queue-pair order), else two.
    pub(super) async fn write_split(
        &self,
        left_addr: GlobalAddr,
        lock: GlobalAddr,
        right_addr: GlobalAddr,
        right: &[u8],
        left: &[u8],
        logged: Option<&Logged>,
    ) -> Result<(), ShermanError> {
        let qp = self.qp(left_addr)?;
        let mut ops = Batch::new();
        // Command combination also posts the new sibling with the left page (per-queue-pair
        // order lands it first); without it (FG+), the sibling is written and acknowledged
        // first, one more round trip.
        if self.cfg.combine_commands && right_addr.node() == left_addr.node() {
            ops.push(Op::Write {
                remote: right_addr,
                local: right,
            })
            .expect("a doorbell batch holds at most 8 work requests");
        } else if let Err(e) = self.qp(right_addr)?.write(right_addr, right).await {
            self.locks.release(qp, lock, &mut Batch::new()).await?;
            return Err(e.into());
        }
        if let Some(l) = logged {
            self.log_ops(l, &mut ops);
        }
        self.page_write_ops(left_addr, left, &mut ops);
        self.locks.release(qp, lock, &mut ops).await
    }

    /// The root at `level` split into itself and `right` at `sep`: a new root above them.
    /// Returns the separator still to link (level, key, child) if the root moved meanwhile.
    pub(super) async fn grow_root(
        &self,
        old_root: GlobalAddr,
        level: u8,
        sep: u64,
        right: GlobalAddr,
    ) -> Result<Option<(u8, u64, GlobalAddr)>, ShermanError> {
        let qp = self.qp(self.desc)?;
        let a0 = &self.allocs[0];
        let new_root = a0.alloc(qp, self.g.page_size as u64).await?;
        let (mut frame, mut heap) = ([0u8; FRAME_PAGE], Vec::new());
        let img = frame_or_heap(&mut frame, &mut heap, self.g.page_size);
        let h = PageHeader {
            front_version: 1,
            meta: PageHeader::pack_meta(level + 1, false, 1),
            low_fence: 0,
            high_fence: KEY_INFINITY,
            leftmost: old_root.raw(),
            ..Default::default()
        };
        h.encode(img);
        set_internal_entry(img, &self.g, 0, sep, right.raw());
        seal(img, &self.g);
        let mut old = 0u64;
        qp.post(&mut [
            Op::Write {
                remote: new_root,
                local: img,
            },
            Op::Cas {
                remote: self.desc.add(D_ROOT),
                compare: old_root.raw(),
                swap: new_root.raw(),
                old: &mut old,
            },
        ])
        .await?;
        if old == old_root.raw() {
            self.root.set(new_root);
            Ok(None)
        } else {
            // Only the holder of the root's lock grows the root, so this cannot happen unless the
            // descriptor was changed behind the tree's back; link the split the ordinary way.
            a0.free(new_root, self.g.page_size as u64);
            Ok(Some((level + 1, sep, right)))
        }
    }

    /// Inserts separator `sep` → `child` into the internal level `level`, splitting upward
    /// as needed (iteratively). Idempotent: false if `sep` was linked already (by the
    /// splitter, or by another client repairing the same split).
    pub(super) async fn insert_separator(
        &self,
        level: u8,
        sep: u64,
        child: GlobalAddr,
    ) -> Result<bool, ShermanError> {
        // As in `lookup`: small pages in the coroutine's frame.
        if self.g.page_size <= FRAME_PAGE {
            let mut frame = [0u8; FRAME_PAGE];
            return self
                .insert_separator_in(level, sep, child, &mut frame[..self.g.page_size])
                .await;
        }
        let mut buf = self.page();
        let r = self.insert_separator_in(level, sep, child, &mut buf).await;
        self.give(buf);
        r
    }

    async fn insert_separator_in(
        &self,
        mut level: u8,
        mut sep: u64,
        mut child: GlobalAddr,
        buf: &mut [u8],
    ) -> Result<bool, ShermanError> {
        async {
            let mut p = self.patience();
            'levels: loop {
                let mut addr = self.walk(sep, Some(level), buf).await?;
                loop {
                    if !p.step(self.ep) {
                        return Err(ShermanError::Unsettled {
                            what: "separator insert did not find its page",
                            at: addr,
                            waited_ns: p.waited(self.ep),
                        });
                    }
                    let qp = self.qp(addr)?;
                    let (lock, _) = self.acquire_page(addr, None).await?;
                    let h = match self.read_page_as(addr, buf, true).await {
                        Ok(h) => h,
                        Err(e) => {
                            self.locks.release(qp, lock, &mut Batch::new()).await?;
                            return Err(e);
                        }
                    };
                    if !h.covers(sep) || h.level() != level {
                        self.locks.release(qp, lock, &mut Batch::new()).await?;
                        if sep >= h.high_fence && h.level() == level && h.sibling != 0 {
                            addr = GlobalAddr::from_raw(h.sibling);
                            continue;
                        }
                        p.pause(self.ep).await;
                        continue 'levels;
                    }
                    // The page's entries with (sep, child) inserted, read in place from
                    // `buf` (no copy of them, so a separator insert allocates nothing):
                    // entry `i` of the result is `merged(i)`, `len` of them.
                    let old =
                        |i: usize| internal_entry(buf, &self.g, i).unwrap_or((KEY_INFINITY, 0));
                    let count = h.count();
                    let pos = partition_point(count, |i| old(i).0 < sep);
                    if pos < count && old(pos).0 == sep {
                        // Already linked (a retried insert, or a repair): nothing to do.
                        self.locks.release(qp, lock, &mut Batch::new()).await?;
                        return Ok(false);
                    }
                    let len = count + 1;
                    let merged = |i: usize| match i.cmp(&pos) {
                        Ordering::Less => old(i),
                        Ordering::Equal => (sep, child.raw()),
                        Ordering::Greater => old(i - 1),
                    };
                    let image = |img: &mut [u8],
                                 version: u64,
                                 low: u64,
                                 high: u64,
                                 sibling: u64,
                                 leftmost: u64,
                                 part: Range<usize>| {
                        let hh = PageHeader {
                            front_version: version,
                            meta: PageHeader::pack_meta(level, false, part.len()),
                            sibling,
                            low_fence: low,
                            high_fence: high,
                            leftmost,
                            ..Default::default()
                        };
                        hh.encode(img);
                        for (i, e) in part.enumerate() {
                            let (k, c) = merged(e);
                            set_internal_entry(img, &self.g, i, k, c);
                        }
                        seal(img, &self.g);
                    };
                    // The images in the coroutine's frame when the page is small (see
                    // `frame_or_heap`).
                    let (mut right_frame, mut right_heap) = ([0u8; FRAME_PAGE], Vec::new());
                    let (mut left_frame, mut left_heap) = ([0u8; FRAME_PAGE], Vec::new());
                    let size = self.g.page_size;
                    let v = h.front_version.wrapping_add(1).max(1);
                    if len <= self.g.internal_capacity() {
                        let img = frame_or_heap(&mut left_frame, &mut left_heap, size);
                        image(
                            img,
                            v,
                            h.low_fence,
                            h.high_fence,
                            h.sibling,
                            h.leftmost,
                            0..len,
                        );
                        let img = &*img;
                        let mut ops = Batch::new();
                        self.page_write_ops(addr, img, &mut ops);
                        self.locks.release(qp, lock, &mut ops).await?;
                        if level == 1 {
                            self.node.cache_insert(
                                &PageHeader::decode(img, &self.g)
                                    .map_err(|why| ShermanError::Corrupt { addr, why })?,
                                img,
                            );
                        }
                        return Ok(true);
                    }
                    let mid = len / 2;
                    let (up, up_child) = merged(mid);
                    let right_addr = match self.alloc_page().await {
                        Ok(a) => a,
                        Err(e) => {
                            self.locks.release(qp, lock, &mut Batch::new()).await?;
                            return Err(e);
                        }
                    };
                    let right = frame_or_heap(&mut right_frame, &mut right_heap, size);
                    image(
                        right,
                        1,
                        up,
                        h.high_fence,
                        h.sibling,
                        up_child,
                        mid + 1..len,
                    );
                    let left = frame_or_heap(&mut left_frame, &mut left_heap, size);
                    image(
                        left,
                        v,
                        h.low_fence,
                        up,
                        right_addr.raw(),
                        h.leftmost,
                        0..mid,
                    );
                    self.write_split(addr, lock, right_addr, right, left, None)
                        .await?;
                    self.splits.set(self.splits.get() + 1);
                    if level == 1 {
                        self.node.cache_invalidate(sep);
                    }
                    let pending = if h.low_fence == 0 && h.high_fence == KEY_INFINITY {
                        self.grow_root(addr, level, up, right_addr).await?
                    } else {
                        Some((level + 1, up, right_addr))
                    };
                    match pending {
                        Some((l, s, c)) => (level, sep, child) = (l, s, c),
                        None => return Ok(true),
                    }
                    continue 'levels;
                }
            }
        }
        .await
    }
}

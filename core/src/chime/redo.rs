//! Redo records of CHIME's leaves: how a leaf torn by a writer that died in the middle of
//! its write-back is put back together by the next holder of its lock.
//!
//! A leaf write under the lock is one doorbell of several WRITEs (the dirty groups, the
//! prefix; an entry for a value update; the whole leaf for a split), and a writer may die
//! with any of them landed in part (aligned words, in any order). No torn group can be
//! re-derived from the rest (its entries may have moved), so, as Sherman's leaves
//! (`crate::sherman`, `redo.rs`), every such doorbell first WRITEs a *record* — the leaf and
//! the new image of every unit it changes, hashed — into a slot of the writer's own on the
//! leaf's memory node, and the slot's address into the lock's redo pointer (Sherman's table:
//! one word per lock word, written only by the holder). Per-queue-pair order lands both
//! before any byte of the leaf. Units are the prefix and the 8 groups, or one entry with its
//! group's header (a value update, whose stamps are unchanged); a split logs the whole left
//! leaf (its new right leaves are unreachable until it lands).
//!
//! Whoever takes the lock over from a dead holder (`write.rs`, or a reader that found the
//! leaf torn for a lease, `read.rs`) first reads the pointer and the record; if the record is
//! whole and names a leaf under this same lock word, and that leaf is not whole, it writes
//! the record's units into the leaf image and, if the result is whole, writes it back: the
//! dead writer's write, completed (it was never acknowledged: either outcome is
//! linearizable). **Whole** is: every group verifies (`leaf::decode_run` of all of them:
//! each group against its checksum, neighbours against each other's stamps) and the prefix
//! agrees with them (each group's stamp and the vacancy bitmap). Any proper part of a write
//! set fails that: a group part-written fails its checksum; whole new groups with the
//! old prefix (or the new prefix with an old group) disagree on that group's stamp. So a
//! leaf that is not whole was torn by the dead holder, whose record landed first; a whole
//! leaf is never touched (a stale record, of an earlier write that completed, is harmless),
//! and a repairer that dies in the middle leaves the same record for the next.
//!
//! A merge (`merge.rs`) posts a *merge record* instead, named by both leaves' lock words:
//! whoever takes either over finishes the merge from it (`Chime::finish_merge`). Its layout:
//! the left leaf's address, the right one's, [`MERGE_MAGIC`] in the high half of the third
//! word, a hash, then both new images.
//!
//! Record layout (little-endian words): the leaf's address; the unit mask (bit 0 the
//! prefix, bit 1 + g group g, bits 15..9 one entry's slot + 1) with [`MAGIC`] in the high
//! half; a hash of both and the bytes; 0; then each unit's bytes in order.
use super::hopscotch::Table;
use super::leaf::{Run, decode_run};
use super::{Chime, ChimeError};
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::lease::Stretch;
use crate::sherman::Batch;
use remora_layouts::GlobalAddr;
use remora_layouts::chime::{
    ENTRY_LEN, GROUP_HEADER_LEN, GROUP_LEN, GROUPS, GroupHeader, LEAF_LEN, LeafPrefix,
    NEIGHBOURHOOD, PREFIX_LEN, SLOTS, group_offset, slot_offset,
};

/// Bytes of a record before its units.
const HEADER: usize = 32;
/// Bytes of the largest record: every unit (a split's whole leaf).
pub(super) const RECORD_MAX: usize = HEADER + LEAF_LEN;
/// Every unit: the prefix and the 8 groups.
pub(super) const ALL_UNITS: u16 = (1 << (GROUPS + 1)) - 1;
/// Tells a CHIME record from Sherman's (whose second word is an offset and a length).
const MAGIC: u64 = 0x4348_494d;
/// Tells a merge record (`merge.rs`) from a leaf write's.
const MERGE_MAGIC: u64 = 0x4d52_4745;
/// Bytes of a merge record: its header (L, R, kind, hash) and both new images.
pub(super) const MERGE_RECORD: usize = HEADER + 2 * LEAF_LEN;

/// Encodes the record of merging leaf `r` into `l` (their new images `li`, `ri`) into `out`
/// ([`MERGE_RECORD`] bytes).
pub(super) fn encode_merge(out: &mut [u8], l: GlobalAddr, r: GlobalAddr, li: &[u8], ri: &[u8]) {
    out[HEADER..HEADER + LEAF_LEN].copy_from_slice(li);
    out[HEADER + LEAF_LEN..MERGE_RECORD].copy_from_slice(ri);
    let span = MERGE_MAGIC << 32;
    let h = hash(
        l.raw() ^ r.raw().rotate_left(32),
        span,
        &out[HEADER..MERGE_RECORD],
    );
    for (i, w) in [l.raw(), r.raw(), span, h].iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
}

/// The two leaves a merge record's header names (not yet checked against its bytes).
fn merge_header(rec: &[u8]) -> Option<(GlobalAddr, GlobalAddr)> {
    let (l, r) = (word(rec, 0), word(rec, 1));
    (l != 0 && r != 0 && word(rec, 2) == MERGE_MAGIC << 32)
        .then(|| (GlobalAddr::from_raw(l), GlobalAddr::from_raw(r)))
}

/// Whether `rec` ([`MERGE_RECORD`] bytes) is a whole merge record of `l` into `r`.
fn merge_whole(rec: &[u8], l: GlobalAddr, r: GlobalAddr) -> bool {
    hash(
        l.raw() ^ r.raw().rotate_left(32),
        word(rec, 2),
        &rec[HEADER..MERGE_RECORD],
    ) == word(rec, 3)
}

/// The byte range of unit `u` in a leaf.
fn unit(u: usize) -> (usize, usize) {
    if u == 0 {
        (0, PREFIX_LEN)
    } else {
        (group_offset(u - 1), group_offset(u - 1) + GROUP_LEN)
    }
}

/// The mask of the one entry of slot `s` (a value update: the entry and its group's header,
/// whose stamps are unchanged, are the unit; bits 15..9 hold `s + 1`).
pub(super) const fn entry_unit(s: usize) -> u16 {
    ((s as u16) + 1) << 9
}

/// The byte range of a value update of slot `s`: its group's header through its entry.
fn entry_ranges(s: usize) -> [(usize, usize); 1] {
    [(group_offset(s / NEIGHBOURHOOD), slot_offset(s) + ENTRY_LEN)]
}

/// The byte ranges of the units of `mask`, in order.
fn units(mask: u16) -> impl Iterator<Item = (usize, usize)> {
    let entry = (mask >> 9) as usize;
    (0..=GROUPS)
        .filter(move |u| mask & (1 << u) != 0)
        .map(unit)
        .chain(
            (entry > 0)
                .then(|| entry_ranges(entry - 1))
                .into_iter()
                .flatten(),
        )
}

/// Bytes of the units of `mask`.
fn payload_len(mask: u16) -> usize {
    units(mask).map(|(a, b)| b - a).sum()
}

/// Mixing step (a murmur3-style finalizer), seeded apart from Sherman's records.
const fn step(h: u64, w: u64) -> u64 {
    let mut x = (h ^ w).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn hash(leaf: u64, span: u64, bytes: &[u8]) -> u64 {
    let mut h = step(step(0x4348_494d_4552_4544, leaf), span);
    for c in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = step(h, u64::from_le_bytes(w));
    }
    step(h, bytes.len() as u64)
}

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i * 8..i * 8 + 8]);
    u64::from_le_bytes(w)
}

/// Encodes the record of writing the units `mask` of the leaf image `img` at `leaf` into
/// `out`; returns its length.
pub(super) fn encode(out: &mut [u8; RECORD_MAX], leaf: GlobalAddr, mask: u16, img: &[u8]) -> usize {
    let mut n = HEADER;
    for (a, b) in units(mask) {
        out[n..n + b - a].copy_from_slice(&img[a..b]);
        n += b - a;
    }
    let span = mask as u64 | MAGIC << 32;
    let h = hash(leaf.raw(), span, &out[HEADER..n]);
    for (i, w) in [leaf.raw(), span, h, 0].iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    n
}

/// The leaf and unit mask a record header names (not yet checked against its bytes).
fn header(rec: &[u8]) -> Option<(GlobalAddr, u16)> {
    let (leaf, span) = (word(rec, 0), word(rec, 1));
    let mask = (span & 0xffff) as u16;
    let plain = word(rec, 3) == 0 && span >> 16 & 0xffff == 0;
    (leaf != 0 && span >> 32 == MAGIC && plain && mask != 0).then_some(())?;
    ((mask >> 9) as usize <= SLOTS).then_some((GlobalAddr::from_raw(leaf), mask))
}

/// Writes the units of a whole record `rec` into the leaf image `img`; false if the record
/// is not whole.
fn apply(rec: &[u8], img: &mut [u8]) -> bool {
    let Some((leaf, mask)) = header(rec) else {
        return false;
    };
    let n = HEADER + payload_len(mask);
    if rec.len() < n || hash(leaf.raw(), word(rec, 1), &rec[HEADER..n]) != word(rec, 2) {
        return false;
    }
    let mut at = HEADER;
    for (a, b) in units(mask) {
        img[a..b].copy_from_slice(&rec[at..at + b - a]);
        at += b - a;
    }
    true
}

/// The leaf image is whole: every group verifies, neighbours agree, and the prefix agrees
/// with the groups (stamps, vacancy) — see the module docs. Without `prefix` (a tree whose
/// writers keep no prefix, `ChimeConfig::prefix_free`, and log none) the groups alone: a
/// write's groups are one cyclic run (an insert's from its home to its free slot, a
/// delete's the home's and the slot's), so a part of them landed leaves a new group beside
/// an old one of the same write, whose stamp the new one records one higher.
pub(super) fn leaf_whole(img: &[u8], prefix: bool) -> bool {
    let mut t = Table::empty();
    if decode_run(img, Run::ALL, &mut t).is_err() {
        return false;
    }
    if !prefix {
        return true;
    }
    let Ok(p) = LeafPrefix::decode(img) else {
        return false;
    };
    p.vacancy == t.vacancy()
        && (0..GROUPS).all(|g| {
            let at = group_offset(g);
            GroupHeader::decode(&img[at..at + GROUP_HEADER_LEN])
                .is_ok_and(|h| h.own() == p.stamp(g))
        })
}

/// A record about to be posted ahead of a leaf write: its image, its slot, and the lock's
/// redo pointer that will name the slot.
pub(super) struct Logged {
    rec: [u8; RECORD_MAX],
    len: usize,
    slot: GlobalAddr,
    slot_word: [u8; 8],
    ptr: GlobalAddr,
}

impl Logged {
    /// The record's WRITE and the redo pointer's, to go first in the leaf write's doorbell.
    pub(super) fn ops<'b>(&'b self, ops: &mut Batch<'b>) {
        for op in [
            Op::Write {
                remote: self.slot,
                local: &self.rec[..self.len],
            },
            Op::Write {
                remote: self.ptr,
                local: &self.slot_word,
            },
        ] {
            ops.push(op)
                .expect("a doorbell batch holds at most 8 work requests");
        }
    }
}

impl<'e, E: Endpoint> Chime<'e, E> {
    /// The record of writing units `mask` of `img` into leaf `leaf` (its lock held), in a
    /// slot of this handle's on the leaf's node; post [`Logged::ops`] ahead of the write,
    /// then give it back with [`Self::unlog`] once that doorbell completed (or failed).
    pub(super) async fn log(
        &self,
        leaf: GlobalAddr,
        mask: u16,
        img: &[u8],
    ) -> Result<Logged, ChimeError> {
        let ptr = self.tree.redo_ptr_of(leaf)?;
        let free = {
            let mut slots = self.redo_slots.borrow_mut();
            let i = slots.iter().position(|s| s.node() == leaf.node());
            i.map(|i| slots.swap_remove(i))
        };
        let slot = match free {
            Some(s) => s,
            None => self.tree.alloc_near(leaf, RECORD_MAX as u64).await?,
        };
        let mut rec = [0u8; RECORD_MAX];
        let len = encode(&mut rec, leaf, mask, img);
        Ok(Logged {
            rec,
            len,
            slot,
            slot_word: slot.raw().to_le_bytes(),
            ptr,
        })
    }

    /// The doorbell that carried `l` completed (or failed): its slot is free again.
    pub(super) fn unlog(&self, l: Logged) {
        self.redo_slots.borrow_mut().push(l.slot);
    }

    /// Under the lock of leaf `addr`, just taken over from a dead holder: re-applies the
    /// record its redo pointer names if that record is whole, of a leaf under this same lock
    /// word, and that leaf is not whole (module docs).
    pub(super) async fn redo(&self, addr: GlobalAddr) -> Result<(), ChimeError> {
        let ptr = self.tree.redo_ptr_of(addr)?;
        let qp = self.tree.qp_of(addr)?;
        let mut w = [0u8; 8];
        qp.read(ptr, &mut w).await?;
        let slot = GlobalAddr::from_raw(u64::from_le_bytes(w));
        if slot.is_null() || slot.node() != addr.node() {
            return Ok(());
        }
        let mut rec = [0u8; RECORD_MAX];
        qp.read(slot, &mut rec[..HEADER]).await?;
        if let Some((l, r)) = merge_header(&rec) {
            return self.finish_merge(ptr, slot, l, r).await;
        }
        let Some((leaf, mask)) = header(&rec) else {
            return Ok(());
        };
        if leaf.node() != addr.node() || self.tree.redo_ptr_of(leaf)? != ptr {
            return Ok(());
        }
        let n = HEADER + payload_len(mask);
        qp.read(slot.add(HEADER as u64), &mut rec[HEADER..n])
            .await?;
        let mut img = [0u8; LEAF_LEN];
        qp.read(leaf, &mut img).await?;
        let kept = !self.cfg.prefix_free;
        if leaf_whole(&img, kept) || !apply(&rec[..n], &mut img) || !leaf_whole(&img, kept) {
            // Whole (a stale record), or not the torn write this record describes: left as
            // it is (a leaf that stays torn is reported at the readers' deadline).
            return Ok(());
        }
        qp.write(leaf, &img).await?;
        self.tree.count_leaf_redone();
        Ok(())
    }

    /// Under a lock whose redo pointer `ptr` names the merge record at `slot` (of `r` into
    /// `l`), just taken over from a dead merger: finishes the merge unless it landed whole
    /// (`merge.rs`).
    async fn finish_merge(
        &self,
        ptr: GlobalAddr,
        slot: GlobalAddr,
        l: GlobalAddr,
        r: GlobalAddr,
    ) -> Result<(), ChimeError> {
        if self.cfg.mutation.no_merge_completion
            || l.node() != slot.node()
            || r.node() != slot.node()
            || (self.tree.redo_ptr_of(l)? != ptr && self.tree.redo_ptr_of(r)? != ptr)
        {
            return Ok(());
        }
        let qp = self.tree.qp_of(slot)?;
        let mut rec = std_alloc::vec![0u8; MERGE_RECORD];
        qp.read(slot, &mut rec).await?;
        if !merge_whole(&rec, l, r) {
            return Ok(());
        }
        let mut img = [0u8; LEAF_LEN];
        qp.read(r, &mut img).await?;
        let mut t = Table::empty();
        if leaf_whole(&img, true)
            && decode_run(&img, Run::ALL, &mut t)
                .is_ok_and(|h| super::merge::retired(h.sibling) == Some(l))
        {
            return Ok(());
        }
        let (li, ri) = rec[HEADER..].split_at(LEAF_LEN);
        qp.post(&mut [
            Op::Write {
                remote: l,
                local: li,
            },
            Op::Write {
                remote: r,
                local: ri,
            },
        ])
        .await?;
        self.count(|s| s.merges_finished += 1);
        Ok(())
    }

    /// Takes the lock of leaf `addr` (`seen`: its word when a reader first found the leaf
    /// torn), redoing the leaf if it was taken over from a dead holder; the lock is left held.
    pub(super) async fn lock(
        &self,
        addr: GlobalAddr,
        seen: Option<(u64, Stretch)>,
    ) -> Result<GlobalAddr, ChimeError> {
        let (lock, took_over) = self.tree.lock_leaf(addr, seen).await?;
        if took_over && let Err(e) = self.redo(addr).await {
            self.tree.unlock_leaf(addr, lock, &mut Batch::new()).await?;
            return Err(e);
        }
        Ok(lock)
    }

    /// A reader found leaf `addr` torn for a lease: takes its lock (from the dead writer,
    /// which repairs the leaf) and lets it go.
    pub(super) async fn repair(
        &self,
        addr: GlobalAddr,
        seen: Option<(u64, Stretch)>,
    ) -> Result<(), ChimeError> {
        let lock = self.lock(addr, seen).await?;
        self.tree.unlock_leaf(addr, lock, &mut Batch::new()).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::leaf::{Meta, encode_group_of, encode_groups, encode_leaf};
    use super::*;
    use remora_layouts::chime::Entry;
    use std_alloc::vec::Vec;

    fn meta() -> Meta {
        Meta { sibling: 0, low: 0 }
    }

    #[test]
    fn a_write_torn_anywhere_is_refused_and_its_record_makes_it_whole() {
        let mut t = Table::empty();
        let mut p = LeafPrefix::default();
        let mut old = [0u8; LEAF_LEN];
        encode_leaf(&mut old, &t, meta(), &mut p);
        assert!(leaf_whole(&old, true));
        // An insert that hopped across groups 2 and 3.
        t.e[17] = Entry {
            live: true,
            len: 8,
            key: 5,
            ..Entry::default()
        };
        t.e[24] = Entry {
            live: true,
            len: 8,
            key: 6,
            ..Entry::default()
        };
        let mut new = old;
        encode_groups(&mut new, &t, 0b1100, meta(), &mut p);
        assert!(leaf_whole(&new, true));
        let mask = 1 | 0b1100 << 1;
        let leaf = GlobalAddr::new(0, 0x8000);
        let mut rec = [0u8; RECORD_MAX];
        let n = encode(&mut rec, leaf, mask, &new);
        assert_eq!(n, HEADER + PREFIX_LEN + 2 * GROUP_LEN);
        // Every changed word alone, and every unit alone, leaves a leaf that is not whole.
        let changed: Vec<usize> = (0..LEAF_LEN / 8)
            .filter(|&i| old[i * 8..i * 8 + 8] != new[i * 8..i * 8 + 8])
            .collect();
        assert!(changed.len() > 5);
        for &i in &changed {
            let mut torn = old;
            torn[i * 8..i * 8 + 8].copy_from_slice(&new[i * 8..i * 8 + 8]);
            assert!(!leaf_whole(&torn, true), "word {i} alone passes");
            assert!(apply(&rec[..n], &mut torn));
            assert_eq!(torn, new);
        }
        for (a, b) in units(mask) {
            let mut torn = old;
            torn[a..b].copy_from_slice(&new[a..b]);
            assert!(!leaf_whole(&torn, true), "unit {a}..{b} alone passes");
            let mut rest = new;
            rest[a..b].copy_from_slice(&old[a..b]);
            assert!(!leaf_whole(&rest, true), "all but unit {a}..{b} passes");
        }
        // A value update: one entry and its group's header (stamps unchanged), torn any way
        // (either word of the two alone), redone from its record.
        let s = 24;
        let mut upd = new;
        let mut tu = t;
        tu.e[s].value = *b"newvalue";
        let g = group_offset(3);
        let h = GroupHeader::decode(&new[g..g + GROUP_HEADER_LEN]).unwrap();
        encode_group_of(&mut upd, &tu, 3, &h);
        assert!(leaf_whole(&upd, true));
        let mut erec = [0u8; RECORD_MAX];
        let en = encode(&mut erec, leaf, entry_unit(s), &upd);
        assert_eq!(en, HEADER + slot_offset(s) + ENTRY_LEN - g);
        let changed: Vec<usize> = (0..LEAF_LEN / 8)
            .filter(|&i| new[i * 8..i * 8 + 8] != upd[i * 8..i * 8 + 8])
            .collect();
        assert!(changed.len() >= 2);
        for &i in &changed {
            let mut torn = new;
            torn[i * 8..i * 8 + 8].copy_from_slice(&upd[i * 8..i * 8 + 8]);
            assert!(
                !leaf_whole(&torn, true),
                "word {i} of the update alone passes"
            );
            assert!(apply(&erec[..en], &mut torn));
            assert_eq!(torn, upd);
        }
        // Prefix-free (`ChimeConfig::prefix_free`): the write's groups alone, logged and
        // written without the prefix (the leaf's stays stale). Every changed word alone is
        // refused by the groups alone, and the record makes the leaf whole.
        let mut pf = new;
        pf[..PREFIX_LEN].copy_from_slice(&old[..PREFIX_LEN]);
        assert!(leaf_whole(&pf, false) && !leaf_whole(&pf, true));
        let gmask = 0b1100 << 1;
        let mut grec = [0u8; RECORD_MAX];
        let gn = encode(&mut grec, leaf, gmask, &pf);
        assert_eq!(gn, HEADER + 2 * GROUP_LEN);
        let changed: Vec<usize> = (PREFIX_LEN / 8..LEAF_LEN / 8)
            .filter(|&i| old[i * 8..i * 8 + 8] != pf[i * 8..i * 8 + 8])
            .collect();
        assert!(changed.len() > 5);
        for &i in &changed {
            let mut torn = old;
            torn[i * 8..i * 8 + 8].copy_from_slice(&new[i * 8..i * 8 + 8]);
            assert!(
                !leaf_whole(&torn, false),
                "word {i} alone passes, prefix-free"
            );
            assert!(apply(&grec[..gn], &mut torn));
            assert_eq!(torn, pf);
        }
        for (a, b) in units(gmask) {
            let mut torn = old;
            torn[a..b].copy_from_slice(&pf[a..b]);
            assert!(
                !leaf_whole(&torn, false),
                "unit {a}..{b} alone passes, prefix-free"
            );
        }
        // A record with any word changed is refused.
        for i in 0..n / 8 {
            let mut bad = rec;
            bad[i * 8] ^= 0x40;
            let mut img = old;
            assert!(!apply(&bad[..n], &mut img), "record word {i} torn");
        }
    }
}

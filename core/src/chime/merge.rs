//! Merges: a delete that leaves its leaf R with at most [`MERGE_AT`] keys moves R's keys
//! into its left neighbour L and retires R, so a tree under churn (deletes and inserts over
//! a fixed live set) keeps a bounded number of leaves; `reuse.rs` hands retired leaves to
//! later splits.
//!
//! **The merge** (same memory node only, so one queue pair orders every write): under both
//! locks (taken in the order of their lock words; one lock when both leaves hash to the
//! same word), L and R read whole; if L's sibling is R, neither is retired, and their keys
//! fit one leaf of at most [`MERGE_FILL`] keys, one doorbell WRITEs
//! 1. the *merge record* (`redo.rs`: both new images, hashed) into a slot of the merger's,
//! 2. the record's address into both lock words' redo pointers,
//! 3. L's new image (every key of both, R's sibling as its own),
//! 4. R's *retired* image: no keys, and in place of a sibling, L's address with [`RETIRED`]
//!    set (no leaf address has it: leaves are host memory, the bit marks device memory),
//! 5. R's redo pointer cleared,
//!
//! and releases R's lock; a second doorbell clears L's redo pointer and releases L. Before
//! the doorbell, under both locks, the level-1 entry naming R is removed
//! (`Sherman::unlink_leaf`; R has no entry of its own: no merge), so once it lands no
//! level-1 page and no live leaf names R, and R is retired (`reuse.rs`). A merger that dies
//! after the unlink and before the doorbell leaves R live, reached through L's sibling
//! pointer. Readers no longer link leaves they find missing from level 1 (`read.rs`): the
//! leaf may be merged away by then.
//!
//! **Readers and writers that reach R** after step 4 (by a route or a sibling read before
//! the merge) find it retired and go to L (`read.rs`, `Reach::Retired`); before step 3 they
//! find R as it was. Between 3 and 4 a key of R is in both leaves with the same value (both
//! locks held: nobody changes it), so a lookup finds it in either.
//!
//! **A merger that dies** leaves a whole record named by a redo pointer (per-queue-pair
//! order lands 1 and 2 before any byte of 3 or 4): whoever takes over either lock finishes
//! the merge (`Chime::finish_merge`): unless R is already retired into L (then 3 landed
//! whole before 4, and nothing is left to do), it WRITEs both images again. The pointers
//! are cleared before each lock is released, so a record named by a pointer is always of a
//! merge whose merger held that lock when it died: no later write can have changed L or R
//! (their locks were held), and R cannot have been reused (only the merger retires it; a
//! merge finished by another client leaves R unreachable and not reused: one leaf leaked).
use super::hopscotch::{Table, pack};
use super::leaf::{Meta, Run, encode_leaf};
use super::redo::{MERGE_RECORD, encode_merge};
use super::{Chime, ChimeError};
use crate::fabric::{Endpoint, Op};
use crate::sherman::Batch;
use remora_layouts::GlobalAddr;
use remora_layouts::chime::{Entry, LEAF_LEN, LeafPrefix, SLOTS};
use std_alloc::vec::Vec;

/// A delete that leaves its leaf with at most this many keys merges it.
pub const MERGE_AT: usize = 8;

/// A merge makes a leaf of at most this many keys (room for inserts before it splits).
pub const MERGE_FILL: usize = 40;

/// Marks a retired leaf's sibling word: the rest is the leaf it merged into.
pub(super) const RETIRED: u64 = 1 << 47;

/// The leaf a retired leaf merged into, if the sibling word `sibling` marks it retired.
pub(super) fn retired(sibling: u64) -> Option<GlobalAddr> {
    (sibling & RETIRED != 0).then(|| GlobalAddr::from_raw(sibling & !RETIRED))
}

const FULL: &str = "a doorbell batch holds at most 8 work requests";

impl<'e, E: Endpoint> Chime<'e, E> {
    /// Merges leaf `r` (low key `r_low`, just left sparse by a delete) into its left
    /// neighbour, if it can (module docs); `Ok` whether or not it did.
    pub(super) async fn merge(&self, r: GlobalAddr, r_low: u64) -> Result<(), ChimeError> {
        if r_low == 0 {
            return Ok(());
        }
        self.begin();
        let l = self.locate(r_low - 1).await?.addr;
        if l == r || l.node() != r.node() {
            return Ok(());
        }
        let (pl, pr) = (self.tree.redo_ptr_of(l)?, self.tree.redo_ptr_of(r)?);
        let (first, second) = if pl.raw() <= pr.raw() { (l, r) } else { (r, l) };
        let lock1 = self.lock(first, None).await?;
        let lock2 = if pl == pr {
            lock1
        } else {
            match self.lock(second, None).await {
                Ok(k) => k,
                Err(e) => {
                    self.tree
                        .unlock_leaf(first, lock1, &mut Batch::new())
                        .await?;
                    return Err(e);
                }
            }
        };
        let (lock_l, lock_r) = if first == l {
            (lock1, lock2)
        } else {
            (lock2, lock1)
        };
        if self
            .merge_locked(l, r, r_low, (pl, lock_l), (pr, lock_r))
            .await?
        {
            self.retire(r);
        }
        Ok(())
    }

    /// Releases the locks of `l` and `r` with nothing written.
    async fn release_both(
        &self,
        (l, lock_l): (GlobalAddr, GlobalAddr),
        (r, lock_r): (GlobalAddr, GlobalAddr),
    ) -> Result<(), ChimeError> {
        if lock_l != lock_r {
            self.tree.unlock_leaf(r, lock_r, &mut Batch::new()).await?;
        }
        self.tree.unlock_leaf(l, lock_l, &mut Batch::new()).await
    }

    /// [`Self::merge`] under both locks (released whatever the outcome): true if it merged.
    async fn merge_locked(
        &self,
        l: GlobalAddr,
        r: GlobalAddr,
        r_low: u64,
        (pl, lock_l): (GlobalAddr, GlobalAddr),
        (pr, lock_r): (GlobalAddr, GlobalAddr),
    ) -> Result<bool, ChimeError> {
        let both = ((l, lock_l), (r, lock_r));
        let mut imgs = [[0u8; LEAF_LEN]; 2];
        let plan = self.plan(l, r, r_low, &mut imgs).await;
        let Ok(true) = plan else {
            self.release_both(both.0, both.1).await?;
            return plan;
        };
        // R's level-1 entry goes first (its page locked inside both leaf locks; nothing
        // takes them in the other order): once the merge lands, no page names R. Without an
        // entry of its own (its page's leftmost child, or never linked) R is not merged: a
        // page naming it would forward to L for good, and L could be reused under it.
        match self.tree.unlink_leaf(r_low, r, &[lock_l, lock_r]).await {
            Ok(true) => {}
            other => {
                self.release_both(both.0, both.1).await?;
                return other.map(|_| false);
            }
        }
        if let Err(e) = self.fresh() {
            self.release_both(both.0, both.1).await?;
            return Err(e);
        }
        let slot = match self.merge_slot(r).await {
            Ok(s) => s,
            Err(e) => {
                self.release_both(both.0, both.1).await?;
                return Err(e);
            }
        };
        let mut rec = std_alloc::vec![0u8; MERGE_RECORD];
        encode_merge(&mut rec, l, r, &imgs[0], &imgs[1]);
        let (slot_word, zero) = (slot.raw().to_le_bytes(), [0u8; 8]);
        let mut ops = Batch::new();
        ops.push(Op::Write {
            remote: slot,
            local: &rec,
        })
        .expect(FULL);
        ops.push(Op::Write {
            remote: pl,
            local: &slot_word,
        })
        .expect(FULL);
        if pr != pl {
            ops.push(Op::Write {
                remote: pr,
                local: &slot_word,
            })
            .expect(FULL);
        }
        for (a, img) in [(l, &imgs[0]), (r, &imgs[1])] {
            ops.push(Op::Write {
                remote: a,
                local: img,
            })
            .expect(FULL);
        }
        ops.push(Op::Write {
            remote: pr,
            local: &zero,
        })
        .expect(FULL);
        let posted = self.tree.unlock_leaf(r, lock_r, &mut ops).await;
        drop(ops);
        self.merge_slots.borrow_mut().push(slot);
        posted?;
        if lock_l != lock_r {
            let mut ops = Batch::new();
            ops.push(Op::Write {
                remote: pl,
                local: &zero,
            })
            .expect(FULL);
            self.tree.unlock_leaf(l, lock_l, &mut ops).await?;
        }
        self.count(|s| s.merges += 1);
        Ok(true)
    }

    /// Under both locks: reads `l` and `r` whole and, if `r` can merge into `l` (module
    /// docs), encodes their new images into `imgs` (L's, then R's retired one): true.
    async fn plan(
        &self,
        l: GlobalAddr,
        r: GlobalAddr,
        r_low: u64,
        imgs: &mut [[u8; LEAF_LEN]; 2],
    ) -> Result<bool, ChimeError> {
        let (mut lt, mut rt) = (Table::empty(), Table::empty());
        let (li, ri) = imgs.split_at_mut(1);
        let hl = self
            .read_run(l, Run::ALL, true, true, &mut li[0], &mut lt)
            .await?;
        let hr = self
            .read_run(r, Run::ALL, true, true, &mut ri[0], &mut rt)
            .await?;
        let (Ok(mut lp), Ok(mut rp)) = (LeafPrefix::decode(&li[0]), LeafPrefix::decode(&ri[0]))
        else {
            return Ok(false);
        };
        if hl.sibling != r.raw() || retired(hr.sibling).is_some() || rp.low != r_low {
            return Ok(false);
        }
        let mut all: Vec<Entry> = lt.live().chain(rt.live()).copied().collect();
        if all.len() > MERGE_FILL {
            return Ok(false);
        }
        all.sort_unstable_by_key(|e| e.key);
        let mut parts = 0;
        let mut merged = Table::empty();
        pack(&all, SLOTS, &mut |_, t| {
            parts += 1;
            merged = *t;
        });
        if parts != 1 {
            return Ok(false);
        }
        let meta = Meta {
            sibling: hr.sibling,
            low: lp.low,
        };
        encode_leaf(&mut li[0], &merged, meta, &mut lp);
        let gone = Meta {
            sibling: l.raw() | RETIRED,
            low: r_low,
        };
        encode_leaf(&mut ri[0], &Table::empty(), gone, &mut rp);
        Ok(true)
    }

    /// A merge record's slot of this handle on `near`'s memory node.
    async fn merge_slot(&self, near: GlobalAddr) -> Result<GlobalAddr, ChimeError> {
        let free = {
            let mut slots = self.merge_slots.borrow_mut();
            let i = slots.iter().position(|s| s.node() == near.node());
            i.map(|i| slots.swap_remove(i))
        };
        match free {
            Some(s) => Ok(s),
            None => self.tree.alloc_near(near, MERGE_RECORD as u64).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retired_mark_is_no_leaf_address_and_keeps_the_left_one() {
        let l = GlobalAddr::new(3, 0x1234_5678);
        assert!(retired(l.raw()).is_none());
        assert_eq!(retired(l.raw() | RETIRED), Some(l));
        // Device memory is the only address with the bit: leaves are never there.
        assert!(GlobalAddr::device(3, 8).raw() & RETIRED != 0);
    }
}

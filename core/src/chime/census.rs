//! How CHIME's leaves are filled: a walk along the leaf chain that counts the leaves and
//! their entries, the spread of live keys per leaf, the leaves left empty, and how many
//! leaves a merge of neighbours would leave.
//!
//! CHIME merges no leaves (nor did the authors'): a leaf's low key never changes and a leaf
//! is never freed (`remora_layouts::chime`, the basis of its fence-free sibling validation).
//! Under churn over a fixed live set the leaves therefore only split, and the question a
//! churn run answers with this census is whether their count settles or keeps climbing
//! (`remora bench --churn`, the `keys/leaf`, `min`, `max`, `empty` and `merged` columns).
use super::hopscotch::Table;
use super::leaf::Run;
use super::{Chime, ChimeError};
use crate::fabric::Endpoint;
use remora_layouts::GlobalAddr;
use remora_layouts::chime::LEAF_LEN;

/// Live keys a fresh 64-slot table always holds (over deterministic random key sets,
/// `hopscotch::tests::pack_rebuilds_in_place_whatever_a_fresh_table_holds`): neighbouring
/// leaves whose keys together are at most this many could be one leaf.
pub const MERGE_FILL: u64 = 32;

/// The spread of live keys over CHIME's leaves ([`Chime::leaf_spread`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeafSpread {
    /// Leaves in the chain.
    pub leaves: u64,
    /// Live entries in them.
    pub entries: u64,
    /// Leaves with no live entry (each still covers its range: nothing frees it).
    pub empty: u64,
    /// Fewest live entries of a leaf.
    pub min: u64,
    /// Most live entries of a leaf.
    pub max: u64,
    /// Leaves left if every run of neighbours whose keys fit [`MERGE_FILL`] were one leaf
    /// (greedy, left to right, parents ignored): what a merge on delete could bring the
    /// count down to.
    pub merged: u64,
}

impl LeafSpread {
    /// Adds a leaf of `live` entries (the chain walked left to right). `run` is the live
    /// entries of the current merge run.
    fn add(&mut self, live: u64, run: &mut u64) {
        if self.leaves == 0 {
            self.min = live;
        }
        self.leaves += 1;
        self.entries += live;
        self.empty += u64::from(live == 0);
        self.min = self.min.min(live);
        self.max = self.max.max(live);
        if self.merged == 0 || *run + live > MERGE_FILL {
            self.merged += 1;
            *run = live;
        } else {
            *run += live;
        }
    }
}

impl<E: Endpoint> Chime<'_, E> {
    /// Walks the leaf chain from the leftmost leaf, READing every leaf whole: the spread of
    /// its live keys (not atomic against concurrent writers).
    pub async fn leaf_spread(&self) -> Result<LeafSpread, ChimeError> {
        // The leftmost leaf's low key is 0: the chain from it is every leaf.
        self.begin();
        let mut at = self.locate(0).await?.addr;
        let mut leaf = [0u8; LEAF_LEN];
        let mut t = Table::empty();
        let mut s = LeafSpread::default();
        let mut run = 0u64;
        loop {
            // Each leaf read is an attempt of its own (`reuse.rs`): the walk is a census,
            // not atomic.
            self.begin();
            let h = self
                .read_run(at, Run::ALL, false, false, &mut leaf, &mut t)
                .await?;
            if super::merge::retired(h.sibling).is_some() {
                return Err(crate::sherman::ShermanError::Unsettled {
                    what: "chime: the census met a leaf retired by a concurrent merge",
                    at,
                    waited_ns: 0,
                });
            }
            s.add(t.live().count() as u64, &mut run);
            if h.sibling == 0 {
                return Ok(s);
            }
            at = GlobalAddr::from_raw(h.sibling);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_counts_empty_leaves_extremes_and_merge_runs() {
        let mut s = LeafSpread::default();
        let mut run = 0;
        for live in [20, 10, 0, 3, 40, 30, 2] {
            s.add(live, &mut run);
        }
        assert_eq!((s.leaves, s.entries, s.empty), (7, 105, 1));
        assert_eq!((s.min, s.max), (0, 40));
        // Runs: 20+10+0 = 30 (a 3 would make 33), 3, 40, 30+2.
        assert_eq!(s.merged, 4);
    }
}

//! Reclaiming nodes the tree no longer links while one-sided readers may still hold them.
//!
//! Offloading clients (and lock-free server threads) READ nodes without telling the server,
//! so a node the server replaced (split, copied on write) or dropped (condensed away) may
//! still be on some reader's frontier. The server therefore reclaims by epochs:
//!
//! - The superblock holds the epoch ([`META_EPOCH_OFFSET`]), written only here, growing by
//!   one after every [`DEFAULT_BATCH`] retirements (so it moves rarely).
//! - A node the tree stopped linking while the epoch was `e` is retired with tag `e`, and
//!   written again (reused for any node) only once the epoch is `e + REUSE_GRACE` or more.
//! - Every node image carries its birth epoch, the epoch when it was last written fresh, in
//!   the high bits of its version word ([`remora_layouts::catfish::VERSION_SEQ_BITS`]; in-place
//!   rewrites keep it), covered by the image's CRC.
//! - A reader takes `e0` from a superblock READ that completed before its traversal's first
//!   READ was posted (the previous search's, or the failed attempt's), and restarts if any
//!   node image it accepts was born at `e0 + REUSE_GRACE` or later
//!   ([`Node::born_after_grace`](remora_layouts::catfish::Node::born_after_grace)).
//!
//! Why a reader never takes a reused node for the one it wanted: every pointer it follows
//! came from an image of a node that was linked at some moment after its traversal began
//! (induction from the root: a retired node is never written again before reuse, so its last
//! image names children that were linked when it was retired). So the node the pointer meant
//! was linked after the traversal began, hence retired (if at all) with a tag `e >= e0`, and
//! its memory was written again only at epoch `e + REUSE_GRACE >= e0 + REUSE_GRACE` or later:
//! an image of the new occupant that passes the CRC (all of it from one write, in whatever
//! order the READ's segments landed) carries that birth, and the reader restarts. A torn mix
//! of old and new occupant fails the CRC and is re-read, as before. A reader that merely
//! meets a node born late (a fresh split) restarts needlessly; that takes two epoch steps
//! (`2 x` [`DEFAULT_BATCH`] retirements) during one traversal, or an idle client's stale `e0`
//! (one restart, after which its `e0` is fresh).
//!
//! Nothing here is persistent but the epoch. A server that restarts
//! ([`super::tree::Tree::recover`]) finds every node its previous life retired or had ready
//! (and all other free memory of its arenas, [`super::arenas`]) free again and reuses it at
//! once, without a grace period; in exchange it first moves the epoch `REUSE_GRACE + 1`
//! past the persisted one, so that every node it writes fresh is born after the grace
//! period of any epoch a reader of the previous life can hold.
use super::CatfishError;
use crate::server::LocalRegion;
#[cfg(doc)]
use remora_layouts::catfish::META_EPOCH_OFFSET;
use remora_layouts::catfish::REUSE_GRACE;
use std_alloc::collections::VecDeque;
use std_alloc::vec::Vec;

/// Retirements per epoch step unless the tree is told otherwise.
pub const DEFAULT_BATCH: u64 = 64;

/// The server's reclamation state for one tree.
#[derive(Debug)]
pub(super) struct Reclaim {
    epoch: u64,
    batch: u64,
    /// Retired in the current epoch.
    in_epoch: u64,
    /// (tag, offset) in retirement order, so tags never decrease.
    limbo: VecDeque<(u64, u64)>,
    /// Nodes past their grace period: handed out before the arenas.
    ready: Vec<u64>,
    /// Nodes no reader ever reached (an aborted transaction's; with no concurrent readers,
    /// dropped ones too): handed out first.
    spare: Vec<u64>,
    retired: u64,
    reused: u64,
}

impl Default for Reclaim {
    fn default() -> Self {
        Reclaim {
            epoch: 0,
            batch: DEFAULT_BATCH,
            in_epoch: 0,
            limbo: VecDeque::new(),
            ready: Vec::new(),
            spare: Vec::new(),
            retired: 0,
            reused: 0,
        }
    }
}

impl Reclaim {
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The epoch a recovered superblock holds.
    pub(super) fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    pub(super) fn set_batch(&mut self, batch: u64) {
        self.batch = batch.max(1);
    }

    pub(super) fn retired(&self) -> u64 {
        self.retired
    }

    pub(super) fn reused(&self) -> u64 {
        self.reused
    }

    /// (nodes in their grace period, nodes ready for reuse).
    pub(super) fn waiting(&self) -> (u64, u64) {
        (self.limbo.len() as u64, self.ready())
    }

    pub(super) fn ready(&self) -> u64 {
        (self.ready.len() + self.spare.len()) as u64
    }

    /// A node to write fresh now, if one is ready.
    pub(super) fn take(&mut self) -> Option<u64> {
        if let Some(off) = self.spare.pop() {
            return Some(off);
        }
        let off = self.ready.pop()?;
        self.reused += 1;
        Some(off)
    }

    /// A node no reader can hold (carved for an aborted transaction, or dropped with no
    /// concurrent readers): ready at once.
    pub(super) fn give_back(&mut self, off: u64) {
        self.spare.push(off);
    }

    /// Retires the node at `off`, which the published tree no longer links; steps the
    /// epoch (the superblock word at `epoch_word`) after every batch of retirements.
    pub(super) fn retire(
        &mut self,
        region: &dyn LocalRegion,
        epoch_word: u64,
        off: u64,
    ) -> Result<(), CatfishError> {
        self.limbo.push_back((self.epoch, off));
        self.retired += 1;
        self.in_epoch += 1;
        if self.in_epoch >= self.batch {
            self.in_epoch = 0;
            self.epoch += 1;
            region.store_u64(epoch_word, self.epoch)?;
            region.persist(epoch_word, 8);
            while let Some(&(tag, off)) = self.limbo.front() {
                if tag.saturating_add(REUSE_GRACE) > self.epoch {
                    break;
                }
                self.limbo.pop_front();
                self.ready.push(off);
            }
        }
        Ok(())
    }
}

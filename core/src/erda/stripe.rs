//! Stripe version words: how a one-sided reader learns that a neighborhood READ may have
//! caught buckets in the middle of a change of their key words.
//!
//! The fabric promises only that aligned 8-byte words are read whole; the words of one READ
//! may observe memory in any order. A bucket's metadata word changes atomically, but filling
//! a bucket (control word and key) and moving an entry (hopscotch displacement) change
//! several words. So every such change runs inside a *section* on the version words of the
//! stripes ([`STRIPE_BUCKETS`](remora_layouts::erda::STRIPE_BUCKETS) buckets each) of the
//! buckets it touches: the server's CPU makes each word odd before the first change and even
//! again after the last one (a seqlock; the server is the only writer, its stores become
//! visible in program order).
//!
//! A validating reader posts, in one doorbell on one queue pair, READ of the two stripe words
//! covering its neighborhood, READ of the neighborhood, READ of the two words again. Ops of a
//! queue pair take effect in order, each after the previous completed, so if both reads of
//! the words agree and are even, no section overlapped the neighborhood READ: every bucket's
//! control word and key are whole, and each metadata word is some value it held during the
//! READ. Metadata-only changes (grants on an existing key) need no section.
//!
//! The words are not persisted: recovery, which runs before any reader connects, [`reset`]s
//! them (a crash inside a section leaves them odd).
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use remora_layouts::erda::Superblock;

/// Zeroes every stripe word (format and recovery).
pub(super) fn reset(region: &dyn LocalRegion, sb: &Superblock) -> Result<(), FabricError> {
    for s in 0..sb.stripes() {
        region.store_u64(sb.stripe_word_off(s), 0)?;
    }
    Ok(())
}

/// An open section on at most two stripes.
pub(super) struct Section {
    words: [Option<u64>; 2],
}

impl Section {
    /// Makes the stripe words of `buckets` (at most two distinct stripes) odd.
    pub(super) fn enter(
        region: &dyn LocalRegion,
        sb: &Superblock,
        buckets: &[u64],
    ) -> Result<Section, FabricError> {
        let mut words = [None; 2];
        for &b in buckets {
            let off = sb.stripe_word_off(sb.stripe_of(b));
            if words.contains(&Some(off)) {
                continue;
            }
            let slot = words
                .iter_mut()
                .find(|w| w.is_none())
                .ok_or(FabricError::Unsupported {
                    what: "erda: a bucket change spans more than two stripes",
                })?;
            *slot = Some(off);
            // Strictly increasing, odd.
            let v = region.load_u64(off)?;
            let odd = if v & 1 == 0 { v + 1 } else { v + 2 };
            region.store_u64(off, odd & (u64::MAX >> 1))?;
        }
        Ok(Section { words })
    }

    /// Makes the words even again (one past the odd value): the change is complete.
    pub(super) fn leave(self, region: &dyn LocalRegion) -> Result<(), FabricError> {
        for off in self.words.into_iter().flatten() {
            // Strictly increasing, even.
            let v = region.load_u64(off)?;
            region.store_u64(off, ((v | 1) + 1) & (u64::MAX >> 1))?;
        }
        Ok(())
    }
}

//! Bulk loading CHIME: its leaves built from a sorted key set and written at memory speed,
//! under Sherman's internal levels (`sherman/bulk.rs`, `Sherman::bulk_levels`), so that a
//! run whose load is not measured starts from the tree its inserts would have grown without
//! inserting every key.
//!
//! The authors load by inserting (`test/ycsb_test.cpp`, `thread_load`: each loader thread
//! inserts its share of the YCSB load file, random keys); the tree that leaves has leaves
//! about [`INSERT_FILL_PERCENT`] full (a leaf splits when a hop fails, into halves) and
//! internal pages about ln 2 full ([`INTERNAL_FILL_PERCENT`]). The bulk load builds a tree of
//! that shape: leaves in key order, each a hopscotch table filled by CHIME's own insert
//! (`hopscotch::Table::insert`, hops included) with the next keys until it holds the fill's
//! keys or a key finds no room (the next leaf starts with it), so every entry is in its
//! home's neighbourhood and every hop bitmap is what inserts leave. Each leaf is encoded as a
//! split encodes a new leaf (`leaf::encode_leaf`: every group at stamp 1, the vacancy bitmap
//! and low key in its prefix), its low key its first key (the first leaf's 0), its sibling
//! the next leaf (the last's none). Leaves are placed round robin over the memory nodes, as
//! `alloc_leaf` places them, in chunks written whole ([`crate::bulk::ChunkWriter`]); the
//! level-1 pages and those above are Sherman's, built by Sherman's builder, which publishes
//! the root in place of the level-1 root the tree was created with. Readers, writers, locks
//! and redo see an ordinary tree: nothing in it says it was bulk-loaded.
//!
//! With hopscotch leaves off the tree is Sherman's, and so is its bulk load.
use super::hopscotch::{Table, dist};
use super::leaf::{Meta, Run, encode_leaf};
use super::{Chime, ChimeError, key_of};
use crate::bulk::{ChunkWriter, WarmStats};
use crate::fabric::Endpoint;
use crate::sherman::{BulkEntry, BulkStats, ShermanError};
use remora_layouts::chime::{LEAF_LEN, LeafPrefix, MAX_VALUE, SLOTS, home};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// Leaf fill that random inserts leave, per cent of a leaf's 64 slots: measured by
/// `poller/tests/chime_bulk.rs` (`--nocapture`, release): 20,000 random keys inserted leave
/// 512 leaves, 39.1 keys a leaf (61.0%; 32 to 47 a leaf); the same keys bulk-loaded at 60%,
/// 527 leaves of 38.0 (the last leaf 14), within the test's 10%.
pub const INSERT_FILL_PERCENT: u8 = 60;

/// Internal page fill that random inserts leave, per cent: ln 2 (Yao, "On random 2-3
/// trees", 1978), as a B-link tree's pages split in halves.
pub const INTERNAL_FILL_PERCENT: u8 = 69;

/// What a bulk load wrote beyond Sherman's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChimeBulkStats {
    /// Leaves, internal pages, height, bytes and chunks (as Sherman's loader counts them).
    pub tree: BulkStats,
    /// Entries that ended away from their home slot (moved by a hop, or placed past a
    /// taken home): inserts leave the same.
    pub displaced: u64,
    /// Leaves closed early because a key found no room (before the fill).
    pub no_room: u64,
}

impl<'e, E: Endpoint> Chime<'e, E> {
    /// Bulk-loads `n` entries into this tree, which must be empty (just created: a level-1
    /// root over one empty leaf) and not yet opened by any other handle (they would keep the
    /// old root). `entry(i, value)` gives the `i`-th key (8-byte big-endian, strictly
    /// ascending in `i`) and writes its value into `value` (8 bytes), returning its length.
    /// Leaves hold `leaf_fill` per cent of their 64 slots (or fewer: module docs), internal
    /// pages `internal_fill`. Without hopscotch leaves: Sherman's bulk load at `leaf_fill`.
    pub async fn bulk_load(
        &self,
        n: u64,
        leaf_fill: u8,
        internal_fill: u8,
        entry: &mut BulkEntry<'_>,
    ) -> Result<ChimeBulkStats, ChimeError> {
        if !self.cfg.hopscotch {
            let tree = self.tree.bulk_load(n, leaf_fill, entry).await?;
            return Ok(ChimeBulkStats {
                tree,
                ..ChimeBulkStats::default()
            });
        }
        let bad = |what| ShermanError::Bulk { what };
        let empty = bad("bulk load needs an empty, freshly created tree");
        let (old_root, first) = self.tree.bulk_root_over_leaf().await?.ok_or(empty)?;
        let mut leaf = [0u8; LEAF_LEN];
        let mut t = Table::empty();
        self.begin();
        let h = self
            .read_run(first, Run::ALL, false, false, &mut leaf, &mut t)
            .await?;
        if h.sibling != 0 || t.live().next().is_some() {
            return Err(bad("bulk load needs an empty, freshly created tree"));
        }
        let mut st = ChimeBulkStats::default();
        if n == 0 {
            return Ok(st);
        }
        let ep = self.tree.endpoint();
        let mut w = ChunkWriter::new(ep).await?;
        // Leaves round robin over the memory nodes, as `alloc_leaf` spreads them.
        let mut next_node = 0usize;
        macro_rules! place {
            () => {{
                next_node += 1;
                w.reserve(ep, next_node - 1, LEAF_LEN as u64).await?
            }};
        }
        let per_leaf = (SLOTS * leaf_fill.min(100) as usize / 100).max(1);
        let max = self.cfg.sherman.value_size.min(MAX_VALUE);
        let mut value = vec![0u8; max];
        // (low key, address) of every leaf.
        let mut level: Vec<(u64, u64)> = Vec::with_capacity((n as usize).div_ceil(per_leaf));
        let mut img = [0u8; LEAF_LEN];
        let (mut addr, mut low, mut held) = (place!(), 0u64, 0usize);
        t = Table::empty();
        let mut prev: Option<u64> = None;
        for i in 0..n {
            let (k, len) = entry(i, &mut value[..]);
            let key = key_of(&k)?;
            if prev.is_some_and(|p| p >= key) {
                return Err(bad("bulk load keys are not strictly ascending"));
            }
            prev = Some(key);
            let v = value
                .get(..len)
                .ok_or(ShermanError::ValueTooLong { len, max })?;
            let mut val = [0u8; MAX_VALUE];
            val[..len].copy_from_slice(v);
            let fits = held < per_leaf && {
                let free = t.vacancy();
                t.insert(key, len as u8, val, free).is_ok()
            };
            if fits {
                held += 1;
                continue;
            }
            if held < per_leaf {
                st.no_room += 1;
            }
            // The leaf is closed: the next one starts with this key.
            let sibling = place!();
            st.displaced += displaced(&t);
            let meta = Meta {
                sibling: sibling.raw(),
                low,
            };
            encode_leaf(&mut img, &t, meta, &mut LeafPrefix::default());
            w.fill(ep, addr, &img).await?;
            level.push((low, addr.raw()));
            (addr, low, held) = (sibling, key, 1);
            t = Table::empty();
            let free = t.vacancy();
            // A key always fits an empty table.
            t.insert(key, len as u8, val, free)
                .map_err(|_| bad("a key found no room in an empty leaf"))?;
        }
        st.displaced += displaced(&t);
        let meta = Meta { sibling: 0, low };
        encode_leaf(&mut img, &t, meta, &mut LeafPrefix::default());
        w.fill(ep, addr, &img).await?;
        level.push((low, addr.raw()));
        st.tree.keys = n;
        st.tree.leaves = level.len() as u64;
        self.tree
            .bulk_levels(
                w,
                level,
                internal_fill,
                next_node,
                1,
                old_root,
                &mut st.tree,
            )
            .await?;
        Ok(st)
    }

    /// Fills this compute node's index cache as the clients' inserts of the same keys would
    /// have ([`crate::sherman::Sherman::warm_cache`]: the level-1 pages, and with
    /// `cache_upper_levels` those above, top down until the cache's capacity). The hotspot
    /// cache stays empty: inserts do not fill it (only lookups that find their key do).
    pub async fn warm_cache(&self) -> Result<WarmStats, ChimeError> {
        self.tree.warm_cache().await
    }
}

/// Live entries of `t` away from their home slot.
fn displaced(t: &Table) -> u64 {
    (0..SLOTS)
        .filter(|&s| t.e[s].live && dist(home(t.e[s].key), s) != 0)
        .count() as u64
}

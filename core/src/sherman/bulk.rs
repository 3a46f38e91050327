//! Bulk loading: a tree's pages built from a sorted key set and written at memory speed, as
//! the paper's evaluation loads its trees ("1 billion keys bulk-loaded 80% full",
//! seeds/002; seeds/INDEX.md).
//!
//! The image is a B-link tree of the shape inserts grow, written bottom-up: leaves filled to
//! `fill_percent` of their capacity (entries in the first slots, every other slot free, all
//! at entry version 1 and bound to page version 1, sealed, exactly as `encode_leaf` writes a
//! split's pages), each linked to its right sibling, with fences `[first key, next leaf's
//! first key)`, the first leaf's low fence 0 and the last's high fence infinity; above them
//! internal levels, each page a leftmost child plus separators that are its children's low
//! fences (also filled to `fill_percent`), sealed with the page checksum, up to a single
//! root. Lock words and redo pointers stay zero (nobody holds a lock). Pages are placed
//! round robin over the memory nodes in chunks taken from the region cursor
//! ([`crate::bulk::ChunkWriter`]: one FETCH_AND_ADD and one WRITE per chunk); the new root is
//! published with one CMP_AND_SWP on the descriptor's root word, from the empty root leaf the
//! tree was created with. Readers, writers, the lock and redo machinery and the repairs see
//! an ordinary tree: nothing in it says it was bulk-loaded.
use super::open::D_ROOT;
use super::tree::{Sherman, encode_leaf, key_of};
use super::{ShermanConfig, ShermanError};
use crate::bulk::ChunkWriter;
use crate::fabric::{Endpoint, QueuePair};
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{
    KEY_INFINITY, PageHeader, Slot, leaf_slot, seal, set_internal_entry,
};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// Leaf fill of the paper's evaluation (seeds/002: "bulk-loaded 80% full").
pub const PAPER_FILL_PERCENT: u8 = 80;

/// The `i`-th entry of a bulk load: writes the value into the buffer, returns the key
/// (8-byte big-endian) and the value's length.
pub type BulkEntry<'a> = dyn FnMut(u64, &mut [u8]) -> ([u8; 8], usize) + 'a;

/// What a bulk load built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkStats {
    /// Keys loaded.
    pub keys: u64,
    /// Leaf pages written.
    pub leaves: u64,
    /// Internal pages written, all levels.
    pub internal_pages: u64,
    /// Levels above the leaves.
    pub height: u8,
    /// Bytes written.
    pub bytes: u64,
    /// Allocator chunks the load took.
    pub chunks: u64,
}

/// Entries per page at `fill_percent` of `capacity` (at least `min`).
fn per_page(capacity: usize, fill_percent: u8, min: usize) -> usize {
    (capacity * fill_percent.min(100) as usize / 100).clamp(min, capacity.max(min))
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// Bulk-loads `n` entries into this tree, which must be empty (just created, its root
    /// an empty leaf) and not yet opened by any other handle (they would keep the old root).
    /// `entry(i, value)` gives the `i`-th key (8-byte big-endian, strictly ascending in
    /// `i`) and writes its value into `value` (the tree's value size), returning the
    /// value's length. Leaves and internal pages are filled to `fill_percent` of their
    /// capacity (the paper's 80: [`PAPER_FILL_PERCENT`]).
    pub async fn bulk_load(
        &self,
        n: u64,
        fill_percent: u8,
        entry: &mut BulkEntry<'_>,
    ) -> Result<BulkStats, ShermanError> {
        let bad = |what| ShermanError::Bulk { what };
        let mut buf = self.page();
        self.refresh_root().await?;
        let old_root = self.root.get();
        let h = self.read_page(old_root, &mut buf).await?;
        let bind = self.bind(&h);
        let empty = h.is_leaf()
            && h.sibling == 0
            && (0..self.g.leaf_capacity())
                .all(|s| !matches!(leaf_slot(&buf, &self.g, s, bind), Ok(Slot::Live { .. })));
        self.give(buf);
        if !empty {
            return Err(bad("bulk load needs an empty, freshly created tree"));
        }
        let mut stats = BulkStats::default();
        if n == 0 {
            return Ok(stats);
        }
        let mut w = ChunkWriter::new(self.ep).await?;
        let page_bytes = self.g.page_size as u64;
        // Pages round robin over the memory nodes, as `alloc_page` spreads them.
        let mut next_node = 0usize;
        macro_rules! place {
            ($w:expr) => {{
                next_node += 1;
                $w.reserve(self.ep, next_node - 1, page_bytes).await?
            }};
        }
        let per_leaf = per_page(self.g.leaf_capacity(), fill_percent, 1);
        let mut value = vec![0u8; self.g.value_size];
        let mut img = vec![0u8; self.g.page_size];
        // (low fence, address) of every page of the level being built.
        let mut level: Vec<(u64, u64)> = Vec::with_capacity((n as usize).div_ceil(per_leaf));
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::with_capacity(per_leaf);
        let mut next = Self::bulk_entry(entry, 0, &mut value)?;
        let mut addr = place!(w);
        let mut i = 0u64;
        let mut prev_key = None;
        while i < n {
            entries.clear();
            let low = if i == 0 { 0 } else { next.0 };
            while entries.len() < per_leaf && i < n {
                if prev_key.is_some_and(|p| p >= next.0) {
                    return Err(bad("bulk load keys are not strictly ascending"));
                }
                prev_key = Some(next.0);
                entries.push(core::mem::take(&mut next));
                i += 1;
                if i < n {
                    next = Self::bulk_entry(entry, i, &mut value)?;
                }
            }
            let (high, sibling) = if i < n {
                (next.0, place!(w))
            } else {
                (KEY_INFINITY, GlobalAddr::NULL)
            };
            let check = self.cfg.page_check;
            encode_leaf(
                &mut img,
                &self.g,
                check,
                1,
                low,
                high,
                sibling.raw(),
                &entries,
            );
            w.fill(self.ep, addr, &img).await?;
            level.push((low, addr.raw()));
            addr = sibling;
        }
        stats.keys = n;
        stats.leaves = level.len() as u64;
        self.bulk_levels(w, level, fill_percent, next_node, 0, old_root, &mut stats)
            .await?;
        Ok(stats)
    }

    /// Builds the internal levels over `level` (the (low key, address) of each page below,
    /// left to right: the first low key 0) and publishes their root; the bulk loaders'
    /// common top (Sherman's leaves, CHIME's `chime/bulk.rs`). Each page a leftmost child
    /// plus separators that are its children's low keys, filled to `fill_percent`, sealed,
    /// linked to its right sibling, with fences `[first child's low, next page's first
    /// child's low)`; levels until one page is left and at least `min_height` levels are
    /// built (CHIME's leaves are not Sherman pages: its root is at least level 1). Pages are
    /// placed from node `next_node` on, round robin, through `w`, which is then finished;
    /// the root replaces `old_root` in the descriptor by one CMP_AND_SWP. Fills in `stats`'
    /// internal pages, height, chunks and bytes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn bulk_levels(
        &self,
        mut w: ChunkWriter,
        mut level: Vec<(u64, u64)>,
        fill_percent: u8,
        mut next_node: usize,
        min_height: u8,
        old_root: GlobalAddr,
        stats: &mut BulkStats,
    ) -> Result<(), ShermanError> {
        let bad = |what| ShermanError::Bulk { what };
        if level.is_empty() {
            return Err(bad("bulk load of no pages"));
        }
        let page_bytes = self.g.page_size as u64;
        macro_rules! place {
            ($w:expr) => {{
                next_node += 1;
                $w.reserve(self.ep, next_node - 1, page_bytes).await?
            }};
        }
        let mut img = vec![0u8; self.g.page_size];
        // Internal levels: a leftmost child and `per - 1` separators per page.
        let per = per_page(self.g.internal_capacity() + 1, fill_percent, 2);
        let mut height = 0u8;
        while level.len() > 1 || height < min_height {
            height += 1;
            let pages = level.len().div_ceil(per);
            let mut up: Vec<(u64, u64)> = Vec::with_capacity(pages);
            let mut addr = place!(w);
            for (p, kids) in level.chunks(per).enumerate() {
                let (high, sibling) = if p + 1 < pages {
                    (level[(p + 1) * per].0, place!(w))
                } else {
                    (KEY_INFINITY, GlobalAddr::NULL)
                };
                img.fill(0);
                let ph = PageHeader {
                    front_version: 1,
                    meta: PageHeader::pack_meta(height, false, kids.len() - 1),
                    sibling: sibling.raw(),
                    low_fence: kids[0].0,
                    high_fence: high,
                    leftmost: kids[0].1,
                    ..Default::default()
                };
                ph.encode(&mut img);
                for (j, &(k, c)) in kids[1..].iter().enumerate() {
                    set_internal_entry(&mut img, &self.g, j, k, c);
                }
                seal(&mut img, &self.g);
                w.fill(self.ep, addr, &img).await?;
                up.push((kids[0].0, addr.raw()));
                addr = sibling;
            }
            stats.internal_pages += pages as u64;
            level = up;
        }
        stats.height = height;
        stats.chunks = w.chunks;
        stats.bytes = w.finish(self.ep).await?;
        let root = GlobalAddr::from_raw(level[0].1);
        let qp = self.qp(self.desc)?;
        let old = qp
            .cas(self.desc.add(D_ROOT), old_root.raw(), root.raw())
            .await?;
        if old != old_root.raw() {
            return Err(bad("the tree's root changed during the bulk load"));
        }
        self.root.set(root);
        Ok(())
    }

    /// The root and its one leaf if the tree is as `create_over_leaf` made it (a level-1
    /// root, no separator, no sibling, over one leaf), else `None`: CHIME's bulk load checks
    /// the leaf itself (its own format).
    pub(crate) async fn bulk_root_over_leaf(
        &self,
    ) -> Result<Option<(GlobalAddr, GlobalAddr)>, ShermanError> {
        let mut buf = self.page();
        let r = async {
            self.refresh_root().await?;
            let root = self.root.get();
            let h = self.read_page(root, &mut buf).await?;
            Ok(
                (!h.is_leaf() && h.level() == 1 && h.count() == 0 && h.sibling == 0)
                    .then(|| (root, GlobalAddr::from_raw(h.leftmost))),
            )
        }
        .await;
        self.give(buf);
        r
    }

    fn bulk_entry(
        entry: &mut BulkEntry<'_>,
        i: u64,
        value: &mut [u8],
    ) -> Result<(u64, Vec<u8>), ShermanError> {
        let (k, len) = entry(i, value);
        let v = value.get(..len).ok_or(ShermanError::ValueTooLong {
            len,
            max: value.len(),
        })?;
        Ok((key_of(&k)?, v.to_vec()))
    }

    /// The geometry's leaf entries at `fill_percent` (for sizing a load).
    pub fn bulk_leaf_entries(cfg: &ShermanConfig, fill_percent: u8) -> Result<usize, ShermanError> {
        let g = remora_layouts::sherman::Geometry::new(cfg.page_size, cfg.value_size)
            .map_err(ShermanError::Config)?;
        Ok(per_page(g.leaf_capacity(), fill_percent, 1))
    }
}

//! Warming a compute node's index cache after a bulk load.
//!
//! The papers' clients load their keys by inserting them (River861/Sherman and
//! dmemsys/SMART `test/ycsb_test.cpp`: each client thread inserts its share before the
//! measured epochs), and every level-1 page (with `cache_upper_levels` every internal page)
//! an insert's descent reads goes into its compute node's index cache (`read.rs`), so the run
//! starts with each cache holding the level-1 pages, as far as its capacity goes. A bulk load
//! ([`Sherman::bulk_load`]) writes the image without any client descending it, so every
//! cache would start cold, and a short warm-up fills only the pages its keys reach: the
//! full-scale report's Sherman lookups (2M keys) took 2.6 round trips where a cached
//! level-1 page makes it one. [`Sherman::warm_cache`] fills the cache as the load would
//! have: it READs the internal pages top down, level by level (each once, through the fabric,
//! verified as a descent verifies it), and keeps those the cache holds until the next would
//! not fit its capacity (the cache then holds a contiguous key range of them).
use super::{Sherman, ShermanError};
use crate::bulk::WarmStats;
use crate::fabric::Endpoint;
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::internal_entry;
use std_alloc::vec::Vec;

impl<E: Endpoint> Sherman<'_, E> {
    /// Fills this compute node's index cache with the tree's level-1 pages (and, with
    /// `cache_upper_levels`, the pages above them), as the clients' inserts of the same keys
    /// would have (see the module doc); returns what it read and kept. Meant for a freshly
    /// bulk-loaded tree before its clients run (one handle per compute node); on a tree in
    /// use it is correct too (cached pages are checked by the leaves' fences) but reads a
    /// snapshot that may already be stale. Without an index cache it reads nothing.
    pub async fn warm_cache(&self) -> Result<WarmStats, ShermanError> {
        let mut st = WarmStats::default();
        if !self.node.enabled() {
            return Ok(st);
        }
        self.refresh_root().await?;
        let mut level: Vec<GlobalAddr> = Vec::new();
        let mut next: Vec<GlobalAddr> = Vec::new();
        level.push(self.root.get());
        let mut buf = self.page();
        let r = async {
            while !level.is_empty() {
                for &addr in &level {
                    let h = self.read_page(addr, &mut buf).await?;
                    st.read += 1;
                    if h.is_leaf() {
                        // The root is a leaf: nothing to cache.
                        return Ok(());
                    }
                    if h.level() == 1 || self.node.caches_upper() {
                        match self.node.cache_keep(&h, &buf) {
                            None => {
                                st.full = true;
                                return Ok(());
                            }
                            Some(kept) => st.cached += u64::from(kept),
                        }
                    }
                    if h.level() > 1 {
                        let corrupt = |why| ShermanError::Corrupt { addr, why };
                        next.push(GlobalAddr::from_raw(h.leftmost));
                        for i in 0..h.count() {
                            let (_, child) = internal_entry(&buf, &self.g, i).map_err(corrupt)?;
                            next.push(GlobalAddr::from_raw(child));
                        }
                    }
                }
                st.levels += 1;
                core::mem::swap(&mut level, &mut next);
                next.clear();
            }
            Ok(())
        }
        .await;
        self.give(buf);
        r.map(|()| st)
    }
}

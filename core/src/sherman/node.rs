//! The state Sherman keeps per compute node, shared by every client thread's handle of it
//! (seeds/002 §4.2–4.3: the local lock table of the hierarchical on-chip lock, with hand-over
//! between the node's threads, and the index cache are per compute node): one
//! [`ShermanNode`] per tree per compute node, each handle holding its own endpoint and an
//! `Arc` of it ([`super::Sherman::open_on`]).
//!
//! Concurrency: the local lock table is a fixed array made with the node's state, split into
//! buckets by lock word, each a try-lock held between awaits only ([`LocalLocks`]); the index cache sits behind a sharded try-RW guard
//! (lookups share it; fills and invalidations are skipped while it is busy, which is correct
//! because a cached page is always checked against the leaf's fences). Nothing blocks a
//! thread.
use super::cache::{IndexCache, Route};
use super::local::{BUCKETS, LocalLocks};
use super::{Sherman, ShermanConfig, ShermanError};
use crate::fabric::Endpoint;
use crate::smart::shared::TryRw;
use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{Geometry, PageHeader};
use std_alloc::sync::Arc;

/// Bounded attempts at the cache's exclusive guard by [`ShermanNode::cache_keep`].
const GUARD_TRIES: u32 = 1024;

/// Per-compute-node state of one Sherman tree. `Sync`: share it (in an `Arc`) among the
/// handles of every client thread of one compute node.
pub struct ShermanNode {
    pub(crate) locks: LocalLocks,
    cache: TryRw<IndexCache>,
    upper: bool,
    handles: AtomicU32,
}

impl ShermanNode {
    /// Fresh state for the trees `cfg` opens (an index cache of `cfg.cache_bytes` with
    /// `cfg.index_cache`).
    pub fn new(cfg: &ShermanConfig) -> ShermanNode {
        ShermanNode {
            // Made here, once: only trees with the local level use it.
            locks: LocalLocks::new(if cfg.hierarchical_locks { BUCKETS } else { 1 }),
            cache: TryRw::new(IndexCache::new(
                cfg.index_cache,
                cfg.cache_bytes,
                cfg.cache_charge,
                cfg.cache_eviction,
                cfg.cache_upper_levels,
            )),
            upper: cfg.index_cache && cfg.cache_upper_levels,
            handles: AtomicU32::new(0),
        }
    }

    /// A reader shard of the cache for a new handle.
    pub(crate) fn shard(&self) -> usize {
        self.handles.fetch_add(1, Relaxed) as usize
    }

    /// The leaf a cached level-1 page points `key` to (`None`: not cached, or the cache is
    /// being changed).
    pub(crate) fn leaf_for(&self, shard: usize, key: u64, g: &Geometry) -> Option<GlobalAddr> {
        self.cache.read(shard)?.leaf_for(key, g)
    }

    /// The [`Route`] a cached level-1 page gives `key` (`IndexCache::route_for`).
    pub(crate) fn route_for(&self, shard: usize, key: u64, g: &Geometry) -> Option<Route> {
        self.cache.read(shard)?.route_for(key, g)
    }

    /// Where a descent to `key` can start below the root (`IndexCache::start_for`).
    pub(crate) fn start_for(
        &self,
        shard: usize,
        key: u64,
        g: &Geometry,
    ) -> Option<(GlobalAddr, u8)> {
        self.cache.read(shard)?.start_for(key, g)
    }

    /// Whether the cache holds pages above level 1 (`ShermanConfig::cache_upper_levels`).
    pub(crate) fn caches_upper(&self) -> bool {
        self.upper
    }

    /// Drops the cached page of `level` covering `key` (skipped while another thread changes
    /// the cache, as [`Self::cache_invalidate`]).
    pub(crate) fn cache_invalidate_at(&self, level: u8, key: u64) {
        if let Some(mut c) = self.cache.write() {
            c.invalidate_at(usize::from(level), key);
        }
    }

    /// Remembers an internal page read whole: level 1, or any with `cache_upper_levels`
    /// (skipped while another thread changes the cache).
    pub(crate) fn cache_insert(&self, h: &PageHeader, page: &[u8]) {
        if let Some(mut c) = self.cache.write() {
            c.insert(h, page);
        }
    }

    /// Keeps `page` (header `h`) if the cache has room for it without evicting another
    /// (waiting a bounded number of spins for the cache's exclusive guard); whether it was
    /// kept, and `None` when it would not fit. For warming the cache before clients run.
    pub(crate) fn cache_keep(&self, h: &PageHeader, page: &[u8]) -> Option<bool> {
        for _ in 0..GUARD_TRIES {
            if let Some(mut c) = self.cache.write() {
                if !c.fits(h, page) {
                    return None;
                }
                c.insert(h, page);
                return Some(true);
            }
            core::hint::spin_loop();
        }
        Some(false)
    }

    /// Drops the cached page covering `key` (skipped while another thread changes the
    /// cache: the stale page is caught again by the next leaf's fences).
    pub(crate) fn cache_invalidate(&self, key: u64) {
        if let Some(mut c) = self.cache.write() {
            c.invalidate(key);
        }
    }

    /// Drops every cached level-1 page, waiting a bounded number of spins for the cache's
    /// exclusive guard; false if it stayed busy (the caller must then not use the cache).
    /// For CHIME's reuse of merged leaves; Sherman never calls it.
    pub(crate) fn cache_clear_level1(&self) -> bool {
        for _ in 0..GUARD_TRIES {
            if let Some(mut c) = self.cache.write() {
                c.clear_level1();
                return true;
            }
            core::hint::spin_loop();
        }
        false
    }

    /// Bytes in the index cache (0 while it is being changed).
    pub fn cache_bytes(&self) -> usize {
        self.cache.read(0).map_or(0, |c| c.bytes())
    }
}

/// A handle's access to its node's index cache: its reader shard, and its own hit and miss
/// counts.
pub(crate) struct NodeCache {
    node: Arc<ShermanNode>,
    shard: usize,
    enabled: bool,
    hits: Cell<u64>,
    misses: Cell<u64>,
}

impl NodeCache {
    pub(crate) fn new(node: Arc<ShermanNode>, enabled: bool) -> NodeCache {
        NodeCache {
            shard: node.shard(),
            node,
            enabled,
            hits: Cell::new(0),
            misses: Cell::new(0),
        }
    }

    /// Whether this handle uses the index cache.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// [`ShermanNode::cache_keep`].
    pub(crate) fn cache_keep(&self, h: &PageHeader, page: &[u8]) -> Option<bool> {
        self.node.cache_keep(h, page)
    }

    /// The leaf a cached level-1 page points `key` to (counted as a hit or a miss).
    pub(crate) fn leaf_for(&self, key: u64, g: &Geometry) -> Option<GlobalAddr> {
        if !self.enabled {
            return None;
        }
        let hit = self.node.leaf_for(self.shard, key, g);
        let c = if hit.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        c.set(c.get() + 1);
        hit
    }

    /// The [`Route`] a cached level-1 page gives `key` (counted as a hit or a miss).
    pub(crate) fn route_for(&self, key: u64, g: &Geometry) -> Option<Route> {
        if !self.enabled {
            return None;
        }
        let hit = self.node.route_for(self.shard, key, g);
        let c = if hit.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        c.set(c.get() + 1);
        hit
    }

    pub(crate) fn cache_insert(&self, h: &PageHeader, page: &[u8]) {
        self.node.cache_insert(h, page)
    }

    /// Where a descent to `key` can start below the root: a cached page above level 1
    /// (`ShermanConfig::cache_upper_levels`) points to its child, one level below the
    /// returned level.
    pub(crate) fn start_for(&self, key: u64, g: &Geometry) -> Option<(GlobalAddr, u8)> {
        if !self.enabled {
            return None;
        }
        self.node.start_for(self.shard, key, g)
    }

    /// Whether pages above level 1 are cached.
    pub(crate) fn caches_upper(&self) -> bool {
        self.enabled && self.node.caches_upper()
    }

    pub(crate) fn cache_invalidate_at(&self, level: u8, key: u64) {
        self.node.cache_invalidate_at(level, key)
    }

    pub(crate) fn cache_invalidate(&self, key: u64) {
        self.node.cache_invalidate(key)
    }

    /// [`ShermanNode::cache_clear_level1`].
    pub(crate) fn cache_clear_level1(&self) -> bool {
        self.node.cache_clear_level1()
    }

    /// This handle's hits and misses, and bytes in the node's cache.
    pub(crate) fn stats(&self) -> (u64, u64, usize) {
        (self.hits.get(), self.misses.get(), self.node.cache_bytes())
    }
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// Creates the tree and publishes it in `cfg.root_slot` of the first memory node, or
    /// opens the one already there (so concurrent creators agree on one tree). The handle
    /// gets node state of its own (a compute node of one thread); see
    /// [`Sherman::create_on`] to share it.
    pub async fn create(ep: &'e E, cfg: ShermanConfig) -> Result<Self, ShermanError> {
        Self::create_on(ep, cfg, Arc::new(ShermanNode::new(&cfg))).await
    }

    /// Opens the tree published in `cfg.root_slot`, with node state of its own; see
    /// [`Sherman::open_on`] to share it.
    pub async fn open(ep: &'e E, cfg: ShermanConfig) -> Result<Self, ShermanError> {
        Self::open_on(ep, cfg, Arc::new(ShermanNode::new(&cfg))).await
    }
}

const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<ShermanNode>();
};

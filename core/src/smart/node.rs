//! The state SMART keeps per compute node, shared by every client thread's handle of it
//! (paper §4.3–4.4: the radix cache, and the read-delegation / write-combining table, are
//! per compute node): one [`SmartNode`] per tree per compute node, each handle holding its
//! own endpoint and an `Arc` of it.
//!
//! Concurrency: the radix cache sits behind a [`TryRw`] (walks take a shared guard on their
//! own reader shard; fills, invalidations and slot updates take the exclusive one and are
//! skipped when it is busy, which is correct because nothing rests on the cache); the local
//! table is split into try-locked buckets ([`LocalTable`]). Nothing here blocks a thread.
use super::SmartConfig;
use super::cache::RadixCache;
use super::config::SmartError;
use super::handover::HandOver;
use super::local::LocalTable;
use super::shared::{ReadGuard, TryRw, WriteGuard};
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use remora_layouts::GlobalAddr;

/// Per-compute-node state of one SMART tree: the radix cache and the local table for read
/// delegation and write combining. `Sync`: share it (in an `Arc`) among the handles of every
/// client thread of one compute node, via [`super::Smart::open_on`].
pub struct SmartNode {
    pub(crate) cache: TryRw<RadixCache>,
    pub(crate) local: LocalTable,
    /// The local lock table of the lock-based baseline's hand-over (empty otherwise).
    pub(crate) handover: HandOver,
    /// The local lock table of the in-place leaves' hand-over (`SmartConfig::leaf_handover`;
    /// empty otherwise).
    pub(crate) leaf_handover: HandOver,
    cache_on: bool,
    /// Handles opened on this node so far (each takes its own reader shard of the cache).
    handles: AtomicU32,
}

/// What one compute node's shared state holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NodeFootprint {
    /// Bytes of the radix cache: its preallocated index and its entries.
    pub cache_bytes: u64,
    /// Entries in the radix cache.
    pub cache_entries: u64,
    /// Bytes of the delegation/combining table (entries and their buffers).
    pub table_bytes: u64,
    /// Handles opened on this node state.
    pub handles: u32,
}

impl SmartNode {
    /// Fresh state for the trees `cfg` opens: a cache of `cfg.cache_mib` (none without
    /// `techniques.cache`) and a local table of `cfg.local_table` entries for values up to
    /// `cfg.value_cap` bytes.
    pub fn new(cfg: &SmartConfig) -> SmartNode {
        let cache_bytes = if cfg.techniques.cache {
            (cfg.cache_mib * 1024.0 * 1024.0) as usize
        } else {
            0
        };
        SmartNode {
            cache: TryRw::new(RadixCache::new(cache_bytes)),
            local: LocalTable::new(cfg.local_table, cfg.value_cap),
            handover: HandOver::new(!cfg.techniques.lock_free_internal && cfg.hocl_handover),
            leaf_handover: HandOver::new(cfg.leaf_handover_on()),
            cache_on: cache_bytes > 0,
            handles: AtomicU32::new(0),
        }
    }

    /// Joins a handle of tree `root`. The first handle pins the root in the cache; a handle
    /// of another tree, or with larger values than the local table was sized for, is
    /// refused (one node state serves one tree).
    pub(crate) fn join(&self, cfg: &SmartConfig, root: GlobalAddr) -> Result<(), SmartError> {
        if cfg.value_cap > self.local.value_cap() {
            return Err(SmartError::Config(
                "the node state's local table holds smaller values than this handle's",
            ));
        }
        if !self.cache_on {
            return Ok(());
        }
        // Opening is not the hot path: spin (boundedly) for the exclusive guard. Without it
        // the root is merely not pinned (it may be evicted and read again).
        for _ in 0..1024 {
            if let Some(mut c) = self.cache.write() {
                if c.pinned() != GlobalAddr::NULL && c.pinned() != root {
                    return Err(SmartError::Config("this node state serves another tree"));
                }
                c.pin(root);
                return Ok(());
            }
            core::hint::spin_loop();
        }
        Ok(())
    }

    /// A reader shard for a new handle.
    pub(crate) fn shard(&self) -> usize {
        self.handles.fetch_add(1, Relaxed) as usize
    }

    /// A shared guard of the cache on `shard`; `None` without a cache or while it is being
    /// changed (the walk then goes to remote memory).
    pub(crate) fn cache(&self, shard: usize) -> Option<ReadGuard<'_, RadixCache>> {
        if !self.cache_on {
            return None;
        }
        self.cache.read(shard)
    }

    /// The exclusive guard of the cache; `None` without a cache or while another thread
    /// holds it (the change is skipped).
    pub(crate) fn cache_mut(&self) -> Option<WriteGuard<'_, RadixCache>> {
        if !self.cache_on {
            return None;
        }
        self.cache.write()
    }

    /// What the node state holds now (cache figures are zero while the cache is busy).
    pub fn footprint(&self) -> NodeFootprint {
        let (cache_bytes, cache_entries) = self
            .cache
            .read(0)
            .map_or((0, 0), |c| (c.footprint() as u64, c.len() as u64));
        NodeFootprint {
            cache_bytes,
            cache_entries,
            table_bytes: (self.local.footprint()
                + self.handover.footprint()
                + self.leaf_handover.footprint()) as u64,
            handles: self.handles.load(Relaxed),
        }
    }
}

const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<SmartNode>();
};

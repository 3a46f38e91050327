//! CHIME (SOSP'24, "A Cache-Efficient and High-Performance Hybrid Index on Disaggregated
//! Memory"; authors' code dmemsys/CHIME): a B+tree whose leaves are hopscotch hash tables,
//! built on Sherman. Here it is built on remora's Sherman ([`crate::sherman`]): Sherman's
//! internal pages, index cache, hierarchical on-chip locks, leases and separator inserts
//! (through `sherman/hooks.rs`), with CHIME's leaf. Each technique is a switch
//! ([`ChimeConfig`]); with all of them off the handle *is* Sherman.
//!
//! - **Hopscotch leaves** (`hopscotch.rs`, format `remora_layouts::chime`): 64 slots, a
//!   neighbourhood of 8, a hop bitmap per slot; a lookup READs the one or two groups that
//!   hold the key's neighbourhood (`read.rs`), not the leaf.
//! - **Replicated metadata**: every group of 8 slots starts with the leaf's metadata (sibling,
//!   stamps), so a neighbourhood READ carries it (always on: the layout has it).
//! - **Sibling-based validation** (`read.rs`, [`ChimeConfig::sibling_check`]): the replicas
//!   carry no fence keys; a leaf is validated against the route that led to it (the leaf the
//!   level-1 page names next) and its sibling pointer, and, when they disagree (the leaf
//!   split since), by one 8-byte READ of the sibling's low key.
//! - **Vacancy-aware lock** (`vacancy_lock`, `write.rs`): the leaf's vacancy bitmap lives in
//!   a prefix word next to the stamps, read by the lock holder in the doorbell that reads the
//!   key's neighbourhood, so an insert READs only the groups up to the free slot it will
//!   use. Off: the writer READs the whole leaf under the lock. Remora's lock words are
//!   Sherman's owned lease words (client and tag, in NIC device memory), which leave no room
//!   for CHIME's 57-bit bitmap inside the word; the bitmap's word is beside the leaf instead,
//!   and reaches the writer in the same round trip. Nor would the bitmap in the lock word
//!   save that READ: the writer needs more of the prefix than the bitmap (the stamps of the
//!   groups beside those it rewrites, and the low key). A lease word needs the holder's
//!   client id whole (32 bits: the soft fabric's ids are a slot in the high 16 bits and a
//!   generation in the low 16, and a waiter fences exactly `lease::holder(word)`) and a tag
//!   that changes at each acquisition (16 bits are ample: a waiter fences only a word it
//!   saw unchanged at every look for a lease), which leaves 16 bits: one "has a free slot"
//!   bit per group fits, 8 groups' 16-bit stamps do not. [`ChimeConfig::prefix_free`] takes
//!   the stamps from the groups' own headers instead.
//! - **Speculative reads** (`speculative`, `hotspot.rs`): a per-node hotspot cache of
//!   (key tag, leaf, slot), 16 bytes an entry as the authors'; a hit READs the slot's group
//!   (160 bytes: its checksum covers the whole group, so one entry cannot be verified alone).
//! - **The cache budget** is counted as the authors count it: a cached level-1 page by its
//!   live entries (`ShermanConfig::cache_charge`, `CacheCharge::LiveEntries`), a hotspot
//!   entry as 16 bytes.
//! - **Internal pages above level 1 cached too** (`ShermanConfig::cache_upper_levels`, the
//!   authors' `CACHE_MORE_INTERNAL_NODE`, on in every run of theirs): a lookup whose level-1
//!   page is not cached starts at the lowest cached page covering its key, not at the root;
//!   each cached page costs its live entries as a level-1 page does.
//! - **Eviction as the authors'** (`ShermanConfig::cache_eviction`,
//!   `CacheEviction::SampledLfu`): each cached page counts the lookups it served; past the
//!   budget, the less-used of two sampled pages is dropped (`include/TreeCache.h`,
//!   `evict_one`).
//!
//! Beyond CHIME: deletes (an entry freed, its home's bitmap cleared, groups rewritten);
//! several memory nodes (leaves are allocated on the nodes in turn, each lock on its leaf's
//! node); READs verified in any segment order (one checksum per group over its header and
//! entries, and stamps between neighbouring groups: `remora_layouts::chime`); and the hop-after-split case:
//! CHIME's split asserts that the new key fits the half it goes to, which a real trace broke
//! (its issue tracker); here a split repacks the leaf's entries and any half that does not
//! fit is split again (`hopscotch::pack`), so a split may make three or more leaves.
//!
//! A writer that dies holding a leaf's lock is fenced after its lease and the lock taken
//! over, as Sherman's; a leaf it tore in the middle of its write-back is redone by the lock's
//! next holder from the redo record every leaf write posts first (`redo.rs`).
//!
//! Also beyond CHIME ([`ChimeConfig::merge`], off by default, `--with merge`): a delete that leaves its leaf with at
//! most [`MERGE_AT`] keys merges it into its left neighbour under both locks, behind a merge
//! record that a lock takeover finishes (`merge.rs`); readers and writers that reach the
//! retired leaf go left. Splits reuse retired leaves once no client can still hold their
//! addresses: SMART's grace period and attempt lease (`reuse.rs`). So a tree under churn
//! keeps a flat leaf count and flat remote memory. The kill campaign
//! (`poller/tests/chime_merge.rs`), the reuse guard (`chime_reuse.rs`), churn
//! (`chime_churn.rs`) and the linearizability checker's fill-and-drain histories
//! (`remora check --linearizability --index chime --with merge --cold-keys 64 --hot-percent
//! 20 --waves 400 --lease-us 1000`: 17-49 merges and 7-28 reused leaves per history of
//! 100,000 operations on the sim, 110-126 and 76-96 on soft) exercise it. It is off in [`ChimeConfig::chime`], which is CHIME as its authors build it.
//!
//! SMART's read delegation and write combining on CHIME (`delegation` and `combining`, off
//! by default; on in the authors' build, dmemsys/CHIME `exp/params/common.json`, and so in
//! `remora repro chime`; `delegate.rs`): the threads of a compute node share their operations on a
//! hot key, at most two lookups and two writes in flight per key and node, as SMART's read
//! delegation and write combining do for its leaves.
//!
//! remora's own ideas on CHIME, each off by default: [`ChimeConfig::lean_update`] (`--with
//! lean-update`): an update READs only the key's neighbourhood under the leaf's lock, not the
//! leaf prefix with it (`write.rs`); [`ChimeConfig::prefix_free`] (`--with prefix-free`): no
//! writer READs or WRITEs the prefix; and Sherman's `paced_locks` (`--with paced-locks`,
//! `sherman/pace.rs`): a waiter for a held leaf lock pauses one round trip between CASes
//! instead of spinning, halving the CASes the memory node's NIC serves.
//!
//! Bulk loading (`bulk.rs`, [`Chime::bulk_load`]): the tree random inserts grow, its leaves
//! filled by CHIME's own insert, under Sherman's internal levels, written at memory speed.
//!
//! Not here (yet): CHIME's variable-length values.
mod bulk;
pub mod census;
mod delegate;
mod hopscotch;
mod hotspot;
mod leaf;
mod merge;
mod read;
mod redo;
mod reuse;
mod write;

pub use bulk::{ChimeBulkStats, INSERT_FILL_PERCENT, INTERNAL_FILL_PERCENT};
pub use delegate::DELEGATION_ENTRIES;
pub use hotspot::HOTSPOT_ENTRY_BYTES;
pub use merge::{MERGE_AT, MERGE_FILL};

use crate::fabric::Endpoint;
use crate::index::KvIndex;
use crate::sherman::{
    CacheCharge, CacheEviction, Sherman, ShermanConfig, ShermanError, ShermanNode,
};
use core::cell::{Cell, RefCell};
#[cfg(target_has_atomic = "64")]
use core::sync::atomic::AtomicU64;
use delegate::Delegation;
use hotspot::Hotspot;
use remora_layouts::GlobalAddr;
use remora_layouts::chime::{KEY_INFINITY, LEAF_LEN, LeafPrefix, MAX_VALUE};
use std_alloc::sync::Arc;
use std_alloc::vec;

/// CHIME's errors are its Sherman's (keys, values, locks, pages, the fabric).
pub type ChimeError = ShermanError;

/// CHIME's switches, and the Sherman it is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChimeConfig {
    /// Sherman's configuration: internal pages, locks, index cache (`cache_bytes` is the
    /// index cache's share), root slot.
    pub sherman: ShermanConfig,
    /// Hopscotch leaves; off: Sherman's own leaves (and every switch below is moot).
    pub hopscotch: bool,
    /// The vacancy bitmap tells the lock holder which groups to READ.
    pub vacancy_lock: bool,
    /// Speculative reads through the hotspot cache.
    pub speculative: bool,
    /// Bytes of the hotspot cache per compute node (with `speculative`).
    pub hotspot_bytes: usize,
    /// Sibling-based validation: a leaf whose sibling is not the one its route named next
    /// is checked against its sibling's low key (`read.rs`). Always on in a real tree: off,
    /// a reader or writer routed by a page older than a split takes the split leaf to cover
    /// keys that moved right (a lookup misses them, an upsert puts a second copy in the old
    /// leaf); only the tests that show this turn it off. The groups carry no fences, so it is
    /// not one of CHIME's switches (`--no-*`).
    pub sibling_check: bool,
    /// SMART's, on in CHIME's authors' build (off in [`ChimeConfig::chime`]): read delegation per
    /// compute node (`delegate.rs`), with hopscotch leaves.
    pub delegation: bool,
    /// SMART's, on in CHIME's authors' build (off in [`ChimeConfig::chime`]): write combining of
    /// updates and upserts per compute node (`delegate.rs`), with hopscotch leaves.
    pub combining: bool,
    /// Beyond CHIME (whose leaves never merge; off by default, `--with merge`): a delete
    /// that leaves its leaf with at most [`MERGE_AT`] keys merges it into its left
    /// neighbour (`merge.rs`), and splits reuse the leaves merges retired, once no client
    /// can still hold their addresses (`reuse.rs`). Off: a tree under churn keeps every
    /// leaf it ever split.
    pub merge: bool,
    /// With `combining`: the write-combining leader, once it holds the leaf's lock, picks up
    /// the latest value queued for the key and writes that once, as the authors' leaf update
    /// does (`get_combining_value`, dmemsys/CHIME src/Tree.cpp); off, it writes its own value,
    /// then the latest queued one in a second write. On, as SMART's
    /// (`SmartConfig::combine_latest`).
    pub combine_latest: bool,
    /// remora's own (off by default, `--with lean-update`): an update (of a key that must
    /// be there: [`KvIndex::update`], YCSB's updates) READs only the key's neighbourhood
    /// under the leaf's lock, not the leaf prefix with it (`write.rs`): an update in place
    /// needs neither the vacancy bitmap nor the low key, which only inserts, deletes and
    /// misses use; an update that misses READs the prefix after. One READ fewer per update
    /// (the doorbell's NIC work and the prefix's bytes). The authors' CHIME reads no
    /// prefix: its vacancy bitmap rides in its lock word, which remora's lease-owned lock
    /// words have no room for (see the module's "Vacancy-aware lock").
    pub lean_update: bool,
    /// remora's own (off by default, `--with prefix-free`; not with `merge`): writers READ
    /// and WRITE no leaf prefix (`write.rs`). The stamps a writer records for the groups
    /// beside those it rewrites come from those groups' own headers, READ in the doorbell
    /// that READs the key's neighbourhood (`read.rs`, `read_run_beside`); an insert puts
    /// its key where that READ shows a free slot (else it READs the leaf and looks again
    /// before splitting); a lock holder checks a leaf's range by its
    /// sibling alone (without merges a leaf reached is never one whose low key is above the
    /// key). So the prefix (vacancy bitmap, stamps) is written whole only by splits and
    /// bulk loads and is stale in between; a torn leaf is told by its groups alone
    /// (`redo.rs`, `leaf_whole`). An update READs only the neighbourhood, as a lean one.
    /// Per insert or delete: two headers READ for the prefix, in as many READ verbs (one
    /// more when the neighbourhood ends at the last group: the header after it is then not
    /// beside it), 32 bytes more READ; one WRITE verb and 64 bytes (the prefix and its copy
    /// in the redo record) fewer.
    pub prefix_free: bool,
    /// Deliberate faults, off in every real configuration: the tests that show what a
    /// mechanism prevents turn one on and see them fail.
    #[doc(hidden)]
    pub mutation: Mutation,
}

/// Deliberate faults of [`ChimeConfig::mutation`] (tests only).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mutation {
    /// A lock takeover does not finish a dead client's committed merge.
    pub no_merge_completion: bool,
    /// Retired leaves are reused at once, attempts are not aged, cached routes never
    /// dropped.
    pub reuse_unguarded: bool,
}

/// The share of the cache CHIME gives the hotspot buffer: 30 of 100 MB (the authors'
/// `include/Common.h`: `kIndexCacheSize = 100`, `kHotspotBufSize = 30`).
pub const HOTSPOT_SHARE_PERCENT: usize = 30;

/// The authors' hotspot buffer, MB (`include/Common.h`: `kHotspotBufSize = 30`).
pub const PAPER_HOTSPOT_MB: u128 = 30;

/// The keys the authors' sizes are for (`include/Common.h`: `kLoadedKeyNum = 60000000`).
pub const PAPER_KEYS: u64 = 60_000_000;

impl ChimeConfig {
    /// CHIME with every technique on, on Sherman with every technique on, 100 MB of cache
    /// per compute node (the paper's), 30% of it the hotspot buffer; root slot 4.
    pub const fn chime() -> ChimeConfig {
        ChimeConfig {
            sherman: ShermanConfig {
                root_slot: 4,
                // The authors' tree cache counts a cached internal node by its live entries
                // (their Sherman too: the same code with CHIME's switches off).
                cache_charge: CacheCharge::LiveEntries,
                // ... and, past its budget, drops the less-used of two sampled nodes
                // (`include/TreeCache.h`, `evict_one`; their Sherman's too).
                cache_eviction: CacheEviction::SampledLfu,
                // The authors cache the internal nodes above level 1 too
                // (`CACHE_MORE_INTERNAL_NODE`, on in all their runs, their Sherman's too).
                cache_upper_levels: true,
                ..ShermanConfig::sherman()
            },
            hopscotch: true,
            vacancy_lock: true,
            speculative: true,
            hotspot_bytes: 0,
            sibling_check: true,
            delegation: false,
            combining: false,
            merge: false,
            combine_latest: true,
            lean_update: false,
            prefix_free: false,
            mutation: Mutation {
                no_merge_completion: false,
                reuse_unguarded: false,
            },
        }
        .with_cache(100 << 20)
    }

    /// This configuration with `bytes` of cache per compute node for a tree of `keys` keys,
    /// split as the authors' code splits it (`src/Tree.cpp`, `Tree::Tree`): the hotspot
    /// buffer is a fixed `kHotspotBufSize` (30 MB) only when `kIndexCacheSize` exceeds it by
    /// more than 20 MB, else there is none and the whole cache holds internal pages. The
    /// sizes are scaled by `keys` / [`PAPER_KEYS`], as the repro scales the cache, so at
    /// 100 MB (scaled) 30 of it is the hotspot buffer, and at 100/8.7 MB none is.
    pub const fn with_cache_for(mut self, bytes: usize, keys: u64) -> ChimeConfig {
        let hot =
            if self.speculative && self.hopscotch && bytes > scaled_mb(PAPER_HOTSPOT_MB + 20, keys)
            {
                scaled_mb(PAPER_HOTSPOT_MB, keys)
            } else {
                0
            };
        self.hotspot_bytes = hot;
        self.sherman.cache_bytes = bytes - hot;
        self
    }

    /// This configuration with `bytes` of cache per compute node, [`HOTSPOT_SHARE_PERCENT`]
    /// of it the hotspot buffer (with speculative reads), whatever its size (small trees in
    /// tests; [`Self::with_cache_for`] splits it as the authors' code).
    pub const fn with_cache(mut self, bytes: usize) -> ChimeConfig {
        let hot = if self.speculative && self.hopscotch {
            bytes / 100 * HOTSPOT_SHARE_PERCENT
        } else {
            0
        };
        self.hotspot_bytes = hot;
        self.sherman.cache_bytes = bytes - hot;
        self
    }
}

impl ChimeConfig {
    /// The names of the switches beyond CHIME's own, each off by default: SMART's read
    /// delegation and write combining (on in the authors' build), leaf merges, lean
    /// updates ([`Self::lean_update`]) and writes without the leaf prefix
    /// ([`Self::prefix_free`]).
    pub const IDEAS: [&'static str; 6] = [
        "delegation",
        "combining",
        "merge",
        "lean-update",
        "prefix-free",
        "paced-locks",
    ];

    /// Turns on the switch `name` (one of [`Self::IDEAS`]); false if there is none of
    /// that name.
    pub fn turn_on(&mut self, name: &str) -> bool {
        match name {
            "delegation" => self.delegation = true,
            "combining" => self.combining = true,
            "merge" => self.merge = true,
            "lean-update" => self.lean_update = true,
            "prefix-free" => self.prefix_free = true,
            "paced-locks" => self.sherman.paced_locks = true,
            _ => return false,
        }
        true
    }
}

/// `n` of the authors' MB for a tree of `keys` keys (scaled by `keys` / [`PAPER_KEYS`]).
const fn scaled_mb(n: u128, keys: u64) -> usize {
    (n * (1 << 20) * keys as u128 / PAPER_KEYS as u128) as usize
}

impl Default for ChimeConfig {
    fn default() -> Self {
        ChimeConfig::chime()
    }
}

/// One compute node's state shared by its threads: Sherman's (local lock table, index
/// cache) and the hotspot cache.
pub struct ChimeNode {
    sherman: Arc<ShermanNode>,
    hot: Hotspot,
    delegation: Delegation,
    /// When the cached level-1 pages were last dropped whole (`reuse.rs`), fabric clock.
    /// Targets without 64-bit atomics have no such stamp: with merges on they drop the
    /// level-1 pages at every attempt (`Chime::routes_cached`).
    #[cfg(target_has_atomic = "64")]
    routes_since: AtomicU64,
}

impl ChimeNode {
    /// Fresh node state for `cfg`.
    pub fn new(cfg: &ChimeConfig) -> ChimeNode {
        ChimeNode {
            sherman: Arc::new(ShermanNode::new(&cfg.sherman)),
            hot: Hotspot::new(if cfg.speculative {
                cfg.hotspot_bytes
            } else {
                0
            }),
            delegation: Delegation::new(if (cfg.delegation || cfg.combining) && cfg.hopscotch {
                DELEGATION_ENTRIES
            } else {
                0
            }),
            #[cfg(target_has_atomic = "64")]
            routes_since: AtomicU64::new(0),
        }
    }

    /// Bytes cached now: index cache pages and hotspot entries.
    pub fn cache_bytes(&self) -> usize {
        self.sherman.cache_bytes() + self.hot.bytes()
    }

    /// Bytes of the read-delegation table (none without `delegation`): in-flight lookups'
    /// state, not a cache (it holds a key only while one of the node's threads reads it).
    pub fn delegation_bytes(&self) -> usize {
        self.delegation.bytes()
    }
}

/// CHIME's own counters of one handle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChimeStats {
    /// Speculative reads tried, and those that found their key.
    pub speculative_tries: u64,
    /// Speculative reads that found their key.
    pub speculative_hits: u64,
    /// Inserts that hopped entries.
    pub hops: u64,
    /// Leaf splits, and the leaves they made beyond two (the hop-after-split case).
    pub splits: u64,
    /// Leaves beyond the second made by a split.
    pub extra_leaves: u64,
    /// Leaves allocated by splits (a split whose entries fit one leaf again, once repacked,
    /// allocates none).
    pub new_leaves: u64,
    /// Group READs refused (torn, or neighbouring groups from two moments) and retried.
    pub retries: u64,
    /// READs of a sibling's low key: leaves whose sibling was not the one their route named
    /// next (split since, or the route was its page's last child).
    pub sibling_reads: u64,
    /// Lookups served by another thread's lookup of the key (`delegation`).
    pub delegated_reads: u64,
    /// Updates and upserts whose value another thread's write of the key applied
    /// (`combining`).
    pub combined_writes: u64,
    /// Leaves merged into their left neighbours (`merge.rs`).
    pub merges: u64,
    /// Merged leaves retired (unlinked from level 1 too), and retired leaves reused by
    /// splits (`reuse.rs`).
    pub retired: u64,
    /// Retired leaves reused by splits.
    pub reused: u64,
    /// Merges finished for a dead client by a lock takeover (`redo.rs`).
    pub merges_finished: u64,
    /// Attempts restarted because they had grown older than reuse allows (`reuse.rs`).
    pub stale_attempts: u64,
}

/// One thread's handle on a CHIME tree.
pub struct Chime<'e, E: Endpoint> {
    tree: Sherman<'e, E>,
    cfg: ChimeConfig,
    node: Arc<ChimeNode>,
    stats: Cell<ChimeStats>,
    /// Free redo slots of this handle (`redo.rs`), on any memory node.
    redo_slots: RefCell<std_alloc::vec::Vec<GlobalAddr>>,
    /// Buffers of leaf splits (`write.rs`), kept so that a split allocates nothing.
    split_bufs: RefCell<std_alloc::vec::Vec<write::SplitBufs>>,
    /// Merge records' slots of this handle (`merge.rs`), one per memory node at most.
    merge_slots: RefCell<std_alloc::vec::Vec<GlobalAddr>>,
    /// Leaves this handle retired, and those ready for reuse (`reuse.rs`).
    reclaim: RefCell<crate::smart::reclaim::Reclaim>,
    timing: crate::smart::reclaim::Timing,
    /// When the current operation attempt began (`reuse.rs`): a handle runs one operation
    /// at a time.
    t0: Cell<u64>,
}

impl<'e, E: Endpoint> Chime<'e, E> {
    /// Creates the tree in `cfg.sherman.root_slot` (or opens the one there), sharing `node`
    /// with the other handles of its compute node.
    pub async fn create_on(
        ep: &'e E,
        cfg: ChimeConfig,
        node: Arc<ChimeNode>,
    ) -> Result<Self, ChimeError> {
        if cfg.sherman.value_size > MAX_VALUE {
            return Err(ShermanError::ValueTooLong {
                len: cfg.sherman.value_size,
                max: MAX_VALUE,
            });
        }
        if cfg.prefix_free && cfg.merge && cfg.hopscotch {
            // A merge rewrites both leaves from their prefixes, and its reuse of leaves is
            // what the prefix's low key guards writers against (`write.rs`).
            return Err(ShermanError::Config(
                remora_layouts::LayoutError::Inconsistent {
                    what: "prefix-free writes are not for trees with leaf merges",
                },
            ));
        }
        if cfg.sherman.page_size > read::FRAME {
            return Err(ShermanError::Config(
                remora_layouts::LayoutError::OutOfRange {
                    field: "page_size (CHIME's internal pages are at most 1 KiB)",
                    value: cfg.sherman.page_size as u64,
                },
            ));
        }
        let tree = if cfg.hopscotch {
            let mut img = vec![0u8; LEAF_LEN];
            let meta = leaf::Meta { sibling: 0, low: 0 };
            leaf::encode_leaf(
                &mut img,
                &hopscotch::Table::empty(),
                meta,
                &mut LeafPrefix::default(),
            );
            Sherman::create_over_leaf(ep, cfg.sherman, node.sherman.clone(), &img).await?
        } else {
            Sherman::create_on(ep, cfg.sherman, node.sherman.clone()).await?
        };
        let nodes = tree.alloc_nodes().0;
        Ok(Chime {
            reclaim: RefCell::new(reuse::reclaim(&cfg.sherman, nodes)),
            timing: reuse::timing(&cfg.sherman),
            tree,
            cfg,
            node,
            stats: Cell::new(ChimeStats::default()),
            redo_slots: RefCell::new(std_alloc::vec::Vec::new()),
            split_bufs: RefCell::new(std_alloc::vec::Vec::new()),
            merge_slots: RefCell::new(std_alloc::vec::Vec::new()),
            t0: Cell::new(0),
        })
    }

    /// [`Self::create_on`] with node state of its own.
    pub async fn create(ep: &'e E, cfg: ChimeConfig) -> Result<Self, ChimeError> {
        Self::create_on(ep, cfg, Arc::new(ChimeNode::new(&cfg))).await
    }

    /// This handle's configuration.
    pub fn config(&self) -> &ChimeConfig {
        &self.cfg
    }

    /// This handle's CHIME counters.
    pub fn stats(&self) -> ChimeStats {
        self.stats.get()
    }

    /// The Sherman under this tree (its lock hand-overs, splits of internal pages, cache).
    pub fn sherman(&self) -> &Sherman<'e, E> {
        &self.tree
    }

    fn count(&self, f: impl FnOnce(&mut ChimeStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }
}

pub(crate) fn key_of(key: &[u8]) -> Result<u64, ChimeError> {
    let k: [u8; 8] = key
        .try_into()
        .map_err(|_| ShermanError::BadKey { len: key.len() })?;
    let k = u64::from_be_bytes(k);
    if k == KEY_INFINITY {
        return Err(ShermanError::BadKey { len: 8 });
    }
    Ok(k)
}

impl<E: Endpoint> KvIndex for Chime<'_, E> {
    type Error = ChimeError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), ChimeError> {
        if !self.cfg.hopscotch {
            return self.tree.upsert(key, value).await;
        }
        let key = key_of(key)?;
        if self.cfg.combining {
            return self
                .modify_combined(key, value, write::Change::Upsert)
                .await
                .map(drop);
        }
        self.modify(key, value, write::Change::Upsert)
            .await
            .map(drop)
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, ChimeError> {
        if !self.cfg.hopscotch {
            return self.tree.update(key, value).await;
        }
        let key = key_of(key)?;
        if self.cfg.combining {
            return self
                .modify_combined(key, value, write::Change::Update)
                .await;
        }
        self.modify(key, value, write::Change::Update).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, ChimeError> {
        if !self.cfg.hopscotch {
            return self.tree.get(key, out).await;
        }
        let key = key_of(key)?;
        if self.cfg.delegation {
            return self.get_delegated(key, out).await;
        }
        self.lookup(key, out).await
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, ChimeError> {
        if !self.cfg.hopscotch {
            return self.tree.delete(key).await;
        }
        self.modify(key_of(key)?, &[], write::Change::Delete).await
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ChimeError> {
        if !self.cfg.hopscotch {
            return self.tree.scan(from, limit, visit).await;
        }
        self.scan_from(key_of(from)?, limit, visit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_split_as_the_authors_code_splits_it() {
        let mb = 1usize << 20;
        // 100 MB for the paper's 60M keys: 30 MB of hotspot buffer, 70 MB of pages.
        let c = ChimeConfig::chime().with_cache_for(100 * mb, PAPER_KEYS);
        assert_eq!((c.hotspot_bytes, c.sherman.cache_bytes), (30 * mb, 70 * mb));
        // 100/8.7 MB (and anything up to 50 MB): no hotspot buffer, all pages.
        let small = 100 * mb * 10 / 87;
        let c = ChimeConfig::chime().with_cache_for(small, PAPER_KEYS);
        assert_eq!((c.hotspot_bytes, c.sherman.cache_bytes), (0, small));
        let c = ChimeConfig::chime().with_cache_for(50 * mb, PAPER_KEYS);
        assert_eq!(c.hotspot_bytes, 0);
        // Scaled by keys: 1/6000 of the keys, 1/6000 of the sizes.
        let c = ChimeConfig::chime().with_cache_for(100 * mb / 6000, PAPER_KEYS / 6000);
        assert_eq!(c.hotspot_bytes, 30 * mb / 6000);
        // Without speculative reads there is no hotspot buffer.
        let c = ChimeConfig {
            speculative: false,
            ..ChimeConfig::chime()
        }
        .with_cache_for(100 * mb, PAPER_KEYS);
        assert_eq!((c.hotspot_bytes, c.sherman.cache_bytes), (0, 100 * mb));
    }
}

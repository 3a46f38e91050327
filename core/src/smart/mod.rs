//! SMART: adaptive radix tree on disaggregated memory (issue 5).
//!
//! One [`Smart`] handle per worker thread (compute-node client): it borrows the thread's
//! endpoint, keeps one allocator per memory node and its redo slots, and shares the
//! compute node's state ([`SmartNode`]: the radix cache of internal nodes, the local table
//! for read delegation and write combining) with the other threads' handles of the node.
//! The coroutines of the thread share the handle through `&self`.
//!
//! Concurrency (see `layouts::smart` for the formats):
//! - Internal nodes: an 8-byte slot changes by one CMP_AND_SWP ([`Techniques::lock_free_internal`])
//!   or under the node's lock (the baseline: an owned lock word, see below, in the node's
//!   reverse-pointer word, taken with the header and slot read in the same doorbell).
//!   Structural changes build new nodes off to the side and publish them with one slot swing:
//!   insert into an empty slot, leaf split (new chain of internal nodes), prefix split, grow.
//!   Nobody swings a slot it read frozen (a grow below a node being grown): the copy would
//!   keep the old value and point at a retired node forever.
//! - Prefix split: the parent slot swings first to a new Node4 whose slot leads to the split
//!   node (the linearization point), then the split node's header is CASed to its shorter
//!   prefix. A node whose prefix starts before its parent allows is that half-done state, and
//!   whoever reads it (search, scan) finishes it with the same CAS: a splitter that dies
//!   between the two steps leaves nothing stuck.
//! - Grow: memory for the copy is allocated first (running out changes nothing), then the
//!   header is frozen (CAS), every slot frozen (CAS each; under the node lock in the
//!   baseline), the copy written and the parent slot swung; the old node is marked obsolete.
//!   A frozen node is never unfrozen: it is always replaced. A search that meets one waits a
//!   little (back-off) and restarts from the root; once the node has stayed frozen for a
//!   lease, or at once for the client that froze it and lost its swing, the searcher finishes
//!   the grow itself ([`Smart::help_grow`]: complete the freeze, copy, swing). Racing helpers
//!   are harmless: one swing wins, the others free their copies.
//! - Leaves: updated in place under the rear lock in their last word, an owned lock with a
//!   lease (`leaflock`): the word names the holder's fabric client and its redo slot; the
//!   write-back doorbell is `[redo copy, leaf body, unlock]`. Readers check a CRC-64 over
//!   valid bit, key and value and re-read on mismatch. A waiter (or a reader that keeps
//!   finding the leaf torn) that sees the same lock word for a lease fences the holder, takes
//!   the lock over and repairs a torn leaf from the redo copy. A key keeps one leaf while it
//!   is present; delete marks the leaf retired (obsolete, forwarding to itself) under its
//!   lock and then unlinks it, and a re-insert writes a new leaf, so a leaf found with the
//!   right key and not retired is the key's current state; a retired one is finished
//!   (unlinked) by whoever meets it, and the search restarts. Out-of-place mode writes a new leaf, then CASes the old leaf's
//!   status to "obsolete, forward to new" (the linearization point) and swings the parent
//!   slot (best effort: readers follow the forward chain).
//! - Absence is only decided on a freshly read node with no frozen word on the way, so a
//!   concurrent grow can never hide a key.
//! - Waits are paced on the fabric clock (`SmartConfig::lease`): exponential back-off, a
//!   lease after which a holder counts as dead, a deadline per operation; errors name the
//!   lock word and its holder ([`SmartError::Held`]).
//! - Memory of deleted leaves and of replaced nodes and leaves is reused after a grace
//!   period bounded by leases (`reclaim.rs`): deletes unlink their leaf (a Node256 slot
//!   empties, a smaller node's slot turns dead), grows copy only live slots (compaction) and
//!   drop a node left without any. After a memory-node restart, the first client takes back
//!   what the tree does not reach ([`Smart::open_recovering`], `recover.rs`).
//! - Bulk loading (`bulk.rs`, [`Smart::bulk_load`]): the tree inserts of a sorted key set
//!   grow, written chunk by chunk at memory speed.
#![cfg(feature = "alloc")]

mod bulk;
#[cfg(test)]
mod bulk_tests;
mod cache;
#[cfg(test)]
mod chain_tests;
mod config;
#[cfg(test)]
mod frame_tests;
mod frozen;
mod handover;
#[cfg(test)]
mod handover_tests;
mod key;
mod leaflock;
#[cfg(test)]
mod leak_tests;
mod local;
mod node;
#[cfg(test)]
mod node_tests;
mod nodelock;
mod onchip;
#[cfg(test)]
mod onchip_tests;
pub(crate) mod reclaim;
mod recover;
mod remote;
#[cfg(test)]
mod repair_tests;
mod scan;
mod search;
pub(crate) mod shared;
mod split_scratch;
mod structure;
#[cfg(test)]
mod tests;
mod warm;
mod write;

pub use crate::bulk::WarmStats;
pub use bulk::BulkStats;
pub use config::{KeyMode, SmartConfig, SmartError, Techniques};
pub use node::{NodeFootprint, SmartNode};
pub use onchip::AUTHORS_ONCHIP_LOCKS;
pub use recover::Recovered;

use crate::alloc::RemoteAllocator;
use crate::fabric::{Endpoint, QueuePair};
use crate::index::KvIndex;
use crate::lease::{Verdict, Waiter};
use core::cell::Cell;
use key::Key;
use remora_layouts::GlobalAddr;
use remora_layouts::region::root_offset;
use remora_layouts::smart::{Header, NodeType, TREE_MAGIC, TREE_META_LEN, TreeMeta};
use std_alloc::sync::Arc;
use std_alloc::vec::Vec;
use write::WriteKind;

/// What a handle did, for reports and tests.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub restarts: Cell<u64>,
    pub checksum_retries: Cell<u64>,
    pub node_reads: Cell<u64>,
    pub lock_waits: Cell<u64>,
    pub leaf_lock_waited: Cell<u64>,
    pub leaf_lock_wait_ns: Cell<u64>,
    pub cache_leaf_hits: Cell<u64>,
    pub cache_invalidations: Cell<u64>,
    pub delegated_reads: Cell<u64>,
    pub combined_writes: Cell<u64>,
    pub second_writes: Cell<u64>,
    pub second_write_covered: Cell<u64>,
    pub second_write_ns: Cell<u64>,
    pub leader_takeovers: Cell<u64>,
    pub grows: Cell<u64>,
    pub prefix_splits: Cell<u64>,
    pub leaf_splits: Cell<u64>,
    pub takeovers: Cell<u64>,
    pub handovers: Cell<u64>,
    pub repairs: Cell<u64>,
    pub stale_attempts: Cell<u64>,
}

/// A plain copy of a handle's statistics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SmartStats {
    /// Operations restarted after a failed CAS, an inconsistent node or a frozen word.
    pub restarts: u64,
    /// Leaf re-reads after a checksum mismatch (torn reads).
    pub checksum_retries: u64,
    /// Internal nodes read from remote memory.
    pub node_reads: u64,
    /// Polls of a busy leaf or node lock.
    pub lock_waits: u64,
    /// Leaf-lock acquisitions that found the lock held at first.
    pub leaf_lock_waited: u64,
    /// Their time from the first failed CAS to holding the lock (ns, fabric clock).
    pub leaf_lock_wait_ns: u64,
    /// Lookups that went straight from the cache to the leaf.
    pub cache_leaf_hits: u64,
    /// Cache entries dropped by the reverse check or an inconsistency.
    pub cache_invalidations: u64,
    /// Reads answered by another coroutine's remote read.
    pub delegated_reads: u64,
    /// Writes that were combined into another coroutine's remote write.
    pub combined_writes: u64,
    /// Combining leaders' second remote writes, of the latest value left while their own
    /// write was in flight (core/src/delegation/write.rs); each adds its time to its
    /// leader's operation and to the writers it covers.
    pub second_writes: u64,
    /// The writers those second writes covered.
    pub second_write_covered: u64,
    /// Those second writes' time, summed (ns, fabric clock).
    pub second_write_ns: u64,
    /// Delegated reads or combined writes whose leader made no progress for a lease (a
    /// thread that died mid-operation) and that a waiter led again.
    pub leader_takeovers: u64,
    /// Nodes grown into the next type (N4 -> N16 -> N48 -> N256).
    pub grows: u64,
    /// Compressed prefixes split by a new key diverging inside them.
    pub prefix_splits: u64,
    /// Leaves of another key replaced by new internal nodes holding both leaves.
    pub leaf_splits: u64,
    /// Leaf or node locks taken over from a holder that made no progress for a lease.
    pub takeovers: u64,
    /// Internal-node locks (lock-based baseline) handed over by another client of this
    /// compute node, without an unlock and a competing CAS (`SmartConfig::hocl_handover`).
    pub handovers: u64,
    /// Half-done changes of other clients finished here: grows of frozen nodes, prefix
    /// splits, torn leaves rebuilt from a redo copy.
    pub repairs: u64,
    /// Operation attempts restarted because they outlived the attempt lease of reclamation
    /// (a stalled client coming back), or met a leaf being unlinked.
    pub stale_attempts: u64,
    /// Objects (leaves, nodes) this handle retired for reuse.
    pub retired: u64,
    /// Retired objects this handle reused.
    pub reused: u64,
    /// Retired objects waiting for their grace period or for reuse.
    pub retired_waiting: u64,
    /// Bytes of the entries (not the index) in the node's radix cache.
    pub cache_bytes: u64,
    /// Entries in the node's radix cache.
    pub cache_entries: u64,
}

/// How long one operation has been restarting: back-off and deadline on the fabric clock,
/// which runs from its first restart (an operation that never restarts reads no clock).
pub(crate) struct Pace {
    w: Option<Waiter>,
    tries: u32,
}

impl Pace {
    /// Counts one more restart; returns the count.
    pub(crate) fn count(&mut self) -> u32 {
        self.tries += 1;
        self.tries
    }
}

pub(crate) fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// One compute-node client of a SMART tree.
pub struct Smart<'e, E: Endpoint> {
    pub(crate) ep: &'e E,
    pub(crate) cfg: SmartConfig,
    pub(crate) root: GlobalAddr,
    pub(crate) allocs: Vec<RemoteAllocator>,
    pub(crate) next_node: Cell<usize>,
    /// Tag of the last internal-node lock this handle took (lock-based mode).
    pub(crate) lock_seq: Cell<u32>,
    /// Bits of the on-chip lock table of every memory node (0: no table; `onchip.rs`).
    pub(crate) chip_bits: u64,
    /// The compute node's shared state.
    pub(crate) node: Arc<SmartNode>,
    /// This handle's reader shard of the node's cache.
    pub(crate) shard: usize,
    /// Per memory node (in `ep.nodes()` order): this handle's redo slots (in-place mode).
    pub(crate) redo: Vec<leaflock::RedoRing>,
    pub(crate) stats: Stats,
    /// Retired objects and their grace periods (`reclaim.rs`).
    pub(crate) reclaim: core::cell::RefCell<reclaim::Reclaim>,
    pub(crate) timing: reclaim::Timing,
    /// Buffers this handle's scans reuse (`scan.rs`).
    pub(crate) scan_scratch: scan::ScanScratch,
    /// Buffers this handle's grows, freezes and leaf splits reuse (`split_scratch.rs`).
    pub(crate) split_scratch: split_scratch::SplitScratch,
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// Opens the tree published in root slot `cfg.root_slot` of the endpoint's first memory
    /// node, creating it (a Node256 root) if the slot is empty. Every client of one tree must
    /// use the same structural techniques, key mode and value capacity. The handle gets node
    /// state of its own (a compute node of one thread); see [`Self::open_on`] to share it.
    pub async fn open(ep: &'e E, cfg: SmartConfig) -> Result<Smart<'e, E>, SmartError> {
        cfg.check()?;
        Self::open_on(ep, cfg, Arc::new(SmartNode::new(&cfg))).await
    }

    /// [`Self::open`], sharing `node` (the compute node's cache and delegation/combining
    /// table) with the other handles opened on it: one per client thread of the node.
    pub async fn open_on(
        ep: &'e E,
        cfg: SmartConfig,
        node: Arc<SmartNode>,
    ) -> Result<Smart<'e, E>, SmartError> {
        Self::open_with(ep, cfg, node, true).await
    }

    /// [`Self::open_on`]; the redo rings are allocated later (by [`Self::alloc_redo`]) unless
    /// `redo_now`.
    pub(crate) async fn open_with(
        ep: &'e E,
        cfg: SmartConfig,
        node: Arc<SmartNode>,
        redo_now: bool,
    ) -> Result<Smart<'e, E>, SmartError> {
        cfg.check()?;
        let first = *ep
            .nodes()
            .first()
            .ok_or(SmartError::Config("the endpoint reaches no memory node"))?;
        let mut allocs = Vec::with_capacity(ep.nodes().len());
        for &n in ep.nodes() {
            allocs.push(RemoteAllocator::open(ep.qp(n)?).await?);
        }
        let shard = node.shard();
        let mut s = Smart {
            ep,
            cfg,
            root: GlobalAddr::NULL,
            allocs,
            next_node: Cell::new(0),
            lock_seq: Cell::new(0),
            chip_bits: 0,
            node,
            shard,
            redo: Vec::new(),
            stats: Stats::default(),
            reclaim: core::cell::RefCell::new(reclaim::Reclaim::new(
                reclaim::Timing::of(&cfg),
                ep.nodes().len(),
            )),
            timing: reclaim::Timing::of(&cfg),
            scan_scratch: Default::default(),
            split_scratch: Default::default(),
        };
        let t = &cfg.techniques;
        let chip_used = !t.lock_free_internal || (t.in_place_leaf && !t.rear_lock);
        if cfg.onchip_locks > 0 && chip_used {
            // Only where a lock lives in the table: a handle that takes none opens as before.
            let bits = onchip::table_bits(cfg.onchip_locks);
            for &n in ep.nodes() {
                let mut b = [0u8; remora_layouts::region::HEADER_LEN];
                s.read(GlobalAddr::new(n, 0), &mut b).await?;
                let h = remora_layouts::region::RegionHeader::decode(&b).map_err(|err| {
                    SmartError::Corrupt {
                        what: "region header",
                        err,
                    }
                })?;
                if h.dm_len < bits / 8 {
                    return Err(SmartError::Config(
                        "on-chip locks: the table does not fit a memory node's device memory",
                    ));
                }
            }
            s.chip_bits = bits;
        }
        if redo_now {
            s.alloc_redo().await?;
        }
        let slot_at = GlobalAddr::new(first, root_offset(cfg.root_slot));
        let shape = match cfg.key_mode {
            KeyMode::Fixed(n) => n as u64,
            KeyMode::Variable => 0,
        } | (cfg.value_cap as u64) << 16;
        let flags = cfg.techniques.structural_flags() | u64::from(s.chip_bits > 0) << 2;
        let mut word = [0u8; 8];
        s.read(slot_at, &mut word).await?;
        let mut meta_addr = u64::from_le_bytes(word);
        if meta_addr == 0 {
            // Create: root Node256 and meta block, then publish by CAS.
            let root = s.alloc_at(0, NodeType::N256.bytes()).await?;
            let meta_at = s.alloc_at(0, TREE_META_LEN).await?;
            let mut img = [0u8; NodeType::N256.bytes()];
            let h = Header::new(0, NodeType::N256, &[]).map_err(|err| SmartError::Corrupt {
                what: "root header",
                err,
            })?;
            img[8..16].copy_from_slice(&h.raw().to_le_bytes());
            let meta = TreeMeta {
                magic: TREE_MAGIC,
                flags,
                root: root.raw(),
                shape,
            };
            s.write_all(&[(root, &img[..]), (meta_at, &meta.encode()[..])])
                .await?;
            let old = s.cas(slot_at, 0, meta_at.raw()).await?;
            if old == 0 {
                meta_addr = meta_at.raw();
            } else {
                s.free(root, NodeType::N256.bytes());
                s.free(meta_at, TREE_META_LEN);
                meta_addr = old;
            }
        }
        let mut mb = [0u8; TREE_META_LEN];
        s.read(GlobalAddr::from_raw(meta_addr), &mut mb).await?;
        let meta = TreeMeta::decode(&mb).map_err(|err| SmartError::Corrupt {
            what: "tree meta block",
            err,
        })?;
        if meta.flags != flags {
            return Err(SmartError::Mismatch {
                what: "lock-free internal nodes / in-place leaves / on-chip locks differ from the tree's",
            });
        }
        if meta.shape != shape {
            return Err(SmartError::Mismatch {
                what: "key mode or value capacity differ from the tree's",
            });
        }
        s.root = GlobalAddr::from_raw(meta.root);
        s.node.join(&cfg, s.root)?;
        Ok(s)
    }

    /// Allocates this handle's redo rings (in-place leaves only).
    pub(crate) async fn alloc_redo(&mut self) -> Result<(), SmartError> {
        if self.cfg.techniques.in_place_leaf {
            let slot = self.max_leaf_bytes();
            let mut rings = Vec::with_capacity(self.allocs.len());
            for ix in 0..self.allocs.len() {
                let base = self.alloc_at(ix, leaflock::REDO_SLOTS * slot).await?;
                rings.push(leaflock::RedoRing::new(base, slot)?);
            }
            self.redo = rings;
        }
        Ok(())
    }

    /// The configuration this handle was opened with.
    pub fn config(&self) -> &SmartConfig {
        &self.cfg
    }

    /// The compute node's state this handle shares.
    pub fn node(&self) -> &Arc<SmartNode> {
        &self.node
    }

    /// The handle's statistics so far (the cache figures are the node's).
    pub fn stats(&self) -> SmartStats {
        let s = &self.stats;
        let (cache_bytes, cache_entries) = self
            .node
            .cache(self.shard)
            .map_or((0, 0), |c| (c.bytes() as u64, c.len() as u64));
        SmartStats {
            restarts: s.restarts.get(),
            checksum_retries: s.checksum_retries.get(),
            node_reads: s.node_reads.get(),
            lock_waits: s.lock_waits.get(),
            leaf_lock_waited: s.leaf_lock_waited.get(),
            leaf_lock_wait_ns: s.leaf_lock_wait_ns.get(),
            cache_leaf_hits: s.cache_leaf_hits.get(),
            cache_invalidations: s.cache_invalidations.get(),
            delegated_reads: s.delegated_reads.get(),
            combined_writes: s.combined_writes.get(),
            second_writes: s.second_writes.get(),
            second_write_covered: s.second_write_covered.get(),
            second_write_ns: s.second_write_ns.get(),
            leader_takeovers: s.leader_takeovers.get(),
            grows: s.grows.get(),
            prefix_splits: s.prefix_splits.get(),
            leaf_splits: s.leaf_splits.get(),
            takeovers: s.takeovers.get(),
            handovers: s.handovers.get(),
            repairs: s.repairs.get(),
            stale_attempts: s.stale_attempts.get(),
            retired: self.reclaim.borrow().retired,
            reused: self.reclaim.borrow().reused,
            retired_waiting: self.reclaim.borrow().waiting(),
            cache_bytes,
            cache_entries,
        }
    }

    /// Sum of the counters of the endpoint's queue pairs.
    pub fn counters(&self) -> crate::Snapshot {
        self.ep
            .nodes()
            .iter()
            .filter_map(|n| self.ep.qp(*n).ok())
            .map(|q| q.counters().snapshot())
            .fold(Default::default(), |a, b| a + b)
    }

    /// A fresh pace for one operation's restarts.
    pub(crate) fn pace(&self) -> Pace {
        Pace { w: None, tries: 0 }
    }

    /// Backs off after a restart (exponentially, on the fabric clock); errors when the
    /// operation's deadline or restart cap is spent.
    pub(crate) async fn restart(
        &self,
        pace: &mut Pace,
        what: &'static str,
    ) -> Result<(), SmartError> {
        bump(&self.stats.restarts);
        pace.tries += 1;
        let give_up = SmartError::Contention {
            what,
            tries: pace.tries,
        };
        if pace.tries >= self.cfg.max_restarts {
            return Err(give_up);
        }
        let now = self.ep.now_ns();
        let lease = self.cfg.lease;
        let w = pace.w.get_or_insert_with(|| Waiter::new(lease, now));
        match w.observe(0, now) {
            Verdict::Wait(ns) => self.ep.pause(ns).await,
            Verdict::Expired { .. } | Verdict::GiveUp { .. } => return Err(give_up),
        }
        Ok(())
    }

    /// A lookup without delegation (`key` encoded).
    pub(crate) async fn get_direct(
        &self,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<Option<usize>, SmartError> {
        self.lookup(key, out).await
    }
}

impl<E: Endpoint> KvIndex for Smart<'_, E> {
    type Error = SmartError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), SmartError> {
        let k = Key::encode(self.cfg.key_mode, key)?;
        self.write_combined(WriteKind::Upsert, &k, value)
            .await
            .map(|_| ())
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, SmartError> {
        let k = Key::encode(self.cfg.key_mode, key)?;
        self.write_combined(WriteKind::Update, &k, value).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, SmartError> {
        // Fixed-length keys are their own encoding: no copy.
        if let Some(k) = Key::as_is(self.cfg.key_mode, key)? {
            return self.get_delegated(k, out).await;
        }
        let k = Key::encode(self.cfg.key_mode, key)?;
        self.get_delegated(k.bytes(), out).await
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, SmartError> {
        let k = Key::encode(self.cfg.key_mode, key)?;
        self.write_op(WriteKind::Delete, &k, &[]).await
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, SmartError> {
        self.scan_from(from, limit, visit).await
    }
}

/// SMART's inner-node decode (`NodeImg::decode`, what the sim charges as
/// `Work::NodeDecode`), for `remora perf --cpu-calibration`, which times this real code path
/// rather than a copy of it. Returns the node's reverse word. Not part of the API.
#[doc(hidden)]
pub fn calibrate_node_decode(ty: remora_layouts::smart::NodeType, bytes: &[u8]) -> Option<u64> {
    let img = remote::NodeImg::decode(remora_layouts::GlobalAddr::NULL, ty, bytes).ok()?;
    Some(core::hint::black_box(&img).rev)
}

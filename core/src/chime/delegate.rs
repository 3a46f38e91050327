//! SMART's read delegation and write combining on CHIME (not in CHIME's paper, on in its
//! authors' build; off unless `ChimeConfig::delegation` / `combining`): read delegation per
//! compute node. Under a skewed workload many threads of one compute node
//! look up the same hot key at once, and CHIME sends each one's READs (the entry, or the
//! neighbourhood) to the memory node, whose link is then the bottleneck. Here the threads of
//! a node share a small table of keys being read: the first reader of a key leads (it runs
//! the whole lookup), and readers that arrive while that lookup is in flight wait for the
//! *next* one, which one of them leads once the current one completes, and take its result.
//! So at most two lookups per key are in flight per node, whatever the skew. SMART
//! (`smart/local.rs`) does this for its ART leaves; this is the same table
//! ([`crate::delegation`]) applied to CHIME's lookups, with CHIME's fixed 8-byte keys and
//! values kept inside the entries (no allocation).
//!
//! Linearizable: a waiter never takes the result of the lookup in flight when it arrived
//! (it may predate the waiter's call); it takes that of a lookup of a later generation,
//! which starts only after the waiter arrived (a generation is opened under the bucket lock
//! after the previous one closed) and ends before the waiter returns, so its linearization
//! point lies within the waiter's interval. A leader whose lookup fails publishes nothing:
//! a waiter then leads the next lookup itself.
//!
//! Write combining: a writer that finds a write of its key in flight leaves its value in the
//! table; the leader, once it holds the leaf's lock, picks up the latest value left and
//! writes that once (`ChimeConfig::combine_latest`, `write.rs` `modify_picking`, as the
//! authors' `leaf_node_update` calls `get_combining_value`). Measured (`remora bench --fabric
//! sim --index chime --with delegation,combining --workload a --records 20000 --operations
//! 100000 --compute-nodes 8 --clients-per-node 8 --coroutines 4 --seed 1..3`, against
//! `--no-combine-latest`): 25.8-25.9 against 24.9-25.1 Mops, p99 68-71 against 121-123 us.
//!
//! A leader that makes no progress for a lease (`ShermanConfig::lease`, on the waiter's own
//! clock, or its attempt cap on fabrics without one) is replaced by a waiter, which opens a
//! new generation and releases the old leader's user count; the old leader, should it come
//! back, publishes and releases nothing. A reader whose future is dropped halfway releases
//! its count (and its lead) at once through its claim's drop. Buckets are try-locks held
//! only between awaits, never across one (SMART's `TryLock`). A lookup that fails (or does
//! not fit its caller's buffer) publishes nothing: a waiter then leads the next lookup.
use super::write::Change;
use super::{Chime, ChimeError};
use crate::delegation::{Counted, Flavor, Host, Inline, Pick, Table};
use crate::fabric::Endpoint;
use crate::lease::LeaseConfig;
use crate::sherman::ShermanError;
use remora_layouts::chime::MAX_VALUE;

/// Entries of a node's table: a few per client thread of the paper's 64 per node. A key
/// whose bucket is full of other keys being read goes to the memory node directly.
pub const DELEGATION_ENTRIES: usize = 256;

/// CHIME's entries: 8-byte keys and values up to [`MAX_VALUE`], inside the entry.
pub(crate) enum Entries {}

impl Flavor for Entries {
    type Key = Inline<8>;
    type Value = Inline<MAX_VALUE>;
    type Kind = Kind;
    type Error = ChimeError;
    type Scratch = [u8; MAX_VALUE];
    const KEY_CAP: usize = 8;
    const SHARES_ERRORS: bool = false;
    /// The key's bytes (big-endian, as `key_of` decodes them), spread.
    fn home(key: &[u8]) -> u64 {
        let k = key.iter().fold(0u64, |k, b| k << 8 | *b as u64);
        k.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(31)
    }
    fn scratch() -> [u8; MAX_VALUE] {
        [0; MAX_VALUE]
    }
    fn too_small(need: usize, got: usize) -> ChimeError {
        ShermanError::BufferTooSmall { need, got }
    }
    fn is_too_small(e: &ChimeError) -> bool {
        matches!(e, ShermanError::BufferTooSmall { .. })
    }
}

/// A [`Change`] as the table keeps it (a crate-visible wrapper of the module's own type).
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct Kind(pub(super) Change);

/// One compute node's table of keys being read or written, shared by its threads.
pub(crate) type Delegation = Table<Entries>;

impl Delegation {
    /// A table of `entries` (none at 0).
    pub(crate) fn new(entries: usize) -> Delegation {
        Table::with_entries(entries, MAX_VALUE)
    }

    /// Bytes the table takes.
    pub(crate) fn bytes(&self) -> usize {
        self.footprint()
    }
}

impl<E: Endpoint> Host for Chime<'_, E> {
    fn now_ns(&self) -> u64 {
        self.tree.endpoint().now_ns()
    }
    fn lease(&self) -> LeaseConfig {
        self.cfg.sherman.lease
    }
    fn value_cap(&self) -> usize {
        MAX_VALUE
    }
    fn count(&self, what: Counted) {
        match what {
            Counted::Delegated => self.count(|st| st.delegated_reads += 1),
            Counted::Combined => self.count(|st| st.combined_writes += 1),
            Counted::TakenOver | Counted::SecondWrite { .. } => {}
        }
    }
    fn pause(&self, ns: u64) -> impl core::future::Future<Output = ()> {
        self.tree.endpoint().timer(ns)
    }
    fn combine_latest(&self) -> bool {
        self.cfg.combine_latest
    }
}

impl<'e, E: Endpoint> Chime<'e, E> {
    /// `get` through the node's delegation table (`key` decoded).
    pub(super) async fn get_delegated(
        &self,
        key: u64,
        out: &mut [u8],
    ) -> Result<Option<usize>, ChimeError> {
        let read = async |out: &mut [u8]| self.lookup(key, out).await;
        let table = &self.node.delegation;
        table.get(self, &key.to_be_bytes(), out, read).await
    }

    /// An update or upsert through the node's table (`key` decoded): a writer that finds a
    /// write of its key in flight leaves its value there; when the write finishes, its
    /// writer writes the latest value left once, and every writer whose value that covered
    /// returns (their writes linearize just before the one applied, each overwriting the
    /// previous: the applied write starts after each of them arrived and ends before each
    /// returns). Only writes of one kind combine; deletes go direct.
    pub(super) async fn modify_combined(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
    ) -> Result<bool, ChimeError> {
        self.check_value(value)?;
        let write = async |k: Kind, v: &[u8], pick: &mut Pick<'_, Entries>| {
            self.modify_picking(key, v, k.0, pick).await
        };
        let table = &self.node.delegation;
        table
            .write(self, &key.to_be_bytes(), Kind(change), value, write)
            .await
    }
}

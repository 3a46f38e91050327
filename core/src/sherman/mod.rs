//! Sherman: a write-optimized B-link tree on disaggregated memory.
//!
//! Compute nodes reach the tree only through one-sided verbs. The paper's mechanisms, each in
//! one place and each switchable ([`ShermanConfig`]) for the factor breakdown:
//!
//! - B-link pages with sibling pointers and fence keys, unsorted leaves (`tree.rs`), page
//!   format in `remora_layouts::sherman`;
//! - two-level versions: a non-split write writes back one entry (`two_level_versions`),
//!   otherwise the whole page;
//! - hierarchical on-chip lock (`lock.rs`): global lock table in NIC device memory
//!   (`onchip_locks`), local lock table with queued waiters and capped hand-over
//!   (`hierarchical_locks`);
//! - command combination: write-back and unlock in one doorbell (`combine_commands`);
//! - lock waits spin on the global CAS as the authors' code does (`spin_locks`); FG+ spins
//!   too, and its retry storm on hot host-memory words is what the paper measures;
//! - index cache of level-1 internal pages (`cache.rs`, `index_cache`);
//! - bulk loading, as the paper's evaluation loads its trees (`bulk.rs`: leaves 80% full,
//!   written chunk by chunk at memory speed, [`Sherman::bulk_load`]).
//!
//! [`ShermanConfig::fg_plus`] is the paper's FG+ baseline: one-sided locks in host memory,
//! whole-page write-back, no hand-over, no combination, with the index cache.
//!
//! Where remora differs from the authors' code, on purpose:
//!
//! - **Page consistency without segment order.** The authors' `front == rear` version check
//!   proves a whole page only if a READ moves its 64-byte segments in ascending order, which
//!   neither hardware nor the fabric contract promises (only aligned 8-byte words are atomic).
//!   Here every page a decision uses is verified by content, in any order: an internal page by
//!   a 64-bit hash of the whole page, a leaf by a hash of its header plus a checksum per entry
//!   bound to the page version (a whole-page write bumps the version and rebinds every slot),
//!   so a READ mixing two images of a split is re-read instead of missing a moved key. Format
//!   and argument: `remora_layouts::sherman`. Re-reads back off and end at a deadline
//!   (`lease`, see below).
//! - Writers rely only on per-queue-pair order of whole operations: a whole page is one
//!   WRITE; a split's new right page completes before the left page that links it is
//!   written, and that before the parent learns the separator; command combination puts the
//!   unlock behind the write-back on the same queue pair.
//! - Leaf entries store the value's length: `get` returns exactly the bytes upserted, and a
//!   buffer too small for them is [`ShermanError::BufferTooSmall`].
//!
//! # Dead clients and half-done changes
//!
//! A client can die at any verb. What it can leave behind, and who finishes it:
//!
//! - **A held lock.** Lock words are owned ([`crate::lease`]): `owner_word(client, tag)`
//!   with a fresh tag per acquisition. Waiters retry the CAS at once (`spin_locks`) or back
//!   off exponentially on the fabric clock; a word unchanged for a lease (`lease.lease_ns`, 1 s by default, see [`ShermanConfig`])
//!   has a dead holder, whom the waiter fences off the lock's memory node
//!   ([`crate::fabric::Endpoint::fence`]) and then CASes the word from the holder's to its own
//!   (`lock.rs`). The local lock table (coroutines of every thread of one compute node,
//!   [`ShermanNode`]) is unchanged; a handle never fences itself. A word that names no client, or a fabric that cannot fence (a node that
//!   refuses the fence), ends in [`ShermanError::LockHeld`] naming the word and holder after
//!   the deadline.
//! - **A page the holder was writing.** On the sim a crash drops a whole doorbell, so a page
//!   is either the old or the new image and the taker-over simply re-reads it: every write
//!   under a lock is one doorbell that also carries the unlock (command combination) or is
//!   followed by it, so a lock still held means the write-back either landed whole or never
//!   left. Deletes change only the entry's meta word (one aligned 8-byte WRITE, which no crash
//!   can tear). A page torn *inside* a WRITE (soft: a writer process killed in the middle of
//!   its copy — it happens, see `poller/tests/sherman_kill.rs`) fails its checks:
//!   - an **internal page** is re-derived (`rederive_internal`): under its lock (taken over
//!     if need be; by a reader once the page has failed for a lease, by a writer at once), from
//!     what never tears or is whole elsewhere — its level, low fence and leftmost child never
//!     change, its high fence is its sibling's low fence (the sibling word is the old or the
//!     new one, and a split's right page is whole before the left is written), its entries are
//!     the level below followed along sibling pointers from the leftmost child (each page's
//!     low fence is its separator). Garbage that does not look like a torn internal page
//!     stays an error.
//!   - a **leaf** is redone (`redo.rs`): every leaf write that can tear (an entry, a whole
//!     page, a split's left page) is preceded in its doorbell by a redo record (page,
//!     offset, new bytes, hash) in a slot of the writer's, and by an 8-byte WRITE of the
//!     slot's address into the lock's redo pointer (one word per lock word, in a table on
//!     the lock's node). By per-queue-pair order a torn leaf has a whole record that its
//!     lock's pointer names, and it is the only leaf under that lock that can be torn; so
//!     whoever takes the lock over (`acquire_page`) re-applies that record first if its page
//!     does not verify — the dead writer's write, completed (it was never acknowledged, so
//!     either outcome is linearizable; every acknowledged write under the lock had completed
//!     before it). A reader that finds a leaf torn for a lease (of time it watched,
//!     `crate::lease`'s "Stalls") takes its lock to the same end; it notes the lock word
//!     when it first finds the leaf torn, so the lock is taken over once that word has not
//!     changed for one lease of watching (not a lease more). The leaf
//!     content cannot be re-derived instead: an in-place entry write destroys the old value,
//!     and a split's compaction moves entries between slots. The design
//!     first written here named the slot by the lock word's tag (a per-handle log); the
//!     per-lock pointer needs no registry of handles and no bits of the tag, and survives
//!     local hand-overs (one word, several writers in turn). A FG+ write-back's record is
//!     only the changed entry and the page's new version: every other word of its new image
//!     equals the old one but for the version-bound checksums, so the page is rebuilt from
//!     the torn image (`redo.rs`). Cost: the record and the pointer travel in the
//!     write-back's doorbell (no extra round trip or doorbell): an 8-byte-value update sends
//!     64 more bytes (with the lock CAS and unlock, Sherman 48 → 112 B, FG+ with 1 KiB pages
//!     1048 → 1112 B); a split's record is its whole left page.
//! - **A split whose separator never reached the parent.** Readers move right along the
//!   sibling pointer (B-link). The first writer whose descent was routed by a parent to a
//!   page that does not cover its key (a walk with no index cache) inserts that page's
//!   sibling and high fence into the parent (`link_missing`, idempotent).
//! - **A root that split but was never grown.** Whoever reads the published root and finds
//!   it has a right sibling grows a new root above the two (the descriptor CAS lets one
//!   grower win; the loser's separator insert finds it linked).
//! - **Every wait is bounded** by the lease config's back-off and deadline on
//!   [`crate::fabric::Endpoint::now_ns`] (and by `lock_retries` attempts on a fabric without
//!   a clock; a spinning lock wait on a fabric with a clock by the deadline only): [`ShermanError::LockHeld`] and [`ShermanError::Unsettled`] name what was
//!   waited for, where, by whom, and how long.
//!
//! `poller/tests/sherman_crash.rs` kills a client at every doorbell of a root split, a leaf
//! split, an update, a delete and a lookup (Sherman and FG+, several seeds) while three
//! others run lincheck workloads: every survivor finishes, the history is linearizable, and
//! [`RepairStats`] shows takeovers, linked separators and grown roots.
//! `poller/tests/sherman_torn.rs` tears a leaf write half-way (any subset of its changed
//! words) before killing its writer, and shows the leaf redone; `sherman_kill.rs` does the
//! same with real writer processes killed by SIGKILL.
//!
//! Cost of the verification. Bytes: none on the wire or in the page (the checksum takes a
//! reserved header word, the value length shares the entry meta word with a 7-bit entry
//! version); a whole-page write is one WRITE instead of three (same bytes, two work requests
//! fewer). CPU per READ used for a decision: one hash pass over an internal page, and over
//! every slot of a leaf (a "not found" is a decision too, so every slot is verified), except
//! for a lookup that finds its key: its slot and the header verify alone (`read.rs`
//! `find_live`). On a
//! 1 KiB page with 8-byte values (`verification_cost_per_read` in `poller/tests/sherman/costs.rs`,
//! release build, a shared 2-core machine): leaf ≈ 185 ns (the old check: ≈ 30 ns),
//! internal page ≈ 118 ns (≈ 7 ns); with the index cache a lookup verifies one leaf, a
//! descent one internal page per level. A FG+ write-back also rebinds every slot to the new
//! version (one hash pass).
mod bulk;
mod cache;
mod hooks;
mod local;
mod lock;
mod node;
mod open;
mod pace;
mod read;
mod redo;
mod repair;
mod tree;
mod wait;
mod warm;
mod write;

pub use crate::bulk::WarmStats;
pub use bulk::{BulkEntry, BulkStats, PAPER_FILL_PERCENT};
pub use cache::{CacheCharge, CacheEviction, LIVE_ENTRY_BYTES, LIVE_PAGE_BYTES};
pub(crate) use hooks::Batch;
pub use node::ShermanNode;
pub use tree::{RepairStats, Sherman, ShermanStats};
pub(crate) use wait::Patience;

use crate::alloc::AllocError;
use crate::fabric::FabricError;
use crate::lease::LeaseConfig;
use core::fmt;
use remora_layouts::{GlobalAddr, LayoutError};

/// The tree's shape and which of the paper's techniques are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShermanConfig {
    /// Bytes of a page, leaf or internal (1 KiB by default).
    pub page_size: usize,
    /// Bytes of a leaf entry's value; values are at most this long.
    pub value_size: usize,
    /// Global locks in the memory node's device memory (else a lock table in host memory).
    pub onchip_locks: bool,
    /// Local lock table per compute node ([`ShermanNode`], shared by the node's handles):
    /// waiters queue locally and the lock is handed over, between threads too.
    pub hierarchical_locks: bool,
    /// At most this many hand-overs in a row before the global lock is released. 7 in
    /// [`ShermanConfig::sherman`]: the authors' HOCL serves at most `kMaxHandOverTime` = 8
    /// holders per global acquisition, the one that CASed it included (thustorage/Sherman
    /// include/Common.h; src/Tree.cpp: `acquire_local_lock` counts every holder in
    /// `hand_time`, `can_hand_over` hands over while `hand_time < kMaxHandOverTime` and
    /// resets it at a release), so 7 hand-overs.
    pub handover_cap: u32,
    /// Write-back and unlock posted in one doorbell.
    pub combine_commands: bool,
    /// A failed global lock CAS is retried at once, as the authors' `try_lock_addr` does (it
    /// loops on the CAS with no pause), instead of backing off exponentially: the retry storm
    /// that seeds/002 §1 blames for the one-sided locks' collapse ("such locks always trigger
    /// unnecessary retries, which consumes RDMA IOPS"). Every failed CAS holds the word in
    /// the memory node's atomic unit and, by per-queue-pair order, delays the verbs behind it
    /// on its queue pair. With `hierarchical_locks` at most one coroutine per compute node
    /// spins on a word. Waits still end by lease and deadline on the fabric clock (the attempt cap
    /// bounds them only on a fabric without a clock).
    pub spin_locks: bool,
    /// remora's idea (CHIME's `--with paced-locks`; off in [`ShermanConfig::sherman`]): a
    /// failed global lock CAS is retried after one round trip, timed on that CAS, so a
    /// waiter sends half the CASes of a spinning one (`pace.rs`); overrides `spin_locks`.
    pub paced_locks: bool,
    /// Non-split writes write back one entry (else the whole page).
    pub two_level_versions: bool,
    /// Cache level-1 internal pages on the compute node (and the pages above them with
    /// `cache_upper_levels`).
    pub index_cache: bool,
    /// Capacity of the index cache in bytes (with `index_cache`), per compute node.
    pub cache_bytes: usize,
    /// Region-header root slot that publishes the tree.
    pub root_slot: usize,
    /// Leases, back-off and deadlines of every wait (locks, re-reads of a page that does not
    /// verify), on the fabric clock; see [`crate::lease`]. The default lease is 1 s, a
    /// hundred times [`LeaseConfig::default_lease`]: the lease is wall-clock time on soft and
    /// verbs, and on a loaded machine (the test machine: 2 cores, load average above 20) a
    /// live holder preempted in its critical section was seen holding for 135 ms — at 10 ms
    /// or 100 ms such holders were fenced and their operations failed. A dead holder costs
    /// its waiters about one lease; set a shorter one where holders are never preempted
    /// (the sim campaign uses 1 ms of virtual time).
    pub lease: LeaseConfig,
    /// Attempts cap of every wait, for fabrics without a clock (the lease's `max_attempts`).
    pub lock_retries: u32,
    /// How readers prove a page image whole (always [`PageCheck::Checksums`] outside tests).
    pub page_check: PageCheck,
    /// What a cached page costs against `cache_bytes`: the whole page (Sherman's), or its
    /// live entries as CHIME's authors count them (CHIME's experiment).
    pub cache_charge: CacheCharge,
    /// Which cached page makes room for a new one: round-robin (Sherman's, remora's), or two
    /// sampled pages' less-used one, as CHIME's authors' tree cache evicts
    /// ([`CacheEviction::SampledLfu`], `include/TreeCache.h` `evict_one`; their Sherman
    /// baseline is the same code). Round-robin in [`ShermanConfig::sherman`].
    pub cache_eviction: CacheEviction,
    /// The index cache also holds the internal pages above level 1, so a lookup whose
    /// level-1 page is not cached starts at the lowest cached page covering its key, not at
    /// the root: CHIME's authors' `CACHE_MORE_INTERNAL_NODE` (`CMakeLists.txt`, on by
    /// default and left on by every run of `exp/params/common.json`, their Sherman baseline
    /// included; `include/TreeCache.h`, `src/Tree.cpp` `cache_node`). Off in
    /// [`ShermanConfig::sherman`]: Sherman's own index cache holds level-1 pages.
    pub cache_upper_levels: bool,
}

/// How a reader proves that a READ saw one page image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
// The hidden variant is a test mutant, not a reserved extension point.
#[allow(clippy::manual_non_exhaustive)]
pub enum PageCheck {
    /// Page checksum and entries bound to the page version: holds in any segment order.
    #[default]
    Checksums,
    /// MUTANT, for tests only: the authors' check, `front == rear` with pages written rear
    /// first, body, front last (three ordered WRITEs) and entries not bound to the page
    /// version. Sound only if every READ moves its segments in ascending order. Hidden from
    /// the docs: not part of the API, compiled for the conformance suite's mutant tests.
    #[cfg(any(test, feature = "conformance"))]
    #[doc(hidden)]
    FrontRearOnly,
}

impl ShermanConfig {
    /// Sherman with every technique on (1 KiB pages, 8-byte values).
    pub const fn sherman() -> ShermanConfig {
        ShermanConfig {
            page_size: 1024,
            value_size: 8,
            onchip_locks: true,
            hierarchical_locks: true,
            handover_cap: 7,
            combine_commands: true,
            spin_locks: true,
            paced_locks: false,
            two_level_versions: true,
            index_cache: true,
            cache_bytes: 64 << 20,
            // SMART publishes in slot 1: both trees can share a memory node.
            root_slot: 2,
            lease: LeaseConfig {
                lease_ns: 1_000_000_000,
                deadline_ns: 30_000_000_000,
                ..LeaseConfig::default_lease()
            },
            lock_retries: 1_000_000,
            page_check: PageCheck::Checksums,
            cache_charge: CacheCharge::WholePage,
            cache_eviction: CacheEviction::RoundRobin,
            cache_upper_levels: false,
        }
    }

    /// The FG+ baseline: host-memory locks (its CAS retried at once, as in the authors' code),
    /// whole-page write-back, no hand-over, no combination; with the index cache.
    pub const fn fg_plus() -> ShermanConfig {
        ShermanConfig {
            onchip_locks: false,
            hierarchical_locks: false,
            combine_commands: false,
            two_level_versions: false,
            ..ShermanConfig::sherman()
        }
    }
}

impl Default for ShermanConfig {
    fn default() -> Self {
        ShermanConfig::sherman()
    }
}

/// Errors of Sherman (and FG+) operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShermanError {
    /// The fabric failed a request.
    Fabric(FabricError),
    /// The remote allocator could not provide memory for a new page.
    Alloc(AllocError),
    /// Sherman keys are 8-byte integers (big-endian bytes), below u64::MAX.
    BadKey {
        /// The key's length in bytes (must be 8).
        len: usize,
    },
    /// A value longer than the tree's value size.
    ValueTooLong {
        /// The value's length in bytes.
        len: usize,
        /// The tree's value size.
        max: usize,
    },
    /// `get`'s output buffer is smaller than the value.
    BufferTooSmall {
        /// Bytes of the value.
        need: usize,
        /// Bytes of the buffer given.
        got: usize,
    },
    /// The configuration does not form a valid page geometry.
    Config(LayoutError),
    /// A page or descriptor that stays undecodable after every re-read.
    Corrupt {
        /// Where the page or descriptor lives.
        addr: GlobalAddr,
        /// Why it did not decode.
        why: LayoutError,
    },
    /// A lock still held past the deadline: by `holder` (the client named by `word`), which
    /// could not be fenced (the fabric cannot, or the word names no client), or by a coroutine
    /// of this handle (`word` 0: the local queue).
    LockHeld {
        /// The lock word's address.
        lock: GlobalAddr,
        /// The fabric client id the lock word names.
        holder: u32,
        /// The lock word as last read.
        word: u64,
        /// Nanoseconds waited (fabric clock) before giving up.
        waited_ns: u64,
    },
    /// No tree is published in the root slot, or it was made with another geometry.
    NoTree {
        /// The region-header root slot looked in.
        slot: usize,
    },
    /// The tree did not settle by the deadline (e.g. a sibling chain that never reaches the
    /// key): what, where, and for how long it was waited for.
    Unsettled {
        /// What was waited for.
        what: &'static str,
        /// The page where it was waited for.
        at: GlobalAddr,
        /// Nanoseconds waited (fabric clock).
        waited_ns: u64,
    },
    /// A bulk load refused: its input or the tree it was given (see `bulk.rs`).
    Bulk {
        /// Why the bulk load was refused.
        what: &'static str,
    },
}

impl From<FabricError> for ShermanError {
    fn from(e: FabricError) -> Self {
        ShermanError::Fabric(e)
    }
}

impl From<AllocError> for ShermanError {
    fn from(e: AllocError) -> Self {
        match e {
            AllocError::Fabric(f) => ShermanError::Fabric(f),
            other => ShermanError::Alloc(other),
        }
    }
}

impl fmt::Display for ShermanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShermanError::Fabric(e) => write!(f, "sherman: {e}"),
            ShermanError::Alloc(e) => write!(f, "sherman: {e}"),
            ShermanError::BadKey { len } => {
                write!(
                    f,
                    "sherman keys are 8-byte big-endian integers below u64::MAX (got {len} bytes)"
                )
            }
            ShermanError::ValueTooLong { len, max } => {
                write!(
                    f,
                    "sherman: value of {len} bytes exceeds the tree's value size {max}"
                )
            }
            ShermanError::BufferTooSmall { need, got } => {
                write!(
                    f,
                    "sherman: value of {need} bytes does not fit the {got}-byte buffer"
                )
            }
            ShermanError::Config(e) => write!(f, "sherman configuration: {e}"),
            ShermanError::Corrupt { addr, why } => {
                write!(f, "sherman page at {addr} unreadable: {why}")
            }
            ShermanError::LockHeld {
                lock,
                holder,
                word,
                waited_ns,
            } => {
                write!(
                    f,
                    "sherman lock {lock} held by client {holder} (word {word:#018x}) for \
                     {waited_ns} ns and it could not be fenced"
                )
            }
            ShermanError::NoTree { slot } => {
                write!(f, "sherman: no tree with this geometry in root slot {slot}")
            }
            ShermanError::Unsettled {
                what,
                at,
                waited_ns,
            } => write!(f, "sherman: {what} at {at}, still after {waited_ns} ns"),
            ShermanError::Bulk { what } => write!(f, "sherman: {what}"),
        }
    }
}

impl core::error::Error for ShermanError {}

/// Sherman's route through an internal page (`route_for`, what the sim charges as
/// `Work::Compare`), for `remora perf --cpu-calibration`, which times this real code path
/// rather than a copy of it. Returns the child's raw address. Not part of the API.
#[doc(hidden)]
pub fn calibrate_route(
    page: &[u8],
    g: &remora_layouts::sherman::Geometry,
    h: &remora_layouts::sherman::PageHeader,
    key: u64,
) -> Option<u64> {
    let r = cache::route_for(page, g, h, key)?;
    Some(core::hint::black_box(&r).child.raw())
}

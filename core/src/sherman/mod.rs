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
//! - index cache of level-1 internal pages (`cache.rs`, `index_cache`).
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
//!   and argument: `remora_layouts::sherman`. Re-reads are bounded (`read_retries`).
//! - Writers rely only on per-queue-pair order of whole operations: a whole page is one
//!   WRITE; a split's new right page completes before the left page that links it is
//!   written, and that before the parent learns the separator; command combination puts the
//!   unlock behind the write-back on the same queue pair.
//! - Leaf entries store the value's length: `get` returns exactly the bytes upserted, and a
//!   buffer too small for them is [`ShermanError::BufferTooSmall`].
//!
//! Cost of the verification. Bytes: none on the wire or in the page (the checksum takes a
//! reserved header word, the value length shares the entry meta word with a 7-bit entry
//! version); a whole-page write is one WRITE instead of three (same bytes, two work requests
//! fewer). CPU per READ used for a decision: one hash pass over an internal page, and over
//! every slot of a leaf (a "not found" is a decision too, so every slot is verified). On a
//! 1 KiB page with 8-byte values (`verification_cost_per_read` in `poller/tests/sherman.rs`,
//! release build, a shared 2-core machine): leaf ≈ 185 ns (the old check: ≈ 30 ns),
//! internal page ≈ 118 ns (≈ 7 ns); with the index cache a lookup verifies one leaf, a
//! descent one internal page per level. A FG+ write-back also rebinds every slot to the new
//! version (one hash pass).
mod cache;
mod lock;
mod tree;

pub use tree::Sherman;

use crate::alloc::AllocError;
use crate::fabric::FabricError;
use core::fmt;
use remora_layouts::{GlobalAddr, LayoutError};

/// The tree's shape and which of the paper's techniques are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShermanConfig {
    pub page_size: usize,
    pub value_size: usize,
    /// Global locks in the memory node's device memory (else a lock table in host memory).
    pub onchip_locks: bool,
    /// Local lock table per handle: waiters queue locally and the lock is handed over.
    pub hierarchical_locks: bool,
    /// At most this many hand-overs in a row before the global lock is released.
    pub handover_cap: u32,
    /// Write-back and unlock posted in one doorbell.
    pub combine_commands: bool,
    /// Non-split writes write back one entry (else the whole page).
    pub two_level_versions: bool,
    /// Cache level-1 internal pages on the compute node.
    pub index_cache: bool,
    pub cache_bytes: usize,
    /// Region-header root slot that publishes the tree.
    pub root_slot: usize,
    /// Re-reads of a torn page before giving up with an error.
    pub read_retries: u32,
    /// CMP_AND_SWP attempts on a held lock before giving up (a dead holder).
    pub lock_retries: u32,
    /// How readers prove a page image whole (always [`PageCheck::Checksums`] outside tests).
    pub page_check: PageCheck,
}

/// How a reader proves that a READ saw one page image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageCheck {
    /// Page checksum and entries bound to the page version: holds in any segment order.
    #[default]
    Checksums,
    /// MUTANT, for tests only: the authors' check, `front == rear` with pages written rear
    /// first, body, front last (three ordered WRITEs) and entries not bound to the page
    /// version. Sound only if every READ moves its segments in ascending order.
    #[cfg(any(test, feature = "conformance"))]
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
            handover_cap: 8,
            combine_commands: true,
            two_level_versions: true,
            index_cache: true,
            cache_bytes: 64 << 20,
            // SMART publishes in slot 1: both trees can share a memory node.
            root_slot: 2,
            read_retries: 10_000,
            lock_retries: 1_000_000,
            page_check: PageCheck::Checksums,
        }
    }

    /// The FG+ baseline: host-memory locks, whole-page write-back, no hand-over, no
    /// combination; with the index cache.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShermanError {
    Fabric(FabricError),
    Alloc(AllocError),
    /// Sherman keys are 8-byte integers (big-endian bytes), below u64::MAX.
    BadKey {
        len: usize,
    },
    /// A value longer than the tree's value size.
    ValueTooLong {
        len: usize,
        max: usize,
    },
    /// `get`'s output buffer is smaller than the value.
    BufferTooSmall {
        need: usize,
        got: usize,
    },
    /// The configuration does not form a valid page geometry.
    Config(LayoutError),
    /// A page or descriptor that stays undecodable after every re-read.
    Corrupt {
        addr: GlobalAddr,
        why: LayoutError,
    },
    /// A lock still held after every attempt: its holder is dead or stuck.
    LockTimeout {
        lock: GlobalAddr,
    },
    /// No tree is published in the root slot, or it was made with another geometry.
    NoTree {
        slot: usize,
    },
    /// The tree did not settle (e.g. a root change never became visible).
    Retries {
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
                    "value of {len} bytes exceeds the tree's value size {max}"
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
            ShermanError::LockTimeout { lock } => {
                write!(
                    f,
                    "sherman lock {lock} still held after every retry (dead holder?)"
                )
            }
            ShermanError::NoTree { slot } => {
                write!(f, "no sherman tree with this geometry in root slot {slot}")
            }
            ShermanError::Retries { what } => write!(f, "sherman: gave up retrying: {what}"),
        }
    }
}

impl core::error::Error for ShermanError {}

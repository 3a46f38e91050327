//! The small merging CHIME of the merge tests (`chime_merge`, `chime_reuse`): 256-byte pages
//! (so a few hundred keys make many leaves), merges on, a 1 MiB cache, the given lease and
//! deadline and test mutation. Keys are `k(i)`: 8-byte big-endian multiples of 1000, so
//! leaves hold contiguous runs and a deleted range empties whole leaves.
//!
//! Included by the tests that use it (`#[path = "common/chime_small.rs"] mod chime_small;`).
use remora_core::chime::{ChimeConfig, Mutation};
use remora_core::lease::LeaseConfig;

/// CHIME as its authors build it, with merges and 256-byte pages, leases of `lease_ns`
/// ending by `deadline_ns`, and `mutation` (none for the real thing).
pub fn merging(lease_ns: u64, deadline_ns: u64, mutation: Mutation) -> ChimeConfig {
    let mut c = ChimeConfig::chime();
    c.merge = true;
    c.sherman.page_size = 256;
    c.sherman.lease = LeaseConfig {
        lease_ns,
        deadline_ns,
        ..LeaseConfig::default()
    };
    c.mutation = mutation;
    c.with_cache(1 << 20)
}

/// The `i`-th key.
pub fn k(i: u64) -> [u8; 8] {
    (i * 1000).to_be_bytes()
}

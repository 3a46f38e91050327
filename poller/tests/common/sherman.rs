//! Sherman and FG+ configured for the sim crash tests (`sherman_crash`, `sherman_torn`).
//!
//! Included by the tests that use it (`#[path = "common/sherman.rs"] mod sherman;`).
use remora_core::lease::LeaseConfig;
use remora_core::sherman::{RepairStats, ShermanConfig};

/// `base` with 256-byte pages and leases of `lease_ns` (given up after 50 leases).
pub fn tree_cfg(base: ShermanConfig, lease_ns: u64) -> ShermanConfig {
    ShermanConfig {
        page_size: 256,
        lease: LeaseConfig {
            lease_ns,
            deadline_ns: 50 * lease_ns,
            ..LeaseConfig::default()
        },
        ..base
    }
}

/// The repairs of `a` and `b`, summed.
pub fn add_repairs(a: RepairStats, b: RepairStats) -> RepairStats {
    RepairStats {
        takeovers: a.takeovers + b.takeovers,
        separators_linked: a.separators_linked + b.separators_linked,
        roots_grown: a.roots_grown + b.roots_grown,
        pages_rederived: a.pages_rederived + b.pages_rederived,
        leaves_redone: a.leaves_redone + b.leaves_redone,
    }
}

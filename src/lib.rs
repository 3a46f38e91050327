//! remora: one-sided RDMA index structures.
//!
//! The facade re-exports the workspace crates; with feature `verbs` it also holds the real
//! verbs fabric over rdma-core.
pub use remora_core as core;
pub use remora_layouts as layouts;
pub use remora_pmem as pmem;
pub use remora_poller as poller;

pub mod node;

#[cfg(feature = "verbs")]
pub mod verbs;

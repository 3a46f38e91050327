//! remora-poller: where remora's code meets threads, memory and time.
//!
//! - [`executor`]: the pinned run-to-completion executor (N coroutines per worker thread).
//! - [`frames`]: where a thread's coroutines live (registered memory under verbs).
//! - [`clock`]: a cheap monotonic clock for latency figures.
//! - [`progress`]: per-round hooks the executors call (a verbs thread's completion queues).
//! - [`arena`]: hugepage-backed memory (MAP_HUGETLB, else THP, else 4 KiB pages).
//! - [`soft`]: the shared-memory fabric and its memory node.
//! - [`sim`]: the deterministic simulated cluster fabric.
// Docs link private items on purpose (for readers of the source, and of
// `cargo doc --document-private-items`); broken links stay errors.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(missing_docs)]
pub mod arena;
pub mod clock;
pub mod executor;
pub mod frames;
pub mod progress;
pub mod sim;
pub mod soft;

//! remora-poller: where remora's code meets threads, memory and time.
//!
//! - [`executor`]: the pinned run-to-completion executor (N coroutines per worker thread).
//! - [`arena`]: hugepage-backed memory arenas (MAP_HUGETLB, else THP, else 4 KiB pages).
//! - [`soft`]: the shared-memory fabric and its memory node.
//! - [`sim`]: the deterministic simulated cluster fabric.
pub mod sim;

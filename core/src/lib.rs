//! remora-core: the fabric contract and the algorithms that run over it.
//!
//! `no_std`, with an `alloc` feature. This crate never touches a socket, a syscall or a
//! clock: it asks the fabric. The same index code therefore runs on a NIC (verbs), on shared
//! memory (soft) and in virtual time (sim).
//!
//! - [`fabric`]: work requests, the [`fabric::QueuePair`] and [`fabric::Endpoint`] traits, errors.
//! - [`counters`]: per-queue-pair operation counters, the hardware-independent figures.
//! - [`alloc`]: the remote allocator client (chunks by FETCH_AND_ADD, objects carved locally).
//! - [`barrier`]: a barrier held in a memory node, to start compute-node processes together.
//! - [`lease`]: owned remote locks with leases, fencing and takeover of a dead holder.
#![cfg_attr(
    feature = "conformance",
    doc = "- [`conformance`] (feature `conformance`): the suite every fabric must pass."
)]
#![cfg_attr(
    not(feature = "conformance"),
    doc = "- `conformance` (feature `conformance`): the suite every fabric must pass."
)]
#![cfg_attr(
    any(test, feature = "conformance"),
    doc = "- [`testing`] (feature `conformance`, and core's own tests): the pieces of \
           in-memory test fabrics that tests share."
)]
//!
//! The indexes (feature `alloc`), each a client handle over an [`Endpoint`] implementing
//! [`index::KvIndex`] (except Catfish, a spatial index):
//!
// Modules behind a feature are linked only when they exist, so `cargo doc` passes with
// any features.
#![cfg_attr(
    feature = "alloc",
    doc = "- [`smart`]: SMART, the adaptive radix tree of disaggregated memory;"
)]
#![cfg_attr(
    not(feature = "alloc"),
    doc = "- `smart`: SMART, the adaptive radix tree of disaggregated memory;"
)]
#![cfg_attr(
    feature = "alloc",
    doc = "- [`sherman`]: Sherman, the write-optimized B+tree (and its FG+ baseline);"
)]
#![cfg_attr(
    not(feature = "alloc"),
    doc = "- `sherman`: Sherman, the write-optimized B+tree (and its FG+ baseline);"
)]
#![cfg_attr(
    feature = "alloc",
    doc = "- [`canrt`]: CANRT, the persistent radix tree whose memory node applies appends;"
)]
#![cfg_attr(
    not(feature = "alloc"),
    doc = "- `canrt`: CANRT, the persistent radix tree whose memory node applies appends;"
)]
#![cfg_attr(
    feature = "alloc",
    doc = "- [`erda`]: Erda, the log-structured hash store on remote NVM (and its baselines);"
)]
#![cfg_attr(
    not(feature = "alloc"),
    doc = "- `erda`: Erda, the log-structured hash store on remote NVM (and its baselines);"
)]
#![cfg_attr(
    feature = "alloc",
    doc = "- [`catfish`]: Catfish's R-trees, with fast messaging and RDMA offloading;"
)]
#![cfg_attr(
    not(feature = "alloc"),
    doc = "- `catfish`: Catfish's R-trees, with fast messaging and RDMA offloading;"
)]
#![cfg_attr(
    feature = "alloc",
    doc = "- [`wort`]: WORT and WOART behind a server-reply ring, CANRT's baselines."
)]
#![cfg_attr(
    not(feature = "alloc"),
    doc = "- `wort`: WORT and WOART behind a server-reply ring, CANRT's baselines."
)]
//!
//! Applications do not drive these handles directly: the root crate's `remora::node`
//! runtime opens them on pinned poller threads and hands out thread-safe handles. Keys are
//! byte strings compared in byte order, so integer keys are passed big-endian:
//!
//! ```
//! let (a, b) = (2u64.to_be_bytes(), 10u64.to_be_bytes());
//! assert!(a < b, "byte order is numeric order for big-endian keys");
//! let addr = remora_core::GlobalAddr::new(1, 4096);
//! assert_eq!((addr.node(), addr.offset()), (1, 4096));
//! ```
// Docs link private items on purpose (for readers of the source, and of
// `cargo doc --document-private-items`); broken links stay errors.
#![allow(rustdoc::private_intra_doc_links)]
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc as std_alloc;

pub mod alloc;
pub mod barrier;
pub mod block_on;
#[cfg(feature = "alloc")]
pub mod bulk;
#[cfg(feature = "alloc")]
pub mod canrt;
#[cfg(feature = "alloc")]
pub mod catfish;
#[cfg(feature = "alloc")]
pub mod chime;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod counters;
#[cfg(feature = "alloc")]
pub(crate) mod delegation;
pub mod echo;
#[cfg(feature = "alloc")]
pub mod erda;
pub mod fabric;
pub mod index;
#[cfg(feature = "conformance")]
pub mod kvcheck;
pub mod lease;
#[cfg(feature = "conformance")]
pub mod lincheck;
#[cfg(feature = "alloc")]
pub mod server;
#[cfg(feature = "alloc")]
pub mod sherman;
pub mod smart;
#[cfg(any(test, feature = "conformance"))]
pub mod testing;
pub mod work;
#[cfg(feature = "alloc")]
pub mod wort;

pub use counters::{Counters, Snapshot};
pub use fabric::{Endpoint, FabricError, Op, QueuePair, Recv, RecvKind, SegmentOrder, Work};
pub use remora_layouts::{GlobalAddr, NodeId};

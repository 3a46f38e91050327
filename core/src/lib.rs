//! remora-core: the fabric contract and the algorithms that run over it.
//!
//! `no_std`, with an `alloc` feature. This crate never touches a socket, a syscall or a
//! clock: it asks the fabric. The same index code therefore runs on a NIC (verbs), on shared
//! memory (soft) and in virtual time (sim).
//!
//! - [`fabric`]: work requests, the [`fabric::QueuePair`] and [`fabric::Endpoint`] traits, errors.
//! - [`counters`]: per-queue-pair operation counters, the hardware-independent figures.
//! - [`alloc`]: the remote allocator client (chunks by FETCH_AND_ADD, objects carved locally).
//! - [`lease`]: owned remote locks with leases, fencing and takeover of a dead holder.
//! - [`conformance`] (feature `conformance`): the suite every fabric must pass.
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc as std_alloc;

pub mod alloc;
pub mod block_on;
#[cfg(feature = "alloc")]
pub mod canrt;
#[cfg(feature = "alloc")]
pub mod catfish;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod counters;
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
pub mod watched;
pub mod work;
#[cfg(feature = "alloc")]
pub mod wort;

pub use counters::{Counters, Snapshot};
pub use fabric::{Endpoint, FabricError, Op, QueuePair, Recv, RecvKind, SegmentOrder, Work};
pub use remora_layouts::{GlobalAddr, NodeId};

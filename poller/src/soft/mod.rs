//! The soft fabric: RDMA semantics over shared memory, for threads and processes of one
//! machine.
//!
//! A [`SoftMemoryNode`] owns a host region (and device memory) in memfd-backed shared memory.
//! Clients of the same process get queue pairs with [`SoftMemoryNode::qp`]; other processes
//! connect to a `remora memnode` through its Unix control socket ([`control::connect`]) and
//! map the same memory. Either way a [`SoftQp`] behaves like an RC queue pair:
//!
//! - READ/WRITE move 8-byte words in address order with atomic loads/stores ([`words`]), so
//!   concurrent transfers tear between words, never inside one;
//! - CMP_AND_SWP/FETCH_AND_ADD are real 8-byte atomics, refused when misaligned;
//! - every access is checked against the region bounds and the current region key before it
//!   touches memory; a failure breaks the queue pair, as on a NIC;
//! - ops of one queue pair take effect in posting order (fences between ops);
//! - SEND and WRITE_WITH_IMM notices go through bounded receive rings ([`ring`]).
//!
//! What the soft fabric cannot model: the memory of a crashed memnode process stays mapped in
//! its clients (one-sided ops keep working; two-sided ones report the peer dead), and its
//! latency is that of the CPU cache, not of a network (use the sim fabric for that).
pub mod control;
pub mod harness;
mod node;
mod qp;
mod ring;
#[cfg(loom)]
mod ring_loom;
pub mod words;

pub use node::{NodeConfig, ServerHandle, SoftMemoryNode};
pub use qp::{CLIENT_PEER, RNR_TIMEOUT, SoftEndpoint, SoftQp};

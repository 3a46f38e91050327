//! The soft fabric: RDMA semantics over shared memory, for threads and processes of one
//! machine.
//!
//! A [`SoftMemoryNode`] owns a host region (and device memory) in memfd-backed shared memory.
//! Clients of the same process get queue pairs with [`SoftMemoryNode::qp`]; other processes
//! connect to a `remora memnode` through its Unix control socket ([`control::connect`]) and
//! map the same memory. Either way a [`SoftQp`] behaves like an RC queue pair:
//!
//! - READ/WRITE move 8-byte words with atomic loads/stores ([`words`]), their 64-byte segments
//!   in the queue pair's `SegmentOrder` (shuffled by default), so concurrent transfers tear
//!   between words, never inside one, in any order;
//! - CMP_AND_SWP/FETCH_AND_ADD are real 8-byte atomics, refused when misaligned;
//! - every access is checked against the region bounds and the current region key before it
//!   touches memory; a failure breaks the queue pair, as on a NIC;
//! - ops of one queue pair take effect in posting order (fences between ops);
//! - SEND and WRITE_WITH_IMM notices go through bounded receive rings (`ring.rs`).
//!
//! - a dead peer process is reported as `RetryExceeded` on every verb, one-sided ones
//!   included, within a few milliseconds ([`watchdog`]), as a NIC reports it after its ack
//!   timeout.
//! - a slow peer is not a dead one: a memory node keeps the replies a client has no receive
//!   for (in order, `SoftQp::send_or_queue`) instead of waiting on it or dropping it; only
//!   evidence ends a connection (the peer hung up or died, or was fenced);
//! - long waits sleep on futexes in the shared memory and their peer wakes them (a receive
//!   on its ring's tail, an idle memory-node thread on the node's doorbell); the waker makes
//!   a syscall only when someone sleeps (`futex.rs`); a pause on a thread whose executor
//!   drives timers (a compute node's poller) sleeps on its timer list, not in a yield loop
//!   ([`timer`]);
//! - a memory node that ends a connection because its service refused a message says why
//!   to that client (the reason travels over the control socket); one started with a key
//!   file admits only clients that send its secret ([`auth`]).
//!
//! What the soft fabric cannot model: the latency of a network (it is that of the CPU cache;
//! use the sim fabric for that). The memory of a crashed memnode process stays mapped in its
//! clients, but their queue pairs stop using it once the watchdog has seen the death.
pub mod auth;
#[cfg(test)]
mod auth_tests;
pub mod control;
#[cfg(test)]
mod farewell_tests;
mod futex;
pub mod harness;
mod node;
mod nvm;
#[cfg(test)]
mod nvm_tests;
mod qp;
mod ring;
#[cfg(loom)]
mod ring_loom;
#[cfg(test)]
mod rnr_tests;
mod serve;
pub mod timer;
pub mod watchdog;
pub mod words;

pub use node::{Backing, NodeConfig, Opened, ServeMode, ServerHandle, SoftMemoryNode};
pub use qp::{CLIENT_PEER, RnrPolicy, SoftEndpoint, SoftQp};

//! The real verbs fabric: rdma-core through bindgen bindings (see the root `build.rs`).
//!
//! - [`VerbsEndpoint`] / [`VerbsQp`]: the client side of the fabric contract
//!   (`remora_core::fabric`) over RC queue pairs set up by rdma_cm.
//! - [`Memnode`]: the memory node: a registered region with the region header at offset 0,
//!   device memory (`ibv_alloc_dm`, or host memory where the NIC has none), an rdma_cm
//!   listener and the echo service.
//! - [`probe`]: finds a device and checks it is usable, so that the common failures (no
//!   device, no permission, port down) get a one-line message naming what to check.
//! - [`check`]: the conformance-suite harness against a running memory node.
//!
//! Local buffers are ordinary slices: WRITE/SEND payloads up to the inline limit go inside
//! the work request; a buffer in the endpoint's registered memory (its pool, or a coroutine's
//! frame: see [`VerbsEndpoint`]) is used in place; anything else is bounced through
//! registered staging memory owned by the queue pair (see [`qp`]). [`fake`] is a device that
//! completes work requests in memory, for measuring the data path's CPU without a NIC.
//! Connection set-up uses only rdma_cm and its private data ([`wire`]).
pub(crate) mod arena;
pub mod check;
pub mod clock;
mod cm;
pub mod device;
pub mod endpoint;
pub mod error;
pub mod fake;
mod fence;
#[cfg(test)]
mod frames_tests;
#[cfg(test)]
mod idle_tests;
pub mod memnode;
mod mr;
mod offthread;
pub mod pool;
pub mod qp;
pub mod stats;
pub mod timer;
#[cfg(test)]
mod waits_tests;
// Raw bindgen bindings: an implementation detail, not the crate's API.
pub(crate) mod sys;
pub mod wire;

pub use arena::PageKind;
pub use device::{DeviceSummary, probe};
pub use endpoint::{
    ConnectOptions, FakeEndpoint, NodeInfo, VerbsEndpoint, connect_qp, connect_qp_as, revoke_key,
};
pub use error::VerbsError;
pub use fake::FakeNode;
pub use fence::fence_client;
pub use memnode::{Memnode, MemnodeConfig, SRQ_DEPTH};
pub use pool::{Pool, PoolBuf};
pub use qp::VerbsQp;
pub use stats::{VerbsStats, totals};

//! The deterministic simulated cluster fabric (issue 3).
//!
//! Many compute nodes × client threads × coroutines and several memory nodes, run on ONE
//! thread in virtual time against a NIC/network model, implementing the fabric contract of
//! `remora_core::fabric` exactly: per-QP order, torn multi-word transfers, NIC atomics,
//! access errors that break the queue pair, immediates, two-sided messages with bounded
//! receive queues and RNR retry, device memory, and the counters.
//!
//! # Using it
//!
//! ```
//! use remora_core::fabric::QueuePair;
//! use remora_layouts::GlobalAddr;
//! use remora_poller::sim::{Sim, SimConfig};
//!
//! let mut sim = Sim::new(SimConfig { compute_nodes: 2, seed: 7, ..SimConfig::default() }).unwrap();
//! for node in 0..2 {
//!     let ctx = sim.client(node).unwrap();            // one client thread per compute node
//!     for co in 0..4 {                                // four coroutines on each
//!         sim.spawn_with(&ctx, co, |ctx| async move {
//!             let qp = ctx.qp(0).unwrap();            // queue pair to memory node 0
//!             let mut b = [0u8; 64];
//!             qp.read(GlobalAddr::new(0, 4096), &mut b).await.unwrap();
//!             ctx.cpu(200).await;                     // 200 ns of client CPU work
//!         });
//!     }
//! }
//! let r = sim.run();                                  // or sim.run_for(virtual_ns)
//! assert_eq!(r.unfinished, 0);
//! assert!(r.now_ns > 1000);
//! ```
//!
//! - [`SimConfig`]: compute nodes, memory nodes, region/device-memory/chunk sizes (the region
//!   header of `remora_layouts::region` is written at offset 0, so `RemoteAllocator` works),
//!   persistence, the [`Model`], the seed, [`Faults`] and an optional [`TraceSel`].
//! - [`Sim::endpoint`] / [`Sim::client`]: a new client thread on a compute node, with one
//!   queue pair per memory node ([`SimEndpoint`], [`SimQp`] implement `Endpoint` and
//!   `QueuePair`). Coroutines of one client share its queue pairs and its CPU.
//! - [`Sim::spawn`] / [`Sim::spawn_with`]: coroutines (any future, `!Send` fine, may borrow
//!   from the caller for `'a`). [`ClientCtx`] gives `now_ns()`, `sleep(ns)`, `cpu(ns)` and
//!   `step()` (client CPU time), and a seeded random stream.
//! - [`Sim::run`] (until all tasks finish or nothing can happen), [`Sim::run_for`] (a slice
//!   of virtual time), [`Sim::stats`], [`Sim::trace_lines`], [`Sim::key`] (revoke a region
//!   key), [`Sim::into_images`] (carry memory into the next simulation).
//! - Memory-node CPU and durability: [`Sim::set_handler`] / [`Sim::set_handler_with`] (server
//!   logic; the latter is made anew at each restart), [`Sim::recovery_reports`] (what
//!   `Handler::recover` said at restarts), [`Sim::nvm_stats`] (bytes written to persistent
//!   memory: NIC bytes by verb, CPU stores, lines written back), [`ClientCtx::reconnect`]
//!   (fresh queue pairs after a memory node restarted).
//!
//! # Determinism
//!
//! One seed fixes everything: event tie-breaks, jitter, fault choices and every coroutine's
//! random stream come from xoshiro256** streams derived from it (`rng`). The same seed and
//! inputs give byte-identical results and counters; [`RunReport::seed`] names the seed of a
//! run, so a failing test can print it and be replayed.
//!
//! # Modules
//!
//! - [`model`]: every NIC/network parameter with its default and source, parsing, and the
//!   analytic figures the calibration tests compare against.
//! - [`engine`]: virtual clock, event queue, NICs and queue-pair ends, the requester side.
//! - `target`: the responder side of each verb (segments, atomics, receives, RNR).
//! - [`memory`]: memory nodes (regions, device memory, keys, crash; the persistence model of
//!   NIC writes and CPU stores, and NVM write accounting, in one place).
//! - [`qp`]: `SimQp` / `SimEndpoint` and their futures.
//! - [`exec`]: the single-threaded executor.
//! - `server`: each memory node's CPU: `server_threads` handler threads, connections
//!   assigned round-robin, messages served first come first served at
//!   `server_poll_ns + server_handler_ns` + the cache lines the handler touched (a hit or a
//!   DRAM/NVM miss in the node's last-level cache, [`llc`]) + `server_reply_ns` per reply,
//!   busy time accounted
//!   ([`Sim::server_busy_ns`], `LocalRegion::cpu_clock`), running a
//!   `remora_core::server::Handler` (echo by default).
//! - [`profiles`]: each paper's testbed as named model values (`--profile`), sourced.
//! - [`faults`], [`trace`]; `rng`, `pool` (crate-private).
mod background;
pub mod cluster;
pub mod engine;
pub mod exec;
pub mod faults;
pub mod harness;
pub mod llc;
pub mod memory;
pub mod model;
pub mod perf;
pub(crate) mod pool;
pub mod profiles;
pub mod qp;
mod queue;
pub(crate) mod rng;
mod server;
mod target;
pub mod trace;

pub use cluster::{ClientCtx, KeyHandle, Recovery, RunReport, Sim, SimConfig, SimError, Sleep};
pub use engine::EngineStats;
pub use exec::Stop;
pub use faults::Faults;
pub use llc::{LlcStats, WarmLines};
pub use memory::{NodeImage, NvmStats};
pub use model::{Load, Model, ModelError, ModelVerb, ParamInfo};
pub use qp::{SimEndpoint, SimQp};
pub use trace::TraceSel;

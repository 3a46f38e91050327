//! remora: index structures for disaggregated memory, driven by one-sided RDMA.
//!
//! Six published designs, each a key-value or spatial index whose nodes live in the memory
//! of remote *memory nodes* and whose clients (on *compute nodes*) read and change them with
//! one-sided verbs (READ, WRITE, CAS, FETCH_AND_ADD):
//!
//! | index | structure | open it with |
//! |---|---|---|
//! | SMART | adaptive radix tree, lock-free internal nodes, per-node read delegation and write combining | [`node::IndexConfig::Smart`] |
//! | Sherman | B+tree with hierarchical on-chip locks and command combination (its one-sided baseline FG+: [`node::IndexConfig::fg_plus`]) | [`node::IndexConfig::Sherman`] |
//! | CHIME | Sherman's B+tree with hopscotch-hashed leaves, a vacancy-aware lock and speculative leaf reads | [`node::IndexConfig::Chime`] |
//! | CANRT | persistent radix tree, clients cache prefixes, the memory node applies appends | [`node::IndexConfig::Canrt`] (service [`node::Service::Canrt`]) |
//! | Erda | log-structured hash store on remote NVM | [`node::IndexConfig::Erda`] (service [`node::Service::Erda`]) |
//! | Catfish | R-tree with fast messaging, RDMA offloading and an adaptive switch between them (spatial: rectangles, window searches) | [`node::SpatialConfig::Catfish`] with [`node::ComputeNode::open_spatial`] (service [`node::Service::Catfish`]) |
//!
//! # Embedding remora
//!
//! A [`node::ComputeNode`] owns the connections to the memory nodes and pinned poller
//! threads; [`node::ComputeNode::open`] opens any key-value index the same way and returns a
//! handle that every application thread can share ([`node::ComputeNode::open_spatial`] does
//! the same for Catfish, whose handle inserts, searches and deletes rectangles). Operations
//! are futures (awaitable under tokio) or blocking calls, with one error type
//! ([`node::Error`]):
//!
//! ```
//! use remora::node::{ComputeNode, IndexConfig};
//!
//! // An in-process memory node on the soft fabric, one poller thread.
//! let node = ComputeNode::builder().in_process_default().start()?;
//! let smart = node.open(IndexConfig::smart(16))?;
//! let sherman = node.open(IndexConfig::sherman())?;
//!
//! std::thread::scope(|s| {
//!     for t in 0..2u64 {
//!         let (smart, sherman) = (smart.clone(), sherman.clone());
//!         s.spawn(move || {
//!             // SMART here takes string keys (no NUL byte), Sherman 8-byte integers.
//!             smart.upsert(format!("user{t}").as_bytes(), b"hello").wait().unwrap();
//!             sherman.upsert(&t.to_be_bytes(), &(t * 10).to_le_bytes()).wait().unwrap();
//!         });
//!     }
//! });
//! assert_eq!(smart.get(b"user1").wait()?, Some(b"hello".to_vec()));
//! assert_eq!(sherman.get(&1u64.to_be_bytes()).wait()?, Some(10u64.to_le_bytes().to_vec()));
//! // A bounded scan with an end key: keys in [0, 2).
//! let keys: Vec<_> = sherman
//!     .scan(&0u64.to_be_bytes(), Some(&2u64.to_be_bytes()), 10)
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(keys.len(), 2);
//! # Ok::<(), remora::node::Error>(())
//! ```
//!
//! The `examples/` directory has the same under tokio, against a memory node in another
//! process, and one example per index (`catfish.rs` for the spatial one). With feature
//! `verbs`, `node::Builder::verbs` connects the pollers to `remora memnode --fabric verbs`
//! instead.
//!
//! # Crates
//!
//! The facade re-exports the workspace crates: [`layouts`] (the `no_std` wire and node
//! formats), [`core`] (the `no_std` fabric contract and every index's client and server
//! algorithms), [`pmem`] (persistence primitives), [`poller`] (the soft and sim fabrics and
//! server-side pollers). With feature `verbs` it also holds the real verbs fabric over
//! rdma-core (`verbs`).
#![warn(missing_docs)]
pub use remora_core as core;
pub use remora_layouts as layouts;
pub use remora_pmem as pmem;
pub use remora_poller as poller;

pub mod node;

#[cfg(feature = "verbs")]
pub mod verbs;

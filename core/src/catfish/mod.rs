//! Catfish: an RDMA-enabled R-tree with fast messaging, RDMA offloading and an adaptive
//! switch between them (Xiao et al., ACM TSAS 2022).
//!
//! - [`tree`]: the R-tree in the memory node's region, written only by the server CPU
//!   (seqlock + checksummed nodes, copy-on-write splits so one-sided readers stay correct):
//!   the basic R-tree, the R*-tree ([`rstar`]) or the Hilbert R-tree ([`hilbert`]), and
//!   delete with condense-tree; restructurings that move entries are transactions that
//!   copy on write below one node rewritten once (`txn.rs`). Replaced and dropped nodes
//!   are reused after a grace period of epochs that one-sided readers check by each node's
//!   birth epoch ([`reclaim`]).
//! - [`server`]: the fast-messaging server as a [`crate::server::Handler`]: reply flow
//!   control, per-connection blocks released on disconnect, the load meter and heartbeats.
//! - [`client`]: inserts and searches by fast messaging, searches by offloading (one
//!   doorbell per level, every intersecting child READ at once), and the adaptive mode.
//! - [`adaptive`]: the back-off of Algorithm 1, as printed in the paper.
//! - [`bulk`]: bulk loading, the server's inserts applied to the region without the fabric
//!   (the tree a load by clients makes, byte for byte).
//!
//! The node fanout (entries per node) and the tree's kind ([`TreeKind`]) are chosen when the
//! tree is created (4 to 130) and recorded in the superblock.
//!
//! Formats are in [`remora_layouts::catfish`].
pub mod adaptive;
pub mod arenas;
pub mod bulk;
pub mod client;
mod delete;
pub mod hilbert;
mod insert;
mod quadratic;
pub mod reclaim;
#[cfg(test)]
mod recover_tests;
#[cfg(test)]
mod reuse_tests;
pub mod rstar;
pub mod server;
pub mod shared;
#[cfg(test)]
mod tests;
pub mod tree;
mod txn;

pub use adaptive::{Backoff, BackoffConfig};
pub use client::{CatfishClient, ClientStats, Mode, Transport};
pub use remora_layouts::catfish::{Entry, Rect, Status, TreeKind};
pub use server::CatfishServer;

use crate::alloc::AllocError;
use crate::fabric::FabricError;
use core::fmt;
use remora_layouts::{GlobalAddr, LayoutError};

/// Why a Catfish operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatfishError {
    /// The fabric failed a request.
    Fabric(FabricError),
    /// The remote allocator failed (other than running out of chunks).
    Alloc(AllocError),
    /// A node, superblock or message did not decode.
    Layout(LayoutError),
    /// The server answered with this status.
    Server(Status),
    /// A reply that does not belong to the request in flight.
    Protocol(&'static str),
    /// No tree is published in the root slot.
    NotCreated,
    /// The server's arenas are exhausted (server side; clients see `Server(Full)` and grow).
    Full,
    /// The memory node has no allocator chunk left to grow the tree with: the insert was
    /// not done, the tree is intact and still serves searches.
    NodeFull {
        /// The memory node.
        node: remora_layouts::NodeId,
        /// Bytes of its region.
        region_len: u64,
    },
    /// A node kept reading torn or mid-write past the retry bound.
    TornRetriesExhausted {
        /// The node's address.
        addr: GlobalAddr,
        /// Why its last read did not decode.
        last: LayoutError,
    },
    /// A structurally impossible tree.
    Corrupt(&'static str),
    /// No reply came from memory node `node` within the client's reply timeout
    /// ([`CatfishClient::set_reply_timeout_ns`]): the node died or hung mid-request. The
    /// request may or may not have taken effect; the client's messaging is closed (a late
    /// reply would be taken for the next request's), so open a new client.
    NoReply {
        /// The memory node that did not answer.
        node: remora_layouts::NodeId,
        /// Nanoseconds waited (fabric clock).
        waited_ns: u64,
    },
    /// An offloaded search met nodes born after its epoch's grace period (possibly reused
    /// under it) in `restarts` attempts in a row: the server reclaims faster than this
    /// reader traverses. Nothing wrong was returned; search again, or by messaging.
    Lapped {
        /// The memory node.
        node: remora_layouts::NodeId,
        /// Attempts made in a row.
        restarts: u32,
    },
}

impl From<FabricError> for CatfishError {
    fn from(e: FabricError) -> Self {
        CatfishError::Fabric(e)
    }
}
impl From<AllocError> for CatfishError {
    fn from(e: AllocError) -> Self {
        CatfishError::Alloc(e)
    }
}
impl From<LayoutError> for CatfishError {
    fn from(e: LayoutError) -> Self {
        CatfishError::Layout(e)
    }
}

impl fmt::Display for CatfishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatfishError::Fabric(e) => write!(f, "catfish: {e}"),
            CatfishError::Alloc(e) => write!(f, "catfish: {e}"),
            CatfishError::Layout(e) => write!(f, "catfish: undecodable bytes: {e}"),
            CatfishError::Server(s) => write!(f, "catfish: the server answered {s:?}"),
            CatfishError::Protocol(w) => write!(f, "catfish: protocol error: {w}"),
            CatfishError::NotCreated => write!(
                f,
                "catfish: no tree in root slot {}",
                remora_layouts::catfish::ROOT_SLOT
            ),
            CatfishError::Full => write!(f, "catfish: the server's arenas are full"),
            CatfishError::NodeFull { node, region_len } => write!(
                f,
                "catfish: memory node {node} is full (all of its {region_len} bytes are \
                 allocated): the tree cannot grow"
            ),
            CatfishError::TornRetriesExhausted { addr, last } => {
                write!(
                    f,
                    "catfish: node at {addr} still torn after retries: {last}"
                )
            }
            CatfishError::Corrupt(w) => write!(f, "catfish: corrupt tree: {w}"),
            CatfishError::NoReply { node, waited_ns } => write!(
                f,
                "catfish: memory node {node} sent no reply in {} ms (dead or hung mid-request; \
                 the request may or may not have taken effect): reconnect and open a new client",
                waited_ns / 1_000_000
            ),
            CatfishError::Lapped { node, restarts } => write!(
                f,
                "catfish: memory node {node} reused nodes under {restarts} offloaded searches in \
                 a row (its reclamation epoch moves faster than this reader): search again or \
                 by messaging"
            ),
        }
    }
}

impl core::error::Error for CatfishError {}

/// The entry loop of an offloaded search (`client::offload::intersecting`, what the sim
/// charges as `Work::Rect`), for `remora perf --cpu-calibration`, which times this real code
/// path rather than a copy of it: `node`'s hits in `window` into `out`, its children into
/// `next`. Not part of the API.
#[doc(hidden)]
pub fn calibrate_rect(
    node: &remora_layouts::catfish::Node,
    window: &Rect,
    out: &mut std_alloc::vec::Vec<Entry>,
    next: &mut std_alloc::vec::Vec<u64>,
) {
    client::intersecting(node, window, |e| out.push(*e), |p| next.push(p));
}

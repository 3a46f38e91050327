//! WORT and WOART (Lee et al., FAST'17), the CANRT paper's baselines: persistent radix trees
//! run by the memory node's CPU behind the server-reply path the CANRT paper gives them
//! (seeds/000 §4.1).
//!
//! - **Trees** (`tree.rs`, `nodes.rs`): WORT, a radix tree of 4-bit digits whose inner nodes
//!   all have 16 children, and WOART, its adaptive version with 8-bit digits and nodes of 4,
//!   16, 48 and 256 children. Both compress paths (a node header holds its depth, prefix
//!   length and first prefix digits in one 8-byte word), store keys in leaves reached by
//!   tagged 8-byte child words, and make every change visible with one 8-byte store after
//!   persisting everything it publishes. Every flush is the authors' `flush_buffer`
//!   (SeKwonLee/WORT, `src/wort/wort.c`, `src/woart/woart.c`): `clflush` between two
//!   `mfence`s, which evicts the lines it writes back, so the next access to them misses
//!   the server's cache ([`LocalRegion::persist_evict`](crate::server::LocalRegion)). A path-compression split is WORT's failure-atomic one: the
//!   header's depth tells recovery a node that a crash left with its old prefix.
//! - **Keys**: 1 to 16 bytes (the CANRT paper's 16-byte keys, or 8-byte big-endian
//!   integers); values up to [`VALUE_MAX`] bytes. A tree indexes the 17-byte canonical key
//!   (the key zero-padded, then its length), whose byte order is the keys' order.
//! - **Server-reply path** (`server.rs`, `client.rs`): a client says hello with a SEND and
//!   gets a request ring of [`RING_SLOTS`] slots; each operation is one WRITE_WITH_IMM of the
//!   request into a free slot of its ring (the immediate names ring and slot), and the
//!   server's handler reads it, applies it to the tree, persists, and answers by SEND.
//!   Reads go through the server too. A range query is one request per key (the next key
//!   after the previous one), as the paper's baselines do.
//! - **Recovery** ([`Handler::recover`](crate::server::Handler::recover)): the server walks
//!   the tree and rebuilds every header a crash left stale; the heap's durable high-water
//!   mark bounds what is reachable.
//!
//! Linearizability: the server applies one request at a time and answers after the change
//! is durable, so each operation takes effect at its handling, between its request and its
//! reply. Memory (`heap.rs`): the heap claims the region's chunks as it grows; replaced and
//! deleted leaves, grown nodes' old copies and nodes emptied by deletes are freed and reused
//! (a full heap answers [`Status::Full`](layout::Status)). Not implemented: shrinking a node
//! that deletes left with few children.
mod bulk;
mod client;
mod heap;
pub mod layout;
mod nodes;
mod server;
mod tree;

pub use bulk::BulkStats;
pub use client::Wort;
pub use layout::{KEY_MAX, Kind, VALUE_MAX};
pub use server::{MAX_CLIENTS, RING_SLOTS, ServerStats, WortServer};
pub use tree::{Tree, TreeStats};

use crate::fabric::FabricError;
use core::fmt;
use layout::Status;
use remora_layouts::NodeId;

/// What a client handle needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WortClientConfig {
    /// The memory node running the service.
    pub node: NodeId,
    /// How long a request waits for its reply (fabric clock) before failing: a memory node
    /// that crashed after taking it never answers.
    pub deadline_ns: u64,
}

impl Default for WortClientConfig {
    fn default() -> Self {
        WortClientConfig {
            node: 0,
            deadline_ns: 10_000_000_000,
        }
    }
}

/// An error of a WORT or WOART client operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WortError {
    /// The fabric failed the request or reply.
    Fabric(FabricError),
    /// Keys are 1 to 16 bytes.
    BadKey {
        /// The key's length in bytes.
        len: usize,
    },
    /// The value is longer than the server's slots hold.
    ValueTooLong {
        /// The value's length in bytes.
        len: usize,
        /// The longest value, [`VALUE_MAX`] bytes.
        max: usize,
    },
    /// The caller's buffer cannot hold the value read.
    BufferTooSmall {
        /// The buffer's length in bytes.
        len: usize,
        /// Bytes the value needs.
        need: usize,
    },
    /// The server refused: heap full, no free ring, or a request it could not decode.
    Refused {
        /// The status the server replied with.
        status: Status,
    },
    /// The server's answer does not fit the protocol.
    Protocol {
        /// Which part of the reply was wrong.
        what: &'static str,
    },
    /// No reply within the deadline.
    Timeout {
        /// Nanoseconds waited (fabric time) before giving up.
        waited_ns: u64,
    },
}

impl From<FabricError> for WortError {
    fn from(e: FabricError) -> Self {
        WortError::Fabric(e)
    }
}

impl fmt::Display for WortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WortError::Fabric(e) => write!(f, "wort: {e}"),
            WortError::BadKey { len } => {
                write!(f, "wort/woart keys are 1 to 16 bytes (got {len})")
            }
            WortError::ValueTooLong { len, max } => {
                write!(f, "wort/woart value of {len} bytes exceeds {max}")
            }
            WortError::BufferTooSmall { len, need } => {
                write!(f, "wort: buffer of {len} bytes, the value has {need}")
            }
            WortError::Refused { status } => match status {
                Status::Full => write!(f, "wort: the memory node's heap is full"),
                Status::TooManyClients => {
                    write!(f, "wort: the server has no free request ring")
                }
                s => write!(f, "wort server refused the request: {s:?}"),
            },
            WortError::Protocol { what } => write!(f, "wort protocol error: {what}"),
            WortError::Timeout { waited_ns } => write!(
                f,
                "wort: no reply from the server within {waited_ns} ns (is the memory node down?)"
            ),
        }
    }
}

impl core::error::Error for WortError {}

#[cfg(test)]
mod nodes_fuzz;
#[cfg(test)]
mod tests;

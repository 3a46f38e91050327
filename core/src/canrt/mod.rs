//! CANRT: a client-active persistent radix tree on NVM (Ying et al.).
//!
//! The tree is split the paper's way: **prefix nodes**, pointer-less and pre-allocated in one
//! array, cached whole by every client; and **data nodes** of unsorted `DataItem`s on the
//! memory node. Formats are in [`remora_layouts::canrt`].
//!
//! - Read (Algorithm 2, `client.rs`): the client finds the data node with its cached prefix
//!   nodes (eqs. 2-3, `view.rs`) and READs the whole node, between two 8-byte READs of its
//!   meta word (see *Torn reads* below): 1 doorbell, 1 round trip.
//! - Write (Algorithm 1, `write.rs`): FETCH_AND_ADD on the node's lock word (with, in the
//!   same doorbell, an 8-byte READ of the meta word for a write that appends without
//!   looking at the items, an insert or a posted update, or the node's READs for one that
//!   must know whether its key is there), then the new `DataItem` is appended into a free
//!   slot with WRITE_WITH_IMM whose immediate names node and slot (and a READ after it in
//!   the same doorbell, the read-after-write flush): 2 round trips when uncontended.
//! - The metadata applier (`server.rs`, a [`crate::server::Handler`]) flips bitmap bits,
//!   persists, clears the item's `valid` bit and releases the lock; it resizes the tree when a
//!   client reports a full node, and [`CanrtServer::recover`] repairs a crashed image
//!   (replays complete unapplied items, trims split leftovers, unfreezes, resets locks).
//!
//! Where remora departs from the paper, and why:
//!
//! - **Lock.** The paper FETCH_AND_ADDs a word holding both bitmap and lock, which the server
//!   CPU then rewrites; the fabric contract (rule 3) does not order NIC atomics with CPU
//!   stores, so that word could lose updates. Here the lock word is a ticket counter touched
//!   only by NIC FETCH_AND_ADDs, and the server writes only the meta word (bitmap + `served`
//!   ticket). A client whose ticket is not yet served waits instead of FETCH_AND_ADDing
//!   again, and its wait costs the memory node's NIC nothing: it SENDs `Wait` once, and
//!   the server, when a release serves that ticket, SENDs it a turn notice with the node's
//!   meta word (`turn.rs`; [`crate::server::Replies::send_to`]); an insert appends on the
//!   notice itself (it needs only the free slots), other writes re-read the node. Notices
//!   are best effort: a waiter whose notice is late (a few times the measured time of the
//!   tickets ahead of it, doubling) READs the 8-byte meta word itself, and with
//!   `CanrtConfig::turn_notices` off it polls it with a proportional back-off. Before,
//!   waiters polled with an exponential back-off capped at half a millisecond and slept
//!   past their turn: contended YCSB-A on the sim went from 1.02 to 4.44 Mops.
//!   Only a ticket's holder may hand it back: an Unlock or Resize naming a ticket not yet
//!   served, or the served ticket of a lock nobody holds, is refused (the connection drops).
//! - **Dead and stalled holders** (issue 10). A ticket whose holder died before appending
//!   would stop its node for good, and a frozen tree's drain with it. A waiter that sees the
//!   same ticket served for a whole lease (`CanrtConfig::lease`, on its own clock) sends
//!   `Skip`; a client waiting for a resize that sees no new tree for a lease sends a drain
//!   `Skip`, and the server skips tickets that did not move between two of those. Skipping
//!   applies the holder's complete item if it is in a free slot (it had appended and died
//!   before the notice). Else it serves the next ticket and, in that same persisted store of
//!   the meta word, *reserves* the slot the holder would append into, which the server
//!   knows: a holder appends into the first free slot of the bitmap it saw when its turn
//!   came, and a node's bitmap changes only with its served ticket (or while it is frozen,
//!   when nobody appends). A reserved slot is live with its item's `valid` bit set (a hole,
//!   its tail persisted before the bitmap store); the applier clears `valid` before the
//!   store that makes an item live, so such a slot is never an item of the tree: readers
//!   skip it unchecked (a late append may be landing in it), the next holders do not pick
//!   it, and splits keep it. A holder that was only slow appends into its reserved slot,
//!   reads the meta word back in its append's doorbell, sees its ticket passed with its
//!   item unprocessed, and writes again on a new ticket; the server refuses the late
//!   append (and says so), and frees the slot at the node's next release. A waiter whose
//!   ticket was skipped before its turn came hands it back, which frees its slot likewise.
//!   So a late append never lands on an item of the tree, and readers and recovery never
//!   take it (`tests/issue13.rs`, `poller/tests/canrt_lin.rs` with 20 us leases). What is
//!   not covered: the lock word is a bare counter, so the server cannot name (or
//!   [`crate::fabric::Endpoint::fence`]) the client behind a ticket, and
//!   `Handler::on_disconnect` has nothing to release: a dead holder's hole costs a slot
//!   until a recovery (no connection from before a restart can append) drops it; a rebuild
//!   carries it to the next node built in its frame (`pool.rs`: the old array's memory is
//!   reused, and the late append may still land).
//! - **Durability and visibility.** Readers see only applied items: the server persists an
//!   item before the bitmap store that makes it live (and persists that), so a value a reader
//!   returned survives a memory-node crash whatever the platform does with the NIC's writes
//!   (DDIO on or off). A write returns once the server has applied its item: the server
//!   acknowledges each applied append with a turn notice naming its ticket (a late notice:
//!   the writer sees the served ticket pass its own). So every acknowledged write is durable
//!   and visible, and histories are linearizable (a write takes effect at the server's
//!   bitmap store, between its call and its return). The read-after-write flush READ
//!   (`flush_appends`) stays in the append's doorbell: with the meta word READ beside it, it
//!   tells a writer whose ticket was skipped that the server refused its item. (The paper
//!   calls a write done once WRITE_WITH_IMM is posted and makes it visible when the server
//!   applies it, which is not linearizable: a client would not read its own write. Before
//!   issue 13, remora let readers take the lock holder's unapplied item; a crash could take
//!   back a value a reader had returned, and without the flush an acknowledged write:
//!   `poller/tests/canrt_durable_reads.rs`.) What is left: on hardware the server's bitmap
//!   store is visible to a READ before its `clwb` completes, a window of one cache-line
//!   write-back (the sim applies a handler's stores and write-backs at once).
//! - **Torn reads.** A whole-node READ can interleave with a lock release, and its 64-byte
//!   segments observe memory in no particular order (a NIC splits a READ into PCIe reads
//!   that complete in any order; the server's CPU stores are not ordered against it). So a
//!   reader brackets the node READ with two 8-byte READs of the meta word alone, in the same
//!   doorbell (one round trip, three verbs): per-queue-pair order puts the first before and
//!   the second after every segment, and if both equal the node's own copy nothing but the
//!   holder's append changed the node meanwhile ([`NodeView::stable`](view::NodeView::stable)). Items, headers and
//!   prefix arrays are checksummed over every field a reader uses (CRC-32 per item, CRC-64
//!   for header and prefix array), so a torn copy fails whatever order its words landed in.
//! - **Characters.** The paper's characters are the first `k` key bytes, matched exactly,
//!   with unknown characters sent to the last data node. For 8-byte integer keys whose high
//!   bytes are mostly equal that needs absurd heights, so the server picks, at each resize,
//!   which key bits each level reads (constant runs become *gaps*), each level has its own
//!   width `m`, a character absent from an inner node sends the key to the nearest data node
//!   in key order, and a last-level node's characters are range starts. The NodeID arrays
//!   read left to right list the data nodes in key order: scans follow it.
//! - **Keys.** A tree's key width is fixed when it is formatted ([`CanrtConfig::key_len`],
//!   in the header, checked by every reader): 8-byte integer keys, or the paper's 16-byte
//!   keys (random strings in its runs). Items carry the whole key; inside CANRT a key is a
//!   `u128` of its big-endian bytes (`keys.rs`), so planner, lookups and scans work alike.
//!   In a 16-byte tree every level reads one whole key byte, so a prefix node's characters
//!   are the paper's characters, key bytes; key bytes equal in every key (a shared string
//!   prefix) are gaps. A key of the wrong width is [`CanrtError::BadKey`], naming the tree's.
//! - **Resizing** (`resize.rs`) follows the paper's shape: only the data nodes being split
//!   are frozen (lookups go on, and so do writes to every other node), their in-flight
//!   appends drain, the full data node is split *in place* (its upper half moves to a data
//!   node appended to the data array; every other data node stays where it is), and the new header and prefix array are written into the shadow area, the two
//!   areas alternating tick-tock, then published by one 8-byte store of the root slot.
//!   Nodes three-quarters full are split in the same resize. Where remora differs: the new
//!   height and per-level widths are planned from the data nodes' key bounds (not by
//!   incremental addWidth/addHeight), and when the data array is full every item is
//!   repacked into one twice as large; its predecessor's memory goes to a free pool that
//!   later rebuilds build in (`pool.rs`: reuse is safe while stale clients still address
//!   it, and the pool comes back after a memory-node crash).
//! - **The paper's geometry** ([`Growth::WholeLevel`], opt-in: `CanrtServer::with_growth`).
//!   A data node per last-level character (the keys sharing a `k`-character prefix), every
//!   resize a rebuild at the smallest height where no node is full (addHeight), and a
//!   rebuild also once a node's worth of new keys found no character of their own (the
//!   paper sends them to its last data node and adds characters when that fills: addWidth).
//!   Nodes then hold what the key distribution puts under a prefix (random 62-character
//!   strings: ~2.6-5 keys at 10,000-20,000 keys), which is what the paper's range figures
//!   imply; every such resize repacks the whole tree, and the data arrays hold many
//!   nearly empty nodes.
//! - **Lock tickets across resizes.** A data node keeps its lock word for life, so a client
//!   that took a ticket always hands it back (a data node of an older data array excepted).
mod build;
mod bulk;
mod client;
mod credit;
mod keys;
mod node;
mod pool;
mod recover;
mod resize;
mod resize_stats;
mod scan;
mod server;
#[cfg(test)]
mod tests;
mod tickets;
mod turn;
mod view;
mod write;

pub use client::{Canrt, ClientStats, SCAN_BATCH};
pub use node::CanrtNode;
pub use resize_stats::{ResizeClock, ResizeCounts};
pub use server::{CanrtServer, Counter, Growth, RecoveryReport, ServerStats};
pub use view::TreeView;

use crate::fabric::FabricError;
use crate::lease::LeaseConfig;
use core::fmt;
use remora_layouts::canrt::DataGeometry;
pub use remora_layouts::canrt::{KEY_LENS, MAX_VALUE};
use remora_layouts::{GlobalAddr, LayoutError, NodeId};

/// A client's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanrtConfig {
    /// The memory node holding the tree.
    pub node: NodeId,
    /// DataItem slots per data node (used when this client formats the tree).
    pub slots: u32,
    /// Value bytes per DataItem (used when this client formats the tree): 8 to
    /// [`MAX_VALUE`], a multiple of 8. Values up to this many bytes fit (a 15-byte value, the
    /// paper's, takes a capacity of 16).
    pub value_cap: u32,
    /// Key bytes (used when this client formats the tree): 8 (integer keys) or 16 (the
    /// paper's). A tree keeps the width it was formatted with; a client opening an existing
    /// tree takes the tree's.
    pub key_len: u32,
    /// Re-reads of a torn or inconsistent data node before giving up.
    pub read_retries: u32,
    /// Polls while waiting for the lock ticket to be served, on a fabric without a clock
    /// (elsewhere `lease.deadline_ns` bounds the wait).
    pub lock_polls: u32,
    /// Polls of the root slot while waiting for a resize (or the first format), on a fabric
    /// without a clock.
    pub resize_polls: u32,
    /// Waiting (see [`crate::lease`]): polls back off exponentially on the fabric clock; a
    /// served ticket that does not move for `lease_ns` is reported to the server, which
    /// skips it (its holder died or stalled before appending); a wait past `deadline_ns`
    /// fails with [`CanrtError::LockTimeout`].
    pub lease: LeaseConfig,
    /// Whole write attempts (each resize restarts the write).
    pub write_retries: u32,
    /// Post READs of the meta word and of the item after each append's WRITE_WITH_IMM (same
    /// doorbell): they tell a writer whose ticket was skipped that its item was refused, and
    /// flush the NIC's write (read-after-write). Readers never see an unapplied item, and a
    /// write returns only once applied (persisted by the server), so durability does not
    /// rest on them. Cost verbs, not a round trip.
    pub flush_appends: bool,
    /// A writer whose lock ticket is not yet served asks the server to tell it when it is
    /// (`Wait`, answered by a turn notice) instead of READing the meta word until it is: the
    /// wait then costs the memory node's NIC nothing (but a message to its CPU).
    pub turn_notices: bool,
    /// When a write returns: [`WriteAck::Applied`] (the default: durable and linearizable),
    /// or [`WriteAck::Posted`], the paper's weaker count.
    pub ack: WriteAck,
    /// [`WriteAck::Posted`] only: the most appends a writer keeps posted but not yet
    /// consumed by the server (flow control, `credit.rs`). Each unconsumed append holds
    /// one of the server's receives on the connection, so this must stay below the
    /// server's receive depth (64 on the sim and soft by default) less the writer's
    /// control messages; past it, appends are RNR NAKed and, once the retries run out,
    /// the queue pair breaks. The server returns a credit every half window. At least 2.
    pub posted_window: u32,
    /// Range scans: data-node snapshots READ per doorbell, 1 to [`SCAN_BATCH`] (values
    /// outside act as the nearest bound). The default, `SCAN_BATCH`, overlaps the READs of
    /// consecutive nodes; 1 reads one node per round trip, one after another, as the CANRT
    /// paper's range query does (§4.4: the requests for one data node are integrated into
    /// one request; nothing overlaps the requests for different nodes).
    pub scan_batch: u32,
}

/// When a CANRT write (insert, update, delete) returns to its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteAck {
    /// Once the server has applied the item: persisted, then made visible to readers, and
    /// acknowledged to the writer. Durable and linearizable. The default.
    #[default]
    Applied,
    /// Once the append's WRITE_WITH_IMM is posted (unsignaled: its completion is not
    /// waited for), as the CANRT paper counts a write ("about 1.5 RTTs", §4.2: the lock's
    /// round trip and the WRITE's half), without the flush READ and without waiting for the
    /// server. WEAKER than `Applied`, and not
    /// linearizable: a read right after the write may not see it (the server applies it
    /// later), its durability rests on the NIC's write reaching the persistence domain, and
    /// an item the server refuses (its writer's ticket skipped, or its key moved by a split
    /// raced with the write) is lost without the writer hearing. Its update locks with the
    /// paper's 8-byte fetch (the lock's FETCH_AND_ADD and the meta word) and appends
    /// without reading the node's items, as Algorithm 1 does every write: it then inserts
    /// an absent key (the paper's server validates the new item whether or not it found an
    /// older one) and reports the key present unless it read the node (a lock it waited
    /// for) and saw it absent. For comparisons with the
    /// paper's figures only (`remora bench --canrt-ack posted`); the linearizability check
    /// refuses it.
    Posted,
}

impl WriteAck {
    /// The flag value: `applied` or `posted`.
    pub const fn name(self) -> &'static str {
        match self {
            WriteAck::Applied => "applied",
            WriteAck::Posted => "posted",
        }
    }
}

impl CanrtConfig {
    /// A configuration for memory node `node` with the defaults: 32 slots per data node, 8-byte values and keys, a 10 ms lease and 2 s deadline, items acknowledged once applied.
    pub const fn new(node: NodeId) -> CanrtConfig {
        CanrtConfig {
            node,
            slots: 32,
            value_cap: 8,
            key_len: 8,
            read_retries: 10_000,
            lock_polls: 2_000_000,
            resize_polls: 2_000_000,
            lease: LeaseConfig {
                lease_ns: 10_000_000,
                min_backoff_ns: 250,
                max_backoff_ns: 500_000,
                deadline_ns: 2_000_000_000,
                max_attempts: u32::MAX,
            },
            write_retries: 1_000,
            flush_appends: true,
            turn_notices: true,
            ack: WriteAck::Applied,
            posted_window: 32,
            scan_batch: SCAN_BATCH as u32,
        }
    }

    /// Whether writes under this configuration are linearizable (and durable when they
    /// return): false for [`WriteAck::Posted`].
    pub const fn linearizable(&self) -> bool {
        matches!(self.ack, WriteAck::Applied)
    }
}

impl CanrtConfig {
    /// The data-node geometry this configuration formats, or why it cannot.
    pub fn validate(&self) -> Result<DataGeometry, CanrtError> {
        let v = self.value_cap;
        if v < 8 || v as usize > MAX_VALUE || !v.is_multiple_of(8) {
            return Err(CanrtError::ValueCap { value_cap: v });
        }
        if !KEY_LENS.contains(&self.key_len) {
            return Err(CanrtError::KeyLen {
                key_len: self.key_len,
            });
        }
        DataGeometry::new(self.slots, self.value_cap)
            .and_then(|g| g.with_key_len(self.key_len))
            .map_err(CanrtError::Config)
    }
}

impl Default for CanrtConfig {
    fn default() -> Self {
        CanrtConfig::new(0)
    }
}

/// What went wrong in a CANRT client operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanrtError {
    /// The fabric failed a request.
    Fabric(FabricError),
    /// A key that is not of the tree's width (`width` bytes: 8 for integer keys, big-endian,
    /// or 16, fixed when the tree was formatted).
    BadKey {
        /// The key's length in bytes.
        len: usize,
        /// The tree's key width in bytes.
        width: u32,
    },
    /// A value longer than the tree's value capacity.
    ValueTooLong {
        /// The value's length in bytes.
        len: usize,
        /// The tree's value capacity.
        max: usize,
    },
    /// A value capacity CANRT's items cannot have (8 to [`MAX_VALUE`], a multiple of 8).
    ValueCap {
        /// The capacity asked for.
        value_cap: u32,
    },
    /// A key width CANRT trees cannot have (8 or 16 bytes).
    KeyLen {
        /// The width asked for.
        key_len: u32,
    },
    /// `get`'s output buffer is smaller than the value (nothing was copied).
    BufferTooSmall {
        /// Bytes of the value.
        need: usize,
        /// Bytes of the buffer given.
        got: usize,
    },
    /// The configuration does not form a valid data-node geometry.
    Config(LayoutError),
    /// A header, prefix array or data node that stays undecodable after every re-read.
    Corrupt {
        /// Where the structure lives.
        addr: GlobalAddr,
        /// Why it did not decode.
        why: LayoutError,
    },
    /// No tree published in the root slot, even after asking the server to format one.
    NoTree {
        /// The region-header root slot looked in.
        slot: usize,
    },
    /// Our lock ticket was not served before the deadline: the server stopped applying, or
    /// kept refusing to skip the ticket served (`served`) ahead of ours (`ticket`).
    LockTimeout {
        /// The data node whose lock was waited for.
        node: GlobalAddr,
        /// The ticket the node was serving when the wait gave up.
        served: u32,
        /// Our ticket.
        ticket: u32,
        /// Nanoseconds waited (fabric clock).
        waited_ns: u64,
    },
    /// The memory node has no room for the tree (or for its growth: a resize failed and the
    /// region's allocator has too little left).
    NodeFull {
        /// The memory node.
        node: NodeId,
        /// Bytes of the region in use.
        used: u64,
        /// Bytes of the region.
        len: u64,
    },
    /// An operation that did not settle within its retries.
    Retries {
        /// Which operation did not settle.
        what: &'static str,
    },
}

impl From<FabricError> for CanrtError {
    fn from(e: FabricError) -> Self {
        CanrtError::Fabric(e)
    }
}

impl fmt::Display for CanrtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanrtError::Fabric(e) => write!(f, "canrt: {e}"),
            CanrtError::BadKey { len, width } => write!(
                f,
                "canrt: this tree's keys are {width} bytes{}, got a {len}-byte key",
                if *width == 8 {
                    " (big-endian integers)"
                } else {
                    ""
                }
            ),
            CanrtError::ValueTooLong { len, max } => {
                write!(f, "canrt: value of {len} bytes exceeds the tree's {max}")
            }
            CanrtError::ValueCap { value_cap } => write!(
                f,
                "canrt: values are 8 to {MAX_VALUE} bytes in multiples of 8, not {value_cap}"
            ),
            CanrtError::KeyLen { key_len } => write!(
                f,
                "canrt: keys are 8 bytes (integers) or 16 bytes, not {key_len}"
            ),
            CanrtError::BufferTooSmall { need, got } => write!(
                f,
                "canrt: value of {need} bytes does not fit the {got}-byte buffer"
            ),
            CanrtError::Config(e) => write!(f, "canrt: bad configuration: {e}"),
            CanrtError::Corrupt { addr, why } => write!(f, "canrt: corrupt data at {addr}: {why}"),
            CanrtError::NoTree { slot } => {
                write!(
                    f,
                    "canrt: no tree in root slot {slot} and the server built none"
                )
            }
            CanrtError::LockTimeout {
                node,
                served,
                ticket,
                waited_ns,
            } => write!(
                f,
                "canrt: lock of data node {node}: our ticket {ticket} not granted after \
                 {waited_ns} ns (the node serves ticket {served}; is its server stopped, or \
                 not skipping a dead holder?)"
            ),
            CanrtError::NodeFull { node, used, len } => write!(
                f,
                "canrt: memory node {node} is full ({used} of {len} bytes allocated): no room \
                 for the tree to grow (give the node a larger region)"
            ),
            CanrtError::Retries { what } => write!(f, "canrt: {what} did not settle"),
        }
    }
}

impl core::error::Error for CanrtError {}

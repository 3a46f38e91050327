//! Erda: a zero-copy log-structured key-value store on remote NVM with remote data atomicity.
//!
//! The memory node keeps a flat hash table of 32-byte buckets and `heads` append-only logs
//! (formats in `remora_layouts::erda`). Each bucket holds the key, the key's head id and the
//! 8-byte metadata word: a new tag and two 31-bit log offsets, the newest object and the
//! previous one.
//!
//! - **Write** (upsert, update): the client writes a request into one of its session's
//!   mailboxes with WRITE_WITH_IMM (immediate = that mailbox's id; each coroutine's request
//!   has its own mailbox, and the reply's sequence names the mailbox it answers, so one
//!   handle keeps several requests in flight; one session per connection, see
//!   [`Erda::close`]). The server's CPU ([`ErdaServer`]) finds or
//!   fills the key's bucket, reserves log space in the key's head (an object never spans a
//!   segment), flips the new tag and stores the reserved offset over the older one in one
//!   8-byte store, persists the word, and SENDs back the (head, offset). The client then
//!   WRITEs its object straight to that place (one copy, no server CPU on the data), and in
//!   the same doorbell READs its last word back (the flush: see "Durability") and WRITEs the
//!   *durable mark* right after it (see "Dead writers"). One write of a key is in flight at
//!   a time: a request for a key whose previous grant is not yet marked is answered `Busy`.
//! - **Delete**: the same request, but the server writes the deleted object (delete tag and
//!   key, no value: at most 32 bytes) itself, right after the metadata word names it and
//!   before it replies or handles any other request; the client has nothing to write. (The
//!   paper has the client WRITE it; see "Linearizability" for why the server does.)
//! - **Read**: one READ of the key's neighborhood of buckets, one READ of the newest object.
//!   Every object carries a CRC-32C over its header, key and value ([`object_checksum`]:
//!   table-driven, or the `crc32c` crate's CPU instructions with feature `hw-crc`): an
//!   object still being written, torn, or never written (its writer died) fails the check
//!   and the reader takes the previous object from the same metadata word. That fast path answers whenever an
//!   object the word names verifies as the key's. A miss, or a word naming no whole object
//!   of the key, proves nothing under a READ whose words observe memory in any order, so the
//!   reader then re-reads the neighborhood validated by the stripe version words (one
//!   doorbell: words, neighborhood, words; see `stripe.rs`) and answers from that image,
//!   reading again while a bucket fill or move overlaps it. No server CPU on reads.
//! - **Recovery** (server start on a formatted region): every bucket whose newest object does
//!   not verify is reverted to its previous object (or emptied), and each head's append
//!   point moves past every object still referenced.
//! - **Hopscotch displacement**: when a new key's neighborhood is full, the server moves
//!   entries towards their own homes to free a bucket in it (see `displace.rs`), inside a
//!   stripe-version section; recovery clears the duplicate a crash mid-move leaves.
//!
//! # Linearizability
//!
//! The server serializes the writes of one key: it *grants* them one after the other, and
//! that grant order is the order in which they take effect. A granted object *lands* when
//! its last word is written (from then on it verifies). The abstract value of a key at any
//! instant is the value of its latest-granted object that has landed (absent if that is a
//! deleted object, or if none has). The metadata word names the two latest grants, and a
//! reader takes the newer of the two that verifies, which is that abstract value: the
//! server grants a key again only once its previous grant is finished (marked durable, or
//! settled after its writer was fenced), so the older of the two named objects is always
//! whole.
//!
//! Linearization points:
//! - **upsert**, and **update** answered `true`: the first instant at which its own object
//!   or the object of any later grant of the same key has landed (if a later write lands
//!   first, this one takes effect immediately before it and is never seen). That instant
//!   lies between the grant and the completion of the client's WRITE.
//! - **delete** answered `true`: the instant its deleted object is whole (the server writes
//!   it right after the metadata word, within the same request; readers meanwhile fall back
//!   to the previous object, i.e. see the state before the delete).
//! - **update** / **delete** answered `false`: the server's handling of the request. The
//!   server answers from its latest grant of the key, which is what the abstract value is
//!   or is about to be: a granted-but-not-landed *value* makes the key present from the
//!   next write's point of view (it takes effect before that write, whatever readers see
//!   meanwhile), and a delete is never in flight when the server handles the next request
//!   (it lands within its own), so "absent" means
//!   the latest grant is a landed delete, or there is none: the abstract value is absent.
//!   This is the fix of issue 9: with client-written deleted objects the server answered
//!   "absent" while readers still saw the old value.
//! - **get**: the instant at which it read the metadata word it answered from, or, if the
//!   object it returns landed after that, the instant that object became the latest landed
//!   grant (or just before the later grant that first landed). An answer "absent" from a
//!   validated image: the instant the key's metadata word (empty, or naming a first object
//!   not yet landed) or its absence from every bucket was observed.
//!
//! A writer that died (or was fenced) with a grant in flight: if its object was not whole,
//! it never took effect (readers never saw it: it did not verify); if it was whole, it took
//! effect when it landed and stays (see "Dead writers"). Its operation has an unknown
//! outcome either way; every other operation stays linearizable.
//!
//! # Dead writers (issue 10)
//!
//! The paper's two-offset word cannot name a third object, so two writes of one key in
//! flight at once would leave the older landed object unnamed: readers would have to wait
//! for a writer that may be dead, and a node crash in that window would empty the key. So
//! the server keeps (volatile) the one unfinished value grant of each key:
//! - A grant is **finished** when the server finds its durable mark
//!   ([`remora_layouts::erda::durable_mark`], the 8 bytes right after the object): the
//!   writer stores it in the same doorbell after the object's WRITE and the flushing READ,
//!   and the queue pair places it only after the READ completed, so a mark means "whole and
//!   durable". A delete is finished at its grant (the server wrote it).
//! - A request for a key with an unfinished grant is answered `Busy`, naming the grant
//!   (head, offset) and its writer's fabric client id as the fabric told the server
//!   ([`Handler::on_connect`](crate::server::Handler::on_connect)); a hello naming another
//!   id than its connection's is refused, so a client cannot have another fenced in its
//!   place. The client asks again, backing off on the fabric clock ([`crate::lease::Waiter`]).
//! - **The lease is measured by the waiting client**, on its own clock, as every lock of
//!   remora is ([`crate::lease`]): the grant named in `Busy` is the lock word. The server
//!   cannot measure it usefully: it has no clock in `core` (only the sim's `cpu_clock`), and
//!   it cannot fence (fencing is a client verb, [`Endpoint::fence`](crate::fabric::Endpoint::fence)),
//!   and reverting a grant whose writer is merely slow without a fence would let its late
//!   WRITE land a whole object in a slot no word names. Once the same grant has been
//!   reported for a whole lease (`ErdaClientConfig::lease`, [`LEASE_NS`] = 100 ms by
//!   default), the waiter
//!   fences its writer and repeats its request with `revoke` naming the grant.
//! - A fence ends the writer's connection at the node (every fabric calls
//!   [`Handler::on_disconnect`](crate::server::Handler) for it), and the server then
//!   **settles** the writer's grants (the repair step of the lease protocol). The server
//!   settles another writer's grant only then, on its own knowledge: a `revoke` naming it is
//!   a hint and changes nothing (else any client, having read the grant in a `Busy`, could
//!   have a slow writer's object reverted under it without a fence). Settling: if the
//!   object is whole it is kept (readers may have returned it) and, as its writer never
//!   flushed it, the server writes a durable copy in fresh log space and names the copy in
//!   its place, the older object still named (*adopted*); else the word reverts to the older
//!   object and the slot is zeroed (*reverted*).
//! - A `Busy` naming a grant of the requester's own handle that none of its coroutines is
//!   writing (a coroutine's request whose reply never came back in time, so nobody will ever
//!   write it) is an *orphan*: the handle names it in `revoke` at once, without a fence; the
//!   server settles it because the grant is the requester's connection's own.
//! - When a writer's connection ends ([`Handler::on_disconnect`](crate::server::Handler)),
//!   the server settles its grants at once: the fabric delivers nothing more of that
//!   connection, so no waiter needs to wait out the lease. A waiter whose fence the node has
//!   not noticed yet (soft: the node's next pass over its connections) is answered `Busy`
//!   once more and asks again after its back-off.
//! - A fabric that cannot fence makes the waiter fail with
//!   [`ErdaError::Held`] (naming the grant and its writer) instead of breaking the grant
//!   unsafely; so does a wait past `lease.deadline_ns`.
//!
//! So readers never wait for a writer (the older named object is whole), a dead writer
//! costs the writers of its key about one lease, and every wait is bounded on the fabric
//! clock: writers by the lease's deadline, readers (a neighborhood that keeps changing under
//! fills and moves) by the same deadline and `lease.max_attempts`, then
//! [`ErdaError::Incomplete`]; a reply the server never sends (its node crashed) by the
//! deadline too.
//!
//! # Durability (issue 11)
//!
//! An acknowledged write is durable: the client's doorbell is WRITE(object), READ(its last
//! 8 bytes), WRITE(durable mark), and the client reports success only when all three
//! completed. A READ on the same queue pair after a WRITE executes only once the WRITE's
//! data has left the NIC, and with ADR (the memory controller's write-pending queue is in
//! the persistence domain) and DDIO off for the log region (or, with DDIO, eADR: the LLC
//! persistent too), data that left the NIC for memory is durable: that READ is the flush
//! (as CANRT's `flush_appends`, and Erda's paper, seeds/004). Without those platform
//! settings a READ is no flush and only a remote persist verb (not in the contract) would
//! do. The sim models this: a persistent region rolls back at a crash every WRITE no later
//! READ of its queue pair has flushed.
//!
//! A memory-node crash then keeps, for every key, its last acknowledged value or the newer
//! one in flight: the word names at most one unfinished object, recovery reverts it if it
//! is not whole, and the older object was finished (durable) before the newer was granted.
//! Server-written objects (deletes, adopted copies) and metadata words are persisted by the
//! server's CPU before it answers.
//!
//! # Log regions and cleaning (issue 12)
//!
//! Each head's log is a ring of regions: a full region chains the next free one (zeroed
//! ahead of need, at most 64 KiB per message, so no request stalls the server for a whole
//! region), and once clients appended a threshold to a head, the server cleans it
//! lock-free (reverse-scan merge into a fresh region, a replication sweep, the head swing),
//! reclaiming stale versions and deleted keys' buckets; clients read a cleaning head's keys through the
//! server (the paper's SEND path) and check every one-sided answer against the head's epoch
//! word. See `clean.rs` for the protocol and every decision the paper leaves open.
//!
//! Not implemented (yet): range scans (Erda is a hash store:
//! [`KvIndex::scan`](crate::index::KvIndex::scan) answers [`ErdaError::Unsupported`]), and
//! sharding over several memory nodes (one store lives on one node).
pub mod baseline;
mod clean;
mod client;
mod displace;
mod geometry;
mod server;
mod stripe;
#[cfg(test)]
mod trust_tests;

pub use client::{ClientStats, Erda};
pub use geometry::ErdaConfigError;
pub use server::{BulkStats, ErdaServer, ServerStats};

/// Whether [`object_checksum`] runs on the `crc32c` crate (feature `hw-crc`: the CPU's
/// CRC32 instructions where it has them, chosen at run time) rather than in software.
pub const HW_CRC: bool = cfg!(feature = "hw-crc");

/// Objects at least this long are checksummed by the `crc32c` crate (feature `hw-crc`);
/// shorter ones by the tables, which are as fast or faster there (erda_crc, release, best
/// of 3: through the crate 40-byte objects 0.3-0.7 B/ns and 104-byte ones 1.9-3.0 B/ns,
/// against 2.3-2.6 and 2.9-3.2 B/ns in software; from 136 bytes the crate wins: 6.0 vs 3.5
/// B/ns, 10.5 vs 3.6 at 264 bytes, 20.9 vs 4.0 at 4 KiB).
pub const HW_CRC_MIN_BYTES: usize = 128;

/// The CRC-32C of every Erda object (over its header word, then key and value), as written
/// and verified by clients and server. With feature `hw-crc` the `crc32c` crate computes it
/// (that crate needs std, so the feature is off by default and core stays no_std); without,
/// the table-driven [`object_crc_sw`](remora_layouts::erda::object_crc_sw). Both give the
/// same value, so clients and servers built either way share a store.
#[inline]
pub fn object_checksum(header: &[u8], body: &[u8]) -> u32 {
    #[cfg(feature = "hw-crc")]
    {
        // Below this the crate's fixed costs lose to the tables (measured by erda_crc).
        if header.len() + body.len() >= HW_CRC_MIN_BYTES {
            return crc32c::crc32c_append(crc32c::crc32c(header), body);
        }
        remora_layouts::erda::object_crc_sw(header, body)
    }
    #[cfg(not(feature = "hw-crc"))]
    {
        remora_layouts::erda::object_crc_sw(header, body)
    }
}

use crate::fabric::FabricError;
use crate::lease::LeaseConfig;
use core::fmt;
use remora_layouts::erda::Status;
use remora_layouts::{GlobalAddr, LayoutError, NodeId};

/// The store's geometry (used by the server when it formats a region).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErdaConfig {
    /// Head logs (1..=8).
    pub heads: u32,
    /// Home buckets of the hash table.
    pub buckets: u64,
    /// Buckets a key may be placed in, from its home bucket (read by clients in one READ).
    pub neighborhood: u32,
    /// Request mailboxes: a session (one handle) takes up to `ErdaClientConfig::slots` of
    /// them, one per write request it keeps in flight.
    pub max_clients: u32,
    /// Log segment bytes (power of two); objects never span two.
    pub segment_bytes: u64,
    /// Bytes of each head's log (a whole number of segments).
    pub head_bytes: u64,
    /// Regions each head's log is divided into (1..=8, each a whole number of segments):
    /// a full region chains the next free one, and log cleaning empties the regions of the
    /// live run into the next ones (see `clean.rs`). 1: no cleaning, a full log is full.
    pub regions: u32,
    /// Cleaning of a head starts once clients have appended this many per-mille of one
    /// region to it since the last cleaning started (the paper's threshold per head).
    pub clean_permille: u32,
}

impl ErdaConfig {
    /// A small store for tests and the soft fabric: 2 heads of 4 MiB in 64 KiB segments,
    /// 16 Ki buckets, 1024 request mailboxes (64 sessions of 16 slots).
    pub const fn small() -> ErdaConfig {
        ErdaConfig {
            heads: 2,
            buckets: 16 << 10,
            neighborhood: 8,
            max_clients: 1024,
            segment_bytes: 64 << 10,
            head_bytes: 4 << 20,
            regions: 4,
            clean_permille: 500,
        }
    }

    /// The paper's geometry: 8 MiB segments in 1 GiB head regions, a second region per head
    /// for cleaning.
    pub const fn paper() -> ErdaConfig {
        ErdaConfig {
            heads: 4,
            buckets: 1 << 22,
            neighborhood: 8,
            max_clients: 4096,
            segment_bytes: 8 << 20,
            head_bytes: 2 << 30,
            regions: 2,
            clean_permille: 750,
        }
    }
}

impl Default for ErdaConfig {
    fn default() -> Self {
        ErdaConfig::small()
    }
}

/// Erda's default lease (100 ms; remora's locks default to 10 ms). An Erda grant is held
/// across a server round trip (the request, the server thread's turn, the reply) and the
/// writer's WRITE, on a client thread its coroutines share: with 10 ms, `remora check`'s soft
/// runs (4 threads x 4 coroutines on a 2-core machine at load 14-18) fenced live writers in
/// every run; with 100 ms, in none of 6. A dead writer costs its key's other writers about
/// this long.
pub const LEASE_NS: u64 = 100_000_000;

/// Request mailboxes a handle asks for by default.
pub const DEFAULT_SLOTS: u32 = 16;

/// What a client handle needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErdaClientConfig {
    /// The memory node holding the store.
    pub node: NodeId,
    /// Expected value bytes: a get reads an object of this size in one READ (a larger one
    /// takes a second READ).
    pub value_size: usize,
    /// Back-off, lease and deadline of every wait (all on the fabric clock, see
    /// [`crate::lease`]): a write waiting for another write of its key to finish (past a
    /// lease, the other writer is fenced and its grant settled), a read waiting for a
    /// bucket fill or move to finish or for a whole object, a coroutine waiting for the
    /// handle's mailbox. `max_attempts` bounds them on a fabric without a clock.
    pub lease: LeaseConfig,
    /// Request mailboxes this handle asks for (1..=64): how many of its coroutines can
    /// have a write request at the server at once (the server may grant fewer).
    pub slots: u32,
    /// Read a key whose log head is being cleaned through the server (the paper's SEND
    /// path) rather than one-sidedly. One-sided reads stay correct during a cleaning here
    /// (see `clean.rs`); the paper's clients switch, and this switch measures what it costs.
    pub send_reads_while_cleaning: bool,
    /// Mutant, for tests only: trust a single neighborhood READ for misses (the reader
    /// before issue 9), which is correct only if a READ observes words in ascending address
    /// order. Tests set it to show that an adversarial word order catches it.
    #[doc(hidden)]
    pub assume_ascending_reads: bool,
    /// Mutant, for tests only: acknowledge a write without the READ that flushes it (the
    /// paper's write, before issue 11). Tests set it to show that a persistent memory node's
    /// crash then loses acknowledged writes.
    #[doc(hidden)]
    pub unflushed_writes: bool,
}

impl Default for ErdaClientConfig {
    fn default() -> Self {
        ErdaClientConfig {
            node: 0,
            value_size: 8,
            lease: LeaseConfig {
                lease_ns: LEASE_NS,
                ..LeaseConfig::default_lease()
            },
            slots: DEFAULT_SLOTS,
            send_reads_while_cleaning: true,
            assume_ascending_reads: false,
            unflushed_writes: false,
        }
    }
}

/// An error of an Erda client operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErdaError {
    /// The fabric failed a request.
    Fabric(FabricError),
    /// Keys are 1..=16 bytes.
    BadKey {
        /// The key's length in bytes.
        len: usize,
    },
    /// A value longer than the largest value an object holds.
    ValueTooLong {
        /// The value's length in bytes.
        len: usize,
        /// The longest value.
        max: usize,
    },
    /// The caller's buffer cannot hold the value.
    BufferTooSmall {
        /// The buffer's length in bytes.
        len: usize,
        /// Bytes the value needs.
        need: usize,
    },
    /// The server refused: table or log full, too many clients, or a bad request.
    Refused {
        /// The status the server replied with.
        status: Status,
    },
    /// A message, bucket or superblock that does not decode.
    Corrupt {
        /// Where the bytes were read.
        addr: GlobalAddr,
        /// Why they did not decode.
        why: LayoutError,
    },
    /// The server's answer does not fit the protocol.
    Protocol {
        /// Which part of the reply was wrong.
        what: &'static str,
    },
    /// No answer from a stable image with a whole object within the deadline: the key's
    /// neighborhood kept changing, or no object it names verified (media corruption).
    Incomplete {
        /// The address of the last object tried.
        addr: GlobalAddr,
        /// Reads made.
        attempts: u32,
        /// Nanoseconds waited (fabric clock).
        waited_ns: u64,
    },
    /// Another write of the key, granted at (`head`, `units`) to fabric client `holder`, was
    /// still unfinished at the deadline, or past its lease with a writer this fabric cannot
    /// fence.
    Held {
        /// The fabric client id the write was granted to.
        holder: u32,
        /// The log head of the grant.
        head: u8,
        /// The granted object's offset in that head's log, in allocation units.
        units: u32,
        /// Nanoseconds waited (fabric clock).
        waited_ns: u64,
    },
    /// A bounded wait ran out.
    Retries {
        /// What was waited for.
        what: &'static str,
    },
    /// Not something a hash store does.
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
}

impl From<FabricError> for ErdaError {
    fn from(e: FabricError) -> Self {
        ErdaError::Fabric(e)
    }
}

impl fmt::Display for ErdaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErdaError::Fabric(e) => write!(f, "erda: {e}"),
            ErdaError::BadKey { len } => write!(f, "erda keys are 1 to 16 bytes (got {len})"),
            ErdaError::ValueTooLong { len, max } => {
                write!(f, "erda value of {len} bytes exceeds {max}")
            }
            ErdaError::BufferTooSmall { len, need } => {
                write!(f, "erda: buffer of {len} bytes, the value has {need}")
            }
            ErdaError::Refused {
                status: Status::SessionOpen,
            } => write!(
                f,
                "erda server refused: this endpoint already has an open Erda session (another \
                 handle shares its connection and would take its replies): share that handle \
                 among coroutines, or close() it first"
            ),
            ErdaError::Refused { status } => write!(f, "erda server refused: {status:?}"),
            ErdaError::Corrupt { addr, why } => write!(f, "erda: unreadable data at {addr}: {why}"),
            ErdaError::Protocol { what } => write!(f, "erda protocol error: {what}"),
            ErdaError::Incomplete {
                addr,
                attempts,
                waited_ns,
            } => write!(
                f,
                "erda: no stable answer for the key (last object looked at: {addr}) after \
                 {attempts} validated reads in {waited_ns} ns"
            ),
            ErdaError::Held {
                holder,
                head,
                units,
                waited_ns,
            } => write!(
                f,
                "erda: the key's write granted to client {holder} at head {head} offset \
                 {units} is unfinished after {waited_ns} ns (its writer stalled or died, and \
                 it could not be fenced in time)"
            ),
            ErdaError::Retries { what } => write!(f, "erda: gave up waiting: {what}"),
            ErdaError::Unsupported { what } => write!(f, "erda: unsupported: {what}"),
        }
    }
}

impl core::error::Error for ErdaError {}

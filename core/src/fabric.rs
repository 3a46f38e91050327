//! The fabric contract: RDMA RC verbs semantics, written once for every fabric.
//!
//! A client owns an [`Endpoint`] (one per worker thread) holding one [`QueuePair`] per memory
//! node. Work is posted to a queue pair as a batch of [`Op`]s — one doorbell — and the
//! returned future resolves when every op of the batch has completed (one round trip).
//!
//! What every implementation must guarantee, and what index code may rely on:
//!
//! 1. **Order.** The ops of one queue pair take effect at the target in posting order, batch
//!    after batch. Nothing is promised across queue pairs.
//! 2. **Tearing.** A READ or WRITE larger than 8 bytes is not atomic: it moves aligned 8-byte
//!    words in address order, and a concurrent reader may see any mix of old and new words.
//!    Only an aligned 8-byte word is read or written whole.
//! 3. **Atomics.** CMP_AND_SWP and FETCH_AND_ADD act on an 8-byte-aligned word and are atomic
//!    only against other NIC atomics, never against CPU stores at the target or WRITEs.
//! 4. **Protection.** An access outside the target region, to a region whose key was revoked,
//!    or a misaligned atomic, completes with an error and touches no memory; the queue pair
//!    then enters the error state and every later post fails with [`FabricError::Flushed`].
//! 5. **Immediates.** WRITE_WITH_IMM writes like WRITE, then consumes one posted receive at the
//!    target, whose completion carries the 32-bit immediate ([`RecvKind::WriteImm`]).
//! 6. **Two-sided.** SEND consumes one posted receive at the target; with none posted the
//!    sender retries (receiver-not-ready) a bounded number of times, then fails.
//! 7. **Device memory.** Addresses with the device bit ([`GlobalAddr::device`]) name the
//!    node's on-chip memory, where the NIC has some.
//! 8. **Counting.** Every queue pair counts what it did in its [`Counters`].
//!
//! Local buffers are ordinary slices. A fabric that needs registered memory (verbs) uses them
//! in place when they lie in its registered arena and bounces them through registered staging
//! buffers otherwise, so index code never sees the difference except in the counters.
use crate::counters::Counters;
use core::fmt;
use core::future::Future;
use remora_layouts::{GlobalAddr, NodeId};

/// One work request.
#[derive(Debug)]
pub enum Op<'a> {
    /// RDMA READ: `local.len()` bytes from `remote`.
    Read {
        remote: GlobalAddr,
        local: &'a mut [u8],
    },
    /// RDMA WRITE of `local` to `remote`.
    Write { remote: GlobalAddr, local: &'a [u8] },
    /// RDMA WRITE_WITH_IMM: a WRITE, then a receive completion at the target carrying `imm`.
    WriteImm {
        remote: GlobalAddr,
        local: &'a [u8],
        imm: u32,
    },
    /// 8-byte CMP_AND_SWP: if `*remote == compare` store `swap`; `old` receives the prior value.
    Cas {
        remote: GlobalAddr,
        compare: u64,
        swap: u64,
        old: &'a mut u64,
    },
    /// 8-byte FETCH_AND_ADD (wrapping); `old` receives the prior value.
    Faa {
        remote: GlobalAddr,
        add: u64,
        old: &'a mut u64,
    },
    /// Two-sided SEND of `local` to the peer's receive queue.
    Send { local: &'a [u8] },
}

/// The verb of an op, for counters, traces and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Read,
    Write,
    WriteImm,
    Cas,
    Faa,
    Send,
    Recv,
}

impl Verb {
    pub const ALL: [Verb; 7] = [
        Verb::Read,
        Verb::Write,
        Verb::WriteImm,
        Verb::Cas,
        Verb::Faa,
        Verb::Send,
        Verb::Recv,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            Verb::Read => "READ",
            Verb::Write => "WRITE",
            Verb::WriteImm => "WRITE_WITH_IMM",
            Verb::Cas => "CMP_AND_SWP",
            Verb::Faa => "FETCH_AND_ADD",
            Verb::Send => "SEND",
            Verb::Recv => "RECV",
        }
    }
}

impl Op<'_> {
    pub fn verb(&self) -> Verb {
        match self {
            Op::Read { .. } => Verb::Read,
            Op::Write { .. } => Verb::Write,
            Op::WriteImm { .. } => Verb::WriteImm,
            Op::Cas { .. } => Verb::Cas,
            Op::Faa { .. } => Verb::Faa,
            Op::Send { .. } => Verb::Send,
        }
    }

    /// The remote address of a one-sided op.
    pub fn remote(&self) -> Option<GlobalAddr> {
        match self {
            Op::Read { remote, .. }
            | Op::Write { remote, .. }
            | Op::WriteImm { remote, .. }
            | Op::Cas { remote, .. }
            | Op::Faa { remote, .. } => Some(*remote),
            Op::Send { .. } => None,
        }
    }

    /// Bytes the op moves at the remote side (8 for atomics).
    pub fn len(&self) -> usize {
        match self {
            Op::Read { local, .. } => local.len(),
            Op::Write { local, .. } | Op::WriteImm { local, .. } | Op::Send { local } => {
                local.len()
            }
            Op::Cas { .. } | Op::Faa { .. } => 8,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a receive completion was raised by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvKind {
    /// A SEND; its payload was copied into the receive buffer.
    Send,
    /// A WRITE_WITH_IMM; its data is in the target region, not in the receive buffer.
    WriteImm,
}

/// A receive completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recv {
    pub kind: RecvKind,
    /// Payload bytes (SEND) or bytes written (WRITE_WITH_IMM).
    pub len: u32,
    pub imm: Option<u32>,
}

/// A completion error. The variants mirror `ibv_wc_status`; each says what to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FabricError {
    /// IBV_WC_REM_ACCESS_ERR: outside the target region or a revoked key. No memory touched.
    RemoteAccess {
        wr: usize,
        addr: GlobalAddr,
        len: usize,
    },
    /// IBV_WC_REM_INV_REQ_ERR: the target refused the request (e.g. a misaligned atomic).
    RemoteInvalid {
        wr: usize,
        addr: GlobalAddr,
        why: &'static str,
    },
    /// IBV_WC_LOC_LEN_ERR: a message larger than the receive buffers or the fabric's limit.
    LocalLength { wr: usize, len: usize, max: usize },
    /// IBV_WC_WR_FLUSH_ERR: the queue pair is in the error state after an earlier error.
    Flushed,
    /// IBV_WC_RNR_RETRY_EXC_ERR: the peer posted no receive in time.
    RnrRetryExceeded,
    /// IBV_WC_RETRY_EXC_ERR: the peer did not answer (dead node, broken link).
    RetryExceeded { node: NodeId },
    /// No queue pair to that memory node on this endpoint.
    UnknownNode { node: NodeId },
    /// The fabric cannot do this at all (e.g. no device memory on this node).
    Unsupported { what: &'static str },
}

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FabricError::RemoteAccess { wr, addr, len } => write!(
                f,
                "remote access error on work request {wr}: {len} bytes at {addr} are outside the \
                 registered region or its key was revoked; the queue pair is now broken"
            ),
            FabricError::RemoteInvalid { wr, addr, why } => {
                write!(
                    f,
                    "remote invalid request on work request {wr} at {addr}: {why}"
                )
            }
            FabricError::LocalLength { wr, len, max } => write!(
                f,
                "length error on work request {wr}: {len} bytes, the limit is {max}"
            ),
            FabricError::Flushed => write!(
                f,
                "work request flushed: the queue pair is in the error state after an earlier error"
            ),
            FabricError::RnrRetryExceeded => write!(
                f,
                "receiver not ready: the peer posted no receive buffer in time"
            ),
            FabricError::RetryExceeded { node } => write!(
                f,
                "transport retry exceeded: memory node {node} does not answer (dead or unreachable)"
            ),
            FabricError::UnknownNode { node } => {
                write!(f, "no queue pair to memory node {node} on this endpoint")
            }
            FabricError::Unsupported { what } => write!(f, "not supported by this fabric: {what}"),
        }
    }
}

impl core::error::Error for FabricError {}

/// One reliable-connected queue pair to one peer.
///
/// Queue pairs are owned by one thread and shared by the coroutines running on it; `&self`
/// methods take effect in the order they are called.
pub trait QueuePair {
    /// The memory node at the other end.
    fn peer(&self) -> NodeId;

    /// Posts `ops` in one doorbell; resolves when all have completed, or with the first
    /// error (later ops of the batch are flushed). Results land in the ops' buffers.
    ///
    /// Dropping the future before it resolves waits for the ops to finish, so borrowed
    /// buffers are never written after the borrow ends.
    fn post<'a, 'b>(
        &'a self,
        ops: &'a mut [Op<'b>],
    ) -> impl Future<Output = Result<(), FabricError>>;

    /// Waits for the next receive completion; a SEND's payload is copied into `buf`.
    fn recv<'a>(&'a self, buf: &'a mut [u8]) -> impl Future<Output = Result<Recv, FabricError>>;

    /// The next receive completion if one is there.
    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError>;

    /// Largest SEND payload the peer's receive buffers take.
    fn max_message(&self) -> usize;

    /// What this queue pair has done so far.
    fn counters(&self) -> &Counters;

    /// True once an error has put the queue pair in the error state.
    fn is_broken(&self) -> bool;

    /// READ `buf.len()` bytes at `remote`.
    fn read<'a>(
        &'a self,
        remote: GlobalAddr,
        buf: &'a mut [u8],
    ) -> impl Future<Output = Result<(), FabricError>> {
        async move { self.post(&mut [Op::Read { remote, local: buf }]).await }
    }

    /// WRITE `buf` at `remote`.
    fn write<'a>(
        &'a self,
        remote: GlobalAddr,
        buf: &'a [u8],
    ) -> impl Future<Output = Result<(), FabricError>> {
        async move { self.post(&mut [Op::Write { remote, local: buf }]).await }
    }

    /// CMP_AND_SWP; returns the prior value (success iff it equals `compare`).
    fn cas(
        &self,
        remote: GlobalAddr,
        compare: u64,
        swap: u64,
    ) -> impl Future<Output = Result<u64, FabricError>> {
        async move {
            let mut old = 0;
            self.post(&mut [Op::Cas {
                remote,
                compare,
                swap,
                old: &mut old,
            }])
            .await?;
            Ok(old)
        }
    }

    /// FETCH_AND_ADD; returns the prior value.
    fn faa(&self, remote: GlobalAddr, add: u64) -> impl Future<Output = Result<u64, FabricError>> {
        async move {
            let mut old = 0;
            self.post(&mut [Op::Faa {
                remote,
                add,
                old: &mut old,
            }])
            .await?;
            Ok(old)
        }
    }

    /// SEND `buf` to the peer.
    fn send<'a>(&'a self, buf: &'a [u8]) -> impl Future<Output = Result<(), FabricError>> {
        async move { self.post(&mut [Op::Send { local: buf }]).await }
    }
}

/// A client's view of the cluster: one queue pair per memory node.
pub trait Endpoint {
    type Qp: QueuePair;
    /// The queue pair to `node`.
    fn qp(&self, node: NodeId) -> Result<&Self::Qp, FabricError>;
    /// The memory nodes this endpoint is connected to.
    fn nodes(&self) -> &[NodeId];
    /// The queue pair that serves `addr`.
    fn qp_for(&self, addr: GlobalAddr) -> Result<&Self::Qp, FabricError> {
        self.qp(addr.node())
    }
}

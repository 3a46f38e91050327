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
//! 2. **Tearing, in no order.** A READ or WRITE larger than 8 bytes is not atomic: only an
//!    aligned 8-byte word is read or written whole, and a concurrent reader may see any mix of
//!    old and new words. Nor is any order promised among the parts of one transfer: a NIC
//!    splits a READ into PCIe reads that complete in any order, places a WRITE's segments as
//!    they arrive, and CPU stores at the target are not ordered against a READ at all (Ziegler
//!    et al., SIGMOD'23). Index code must check what it reads with something that holds in any
//!    order (a checksum over the bytes, a version in every cache line, or a second READ, which
//!    rule 1 orders after the first). Fabrics make this adversarial on purpose: see
//!    [`SegmentOrder`]. "The last word of a WRITE lands last" (SMART's rear lock) is not
//!    promised; it is the named assumption [`SegmentOrder::ShuffledTailLast`].
//! 3. **Atomics.** CMP_AND_SWP (also masked, [`Op::MaskedCas`]) and FETCH_AND_ADD act on an 8-byte-aligned word and are atomic
//!    only against other NIC atomics, never against CPU stores at the target or WRITEs.
//! 4. **Protection.** An access outside the target region, to a region whose key was revoked,
//!    or a misaligned atomic, completes with an error and touches no memory; the queue pair
//!    then enters the error state and every later post fails with [`FabricError::Flushed`].
//! 5. **Immediates.** WRITE_WITH_IMM writes like WRITE, then consumes one posted receive at the
//!    target, whose completion carries the 32-bit immediate ([`RecvKind::WriteImm`]).
//! 6. **Two-sided.** SEND consumes one posted receive at the target (as WRITE_WITH_IMM does,
//!    rule 5). With none posted the target answers receiver-not-ready (an RNR NAK): the
//!    sender waits its RNR timer and retries, at most its RNR retry count of times, and the
//!    post fails with [`FabricError::RnrRetryExceeded`] (the queue pair then in the error
//!    state, rule 4) only when the last retry finds no receive either. A receive posted
//!    meanwhile is taken; no message is lost or delivered twice. The count is finite on every
//!    fabric (7 is not IB's "infinite" here), and a peer that is gone fails the post with
//!    [`FabricError::RetryExceeded`], not RNR. Timer and count are the fabric's: the sim
//!    models a NIC's (`rnr_timer_ns`, `rnr_retry`: 10 us, 7), the soft fabric a CPU thread
//!    that reposts receives (`RnrPolicy`: 500 ms, 7 for clients; 100 ms, 5 for a node's own
//!    ends), verbs asks rdma_cm for 6 retries.
//! 7. **Device memory.** Addresses with the device bit ([`GlobalAddr::device`]) name the
//!    node's on-chip memory, where the NIC has some.
//! 8. **Counting.** Every queue pair counts what it did in its [`Counters`].
//!
//! Local buffers are ordinary slices. A fabric that needs registered memory (verbs) uses them
//! in place when they lie in its registered arena and bounces them through registered staging
//! buffers otherwise, so index code never sees the difference except in the counters.
use crate::counters::Counters;
pub use crate::work::Work;
use core::fmt;
use core::future::Future;
use remora_layouts::{GlobalAddr, NodeId};

/// One work request.
#[derive(Debug)]
pub enum Op<'a> {
    /// RDMA READ: `local.len()` bytes from `remote`.
    Read {
        /// Where the bytes are read from.
        remote: GlobalAddr,
        /// Receives the bytes; its length is the transfer's length.
        local: &'a mut [u8],
    },
    /// RDMA WRITE of `local` to `remote`.
    Write {
        /// Where the bytes land.
        remote: GlobalAddr,
        /// The bytes to write.
        local: &'a [u8],
    },
    /// RDMA WRITE_WITH_IMM: a WRITE, then a receive completion at the target carrying `imm`.
    WriteImm {
        /// Where the bytes land.
        remote: GlobalAddr,
        /// The bytes to write.
        local: &'a [u8],
        /// The immediate the target's receive completion carries.
        imm: u32,
    },
    /// 8-byte CMP_AND_SWP: if `*remote == compare` store `swap`; `old` receives the prior value.
    Cas {
        /// The 8-byte aligned word compared and swapped.
        remote: GlobalAddr,
        /// The value the word must hold for the swap to happen.
        compare: u64,
        /// The value stored if the comparison holds.
        swap: u64,
        /// Receives the word's value before the operation (equal to `compare` on success).
        old: &'a mut u64,
    },
    /// 8-byte masked CMP_AND_SWP, the extended atomic of ConnectX NICs
    /// (`IBV_EXP_WR_EXT_MASKED_ATOMIC_CMP_AND_SWP`; the SMART authors' `cas_dm_mask_sync`,
    /// dmemsys/SMART src/DSM.cpp): if `*remote & mask == compare & mask`, the bits under
    /// `mask` become `swap`'s (`*remote = *remote & !mask | swap & mask`), the others stay;
    /// `old` receives the whole prior word. So 64 one-bit locks share a word without one
    /// holder's bit failing another's CAS. Counted as a CMP_AND_SWP.
    MaskedCas {
        /// The 8-byte aligned word compared and swapped.
        remote: GlobalAddr,
        /// The bits (under `mask`) the word must hold for the swap to happen.
        compare: u64,
        /// The bits (under `mask`) stored if the comparison holds.
        swap: u64,
        /// The bits compared and swapped.
        mask: u64,
        /// Receives the word's value before the operation.
        old: &'a mut u64,
    },
    /// 8-byte FETCH_AND_ADD (wrapping); `old` receives the prior value.
    Faa {
        /// The 8-byte aligned word added to.
        remote: GlobalAddr,
        /// The addend (wrapping).
        add: u64,
        /// Receives the word's value before the addition.
        old: &'a mut u64,
    },
    /// Two-sided SEND of `local` to the peer's receive queue.
    Send {
        /// The message; at most the peer's receive buffer size.
        local: &'a [u8],
    },
}

/// The order in which a fabric's READs observe, and WRITEs place, the 64-byte segments of
/// one transfer. The contract (rule 2) promises none; software fabrics pick one on purpose so
/// that code which leans on an order no NIC gives fails in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SegmentOrder {
    /// Ascending addresses: what wave 1 promised and no NIC does. Only for mutant tests and
    /// for measuring the cost of shuffling.
    Ascending,
    /// Each multi-segment READ samples, and each WRITE places, its 64-byte segments in a
    /// random (seeded) order. The default of every software fabric.
    #[default]
    Shuffled,
    /// Shuffled, except that a WRITE's last aligned 8-byte word lands after all its others:
    /// the assumption behind SMART's rear-embedded lock (its paper relies on NICs writing in
    /// increasing address order). Code that needs it says so and is tested under it.
    ShuffledTailLast,
}

impl SegmentOrder {
    /// Bytes per segment: a PCIe read completion / cache line.
    pub const SEGMENT: usize = 64;

    /// The order's name, as [`SegmentOrder::parse`] accepts it.
    pub const fn name(self) -> &'static str {
        match self {
            SegmentOrder::Ascending => "ascending",
            SegmentOrder::Shuffled => "shuffled",
            SegmentOrder::ShuffledTailLast => "shuffled-tail-last",
        }
    }

    /// Parses `ascending`, `shuffled` or `shuffled-tail-last`.
    pub fn parse(s: &str) -> Option<SegmentOrder> {
        match s {
            "ascending" => Some(SegmentOrder::Ascending),
            "shuffled" => Some(SegmentOrder::Shuffled),
            "shuffled-tail-last" => Some(SegmentOrder::ShuffledTailLast),
            _ => None,
        }
    }

    /// Visits the segments of a transfer of `len` bytes starting at remote address `addr` in
    /// this order, as `(start, end)` byte ranges of the local buffer. Segment boundaries are
    /// the remote 64-byte lines, so an aligned 8-byte word never straddles two. `rng` is the
    /// caller's xorshift state (nonzero); `write` tells whether the tail-last rule applies.
    /// Allocates nothing: the order is a random rotation and stride over the segments (a
    /// permutation, not uniform over all permutations, but every segment can come first and
    /// neighbours are separated).
    pub fn for_each_segment(
        self,
        addr: u64,
        len: usize,
        write: bool,
        rng: &mut u64,
        mut f: impl FnMut(usize, usize),
    ) {
        if len == 0 {
            return;
        }
        let seg = Self::SEGMENT as u64;
        let head = (seg - addr % seg) as usize % Self::SEGMENT;
        let first = if head == 0 {
            Self::SEGMENT.min(len)
        } else {
            head.min(len)
        };
        let rest = len - first;
        let n = 1 + rest.div_ceil(Self::SEGMENT);
        let bounds = |i: usize| -> (usize, usize) {
            if i == 0 {
                (0, first)
            } else {
                let s = first + (i - 1) * Self::SEGMENT;
                (s, (s + Self::SEGMENT).min(len))
            }
        };
        if n == 1 || self == SegmentOrder::Ascending {
            for i in 0..n {
                let (s, e) = bounds(i);
                f(s, e);
            }
            return;
        }
        let (start, stride) = Self::permutation(n, xorshift(rng));
        let tail_last = write && self == SegmentOrder::ShuffledTailLast;
        let mut tail: Option<(usize, usize)> = None;
        for k in 0..n {
            let i = (start + k * stride) % n;
            let (s, e) = bounds(i);
            if tail_last && e == len {
                // Everything but the last word now; the last word after all the others.
                let cut = if e - s > 8 { e - 8 } else { s };
                if cut > s {
                    f(s, cut);
                }
                tail = Some((cut, e));
                continue;
            }
            f(s, e);
        }
        if let Some((s, e)) = tail {
            f(s, e);
        }
    }
}

impl SegmentOrder {
    /// A random permutation of `0..n` drawn from `r`, as `(start, stride)`: position `k`
    /// holds `(start + k * stride) % n`, the stride coprime with `n`. Shared by every fabric
    /// that shuffles segments, so they shuffle alike.
    pub fn permutation(n: usize, r: u64) -> (usize, usize) {
        if n <= 1 {
            return (0, 1);
        }
        let mut stride = 1 + (r >> 32) as usize % n;
        while gcd(stride, n) != 1 {
            stride = stride % n + 1;
        }
        ((r as u32) as usize % n, stride)
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One step of xorshift64 (state must be nonzero; zero is mapped to a fixed seed).
pub fn xorshift(state: &mut u64) -> u64 {
    let mut x = if *state == 0 {
        0x9E37_79B9_7F4A_7C15
    } else {
        *state
    };
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

/// The verb of an op, for counters, traces and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// RDMA READ.
    Read,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE_WITH_IMM.
    WriteImm,
    /// 8-byte CMP_AND_SWP.
    Cas,
    /// 8-byte FETCH_AND_ADD.
    Faa,
    /// Two-sided SEND.
    Send,
    /// A receive completion (of a SEND or a WRITE_WITH_IMM).
    Recv,
}

impl Verb {
    /// Every verb, in declaration order (the counters' index order).
    pub const ALL: [Verb; 7] = [
        Verb::Read,
        Verb::Write,
        Verb::WriteImm,
        Verb::Cas,
        Verb::Faa,
        Verb::Send,
        Verb::Recv,
    ];
    /// The verb's name as in the verbs API (`READ`, `CMP_AND_SWP`, ...).
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
    /// The verb this op posts.
    pub fn verb(&self) -> Verb {
        match self {
            Op::Read { .. } => Verb::Read,
            Op::Write { .. } => Verb::Write,
            Op::WriteImm { .. } => Verb::WriteImm,
            Op::Cas { .. } | Op::MaskedCas { .. } => Verb::Cas,
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
            | Op::MaskedCas { remote, .. }
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
            Op::Cas { .. } | Op::MaskedCas { .. } | Op::Faa { .. } => 8,
        }
    }

    /// Whether the op moves no bytes (a zero-length READ, WRITE or SEND).
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
    /// What raised the completion.
    pub kind: RecvKind,
    /// Payload bytes (SEND) or bytes written (WRITE_WITH_IMM).
    pub len: u32,
    /// The immediate of a WRITE_WITH_IMM; `None` for a SEND.
    pub imm: Option<u32>,
}

/// A completion error. The variants mirror `ibv_wc_status`; each says what to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FabricError {
    /// IBV_WC_REM_ACCESS_ERR: outside the target region or a revoked key. No memory touched.
    RemoteAccess {
        /// Index of the failed op in the posted batch.
        wr: usize,
        /// The remote address the op named.
        addr: GlobalAddr,
        /// Bytes the op asked for.
        len: usize,
    },
    /// IBV_WC_REM_INV_REQ_ERR: the target refused the request (e.g. a misaligned atomic).
    RemoteInvalid {
        /// Index of the failed op in the posted batch.
        wr: usize,
        /// The remote address the op named.
        addr: GlobalAddr,
        /// Why the target refused.
        why: &'static str,
    },
    /// IBV_WC_LOC_LEN_ERR: a message larger than the receive buffers or the fabric's limit.
    LocalLength {
        /// Index of the failed op in the posted batch.
        wr: usize,
        /// Bytes of the message.
        len: usize,
        /// The largest message the receiver or fabric takes.
        max: usize,
    },
    /// IBV_WC_WR_FLUSH_ERR: the queue pair is in the error state after an earlier error.
    Flushed,
    /// IBV_WC_RNR_RETRY_EXC_ERR: the peer posted no receive in time.
    RnrRetryExceeded,
    /// IBV_WC_RETRY_EXC_ERR: the peer did not answer (dead node, broken link).
    RetryExceeded {
        /// The memory node that did not answer.
        node: NodeId,
    },
    /// No queue pair to that memory node on this endpoint.
    UnknownNode {
        /// The node asked for.
        node: NodeId,
    },
    /// The fabric cannot do this at all (e.g. no device memory on this node).
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
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

    /// Posts ops nobody needs to see complete (a lock release, an unlock): WRITE,
    /// WRITE_WITH_IMM and SEND only. A fabric that can resolves as soon as the ops are
    /// posted, unsignaled, with the buffers already free to reuse (the data copied inline or
    /// into the fabric's own staging); they still take effect in posting order (rule 1), and
    /// a failure shows on a later post of this queue pair (then broken). The default waits
    /// for completion, as [`QueuePair::post`] does.
    fn post_unsignaled<'a, 'b>(
        &'a self,
        ops: &'a mut [Op<'b>],
    ) -> impl Future<Output = Result<(), FabricError>> {
        self.post(ops)
    }

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

    /// The fabric's clock as this queue pair's thread sees it ([`Endpoint::now_ns`]), for
    /// code that holds a queue pair but no endpoint and must bound a wait in time (a reply
    /// that may never come). `None`: this fabric has no clock.
    fn clock_ns(&self) -> Option<u64> {
        None
    }

    /// Lets the other coroutines of this thread run for about `ns` nanoseconds of
    /// [`QueuePair::clock_ns`] ([`Endpoint::pause`]). The default yields once.
    fn pause(&self, _ns: u64) -> impl Future<Output = ()> {
        crate::block_on::yield_now()
    }

    /// States CPU work this queue pair's thread did ([`Endpoint::charge`]); for code that
    /// holds a queue pair but no endpoint. The default charges nothing.
    #[inline]
    fn charge(&self, _work: Work) {}

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

    /// Masked CMP_AND_SWP ([`Op::MaskedCas`]); returns the prior word (success iff its bits
    /// under `mask` equal `compare`'s).
    fn masked_cas(
        &self,
        remote: GlobalAddr,
        compare: u64,
        swap: u64,
        mask: u64,
    ) -> impl Future<Output = Result<u64, FabricError>> {
        async move {
            let mut old = 0;
            self.post(&mut [Op::MaskedCas {
                remote,
                compare,
                swap,
                mask,
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
    /// The fabric's queue pair type.
    type Qp: QueuePair;
    /// The queue pair to `node`.
    fn qp(&self, node: NodeId) -> Result<&Self::Qp, FabricError>;
    /// The memory nodes this endpoint is connected to.
    fn nodes(&self) -> &[NodeId];
    /// The queue pair that serves `addr`.
    fn qp_for(&self, addr: GlobalAddr) -> Result<&Self::Qp, FabricError> {
        self.qp(addr.node())
    }

    /// This client's identity at the memory nodes, assigned by the fabric and unique among
    /// the live clients of a node (a reused slot comes back with a new generation). Index
    /// code writes it into lock words so that a waiter can name a dead holder and
    /// [`Endpoint::fence`] it. 0 means the fabric assigns none.
    fn client_id(&self) -> u32 {
        0
    }

    /// The fabric's clock in nanoseconds: virtual time on the sim, `CLOCK_MONOTONIC`
    /// elsewhere. Only differences measured by one client mean anything (clocks of different
    /// machines are not synchronized). A fabric without a clock returns 0 forever, and code
    /// that waits must then bound itself by attempts as well as by time.
    fn now_ns(&self) -> u64 {
        0
    }

    /// Lets the other coroutines of this thread run for about `ns` nanoseconds (a back-off
    /// that costs the fabric nothing). The default yields once.
    fn pause(&self, _ns: u64) -> impl Future<Output = ()> {
        crate::block_on::yield_now()
    }

    /// A timer of about `ns` nanoseconds for a coroutine that waits to be woken (a parked
    /// waiter's next lease check): unlike [`Endpoint::pause`] it settles no CPU work of the
    /// caller's (on the sim, the work stays owed until the coroutine's next post). The
    /// default is [`Endpoint::pause`].
    fn timer(&self, ns: u64) -> impl Future<Output = ()> {
        self.pause(ns)
    }

    /// States CPU work the calling coroutine just did (see [`crate::work`]). Synchronous
    /// and free by default: fabrics on real CPUs (soft, verbs) charge nothing, since the
    /// work really took its time. The sim makes it CPU debt of the calling coroutine, paid on
    /// its thread's CPU before the coroutine's next post, receive or pause (or when the
    /// benchmark settles it at the end of an operation).
    #[inline]
    fn charge(&self, _work: Work) {}

    /// Fences client `client` off memory node `node`: when this resolves, no verb of that
    /// client reaches the node's memory any more (its queue pair or key is revoked, as a
    /// memory node does to a client whose lease expired). Fencing a client that is already
    /// gone or fenced succeeds. See [`crate::lease`] for the protocol that uses it.
    fn fence(&self, _node: NodeId, _client: u32) -> impl Future<Output = Result<(), FabricError>> {
        async {
            Err(FabricError::Unsupported {
                what: "fencing another client",
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SegmentOrder;

    /// Every byte visited exactly once, in segments that never straddle a 64-byte line.
    fn visits(
        order: SegmentOrder,
        addr: u64,
        len: usize,
        write: bool,
        rng: &mut u64,
    ) -> [u8; 1024] {
        let mut seen = [0u8; 1024];
        let mut segs = 0usize;
        let mut last_end = 0usize;
        order.for_each_segment(addr, len, write, rng, |s, e| {
            assert!(s < e && e <= len, "segment {s}..{e} of {len}");
            let line = (addr + s as u64) / 64;
            assert_eq!(
                line,
                (addr + e as u64 - 1) / 64,
                "{s}..{e} straddles a line"
            );
            for b in &mut seen[s..e] {
                *b += 1;
            }
            segs += 1;
            last_end = e;
        });
        assert!(
            seen[..len].iter().all(|&c| c == 1),
            "{order:?} {addr} {len}"
        );
        if order == SegmentOrder::ShuffledTailLast && write && len > 0 {
            assert_eq!(last_end, len, "the tail word lands last");
        }
        seen
    }

    #[test]
    fn every_order_visits_every_byte_once() {
        let mut rng = 7;
        for order in [
            SegmentOrder::Ascending,
            SegmentOrder::Shuffled,
            SegmentOrder::ShuffledTailLast,
        ] {
            for addr in [0u64, 8, 60, 64, 100, 4096 + 56] {
                for len in [0usize, 1, 8, 63, 64, 65, 128, 200, 512, 1000] {
                    for write in [false, true] {
                        visits(order, addr, len, write, &mut rng);
                    }
                }
            }
        }
    }

    #[test]
    fn shuffled_orders_differ_from_ascending_and_put_any_segment_first() {
        let mut rng = 11;
        let mut first_seen = [false; 8];
        let mut non_ascending = 0;
        for _ in 0..200 {
            let mut order = heapless::Vec::<usize, 16>::new();
            SegmentOrder::Shuffled.for_each_segment(0, 512, false, &mut rng, |s, _| {
                order.push(s / 64).unwrap();
            });
            first_seen[order[0]] = true;
            if order.windows(2).any(|w| w[0] > w[1]) {
                non_ascending += 1;
            }
        }
        assert!(first_seen.iter().all(|&b| b), "{first_seen:?}");
        assert!(non_ascending > 150, "{non_ascending} of 200 shuffled");
        for s in ["ascending", "shuffled", "shuffled-tail-last"] {
            assert_eq!(SegmentOrder::parse(s).unwrap().name(), s);
        }
        assert_eq!(SegmentOrder::parse("random"), None);
    }
}

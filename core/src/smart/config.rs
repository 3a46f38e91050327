//! What a SMART handle is configured with, and what can go wrong.
use crate::alloc::AllocError;
use crate::fabric::FabricError;
use crate::lease::LeaseConfig;
use core::fmt;
use remora_layouts::smart::{LEAF_KEY_OFFSET, MAX_KEY_LEN, MAX_LEAF_BYTES};
use remora_layouts::{GlobalAddr, LayoutError};

/// The techniques of the paper, each switchable at run time. All on is SMART; all off is
/// the "ART ported to disaggregated memory" baseline (lock-based internal nodes, out-of-place
/// leaves, no cache, no local table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Techniques {
    /// Internal-node slots change by CMP_AND_SWP; off: under a lock bit in the node header
    /// (lock CAS, re-read, write, unlock).
    pub lock_free_internal: bool,
    /// Leaves updated in place under a lock with a CRC-64 checksum; off: every update writes
    /// a new leaf and swings the parent slot (the old leaf forwards to the new one).
    pub in_place_leaf: bool,
    /// The leaf lock is released by the same WRITE that writes the leaf back; off: a
    /// separate WRITE after the write-back completed (one more round trip).
    pub rear_lock: bool,
    /// Concurrent reads of one key on this compute node (every handle sharing its
    /// [`super::SmartNode`]) share one remote read.
    pub delegation: bool,
    /// Concurrent writes of one key on this compute node are combined into one remote write.
    pub combining: bool,
    /// The compute-side radix cache of internal nodes (validated by reverse pointers).
    pub cache: bool,
}

impl Techniques {
    /// Every technique of the paper on: SMART as evaluated.
    pub const SMART: Techniques = Techniques {
        lock_free_internal: true,
        in_place_leaf: true,
        rear_lock: true,
        delegation: true,
        combining: true,
        cache: true,
    };
    /// Every technique off: the baseline the paper's factor analysis starts from (locked internal nodes, out-of-place leaf writes, no cache).
    pub const BASELINE: Techniques = Techniques {
        lock_free_internal: false,
        in_place_leaf: false,
        rear_lock: false,
        delegation: false,
        combining: false,
        cache: false,
    };

    /// The bits every client of one tree must share (stored in the tree's meta block).
    pub(crate) fn structural_flags(&self) -> u64 {
        (self.lock_free_internal as u64) | (self.in_place_leaf as u64) << 1
    }
}

/// How keys are shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMode {
    /// Every key has exactly this many bytes (8 for integer keys, big-endian).
    Fixed(usize),
    /// Byte strings of 1..=255 bytes without NUL bytes (a NUL terminator is appended
    /// internally so that no key is a prefix of another).
    Variable,
}

/// A SMART tree's key shape, value capacity, techniques and wait policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SmartConfig {
    /// Which of the paper's techniques are on.
    pub techniques: Techniques,
    /// How keys are shaped; every client of one tree must agree.
    pub key_mode: KeyMode,
    /// Largest value in bytes; every leaf has room for this many.
    pub value_cap: usize,
    /// Radix cache capacity in MiB (with `techniques.cache`), per compute node (per
    /// [`super::SmartNode`]; its index is preallocated).
    pub cache_mib: f64,
    /// Region root slot (of memory node `nodes()[0]`) where the tree is published.
    pub root_slot: usize,
    /// How waits are paced and bounded, on the fabric clock ([`crate::lease`]): every
    /// restart, lock wait and torn-read retry backs off exponentially from
    /// `lease.min_backoff_ns` to `lease.max_backoff_ns`; a leaf or node lock word (or a
    /// frozen node) unchanged for `lease.lease_ns` has a dead holder, whom a waiter fences
    /// and whose half-done change it repairs; no operation waits longer than
    /// `lease.deadline_ns` in all.
    ///
    /// Default: 0.5 s leases, 10 s deadline. Fencing a live client costs it its connection,
    /// and clients that are OS threads on a loaded machine (the soft fabric in CI: five
    /// threads on two cores) are descheduled for tens of milliseconds; a deployment with
    /// dedicated cores can lower the lease to [`LeaseConfig::default_lease`]'s 10 ms (a
    /// dead client then costs its waiters about that much).
    pub lease: LeaseConfig,
    /// Restarts of one operation (after a failed CAS, a torn read, an inconsistency)
    /// before it gives up with [`SmartError::Contention`]; a cap for fabrics without a
    /// clock (the deadline bounds the others).
    pub max_restarts: u32,
    /// Re-reads of a leaf whose checksum does not match before giving up (a torn read
    /// lasts one write-back; a torn leaf that stays torn is corrupt).
    pub max_checksum_retries: u32,
    /// Entries of the compute node's delegation/combining table.
    pub local_table: usize,
    /// Assume the fabric places a WRITE's last 8-byte word after all its others
    /// (`SegmentOrder::ShuffledTailLast`), as SMART's paper does of NICs: the rear lock is
    /// then released by the write-back WRITE itself. The contract does not promise it, so by
    /// default the release is a second 8-byte WRITE in the same doorbell (per-queue-pair order
    /// places it after the write-back): one more work request, no more round trips.
    pub assume_tail_last: bool,
    /// Reuse the memory of deleted leaves and replaced nodes and leaves (`reclaim.rs`): a
    /// retire list per handle, reused after a grace period derived from `lease` (3 x (2
    /// leases + the longest back-off)); operation attempts older than a third of it restart,
    /// and the radix cache is dropped whole every third of it. On by default; off, nothing
    /// is reused (the region keeps every object ever written).
    pub reclaim: bool,
    /// Lock-based baseline only (`techniques.lock_free_internal` off): the clients of one
    /// compute node queue for an internal node's lock in the node's local table, and a
    /// releaser hands the lock to a waiting one up to 9 times in a row instead of unlocking
    /// (`handover.rs`), as the SMART authors' ART baseline does (`TREE_TEST_HOCL_HANDOVER`,
    /// dmemsys/SMART `include/LocalLockTable.h`). On by default; off, every client competes
    /// for the remote lock word.
    pub hocl_handover: bool,
    /// In-place leaves (`techniques.in_place_leaf`), without write combining: the clients of
    /// one compute node queue for a leaf's lock in a local table of the node, and a releaser
    /// hands the lock to a waiting one up to 9 times in a row instead of unlocking
    /// (`handover.rs`), as the SMART authors' in-place steps do (`in_place_update_leaf` with
    /// `TREE_TEST_HOCL_HANDOVER`, on for every factor step before write combining:
    /// dmemsys/SMART src/Tree.cpp, CMakeLists.txt, include/LocalLockTable.h). A taker handed
    /// the lock reads the leaf without a CAS (on-chip bit) or re-stamps the rear lock word
    /// with its own (CAS from the handed word, in the doorbell that reads the leaf); a releaser
    /// handing over writes the leaf without the unlock. Off by default (remora's SMART
    /// combines writes instead); the factor analysis turns it on for the steps the authors'
    /// code runs it in.
    pub leaf_handover: bool,
    /// The SMART authors' lock table (`onchip.rs`): 0 (the default) keeps every lock in the
    /// locked object's own word in host memory, an owned word with a lease; n > 0 puts the
    /// internal-node locks of the lock-based baseline and the leaf locks of in-place leaves
    /// without the rear embedded lock in a table of n 1-bit locks (rounded up to a multiple
    /// of 64) at offset 0 of every memory node's NIC device memory, hashed by the object's
    /// offset, taken and released with masked CMP_AND_SWP (`Op::MaskedCas`). A bit names no
    /// holder: no lease takeover, a dead holder's waiters give up at the deadline. For the
    /// factor analysis's steps before the rear lock, as the authors' code runs them; every
    /// client of one tree must agree (it is a structural flag).
    pub onchip_locks: u64,
    /// A client that finds a leaf or node lock taken (host word or on-chip bit) retries the
    /// CAS at once ([`LeaseConfig::spinning`]: the least pause the fabric allows, letting the
    /// thread's other coroutines run), as the authors' code does: `in_place_update_leaf` and
    /// `lock_node` push the coroutine on the thread's busy-waiting queue and CAS again when
    /// it is next scheduled (dmemsys/SMART src/Tree.cpp `re_acquire`), with no back-off. The
    /// lease and the deadline still bound the wait. Off, a waiter backs off exponentially
    /// from `lease.min_backoff_ns` to `lease.max_backoff_ns`.
    ///
    /// [`SmartConfig::new`] turns it on with write combining and off without. remora's retry
    /// is the lock CAS with the leaf READ in one doorbell, so each spinning waiter costs its
    /// memory node two messages a round trip, and the message rate is what SMART saturates
    /// first. With combining at most one writer of a key per compute node contends for its
    /// leaf (the others queue on the node), so spinning is cheap and fair: SMART's YCSB-A at
    /// 16 x 24 x 2 and 2M keys (`remora bench --fabric sim --profile smart --set
    /// server_llc_lines=13107 --records 2000000 --seconds 0.008 --warmup 38400
    /// --compute-nodes 16 --memory-nodes 2 --coroutines 2 --clients-per-node 24 --index smart
    /// --keys int --workload a --seed 1..5`) makes p99 122-127 us spinning against 151-210 us
    /// backing off (writes p99 ~178 against 451 us at seed 2: a waiter asleep for up to
    /// 100 us loses the lock to fresh arrivals again and again), for 5% less throughput
    /// (53.8-54.1 against 56.3-56.9 Mops). Shorter back-offs land between (seed 2: at most
    /// 3 us, p99 149 us; 10 us, 159 us). Without combining every writer of a hot key spins:
    /// at 10k keys the factor steps before combining lost to it (rear lock on YCSB-A 28.9 ->
    /// 21.1 Mops, the ART baseline's LOAD 0.82 -> 0.50 Mops), so they back off. A bare-CAS
    /// retry (the READ posted only once the CAS wins, as the authors') measured worse on both
    /// counts at 2M keys (p99 182 us, 0.227 failed CASes per op against 0.132): the faster
    /// retries fail more and the winner holds the lock a round trip longer.
    pub spin_locks: bool,
    /// Write combining (`techniques.combining`) as the SMART authors' leader does it: once
    /// it holds the leaf's lock, the leader picks up the latest value queued for the key by
    /// the writers behind it and writes that once; they return with that write
    /// (`delegation::Pick`; dmemsys/SMART src/Tree.cpp `in_place_update_leaf`,
    /// `get_combining_value`). On by default; off, the leader writes its own value, then the
    /// latest queued one in a second whole write (one lock, one write-back more per group),
    /// which made SMART's YCSB-A p99 0.71x Sherman's where the paper has 1.4x (issue 22).
    pub combine_latest: bool,
}

impl SmartConfig {
    /// A configuration with the defaults: 64 MiB radix cache, root slot 1, 0.5 s leases and a 10 s deadline, 10 000 restarts, 1 000 checksum re-reads, a 1024-entry local table, no tail-last assumption, reclamation on, lock hand-over on (baseline) and off (leaves), locks in host memory (no on-chip table), lock waits spinning with write combining and backing off without, the leader's pick-up of the latest queued value (one write per combined group).
    pub fn new(techniques: Techniques, key_mode: KeyMode, value_cap: usize) -> SmartConfig {
        SmartConfig {
            techniques,
            key_mode,
            value_cap,
            cache_mib: 64.0,
            root_slot: 1,
            lease: LeaseConfig {
                lease_ns: 500_000_000,
                deadline_ns: 10_000_000_000,
                ..LeaseConfig::default_lease()
            },
            max_restarts: 10_000,
            max_checksum_retries: 1_000,
            local_table: 1024,
            assume_tail_last: false,
            reclaim: true,
            hocl_handover: true,
            leaf_handover: false,
            onchip_locks: 0,
            spin_locks: techniques.combining,
            combine_latest: true,
        }
    }

    /// Whether in-place leaf locks are handed over between a compute node's clients
    /// ([`Self::leaf_handover`] with in-place leaves and without write combining, whose
    /// local table serves the same purpose, as in the authors' code).
    pub(crate) fn leaf_handover_on(&self) -> bool {
        let t = &self.techniques;
        self.leaf_handover && t.in_place_leaf && !t.combining
    }

    /// Internal key length bound under this mode.
    pub(crate) fn max_internal_key(&self) -> usize {
        match self.key_mode {
            KeyMode::Fixed(n) => n,
            KeyMode::Variable => 256,
        }
    }

    pub(crate) fn check(&self) -> Result<(), SmartError> {
        if let KeyMode::Fixed(n) = self.key_mode
            && (n == 0 || n > MAX_KEY_LEN)
        {
            return Err(SmartError::Config("fixed key length must be 1..=256"));
        }
        let max_val =
            MAX_LEAF_BYTES - LEAF_KEY_OFFSET - 8 - self.max_internal_key().next_multiple_of(8);
        if self.value_cap == 0 || self.value_cap > max_val {
            return Err(SmartError::Config(
                "value capacity must be 1..=(4032 - 40 - padded key length) bytes",
            ));
        }
        if self.root_slot >= remora_layouts::region::ROOT_SLOTS {
            return Err(SmartError::Config("root slot must be 0..8"));
        }
        let l = &self.lease;
        if l.lease_ns == 0
            || l.min_backoff_ns == 0
            || l.max_backoff_ns < l.min_backoff_ns
            || l.deadline_ns < l.lease_ns
            || self.max_restarts == 0
            || self.max_checksum_retries == 0
        {
            return Err(SmartError::Config(
                "lease, back-off, deadline and retry caps must be positive, deadline >= lease",
            ));
        }
        if self.techniques.cache && (!self.cache_mib.is_finite() || self.cache_mib <= 0.0) {
            return Err(SmartError::Config("cache capacity must be positive"));
        }
        Ok(())
    }
}

/// Errors of SMART operations. `Copy`, so that a delegated read can hand its error to every
/// coroutine that waited on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmartError {
    /// The fabric failed a request.
    Fabric(FabricError),
    /// The remote allocator could not provide memory for a node or leaf.
    Alloc(AllocError),
    /// Remote bytes stayed undecodable (corrupt, or torn on every re-read).
    Corrupt {
        /// Which structure did not decode.
        what: &'static str,
        /// Why it did not decode.
        err: LayoutError,
    },
    /// A leaf's checksum did not match on any of the allowed re-reads.
    Checksum {
        /// Re-reads made ([`SmartConfig::max_checksum_retries`]).
        retries: u32,
    },
    /// An operation restarted more than allowed.
    Contention {
        /// Which operation restarted.
        what: &'static str,
        /// Restarts made ([`SmartConfig::max_restarts`]).
        tries: u32,
    },
    /// A lock (or a frozen node) stayed held past the deadline: `word` at `at`, held by
    /// fabric client `holder` (0: unknown, as for a frozen node), which could not be fenced.
    Held {
        /// Which lock or node was waited for.
        what: &'static str,
        /// The address of the lock word or node header.
        at: GlobalAddr,
        /// The word as last read.
        word: u64,
        /// The fabric client id of the holder (0: unknown).
        holder: u32,
        /// Nanoseconds waited (fabric clock) before giving up.
        waited_ns: u64,
    },
    /// A key this tree cannot hold.
    BadKey {
        /// What is wrong with the key.
        why: &'static str,
    },
    /// A value larger than the configured capacity.
    ValueTooLarge {
        /// The value's length in bytes.
        len: usize,
        /// The configured [`SmartConfig::value_cap`].
        cap: usize,
    },
    /// `get`'s output buffer is smaller than the value.
    BufferTooSmall {
        /// Bytes of the value.
        need: usize,
        /// Bytes of the buffer given.
        got: usize,
    },
    /// The tree in the root slot was built with other structural settings.
    Mismatch {
        /// Which structural setting differs.
        what: &'static str,
    },
    /// A configuration that cannot work.
    Config(&'static str),
}

impl From<FabricError> for SmartError {
    fn from(e: FabricError) -> Self {
        SmartError::Fabric(e)
    }
}
impl From<AllocError> for SmartError {
    fn from(e: AllocError) -> Self {
        SmartError::Alloc(e)
    }
}

impl fmt::Display for SmartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SmartError::Fabric(e) => write!(f, "smart: {e}"),
            SmartError::Alloc(e) => write!(f, "smart: {e}"),
            SmartError::Corrupt { what, err } => {
                write!(f, "smart: {what} unreadable after retries: {err}")
            }
            SmartError::Checksum { retries } => write!(
                f,
                "smart: leaf checksum mismatch on {retries} re-reads (corrupt, or a writer died mid-write)"
            ),
            SmartError::Contention { what, tries } => {
                write!(f, "smart: gave up after {tries} tries: {what}")
            }
            SmartError::Held {
                what,
                at,
                word,
                holder,
                waited_ns,
            } => write!(
                f,
                "smart: {what} at {at} held by client {holder} (word {word:#018x}) for \
                 {waited_ns} ns; it could not be fenced and taken over"
            ),
            SmartError::BadKey { why } => write!(f, "smart: bad key: {why}"),
            SmartError::ValueTooLarge { len, cap } => {
                write!(f, "smart: value of {len} bytes exceeds the capacity {cap}")
            }
            SmartError::BufferTooSmall { need, got } => {
                write!(
                    f,
                    "smart: value of {need} bytes does not fit the {got}-byte buffer"
                )
            }
            SmartError::Mismatch { what } => write!(f, "smart: existing tree differs: {what}"),
            SmartError::Config(why) => write!(f, "smart: bad configuration: {why}"),
        }
    }
}

impl core::error::Error for SmartError {}

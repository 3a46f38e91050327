//! The SMART authors' lock table (`SmartConfig::onchip_locks`): hashed 1-bit locks in the
//! memory node's NIC device memory, taken and released with masked CMP_AND_SWP.
//!
//! What it models (dmemsys/SMART): every lock of the factor steps before the rear embedded
//! lock — the ART baseline's internal-node locks (`TREE_TEST_ROWEX_ART`: `src/Tree.cpp`
//! `lock_node`/`unlock_node`) and the in-place leaf's lock without the embedded one
//! (`in_place_update_leaf` with `TREE_ENABLE_EMBEDDING_LOCK` off) — is bit
//! `CityHash64(offset) % kOnChipLockNum` of a table at offset 0 of the node's on-chip memory
//! (`get_on_chip_lock_addr`): word `index / 64`, mask `1 << index % 64`, so 64 locks share an
//! 8-byte word and any two objects may share a bit. The lock is `cas_dm_mask_sync(word, 0,
//! ~0, mask)` (retried after a yield until it succeeds), the unlock `cas_dm_mask_sync(word,
//! ~0, 0, mask)`. The table is `kOnChipLockNum = ON_CHIP_SIZE * 1024 * 8` = 1M locks
//! (`include/Common.h`, `include/Rdma.h` `ON_CHIP_SIZE 128`) for the paper's 60M keys; the
//! bench scales the count with the key count (`bins/src/bench/factors.rs`).
//!
//! What stays remora's: the hand-over of locks between one compute node's clients
//! (`handover.rs`: the baseline's internal-node locks, and the in-place leaves' with
//! `SmartConfig::leaf_handover`), the doorbell shapes (the lock's CAS reads what the caller needs in
//! the same doorbell; a node's unlock rides with its slot write; an in-place leaf's unlock
//! follows the write-back), and waiting with back-off on the fabric clock. One thing is lost:
//! a bit names no holder, so a lock whose holder died is never taken over (no lease, no
//! fencing, no repair from a redo copy); its waiters give up at the deadline with
//! [`SmartError::Held`] (holder 0). That is the authors' semantics, used for the factor
//! analysis only; the default owned lock words keep the lease.
use super::Smart;
use super::config::SmartError;
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::lease::{Verdict, Waiter};
use remora_layouts::GlobalAddr;

/// The authors' table: `kOnChipLockNum` 1-bit locks (128 KiB of device memory) per memory
/// node, for the paper's 60M keys (dmemsys/SMART include/Common.h).
pub const AUTHORS_ONCHIP_LOCKS: u64 = 128 * 1024 * 8;

/// One 1-bit lock of the table: the device-memory word and the bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChipLock {
    pub word: GlobalAddr,
    pub mask: u64,
}

/// Bits of a table of `locks` locks (a positive multiple of 64 after rounding up).
pub(crate) fn table_bits(locks: u64) -> u64 {
    locks.max(1).next_multiple_of(64)
}

/// The lock of the object at `addr` in a table of `bits` locks (a multiple of 64) on the
/// object's memory node. The authors hash the offset alone (CityHash64); this is a 64-bit
/// mixer (splitmix64's finaliser) of the offset.
pub(crate) fn chip_lock(addr: GlobalAddr, bits: u64) -> ChipLock {
    let mut x = addr.offset();
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let index = x % bits.max(64);
    ChipLock {
        word: GlobalAddr::device(addr.node(), index / 64 * 8),
        mask: 1 << (index % 64),
    }
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// The on-chip lock of internal node `node`, when internal nodes are lock-based and the
    /// table is on.
    pub(crate) fn node_chip_lock(&self, node: GlobalAddr) -> Option<ChipLock> {
        (self.chip_bits > 0 && !self.cfg.techniques.lock_free_internal)
            .then(|| chip_lock(node, self.chip_bits))
    }

    /// The on-chip lock of the leaf at `leaf`, when leaves are written in place without the
    /// rear embedded lock and the table is on.
    pub(crate) fn leaf_chip_lock(&self, leaf: GlobalAddr) -> Option<ChipLock> {
        let t = &self.cfg.techniques;
        (self.chip_bits > 0 && t.in_place_leaf && !t.rear_lock)
            .then(|| chip_lock(leaf, self.chip_bits))
    }

    /// One failed masked CAS on `lock`: backs off, or gives up past the deadline. A bit names
    /// no holder, so nobody is fenced: a lease without change just means waiting on.
    pub(crate) async fn chip_wait(
        &self,
        waiter: &mut Option<Waiter>,
        what: &'static str,
        lock: ChipLock,
    ) -> Result<(), SmartError> {
        let now = self.ep.now_ns();
        let w = waiter.get_or_insert_with(|| Waiter::new(self.lock_lease(now), now));
        match w.observe(lock.mask, now) {
            Verdict::Wait(ns) => self.ep.pause(ns).await,
            Verdict::Expired { .. } => self.ep.pause(self.cfg.lease.max_backoff_ns).await,
            Verdict::GiveUp { word, waited_ns } => {
                return Err(SmartError::Held {
                    what,
                    at: lock.word,
                    word,
                    holder: 0,
                    waited_ns,
                });
            }
        }
        Ok(())
    }

    /// Takes `lock` (masked CAS of its bit from 0 to 1), reading `reads` in the same
    /// doorbell after the CAS; waits with back-off until the bit is clear. False: the attempt
    /// that started at `t0` (if given) grew too old to go on (`reclaim.rs`); not locked.
    pub(crate) async fn lock_chip(
        &self,
        lock: ChipLock,
        what: &'static str,
        reads: &mut [(GlobalAddr, &mut [u8])],
        t0: Option<u64>,
    ) -> Result<bool, SmartError> {
        let qp = self.qp(lock.word)?;
        let mut waiter: Option<Waiter> = None;
        loop {
            if t0.is_some_and(|t| self.stale(t)) {
                return Ok(false);
            }
            let mut old = 0u64;
            let mut ops: heapless::Vec<Op<'_>, 4> = heapless::Vec::new();
            let _ = ops.push(Op::MaskedCas {
                remote: lock.word,
                compare: 0,
                swap: lock.mask,
                mask: lock.mask,
                old: &mut old,
            });
            for (remote, local) in reads.iter_mut() {
                let _ = ops.push(Op::Read {
                    remote: *remote,
                    local,
                });
            }
            qp.post(&mut ops).await?;
            drop(ops);
            if old & lock.mask == 0 {
                return Ok(true);
            }
            super::bump(&self.stats.lock_waits);
            self.chip_wait(&mut waiter, what, lock).await?;
        }
    }

    /// The work request that releases `lock` (masked CAS of its bit from 1 to 0); `old`
    /// receives the word.
    pub(crate) fn chip_unlock_op<'b>(lock: ChipLock, old: &'b mut u64) -> Op<'b> {
        Op::MaskedCas {
            remote: lock.word,
            compare: lock.mask,
            swap: 0,
            mask: lock.mask,
            old,
        }
    }

    /// Releases `lock` on its own.
    pub(crate) async fn unlock_chip(&self, lock: ChipLock) -> Result<(), SmartError> {
        let mut old = 0u64;
        self.qp(lock.word)?
            .post(&mut [Self::chip_unlock_op(lock, &mut old)])
            .await?;
        Ok(())
    }
}

//! The hierarchical on-chip lock.
//!
//! Global level: one 8-byte lock word per hash bucket of page addresses, on the page's memory
//! node — in device memory when `onchip_locks`, else in a host-memory table. Acquired by
//! CMP_AND_SWP(0 → holder tag), released by a WRITE of 0, which command combination posts in
//! the same doorbell as the page write-back (per-queue-pair order makes the write-back land
//! first).
//!
//! Local level (`hierarchical_locks`): coroutines of one handle that want the same global lock
//! queue in a local table instead of hammering the NIC; the releasing holder hands the global
//! lock straight to a local waiter (no unlock, no CAS) up to `handover_cap` times in a row.
use super::ShermanError;
use crate::block_on::yield_now;
use crate::fabric::{Op, QueuePair};
use core::cell::RefCell;
use remora_layouts::GlobalAddr;
use std_alloc::collections::BTreeMap;
use std_alloc::vec::Vec;

#[derive(Default)]
struct LocalLock {
    /// A coroutine of this handle is in the critical section.
    busy: bool,
    /// This handle holds the global lock.
    global: bool,
    waiters: u32,
    handovers: u32,
}

pub(super) struct Locks {
    tag: u64,
    hierarchical: bool,
    combine: bool,
    cap: u32,
    retries: u32,
    table: RefCell<BTreeMap<GlobalAddr, LocalLock>>,
}

/// How a lock was obtained (for counters and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Got {
    Acquired,
    HandedOver,
}

const ZERO: [u8; 8] = [0; 8];

impl Locks {
    pub(super) fn new(
        tag: u64,
        hierarchical: bool,
        combine: bool,
        cap: u32,
        retries: u32,
    ) -> Locks {
        Locks {
            tag,
            hierarchical,
            combine,
            cap,
            retries,
            table: RefCell::new(BTreeMap::new()),
        }
    }

    /// Takes the lock word at `lock` (on `qp`'s node).
    pub(super) async fn acquire<Q: QueuePair>(
        &self,
        qp: &Q,
        lock: GlobalAddr,
    ) -> Result<Got, ShermanError> {
        if self.hierarchical {
            let mut queued = false;
            let mut spins = 0u32;
            loop {
                {
                    let mut t = self.table.borrow_mut();
                    let e = t.entry(lock).or_default();
                    if !e.busy {
                        e.busy = true;
                        if queued {
                            e.waiters -= 1;
                        }
                        if e.global {
                            return Ok(Got::HandedOver);
                        }
                        break;
                    }
                    if !queued {
                        e.waiters += 1;
                        queued = true;
                    }
                }
                spins += 1;
                if spins > self.retries {
                    self.forget(lock, queued);
                    return Err(ShermanError::LockTimeout { lock });
                }
                yield_now().await;
            }
        }
        for _ in 0..self.retries {
            match qp.cas(lock, 0, self.tag).await {
                Ok(0) => {
                    if self.hierarchical {
                        self.table.borrow_mut().entry(lock).or_default().global = true;
                    }
                    return Ok(Got::Acquired);
                }
                Ok(_) => yield_now().await,
                Err(e) => {
                    self.forget(lock, false);
                    return Err(e.into());
                }
            }
        }
        self.forget(lock, false);
        Err(ShermanError::LockTimeout { lock })
    }

    fn forget(&self, lock: GlobalAddr, queued: bool) {
        if !self.hierarchical {
            return;
        }
        let mut t = self.table.borrow_mut();
        if let Some(e) = t.get_mut(&lock) {
            if queued {
                e.waiters -= 1;
            } else {
                e.busy = false;
            }
        }
    }

    /// Posts `writeback` and releases `lock`: hands it to a local waiter, or unlocks it in
    /// the same doorbell (combination) or in a second one.
    pub(super) async fn release<Q: QueuePair>(
        &self,
        qp: &Q,
        lock: GlobalAddr,
        writeback: &mut Vec<Op<'_>>,
    ) -> Result<(), ShermanError> {
        let hand_over = self.hierarchical && {
            let mut t = self.table.borrow_mut();
            let e = t.entry(lock).or_default();
            if e.waiters > 0 && e.handovers < self.cap {
                e.handovers += 1;
                true
            } else {
                e.handovers = 0;
                e.global = false;
                false
            }
        };
        let result = if hand_over {
            if writeback.is_empty() {
                Ok(())
            } else {
                qp.post(writeback).await
            }
        } else if self.combine || writeback.is_empty() {
            writeback.push(Op::Write {
                remote: lock,
                local: &ZERO,
            });
            qp.post(writeback).await
        } else {
            match qp.post(writeback).await {
                Ok(()) => {
                    qp.post(&mut [Op::Write {
                        remote: lock,
                        local: &ZERO,
                    }])
                    .await
                }
                Err(e) => Err(e),
            }
        };
        if self.hierarchical
            && let Some(e) = self.table.borrow_mut().get_mut(&lock)
        {
            e.busy = false;
            if result.is_err() {
                e.global = false;
            }
        }
        result.map_err(Into::into)
    }
}

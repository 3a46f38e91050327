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
use std_alloc::collections::{BTreeMap, BTreeSet};

/// One global lock word as this handle sees it: a ticket queue (FIFO, so a coroutine that
/// just released cannot barge ahead of the ones waiting), and whether this handle holds the
/// global lock.
#[derive(Default)]
struct LocalLock {
    next: u64,
    serving: u64,
    global: bool,
    handovers: u32,
    /// Tickets whose coroutine gave up waiting; skipped when their turn comes.
    abandoned: BTreeSet<u64>,
}

impl LocalLock {
    /// Coroutines still waiting behind the current holder.
    fn waiting(&self) -> u64 {
        self.next - self.serving - 1 - self.abandoned.len() as u64
    }
    /// The turn passes to the next ticket still wanted.
    fn pass_on(&mut self) {
        self.serving += 1;
        while self.abandoned.remove(&self.serving) {
            self.serving += 1;
        }
    }
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

/// The work requests of one doorbell: at most a new page, a page written whole (one WRITE;
/// three for the test-only front == rear mutant) and the unlock — fixed capacity, so a write
/// allocates nothing.
pub(super) type Batch<'b> = heapless::Vec<Op<'b>, 8>;

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
            let ticket = {
                let mut t = self.table.borrow_mut();
                let e = t.entry(lock).or_default();
                e.next += 1;
                e.next - 1
            };
            let mut spins = 0u32;
            loop {
                {
                    let mut t = self.table.borrow_mut();
                    let e = t.get_mut(&lock).expect("entry made above");
                    if e.serving == ticket {
                        if e.global {
                            return Ok(Got::HandedOver);
                        }
                        break;
                    }
                    spins += 1;
                    if spins > self.retries {
                        e.abandoned.insert(ticket);
                        return Err(ShermanError::LockTimeout { lock });
                    }
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
                    self.give_up(lock);
                    return Err(e.into());
                }
            }
        }
        self.give_up(lock);
        Err(ShermanError::LockTimeout { lock })
    }

    /// Our turn ends without the global lock: the next waiter tries.
    fn give_up(&self, lock: GlobalAddr) {
        if self.hierarchical
            && let Some(e) = self.table.borrow_mut().get_mut(&lock)
        {
            e.pass_on();
        }
    }

    /// Posts `writeback` and releases `lock`: hands it to a local waiter, or unlocks it in
    /// the same doorbell (combination) or in a second one.
    pub(super) async fn release<Q: QueuePair>(
        &self,
        qp: &Q,
        lock: GlobalAddr,
        writeback: &mut Batch<'_>,
    ) -> Result<(), ShermanError> {
        let hand_over = self.hierarchical && {
            let mut t = self.table.borrow_mut();
            let e = t.entry(lock).or_default();
            if e.waiting() > 0 && e.handovers < self.cap {
                e.handovers += 1;
                true
            } else {
                e.handovers = 0;
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
            writeback
                .push(Op::Write {
                    remote: lock,
                    local: &ZERO,
                })
                .expect("a batch has room for the unlock");
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
            // Handed over: the next waiter holds the global lock already. Otherwise it was
            // released (or, on an error, is in an unknown state: the next holder CASes).
            e.global = hand_over && result.is_ok();
            e.pass_on();
        }
        result.map_err(Into::into)
    }
}

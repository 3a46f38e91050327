//! The lock-based baseline's internal-node lock (`Techniques::lock_free_internal` off): an
//! owned lock word (`crate::lease`) in the node's reverse-pointer word, taken with a CAS that
//! reads what the caller needs in the same doorbell, and released by a WRITE in the doorbell
//! of the caller's last write, or handed over to another client of the compute node
//! (`handover.rs`).
use super::config::SmartError;
use super::handover::{Release, Turn};
use super::onchip::ChipLock;
use super::{Smart, bump};
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::lease::{Waiter, owner_word};
use remora_layouts::GlobalAddr;
use remora_layouts::smart::NODE_REV_OFFSET;

/// A held internal-node lock (lock-based mode), released by [`Smart::unlock_node`].
pub(crate) struct NodeLock<'a> {
    lock_at: GlobalAddr,
    /// The on-chip 1-bit lock held instead of the node's own word (`onchip.rs`).
    chip: Option<ChipLock>,
    /// This compute node's local turn, with the hand-over table.
    turn: Option<Turn<'a>>,
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// Takes the lock of internal node `node` (lock-based mode: its reverse-pointer word
    /// holds the owner word), reading `reads` in the same doorbell after the CAS. Waits with
    /// back-off and takes over from a holder that made no progress for a lease (fencing it).
    /// Nothing needs repair after a takeover: a holder's writes under the lock are single
    /// slot words, or the freeze of a node whose header says so (finished by
    /// [`Self::complete_freeze`]).
    ///
    /// With the compute node's hand-over table (`SmartConfig::hocl_handover`), the node's
    /// clients first queue for a local turn; a turn handed the lock by the previous holder
    /// re-stamps the word with its own (CAS from the handed word, same doorbell) instead of
    /// competing for it.
    ///
    /// With the on-chip lock table (`SmartConfig::onchip_locks`) the lock is the node's
    /// hashed bit in device memory instead (masked CAS; no lease, no takeover), and a turn
    /// handed the lock reads what it needs without touching the lock.
    pub(crate) async fn lock_node(
        &self,
        node: GlobalAddr,
        reads: &mut [(GlobalAddr, &mut [u8])],
    ) -> Result<NodeLock<'_>, SmartError> {
        let chip = self.node_chip_lock(node);
        let lock_at = chip.map_or(node.add(NODE_REV_OFFSET as u64), |c| c.word);
        let tag = self.lock_seq.get().wrapping_add(1).max(1);
        self.lock_seq.set(tag);
        let mine = owner_word(self.ep.client_id(), tag);
        let qp = self.qp(node)?;
        let (turn, mut expected) = self
            .local_turn(
                &self.node.handover,
                node,
                mine,
                "internal node lock (this compute node's turn)",
                lock_at,
                chip.is_some(),
                |n| n.add(NODE_REV_OFFSET as u64),
            )
            .await?;
        if let Some(c) = chip {
            if expected != 0 {
                bump(&self.stats.handovers);
                if !reads.is_empty() {
                    let mut ops: heapless::Vec<Op<'_>, 4> = heapless::Vec::new();
                    for (remote, local) in reads.iter_mut() {
                        let _ = ops.push(Op::Read {
                            remote: *remote,
                            local,
                        });
                    }
                    qp.post(&mut ops).await?;
                }
            } else {
                self.lock_chip(c, "internal node lock (on-chip bit)", reads, None)
                    .await?;
            }
            return Ok(NodeLock {
                lock_at,
                chip,
                turn,
            });
        }
        let mut handed = expected != 0;
        let mut waiter: Option<Waiter> = None;
        loop {
            let mut old = 0u64;
            let mut ops: heapless::Vec<Op<'_>, 4> = heapless::Vec::new();
            let _ = ops.push(Op::Cas {
                remote: lock_at,
                compare: expected,
                swap: mine,
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
            if old == expected {
                if handed {
                    bump(&self.stats.handovers);
                } else if expected != 0 {
                    bump(&self.stats.takeovers);
                }
                return Ok(NodeLock {
                    lock_at,
                    chip: None,
                    turn,
                });
            }
            handed = false;
            bump(&self.stats.lock_waits);
            expected = self
                .lock_wait(&mut waiter, old, "internal node lock", lock_at)
                .await?;
        }
    }

    /// Writes `write` (if any) and releases `lock` in the same doorbell, or, when a client of
    /// this compute node waits for the lock and the hand-over budget allows, writes only and
    /// leaves the lock held for it.
    pub(crate) async fn unlock_node(
        &self,
        lock: NodeLock<'_>,
        write: Option<(GlobalAddr, &[u8])>,
    ) -> Result<(), SmartError> {
        let NodeLock {
            lock_at,
            chip,
            turn,
        } = lock;
        let release = match &turn {
            Some(t) => t.decide().await,
            None => Release::Unlock,
        };
        let unlock = 0u64.to_le_bytes();
        let mut chip_old = 0u64;
        let mut ops: heapless::Vec<Op<'_>, 2> = heapless::Vec::new();
        if let Some((remote, local)) = write {
            let _ = ops.push(Op::Write { remote, local });
        }
        if release == Release::Unlock {
            let _ = ops.push(match chip {
                Some(c) => Self::chip_unlock_op(c, &mut chip_old),
                None => Op::Write {
                    remote: lock_at,
                    local: &unlock,
                },
            });
        }
        let r = if ops.is_empty() {
            Ok(())
        } else {
            self.qp(lock_at)?.post(&mut ops).await
        };
        if let Some(t) = turn {
            t.finish(release == Release::HandOver && r.is_ok()).await;
        }
        r.map_err(Into::into)
    }
}

//! Lock hand-over between the clients of one compute node, for the lock-based baseline's
//! internal-node locks (HOCL, as the SMART authors' ART baseline takes them), and, with
//! `SmartConfig::leaf_handover`, for in-place leaves' locks (the authors' in-place steps,
//! `in_place_update_leaf`; the same table type, a second instance keyed by the leaf or its
//! lock word: `leaflock.rs`).
//!
//! The authors' baseline (`TREE_TEST_ROWEX_ART` with `TREE_TEST_HOCL_HANDOVER`, on for every
//! factor step before write combining: dmemsys/SMART CMakeLists.txt) takes an internal
//! node's lock through a local lock table of the compute node (`LocalLockTable`, one per
//! `Tree`, i.e. per compute-node process, shared by all its threads and coroutines;
//! `src/Tree.cpp` `lock_node`/`unlock_node`, `include/LocalLockTable.h`): the table's entry
//! (hashed by the node's address) is a local ticket lock, so only one coroutine of the node
//! goes to the remote lock at a time; a releaser that finds a local waiter for the same node
//! hands the remote lock over (no unlock, no CAS) up to `MAX_HOCL_HANDOVER` (8) times, then
//! releases it (`handover_cnt++ > 8`: at most nine hand-overs in a row), so other compute
//! nodes get their turn. Its remote locks are 1-bit locks in the NIC's on-chip memory
//! (`get_on_chip_lock_addr`, `cas_dm_mask_sync`); remora's baseline keeps its lock in the
//! node's reverse-pointer word (host memory), which this module does not change.
//!
//! One difference, for leases: the authors' lock bit names nobody. Remora's lock word is an
//! owned word (`crate::lease`) that a waiter of another node fences after a lease; a
//! handed-over word would still name the releaser, so a live-but-slow taker could keep
//! writing after the releaser was fenced and the lock taken over. So the taker re-stamps the
//! word (CAS from the handed word to its own) in the doorbell that reads the node (the
//! baseline posts that doorbell anyway, with its lock CAS): no extra round trip, and a
//! failed re-stamp (the word was taken over meanwhile) falls back to an ordinary acquisition.
//!
//! Failure: the entry records the local holder's word. A turn a waiter sees held by the
//! same word for a whole lease belongs to a dead (or stalled) client: a waiter takes the turn, and if
//! the dead one was handed a word it may not have re-stamped, tries that word first (the CAS
//! fails harmlessly if it did); otherwise the remote lock's own lease and fencing apply. A
//! holder that is dropped mid-turn (a killed coroutine) gives its turn back at once
//! ([`Turn`]'s drop). A hand-over whose waiters all left before taking it is found by the
//! node's next acquisition of that entry, which re-stamps it (same node) or unlocks it
//! (another node hashed to the entry); if none comes, a waiter of another node fences the
//! releaser after a lease, as for any unreleased word.
use super::Smart;
use super::config::SmartError;
use super::onchip::chip_lock;
use super::shared::TryLock;
use crate::block_on::yield_now;
use crate::fabric::{Endpoint, QueuePair};
use crate::lease::{LeaseConfig, Verdict, Waiter, holder};
use remora_layouts::GlobalAddr;
use std_alloc::vec::Vec;

/// Hand-overs in a row before the lock is released (the authors' `MAX_HOCL_HANDOVER` 8,
/// checked as `handover_cnt++ > 8`: nine).
pub(crate) const MAX_HANDOVERS: u32 = 9;

/// Entries of a compute node's table (a power of two; nodes hash onto them). The authors'
/// table has 4M (`kLocalLockNum`, "as small as possible without affecting performance");
/// the baseline's contention is on the few internal nodes near the root.
pub(crate) const ENTRIES: usize = 4096;

/// How many times [`Turn`]'s drop tries the entry's try-lock (held only for a few
/// instructions, never across an `await`).
const DROP_SPINS: u32 = 1 << 12;

#[derive(Default)]
struct Entry {
    /// The lock word of the coroutine holding the entry's local turn (0: free).
    owner: u64,
    /// The internal node the last turn was for.
    node: u64,
    /// A remote lock word of `node` this compute node still holds, handed over to the next
    /// turn (0: none).
    handed: u64,
    /// The word handed to the current turn (its taker may not have re-stamped it yet).
    pending: u64,
    /// Coroutines waiting for a turn.
    waiting: u32,
    /// Hand-overs in a row.
    handovers: u32,
}

/// A compute node's local lock table (shared by its clients' handles, in
/// [`super::SmartNode`]). Empty (no entries) when the tree's internal nodes are lock-free.
pub(crate) struct HandOver {
    entries: Vec<TryLock<Entry>>,
}

/// What a turn starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granted {
    /// The remote word of this node handed over by the previous holder (re-stamp it).
    pub handed: Option<u64>,
    /// A remote lock of another node (address, word) handed over but not taken: unlock it.
    pub stale: Option<(GlobalAddr, u64)>,
}

/// Whether a releaser unlocks or hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    Unlock,
    HandOver,
}

/// One coroutine's local turn on an entry. Dropped without [`Turn::finish`], it gives the
/// turn back with nothing handed over.
pub(crate) struct Turn<'a> {
    table: &'a HandOver,
    idx: usize,
    mine: u64,
    node: u64,
    live: bool,
}

/// A local wait that outlasted the lease's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TurnTimeout {
    pub owner: u64,
    pub waited_ns: u64,
}

impl HandOver {
    /// A table of [`ENTRIES`] entries, or none (`on == false`).
    pub(crate) fn new(on: bool) -> HandOver {
        let n = if on { ENTRIES } else { 0 };
        HandOver {
            entries: (0..n).map(|_| TryLock::new(Entry::default())).collect(),
        }
    }

    /// Whether the table has entries (the baseline's internal-node locks use it).
    pub(crate) fn on(&self) -> bool {
        !self.entries.is_empty()
    }

    /// Bytes of the table.
    pub(crate) fn footprint(&self) -> usize {
        self.entries.len() * core::mem::size_of::<TryLock<Entry>>()
    }

    fn index(node: GlobalAddr) -> usize {
        // Fibonacci hashing of the raw address (nodes are 8-byte aligned, so its low bits
        // say little).
        let h = node.raw().wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 52) as usize & (ENTRIES - 1)
    }

    async fn with<R>(&self, idx: usize, mut f: impl FnMut(&mut Entry) -> R) -> R {
        loop {
            if let Some(mut e) = self.entries[idx].try_lock() {
                return f(&mut e);
            }
            yield_now().await;
        }
    }

    /// Waits for this compute node's turn at `node`'s lock. `mine`: the lock word the
    /// caller will hold (nonzero, unique). `now` reads the fabric clock.
    pub(crate) async fn turn(
        &self,
        node: GlobalAddr,
        mine: u64,
        lease: &LeaseConfig,
        now: impl Fn() -> u64,
    ) -> Result<(Turn<'_>, Granted), TurnTimeout> {
        let idx = Self::index(node);
        // The clock is read only while waiting (an uncontended turn reads none). The owner's
        // lease runs from when it was first seen, in time this waiter watched, as a remote
        // word's does in `crate::lease` (a waiter stopped with its process takes no live
        // owner's turn), and so does the deadline ("Stalls" there).
        let mut waiter: Option<Waiter> = None;
        // Counted among the entry's waiters until the turn is granted or refused; a waiter
        // dropped meanwhile (a killed coroutine) is uncounted by the guard's drop, so no
        // releaser hands the lock over to it.
        let mut queue = Queued {
            table: self,
            idx,
            queued: false,
        };
        loop {
            let got = self
                .with(idx, |e| {
                    if !queue.queued {
                        e.waiting += 1;
                        queue.queued = true;
                    }
                    let mut dead = false;
                    if e.owner != 0 {
                        let t = now();
                        // Polls are not paced by back-offs: only a clockless fabric caps them.
                        let w = waiter
                            .get_or_insert_with(|| Waiter::new(lease.spinning(t), t).watching());
                        match w.observe(e.owner, t) {
                            Verdict::Wait(_) => return None,
                            Verdict::Expired { .. } => dead = true,
                            Verdict::GiveUp { waited_ns, .. } => {
                                e.waiting -= 1;
                                queue.queued = false;
                                return Some(Err(TurnTimeout {
                                    owner: e.owner,
                                    waited_ns,
                                }));
                            }
                        }
                    }
                    e.waiting -= 1;
                    queue.queued = false;
                    let g = if dead {
                        // The holder's turn outlived a lease: it may have died holding a
                        // handed word it never re-stamped.
                        Granted {
                            handed: (e.pending != 0 && e.node == node.raw()).then_some(e.pending),
                            stale: None,
                        }
                    } else if e.handed == 0 {
                        Granted {
                            handed: None,
                            stale: None,
                        }
                    } else if e.node == node.raw() {
                        Granted {
                            handed: Some(e.handed),
                            stale: None,
                        }
                    } else {
                        Granted {
                            handed: None,
                            stale: Some((GlobalAddr::from_raw(e.node), e.handed)),
                        }
                    };
                    e.owner = mine;
                    e.node = node.raw();
                    e.pending = g.handed.unwrap_or(0);
                    e.handed = 0;
                    if g.handed.is_none() {
                        e.handovers = 0;
                    }
                    Some(Ok(g))
                })
                .await;
            match got {
                Some(Ok(g)) => {
                    return Ok((
                        Turn {
                            table: self,
                            idx,
                            mine,
                            node: node.raw(),
                            live: true,
                        },
                        g,
                    ));
                }
                Some(Err(e)) => return Err(e),
                None => yield_now().await,
            }
        }
    }
}

/// A waiter's place among an entry's waiters (see [`HandOver::turn`]).
struct Queued<'a> {
    table: &'a HandOver,
    idx: usize,
    queued: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        for _ in 0..DROP_SPINS {
            if let Some(mut e) = self.table.entries[self.idx].try_lock() {
                e.waiting -= 1;
                return;
            }
            core::hint::spin_loop();
        }
        // The entry stayed busy: a releaser may hand the lock to nobody, which the node's
        // next turn on the entry takes (see the module doc).
    }
}

impl Turn<'_> {
    /// Decides how the turn's remote lock is released: handed over while a coroutine of this
    /// node waits for the entry and fewer than [`MAX_HANDOVERS`] were made in a row, else
    /// unlocked. A turn displaced by a waiter (its lease ran out) always unlocks.
    pub(crate) async fn decide(&self) -> Release {
        let (mine, node) = (self.mine, self.node);
        self.table
            .with(self.idx, |e| {
                if e.owner == mine && e.node == node && e.waiting > 0 && e.handovers < MAX_HANDOVERS
                {
                    e.handovers += 1;
                    Release::HandOver
                } else {
                    e.handovers = 0;
                    Release::Unlock
                }
            })
            .await
    }

    /// Ends the turn: `handed` says the remote lock (still holding this turn's word) is left
    /// for the next turn; else it was unlocked (or its state is unknown after an error).
    pub(crate) async fn finish(mut self, handed: bool) {
        self.live = false;
        let (mine, node) = (self.mine, self.node);
        self.table
            .with(self.idx, |e| end(e, mine, node, handed))
            .await;
    }
}

fn end(e: &mut Entry, mine: u64, node: u64, handed: bool) {
    if e.owner != mine {
        return;
    }
    e.owner = 0;
    e.pending = 0;
    e.node = node;
    e.handed = if handed { mine } else { 0 };
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        for _ in 0..DROP_SPINS {
            if let Some(mut e) = self.table.entries[self.idx].try_lock() {
                // A turn dropped after it was handed a word may not have re-stamped it: the
                // next turn tries that word first (a CAS that fails if it was re-stamped).
                let (was_mine, pending) = (e.owner == self.mine, e.pending);
                end(&mut e, self.mine, self.node, false);
                if was_mine && pending != 0 {
                    e.handed = pending;
                }
                return;
            }
            core::hint::spin_loop();
        }
        // The entry stayed busy: the turn is taken after a lease by a waiter.
    }
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// This compute node's local turn on the lock keyed `key` in `table` (internal nodes' or
    /// leaves' hand-over), when that table is on: the turn, and the owner word the previous
    /// holder handed it (0: none, acquire as usual). A hand-over left for another object
    /// hashed to the same entry and not taken is released for its releaser first: that
    /// object's on-chip bit cleared (`chip`), or its owner word at `word_at(other)` CASed
    /// back to 0 (harmless if it changed meanwhile). A local wait past the lease is
    /// `SmartError::Held` naming `what` at `lock_at`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn local_turn<'s>(
        &'s self,
        table: &'s HandOver,
        key: GlobalAddr,
        mine: u64,
        what: &'static str,
        lock_at: GlobalAddr,
        chip: bool,
        word_at: fn(GlobalAddr) -> GlobalAddr,
    ) -> Result<(Option<Turn<'s>>, u64), SmartError> {
        if !table.on() {
            return Ok((None, 0));
        }
        let (turn, g) = table
            .turn(key, mine, &self.cfg.lease, || self.ep.now_ns())
            .await
            .map_err(|t| SmartError::Held {
                what,
                at: lock_at,
                word: t.owner,
                holder: holder(t.owner),
                waited_ns: t.waited_ns,
            })?;
        if let Some((other, word)) = g.stale {
            if chip {
                self.unlock_chip(chip_lock(other, self.chip_bits)).await?;
            } else {
                self.qp(other)?.cas(word_at(other), word, 0).await?;
            }
        }
        Ok((Some(turn), g.handed.unwrap_or(0)))
    }
}

//! Reusing the memory of replaced nodes and leaves: a retire list per handle with a grace
//! period bounded by leases, so no client (alive, stalled or dead) can hold reclamation back.
//!
//! What is retired, by whom (each object exactly once: by the client whose CAS unlinked it
//! from the last live slot that named it):
//! - a deleted key's leaf: the delete marks it *retired* (status obsolete, forward to
//!   itself, under the checksum) and then swings its slot to empty (Node256) or dead
//!   ([`Slot::dead`], the smaller types); whoever wins that swing retires it (the deleter,
//!   or a reader that met the marked leaf and finished the unlink);
//! - a leaf replaced out of place, by the writer whose slot swing skipped it (a chain longer
//!   than one leaf is left to the forward chain and not reclaimed);
//! - a node replaced by a grow or a compaction, by the client whose swing published the copy
//!   (or removed it: a node left with no live slot is dropped from its parent).
//!
//! Why a reader never mistakes a new occupant for the object it meant, with no stamp in the
//! images and no verb added: every remote access of one operation *attempt* targets an
//! address learned from an image read during that attempt (or from the radix cache, below),
//! so the object was linked at some moment after the attempt began at `t0`, and retired (if
//! at all) after `t0`. Memory is reused only [`Timing::grace_ns`] after its retirement. An
//! attempt restarts from the root, learning nothing from what it read, once it is older
//! than [`Timing::attempt_ns`] (checked after each READ it trusts and before each CAS or
//! WRITE it posts on a learned address), and `grace >= attempt + in-flight slack`, so each of
//! its accesses executed before any reuse of what it targets. A stalled client (SIGSTOP, a
//! descheduled thread) comes back to stale attempts and restarts; a dead one accesses nothing.
//! Nothing is announced remotely, so no dead client's epoch can block anyone: the bound is
//! the attempt lease itself. Clocks are each client's own: only durations measured by one
//! client are compared (fabric clock rates agree; the factor in `grace` covers drift). A
//! fabric without a clock (`now_ns` always 0) never reuses anything.
//!
//! The radix cache keeps node images for longer than one attempt: the compute node drops it
//! whole once it is older than `grace - 2 * attempt` (entries filled at `f` name objects
//! linked after `f - attempt`, reused no sooner than `f - attempt + grace`; an attempt that
//! starts by `f + grace - 2 * attempt` is done by then).
//!
//! Memory-node crash: retire lists are volatile per client; the region's allocator cursor is
//! persistent. After a restart of the memory node the tree is reopened as it was written;
//! objects that were in some client's retire list (at most `grace` worth of one client's
//! retirements) are leaked, bounded, and nothing live is lost: the lists only ever held
//! unlinked objects.
use super::config::SmartConfig;
use remora_layouts::GlobalAddr;
use std_alloc::collections::VecDeque;
use std_alloc::vec::Vec;

/// The time bounds reclamation rests on, derived from the configured leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// An attempt older than this restarts (room for a whole lease wait and a takeover).
    pub attempt_ns: u64,
    /// Retired memory is reused this long after its retirement.
    pub grace_ns: u64,
}

impl Timing {
    pub(crate) fn of(cfg: &SmartConfig) -> Timing {
        let l = &cfg.lease;
        let attempt_ns = l
            .lease_ns
            .saturating_mul(2)
            .saturating_add(l.max_backoff_ns);
        Timing {
            attempt_ns,
            grace_ns: attempt_ns.saturating_mul(3),
        }
    }

    /// How long the radix cache may be used after it was (re)started.
    pub(crate) fn cache_ttl_ns(&self) -> u64 {
        self.grace_ns - 2 * self.attempt_ns
    }
}

const CLASSES: usize = 24;

fn class_of(size: usize) -> usize {
    let rounded = size
        .max(crate::alloc::MIN_OBJECT as usize)
        .next_power_of_two();
    (rounded.trailing_zeros() - crate::alloc::MIN_OBJECT.trailing_zeros()) as usize
}

/// One handle's retired objects and those ready for reuse, per memory node and size class.
pub(crate) struct Reclaim {
    timing: Timing,
    /// (retired at, address, bytes), oldest first.
    limbo: VecDeque<(u64, GlobalAddr, usize)>,
    ready: Vec<[Vec<u64>; CLASSES]>,
    /// Objects retired / reused so far.
    pub retired: u64,
    pub reused: u64,
}

impl Reclaim {
    pub(crate) fn new(timing: Timing, nodes: usize) -> Reclaim {
        Reclaim {
            timing,
            limbo: VecDeque::new(),
            ready: (0..nodes)
                .map(|_| core::array::from_fn(|_| Vec::new()))
                .collect(),
            retired: 0,
            reused: 0,
        }
    }

    /// Retires `addr` (`bytes` long), on memory node `ix`'s position, unlinked by now.
    pub(crate) fn retire(&mut self, now: u64, addr: GlobalAddr, bytes: usize) {
        self.retired += 1;
        self.limbo.push_back((now, addr, bytes));
    }

    /// Objects retired and not yet reused.
    pub(crate) fn waiting(&self) -> u64 {
        self.limbo.len() as u64
            + self
                .ready
                .iter()
                .flatten()
                .map(|v| v.len() as u64)
                .sum::<u64>()
    }

    /// A retired object of `bytes`' size class on memory node position `ix`, past its grace
    /// period at `now`.
    pub(crate) fn take(
        &mut self,
        now: u64,
        ix: usize,
        node_of: impl Fn(GlobalAddr) -> Option<usize>,
        bytes: usize,
    ) -> Option<u64> {
        if now != 0 {
            while let Some(&(at, addr, b)) = self.limbo.front() {
                if now.saturating_sub(at) < self.timing.grace_ns {
                    break;
                }
                self.limbo.pop_front();
                if let Some(n) = node_of(addr) {
                    self.ready[n][class_of(b)].push(addr.offset());
                }
            }
        }
        let off = self.ready.get_mut(ix)?[class_of(bytes)].pop()?;
        self.reused += 1;
        Some(off)
    }
}

impl<'e, E: crate::fabric::Endpoint> super::Smart<'e, E> {
    /// Unlinks the retired (deleted) leaf `leaf` of `bytes` bytes from slot `idx` of `node`
    /// (header `h`), where `slot` (naming `leaf` or the head of its forward chain) was read:
    /// a Node256 slot empties, a smaller node's turns dead. Whoever wins the swing retires
    /// the leaf (and the chain head). Returns whether we did.
    pub(crate) async fn unlink_leaf(
        &self,
        node: GlobalAddr,
        h: remora_layouts::smart::Header,
        idx: usize,
        slot: remora_layouts::smart::Slot,
        leaf: GlobalAddr,
        bytes: usize,
    ) -> Result<bool, super::SmartError> {
        use remora_layouts::smart::{NodeType, Slot, SlotKind};
        let new = if h.node_type() == NodeType::N256 {
            Slot::EMPTY
        } else {
            Slot::dead(slot.pkey())
        };
        let done = self
            .change_slot(node, h.frozen(false), idx, slot, new)
            .await?
            == super::structure::Swap::Done;
        if done {
            if let Some(mut c) = self.node.cache_mut() {
                c.set_slot(node, idx, new);
            }
            self.retire(leaf, bytes);
            if let Ok(SlotKind::Leaf { addr, .. }) = slot.kind()
                && addr != leaf
            {
                // The head of a forward chain (out of place): the links between it and the
                // retired end are not known here and stay unreclaimed.
                self.retire(addr, bytes);
            }
        }
        Ok(done)
    }
}

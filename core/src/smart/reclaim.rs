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
//! persistent. A restart of any memory node ends every handle (each reaches every node), so
//! what their retire lists, free lists and chunk tails held is in nobody's hands. The first
//! client to open the tree after the restart takes it back ([`super::Smart::open_recovering`],
//! `recover.rs`): everything below each node's cursor that the tree does not reach becomes
//! *spare* memory of that handle, reused first, once a grace period has passed since the
//! recovery began (every address into the previous life is older than that).
use super::config::SmartConfig;
use crate::lease::LeaseConfig;
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
        Timing::of_lease(&cfg.lease)
    }

    /// The bounds for a tree whose locks have lease `l` (SMART's, and CHIME's leaves).
    pub(crate) fn of_lease(l: &LeaseConfig) -> Timing {
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
    /// Free blocks recovered after a memory-node restart, per memory node and size class
    /// (each aligned as the allocator aligns an object of its class), and when.
    spare: Vec<[Vec<u64>; CLASSES]>,
    spare_at: u64,
    /// Bytes of the spare blocks.
    pub spare_bytes: u64,
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
            spare: (0..nodes)
                .map(|_| core::array::from_fn(|_| Vec::new()))
                .collect(),
            spare_at: 0,
            spare_bytes: 0,
            retired: 0,
            reused: 0,
        }
    }

    /// Retires `addr` (`bytes` long), on memory node `ix`'s position, unlinked by now.
    pub(crate) fn retire(&mut self, now: u64, addr: GlobalAddr, bytes: usize) {
        self.retired += 1;
        self.limbo.push_back((now, addr, bytes));
    }

    /// Takes back an object of `bytes` on memory node position `ix` that was never linked
    /// into the tree (a structural change that lost its CAS, a grow's copy allocated at a
    /// larger type than the compaction needed): nobody can hold its address, so it is
    /// ready for reuse at once. It joins the same per-class lists as retired objects: the
    /// allocator's own free list is bounded and drops what overflows it, and allocations
    /// are served from these lists first, so an object freed there behind a reuse from here
    /// was lost for good (about 0.8 MB per million churn operations).
    pub(crate) fn release(&mut self, ix: usize, off: u64, bytes: usize) {
        if let Some(lists) = self.ready.get_mut(ix) {
            lists[class_of(bytes)].push(off);
        }
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
        let class = class_of(bytes);
        let off = match self.ready.get_mut(ix)?[class].pop() {
            Some(off) => off,
            None if now != 0 && now.saturating_sub(self.spare_at) >= self.timing.grace_ns => {
                self.take_spare(ix, class)?
            }
            None => return None,
        };
        self.reused += 1;
        Some(off)
    }

    /// Adds the free range `[off, end)` of memory node position `ix`, reusable a grace
    /// period after `since`, as spare blocks: the largest powers of two that fit, each aligned to its size up to
    /// 64 bytes (as the allocator aligns objects). `off` and `end` are multiples of
    /// [`crate::alloc::MIN_OBJECT`].
    pub(crate) fn add_spare(&mut self, since: u64, ix: usize, mut off: u64, end: u64) {
        let min = crate::alloc::MIN_OBJECT;
        let Some(lists) = self.spare.get_mut(ix) else {
            return;
        };
        self.spare_at = since;
        let top = min << (CLASSES - 1);
        while end.saturating_sub(off) >= min {
            let rem = end - off;
            let mut p = if rem >= top {
                top
            } else {
                1u64 << (63 - rem.leading_zeros())
            };
            while p > min && !off.is_multiple_of(p.min(64)) {
                p /= 2;
            }
            lists[class_of(p as usize)].push(off);
            self.spare_bytes += p;
            off += p;
        }
    }

    /// A spare block of class `class` on node position `ix`: one of that class, or the
    /// front of the smallest larger one, whose other halves (one of each class in between)
    /// stay spare.
    fn take_spare(&mut self, ix: usize, class: usize) -> Option<u64> {
        let lists = self.spare.get_mut(ix)?;
        let from = (class..CLASSES).find(|&c| !lists[c].is_empty())?;
        let off = lists[from].pop()?;
        let min = crate::alloc::MIN_OBJECT;
        for (c, list) in lists.iter_mut().enumerate().take(from).skip(class) {
            list.push(off + (min << c));
        }
        self.spare_bytes -= min << class;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            attempt_ns: 10,
            grace_ns: 30,
        }
    }

    #[test]
    fn spare_blocks_are_aligned_split_on_demand_and_wait_a_grace() {
        let mut r = Reclaim::new(timing(), 1);
        // [16, 4160): 16 bytes at 16, 32 at 32, 4096 at 64 (each aligned to its size).
        r.add_spare(100, 0, 16, 16 + 4096 + 48);
        assert_eq!(r.spare_bytes, 4096 + 48);
        let node_of = |_| Some(0);
        // Not before the grace period since the recovery.
        assert_eq!(r.take(120, 0, node_of, 64), None);
        let mut got = Vec::new();
        while let Some(off) = r.take(130, 0, node_of, 64) {
            assert!(off.is_multiple_of(64), "{off}");
            assert!(off >= 16 && off + 64 <= 16 + 4096 + 48, "{off}");
            got.push(off);
        }
        got.sort_unstable();
        got.dedup();
        // Every 64-byte piece of the range, each once.
        assert_eq!(got.len(), 4096 / 64, "{got:?}");
        assert_eq!(r.spare_bytes, 48);
        assert_eq!(r.take(130, 0, node_of, 16), Some(16));
        assert_eq!(r.take(130, 0, node_of, 32), Some(32));
        assert_eq!(r.spare_bytes, 0);
        assert_eq!(r.take(130, 0, node_of, 16), None);
    }
}

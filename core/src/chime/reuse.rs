//! Reusing the leaves merges retire (`merge.rs`), with SMART's reclamation
//! (`crate::smart::reclaim`): a retire list per handle, each leaf reused only a grace period
//! after its retirement, and every operation *attempt* bounded by a lease, so no client
//! (alive, stalled or dead) can hold reclamation back and none can act on a reused leaf.
//!
//! The argument is SMART's (`smart/reclaim.rs`), with CHIME's addresses:
//! - an attempt (`Chime::begin`) learns leaf addresses only from level-1 pages (read in it,
//!   or cached: below), from leaf images it read (siblings, a retired leaf's forward
//!   pointer), or from the hotspot cache, whose entries are used only for the leaf the
//!   level-1 route names; so each leaf it touches was linked at some moment after the
//!   attempt began at `t0`, and was retired (unlinked from the level-1 page and from its
//!   left neighbour's sibling pointer) after `t0`;
//! - a retired leaf is reused (by a split, `alloc_leaf`) only [`Timing::grace_ns`] after it
//!   was retired, by the retiring client's clock;
//! - an attempt checks its age ([`Chime::fresh`]) after each READ whose image it trusts,
//!   after it takes a leaf's lock, and before each WRITE it posts on a leaf; one older than
//!   [`Timing::attempt_ns`] gives up what it did not write and restarts from the level-1
//!   route, so each of its accesses executed before any reuse of what it targets
//!   (`grace >= attempt` plus the slack of one verb in flight, as SMART's);
//! - a compute node's cached level-1 pages are dropped whole once older than
//!   `grace - 2 * attempt` ([`Chime::routes_cached`], as SMART's radix cache).
//!
//! A leaf's lock word is hashed from its address, so a stale attempt holding it holds the
//! lock of whatever leaf lives there now; it then writes nothing (its age is checked after
//! the lock is taken). A dead client accesses nothing and holds nothing back: its retire
//! list is lost with it (those leaves leak, as SMART's), and the bound is the attempt lease.
//! Not here (yet): free leaves recovered after a memory-node restart (SMART's
//! `recover.rs`); retire lists are volatile.
use super::{Chime, ChimeError};
use crate::fabric::Endpoint;
use crate::sherman::{ShermanConfig, ShermanError};
use crate::smart::reclaim::{Reclaim, Timing};
#[cfg(target_has_atomic = "64")]
use core::sync::atomic::Ordering::Relaxed;
use remora_layouts::GlobalAddr;
use remora_layouts::chime::LEAF_LEN;

/// What [`Chime::fresh`] reports: the attempt is too old to act on what it read.
const STALE: &str = "chime: attempt older than the reuse of merged leaves allows";

/// The time bounds of reuse from the tree's leases (SMART's: an attempt has room for a
/// whole lease wait and a takeover; grace is three attempts).
pub(super) fn timing(cfg: &ShermanConfig) -> Timing {
    Timing::of_lease(&cfg.lease)
}

/// A fresh retire list for a tree on `nodes` memory nodes.
pub(super) fn reclaim(cfg: &ShermanConfig, nodes: usize) -> Reclaim {
    Reclaim::new(timing(cfg), nodes)
}

/// Whether `e` is [`Chime::fresh`]'s report (the caller restarts the attempt).
pub(super) fn is_stale(e: &ChimeError) -> bool {
    matches!(e, ShermanError::Unsettled { what, .. } if *what == STALE)
}

impl<'e, E: Endpoint> Chime<'e, E> {
    /// Begins an operation attempt (its age is measured from now).
    pub(super) fn begin(&self) {
        self.t0.set(self.tree.endpoint().now_ns());
    }

    /// `Err` (see [`is_stale`]) once the current attempt is older than reuse allows.
    pub(super) fn fresh(&self) -> Result<(), ChimeError> {
        if !self.guarded() {
            return Ok(());
        }
        let age = self.tree.endpoint().now_ns().saturating_sub(self.t0.get());
        if age < self.timing.attempt_ns {
            return Ok(());
        }
        self.count(|s| s.stale_attempts += 1);
        Err(ShermanError::Unsettled {
            what: STALE,
            at: GlobalAddr::NULL,
            waited_ns: age,
        })
    }

    /// Whether merged leaves are reused under the guard (the mutation `reuse_unguarded`
    /// turns it off to show what it prevents).
    fn guarded(&self) -> bool {
        self.cfg.merge && !self.cfg.mutation.reuse_unguarded
    }

    /// Whether this attempt may use the node's cached level-1 pages: they are dropped whole
    /// once older than `grace - 2 * attempt`; false if they are due and could not be
    /// dropped now (the cache's guard busy): the route is then read from the tree.
    pub(super) fn routes_cached(&self) -> bool {
        if !self.guarded() {
            return true;
        }
        #[cfg(not(target_has_atomic = "64"))]
        {
            // No stamp to age the cache by (a 32-bit target): drop the level-1 pages at every
            // attempt, so that only pages this attempt reads are used.
            self.tree.forget_leaves()
        }
        #[cfg(target_has_atomic = "64")]
        self.routes_cached_since()
    }

    /// [`Self::routes_cached`] by the node's stamp of its last drop.
    #[cfg(target_has_atomic = "64")]
    fn routes_cached_since(&self) -> bool {
        let now = self.tree.endpoint().now_ns();
        let started = self.node.routes_since.load(Relaxed);
        if now.saturating_sub(started) < self.timing.cache_ttl_ns() {
            return true;
        }
        if !self.tree.forget_leaves() {
            return false;
        }
        // Pages cached from now on were read after `now`.
        self.node.routes_since.fetch_max(now, Relaxed);
        true
    }

    /// Retires leaf `addr`, unlinked from the tree by now (`merge.rs`).
    pub(super) fn retire(&self, addr: GlobalAddr) {
        let now = self.tree.endpoint().now_ns();
        self.reclaim.borrow_mut().retire(now, addr, LEAF_LEN);
        self.count(|s| s.retired += 1);
    }

    /// Takes back leaves allocated by [`Self::alloc_leaf`] and never written: nobody holds
    /// their addresses, so they are ready at once.
    pub(super) fn give_back(&self, leaves: &[GlobalAddr]) {
        let mut r = self.reclaim.borrow_mut();
        for &a in leaves {
            if let Some(ix) = self.tree.alloc_index(a) {
                r.release(ix, a.offset(), LEAF_LEN);
            }
        }
    }

    /// Memory for a new leaf: a retired one past its grace period, else fresh.
    pub(super) async fn alloc_leaf(&self) -> Result<GlobalAddr, ChimeError> {
        if self.cfg.merge {
            let now = if self.cfg.mutation.reuse_unguarded {
                u64::MAX
            } else {
                self.tree.endpoint().now_ns()
            };
            let (n, id_of) = self.tree.alloc_nodes();
            let node_of = |a: GlobalAddr| self.tree.alloc_index(a);
            let mut r = self.reclaim.borrow_mut();
            for ix in 0..n {
                if let Some(off) = r.take(now, ix, node_of, LEAF_LEN)
                    && let Some(id) = id_of(ix)
                {
                    self.count(|s| s.reused += 1);
                    return Ok(GlobalAddr::new(id, off));
                }
            }
        }
        self.tree.alloc_leaf(LEAF_LEN as u64).await
    }
}

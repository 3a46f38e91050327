//! The tree as the server threads of one memory node share it.
//!
//! A node may run several server threads ([`crate::server::Handler::fork`]), each serving
//! its own share of the connections with its own [`super::CatfishServer`]. They share one
//! tree, under two rules:
//!
//! - **Writers take the lock.** Everything that changes the tree or its arenas (Init, Grow,
//!   Insert, carving a mailbox block, recovery) runs under [`SharedTree::lock`], a spin lock
//!   (inserts are short; `core` has no OS to block on). So writers never race each other, as
//!   when one thread served everything, and the tree's own code needs no change.
//! - **Searches do not.** A server thread searches the tree the way an offloading client
//!   does, without the lock: it reads the root from the superblock, validates every node image
//!   by its seqlock version and CRC-64 (re-reading a torn one, bounded), and relies on the
//!   writers' rules for one-sided readers (ancestors enlarged top-down before an entry
//!   appears, splits copy-on-write; see [`super::tree`]), and like one it takes the
//!   reclamation epoch before the root and starts over if it meets a node born after the
//!   epoch's grace period ([`super::reclaim`]). So a search on one thread never
//!   waits for an insert on another, and it never misses an entry whose insert finished
//!   before the search began nor invents one, exactly as for an offloaded search.
use super::CatfishError;
use super::client::{REUSE_RESTARTS, TORN_RETRIES};
use super::tree::{Tree, read_node};
use crate::server::LocalRegion;
use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
// `usize` words, not `u64`: `core` builds for 32-bit targets without 64-bit atomics, and a
// server's own region offsets fit its address space.
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use remora_layouts::catfish::{Entry, META_EPOCH_OFFSET, META_ROOT_OFFSET, Node, Rect, node_len};
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::vec::Vec;

/// What the writers' lock protects.
#[derive(Default)]
pub struct Writer {
    /// The tree, once opened or created.
    pub tree: Option<Tree>,
    /// Mailbox blocks of closed connections, handed to the next ones.
    pub free_mailboxes: Vec<u64>,
}

/// One node's tree, shared by its server threads.
#[derive(Default)]
pub struct SharedTree {
    locked: AtomicBool,
    writer: UnsafeCell<Writer>,
    /// The published tree's superblock offset (0: none) and fanout, for lock-free readers;
    /// set when a writer releases the lock.
    meta: AtomicUsize,
    fanout: AtomicUsize,
    /// Heartbeat sequence numbers, one series for all threads.
    seq: AtomicUsize,
}

// SAFETY: `writer` is only reached through a `WriterGuard`, which exists only while
// `locked` is held by its creator (acquire on lock, release on drop), so at most one thread
// touches it at a time; everything else is atomics.
unsafe impl Sync for SharedTree {}
// SAFETY: the fields are owned data (`Writer` is Send: plain vectors and the tree's handle).
unsafe impl Send for SharedTree {}

/// Exclusive access to the tree's writer state; released (and the tree republished to
/// readers) when dropped.
pub struct WriterGuard<'a> {
    shared: &'a SharedTree,
}

impl SharedTree {
    /// Takes the writers' lock (spinning with back-off while another thread holds it).
    pub fn lock(&self) -> WriterGuard<'_> {
        let backoff = crossbeam_utils::Backoff::new();
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            backoff.snooze();
        }
        WriterGuard { shared: self }
    }

    /// The published superblock offset, if there is a tree.
    pub fn meta(&self) -> Option<u64> {
        match self.meta.load(Ordering::Acquire) {
            0 => None,
            m => Some(m as u64),
        }
    }

    /// The next heartbeat sequence number.
    pub fn next_seq(&self) -> u64 {
        // Wraps after 2^32 heartbeats on a 32-bit target (over a year at 10 ms).
        self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1) as u64
    }

    /// Appends every leaf entry intersecting `rect` to `out`, without the writers' lock (see
    /// the module docs). `stack` is scratch space.
    pub fn search(
        &self,
        region: &dyn LocalRegion,
        rect: &Rect,
        out: &mut Vec<Entry>,
        stack: &mut Vec<(u64, u16)>,
    ) -> Result<(), CatfishError> {
        let Some(meta) = self.meta() else {
            return Err(CatfishError::NotCreated);
        };
        let fanout = self.fanout.load(Ordering::Acquire);
        let start = out.len();
        for _ in 0..=REUSE_RESTARTS {
            if search_once(region, meta, fanout, rect, out, stack)? {
                return Ok(());
            }
            out.truncate(start);
        }
        Err(CatfishError::Lapped {
            node: region.node(),
            restarts: REUSE_RESTARTS,
        })
    }
}

/// One lock-free traversal; false if it met a node born after the grace period of the epoch
/// it started from (see [`super::reclaim`]).
fn search_once(
    region: &dyn LocalRegion,
    meta: u64,
    fanout: usize,
    rect: &Rect,
    out: &mut Vec<Entry>,
    stack: &mut Vec<(u64, u16)>,
) -> Result<bool, CatfishError> {
    // Loaded (acquire) before the root and every node: an epoch from before the walk.
    let epoch0 = region.load_u64(meta + META_EPOCH_OFFSET)?;
    let root = GlobalAddr::from_raw(region.load_u64(meta + META_ROOT_OFFSET)?).offset();
    // Every node holds at least one node length of the region: a longer walk is a cycle.
    let most = region.len() / node_len(fanout) as u64 + 1;
    let mut visited = 0u64;
    stack.clear();
    stack.push((root, u16::MAX));
    while let Some((off, level)) = stack.pop() {
        visited += 1;
        if visited > most {
            return Err(CatfishError::Corrupt(
                "search visited more nodes than exist",
            ));
        }
        let node = read_consistent(region, off, fanout)?;
        if node.born_after_grace(epoch0) {
            return Ok(false);
        }
        if level != u16::MAX && node.level != level {
            return Err(CatfishError::Corrupt("child level is not parent level - 1"));
        }
        for e in node.entries() {
            if !e.rect.intersects(rect) {
                continue;
            }
            if node.level == 0 {
                out.push(*e);
            } else {
                stack.push((GlobalAddr::from_raw(e.ptr).offset(), node.level - 1));
            }
        }
    }
    Ok(true)
}

/// Reads one node, re-reading while a writer on another thread is mid-rewrite (bounded).
fn read_consistent(
    region: &dyn LocalRegion,
    off: u64,
    fanout: usize,
) -> Result<Node, CatfishError> {
    let mut last = LayoutError::Inconsistent { what: "never read" };
    for _ in 0..TORN_RETRIES {
        match read_node(region, off, fanout) {
            Ok(n) => return Ok(n),
            Err(CatfishError::Layout(e)) => last = e,
            Err(e) => return Err(e),
        }
        core::hint::spin_loop();
    }
    Err(CatfishError::TornRetriesExhausted {
        addr: GlobalAddr::new(region.node(), off),
        last,
    })
}

impl Deref for WriterGuard<'_> {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        // SAFETY: this guard holds the lock (see `unsafe impl Sync for SharedTree`).
        unsafe { &*self.shared.writer.get() }
    }
}

impl DerefMut for WriterGuard<'_> {
    fn deref_mut(&mut self) -> &mut Writer {
        // SAFETY: this guard holds the lock, and `&mut self` makes this the only reference.
        unsafe { &mut *self.shared.writer.get() }
    }
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        let (meta, fanout) = match &self.tree {
            // The superblock lies in this server's own mapped region, so its offset fits.
            Some(t) => (usize::try_from(t.meta()).unwrap_or(0), t.fanout()),
            None => (0, 0),
        };
        self.shared.fanout.store(fanout, Ordering::Release);
        self.shared.meta.store(meta, Ordering::Release);
        self.shared.locked.store(false, Ordering::Release);
    }
}

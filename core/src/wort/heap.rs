//! The tree's heap: a bump allocator over memory claimed from the region's chunk allocator as
//! it grows, with the replaced leaves and nodes reused.
//!
//! - **Claimed as used.** The heap is `[base, end)`, where `end` is what it has claimed from
//!   the region header's chunk cursor so far (one chunk more each time the bump pointer needs
//!   it, and only while the cursor is still `end`: memory another service claimed after the
//!   heap is never taken). So the region's cursor shows the heap's real use (`remora bench
//!   --churn` samples it). `end` is in the superblock, stored after the cursor's claim is
//!   persisted: a crash between the two strands at most one chunk.
//! - **Durable mark.** `top` is the bump pointer; the superblock's mark (`durable_top`)
//!   advances ahead of it in extents, persisted before anything above the old mark is
//!   reachable: every reachable leaf or node lies below it.
//! - **Reuse.** The server frees a leaf or node once the 8-byte store that unlinks it is
//!   persisted; it is reused by the next allocation of a run it fits (best fit, the rest
//!   stays free; neighbours merge). Every read goes through the server, which applies one
//!   request at a time, so no reader can still hold a freed address. The free runs are
//!   volatile: recovery takes them back as the gaps between what the tree reaches
//!   ([`Heap::rebuild`]).
use super::layout::{SB_HEAP_END, SB_HEAP_TOP, TreeError};
use crate::server::LocalRegion;
use remora_layouts::region::NEXT_CHUNK_OFFSET;
use std_alloc::collections::{BTreeMap, BTreeSet};

/// The heap's durable mark advances this far at a time.
pub(super) const EXTENT: u64 = 64 << 10;

/// A heap's volatile handle (see the module doc).
#[derive(Debug, Clone)]
pub(super) struct Heap {
    /// First byte of the heap.
    pub(super) base: u64,
    /// End of the memory claimed for it (the superblock's `heap_end`).
    pub(super) end: u64,
    /// How far it may grow: the region's last whole chunk.
    pub(super) limit: u64,
    /// Chunk size of the region's allocator.
    pub(super) chunk: u64,
    /// Next never-used byte.
    pub(super) top: u64,
    /// The superblock's mark: nothing reachable lies above it.
    pub(super) durable_top: u64,
    /// Free runs by offset (value: length), and by (length, offset) for best fit.
    free: BTreeMap<u64, u64>,
    by_len: BTreeSet<(u64, u64)>,
    /// Bytes in the free runs.
    free_bytes: u64,
    /// `persist` calls made (the mark, the claims).
    pub(super) persists: u64,
}

impl Heap {
    /// A heap over `[base, end)`, bump pointer and mark at `top`, growing up to `limit` in
    /// `chunk`s.
    pub(super) fn new(base: u64, end: u64, top: u64, limit: u64, chunk: u64) -> Heap {
        Heap {
            base,
            end,
            limit: limit.max(end),
            chunk: chunk.max(1),
            top,
            durable_top: top,
            free: BTreeMap::new(),
            by_len: BTreeSet::new(),
            free_bytes: 0,
            persists: 0,
        }
    }

    /// Bytes in use: below the bump pointer and not free.
    pub(super) fn used(&self) -> u64 {
        self.top - self.base - self.free_bytes
    }

    /// `len` bytes (rounded up to 64): a free run that fits, or the bump pointer.
    pub(super) fn alloc(
        &mut self,
        r: &dyn LocalRegion,
        sb: u64,
        len: usize,
    ) -> Result<u64, TreeError> {
        let len = (len as u64).next_multiple_of(64);
        if let Some(&(l, o)) = self.by_len.range((len, 0)..).next() {
            self.take(o, l);
            if l > len {
                self.put(o + len, l - len);
            }
            return Ok(o);
        }
        let end = self.top.checked_add(len).ok_or(TreeError::Full)?;
        if end > self.durable_top {
            // The mark goes first: nothing is reachable above a durable mark.
            let mark = end.next_multiple_of(EXTENT);
            if mark > self.end {
                self.claim(r, sb, mark)?;
            }
            let mark = mark.min(self.end);
            if end > mark {
                return Err(TreeError::Full);
            }
            r.store_u64(sb + SB_HEAP_TOP, mark)?;
            r.persist_evict(sb + SB_HEAP_TOP, 8);
            self.persists += 1;
            self.durable_top = mark;
        }
        let o = self.top;
        self.top = end;
        Ok(o)
    }

    /// Claims whole chunks from the region's cursor until the heap reaches `to` (or the
    /// region's end), if the cursor is still at the heap's end; else the heap stays as it is.
    fn claim(&mut self, r: &dyn LocalRegion, sb: u64, to: u64) -> Result<(), TreeError> {
        let want = to.next_multiple_of(self.chunk).min(self.limit);
        if want <= self.end || r.cas_u64(NEXT_CHUNK_OFFSET, self.end, want)? != self.end {
            return Ok(());
        }
        r.persist_evict(NEXT_CHUNK_OFFSET, 8);
        r.store_u64(sb + SB_HEAP_END, want)?;
        r.persist_evict(sb + SB_HEAP_END, 8);
        self.persists += 2;
        self.end = want;
        Ok(())
    }

    /// `len` bytes at `off` (as allocated) are free again: the store that unlinked them is
    /// persisted.
    pub(super) fn free(&mut self, off: u64, len: usize) {
        let mut len = (len as u64).next_multiple_of(64);
        let mut off = off;
        if off < self.base || off + len > self.top || len == 0 {
            return;
        }
        if let Some((&o, &l)) = self.free.range(..off).next_back()
            && o + l == off
        {
            self.take(o, l);
            off = o;
            len += l;
        }
        if let Some(&l) = self.free.get(&(off + len)) {
            self.take(off + len, l);
            len += l;
        }
        self.put(off, len);
    }

    /// After a crash: every byte below the bump pointer that no block of `reachable`
    /// (offset, allocated length) covers is free.
    pub(super) fn rebuild(&mut self, reachable: &mut [(u64, u64)]) {
        self.free.clear();
        self.by_len.clear();
        self.free_bytes = 0;
        reachable.sort_unstable();
        let mut at = self.base;
        for &(o, l) in reachable.iter() {
            if o > at {
                self.put(at, o - at);
            }
            at = at.max(o + l.next_multiple_of(64));
        }
        if self.top > at {
            self.put(at, self.top - at);
        }
    }

    fn put(&mut self, off: u64, len: u64) {
        self.free.insert(off, len);
        self.by_len.insert((len, off));
        self.free_bytes += len;
    }

    fn take(&mut self, off: u64, len: u64) {
        self.free.remove(&off);
        self.by_len.remove(&(len, off));
        self.free_bytes -= len;
    }
}

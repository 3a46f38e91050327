//! The B-link tree itself: traversal, lookups, writes, splits, scans (the descriptor and
//! opening a tree are in `open.rs`).
use super::cache::child_for;
use super::lock::{Batch, Got, Locks};
use super::node::NodeCache;
use super::open::{D_ROOT, NodeLocks};
use super::redo;
use super::wait::Patience;
use super::{PageCheck, ShermanConfig, ShermanError};
use crate::alloc::RemoteAllocator;
use crate::fabric::{Endpoint, Op, QueuePair, Work};
use crate::index::KvIndex;
use crate::lease::LeaseConfig;
use core::cell::{Cell, RefCell};
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{
    Geometry, KEY_INFINITY, PageHeader, Slot, encode_leaf_entry, internal_entry, leaf_entry_bytes,
    leaf_slot, leaf_value, rebind_entry, seal, set_internal_entry, verify_leaf,
};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// What a locked leaf step decided.
enum Step {
    Done(bool),
    /// To the right sibling (address, separator: the page's high fence).
    MoveTo(GlobalAddr, u64),
    Restart,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Upsert,
    Update,
    Delete,
}

/// What a handle repaired of what other (dead or slow) clients left half-done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairStats {
    /// Locks taken over from a holder fenced after its lease ran out.
    pub takeovers: u64,
    /// Separators of finished splits inserted into a parent that lacked them.
    pub separators_linked: u64,
    /// Roots grown over a split root.
    pub roots_grown: u64,
    /// Internal pages found torn by a dead writer and re-derived from the level below.
    pub pages_rederived: u64,
    /// Leaves found torn by a dead writer and rewritten from its redo record.
    pub leaves_redone: u64,
}

/// A redo record about to be posted (see `redo.rs`): its image, the slot it goes to, and
/// the lock's redo pointer that will name the slot.
struct Logged {
    rec: Vec<u8>,
    len: usize,
    slot: GlobalAddr,
    slot_word: [u8; 8],
    ptr: GlobalAddr,
    node: usize,
}

/// One compute node's handle on a Sherman tree (see [`super`]).
pub struct Sherman<'e, E: Endpoint> {
    pub(super) ep: &'e E,
    pub(super) cfg: ShermanConfig,
    pub(super) g: Geometry,
    pub(super) desc: GlobalAddr,
    pub(super) onchip: bool,
    pub(super) root: Cell<GlobalAddr>,
    pub(super) nodes: Vec<NodeLocks>,
    pub(super) allocs: Vec<RemoteAllocator>,
    pub(super) next_alloc: Cell<usize>,
    pub(super) locks: Locks,
    /// The compute node's index cache (its local lock table is in `locks`).
    pub(super) node: NodeCache,
    pub(super) pool: RefCell<Vec<Vec<u8>>>,
    pub(super) handovers: Cell<u64>,
    pub(super) splits: Cell<u64>,
    /// A link a traversal found missing (a page reached through its parent or left
    /// neighbour whose right sibling the parent does not know): (parent level, separator,
    /// child). The next write of this handle inserts it.
    pub(super) missing: Cell<Option<(u8, u64, GlobalAddr)>>,
    /// Repairs made of what other clients left half-done.
    pub(super) repairs: Cell<RepairStats>,
    /// Free redo slots of this handle, per memory node (index as in `nodes`).
    pub(super) redo_slots: RefCell<Vec<Vec<GlobalAddr>>>,
    /// Buffers for redo record images.
    pub(super) records: RefCell<Vec<Vec<u8>>>,
}

/// Largest page a lookup reads into its own frame (the paper's 1 KiB pages) instead of a
/// pooled heap page.
const FRAME_PAGE: usize = 1024;

fn key_of(key: &[u8]) -> Result<u64, ShermanError> {
    let k: [u8; 8] = key
        .try_into()
        .map_err(|_| ShermanError::BadKey { len: key.len() })?;
    let k = u64::from_be_bytes(k);
    if k == KEY_INFINITY {
        return Err(ShermanError::BadKey { len: 8 });
    }
    Ok(k)
}

/// The page version leaf entries are bound to: the page's own version, except in the
/// front == rear mutant, whose entries (like the authors') are not bound.
fn bind_of(check: PageCheck, version: u64) -> u64 {
    match check {
        PageCheck::Checksums => version,
        #[cfg(any(test, feature = "conformance"))]
        PageCheck::FrontRearOnly => 0,
    }
}

/// Encodes a whole leaf image into `img`: version `version`, fences `[low, high)`, `entries`
/// (key, value) in the first slots, every other slot free, all bound to the version; sealed.
#[allow(clippy::too_many_arguments)]
pub(super) fn encode_leaf(
    img: &mut [u8],
    g: &Geometry,
    check: PageCheck,
    version: u64,
    low: u64,
    high: u64,
    sibling: u64,
    entries: &[(u64, Vec<u8>)],
) {
    let h = PageHeader {
        front_version: version,
        meta: PageHeader::pack_meta(0, true, 0),
        sibling,
        low_fence: low,
        high_fence: high,
        ..Default::default()
    };
    h.encode(img);
    let bind = bind_of(check, version);
    for s in 0..g.leaf_capacity() {
        let at = g.leaf_entry_offset(s);
        let out = &mut img[at..at + g.leaf_entry_size()];
        match entries.get(s) {
            Some((k, v)) => encode_leaf_entry(out, *k, v, 1, true, bind),
            None => encode_leaf_entry(out, 0, &[], 0, false, bind),
        }
    }
    seal(img, g);
}

/// Word `i` of a page image, unverified (each aligned word is atomic: an old or a new value).
fn raw_word(page: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&page[i * 8..i * 8 + 8]);
    u64::from_le_bytes(w)
}

/// The level of a page from its (unverified) meta word: `Some` for a plausible one.
fn raw_level(page: &[u8]) -> Option<u8> {
    let h = PageHeader {
        meta: raw_word(page, 1),
        ..Default::default()
    };
    let level = h.level();
    (level <= 32 && h.is_leaf() == (level == 0)).then_some(level)
}

/// The (unverified) header says: an internal page.
fn raw_internal(page: &[u8]) -> bool {
    raw_level(page).is_some_and(|l| l > 0)
}

/// Spreads page addresses over lock words (Fibonacci hashing: the high bits of the product).
/// Comparisons of a binary search over `n` entries.
fn search_steps(n: usize) -> usize {
    (usize::BITS - n.leading_zeros()) as usize
}

fn hash(a: GlobalAddr) -> u64 {
    (a.raw() >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    pub fn geometry(&self) -> Geometry {
        self.g
    }
    /// Lock hand-overs this handle received, and splits it made.
    pub fn stats(&self) -> (u64, u64) {
        (self.handovers.get(), self.splits.get())
    }
    /// Repairs this handle made of what other (dead or slow) clients left half-done.
    pub fn repairs(&self) -> RepairStats {
        self.repairs.get()
    }
    fn repaired(&self, f: impl FnOnce(&mut RepairStats)) {
        let mut r = self.repairs.get();
        f(&mut r);
        self.repairs.set(r);
    }
    /// Index-cache hits and misses of this handle, and bytes in the node's cache.
    pub fn cache_stats(&self) -> (u64, u64, usize) {
        self.node.stats()
    }

    fn page(&self) -> Vec<u8> {
        self.pool
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| vec![0u8; self.g.page_size])
    }
    fn give(&self, p: Vec<u8>) {
        self.pool.borrow_mut().push(p);
    }

    /// The bounds of every wait (the lease config, attempts capped by `lock_retries`).
    fn patience(&self) -> Patience {
        Patience::new(LeaseConfig {
            max_attempts: self.cfg.lock_retries,
            ..self.cfg.lease
        })
    }

    fn qp(&self, a: GlobalAddr) -> Result<&'e E::Qp, ShermanError> {
        Ok(self.ep.qp_for(a)?)
    }

    fn lock_for(&self, page: GlobalAddr) -> Result<GlobalAddr, ShermanError> {
        let n = self
            .nodes
            .iter()
            .find(|n| n.node == page.node())
            .ok_or(ShermanError::Fabric(
                crate::fabric::FabricError::UnknownNode { node: page.node() },
            ))?;
        Ok(if self.onchip {
            GlobalAddr::device(n.node, (hash(page) & (n.dm_locks - 1)) * 8)
        } else {
            n.host_table.add((hash(page) & (n.host_locks - 1)) * 8)
        })
    }

    /// The redo pointer of the lock word that guards `page` (same index in its table).
    fn redo_ptr(&self, page: GlobalAddr) -> Result<GlobalAddr, ShermanError> {
        let i = self.node_index(page)?;
        let n = &self.nodes[i];
        let count = if self.onchip {
            n.dm_locks
        } else {
            n.host_locks
        };
        Ok(n.redo_table.add((hash(page) & (count - 1)) * 8))
    }

    fn node_index(&self, page: GlobalAddr) -> Result<usize, ShermanError> {
        self.nodes
            .iter()
            .position(|n| n.node == page.node())
            .ok_or(ShermanError::Fabric(
                crate::fabric::FabricError::UnknownNode { node: page.node() },
            ))
    }

    /// The redo record of writing `bytes` at `off` of leaf `page` (its lock held; `rebind`:
    /// see `redo::Record`), in a slot of this handle's on the page's node; post it with
    /// [`Self::log_ops`] ahead of the write, then return it with [`Self::unlog`].
    async fn log(
        &self,
        page: GlobalAddr,
        off: usize,
        bytes: &[u8],
        rebind: u64,
    ) -> Result<Logged, ShermanError> {
        let node = self.node_index(page)?;
        let ptr = self.redo_ptr(page)?;
        let free = self
            .redo_slots
            .borrow_mut()
            .get_mut(node)
            .and_then(Vec::pop);
        let slot = match free {
            Some(s) => s,
            None => {
                let a = &self.allocs[node];
                a.alloc(self.ep.qp(a.node())?, self.record_len() as u64)
                    .await?
            }
        };
        let mut rec = self
            .records
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| vec![0u8; self.record_len()]);
        let len = redo::encode(&mut rec, page, off, bytes, rebind);
        Ok(Logged {
            rec,
            len,
            slot,
            slot_word: slot.raw().to_le_bytes(),
            ptr,
            node,
        })
    }

    fn record_len(&self) -> usize {
        redo::HEADER + self.g.page_size
    }

    /// The record's WRITE and the redo pointer's, to go ahead of the page write.
    fn log_ops<'b>(&self, l: &'b Logged, ops: &mut Batch<'b>) {
        for op in [
            Op::Write {
                remote: l.slot,
                local: &l.rec[..l.len],
            },
            Op::Write {
                remote: l.ptr,
                local: &l.slot_word,
            },
        ] {
            ops.push(op)
                .expect("a doorbell batch holds at most 8 work requests");
        }
    }

    /// The doorbell that carried `l` completed (or failed): its slot and buffer are free.
    fn unlog(&self, l: Logged) {
        let mut slots = self.redo_slots.borrow_mut();
        if slots.len() <= l.node {
            slots.resize_with(l.node + 1, Vec::new);
        }
        slots[l.node].push(l.slot);
        self.records.borrow_mut().push(l.rec);
    }

    /// Takes the lock of `page` (returned); after a takeover from a dead holder, first puts
    /// back the leaf it may have torn ([`Self::redo`]). `seen`: see [`Locks::acquire`].
    async fn acquire_page(
        &self,
        page: GlobalAddr,
        seen: Option<(u64, u64)>,
    ) -> Result<(GlobalAddr, Got), ShermanError> {
        let lock = self.lock_for(page)?;
        let got = self.locks.acquire(self.ep, lock, seen).await?;
        if let Got::TookOver { .. } = got {
            self.repaired(|r| r.takeovers += 1);
            if let Err(e) = self.redo(page).await {
                self.locks
                    .release(self.qp(page)?, lock, &mut Batch::new())
                    .await?;
                return Err(e);
            }
        }
        Ok((lock, got))
    }

    /// Under the lock of `page`, just taken over: re-applies the redo record its pointer
    /// names if that record is whole, is of a page under this same lock, and that page is a
    /// leaf that does not verify (see `redo.rs` for why that is the dead holder's torn write).
    async fn redo(&self, page: GlobalAddr) -> Result<(), ShermanError> {
        let ptr = self.redo_ptr(page)?;
        let qp = self.qp(page)?;
        let mut w = [0u8; 8];
        qp.read(ptr, &mut w).await?;
        let slot = GlobalAddr::from_raw(u64::from_le_bytes(w));
        if slot.is_null() || slot.node() != page.node() {
            return Ok(());
        }
        let mut rec = self
            .records
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| vec![0u8; self.record_len()]);
        let mut buf = self.page();
        let r = async {
            qp.read(slot, &mut rec).await?;
            let Some(r) = redo::decode(&rec, self.g.page_size) else {
                return Ok(());
            };
            if r.page.node() != page.node() || self.redo_ptr(r.page)? != ptr {
                return Ok(());
            }
            qp.read(r.page, &mut buf).await?;
            if raw_level(&buf) != Some(0) || self.leaf_whole(&buf) {
                return Ok(());
            }
            let end = r.off + r.bytes.len();
            if r.rebind != 0 {
                // FG+: the new image from the torn one (see `redo.rs`).
                buf[..8].copy_from_slice(&r.rebind.to_le_bytes());
                let bind = bind_of(self.cfg.page_check, r.rebind);
                let size = self.g.leaf_entry_size();
                for slot in 0..self.g.leaf_capacity() {
                    let at = self.g.leaf_entry_offset(slot);
                    rebind_entry(&mut buf[at..at + size], bind);
                }
            }
            buf[r.off..end].copy_from_slice(r.bytes);
            if r.rebind != 0 {
                seal(&mut buf, &self.g);
            }
            if !self.leaf_whole(&buf) {
                // Not the torn write this record describes: left for the deadline to report.
                return Ok(());
            }
            if r.rebind != 0 {
                qp.write(r.page, &buf).await?;
            } else {
                qp.write(r.page.add(r.off as u64), r.bytes).await?;
            }
            self.repaired(|s| s.leaves_redone += 1);
            Ok(())
        }
        .await;
        self.give(buf);
        self.records.borrow_mut().push(rec);
        r
    }

    /// The leaf image verifies (header and every slot).
    fn leaf_whole(&self, page: &[u8]) -> bool {
        self.decode(page)
            .is_ok_and(|h| h.is_leaf() && self.find_in_leaf(page, self.bind(&h), 0).is_ok())
    }

    /// A reader found leaf `addr` torn for a lease: takes its lock (from the dead writer, who
    /// is fenced, which repairs the leaf) and lets it go. `seen`: the lock word when the
    /// reader first found the leaf torn ([`Self::lock_word`]): if it has not changed since, the
    /// lease has run out already.
    async fn repair_leaf(
        &self,
        addr: GlobalAddr,
        seen: Option<(u64, u64)>,
    ) -> Result<(), ShermanError> {
        let (lock, _) = self.acquire_page(addr, seen).await?;
        self.locks
            .release(self.qp(addr)?, lock, &mut Batch::new())
            .await
    }

    /// The lock word of `page` now, and when it was read (for [`Self::repair_leaf`]).
    async fn lock_word(&self, page: GlobalAddr) -> Result<(u64, u64), ShermanError> {
        let lock = self.lock_for(page)?;
        let mut w = [0u8; 8];
        self.qp(lock)?.read(lock, &mut w).await?;
        Ok((u64::from_le_bytes(w), self.ep.now_ns()))
    }

    async fn alloc_page(&self) -> Result<GlobalAddr, ShermanError> {
        let i = self.next_alloc.get() % self.allocs.len();
        self.next_alloc.set(i + 1);
        let a = &self.allocs[i];
        Ok(a.alloc(self.ep.qp(a.node())?, self.g.page_size as u64)
            .await?)
    }

    fn decode(&self, page: &[u8]) -> Result<PageHeader, remora_layouts::LayoutError> {
        match self.cfg.page_check {
            PageCheck::Checksums => PageHeader::decode(page, &self.g),
            #[cfg(any(test, feature = "conformance"))]
            PageCheck::FrontRearOnly => PageHeader::decode_front_rear(page, &self.g),
        }
    }

    fn bind(&self, h: &PageHeader) -> u64 {
        bind_of(self.cfg.page_check, h.front_version)
    }

    /// READ a page until its image is whole and well-formed (for a leaf: its header; the
    /// caller verifies the entries it uses against [`Self::bind`]).
    async fn read_page(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
    ) -> Result<PageHeader, ShermanError> {
        self.read_page_as(addr, buf, false).await
    }

    /// [`Self::read_page`]; `locked`: the caller holds the page's lock, so an image that does
    /// not verify is torn by a dead writer, not being written. An internal page that stays
    /// torn (at once under our lock, else for a lease) is re-derived from the level below
    /// ([`Self::rederive_internal`]).
    async fn read_page_as(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
        locked: bool,
    ) -> Result<PageHeader, ShermanError> {
        let qp = self.qp(addr)?;
        let mut p = self.patience();
        let mut repaired = false;
        let mut seen = None;
        loop {
            qp.read(addr, buf).await?;
            // An internal page's checksum covers the page, a leaf's its header (its slots
            // are checked by the scan: `find_in_leaf`).
            let checked = if raw_internal(buf) { buf.len() } else { 64 };
            self.ep.charge(Work::Decode(checked));
            let why = match self.decode(buf) {
                Ok(h) => return Ok(h),
                Err(e) => e,
            };
            if seen.is_none() && !locked && raw_level(buf) == Some(0) {
                seen = Some(self.lock_word(addr).await?);
            }
            if !repaired && (locked || p.past_lease(self.ep)) && raw_internal(buf) {
                repaired = true;
                let fixed = if locked {
                    self.rederive_internal(addr, buf).await?
                } else {
                    self.repair_internal(addr, buf).await?
                };
                if fixed {
                    self.repaired(|r| r.pages_rederived += 1);
                }
                continue;
            }
            if !repaired && !locked && p.past_lease(self.ep) && raw_level(buf) == Some(0) {
                // A leaf torn for a lease: its writer died; its lock's next holder redoes it.
                repaired = true;
                self.repair_leaf(addr, seen).await?;
                continue;
            }
            if !p.pause(self.ep).await {
                return Err(ShermanError::Corrupt { addr, why });
            }
        }
    }

    /// Takes the lock of internal page `addr` (from a dead holder, after its lease) and
    /// re-derives the page if it is still torn.
    async fn repair_internal(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
    ) -> Result<bool, ShermanError> {
        let (lock, _) = self.acquire_page(addr, None).await?;
        let r = self.rederive_internal(addr, buf).await;
        self.locks
            .release(self.qp(addr)?, lock, &mut Batch::new())
            .await?;
        r
    }

    /// Rewrites internal page `addr` (its lock held) if its image is torn — a writer died in
    /// the middle of writing it in place (a separator insert, or the left half of a split).
    /// What the page must hold is re-derived from what never tears or is whole elsewhere:
    /// its level, low fence and leftmost child never change (each an atomic word); its high
    /// fence is its sibling's low fence (the sibling word is the old or the new one, and a
    /// split's new right page is whole before the left one is written); its entries are the
    /// pages of the level below, followed along their sibling pointers from the leftmost
    /// child up to the high fence — each page's low fence is its separator (this also links
    /// splits whose separator never arrived). False if the page verifies after all, or does
    /// not look like a torn internal page (garbage stays an error).
    async fn rederive_internal(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
    ) -> Result<bool, ShermanError> {
        self.qp(addr)?.read(addr, buf).await?;
        if self.decode(buf).is_ok() || !raw_internal(buf) {
            return Ok(false);
        }
        let (version, meta, sibling, low, high_word, leftmost) = (
            raw_word(buf, 0),
            raw_word(buf, 1),
            raw_word(buf, 2),
            raw_word(buf, 3),
            raw_word(buf, 4),
            raw_word(buf, 5),
        );
        let level = PageHeader {
            meta,
            ..Default::default()
        }
        .level();
        if level == 0 || leftmost == 0 || low >= high_word {
            return Ok(false);
        }
        let mut hdr = [0u8; 64];
        let high = if sibling == 0 {
            KEY_INFINITY
        } else {
            let s = GlobalAddr::from_raw(sibling);
            self.qp(s)?.read(s, &mut hdr).await?;
            let s_low = raw_word(&hdr, 3);
            if raw_level(&hdr) != Some(level) || s_low <= low {
                return Ok(false);
            }
            s_low
        };
        let cap = self.g.internal_capacity();
        let mut entries: Vec<(u64, u64)> = Vec::with_capacity(cap);
        let mut child = GlobalAddr::from_raw(leftmost);
        let mut prev = None;
        loop {
            self.qp(child)?.read(child, &mut hdr).await?;
            let (c_low, c_sib) = (raw_word(&hdr, 3), raw_word(&hdr, 2));
            if raw_level(&hdr) != Some(level - 1) {
                return Ok(false);
            }
            match prev {
                None if c_low != low => return Ok(false),
                Some(p) if c_low <= p => return Ok(false),
                Some(_) if c_low >= high => break,
                Some(_) => entries.push((c_low, child.raw())),
                None => {}
            }
            prev = Some(c_low);
            // Beyond the capacity the rest is reached by moving right (and linked later by
            // an ordinary split of this page).
            if c_sib == 0 || entries.len() == cap {
                break;
            }
            child = GlobalAddr::from_raw(c_sib);
        }
        let h = PageHeader {
            front_version: version.wrapping_add(2).max(1),
            meta: PageHeader::pack_meta(level, false, entries.len()),
            sibling,
            low_fence: low,
            high_fence: high,
            leftmost,
            ..Default::default()
        };
        let mut img = vec![0u8; self.g.page_size];
        h.encode(&mut img);
        for (i, (k, c)) in entries.iter().enumerate() {
            set_internal_entry(&mut img, &self.g, i, *k, *c);
        }
        seal(&mut img, &self.g);
        self.qp(addr)?.write(addr, &img).await?;
        buf[..img.len()].copy_from_slice(&img);
        Ok(true)
    }

    /// READ a leaf until the header and every slot verify (every slot: which one holds `key`
    /// is only known once all are). Returns the header and `key`'s live (slot, value length).
    /// `locked`: the caller holds the leaf's lock (else a leaf torn for a lease is repaired).
    async fn read_leaf(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
        key: u64,
        locked: bool,
    ) -> Result<(PageHeader, Option<(usize, usize)>), ShermanError> {
        let mut p = self.patience();
        let mut repaired = false;
        let mut seen = None;
        loop {
            let h = self.read_page_as(addr, buf, locked).await?;
            if !h.is_leaf() {
                return Err(ShermanError::Corrupt {
                    addr,
                    why: remora_layouts::LayoutError::Inconsistent {
                        what: "expected a leaf",
                    },
                });
            }
            let why = match self.find_in_leaf(buf, self.bind(&h), key) {
                Ok(found) => return Ok((h, found)),
                Err(e) => e,
            };
            if seen.is_none() && !locked {
                seen = Some(self.lock_word(addr).await?);
            }
            if !repaired && !locked && p.past_lease(self.ep) {
                repaired = true;
                self.repair_leaf(addr, seen).await?;
                continue;
            }
            if !p.pause(self.ep).await {
                return Err(ShermanError::Corrupt { addr, why });
            }
        }
    }

    /// The live (slot, value length) holding `key`, every slot verified against `bind`. (The
    /// mutant checks only slots whose key word matches, as the authors' code does.)
    fn find_in_leaf(
        &self,
        page: &[u8],
        bind: u64,
        key: u64,
    ) -> Result<Option<(usize, usize)>, remora_layouts::LayoutError> {
        let mut found = None;
        self.ep.charge(Work::Scan(self.g.leaf_capacity()));
        if self.cfg.page_check == PageCheck::Checksums {
            verify_leaf(page, &self.g, bind, |s, slot| {
                if let Slot::Live { key: k, len, .. } = slot
                    && k == key
                    && found.is_none()
                {
                    found = Some((s, len));
                }
            })?;
            return Ok(found);
        }
        for s in 0..self.g.leaf_capacity() {
            let e = leaf_entry_bytes(page, &self.g, s).unwrap_or(&[]);
            if e.get(8..16) == Some(&key.to_le_bytes()[..])
                && let Slot::Live { len, .. } = leaf_slot(page, &self.g, s, bind)?
            {
                return Ok(Some((s, len)));
            }
        }
        Ok(None)
    }

    async fn refresh_root(&self) -> Result<(), ShermanError> {
        let mut b = [0u8; 8];
        self.qp(self.desc)?
            .read(self.desc.add(D_ROOT), &mut b)
            .await?;
        self.root.set(GlobalAddr::from_raw(u64::from_le_bytes(b)));
        Ok(())
    }

    /// Walks from the root to the page covering `key` at `level`, or (`None`) to the leaf
    /// covering it, whose address is returned without reading the leaf itself (unless the
    /// root is that leaf). Level-1 pages passed on the way refresh the index cache.
    ///
    /// Repairs on the way (a split is finished by whoever notices it unfinished): a root with
    /// a right sibling is a root whose split's client has not grown the tree (yet, or ever —
    /// it died): the walk grows it. A page reached through its parent that does not cover the
    /// key is a split whose separator the parent lacks: it is noted in `missing` for the next
    /// write of this handle to insert.
    async fn walk(
        &self,
        key: u64,
        level: Option<u8>,
        buf: &mut [u8],
    ) -> Result<GlobalAddr, ShermanError> {
        let mut addr = self.root.get();
        let mut p = self.patience();
        // `addr` is the root as we know it / was reached through a parent's child pointer.
        let (mut top, mut from_parent) = (true, false);
        let mut grown = false;
        loop {
            let h = self.read_page(addr, buf).await?;
            let at = addr;
            let unsettled = |what, p: &Patience| ShermanError::Unsettled {
                what,
                at,
                waited_ns: p.waited(self.ep),
            };
            if top && h.sibling != 0 && h.low_fence == 0 && !grown {
                self.refresh_root().await?;
                if self.root.get() == addr {
                    // Still the published root: grow it over the split nobody finished.
                    grown = true;
                    let right = GlobalAddr::from_raw(h.sibling);
                    match self.grow_root(addr, h.level(), h.high_fence, right).await? {
                        None => self.repaired(|r| r.roots_grown += 1),
                        Some(link) => self.missing.set(Some(link)),
                    }
                    self.refresh_root().await?;
                }
                addr = self.root.get();
                if !p.step(self.ep) {
                    return Err(unsettled("root growth did not settle", &p));
                }
                continue;
            }
            if level.is_some_and(|l| h.level() < l) || key < h.low_fence {
                // The root we know is below the level we need, or we went wrong: reload it.
                self.refresh_root().await?;
                addr = self.root.get();
                (top, from_parent, grown) = (true, false, false);
                if !p.pause(self.ep).await {
                    return Err(unsettled("descent did not settle", &p));
                }
                continue;
            }
            top = false;
            if key >= h.high_fence {
                let next = GlobalAddr::from_raw(h.sibling);
                if next.is_null() {
                    return Err(unsettled("rightmost page does not cover the key", &p));
                }
                if from_parent {
                    self.missing.set(Some((h.level() + 1, h.high_fence, next)));
                }
                from_parent = false;
                addr = next;
                if !p.step(self.ep) {
                    return Err(unsettled("sibling chain did not reach the key", &p));
                }
                continue;
            }
            if level == Some(h.level()) || (level.is_none() && h.is_leaf()) {
                return Ok(addr);
            }
            if h.level() == 1 {
                self.ep.charge(Work::Probe(1));
                self.node.cache_insert(&h, buf);
            }
            self.ep
                .charge(Work::Compare(search_steps(self.g.internal_capacity())));
            addr = child_for(buf, &self.g, &h, key).ok_or(ShermanError::Corrupt {
                addr,
                why: remora_layouts::LayoutError::Inconsistent {
                    what: "internal page without child",
                },
            })?;
            from_parent = true;
        }
    }

    /// The leaf for `key`: from the index cache (true), else by walking down (false).
    async fn locate(&self, key: u64, buf: &mut [u8]) -> Result<(GlobalAddr, bool), ShermanError> {
        self.ep.charge(Work::Probe(1));
        if let Some(a) = self.node.leaf_for(key, &self.g) {
            return Ok((a, true));
        }
        Ok((self.walk(key, None, buf).await?, false))
    }

    /// Inserts the separators traversals found missing (splits whose client died before
    /// linking them, or has not yet). Bounded: each insert may note one more above it.
    async fn link_missing(&self) -> Result<(), ShermanError> {
        for _ in 0..8 {
            let Some((level, sep, child)) = self.missing.take() else {
                return Ok(());
            };
            if self.insert_separator(level, sep, child).await? {
                self.repaired(|r| r.separators_linked += 1);
            }
        }
        Ok(())
    }

    async fn lookup(&self, key: u64, out: &mut [u8]) -> Result<Option<usize>, ShermanError> {
        // Pages up to FRAME_PAGE are read into the coroutine's own frame: where a fabric
        // with registered memory (verbs) has the NIC write them in place, while the pool's
        // heap pages would be bounced through staging.
        if self.g.page_size <= FRAME_PAGE {
            let mut frame = [0u8; FRAME_PAGE];
            return self
                .lookup_in(key, out, &mut frame[..self.g.page_size])
                .await;
        }
        let mut buf = self.page();
        let r = self.lookup_in(key, out, &mut buf).await;
        self.give(buf);
        r
    }

    async fn lookup_in(
        &self,
        key: u64,
        out: &mut [u8],
        buf: &mut [u8],
    ) -> Result<Option<usize>, ShermanError> {
        let mut addr = self.locate(key, buf).await?.0;
        let mut p = self.patience();
        loop {
            let (h, found) = self.read_leaf(addr, buf, key, false).await?;
            let moved = key < h.low_fence || key >= h.high_fence;
            if moved && !p.step(self.ep) {
                return Err(ShermanError::Unsettled {
                    what: "lookup did not reach the key's leaf",
                    at: addr,
                    waited_ns: p.waited(self.ep),
                });
            }
            if key < h.low_fence {
                self.node.cache_invalidate(key);
                p.pause(self.ep).await;
                addr = self.locate(key, buf).await?.0;
                continue;
            }
            if key >= h.high_fence {
                self.node.cache_invalidate(key);
                addr = GlobalAddr::from_raw(h.sibling);
                continue;
            }
            let Some((s, len)) = found else {
                return Ok(None);
            };
            let got = out.len();
            let dst = out
                .get_mut(..len)
                .ok_or(ShermanError::BufferTooSmall { need: len, got })?;
            dst.copy_from_slice(leaf_value(buf, &self.g, s, len));
            return Ok(Some(len));
        }
    }

    /// Ops writing sealed page image `img` whole: one WRITE (readers verify its content, so
    /// the order its segments land in does not matter). The mutant writes rear version,
    /// body, front version as three ordered WRITEs, as its check needs.
    fn page_write_ops<'b>(&self, addr: GlobalAddr, img: &'b [u8], ops: &mut Batch<'b>) {
        if self.cfg.page_check == PageCheck::Checksums {
            ops.push(Op::Write {
                remote: addr,
                local: img,
            })
            .expect("a doorbell batch holds at most 8 work requests");
            return;
        }
        let rear = self.g.rear_offset();
        ops.push(Op::Write {
            remote: addr.add(rear as u64),
            local: &img[rear..],
        })
        .expect("a doorbell batch holds at most 8 work requests");
        ops.push(Op::Write {
            remote: addr.add(8),
            local: &img[8..rear],
        })
        .expect("a doorbell batch holds at most 8 work requests");
        ops.push(Op::Write {
            remote: addr,
            local: &img[..8],
        })
        .expect("a doorbell batch holds at most 8 work requests");
    }

    async fn modify(&self, key: u64, value: &[u8], change: Change) -> Result<bool, ShermanError> {
        if value.len() > self.g.value_size {
            return Err(ShermanError::ValueTooLong {
                len: value.len(),
                max: self.g.value_size,
            });
        }
        // As in `lookup`: small pages in the coroutine's frame.
        if self.g.page_size <= FRAME_PAGE {
            let mut frame = [0u8; FRAME_PAGE];
            return self
                .modify_in(key, value, change, &mut frame[..self.g.page_size])
                .await;
        }
        let mut buf = self.page();
        let r = self.modify_in(key, value, change, &mut buf).await;
        self.give(buf);
        r
    }

    async fn modify_in(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
        buf: &mut [u8],
    ) -> Result<bool, ShermanError> {
        let (mut addr, mut cached) = self.locate(key, buf).await?;
        let mut p = self.patience();
        loop {
            let (lock, got) = self.acquire_page(addr, None).await?;
            if got == Got::HandedOver {
                self.handovers.set(self.handovers.get() + 1);
            }
            let step = self
                .modify_locked(addr, lock, key, value, change, buf)
                .await?;
            if !matches!(step, Step::Done(_)) && !p.step(self.ep) {
                return Err(ShermanError::Unsettled {
                    what: "write did not reach the key's leaf",
                    at: addr,
                    waited_ns: p.waited(self.ep),
                });
            }
            match step {
                Step::Done(r) => {
                    self.link_missing().await?;
                    return Ok(r);
                }
                Step::MoveTo(next, sep) => {
                    if !cached {
                        // Reached from a parent that routed the key here: it lacks the
                        // separator of this leaf's right sibling.
                        self.missing.set(Some((1, sep, next)));
                    }
                    self.node.cache_invalidate(key);
                    // (Every page passed from a parent's pointer lacks its separator there.)
                    addr = next;
                }
                Step::Restart => {
                    self.node.cache_invalidate(key);
                    p.pause(self.ep).await;
                    (addr, cached) = self.locate(key, buf).await?;
                }
            }
        }
    }

    /// Under the leaf's lock: apply the change, write back, release.
    async fn modify_locked(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        key: u64,
        value: &[u8],
        change: Change,
        buf: &mut [u8],
    ) -> Result<Step, ShermanError> {
        let qp = self.qp(addr)?;
        let read = self.read_leaf(addr, buf, key, true).await;
        let (h, found) = match read {
            Ok(r) => r,
            Err(e) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Err(e);
            }
        };
        if !h.covers(key) {
            self.locks.release(qp, lock, &mut Batch::new()).await?;
            return Ok(if key >= h.high_fence {
                Step::MoveTo(GlobalAddr::from_raw(h.sibling), h.high_fence)
            } else {
                Step::Restart
            });
        }
        let bind = self.bind(&h);
        let (slot, valid) = match (found, change) {
            (Some((s, _)), Change::Upsert | Change::Update) => (s, true),
            (Some((s, _)), Change::Delete) => (s, false),
            (None, Change::Update | Change::Delete) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Ok(Step::Done(false));
            }
            (None, Change::Upsert) => {
                let free = (0..self.g.leaf_capacity())
                    .find(|&s| matches!(leaf_slot(buf, &self.g, s, bind), Ok(Slot::Free { .. })));
                match free {
                    Some(s) => (s, true),
                    None => {
                        self.split_leaf(addr, lock, &h, key, value, buf).await?;
                        return Ok(Step::Done(true));
                    }
                }
            }
        };
        let version = match leaf_slot(buf, &self.g, slot, bind) {
            Ok(Slot::Live { version, .. } | Slot::Free { version }) => version.wrapping_add(1),
            Err(_) => 0,
        };
        let at = self.g.leaf_entry_offset(slot);
        let entry = at..at + self.g.leaf_entry_size();
        // A delete keeps the entry's key and value bytes and changes only its meta word
        // (valid bit, version, checksum): with two-level versions it is one aligned 8-byte
        // WRITE, which no crash can tear.
        let mut kept = [0u8; remora_layouts::sherman::MAX_VALUE];
        let val: &[u8] = match found {
            _ if valid => value,
            Some((_, len)) => {
                kept[..len].copy_from_slice(leaf_value(buf, &self.g, slot, len));
                &kept[..len]
            }
            None => &[],
        };
        if self.cfg.two_level_versions {
            encode_leaf_entry(&mut buf[entry.clone()], key, val, version, valid, bind);
            let written = if valid { entry } else { at..at + 8 };
            // A delete's one aligned word cannot tear: no redo record.
            let logged = if valid {
                match self.log(addr, at, &buf[written.clone()], 0).await {
                    Ok(l) => Some(l),
                    Err(e) => {
                        self.locks.release(qp, lock, &mut Batch::new()).await?;
                        return Err(e);
                    }
                }
            } else {
                None
            };
            let mut ops = Batch::new();
            if let Some(l) = &logged {
                self.log_ops(l, &mut ops);
            }
            ops.push(Op::Write {
                remote: addr.add(at as u64),
                local: &buf[written],
            })
            .expect("a doorbell batch holds at most 8 work requests");
            let r = self.locks.release(qp, lock, &mut ops).await;
            drop(ops);
            if let Some(l) = logged {
                self.unlog(l);
            }
            r?;
        } else {
            // Whole page under a new version: every slot (verified under the lock) is
            // rebound to it.
            let mut nh = h;
            nh.front_version = h.front_version.wrapping_add(1).max(1);
            let nbind = self.bind(&nh);
            for s in 0..self.g.leaf_capacity() {
                let at = self.g.leaf_entry_offset(s);
                rebind_entry(&mut buf[at..at + self.g.leaf_entry_size()], nbind);
            }
            encode_leaf_entry(&mut buf[entry.clone()], key, val, version, valid, nbind);
            nh.encode(buf);
            seal(buf, &self.g);
            // The record is the entry and the new version (the rest is rebuilt from the page).
            let logged = match self.log(addr, at, &buf[entry], nh.front_version).await {
                Ok(l) => l,
                Err(e) => {
                    self.locks.release(qp, lock, &mut Batch::new()).await?;
                    return Err(e);
                }
            };
            let mut ops = Batch::new();
            self.log_ops(&logged, &mut ops);
            self.page_write_ops(addr, buf, &mut ops);
            let r = self.locks.release(qp, lock, &mut ops).await;
            drop(ops);
            self.unlog(logged);
            r?;
        }
        Ok(Step::Done(found.is_some() || change == Change::Upsert))
    }

    /// Splits a full leaf (locked) while inserting `key`, then links the new page upward.
    async fn split_leaf(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        h: &PageHeader,
        key: u64,
        value: &[u8],
        buf: &mut [u8],
    ) -> Result<(), ShermanError> {
        let qp = self.qp(addr)?;
        let bind = self.bind(h);
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::with_capacity(self.g.leaf_capacity() + 1);
        for s in 0..self.g.leaf_capacity() {
            if let Ok(Slot::Live { key: k, len, .. }) = leaf_slot(buf, &self.g, s, bind) {
                entries.push((k, leaf_value(buf, &self.g, s, len).to_vec()));
            }
        }
        entries.push((key, value.to_vec()));
        entries.sort_unstable_by_key(|e| e.0);
        let mid = entries.len() / 2;
        let sep = entries[mid].0;
        let right_addr = match self.alloc_page().await {
            Ok(a) => a,
            Err(e) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Err(e);
            }
        };
        let leaf_image =
            |version: u64, low: u64, high: u64, sibling: u64, part: &[(u64, Vec<u8>)]| {
                let mut img = vec![0u8; self.g.page_size];
                let check = self.cfg.page_check;
                encode_leaf(&mut img, &self.g, check, version, low, high, sibling, part);
                img
            };
        let right = leaf_image(1, sep, h.high_fence, h.sibling, &entries[mid..]);
        let left = leaf_image(
            h.front_version.wrapping_add(1).max(1),
            h.low_fence,
            sep,
            right_addr.raw(),
            &entries[..mid],
        );
        let logged = match self.log(addr, 0, &left, 0).await {
            Ok(l) => l,
            Err(e) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Err(e);
            }
        };
        let r = self
            .write_split(addr, lock, right_addr, &right, &left, Some(&logged))
            .await;
        self.unlog(logged);
        r?;
        self.splits.set(self.splits.get() + 1);
        let pending = if h.low_fence == 0 && h.high_fence == KEY_INFINITY {
            self.grow_root(addr, 0, sep, right_addr).await?
        } else {
            Some((1, sep, right_addr))
        };
        match pending {
            Some((level, sep, child)) => self.insert_separator(level, sep, child).await.map(drop),
            None => Ok(()),
        }
    }

    /// Writes the new right page, then the left page whole (after its redo record, if
    /// `logged`: a leaf), then unlocks the left page. One doorbell when both pages live on
    /// one node and commands are combined (per-queue-pair order), else two.
    async fn write_split(
        &self,
        left_addr: GlobalAddr,
        lock: GlobalAddr,
        right_addr: GlobalAddr,
        right: &[u8],
        left: &[u8],
        logged: Option<&Logged>,
    ) -> Result<(), ShermanError> {
        let qp = self.qp(left_addr)?;
        let mut ops = Batch::new();
        // Command combination also posts the new sibling with the left page (per-queue-pair
        // order lands it first); without it (FG+), the sibling is written and acknowledged
        // first, one more round trip.
        if self.cfg.combine_commands && right_addr.node() == left_addr.node() {
            ops.push(Op::Write {
                remote: right_addr,
                local: right,
            })
            .expect("a doorbell batch holds at most 8 work requests");
        } else if let Err(e) = self.qp(right_addr)?.write(right_addr, right).await {
            self.locks.release(qp, lock, &mut Batch::new()).await?;
            return Err(e.into());
        }
        if let Some(l) = logged {
            self.log_ops(l, &mut ops);
        }
        self.page_write_ops(left_addr, left, &mut ops);
        self.locks.release(qp, lock, &mut ops).await
    }

    /// The root at `level` split into itself and `right` at `sep`: a new root above them.
    /// Returns the separator still to link (level, key, child) if the root moved meanwhile.
    async fn grow_root(
        &self,
        old_root: GlobalAddr,
        level: u8,
        sep: u64,
        right: GlobalAddr,
    ) -> Result<Option<(u8, u64, GlobalAddr)>, ShermanError> {
        let qp = self.qp(self.desc)?;
        let a0 = &self.allocs[0];
        let new_root = a0.alloc(qp, self.g.page_size as u64).await?;
        let mut img = vec![0u8; self.g.page_size];
        let h = PageHeader {
            front_version: 1,
            meta: PageHeader::pack_meta(level + 1, false, 1),
            low_fence: 0,
            high_fence: KEY_INFINITY,
            leftmost: old_root.raw(),
            ..Default::default()
        };
        h.encode(&mut img);
        set_internal_entry(&mut img, &self.g, 0, sep, right.raw());
        seal(&mut img, &self.g);
        let mut old = 0u64;
        qp.post(&mut [
            Op::Write {
                remote: new_root,
                local: &img,
            },
            Op::Cas {
                remote: self.desc.add(D_ROOT),
                compare: old_root.raw(),
                swap: new_root.raw(),
                old: &mut old,
            },
        ])
        .await?;
        if old == old_root.raw() {
            self.root.set(new_root);
            Ok(None)
        } else {
            // Only the holder of the root's lock grows the root, so this cannot happen unless the
            // descriptor was changed behind the tree's back; link the split the ordinary way.
            a0.free(new_root, self.g.page_size as u64);
            Ok(Some((level + 1, sep, right)))
        }
    }

    /// Inserts separator `sep` → `child` into the internal level `level`, splitting upward
    /// as needed (iteratively). Idempotent: false if `sep` was linked already (by the
    /// splitter, or by another client repairing the same split).
    async fn insert_separator(
        &self,
        mut level: u8,
        mut sep: u64,
        mut child: GlobalAddr,
    ) -> Result<bool, ShermanError> {
        let mut buf = self.page();
        let r = async {
            let mut p = self.patience();
            'levels: loop {
                let mut addr = self.walk(sep, Some(level), &mut buf).await?;
                loop {
                    if !p.step(self.ep) {
                        return Err(ShermanError::Unsettled {
                            what: "separator insert did not find its page",
                            at: addr,
                            waited_ns: p.waited(self.ep),
                        });
                    }
                    let qp = self.qp(addr)?;
                    let (lock, _) = self.acquire_page(addr, None).await?;
                    let h = match self.read_page_as(addr, &mut buf, true).await {
                        Ok(h) => h,
                        Err(e) => {
                            self.locks.release(qp, lock, &mut Batch::new()).await?;
                            return Err(e);
                        }
                    };
                    if !h.covers(sep) || h.level() != level {
                        self.locks.release(qp, lock, &mut Batch::new()).await?;
                        if sep >= h.high_fence && h.level() == level && h.sibling != 0 {
                            addr = GlobalAddr::from_raw(h.sibling);
                            continue;
                        }
                        p.pause(self.ep).await;
                        continue 'levels;
                    }
                    let mut entries: Vec<(u64, u64)> = (0..h.count())
                        .map(|i| internal_entry(&buf, &self.g, i).unwrap_or((KEY_INFINITY, 0)))
                        .collect();
                    let pos = entries.partition_point(|e| e.0 < sep);
                    if entries.get(pos).is_some_and(|e| e.0 == sep) {
                        // Already linked (a retried insert, or a repair): nothing to do.
                        self.locks.release(qp, lock, &mut Batch::new()).await?;
                        return Ok(false);
                    }
                    entries.insert(pos, (sep, child.raw()));
                    let image = |version: u64,
                                 low: u64,
                                 high: u64,
                                 sibling: u64,
                                 leftmost: u64,
                                 part: &[(u64, u64)]| {
                        let mut img = vec![0u8; self.g.page_size];
                        let hh = PageHeader {
                            front_version: version,
                            meta: PageHeader::pack_meta(level, false, part.len()),
                            sibling,
                            low_fence: low,
                            high_fence: high,
                            leftmost,
                            ..Default::default()
                        };
                        hh.encode(&mut img);
                        for (i, (k, c)) in part.iter().enumerate() {
                            set_internal_entry(&mut img, &self.g, i, *k, *c);
                        }
                        seal(&mut img, &self.g);
                        img
                    };
                    let v = h.front_version.wrapping_add(1).max(1);
                    if entries.len() <= self.g.internal_capacity() {
                        let img = image(
                            v,
                            h.low_fence,
                            h.high_fence,
                            h.sibling,
                            h.leftmost,
                            &entries,
                        );
                        let mut ops = Batch::new();
                        self.page_write_ops(addr, &img, &mut ops);
                        self.locks.release(qp, lock, &mut ops).await?;
                        if level == 1 {
                            self.node.cache_insert(
                                &PageHeader::decode(&img, &self.g)
                                    .map_err(|why| ShermanError::Corrupt { addr, why })?,
                                &img,
                            );
                        }
                        return Ok(true);
                    }
                    let mid = entries.len() / 2;
                    let up = entries[mid].0;
                    let right_addr = match self.alloc_page().await {
                        Ok(a) => a,
                        Err(e) => {
                            self.locks.release(qp, lock, &mut Batch::new()).await?;
                            return Err(e);
                        }
                    };
                    let right = image(
                        1,
                        up,
                        h.high_fence,
                        h.sibling,
                        entries[mid].1,
                        &entries[mid + 1..],
                    );
                    let left = image(
                        v,
                        h.low_fence,
                        up,
                        right_addr.raw(),
                        h.leftmost,
                        &entries[..mid],
                    );
                    self.write_split(addr, lock, right_addr, &right, &left, None)
                        .await?;
                    self.splits.set(self.splits.get() + 1);
                    if level == 1 {
                        self.node.cache_invalidate(sep);
                    }
                    let pending = if h.low_fence == 0 && h.high_fence == KEY_INFINITY {
                        self.grow_root(addr, level, up, right_addr).await?
                    } else {
                        Some((level + 1, up, right_addr))
                    };
                    match pending {
                        Some((l, s, c)) => (level, sep, child) = (l, s, c),
                        None => return Ok(true),
                    }
                    continue 'levels;
                }
            }
        }
        .await;
        self.give(buf);
        r
    }

    async fn scan_from(
        &self,
        from: u64,
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ShermanError> {
        let mut buf = self.page();
        let r = async {
            let mut key = from;
            let mut seen = 0usize;
            let mut addr = self.locate(key, &mut buf).await?.0;
            let mut batch: Vec<(u64, usize, usize)> = Vec::with_capacity(self.g.leaf_capacity());
            // Bounds the moves that make no progress (re-locating, moving right of `key`).
            let mut moves = self.patience();
            'pages: loop {
                if seen >= limit {
                    break;
                }
                let h;
                let mut p = self.patience();
                let mut repaired = false;
                let mut torn_word = None;
                loop {
                    let hh = self.read_page(addr, &mut buf).await?;
                    if !hh.is_leaf() {
                        return Err(ShermanError::Corrupt {
                            addr,
                            why: remora_layouts::LayoutError::Inconsistent {
                                what: "expected a leaf",
                            },
                        });
                    }
                    batch.clear();
                    self.ep.charge(Work::Scan(self.g.leaf_capacity()));
                    let whole = verify_leaf(&buf, &self.g, self.bind(&hh), |s, slot| {
                        if let Slot::Live { key: k, len, .. } = slot
                            && k >= key
                            && k < hh.high_fence
                        {
                            batch.push((k, s, len))
                        }
                    });
                    match whole {
                        Ok(()) => {
                            h = hh;
                            break;
                        }
                        Err(why) => {
                            if torn_word.is_none() {
                                torn_word = Some(self.lock_word(addr).await?);
                            }
                            if !repaired && p.past_lease(self.ep) {
                                // Torn for a lease: its writer died; redo it (see read_leaf).
                                repaired = true;
                                self.repair_leaf(addr, torn_word).await?;
                            } else if !p.pause(self.ep).await {
                                return Err(ShermanError::Corrupt { addr, why });
                            }
                        }
                    }
                }
                let moved = key < h.low_fence || key >= h.high_fence;
                if moved && !moves.step(self.ep) {
                    return Err(ShermanError::Unsettled {
                        what: "scan did not reach its next leaf",
                        at: addr,
                        waited_ns: moves.waited(self.ep),
                    });
                }
                if key < h.low_fence {
                    self.node.cache_invalidate(key);
                    moves.pause(self.ep).await;
                    addr = self.locate(key, &mut buf).await?.0;
                    continue 'pages;
                }
                if key >= h.high_fence {
                    addr = GlobalAddr::from_raw(h.sibling);
                    continue 'pages;
                }
                self.ep.charge(Work::Sort(batch.len()));
                batch.sort_unstable_by_key(|e| e.0);
                // A key deleted and re-inserted into another slot while the READ ran can show
                // up in both slots: report it once.
                batch.dedup_by_key(|e| e.0);
                for &(k, s, len) in &batch {
                    if seen >= limit {
                        break;
                    }
                    visit(&k.to_be_bytes(), leaf_value(&buf, &self.g, s, len));
                    seen += 1;
                }
                if h.high_fence == KEY_INFINITY || h.sibling == 0 {
                    break;
                }
                key = h.high_fence;
                addr = GlobalAddr::from_raw(h.sibling);
            }
            Ok(seen)
        }
        .await;
        self.give(buf);
        r
    }
}

impl<E: Endpoint> KvIndex for Sherman<'_, E> {
    type Error = ShermanError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), ShermanError> {
        self.modify(key_of(key)?, value, Change::Upsert)
            .await
            .map(drop)
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, ShermanError> {
        self.modify(key_of(key)?, value, Change::Update).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, ShermanError> {
        self.lookup(key_of(key)?, out).await
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, ShermanError> {
        self.modify(key_of(key)?, &[], Change::Delete).await
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ShermanError> {
        self.scan_from(key_of(from)?, limit, visit).await
    }
}

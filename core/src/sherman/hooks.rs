//! What CHIME (`crate::chime`) borrows from Sherman: a tree whose level-1 pages point to
//! leaves of another format, the descent to a leaf's address (index cache or walk), the leaf
//! locks (local table, on-chip words, leases, takeovers, redo pointers), separator inserts
//! above a split leaf, and the missing-link repair. Nothing here reads or writes a leaf: the
//! caller owns the leaf format (and its redo records).
use super::cache::Route;
use super::cache::route_for;
use super::tree::Sherman;
use super::{ShermanConfig, ShermanError, ShermanNode};
use crate::fabric::Endpoint;
use crate::lease::Stretch;
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{
    Geometry, KEY_INFINITY, PageHeader, internal_entry, seal, set_internal_entry,
};
use std_alloc::sync::Arc;

pub(crate) use super::lock::Batch;
use super::lock::Got;
use super::wait::Patience;

/// Encodes into `page` an empty level-1 root over the one leaf at `leaf`.
pub(super) fn encode_root_over(page: &mut [u8], g: &Geometry, leaf: GlobalAddr) {
    let h = PageHeader {
        front_version: 1,
        meta: PageHeader::pack_meta(1, false, 0),
        low_fence: 0,
        high_fence: KEY_INFINITY,
        leftmost: leaf.raw(),
        ..Default::default()
    };
    h.encode(page);
    seal(page, g);
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// Creates (or opens, if one is published in `cfg.root_slot`) a tree whose first leaf is
    /// the image `leaf`, under a level-1 root.
    pub(crate) async fn create_over_leaf(
        ep: &'e E,
        cfg: ShermanConfig,
        node: Arc<ShermanNode>,
        leaf: &[u8],
    ) -> Result<Self, ShermanError> {
        Self::create_with(ep, cfg, node, Some(leaf)).await
    }

    /// The endpoint of this handle.
    pub(crate) fn endpoint(&self) -> &'e E {
        self.ep
    }

    /// The bounds of every wait, as Sherman's own.
    pub(crate) fn wait(&self) -> Patience {
        self.patience()
    }

    /// The leaf covering `key` as the level-1 pages say, with the range and next leaf they
    /// give it ([`Route`]): from the index cache (true), else by walking down to the level-1
    /// page (read into `buf`, one page) and caching it.
    /// The index cache is consulted only with `cached` (CHIME drops its cached pages once
    /// reuse of merged leaves requires it).
    pub(crate) async fn leaf_route(
        &self,
        key: u64,
        buf: &mut [u8],
        cached: bool,
    ) -> Result<(Route, bool), ShermanError> {
        self.ep.charge(crate::fabric::Work::Probe(1));
        if cached && let Some(r) = self.node.route_for(key, &self.g) {
            return Ok((r, true));
        }
        let at = self.walk(key, Some(1), buf).await?;
        let h = PageHeader::decode(buf, &self.g)
            .map_err(|why| ShermanError::Corrupt { addr: at, why })?;
        self.ep.charge(crate::fabric::Work::Probe(1));
        self.node.cache_insert(&h, buf);
        let r = route_for(buf, &self.g, &h, key).ok_or(ShermanError::Corrupt {
            addr: at,
            why: remora_layouts::LayoutError::Inconsistent {
                what: "internal page without child",
            },
        })?;
        Ok((r, false))
    }

    /// Takes the lock of leaf `addr` (hand-overs and takeovers counted as Sherman's); true
    /// if it was taken over from a dead holder, whose torn leaf the caller then repairs (the
    /// caller owns the leaf format, so Sherman's leaf redo is not run). `seen`: see
    /// [`Self::lock_word_of`].
    pub(crate) async fn lock_leaf(
        &self,
        addr: GlobalAddr,
        seen: Option<(u64, Stretch)>,
    ) -> Result<(GlobalAddr, bool), ShermanError> {
        let lock = self.lock_for(addr)?;
        let got = self.locks.acquire(self.ep, lock, seen).await?;
        self.count_acquired(got);
        if let Got::TookOver { .. } = got {
            self.repaired(|r| r.takeovers += 1);
        }
        Ok((lock, matches!(got, Got::TookOver { .. })))
    }

    /// The lock word of leaf `addr` now: a reader that finds the leaf torn notes it
    /// ([`super::wait::Patience::saw`]), so that its lease runs from then ([`Self::lock_leaf`]'s `seen`).
    pub(crate) async fn lock_word_of(&self, addr: GlobalAddr) -> Result<u64, ShermanError> {
        self.lock_word(addr).await
    }

    /// The redo pointer of the lock word that guards leaf `addr` (one word per lock word,
    /// written only by its holder; see `redo.rs`).
    pub(crate) fn redo_ptr_of(&self, addr: GlobalAddr) -> Result<GlobalAddr, ShermanError> {
        self.redo_ptr(addr)
    }

    /// Allocates `len` bytes on the memory node of `near` (a redo slot beside its leaves).
    pub(crate) async fn alloc_near(
        &self,
        near: GlobalAddr,
        len: u64,
    ) -> Result<GlobalAddr, ShermanError> {
        let a = &self.allocs[self.node_index(near)?];
        Ok(a.alloc(self.ep.qp(a.node())?, len).await?)
    }

    /// Counts a leaf torn by a dead writer and rewritten from its redo record.
    pub(crate) fn count_leaf_redone(&self) {
        self.repaired(|r| r.leaves_redone += 1)
    }

    /// Posts `ops` and releases `lock` of leaf `addr` (in one doorbell with command
    /// combination, as Sherman's write-backs).
    pub(crate) async fn unlock_leaf(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        ops: &mut Batch<'_>,
    ) -> Result<(), ShermanError> {
        let qp = self.qp(addr)?;
        self.locks.release(qp, lock, ops).await
    }

    /// The queue pair to `a`'s memory node.
    pub(crate) fn qp_of(&self, a: GlobalAddr) -> Result<&'e E::Qp, ShermanError> {
        self.qp(a)
    }

    /// Allocates `len` bytes for a new leaf (memory nodes in turn).
    pub(crate) async fn alloc_leaf(&self, len: u64) -> Result<GlobalAddr, ShermanError> {
        let i = self.next_alloc.get() % self.allocs.len();
        self.next_alloc.set(i + 1);
        let a = &self.allocs[i];
        Ok(a.alloc(self.ep.qp(a.node())?, len).await?)
    }

    /// Links a split leaf's new right sibling `child` (keys ≥ `sep`) into level 1.
    pub(crate) async fn link_leaf(&self, sep: u64, child: GlobalAddr) -> Result<(), ShermanError> {
        self.splits.set(self.splits.get() + 1);
        self.insert_separator(1, sep, child).await.map(drop)
    }

    /// A leaf reached from its parent does not cover the key: the parent lacks the separator
    /// `sep` of its sibling `child`; the next [`Self::finish_links`] inserts it.
    pub(crate) fn note_missing(&self, sep: u64, child: GlobalAddr) {
        self.missing.set(Some((1, sep, child)));
    }

    /// Inserts the separators this handle found missing.
    pub(crate) async fn finish_links(&self) -> Result<(), ShermanError> {
        self.link_missing().await
    }

    /// How many memory nodes the tree allocates on, and the id of the `i`-th.
    pub(crate) fn alloc_nodes(&self) -> (usize, impl Fn(usize) -> Option<remora_layouts::NodeId>) {
        let ids: std_alloc::vec::Vec<_> = self.allocs.iter().map(|a| a.node()).collect();
        (ids.len(), move |i| ids.get(i).copied())
    }

    /// The position of `a`'s memory node among [`Self::alloc_nodes`].
    pub(crate) fn alloc_index(&self, a: GlobalAddr) -> Option<usize> {
        self.allocs.iter().position(|x| x.node() == a.node())
    }

    /// Removes the level-1 entry `sep` -> `child` (a leaf merged into its left neighbour,
    /// whose range now holds `sep`'s keys): true if this call removed it. False when the
    /// page covering `sep` has no such entry (never linked, removed already, or `child` is
    /// the page's leftmost child, which stays). The page is rewritten under its lock, as a
    /// separator insert does; Sherman itself never removes entries. The caller holds the
    /// lock words `held` (false, nothing done, if the page's lock is one of them).
    pub(crate) async fn unlink_leaf(
        &self,
        sep: u64,
        child: GlobalAddr,
        held: &[GlobalAddr],
    ) -> Result<bool, ShermanError> {
        let mut buf = std_alloc::vec![0u8; self.g.page_size];
        let mut img = std_alloc::vec![0u8; self.g.page_size];
        let mut p = self.patience();
        let mut addr = self.walk(sep, Some(1), &mut buf).await?;
        loop {
            if !p.step(self.ep) {
                return Ok(false);
            }
            let qp = self.qp(addr)?;
            if held.contains(&self.lock_for(addr)?) {
                return Ok(false);
            }
            let (lock, _) = self.acquire_page(addr, None).await?;
            let h = match self.read_page_as(addr, &mut buf, true).await {
                Ok(h) => h,
                Err(e) => {
                    self.locks.release(qp, lock, &mut Batch::new()).await?;
                    return Err(e);
                }
            };
            if !h.covers(sep) || h.level() != 1 {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                if sep >= h.high_fence && h.level() == 1 && h.sibling != 0 {
                    addr = GlobalAddr::from_raw(h.sibling);
                    continue;
                }
                return Ok(false);
            }
            let count = h.count();
            let at = (0..count)
                .find(|&i| internal_entry(&buf, &self.g, i).is_ok_and(|e| e == (sep, child.raw())));
            let Some(at) = at else {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Ok(false);
            };
            let hh = PageHeader {
                front_version: h.front_version.wrapping_add(1).max(1),
                meta: PageHeader::pack_meta(1, false, count - 1),
                ..h
            };
            img.fill(0);
            hh.encode(&mut img);
            for (j, i) in (0..count).filter(|&i| i != at).enumerate() {
                let (k, c) = internal_entry(&buf, &self.g, i)
                    .map_err(|why| ShermanError::Corrupt { addr, why })?;
                set_internal_entry(&mut img, &self.g, j, k, c);
            }
            seal(&mut img, &self.g);
            let mut ops = Batch::new();
            self.page_write_ops(addr, &img, &mut ops);
            self.locks.release(qp, lock, &mut ops).await?;
            self.node.cache_invalidate(sep);
            return Ok(true);
        }
    }

    /// Drops every cached level-1 page of this compute node; false if the cache stayed busy.
    pub(crate) fn forget_leaves(&self) -> bool {
        self.node.cache_clear_level1()
    }

    /// Drops the cached level-1 page covering `key`.
    pub(crate) fn forget(&self, key: u64) {
        self.node.cache_invalidate(key)
    }
}

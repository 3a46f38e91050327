//! Reads: page and leaf READs that verify, the descent, lookups and scans.
use super::cache::child_for;
use super::open::D_ROOT;
use super::tree::{FRAME_PAGE, ScanBatch, Sherman, raw_internal, raw_level, search_steps};
use super::wait::Patience;
use super::{PageCheck, ShermanError};
use crate::fabric::{Endpoint, QueuePair, Work};
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{
    KEY_INFINITY, PageHeader, Slot, leaf_entry_bytes, leaf_slot, leaf_value, verify_leaf,
};

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// READ a page until its image is whole and well-formed (for a leaf: its header; the
    /// caller verifies the entries it uses against [`Self::bind`]).
    pub(super) async fn read_page(
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
    pub(super) async fn read_page_as(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
        locked: bool,
    ) -> Result<PageHeader, ShermanError> {
        let qp = self.qp(addr)?;
        // Made at the first retry ([`Self::patient`]).
        let mut p: Option<Patience> = None;
        let mut repaired = false;
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
            if !locked && raw_level(buf) == Some(0) && !self.patient(&mut p).saw_word() {
                let word = self.lock_word(addr).await?;
                self.patient(&mut p).saw(word, self.ep);
            }
            if !repaired
                && (locked || self.patient(&mut p).past_lease(self.ep))
                && raw_internal(buf)
            {
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
            if !repaired
                && !locked
                && self.patient(&mut p).past_lease(self.ep)
                && raw_level(buf) == Some(0)
            {
                // A leaf torn for a lease: its writer died; its lock's next holder redoes it.
                repaired = true;
                let seen = self.patient(&mut p).seen(self.ep);
                self.repair_leaf(addr, seen).await?;
                continue;
            }
            if !self.patient(&mut p).pause(self.ep).await {
                return Err(ShermanError::Corrupt { addr, why });
            }
        }
    }

    /// The retry bound `p`, made at its first use: most reads never retry, and a
    /// [`Patience`] made late is the same as one made early (it reads the clock only at its
    /// first failed attempt).
    fn patient<'p>(&self, p: &'p mut Option<Patience>) -> &'p mut Patience {
        p.get_or_insert_with(|| self.patience())
    }

    /// READ a leaf until the header and every slot verify (every slot: which one holds `key`
    /// is only known once all are), or, for a lookup (not `locked`), until the header and a
    /// slot holding `key` live verify ([`Self::find_live`]). Returns the header and `key`'s
    /// live (slot, value length). `locked`: the caller holds the leaf's lock (else a leaf torn
    /// for a lease is repaired).
    pub(super) async fn read_leaf(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
        key: u64,
        locked: bool,
    ) -> Result<(PageHeader, Option<(usize, usize)>), ShermanError> {
        // Made at the first retry ([`Self::patient`]).
        let mut p: Option<Patience> = None;
        let mut repaired = false;
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
            if !locked && let Some(found) = self.find_live(buf, self.bind(&h), key) {
                return Ok((h, Some(found)));
            }
            let why = match self.find_in_leaf(buf, self.bind(&h), key) {
                Ok(found) => return Ok((h, found)),
                Err(e) => e,
            };
            if !locked && !self.patient(&mut p).saw_word() {
                let word = self.lock_word(addr).await?;
                self.patient(&mut p).saw(word, self.ep);
            }
            if !repaired && !locked && self.patient(&mut p).past_lease(self.ep) {
                repaired = true;
                let seen = self.patient(&mut p).seen(self.ep);
                self.repair_leaf(addr, seen).await?;
                continue;
            }
            if !self.patient(&mut p).pause(self.ep).await {
                return Err(ShermanError::Corrupt { addr, why });
            }
        }
    }

    /// The live (slot, value length) holding `key`, every slot verified against `bind`. (The
    /// mutant checks only slots whose key word matches, as the authors' code does.)
    pub(super) fn find_in_leaf(
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

    /// A lookup's shortcut: the live (slot, value length) holding `key` in a slot whose key
    /// word is `key` and that verifies against `bind` (the header's version), looking at the
    /// key word of every slot but verifying only those; `None` when no such slot is found
    /// or one of them does not verify (then [`Self::find_in_leaf`] decides, every slot
    /// verified: a "not found" needs them all, since a slot left from another image may be
    /// where a split put `key`). A found slot needs no other: it is bound to the header's
    /// version, so it is the key's entry of that image (or an in-place rewrite of it under
    /// that version), read whole (an entry verifies as one unit) while that image was the
    /// page's — what the full check returns for it when every slot verifies, and a value the
    /// key held during the READ otherwise (a slot torn elsewhere is a write in flight of
    /// another entry). Only with per-entry checksums; a writer (under the lock) keeps the
    /// full check, which finds torn slots to repair.
    pub(super) fn find_live(&self, page: &[u8], bind: u64, key: u64) -> Option<(usize, usize)> {
        if self.cfg.page_check != PageCheck::Checksums {
            return None;
        }
        let (cap, size) = (self.g.leaf_capacity(), self.g.leaf_entry_size());
        let body = page.get(self.g.leaf_entry_offset(0)..self.g.leaf_entry_offset(cap))?;
        let want = key.to_le_bytes();
        self.ep.charge(Work::Compare(cap));
        for (s, e) in body.chunks_exact(size).enumerate() {
            if e[8..16] != want {
                continue;
            }
            self.ep.charge(Work::Scan(1));
            match leaf_slot(page, &self.g, s, bind) {
                Ok(Slot::Live { len, .. }) => return Some((s, len)),
                Ok(Slot::Free { .. }) => {}
                Err(_) => return None,
            }
        }
        None
    }

    pub(super) async fn refresh_root(&self) -> Result<(), ShermanError> {
        let mut b = [0u8; 8];
        self.qp(self.desc)?
            .read(self.desc.add(D_ROOT), &mut b)
            .await?;
        self.root.set(GlobalAddr::from_raw(u64::from_le_bytes(b)));
        Ok(())
    }

    /// Walks from the root to the page covering `key` at `level`, or (`None`) to the leaf
    /// covering it, whose address is returned without reading the leaf itself (unless the
    /// root is that leaf). Level-1 pages passed on the way refresh the index cache (and the
    /// pages above them with `cache_upper_levels`).
    ///
    /// With `cache_upper_levels`, a descent to a leaf or a level-1 page starts at the child of
    /// the lowest cached page above level 1 that covers the key. That child must be one
    /// level below its cached parent and cover the key; if not, the cached copy is stale (the
    /// child split, or the root grew): it is dropped and the descent starts again one cached
    /// level higher, or at the root.
    ///
    /// Repairs on the way (a split is finished by whoever notices it unfinished): a root with
    /// a right sibling is a root whose split's client has not grown the tree (yet, or ever —
    /// it died): the walk grows it. A page reached through its parent that does not cover the
    /// key is a split whose separator the parent lacks: it is noted in `missing` for the next
    /// write of this handle to insert.
    pub(super) async fn walk(
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
        // The level of the cached page `addr` was taken from, until `addr` is checked.
        let lookup = !matches!(level, Some(l) if l > 1);
        let mut cached = None;
        if let Some((a, l)) = self.cached_start(lookup, key) {
            (addr, cached, top) = (a, Some(l), false);
        }
        loop {
            let h = self.read_page(addr, buf).await?;
            let at = addr;
            let unsettled = |what, p: &Patience| ShermanError::Unsettled {
                what,
                at,
                waited_ns: p.waited(self.ep),
            };
            if let Some(l) = cached.take()
                && (h.level() + 1 != l || key < h.low_fence || key >= h.high_fence)
            {
                // A stale cached page: drop it, start one cached level up or at the root
                // (also if the copy is still there: another thread held the cache).
                self.node.cache_invalidate_at(l, key);
                if !p.step(self.ep) {
                    return Err(unsettled("cached pages did not settle", &p));
                }
                (addr, cached, top) = match self.cached_start(lookup, key) {
                    Some((a, up)) if (a, up) != (at, l) => (a, Some(up), false),
                    _ => (self.root.get(), None, true),
                };
                (from_parent, grown) = (false, false);
                continue;
            }
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
            if h.level() == 1 || self.node.caches_upper() {
                self.ep.charge(Work::Probe(1));
                self.node.cache_insert(&h, buf);
            }
            self.ep.charge(Work::Compare(search_steps(h.count())));
            addr = child_for(buf, &self.g, &h, key).ok_or(ShermanError::Corrupt {
                addr,
                why: remora_layouts::LayoutError::Inconsistent {
                    what: "internal page without child",
                },
            })?;
            from_parent = true;
        }
    }

    /// Where a lookup's descent to `key` starts below the root (`cache_upper_levels`): a
    /// cached page's child and that page's level.
    fn cached_start(&self, lookup: bool, key: u64) -> Option<(GlobalAddr, u8)> {
        if !lookup || !self.node.caches_upper() {
            return None;
        }
        self.ep.charge(Work::Probe(1));
        self.node.start_for(key, &self.g)
    }

    /// The leaf for `key`: from the index cache (true), else by walking down (false).
    pub(super) async fn locate(
        &self,
        key: u64,
        buf: &mut [u8],
    ) -> Result<(GlobalAddr, bool), ShermanError> {
        self.ep.charge(Work::Probe(1));
        if let Some(a) = self.node.leaf_for(key, &self.g) {
            return Ok((a, true));
        }
        Ok((self.walk(key, None, buf).await?, false))
    }

    pub(super) async fn lookup(
        &self,
        key: u64,
        out: &mut [u8],
    ) -> Result<Option<usize>, ShermanError> {
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

    pub(super) async fn lookup_in(
        &self,
        key: u64,
        out: &mut [u8],
        buf: &mut [u8],
    ) -> Result<Option<usize>, ShermanError> {
        let mut addr = self.locate(key, buf).await?.0;
        // Made at the first retry ([`Self::patient`]).
        let mut p: Option<Patience> = None;
        loop {
            let (h, found) = self.read_leaf(addr, buf, key, false).await?;
            let moved = key < h.low_fence || key >= h.high_fence;
            if moved && !self.patient(&mut p).step(self.ep) {
                return Err(ShermanError::Unsettled {
                    what: "lookup did not reach the key's leaf",
                    at: addr,
                    waited_ns: self.patient(&mut p).waited(self.ep),
                });
            }
            if key < h.low_fence {
                self.node.cache_invalidate(key);
                self.patient(&mut p).pause(self.ep).await;
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

    pub(super) async fn scan_from(
        &self,
        from: u64,
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ShermanError> {
        let mut batch = self.batch();
        // As in `lookup`: small pages in the coroutine's frame.
        let r = if self.g.page_size <= FRAME_PAGE {
            let mut frame = [0u8; FRAME_PAGE];
            self.scan_in(
                from,
                limit,
                visit,
                &mut frame[..self.g.page_size],
                &mut batch,
            )
            .await
        } else {
            let mut buf = self.page();
            let r = self.scan_in(from, limit, visit, &mut buf, &mut batch).await;
            self.give(buf);
            r
        };
        self.give_batch(batch);
        r
    }

    async fn scan_in(
        &self,
        from: u64,
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
        buf: &mut [u8],
        batch: &mut ScanBatch,
    ) -> Result<usize, ShermanError> {
        async {
            let mut key = from;
            let mut seen = 0usize;
            let mut addr = self.locate(key, buf).await?.0;
            // Bounds the moves that make no progress (re-locating, moving right of `key`).
            let mut moves = self.patience();
            'pages: loop {
                if seen >= limit {
                    break;
                }
                let h;
                let mut p = self.patience();
                let mut repaired = false;
                loop {
                    let hh = self.read_page(addr, buf).await?;
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
                    let whole = verify_leaf(buf, &self.g, self.bind(&hh), |s, slot| {
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
                            if !p.saw_word() {
                                let word = self.lock_word(addr).await?;
                                p.saw(word, self.ep);
                            }
                            if !repaired && p.past_lease(self.ep) {
                                // Torn for a lease: its writer died; redo it (see read_leaf).
                                repaired = true;
                                let seen = p.seen(self.ep);
                                self.repair_leaf(addr, seen).await?;
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
                    addr = self.locate(key, buf).await?.0;
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
                for &(k, s, len) in batch.iter() {
                    if seen >= limit {
                        break;
                    }
                    visit(&k.to_be_bytes(), leaf_value(buf, &self.g, s, len));
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
        .await
    }
}

//! Repairs of what dead clients leave: redo records of leaf writes, lock takeovers,
//! torn leaves redone, torn internal pages re-derived, separators linked.
use super::ShermanError;
use super::lock::{Batch, Got};
use super::redo;
use super::tree::{FRAME_PAGE, Sherman, bind_of, raw_internal, raw_level, raw_word};
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::lease::Stretch;
use remora_layouts::GlobalAddr;
use remora_layouts::sherman::{KEY_INFINITY, PageHeader, rebind_entry, seal, set_internal_entry};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// A redo record about to be posted (see `redo.rs`): its image, the slot it goes to, and
/// the lock's redo pointer that will name the slot.
pub(super) struct Logged {
    /// The record's image: inline (so in the coroutine's frame once the caller keeps the
    /// `Logged` across the post) when a record of the tree's pages fits, else pooled.
    frame: [u8; redo::HEADER + FRAME_PAGE],
    rec: Option<Vec<u8>>,
    len: usize,
    slot: GlobalAddr,
    slot_word: [u8; 8],
    ptr: GlobalAddr,
    node: usize,
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// The redo record of writing `bytes` at `off` of leaf `page` (its lock held; `rebind`:
    /// see `redo::Record`), in a slot of this handle's on the page's node; post it with
    /// [`Self::log_ops`] ahead of the write, then return it with [`Self::unlog`].
    pub(super) async fn log(
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
        let mut frame = [0u8; redo::HEADER + FRAME_PAGE];
        let mut rec = (self.record_len() > frame.len()).then(|| {
            self.records
                .borrow_mut()
                .pop()
                .unwrap_or_else(|| vec![0u8; self.record_len()])
        });
        let out = match &mut rec {
            Some(r) => &mut r[..],
            None => &mut frame[..self.record_len()],
        };
        let len = redo::encode(out, page, off, bytes, rebind);
        Ok(Logged {
            frame,
            rec,
            len,
            slot,
            slot_word: slot.raw().to_le_bytes(),
            ptr,
            node,
        })
    }

    pub(super) fn record_len(&self) -> usize {
        redo::HEADER + self.g.page_size
    }

    /// The record's WRITE and the redo pointer's, to go ahead of the page write.
    pub(super) fn log_ops<'b>(&self, l: &'b Logged, ops: &mut Batch<'b>) {
        for op in [
            Op::Write {
                remote: l.slot,
                local: match &l.rec {
                    Some(r) => &r[..l.len],
                    None => &l.frame[..l.len],
                },
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
    pub(super) fn unlog(&self, l: Logged) {
        let mut slots = self.redo_slots.borrow_mut();
        if slots.len() <= l.node {
            slots.resize_with(l.node + 1, Vec::new);
        }
        slots[l.node].push(l.slot);
        if let Some(r) = l.rec {
            self.records.borrow_mut().push(r);
        }
    }

    /// Takes the lock of `page` (returned); after a takeover from a dead holder, first puts
    /// back the leaf it may have torn ([`Self::redo`]). `seen`: see [`Locks::acquire`].
    pub(super) async fn acquire_page(
        &self,
        page: GlobalAddr,
        seen: Option<(u64, Stretch)>,
    ) -> Result<(GlobalAddr, Got), ShermanError> {
        let lock = self.lock_for(page)?;
        let got = self.locks.acquire(self.ep, lock, seen).await?;
        self.count_acquired(got);
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
    pub(super) async fn redo(&self, page: GlobalAddr) -> Result<(), ShermanError> {
        let ptr = self.redo_ptr(page)?;
        let qp = self.qp(page)?;
        let mut w = [0u8; 8];
        qp.read(ptr, &mut w).await?;
        let slot = GlobalAddr::from_raw(u64::from_le_bytes(w));
        if slot.is_null() || slot.node() != page.node() {
            return Ok(());
        }
        // As in `lookup`: the record and the page in the coroutine's frame when the page is
        // small, else in pooled heap buffers.
        let mut frame = [0u8; FRAME_PAGE];
        let mut frame_rec = [0u8; redo::HEADER + FRAME_PAGE];
        let mut pooled = None;
        let (buf, rec): (&mut [u8], &mut [u8]) = if self.g.page_size <= FRAME_PAGE {
            (
                &mut frame[..self.g.page_size],
                &mut frame_rec[..self.record_len()],
            )
        } else {
            let rec = self
                .records
                .borrow_mut()
                .pop()
                .unwrap_or_else(|| vec![0u8; self.record_len()]);
            let (p, r) = pooled.insert((self.page(), rec));
            (p, r)
        };
        let r = async {
            qp.read(slot, rec).await?;
            let Some(r) = redo::decode(rec, self.g.page_size) else {
                return Ok(());
            };
            if r.page.node() != page.node() || self.redo_ptr(r.page)? != ptr {
                return Ok(());
            }
            qp.read(r.page, buf).await?;
            if raw_level(buf) != Some(0) || self.leaf_whole(buf) {
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
                seal(buf, &self.g);
            }
            if !self.leaf_whole(buf) {
                // Not the torn write this record describes: left for the deadline to report.
                return Ok(());
            }
            if r.rebind != 0 {
                qp.write(r.page, buf).await?;
            } else {
                qp.write(r.page.add(r.off as u64), r.bytes).await?;
            }
            self.repaired(|s| s.leaves_redone += 1);
            Ok(())
        }
        .await;
        if let Some((p, rec)) = pooled {
            self.give(p);
            self.records.borrow_mut().push(rec);
        }
        r
    }

    /// The leaf image verifies (header and every slot).
    pub(super) fn leaf_whole(&self, page: &[u8]) -> bool {
        self.decode(page)
            .is_ok_and(|h| h.is_leaf() && self.find_in_leaf(page, self.bind(&h), 0).is_ok())
    }

    /// A reader found leaf `addr` torn for a lease: takes its lock (from the dead writer, who
    /// is fenced, which repairs the leaf) and lets it go. `seen`: the lock word when the
    /// reader first found the leaf torn ([`Self::lock_word`]) and how long it watched since
    /// ([`super::wait::Patience::seen`]): if the word has not changed, that time counts towards its lease.
    pub(super) async fn repair_leaf(
        &self,
        addr: GlobalAddr,
        seen: Option<(u64, Stretch)>,
    ) -> Result<(), ShermanError> {
        let (lock, _) = self.acquire_page(addr, seen).await?;
        self.locks
            .release(self.qp(addr)?, lock, &mut Batch::new())
            .await
    }

    /// The lock word of `page` now (a reader notes it in its [`Patience`] for
    /// [`Self::repair_leaf`]).
    pub(super) async fn lock_word(&self, page: GlobalAddr) -> Result<u64, ShermanError> {
        let lock = self.lock_for(page)?;
        let mut w = [0u8; 8];
        self.qp(lock)?.read(lock, &mut w).await?;
        Ok(u64::from_le_bytes(w))
    }

    /// Takes the lock of internal page `addr` (from a dead holder, after its lease) and
    /// re-derives the page if it is still torn.
    pub(super) async fn repair_internal(
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
    pub(super) async fn rederive_internal(
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

    /// Inserts the separators traversals found missing (splits whose client died before
    /// linking them, or has not yet). Bounded: each insert may note one more above it.
    pub(super) async fn link_missing(&self) -> Result<(), ShermanError> {
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
}

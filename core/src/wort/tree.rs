//! The persistent radix tree both services run on their memory node's CPU: WORT (4-bit
//! digits, NODE16 only) or WOART (8-bit digits, adaptive nodes), with WORT's failure-atomic
//! path compression and 8-byte atomic commits (Lee et al., FAST'17).
//!
//! Every change becomes visible by one 8-byte store, persisted (clflush between fences, as
//! the authors' `flush_buffer`: [`LocalRegion::persist_evict`], which drops the lines from
//! the server's cache) after everything it publishes:
//! - **insert under a node**: the leaf is written and persisted, then the node commits the
//!   child (see `nodes.rs`);
//! - **update**: a new leaf is written and persisted, then the parent's child word is stored
//!   (out of place: a value is longer than 8 bytes);
//! - **delete**: the parent's child word or bit is cleared;
//! - **a leaf meets a different key**: a new node holding both leaves, persisted, then the
//!   parent's child word;
//! - **prefix mismatch (path compression split)**: a new node with the common prefix over
//!   the old node and the new leaf, persisted; the parent's child word; then the old node's
//!   header word (shorter prefix, deeper depth). A crash between the last two leaves the old
//!   node's header with a depth smaller than its place in the tree, which is how WORT detects
//!   it: [`Tree::recover`] rebuilds such a header from a leaf below (the prefix ends where it
//!   ended before).
//!
//! The heap (`heap.rs`) is a bump allocator whose high-water mark is persisted ahead of use
//! (in extents), so every reachable node lies below the durable mark, over memory claimed
//! from the region a chunk at a time. A leaf or node is freed once the store that unlinks it
//! is persisted (an update's old leaf, a deleted leaf, a grown node's old copy, a node a
//! delete emptied, an emptied subtree a leaf replaces) and reused by later allocations;
//! recovery takes back the free memory as what the tree does not reach. A full heap answers
//! [`TreeError::Full`].
mod recover;
mod scan;

use super::heap::{EXTENT, Heap};
use super::layout::*;
use super::nodes::{self, Children, Image};
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use remora_layouts::LayoutError;
use remora_layouts::region::{HEADER_LEN, NEXT_CHUNK_OFFSET, RegionHeader, root_offset};
use std_alloc::vec::Vec;

/// What the tree did (volatile, since the server started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Keys inserted (absent before).
    pub inserts: u64,
    /// Values overwritten: a present key given a new leaf, swapped in by one 8-byte store.
    pub updates: u64,
    /// Keys deleted.
    pub deletes: u64,
    /// New inner nodes for two leaves, path-compression splits, node growths.
    pub new_nodes: u64,
    /// Path-compression splits: a node's prefix cut where a new key diverges.
    pub splits: u64,
    /// Node growths (WOART only: a full node replaced by the next size up).
    pub grows: u64,
    /// Flushes (`persist_evict` calls: clflush of a range, then a fence).
    pub persists: u64,
    /// Leaves and inner nodes freed (unlinked, their memory reused).
    pub freed: u64,
}

/// Most inner nodes on a path (each takes at least one digit of a canonical key).
const PATH_MAX: usize = 2 * CANON_LEN + 1;

/// An inner node on a lookup's path: the node, the child word naming it, and the node and
/// digit of that word (None: the root word).
type Step = (Ptr, u64, Option<(Ptr, u8)>);

/// Where a lookup found a key.
struct Found {
    slot: u64,
    leaf: u64,
    /// The inner node holding the child word, and the digit, unless the root word does.
    parent: Option<(Ptr, u8)>,
    /// The inner nodes on the way, root first.
    path: [Step; PATH_MAX],
    depth: usize,
}

/// A tree's volatile handle (the state is all in the region but the allocator cursor).
#[derive(Debug, Clone)]
pub struct Tree {
    /// Which tree the store holds.
    pub kind: Kind,
    /// Region offset of the tree's superblock.
    pub sb: u64,
    heap: Heap,
    /// What the tree did since this handle opened it.
    pub stats: TreeStats,
}

fn corrupt(off: u64, why: LayoutError) -> TreeError {
    TreeError::Corrupt { off, why }
}

fn bad(what: &'static str) -> TreeError {
    TreeError::Fabric(FabricError::Unsupported { what })
}

impl Tree {
    /// Formats a tree of `kind` with `clients x slots` ring slots and its first heap extent in
    /// memory claimed from the region's chunk allocator (the heap claims more as it grows),
    /// and publishes it.
    pub fn format(
        r: &dyn LocalRegion,
        kind: Kind,
        clients: u32,
        slots: u32,
    ) -> Result<Tree, TreeError> {
        let mut hdr = [0u8; HEADER_LEN];
        r.read(0, &mut hdr)?;
        let h = RegionHeader::decode(&hdr).map_err(|why| corrupt(0, why))?;
        let rings = clients as u64 * slots as u64 * SLOT_LEN as u64;
        let mut cur = r.load_u64(NEXT_CHUNK_OFFSET)?;
        let limit = r.len() / h.chunk_size * h.chunk_size;
        let first = (SB_LEN as u64 + rings + EXTENT).next_multiple_of(h.chunk_size);
        let (base, end) = loop {
            let end = cur.saturating_add(first);
            if end > limit {
                return Err(bad("the region has no room for a WORT/WOART store"));
            }
            let seen = r.cas_u64(NEXT_CHUNK_OFFSET, cur, end)?;
            if seen == cur {
                r.persist_evict(NEXT_CHUNK_OFFSET, 8);
                break (cur, end);
            }
            cur = seen;
        };
        let ring_off = base + SB_LEN as u64;
        let heap_base = (ring_off + rings).next_multiple_of(64);
        let words = [
            SB_MAGIC,
            kind as u64,
            0,
            (clients as u64) << 32 | slots as u64,
            ring_off,
            heap_base,
            end,
            heap_base,
        ];
        let mut sb = [0u8; SB_LEN];
        for (i, w) in words.iter().enumerate() {
            sb[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        r.write(base, &sb)?;
        r.persist_evict(base, SB_LEN);
        r.store_u64(root_offset(kind.root_slot()), base)?;
        r.persist_evict(root_offset(kind.root_slot()), 8);
        Tree::open(r, kind, base)
    }

    /// Opens the tree whose superblock is at `sb` (the allocator resumes at the durable mark).
    pub fn open(r: &dyn LocalRegion, kind: Kind, sb: u64) -> Result<Tree, TreeError> {
        let w = |o: u64| r.load_u64(sb + o);
        if w(0)? != SB_MAGIC {
            return Err(corrupt(
                sb,
                LayoutError::BadMagic {
                    expected: SB_MAGIC,
                    found: w(0)?,
                },
            ));
        }
        if Kind::from_word(w(SB_KIND)?) != Some(kind) {
            return Err(corrupt(
                sb,
                LayoutError::Inconsistent {
                    what: "the published store is of the other tree kind",
                },
            ));
        }
        let (base, end, top) = (w(SB_HEAP_BASE)?, w(SB_HEAP_END)?, w(SB_HEAP_TOP)?);
        let mut hdr = [0u8; HEADER_LEN];
        r.read(0, &mut hdr)?;
        let chunk = RegionHeader::decode(&hdr)
            .map_err(|why| corrupt(0, why))?
            .chunk_size;
        if !(base <= top && top <= end && end <= r.len()) {
            return Err(corrupt(
                sb,
                LayoutError::Inconsistent {
                    what: "heap bounds",
                },
            ));
        }
        Ok(Tree {
            kind,
            sb,
            heap: Heap::new(base, end, top, r.len() / chunk * chunk, chunk),
            stats: TreeStats::default(),
        })
    }

    /// (client rings, slots per ring, offset of the first ring).
    pub fn rings(&self, r: &dyn LocalRegion) -> Result<(u32, u32, u64), TreeError> {
        let g = r.load_u64(self.sb + SB_RINGS)?;
        Ok((
            (g >> 32) as u32,
            g as u32,
            r.load_u64(self.sb + SB_RING_OFF)?,
        ))
    }

    /// Bytes of the heap in use (allocated and not freed).
    pub fn heap_used(&self) -> u64 {
        self.heap.used()
    }

    /// Bytes of the region the heap has claimed (its superblock's `heap_end` less its base).
    pub fn heap_claimed(&self) -> u64 {
        self.heap.end - self.heap.base
    }

    pub(super) fn persist(&mut self, r: &dyn LocalRegion, off: u64, len: usize) {
        self.stats.persists += 1;
        r.persist_evict(off, len);
    }

    pub(super) fn alloc(&mut self, r: &dyn LocalRegion, len: usize) -> Result<u64, TreeError> {
        let (sb, before) = (self.sb, self.heap.persists);
        let o = self.heap.alloc(r, sb, len);
        self.stats.persists += self.heap.persists - before;
        o
    }

    /// The leaf at `o` is unlinked (the store persisted): its memory is free.
    fn free_leaf(&mut self, r: &dyn LocalRegion, o: u64) -> Result<(), TreeError> {
        let (_, vl) = self.leaf_key(r, o)?;
        self.heap.free(o, leaf_len(vl));
        self.stats.freed += 1;
        Ok(())
    }

    /// The inner nodes of the subtree under `p`, which holds no leaf and is unlinked (the
    /// store persisted), are free.
    fn free_empty(&mut self, r: &dyn LocalRegion, p: Ptr) -> Result<(), TreeError> {
        if matches!(p, Ptr::Null | Ptr::Leaf(_)) {
            return Ok(());
        }
        let mut ch = Children::new();
        nodes::children(r, p, &mut ch)?;
        for c in ch.as_slice() {
            let cp = self.ptr_of(c.word)?;
            if !matches!(cp, Ptr::Leaf(_)) {
                self.free_empty(r, cp)?;
            }
        }
        self.heap.free(p.offset(), nodes::node_len(p));
        self.stats.freed += 1;
        Ok(())
    }

    /// Checks that a pointer names memory of the heap (a corrupt word never sends the server
    /// outside it).
    fn check(&self, p: Ptr, word: u64) -> Result<Ptr, TreeError> {
        let len = match p {
            Ptr::Leaf(_) => LEAF_HEAD as u64,
            _ => nodes::node_len(p) as u64,
        };
        let o = p.offset();
        if p != Ptr::Null && (o < self.heap.base || o.saturating_add(len) > self.heap.durable_top) {
            return Err(corrupt(
                o,
                LayoutError::OutOfRange {
                    field: "child pointer",
                    value: word,
                },
            ));
        }
        Ok(p)
    }

    fn load_ptr(&self, r: &dyn LocalRegion, slot: u64) -> Result<Ptr, TreeError> {
        let w = r.load_u64(slot)?;
        let p = Ptr::decode(w).map_err(|why| corrupt(slot, why))?;
        self.check(p, w)
    }

    fn ptr_of(&self, w: u64) -> Result<Ptr, TreeError> {
        let p = Ptr::decode(w).map_err(|why| corrupt(0, why))?;
        self.check(p, w)
    }

    /// A leaf's canonical key and value length.
    fn leaf_key(&self, r: &dyn LocalRegion, o: u64) -> Result<([u8; CANON_LEN], usize), TreeError> {
        let mut b = [0u8; LEAF_HEAD];
        r.read(o, &mut b)?;
        let w = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
        let (kl, vl) = decode_leaf_header(w).map_err(|why| corrupt(o, why))?;
        if o + leaf_len(vl) as u64 > self.heap.durable_top {
            return Err(corrupt(
                o,
                LayoutError::OutOfRange {
                    field: "leaf_value_len",
                    value: vl as u64,
                },
            ));
        }
        let mut k = [0u8; CANON_LEN];
        k[..KEY_MAX].copy_from_slice(&b[8..LEAF_HEAD]);
        k[KEY_MAX] = kl as u8;
        Ok((k, vl))
    }

    /// Copies a leaf's key and value out; returns (key length, value length).
    pub fn read_leaf(
        &self,
        r: &dyn LocalRegion,
        o: u64,
        key: &mut [u8; KEY_MAX],
        value: &mut [u8; VALUE_MAX],
    ) -> Result<(usize, usize), TreeError> {
        let (k, vl) = self.leaf_key(r, o)?;
        key.copy_from_slice(&k[..KEY_MAX]);
        r.read(o + LEAF_HEAD as u64, &mut value[..vl])?;
        Ok((k[KEY_MAX] as usize, vl))
    }

    fn new_leaf(
        &mut self,
        r: &dyn LocalRegion,
        key: &[u8],
        value: &[u8],
    ) -> Result<u64, TreeError> {
        let mut img = [0u8; LEAF_MAX];
        let n = encode_leaf(&mut img, key, value);
        let o = self.alloc(r, n)?;
        r.write(o, &img[..n])?;
        self.persist(r, o, n);
        Ok(o)
    }

    fn write_node(&mut self, r: &dyn LocalRegion, img: &Image) -> Result<u64, TreeError> {
        let o = self.alloc(r, img.len)?;
        r.write(o, &img.buf[..img.len])?;
        self.persist(r, o, img.len);
        self.stats.new_nodes += 1;
        Ok(o)
    }

    /// A new node type for two children (WORT's NODE16, WOART's NODE4).
    fn small(&self, off: u64) -> Ptr {
        match self.kind {
            Kind::Wort => Ptr::N16Direct(off),
            Kind::Woart => Ptr::N4(off),
        }
    }

    /// The first leaf under `p` in key order (None: an empty subtree).
    fn min_leaf(&self, r: &dyn LocalRegion, p: Ptr) -> Result<Option<u64>, TreeError> {
        match p {
            Ptr::Null => Ok(None),
            Ptr::Leaf(o) => Ok(Some(o)),
            _ => {
                let mut ch = Children::new();
                nodes::children(r, p, &mut ch)?;
                for c in ch.as_slice() {
                    if let Some(l) = self.min_leaf(r, self.ptr_of(c.word)?)? {
                        return Ok(Some(l));
                    }
                }
                Ok(None)
            }
        }
    }

    /// The node's prefix digit `i` (the header holds the first [`PREFIX_MAX`]; the rest come
    /// from a leaf below, fetched once into `lk`). None: the subtree is empty.
    fn prefix_digit(
        &self,
        r: &dyn LocalRegion,
        p: Ptr,
        h: &Header,
        i: usize,
        lk: &mut Option<[u8; CANON_LEN]>,
    ) -> Result<Option<u8>, TreeError> {
        if i < PREFIX_MAX {
            return Ok(Some(h.prefix[i]));
        }
        if lk.is_none() {
            match self.min_leaf(r, p)? {
                Some(l) => *lk = Some(self.leaf_key(r, l)?.0),
                None => return Ok(None),
            }
        }
        Ok(lk.map(|k| self.kind.digit(&k, h.depth as usize + i)))
    }

    fn node_header(&self, r: &dyn LocalRegion, p: Ptr, d: usize) -> Result<Header, TreeError> {
        let h = nodes::header(r, p)?;
        if h.depth as usize != d || d + h.plen as usize >= self.kind.digits() {
            return Err(corrupt(
                p.offset(),
                LayoutError::Inconsistent {
                    what: "node depth does not match its place (recovery repairs this)",
                },
            ));
        }
        Ok(h)
    }

    fn find(&self, r: &dyn LocalRegion, k: &[u8; CANON_LEN]) -> Result<Option<Found>, TreeError> {
        let mut slot = self.sb + SB_ROOT;
        let mut parent = None;
        let mut d = 0usize;
        let mut path = [(Ptr::Null, 0, None); PATH_MAX];
        let mut depth = 0;
        loop {
            match self.load_ptr(r, slot)? {
                Ptr::Null => return Ok(None),
                Ptr::Leaf(o) => {
                    return Ok((self.leaf_key(r, o)?.0 == *k).then_some(Found {
                        slot,
                        leaf: o,
                        parent,
                        path,
                        depth,
                    }));
                }
                p => {
                    let at = path.get_mut(depth).ok_or(corrupt(
                        p.offset(),
                        LayoutError::Inconsistent {
                            what: "path longer than a key",
                        },
                    ))?;
                    *at = (p, slot, parent);
                    depth += 1;
                    let h = self.node_header(r, p, d)?;
                    // Optimistic: the leaf's whole key is compared at the end.
                    for i in 0..(h.plen as usize).min(PREFIX_MAX) {
                        if self.kind.digit(k, d + i) != h.prefix[i] {
                            return Ok(None);
                        }
                    }
                    d += h.plen as usize;
                    let c = self.kind.digit(k, d);
                    match nodes::find_child(r, p, c)? {
                        Some(s) => {
                            parent = Some((p, c));
                            slot = s;
                            d += 1;
                        }
                        None => return Ok(None),
                    }
                }
            }
        }
    }

    /// The leaf of `key`, if present.
    pub fn get(&self, r: &dyn LocalRegion, key: &[u8]) -> Result<Option<u64>, TreeError> {
        let k = canon(key).ok_or(bad("keys are 1 to 16 bytes"))?;
        Ok(self.find(r, &k)?.map(|f| f.leaf))
    }

    /// Inserts or overwrites (`only_present`: overwrites only); returns whether the key was
    /// present.
    pub fn put(
        &mut self,
        r: &dyn LocalRegion,
        key: &[u8],
        value: &[u8],
        only_present: bool,
    ) -> Result<bool, TreeError> {
        let k = canon(key).ok_or(bad("keys are 1 to 16 bytes"))?;
        if value.len() > VALUE_MAX {
            return Err(bad("values are at most 256 bytes"));
        }
        let mut slot = self.sb + SB_ROOT;
        let mut d = 0usize;
        loop {
            let p = self.load_ptr(r, slot)?;
            let cur = match p {
                Ptr::Null => None,
                Ptr::Leaf(o) => Some((o, self.leaf_key(r, o)?.0)),
                _ => {
                    let h = self.node_header(r, p, d)?;
                    let mut lk = None;
                    let mut i = 0;
                    let mut empty = false;
                    while i < h.plen as usize {
                        match self.prefix_digit(r, p, &h, i, &mut lk)? {
                            Some(pd) if pd == self.kind.digit(&k, d + i) => i += 1,
                            Some(_) => break,
                            None => {
                                empty = true;
                                break;
                            }
                        }
                    }
                    if empty {
                        // A subtree emptied by deletes: the leaf takes its place.
                        if only_present {
                            return Ok(false);
                        }
                        let leaf = self.new_leaf(r, key, value)?;
                        r.store_u64(slot, Ptr::Leaf(leaf).encode())?;
                        self.persist(r, slot, 8);
                        self.free_empty(r, p)?;
                        self.stats.inserts += 1;
                        return Ok(false);
                    }
                    if i < h.plen as usize {
                        if only_present {
                            return Ok(false);
                        }
                        self.split(r, slot, p, &h, d, i, &k, key, value, &mut lk)?;
                        return Ok(false);
                    }
                    d += h.plen as usize;
                    let c = self.kind.digit(&k, d);
                    if let Some(s) = nodes::find_child(r, p, c)?
                        && r.load_u64(s)? != 0
                    {
                        slot = s;
                        d += 1;
                        continue;
                    }
                    if only_present {
                        return Ok(false);
                    }
                    let leaf = Ptr::Leaf(self.new_leaf(r, key, value)?).encode();
                    if !nodes::add_in_place(r, p, c, leaf)? {
                        self.grow(r, slot, p, c, leaf)?;
                    }
                    self.stats.persists += 2;
                    self.stats.inserts += 1;
                    return Ok(false);
                }
            };
            match cur {
                None => {
                    if only_present {
                        return Ok(false);
                    }
                    let leaf = self.new_leaf(r, key, value)?;
                    r.store_u64(slot, Ptr::Leaf(leaf).encode())?;
                    self.persist(r, slot, 8);
                    self.stats.inserts += 1;
                    return Ok(false);
                }
                Some((old, lk)) if lk == k => {
                    let leaf = self.new_leaf(r, key, value)?;
                    r.store_u64(slot, Ptr::Leaf(leaf).encode())?;
                    self.persist(r, slot, 8);
                    self.free_leaf(r, old)?;
                    self.stats.updates += 1;
                    return Ok(true);
                }
                Some((old, lk)) => {
                    if only_present {
                        return Ok(false);
                    }
                    // Two leaves: a node at depth d whose prefix is their common digits.
                    // Canonical keys differ in some digit; a leaf that agrees with `k` on
                    // every digit from `d` on differs above `d`: it is not in this subtree
                    // (a damaged child word), and the walk past the last digit is refused.
                    let mut m = d;
                    while m < self.kind.digits()
                        && self.kind.digit(&lk, m) == self.kind.digit(&k, m)
                    {
                        m += 1;
                    }
                    if m == self.kind.digits() {
                        return Err(corrupt(
                            old,
                            LayoutError::Inconsistent {
                                what: "a leaf under a node its key does not lead to",
                            },
                        ));
                    }
                    let leaf = self.new_leaf(r, key, value)?;
                    let h = Header::with_prefix(d, m - d, |i| self.kind.digit(&k, i));
                    let node = self.small(0);
                    let mut img = Image::new(node, h);
                    img.add(node, self.kind.digit(&lk, m), Ptr::Leaf(old).encode());
                    img.add(node, self.kind.digit(&k, m), Ptr::Leaf(leaf).encode());
                    let o = self.write_node(r, &img)?;
                    r.store_u64(slot, self.small(o).encode())?;
                    self.persist(r, slot, 8);
                    self.stats.inserts += 1;
                    return Ok(false);
                }
            }
        }
    }

    /// WORT's failure-atomic path compression split: node `p` at depth `d`, whose prefix
    /// differs from the key at its digit `i`.
    #[allow(clippy::too_many_arguments)]
    fn split(
        &mut self,
        r: &dyn LocalRegion,
        slot: u64,
        p: Ptr,
        h: &Header,
        d: usize,
        i: usize,
        k: &[u8; CANON_LEN],
        key: &[u8],
        value: &[u8],
        lk: &mut Option<[u8; CANON_LEN]>,
    ) -> Result<(), TreeError> {
        let plen = h.plen as usize;
        let mut digits = [0u8; 2 * CANON_LEN];
        for (j, dg) in digits.iter_mut().enumerate().take(plen) {
            *dg = self.prefix_digit(r, p, h, j, lk)?.unwrap_or(0);
        }
        let leaf = self.new_leaf(r, key, value)?;
        let top = Header::with_prefix(d, i, |j| self.kind.digit(k, j));
        let node = self.small(0);
        let mut img = Image::new(node, top);
        img.add(node, digits[i], p.encode());
        img.add(node, self.kind.digit(k, d + i), Ptr::Leaf(leaf).encode());
        let o = self.write_node(r, &img)?;
        r.store_u64(slot, self.small(o).encode())?;
        self.persist(r, slot, 8);
        // The old node moves down: its prefix loses the first i + 1 digits.
        let below = Header::with_prefix(d + i + 1, plen - i - 1, |j| digits[j - d]);
        r.store_u64(p.offset(), below.encode())?;
        self.persist(r, p.offset(), 8);
        self.stats.splits += 1;
        self.stats.inserts += 1;
        Ok(())
    }

    /// Grows a full node copy-on-write with one more child, and publishes it at `slot`.
    fn grow(
        &mut self,
        r: &dyn LocalRegion,
        slot: u64,
        p: Ptr,
        digit: u8,
        word: u64,
    ) -> Result<(), TreeError> {
        let big = nodes::grown(p, 0).ok_or(bad("a direct node is never full"))?;
        let mut img = Image::new(big, nodes::header(r, p)?);
        let mut ch = Children::new();
        nodes::children(r, p, &mut ch)?;
        for c in ch.as_slice() {
            img.add(big, c.digit, c.word);
        }
        img.add(big, digit, word);
        let o = self.write_node(r, &img)?;
        let grown = nodes::grown(p, o).ok_or(bad("a direct node is never full"))?;
        r.store_u64(slot, grown.encode())?;
        self.persist(r, slot, 8);
        self.heap.free(p.offset(), nodes::node_len(p));
        self.stats.freed += 1;
        self.stats.grows += 1;
        Ok(())
    }

    /// Removes `key`; returns whether it was present.
    pub fn delete(&mut self, r: &dyn LocalRegion, key: &[u8]) -> Result<bool, TreeError> {
        let k = canon(key).ok_or(bad("keys are 1 to 16 bytes"))?;
        let Some(f) = self.find(r, &k)? else {
            return Ok(false);
        };
        match f.parent {
            None => {
                r.store_u64(f.slot, 0)?;
                self.persist(r, f.slot, 8);
            }
            Some((node, digit)) => {
                nodes::remove(r, node, digit, f.slot)?;
                self.stats.persists += 1;
            }
        }
        self.free_leaf(r, f.leaf)?;
        // Inner nodes the delete left empty leave the tree, deepest first (each unlinked by
        // one persisted store, then freed): else a key range deleted for good would keep
        // its nodes for ever.
        for &(node, slot, parent) in f.path[..f.depth].iter().rev() {
            let mut ch = Children::new();
            nodes::children(r, node, &mut ch)?;
            if ch.len != 0 {
                break;
            }
            match parent {
                None => {
                    r.store_u64(slot, 0)?;
                    self.persist(r, slot, 8);
                }
                Some((up, digit)) => {
                    nodes::remove(r, up, digit, slot)?;
                    self.stats.persists += 1;
                }
            }
            self.free_empty(r, node)?;
        }
        self.stats.deletes += 1;
        Ok(true)
    }
}

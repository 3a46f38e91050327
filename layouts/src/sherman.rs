//! Sherman's B-link tree pages.
//!
//! Every page (internal or leaf, `page_size` bytes, 1 KiB by default) is:
//!
//! | offset | bytes | what |
//! |---|---|---|
//! | 0 | 64 | [`PageHeader`]: page version, level/leaf/count word, sibling, fences, leftmost child, page checksum |
//! | 64 | n × entry | entries: internal `[key u64][child u64]`, sorted, `count` of them; leaf `[meta u64][key u64][value]`, unsorted, every slot free or live |
//! | page_size − 8 | 8 | rear version (== page version) |
//!
//! Keys are u64 in `[0, u64::MAX)`; a page holds keys in `[low_fence, high_fence)` and
//! `high_fence == u64::MAX` means +∞.
//!
//! **Proving a READ saw one page image, in any segment order.** The fabric promises only that
//! aligned 8-byte words are atomic: the 64-byte segments of one READ may observe memory in any
//! order, and those of one WRITE may land in any order. So nothing that compares two words
//! written by different segments (Sherman's front == rear version) proves anything, and nor
//! does a version per cache line (a line is not atomic either). What holds is content
//! verification:
//!
//! - **Internal pages** are only ever written whole. The header's `checksum` word is a 64-bit
//!   hash of every other word of the page ([`page_hash`]); a reader recomputes it. A READ
//!   that mixes two images fails it (up to a ~2⁻⁶⁴ chance), whatever the order of the mix.
//! - **Leaves** are written whole (splits, FG+) and also entry by entry (Sherman's two-level
//!   versions), so no page-wide checksum can stay valid. The header's `checksum` covers the
//!   header words and the rear version only; each entry's 47-bit checksum covers the entry
//!   *and the page version it was written under* (its "binding"). A whole-page write bumps the
//!   page version and writes every slot, live or free, bound to it. A reader accepts a leaf
//!   only if the header verifies and every slot verifies against the header's version: a slot
//!   left over from an older image (or torn, or from a newer image than the header) fails, so
//!   the reader re-reads instead of missing a key that a split moved. A slot rewritten alone
//!   under the same version is verified on its own: each entry is one atomic unit, and the
//!   leaf is the set of them (what Sherman's entry-level versions give).
//!
//! Writers therefore need no order inside a WRITE; they rely only on per-queue-pair order of
//! whole operations (the new right page of a split completes before the left page that links
//! it is written; a write-back completes before the unlock posted behind it).
//!
//! A meta word of 0 is a slot never written, which no writer produces (every whole-page write
//! encodes every slot): it reads as an error, like any other unverifiable slot.
//!
//! [`PageHeader::decode_front_rear`] keeps the old check (front == rear, entries not bound):
//! sound only when a READ moves segments in ascending order and the page is written rear
//! first, body, front last. It exists so a test can show that ordering assumption failing.
//!
//! Cost of the checks (per READ that a decision uses): internal page, one pass of
//! [`page_hash`] over the page; leaf, the header hash plus one entry hash per slot (every
//! slot must be verified: a "not found" is a decision too). No extra bytes on the wire or in
//! the page: the checksum sits in a formerly reserved header word, and the value length
//! shares the entry's meta word.
use crate::LayoutError;
use crate::bits::{Field, assert_disjoint, read_u64};
use memoffset::offset_of;

/// Bytes of the [`PageHeader`] at the front of every page.
pub const HEADER_LEN: usize = 64;
/// Bytes of the rear version word at the end of every page.
pub(crate) const REAR_LEN: usize = 8;
/// Keys must be below this; it is the +∞ fence.
pub const KEY_INFINITY: u64 = u64::MAX;
/// Bytes of an internal entry.
pub(crate) const INTERNAL_ENTRY: usize = 16;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
/// The 64-byte header at offset 0 of every page, internal or leaf.
pub struct PageHeader {
    /// Page version; bumped by every whole-page write and repeated in the rear word.
    pub front_version: u64,
    /// Packed: level, leaf flag, entry count ([`LEVEL`], [`LEAF`], [`COUNT`]).
    pub meta: u64,
    /// Right sibling (raw `GlobalAddr`), 0 for the rightmost page of a level.
    pub sibling: u64,
    /// Lowest key the page may hold (inclusive).
    pub low_fence: u64,
    /// Key bound of the page (exclusive); [`KEY_INFINITY`] means +∞.
    pub high_fence: u64,
    /// Internal pages: child for keys below the first entry's key.
    pub leftmost: u64,
    /// [`page_hash`] of the page (internal) or [`header_hash`] (leaf), set by [`seal`].
    pub checksum: u64,
    /// Unused; zero.
    pub reserved: u64,
}
const _: () = assert!(core::mem::size_of::<PageHeader>() == HEADER_LEN);
const _: () = assert!(offset_of!(PageHeader, front_version) == 0);
const _: () = assert!(offset_of!(PageHeader, meta) == 8);
const _: () = assert!(offset_of!(PageHeader, sibling) == 16);
const _: () = assert!(offset_of!(PageHeader, low_fence) == 24);
const _: () = assert!(offset_of!(PageHeader, high_fence) == 32);
const _: () = assert!(offset_of!(PageHeader, leftmost) == 40);
const _: () = assert!(offset_of!(PageHeader, checksum) == CHECKSUM_AT);
/// Byte offset of the header's checksum word.
pub(crate) const CHECKSUM_AT: usize = 48;

/// Page level in [`PageHeader::meta`] (bits 7..0; 0 for leaves).
pub const LEVEL: Field = Field::new("level", 0, 8);
/// Leaf flag in [`PageHeader::meta`] (bit 8).
pub(crate) const LEAF: Field = Field::new("leaf", 8, 1);
/// Entry count in [`PageHeader::meta`] (bits 31..16; internal pages: sorted entries in use).
pub const COUNT: Field = Field::new("count", 16, 16);
const _: () = assert_disjoint(&[LEVEL, LEAF, COUNT]);

/// Leaf entry meta word: valid bit, value length (0..=256), 7-bit entry version, 47-bit
/// checksum of the entry bound to the page version. This field: bit 0, the entry is live.
pub(crate) const VALID: Field = Field::new("valid", 0, 1);
/// Value length in bytes, 0..=256 (bits 9..1 of a leaf entry's meta word).
pub(crate) const VALUE_LEN: Field = Field::new("value_len", 1, 9);
/// Entry version, wrapping at 128 (bits 16..10).
pub(crate) const ENTRY_VERSION: Field = Field::new("entry_version", 10, 7);
/// 47-bit checksum of the entry bound to the page version (bits 63..17).
pub(crate) const CHECKSUM: Field = Field::new("checksum", 17, 47);
const _: () = assert_disjoint(&[VALID, VALUE_LEN, ENTRY_VERSION, CHECKSUM]);
const _: () = assert!(VALUE_LEN.max() >= MAX_VALUE as u64);
/// The largest value size a geometry allows.
pub const MAX_VALUE: usize = 256;

/// One step of the word hash: xor the word in, then the murmur3 64-bit finalizer (multiply,
/// xorshift, twice). Each step is a bijection of the state for a fixed word, so two inputs of
/// one length that first differ at word `i` have different states right after it, and a later
/// word makes them equal again only by chance (≈ 2⁻⁶⁴ for data not built to collide).
#[inline(always)]
const fn step(h: u64, w: u64) -> u64 {
    let mut x = (h ^ w).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[inline(always)]
fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Hash of a whole page image, its checksum word counted as 0. Eight independent lanes (word
/// `i` goes to lane `i % 8`, one 64-byte line per round), folded at the end, so the CPU
/// overlaps the multiplies.
pub(crate) fn page_hash(page: &[u8], g: &Geometry) -> u64 {
    const _: () = assert!(CHECKSUM_AT < 64 && HEADER_LEN == 64);
    let mut lanes: [u64; 8] = core::array::from_fn(|l| 0x243f_6a88_85a3_08d3 ^ (l as u64) << 56);
    let (head, body) = page[..g.page_size].split_at(64);
    for (l, lane) in lanes.iter_mut().enumerate() {
        let w = if l * 8 == CHECKSUM_AT {
            0
        } else {
            word(head, l * 8)
        };
        *lane = step(*lane, w);
    }
    for c in body.chunks_exact(64) {
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane = step(*lane, word(c, l * 8));
        }
    }
    lanes.iter().fold(g.page_size as u64, |h, &l| step(h, l))
}

/// Hash of a leaf's header words (checksum word counted as 0) and its rear version.
pub(crate) fn header_hash(page: &[u8], g: &Geometry) -> u64 {
    let mut h = 0x4528_21e6_38d0_1377u64;
    for at in (0..HEADER_LEN).step_by(8) {
        h = step(h, if at == CHECKSUM_AT { 0 } else { word(page, at) });
    }
    step(h, word(page, g.rear_offset()))
}

/// The 47-bit checksum of a leaf entry (`bytes`: meta, key, value area) bound to page version
/// `bind`; never 0, so a meta word is never 0.
fn entry_hash(bytes: &[u8], bind: u64) -> u64 {
    entry_hash_from(entry_seed(bind), bytes)
}

/// The hash state every entry bound to `bind` starts from (computed once per page).
#[inline(always)]
fn entry_seed(bind: u64) -> u64 {
    step(0xbe54_66cf_34e9_0c6c, bind)
}

#[inline(always)]
fn entry_hash_from(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = step(seed, word(bytes, 0) & !CHECKSUM.mask());
    for at in (8..bytes.len()).step_by(8) {
        h = step(h, word(bytes, at));
    }
    (h >> CHECKSUM.lo).max(1)
}

/// Page and entry sizes of one tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes of a page (a power of two in 256..=65536).
    pub page_size: usize,
    /// Bytes of a leaf entry's value area (a multiple of 8 in 8..=256).
    pub value_size: usize,
}

impl Geometry {
    /// `page_size`: a power of two in 256..=65536; `value_size`: a multiple of 8 in 8..=256;
    /// a leaf must hold at least 4 entries.
    pub fn new(page_size: usize, value_size: usize) -> Result<Geometry, LayoutError> {
        if !page_size.is_power_of_two() || !(256..=65536).contains(&page_size) {
            return Err(LayoutError::OutOfRange {
                field: "page_size",
                value: page_size as u64,
            });
        }
        if !value_size.is_multiple_of(8) || !(8..=256).contains(&value_size) {
            return Err(LayoutError::OutOfRange {
                field: "value_size",
                value: value_size as u64,
            });
        }
        let g = Geometry {
            page_size,
            value_size,
        };
        if g.leaf_capacity() < 4 {
            return Err(LayoutError::Inconsistent {
                what: "page too small for 4 leaf entries",
            });
        }
        Ok(g)
    }
    /// Bytes of a leaf entry: meta word, key, value area.
    pub const fn leaf_entry_size(&self) -> usize {
        16 + self.value_size
    }
    /// Leaf entries that fit between the header and the rear version.
    pub const fn leaf_capacity(&self) -> usize {
        (self.page_size - HEADER_LEN - REAR_LEN) / self.leaf_entry_size()
    }
    /// Internal entries that fit between the header and the rear version.
    pub const fn internal_capacity(&self) -> usize {
        (self.page_size - HEADER_LEN - REAR_LEN) / INTERNAL_ENTRY
    }
    /// Byte offset of leaf slot `slot` within a page.
    pub const fn leaf_entry_offset(&self, slot: usize) -> usize {
        HEADER_LEN + slot * self.leaf_entry_size()
    }
    /// Byte offset of internal entry `i` within a page.
    pub const fn internal_entry_offset(&self, i: usize) -> usize {
        HEADER_LEN + i * INTERNAL_ENTRY
    }
    /// Byte offset of the rear version word within a page.
    pub const fn rear_offset(&self) -> usize {
        self.page_size - REAR_LEN
    }
}

impl PageHeader {
    /// The page's level (0 for leaves).
    pub fn level(&self) -> u8 {
        LEVEL.get(self.meta) as u8
    }
    /// Whether the page is a leaf.
    pub fn is_leaf(&self) -> bool {
        LEAF.get(self.meta) == 1
    }
    /// Entry count from the meta word.
    pub fn count(&self) -> usize {
        COUNT.get(self.meta) as usize
    }
    /// Packs level, leaf flag and entry count into a meta word.
    pub fn pack_meta(level: u8, leaf: bool, count: usize) -> u64 {
        COUNT.set(
            LEAF.set(LEVEL.set(0, level as u64), leaf as u64),
            count as u64,
        )
    }
    /// True when `key` belongs to this page's range.
    pub fn covers(&self, key: u64) -> bool {
        self.low_fence <= key && key < self.high_fence
    }

    /// Writes the header's eight words, little-endian, into the first [`HEADER_LEN`] bytes of
    /// `page`.
    pub fn encode(&self, page: &mut [u8]) {
        let words = [
            self.front_version,
            self.meta,
            self.sibling,
            self.low_fence,
            self.high_fence,
            self.leftmost,
            self.checksum,
            self.reserved,
        ];
        for (i, w) in words.iter().enumerate() {
            page[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
    }

    /// Decodes a page image and checks it: its checksum (the whole page for an internal page,
    /// the header for a leaf, whose entries the caller verifies with [`leaf_slot`] bound to
    /// the returned `front_version`), front == rear version, and fields that make sense for
    /// `g`. Torn images (in any segment order) and garbage are errors, never panics.
    pub fn decode(page: &[u8], g: &Geometry) -> Result<PageHeader, LayoutError> {
        let h = Self::decode_front_rear(page, g)?;
        let computed = if h.is_leaf() {
            header_hash(page, g)
        } else {
            page_hash(page, g)
        };
        if computed != h.checksum {
            return Err(LayoutError::BadChecksum {
                stored: h.checksum,
                computed,
            });
        }
        Ok(h)
    }

    /// The old check alone: front == rear version and sane fields, no checksum. Proves a
    /// whole image only if the page was written rear, body, front (ordered) and the READ
    /// moved its segments in ascending order, which the fabric does not promise: kept for
    /// the test that shows it failing.
    pub fn decode_front_rear(page: &[u8], g: &Geometry) -> Result<PageHeader, LayoutError> {
        if page.len() < g.page_size {
            return Err(LayoutError::Short {
                need: g.page_size,
                got: page.len(),
            });
        }
        let w = |i: usize| read_u64(page, i * 8);
        let h = PageHeader {
            front_version: w(0)?,
            meta: w(1)?,
            sibling: w(2)?,
            low_fence: w(3)?,
            high_fence: w(4)?,
            leftmost: w(5)?,
            checksum: w(6)?,
            reserved: w(7)?,
        };
        let rear = read_u64(page, g.rear_offset())?;
        if h.front_version != rear {
            return Err(LayoutError::Inconsistent {
                what: "front and rear page versions differ (torn page)",
            });
        }
        if h.front_version == 0 {
            return Err(LayoutError::Inconsistent {
                what: "page never written",
            });
        }
        if h.is_leaf() != (h.level() == 0) {
            return Err(LayoutError::Inconsistent {
                what: "leaf flag and level disagree",
            });
        }
        let cap = if h.is_leaf() {
            g.leaf_capacity()
        } else {
            g.internal_capacity()
        };
        if h.count() > cap {
            return Err(LayoutError::OutOfRange {
                field: "count",
                value: h.count() as u64,
            });
        }
        if h.low_fence >= h.high_fence {
            return Err(LayoutError::Inconsistent {
                what: "low fence not below high fence",
            });
        }
        Ok(h)
    }
}

/// Finishes a page image whose header and entries are encoded: copies the page version to
/// the rear word and sets the checksum word.
pub fn seal(page: &mut [u8], g: &Geometry) {
    let at = g.rear_offset();
    let v = word(page, 0);
    page[at..at + 8].copy_from_slice(&v.to_le_bytes());
    let leaf = LEAF.get(word(page, 8)) == 1;
    let sum = if leaf {
        header_hash(page, g)
    } else {
        page_hash(page, g)
    };
    page[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
}

/// One internal entry `i` of a decoded page: (separator key, child).
pub fn internal_entry(page: &[u8], g: &Geometry, i: usize) -> Result<(u64, u64), LayoutError> {
    let at = g.internal_entry_offset(i);
    Ok((read_u64(page, at)?, read_u64(page, at + 8)?))
}

/// Writes internal entry `i` (separator key, child) into `page`; does not update the checksum.
pub fn set_internal_entry(page: &mut [u8], g: &Geometry, i: usize, key: u64, child: u64) {
    let at = g.internal_entry_offset(i);
    page[at..at + 8].copy_from_slice(&key.to_le_bytes());
    page[at + 8..at + 16].copy_from_slice(&child.to_le_bytes());
}

/// What a leaf slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Free (never used since the last whole-page write, or deleted), with its last version.
    Free {
        /// Entry version of the slot's last write.
        version: u8,
    },
    /// A live entry whose value is `len` bytes.
    Live {
        /// The entry's key.
        key: u64,
        /// Entry version.
        version: u8,
        /// Value length in bytes.
        len: usize,
    },
}

/// Encodes a leaf entry into `out` (`g.leaf_entry_size()` bytes): `value` (at most the value
/// area) zero-padded, its length in the meta word, checksummed and bound to page version
/// `bind`. Entry versions wrap at 128.
pub fn encode_leaf_entry(
    out: &mut [u8],
    key: u64,
    value: &[u8],
    version: u8,
    valid: bool,
    bind: u64,
) {
    let meta = ENTRY_VERSION.set(
        VALUE_LEN.set(VALID.set(0, valid as u64), value.len() as u64),
        version as u64,
    );
    out[0..8].copy_from_slice(&meta.to_le_bytes());
    out[8..16].copy_from_slice(&key.to_le_bytes());
    out[16..16 + value.len()].copy_from_slice(value);
    out[16 + value.len()..].fill(0);
    rebind_entry(out, bind);
}

/// Recomputes the checksum of an encoded entry (`bytes`, a whole entry) for page version
/// `bind`: how a whole-page write moves verified entries into its new version.
pub fn rebind_entry(bytes: &mut [u8], bind: u64) {
    let sum = entry_hash(bytes, bind);
    let meta = CHECKSUM.set(word(bytes, 0), sum);
    bytes[0..8].copy_from_slice(&meta.to_le_bytes());
}

/// The bytes of leaf entry `slot` of a page image.
pub fn leaf_entry_bytes<'p>(page: &'p [u8], g: &Geometry, slot: usize) -> Option<&'p [u8]> {
    let at = g.leaf_entry_offset(slot);
    page.get(at..at + g.leaf_entry_size())
}

/// Decodes the leaf entry in `slot` of a page image, verified against page version `bind`. A
/// torn or corrupt entry, one left from another page image, and a slot never written are
/// errors.
pub fn leaf_slot(page: &[u8], g: &Geometry, slot: usize, bind: u64) -> Result<Slot, LayoutError> {
    let bytes = leaf_entry_bytes(page, g, slot).ok_or(LayoutError::Short {
        need: g.leaf_entry_offset(slot) + g.leaf_entry_size(),
        got: page.len(),
    })?;
    decode_slot(bytes, g, entry_hash(bytes, bind))
}

/// Decodes an entry whose checksum, recomputed, is `computed`.
#[inline(always)]
fn decode_slot(bytes: &[u8], g: &Geometry, computed: u64) -> Result<Slot, LayoutError> {
    let meta = word(bytes, 0);
    if computed != CHECKSUM.get(meta) {
        return Err(LayoutError::BadChecksum {
            stored: CHECKSUM.get(meta),
            computed,
        });
    }
    let version = ENTRY_VERSION.get(meta) as u8;
    let len = VALUE_LEN.get(meta) as usize;
    if len > g.value_size {
        return Err(LayoutError::OutOfRange {
            field: "value_len",
            value: len as u64,
        });
    }
    Ok(if VALID.get(meta) == 1 {
        Slot::Live {
            key: word(bytes, 8),
            version,
            len,
        }
    } else {
        Slot::Free { version }
    })
}

/// Verifies every slot of a leaf image against page version `bind` and calls `f(slot, what)`
/// for each, in slot order; stops at the first slot that fails, with its error (so `f` may
/// have seen earlier slots of an image that turns out torn: use its findings only on `Ok`).
/// Same result as [`leaf_slot`] on each slot, four entries hashed side by side.
pub fn verify_leaf(
    page: &[u8],
    g: &Geometry,
    bind: u64,
    mut f: impl FnMut(usize, Slot),
) -> Result<(), LayoutError> {
    let (cap, size) = (g.leaf_capacity(), g.leaf_entry_size());
    let end = g.leaf_entry_offset(cap);
    if page.len() < end {
        return Err(LayoutError::Short {
            need: end,
            got: page.len(),
        });
    }
    let seed = entry_seed(bind);
    let entry = |s: usize| &page[g.leaf_entry_offset(s)..g.leaf_entry_offset(s) + size];
    let mut s = 0;
    while s + 4 <= cap {
        let e = [entry(s), entry(s + 1), entry(s + 2), entry(s + 3)];
        let mut h = [seed; 4];
        for (l, hl) in h.iter_mut().enumerate() {
            *hl = step(*hl, word(e[l], 0) & !CHECKSUM.mask());
        }
        for at in (8..size).step_by(8) {
            for (l, hl) in h.iter_mut().enumerate() {
                *hl = step(*hl, word(e[l], at));
            }
        }
        for l in 0..4 {
            f(s + l, decode_slot(e[l], g, (h[l] >> CHECKSUM.lo).max(1))?);
        }
        s += 4;
    }
    while s < cap {
        f(
            s,
            decode_slot(entry(s), g, entry_hash_from(seed, entry(s)))?,
        );
        s += 1;
    }
    Ok(())
}

/// The value of leaf `slot`, `len` bytes (as [`leaf_slot`] said).
pub fn leaf_value<'p>(page: &'p [u8], g: &Geometry, slot: usize, len: usize) -> &'p [u8] {
    let at = g.leaf_entry_offset(slot) + 16;
    &page[at..at + len.min(g.value_size)]
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    /// A leaf image of version `v` holding `(key, value)` pairs in its first slots, every other
    /// slot free, all bound to `v`.
    fn leaf(g: &Geometry, v: u64, entries: &[(u64, &[u8])]) -> [u8; 1024] {
        let mut p = [0u8; 1024];
        let h = PageHeader {
            front_version: v,
            meta: PageHeader::pack_meta(0, true, 0),
            low_fence: 10,
            high_fence: KEY_INFINITY,
            ..Default::default()
        };
        h.encode(&mut p);
        for s in 0..g.leaf_capacity() {
            let at = g.leaf_entry_offset(s);
            let out = &mut p[at..at + g.leaf_entry_size()];
            match entries.get(s) {
                Some(&(k, val)) => encode_leaf_entry(out, k, val, 1, true, v),
                None => encode_leaf_entry(out, 0, &[], 0, false, v),
            }
        }
        seal(&mut p, g);
        p
    }

    fn internal(g: &Geometry, v: u64, keys: &[u64]) -> [u8; 1024] {
        let mut p = [0u8; 1024];
        let h = PageHeader {
            front_version: v,
            meta: PageHeader::pack_meta(1, false, keys.len()),
            low_fence: 0,
            high_fence: KEY_INFINITY,
            leftmost: 0x1000,
            ..Default::default()
        };
        h.encode(&mut p);
        for (i, k) in keys.iter().enumerate() {
            set_internal_entry(&mut p, g, i, *k, 0x2000 + *k * 64);
        }
        seal(&mut p, g);
        p
    }

    /// The image a READ sees when segment `i` (64 bytes) came from `b` iff bit `i` of `mask`.
    fn mix(a: &[u8; 1024], b: &[u8; 1024], mask: u16) -> [u8; 1024] {
        let mut m = *a;
        for i in 0..16 {
            if mask >> i & 1 == 1 {
                m[i * 64..i * 64 + 64].copy_from_slice(&b[i * 64..i * 64 + 64]);
            }
        }
        m
    }

    /// What a reader decides from a leaf image: the header and every slot, or an error.
    fn read_leaf(p: &[u8], g: &Geometry) -> Result<(PageHeader, [Slot; 39]), LayoutError> {
        let h = PageHeader::decode(p, g)?;
        let mut slots = [Slot::Free { version: 0 }; 39];
        for (s, out) in slots.iter_mut().enumerate() {
            *out = leaf_slot(p, g, s, h.front_version)?;
        }
        Ok((h, slots))
    }

    #[test]
    fn geometry_of_the_paper() {
        let g = Geometry::new(1024, 8).unwrap();
        assert_eq!(g.leaf_entry_size(), 24);
        assert_eq!(g.leaf_capacity(), 39);
        assert_eq!(g.internal_capacity(), 59);
        assert!(Geometry::new(1000, 8).is_err());
        assert!(Geometry::new(256, 256).is_err());
    }

    #[test]
    fn torn_page_and_entries_are_detected() {
        let g = Geometry::new(1024, 8).unwrap();
        let mut p = leaf(&g, 3, &[]);
        assert!(PageHeader::decode(&p, &g).unwrap().covers(10));
        encode_leaf_entry(
            &mut p[g.leaf_entry_offset(2)..g.leaf_entry_offset(3)],
            42,
            &[7, 0, 0],
            1,
            true,
            3,
        );
        assert_eq!(
            leaf_slot(&p, &g, 2, 3),
            Ok(Slot::Live {
                key: 42,
                version: 1,
                len: 3
            })
        );
        assert_eq!(leaf_value(&p, &g, 2, 3), &[7, 0, 0]);
        assert_eq!(leaf_slot(&p, &g, 3, 3), Ok(Slot::Free { version: 0 }));
        // the same entry read against another page version: not this image's
        assert!(leaf_slot(&p, &g, 2, 4).is_err());
        // a value word from another write: checksum mismatch
        let at = g.leaf_entry_offset(2) + 16;
        p[at..at + 8].copy_from_slice(&8u64.to_le_bytes());
        assert!(matches!(
            leaf_slot(&p, &g, 2, 3),
            Err(LayoutError::BadChecksum { .. })
        ));
        // a slot never written (all zero) is not a free slot
        let at = g.leaf_entry_offset(4);
        p[at..at + 24].fill(0);
        assert!(leaf_slot(&p, &g, 4, 3).is_err());
        // a rear version from a newer whole-page write: torn page
        let r = g.rear_offset();
        p[r..r + 8].copy_from_slice(&4u64.to_le_bytes());
        assert!(PageHeader::decode(&p, &g).is_err());
    }

    /// The old check is fooled by a READ that saw the rear and front segments before a
    /// rear-first writer reached them and a body segment after: the checksum is not.
    #[test]
    fn front_rear_alone_is_fooled_by_segment_order_the_checksum_is_not() {
        let g = Geometry::new(1024, 8).unwrap();
        let old = internal(&g, 5, &[100, 200, 300]);
        let new = internal(&g, 6, &[100, 150, 200, 300]);
        let torn = mix(&old, &new, 0b10); // segment 1 (entries) new, header and rear old
        assert_ne!(torn, old);
        assert!(PageHeader::decode_front_rear(&torn, &g).is_ok());
        assert!(matches!(
            PageHeader::decode(&torn, &g),
            Err(LayoutError::BadChecksum { .. })
        ));
        assert_eq!(PageHeader::decode(&old, &g).unwrap().count(), 3);
        assert_eq!(PageHeader::decode(&new, &g).unwrap().count(), 4);
    }

    #[test]
    fn value_lengths_round_trip() {
        let g = Geometry::new(512, 32).unwrap();
        let mut e = [0xAAu8; 48];
        for len in [0usize, 1, 3, 8, 31, 32] {
            let v: Vec<u8> = (0..len as u8).collect();
            encode_leaf_entry(&mut e, 9, &v, 5, true, 77);
            let mut p = [0u8; 512];
            p[64..112].copy_from_slice(&e);
            assert_eq!(
                leaf_slot(&p, &g, 0, 77),
                Ok(Slot::Live {
                    key: 9,
                    version: 5,
                    len
                })
            );
            assert_eq!(leaf_value(&p, &g, 0, len), &v[..]);
        }
    }

    proptest! {
        #[test]
        fn any_single_word_change_is_caught(slot in 0usize..39, word in 0usize..3, bits in 1u64..) {
            let g = Geometry::new(1024, 8).unwrap();
            let mut p = leaf(&g, 1, &[]);
            let at0 = g.leaf_entry_offset(slot);
            encode_leaf_entry(&mut p[at0..at0 + 24], 5, &9u64.to_le_bytes(), 2, true, 1);
            let at = at0 + word * 8;
            let w = read_u64(&p, at).unwrap() ^ bits;
            p[at..at + 8].copy_from_slice(&w.to_le_bytes());
            let r = leaf_slot(&p, &g, slot, 1);
            prop_assert!(r.is_err(), "{r:?}");
        }

        /// Any mix of two internal images, by 64-byte segment in any order, is one of them or
        /// rejected.
        #[test]
        fn torn_internal_pages_are_rejected(
            ka in proptest::collection::btree_set(1u64..1000, 0..59),
            kb in proptest::collection::btree_set(1u64..1000, 0..59),
            mask in any::<u16>(),
        ) {
            let g = Geometry::new(1024, 8).unwrap();
            let ka: Vec<u64> = ka.into_iter().collect();
            let kb: Vec<u64> = kb.into_iter().collect();
            let a = internal(&g, 7, &ka);
            let b = internal(&g, 8, &kb);
            let m = mix(&a, &b, mask);
            if PageHeader::decode(&m, &g).is_ok() {
                prop_assert!(m == a || m == b);
            }
        }

        /// A leaf split rewrites the page whole: any segment mix of the old and new image is
        /// either rejected or, header and every slot, exactly one of them.
        #[test]
        fn torn_leaves_are_rejected(
            ka in proptest::collection::btree_set(10u64..1000, 0..39),
            kb in proptest::collection::btree_set(10u64..1000, 0..39),
            mask in any::<u16>(),
        ) {
            let g = Geometry::new(1024, 8).unwrap();
            let val = 3u64.to_le_bytes();
            let ea: Vec<(u64, &[u8])> = ka.iter().map(|&k| (k, &val[..])).collect();
            let eb: Vec<(u64, &[u8])> = kb.iter().rev().map(|&k| (k, &val[..])).collect();
            let a = leaf(&g, 7, &ea);
            let b = leaf(&g, 8, &eb);
            let m = mix(&a, &b, mask);
            let (ra, rb) = (read_leaf(&a, &g).unwrap(), read_leaf(&b, &g).unwrap());
            if let Ok(r) = read_leaf(&m, &g) {
                prop_assert!(r == ra || r == rb, "a torn leaf was accepted");
            }
        }

        /// The four-lane verifier decides exactly what slot-by-slot verification decides, on
        /// whole, torn and random images.
        #[test]
        fn verify_leaf_agrees_with_leaf_slot(
            ka in proptest::collection::btree_set(10u64..1000, 0..39),
            mask in any::<u16>(),
            noise in proptest::collection::vec(any::<u8>(), 1024),
            which in 0u8..3,
        ) {
            let g = Geometry::new(1024, 8).unwrap();
            let val = 5u64.to_le_bytes();
            let ea: Vec<(u64, &[u8])> = ka.iter().map(|&k| (k, &val[..])).collect();
            let a = leaf(&g, 7, &ea);
            let b = leaf(&g, 8, &[]);
            let p = match which {
                0 => a,
                1 => mix(&a, &b, mask),
                _ => noise.try_into().unwrap(),
            };
            let mut seen = Vec::new();
            let r = verify_leaf(&p, &g, 7, |s, slot| seen.push((s, slot)));
            let each: Result<Vec<_>, _> =
                (0..39).map(|s| leaf_slot(&p, &g, s, 7).map(|x| (s, x))).collect();
            match (r, each) {
                (Ok(()), Ok(all)) => prop_assert_eq!(seen, all),
                (Err(e1), Err(e2)) => prop_assert_eq!(e1, e2),
                (r, e) => prop_assert!(false, "verify_leaf {:?}, leaf_slot {:?}", r, e),
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let g = Geometry::new(1024, 8).unwrap();
            let _ = PageHeader::decode(&bytes, &g);
            if bytes.len() >= 1024 {
                for s in 0..g.leaf_capacity() {
                    let _ = leaf_slot(&bytes, &g, s, 1);
                }
            }
        }
    }
}

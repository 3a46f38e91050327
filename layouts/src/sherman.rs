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
//!   only if the header verifies and every slot it decides by verifies against the header's
//!   version: a slot left over from an older image (or torn, or from a newer image than the
//!   header) fails, so the reader re-reads instead of missing a key that a split moved. A
//!   "not found" and a writer decide by every slot; a lookup that finds its key decides by
//!   the header and that slot (core/src/sherman/read.rs). A slot rewritten alone
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
//! [`page_hash`] over the page; leaf, the header hash plus one entry hash per slot it decides
//! by (every slot for a "not found", which is a decision too, and for a writer; the matching
//! slot for a lookup that finds its key). No extra bytes on the wire or in
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
    /// Bytes of a page (a multiple of 64 in 256..=65536).
    pub page_size: usize,
    /// Bytes of a leaf entry's value area (a multiple of 8 in 8..=256).
    pub value_size: usize,
}

impl Geometry {
    /// `page_size`: a multiple of 64 (the page hash runs over whole 64-byte lines) in
    /// 256..=65536, so a page can match another build's node size (the SMART paper's Sherman
    /// leaf is 623 B: `bins/src/repro/smart.rs`); `value_size`: a multiple of 8 in 8..=256;
    /// a leaf must hold at least 4 entries.
    pub fn new(page_size: usize, value_size: usize) -> Result<Geometry, LayoutError> {
        if !page_size.is_multiple_of(64) || !(256..=65536).contains(&page_size) {
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

mod leaf;
mod page;
pub use leaf::*;
pub use page::*;

#[cfg(test)]
mod tests;

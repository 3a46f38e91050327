//! Sherman's B-link tree pages.
//!
//! Every page (internal or leaf, `page_size` bytes, 1 KiB by default) is:
//!
//! | offset | bytes | what |
//! |---|---|---|
//! | 0 | 64 | [`PageHeader`]: front version, level/leaf/count word, sibling, fences, leftmost child |
//! | 64 | n × entry | entries: internal `[key u64][child u64]`, sorted, `count` of them; leaf `[meta u64][key u64][value]`, unsorted, any slot free or used |
//! | page_size − 8 | 8 | rear version |
//!
//! Keys are u64 in `[0, u64::MAX)`; a page holds keys in `[low_fence, high_fence)` and
//! `high_fence == u64::MAX` means +∞.
//!
//! **Two-level versions, made safe under tearing.** A page rewritten whole (split, or FG+'s
//! write-back) is written rear version first, then the body, then the front version, as three
//! WRITEs in one doorbell (per-queue-pair order). A reader's single READ moves words in
//! ascending order, so any READ that saw part of a new body saw the new rear version but the
//! old front one: `front == rear` proves the page image is whole. (Versions written in one
//! WRITE cannot prove it, which is the flaw Sherman's README admits.)
//! A leaf entry rewritten alone carries its own 16-bit version and a 47-bit CRC-64 of
//! (version, valid, key, value) in its meta word: a torn entry fails its checksum and is
//! re-read, so a reader never returns a value no writer wrote. A meta word of 0 is a slot
//! never used.
use crate::LayoutError;
use crate::bits::{Field, assert_disjoint, read_u64};
use memoffset::offset_of;

pub const HEADER_LEN: usize = 64;
pub const REAR_LEN: usize = 8;
/// Keys must be below this; it is the +∞ fence.
pub const KEY_INFINITY: u64 = u64::MAX;
/// Bytes of an internal entry.
pub const INTERNAL_ENTRY: usize = 16;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageHeader {
    pub front_version: u64,
    /// Packed: level, leaf flag, entry count ([`LEVEL`], [`LEAF`], [`COUNT`]).
    pub meta: u64,
    /// Right sibling (raw `GlobalAddr`), 0 for the rightmost page of a level.
    pub sibling: u64,
    pub low_fence: u64,
    pub high_fence: u64,
    /// Internal pages: child for keys below the first entry's key.
    pub leftmost: u64,
    pub reserved: [u64; 2],
}
const _: () = assert!(core::mem::size_of::<PageHeader>() == HEADER_LEN);
const _: () = assert!(offset_of!(PageHeader, front_version) == 0);
const _: () = assert!(offset_of!(PageHeader, meta) == 8);
const _: () = assert!(offset_of!(PageHeader, sibling) == 16);
const _: () = assert!(offset_of!(PageHeader, low_fence) == 24);
const _: () = assert!(offset_of!(PageHeader, high_fence) == 32);
const _: () = assert!(offset_of!(PageHeader, leftmost) == 40);

pub const LEVEL: Field = Field::new("level", 0, 8);
pub const LEAF: Field = Field::new("leaf", 8, 1);
pub const COUNT: Field = Field::new("count", 16, 16);
const _: () = assert_disjoint(&[LEVEL, LEAF, COUNT]);

/// Leaf entry meta word: valid bit, 16-bit entry version, 47-bit checksum.
pub const VALID: Field = Field::new("valid", 0, 1);
pub const ENTRY_VERSION: Field = Field::new("entry_version", 1, 16);
pub const CHECKSUM: Field = Field::new("checksum", 17, 47);
const _: () = assert_disjoint(&[VALID, ENTRY_VERSION, CHECKSUM]);

const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_ECMA_182);

/// Page and entry sizes of one tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub page_size: usize,
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
    pub const fn leaf_entry_size(&self) -> usize {
        16 + self.value_size
    }
    pub const fn leaf_capacity(&self) -> usize {
        (self.page_size - HEADER_LEN - REAR_LEN) / self.leaf_entry_size()
    }
    pub const fn internal_capacity(&self) -> usize {
        (self.page_size - HEADER_LEN - REAR_LEN) / INTERNAL_ENTRY
    }
    pub const fn leaf_entry_offset(&self, slot: usize) -> usize {
        HEADER_LEN + slot * self.leaf_entry_size()
    }
    pub const fn internal_entry_offset(&self, i: usize) -> usize {
        HEADER_LEN + i * INTERNAL_ENTRY
    }
    pub const fn rear_offset(&self) -> usize {
        self.page_size - REAR_LEN
    }
}

impl PageHeader {
    pub fn level(&self) -> u8 {
        LEVEL.get(self.meta) as u8
    }
    pub fn is_leaf(&self) -> bool {
        LEAF.get(self.meta) == 1
    }
    pub fn count(&self) -> usize {
        COUNT.get(self.meta) as usize
    }
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

    pub fn encode(&self, page: &mut [u8]) {
        let words = [
            self.front_version,
            self.meta,
            self.sibling,
            self.low_fence,
            self.high_fence,
            self.leftmost,
            self.reserved[0],
            self.reserved[1],
        ];
        for (i, w) in words.iter().enumerate() {
            page[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
    }

    /// Decodes a page image and checks it: whole (front == rear version), and with fields
    /// that make sense for `g`. Torn images and garbage are errors, never panics.
    pub fn decode(page: &[u8], g: &Geometry) -> Result<PageHeader, LayoutError> {
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
            reserved: [w(6)?, w(7)?],
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

/// Writes the rear version of a page image.
pub fn set_rear(page: &mut [u8], g: &Geometry, version: u64) {
    let at = g.rear_offset();
    page[at..at + 8].copy_from_slice(&version.to_le_bytes());
}

/// One internal entry `i` of a decoded page: (separator key, child).
pub fn internal_entry(page: &[u8], g: &Geometry, i: usize) -> Result<(u64, u64), LayoutError> {
    let at = g.internal_entry_offset(i);
    Ok((read_u64(page, at)?, read_u64(page, at + 8)?))
}

pub fn set_internal_entry(page: &mut [u8], g: &Geometry, i: usize, key: u64, child: u64) {
    let at = g.internal_entry_offset(i);
    page[at..at + 8].copy_from_slice(&key.to_le_bytes());
    page[at + 8..at + 16].copy_from_slice(&child.to_le_bytes());
}

/// What a leaf slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Never used.
    Empty,
    /// Deleted (reusable), with its last version.
    Free { version: u16 },
    /// A live entry.
    Live { key: u64, version: u16 },
}

fn checksum(version: u16, valid: bool, key: u64, value: &[u8]) -> u64 {
    let mut d = CRC64.digest();
    d.update(&version.to_le_bytes());
    d.update(&[valid as u8]);
    d.update(&key.to_le_bytes());
    d.update(value);
    CHECKSUM.set(0, d.finalize()) >> CHECKSUM.lo
}

/// Encodes a leaf entry into `out` (`g.leaf_entry_size()` bytes).
pub fn encode_leaf_entry(out: &mut [u8], key: u64, value: &[u8], version: u16, valid: bool) {
    let sum = checksum(version, valid, key, value);
    let meta = CHECKSUM.set(
        ENTRY_VERSION.set(VALID.set(0, valid as u64), version as u64),
        sum,
    );
    out[0..8].copy_from_slice(&meta.to_le_bytes());
    out[8..16].copy_from_slice(&key.to_le_bytes());
    out[16..16 + value.len()].copy_from_slice(value);
}

/// Decodes the leaf entry in `slot` of a page image; a torn or corrupt entry is an error.
pub fn leaf_slot(page: &[u8], g: &Geometry, slot: usize) -> Result<Slot, LayoutError> {
    let at = g.leaf_entry_offset(slot);
    let bytes = page
        .get(at..at + g.leaf_entry_size())
        .ok_or(LayoutError::Short {
            need: at + g.leaf_entry_size(),
            got: page.len(),
        })?;
    let meta = read_u64(bytes, 0)?;
    if meta == 0 {
        return Ok(Slot::Empty);
    }
    let key = read_u64(bytes, 8)?;
    let valid = VALID.get(meta) == 1;
    let version = ENTRY_VERSION.get(meta) as u16;
    let computed = checksum(version, valid, key, &bytes[16..]);
    if computed != CHECKSUM.get(meta) {
        return Err(LayoutError::BadChecksum {
            stored: CHECKSUM.get(meta),
            computed,
        });
    }
    Ok(if valid {
        Slot::Live { key, version }
    } else {
        Slot::Free { version }
    })
}

/// The value bytes of leaf `slot` (only meaningful after [`leaf_slot`] said Live).
pub fn leaf_value<'p>(page: &'p [u8], g: &Geometry, slot: usize) -> &'p [u8] {
    let at = g.leaf_entry_offset(slot) + 16;
    &page[at..at + g.value_size]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn leaf(g: &Geometry, v: u64) -> [u8; 1024] {
        let mut p = [0u8; 1024];
        let h = PageHeader {
            front_version: v,
            meta: PageHeader::pack_meta(0, true, 0),
            low_fence: 10,
            high_fence: KEY_INFINITY,
            ..Default::default()
        };
        h.encode(&mut p);
        set_rear(&mut p, g, v);
        p
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
        let mut p = leaf(&g, 3);
        assert!(PageHeader::decode(&p, &g).unwrap().covers(10));
        encode_leaf_entry(
            &mut p[g.leaf_entry_offset(2)..],
            42,
            &7u64.to_le_bytes(),
            1,
            true,
        );
        assert_eq!(
            leaf_slot(&p, &g, 2),
            Ok(Slot::Live {
                key: 42,
                version: 1
            })
        );
        assert_eq!(leaf_value(&p, &g, 2), &7u64.to_le_bytes());
        assert_eq!(leaf_slot(&p, &g, 3), Ok(Slot::Empty));
        // a value word from another write: checksum mismatch
        let at = g.leaf_entry_offset(2) + 16;
        p[at..at + 8].copy_from_slice(&8u64.to_le_bytes());
        assert!(matches!(
            leaf_slot(&p, &g, 2),
            Err(LayoutError::BadChecksum { .. })
        ));
        // a rear version from a newer whole-page write: torn page
        set_rear(&mut p, &g, 4);
        assert!(PageHeader::decode(&p, &g).is_err());
    }

    proptest! {
        #[test]
        fn any_single_word_change_is_caught(slot in 0usize..39, word in 0usize..3, bits in 1u64..) {
            let g = Geometry::new(1024, 8).unwrap();
            let mut p = leaf(&g, 1);
            encode_leaf_entry(&mut p[g.leaf_entry_offset(slot)..], 5, &9u64.to_le_bytes(), 2, true);
            let at = g.leaf_entry_offset(slot) + word * 8;
            let w = read_u64(&p, at).unwrap() ^ bits;
            p[at..at + 8].copy_from_slice(&w.to_le_bytes());
            let r = leaf_slot(&p, &g, slot);
            prop_assert!(r.is_err() || r == Ok(Slot::Empty), "{r:?}");
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let g = Geometry::new(1024, 8).unwrap();
            let _ = PageHeader::decode(&bytes, &g);
            if bytes.len() >= 1024 {
                for s in 0..g.leaf_capacity() {
                    let _ = leaf_slot(&bytes, &g, s);
                }
            }
        }
    }
}

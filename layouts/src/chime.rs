//! CHIME's leaf: a hopscotch hash table of 64 slots in 8 groups, each group led by a replica
//! of the leaf's metadata (CHIME, SOSP'24, §4; the authors' `include/LeafNode.h`,
//! `include/Common.h`: `leafSpanSize = 64`, `neighborSize = 8`, one `ScatteredMetadata` in
//! front of each group of `neighborSize` entries). Internal pages are Sherman's
//! ([`crate::sherman`]).
//!
//! | offset | bytes | what |
//! |---|---|---|
//! | 0 | 32 | [`LeafPrefix`]: vacancy bitmap, the groups' stamps (read and written by lock holders only) |
//! | 32 + g × 224 | 32 | [`GroupHeader`] of group g: its stamp and its neighbours', sibling, fences |
//! | 64 + g × 224 + i × 24 | 24 | [`Entry`] of slot 8g + i: meta word (live, length, hop bitmap, checksum), key, value |
//!
//! A key's home slot is [`home`]`(key)`; it lives in one of the 8 slots from its home on
//! (cyclically: the neighbourhood), and the home entry's hop bitmap says which. A lookup READs
//! the one or two groups that hold the neighbourhood, metadata included.
//!
//! **Proving a READ saw one image, in any segment order** (the fabric promises only aligned
//! 8-byte words; CHIME's per-cache-line versions assume ordered segments). Every write that
//! moves, adds or removes an entry rewrites whole groups; a value update rewrites one entry.
//!
//! - Within a group: every entry's checksum covers the entry *and a hash of its group's
//!   header* (`header_hash`). A group is accepted only if all 8 entries verify against the
//!   header read, so a header torn between two writes, or an entry left from another group
//!   image, fails. A value update keeps the header: the one entry is its own atomic unit.
//! - Across the two groups of a neighbourhood: each group write bumps that group's 16-bit
//!   stamp, and records the current stamps of its two neighbouring groups. A reader of groups
//!   g, g+1 requires `g.next ≤ stamp(g+1)` and `(g+1).prev ≤ stamp(g)` (serial order,
//!   [`stamp_le`]). If g was read at write a and g+1 at a later write b, a write to g between
//!   them would have been recorded by b as `(g+1).prev > stamp(g)`; symmetrically the other
//!   way: so a pair that passes is the two groups' state at one moment. (16-bit stamps: a
//!   READ must not span 32768 writes of one group.)
//!
//! The prefix's stamps are what writers record; only a lock holder reads or writes it.
use crate::LayoutError;
use memoffset::offset_of;

/// Slots of a leaf (the authors' `leafSpanSize`).
pub const SLOTS: usize = 64;
/// Slots of a neighbourhood and of a group (the authors' `neighborSize`).
pub const NEIGHBOURHOOD: usize = 8;
/// Groups of a leaf.
pub const GROUPS: usize = SLOTS / NEIGHBOURHOOD;
/// Bytes of a leaf entry.
pub const ENTRY_LEN: usize = 24;
/// Bytes of a group header.
pub const GROUP_HEADER_LEN: usize = 32;
/// Bytes of a group: header and 8 entries.
pub const GROUP_LEN: usize = GROUP_HEADER_LEN + NEIGHBOURHOOD * ENTRY_LEN;
/// Bytes of the leaf prefix.
pub const PREFIX_LEN: usize = 32;
/// Bytes of a leaf.
pub const LEAF_LEN: usize = PREFIX_LEN + GROUPS * GROUP_LEN;
/// Largest value a leaf entry holds (8-byte values, as CHIME's evaluation).
pub const MAX_VALUE: usize = 8;
/// Keys must be below this; it is the +∞ fence (as Sherman's).
pub const KEY_INFINITY: u64 = u64::MAX;

/// The leaf prefix: what a lock holder learns of the leaf before reading any entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeafPrefix {
    /// Bit i set: slot i is free (CHIME's vacancy bitmap).
    pub vacancy: u64,
    /// Stamp of each group, 16 bits each, group g at bits 16(g % 4) of word g / 4.
    pub stamps: [u64; 2],
    /// Reserved (0).
    pub reserved: u64,
}
const _: () = assert!(core::mem::size_of::<LeafPrefix>() == PREFIX_LEN);
const _: () = assert!(offset_of!(LeafPrefix, vacancy) == 0);
const _: () = assert!(offset_of!(LeafPrefix, stamps) == 8);
const _: () = assert!(offset_of!(LeafPrefix, reserved) == 24);

/// A group header: the replicated leaf metadata of CHIME, with the stamps that tie a group
/// to its neighbours (module docs).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupHeader {
    /// Bits 15..0 this group's stamp, 31..16 the previous group's, 47..32 the next group's
    /// (as of this group's last write); bits 63..48 reserved (0).
    pub stamps: u64,
    /// The leaf's right sibling (a raw `GlobalAddr`, 0: none).
    pub sibling: u64,
    /// The leaf's low fence (keys ≥ it).
    pub low: u64,
    /// The leaf's high fence (keys < it; [`KEY_INFINITY`]: +∞).
    pub high: u64,
}
const _: () = assert!(core::mem::size_of::<GroupHeader>() == GROUP_HEADER_LEN);
const _: () = assert!(offset_of!(GroupHeader, stamps) == 0);
const _: () = assert!(offset_of!(GroupHeader, sibling) == 8);
const _: () = assert!(offset_of!(GroupHeader, low) == 16);
const _: () = assert!(offset_of!(GroupHeader, high) == 24);

/// A leaf entry as stored: meta word, key, value (zero-padded).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawEntry {
    /// Bit 0 live, bits 4..1 value length, bits 12..5 hop bitmap (bit i: the slot i after
    /// this one holds a key whose home is this slot), bits 63..13 checksum (never 0).
    pub meta: u64,
    /// The key.
    pub key: u64,
    /// The value bytes.
    pub value: [u8; MAX_VALUE],
}
const _: () = assert!(core::mem::size_of::<RawEntry>() == ENTRY_LEN);
const _: () = assert!(offset_of!(RawEntry, key) == 8);
const _: () = assert!(offset_of!(RawEntry, value) == 16);
const _: () = assert!(GROUP_LEN == 224 && LEAF_LEN == 1824);

const CHECKSUM_LO: u32 = 13;

/// A decoded leaf entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entry {
    /// The slot holds a key.
    pub live: bool,
    /// Bytes of the value.
    pub len: u8,
    /// Hop bitmap of the slot as a home (bit i: slot home + i holds one of its keys).
    pub hop: u8,
    /// The key (0 when free).
    pub key: u64,
    /// The value, zero-padded.
    pub value: [u8; MAX_VALUE],
}

#[inline(always)]
const fn step(h: u64, w: u64) -> u64 {
    // A murmur3-style finalizer over the running state xor the word: a bijection per word.
    let mut x = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 32;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93);
    x ^ (x >> 32)
}

fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn put(b: &mut [u8], at: usize, w: u64) {
    b[at..at + 8].copy_from_slice(&w.to_le_bytes());
}

/// The home slot of `key` (a multiplicative hash's top 6 bits).
pub fn home(key: u64) -> usize {
    (step(0x5851_f42d_4c95_7f2d, key) >> 58) as usize
}

/// Byte offset of group `g` in a leaf.
pub const fn group_offset(g: usize) -> usize {
    PREFIX_LEN + g * GROUP_LEN
}

/// Byte offset of slot `s`'s entry in a leaf.
pub const fn slot_offset(s: usize) -> usize {
    group_offset(s / NEIGHBOURHOOD) + GROUP_HEADER_LEN + (s % NEIGHBOURHOOD) * ENTRY_LEN
}

/// `a ≤ b` in 16-bit serial order (b is at most 32767 steps ahead of a).
pub fn stamp_le(a: u16, b: u16) -> bool {
    (b.wrapping_sub(a) as i16) >= 0
}

impl GroupHeader {
    /// This group's stamp.
    pub fn own(&self) -> u16 {
        self.stamps as u16
    }
    /// The previous group's stamp as of this group's last write.
    pub fn prev(&self) -> u16 {
        (self.stamps >> 16) as u16
    }
    /// The next group's stamp as of this group's last write.
    pub fn next(&self) -> u16 {
        (self.stamps >> 32) as u16
    }
    /// Packs the three stamps.
    pub fn pack(own: u16, prev: u16, next: u16) -> u64 {
        own as u64 | (prev as u64) << 16 | (next as u64) << 32
    }
    /// The header at the front of `group` (a group image, at least [`GROUP_HEADER_LEN`]).
    pub fn decode(group: &[u8]) -> Result<GroupHeader, LayoutError> {
        if group.len() < GROUP_HEADER_LEN {
            return Err(LayoutError::Short {
                need: GROUP_HEADER_LEN,
                got: group.len(),
            });
        }
        Ok(GroupHeader {
            stamps: word(group, 0),
            sibling: word(group, 8),
            low: word(group, 16),
            high: word(group, 24),
        })
    }
    /// Writes the header into the front of `group`.
    pub fn encode(&self, group: &mut [u8]) {
        put(group, 0, self.stamps);
        put(group, 8, self.sibling);
        put(group, 16, self.low);
        put(group, 24, self.high);
    }
    /// The hash every entry of this group is bound to.
    pub fn hash(&self) -> u64 {
        [self.stamps, self.sibling, self.low, self.high]
            .iter()
            .fold(0x6a09_e667_f3bc_c908, |h, &w| step(h, w))
    }
    /// The leaf holds keys in `[low, high)`.
    pub fn covers(&self, key: u64) -> bool {
        key >= self.low && key < self.high
    }
}

fn entry_checksum(meta: u64, key: u64, value: u64, bind: u64) -> u64 {
    let mask = (1u64 << CHECKSUM_LO) - 1;
    let h = [meta & mask, key, value]
        .iter()
        .fold(step(0x3c6e_f372_fe94_f82b, bind), |h, &w| step(h, w));
    (h >> CHECKSUM_LO).max(1)
}

impl Entry {
    /// A free slot with hop bitmap `hop`.
    pub fn free(hop: u8) -> Entry {
        Entry {
            hop,
            ..Entry::default()
        }
    }

    /// Encodes the entry into `out` (at least [`ENTRY_LEN`] bytes), bound to header hash `bind`.
    pub fn encode(&self, out: &mut [u8], bind: u64) {
        let low = self.live as u64 | ((self.len as u64) & 0xf) << 1 | (self.hop as u64) << 5;
        let value = u64::from_le_bytes(self.value);
        let sum = entry_checksum(low, self.key, value, bind);
        put(out, 0, low | sum << CHECKSUM_LO);
        put(out, 8, self.key);
        out[16..24].copy_from_slice(&self.value);
    }

    /// Decodes and verifies an entry against header hash `bind`: a torn entry, one bound to
    /// another header, a slot never written (meta 0), or a bad length is an error.
    pub fn decode(bytes: &[u8], bind: u64) -> Result<Entry, LayoutError> {
        if bytes.len() < ENTRY_LEN {
            return Err(LayoutError::Short {
                need: ENTRY_LEN,
                got: bytes.len(),
            });
        }
        let meta = word(bytes, 0);
        let key = word(bytes, 8);
        let value = word(bytes, 16);
        let stored = meta >> CHECKSUM_LO;
        let computed = entry_checksum(meta, key, value, bind);
        if meta == 0 || stored != computed {
            return Err(LayoutError::BadChecksum { stored, computed });
        }
        let len = ((meta >> 1) & 0xf) as u8;
        if len as usize > MAX_VALUE {
            return Err(LayoutError::OutOfRange {
                field: "value_len",
                value: len as u64,
            });
        }
        Ok(Entry {
            live: meta & 1 == 1,
            len,
            hop: (meta >> 5) as u8,
            key,
            value: value.to_le_bytes(),
        })
    }
}

impl LeafPrefix {
    /// Decodes the prefix from the front of a leaf image.
    pub fn decode(leaf: &[u8]) -> Result<LeafPrefix, LayoutError> {
        if leaf.len() < PREFIX_LEN {
            return Err(LayoutError::Short {
                need: PREFIX_LEN,
                got: leaf.len(),
            });
        }
        Ok(LeafPrefix {
            vacancy: word(leaf, 0),
            stamps: [word(leaf, 8), word(leaf, 16)],
            reserved: word(leaf, 24),
        })
    }
    /// Writes the prefix into the front of `leaf`.
    pub fn encode(&self, leaf: &mut [u8]) {
        put(leaf, 0, self.vacancy);
        put(leaf, 8, self.stamps[0]);
        put(leaf, 16, self.stamps[1]);
        put(leaf, 24, self.reserved);
    }
    /// Group `g`'s stamp.
    pub fn stamp(&self, g: usize) -> u16 {
        (self.stamps[g / 4] >> (16 * (g % 4))) as u16
    }
    /// Sets group `g`'s stamp.
    pub fn set_stamp(&mut self, g: usize, s: u16) {
        let sh = 16 * (g % 4);
        self.stamps[g / 4] = (self.stamps[g / 4] & !(0xffff << sh)) | (s as u64) << sh;
    }
}

/// The error of a group pair whose stamps say the two were read at different moments.
pub const TORN_PAIR: LayoutError = LayoutError::Inconsistent {
    what: "neighbouring groups from different moments",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_bind_to_their_header() {
        let h = GroupHeader {
            stamps: GroupHeader::pack(3, 2, 7),
            sibling: 0x40,
            low: 10,
            high: 99,
        };
        let e = Entry {
            live: true,
            len: 5,
            hop: 0b1010_0001,
            key: 42,
            value: *b"hello\0\0\0",
        };
        let mut b = [0u8; ENTRY_LEN];
        e.encode(&mut b, h.hash());
        assert_eq!(Entry::decode(&b, h.hash()), Ok(e));
        let other = GroupHeader {
            stamps: GroupHeader::pack(4, 2, 7),
            ..h
        };
        assert!(Entry::decode(&b, other.hash()).is_err());
        // A torn entry: the value word from another write.
        let mut torn = b;
        torn[16] ^= 1;
        assert!(Entry::decode(&torn, h.hash()).is_err());
        assert!(Entry::decode(&[0u8; ENTRY_LEN], h.hash()).is_err());
    }

    #[test]
    fn offsets_stamps_and_serial_order() {
        assert_eq!(slot_offset(0), PREFIX_LEN + GROUP_HEADER_LEN);
        assert_eq!(slot_offset(63) + ENTRY_LEN, LEAF_LEN);
        let mut p = LeafPrefix::default();
        for g in 0..GROUPS {
            p.set_stamp(g, (g as u16) * 1000 + 1);
        }
        for g in 0..GROUPS {
            assert_eq!(p.stamp(g), (g as u16) * 1000 + 1);
        }
        assert!(stamp_le(65535, 1) && !stamp_le(1, 65535) && stamp_le(5, 5));
        let homes: u64 = (0..10_000u64).fold(0, |m, k| m | 1 << home(k));
        assert_eq!(homes, u64::MAX, "every slot is some key's home");
    }
}

//! CHIME's leaf: a hopscotch hash table of 64 slots in 8 groups, each group led by a replica
//! of the leaf's metadata (CHIME, SOSP'24, §4; the authors' `include/LeafNode.h`,
//! `include/Common.h`: `leafSpanSize = 64`, `neighborSize = 8`, one `ScatteredMetadata` in
//! front of each group of `neighborSize` entries). Internal pages are Sherman's
//! ([`crate::sherman`]).
//!
//! | offset | bytes | what |
//! |---|---|---|
//! | 0 | 32 | [`LeafPrefix`]: vacancy bitmap, the groups' stamps (read and written by lock holders only), the leaf's low key (written once) |
//! | 32 + g × 160 | 32 | [`RawGroupHeader`] of group g: stamps, sibling, its slots' hop bitmaps and states, the group checksum |
//! | 64 + g × 160 + i × 16 | 16 | [`RawEntry`] of slot 8g + i: key, value |
//!
//! 1312 bytes a leaf (the authors' is 1316: 64 entries of 19 bytes and 8 metadata replicas of
//! 10, plus a version byte per cache line). An entry is only its key and value, as the
//! authors'; what else a slot has (live, value length, hop bitmap) lives in its group's
//! header, one word of hop bitmaps and one of states for the group's 8 slots.
//!
//! **No fence keys in the replicas** (CHIME's sibling-based validation, §4.3; the authors'
//! `ScatteredMetadata`: version, valid, sibling). A leaf's range is `[low, sibling's low)`:
//! its low key never changes (leaves are never merged or freed; a split keeps the lowest keys
//! in the old leaf), and every image of a leaf names as its sibling the leaf whose low key is
//! its high end (a split points the old leaf at the first new one, the last new one at the
//! old sibling). So the low key is stored once, in the prefix (one word, written when the
//! leaf is made, rewritten only with the same value), and a reader validates the leaf it
//! reached against the route it came by (`remora_core::chime`, `read.rs`).
//!
//! A key's home slot is [`home`]`(key)`; it lives in one of the 8 slots from its home on
//! (cyclically: the neighbourhood), and the home slot's hop bitmap says which. A lookup READs
//! the one or two groups that hold the neighbourhood, metadata included.
//!
//! **Proving a READ saw one image, in any segment order** (the fabric promises only aligned
//! 8-byte words; CHIME's per-cache-line versions assume ordered segments). Every write that
//! moves, adds or removes an entry rewrites whole groups under new stamps; a value update
//! rewrites its group's header (new checksum, same stamps) and its one entry.
//!
//! - Within a group: one 48-bit checksum (`sum`, bits 63..48 of the stamps word and 63..32
//!   of the states word) covers every other bit of the group's 20 words, header and entries.
//!   A group is accepted only if it verifies, so a group whose words come from two writes
//!   (the header from one, an entry from another, or the checksum's two halves from two)
//!   fails; a group never written (all zero) fails too (a checksum is never 0).
//! - Across the two groups of a neighbourhood: each group write bumps that group's 16-bit
//!   stamp, and records the current stamps of its two neighbouring groups. A reader of groups
//!   g, g+1 requires `g.next ≤ stamp(g+1)` and `(g+1).prev ≤ stamp(g)` (serial order,
//!   [`stamp_le`]). If g was read at write a and g+1 at a later write b, a write to g between
//!   them would have been recorded by b as `(g+1).prev > stamp(g)`; symmetrically the other
//!   way: so a pair that passes is the two groups' state at one moment. (16-bit stamps: a
//!   READ must not span 32768 writes of one group.)
//!
//! The prefix's stamps are what writers record; only a lock holder reads or writes it. A tree
//! whose writers keep no prefix (`remora_core::chime::ChimeConfig::prefix_free`) takes each
//! group's stamp from its own header instead, and its prefix (stamps, vacancy) is stale
//! between the splits that write it whole; its low key stays right (written once).
use crate::LayoutError;
use memoffset::offset_of;

/// Slots of a leaf (the authors' `leafSpanSize`).
pub const SLOTS: usize = 64;
/// Slots of a neighbourhood and of a group (the authors' `neighborSize`).
pub const NEIGHBOURHOOD: usize = 8;
/// Groups of a leaf.
pub const GROUPS: usize = SLOTS / NEIGHBOURHOOD;
/// Bytes of a leaf entry.
pub const ENTRY_LEN: usize = 16;
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
    /// The leaf's low key (keys ≥ it; fixed when the leaf is made).
    pub low: u64,
}
const _: () = assert!(core::mem::size_of::<LeafPrefix>() == PREFIX_LEN);
const _: () = assert!(offset_of!(LeafPrefix, vacancy) == 0);
const _: () = assert!(offset_of!(LeafPrefix, stamps) == 8);
const _: () = assert!(offset_of!(LeafPrefix, low) == LOW_OFFSET);

/// Byte offset in a leaf of its low key (a reader READs this one word of a sibling).
pub const LOW_OFFSET: usize = 24;

/// A group header as stored: the replicated leaf metadata of CHIME, the stamps that tie a
/// group to its neighbours, what its 8 slots hold besides key and value, and its checksum
/// (module docs).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawGroupHeader {
    /// Bits 15..0 this group's stamp, 31..16 the previous group's, 47..32 the next group's
    /// (as of this group's last write); bits 63..48 the checksum's low 16 bits.
    pub stamps: u64,
    /// The leaf's right sibling (a raw `GlobalAddr`, 0: none): its low key is this leaf's
    /// high end.
    pub sibling: u64,
    /// Byte i: the hop bitmap of slot 8g + i (bit j: the slot j after it holds a key whose
    /// home it is).
    pub hops: u64,
    /// Bits 4i+3..4i: slot 8g + i's state (0 free, 1 + value length: live); bits 63..32 the
    /// checksum's high 32 bits.
    pub states: u64,
}
const _: () = assert!(core::mem::size_of::<RawGroupHeader>() == GROUP_HEADER_LEN);
const _: () = assert!(offset_of!(RawGroupHeader, stamps) == 0);
const _: () = assert!(offset_of!(RawGroupHeader, sibling) == 8);
const _: () = assert!(offset_of!(RawGroupHeader, hops) == 16);
const _: () = assert!(offset_of!(RawGroupHeader, states) == STATES_AT);

/// A leaf entry as stored: key, value (zero-padded).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawEntry {
    /// The key.
    pub key: u64,
    /// The value bytes.
    pub value: [u8; MAX_VALUE],
}
const _: () = assert!(core::mem::size_of::<RawEntry>() == ENTRY_LEN);
const _: () = assert!(offset_of!(RawEntry, key) == 0);
const _: () = assert!(offset_of!(RawEntry, value) == 8);
const _: () = assert!(GROUP_LEN == 160 && LEAF_LEN == 1312);
const _: () = assert!(GROUP_LEN.is_multiple_of(8) && GROUP_HEADER_LEN.is_multiple_of(8));

/// Words of a group.
const GROUP_WORDS: usize = GROUP_LEN / 8;
/// Byte offset of the states word in a group header.
const STATES_AT: usize = 24;
/// The bits of the stamps word that are stamps (the rest is the checksum's low part).
const STAMPS_MASK: u64 = (1 << 48) - 1;
/// The bits of the states word that are states (the rest is the checksum's high part).
const STATES_MASK: u64 = (1 << 32) - 1;
/// Largest slot state (live, with a value of [`MAX_VALUE`] bytes).
const STATE_MAX: u64 = 1 + MAX_VALUE as u64;

/// The group's replicated leaf metadata, decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupHeader {
    /// Bits 15..0 this group's stamp, 31..16 the previous group's, 47..32 the next group's.
    pub stamps: u64,
    /// The leaf's right sibling (a raw `GlobalAddr`, 0: none), whose low key is this leaf's
    /// high end.
    pub sibling: u64,
}

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

/// The 48-bit checksum of a group image's words, its own bits taken as 0 (never 0).
fn group_sum(group: &[u8]) -> u64 {
    let mut h = 0x6a09_e667_f3bc_c908;
    for i in 0..GROUP_WORDS {
        let w = word(group, i * 8);
        h = step(
            h,
            match i {
                0 => w & STAMPS_MASK,
                i if i == STATES_AT / 8 => w & STATES_MASK,
                _ => w,
            },
        );
    }
    (h >> 16).max(1)
}

/// The checksum a group image carries.
fn stored_sum(group: &[u8]) -> u64 {
    word(group, 0) >> 48 | (word(group, STATES_AT) >> 32) << 16
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
    /// The metadata at the front of `group` (a group image, at least [`GROUP_HEADER_LEN`]),
    /// not verified: [`decode_group`] verifies.
    pub fn decode(group: &[u8]) -> Result<GroupHeader, LayoutError> {
        if group.len() < GROUP_HEADER_LEN {
            return Err(LayoutError::Short {
                need: GROUP_HEADER_LEN,
                got: group.len(),
            });
        }
        Ok(GroupHeader {
            stamps: word(group, 0) & STAMPS_MASK,
            sibling: word(group, 8),
        })
    }
}

/// Encodes a group image into `out` (at least [`GROUP_LEN`] bytes): header `h` (its stamps'
/// high 16 bits ignored) and the 8 `entries`, with their checksum.
pub fn encode_group(h: &GroupHeader, entries: &[Entry; NEIGHBOURHOOD], out: &mut [u8]) {
    let (mut hops, mut states) = (0u64, 0u64);
    for (i, e) in entries.iter().enumerate() {
        hops |= (e.hop as u64) << (8 * i);
        let state = if e.live {
            1 + (e.len as u64).min(MAX_VALUE as u64)
        } else {
            0
        };
        states |= state << (4 * i);
    }
    put(out, 0, h.stamps & STAMPS_MASK);
    put(out, 8, h.sibling);
    put(out, 16, hops);
    put(out, STATES_AT, states);
    for (i, e) in entries.iter().enumerate() {
        let at = GROUP_HEADER_LEN + i * ENTRY_LEN;
        put(out, at, e.key);
        out[at + 8..at + 16].copy_from_slice(&e.value);
    }
    let sum = group_sum(&out[..GROUP_LEN]);
    put(out, 0, h.stamps & STAMPS_MASK | (sum & 0xffff) << 48);
    put(out, STATES_AT, states | (sum >> 16) << 32);
}

/// Re-seals a group image in place: its checksum recomputed over its words as they stand,
/// as [`encode_group`] stores it (which stores the same checksum for the words it writes).
/// For tests that feed crafted groups to [`decode_group`] behind a valid checksum.
pub fn seal_group(group: &mut [u8]) -> Result<(), LayoutError> {
    if group.len() < GROUP_LEN {
        return Err(LayoutError::Short {
            need: GROUP_LEN,
            got: group.len(),
        });
    }
    let sum = group_sum(&group[..GROUP_LEN]);
    let (stamps, states) = (word(group, 0), word(group, STATES_AT));
    put(group, 0, stamps & STAMPS_MASK | (sum & 0xffff) << 48);
    put(group, STATES_AT, states & STATES_MASK | (sum >> 16) << 32);
    Ok(())
}

/// Verifies a group image (at least [`GROUP_LEN`] bytes) and decodes its 8 entries into
/// `entries`; returns its header. A group whose words are not all of one write (its checksum
/// fails), a group never written, or a bad slot state is an error (and `entries` is left
/// unchanged).
pub fn decode_group(
    group: &[u8],
    entries: &mut [Entry; NEIGHBOURHOOD],
) -> Result<GroupHeader, LayoutError> {
    if group.len() < GROUP_LEN {
        return Err(LayoutError::Short {
            need: GROUP_LEN,
            got: group.len(),
        });
    }
    let (stored, computed) = (stored_sum(group), group_sum(group));
    if stored != computed {
        return Err(LayoutError::BadChecksum { stored, computed });
    }
    let (hops, states) = (word(group, 16), word(group, STATES_AT) & STATES_MASK);
    if let Some(i) = (0..NEIGHBOURHOOD).find(|i| (states >> (4 * i)) & 0xf > STATE_MAX) {
        return Err(LayoutError::OutOfRange {
            field: "slot state",
            value: (states >> (4 * i)) & 0xf,
        });
    }
    for (i, e) in entries.iter_mut().enumerate() {
        let state = (states >> (4 * i)) & 0xf;
        let at = GROUP_HEADER_LEN + i * ENTRY_LEN;
        *e = Entry {
            live: state != 0,
            len: state.saturating_sub(1) as u8,
            hop: (hops >> (8 * i)) as u8,
            key: word(group, at),
            value: word(group, at + 8).to_le_bytes(),
        };
    }
    GroupHeader::decode(group)
}

impl Entry {
    /// A free slot with hop bitmap `hop`.
    pub fn free(hop: u8) -> Entry {
        Entry {
            hop,
            ..Entry::default()
        }
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
            low: word(leaf, LOW_OFFSET),
        })
    }
    /// Writes the prefix into the front of `leaf`.
    pub fn encode(&self, leaf: &mut [u8]) {
        put(leaf, 0, self.vacancy);
        put(leaf, 8, self.stamps[0]);
        put(leaf, 16, self.stamps[1]);
        put(leaf, LOW_OFFSET, self.low);
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

    fn header(own: u16) -> GroupHeader {
        GroupHeader {
            stamps: GroupHeader::pack(own, 2, 7),
            sibling: 0x40,
        }
    }

    fn entries(seed: u8) -> [Entry; NEIGHBOURHOOD] {
        let mut es = [Entry::free(0); NEIGHBOURHOOD];
        for (i, e) in es.iter_mut().enumerate().filter(|(i, _)| i % 3 != 1) {
            *e = Entry {
                live: true,
                len: (i % 9) as u8,
                hop: 0b1010_0001 ^ seed,
                key: 40 + i as u64,
                value: [seed.wrapping_add(i as u8); MAX_VALUE],
            };
        }
        es[1].hop = 0b11;
        es
    }

    #[test]
    fn groups_round_trip_and_a_group_never_written_fails() {
        let (h, es) = (header(3), entries(5));
        let mut b = [0u8; GROUP_LEN];
        encode_group(&h, &es, &mut b);
        let mut got = [Entry::default(); NEIGHBOURHOOD];
        assert_eq!(decode_group(&b, &mut got), Ok(h));
        assert_eq!(got, es);
        assert!(decode_group(&[0u8; GROUP_LEN], &mut got).is_err());
        assert!(decode_group(&b[..GROUP_LEN - 8], &mut got).is_err());
    }

    /// A READ of a group whose segments come from two writes (any subset of its words from
    /// one, the rest from the other) is refused, whichever write each word came from: a value
    /// update (same stamps, one entry and the checksum differ) and a rewrite (new stamps,
    /// entries moved).
    #[test]
    fn a_group_torn_between_two_writes_is_refused() {
        let mut older = [0u8; GROUP_LEN];
        encode_group(&header(3), &entries(5), &mut older);
        let mut update = entries(5);
        update[4].value = *b"newvalue";
        let mut updated = [0u8; GROUP_LEN];
        encode_group(&header(3), &update, &mut updated);
        let mut moved = entries(9);
        moved.swap(0, 6);
        let mut rewritten = [0u8; GROUP_LEN];
        encode_group(&header(4), &moved, &mut rewritten);
        let mut got = [Entry::default(); NEIGHBOURHOOD];
        for new in [&updated, &rewritten] {
            let differ: u32 = (0..GROUP_WORDS)
                .filter(|&i| older[i * 8..i * 8 + 8] != new[i * 8..i * 8 + 8])
                .fold(0, |m, i| m | 1 << i);
            assert!(differ.count_ones() >= 2, "{differ:b}");
            // Mixes of the differing words: every one when they are few, else each word
            // alone, each all-but-one, and 2^16 pseudo-random subsets.
            let mut bits = [0usize; GROUP_WORDS];
            let mut k = 0;
            for i in (0..GROUP_WORDS).filter(|i| differ & (1 << i) != 0) {
                bits[k] = i;
                k += 1;
            }
            let bits = &bits[..k];
            let full = (1u32 << k) - 1;
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let sampled = (0..k).flat_map(|j| [1u32 << j, full ^ 1 << j]).chain(
                core::iter::repeat_with(move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u32 & full
                })
                .take(1 << 16),
            );
            let all = (k <= 16).then_some(1..full).into_iter().flatten();
            for m in all.chain(sampled.filter(|_| k > 16)) {
                if m == 0 || m == full {
                    continue;
                }
                let mut torn = older;
                for (j, &i) in bits.iter().enumerate() {
                    if m & (1 << j) != 0 {
                        torn[i * 8..i * 8 + 8].copy_from_slice(&new[i * 8..i * 8 + 8]);
                    }
                }
                assert!(
                    decode_group(&torn, &mut got).is_err(),
                    "a torn group passed: words {m:b} of {bits:?} from the newer write"
                );
            }
        }
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
        // The low key is the word a reader READs alone at LOW_OFFSET.
        p.low = 0x0123_4567_89ab_cdef;
        let mut leaf = [0u8; LEAF_LEN];
        p.encode(&mut leaf);
        assert_eq!(word(&leaf, LOW_OFFSET), p.low);
        assert_eq!(LeafPrefix::decode(&leaf), Ok(p));
        assert!(stamp_le(65535, 1) && !stamp_le(1, 65535) && stamp_le(5, 5));
        let homes: u64 = (0..10_000u64).fold(0, |m, k| m | 1 << home(k));
        assert_eq!(homes, u64::MAX, "every slot is some key's home");
    }
}

//! The hotspot cache of speculative leaf reads (CHIME §4.4; the authors' `IdxCache`, given
//! `kHotspotBufSize` = 30 of the `kIndexCacheSize` = 100 MB in `include/Common.h`): for a
//! key read before, the leaf and slot it was found in, so the next lookup READs that slot's
//! group (one 160-byte READ: the group's checksum covers its header and all 8 entries, so a
//! single entry cannot be verified alone) instead of the neighbourhood (one or two groups).
//!
//! One per compute node, shared by its threads without locks: a direct-mapped array of
//! (key tag and slot, leaf) word pairs, 16 bytes an entry as the authors'. A torn pair is
//! harmless: a speculative read is verified by content (the slot of a verified group must
//! hold the key: a leaf holds only keys it covers), and a miss falls back to the
//! neighbourhood read.
use core::sync::atomic::{AtomicUsize, Ordering};
use remora_layouts::GlobalAddr;
use std_alloc::vec::Vec;

#[cfg(target_has_atomic = "64")]
use core::sync::atomic::AtomicU64 as Word;

/// A 64-bit word on targets without 64-bit atomics (32-bit microcontrollers): two 32-bit
/// halves. A reader may see halves of two different stores; that is a torn entry, which the
/// cache already tolerates (every hit is verified by the entry's content).
#[cfg(not(target_has_atomic = "64"))]
struct Word {
    lo: core::sync::atomic::AtomicU32,
    hi: core::sync::atomic::AtomicU32,
}

#[cfg(not(target_has_atomic = "64"))]
impl Word {
    fn new(v: u64) -> Word {
        Word {
            lo: core::sync::atomic::AtomicU32::new(v as u32),
            hi: core::sync::atomic::AtomicU32::new((v >> 32) as u32),
        }
    }
    fn load(&self, o: Ordering) -> u64 {
        let hi = self.hi.load(o) as u64;
        (hi << 32) | self.lo.load(o) as u64
    }
    fn store(&self, v: u64, o: Ordering) {
        self.lo.store(v as u32, o);
        self.hi.store((v >> 32) as u32, o);
    }
    fn swap(&self, v: u64, o: Ordering) -> u64 {
        let hi = self.hi.swap((v >> 32) as u32, o) as u64;
        (hi << 32) | self.lo.swap(v as u32, o) as u64
    }
    /// Not atomic across the halves: a racing store may leave a torn (harmless) entry.
    fn compare_exchange(&self, cur: u64, new: u64, ok: Ordering, _: Ordering) -> Result<u64, u64> {
        let seen = self.load(Ordering::Acquire);
        if seen != cur {
            return Err(seen);
        }
        self.store(new, ok);
        Ok(seen)
    }
}

/// Bytes one hotspot entry takes: the leaf's address and one word of key tag and slot, 16 as
/// the authors' `IdxCacheEntry` (`include/IdxCache.h`: leaf address 8, slot 2, fingerprint
/// 2, frequency 4).
pub const HOTSPOT_ENTRY_BYTES: usize = 16;

/// Bits of a tag word that hold the slot (`SLOTS` = 64).
const SLOT_BITS: u32 = 6;

pub(crate) struct Hotspot {
    /// Per entry: `spread(key) >> SLOT_BITS` in the high bits, the slot in the low ones; 0 is
    /// an empty entry. With the entry's index (the low bits of `spread(key)`, at least
    /// `SLOT_BITS` of them once the cache has 64 entries) it names the key exactly, where the
    /// authors keep a 16-bit fingerprint; a smaller cache may confuse two keys, which the
    /// speculative read's check of the entry's content catches.
    tags: Vec<Word>,
    leaves: Vec<Word>,
    filled: AtomicUsize,
}

fn spread(key: u64) -> u64 {
    key.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
}

/// The tag word of `key` found in `slot` (0 for the one key in 2^58 whose tag and slot are
/// all zero: never cached).
fn tag(key: u64, slot: usize) -> u64 {
    (spread(key) >> SLOT_BITS << SLOT_BITS) | (slot as u64 & ((1 << SLOT_BITS) - 1))
}

const TAG_MASK: u64 = !((1 << SLOT_BITS) - 1);

impl Hotspot {
    /// A cache of at most `bytes` (rounded down to a power of two entries; none below one).
    pub(crate) fn new(bytes: usize) -> Hotspot {
        let n = bytes / HOTSPOT_ENTRY_BYTES;
        let n = if n == 0 {
            0
        } else {
            1usize << (usize::BITS - 1 - n.leading_zeros())
        };
        let mk = || (0..n).map(|_| Word::new(0)).collect::<Vec<_>>();
        Hotspot {
            tags: mk(),
            leaves: mk(),
            filled: AtomicUsize::new(0),
        }
    }

    fn at(&self, key: u64) -> Option<usize> {
        let n = self.tags.len();
        (n > 0).then(|| (spread(key) as usize) & (n - 1))
    }

    /// The slot `key` was last found in, if in leaf `leaf`.
    pub(crate) fn get(&self, key: u64, leaf: GlobalAddr) -> Option<usize> {
        let i = self.at(key)?;
        let w = self.tags[i].load(Ordering::Acquire);
        if w == 0
            || w & TAG_MASK != tag(key, 0)
            || self.leaves[i].load(Ordering::Relaxed) != leaf.raw()
        {
            return None;
        }
        Some((w & !TAG_MASK) as usize % remora_layouts::chime::SLOTS)
    }

    /// Notes that `key` was found in `slot` of `leaf`.
    pub(crate) fn put(&self, key: u64, leaf: GlobalAddr, slot: usize) {
        let Some(i) = self.at(key) else { return };
        let w = tag(key, slot);
        if w == 0 {
            return;
        }
        if self.tags[i].swap(0, Ordering::AcqRel) == 0 {
            self.filled.fetch_add(1, Ordering::Relaxed);
        }
        self.leaves[i].store(leaf.raw(), Ordering::Relaxed);
        self.tags[i].store(w, Ordering::Release);
    }

    /// Forgets `key`.
    pub(crate) fn drop_key(&self, key: u64) {
        let Some(i) = self.at(key) else { return };
        let w = self.tags[i].load(Ordering::Acquire);
        if w != 0
            && w & TAG_MASK == tag(key, 0)
            && self.tags[i]
                .compare_exchange(w, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.filled.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Bytes of the entries in use.
    pub(crate) fn bytes(&self) -> usize {
        self.filled.load(Ordering::Relaxed) * HOTSPOT_ENTRY_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_sixteen_bytes_and_name_their_key() {
        // 64 entries in 1 KiB: 16 bytes each, as the authors' IdxCacheEntry.
        let h = Hotspot::new(1024);
        assert_eq!(h.tags.len(), 64);
        let leaf = GlobalAddr::from_raw(0x1000);
        h.put(7, leaf, 5);
        assert_eq!(h.get(7, leaf), Some(5));
        assert_eq!(h.bytes(), 16);
        // Another key of the same entry is not taken for the one cached there.
        let other = (0..u64::MAX)
            .find(|&k| k != 7 && h.at(k) == h.at(7))
            .unwrap_or(7);
        assert_ne!(other, 7);
        assert_eq!(h.get(other, leaf), None);
        h.drop_key(other);
        assert_eq!(h.get(7, leaf), Some(5));
        assert_eq!(h.get(7, GlobalAddr::from_raw(0x2000)), None);
        h.drop_key(7);
        assert_eq!((h.get(7, leaf), h.bytes()), (None, 0));
    }
}

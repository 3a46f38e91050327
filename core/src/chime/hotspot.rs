//! The hotspot cache of speculative leaf reads (CHIME §4.4; the authors' `IdxCache`, given
//! `kHotspotBufSize` = 30 of the `kIndexCacheSize` = 100 MB in `include/Common.h`): for a
//! key read before, the leaf and slot it was found in, so the next lookup READs that one
//! entry (with its group header) instead of the neighbourhood.
//!
//! One per compute node, shared by its threads without locks: a direct-mapped array of
//! (key, leaf, slot) words. A torn triple is harmless: a speculative read is verified by
//! content (the entry must hold the key, bound to a header whose fences cover it), and a
//! miss falls back to the neighbourhood read.
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

/// Bytes one hotspot entry takes (key, leaf address, slot).
pub const HOTSPOT_ENTRY_BYTES: usize = 24;

pub(crate) struct Hotspot {
    keys: Vec<Word>,
    leaves: Vec<Word>,
    slots: Vec<AtomicUsize>,
    filled: AtomicUsize,
}

fn spread(key: u64) -> u64 {
    key.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
}

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
            keys: mk(),
            leaves: mk(),
            slots: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            filled: AtomicUsize::new(0),
        }
    }

    fn at(&self, key: u64) -> Option<usize> {
        let n = self.keys.len();
        (n > 0).then(|| (spread(key) as usize) & (n - 1))
    }

    /// The slot `key` was last found in, if in leaf `leaf`. Keys are stored plus one (0 is an
    /// empty entry).
    pub(crate) fn get(&self, key: u64, leaf: GlobalAddr) -> Option<usize> {
        let i = self.at(key)?;
        if self.keys[i].load(Ordering::Acquire) != key.wrapping_add(1)
            || self.leaves[i].load(Ordering::Relaxed) != leaf.raw()
        {
            return None;
        }
        Some(self.slots[i].load(Ordering::Relaxed) % remora_layouts::chime::SLOTS)
    }

    /// Notes that `key` was found in `slot` of `leaf`.
    pub(crate) fn put(&self, key: u64, leaf: GlobalAddr, slot: usize) {
        let Some(i) = self.at(key) else { return };
        if self.keys[i].swap(0, Ordering::AcqRel) == 0 {
            self.filled.fetch_add(1, Ordering::Relaxed);
        }
        self.leaves[i].store(leaf.raw(), Ordering::Relaxed);
        self.slots[i].store(slot, Ordering::Relaxed);
        self.keys[i].store(key.wrapping_add(1), Ordering::Release);
    }

    /// Forgets `key`.
    pub(crate) fn drop_key(&self, key: u64) {
        if let Some(i) = self.at(key)
            && self.keys[i]
                .compare_exchange(key.wrapping_add(1), 0, Ordering::AcqRel, Ordering::Relaxed)
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

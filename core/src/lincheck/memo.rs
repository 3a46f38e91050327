//! A set of 128-bit fingerprints (open addressing, linear probing), and the hash mixer.
use std_alloc::vec;
use std_alloc::vec::Vec;

/// splitmix64's finalizer: a bijective 64-bit mixer.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub(crate) struct FpSet {
    slots: Vec<u128>,
    len: usize,
}

impl FpSet {
    pub(crate) fn new() -> FpSet {
        FpSet {
            slots: vec![0; 1024],
            len: 0,
        }
    }

    pub(crate) fn clear(&mut self) {
        if self.slots.len() > 1 << 16 {
            self.slots = vec![0; 1024];
        } else {
            self.slots.iter_mut().for_each(|s| *s = 0);
        }
        self.len = 0;
    }

    /// Inserts `fp`; false if it was already there.
    pub(crate) fn insert(&mut self, fp: u128) -> bool {
        let fp = if fp == 0 { 1 } else { fp };
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = (fp as u64 as usize) & mask;
        loop {
            let s = self.slots[i];
            if s == fp {
                return false;
            }
            if s == 0 {
                self.slots[i] = fp;
                self.len += 1;
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let old = core::mem::replace(&mut self.slots, vec![0; n]);
        let mask = self.slots.len() - 1;
        for fp in old.into_iter().filter(|&s| s != 0) {
            let mut i = (fp as u64 as usize) & mask;
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = fp;
        }
    }
}

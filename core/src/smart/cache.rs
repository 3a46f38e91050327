//! The compute-side radix cache: copies of internal nodes by address, bounded in bytes.
//!
//! A lookup walks cached nodes from the root down to the slot of its key and reads the leaf
//! directly (one READ). Entries can be stale; the reverse pointer of whatever is read next
//! (leaf or node) must name the cached node it was reached from, otherwise the entry is
//! dropped (the reverse check). Correctness never rests on the cache: a leaf is accepted
//! only with the right key, and absence is only decided on a freshly read node.
use super::remote::{Find, NodeImg};
use remora_layouts::GlobalAddr;
use remora_layouts::smart::{Header, NodeType, Slot};
use std_alloc::boxed::Box;
use std_alloc::vec::Vec;

/// One cached internal node.
pub(crate) struct CachedNode {
    pub addr: GlobalAddr,
    pub header: Header,
    pub slots: Box<[Slot]>,
}

impl CachedNode {
    pub fn find(&self, b: u8) -> Find {
        find_in(self.header, &self.slots, b)
    }
    fn cost(cap: usize) -> usize {
        ENTRY_OVERHEAD + 8 * cap
    }
}

/// [`NodeImg::find`] over a cached copy.
pub(crate) fn find_in(header: Header, slots: &[Slot], b: u8) -> Find {
    let img_ty = header.node_type();
    if img_ty == NodeType::N256 {
        let s = slots[b as usize];
        return if s.is_empty() {
            Find::Absent {
                free: Some(b as usize),
                frozen: s.is_frozen(),
            }
        } else {
            Find::Match {
                idx: b as usize,
                slot: s,
            }
        };
    }
    let mut frozen = false;
    for (idx, s) in slots.iter().enumerate() {
        frozen |= s.is_frozen();
        if s.is_empty() {
            return Find::Absent {
                free: Some(idx),
                frozen,
            };
        }
        if s.pkey() == b {
            return Find::Match { idx, slot: *s };
        }
    }
    Find::Absent { free: None, frozen }
}

/// Bytes charged per entry besides its slots (struct, index slot, allocator overhead).
const ENTRY_OVERHEAD: usize = 64;
const EMPTY: u32 = u32::MAX;

pub(crate) struct RadixCache {
    index: Vec<u32>,
    slab: Vec<CachedNode>,
    bytes: usize,
    budget: usize,
    rng: u64,
    pinned: GlobalAddr,
}

fn hash(addr: GlobalAddr) -> usize {
    (addr.raw().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize
}

impl RadixCache {
    /// A cache of at most `budget` bytes (0: disabled).
    pub fn new(budget: usize) -> RadixCache {
        let slots = if budget == 0 {
            0
        } else {
            (2 * budget / CachedNode::cost(4))
                .clamp(64, 1 << 24)
                .next_power_of_two()
        };
        RadixCache {
            index: std_alloc::vec![EMPTY; slots],
            slab: Vec::new(),
            bytes: 0,
            budget,
            rng: 0x2545_F491_4F6C_DD1D,
            pinned: GlobalAddr::NULL,
        }
    }

    pub fn enabled(&self) -> bool {
        !self.index.is_empty()
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn len(&self) -> usize {
        self.slab.len()
    }
    /// Never evict this node (the root).
    pub fn pin(&mut self, addr: GlobalAddr) {
        self.pinned = addr;
    }

    /// (position in the index, slab index if present)
    fn probe(&self, addr: GlobalAddr) -> (usize, Option<usize>) {
        let mask = self.index.len() - 1;
        let mut p = hash(addr) & mask;
        loop {
            match self.index[p] {
                EMPTY => return (p, None),
                i if self.slab[i as usize].addr == addr => return (p, Some(i as usize)),
                _ => p = (p + 1) & mask,
            }
        }
    }

    pub fn get(&self, addr: GlobalAddr) -> Option<&CachedNode> {
        if !self.enabled() {
            return None;
        }
        self.probe(addr).1.map(|i| &self.slab[i])
    }

    /// Caches (or refreshes) a freshly read node.
    pub fn put(&mut self, img: &NodeImg) {
        if !self.enabled() || img.header.is_obsolete() {
            return;
        }
        let slots = img.live_slots();
        match self.probe(img.addr) {
            (_, Some(i)) => {
                let e = &mut self.slab[i];
                if e.slots.len() == slots.len() {
                    e.slots.copy_from_slice(slots);
                } else {
                    self.bytes = self.bytes - CachedNode::cost(e.slots.len())
                        + CachedNode::cost(slots.len());
                    e.slots = slots.into();
                }
                e.header = img.header;
            }
            (_, None) => {
                let cost = CachedNode::cost(slots.len());
                if cost > self.budget {
                    return;
                }
                while self.bytes + cost > self.budget || self.slab.len() + 1 > self.index.len() / 2
                {
                    if !self.evict_one() {
                        return;
                    }
                }
                let (p, _) = self.probe(img.addr);
                self.index[p] = self.slab.len() as u32;
                self.slab.push(CachedNode {
                    addr: img.addr,
                    header: img.header,
                    slots: slots.into(),
                });
                self.bytes += cost;
            }
        }
    }

    /// Updates one cached slot after this client changed it remotely.
    pub fn set_slot(&mut self, addr: GlobalAddr, idx: usize, slot: Slot) {
        if !self.enabled() {
            return;
        }
        if let (_, Some(i)) = self.probe(addr)
            && let Some(s) = self.slab[i].slots.get_mut(idx)
        {
            *s = slot;
        }
    }

    /// Drops an entry; true if there was one.
    pub fn remove(&mut self, addr: GlobalAddr) -> bool {
        if !self.enabled() {
            return false;
        }
        let (mut hole, Some(i)) = self.probe(addr) else {
            return false;
        };
        // Backward-shift deletion keeps every probe chain unbroken.
        let mask = self.index.len() - 1;
        let mut p = (hole + 1) & mask;
        while self.index[p] != EMPTY {
            let home = hash(self.slab[self.index[p] as usize].addr) & mask;
            // Move p into the hole if its home is not in (hole, p].
            let dist_home = p.wrapping_sub(home) & mask;
            let dist_hole = p.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                self.index[hole] = self.index[p];
                hole = p;
            }
            p = (p + 1) & mask;
        }
        self.index[hole] = EMPTY;
        self.bytes -= CachedNode::cost(self.slab[i].slots.len());
        let last = self.slab.len() - 1;
        self.slab.swap_remove(i);
        if i != last {
            // The entry that moved from slab[last] to slab[i] must be re-pointed.
            let moved = self.slab[i].addr;
            let mask = self.index.len() - 1;
            let mut p = hash(moved) & mask;
            while self.index[p] != EMPTY {
                if self.index[p] as usize == last {
                    self.index[p] = i as u32;
                    break;
                }
                p = (p + 1) & mask;
            }
        }
        true
    }

    fn evict_one(&mut self) -> bool {
        let n = self.slab.len();
        for _ in 0..4 {
            if n == 0 {
                return false;
            }
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let victim = self.slab[(self.rng % n as u64) as usize].addr;
            if victim != self.pinned {
                return self.remove(victim);
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(off: u64, ty: NodeType) -> NodeImg {
        NodeImg {
            addr: GlobalAddr::new(0, off),
            rev: 0,
            header: Header::new(1, ty, &[]).unwrap(),
            slots: [Slot::EMPTY; 256],
        }
    }

    #[test]
    fn put_get_remove_and_evict() {
        let mut c = RadixCache::new(8 << 10);
        for i in 1..200u64 {
            c.put(&img(i * 64, NodeType::N4));
            assert!(c.bytes() <= 8 << 10);
        }
        let present: Vec<u64> = (1..200u64)
            .filter(|i| c.get(GlobalAddr::new(0, i * 64)).is_some())
            .collect();
        assert_eq!(present.len(), c.len());
        for i in &present {
            assert!(c.remove(GlobalAddr::new(0, i * 64)));
            assert!(c.get(GlobalAddr::new(0, i * 64)).is_none());
            // Every other remaining entry is still found after the backward shift.
            for j in &present {
                if j > i {
                    assert!(
                        c.get(GlobalAddr::new(0, j * 64)).is_some(),
                        "lost {j} after removing {i}"
                    );
                }
            }
        }
        assert_eq!(c.len(), 0);
        assert_eq!(c.bytes(), 0);
        let mut off = RadixCache::new(0);
        off.put(&img(64, NodeType::N4));
        assert!(off.get(GlobalAddr::new(0, 64)).is_none());
    }
}

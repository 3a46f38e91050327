//! Recycled storage for the hot path: a slab of slots and a pool of byte buffers.
//!
//! After warm-up no verb allocates: op and batch slots are reused from free lists, and
//! payload buffers come back to per-size-class free lists.

/// A vector of slots with a free list; ids stay valid until freed.
pub struct Slab<T> {
    slots: Vec<T>,
    free: Vec<u32>,
}

impl<T: Default> Slab<T> {
    pub fn new() -> Slab<T> {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
    /// A slot id; the slot holds whatever its last user left (callers reset what they use).
    pub fn alloc(&mut self) -> u32 {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(T::default());
                (self.slots.len() - 1) as u32
            }
        }
    }
    pub fn free(&mut self, id: u32) {
        self.free.push(id);
    }
    pub fn get(&self, id: u32) -> &T {
        &self.slots[id as usize]
    }
    pub fn get_mut(&mut self, id: u32) -> &mut T {
        &mut self.slots[id as usize]
    }
    /// Slots in use.
    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

impl<T: Default> Default for Slab<T> {
    fn default() -> Self {
        Slab::new()
    }
}

const CLASSES: usize = 40;

/// Byte buffers by power-of-two capacity class.
#[derive(Default)]
pub struct BufPool {
    classes: Vec<Vec<Vec<u8>>>,
}

fn class(len: usize) -> usize {
    (len.max(8).next_power_of_two().trailing_zeros() as usize).min(CLASSES - 1)
}

impl BufPool {
    pub fn new() -> BufPool {
        BufPool {
            classes: (0..CLASSES).map(|_| Vec::new()).collect(),
        }
    }
    /// A buffer of exactly `len` bytes (contents unspecified: callers overwrite it).
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        let c = class(len);
        let mut b = self.classes[c]
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(1 << c));
        b.resize(len, 0);
        b
    }
    /// Returns a buffer for reuse.
    pub fn give(&mut self, mut b: Vec<u8>) {
        if b.capacity() == 0 {
            return;
        }
        let c = (usize::BITS - 1 - b.capacity().leading_zeros()) as usize;
        b.clear();
        if c < CLASSES && self.classes[c].len() < 4096 {
            self.classes[c].push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_reuses_and_pool_recycles() {
        let mut s: Slab<u64> = Slab::new();
        let a = s.alloc();
        *s.get_mut(a) = 5;
        s.free(a);
        assert_eq!(s.alloc(), a);
        assert_eq!(s.live(), 1);
        let mut p = BufPool::new();
        let b = p.take(100);
        assert_eq!(b.len(), 100);
        let cap = b.capacity();
        p.give(b);
        let b2 = p.take(120);
        assert_eq!((b2.len(), b2.capacity()), (120, cap));
    }
}

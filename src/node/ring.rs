//! A bounded multi-producer multi-consumer queue of slot numbers (Vyukov's array queue),
//! allocated once: the free lists, submission queues and ready lists of the pollers.
//!
//! Each cell holds a sequence number and a value, both atomics, so the queue needs no
//! `unsafe`. A cell whose sequence equals the enqueue position is free for that position; a
//! producer that claims the position (CAS on `tail`) stores the value, then publishes it by
//! setting the sequence to position + 1 (Release); a consumer at that position sees it
//! (Acquire), takes the value and frees the cell for position + capacity.
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

struct Cell {
    seq: AtomicUsize,
    val: AtomicU32,
}

/// A bounded queue of `u32`, capacity a power of two.
pub(crate) struct Ring {
    cells: Box<[Cell]>,
    mask: usize,
    head: crossbeam_utils::CachePadded<AtomicUsize>,
    tail: crossbeam_utils::CachePadded<AtomicUsize>,
}

impl Ring {
    /// A queue with room for at least `capacity` values.
    pub(crate) fn new(capacity: usize) -> Ring {
        let cap = capacity.max(2).next_power_of_two();
        Ring {
            cells: (0..cap)
                .map(|i| Cell {
                    seq: AtomicUsize::new(i),
                    val: AtomicU32::new(0),
                })
                .collect(),
            mask: cap - 1,
            head: Default::default(),
            tail: Default::default(),
        }
    }

    /// Appends `v`; false when full.
    pub(crate) fn push(&self, v: u32) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos as isize;
            if diff == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        cell.val.store(v, Ordering::Relaxed);
                        cell.seq.store(pos + 1, Ordering::Release);
                        return true;
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return false;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest value, if any.
    pub(crate) fn pop(&self) -> Option<u32> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - (pos + 1) as isize;
            if diff == 0 {
                match self.head.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let v = cell.val.load(Ordering::Relaxed);
                        cell.seq.store(pos + self.mask + 1, Ordering::Release);
                        return Some(v);
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Whether the queue looked empty (a snapshot: other threads may change it at once).
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) >= self.tail.load(Ordering::Acquire)
    }

    /// Values in the queue (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let t = self.tail.load(Ordering::Acquire);
        let h = self.head.load(Ordering::Acquire);
        t.saturating_sub(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fifo_and_bounded() {
        let r = Ring::new(3); // rounds up to 4
        for i in 0..4 {
            assert!(r.push(i));
        }
        assert!(!r.push(9), "a full ring refuses");
        assert_eq!(r.len(), 4);
        for i in 0..4 {
            assert_eq!(r.pop(), Some(i));
        }
        assert_eq!(r.pop(), None);
        assert!(r.is_empty());
    }

    #[test]
    fn threads_lose_and_duplicate_nothing() {
        let r = Arc::new(Ring::new(64));
        let per = 20_000u32;
        let mut seen = vec![0u32; 4 * per as usize];
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..per {
                        while !r.push(t * per + i) {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let mut got = 0;
            while got < 4 * per {
                match r.pop() {
                    Some(v) => {
                        seen[v as usize] += 1;
                        got += 1;
                    }
                    None => std::thread::yield_now(),
                }
            }
        });
        assert!(seen.iter().all(|&c| c == 1));
    }
}

//! The event queue: a timing wheel in front of binary heaps.
//!
//! Events are ordered by `(at, order)`. Most are due within a few microseconds, so they go
//! to a wheel of `SLOTS` buckets of `2^SHIFT` ps each, with a bitmap of the non-empty ones;
//! the bucket being drained lives in a small sorted vector (`cur`), and events beyond the wheel's
//! horizon wait in an overflow heap. Popping is O(1) amortized instead of O(log n) over all
//! pending events, which is most of the simulator's cost with thousands of clients.
use super::model::Ps;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

const SHIFT: u32 = 12;
const SLOTS: usize = 16384;
const WORDS: usize = SLOTS / 64;

/// A queued event: ordered by time, then by `order` (tie-break and insertion count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub at: Ps,
    pub order: u64,
    pub ev: u64,
}

impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, the earliest entry must come out first.
        (o.at, o.order).cmp(&(self.at, self.order))
    }
}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// A wheel event: an entry and the next one of its bucket's list.
#[derive(Debug, Clone, Copy)]
struct Node {
    e: Entry,
    next: u32,
}

/// End of a bucket's list (and of the free list).
const NIL: u32 = u32::MAX;

pub struct EventQueue {
    /// The current bucket's events, sorted by [`Entry`]'s order (the earliest last): a
    /// bucket holds about one event, which a heap would sift for nothing.
    cur: Vec<Entry>,
    /// Absolute bucket number whose events are in `cur` (all earlier ones are drained).
    cur_abs: u64,
    /// First node of each wheel bucket's list (`NIL` when empty). The buckets are intrusive
    /// lists through one node array, not a `Vec` each: the wheel is sparse (about one event
    /// a bucket), and a push then touches a 4-byte head and a recently freed node instead
    /// of a cold `Vec` header and its cold heap block.
    heads: Vec<u32>,
    nodes: Vec<Node>,
    /// Free nodes, most recently freed first (warm in the cache).
    free: u32,
    bits: [u64; WORDS],
    wheel_len: usize,
    overflow: BinaryHeap<Entry>,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue::new()
    }
}

impl EventQueue {
    pub fn new() -> EventQueue {
        EventQueue {
            cur: Vec::new(),
            cur_abs: 0,
            heads: vec![NIL; SLOTS],
            nodes: Vec::new(),
            free: NIL,
            bits: [0; WORDS],
            wheel_len: 0,
            overflow: BinaryHeap::new(),
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.cur.len() + self.wheel_len + self.overflow.len()
    }

    pub fn push(&mut self, e: Entry) {
        let b = e.at >> SHIFT;
        if b <= self.cur_abs {
            let p = self.cur.partition_point(|x| *x < e);
            self.cur.insert(p, e);
        } else if b < self.cur_abs + SLOTS as u64 {
            let i = (b % SLOTS as u64) as usize;
            let node = Node {
                e,
                next: self.heads[i],
            };
            let n = if self.free != NIL {
                let n = self.free;
                self.free = self.nodes[n as usize].next;
                self.nodes[n as usize] = node;
                n
            } else {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            };
            self.heads[i] = n;
            self.bits[i / 64] |= 1 << (i % 64);
            self.wheel_len += 1;
        } else {
            self.overflow.push(e);
        }
    }

    /// The next non-empty wheel bucket after `cur_abs`, as an absolute bucket number.
    fn next_wheel_bucket(&self) -> Option<u64> {
        if self.wheel_len == 0 {
            return None;
        }
        let start = ((self.cur_abs + 1) % SLOTS as u64) as usize;
        let abs = |i: usize| self.cur_abs + 1 + ((i + SLOTS - start) % SLOTS) as u64;
        let first = start / 64;
        let m = self.bits[first] & (u64::MAX << (start % 64));
        if m != 0 {
            return Some(abs(first * 64 + m.trailing_zeros() as usize));
        }
        // The other words in cyclic order, then the low bits of the first word (wrapped).
        for k in 1..=WORDS {
            let w = (first + k) % WORDS;
            let mut word = self.bits[w];
            if k == WORDS {
                word &= !(u64::MAX << (start % 64));
            }
            if word != 0 {
                return Some(abs(w * 64 + word.trailing_zeros() as usize));
            }
        }
        None
    }

    /// Moves the next due bucket into `cur` if `cur` is empty; false when nothing is queued.
    fn refill(&mut self) -> bool {
        if !self.cur.is_empty() {
            return true;
        }
        let wheel = self.next_wheel_bucket();
        let over = self.overflow.peek().map(|e| e.at >> SHIFT);
        let next = match (wheel, over) {
            (None, None) => return false,
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) => a.min(b),
        };
        // Wheel buckets before `next` are empty; `next` becomes the current bucket.
        self.cur_abs = next;
        let i = (next % SLOTS as u64) as usize;
        let head = self.heads[i];
        if head != NIL && self.nodes[head as usize].e.at >> SHIFT == next {
            self.bits[i / 64] &= !(1 << (i % 64));
            self.heads[i] = NIL;
            // Move the list into `cur`, then hand its nodes to the free list.
            let mut n = head;
            loop {
                let node = self.nodes[n as usize];
                self.cur.push(node.e);
                self.wheel_len -= 1;
                if node.next == NIL {
                    self.nodes[n as usize].next = self.free;
                    break;
                }
                n = node.next;
            }
            self.free = head;
        }
        while self.overflow.peek().is_some_and(|e| e.at >> SHIFT <= next) {
            if let Some(e) = self.overflow.pop() {
                self.cur.push(e);
            }
        }
        self.cur.sort_unstable();
        // Overflow events that now fall inside the wheel's horizon move into it.
        while let Some(e) = self.overflow.peek().copied() {
            if e.at >> SHIFT >= self.cur_abs + SLOTS as u64 {
                break;
            }
            self.overflow.pop();
            self.push(e);
        }
        true
    }

    pub fn pop(&mut self) -> Option<Entry> {
        if self.refill() { self.cur.pop() } else { None }
    }

    pub fn peek_time(&mut self) -> Option<Ps> {
        if self.refill() {
            self.cur.last().map(|e| e.at)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::rng::Rng;

    #[test]
    fn pops_in_order_like_a_heap() {
        let mut q = EventQueue::new();
        let mut h = BinaryHeap::new();
        let mut r = Rng::new(5, 0);
        let mut now = 0u64;
        let mut n = 0u64;
        for round in 0..20_000 {
            for _ in 0..r.below(4) {
                let span = match r.below(4) {
                    0 => 0,
                    1 => 3_000,
                    2 => 9_000_000,
                    _ => 80_000_000_000,
                };
                let at = now + r.below(span + 1);
                n += 1;
                let e = Entry {
                    at,
                    order: r.next_u64() & !0xFFFF | n & 0xFFFF,
                    ev: n,
                };
                q.push(e);
                h.push(e);
            }
            if round % 3 != 0 {
                assert_eq!(q.peek_time(), h.peek().map(|e| e.at));
                let (a, b) = (q.pop(), h.pop());
                assert_eq!(a, b);
                if let Some(e) = a {
                    now = e.at;
                }
            }
            assert_eq!(q.len(), h.len());
        }
        while let Some(b) = h.pop() {
            assert_eq!(q.pop(), Some(b));
        }
        assert!(q.pop().is_none());
    }
}

//! The last-level cache of a memory node's CPU, as the server CPU model sees it (`server.rs`):
//! which 64-byte lines of the host region a handler finds cached, and which it must fetch
//! from DRAM or persistent memory.
//!
//! - **Replacement**: CLOCK (second chance) over `server_llc_lines` lines, a deterministic
//!   approximation of the LLC's LRU-like policy: a touched line is marked referenced; a miss
//!   in a full cache evicts the first unreferenced line after the hand, clearing marks on the
//!   way. One cache per node, shared by its handler threads (the LLC is shared by a socket's
//!   cores).
//! - **Invocations**: each handler call is one invocation ([`Llc::begin`]); a line counts
//!   once per invocation (its first touch is a hit or a miss, later touches of the same call
//!   are L1 hits and free), so the counts are "distinct lines touched".
//! - **Persists** (clwb) write a line back and leave it cached; the cache is not told. A
//!   `persist_evict` (clflush, WORT's and WOART's flush) drops its lines ([`Llc::evict`]).
//!   Evicting a dirty line costs the handler nothing (the write-back is asynchronous).
//! - **NIC writes** (DDIO, on by default on Intel Xeon servers since Sandy Bridge-EP, and
//!   the platform `memory.rs` already assumes): the NIC's WRITE, WRITE_WITH_IMM and atomic
//!   stores to the host region are placed in the LLC ([`Llc::nic_write`]), so a handler
//!   that reads a request the NIC just wrote hits. DDIO's limit to a few LLC ways is not
//!   modelled (the NIC's lines compete with the handler's under the one CLOCK). NIC READs
//!   leave the cache as it is.
//! - **Lazily started**: a node's cache exists from its handler's first memory access
//!   ([`Llc::start`]); before that NIC writes are not tracked, so nodes whose handler never
//!   touches the region (the echo service, one-sided indexes) pay nothing for it. The memory
//!   used is bounded by `server_llc_lines` entries (~40 bytes each, grown as lines are
//!   touched).
//! - A crash empties the cache ([`Llc::clear`]).
//! - **Warm starts**: a memory image written by the node's own CPU before the sim starts
//!   (a bulk load's `ImageRegion` in `remora bench`) carries the lines that CPU touched
//!   ([`WarmLines`], the last `server_llc_lines` distinct ones, most recent last); a sim
//!   started from the image touches them in order into the node's cache
//!   ([`Llc::warm`], from `Sim::with_images`) and counts nothing for it, so a bulk-loaded
//!   server starts with the cache its load's inserts would have left.
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// The line number an evicted slot holds (no region has a line this far).
const EMPTY: u64 = u64::MAX;

/// Cache-line size of the model.
pub(crate) const LINE: u64 = 64;

/// What one touch of a line found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Touch {
    /// Already touched in this invocation (L1): free, not counted again.
    Again,
    Hit,
    Miss,
}

/// Lines a node's handlers touched, by outcome, since the node started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LlcStats {
    /// Handler invocations (messages served).
    pub invocations: u64,
    /// Distinct lines touched per invocation, summed.
    pub lines: u64,
    /// Of them, found in the cache.
    pub hits: u64,
    /// Of them, fetched from memory.
    pub misses: u64,
}

impl LlcStats {
    /// What was counted after `e`, an earlier reading of the same counters (each count
    /// saturates at 0, so a reading taken across a restart never underflows).
    pub fn since(&self, e: &LlcStats) -> LlcStats {
        LlcStats {
            invocations: self.invocations.saturating_sub(e.invocations),
            lines: self.lines.saturating_sub(e.lines),
            hits: self.hits.saturating_sub(e.hits),
            misses: self.misses.saturating_sub(e.misses),
        }
    }
    /// The counts of `self` and `o` added (e.g. several nodes' caches together).
    pub fn plus(&self, o: &LlcStats) -> LlcStats {
        LlcStats {
            invocations: self.invocations + o.invocations,
            lines: self.lines + o.lines,
            hits: self.hits + o.hits,
            misses: self.misses + o.misses,
        }
    }
}

/// A multiplicative hash of a line number (deterministic and cheap; line numbers are not
/// adversarial).
#[derive(Default)]
pub(crate) struct LineHasher(u64);

impl Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 ^= self.0 >> 29;
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    line: u64,
    /// Invocation that last touched it (0: none, or only the NIC).
    stamp: u64,
    referenced: bool,
}

/// One memory node's last-level cache (see the module doc).
#[derive(Default)]
pub(crate) struct Llc {
    cap: usize,
    map: HashMap<u64, u32, BuildHasherDefault<LineHasher>>,
    slots: Vec<Slot>,
    hand: usize,
    stamp: u64,
    pub stats: LlcStats,
}

impl Llc {
    /// Starts the cache with room for `lines` lines (at least one), if not started yet.
    pub fn start(&mut self, lines: usize) {
        if self.cap == 0 {
            self.cap = lines.clamp(1, u32::MAX as usize);
        }
    }
    /// A new handler invocation begins.
    pub fn begin(&mut self) {
        self.stamp += 1;
        self.stats.invocations += 1;
    }
    /// The handler touches line `line` (a line number: offset / [`LINE`]).
    pub fn touch(&mut self, line: u64) -> Touch {
        if let Some(&i) = self.map.get(&line) {
            let s = &mut self.slots[i as usize];
            s.referenced = true;
            if s.stamp == self.stamp {
                return Touch::Again;
            }
            s.stamp = self.stamp;
            self.stats.lines += 1;
            self.stats.hits += 1;
            return Touch::Hit;
        }
        self.insert(line, self.stamp);
        self.stats.lines += 1;
        self.stats.misses += 1;
        Touch::Miss
    }
    /// The NIC wrote `[off, off + len)` of the host region (DDIO): its lines are cached.
    pub fn nic_write(&mut self, off: u64, len: usize) {
        if self.cap == 0 || len == 0 {
            return;
        }
        let (lo, hi) = (off / LINE, (off + len as u64 - 1) / LINE);
        for line in lo..=hi {
            match self.map.get(&line) {
                Some(&i) => self.slots[i as usize].referenced = true,
                None => self.insert(line, 0),
            }
        }
    }
    /// `[off, off + len)` was flushed with `clflush`: its lines leave the cache (their slots
    /// are the next victims), so the next touch of each misses.
    pub fn evict(&mut self, off: u64, len: usize) {
        if self.cap == 0 || len == 0 {
            return;
        }
        let (lo, hi) = (off / LINE, (off + len as u64 - 1) / LINE);
        for line in lo..=hi {
            if let Some(i) = self.map.remove(&line) {
                let s = &mut self.slots[i as usize];
                s.line = EMPTY;
                s.stamp = 0;
                s.referenced = false;
            }
        }
    }
    /// The node crashed: nothing is cached any more.
    pub fn clear(&mut self) {
        self.map.clear();
        self.slots.clear();
        self.hand = 0;
    }
    /// Lines cached now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }
    /// Starts the cache with room for `lines` lines (if not started yet) and touches
    /// `warm`'s lines in order, oldest first, as a CPU's accesses before the sim would
    /// have: each is cached and marked referenced. Counts nothing (the stats stay as they
    /// were), so a run measures none of it.
    pub fn warm(&mut self, lines: usize, warm: &WarmLines) {
        if warm.is_empty() {
            return;
        }
        self.start(lines);
        for line in warm.lines() {
            match self.map.get(&line) {
                Some(&i) => self.slots[i as usize].referenced = true,
                None => self.insert(line, 0),
            }
        }
    }

    /// The lines cached now, from the hand on: [`Llc::warm`] with them fills an empty cache
    /// of the same size slot for slot, its hand where this one's is (every line marked
    /// referenced). Empty when not started.
    pub fn cached(&self) -> WarmLines {
        let mut w = WarmLines::new(self.cap);
        let n = self.slots.len();
        for k in 0..n {
            let s = &self.slots[(self.hand + k) % n];
            if s.line != EMPTY {
                w.touch(s.line * LINE, 1);
            }
        }
        w
    }

    fn insert(&mut self, line: u64, stamp: u64) {
        let slot = Slot {
            line,
            stamp,
            referenced: true,
        };
        if self.slots.len() < self.cap {
            self.map.insert(line, self.slots.len() as u32);
            self.slots.push(slot);
            return;
        }
        // CLOCK: the first unreferenced line after the hand is the victim; at most one full
        // turn clears every mark, so this ends within two turns.
        loop {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            let s = &mut self.slots[i];
            if s.referenced {
                s.referenced = false;
                continue;
            }
            if s.line != EMPTY {
                self.map.remove(&s.line);
            }
            *s = slot;
            self.map.insert(line, i as u32);
            return;
        }
    }
}

/// The lines a memory node's CPU touched outside the sim (a bulk load writing the node's
/// image), by last touch: the last `cap` distinct lines only, most recently touched last
/// (an LRU list), so a load of any size keeps at most `cap` of them (a cache of `cap`
/// lines holds no older ones). Replayed into the node's cache by [`Llc::warm`].
#[derive(Debug, Clone, Default)]
pub struct WarmLines {
    cap: usize,
    /// Touches counted so far (the sequence number of the next).
    seq: u64,
    /// Each kept line's last touch.
    last: HashMap<u64, u64, BuildHasherDefault<LineHasher>>,
    /// (touch, line), oldest first; an entry whose line was touched again later is stale.
    order: VecDeque<(u64, u64)>,
}

impl WarmLines {
    /// Keeps the last `cap` distinct lines touched (none when 0).
    pub fn new(cap: usize) -> WarmLines {
        WarmLines {
            cap,
            ..WarmLines::default()
        }
    }
    /// The CPU touched `[off, off + len)` of the host region.
    pub fn touch(&mut self, off: u64, len: usize) {
        if self.cap == 0 || len == 0 {
            return;
        }
        let (lo, hi) = (off / LINE, (off + len as u64 - 1) / LINE);
        for line in lo..=hi {
            // A line touched last already stays where it is (repeats of one access).
            let last = &self.last;
            if self
                .order
                .back()
                .is_some_and(|&(s, l)| l == line && last.get(&l) == Some(&s))
            {
                continue;
            }
            self.seq += 1;
            self.last.insert(line, self.seq);
            self.order.push_back((self.seq, line));
            while self.last.len() > self.cap {
                let Some((s, l)) = self.order.pop_front() else {
                    break;
                };
                if self.last.get(&l) == Some(&s) {
                    self.last.remove(&l);
                }
            }
            // Stale entries are dropped once they outnumber the kept lines.
            if self.order.len() > 2 * self.cap + 64 {
                let last = &self.last;
                self.order.retain(|(s, l)| last.get(l) == Some(s));
            }
        }
    }
    /// The CPU flushed `[off, off + len)` with `clflush`: its lines leave the cache (as
    /// [`Llc::evict`]), so they are no longer kept.
    pub fn evict(&mut self, off: u64, len: usize) {
        if self.cap == 0 || len == 0 {
            return;
        }
        let (lo, hi) = (off / LINE, (off + len as u64 - 1) / LINE);
        for line in lo..=hi {
            self.last.remove(&line);
        }
    }
    /// The kept lines, oldest touch first.
    pub fn lines(&self) -> impl Iterator<Item = u64> + '_ {
        self.order
            .iter()
            .filter(|(s, l)| self.last.get(l) == Some(s))
            .map(|&(_, l)| l)
    }
    /// Distinct lines kept (at most the capacity).
    pub fn len(&self) -> usize {
        self.last.len()
    }
    /// Whether no line is kept.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
    /// The most lines kept.
    pub fn capacity(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evicted_line_misses_and_its_slot_is_reused() {
        let mut c = Llc::default();
        c.start(2);
        c.begin();
        assert_eq!(c.touch(1), Touch::Miss);
        assert_eq!(c.touch(2), Touch::Miss);
        // clflush of line 1 (bytes 64..128): the next touch misses.
        c.evict(64, 64);
        c.begin();
        assert_eq!(c.touch(2), Touch::Hit);
        assert_eq!(c.touch(1), Touch::Miss);
        assert!(
            c.len() <= 2,
            "the evicted slot was reused, the cache did not grow"
        );
        c.begin();
        assert_eq!(c.touch(1), Touch::Hit);
        assert_eq!(
            c.touch(2),
            Touch::Hit,
            "line 2 kept: the evicted slot was the victim"
        );
    }

    #[test]
    fn second_touch_hits_and_repeats_within_a_call_are_free() {
        let mut c = Llc::default();
        c.start(8);
        c.begin();
        assert_eq!(c.touch(5), Touch::Miss);
        assert_eq!(c.touch(5), Touch::Again);
        c.begin();
        assert_eq!(c.touch(5), Touch::Hit);
        assert_eq!(
            c.stats,
            LlcStats {
                invocations: 2,
                lines: 2,
                hits: 1,
                misses: 1
            }
        );
    }

    #[test]
    fn capacity_is_bounded_and_clock_keeps_the_referenced() {
        let mut c = Llc::default();
        c.start(4);
        c.begin();
        for l in 0..4 {
            c.touch(l);
        }
        // A full turn clears the marks; line 0 is then the victim of line 10.
        c.begin();
        assert_eq!(c.touch(10), Touch::Miss);
        assert_eq!(c.len(), 4);
        // Line 1 was re-marked before the next miss, so line 2 goes for line 11.
        c.begin();
        assert_eq!(c.touch(1), Touch::Hit);
        assert_eq!(c.touch(11), Touch::Miss);
        c.begin();
        assert_eq!(c.touch(1), Touch::Hit);
        assert_eq!(c.touch(0), Touch::Miss, "evicted first");
        c.begin();
        assert_eq!(c.touch(2), Touch::Miss, "evicted second");
        assert!(c.len() <= 4);
        for l in 100..10_000 {
            c.touch(l);
        }
        assert_eq!(c.len(), 4);
    }

    #[test]
    fn nic_writes_are_cached_once_started_and_a_crash_empties_it() {
        let mut c = Llc::default();
        c.nic_write(0, 64);
        assert_eq!(c.len(), 0, "not started: not tracked");
        c.start(16);
        c.nic_write(100, 100);
        assert_eq!(c.len(), 3, "lines 1..=3");
        c.begin();
        assert_eq!(c.touch(2), Touch::Hit);
        c.clear();
        c.begin();
        assert_eq!(c.touch(2), Touch::Miss);
    }

    #[test]
    fn warm_lines_keep_the_last_distinct_lines_in_touch_order() {
        let mut w = WarmLines::new(3);
        // Lines 0, 1, 2, 0 again (moves last), 3: line 1 is the oldest, dropped.
        for l in [0u64, 1, 2, 0, 3] {
            w.touch(l * LINE, 1);
        }
        assert_eq!(w.lines().collect::<Vec<_>>(), vec![2, 0, 3]);
        // A 10,000-line load keeps 3 lines and a bounded list.
        w.touch(0, 10_000 * LINE as usize);
        assert_eq!(w.len(), 3);
        assert!(w.order.len() <= 2 * 3 + 64 + 1);
        assert_eq!(w.lines().collect::<Vec<_>>(), vec![9_997, 9_998, 9_999]);
        // Repeated touches of a few lines never grow it past its bound.
        for i in 0..100_000u64 {
            w.touch((i % 5) * LINE, 8);
        }
        assert!(w.order.len() <= 2 * 3 + 64 + 1 && w.len() == 3);
        assert_eq!(w.lines().collect::<Vec<_>>(), vec![2, 3, 4]);
        // A flushed line is dropped, and kept again from its next touch.
        w.evict(4 * LINE, 1);
        assert_eq!(w.lines().collect::<Vec<_>>(), vec![2, 3]);
        w.touch(4 * LINE, 1);
        assert_eq!(w.lines().collect::<Vec<_>>(), vec![2, 3, 4]);
    }

    #[test]
    fn a_warmed_cache_hits_the_warm_lines_and_counts_nothing() {
        let mut w = WarmLines::new(8);
        w.touch(0, 4 * LINE as usize);
        let mut c = Llc::default();
        c.warm(2, &w);
        assert_eq!(c.stats, LlcStats::default(), "warming counts nothing");
        assert_eq!(c.len(), 2, "bounded by the cache");
        c.begin();
        // The last two touched (2, 3) are the ones a 2-line cache keeps.
        assert_eq!(c.touch(3), Touch::Hit);
        assert_eq!(c.touch(2), Touch::Hit);
        assert_eq!(c.touch(0), Touch::Miss);
        // What a cache holds warms another to the same lines.
        let mut copy = Llc::default();
        copy.warm(2, &c.cached());
        assert_eq!(copy.cached().lines().collect::<Vec<_>>(), vec![3, 0]);
        assert_eq!(c.cached().lines().collect::<Vec<_>>(), vec![3, 0]);
        let mut cold = Llc::default();
        cold.warm(2, &WarmLines::new(8));
        assert_eq!(cold.len(), 0);
        cold.nic_write(0, 64);
        assert_eq!(cold.len(), 0, "nothing to warm: not started");
    }
}

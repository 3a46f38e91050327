//! Reusing the memory of retired data arrays (issue 26), on the memory node's CPU.
//!
//! A full rebuild (`resize.rs`) moves every item into a new data array; the old one is
//! *retired*. Its memory goes into the pool as a free *run*, and a later rebuild takes a run
//! instead of claiming new chunks when one is large enough (best fit; the array gets the
//! whole run as its capacity). Under churn over a fixed live set the tree then alternates
//! between two runs, and the region's allocator cursor stays where it is.
//!
//! Clients are never told that an array was retired, and a client may keep a view of the
//! tree (and so the old array's address) for as long as it likes: a stale reader READs, a
//! stale writer FETCH_AND_ADDs a lock word, and a skipped lock holder's late append
//! (WRITE_WITH_IMM) may land at any time. Reuse is safe without a grace period, because
//! every one of these checks what it finds:
//!
//! - **Frames.** A run is only ever carved into data arrays whose nodes sit on the frames
//!   (node-sized slices) of the arrays it came from: arrays are taken from a run's start,
//!   a run is a whole number of nodes, and only runs that touch are merged (so they share
//!   one grid). Every address a stale view computes is a frame: a stale READ sees a whole
//!   node image, and a stale FETCH_AND_ADD lands on a lock word, never inside an item.
//! - **Birth stamp.** A node's meta word carries the epoch of the tree that wrote it (see
//!   [`Meta::epoch`]). A node written into a reused frame carries the new tree's epoch, and
//!   a retired node stays frozen: a stale reader or writer sees a frozen node or an epoch
//!   not its view's, refreshes its view, and goes to the new tree (`Fresh::NewView`), as it
//!   does after any resize. A writer appends only on an unfrozen node of its view's epoch.
//! - **Lock words.** Only NIC atomics write a lock word (contract rule 3), so a reused
//!   frame keeps its lock count, and the new node's served ticket starts at it. A stale
//!   FETCH_AND_ADD that lands after that is a ticket nobody serves: the next writer reports
//!   it after a lease and the server skips it, as it skips a dead holder's.
//! - **Holes.** A late append goes to the slot the server reserved for it when it skipped
//!   the holder's ticket (`tickets.rs`). Reservations not yet freed when an array retires
//!   stay with their frame (`holes`), and a node later written there keeps those slots
//!   reserved (live, item `valid`: readers skip them, holders do not pick them), so a late
//!   append never lands on an item of the tree, however late it comes.
//!
//! Header areas replaced by larger ones are kept apart (`areas`) and reused only as areas,
//! exactly as the tick-tock shadow is: a client that READs a reused area finds a header
//! and prefix array whose CRC-64s check (a newer tree) or fail (it reads again).
//!
//! What is left: a node's meta word has 15 bits of epoch; a client whose cached view is a
//! multiple of 2^15 tree versions old could take a reused node for its own (as it could
//! take a node of its own array that splits changed since; the check is the same). A
//! skipped holder that never appends (dead) keeps its hole, a slot, until a recovery.
//!
//! # After a crash
//! The pool lives in the server's memory; its state at each publish is also written into
//! the published area, after the prefix array (at most `POOL_LEN` bytes, persisted with the
//! area before the root slot names it). [`CanrtServer::recover`] reads it back: the free
//! runs, the spare areas and the shadow area of the tree the root slot names. (Holes are dropped: no connection
//! from before the restart can append.) A crash during a rebuild that claimed new chunks
//! loses those chunks (the published table predates them): at most one array per crash.
use super::server::{CanrtServer, invalid};
use crate::fabric::FabricError;
use crate::server::LocalRegion;
#[cfg(doc)]
use remora_layouts::canrt::Meta;
use remora_layouts::canrt::{MAX_DATA_NODES, TREE_HEADER_LEN, TreeHeader};
use std_alloc::collections::BTreeMap;
use std_alloc::vec::Vec;

/// Free runs the table in an area holds (more are merged or, past that, forgotten).
pub(super) const MAX_RUNS: usize = 24;
/// Bytes of the pool table in an area: magic, count, the shadow area, the runs, a check.
pub(super) const POOL_LEN: u64 = 8 * (2 + 2 + 2 * MAX_RUNS as u64 + 1);
const POOL_MAGIC: u64 = u64::from_le_bytes(*b"CANRTFRE");
/// Set in a table entry's length: a spare header area, not a run of data-node frames.
pub(super) const AREA: u64 = 1 << 63;

/// (region offset, bytes).
pub(super) type Extent = (u64, u64);

/// Free memory of retired data arrays, and the reserved slots its frames carry.
#[derive(Debug, Default)]
pub(super) struct Pool {
    /// Free runs: region offset -> bytes (a whole number of data nodes).
    pub(super) free: BTreeMap<u64, u64>,
    /// Reserved slots of free frames: frame offset -> (slot, skipped ticket).
    pub(super) holes: BTreeMap<u64, Vec<(u32, u16)>>,
    /// Header areas a larger one replaced: (offset, bytes), reused only as areas.
    pub(super) areas: Vec<(u64, u64)>,
}

impl Pool {
    /// Bytes free in the pool.
    pub(super) fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// Adds `[off, off + len)` to the free runs, merged with the runs it touches.
    pub(super) fn release(&mut self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut start, mut end) = (off, off + len);
        if let Some((&o, &l)) = self.free.range(..off).next_back()
            && o + l == off
        {
            self.free.remove(&o);
            start = o;
        }
        if let Some(l) = self.free.remove(&end) {
            end += l;
        }
        self.free.insert(start, end - start);
    }

    /// The smallest spare area of at least `len` bytes, taken.
    pub(super) fn take_area(&mut self, len: u64) -> Option<(u64, u64)> {
        let i = (0..self.areas.len())
            .filter(|&i| self.areas[i].1 >= len)
            .min_by_key(|&i| self.areas[i].1)?;
        Some(self.areas.swap_remove(i))
    }

    /// The smallest run of at least `len` bytes, taken whole but for what is past
    /// `MAX_DATA_NODES` nodes of `node_size` bytes (left free): (offset, bytes).
    pub(super) fn take(&mut self, len: u64, node_size: u64) -> Option<(u64, u64)> {
        let (&off, &have) = self
            .free
            .iter()
            .filter(|&(_, &l)| l >= len)
            .min_by_key(|&(&o, &l)| (l, o))?;
        self.free.remove(&off);
        let keep = have.min(MAX_DATA_NODES * node_size);
        if keep < have {
            self.free.insert(off + keep, have - keep);
        }
        Some((off, keep))
    }

    /// The table written into an area: the free runs and spare areas (the largest
    /// `MAX_RUNS`; an area's length has [`AREA`] set) and the shadow area, then a check word
    /// (only the words used: fewer lines to persist).
    pub(super) fn encode(&self, shadow: Option<(u64, u64)>) -> Vec<u8> {
        let mut runs: Vec<(u64, u64)> = self.free.iter().map(|(&o, &l)| (o, l)).collect();
        runs.extend(self.areas.iter().map(|&(o, l)| (o, l | AREA)));
        runs.sort_by_key(|r| core::cmp::Reverse(r.1 & !AREA));
        runs.truncate(MAX_RUNS);
        let (so, sl) = shadow.unwrap_or((0, 0));
        let mut words = Vec::with_capacity(5 + 2 * runs.len());
        words.extend_from_slice(&[POOL_MAGIC, runs.len() as u64, so, sl]);
        for (o, l) in &runs {
            words.extend_from_slice(&[*o, *l]);
        }
        words.push(check(&words));
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// The table `bytes` hold: (free runs, shadow area), or None if it does not check.
    pub(super) fn decode(bytes: &[u8]) -> Option<(Vec<Extent>, Option<Extent>)> {
        let word = |i: usize| {
            let b = bytes.get(8 * i..8 * i + 8)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        };
        if word(0)? != POOL_MAGIC {
            return None;
        }
        let n = usize::try_from(word(1)?).ok().filter(|&n| n <= MAX_RUNS)?;
        let words: Vec<u64> = (0..4 + 2 * n).map(word).collect::<Option<_>>()?;
        if word(4 + 2 * n)? != check(&words) {
            return None;
        }
        let runs = (0..n)
            .map(|i| (words[4 + 2 * i], words[5 + 2 * i]))
            .collect();
        let shadow = (words[3] != 0).then_some((words[2], words[3]));
        Some((runs, shadow))
    }
}

/// A check word over `words` (FNV-1a over their bytes): a table torn or never written does
/// not check.
fn check(words: &[u64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for w in words {
        for b in w.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// Where the pool table of the area of header `h` lies (after its prefix array).
pub(super) fn table_off(h: &TreeHeader) -> u64 {
    (h.prefix_off + h.prefix_len).next_multiple_of(8)
}

/// Bytes of a new area for a tree that needs `need`: half as much again, rounded up to a
/// power of two. The classes let a tree whose prefix array grows and shrinks (sequential
/// keys with random deletes: the live keys spread over a wider range) find a spare of its
/// class again; with half as much again alone, each replaced area fell a little short of
/// the next need (a 128,960-byte need left a 193,440-byte area, the next need was 194,536)
/// and every growth claimed new memory (issue 26). Spares of smaller classes sum to less
/// than one of the class in use.
pub(super) fn area_len(need: u64) -> u64 {
    (need + need / 2).next_power_of_two()
}

/// Bytes an area needs for a prefix array of `prefix_len` bytes: header, prefix array,
/// pool table.
pub(super) fn area_need(prefix_len: u64) -> u64 {
    (TREE_HEADER_LEN as u64 + prefix_len).next_multiple_of(8) + POOL_LEN
}

impl CanrtServer {
    /// A data array for `n` nodes, with room to split into: the smallest free run of the
    /// pool with room for `n` and a quarter as many again (its frames keep their lock words;
    /// see the module docs), taken whole, else `cap` nodes of new zeroed memory. Accepting a
    /// run well short of `cap` keeps a churn from claiming new memory each time its node
    /// count drifts up: with room for half as many again, a churn of sequential keys with
    /// random deletes whose node count drifted from 766 to 769 claimed a third array (issue
    /// 26). Returns (offset, capacity in nodes, reused).
    pub(super) fn array_for(
        &mut self,
        region: &dyn LocalRegion,
        g: remora_layouts::canrt::DataGeometry,
        n: u64,
        cap: u64,
    ) -> Result<(u64, u64, bool), FabricError> {
        let ns = g.node_size();
        let enough = cap.min(n + n.div_ceil(4)).max(n);
        if let Some((off, len)) = self.pool.take(enough * ns, ns) {
            return Ok((off, len / ns, true));
        }
        Ok((self.new_array(region, g, cap)?, cap, false))
    }

    /// The data array of `old` is retired (a rebuild published a new one): its memory goes
    /// to the pool, and its reserved slots stay with their frames.
    pub(super) fn retire(&mut self, old: &TreeHeader) {
        let ns = old.data_node_size;
        for (&(id, slot), &ticket) in &self.reserved {
            if id < old.n_data {
                self.pool
                    .holes
                    .entry(old.data_node_off(id))
                    .or_default()
                    .push((slot, ticket));
            }
        }
        self.pool.release(old.data_off, old.data_cap * ns);
        super::server::ServerStats::bump(&self.stats.arrays_retired);
    }

    /// Reads back the pool table of the published tree `h` (after a restart): its free
    /// runs (those that lie in the region, clear of the tree's own memory, and are a whole
    /// number of nodes) and its shadow area.
    pub(super) fn load_pool(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
    ) -> Result<(), FabricError> {
        let at = table_off(h);
        if at + POOL_LEN > h.area_off + h.area_len || at + POOL_LEN > region.len() {
            return Ok(());
        }
        let mut buf = [0u8; POOL_LEN as usize];
        region.read(at, &mut buf)?;
        let Some((runs, shadow)) = Pool::decode(&buf) else {
            return Ok(());
        };
        let ns = h.data_node_size;
        let data = (h.data_off, h.data_off + h.data_cap * ns);
        let area = (h.area_off, h.area_off + h.area_len);
        let clear = |o: u64, l: u64| {
            let Some(end) = o.checked_add(l) else {
                return false;
            };
            end <= region.len()
                && o >= remora_layouts::region::HEADER_LEN as u64
                && (end <= data.0 || o >= data.1)
                && (end <= area.0 || o >= area.1)
        };
        for (o, l) in runs {
            if l & AREA != 0 {
                if clear(o, l & !AREA) {
                    self.pool.areas.push((o, l & !AREA));
                }
            } else if ns > 0 && l > 0 && l.is_multiple_of(ns) && clear(o, l) {
                self.pool.release(o, l);
            }
        }
        if let Some((o, l)) = shadow
            && clear(o, l)
            && l >= area_need(0)
        {
            self.shadow = Some((o, l));
        }
        Ok(())
    }

    /// Writes the pool table the area of `h` will hold once `h` is published: the free runs
    /// after `retiring` (the array a rebuild replaces, if any) joins them, and `shadow`.
    /// Returns its length (the caller persists it with the area).
    pub(super) fn write_table(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        retiring: Option<(u64, u64)>,
        shadow: Option<(u64, u64)>,
    ) -> Result<u64, FabricError> {
        let at = table_off(h);
        if at + POOL_LEN > h.area_off + h.area_len {
            return Err(invalid(region, at, "no room for the pool table"));
        }
        let bytes = match retiring {
            Some((o, l)) => {
                let mut after = Pool {
                    free: self.pool.free.clone(),
                    holes: BTreeMap::new(),
                    areas: self.pool.areas.clone(),
                };
                after.release(o, l);
                after.encode(shadow)
            }
            None => self.pool.encode(shadow),
        };
        region.write(at, &bytes)?;
        Ok(bytes.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_only_when_they_touch_and_take_is_best_fit() {
        let mut p = Pool::default();
        p.release(1000, 100);
        p.release(1100, 100);
        p.release(1300, 300);
        assert_eq!(p.free.len(), 2);
        assert_eq!(p.free[&1000], 200);
        // Best fit: the 200-byte run for 150 bytes, taken whole.
        assert_eq!(p.take(150, 100), Some((1000, 200)));
        assert_eq!(p.take(400, 100), None);
        assert_eq!(p.free_bytes(), 300);
        let t = p.encode(Some((64, 4096)));
        let (runs, shadow) = Pool::decode(&t).unwrap();
        assert_eq!(runs, [(1300, 300)]);
        assert_eq!(shadow, Some((64, 4096)));
        let mut torn = t;
        torn[40] ^= 1;
        assert!(Pool::decode(&torn).is_none());
    }
}

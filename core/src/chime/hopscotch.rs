//! The hopscotch table of one leaf, held locally: lookups through the home's hop bitmap,
//! inserts that hop entries toward the home's neighbourhood, removals, and the split's
//! repacking. Pure code: what the writer computes between its READ and its write-back.
//!
//! CHIME's insert (the authors' `Tree::hopscotch_insert_and_unlock`): find the first free
//! slot j from the key's home on; while j is 8 or more slots from the home, move into j an
//! entry from the 7 slots before it whose own home is within 8 of j, and continue from the
//! slot it left. If no such entry exists the hop fails and the leaf splits. Only the slots
//! from the home to j (and the hop bitmaps of homes among them) change.
use remora_layouts::chime::{Entry, NEIGHBOURHOOD, SLOTS, home};

/// Cyclic distance from slot `from` forward to slot `to`.
pub(crate) fn dist(from: usize, to: usize) -> usize {
    (to + SLOTS - from) % SLOTS
}

/// One leaf's slots.
#[derive(Clone, Copy)]
pub(crate) struct Table {
    pub(crate) e: [Entry; SLOTS],
}

/// An insert that found no room: no free slot, or no hop reaches the home's neighbourhood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoRoom;

impl Table {
    pub(crate) fn empty() -> Table {
        Table {
            e: [Entry::default(); SLOTS],
        }
    }

    /// Bit i set: slot i is free (the vacancy bitmap).
    pub(crate) fn vacancy(&self) -> u64 {
        (0..SLOTS)
            .filter(|&s| !self.e[s].live)
            .fold(0, |m, s| m | 1 << s)
    }

    /// The slot holding `key`, found through its home's hop bitmap.
    pub(crate) fn find(&self, key: u64) -> Option<usize> {
        let h = home(key);
        let hop = self.e[h].hop;
        (0..NEIGHBOURHOOD)
            .filter(|i| hop & (1 << i) != 0)
            .map(|i| (h + i) % SLOTS)
            .find(|&s| self.e[s].live && self.e[s].key == key)
    }

    /// Inserts a key known absent, using `free` (bit i: slot i free; the lock word's
    /// vacancy bitmap, or [`Self::vacancy`]) to find the free slot. Returns the slot the key
    /// took and the slots changed (bit mask). On [`NoRoom`] the table is unchanged.
    pub(crate) fn insert(
        &mut self,
        key: u64,
        len: u8,
        value: [u8; 8],
        free: u64,
    ) -> Result<(usize, u64), NoRoom> {
        let h = home(key);
        let mut j = (0..SLOTS)
            .map(|d| (h + d) % SLOTS)
            .find(|&s| free & (1 << s) != 0)
            .ok_or(NoRoom)?;
        let mut t = *self;
        let mut dirty = 0u64;
        while dist(h, j) >= NEIGHBOURHOOD {
            // The furthest-back entry that may move into j: home y in the 7 slots before j,
            // the entry at y + o (before j) with bit o of y's bitmap.
            let mut moved = false;
            'homes: for back in (1..NEIGHBOURHOOD).rev() {
                let y = (j + SLOTS - back) % SLOTS;
                for o in 0..back {
                    if t.e[y].hop & (1 << o) == 0 {
                        continue;
                    }
                    let from = (y + o) % SLOTS;
                    let mut e = t.e[from];
                    e.hop = t.e[j].hop;
                    let keep = t.e[from].hop;
                    t.e[j] = e;
                    t.e[from] = Entry::free(keep);
                    t.e[y].hop = (t.e[y].hop & !(1 << o)) | 1 << back;
                    dirty |= 1 << j | 1 << from | 1 << y;
                    j = from;
                    moved = true;
                    break 'homes;
                }
            }
            if !moved {
                return Err(NoRoom);
            }
        }
        let keep = t.e[j].hop;
        t.e[j] = Entry {
            live: true,
            len,
            hop: keep,
            key,
            value,
        };
        t.e[h].hop |= 1 << dist(h, j);
        dirty |= 1 << j | 1 << h;
        *self = t;
        Ok((j, dirty))
    }

    /// Frees `slot` (a live entry): returns the slots changed.
    pub(crate) fn remove(&mut self, slot: usize) -> u64 {
        let h = home(self.e[slot].key);
        let keep = self.e[slot].hop;
        self.e[slot] = Entry::free(keep);
        self.e[h].hop &= !(1 << dist(h, slot));
        1 << slot | 1 << h
    }

    /// The live entries.
    pub(crate) fn live(&self) -> impl Iterator<Item = &Entry> {
        self.e.iter().filter(|e| e.live)
    }
}

/// Packs `sorted` (ascending, distinct keys) into as few tables as splitting in halves
/// gives: a run that does not fit one table (more than its slots, or a hop that fails) is
/// split at its middle key, again and again. A run of one always fits, so this ends; it is
/// how the hop-after-split case is handled (CHIME's split asserts the new key fits its half;
/// here the half that does not fit is split again). Calls `leaf(first index, table)` per
/// table, left to right.
pub(crate) fn pack(sorted: &[Entry], fill: usize, leaf: &mut dyn FnMut(usize, &Table)) {
    let mut stack: heapless::Vec<(usize, usize), 16> = heapless::Vec::new();
    let _ = stack.push((0, sorted.len()));
    // Depth-first, right half pushed first, so tables come out left to right.
    while let Some((lo, hi)) = stack.pop() {
        let run = &sorted[lo..hi];
        let fits = if run.len() <= fill {
            let mut t = Table::empty();
            let mut ok = true;
            for e in run {
                let free = t.vacancy();
                if t.insert(e.key, e.len, e.value, free).is_err() {
                    ok = false;
                    break;
                }
            }
            ok.then_some(t)
        } else {
            None
        };
        match fits {
            Some(t) => leaf(lo, &t),
            None => {
                let mid = lo + run.len() / 2;
                // Depth is at most log2(65) + 1 < 16: pushes cannot fail.
                let _ = stack.push((mid, hi));
                let _ = stack.push((lo, mid));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std_alloc::vec::Vec;

    fn keys_homed_at(h: usize, n: usize, from: u64) -> Vec<u64> {
        (from..).filter(|&k| home(k) == h).take(n).collect()
    }

    fn check(t: &Table) {
        for s in 0..SLOTS {
            let e = t.e[s];
            if e.live {
                let h = home(e.key);
                assert!(
                    dist(h, s) < NEIGHBOURHOOD,
                    "key {} out of its neighbourhood",
                    e.key
                );
                assert!(
                    t.e[h].hop & (1 << dist(h, s)) != 0,
                    "home bitmap misses slot {s}"
                );
            }
            for o in 0..NEIGHBOURHOOD {
                if e.hop & (1 << o) != 0 {
                    let x = t.e[(s + o) % SLOTS];
                    assert!(x.live && home(x.key) == s, "stale hop bit {o} at {s}");
                }
            }
        }
    }

    #[test]
    fn inserts_hop_until_full_and_every_key_stays_findable() {
        let mut t = Table::empty();
        let mut keys = Vec::new();
        let mut hops = 0;
        for k in 1..10_000u64 {
            let free = t.vacancy();
            match t.insert(k * 7919, 8, k.to_le_bytes(), free) {
                Ok((_, dirty)) => {
                    hops += (dirty.count_ones() > 2) as u32;
                    keys.push(k * 7919)
                }
                Err(NoRoom) => {
                    if free == 0 {
                        break;
                    }
                }
            }
            check(&t);
        }
        assert!(keys.len() > 40, "a 64-slot table holds {} keys", keys.len());
        assert!(hops > 0, "some insert hopped");
        for k in &keys {
            let s = t.find(*k).expect("inserted key found");
            assert_eq!(t.e[s].key, *k);
        }
        assert_eq!(t.find(3), None);
        let s = t.find(keys[0]).unwrap();
        t.remove(s);
        check(&t);
        assert_eq!(t.find(keys[0]), None);
    }

    #[test]
    fn a_ninth_key_of_one_home_finds_no_room_and_leaves_the_table_unchanged() {
        let ks = keys_homed_at(5, 9, 1);
        let mut t = Table::empty();
        for &k in &ks[..8] {
            let free = t.vacancy();
            t.insert(k, 8, [1; 8], free).unwrap();
        }
        let before = t.e;
        let free = t.vacancy();
        assert_eq!(t.insert(ks[8], 8, [1; 8], free), Err(NoRoom));
        assert_eq!(t.e, before);
    }

    /// A leaf whose insert found no room is repacked by `pack` into one table, in place,
    /// whenever its live keys and the new one fit a fresh table (a rebuild, no new leaf):
    /// only a set no fresh table holds is split. Over deterministic random key sets, a fresh
    /// table never fails at 32 keys or fewer, so a split that allocates a leaf happens only
    /// to a leaf well over half full (the churn's leaf growth is bounded by that, not by
    /// a rebuild missing).
    #[test]
    fn pack_rebuilds_in_place_whatever_a_fresh_table_holds() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut failed = [0usize; 5];
        for (i, n) in [24usize, 32, 40, 48, 56].into_iter().enumerate() {
            for _ in 0..400 {
                let mut es: Vec<Entry> = (0..n)
                    .map(|_| Entry {
                        live: true,
                        len: 8,
                        key: next(),
                        ..Entry::default()
                    })
                    .collect();
                es.sort_unstable_by_key(|e| e.key);
                es.dedup_by_key(|e| e.key);
                let mut fresh = Table::empty();
                let fits = es.iter().all(|e| {
                    let free = fresh.vacancy();
                    fresh.insert(e.key, e.len, e.value, free).is_ok()
                });
                let mut parts = 0;
                pack(&es, SLOTS, &mut |_, t| {
                    check(t);
                    parts += 1
                });
                assert_eq!(
                    parts == 1,
                    fits,
                    "{n} keys: one table iff a fresh one holds them"
                );
                failed[i] += usize::from(!fits);
            }
        }
        assert_eq!(failed[..2], [0, 0], "a fresh table holds 32 keys or fewer");
        assert!(
            failed[4] > failed[3] && failed[3] > 0,
            "fails more as it fills: {failed:?}"
        );
    }

    #[test]
    fn pack_splits_a_half_that_does_not_fit_again() {
        // 12 keys of one home: halves of 6 fit; 20 keys of one home: halves of 10 do not,
        // quarters of 5 do (the hop-after-split case: CHIME asserts here).
        for n in [12usize, 20] {
            let mut ks = keys_homed_at(9, n, 100);
            ks.sort_unstable();
            let es: Vec<Entry> = ks
                .iter()
                .map(|&key| Entry {
                    live: true,
                    len: 8,
                    key,
                    ..Entry::default()
                })
                .collect();
            let mut got = Vec::new();
            pack(&es, 32, &mut |first, t| {
                check(t);
                got.push((first, t.live().count()))
            });
            assert_eq!(got.iter().map(|g| g.1).sum::<usize>(), n);
            assert_eq!(got.len(), if n <= 16 { 2 } else { 4 });
            let mut next = 0;
            for (first, count) in got {
                assert_eq!(first, next, "tables in key order");
                next += count;
            }
        }
    }
}

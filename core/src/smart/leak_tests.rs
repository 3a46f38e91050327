//! Churn with attempts going stale (`reclaim.rs`): a client descheduled at any point of an
//! operation (the soft fabric under load) must leak nothing. The clock here jumps past the
//! attempt lease every few readings, so that each `stale(t0)` check of a write path fires
//! somewhere in the run; after the churn, the tree holds exactly one leaf slot per live key
//! and no internal node without a live slot, and the bytes carved from the region stop
//! growing.
extern crate std;
use super::tests::{MemEp, block, endpoint, memory};
use super::*;
use crate::fabric::FabricError;
use crate::lease::LeaseConfig;
use remora_layouts::NodeId;
use remora_layouts::smart::SlotKind;
use std::vec::Vec;

/// The in-memory fabric with a clock that moves 1 µs per reading, and past the attempt
/// lease at one reading in `jump_every` (a client descheduled there).
struct JumpyEp {
    inner: MemEp,
    readings: Cell<u64>,
    clock: Cell<u64>,
    jump_every: u64,
    jump_ns: u64,
}

impl Endpoint for JumpyEp {
    type Qp = <MemEp as Endpoint>::Qp;
    fn qp(&self, node: NodeId) -> Result<&Self::Qp, FabricError> {
        self.inner.qp(node)
    }
    fn nodes(&self) -> &[NodeId] {
        self.inner.nodes()
    }
    fn now_ns(&self) -> u64 {
        // xorshift: jumps at irregular readings, so that every check gets its turn.
        let mut r = self.readings.get();
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        self.readings.set(r);
        let step = if r.is_multiple_of(self.jump_every) {
            self.jump_ns
        } else {
            1_000
        };
        self.clock.set(self.clock.get() + step);
        self.clock.get()
    }
    async fn pause(&self, ns: u64) {
        self.clock.set(self.clock.get() + ns);
    }
}

fn cfg(t: Techniques) -> SmartConfig {
    let mut cfg = SmartConfig::new(t, KeyMode::Fixed(8), 8);
    cfg.reclaim = true;
    cfg.lease = LeaseConfig {
        lease_ns: 100_000,
        min_backoff_ns: 100,
        max_backoff_ns: 10_000,
        deadline_ns: 1_000_000_000_000,
        max_attempts: 1_000_000,
    };
    cfg
}

/// fnv-1a of `n`, as the churn bench's integer keys.
fn key(n: u64) -> [u8; 8] {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in n.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.to_be_bytes()
}

/// (leaf slots, internal nodes below the root with no live slot) of the tree.
fn census(s: &Smart<'_, JumpyEp>) -> (u64, u64) {
    let mut todo = Vec::from([(s.root, NodeType::N256)]);
    let (mut leaves, mut empty) = (0u64, 0u64);
    while let Some((addr, ty)) = todo.pop() {
        let img = block(s.read_node(addr, ty)).unwrap();
        let mut live = 0;
        for slot in &img.slots[..ty.capacity()] {
            match slot.kind() {
                Ok(SlotKind::Leaf { .. }) => {
                    leaves += 1;
                    live += 1;
                }
                Ok(SlotKind::Node { addr, ty, .. }) => {
                    todo.push((addr, ty));
                    live += 1;
                }
                _ => {}
            }
        }
        if live == 0 && addr != s.root {
            empty += 1;
        }
    }
    (leaves, empty)
}

/// Bytes carved from the region's chunks (the churn bench's "bytes in use").
fn carved(s: &Smart<'_, JumpyEp>) -> u64 {
    s.allocs.iter().map(|a| a.bytes_carved()).sum()
}

fn churn(t: Techniques, jump_every: u64) {
    let m = memory(64 << 20);
    let c = cfg(t);
    let ep = JumpyEp {
        inner: endpoint(&m),
        readings: Cell::new(0x2545_F491_4F6C_DD1D),
        clock: Cell::new(1),
        jump_every,
        jump_ns: reclaim::Timing::of(&c).attempt_ns,
    };
    let s = block(Smart::open(&ep, c)).unwrap();
    const LIVE: u64 = 2_000;
    const OPS: u64 = 40_000;
    let mut live: Vec<u64> = (0..LIVE).collect();
    for &n in &live {
        block(s.upsert(&key(n), &n.to_le_bytes())).unwrap();
    }
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut at_half = 0;
    for op in 0..OPS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % LIVE) as usize;
        assert_eq!(block(s.delete(&key(live[i]))), Ok(true), "op {op}");
        let new = LIVE + op;
        block(s.upsert(&key(new), &new.to_le_bytes())).unwrap();
        live[i] = new;
        if op == OPS / 2 {
            at_half = carved(&s);
        }
    }
    let st = s.stats();
    assert!(
        st.stale_attempts > 1_000,
        "{t:?}: attempts went stale: {st:?}"
    );
    let mut out = [0u8; 8];
    for &n in &live {
        assert_eq!(block(s.get(&key(n), &mut out)), Ok(Some(8)));
        assert_eq!(out, n.to_le_bytes());
    }
    let (leaves, empty) = census(&s);
    std::println!("{t:?}: {leaves} leaf slots, {empty} empty nodes, {st:?}");
    assert_eq!(
        (leaves, empty),
        (LIVE, 0),
        "{t:?}: leaf slots and empty nodes left in the tree after the churn"
    );
    // Half of the churn's retirements are reused in the other half: no growth but the
    // slack of one chunk and the objects still in their grace period.
    let end = carved(&s);
    assert!(
        end <= at_half + (64 << 10),
        "{t:?}: bytes carved kept growing: {at_half} at half, {end} at the end ({st:?})"
    );
}

#[test]
fn churn_with_stale_attempts_leaks_nothing() {
    for t in [Techniques::SMART, Techniques::BASELINE] {
        churn(t, 40);
    }
}

/// Key `m` of group `g`: groups of a few keys under one node each (the last key byte), as
/// the churn bench's level-2 nodes hold two or three keys of a 100,000-key tree.
fn grouped(g: u64, m: u8) -> [u8; 8] {
    let mut k = key(g);
    k[7] = m;
    k
}

/// (Node16/Node48 nodes holding at most half of the next smaller type's slots, all nodes
/// below the root by type) of the tree.
fn oversized(s: &Smart<'_, JumpyEp>) -> (u64, [u64; 4]) {
    let mut todo = Vec::from([(s.root, NodeType::N256)]);
    let (mut over, mut types) = (0u64, [0u64; 4]);
    while let Some((addr, ty)) = todo.pop() {
        let img = block(s.read_node(addr, ty)).unwrap();
        let mut live = 0;
        for slot in &img.slots[..ty.capacity()] {
            match slot.kind() {
                Ok(SlotKind::Leaf { .. }) => live += 1,
                Ok(SlotKind::Node { addr, ty, .. }) => {
                    todo.push((addr, ty));
                    live += 1;
                }
                _ => {}
            }
        }
        if addr != s.root {
            types[ty as usize] += 1;
            // A Node16 with at most 2 keys, or a Node48 with at most 8.
            let half_of_smaller = match ty {
                NodeType::N16 => 2,
                NodeType::N48 => 8,
                _ => 0,
            };
            if live > 0 && live <= half_of_smaller {
                over += 1;
            }
        }
    }
    (over, types)
}

/// Churn over groups of about three keys (each group one node): a group that once held
/// four keys grew its node into a Node16, which stayed a Node16 while it held any key, so
/// the tree's bytes drifted into Node16s (and the grow's unused Node16 copies, freed to the
/// allocator's bounded free list behind reuses from the retire lists, were lost). Deletes
/// now shrink such nodes, and never-linked objects go back to the retire lists: the bytes
/// carved stop growing, and no node is left at twice the size its keys need.
fn grouped_churn(t: Techniques) {
    let m = memory(64 << 20);
    let c = cfg(t);
    let ep = JumpyEp {
        inner: endpoint(&m),
        readings: Cell::new(0x2545_F491_4F6C_DD1D),
        clock: Cell::new(1),
        // No descheduled client here: every delete's own attempt shrinks its node.
        jump_every: u64::MAX,
        jump_ns: 0,
    };
    let s = block(Smart::open(&ep, c)).unwrap();
    const GROUPS: u64 = 1_000;
    const LIVE: usize = 3_000;
    const OPS: u64 = 60_000;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut present = std::collections::BTreeSet::new();
    let mut live: Vec<(u64, u8)> = Vec::new();
    let fresh = |present: &mut std::collections::BTreeSet<(u64, u8)>, mut r: u64| loop {
        let k = (r % GROUPS, (r >> 20) as u8);
        if present.insert(k) {
            return k;
        }
        r = r
            .wrapping_mul(0x5851_F42D_4C95_7F2D)
            .wrapping_add(0x1405_7B7E_F767_814F);
    };
    while live.len() < LIVE {
        let k = fresh(&mut present, next());
        block(s.upsert(&grouped(k.0, k.1), &k.0.to_le_bytes())).unwrap();
        live.push(k);
    }
    let mut at_quarter = 0;
    for op in 0..OPS {
        let i = (next() % LIVE as u64) as usize;
        let (g, b) = live[i];
        assert_eq!(block(s.delete(&grouped(g, b))), Ok(true), "op {op}");
        present.remove(&(g, b));
        let k = fresh(&mut present, next());
        block(s.upsert(&grouped(k.0, k.1), &k.0.to_le_bytes())).unwrap();
        live[i] = k;
        if op == OPS / 4 {
            at_quarter = carved(&s);
        }
    }
    let mut out = [0u8; 8];
    for &(g, b) in &live {
        assert_eq!(block(s.get(&grouped(g, b), &mut out)), Ok(Some(8)));
        assert_eq!(out, g.to_le_bytes());
    }
    let (over, types) = oversized(&s);
    let end = carved(&s);
    std::println!(
        "{t:?}: nodes by type {types:?}, {over} oversized, carved {at_quarter} at a quarter, {end} at the end, {:?}",
        s.stats()
    );
    assert_eq!(over, 0, "{t:?}: nodes left larger than their keys need");
    assert!(
        end <= at_quarter + (32 << 10),
        "{t:?}: bytes carved kept growing: {at_quarter} at a quarter, {end} at the end"
    );
}

#[test]
fn grouped_churn_shrinks_nodes_and_stays_flat() {
    for t in [Techniques::SMART, Techniques::BASELINE] {
        grouped_churn(t);
    }
}

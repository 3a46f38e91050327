//! Free memory after a memory-node restart: what the tree does not reach is free.
//!
//! A memory node that restarts on its persistent region keeps the tree and the allocator's
//! cursor, but every handle of the previous life is gone (each handle reaches every memory
//! node, so a restart of any one ends them all): their retire lists, their ready objects,
//! the unused tails of their chunks and their redo rings. [`Smart::open_recovering`] takes
//! that memory back. It reads each memory node's cursor first (so whatever this handle, or
//! anyone after it, allocates from then on lies above it), then walks the tree from the
//! root: every internal node, every leaf and the leaves its forward chain names, the redo
//! slot a leaf's lock word names (a holder that died mid-write-back left the image there
//! that a takeover repairs the leaf from), the root and the tree's meta block. Each
//! object counts with its allocated size (its size class). Every gap below a cursor
//! becomes spare memory of this handle ([`super::reclaim`]), which it reuses first.
//!
//! The grace rule of a retirement holds for it as well: every address into the previous
//! life was learnt before the crash, so before `open_recovering` began at `t0`: a radix cache
//! of a compute node that survived is dropped by `t0 + grace - 2 * attempt` at the latest,
//! and no attempt of a previous handle acts any more. So `open_recovering` returns no sooner
//! than a grace period after `t0` (3 s with the default leases: the first client after a
//! restart waits that long), and the spare memory is reusable at once. Its redo rings are
//! allocated only then, from spare memory: a restart adds no chunk of its own, and the
//! allocator's used range stays flat over any number of restarts.
//!
//! The recovering client must be the first of the tree's clients to open it after the
//! restart, and the only one until `open_recovering` returns (as WORT's recovery runs before
//! its server serves): a gap is free only if no live client holds it, and a client that
//! opened earlier may hold a chunk below the cursor, or unlink (and retire) an object the
//! walk has already passed.
use super::config::SmartError;
use super::leaflock::redo_of;
use super::node::SmartNode;
use super::{Smart, SmartConfig};
use crate::fabric::{Endpoint, QueuePair};
use remora_layouts::region::{HEADER_LEN, RegionHeader, root_offset};
use remora_layouts::smart::{
    LEAF_STATUS_OFFSET, LeafStatus, MAX_LEAF_BYTES, NodeType, SlotKind, TREE_META_LEN,
    leaf_lock_offset,
};
use remora_layouts::{GlobalAddr, LayoutError, NodeId};
use std_alloc::sync::Arc;
use std_alloc::vec::Vec;

/// Longest forward chain of one slot followed (a longer one is corrupt).
const MAX_CHAIN: usize = 64;

/// What [`Smart::open_recovering`] found, summed over the memory nodes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Internal nodes the tree reaches.
    pub nodes: u64,
    /// Leaves the tree reaches (forward chains included).
    pub leaves: u64,
    /// Bytes the allocator had handed out: below the cursors, past the region headers.
    pub used_bytes: u64,
    /// Allocated bytes (size classes) of what the tree reaches.
    pub reached_bytes: u64,
    /// Bytes taken back as spare memory (0 with reclamation off: nothing is reused then).
    pub free_bytes: u64,
}

/// Records object `a` of `bytes` bytes (allocated as its size class) as reached.
fn mark(reached: &mut [Vec<(u64, u64)>], nodes: &[NodeId], a: GlobalAddr, bytes: usize) {
    if let Some(ix) = nodes.iter().position(|n| *n == a.node()) {
        let len = (bytes as u64)
            .max(crate::alloc::MIN_OBJECT)
            .next_power_of_two();
        reached[ix].push((a.offset(), len));
    }
}

fn corrupt(what: &'static str) -> impl Fn(LayoutError) -> SmartError {
    move |err| SmartError::Corrupt { what, err }
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// [`Self::open_on`] for the first client after a memory node restarted: also takes back,
    /// as spare memory of this handle, everything below each memory node's allocator cursor
    /// that the tree does not reach (see the module doc, which says why no other client of
    /// the tree may have opened it since the restart). Nothing is freed if any reachable
    /// image does not decode (the error says which).
    pub async fn open_recovering(
        ep: &'e E,
        cfg: SmartConfig,
        node: Arc<SmartNode>,
    ) -> Result<(Smart<'e, E>, Recovered), SmartError> {
        cfg.check()?;
        let t0 = ep.now_ns();
        let mut ranges = Vec::with_capacity(ep.nodes().len());
        for &n in ep.nodes() {
            let mut b = [0u8; HEADER_LEN];
            ep.qp(n)?.read(GlobalAddr::new(n, 0), &mut b).await?;
            let h = RegionHeader::decode(&b).map_err(corrupt("region header"))?;
            let first = (HEADER_LEN as u64).next_multiple_of(h.chunk_size);
            ranges.push((first, h.next_chunk.min(h.region_len).max(first)));
        }
        let mut s = Self::open_with(ep, cfg, node, false).await?;
        let rep = s.take_back(&ranges, t0).await?;
        if rep.free_bytes > 0 {
            let until = t0.saturating_add(s.timing.grace_ns);
            let now = ep.now_ns();
            if now < until {
                ep.pause(until - now).await;
            }
        }
        s.alloc_redo().await?;
        Ok((s, rep))
    }

    /// Walks the tree and makes the gaps of `ranges` (per memory node position: the first
    /// chunk's offset and the cursor) spare, reusable a grace period after `t0`.
    async fn take_back(&self, ranges: &[(u64, u64)], t0: u64) -> Result<Recovered, SmartError> {
        let nodes = self.ep.nodes();
        let mut rep = Recovered {
            used_bytes: ranges.iter().map(|(a, b)| b - a).sum(),
            ..Recovered::default()
        };
        // Every object takes at least MIN_OBJECT bytes: more than this many is a cycle.
        let cap = rep.used_bytes / crate::alloc::MIN_OBJECT + 2;
        let mut reached: Vec<Vec<(u64, u64)>> = nodes.iter().map(|_| Vec::new()).collect();
        let first = *nodes
            .first()
            .ok_or(SmartError::Config("the endpoint reaches no memory node"))?;
        let mut word = [0u8; 8];
        self.read(
            GlobalAddr::new(first, root_offset(self.cfg.root_slot)),
            &mut word,
        )
        .await?;
        mark(
            &mut reached,
            nodes,
            GlobalAddr::from_raw(u64::from_le_bytes(word)),
            TREE_META_LEN,
        );
        mark(&mut reached, nodes, self.root, NodeType::N256.bytes());
        let mut stack = Vec::from([(self.root, NodeType::N256)]);
        let mut leaf = [0u8; MAX_LEAF_BYTES];
        let cycle = SmartError::Corrupt {
            what: "tree",
            err: LayoutError::Inconsistent {
                what: "reaches more objects than its memory holds (a cycle)",
            },
        };
        while let Some((addr, ty)) = stack.pop() {
            rep.nodes += 1;
            if rep.nodes + rep.leaves > cap {
                return Err(cycle);
            }
            let img = self.read_node(addr, ty).await?;
            for s in img.live_slots() {
                match s.kind().map_err(corrupt("internal node slot"))? {
                    SlotKind::Node { addr, ty, .. } => {
                        mark(&mut reached, nodes, addr, ty.bytes());
                        stack.push((addr, ty));
                    }
                    SlotKind::Leaf { addr, bytes, .. } => {
                        let buf = leaf
                            .get_mut(..bytes)
                            .filter(|b| b.len() >= LEAF_STATUS_OFFSET + 8)
                            .ok_or(SmartError::Corrupt {
                                what: "internal node slot",
                                err: LayoutError::Inconsistent {
                                    what: "leaf size out of range",
                                },
                            })?;
                        let mut at = addr;
                        for hop in 0.. {
                            if hop == MAX_CHAIN {
                                return Err(cycle);
                            }
                            rep.leaves += 1;
                            mark(&mut reached, nodes, at, bytes);
                            self.read(at, buf).await?;
                            let rd = |o| remora_layouts::bits::read_u64(buf, o);
                            let lock = rd(leaf_lock_offset(bytes)).map_err(corrupt("leaf"))?;
                            if self.cfg.techniques.in_place_leaf && lock != 0 {
                                mark(
                                    &mut reached,
                                    nodes,
                                    redo_of(lock, at),
                                    self.max_leaf_bytes(),
                                );
                            }
                            let st = LeafStatus::decode(
                                rd(LEAF_STATUS_OFFSET).map_err(corrupt("leaf"))?,
                            )
                            .map_err(corrupt("leaf status"))?;
                            match st.forward() {
                                Some(f) if f != at => at = f,
                                _ => break,
                            }
                        }
                    }
                    SlotKind::Empty | SlotKind::Dead { .. } => {}
                }
            }
        }
        let mut spare = self.reclaim.borrow_mut();
        for (ix, (objs, &(lo, end))) in reached.iter_mut().zip(ranges).enumerate() {
            objs.sort_unstable();
            rep.reached_bytes += objs.iter().map(|o| o.1).sum::<u64>();
            let mut at = lo;
            for &(o, len) in objs.iter().chain([(end, 0)].iter()) {
                let to = o.min(end);
                if to > at && self.cfg.reclaim {
                    spare.add_spare(t0, ix, at, to);
                    rep.free_bytes += to - at;
                }
                at = at.max(o.saturating_add(len));
            }
        }
        Ok(rep)
    }
}

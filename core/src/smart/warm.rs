//! Warming a compute node's radix cache after a bulk load.
//!
//! The papers' clients load their keys themselves (dmemsys/SMART `test/ycsb_test.cpp`: every
//! client thread inserts its share of the load before the measured epochs), and every
//! internal node an insert reads goes into its compute node's cache (`search.rs`), so when
//! the run starts each compute node's cache holds the tree's internal nodes, as far as its
//! budget goes. A bulk load ([`Smart::bulk_load`]) writes the image without any client
//! walking it, so every cache would start cold, and a warm-up of a few operations per client
//! fills only the nodes its keys cross: over 2M keys (65k second-level nodes) the full-scale
//! report's 25k-77k warm-up operations left most lookups reading an internal node or two
//! before the leaf. [`Smart::warm_cache`] fills the cache the way the load would have: it
//! READs the internal nodes top down, level by level (each node once, through the fabric, as
//! a walk reads it), and keeps each as a walk does, until the next node would not fit the
//! budget: then the cache holds the top of the tree, which is what its replacement keeps
//! under a load too (walks stamp every node they cross, root first).
use super::Smart;
use super::config::SmartError;
use crate::bulk::WarmStats;
use crate::fabric::Endpoint;
use remora_layouts::GlobalAddr;
use remora_layouts::smart::{NodeType, SlotKind};
use std_alloc::vec::Vec;

/// Bounded attempts at the cache's exclusive guard per node (it is only contended if other
/// handles of the compute node are running: then the node is just not kept).
const GUARD_TRIES: u32 = 1024;

impl<E: Endpoint> Smart<'_, E> {
    /// Fills this compute node's radix cache with the tree's internal nodes, top down, as
    /// the clients' inserts of the same keys would have (see the module doc); returns what
    /// it read and kept. Meant for a freshly bulk-loaded tree before its clients run (one
    /// handle per compute node); on a tree in use it is correct too (nothing rests on the
    /// cache) but reads a snapshot that may already be stale. Without a cache it reads
    /// nothing.
    pub async fn warm_cache(&self) -> Result<WarmStats, SmartError> {
        let mut st = WarmStats::default();
        if !self.cfg.techniques.cache || self.node.cache(self.shard).is_none() {
            return Ok(st);
        }
        let mut level: Vec<(GlobalAddr, NodeType)> = Vec::new();
        let mut next: Vec<(GlobalAddr, NodeType)> = Vec::new();
        level.push((self.root, NodeType::N256));
        while !level.is_empty() {
            for &(addr, ty) in &level {
                if !self.room_for(ty) {
                    st.full = true;
                    return Ok(st);
                }
                let img = self.read_node(addr, ty).await?;
                st.read += 1;
                if self.keep(&img) {
                    st.cached += 1;
                }
                for s in img.live_slots() {
                    if let Ok(SlotKind::Node { addr, ty, .. }) = s.kind() {
                        next.push((addr, ty));
                    }
                }
            }
            st.levels += 1;
            core::mem::swap(&mut level, &mut next);
            next.clear();
        }
        Ok(st)
    }

    /// Whether the cache holds one more node of type `ty` without evicting (true when its
    /// guard is busy: the fill then decides).
    fn room_for(&self, ty: NodeType) -> bool {
        self.node.cache(self.shard).is_none_or(|c| c.fits(ty))
    }

    /// Keeps `img` in the cache; whether it was kept.
    fn keep(&self, img: &super::remote::NodeImg) -> bool {
        for _ in 0..GUARD_TRIES {
            if let Some(mut c) = self.node.cache_mut() {
                c.put(img);
                return true;
            }
            core::hint::spin_loop();
        }
        false
    }
}

//! Bulk loading (issue 25): the tree for a set of sorted keys built in the memory node's
//! region at memory speed, by the server's own code, instead of one insert (two round trips
//! and an applier message each, plus every resize) per key.
//!
//! The image is the one the server's rebuild makes (`resize.rs`, `rebuild_all`) for those
//! keys: the same shape rule ([`repack_plan`], shared with the rebuild), data nodes written
//! by the same `write_node` (items encoded and checksummed as the applier leaves them:
//! opflag insert, ticket 0, `valid` clear, meta word's bitmap marking them live, lock words
//! 0), a sealed header and prefix array with the pool table in a fresh area, the data array
//! and area persisted, then published by the one persisted store of the root slot. So a
//! bulk-loaded tree is the tree a rebuild of an insert-grown tree of the same keys is:
//!
//! - [`Growth::Split`]: every data node half full (the rebuild's packing), where inserts
//!   leave nodes half to fully used (the splits since the last rebuild); the same height,
//!   segments and node size, more data nodes.
//! - [`Growth::WholeLevel`] (the paper's geometry): a data node per last-level character at
//!   the smallest height where none holds more than `slots - 1` keys. Inserts reach the
//!   same, except that keys inserted after the last rebuild whose prefix had no character
//!   yet share a neighbour's node (the paper's last data node) until a node's worth of them
//!   forces the next rebuild, and a node may fill to `slots` before it does.
//!
//! Lookups, writes, resizes, scans and crash recovery then run on it as on any tree.
use super::build::{Plan, plan, plan_per_char};
use super::server::{CanrtServer, Growth, bad_layout, invalid};
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use remora_layouts::LayoutError;
use remora_layouts::canrt::{DataGeometry, MAX_DATA_NODES, ROOT_SLOT, TreeHeader};
use remora_layouts::region::root_offset;
use std_alloc::vec::Vec;

/// The plan a repack of `keys` (sorted, distinct) into data nodes of `slots` slots makes
/// under `growth`: the rule of every rebuild, and of a bulk load.
///
/// - [`Growth::Split`]: half full, unless that many nodes would leave less than half the
///   node-id space to split into: then fuller (at most one slot short of full).
/// - [`Growth::WholeLevel`]: the paper's addHeight, the smallest height at which no node is
///   full (one slot short of it, so the node reported full is split by its next character).
pub(super) fn repack_plan(
    growth: Growth,
    slots: u32,
    keys: &[u128],
    key_len: u32,
) -> Result<Option<Plan>, LayoutError> {
    let short = (slots as usize).saturating_sub(1).max(1);
    match growth {
        Growth::WholeLevel => plan_per_char(keys, short, key_len),
        Growth::Split => {
            let half = (slots as usize / 2).max(1);
            let room = (MAX_DATA_NODES / 2) as usize;
            let target = half.max(keys.len().div_ceil(room)).min(short);
            plan(keys, target, key_len)
        }
    }
}

impl CanrtServer {
    /// Builds and publishes the tree of `pairs` (key, value; sorted by key, keys distinct,
    /// values at most `g.value_cap` bytes) in a region that holds no tree yet, with this
    /// server's growth rule (see the module comment), and returns its header. Run it before
    /// any client opens the tree (on the memory node's CPU, or on its image before the
    /// cluster starts); the server is then the one that formatted it. An error (a region
    /// with a tree already, keys out of order or too wide, a value too long, no room) leaves
    /// nothing published.
    pub fn bulk_load(
        &mut self,
        region: &dyn LocalRegion,
        g: DataGeometry,
        pairs: &[(u128, Vec<u8>)],
    ) -> Result<TreeHeader, FabricError> {
        let root = root_offset(ROOT_SLOT);
        if region.load_u64(root)? != 0 || self.tree.is_some() {
            return Err(invalid(
                region,
                root,
                "bulk load into a region that holds a CANRT tree already",
            ));
        }
        if pairs.iter().any(|(_, v)| v.len() > g.value_cap as usize) {
            return Err(invalid(
                region,
                root,
                "bulk load: a value is over value_cap",
            ));
        }
        let keys: Vec<u128> = pairs.iter().map(|p| p.0).collect();
        let p = repack_plan(self.growth, g.slots, &keys, g.key_len)
            .map_err(bad_layout(region, root))?
            .ok_or_else(|| invalid(region, root, "no tree shape holds the keys"))?;
        drop(keys);
        // Epoch 1, as a formatted tree's: no client has seen an older one.
        self.rebuild_into(region, g, 1, &p, pairs)?;
        self.tree(region)
    }
}

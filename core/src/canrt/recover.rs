//! Crash recovery of a CANRT memory node (paper §3.6).
use super::keys::load_key;
use super::server::*;
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use remora_layouts::canrt::{LOCK_OFF, ROOT_SLOT, hole_tail};
use remora_layouts::region::root_offset;

impl CanrtServer {
    /// Crash recovery (§3.6), run before any client connects: drops reserved slots, replays
    /// the lock holder's complete unprocessed item, unfreezes an interrupted resize's tree
    /// (the root slot still names it, so the resize never happened), resets every lock
    /// to free, and takes back the free pool (retired arrays' memory) and the shadow area
    /// from the published area's pool table.
    pub fn recover(&mut self, region: &dyn LocalRegion) -> Result<RecoveryReport, FabricError> {
        if self.resizing {
            // The interrupted resize ends here (its tree is unfrozen below).
            self.stats.resize_clock.end();
        }
        *self = CanrtServer {
            stats: self.stats.clone(),
            // The growth rule is the server's configuration, not state of the crashed run.
            growth: self.growth,
            ..CanrtServer::new()
        };
        let mut r = RecoveryReport::default();
        if region.load_u64(root_offset(ROOT_SLOT))? == 0 {
            return Ok(r);
        }
        let h = self.tree(region)?;
        let view = self.view_of(region, &h)?;
        let g = h.data();
        let isz = g.item_size() as usize;
        let mut item = [0u8; remora_layouts::canrt::MAX_ITEM];
        for id in 0..h.n_data {
            let off = h.data_node_off(id);
            r.nodes += 1;
            let mut m = self.front(region, &h, off)?;
            if m.frozen() {
                r.unfrozen += 1;
            }
            // Reserved slots (a live slot whose item is unprocessed: a skipped holder's hole
            // or its late append, see `skip_ticket`) go: the connections that could append
            // into them are gone. Each becomes a hole, persisted before the store that frees
            // it, so it is never replayed below, or by a later recovery.
            let mut dropped = 0u32;
            for s in 0..g.slots {
                if m.bitmap() & (1 << s) == 0 {
                    continue;
                }
                if Self::reserved_slot(region, g, off, s)? {
                    let tail_off = off + g.tail_off(s);
                    region.store_u64(tail_off, hole_tail(0))?;
                    region.persist(tail_off, 8);
                    dropped |= 1 << s;
                    continue;
                }
                region.read(off + g.slot_off(s), &mut item[..isz])?;
                if g.decode_item(&item[..isz]).is_err() {
                    r.corrupt += 1;
                }
            }
            r.unreserved += dropped.count_ones();
            m = m.with_bitmap(m.bitmap() & !dropped);
            // At most one unprocessed item per node belongs to the holder: only the lock
            // holder appends, and every processed item's valid bit is persisted clear before
            // the release. Its ticket is the served one; a complete item with another ticket
            // is one the applier refused at run time (or a skipped holder's late append)
            // and stays out.
            let holder = m.served();
            for s in 0..g.slots {
                if m.bitmap() & (1 << s) != 0 {
                    continue;
                }
                region.read(off + g.slot_off(s), &mut item[..isz])?;
                if let Ok(it) = g.decode_item(&item[..isz])
                    && it.valid
                    && it.ticket == holder
                {
                    let (key, op) = (it.key, it.op);
                    m = Self::commit(region, g, off, s, key, op, m, false)?;
                    r.replayed += 1;
                }
            }
            // Items this tree routes elsewhere: a split published before its moved items
            // left the full node.
            let mut bm = m.bitmap();
            for s in 0..g.slots {
                if bm & (1 << s) != 0 {
                    let k = load_key(region, &g, off + g.slot_off(s))?;
                    if view.rank(id).is_none() || view.locate(k).ok() != Some(id) {
                        bm &= !(1 << s);
                        r.trimmed += 1;
                    }
                }
            }
            let m = m.with_bitmap(bm).with_frozen(false).with_epoch(h.epoch);
            Self::store_meta(region, off, m)?;
            region.store_u64(off + LOCK_OFF, m.served())?;
            region.persist(off, g.node_size() as usize);
        }
        self.load_bounds(region, &h)?;
        // The free memory of retired data arrays, and the shadow area, as the published
        // area's pool table records them (`pool.rs`).
        self.load_pool(region, &h)?;
        Ok(r)
    }
}

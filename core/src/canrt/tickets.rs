//! Lock tickets on the memory node (paper §3.3's FETCH_AND_ADD lock, server side): a
//! holder's release, skipping a dead holder's ticket after a lease, and telling waiters
//! their turn.
use super::server::*;
use crate::fabric::FabricError;
use crate::server::{LocalRegion, Replies};
use remora_layouts::canrt::{
    Control, ItemOp, LOCK_OFF, Meta, SHORT_EPOCH_MASK, SKIP_DRAIN, TICKET_MASK, TreeHeader, Turn,
};
use std_alloc::vec::Vec;

/// Resize waits remembered at once (the oldest is forgotten; it starts over).
const MAX_DRAIN_WAITS: usize = 256;

/// Lock waiters remembered at once (past it, a `Wait` is answered at once and its client
/// looks for its turn itself).
const MAX_LOCK_WAITERS: usize = 1 << 14;

impl CanrtServer {
    /// The holder of `c.ticket` hands its lock back. A node of an older data array (a full
    /// rebuild moved every item out of it) needs no release: false. The node's epoch may
    /// have changed since the holder read it (a split published meanwhile): the ticket is
    /// still this node's, and is released.
    pub(super) fn unlock(
        &mut self,
        region: &dyn LocalRegion,
        c: &Control,
    ) -> Result<bool, FabricError> {
        let h = self.tree(region)?;
        if c.arg != h.array_gen as u32 || c.node >= h.n_data {
            return Ok(false);
        }
        let off = self.node_off(region, &h, c.node)?;
        self.touched.push(c.node);
        let front = self.front(region, &h, off)?;
        if behind(c.ticket as u64, front.served()) {
            // Skipped after a lease (its holder stalled): there is nothing to hand back. A
            // holder hands back only a ticket it appends nothing under, so the slot reserved
            // for it (if any) is freed at the node's next release.
            let slot = self
                .reserved
                .range((c.node, 0)..=(c.node, u32::MAX))
                .find(|&(_, &t)| t == c.ticket as u16)
                .map(|(&k, _)| k);
            if let Some(k) = slot {
                self.reserved.remove(&k);
                *self.freeing.entry(c.node).or_insert(0) |= 1 << k.1;
            }
            ServerStats::bump(&self.stats.late);
            return Ok(false);
        }
        // The ticket must be the served one, and handed out: a message naming the served
        // ticket of a free lock would run `served` ahead of the lock word for good.
        if front.served() != c.ticket as u64 || Self::outstanding(region, off, front)? == 0 {
            return Err(invalid(
                region,
                off,
                "unlock by a client that does not hold the lock",
            ));
        }
        Self::release(region, off, self.unreserve(c.node, front))?;
        ServerStats::bump(&self.stats.unlocks);
        Ok(true)
    }

    /// Tickets handed out on the node at `off` and not yet served (the holder's included).
    pub(super) fn outstanding(
        region: &dyn LocalRegion,
        off: u64,
        front: Meta,
    ) -> Result<u64, FabricError> {
        let lock = region.load_u64(off + LOCK_OFF)?;
        Ok(lock.wrapping_sub(front.served()) & TICKET_MASK)
    }

    /// Ticket `ticket` of the node at `off` has been served for a lease without its holder
    /// appending or handing it back (a waiter's report, or a stalled drain): the holder's
    /// complete item, if it is in a free slot, is applied (its notice may still be on the
    /// way, and is then ignored); otherwise the ticket is skipped, and an append it sends
    /// later is refused. True if the ticket moved on.
    ///
    /// A skipped holder may have seen its turn and be about to append (stalled, not dead):
    /// its append would land in the first free slot of the bitmap it saw, which is this
    /// one (a node's bitmap changes only with its served ticket, or on a frozen node nobody
    /// appends to). The same store that serves the next ticket marks that slot live, after
    /// its tail got `valid` set ([`Self::reserve`]): a *reserved* slot, which readers skip,
    /// the next holders do not pick and resizes keep, so the late append cannot land on an
    /// item of the tree. It is freed at the node's release after the late append's notice
    /// (`apply`), dropped by recovery, carried by a rebuild to the node later built in its
    /// frame (`pool.rs`), and otherwise stays (a dead holder's), at the cost of one slot.
    fn skip_ticket(
        &mut self,
        region: &dyn LocalRegion,
        h: &TreeHeader,
        id: u32,
        ticket: u64,
    ) -> Result<bool, FabricError> {
        let off = self.node_off(region, h, id)?;
        self.touched.push(id);
        let front = self.front(region, h, off)?;
        if front.served() != ticket || Self::outstanding(region, off, front)? == 0 {
            // It moved on meanwhile, or nobody holds it: nothing to do.
            return Ok(false);
        }
        let g = h.data();
        let isz = g.item_size() as usize;
        let mut item = [0u8; remora_layouts::canrt::MAX_ITEM];
        let mut m = front;
        for s in 0..g.slots {
            if front.bitmap() & (1 << s) != 0 {
                continue;
            }
            region.read(off + g.slot_off(s), &mut item[..isz])?;
            if let Ok(it) = g.decode_item(&item[..isz])
                && it.valid
                && it.ticket == ticket
            {
                let (key, op) = (it.key, it.op);
                if !self.routes_to(region, h, key, id)? {
                    // Located with a tree before a split that sends its key elsewhere now
                    // (see `apply`): refused, its writer sees it unprocessed and writes again.
                    ServerStats::bump(&self.stats.refused);
                    break;
                }
                let free = self.unreserve(id, front);
                m = Self::commit(region, g, off, s, key, op, free, true)?;
                if op != ItemOp::Delete
                    && let Some(b) = self.bounds.get_mut(id as usize)
                {
                    *b = super::resize::widen(*b, key);
                }
                ServerStats::bump(&self.stats.applied);
                break;
            }
        }
        if m == front {
            // No item of the holder's applied (which would have served the next ticket): its
            // slot is reserved (a holder of a full node asks for a resize and has none).
            let mut next = self.unreserve(id, front);
            let free = !front.bitmap() & g.full_bitmap();
            if free != 0 {
                let s = free.trailing_zeros();
                Self::reserve(region, g, off, s, ticket)?;
                next = next.with_bitmap(next.bitmap() | 1 << s);
                self.reserved.insert((id, s), ticket as u16);
            }
            Self::release(region, off, next)?;
        }
        ServerStats::bump(&self.stats.skipped);
        Ok(true)
    }

    /// A `Skip` control message (see [`ControlKind::Skip`]).
    pub(super) fn skip(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        c: &Control,
    ) -> Result<(), FabricError> {
        let h = self.tree(region)?;
        if c.arg != h.array_gen as u32 {
            return Ok(());
        }
        if c.node != SKIP_DRAIN {
            if c.node >= h.n_data {
                return Err(invalid(
                    region,
                    h.data_off,
                    "skip of a data node beyond the tree",
                ));
            }
            self.skip_ticket(region, &h, c.node, c.ticket as u64)?;
            return Ok(());
        }
        if !self.resizing {
            return Ok(());
        }
        // Two requests of one wait, a lease apart (consecutive lease counts): tickets served
        // at both and still outstanding on a frozen node are stuck.
        let mut now = Vec::with_capacity(self.undrained.len());
        for &id in &self.undrained {
            if id < h.n_data {
                now.push((id, self.front(region, &h, h.data_node_off(id))?.served()));
            }
        }
        let (wait, leases) = (c.ticket, c.epoch);
        let prev = self
            .drain_seen
            .iter()
            .position(|d| d.conn == conn && d.wait == wait);
        let before = match prev {
            Some(i) => {
                let d = &mut self.drain_seen[i];
                let consecutive = d.leases.wrapping_add(1) & SHORT_EPOCH_MASK as u8 == leases;
                d.leases = leases;
                let before = core::mem::replace(&mut d.served, now.clone());
                consecutive.then_some(before)
            }
            None => {
                if self.drain_seen.len() >= MAX_DRAIN_WAITS {
                    self.drain_seen.remove(0);
                }
                self.drain_seen.push(DrainSeen {
                    conn,
                    wait,
                    leases,
                    served: now.clone(),
                });
                None
            }
        };
        if let Some(before) = before {
            for (id, t) in before {
                if now.contains(&(id, t)) {
                    self.skip_ticket(region, &h, id, t)?;
                }
            }
        }
        Ok(())
    }

    /// A `Wait` (see [`ControlKind::Wait`]): answered now if the ticket is served (or passed,
    /// or not one handed out, or about another data array), else when it is served.
    pub(super) fn wait(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        c: &Control,
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let h = self.tree(region)?;
        let ticket = c.ticket as u16;
        let stale = Turn {
            stale: true,
            applied: false,
            ticket,
            node: c.node,
            meta: Meta(0),
        };
        if c.arg != h.array_gen as u32 || c.node >= h.n_data {
            replies.send(&stale.encode());
            return Ok(());
        }
        let off = h.data_node_off(c.node);
        let front = self.front(region, &h, off)?;
        let ahead = (c.ticket as u64).wrapping_sub(front.served()) & TICKET_MASK;
        if ahead == 0
            || ahead >= Self::outstanding(region, off, front)?
            || self.waiters.len() >= MAX_LOCK_WAITERS
        {
            // Its turn, passed, not a ticket handed out, or no room to remember it.
            let t = Turn {
                stale: false,
                applied: false,
                ticket,
                node: c.node,
                meta: front,
            };
            replies.send(&t.encode());
            return Ok(());
        }
        self.waiters.insert((c.node, ticket), conn);
        Ok(())
    }

    /// Tells the waiters of the data nodes this message touched whose ticket is now served.
    pub(super) fn wake(&mut self, region: &dyn LocalRegion, conn: usize, replies: &mut Replies) {
        let Some(h) = self.tree else {
            self.touched.clear();
            return;
        };
        while let Some(id) = self.touched.pop() {
            if self.waiters.is_empty() {
                self.touched.clear();
                return;
            }
            if id >= h.n_data {
                continue;
            }
            let Ok(front) = self.front(region, &h, h.data_node_off(id)) else {
                continue;
            };
            let ticket = front.served() as u16;
            if let Some(to) = self.waiters.remove(&(id, ticket)) {
                let t = Turn {
                    stale: false,
                    applied: false,
                    ticket,
                    node: id,
                    meta: front,
                }
                .encode();
                if to == conn {
                    replies.send(&t);
                } else {
                    replies.send_to(to, &t);
                }
            }
        }
    }
}

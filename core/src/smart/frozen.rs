//! Frozen nodes: a search that meets one waits, and once it has stayed frozen for a lease
//! (or at once, for the client that froze it and lost its swing) finishes the replacement
//! itself: completes the freeze, copies the live slots (compacted: dead slots dropped) and
//! swings the parent slot to the copy, or, when no live slot is left, empties (Node256) or
//! kills the parent slot. Racing helpers are harmless: one swing wins.
use super::config::SmartError;
use super::remote::NodeImg;
use super::search::Parent;
use super::structure::{fit, is_live};
use super::{Pace, Smart, bump};
use crate::fabric::Endpoint;
use crate::lease::{Verdict, Waiter};
use remora_layouts::smart::MAX_NODE_BYTES;

impl<'e, E: Endpoint> Smart<'e, E> {
    /// Finishes the grow of frozen node `img` (reached through `parent`) for a grower that
    /// died or lost its parent slot: freezes what is left, copies the node (to a larger type
    /// only if it is full) and swings the parent slot to the copy. Any number of helpers may
    /// race; one swing wins and the others free their copies.
    /// Returns whether our copy replaced the node.
    pub(crate) async fn help_grow(
        &self,
        img: &NodeImg,
        parent: &Parent,
    ) -> Result<bool, SmartError> {
        if !img.header.is_frozen() || img.header.is_obsolete() || parent.slot.is_frozen() {
            return Ok(false);
        }
        // Each node image lives in its own block, dead before the next await that does not
        // need it: a lookup that waits on a frozen node carries this future in its frame,
        // and three images of the largest node held to the end would triple it.
        let (n, ty) = {
            let Some(slots) = self.complete_freeze(img).await? else {
                return Ok(false);
            };
            let live = &slots[..img.ty().capacity()];
            // Only live slots are copied (dead ones are dropped): a node left with none is
            // removed from its parent instead (no copy: `swing_to_copy` reads no slot).
            let count = live.iter().filter(|s| is_live(s)).count();
            if count == 0 {
                let done = self.swing_to_copy(img, parent, None, &[]).await?;
                if done {
                    bump(&self.stats.repairs);
                }
                return Ok(done);
            }
            let ty = fit(count + 1);
            let na = self.alloc_node(ty).await?;
            (self.copy_of(img, &slots, na, ty, parent, None)?, ty)
        };
        {
            let mut nimg = [0u8; MAX_NODE_BYTES];
            let nb = n.encode(&mut nimg);
            self.write(n.addr, &nimg[..nb]).await?;
        }
        // The copy holds exactly the node's live slots (`copy_of`): their reverse pointers
        // are the ones `swing_to_copy` moves to the copy.
        let live = &n.slots[..];
        if self.swing_to_copy(img, parent, Some(&n), live).await? {
            bump(&self.stats.grows);
            bump(&self.stats.repairs);
            Ok(true)
        } else {
            self.free(n.addr, ty.bytes());
            Ok(false)
        }
    }

    /// A search met frozen node `node` (through `parent`): waits a little (the caller then
    /// restarts from the root), and once the node has stayed frozen, unchanged, for a lease
    /// — or at once if `mine` (we froze it and lost our swing) — finishes its grow; or, if
    /// the parent slot is frozen too, the parent's (through `grand`). `fresh`: the path came
    /// from the root, not the cache, so `path` (the parent and grandparent slots) is current.
    pub(crate) async fn wait_frozen(
        &self,
        pace: &mut Pace,
        waiter: &mut Option<(Waiter, u64)>,
        node: &NodeImg,
        path: (Option<Parent>, Option<Parent>),
        fresh: bool,
        mine: bool,
    ) -> Result<(), SmartError> {
        let (parent, grand) = path;
        let now = self.ep.now_ns();
        let word = node.header.raw() ^ node.addr.raw().rotate_left(7) | 1;
        let (w, since) = waiter.get_or_insert_with(|| (Waiter::new(self.cfg.lease, now), now));
        let mut verdict = w.observe(word, now);
        if pace.count() >= self.cfg.max_restarts {
            verdict = Verdict::GiveUp {
                word,
                waited_ns: now.saturating_sub(*since),
            };
        }
        let help = matches!(verdict, Verdict::Expired { .. }) || mine;
        if help
            && fresh
            && let Some(p) = parent
        {
            if !p.slot.is_frozen() {
                if self.help_grow(node, &p).await? {
                    return Ok(());
                }
            } else if let Some(g) = grand {
                // The parent is frozen as well: its grow comes first.
                let pimg = self.read_node(p.addr, p.header.node_type()).await?;
                if self.help_grow(&pimg, &g).await? {
                    return Ok(());
                }
            }
        }
        match verdict {
            Verdict::Wait(ns) => {
                self.ep.pause(ns).await;
                Ok(())
            }
            Verdict::Expired { .. } => Ok(()),
            Verdict::GiveUp { waited_ns, .. } => Err(SmartError::Held {
                what: "internal node frozen by a grow (grower unknown)",
                at: node.addr,
                word: node.header.raw(),
                holder: 0,
                waited_ns,
            }),
        }
    }

    /// Removes node `node` (header `h`, reached through `parent`), which a delete just left
    /// without a live slot, or shrinks it when its live slots fit a smaller type
    /// (`structure::compacts`): freezes it and lets [`Self::help_grow`] finish the
    /// replacement (the parent slot empties or dies, or swings to a compacted copy; a key
    /// inserted meanwhile is kept in the copy). Anyone finishes it if we stop half-way, as
    /// for a grow.
    pub(crate) async fn remove_node(
        &self,
        node: remora_layouts::GlobalAddr,
        h: remora_layouts::smart::Header,
        parent: &Parent,
    ) -> Result<(), SmartError> {
        use remora_layouts::smart::{NODE_HEADER_OFFSET, NodeType};
        let h = h.frozen(false);
        if h.node_type() == NodeType::N256 || parent.slot.is_frozen() {
            return Ok(());
        }
        // The parent slot may come from the cache: check it first, so that a stale one
        // does not leave the node frozen until someone helps after a lease.
        let mut word = [0u8; 8];
        let slot_at = parent
            .addr
            .add(remora_layouts::smart::slot_offset(parent.idx) as u64);
        self.read(slot_at, &mut word).await?;
        if u64::from_le_bytes(word) != parent.slot.raw() {
            return Ok(());
        }
        let hdr = node.add(NODE_HEADER_OFFSET as u64);
        if self.cas(hdr, h.raw(), h.frozen(true).raw()).await? != h.raw() {
            return Ok(());
        }
        let img = self.read_node(node, h.node_type()).await?;
        if img.header == h.frozen(true) {
            self.help_grow(&img, parent).await?;
        }
        Ok(())
    }
}

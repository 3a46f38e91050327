//! The state CANRT keeps per compute node: the cached prefix array (the tree's header and
//! prefix nodes, [`TreeView`]), shared by every client thread's handle of the node (paper
//! §3.2: the compute node caches the prefix nodes). One thread's reload after a resize serves
//! every thread of the node, and the node holds one copy of the array, not one per thread.
//!
//! The slot is behind the sharded try-RW guard: a handle takes the node's view under a
//! shared guard (one `Arc` clone) and publishes a newer one under the exclusive guard;
//! either is skipped while another thread holds the guard (the handle keeps its own view,
//! which stays valid: a stale view is caught by the data nodes' epochs).
use super::view::TreeView;
use super::{Canrt, CanrtConfig, CanrtError};
use crate::fabric::Endpoint;
use crate::smart::shared::TryRw;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std_alloc::sync::Arc;

/// Per-compute-node state of one CANRT tree. `Sync`: share it (in an `Arc`) among the
/// handles of every client thread of one compute node ([`super::Canrt::open_on`]).
pub struct CanrtNode {
    view: TryRw<Option<Arc<TreeView>>>,
    handles: AtomicU32,
}

impl CanrtNode {
    /// Fresh state: no view yet (the first handle's load fills it).
    pub fn new() -> CanrtNode {
        CanrtNode {
            view: TryRw::new(None),
            handles: AtomicU32::new(0),
        }
    }

    /// A reader shard for a new handle.
    pub(crate) fn shard(&self) -> usize {
        self.handles.fetch_add(1, Relaxed) as usize
    }

    /// The newer of `v` and the node's view: the node's if it is the same tree at an epoch
    /// at least `v`'s (so the node keeps one copy), else `v`, which then becomes the node's.
    pub(crate) fn share(&self, shard: usize, v: Arc<TreeView>) -> Arc<TreeView> {
        if let Some(cur) = self.view.read(shard).and_then(|g| g.clone())
            && cur.header.epoch >= v.header.epoch
        {
            return cur;
        }
        if let Some(mut g) = self.view.write()
            && g.as_ref()
                .is_none_or(|cur| cur.header.epoch < v.header.epoch)
        {
            *g = Some(v.clone());
        }
        v
    }

    /// The node's view if it is newer than epoch `than`.
    pub(crate) fn newer(&self, shard: usize, than: u32) -> Option<Arc<TreeView>> {
        self.view
            .read(shard)
            .and_then(|g| g.clone())
            .filter(|v| v.header.epoch > than)
    }

    /// Bytes of the prefix array the node holds (0 before the first load).
    pub fn prefix_bytes(&self) -> usize {
        self.view
            .read(0)
            .and_then(|g| g.as_ref().map(|v| v.prefix_bytes().len()))
            .unwrap_or(0)
    }
}

impl<'e, E: Endpoint> Canrt<'e, E> {
    /// Opens the tree on `cfg.node` (see [`Canrt::open_on`]) with a prefix cache of its own
    /// (a compute node of one thread).
    pub async fn open(ep: &'e E, cfg: CanrtConfig) -> Result<Canrt<'e, E>, CanrtError> {
        Self::open_on(ep, cfg, Arc::new(CanrtNode::new())).await
    }
}

impl Default for CanrtNode {
    fn default() -> Self {
        CanrtNode::new()
    }
}

const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<CanrtNode>();
};

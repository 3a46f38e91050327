//! A Sherman tree's descriptor (on the first memory node), and creating and opening a tree:
//! a handle is the thread's endpoint, its allocators and lock placement, and its compute
//! node's shared state ([`ShermanNode`]).
use super::hooks::encode_root_over;
use super::lock::Locks;
use super::node::{NodeCache, ShermanNode};
use super::tree::{RepairStats, Sherman, encode_leaf};
use super::{ShermanConfig, ShermanError};
use crate::alloc::RemoteAllocator;
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::lease::LeaseConfig;
use core::cell::{Cell, RefCell};
use remora_layouts::region::{HEADER_LEN as REGION_HEADER_LEN, RegionHeader, root_offset};
use remora_layouts::sherman::{Geometry, KEY_INFINITY};
use remora_layouts::{GlobalAddr, NodeId};
use std_alloc::sync::Arc;
use std_alloc::vec;
use std_alloc::vec::Vec;

/// `b"SHERMAN2"` (version 2 added the redo pointer tables).
pub(super) const DESC_MAGIC: u64 = u64::from_le_bytes(*b"SHERMAN2");
pub(super) const DESC_LEN: usize = 192;
pub(super) const D_ROOT: u64 = 8;
pub(super) const D_CLIENTS: u64 = 40;
pub(super) const MAX_NODES: usize = 8;

/// The tree's descriptor, stored once on the first memory node:
/// magic, root, page size, value size, flags (bit 0: on-chip locks), clients (FAA counter),
/// host lock-table entries, node count, host lock table per node, redo pointer table per
/// node (one word per lock word, see `redo.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Descriptor {
    pub(super) root: GlobalAddr,
    pub(super) page_size: u64,
    pub(super) value_size: u64,
    pub(super) onchip: bool,
    pub(super) host_locks: u64,
    pub(super) tables: [u64; MAX_NODES],
    pub(super) redo: [u64; MAX_NODES],
}

impl Descriptor {
    pub(super) fn encode(&self) -> [u8; DESC_LEN] {
        let mut b = [0u8; DESC_LEN];
        let words = [
            DESC_MAGIC,
            self.root.raw(),
            self.page_size,
            self.value_size,
            self.onchip as u64,
            0,
            self.host_locks,
            0,
        ];
        let all = words
            .iter()
            .chain(self.tables.iter())
            .chain(self.redo.iter());
        for (i, w) in all.enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    pub(super) fn decode(b: &[u8; DESC_LEN]) -> Option<Descriptor> {
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        if w(0) != DESC_MAGIC {
            return None;
        }
        Some(Descriptor {
            root: GlobalAddr::from_raw(w(1)),
            page_size: w(2),
            value_size: w(3),
            onchip: w(4) & 1 == 1,
            host_locks: w(6),
            tables: core::array::from_fn(|i| w(8 + i)),
            redo: core::array::from_fn(|i| w(8 + MAX_NODES + i)),
        })
    }
}

pub(super) struct NodeLocks {
    pub(super) node: NodeId,
    pub(super) dm_locks: u64,
    pub(super) host_table: GlobalAddr,
    pub(super) host_locks: u64,
    /// Redo pointers, one per lock word of this node (`redo.rs`).
    pub(super) redo_table: GlobalAddr,
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// Creates the tree and publishes it in `cfg.root_slot` of the first memory node, or
    /// opens the one already there (so concurrent creators agree on one tree); the handle
    /// shares `node` with the other handles of its compute node.
    pub async fn create_on(
        ep: &'e E,
        cfg: ShermanConfig,
        node: Arc<ShermanNode>,
    ) -> Result<Self, ShermanError> {
        Self::create_with(ep, cfg, node, None).await
    }

    /// [`Self::create_on`]; with `leaf`, the first leaf is that image (another leaf format:
    /// CHIME's, see `hooks.rs`) under a level-1 root, so the tree's own pages are internal.
    pub(super) async fn create_with(
        ep: &'e E,
        cfg: ShermanConfig,
        node: Arc<ShermanNode>,
        leaf: Option<&[u8]>,
    ) -> Result<Self, ShermanError> {
        let g = Geometry::new(cfg.page_size, cfg.value_size).map_err(ShermanError::Config)?;
        let first = *ep.nodes().first().ok_or(ShermanError::NoTree {
            slot: cfg.root_slot,
        })?;
        let qp = ep.qp(first)?;
        let slot = GlobalAddr::new(first, root_offset(cfg.root_slot));
        let mut cur = [0u8; 8];
        qp.read(slot, &mut cur).await?;
        if u64::from_le_bytes(cur) != 0 {
            return Self::open_on(ep, cfg, node).await;
        }
        let mut tables = [0u64; MAX_NODES];
        let mut redo = [0u64; MAX_NODES];
        let mut host_locks = u64::MAX;
        for (i, &n) in ep.nodes().iter().enumerate().take(MAX_NODES) {
            let q = ep.qp(n)?;
            let a = RemoteAllocator::open(q).await?;
            let count = (a.chunk_size() / 8).min(1 << 15);
            host_locks = host_locks.min(count);
            let zeros = vec![0u8; (count * 8) as usize];
            let t = a.alloc_chunk(q).await?;
            q.write(t, &zeros).await?;
            tables[i] = t.raw();
            // The redo pointers: as many words as there are lock words (device-memory locks
            // are capped to the same count in `open`).
            let r = a.alloc_chunk(q).await?;
            q.write(r, &zeros).await?;
            redo[i] = r.raw();
        }
        let a0 = RemoteAllocator::open(qp).await?;
        let root = a0.alloc(qp, cfg.page_size as u64).await?;
        let desc_addr = a0.alloc(qp, DESC_LEN as u64).await?;
        let mut page = vec![0u8; g.page_size];
        match leaf {
            None => encode_leaf(&mut page, &g, cfg.page_check, 1, 0, KEY_INFINITY, 0, &[]),
            Some(img) => {
                let at = a0.alloc(qp, img.len() as u64).await?;
                qp.write(at, img).await?;
                encode_root_over(&mut page, &g, at);
            }
        }
        let d = Descriptor {
            root,
            page_size: cfg.page_size as u64,
            value_size: cfg.value_size as u64,
            onchip: cfg.onchip_locks,
            host_locks,
            tables,
            redo,
        };
        let img = d.encode();
        qp.post(&mut [
            Op::Write {
                remote: root,
                local: &page,
            },
            Op::Write {
                remote: desc_addr,
                local: &img,
            },
        ])
        .await?;
        let old = qp.cas(slot, 0, desc_addr.raw()).await?;
        let _ = old; // 0: ours is published; else another creator won and we open theirs.
        Self::open_on(ep, cfg, node).await
    }

    /// Opens the tree published in `cfg.root_slot`. Lock placement comes from the tree (all
    /// handles must agree); the other switches are this handle's. The handle shares `node`
    /// with the other handles of its compute node.
    pub async fn open_on(
        ep: &'e E,
        cfg: ShermanConfig,
        node: Arc<ShermanNode>,
    ) -> Result<Self, ShermanError> {
        let g = Geometry::new(cfg.page_size, cfg.value_size).map_err(ShermanError::Config)?;
        let no_tree = ShermanError::NoTree {
            slot: cfg.root_slot,
        };
        let first = *ep.nodes().first().ok_or(no_tree)?;
        let qp = ep.qp(first)?;
        let mut b = [0u8; 8];
        qp.read(GlobalAddr::new(first, root_offset(cfg.root_slot)), &mut b)
            .await?;
        let desc = GlobalAddr::from_raw(u64::from_le_bytes(b));
        if desc.is_null() || desc.node() != first {
            return Err(no_tree);
        }
        let mut img = [0u8; DESC_LEN];
        qp.read(desc, &mut img).await?;
        let d = Descriptor::decode(&img).ok_or(no_tree)?;
        if d.page_size != cfg.page_size as u64 || d.value_size != cfg.value_size as u64 {
            return Err(no_tree);
        }
        let tag = qp.faa(desc.add(D_CLIENTS), 1).await? + 1;
        let mut nodes = Vec::new();
        let mut allocs = Vec::new();
        for (i, &n) in ep.nodes().iter().enumerate().take(MAX_NODES) {
            let q = ep.qp(n)?;
            let mut hb = [0u8; REGION_HEADER_LEN];
            q.read(GlobalAddr::new(n, 0), &mut hb).await?;
            let rh = RegionHeader::decode(&hb).map_err(|why| ShermanError::Corrupt {
                addr: GlobalAddr::new(n, 0),
                why,
            })?;
            let host_locks = if d.host_locks == 0 {
                0
            } else {
                1u64 << (63 - d.host_locks.leading_zeros())
            };
            // At most one lock word per redo pointer (`redo.rs`: a pointer has one writer).
            let dm_locks = if rh.dm_len >= 8 {
                (1u64 << (63 - (rh.dm_len / 8).leading_zeros())).min(host_locks)
            } else {
                0
            };
            if d.onchip && dm_locks == 0 {
                return Err(ShermanError::Fabric(
                    crate::fabric::FabricError::Unsupported {
                        what: "on-chip locks need device memory on every memory node",
                    },
                ));
            }
            nodes.push(NodeLocks {
                node: n,
                dm_locks,
                host_table: GlobalAddr::from_raw(d.tables[i]),
                host_locks,
                redo_table: GlobalAddr::from_raw(d.redo[i]),
            });
            allocs.push(RemoteAllocator::open(q).await?);
        }
        Ok(Sherman {
            ep,
            cfg,
            g,
            desc,
            onchip: d.onchip,
            root: Cell::new(d.root),
            nodes,
            allocs,
            next_alloc: Cell::new(tag as usize),
            locks: Locks::new(
                ep.client_id(),
                cfg.hierarchical_locks,
                cfg.combine_commands,
                cfg.spin_locks,
                cfg.handover_cap,
                LeaseConfig {
                    max_attempts: cfg.lock_retries,
                    ..cfg.lease
                },
                node.clone(),
            )
            .paced(cfg.paced_locks),
            node: NodeCache::new(node, cfg.index_cache),
            pool: RefCell::new(Vec::new()),
            batches: RefCell::new(Vec::new()),
            acquired: Cell::new(0),
            handovers: Cell::new(0),
            splits: Cell::new(0),
            missing: Cell::new(None),
            repairs: Cell::new(RepairStats::default()),
            redo_slots: RefCell::new(Vec::new()),
            records: RefCell::new(Vec::new()),
        })
    }
}

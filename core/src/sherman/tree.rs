//! The B-link tree itself: descriptor, traversal, lookups, writes, splits, scans.
use super::cache::{IndexCache, child_for};
use super::lock::{Batch, Got, Locks};
use super::{PageCheck, ShermanConfig, ShermanError};
use crate::alloc::RemoteAllocator;
use crate::block_on::yield_now;
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::index::KvIndex;
use core::cell::{Cell, RefCell};
use remora_layouts::region::{HEADER_LEN as REGION_HEADER_LEN, RegionHeader, root_offset};
use remora_layouts::sherman::{
    Geometry, KEY_INFINITY, PageHeader, Slot, encode_leaf_entry, internal_entry, leaf_entry_bytes,
    leaf_slot, leaf_value, rebind_entry, seal, set_internal_entry, verify_leaf,
};
use remora_layouts::{GlobalAddr, NodeId};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// `b"SHERMAN1"`.
const DESC_MAGIC: u64 = u64::from_le_bytes(*b"SHERMAN1");
const DESC_LEN: usize = 128;
const D_ROOT: u64 = 8;
const D_CLIENTS: u64 = 40;
const MAX_NODES: usize = 8;
/// Sibling hops or restarts one operation may take before it reports a tree that never
/// settles (a cycle would otherwise spin forever).
const MAX_HOPS: u32 = 100_000;

/// The tree's descriptor, stored once on the first memory node:
/// magic, root, page size, value size, flags (bit 0: on-chip locks), clients (FAA counter),
/// host lock-table entries, node count, host lock table per node.
#[derive(Debug, Clone, Copy)]
struct Descriptor {
    root: GlobalAddr,
    page_size: u64,
    value_size: u64,
    onchip: bool,
    host_locks: u64,
    tables: [u64; MAX_NODES],
}

impl Descriptor {
    fn encode(&self) -> [u8; DESC_LEN] {
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
        for (i, w) in words.iter().chain(self.tables.iter()).enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8; DESC_LEN]) -> Option<Descriptor> {
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
        })
    }
}

struct NodeLocks {
    node: NodeId,
    dm_locks: u64,
    host_table: GlobalAddr,
    host_locks: u64,
}

/// What a locked leaf step decided.
enum Step {
    Done(bool),
    MoveTo(GlobalAddr),
    Restart,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Upsert,
    Update,
    Delete,
}

/// One compute node's handle on a Sherman tree (see [`super`]).
pub struct Sherman<'e, E: Endpoint> {
    ep: &'e E,
    cfg: ShermanConfig,
    g: Geometry,
    desc: GlobalAddr,
    onchip: bool,
    root: Cell<GlobalAddr>,
    nodes: Vec<NodeLocks>,
    allocs: Vec<RemoteAllocator>,
    next_alloc: Cell<usize>,
    locks: Locks,
    cache: RefCell<IndexCache>,
    pool: RefCell<Vec<Vec<u8>>>,
    handovers: Cell<u64>,
    splits: Cell<u64>,
}

fn key_of(key: &[u8]) -> Result<u64, ShermanError> {
    let k: [u8; 8] = key
        .try_into()
        .map_err(|_| ShermanError::BadKey { len: key.len() })?;
    let k = u64::from_be_bytes(k);
    if k == KEY_INFINITY {
        return Err(ShermanError::BadKey { len: 8 });
    }
    Ok(k)
}

/// The page version leaf entries are bound to: the page's own version, except in the
/// front == rear mutant, whose entries (like the authors') are not bound.
fn bind_of(check: PageCheck, version: u64) -> u64 {
    match check {
        PageCheck::Checksums => version,
        #[cfg(any(test, feature = "conformance"))]
        PageCheck::FrontRearOnly => 0,
    }
}

/// Encodes a whole leaf image into `img`: version `version`, fences `[low, high)`, `entries`
/// (key, value) in the first slots, every other slot free, all bound to the version; sealed.
#[allow(clippy::too_many_arguments)]
fn encode_leaf(
    img: &mut [u8],
    g: &Geometry,
    check: PageCheck,
    version: u64,
    low: u64,
    high: u64,
    sibling: u64,
    entries: &[(u64, Vec<u8>)],
) {
    let h = PageHeader {
        front_version: version,
        meta: PageHeader::pack_meta(0, true, 0),
        sibling,
        low_fence: low,
        high_fence: high,
        ..Default::default()
    };
    h.encode(img);
    let bind = bind_of(check, version);
    for s in 0..g.leaf_capacity() {
        let at = g.leaf_entry_offset(s);
        let out = &mut img[at..at + g.leaf_entry_size()];
        match entries.get(s) {
            Some((k, v)) => encode_leaf_entry(out, *k, v, 1, true, bind),
            None => encode_leaf_entry(out, 0, &[], 0, false, bind),
        }
    }
    seal(img, g);
}

/// Spreads page addresses over lock words (Fibonacci hashing: the high bits of the product).
fn hash(a: GlobalAddr) -> u64 {
    (a.raw() >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
}

impl<'e, E: Endpoint> Sherman<'e, E> {
    /// Creates the tree and publishes it in `cfg.root_slot` of the first memory node, or
    /// opens the one already there (so concurrent creators agree on one tree).
    pub async fn create(ep: &'e E, cfg: ShermanConfig) -> Result<Self, ShermanError> {
        let g = Geometry::new(cfg.page_size, cfg.value_size).map_err(ShermanError::Config)?;
        let first = *ep.nodes().first().ok_or(ShermanError::NoTree {
            slot: cfg.root_slot,
        })?;
        let qp = ep.qp(first)?;
        let slot = GlobalAddr::new(first, root_offset(cfg.root_slot));
        let mut cur = [0u8; 8];
        qp.read(slot, &mut cur).await?;
        if u64::from_le_bytes(cur) != 0 {
            return Self::open(ep, cfg).await;
        }
        let mut tables = [0u64; MAX_NODES];
        let mut host_locks = u64::MAX;
        for (i, &n) in ep.nodes().iter().enumerate().take(MAX_NODES) {
            let q = ep.qp(n)?;
            let a = RemoteAllocator::open(q).await?;
            let count = (a.chunk_size() / 8).min(1 << 15);
            host_locks = host_locks.min(count);
            let t = a.alloc_chunk(q).await?;
            q.write(t, &vec![0u8; (count * 8) as usize]).await?;
            tables[i] = t.raw();
        }
        let a0 = RemoteAllocator::open(qp).await?;
        let root = a0.alloc(qp, cfg.page_size as u64).await?;
        let desc_addr = a0.alloc(qp, DESC_LEN as u64).await?;
        let mut page = vec![0u8; g.page_size];
        encode_leaf(&mut page, &g, cfg.page_check, 1, 0, KEY_INFINITY, 0, &[]);
        let d = Descriptor {
            root,
            page_size: cfg.page_size as u64,
            value_size: cfg.value_size as u64,
            onchip: cfg.onchip_locks,
            host_locks,
            tables,
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
        Self::open(ep, cfg).await
    }

    /// Opens the tree published in `cfg.root_slot`. Lock placement comes from the tree (all
    /// handles must agree); the other switches are this handle's.
    pub async fn open(ep: &'e E, cfg: ShermanConfig) -> Result<Self, ShermanError> {
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
            let dm_locks = if rh.dm_len >= 8 {
                1u64 << (63 - (rh.dm_len / 8).leading_zeros())
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
            let host_locks = if d.host_locks == 0 {
                0
            } else {
                1u64 << (63 - d.host_locks.leading_zeros())
            };
            nodes.push(NodeLocks {
                node: n,
                dm_locks,
                host_table: GlobalAddr::from_raw(d.tables[i]),
                host_locks,
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
                tag,
                cfg.hierarchical_locks,
                cfg.combine_commands,
                cfg.handover_cap,
                cfg.lock_retries,
            ),
            cache: RefCell::new(IndexCache::new(cfg.index_cache, cfg.cache_bytes)),
            pool: RefCell::new(Vec::new()),
            handovers: Cell::new(0),
            splits: Cell::new(0),
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.g
    }
    /// Lock hand-overs this handle received, and splits it made.
    pub fn stats(&self) -> (u64, u64) {
        (self.handovers.get(), self.splits.get())
    }
    /// Index-cache hits, misses and bytes.
    pub fn cache_stats(&self) -> (u64, u64, usize) {
        let c = self.cache.borrow();
        (c.hits, c.misses, c.bytes())
    }

    fn page(&self) -> Vec<u8> {
        self.pool
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| vec![0u8; self.g.page_size])
    }
    fn give(&self, p: Vec<u8>) {
        self.pool.borrow_mut().push(p);
    }

    fn qp(&self, a: GlobalAddr) -> Result<&'e E::Qp, ShermanError> {
        Ok(self.ep.qp_for(a)?)
    }

    fn lock_for(&self, page: GlobalAddr) -> Result<GlobalAddr, ShermanError> {
        let n = self
            .nodes
            .iter()
            .find(|n| n.node == page.node())
            .ok_or(ShermanError::Fabric(
                crate::fabric::FabricError::UnknownNode { node: page.node() },
            ))?;
        Ok(if self.onchip {
            GlobalAddr::device(n.node, (hash(page) & (n.dm_locks - 1)) * 8)
        } else {
            n.host_table.add((hash(page) & (n.host_locks - 1)) * 8)
        })
    }

    async fn alloc_page(&self) -> Result<GlobalAddr, ShermanError> {
        let i = self.next_alloc.get() % self.allocs.len();
        self.next_alloc.set(i + 1);
        let a = &self.allocs[i];
        Ok(a.alloc(self.ep.qp(a.node())?, self.g.page_size as u64)
            .await?)
    }

    fn decode(&self, page: &[u8]) -> Result<PageHeader, remora_layouts::LayoutError> {
        match self.cfg.page_check {
            PageCheck::Checksums => PageHeader::decode(page, &self.g),
            #[cfg(any(test, feature = "conformance"))]
            PageCheck::FrontRearOnly => PageHeader::decode_front_rear(page, &self.g),
        }
    }

    fn bind(&self, h: &PageHeader) -> u64 {
        bind_of(self.cfg.page_check, h.front_version)
    }

    /// READ a page until its image is whole and well-formed (for a leaf: its header; the
    /// caller verifies the entries it uses against [`Self::bind`]).
    async fn read_page(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
    ) -> Result<PageHeader, ShermanError> {
        let qp = self.qp(addr)?;
        let mut why = None;
        for _ in 0..self.cfg.read_retries.max(1) {
            qp.read(addr, buf).await?;
            match self.decode(buf) {
                Ok(h) => return Ok(h),
                Err(e) => why = Some(e),
            }
            yield_now().await;
        }
        Err(ShermanError::Corrupt {
            addr,
            why: why.expect("the loop ran at least once"),
        })
    }

    /// READ a leaf until the header and every slot verify (every slot: which one holds `key`
    /// is only known once all are). Returns the header and `key`'s live (slot, value length).
    async fn read_leaf(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
        key: u64,
    ) -> Result<(PageHeader, Option<(usize, usize)>), ShermanError> {
        for _ in 0..self.cfg.read_retries {
            let h = self.read_page(addr, buf).await?;
            if !h.is_leaf() {
                return Err(ShermanError::Corrupt {
                    addr,
                    why: remora_layouts::LayoutError::Inconsistent {
                        what: "expected a leaf",
                    },
                });
            }
            match self.find_in_leaf(buf, self.bind(&h), key) {
                Ok(found) => return Ok((h, found)),
                Err(_) => yield_now().await,
            }
        }
        Err(ShermanError::Retries {
            what: "leaf entries kept failing their checksums",
        })
    }

    /// The live (slot, value length) holding `key`, every slot verified against `bind`. (The
    /// mutant checks only slots whose key word matches, as the authors' code does.)
    fn find_in_leaf(
        &self,
        page: &[u8],
        bind: u64,
        key: u64,
    ) -> Result<Option<(usize, usize)>, remora_layouts::LayoutError> {
        let mut found = None;
        if self.cfg.page_check == PageCheck::Checksums {
            verify_leaf(page, &self.g, bind, |s, slot| {
                if let Slot::Live { key: k, len, .. } = slot
                    && k == key
                    && found.is_none()
                {
                    found = Some((s, len));
                }
            })?;
            return Ok(found);
        }
        for s in 0..self.g.leaf_capacity() {
            let e = leaf_entry_bytes(page, &self.g, s).unwrap_or(&[]);
            if e.get(8..16) == Some(&key.to_le_bytes()[..])
                && let Slot::Live { len, .. } = leaf_slot(page, &self.g, s, bind)?
            {
                return Ok(Some((s, len)));
            }
        }
        Ok(None)
    }

    async fn refresh_root(&self) -> Result<(), ShermanError> {
        let mut b = [0u8; 8];
        self.qp(self.desc)?
            .read(self.desc.add(D_ROOT), &mut b)
            .await?;
        self.root.set(GlobalAddr::from_raw(u64::from_le_bytes(b)));
        Ok(())
    }

    /// Walks from the root to the page covering `key` at `level`, or (`None`) to the leaf
    /// covering it, whose address is returned without reading the leaf itself (unless the
    /// root is that leaf). Level-1 pages passed on the way refresh the index cache.
    async fn walk(
        &self,
        key: u64,
        level: Option<u8>,
        buf: &mut [u8],
    ) -> Result<GlobalAddr, ShermanError> {
        let mut addr = self.root.get();
        for _ in 0..MAX_HOPS {
            let h = self.read_page(addr, buf).await?;
            if level.is_some_and(|l| h.level() < l) || key < h.low_fence {
                // The root we know is below the level we need, or we went wrong: reload it.
                self.refresh_root().await?;
                addr = self.root.get();
                yield_now().await;
                continue;
            }
            if key >= h.high_fence {
                addr = GlobalAddr::from_raw(h.sibling);
                if addr.is_null() {
                    return Err(ShermanError::Retries {
                        what: "rightmost page does not cover the key",
                    });
                }
                continue;
            }
            if level == Some(h.level()) || (level.is_none() && h.is_leaf()) {
                return Ok(addr);
            }
            if h.level() == 1 {
                self.cache.borrow_mut().insert(&h, buf);
            }
            addr = child_for(buf, &self.g, &h, key).ok_or(ShermanError::Corrupt {
                addr,
                why: remora_layouts::LayoutError::Inconsistent {
                    what: "internal page without child",
                },
            })?;
        }
        Err(ShermanError::Retries {
            what: "descent did not settle",
        })
    }

    /// The leaf for `key`: from the index cache, else by walking down.
    async fn locate(&self, key: u64, buf: &mut [u8]) -> Result<GlobalAddr, ShermanError> {
        if let Some(a) = self.cache.borrow_mut().leaf_for(key, &self.g) {
            return Ok(a);
        }
        self.walk(key, None, buf).await
    }

    async fn lookup(&self, key: u64, out: &mut [u8]) -> Result<Option<usize>, ShermanError> {
        let mut buf = self.page();
        let r = self.lookup_in(key, out, &mut buf).await;
        self.give(buf);
        r
    }

    async fn lookup_in(
        &self,
        key: u64,
        out: &mut [u8],
        buf: &mut [u8],
    ) -> Result<Option<usize>, ShermanError> {
        let mut addr = self.locate(key, buf).await?;
        for _ in 0..MAX_HOPS {
            let (h, found) = self.read_leaf(addr, buf, key).await?;
            if key < h.low_fence {
                self.cache.borrow_mut().invalidate(key);
                addr = self.locate(key, buf).await?;
                continue;
            }
            if key >= h.high_fence {
                self.cache.borrow_mut().invalidate(key);
                addr = GlobalAddr::from_raw(h.sibling);
                continue;
            }
            let Some((s, len)) = found else {
                return Ok(None);
            };
            let got = out.len();
            let dst = out
                .get_mut(..len)
                .ok_or(ShermanError::BufferTooSmall { need: len, got })?;
            dst.copy_from_slice(leaf_value(buf, &self.g, s, len));
            return Ok(Some(len));
        }
        Err(ShermanError::Retries {
            what: "lookup did not settle",
        })
    }

    /// Ops writing sealed page image `img` whole: one WRITE (readers verify its content, so
    /// the order its segments land in does not matter). The mutant writes rear version,
    /// body, front version as three ordered WRITEs, as its check needs.
    fn page_write_ops<'b>(&self, addr: GlobalAddr, img: &'b [u8], ops: &mut Batch<'b>) {
        if self.cfg.page_check == PageCheck::Checksums {
            ops.push(Op::Write {
                remote: addr,
                local: img,
            })
            .expect("a doorbell batch holds at most 5 work requests");
            return;
        }
        let rear = self.g.rear_offset();
        ops.push(Op::Write {
            remote: addr.add(rear as u64),
            local: &img[rear..],
        })
        .expect("a doorbell batch holds at most 5 work requests");
        ops.push(Op::Write {
            remote: addr.add(8),
            local: &img[8..rear],
        })
        .expect("a doorbell batch holds at most 5 work requests");
        ops.push(Op::Write {
            remote: addr,
            local: &img[..8],
        })
        .expect("a doorbell batch holds at most 5 work requests");
    }

    async fn modify(&self, key: u64, value: &[u8], change: Change) -> Result<bool, ShermanError> {
        if value.len() > self.g.value_size {
            return Err(ShermanError::ValueTooLong {
                len: value.len(),
                max: self.g.value_size,
            });
        }
        let mut buf = self.page();
        let r = self.modify_in(key, value, change, &mut buf).await;
        self.give(buf);
        r
    }

    async fn modify_in(
        &self,
        key: u64,
        value: &[u8],
        change: Change,
        buf: &mut [u8],
    ) -> Result<bool, ShermanError> {
        let mut addr = self.locate(key, buf).await?;
        for _ in 0..MAX_HOPS {
            let lock = self.lock_for(addr)?;
            let qp = self.qp(addr)?;
            if self.locks.acquire(qp, lock).await? == Got::HandedOver {
                self.handovers.set(self.handovers.get() + 1);
            }
            match self
                .modify_locked(addr, lock, key, value, change, buf)
                .await?
            {
                Step::Done(r) => return Ok(r),
                Step::MoveTo(next) => {
                    self.cache.borrow_mut().invalidate(key);
                    addr = next;
                }
                Step::Restart => {
                    self.cache.borrow_mut().invalidate(key);
                    addr = self.locate(key, buf).await?;
                }
            }
        }
        Err(ShermanError::Retries {
            what: "write did not settle",
        })
    }

    /// Under the leaf's lock: apply the change, write back, release.
    async fn modify_locked(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        key: u64,
        value: &[u8],
        change: Change,
        buf: &mut [u8],
    ) -> Result<Step, ShermanError> {
        let qp = self.qp(addr)?;
        let read = self.read_leaf(addr, buf, key).await;
        let (h, found) = match read {
            Ok(r) => r,
            Err(e) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Err(e);
            }
        };
        if !h.covers(key) {
            self.locks.release(qp, lock, &mut Batch::new()).await?;
            return Ok(if key >= h.high_fence {
                Step::MoveTo(GlobalAddr::from_raw(h.sibling))
            } else {
                Step::Restart
            });
        }
        let bind = self.bind(&h);
        let (slot, valid) = match (found, change) {
            (Some((s, _)), Change::Upsert | Change::Update) => (s, true),
            (Some((s, _)), Change::Delete) => (s, false),
            (None, Change::Update | Change::Delete) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Ok(Step::Done(false));
            }
            (None, Change::Upsert) => {
                let free = (0..self.g.leaf_capacity())
                    .find(|&s| matches!(leaf_slot(buf, &self.g, s, bind), Ok(Slot::Free { .. })));
                match free {
                    Some(s) => (s, true),
                    None => {
                        self.split_leaf(addr, lock, &h, key, value, buf).await?;
                        return Ok(Step::Done(true));
                    }
                }
            }
        };
        let version = match leaf_slot(buf, &self.g, slot, bind) {
            Ok(Slot::Live { version, .. } | Slot::Free { version }) => version.wrapping_add(1),
            Err(_) => 0,
        };
        let at = self.g.leaf_entry_offset(slot);
        let entry = at..at + self.g.leaf_entry_size();
        let val = if valid { value } else { &[] };
        let mut ops = Batch::new();
        if self.cfg.two_level_versions {
            encode_leaf_entry(&mut buf[entry.clone()], key, val, version, valid, bind);
            ops.push(Op::Write {
                remote: addr.add(at as u64),
                local: &buf[entry],
            })
            .expect("a doorbell batch holds at most 5 work requests");
            self.locks.release(qp, lock, &mut ops).await?;
        } else {
            // Whole page under a new version: every slot (verified under the lock) is
            // rebound to it.
            let mut nh = h;
            nh.front_version = h.front_version.wrapping_add(1).max(1);
            let nbind = self.bind(&nh);
            for s in 0..self.g.leaf_capacity() {
                let at = self.g.leaf_entry_offset(s);
                rebind_entry(&mut buf[at..at + self.g.leaf_entry_size()], nbind);
            }
            encode_leaf_entry(&mut buf[entry], key, val, version, valid, nbind);
            nh.encode(buf);
            seal(buf, &self.g);
            self.page_write_ops(addr, buf, &mut ops);
            self.locks.release(qp, lock, &mut ops).await?;
        }
        Ok(Step::Done(found.is_some() || change == Change::Upsert))
    }

    /// Splits a full leaf (locked) while inserting `key`, then links the new page upward.
    async fn split_leaf(
        &self,
        addr: GlobalAddr,
        lock: GlobalAddr,
        h: &PageHeader,
        key: u64,
        value: &[u8],
        buf: &mut [u8],
    ) -> Result<(), ShermanError> {
        let qp = self.qp(addr)?;
        let bind = self.bind(h);
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::with_capacity(self.g.leaf_capacity() + 1);
        for s in 0..self.g.leaf_capacity() {
            if let Ok(Slot::Live { key: k, len, .. }) = leaf_slot(buf, &self.g, s, bind) {
                entries.push((k, leaf_value(buf, &self.g, s, len).to_vec()));
            }
        }
        entries.push((key, value.to_vec()));
        entries.sort_unstable_by_key(|e| e.0);
        let mid = entries.len() / 2;
        let sep = entries[mid].0;
        let right_addr = match self.alloc_page().await {
            Ok(a) => a,
            Err(e) => {
                self.locks.release(qp, lock, &mut Batch::new()).await?;
                return Err(e);
            }
        };
        let leaf_image =
            |version: u64, low: u64, high: u64, sibling: u64, part: &[(u64, Vec<u8>)]| {
                let mut img = vec![0u8; self.g.page_size];
                let check = self.cfg.page_check;
                encode_leaf(&mut img, &self.g, check, version, low, high, sibling, part);
                img
            };
        let right = leaf_image(1, sep, h.high_fence, h.sibling, &entries[mid..]);
        let left = leaf_image(
            h.front_version.wrapping_add(1).max(1),
            h.low_fence,
            sep,
            right_addr.raw(),
            &entries[..mid],
        );
        self.write_split(addr, lock, right_addr, &right, &left)
            .await?;
        self.splits.set(self.splits.get() + 1);
        let pending = if h.low_fence == 0 && h.high_fence == KEY_INFINITY {
            self.grow_root(addr, 0, sep, right_addr).await?
        } else {
            Some((1, sep, right_addr))
        };
        match pending {
            Some((level, sep, child)) => self.insert_separator(level, sep, child).await,
            None => Ok(()),
        }
    }

    /// Writes the new right page, then the left page whole, then unlocks the left page. One
    /// doorbell when both pages live on one node (per-queue-pair order), else two.
    async fn write_split(
        &self,
        left_addr: GlobalAddr,
        lock: GlobalAddr,
        right_addr: GlobalAddr,
        right: &[u8],
        left: &[u8],
    ) -> Result<(), ShermanError> {
        let qp = self.qp(left_addr)?;
        let mut ops = Batch::new();
        if right_addr.node() == left_addr.node() {
            ops.push(Op::Write {
                remote: right_addr,
                local: right,
            })
            .expect("a doorbell batch holds at most 5 work requests");
        } else if let Err(e) = self.qp(right_addr)?.write(right_addr, right).await {
            self.locks.release(qp, lock, &mut Batch::new()).await?;
            return Err(e.into());
        }
        self.page_write_ops(left_addr, left, &mut ops);
        self.locks.release(qp, lock, &mut ops).await
    }

    /// The root at `level` split into itself and `right` at `sep`: a new root above them.
    /// Returns the separator still to link (level, key, child) if the root moved meanwhile.
    async fn grow_root(
        &self,
        old_root: GlobalAddr,
        level: u8,
        sep: u64,
        right: GlobalAddr,
    ) -> Result<Option<(u8, u64, GlobalAddr)>, ShermanError> {
        let qp = self.qp(self.desc)?;
        let a0 = &self.allocs[0];
        let new_root = a0.alloc(qp, self.g.page_size as u64).await?;
        let mut img = vec![0u8; self.g.page_size];
        let h = PageHeader {
            front_version: 1,
            meta: PageHeader::pack_meta(level + 1, false, 1),
            low_fence: 0,
            high_fence: KEY_INFINITY,
            leftmost: old_root.raw(),
            ..Default::default()
        };
        h.encode(&mut img);
        set_internal_entry(&mut img, &self.g, 0, sep, right.raw());
        seal(&mut img, &self.g);
        let mut old = 0u64;
        qp.post(&mut [
            Op::Write {
                remote: new_root,
                local: &img,
            },
            Op::Cas {
                remote: self.desc.add(D_ROOT),
                compare: old_root.raw(),
                swap: new_root.raw(),
                old: &mut old,
            },
        ])
        .await?;
        if old == old_root.raw() {
            self.root.set(new_root);
            Ok(None)
        } else {
            // Only the holder of the root's lock grows the root, so this cannot happen unless the
            // descriptor was changed behind the tree's back; link the split the ordinary way.
            a0.free(new_root, self.g.page_size as u64);
            Ok(Some((level + 1, sep, right)))
        }
    }

    /// Inserts separator `sep` → `child` into the internal level `level`, splitting upward
    /// as needed (iteratively).
    async fn insert_separator(
        &self,
        mut level: u8,
        mut sep: u64,
        mut child: GlobalAddr,
    ) -> Result<(), ShermanError> {
        let mut buf = self.page();
        let r = async {
            let mut hops = 0u32;
            'levels: loop {
                let mut addr = self.walk(sep, Some(level), &mut buf).await?;
                loop {
                    hops += 1;
                    if hops > MAX_HOPS {
                        return Err(ShermanError::Retries {
                            what: "separator insert did not settle",
                        });
                    }
                    let lock = self.lock_for(addr)?;
                    let qp = self.qp(addr)?;
                    self.locks.acquire(qp, lock).await?;
                    let h = match self.read_page(addr, &mut buf).await {
                        Ok(h) => h,
                        Err(e) => {
                            self.locks.release(qp, lock, &mut Batch::new()).await?;
                            return Err(e);
                        }
                    };
                    if !h.covers(sep) || h.level() != level {
                        self.locks.release(qp, lock, &mut Batch::new()).await?;
                        if sep >= h.high_fence && h.level() == level && h.sibling != 0 {
                            addr = GlobalAddr::from_raw(h.sibling);
                            continue;
                        }
                        continue 'levels;
                    }
                    let mut entries: Vec<(u64, u64)> = (0..h.count())
                        .map(|i| internal_entry(&buf, &self.g, i).unwrap_or((KEY_INFINITY, 0)))
                        .collect();
                    let pos = entries.partition_point(|e| e.0 < sep);
                    if entries.get(pos).is_some_and(|e| e.0 == sep) {
                        // Already linked (a retried insert): nothing to do.
                        self.locks.release(qp, lock, &mut Batch::new()).await?;
                        return Ok(());
                    }
                    entries.insert(pos, (sep, child.raw()));
                    let image = |version: u64,
                                 low: u64,
                                 high: u64,
                                 sibling: u64,
                                 leftmost: u64,
                                 part: &[(u64, u64)]| {
                        let mut img = vec![0u8; self.g.page_size];
                        let hh = PageHeader {
                            front_version: version,
                            meta: PageHeader::pack_meta(level, false, part.len()),
                            sibling,
                            low_fence: low,
                            high_fence: high,
                            leftmost,
                            ..Default::default()
                        };
                        hh.encode(&mut img);
                        for (i, (k, c)) in part.iter().enumerate() {
                            set_internal_entry(&mut img, &self.g, i, *k, *c);
                        }
                        seal(&mut img, &self.g);
                        img
                    };
                    let v = h.front_version.wrapping_add(1).max(1);
                    if entries.len() <= self.g.internal_capacity() {
                        let img = image(
                            v,
                            h.low_fence,
                            h.high_fence,
                            h.sibling,
                            h.leftmost,
                            &entries,
                        );
                        let mut ops = Batch::new();
                        self.page_write_ops(addr, &img, &mut ops);
                        self.locks.release(qp, lock, &mut ops).await?;
                        if level == 1 {
                            self.cache.borrow_mut().insert(
                                &PageHeader::decode(&img, &self.g)
                                    .map_err(|why| ShermanError::Corrupt { addr, why })?,
                                &img,
                            );
                        }
                        return Ok(());
                    }
                    let mid = entries.len() / 2;
                    let up = entries[mid].0;
                    let right_addr = match self.alloc_page().await {
                        Ok(a) => a,
                        Err(e) => {
                            self.locks.release(qp, lock, &mut Batch::new()).await?;
                            return Err(e);
                        }
                    };
                    let right = image(
                        1,
                        up,
                        h.high_fence,
                        h.sibling,
                        entries[mid].1,
                        &entries[mid + 1..],
                    );
                    let left = image(
                        v,
                        h.low_fence,
                        up,
                        right_addr.raw(),
                        h.leftmost,
                        &entries[..mid],
                    );
                    self.write_split(addr, lock, right_addr, &right, &left)
                        .await?;
                    self.splits.set(self.splits.get() + 1);
                    if level == 1 {
                        self.cache.borrow_mut().invalidate(sep);
                    }
                    let pending = if h.low_fence == 0 && h.high_fence == KEY_INFINITY {
                        self.grow_root(addr, level, up, right_addr).await?
                    } else {
                        Some((level + 1, up, right_addr))
                    };
                    match pending {
                        Some((l, s, c)) => (level, sep, child) = (l, s, c),
                        None => return Ok(()),
                    }
                    continue 'levels;
                }
            }
        }
        .await;
        self.give(buf);
        r
    }

    async fn scan_from(
        &self,
        from: u64,
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ShermanError> {
        let mut buf = self.page();
        let r = async {
            let mut key = from;
            let mut seen = 0usize;
            let mut addr = self.locate(key, &mut buf).await?;
            let mut batch: Vec<(u64, usize, usize)> = Vec::with_capacity(self.g.leaf_capacity());
            'pages: for _ in 0..MAX_HOPS {
                if seen >= limit {
                    break;
                }
                let mut h = None;
                for _ in 0..self.cfg.read_retries {
                    let hh = self.read_page(addr, &mut buf).await?;
                    if !hh.is_leaf() {
                        return Err(ShermanError::Corrupt {
                            addr,
                            why: remora_layouts::LayoutError::Inconsistent {
                                what: "expected a leaf",
                            },
                        });
                    }
                    batch.clear();
                    let whole = verify_leaf(&buf, &self.g, self.bind(&hh), |s, slot| {
                        if let Slot::Live { key: k, len, .. } = slot
                            && k >= key
                            && k < hh.high_fence
                        {
                            batch.push((k, s, len))
                        }
                    });
                    if whole.is_ok() {
                        h = Some(hh);
                        break;
                    }
                    yield_now().await;
                }
                let h = h.ok_or(ShermanError::Retries {
                    what: "scanned leaf kept failing checksums",
                })?;
                if key < h.low_fence {
                    self.cache.borrow_mut().invalidate(key);
                    addr = self.locate(key, &mut buf).await?;
                    continue 'pages;
                }
                if key >= h.high_fence {
                    addr = GlobalAddr::from_raw(h.sibling);
                    continue 'pages;
                }
                batch.sort_unstable_by_key(|e| e.0);
                // A key deleted and re-inserted into another slot while the READ ran can show
                // up in both slots: report it once.
                batch.dedup_by_key(|e| e.0);
                for &(k, s, len) in &batch {
                    if seen >= limit {
                        break;
                    }
                    visit(&k.to_be_bytes(), leaf_value(&buf, &self.g, s, len));
                    seen += 1;
                }
                if h.high_fence == KEY_INFINITY || h.sibling == 0 {
                    break;
                }
                key = h.high_fence;
                addr = GlobalAddr::from_raw(h.sibling);
            }
            Ok(seen)
        }
        .await;
        self.give(buf);
        r
    }
}

impl<E: Endpoint> KvIndex for Sherman<'_, E> {
    type Error = ShermanError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), ShermanError> {
        self.modify(key_of(key)?, value, Change::Upsert)
            .await
            .map(drop)
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, ShermanError> {
        self.modify(key_of(key)?, value, Change::Update).await
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, ShermanError> {
        self.lookup(key_of(key)?, out).await
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, ShermanError> {
        self.modify(key_of(key)?, &[], Change::Delete).await
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ShermanError> {
        self.scan_from(key_of(from)?, limit, visit).await
    }
}

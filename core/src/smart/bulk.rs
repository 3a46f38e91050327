//! Bulk loading: the radix tree of a sorted key set built at memory speed, the shape inserts
//! of the same keys grow (the papers' evaluation loads 60M keys before it measures, seeds/001).
//!
//! Under the root Node256 (created by [`Smart::open`]), every set of two or more keys that
//! share the bytes up to a position gets the node inserts would leave there: its depth is the
//! first byte where the keys differ, its compressed prefix the shared bytes after the parent's
//! partial key; a prefix longer than `MAX_PREFIX` becomes a chain of one-slot Node4s, as
//! `leaf_split` builds one; its type is the smallest whose capacity holds its children (grows
//! happen when a node is full, to the next type); a Node256 places a child at its partial
//! key, the others in partial-key order in their first slots (lookups scan them). A single
//! key is a leaf slot. Reverse pointers name the parent as inserts write them (leaves always;
//! internal nodes with lock-free internal nodes, else 0); leaves are live, checksummed and
//! unlocked (`build_leaf`, as inserts write them). Objects are placed where inserts place
//! them (nodes round robin over memory nodes, a leaf on the node its key hashes to), carved
//! and written chunk by chunk ([`crate::bulk::ChunkWriter`]); the root's slots are written
//! last, in one WRITE. Nothing in the image says it was bulk-loaded.
//!
//! Variable-length keys are loaded as the tree holds them (`key.rs`): each followed by its
//! NUL terminator, so a key that is a prefix of others ends in a leaf at its terminator's
//! partial key (0) beside them, and its leaf holds, is sized by and is placed by the hash of
//! the terminated key. The shape is that of inserts in any order, except under prefix chains:
//! inserts split a chain node's prefix where a later key diverges inside it and keep the
//! chain's cut points, where the load cuts the remaining prefix afresh below the divergence
//! (a valid tree; inserts that meet each divergence before the ones below it build exactly
//! this one: `bulk_tests.rs`).
use super::Smart;
use super::config::{KeyMode, SmartError};
use super::key::Key;
use super::remote::{NodeImg, build_leaf};
use crate::bulk::ChunkWriter;
use crate::fabric::Endpoint;
use core::future::Future;
use core::pin::Pin;
use remora_layouts::smart::{
    Header, LeafStatus, MAX_KEY_LEN, MAX_LEAF_BYTES, MAX_PREFIX, NODE_SLOTS_OFFSET, NodeType, Slot,
    leaf_bytes,
};
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::boxed::Box;
use std_alloc::vec;
use std_alloc::vec::Vec;

/// What a bulk load built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkStats {
    /// Keys loaded.
    pub keys: u64,
    /// Internal nodes below the root, by type (N4, N16, N48, N256).
    pub nodes: [u64; 4],
    /// Bytes written.
    pub bytes: u64,
    /// Allocator chunks the load took.
    pub chunks: u64,
}

fn layout(what: &'static str) -> impl Fn(LayoutError) -> SmartError {
    move |err| SmartError::Corrupt { what, err }
}

fn pack(a: GlobalAddr) -> Result<u64, SmartError> {
    a.pack48().map_err(layout("address beyond 48 bits"))
}

/// The smallest node type holding `n` children.
fn type_for(n: usize) -> NodeType {
    NodeType::ALL
        .into_iter()
        .find(|t| t.capacity() >= n)
        .unwrap_or(NodeType::N256)
}

/// Byte `q` of `key` as encoded: a variable key's terminator (NUL) past its end. Fixed keys
/// are never read past their end (their byte strings differ within their length).
fn at<K: AsRef<[u8]>>(key: &K, q: usize) -> u8 {
    key.as_ref().get(q).copied().unwrap_or(0)
}

/// Checks a bulk load's keys: each a key of the tree's mode (its fixed length; variable keys
/// 1..=255 bytes without NUL), strictly ascending in the tree's order (byte order of the
/// encoded keys, which for variable keys is the user keys' byte order, a key before the
/// keys it is a prefix of).
fn check_keys<K: AsRef<[u8]>>(mode: KeyMode, keys: &[K]) -> Result<(), SmartError> {
    for (i, k) in keys.iter().enumerate() {
        let k = k.as_ref();
        match mode {
            KeyMode::Fixed(n) if k.len() != n => {
                return Err(SmartError::BadKey {
                    why: "bulk load key of another length than the tree's",
                });
            }
            KeyMode::Variable if k.is_empty() || k.len() >= MAX_KEY_LEN => {
                return Err(SmartError::BadKey {
                    why: "bulk load variable keys are 1..=255 bytes",
                });
            }
            KeyMode::Variable if k.contains(&0) => {
                return Err(SmartError::BadKey {
                    why: "bulk load variable keys may not contain NUL bytes",
                });
            }
            _ => {}
        }
        if i > 0 && keys[i - 1].as_ref() >= k {
            return Err(SmartError::BadKey {
                why: "bulk load keys are not strictly ascending",
            });
        }
    }
    Ok(())
}

type Built<'a> = Pin<Box<dyn Future<Output = Result<Slot, SmartError>> + 'a>>;

/// State of one bulk load.
struct Load<'k, 'v, K> {
    keys: &'k [K],
    value: &'v mut dyn FnMut(usize, &mut [u8]) -> usize,
    w: ChunkWriter,
    next_node: usize,
    val: Vec<u8>,
    stats: BulkStats,
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// Bulk-loads `keys` (keys of the tree's [`KeyMode`]: each of its fixed length, or 1..=255
    /// bytes without NUL; strictly ascending in byte order, a key before those it is a prefix
    /// of) into this tree, which must be empty (its root has no child) and not yet in use by another
    /// handle: open the handles that use it afterwards (a node cache filled before the load
    /// would hold the empty root). `value(i, out)` writes the value of `keys[i]` into `out`
    /// (the value capacity) and returns its length.
    pub async fn bulk_load<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        value: &mut dyn FnMut(usize, &mut [u8]) -> usize,
    ) -> Result<BulkStats, SmartError> {
        check_keys(self.cfg.key_mode, keys)?;
        let root = self.read_node(self.root, NodeType::N256).await?;
        if root.live_slots().iter().any(|s| !s.is_empty()) {
            return Err(SmartError::Config("bulk load needs an empty tree"));
        }
        let mut l = Load {
            keys,
            value,
            w: ChunkWriter::new(self.ep).await?,
            next_node: 0,
            val: vec![0u8; self.cfg.value_cap],
            stats: BulkStats::default(),
        };
        let mut slots = vec![0u8; 8 * 256];
        let mut lo = 0;
        while lo < keys.len() {
            let b = at(&keys[lo], 0);
            let hi = lo + keys[lo..].partition_point(|k| at(k, 0) == b);
            let s = self.bulk_child(&mut l, lo, hi, self.root, 1, b).await?;
            slots[8 * b as usize..8 * b as usize + 8].copy_from_slice(&s.raw().to_le_bytes());
            lo = hi;
        }
        let Load { w, mut stats, .. } = l;
        stats.chunks = w.chunks;
        stats.bytes = w.finish(self.ep).await?;
        // Every child is written: the root's slots publish them.
        self.write(self.root.add(NODE_SLOTS_OFFSET as u64), &slots)
            .await?;
        stats.keys = keys.len() as u64;
        Ok(stats)
    }

    /// The slot (partial key `pkey`) of parent `parent` for `keys[lo..hi]`, which share
    /// their bytes before `start`: a leaf for one key, else a node (chain) built below.
    fn bulk_child<'a, K: AsRef<[u8]>>(
        &'a self,
        l: &'a mut Load<'_, '_, K>,
        lo: usize,
        hi: usize,
        parent: GlobalAddr,
        start: usize,
        pkey: u8,
    ) -> Built<'a> {
        Box::pin(async move {
            if hi - lo == 1 {
                return self.bulk_leaf(l, lo, parent, pkey).await;
            }
            // Keys are checked distinct and (variable keys) free of NULs, so the first and
            // the last differ at some byte of the first, or at its terminator: `q` is within
            // the first key's user bytes or at their end.
            let (first, last) = (l.keys[lo].as_ref(), l.keys[hi - 1].as_ref());
            let q = start
                + first[start..]
                    .iter()
                    .zip(&last[start..])
                    .take_while(|(a, b)| a == b)
                    .count();
            // A prefix longer than a header holds: a one-slot Node4 for its first bytes.
            if q - start > MAX_PREFIX {
                let depth = start + MAX_PREFIX;
                let addr = self.bulk_node_addr(l, NodeType::N4).await?;
                let child = self
                    .bulk_child(l, lo, hi, addr, depth + 1, first[depth])
                    .await?;
                let mut slots = [Slot::EMPTY; 256];
                slots[0] = child;
                self.bulk_node(
                    l,
                    addr,
                    parent,
                    depth,
                    &first[start..depth],
                    NodeType::N4,
                    slots,
                )
                .await?;
                return Slot::node(pkey, addr, NodeType::N4).map_err(layout("chain slot"));
            }
            let mut groups = 0;
            let mut i = lo;
            while i < hi {
                let b = at(&l.keys[i], q);
                i += l.keys[i..hi].partition_point(|k| at(k, q) == b);
                groups += 1;
            }
            let ty = type_for(groups);
            let addr = self.bulk_node_addr(l, ty).await?;
            let mut slots = [Slot::EMPTY; 256];
            let (mut i, mut g) = (lo, 0);
            while i < hi {
                let b = at(&l.keys[i], q);
                let j = i + l.keys[i..hi].partition_point(|k| at(k, q) == b);
                let s = self.bulk_child(l, i, j, addr, q + 1, b).await?;
                slots[if ty == NodeType::N256 { b as usize } else { g }] = s;
                (i, g) = (j, g + 1);
            }
            let prefix = &l.keys[lo].as_ref()[start..q];
            self.bulk_node(l, addr, parent, q, prefix, ty, slots)
                .await?;
            Slot::node(pkey, addr, ty).map_err(layout("node slot"))
        })
    }

    /// Reserves a node of type `ty` (round robin over memory nodes, as `alloc_node`).
    async fn bulk_node_addr<K>(
        &self,
        l: &mut Load<'_, '_, K>,
        ty: NodeType,
    ) -> Result<GlobalAddr, SmartError> {
        l.next_node += 1;
        l.stats.nodes[ty as usize] += 1;
        Ok(l.w
            .reserve(self.ep, l.next_node - 1, ty.bytes() as u64)
            .await?)
    }

    /// Writes the node at `addr`: reverse pointer to `parent`, header, `slots`.
    #[allow(clippy::too_many_arguments)]
    async fn bulk_node<K>(
        &self,
        l: &mut Load<'_, '_, K>,
        addr: GlobalAddr,
        parent: GlobalAddr,
        depth: usize,
        prefix: &[u8],
        ty: NodeType,
        slots: [Slot; 256],
    ) -> Result<(), SmartError> {
        let n = NodeImg {
            addr,
            rev: if self.cfg.techniques.lock_free_internal {
                pack(parent)?
            } else {
                0
            },
            header: Header::new(depth, ty, prefix).map_err(layout("bulk node header"))?,
            slots,
            t0: 0,
        };
        let mut img = [0u8; NodeType::N256.bytes()];
        let len = n.encode(&mut img);
        Ok(l.w.fill(self.ep, addr, &img[..len]).await?)
    }

    /// Writes the leaf of `keys[i]` (on the node its key hashes to, as `alloc_leaf`).
    async fn bulk_leaf<K: AsRef<[u8]>>(
        &self,
        l: &mut Load<'_, '_, K>,
        i: usize,
        parent: GlobalAddr,
        pkey: u8,
    ) -> Result<Slot, SmartError> {
        // The leaf holds the encoded key (a variable key with its terminator), as inserts
        // write it; its size and its placement follow from that.
        let enc = Key::encode(self.cfg.key_mode, l.keys[i].as_ref())?;
        let key = enc.bytes();
        let bytes = leaf_bytes(key.len(), self.cfg.value_cap);
        let vlen = (l.value)(i, &mut l.val);
        let value = l.val.get(..vlen).ok_or(SmartError::ValueTooLarge {
            len: vlen,
            cap: self.cfg.value_cap,
        })?;
        let mut leaf = [0u8; MAX_LEAF_BYTES];
        build_leaf(
            &mut leaf[..bytes],
            pack(parent)?,
            LeafStatus::live(true),
            key,
            value,
            self.cfg.value_cap,
        )
        .map_err(layout("bulk leaf"))?;
        let ix = super::local::hash_key(key) as usize % l.w.node_count();
        let at = l.w.reserve(self.ep, ix, bytes as u64).await?;
        l.w.fill(self.ep, at, &leaf[..bytes]).await?;
        Slot::leaf(pkey, at, bytes).map_err(layout("leaf slot"))
    }
}

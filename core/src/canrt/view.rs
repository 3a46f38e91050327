//! What clients and the server read: a tree (header + cached prefix array) and how a key
//! finds its data node, and one data node's bytes and what a key holds in them.
use remora_layouts::LayoutError;
use remora_layouts::bits::read_u64;
use remora_layouts::canrt::{
    DataGeometry, EPOCH_MASK, FRONT_OFF, ITEMS_OFF, Item, LOCK_OFF, MAX_SEGMENTS, Meta,
    PrefixGeometry, Segment, TICKET_MASK, TreeHeader, tail_valid,
};
use std_alloc::vec::Vec;

/// A tree as a client caches it: its header and its whole prefix array.
#[derive(Debug, Clone)]
pub struct TreeView {
    /// The tree header as read (geometry, epoch, the prefix array's segments).
    pub header: TreeHeader,
    /// The root-slot word this view was loaded from.
    pub root: u64,
    geometry: PrefixGeometry,
    segments: heapless::Vec<Segment, MAX_SEGMENTS>,
    prefix: Vec<u8>,
    /// Data node ids in key order (the NodeID arrays read left to right).
    order: Vec<u32>,
    /// Position of each data node in `order` (`u32::MAX`: not reachable).
    rank: Vec<u32>,
}

/// Data node ids in key order, and each one's position: the last level's NodeIDs left to
/// right (one data node may follow itself, never reappear later).
fn key_order(
    h: &TreeHeader,
    g: &PrefixGeometry,
    prefix: &[u8],
) -> Result<(Vec<u32>, Vec<u32>), LayoutError> {
    let k = h.height;
    // At most one entry per data node: reserved once, not grown push by push.
    let mut order: Vec<u32> = Vec::with_capacity(h.n_data as usize);
    let mut rank = std_alloc::vec![u32::MAX; h.n_data as usize];
    let first = g.base(k);
    for id in first..first + g.level_nodes(k) {
        let n = g.chars(prefix, id)?.len();
        for p in 0..n {
            let d = g.node_id(prefix, id, p as u32)?;
            let slot = rank.get_mut(d as usize).ok_or(LayoutError::OutOfRange {
                field: "NodeID",
                value: d as u64,
            })?;
            if order.last() == Some(&d) {
                continue;
            }
            if *slot != u32::MAX {
                return Err(LayoutError::Inconsistent {
                    what: "a data node is reached from two places in key order",
                });
            }
            *slot = order.len() as u32;
            order.push(d);
        }
    }
    Ok((order, rank))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Clamp {
    No,
    Min,
    Max,
}

impl TreeView {
    /// Checks the prefix array against the header (length and checksum).
    pub fn new(header: TreeHeader, root: u64, prefix: Vec<u8>) -> Result<TreeView, LayoutError> {
        header.validate()?;
        header.check_prefix(&prefix)?;
        let mut segments = heapless::Vec::new();
        for i in 0..header.n_segments as usize {
            // n_segments <= MAX_SEGMENTS was validated, so the push cannot fail.
            segments
                .push(header.segment(i)?)
                .map_err(|_| LayoutError::Inconsistent {
                    what: "too many segments",
                })?;
        }
        let geometry = header.prefix()?;
        let (order, rank) = key_order(&header, &geometry, &prefix)?;
        Ok(TreeView {
            geometry,
            header,
            root,
            segments,
            prefix,
            order,
            rank,
        })
    }

    /// Reachable data node ids in key order.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// Where data node `id` is in [`Self::order`], if reachable.
    pub fn rank(&self, id: u32) -> Option<usize> {
        match self.rank.get(id as usize) {
            Some(&r) if r != u32::MAX => Some(r as usize),
            _ => None,
        }
    }

    /// The epoch as data nodes' meta words hold it.
    pub fn epoch_tag(&self) -> u32 {
        self.header.epoch & EPOCH_MASK
    }
    /// The data nodes' geometry (slots and value capacity).
    pub fn data(&self) -> DataGeometry {
        self.header.data()
    }
    /// The whole prefix array, as cached.
    pub fn prefix_bytes(&self) -> &[u8] {
        &self.prefix
    }

    /// The data node of `key` (paper §3.2). A character absent from an inner node sends the
    /// key to the least or greatest data node under its neighbours, so key order is data-node
    /// order; on the last level a node's characters are range starts.
    pub fn locate(&self, key: u128) -> Result<u32, LayoutError> {
        self.locate_exact(key).map(|(n, _)| n)
    }

    /// [`Self::locate`], and whether the key's path is the paper's exact match: every gap
    /// equal and every level's character present in its prefix node (the paper sends any
    /// other key to its last data node, §3.2; remora to the nearest node in key order).
    pub fn locate_exact(&self, key: u128) -> Result<(u32, bool), LayoutError> {
        let g = &self.geometry;
        let mut exact = true;
        let mut id = 0u64;
        let mut level = 1u32;
        let mut clamp = Clamp::No;
        for seg in &self.segments {
            match *seg {
                Segment::Gap { value, .. } => {
                    exact &= seg.bits(key) == value;
                    if clamp == Clamp::No {
                        let v = seg.bits(key);
                        if v < value {
                            clamp = Clamp::Min;
                        } else if v > value {
                            clamp = Clamp::Max;
                        }
                    }
                }
                Segment::Level { .. } => {
                    let chars = g.chars(&self.prefix, id)?;
                    if chars.is_empty() {
                        return Err(LayoutError::Inconsistent {
                            what: "a reachable prefix node has no characters",
                        });
                    }
                    let last = level == self.header.height;
                    let p = match clamp {
                        Clamp::Min => 0,
                        Clamp::Max => chars.len() - 1,
                        Clamp::No => match chars.binary_search(&(seg.bits(key) as u8)) {
                            Ok(i) => i,
                            Err(0) => {
                                exact = false;
                                clamp = Clamp::Min;
                                0
                            }
                            Err(i) => {
                                exact = false;
                                if !last {
                                    clamp = Clamp::Max;
                                }
                                i - 1
                            }
                        },
                    };
                    if last {
                        let n = g.node_id(&self.prefix, id, p as u32)?;
                        if n >= self.header.n_data {
                            return Err(LayoutError::OutOfRange {
                                field: "NodeID",
                                value: n as u64,
                            });
                        }
                        return Ok((n, exact && clamp == Clamp::No));
                    }
                    id = g.child(level, id, p as u32);
                    level += 1;
                }
            }
        }
        Err(LayoutError::Inconsistent {
            what: "segments end before the last level",
        })
    }
}

/// What a data node says about one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found<'a> {
    Absent,
    Present(&'a [u8]),
}

/// One data node's bytes, as a READ returned them.
///
/// The segments of one READ observe memory in no particular order, so the bytes are a
/// snapshot only if the meta word, READ alone just before and just after the node on the
/// same queue pair, did not change ([`NodeView::stable`]). Then no lock was released and no
/// item applied while the node was read: live items are those of `front`'s bitmap but the
/// reserved slots ([`NodeView::reserved`]), and the only slots being written are the lock
/// holder's free slot, whose item is trusted only if it checksums ([`NodeView::pending`]),
/// and reserved slots (late appends of skipped holders), which are never read.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub lock: u64,
    /// The meta word as this READ saw it.
    pub front: Meta,
    g: DataGeometry,
    bytes: &'a [u8],
}

impl<'a> NodeView<'a> {
    pub fn parse(g: DataGeometry, bytes: &'a [u8]) -> Result<NodeView<'a>, LayoutError> {
        let size = g.node_size() as usize;
        if bytes.len() < size {
            return Err(LayoutError::Short {
                need: size,
                got: bytes.len(),
            });
        }
        Ok(NodeView {
            lock: read_u64(bytes, LOCK_OFF as usize)?,
            front: Meta(read_u64(bytes, FRONT_OFF as usize)?).check(g.slots)?,
            g,
            bytes: &bytes[..size],
        })
    }

    /// The READ is a snapshot: the meta word READ alone `before` and `after` it (ordered
    /// by the queue pair) is the one the READ saw. Whatever the server changes in a node (a
    /// commit, a release, a split's trim, an epoch) changes the meta word to a value it has
    /// not had since (served tickets only grow, modulo 2^16; a freeze undone by a failed
    /// resize changes nothing else), so nothing but the lock holder's append touched the
    /// node while it was read.
    pub fn stable(&self, before: u64, after: u64) -> bool {
        before == after && self.front.0 == before
    }

    /// The READ saw a lock holder (its FETCH_AND_ADD came before the meta word was read).
    pub fn has_holder(&self) -> bool {
        self.lock & TICKET_MASK != self.front.served()
    }

    /// The item in `slot`, checksummed.
    pub fn item(&self, slot: u32) -> Result<Item<'a>, LayoutError> {
        let off = ITEMS_OFF as usize + slot as usize * self.g.item_size() as usize;
        self.g.decode_item(&self.bytes[off..])
    }

    /// Whether live slot `slot` is reserved: its tail word has `valid` set. The server
    /// clears an item's `valid` before the bitmap store that makes it live, so a live slot
    /// with `valid` set is a hole the server reserved when it skipped a stalled lock holder
    /// (a [`remora_layouts::canrt::hole_tail`]), or that holder's late append landing in it
    /// (every word it can hold has `valid` set): never an item of the tree, and read
    /// without a checksum (a late append may be landing while it is read).
    pub fn reserved(&self, slot: u32) -> bool {
        let isz = self.g.item_size() as usize;
        let at = ITEMS_OFF as usize + (slot as usize + 1) * isz - 8;
        read_u64(self.bytes, at).is_ok_and(tail_valid)
    }

    /// Slots holding applied items: marked live in the bitmap and not reserved.
    pub fn live_slots(&self) -> impl Iterator<Item = u32> + use<'a> {
        let b = self.front.bitmap();
        let nv = *self;
        (0..self.g.slots).filter(move |&s| b & (1 << s) != 0 && !nv.reserved(s))
    }

    /// The lock holder's complete record, if the READ saw a holder that had written one: a
    /// free slot whose item checksums, is not yet processed (`valid`) and carries the served
    /// ticket. Free slots keep processed items (a delete's record, a key's old version) for
    /// as long as they stay free; tickets compare modulo 2^16, so only `valid` tells an old
    /// item that happens to carry the served ticket from the holder's.
    pub fn pending(&self) -> Option<Item<'a>> {
        if !self.has_holder() {
            return None;
        }
        let b = self.front.bitmap();
        (0..self.g.slots)
            .filter(|s| b & (1 << s) == 0)
            .filter_map(|s| self.item(s).ok())
            .find(|it| it.valid && it.ticket == self.front.served())
    }

    /// What the applied items say about `key` (a live item that fails its checksum is an
    /// error: torn, so re-read).
    pub fn find_applied(&self, key: u128) -> Result<Found<'a>, LayoutError> {
        for s in self.live_slots() {
            let it = self.item(s)?;
            if it.key == key {
                return Ok(Found::Present(it.value));
            }
        }
        Ok(Found::Absent)
    }

    /// What a reader sees for `key`: the applied items only. A lock holder's record is not
    /// yet persisted by the server (its NIC write may not be durable), so a reader that
    /// returned it could see it vanish in a memory-node crash; its writer returns only once
    /// the server has applied it (persisted, then made live by the bitmap).
    pub fn find(&self, key: u128) -> Result<Found<'a>, LayoutError> {
        self.find_applied(key)
    }

    /// Every live (applied) pair, in slot order; `visit` gets key and value.
    pub fn for_each_live(&self, mut visit: impl FnMut(u128, &'a [u8])) -> Result<(), LayoutError> {
        for s in self.live_slots() {
            let it = self.item(s)?;
            visit(it.key, it.value);
        }
        Ok(())
    }
}

//! SMART node formats (issue 5): internal nodes of four types and leaves, in 8-byte words.
//!
//! **Internal node** (`16 + 8 * capacity` bytes, capacity 4/16/48/256):
//!
//! | offset | word | meaning |
//! |--------|------|---------|
//! | 0  | reverse pointer | `pack48` of the parent node (0: the root); in the lock-based baseline, the node's lock word instead (0 free, else the holder's owner word) |
//! | 8  | [`Header`] | depth, type, compressed prefix (up to 6 bytes), frozen/obsolete bits |
//! | 16 | [`Slot`] × capacity | partial key, leaf flag, node type or leaf size, 48-bit address |
//!
//! A node dispatches on key byte `depth`; its compressed prefix holds key bytes
//! `depth - prefix_len .. depth`. Slots change only by CMP_AND_SWP (lock-free mode) or under
//! the header's lock bit (the lock-based baseline). Node256 slots are indexed by the partial
//! key; the smaller types fill slots left to right and never empty one: a deleted key's slot
//! there becomes *dead* ([`Slot::dead`]: leaf flag, partial key, no address), which only the
//! same partial key takes again, and a grow's copy drops.
//!
//! **Leaf** (a multiple of 64 bytes, at most [`MAX_LEAF_BYTES`]):
//!
//! | offset | word | meaning |
//! |--------|------|---------|
//! | 0  | reverse pointer | `pack48` of the parent node |
//! | 8  | [`LeafStatus`] | valid bit; obsolete bit + forward address (out-of-place mode) |
//! | 16 | checksum | CRC-64 over the valid bit, the meta word, the key and the value area |
//! | 24 | [`LeafMeta`] | magic, key length, value length, value capacity |
//! | 32 | key, padded to 8 | |
//! | .. | value area (capacity), padded to 8 | |
//! | last | lock | 0 free, otherwise the holder's owner word (`core::lease::owner_word`: its fabric client id and a tag naming its redo slot), taken with a CAS |
//!
//! Every decoder here is checked: garbage bytes (a torn or corrupt read) give a
//! [`LayoutError`], never a panic.
use crate::bits::{Field, assert_disjoint, read_u64};
use crate::{GlobalAddr, LayoutError};
use memoffset::offset_of;

/// Most compressed-prefix bytes one header holds; longer prefixes use a chain of nodes.
pub const MAX_PREFIX: usize = 6;
/// Longest key a leaf (and a node depth) can describe, in bytes.
pub const MAX_KEY_LEN: usize = 256;
/// Leaves are sized in units of this many bytes (the slot's size field counts them).
pub(crate) const LEAF_UNIT: usize = 64;
/// Largest leaf: 63 units.
pub const MAX_LEAF_BYTES: usize = 63 * LEAF_UNIT;
/// Largest node (Node256).
pub const MAX_NODE_BYTES: usize = 16 + 8 * 256;

/// The four internal node types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeType {
    /// Node4: 4 slots.
    N4 = 0,
    /// Node16: 16 slots.
    N16 = 1,
    /// Node48: 48 slots.
    N48 = 2,
    /// Node256: 256 slots, indexed by the partial key.
    N256 = 3,
}

impl NodeType {
    /// The four types, smallest first.
    pub const ALL: [NodeType; 4] = [NodeType::N4, NodeType::N16, NodeType::N48, NodeType::N256];

    /// The type for its 2-bit code (0..=3), or an error.
    pub const fn from_bits(b: u64) -> Result<NodeType, LayoutError> {
        match b {
            0 => Ok(NodeType::N4),
            1 => Ok(NodeType::N16),
            2 => Ok(NodeType::N48),
            3 => Ok(NodeType::N256),
            _ => Err(LayoutError::OutOfRange {
                field: "node type",
                value: b,
            }),
        }
    }

    /// Slots in a node of this type.
    pub const fn capacity(self) -> usize {
        match self {
            NodeType::N4 => 4,
            NodeType::N16 => 16,
            NodeType::N48 => 48,
            NodeType::N256 => 256,
        }
    }

    /// Bytes of a node of this type (reverse pointer + header + slots).
    pub const fn bytes(self) -> usize {
        NODE_SLOTS_OFFSET + 8 * self.capacity()
    }

    /// The next larger type, or `None` for Node256.
    pub const fn grown(self) -> Option<NodeType> {
        match self {
            NodeType::N4 => Some(NodeType::N16),
            NodeType::N16 => Some(NodeType::N48),
            NodeType::N48 => Some(NodeType::N256),
            NodeType::N256 => None,
        }
    }
}

/// The fixed front of an internal node; the slots follow it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeFront {
    /// Reverse pointer: `pack48` of the parent (0 for the root), or the lock word in the lock-based
    /// baseline.
    pub reverse: u64,
    /// The node's [`Header`] word.
    pub header: u64,
}
const _: () = assert!(core::mem::size_of::<NodeFront>() == 16);
const _: () = assert!(offset_of!(NodeFront, reverse) == 0);
const _: () = assert!(offset_of!(NodeFront, header) == 8);
/// Byte offset of an internal node's reverse pointer.
pub const NODE_REV_OFFSET: usize = offset_of!(NodeFront, reverse);
/// Byte offset of an internal node's header word.
pub const NODE_HEADER_OFFSET: usize = offset_of!(NodeFront, header);
/// Byte offset of an internal node's slot 0.
pub const NODE_SLOTS_OFFSET: usize = core::mem::size_of::<NodeFront>();
const _: () = assert!(NodeType::N4.bytes() == 48);
const _: () = assert!(NodeType::N16.bytes() == 144);
const _: () = assert!(NodeType::N48.bytes() == 400);
const _: () = assert!(NodeType::N256.bytes() == MAX_NODE_BYTES);

/// Offset of slot `i` inside a node.
pub const fn slot_offset(i: usize) -> usize {
    NODE_SLOTS_OFFSET + 8 * i
}

const H_PREFIX: Field = Field::new("prefix", 0, 48);
const H_PLEN: Field = Field::new("prefix_len", 48, 3);
const H_TYPE: Field = Field::new("node_type", 51, 2);
const H_DEPTH: Field = Field::new("depth", 53, 9);
const H_OBSOLETE: Field = Field::new("obsolete", 62, 1);
const H_FROZEN: Field = Field::new("frozen", 63, 1);
const _: () = assert_disjoint(&[H_PREFIX, H_PLEN, H_TYPE, H_DEPTH, H_OBSOLETE, H_FROZEN]);
const _: () = assert!(
    H_PREFIX.mask()
        | H_PLEN.mask()
        | H_TYPE.mask()
        | H_DEPTH.mask()
        | H_OBSOLETE.mask()
        | H_FROZEN.mask()
        == u64::MAX
);
const _: () = assert!(H_DEPTH.max() as usize >= MAX_KEY_LEN);

/// An internal node's 8-byte header.
///
/// `frozen` is set once a writer starts copying the node (grow; a frozen node is always
/// replaced, by its grower or by whoever finishes the grow); `obsolete` once the node has been
/// replaced and unlinked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header(u64);

impl Header {
    /// A live, unfrozen header. `prefix` is at most [`MAX_PREFIX`] bytes and `depth >=
    /// prefix.len()`.
    pub fn new(depth: usize, ty: NodeType, prefix: &[u8]) -> Result<Header, LayoutError> {
        if prefix.len() > MAX_PREFIX {
            return Err(LayoutError::OutOfRange {
                field: "prefix_len",
                value: prefix.len() as u64,
            });
        }
        if depth > MAX_KEY_LEN || depth < prefix.len() {
            return Err(LayoutError::OutOfRange {
                field: "depth",
                value: depth as u64,
            });
        }
        let mut p = [0u8; 8];
        p[..prefix.len()].copy_from_slice(prefix);
        let mut w = H_PREFIX.set(0, u64::from_le_bytes(p));
        w = H_PLEN.set(w, prefix.len() as u64);
        w = H_TYPE.set(w, ty as u64);
        w = H_DEPTH.set(w, depth as u64);
        Ok(Header(w))
    }

    /// Checks a word read from remote memory.
    pub fn decode(raw: u64) -> Result<Header, LayoutError> {
        let plen = H_PLEN.get(raw);
        if plen as usize > MAX_PREFIX {
            return Err(LayoutError::OutOfRange {
                field: "prefix_len",
                value: plen,
            });
        }
        let depth = H_DEPTH.get(raw);
        if depth as usize > MAX_KEY_LEN || depth < plen {
            return Err(LayoutError::OutOfRange {
                field: "depth",
                value: depth,
            });
        }
        if H_PREFIX.get(raw) >> (8 * plen) != 0 {
            return Err(LayoutError::Inconsistent {
                what: "prefix bytes beyond prefix_len",
            });
        }
        Ok(Header(raw))
    }

    /// The header word as stored.
    pub const fn raw(self) -> u64 {
        self.0
    }
    /// The node type (bits 52..51).
    pub fn node_type(self) -> NodeType {
        // The 2-bit field always decodes.
        match H_TYPE.get(self.0) {
            0 => NodeType::N4,
            1 => NodeType::N16,
            2 => NodeType::N48,
            _ => NodeType::N256,
        }
    }
    /// Key byte the node dispatches on (bits 61..53).
    pub const fn depth(self) -> usize {
        H_DEPTH.get(self.0) as usize
    }
    /// Bytes of compressed prefix held in the header (bits 50..48, at most [`MAX_PREFIX`]).
    pub const fn prefix_len(self) -> usize {
        H_PLEN.get(self.0) as usize
    }
    /// The compressed prefix bytes (`prefix_len` of them are meaningful).
    pub fn prefix(self) -> [u8; MAX_PREFIX] {
        let b = H_PREFIX.get(self.0).to_le_bytes();
        let mut p = [0u8; MAX_PREFIX];
        p.copy_from_slice(&b[..MAX_PREFIX]);
        p
    }
    /// Key position where this node's prefix starts.
    pub const fn prefix_start(self) -> usize {
        self.depth() - self.prefix_len()
    }
    /// Bit 63: a writer has started copying the node.
    pub const fn is_frozen(self) -> bool {
        H_FROZEN.get(self.0) == 1
    }
    /// Bit 62: the node has been replaced and unlinked.
    pub const fn is_obsolete(self) -> bool {
        H_OBSOLETE.get(self.0) == 1
    }
    /// The same header with the frozen bit set or cleared.
    pub const fn frozen(self, on: bool) -> Header {
        Header(H_FROZEN.set(self.0, on as u64))
    }
    /// The same header with the obsolete bit set.
    pub const fn obsolete(self) -> Header {
        Header(H_OBSOLETE.set(self.0, 1))
    }
    /// The same header with another type (a grown copy).
    pub const fn with_type(self, ty: NodeType) -> Header {
        Header(H_TYPE.set(self.0, ty as u64))
    }
    /// The header without its frozen and obsolete bits.
    pub const fn clean(self) -> Header {
        Header(self.0 & !(H_FROZEN.mask() | H_OBSOLETE.mask()))
    }
}

const S_ADDR: Field = Field::new("addr", 0, 48);
const S_PKEY: Field = Field::new("partial_key", 48, 8);
const S_LEAF: Field = Field::new("leaf", 56, 1);
const S_SIZE: Field = Field::new("type_or_units", 57, 6);
const S_FROZEN: Field = Field::new("frozen", 63, 1);
const _: () = assert_disjoint(&[S_ADDR, S_PKEY, S_LEAF, S_SIZE, S_FROZEN]);
const _: () = assert!(
    S_ADDR.mask() | S_PKEY.mask() | S_LEAF.mask() | S_SIZE.mask() | S_FROZEN.mask() == u64::MAX
);
const _: () = assert!(S_SIZE.max() as usize * LEAF_UNIT == MAX_LEAF_BYTES);

/// What a slot word says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// No child.
    Empty,
    /// A leaf of `bytes` bytes.
    Leaf {
        /// Partial key: the key byte at the parent's depth.
        pkey: u8,
        /// Address of the leaf.
        addr: GlobalAddr,
        /// Leaf size in bytes (a multiple of [`LEAF_UNIT`]).
        bytes: usize,
    },
    /// A dead slot: its key's leaf was deleted and unlinked. It keeps its partial key (a
    /// Node4/16/48 never has two slots of one partial key), so only that key byte reuses it.
    Dead {
        /// Partial key: the key byte at the parent's depth.
        pkey: u8,
    },
    /// An internal node of type `ty`.
    Node {
        /// Partial key: the key byte at the parent's depth.
        pkey: u8,
        /// Address of the child node.
        addr: GlobalAddr,
        /// The child's type.
        ty: NodeType,
    },
}

/// One 8-byte slot of an internal node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot(u64);

impl Slot {
    /// The empty slot word (all zero).
    pub const EMPTY: Slot = Slot(0);

    /// A slot pointing at a leaf of `bytes` bytes (a non-zero multiple of [`LEAF_UNIT`], at most
    /// [`MAX_LEAF_BYTES`]) at a non-null `pack48` address.
    pub fn leaf(pkey: u8, addr: GlobalAddr, bytes: usize) -> Result<Slot, LayoutError> {
        if bytes == 0 || bytes > MAX_LEAF_BYTES || !bytes.is_multiple_of(LEAF_UNIT) {
            return Err(LayoutError::OutOfRange {
                field: "leaf bytes",
                value: bytes as u64,
            });
        }
        let a = addr.pack48()?;
        if a == 0 {
            return Err(LayoutError::OutOfRange {
                field: "addr",
                value: 0,
            });
        }
        let mut w = S_ADDR.set(0, a);
        w = S_PKEY.set(w, pkey as u64);
        w = S_LEAF.set(w, 1);
        w = S_SIZE.set(w, (bytes / LEAF_UNIT) as u64);
        Ok(Slot(w))
    }

    /// A slot pointing at a child node of type `ty` at a non-null `pack48` address.
    pub fn node(pkey: u8, addr: GlobalAddr, ty: NodeType) -> Result<Slot, LayoutError> {
        let a = addr.pack48()?;
        if a == 0 {
            return Err(LayoutError::OutOfRange {
                field: "addr",
                value: 0,
            });
        }
        let mut w = S_ADDR.set(0, a);
        w = S_PKEY.set(w, pkey as u64);
        w = S_SIZE.set(w, ty as u64);
        Ok(Slot(w))
    }

    /// A dead slot of partial key `pkey`: leaf flag, no size, null address.
    pub const fn dead(pkey: u8) -> Slot {
        Slot(S_LEAF.set(S_PKEY.set(0, pkey as u64), 1))
    }

    /// True for a dead slot, frozen or not.
    pub const fn is_dead(self) -> bool {
        self.0 & !S_FROZEN.mask() & !S_PKEY.mask() == S_LEAF.mask()
    }

    /// A slot word as read; only [`Slot::kind`] checks it.
    pub const fn from_raw(raw: u64) -> Slot {
        Slot(raw)
    }
    /// The slot word as stored.
    pub const fn raw(self) -> u64 {
        self.0
    }
    /// Bit 63: the slot is frozen (its node is being copied).
    pub const fn is_frozen(self) -> bool {
        S_FROZEN.get(self.0) == 1
    }
    /// The same slot with the frozen bit set or cleared.
    pub const fn frozen(self, on: bool) -> Slot {
        Slot(S_FROZEN.set(self.0, on as u64))
    }
    /// True for an empty slot, frozen or not.
    pub const fn is_empty(self) -> bool {
        self.0 & !S_FROZEN.mask() == 0
    }
    /// The partial key (meaningless for an empty slot).
    pub const fn pkey(self) -> u8 {
        S_PKEY.get(self.0) as u8
    }

    /// Decodes the slot, checking every field.
    pub fn kind(self) -> Result<SlotKind, LayoutError> {
        if self.is_empty() {
            return Ok(SlotKind::Empty);
        }
        if self.is_dead() {
            return Ok(SlotKind::Dead { pkey: self.pkey() });
        }
        let packed = S_ADDR.get(self.0);
        if packed == 0 {
            return Err(LayoutError::Inconsistent {
                what: "non-empty slot with a null address",
            });
        }
        let addr = GlobalAddr::unpack48(packed)?;
        let pkey = self.pkey();
        let size = S_SIZE.get(self.0);
        if S_LEAF.get(self.0) == 1 {
            if size == 0 {
                return Err(LayoutError::OutOfRange {
                    field: "leaf units",
                    value: 0,
                });
            }
            Ok(SlotKind::Leaf {
                pkey,
                addr,
                bytes: size as usize * LEAF_UNIT,
            })
        } else {
            Ok(SlotKind::Node {
                pkey,
                addr,
                ty: NodeType::from_bits(size)?,
            })
        }
    }
}

/// A reverse pointer word: `pack48` of the parent node.
pub fn encode_reverse(parent: GlobalAddr) -> Result<u64, LayoutError> {
    parent.pack48()
}

/// Decodes a reverse pointer (0: none).
pub fn decode_reverse(raw: u64) -> Result<Option<GlobalAddr>, LayoutError> {
    if raw == 0 {
        return Ok(None);
    }
    GlobalAddr::unpack48(raw).map(Some)
}

/// The fixed front of a leaf; key, value area and the rear lock follow.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeafFront {
    /// Reverse pointer: `pack48` of the parent node.
    pub reverse: u64,
    /// The [`LeafStatus`] word.
    pub status: u64,
    /// CRC-64 over the valid bit, the meta word, the key and the value area.
    pub checksum: u64,
    /// The [`LeafMeta`] word.
    pub meta: u64,
}
const _: () = assert!(core::mem::size_of::<LeafFront>() == 32);
/// Byte offset of a leaf's reverse pointer.
pub(crate) const LEAF_REV_OFFSET: usize = offset_of!(LeafFront, reverse);
/// Byte offset of a leaf's status word.
pub const LEAF_STATUS_OFFSET: usize = offset_of!(LeafFront, status);
/// Byte offset of a leaf's checksum word.
pub const LEAF_CRC_OFFSET: usize = offset_of!(LeafFront, checksum);
/// Byte offset of a leaf's meta word.
pub(crate) const LEAF_META_OFFSET: usize = offset_of!(LeafFront, meta);
/// Byte offset of a leaf's key.
pub const LEAF_KEY_OFFSET: usize = core::mem::size_of::<LeafFront>();
const _: () = assert!(LEAF_REV_OFFSET == 0 && LEAF_STATUS_OFFSET == 8);
const _: () = assert!(LEAF_CRC_OFFSET == 16 && LEAF_META_OFFSET == 24);

const fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Bytes of a leaf holding a `key_len`-byte key and up to `val_cap` value bytes.
pub const fn leaf_bytes(key_len: usize, val_cap: usize) -> usize {
    let raw = LEAF_KEY_OFFSET + pad8(key_len) + pad8(val_cap) + 8;
    raw.div_ceil(LEAF_UNIT) * LEAF_UNIT
}

/// Offset of the rear lock word in a leaf of `bytes` bytes.
pub const fn leaf_lock_offset(bytes: usize) -> usize {
    bytes - 8
}

const L_VALID: Field = Field::new("valid", 0, 1);
const L_OBSOLETE: Field = Field::new("obsolete", 1, 1);
const L_FWD: Field = Field::new("forward", 8, 48);
const _: () = assert_disjoint(&[L_VALID, L_OBSOLETE, L_FWD]);
const L_STATUS_USED: u64 = L_VALID.mask() | L_OBSOLETE.mask() | L_FWD.mask();

/// A leaf's status word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeafStatus(u64);

impl LeafStatus {
    /// A status word with only the valid bit (set or clear).
    pub const fn live(valid: bool) -> LeafStatus {
        LeafStatus(L_VALID.set(0, valid as u64))
    }
    /// Checks a status word: no unknown bits, obsolete bit set exactly when a forward address is.
    pub fn decode(raw: u64) -> Result<LeafStatus, LayoutError> {
        if raw & !L_STATUS_USED != 0 {
            return Err(LayoutError::Inconsistent {
                what: "leaf status has unknown bits",
            });
        }
        let s = LeafStatus(raw);
        if s.is_obsolete() != (L_FWD.get(raw) != 0) {
            return Err(LayoutError::Inconsistent {
                what: "leaf obsolete bit and forward address disagree",
            });
        }
        Ok(s)
    }
    /// This leaf replaced by the leaf at `to` (out-of-place update).
    pub fn forwarded(self, to: GlobalAddr) -> Result<LeafStatus, LayoutError> {
        let p = to.pack48()?;
        Ok(LeafStatus(L_FWD.set(L_OBSOLETE.set(self.0, 1), p)))
    }
    /// The status word as stored.
    pub const fn raw(self) -> u64 {
        self.0
    }
    /// Bit 0: the leaf holds a live key-value pair.
    pub const fn is_valid(self) -> bool {
        L_VALID.get(self.0) == 1
    }
    /// Bit 1: the leaf was replaced out of place.
    pub const fn is_obsolete(self) -> bool {
        L_OBSOLETE.get(self.0) == 1
    }
    /// The replacing leaf's address (bits 55..8), if any.
    pub fn forward(self) -> Option<GlobalAddr> {
        match L_FWD.get(self.0) {
            0 => None,
            p => GlobalAddr::unpack48(p).ok(),
        }
    }
}

const M_KEY_LEN: Field = Field::new("key_len", 0, 16);
const M_VAL_LEN: Field = Field::new("val_len", 16, 16);
const M_VAL_CAP: Field = Field::new("val_cap", 32, 16);
const M_MAGIC: Field = Field::new("magic", 48, 16);
const _: () = assert_disjoint(&[M_KEY_LEN, M_VAL_LEN, M_VAL_CAP, M_MAGIC]);
/// Tag in every leaf's meta word, to refuse what is not a leaf.
pub const LEAF_MAGIC: u64 = 0x5AF1;

/// A leaf's meta word: lengths and a magic tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafMeta {
    /// Key length in bytes (1..=[`MAX_KEY_LEN`]; bits 15..0).
    pub key_len: usize,
    /// Value length in bytes, at most `val_cap` (bits 31..16).
    pub val_len: usize,
    /// Value area capacity in bytes (bits 47..32).
    pub val_cap: usize,
}

impl LeafMeta {
    /// The meta word with [`LEAF_MAGIC`], or an error if the lengths do not fit a leaf.
    pub fn encode(&self) -> Result<u64, LayoutError> {
        if self.key_len == 0 || self.key_len > MAX_KEY_LEN {
            return Err(LayoutError::OutOfRange {
                field: "key_len",
                value: self.key_len as u64,
            });
        }
        if self.val_len > self.val_cap || leaf_bytes(self.key_len, self.val_cap) > MAX_LEAF_BYTES {
            return Err(LayoutError::OutOfRange {
                field: "val_len",
                value: self.val_len as u64,
            });
        }
        let mut w = M_KEY_LEN.set(0, self.key_len as u64);
        w = M_VAL_LEN.set(w, self.val_len as u64);
        w = M_VAL_CAP.set(w, self.val_cap as u64);
        Ok(M_MAGIC.set(w, LEAF_MAGIC))
    }

    /// Checks the magic and the lengths of a meta word.
    pub fn decode(raw: u64) -> Result<LeafMeta, LayoutError> {
        if M_MAGIC.get(raw) != LEAF_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: LEAF_MAGIC,
                found: M_MAGIC.get(raw),
            });
        }
        let m = LeafMeta {
            key_len: M_KEY_LEN.get(raw) as usize,
            val_len: M_VAL_LEN.get(raw) as usize,
            val_cap: M_VAL_CAP.get(raw) as usize,
        };
        m.encode().map(|_| m)
    }

    /// Total leaf bytes.
    pub const fn bytes(&self) -> usize {
        leaf_bytes(self.key_len, self.val_cap)
    }
    /// Offset of the value area.
    pub const fn value_offset(&self) -> usize {
        LEAF_KEY_OFFSET + pad8(self.key_len)
    }
    /// End of the checksummed area (key and value area).
    pub const fn body_end(&self) -> usize {
        self.value_offset() + pad8(self.val_cap)
    }
}

/// A decoded leaf image: the checksum is NOT verified here (the core does, with CRC-64
/// over [`LeafView::checksummed`]).
#[derive(Debug, Clone, Copy)]
pub struct LeafView<'a> {
    /// Reverse pointer word.
    pub reverse: u64,
    /// The status word.
    pub status: LeafStatus,
    /// The stored checksum (not verified by the decoder).
    pub checksum: u64,
    /// The meta word.
    pub meta: LeafMeta,
    /// The key bytes.
    pub key: &'a [u8],
    /// The value bytes (`meta.val_len` of them).
    pub value: &'a [u8],
    /// The rear lock word: 0 free, else the holder's owner word.
    pub lock: u64,
    bytes: &'a [u8],
}

impl<'a> LeafView<'a> {
    /// Decodes a leaf image of exactly the size its slot announced.
    pub fn decode(bytes: &'a [u8]) -> Result<LeafView<'a>, LayoutError> {
        if bytes.len() < LEAF_UNIT || !bytes.len().is_multiple_of(LEAF_UNIT) {
            return Err(LayoutError::Short {
                need: LEAF_UNIT,
                got: bytes.len(),
            });
        }
        let meta = LeafMeta::decode(read_u64(bytes, LEAF_META_OFFSET)?)?;
        if meta.bytes() != bytes.len() {
            return Err(LayoutError::Inconsistent {
                what: "leaf size in meta differs from the slot's",
            });
        }
        let status = LeafStatus::decode(read_u64(bytes, LEAF_STATUS_OFFSET)?)?;
        let vo = meta.value_offset();
        Ok(LeafView {
            reverse: read_u64(bytes, LEAF_REV_OFFSET)?,
            status,
            checksum: read_u64(bytes, LEAF_CRC_OFFSET)?,
            meta,
            key: &bytes[LEAF_KEY_OFFSET..LEAF_KEY_OFFSET + meta.key_len],
            value: &bytes[vo..vo + meta.val_len],
            lock: read_u64(bytes, leaf_lock_offset(bytes.len()))?,
            bytes,
        })
    }

    /// The bytes the checksum covers, after the valid bit: meta word, key and value area.
    pub fn checksummed(&self) -> &'a [u8] {
        &self.bytes[LEAF_META_OFFSET..self.meta.body_end()]
    }
}

/// Writes a whole leaf image into `out` (which must be `meta.bytes()` long): reverse pointer,
/// status, `checksum`, meta, key, value (zero-padded) and a free lock. Returns the meta.
pub fn encode_leaf(
    out: &mut [u8],
    reverse: u64,
    status: LeafStatus,
    checksum: u64,
    key: &[u8],
    value: &[u8],
    val_cap: usize,
) -> Result<LeafMeta, LayoutError> {
    let meta = LeafMeta {
        key_len: key.len(),
        val_len: value.len(),
        val_cap,
    };
    let m = meta.encode()?;
    if out.len() != meta.bytes() {
        return Err(LayoutError::Short {
            need: meta.bytes(),
            got: out.len(),
        });
    }
    out.fill(0);
    out[LEAF_REV_OFFSET..8].copy_from_slice(&reverse.to_le_bytes());
    out[LEAF_STATUS_OFFSET..16].copy_from_slice(&status.raw().to_le_bytes());
    out[LEAF_CRC_OFFSET..24].copy_from_slice(&checksum.to_le_bytes());
    out[LEAF_META_OFFSET..32].copy_from_slice(&m.to_le_bytes());
    out[LEAF_KEY_OFFSET..LEAF_KEY_OFFSET + key.len()].copy_from_slice(key);
    let vo = meta.value_offset();
    out[vo..vo + value.len()].copy_from_slice(value);
    Ok(meta)
}

/// Magic of a SMART tree's meta block (`b"SMART001"`).
pub const TREE_MAGIC: u64 = u64::from_le_bytes(*b"SMART001");

/// A tree's meta block, published in a region root slot: what every client must agree on.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeMeta {
    /// Must equal [`TREE_MAGIC`].
    pub magic: u64,
    /// Structural mode bits (the writer protocols every client must share).
    pub flags: u64,
    /// Raw `GlobalAddr` of the root Node256.
    pub root: u64,
    /// Key mode (0: variable, n: fixed n-byte keys) and value capacity, packed.
    pub shape: u64,
}
/// Bytes of an encoded [`TreeMeta`].
pub const TREE_META_LEN: usize = core::mem::size_of::<TreeMeta>();
const _: () = assert!(TREE_META_LEN == 32);
const _: () = assert!(offset_of!(TreeMeta, root) == 16 && offset_of!(TreeMeta, shape) == 24);

impl TreeMeta {
    /// The block's 32 bytes, little-endian, in field order.
    pub fn encode(&self) -> [u8; TREE_META_LEN] {
        let mut o = [0u8; TREE_META_LEN];
        o[0..8].copy_from_slice(&self.magic.to_le_bytes());
        o[8..16].copy_from_slice(&self.flags.to_le_bytes());
        o[16..24].copy_from_slice(&self.root.to_le_bytes());
        o[24..32].copy_from_slice(&self.shape.to_le_bytes());
        o
    }
    /// Decodes 32 bytes, checking the magic and that the root is not null.
    pub fn decode(b: &[u8]) -> Result<TreeMeta, LayoutError> {
        let m = TreeMeta {
            magic: read_u64(b, 0)?,
            flags: read_u64(b, 8)?,
            root: read_u64(b, 16)?,
            shape: read_u64(b, 24)?,
        };
        if m.magic != TREE_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: TREE_MAGIC,
                found: m.magic,
            });
        }
        if GlobalAddr::from_raw(m.root).offset() == 0 {
            return Err(LayoutError::Inconsistent {
                what: "tree meta has a null root",
            });
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dead_slot_keeps_its_partial_key() {
        let d = Slot::dead(0x41);
        assert!(d.is_dead() && d.frozen(true).is_dead() && !d.is_empty());
        assert_eq!(d.kind().unwrap(), SlotKind::Dead { pkey: 0x41 });
        assert_eq!(d.frozen(true).pkey(), 0x41);
        let l = Slot::leaf(0x41, GlobalAddr::new(0, 64), 64).unwrap();
        assert!(!l.is_dead() && !Slot::EMPTY.is_dead());
    }

    #[test]
    fn header_round_trip_and_bits() {
        let h = Header::new(9, NodeType::N16, b"abc").unwrap();
        let d = Header::decode(h.raw()).unwrap();
        assert_eq!(d.depth(), 9);
        assert_eq!(d.node_type(), NodeType::N16);
        assert_eq!(&d.prefix()[..d.prefix_len()], b"abc");
        assert_eq!(d.prefix_start(), 6);
        assert!(!d.is_frozen() && !d.is_obsolete());
        let f = d.frozen(true).obsolete();
        assert!(f.is_frozen() && f.is_obsolete());
        assert_eq!(f.clean(), d);
        assert_eq!(d.with_type(NodeType::N48).node_type(), NodeType::N48);
        assert!(Header::new(2, NodeType::N4, b"abc").is_err());
        assert!(Header::new(9, NodeType::N4, b"abcdefg").is_err());
    }

    #[test]
    fn slot_round_trip() {
        let a = GlobalAddr::new(3, 0x1000);
        let s = Slot::leaf(0x41, a, 128).unwrap();
        assert_eq!(
            s.kind().unwrap(),
            SlotKind::Leaf {
                pkey: 0x41,
                addr: a,
                bytes: 128
            }
        );
        let n = Slot::node(7, a, NodeType::N48).unwrap();
        assert_eq!(
            n.kind().unwrap(),
            SlotKind::Node {
                pkey: 7,
                addr: a,
                ty: NodeType::N48
            }
        );
        assert!(n.frozen(true).is_frozen());
        assert_eq!(n.frozen(true).frozen(false), n);
        assert!(Slot::EMPTY.frozen(true).is_empty());
        assert!(Slot::leaf(1, a, 100).is_err());
        assert!(Slot::leaf(1, GlobalAddr::NULL, 64).is_err());
        assert!(Slot::node(1, GlobalAddr::new(300, 64), NodeType::N4).is_err());
    }

    #[test]
    fn leaf_round_trip() {
        let bytes = leaf_bytes(8, 8);
        assert_eq!(bytes, 64);
        let mut buf = [0u8; 64];
        let st = LeafStatus::live(true);
        let m = encode_leaf(&mut buf, 5, st, 77, b"12345678", b"val", 8).unwrap();
        assert_eq!(m.bytes(), 64);
        let v = LeafView::decode(&buf).unwrap();
        assert_eq!(v.key, b"12345678");
        assert_eq!(v.value, b"val");
        assert_eq!(v.checksum, 77);
        assert_eq!(v.reverse, 5);
        assert!(v.status.is_valid());
        assert_eq!(v.lock, 0);
        assert_eq!(v.checksummed().len(), 8 + 8 + 8);
        let fwd = st.forwarded(GlobalAddr::new(1, 4096)).unwrap();
        assert!(fwd.is_obsolete());
        assert_eq!(fwd.forward(), Some(GlobalAddr::new(1, 4096)));
        assert_eq!(LeafStatus::decode(fwd.raw()), Ok(fwd));
        assert!(LeafStatus::decode(2).is_err());
        assert!(LeafView::decode(&buf[..32]).is_err());
        let mut bad = buf;
        bad[30] = 0;
        assert!(LeafView::decode(&bad).is_err());
    }

    proptest! {
        #[test]
        fn decoders_never_panic(words in proptest::collection::vec(any::<u64>(), 0..64)) {
            let mut bytes = [0u8; 512];
            for (i, w) in words.iter().enumerate() {
                bytes[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                let _ = Header::decode(*w);
                let _ = Slot::from_raw(*w).kind();
                let _ = LeafStatus::decode(*w);
                let _ = LeafMeta::decode(*w);
                let _ = decode_reverse(*w);
            }
            for len in [0usize, 64, 128, 512] {
                let _ = LeafView::decode(&bytes[..len]);
            }
            let _ = TreeMeta::decode(&bytes[..32]);
        }

        #[test]
        fn headers_round_trip(depth in 6usize..=MAX_KEY_LEN, plen in 0usize..=6, p in any::<[u8; 6]>(), t in 0u64..4) {
            let ty = NodeType::from_bits(t).unwrap();
            let h = Header::new(depth, ty, &p[..plen]).unwrap();
            let d = Header::decode(h.raw()).unwrap();
            prop_assert_eq!(d.depth(), depth);
            prop_assert_eq!(d.node_type(), ty);
            prop_assert_eq!(&d.prefix()[..plen], &p[..plen]);
        }

        #[test]
        fn leaves_round_trip(key in proptest::collection::vec(any::<u8>(), 1..64), val in proptest::collection::vec(any::<u8>(), 0..100)) {
            let cap = val.len() + 3;
            let n = leaf_bytes(key.len(), cap);
            let mut buf = [0u8; 512];
            encode_leaf(&mut buf[..n], 0, LeafStatus::live(true), 1, &key, &val, cap).unwrap();
            let v = LeafView::decode(&buf[..n]).unwrap();
            prop_assert_eq!(v.key, &key[..]);
            prop_assert_eq!(v.value, &val[..]);
        }
    }
}

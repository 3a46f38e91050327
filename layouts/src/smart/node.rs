//! Internal nodes: the four types, the fixed front and the header word.
use super::*;

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

//! Slots of internal nodes and reverse pointers.
use super::*;

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

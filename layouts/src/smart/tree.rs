//! A tree's meta block.
use super::*;

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

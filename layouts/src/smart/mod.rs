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
//!
//! The formats by mechanism: internal nodes and their header (`node.rs`), slots and reverse
//! pointers (`slot.rs`), leaves (`leaf.rs`) and their checksum (`checksum.rs`), the tree's meta
//! block (`tree.rs`).
use crate::bits::{Field, assert_disjoint, read_u64};
use crate::{GlobalAddr, LayoutError};
use memoffset::offset_of;

mod checksum;
mod leaf;
mod node;
mod slot;
#[cfg(test)]
mod tests;
mod tree;

pub use checksum::{leaf_crc, leaf_crc_table};
pub use leaf::*;
pub use node::*;
pub use slot::*;
pub use tree::*;

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

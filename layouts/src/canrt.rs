//! CANRT node and message formats: the tree header, the pointer-less prefix nodes, the data
//! nodes with their metadata words and `DataItem`s, the WRITE_WITH_IMM immediate and the
//! control messages clients SEND to the metadata applier.
//!
//! A tree lives in one contiguous *area* of a memory node's host region:
//!
//! ```text
//! area:        [TreeHeader 384 B][prefix nodes, level 1 .. k]
//! data array:  [data node 0][data node 1] ... [data node data_cap - 1]
//! ```
//!
//! published by the area's offset (an encoded `GlobalAddr`) in root slot [`ROOT_SLOT`] of
//! the region header. A resize writes a new header and prefix array into another area (two
//! alternate, tick-tock) and appends data nodes to the same data array, in place.
//!
//! **Prefix nodes** (paper §3.1): level `i` (1-based) holds `m^(i-1)` nodes numbered
//! sequentially from 0 across levels, so the base id of level `i` is `(m^(i-1) - 1)/(m - 1)`
//! (eq. 2) and the child of node `cur` at position `p` is `b(i+1) + (cur - b(i))*m + p`
//! (eq. 3). A node is `nChars: u16` and `chars: [u8; m]` (sorted, distinct), padded to 8
//! bytes; a last-level node also has `NodeID: [u32; m]`. Which key bits a level's character
//! is taken from is described by the header's [`Segment`]s (see `remora_core::canrt`).
//!
//! The header carries two CRC-64s: `prefix_check` over the prefix array and `header_check`
//! over the header itself (with `header_check` taken as zero). A client READs header and
//! prefix array while the server may be rewriting the area (tick-tock), and the 64-byte
//! segments of one READ observe memory in no particular order, so a torn copy can have any
//! mix of old and new words: the checksums, not the order of the server's stores, decide.
//!
//! **Data node** (paper §3.1, Fig. 3): `lock` word, [`Meta`] word, `slots` DataItems. The
//! paper packs bitmap and lock in one word that clients FETCH_AND_ADD and the server's CPU
//! rewrites; the fabric contract (rule 3) does not make NIC atomics atomic against CPU
//! stores, so here the `lock` word is touched only by NIC FETCH_AND_ADDs (a ticket counter)
//! and the server's CPU writes only the meta word (bitmap, `served` ticket, frozen flag,
//! epoch). A reader brackets its READ of the whole node with READs of the meta word alone
//! (see `remora_core::canrt`): a copy of the meta word inside the node READ proves nothing,
//! as the segments of one READ observe memory in any order.
//!
//! **DataItem**: `key` (8-byte trees: a little-endian `u64`; 16-byte trees: the key's 16 bytes
//! as given, i.e. big-endian), `value: [u8; value_cap]`, tail word (valid bit last-written,
//! opflag, length, ticket, CRC-32 over key, value, opflag, length and ticket). The paper's
//! `valid` bit is bit 0 of the tail; it is the one field the checksum leaves out (the server
//! clears it after applying), and it shares the tail word, always written whole, with the
//! ticket and the checksum.
use crate::LayoutError;
use crate::bits::{Field, assert_disjoint, read_u64};

/// Region-header root slot that publishes the CANRT tree.
pub const ROOT_SLOT: usize = 3;
/// `b"CANRT001"` as a little-endian u64.
pub const TREE_MAGIC: u64 = u64::from_le_bytes(*b"CANRT001");
/// Most DataItem slots a data node has (bits of the bitmap).
pub const MAX_SLOTS: usize = 32;
/// Largest value capacity of a DataItem.
pub const MAX_VALUE: usize = 248;
/// Key widths a tree can have, chosen when it is formatted: 8-byte integer keys or 16-byte
/// keys (the paper's: random strings). Keys are compared as big-endian unsigned integers
/// (`u128` in memory), so key order is the order of their bytes.
pub const KEY_LENS: [u32; 2] = [8, 16];
/// Widest key.
pub const MAX_KEY: usize = 16;
/// Largest encoded DataItem: key, value, tail word.
pub const MAX_ITEM: usize = MAX_KEY + MAX_VALUE + 8;
/// Most segments (gaps + levels) a tree header describes.
pub const MAX_SEGMENTS: usize = 16;
/// Most data nodes a tree has (the immediate carries 20 bits of node id): with 32 slots a
/// node, tens of millions of keys.
pub const MAX_DATA_NODES: u64 = 1 << 20;
/// Largest prefix array clients cache (room for [`MAX_DATA_NODES`] NodeIDs and their
/// characters).
pub(crate) const MAX_PREFIX_BYTES: u64 = 1 << 24;
/// Tickets and `served` compare modulo 2^16.
pub const TICKET_MASK: u64 = (1 << 16) - 1;
/// Epochs compare modulo 2^15 in meta words.
pub const EPOCH_MASK: u32 = (1 << 15) - 1;
/// The WRITE_WITH_IMM immediate and control messages carry epochs mod 2^7.
pub const SHORT_EPOCH_MASK: u32 = (1 << 7) - 1;

// ---------------------------------------------------------------- meta word

const M_BITMAP: Field = Field::new("bitmap", 0, 32);
const M_SERVED: Field = Field::new("served", 32, 16);
const M_FROZEN: Field = Field::new("frozen", 48, 1);
const M_EPOCH: Field = Field::new("epoch", 49, 15);
const _: () = assert_disjoint(&[M_BITMAP, M_SERVED, M_FROZEN, M_EPOCH]);

/// A data node's metadata word, written only by the server's CPU.
///
/// | bits   | field  | meaning |
/// |--------|--------|---------|
/// | 31..0  | bitmap | bit `s`: slot `s` holds a live DataItem |
/// | 47..32 | served | tickets released so far (mod 2^16): the lock holder has ticket `served` |
/// | 48     | frozen | a resize is under way; writers must wait for the next tree |
/// | 63..49 | epoch  | the epoch of the tree the node belongs to, mod 2^15 |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta(pub u64);

impl Meta {
    /// Packs a meta word; `served` is kept mod 2^16 and `epoch` mod 2^15.
    pub const fn new(bitmap: u32, served: u64, frozen: bool, epoch: u32) -> Meta {
        let w = M_BITMAP.set(0, bitmap as u64);
        let w = M_SERVED.set(w, served);
        let w = M_FROZEN.set(w, frozen as u64);
        Meta(M_EPOCH.set(w, epoch as u64))
    }
    /// Bits 31..0: bit `s` set when slot `s` holds a live DataItem.
    pub const fn bitmap(self) -> u32 {
        M_BITMAP.get(self.0) as u32
    }
    /// Bits 47..32: tickets released so far, mod 2^16.
    pub const fn served(self) -> u64 {
        M_SERVED.get(self.0)
    }
    /// Bit 48: a resize is under way.
    pub const fn frozen(self) -> bool {
        M_FROZEN.get(self.0) == 1
    }
    /// Bits 63..49: the tree's epoch, mod 2^15.
    pub const fn epoch(self) -> u32 {
        M_EPOCH.get(self.0) as u32
    }
    /// The same word with a new bitmap.
    pub const fn with_bitmap(self, b: u32) -> Meta {
        Meta(M_BITMAP.set(self.0, b as u64))
    }
    /// The same word with a new `served` count (truncated to 16 bits).
    pub const fn with_served(self, s: u64) -> Meta {
        Meta(M_SERVED.set(self.0, s))
    }
    /// The same word with the frozen flag set or cleared.
    pub const fn with_frozen(self, f: bool) -> Meta {
        Meta(M_FROZEN.set(self.0, f as u64))
    }
    /// The same word with a new epoch (taken mod 2^15).
    pub const fn with_epoch(self, e: u32) -> Meta {
        Meta(M_EPOCH.set(self.0, (e & EPOCH_MASK) as u64))
    }
    /// Checks the bitmap against a node of `slots` slots.
    pub const fn check(self, slots: u32) -> Result<Meta, LayoutError> {
        if slots < 32 && self.bitmap() >> slots != 0 {
            return Err(LayoutError::Inconsistent {
                what: "bitmap marks slots beyond the node",
            });
        }
        Ok(self)
    }
}

// ---------------------------------------------------------------- DataItem

const T_VALID: Field = Field::new("valid", 0, 1);
const T_OP: Field = Field::new("opflag", 1, 2);
const T_LEN: Field = Field::new("len", 8, 8);
const T_TICKET: Field = Field::new("ticket", 16, 16);
const T_CHECK: Field = Field::new("check", 32, 32);
const _: () = assert_disjoint(&[T_VALID, T_OP, T_LEN, T_TICKET, T_CHECK]);

/// The paper's opflag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ItemOp {
    /// Insert (or overwrite): the item becomes the key's live item.
    Insert = 1,
    /// Delete: the key's live item is dropped; the record itself never becomes live.
    Delete = 2,
    /// Update of a present key: the old item is invalidated, the new one validated.
    Update = 3,
}

impl ItemOp {
    /// The opflag for tail-word bits 2..1 (1 insert, 2 delete, 3 update), or an error.
    pub const fn from_bits(b: u64) -> Result<ItemOp, LayoutError> {
        match b {
            1 => Ok(ItemOp::Insert),
            2 => Ok(ItemOp::Delete),
            3 => Ok(ItemOp::Update),
            _ => Err(LayoutError::OutOfRange {
                field: "opflag",
                value: b,
            }),
        }
    }
}

/// CRC-32C, slice-by-16 tables (the client checks every item of a data node it reads).
static CRC32: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

/// CRC-32 of an item: key (its stored bytes), value bytes, opflag, length, ticket (not the
/// valid bit, which the server clears after applying). It covers every word a reader uses,
/// so a torn item (any mix of an old and a new item's words) fails it whatever order its
/// words landed in.
pub(crate) fn item_check(key: &[u8], value: &[u8], op: ItemOp, len: usize, ticket: u64) -> u64 {
    let mut d = CRC32.digest();
    d.update(key);
    d.update(value);
    d.update(&[op as u8, len as u8]);
    d.update(&(ticket & TICKET_MASK).to_le_bytes());
    d.finalize() as u64
}

/// A decoded DataItem, borrowing its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    /// The key as a big-endian integer (below 2^64 in an 8-byte tree).
    pub key: u128,
    /// The value's bytes (its stored length, at most `value_cap`).
    pub value: &'a [u8],
    /// What the item does to its key.
    pub op: ItemOp,
    /// The writer's lock ticket, mod 2^16.
    pub ticket: u64,
    /// Not yet processed by the server (the paper's valid = 1).
    pub valid: bool,
}

/// Data-node shape: slots per node, value capacity and key width per item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataGeometry {
    /// DataItem slots per node (2..=[`MAX_SLOTS`]).
    pub slots: u32,
    /// Value capacity of each item in bytes (a multiple of 8 in 8..=[`MAX_VALUE`]).
    pub value_cap: u32,
    /// Key bytes per item: one of [`KEY_LENS`].
    pub key_len: u32,
}

/// Offset of the lock word in a data node.
pub const LOCK_OFF: u64 = 0;
/// Offset of the meta word, in front of the items.
pub const FRONT_OFF: u64 = 8;
/// Offset of slot 0.
pub const ITEMS_OFF: u64 = 16;

impl DataGeometry {
    /// A shape with 8-byte keys; `slots` in 2..=32, `value_cap` a multiple of 8 in 8..=248.
    pub const fn new(slots: u32, value_cap: u32) -> Result<DataGeometry, LayoutError> {
        // Two slots at least: an overwrite appends before the old item is dropped.
        if slots < 2 || slots as usize > MAX_SLOTS {
            return Err(LayoutError::OutOfRange {
                field: "slots",
                value: slots as u64,
            });
        }
        if value_cap < 8 || value_cap as usize > MAX_VALUE || !value_cap.is_multiple_of(8) {
            return Err(LayoutError::OutOfRange {
                field: "value_cap",
                value: value_cap as u64,
            });
        }
        Ok(DataGeometry {
            slots,
            value_cap,
            key_len: 8,
        })
    }
    /// The same shape with `key_len`-byte keys (8 or 16).
    pub const fn with_key_len(self, key_len: u32) -> Result<DataGeometry, LayoutError> {
        if key_len != KEY_LENS[0] && key_len != KEY_LENS[1] {
            return Err(LayoutError::OutOfRange {
                field: "key_len",
                value: key_len as u64,
            });
        }
        Ok(DataGeometry { key_len, ..self })
    }
    /// Bits of a key.
    pub const fn key_bits(&self) -> u32 {
        8 * self.key_len
    }
    /// The greatest key of the tree's width.
    pub const fn max_key(&self) -> u128 {
        if self.key_len >= 16 {
            u128::MAX
        } else {
            (1u128 << self.key_bits()) - 1
        }
    }
    /// The key whose big-endian bytes are `bytes`, if it has the tree's width.
    pub fn key_from_be(&self, bytes: &[u8]) -> Option<u128> {
        if bytes.len() != self.key_len as usize {
            return None;
        }
        Some(bytes.iter().fold(0u128, |k, &b| k << 8 | b as u128))
    }
    /// Writes `key`'s big-endian bytes (the tree's width) into `out`; returns them.
    pub fn key_to_be<'o>(&self, key: u128, out: &'o mut [u8; MAX_KEY]) -> &'o [u8] {
        *out = key.to_be_bytes();
        &out[MAX_KEY - self.key_len as usize..]
    }
    /// A key as an item stores it (8-byte trees: little-endian `u64`, as before 16-byte keys
    /// existed; 16-byte trees: big-endian, the key's own bytes). None if `key` is wider than
    /// the tree's keys.
    fn store_key(&self, key: u128, out: &mut [u8]) -> Option<()> {
        if key > self.max_key() {
            return None;
        }
        match self.key_len {
            8 => out[..8].copy_from_slice(&(key as u64).to_le_bytes()),
            _ => out[..16].copy_from_slice(&key.to_be_bytes()),
        }
        Some(())
    }
    /// The key an item's first `key_len` bytes store (see [`Self::store_key`]).
    pub fn stored_key(&self, bytes: &[u8]) -> Result<u128, LayoutError> {
        match self.key_len {
            8 => Ok(read_u64(bytes, 0)? as u128),
            _ => {
                let b = bytes.get(..16).ok_or(LayoutError::Short {
                    need: 16,
                    got: bytes.len(),
                })?;
                let mut w = [0u8; 16];
                w.copy_from_slice(b);
                Ok(u128::from_be_bytes(w))
            }
        }
    }
    /// Bytes of one DataItem: key, value capacity, tail word.
    pub const fn item_size(&self) -> u64 {
        self.key_len as u64 + self.value_cap as u64 + 8
    }
    /// Byte offset of slot `slot` within a data node.
    pub const fn slot_off(&self, slot: u32) -> u64 {
        ITEMS_OFF + slot as u64 * self.item_size()
    }
    /// Byte offset of slot `slot`'s tail word within a data node.
    pub const fn tail_off(&self, slot: u32) -> u64 {
        self.slot_off(slot) + self.item_size() - 8
    }
    /// Bytes of a data node: lock word, meta word, `slots` items.
    pub const fn node_size(&self) -> u64 {
        ITEMS_OFF + self.slots as u64 * self.item_size()
    }
    /// All slots in the bitmap.
    pub const fn full_bitmap(&self) -> u32 {
        if self.slots == 32 {
            u32::MAX
        } else {
            (1u32 << self.slots) - 1
        }
    }

    /// Encodes a DataItem into `out` (`item_size` bytes).
    pub fn encode_item(
        &self,
        out: &mut [u8],
        key: u128,
        value: &[u8],
        op: ItemOp,
        ticket: u64,
        valid: bool,
    ) -> Result<(), LayoutError> {
        let size = self.item_size() as usize;
        if out.len() < size {
            return Err(LayoutError::Short {
                need: size,
                got: out.len(),
            });
        }
        if value.len() > self.value_cap as usize {
            return Err(LayoutError::OutOfRange {
                field: "value length",
                value: value.len() as u64,
            });
        }
        let out = &mut out[..size];
        let kl = self.key_len as usize;
        self.store_key(key, out).ok_or(LayoutError::OutOfRange {
            field: "key wider than the tree's keys",
            value: (key >> 64) as u64,
        })?;
        let vbytes = &mut out[kl..size - 8];
        vbytes[..value.len()].copy_from_slice(value);
        vbytes[value.len()..].fill(0);
        let (kb, vb) = out[..size - 8].split_at(kl);
        let check = item_check(kb, vb, op, value.len(), ticket);
        let tail = T_VALID.set(0, valid as u64);
        let tail = T_OP.set(tail, op as u64);
        let tail = T_LEN.set(tail, value.len() as u64);
        let tail = T_TICKET.set(tail, ticket & TICKET_MASK);
        let tail = T_CHECK.set(tail, check);
        out[size - 8..].copy_from_slice(&tail.to_le_bytes());
        Ok(())
    }

    /// Decodes and checksums one DataItem; a torn or corrupt item is an error.
    pub fn decode_item<'a>(&self, bytes: &'a [u8]) -> Result<Item<'a>, LayoutError> {
        let size = self.item_size() as usize;
        if bytes.len() < size {
            return Err(LayoutError::Short {
                need: size,
                got: bytes.len(),
            });
        }
        let kl = self.key_len as usize;
        let key = self.stored_key(bytes)?;
        let tail = read_u64(bytes, size - 8)?;
        let op = ItemOp::from_bits(T_OP.get(tail))?;
        let len = T_LEN.get(tail) as usize;
        if len > self.value_cap as usize {
            return Err(LayoutError::OutOfRange {
                field: "len",
                value: len as u64,
            });
        }
        let ticket = T_TICKET.get(tail);
        let stored = T_CHECK.get(tail);
        let computed = item_check(&bytes[..kl], &bytes[kl..size - 8], op, len, ticket);
        if stored != computed {
            return Err(LayoutError::BadChecksum { stored, computed });
        }
        Ok(Item {
            key,
            value: &bytes[kl..kl + len],
            op,
            ticket,
            valid: T_VALID.get(tail) == 1,
        })
    }
}

/// The tail word with the valid bit cleared (what the server stores after applying).
pub const fn tail_processed(tail: u64) -> u64 {
    T_VALID.set(tail, 0)
}

/// True when a tail word's valid bit is set.
pub const fn tail_valid(tail: u64) -> bool {
    T_VALID.get(tail) == 1
}

/// The tail word of a *hole*: a slot the server reserved for a skipped lock holder whose
/// append may still land there (a live slot whose tail has `valid` set is never an item of
/// the tree). `valid` is set and the opflag is 0, which no item has: a hole never decodes.
pub const fn hole_tail(ticket: u64) -> u64 {
    T_TICKET.set(T_VALID.set(0, 1), ticket & TICKET_MASK)
}

mod header;
mod messages;
mod prefix;
#[cfg(test)]
mod tests;

pub use header::*;
pub use messages::*;
pub use prefix::*;

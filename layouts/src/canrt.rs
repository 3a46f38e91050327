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
use crate::bits::{Field, assert_disjoint, read_u32, read_u64};
use memoffset::offset_of;

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
pub const MAX_PREFIX_BYTES: u64 = 1 << 24;
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
    pub const fn new(bitmap: u32, served: u64, frozen: bool, epoch: u32) -> Meta {
        let w = M_BITMAP.set(0, bitmap as u64);
        let w = M_SERVED.set(w, served);
        let w = M_FROZEN.set(w, frozen as u64);
        Meta(M_EPOCH.set(w, epoch as u64))
    }
    pub const fn bitmap(self) -> u32 {
        M_BITMAP.get(self.0) as u32
    }
    pub const fn served(self) -> u64 {
        M_SERVED.get(self.0)
    }
    pub const fn frozen(self) -> bool {
        M_FROZEN.get(self.0) == 1
    }
    pub const fn epoch(self) -> u32 {
        M_EPOCH.get(self.0) as u32
    }
    pub const fn with_bitmap(self, b: u32) -> Meta {
        Meta(M_BITMAP.set(self.0, b as u64))
    }
    pub const fn with_served(self, s: u64) -> Meta {
        Meta(M_SERVED.set(self.0, s))
    }
    pub const fn with_frozen(self, f: bool) -> Meta {
        Meta(M_FROZEN.set(self.0, f as u64))
    }
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
pub fn item_check(key: &[u8], value: &[u8], op: ItemOp, len: usize, ticket: u64) -> u64 {
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
    pub value: &'a [u8],
    pub op: ItemOp,
    pub ticket: u64,
    /// Not yet processed by the server (the paper's valid = 1).
    pub valid: bool,
}

/// Data-node shape: slots per node, value capacity and key width per item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataGeometry {
    pub slots: u32,
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
    pub const fn item_size(&self) -> u64 {
        self.key_len as u64 + self.value_cap as u64 + 8
    }
    pub const fn slot_off(&self, slot: u32) -> u64 {
        ITEMS_OFF + slot as u64 * self.item_size()
    }
    pub const fn tail_off(&self, slot: u32) -> u64 {
        self.slot_off(slot) + self.item_size() - 8
    }
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

// ---------------------------------------------------------------- segments

/// Which key bits a tree reads, most significant first: constant gaps and levels. Bit
/// numbers count from the key's least significant bit (keys are big-endian integers of the
/// tree's width: bits up to 63 or 127); a gap is at most 64 bits wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Bits `lo .. lo+width` that every key of the tree had equal to `value` when it was
    /// built; a key above or below it goes to the greatest or least data node under here.
    Gap { lo: u8, width: u8, value: u64 },
    /// Bits `lo .. lo+width` (width 1..=8) are the character of the next prefix level,
    /// whose nodes hold up to `fanout` (1..=256) characters.
    Level { lo: u8, width: u8, fanout: u16 },
}

const S_KIND: Field = Field::new("kind", 0, 2);
const S_LO: Field = Field::new("lo", 8, 8);
const S_WIDTH: Field = Field::new("width", 16, 8);
const S_FANOUT: Field = Field::new("fanout", 24, 9);
const _: () = assert_disjoint(&[S_KIND, S_LO, S_WIDTH, S_FANOUT]);

impl Segment {
    pub const fn lo(&self) -> u32 {
        match *self {
            Segment::Gap { lo, .. } | Segment::Level { lo, .. } => lo as u32,
        }
    }
    pub const fn width(&self) -> u32 {
        match *self {
            Segment::Gap { width, .. } | Segment::Level { width, .. } => width as u32,
        }
    }
    /// The segment's bits of `key` (a segment is at most 64 bits wide).
    pub const fn bits(&self, key: u128) -> u64 {
        let w = self.width();
        let v = key >> self.lo();
        if w >= 64 {
            v as u64
        } else {
            (v & ((1u128 << w) - 1)) as u64
        }
    }
    /// Two words: descriptor, gap value.
    pub const fn encode(&self) -> [u64; 2] {
        match *self {
            Segment::Gap { lo, width, value } => {
                let w = S_KIND.set(0, 1);
                let w = S_LO.set(w, lo as u64);
                [S_WIDTH.set(w, width as u64), value]
            }
            Segment::Level { lo, width, fanout } => {
                let w = S_KIND.set(0, 2);
                let w = S_LO.set(w, lo as u64);
                let w = S_FANOUT.set(w, fanout as u64);
                [S_WIDTH.set(w, width as u64), 0]
            }
        }
    }
    pub const fn decode(words: [u64; 2]) -> Result<Segment, LayoutError> {
        let lo = S_LO.get(words[0]);
        let width = S_WIDTH.get(words[0]);
        if width == 0
            || width > 64
            || lo + width > 8 * MAX_KEY as u64
            || words[0] & !(S_KIND.mask() | S_LO.mask() | S_WIDTH.mask() | S_FANOUT.mask()) != 0
        {
            return Err(LayoutError::OutOfRange {
                field: "segment",
                value: words[0],
            });
        }
        let fanout = S_FANOUT.get(words[0]);
        match S_KIND.get(words[0]) {
            1 if fanout == 0 => {
                if width < 64 && words[1] >> width != 0 {
                    return Err(LayoutError::OutOfRange {
                        field: "gap value",
                        value: words[1],
                    });
                }
                Ok(Segment::Gap {
                    lo: lo as u8,
                    width: width as u8,
                    value: words[1],
                })
            }
            2 if width <= 8 && words[1] == 0 && fanout >= 1 && fanout <= 256 => {
                Ok(Segment::Level {
                    lo: lo as u8,
                    width: width as u8,
                    fanout: fanout as u16,
                })
            }
            k => Err(LayoutError::OutOfRange {
                field: "segment kind",
                value: k,
            }),
        }
    }
}

// ---------------------------------------------------------------- prefix geometry

/// Shape of the prefix array: `height` levels; every node of level `i` has room for
/// `widths[i-1]` characters (the paper's `m`, here per level, so one wide level does not
/// widen the levels under it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixGeometry {
    pub height: u32,
    pub widths: [u16; MAX_SEGMENTS],
}

impl PrefixGeometry {
    /// A shape whose array fits [`MAX_PREFIX_BYTES`].
    pub fn new(widths: &[u16]) -> Result<PrefixGeometry, LayoutError> {
        if widths.is_empty() || widths.len() > MAX_SEGMENTS {
            return Err(LayoutError::OutOfRange {
                field: "height",
                value: widths.len() as u64,
            });
        }
        let mut g = PrefixGeometry {
            height: widths.len() as u32,
            widths: [0; MAX_SEGMENTS],
        };
        for (i, &w) in widths.iter().enumerate() {
            if w == 0 || w > 256 {
                return Err(LayoutError::OutOfRange {
                    field: "width",
                    value: w as u64,
                });
            }
            g.widths[i] = w;
        }
        let mut nodes: u64 = 1;
        let mut len: u64 = 0;
        for level in 1..=g.height {
            len += nodes * g.stride(level);
            nodes *= g.width(level) as u64;
            if len > MAX_PREFIX_BYTES || nodes > MAX_PREFIX_BYTES {
                return Err(LayoutError::OutOfRange {
                    field: "prefix array bytes",
                    value: len,
                });
            }
        }
        Ok(g)
    }
    /// Characters per node of `level` (1-based).
    pub const fn width(&self, level: u32) -> u32 {
        self.widths[level as usize - 1] as u32
    }
    /// Nodes on `level`: the product of the widths above it (`m^(i-1)` when uniform).
    pub const fn level_nodes(&self, level: u32) -> u64 {
        let mut n = 1u64;
        let mut i = 1;
        while i < level {
            n *= self.width(i) as u64;
            i += 1;
        }
        n
    }
    /// Base node id of `level`: eq. (2), summed level by level.
    pub const fn base(&self, level: u32) -> u64 {
        let mut b = 0u64;
        let mut i = 1;
        while i < level {
            b += self.level_nodes(i);
            i += 1;
        }
        b
    }
    /// Child of node `cur` of `level` at position `p`: eq. (3).
    pub const fn child(&self, level: u32, cur: u64, p: u32) -> u64 {
        self.base(level + 1) + (cur - self.base(level)) * self.width(level) as u64 + p as u64
    }
    /// Bytes of a node's `nChars` + `chars` on `level`.
    pub const fn chars_stride(&self, level: u32) -> u64 {
        (2 + self.width(level) as u64).next_multiple_of(8)
    }
    /// Bytes of one node of `level` (the last level adds the NodeID array); a multiple of 8,
    /// so the array and the data nodes after it stay 8-byte aligned.
    pub const fn stride(&self, level: u32) -> u64 {
        if level == self.height {
            (self.chars_stride(level) + 4 * self.width(level) as u64).next_multiple_of(8)
        } else {
            self.chars_stride(level)
        }
    }
    /// Bytes of the whole prefix array.
    pub const fn total_len(&self) -> u64 {
        let mut len = 0;
        let mut i = 1;
        while i <= self.height {
            len += self.level_nodes(i) * self.stride(i);
            i += 1;
        }
        len
    }
    /// Nodes in the whole array.
    pub const fn total_nodes(&self) -> u64 {
        self.base(self.height) + self.level_nodes(self.height)
    }
    /// The level of node `id`, or None past the array.
    pub const fn level_of(&self, id: u64) -> Option<u32> {
        let mut base = 0;
        let mut i = 1;
        while i <= self.height {
            let n = self.level_nodes(i);
            if id < base + n {
                return Some(i);
            }
            base += n;
            i += 1;
        }
        None
    }
    /// Byte offset of node `id` (on `level`) in the array.
    pub const fn node_offset(&self, level: u32, id: u64) -> u64 {
        let mut off = 0;
        let mut i = 1;
        while i < level {
            off += self.level_nodes(i) * self.stride(i);
            i += 1;
        }
        off + (id - self.base(level)) * self.stride(level)
    }

    /// The characters of node `id` (checked: `nChars <= width`, strictly increasing).
    pub fn chars<'a>(&self, prefix: &'a [u8], id: u64) -> Result<&'a [u8], LayoutError> {
        let level = self.level_of(id).ok_or(LayoutError::OutOfRange {
            field: "prefix node id",
            value: id,
        })?;
        let off = self.node_offset(level, id) as usize;
        let n = match prefix.get(off..off + 2) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]) as usize,
            None => {
                return Err(LayoutError::Short {
                    need: off + 2,
                    got: prefix.len(),
                });
            }
        };
        if n > self.width(level) as usize {
            return Err(LayoutError::OutOfRange {
                field: "nChars",
                value: n as u64,
            });
        }
        let chars = prefix.get(off + 2..off + 2 + n).ok_or(LayoutError::Short {
            need: off + 2 + n,
            got: prefix.len(),
        })?;
        if chars.windows(2).any(|w| w[0] >= w[1]) {
            return Err(LayoutError::Inconsistent {
                what: "prefix node characters not strictly increasing",
            });
        }
        Ok(chars)
    }

    /// Entry `p` of the NodeID array of last-level node `id`.
    pub fn node_id(&self, prefix: &[u8], id: u64, p: u32) -> Result<u32, LayoutError> {
        let k = self.height;
        if self.level_of(id) != Some(k) || p >= self.width(k) {
            return Err(LayoutError::OutOfRange {
                field: "NodeID position",
                value: p as u64,
            });
        }
        let at = self.node_offset(k, id) + self.chars_stride(k) + 4 * p as u64;
        read_u32(prefix, at as usize)
    }

    /// Writes node `id`'s characters (and NodeIDs on the last level) into the array.
    pub fn put_node(
        &self,
        prefix: &mut [u8],
        id: u64,
        chars: &[u8],
        node_ids: &[u32],
    ) -> Result<(), LayoutError> {
        let level = self.level_of(id).ok_or(LayoutError::OutOfRange {
            field: "prefix node id",
            value: id,
        })?;
        let last = level == self.height;
        if chars.len() > self.width(level) as usize
            || (last && node_ids.len() != chars.len())
            || (!last && !node_ids.is_empty())
        {
            return Err(LayoutError::Inconsistent {
                what: "prefix node does not fit its level",
            });
        }
        let off = self.node_offset(level, id) as usize;
        let end = off + self.stride(level) as usize;
        if prefix.len() < end {
            return Err(LayoutError::Short {
                need: end,
                got: prefix.len(),
            });
        }
        prefix[off..off + 2].copy_from_slice(&(chars.len() as u16).to_le_bytes());
        prefix[off + 2..off + 2 + chars.len()].copy_from_slice(chars);
        let ids = off + self.chars_stride(level) as usize;
        for (i, n) in node_ids.iter().enumerate() {
            prefix[ids + 4 * i..ids + 4 * i + 4].copy_from_slice(&n.to_le_bytes());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- tree header

/// The header at the start of a tree's area.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeHeader {
    pub magic: u64,
    /// Bumped by every resize.
    pub epoch: u32,
    /// Key bytes (one of [`KEY_LENS`]), fixed when the tree is formatted.
    pub key_len: u32,
    pub slots: u32,
    pub value_cap: u32,
    /// Prefix levels `k`.
    pub height: u32,
    /// The widest level's characters per node (each level's is in its segment).
    pub width: u32,
    pub n_segments: u32,
    pub n_data: u32,
    /// Region offsets.
    pub prefix_off: u64,
    pub prefix_len: u64,
    pub data_off: u64,
    pub data_node_size: u64,
    /// The header's area: header and prefix array (reused tick-tock by later epochs).
    pub area_off: u64,
    pub area_len: u64,
    /// Data nodes the data array at `data_off` has room for (`n_data` are in use; a resize
    /// appends new data nodes there, in place, until it is full).
    pub data_cap: u64,
    /// Bumped each time the data nodes move to a new data array (a full rebuild): a lock
    /// ticket taken on a node of an older array needs no release.
    pub array_gen: u64,
    /// CRC-64 of the prefix array (set by [`TreeHeader::seal`]).
    pub prefix_check: u64,
    /// CRC-64 of the encoded header with this field zero (set by [`TreeHeader::seal`]).
    pub header_check: u64,
    pub reserved: u64,
    pub segments: [[u64; 2]; MAX_SEGMENTS],
}

pub const TREE_HEADER_LEN: usize = 384;
const HEADER_CHECK_OFF: usize = 112;
/// CRC-64, slice-by-16 tables.
static CRC64: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_ECMA_182);
const _: () = assert!(core::mem::size_of::<TreeHeader>() == TREE_HEADER_LEN);
const _: () = assert!(offset_of!(TreeHeader, magic) == 0);
const _: () = assert!(offset_of!(TreeHeader, epoch) == 8);
const _: () = assert!(offset_of!(TreeHeader, key_len) == 12);
const _: () = assert!(offset_of!(TreeHeader, slots) == 16);
const _: () = assert!(offset_of!(TreeHeader, value_cap) == 20);
const _: () = assert!(offset_of!(TreeHeader, height) == 24);
const _: () = assert!(offset_of!(TreeHeader, width) == 28);
const _: () = assert!(offset_of!(TreeHeader, n_segments) == 32);
const _: () = assert!(offset_of!(TreeHeader, n_data) == 36);
const _: () = assert!(offset_of!(TreeHeader, prefix_off) == 40);
const _: () = assert!(offset_of!(TreeHeader, prefix_len) == 48);
const _: () = assert!(offset_of!(TreeHeader, data_off) == 56);
const _: () = assert!(offset_of!(TreeHeader, data_node_size) == 64);
const _: () = assert!(offset_of!(TreeHeader, area_off) == 72);
const _: () = assert!(offset_of!(TreeHeader, area_len) == 80);
const _: () = assert!(offset_of!(TreeHeader, data_cap) == 88);
const _: () = assert!(offset_of!(TreeHeader, array_gen) == 96);
const _: () = assert!(offset_of!(TreeHeader, prefix_check) == 104);
const _: () = assert!(offset_of!(TreeHeader, header_check) == HEADER_CHECK_OFF);
const _: () = assert!(offset_of!(TreeHeader, reserved) == 120);
const _: () = assert!(offset_of!(TreeHeader, segments) == 128);

impl TreeHeader {
    pub fn data(&self) -> DataGeometry {
        DataGeometry {
            slots: self.slots,
            value_cap: self.value_cap,
            key_len: self.key_len,
        }
    }
    /// The prefix array's shape, from the level segments' fanouts.
    pub fn prefix(&self) -> Result<PrefixGeometry, LayoutError> {
        let mut widths = [0u16; MAX_SEGMENTS];
        let mut k = 0;
        for i in 0..(self.n_segments as usize).min(MAX_SEGMENTS) {
            if let Segment::Level { fanout, .. } = Segment::decode(self.segments[i])? {
                widths[k] = fanout;
                k += 1;
            }
        }
        PrefixGeometry::new(&widths[..k])
    }
    /// Segment `i` (checked when the header was decoded).
    pub fn segment(&self, i: usize) -> Result<Segment, LayoutError> {
        if i >= self.n_segments as usize {
            return Err(LayoutError::OutOfRange {
                field: "segment index",
                value: i as u64,
            });
        }
        Segment::decode(self.segments[i])
    }
    /// Region offset of data node `id`.
    /// Saturates instead of overflowing for an id past the header's `data_cap` (such an
    /// address lies outside every region: the READ fails with a remote access error).
    pub fn data_node_off(&self, id: u32) -> u64 {
        (id as u64)
            .saturating_mul(self.data_node_size)
            .saturating_add(self.data_off)
    }

    pub fn encode(&self) -> [u8; TREE_HEADER_LEN] {
        let mut out = [0u8; TREE_HEADER_LEN];
        let mut put = |at: usize, b: &[u8]| out[at..at + b.len()].copy_from_slice(b);
        put(0, &self.magic.to_le_bytes());
        put(8, &self.epoch.to_le_bytes());
        put(12, &self.key_len.to_le_bytes());
        put(16, &self.slots.to_le_bytes());
        put(20, &self.value_cap.to_le_bytes());
        put(24, &self.height.to_le_bytes());
        put(28, &self.width.to_le_bytes());
        put(32, &self.n_segments.to_le_bytes());
        put(36, &self.n_data.to_le_bytes());
        put(40, &self.prefix_off.to_le_bytes());
        put(48, &self.prefix_len.to_le_bytes());
        put(56, &self.data_off.to_le_bytes());
        put(64, &self.data_node_size.to_le_bytes());
        put(72, &self.area_off.to_le_bytes());
        put(80, &self.area_len.to_le_bytes());
        put(88, &self.data_cap.to_le_bytes());
        put(96, &self.array_gen.to_le_bytes());
        put(104, &self.prefix_check.to_le_bytes());
        put(HEADER_CHECK_OFF, &self.header_check.to_le_bytes());
        put(120, &self.reserved.to_le_bytes());
        for (i, s) in self.segments.iter().enumerate() {
            put(128 + 16 * i, &s[0].to_le_bytes());
            put(136 + 16 * i, &s[1].to_le_bytes());
        }
        out
    }

    /// Sets both checksums: of `prefix` (this header's prefix array) and of the header.
    pub fn seal(&mut self, prefix: &[u8]) {
        self.prefix_check = CRC64.checksum(prefix);
        self.header_check = 0;
        self.header_check = header_crc(&self.encode());
    }

    /// Checks a prefix array READ against the header: its length and its checksum (a torn
    /// copy fails, whatever order its words were read in).
    pub fn check_prefix(&self, prefix: &[u8]) -> Result<(), LayoutError> {
        if prefix.len() as u64 != self.prefix_len {
            return Err(LayoutError::Short {
                need: self.prefix_len as usize,
                got: prefix.len(),
            });
        }
        let computed = CRC64.checksum(prefix);
        if computed != self.prefix_check {
            return Err(LayoutError::BadChecksum {
                stored: self.prefix_check,
                computed,
            });
        }
        Ok(())
    }

    /// Decodes, checksums and validates a header; never panics on arbitrary bytes.
    pub fn decode(bytes: &[u8]) -> Result<TreeHeader, LayoutError> {
        if bytes.len() < TREE_HEADER_LEN {
            return Err(LayoutError::Short {
                need: TREE_HEADER_LEN,
                got: bytes.len(),
            });
        }
        let magic = read_u64(bytes, 0)?;
        if magic != TREE_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: TREE_MAGIC,
                found: magic,
            });
        }
        let mut segments = [[0u64; 2]; MAX_SEGMENTS];
        for (i, s) in segments.iter_mut().enumerate() {
            *s = [
                read_u64(bytes, 128 + 16 * i)?,
                read_u64(bytes, 136 + 16 * i)?,
            ];
        }
        let header_check = read_u64(bytes, HEADER_CHECK_OFF)?;
        let computed = header_crc(&bytes[..TREE_HEADER_LEN]);
        if header_check != computed {
            return Err(LayoutError::BadChecksum {
                stored: header_check,
                computed,
            });
        }
        let h = TreeHeader {
            magic,
            epoch: read_u32(bytes, 8)?,
            key_len: read_u32(bytes, 12)?,
            slots: read_u32(bytes, 16)?,
            value_cap: read_u32(bytes, 20)?,
            height: read_u32(bytes, 24)?,
            width: read_u32(bytes, 28)?,
            n_segments: read_u32(bytes, 32)?,
            n_data: read_u32(bytes, 36)?,
            prefix_off: read_u64(bytes, 40)?,
            prefix_len: read_u64(bytes, 48)?,
            data_off: read_u64(bytes, 56)?,
            data_node_size: read_u64(bytes, 64)?,
            area_off: read_u64(bytes, 72)?,
            area_len: read_u64(bytes, 80)?,
            data_cap: read_u64(bytes, 88)?,
            array_gen: read_u64(bytes, 96)?,
            prefix_check: read_u64(bytes, 104)?,
            header_check,
            reserved: read_u64(bytes, 120)?,
            segments,
        };
        h.validate()?;
        Ok(h)
    }

    /// Every cross-field rule of a header.
    pub fn validate(&self) -> Result<(), LayoutError> {
        let data = DataGeometry::new(self.slots, self.value_cap)?.with_key_len(self.key_len)?;
        if self.n_segments as usize > MAX_SEGMENTS || self.n_segments == 0 {
            return Err(LayoutError::OutOfRange {
                field: "n_segments",
                value: self.n_segments as u64,
            });
        }
        let mut levels = 0;
        // Segments lie within the key: none reads past its width.
        let mut prev_lo = data.key_bits();
        for i in 0..self.n_segments as usize {
            let s = Segment::decode(self.segments[i])?;
            if s.lo() + s.width() > prev_lo {
                return Err(LayoutError::Inconsistent {
                    what: "segments overlap or are not most-significant first",
                });
            }
            prev_lo = s.lo();
            if matches!(s, Segment::Level { .. }) {
                levels += 1;
            }
        }
        let prefix = self.prefix()?;
        let widest = prefix.widths.iter().copied().max().unwrap_or(0) as u32;
        if levels != self.height
            || widest != self.width
            || !matches!(
                Segment::decode(self.segments[self.n_segments as usize - 1]),
                Ok(Segment::Level { .. })
            )
        {
            return Err(LayoutError::Inconsistent {
                what: "levels do not match the height, or the last segment is not a level",
            });
        }
        if self.n_data == 0 || self.n_data as u64 > MAX_DATA_NODES {
            return Err(LayoutError::OutOfRange {
                field: "n_data",
                value: self.n_data as u64,
            });
        }
        if self.prefix_len != prefix.total_len() || self.data_node_size != data.node_size() {
            return Err(LayoutError::Inconsistent {
                what: "prefix_len or data_node_size disagree with the geometry",
            });
        }
        if self.n_data as u64 > self.data_cap || self.data_cap > MAX_DATA_NODES {
            return Err(LayoutError::OutOfRange {
                field: "data_cap",
                value: self.data_cap,
            });
        }
        let data_end = self
            .data_cap
            .checked_mul(self.data_node_size)
            .and_then(|d| d.checked_add(self.data_off));
        let area_end = self.area_off.checked_add(self.area_len);
        // Every sum checked: a header with valid checksums can still be crafted (a buggy or
        // hostile writer seals what it writes), so no field may overflow here.
        let prefix_start = self.area_off.checked_add(TREE_HEADER_LEN as u64);
        let prefix_end = self.prefix_off.checked_add(self.prefix_len);
        match (data_end, area_end, prefix_start, prefix_end) {
            (Some(d), Some(a), Some(ps), Some(pe))
                if self.prefix_off == ps
                    && pe <= a
                    && (self.data_off >= a || d <= self.area_off)
                    && d <= crate::GlobalAddr::MAX_OFFSET
                    && a <= crate::GlobalAddr::MAX_OFFSET
                    && self.area_off.is_multiple_of(8)
                    && self.data_off.is_multiple_of(8) =>
            {
                Ok(())
            }
            _ => Err(LayoutError::Inconsistent {
                what: "area offsets out of order or out of range",
            }),
        }
    }
}

/// CRC-64 of an encoded header with its `header_check` word taken as zero.
fn header_crc(bytes: &[u8]) -> u64 {
    let mut d = CRC64.digest();
    d.update(&bytes[..HEADER_CHECK_OFF]);
    d.update(&[0u8; 8]);
    d.update(&bytes[HEADER_CHECK_OFF + 8..TREE_HEADER_LEN]);
    d.finalize()
}

// ---------------------------------------------------------------- immediate

// The slot takes exactly the bits MAX_SLOTS needs, the node the rest below the epoch.
const I_SLOT: Field = Field::new("slot", 0, 5);
const I_NODE: Field = Field::new("node", 5, 20);
const I_EPOCH: Field = Field::new("epoch", 25, 7);
const _: () = assert_disjoint(&[I_SLOT, I_NODE, I_EPOCH]);
const _: () = assert!(1 << 5 == MAX_SLOTS && 1 << 20 == MAX_DATA_NODES);

/// The WRITE_WITH_IMM immediate of an appended DataItem (paper: `node_id << 8 | bit_index`,
/// here `epoch << 25 | node_id << 5 | slot`: 5 bits hold any of [`MAX_SLOTS`], 20 bits any of
/// [`MAX_DATA_NODES`], the tree epoch mod 2^7 the top 7). The server rejects a slot past its
/// geometry's, a node past the tree's and an epoch not the tree's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imm {
    pub epoch: u32,
    pub node: u32,
    pub slot: u32,
}

impl Imm {
    pub fn encode(&self) -> Result<u32, LayoutError> {
        let w = I_SLOT.set_checked(0, self.slot as u64)?;
        let w = I_NODE.set_checked(w, self.node as u64)?;
        Ok(I_EPOCH.set(w, (self.epoch & SHORT_EPOCH_MASK) as u64) as u32)
    }
    pub fn decode(imm: u32) -> Result<Imm, LayoutError> {
        let w = imm as u64;
        let slot = I_SLOT.get(w) as u32;
        if slot as usize >= MAX_SLOTS {
            return Err(LayoutError::OutOfRange {
                field: "imm slot",
                value: slot as u64,
            });
        }
        Ok(Imm {
            epoch: I_EPOCH.get(w) as u32,
            node: I_NODE.get(w) as u32,
            slot,
        })
    }
}

// ---------------------------------------------------------------- control messages

/// What a control message asks of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ControlKind {
    /// Build the empty tree if none is published (`slots`, `value_cap` and, in `ticket`, the
    /// key width give its shape).
    Format = 1,
    /// The lock holder (`ticket`) of `node` releases without writing.
    Unlock = 2,
    /// The lock holder of `node` found it full: release, and resize the tree.
    Resize = 3,
    /// A waiter saw `ticket` served on `node` for a whole lease with no progress (its holder
    /// died or stalled before appending): apply the holder's complete item if it is in a
    /// free slot, else skip the ticket. `node` = [`SKIP_DRAIN`]: a resize has been draining
    /// for a lease; skip tickets that have not moved since the previous such request.
    Skip = 4,
    /// A writer whose `ticket` on `node` is not yet served asks to be told when it is: the
    /// server answers with a [`Turn`] once it serves the ticket (at once if it already has,
    /// or if `arg` names another data array), so the waiter costs the memory node no READs.
    /// Best effort: a waiter also looks for itself now and then.
    Wait = 5,
}

/// [`Control::node`] of a [`ControlKind::Skip`] about the whole frozen tree.
pub const SKIP_DRAIN: u32 = u32::MAX;

/// A control message (SEND payload), 16 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    pub kind: u8,
    /// The epoch the client saw in the node's meta word (mod 2^7).
    pub epoch: u8,
    /// Format: value bytes per item.
    pub value_cap: u16,
    pub node: u32,
    /// The lock ticket handed back (mod 2^16).
    pub ticket: u32,
    /// Format: slots per data node. Unlock and Resize: the data array generation
    /// ([`TreeHeader::array_gen`], low 32 bits) of the client's view, which names the
    /// physical node its FETCH_AND_ADD hit.
    pub arg: u32,
}

pub const CONTROL_LEN: usize = 16;
const _: () = assert!(core::mem::size_of::<Control>() == CONTROL_LEN);
const _: () = assert!(offset_of!(Control, node) == 4);
const _: () = assert!(offset_of!(Control, ticket) == 8);
const _: () = assert!(offset_of!(Control, arg) == 12);

impl Control {
    pub fn new(kind: ControlKind, epoch: u32, array_gen: u64, node: u32, ticket: u64) -> Control {
        Control {
            kind: kind as u8,
            epoch: (epoch & SHORT_EPOCH_MASK) as u8,
            value_cap: 0,
            node,
            ticket: (ticket & TICKET_MASK) as u32,
            arg: array_gen as u32,
        }
    }
    pub fn format(g: DataGeometry) -> Control {
        Control {
            kind: ControlKind::Format as u8,
            epoch: 0,
            value_cap: g.value_cap as u16,
            node: 0,
            ticket: g.key_len,
            arg: g.slots,
        }
    }
    /// The data-node geometry a Format message asks for.
    pub fn format_geometry(&self) -> Result<DataGeometry, LayoutError> {
        DataGeometry::new(self.arg, self.value_cap as u32)?.with_key_len(self.ticket)
    }
    pub fn kind(&self) -> Result<ControlKind, LayoutError> {
        match self.kind {
            1 => Ok(ControlKind::Format),
            2 => Ok(ControlKind::Unlock),
            3 => Ok(ControlKind::Resize),
            4 => Ok(ControlKind::Skip),
            5 => Ok(ControlKind::Wait),
            k => Err(LayoutError::BadMagic {
                expected: 1,
                found: k as u64,
            }),
        }
    }
    pub fn encode(&self) -> [u8; CONTROL_LEN] {
        let mut out = [0u8; CONTROL_LEN];
        out[0] = self.kind;
        out[1] = self.epoch;
        out[2..4].copy_from_slice(&self.value_cap.to_le_bytes());
        out[4..8].copy_from_slice(&self.node.to_le_bytes());
        out[8..12].copy_from_slice(&self.ticket.to_le_bytes());
        out[12..16].copy_from_slice(&self.arg.to_le_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Control, LayoutError> {
        if bytes.len() != CONTROL_LEN {
            return Err(LayoutError::Short {
                need: CONTROL_LEN,
                got: bytes.len(),
            });
        }
        let c = Control {
            kind: bytes[0],
            epoch: bytes[1],
            value_cap: u16::from_le_bytes([bytes[2], bytes[3]]),
            node: read_u32(bytes, 4)?,
            ticket: read_u32(bytes, 8)?,
            arg: read_u32(bytes, 12)?,
        };
        c.kind()?;
        if c.epoch as u32 > SHORT_EPOCH_MASK || c.ticket as u64 > TICKET_MASK {
            return Err(LayoutError::OutOfRange {
                field: "control epoch or ticket",
                value: c.ticket as u64,
            });
        }
        Ok(c)
    }
}

// ---------------------------------------------------------------- turn notice

/// The kind byte of an encoded [`Turn`] notice.
pub const TURN_KIND: u8 = 0x54;

/// The server's answer to a [`ControlKind::Wait`] (a SEND, 16 bytes): data node `node`'s meta
/// word when it served the waiter's `ticket` (or when it found the ticket already passed, or
/// the wait about another data array: `stale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// The wait named a data array that is not the tree's (`meta` is then 0).
    pub stale: bool,
    /// Not a turn but the acknowledgement of an applied append (`ticket` is the appender's).
    pub applied: bool,
    pub ticket: u16,
    pub node: u32,
    pub meta: Meta,
}

pub const TURN_LEN: usize = 16;

impl Turn {
    pub fn encode(&self) -> [u8; TURN_LEN] {
        let mut out = [0u8; TURN_LEN];
        out[0] = TURN_KIND;
        out[1] = self.stale as u8 | (self.applied as u8) << 1;
        out[2..4].copy_from_slice(&self.ticket.to_le_bytes());
        out[4..8].copy_from_slice(&self.node.to_le_bytes());
        out[8..16].copy_from_slice(&self.meta.0.to_le_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Turn, LayoutError> {
        if bytes.len() != TURN_LEN {
            return Err(LayoutError::Short {
                need: TURN_LEN,
                got: bytes.len(),
            });
        }
        if bytes[0] != TURN_KIND || bytes[1] > 3 {
            return Err(LayoutError::BadMagic {
                expected: TURN_KIND as u64,
                found: bytes[0] as u64,
            });
        }
        Ok(Turn {
            stale: bytes[1] & 1 == 1,
            applied: bytes[1] & 2 == 2,
            ticket: u16::from_le_bytes([bytes[2], bytes[3]]),
            node: read_u32(bytes, 4)?,
            meta: Meta(read_u64(bytes, 8)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn turn_notices_round_trip_and_reject_garbage() {
        let t = Turn {
            stale: false,
            applied: true,
            ticket: 65_535,
            node: 1 << 20,
            meta: Meta::new(5, 65_535, true, 9),
        };
        assert_eq!(Turn::decode(&t.encode()), Ok(t));
        let mut bad = t.encode();
        bad[0] = 1;
        assert!(Turn::decode(&bad).is_err());
        bad = t.encode();
        bad[1] = 4;
        assert!(Turn::decode(&bad).is_err());
        assert!(Turn::decode(&t.encode()[..15]).is_err());
    }

    #[test]
    fn formulas_match_the_paper() {
        let g = PrefixGeometry::new(&[4, 4, 4]).unwrap();
        assert_eq!(g.base(1), 0);
        assert_eq!(g.base(2), 1);
        assert_eq!(g.base(3), 5);
        assert_eq!(g.level_nodes(3), 16);
        assert_eq!(g.child(1, 0, 2), 3);
        assert_eq!(g.child(2, 3, 1), 5 + 2 * 4 + 1);
        assert_eq!(g.total_nodes(), 21);
        assert_eq!(g.chars_stride(1), 8);
        assert_eq!(g.stride(3), 24);
        assert_eq!(g.level_of(7), Some(3));
        assert_eq!(g.level_of(21), None);
        assert_eq!(g.total_len(), 5 * 8 + 16 * 24);
        let mut a = [0u8; 5 * 8 + 16 * 24];
        g.put_node(&mut a, 7, &[1, 5, 9], &[3, 4, 5]).unwrap();
        assert_eq!(g.chars(&a, 7).unwrap(), &[1, 5, 9]);
        assert_eq!(g.node_id(&a, 7, 2).unwrap(), 5);
        assert!(g.put_node(&mut a, 1, &[1], &[2]).is_err());
        assert!(PrefixGeometry::new(&[256; 9]).is_err());
        // Per-level widths: a wide root does not widen the levels under it.
        let g = PrefixGeometry::new(&[256, 2, 3]).unwrap();
        assert_eq!(g.base(3), 257);
        assert_eq!(g.level_nodes(3), 512);
        assert_eq!(g.child(2, 1 + 255, 1), 257 + 255 * 2 + 1);
    }

    #[test]
    fn items_round_trip_and_tearing_is_caught() {
        let g = DataGeometry::new(8, 16).unwrap();
        let mut b = [0u8; 32];
        g.encode_item(&mut b, 42, b"hello", ItemOp::Update, 77, true)
            .unwrap();
        let it = g.decode_item(&b).unwrap();
        assert_eq!(
            (it.key, it.value, it.op, it.ticket, it.valid),
            (42, &b"hello"[..], ItemOp::Update, 77, true)
        );
        // Clearing the valid bit keeps the checksum.
        let n = b.len();
        let tail = u64::from_le_bytes(b[n - 8..].try_into().unwrap());
        b[n - 8..].copy_from_slice(&tail_processed(tail).to_le_bytes());
        assert!(!g.decode_item(&b).unwrap().valid);
        // A torn item (old key word, new tail) fails.
        b[0] ^= 1;
        assert!(matches!(
            g.decode_item(&b),
            Err(LayoutError::BadChecksum { .. })
        ));
        // A hole's tail: valid, and nothing decodes with it, whatever the rest holds.
        b[0] ^= 1;
        b[n - 8..].copy_from_slice(&hole_tail(77).to_le_bytes());
        assert!(tail_valid(hole_tail(77)));
        assert!(g.decode_item(&b).is_err());
        assert!(
            g.encode_item(&mut b, 1, &[0; 17], ItemOp::Insert, 0, true)
                .is_err()
        );
    }

    #[test]
    fn sixteen_byte_keys_round_trip_whole_and_checked() {
        let g = DataGeometry::new(8, 16).unwrap().with_key_len(16).unwrap();
        assert_eq!(g.item_size(), 40);
        let key = u128::from_be_bytes(*b"random-string-k!");
        let mut b = [0u8; 40];
        g.encode_item(&mut b, key, b"fifteen bytes..", ItemOp::Insert, 3, true)
            .unwrap();
        // Stored as the key's own bytes.
        assert_eq!(&b[..16], b"random-string-k!");
        let it = g.decode_item(&b).unwrap();
        assert_eq!((it.key, it.value), (key, &b"fifteen bytes.."[..]));
        assert_eq!(g.key_from_be(b"random-string-k!"), Some(key));
        assert_eq!(g.key_from_be(b"short"), None);
        let mut kb = [0u8; MAX_KEY];
        assert_eq!(g.key_to_be(key, &mut kb), b"random-string-k!");
        // A changed key byte fails the checksum (the check covers all 16).
        b[15] ^= 1;
        assert!(matches!(
            g.decode_item(&b),
            Err(LayoutError::BadChecksum { .. })
        ));
        // An 8-byte tree refuses keys past 2^64; widths other than 8 and 16 are refused.
        let g8 = DataGeometry::new(8, 16).unwrap();
        assert!(
            g8.encode_item(&mut b, 1 << 64, b"", ItemOp::Insert, 0, true)
                .is_err()
        );
        assert_eq!(g8.key_to_be(0x0102, &mut kb), &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert!(g8.with_key_len(12).is_err());
        let f = Control::decode(&Control::format(g).encode()).unwrap();
        assert_eq!(f.format_geometry(), Ok(g));
        // Segments of a 16-byte tree reach bit 127; a gap is at most 64 bits wide.
        let top = Segment::Level {
            lo: 120,
            width: 8,
            fanout: 3,
        };
        assert_eq!(Segment::decode(top.encode()), Ok(top));
        assert_eq!(top.bits(key), b'r' as u64);
        let wide = Segment::Gap {
            lo: 32,
            width: 65,
            value: 0,
        };
        assert!(Segment::decode(wide.encode()).is_err());
    }

    #[test]
    fn meta_imm_control_round_trip() {
        let m = Meta::new(0b1011, 0xABCD, true, 30_000);
        assert_eq!(
            (m.bitmap(), m.served(), m.frozen(), m.epoch()),
            (0b1011, 0xABCD, true, 30_000)
        );
        assert!(Meta::new(1 << 9, 0, false, 0).check(8).is_err());
        let i = Imm {
            epoch: 130,
            node: 77_000,
            slot: 31,
        };
        let d = Imm::decode(i.encode().unwrap()).unwrap();
        assert_eq!(d, Imm { epoch: 2, ..i });
        assert!(
            Imm {
                epoch: 0,
                node: 1 << 20,
                slot: 0
            }
            .encode()
            .is_err()
        );
        assert!(
            Imm {
                epoch: 0,
                node: 0,
                slot: 32
            }
            .encode()
            .is_err()
        );
        // The widest node id round-trips next to the widest slot and epoch.
        let wide = Imm {
            epoch: 127,
            node: (1 << 20) - 1,
            slot: 31,
        };
        assert_eq!(Imm::decode(wide.encode().unwrap()).unwrap(), wide);
        let c = Control::new(ControlKind::Resize, 5, 3, 9, 1 << 30);
        assert_eq!(Control::decode(&c.encode()).unwrap(), c);
        assert!(Control::decode(&[9; 16]).is_err());
        let skip = Control::new(ControlKind::Skip, 130, 3, SKIP_DRAIN, 70_000);
        let back = Control::decode(&skip.encode()).unwrap();
        assert_eq!(back.kind(), Ok(ControlKind::Skip));
        assert_eq!(
            (back.epoch, back.node, back.ticket),
            (2, SKIP_DRAIN, 70_000 & 0xFFFF)
        );
        let mut bad = skip.encode();
        bad[0] = 6;
        assert!(Control::decode(&bad).is_err());
        let wait = Control::new(ControlKind::Wait, 1, 3, 7, 9);
        assert_eq!(
            Control::decode(&wait.encode()).unwrap().kind(),
            Ok(ControlKind::Wait)
        );
    }

    #[test]
    fn header_round_trips_and_refuses_garbage() {
        let data = DataGeometry::new(16, 8).unwrap();
        let prefix = PrefixGeometry::new(&[2]).unwrap();
        let mut segments = [[0u64; 2]; MAX_SEGMENTS];
        segments[0] = Segment::Gap {
            lo: 8,
            width: 56,
            value: 0,
        }
        .encode();
        segments[1] = Segment::Level {
            lo: 0,
            width: 8,
            fanout: 2,
        }
        .encode();
        let mut h = TreeHeader {
            magic: TREE_MAGIC,
            epoch: 1,
            key_len: 8,
            slots: 16,
            value_cap: 8,
            height: 1,
            width: 2,
            n_segments: 2,
            n_data: 2,
            prefix_off: 4096 + 384,
            prefix_len: prefix.total_len(),
            data_off: 8192,
            data_node_size: data.node_size(),
            area_off: 4096,
            area_len: 4096,
            data_cap: 4,
            array_gen: 1,
            prefix_check: 0,
            header_check: 0,
            reserved: 0,
            segments,
        };
        assert_eq!(prefix.total_len(), 16);
        let mut prefix = [0u8; 16];
        prefix[0] = 2;
        h.seal(&prefix);
        assert_eq!(TreeHeader::decode(&h.encode()), Ok(h));
        assert_eq!(h.check_prefix(&prefix), Ok(()));
        // Each rule is checked on its own (the header resealed, so the checksum holds).
        let refused = |f: fn(&mut TreeHeader)| {
            let mut bad = h;
            f(&mut bad);
            bad.seal(&prefix);
            matches!(
                TreeHeader::decode(&bad.encode()),
                Err(LayoutError::Inconsistent { .. } | LayoutError::OutOfRange { .. })
            )
        };
        assert!(refused(|b| b.n_segments = 1));
        assert!(refused(|b| b.key_len = 12));
        // An 8-byte tree's segments end at bit 64; a 16-byte tree's at bit 128.
        assert!(refused(|b| {
            b.segments[0] = Segment::Gap {
                lo: 8,
                width: 64,
                value: 0,
            }
            .encode()
        }));
        assert!(!refused(|b| {
            b.key_len = 16;
            b.data_node_size = DataGeometry::new(16, 8)
                .unwrap()
                .with_key_len(16)
                .unwrap()
                .node_size();
            b.segments[0] = Segment::Gap {
                lo: 8,
                width: 64,
                value: 0,
            }
            .encode()
        }));
        assert!(refused(|b| b.data_cap = 1));
        assert!(refused(|b| b.area_len = 100));
        // A header or prefix array changed after sealing fails its checksum.
        let mut enc = h.encode();
        enc[36] ^= 1;
        assert!(matches!(
            TreeHeader::decode(&enc),
            Err(LayoutError::BadChecksum { .. })
        ));
        prefix[3] = 1;
        assert!(matches!(
            h.check_prefix(&prefix),
            Err(LayoutError::BadChecksum { .. })
        ));
        assert!(h.check_prefix(&prefix[1..]).is_err());
    }

    /// A READ of header and prefix array racing the server's rewrite of the area observes
    /// each 64-byte segment at its own time: any mix of two sealed versions is refused.
    #[test]
    fn mixed_segments_of_two_versions_fail_the_checksums() {
        let data = DataGeometry::new(16, 8).unwrap();
        let g = PrefixGeometry::new(&[16, 8]).unwrap();
        const PREFIX: usize = 24 + 16 * 48;
        assert_eq!(g.total_len(), PREFIX as u64);
        let mut seg = [[0u64; 2]; MAX_SEGMENTS];
        seg[0] = Segment::Level {
            lo: 8,
            width: 8,
            fanout: 16,
        }
        .encode();
        seg[1] = Segment::Level {
            lo: 0,
            width: 8,
            fanout: 8,
        }
        .encode();
        let area = |epoch: u32, n_data: u32, fill: u8| {
            let mut h = TreeHeader {
                magic: TREE_MAGIC,
                epoch,
                key_len: 8,
                slots: 16,
                value_cap: 8,
                height: 2,
                width: 16,
                n_segments: 2,
                n_data,
                prefix_off: 4096 + 384,
                prefix_len: g.total_len(),
                data_off: 1 << 20,
                data_node_size: data.node_size(),
                area_off: 4096,
                area_len: 384 + g.total_len(),
                data_cap: 64,
                array_gen: 1,
                prefix_check: 0,
                header_check: 0,
                reserved: 0,
                segments: seg,
            };
            let prefix = [fill; PREFIX];
            h.seal(&prefix);
            let mut img = [0u8; TREE_HEADER_LEN + PREFIX];
            img[..TREE_HEADER_LEN].copy_from_slice(&h.encode());
            img[TREE_HEADER_LEN..].copy_from_slice(&prefix);
            img
        };
        let (old, new) = (area(3, 10, 1), area(5, 11, 2));
        let segs = old.len().div_ceil(64);
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut mix = old;
            for s in 0..segs {
                if x >> (s % 64) & 1 == 1 {
                    let r = s * 64..((s + 1) * 64).min(mix.len());
                    mix[r.clone()].copy_from_slice(&new[r]);
                }
            }
            let whole = mix == old || mix == new;
            let ok = TreeHeader::decode(&mix[..TREE_HEADER_LEN])
                .and_then(|h| h.check_prefix(&mix[TREE_HEADER_LEN..]));
            assert_eq!(ok.is_ok(), whole, "a mix of two versions was accepted");
        }
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), w in any::<u64>(), v in any::<u64>()) {
            let _ = TreeHeader::decode(&bytes);
            let _ = Control::decode(&bytes);
            let _ = DataGeometry::new(32, 248).unwrap().decode_item(&bytes);
            let _ = Segment::decode([w, v]);
            let _ = Imm::decode(w as u32);
            let g = PrefixGeometry::new(&[4, 4]).unwrap();
            let _ = g.chars(&bytes, w % 8);
            let _ = g.node_id(&bytes, w % 8, (v % 8) as u32);
        }
    }
}

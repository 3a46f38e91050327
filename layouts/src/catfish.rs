//! Catfish (RDMA-enabled R-tree): node, superblock and message formats.
//!
//! Coordinates are `i32`, not `f64`: comparisons are exact (no NaN, no rounding in the
//! enlargement/area arithmetic done in `i64`/`u64`), a rectangle is 16 bytes instead of 32,
//! so a node READ carries twice the entries per byte, and the paper's normalised `[0, 1]`
//! space maps onto a 2^31 grid without loss that matters to a spatial filter.
//!
//! A node is read by clients with one-sided READs while the server CPU may rewrite it in
//! place, so a READ can tear between 8-byte words, and its 64-byte segments observe memory
//! in no particular order (a NIC splits a READ into PCIe reads that complete in any order;
//! the server's stores are not ordered against it). The server writes a node as a seqlock
//! (head version odd, body, checksum, tail version, head version even) and [`Node::decode`]
//! accepts only an image whose head version is even and whose CRC-64 over head version +
//! body matches the stored checksum: the checksum word comes from one write, so the image
//! passes only if every checked word is that write's (save a CRC collision), whatever order
//! they were read in. A torn image is reported as [`LayoutError::BadChecksum`] or
//! [`LayoutError::Inconsistent`] and the reader retries. (Head and tail versions must also
//! agree, but that only rejects some torn images early: on its own the version pair is
//! sound only for a READ that observes ascending addresses.)
use crate::LayoutError;
use crate::bits::read_u64;
use crate::crc64ecma;

/// The checksum of a node image's first `cs` bytes: CRC-64/ECMA-182 ([`crc64ecma`]: carry-less
/// multiply where the CPU has it, slice-by-16 tables otherwise; the same value either way, and
/// the value the `crc` crate's tables wrote before). A client checks every node it reads.
#[inline]
pub fn node_crc(checksummed: &[u8]) -> u64 {
    crc64ecma::checksum(checksummed)
}

/// Root slot of the region header holding the address of the Catfish superblock.
pub const ROOT_SLOT: usize = 5;

/// An axis-aligned rectangle, bounds inclusive; valid iff `min <= max` on both axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rect {
    /// Least x coordinate (inclusive).
    pub min_x: i32,
    /// Least y coordinate (inclusive).
    pub min_y: i32,
    /// Greatest x coordinate (inclusive).
    pub max_x: i32,
    /// Greatest y coordinate (inclusive).
    pub max_y: i32,
}

/// Bytes of an encoded [`Rect`]: min_x, min_y, max_x, max_y as little-endian i32.
pub const RECT_LEN: usize = 16;

impl Rect {
    /// A rectangle, or an error if a minimum exceeds its maximum.
    pub const fn new(min_x: i32, min_y: i32, max_x: i32, max_y: i32) -> Result<Rect, LayoutError> {
        if min_x > max_x || min_y > max_y {
            return Err(LayoutError::Inconsistent {
                what: "rectangle minimum exceeds maximum",
            });
        }
        Ok(Rect {
            min_x,
            min_y,
            max_x,
            max_y,
        })
    }

    /// Whether `min <= max` on both axes.
    pub const fn is_valid(&self) -> bool {
        self.min_x <= self.max_x && self.min_y <= self.max_y
    }

    /// True if the two rectangles share at least one point.
    pub const fn intersects(&self, o: &Rect) -> bool {
        self.min_x <= o.max_x
            && o.min_x <= self.max_x
            && self.min_y <= o.max_y
            && o.min_y <= self.max_y
    }

    /// The smallest rectangle containing both.
    pub fn union(&self, o: &Rect) -> Rect {
        Rect {
            min_x: self.min_x.min(o.min_x),
            min_y: self.min_y.min(o.min_y),
            max_x: self.max_x.max(o.max_x),
            max_y: self.max_y.max(o.max_y),
        }
    }

    /// Area in grid cells (widths counted inclusive); never overflows.
    pub fn area(&self) -> u128 {
        let w = (self.max_x as i64 - self.min_x as i64 + 1) as u128;
        let h = (self.max_y as i64 - self.min_y as i64 + 1) as u128;
        w * h
    }

    /// Writes the four bounds, little-endian, in the order min_x, min_y, max_x, max_y.
    pub fn encode_into(&self, out: &mut [u8; RECT_LEN]) {
        out[0..4].copy_from_slice(&self.min_x.to_le_bytes());
        out[4..8].copy_from_slice(&self.min_y.to_le_bytes());
        out[8..12].copy_from_slice(&self.max_x.to_le_bytes());
        out[12..16].copy_from_slice(&self.max_y.to_le_bytes());
    }

    /// Decodes 16 bytes at `at`; rejects an inverted rectangle.
    pub fn decode(bytes: &[u8], at: usize) -> Result<Rect, LayoutError> {
        let b = at
            .checked_add(RECT_LEN)
            .and_then(|end| bytes.get(at..end))
            .ok_or(LayoutError::Short {
                need: at.saturating_add(RECT_LEN),
                got: bytes.len(),
            })?;
        let i = |k: usize| i32::from_le_bytes([b[k], b[k + 1], b[k + 2], b[k + 3]]);
        Rect::new(i(0), i(4), i(8), i(12))
    }
}

/// One slot of a node: a rectangle and either a child node address (internal levels, a raw
/// `GlobalAddr`) or the caller's object id (leaves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// The entry's rectangle (a child's bounding rectangle on internal levels).
    pub rect: Rect,
    /// Child node address (raw `GlobalAddr`) on internal levels; the object id in leaves.
    pub ptr: u64,
}

/// Bytes of an encoded [`Entry`]: rectangle then pointer.
pub const ENTRY_LEN: usize = 24;

/// Entries per node unless the tree is formatted with another fanout (the paper evaluates
/// 15, 30, 70 and 130; 16 keeps a node within 7 cache lines).
pub const FANOUT: usize = 16;
/// The fanout range a tree may be formatted with: a node image is [`node_len`]`(fanout)`
/// bytes, and the fanout is recorded in the superblock so clients size their READs by it.
pub const MIN_FANOUT: usize = 4;
/// Largest fanout a tree may be formatted with.
pub const MAX_FANOUT: usize = 130;
/// Minimum entries of a non-root node after a split at the default fanout.
pub const MIN_FILL: usize = min_fill(FANOUT);

/// Minimum entries of a non-root node after a split (40 % of the fanout, Guttman's m).
pub const fn min_fill(fanout: usize) -> usize {
    let m = fanout * 2 / 5;
    if m < 1 { 1 } else { m }
}

/// `b"CFN1"` as a little-endian u32: the node magic.
pub const NODE_MAGIC: u32 = u32::from_le_bytes(*b"CFN1");
/// Levels above the leaves are bounded so a corrupt level cannot drive a reader astray.
pub const MAX_LEVEL: u16 = 32;

/// Byte offset of a node's head version word.
pub(crate) const NODE_VERSION_OFFSET: usize = 0;
/// Byte offset of a node's meta word: [`NODE_MAGIC`] (bits 31..0), level (47..32), count (63..48).
pub(crate) const NODE_META_OFFSET: usize = 8;
/// Byte offset of a node's first entry.
pub(crate) const NODE_ENTRIES_OFFSET: usize = 16;
/// Offsets at the default fanout (see [`node_checksum_offset`] for any other).
pub(crate) const NODE_CHECKSUM_OFFSET: usize = node_checksum_offset(FANOUT);
/// Byte offset of the tail version word at the default fanout.
pub const NODE_TAIL_OFFSET: usize = NODE_CHECKSUM_OFFSET + 8;
/// Bytes of a node image at the default fanout.
pub const NODE_LEN: usize = node_len(FANOUT);
/// Bytes of the largest node image.
pub const MAX_NODE_LEN: usize = node_len(MAX_FANOUT);

/// Offset of the checksum word in a node of `fanout` entries.
pub const fn node_checksum_offset(fanout: usize) -> usize {
    NODE_ENTRIES_OFFSET + ENTRY_LEN * fanout
}

/// Bytes of a node image of `fanout` entries: header, entries, checksum, tail version.
pub const fn node_len(fanout: usize) -> usize {
    node_checksum_offset(fanout) + 16
}

/// A fanout a tree may be formatted with.
pub const fn check_fanout(fanout: usize) -> Result<usize, LayoutError> {
    if fanout < MIN_FANOUT || fanout > MAX_FANOUT {
        return Err(LayoutError::OutOfRange {
            field: "fanout",
            value: fanout as u64,
        });
    }
    Ok(fanout)
}

const _: () = assert!(NODE_CHECKSUM_OFFSET == 400);
const _: () = assert!(NODE_LEN == 416);
const _: () = assert!(NODE_LEN.is_multiple_of(8));
const _: () = assert!(ENTRY_LEN == RECT_LEN + 8);
const _: () = assert!(2 * MIN_FILL <= FANOUT + 1);
const _: () = assert!(MAX_NODE_LEN == 3152 && MAX_NODE_LEN.is_multiple_of(8));
const _: () = assert!(2 * min_fill(MIN_FANOUT) <= MIN_FANOUT + 1);
const _: () = assert!(2 * min_fill(MAX_FANOUT) <= MAX_FANOUT + 1);

/// Low bits of a node's version word that count its in-place rewrites (even when the image
/// is whole, odd mid-rewrite; wrapping, since only the CRC decides what is whole). The
/// bits above hold the node's birth epoch: the superblock's [`META_EPOCH_OFFSET`] word when
/// the server wrote the node fresh (carved or reused), kept by its in-place rewrites.
pub const VERSION_SEQ_BITS: u32 = 16;
/// A node retired (replaced or dropped) while the superblock epoch was `e` is reused only
/// once the epoch is at least `e + REUSE_GRACE`; so a reader that took the epoch `e0` from a
/// READ completed before its traversal began, and meets a node born at `e0 + REUSE_GRACE`
/// or later, may be looking at a reused node and must restart ([`Node::born_after_grace`]).
pub const REUSE_GRACE: u64 = 2;

/// The version word of an image born in epoch `birth` after `seq` half-rewrites.
pub const fn node_version(birth: u64, seq: u64) -> u64 {
    (birth << VERSION_SEQ_BITS) | (seq & ((1 << VERSION_SEQ_BITS) - 1))
}

/// The version word of the next whole image after an in-place rewrite of `v`, and the odd
/// word stored while the rewrite is under way (the birth bits never change).
pub const fn next_version(v: u64) -> (u64, u64) {
    let birth = v >> VERSION_SEQ_BITS;
    let seq = v & !1 & ((1 << VERSION_SEQ_BITS) - 1);
    (node_version(birth, seq + 2), node_version(birth, seq + 1))
}

const _: () = assert!(next_version(node_version(5, 0xfffe)).0 == node_version(5, 0));
const _: () = assert!(next_version(node_version(5, 0xfffe)).1 == node_version(5, 0xffff));
const _: () = assert!(next_version(node_version(5, 2)).0 == node_version(5, 4));
const _: () = assert!(next_version(node_version(5, 2)).1 == node_version(5, 3));

/// A decoded node (the version is the even version of the image it came from). Holds up to
/// [`MAX_FANOUT`] entries; `fanout` is the capacity of the tree it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// The image's head version (even; birth epoch above [`VERSION_SEQ_BITS`], rewrite count
    /// below).
    pub version: u64,
    /// 0 for leaves.
    pub level: u16,
    /// Entries in use, at the front of `entries`.
    pub count: u16,
    /// Capacity of the tree's nodes ([`MIN_FANOUT`]..=[`MAX_FANOUT`]).
    pub fanout: u16,
    /// Entry storage; only the first `count` are meaningful.
    pub entries: [Entry; MAX_FANOUT],
}

/// One encoded node image: the first [`NodeImage::len`] bytes of a buffer sized for the
/// largest fanout.
#[derive(Clone, Copy)]
pub struct NodeImage {
    bytes: [u8; MAX_NODE_LEN],
    len: usize,
}

impl NodeImage {
    /// The image's bytes ([`node_len`] of the node's fanout).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl core::ops::Deref for NodeImage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl core::ops::DerefMut for NodeImage {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
}

const EMPTY_ENTRY: Entry = Entry {
    rect: Rect {
        min_x: 0,
        min_y: 0,
        max_x: 0,
        max_y: 0,
    },
    ptr: 0,
};

impl Node {
    /// An empty node of the default fanout.
    pub const fn empty(level: u16) -> Node {
        Node::with_fanout(level, FANOUT)
    }

    /// An empty node holding up to `fanout` entries (clamped to the legal range).
    pub const fn with_fanout(level: u16, fanout: usize) -> Node {
        let f = if fanout < MIN_FANOUT {
            MIN_FANOUT
        } else if fanout > MAX_FANOUT {
            MAX_FANOUT
        } else {
            fanout
        };
        Node {
            version: 0,
            level,
            count: 0,
            fanout: f as u16,
            entries: [EMPTY_ENTRY; MAX_FANOUT],
        }
    }

    /// The entries in use.
    pub fn entries(&self) -> &[Entry] {
        &self.entries[..self.count as usize]
    }

    /// Whether the node holds `fanout` entries.
    pub fn is_full(&self) -> bool {
        self.count >= self.fanout
    }

    /// The epoch this node was written fresh in (see [`VERSION_SEQ_BITS`]).
    pub const fn birth(&self) -> u64 {
        self.version >> VERSION_SEQ_BITS
    }

    /// True if this image may be a reused node for a reader whose traversal began after it
    /// READ the superblock epoch `epoch0` (see [`REUSE_GRACE`]): it must restart. Also true,
    /// harmlessly, of a node that was only carved after its traversal began.
    pub const fn born_after_grace(&self, epoch0: u64) -> bool {
        self.birth() >= epoch0.saturating_add(REUSE_GRACE)
    }

    /// Bytes of this node's image.
    pub fn image_len(&self) -> usize {
        node_len(self.fanout as usize)
    }

    /// Appends an entry; an error if the node is full.
    pub fn push(&mut self, e: Entry) -> Result<(), LayoutError> {
        if self.is_full() {
            return Err(LayoutError::OutOfRange {
                field: "count",
                value: self.count as u64 + 1,
            });
        }
        self.entries[self.count as usize] = e;
        self.count += 1;
        Ok(())
    }

    /// The bounding rectangle of all entries (None when empty).
    pub fn mbr(&self) -> Option<Rect> {
        let mut it = self.entries().iter();
        let first = it.next()?.rect;
        Some(it.fold(first, |acc, e| acc.union(&e.rect)))
    }

    /// The image with head and tail version `version` (even) and its checksum.
    pub fn encode(&self, version: u64) -> NodeImage {
        let len = self.image_len();
        let mut img = NodeImage {
            bytes: [0u8; MAX_NODE_LEN],
            len,
        };
        let out = &mut img.bytes[..len];
        out[0..8].copy_from_slice(&version.to_le_bytes());
        let meta = NODE_MAGIC as u64 | (self.level as u64) << 32 | (self.count as u64) << 48;
        out[8..16].copy_from_slice(&meta.to_le_bytes());
        for (i, e) in self.entries().iter().enumerate() {
            let at = NODE_ENTRIES_OFFSET + i * ENTRY_LEN;
            let mut r = [0u8; RECT_LEN];
            e.rect.encode_into(&mut r);
            out[at..at + RECT_LEN].copy_from_slice(&r);
            out[at + RECT_LEN..at + ENTRY_LEN].copy_from_slice(&e.ptr.to_le_bytes());
        }
        let cs = node_checksum_offset(self.fanout as usize);
        let sum = node_crc(&out[..cs]);
        out[cs..cs + 8].copy_from_slice(&sum.to_le_bytes());
        out[cs + 8..cs + 16].copy_from_slice(&version.to_le_bytes());
        img
    }

    /// Decodes and validates an image of the default fanout (see [`Node::decode_with`]).
    pub fn decode(bytes: &[u8]) -> Result<Node, LayoutError> {
        Node::decode_with(bytes, FANOUT)
    }

    /// Decodes and validates the first [`node_len`]`(fanout)` bytes as a node of a tree of
    /// `fanout`; a torn or corrupt image is an error, never a panic.
    pub fn decode_with(bytes: &[u8], fanout: usize) -> Result<Node, LayoutError> {
        let fanout = check_fanout(fanout)?;
        let len = node_len(fanout);
        if bytes.len() < len {
            return Err(LayoutError::Short {
                need: len,
                got: bytes.len(),
            });
        }
        let cs = node_checksum_offset(fanout);
        let head = read_u64(bytes, NODE_VERSION_OFFSET)?;
        let tail = read_u64(bytes, cs + 8)?;
        if head != tail || head & 1 == 1 {
            return Err(LayoutError::Inconsistent {
                what: "node head and tail versions differ or a write is in progress",
            });
        }
        let stored = read_u64(bytes, cs)?;
        let computed = node_crc(&bytes[..cs]);
        if stored != computed {
            return Err(LayoutError::BadChecksum { stored, computed });
        }
        let meta = read_u64(bytes, NODE_META_OFFSET)?;
        if meta as u32 != NODE_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: NODE_MAGIC as u64,
                found: meta as u32 as u64,
            });
        }
        let level = (meta >> 32) as u16;
        let count = (meta >> 48) as u16;
        if level > MAX_LEVEL {
            return Err(LayoutError::OutOfRange {
                field: "level",
                value: level as u64,
            });
        }
        if count as usize > fanout {
            return Err(LayoutError::OutOfRange {
                field: "count",
                value: count as u64,
            });
        }
        let mut node = Node::with_fanout(level, fanout);
        node.version = head;
        for i in 0..count as usize {
            let at = NODE_ENTRIES_OFFSET + i * ENTRY_LEN;
            let rect = Rect::decode(bytes, at)?;
            let ptr = read_u64(bytes, at + RECT_LEN)?;
            node.push(Entry { rect, ptr })?;
        }
        Ok(node)
    }
}

mod messages;
mod meta;
#[cfg(test)]
mod tests;

pub use messages::*;
pub use meta::*;

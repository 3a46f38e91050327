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

/// CRC-64, slice-by-16 tables (a client checks every node it reads).
static CRC64: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_ECMA_182);

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
        let sum = CRC64.checksum(&out[..cs]);
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
        let computed = CRC64.checksum(&bytes[..cs]);
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

/// The superblock, named by root slot [`ROOT_SLOT`]: independent 8-byte words, each
/// read and written whole, so it needs no checksum.
pub const META_MAGIC: u64 = u64::from_le_bytes(*b"CATFISH1");
/// Byte offset of [`META_MAGIC`] in the superblock.
pub const META_MAGIC_OFFSET: u64 = 0;
/// Raw `GlobalAddr` of the current root node.
pub const META_ROOT_OFFSET: u64 = 8;
/// The server's heartbeat word, see [`Heartbeat`].
pub const META_HEARTBEAT_OFFSET: u64 = 16;
/// The tree's fanout (entries per node), fixed when it is formatted.
pub const META_FANOUT_OFFSET: u64 = 24;
/// The tree's kind ([`TreeKind`]), fixed when it is formatted (0, the basic R-tree, in a
/// superblock written before the word existed: its carve was zeroed memory).
pub const META_KIND_OFFSET: u64 = 32;
/// The reclamation epoch: grows by one at a time (only the server writes it); every node
/// image carries the epoch it was born in, and a node retired in epoch `e` is reused only
/// from epoch `e + REUSE_GRACE` on (see [`REUSE_GRACE`]).
pub const META_EPOCH_OFFSET: u64 = 40;
/// Bytes of the superblock.
pub const META_LEN: usize = 48;
const _: () = assert!(META_KIND_OFFSET + 8 == META_EPOCH_OFFSET);
const _: () = assert!(META_EPOCH_OFFSET as usize + 8 == META_LEN);
const _: () = assert!(META_LEN <= 64);

/// Which R-tree variant the server keeps. Searches (messaging or offloading) read every kind
/// the same way: the node format is shared; only how the server places entries differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum TreeKind {
    /// Guttman's R-tree with the quadratic split.
    #[default]
    Guttman = 0,
    /// Beckmann et al.'s R*-tree: ChooseSubtree by overlap enlargement above the leaves,
    /// forced reinsert, the margin/overlap split (the paper's main tree).
    RStar = 1,
    /// Kamel and Faloutsos's Hilbert R-tree: entries ordered by the Hilbert value of their
    /// centres (largest Hilbert value per subtree), 2-to-3 split with a cooperating sibling.
    Hilbert = 2,
}

impl TreeKind {
    /// The kind stored in the superblock's [`META_KIND_OFFSET`] word (0..=2), or an error.
    pub const fn decode(v: u64) -> Result<TreeKind, LayoutError> {
        match v {
            0 => Ok(TreeKind::Guttman),
            1 => Ok(TreeKind::RStar),
            2 => Ok(TreeKind::Hilbert),
            other => Err(LayoutError::OutOfRange {
                field: "tree kind",
                value: other,
            }),
        }
    }

    /// Short lowercase name of the kind ("guttman", "rstar", "hilbert").
    pub const fn name(self) -> &'static str {
        match self {
            TreeKind::Guttman => "guttman",
            TreeKind::RStar => "rstar",
            TreeKind::Hilbert => "hilbert",
        }
    }
}

/// The server's CPU load report: utilisation in per-mille and a sequence number that grows
/// with every report (a client that sees the same sequence twice knows no heartbeat came).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Heartbeat {
    /// Server CPU utilisation, in per-mille (bits 15..0 of the word).
    pub load_permille: u16,
    /// Report sequence number (bits 63..16 of the word).
    pub seq: u64,
}

impl Heartbeat {
    /// The heartbeat word: load in bits 15..0, sequence above.
    pub const fn encode(&self) -> u64 {
        self.load_permille as u64 | (self.seq << 16)
    }
    /// Splits a heartbeat word into load and sequence.
    pub const fn decode(word: u64) -> Heartbeat {
        Heartbeat {
            load_permille: (word & 0xffff) as u16,
            seq: word >> 16,
        }
    }
}

/// The decoded superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Raw `GlobalAddr` of the root node ([`META_ROOT_OFFSET`]).
    pub root: u64,
    /// The server's last heartbeat ([`META_HEARTBEAT_OFFSET`]).
    pub heartbeat: Heartbeat,
    /// Entries per node ([`META_FANOUT_OFFSET`]).
    pub fanout: usize,
    /// R-tree variant ([`META_KIND_OFFSET`]).
    pub kind: TreeKind,
    /// The reclamation epoch ([`META_EPOCH_OFFSET`]).
    pub epoch: u64,
}

impl Meta {
    /// Decodes the superblock, checking the magic, fanout and tree kind.
    pub fn decode(bytes: &[u8]) -> Result<Meta, LayoutError> {
        let magic = read_u64(bytes, META_MAGIC_OFFSET as usize)?;
        if magic != META_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: META_MAGIC,
                found: magic,
            });
        }
        Ok(Meta {
            root: read_u64(bytes, META_ROOT_OFFSET as usize)?,
            heartbeat: Heartbeat::decode(read_u64(bytes, META_HEARTBEAT_OFFSET as usize)?),
            fanout: check_fanout(
                usize::try_from(read_u64(bytes, META_FANOUT_OFFSET as usize)?)
                    .unwrap_or(usize::MAX),
            )?,
            kind: TreeKind::decode(read_u64(bytes, META_KIND_OFFSET as usize)?)?,
            epoch: read_u64(bytes, META_EPOCH_OFFSET as usize)?,
        })
    }
}

/// Request opcodes of fast messaging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Format a fresh tree in the arena `[arg0 (raw GlobalAddr), + low 40 bits of arg1
    /// bytes)`, with the [`TreeKind`] in bits 40..48 of arg1 and the fanout in its top 16
    /// bits (0: [`FANOUT`]); see [`init_arg`].
    Init = 1,
    /// Give the server another arena `[arg0, + arg1)` to carve nodes from.
    Grow = 2,
    /// Insert `rect` with object id `arg0`.
    Insert = 3,
    /// Return every entry whose rectangle intersects `rect`.
    Search = 4,
    /// Send the next window of the reply to request `req_id` (the client consumed the
    /// window that ended with [`FLAG_MORE`]).
    More = 5,
    /// Give this connection its block on the memory node ([`CLIENT_BLOCK_LEN`] bytes): the
    /// request mailbox for WRITE_WITH_IMM requests at offset 0; the server sends heartbeats
    /// to the connections holding a block. The reply carries one entry whose `ptr`
    /// is the block's raw `GlobalAddr`.
    Mailbox = 6,
    /// Delete the entry with rectangle `rect` and object id `arg0` (one of them, if the same
    /// pair was inserted twice). The reply carries the deleted entry (`count` 1), or no
    /// entry if there was none.
    Delete = 7,
}

/// Bits of [`Opcode::Init`]'s arg1 holding the arena length.
pub(crate) const INIT_LEN_BITS: u32 = 40;

/// [`Opcode::Init`]'s arg1 for an arena of `len` bytes (below 2^40), a tree `kind` and
/// `fanout` entries per node.
pub const fn init_arg(len: u64, kind: TreeKind, fanout: usize) -> u64 {
    (len & ((1 << INIT_LEN_BITS) - 1)) | (kind as u64) << INIT_LEN_BITS | (fanout as u64) << 48
}

/// Splits [`Opcode::Init`]'s arg1 into arena length, tree kind and fanout (0: default).
pub const fn split_init_arg(arg1: u64) -> Result<(u64, TreeKind, usize), LayoutError> {
    let kind = match TreeKind::decode((arg1 >> INIT_LEN_BITS) & 0xff) {
        Ok(k) => k,
        Err(e) => return Err(e),
    };
    Ok((
        arg1 & ((1 << INIT_LEN_BITS) - 1),
        kind,
        (arg1 >> 48) as usize,
    ))
}

/// Bytes of a connection's block (see [`Opcode::Mailbox`]).
pub const CLIENT_BLOCK_LEN: usize = 64;
/// Reserved in the connection's block (it held a heartbeat slot; the server now sends each
/// client its heartbeat as a message, as the paper's server does).
pub const CLIENT_HEARTBEAT_OFFSET: u64 = 56;
const _: () = assert!(REQUEST_LEN as u64 <= CLIENT_HEARTBEAT_OFFSET);
const _: () = assert!(CLIENT_HEARTBEAT_OFFSET + 8 <= CLIENT_BLOCK_LEN as u64);

/// Magic in bits 15..0 of a request's first word.
pub const REQUEST_MAGIC: u16 = 0xCF01;
/// Magic in bits 15..0 of a response message's first word.
pub const RESPONSE_MAGIC: u16 = 0xCF02;
/// Bytes of an encoded [`Request`].
pub const REQUEST_LEN: usize = 40;

/// A fast-messaging request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What the request asks (bits 23..16 of the first word).
    pub op: Opcode,
    /// Reply messages the client has received on this connection so far, modulo 256 (the
    /// server's flow control: it keeps at most a window of unread replies per connection).
    pub acked: u8,
    /// Client-chosen id echoed in the response (bits 63..32 of the first word).
    pub req_id: u32,
    /// Rectangle argument (bytes 8..24).
    pub rect: Rect,
    /// First argument word (bytes 24..32); meaning per [`Opcode`].
    pub arg0: u64,
    /// Second argument word (bytes 32..40); meaning per [`Opcode`].
    pub arg1: u64,
}

impl Request {
    /// The request's 40 bytes: magic, opcode, acked, req_id word; rectangle; arg0; arg1.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        let w0 = REQUEST_MAGIC as u64
            | (self.op as u64) << 16
            | (self.acked as u64) << 24
            | (self.req_id as u64) << 32;
        out[0..8].copy_from_slice(&w0.to_le_bytes());
        let mut r = [0u8; RECT_LEN];
        self.rect.encode_into(&mut r);
        out[8..24].copy_from_slice(&r);
        out[24..32].copy_from_slice(&self.arg0.to_le_bytes());
        out[32..40].copy_from_slice(&self.arg1.to_le_bytes());
        out
    }

    /// Decodes 40 bytes, checking the magic and the opcode.
    pub fn decode(bytes: &[u8]) -> Result<Request, LayoutError> {
        if bytes.len() != REQUEST_LEN {
            return Err(LayoutError::Short {
                need: REQUEST_LEN,
                got: bytes.len(),
            });
        }
        let w0 = read_u64(bytes, 0)?;
        if w0 as u16 != REQUEST_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: REQUEST_MAGIC as u64,
                found: w0 & 0xffff,
            });
        }
        let op = match (w0 >> 16) as u8 {
            1 => Opcode::Init,
            2 => Opcode::Grow,
            3 => Opcode::Insert,
            4 => Opcode::Search,
            5 => Opcode::More,
            6 => Opcode::Mailbox,
            7 => Opcode::Delete,
            other => {
                return Err(LayoutError::OutOfRange {
                    field: "opcode",
                    value: other as u64,
                });
            }
        };
        Ok(Request {
            op,
            acked: (w0 >> 24) as u8,
            req_id: (w0 >> 32) as u32,
            rect: Rect::decode(bytes, 8)?,
            arg0: read_u64(bytes, 24)?,
            arg1: read_u64(bytes, 32)?,
        })
    }
}

/// Outcome of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// The request succeeded.
    Ok = 0,
    /// The server's arenas are exhausted: send [`Opcode::Grow`] and retry.
    Full = 1,
    /// The request was malformed (bad rectangle, bad arena).
    BadRequest = 2,
    /// No tree was formatted yet.
    NotInitialized = 3,
    /// The server found its own tree corrupt.
    Corrupt = 4,
}

/// The response's last message carries this flag; a search's hits may span several.
pub const FLAG_LAST: u8 = 1;
/// The last message of a window: more of this reply is waiting at the server, which sends it
/// when the client asks with [`Opcode::More`].
pub const FLAG_MORE: u8 = 2;
/// Byte of a response message holding its flags (bits 24..32 of the first word).
pub const RESPONSE_FLAGS_BYTE: usize = 3;
/// Bytes of a [`ResponseHeader`].
pub(crate) const RESPONSE_HEADER_LEN: usize = 16;

/// Header of one response message, followed by `count` entries of [`ENTRY_LEN`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    /// Outcome of the request (bits 23..16 of the first word).
    pub status: Status,
    /// [`FLAG_LAST`] and [`FLAG_MORE`] bits.
    pub flags: u8,
    /// Id of the request this answers.
    pub req_id: u32,
    /// The server's current load, piggybacked on every reply.
    pub load_permille: u16,
    /// Entries following the header in this message.
    pub count: u32,
}

/// Hits that fit in one message of `max_message` bytes.
pub const fn hits_per_message(max_message: usize) -> usize {
    max_message.saturating_sub(RESPONSE_HEADER_LEN) / ENTRY_LEN
}

impl ResponseHeader {
    /// The header's 16 bytes: magic, status, flags, req_id; then load (bits 15..0) and count (bits
    /// 63..32).
    pub fn encode(&self) -> [u8; RESPONSE_HEADER_LEN] {
        let mut out = [0u8; RESPONSE_HEADER_LEN];
        let w0 = RESPONSE_MAGIC as u64
            | (self.status as u64) << 16
            | (self.flags as u64) << 24
            | (self.req_id as u64) << 32;
        let w1 = self.load_permille as u64 | (self.count as u64) << 32;
        out[0..8].copy_from_slice(&w0.to_le_bytes());
        out[8..16].copy_from_slice(&w1.to_le_bytes());
        out
    }

    /// Decodes the header and checks that `bytes` holds exactly its `count` entries.
    pub fn decode(bytes: &[u8]) -> Result<ResponseHeader, LayoutError> {
        let w0 = read_u64(bytes, 0)?;
        let w1 = read_u64(bytes, 8)?;
        if w0 as u16 != RESPONSE_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: RESPONSE_MAGIC as u64,
                found: w0 & 0xffff,
            });
        }
        let status = match (w0 >> 16) as u8 {
            0 => Status::Ok,
            1 => Status::Full,
            2 => Status::BadRequest,
            3 => Status::NotInitialized,
            4 => Status::Corrupt,
            other => {
                return Err(LayoutError::OutOfRange {
                    field: "status",
                    value: other as u64,
                });
            }
        };
        let count = (w1 >> 32) as u32;
        let need = RESPONSE_HEADER_LEN + count as usize * ENTRY_LEN;
        if bytes.len() != need {
            return Err(LayoutError::Short {
                need,
                got: bytes.len(),
            });
        }
        Ok(ResponseHeader {
            status,
            flags: (w0 >> 24) as u8,
            req_id: (w0 >> 32) as u32,
            load_permille: (w1 & 0xffff) as u16,
            count,
        })
    }
}

/// Encodes one hit (leaf entry) for a response message.
pub fn encode_entry(e: &Entry, out: &mut [u8; ENTRY_LEN]) {
    let mut r = [0u8; RECT_LEN];
    e.rect.encode_into(&mut r);
    out[..RECT_LEN].copy_from_slice(&r);
    out[RECT_LEN..].copy_from_slice(&e.ptr.to_le_bytes());
}

/// Decodes the `i`-th hit after a response header.
pub fn decode_hit(msg: &[u8], i: usize) -> Result<Entry, LayoutError> {
    let at = i
        .checked_mul(ENTRY_LEN)
        .and_then(|o| o.checked_add(RESPONSE_HEADER_LEN))
        .ok_or(LayoutError::OutOfRange {
            field: "hit index",
            value: i as u64,
        })?;
    Ok(Entry {
        rect: Rect::decode(msg, at)?,
        ptr: read_u64(msg, at + RECT_LEN)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(level: u16, n: usize, salt: i32) -> Node {
        let mut node = Node::empty(level);
        for i in 0..n as i32 {
            let r = Rect::new(i * 3 + salt, -i, i * 3 + 5 + salt, 7 - i + 10).unwrap();
            node.push(Entry {
                rect: r,
                ptr: (i as u64 + 1) * 0x1000 + salt as u64,
            })
            .unwrap();
        }
        node
    }

    #[test]
    fn node_round_trips() {
        for n in [0, 1, FANOUT / 2, FANOUT] {
            let node = sample(3, n, 0);
            let img = node.encode(42);
            let mut back = Node::decode(&img).unwrap();
            assert_eq!(back.version, 42);
            back.version = 0;
            assert_eq!(back, node);
        }
    }

    #[test]
    fn nodes_of_every_paper_fanout_round_trip() {
        for fanout in [MIN_FANOUT, 15, 30, 70, MAX_FANOUT] {
            let mut node = Node::with_fanout(2, fanout);
            for i in 0..fanout as i32 {
                let r = Rect::new(i, -i, i + 9, 100).unwrap();
                node.push(Entry {
                    rect: r,
                    ptr: i as u64,
                })
                .unwrap();
            }
            assert!(node.is_full() && node.push(node.entries[0]).is_err());
            let img = node.encode(8);
            assert_eq!(img.len(), node_len(fanout));
            let mut back = Node::decode_with(&img, fanout).unwrap();
            back.version = 0;
            assert_eq!(back, node);
            // Read with another tree's fanout, the image does not decode.
            let other = if fanout == 30 { 15 } else { 30 };
            let mut wide = [0u8; MAX_NODE_LEN];
            wide[..img.len()].copy_from_slice(&img);
            assert!(
                Node::decode_with(&wide, other).is_err(),
                "{fanout} as {other}"
            );
            assert!(Node::decode_with(&img[..img.len() - 8], fanout).is_err());
        }
        assert!(Node::decode_with(&[0u8; MAX_NODE_LEN], MAX_FANOUT + 1).is_err());
        assert!(Node::decode_with(&[0u8; MAX_NODE_LEN], 0).is_err());
    }

    #[test]
    fn every_torn_mix_of_two_versions_is_rejected() {
        let old = sample(0, 9, 0).encode(10);
        let new = sample(0, 12, 1).encode(12);
        // The writer's in-progress image: head odd, the rest still old or already new.
        let mut writing = old;
        writing[0..8].copy_from_slice(&11u64.to_le_bytes());
        for base in [&old, &writing] {
            for cut in (8..NODE_LEN).step_by(8) {
                let mut torn = *base;
                torn[cut..].copy_from_slice(&new[cut..]);
                // A reader sees a prefix from one image and a suffix from the next.
                assert!(Node::decode(&torn).is_err(), "torn at byte {cut} accepted");
                let mut torn = new;
                torn[cut..].copy_from_slice(&base[cut..]);
                assert!(
                    Node::decode(&torn).is_err(),
                    "reverse tear at {cut} accepted"
                );
            }
        }
        // Head and tail agree but the body is a mix: only the checksum can tell.
        let mut mixed = new;
        mixed[0..8].copy_from_slice(&10u64.to_le_bytes());
        mixed[NODE_TAIL_OFFSET..].copy_from_slice(&10u64.to_le_bytes());
        assert!(matches!(
            Node::decode(&mixed),
            Err(LayoutError::BadChecksum { .. })
        ));
    }

    #[test]
    fn garbage_never_panics() {
        let mut img = sample(1, 5, 2).encode(4);
        for i in 0..NODE_LEN {
            img[i] ^= 0x5a;
            let _ = Node::decode(&img);
        }
        assert!(Node::decode(&img[..100]).is_err());
        assert!(Rect::new(1, 0, 0, 0).is_err());
    }

    #[test]
    fn messages_round_trip() {
        let req = Request {
            op: Opcode::Search,
            acked: 200,
            req_id: 77,
            rect: Rect::new(-5, -6, 7, 8).unwrap(),
            arg0: 9,
            arg1: 10,
        };
        assert_eq!(Request::decode(&req.encode()).unwrap(), req);
        let mut bad = req.encode();
        bad[2] = 99;
        assert!(Request::decode(&bad).is_err());
        let h = ResponseHeader {
            status: Status::Full,
            flags: FLAG_LAST,
            req_id: 5,
            load_permille: 960,
            count: 0,
        };
        assert_eq!(ResponseHeader::decode(&h.encode()).unwrap(), h);
        assert_eq!(
            Heartbeat::decode(
                Heartbeat {
                    load_permille: 999,
                    seq: 12345
                }
                .encode()
            )
            .seq,
            12345
        );
        assert_eq!(hits_per_message(4096), 170);
        let del = Request {
            op: Opcode::Delete,
            ..req
        };
        assert_eq!(Request::decode(&del.encode()).unwrap(), del);
        for kind in [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert] {
            let arg = init_arg(128 << 10, kind, 30);
            assert_eq!(split_init_arg(arg).unwrap(), (128 << 10, kind, 30));
            assert_eq!(TreeKind::decode(kind as u64).unwrap(), kind);
        }
        assert!(split_init_arg(7 << INIT_LEN_BITS).is_err());
        assert!(TreeKind::decode(3).is_err());
    }

    #[test]
    fn rect_geometry() {
        let a = Rect::new(0, 0, 9, 9).unwrap();
        let b = Rect::new(9, 9, 20, 20).unwrap();
        let c = Rect::new(10, 0, 20, 8).unwrap();
        assert!(a.intersects(&b) && !a.intersects(&c));
        assert_eq!(a.area(), 100);
        let full = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
        assert_eq!(full.area(), 1u128 << 64);
        assert_eq!(a.union(&c), Rect::new(0, 0, 20, 9).unwrap());
    }
}

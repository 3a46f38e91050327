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

const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_ECMA_182);

/// Root slot of the region header holding the address of the Catfish superblock.
pub const ROOT_SLOT: usize = 5;

/// An axis-aligned rectangle, bounds inclusive; valid iff `min <= max` on both axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rect {
    pub min_x: i32,
    pub min_y: i32,
    pub max_x: i32,
    pub max_y: i32,
}

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
    pub rect: Rect,
    pub ptr: u64,
}

pub const ENTRY_LEN: usize = 24;

/// Entries per node (the paper evaluates 15 to 130; 16 keeps a node within 7 cache lines).
pub const FANOUT: usize = 16;
/// Minimum entries of a non-root node after a split (40 % of the fanout, Guttman's m).
pub const MIN_FILL: usize = 6;

/// `b"CFN1"` as a little-endian u32: the node magic.
pub const NODE_MAGIC: u32 = u32::from_le_bytes(*b"CFN1");
/// Levels above the leaves are bounded so a corrupt level cannot drive a reader astray.
pub const MAX_LEVEL: u16 = 32;

pub const NODE_VERSION_OFFSET: usize = 0;
pub const NODE_META_OFFSET: usize = 8;
pub const NODE_ENTRIES_OFFSET: usize = 16;
pub const NODE_CHECKSUM_OFFSET: usize = NODE_ENTRIES_OFFSET + ENTRY_LEN * FANOUT;
pub const NODE_TAIL_OFFSET: usize = NODE_CHECKSUM_OFFSET + 8;
/// Bytes of a node image.
pub const NODE_LEN: usize = NODE_TAIL_OFFSET + 8;

const _: () = assert!(NODE_CHECKSUM_OFFSET == 400);
const _: () = assert!(NODE_LEN == 416);
const _: () = assert!(NODE_LEN.is_multiple_of(8));
const _: () = assert!(ENTRY_LEN == RECT_LEN + 8);
const _: () = assert!(2 * MIN_FILL <= FANOUT + 1);

/// A decoded node (the version is the even version of the image it came from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    pub version: u64,
    /// 0 for leaves.
    pub level: u16,
    pub count: u16,
    pub entries: [Entry; FANOUT],
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
    pub const fn empty(level: u16) -> Node {
        Node {
            version: 0,
            level,
            count: 0,
            entries: [EMPTY_ENTRY; FANOUT],
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries[..self.count as usize]
    }

    pub fn is_full(&self) -> bool {
        self.count as usize >= FANOUT
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
    pub fn encode(&self, version: u64) -> [u8; NODE_LEN] {
        let mut out = [0u8; NODE_LEN];
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
        let sum = CRC64.checksum(&out[..NODE_CHECKSUM_OFFSET]);
        out[NODE_CHECKSUM_OFFSET..NODE_TAIL_OFFSET].copy_from_slice(&sum.to_le_bytes());
        out[NODE_TAIL_OFFSET..NODE_LEN].copy_from_slice(&version.to_le_bytes());
        out
    }

    /// Decodes and validates an image; a torn or corrupt image is an error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Node, LayoutError> {
        if bytes.len() < NODE_LEN {
            return Err(LayoutError::Short {
                need: NODE_LEN,
                got: bytes.len(),
            });
        }
        let head = read_u64(bytes, NODE_VERSION_OFFSET)?;
        let tail = read_u64(bytes, NODE_TAIL_OFFSET)?;
        if head != tail || head & 1 == 1 {
            return Err(LayoutError::Inconsistent {
                what: "node head and tail versions differ or a write is in progress",
            });
        }
        let stored = read_u64(bytes, NODE_CHECKSUM_OFFSET)?;
        let computed = CRC64.checksum(&bytes[..NODE_CHECKSUM_OFFSET]);
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
        if count as usize > FANOUT {
            return Err(LayoutError::OutOfRange {
                field: "count",
                value: count as u64,
            });
        }
        let mut node = Node::empty(level);
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

/// The superblock, named by root slot [`ROOT_SLOT`]: three independent 8-byte words, each
/// read and written whole, so it needs no checksum.
pub const META_MAGIC: u64 = u64::from_le_bytes(*b"CATFISH1");
pub const META_MAGIC_OFFSET: u64 = 0;
/// Raw `GlobalAddr` of the current root node.
pub const META_ROOT_OFFSET: u64 = 8;
/// The server's heartbeat word, see [`Heartbeat`].
pub const META_HEARTBEAT_OFFSET: u64 = 16;
pub const META_LEN: usize = 24;

/// The server's CPU load report: utilisation in per-mille and a sequence number that grows
/// with every report (a client that sees the same sequence twice knows no heartbeat came).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Heartbeat {
    pub load_permille: u16,
    pub seq: u64,
}

impl Heartbeat {
    pub const fn encode(&self) -> u64 {
        self.load_permille as u64 | (self.seq << 16)
    }
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
    pub root: u64,
    pub heartbeat: Heartbeat,
}

impl Meta {
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
        })
    }
}

/// Request opcodes of fast messaging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Format a fresh tree in the arena `[arg0 (raw GlobalAddr), + arg1 bytes)`.
    Init = 1,
    /// Give the server another arena `[arg0, + arg1)` to carve nodes from.
    Grow = 2,
    /// Insert `rect` with object id `arg0`.
    Insert = 3,
    /// Return every entry whose rectangle intersects `rect`.
    Search = 4,
}

pub const REQUEST_MAGIC: u16 = 0xCF01;
pub const RESPONSE_MAGIC: u16 = 0xCF02;
pub const REQUEST_LEN: usize = 40;

/// A fast-messaging request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub op: Opcode,
    pub req_id: u32,
    pub rect: Rect,
    pub arg0: u64,
    pub arg1: u64,
}

impl Request {
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        let w0 = REQUEST_MAGIC as u64 | (self.op as u64) << 16 | (self.req_id as u64) << 32;
        out[0..8].copy_from_slice(&w0.to_le_bytes());
        let mut r = [0u8; RECT_LEN];
        self.rect.encode_into(&mut r);
        out[8..24].copy_from_slice(&r);
        out[24..32].copy_from_slice(&self.arg0.to_le_bytes());
        out[32..40].copy_from_slice(&self.arg1.to_le_bytes());
        out
    }

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
            other => {
                return Err(LayoutError::OutOfRange {
                    field: "opcode",
                    value: other as u64,
                });
            }
        };
        Ok(Request {
            op,
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
pub const RESPONSE_HEADER_LEN: usize = 16;

/// Header of one response message, followed by `count` entries of [`ENTRY_LEN`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    pub status: Status,
    pub flags: u8,
    pub req_id: u32,
    /// The server's current load, piggybacked on every reply.
    pub load_permille: u16,
    pub count: u32,
}

/// Hits that fit in one message of `max_message` bytes.
pub const fn hits_per_message(max_message: usize) -> usize {
    max_message.saturating_sub(RESPONSE_HEADER_LEN) / ENTRY_LEN
}

impl ResponseHeader {
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

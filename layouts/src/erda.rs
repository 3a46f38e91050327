//! Erda's formats: log objects, hash buckets with the 8-byte atomic metadata word, the
//! superblock, and the client/server messages.
//!
//! **Object** (in a head's log, 8-byte aligned, never spanning a segment):
//!
//! | offset | bytes | what |
//! |---|---|---|
//! | 0 | 8 | header word: magic (bits 63..56), delete tag (48), key length (39..32), value length (15..0) |
//! | 8 | 8 | CRC-32 (Castagnoli) over the header word, the key and the value (bits 31..0); upper half 0 |
//! | 16 | k + v | key, then value (a deleted object has no value), zero-padded to 8 |
//!
//! **Bucket** (32 bytes, in a flat hash table; a key lives within `neighborhood` buckets of its
//! home bucket, and the table has `neighborhood - 1` overflow buckets so no probe wraps):
//!
//! | offset | bytes | what |
//! |---|---|---|
//! | 0 | 8 | metadata word [`Meta`]: new tag (63), offset A (62..32), offset B (31..1), reserved (0) |
//! | 8 | 8 | control word: used (63), head id (15..8), key length (7..0) |
//! | 16 | 16 | the key, zero-padded |
//!
//! The metadata word is only ever written whole (one 8-byte store by the server's CPU): with
//! new tag 1 offset A is the newest object and B the previous one; with new tag 0 it is the
//! other way round. An update flips the tag and writes the new offset over the older one.
//! Offsets count 8-byte units from the start of the key's head log; 0 means "no object".
//! The metadata word is the first word of the bucket and is stored last when a bucket is
//! filled.
//!
//! **Stripe version words** (after the mailboxes, at [`Superblock::stripe_off`]): one 8-byte
//! word per [`STRIPE_BUCKETS`] buckets, plus one. The server makes a stripe's word odd before
//! it changes any bucket's control word or key in that stripe (a fill, or a hopscotch move:
//! copy to a *later* bucket of the neighborhood, then clear the source's metadata word, then
//! its control word and key) and even again after. A reader's READ may observe the words of
//! a neighborhood in any order, so a miss is trusted only from an image read between two
//! equal, even READs of the stripe words covering it (its home's stripe and the next).
//! The words are volatile in meaning: recovery zeroes them.
use crate::LayoutError;
use crate::bits::{Field, assert_disjoint, read_u64};
use memoffset::offset_of;

/// Region-header root slot that publishes Erda's superblock.
pub const ROOT_SLOT: usize = 4;
/// Longest key (stored inline in the bucket).
pub const KEY_MAX: usize = 16;
/// Longest value (the paper evaluates 16 B to 4 KiB).
pub const VALUE_MAX: usize = 4096;
/// Bytes before the key in an object.
pub(crate) const OBJECT_HEADER: usize = 16;
/// Largest object.
pub const OBJECT_MAX: usize = OBJECT_HEADER + KEY_MAX + VALUE_MAX;
/// Magic in bits 63..56 of an object's header word.
pub(crate) const OBJECT_MAGIC: u64 = 0xE7;
/// Most head logs a store has.
pub const MAX_HEADS: usize = 8;
/// Largest offset (in 8-byte units) a metadata word holds.
pub const MAX_UNITS: u64 = (1 << 31) - 1;

// ---------------------------------------------------------------- metadata word

/// Metadata word bit 63: 1 when offset A names the newest object, 0 when offset B does.
pub(crate) const NEW_TAG: Field = Field::new("new_tag", 63, 1);
/// Metadata word bits 62..32: offset A, in 8-byte units from the head log's start (0: none).
pub(crate) const OFF_A: Field = Field::new("offset_a", 32, 31);
/// Metadata word bits 31..1: offset B, in 8-byte units from the head log's start (0: none).
pub(crate) const OFF_B: Field = Field::new("offset_b", 1, 31);
/// Metadata word bit 0: reserved, must be clear.
pub(crate) const META_RESERVED: Field = Field::new("meta_reserved", 0, 1);
const _: () = assert_disjoint(&[NEW_TAG, OFF_A, OFF_B, META_RESERVED]);
const _: () =
    assert!(NEW_TAG.mask() | OFF_A.mask() | OFF_B.mask() | META_RESERVED.mask() == u64::MAX);

/// The 8-byte atomic metadata word of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    /// Whether `a` is the newest object (else `b` is).
    pub new_tag: bool,
    /// Offset A, in 8-byte units into the key's head log (0: no object; at most [`MAX_UNITS`]).
    pub a: u32,
    /// Offset B, in 8-byte units into the key's head log (0: no object; at most [`MAX_UNITS`]).
    pub b: u32,
}

impl Meta {
    /// The empty word: no object yet.
    pub const EMPTY: Meta = Meta {
        new_tag: false,
        a: 0,
        b: 0,
    };

    /// The packed word (offsets truncated to 31 bits).
    pub const fn encode(self) -> u64 {
        let w = NEW_TAG.set(0, self.new_tag as u64);
        let w = OFF_A.set(w, self.a as u64);
        OFF_B.set(w, self.b as u64)
    }

    /// Decodes a word; the reserved bit must be clear.
    pub const fn decode(w: u64) -> Result<Meta, LayoutError> {
        if META_RESERVED.get(w) != 0 {
            return Err(LayoutError::OutOfRange {
                field: "meta_reserved",
                value: w,
            });
        }
        Ok(Meta {
            new_tag: NEW_TAG.get(w) == 1,
            a: OFF_A.get(w) as u32,
            b: OFF_B.get(w) as u32,
        })
    }

    /// Whether neither offset names an object.
    pub const fn is_empty(self) -> bool {
        self.a == 0 && self.b == 0
    }

    /// Offset of the newest object (0: none).
    pub const fn new_off(self) -> u32 {
        if self.new_tag { self.a } else { self.b }
    }

    /// Offset of the previous object (0: none).
    pub const fn old_off(self) -> u32 {
        if self.new_tag { self.b } else { self.a }
    }

    /// The word after an update to `units`: the tag flips and `units` goes into the region
    /// the new tag names (A for 1, B for 0); the previous newest becomes the old one.
    pub const fn advance(self, units: u32) -> Result<Meta, LayoutError> {
        if units == 0 || units as u64 > MAX_UNITS {
            return Err(LayoutError::OutOfRange {
                field: "offset",
                value: units as u64,
            });
        }
        if self.is_empty() {
            // First object: new tag 1, offset in A.
            return Ok(Meta {
                new_tag: true,
                a: units,
                b: 0,
            });
        }
        let tag = !self.new_tag;
        Ok(if tag {
            Meta {
                new_tag: tag,
                a: units,
                b: self.b,
            }
        } else {
            Meta {
                new_tag: tag,
                a: self.a,
                b: units,
            }
        })
    }

    /// The word with the newest object abandoned (it never became whole): the previous one
    /// is the newest again, and the only one.
    pub const fn revert(self) -> Meta {
        let old = self.old_off();
        if self.new_tag {
            Meta {
                new_tag: true,
                a: old,
                b: 0,
            }
        } else {
            Meta {
                new_tag: false,
                a: 0,
                b: old,
            }
        }
    }
}

// ---------------------------------------------------------------- bucket

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
/// A 32-byte hash bucket: metadata word, control word, inline key.
pub struct Bucket {
    /// The [`Meta`] word, encoded.
    pub meta: u64,
    /// Control word: [`USED`], [`BUCKET_HEAD`], [`BUCKET_KEY_LEN`].
    pub ctl: u64,
    /// The key, zero-padded to [`KEY_MAX`] bytes.
    pub key: [u8; KEY_MAX],
}

/// Bytes of a [`Bucket`].
pub const BUCKET_LEN: usize = 32;
const _: () = assert!(core::mem::size_of::<Bucket>() == BUCKET_LEN);
const _: () = assert!(offset_of!(Bucket, meta) == 0);
const _: () = assert!(offset_of!(Bucket, ctl) == 8);
const _: () = assert!(offset_of!(Bucket, key) == 16);
/// Byte offset of the metadata word within a bucket.
pub const BUCKET_META_OFFSET: u64 = 0;

/// Control word bit 63: the bucket holds a key.
pub(crate) const USED: Field = Field::new("used", 63, 1);
/// Control word bits 15..8: the head whose log holds the key's objects.
pub(crate) const BUCKET_HEAD: Field = Field::new("head", 8, 8);
/// Control word bits 7..0: key length in bytes (1..=[`KEY_MAX`]).
pub(crate) const BUCKET_KEY_LEN: Field = Field::new("key_len", 0, 8);
const _: () = assert_disjoint(&[USED, BUCKET_HEAD, BUCKET_KEY_LEN]);
const CTL_KNOWN: u64 = USED.mask() | BUCKET_HEAD.mask() | BUCKET_KEY_LEN.mask();

impl Bucket {
    /// A used bucket for `key` in head `head` with metadata `meta`.
    pub fn new(key: &[u8], head: u8, meta: Meta) -> Result<Bucket, LayoutError> {
        check_key(key)?;
        if head as usize >= MAX_HEADS {
            return Err(LayoutError::OutOfRange {
                field: "head",
                value: head as u64,
            });
        }
        let mut k = [0u8; KEY_MAX];
        k[..key.len()].copy_from_slice(key);
        let ctl = BUCKET_KEY_LEN.set(
            BUCKET_HEAD.set(USED.set(0, 1), head as u64),
            key.len() as u64,
        );
        Ok(Bucket {
            meta: meta.encode(),
            ctl,
            key: k,
        })
    }

    /// The bucket's 32 bytes, little-endian, in field order.
    pub fn encode(&self) -> [u8; BUCKET_LEN] {
        let mut out = [0u8; BUCKET_LEN];
        out[0..8].copy_from_slice(&self.meta.to_le_bytes());
        out[8..16].copy_from_slice(&self.ctl.to_le_bytes());
        out[16..32].copy_from_slice(&self.key);
        out
    }

    /// Decodes a bucket image (never panics). An unused bucket is all zero.
    pub fn decode(bytes: &[u8]) -> Result<Bucket, LayoutError> {
        if bytes.len() < BUCKET_LEN {
            return Err(LayoutError::Short {
                need: BUCKET_LEN,
                got: bytes.len(),
            });
        }
        let meta = read_u64(bytes, 0)?;
        let ctl = read_u64(bytes, 8)?;
        Meta::decode(meta)?;
        if ctl & !CTL_KNOWN != 0 {
            return Err(LayoutError::OutOfRange {
                field: "bucket_ctl",
                value: ctl,
            });
        }
        if BUCKET_KEY_LEN.get(ctl) as usize > KEY_MAX {
            return Err(LayoutError::OutOfRange {
                field: "key_len",
                value: BUCKET_KEY_LEN.get(ctl),
            });
        }
        if BUCKET_HEAD.get(ctl) as usize >= MAX_HEADS {
            return Err(LayoutError::OutOfRange {
                field: "head",
                value: BUCKET_HEAD.get(ctl),
            });
        }
        if USED.get(ctl) == 0 && (ctl != 0 || meta != 0) {
            return Err(LayoutError::Inconsistent {
                what: "unused bucket with contents",
            });
        }
        let mut key = [0u8; KEY_MAX];
        key.copy_from_slice(&bytes[16..32]);
        Ok(Bucket { meta, ctl, key })
    }

    /// Whether the bucket holds a key.
    pub fn is_used(&self) -> bool {
        USED.get(self.ctl) == 1
    }
    /// The head whose log holds the key's objects.
    pub fn head(&self) -> u8 {
        BUCKET_HEAD.get(self.ctl) as u8
    }
    /// The stored key (its recorded length, at most [`KEY_MAX`] bytes).
    pub fn key(&self) -> &[u8] {
        &self.key[..(BUCKET_KEY_LEN.get(self.ctl) as usize).min(KEY_MAX)]
    }
    /// Whether the bucket is used and holds exactly `key`.
    pub fn holds(&self, key: &[u8]) -> bool {
        self.is_used() && self.key() == key
    }
    /// The metadata word (validated by [`Bucket::decode`]).
    pub fn meta(&self) -> Meta {
        Meta::decode(self.meta).unwrap_or(Meta::EMPTY)
    }
}

/// Keys are 1..=KEY_MAX bytes.
pub fn check_key(key: &[u8]) -> Result<(), LayoutError> {
    if key.is_empty() || key.len() > KEY_MAX {
        return Err(LayoutError::OutOfRange {
            field: "key_len",
            value: key.len() as u64,
        });
    }
    Ok(())
}

/// The hash both sides use to place a key (FNV-1a, then a 64-bit finalizer).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

// ---------------------------------------------------------------- superblock

/// `b"ERDA0001"` as a little-endian u64.
pub const SUPERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"ERDA0001");
/// Version 2 added the stripe version words after the mailboxes; version 3 the head state
/// words after those (log regions and cleaning, [`HeadState`]).
pub const SUPERBLOCK_VERSION: u32 = 3;

/// Buckets per stripe version word (at least the largest neighborhood, 64, so a key's
/// neighborhood lies in two consecutive stripes).
pub const STRIPE_BUCKETS: u64 = 64;
const _: () = assert!(
    STRIPE_BUCKETS >= 64,
    "a neighborhood must fit in two stripes"
);

/// Where everything of one store lives in the memory node's region (offsets are host-region
/// offsets). Written once by the server at format time, then read-only.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Must equal [`SUPERBLOCK_MAGIC`].
    pub magic: u64,
    /// Must equal [`SUPERBLOCK_VERSION`].
    pub version: u32,
    /// Head logs in use (1..=[`MAX_HEADS`]).
    pub heads: u32,
    /// Buckets in the table, the `neighborhood - 1` overflow buckets included.
    pub buckets: u64,
    /// Buckets a key may be placed from its home bucket (hopscotch neighborhood).
    pub neighborhood: u32,
    /// Request mailboxes (one per client id).
    pub max_clients: u32,
    /// Region offset of bucket 0.
    pub table_off: u64,
    /// Region offset of client 0's request mailbox.
    pub mailbox_off: u64,
    /// Bytes of a log segment (objects never span one).
    pub segment_bytes: u64,
    /// Bytes of each head's log (a whole number of segments).
    pub head_bytes: u64,
    /// Start of each head's log (0 for heads past `heads`).
    pub head_base: [u64; MAX_HEADS],
}

/// Bytes of an encoded [`Superblock`].
pub const SUPERBLOCK_LEN: usize = 128;
const _: () = assert!(core::mem::size_of::<Superblock>() == SUPERBLOCK_LEN);
const _: () = assert!(offset_of!(Superblock, version) == 8);
const _: () = assert!(offset_of!(Superblock, heads) == 12);
const _: () = assert!(offset_of!(Superblock, buckets) == 16);
const _: () = assert!(offset_of!(Superblock, neighborhood) == 24);
const _: () = assert!(offset_of!(Superblock, max_clients) == 28);
const _: () = assert!(offset_of!(Superblock, table_off) == 32);
const _: () = assert!(offset_of!(Superblock, mailbox_off) == 40);
const _: () = assert!(offset_of!(Superblock, segment_bytes) == 48);
const _: () = assert!(offset_of!(Superblock, head_bytes) == 56);
const _: () = assert!(offset_of!(Superblock, head_base) == 64);

/// Bytes of one request mailbox.
pub const MAILBOX_LEN: usize = 32;

impl Superblock {
    /// Buckets a key may be placed in (home buckets).
    pub fn home_buckets(&self) -> u64 {
        self.buckets - (self.neighborhood as u64 - 1)
    }
    /// Home bucket index of `key`.
    pub fn home(&self, key: &[u8]) -> u64 {
        key_hash(key) % self.home_buckets()
    }
    /// Region offset of bucket `i`.
    pub fn bucket_off(&self, i: u64) -> u64 {
        self.table_off + i * BUCKET_LEN as u64
    }
    /// Region offset of client `client`'s request mailbox.
    pub fn mailbox(&self, client: u32) -> u64 {
        self.mailbox_off + client as u64 * MAILBOX_LEN as u64
    }
    /// Region offset of `units` in head `head`'s log.
    pub fn object_off(&self, head: u8, units: u32) -> Result<u64, LayoutError> {
        if head as u32 >= self.heads || units == 0 || units as u64 * 8 >= self.head_bytes {
            return Err(LayoutError::OutOfRange {
                field: "object_offset",
                value: units as u64,
            });
        }
        Ok(self.head_base[head as usize] + units as u64 * 8)
    }
    /// Stripe version words: one per [`STRIPE_BUCKETS`] buckets, plus one so that the two
    /// words a reader fetches (its home's stripe and the next) always exist.
    pub fn stripes(&self) -> u64 {
        self.buckets.div_ceil(STRIPE_BUCKETS) + 1
    }
    /// Region offset of the stripe version words (right after the mailboxes; derived, not
    /// stored).
    pub fn stripe_off(&self) -> u64 {
        self.mailbox_off + self.max_clients as u64 * MAILBOX_LEN as u64
    }
    /// The stripe of bucket `i`.
    pub fn stripe_of(&self, i: u64) -> u64 {
        i / STRIPE_BUCKETS
    }
    /// Region offset of stripe `s`'s version word.
    pub fn stripe_word_off(&self, s: u64) -> u64 {
        self.stripe_off() + s * 8
    }
    /// Region offset of head `head`'s state word ([`HeadState`]): [`MAX_HEADS`] words right
    /// after the stripe version words (derived, not stored).
    pub fn head_state_off(&self, head: u8) -> u64 {
        self.stripe_off() + self.stripes() * 8 + head as u64 * 8
    }
    /// Bytes of head `head`'s log from `units` to its end.
    pub fn head_remaining(&self, units: u32) -> u64 {
        self.head_bytes.saturating_sub(units as u64 * 8)
    }

    /// The superblock's 128 bytes, little-endian, in field order.
    pub fn encode(&self) -> [u8; SUPERBLOCK_LEN] {
        let mut out = [0u8; SUPERBLOCK_LEN];
        let mut put = |at: usize, b: &[u8]| out[at..at + b.len()].copy_from_slice(b);
        put(0, &self.magic.to_le_bytes());
        put(8, &self.version.to_le_bytes());
        put(12, &self.heads.to_le_bytes());
        put(16, &self.buckets.to_le_bytes());
        put(24, &self.neighborhood.to_le_bytes());
        put(28, &self.max_clients.to_le_bytes());
        put(32, &self.table_off.to_le_bytes());
        put(40, &self.mailbox_off.to_le_bytes());
        put(48, &self.segment_bytes.to_le_bytes());
        put(56, &self.head_bytes.to_le_bytes());
        for (i, b) in self.head_base.iter().enumerate() {
            put(64 + 8 * i, &b.to_le_bytes());
        }
        out
    }

    /// Decodes and validates (never panics); `region_len` bounds every area.
    pub fn decode(bytes: &[u8], region_len: u64) -> Result<Superblock, LayoutError> {
        if bytes.len() < SUPERBLOCK_LEN {
            return Err(LayoutError::Short {
                need: SUPERBLOCK_LEN,
                got: bytes.len(),
            });
        }
        let magic = read_u64(bytes, 0)?;
        if magic != SUPERBLOCK_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: SUPERBLOCK_MAGIC,
                found: magic,
            });
        }
        let word = |at| read_u64(bytes, at);
        let half = |at| crate::bits::read_u32(bytes, at);
        let mut head_base = [0u64; MAX_HEADS];
        for (i, b) in head_base.iter_mut().enumerate() {
            *b = word(64 + 8 * i)?;
        }
        let sb = Superblock {
            magic,
            version: half(8)?,
            heads: half(12)?,
            buckets: word(16)?,
            neighborhood: half(24)?,
            max_clients: half(28)?,
            table_off: word(32)?,
            mailbox_off: word(40)?,
            segment_bytes: word(48)?,
            head_bytes: word(56)?,
            head_base,
        };
        sb.validate(region_len)?;
        Ok(sb)
    }

    /// Checks that the geometry is usable and every area lies in a region of `region_len`.
    pub fn validate(&self, region_len: u64) -> Result<(), LayoutError> {
        let bad = |field, value| Err(LayoutError::OutOfRange { field, value });
        if self.version != SUPERBLOCK_VERSION {
            return Err(LayoutError::BadVersion {
                found: self.version,
            });
        }
        if self.heads == 0 || self.heads as usize > MAX_HEADS {
            return bad("heads", self.heads as u64);
        }
        if !(1..=64).contains(&self.neighborhood) {
            return bad("neighborhood", self.neighborhood as u64);
        }
        if self.buckets < self.neighborhood as u64 || self.buckets > region_len {
            return bad("buckets", self.buckets);
        }
        if self.max_clients == 0 || self.max_clients > 1 << 20 {
            return bad("max_clients", self.max_clients as u64);
        }
        let seg_ok =
            self.segment_bytes.is_power_of_two() && self.segment_bytes >= OBJECT_MAX as u64 + 64;
        if !seg_ok {
            return bad("segment_bytes", self.segment_bytes);
        }
        if self.head_bytes == 0
            || !self.head_bytes.is_multiple_of(self.segment_bytes)
            || self.head_bytes / 8 > MAX_UNITS
        {
            return bad("head_bytes", self.head_bytes);
        }
        let inside = |off: u64, len: u64| {
            off.is_multiple_of(8)
                && off > 0
                && off.checked_add(len).is_some_and(|e| e <= region_len)
        };
        // `buckets <= region_len` was checked above, but region_len itself may be anything a
        // caller passes: multiply without overflowing.
        let table_len = self.buckets.saturating_mul(BUCKET_LEN as u64);
        if !inside(self.table_off, table_len) {
            return bad("table_off", self.table_off);
        }
        if !inside(
            self.mailbox_off,
            self.max_clients as u64 * MAILBOX_LEN as u64,
        ) {
            return bad("mailbox_off", self.mailbox_off);
        }
        if !inside(self.stripe_off(), self.stripes() * 8 + MAX_HEADS as u64 * 8) {
            return bad("stripes", self.stripes());
        }
        for (i, &b) in self.head_base.iter().enumerate() {
            if (i as u32) < self.heads {
                if !inside(b, self.head_bytes) {
                    return bad("head_base", b);
                }
            } else if b != 0 {
                return bad("head_base", b);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- head state

/// Head state bits 31..0: cleaning starts and ends (odd while cleaning).
pub(crate) const HS_EPOCH: Field = Field::new("epoch", 0, 32);
/// Head state bits 35..32: first region of the live run.
pub(crate) const HS_FIRST: Field = Field::new("first", 32, 4);
/// Head state bits 39..36: regions in the live run.
pub(crate) const HS_LEN: Field = Field::new("len", 36, 4);
/// Head state bits 43..40: regions at the front of the run being cleaned.
pub(crate) const HS_SRC: Field = Field::new("src", 40, 4);
/// Head state bits 47..44: regions the head's log is divided into.
pub(crate) const HS_REGIONS: Field = Field::new("regions", 44, 4);
const _: () = assert_disjoint(&[HS_EPOCH, HS_FIRST, HS_LEN, HS_SRC, HS_REGIONS]);
const HS_KNOWN: u64 =
    HS_EPOCH.mask() | HS_FIRST.mask() | HS_LEN.mask() | HS_SRC.mask() | HS_REGIONS.mask();
/// Most regions a head's log is divided into.
pub const MAX_REGIONS: u8 = 8;

/// A head's state word (8 bytes, written whole by the server's CPU and persisted; clients
/// read it one-sidedly). A head's log is `regions` equal regions used as a ring: the live
/// run is `len` regions from `first` (appends go to its last one; a full one chains the next
/// free region). While the head is being cleaned, the run's first `src` regions are being
/// emptied into the rest. `epoch` counts cleaning starts and ends (odd: cleaning): a reader
/// that saw the same epoch before reading a metadata word and after reading the object it
/// names knows no region was reused in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadState {
    /// Cleaning starts and ends so far (odd: cleaning under way).
    pub epoch: u32,
    /// First region of the live run.
    pub first: u8,
    /// Regions in the live run.
    pub len: u8,
    /// Regions at the front of the run being emptied by cleaning (0 when not cleaning).
    pub src: u8,
    /// Regions the log is divided into (1..=[`MAX_REGIONS`]).
    pub regions: u8,
}

impl HeadState {
    /// The packed state word.
    pub const fn encode(self) -> u64 {
        let w = HS_EPOCH.set(0, self.epoch as u64);
        let w = HS_FIRST.set(w, self.first as u64);
        let w = HS_LEN.set(w, self.len as u64);
        let w = HS_SRC.set(w, self.src as u64);
        HS_REGIONS.set(w, self.regions as u64)
    }
    /// Decodes and checks a state word (never panics).
    pub const fn decode(w: u64) -> Result<HeadState, LayoutError> {
        let s = HeadState {
            epoch: HS_EPOCH.get(w) as u32,
            first: HS_FIRST.get(w) as u8,
            len: HS_LEN.get(w) as u8,
            src: HS_SRC.get(w) as u8,
            regions: HS_REGIONS.get(w) as u8,
        };
        if w & !HS_KNOWN != 0
            || s.regions == 0
            || s.regions > MAX_REGIONS
            || s.first >= s.regions
            || s.len == 0
            || s.len > s.regions
            || s.src >= s.len
            || (s.src > 0) != (s.epoch % 2 == 1)
        {
            return Err(LayoutError::OutOfRange {
                field: "head_state",
                value: w,
            });
        }
        Ok(s)
    }
    /// Whether the head is being cleaned.
    pub const fn cleaning(self) -> bool {
        self.src > 0
    }
    /// The ring index of the `i`-th region of the run.
    pub const fn nth(self, i: u8) -> u8 {
        (self.first + i) % self.regions
    }
    /// Whether ring region `r` is in the run's first `n` regions.
    pub const fn in_first(self, r: u8, n: u8) -> bool {
        (r + self.regions - self.first) % self.regions < n
    }
}

// ---------------------------------------------------------------- messages

mod messages;
mod object;
pub use messages::*;
pub use object::*;

/// Bytes after each client-written object for its durable mark.
pub const DURABLE_MARK_LEN: usize = 8;

/// The word a writer stores right after its object at `units` once the object is durable
/// (its WRITE was flushed by a READ on the same queue pair): the server counts the grant
/// finished when it finds it. Never zero, and different for every slot.
pub const fn durable_mark(units: u32) -> u64 {
    0xD0AB_1E00_0000_0000 | units as u64
}

#[cfg(test)]
mod tests;

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
pub const OBJECT_HEADER: usize = 16;
/// Largest object.
pub const OBJECT_MAX: usize = OBJECT_HEADER + KEY_MAX + VALUE_MAX;
pub const OBJECT_MAGIC: u64 = 0xE7;
/// Most head logs a store has.
pub const MAX_HEADS: usize = 8;
/// Largest offset (in 8-byte units) a metadata word holds.
pub const MAX_UNITS: u64 = (1 << 31) - 1;

/// Slice-by-16 tables (16 KiB, in a static: built at compile time, never copied).
static CRC32: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

// ---------------------------------------------------------------- metadata word

pub const NEW_TAG: Field = Field::new("new_tag", 63, 1);
pub const OFF_A: Field = Field::new("offset_a", 32, 31);
pub const OFF_B: Field = Field::new("offset_b", 1, 31);
pub const META_RESERVED: Field = Field::new("meta_reserved", 0, 1);
const _: () = assert_disjoint(&[NEW_TAG, OFF_A, OFF_B, META_RESERVED]);
const _: () =
    assert!(NEW_TAG.mask() | OFF_A.mask() | OFF_B.mask() | META_RESERVED.mask() == u64::MAX);

/// The 8-byte atomic metadata word of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    pub new_tag: bool,
    pub a: u32,
    pub b: u32,
}

impl Meta {
    /// The empty word: no object yet.
    pub const EMPTY: Meta = Meta {
        new_tag: false,
        a: 0,
        b: 0,
    };

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
pub struct Bucket {
    pub meta: u64,
    pub ctl: u64,
    pub key: [u8; KEY_MAX],
}

pub const BUCKET_LEN: usize = 32;
const _: () = assert!(core::mem::size_of::<Bucket>() == BUCKET_LEN);
const _: () = assert!(offset_of!(Bucket, meta) == 0);
const _: () = assert!(offset_of!(Bucket, ctl) == 8);
const _: () = assert!(offset_of!(Bucket, key) == 16);
pub const BUCKET_META_OFFSET: u64 = 0;

pub const USED: Field = Field::new("used", 63, 1);
pub const BUCKET_HEAD: Field = Field::new("head", 8, 8);
pub const BUCKET_KEY_LEN: Field = Field::new("key_len", 0, 8);
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

    pub fn is_used(&self) -> bool {
        USED.get(self.ctl) == 1
    }
    pub fn head(&self) -> u8 {
        BUCKET_HEAD.get(self.ctl) as u8
    }
    pub fn key(&self) -> &[u8] {
        &self.key[..(BUCKET_KEY_LEN.get(self.ctl) as usize).min(KEY_MAX)]
    }
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
pub fn key_hash(key: &[u8]) -> u64 {
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

// ---------------------------------------------------------------- object

pub const OBJ_MAGIC: Field = Field::new("obj_magic", 56, 8);
pub const OBJ_DELETE: Field = Field::new("delete", 48, 1);
pub const OBJ_KEY_LEN: Field = Field::new("key_len", 32, 8);
pub const OBJ_VALUE_LEN: Field = Field::new("value_len", 0, 16);
const _: () = assert_disjoint(&[OBJ_MAGIC, OBJ_DELETE, OBJ_KEY_LEN, OBJ_VALUE_LEN]);
const OBJ_KNOWN: u64 =
    OBJ_MAGIC.mask() | OBJ_DELETE.mask() | OBJ_KEY_LEN.mask() | OBJ_VALUE_LEN.mask();

/// Bytes an object with these lengths takes in the log (a multiple of 8).
pub const fn object_len(key_len: usize, value_len: usize) -> usize {
    (OBJECT_HEADER + key_len + value_len).next_multiple_of(8)
}

/// An object checksum: CRC-32C over `header` then `body` (a caller may bring a hardware
/// implementation; every implementation must give [`object_crc_sw`]'s value).
pub type ObjectChecksum = fn(header: &[u8], body: &[u8]) -> u32;

/// Writes an object into `out`; returns its length. `value` is ignored for a deletion.
pub fn encode_object(
    out: &mut [u8],
    key: &[u8],
    value: &[u8],
    delete: bool,
) -> Result<usize, LayoutError> {
    encode_object_with(out, key, value, delete, object_crc_sw)
}

/// [`encode_object`] with the checksum computed by `crc`.
pub fn encode_object_with(
    out: &mut [u8],
    key: &[u8],
    value: &[u8],
    delete: bool,
    crc: ObjectChecksum,
) -> Result<usize, LayoutError> {
    check_key(key)?;
    let value = if delete { &[][..] } else { value };
    if value.len() > VALUE_MAX {
        return Err(LayoutError::OutOfRange {
            field: "value_len",
            value: value.len() as u64,
        });
    }
    let len = object_len(key.len(), value.len());
    if out.len() < len {
        return Err(LayoutError::Short {
            need: len,
            got: out.len(),
        });
    }
    let hdr = OBJ_MAGIC.set(0, OBJECT_MAGIC);
    let hdr = OBJ_DELETE.set(hdr, delete as u64);
    let hdr = OBJ_KEY_LEN.set(hdr, key.len() as u64);
    let hdr = OBJ_VALUE_LEN.set(hdr, value.len() as u64);
    out[..len].fill(0);
    out[0..8].copy_from_slice(&hdr.to_le_bytes());
    let k = OBJECT_HEADER + key.len();
    out[OBJECT_HEADER..k].copy_from_slice(key);
    out[k..k + value.len()].copy_from_slice(value);
    let sum = crc(&out[0..8], &out[OBJECT_HEADER..k + value.len()]);
    out[8..16].copy_from_slice(&(sum as u64).to_le_bytes());
    Ok(len)
}

/// The object checksum in software (table-driven CRC-32C, no_std).
#[inline]
pub fn object_crc_sw(header: &[u8], body: &[u8]) -> u32 {
    let mut d = CRC32.digest();
    d.update(header);
    d.update(body);
    d.finalize()
}

/// A whole, checksum-verified object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRef<'a> {
    pub delete: bool,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// Bytes the object takes in the log.
    pub len: usize,
}

/// What an object's header says about its size, before the body is checked: lets a reader
/// that fetched too few bytes fetch the rest. Errors on a header that is not an object's.
pub fn object_len_from_header(bytes: &[u8]) -> Result<usize, LayoutError> {
    let hdr = read_u64(bytes, 0)?;
    if OBJ_MAGIC.get(hdr) != OBJECT_MAGIC {
        return Err(LayoutError::BadMagic {
            expected: OBJECT_MAGIC,
            found: OBJ_MAGIC.get(hdr),
        });
    }
    if hdr & !OBJ_KNOWN != 0 {
        return Err(LayoutError::OutOfRange {
            field: "object_header",
            value: hdr,
        });
    }
    let k = OBJ_KEY_LEN.get(hdr) as usize;
    let v = OBJ_VALUE_LEN.get(hdr) as usize;
    if k == 0 || k > KEY_MAX || v > VALUE_MAX || (OBJ_DELETE.get(hdr) == 1 && v != 0) {
        return Err(LayoutError::Inconsistent {
            what: "object lengths",
        });
    }
    Ok(object_len(k, v))
}

/// Decodes and verifies an object (a torn, unfinished or foreign one is an error).
pub fn decode_object(bytes: &[u8]) -> Result<ObjectRef<'_>, LayoutError> {
    decode_object_with(bytes, object_crc_sw)
}

/// [`decode_object`] with the checksum computed by `crc`.
pub fn decode_object_with(bytes: &[u8], crc: ObjectChecksum) -> Result<ObjectRef<'_>, LayoutError> {
    let len = object_len_from_header(bytes)?;
    if bytes.len() < len {
        return Err(LayoutError::Short {
            need: len,
            got: bytes.len(),
        });
    }
    let hdr = read_u64(bytes, 0)?;
    let k = OBJ_KEY_LEN.get(hdr) as usize;
    let v = OBJ_VALUE_LEN.get(hdr) as usize;
    let stored = read_u64(bytes, 8)?;
    let end = OBJECT_HEADER + k + v;
    let computed = crc(&bytes[0..8], &bytes[OBJECT_HEADER..end]);
    if stored != computed as u64 || bytes[end..len].iter().any(|&b| b != 0) {
        return Err(LayoutError::BadChecksum {
            stored,
            computed: computed as u64,
        });
    }
    Ok(ObjectRef {
        delete: OBJ_DELETE.get(hdr) == 1,
        key: &bytes[OBJECT_HEADER..OBJECT_HEADER + k],
        value: &bytes[OBJECT_HEADER + k..end],
        len,
    })
}

// ---------------------------------------------------------------- superblock

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
    pub magic: u64,
    pub version: u32,
    pub heads: u32,
    /// Buckets in the table, the `neighborhood - 1` overflow buckets included.
    pub buckets: u64,
    pub neighborhood: u32,
    /// Request mailboxes (one per client id).
    pub max_clients: u32,
    pub table_off: u64,
    pub mailbox_off: u64,
    pub segment_bytes: u64,
    /// Bytes of each head's log (a whole number of segments).
    pub head_bytes: u64,
    /// Start of each head's log (0 for heads past `heads`).
    pub head_base: [u64; MAX_HEADS],
}

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
    pub fn home(&self, key: &[u8]) -> u64 {
        key_hash(key) % self.home_buckets()
    }
    pub fn bucket_off(&self, i: u64) -> u64 {
        self.table_off + i * BUCKET_LEN as u64
    }
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

pub const HS_EPOCH: Field = Field::new("epoch", 0, 32);
pub const HS_FIRST: Field = Field::new("first", 32, 4);
pub const HS_LEN: Field = Field::new("len", 36, 4);
pub const HS_SRC: Field = Field::new("src", 40, 4);
pub const HS_REGIONS: Field = Field::new("regions", 44, 4);
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
    pub epoch: u32,
    pub first: u8,
    pub len: u8,
    pub src: u8,
    pub regions: u8,
}

impl HeadState {
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

/// What a client asks the server for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqOp {
    /// Insert or overwrite: always granted (unless full).
    Upsert = 1,
    /// Overwrite: granted only if the key is present.
    Update = 2,
    /// Append a deleted object: granted only if the key is present. The server writes the
    /// deleted object itself before it grants (the client writes nothing).
    Delete = 3,
    /// A read through the server (the SEND path, used while the key's head is being
    /// cleaned): answered [`Status::Located`] with the newest whole object, or `Absent`.
    Get = 4,
}

impl ReqOp {
    pub const fn from_u8(b: u8) -> Result<ReqOp, LayoutError> {
        match b {
            1 => Ok(ReqOp::Upsert),
            2 => Ok(ReqOp::Update),
            3 => Ok(ReqOp::Delete),
            4 => Ok(ReqOp::Get),
            _ => Err(LayoutError::OutOfRange {
                field: "request_op",
                value: b as u64,
            }),
        }
    }
}

pub const REQ_OP: Field = Field::new("op", 0, 8);
pub const REQ_KEY_LEN: Field = Field::new("key_len", 8, 8);
pub const REQ_VALUE_LEN: Field = Field::new("value_len", 16, 16);
pub const REQ_SEQ: Field = Field::new("seq", 32, 32);
const _: () = assert_disjoint(&[REQ_OP, REQ_KEY_LEN, REQ_VALUE_LEN, REQ_SEQ]);

/// A write request, written into the client's mailbox by WRITE_WITH_IMM (immediate = the
/// client id): `[word: op, key length, value length, sequence][key, 16 bytes]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub op: ReqOp,
    pub seq: u32,
    pub value_len: u16,
    pub key_len: u8,
    pub key: [u8; KEY_MAX],
    /// Offset (units) of an earlier grant of this key that the requester found in flight
    /// past its lease and has fenced the writer of (0: none): the server settles that grant
    /// (keeps its object if whole, else reverts it) before handling this request.
    pub revoke: u32,
}

pub const REQUEST_LEN: usize = 32;
const _: () = assert!(REQUEST_LEN <= MAILBOX_LEN);

impl Request {
    pub fn new(op: ReqOp, seq: u32, key: &[u8], value_len: usize) -> Result<Request, LayoutError> {
        check_key(key)?;
        if value_len > VALUE_MAX {
            return Err(LayoutError::OutOfRange {
                field: "value_len",
                value: value_len as u64,
            });
        }
        let mut k = [0u8; KEY_MAX];
        k[..key.len()].copy_from_slice(key);
        Ok(Request {
            op,
            seq,
            value_len: value_len as u16,
            key_len: key.len() as u8,
            key: k,
            revoke: 0,
        })
    }
    /// The same request, naming a fenced writer's grant at `units` to settle first.
    pub fn with_revoke(mut self, units: u32) -> Request {
        self.revoke = units & MAX_UNITS as u32;
        self
    }
    pub fn key(&self) -> &[u8] {
        &self.key[..(self.key_len as usize).min(KEY_MAX)]
    }
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let w = REQ_OP.set(0, self.op as u64);
        let w = REQ_KEY_LEN.set(w, self.key_len as u64);
        let w = REQ_VALUE_LEN.set(w, self.value_len as u64);
        let w = REQ_SEQ.set(w, self.seq as u64);
        let mut out = [0u8; REQUEST_LEN];
        out[..8].copy_from_slice(&w.to_le_bytes());
        out[8..24].copy_from_slice(&self.key);
        out[24..32].copy_from_slice(&(self.revoke as u64).to_le_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Request, LayoutError> {
        let w = read_u64(bytes, 0)?;
        if bytes.len() < REQUEST_LEN {
            return Err(LayoutError::Short {
                need: REQUEST_LEN,
                got: bytes.len(),
            });
        }
        let op = ReqOp::from_u8(REQ_OP.get(w) as u8)?;
        let key_len = REQ_KEY_LEN.get(w) as usize;
        let value_len = REQ_VALUE_LEN.get(w) as usize;
        let mut key = [0u8; KEY_MAX];
        key.copy_from_slice(&bytes[8..24]);
        let revoke = read_u64(bytes, 24)?;
        if revoke > MAX_UNITS {
            return Err(LayoutError::OutOfRange {
                field: "revoke",
                value: revoke,
            });
        }
        if key_len == 0 || key_len > KEY_MAX || key[key_len..].iter().any(|&b| b != 0) {
            return Err(LayoutError::OutOfRange {
                field: "key_len",
                value: key_len as u64,
            });
        }
        if value_len > VALUE_MAX || (matches!(op, ReqOp::Delete | ReqOp::Get) && value_len != 0) {
            return Err(LayoutError::OutOfRange {
                field: "value_len",
                value: value_len as u64,
            });
        }
        Ok(Request {
            op,
            seq: REQ_SEQ.get(w) as u32,
            value_len: value_len as u16,
            key_len: key_len as u8,
            key,
            revoke: revoke as u32,
        })
    }
}

/// The server's answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Space granted at (head, units): the client writes its object there (for a delete,
    /// the server already wrote the deleted object there).
    Granted = 1,
    /// Update/delete of an absent key: nothing to write.
    Absent = 2,
    /// No free bucket in the key's neighborhood.
    TableFull = 3,
    /// The key's head log has no space left.
    LogFull = 4,
    /// The request did not decode, or came on another client's mailbox.
    BadRequest = 5,
    /// Hello answered: `units` carries the superblock offset, `head` unused.
    Welcome = 6,
    /// No mailbox left for a new client.
    TooManyClients = 7,
    /// Another write of this key is granted and not yet durable: `head` and the low 32 bits
    /// of `arg` name that grant (head, units), the high 32 bits its writer's fabric client
    /// id. Ask again after a back-off; past a lease, fence the writer and name the grant in
    /// [`Request::revoke`].
    Busy = 8,
    /// A hello on a connection that already has an open session (another handle on the
    /// same endpoint): handles share one connection's receive queue, so a second one would
    /// take the first one's replies. Share the open handle among coroutines, or close it.
    SessionOpen = 9,
    /// A goodbye answered: the session's mailboxes are free.
    Closed = 10,
    /// A [`ReqOp::Get`] answered: the key's newest whole object is at (`head`, low 32 bits
    /// of `arg`); the high 32 bits carry the head's state word epoch it was resolved under.
    Located = 11,
}

impl Status {
    pub const fn from_u8(b: u8) -> Result<Status, LayoutError> {
        Ok(match b {
            1 => Status::Granted,
            2 => Status::Absent,
            3 => Status::TableFull,
            4 => Status::LogFull,
            5 => Status::BadRequest,
            6 => Status::Welcome,
            7 => Status::TooManyClients,
            8 => Status::Busy,
            9 => Status::SessionOpen,
            10 => Status::Closed,
            11 => Status::Located,
            _ => {
                return Err(LayoutError::OutOfRange {
                    field: "status",
                    value: b as u64,
                });
            }
        })
    }
}

pub const REP_STATUS: Field = Field::new("status", 0, 8);
pub const REP_HEAD: Field = Field::new("head", 8, 8);
pub const REP_AUX: Field = Field::new("aux", 16, 16);
pub const REP_SEQ: Field = Field::new("seq", 32, 32);
const _: () = assert_disjoint(&[REP_STATUS, REP_HEAD, REP_AUX, REP_SEQ]);

/// The server's SEND back: `[word: status, head, aux, sequence][u64: units or superblock
/// offset]`. For a hello, `seq` carries the client id granted. For `Busy`, `aux` is the
/// length of the grant in flight's object in 8-byte units (its durable mark follows it), so
/// the waiter can watch for the mark with one-sided READs instead of asking the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub status: Status,
    pub head: u8,
    pub seq: u32,
    pub arg: u64,
    pub aux: u16,
}

pub const REPLY_LEN: usize = 16;

impl Reply {
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let w = REP_STATUS.set(0, self.status as u64);
        let w = REP_HEAD.set(w, self.head as u64);
        let w = REP_AUX.set(w, self.aux as u64);
        let w = REP_SEQ.set(w, self.seq as u64);
        let mut out = [0u8; REPLY_LEN];
        out[..8].copy_from_slice(&w.to_le_bytes());
        out[8..].copy_from_slice(&self.arg.to_le_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Reply, LayoutError> {
        if bytes.len() != REPLY_LEN {
            return Err(LayoutError::Short {
                need: REPLY_LEN,
                got: bytes.len(),
            });
        }
        let w = read_u64(bytes, 0)?;
        if w & !(REP_STATUS.mask() | REP_HEAD.mask() | REP_AUX.mask() | REP_SEQ.mask()) != 0 {
            return Err(LayoutError::OutOfRange {
                field: "reply",
                value: w,
            });
        }
        Ok(Reply {
            status: Status::from_u8(REP_STATUS.get(w) as u8)?,
            head: REP_HEAD.get(w) as u8,
            seq: REP_SEQ.get(w) as u32,
            arg: read_u64(bytes, 8)?,
            aux: REP_AUX.get(w) as u16,
        })
    }
}

/// The SEND a client opens a session with.
pub const HELLO: [u8; 8] = *b"ERDAHELO";

/// Bytes of a hello that names the client's fabric client id (little-endian u32 after
/// [`HELLO`]), which the server quotes to writers waiting on this client's grants.
pub const HELLO_LEN: usize = 12;

/// The hello of the client whose fabric client id is `id`.
pub fn hello(id: u32) -> [u8; HELLO_LEN] {
    let mut m = [0u8; HELLO_LEN];
    m[..8].copy_from_slice(&HELLO);
    m[8..].copy_from_slice(&id.to_le_bytes());
    m
}

/// The fabric client id a hello names (0, "unknown", for a bare [`HELLO`]); `None` if `msg`
/// is not a hello.
pub fn decode_hello(msg: &[u8]) -> Option<u32> {
    match msg.len() {
        8 if msg == HELLO => Some(0),
        HELLO_LEN if msg[..8] == HELLO => msg[8..].try_into().ok().map(u32::from_le_bytes),
        _ => None,
    }
}

/// Bytes of a hello that also asks for `slots` request mailboxes (little-endian u32 after
/// the fabric client id): one per request a handle keeps in flight at once.
pub const HELLO_SLOTS_LEN: usize = 16;

/// The hello of fabric client `id` asking for `slots` request mailboxes.
pub fn hello_slots(id: u32, slots: u32) -> [u8; HELLO_SLOTS_LEN] {
    let mut m = [0u8; HELLO_SLOTS_LEN];
    m[..HELLO_LEN].copy_from_slice(&hello(id));
    m[HELLO_LEN..].copy_from_slice(&slots.to_le_bytes());
    m
}

/// The fabric client id and mailbox count a hello asks for (a hello without a count asks
/// for one); `None` if `msg` is not a hello.
pub fn decode_hello_slots(msg: &[u8]) -> Option<(u32, u32)> {
    if msg.len() == HELLO_SLOTS_LEN && msg[..8] == HELLO {
        let id = u32::from_le_bytes(msg[8..12].try_into().ok()?);
        let slots = u32::from_le_bytes(msg[12..16].try_into().ok()?);
        return Some((id, slots.max(1)));
    }
    decode_hello(msg).map(|id| (id, 1))
}

/// The SEND that ends a session (its mailboxes are freed; answered [`Status::Closed`]).
pub const GOODBYE: [u8; 8] = *b"ERDABYE!";

/// Bytes after each client-written object for its durable mark.
pub const DURABLE_MARK_LEN: usize = 8;

/// The word a writer stores right after its object at `units` once the object is durable
/// (its WRITE was flushed by a READ on the same queue pair): the server counts the grant
/// finished when it finds it. Never zero, and different for every slot.
pub const fn durable_mark(units: u32) -> u64 {
    0xD0AB_1E00_0000_0000 | units as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn meta_flips_between_the_two_offsets() {
        let m = Meta::EMPTY.advance(5).unwrap();
        assert_eq!((m.new_tag, m.new_off(), m.old_off()), (true, 5, 0));
        let m = m.advance(9).unwrap();
        // Tag 0: the new offset goes to B, A keeps the previous one.
        assert_eq!((m.new_tag, m.a, m.b), (false, 5, 9));
        assert_eq!((m.new_off(), m.old_off()), (9, 5));
        let m = m.advance(12).unwrap();
        assert_eq!((m.new_tag, m.a, m.b), (true, 12, 9));
        assert_eq!(m.revert().new_off(), 9);
        assert_eq!(m.revert().old_off(), 0);
        assert_eq!(Meta::decode(m.encode()), Ok(m));
        assert_eq!(m.encode() & 1, 0);
        assert!(Meta::decode(1).is_err());
        assert!(m.advance(0).is_err());
        assert!(m.advance(1 << 31).is_err());
        assert_eq!(
            Meta {
                new_tag: true,
                a: MAX_UNITS as u32,
                b: 1
            }
            .encode(),
            1 << 63 | MAX_UNITS << 32 | 1 << 1
        );
    }

    #[test]
    fn objects_round_trip_and_tearing_is_caught() {
        let mut buf = [0u8; OBJECT_MAX];
        let n = encode_object(&mut buf, b"key1", &[7u8; 13], false).unwrap();
        assert_eq!(n, object_len(4, 13));
        assert_eq!(n % 8, 0);
        let o = decode_object(&buf[..n]).unwrap();
        assert_eq!(
            (o.delete, o.key, o.value, o.len),
            (false, &b"key1"[..], &[7u8; 13][..], n)
        );
        for word in 0..n / 8 {
            let mut torn = buf;
            torn[word * 8] ^= 0x10;
            assert!(decode_object(&torn[..n]).is_err(), "flip in word {word}");
        }
        assert!(decode_object(&buf[..n - 8]).is_err());
        assert!(decode_object(&[0u8; 64]).is_err(), "unwritten log space");
        let n = encode_object(&mut buf, b"k", b"ignored", true).unwrap();
        let o = decode_object(&buf[..n]).unwrap();
        assert!(o.delete && o.value.is_empty());
        assert!(encode_object(&mut buf, &[0u8; 17], b"", false).is_err());
        assert!(encode_object(&mut buf, b"k", &[0u8; VALUE_MAX + 1], false).is_err());
    }

    #[test]
    fn buckets_and_messages_round_trip() {
        let m = Meta::EMPTY.advance(3).unwrap();
        let b = Bucket::new(b"abcdefgh", 2, m).unwrap();
        let d = Bucket::decode(&b.encode()).unwrap();
        assert!(d.holds(b"abcdefgh") && !d.holds(b"abcdefg"));
        assert_eq!((d.head(), d.meta()), (2, m));
        assert!(!Bucket::decode(&[0u8; 32]).unwrap().is_used());
        let mut bad = b.encode();
        bad[8] = 17; // key length 17
        assert!(Bucket::decode(&bad).is_err());
        let r = Request::new(ReqOp::Update, 77, b"kk", 100).unwrap();
        assert_eq!(Request::decode(&r.encode()), Ok(r));
        assert!(Request::decode(&[0u8; REQUEST_LEN]).is_err());
        let r = r.with_revoke(77);
        assert_eq!(Request::decode(&r.encode()).map(|d| d.revoke), Ok(77));
        let mut bad = r.encode();
        bad[24..32].copy_from_slice(&(1u64 << 31).to_le_bytes());
        assert!(Request::decode(&bad).is_err(), "a revoke beyond 31 bits");
        assert!(
            Request::decode(&r.encode()[..24]).is_err(),
            "a short request"
        );
        assert_eq!(decode_hello(&hello(9)), Some(9));
        assert_eq!(decode_hello(&HELLO), Some(0));
        assert_eq!(decode_hello(b"ERDAHELX"), None);
        assert_eq!(decode_hello_slots(&hello_slots(9, 8)), Some((9, 8)));
        assert_eq!(decode_hello_slots(&hello_slots(9, 0)), Some((9, 1)));
        assert_eq!(decode_hello_slots(&hello(4)), Some((4, 1)));
        assert_eq!(decode_hello_slots(&GOODBYE), None);
        let g = Request::new(ReqOp::Get, 3, b"k", 0).unwrap();
        assert_eq!(Request::decode(&g.encode()), Ok(g));
        assert!(Request::decode(&Request::new(ReqOp::Get, 3, b"k", 8).unwrap().encode()).is_err());
        assert_eq!(Status::from_u8(Status::Located as u8), Ok(Status::Located));
        assert_eq!(Status::from_u8(Status::Busy as u8), Ok(Status::Busy));
        assert_ne!(durable_mark(8), durable_mark(9));
        assert_ne!(durable_mark(0), 0);
        let p = Reply {
            status: Status::Granted,
            head: 3,
            seq: 9,
            arg: 1234,
            aux: 77,
        };
        assert_eq!(Reply::decode(&p.encode()), Ok(p));
        assert!(Reply::decode(&[0u8; REPLY_LEN]).is_err());
    }

    fn sb() -> Superblock {
        let mut head_base = [0; MAX_HEADS];
        head_base[0] = 1 << 20;
        head_base[1] = 2 << 20;
        Superblock {
            magic: SUPERBLOCK_MAGIC,
            version: SUPERBLOCK_VERSION,
            heads: 2,
            buckets: 1024 + 7,
            neighborhood: 8,
            max_clients: 64,
            table_off: 4096,
            mailbox_off: 4096 + 1031 * 32,
            segment_bytes: 64 << 10,
            head_bytes: 1 << 20,
            head_base,
        }
    }

    #[test]
    fn superblock_round_trips_and_refuses_bad_geometry() {
        let s = sb();
        assert_eq!(Superblock::decode(&s.encode(), 4 << 20), Ok(s));
        assert!(
            Superblock::decode(&s.encode(), 2 << 20).is_err(),
            "head past the region"
        );
        let mut t = s;
        t.heads = 9;
        assert!(Superblock::decode(&t.encode(), 4 << 20).is_err());
        let mut t = s;
        t.segment_bytes = 1000;
        assert!(Superblock::decode(&t.encode(), 4 << 20).is_err());
        assert_eq!(s.object_off(1, 2), Ok((2 << 20) + 16));
        assert!(s.object_off(2, 2).is_err());
        assert!(s.object_off(0, 0).is_err());
        assert!(s.home(b"x") < 1024);
        // 1031 buckets: 17 stripes of 64, plus one; right after the 64 mailboxes.
        assert_eq!(s.stripes(), 18);
        assert_eq!(s.stripe_off(), s.mailbox_off + 64 * MAILBOX_LEN as u64);
        assert_eq!(s.stripe_of(1030), 16);
        assert_eq!(s.stripe_word_off(17), s.stripe_off() + 17 * 8);
        // Mailboxes at the very end of a 4 MiB region: the stripe words and the head state
        // words must fit too.
        let mut t = s;
        t.mailbox_off = (4 << 20) - 64 * MAILBOX_LEN as u64 - 18 * 8 - MAX_HEADS as u64 * 8;
        assert_eq!(t.head_state_off(7), (4 << 20) - 8);
        assert!(t.validate(4 << 20).is_ok());
        t.mailbox_off += 8;
        assert!(t.validate(4 << 20).is_err(), "stripe words past the region");
    }

    #[test]
    fn head_states_round_trip_and_refuse_nonsense() {
        let h = HeadState {
            epoch: 3,
            first: 3,
            len: 3,
            src: 2,
            regions: 4,
        };
        assert_eq!(HeadState::decode(h.encode()), Ok(h));
        assert_eq!((h.nth(0), h.nth(1), h.nth(2)), (3, 0, 1));
        assert!(h.in_first(0, 2) && !h.in_first(1, 2) && h.in_first(1, 3));
        assert!(HeadState::decode(0).is_err(), "no regions");
        let even = HeadState { epoch: 4, ..h };
        assert!(
            HeadState::decode(even.encode()).is_err(),
            "cleaning, even epoch"
        );
        let long = HeadState { len: 5, ..h };
        assert!(HeadState::decode(long.encode()).is_err());
        assert!(HeadState::decode(h.encode() | 1 << 60).is_err());
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_object(&bytes);
            let _ = Bucket::decode(&bytes);
            let _ = Request::decode(&bytes);
            let _ = Reply::decode(&bytes);
            let _ = Superblock::decode(&bytes, 1 << 30);
            if bytes.len() >= 8 {
                let _ = HeadState::decode(u64::from_le_bytes(bytes[..8].try_into().unwrap()));
            }
        }

        #[test]
        fn meta_words_round_trip(tag in any::<bool>(), a in 0u32..(1 << 31), b in 0u32..(1 << 31)) {
            let m = Meta { new_tag: tag, a, b };
            prop_assert_eq!(Meta::decode(m.encode()), Ok(m));
        }
    }
}

//! WORT's and WOART's formats: the superblock, node headers, leaves, and the ring messages.
//!
//! **Superblock** (64 bytes, published in root slot [`ROOT_SLOT_WORT`] or [`ROOT_SLOT_WOART`]):
//! magic, tree kind, the root word (a tagged pointer, see [`Ptr`]), the ring geometry, and
//! the heap: `[heap_base, heap_end)` (`heap_end`: the memory claimed from the region so far)
//! with `heap_top` the durable high-water mark of the bump allocator (a node is only ever
//! reachable below a `heap_top` persisted before it).
//!
//! **Node header** (the first 8-byte word of every inner node, stored whole): depth (bits
//! 7..0, the digit where the node's prefix starts), prefix length (15..8, in digits), and up
//! to [`PREFIX_MAX`] prefix digits (one per byte, bits 63..16). WORT's digits are 4-bit
//! nibbles, WOART's bytes. Prefixes longer than [`PREFIX_MAX`] are checked against a leaf.
//!
//! **Leaf** (8-byte aligned): header word (magic 63..48, key length 47..40, value length
//! 15..0), the key zero-padded to 16 bytes, the value.
//!
//! **Ring slot** (one per in-flight request of a client, [`SLOT_LEN`] bytes): the request
//! header word (magic 63..56, op 55..48, key length 47..40, flags 39..32, value length 15..0),
//! the sequence word (sequence 31..0), the key zero-padded to 16 bytes, the value.
//!
//! **Reply** (a SEND): status, op, key length, value length, the slot and the sequence,
//! then the key (16 bytes, zero-padded) and the value.
use crate::fabric::FabricError;
use core::fmt;
use remora_layouts::LayoutError;
use remora_layouts::bits::{Field, assert_disjoint};

/// Region-header root slot publishing WORT's superblock.
pub const ROOT_SLOT_WORT: usize = 6;
/// Region-header root slot publishing WOART's superblock.
pub const ROOT_SLOT_WOART: usize = 7;
/// Longest key; keys are 1..=16 bytes (the CANRT paper's 16-byte keys, or 8-byte integers).
pub const KEY_MAX: usize = 16;
/// Longest value.
pub const VALUE_MAX: usize = 256;
/// Bytes of the canonical key a tree indexes: the key zero-padded to 16 bytes, then its
/// length. Byte order of canonical keys is the byte order of the keys (a proper prefix sorts
/// first: padded they are equal up to the longer key's extra bytes, then the length decides),
/// and no canonical key is a prefix of another.
pub const CANON_LEN: usize = KEY_MAX + 1;
/// Prefix digits a node header holds.
pub const PREFIX_MAX: usize = 6;

pub(crate) const SB_MAGIC: u64 = u64::from_le_bytes(*b"WORTSB01");
pub(crate) const SB_LEN: usize = 64;
/// Offsets of the superblock's words.
pub(crate) const SB_KIND: u64 = 8;
pub(crate) const SB_ROOT: u64 = 16;
pub(crate) const SB_RINGS: u64 = 24;
pub(crate) const SB_RING_OFF: u64 = 32;
pub(crate) const SB_HEAP_BASE: u64 = 40;
pub(crate) const SB_HEAP_END: u64 = 48;
pub(crate) const SB_HEAP_TOP: u64 = 56;
const _: () = assert!(SB_HEAP_TOP as usize + 8 == SB_LEN);

/// Which tree a store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// WORT: 4-bit digits, every inner node has 16 child pointers.
    Wort = 1,
    /// WOART: 8-bit digits, adaptive nodes of 4, 16, 48 and 256 children.
    Woart = 2,
}

impl Kind {
    /// The tree's name as reports print it (`wort` or `woart`).
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Wort => "wort",
            Kind::Woart => "woart",
        }
    }
    /// The region-header root slot where this kind's superblock is published.
    pub const fn root_slot(self) -> usize {
        match self {
            Kind::Wort => ROOT_SLOT_WORT,
            Kind::Woart => ROOT_SLOT_WOART,
        }
    }
    /// Digits of a canonical key.
    pub const fn digits(self) -> usize {
        match self {
            Kind::Wort => CANON_LEN * 2,
            Kind::Woart => CANON_LEN,
        }
    }
    /// Digit `i` of canonical key `k`.
    #[inline]
    pub fn digit(self, k: &[u8; CANON_LEN], i: usize) -> u8 {
        match self {
            Kind::Wort => {
                let b = k[i / 2];
                if i.is_multiple_of(2) { b >> 4 } else { b & 0xF }
            }
            Kind::Woart => k[i],
        }
    }
    /// The kind stored in a superblock's kind word; `None` for an unknown value.
    pub fn from_word(w: u64) -> Option<Kind> {
        match w {
            1 => Some(Kind::Wort),
            2 => Some(Kind::Woart),
            _ => None,
        }
    }
}

/// The canonical key of `key` (see [`CANON_LEN`]); `None` for an empty or too long key.
pub(crate) fn canon(key: &[u8]) -> Option<[u8; CANON_LEN]> {
    if key.is_empty() || key.len() > KEY_MAX {
        return None;
    }
    let mut k = [0u8; CANON_LEN];
    k[..key.len()].copy_from_slice(key);
    k[KEY_MAX] = key.len() as u8;
    Some(k)
}

// ---------------------------------------------------------------- tagged pointers

/// A child word: a node's region offset (64-byte aligned) with its type in the low bits;
/// 0 is "no child".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ptr {
    Null,
    Leaf(u64),
    /// WORT's node: 16 children indexed by a nibble.
    N16Direct(u64),
    /// WOART's NODE4 and NODE16: unsorted keys and a valid bitmap.
    N4(u64),
    N16(u64),
    /// WOART's NODE48: a 256-byte child index and 48 pointers.
    N48(u64),
    /// WOART's NODE256: 256 children indexed by a byte.
    N256(u64),
}

const TAG_MASK: u64 = 0x3F;

impl Ptr {
    pub const fn encode(self) -> u64 {
        match self {
            Ptr::Null => 0,
            Ptr::Leaf(o) => o | 1,
            Ptr::N16Direct(o) => o | 2,
            Ptr::N4(o) => o | 3,
            Ptr::N16(o) => o | 4,
            Ptr::N48(o) => o | 5,
            Ptr::N256(o) => o | 6,
        }
    }
    /// Decodes a child word; an unknown tag or a misaligned offset is an error.
    pub const fn decode(w: u64) -> Result<Ptr, LayoutError> {
        if w == 0 {
            return Ok(Ptr::Null);
        }
        let o = w & !TAG_MASK;
        Ok(match w & TAG_MASK {
            1 => Ptr::Leaf(o),
            2 => Ptr::N16Direct(o),
            3 => Ptr::N4(o),
            4 => Ptr::N16(o),
            5 => Ptr::N48(o),
            6 => Ptr::N256(o),
            t => {
                return Err(LayoutError::OutOfRange {
                    field: "child_tag",
                    value: t,
                });
            }
        })
    }
    pub const fn offset(self) -> u64 {
        match self {
            Ptr::Null => 0,
            Ptr::Leaf(o)
            | Ptr::N16Direct(o)
            | Ptr::N4(o)
            | Ptr::N16(o)
            | Ptr::N48(o)
            | Ptr::N256(o) => o,
        }
    }
}

// ---------------------------------------------------------------- node header

pub(crate) const H_DEPTH: Field = Field::new("depth", 0, 8);
pub(crate) const H_PLEN: Field = Field::new("prefix_len", 8, 8);
pub(crate) const H_PREFIX: Field = Field::new("prefix", 16, 48);
const _: () = assert_disjoint(&[H_DEPTH, H_PLEN, H_PREFIX]);

/// An inner node's header word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub depth: u8,
    pub plen: u8,
    /// The first `min(plen, PREFIX_MAX)` prefix digits.
    pub prefix: [u8; PREFIX_MAX],
}

impl Header {
    pub fn encode(&self) -> u64 {
        let mut p = [0u8; 8];
        p[..PREFIX_MAX].copy_from_slice(&self.prefix);
        let w = H_DEPTH.set(0, self.depth as u64);
        let w = H_PLEN.set(w, self.plen as u64);
        H_PREFIX.set(w, u64::from_le_bytes(p))
    }
    pub fn decode(w: u64) -> Header {
        let p = H_PREFIX.get(w).to_le_bytes();
        let mut prefix = [0u8; PREFIX_MAX];
        prefix.copy_from_slice(&p[..PREFIX_MAX]);
        Header {
            depth: H_DEPTH.get(w) as u8,
            plen: H_PLEN.get(w) as u8,
            prefix,
        }
    }
    /// The header of a node at `depth` whose prefix is `digits(depth..depth + plen)`.
    pub fn with_prefix(depth: usize, plen: usize, digit: impl Fn(usize) -> u8) -> Header {
        let mut prefix = [0u8; PREFIX_MAX];
        for (i, p) in prefix.iter_mut().enumerate().take(plen.min(PREFIX_MAX)) {
            *p = digit(depth + i);
        }
        Header {
            depth: depth as u8,
            plen: plen as u8,
            prefix,
        }
    }
}

// ---------------------------------------------------------------- leaf

pub(crate) const LEAF_MAGIC: u64 = 0x5754;
pub(crate) const L_MAGIC: Field = Field::new("leaf_magic", 48, 16);
pub(crate) const L_KEY_LEN: Field = Field::new("leaf_key_len", 40, 8);
pub(crate) const L_VALUE_LEN: Field = Field::new("leaf_value_len", 0, 16);
const _: () = assert_disjoint(&[L_MAGIC, L_KEY_LEN, L_VALUE_LEN]);
/// Bytes before a leaf's value.
pub(crate) const LEAF_HEAD: usize = 8 + KEY_MAX;
pub(crate) const LEAF_MAX: usize = LEAF_HEAD + VALUE_MAX;

pub(crate) const fn leaf_len(value_len: usize) -> usize {
    (LEAF_HEAD + value_len).next_multiple_of(8)
}

/// Encodes a leaf into `out`; returns its length.
pub(crate) fn encode_leaf(out: &mut [u8; LEAF_MAX], key: &[u8], value: &[u8]) -> usize {
    let w = L_MAGIC.set(0, LEAF_MAGIC);
    let w = L_KEY_LEN.set(w, key.len() as u64);
    let w = L_VALUE_LEN.set(w, value.len() as u64);
    out[..8].copy_from_slice(&w.to_le_bytes());
    out[8..LEAF_HEAD].fill(0);
    out[8..8 + key.len()].copy_from_slice(key);
    out[LEAF_HEAD..LEAF_HEAD + value.len()].copy_from_slice(value);
    let len = leaf_len(value.len());
    out[LEAF_HEAD + value.len()..len].fill(0);
    len
}

/// A leaf's header word: (key length, value length), validated.
pub(crate) fn decode_leaf_header(w: u64) -> Result<(usize, usize), LayoutError> {
    if L_MAGIC.get(w) != LEAF_MAGIC {
        return Err(LayoutError::BadMagic {
            expected: LEAF_MAGIC,
            found: L_MAGIC.get(w),
        });
    }
    let (k, v) = (L_KEY_LEN.get(w) as usize, L_VALUE_LEN.get(w) as usize);
    if k == 0
        || k > KEY_MAX
        || v > VALUE_MAX
        || w & !(L_MAGIC.mask() | L_KEY_LEN.mask() | L_VALUE_LEN.mask()) != 0
    {
        return Err(LayoutError::Inconsistent {
            what: "leaf header lengths",
        });
    }
    Ok((k, v))
}

// ---------------------------------------------------------------- ring messages

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqOp {
    Get = 1,
    Upsert = 2,
    Update = 3,
    Delete = 4,
    /// The smallest key `>= key` (flag [`FLAG_EXCLUSIVE`]: `> key`) and its value: one
    /// request per key of a range query, as the CANRT paper's baselines do.
    Next = 5,
}

impl ReqOp {
    pub fn from_u8(b: u8) -> Option<ReqOp> {
        Some(match b {
            1 => ReqOp::Get,
            2 => ReqOp::Upsert,
            3 => ReqOp::Update,
            4 => ReqOp::Delete,
            5 => ReqOp::Next,
            _ => return None,
        })
    }
}

pub(crate) const REQ_MAGIC: u64 = 0xA7;
pub(crate) const R_MAGIC: Field = Field::new("req_magic", 56, 8);
pub(crate) const R_OP: Field = Field::new("req_op", 48, 8);
pub(crate) const R_KEY_LEN: Field = Field::new("req_key_len", 40, 8);
pub(crate) const R_FLAGS: Field = Field::new("req_flags", 32, 8);
pub(crate) const R_VALUE_LEN: Field = Field::new("req_value_len", 0, 16);
const _: () = assert_disjoint(&[R_MAGIC, R_OP, R_KEY_LEN, R_FLAGS, R_VALUE_LEN]);
/// Flag of [`ReqOp::Next`]: strictly greater than the key.
pub(crate) const FLAG_EXCLUSIVE: u64 = 1;
/// Bytes before a request's value.
pub(crate) const REQ_HEAD: usize = 16 + KEY_MAX;
/// Bytes of one ring slot (whole cache lines).
pub const SLOT_LEN: usize = (REQ_HEAD + VALUE_MAX).next_multiple_of(64);
const _: () = assert!(SLOT_LEN == 320);

/// A decoded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    pub op: ReqOp,
    pub flags: u64,
    pub seq: u32,
    pub key_len: usize,
    pub key: [u8; KEY_MAX],
    pub value_len: usize,
}

impl Request {
    pub fn key(&self) -> &[u8] {
        &self.key[..self.key_len]
    }
}

/// Encodes a request into `out`; returns the bytes to write.
pub(crate) fn encode_request(
    out: &mut [u8; SLOT_LEN],
    op: ReqOp,
    flags: u64,
    seq: u32,
    key: &[u8],
    value: &[u8],
) -> usize {
    let w = R_MAGIC.set(0, REQ_MAGIC);
    let w = R_OP.set(w, op as u64);
    let w = R_KEY_LEN.set(w, key.len() as u64);
    let w = R_FLAGS.set(w, flags);
    let w = R_VALUE_LEN.set(w, value.len() as u64);
    out[..8].copy_from_slice(&w.to_le_bytes());
    out[8..16].copy_from_slice(&(seq as u64).to_le_bytes());
    out[16..REQ_HEAD].fill(0);
    out[16..16 + key.len()].copy_from_slice(key);
    out[REQ_HEAD..REQ_HEAD + value.len()].copy_from_slice(value);
    (REQ_HEAD + value.len()).next_multiple_of(8)
}

/// Decodes a request's first [`REQ_HEAD`] bytes; never panics on arbitrary bytes.
pub(crate) fn decode_request(b: &[u8]) -> Result<Request, LayoutError> {
    if b.len() < REQ_HEAD {
        return Err(LayoutError::Short {
            need: REQ_HEAD,
            got: b.len(),
        });
    }
    let w = remora_layouts::bits::read_u64(b, 0)?;
    let s = remora_layouts::bits::read_u64(b, 8)?;
    if R_MAGIC.get(w) != REQ_MAGIC {
        return Err(LayoutError::BadMagic {
            expected: REQ_MAGIC,
            found: R_MAGIC.get(w),
        });
    }
    let op = ReqOp::from_u8(R_OP.get(w) as u8).ok_or(LayoutError::OutOfRange {
        field: "req_op",
        value: R_OP.get(w),
    })?;
    let key_len = R_KEY_LEN.get(w) as usize;
    let value_len = R_VALUE_LEN.get(w) as usize;
    if key_len == 0 || key_len > KEY_MAX {
        return Err(LayoutError::OutOfRange {
            field: "req_key_len",
            value: key_len as u64,
        });
    }
    if value_len > VALUE_MAX || s >> 32 != 0 {
        return Err(LayoutError::OutOfRange {
            field: "req_value_len",
            value: value_len as u64,
        });
    }
    let mut key = [0u8; KEY_MAX];
    key.copy_from_slice(&b[16..REQ_HEAD]);
    Ok(Request {
        op,
        flags: R_FLAGS.get(w),
        seq: s as u32,
        key_len,
        key,
        value_len,
    })
}

/// What the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done; a get or next carries the key and value.
    Ok = 1,
    /// The key (or, for next, any key in range) is absent.
    Absent = 2,
    /// The heap is full: no room for the write.
    Full = 3,
    /// The request did not decode.
    BadRequest = 4,
    /// A hello was accepted: `seq` is the client id, the value the superblock's offset.
    Welcome = 5,
    /// No free ring for a new client.
    TooManyClients = 6,
}

impl Status {
    /// The status of a reply's first byte; `None` for an unknown value.
    pub fn from_u8(b: u8) -> Option<Status> {
        Some(match b {
            1 => Status::Ok,
            2 => Status::Absent,
            3 => Status::Full,
            4 => Status::BadRequest,
            5 => Status::Welcome,
            6 => Status::TooManyClients,
            _ => return None,
        })
    }
}

/// Bytes before a reply's value.
pub const REPLY_HEAD: usize = 16 + KEY_MAX;
/// Longest reply: the header, the 16-byte key and the longest value.
pub const REPLY_MAX: usize = REPLY_HEAD + VALUE_MAX;

/// A decoded reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// What the server answered.
    pub status: Status,
    /// The ring slot of the request this answers.
    pub slot: u16,
    /// The sequence number of the request this answers (for a welcome, the client id).
    pub seq: u32,
    /// Bytes of the key at `msg[16..16 + key_len]` (0 to 16).
    pub key_len: usize,
    /// Bytes of the value at `msg[REPLY_HEAD..]` (at most [`VALUE_MAX`]).
    pub value_len: usize,
}

/// Encodes a reply into `out`; returns its length.
pub(crate) fn encode_reply(
    out: &mut [u8; REPLY_MAX],
    status: Status,
    slot: u16,
    seq: u32,
    key: &[u8],
    value: &[u8],
) -> usize {
    out[0] = status as u8;
    out[1] = key.len() as u8;
    out[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
    out[4..6].copy_from_slice(&slot.to_le_bytes());
    out[6..8].fill(0);
    out[8..12].copy_from_slice(&seq.to_le_bytes());
    out[12..REPLY_HEAD].fill(0);
    out[16..16 + key.len()].copy_from_slice(key);
    out[REPLY_HEAD..REPLY_HEAD + value.len()].copy_from_slice(value);
    REPLY_HEAD + value.len()
}

/// Decodes a reply; the key is `msg[16..16 + key_len]`, the value `msg[REPLY_HEAD..]`.
pub fn decode_reply(msg: &[u8]) -> Result<Reply, LayoutError> {
    if msg.len() < REPLY_HEAD {
        return Err(LayoutError::Short {
            need: REPLY_HEAD,
            got: msg.len(),
        });
    }
    let status = Status::from_u8(msg[0]).ok_or(LayoutError::OutOfRange {
        field: "reply_status",
        value: msg[0] as u64,
    })?;
    let key_len = msg[1] as usize;
    let value_len = u16::from_le_bytes([msg[2], msg[3]]) as usize;
    if key_len > KEY_MAX || value_len > VALUE_MAX || msg.len() != REPLY_HEAD + value_len {
        return Err(LayoutError::Inconsistent {
            what: "reply lengths",
        });
    }
    Ok(Reply {
        status,
        slot: u16::from_le_bytes([msg[4], msg[5]]),
        seq: u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]]),
        key_len,
        value_len,
    })
}

/// A client's hello: this magic, then its fabric client id.
pub const HELLO: [u8; 8] = *b"WORTHELO";

/// The immediate of a request: client id and ring slot.
pub const fn imm(client: u32, slot: u16) -> u32 {
    (client << 16) | slot as u32
}

/// A tree error the server reports (and a corrupt region).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeError {
    /// The region access failed.
    Fabric(FabricError),
    /// A node or leaf that does not decode, at this offset.
    Corrupt {
        /// Region offset of the node or leaf.
        off: u64,
        /// What did not decode.
        why: LayoutError,
    },
    /// The heap cannot hold the write.
    Full,
}

impl From<FabricError> for TreeError {
    fn from(e: FabricError) -> Self {
        TreeError::Fabric(e)
    }
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::Fabric(e) => write!(f, "{e}"),
            TreeError::Corrupt { off, why } => {
                write!(f, "corrupt tree node at offset {off:#x}: {why}")
            }
            TreeError::Full => write!(f, "the memory node's heap is full"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_keys_sort_as_their_keys() {
        let keys: [&[u8]; 6] = [b"a", b"a\0", b"a\0\0", b"ab", b"b", &[0xFF; 16]];
        for w in keys.windows(2) {
            assert!(canon(w[0]).unwrap() < canon(w[1]).unwrap(), "{w:?}");
        }
        assert!(canon(b"").is_none() && canon(&[1; 17]).is_none());
        let k = canon(&[0xAB]).unwrap();
        assert_eq!(
            (Kind::Wort.digit(&k, 0), Kind::Wort.digit(&k, 1)),
            (0xA, 0xB)
        );
        assert_eq!(Kind::Woart.digit(&k, 0), 0xAB);
    }

    #[test]
    fn words_round_trip_and_bad_ones_are_refused() {
        let h = Header::with_prefix(3, 9, |i| i as u8);
        assert_eq!(Header::decode(h.encode()), h);
        assert_eq!(h.prefix, [3, 4, 5, 6, 7, 8]);
        for p in [
            Ptr::Leaf(64),
            Ptr::N16Direct(128),
            Ptr::N48(1 << 20),
            Ptr::Null,
        ] {
            assert_eq!(Ptr::decode(p.encode()), Ok(p));
        }
        assert!(Ptr::decode(64 | 7).is_err());
        let mut leaf = [0u8; LEAF_MAX];
        let n = encode_leaf(&mut leaf, b"key", b"value");
        assert_eq!(n, 32);
        let w = u64::from_le_bytes(leaf[..8].try_into().unwrap());
        assert_eq!(decode_leaf_header(w), Ok((3, 5)));
        assert!(decode_leaf_header(w ^ 1 << 50).is_err());
        assert!(
            decode_leaf_header(L_MAGIC.set(0, LEAF_MAGIC)).is_err(),
            "empty key"
        );
    }

    #[test]
    fn messages_round_trip_and_malformed_ones_are_refused() {
        let mut slot = [0u8; SLOT_LEN];
        let n = encode_request(&mut slot, ReqOp::Next, FLAG_EXCLUSIVE, 77, b"k1", b"");
        assert_eq!(n, REQ_HEAD);
        let r = decode_request(&slot).unwrap();
        assert_eq!(
            (r.op, r.flags, r.seq, r.key(), r.value_len),
            (ReqOp::Next, 1, 77, &b"k1"[..], 0)
        );
        let mut bad = slot;
        bad[6] = 9; // op 9
        assert!(decode_request(&bad).is_err());
        let mut bad = slot;
        bad[5] = 17; // key length 17
        assert!(decode_request(&bad).is_err());
        assert!(decode_request(&slot[..8]).is_err());
        let mut out = [0u8; REPLY_MAX];
        let n = encode_reply(&mut out, Status::Ok, 3, 9, b"key", b"val");
        let r = decode_reply(&out[..n]).unwrap();
        assert_eq!(
            (r.status, r.slot, r.seq, r.key_len, r.value_len),
            (Status::Ok, 3, 9, 3, 3)
        );
        assert!(decode_reply(&out[..n - 1]).is_err());
        out[0] = 0;
        assert!(decode_reply(&out[..n]).is_err());
    }
}

//! Leaves: fixed front, status word, meta word, checked view and encoder.
use super::*;

/// The fixed front of a leaf; key, value area and the rear lock follow.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeafFront {
    /// Reverse pointer: `pack48` of the parent node.
    pub reverse: u64,
    /// The [`LeafStatus`] word.
    pub status: u64,
    /// CRC-64 over the valid bit, the meta word, the key and the value area.
    pub checksum: u64,
    /// The [`LeafMeta`] word.
    pub meta: u64,
}
const _: () = assert!(core::mem::size_of::<LeafFront>() == 32);
/// Byte offset of a leaf's reverse pointer.
pub(crate) const LEAF_REV_OFFSET: usize = offset_of!(LeafFront, reverse);
/// Byte offset of a leaf's status word.
pub const LEAF_STATUS_OFFSET: usize = offset_of!(LeafFront, status);
/// Byte offset of a leaf's checksum word.
pub const LEAF_CRC_OFFSET: usize = offset_of!(LeafFront, checksum);
/// Byte offset of a leaf's meta word.
pub(crate) const LEAF_META_OFFSET: usize = offset_of!(LeafFront, meta);
/// Byte offset of a leaf's key.
pub const LEAF_KEY_OFFSET: usize = core::mem::size_of::<LeafFront>();
const _: () = assert!(LEAF_REV_OFFSET == 0 && LEAF_STATUS_OFFSET == 8);
const _: () = assert!(LEAF_CRC_OFFSET == 16 && LEAF_META_OFFSET == 24);

const fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Bytes of a leaf holding a `key_len`-byte key and up to `val_cap` value bytes.
pub const fn leaf_bytes(key_len: usize, val_cap: usize) -> usize {
    let raw = LEAF_KEY_OFFSET + pad8(key_len) + pad8(val_cap) + 8;
    raw.div_ceil(LEAF_UNIT) * LEAF_UNIT
}

/// Offset of the rear lock word in a leaf of `bytes` bytes.
pub const fn leaf_lock_offset(bytes: usize) -> usize {
    bytes - 8
}

const L_VALID: Field = Field::new("valid", 0, 1);
const L_OBSOLETE: Field = Field::new("obsolete", 1, 1);
const L_FWD: Field = Field::new("forward", 8, 48);
const _: () = assert_disjoint(&[L_VALID, L_OBSOLETE, L_FWD]);
const L_STATUS_USED: u64 = L_VALID.mask() | L_OBSOLETE.mask() | L_FWD.mask();

/// A leaf's status word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeafStatus(u64);

impl LeafStatus {
    /// A status word with only the valid bit (set or clear).
    pub const fn live(valid: bool) -> LeafStatus {
        LeafStatus(L_VALID.set(0, valid as u64))
    }
    /// Checks a status word: no unknown bits, obsolete bit set exactly when a forward address is.
    pub fn decode(raw: u64) -> Result<LeafStatus, LayoutError> {
        if raw & !L_STATUS_USED != 0 {
            return Err(LayoutError::Inconsistent {
                what: "leaf status has unknown bits",
            });
        }
        let s = LeafStatus(raw);
        if s.is_obsolete() != (L_FWD.get(raw) != 0) {
            return Err(LayoutError::Inconsistent {
                what: "leaf obsolete bit and forward address disagree",
            });
        }
        Ok(s)
    }
    /// This leaf replaced by the leaf at `to` (out-of-place update).
    pub fn forwarded(self, to: GlobalAddr) -> Result<LeafStatus, LayoutError> {
        let p = to.pack48()?;
        Ok(LeafStatus(L_FWD.set(L_OBSOLETE.set(self.0, 1), p)))
    }
    /// The status word as stored.
    pub const fn raw(self) -> u64 {
        self.0
    }
    /// Bit 0: the leaf holds a live key-value pair.
    pub const fn is_valid(self) -> bool {
        L_VALID.get(self.0) == 1
    }
    /// Bit 1: the leaf was replaced out of place.
    pub const fn is_obsolete(self) -> bool {
        L_OBSOLETE.get(self.0) == 1
    }
    /// The replacing leaf's address (bits 55..8), if any.
    pub fn forward(self) -> Option<GlobalAddr> {
        match L_FWD.get(self.0) {
            0 => None,
            p => GlobalAddr::unpack48(p).ok(),
        }
    }
}

const M_KEY_LEN: Field = Field::new("key_len", 0, 16);
const M_VAL_LEN: Field = Field::new("val_len", 16, 16);
const M_VAL_CAP: Field = Field::new("val_cap", 32, 16);
const M_MAGIC: Field = Field::new("magic", 48, 16);
const _: () = assert_disjoint(&[M_KEY_LEN, M_VAL_LEN, M_VAL_CAP, M_MAGIC]);
/// Tag in every leaf's meta word, to refuse what is not a leaf.
pub const LEAF_MAGIC: u64 = 0x5AF1;

/// A leaf's meta word: lengths and a magic tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafMeta {
    /// Key length in bytes (1..=[`MAX_KEY_LEN`]; bits 15..0).
    pub key_len: usize,
    /// Value length in bytes, at most `val_cap` (bits 31..16).
    pub val_len: usize,
    /// Value area capacity in bytes (bits 47..32).
    pub val_cap: usize,
}

impl LeafMeta {
    /// The meta word with [`LEAF_MAGIC`], or an error if the lengths do not fit a leaf.
    pub fn encode(&self) -> Result<u64, LayoutError> {
        if self.key_len == 0 || self.key_len > MAX_KEY_LEN {
            return Err(LayoutError::OutOfRange {
                field: "key_len",
                value: self.key_len as u64,
            });
        }
        if self.val_len > self.val_cap || leaf_bytes(self.key_len, self.val_cap) > MAX_LEAF_BYTES {
            return Err(LayoutError::OutOfRange {
                field: "val_len",
                value: self.val_len as u64,
            });
        }
        let mut w = M_KEY_LEN.set(0, self.key_len as u64);
        w = M_VAL_LEN.set(w, self.val_len as u64);
        w = M_VAL_CAP.set(w, self.val_cap as u64);
        Ok(M_MAGIC.set(w, LEAF_MAGIC))
    }

    /// Checks the magic and the lengths of a meta word.
    pub fn decode(raw: u64) -> Result<LeafMeta, LayoutError> {
        if M_MAGIC.get(raw) != LEAF_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: LEAF_MAGIC,
                found: M_MAGIC.get(raw),
            });
        }
        let m = LeafMeta {
            key_len: M_KEY_LEN.get(raw) as usize,
            val_len: M_VAL_LEN.get(raw) as usize,
            val_cap: M_VAL_CAP.get(raw) as usize,
        };
        m.encode().map(|_| m)
    }

    /// Total leaf bytes.
    pub const fn bytes(&self) -> usize {
        leaf_bytes(self.key_len, self.val_cap)
    }
    /// Offset of the value area.
    pub const fn value_offset(&self) -> usize {
        LEAF_KEY_OFFSET + pad8(self.key_len)
    }
    /// End of the checksummed area (key and value area).
    pub const fn body_end(&self) -> usize {
        self.value_offset() + pad8(self.val_cap)
    }
}

/// A decoded leaf image: the checksum is NOT verified here (the core does, with CRC-64
/// over [`LeafView::checksummed`]).
#[derive(Debug, Clone, Copy)]
pub struct LeafView<'a> {
    /// Reverse pointer word.
    pub reverse: u64,
    /// The status word.
    pub status: LeafStatus,
    /// The stored checksum (not verified by the decoder).
    pub checksum: u64,
    /// The meta word.
    pub meta: LeafMeta,
    /// The key bytes.
    pub key: &'a [u8],
    /// The value bytes (`meta.val_len` of them).
    pub value: &'a [u8],
    /// The rear lock word: 0 free, else the holder's owner word.
    pub lock: u64,
    bytes: &'a [u8],
}

impl<'a> LeafView<'a> {
    /// Decodes a leaf image of exactly the size its slot announced.
    pub fn decode(bytes: &'a [u8]) -> Result<LeafView<'a>, LayoutError> {
        if bytes.len() < LEAF_UNIT || !bytes.len().is_multiple_of(LEAF_UNIT) {
            return Err(LayoutError::Short {
                need: LEAF_UNIT,
                got: bytes.len(),
            });
        }
        let meta = LeafMeta::decode(read_u64(bytes, LEAF_META_OFFSET)?)?;
        if meta.bytes() != bytes.len() {
            return Err(LayoutError::Inconsistent {
                what: "leaf size in meta differs from the slot's",
            });
        }
        let status = LeafStatus::decode(read_u64(bytes, LEAF_STATUS_OFFSET)?)?;
        let vo = meta.value_offset();
        Ok(LeafView {
            reverse: read_u64(bytes, LEAF_REV_OFFSET)?,
            status,
            checksum: read_u64(bytes, LEAF_CRC_OFFSET)?,
            meta,
            key: &bytes[LEAF_KEY_OFFSET..LEAF_KEY_OFFSET + meta.key_len],
            value: &bytes[vo..vo + meta.val_len],
            lock: read_u64(bytes, leaf_lock_offset(bytes.len()))?,
            bytes,
        })
    }

    /// The bytes the checksum covers, after the valid bit: meta word, key and value area.
    pub fn checksummed(&self) -> &'a [u8] {
        &self.bytes[LEAF_META_OFFSET..self.meta.body_end()]
    }
}

/// Writes a whole leaf image into `out` (which must be `meta.bytes()` long): reverse pointer,
/// status, `checksum`, meta, key, value (zero-padded) and a free lock. Returns the meta.
pub fn encode_leaf(
    out: &mut [u8],
    reverse: u64,
    status: LeafStatus,
    checksum: u64,
    key: &[u8],
    value: &[u8],
    val_cap: usize,
) -> Result<LeafMeta, LayoutError> {
    let meta = LeafMeta {
        key_len: key.len(),
        val_len: value.len(),
        val_cap,
    };
    let m = meta.encode()?;
    if out.len() != meta.bytes() {
        return Err(LayoutError::Short {
            need: meta.bytes(),
            got: out.len(),
        });
    }
    out.fill(0);
    out[LEAF_REV_OFFSET..8].copy_from_slice(&reverse.to_le_bytes());
    out[LEAF_STATUS_OFFSET..16].copy_from_slice(&status.raw().to_le_bytes());
    out[LEAF_CRC_OFFSET..24].copy_from_slice(&checksum.to_le_bytes());
    out[LEAF_META_OFFSET..32].copy_from_slice(&m.to_le_bytes());
    out[LEAF_KEY_OFFSET..LEAF_KEY_OFFSET + key.len()].copy_from_slice(key);
    let vo = meta.value_offset();
    out[vo..vo + value.len()].copy_from_slice(value);
    Ok(meta)
}

//! Erda's log objects: the header word's fields, encoding with the CRC-32, and decoding
//! (a torn, unfinished or foreign object is an error).
use super::*;

/// Slice-by-16 tables (16 KiB, in a static: built at compile time, never copied).
static CRC32: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

/// Object header bits 63..56: [`OBJECT_MAGIC`].
pub(crate) const OBJ_MAGIC: Field = Field::new("obj_magic", 56, 8);
/// Object header bit 48: the object records a delete (no value).
pub(crate) const OBJ_DELETE: Field = Field::new("delete", 48, 1);
/// Object header bits 39..32: key length in bytes.
pub const OBJ_KEY_LEN: Field = Field::new("key_len", 32, 8);
/// Object header bits 15..0: value length in bytes.
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
pub(crate) type ObjectChecksum = fn(header: &[u8], body: &[u8]) -> u32;

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
    /// Whether the object records a delete.
    pub delete: bool,
    /// The object's key.
    pub key: &'a [u8],
    /// The object's value (empty for a delete).
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

//! The header at offset 0 of every memory node's host region.
//!
//! This is the reference example of the layout pattern: a `#[repr(C)]` struct, `const`
//! assertions of its size and of every field's offset, and a checked decoder.
//!
//! The header is also the remote allocator's state: `next_chunk` is advanced by clients with
//! FETCH_AND_ADD (no memory-node CPU involved), and `roots` are named 8-byte slots where an
//! index publishes the address of its root (changed by CMP_AND_SWP).
use crate::LayoutError;
use crate::bits::{read_u32, read_u64};
use memoffset::offset_of;

/// `b"REMORA01"` read as a little-endian u64.
pub const REGION_MAGIC: u64 = u64::from_le_bytes(*b"REMORA01");
/// Layout version stored in [`RegionHeader::version`]; decoders refuse any other.
pub(crate) const REGION_VERSION: u32 = 1;
/// Number of named root slots.
pub const ROOT_SLOTS: usize = 8;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// The 128-byte header at offset 0 of a memory node's host region (allocator state and index
/// roots).
pub struct RegionHeader {
    /// Must equal [`REGION_MAGIC`].
    pub magic: u64,
    /// Must equal [`REGION_VERSION`].
    pub version: u32,
    /// Reserved flag bits (0 in this version).
    pub flags: u32,
    /// Bytes in the host region, header included.
    pub region_len: u64,
    /// Size of the chunks the allocator hands out (a power of two).
    pub chunk_size: u64,
    /// Offset of the next unallocated chunk; clients FETCH_AND_ADD `chunk_size` to it.
    pub next_chunk: u64,
    /// Bytes of device memory the node exposes (0: none).
    pub dm_len: u64,
    /// Unused; zero.
    pub reserved: [u64; 2],
    /// Named root slots (index roots), each an encoded `GlobalAddr` or 0.
    pub roots: [u64; ROOT_SLOTS],
}

/// Size of [`RegionHeader`] in bytes; the first allocatable byte of a host region.
pub const HEADER_LEN: usize = 128;
const _: () = assert!(core::mem::size_of::<RegionHeader>() == HEADER_LEN);
const _: () = assert!(offset_of!(RegionHeader, magic) == 0);
const _: () = assert!(offset_of!(RegionHeader, version) == 8);
const _: () = assert!(offset_of!(RegionHeader, flags) == 12);
const _: () = assert!(offset_of!(RegionHeader, region_len) == 16);
const _: () = assert!(offset_of!(RegionHeader, chunk_size) == 24);
const _: () = assert!(offset_of!(RegionHeader, next_chunk) == 32);
const _: () = assert!(offset_of!(RegionHeader, dm_len) == 40);
const _: () = assert!(offset_of!(RegionHeader, roots) == 64);

/// Remote offset of the allocator cursor (target of FETCH_AND_ADD).
pub const NEXT_CHUNK_OFFSET: u64 = offset_of!(RegionHeader, next_chunk) as u64;
/// Remote offset of root slot `i`.
pub const fn root_offset(i: usize) -> u64 {
    assert!(i < ROOT_SLOTS);
    (offset_of!(RegionHeader, roots) + 8 * i) as u64
}

impl RegionHeader {
    /// A fresh header for a region of `region_len` bytes carved in `chunk_size` chunks.
    /// The first chunk starts at the first multiple of `chunk_size` past the header.
    pub fn new(region_len: u64, chunk_size: u64, dm_len: u64) -> Result<RegionHeader, LayoutError> {
        if !chunk_size.is_power_of_two() || chunk_size < 64 {
            return Err(LayoutError::OutOfRange {
                field: "chunk_size",
                value: chunk_size,
            });
        }
        let first = (HEADER_LEN as u64).next_multiple_of(chunk_size);
        if region_len < first || region_len > crate::GlobalAddr::MAX_OFFSET {
            return Err(LayoutError::OutOfRange {
                field: "region_len",
                value: region_len,
            });
        }
        Ok(RegionHeader {
            magic: REGION_MAGIC,
            version: REGION_VERSION,
            flags: 0,
            region_len,
            chunk_size,
            next_chunk: first,
            dm_len,
            reserved: [0; 2],
            roots: [0; ROOT_SLOTS],
        })
    }

    /// The header's 128 bytes, little-endian, in field order.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let mut put = |at: usize, b: &[u8]| out[at..at + b.len()].copy_from_slice(b);
        put(0, &self.magic.to_le_bytes());
        put(8, &self.version.to_le_bytes());
        put(12, &self.flags.to_le_bytes());
        put(16, &self.region_len.to_le_bytes());
        put(24, &self.chunk_size.to_le_bytes());
        put(32, &self.next_chunk.to_le_bytes());
        put(40, &self.dm_len.to_le_bytes());
        put(48, &self.reserved[0].to_le_bytes());
        put(56, &self.reserved[1].to_le_bytes());
        for (i, r) in self.roots.iter().enumerate() {
            put(64 + 8 * i, &r.to_le_bytes());
        }
        out
    }

    /// Decodes and validates a header; never panics on arbitrary bytes.
    pub fn decode(bytes: &[u8]) -> Result<RegionHeader, LayoutError> {
        if bytes.len() < HEADER_LEN {
            return Err(LayoutError::Short {
                need: HEADER_LEN,
                got: bytes.len(),
            });
        }
        let magic = read_u64(bytes, 0)?;
        if magic != REGION_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: REGION_MAGIC,
                found: magic,
            });
        }
        let version = read_u32(bytes, 8)?;
        if version != REGION_VERSION {
            return Err(LayoutError::BadVersion { found: version });
        }
        let mut roots = [0u64; ROOT_SLOTS];
        for (i, r) in roots.iter_mut().enumerate() {
            *r = read_u64(bytes, 64 + 8 * i)?;
        }
        let h = RegionHeader {
            magic,
            version,
            flags: read_u32(bytes, 12)?,
            region_len: read_u64(bytes, 16)?,
            chunk_size: read_u64(bytes, 24)?,
            next_chunk: read_u64(bytes, 32)?,
            dm_len: read_u64(bytes, 40)?,
            reserved: [read_u64(bytes, 48)?, read_u64(bytes, 56)?],
            roots,
        };
        if !h.chunk_size.is_power_of_two() || h.chunk_size < 64 {
            return Err(LayoutError::OutOfRange {
                field: "chunk_size",
                value: h.chunk_size,
            });
        }
        if h.region_len > crate::GlobalAddr::MAX_OFFSET {
            return Err(LayoutError::OutOfRange {
                field: "region_len",
                value: h.region_len,
            });
        }
        if !h.next_chunk.is_multiple_of(h.chunk_size) {
            return Err(LayoutError::Inconsistent {
                what: "next_chunk not chunk-aligned",
            });
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encode_decode_round_trip() {
        let mut h = RegionHeader::new(1 << 30, 1 << 20, 4096).unwrap();
        h.roots[3] = 0xdead_beef;
        assert_eq!(h.next_chunk, 1 << 20);
        assert_eq!(RegionHeader::decode(&h.encode()), Ok(h));
        assert_eq!(root_offset(3), 64 + 24);
        assert_eq!(NEXT_CHUNK_OFFSET, 32);
    }

    #[test]
    fn bad_headers_are_refused() {
        let h = RegionHeader::new(1 << 20, 4096, 0).unwrap();
        let mut b = h.encode();
        b[0] ^= 1;
        assert!(matches!(
            RegionHeader::decode(&b),
            Err(LayoutError::BadMagic { .. })
        ));
        let mut b = h.encode();
        b[24] = 3; // chunk_size no longer a power of two
        assert!(matches!(
            RegionHeader::decode(&b),
            Err(LayoutError::OutOfRange { .. })
        ));
        assert!(RegionHeader::decode(&b[..100]).is_err());
        assert!(RegionHeader::new(100, 4096, 0).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = RegionHeader::decode(&bytes);
        }
    }
}

//! The tree header at the start of a tree's area, with its two CRC-64s.
use super::*;
use crate::LayoutError;
use crate::bits::{read_u32, read_u64};
use memoffset::offset_of;

// ---------------------------------------------------------------- tree header

/// The header at the start of a tree's area.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeHeader {
    /// Must equal [`TREE_MAGIC`].
    pub magic: u64,
    /// Bumped by every resize.
    pub epoch: u32,
    /// Key bytes (one of [`KEY_LENS`]), fixed when the tree is formatted.
    pub key_len: u32,
    /// DataItem slots per data node.
    pub slots: u32,
    /// Value capacity of each DataItem in bytes.
    pub value_cap: u32,
    /// Prefix levels `k`.
    pub height: u32,
    /// The widest level's characters per node (each level's is in its segment).
    pub width: u32,
    /// Segments in use at the front of `segments`.
    pub n_segments: u32,
    /// Data nodes in use (ids `0 .. n_data`).
    pub n_data: u32,
    /// Region offsets.
    pub prefix_off: u64,
    /// Bytes of the prefix array.
    pub prefix_len: u64,
    /// Region offset of data node 0.
    pub data_off: u64,
    /// Bytes of one data node ([`DataGeometry::node_size`]).
    pub data_node_size: u64,
    /// The header's area: header and prefix array (reused tick-tock by later epochs).
    pub area_off: u64,
    /// Bytes of the area.
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
    /// Unused; zero.
    pub reserved: u64,
    /// The tree's [`Segment`]s, each encoded as two words; the first `n_segments` are used.
    pub segments: [[u64; 2]; MAX_SEGMENTS],
}

/// Bytes of an encoded [`TreeHeader`].
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
    /// The data nodes' shape (slots, value capacity, key width) recorded in the header.
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

    /// The header's 384 bytes, little-endian, in field order.
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

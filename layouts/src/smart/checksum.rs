//! The leaf checksum: CRC-64/XZ over the valid bit (one byte, 0 or 1), then the meta word, the
//! key and the value area ([`LeafView::checksummed`]). Computed by [`crate::crc64xz`]: with
//! the carry-less multiply where the CPU has it, with the slice-by-16 tables otherwise.
#[cfg(doc)]
use super::LeafView;
use crate::crc64xz;

/// The CRC register after the valid byte (index: the valid bit), from CRC-64/XZ's init.
const AFTER_VALID: [u64; 2] = [
    crc64xz::update_bitwise(crc64xz::INIT, &[0]),
    crc64xz::update_bitwise(crc64xz::INIT, &[1]),
];

/// The checksum of a leaf: CRC-64/XZ of the valid bit's byte followed by `checksummed`.
#[inline]
pub fn leaf_crc(valid: bool, checksummed: &[u8]) -> u64 {
    crc64xz::update(AFTER_VALID[valid as usize], checksummed) ^ crc64xz::XOROUT
}

/// [`leaf_crc`] with the slice-by-16 tables, whatever the CPU (the fallback, callable on its
/// own: tests and benchmarks compare the two).
pub fn leaf_crc_table(valid: bool, checksummed: &[u8]) -> u64 {
    crc64xz::update_table(AFTER_VALID[valid as usize], checksummed) ^ crc64xz::XOROUT
}

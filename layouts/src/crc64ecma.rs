//! CRC-64/ECMA-182: the checksum of Catfish's nodes.
//!
//! Parameters (RevEng catalogue, `crc::CRC_64_ECMA_182`): width 64, polynomial
//! `0x42F0E1EBA9EA3693`, input and output not reflected, init and xorout zero; `"123456789"`
//! checks to `0x6C40DF5F0B497347`. (The polynomial of [`crate::crc64xz`], in the other bit
//! order and without its inversions.)
//!
//! Two implementations give the same value bit for bit (so the stored node layout is the one
//! the tables wrote):
//! - [`update_table`]: the `crc` crate's slice-by-16 tables (16 × 256 × 8 B = 32 KiB), what
//!   Catfish used before. Fast when the tables are in cache; a check that follows other work
//!   finds them evicted and pays up to one cache miss per table row touched.
//! - [`update_clmul`] (x86_64 with PCLMULQDQ, SSSE3 and SSE4.1): folds 16-byte blocks,
//!   loaded big-endian (`PSHUFB`), with carry-less multiplications and ends with a Barrett
//!   reduction ([`crate::crc64fold`], in its normal frame; the code is the one
//!   [`crate::crc64xz`] runs, with this bit order's constants). Its only data are a handful of
//!   64-bit constants.
//!
//! [`update`] picks the carry-less one when the CPU has it (CPUID leaf 1, asked once and kept
//! in an atomic: no std needed), the tables otherwise, on every other architecture, and on
//! x86_64 targets built without SSE (`x86_64-unknown-none`).
//!
//! The register `state` the `update*` functions take and return is the CRC register in normal
//! bit order: start from [`INIT`], feed any number of pieces, and XOR the last state with
//! [`XOROUT`] (as [`checksum`] does; both are zero for this CRC).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::crc64fold::simd;
#[cfg(test)]
mod tests;

/// The generator polynomial without its `x^64` term, normal (MSB-first) bit order.
pub const POLY: u64 = 0x42F0_E1EB_A9EA_3693;
/// The register before the first byte.
pub const INIT: u64 = 0;
/// XORed into the final register to give the checksum.
pub const XOROUT: u64 = 0;
/// The catalogue's check value: the checksum of `b"123456789"`.
pub const CHECK: u64 = 0x6C40_DF5F_0B49_7347;

/// The slice-by-16 tables (one static copy).
static TABLES: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_ECMA_182);

/// The CRC-64/ECMA-182 of `data`.
#[inline]
pub fn checksum(data: &[u8]) -> u64 {
    update(INIT, data) ^ XOROUT
}

/// Feeds `data` to the register `state`: with the carry-less multiply when the CPU has it,
/// with the tables otherwise.
#[inline]
pub fn update(state: u64, data: &[u8]) -> u64 {
    update_clmul(state, data).unwrap_or_else(|| update_table(state, data))
}

/// [`update`] with the slice-by-16 tables, whatever the CPU (the fallback, callable on its
/// own).
pub fn update_table(state: u64, data: &[u8]) -> u64 {
    // Neither reflected nor inverted: `digest_with_initial` starts the register at `state`
    // and `finalize` returns the register as it is.
    let mut d = TABLES.digest_with_initial(state);
    d.update(data);
    d.finalize() ^ XOROUT
}

/// CRC-64/ECMA-182 for the shared folding: normal bit order, [`POLY`].
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
struct Ecma;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
impl simd::Variant for Ecma {
    const REFLECTED: bool = false;
    const K: simd::Consts = simd::Consts::normal(POLY);
}

/// [`update`] with the carry-less multiply, or `None` if this CPU (or architecture) lacks
/// PCLMULQDQ, SSSE3 or SSE4.1.
#[inline]
pub fn update_clmul(state: u64, data: &[u8]) -> Option<u64> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if simd::available() {
        // SAFETY: `available` saw PCLMULQDQ, SSSE3 and SSE4.1 in CPUID leaf 1 on this CPU.
        return Some(unsafe { simd::update::<Ecma>(state, data) });
    }
    let _ = (state, data);
    None
}

/// True when [`update`] uses the carry-less multiply on this CPU.
pub fn has_clmul() -> bool {
    crate::crc64fold::has_clmul()
}

/// [`update`] one bit at a time: slow, but a `const fn` and the plainest statement of the
/// algorithm (MSB first: each byte enters at the register's top).
pub const fn update_bitwise(mut state: u64, data: &[u8]) -> u64 {
    let mut i = 0;
    while i < data.len() {
        state ^= (data[i] as u64) << 56;
        let mut b = 0;
        while b < 8 {
            state = if state >> 63 == 1 {
                (state << 1) ^ POLY
            } else {
                state << 1
            };
            b += 1;
        }
        i += 1;
    }
    state
}

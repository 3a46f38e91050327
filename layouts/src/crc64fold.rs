//! CRC-64 by carry-less multiplication: the folding shared by [`crate::crc64xz`] (reflected,
//! SMART's leaves) and [`crate::crc64ecma`] (non-reflected, Catfish's nodes).
//!
//! The method is the folding of Intel's white paper "Fast CRC Computation for Generic
//! Polynomials Using PCLMULQDQ Instruction" (Gopal et al., 2009); the constants and the bit
//! conventions below are derived here, for a 64-bit polynomial `P = x^64 + POLY` and the two
//! register layouts. The code (`simd.rs`, x86_64 with PCLMULQDQ and SSE4.1) is one generic
//! function over a [`Variant`](simd::Variant): whether the CRC is reflected, and the
//! constants derived below from `POLY` by [`xpow_mod`] and [`barrett_mu`].
//!
//! **What the CRC is, in either bit order.** The register after feeding `M` (`n` bytes,
//! polynomial `M(x)`, first message bit the highest power) to a register holding `S` is
//! `(S·x^(8n) + M·x^64) mod P`. For `n ≥ 8` that is `W·x^64 mod P` with
//! `W = M + S·x^(8n-64)`: `S` XORed over the first 8 bytes. Zero bytes in front do not change
//! `W`, so the message is taken as zero-padded in front to a multiple of 16 bytes, and nothing
//! at its end moves. A reflected CRC takes a byte's bit 0 as its first (highest) bit, a
//! non-reflected one its bit 7; that difference is all in how 16 bytes become a register.
//!
//! **The two frames.** A 128-bit register holds a polynomial of degree < 128:
//! - *Reflected* (CRC-64/XZ): 16 bytes loaded little-endian, bit `k` is the coefficient of
//!   `x^(127-k)` (byte 0, bit 0 is the highest power). The low 64-bit lane holds the
//!   high-degree half `H` (lane bit `i` ↔ `x^(63-i)` of `H`, times `x^64`), the high lane the
//!   low-degree half `L`. The 64-bit register `S` is reflected too (bit `i` ↔ `x^(63-i)`), so
//!   `S·x^64` is `S` in the low lane.
//! - *Normal* (CRC-64/ECMA-182): 16 bytes loaded big-endian (a little-endian load, then
//!   `PSHUFB` reversing the bytes), bit `k` is the coefficient of `x^k` (byte 0, bit 7 is
//!   `x^127`). The high lane holds `H`, the low lane `L`, both in plain order; `S·x^64` is `S`
//!   in the high lane.
//!
//! Moving a 128-bit value by whole bytes toward lower degrees (dividing by `x^(8j)`, dropping
//! what falls off) is a left shift by `8j` in the reflected frame and a right shift in the
//! normal one; multiplying (dropping what passes `x^127`) is the opposite shift.
//!
//! **Multiplying.** `PCLMULQDQ` of two 64-bit lanes is their exact 127-bit product in plain
//! bit order. In the normal frame that is the product, bit `i` ↔ `x^i`. In the reflected
//! frame, for two reflected values (bit `i` ↔ `x^(63-i)`) the coefficient of `x^(126-m)` of
//! the product lands at bit `m`: read in the frame, the product times `x`. So a constant
//! meant to multiply by `x^e` is stored as `x^e mod P` (normal) or as `x^(e-1) mod P`,
//! reflected (reflected).
//!
//! **Folding.** An accumulator `A = H·x^64 + L` followed, `D` bits later, by block `B`
//! becomes `A·x^D + B ≡ H·(x^(D+64) mod P) + L·(x^D mod P) + B`: two multiplications of a
//! 64-bit half by a constant of degree < 64 (products of degree < 127: no overflow). Each lane
//! is multiplied by the constant in the same lane of a constant register (`PCLMULQDQ` with
//! selectors 0x00 and 0x11, XORed), so the constant register holds, lane by lane:
//! - reflected: low lane (`H`) `x^(D+63)`, high lane (`L`) `x^(D-1)`, both reflected;
//! - normal: low lane (`L`) `x^D`, high lane (`H`) `x^(D+64)`.
//!
//! `D = 128` folds one lane; four lanes fold by `D = 512` and are joined by 384, 256 and 128.
//!
//! **Finishing.** The last accumulator `X = H·x^64 + L` stands for `W` (up to multiples of
//! `P`), and the CRC is `X·x^64 mod P = (H·x^128 + L·x^64) mod P`: `H` is multiplied by
//! `x^128 mod P` (constant `x^128`, normal; `x^127` reflected) and `L` moves to the
//! high-degree half (a byte shift of the register by 8), giving `Y` of degree < 128. Then
//! Barrett: with `mu = floor(x^128 / P) = x^64 + mu'`,
//! `q = floor(Y / P) = floor(T·mu / x^64) = T + floor(T·mu' / x^64)` for `T = floor(Y / x^64)`
//! (exact for degree < 128), and `Y mod P = (Y + q·P) mod x^64 = Y_low + (q·POLY mod x^64)`.
//! - Normal: `floor(T·mu' / x^64)` is the high lane of `T·mu'`, and `q·POLY mod x^64` the low
//!   lane of `q·POLY`.
//! - Reflected (`mu'` and `POLY` stored reflected, products times `x`): `floor(T·mu' / x^64)`
//!   is the low lane of the product shifted left one bit, and `q·POLY mod x^64` is the
//!   128-bit product shifted right 63 bits.
//!
//! **Checks.** Each CRC module's tests compare the carry-less result with the `crc` crate's
//! tables at every length 0..=4096 and every start alignment, from random registers; any one
//! wrong constant (or a wrong lane, shift or byte order) fails them at the first length that
//! reaches it. `crc64xz`'s tests also multiply [`barrett_mu`] back. (One bit is free: the
//! `x^0` coefficient of `mu'` only ever adds `T` itself, of degree < 64, to a product whose
//! high lane alone is used, so flipping it changes nothing; every other bit matters.)

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) mod simd;

/// True when this CPU runs the carry-less folding (PCLMULQDQ, SSSE3 and SSE4.1, asked once):
/// both CRC-64 modules' `has_clmul`.
pub(crate) fn has_clmul() -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        simd::available()
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        false
    }
}

/// `x^e mod P` for `P = x^64 + poly`, normal bit order (bit `i` is the coefficient of `x^i`).
#[cfg_attr(
    not(all(target_arch = "x86_64", target_feature = "sse2")),
    allow(dead_code)
)]
pub(crate) const fn xpow_mod(poly: u64, e: u32) -> u64 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < e {
        let top = r >> 63;
        r <<= 1;
        if top == 1 {
            r ^= poly;
        }
        i += 1;
    }
    r
}

/// `floor(x^128 / P)` for `P = x^64 + poly`, without its `x^64` term, normal bit order (the
/// Barrett constant).
#[cfg_attr(
    not(all(target_arch = "x86_64", target_feature = "sse2")),
    allow(dead_code)
)]
pub(crate) const fn barrett_mu(poly: u64) -> u64 {
    // x^128 = x^64·P + poly·x^64: the quotient's x^64 bit is set and the remainder so far is
    // poly·x^64 (degree < 128). Then one long-division step per lower degree.
    let p = (1u128 << 64) | poly as u128;
    let mut rem = (poly as u128) << 64;
    let mut q: u64 = 0;
    let mut d = 127;
    while d >= 64 {
        if (rem >> d) & 1 == 1 {
            q |= 1 << (d - 64);
            rem ^= p << (d - 64);
        }
        d -= 1;
    }
    q
}

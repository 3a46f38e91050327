//! CRC-64/XZ by carry-less multiplication (x86_64, PCLMULQDQ + SSE4.1).
//!
//! The method is the folding of Intel's white paper "Fast CRC Computation for Generic
//! Polynomials Using PCLMULQDQ Instruction" (Gopal et al., 2009); the constants and the bit
//! conventions below are derived here, for this polynomial and this register layout.
//!
//! **Frame.** A 128-bit register loaded little-endian from 16 message bytes holds a
//! polynomial of degree < 128 whose bit `k` is the coefficient of `x^(127-k)` (reflected
//! input: byte 0, bit 0 is the highest power). Its low 64-bit half holds the high-degree
//! half `H` (bit `i` ↔ `x^(63-i)` of `H`, times `x^64`), its high half the low-degree half `L`.
//!
//! **What the CRC is.** With `P = x^64 + POLY`, the register after feeding `M` (`n` bytes,
//! polynomial `M(x)`) to a register holding `S` is `(S·x^(8n) + M·x^64) mod P`. For `n ≥ 8`
//! that is `W·x^64 mod P` with `W = M + S·x^(8n-64)`: `S` XORed into the first 8 bytes. Zero
//! bytes in front do not change `W`, so the message is taken as zero-padded in front to a
//! multiple of 16 bytes, and nothing at its end moves.
//!
//! **Multiplying.** `PCLMULQDQ` of two reflected 64-bit values (bit `i` ↔ `x^(63-i)`) puts
//! the coefficient of `x^(126-m)` of their product at bit `m`: read in the frame, that is the
//! product times `x`. So a constant meant to multiply by `x^e` is stored as `x^(e-1) mod P`,
//! reflected.
//!
//! **Folding.** An accumulator `A = H·x^64 + L` followed, `D` bits later, by block `B`
//! becomes `A·x^D + B ≡ H·(x^(D+64) mod P) + L·(x^D mod P) + B`: two multiplications of a
//! 64-bit half by a constant of degree < 64 (products of degree < 127: no overflow), with
//! constants `x^(D+63)` for the low half and `x^(D-1)` for the high half. `D = 128` folds
//! one lane; four lanes fold by `D = 512` and are joined by 384, 256 and 128.
//!
//! **Finishing.** The last accumulator `X = H·x^64 + L` stands for `W` (up to multiples of
//! `P`), and the CRC is `X·x^64 mod P = (H·x^128 + L·x^64) mod P`: `H` is multiplied by
//! `x^128 mod P` (constant `x^127`) and `L` moves to the high-degree half, giving `Y` of
//! degree < 128. Then Barrett: with `mu = floor(x^128 / P) = x^64 + mu'`,
//! `q = floor(Y / P) = floor(T·mu / x^64) = T + floor(T·mu' / x^64)` for `T = floor(Y / x^64)`
//! (exact for degree < 128), and `Y mod P = (Y + q·P) mod x^64 = Y_low + (q·POLY mod x^64)`.
//! In the reflected layout `floor(T·mu' / x^64)` is the low half of the product shifted
//! left one bit, and `q·POLY mod x^64` is the 128-bit product shifted right 63 bits.
use super::{POLY, barrett_mu, xpow_mod};
use core::arch::x86_64::*;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// `x^e mod P`, reflected (bit `i` ↔ `x^(63-i)`).
const fn refl(e: u32) -> u64 {
    xpow_mod(e).reverse_bits()
}

/// Fold constants for a distance of `d` bits: (low-half multiplier, high-half multiplier).
const fn fold_by(d: u32) -> (u64, u64) {
    (refl(d + 63), refl(d - 1))
}

const FOLD_128: (u64, u64) = fold_by(128);
const FOLD_256: (u64, u64) = fold_by(256);
const FOLD_384: (u64, u64) = fold_by(384);
const FOLD_512: (u64, u64) = fold_by(512);
/// `x^128 mod P`, for the first finishing step.
const X128: u64 = refl(127);
/// Barrett's `mu'` (`floor(x^128 / P)` less its `x^64` term), reflected.
const MU: u64 = barrett_mu().reverse_bits();
/// `POLY` (`P` less its `x^64` term), reflected.
const P_LOW: u64 = POLY.reverse_bits();

/// Whether the CPU has PCLMULQDQ and SSE4.1: 0 not asked yet, 1 no, 2 yes.
static HAS: AtomicU8 = AtomicU8::new(0);

/// True when this CPU has PCLMULQDQ and SSE4.1 (CPUID asked once, the answer cached).
#[inline]
pub(super) fn available() -> bool {
    match HAS.load(Relaxed) {
        2 => true,
        1 => false,
        _ => detect(),
    }
}

#[cold]
fn detect() -> bool {
    // `__cpuid` is an unsafe fn on older toolchains and a safe one on newer ones.
    #[allow(unused_unsafe)]
    // SAFETY: every x86_64 CPU has the CPUID instruction, and leaf 1 always exists.
    let ecx = unsafe { __cpuid(1) }.ecx;
    // Leaf 1, ECX: bit 1 PCLMULQDQ, bit 19 SSE4.1.
    let has = ecx & (1 << 1) != 0 && ecx & (1 << 19) != 0;
    HAS.store(if has { 2 } else { 1 }, Relaxed);
    has
}

/// A register from its two 64-bit halves.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1")]
fn pair(lo: u64, hi: u64) -> __m128i {
    _mm_set_epi64x(hi as i64, lo as i64)
}

/// A register from a 128-bit integer (little-endian, as a 16-byte load gives).
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1")]
fn wide(v: u128) -> __m128i {
    pair(v as u64, (v >> 64) as u64)
}

/// The 16 bytes of `data` at `at`.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1")]
fn load(data: &[u8], at: usize) -> __m128i {
    let b = &data[at..at + 16];
    // SAFETY: `b` is 16 readable bytes; an unaligned load has no alignment requirement.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// The first 16 bytes of `data` as a little-endian integer (`data` has at least 16).
#[inline]
fn first_u128(data: &[u8]) -> u128 {
    let mut w = [0u8; 16];
    w.copy_from_slice(&data[..16]);
    u128::from_le_bytes(w)
}

/// `x` moved `k.0`/`k.1` (fold constants of one distance) further along the message.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1")]
fn fold(x: __m128i, k: __m128i) -> __m128i {
    _mm_xor_si128(
        _mm_clmulepi64_si128::<0x00>(x, k),
        _mm_clmulepi64_si128::<0x11>(x, k),
    )
}

/// `Y mod P` for `Y` of degree < 128 in the frame: the reflected 64-bit register.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1")]
fn reduce(y: __m128i) -> u64 {
    let t = _mm_cvtsi128_si64(y) as u64;
    let y_low = _mm_extract_epi64::<1>(y) as u64;
    let r = _mm_clmulepi64_si128::<0x00>(y, pair(MU, 0));
    let q = t ^ ((_mm_cvtsi128_si64(r) as u64) << 1);
    let p = _mm_clmulepi64_si128::<0x00>(pair(q, 0), pair(P_LOW, 0));
    let p_lo = _mm_cvtsi128_si64(p) as u64;
    let p_hi = _mm_extract_epi64::<1>(p) as u64;
    y_low ^ ((p_lo >> 63) | (p_hi << 1))
}

/// `X·x^64 mod P`: the register for a message whose folded value is `x`.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1")]
fn finish(x: __m128i) -> u64 {
    let y = _mm_xor_si128(
        _mm_clmulepi64_si128::<0x00>(x, pair(X128, 0)),
        _mm_srli_si128::<8>(x),
    );
    reduce(y)
}

/// Fewer than 16 bytes: one register, built in an integer.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1")]
fn short(state: u64, data: &[u8]) -> u64 {
    let n = data.len();
    let mut w = [0u8; 16];
    w[..n].copy_from_slice(data);
    let m = u128::from_le_bytes(w);
    let s = state as u128;
    if n <= 8 {
        // S·x^(8n) + M·x^64 has degree < 128 itself: M ends at frame byte 8, S at 16 - n.
        reduce(wide((m << (8 * (8 - n))) ^ (s << (64 - 8 * n))))
    } else {
        // W = M + S·x^(8n-64): S over M's first 8 bytes, the whole right-aligned.
        finish(wide((m ^ s) << (8 * (16 - n))))
    }
}

/// Feeds `data` to the reflected CRC-64/XZ register `state`.
#[target_feature(enable = "pclmulqdq,sse4.1")]
pub(super) fn update(state: u64, data: &[u8]) -> u64 {
    let n = data.len();
    if n < 16 {
        return short(state, data);
    }
    let k128 = pair(FOLD_128.0, FOLD_128.1);
    let s = state as u128;
    // The first accumulator: the message's first `16 + n % 16` bytes (or 16), zero-padded in
    // front to whole blocks, with S XORed over its first 8 bytes.
    let k = n % 16;
    let (mut x, mut off) = if k == 0 {
        (_mm_xor_si128(load(data, 0), pair(state, 0)), 16)
    } else {
        // Block one: zeros, then bytes 0..k; block two: bytes k..k+16. S covers bytes 0..8,
        // so its bytes past k (when k < 8) land at the start of block two.
        let a = (first_u128(data) ^ s) << (8 * (16 - k));
        let b = _mm_xor_si128(load(data, k), wide(s >> (8 * k)));
        (_mm_xor_si128(fold(wide(a), k128), b), k + 16)
    };
    // From here `n - off` is a multiple of 16.
    if n - off >= 112 {
        let k512 = pair(FOLD_512.0, FOLD_512.1);
        let mut a = [
            x,
            load(data, off),
            load(data, off + 16),
            load(data, off + 32),
        ];
        off += 48;
        while n - off >= 64 {
            for (i, lane) in a.iter_mut().enumerate() {
                *lane = _mm_xor_si128(fold(*lane, k512), load(data, off + 16 * i));
            }
            off += 64;
        }
        let l0 = fold(a[0], pair(FOLD_384.0, FOLD_384.1));
        let l1 = fold(a[1], pair(FOLD_256.0, FOLD_256.1));
        let l2 = fold(a[2], k128);
        x = _mm_xor_si128(_mm_xor_si128(l0, l1), _mm_xor_si128(l2, a[3]));
    }
    while off < n {
        x = _mm_xor_si128(fold(x, k128), load(data, off));
        off += 16;
    }
    finish(x)
}

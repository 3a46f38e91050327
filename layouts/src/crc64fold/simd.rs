//! The carry-less CRC-64 on x86_64 (PCLMULQDQ, SSSE3 and SSE4.1): CPU detection and one
//! folding function generic over the bit order (the derivation is in the parent module).
use super::{barrett_mu, xpow_mod};
use core::arch::x86_64::*;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// The constants of one CRC, as the registers take them.
pub(crate) struct Consts {
    /// Fold constants for 128, 256, 384 and 512 bits, each as (low lane, high lane).
    fold: [(u64, u64); 4],
    /// Multiplies `H` by `x^128` in the first finishing step.
    x128: u64,
    /// Barrett's `mu'` (`floor(x^128 / P)` less its `x^64` term).
    mu: u64,
    /// `P` less its `x^64` term.
    poly: u64,
}

impl Consts {
    /// The constants of a reflected CRC of `P = x^64 + poly` (`poly` in normal bit order).
    pub(crate) const fn reflected(poly: u64) -> Consts {
        // `x^e mod P`, reflected (bit `i` ↔ `x^(63-i)`).
        const fn refl(poly: u64, e: u32) -> u64 {
            xpow_mod(poly, e).reverse_bits()
        }
        // Low lane `H`: `x^(D+64)`, stored as `x^(D+63)`; high lane `L`: `x^D` as `x^(D-1)`.
        const fn by(poly: u64, d: u32) -> (u64, u64) {
            (refl(poly, d + 63), refl(poly, d - 1))
        }
        Consts {
            fold: [by(poly, 128), by(poly, 256), by(poly, 384), by(poly, 512)],
            x128: refl(poly, 127),
            mu: barrett_mu(poly).reverse_bits(),
            poly: poly.reverse_bits(),
        }
    }

    /// The constants of a non-reflected CRC of `P = x^64 + poly`.
    pub(crate) const fn normal(poly: u64) -> Consts {
        // Low lane `L`: `x^D`; high lane `H`: `x^(D+64)`.
        const fn by(poly: u64, d: u32) -> (u64, u64) {
            (xpow_mod(poly, d), xpow_mod(poly, d + 64))
        }
        Consts {
            fold: [by(poly, 128), by(poly, 256), by(poly, 384), by(poly, 512)],
            x128: xpow_mod(poly, 128),
            mu: barrett_mu(poly),
            poly,
        }
    }
}

/// One CRC: its bit order and constants (compile-time, so the generic code keeps one path).
pub(crate) trait Variant {
    /// Reflected input and register (the frame of `crc64xz`), or normal (`crc64ecma`).
    const REFLECTED: bool;
    /// [`Consts::reflected`] or [`Consts::normal`] of the polynomial, as `REFLECTED` says.
    const K: Consts;
}

/// Whether the CPU has PCLMULQDQ, SSSE3 and SSE4.1: 0 not asked yet, 1 no, 2 yes.
static HAS: AtomicU8 = AtomicU8::new(0);

/// True when this CPU has PCLMULQDQ, SSSE3 and SSE4.1 (CPUID asked once, the answer cached).
#[inline]
pub(crate) fn available() -> bool {
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
    // Leaf 1, ECX: bit 1 PCLMULQDQ, bit 9 SSSE3, bit 19 SSE4.1.
    let has = ecx & (1 << 1) != 0 && ecx & (1 << 9) != 0 && ecx & (1 << 19) != 0;
    HAS.store(if has { 2 } else { 1 }, Relaxed);
    has
}

/// A register from its two 64-bit lanes.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
fn pair(lo: u64, hi: u64) -> __m128i {
    _mm_set_epi64x(hi as i64, lo as i64)
}

/// A register from a 128-bit integer (low lane its low 64 bits).
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
fn wide(v: u128) -> __m128i {
    pair(v as u64, (v >> 64) as u64)
}

/// The 16 bytes of `data` at `at` as a register of the frame (byte-reversed when normal).
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
fn load<V: Variant>(data: &[u8], at: usize) -> __m128i {
    let b = &data[at..at + 16];
    // SAFETY: `b` is 16 readable bytes; an unaligned load has no alignment requirement.
    let v = unsafe { _mm_loadu_si128(b.as_ptr().cast()) };
    if V::REFLECTED {
        v
    } else {
        // Byte i of the result is byte 15 - i of `v`.
        let rev = wide(u128::from_le_bytes([
            15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
        ]));
        _mm_shuffle_epi8(v, rev)
    }
}

/// The first 16 bytes of `b` as an integer of the frame (what [`load`] gives, in a `u128`).
#[inline]
fn block<V: Variant>(b: &[u8]) -> u128 {
    let mut w = [0u8; 16];
    w.copy_from_slice(&b[..16]);
    if V::REFLECTED {
        u128::from_le_bytes(w)
    } else {
        u128::from_be_bytes(w)
    }
}

/// `v / x^(8j)`: `j < 16` bytes toward lower degrees, the lowest `j` bytes dropped.
#[inline]
fn down<V: Variant>(v: u128, j: usize) -> u128 {
    if V::REFLECTED {
        v << (8 * j)
    } else {
        v >> (8 * j)
    }
}

/// `v·x^(8j) mod x^128`: `j < 16` bytes toward higher degrees, the highest `j` dropped.
#[inline]
fn up<V: Variant>(v: u128, j: usize) -> u128 {
    if V::REFLECTED {
        v >> (8 * j)
    } else {
        v << (8 * j)
    }
}

/// `S·x^64`: the 64-bit register as the high-degree half of a block.
#[inline]
fn top<V: Variant>(s: u64) -> u128 {
    if V::REFLECTED {
        s as u128
    } else {
        (s as u128) << 64
    }
}

/// `x` moved along the message by the distance of `k` (fold constants, lane by lane).
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
fn fold(x: __m128i, k: __m128i) -> __m128i {
    _mm_xor_si128(
        _mm_clmulepi64_si128::<0x00>(x, k),
        _mm_clmulepi64_si128::<0x11>(x, k),
    )
}

/// The fold constants of `V` for `i + 1` blocks of 128 bits, as a register.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
fn fold_k<V: Variant>(i: usize) -> __m128i {
    let (lo, hi) = V::K.fold[i];
    pair(lo, hi)
}

/// `Y mod P` for `Y` of degree < 128 in the frame: the 64-bit register.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
fn reduce<V: Variant>(y: __m128i) -> u64 {
    let lo = _mm_cvtsi128_si64(y) as u64;
    let hi = _mm_extract_epi64::<1>(y) as u64;
    if V::REFLECTED {
        let (t, y_low) = (lo, hi);
        let r = _mm_clmulepi64_si128::<0x00>(pair(t, 0), pair(V::K.mu, 0));
        let q = t ^ ((_mm_cvtsi128_si64(r) as u64) << 1);
        let p = _mm_clmulepi64_si128::<0x00>(pair(q, 0), pair(V::K.poly, 0));
        let p_lo = _mm_cvtsi128_si64(p) as u64;
        let p_hi = _mm_extract_epi64::<1>(p) as u64;
        y_low ^ ((p_lo >> 63) | (p_hi << 1))
    } else {
        let (t, y_low) = (hi, lo);
        let r = _mm_clmulepi64_si128::<0x00>(pair(t, 0), pair(V::K.mu, 0));
        let q = t ^ _mm_extract_epi64::<1>(r) as u64;
        let p = _mm_clmulepi64_si128::<0x00>(pair(q, 0), pair(V::K.poly, 0));
        y_low ^ _mm_cvtsi128_si64(p) as u64
    }
}

/// `X·x^64 mod P`: the register for a message whose folded value is `x`.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
fn finish<V: Variant>(x: __m128i) -> u64 {
    let k = pair(V::K.x128, 0);
    let y = if V::REFLECTED {
        // H in the low lane; L moves to the low (high-degree) lane.
        _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(x, k), _mm_srli_si128::<8>(x))
    } else {
        // H in the high lane; L moves to the high (high-degree) lane.
        _mm_xor_si128(_mm_clmulepi64_si128::<0x01>(x, k), _mm_slli_si128::<8>(x))
    };
    reduce::<V>(y)
}

/// Fewer than 16 bytes: one register, built in an integer.
#[inline]
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
fn short<V: Variant>(state: u64, data: &[u8]) -> u64 {
    let n = data.len();
    let mut w = [0u8; 16];
    w[..n].copy_from_slice(data);
    // M·x^(128-8n) (the message at the block's start) plus S·x^64.
    let v = block::<V>(&w) ^ top::<V>(state);
    if n <= 8 {
        // S·x^(8n) + M·x^64 has degree < 128 itself: the block over x^(64-8n).
        reduce::<V>(wide(down::<V>(v, 8 - n)))
    } else {
        // W = M + S·x^(8n-64): the block over x^(128-8n).
        finish::<V>(wide(down::<V>(v, 16 - n)))
    }
}

/// Feeds `data` to the CRC register `state` (reflected or not, as `V` says).
#[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
pub(crate) fn update<V: Variant>(state: u64, data: &[u8]) -> u64 {
    let n = data.len();
    if n < 16 {
        return short::<V>(state, data);
    }
    let k128 = fold_k::<V>(0);
    let s = top::<V>(state);
    // The first accumulator: the message's first `16 + n % 16` bytes (or 16), zero-padded in
    // front to whole blocks, with S XORed over its first 8 bytes.
    let k = n % 16;
    let (mut x, mut off) = if k == 0 {
        (_mm_xor_si128(load::<V>(data, 0), wide(s)), 16)
    } else {
        // Block one: zeros, then bytes 0..k; block two: bytes k..k+16. S covers bytes 0..8,
        // so its bytes past k (when k < 8) land at the start of block two.
        let a = down::<V>(block::<V>(data) ^ s, 16 - k);
        let b = _mm_xor_si128(load::<V>(data, k), wide(up::<V>(s, k)));
        (_mm_xor_si128(fold(wide(a), k128), b), k + 16)
    };
    // From here `n - off` is a multiple of 16.
    if n - off >= 112 {
        let k512 = fold_k::<V>(3);
        let mut a = [
            x,
            load::<V>(data, off),
            load::<V>(data, off + 16),
            load::<V>(data, off + 32),
        ];
        off += 48;
        while n - off >= 64 {
            for (i, lane) in a.iter_mut().enumerate() {
                *lane = _mm_xor_si128(fold(*lane, k512), load::<V>(data, off + 16 * i));
            }
            off += 64;
        }
        let l0 = fold(a[0], fold_k::<V>(2));
        let l1 = fold(a[1], fold_k::<V>(1));
        let l2 = fold(a[2], k128);
        x = _mm_xor_si128(_mm_xor_si128(l0, l1), _mm_xor_si128(l2, a[3]));
    }
    while off < n {
        x = _mm_xor_si128(fold(x, k128), load::<V>(data, off));
        off += 16;
    }
    finish::<V>(x)
}

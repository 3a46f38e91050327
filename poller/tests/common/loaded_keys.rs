//! The keys bulk-loaded under the lincheck workload (`bulk_load`, `canrt_bulk`): where they
//! lie, their values, and the check of a scan over them.
//!
//! Included by the tests that use it (`#[path = "common/loaded_keys.rs"] mod loaded_keys;`).

/// Loaded keys: below every lincheck key (cold keys are `client << 40 | x`, client >= 1).
/// Loaded key `i` is `BASE + 3 * i`; a key inserted between `i` and `i + 1` is one more.
pub const BASE: u64 = 0xA1_2C3D_0000;

/// Loaded key `i`'s value.
pub fn value(i: u64) -> [u8; 8] {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_le_bytes()
}

/// Whether a scan returned exactly the keys `want`, in order: else how `got` differs.
pub fn scanned_exactly<T: PartialEq>(got: &[T], want: &[T]) -> Result<(), String> {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        return Err(format!(
            "scan: {} keys, {} wanted, first difference at {first:?}",
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

//! Bit-packed 8-byte words: `const` field accessors used by every packed format.
//!
//! A field is described by its lowest bit and its width. `get` and `set` are total functions;
//! `set_checked` refuses a value that does not fit instead of silently truncating it.
use crate::LayoutError;

/// A bit field inside a `u64`: bits `lo .. lo + width`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Field name, used in `OutOfRange` errors.
    pub name: &'static str,
    /// Lowest bit of the field (0 = least significant).
    pub lo: u32,
    /// Width of the field in bits (1..=64).
    pub width: u32,
}

impl Field {
    /// A field of `width` bits starting at bit `lo`; fails (at compile time in const contexts)
    /// unless it fits in a u64.
    pub const fn new(name: &'static str, lo: u32, width: u32) -> Field {
        assert!(width >= 1 && lo + width <= 64, "field outside a u64");
        Field { name, lo, width }
    }

    /// The largest value the field holds.
    pub const fn max(&self) -> u64 {
        if self.width == 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    /// The field's bits set in an otherwise-zero word.
    pub const fn mask(&self) -> u64 {
        self.max() << self.lo
    }

    /// The field's value in `word`, shifted down to bit 0.
    pub const fn get(&self, word: u64) -> u64 {
        (word >> self.lo) & self.max()
    }

    /// Sets the field, truncating `value` to the field's width.
    pub const fn set(&self, word: u64, value: u64) -> u64 {
        (word & !self.mask()) | ((value & self.max()) << self.lo)
    }

    /// Sets the field, or says which field the value does not fit.
    pub const fn set_checked(&self, word: u64, value: u64) -> Result<u64, LayoutError> {
        if value > self.max() {
            return Err(LayoutError::OutOfRange {
                field: self.name,
                value,
            });
        }
        Ok(self.set(word, value))
    }

    /// True when two fields share no bit.
    pub const fn disjoint(&self, other: &Field) -> bool {
        self.mask() & other.mask() == 0
    }
}

/// Compile-time check that a list of fields do not overlap. Use in a `const _: () = ...;`.
pub const fn assert_disjoint(fields: &[Field]) {
    let mut i = 0;
    while i < fields.len() {
        let mut j = i + 1;
        while j < fields.len() {
            assert!(fields[i].disjoint(&fields[j]), "overlapping bit fields");
            j += 1;
        }
        i += 1;
    }
}

/// Reads a little-endian u64 at `at`, or says the slice is short.
pub fn read_u64(bytes: &[u8], at: usize) -> Result<u64, LayoutError> {
    let end = at.checked_add(8).ok_or(LayoutError::Short {
        need: usize::MAX,
        got: bytes.len(),
    })?;
    match bytes.get(at..end) {
        Some(b) => {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            Ok(u64::from_le_bytes(w))
        }
        None => Err(LayoutError::Short {
            need: end,
            got: bytes.len(),
        }),
    }
}

/// Reads a little-endian u32 at `at`, or says the slice is short.
pub(crate) fn read_u32(bytes: &[u8], at: usize) -> Result<u32, LayoutError> {
    let end = at.checked_add(4).ok_or(LayoutError::Short {
        need: usize::MAX,
        got: bytes.len(),
    })?;
    match bytes.get(at..end) {
        Some(b) => {
            let mut w = [0u8; 4];
            w.copy_from_slice(b);
            Ok(u32::from_le_bytes(w))
        }
        None => Err(LayoutError::Short {
            need: end,
            got: bytes.len(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: Field = Field::new("a", 0, 8);
    const B: Field = Field::new("b", 8, 48);
    const C: Field = Field::new("c", 63, 1);
    const _: () = assert_disjoint(&[A, B, C]);

    proptest! {
        #[test]
        fn fields_round_trip_and_do_not_disturb_each_other(w in any::<u64>(), a in 0u64..256, b in 0u64..(1 << 48)) {
            let w2 = B.set(A.set(w, a), b);
            prop_assert_eq!(A.get(w2), a);
            prop_assert_eq!(B.get(w2), b);
            prop_assert_eq!(C.get(w2), C.get(w));
        }
    }

    #[test]
    fn set_checked_refuses_overflow() {
        assert_eq!(
            A.set_checked(0, 256),
            Err(LayoutError::OutOfRange {
                field: "a",
                value: 256
            })
        );
        assert_eq!(A.set_checked(0, 255), Ok(255));
    }

    #[test]
    fn short_reads_are_errors() {
        assert!(read_u64(&[0; 7], 0).is_err());
        assert_eq!(read_u64(&[1, 0, 0, 0, 0, 0, 0, 0], 0), Ok(1));
        assert!(read_u32(&[0; 8], usize::MAX - 1).is_err());
    }
}

//! The one error type of every decoder in this crate.
use core::fmt;

/// Why a byte string is not a valid value of a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// Fewer bytes than the format needs.
    Short {
        /// Bytes the format needs.
        need: usize,
        /// Bytes supplied.
        got: usize,
    },
    /// A magic number or type tag that is not this format's.
    BadMagic {
        /// The value this format expects.
        expected: u64,
        /// The value read.
        found: u64,
    },
    /// A version this build does not read.
    BadVersion {
        /// The version read.
        found: u32,
    },
    /// A checksum over the bytes does not match the one stored with them (torn or corrupt).
    BadChecksum {
        /// The checksum stored with the bytes.
        stored: u64,
        /// The checksum computed over them.
        computed: u64,
    },
    /// A field holds a value outside its documented range.
    OutOfRange {
        /// Name of the field.
        field: &'static str,
        /// The offending value.
        value: u64,
    },
    /// Fields that are each valid but contradict one another.
    Inconsistent {
        /// Which fields disagree.
        what: &'static str,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayoutError::Short { need, got } => write!(f, "need {need} bytes, got {got}"),
            LayoutError::BadMagic { expected, found } => {
                write!(f, "bad magic {found:#018x} (expected {expected:#018x})")
            }
            LayoutError::BadVersion { found } => write!(f, "unsupported format version {found}"),
            LayoutError::BadChecksum { stored, computed } => write!(
                f,
                "checksum mismatch: stored {stored:#x}, computed {computed:#x} (torn or corrupt)"
            ),
            LayoutError::OutOfRange { field, value } => {
                write!(f, "field `{field}` out of range: {value:#x}")
            }
            LayoutError::Inconsistent { what } => write!(f, "inconsistent fields: {what}"),
        }
    }
}

impl core::error::Error for LayoutError {}

//! Persistence for remora's memory nodes.
//!
//! * [`flush`]: cache-line write-back (`clwb`, else `clflushopt`, else `clflush`, picked once
//!   from CPUID) and `sfence`, as inline assembly; [`persist`] = flush every touched line, then
//!   fence.
//! * [`region`]: [`PersistentRegion`], a mapping that is either a DAX file mapped with
//!   `MAP_SHARED_VALIDATE | MAP_SYNC` (real persistent memory) or DRAM with an emulated write
//!   latency per flushed line. All accesses are bounds-checked and go through atomics or
//!   volatile operations, since a NIC or another process may touch the memory concurrently.
//! * [`recorder`]: [`Recorder`], a test double that tracks which cache lines were written,
//!   flushed and fenced, and produces the crash images a power failure could leave at every
//!   persistence point.
//! * [`PersistMem`]: the interface both implement, so recovery code written against it runs
//!   on real memory and under the recorder alike.
//!
//! # Emulation versus real NVM
//!
//! On a DRAM region flushes and fences run the same instructions as on NVM, but nothing
//! survives a power failure or even the process exit (unless another process maps the memfd).
//! The emulated latency adds a busy wait per flushed cache line to mimic the slower media
//! writes of NVM; it does not emulate NVM's lower read bandwidth, its 256-byte internal write
//! granularity, or the write-back that real caches may do on their own at any time. Crash
//! behavior is what the [`Recorder`] is for.
// Docs link private items on purpose (for readers of the source, and of
// `cargo doc --document-private-items`); broken links stay errors.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(missing_docs)]

pub mod flush;
pub mod latency;
pub mod recorder;
#[cfg(target_os = "linux")]
pub mod region;

use core::fmt;
use std::path::PathBuf;

pub use flush::{CACHE_LINE, FlushKind, flush_kind, persist, persist_slice, sfence};
pub use recorder::{CrashImage, CrashImages, CrashState, Recorder};
#[cfg(target_os = "linux")]
pub use region::{DramBacking, PersistentRegion, RegionKind};

/// Errors of persistent regions and of the recorder. Never a panic for bad input.
#[derive(Debug)]
pub enum PmemError {
    /// `[offset, offset + len)` does not fit in a region of `size` bytes (or overflows).
    OutOfBounds {
        /// First byte of the access, from the start of the region.
        offset: usize,
        /// Length of the access in bytes.
        len: usize,
        /// Size of the region in bytes.
        size: usize,
    },
    /// An 8-byte word access at an offset that is not a multiple of `align`.
    Misaligned {
        /// Offset of the access, from the start of the region.
        offset: usize,
        /// Alignment the access needs, in bytes (8 for a word).
        align: usize,
    },
    /// The kernel refused `MAP_SYNC` for this file: it is not on a filesystem mounted with DAX.
    NotDax {
        /// The file that was to be mapped.
        path: PathBuf,
        /// The `mmap` error (`EOPNOTSUPP`).
        source: std::io::Error,
    },
    /// The file is shorter than the requested mapping (mapping past the end would fault).
    FileTooSmall {
        /// The file that was to be mapped.
        path: PathBuf,
        /// Its length in bytes.
        file_len: u64,
        /// The mapping length asked for, in bytes.
        wanted: usize,
    },
    /// A system call failed; `what` says which, `path` names the file when there is one.
    Io {
        /// The failing call (e.g. `"open"`, `"posix_fallocate"`).
        what: &'static str,
        /// The file it was about, if any.
        path: Option<PathBuf>,
        /// The OS error.
        source: std::io::Error,
    },
    /// An argument that can never be valid (for example a zero-length region).
    InvalidArgument(&'static str),
}

impl fmt::Display for PmemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmemError::OutOfBounds { offset, len, size } => write!(
                f,
                "access of {len} bytes at offset {offset} is out of bounds of a {size}-byte region"
            ),
            PmemError::Misaligned { offset, align } => {
                write!(f, "offset {offset} is not {align}-byte aligned")
            }
            PmemError::NotDax { path, source } => write!(
                f,
                "{} is not on a DAX filesystem: the kernel refused MAP_SYNC ({source}); \
                 use a file on an fsdax pmem device mounted with -o dax, or a DRAM region",
                path.display()
            ),
            PmemError::FileTooSmall {
                path,
                file_len,
                wanted,
            } => write!(
                f,
                "{} has {file_len} bytes, fewer than the {wanted} bytes to map",
                path.display()
            ),
            PmemError::Io { what, path, source } => match path {
                Some(p) => write!(f, "{what} failed for {}: {source}", p.display()),
                None => write!(f, "{what} failed: {source}"),
            },
            PmemError::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
        }
    }
}

impl std::error::Error for PmemError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PmemError::NotDax { source, .. } | PmemError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Checks that `[offset, offset + len)` lies in `size` bytes.
#[inline]
pub(crate) fn check_range(offset: usize, len: usize, size: usize) -> Result<(), PmemError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(PmemError::OutOfBounds { offset, len, size }),
    }
}

/// Checks an 8-byte word access at `offset`: in bounds and 8-byte aligned.
#[inline]
pub(crate) fn check_word(offset: usize, size: usize) -> Result<(), PmemError> {
    check_range(offset, 8, size)?;
    if offset & 7 != 0 {
        return Err(PmemError::Misaligned { offset, align: 8 });
    }
    Ok(())
}

/// Byte-addressed persistent memory: the real [`PersistentRegion`] or the test [`Recorder`].
///
/// Offsets are relative to the start of the memory. Stores become durable only after
/// [`flush`](PersistMem::flush) of their cache lines followed by a [`fence`](PersistMem::fence)
/// (or [`persist`](PersistMem::persist), which does both). Methods take `&self` because the
/// memory is shared: implementations use atomics or interior locking.
pub trait PersistMem {
    /// Size in bytes.
    fn len(&self) -> usize;

    /// Whether the memory has zero bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), PmemError>;

    /// Stores `data` at `offset` (not yet durable).
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), PmemError>;

    /// Writes back every cache line touched by `[offset, offset + len)`; durable after the
    /// next [`fence`](PersistMem::fence).
    fn flush(&self, offset: usize, len: usize) -> Result<(), PmemError>;

    /// Store fence: everything flushed before it is durable when it returns.
    fn fence(&self);

    /// [`flush`](PersistMem::flush) then [`fence`](PersistMem::fence).
    fn persist(&self, offset: usize, len: usize) -> Result<(), PmemError> {
        self.flush(offset, len)?;
        self.fence();
        Ok(())
    }

    /// Atomically loads the 8-byte word at `offset` (must be 8-byte aligned).
    fn load_u64(&self, offset: usize) -> Result<u64, PmemError>;

    /// Atomically stores the 8-byte word at `offset` (not yet durable).
    fn store_u64(&self, offset: usize, value: u64) -> Result<(), PmemError>;

    /// Compare-and-swap of the word at `offset`: stores `new` if it holds `expected`.
    /// Returns the value found, so it succeeded exactly when that equals `expected`
    /// (the semantics of an RDMA atomic).
    fn cas_u64(&self, offset: usize, expected: u64, new: u64) -> Result<u64, PmemError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_checks_reject_overflow_and_misalignment() {
        assert!(check_range(0, 10, 10).is_ok());
        assert!(check_range(10, 0, 10).is_ok());
        assert!(matches!(
            check_range(5, 6, 10),
            Err(PmemError::OutOfBounds {
                offset: 5,
                len: 6,
                size: 10
            })
        ));
        assert!(check_range(usize::MAX, 2, 10).is_err());
        assert!(check_word(8, 16).is_ok());
        assert!(matches!(
            check_word(4, 16),
            Err(PmemError::Misaligned {
                offset: 4,
                align: 8
            })
        ));
        assert!(matches!(
            check_word(16, 16),
            Err(PmemError::OutOfBounds { .. })
        ));
        let msg = check_range(5, 6, 10).unwrap_err().to_string();
        assert!(msg.contains("out of bounds"), "{msg}");
    }
}

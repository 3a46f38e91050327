//! Page-backed memory to register with the NIC: 2 MiB hugepages when the kernel has some
//! reserved (anonymous `MAP_HUGETLB`), else 4 KiB pages with transparent hugepages requested.
//!
//! The memory is shared with the NIC: once registered, the CPU reads and writes it only
//! through raw pointers ([`Arena::as_ptr`]), never through references that the NIC could
//! invalidate by writing.
use super::error::{VerbsError, errno};
use std::fmt;
use std::ptr::NonNull;

const HUGE: usize = 2 << 20;

/// What backs an arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Reserved 2 MiB hugepages (MAP_HUGETLB).
    Huge2M,
    /// 4 KiB pages, transparent hugepages requested (madvise).
    Small,
}

impl fmt::Display for PageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageKind::Huge2M => "2 MiB hugepages",
            PageKind::Small => "4 KiB pages (no hugepages reserved; THP requested)",
        })
    }
}

/// An anonymous, zero-filled mapping owned by its creator.
pub(crate) struct Arena {
    ptr: NonNull<u8>,
    len: usize,
    kind: PageKind,
}

// SAFETY: the arena is plain memory owned by this value; moving it to another thread moves
// the ownership of the mapping, which no other value refers to.
unsafe impl Send for Arena {}

impl Arena {
    /// Maps at least `len` bytes (rounded up to the page size used).
    pub fn new(len: usize) -> Result<Arena, VerbsError> {
        let len = len.max(1);
        let huge_len = len.next_multiple_of(HUGE);
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected. The result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                huge_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            let ptr = NonNull::new(p.cast()).ok_or(VerbsError::Sys {
                what: "mmap",
                errno: 0,
            })?;
            return Ok(Arena {
                ptr,
                len: huge_len,
                kind: PageKind::Huge2M,
            });
        }
        let small_len = len.next_multiple_of(4096);
        // SAFETY: as above, without MAP_HUGETLB.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                small_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(VerbsError::Sys {
                what: "mmap of a memory arena",
                errno: errno(),
            });
        }
        // SAFETY: advice on the mapping just created; failure only loses the hint.
        unsafe { libc::madvise(p, small_len, libc::MADV_HUGEPAGE) };
        let ptr = NonNull::new(p.cast()).ok_or(VerbsError::Sys {
            what: "mmap",
            errno: 0,
        })?;
        Ok(Arena {
            ptr,
            len: small_len,
            kind: PageKind::Small,
        })
    }

    /// The first byte of the mapping (page-aligned); valid for [`Arena::len`] bytes while
    /// the arena lives.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes mapped: the length asked for, rounded up to the page size used.
    pub fn len(&self) -> usize {
        self.len
    }

    /// What backs the mapping.
    pub fn kind(&self) -> PageKind {
        self.kind
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value owns; every registration of it is
        // dropped before (the owners keep their memory regions declared before the arena).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_zeroed_memory() {
        let a = Arena::new(10_000).unwrap();
        assert!(a.len() >= 10_000);
        // SAFETY: in bounds of a fresh private mapping nothing else uses.
        let b = unsafe { a.as_ptr().add(9_999).read() };
        assert_eq!(b, 0);
    }
}

//! Page-backed memory: anonymous arenas and shareable memfd mappings, on hugepages when the
//! machine has them.
//!
//! Every mapping tries, in order: explicit 2 MiB hugepages (`MAP_HUGETLB` / `MFD_HUGETLB`,
//! needs `vm.nr_hugepages` reserved), transparent hugepages (`madvise(MADV_HUGEPAGE)`, which
//! the kernel may or may not honour), then plain 4 KiB pages; [`Mapping::pages`] says which
//! one was used, so tools can print it.
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

const HUGE: usize = 2 << 20;

/// What backs a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Explicit 2 MiB hugepages.
    Huge2M,
    /// 4 KiB pages with `MADV_HUGEPAGE` asked (transparent hugepages, if the kernel agrees).
    TransparentHuge,
    /// Plain 4 KiB pages.
    Small4K,
}

impl fmt::Display for PageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageKind::Huge2M => "2 MiB hugepages (MAP_HUGETLB)",
            PageKind::TransparentHuge => "4 KiB pages + MADV_HUGEPAGE (transparent hugepages)",
            PageKind::Small4K => {
                "4 KiB pages (no hugepages reserved: echo N > /proc/sys/vm/nr_hugepages)"
            }
        })
    }
}

/// A page-aligned, zero-filled mapping, unmapped on drop. With an fd it can be shared with
/// another process (memfd + SCM_RIGHTS).
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    pages: PageKind,
    fd: Option<OwnedFd>,
}

// SAFETY: a Mapping is a plain region of memory; every access to its bytes goes through raw
// pointers and atomics by the code that owns it, never through references shared unsafely.
unsafe impl Send for Mapping {}
// SAFETY: as above; the struct itself is immutable after creation.
unsafe impl Sync for Mapping {}

fn mmap(len: usize, flags: i32, fd: RawFd) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping at a kernel-chosen address; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

/// Asks for transparent hugepages; true only if the kernel accepted the advice and its THP
/// policy for this kind of memory (`enabled` for anonymous, `shmem_enabled` for memfd) does
/// not rule them out.
fn advise_huge(p: NonNull<u8>, len: usize, shmem: bool) -> bool {
    let knob = if shmem { "shmem_enabled" } else { "enabled" };
    let policy = std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{knob}"))
        .unwrap_or_default();
    let off = policy.is_empty() || policy.contains("[never]") || policy.contains("[deny]");
    // SAFETY: advice on a mapping we own; it changes no content.
    let advised = unsafe { libc::madvise(p.as_ptr().cast(), len, libc::MADV_HUGEPAGE) == 0 };
    advised && !off
}

/// What backs a mapping of 4 KiB pages: transparent hugepages if asked for and allowed.
fn small_pages(ptr: NonNull<u8>, len: usize, shmem: bool) -> PageKind {
    if len >= HUGE && advise_huge(ptr, len, shmem) {
        PageKind::TransparentHuge
    } else {
        PageKind::Small4K
    }
}

fn memfd(name: &str, flags: u32) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: cname is a valid NUL-terminated string for the duration of the call.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn truncate(fd: &OwnedFd, len: usize) -> io::Result<()> {
    // SAFETY: ftruncate on an fd we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Mapping {
    /// A private anonymous mapping of at least `len` bytes (rounded up to a page).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        let len = len.max(1);
        let base = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if len >= HUGE {
            let hlen = len.next_multiple_of(HUGE);
            if let Ok(ptr) = mmap(hlen, base | libc::MAP_HUGETLB, -1) {
                return Ok(Mapping {
                    ptr,
                    len: hlen,
                    pages: PageKind::Huge2M,
                    fd: None,
                });
            }
        }
        let len = len.next_multiple_of(4096);
        let ptr = mmap(len, base, -1)?;
        let pages = small_pages(ptr, len, false);
        Ok(Mapping {
            ptr,
            len,
            pages,
            fd: None,
        })
    }

    /// A shared memfd mapping of exactly `len` bytes (rounded up to a page), shareable with
    /// another process through [`Mapping::fd`].
    pub fn shared(name: &str, len: usize) -> io::Result<Mapping> {
        let len = len.max(1);
        if len >= HUGE && len.is_multiple_of(HUGE) {
            let huge = libc::MFD_CLOEXEC | libc::MFD_HUGETLB | (21 << libc::MFD_HUGE_SHIFT);
            if let Ok(fd) = memfd(name, huge)
                && truncate(&fd, len).is_ok()
                && let Ok(ptr) = mmap(len, libc::MAP_SHARED | libc::MAP_POPULATE, fd.as_raw_fd())
            {
                return Ok(Mapping {
                    ptr,
                    len,
                    pages: PageKind::Huge2M,
                    fd: Some(fd),
                });
            }
        }
        let len = len.next_multiple_of(4096);
        let fd = memfd(name, libc::MFD_CLOEXEC)?;
        truncate(&fd, len)?;
        let ptr = mmap(len, libc::MAP_SHARED | libc::MAP_POPULATE, fd.as_raw_fd())?;
        let pages = small_pages(ptr, len, true);
        Ok(Mapping {
            ptr,
            len,
            pages,
            fd: Some(fd),
        })
    }

    /// Maps `len` bytes of a memfd received from another process. The file must be at least
    /// that long, or the mapping is refused (a short file would fault on access).
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: fstat fills a zeroed stat struct for an fd we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: st is a valid, writable stat struct.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if (st.st_size as u64) < len as u64 || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared file has {} bytes, peer announced {len}", st.st_size),
            ));
        }
        let ptr = mmap(len, libc::MAP_SHARED, fd.as_raw_fd())?;
        let pages = if st.st_blksize as usize >= HUGE {
            PageKind::Huge2M
        } else {
            PageKind::Small4K
        };
        Ok(Mapping {
            ptr,
            len,
            pages,
            fd: Some(fd),
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn pages(&self) -> PageKind {
        self.pages
    }
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping created by this struct and not yet unmapped;
        // nothing references it once the owner is dropped.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_and_shared_mappings_are_zeroed_and_sized() {
        let a = Mapping::anonymous(5000).unwrap();
        assert!(a.len() >= 5000);
        let s = Mapping::shared("remora-test", 3 << 20).unwrap();
        assert!(s.len() >= 3 << 20);
        // SAFETY: both mappings are at least one byte long and owned here.
        unsafe {
            assert_eq!(*a.as_ptr(), 0);
            assert_eq!(*s.as_ptr().add(s.len() - 1), 0);
        }
    }

    #[test]
    fn short_fd_is_refused() {
        let s = Mapping::shared("remora-short", 4096).unwrap();
        // SAFETY: dup of an fd we own.
        let dup = unsafe { libc::dup(s.fd().unwrap()) };
        // SAFETY: dup returned a fresh fd we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        assert!(Mapping::from_fd(fd, 8192).is_err());
    }
}

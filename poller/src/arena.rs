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
    /// An ordinary file, mapped shared (the page cache: survives the process, not power).
    File,
    /// Persistent memory: a DAX file mapped with `MAP_SYNC` (survives power loss once flushed).
    Dax,
}

impl fmt::Display for PageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageKind::Huge2M => "2 MiB hugepages (MAP_HUGETLB)",
            PageKind::TransparentHuge => "4 KiB pages + MADV_HUGEPAGE (transparent hugepages)",
            PageKind::Small4K => {
                "4 KiB pages (no hugepages reserved: echo N > /proc/sys/vm/nr_hugepages)"
            }
            PageKind::File => "an ordinary file (page cache: survives the process, not power)",
            PageKind::Dax => "persistent memory (DAX + MAP_SYNC)",
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
    /// A file mapping's locked descriptor (held apart from `fd`, which is handed to clients:
    /// a lock belongs to its open file description, and clients may outlive this process).
    _lock: Option<OwnedFd>,
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
                    _lock: None,
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
            _lock: None,
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
                    _lock: None,
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
            _lock: None,
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
            _lock: None,
        })
    }

    /// Maps the file at `path` shared, for a memory node that must outlive its process:
    /// creates it with `len` bytes if it is new or empty, else maps it whole (a `len` that
    /// disagrees with its size is an error). The file is locked (`flock`) for as long as the
    /// mapping lives, so a second memory node on it is refused. With `dax` the mapping uses
    /// `MAP_SYNC`, which only a DAX filesystem grants: flushed stores are then durable.
    /// Returns the mapping and whether the file held data already.
    pub fn file(
        path: &std::path::Path,
        len: Option<usize>,
        dax: bool,
    ) -> io::Result<(Mapping, bool)> {
        use std::os::unix::fs::OpenOptionsExt;
        let shown = path.display();
        let ctx =
            |e: io::Error, what: &str| io::Error::new(e.kind(), format!("{shown}: {what}: {e}"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| ctx(e, "opening"))?;
        let fd = OwnedFd::from(file);
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            return Err(if e.kind() == io::ErrorKind::WouldBlock {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{shown} is in use by another memory node (it holds the file's lock)"),
                )
            } else {
                ctx(e, "locking")
            });
        }
        // SAFETY: fstat fills a zeroed stat struct for an fd we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: st is a valid, writable stat struct.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(ctx(io::Error::last_os_error(), "fstat"));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{shown} is not a regular file"),
            ));
        }
        let size = st.st_size as usize;
        let existed = size > 0;
        let len = match (existed, len) {
            (true, Some(l)) if l != size => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{shown} holds a region of {size} bytes, but {l} bytes were asked for: \
                         give its size (or none), or a new file"
                    ),
                ));
            }
            (true, _) => size,
            (false, Some(l)) if l > 0 => {
                truncate(&fd, l).map_err(|e| ctx(e, "sizing"))?;
                l
            }
            (false, _) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{shown} is new or empty: say how large a region to make"),
                ));
            }
        };
        let flags = if dax {
            // MAP_SHARED_VALIDATE | MAP_SYNC: refused unless the file is on a DAX filesystem.
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC
        } else {
            libc::MAP_SHARED
        };
        let ptr = mmap(len, flags, fd.as_raw_fd()).inspect_err(|_| {
            if !existed {
                // Leave nothing behind that we made.
                let _ = std::fs::remove_file(path);
            }
        });
        let ptr = ptr.map_err(|e| {
            if dax
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
                )
            {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "{shown} is not on a DAX filesystem (MAP_SYNC refused): --pmem needs \
                         persistent memory (a /dev/pmem filesystem mounted with -o dax, or a \
                         devdax device); use --file for an ordinary file"
                    ),
                )
            } else {
                ctx(e, "mapping")
            }
        })?;
        let pages = if dax { PageKind::Dax } else { PageKind::File };
        // Clients get a descriptor of their own open of the file, without the lock.
        let share = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| ctx(e, "reopening for clients"))?;
        Ok((
            Mapping {
                ptr,
                len,
                pages,
                fd: Some(OwnedFd::from(share)),
                _lock: Some(fd),
            },
            existed,
        ))
    }

    /// First byte of the mapping (page-aligned). Valid for [`len`](Self::len) bytes while
    /// the mapping lives; other processes or a NIC may write it concurrently.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// Length of the mapping in bytes (the length asked for, after any rounding up to pages).
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-length mapping.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// What backs the mapping (hugepages, small pages, a file, persistent memory).
    pub fn pages(&self) -> PageKind {
        self.pages
    }
    /// The descriptor to hand to another process (SCM_RIGHTS) so it maps the same memory;
    /// `None` for a private anonymous mapping. It stays owned by the mapping.
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

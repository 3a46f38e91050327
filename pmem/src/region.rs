//! Persistent regions: a DAX file mapped with `MAP_SYNC`, or DRAM with emulated latency.
//!
//! # What `MAP_SYNC` guarantees
//!
//! A file on a filesystem mounted with `-o dax` (ext4 or xfs on an fsdax pmem device) can be
//! mapped so that loads and stores go straight to the persistent media, with no page cache.
//! `MAP_SYNC` (which the kernel only accepts together with `MAP_SHARED_VALIDATE`) adds that the
//! file's metadata needed to reach a written block (block allocation, extent maps) is made
//! durable by the kernel before the page fault that allocated it returns. So once the CPU has
//! flushed a line and fenced, the data is durable *and* findable after a crash, without
//! `msync`/`fsync`. On any other filesystem the kernel refuses the flag with `EOPNOTSUPP`;
//! [`PersistentRegion::open_dax`] then fails with [`PmemError::NotDax`] naming the file rather
//! than silently falling back to page-cache semantics, where flushes would not be enough.
//!
//! # DRAM regions
//!
//! [`PersistentRegion::dram`] maps anonymous memory, or a memfd whose descriptor
//! ([`PersistentRegion::fd`]) can be passed to another process to map the same pages. Flushes
//! and fences execute the real instructions; optionally each flushed cache line adds a
//! busy-wait of `write_latency_ns` (see [`crate::latency`]) to mimic NVM's slower writes. Nothing
//! is durable across a power failure.
//!
//! # Access rules
//!
//! The mapping may be written concurrently by other threads, processes or a NIC, so it is
//! never exposed as a Rust reference: 8-byte words are accessed through `AtomicU64`, byte
//! ranges through volatile loads and stores (8 bytes at a time where aligned). Every offset is
//! bounds-checked and a bad one yields a [`PmemError`], never a panic.

use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::flush::{self, FlushKind};
use crate::{PersistMem, PmemError, check_range, check_word, latency};

/// How a DRAM region is backed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DramBacking {
    /// Anonymous shared mapping (shared with forked children only).
    Anonymous,
    /// A memfd: its descriptor lets another process map the same memory.
    Memfd,
}

/// Which kind of memory a [`PersistentRegion`] maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// A file on a DAX filesystem, mapped with `MAP_SYNC`: really persistent.
    Dax,
    /// DRAM: volatile, with optional emulated write latency.
    Dram(DramBacking),
}

impl fmt::Display for RegionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionKind::Dax => f.write_str("DAX (MAP_SYNC)"),
            RegionKind::Dram(DramBacking::Anonymous) => f.write_str("DRAM (anonymous)"),
            RegionKind::Dram(DramBacking::Memfd) => f.write_str("DRAM (memfd)"),
        }
    }
}

/// A mapped region of persistent (or emulated persistent) memory.
pub struct PersistentRegion {
    base: NonNull<u8>,
    len: usize,
    kind: RegionKind,
    path: Option<PathBuf>,
    /// The DAX file or the memfd; `None` for anonymous memory.
    fd: Option<OwnedFd>,
    write_latency_ns: u64,
}

// SAFETY: the region owns its mapping, which stays valid until drop. All access to the mapped
// bytes goes through atomics or volatile operations on raw pointers, never through Rust
// references, so sharing the region between threads cannot create aliasing `&mut`.
unsafe impl Send for PersistentRegion {}
// SAFETY: see `Send`; every `&self` method is safe to call concurrently.
unsafe impl Sync for PersistentRegion {}

fn io_err(what: &'static str, path: Option<&Path>) -> PmemError {
    PmemError::Io {
        what,
        path: path.map(Path::to_path_buf),
        source: std::io::Error::last_os_error(),
    }
}

impl PersistentRegion {
    /// Maps an existing file of at least `len` bytes on a DAX filesystem with
    /// `MAP_SHARED_VALIDATE | MAP_SYNC`. Fails with [`PmemError::NotDax`] if the kernel refuses
    /// (the file is not on a DAX mount), [`PmemError::FileTooSmall`] if it is shorter than `len`.
    pub fn open_dax(path: impl AsRef<Path>, len: usize) -> Result<Self, PmemError> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| PmemError::Io {
                what: "open",
                path: Some(path.to_path_buf()),
                source,
            })?;
        Self::map_dax(file, path, len)
    }

    /// Like [`open_dax`](Self::open_dax), but creates the file if missing and allocates it to
    /// `len` bytes if shorter (allocated, not sparse, so a later page fault cannot hit ENOSPC).
    pub fn create_dax(path: impl AsRef<Path>, len: usize) -> Result<Self, PmemError> {
        let path = path.as_ref();
        if len == 0 {
            return Err(PmemError::InvalidArgument("region length must be > 0"));
        }
        let off_len = i64::try_from(len)
            .map_err(|_| PmemError::InvalidArgument("region length exceeds off_t"))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|source| PmemError::Io {
                what: "open",
                path: Some(path.to_path_buf()),
                source,
            })?;
        // SAFETY: the descriptor is open for writing and owned by `file` for this call.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, off_len) };
        if rc != 0 {
            return Err(PmemError::Io {
                what: "posix_fallocate",
                path: Some(path.to_path_buf()),
                source: std::io::Error::from_raw_os_error(rc),
            });
        }
        Self::map_dax(file, path, len)
    }

    fn map_dax(file: File, path: &Path, len: usize) -> Result<Self, PmemError> {
        if len == 0 {
            return Err(PmemError::InvalidArgument("region length must be > 0"));
        }
        let file_len = file
            .metadata()
            .map_err(|source| PmemError::Io {
                what: "stat",
                path: Some(path.to_path_buf()),
                source,
            })?
            .len();
        if file_len < len as u64 {
            return Err(PmemError::FileTooSmall {
                path: path.to_path_buf(),
                file_len,
                wanted: len,
            });
        }
        // SAFETY: a fresh mapping chosen by the kernel (addr null) over an open descriptor;
        // it does not overlap any existing Rust object. The result is checked below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let source = std::io::Error::last_os_error();
            return Err(if source.raw_os_error() == Some(libc::EOPNOTSUPP) {
                PmemError::NotDax {
                    path: path.to_path_buf(),
                    source,
                }
            } else {
                PmemError::Io {
                    what: "mmap(MAP_SHARED_VALIDATE | MAP_SYNC)",
                    path: Some(path.to_path_buf()),
                    source,
                }
            });
        }
        Ok(PersistentRegion {
            base: NonNull::new(p.cast()).ok_or(PmemError::InvalidArgument("mmap returned null"))?,
            len,
            kind: RegionKind::Dax,
            path: Some(path.to_path_buf()),
            fd: Some(OwnedFd::from(file)),
            write_latency_ns: 0,
        })
    }

    /// Maps `len` bytes of zeroed DRAM. Every flushed cache line then costs an extra busy-wait
    /// of `write_latency_ns` nanoseconds (0 = no emulation).
    pub fn dram(
        len: usize,
        backing: DramBacking,
        write_latency_ns: u64,
    ) -> Result<Self, PmemError> {
        if len == 0 {
            return Err(PmemError::InvalidArgument("region length must be > 0"));
        }
        let off_len = i64::try_from(len)
            .map_err(|_| PmemError::InvalidArgument("region length exceeds off_t"))?;
        let fd = match backing {
            DramBacking::Anonymous => None,
            DramBacking::Memfd => {
                let name = CString::new("remora-pmem")
                    .map_err(|_| PmemError::InvalidArgument("memfd name contains a NUL byte"))?;
                // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
                let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
                if raw < 0 {
                    return Err(io_err("memfd_create", None));
                }
                // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                // SAFETY: `fd` is a valid open memfd.
                if unsafe { libc::ftruncate(fd.as_raw_fd(), off_len) } != 0 {
                    return Err(io_err("ftruncate(memfd)", None));
                }
                Some(fd)
            }
        };
        let (flags, raw_fd) = match &fd {
            Some(fd) => (libc::MAP_SHARED, fd.as_raw_fd()),
            None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1),
        };
        // SAFETY: a fresh mapping chosen by the kernel over a memfd of `len` bytes or anonymous
        // memory; it overlaps no Rust object. The result is checked below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                raw_fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io_err("mmap(DRAM)", None));
        }
        if write_latency_ns != 0 {
            // Calibrate the spin clock now rather than inside the first persist.
            let _ = latency::spin_clock();
        }
        Ok(PersistentRegion {
            base: NonNull::new(p.cast()).ok_or(PmemError::InvalidArgument("mmap returned null"))?,
            len,
            kind: RegionKind::Dram(backing),
            path: None,
            fd,
            write_latency_ns,
        })
    }

    /// Which kind of memory this is.
    pub fn kind(&self) -> RegionKind {
        self.kind
    }

    /// The DAX file's path, `None` for DRAM.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The DAX file or memfd descriptor (for passing to another process), `None` if anonymous.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// Emulated write latency per flushed cache line, in nanoseconds (0 for DAX).
    pub fn write_latency_ns(&self) -> u64 {
        self.write_latency_ns
    }

    /// The flush instruction in use.
    pub fn flush_kind(&self) -> FlushKind {
        flush::flush_kind()
    }

    /// Base address of the mapping (page-aligned). Valid while `self` lives; access it only
    /// with atomics or volatile operations, never through references, since others may write.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions have at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pointer to `offset`; the caller has bounds-checked it.
    fn at(&self, offset: usize) -> *mut u8 {
        // `offset <= len` was checked, so the result stays inside (or one past) the mapping.
        self.base.as_ptr().wrapping_add(offset)
    }

    fn word(&self, offset: usize) -> Result<&AtomicU64, PmemError> {
        check_word(offset, self.len)?;
        // SAFETY: the word is in bounds and 8-byte aligned (the base is page-aligned), lives as
        // long as `&self`, and every access to mapped memory in this crate is atomic or volatile.
        Ok(unsafe { AtomicU64::from_ptr(self.at(offset).cast()) })
    }

    /// Atomically loads the 8-byte word at `offset` (Acquire).
    pub fn load_u64(&self, offset: usize) -> Result<u64, PmemError> {
        Ok(self.word(offset)?.load(Ordering::Acquire))
    }

    /// Atomically stores the 8-byte word at `offset` (Release). Not durable until persisted.
    pub fn store_u64(&self, offset: usize, value: u64) -> Result<(), PmemError> {
        self.word(offset)?.store(value, Ordering::Release);
        Ok(())
    }

    /// Compare-and-swap of the word at `offset`; returns the value found (success iff it
    /// equals `expected`).
    pub fn cas_u64(&self, offset: usize, expected: u64, new: u64) -> Result<u64, PmemError> {
        let w = self.word(offset)?;
        Ok(
            match w.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
        )
    }

    /// Atomic fetch-and-add on the word at `offset` (wrapping); returns the previous value.
    pub fn fetch_add_u64(&self, offset: usize, delta: u64) -> Result<u64, PmemError> {
        Ok(self.word(offset)?.fetch_add(delta, Ordering::AcqRel))
    }

    /// Copies `buf.len()` bytes at `offset` into `buf` with volatile loads (8 bytes at a time
    /// where aligned, so an aligned word written by an 8-byte store is never seen torn).
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), PmemError> {
        check_range(offset, buf.len(), self.len)?;
        let src = self.at(offset);
        let n = buf.len();
        let head = src.align_offset(8).min(n);
        let words = (n - head) / 8;
        for (i, b) in buf[..head].iter_mut().enumerate() {
            // SAFETY: `offset + i < offset + n <= len`: inside the mapping.
            *b = unsafe { src.add(i).read_volatile() };
        }
        for w in 0..words {
            let at = head + w * 8;
            // SAFETY: `[offset + at, +8)` is inside the mapping and 8-byte aligned by `head`.
            let v = unsafe { src.add(at).cast::<u64>().read_volatile() };
            buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
        for (i, b) in buf.iter_mut().enumerate().skip(head + words * 8) {
            // SAFETY: `i < n`: inside the mapping.
            *b = unsafe { src.add(i).read_volatile() };
        }
        Ok(())
    }

    /// Copies `data` to `offset` with volatile stores (8 bytes at a time where aligned). Not
    /// durable until persisted.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), PmemError> {
        check_range(offset, data.len(), self.len)?;
        let dst = self.at(offset);
        let n = data.len();
        let head = dst.align_offset(8).min(n);
        let words = (n - head) / 8;
        for (i, &b) in data[..head].iter().enumerate() {
            // SAFETY: inside the mapping (checked above); no reference to it exists.
            unsafe { dst.add(i).write_volatile(b) };
        }
        for w in 0..words {
            let at = head + w * 8;
            let mut v = [0u8; 8];
            v.copy_from_slice(&data[at..at + 8]);
            // SAFETY: `[offset + at, +8)` is inside the mapping and 8-byte aligned by `head`.
            unsafe {
                dst.add(at)
                    .cast::<u64>()
                    .write_volatile(u64::from_ne_bytes(v))
            };
        }
        for (i, &b) in data.iter().enumerate().skip(head + words * 8) {
            // SAFETY: `i < n`: inside the mapping.
            unsafe { dst.add(i).write_volatile(b) };
        }
        Ok(())
    }

    /// Writes back every cache line touched by `[offset, offset + len)` (no fence). On an
    /// emulated DRAM region, then busy-waits `write_latency_ns` per line flushed.
    pub fn flush(&self, offset: usize, len: usize) -> Result<(), PmemError> {
        check_range(offset, len, self.len)?;
        // SAFETY: the range is inside the live mapping (checked above).
        let lines = unsafe { flush::flush_range(self.at(offset), len) };
        if self.write_latency_ns != 0 {
            latency::spin_ns(self.write_latency_ns.saturating_mul(lines as u64));
        }
        Ok(())
    }

    /// Store fence (`sfence`): everything flushed before is durable when it returns.
    pub fn fence(&self) {
        flush::sfence();
    }

    /// [`flush`](Self::flush) then [`fence`](Self::fence).
    pub fn persist(&self, offset: usize, len: usize) -> Result<(), PmemError> {
        self.flush(offset, len)?;
        self.fence();
        Ok(())
    }
}

impl Drop for PersistentRegion {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping created in the constructor, and no
        // reference into it can outlive `self` (none is ever handed out).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

impl fmt::Display for PersistentRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{} file {}", self.kind, p.display())?,
            None => write!(f, "{}", self.kind)?,
        }
        write!(f, ", {} bytes", self.len)?;
        if matches!(self.kind, RegionKind::Dram(_)) {
            if self.write_latency_ns == 0 {
                f.write_str(", no emulated write latency")?;
            } else {
                write!(
                    f,
                    ", emulated write latency {} ns per line",
                    self.write_latency_ns
                )?;
            }
        }
        write!(f, ", flush={}", flush::flush_kind())
    }
}

impl fmt::Debug for PersistentRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PersistentRegion")
            .field("base", &self.base)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("path", &self.path)
            .field("write_latency_ns", &self.write_latency_ns)
            .finish()
    }
}

impl PersistMem for PersistentRegion {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), PmemError> {
        PersistentRegion::read(self, offset, buf)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), PmemError> {
        PersistentRegion::write(self, offset, data)
    }
    fn flush(&self, offset: usize, len: usize) -> Result<(), PmemError> {
        PersistentRegion::flush(self, offset, len)
    }
    fn fence(&self) {
        PersistentRegion::fence(self)
    }
    fn load_u64(&self, offset: usize) -> Result<u64, PmemError> {
        PersistentRegion::load_u64(self, offset)
    }
    fn store_u64(&self, offset: usize, value: u64) -> Result<(), PmemError> {
        PersistentRegion::store_u64(self, offset, value)
    }
    fn cas_u64(&self, offset: usize, expected: u64, new: u64) -> Result<u64, PmemError> {
        PersistentRegion::cas_u64(self, offset, expected, new)
    }
}

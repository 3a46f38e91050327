//! A thread's registered buffer pool: one arena, registered with every queue pair of the
//! endpoint that owns it, cut into fixed chunks. A READ into a pool buffer, an atomic whose
//! result word lies in one, and a non-inline WRITE or SEND from one are posted in place: the
//! NIC reads and writes the buffer itself, nothing is bounced through staging (as the
//! papers' C++ gives each coroutine a buffer inside one registered hugepage region).
//!
//! The NIC writes a pool buffer only while a post that borrows it is in flight; between
//! posts the buffer is the owner's ordinary memory.
use super::arena::Arena;
use super::error::VerbsError;
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// Fixed-size registered buffers for one thread (not `Sync`).
pub struct Pool {
    arena: Arena,
    chunk: usize,
    /// Free chunk indices (a stack, allocated once).
    free: RefCell<Vec<u32>>,
}

impl Pool {
    /// A pool of at least `bytes`, in chunks of `chunk` bytes (rounded up to 64).
    pub fn new(bytes: usize, chunk: usize) -> Result<Pool, VerbsError> {
        let chunk = chunk.max(64).next_multiple_of(64);
        let arena = Arena::new(bytes.max(chunk))?;
        let n = (arena.len() / chunk).min(u32::MAX as usize);
        Ok(Pool {
            arena,
            chunk,
            free: RefCell::new((0..n as u32).rev().collect()),
        })
    }

    /// Bytes per buffer.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Buffers not taken.
    pub fn available(&self) -> usize {
        self.free.borrow().len()
    }

    /// The registered memory: (base, bytes).
    pub(crate) fn span(&self) -> (*mut u8, usize) {
        (self.arena.as_ptr(), self.arena.len())
    }

    /// A zeroed buffer of `len <= chunk` bytes, or `None` when the pool is exhausted or the
    /// length does not fit a chunk. Returned to the pool when dropped.
    pub fn take(&self, len: usize) -> Option<PoolBuf<'_>> {
        if len > self.chunk {
            return None;
        }
        let i = self.free.borrow_mut().pop()?;
        // SAFETY: chunk i lies inside the arena and is owned by no other buffer (it was on
        // the free list); no post borrows it, so the NIC does not write it now.
        let ptr = unsafe { self.arena.as_ptr().add(i as usize * self.chunk) };
        // SAFETY: as above; `len <= chunk`.
        unsafe { ptr.write_bytes(0, len) };
        Some(PoolBuf {
            pool: self,
            idx: i,
            ptr,
            len,
        })
    }
}

/// One buffer of a [`Pool`].
pub struct PoolBuf<'p> {
    pool: &'p Pool,
    idx: u32,
    ptr: *mut u8,
    len: usize,
}

impl Deref for PoolBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes of this buffer's own chunk, mapped while the pool lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for PoolBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl PoolBuf<'_> {
    /// The first 8 bytes as a word, for an atomic's result (the chunk is 64-aligned).
    pub fn word(&mut self) -> &mut u64 {
        assert!(self.len >= 8, "a pool buffer of at least 8 bytes");
        // SAFETY: the chunk starts 64-aligned and holds at least 8 bytes; `&mut self` makes
        // this the only view.
        unsafe { &mut *self.ptr.cast::<u64>() }
    }
}

impl Drop for PoolBuf<'_> {
    fn drop(&mut self) {
        self.pool.free.borrow_mut().push(self.idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_distinct_zeroed_and_come_back() {
        let p = Pool::new(4096, 1024).unwrap();
        let n = p.available();
        assert!(n >= 4);
        let mut a = p.take(100).unwrap();
        let mut b = p.take(1024).unwrap();
        assert!(p.take(1025).is_none(), "larger than a chunk");
        a.fill(1);
        b.fill(2);
        assert!(a.iter().all(|&x| x == 1) && b.iter().all(|&x| x == 2));
        assert_eq!(a.as_ptr() as usize % 64, 0);
        *b.word() = 7;
        assert_eq!(b[..8], 7u64.to_ne_bytes());
        assert_eq!(p.available(), n - 2);
        drop(a);
        let c = p.take(100).unwrap();
        assert!(c.iter().all(|&x| x == 0), "a reused buffer is zeroed");
        drop((b, c));
        assert_eq!(p.available(), n);
    }
}

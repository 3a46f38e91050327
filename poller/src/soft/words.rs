//! Word-wise copies to and from shared memory: how the soft fabric moves data like a NIC.
//!
//! Aligned 8-byte words are moved with relaxed atomic loads and stores in ascending address
//! order, unaligned head and tail bytes with byte atomics. A concurrent reader therefore sees
//! each word either whole-old or whole-new, and a multi-word transfer may be torn between
//! words: exactly the guarantee (and the lack of one) of an RDMA READ or WRITE.
//! Shared memory is never turned into a Rust reference: another process may write it.
use remora_core::fabric::FabricError;
use remora_core::server::{LocalRegion, out_of_range};
use remora_layouts::NodeId;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering, Ordering::Relaxed, fence};

/// Copies `dst.len()` bytes from shared memory at `src` into `dst`.
///
/// # Safety
/// `src .. src + dst.len()` must lie inside a live mapping for the whole call.
pub unsafe fn read(src: *const u8, dst: &mut [u8]) {
    let len = dst.len();
    let mut i = 0;
    while i < len && !(src as usize + i).is_multiple_of(8) {
        // SAFETY: in bounds by the caller's contract; byte atomics need no alignment.
        dst[i] = unsafe { (*(src.add(i) as *const AtomicU8)).load(Relaxed) };
        i += 1;
    }
    while i + 8 <= len {
        // SAFETY: in bounds, and src + i is 8-byte aligned by the loop above.
        let w = unsafe { (*(src.add(i) as *const AtomicU64)).load(Relaxed) };
        dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
        i += 8;
    }
    while i < len {
        // SAFETY: in bounds by the caller's contract.
        dst[i] = unsafe { (*(src.add(i) as *const AtomicU8)).load(Relaxed) };
        i += 1;
    }
}

/// Copies `src` into shared memory at `dst`.
///
/// # Safety
/// `dst .. dst + src.len()` must lie inside a live writable mapping for the whole call.
pub unsafe fn write(dst: *mut u8, src: &[u8]) {
    let len = src.len();
    let mut i = 0;
    while i < len && !(dst as usize + i).is_multiple_of(8) {
        // SAFETY: in bounds by the caller's contract.
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(src[i], Relaxed) };
        i += 1;
    }
    while i + 8 <= len {
        let w = u64::from_ne_bytes(src[i..i + 8].try_into().expect("8 bytes"));
        // SAFETY: in bounds, and dst + i is 8-byte aligned by the loop above.
        unsafe { (*(dst.add(i) as *const AtomicU64)).store(w, Relaxed) };
        i += 8;
    }
    while i < len {
        // SAFETY: in bounds by the caller's contract.
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(src[i], Relaxed) };
        i += 1;
    }
}

/// The 8-byte word at `p` as an atomic.
///
/// # Safety
/// `p` must be 8-byte aligned and inside a live mapping for the lifetime `'a`.
pub unsafe fn word<'a>(p: *mut u8) -> &'a AtomicU64 {
    // SAFETY: alignment and liveness by the caller's contract; AtomicU64 tolerates
    // concurrent access from other threads and processes.
    unsafe { &*(p as *const AtomicU64) }
}

/// A memory node's region as its own CPU sees it (the soft and verbs memory nodes both serve
/// their handlers through it): bounds-checked, moved word-wise with atomics (a NIC or another
/// process writes the same memory concurrently), `persist` as the node was configured.
pub struct WordRegion<'a> {
    base: *mut u8,
    len: u64,
    node: NodeId,
    persist: Persist,
    /// Where stores and write-backs are counted (persistent regions).
    nvm: Option<&'a super::nvm::NvmCounters>,
    _mapping: PhantomData<&'a [u8]>,
}

/// What `persist` does on a [`WordRegion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persist {
    /// Nothing: DRAM, lost with the node anyway.
    Nothing,
    /// Cache-line write-back + fence (a file or persistent memory behind the region), plus
    /// `nvm_write_ns` of emulated NVM latency per line.
    Flush {
        /// Emulated NVM write latency per flushed cache line, in ns (0: none).
        nvm_write_ns: u32,
    },
}

impl<'a> WordRegion<'a> {
    /// The region of `len` bytes at `base`.
    ///
    /// # Safety
    /// `base .. base + len` must stay mapped, readable and writable for `'a`.
    pub unsafe fn new(base: *mut u8, len: u64, node: NodeId, persist: Persist) -> WordRegion<'a> {
        WordRegion {
            base,
            len,
            node,
            persist,
            nvm: None,
            _mapping: PhantomData,
        }
    }

    /// Counts this region's CPU stores and written-back lines in `nvm`.
    pub(crate) fn counting(mut self, nvm: &'a super::nvm::NvmCounters) -> WordRegion<'a> {
        self.nvm = Some(nvm);
        self
    }

    fn stored(&self, bytes: usize) {
        if let Some(n) = self.nvm {
            n.stored(bytes as u64);
        }
    }

    fn at(&self, offset: u64, len: usize, aligned: bool) -> Result<*mut u8, FabricError> {
        let bad = || out_of_range(self.node, offset, len);
        let end = offset.checked_add(len as u64).ok_or_else(bad)?;
        if end > self.len || (aligned && !offset.is_multiple_of(8)) {
            return Err(bad());
        }
        // SAFETY: offset + len <= len, inside the mapping by `new`'s contract.
        Ok(unsafe { self.base.add(offset as usize) })
    }
}

impl LocalRegion for WordRegion<'_> {
    fn node(&self) -> NodeId {
        self.node
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let p = self.at(offset, buf.len(), false)?;
        // SAFETY: `at` checked the range lies in the live mapping.
        unsafe { read(p, buf) };
        fence(Ordering::Acquire);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let p = self.at(offset, data.len(), false)?;
        fence(Ordering::Release);
        // SAFETY: `at` checked the range lies in the live mapping.
        unsafe { write(p, data) };
        self.stored(data.len());
        Ok(())
    }
    fn load_u64(&self, offset: u64) -> Result<u64, FabricError> {
        let p = self.at(offset, 8, true)?;
        // SAFETY: `at` checked range and alignment.
        Ok(unsafe { word(p) }.load(Ordering::Acquire))
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), FabricError> {
        let p = self.at(offset, 8, true)?;
        // SAFETY: `at` checked range and alignment.
        unsafe { word(p) }.store(value, Ordering::Release);
        self.stored(8);
        Ok(())
    }
    fn cas_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, FabricError> {
        let p = self.at(offset, 8, true)?;
        // SAFETY: `at` checked range and alignment.
        let w = unsafe { word(p) };
        match w.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) => {
                self.stored(8);
                Ok(v)
            }
            Err(v) => Ok(v),
        }
    }
    fn persist(&self, offset: u64, len: usize) {
        let Persist::Flush { nvm_write_ns } = self.persist else {
            return;
        };
        let Ok(p) = self.at(offset, len, false) else {
            return;
        };
        // SAFETY: `at` checked the range lies in the live mapping.
        let lines = unsafe { remora_pmem::flush::persist(p, len) };
        if let Some(n) = self.nvm {
            n.flushed(lines as u64);
        }
        if nvm_write_ns > 0 {
            remora_pmem::latency::spin_ns(nvm_write_ns as u64 * lines as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_at_every_alignment() {
        let mut shared = vec![0u64; 64];
        let base = shared.as_mut_ptr() as *mut u8;
        for off in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 100] {
                let data: Vec<u8> = (0..len).map(|i| (i * 3 + off + 1) as u8).collect();
                let mut back = vec![0u8; len];
                // SAFETY: off + len <= 109 < 512 bytes of `shared`.
                unsafe {
                    write(base.add(off), &data);
                    read(base.add(off), &mut back);
                }
                assert_eq!(back, data, "off {off} len {len}");
            }
        }
    }
}

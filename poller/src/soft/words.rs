//! Word-wise copies to and from shared memory: how the soft fabric moves data like a NIC.
//!
//! Aligned 8-byte words are moved with relaxed atomic loads and stores in ascending address
//! order, unaligned head and tail bytes with byte atomics. A concurrent reader therefore sees
//! each word either whole-old or whole-new, and a multi-word transfer may be torn between
//! words: exactly the guarantee (and the lack of one) of an RDMA READ or WRITE.
//! Shared memory is never turned into a Rust reference: another process may write it.
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

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

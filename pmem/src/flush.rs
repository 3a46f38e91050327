//! Cache-line flush and store-fence primitives.
//!
//! # Which instruction
//!
//! On x86_64 a store reaches persistent memory only once its cache line has been written back
//! from the CPU caches to the memory controller (the ADR domain of Optane-style NVM). Three
//! instructions do that, and the best one the CPU has is chosen once, at first use, from CPUID,
//! then cached:
//!
//! | [`FlushKind`] | instruction | effect on the line | ordering |
//! |---|---|---|---|
//! | `Clwb` | `clwb` (CPUID.7.0:EBX\[24\]) | written back, may stay cached | weakly ordered: needs `sfence` |
//! | `Clflushopt` | `clflushopt` (CPUID.7.0:EBX\[23\]) | written back and evicted | weakly ordered: needs `sfence` |
//! | `Clflush` | `clflush` (CPUID.1:EDX\[19\]) | written back and evicted | ordered with stores, serial and slow |
//!
//! `clwb` is preferred because the line stays in the cache, so the next read of a freshly
//! persisted word (a lock, a version, a log tail) does not miss.
//!
//! # Why `sfence`
//!
//! `clwb` and `clflushopt` are weakly ordered: they may complete in any order with respect to
//! each other and to later stores. `sfence` waits until every earlier store and flush has been
//! accepted by the memory controller, so once [`sfence`] returns, everything flushed before it
//! is durable, and no store issued after it can become durable before them. That is what makes
//! "write payload, persist, then write commit word" a correct protocol. With `clflush` the fence
//! is not strictly needed, but [`persist`] issues it anyway so callers never depend on the kind.
//!
//! # Other targets
//!
//! On targets other than x86_64 no flush instruction is issued: [`flush_kind`] reports
//! [`FlushKind::Fallback`] and flushing is only a full sequentially consistent fence. Stores are
//! then ordered with respect to other CPUs, but **durability is not guaranteed** there; such a
//! build is for running the algorithms on DRAM (tests, simulations), never for real NVM.

use core::fmt;
use core::sync::atomic::{AtomicU8, Ordering};

/// Size of a CPU cache line, the unit of write-back to persistent memory.
pub const CACHE_LINE: usize = 64;

/// The flush instruction used to write cache lines back to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushKind {
    /// `clwb`: write back, keep the line cached. Needs `sfence`.
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered. Needs `sfence`.
    Clflushopt,
    /// `clflush`: write back and invalidate, strongly ordered and slow.
    Clflush,
    /// No flush instruction (non-x86_64 target or a CPU without `clflush`): only a full
    /// fence is issued and durability is NOT guaranteed.
    Fallback,
}

impl FlushKind {
    /// The instruction's name as printed by tools (`"clwb"`, ..., `"fence-only"`).
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::Fallback => "fence-only",
        }
    }

    /// Whether this kind actually writes lines back so that a following fence makes them
    /// durable (false only for [`FlushKind::Fallback`]).
    pub fn is_durable(self) -> bool {
        self != FlushKind::Fallback
    }

    /// Whether this CPU can execute this kind. `Fallback` is always supported.
    pub fn is_supported(self) -> bool {
        let s = support();
        match self {
            FlushKind::Clwb => s & SUP_CLWB != 0,
            FlushKind::Clflushopt => s & SUP_CLFLUSHOPT != 0,
            FlushKind::Clflush => s & SUP_CLFLUSH != 0,
            FlushKind::Fallback => true,
        }
    }

    fn to_code(self) -> u8 {
        match self {
            FlushKind::Clwb => 1,
            FlushKind::Clflushopt => 2,
            FlushKind::Clflush => 3,
            FlushKind::Fallback => 4,
        }
    }

    fn from_code(code: u8) -> Option<FlushKind> {
        match code {
            1 => Some(FlushKind::Clwb),
            2 => Some(FlushKind::Clflushopt),
            3 => Some(FlushKind::Clflush),
            4 => Some(FlushKind::Fallback),
            _ => None,
        }
    }
}

impl fmt::Display for FlushKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error returned by [`flush_range_with`] when the CPU lacks the requested instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnsupportedFlush(pub FlushKind);

impl fmt::Display for UnsupportedFlush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "this CPU does not support the `{}` instruction", self.0)
    }
}

impl std::error::Error for UnsupportedFlush {}

const SUP_KNOWN: u8 = 1 << 7;
const SUP_CLWB: u8 = 1 << 0;
const SUP_CLFLUSHOPT: u8 = 1 << 1;
const SUP_CLFLUSH: u8 = 1 << 2;

/// Detected support bits (`SUP_*`), `0` until the first detection.
static SUPPORT: AtomicU8 = AtomicU8::new(0);
/// Cached [`FlushKind`] code, `0` until the first detection.
static KIND: AtomicU8 = AtomicU8::new(0);

/// Runs CPUID once and caches the result. Racing first callers compute the same value.
fn support() -> u8 {
    let s = SUPPORT.load(Ordering::Relaxed);
    if s & SUP_KNOWN != 0 {
        return s;
    }
    let s = detect_support() | SUP_KNOWN;
    SUPPORT.store(s, Ordering::Relaxed);
    s
}

#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // `__cpuid` is an `unsafe fn` before Rust 1.87 and safe after.
fn detect_support() -> u8 {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: CPUID exists on every x86_64 CPU and only reads identification registers.
    let max_leaf = unsafe { __cpuid(0) }.eax;
    // SAFETY: as above; leaf 1 always exists on x86_64.
    let leaf1 = unsafe { __cpuid(1) };
    let mut s = 0;
    if leaf1.edx & (1 << 19) != 0 {
        s |= SUP_CLFLUSH;
    }
    if max_leaf >= 7 {
        // SAFETY: as above; leaf 7 exists because the maximum leaf is at least 7.
        let leaf7 = unsafe { __cpuid_count(7, 0) };
        if leaf7.ebx & (1 << 23) != 0 {
            s |= SUP_CLFLUSHOPT;
        }
        if leaf7.ebx & (1 << 24) != 0 {
            s |= SUP_CLWB;
        }
    }
    s
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_support() -> u8 {
    0
}

/// The best flush kind this CPU supports, without the cache.
fn best_kind() -> FlushKind {
    let s = support();
    if s & SUP_CLWB != 0 {
        FlushKind::Clwb
    } else if s & SUP_CLFLUSHOPT != 0 {
        FlushKind::Clflushopt
    } else if s & SUP_CLFLUSH != 0 {
        FlushKind::Clflush
    } else {
        FlushKind::Fallback
    }
}

/// The flush instruction this process uses: detected by CPUID on first call, then cached.
#[inline]
pub fn flush_kind() -> FlushKind {
    if let Some(k) = FlushKind::from_code(KIND.load(Ordering::Relaxed)) {
        return k;
    }
    let k = best_kind();
    KIND.store(k.to_code(), Ordering::Relaxed);
    k
}

/// Store fence: every earlier store and flush is globally visible (and, for flushed lines,
/// accepted by the memory controller) before any later store. On non-x86_64 targets: a full
/// sequentially consistent fence.
#[inline]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` touches no memory or registers; SSE is part of the x86_64 baseline.
    // No `nomem` option, so the compiler does not move memory accesses across it.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "x86_64"))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// Issues one flush instruction of `kind` for the line containing `p`.
///
/// # Safety
/// `p` must point into mapped memory of this process and `kind` must be supported.
#[inline(always)]
unsafe fn flush_line(kind: FlushKind, p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY (all three arms): the caller guarantees `p` is mapped, so the instruction cannot
    // fault, and that the CPU supports `kind`. The flushes change no register or flag and do not
    // change memory contents; no `nomem` option keeps earlier stores ordered before them.
    unsafe {
        match kind {
            FlushKind::Clwb => {
                core::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushKind::Clflushopt => {
                core::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushKind::Clflush => {
                core::arch::asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushKind::Fallback => core::sync::atomic::fence(Ordering::SeqCst),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, p);
        core::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// Number of cache lines touched by `[addr, addr + len)` (0 when `len == 0`).
#[inline]
pub fn lines_touched(addr: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let first = addr / CACHE_LINE;
    let last = (addr + (len - 1)) / CACHE_LINE;
    last - first + 1
}

/// Flushes every cache line touched by `[ptr, ptr + len)` with `kind`; returns the number of
/// lines flushed. Does not fence.
///
/// # Safety
/// `[ptr, ptr + len)` must lie in memory mapped by this process, and `kind` must be
/// supported (checked by the public callers).
unsafe fn flush_lines(kind: FlushKind, ptr: *const u8, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let start = ptr as usize & !(CACHE_LINE - 1);
    let n = lines_touched(ptr as usize, len);
    // Derive the line addresses from `ptr` to keep its provenance; line `i` starts at
    // `start + i * CACHE_LINE`, which is at most 63 bytes below `ptr` for `i == 0`. That
    // byte is in the same page as `ptr`, hence mapped.
    let head = ptr.wrapping_sub(ptr as usize - start);
    for i in 0..n {
        // SAFETY: every line start is within a mapped line of the range (see above), and the
        // caller guarantees `kind` is supported.
        unsafe { flush_line(kind, head.wrapping_add(i * CACHE_LINE)) };
    }
    n
}

/// Flushes (writes back) every cache line touched by `[ptr, ptr + len)` with the cached
/// [`flush_kind`], without a fence. Returns the number of lines flushed.
///
/// # Safety
/// `[ptr, ptr + len)` must lie in memory mapped by this process (a flush of an unmapped
/// address faults).
#[inline]
pub unsafe fn flush_range(ptr: *const u8, len: usize) -> usize {
    // SAFETY: the caller guarantees the range is mapped; `flush_kind` is supported.
    unsafe { flush_lines(flush_kind(), ptr, len) }
}

/// Like [`flush_range`] with an explicit instruction, for tests and tools comparing kinds.
///
/// # Safety
/// `[ptr, ptr + len)` must lie in memory mapped by this process.
pub unsafe fn flush_range_with(
    kind: FlushKind,
    ptr: *const u8,
    len: usize,
) -> Result<usize, UnsupportedFlush> {
    if !kind.is_supported() {
        return Err(UnsupportedFlush(kind));
    }
    // SAFETY: the range is mapped (caller) and `kind` is supported (checked above).
    Ok(unsafe { flush_lines(kind, ptr, len) })
}

/// Makes `[ptr, ptr + len)` durable: flushes every cache line it touches, then [`sfence`].
/// Returns the number of lines flushed.
///
/// # Safety
/// `[ptr, ptr + len)` must lie in memory mapped by this process.
#[inline]
pub unsafe fn persist(ptr: *const u8, len: usize) -> usize {
    // SAFETY: forwarded caller guarantee.
    let n = unsafe { flush_range(ptr, len) };
    sfence();
    n
}

/// Safe [`persist`] for memory this process holds a reference to.
#[inline]
pub fn persist_slice(data: &[u8]) -> usize {
    // SAFETY: a live slice is mapped memory of this process.
    unsafe { persist(data.as_ptr(), data.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_touched_counts_partial_lines() {
        assert_eq!(lines_touched(0, 0), 0);
        assert_eq!(lines_touched(0, 1), 1);
        assert_eq!(lines_touched(0, 64), 1);
        assert_eq!(lines_touched(0, 65), 2);
        assert_eq!(lines_touched(63, 2), 2);
        assert_eq!(lines_touched(64, 64), 1);
        assert_eq!(lines_touched(100, 200), 4); // bytes 100..300: lines 1..=4
    }

    #[test]
    fn kind_is_cached_and_supported() {
        let k = flush_kind();
        assert_eq!(k, flush_kind());
        assert!(k.is_supported());
        assert_eq!(FlushKind::from_code(k.to_code()), Some(k));
    }

    /// The detected kind must agree with what the kernel reports in /proc/cpuinfo.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn kind_matches_proc_cpuinfo() {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let flags = info
            .lines()
            .find(|l| l.starts_with("flags"))
            .expect("cpuinfo has a flags line");
        let has = |f: &str| flags.split_whitespace().any(|w| w == f);
        let expected = if has("clwb") {
            FlushKind::Clwb
        } else if has("clflushopt") {
            FlushKind::Clflushopt
        } else if has("clflush") {
            FlushKind::Clflush
        } else {
            FlushKind::Fallback
        };
        assert_eq!(flush_kind(), expected);
        assert_eq!(FlushKind::Clflushopt.is_supported(), has("clflushopt"));
        assert_eq!(FlushKind::Clflush.is_supported(), has("clflush"));
    }

    #[test]
    fn every_supported_kind_flushes_without_fault() {
        let mut buf = vec![0u8; 4096 + 3];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
        for kind in [
            FlushKind::Clwb,
            FlushKind::Clflushopt,
            FlushKind::Clflush,
            FlushKind::Fallback,
        ] {
            // SAFETY: `buf` is a live allocation and the ranges lie inside it.
            let r = unsafe { flush_range_with(kind, buf.as_ptr().wrapping_add(3), 4096) };
            match r {
                Ok(n) => assert_eq!(n, lines_touched(buf.as_ptr() as usize + 3, 4096)),
                Err(e) => {
                    assert!(!kind.is_supported());
                    assert!(e.to_string().contains(kind.name()));
                }
            }
            sfence();
        }
        assert_eq!(
            persist_slice(&buf[10..20]),
            lines_touched(buf.as_ptr() as usize + 10, 10)
        );
        assert_eq!(persist_slice(&buf[..0]), 0);
        assert!(buf.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}

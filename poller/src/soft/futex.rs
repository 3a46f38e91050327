//! Blocking on a word of shared memory, for the soft fabric's long waits (a receive that
//! spun for a while, an idle memory-node thread): the waiter sleeps in the kernel and the
//! peer that changes the word wakes it, as a completion channel wakes a verbs consumer. The
//! words live in memfd mappings shared between processes, so the futexes are shared (not
//! `FUTEX_PRIVATE_FLAG`). A waker makes the syscall only when a waiter said it sleeps.
use super::node::NodeMem;
use super::words;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// In a memory node's control page: a counter clients bump (and FUTEX_WAKE) after a push
/// while a server thread sleeps.
const CTL_DOORBELL: usize = 64;
/// In the control page: server threads sleeping on the doorbell.
const CTL_SLEEPERS: usize = 128;
/// How long an idle server thread spins (no syscall: a message is seen at once) before it
/// sleeps on the doorbell. Counted in time, not turns: a turn of the serve loop takes from
/// tens of nanoseconds to microseconds with the number of connections, and 2000 turns were
/// up to milliseconds of a core that a client on an oversubscribed host waited for.
pub(crate) const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(20);
/// The longest an idle server thread sleeps without a doorbell (idle work, liveness).
pub(crate) const IDLE_SLEEP: Duration = Duration::from_micros(500);

/// Sleeps while `word` holds `expected`, at most `timeout` (or until woken; spurious wakes
/// are possible: the caller re-checks what it waits for).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the aligned 4-byte word `word` points at (live for the call)
    // and a timespec we own; it writes nothing of ours.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread (of any process) sleeping on `word`.
pub(crate) fn wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address of the aligned word as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// The 4-byte word at `p` (the low half of a little-endian 8-byte position or counter).
///
/// # Safety
/// `p` is 4-byte aligned and points into a mapping that outlives the returned reference.
pub(crate) unsafe fn word32<'a>(p: *mut u8) -> &'a AtomicU32 {
    // SAFETY: aligned and live (the caller's contract); AtomicU32 has u32's layout.
    unsafe { AtomicU32::from_ptr(p.cast()) }
}

impl NodeMem {
    fn doorbell(&self) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: CTL_DOORBELL is an aligned offset inside the control mapping, which lives
        // as long as self.
        unsafe { word32(self.ctl.as_ptr().add(CTL_DOORBELL)) }
    }

    fn sleepers(&self) -> &AtomicU64 {
        // SAFETY: as in `doorbell`.
        unsafe { words::word(self.ctl.as_ptr().add(CTL_SLEEPERS)) }
    }

    /// After a client's push: wakes the node's sleeping server threads, if any (one fence
    /// and one load when none sleeps: no syscall on the hot path).
    #[inline]
    pub(crate) fn ring_doorbell(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleepers().load(Ordering::Relaxed) != 0 {
            self.doorbell().fetch_add(1, Ordering::Release);
            wake(self.doorbell());
        }
    }

    /// An idle server thread's wait: sleeps until a client rings the doorbell or `timeout`
    /// passes, unless `pending()` (checked after saying it sleeps) finds work.
    pub(crate) fn sleep(&self, timeout: Duration, pending: impl FnOnce() -> bool) {
        let bell = self.doorbell().load(Ordering::Acquire);
        self.sleepers().fetch_add(1, Ordering::SeqCst);
        if !pending() {
            wait(self.doorbell(), bell, timeout);
        }
        self.sleepers().fetch_sub(1, Ordering::SeqCst);
    }
}

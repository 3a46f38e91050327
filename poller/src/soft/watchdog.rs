//! Notices a dead peer process without a syscall on the hot path.
//!
//! A NIC reports a dead responder on every verb (RetryExceeded after its ack timeout). A soft
//! queue pair's one-sided verbs touch shared memory that stays mapped after the memnode
//! process dies, so nothing would ever fail. One background thread per process therefore
//! watches the control sockets of every connection: every [`EVERY`] it peeks each one, and
//! when the peer has closed it (its process died or hung up) it raises that connection's
//! flag. `SoftQp::post` reads the flag with one relaxed load and fails with
//! `RetryExceeded`, so a peer's death is reported within about [`EVERY`] + one post.
use crossbeam_utils::CachePadded;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How often the watchdog looks.
pub const EVERY: Duration = Duration::from_millis(2);

/// A connection's dead flag: read by its queue pair on every post, so it sits on a cache line
/// of its own (no false sharing with whatever the allocator puts next to it).
pub type DeadFlag = Arc<CachePadded<AtomicBool>>;

struct Watched {
    fd: OwnedFd,
    dead: Weak<CachePadded<AtomicBool>>,
}

static WATCHED: Mutex<Vec<Watched>> = Mutex::new(Vec::new());
static STARTED: AtomicBool = AtomicBool::new(false);

/// Watches the socket `fd` (a duplicate the watchdog owns); returns the flag it raises when
/// the peer is gone. Dropping every clone of the flag stops the watch.
pub fn watch(fd: OwnedFd) -> DeadFlag {
    let dead = Arc::new(CachePadded::new(AtomicBool::new(false)));
    if let Ok(mut w) = WATCHED.lock() {
        w.push(Watched {
            fd,
            dead: Arc::downgrade(&dead),
        });
    }
    if !STARTED.swap(true, Ordering::AcqRel) {
        let spawned = std::thread::Builder::new()
            .name("remora-watchdog".into())
            .spawn(run);
        if spawned.is_err() {
            // No thread: say the peer is unknown rather than alive forever.
            STARTED.store(false, Ordering::Release);
        }
    }
    dead
}

/// True if the peer of socket `fd` has closed its end (or the socket failed).
pub fn closed(fd: &impl AsRawFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: a non-blocking peek into a 1-byte buffer we own, on a descriptor we own.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n > 0 {
        return false;
    }
    n == 0 || {
        let e = std::io::Error::last_os_error().kind();
        e != std::io::ErrorKind::WouldBlock && e != std::io::ErrorKind::Interrupted
    }
}

fn run() {
    loop {
        std::thread::sleep(EVERY);
        let Ok(mut w) = WATCHED.lock() else {
            return;
        };
        w.retain(|x| match x.dead.upgrade() {
            None => false,
            Some(flag) => {
                if closed(&x.fd) {
                    flag.store(true, Ordering::Release);
                    false
                } else {
                    true
                }
            }
        });
    }
}

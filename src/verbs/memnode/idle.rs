//! Graceful when oversubscribed (issue 26), the memory node's side: a server thread whose
//! rounds find nothing for a while sleeps on its receive completion queues' completion
//! channels instead of polling, as idle clients do (`qp/idle.rs`, whose spin clock,
//! channel and `ppoll` this reuses).
//!
//! Every round of `Server::run` ends in [`Server::rest`]. A round that served a message, took
//! a connection or mail, or whose handler did background work (`Handler::on_idle` returned
//! true) restarts the spin, so the hot path costs one comparison and no system call. Once
//! nothing has moved for `SPIN_BEFORE_BLOCK_NS` (100 µs) the thread
//!
//! 1. arms the receive completion queue of each of its shared receive queues
//!    (`ibv_req_notify_cq`; its replies' send completions need no wait: it never waits for
//!    them), and goes round once more: that round's poll finds a message that arrived before
//!    the arming (which raises no event),
//! 2. if that round found nothing either, says it is asleep, checks its inbox flag (a
//!    connection or mail handed over in between: the control thread and the other server
//!    threads ring its bell, an eventfd, only when it says it is asleep, so their hot path
//!    has no system call either),
//! 3. blocks in `ppoll(2)` on the channels and the bell, at most `BLOCK_AT_MOST_NS` (1 ms), so
//!    the stop flag, the handler's timers and leases (`on_idle`) are still served on time;
//!    after every [`QUIET_STEP`] sleeps in a row that nothing ended (no event, nothing served)
//!    the bound doubles, up to 16 ms ([`MAX_DOUBLINGS`]): a node idle for a second wakes
//!    about 60 times a second instead of 1,000 (a message or a connection still wakes it at
//!    once, through its event or the bell; only `on_idle`'s background checks and the stop
//!    flag wait up to the longer bound),
//! 4. reads the events and acknowledges each at once (they come once per sleep at most).
//!
//! After a sleep that found nothing the next idle round arms again at once (no new spin). On
//! the fake device (`fake_srq.rs`) the channel is an eventfd the fake queue writes when a
//! completion lands on it armed, so the same `ppoll` path runs in tests.
use super::shard::{Hub, Server, Srq};
use crate::verbs::error::{VerbsError, sys_err};
use crate::verbs::qp::idle::{BLOCK_AT_MOST_NS, Spin, block, next_event, readable};
use crate::verbs::stats::Stats;
use crate::verbs::sys;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// An eventfd: a server thread's bell, and the fake device's completion channel.
pub(crate) struct Bell(i32);

impl Bell {
    pub(crate) fn new() -> Result<Bell, VerbsError> {
        // SAFETY: no pointers; the fd is checked and owned by the result.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(sys_err("eventfd"));
        }
        Ok(Bell(fd))
    }

    pub(crate) fn fd(&self) -> i32 {
        self.0
    }

    /// Makes the fd readable (wakes a `ppoll` on it).
    pub(crate) fn ring(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a u64 we own to our eventfd (it cannot overflow from
        // rings: it is drained by every sleeper's wake).
        unsafe { libc::write(self.0, std::ptr::from_ref(&one).cast(), 8) };
    }

    /// Takes the rings since the last drain: whether there were any.
    pub(crate) fn drain(&self) -> bool {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a u64 we own from our non-blocking eventfd (EAGAIN when
        // not rung).
        unsafe { libc::read(self.0, std::ptr::from_mut(&mut n).cast(), 8) == 8 }
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        // SAFETY: our fd, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Sleeps in a row that nothing ended before the bound on a sleep doubles.
pub(super) const QUIET_STEP: u32 = 64;

/// Most doublings of the bound on a sleep: 1 ms x 2^4 = 16 ms.
pub(super) const MAX_DOUBLINGS: u32 = 4;

/// The longest a server thread sleeps after `quiet` sleeps in a row that nothing ended.
pub(super) fn sleep_bound_ns(quiet: u32) -> u64 {
    BLOCK_AT_MOST_NS << (quiet / QUIET_STEP).min(MAX_DOUBLINGS)
}

/// A server thread's idle state.
#[derive(Default)]
pub(super) struct Rest {
    spin: Spin,
    /// Sleeps in a row that ended with no event and after which nothing moved.
    quiet: u32,
    /// Its receive completion queues are armed, and one more round polls them.
    armed: bool,
    /// What the sleep waits on (kept: no allocation per sleep).
    fds: Vec<libc::pollfd>,
}

impl Hub {
    /// Tells server thread `t` that connections or mail wait in its inbox, and wakes it if
    /// it sleeps (see the module docs, step 2).
    pub(super) fn notify(&self, t: usize) {
        self.pending[t].store(true, Ordering::SeqCst);
        if self.asleep[t].load(Ordering::SeqCst) {
            self.bells[t].ring();
        }
    }
}

impl Srq {
    /// `ibv_req_notify_cq` on the receive completion queue (step 1): false if it failed.
    fn arm(&self) -> bool {
        match &self.fake {
            Some(f) => {
                f.arm();
                true
            }
            // SAFETY: a live completion queue on a channel (`Srq::new`).
            None => unsafe { sys::ibv_req_notify_cq(self.cq, 0) == 0 },
        }
    }

    /// The fd its events arrive on.
    fn fd(&self) -> i32 {
        match &self.fake {
            Some(f) => f.fd(),
            // SAFETY: the channel lives as long as this queue.
            None => unsafe { (*self.channel).fd },
        }
    }

    /// Reads and acknowledges its events (step 4): how many.
    fn take_events(&self) -> u64 {
        if let Some(f) = &self.fake {
            return u64::from(f.take_event());
        }
        let mut n = 0;
        // SAFETY: its live non-blocking channel (`Srq::new`).
        while let Some(cq) = unsafe { next_event(self.channel) } {
            // SAFETY: an event just read of a queue on this channel (this one, live): one
            // event, acknowledged once.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
            n += 1;
        }
        n
    }
}

impl Server<'_> {
    /// The end of a round (see the module docs): `moved` if it served, took or did anything.
    pub(super) fn rest(
        &self,
        srqs: &[(Arc<Srq>, Vec<u32>)],
        moved: bool,
        r: &mut Rest,
        stats: &Stats,
    ) {
        if moved {
            r.spin.reset();
            r.armed = false;
            r.quiet = 0;
            return;
        }
        let Some(timeout) = r.spin.idle(sleep_bound_ns(r.quiet)) else {
            return;
        };
        if !r.armed {
            // Step 1; a queue that cannot be armed is polled (the thread keeps spinning).
            r.armed = srqs.iter().all(|(s, _)| s.arm());
            return;
        }
        r.armed = false;
        self.sleep(srqs, timeout, r, stats);
    }

    /// Steps 2 to 4.
    #[cold]
    fn sleep(&self, srqs: &[(Arc<Srq>, Vec<u32>)], timeout_ns: u64, r: &mut Rest, stats: &Stats) {
        let (hub, t) = (self.hub, self.t);
        hub.asleep[t].store(true, Ordering::SeqCst);
        if hub.pending[t].load(Ordering::SeqCst) {
            hub.asleep[t].store(false, Ordering::Relaxed);
            return;
        }
        r.fds.clear();
        r.fds.push(readable(hub.bells[t].fd()));
        r.fds.extend(srqs.iter().map(|(s, _)| readable(s.fd())));
        block(&mut r.fds, timeout_ns);
        hub.asleep[t].store(false, Ordering::Relaxed);
        // Only what is readable is read (a sleep that timed out makes no more system calls).
        let ready = |fd: &libc::pollfd| fd.revents != 0;
        let mut events = 0;
        if ready(&r.fds[0]) {
            events += u64::from(hub.bells[t].drain());
        }
        for ((s, _), fd) in srqs.iter().zip(&r.fds[1..]) {
            if ready(fd) {
                events += s.take_events();
            }
        }
        r.quiet = if events == 0 {
            r.quiet.saturating_add(1)
        } else {
            0
        };
        stats.bump(|v| {
            v.server_sleeps += 1;
            v.server_wakeups += events;
        });
    }
}

//! Graceful when oversubscribed (issue 26): a client thread whose verbs waits found nothing
//! for a while sleeps on its completion channel instead of polling, and the NIC's
//! completion event wakes it, as DPDK's interrupt mode does.
//!
//! Each round of the thread's executor the send queue's progress hook (`wake.rs`) ends here.
//! While work is moving, that costs one comparison: every post and every completion of the
//! thread's queue pairs bumps [`Idle::activity`], and a round that sees it changed starts
//! over. After [`ROUNDS_BEFORE_CLOCK`] rounds with no change the clock is read; once nothing
//! has moved for [`SPIN_BEFORE_BLOCK_NS`] the thread
//!
//! 1. arms the send completion queue and the receive completion queue of every queue pair
//!    with a receive wait (`ibv_req_notify_cq`),
//! 2. polls them once more (a completion that arrived before the arming raises no event),
//! 3. blocks in `ppoll(2)` on the channel's fd, at most [`BLOCK_AT_MOST_NS`] and never past
//!    the thread's next pause deadline (`timer.rs`), so deadlines still fire,
//! 4. reads the events (`ibv_get_cq_event`, the fd non-blocking) and acknowledges them: the
//!    send queue's in batches of [`ACK_BATCH`] (and the rest when it is destroyed), a
//!    receive queue's at once (a queue pair may be dropped at any time, and destroying its
//!    queue waits for its events to be acknowledged).
//!
//! Then the round goes on, and the coroutines woken by what arrived run. After a sleep that
//! found nothing the next idle round sleeps again at once (no new spin). On the fake device
//! (`fake.rs`) the channel is modelled: arming marks the fake queue, a completion pushed on
//! an armed queue raises its event, and the sleep lasts until the next late reply
//! (`FakeNode::set_reply_delay_ns`) or the timeout.
//!
//! Only a thread whose executor runs the progress hooks sleeps here (a spin `block_on` has
//! no round: its futures poll for themselves, as before). A coroutine of the thread that
//! waits on something other than these queues and the verbs pauses (another thread's flag,
//! the soft fabric) is polled late by at most [`BLOCK_AT_MOST_NS`].
use super::cq::SendCq;
use super::{Dev, VerbsQp};
use crate::verbs::clock::now_ns;
use crate::verbs::error::{VerbsError, sys_err};
use crate::verbs::sys;
use std::cell::Cell;

/// How long a thread's verbs waits spin (no system call) before it sleeps: 100 µs. A
/// round trip over a NIC takes 2-5 µs (the SMART and Sherman papers' ConnectX READ
/// latencies: `/work/shared/seeds/`), over Soft-RoCE tens of µs, so a wait that found
/// nothing for 20 to 50 NIC round trips waits for a peer that is slow, descheduled or idle,
/// not for the network; the soft fabric spins 50 µs before it gives its CPU away
/// (`poller/src/soft/qp.rs`, `SPIN_BEFORE_YIELD`). The hot path (completions arriving) never
/// reaches it.
pub(crate) const SPIN_BEFORE_BLOCK_NS: u64 = 100_000;

/// Idle rounds counted before the clock is read at all (a round of a busy thread that
/// happens to find nothing reads no clock).
pub(crate) const ROUNDS_BEFORE_CLOCK: u32 = 64;

/// The longest one sleep lasts: 1 ms. Bounds how late a coroutine waiting on something the
/// channel does not report (another thread, the soft fabric) is polled; the soft fabric's
/// sleeps are bounded the same way (200 µs, `SLEEP_AT_MOST`), verbs' completions and pauses
/// wake the thread on time regardless.
pub(crate) const BLOCK_AT_MOST_NS: u64 = 1_000_000;

/// Send-queue events acknowledged at once (`ibv_ack_cq_events` takes a mutex in
/// libibverbs: one acknowledgement per 64 events).
pub(crate) const ACK_BATCH: u32 = 64;

/// A send completion queue's idle state.
#[derive(Default)]
pub(crate) struct Idle {
    /// Bumped by every post and completion of the queue pairs on the queue.
    activity: Cell<u64>,
    /// `activity` as of the last round.
    seen: Cell<u64>,
    /// How long nothing has moved.
    spin: Spin,
    /// Send-queue events read and not acknowledged.
    pub(super) unacked: Cell<u32>,
    /// Sleeps on the channel.
    sleeps: Cell<u64>,
    /// Completion events read (woken by a completion, not a timeout).
    events: Cell<u64>,
}

impl SendCq {
    /// Something moved: a post or a completion.
    #[inline]
    pub(super) fn touch(&self) {
        let a = &self.idle.activity;
        a.set(a.get().wrapping_add(1));
    }

    /// (sleeps, completion events) of this thread's queue so far.
    #[cfg(test)]
    pub(crate) fn idle_counts(&self) -> (u64, u64) {
        (self.idle.sleeps.get(), self.idle.events.get())
    }

    /// The end of the progress hook's round (see the module docs).
    #[inline]
    pub(super) fn idle_round(&self) {
        let i = &self.idle;
        let a = i.activity.get();
        if a != i.seen.get() {
            i.seen.set(a);
            i.spin.reset();
            return;
        }
        if let Some(timeout) = i.spin.idle(BLOCK_AT_MOST_NS) {
            self.sleep(timeout);
        }
    }

    /// The queue pairs with a receive wait.
    fn recv_waiting(&self) -> impl Iterator<Item = &VerbsQp> {
        let mut bits = self.recv_waiting_qps();
        std::iter::from_fn(move || {
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(p) = self.qp(i) {
                    // SAFETY: a queue pair with a waiting receive future, which placed it when
                    // it started waiting and borrows it: alive and where it placed itself;
                    // used on this thread only (as in `SendCq::round`).
                    return Some(unsafe { &*p });
                }
            }
            None
        })
    }

    /// Polls everything waited on once more (step 2): true when something moved (or a
    /// woken receive wait is still to run), and the thread must not sleep.
    fn moved_since_armed(&self) -> bool {
        let before = self.idle.activity.get();
        if self.waiters.get() > 0 {
            let bits = self.waiting_qps();
            if bits != 0
                && let Some(p) = self.qp(bits.trailing_zeros() as usize)
            {
                // SAFETY: as in `SendCq::round`.
                unsafe { &*p }.progress();
            }
        }
        for q in self.recv_waiting() {
            let stashed = q.recv_stash.take();
            let woken = stashed.is_some();
            q.recv_stash.set(stashed);
            if woken {
                return true;
            }
            q.recv_round();
        }
        self.idle.activity.get() != before
    }

    /// Arms, polls once more, sleeps at most `timeout_ns`, and takes the events (steps 1-4).
    fn sleep(&self, timeout_ns: u64) {
        let channel = self.channel();
        if !channel.is_null() {
            // SAFETY: live queues on this thread's channel (the send queue is this one, a
            // receive queue belongs to a live queue pair: `recv_waiting`).
            unsafe {
                if sys::ibv_req_notify_cq(self.raw(), 0) != 0 {
                    return;
                }
                for q in self.recv_waiting() {
                    if !q.raw.recv_cq.is_null() && sys::ibv_req_notify_cq(q.raw.recv_cq, 0) != 0 {
                        return;
                    }
                }
            }
            if self.moved_since_armed() {
                return;
            }
            self.idle.sleeps.set(self.idle.sleeps.get() + 1);
            // SAFETY: the channel lives as long as this queue.
            block(&mut [readable(unsafe { (*channel).fd })], timeout_ns);
            self.take_events(channel);
        } else if let Some(send) = self.fake_cq() {
            send.arm();
            let fakes = || {
                self.recv_waiting().filter_map(|q| match &q.dev {
                    Dev::Fake(f) => Some(f),
                    Dev::Real(_) => None,
                })
            };
            for f in fakes() {
                f.recv_cq.arm();
            }
            if self.moved_since_armed() {
                send.take_event();
                for f in fakes() {
                    f.recv_cq.take_event();
                }
                return;
            }
            self.idle.sleeps.set(self.idle.sleeps.get() + 1);
            // The fake device's wait: until its next late reply or the timeout.
            let now = now_ns();
            let until = fakes()
                .filter_map(|f| f.next_due())
                .fold(now + timeout_ns, u64::min);
            std::thread::sleep(std::time::Duration::from_nanos(until.saturating_sub(now)));
            let now = now_ns();
            let mut events = u64::from(send.take_event());
            for f in fakes() {
                f.deliver_due(now);
                events += u64::from(f.recv_cq.take_event());
            }
            self.idle.events.set(self.idle.events.get() + events);
        }
    }

    /// Reads every event on the channel (non-blocking) and acknowledges them (step 4).
    fn take_events(&self, channel: *mut sys::ibv_comp_channel) {
        // SAFETY: this queue's live channel, non-blocking (`nonblocking_channel`).
        while let Some(cq) = unsafe { next_event(channel) } {
            self.idle.events.set(self.idle.events.get() + 1);
            if cq == self.raw() {
                let n = self.idle.unacked.get() + 1;
                if n >= ACK_BATCH {
                    // SAFETY: `n` events of this live queue were read and not acknowledged.
                    unsafe { sys::ibv_ack_cq_events(cq, n) };
                    self.idle.unacked.set(0);
                } else {
                    self.idle.unacked.set(n);
                }
            } else {
                // SAFETY: a receive queue of a queue pair on this channel, live: it is
                // destroyed only by its queue pair's drop, on this thread, after which the
                // kernel delivers no event of it; its one event read is acknowledged.
                unsafe { sys::ibv_ack_cq_events(cq, 1) };
            }
        }
    }
}

/// How long the rounds of a thread have found nothing, and whether it should sleep now: a
/// client's send queue (above) and a memory node's server thread (`memnode/idle.rs`).
#[derive(Default)]
pub(crate) struct Spin {
    /// Rounds since something last moved.
    rounds: Cell<u32>,
    /// When the thread was first seen idle (`now_ns`; 0: not timed yet).
    since: Cell<u64>,
}

impl Spin {
    /// Something moved: spin again before the next sleep.
    #[inline]
    pub(crate) fn reset(&self) {
        self.rounds.set(0);
        self.since.set(0);
    }

    /// A round that found nothing: how long to sleep (at most `at_most_ns`, and never past
    /// the thread's next pause deadline) once nothing has moved for
    /// [`SPIN_BEFORE_BLOCK_NS`], `None` while spinning. The first [`ROUNDS_BEFORE_CLOCK`]
    /// idle rounds read no clock; after a sleep that found nothing (no [`Self::reset`]) the
    /// answer is to sleep again at once.
    #[inline]
    pub(crate) fn idle(&self, at_most_ns: u64) -> Option<u64> {
        let r = self.rounds.get();
        if r < ROUNDS_BEFORE_CLOCK {
            self.rounds.set(r + 1);
            return None;
        }
        self.idle_long(at_most_ns)
    }

    #[cold]
    fn idle_long(&self, at_most_ns: u64) -> Option<u64> {
        let now = now_ns();
        let since = self.since.get();
        if since == 0 {
            self.since.set(now);
            return None;
        }
        if now.saturating_sub(since) < SPIN_BEFORE_BLOCK_NS {
            return None;
        }
        let mut timeout = at_most_ns;
        if let Some(d) = crate::verbs::timer::next_deadline() {
            timeout = timeout.min(d.saturating_sub(now));
        }
        (timeout > 0).then_some(timeout)
    }
}

/// A completion channel of device `ctx` whose fd does not block (`ibv_get_cq_event` then
/// answers EAGAIN when no event is there: [`next_event`]).
pub(crate) fn nonblocking_channel(
    ctx: *mut sys::ibv_context,
) -> Result<*mut sys::ibv_comp_channel, VerbsError> {
    // SAFETY: `ctx` is open; checked for null.
    let ch = unsafe { sys::ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(sys_err("ibv_create_comp_channel"));
    }
    // SAFETY: a live channel's fd; F_SETFL with O_NONBLOCK changes only its mode.
    let rc = unsafe {
        let fd = (*ch).fd;
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        )
    };
    if rc < 0 {
        let e = sys_err("fcntl O_NONBLOCK on the completion channel");
        // SAFETY: created above, no queue on it yet.
        unsafe { sys::ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok(ch)
}

/// Takes one event of `channel` (`ibv_get_cq_event`): its completion queue, which the caller
/// acknowledges (`ibv_ack_cq_events`) before destroying that queue; `None` when none is
/// there.
///
/// # Safety
/// `channel` is live and non-blocking ([`nonblocking_channel`]).
// SAFETY: unsafe to call, not to run: its one FFI call relies only on the contract above.
pub(crate) unsafe fn next_event(channel: *mut sys::ibv_comp_channel) -> Option<*mut sys::ibv_cq> {
    let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
    let mut ctx: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: by the caller's contract (EAGAIN when empty); two out pointers we own.
    (unsafe { sys::ibv_get_cq_event(channel, &mut cq, &mut ctx) } == 0).then_some(cq)
}

/// What [`block`] waits for on `fd`: that it is readable.
pub(crate) fn readable(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Blocks in `ppoll(2)` until one of `fds` is ready or `timeout_ns` has passed (an
/// interrupted or failed call returns early: the caller's round goes on either way).
pub(crate) fn block(fds: &mut [libc::pollfd], timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `fds` are valid pollfds we own, `ts` a timespec we own; no signal mask.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
}

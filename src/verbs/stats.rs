//! What the verbs data path costs beyond the verbs themselves, counted without a NIC: bytes
//! bounced through staging, completion-queue polls per completion, doorbells and work
//! requests, one-off registrations, unsignaled posts, and the memory node's waits on its own
//! replies.
//!
//! Each queue pair counts in `Cell`s (no atomic on the hot path). When it is dropped its
//! figures are added to a process-wide total ([`totals`]), so a command can print what all
//! its threads' queue pairs did once they are gone (`remora bench`/`perf --fabric verbs`, and
//! the memory node's stop line).
use std::cell::Cell;
use std::fmt;
use std::ops::{Add, Sub};
use std::sync::Mutex;

/// A plain copy of the counters, to add, subtract and print.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VerbsStats {
    /// Bytes copied between a caller's buffer and staging: READ data.
    pub bounced_read: u64,
    /// ... atomic results (8 per CMP_AND_SWP / FETCH_AND_ADD).
    pub bounced_atomic: u64,
    /// ... WRITE, WRITE_WITH_IMM and SEND data too large to go inline.
    pub bounced_write: u64,
    /// Bytes the NIC read or wrote in place, in a registered buffer of the caller.
    pub in_place: u64,
    /// Batches that needed a one-off registration (larger than a staging slot).
    pub oneoff_regs: u64,
    /// `ibv_post_send` calls.
    pub doorbells: u64,
    /// Work requests posted.
    pub wrs: u64,
    /// Work requests posted without a completion of their own (beyond each batch's last).
    pub unsignaled: u64,
    /// `ibv_poll_cq` calls on send completion queues.
    pub cq_polls: u64,
    /// ... of which found nothing.
    pub empty_polls: u64,
    /// Send completions reaped.
    pub completions: u64,
    /// `ibv_poll_cq` calls on receive completion queues (a receive waits by polling only
    /// this queue, never the send queue's).
    pub recv_polls: u64,
    /// ... of which found nothing (a wait for the peer's message, not data-path work).
    pub recv_empty: u64,
    /// Receive completions reaped.
    pub recv_completions: u64,
    /// Receive chains posted (`ibv_post_recv` calls).
    pub recv_posts: u64,
    /// Receive work requests in those chains.
    pub recvs_posted: u64,
    /// Memory node: messages handed to its service.
    pub server_messages: u64,
    /// Memory node: times it waited for one of its own replies (a full send queue or no
    /// staging slot counts one wait per spin round).
    pub server_waits: u64,
    /// Memory node: times a server thread slept on its completion channels when idle
    /// (`memnode/idle.rs`).
    pub server_sleeps: u64,
    /// Memory node: events that ended those sleeps (completions, or its inbox's bell); the
    /// rest ended by their timeout.
    pub server_wakeups: u64,
}

impl VerbsStats {
    /// CQ polls per send completion (0 when none completed).
    pub fn polls_per_completion(&self) -> f64 {
        ratio(self.cq_polls, self.completions)
    }

    /// Bytes bounced through staging in all.
    pub fn bounced(&self) -> u64 {
        self.bounced_read + self.bounced_atomic + self.bounced_write
    }

    /// The memory node's waits per message served.
    pub fn waits_per_message(&self) -> f64 {
        ratio(self.server_waits, self.server_messages)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

macro_rules! fields {
    ($m:ident) => {
        $m!(
            bounced_read,
            bounced_atomic,
            bounced_write,
            in_place,
            oneoff_regs,
            doorbells,
            wrs,
            unsignaled,
            cq_polls,
            empty_polls,
            completions,
            recv_polls,
            recv_empty,
            recv_completions,
            recv_posts,
            recvs_posted,
            server_messages,
            server_waits,
            server_sleeps,
            server_wakeups
        );
    };
}

macro_rules! binop {
    ($($f:ident),*) => {
        impl Add for VerbsStats {
            type Output = VerbsStats;
            fn add(self, o: VerbsStats) -> VerbsStats {
                VerbsStats { $($f: self.$f.wrapping_add(o.$f)),* }
            }
        }
        impl Sub for VerbsStats {
            type Output = VerbsStats;
            fn sub(self, o: VerbsStats) -> VerbsStats {
                VerbsStats { $($f: self.$f.wrapping_sub(o.$f)),* }
            }
        }
    };
}
fields!(binop);

impl fmt::Display for VerbsStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bounced bytes: read {} atomic {} write {} (in place {}, one-off registrations {}); \
             {} doorbells for {} work requests ({} unsignaled, {:.2} per doorbell); send CQ: {} \
             polls for {} completions ({:.2} per completion, {} empty); receive CQ: {} polls for {} \
             completions ({} empty); receive posts: {} for {} buffers",
            self.bounced_read,
            self.bounced_atomic,
            self.bounced_write,
            self.in_place,
            self.oneoff_regs,
            self.doorbells,
            self.wrs,
            self.unsignaled,
            ratio(self.wrs, self.doorbells),
            self.cq_polls,
            self.completions,
            self.polls_per_completion(),
            self.empty_polls,
            self.recv_polls,
            self.recv_completions,
            self.recv_empty,
            self.recv_posts,
            self.recvs_posted,
        )?;
        if self.server_messages > 0 {
            write!(
                f,
                "; server: {} messages, {} waits on its own replies ({:.3} per message)",
                self.server_messages,
                self.server_waits,
                self.waits_per_message()
            )?;
        }
        if self.server_sleeps > 0 {
            write!(
                f,
                "; server idle: {} sleeps, {} woken by an event",
                self.server_sleeps, self.server_wakeups
            )?;
        }
        Ok(())
    }
}

/// Live counters of one queue pair (or one memory node).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    s: Cell<VerbsStats>,
}

impl Stats {
    /// Adds to the counters through `f` (a `Cell` copy: no atomic, no borrow held).
    #[inline]
    pub fn bump(&self, f: impl FnOnce(&mut VerbsStats)) {
        let mut s = self.s.get();
        f(&mut s);
        self.s.set(s);
    }

    /// The counters so far.
    pub fn get(&self) -> VerbsStats {
        self.s.get()
    }

    /// Adds these counters to the process-wide total (once, when their owner goes away).
    pub fn retire(&self) {
        let mine = self.s.take();
        let mut t = TOTALS.lock().unwrap_or_else(|p| p.into_inner());
        *t = *t + mine;
    }
}

static TOTALS: Mutex<VerbsStats> = Mutex::new(VerbsStats {
    bounced_read: 0,
    bounced_atomic: 0,
    bounced_write: 0,
    in_place: 0,
    oneoff_regs: 0,
    doorbells: 0,
    wrs: 0,
    unsignaled: 0,
    cq_polls: 0,
    empty_polls: 0,
    completions: 0,
    recv_polls: 0,
    recv_empty: 0,
    recv_completions: 0,
    recv_posts: 0,
    recvs_posted: 0,
    server_messages: 0,
    server_waits: 0,
    server_sleeps: 0,
    server_wakeups: 0,
});

/// What every queue pair dropped so far in this process did (see the module docs).
pub fn totals() -> VerbsStats {
    *TOTALS.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retire_adds_to_the_totals_and_ratios_read_right() {
        let before = totals();
        let s = Stats::default();
        s.bump(|v| {
            v.cq_polls += 12;
            v.completions += 10;
            v.bounced_read += 64;
            v.server_messages += 4;
            v.server_waits += 1;
        });
        assert_eq!(s.get().polls_per_completion(), 1.2);
        assert_eq!(s.get().waits_per_message(), 0.25);
        s.retire();
        assert_eq!(s.get(), VerbsStats::default(), "retired counters restart");
        let d = totals() - before;
        // Other tests may retire queue pairs concurrently: at least ours arrived.
        assert!(d.cq_polls >= 12 && d.bounced_read >= 64 && d.server_waits >= 1);
        assert_eq!(VerbsStats::default().polls_per_completion(), 0.0);
    }
}

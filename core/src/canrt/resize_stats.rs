//! How many resizes one CANRT server has begun and ended: its *resize clock*, part of its
//! [`ServerStats`](super::ServerStats) (each server instance, hence each tree, has its own).
//!
//! A benchmark that runs the server reads the clock before and after each operation to tell
//! the operations that overlapped a resize of that tree in time ([`ResizeClock::overlapped`]),
//! whichever data nodes they touched: an operation on a node the resize does not freeze
//! counts too, as it is the one that shows a split blocking nobody else.
//!
//! Why not in the tree's memory, for clients on another machine to read: nothing a client
//! reads anyway could carry it (a meta word has no spare bit and says only whether *its*
//! node is frozen), so each operation would need one more READ of a tree-wide word, which
//! would change the verb counts, the memory node's NIC load and the latencies being
//! measured.
use core::sync::atomic::{AtomicU32, Ordering};

/// Resizes begun and ended by one server (mod 2^32).
#[derive(Debug, Default)]
pub struct ResizeCounts {
    begun: AtomicU32,
    ended: AtomicU32,
}

impl ResizeCounts {
    /// A resize began (the first data node was frozen for it).
    pub(super) fn begin(&self) {
        self.begun.fetch_add(1, Ordering::AcqRel);
    }

    /// The resize under way ended: published, failed, or abandoned by recovery.
    pub(super) fn end(&self) {
        self.ended.fetch_add(1, Ordering::AcqRel);
    }

    /// The clock now.
    pub fn now(&self) -> ResizeClock {
        // `ended` first: a resize that begins and ends between the two loads then reads as
        // under way (it was), never as ended before it began.
        let ended = self.ended.load(Ordering::Acquire);
        let begun = self.begun.load(Ordering::Acquire);
        ResizeClock { begun, ended }
    }
}

/// One reading of a server's resize counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResizeClock {
    /// Resizes begun so far (wrapping).
    pub begun: u32,
    /// Resizes ended so far (wrapping); equal to `begun` when none is under way.
    pub ended: u32,
}

impl ResizeClock {
    /// A resize was under way (begun, not yet ended).
    pub fn under_way(self) -> bool {
        self.begun != self.ended
    }

    /// Whether an operation that read `self` when it started and `end` when it ended
    /// overlapped a resize: one was under way when it started, or one began before it
    /// ended.
    pub fn overlapped(self, end: ResizeClock) -> bool {
        self.under_way() || end.begun != self.begun
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_overlaps_a_resize_under_way_or_begun() {
        let c = ResizeCounts::default();
        let quiet = c.now();
        assert!(!quiet.under_way());
        assert!(!quiet.overlapped(c.now()), "no resize at all");
        c.begin();
        let during = c.now();
        assert!(during.under_way());
        assert!(
            quiet.overlapped(during),
            "a resize began before the op ended"
        );
        c.end();
        assert!(quiet.overlapped(c.now()), "began and ended within the op");
        assert!(during.overlapped(c.now()), "under way when the op started");
        let after = c.now();
        assert!(!after.under_way());
        assert!(
            !after.overlapped(c.now()),
            "the op began after the resize ended"
        );
    }

    #[test]
    fn the_clock_survives_wrapping() {
        let c = ResizeCounts {
            begun: AtomicU32::new(u32::MAX),
            ended: AtomicU32::new(u32::MAX),
        };
        let t0 = c.now();
        c.begin();
        assert!(c.now().under_way());
        c.end();
        assert_eq!(c.now(), ResizeClock { begun: 0, ended: 0 });
        assert!(t0.overlapped(c.now()));
    }
}

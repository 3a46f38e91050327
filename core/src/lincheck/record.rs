//! The history recorder: preallocated, shared by the coroutines of one thread.
use super::history::{Event, History, Op, Outcome, PENDING};
use core::cell::RefCell;
use core::fmt;
use std_alloc::vec::Vec;

/// An invoked operation's place in the recorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(u32);

/// The recorder ran out of room: the history is incomplete and cannot be checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecorderFull {
    /// Events the recorder had room for.
    pub ops_capacity: usize,
    /// Result items the recorder had room for.
    pub items_capacity: usize,
}

impl fmt::Display for RecorderFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "history recorder full ({} operations, {} scan items): the history is incomplete; \
             give the recorder more room",
            self.ops_capacity, self.items_capacity
        )
    }
}

struct Inner {
    events: Vec<Event>,
    items: Vec<(u64, u64)>,
    next: u64,
    full: bool,
}

/// Records invocations and responses. Memory is allocated once, in [`Recorder::new`];
/// recording never allocates. Use one recorder per thread (it is not `Sync`).
pub struct Recorder {
    inner: RefCell<Inner>,
    ops_capacity: usize,
    items_capacity: usize,
}

impl Recorder {
    /// Room for `ops` operations and `items` scan/search result items in total.
    pub fn new(ops: usize, items: usize) -> Recorder {
        Recorder {
            inner: RefCell::new(Inner {
                events: Vec::with_capacity(ops),
                items: Vec::with_capacity(items),
                next: 0,
                full: false,
            }),
            ops_capacity: ops,
            items_capacity: items,
        }
    }

    /// Records an invocation at `now_ns`; `None` if the recorder is full (the caller must
    /// not run the operation: its effect would be missing from the history).
    pub fn invoke(&self, client: u32, op: Op, now_ns: u64) -> Option<Slot> {
        let mut g = self.inner.borrow_mut();
        if g.events.len() == self.ops_capacity {
            g.full = true;
            return None;
        }
        let s = g.next;
        g.next += 1;
        g.events.push(Event {
            client,
            call: s,
            ret: PENDING,
            call_ns: now_ns,
            ret_ns: PENDING,
            op,
            outcome: Outcome::Unknown,
        });
        Some(Slot(g.events.len() as u32 - 1))
    }

    /// Records the response of `slot` at `now_ns`. `Outcome::Unknown` leaves it pending
    /// (an error: may or may not have taken effect). For `Items`, use [`Recorder::complete_items`].
    pub fn complete(&self, slot: Slot, outcome: Outcome, now_ns: u64) {
        if outcome == Outcome::Unknown {
            return;
        }
        let mut g = self.inner.borrow_mut();
        let s = g.next;
        g.next += 1;
        let i = slot.0 as usize;
        let e = &mut g.events[i];
        e.ret = s;
        e.ret_ns = now_ns;
        e.outcome = outcome;
    }

    /// Records a scan/search response with its items. If the item pool is full the
    /// operation stays pending and the recorder reports itself full at `finish`.
    pub fn complete_items(&self, slot: Slot, items: &[(u64, u64)], now_ns: u64) {
        let start = {
            let mut g = self.inner.borrow_mut();
            if g.items.len() + items.len() > self.items_capacity {
                g.full = true;
                return;
            }
            let start = g.items.len() as u32;
            g.items.extend_from_slice(items);
            start
        };
        self.complete(
            slot,
            Outcome::Items {
                start,
                len: items.len() as u32,
            },
            now_ns,
        );
    }

    /// Operations recorded so far.
    pub fn len(&self) -> usize {
        self.inner.borrow().events.len()
    }

    /// Whether no operation has been recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once an operation or item was refused.
    pub fn is_full(&self) -> bool {
        self.inner.borrow().full
    }

    /// The history, stamped with record order (exact real-time order on one thread), or
    /// an error if anything was refused.
    pub fn finish(self) -> Result<History, RecorderFull> {
        let g = self.inner.into_inner();
        if g.full {
            return Err(RecorderFull {
                ops_capacity: self.ops_capacity,
                items_capacity: self.items_capacity,
            });
        }
        Ok(History {
            events: g.events,
            items: g.items,
        })
    }
}

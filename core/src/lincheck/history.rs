//! What a history is made of: operations, outcomes, events.
use core::fmt;
pub use remora_layouts::catfish::Rect;
use std_alloc::vec::Vec;

/// The response stamp of an operation that never returned (unknown outcome).
pub const PENDING: u64 = u64::MAX;

/// A unique value tag: `writer << 32 | seq` (`writer` >= 1, `seq` >= 1).
pub const fn tag(writer: u32, seq: u32) -> u64 {
    (writer as u64) << 32 | seq as u64
}

/// `(writer, seq)` of a [`tag`].
pub const fn tag_parts(t: u64) -> (u32, u32) {
    ((t >> 32) as u32, t as u32)
}

/// One operation and its arguments. Keys are integers (passed to the index big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// Inserts or overwrites; outcome `Done`.
    Upsert {
        /// The key.
        key: u64,
        /// The value written: a unique [`tag`].
        value: u64,
    },
    /// Overwrites if present; outcome `Present(was_present)`.
    Update {
        /// The key.
        key: u64,
        /// The value written: a unique [`tag`].
        value: u64,
    },
    /// Outcome `Present(was_present)`.
    Delete {
        /// The key.
        key: u64,
    },
    /// Outcome `Value(..)`.
    Get {
        /// The key.
        key: u64,
    },
    /// Up to `limit` pairs with keys `>= from`; outcome `Items`.
    Scan {
        /// Lowest key of the range (inclusive).
        from: u64,
        /// Most pairs returned.
        limit: u32,
    },
    /// Adds entry `id` with rectangle `rect`; outcome `Done`.
    Insert {
        /// The entry's rectangle.
        rect: Rect,
        /// The entry's unique id.
        id: u64,
    },
    /// Removes entry `id`; outcome `Present(was_present)`.
    Remove {
        /// The rectangle the entry was inserted with.
        rect: Rect,
        /// The entry's unique id.
        id: u64,
    },
    /// Entries intersecting `window`; outcome `Items` of `(id, 0)`.
    Search {
        /// The query window.
        window: Rect,
    },
}

/// What an operation returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Failed with an error or never returned: it may or may not have taken effect, at any
    /// point after its invocation.
    Unknown,
    /// Completed, with nothing to return (an upsert or insert).
    Done,
    /// Whether the key or entry was present before the operation.
    Present(bool),
    /// The value read, `None` if absent.
    Value(Option<u64>),
    /// `len` items from `start` in the history's item pool.
    Items {
        /// Index of the first item in [`History::items`].
        start: u32,
        /// Number of items.
        len: u32,
    },
}

/// One operation of a history. `call`/`ret` are order stamps: `a` precedes `b` iff
/// `a.ret < b.call`; `ret` is [`PENDING`] for an unknown outcome. `call_ns`/`ret_ns` are
/// the clock's times, for printing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The client that issued the operation.
    pub client: u32,
    /// Invocation stamp.
    pub call: u64,
    /// Response stamp; [`PENDING`] if it never returned.
    pub ret: u64,
    /// Clock time of the invocation, in nanoseconds.
    pub call_ns: u64,
    /// Clock time of the response, in nanoseconds.
    pub ret_ns: u64,
    /// The operation and its arguments.
    pub op: Op,
    /// What it returned.
    pub outcome: Outcome,
}

/// A complete history: its events and the pool their scan/search results live in.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Every operation, in recording order.
    pub events: Vec<Event>,
    /// The pool of `(key, value)` (or `(id, 0)`) results that `Items` outcomes index.
    pub items: Vec<(u64, u64)>,
}

impl History {
    /// The items of `e`'s result (empty unless its outcome is `Items`).
    pub fn items_of(&self, e: &Event) -> &[(u64, u64)] {
        match e.outcome {
            Outcome::Items { start, len } => self
                .items
                .get(start as usize..start as usize + len as usize)
                .unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Appends an event (hand-built histories and the shrinker); `items` for scans/searches.
    pub fn push(&mut self, mut e: Event, items: &[(u64, u64)]) {
        if let Outcome::Items { .. } = e.outcome {
            e.outcome = Outcome::Items {
                start: self.items.len() as u32,
                len: items.len() as u32,
            };
            self.items.extend_from_slice(items);
        }
        self.events.push(e);
    }

    /// Joins the histories of several threads (one recorder each) by their clock times,
    /// which must come from one shared clock. Equal times count as concurrent.
    pub fn merge(parts: Vec<History>) -> History {
        let mut out = History::default();
        for p in parts {
            for e in &p.events {
                let mut e2 = *e;
                e2.call = e.call_ns;
                e2.ret = if e.ret == PENDING { PENDING } else { e.ret_ns };
                out.push(e2, p.items_of(e));
            }
        }
        out
    }

    /// Prints events one a line (used by violation reports).
    pub fn write_events(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.events {
            writeln!(f, "  {}", Shown(self, e))?;
        }
        Ok(())
    }
}

struct Val(u64);
impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (w, s) = tag_parts(self.0);
        write!(f, "c{w}#{s}")
    }
}

struct R(Rect);
impl fmt::Display for R {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        write!(f, "[{},{}..{},{}]", r.min_x, r.min_y, r.max_x, r.max_y)
    }
}

/// One event, printable.
pub(crate) struct Shown<'a>(pub &'a History, pub &'a Event);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (h, e) = (self.0, self.1);
        let ret = if e.ret == PENDING {
            "pending".into()
        } else {
            std_alloc::format!("{}", e.ret_ns)
        };
        write!(
            f,
            "client {:>3} [{:>10} .. {:>10}] ns  ",
            e.client, e.call_ns, ret
        )?;
        match e.op {
            Op::Upsert { key, value } => write!(f, "upsert({key:#x}, {})", Val(value))?,
            Op::Update { key, value } => write!(f, "update({key:#x}, {})", Val(value))?,
            Op::Delete { key } => write!(f, "delete({key:#x})")?,
            Op::Get { key } => write!(f, "get({key:#x})")?,
            Op::Scan { from, limit } => write!(f, "scan({from:#x}, limit {limit})")?,
            Op::Insert { rect, id } => write!(f, "insert({}, id {id})", R(rect))?,
            Op::Remove { rect, id } => write!(f, "remove({}, id {id})", R(rect))?,
            Op::Search { window } => write!(f, "search({})", R(window))?,
        }
        match e.outcome {
            Outcome::Unknown => write!(f, " -> unknown (may or may not have taken effect)"),
            Outcome::Done => write!(f, " -> ok"),
            Outcome::Present(b) => write!(f, " -> {b}"),
            Outcome::Value(None) => write!(f, " -> None"),
            Outcome::Value(Some(v)) => write!(f, " -> Some({})", Val(v)),
            Outcome::Items { .. } => {
                write!(f, " -> [")?;
                for (i, (k, v)) in h.items_of(e).iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    if let Op::Search { .. } = e.op {
                        write!(f, "{sep}{k}")?;
                    } else {
                        write!(f, "{sep}{k:#x}={}", Val(*v))?;
                    }
                }
                write!(f, "]")
            }
        }
    }
}

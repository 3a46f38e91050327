//! Linearizability checking of key-value (and rectangle) histories.
//!
//! [`kvcheck`](crate::kvcheck) checks each client on its own keys; this module checks what
//! it cannot: conditional operations on shared keys and real-time order between clients.
//!
//! # Recording
//! A [`Recorder`] (preallocated, no allocation per operation) stores every operation's
//! invocation and response: client, [`Op`] with its arguments, [`Outcome`], and times in
//! nanoseconds supplied by the caller (core has no clock). Values are unique tags
//! (`writer << 32 | sequence`, [`tag`]) so the checker knows which write a read saw. An
//! operation that failed with an error, or whose client died, keeps [`Outcome::Unknown`]:
//! it may have taken effect at any point after its invocation, or not at all. Scan and search
//! results are copied into the recorder's preallocated item pool. A full recorder refuses new
//! operations (`invoke` returns `None`, the caller must stop) and [`Recorder::finish`] says so.
//!
//! Real-time order: operation `a` precedes `b` iff `a.ret < b.call` (equal stamps are
//! concurrent). One recorder is used from one thread, so the order in which it records events
//! *is* their real order; [`Recorder::finish`] therefore stamps events with their record
//! sequence numbers (exact even when the clock does not advance, as in virtual time).
//! [`History::merge`] joins recorders of several threads by their clock times instead (the
//! clock must then be shared: one `Instant` origin, or `CLOCK_MONOTONIC`).
//!
//! # Checking ([`check`])
//! A map is linearizable iff each key's sub-history is (locality, Herlihy & Wing), for
//! single-key operations. Each key is checked by [`register`]: a depth-first search for a
//! linearization in the style of Wing & Gong with Lowe's just-in-time linearization (an
//! operation may be linearized next only if no unlinearized operation returned before it
//! was invoked) and memoization of (set of linearized operations, register state), the set
//! kept as a 128-bit Zobrist fingerprint (false-merge probability ~ states² / 2¹²⁸). Two
//! reductions keep it fast on hot keys: an observer (get, update/delete returning false)
//! that agrees with the current state is linearized at once without branching (moving it
//! first never invalidates a linearization), and a write that would overwrite a value some
//! still-unlinearized get returns is never tried (values are unique, it could not come back).
//! A key whose search exceeds the budget is reported as inconclusive, never as a violation.
//!
//! Scans and window searches are not atomic in these indexes, so they are checked per
//! returned item against interval rules ([`window`]), soundly (no false alarms on a
//! linearizable history):
//! - a returned `(k, v)` must be *possible*: `v` was written to `k` by an operation invoked
//!   no later than the scan returned, and no state change of `k` invoked after that write
//!   returned completed before the scan was invoked;
//! - a key *certainly present* during the whole scan must be returned (within `from..` and,
//!   when the scan returned `limit` items, up to its last key): some operation proving
//!   presence (upsert, update→true, get→Some) returned before the scan was invoked, and no
//!   delete (returned true, or unknown) could be linearized between the latest such
//!   operation's invocation and the scan's response.
//!
//! Rectangles (Catfish window queries) use the same per-entry search (insert is a write,
//! remove→true a delete, remove→false an observer of absence) and the same two rules for a
//! search's result. Entries are a set: the caller never inserts an id that may be present.
//!
//! # Reporting
//! A violation names the key (or scan) and a failing sub-history, shrunk soundly (it fails
//! only if the whole does): cut at *quiescent* points (every earlier operation returned before
//! every later one began; later ones are dropped, earlier ones too if the rest fails from any
//! starting state), then drop observers (gets, updates/deletes returning false), which only
//! removes constraints. When that is still long, a short *core* is found by delta debugging
//! over writes too, keeping a drop only if the rest fails from any state even when the dropped
//! writes may or may not have taken effect, so the core is a proof as well. Reports print
//! with the caller's seed.
//!
//! # Workload
//! [`driver::lin_client`] runs one client's operations on any [`KvIndex`](crate::index::KvIndex)
//! and records them.
mod check;
pub mod driver;
mod history;
mod memo;
mod record;
mod register;
mod shrink;
mod window;

#[cfg(test)]
mod tests;

pub use check::{CheckConfig, Report, Violation, check};
pub use history::{Event, History, Op, Outcome, PENDING, Rect, tag, tag_parts};
pub use record::{Recorder, RecorderFull, Slot};

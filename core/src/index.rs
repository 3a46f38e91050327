//! The one trait every remora key-value index implements, so `remora bench` and the
//! correctness tests drive any of them the same way.
//!
//! A *handle* is one compute node's (worker thread's) view of an index: it holds the
//! endpoint's queue pairs by reference and the node-local state (caches, local lock tables,
//! combining buffers). Coroutines of that thread share the handle through `&self`; handles are
//! not `Sync` and need not be `Send`.
//!
//! Keys are byte strings compared lexicographically; 8-byte integer keys are passed
//! big-endian (`u64::to_be_bytes`) so that byte order is numeric order. Values are byte
//! strings up to the index's configured maximum.
use core::fmt::{Debug, Display};
use core::future::Future;

/// A key-value index handle: point operations and ordered scans over byte-string keys, as futures.
pub trait KvIndex {
    /// The index's error type.
    type Error: Debug + Display;

    /// Inserts or overwrites `key`.
    fn upsert(&self, key: &[u8], value: &[u8]) -> impl Future<Output = Result<(), Self::Error>>;

    /// Overwrites `key` if present; `Ok(false)` if absent.
    fn update(&self, key: &[u8], value: &[u8]) -> impl Future<Output = Result<bool, Self::Error>>;

    /// Copies the value of `key` into `out` and returns its length, or `None` if absent.
    fn get(
        &self,
        key: &[u8],
        out: &mut [u8],
    ) -> impl Future<Output = Result<Option<usize>, Self::Error>>;

    /// Removes `key`; `Ok(false)` if absent.
    fn delete(&self, key: &[u8]) -> impl Future<Output = Result<bool, Self::Error>>;

    /// Visits up to `limit` pairs with keys `>= from` in key order; returns how many.
    fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> impl Future<Output = Result<usize, Self::Error>>;
}

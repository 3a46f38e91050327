//! remora-layouts: the byte formats that cross the fabric.
//!
//! Every node and message format of remora's systems lives here, `no_std`, as a `#[repr(C)]`
//! struct with compile-time size and offset assertions, bit-packed 8-byte words with typed
//! accessors, and a checked decoder that returns [`LayoutError`] (never panics) on bytes that
//! do not form a valid value. [`region::RegionHeader`] is the reference example of the pattern.
// Docs link private items on purpose (for readers of the source, and of
// `cargo doc --document-private-items`); broken links stay errors.
#![allow(rustdoc::private_intra_doc_links)]
#![no_std]
#![warn(missing_docs)]
#![forbid(unsafe_op_in_unsafe_fn)]

pub mod addr;
pub mod bits;
pub mod canrt;
pub mod catfish;
pub mod chime;
pub mod crc64ecma;
mod crc64fold;
pub mod crc64xz;
pub mod erda;
pub mod error;
pub mod region;
pub mod sherman;
pub mod smart;

pub use addr::{GlobalAddr, NodeId};
pub use error::LayoutError;

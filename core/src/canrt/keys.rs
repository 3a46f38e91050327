//! Keys of the tree's width: 8-byte integer keys or 16-byte keys (the paper's), chosen when
//! the tree is formatted ([`remora_layouts::canrt::TreeHeader::key_len`]). Inside CANRT a
//! key is a `u128` holding its bytes big-endian, so integer order is byte order, and the
//! planner, lookups and scans work alike for both widths.
use super::CanrtError;
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use remora_layouts::canrt::{DataGeometry, MAX_KEY};

/// The key `bytes` name in a tree of geometry `g`, or [`CanrtError::BadKey`] naming the
/// tree's key width.
pub(super) fn key_of(g: &DataGeometry, bytes: &[u8]) -> Result<u128, CanrtError> {
    g.key_from_be(bytes).ok_or(CanrtError::BadKey {
        len: bytes.len(),
        width: g.key_len,
    })
}

/// The key of the item at region offset `at` (its first `key_len` bytes), as the server
/// compares keys when it applies or moves items.
pub(super) fn load_key(
    region: &dyn LocalRegion,
    g: &DataGeometry,
    at: u64,
) -> Result<u128, FabricError> {
    if g.key_len == 8 {
        return Ok(region.load_u64(at)? as u128);
    }
    let mut b = [0u8; MAX_KEY];
    region.read(at, &mut b[..g.key_len as usize])?;
    // `b` holds `key_len` bytes, the width `stored_key` reads.
    g.stored_key(&b)
        .map_err(super::server::bad_layout(region, at))
}

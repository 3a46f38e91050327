//! `GlobalAddr`: where a byte lives in remote memory.
//!
//! Packing (one `u64`, little-endian on the wire):
//!
//! | bits   | field  | meaning |
//! |--------|--------|---------|
//! | 63..48 | node   | memory-node id (0..=65535) |
//! | 47     | device | 1: the node's device (on-chip NIC) memory; 0: its host region |
//! | 46..0  | offset | byte offset inside that region (up to 128 TiB) |
//!
//! The all-zero word is [`GlobalAddr::NULL`]: offset 0 of every host region holds the region
//! header (see [`crate::region`]), so no object ever lives there.
//!
//! Several formats keep addresses in fewer bits (SMART's slots hold 48). [`GlobalAddr::pack48`]
//! packs node (8 bits) and host offset (40 bits, 1 TiB) and refuses what does not fit.
use crate::LayoutError;
use crate::bits::{Field, assert_disjoint};
use core::fmt;

/// Memory-node identifier.
pub type NodeId = u16;

/// A remote address: memory node + region + offset, in 64 bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct GlobalAddr(u64);

const NODE: Field = Field::new("node", 48, 16);
const DEVICE: Field = Field::new("device", 47, 1);
const OFFSET: Field = Field::new("offset", 0, 47);
const _: () = assert_disjoint(&[NODE, DEVICE, OFFSET]);
const _: () = assert!(NODE.mask() | DEVICE.mask() | OFFSET.mask() == u64::MAX);

const P48_NODE: Field = Field::new("node", 40, 8);
const P48_OFFSET: Field = Field::new("offset", 0, 40);
const _: () = assert_disjoint(&[P48_NODE, P48_OFFSET]);

impl GlobalAddr {
    /// The null address (node 0, host region, offset 0: the region header).
    pub const NULL: GlobalAddr = GlobalAddr(0);
    /// Largest offset a region can have.
    pub const MAX_OFFSET: u64 = (1 << 47) - 1;

    /// An address in a node's host region. Panics at compile time in const contexts, and
    /// returns an error at run time, when the offset does not fit: see [`Self::try_new`].
    pub const fn new(node: NodeId, offset: u64) -> GlobalAddr {
        assert!(offset <= Self::MAX_OFFSET, "offset beyond 47 bits");
        GlobalAddr(NODE.set(0, node as u64) | offset)
    }

    /// An address in a node's host region, or an error when the offset does not fit.
    pub const fn try_new(node: NodeId, offset: u64) -> Result<GlobalAddr, LayoutError> {
        if offset > Self::MAX_OFFSET {
            return Err(LayoutError::OutOfRange {
                field: "offset",
                value: offset,
            });
        }
        Ok(GlobalAddr(NODE.set(0, node as u64) | offset))
    }

    /// An address in a node's device (on-chip) memory.
    pub const fn device(node: NodeId, offset: u64) -> GlobalAddr {
        assert!(offset <= Self::MAX_OFFSET, "offset beyond 47 bits");
        GlobalAddr(NODE.set(0, node as u64) | DEVICE.mask() | offset)
    }

    /// Wraps a raw packed word (node, device bit, offset) without checking it.
    pub const fn from_raw(raw: u64) -> GlobalAddr {
        GlobalAddr(raw)
    }
    /// The packed 64-bit word (bits 63..48 node, 47 device, 46..0 offset).
    pub const fn raw(self) -> u64 {
        self.0
    }
    /// The memory node the address is on (bits 63..48).
    pub const fn node(self) -> NodeId {
        NODE.get(self.0) as NodeId
    }
    /// Whether the address is in the node's device (on-chip NIC) memory rather than its host region
    /// (bit 47).
    pub const fn is_device(self) -> bool {
        DEVICE.get(self.0) == 1
    }
    /// Byte offset inside the region (bits 46..0).
    pub const fn offset(self) -> u64 {
        OFFSET.get(self.0)
    }
    /// Whether this is [`GlobalAddr::NULL`] (the all-zero word).
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// This address moved by `delta` bytes inside the same region, or `None` when it would
    /// leave the 47-bit offset space.
    pub const fn checked_add(self, delta: u64) -> Option<GlobalAddr> {
        match self.offset().checked_add(delta) {
            Some(o) if o <= Self::MAX_OFFSET => Some(GlobalAddr(OFFSET.set(self.0, o))),
            _ => None,
        }
    }

    /// This address moved by `delta` bytes. Panics on overflow of the region's offset space,
    /// which only a bug (not remote input) can cause; decode remote addresses with
    /// [`Self::checked_add`].
    pub const fn add(self, delta: u64) -> GlobalAddr {
        match self.checked_add(delta) {
            Some(a) => a,
            None => panic!("GlobalAddr offset overflow"),
        }
    }

    /// Packs into 48 bits: node in bits 47..40, host offset in bits 39..0.
    pub const fn pack48(self) -> Result<u64, LayoutError> {
        if self.is_device() {
            return Err(LayoutError::OutOfRange {
                field: "device",
                value: 1,
            });
        }
        if self.node() as u64 > P48_NODE.max() {
            return Err(LayoutError::OutOfRange {
                field: "node",
                value: self.node() as u64,
            });
        }
        if self.offset() > P48_OFFSET.max() {
            return Err(LayoutError::OutOfRange {
                field: "offset",
                value: self.offset(),
            });
        }
        Ok(P48_NODE.set(0, self.node() as u64) | self.offset())
    }

    /// Inverse of [`Self::pack48`]; bits above 47 are refused.
    pub const fn unpack48(packed: u64) -> Result<GlobalAddr, LayoutError> {
        if packed >> 48 != 0 {
            return Err(LayoutError::OutOfRange {
                field: "packed48",
                value: packed,
            });
        }
        Ok(GlobalAddr::new(
            P48_NODE.get(packed) as NodeId,
            P48_OFFSET.get(packed),
        ))
    }
}

impl fmt::Debug for GlobalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let region = if self.is_device() { "dm" } else { "host" };
        write!(f, "{}:{}+{:#x}", self.node(), region, self.offset())
    }
}

impl fmt::Display for GlobalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fields_round_trip(node in any::<u16>(), off in 0..=GlobalAddr::MAX_OFFSET, dm in any::<bool>()) {
            let a = if dm { GlobalAddr::device(node, off) } else { GlobalAddr::new(node, off) };
            prop_assert_eq!(a.node(), node);
            prop_assert_eq!(a.offset(), off);
            prop_assert_eq!(a.is_device(), dm);
            prop_assert_eq!(GlobalAddr::from_raw(a.raw()), a);
        }

        #[test]
        fn pack48_round_trips_or_refuses(node in any::<u16>(), off in 0..=GlobalAddr::MAX_OFFSET) {
            let a = GlobalAddr::new(node, off);
            match a.pack48() {
                Ok(p) => {
                    prop_assert!(p < (1 << 48));
                    prop_assert_eq!(GlobalAddr::unpack48(p).unwrap(), a);
                }
                Err(_) => prop_assert!(node > 255 || off >= (1 << 40)),
            }
        }
    }

    #[test]
    fn packing_is_as_documented() {
        let a = GlobalAddr::new(0x1234, 0x56);
        assert_eq!(a.raw(), 0x1234_0000_0000_0056);
        assert_eq!(GlobalAddr::device(1, 8).raw(), 0x0001_8000_0000_0008);
        assert!(GlobalAddr::NULL.is_null());
        assert_eq!(
            GlobalAddr::try_new(0, 1 << 47).unwrap_err(),
            LayoutError::OutOfRange {
                field: "offset",
                value: 1 << 47
            }
        );
        assert_eq!(
            GlobalAddr::new(3, GlobalAddr::MAX_OFFSET).checked_add(1),
            None
        );
        assert!(GlobalAddr::unpack48(1 << 48).is_err());
    }
}

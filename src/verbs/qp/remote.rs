//! Where a memory node's memory is, as one client sees it, and how a `GlobalAddr` becomes a
//! remote virtual address and key.
use crate::verbs::wire::{DmKind, Welcome};
use remora_core::fabric::FabricError;
use remora_layouts::GlobalAddr;

/// Where a memory node's memory is, as one client sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Remote {
    pub region_addr: u64,
    pub region_rkey: u32,
    pub region_len: u64,
    pub dm: Option<(DmKind, u64, u32, u64)>,
}

impl Remote {
    pub fn from_welcome(w: &Welcome) -> Remote {
        Remote {
            region_addr: w.region_addr,
            region_rkey: w.region_rkey,
            region_len: w.region_len,
            dm: (w.dm_kind != DmKind::None).then_some((w.dm_kind, w.dm_addr, w.dm_rkey, w.dm_len)),
        }
    }

    /// The remote virtual address and key of `a`. Offsets past a region's end are passed on
    /// as they are: the NIC refuses them with a remote access error, touching nothing.
    pub(super) fn target(&self, a: GlobalAddr) -> (u64, u32) {
        let off = a.offset();
        if !a.is_device() {
            return (self.region_addr.wrapping_add(off), self.region_rkey);
        }
        match self.dm {
            Some((DmKind::Device, _, rkey, _)) => (off, rkey),
            Some((_, addr, rkey, _)) => (addr.wrapping_add(off), rkey),
            // No device memory: an address just past the host region, which its key does
            // not cover, so the NIC answers with a remote access error.
            None => (
                self.region_addr
                    .wrapping_add(self.region_len)
                    .wrapping_add(off),
                self.region_rkey,
            ),
        }
    }
}

impl Remote {
    /// The error for an atomic on `a` that the NIC refuses before sending it. rdma-core's
    /// providers reject misaligned atomics at post time (rxe does), so the fabric reports
    /// what a target would: a remote access error when the word lies outside the region, a
    /// remote invalid request otherwise.
    pub(super) fn misaligned_atomic(&self, wr: usize, a: GlobalAddr) -> Option<FabricError> {
        let (raddr, _) = self.target(a);
        if raddr % 8 == 0 {
            return None;
        }
        let limit = if a.is_device() {
            self.dm.map_or(0, |d| d.3)
        } else {
            self.region_len
        };
        if a.offset().checked_add(8).is_none_or(|end| end > limit) {
            Some(FabricError::RemoteAccess {
                wr,
                addr: a,
                len: 8,
            })
        } else {
            Some(FabricError::RemoteInvalid {
                wr,
                addr: a,
                why: "misaligned atomic: atomics need an 8-byte-aligned address",
            })
        }
    }
}

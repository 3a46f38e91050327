//! Bytes written to a persistent soft memory node's host region, by cause, counted as the
//! sim counts them (`remora_poller::sim::NvmStats`): payloads the "NIC" placed (client WRITE,
//! WRITE_WITH_IMM, and 8 bytes per CMP_AND_SWP that swapped and per FETCH_AND_ADD), bytes the
//! node's CPU stored (its handlers), and cache lines `persist` wrote back. Device memory is not
//! persistent and not counted; nor is anything on a node whose region is plain DRAM (no
//! durable backing, no emulated NVM latency).
//!
//! Counted in this process only: the queue pairs of this node's in-process clients and its
//! server threads. Clients in other processes (`control::connect`) place bytes the node does
//! not see.
use crate::sim::NvmStats;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a verb placed in the host region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placed {
    Write,
    WriteImm,
    Atomic,
}

/// A node's running counts (relaxed atomics: its clients and server threads add to them).
#[derive(Debug, Default)]
pub(crate) struct NvmCounters {
    nic_write: AtomicU64,
    nic_write_imm: AtomicU64,
    nic_atomic: AtomicU64,
    cpu_store: AtomicU64,
    lines_flushed: AtomicU64,
}

impl NvmCounters {
    pub(crate) fn placed(&self, verb: Placed, bytes: u64) {
        let c = match verb {
            Placed::Write => &self.nic_write,
            Placed::WriteImm => &self.nic_write_imm,
            Placed::Atomic => &self.nic_atomic,
        };
        c.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn stored(&self, bytes: u64) {
        self.cpu_store.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn flushed(&self, lines: u64) {
        self.lines_flushed.fetch_add(lines, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> NvmStats {
        NvmStats {
            nic_write: self.nic_write.load(Ordering::Relaxed),
            nic_write_imm: self.nic_write_imm.load(Ordering::Relaxed),
            nic_atomic: self.nic_atomic.load(Ordering::Relaxed),
            cpu_store: self.cpu_store.load(Ordering::Relaxed),
            lines_flushed: self.lines_flushed.load(Ordering::Relaxed),
        }
    }
}

//! The host region as a simulated memory node's handler sees it ([`SimRegion`]): its loads,
//! stores and persists, each priced by the node's last-level cache and memory
//! ([`MemCost`]), and with model `server_store_window` the stores that reach the NIC only at
//! their point in the service.
use super::*;
use crate::sim::llc::Touch;
use crate::sim::model::Ps;
use crate::sim::qp::WorldRef;
use remora_core::fabric::FabricError;
use remora_core::server::{CpuClock, LocalRegion, out_of_range};
use remora_layouts::NodeId;
use std::cell::RefCell;

/// A simulated memory node's host region as its CPU sees it. Stores land in the volatile
/// view; on a persistent node only what `persist` wrote back survives a crash (`memory.rs`).
/// Every access is looked up in the node's last-level cache (`llc.rs`) and costs the
/// handler's thread CPU time (see [`MemCost`]).
pub(crate) struct SimRegion<'w> {
    pub w: &'w WorldRef,
    pub node: NodeId,
    /// Server CPU the handler's persists have cost so far (charged to its thread after it
    /// returns, before its replies are posted).
    pub persist_cost: std::cell::Cell<Ps>,
    /// Server CPU the handler's memory accesses have cost so far (charged likewise).
    pub mem_cost: std::cell::Cell<Ps>,
    /// The structure's lock the handler stated it holds (`HELD_*`, the strongest stated).
    pub held: std::cell::Cell<u8>,
    /// With model `server_store_window`: the handler's stores in order, as (offset, the
    /// bytes they replaced, the service time charged up to and including them).
    pub stores: RefCell<Vec<(u64, Vec<u8>, Ps)>>,
    /// Model `server_store_window` is on.
    window: bool,
    cost: MemCost,
}

/// What the lines a handler touches cost its thread (model `server_llc_*`, `server_dram_ns`,
/// `server_nvm_read_ns`, `server_mlp`), in picoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MemCost {
    pub llc_lines: usize,
    pub hit: Ps,
    /// A miss: DRAM or persistent memory, by the node.
    pub miss: Ps,
    pub mlp: u64,
}

impl MemCost {
    pub fn new(m: &crate::sim::model::Model, persistent: bool) -> MemCost {
        let ps = |ns: f64| (ns * 1000.0).round() as Ps;
        MemCost {
            llc_lines: m.server_llc_lines as usize,
            hit: ps(m.server_llc_hit_ns),
            miss: ps(if persistent {
                m.server_nvm_read_ns
            } else {
                m.server_dram_ns
            }),
            mlp: (m.server_mlp as u64).max(1),
        }
    }

    /// One contiguous access whose new lines cost `sum` together, the slowest `max`: the
    /// slowest is waited for, the others overlap it (`server_mlp`).
    pub fn overlap(&self, max: Ps, sum: Ps) -> Ps {
        max + (sum - max) / self.mlp
    }
}

impl<'w> SimRegion<'w> {
    pub fn new(w: &'w WorldRef, node: NodeId) -> SimRegion<'w> {
        let (cost, window) = {
            let wb = w.borrow();
            let persistent = wb.nodes.get(node as usize).is_some_and(|n| n.persistent);
            (
                MemCost::new(&wb.model, persistent),
                wb.model.server_store_window >= 0.5,
            )
        };
        SimRegion {
            w,
            node,
            persist_cost: std::cell::Cell::new(0),
            mem_cost: std::cell::Cell::new(0),
            held: std::cell::Cell::new(HELD_NONE),
            stores: RefCell::new(Vec::new()),
            window,
            cost,
        }
    }

    /// A new handler call begins: lines count again (see `llc.rs`).
    pub fn begin(&self) {
        let mut w = self.w.borrow_mut();
        if let Some(n) = w.nodes.get_mut(self.node as usize) {
            n.llc.begin();
        }
    }

    fn charge(&self, ps: Ps) {
        self.mem_cost.set(self.mem_cost.get() + ps);
    }

    /// Runs `f` on `len` bytes at `offset` of the host region and charges their lines; a
    /// `store` (with model `server_store_window`) pays a line it touched before as a hit.
    fn with<R>(
        &self,
        offset: u64,
        len: usize,
        store: bool,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, FabricError> {
        let mut w = self.w.borrow_mut();
        let n = w
            .nodes
            .get_mut(self.node as usize)
            .ok_or_else(|| out_of_range(self.node, offset, len))?;
        let o = usize::try_from(offset).map_err(|_| out_of_range(self.node, offset, len))?;
        let bytes = o
            .checked_add(len)
            .and_then(|end| n.host.get_mut(o..end))
            .ok_or_else(|| out_of_range(self.node, offset, len))?;
        let r = f(bytes);
        if len > 0 {
            n.llc.start(self.cost.llc_lines);
            let (mut max, mut sum) = (0, 0);
            let lo = offset / crate::sim::llc::LINE;
            let hi = (offset + len as u64 - 1) / crate::sim::llc::LINE;
            for line in lo..=hi {
                let c = match n.llc.touch(line) {
                    Touch::Again if store && self.window => self.cost.hit,
                    Touch::Again => continue,
                    Touch::Hit => self.cost.hit,
                    Touch::Miss => self.cost.miss,
                };
                max = max.max(c);
                sum += c;
            }
            drop(w);
            self.charge(self.cost.overlap(max, sum));
        }
        Ok(r)
    }
}

impl LocalRegion for SimRegion<'_> {
    fn node(&self) -> NodeId {
        self.node
    }
    fn len(&self) -> u64 {
        let w = self.w.borrow();
        w.nodes
            .get(self.node as usize)
            .map_or(0, |n| n.host.len() as u64)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        self.with(offset, buf.len(), false, |b| buf.copy_from_slice(b))
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let old = self.with(offset, data.len(), true, |b| {
            self.window.then(|| b.to_vec())
        })?;
        if let Some(old) = old {
            let at = self.mem_cost.get() + self.persist_cost.get();
            self.stores.borrow_mut().push((offset, old, at));
        }
        let mut w = self.w.borrow_mut();
        if let Some(n) = w.nodes.get_mut(self.node as usize) {
            n.cpu_store(offset, data);
        }
        Ok(())
    }
    /// Writes back and fences the range's cache lines (`memory.rs`); costs `nvm_write_ns` per
    /// line on a persistent node, nothing on DRAM. An out-of-range part is ignored.
    fn persist(&self, offset: u64, len: usize) {
        let mut w = self.w.borrow_mut();
        let line = w.tm.nvm_line;
        let Some(n) = w.nodes.get_mut(self.node as usize) else {
            return;
        };
        let size = n.host.len() as u64;
        let end = offset.saturating_add(len as u64).min(size);
        if offset >= end {
            return;
        }
        let lines = n.write_back(offset, (end - offset) as usize);
        self.persist_cost
            .set(self.persist_cost.get() + lines * line);
    }
    /// [`persist`](LocalRegion::persist), then the range's lines leave the node's
    /// last-level cache (`llc.rs`): `clflush` invalidates what it writes back.
    fn persist_evict(&self, offset: u64, len: usize) {
        self.persist(offset, len);
        let mut w = self.w.borrow_mut();
        if let Some(n) = w.nodes.get_mut(self.node as usize)
            && n.persistent
        {
            let size = n.host.len() as u64;
            let end = offset.saturating_add(len as u64).min(size);
            if offset < end {
                n.llc.evict(offset, (end - offset) as usize);
            }
        }
    }
    /// Charged with the message's memory (scaled by a slowed node's factor as it is).
    fn charge_cpu_ns(&self, ns: u64) {
        self.charge(ns.saturating_mul(1000));
    }
    /// Held to the end of this message's service (see `TreeLock`).
    fn hold_lock(&self, exclusive: bool) {
        let h = if exclusive {
            HELD_EXCLUSIVE
        } else {
            HELD_SHARED
        };
        self.held.set(self.held.get().max(h));
    }
    /// Virtual time and the CPU time this node's handler threads have been busy.
    fn cpu_clock(&self) -> Option<CpuClock> {
        let w = self.w.borrow();
        let n = w.nodes.get(self.node as usize)?;
        Some(CpuClock {
            now_ns: w.now / 1000,
            busy_ns: n.busy_ps(w.now) / 1000,
            threads: n.threads.len() as u32,
        })
    }
}

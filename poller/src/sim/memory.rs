//! Memory nodes: the host region (with the region header at offset 0, as a real memory node
//! writes it), optional device memory, the revocable region key, the NIC atomic unit's lock
//! slots, the server CPU, and the persistence model.
//!
//! **Persistence** (a node created with `persistent`): a WRITE or atomic applied to the host
//! region is *un-persisted* until either a later READ on the same queue pair executes at the
//! node (a read-after-write flush), or more than `persist_window` newer un-persisted writes of
//! that queue pair exist (the oldest drains). A crash rolls every un-persisted write back, newest
//! first, so the region holds exactly what was persisted. A node that is not persistent (DRAM)
//! loses its whole host region at a crash; device memory (NIC SRAM) is always lost.
use super::model::Ps;
use super::server::ServerThread;
use remora_layouts::region::RegionHeader;
use remora_layouts::{GlobalAddr, NodeId};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A memory node's contents, to carry memory from one simulation to the next.
pub struct NodeImage {
    pub host: Vec<u8>,
    pub dm: Vec<u8>,
    pub key: Arc<AtomicU32>,
}

impl NodeImage {
    /// A fresh node: zeroed memory with the region header written at offset 0.
    pub fn fresh(
        region_len: u64,
        chunk_size: u64,
        dm_len: u64,
    ) -> Result<NodeImage, remora_layouts::LayoutError> {
        let mut host = vec![0u8; region_len as usize];
        write_header(&mut host, chunk_size, dm_len)?;
        Ok(NodeImage {
            host,
            dm: vec![0u8; dm_len as usize],
            key: Arc::new(AtomicU32::new(1)),
        })
    }
}

fn write_header(
    host: &mut [u8],
    chunk_size: u64,
    dm_len: u64,
) -> Result<(), remora_layouts::LayoutError> {
    let h = RegionHeader::new(host.len() as u64, chunk_size, dm_len)?.encode();
    host[..h.len()].copy_from_slice(&h);
    Ok(())
}

/// Why an access was refused.
pub enum Refused {
    Access,
    Misaligned,
}

struct Undo {
    dm: bool,
    off: u64,
    old: Vec<u8>,
}

pub struct MemNode {
    pub id: NodeId,
    pub host: Vec<u8>,
    pub dm: Vec<u8>,
    pub key: Arc<AtomicU32>,
    pub chunk_size: u64,
    pub persistent: bool,
    pub persist_window: usize,
    /// Free time of each hashed atomic lock slot (host memory) and of each device word slot.
    pub atomic_free: Vec<Ps>,
    pub dm_atomic_free: Vec<Ps>,
    /// The node's CPU: its handler threads (see `server.rs`).
    pub(crate) threads: Vec<ServerThread>,
    /// Connections made to this node so far (assigns each its thread).
    pub conns: u32,
    /// Which of the sim's handlers serves connections made from now on.
    pub handler: u32,
    /// Virtual times at which the node crashed.
    pub crashes: Vec<Ps>,
    undo: BTreeMap<u64, Undo>,
    undo_by_qp: HashMap<u32, VecDeque<u64>>,
    undo_seq: u64,
}

impl MemNode {
    pub fn new(
        id: NodeId,
        img: NodeImage,
        chunk_size: u64,
        persistent: bool,
        persist_window: usize,
        slots: usize,
        threads: usize,
    ) -> MemNode {
        MemNode {
            id,
            host: img.host,
            dm: img.dm,
            key: img.key,
            chunk_size,
            persistent,
            persist_window,
            atomic_free: vec![0; slots.max(1)],
            dm_atomic_free: vec![0; slots.max(1)],
            threads: (0..threads.max(1)).map(|_| ServerThread::new()).collect(),
            conns: 0,
            handler: id as u32,
            crashes: Vec::new(),
            undo: BTreeMap::new(),
            undo_by_qp: HashMap::new(),
            undo_seq: 0,
        }
    }

    pub fn image(self) -> NodeImage {
        NodeImage {
            host: self.host,
            dm: self.dm,
            key: self.key,
        }
    }

    pub fn key_now(&self) -> u32 {
        self.key.load(Ordering::Acquire)
    }

    /// Checks `len` bytes at `addr` under `key`; atomics also need 8-byte alignment.
    pub fn check(&self, addr: GlobalAddr, len: u64, key: u32, atomic: bool) -> Result<(), Refused> {
        if key != self.key_now() {
            return Err(Refused::Access);
        }
        let size = if addr.is_device() {
            self.dm.len()
        } else {
            self.host.len()
        } as u64;
        match addr.offset().checked_add(len) {
            Some(end) if end <= size => {}
            _ => return Err(Refused::Access),
        }
        if atomic && !addr.offset().is_multiple_of(8) {
            return Err(Refused::Misaligned);
        }
        Ok(())
    }

    fn region(&mut self, dm: bool) -> &mut [u8] {
        if dm { &mut self.dm } else { &mut self.host }
    }

    /// Copies `out.len()` bytes at `off` out of the region (bounds already checked).
    pub fn sample(&mut self, dm: bool, off: u64, out: &mut [u8], qp: u32) {
        let o = off as usize;
        out.copy_from_slice(&self.region(dm)[o..o + out.len()]);
        if self.persistent {
            self.persist_qp(qp);
        }
    }

    /// Stores `data` at `off` (bounds already checked), logging the old bytes when persistent.
    pub fn store(&mut self, dm: bool, off: u64, data: &[u8], qp: u32) {
        let o = off as usize;
        if self.persistent && !dm {
            let old = self.host[o..o + data.len()].to_vec();
            self.log(qp, Undo { dm, off, old });
        }
        self.region(dm)[o..o + data.len()].copy_from_slice(data);
    }

    /// CMP_AND_SWP (`add == None`) or FETCH_AND_ADD on an aligned word; returns the old value.
    pub fn atomic(
        &mut self,
        dm: bool,
        off: u64,
        compare: u64,
        swap_or_add: u64,
        faa: bool,
        qp: u32,
    ) -> u64 {
        let o = off as usize;
        let word: [u8; 8] = self.region(dm)[o..o + 8].try_into().unwrap_or([0; 8]);
        let old = u64::from_le_bytes(word);
        let new = if faa {
            old.wrapping_add(swap_or_add)
        } else if old == compare {
            swap_or_add
        } else {
            return old;
        };
        self.store(dm, off, &new.to_le_bytes(), qp);
        old
    }

    fn log(&mut self, qp: u32, u: Undo) {
        let seq = self.undo_seq;
        self.undo_seq += 1;
        self.undo.insert(seq, u);
        let q = self.undo_by_qp.entry(qp).or_default();
        q.push_back(seq);
        while q.len() > self.persist_window {
            if let Some(s) = q.pop_front() {
                self.undo.remove(&s);
            }
        }
    }

    /// Everything `qp` wrote so far is persisted.
    fn persist_qp(&mut self, qp: u32) {
        if let Some(q) = self.undo_by_qp.get_mut(&qp) {
            for s in q.drain(..) {
                self.undo.remove(&s);
            }
        }
    }

    /// Un-persisted writes outstanding (for tests and traces).
    pub fn unpersisted(&self) -> usize {
        self.undo.len()
    }

    /// The node crashes at `at`: un-persisted state is lost as documented above.
    pub fn crash(&mut self, at: Ps) {
        self.crashes.push(at);
        if self.persistent {
            let undo = std::mem::take(&mut self.undo);
            for (_, u) in undo.into_iter().rev() {
                let o = u.off as usize;
                let r = self.region(u.dm);
                r[o..o + u.old.len()].copy_from_slice(&u.old);
            }
            self.undo_by_qp.clear();
        } else {
            self.host.fill(0);
        }
        self.dm.fill(0);
    }

    /// The node comes back: a DRAM node starts a fresh region; the key changes (the region is
    /// registered again), so queue pairs made before the crash get remote access errors.
    pub fn restart(&mut self) {
        if !self.persistent {
            let dm_len = self.dm.len() as u64;
            // The header was valid at creation; a failure here would mean a corrupt config.
            let _ = write_header(&mut self.host, self.chunk_size, dm_len);
        }
        self.key.fetch_add(1, Ordering::AcqRel);
        for t in self
            .atomic_free
            .iter_mut()
            .chain(self.dm_atomic_free.iter_mut())
        {
            *t = 0;
        }
    }

    /// True when the node crashed at some time in `[from, to]`.
    pub fn crashed_between(&self, from: Ps, to: Ps) -> bool {
        self.crashes.iter().any(|&c| c >= from && c <= to)
    }

    /// CPU time all handler threads have spent serving up to `now` (a service in progress
    /// counts up to `now`).
    pub fn busy_ps(&self, now: Ps) -> Ps {
        self.threads.iter().map(|t| t.busy_ps(now)).sum()
    }
}

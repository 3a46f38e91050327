//! Memory nodes: the host region (with the region header at offset 0, as a real memory node
//! writes it), optional device memory, the revocable region key, the NIC atomic unit's lock
//! slots, the server CPU, and the persistence model.
//!
//! **Persistence** (a node created with `persistent`). The region has a volatile view (what
//! every READ and the CPU see) and a durable image (what survives a crash); they differ by the
//! un-persisted writes, kept as an undo log:
//!
//! - **NIC writes** (WRITE, WRITE_WITH_IMM, a CAS that swapped, FETCH_AND_ADD) to the host
//!   region are *un-persisted* until either a later READ on the same queue pair executes at
//!   the node (a read-after-write flush: the NIC's READ flushes its earlier posted writes out of
//!   the PCIe/DDIO path, Erda seeds/004), or more than `persist_window` newer un-persisted
//!   writes of that queue pair exist (the oldest drains: cache eviction).
//! - **CPU stores** (a handler's `LocalRegion::write`/`store_u64`/`cas_u64`) land in the
//!   volatile view at once and are un-persisted, per 64-byte cache line, until the handler's
//!   `LocalRegion::persist` covers that line. They are never drained early (the sim is
//!   adversarial: a line the handler did not persist is lost at a crash).
//! - **`persist(offset, len)`** writes back every cache line of the range and fences: the
//!   line's *current* content becomes durable, whoever wrote it (CPU or NIC: on a DDIO platform
//!   the NIC's data sits in the same cache lines). It costs the handler's thread
//!   `nvm_write_ns` per line (see `server.rs`). On a DRAM node it is a no-op and free.
//!
//! A crash rolls every un-persisted write back, newest first, so the region holds what was
//! persisted. (One imprecision, kept from the NIC-only model: when a newer NIC write is persisted
//! by its queue pair's READ while an older overlapping one of another queue pair is not, the
//! rollback restores the older one's old bytes under both. A CPU persist has no such gap.) A node
//! that is not persistent (DRAM) loses its whole host region at a crash; device memory (NIC
//! SRAM) is always lost.
//!
//! **Stores in flight** (model `server_store_window`, `server.rs`). A handler's CPU stores
//! reach the host region at once (the node's CPU and later handlers see them), but with the
//! model on each is given the virtual time its thread writes it ([`MemNode::land_at`]); a
//! NIC READ segment executing before that time copies the bytes the store replaced, so a
//! one-sided reader overlapping a server rewrite sees it half done. A NIC write over such
//! bytes supersedes the store's pending view; a crash drops every pending view.
//!
//! **NVM write accounting** (persistent nodes, host region only; [`NvmStats`]): bytes the NIC
//! placed, by verb; bytes the CPU stored; cache lines written back by `persist`.
use super::engine::Kind;
use super::llc::{Llc, WarmLines};
use super::model::Ps;
use super::server::ServerThread;
use remora_layouts::region::RegionHeader;
use remora_layouts::{GlobalAddr, NodeId};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A memory node's contents, to carry memory from one simulation to the next.
pub struct NodeImage {
    /// The host region, byte 0 first (the region header at offset 0); its length is the
    /// region's.
    pub host: Vec<u8>,
    /// The device memory (NIC SRAM), empty when the node has none.
    pub dm: Vec<u8>,
    /// The region key: queue pairs are made under its current value, and a bump (see
    /// [`KeyHandle::revoke`](super::KeyHandle::revoke)) makes their later accesses fail. A
    /// node made from this image shares the counter with it.
    pub key: Arc<AtomicU32>,
    /// The lines the node's CPU touched writing this image outside a sim (a bulk load), most
    /// recent last: a sim started from it (`Sim::with_images`) starts the node's last-level
    /// cache with them (`llc.rs`). Empty from a sim ([`Sim::into_images`](super::Sim)) and
    /// for a fresh node: the cache then starts empty.
    pub warm: WarmLines,
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
            warm: WarmLines::default(),
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
pub(crate) enum Refused {
    Access,
    Misaligned,
}

/// The old bytes under an un-persisted write (its offset is in the log's key).
struct Undo {
    dm: bool,
    old: Vec<u8>,
}

/// A handler's CPU store that NIC READs do not see yet (model `server_store_window`):
/// until `at`, they read `old` at `off`.
struct Landing {
    off: u64,
    at: Ps,
    old: Vec<u8>,
}

/// Cache-line size of the persistence model (what `persist` writes back).
pub(crate) const LINE: u64 = 64;

/// Bytes written to a memory node's persistent host region, by cause (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvmStats {
    /// Placed by the NIC: WRITE payloads.
    pub nic_write: u64,
    /// Placed by the NIC: WRITE_WITH_IMM payloads.
    pub nic_write_imm: u64,
    /// Placed by the NIC: 8 bytes per CMP_AND_SWP that swapped and per FETCH_AND_ADD.
    pub nic_atomic: u64,
    /// Stored by the node's CPU (handlers).
    pub cpu_store: u64,
    /// Cache lines written back by `persist` (each is `LINE` bytes of media writes).
    pub lines_flushed: u64,
}

impl NvmStats {
    /// Bytes the NIC placed, all verbs.
    pub fn nic_bytes(&self) -> u64 {
        self.nic_write + self.nic_write_imm + self.nic_atomic
    }
    /// Media writes: what the NIC placed plus the lines the CPU wrote back (a line the NIC
    /// wrote and the CPU then persisted counts in both: an upper bound).
    pub fn media_bytes(&self) -> u64 {
        self.nic_bytes() + self.lines_flushed * LINE
    }
    /// The counts since `earlier` (a phase's share).
    pub fn since(&self, earlier: &NvmStats) -> NvmStats {
        NvmStats {
            nic_write: self.nic_write.saturating_sub(earlier.nic_write),
            nic_write_imm: self.nic_write_imm.saturating_sub(earlier.nic_write_imm),
            nic_atomic: self.nic_atomic.saturating_sub(earlier.nic_atomic),
            cpu_store: self.cpu_store.saturating_sub(earlier.cpu_store),
            lines_flushed: self.lines_flushed.saturating_sub(earlier.lines_flushed),
        }
    }
    /// The sum of two nodes' counts.
    pub fn plus(&self, o: &NvmStats) -> NvmStats {
        NvmStats {
            nic_write: self.nic_write + o.nic_write,
            nic_write_imm: self.nic_write_imm + o.nic_write_imm,
            nic_atomic: self.nic_atomic + o.nic_atomic,
            cpu_store: self.cpu_store + o.cpu_store,
            lines_flushed: self.lines_flushed + o.lines_flushed,
        }
    }
}

pub(crate) struct MemNode {
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
    /// Its background thread, once woken (`background.rs`; model `background_threads`).
    pub(crate) background: Option<ServerThread>,
    /// Connections made to this node so far (assigns each its thread).
    pub conns: u32,
    /// Which of the sim's handlers serves connections made from now on.
    pub handler: u32,
    /// Virtual times at which the node crashed.
    pub crashes: Vec<Ps>,
    /// Un-persisted writes by (sequence number, offset): a write trimmed by a persist keeps
    /// its sequence number in pieces.
    undo: BTreeMap<(u64, u64), Undo>,
    /// The same pieces by (offset, sequence number), so a write-back finds the pieces of its
    /// lines without scanning the whole log (which grows with every line a handler stores
    /// and never persists: a scan made LOAD quadratic in the keys).
    undo_by_off: BTreeSet<(u64, u64)>,
    /// The longest piece ever logged: a piece overlapping `[lo, hi)` starts after
    /// `lo - undo_max_len`.
    undo_max_len: u64,
    undo_by_qp: HashMap<u32, VecDeque<u64>>,
    /// Per cache line, the bytes an un-persisted CPU store already logged (bit `i` = byte
    /// `i` of the line): a later store to them logs nothing (see [`MemNode::cpu_store`]).
    cpu_logged: HashMap<u64, u64>,
    undo_seq: u64,
    pub nvm: NvmStats,
    /// The CPU's last-level cache, as the server CPU model sees it (`llc.rs`).
    pub(crate) llc: Llc,
    /// The lock over its served structure (`server.rs`, model `server_tree_lock`).
    pub(crate) tree_lock: super::server::TreeLock,
    /// Handler stores not yet seen by NIC READs, in store order (see the module doc).
    landings: VecDeque<Landing>,
    /// NIC READ segments that copied bytes of a store not yet landed.
    pub(crate) unlanded_reads: u64,
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
            host: img.host,
            dm: img.dm,
            key: img.key,
            chunk_size,
            persistent,
            persist_window,
            atomic_free: vec![0; slots.max(1)],
            dm_atomic_free: vec![0; slots.max(1)],
            threads: (0..threads.max(1)).map(|_| ServerThread::new()).collect(),
            background: None,
            conns: 0,
            handler: id as u32,
            crashes: Vec::new(),
            undo: BTreeMap::new(),
            undo_by_off: BTreeSet::new(),
            undo_max_len: 0,
            undo_by_qp: HashMap::new(),
            cpu_logged: HashMap::new(),
            undo_seq: 0,
            nvm: NvmStats::default(),
            llc: Llc::default(),
            tree_lock: Default::default(),
            landings: VecDeque::new(),
            unlanded_reads: 0,
        }
    }

    pub fn image(self) -> NodeImage {
        NodeImage {
            host: self.host,
            dm: self.dm,
            key: self.key,
            warm: WarmLines::default(),
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

    /// Asks the host CPU's cache for the lines of `len` bytes at `off` (at most
    /// [`PREFETCH_MAX`]), when a verb is admitted: its segments copy them some hundreds of
    /// events later, and would otherwise wait on a cold region line each. A hint to the
    /// machine running the simulation, nothing the model sees.
    pub fn prefetch(&self, dm: bool, off: u64, len: u64) {
        let region = if dm { &self.dm } else { &self.host };
        let Some(bytes) = (off as usize)
            .checked_add(len.min(PREFETCH_MAX) as usize)
            .and_then(|end| region.get(off as usize..end))
        else {
            return;
        };
        for line in bytes.chunks(64) {
            prefetch_line(line.as_ptr());
        }
    }

    /// Copies `out.len()` bytes at `off` out of the region (bounds already checked), as
    /// they are at virtual time `now`: a handler store that lands later
    /// ([`MemNode::land_at`]) is not seen yet.
    pub fn sample(&mut self, dm: bool, off: u64, out: &mut [u8], qp: u32, now: Ps) {
        let o = off as usize;
        out.copy_from_slice(&self.region(dm)[o..o + out.len()]);
        if !dm && !self.landings.is_empty() {
            self.unland(off, out, now);
        }
        if self.persistent {
            self.persist_qp(qp);
        }
    }

    /// The NIC stores `data` at `off` for a `verb` of queue pair `qp` (bounds already checked),
    /// logging the old bytes when persistent.
    pub fn store(&mut self, dm: bool, off: u64, data: &[u8], qp: u32, verb: Kind) {
        let o = off as usize;
        if !dm && !self.landings.is_empty() {
            // The NIC's bytes supersede what a pending store's view would show under them.
            let end = off + data.len() as u64;
            self.landings
                .retain(|l| l.off + l.old.len() as u64 <= off || l.off >= end);
        }
        if self.persistent && !dm {
            let n = data.len() as u64;
            match verb {
                Kind::WriteImm => self.nvm.nic_write_imm += n,
                Kind::Cas | Kind::MaskedCas | Kind::Faa => self.nvm.nic_atomic += n,
                _ => self.nvm.nic_write += n,
            }
            let old = self.host[o..o + data.len()].to_vec();
            self.log(qp, off, Undo { dm, old });
        }
        self.region(dm)[o..o + data.len()].copy_from_slice(data);
        if !dm {
            // DDIO: the NIC's data lands in the last-level cache.
            self.llc.nic_write(off, data.len());
        }
    }

    /// The node's CPU stores `data` at `off` of the host region (bounds already checked): in
    /// the volatile view at once; on a persistent node, un-persisted per cache line until a
    /// [`MemNode::write_back`] covers the line.
    ///
    /// Only a byte's *first* store since its line was last written back is logged. A later
    /// store's undo piece could never matter: the earlier CPU piece under the same byte is
    /// older (a crash rolls back newest first, so the byte ends with the oldest piece's old
    /// value), and both leave the log together (only a write-back of their line, or a crash,
    /// drops a CPU piece). So the log holds at most one line's worth of bytes per line
    /// between write-backs, however often a handler rewrites a word it does not persist.
    pub fn cpu_store(&mut self, off: u64, data: &[u8]) {
        let o = off as usize;
        if self.persistent && !data.is_empty() {
            self.nvm.cpu_store += data.len() as u64;
            let seq = self.undo_seq;
            self.undo_seq += 1;
            let end = off + data.len() as u64;
            let mut a = off;
            while a < end {
                let line = a / LINE;
                let b = ((line + 1) * LINE).min(end);
                let logged = self.cpu_logged.get(&line).copied().unwrap_or(0);
                let mut want = line_mask(a - line * LINE, b - line * LINE) & !logged;
                let mut newly = 0;
                // Each run of bytes not yet logged in this line: one piece.
                while want != 0 {
                    let r0 = u64::from(want.trailing_zeros());
                    let r1 = r0 + u64::from((want >> r0).trailing_ones());
                    want &= !line_mask(r0, r1);
                    let (ra, rb) = (line * LINE + r0, line * LINE + r1);
                    let old = &self.host[ra as usize..rb as usize];
                    let new = &data[(ra - off) as usize..(rb - off) as usize];
                    // A store of the bytes already there needs no undo: rolling it back
                    // changes nothing, whatever else is rolled back around it (a handler
                    // clearing a fresh, zeroed table would otherwise log every line of it).
                    if old != new {
                        let old = old.to_vec();
                        self.undo_put(seq, ra, Undo { dm: false, old });
                        newly |= line_mask(r0, r1);
                    }
                }
                if newly != 0 {
                    *self.cpu_logged.entry(line).or_default() |= newly;
                }
                a = b;
            }
        }
        self.host[o..o + data.len()].copy_from_slice(data);
    }

    /// The CPU store at `off` that replaced `old` lands at virtual time `at`: NIC READs
    /// before it see `old` (model `server_store_window`). Stores are given in the order the
    /// CPU made them, at virtual time `now` (stores landed by then are dropped).
    pub fn land_at(&mut self, off: u64, old: Vec<u8>, at: Ps, now: Ps) {
        while self.landings.front().is_some_and(|l| l.at <= now) {
            self.landings.pop_front();
        }
        if !old.is_empty() && at > now {
            self.landings.push_back(Landing { off, at, old });
        }
    }

    /// Puts back, in `out` (a READ of `off` at `now`), the bytes of every store that lands
    /// after `now`, newest first, so `out` holds the region as the stores landed by `now`
    /// left it; stores landed by `now` are dropped from the front.
    fn unland(&mut self, off: u64, out: &mut [u8], now: Ps) {
        while self.landings.front().is_some_and(|l| l.at <= now) {
            self.landings.pop_front();
        }
        let end = off + out.len() as u64;
        let mut met = false;
        for l in self.landings.iter().rev() {
            let (lo, hi) = (l.off.max(off), (l.off + l.old.len() as u64).min(end));
            if l.at <= now || lo >= hi {
                continue;
            }
            met = true;
            out[(lo - off) as usize..(hi - off) as usize]
                .copy_from_slice(&l.old[(lo - l.off) as usize..(hi - l.off) as usize]);
        }
        self.unlanded_reads += u64::from(met);
    }

    /// The CPU writes back every cache line of `[off, off + len)` and fences: their current
    /// content is durable. Returns the lines written back (0 on a DRAM node, where it is a
    /// no-op).
    pub fn write_back(&mut self, off: u64, len: usize) -> u64 {
        if !self.persistent || len == 0 {
            return 0;
        }
        let lo = off / LINE * LINE;
        let hi = (off + len as u64).div_ceil(LINE) * LINE;
        let lines = (hi - lo) / LINE;
        self.nvm.lines_flushed += lines;
        if !self.cpu_logged.is_empty() {
            for line in lo / LINE..hi / LINE {
                self.cpu_logged.remove(&line);
            }
        }
        let from = lo.saturating_sub(self.undo_max_len);
        let hit: Vec<(u64, u64)> = self
            .undo_by_off
            .range((from, 0)..(hi, 0))
            .map(|&(o, seq)| (seq, o))
            .filter(|k| {
                self.undo
                    .get(k)
                    .is_some_and(|u| !u.dm && k.1 + u.old.len() as u64 > lo)
            })
            .collect();
        for (seq, o) in hit {
            let Some(u) = self.undo_take(seq, o) else {
                continue;
            };
            let end = o + u.old.len() as u64;
            if o < lo {
                let keep = u.old[..(lo - o) as usize].to_vec();
                self.undo_put(
                    seq,
                    o,
                    Undo {
                        dm: false,
                        old: keep,
                    },
                );
            }
            if end > hi {
                let keep = u.old[(hi - o) as usize..].to_vec();
                self.undo_put(
                    seq,
                    hi,
                    Undo {
                        dm: false,
                        old: keep,
                    },
                );
            }
        }
        lines
    }

    /// CMP_AND_SWP of the bits under `mask` (all for a plain one; `faa` false) or
    /// FETCH_AND_ADD (`mask` unused) on an aligned word; returns the old value.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        dm: bool,
        off: u64,
        compare: u64,
        swap_or_add: u64,
        faa: bool,
        mask: u64,
        qp: u32,
    ) -> u64 {
        let o = off as usize;
        let word: [u8; 8] = self.region(dm)[o..o + 8].try_into().unwrap_or([0; 8]);
        let old = u64::from_le_bytes(word);
        let new = if faa {
            old.wrapping_add(swap_or_add)
        } else if old & mask == compare & mask {
            old & !mask | swap_or_add & mask
        } else {
            return old;
        };
        let verb = if faa { Kind::Faa } else { Kind::Cas };
        self.store(dm, off, &new.to_le_bytes(), qp, verb);
        old
    }

    fn log(&mut self, qp: u32, off: u64, u: Undo) {
        let seq = self.undo_seq;
        self.undo_seq += 1;
        self.undo_put(seq, off, u);
        let q = self.undo_by_qp.entry(qp).or_default();
        q.push_back(seq);
        let mut drained = Vec::new();
        while q.len() > self.persist_window {
            drained.extend(q.pop_front());
        }
        for s in drained {
            self.remove_seq(s);
        }
    }

    /// Everything `qp` wrote so far is persisted.
    fn persist_qp(&mut self, qp: u32) {
        let seqs: Vec<u64> = self
            .undo_by_qp
            .get_mut(&qp)
            .map_or_else(Vec::new, |q| q.drain(..).collect());
        for s in seqs {
            self.remove_seq(s);
        }
    }

    /// Logs piece `(seq, off)` in both indexes.
    fn undo_put(&mut self, seq: u64, off: u64, u: Undo) {
        self.undo_max_len = self.undo_max_len.max(u.old.len() as u64);
        self.undo_by_off.insert((off, seq));
        self.undo.insert((seq, off), u);
    }

    /// Removes piece `(seq, off)` from both indexes.
    fn undo_take(&mut self, seq: u64, off: u64) -> Option<Undo> {
        self.undo_by_off.remove(&(off, seq));
        self.undo.remove(&(seq, off))
    }

    /// Drops every piece of write `seq` from the undo log (it is persisted).
    fn remove_seq(&mut self, seq: u64) {
        while let Some((s, o)) = self
            .undo
            .range((seq, 0)..=(seq, u64::MAX))
            .next()
            .map(|(k, _)| *k)
        {
            self.undo_take(s, o);
        }
    }

    /// Un-persisted writes outstanding (for tests and traces).
    pub fn unpersisted(&self) -> usize {
        self.undo.len()
    }

    /// The node crashes at `at`: un-persisted state is lost as documented above.
    pub fn crash(&mut self, at: Ps) {
        self.crashes.push(at);
        self.landings.clear();
        self.llc.clear();
        if self.persistent {
            let undo = std::mem::take(&mut self.undo);
            self.undo_by_off.clear();
            self.cpu_logged.clear();
            for ((_, off), u) in undo.into_iter().rev() {
                let o = off as usize;
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

    /// CPU time all handler threads (the background one included) have spent serving up to
    /// `now` (a service in progress counts up to `now`).
    pub fn busy_ps(&self, now: Ps) -> Ps {
        let bg = self.background.as_ref().map_or(0, |t| t.busy_ps(now));
        self.threads.iter().map(|t| t.busy_ps(now)).sum::<Ps>() + bg
    }
}

/// Bits `lo..hi` of a line's byte mask (`lo < hi <= LINE`).
fn line_mask(lo: u64, hi: u64) -> u64 {
    let upto = |n: u64| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    upto(hi) & !upto(lo)
}

/// The most bytes of one verb [`MemNode::prefetch`] asks for.
pub(crate) const PREFETCH_MAX: u64 = 4096;

#[cfg(target_arch = "x86_64")]
#[inline]
fn prefetch_line(p: *const u8) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: a prefetch is a hint that never faults and reads nothing the program sees;
    // `p` points into a live region slice anyway.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn prefetch_line(_p: *const u8) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> MemNode {
        let img = NodeImage::fresh(1 << 16, 1 << 12, 0).unwrap();
        MemNode::new(0, img, 1 << 12, true, 64, 1, 1)
    }

    #[test]
    fn persist_writes_back_whole_lines_whoever_wrote_them() {
        let mut n = node();
        // A CPU store across two lines; a NIC write in a third, later persisted by the CPU.
        n.cpu_store(4096 + 60, &[1u8; 8]);
        n.store(false, 4096 + 128, &[2u8; 8], 7, Kind::Write);
        assert_eq!(n.write_back(4096 + 64, 1), 1);
        assert_eq!(n.write_back(4096 + 130, 2), 1);
        n.crash(1);
        let h = &n.host[4096..4096 + 136];
        assert_eq!(
            &h[60..64],
            &[0u8; 4],
            "the un-persisted line is rolled back"
        );
        assert_eq!(&h[64..68], &[1u8; 4], "the persisted line keeps its half");
        assert_eq!(
            &h[128..136],
            &[2u8; 8],
            "a NIC write in a written-back line is durable"
        );
        assert_eq!(n.nvm.cpu_store, 8);
        assert_eq!(n.nvm.nic_write, 8);
        assert_eq!(n.nvm.lines_flushed, 2);
    }

    #[test]
    fn write_back_finds_the_pieces_of_its_lines_among_many() {
        let mut n = node();
        // A long NIC write starting well before the line written back (found through the
        // longest-piece bound), then many CPU stores of one line each, never persisted.
        n.store(false, 8192, &[3u8; 1024], 7, Kind::Write);
        for line in 0..200u64 {
            n.cpu_store(16384 + line * LINE, &[4u8; 8]);
        }
        assert_eq!(n.unpersisted(), 201);
        // Storing the bytes already there logs nothing (a crash would restore them anyway).
        n.cpu_store(16384, &[4u8; 8]);
        n.cpu_store(32768, &[0u8; 200]);
        assert_eq!(n.unpersisted(), 201);
        assert_eq!(
            n.nvm.cpu_store,
            200 * 8 + 8 + 200,
            "still counted as stored"
        );
        // One CPU line and the middle of the NIC write.
        assert_eq!(n.write_back(16384 + 100 * LINE, 8), 1);
        assert_eq!(n.write_back(8192 + 512, 64), 1);
        // The NIC write is cut in two pieces around its persisted line.
        assert_eq!(n.unpersisted(), 201);
        n.crash(1);
        let h = &n.host;
        assert_eq!(&h[8192..8192 + 512], &[0u8; 512][..], "rolled back");
        assert_eq!(&h[8192 + 512..8192 + 576], &[3u8; 64][..], "persisted");
        assert_eq!(&h[8192 + 576..9216], &[0u8; 448][..], "rolled back");
        for line in 0..200u64 {
            let at = (16384 + line * LINE) as usize;
            let want = if line == 100 { 4 } else { 0 };
            assert_eq!(h[at], want, "line {line}");
        }
    }

    #[test]
    fn a_word_rewritten_without_a_persist_keeps_one_undo_piece() {
        let mut n = node();
        let at = 4096 + 8;
        n.cpu_store(at, &1u64.to_le_bytes());
        // A NIC write over it (never flushed), then the CPU rewrites it thousands of times.
        n.store(false, at, &2u64.to_le_bytes(), 7, Kind::Write);
        for v in 3..5000u64 {
            n.cpu_store(at, &v.to_le_bytes());
        }
        // A store to the same line's other bytes logs those bytes only.
        n.cpu_store(at - 8, &9u64.to_le_bytes());
        assert_eq!(n.unpersisted(), 3, "CPU piece, NIC piece, the other word");
        n.crash(1);
        assert_eq!(&n.host[at as usize - 8..at as usize + 8], &[0u8; 16][..]);
        // After a write-back the line logs afresh.
        let mut n = node();
        n.cpu_store(at, &1u64.to_le_bytes());
        assert_eq!(n.write_back(at, 8), 1);
        for v in 2..100u64 {
            n.cpu_store(at, &v.to_le_bytes());
        }
        assert_eq!(n.unpersisted(), 1);
        n.crash(1);
        assert_eq!(n.host[at as usize], 1, "rolled back to the persisted value");
    }
}

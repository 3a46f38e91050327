//! CANRT range scans (paper §4.4): data nodes in key order, up to [`SCAN_BATCH`] node
//! snapshots per doorbell ([`super::CanrtConfig::scan_batch`]), resumed in a newer tree
//! when a resize publishes one mid-scan.
use super::CanrtError;
use super::client::{Bracket, Canrt, FRAME_NODE, Fresh, SCAN_BATCH};
use crate::fabric::{Endpoint, Op, QueuePair, Work};
use core::cell::RefCell;
use remora_layouts::canrt::MAX_KEY;
use remora_layouts::{GlobalAddr, LayoutError};
use std_alloc::vec::Vec;

/// A handle's scan buffers, reused from scan to scan (issue 24: a steady-state scan
/// allocates nothing): each scan in flight takes one set and gives it back when it ends,
/// however it ends, so concurrent coroutines' scans never share one.
#[derive(Default)]
pub(super) struct ScanPool(RefCell<Vec<ScanBufs>>);

/// One scan's buffers.
#[derive(Default)]
pub(super) struct ScanBufs {
    /// One node's live pairs in range: (key, value start, value length) into `vals`.
    items: Vec<(u128, usize, usize)>,
    vals: Vec<u8>,
    /// Node snapshots when nodes are larger than [`FRAME_NODE`] (else in the frame).
    nodes: Vec<u8>,
}

/// A set taken from the pool; goes back when dropped.
struct Taken<'p> {
    pool: &'p ScanPool,
    bufs: ScanBufs,
}

impl ScanPool {
    fn take(&self) -> Taken<'_> {
        let bufs = self.0.borrow_mut().pop().unwrap_or_default();
        Taken { pool: self, bufs }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let bufs = core::mem::take(&mut self.bufs);
        self.pool.0.borrow_mut().push(bufs);
    }
}

impl<E: Endpoint> Canrt<'_, E> {
    /// Range scan: data nodes in key order (the prefix array's NodeIDs left to right) from
    /// the one holding `from`, `cfg.scan_batch` (at most [`SCAN_BATCH`]) node snapshots per
    /// doorbell (paper §4.4).
    ///
    /// Each node's pairs are visited as soon as its snapshot is validated (sorted: a data
    /// node's items are unsorted, §3.1), so the scan holds one node's pairs at a time, in
    /// two buffers reused from node to node: no allocation per key, and memory that does
    /// not grow with the range.
    ///
    /// A stale node (a resize published a newer tree) does not start the scan over: the
    /// pairs of the nodes already read stay (each was the valid tree's when read, so each
    /// returned item is linearizable within the scan), and the scan resumes in the newer
    /// tree from the key after the last one visited. Resumes that add nothing are bounded
    /// by `read_retries`; a resume that adds a pair resets the bound.
    pub(super) async fn range(
        &self,
        from: u128,
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, CanrtError> {
        let qp = self.qp()?;
        let batch = (self.cfg.scan_batch as usize).clamp(1, SCAN_BATCH);
        let mut taken = self.scan_bufs.take();
        let ScanBufs { items, vals, nodes } = &mut taken.bufs;
        let mut kb = [0u8; MAX_KEY];
        let mut visited = 0usize;
        let mut last_key: Option<u128> = None;
        let g = self.view().data();
        let mut at = from;
        let mut idle = 0u32;
        'again: loop {
            if let Some(last) = last_key {
                if last >= g.max_key() {
                    break 'again;
                }
                at = last + 1;
            }
            let v = self.view();
            let size = v.header.data_node_size as usize;
            // Snapshots in the coroutine's frame for nodes up to FRAME_NODE (see `NodeBuf`).
            let mut frame = [0u8; FRAME_NODE * SCAN_BATCH];
            let bufs: &mut [u8] = if size <= FRAME_NODE {
                &mut frame[..size * SCAN_BATCH]
            } else {
                nodes.resize(size * SCAN_BATCH, 0);
                &mut nodes[..]
            };
            let mut brackets = [Bracket::default(); SCAN_BATCH];
            let corrupt = |why| CanrtError::Corrupt {
                addr: GlobalAddr::from_raw(v.root),
                why,
            };
            self.ep.charge(Work::Probe(1));
            let first = v.locate(at).map_err(corrupt)?;
            let mut r = v.rank(first).ok_or(corrupt(LayoutError::Inconsistent {
                what: "located data node missing from key order",
            }))?;
            let order = v.order();
            let before = visited;
            while visited < limit && r < order.len() {
                let ids = &order[r..(r + batch).min(order.len())];
                {
                    let mut ops: heapless::Vec<Op<'_>, { 3 * SCAN_BATCH }> = heapless::Vec::new();
                    for ((&id, b), br) in ids.iter().zip(bufs.chunks_mut(size)).zip(&mut brackets) {
                        // ids.len() <= SCAN_BATCH: three READs each fit.
                        self.push_snapshot(&mut ops, self.node_addr(&v, id), br, b)?;
                    }
                    qp.post(&mut ops).await?;
                }
                for (i, &id) in ids.iter().enumerate() {
                    let addr = self.node_addr(&v, id);
                    let buf = &mut bufs[i * size..(i + 1) * size];
                    let bracket = &mut brackets[i];
                    let start = visited;
                    let mut tries = 0;
                    loop {
                        if tries > 0 {
                            self.read_snapshot(addr, bracket, buf).await?;
                        }
                        tries += 1;
                        if tries > self.cfg.read_retries {
                            return Err(CanrtError::Retries { what: "scan read" });
                        }
                        let nv = match self.snapshot(v.data(), bracket, buf) {
                            Ok(Some(nv)) => nv,
                            _ => {
                                Self::bump(&self.torn);
                                continue;
                            }
                        };
                        items.clear();
                        vals.clear();
                        let fresh = self.fresh(&v, &nv).await?;
                        if !matches!(fresh, Fresh::Yes) {
                            if matches!(fresh, Fresh::NotYet) {
                                // A resize is about to publish a newer tree: wait for it
                                // (with back-off) rather than spin.
                                self.await_thaw(&v, addr).await?;
                            }
                            Self::bump(&self.scan_resumes);
                            idle = if start > before { 0 } else { idle + 1 };
                            if idle > self.cfg.read_retries {
                                return Err(CanrtError::Retries { what: "scan" });
                            }
                            continue 'again;
                        }
                        // Only the keys this tree routes here (a split leaves copies behind
                        // for an instant).
                        let res = nv.for_each_live(|k, val| {
                            self.ep.charge(Work::Probe(1));
                            if k >= at && v.locate(k).ok() == Some(id) {
                                items.push((k, vals.len(), val.len()));
                                vals.extend_from_slice(val);
                            }
                        });
                        if res.is_ok() {
                            break;
                        }
                        Self::bump(&self.torn);
                    }
                    self.ep.charge(Work::Sort(items.len()));
                    items.sort_unstable_by_key(|p| p.0);
                    for &(k, s, len) in items.iter().take(limit - visited) {
                        visit(g.key_to_be(k, &mut kb), &vals[s..s + len]);
                        visited += 1;
                        last_key = Some(k);
                    }
                    if visited >= limit {
                        break;
                    }
                }
                r += ids.len();
            }
            break 'again;
        }
        Ok(visited)
    }

    /// Times a scan met a stale node and resumed in a newer tree.
    pub fn scan_resumes(&self) -> u64 {
        self.scan_resumes.get()
    }
}

//! Range scan: an in-order walk of fresh node images, leaves read in batches (one doorbell
//! per memory node per batch, all memory nodes in flight together: one round trip per
//! batch). A node that turns out obsolete or inconsistent restarts the walk just after the
//! last key visited. The walk's stack, batch and leaf images live in buffers the handle
//! keeps for its next scan ([`ScanScratch`]): a scan allocates only while they grow.
use super::Smart;
use super::config::SmartError;
use super::key::{Key, user_key};
use super::remote::{MAX_CHAIN, NodeImg, check_leaf, verified_leaf};
use crate::fabric::{Endpoint, Op, Work};
use core::cell::RefCell;
use remora_layouts::GlobalAddr;
use remora_layouts::smart::{MAX_LEAF_BYTES, NodeType, SlotKind};
use std_alloc::vec::Vec;

/// Leaves read in one batch at most (each memory node's share fits one doorbell).
const LEAF_BATCH: usize = MAX_CHAIN;

/// Buffer sets kept for later scans at most (more scans at once on one handle allocate).
const KEPT: usize = 64;

/// Sibling internal nodes read ahead together at most (one doorbell per memory node).
const NODE_BATCH: usize = 16;

/// The buffers scans of one handle reuse: one set per scan in flight.
#[derive(Default)]
pub(crate) struct ScanScratch {
    free: RefCell<Vec<ScanBufs>>,
}

#[derive(Default)]
struct ScanBufs {
    stack: Vec<Frame>,
    batch: Vec<(GlobalAddr, usize)>,
    images: Vec<u8>,
    /// Internal-node images read ahead during one walk (never overwritten within it).
    nodes: Vec<u8>,
}

/// A buffer set lent to one scan; back to the handle's scratch when dropped.
struct Lent<'a> {
    from: &'a ScanScratch,
    bufs: ScanBufs,
}

impl ScanScratch {
    fn lend(&self) -> Lent<'_> {
        let bufs = self.free.borrow_mut().pop().unwrap_or_default();
        Lent { from: self, bufs }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let mut free = self.from.free.borrow_mut();
        if free.len() < KEPT {
            free.push(core::mem::take(&mut self.bufs));
        }
    }
}

// Frames live in one reused Vec per scan; boxing the path would allocate per node.
#[allow(clippy::large_enum_variant)]
enum Frame {
    Node {
        addr: GlobalAddr,
        ty: NodeType,
        expect_start: usize,
        path: Key,
        bounded: bool,
        /// Where its image was read ahead into the walk's node buffer (None: not yet).
        at: Option<usize>,
    },
    Leaf {
        addr: GlobalAddr,
        bytes: usize,
    },
}

/// Compares the node's path bytes `path[from..]` with the bound.
fn cmp_path(path: &[u8], lower: &[u8], from: usize) -> core::cmp::Ordering {
    use core::cmp::Ordering;
    for (i, b) in path.iter().enumerate().skip(from) {
        match lower.get(i) {
            None => return Ordering::Greater,
            Some(l) if b != l => return b.cmp(l),
            _ => {}
        }
    }
    Ordering::Equal
}

impl<'e, E: Endpoint> Smart<'e, E> {
    pub(crate) async fn scan_from(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, SmartError> {
        let mut lower = Key::lower_bound(self.cfg.key_mode, from)?;
        let mut count = 0usize;
        let mut tries = self.pace();
        let mut lent = self.scan_scratch.lend();
        let ScanBufs {
            stack,
            batch,
            images,
            nodes,
        } = &mut lent.bufs;
        'walk: while count < limit {
            stack.clear();
            batch.clear();
            nodes.clear();
            // Every address on the stack was read during this walk: it may be acted on
            // until the walk outlives the reclamation lease (`reclaim.rs`).
            let t0 = self.ep.now_ns();
            stack.push(Frame::Node {
                addr: self.root,
                ty: NodeType::N256,
                expect_start: 0,
                path: Key::lower_bound(self.cfg.key_mode, &[])?,
                bounded: true,
                at: None,
            });
            loop {
                let frame = stack.pop();
                let flush = match &frame {
                    None => !batch.is_empty(),
                    Some(_) => batch.len() >= (limit - count).min(LEAF_BATCH),
                };
                if flush {
                    let (last, complete) = self
                        .visit_batch(batch, images, lower.bytes(), limit - count, visit, t0)
                        .await?;
                    batch.clear();
                    if let Some((n, last_key)) = last {
                        count += n;
                        lower = last_key;
                    }
                    if count >= limit {
                        break 'walk;
                    }
                    if !complete {
                        // A leaf's forward chain was longer than we follow (a hot key
                        // rewritten out of place many times since its slot was read): go on
                        // from just past the last key visited, through fresh slots.
                        self.restart(&mut tries, "scan kept meeting long leaf forward chains")
                            .await?;
                        continue 'walk;
                    }
                }
                let Some(mut frame) = frame else {
                    break 'walk;
                };
                if let Frame::Node { at: None, .. } = frame {
                    // This node and the siblings after it, read together: no more than the
                    // keys still wanted (each subtree holds at least one).
                    let want = (limit - count)
                        .saturating_sub(batch.len())
                        .clamp(1, NODE_BATCH);
                    stack.push(frame);
                    self.read_ahead(stack, nodes, want).await?;
                    frame = stack
                        .pop()
                        .ok_or(SmartError::Config("scan stack emptied"))?;
                }
                let (addr, ty, expect_start, path, mut bounded, at) = match frame {
                    Frame::Leaf { addr, bytes } => {
                        batch.push((addr, bytes));
                        continue;
                    }
                    Frame::Node {
                        addr,
                        ty,
                        expect_start,
                        path,
                        bounded,
                        at,
                    } => (addr, ty, expect_start, path, bounded, at),
                };
                let img = match at.and_then(|o| nodes.get(o..o + ty.bytes())) {
                    Some(bytes) => {
                        self.ep.charge(Work::NodeDecode(ty.capacity()));
                        match NodeImg::decode(addr, ty, bytes) {
                            Ok(img) => img,
                            // Torn: read on its own, with read_node's bounded retries.
                            Err(_) => self.read_node(addr, ty).await?,
                        }
                    }
                    None => self.read_node(addr, ty).await?,
                };
                if self.stale(t0) {
                    self.restart(&mut tries, "scan walks kept outliving their lease")
                        .await?;
                    continue 'walk;
                }
                let h = img.header;
                if !h.is_obsolete() && !h.is_frozen() && h.prefix_start() < expect_start {
                    // A prefix split not finished yet (see `prefix_split`): finish it.
                    if self.finish_prefix_split(addr, h, expect_start).await? {
                        super::bump(&self.stats.repairs);
                    }
                    self.restart(&mut tries, "scan kept meeting unfinished prefix splits")
                        .await?;
                    continue 'walk;
                }
                if h.is_obsolete() || h.prefix_start() != expect_start {
                    self.restart(&mut tries, "scan kept meeting replaced nodes")
                        .await?;
                    continue 'walk;
                }
                let start = path.bytes().len();
                let p = h.prefix();
                let mut full = [0u8; remora_layouts::smart::MAX_KEY_LEN];
                full[..start].copy_from_slice(path.bytes());
                full[start..start + h.prefix_len()].copy_from_slice(&p[..h.prefix_len()]);
                let depth = h.depth();
                if bounded {
                    match cmp_path(&full[..depth], lower.bytes(), start) {
                        core::cmp::Ordering::Less => continue,
                        core::cmp::Ordering::Greater => bounded = false,
                        core::cmp::Ordering::Equal => {}
                    }
                }
                let bound = if bounded {
                    lower.bytes().get(depth).copied()
                } else {
                    None
                };
                if bounded && bound.is_none() {
                    bounded = false;
                }
                let mut kids: heapless::Vec<(u8, SlotKind), 256> = heapless::Vec::new();
                for s in img.live_slots() {
                    if s.is_empty() {
                        continue;
                    }
                    match s.kind() {
                        Ok(k) => {
                            let _ = kids.push((s.pkey(), k));
                        }
                        Err(_) => {
                            self.restart(&mut tries, "scan read an undecodable slot")
                                .await?;
                            continue 'walk;
                        }
                    }
                }
                self.ep.charge(Work::Sort(kids.len()));
                kids.sort_unstable_by_key(|(b, _)| *b);
                for (b, kind) in kids.iter().rev() {
                    if let Some(l) = bound
                        && *b < l
                    {
                        continue;
                    }
                    match *kind {
                        SlotKind::Leaf { addr, bytes, .. } => {
                            stack.push(Frame::Leaf { addr, bytes })
                        }
                        SlotKind::Node { addr, ty, .. } => {
                            full[depth] = *b;
                            let child = Key::from_slice(&full[..depth + 1]);
                            stack.push(Frame::Node {
                                addr,
                                ty,
                                expect_start: depth + 1,
                                path: child,
                                bounded: bounded && Some(*b) == bound,
                                at: None,
                            });
                        }
                        SlotKind::Empty | SlotKind::Dead { .. } => {}
                    }
                }
            }
        }
        Ok(count)
    }

    /// Reads the images of the internal nodes on top of `stack` (up to `want` of them, in
    /// a row, none read yet) into `nodes`, all memory nodes in flight together, and notes
    /// in each frame where its image is.
    async fn read_ahead(
        &self,
        stack: &mut [Frame],
        nodes: &mut Vec<u8>,
        want: usize,
    ) -> Result<(), SmartError> {
        // The first node is needed; the siblings after it may not be (the scan may end
        // first), so they get no more bytes than the leaves still wanted would take.
        let mut budget = want * self.max_leaf_bytes();
        let mut picked: heapless::Vec<usize, NODE_BATCH> = heapless::Vec::new();
        for (i, f) in stack.iter().enumerate().rev() {
            match f {
                Frame::Node { at: None, ty, .. }
                    if picked.is_empty()
                        || (picked.len() < want.min(NODE_BATCH) && ty.bytes() <= budget) =>
                {
                    budget = budget.saturating_sub(ty.bytes() * usize::from(!picked.is_empty()));
                    let _ = picked.push(i);
                }
                _ => break,
            }
        }
        let base = nodes.len();
        let mut end = base;
        for &i in &picked {
            if let Frame::Node { ty, at, .. } = &mut stack[i] {
                *at = Some(end);
                end += ty.bytes();
            }
        }
        nodes.resize(end, 0);
        let mut slices: heapless::Vec<Option<(GlobalAddr, &mut [u8])>, NODE_BATCH> =
            heapless::Vec::new();
        let mut rest = &mut nodes[base..];
        for &i in &picked {
            if let Frame::Node { addr, ty, .. } = &stack[i] {
                let (head, tail) = core::mem::take(&mut rest).split_at_mut(ty.bytes());
                let _ = slices.push(Some((*addr, head)));
                rest = tail;
            }
        }
        let mut ops: heapless::Vec<Op<'_>, NODE_BATCH> = heapless::Vec::new();
        for &node in self.ep.nodes() {
            for s in slices.iter_mut() {
                if s.as_ref().is_some_and(|(a, _)| a.node() == node)
                    && let Some((remote, local)) = s.take()
                {
                    let _ = ops.push(Op::Read { remote, local });
                }
            }
        }
        self.post_spread(&mut ops).await?;
        self.stats
            .node_reads
            .set(self.stats.node_reads.get() + ops.len() as u64);
        Ok(())
    }

    /// Reads a batch of up to [`LEAF_BATCH`] leaves into `images` (one doorbell per memory
    /// node, all in flight together), visits the valid ones with
    /// keys `>= lower` in order, up to `room`. Returns how many were visited and the bound
    /// just past the last one, and `false` when it stopped early at a leaf whose forward
    /// chain it could not follow to the end, or the walk that found the leaves (at `t0`)
    /// grew too old to trust them (the caller restarts from that bound).
    async fn visit_batch(
        &self,
        batch: &[(GlobalAddr, usize)],
        images: &mut Vec<u8>,
        lower: &[u8],
        room: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
        t0: u64,
    ) -> Result<(Option<(usize, Key)>, bool), SmartError> {
        let total: usize = batch.iter().map(|(_, b)| *b).sum();
        images.clear();
        images.resize(total, 0);
        {
            let mut rest = &mut images[..];
            let mut slices: heapless::Vec<Option<(GlobalAddr, &mut [u8])>, LEAF_BATCH> =
                heapless::Vec::new();
            for &(a, b) in batch {
                let (head, tail) = rest.split_at_mut(b);
                slices
                    .push(Some((a, head)))
                    .map_err(|_| SmartError::Config("a scan batch of more than 128 leaves"))?;
                rest = tail;
            }
            // The batch's READs grouped by memory node, each node's adjacent.
            let mut ops: heapless::Vec<Op<'_>, LEAF_BATCH> = heapless::Vec::new();
            for &node in self.ep.nodes() {
                for s in slices.iter_mut() {
                    if s.as_ref().is_some_and(|(a, _)| a.node() == node)
                        && let Some((remote, local)) = s.take()
                    {
                        let _ = ops.push(Op::Read { remote, local });
                    }
                }
            }
            self.post_spread(&mut ops).await?;
        }
        let mut visited = 0;
        let mut last: Option<Key> = None;
        if self.stale(t0) {
            return Ok((None, false));
        }
        let mut off = 0;
        let mut one = [0u8; MAX_LEAF_BYTES];
        for &(addr, bytes) in batch {
            if visited >= room {
                break;
            }
            let img = &images[off..off + bytes];
            off += bytes;
            // Torn or forwarded leaves are re-read one by one. (`verified_leaf` decodes the
            // checked image again, without its checksum: not charged.)
            self.ep.charge(Work::LeafCheck(bytes));
            let needs_reread = match check_leaf(img) {
                Ok(v) => v.status.is_obsolete(),
                Err(_) => true,
            };
            let view_bytes: &[u8] = if needs_reread {
                if !self.read_live(addr, &mut one[..bytes]).await? || self.stale(t0) {
                    return Ok((last.map(|k| (visited, k)), false));
                }
                &one[..bytes]
            } else {
                img
            };
            let v = verified_leaf(view_bytes)?;
            // Still obsolete at the end of its chain: retired (deleted), forwarding to itself.
            if !v.status.is_valid() || v.status.is_obsolete() || v.key < lower {
                continue;
            }
            visit(user_key(self.cfg.key_mode, v.key), v.value);
            visited += 1;
            last = Some(Key::successor(v.key));
        }
        Ok((last.map(|k| (visited, k)), true))
    }

    /// Reads the live end of a leaf's forward chain into `buf`; `false` when the chain is
    /// longer than 64 hops (the caller restarts through fresh slots).
    async fn read_live(&self, mut addr: GlobalAddr, buf: &mut [u8]) -> Result<bool, SmartError> {
        for _ in 0..64 {
            self.read_leaf(addr, buf).await?;
            let v = verified_leaf(buf)?;
            match v.status.forward() {
                // A retired leaf forwards to itself: deleted, skipped by the caller.
                Some(next) if v.status.is_obsolete() && next != addr => addr = next,
                _ => return Ok(true),
            }
        }
        Ok(false)
    }
}

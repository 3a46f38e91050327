//! Catfish's RDMA offloading: the client traverses the tree itself with one-sided READs,
//! one doorbell per level, every intersecting child READ at once (multi-issue), re-reading
//! torn images and starting over after meeting a reused node.
use super::{CatfishClient, MULTI_ISSUE, REUSE_RESTARTS, TORN_RETRIES};
use crate::catfish::CatfishError;
use crate::fabric::{Op, QueuePair, Work};
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::{Entry, META_LEN, Meta, Node, Rect};
use std_alloc::vec::Vec;

impl CatfishClient {
    /// RDMA offloading: the superblock and the cached root in one doorbell, then one
    /// doorbell per level fetching every intersecting child at once (multi-issue). Starts
    /// over (bounded) when it meets a node born after its epoch's grace period.
    pub async fn search_offload<Q: QueuePair>(
        &mut self,
        qp: &Q,
        rect: Rect,
        out: &mut Vec<Entry>,
    ) -> Result<(), CatfishError> {
        if self.root.is_null() {
            self.refresh_meta(qp).await?;
        }
        let start = out.len();
        for _ in 0..=REUSE_RESTARTS {
            // The epoch of a superblock READ that completed before this attempt posts any.
            let epoch0 = self.epoch;
            if self.offload_once(qp, rect, out, epoch0).await? {
                self.stats.offloaded_searches += 1;
                return Ok(());
            }
            out.truncate(start);
            self.stats.reuse_restarts += 1;
        }
        Err(CatfishError::Lapped {
            node: qp.peer(),
            restarts: REUSE_RESTARTS,
        })
    }

    /// One offloaded traversal from epoch `epoch0`; false if it met a node born at or
    /// after `epoch0 + REUSE_GRACE` (what it appended to `out` is then worthless).
    async fn offload_once<Q: QueuePair>(
        &mut self,
        qp: &Q,
        rect: Rect,
        out: &mut Vec<Entry>,
        epoch0: u64,
    ) -> Result<bool, CatfishError> {
        let (len, fanout) = (self.node_len, self.fanout);
        self.nodes.resize(len, 0);
        let mut meta_buf = [0u8; META_LEN];
        {
            let mut ops = [
                Op::Read {
                    remote: self.meta,
                    local: &mut meta_buf,
                },
                Op::Read {
                    remote: self.root,
                    local: &mut self.nodes[..len],
                },
            ];
            qp.post(&mut ops).await?;
        }
        self.stats.node_reads += 1;
        let meta = Meta::decode(&meta_buf)?;
        self.epoch = meta.epoch;
        if meta.heartbeat.seq != self.last_heartbeat_seq {
            self.last_heartbeat_seq = meta.heartbeat.seq;
            self.observed = Some(meta.heartbeat.load_permille);
        }
        self.frontier.clear();
        let root = GlobalAddr::from_raw(meta.root);
        self.frontier.push(root);
        if root != self.root {
            // The root split since we cached it: the image we read is stale.
            self.root = root;
            self.stats.root_refreshes += 1;
            self.read_frontier(qp, 0).await?;
        } else {
            self.pending.clear();
            if Node::decode_with(&self.nodes[..len], fanout).is_err() {
                self.stats.torn_retries += 1;
                self.pending.push(0);
            }
            self.reread_torn(qp).await?;
        }
        let mut level = None::<u16>;
        let mut visited = 0u64;
        loop {
            self.next.clear();
            let parent = level;
            for i in 0..self.frontier.len() {
                let img = &self.nodes[i * len..(i + 1) * len];
                let node = Node::decode_with(img, fanout)?;
                // Each image is checked twice (`read_frontier`, here), then every entry's
                // rectangle is tested. The check is CRC-64/ECMA-182 by carry-less multiply
                // (`catfish::node_crc`), as the paper's Xeons run it.
                qp.charge(Work::Crc64Clmul(2 * len));
                qp.charge(Work::Rect(node.entries().len()));
                if node.born_after_grace(epoch0) {
                    return Ok(false);
                }
                if let Some(l) = parent
                    && node.level + 1 != l
                {
                    return Err(CatfishError::Corrupt("child level is not parent level - 1"));
                }
                let next = &mut self.next;
                intersecting(
                    &node,
                    &rect,
                    |e| out.push(*e),
                    |p| next.push(GlobalAddr::from_raw(p)),
                );
                level = Some(node.level);
            }
            visited += self.frontier.len() as u64;
            if self.next.is_empty() || level == Some(0) {
                break;
            }
            if visited > 1 << 32 {
                return Err(CatfishError::Corrupt("search never reached the leaves"));
            }
            core::mem::swap(&mut self.frontier, &mut self.next);
            self.read_frontier(qp, 0).await?;
        }
        Ok(true)
    }

    /// READs every node of the frontier (from index `from`), `MULTI_ISSUE` per doorbell,
    /// then re-reads torn images until all decode.
    async fn read_frontier<Q: QueuePair>(
        &mut self,
        qp: &Q,
        from: usize,
    ) -> Result<(), CatfishError> {
        let n = self.frontier.len();
        let (len, fanout) = (self.node_len, self.fanout);
        self.nodes.resize(n * len, 0);
        let mut start = from;
        while start < n {
            let end = (start + MULTI_ISSUE).min(n);
            let mut ops: heapless::Vec<Op<'_>, MULTI_ISSUE> = heapless::Vec::new();
            for (addr, buf) in self.frontier[start..end]
                .iter()
                .zip(self.nodes[start * len..end * len].chunks_exact_mut(len))
            {
                // Cannot fail: at most MULTI_ISSUE ops are pushed.
                let _ = ops.push(Op::Read {
                    remote: *addr,
                    local: buf,
                });
            }
            qp.post(&mut ops).await?;
            start = end;
        }
        self.stats.node_reads += (n - from) as u64;
        self.pending.clear();
        for i in from..n {
            if Node::decode_with(&self.nodes[i * len..(i + 1) * len], fanout).is_err() {
                self.stats.torn_retries += 1;
                self.pending.push(i);
            }
        }
        self.reread_torn(qp).await
    }

    /// Re-reads the frontier nodes listed in `pending` until each decodes (bounded).
    async fn reread_torn<Q: QueuePair>(&mut self, qp: &Q) -> Result<(), CatfishError> {
        let (len, fanout) = (self.node_len, self.fanout);
        let mut round = 0;
        while !self.pending.is_empty() {
            round += 1;
            if round > TORN_RETRIES {
                let addr = self.frontier[self.pending[0]];
                let img = &self.nodes[self.pending[0] * len..(self.pending[0] + 1) * len];
                return Err(match Node::decode_with(img, fanout) {
                    Err(e) => CatfishError::TornRetriesExhausted { addr, last: e },
                    Ok(_) => CatfishError::Corrupt("torn retries exhausted"),
                });
            }
            crate::block_on::yield_now().await;
            for chunk in self.pending.chunks(MULTI_ISSUE) {
                let mut ops: heapless::Vec<Op<'_>, MULTI_ISSUE> = heapless::Vec::new();
                // Hand out disjoint node buffers for the listed (distinct, ascending) indices.
                let mut rest: &mut [u8] = &mut self.nodes;
                let mut base = 0;
                for &i in chunk {
                    let (_, tail) = rest.split_at_mut((i - base) * len);
                    let (buf, tail) = tail.split_at_mut(len);
                    rest = tail;
                    base = i + 1;
                    let _ = ops.push(Op::Read {
                        remote: self.frontier[i],
                        local: buf,
                    });
                }
                qp.post(&mut ops).await?;
            }
            self.stats.node_reads += self.pending.len() as u64;
            let nodes = &self.nodes;
            self.pending
                .retain(|&i| Node::decode_with(&nodes[i * len..(i + 1) * len], fanout).is_err());
            self.stats.torn_retries += self.pending.len() as u64;
        }
        Ok(())
    }
}

/// The entries of `node` whose rectangles intersect `window`: a leaf's to `hit`, an inner
/// node's children to `child` (the per-entry work the sim charges as `Work::Rect`).
pub(crate) fn intersecting(
    node: &Node,
    window: &Rect,
    mut hit: impl FnMut(&Entry),
    mut child: impl FnMut(u64),
) {
    for e in node.entries() {
        if !e.rect.intersects(window) {
            continue;
        }
        if node.level == 0 {
            hit(e)
        } else {
            child(e.ptr)
        }
    }
}

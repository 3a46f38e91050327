//! Reading and writing SMART objects over the fabric: node images, checked leaf reads, batched
//! writes, allocation.
use super::Smart;
use super::config::SmartError;
use crate::fabric::{Endpoint, FabricError, Op, QueuePair, Work};
use crate::lease::{Verdict, Waiter};
use remora_layouts::smart::{
    Header, LEAF_CRC_OFFSET, LEAF_KEY_OFFSET, LeafStatus, LeafView, MAX_NODE_BYTES,
    NODE_HEADER_OFFSET, NODE_REV_OFFSET, NODE_SLOTS_OFFSET, NodeType, Slot, encode_leaf,
};
use remora_layouts::{GlobalAddr, LayoutError};

/// The most work requests posted in one doorbell (the verbs fabric's chain limit).
pub(crate) const MAX_CHAIN: usize = 128;

/// Memory nodes [`Smart::post_spread`] keeps in flight at once (more go in further rounds).
const SPREAD: usize = 16;

/// The checksum of a leaf: CRC-64/XZ over its valid bit, meta word, key and value area
/// (carry-less multiply where the CPU has it, slice-by-16 tables otherwise; the same value).
pub(crate) use remora_layouts::smart::leaf_crc;

/// Writes a complete, checksummed leaf image into `out` (exactly the leaf's size).
pub(crate) fn build_leaf(
    out: &mut [u8],
    reverse: u64,
    status: LeafStatus,
    key: &[u8],
    value: &[u8],
    val_cap: usize,
) -> Result<(), LayoutError> {
    encode_leaf(out, reverse, status, 0, key, value, val_cap)?;
    let crc = {
        let v = LeafView::decode(out)?;
        leaf_crc(status.is_valid(), v.checksummed())
    };
    out[LEAF_CRC_OFFSET..LEAF_CRC_OFFSET + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The status of a deleted leaf that is (being) unlinked and retired: obsolete, forwarding
/// to itself (see `reclaim.rs`), whatever its valid bit (out of place, the retiring CAS
/// keeps it: it is under the checksum).
pub(crate) fn retired_status(leaf: GlobalAddr) -> Result<LeafStatus, LayoutError> {
    LeafStatus::live(false).forwarded(leaf)
}

/// True for the status of a retired leaf at `leaf`.
pub(crate) fn is_retired(st: LeafStatus, leaf: GlobalAddr) -> bool {
    st.is_obsolete() && st.forward() == Some(leaf)
}

/// Verifies a leaf image: decodes and checks the checksum.
pub(crate) fn check_leaf(bytes: &[u8]) -> Result<LeafView<'_>, LayoutError> {
    let v = LeafView::decode(bytes)?;
    let c = leaf_crc(v.status.is_valid(), v.checksummed());
    if c != v.checksum {
        return Err(LayoutError::BadChecksum {
            stored: v.checksum,
            computed: c,
        });
    }
    Ok(v)
}

/// What a verified leaf image says, without borrowing it: read once after the checksum,
/// so that callers need neither decode nor checksum the image again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeafSummary {
    pub reverse: u64,
    pub status: LeafStatus,
    key_len: usize,
    value_off: usize,
    value_len: usize,
}

impl LeafSummary {
    fn of(v: &LeafView<'_>) -> LeafSummary {
        LeafSummary {
            reverse: v.reverse,
            status: v.status,
            key_len: v.meta.key_len,
            value_off: v.meta.value_offset(),
            value_len: v.meta.val_len,
        }
    }
    /// The key in `img`, the image this summary was taken from.
    pub fn key<'a>(&self, img: &'a [u8]) -> &'a [u8] {
        img.get(LEAF_KEY_OFFSET..LEAF_KEY_OFFSET + self.key_len)
            .unwrap_or(&[])
    }
    /// The value in `img`, the image this summary was taken from.
    pub fn value<'a>(&self, img: &'a [u8]) -> &'a [u8] {
        img.get(self.value_off..self.value_off + self.value_len)
            .unwrap_or(&[])
    }
}

/// Decodes a leaf image that was already verified ([`check_leaf`], as
/// [`Smart::read_leaf`] does) and not changed since: the checksum is not computed again.
pub(crate) fn verified_leaf(bytes: &[u8]) -> Result<LeafView<'_>, super::config::SmartError> {
    LeafView::decode(bytes).map_err(|err| super::config::SmartError::Corrupt { what: "leaf", err })
}

/// Where a key's partial key is (or would go) in a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Find {
    Match {
        idx: usize,
        slot: Slot,
    },
    /// No slot for the partial key. `free`: the slot an insert would take (None: full).
    /// `frozen`: a frozen word was seen on the way, so "absent" is not decided yet.
    Absent {
        free: Option<usize>,
        frozen: bool,
    },
}

/// A decoded internal node.
#[derive(Clone)]
pub(crate) struct NodeImg {
    pub addr: GlobalAddr,
    pub rev: u64,
    pub header: Header,
    pub slots: [Slot; 256],
    /// Fabric time just before the READ of this image was posted (0: built locally); see
    /// `reclaim.rs` for what may still be done with it, and until when.
    pub t0: u64,
}

impl NodeImg {
    pub fn ty(&self) -> NodeType {
        self.header.node_type()
    }

    pub fn live_slots(&self) -> &[Slot] {
        &self.slots[..self.ty().capacity()]
    }

    /// Decodes a node image of the type its parent slot announced.
    pub fn decode(addr: GlobalAddr, ty: NodeType, bytes: &[u8]) -> Result<NodeImg, LayoutError> {
        let rd = |at: usize| remora_layouts::bits::read_u64(bytes, at);
        let header = Header::decode(rd(NODE_HEADER_OFFSET)?)?;
        if header.node_type() != ty {
            return Err(LayoutError::Inconsistent {
                what: "node type differs from the parent slot's",
            });
        }
        let mut slots = [Slot::EMPTY; 256];
        for (i, s) in slots.iter_mut().enumerate().take(ty.capacity()) {
            *s = Slot::from_raw(rd(NODE_SLOTS_OFFSET + 8 * i)?);
        }
        Ok(NodeImg {
            addr,
            rev: rd(NODE_REV_OFFSET)?,
            header,
            slots,
            t0: 0,
        })
    }

    /// Where partial key `b` is.
    pub fn find(&self, b: u8) -> Find {
        let mut frozen = self.header.is_frozen();
        if self.ty() == NodeType::N256 {
            let s = self.slots[b as usize];
            return if s.is_empty() {
                Find::Absent {
                    free: Some(b as usize),
                    frozen: frozen || s.is_frozen(),
                }
            } else {
                Find::Match {
                    idx: b as usize,
                    slot: s,
                }
            };
        }
        for (idx, s) in self.live_slots().iter().enumerate() {
            frozen |= s.is_frozen();
            if s.is_empty() {
                return Find::Absent {
                    free: Some(idx),
                    frozen,
                };
            }
            if s.pkey() == b {
                return Find::Match { idx, slot: *s };
            }
        }
        Find::Absent { free: None, frozen }
    }

    /// Serializes the node (reverse pointer, header, slots).
    pub fn encode(&self, out: &mut [u8]) -> usize {
        let n = self.ty().bytes();
        out[..8].copy_from_slice(&self.rev.to_le_bytes());
        out[8..16].copy_from_slice(&self.header.raw().to_le_bytes());
        for (i, s) in self.live_slots().iter().enumerate() {
            out[16 + 8 * i..24 + 8 * i].copy_from_slice(&s.raw().to_le_bytes());
        }
        n
    }
}

impl<'e, E: Endpoint> Smart<'e, E> {
    pub(crate) fn qp(&self, addr: GlobalAddr) -> Result<&'e E::Qp, SmartError> {
        Ok(self.ep.qp_for(addr)?)
    }

    /// One READ into `buf`.
    pub(crate) async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<(), SmartError> {
        Ok(self.qp(addr)?.read(addr, buf).await?)
    }

    /// One WRITE.
    pub(crate) async fn write(&self, addr: GlobalAddr, buf: &[u8]) -> Result<(), SmartError> {
        Ok(self.qp(addr)?.write(addr, buf).await?)
    }

    /// One CMP_AND_SWP; the prior value.
    pub(crate) async fn cas(
        &self,
        addr: GlobalAddr,
        cmp: u64,
        swap: u64,
    ) -> Result<u64, SmartError> {
        Ok(self.qp(addr)?.cas(addr, cmp, swap).await?)
    }

    /// READs a node of type `ty`, retrying undecodable images (bounded).
    pub(crate) async fn read_node(
        &self,
        addr: GlobalAddr,
        ty: NodeType,
    ) -> Result<NodeImg, SmartError> {
        let mut buf = [0u8; MAX_NODE_BYTES];
        let mut tries = 0;
        let mut pace = None;
        loop {
            let t0 = self.ep.now_ns();
            self.read(addr, &mut buf[..ty.bytes()]).await?;
            self.stats.node_reads.set(self.stats.node_reads.get() + 1);
            self.ep.charge(Work::NodeDecode(ty.capacity()));
            match NodeImg::decode(addr, ty, &buf[..ty.bytes()]) {
                Ok(img) => return Ok(NodeImg { t0, ..img }),
                Err(err) => {
                    tries += 1;
                    if tries >= self.cfg.max_checksum_retries || !self.back_off(&mut pace).await {
                        return Err(SmartError::Corrupt {
                            what: "internal node",
                            err,
                        });
                    }
                }
            }
        }
    }

    /// READs a leaf until its image decodes and its checksum matches (bounded); the image
    /// is left in `buf`.
    pub(crate) async fn read_leaf(
        &self,
        addr: GlobalAddr,
        buf: &mut [u8],
    ) -> Result<LeafSummary, SmartError> {
        let mut tries = 0;
        let mut pace = None;
        let mut stuck: Option<Waiter> = None;
        // The queue pair once, and its READ awaited here rather than through `Self::read`:
        // one future level less to descend at every poll of a lookup.
        let qp = self.qp(addr)?;
        loop {
            qp.read(addr, buf).await?;
            self.ep.charge(Work::LeafCheck(buf.len()));
            match check_leaf(buf) {
                Ok(v) => return Ok(LeafSummary::of(&v)),
                Err(err) => {
                    tries += 1;
                    self.stats
                        .checksum_retries
                        .set(self.stats.checksum_retries.get() + 1);
                    // Torn under the same lock word for a whole lease: its holder died
                    // mid-write-back. Take the lock over and repair the leaf. While a holder
                    // is named, only the deadline bounds the wait (the lease may be longer
                    // than the re-read cap); a torn leaf nobody holds is corrupt.
                    let mut held = false;
                    if self.cfg.techniques.in_place_leaf
                        && matches!(err, LayoutError::BadChecksum { .. })
                        && buf.len() >= 8
                    {
                        let word = remora_layouts::bits::read_u64(buf, buf.len() - 8).unwrap_or(0);
                        let now = self.ep.now_ns();
                        held = word != 0;
                        // Watched time only: a reader stopped meanwhile takes no live
                        // writer's lock over.
                        let w = stuck
                            .get_or_insert_with(|| Waiter::new(self.cfg.lease, now).watching());
                        if let Verdict::Expired { word } = w.observe(word, now) {
                            self.repair_torn_leaf(addr, buf, word).await?;
                            continue;
                        }
                    }
                    let capped = !held && tries >= self.cfg.max_checksum_retries;
                    if capped || !self.back_off(&mut pace).await {
                        return Err(match err {
                            LayoutError::BadChecksum { .. } => {
                                SmartError::Checksum { retries: tries }
                            }
                            err => SmartError::Corrupt { what: "leaf", err },
                        });
                    }
                }
            }
        }
    }

    /// Pauses before a retry, exponentially longer each time (the waiter is created on the
    /// first call, so that the common path of no retry reads no clock). False once the
    /// deadline has passed.
    pub(crate) async fn back_off(&self, pace: &mut Option<Waiter>) -> bool {
        let now = self.ep.now_ns();
        let w = pace.get_or_insert_with(|| Waiter::new(self.cfg.lease, now));
        match w.observe(0, now) {
            Verdict::Wait(ns) => {
                self.ep.pause(ns).await;
                true
            }
            Verdict::Expired { .. } | Verdict::GiveUp { .. } => false,
        }
    }

    /// WRITEs several objects: one doorbell per memory node involved (up to
    /// [`MAX_CHAIN`] writes each), one memory node after the other.
    pub(crate) async fn write_all(&self, writes: &[(GlobalAddr, &[u8])]) -> Result<(), SmartError> {
        for &node in self.ep.nodes() {
            let mut mine = writes.iter().filter(|(a, _)| a.node() == node).peekable();
            while mine.peek().is_some() {
                let mut ops: heapless::Vec<Op<'_>, MAX_CHAIN> = heapless::Vec::new();
                while !ops.is_full()
                    && let Some(&(remote, local)) = mine.next()
                {
                    let _ = ops.push(Op::Write { remote, local });
                }
                self.ep.qp(node)?.post(&mut ops).await?;
            }
        }
        Ok(())
    }

    /// [`post_spread`] on this handle's endpoint.
    pub(crate) async fn post_spread(&self, ops: &mut [Op<'_>]) -> Result<(), SmartError> {
        Ok(post_spread(self.ep, ops).await?)
    }

    /// Allocates `size` bytes on the memory node at position `node_ix` of the endpoint.
    pub(crate) async fn alloc_at(
        &self,
        node_ix: usize,
        size: usize,
    ) -> Result<GlobalAddr, SmartError> {
        let node_ix = node_ix % self.allocs.len();
        let node = self.ep.nodes()[node_ix];
        if self.cfg.reclaim {
            let nodes = self.ep.nodes();
            let off = self.reclaim.borrow_mut().take(
                self.ep.now_ns(),
                node_ix,
                |a| nodes.iter().position(|n| *n == a.node()),
                size,
            );
            if let Some(off) = off {
                return Ok(GlobalAddr::new(node, off));
            }
        }
        let qp = self.ep.qp(node)?;
        Ok(self.allocs[node_ix].alloc(qp, size as u64).await?)
    }

    /// Allocates an internal node (round robin over memory nodes).
    pub(crate) async fn alloc_node(&self, ty: NodeType) -> Result<GlobalAddr, SmartError> {
        let ix = self.next_node.get();
        self.next_node.set(ix.wrapping_add(1));
        self.alloc_at(ix, ty.bytes()).await
    }

    /// Allocates a leaf for `key` (placed by key hash).
    pub(crate) async fn alloc_leaf(
        &self,
        key: &[u8],
        bytes: usize,
    ) -> Result<GlobalAddr, SmartError> {
        self.alloc_at(super::local::hash_key(key) as usize, bytes)
            .await
    }

    /// Retires an object this client just unlinked (see `reclaim.rs`): reused after the
    /// grace period. Without reclamation it is left where it is.
    pub(crate) fn retire(&self, addr: GlobalAddr, size: usize) {
        if self.cfg.reclaim {
            self.reclaim
                .borrow_mut()
                .retire(self.ep.now_ns(), addr, size);
        }
    }

    /// True when the attempt that began at `t0` is too old to act on what it read (see
    /// `reclaim.rs`): the caller restarts from the root.
    pub(crate) fn stale(&self, t0: u64) -> bool {
        if !self.cfg.reclaim {
            return false;
        }
        let old = self.ep.now_ns().saturating_sub(t0) >= self.timing.attempt_ns;
        if old {
            super::bump(&self.stats.stale_attempts);
        }
        old
    }

    /// Returns an object that was never linked into the tree: with reclamation, to the
    /// lists retired objects are reused from (`reclaim.rs`: `Reclaim::release`).
    pub(crate) fn free(&self, addr: GlobalAddr, size: usize) {
        if let Some(ix) = self.ep.nodes().iter().position(|n| *n == addr.node()) {
            if self.cfg.reclaim {
                self.reclaim.borrow_mut().release(ix, addr.offset(), size);
            } else {
                self.allocs[ix].free(addr, size as u64);
            }
        }
    }
}

/// Posts `ops`, grouped by memory node (the ops of one node adjacent), as one doorbell
/// per memory node, all in flight together: one round trip for the lot instead of one
/// per memory node. Resolves when every op has completed, with the first error.
pub(crate) async fn post_spread<E: Endpoint>(
    ep: &E,
    ops: &mut [Op<'_>],
) -> Result<(), FabricError> {
    let mut rest = ops;
    while !rest.is_empty() {
        let mut futs: heapless::Vec<Option<_>, SPREAD> = heapless::Vec::new();
        while !futs.is_full() && !rest.is_empty() {
            let node = rest[0].remote().map_or(0, |a| a.node());
            let run = rest
                .iter()
                .take_while(|o| o.remote().map_or(0, |a| a.node()) == node)
                .count()
                .min(MAX_CHAIN);
            let (head, tail) = core::mem::take(&mut rest).split_at_mut(run);
            rest = tail;
            let _ = futs.push(Some(ep.qp(node)?.post(head)));
        }
        let mut futs = core::pin::pin!(futs);
        let mut first: Result<(), FabricError> = Ok(());
        core::future::poll_fn(|cx| {
            // SAFETY: the vector is pinned for the rest of this function and is never
            // moved, grown or shrunk; each element is only reached through a `Pin`.
            let v = unsafe { futs.as_mut().get_unchecked_mut() };
            let mut pending = false;
            for f in v.iter_mut() {
                // SAFETY: `f` lives in the pinned vector (see above) and is not moved.
                let mut f = unsafe { core::pin::Pin::new_unchecked(f) };
                let Some(fut) = f.as_mut().as_pin_mut() else {
                    continue;
                };
                match fut.poll(cx) {
                    core::task::Poll::Ready(r) => {
                        if let (Ok(()), Err(e)) = (&first, r) {
                            first = Err(e);
                        }
                        f.set(None);
                    }
                    core::task::Poll::Pending => pending = true,
                }
            }
            if pending {
                core::task::Poll::Pending
            } else {
                core::task::Poll::Ready(())
            }
        })
        .await;
        first?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;
    use remora_layouts::smart::leaf_bytes;
    use std_alloc::rc::Rc;

    #[test]
    fn leaf_checksum_catches_every_single_word_change() {
        let n = leaf_bytes(8, 16);
        let mut buf = [0u8; 128];
        build_leaf(
            &mut buf[..n],
            0,
            LeafStatus::live(true),
            b"kkkkkkkk",
            b"value",
            16,
        )
        .unwrap();
        assert!(check_leaf(&buf[..n]).is_ok());
        // Flip a byte in each checksummed word (meta excluded: it has its own magic).
        for at in (32..n - 8).step_by(8) {
            let mut b = buf;
            b[at] ^= 0x5a;
            assert!(check_leaf(&b[..n]).is_err(), "word at {at}");
        }
        // The valid bit is covered too.
        let mut b = buf;
        b[8] = 0;
        assert!(check_leaf(&b[..n]).is_err());
    }

    /// Memory nodes that note how many posts are in flight at once (each completes after
    /// one yield, with every byte read equal to its node's number).
    struct Spread {
        nodes: [remora_layouts::NodeId; 4],
        qps: [SpreadQp; 4],
        /// Posts in flight now, and the most at once.
        seen: Rc<[Cell<usize>; 2]>,
    }

    struct SpreadQp {
        node: remora_layouts::NodeId,
        seen: Rc<[Cell<usize>; 2]>,
        counters: crate::counters::Counters,
    }

    impl QueuePair for SpreadQp {
        fn peer(&self) -> remora_layouts::NodeId {
            self.node
        }
        async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
            let [now, most] = &*self.seen;
            now.set(now.get() + 1);
            most.set(most.get().max(now.get()));
            crate::block_on::yield_now().await;
            for op in ops.iter_mut() {
                match op {
                    Op::Read { remote, local } if remote.node() == self.node => {
                        local.fill(self.node as u8)
                    }
                    _ => {
                        return Err(FabricError::Unsupported {
                            what: "not a READ here",
                        });
                    }
                }
            }
            now.set(now.get() - 1);
            Ok(())
        }
        async fn recv<'a>(&'a self, _: &'a mut [u8]) -> Result<crate::fabric::Recv, FabricError> {
            Err(FabricError::Unsupported { what: "recv" })
        }
        fn try_recv(&self, _: &mut [u8]) -> Result<Option<crate::fabric::Recv>, FabricError> {
            Err(FabricError::Unsupported { what: "recv" })
        }
        fn max_message(&self) -> usize {
            0
        }
        fn counters(&self) -> &crate::counters::Counters {
            &self.counters
        }
        fn is_broken(&self) -> bool {
            false
        }
    }

    impl Endpoint for Spread {
        type Qp = SpreadQp;
        fn qp(&self, node: remora_layouts::NodeId) -> Result<&SpreadQp, FabricError> {
            self.qps
                .get(node as usize)
                .ok_or(FabricError::UnknownNode { node })
        }
        fn nodes(&self) -> &[remora_layouts::NodeId] {
            &self.nodes
        }
    }

    #[test]
    fn a_spread_post_has_every_memory_node_in_flight_at_once() {
        let seen = Rc::new([Cell::new(0), Cell::new(0)]);
        let ep = Spread {
            nodes: [0, 1, 2, 3],
            qps: core::array::from_fn(|i| SpreadQp {
                node: i as u16,
                seen: seen.clone(),
                counters: crate::counters::Counters::new(),
            }),
            seen,
        };
        let [now, most] = &*ep.seen;
        // Two READs per memory node, grouped by node.
        let mut bufs = [[0xffu8; 16]; 8];
        {
            let mut ops: heapless::Vec<Op<'_>, 8> = heapless::Vec::new();
            for (i, b) in bufs.iter_mut().enumerate() {
                let remote = GlobalAddr::new((i / 2) as u16, 4096);
                let _ = ops.push(Op::Read { remote, local: b });
            }
            crate::block_on::block_on(post_spread(&ep, &mut ops)).unwrap();
        }
        assert_eq!(
            most.get(),
            4,
            "posts to different memory nodes waited in turn"
        );
        assert_eq!(now.get(), 0);
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(*b, [(i / 2) as u8; 16], "READ {i} landed");
        }
        // An op for a node the endpoint does not reach: an error, nothing left in flight.
        let mut b = [0u8; 8];
        let mut ops = [Op::Read {
            remote: GlobalAddr::new(9, 0),
            local: &mut b,
        }];
        assert!(crate::block_on::block_on(post_spread(&ep, &mut ops)).is_err());
        assert_eq!(now.get(), 0);
    }

    #[test]
    fn find_in_small_and_large_nodes() {
        let a = GlobalAddr::new(0, 4096);
        let mut img = NodeImg {
            addr: a,
            rev: 0,
            header: Header::new(1, NodeType::N4, &[]).unwrap(),
            slots: [Slot::EMPTY; 256],
            t0: 0,
        };
        img.slots[0] = Slot::leaf(5, a, 64).unwrap();
        img.slots[1] = Slot::leaf(9, a, 64).unwrap();
        assert_eq!(
            img.find(9),
            Find::Match {
                idx: 1,
                slot: img.slots[1]
            }
        );
        assert_eq!(
            img.find(7),
            Find::Absent {
                free: Some(2),
                frozen: false
            }
        );
        img.slots[2] = Slot::leaf(1, a, 64).unwrap().frozen(true);
        img.slots[3] = Slot::leaf(2, a, 64).unwrap();
        assert_eq!(
            img.find(7),
            Find::Absent {
                free: None,
                frozen: true
            }
        );
        img.header = Header::new(1, NodeType::N256, &[]).unwrap();
        img.slots = [Slot::EMPTY; 256];
        img.slots[7] = Slot::leaf(7, a, 64).unwrap();
        assert_eq!(
            img.find(7),
            Find::Match {
                idx: 7,
                slot: img.slots[7]
            }
        );
        assert_eq!(
            img.find(8),
            Find::Absent {
                free: Some(8),
                frozen: false
            }
        );
    }
}

//! A fake verbs device: the verbs fabric's own data path (work-request chains, selective
//! signaling, slots, staging, completion dispatch) over a device that completes every work
//! request in memory, at post time, on the calling thread (its send completions show one
//! poll late, as a NIC's arrive a round trip after the doorbell: see `FakeCq::delayed`). READ and WRITE are copies,
//! CMP_AND_SWP and FETCH_AND_ADD are atomics on the node's region, SEND and WRITE_WITH_IMM
//! go to the node's service ([`Handler`]) at once and its replies land in the client's posted
//! receives.
//!
//! It stands in for a NIC where there is none, so that the client's CPU per operation, its
//! CQ polls and its copies can be measured (`remora perf --fabric verbs --fake`): the
//! queue pair code is the same as over rdma-core, only `ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq` and `ibv_modify_qp` are these functions. One thread: a node and its
//! endpoints are `Rc`-shared, not `Send`.
//!
//! Like a NIC it checks remote keys and bounds (a remote access error, then every later
//! request flushed), answers a SEND with no posted receive with an RNR error, and moves to the
//! error state on any failure. Unlike a NIC it does not check local keys.
use super::arena::Arena;
use super::error::VerbsError;
use super::sys;
use remora_core::fabric::{Recv, RecvKind};
use remora_core::server::{Handler, Replies};
use remora_layouts::NodeId;
use remora_layouts::region::RegionHeader;
use remora_poller::soft::words::{Persist, WordRegion};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The remote key of every fake node's region.
pub(crate) const FAKE_RKEY: u32 = 0x5eed;

/// A completion queue in memory (a ring allocated once).
pub(crate) struct FakeCq {
    ring: RefCell<Box<[sys::ibv_wc]>>,
    head: Cell<usize>,
    len: Cell<usize>,
    /// Completions a poll may reap (see [`FakeCq::delayed`]); `usize::MAX`: all of them.
    seen: Cell<usize>,
    delayed: bool,
    /// Armed for one event (`ibv_req_notify_cq`): the next push raises it.
    armed: Cell<bool>,
    /// An event was raised and not yet taken (the fake completion channel: `idle.rs`).
    event: Cell<bool>,
}

impl FakeCq {
    /// A queue whose completions are reaped by the first poll after their push.
    pub(crate) fn new(cap: usize) -> FakeCq {
        FakeCq {
            ring: RefCell::new(vec![sys::ibv_wc::default(); cap.max(1)].into_boxed_slice()),
            head: Cell::new(0),
            len: Cell::new(0),
            seen: Cell::new(usize::MAX),
            delayed: false,
            armed: Cell::new(false),
            event: Cell::new(false),
        }
    }

    /// `ibv_req_notify_cq`: the next completion raises one event.
    pub(crate) fn arm(&self) {
        self.armed.set(true);
    }

    /// Takes the raised event, if any (`ibv_get_cq_event`), and disarms.
    pub(crate) fn take_event(&self) -> bool {
        self.armed.set(false);
        self.event.replace(false)
    }

    /// A queue whose completions show one poll late: a poll reaps only what was there when
    /// the previous poll returned. A NIC's completion is never there at the first poll after
    /// the doorbell (it takes a round trip), so a post's waiter polls at least once in vain
    /// and the executor moves on to other coroutines, as it does over a NIC; a device that
    /// completed within the doorbell would run a thread's coroutines one after the other.
    pub(crate) fn delayed(cap: usize) -> FakeCq {
        FakeCq {
            seen: Cell::new(0),
            delayed: true,
            ..FakeCq::new(cap)
        }
    }

    /// Adds a completion; a full queue drops it (a NIC would raise a CQ overrun). Only the
    /// fields a completion of this device sets are written (the others stay zero), each as
    /// its own store, and `poll` copies them the same way: a whole completion read back
    /// with wide loads right after its narrow stores stalled store forwarding.
    fn push(&self, wr_id: u64, status: sys::ibv_wc_status, opcode: sys::ibv_wc_opcode, len: u32) {
        let mut r = self.ring.borrow_mut();
        let (cap, n) = (r.len(), self.len.get());
        if n >= cap {
            return;
        }
        let mut at = self.head.get() + n;
        if at >= cap {
            at -= cap;
        }
        let wc = &mut r[at];
        wc.wr_id = wr_id;
        wc.status = status;
        wc.opcode = opcode;
        wc.byte_len = len;
        self.len.set(n + 1);
        if self.armed.replace(false) {
            self.event.set(true);
        }
    }

    /// `ibv_poll_cq`: up to `n` completions into `out`; how many.
    pub(crate) fn poll(&self, n: usize, out: *mut sys::ibv_wc) -> i32 {
        let r = self.ring.borrow();
        let k = n.min(self.len.get()).min(self.seen.get());
        let cap = r.len();
        let mut head = self.head.get();
        for i in 0..k {
            let wc = &r[head];
            // SAFETY: the caller gives room for `n >= k` completions at `out`; every field
            // is written (the ones this device never sets as zero).
            unsafe {
                let o = out.add(i);
                (&raw mut (*o).wr_id).write(wc.wr_id);
                (&raw mut (*o).status).write(wc.status);
                (&raw mut (*o).opcode).write(wc.opcode);
                (&raw mut (*o).vendor_err).write(0);
                (&raw mut (*o).byte_len).write(wc.byte_len);
                (&raw mut (*o).__bindgen_anon_1).write(Default::default());
                (&raw mut (*o).qp_num).write(0);
                (&raw mut (*o).src_qp).write(0);
                (&raw mut (*o).wc_flags).write(0);
                (&raw mut (*o).pkey_index).write(0);
                (&raw mut (*o).slid).write(0);
                (&raw mut (*o).sl).write(0);
                (&raw mut (*o).dlid_path_bits).write(0);
            }
            head += 1;
            if head == cap {
                head = 0;
            }
        }
        self.head.set(head);
        self.len.set(self.len.get() - k);
        if self.delayed {
            self.seen.set(self.len.get());
        }
        k as i32
    }
}

/// A memory node in this process: a region with its header, and a service.
pub struct FakeNode {
    node: NodeId,
    region: Arena,
    len: u64,
    /// Device memory (host memory standing in for the NIC's, as on a NIC without any).
    dm: Arena,
    dm_len: u64,
    handler: RefCell<Box<dyn Handler>>,
    replies: RefCell<Replies>,
    conns: Cell<usize>,
    /// Nanoseconds (of `clock::now_ns`) a reply takes to arrive (0: at once, in the post).
    reply_delay_ns: Cell<u64>,
}

impl FakeNode {
    /// A node of `region_len` bytes (its header written, as `remora memnode` does) and
    /// `dm_len` bytes of device memory, serving `handler`.
    pub fn new(
        node: NodeId,
        region_len: u64,
        chunk_size: u64,
        dm_len: u64,
        handler: Box<dyn Handler>,
    ) -> Result<Rc<FakeNode>, VerbsError> {
        let header = RegionHeader::new(region_len, chunk_size, dm_len).map_err(|e| {
            VerbsError::BadAddress {
                addr: "fake device".into(),
                why: format!("bad region geometry: {e:?}"),
            }
        })?;
        let region = Arena::new(region_len as usize)?;
        let bytes = header.encode();
        // SAFETY: the fresh arena holds region_len >= the header's bytes; nothing else uses it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), region.as_ptr(), bytes.len()) };
        Ok(Rc::new(FakeNode {
            node,
            region,
            len: region_len,
            dm: Arena::new(dm_len as usize)?,
            dm_len,
            handler: RefCell::new(handler),
            replies: RefCell::new(Replies::new()),
            conns: Cell::new(0),
            reply_delay_ns: Cell::new(0),
        }))
    }

    /// Makes the service's replies arrive `ns` nanoseconds after the request (a slow or
    /// busy server): their receive completions show only then, as a NIC's would, and raise
    /// an event on an armed queue (see [`FakeQp::wait_due`]).
    pub fn set_reply_delay_ns(&self, ns: u64) {
        self.reply_delay_ns.set(ns);
    }

    /// The node's id (what its welcome would carry).
    pub(crate) fn node(&self) -> NodeId {
        self.node
    }

    /// The region's (virtual address, length): what a client's welcome would carry.
    pub(crate) fn region(&self) -> (u64, u64) {
        (self.region.as_ptr() as u64, self.len)
    }

    /// The device memory's (virtual address, length).
    pub(crate) fn dm(&self) -> (u64, u64) {
        (self.dm.as_ptr() as u64, self.dm_len)
    }

    fn words(&self) -> WordRegion<'_> {
        // SAFETY: the arena stays mapped while `self` lives, which outlives the borrow.
        unsafe { WordRegion::new(self.region.as_ptr(), self.len, self.node, Persist::Nothing) }
    }

    /// The region address of `[raddr, raddr + len)` under `rkey`, if the key and bounds hold.
    fn at(&self, raddr: u64, rkey: u32, len: usize) -> Option<*mut u8> {
        if rkey != FAKE_RKEY {
            return None;
        }
        [(&self.region, self.len), (&self.dm, self.dm_len)]
            .into_iter()
            .find_map(|(a, alen)| {
                let off = raddr.checked_sub(a.as_ptr() as u64)?;
                let end = off.checked_add(len as u64)?;
                (end <= alen).then(|| {
                    // SAFETY: off + len <= alen: inside the arena.
                    unsafe { a.as_ptr().add(off as usize) }
                })
            })
    }
}

/// One posted receive: (wr_id, buffer, bytes).
type Posted = (u64, u64, u32);

/// A queue pair's device side.
pub(crate) struct FakeQp {
    node: Rc<FakeNode>,
    conn: usize,
    recvs: RefCell<VecDeque<Posted>>,
    pub(crate) recv_cq: FakeCq,
    broken: Cell<bool>,
    /// Receive completions not yet arrived: (due time, wr_id, bytes), in due order.
    late: RefCell<VecDeque<(u64, u64, u32)>>,
}

impl FakeQp {
    /// Connects to `node` as a new client (the node's service sees a new connection).
    pub(crate) fn connect(node: &Rc<FakeNode>, rq_depth: usize) -> FakeQp {
        let conn = node.conns.get();
        node.conns.set(conn + 1);
        node.handler
            .borrow_mut()
            .on_connect(&node.words(), conn, conn as u32 + 1);
        FakeQp {
            node: node.clone(),
            conn,
            recvs: RefCell::new(VecDeque::with_capacity(rq_depth)),
            recv_cq: FakeCq::new(rq_depth + 1),
            broken: Cell::new(false),
            late: RefCell::new(VecDeque::new()),
        }
    }

    /// Moves the late receive completions due by `now` to the receive queue; the next one's
    /// due time, if any is left.
    pub(crate) fn deliver_due(&self, now: u64) -> Option<u64> {
        let mut late = self.late.borrow_mut();
        while let Some(&(due, id, len)) = late.front() {
            if due > now {
                return Some(due);
            }
            late.pop_front();
            self.recv_cq
                .push(id, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV, len);
        }
        None
    }

    /// `ibv_poll_cq` on the receive queue (late completions due now shown first).
    #[inline]
    pub(crate) fn poll_recv(&self, wc: *mut sys::ibv_wc) -> i32 {
        if !self.late.borrow().is_empty() {
            self.deliver_due(super::clock::now_ns());
        }
        self.recv_cq.poll(1, wc)
    }

    /// The due time of the next late receive completion, if any.
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.late.borrow().front().map(|l| l.0)
    }

    /// `ibv_post_recv`.
    pub(crate) fn post_recv(&self, mut wr: *mut sys::ibv_recv_wr) -> i32 {
        let mut q = self.recvs.borrow_mut();
        while !wr.is_null() {
            // SAFETY: the caller's chain is valid for the call.
            let w = unsafe { &*wr };
            // SAFETY: one scatter entry per receive (the queue pair's own).
            let sge = unsafe { &*w.sg_list };
            if self.broken.get() {
                self.recv_cq
                    .push(w.wr_id, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RECV, 0);
            } else {
                q.push_back((w.wr_id, sge.addr, sge.length));
            }
            wr = w.next;
        }
        0
    }

    /// `ibv_modify_qp` to the error state: posted receives are flushed.
    pub(crate) fn to_error(&self) {
        self.broken.set(true);
        for (id, _, _) in self.recvs.borrow_mut().drain(..) {
            self.recv_cq
                .push(id, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RECV, 0);
        }
    }

    /// `ibv_post_send`: executes the chain now; completions go to `cq`.
    pub(crate) fn post_send(&self, mut wr: *mut sys::ibv_send_wr, cq: &FakeCq) -> i32 {
        while !wr.is_null() {
            // SAFETY: the caller's chain and scatter lists are valid for the call.
            let w = unsafe { &*wr };
            let (status, op) = if self.broken.get() {
                (sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_SEND)
            } else {
                self.execute(w)
            };
            if status != sys::IBV_WC_SUCCESS {
                self.to_error();
            }
            if status != sys::IBV_WC_SUCCESS || w.send_flags & sys::IBV_SEND_SIGNALED != 0 {
                cq.push(w.wr_id, status, op, 0);
            }
            wr = w.next;
        }
        0
    }

    fn execute(&self, w: &sys::ibv_send_wr) -> (sys::ibv_wc_status, sys::ibv_wc_opcode) {
        let (laddr, len) = if w.num_sge > 0 {
            // SAFETY: num_sge > 0: one valid scatter entry.
            let s = unsafe { &*w.sg_list };
            (s.addr as *mut u8, s.length as usize)
        } else {
            (std::ptr::null_mut(), 0)
        };
        const ACCESS: sys::ibv_wc_status = sys::IBV_WC_REM_ACCESS_ERR;
        let node = &*self.node;
        match w.opcode {
            sys::IBV_WR_RDMA_READ | sys::IBV_WR_RDMA_WRITE | sys::IBV_WR_RDMA_WRITE_WITH_IMM => {
                // SAFETY: the rdma member for these opcodes.
                let r = unsafe { w.wr.rdma };
                let Some(p) = node.at(r.remote_addr, r.rkey, len) else {
                    return (ACCESS, sys::IBV_WC_RDMA_WRITE);
                };
                if w.opcode == sys::IBV_WR_RDMA_READ {
                    // SAFETY: `len` bytes inside the region and in the caller's registered
                    // (or staging) buffer; distinct memory.
                    unsafe { std::ptr::copy_nonoverlapping(p, laddr, len) };
                    return (sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ);
                }
                // SAFETY: as above, the other way (inline data is read from the caller's
                // buffer, valid for the call).
                unsafe { std::ptr::copy_nonoverlapping(laddr, p, len) };
                if w.opcode == sys::IBV_WR_RDMA_WRITE {
                    return (sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE);
                }
                // SAFETY: the immediate member for WRITE_WITH_IMM.
                let imm = u32::from_be(unsafe { w.__bindgen_anon_1.imm_data });
                let recv = Recv {
                    kind: RecvKind::WriteImm,
                    len: len as u32,
                    imm: Some(imm),
                };
                (self.serve(recv, &[]), sys::IBV_WC_RDMA_WRITE)
            }
            sys::IBV_WR_ATOMIC_CMP_AND_SWP | sys::IBV_WR_ATOMIC_FETCH_AND_ADD => {
                // SAFETY: the atomic member for these opcodes.
                let a = unsafe { w.wr.atomic };
                let Some(p) = node.at(a.remote_addr, a.rkey, 8) else {
                    return (ACCESS, sys::IBV_WC_COMP_SWAP);
                };
                if !(p as usize).is_multiple_of(8) || len < 8 {
                    return (sys::IBV_WC_REM_INV_REQ_ERR, sys::IBV_WC_COMP_SWAP);
                }
                // SAFETY: an aligned word inside the region, accessed atomically.
                let word = unsafe { &*p.cast::<AtomicU64>() };
                let (old, op) = if w.opcode == sys::IBV_WR_ATOMIC_CMP_AND_SWP {
                    let old = match word.compare_exchange(
                        a.compare_add,
                        a.swap,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(v) | Err(v) => v,
                    };
                    (old, sys::IBV_WC_COMP_SWAP)
                } else {
                    (
                        word.fetch_add(a.compare_add, Ordering::SeqCst),
                        sys::IBV_WC_FETCH_ADD,
                    )
                };
                // SAFETY: the result buffer holds 8 bytes (checked above).
                unsafe { laddr.cast::<u64>().write_unaligned(old) };
                (sys::IBV_WC_SUCCESS, op)
            }
            sys::IBV_WR_SEND => {
                let msg = if len == 0 {
                    &[][..]
                } else {
                    // SAFETY: the SEND's `len` bytes, valid for the call.
                    unsafe { std::slice::from_raw_parts(laddr, len) }
                };
                let recv = Recv {
                    kind: RecvKind::Send,
                    len: len as u32,
                    imm: None,
                };
                (self.serve(recv, msg), sys::IBV_WC_SEND)
            }
            _ => (sys::IBV_WC_REM_INV_REQ_ERR, sys::IBV_WC_SEND),
        }
    }

    /// Hands a message to the node's service and delivers its replies to this queue pair's
    /// posted receives (replies to other connections are dropped: one client per node here).
    fn serve(&self, recv: Recv, msg: &[u8]) -> sys::ibv_wc_status {
        let node = &*self.node;
        let mut replies = node.replies.borrow_mut();
        replies.clear();
        let served =
            node.handler
                .borrow_mut()
                .on_message(&node.words(), self.conn, recv, msg, &mut replies);
        if served.is_err() {
            return sys::IBV_WC_REM_OP_ERR;
        }
        for m in replies.iter() {
            let Some((id, addr, cap)) = self.recvs.borrow_mut().pop_front() else {
                return sys::IBV_WC_RNR_RETRY_EXC_ERR;
            };
            if m.len() > cap as usize {
                self.recv_cq
                    .push(id, sys::IBV_WC_LOC_LEN_ERR, sys::IBV_WC_RECV, 0);
                continue;
            }
            // SAFETY: the posted receive buffer holds `cap >= m.len()` bytes and the client
            // does not touch it until it reaps this completion.
            unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), addr as *mut u8, m.len()) };
            let delay = node.reply_delay_ns.get();
            if delay > 0 {
                let due = super::clock::now_ns() + delay;
                self.late.borrow_mut().push_back((due, id, m.len() as u32));
                continue;
            }
            self.recv_cq
                .push(id, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV, m.len() as u32);
        }
        sys::IBV_WC_SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::FakeEndpoint;
    use remora_core::block_on::block_on;
    use remora_core::fabric::{Endpoint, FabricError, QueuePair};
    use remora_core::server::Echo;
    use remora_layouts::GlobalAddr;
    use remora_poller::executor::run_coroutines;
    use std::future::Future;

    fn node(id: NodeId) -> Rc<FakeNode> {
        FakeNode::new(id, 4 << 20, 1 << 20, 64 << 10, Box::new(Echo)).unwrap()
    }

    #[test]
    fn verbs_complete_in_memory_and_frames_are_read_in_place() {
        let ep = FakeEndpoint::connect(&[node(0), node(1)]).unwrap();
        // Coroutines on both queue pairs, sharing the thread's completion queue.
        let coros = (0..8u64)
            .map(|c| {
                let ep = &ep;
                async move {
                    let n = (c % 2) as NodeId;
                    let qp = ep.qp(n).unwrap();
                    let at = GlobalAddr::new(n, 8192 + 64 * c);
                    let mut img = [0u8; 64];
                    for round in 0..50u64 {
                        let data = [(c + round) as u8; 64];
                        qp.write(at, &data).await.unwrap();
                        qp.read(at, &mut img).await.unwrap();
                        assert_eq!(img, data);
                        let old = qp.faa(at, 1).await.unwrap();
                        assert_eq!(old, u64::from_ne_bytes(data[..8].try_into().unwrap()));
                        assert_eq!(qp.cas(at, old + 1, 5).await.unwrap(), old + 1);
                    }
                }
            })
            .collect();
        run_coroutines(coros);
        let s = ep.stats();
        assert_eq!(s.bounced_read + s.bounced_atomic, 0, "{s}");
        assert!(s.in_place >= 8 * 50 * (64 + 16), "{s}");
        assert!(s.completions >= 8 * 50 * 4, "{s}");
        assert!(s.polls_per_completion() <= 1.2, "{s}");
        // A heap buffer is outside the registered memory: bounced.
        let qp = ep.qp(0).unwrap();
        let mut heap = vec![0u8; 64];
        block_on(qp.read(GlobalAddr::new(0, 8192), &mut heap)).unwrap();
        assert_eq!(ep.stats().bounced_read, 64);
    }

    /// A completion wakes the coroutine whose batch it finishes and no other: a waiting
    /// coroutine is not polled round after round to look, so the executor's polls per
    /// completion stay near one (each coroutine's poll that finds its READ done posts the
    /// next): the executor's progress hook drains the queue, no post wakes itself.
    #[test]
    fn a_completion_wakes_only_its_coroutine() {
        let ep = FakeEndpoint::connect(&[node(0), node(1)]).unwrap();
        let polls = Cell::new(0u64);
        const READS: u64 = 400;
        let before = ep.stats();
        let coros = (0..8u64)
            .map(|c| {
                let (ep, polls) = (&ep, &polls);
                let reads = async move {
                    let n = (c % 2) as NodeId;
                    let qp = ep.qp(n).unwrap();
                    let mut img = [0u8; 64];
                    for _ in 0..READS {
                        qp.read(GlobalAddr::new(n, 8192 + 64 * c), &mut img)
                            .await
                            .unwrap();
                    }
                };
                async move {
                    let mut reads = std::pin::pin!(reads);
                    std::future::poll_fn(|cx| {
                        polls.set(polls.get() + 1);
                        reads.as_mut().poll(cx)
                    })
                    .await
                }
            })
            .collect();
        run_coroutines(coros);
        let d = ep.stats() - before;
        assert_eq!(d.completions, 8 * READS, "{d}");
        let per = polls.get() as f64 / d.completions as f64;
        // Every coroutine polled every round (as when each waiting post woke itself) made
        // about 3 polls per completion here.
        assert!(per <= 1.5, "{per:.2} coroutine polls per completion ({d})");
        assert!(d.polls_per_completion() <= 1.2, "{d}");
    }

    /// A spin `block_on` nested in a coroutine, while another coroutine's post waits and
    /// the executor cannot run its round (so nobody runs the progress hook), still
    /// finishes: its post rings and drains the queue itself.
    #[test]
    fn a_post_whose_executor_cannot_run_polls_for_itself() {
        let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
        let qp = ep.qp(0).unwrap();
        let at = GlobalAddr::new(0, 8192);
        block_on(qp.write(at, &[3u8; 8])).unwrap();
        let coros: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + '_>>> = vec![
            Box::pin(async move {
                let mut b = [0u8; 8];
                qp.read(at, &mut b).await.unwrap();
                assert_eq!(b, [3u8; 8]);
            }),
            Box::pin(async move {
                let mut b = [0u8; 8];
                block_on(qp.read(at, &mut b)).unwrap();
                assert_eq!(b, [3u8; 8]);
            }),
        ];
        run_coroutines(coros);
    }

    /// Under an executor that runs the progress hook, no verbs future wakes itself: one
    /// coroutine making `READS` READs one after the other is polled once to start and once
    /// per completion (a post that woke itself each round to poll the queue was polled
    /// about twice per completion here), and outside any executor the thread has no hook
    /// left registered.
    #[test]
    fn a_waiting_post_is_polled_only_when_its_batch_completes() {
        let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
        let polls = Cell::new(0u64);
        const READS: u64 = 300;
        let qp = ep.qp(0).unwrap();
        let reads = async {
            let mut img = [0u8; 64];
            for _ in 0..READS {
                qp.read(GlobalAddr::new(0, 8192), &mut img).await.unwrap();
            }
        };
        let mut reads = std::pin::pin!(reads);
        run_coroutines(vec![std::future::poll_fn(|cx| {
            polls.set(polls.get() + 1);
            reads.as_mut().poll(cx)
        })]);
        assert_eq!(polls.get(), READS + 1);
        assert!(!remora_poller::progress::run(), "a hook left registered");
    }

    /// A receive wait is woken by the hook when its message arrives, not polled each round:
    /// while a sibling makes 200 READs, the coroutine waiting for a reply is polled a
    /// handful of times (it was polled every round, ~400 times, when it woke itself).
    #[test]
    fn a_receive_wait_is_polled_only_when_its_message_arrives() {
        let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
        let qp = ep.qp(0).unwrap();
        let (polls, reads_done) = (Cell::new(0u64), Cell::new(false));
        let waiter = async {
            let mut reply = [0u8; 64];
            let r = qp.recv(&mut reply).await.unwrap();
            assert!(reads_done.get(), "a reply before the request");
            assert_eq!(reply[..r.len as usize], [7u8; 24]);
        };
        let mut waiter = std::pin::pin!(waiter);
        let counted = std::future::poll_fn(|cx| {
            polls.set(polls.get() + 1);
            waiter.as_mut().poll(cx)
        });
        let reader = async {
            let mut img = [0u8; 64];
            for _ in 0..200 {
                qp.read(GlobalAddr::new(0, 8192), &mut img).await.unwrap();
            }
            reads_done.set(true);
            qp.send(&[7u8; 24]).await.unwrap();
        };
        let coros: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + '_>>> =
            vec![Box::pin(counted), Box::pin(reader)];
        run_coroutines(coros);
        assert!(
            polls.get() <= 3,
            "{} polls of the receive wait",
            polls.get()
        );
        assert!(!remora_poller::progress::run(), "a hook left registered");
    }

    #[test]
    fn errors_break_the_queue_pair_like_a_nic() {
        let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
        let qp = ep.qp(0).unwrap();
        let mut b = [0u8; 8];
        let e = block_on(qp.read(GlobalAddr::new(0, 4 << 20), &mut b)).unwrap_err();
        assert!(matches!(e, FabricError::RemoteAccess { .. }), "{e:?}");
        assert!(qp.is_broken());
        let e = block_on(qp.read(GlobalAddr::new(0, 0), &mut b)).unwrap_err();
        assert_eq!(e, FabricError::Flushed);
    }

    #[test]
    fn requests_after_the_peer_went_away_report_that_not_a_flush() {
        let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
        let qp = ep.qp(0).unwrap();
        // The completion a NIC gives a request to a dead memory node: every request after it
        // is flushed, and whichever coroutine asks first must hear why.
        qp.note_failure(sys::IBV_WC_RETRY_EXC_ERR);
        let mut b = [0u8; 8];
        let e = block_on(qp.read(GlobalAddr::new(0, 0), &mut b)).unwrap_err();
        assert!(matches!(e, FabricError::RetryExceeded { .. }), "{e:?}");
        assert!(e.to_string().contains("does not answer"), "{e}");
    }

    #[test]
    fn sends_reach_the_service_and_replies_the_receives() {
        let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
        let qp = ep.qp(0).unwrap();
        let mut reply = [0u8; 64];
        for i in 0..200u8 {
            block_on(qp.send(&[i; 40])).unwrap();
            let r = block_on(qp.recv(&mut reply)).unwrap();
            assert_eq!(r.len, 40);
            assert_eq!(reply[..40], [i; 40]);
        }
    }

    #[test]
    fn one_sided_clients_get_no_staging_or_receive_buffers() {
        let ep = FakeEndpoint::connect(&[node(0)]).unwrap();
        let qp = ep.qp(0).unwrap();
        assert_eq!(qp.buffers_mapped(), (false, false), "nothing at connect");
        let at = GlobalAddr::new(0, 8192);
        // READs, WRITEs and atomics in registered memory (a coroutine frame, as the indexes
        // run): in place, so neither buffer is ever mapped.
        let coros = (0..2u64)
            .map(|c| async move {
                let mut img = [0u8; 512];
                qp.write(at, &[c as u8; 512]).await.unwrap();
                qp.read(at, &mut img).await.unwrap();
                qp.faa(at, 1).await.unwrap();
                qp.cas(at, 0, 1).await.unwrap();
            })
            .collect();
        run_coroutines(coros);
        assert_eq!(qp.buffers_mapped(), (false, false), "{}", ep.stats());
        assert!(qp.staging_pages().is_none());
        // A buffer the NIC cannot reach is bounced: staging is mapped then, not receives.
        let mut heap = vec![0u8; 512];
        block_on(qp.read(at, &mut heap)).unwrap();
        assert_eq!(qp.buffers_mapped(), (true, false));
        // The first message posts the receives its reply needs.
        block_on(qp.send(&[9; 16])).unwrap();
        assert_eq!(qp.buffers_mapped(), (true, true));
        let mut reply = [0u8; 64];
        assert_eq!(block_on(qp.recv(&mut reply)).unwrap().len, 16);
        assert_eq!(reply[..16], [9; 16]);
    }

    /// Loads `keys` keys into `idx` by upserts, looks each up and scans from the first, on 4
    /// coroutines placed in the endpoint's frames (as the bench runs them); returns the data
    /// path's figures since the endpoint connected (the index's open included).
    fn run_on<I: remora_core::index::KvIndex>(
        ep: &FakeEndpoint,
        idx: &I,
        keys: u64,
    ) -> super::super::VerbsStats {
        let coros = (0..4u64)
            .map(|c| async move {
                let value = [c as u8 + 1; 8];
                let key = |i: u64| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).to_be_bytes();
                let mut i = c;
                while i < keys {
                    idx.upsert(&key(i), &value).await.unwrap();
                    i += 4;
                }
                let mut out = [0u8; 8];
                let mut i = c;
                while i < keys {
                    assert_eq!(idx.get(&key(i), &mut out).await.unwrap(), Some(8));
                    assert_eq!(out, value);
                    i += 4;
                }
                let mut seen = 0;
                let n = idx
                    .scan(&1u64.to_be_bytes(), 100, &mut |_, _| seen += 1)
                    .await
                    .unwrap();
                assert!(n == 100 && seen == 100, "{n} {seen}");
            })
            .collect();
        run_coroutines(coros);
        let d = ep.stats();
        assert!(d.in_place > 0, "{d}");
        d
    }

    #[test]
    fn sherman_opens_loads_looks_up_and_scans_in_place() {
        use remora_core::sherman::{Sherman, ShermanConfig, ShermanNode};
        use std::sync::Arc;
        let n = FakeNode::new(0, 64 << 20, 1 << 20, 256 << 10, Box::new(Echo)).unwrap();
        let ep = FakeEndpoint::connect(&[n]).unwrap();
        let cfg = ShermanConfig::default();
        let node = Arc::new(ShermanNode::new(&cfg));
        let tree = run_coroutines(vec![Sherman::create_on(&ep, cfg, node)])
            .pop()
            .unwrap()
            .unwrap();
        // Creating the tree zeroes its tables from the heap (WRITEs, once per tree).
        let created = ep.stats().bounced_write;
        // 3000 keys: leaves and internal pages split, separators are inserted.
        let d = run_on(&ep, &tree, 3000);
        assert_eq!(d.bounced_read + d.bounced_atomic, 0, "{d}");
        assert_eq!(d.bounced_write, created, "{d}");
    }

    #[test]
    fn canrt_opens_loads_looks_up_and_scans_in_place() {
        use remora_core::canrt::{Canrt, CanrtConfig, CanrtNode, CanrtServer};
        use std::sync::Arc;
        let n = FakeNode::new(
            0,
            64 << 20,
            1 << 20,
            256 << 10,
            Box::new(CanrtServer::new()),
        )
        .unwrap();
        let ep = FakeEndpoint::connect(&[n]).unwrap();
        let tree = run_coroutines(vec![Canrt::open_on(
            &ep,
            CanrtConfig::default(),
            Arc::new(CanrtNode::new()),
        )])
        .pop()
        .unwrap()
        .unwrap();
        // 3000 keys: the tree resizes, and the client reloads its view.
        let d = run_on(&ep, &tree, 3000);
        assert_eq!(d.bounced(), 0, "{d}");
        assert!(tree.stats().refreshes > 0, "{:?}", tree.stats());
    }
}

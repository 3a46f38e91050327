//! Creating a queue pair (over rdma_cm, or on the fake device) and mapping its staging and
//! receive buffers on first need (see the parent module's notes on footprint).
use super::cq::SendCq;
use super::*;

impl VerbsQp {
    /// Creates the queue pair on `id` (whose device is resolved) on the thread's send
    /// completion queue `cq` when it fits (same device, room left; else on a new one), with
    /// its own receive completion queue. `channel` is owned by the queue pair on the client
    /// side (one channel per connection). The new queue pair's completion queue is
    /// [`Self::send_cq`], for the next one.
    pub(crate) fn create_on(
        id: CmId,
        channel: Option<Channel>,
        pd: Pd,
        peer: NodeId,
        disconnect_on_drop: bool,
        cq: Option<&Rc<SendCq>>,
    ) -> Result<VerbsQp, VerbsError> {
        VerbsQp::create_inner(id, channel, pd, peer, disconnect_on_drop, cq, None)
    }

    /// A memory node's queue pair on `id`: its own send completion queue, and no receive
    /// buffers or receive completion queue of its own: it takes receives from `srq` (a shared
    /// receive queue on `pd`) and reports them to `recv_cq`, both of which must outlive it.
    /// Its receive completions are polled by whoever polls `recv_cq` (`try_recv` refuses).
    pub(crate) fn create_shared(
        id: CmId,
        pd: Pd,
        peer: NodeId,
        srq: *mut sys::ibv_srq,
        recv_cq: *mut sys::ibv_cq,
    ) -> Result<VerbsQp, VerbsError> {
        VerbsQp::create_inner(id, None, pd, peer, true, None, Some((srq, recv_cq)))
    }

    fn create_inner(
        id: CmId,
        channel: Option<Channel>,
        pd: Pd,
        peer: NodeId,
        disconnect_on_drop: bool,
        cq: Option<&Rc<SendCq>>,
        shared: Option<(*mut sys::ibv_srq, *mut sys::ibv_cq)>,
    ) -> Result<VerbsQp, VerbsError> {
        // SAFETY: `id` is a live cm id; `verbs` is its device context once resolved.
        let ctx = unsafe { (*id.0).verbs };
        if ctx.is_null() {
            return Err(VerbsError::Sys {
                what: "rdma_cm gave no device for the connection",
                errno: libc::ENODEV,
            });
        }
        let send = match cq {
            Some(c) if c.fits(ctx) => c.clone(),
            // A client's queue sleeps on a channel when idle; a memory node's queue pair's
            // does not (its server thread waits on its shared receive queue).
            _ => Rc::new(SendCq::real(ctx, shared.is_none())?),
        };
        let mut raw = Raw {
            qp_created: false,
            disconnect: disconnect_on_drop,
            recv_cq: std::ptr::null_mut(),
            stage_mr: RefCell::new(None),
            recv_mr: RefCell::new(None),
            pool_mrs: [None, None],
            grown: RefCell::new(None),
            stage: RefCell::new(None),
            recv: RefCell::new(None),
            send,
            pd: Some(pd),
            id: Some(id),
            channel,
        };
        let (srq, recv_cq) = match shared {
            Some(s) => s,
            None => {
                // SAFETY: `ctx` is open; the channel is the send queue's (of the same
                // device, outliving this queue: `Raw` destroys it before dropping its `Rc` of
                // the send queue) or null; checked for null.
                raw.recv_cq = unsafe {
                    sys::ibv_create_cq(
                        ctx,
                        RQ_DEPTH as i32 + 1,
                        std::ptr::null_mut(),
                        raw.send.channel(),
                        0,
                    )
                };
                if raw.recv_cq.is_null() {
                    return Err(sys_err("ibv_create_cq (receive)"));
                }
                (std::ptr::null_mut(), raw.recv_cq)
            }
        };
        let (id, pd) = match (&raw.id, &raw.pd) {
            (Some(i), Some(p)) => (i.0, p.raw()),
            _ => unreachable!("set above"),
        };
        let mut max_inline = 0;
        for inline in [INLINE_WANT, 0] {
            let mut attr = sys::ibv_qp_init_attr {
                send_cq: raw.send.raw(),
                recv_cq,
                srq,
                cap: sys::ibv_qp_cap {
                    max_send_wr: SQ_DEPTH,
                    max_recv_wr: if srq.is_null() { RQ_DEPTH } else { 0 },
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: inline,
                },
                qp_type: sys::IBV_QPT_RC,
                sq_sig_all: 0,
                ..Default::default()
            };
            // SAFETY: live id, PD and CQs of the same device; `attr` is a valid in/out struct.
            if unsafe { sys::rdma_create_qp(id, pd, &mut attr) } == 0 {
                raw.qp_created = true;
                max_inline = attr.cap.max_inline_data as usize;
                break;
            }
        }
        if !raw.qp_created {
            return Err(sys_err("rdma_create_qp"));
        }
        // SAFETY: created above.
        let dev = Dev::Real(unsafe { (*id).qp });
        VerbsQp::finish_create(raw, dev, peer, max_inline, !srq.is_null())
    }

    /// A queue pair to `node` on the fake device (see [`super::fake`]), on `cq` when given
    /// and not full.
    pub(crate) fn fake(
        node: &Rc<FakeNode>,
        cq: Option<&Rc<SendCq>>,
    ) -> Result<VerbsQp, VerbsError> {
        let send = match cq {
            Some(c) if c.fits(std::ptr::null_mut()) => c.clone(),
            _ => Rc::new(SendCq::fake()),
        };
        let raw = Raw {
            qp_created: false,
            disconnect: false,
            recv_cq: std::ptr::null_mut(),
            stage_mr: RefCell::new(None),
            recv_mr: RefCell::new(None),
            pool_mrs: [None, None],
            grown: RefCell::new(None),
            stage: RefCell::new(None),
            recv: RefCell::new(None),
            send,
            pd: None,
            id: None,
            channel: None,
        };
        let dev = Dev::Fake(FakeQp::connect(node, RQ_DEPTH as usize));
        let mut qp = VerbsQp::finish_create(raw, dev, node.node(), INLINE_WANT as usize, false)?;
        let (addr, len) = node.region();
        let (dm_addr, dm_len) = node.dm();
        let remote = Remote {
            region_addr: addr,
            region_rkey: crate::verbs::fake::FAKE_RKEY,
            region_len: len,
            dm: (dm_len > 0).then_some((
                crate::verbs::wire::DmKind::Host,
                dm_addr,
                crate::verbs::fake::FAKE_RKEY,
                dm_len,
            )),
        };
        qp.set_peer(node.node(), remote, RECV_LEN);
        Ok(qp)
    }

    /// Registers `[base, base + len)` with this queue pair's protection domain (nothing to
    /// do on the fake device): the registration, if any, and its local key.
    ///
    /// # Safety
    /// The memory stays mapped while the registration lives.
    pub(super) unsafe fn register(
        raw: &Raw,
        base: *mut u8,
        len: usize,
    ) -> Result<(Option<Mr>, u32), VerbsError> {
        match &raw.pd {
            Some(pd) => {
                // SAFETY: by the caller's contract.
                let mr = unsafe { Mr::register(pd, base, len, LOCAL)? };
                let k = mr.lkey();
                Ok((Some(mr), k))
            }
            None => Ok((None, 0)),
        }
    }

    /// The common fields (staging and receive buffers come on first need).
    pub(super) fn finish_create(
        raw: Raw,
        dev: Dev,
        peer: NodeId,
        max_inline: usize,
        shared_recv: bool,
    ) -> Result<VerbsQp, VerbsError> {
        let cq_index = raw.send.join().ok_or(VerbsError::Sys {
            what: "a send completion queue with no room left",
            errno: libc::ENOSPC,
        })?;
        let qp_num = match &dev {
            // SAFETY: a live queue pair created above.
            Dev::Real(q) => unsafe { (**q).qp_num },
            Dev::Fake(_) => 0,
        };
        let qp = VerbsQp {
            qp_num,
            peer,
            remote: Remote::default(),
            max_message: RECV_LEN,
            max_inline,
            dev,
            cq_index,
            stage_base: Cell::new(std::ptr::null_mut()),
            stage_lkey: Cell::new(0),
            recv_base: Cell::new(std::ptr::null_mut()),
            recv_lkey: Cell::new(0),
            shared_recv,
            counters: Counters::new(),
            stats: Stats::default(),
            pools: [const { Cell::new((0, 0, 0)) }; POOLS],
            broken: Cell::new(false),
            cause: Cell::new(sys::IBV_WC_SUCCESS),
            slots: [const { slot::SlotCell::free() }; SLOTS],
            wakers: [const { Cell::new(None) }; SLOTS],
            armed: Cell::new(0),
            waiting: Cell::new(0),
            free: Cell::new(u64::MAX),
            sq_used: Cell::new(0),
            unsignaled: Cell::new(0),
            recv_idle: Cell::new(0),
            room: super::room::RoomQueue::new(),
            recv_waiters: Cell::new(0),
            recv_wakers: [const { Cell::new(None) }; super::RECV_WAITS],
            recv_used: Cell::new(0),
            recv_armed: Cell::new(0),
            recv_stash: Cell::new(None),
            repost: RefCell::new(Vec::with_capacity(RQ_DEPTH as usize)),
            chain: RefCell::new(chain::Chain::new()),
            queued_wrs: Cell::new(0),
            queued: Cell::new(0),
            oneoff: RefCell::new((0..SLOTS).map(|_| None).collect()),
            raw,
        };
        Ok(qp)
    }

    /// Maps `len` bytes and registers them with this queue pair's protection domain. The
    /// caller keeps the arena in `raw` beside the registration (which `raw` releases first).
    fn map_registered(
        &self,
        len: usize,
        no_memory: &'static str,
        no_registration: &'static str,
    ) -> Result<(Arena, Option<Mr>, u32), FabricError> {
        let arena = Arena::new(len).map_err(|_| FabricError::Unsupported { what: no_memory })?;
        // SAFETY: the caller keeps the arena in `raw`, which releases the registration first.
        let (mr, lkey) = unsafe { VerbsQp::register(&self.raw, arena.as_ptr(), arena.len()) }
            .map_err(|_| FabricError::Unsupported {
                what: no_registration,
            })?;
        Ok((arena, mr, lkey))
    }

    /// Maps and registers the staging buffers if not yet done.
    pub(super) fn ensure_stage(&self) -> Result<(), FabricError> {
        if !self.stage_base.get().is_null() {
            return Ok(());
        }
        let (arena, mr, lkey) = self.map_registered(
            SLOTS * STAGE_SLOT,
            "no memory for staging buffers",
            "could not register staging buffers (locked-memory limit?)",
        )?;
        self.stage_base.set(arena.as_ptr());
        self.stage_lkey.set(lkey);
        *self.raw.stage_mr.borrow_mut() = mr;
        *self.raw.stage.borrow_mut() = Some(arena);
        Ok(())
    }

    /// Maps, registers and posts the receive buffers if not yet done (a queue pair on a
    /// shared receive queue has none: an error).
    pub(super) fn ensure_recvs(&self) -> Result<(), FabricError> {
        if !self.recv_base.get().is_null() {
            return Ok(());
        }
        if self.shared_recv {
            return Err(FabricError::Unsupported {
                what: "a memory node's queue pair receives through its server thread's shared queue",
            });
        }
        let (arena, mr, lkey) = self.map_registered(
            RQ_DEPTH as usize * RECV_LEN,
            "no memory for receive buffers",
            "could not register receive buffers (locked-memory limit?)",
        )?;
        self.recv_base.set(arena.as_ptr());
        self.recv_lkey.set(lkey);
        *self.raw.recv_mr.borrow_mut() = mr;
        *self.raw.recv.borrow_mut() = Some(arena);
        self.repost.borrow_mut().extend(0..RQ_DEPTH);
        if self.post_recvs().is_err() {
            self.broken.set(true);
            return Err(FabricError::Unsupported {
                what: "ibv_post_recv refused the receive buffers",
            });
        }
        Ok(())
    }
}

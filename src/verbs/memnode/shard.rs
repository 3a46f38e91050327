//! The memory node's server threads (`remora memnode --fabric verbs --threads N`). Each
//! thread owns a share of the connections (connection `k` goes to thread `k mod N`) and, per
//! device, one shared receive queue (SRQ) with one receive completion queue: its connections'
//! queue pairs have no receive buffers of their own. A thread polls its receive completion
//! queue in batches, finds the connection by the completion's queue pair number, hands the
//! message to the service straight from the SRQ buffer (no copy), posts the replies detached
//! (inline ones unsignaled, one in every 32 signaled to return send-queue credit: it never
//! waits for a reply to complete), and posts the consumed buffers back in chains of
//! [`RECV_BATCH`]; with nothing to serve it spins a while, then sleeps (`idle.rs`). The
//! thread that called [`Memnode::serve`] handles rdma_cm events only
//! (connections, fences, key revocations) and hands each new connection to its thread.
use super::fake_srq::FakeSrq;
use super::idle::{Bell, Rest};
use super::*;
use crate::verbs::qp::RECV_BATCH;
use crate::verbs::qp::idle::nonblocking_channel;
use std::mem::MaybeUninit;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

/// Receive buffers of one server thread's shared receive queue (per device).
pub const SRQ_DEPTH: u32 = 512;
/// Receive completions taken per poll.
const POLL_BATCH: usize = 16;

/// A shared receive queue, its receive completion queue and buffers (`SRQ_DEPTH` of
/// `RECV_LEN` bytes in one registered arena). Field order is release order.
pub(super) struct Srq {
    srq: *mut sys::ibv_srq,
    pub(super) cq: *mut sys::ibv_cq,
    /// The channel `cq` reports to when armed (`idle.rs`).
    pub(super) channel: *mut sys::ibv_comp_channel,
    mr: Option<Mr>,
    /// The fake device's queue (`fake_srq.rs`; the pointers above are then null).
    pub(super) fake: Option<FakeSrq>,
    arena: Arena,
}

// SAFETY: libibverbs objects may be used from any thread. The buffers are written by the NIC
// and read only by the one server thread that polls this queue's completions, each buffer
// only between its completion and its repost; the other threads only hold the `Arc` (to
// create queue pairs on it and to keep it alive while they live).
unsafe impl Send for Srq {}
// SAFETY: as above; no method takes `&self` and mutates Rust-visible state.
unsafe impl Sync for Srq {}

impl Srq {
    /// A shared receive queue on `pd` (device `ctx`) with all its buffers posted.
    pub(super) fn new(ctx: *mut sys::ibv_context, pd: &Pd) -> Result<Srq, VerbsError> {
        let arena = Arena::new(SRQ_DEPTH as usize * RECV_LEN)?;
        // SAFETY: the arena outlives the registration (field order).
        let mr = Some(unsafe { Mr::register(pd, arena.as_ptr(), arena.len(), LOCAL)? });
        let mut attr = sys::ibv_srq_init_attr {
            attr: sys::ibv_srq_attr {
                max_wr: SRQ_DEPTH,
                max_sge: 1,
                srq_limit: 0,
            },
            ..Default::default()
        };
        // SAFETY: a live PD; `attr` is valid for the call; checked for null.
        let srq = unsafe { sys::ibv_create_srq(pd.raw(), &mut attr) };
        if srq.is_null() {
            return Err(sys_err("ibv_create_srq"));
        }
        let mut s = Srq {
            srq,
            cq: std::ptr::null_mut(),
            channel: std::ptr::null_mut(),
            mr,
            fake: None,
            arena,
        };
        s.channel = nonblocking_channel(ctx)?;
        // SAFETY: `ctx` is open, the channel one of its own; checked for null.
        s.cq = unsafe {
            sys::ibv_create_cq(
                ctx,
                2 * SRQ_DEPTH as i32 + 1,
                std::ptr::null_mut(),
                s.channel,
                0,
            )
        };
        if s.cq.is_null() {
            return Err(sys_err("ibv_create_cq (shared receive)"));
        }
        let all: Vec<u32> = (0..SRQ_DEPTH).collect();
        for chunk in all.chunks(RECV_BATCH) {
            if s.post(chunk) != 0 {
                return Err(sys_err("ibv_post_srq_recv"));
            }
        }
        Ok(s)
    }

    /// (shared receive queue, receive completion queue), to create a queue pair on.
    pub(super) fn raw(&self) -> (*mut sys::ibv_srq, *mut sys::ibv_cq) {
        (self.srq, self.cq)
    }

    /// A queue on the fake device (`fake_srq.rs`) with its buffers.
    #[cfg(test)]
    pub(super) fn with_fake(fake: FakeSrq, arena: Arena) -> Srq {
        Srq {
            srq: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            channel: std::ptr::null_mut(),
            mr: None,
            fake: Some(fake),
            arena,
        }
    }

    /// `ibv_poll_cq` on the receive completion queue: completions into the first entries of
    /// `out`; how many (negative: the poll failed).
    fn poll(&self, out: &mut [MaybeUninit<sys::ibv_wc>]) -> i32 {
        match &self.fake {
            Some(f) => f.poll(out),
            // SAFETY: a live completion queue; room for `out.len()` entries at `out`.
            None => unsafe { sys::ibv_poll_cq(self.cq, out.len() as i32, out.as_mut_ptr().cast()) },
        }
    }

    /// Posts buffers `bufs` (at most [`RECV_BATCH`], each `< SRQ_DEPTH`) as one chain.
    fn post(&self, bufs: &[u32]) -> i32 {
        if let Some(f) = &self.fake {
            return f.post(bufs);
        }
        let mut sges = [sys::ibv_sge::default(); RECV_BATCH];
        let mut wrs = [const { MaybeUninit::<sys::ibv_recv_wr>::uninit() }; RECV_BATCH];
        let wr_ptr = wrs.as_mut_ptr().cast::<sys::ibv_recv_wr>();
        let lkey = self.mr.as_ref().map_or(0, Mr::lkey);
        let n = bufs.len().min(RECV_BATCH);
        for (k, &i) in bufs[..n].iter().enumerate() {
            sges[k] = sys::ibv_sge {
                addr: self.buf(i) as u64,
                length: RECV_LEN as u32,
                lkey,
            };
            wrs[k].write(sys::ibv_recv_wr {
                wr_id: u64::from(i),
                next: if k + 1 == n {
                    std::ptr::null_mut()
                } else {
                    // SAFETY: k + 1 < RECV_BATCH: inside the array.
                    unsafe { wr_ptr.add(k + 1) }
                },
                sg_list: &mut sges[k],
                num_sge: 1,
            });
        }
        if n == 0 {
            return 0;
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live SRQ; the chain's first `n` entries are written and linked, valid with
        // their scatter entries for the call (the provider copies them); the buffers are
        // registered, owned by this queue, and their earlier completions were handled.
        unsafe { sys::ibv_post_srq_recv(self.srq, wr_ptr, &mut bad) }
    }

    /// Buffer `i` (taken modulo `SRQ_DEPTH`).
    pub(super) fn buf(&self, i: u32) -> *mut u8 {
        // SAFETY: (i mod SRQ_DEPTH) * RECV_LEN lies inside the arena of SRQ_DEPTH buffers.
        unsafe { self.arena.as_ptr().add((i % SRQ_DEPTH) as usize * RECV_LEN) }
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: every queue pair on them is destroyed (each holds the `Arc` until after its
        // queue pair); the SRQ goes before its completion queue's last user, the queue (whose
        // events were all acknowledged as read: `idle.rs`) before its channel, and the
        // registration (field order) before the arena.
        unsafe {
            if !self.srq.is_null() {
                sys::ibv_destroy_srq(self.srq);
            }
            if !self.cq.is_null() {
                sys::ibv_destroy_cq(self.cq);
            }
            if !self.channel.is_null() {
                sys::ibv_destroy_comp_channel(self.channel);
            }
        }
    }
}

/// What the control thread and a connection's server thread share about it.
pub(super) struct Ctl {
    /// Its number for the handler (never reused).
    pub(super) id: usize,
    /// The client it belongs to (fenced as a whole).
    pub(super) client: u32,
    pub(super) cm_id: *mut sys::rdma_cm_id,
    /// Its queue pair, for the control thread's fence (`ibv_modify_qp` may be called from
    /// any thread).
    pub(super) qp: *mut sys::ibv_qp,
    /// Fenced or failed: nothing more is served from it.
    pub(super) dead: AtomicBool,
    /// Its handler was told it ended (`Handler::on_disconnect`, once).
    pub(super) told: AtomicBool,
    /// Its rdma_cm connection ended: its server thread releases it.
    pub(super) gone: AtomicBool,
    /// Its queue pair has the node's receiver-not-ready timer (`qp::MIN_RNR_TIMER`).
    pub(super) rnr: AtomicBool,
}

// SAFETY: the raw pointers are libibverbs/librdmacm objects, usable from any thread; they
// stay live until `gone` is set by the control thread (which then drops its `Arc` and never
// touches them again) and the server thread drops the queue pair.
unsafe impl Send for Ctl {}
// SAFETY: as above; the flags are atomics.
unsafe impl Sync for Ctl {}

/// A connection, owned by its server thread. Field order is release order: the queue pair
/// before the shared receive queue it takes from.
pub(super) struct Conn {
    pub(super) qp: VerbsQp,
    pub(super) ctl: Arc<Ctl>,
    pub(super) srq: Arc<Srq>,
    /// Its handler was told it connected.
    pub(super) introduced: bool,
}

/// A message for another thread's connection: (connection, bytes).
type Mail = (usize, Vec<u8>);

/// What the control thread hands the server threads.
pub(super) struct Hub {
    /// Per server thread: connections handed over (and its connections between serves).
    pub(super) inbox: Vec<Mutex<Vec<Conn>>>,
    /// Per server thread: messages other threads' handlers sent to its connections
    /// (`Replies::send_to`).
    mail: Vec<Mutex<Vec<Mail>>>,
    /// Per server thread: connections or mail are waiting in the two above.
    pub(super) pending: Vec<AtomicBool>,
    /// Per server thread: it sleeps, or is about to (`idle.rs`): ring its bell.
    pub(super) asleep: Vec<AtomicBool>,
    /// Per server thread: what wakes it from its sleep when its inbox gets something.
    pub(super) bells: Vec<Bell>,
    /// Messages served by all threads.
    pub(super) served: AtomicU64,
}

impl Hub {
    pub(super) fn new(threads: usize) -> Result<Hub, VerbsError> {
        let n = threads.max(1);
        Ok(Hub {
            inbox: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            mail: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            pending: (0..n).map(|_| AtomicBool::new(false)).collect(),
            asleep: (0..n).map(|_| AtomicBool::new(false)).collect(),
            bells: (0..n).map(|_| Bell::new()).collect::<Result<_, _>>()?,
            served: AtomicU64::new(0),
        })
    }

    pub(super) fn threads(&self) -> usize {
        self.inbox.len()
    }

    /// The server thread of connection `id`.
    pub(super) fn owner(&self, id: usize) -> usize {
        id % self.threads()
    }

    /// Hands `c` to its server thread.
    pub(super) fn hand_over(&self, c: Conn) {
        let t = self.owner(c.ctl.id);
        lock(&self.inbox[t]).push(c);
        self.notify(t);
    }

    /// The counters of every connection parked in the inboxes.
    pub(super) fn stats(&self) -> VerbsStats {
        self.inbox
            .iter()
            .flat_map(|b| lock(b).iter().map(|c| c.qp.stats()).collect::<Vec<_>>())
            .fold(VerbsStats::default(), |a, s| a + s)
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The handler a server thread serves with: its own (forked) or the node's, shared.
pub(super) enum ThreadHandler<'a> {
    Own(Box<dyn Handler + Send>),
    Shared(&'a Mutex<Box<dyn Handler + Send>>),
}

impl ThreadHandler<'_> {
    fn with<R>(&mut self, f: impl FnOnce(&mut dyn Handler) -> R) -> R {
        match self {
            ThreadHandler::Own(h) => f(&mut **h),
            ThreadHandler::Shared(m) => f(&mut **lock(m)),
        }
    }
}

/// One server thread's loop state.
pub(super) struct Server<'a> {
    pub(super) t: usize,
    pub(super) hub: &'a Hub,
    pub(super) handler: ThreadHandler<'a>,
    pub(super) region: WordRegion<'a>,
    pub(super) verbose: bool,
}

impl Server<'_> {
    /// Serves this thread's connections until `stop`; hands them back to its inbox at the
    /// end and returns its counters (messages, waits on its own replies, receive polls).
    pub(super) fn run(mut self, stop: &AtomicBool) -> VerbsStats {
        let stats = Stats::default();
        let mut mine: Vec<Conn> = Vec::new();
        // Shared receive queues this thread polls, with buffers waiting to be posted again.
        let mut srqs: Vec<(Arc<Srq>, Vec<u32>)> = Vec::new();
        let mut replies = Replies::new();
        let mut others: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut wcs = [const { MaybeUninit::<sys::ibv_wc>::uninit() }; POLL_BATCH];
        let mut rest = Rest::default();
        let mut round = 0u64;
        while !stop.load(Ordering::Relaxed) {
            round += 1;
            let mut moved = false;
            if self.hub.pending[self.t].swap(false, Ordering::Acquire) {
                self.take_new(&mut mine, &mut srqs);
                self.deliver_mail(&mine, &stats);
                moved = true;
            }
            let mut served = 0u64;
            for si in 0..srqs.len() {
                let srq = srqs[si].0.clone();
                let n = self.poll(&srq, &mut wcs, &stats);
                if n == 0 {
                    continue;
                }
                for wc in &wcs[..n] {
                    // SAFETY: `poll` returned `n`: entries below it were written.
                    let wc = unsafe { wc.assume_init_ref() };
                    // A connection handed over after this round's look at the inbox may
                    // already have sent: take it first.
                    if !mine.iter().any(|c| c.qp.qp_num() == wc.qp_num)
                        && self.hub.pending[self.t].swap(false, Ordering::Acquire)
                    {
                        self.take_new(&mut mine, &mut srqs);
                        self.deliver_mail(&mine, &stats);
                    }
                    served +=
                        self.on_completion(wc, &srq, &mine, &mut replies, &mut others, &stats);
                    srqs[si].1.push(wc.wr_id as u32 % SRQ_DEPTH);
                }
                for (to, m) in others.drain(..) {
                    self.send_to(&mine, to, m, &stats);
                }
                // Consumed buffers go back in chains of RECV_BATCH; with SRQ_DEPTH buffers
                // shared by the thread's connections, waiting for a full chain costs at most
                // RECV_BATCH - 1 of them.
                let repost = &mut srqs[si].1;
                while repost.len() >= RECV_BATCH {
                    let rc = srq.post(&repost[repost.len() - RECV_BATCH..]);
                    stats.bump(|v| {
                        v.recv_posts += 1;
                        v.recvs_posted += RECV_BATCH as u64;
                    });
                    if rc != 0 {
                        log::warn!("memnode: ibv_post_srq_recv failed ({rc})");
                        break;
                    }
                    repost.truncate(repost.len() - RECV_BATCH);
                }
            }
            if served > 0 {
                self.hub.served.fetch_add(served, Ordering::Relaxed);
                moved = true;
            } else {
                let region = &self.region;
                moved |= self.handler.with(|h| h.on_idle(region));
            }
            if served == 0 || round.is_multiple_of(64) {
                self.reap(&mut mine);
            }
            // Idle: spin a while, then sleep until a message, a connection or mail arrives
            // (`idle.rs`); anything served or done starts the spin over.
            self.rest(&srqs, moved, &mut rest, &stats);
        }
        let k = mine.len();
        lock(&self.hub.inbox[self.t]).append(&mut mine);
        if k > 0 {
            self.hub.pending[self.t].store(true, Ordering::Release);
        }
        stats.get()
    }

    /// Takes the connections handed to this thread and introduces them to the handler.
    fn take_new(&mut self, mine: &mut Vec<Conn>, srqs: &mut Vec<(Arc<Srq>, Vec<u32>)>) {
        let fresh = std::mem::take(&mut *lock(&self.hub.inbox[self.t]));
        for mut c in fresh {
            if !srqs.iter().any(|(s, _)| Arc::ptr_eq(s, &c.srq)) {
                srqs.push((c.srq.clone(), Vec::with_capacity(SRQ_DEPTH as usize)));
            }
            // (One fenced before its thread took it is not introduced: its handler was
            // already told it ended.)
            if !c.introduced && !c.ctl.told.load(Ordering::Acquire) {
                let region = &self.region;
                let (id, client) = (c.ctl.id, c.ctl.client);
                self.handler.with(|h| h.on_connect(region, id, client));
                c.introduced = true;
            }
            mine.push(c);
        }
    }

    /// Up to `POLL_BATCH` receive completions of `srq` into `wcs`.
    fn poll(
        &self,
        srq: &Srq,
        wcs: &mut [MaybeUninit<sys::ibv_wc>; POLL_BATCH],
        stats: &Stats,
    ) -> usize {
        let n = srq.poll(wcs);
        stats.bump(|v| {
            v.recv_polls += 1;
            v.recv_empty += u64::from(n == 0);
            v.recv_completions += n.max(0) as u64;
        });
        if n < 0 {
            log::warn!("memnode: polling a shared receive completion queue failed ({n})");
            return 0;
        }
        n as usize
    }

    /// Serves one receive completion; returns 1 if it was a message served.
    fn on_completion(
        &mut self,
        wc: &sys::ibv_wc,
        srq: &Srq,
        mine: &[Conn],
        replies: &mut Replies,
        others: &mut Vec<(usize, Vec<u8>)>,
        stats: &Stats,
    ) -> u64 {
        let Some(c) = mine.iter().find(|c| c.qp.qp_num() == wc.qp_num) else {
            // A connection already released (its last packets): nothing to serve.
            return 0;
        };
        if c.ctl.dead.load(Ordering::Acquire) || c.ctl.gone.load(Ordering::Acquire) {
            return 0;
        }
        if wc.status != sys::IBV_WC_SUCCESS {
            self.fail(c, "a receive completed with an error");
            return 0;
        }
        let len = (wc.byte_len as usize).min(RECV_LEN);
        let (kind, imm) = if wc.opcode == sys::IBV_WC_RECV_RDMA_WITH_IMM {
            // SAFETY: the union member the provider sets for completions with immediates.
            let imm = u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data });
            (RecvKind::WriteImm, Some(imm))
        } else {
            (RecvKind::Send, None)
        };
        let msg: &[u8] = if kind == RecvKind::Send {
            // SAFETY: the completion says the NIC is done with this buffer, which holds
            // `len <= RECV_LEN` bytes and is not posted again before this slice's last use
            // (below, before the caller queues it for reposting).
            unsafe { std::slice::from_raw_parts(srq.buf(wc.wr_id as u32), len) }
        } else {
            &[]
        };
        c.qp.counters().count_recv(msg.len());
        let r = Recv {
            kind,
            len: wc.byte_len,
            imm,
        };
        replies.clear();
        let region = &self.region;
        let id = c.ctl.id;
        let handled = self
            .handler
            .with(|h| h.on_message(region, id, r, msg, replies));
        if let Err(e) = handled {
            self.fail(c, &e.to_string());
            return 1;
        }
        let mut waits = 0;
        for m in replies.iter() {
            match c.qp.post_detached(&mut [Op::Send { local: m }]) {
                Ok(w) => waits += w,
                Err(e) => {
                    self.fail(c, &e.to_string());
                    break;
                }
            }
        }
        stats.bump(|v| {
            v.server_messages += 1;
            v.server_waits += waits;
        });
        others.extend(replies.iter_other().map(|(to, m)| (to, m.to_vec())));
        1
    }

    /// A message for connection `to` (`Replies::send_to`): posted if it is this thread's,
    /// else left in its thread's mail. Best effort (a connection gone drops it).
    fn send_to(&self, mine: &[Conn], to: usize, m: Vec<u8>, stats: &Stats) {
        let owner = self.hub.owner(to);
        if owner != self.t {
            lock(&self.hub.mail[owner]).push((to, m));
            self.hub.notify(owner);
            return;
        }
        if let Some(o) = mine
            .iter()
            .find(|o| o.ctl.id == to && !o.ctl.dead.load(Ordering::Acquire))
            && let Ok(w) = o.qp.post_detached(&mut [Op::Send { local: &m }])
        {
            stats.bump(|v| v.server_waits += w);
        }
    }

    fn deliver_mail(&self, mine: &[Conn], stats: &Stats) {
        let mail = std::mem::take(&mut *lock(&self.hub.mail[self.t]));
        for (to, m) in mail {
            self.send_to(mine, to, m, stats);
        }
    }

    /// Ends connection `c` on an error: nothing more from it, disconnected (so the client's
    /// queue pair fails instead of waiting for replies), its handler told; released on its
    /// rdma_cm event.
    fn fail(&mut self, c: &Conn, why: &str) {
        c.ctl.dead.store(true, Ordering::Release);
        if !c.ctl.cm_id.is_null() {
            // SAFETY: the connection's id is live (released with the Conn); disconnecting
            // twice (again on release) is harmless; librdmacm calls may come from any thread.
            unsafe { sys::rdma_disconnect(c.ctl.cm_id) };
        }
        self.tell_disconnect(c);
        let level = if self.verbose {
            log::Level::Info
        } else {
            log::Level::Debug
        };
        log::log!(level, "memnode: connection {} ended: {why}", c.ctl.id);
    }

    fn tell_disconnect(&mut self, c: &Conn) {
        if !c.ctl.told.swap(true, Ordering::AcqRel) {
            let region = &self.region;
            let id = c.ctl.id;
            self.handler.with(|h| h.on_disconnect(region, id));
        }
    }

    /// Tells the handler of connections fenced since, and releases those whose rdma_cm
    /// connection ended.
    fn reap(&mut self, mine: &mut Vec<Conn>) {
        let mut i = 0;
        while i < mine.len() {
            let (dead, gone) = (
                mine[i].ctl.dead.load(Ordering::Acquire),
                mine[i].ctl.gone.load(Ordering::Acquire),
            );
            if dead || gone {
                self.tell_disconnect(&mine[i]);
            }
            if gone {
                drop(mine.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }
}

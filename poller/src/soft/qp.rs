//! The soft fabric's queue pair and endpoint.
use super::node::NodeMem;
use super::nvm::Placed;
use super::ring::Ring;
use super::words;
use remora_core::block_on::yield_now;
use remora_core::counters::Counters;
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv, RecvKind, SegmentOrder};
use remora_layouts::{GlobalAddr, NodeId};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

/// The node id a memory node's queue pairs report for their client end.
pub const CLIENT_PEER: NodeId = NodeId::MAX;

/// How long a receiver waits between checks that its peer is still alive.
const LIVENESS_EVERY: Duration = Duration::from_millis(5);

/// How long a receive only spins; after that it also gives its CPU away (`sched_yield`)
/// between checks. The soft fabric raises no interrupt, and a waiter that only spins takes
/// the CPU from the thread it waits for: a memory node's server thread on the same core,
/// which on a loaded 2-core machine then got no CPU for 300-700 ms at a time, and clients
/// gave it up as hung (Catfish's `NoReply`). A round trip takes microseconds, so only long
/// waits yield.
const SPIN_BEFORE_YIELD: Duration = Duration::from_micros(50);

/// The longest a receive sleeps at once (see `SoftQp::recv`): it looks at its peer's
/// liveness, and the thread's other coroutines' timers run, at least this often.
const SLEEP_AT_MOST: Duration = Duration::from_micros(200);

thread_local! {
    /// Verbs posted and messages received by this thread: a receive that finds it unchanged
    /// since its last look knows every other coroutine of the thread is waiting too.
    static ACTIVITY: Cell<u64> = const { Cell::new(0) };
}

fn bump_activity() {
    ACTIVITY.with(|a| a.set(a.get().wrapping_add(1)));
}

/// What a sender does when the peer has no receive posted (its ring is full): the
/// receiver-not-ready (RNR) retry of contract rule 6, as the sim and RC NICs do it. The first
/// attempt that finds no receive is an RNR NAK; the sender then retries every `timer`, at
/// most `retries` times, and fails with [`FabricError::RnrRetryExceeded`] (the queue pair
/// broken) only when all of them found no receive either. A receive posted between two
/// retries is taken at once (a shared-memory ring has no retransmission to wait for), and a
/// peer found dead at a retry fails the post with `RetryExceeded` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnrPolicy {
    /// The RNR timer: time between two retries.
    pub timer: Duration,
    /// Retries after the first RNR NAK (finite, as on the sim: 7 is not "infinite" here).
    pub retries: u32,
}

impl RnrPolicy {
    /// The soft fabric's default: 7 retries (the sim's and IB's largest finite count) of
    /// 500 ms, 3.5 s in all. A soft memory node's receives are reposted by a CPU thread, not a
    /// NIC, and a handler step holds that thread: CANRT's resize of an 800k-key tree took up
    /// to 1.5 s on a 2-core machine at load 10 (`bench --fabric soft --index canrt --workload
    /// load --records 800000 --threads 2 --coroutines 8`), and the old fixed budget, 500 ms,
    /// ended that load with "receiver not ready". So the timer is far longer than a NIC's
    /// (the sim's 10 us); a dead peer is still found at the first retry.
    pub const DEFAULT: RnrPolicy = RnrPolicy {
        timer: Duration::from_millis(500),
        retries: 7,
    };

    /// A memory node's ends, for a SEND posted on them: 5 retries of 100 ms. The node's
    /// server threads never wait on a client's receives: they reply with
    /// `SoftQp::send_or_queue`, which keeps what the client has no receive for.
    pub const SERVER: RnrPolicy = RnrPolicy {
        timer: Duration::from_millis(100),
        retries: 5,
    };

    /// How long a sender waits for a receive before it fails: `retries` timers.
    pub fn budget(&self) -> Duration {
        self.timer.saturating_mul(self.retries)
    }
}

impl Default for RnrPolicy {
    fn default() -> Self {
        RnrPolicy::DEFAULT
    }
}

#[derive(Clone, Copy)]
enum Msg<'a> {
    Send(&'a [u8]),
    Imm(u32, u32),
}

/// The two message rings of one connection, in memory both ends map.
pub(crate) struct Channel {
    pub(crate) map: crate::arena::Mapping,
    pub(crate) depth: usize,
    pub(crate) max_msg: usize,
}

impl Channel {
    pub(crate) fn bytes(depth: usize, max_msg: usize) -> usize {
        2 * super::ring::ring_bytes(depth, max_msg)
    }
    /// (to-server ring, to-client ring)
    fn rings(&self) -> (Ring, Ring) {
        let half = super::ring::ring_bytes(self.depth, self.max_msg);
        // SAFETY: the mapping holds two rings of `half` bytes (checked at creation/mapping)
        // and lives as long as the Arc<Channel> each queue pair keeps.
        unsafe {
            (
                Ring::new(self.map.as_ptr(), self.depth, self.max_msg),
                Ring::new(self.map.as_ptr().add(half), self.depth, self.max_msg),
            )
        }
    }
}

/// One queue pair. Client ends reach a memory node's region; memory-node ends (peer
/// [`CLIENT_PEER`]) only send and receive, since clients register no memory.
pub struct SoftQp {
    peer: NodeId,
    mem: Option<Arc<NodeMem>>,
    key: u64,
    _chan: Arc<Channel>,
    tx: Ring,
    rx: Ring,
    counters: Counters,
    broken: Cell<bool>,
    last_write: Cell<bool>,
    rnr: Cell<RnrPolicy>,
    /// RNR NAKs and retries this queue pair's sends met.
    rnr_naks: Cell<u64>,
    /// The order this queue pair's READs and WRITEs move their 64-byte segments in, and the
    /// xorshift state that shuffles them.
    order: Cell<SegmentOrder>,
    rng: Cell<u64>,
    /// The control connection, to tell a dead peer from a slow one.
    control: Option<UnixStream>,
    /// Raised by the watchdog when the peer process is gone (client ends of other processes).
    peer_dead: Option<super::watchdog::DeadFlag>,
    /// Client ends: this connection's slot at the node and the slot word while it may access
    /// the region (a fence or the end of the connection changes the word).
    slot: Option<(u16, u64)>,
    /// Memory-node ends: replies the client had no receive for yet, in order, and their bytes
    /// (see [`SoftQp::send_or_queue`]).
    outbox: RefCell<VecDeque<Vec<u8>>>,
    outbox_bytes: Cell<usize>,
    /// Client ends: the reason the memory node gave for ending the connection, once read.
    farewell: Cell<Option<&'static str>>,
}

/// The most reply bytes a memory node keeps for one client that posts no receives: past it
/// the client reads nothing while it keeps sending (a NIC's responder would stall it), and
/// its connection ends with [`FabricError::RnrRetryExceeded`].
pub(crate) const OUTBOX_BYTES: usize = 8 << 20;

/// A distinct nonzero shuffle seed per queue pair of this process.
fn next_seed() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (n.wrapping_add(std::process::id() as u64) << 1 | 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

// SAFETY: the rings point into `_chan`'s mapping, which the queue pair owns through an Arc;
// moving the queue pair to another thread moves that ownership with it. SoftQp is !Sync
// (Cells), so it is used by one thread at a time.
unsafe impl Send for SoftQp {}

impl SoftQp {
    pub(crate) fn client(
        mem: Arc<NodeMem>,
        chan: Arc<Channel>,
        control: Option<UnixStream>,
        slot: (u16, u64),
    ) -> SoftQp {
        let (to_server, to_client) = chan.rings();
        let peer_dead = control
            .as_ref()
            .and_then(|s| s.try_clone().ok())
            .map(|s| super::watchdog::watch(std::os::fd::OwnedFd::from(s)));
        SoftQp {
            peer_dead,
            slot: Some(slot),
            peer: mem.node_id,
            key: mem.key().load(Ordering::Acquire),
            mem: Some(mem),
            _chan: chan,
            tx: to_server,
            rx: to_client,
            counters: Counters::new(),
            broken: Cell::new(false),
            last_write: Cell::new(false),
            rnr: Cell::new(RnrPolicy::DEFAULT),
            rnr_naks: Cell::new(0),
            order: Cell::new(SegmentOrder::default()),
            rng: Cell::new(next_seed()),
            control,
            outbox: RefCell::new(VecDeque::new()),
            outbox_bytes: Cell::new(0),
            farewell: Cell::new(None),
        }
    }

    pub(crate) fn server(chan: Arc<Channel>, control: Option<UnixStream>) -> SoftQp {
        let (to_server, to_client) = chan.rings();
        SoftQp {
            peer: CLIENT_PEER,
            mem: None,
            key: 0,
            _chan: chan,
            tx: to_client,
            rx: to_server,
            counters: Counters::new(),
            broken: Cell::new(false),
            last_write: Cell::new(false),
            rnr: Cell::new(RnrPolicy::SERVER),
            rnr_naks: Cell::new(0),
            order: Cell::new(SegmentOrder::default()),
            rng: Cell::new(next_seed()),
            control,
            peer_dead: None,
            slot: None,
            outbox: RefCell::new(VecDeque::new()),
            outbox_bytes: Cell::new(0),
            farewell: Cell::new(None),
        }
    }

    /// This connection's fabric client id (0 for a memory node's end).
    pub fn client_id(&self) -> u32 {
        self.slot
            .map_or(0, |(slot, word)| super::node::client_id(slot, word as u16))
    }

    /// Sets the order in which this queue pair's READs observe and WRITEs place their 64-byte
    /// segments (the contract promises none; the default is [`SegmentOrder::Shuffled`]).
    pub fn set_segment_order(&self, order: SegmentOrder) {
        self.order.set(order);
    }

    /// The segment order this queue pair's READs and WRITEs use now.
    pub fn segment_order(&self) -> SegmentOrder {
        self.order.get()
    }

    /// Sets this queue pair's receiver-not-ready retry policy (default [`RnrPolicy::DEFAULT`]).
    pub fn set_rnr(&self, policy: RnrPolicy) {
        self.rnr.set(policy);
    }

    /// This queue pair's receiver-not-ready retry policy now.
    pub fn rnr(&self) -> RnrPolicy {
        self.rnr.get()
    }

    /// RNR NAKs (first attempts and retries that found no receive) this queue pair's sends met.
    pub fn rnr_naks(&self) -> u64 {
        self.rnr_naks.get()
    }

    /// Copies remote memory at `p` into `local`, segment by segment in this queue pair's order.
    ///
    /// # Safety
    /// `p .. p + local.len()` must lie inside a live mapping for the whole call.
    unsafe fn copy_in(&self, p: *const u8, local: &mut [u8]) {
        let mut rng = self.rng.get();
        let len = local.len();
        self.order
            .get()
            .for_each_segment(p as u64, len, false, &mut rng, |s, e| {
                // SAFETY: s..e lies in 0..len, inside the mapping by the caller's contract.
                unsafe { words::read(p.add(s), &mut local[s..e]) }
            });
        self.rng.set(rng);
    }

    /// Copies `local` to remote memory at `p`, segment by segment in this queue pair's order.
    ///
    /// # Safety
    /// `p .. p + local.len()` must lie inside a live writable mapping for the whole call.
    unsafe fn copy_out(&self, p: *mut u8, local: &[u8]) {
        let mut rng = self.rng.get();
        self.order
            .get()
            .for_each_segment(p as u64, local.len(), true, &mut rng, |s, e| {
                // SAFETY: s..e lies in 0..len, inside the mapping by the caller's contract.
                unsafe { words::write(p.add(s), &local[s..e]) }
            });
        self.rng.set(rng);
    }

    /// Hangs up: the peer's sends and receives on this connection fail instead of waiting.
    pub fn close(&self) {
        self.tx.close();
        self.rx.close();
    }

    /// True once either end hung up.
    pub fn is_closed(&self) -> bool {
        self.rx.is_closed()
    }

    /// False once the peer's process has closed its control connection.
    pub fn peer_alive(&self) -> bool {
        self.control
            .as_ref()
            .is_none_or(|s| !super::watchdog::closed(s))
    }

    /// The local pointer for `len` bytes at `remote`, after the checks a NIC makes.
    fn resolve(
        &self,
        wr: usize,
        remote: GlobalAddr,
        len: usize,
        atomic: bool,
    ) -> Result<*mut u8, FabricError> {
        let denied = FabricError::RemoteAccess {
            wr,
            addr: remote,
            len,
        };
        let mem = self.mem.as_ref().ok_or(denied)?;
        if remote.node() != self.peer {
            return Err(FabricError::RemoteInvalid {
                wr,
                addr: remote,
                why: "the address names another memory node than this queue pair's peer",
            });
        }
        if mem.key().load(Ordering::Relaxed) != self.key {
            return Err(denied);
        }
        if let Some((slot, word)) = self.slot
            && mem.slot(slot as usize).load(Ordering::Acquire) != word
        {
            // Fenced by the node (a lease taken over), or the connection is over.
            return Err(denied);
        }
        let region = if remote.is_device() {
            mem.dm.as_ref()
        } else {
            Some(&mem.region)
        };
        let (region, region_len) = match region {
            Some(r) => (
                r,
                if remote.is_device() {
                    mem.dm_len
                } else {
                    mem.region_len
                },
            ),
            None => return Err(denied),
        };
        let end = remote.offset().checked_add(len as u64).ok_or(denied)?;
        if end > region_len {
            return Err(denied);
        }
        if atomic && !remote.offset().is_multiple_of(8) {
            return Err(FabricError::RemoteInvalid {
                wr,
                addr: remote,
                why: "atomic target is not 8-byte aligned",
            });
        }
        // SAFETY: offset + len <= region_len <= the mapping's length.
        Ok(unsafe { region.as_ptr().add(remote.offset() as usize) })
    }

    /// Counts `len` bytes `verb` placed at `remote` if that is persistent memory (`nvm.rs`).
    fn placed(&self, remote: GlobalAddr, verb: Placed, len: usize) {
        if let Some(mem) = &self.mem
            && mem.persistent()
            && !remote.is_device()
        {
            mem.nvm.placed(verb, len as u64);
        }
    }

    /// Orders a read after an earlier write of this queue pair (store-load needs a fence).
    fn before_read(&self) {
        if self.last_write.replace(false) {
            fence(Ordering::SeqCst);
        }
    }

    /// Puts `msg` in the peer's ring, retrying a full ring by this queue pair's [`RnrPolicy`].
    async fn push(&self, wr: usize, msg: Msg<'_>) -> Result<(), FabricError> {
        let policy = self.rnr.get();
        // When the next retry is due and how many are left, from the first RNR NAK on.
        let mut retry: Option<(Instant, u32)> = None;
        loop {
            if self.tx.is_closed() {
                return Err(self.hung_up());
            }
            let pushed = match msg {
                Msg::Send(p) => self.tx.try_push(RecvKind::Send, 0, p),
                Msg::Imm(imm, len) => self.tx.try_push_imm(imm, len),
            };
            match pushed {
                Ok(true) => {
                    if let Some(mem) = &self.mem {
                        mem.ring_doorbell();
                    }
                    return Ok(());
                }
                Ok(false) => {}
                Err(FabricError::LocalLength { len, max, .. }) => {
                    return Err(FabricError::LocalLength { wr, len, max });
                }
                Err(e) => return Err(e),
            }
            // An RNR NAK: the first attempt, or a retry (the attempt just made once a timer
            // ran out), found no receive. `left`: the retries still allowed after it.
            let now = Instant::now();
            let left = match retry {
                None => Some(policy.retries),
                Some((due, left)) if now >= due => Some(left),
                Some(_) => None,
            };
            if let Some(left) = left {
                self.rnr_naks.set(self.rnr_naks.get() + 1);
                if !self.peer_alive() {
                    return Err(FabricError::RetryExceeded { node: self.peer });
                }
                if left == 0 {
                    return Err(FabricError::RnrRetryExceeded);
                }
                retry = Some((now + policy.timer, left - 1));
            }
            yield_now().await;
        }
    }

    async fn exec(&self, wr: usize, op: &mut Op<'_>) -> Result<(), FabricError> {
        match op {
            Op::Read { remote, local } => {
                let p = self.resolve(wr, *remote, local.len(), false)?;
                self.before_read();
                // SAFETY: resolve checked the range lies in the mapped region.
                unsafe { self.copy_in(p, local) };
                fence(Ordering::Acquire);
            }
            Op::Write { remote, local } => {
                let p = self.resolve(wr, *remote, local.len(), false)?;
                fence(Ordering::Release);
                // SAFETY: resolve checked the range lies in the mapped region.
                unsafe { self.copy_out(p, local) };
                self.last_write.set(true);
                self.placed(*remote, Placed::Write, local.len());
            }
            Op::WriteImm { remote, local, imm } => {
                let p = self.resolve(wr, *remote, local.len(), false)?;
                fence(Ordering::Release);
                // SAFETY: resolve checked the range lies in the mapped region.
                unsafe { self.copy_out(p, local) };
                self.last_write.set(true);
                self.placed(*remote, Placed::WriteImm, local.len());
                self.push(wr, Msg::Imm(*imm, local.len() as u32)).await?;
            }
            Op::Cas {
                remote,
                compare,
                swap,
                old,
            } => {
                let p = self.resolve(wr, *remote, 8, true)?;
                // SAFETY: resolve checked range and 8-byte alignment.
                let w = unsafe { words::word(p) };
                match w.compare_exchange(*compare, *swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) => {
                        **old = v;
                        self.placed(*remote, Placed::Atomic, 8);
                    }
                    Err(v) => **old = v,
                }
                self.last_write.set(false);
            }
            Op::MaskedCas {
                remote,
                compare,
                swap,
                mask,
                old,
            } => {
                let p = self.resolve(wr, *remote, 8, true)?;
                // SAFETY: resolve checked range and 8-byte alignment.
                let w = unsafe { words::word(p) };
                let (c, sw, m) = (*compare, *swap, *mask);
                let r = w.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                    (v & m == c & m).then_some(v & !m | sw & m)
                });
                match r {
                    Ok(v) => {
                        **old = v;
                        self.placed(*remote, Placed::Atomic, 8);
                    }
                    Err(v) => **old = v,
                }
                self.last_write.set(false);
            }
            Op::Faa { remote, add, old } => {
                let p = self.resolve(wr, *remote, 8, true)?;
                // SAFETY: resolve checked range and 8-byte alignment.
                **old = unsafe { words::word(p) }.fetch_add(*add, Ordering::SeqCst);
                self.last_write.set(false);
                self.placed(*remote, Placed::Atomic, 8);
            }
            Op::Send { local } => {
                fence(Ordering::Release);
                self.push(wr, Msg::Send(local)).await?;
            }
        }
        Ok(())
    }
}

impl SoftQp {
    /// True if the peer has sent something not yet received.
    pub(crate) fn has_queued(&self) -> bool {
        self.rx.has_queued()
    }

    /// A memory node's end: tells the client why the node ends its connection (what its
    /// service refused), then hangs up. The client's verbs then fail with that reason.
    pub(crate) fn refuse(&self, why: &str) {
        if let Some(s) = &self.control {
            super::control::send_farewell(s, why);
        }
        self.close();
    }

    /// The error of a verb on a connection that ended: the memory node's reason if it gave
    /// one ([`SoftQp::refuse`]: a service that refused a geometry or version says so to
    /// the client, not only in its own log), else `RetryExceeded`.
    fn hung_up(&self) -> FabricError {
        if self.farewell.get().is_none()
            && let Some(s) = &self.control
        {
            self.farewell.set(super::control::read_farewell(s));
        }
        match self.farewell.get() {
            Some(why) => FabricError::RemoteInvalid {
                wr: 0,
                addr: GlobalAddr::NULL,
                why,
            },
            None => FabricError::RetryExceeded { node: self.peer },
        }
    }

    /// A memory node's reply: SENT now if the client has a receive posted, else kept (in
    /// order) for [`SoftQp::flush_outbox`]. A NIC retries a SEND that met no receive without
    /// holding any CPU, and RC can retry RNR forever; a server thread that waited instead
    /// served nobody else meanwhile, and gave up on a client that was only descheduled (or
    /// SIGSTOPped) after 0.5 s, dropping its connection: a false death (issue 26). Only
    /// evidence ends a connection: the client hung up (`RetryExceeded`), or it kept sending
    /// while reading nothing until [`OUTBOX_BYTES`] were queued (`RnrRetryExceeded`).
    pub(crate) fn send_or_queue(&self, msg: &[u8]) -> Result<(), FabricError> {
        if msg.len() > self.tx.max_msg() {
            return Err(FabricError::LocalLength {
                wr: 0,
                len: msg.len(),
                max: self.tx.max_msg(),
            });
        }
        if self.tx.is_closed() {
            return Err(FabricError::RetryExceeded { node: self.peer });
        }
        self.counters.count_post(&[Op::Send { local: msg }]);
        fence(Ordering::Release);
        if self.flush_outbox()? && self.tx.try_push(RecvKind::Send, 0, msg)? {
            self.tx.wake_consumer();
        } else {
            let bytes = self.outbox_bytes.get() + msg.len();
            if bytes > OUTBOX_BYTES {
                return Err(FabricError::RnrRetryExceeded);
            }
            self.outbox.borrow_mut().push_back(msg.to_vec());
            self.outbox_bytes.set(bytes);
        }
        Ok(())
    }

    /// SENDs the kept replies the client now has receives for, oldest first: true once none
    /// is left. Fails only if the client hung up.
    pub(crate) fn flush_outbox(&self) -> Result<bool, FabricError> {
        if self.outbox.borrow().is_empty() {
            return Ok(true);
        }
        if self.tx.is_closed() {
            return Err(FabricError::RetryExceeded { node: self.peer });
        }
        let mut out = self.outbox.borrow_mut();
        while let Some(m) = out.front() {
            fence(Ordering::Release);
            if !self.tx.try_push(RecvKind::Send, 0, m)? {
                self.rnr_naks.set(self.rnr_naks.get() + 1);
                self.tx.wake_consumer();
                return Ok(false);
            }
            self.outbox_bytes.set(self.outbox_bytes.get() - m.len());
            out.pop_front();
        }
        self.tx.wake_consumer();
        Ok(true)
    }

    /// The next message the peer queued, even once this queue pair broke: a memory node
    /// whose reply to a client failed (the client died, or stopped receiving) still handles
    /// what that client had sent before, as a NIC's receive queue keeps what arrived.
    pub(crate) fn take_queued(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        self.pop(buf)
    }

    fn pop(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        let r = self.rx.try_pop(buf)?;
        if let Some(r) = &r {
            bump_activity();
            fence(Ordering::Acquire);
            self.counters.count_recv(if r.kind == RecvKind::Send {
                r.len as usize
            } else {
                0
            });
        }
        Ok(r)
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        self.close();
    }
}

impl QueuePair for SoftQp {
    fn peer(&self) -> NodeId {
        self.peer
    }

    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        if self.broken.get() {
            self.counters.count_error();
            return Err(FabricError::Flushed);
        }
        if self
            .peer_dead
            .as_ref()
            .is_some_and(|d| d.load(Ordering::Relaxed))
            || self.is_closed()
        {
            // A dead or departed peer: no verb completes, as on a NIC after its retries.
            self.broken.set(true);
            self.counters.count_error();
            return Err(self.hung_up());
        }
        self.counters.count_post(ops);
        bump_activity();
        let mut result = Ok(());
        for (wr, op) in ops.iter_mut().enumerate() {
            if let Err(e) = self.exec(wr, op).await {
                self.broken.set(true);
                self.counters.count_error();
                result = Err(e);
                break;
            }
        }
        // The completion arrives after the post: other coroutines run in between.
        yield_now().await;
        self.counters.count_round_trip();
        result
    }

    async fn recv<'a>(&'a self, buf: &'a mut [u8]) -> Result<Recv, FabricError> {
        let mut checked = Instant::now();
        let start = checked;
        let mut activity = ACTIVITY.with(Cell::get).wrapping_sub(1);
        loop {
            if let Some(r) = self.try_recv(buf)? {
                return Ok(r);
            }
            if self.rx.is_closed() {
                return Err(self.hung_up());
            }
            if checked.elapsed() > LIVENESS_EVERY {
                if !self.peer_alive() {
                    return Err(FabricError::RetryExceeded { node: self.peer });
                }
                checked = Instant::now();
            }
            let now = ACTIVITY.with(Cell::get);
            if start.elapsed() > SPIN_BEFORE_YIELD {
                if now == activity {
                    // A long wait, and nothing else on this thread moved since our last look
                    // (its other coroutines wait too): sleep until the peer pushes (it wakes
                    // us) instead of yielding, which gave a busy loop on this core the CPU a
                    // time slice at a time (issue 26).
                    self.rx.sleep_until_pushed(SLEEP_AT_MOST);
                } else {
                    std::thread::yield_now();
                }
            }
            activity = ACTIVITY.with(Cell::get);
            yield_now().await;
        }
    }

    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        if self.broken.get() {
            return Err(FabricError::Flushed);
        }
        self.pop(buf)
    }

    fn max_message(&self) -> usize {
        self.tx.max_msg()
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn is_broken(&self) -> bool {
        self.broken.get()
    }

    fn clock_ns(&self) -> Option<u64> {
        Some(crate::clock::monotonic_ns())
    }

    fn pause(&self, ns: u64) -> impl std::future::Future<Output = ()> {
        super::timer::pause(ns)
    }
}

/// A client's queue pairs, one per memory node.
pub struct SoftEndpoint {
    qps: Vec<SoftQp>,
    nodes: Vec<NodeId>,
}

impl SoftEndpoint {
    /// An endpoint over `qps`; each queue pair serves the memory node it is connected to (the
    /// first of them, if two reach the same node).
    pub fn new(qps: Vec<SoftQp>) -> SoftEndpoint {
        let nodes = qps.iter().map(|q| q.peer).collect();
        SoftEndpoint { qps, nodes }
    }

    /// The queue pairs, in the order given to [`SoftEndpoint::new`].
    pub fn qps(&self) -> &[SoftQp] {
        &self.qps
    }

    /// Sum of the counters of every queue pair.
    pub fn snapshot(&self) -> remora_core::Snapshot {
        self.qps
            .iter()
            .map(|q| q.counters.snapshot())
            .fold(Default::default(), |a, b| a + b)
    }
}

impl Endpoint for SoftEndpoint {
    type Qp = SoftQp;
    fn qp(&self, node: NodeId) -> Result<&SoftQp, FabricError> {
        self.qps
            .iter()
            .find(|q| q.peer == node)
            .ok_or(FabricError::UnknownNode { node })
    }
    fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }
    /// The client id of the first queue pair (each connection has its own; an index that
    /// names itself in lock words on several nodes uses the one of the node it locks on —
    /// its queue pair's [`SoftQp::client_id`]).
    fn client_id(&self) -> u32 {
        self.qps.first().map_or(0, SoftQp::client_id)
    }
    fn now_ns(&self) -> u64 {
        crate::clock::monotonic_ns()
    }
    fn pause(&self, ns: u64) -> impl std::future::Future<Output = ()> {
        super::timer::pause(ns)
    }
    async fn fence(&self, node: NodeId, client: u32) -> Result<(), FabricError> {
        let qp = self.qp(node)?;
        let mem = qp.mem.as_ref().ok_or(FabricError::UnknownNode { node })?;
        mem.fence(client);
        Ok(())
    }
}

//! The responder side of a verb: what happens when a request reaches the target NIC.
//!
//! At arrival (`Ev::Arrive`, the time the request's first byte is in) the NIC
//! 1. takes the request off its receive link (queueing behind traffic that reached the link
//!    earlier; links are calendars reserved in the order data reaches them),
//! 2. admits it to its processing engine, one op per `1/nic_mops` (the message-rate bound),
//! 3. checks key, bounds and alignment (errors touch no memory and break the queue pair),
//! 4. runs the verb's pipeline, keeping every memory effect of a queue pair strictly after
//!    the previous one (per-QP order):
//!    - READ: segments are sampled one link-step apart, just in time for the response to
//!      leave `pcie_read_ns` later on the transmit link;
//!    - WRITE: segments are placed one step apart from `pcie_write_ns` after admission; the
//!      ack leaves after the last one;
//!    - CMP_AND_SWP / FETCH_AND_ADD: the word's lock slot is held for `host_atomic_ns`
//!      (device memory: `1/dm_atomic_mops`); the op takes effect when it gets the slot. With
//!      `host_atomic_stalls` = N the NIC has N processing units: a host-memory atomic keeps
//!      one from its admission until it gets the slot, and step 2 also waits for a free
//!      unit, so N waiting atomics stall every later request to the NIC and fewer do not
//!      (N = 1: the whole engine; each unit is a free-at time, the earliest-free one taken);
//!    - SEND / WRITE_WITH_IMM: need a posted receive at the target, else RNR NAK and retry
//!      every `rnr_timer_ns` (+ a round trip), at most `rnr_retry` times after the first
//!      attempt (the NAK of the last one fails the op, 0: no retry); the queue pair's
//!      later requests wait behind the held one. The receive is consumed when the request
//!      is admitted; the completion is raised one ps after the last byte is placed and goes
//!      to the waiting receiver, or, at a memory node, to the FIFO of the handler thread of
//!      the connection (`server.rs`), which reposts the receive once its handler consumed it.
use super::engine::{Ev, Kind, NO_TASK, RxDone, World};
use super::memory::Refused;
use super::model::Ps;
use remora_core::fabric::{FabricError, RecvKind, SegmentOrder};

impl World {
    pub(super) fn arrive(&mut self, id: u32) {
        let now = self.now;
        let end = {
            let o = self.ops.get_mut(id);
            o.arrived = now;
            o.end as usize
        };
        let peer = self.ends[end].peer as usize;
        let tnic = self.ends[peer].nic as usize;
        if self.nics[tnic].dead || self.ends[peer].stale {
            // No response will ever come (a dead node, or a restarted one that does not know
            // this queue pair): the requester retries, then gives up.
            let b = self.ops.get(id).batch;
            let posted = self.batches.get(b).posted_at;
            let node = self.ends[end].node;
            self.trace_op(id, || "arrives at a dead node: no answer".into());
            self.break_end(end as u32);
            let at = (posted + self.tm.dead_timeout).max(now);
            self.finish(id, Some(FabricError::RetryExceeded { node }), at);
            return;
        }
        if self.ends[end].broken {
            self.finish(id, Some(FabricError::Flushed), now);
            return;
        }
        if self.ends[peer].held.is_some() {
            self.ends[peer].backlog.push_back(id);
            return;
        }
        self.process(id);
    }

    /// Traces `what()` for op `id` if its batch is traced (the text is built only then).
    fn trace_op(&mut self, id: u32, what: impl FnOnce() -> String) {
        let o = self.ops.get(id);
        if o.traced {
            let line = format!("  wr {}: {}", o.wr, what());
            let n = self.batches.get(o.batch).number;
            self.trace.line(self.now, n, line);
        }
    }

    /// Fails op `id` at the responder: a NAK leaves at `at`, the queue pair breaks.
    fn fail(&mut self, id: u32, at: Ps, err: FabricError) {
        let end = self.ops.get(id).end;
        self.trace_op(id, || format!("refused: {err}"));
        self.break_end(end);
        let bytes = self.model.msg_bytes(0);
        self.respond_at(id, at, bytes, Some(err), 0);
    }

    fn process(&mut self, id: u32) {
        let now = self.now;
        let (kind, len, remote, end, wr, local_err) = {
            let o = self.ops.get(id);
            (
                o.kind,
                o.len as u64,
                o.remote,
                o.end as usize,
                o.wr as usize,
                o.local_err,
            )
        };
        let peer = self.ends[end].peer as usize;
        let tnic = self.ends[peer].nic as usize;
        let w = self.wire(self.request_bytes(kind, len));
        let nic_op = self.nics[tnic].scale(self.tm.nic_op);
        let n = &mut self.nics[tnic];
        // `now` is when the first byte is in: the link is reserved in arrival order.
        let rx_start = n.rx.reserve(now, now, w);
        // Admitted once the engine takes a request and a processing unit is free (the units
        // only matter with `host_atomic_stalls`: waiting atomics keep them).
        let e = (rx_start + w)
            .max(n.engine_free)
            .max(n.unit_free(self.tm.atomic_units));
        n.engine_free = e + nic_op;
        if let Some(err) = local_err {
            self.fail(id, e, err);
            return;
        }
        let one_sided = kind != Kind::Send;
        let node = self.nics[tnic].node.map(|n| n as usize);
        if one_sided {
            let atomic = matches!(kind, Kind::Cas | Kind::MaskedCas | Kind::Faa);
            let size = if atomic { 8 } else { len };
            let refused = match node {
                None => Some(Refused::Access),
                Some(n) => self.nodes[n]
                    .check(remote, size, self.ends[end].key, atomic)
                    .err(),
            };
            match refused {
                Some(Refused::Access) => {
                    let err = FabricError::RemoteAccess {
                        wr,
                        addr: remote,
                        len: size as usize,
                    };
                    self.fail(id, e, err);
                    return;
                }
                Some(Refused::Misaligned) => {
                    let why = "atomic target is not 8-byte aligned";
                    self.fail(
                        id,
                        e,
                        FabricError::RemoteInvalid {
                            wr,
                            addr: remote,
                            why,
                        },
                    );
                    return;
                }
                None => {
                    if let Some(n) = node {
                        self.nodes[n].prefetch(remote.is_device(), remote.offset(), size);
                    }
                }
            }
        }
        if matches!(kind, Kind::Send | Kind::WriteImm) {
            if self.ends[peer].rq_credits == 0 {
                self.hold(id);
                return;
            }
            self.ends[peer].rq_credits -= 1;
        }
        let dm = remote.is_device();
        let last = self.ends[peer].last_effect;
        let step = self.tm.step;
        let scale = |w: &World, t: Ps| w.nics[tnic].scale(t);
        match kind {
            Kind::Read => {
                let pr = if dm {
                    0
                } else {
                    scale(self, self.tm.pcie_read)
                };
                let nseg = self.segments(remote.offset(), len);
                let resp = self.response_bytes(kind, len);
                let tx = self.reserve_tx(tnic, e.max(last + 1) + pr, resp);
                let s0 = tx - pr;
                let last_eff = s0 + (nseg.max(1) as Ps - 1) * self.tm.read_step;
                if nseg > 0 {
                    self.ends[peer].last_effect = last_eff;
                }
                self.set_timeline(id, s0, nseg);
                self.trace_op(id, || {
                    format!(
                        "admitted {}, sampled {} segment(s) from {}",
                        fmt(e),
                        nseg,
                        fmt(s0)
                    )
                });
                self.respond(id, tx, resp, None, last_eff);
                if nseg > 0 {
                    self.at(s0, Ev::Segment(id, 0));
                }
            }
            Kind::Write | Kind::WriteImm | Kind::Send => {
                let pw = if dm {
                    0
                } else {
                    scale(self, self.tm.pcie_write)
                };
                let nseg = if kind == Kind::Send {
                    len.div_ceil(self.tm.segment) as u32
                } else {
                    self.segments(remote.offset(), len)
                };
                let t0 = (e + pw).max(last + 1);
                let last_eff = t0 + (nseg.max(1) as Ps - 1) * step;
                let ack = if kind == Kind::Write {
                    last_eff
                } else {
                    last_eff + 1
                };
                self.ends[peer].last_effect = ack;
                self.set_timeline(id, t0, nseg);
                self.trace_op(id, || {
                    format!(
                        "admitted {}, placed {} segment(s) from {}",
                        fmt(e),
                        nseg,
                        fmt(t0)
                    )
                });
                let resp = self.response_bytes(kind, len);
                self.respond_at(id, ack, resp, None, ack);
                if kind != Kind::Send && nseg > 0 {
                    self.at(t0, Ev::Segment(id, 0));
                }
                if kind != Kind::Write {
                    self.at(ack, Ev::Deliver(id));
                }
            }
            Kind::Cas | Kind::MaskedCas | Kind::Faa => {
                let Some(n) = node else {
                    let err = FabricError::RemoteAccess {
                        wr,
                        addr: remote,
                        len: 8,
                    };
                    self.fail(id, e, err);
                    return;
                };
                let slots = self.nodes[n].atomic_free.len() as u64;
                let slot = (hash(remote.raw() >> 3) % slots) as usize;
                let (free, occ) = if dm {
                    (
                        self.nodes[n].dm_atomic_free[slot],
                        scale(self, self.tm.dm_atomic),
                    )
                } else {
                    (
                        self.nodes[n].atomic_free[slot],
                        scale(self, self.tm.host_atomic),
                    )
                };
                let a = e.max(free).max(last + 1);
                if dm {
                    self.nodes[n].dm_atomic_free[slot] = a + occ;
                } else {
                    self.nodes[n].atomic_free[slot] = a + occ;
                }
                self.ends[peer].last_effect = a;
                if !dm {
                    // Waiting for the slot, the atomic keeps a processing unit
                    // (`host_atomic_stalls`; none when it is 0).
                    self.nics[tnic].keep_unit(self.tm.atomic_units, a);
                }
                self.set_timeline(id, a, 1);
                self.trace_op(id, || {
                    format!(
                        "admitted {}, word lock from {} for {}",
                        fmt(e),
                        fmt(a),
                        fmt(occ)
                    )
                });
                let resp = self.response_bytes(kind, len);
                self.respond_at(id, a + occ, resp, None, a);
                self.at(a, Ev::Atomic(id));
            }
        }
    }

    fn set_timeline(&mut self, id: u32, t0: Ps, nseg: u32) {
        let kind = self.ops.get(id).kind;
        // The segment order (rule 2 of the contract promises none): a random rotation and a
        // random stride coprime with the count. With the tail-last assumption a WRITE's last
        // segment keeps the last slot and only the others are shuffled.
        let (mut start, mut stride) = (0, 1);
        let shuffled = match self.segment_order {
            SegmentOrder::Ascending => 0,
            SegmentOrder::Shuffled => nseg,
            SegmentOrder::ShuffledTailLast if kind == Kind::Read => nseg,
            SegmentOrder::ShuffledTailLast => nseg.saturating_sub(1),
        };
        if shuffled > 1 && kind != Kind::Send {
            let (s, k) = SegmentOrder::permutation(shuffled as usize, self.seg_rng.next_u64());
            (start, stride) = (s as u32, k as u32);
        }
        let o = self.ops.get_mut(id);
        o.t0 = t0;
        o.nseg = nseg;
        o.perm_start = start;
        o.perm_stride = stride;
    }

    /// Handles `ev` now if it is due now, else schedules it.
    fn at(&mut self, t: Ps, ev: Ev) {
        if t <= self.now {
            match ev {
                Ev::Segment(id, i) => self.segment(id, i),
                Ev::Atomic(id) => self.do_atomic(id),
                Ev::Deliver(id) => self.deliver(id),
                other => self.schedule(t, other),
            }
        } else {
            self.schedule(t, ev);
        }
    }

    /// How many of an op's `nseg` segments are shuffled (the rest keep their slots).
    fn shuffled_len(&self, kind: Kind, nseg: u32) -> u32 {
        match self.segment_order {
            SegmentOrder::Ascending => 0,
            SegmentOrder::ShuffledTailLast if kind != Kind::Read => nseg.saturating_sub(1),
            _ => nseg,
        }
    }

    /// Aligned segments covering `len` bytes at `off`.
    fn segments(&self, off: u64, len: u64) -> u32 {
        if len == 0 {
            return 0;
        }
        let s = self.tm.segment;
        ((off + len).div_ceil(s) - off / s) as u32
    }

    fn node_of_end_peer(&self, end: usize) -> Option<usize> {
        let tnic = self.ends[self.ends[end].peer as usize].nic as usize;
        if self.nics[tnic].dead {
            return None;
        }
        self.nics[tnic].node.map(|n| n as usize)
    }

    pub(super) fn segment(&mut self, id: u32, i: u32) {
        let (kind, remote, len, end, t0, nseg) = {
            let o = self.ops.get(id);
            (o.kind, o.remote, o.len as u64, o.end as usize, o.t0, o.nseg)
        };
        let Some(n) = self.node_of_end_peer(end) else {
            return;
        };
        let s = self.tm.segment;
        let off = remote.offset();
        let (start, stride) = {
            let o = self.ops.get(id);
            (o.perm_start as u64, o.perm_stride as u64)
        };
        // Slot i handles a shuffled segment; a tail-last segment keeps its slot.
        let k = self.shuffled_len(kind, nseg);
        let seg = if i < k {
            (start + i as u64 * stride) % k as u64
        } else {
            i as u64
        };
        let blk = off / s + seg;
        let lo = off.max(blk * s);
        let hi = (off + len).min((blk + 1) * s);
        if lo >= hi {
            return;
        }
        let dm = remote.is_device();
        let range = (lo - off) as usize..(hi - off) as usize;
        let now = self.now;
        let node = &mut self.nodes[n];
        let o = self.ops.get_mut(id);
        match kind {
            Kind::Read => node.sample(dm, lo, &mut o.buf[range], end as u32, now),
            _ => node.store(dm, lo, &o.buf[range], end as u32, kind),
        }
        if o.traced {
            let what = if kind == Kind::Read {
                "sampled"
            } else {
                "applied"
            };
            self.trace_op(id, || format!("segment {seg} [{lo:#x}..{hi:#x}) {what}"));
        }
        if i + 1 < nseg {
            let step = if kind == Kind::Read {
                self.tm.read_step
            } else {
                self.tm.step
            };
            self.schedule(t0 + (i as Ps + 1) * step, Ev::Segment(id, i + 1));
        }
    }

    pub(super) fn do_atomic(&mut self, id: u32) {
        let (kind, remote, end, x, y, mask) = {
            let o = self.ops.get(id);
            (o.kind, o.remote, o.end as usize, o.x, o.y, o.mask)
        };
        let Some(n) = self.node_of_end_peer(end) else {
            return;
        };
        let old = self.nodes[n].atomic(
            remote.is_device(),
            remote.offset(),
            x,
            y,
            kind == Kind::Faa,
            mask,
            end as u32,
        );
        self.ops.get_mut(id).result = old;
        self.trace_op(id, || format!("atomic executed: old value {old:#x}"));
    }

    pub(super) fn deliver(&mut self, id: u32) {
        let (kind, end, len, imm) = {
            let o = self.ops.get(id);
            (o.kind, o.end as usize, o.len, o.imm)
        };
        let peer = self.ends[end].peer as usize;
        let tnic = self.ends[peer].nic as usize;
        if self.nics[tnic].dead || self.ends[peer].stale {
            return;
        }
        let rx = match kind {
            Kind::Send => RxDone {
                kind: Some(RecvKind::Send),
                len,
                imm: None,
                data: std::mem::take(&mut self.ops.get_mut(id).buf),
            },
            _ => RxDone {
                kind: Some(RecvKind::WriteImm),
                len,
                imm: Some(imm),
                data: Vec::new(),
            },
        };
        self.trace_op(id, || "receive completion raised at the target".into());
        self.ends[peer].cq.push_back(rx);
        self.wake_receiver(peer);
    }

    /// A receive completion is waiting at `end`: wake its receiver, or queue it at the
    /// memory node's handler thread that serves the connection (starting that thread's task
    /// on its first message).
    pub(super) fn wake_receiver(&mut self, end: usize) {
        let e = &mut self.ends[end];
        if e.server {
            let (node, thread) = (e.node, e.thread);
            let Some(t) = self
                .nodes
                .get_mut(node as usize)
                .and_then(|n| n.threads.get_mut(thread as usize))
            else {
                return;
            };
            t.queue.push_back(end as u32);
            if let Some(task) = t.wake() {
                self.make_ready(task);
            } else if t.task == NO_TASK && !t.starting {
                t.starting = true;
                self.to_serve.push((node, thread));
            }
            return;
        }
        let waiters = std::mem::take(&mut e.recv_waiters);
        for &w in &waiters {
            self.make_ready(w);
        }
        self.ends[end].recv_waiters = waiters;
        self.ends[end].recv_waiters.clear();
    }

    /// Op `id`'s first attempt found no receive: it holds the peer's later requests.
    fn hold(&mut self, id: u32) {
        let peer = self.ends[self.ops.get(id).end as usize].peer as usize;
        self.ends[peer].held = Some(id);
        self.rnr_nak(id);
    }

    /// Op `id` (holding its peer) found no receive, at its first attempt or a retry: an RNR
    /// NAK. It is retried one RNR period later while retries are left (`rnr_retry` after the
    /// first attempt, as the soft fabric's `RnrPolicy` and verbs count them), else it fails.
    fn rnr_nak(&mut self, id: u32) {
        self.stats.rnr_naks += 1;
        let o = self.ops.get_mut(id);
        let end = o.end as usize;
        if o.rnr_left > 0 {
            o.rnr_left -= 1;
            self.trace_op(id, || "no receive posted: RNR NAK".into());
            let at = self.now + self.tm.rnr_period;
            self.schedule(at, Ev::RnrRetry(id));
            return;
        }
        let peer = self.ends[end].peer as usize;
        self.ends[peer].held = None;
        self.break_end(end as u32);
        let at = self.now + self.tm.one_way;
        self.trace_op(id, || "RNR retries exhausted".into());
        self.finish(id, Some(FabricError::RnrRetryExceeded), at);
        self.release(peer);
    }

    pub(super) fn rnr_retry(&mut self, id: u32) {
        let end = self.ops.get(id).end as usize;
        let peer = self.ends[end].peer as usize;
        if self.ends[peer].held != Some(id) {
            return;
        }
        let tnic = self.ends[peer].nic as usize;
        if !self.nics[tnic].dead && self.ends[peer].rq_credits == 0 {
            self.rnr_nak(id);
            return;
        }
        self.ends[peer].held = None;
        self.arrive(id);
        self.release(peer);
    }

    /// The requests that waited behind a held one at `peer` arrive, until one is held again.
    fn release(&mut self, peer: usize) {
        while self.ends[peer].held.is_none() {
            let Some(next) = self.ends[peer].backlog.pop_front() else {
                break;
            };
            self.arrive(next);
        }
    }
}

fn fmt(t: Ps) -> String {
    super::trace::fmt_ps(t)
}

/// Spreads word addresses over the atomic unit's lock slots.
fn hash(x: u64) -> u64 {
    let x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29)
}

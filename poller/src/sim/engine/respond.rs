//! The response path of a verb: wire sizes, the response leaving its responder and
//! reaching its requester, in-order completion of a queue pair's ops and of batches.

use super::*;

impl World {
    /// Serialization time of `bytes` (same arithmetic as `Model::wire_ps`).
    pub fn wire(&self, bytes: u64) -> Ps {
        (bytes * self.tm.mppb).div_ceil(1000)
    }

    pub fn request_bytes(&self, kind: Kind, len: u64) -> u64 {
        let m = &self.model;
        match kind {
            Kind::Read => m.msg_bytes(0),
            Kind::Write | Kind::WriteImm | Kind::Send => m.msg_bytes(len),
            Kind::Cas => m.msg_bytes(16),
            // The extended atomic's operands: compare, swap and their two masks.
            Kind::MaskedCas => m.msg_bytes(32),
            Kind::Faa => m.msg_bytes(8),
        }
    }

    pub fn response_bytes(&self, kind: Kind, len: u64) -> u64 {
        let m = &self.model;
        match kind {
            Kind::Read => m.msg_bytes(len),
            Kind::Cas | Kind::MaskedCas | Kind::Faa => m.msg_bytes(8),
            _ => m.msg_bytes(0),
        }
    }

    /// The response of op `id` (`bytes` on the wire, `err`, never completing before
    /// `last_effect`) is ready to leave its responder at `ready`: its transmit link is
    /// reserved at that time (`Ev::RespTx`), then it flies to the requester.
    pub fn respond_at(
        &mut self,
        id: u32,
        ready: Ps,
        bytes: u64,
        err: Option<FabricError>,
        last_effect: Ps,
    ) {
        self.queue_response(id, bytes, err, last_effect);
        self.schedule(ready, Ev::RespTx(id));
    }

    /// Records op `id`'s response (`bytes`, `err`, not completing before `last_effect`) and
    /// queues it at its end, in the order responses leave.
    fn queue_response(&mut self, id: u32, bytes: u64, err: Option<FabricError>, last_effect: Ps) {
        let o = self.ops.get_mut(id);
        o.resp_bytes = bytes;
        o.resp_err = err;
        o.resp_after = last_effect;
        o.resp_in = 0;
        let end = o.end as usize;
        self.ends[end].responses.push_back(id);
    }

    pub(super) fn response_leaves(&mut self, id: u32) {
        let (end, bytes) = {
            let o = self.ops.get(id);
            (o.end as usize, o.resp_bytes)
        };
        let tnic = self.ends[self.ends[end].peer as usize].nic as usize;
        let now = self.now;
        let tx = self.reserve_tx(tnic, now, bytes);
        self.response_sent(id, tx);
    }

    /// The response of op `id` leaves its responder at `tx_start` (link already reserved:
    /// a READ's response is reserved when the READ executes, its sampling timed by it).
    pub fn respond(
        &mut self,
        id: u32,
        tx_start: Ps,
        bytes: u64,
        err: Option<FabricError>,
        last_effect: Ps,
    ) {
        self.queue_response(id, bytes, err, last_effect);
        self.response_sent(id, tx_start);
    }

    pub(super) fn response_sent(&mut self, id: u32, tx_start: Ps) {
        let fly = self.flight();
        let o = self.ops.get_mut(id);
        o.ack_at = tx_start;
        if o.traced {
            let line = format!(
                "  wr {}: response leaves {} ({} B)",
                o.wr,
                crate::sim::trace::fmt_ps(tx_start),
                o.resp_bytes,
            );
            let n = self.batches.get(o.batch).number;
            self.trace.line(self.now, n, line);
        }
        self.schedule(tx_start + fly, Ev::RespRx(id));
    }

    /// The first byte of op `id`'s response is in at the requester: reserve the receive
    /// link, then finish every op of the queue pair whose response is complete, in op order.
    pub(super) fn response_arrives(&mut self, id: u32) {
        let (end, bytes) = {
            let o = self.ops.get(id);
            (o.end as usize, o.resp_bytes)
        };
        let w = self.wire(bytes);
        let req_nic = self.ends[end].nic as usize;
        let now = self.now;
        let rx = self.nics[req_nic].rx.reserve(now, now, w);
        self.ops.get_mut(id).resp_in = rx + w;
        while let Some(&head) = self.ends[end].responses.front() {
            let (resp_in, after, err) = {
                let o = self.ops.get(head);
                (o.resp_in, o.resp_after, o.resp_err)
            };
            if resp_in == 0 {
                break;
            }
            self.ends[end].responses.pop_front();
            let e = &mut self.ends[end];
            let done = resp_in.max(e.last_done + 1).max(after + 1);
            e.last_done = done;
            let o = self.ops.get(head);
            if o.traced {
                let line = format!(
                    "  wr {}: completes at requester {}{}",
                    o.wr,
                    crate::sim::trace::fmt_ps(done),
                    err.map(|e| format!(" with error: {e}")).unwrap_or_default()
                );
                let n = self.batches.get(o.batch).number;
                self.trace.line(self.now, n, line);
            }
            self.finish(head, err, done);
        }
    }

    /// Reserves the responder NIC's transmit link for a `bytes` response from `at`.
    pub fn reserve_tx(&mut self, nic: usize, at: Ps, bytes: u64) -> Ps {
        let w = self.wire(bytes);
        let n = &mut self.nics[nic];
        n.tx.reserve(self.now, at, w)
    }

    /// Op `id` is done at its requester at `done` (with `err`, if it failed).
    pub fn finish(&mut self, id: u32, err: Option<FabricError>, done: Ps) {
        let (b, wr) = {
            let o = self.ops.get(id);
            (o.batch, o.wr)
        };
        let batch = self.batches.get_mut(b);
        batch.remaining = batch.remaining.saturating_sub(1);
        batch.done_at = batch.done_at.max(done);
        // The batch reports its first failing work request (later ones are flushed by it,
        // whichever finished first in virtual time).
        if err.is_some() && (batch.err.is_none() || wr < batch.err_wr) {
            batch.err = err.map(|e| with_wr(e, wr as usize));
            batch.err_wr = wr;
        }
        if batch.remaining == 0 {
            let at = batch.done_at;
            self.schedule(at, Ev::Complete(b));
        }
    }

    /// The requester side of `end` enters the error state.
    pub fn break_end(&mut self, end: u32) {
        let e = &mut self.ends[end as usize];
        if !e.broken {
            e.broken = true;
            let waiters = std::mem::take(&mut e.recv_waiters);
            for &w in &waiters {
                self.make_ready(w);
            }
            self.ends[end as usize].recv_waiters = waiters;
            self.ends[end as usize].recv_waiters.clear();
        }
    }

    pub(super) fn complete(&mut self, b: u32) {
        // A memory node that crashed before an op's response left never sent it: the
        // requester times out instead.
        let (end, posted) = {
            let batch = self.batches.get(b);
            (batch.end as usize, batch.posted_at)
        };
        let node = self.ends[end].node as usize;
        let server = self.ends[end].server;
        if !server
            && !self.batches.get(b).rechecked
            && node < self.nodes.len()
            && !self.nodes[node].crashes.is_empty()
        {
            let mut lost = None;
            for (i, &id) in self.batches.get(b).ops.iter().enumerate() {
                let o = self.ops.get(id);
                if self.nodes[node].crashed_between(o.arrived, o.ack_at) {
                    lost = Some(i);
                    break;
                }
            }
            if let Some(wr) = lost {
                let batch = self.batches.get_mut(b);
                batch.rechecked = true;
                if batch.err.is_none() || batch.err_wr > wr as u32 {
                    batch.err = Some(FabricError::RetryExceeded {
                        node: node as NodeId,
                    });
                    batch.err_wr = wr as u32;
                }
                let at = posted + self.tm.dead_timeout;
                self.break_end(end as u32);
                self.schedule(at, Ev::Complete(b));
                return;
            }
        }
        let (state, task, number) = {
            let batch = self.batches.get(b);
            (batch.state, batch.task, batch.number)
        };
        if self.trace.wants(number) {
            let err = self.batches.get(b).err;
            self.trace.line(
                self.now,
                number,
                format!(
                    "batch complete{}",
                    err.map(|e| format!(": {e}")).unwrap_or_default()
                ),
            );
        }
        match state {
            BatchState::Abandoned => self.free_batch(b),
            _ => {
                let batch = self.batches.get_mut(b);
                batch.state = BatchState::Done;
                if let Some(m) = batch.mark.take() {
                    m.mark();
                }
                self.make_ready(task);
            }
        }
    }

    /// Returns a batch and its ops' buffers to the pools.
    pub fn free_batch(&mut self, b: u32) {
        let ops = std::mem::take(&mut self.batches.get_mut(b).ops);
        for &id in &ops {
            let buf = std::mem::take(&mut self.ops.get_mut(id).buf);
            self.pool.give(buf);
            self.ops.free(id);
        }
        let batch = self.batches.get_mut(b);
        batch.ops = ops;
        batch.ops.clear();
        batch.mark = None;
        self.batches.free(b);
    }
}

//! Algorithm 1, the write path: lock by FETCH_AND_ADD (waiting for the ticket to be served,
//! and reporting a ticket stuck for a lease), check the bitmap, append with WRITE_WITH_IMM,
//! then (the default, [`WriteAck::Applied`]) wait until the server applied the item, or
//! ([`WriteAck::Posted`], the paper's weaker count) return at once.
use super::client::{Bracket, Canrt, Fresh, MAX_ITEM, Wrote, read_word};
use super::turn::Mailbox;
use super::view::{Found, NodeView, TreeView};
use super::{CanrtError, WriteAck};
use crate::fabric::{Endpoint, Op, QueuePair};
use crate::lease::{Verdict, Waiter};
use remora_layouts::GlobalAddr;
use remora_layouts::canrt::{
    Control, ControlKind, FRONT_OFF, Imm, ItemOp, LOCK_OFF, Meta, TICKET_MASK, tail_processed,
};

impl<E: Endpoint> Canrt<'_, E> {
    /// SENDs a control message about data node `id` of view `v`'s data array, whose meta
    /// word showed `epoch`.
    pub(super) async fn control(
        &self,
        kind: ControlKind,
        v: &TreeView,
        epoch: u32,
        id: u32,
        ticket: u64,
    ) -> Result<(), CanrtError> {
        let c = Control::new(kind, epoch, v.header.array_gen, id, ticket);
        self.qp()?.send(&c.encode()).await?;
        Ok(())
    }

    async fn unlock(
        &self,
        v: &TreeView,
        epoch: u32,
        id: u32,
        ticket: u64,
    ) -> Result<(), CanrtError> {
        self.control(ControlKind::Unlock, v, epoch, id, ticket)
            .await
    }

    /// Whether a write of `op` appends without looking at the node's items, knowing only its
    /// meta word (free slots, served ticket), as every write of Algorithm 1 does (§3.3: the
    /// client's steps are the same for insert, delete and update "except the opflag"; the
    /// server drops the key's older item when it applies the new one): an insert always;
    /// an update with [`WriteAck::Posted`], the paper's write, which then inserts an absent
    /// key as the paper's server validates the new item whether or not it found an old one
    /// (and reports the key present unless it happened to read the node and saw it absent).
    /// The default's update, and every delete, read the node first: they must not insert,
    /// and they report whether the key was there.
    fn blind(&self, op: ItemOp) -> bool {
        op == ItemOp::Insert || (op == ItemOp::Update && self.cfg.ack == WriteAck::Posted)
    }

    /// Algorithm 1: lock by FETCH_AND_ADD, check the bitmap, append with WRITE_WITH_IMM.
    pub(super) async fn write(
        &self,
        op: ItemOp,
        key: u128,
        value: &[u8],
    ) -> Result<bool, CanrtError> {
        let max = self.view().header.value_cap as usize;
        if value.len() > max {
            return Err(CanrtError::ValueTooLong {
                len: value.len(),
                max,
            });
        }
        self.drain_notices()?;
        for _ in 0..self.cfg.write_retries {
            match self.write_once(op, key, value).await? {
                Wrote::Done(present) => return Ok(present),
                Wrote::Again => continue,
            }
        }
        Err(CanrtError::Retries { what: "write" })
    }

    async fn write_once(&self, op: ItemOp, key: u128, value: &[u8]) -> Result<Wrote, CanrtError> {
        let qp = self.qp()?;
        let v = self.view();
        let g = v.data();
        if value.len() > g.value_cap as usize {
            return Err(CanrtError::ValueTooLong {
                len: value.len(),
                max: g.value_cap as usize,
            });
        }
        self.ep.charge(crate::work::Work::Probe(1));
        let id = v.locate(key).map_err(|why| CanrtError::Corrupt {
            addr: GlobalAddr::from_raw(v.root),
            why,
        })?;
        let addr = self.node_addr(&v, id);
        let mut b = self.bufs.take(v.header.data_node_size as usize);
        let buf = &mut b.buf;
        // Locking phase: the ticket and, in one doorbell (the READs run after the
        // FETCH_AND_ADD at the target, so they see our ticket counted), the meta word alone
        // for a write that appends without looking at the node's items (Algorithm 1's 8-byte
        // fetch), or a snapshot of the node for one that must know whether its key is there.
        let blind = self.blind(op);
        let mut ticket = 0u64;
        let mut bracket = Bracket::default();
        let mut front = [0u8; 8];
        {
            let mut ops: heapless::Vec<Op<'_>, 4> = heapless::Vec::new();
            // Cannot fail: the doorbell is empty.
            let _ = ops.push(Op::Faa {
                remote: addr.add(LOCK_OFF),
                add: 1,
                old: &mut ticket,
            });
            if blind {
                let _ = ops.push(Op::Read {
                    remote: addr.add(FRONT_OFF),
                    local: &mut front,
                });
            } else {
                self.push_snapshot(&mut ops, addr, &mut bracket, buf)?;
            }
            qp.post(&mut ops).await?;
        }
        let t = ticket & TICKET_MASK;
        if blind {
            let m = Meta(u64::from_le_bytes(front));
            if m.served() == t && !m.frozen() && m.epoch() == v.epoch_tag() {
                // Our turn at once: append (the checking and writing phases need only the
                // bitmap).
                return self
                    .put(&v, id, addr, m, op == ItemOp::Update, op, key, value, t)
                    .await;
            }
            // Not our turn yet, or the node is being resized: wait as any write does, from a
            // snapshot of the node.
            self.read_snapshot(addr, &mut bracket, buf).await?;
        }
        let mut polls = 0u32;
        let mut bad = 0u32;
        let since = self.ep.now_ns();
        // The lease counts only time watched (`crate::lease`, "Stalls"): a writer stopped
        // while it waits does not report a live holder's ticket stuck. Its looks are up to a
        // quarter lease apart (a turn notice awaited, below).
        let mut waiter =
            Waiter::new(self.cfg.lease, since).watching_paced(self.cfg.lease.lease_ns / 4);
        let mut seen = t;
        let mut moved_at = since;
        let mut report = false;
        // Leases the served ticket stayed with its holder's item in the node, unapplied.
        let mut held_leases = 0u32;
        // Registered for a turn notice (and `Wait` sent): unregistered however we leave.
        let _asked = Asked {
            mailbox: &self.mailbox,
            node: id,
            ticket: t as u16,
            applied: false,
        };
        let mut asked = false;
        // Consecutive notice waits that ran out without the served ticket moving.
        let mut late = 0u32;
        // The node's epoch as last looked at whole (below): a new one is re-read at once, to
        // notice a new tree; the same one again is waited on like ours, lease and all.
        let mut checked = v.epoch_tag();
        loop {
            let nv = match self.snapshot(g, &bracket, buf) {
                Ok(Some(nv)) => Some(nv),
                Ok(None) => None,
                Err(why) => {
                    bad += 1;
                    if bad > self.cfg.read_retries {
                        return Err(CanrtError::Corrupt { addr, why });
                    }
                    None
                }
            };
            if let Some(nv) = nv {
                checked = nv.front.epoch();
                let served = nv.front.served();
                let current = !nv.front.frozen() && nv.front.epoch() == v.epoch_tag();
                if served == t && current {
                    return self.append(&v, id, addr, &nv, op, key, value, t).await;
                }
                if served == t {
                    // Our turn, on a node being drained for a resize or of a newer epoch:
                    // hand the lock back (with the epoch the node has), then start over on
                    // the next tree.
                    self.unlock(&v, nv.front.epoch(), id, t).await?;
                    self.await_thaw(&v, addr).await?;
                    return Ok(Wrote::Again);
                }
                if !current
                    && matches!(self.fresh(&v, &nv).await?, Fresh::NewView)
                    && self.view().header.array_gen != v.header.array_gen
                {
                    // The node is in a retired data array: nobody serves tickets there.
                    return Ok(Wrote::Again);
                }
                // Tickets ahead of ours wait; one behind means ours was skipped (we were
                // reported stalled before our turn came to us): we appended nothing under
                // it, so take a new one. Handing it back frees the slot the skip reserved
                // for our append.
                if skipped(t, served) {
                    Self::bump(&self.skips);
                    self.unlock(&v, v.epoch_tag(), id, t).await?;
                    return Ok(Wrote::Again);
                }
                // The same ticket served for a lease: the holder died or stalled, ask for a
                // skip. If its item is in the node, the server may only be slow (its notice
                // on the way), so that waits a second lease; but a holder killed between its
                // item and its notice (soft's WRITE_WITH_IMM places the item, then queues the
                // notice) sends none: the skip applies the item as the notice would have.
                // Never reporting it wedged the node (issue 26).
                if report && served == seen {
                    let held = nv.pending().is_some();
                    held_leases = if held { held_leases + 1 } else { 0 };
                    if !held || held_leases >= 2 {
                        Self::bump(&self.skip_requests);
                        self.control(ControlKind::Skip, &v, v.epoch_tag(), id, served)
                            .await?;
                    }
                } else if served != seen {
                    held_leases = 0;
                }
                seen = served;
            } else {
                Self::bump(&self.torn);
            }
            report = false;
            // Wait for our turn: ask the server once to tell us (`Wait`), then wait for its
            // notice, costing the memory node nothing. A notice that is late (lost, or a
            // fabric that delivers none) has us READ the meta word, backing off; a served
            // ticket that does not move for a lease is reported to the server, which skips
            // it. A frozen node is re-read now and then, to notice a new tree.
            loop {
                polls += 1;
                if polls > self.cfg.lock_polls {
                    return Err(self.lock_timeout(addr, seen, t, since));
                }
                // Next in line (one ticket ahead, its holder appending now): READ the meta
                // word when that holder should be done instead of asking; a `Wait` and its
                // notice cost the server's CPU two messages, a READ costs it nothing.
                let next = t.wrapping_sub(seen) & TICKET_MASK == 1;
                if !asked && !next && self.cfg.turn_notices && !self.mailbox.deaf.get() {
                    self.mailbox.register(id, t as u16, false);
                    Self::bump(&self.turn_waits);
                    self.control(ControlKind::Wait, &v, v.epoch_tag(), id, t)
                        .await?;
                    asked = true;
                }
                // About the time the tickets ahead of ours take (measured, smoothed), then
                // doubling while the served ticket does not move.
                let ahead = t.wrapping_sub(seen) & TICKET_MASK;
                let est = ahead.max(1).saturating_mul(self.ticket_ns.get().max(1_000));
                let lease = self.cfg.lease;
                let ns = if asked {
                    // A notice is coming: look for ourselves only well after it is due.
                    est.saturating_mul(4 << late.min(16))
                        .clamp(lease.min_backoff_ns, lease.lease_ns / 4)
                } else {
                    // Polling: about when the tickets ahead should be done.
                    (est / 2)
                        .saturating_mul(1 << late.min(6))
                        .clamp(lease.min_backoff_ns, lease.max_backoff_ns)
                };
                if let Some(turn) = self.await_turn(id, t as u16, false, ns).await? {
                    asked = false;
                    let m = turn.meta;
                    if turn.stale {
                        break;
                    }
                    self.moved(&mut moved_at, seen, m.served());
                    seen = m.served();
                    if m.served() == t && !m.frozen() && m.epoch() == v.epoch_tag() && blind {
                        // Our turn, and an insert needs only the free slots (the server drops
                        // the key's older item when it applies ours): append at once.
                        return self
                            .put(&v, id, addr, m, op == ItemOp::Update, op, key, value, t)
                            .await;
                    }
                    break;
                }
                Self::bump(&self.waits);
                let m = Meta(read_word(qp, addr.add(FRONT_OFF)).await?);
                let now = self.ep.now_ns();
                if m.served() != seen {
                    late = 0;
                } else {
                    late += 1;
                }
                self.moved(&mut moved_at, seen, m.served());
                seen = m.served();
                if m.served() == t && !m.frozen() && m.epoch() == v.epoch_tag() && blind {
                    // Our turn, seen in the meta word: an insert appends at once (as on a
                    // notice).
                    return self
                        .put(&v, id, addr, m, op == ItemOp::Update, op, key, value, t)
                        .await;
                }
                // A split published since our view gives every node a new epoch: our
                // ticket stays this node's, so once that epoch was looked at (a new view
                // read) we wait on as before. Re-reading the node at every poll instead
                // never reported a stuck ticket ahead (a dead holder's): the wait lasted
                // until `lock_polls` ran out.
                if m.served() == t
                    || skipped(t, m.served())
                    || (m.epoch() != v.epoch_tag() && m.epoch() != checked)
                    || (m.frozen() && polls.is_multiple_of(8))
                {
                    break;
                }
                match waiter.observe(1 << 63 | seen, now) {
                    Verdict::Wait(_) => {}
                    Verdict::Expired { .. } => {
                        // Look at the whole node before reporting the ticket.
                        report = true;
                        break;
                    }
                    Verdict::GiveUp { .. } => {
                        return Err(self.lock_timeout(addr, seen, t, since));
                    }
                }
            }
            self.read_snapshot(addr, &mut bracket, buf).await?;
        }
    }

    /// The served ticket moved from `seen` to `served`: how long a ticket takes here,
    /// smoothed (the next waits' measure).
    fn moved(&self, moved_at: &mut u64, seen: u64, served: u64) {
        let now = self.ep.now_ns();
        let moved = served.wrapping_sub(seen) & TICKET_MASK;
        if moved > 0 && moved <= TICKET_MASK / 2 && now > *moved_at {
            let sample = (now - *moved_at) / moved;
            let old = self.ticket_ns.get();
            self.ticket_ns.set(if old == 0 {
                sample
            } else {
                (3 * old + sample) / 4
            });
            *moved_at = now;
        }
    }

    fn lock_timeout(&self, node: GlobalAddr, served: u64, ticket: u64, since: u64) -> CanrtError {
        CanrtError::LockTimeout {
            node,
            served: served as u32,
            ticket: ticket as u32,
            waited_ns: self.ep.now_ns().saturating_sub(since),
        }
    }

    /// Checking and writing phases, holding the lock (ticket `t`).
    #[allow(clippy::too_many_arguments)]
    async fn append(
        &self,
        v: &TreeView,
        id: u32,
        addr: GlobalAddr,
        nv: &NodeView<'_>,
        op: ItemOp,
        key: u128,
        value: &[u8],
        t: u64,
    ) -> Result<Wrote, CanrtError> {
        let present = match nv.find_applied(key) {
            Ok(Found::Present(_)) => true,
            Ok(Found::Absent) => false,
            // We hold the lock, so the applied items are stable: this is corruption.
            Err(why) => {
                self.unlock(v, v.epoch_tag(), id, t).await?;
                return Err(CanrtError::Corrupt { addr, why });
            }
        };
        if !present && !self.blind(op) {
            // Update or delete of an absent key: nothing to append (a posted update appends
            // anyway: see `blind`).
            self.unlock(v, v.epoch_tag(), id, t).await?;
            return Ok(Wrote::Done(false));
        }
        self.put(v, id, addr, nv.front, present, op, key, value, t)
            .await
    }

    /// The writing phase, holding the lock (ticket `t`) of a node whose meta word is
    /// `front`: a resize request if it is full, else the append.
    #[allow(clippy::too_many_arguments)]
    async fn put(
        &self,
        v: &TreeView,
        id: u32,
        addr: GlobalAddr,
        front: Meta,
        present: bool,
        op: ItemOp,
        key: u128,
        value: &[u8],
        t: u64,
    ) -> Result<Wrote, CanrtError> {
        let g = v.data();
        let free = !front.bitmap() & g.full_bitmap();
        if free == 0 {
            // Lines 21-22: the node is full; the server resizes the tree.
            Self::bump(&self.resizes);
            self.control(ControlKind::Resize, v, v.epoch_tag(), id, t)
                .await?;
            // A new tree, or the node writable again (the server ignored the request: our
            // ticket had been skipped, or the resize failed), then write again.
            self.await_thaw(v, addr).await?;
            if self.view().header.epoch == v.header.epoch {
                // No new tree: if the memory node has no room left to grow into, say so.
                self.room_to_grow(v).await?;
            }
            return Ok(Wrote::Again);
        }
        let slot = free.trailing_zeros();
        let mut item = [0u8; MAX_ITEM];
        let isz = g.item_size() as usize;
        self.ep.charge(crate::work::Work::Crc32c(isz));
        g.encode_item(&mut item[..isz], key, value, op, t, true)
            .map_err(CanrtError::Config)?;
        let imm = Imm {
            epoch: v.epoch_tag(),
            node: id,
            slot,
        }
        .encode()
        .map_err(CanrtError::Config)?;
        let remote = addr.add(g.slot_off(slot));
        if self.cfg.ack == WriteAck::Posted {
            // The paper's count (weaker, `WriteAck::Posted`): done once the append is posted
            // (§4.2: 'about 1.5 RTTs', the WRITE counted as its half trip), unsignaled: its
            // completion is not waited for. The server applies it later; its acknowledgement
            // is dropped unheard. A failure breaks the queue pair for our next verb. It may
            // not outrun the server's receives (`credit.rs`).
            self.take_credit().await?;
            self.qp()?
                .post_unsignaled(&mut [Op::WriteImm {
                    remote,
                    local: &item[..isz],
                    imm,
                }])
                .await?;
            return Ok(Wrote::Done(present));
        }
        // The server acknowledges the item once applied (a turn notice naming our ticket).
        let listen = self.cfg.turn_notices && !self.mailbox.deaf.get();
        let _ack = Asked {
            mailbox: &self.mailbox,
            node: id,
            ticket: t as u16,
            applied: true,
        };
        if listen {
            self.mailbox.register(id, t as u16, true);
        }
        // Whether our ticket may still turn out skipped with our item refused, unseen by us.
        let mut skippable = true;
        if self.cfg.flush_appends {
            // A READ after the WRITE on the same queue pair completes only once the written
            // bytes left the NIC for memory: the item is durable when the write returns.
            // Before it, the meta word: if our ticket is served past while our item is still
            // unprocessed, the server skipped the ticket (we stalled for a lease before
            // appending) and refuses the item: write again on a new ticket.
            let mut flush = [0u8; 8];
            let mut meta = [0u8; 8];
            self.qp()?
                .post(&mut [
                    Op::WriteImm {
                        remote,
                        local: &item[..isz],
                        imm,
                    },
                    Op::Read {
                        remote: addr.add(FRONT_OFF),
                        local: &mut meta,
                    },
                    Op::Read {
                        remote: remote.add(isz as u64 - 8),
                        local: &mut flush,
                    },
                ])
                .await?;
            let served = Meta(u64::from_le_bytes(meta)).served();
            let mut mine = [0u8; 8];
            mine.copy_from_slice(&item[isz - 8..isz]);
            let (mine, got) = (u64::from_le_bytes(mine), u64::from_le_bytes(flush));
            if skipped(t, served) && got == mine {
                // Still unprocessed: skipped, refused (it lies in the slot the server
                // reserved for it).
                Self::bump(&self.skips);
                return Ok(Wrote::Again);
            }
            if served != t && (got == tail_processed(mine) || !skipped(t, served)) {
                // Applied already (a server that keeps up, or a skip that found our item).
                return Ok(Wrote::Done(present));
            }
            // Served our ticket, after our item landed: a skip would find it and apply it.
            skippable = served != t;
            // Our ticket served past and the slot rewritten since (freed and taken again
            // before this READ): the server's word decides, below.
        } else {
            self.qp()?
                .post(&mut [Op::WriteImm {
                    remote,
                    local: &item[..isz],
                    imm,
                }])
                .await?;
        }
        if self
            .await_applied(
                addr,
                id,
                t,
                listen,
                v.epoch_tag(),
                skippable,
                remote.add(isz as u64 - 8),
                &item[isz - 8..isz],
            )
            .await?
        {
            Ok(Wrote::Done(present))
        } else {
            Self::bump(&self.skips);
            Ok(Wrote::Again)
        }
    }

    /// Waits until the server has applied our item (ticket `t` of data node `id`): readers
    /// see only applied items, which the server persists before it makes them live, so a
    /// write returns once it is durable and visible. The server's acknowledgement ends the
    /// wait (`listen`); without it, or if it is late, the meta word's served ticket moving
    /// past ours does (the item was applied, by its notice or by a skip that found it).
    /// False if the server refused the item (a stale acknowledgement, or the served ticket
    /// past ours with our item's last word, at `tail`, still as we wrote it, `written`): we
    /// located the key with a tree a split has since replaced (a new `epoch`), or our
    /// ticket was skipped (we stalled for a lease after our turn came; not `skippable` once
    /// a flush READ saw our ticket served after our item landed), and write again.
    #[allow(clippy::too_many_arguments)]
    async fn await_applied(
        &self,
        addr: GlobalAddr,
        id: u32,
        t: u64,
        listen: bool,
        epoch: u32,
        skippable: bool,
        tail: GlobalAddr,
        written: &[u8],
    ) -> Result<bool, CanrtError> {
        let since = self.ep.now_ns();
        let mut waiter = Waiter::new(self.cfg.lease, since);
        let lease = self.cfg.lease;
        let est = self.ticket_ns.get().max(1_000);
        for late in 0..self.cfg.lock_polls {
            let ns = if listen {
                est.saturating_mul(4 << late.min(16))
                    .clamp(lease.min_backoff_ns, lease.lease_ns / 4)
            } else {
                (est / 2)
                    .saturating_mul(1 << late.min(6))
                    .clamp(lease.min_backoff_ns, lease.max_backoff_ns)
            };
            if let Some(turn) = self.await_turn(id, t as u16, true, ns).await? {
                return Ok(!turn.stale);
            }
            Self::bump(&self.waits);
            let m = Meta(read_word(self.qp()?, addr.add(FRONT_OFF)).await?);
            if m.served() != t {
                // Refused (our ticket skipped, or a split since our snapshot sends the key
                // elsewhere): our item still unprocessed.
                if !skippable && m.epoch() == epoch {
                    return Ok(true);
                }
                let last = read_word(self.qp()?, tail).await?;
                return Ok(last.to_le_bytes()[..] != *written);
            }
            if let Verdict::GiveUp { .. } = waiter.observe(1 << 63 | t, self.ep.now_ns()) {
                break;
            }
        }
        Err(self.lock_timeout(addr, t, t, since))
    }
}

/// Unregisters a lock waiter from the mailbox when its write attempt ends.
struct Asked<'m> {
    mailbox: &'m Mailbox,
    node: u32,
    ticket: u16,
    applied: bool,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.mailbox
            .unregister(self.node, self.ticket, self.applied);
    }
}

/// Whether `served` has passed ticket `t` (mod 2^16).
fn skipped(t: u64, served: u64) -> bool {
    t.wrapping_sub(served) & TICKET_MASK > TICKET_MASK / 2
}

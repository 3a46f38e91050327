//! Waiting for a lock ticket without polling the memory node: a waiter SENDs `Wait` once,
//! and the server answers with a [`Turn`] SEND when it serves the ticket (the wait costs
//! the memory node no READs). The coroutines of one handle share its queue pair's receives:
//! whichever of them is receiving files each notice in the [`Mailbox`] under its waiter and
//! wakes it. Notices are best effort (a fabric may not deliver them): a waiter also looks
//! at the meta word itself when a notice is late.
use super::CanrtError;
use super::client::Canrt;
use super::credit::credited;
use crate::fabric::{Endpoint, FabricError, QueuePair};
use core::cell::{Cell, RefCell};
use core::future::{Future, poll_fn};
use core::pin::pin;
use core::task::{Poll, Waker};
use remora_layouts::canrt::{TURN_LEN, Turn};
use std_alloc::vec::Vec;

/// Waiters of one handle and the notices received for them.
#[derive(Default)]
pub(super) struct Mailbox {
    entries: RefCell<Vec<Entry>>,
    /// The fabric cannot receive (no notices: waiters poll).
    pub(super) deaf: Cell<bool>,
    /// Posted appends (`WriteAck::Posted`) this handle made (`credit.rs`).
    pub(super) posted: Cell<u64>,
    /// The server's last count of them consumed (its last credit).
    pub(super) credited: Cell<u64>,
}

struct Entry {
    node: u32,
    ticket: u16,
    /// Waits for the acknowledgement of an applied append, not for a turn.
    applied: bool,
    got: Option<Turn>,
    waker: Option<Waker>,
}

impl Mailbox {
    /// Posted appends not yet known to be consumed by the server.
    pub(super) fn unconsumed(&self) -> u64 {
        self.posted.get().saturating_sub(self.credited.get())
    }

    /// Starts waiting for the turn of `ticket` on `node` (`applied`: for the server's
    /// acknowledgement that its append is applied).
    pub(super) fn register(&self, node: u32, ticket: u16, applied: bool) {
        let mut e = self.entries.borrow_mut();
        e.retain(|x| !(x.node == node && x.ticket == ticket && x.applied == applied));
        e.push(Entry {
            node,
            ticket,
            applied,
            got: None,
            waker: None,
        });
    }

    /// Stops waiting (a notice that comes later is dropped).
    pub(super) fn unregister(&self, node: u32, ticket: u16, applied: bool) {
        self.entries
            .borrow_mut()
            .retain(|x| !(x.node == node && x.ticket == ticket && x.applied == applied));
    }

    /// Files a notice under its waiter and wakes it; a notice nobody waits for is dropped.
    fn deliver(&self, t: Turn) {
        let mut e = self.entries.borrow_mut();
        if let Some(x) = e
            .iter_mut()
            .find(|x| x.node == t.node && x.ticket == t.ticket && x.applied == t.applied)
        {
            x.got = Some(t);
            if let Some(w) = x.waker.take() {
                w.wake();
            }
        }
    }

    /// The notice for `node`/`ticket` if it came (the waiter is then unregistered); else
    /// `waker` is woken when it does.
    fn take(&self, key: (u32, u16, bool), waker: Option<&Waker>) -> Option<Turn> {
        let mut e = self.entries.borrow_mut();
        let i = e
            .iter()
            .position(|x| (x.node, x.ticket, x.applied) == key)?;
        if let Some(t) = e[i].got {
            e.swap_remove(i);
            return Some(t);
        }
        if let Some(w) = waker {
            e[i].waker = Some(w.clone());
        }
        None
    }
}

enum Race<T> {
    Received(T),
    Timer,
    Mine(Turn),
}

impl<E: Endpoint> Canrt<'_, E> {
    /// Waits up to `ns` for the turn notice of `ticket` on data node `id` (registered with
    /// [`Mailbox::register`]), receiving and filing other waiters' notices meanwhile. None
    /// if it did not come in time (or the fabric cannot receive).
    pub(super) async fn await_turn(
        &self,
        id: u32,
        ticket: u16,
        applied: bool,
        ns: u64,
    ) -> Result<Option<Turn>, CanrtError> {
        let key = (id, ticket, applied);
        let qp = self.qp()?;
        let mut buf = [0u8; 64];
        self.drain_notices()?;
        if let Some(t) = self.mailbox.take(key, None) {
            return Ok(Some(t));
        }
        if self.mailbox.deaf.get() || !self.cfg.turn_notices {
            self.ep.pause(ns).await;
            return Ok(None);
        }
        let start = self.ep.now_ns();
        loop {
            let left = ns.saturating_sub(self.ep.now_ns().saturating_sub(start));
            let got = {
                let mut recv = pin!(qp.recv(&mut buf));
                let mut timer = pin!(self.ep.pause(left.max(1)));
                let mailbox = &self.mailbox;
                poll_fn(move |cx| {
                    if let Some(t) = mailbox.take(key, Some(cx.waker())) {
                        return Poll::Ready(Race::Mine(t));
                    }
                    if let Poll::Ready(r) = recv.as_mut().poll(cx) {
                        return Poll::Ready(Race::Received(r));
                    }
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Race::Timer);
                    }
                    Poll::Pending
                })
                .await
            };
            match got {
                Race::Mine(t) => return Ok(Some(t)),
                Race::Timer => return Ok(None),
                Race::Received(Ok(r)) => {
                    self.file(&buf, r.len as usize);
                    if let Some(t) = self.mailbox.take(key, None) {
                        return Ok(Some(t));
                    }
                    if self.ep.now_ns().saturating_sub(start) >= ns {
                        return Ok(None);
                    }
                }
                Race::Received(Err(FabricError::Unsupported { .. })) => {
                    self.mailbox.deaf.set(true);
                    return Ok(None);
                }
                Race::Received(Err(e)) => return Err(e.into()),
            }
        }
    }

    /// Files the notices already received (ours or other waiters'), without waiting. Every
    /// write starts with it: acknowledgements nobody waited for (the writer saw its item
    /// applied first) must not pile up in the receive queue until the server's SENDs stall.
    pub(super) fn drain_notices(&self) -> Result<(), CanrtError> {
        if self.mailbox.deaf.get() {
            return Ok(());
        }
        let qp = self.qp()?;
        let mut buf = [0u8; 64];
        loop {
            match qp.try_recv(&mut buf) {
                Ok(Some(r)) => self.file(&buf, r.len as usize),
                Ok(None) => return Ok(()),
                Err(FabricError::Unsupported { .. }) => {
                    self.mailbox.deaf.set(true);
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Files one received message (a turn notice or a credit; anything else is dropped).
    fn file(&self, buf: &[u8], len: usize) {
        if len == TURN_LEN
            && let Ok(t) = Turn::decode(&buf[..len])
        {
            if let Some(n) = credited(&t) {
                let c = &self.mailbox.credited;
                c.set(c.get().max(n));
            }
            self.mailbox.deliver(t);
        }
    }
}

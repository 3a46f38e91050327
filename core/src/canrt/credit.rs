//! Flow control of posted appends ([`super::WriteAck::Posted`]): credits.
//!
//! A posted append's WRITE_WITH_IMM holds one of the server's receives on its writer's
//! connection until the server's single applier consumes it, and its writer does not wait
//! for that. A writer running ahead of the applier (during a resize, say) would use up the
//! receives; its appends would then be RNR NAKed and, once the retries ran out, its queue
//! pair would break ("work request flushed: the queue pair is in the error state"). So, as
//! RDMA messaging code does, the writer spends credits: its `Quiet` message (sent when it
//! opens) names its window `W` ([`super::CanrtConfig::posted_window`]); the server counts
//! the WRITE_WITH_IMMs it consumes on the connection (applied or refused) and SENDs the
//! count back (a credit: a [`Turn`] for [`CREDIT_NODE`]) every `W/2` of them. A writer
//! whose posted appends are `W` ahead of the last count it heard waits for a credit; if
//! none comes for a lease it sends `Quiet` again, which the server answers at once with
//! its count. The hot path costs a compare; the server one SEND per `W/2` appends.
//!
//! A writer that dies leaves nothing to undo (the server drops its count when the
//! connection goes). A fabric that cannot receive (the mailbox is deaf) brings no
//! credits: its writers post unchecked, as before.
use super::CanrtError;
use super::client::Canrt;
use super::server::CanrtServer;
use crate::fabric::{Endpoint, QueuePair};
use crate::lease::{Verdict, Waiter};
use crate::server::Replies;
use remora_layouts::canrt::{Control, ControlKind, Meta, Turn};

/// The data node a credit names (no data node has this id): its [`Turn`] is `stale` and
/// `applied`, its `meta` the count of the connection's WRITE_WITH_IMMs the server consumed.
pub(super) const CREDIT_NODE: u32 = u32::MAX;

/// A credit: the server consumed `consumed` WRITE_WITH_IMMs of the connection so far.
fn credit(consumed: u64) -> Turn {
    Turn {
        stale: true,
        applied: true,
        ticket: 0,
        node: CREDIT_NODE,
        meta: Meta(consumed),
    }
}

/// The count a received notice carries, if it is a credit.
pub(super) fn credited(t: &Turn) -> Option<u64> {
    (t.node == CREDIT_NODE && t.stale && t.applied).then_some(t.meta.0)
}

/// A quiet connection's flow control at the server.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Credit {
    /// A credit is sent every this many consumed appends (0: the writer asked for none).
    every: u64,
    /// WRITE_WITH_IMMs consumed on the connection since its first `Quiet`.
    consumed: u64,
}

impl CanrtServer {
    /// `Quiet` on `conn`: its writers count a write done once posted (no acknowledgement),
    /// with a window of `c.ticket` appends. Answered with a credit (the count so far): the
    /// answer to a writer that heard none for a lease.
    pub(super) fn quiet(&mut self, conn: usize, c: &Control, replies: &mut Replies) {
        let e = self.quiet.entry(conn).or_default();
        e.every = u64::from(c.ticket) / 2;
        if e.every > 0 {
            replies.send(&credit(e.consumed).encode());
        }
    }

    /// One WRITE_WITH_IMM of `conn` consumed (its receive free again): a credit every
    /// half window.
    pub(super) fn consumed(&mut self, conn: usize, replies: &mut Replies) {
        if let Some(e) = self.quiet.get_mut(&conn) {
            e.consumed += 1;
            if e.every > 0 && e.consumed.is_multiple_of(e.every) {
                replies.send(&credit(e.consumed).encode());
            }
        }
    }
}

impl<E: Endpoint> Canrt<'_, E> {
    /// The window of posted appends the server may hold unconsumed.
    fn window(&self) -> u64 {
        u64::from(self.cfg.posted_window.max(2))
    }

    /// Tells the server this connection's writers want no acknowledgements, and asks for
    /// its count of consumed appends (a credit).
    pub(super) async fn ask_credit(&self) -> Result<(), CanrtError> {
        let c = Control::new(ControlKind::Quiet, 0, 0, 0, self.window());
        self.qp()?.send(&c.encode()).await?;
        Ok(())
    }

    /// Before a posted append: waits until fewer than a window of posted appends are
    /// unconsumed, then counts this one.
    pub(super) async fn take_credit(&self) -> Result<(), CanrtError> {
        let m = &self.mailbox;
        let w = self.window();
        if m.unconsumed() >= w {
            self.drain_notices()?;
        }
        if m.unconsumed() >= w && !m.deaf.get() {
            let since = self.ep.now_ns();
            let result = self.await_credit(w).await;
            m.unregister(CREDIT_NODE, 0, true);
            self.credit_waits.set(self.credit_waits.get() + 1);
            let waited = self.ep.now_ns().saturating_sub(since);
            self.credit_wait_ns.set(self.credit_wait_ns.get() + waited);
            result?;
        }
        m.posted.set(m.posted.get() + 1);
        Ok(())
    }

    async fn await_credit(&self, w: u64) -> Result<(), CanrtError> {
        let m = &self.mailbox;
        let mut waiter = Waiter::new(self.cfg.lease, self.ep.now_ns());
        for _ in 0..self.cfg.lock_polls {
            if m.unconsumed() < w || m.deaf.get() {
                return Ok(());
            }
            match waiter.observe(1 << 63 | m.credited.get(), self.ep.now_ns()) {
                Verdict::Wait(ns) => {
                    m.register(CREDIT_NODE, 0, true);
                    self.await_turn(CREDIT_NODE, 0, true, ns).await?;
                    self.drain_notices()?;
                }
                // No credit for a lease (lost, or our window's end not reached by a
                // server whose count we missed): ask for the count.
                Verdict::Expired { .. } => self.ask_credit().await?,
                Verdict::GiveUp { .. } => break,
            }
        }
        Err(CanrtError::Retries {
            what: "posted append credit",
        })
    }
}

//! The service every simulated memory node runs on each of its queue pairs — a
//! `remora_core::server::Handler`, the echo service unless `Sim::set_handler` — run as a server
//! task on the memory node's side of the connection, charging `server_handler_ns` of the
//! node's CPU per message handled.
//!
//! The task is started when the connection's first message arrives, so idle connections
//! cost nothing. The node's CPU threads (`server_threads`) are shared by all its handlers.
use super::engine::{Ev, NO_TASK};
use super::model::Ps;
use super::qp::{RxReady, SimQp};
use remora_core::fabric::{FabricError, QueuePair, RecvKind};
use remora_core::server::{Handler, LocalRegion, Replies, out_of_range};
use remora_layouts::NodeId;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Occupies the memory node's CPU for `n` handler times, then resolves.
struct HandlerCpu<'a> {
    qp: &'a SimQp,
    n: usize,
    until: Option<Ps>,
}

impl Future for HandlerCpu<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut w = this.qp.world().borrow_mut();
        let now = w.now;
        match this.until {
            Some(u) if now >= u => Poll::Ready(()),
            Some(_) => Poll::Pending,
            None => {
                let node = this.qp.peer() as usize;
                let Some(nic) = w.nic_of_node(node as u16) else {
                    return Poll::Ready(());
                };
                let dur = w.nics[nic].scale(w.tm.handler) * this.n as Ps;
                if dur == 0 || node >= w.nodes.len() {
                    return Poll::Ready(());
                }
                let until = w.nodes[node].reserve_cpu(now, dur);
                this.until = Some(until);
                let t = w.current_task;
                if t == NO_TASK {
                    return Poll::Ready(());
                }
                w.schedule(until, Ev::Wake(t));
                Poll::Pending
            }
        }
    }
}

/// A memory node's handler, shared by its connections (one thread: the node's CPU).
pub(crate) type SharedHandler<'a> = Rc<RefCell<Box<dyn Handler + 'a>>>;

/// Serves one connection with the node's handler until its queue pair breaks or the handler
/// refuses a message.
pub(crate) async fn handler_loop(qp: SimQp, handler: SharedHandler<'_>) {
    let mut buf = vec![0u8; qp.max_message()];
    let mut replies = Replies::new();
    let node = qp.peer();
    let conn = qp.end_id() as usize;
    let mut debt = 0;
    loop {
        let n = match RxReady(&qp).await {
            Ok(n) => n,
            Err(_) => return,
        };
        HandlerCpu {
            qp: &qp,
            n: n + debt,
            until: None,
        }
        .await;
        let mut served = 0usize;
        loop {
            let r = match qp.try_recv(&mut buf) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => return,
            };
            let msg: &[u8] = if r.kind == RecvKind::Send {
                &buf[..r.len as usize]
            } else {
                &[]
            };
            replies.clear();
            let region = SimRegion { qp: &qp, node };
            if handler
                .borrow_mut()
                .on_message(&region, conn, r, msg, &mut replies)
                .is_err()
            {
                return;
            }
            for m in replies.iter() {
                if qp.send(m).await.is_err() {
                    return;
                }
            }
            served += 1;
        }
        debt = served.saturating_sub(n);
    }
}

/// A simulated memory node's host region as its CPU sees it. CPU stores are durable when
/// made (the sim models NIC-side persistence only).
struct SimRegion<'q> {
    qp: &'q SimQp,
    node: NodeId,
}

impl SimRegion<'_> {
    fn with<R>(
        &self,
        offset: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, FabricError> {
        let mut w = self.qp.world().borrow_mut();
        let host = &mut w
            .nodes
            .get_mut(self.node as usize)
            .ok_or_else(|| out_of_range(self.node, offset, len))?
            .host;
        let o = usize::try_from(offset).map_err(|_| out_of_range(self.node, offset, len))?;
        let bytes = o
            .checked_add(len)
            .and_then(|end| host.get_mut(o..end))
            .ok_or_else(|| out_of_range(self.node, offset, len))?;
        Ok(f(bytes))
    }
}

impl LocalRegion for SimRegion<'_> {
    fn node(&self) -> NodeId {
        self.node
    }
    fn len(&self) -> u64 {
        let w = self.qp.world().borrow();
        w.nodes
            .get(self.node as usize)
            .map_or(0, |n| n.host.len() as u64)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        self.with(offset, buf.len(), |b| buf.copy_from_slice(b))
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        self.with(offset, data.len(), |b| b.copy_from_slice(data))
    }
}

//! The echo service every simulated memory node runs on each of its queue pairs: the
//! `remora_core::echo::serve_ready` loop, run as a server task on the memory node's side of
//! the connection, charging `server_handler_ns` of the node's CPU per message handled.
//!
//! The task is started when the connection's first message arrives, so idle connections
//! cost nothing. The node's CPU threads (`server_threads`) are shared by all its handlers.
use super::engine::{Ev, NO_TASK};
use super::model::Ps;
use super::qp::{RxReady, SimQp};
use remora_core::echo::serve_ready;
use remora_core::fabric::QueuePair;
use std::future::Future;
use std::pin::Pin;
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

/// Serves one connection until its queue pair breaks.
pub(crate) async fn echo_loop(qp: SimQp) {
    let mut buf = vec![0u8; qp.max_message()];
    // Messages that arrived while the handler ran are served in the same pass and charged
    // on the next one.
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
        match serve_ready(&qp, &mut buf).await {
            Ok(served) => debt = served.saturating_sub(n),
            Err(_) => return,
        }
    }
}

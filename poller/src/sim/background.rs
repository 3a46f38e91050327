//! A memory node's background thread (model `background_threads`, 0 by default): a CPU
//! core of its own on which the node's handler does its background work
//! (`Handler::on_background`: Erda's log cleaner, the baselines' asynchronous apply, each a
//! pthread of its own in the authors' servers), concurrently with the request threads of
//! `server.rs`.
//!
//! - The thread is woken after every message a request thread of the node has handled
//!   (and its task started then, the first time). Awake, it calls `on_background` on the
//!   handler of the node's current connections, again and again while that returns true
//!   (did some work); a false return puts it to sleep until the next message.
//! - Each call costs the thread the memory the handler touched, by the same last-level
//!   cache model as a request's (`server.rs`: the node's LLC is shared by its cores), + its
//!   persists (`nvm_write_ns` per line), + `server_poll_ns` if it did work (taking the work
//!   up; a call that found none costs only what it read: the authors' background threads
//!   exist only while there is work, they do not poll), scaled by a slowed node's factor.
//!   The call's memory effects happen when it is made (as a request's happen when its
//!   handler runs), and the thread is busy for its cost afterwards: a request thread serves
//!   its messages meanwhile, and neither waits for the other. Nothing else is shared: the
//!   sim has no memory-bandwidth model for CPU stores to contend on.
//! - Its busy time counts in the node's (`MemNode::busy_ps`, so `Sim::server_busy_ns` is the
//!   CPU time of all the node's threads, as `top` counts a process's), and nowhere else.
//! - A crashed node's thread does nothing until a message of its next life wakes it.
//!
//! With `background_threads = 0` nothing here runs, `on_background` is never called, and a
//! handler keeps its background work inline (today's behaviour of every profile but the
//! ones that set it).
use super::engine::{NO_TASK, World};
use super::memory::MemNode;
use super::model::Ps;
use super::qp::WorldRef;
use super::server::{Handlers, ServerThread, SimRegion, busy};
use remora_layouts::NodeId;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The thread number a node's background thread has in the sim's task bookkeeping
/// (`World::to_serve`); request threads are numbered from 0.
pub(crate) const BACKGROUND: u32 = u32::MAX;

/// Thread `thread` of `node`: a request thread, or its background thread.
pub(crate) fn thread_mut(node: &mut MemNode, thread: usize) -> Option<&mut ServerThread> {
    if thread == BACKGROUND as usize {
        node.background.as_mut()
    } else {
        node.threads.get_mut(thread)
    }
}

/// A request thread of `node` has handled a message: wake the node's background thread, if
/// the model gives it one (starting its task the first time).
pub(crate) fn kick(w: &mut World, node: usize) {
    if w.model.background_threads < 1.0 {
        return;
    }
    let Some(n) = w.nodes.get_mut(node) else {
        return;
    };
    let t = n.background.get_or_insert_with(ServerThread::new);
    // One queued entry is the wake-up; the thread takes it when it next looks for work.
    if t.queue.is_empty() {
        t.queue.push_back(0);
    }
    if let Some(task) = t.wake() {
        w.make_ready(task);
    } else if t.task == NO_TASK && !t.starting {
        t.starting = true;
        w.to_serve.push((node as NodeId, BACKGROUND));
    }
}

/// Resolves when the background thread of `node` has been woken since it last looked.
struct Woken<'w> {
    w: &'w WorldRef,
    node: usize,
}

impl Future for Woken<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let mut w = self.w.borrow_mut();
        let task = w.current_task;
        let Some(t) = w
            .nodes
            .get_mut(self.node)
            .and_then(|n| n.background.as_mut())
        else {
            return Poll::Pending;
        };
        t.task = task;
        t.starting = false;
        if t.queue.pop_front().is_some() {
            t.queue.clear();
            t.waiting = false;
            return Poll::Ready(());
        }
        t.waiting = true;
        Poll::Pending
    }
}

/// Runs the background thread of memory node `node` forever (see the module docs).
pub(crate) async fn background_loop(w: WorldRef, node: NodeId, handlers: Handlers<'_>) {
    let n = node as usize;
    loop {
        Woken { w: &w, node: n }.await;
        loop {
            let (handler, nic, since) = {
                let wb = w.borrow();
                let Some(mem) = wb.nodes.get(n) else { return };
                let nic = wb.nic_of_node(node);
                if nic.is_none_or(|i| wb.nics[i].dead) {
                    break;
                }
                let h = handlers.borrow().get(mem.handler as usize).cloned();
                (h, nic, wb.now)
            };
            let Some(handler) = handler else { break };
            let region = SimRegion::new(&w, node);
            region.begin();
            let worked = handler.borrow_mut().on_background(&region);
            let cost: Ps = {
                let wb = w.borrow();
                let found = if worked { wb.tm.server_poll } else { 0 };
                let raw = found + region.mem_cost.get() + region.persist_cost.get();
                nic.map_or(raw, |i| wb.nics[i].scale(raw))
            };
            busy(&w, n, BACKGROUND as usize, cost).await;
            let crashed = {
                let wb = w.borrow();
                wb.nodes
                    .get(n)
                    .is_none_or(|m| m.crashed_between(since, wb.now))
            };
            if !worked || crashed {
                break;
            }
        }
    }
}

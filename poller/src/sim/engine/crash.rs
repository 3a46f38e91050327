//! Scheduled faults: memory nodes crashing and restarting, connections ending.

use super::*;

impl World {
    pub(super) fn fault(&mut self, i: u32) {
        let Some(f) = self.faults.scheduled.get(i as usize).copied() else {
            return;
        };
        match f.kind {
            FaultKind::CrashNode(n) => self.crash_node(n),
            FaultKind::RestartNode(n) => self.restart_node(n),
            FaultKind::SlowNode(n, factor) => {
                if let Some(nic) = self.nic_of_node(n) {
                    self.nics[nic].slow = factor;
                }
            }
        }
    }

    pub fn nic_of_node(&self, n: NodeId) -> Option<usize> {
        self.nics.iter().position(|x| x.node == Some(n))
    }

    pub fn crash_node(&mut self, n: NodeId) {
        let now = self.now;
        let Some(nic) = self.nic_of_node(n) else {
            return;
        };
        if self.nics[nic].dead {
            return;
        }
        self.nics[nic].dead = true;
        self.nodes[n as usize].crash(now);
        if self.trace.enabled() {
            self.trace
                .line(now, u64::MAX, format!("memory node {n} crashed"));
        }
        // The node's receive queues and held requests vanish with it, and its threads' queues.
        for t in self.nodes[n as usize].threads.iter_mut() {
            t.queue.clear();
        }
        for e in 0..self.ends.len() {
            if self.ends[e].node == n && self.ends[e].server {
                self.ends[e].stale = true;
                let cq = std::mem::take(&mut self.ends[e].cq);
                for rx in cq {
                    self.pool.give(rx.data);
                }
            }
        }
    }

    /// The connection of server end `end` ends: both ends break (`break_client`) or only the
    /// server's, and its handler is told once (`Notice::Disconnect`).
    pub fn end_connection(&mut self, end: u32, break_client: bool) {
        let e = &mut self.ends[end as usize];
        if !e.server || e.ended {
            return;
        }
        e.ended = true;
        let (peer, node) = (e.peer, e.node);
        self.break_end(end);
        if break_client {
            self.break_end(peer);
        }
        self.notices.push(Notice::Disconnect(node, end));
    }

    pub fn restart_node(&mut self, n: NodeId) {
        let Some(nic) = self.nic_of_node(n) else {
            return;
        };
        if self.nics[nic].dead {
            // Every connection of the previous life has ended; the handler hears of each,
            // then recovers the region, before the node serves again.
            for e in 0..self.ends.len() as u32 {
                if self.ends[e as usize].node == n && self.ends[e as usize].server {
                    self.end_connection(e, false);
                }
            }
            self.notices.push(Notice::Restart(n));
        }
        self.nics[nic].dead = false;
        self.nodes[n as usize].restart();
        let depth = self.tm.recv_depth;
        for e in self.ends.iter_mut() {
            if e.node == n && e.server {
                e.rq_credits = depth;
            }
        }
    }
}

//! Fault injection, all of it seeded or scheduled so that a seed replays a run exactly.
//!
//! - **Client crash** at a given post: when client `c` rings its `k`-th doorbell (counting
//!   from 0), it dies instead: that batch is never sent, and every coroutine of the client
//!   stops forever, holding whatever it held (remote locks stay taken). Ops it posted before
//!   still complete at the memory nodes. Its connections end one dead timeout later (the
//!   nodes' handlers get `on_disconnect`, see `server.rs`).
//! - **Memory-node crash** at a virtual time: later verbs to it get no answer and fail with
//!   `RetryExceeded` after `ack_timeout_ns x (retry_cnt + 1)`; ops whose response had not
//!   left before the crash fail the same way. Memory is lost as documented in `memory.rs`
//!   (DRAM: all of it; persistent: what was not persisted; device memory: all of it).
//!   `restart` brings the node back with a new region key; the connections of its previous
//!   life end (requests on them time out with `RetryExceeded`; clients reconnect with
//!   `ClientCtx::reconnect`), and a persistent node's handler runs `Handler::recover` on the
//!   surviving region before the node serves again (`Sim::recovery_reports`).
//! - **Delay / reorder across queue pairs**: each message gets, with probability
//!   `delay_prob`, an extra uniform delay below `delay_max`; a queue pair's messages still
//!   arrive in order (a delayed message holds back the later ones of its own queue pair only).
//! - **Slow node**: from a virtual time on, a memory node's service times (NIC engine, PCIe,
//!   atomics, handler CPU) are multiplied by a factor.
use super::model::Ps;
use remora_layouts::NodeId;

/// A memory-node fault (see the module doc for what each does).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FaultKind {
    /// The node crashes: it stops answering and loses its un-persisted memory.
    CrashNode(NodeId),
    /// The crashed node comes back, with a new region key.
    RestartNode(NodeId),
    /// The node's service times are multiplied by the factor (finite and > 0) from then on.
    SlowNode(NodeId, f64),
}

/// A node fault at a virtual time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scheduled {
    /// Virtual time of the fault, in picoseconds.
    pub at: Ps,
    /// What happens then.
    pub kind: FaultKind,
}

/// The faults of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// `(client index, post number)`: the client dies at that post.
    pub crash_clients: Vec<(u32, u64)>,
    /// Node faults at virtual times.
    pub scheduled: Vec<Scheduled>,
    /// Probability that a message is delayed.
    pub delay_prob: f64,
    /// Largest extra delay, in picoseconds.
    pub delay_max_ps: Ps,
}

impl Faults {
    /// No faults (the same as `Faults::default()`); add some with the builder methods.
    pub fn none() -> Faults {
        Faults::default()
    }
    /// Client `client` dies at its `post`-th doorbell (0-based).
    pub fn crash_client_at_post(mut self, client: u32, post: u64) -> Faults {
        self.crash_clients.push((client, post));
        self
    }
    /// Memory node `node` crashes at virtual time `at_ns`.
    pub fn crash_node_at(mut self, node: NodeId, at_ns: u64) -> Faults {
        self.scheduled.push(Scheduled {
            at: at_ns * 1000,
            kind: FaultKind::CrashNode(node),
        });
        self
    }
    /// Memory node `node` comes back at virtual time `at_ns`.
    pub fn restart_node_at(mut self, node: NodeId, at_ns: u64) -> Faults {
        self.scheduled.push(Scheduled {
            at: at_ns * 1000,
            kind: FaultKind::RestartNode(node),
        });
        self
    }
    /// Memory node `node` runs `factor` times slower from virtual time `at_ns`.
    pub fn slow_node_at(mut self, node: NodeId, at_ns: u64, factor: f64) -> Faults {
        let f = if factor.is_finite() && factor > 0.0 {
            factor
        } else {
            1.0
        };
        self.scheduled.push(Scheduled {
            at: at_ns * 1000,
            kind: FaultKind::SlowNode(node, f),
        });
        self
    }
    /// Each message is delayed with probability `prob` by up to `max_ns` (never reordered
    /// within its queue pair).
    pub fn delays(mut self, prob: f64, max_ns: u64) -> Faults {
        self.delay_prob = if prob.is_finite() {
            prob.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.delay_max_ps = max_ns * 1000;
        self
    }
    /// Post number at which `client` crashes, if any.
    pub fn client_crash_post(&self, client: u32) -> Option<u64> {
        self.crash_clients
            .iter()
            .filter(|c| c.0 == client)
            .map(|c| c.1)
            .min()
    }
}

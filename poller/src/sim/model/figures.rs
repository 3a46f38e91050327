//! The model's derived quantities in picoseconds, shared by the engine and the analytic
//! figures ([`Model::idle_latency_ps`], [`Model::bound_mops`]) that the calibration tests
//! check the simulation against.
use super::{Model, Ps};

fn ps(ns: f64) -> Ps {
    (ns * 1000.0).round() as Ps
}

/// The offered load of a throughput figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Verbs in flight (client threads x coroutines).
    pub outstanding: u64,
    /// Client threads.
    pub clients: u64,
    /// Compute nodes the client threads are spread over (each has one NIC).
    pub compute_nodes: u64,
    /// Memory nodes the verbs are spread over (each has one NIC).
    pub memory_nodes: u64,
    /// All atomics on one word.
    pub hot: bool,
}

/// Which verb an analytic figure is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelVerb {
    /// RDMA READ.
    Read,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE_WITH_IMM (a receive completion at the responder, served by its CPU).
    WriteImm,
    /// CMP_AND_SWP, 8 bytes.
    Cas,
    /// FETCH_AND_ADD, 8 bytes.
    Faa,
    /// Two-sided SEND (a receive at the responder, served by its CPU).
    Send,
}

impl Model {
    pub(crate) fn ps_per_byte(&self) -> f64 {
        8000.0 / self.link_gbps
    }
    /// Link serialization per byte in thousandths of a picosecond (integer arithmetic keeps
    /// the engine and the analytic figures identical to the last digit).
    pub fn milli_ps_per_byte(&self) -> u64 {
        (self.ps_per_byte() * 1000.0).round() as u64
    }
    /// Serialization time of `bytes` on one link.
    pub fn wire_ps(&self, bytes: u64) -> Ps {
        (bytes * self.milli_ps_per_byte()).div_ceil(1000)
    }
    pub(crate) fn packets(&self, payload: u64) -> u64 {
        payload.div_ceil(self.mtu as u64).max(1)
    }
    /// Bytes on the wire for a message carrying `payload` bytes.
    pub fn msg_bytes(&self, payload: u64) -> u64 {
        payload + self.packets(payload) * self.header_bytes as u64
    }
    /// `one_way_ns` in picoseconds: NIC to NIC, before serialization and jitter.
    pub fn one_way_ps(&self) -> Ps {
        ps(self.one_way_ns)
    }
    pub(crate) fn nic_op_ps(&self) -> Ps {
        (1e6 / self.nic_mops).round() as Ps
    }
    pub(crate) fn dm_atomic_ps(&self) -> Ps {
        (1e6 / self.dm_atomic_mops).round() as Ps
    }
    pub(crate) fn host_atomic_ps(&self) -> Ps {
        ps(self.host_atomic_ns)
    }
    pub(crate) fn pcie_read_ps(&self) -> Ps {
        ps(self.pcie_read_ns)
    }
    pub(crate) fn pcie_write_ps(&self) -> Ps {
        ps(self.pcie_write_ns)
    }
    /// `client_post_ns` in picoseconds: the client CPU time of one `post` (one batch,
    /// whatever its size).
    pub fn post_ps(&self) -> Ps {
        ps(self.client_post_ns)
    }
    pub(crate) fn handler_ps(&self) -> Ps {
        ps(self.server_handler_ns)
    }
    pub(crate) fn server_poll_ps(&self) -> Ps {
        ps(self.server_poll_ns)
    }
    pub(crate) fn server_reply_ps(&self) -> Ps {
        ps(self.server_reply_ns)
    }
    /// Memory-node CPU time to serve one message that is answered with `replies` replies and
    /// whose handler touches no region memory (the echo service):
    /// `server_poll_ns + server_handler_ns + replies x server_reply_ns`. A handler that
    /// touches memory costs its lines on top (`server.rs`).
    pub fn service_ps(&self, replies: u64) -> Ps {
        self.server_poll_ps() + self.handler_ps() + replies * self.server_reply_ps()
    }
    /// Memory-node CPU time per operation of verb `v` in the echo microbenchmark: one
    /// service with one reply for SEND and WRITE_WITH_IMM, nothing for one-sided verbs.
    pub fn server_cpu_per_op_ps(&self, v: ModelVerb) -> Ps {
        match v {
            ModelVerb::Send | ModelVerb::WriteImm => self.service_ps(1),
            _ => 0,
        }
    }
    pub(crate) fn segment(&self) -> u64 {
        self.segment_bytes as u64
    }
    /// Pacing of consecutive segments of one transfer: one segment at link rate.
    pub fn segment_step_ps(&self) -> Ps {
        self.wire_ps(self.segment()).max(1)
    }
    /// Pacing of consecutive segments fetched by a READ: one segment at PCIe rate.
    pub fn read_step_ps(&self) -> Ps {
        ((self.segment() as f64 * 8000.0 / self.pcie_gbps).round() as Ps).max(1)
    }
    /// Time until a requester gives up on a dead responder.
    pub fn dead_timeout_ps(&self) -> Ps {
        ps(self.ack_timeout_ns * (self.retry_cnt + 1.0))
    }
    /// Bytes a request puts on the wire.
    pub fn request_bytes(&self, v: ModelVerb, size: u64) -> u64 {
        match v {
            ModelVerb::Read => self.msg_bytes(0),
            ModelVerb::Write | ModelVerb::WriteImm | ModelVerb::Send => self.msg_bytes(size),
            ModelVerb::Cas => self.msg_bytes(16),
            ModelVerb::Faa => self.msg_bytes(8),
        }
    }
    /// Bytes the response (READ data, atomic result, or ack) puts on the wire.
    pub fn response_bytes(&self, v: ModelVerb, size: u64) -> u64 {
        match v {
            ModelVerb::Read => self.msg_bytes(size),
            ModelVerb::Cas | ModelVerb::Faa => self.msg_bytes(8),
            _ => self.msg_bytes(0),
        }
    }
    fn segments(&self, size: u64) -> u64 {
        // Worst case of an aligned transfer; the analytic figures assume aligned buffers.
        size.div_ceil(self.segment())
    }

    /// Round trip of one verb on an idle cluster, from the call of `post` to its completion,
    /// for an aligned `size`-byte transfer on host memory (device memory: `dm`).
    ///
    /// - READ: post + wire(request) + one_way + pcie_read + one_way + wire(response)
    /// - WRITE: post + wire(request) + one_way + pcie_write + (segments-1)*step + wire(ack)
    ///   + one_way
    /// - CAS/FAA: post + wire(request) + one_way + host_atomic + one_way + wire(response)
    pub fn idle_latency_ps(&self, v: ModelVerb, size: u64, dm: bool) -> Ps {
        let req = self.wire_ps(self.request_bytes(v, size));
        let resp = self.wire_ps(self.response_bytes(v, size));
        let ow = self.one_way_ps();
        let base = self.post_ps() + req + ow + ow + resp;
        let step = self.segment_step_ps();
        match v {
            ModelVerb::Read => base + if dm { 0 } else { self.pcie_read_ps() },
            ModelVerb::Write | ModelVerb::WriteImm | ModelVerb::Send => {
                let pw = if dm { 0 } else { self.pcie_write_ps() };
                base + pw + self.segments(size).saturating_sub(1) * step
            }
            ModelVerb::Cas | ModelVerb::Faa => {
                base + if dm {
                    self.dm_atomic_ps()
                } else {
                    self.host_atomic_ps()
                }
            }
        }
    }

    /// Round trip of a SEND or WRITE_WITH_IMM answered by the echo service, on an idle
    /// cluster: post, request delivered (its receive completion raised one ps after the last
    /// byte is placed), one service (`service_ps(1)`: poll + handler + reply post), reply (the
    /// payload, or 12 bytes) delivered back into the client's receive queue.
    pub fn echo_latency_ps(&self, v: ModelVerb, size: u64) -> Ps {
        let ow = self.one_way_ps();
        let step = self.segment_step_ps();
        let segs = |n: u64| n.div_ceil(self.segment()).max(1) - 1;
        let req_segs = if v == ModelVerb::Send {
            segs(size)
        } else {
            self.segments(size).max(1) - 1
        };
        let reply = if v == ModelVerb::Send { size } else { 12 };
        self.post_ps()
            + self.wire_ps(self.request_bytes(v, size))
            + ow
            + self.pcie_write_ps()
            + req_segs * step
            + 1
            + self.service_ps(1)
            + self.wire_ps(self.msg_bytes(reply))
            + ow
            + self.pcie_write_ps()
            + segs(reply) * step
            + 1
    }

    /// Throughput bound in Mops of `outstanding` verbs from `clients` client threads on
    /// `compute_nodes` compute nodes to `memory_nodes` memory nodes (spread evenly), each verb
    /// one post: the smallest of Little's law at the idle round trip, the client CPUs, the
    /// memory NICs' request rate, each link direction, with `hot` one atomic word, and for
    /// SEND / WRITE_WITH_IMM the memory nodes' handler threads: each client has one
    /// connection per memory node and connections are spread round-robin over the threads,
    /// so `min(server_threads, clients)` threads per node each serve one message per
    /// `service_ps(1)`.
    pub fn bound_mops(&self, v: ModelVerb, size: u64, load: &Load) -> f64 {
        let Load {
            outstanding,
            clients,
            compute_nodes,
            memory_nodes,
            hot,
        } = *load;
        let per_s = |ps: Ps| {
            if ps == 0 {
                f64::INFINITY
            } else {
                1e12 / ps as f64
            }
        };
        let echo = matches!(v, ModelVerb::Send | ModelVerb::WriteImm);
        let rtt = if echo {
            self.echo_latency_ps(v, size)
        } else {
            self.idle_latency_ps(v, size, false)
        };
        let mut b = outstanding as f64 * per_s(rtt);
        b = b.min(clients as f64 * per_s(self.post_ps()));
        b = b.min(memory_nodes as f64 * per_s(self.nic_op_ps()));
        let mut req = self.wire_ps(self.request_bytes(v, size));
        let mut resp = self.wire_ps(self.response_bytes(v, size));
        if echo {
            // The echo's reply travels with the request's ack, and its own ack with the
            // requests; the client NICs process the replies.
            let reply = if v == ModelVerb::Send { size } else { 12 };
            resp += self.wire_ps(self.msg_bytes(reply));
            req += self.wire_ps(self.msg_bytes(0));
            b = b.min(compute_nodes as f64 * per_s(self.nic_op_ps()));
        }
        for links in [memory_nodes, compute_nodes] {
            b = b
                .min(links as f64 * per_s(req))
                .min(links as f64 * per_s(resp));
        }
        if echo {
            // Each one is answered by the memory node's echo handler.
            let threads = self.server_threads.min(clients as f64);
            b = b.min(memory_nodes as f64 * threads * per_s(self.service_ps(1)));
        }
        if hot && matches!(v, ModelVerb::Cas | ModelVerb::Faa) {
            b = b.min(per_s(self.host_atomic_ps()));
        }
        b / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_figures() {
        let m = Model::default();
        assert_eq!(m.wire_ps(100), 8000);
        assert_eq!(m.msg_bytes(0), 42);
        assert_eq!(m.msg_bytes(8192), 8192 + 84);
        let rtt = m.idle_latency_ps(ModelVerb::Read, 64, false);
        assert!((1_700_000..2_000_000).contains(&rtt), "{rtt}");
    }
}

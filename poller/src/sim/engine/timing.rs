//! Model quantities in picoseconds (`Tm`), and the links and NICs that serialize bytes.

use super::*;

/// Model quantities precomputed in picoseconds.
#[derive(Debug, Clone)]
pub(crate) struct Tm {
    pub one_way: Ps,
    pub jitter: Ps,
    pub nic_op: Ps,
    pub pcie_read: Ps,
    pub pcie_write: Ps,
    pub host_atomic: Ps,
    /// `host_atomic_stalls`: the NIC processing units a host-memory atomic waiting for its
    /// word's lock slot can keep ([`Nic::units`]); 0: such a wait keeps none.
    pub atomic_units: usize,
    pub dm_atomic: Ps,
    pub post: Ps,
    pub server_poll: Ps,
    pub handler: Ps,
    pub server_reply: Ps,
    /// Server CPU per connection ring a polling thread scans per message (0: event-based).
    pub server_scan: Ps,
    /// Server CPU per cache line a handler persists (persistent regions).
    pub nvm_line: Ps,
    pub step: Ps,
    /// Link serialization in thousandths of a ps per byte.
    pub mppb: u64,
    pub read_step: Ps,
    pub segment: u64,
    pub poll: Ps,
    /// Client CPU work ([`Work`]) by kind: a fixed part per charge (ps) and thousandths of
    /// a ps per unit, `client_cpu_scale` applied.
    pub work: [(Ps, u64); KINDS],
    /// CRC-32C through the instructions (fixed ps, milli-ps per byte), for a `Work::Crc32c`
    /// of at least `crc32c_hw_min` bytes (as `erda::object_checksum` takes them).
    pub crc32c_hw: (Ps, u64),
    pub crc32c_hw_min: usize,
    pub rnr_period: Ps,
    pub rnr_retry: u32,
    pub dead_timeout: Ps,
    pub recv_depth: u32,
    pub max_message: usize,
    /// `unsignaled_at_post`: [`QueuePair::post_unsignaled`](remora_core::fabric::QueuePair::post_unsignaled) resolves at its doorbell.
    pub unsignaled_at_post: bool,
    /// `server_wake_ns`: a handler thread that blocked for want of a message waits this
    /// long (no CPU) before serving its next one.
    pub server_wake: Ps,
    /// `server_wake_cpu_ns`: the CPU a blocked handler thread spends on each wake (for a
    /// message, or for a reply's send completion).
    pub server_wake_cpu: Ps,
    /// `server_canrt_apply_ns`: the fixed CPU of a CANRT append notice, if set.
    pub canrt_apply: Option<Ps>,
}

impl Tm {
    pub fn new(m: &Model) -> Tm {
        let ps = |ns: f64| (ns * 1000.0).round() as Ps;
        Tm {
            one_way: m.one_way_ps(),
            jitter: ps(m.jitter_ns),
            nic_op: m.nic_op_ps(),
            pcie_read: m.pcie_read_ps(),
            pcie_write: m.pcie_write_ps(),
            host_atomic: m.host_atomic_ps(),
            atomic_units: (m.host_atomic_stalls as usize).min(MAX_ATOMIC_UNITS),
            dm_atomic: m.dm_atomic_ps(),
            post: m.post_ps(),
            server_poll: m.server_poll_ps(),
            handler: m.handler_ps(),
            server_reply: m.server_reply_ps(),
            server_scan: ps(m.server_scan_ns),
            nvm_line: ps(m.nvm_write_ns),
            step: m.segment_step_ps(),
            mppb: m.milli_ps_per_byte(),
            read_step: m.read_step_ps(),
            segment: m.segment(),
            poll: ps(m.client_poll_ns).max(1),
            work: work_costs(m),
            crc32c_hw: (
                (m.client_crc32c_hw_call_ns * m.client_cpu_scale * 1000.0).round() as Ps,
                (m.client_crc32c_hw_ns_per_byte * m.client_cpu_scale * 1e6).round() as u64,
            ),
            crc32c_hw_min: m.client_crc32c_hw_min_bytes as usize,
            rnr_period: ps(m.rnr_timer_ns) + 2 * m.one_way_ps(),
            rnr_retry: m.rnr_retry as u32,
            dead_timeout: m.dead_timeout_ps(),
            recv_depth: m.recv_depth as u32,
            max_message: m.max_message as usize,
            unsignaled_at_post: m.unsignaled_at_post > 0.0,
            server_wake: ps(m.server_wake_ns),
            server_wake_cpu: ps(m.server_wake_cpu_ns),
            canrt_apply: (m.server_canrt_apply_ns >= 0.0).then(|| ps(m.server_canrt_apply_ns)),
        }
    }
}

/// The per-kind costs of [`Tm::work`] from the model's `client_*` work parameters.
fn work_costs(m: &Model) -> [(Ps, u64); KINDS] {
    let k = m.client_cpu_scale;
    let ps = |ns: f64| (ns * k * 1000.0).round() as Ps;
    let mps = |ns: f64| (ns * k * 1e6).round() as u64;
    let mut t = [(0, 0); KINDS];
    for w in Work::ALL {
        t[w.kind()] = match w {
            Work::Crc32c(_) => (
                ps(m.client_crc32c_call_ns),
                mps(m.client_crc32c_ns_per_byte),
            ),
            Work::Crc64(_) => (ps(m.client_crc64_call_ns), mps(m.client_crc64_ns_per_byte)),
            Work::Decode(_) => (
                ps(m.client_decode_call_ns),
                mps(m.client_decode_ns_per_byte),
            ),
            Work::Scan(_) => (0, mps(m.client_scan_ns)),
            Work::Probe(_) => (0, mps(m.client_probe_ns)),
            Work::NodeDecode(_) => (
                ps(m.client_node_decode_call_ns),
                mps(m.client_node_decode_ns_per_slot),
            ),
            Work::GroupDecode(_) => (0, mps(m.client_group_decode_ns)),
            Work::LeafCheck(_) => (
                ps(m.client_leaf_check_call_ns),
                mps(m.client_leaf_check_ns_per_byte),
            ),
            Work::Compare(_) => (ps(m.client_compare_call_ns), mps(m.client_compare_ns)),
            Work::Sort(_) => (ps(m.client_sort_call_ns), mps(m.client_sort_ns)),
            Work::Rect(_) => (ps(m.client_rect_call_ns), mps(m.client_rect_ns)),
            Work::KeyGen(_) => (0, mps(m.client_keygen_ns)),
            Work::Crc64Clmul(_) => (
                ps(m.client_crc64clmul_call_ns),
                mps(m.client_crc64clmul_ns_per_byte),
            ),
        };
    }
    t
}

impl Tm {
    /// Virtual CPU time of `w` on a client thread (0 for a count of 0).
    pub fn work_ps(&self, w: Work) -> Ps {
        if w.count() == 0 {
            return 0;
        }
        let line = |(call, per): (Ps, u64)| call + (w.units().saturating_mul(per) + 500) / 1000;
        match w {
            Work::Crc32c(n) if n >= self.crc32c_hw_min => line(self.crc32c_hw),
            _ => line(self.work[w.kind()]),
        }
    }
}

/// One direction of a NIC's link as a calendar of reserved transmission intervals: a
/// message takes the earliest gap at or after the time it is ready, whatever order the
/// reservations are made in. (Responses are reserved when their verb executes, up to a
/// flight ahead of their arrival; a request that arrives in between must not queue behind
/// them, or two-sided traffic, which mixes both on one link, would see phantom delays.)
#[derive(Debug, Clone, Default)]
pub(crate) struct Link {
    /// Reserved intervals `[start, end)`, sorted, disjoint; touching ones are merged.
    busy: VecDeque<(Ps, Ps)>,
    /// The longest transmission reserved so far: no later request starts more than this
    /// before the current time, so older intervals are dropped.
    longest: Ps,
}

impl Link {
    /// Reserves `w` of the link from the earliest instant at or after `at` that leaves it
    /// free for `w`; returns the start. `now` is the current time (for pruning).
    pub fn reserve(&mut self, now: Ps, at: Ps, w: Ps) -> Ps {
        self.longest = self.longest.max(w);
        let horizon = now.saturating_sub(self.longest);
        while self.busy.front().is_some_and(|&(_, e)| e < horizon) {
            self.busy.pop_front();
        }
        if w == 0 {
            return at;
        }
        // First interval that ends after `at`: the gap search starts there. Most messages
        // go after every reservation (ends are sorted): no search then.
        let mut i = if self.busy.back().is_none_or(|&(_, e)| e <= at) {
            self.busy.len()
        } else {
            self.busy.partition_point(|&(_, e)| e <= at)
        };
        let mut start = at;
        while let Some(&(s, e)) = self.busy.get(i) {
            if start + w <= s {
                break;
            }
            start = start.max(e);
            i += 1;
        }
        let end = start + w;
        // Insert at `i` (everything before ends at or before `start`), merging neighbours.
        let joins_prev = i > 0 && self.busy[i - 1].1 == start;
        let joins_next = self.busy.get(i).is_some_and(|&(s, _)| s == end);
        match (joins_prev, joins_next) {
            (true, true) => {
                self.busy[i - 1].1 = self.busy[i].1;
                self.busy.remove(i);
            }
            (true, false) => self.busy[i - 1].1 = end,
            (false, true) => self.busy[i].0 = start,
            (false, false) => self.busy.insert(i, (start, end)),
        }
        start
    }
}

/// The most processing units `host_atomic_stalls` can name (its range's top).
pub(crate) const MAX_ATOMIC_UNITS: usize = 64;

/// When each NIC processing unit is free again (`host_atomic_stalls`; 0: free).
#[derive(Debug, Clone)]
pub(crate) struct Units(pub [Ps; MAX_ATOMIC_UNITS]);

impl Default for Units {
    fn default() -> Units {
        Units([0; MAX_ATOMIC_UNITS])
    }
}

/// A NIC: one per compute node and one per memory node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Nic {
    pub tx: Link,
    pub rx: Link,
    pub engine_free: Ps,
    /// When each of the first [`Tm::atomic_units`] processing units is free again: a
    /// host-memory atomic waiting for its word's lock slot keeps one until it gets it.
    pub units: Units,
    /// The memory node behind this NIC, if any.
    pub node: Option<NodeId>,
    pub dead: bool,
    /// Service-time multiplier (1.0 normal; a slowed node has more).
    pub slow: f64,
}

impl Nic {
    /// The earliest time one of the first `n` processing units is free (0 for `n == 0`).
    pub fn unit_free(&self, n: usize) -> Ps {
        self.units.0[..n].iter().copied().min().unwrap_or(0)
    }

    /// A request admitted at or after [`Nic::unit_free`]`(n)` keeps the earliest-free of the
    /// first `n` units until `until` (the lowest index among equals: deterministic).
    pub fn keep_unit(&mut self, n: usize, until: Ps) {
        if let Some(u) = self.units.0[..n].iter_mut().min_by_key(|u| **u) {
            *u = (*u).max(until);
        }
    }

    pub fn scale(&self, t: Ps) -> Ps {
        if self.slow == 1.0 {
            t
        } else {
            (t as f64 * self.slow).round() as Ps
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Link;

    #[test]
    fn link_fills_the_earliest_gap_whatever_the_reservation_order() {
        let mut l = Link::default();
        // A response reserved ahead of time...
        assert_eq!(l.reserve(0, 1000, 10), 1000);
        // ...does not delay a request that is on the wire earlier.
        assert_eq!(l.reserve(0, 500, 10), 500);
        // Overlaps queue behind, and a gap too small is skipped.
        assert_eq!(l.reserve(0, 505, 10), 510);
        assert_eq!(l.reserve(0, 985, 10), 985);
        assert_eq!(l.reserve(0, 990, 10), 1010);
        // Touching intervals merged: [500, 520) [985, 995) [1000, 1020).
        assert_eq!(l.busy.len(), 3);
        assert_eq!(l.reserve(0, 995, 5), 995);
        assert_eq!(l.busy.len(), 2);
        // Old intervals are dropped once no request can reach back to them.
        assert_eq!(l.reserve(10_000, 10_000, 10), 10_000);
        assert_eq!(l.busy.len(), 1);
    }
}

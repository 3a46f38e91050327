//! Named hardware profiles: each paper's testbed as a set of [`Model`] parameter values
//! applied on top of the defaults (`--profile NAME`; `--set` still overrides single values).
//!
//! Every value names its source: the paper's evaluation section (`seeds/NNN §...`, the
//! texts in /work/shared/seeds), the vendor's specification of the part the paper names, or
//! a published measurement of that NIC generation. Where the paper is silent the source
//! says "assumed" and why. A profile describes hardware only; the cluster shape (compute
//! and memory nodes, clients, coroutines) stays on the command line, and the repro scales
//! `server_llc_lines` with the data set it loads (a run with fewer keys than the paper's
//! gets a proportionally smaller cache, so it misses as the paper's did).
use super::model::{Model, ModelError};

/// One parameter value of a profile, with where it comes from.
#[derive(Debug, Clone, Copy)]
pub struct ProfileValue {
    /// A [`Model::PARAMS`] name.
    pub param: &'static str,
    /// The value given to `param`, in that parameter's unit.
    pub value: f64,
    /// The paper's words (or the part's specification), or "assumed: why".
    pub source: &'static str,
}

/// A paper's testbed.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    /// The `--profile` name.
    pub name: &'static str,
    /// One line: the paper and the hardware it ran on.
    pub hardware: &'static str,
    /// Values set on top of [`Model::default`]; parameters not listed keep their defaults.
    pub values: &'static [ProfileValue],
}

const fn v(param: &'static str, value: f64, source: &'static str) -> ProfileValue {
    ProfileValue {
        param,
        value,
        source,
    }
}

/// ConnectX-5 on-chip / memory-side request rate, shared by the ConnectX-5/6 profiles.
const CX5_MOPS: &str = "~110 Mops: the rate Sherman measured for ConnectX-5 on-chip atomics \
                        (seeds/002 §2.1), the model's memory-side IOPS bound";
/// Broadwell/Skylake DRAM behind a DRAM-only memory node.
const DRAM_NODE: &str = "DRAM memory node: a line missing the LLC costs a DRAM load \
                         (server_dram_ns), not an Optane one";

/// Every profile, `default` first.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "default",
        hardware: "the model's defaults: ConnectX-6 100 Gb, PCIe Gen3 x16, one handler \
                   thread, 24 MiB LLC, Optane DC PMM on persistent nodes",
        values: &[],
    },
    Profile {
        name: "smart",
        hardware: "SMART (OSDI'23): 16 compute + 2 memory nodes, ConnectX-6 100 Gb, DRAM \
                   memory nodes",
        values: &[
            v(
                "link_gbps",
                100.0,
                "'16 compute nodes, 2 memory nodes, ConnectX-6 100 Gb' (INDEX.md, SMART's \
                 evaluation); the authors' README: CloudLab r650 machines, 'one 100Gbps \
                 Mellanox ConnectX-6 IB RNIC', each on a 100Gbps switch",
            ),
            v(
                "one_way_ns",
                600.0,
                "ConnectX-6 datasheet 'sub-600ns latency' (the default's source)",
            ),
            v(
                "nic_mops",
                110.0,
                "assumed: ConnectX-6 as the ~110 Mops Sherman measured on ConnectX-5 \
                 (seeds/002 §2.1); SMART's text names the memory-side IOPS bound without a \
                 figure, and ConnectX-6 briefs' 215 M msg/s is a two-port peak. It binds \
                 SMART's YCSB-C at quick scale (one READ per lookup, ~90% of 2 x 110 Mops)",
            ),
            v(
                "server_threads",
                1.0,
                "assumed: SMART's memory nodes run no handler per operation (one-sided \
                 only); one thread for allocation",
            ),
            v("server_nvm_read_ns", 90.0, DRAM_NODE),
            v("nvm_write_ns", 0.0, "DRAM memory node: nothing to persist"),
            v(
                "client_cpu_scale",
                1.0,
                "assumed: SMART's text names no client CPU; as the host that calibrated the \
                 client work costs (an AMD EPYC at 2.6 GHz)",
            ),
        ],
    },
    Profile {
        name: "sherman",
        hardware: "Sherman (SIGMOD'22): 8 servers (one compute + one memory node each), \
                   ConnectX-5 100 Gb, Xeon E5-2650 v4, DRAM",
        values: &[
            v(
                "link_gbps",
                100.0,
                "'one 100Gbps Mellanox ConnectX-5 NIC' per server (seeds/002 §3)",
            ),
            v(
                "one_way_ns",
                600.0,
                "assumed: ConnectX-5 port-to-port latency as ConnectX-6's (both EDR, ~1.8 us \
                 64 B READ round trip in perftest)",
            ),
            v("nic_mops", 110.0, CX5_MOPS),
            v(
                "host_atomic_stalls",
                44.0,
                "conflicting RDMA atomics on host memory 'trigger unnecessary retries, which \
                 consumes RDMA IOPS' (seeds/002 §1): a CAS waiting on its word keeps one of the \
                 NIC's processing units, and with all of them kept the NIC serves nothing \
                 else. Assumed: no source gives ConnectX-5's unit count. 44 is the fewest \
                 consistent with the rest of the model: its NIC runs host-memory atomics on \
                 distinct words at nic_mops (110 Mops), each holding its word for \
                 host_atomic_ns (400 ns, two PCIe transactions), so 110 M/s x 400 ns = 44 are \
                 under way at once, and units that block on an atomic's lock wait also block \
                 on its own transactions. Without the stall FG+ at the authors' 176 \
                 synchronous threads is bound only by the hot leaf's critical section and does \
                 not collapse",
            ),
            v(
                "server_threads",
                2.0,
                "'Each MS owns 64GB DRAM and 2 CPU cores' (seeds/002 §3)",
            ),
            v(
                "server_llc_lines",
                491_520.0,
                "30 MiB: the L3 of the Xeon E5-2650 v4 the paper names (seeds/002 §3; Intel \
                 ARK: 30 MB SmartCache)",
            ),
            v("server_nvm_read_ns", 90.0, DRAM_NODE),
            v(
                "nvm_write_ns",
                0.0,
                "'128GB DRAM' servers (seeds/002 §3): nothing to persist",
            ),
            v(
                "client_cpu_scale",
                1.4,
                "'two 2.2GHz Intel Xeon E5-2650 v4 CPUs' (seeds/002 §3): a 2016 Broadwell core \
                 at 2.2 GHz against the calibrating 2.6 GHz EPYC: assumed 1.4x slower per \
                 thread (clock 1.18x, older core ~1.2x)",
            ),
        ],
    },
    Profile {
        name: "canrt",
        hardware: "CANRT: 3 machines, Xeon 2.60 GHz (24 MB L3), Optane DC PMM in AppDirect, \
                   ConnectX-5 InfiniBand",
        values: &[
            v(
                "link_gbps",
                100.0,
                "'Mellanox ConnectX-5 InfiniBand NIC' (seeds/000 §4.1); the paper gives no \
                 speed: assumed EDR 100 Gb, the ConnectX-5 InfiniBand rate",
            ),
            v(
                "one_way_ns",
                600.0,
                "assumed: ConnectX-5 EDR as ConnectX-6 (~1.8 us READ round trip)",
            ),
            v("nic_mops", 110.0, CX5_MOPS),
            v(
                "server_threads",
                1.0,
                "one thread: CANRT's 'a background thread will process the appending \
                 messages from clients' (seeds/000 §3.3); WORT's and WOART's server 'dedicatedly \
                 checks the corresponding client ring buffer' (§4.1), WORT 'does not support \
                 concurrent access requests' (§2.4), and 'due to the server CPU limitation, \
                 WORT and WOART exhibit poor scalability' (§4.5)",
            ),
            v(
                "server_llc_lines",
                393_216.0,
                "'32 KB/1 MB/24 MB L1/L2/L3 cache' (seeds/000 §4.1)",
            ),
            v(
                "server_nvm_read_ns",
                305.0,
                "'commercial Intel Optane DC Persistent Memory ... AppDirect mode' (seeds/000 \
                 §4.1): Optane random read, 305 ns (Izraelevitz et al. 2019)",
            ),
            v(
                "nvm_write_ns",
                90.0,
                "Optane DC PMM clwb + sfence to the ADR domain, ~90 ns (Izraelevitz et al. \
                 2019), the paper's AppDirect device",
            ),
            v(
                "client_cpu_scale",
                1.1,
                "'Intel Xeon(R) 2.60 GHz CPU' with Optane DC PMM (seeds/000 §4.1), so a \
                 Cascade Lake Xeon: assumed 1.1x the calibrating 2.6 GHz EPYC per thread",
            ),
            v(
                "unsignaled_at_post",
                1.0,
                "the paper counts a write done once its WRITE_WITH_IMM is posted ('about 1.5 \
                 RTTs', seeds/000 §4.2: the WRITE as half a round trip, no completion waited \
                 for), as an unsignaled ibv_post_send returns on the ConnectX-5",
            ),
            v(
                "server_handler_ns",
                270.0,
                "derived from the paper's one figure that prices its server, the WORT / CANRT \
                 read latency ratio 1.19-1.22x (seeds/000 §4.3, Fig. 5(b); the paper prints no \
                 absolute throughput or latency): a CANRT read is one data-node READ the server \
                 never sees (2.32 us p50 in this profile, one client, 10,000 keys), a WORT read \
                 its request WRITE_WITH_IMM and reply SEND (2.76 - 1.03 = 1.72 us of it) plus \
                 its server's time, so the ratio leaves WORT's server 1.19-1.22 x 2.32 - 1.72 = \
                 1.03-1.10 us per read; less its reply (server_reply_ns 100) and its radix \
                 path's lines (~610 ns, the LLC and Optane model) that is 320-390 ns of \
                 server_poll_ns 50 + server_handler_ns, so 270-340 ns: 270 (the generic value) \
                 is kept, at the low end. The repro's read-latency row is then a check of this \
                 derivation, not a confirmation. The sim charges it per message on every \
                 handler of the node but CANRT's append notices (server_canrt_apply_ns)",
            ),
            v(
                "server_canrt_apply_ns",
                66.0,
                "measured on the code: CanrtServer's append path (decode the immediate and the \
                 item, check the ticket, flip the bitmap bits) takes 60 ns of host time per \
                 posted update besides its region accesses, which the sim prices itself \
                 (poller/tests/canrt_applier.rs, the_appliers_own_code_on_this_host: median \
                 of 5 runs' medians, AMD EPYC 2 vCPUs, 2026-11-29, release), x 1.1 for the \
                 paper's 2.6 GHz Xeon as client_cpu_scale. The paper prices no CPU of its \
                 applier (§3.3: 'locate the newly inserted DataItem according to the immediate \
                 data, and then checks the opflag field'), and server_handler_ns is derived \
                 from WORT's read, a radix descent and a reply",
            ),
        ],
    },
    Profile {
        name: "erda",
        hardware: "Erda: 2 x 4-core Xeon E5620 2.4 GHz, 12 GB DDR3, ConnectX-3 \
                   40 Gb InfiniBand, NVM emulated as DRAM + 150 ns per write",
        values: &[
            v(
                "link_gbps",
                32.0,
                "'40Gbps Mellanox ConnectX-3 InfiniBand' (seeds/004 §5): 40 Gb/s QDR \
                 signalling carries 32 Gb/s of data (8b/10b encoding)",
            ),
            v(
                "one_way_ns",
                700.0,
                "assumed: a ConnectX-3 64 B READ round trip is ~2.0 us in perftest, ~0.2 us \
                 above ConnectX-5/6",
            ),
            v(
                "nic_mops",
                35.0,
                "assumed from a published measurement: a ConnectX-3 serves ~35 M inbound \
                 WRITEs/s (~26 M READs/s) (Kalia et al., HERD, SIGCOMM'14)",
            ),
            v(
                "pcie_gbps",
                32.0,
                "the Xeon E5620 (Westmere-EP, seeds/004 §5) platform has PCIe 2.0; a \
                 ConnectX-3 is x8: 5 GT/s x 8 x 8/10 = 32 Gb/s",
            ),
            v(
                "server_threads",
                1.0,
                "the paper's server (2 x 4-core Xeon E5620, seeds/004 §5) names no thread \
                 count; 'the read procedures of Redo Logging and Read After Write need CPU \
                 involvements' (§5.3) says its baselines were server-CPU bound, and the code \
                 it releases serves all connections from one completion-queue thread (one \
                 poll_cq thread per device context): 1. The Erda repro's \
                 erda-server-threads rows measure 1-8",
            ),
            v(
                "background_threads",
                1.0,
                "the authors' servers run their background work in a pthread of its own, \
                 beside the poll_cq thread: Erda's log cleaner (pthread_create of \
                 logcleaning, Erda/server/server_logclean.c) and the baselines' apply of the \
                 ring buffer to the table (pthread_create of rbflush, Redo \
                 Logging/server.c and Read After Write/server.c); the paper's server has 8 \
                 cores (seeds/004 §5), so that thread has a core of its own",
            ),
            v(
                "server_llc_lines",
                196_608.0,
                "12 MiB: the L3 of the Xeon E5620 (Intel ARK: 12 MB SmartCache)",
            ),
            v(
                "server_nvm_read_ns",
                90.0,
                "'adds extra write latency of DRAM to simulate NVM' (seeds/004 §5): reads \
                 are DRAM reads",
            ),
            v(
                "nvm_write_ns",
                150.0,
                "'By default, we add 150ns of extra write latencies' (seeds/004 §5)",
            ),
            v(
                "client_cpu_scale",
                2.0,
                "'two 2.4 GHz Intel Xeon E5620 CPUs' (seeds/004 §5): a 2010 Westmere core \
                 (SSE4.2, no AVX) against the calibrating 2.6 GHz \
                 EPYC: assumed 2x slower per thread",
            ),
            v(
                "server_wake_ns",
                3000.0,
                "the authors' servers block in ibv_get_cq_event between requests (poll_cq in \
                 Redo Logging/server.c, Read After Write/server.c, Erda/server/server.c), so a \
                 request that finds the thread asleep waits for its idle core to wake: at \
                 least the exit latency of the shallowest idle state of the paper's Xeon \
                 E5620 (Westmere-EP, seeds/004 §5), 3 us for C1 in Linux's intel_idle table \
                 for Nehalem/Westmere (nehalem_cstates: C1 3, C1E 10, C3 20, C6 200 us); \
                 the interrupt, the event's delivery and the switch-in add to it, unmodelled",
            ),
            v(
                "server_wake_cpu_ns",
                4400.0,
                "measured, then scaled to the paper's core: the authors' servers block in \
                 ibv_get_cq_event between completions and post every reply signalled on the \
                 same CQ (poll_cq and send_msg / write_with_imm in Erda/server/server.c, Redo \
                 Logging/server.c, Read After Write/server.c), so an idle server wakes twice \
                 per request: for the request's receive, then for its reply's send completion \
                 (the sim wakes it for each when it finds the thread blocked). One blocking \
                 wake costs the woken thread 2.18, 2.26 and 2.42 us of CPU in three runs on \
                 the calibrating 2.6 GHz EPYC (a KVM guest shared with other builds; `cargo \
                 test --release -p remora-poller --test erda_wake -- --nocapture`: an eventfd \
                 read() woken by another thread, 3997-3999 voluntary switches in 4000 \
                 wakes), 2.2 us taken, x 2 for the Xeon E5620 core as \
                 client_cpu_scale assumes (seeds/004 §5) = 4.4 us a wake, 8.8 us for an idle \
                 request's two. Cross-check, not a confirmation: the paper's CPU ratios \
                 (update-only 1.17x Redo, 1.11x RAW, averages over Figs. 22-25, §5.4) imply \
                 a cost of 8.5-11 us per request common to the three systems beyond their \
                 persists",
            ),
        ],
    },
    Profile {
        name: "catfish",
        hardware: "Catfish: 9 nodes of 2 x 14-core Xeon E5-2680 v4 2.4 GHz, 512 GB \
                   DDR4, ConnectX-5 EDR 100 Gb InfiniBand",
        values: &[
            v(
                "link_gbps",
                100.0,
                "'a Mellanox MT27800 Family (ConnectX-5) adapter card, supporting EDR 100 \
                 Gbps InfiniBand' (seeds/003 §5)",
            ),
            v(
                "one_way_ns",
                600.0,
                "assumed: ConnectX-5 EDR as ConnectX-6 (~1.8 us READ round trip)",
            ),
            v("nic_mops", 110.0, CX5_MOPS),
            v(
                "server_threads",
                28.0,
                "'dual-socket Intel Xeon E5-2680 v4 (2x14-core Intel Broadwell, 2.40 GHz)' \
                 (seeds/003 §5): 28 cores; assumed one server thread per core (the paper \
                 does not give the count); `bench --server-threads` overrides it",
            ),
            v(
                "server_llc_lines",
                573_440.0,
                "35 MiB: the L3 of one Xeon E5-2680 v4 socket (Intel ARK: 35 MB SmartCache)",
            ),
            v("server_nvm_read_ns", 90.0, DRAM_NODE),
            v(
                "nvm_write_ns",
                0.0,
                "'512 GB DDR4' (seeds/003 §5): a DRAM server, nothing to persist",
            ),
            v(
                "client_cpu_scale",
                1.3,
                "'Intel Xeon E5-2680 v4 (... Broadwell, 2.40 GHz)' (seeds/003 §5) against the \
                 calibrating 2.6 GHz EPYC: assumed 1.3x slower per thread (clock 1.08x, older \
                 core ~1.2x)",
            ),
            v(
                "server_handler_ns",
                48_650.0,
                "derived from the paper's absolute figure, not measured hardware: its fast \
                 messaging is 'server-CPU bound' (seeds/003 §5.2.1: 'a large portion of time \
                 is used to poll if new messages arrive and the server-side CPUs become the \
                 bottleneck') at a peak of 575.53 Kops on the R*-tree at scale 0.00001, on 28 \
                 cores: 28 / 575.53 Kops = 48.65 us of server CPU per request. The cost is \
                 per message, not per node visited: the paper's fast messaging stays flat \
                 from 10K to 10M rectangles (Fig. 23) and from 15 to 130 entries per node \
                 (Fig. 24), and within 11% on the basic R-tree (638.91 Kops, §5.2.2). \
                 Cross-check: the event-based server saturated in Fig. 6 serves 80 clients at \
                 152.50 us (§4.2), 525 Kops, 53 us per request on 28 cores. The repro prints \
                 575.53 Kops beside remora's fast messaging as an absolute-figure check of \
                 this derivation, not as a confirmation; the tree's memory is charged on top \
                 (under 1 us a search)",
            ),
            v(
                "server_tree_lock",
                1.0,
                "remora's Catfish server: inserts and other writes run under one lock per \
                 tree and searches take none (they check each node's version and checksum, \
                 core/src/catfish/shared.rs), so an insert waits for the inserts before it \
                 and a search waits for nothing. The paper's 'concurrent lock [28] to avoid \
                 the read-write conflict and write-write conflict' (seeds/003 §3.2; [28]: \
                 Kornacker and Banks, VLDB'95) locks nodes, which a search of a node being \
                 rewritten waits for; a reader-writer lock over the whole tree \
                 (`--set server_tree_lock=2`) over-states that, and the paper gives no lock \
                 figures to size it by",
            ),
            v(
                "server_store_window",
                1.0,
                "'the retrieved R-tree node via RDMA Read is possibly being written by a \
                 server thread ... We apply a version number-based mechanism [12] to avoid \
                 the read-write conflict' (seeds/003 §3.2), and offloading 'degrades when \
                 increasing the number of clients' because 'the higher probability the \
                 clients will find the read-write conflict' (§5.2.1, Figs. 13-14): a \
                 server's node rewrite takes the time its thread spends writing it, and an \
                 offloaded READ overlapping it fails its check and reads again",
            ),
        ],
    },
];

/// The profile called `name`, or an error listing the names.
pub fn profile(name: &str) -> Result<&'static Profile, String> {
    PROFILES.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
        format!(
            "unknown hardware profile '{name}'; known: {}",
            names.join(", ")
        )
    })
}

impl Profile {
    /// Sets every value of the profile on `m`.
    pub fn apply(&self, m: &mut Model) -> Result<(), ModelError> {
        for pv in self.values {
            m.set(pv.param, &pv.value.to_string())?;
        }
        Ok(())
    }

    /// The model of this profile: defaults, then its values.
    pub fn model(&self) -> Model {
        let mut m = Model::default();
        // Every value is checked by the `profiles_are_valid` test.
        let _ = self.apply(&mut m);
        m
    }

    /// The profile as a markdown table: parameter, value, default, source.
    pub fn table(&self) -> String {
        let mut s = format!(
            "profile `{}`: {}\n\n| parameter | value | default | source |\n|---|---|---|---|\n",
            self.name, self.hardware
        );
        let d = Model::default();
        for pv in self.values {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                pv.param,
                pv.value,
                d.get(pv.param).unwrap_or(f64::NAN),
                pv.source
            ));
        }
        if self.values.is_empty() {
            s.push_str("| (none) | | | every parameter at its default |\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_valid() {
        for p in PROFILES {
            let mut m = Model::default();
            p.apply(&mut m)
                .unwrap_or_else(|e| panic!("profile {}: {e}", p.name));
            for pv in p.values {
                assert_eq!(m.get(pv.param), Some(pv.value), "{} {}", p.name, pv.param);
                assert!(!pv.source.is_empty(), "{} {}", p.name, pv.param);
            }
            let mut seen: Vec<&str> = p.values.iter().map(|v| v.param).collect();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), p.values.len(), "{}: a parameter twice", p.name);
        }
        assert_eq!(profile("default").unwrap().model(), Model::default());
        assert!(profile("nope").unwrap_err().contains("erda"));
        let erda = profile("erda").unwrap().model();
        assert_eq!(erda.link_gbps, 32.0);
        assert_eq!(erda.nvm_write_ns, 150.0);
        assert!(profile("catfish").unwrap().table().contains("E5-2680"));
    }
}

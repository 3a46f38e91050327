//! The NIC/network model: every parameter named, defaulted, and sourced.
//!
//! Parameters are set from code ([`Model::set`]), from the command line (`--set name=value`)
//! or from a file (`name = value` lines, `#` comments; [`Model::apply_file_text`]). Unknown
//! names and bad values are errors that say what is accepted.
//!
//! The same module computes the model's own analytic figures ([`Model::idle_latency_ps`],
//! [`Model::bound_mops`]): the calibration tests check that the simulation reproduces them.
//!
//! Time inside the simulator is kept in picoseconds so that link serialization times
//! (80 ps per byte at 100 Gb/s) add up without rounding drift.
//!
//! Submodules, by mechanism: `parse` (setting parameters from `--set` pairs and model
//! files, [`ModelError`], the summary and description) and `figures` (derived quantities
//! and the analytic figures).
mod figures;
mod parse;
pub use figures::{Load, ModelVerb};
pub use parse::ModelError;

/// Virtual time in picoseconds.
pub type Ps = u64;

/// One model parameter: name, default, unit and where the figure comes from.
pub struct ParamInfo {
    /// The parameter's name, as `--set` and model files spell it (the [`Model`] field).
    pub name: &'static str,
    /// Its value in [`Model::default`].
    pub default: f64,
    /// Its unit (`"ns"`, `"Gb/s"`, `"B"`, ...), for messages and model dumps.
    pub unit: &'static str,
    /// Smallest value [`Model::set`] accepts (inclusive).
    pub min: f64,
    /// Largest value [`Model::set`] accepts (inclusive).
    pub max: f64,
    /// Where the default comes from (datasheet, paper section, measurement), and what the
    /// parameter means.
    pub source: &'static str,
}

macro_rules! params {
    ($( $field:ident : $default:expr, $unit:expr, [$min:expr, $max:expr], $source:expr; )*) => {
        /// The NIC/network model. See [`Model::PARAMS`] for each parameter's source.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Model {
            $( #[doc = $source] pub $field: f64, )*
        }

        impl Default for Model {
            fn default() -> Model {
                Model { $( $field: $default, )* }
            }
        }

        impl Model {
            /// Every parameter, in declaration order.
            pub const PARAMS: &'static [ParamInfo] = &[
                $( ParamInfo {
                    name: stringify!($field),
                    default: $default,
                    unit: $unit,
                    min: $min,
                    max: $max,
                    source: $source,
                }, )*
            ];

            fn slot(&mut self, name: &str) -> Option<&mut f64> {
                match name {
                    $( stringify!($field) => Some(&mut self.$field), )*
                    _ => None,
                }
            }

            /// The value of parameter `name`.
            pub fn get(&self, name: &str) -> Option<f64> {
                match name {
                    $( stringify!($field) => Some(self.$field), )*
                    _ => None,
                }
            }
        }
    };
}

params! {
    one_way_ns: 600.0, "ns", [0.0, 1e9],
        "One-way latency, requester NIC to responder NIC, excluding serialization: ConnectX-6 \
         datasheet 'sub-600ns latency' port to port; with the PCIe read below this makes a 64 B \
         READ round trip of ~1.8 us, the ib_read_lat (perftest) figure on ConnectX-5/6 EDR.";
    link_gbps: 100.0, "Gb/s", [0.1, 10000.0],
        "Link bandwidth per NIC and direction: 100 Gb/s EDR/100GbE, the ConnectX-5 of Sherman \
         (seeds/002 §3) and Catfish (seeds/003 §5), the ConnectX-6 100 Gb of SMART (INDEX.md).";
    header_bytes: 42.0, "B", [0.0, 4096.0],
        "Wire overhead per packet: InfiniBand LRH 8 + BTH 12 + RETH 16 + ICRC 4 + VCRC 2 bytes \
         (IBTA spec vol. 1, ch. 9).";
    mtu: 4096.0, "B", [256.0, 65536.0],
        "Path MTU: 4096 B, the largest InfiniBand MTU and the perftest default on ConnectX.";
    nic_mops: 110.0, "Mops", [0.001, 10000.0],
        "Per-NIC request-processing rate, the memory-side IOPS bound of SMART (seeds/001, \
         challenge 2): ~110 Mops, the rate Sherman measured for atomics on ConnectX-5 on-chip \
         memory where no PCIe is involved (seeds/002 §2.1). ConnectX-6 briefs advertise 215 M \
         msg/s, a two-port marketing peak.";
    pcie_read_ns: 500.0, "ns", [0.0, 1e9],
        "Responder DMA read of host memory (a PCIe round trip): ~400-600 ns on PCIe Gen3 x16 \
         (Neugebauer et al., 'Understanding PCIe performance', SIGCOMM'18); READ only.";
    pcie_gbps: 126.0, "Gb/s", [0.1, 10000.0],
        "Responder PCIe DMA bandwidth: PCIe Gen3 x16, 8 GT/s x 16 lanes x 128/130 = 126 Gb/s. \
         READ segments are fetched at this pace (WRITE segments are placed at link pace, as they \
         arrive), so a READ overlapping a WRITE in time crosses it and sees a torn mix.";
    pcie_write_ns: 200.0, "ns", [0.0, 1e9],
        "Responder DMA write until visible in host memory (posted PCIe write, one way); \
         assumed half a PCIe round trip. The WRITE ack leaves after the last byte is placed.";
    host_atomic_ns: 400.0, "ns", [0.0, 1e9],
        "Occupancy of one host-memory word by a NIC atomic: two PCIe transactions (read, then \
         write) under the NIC's internal lock (Sherman, seeds/002 §1), so atomics on one address \
         serialize at 1/400ns = 2.5 Mops, the ~2-3 Mops same-address figure of Kalia et al., \
         'Design guidelines for high performance RDMA systems', ATC'16.";
    host_atomic_stalls: 0.0, "units", [0.0, 64.0],
        "N >= 1: the NIC serves requests on N processing units, and a host-memory atomic that \
         waits for its word's lock slot keeps one of them until it gets the slot (conflicting \
         atomics 'consume RDMA IOPS', Sherman, seeds/002 §1); the NIC admits other requests \
         while a unit is free and, with all N kept, waits for the first to free. 1: such an \
         atomic holds the whole request engine. 0 (default): it waits on its slot alone and \
         only its own queue pair's later verbs wait behind it. A whole number (the fraction is \
         dropped); vendors publish no processing-unit count.";
    dm_atomic_mops: 110.0, "Mops", [0.001, 10000.0],
        "Atomics on one device-memory (on-chip) word: ~110 Mops (Sherman, seeds/002 §2.1, \
         ConnectX-5 on-chip memory).";
    atomic_slots: 4096.0, "slots", [1.0, 1048576.0],
        "Hashed lock slots of the NIC atomic unit: atomics whose 8-byte words hash to one slot \
         serialize. Assumed (vendors do not publish it); large enough that distinct words rarely \
         collide.";
    server_poll_ns: 50.0, "ns", [0.0, 1e9],
        "Memory-node CPU time to take one receive completion off the completion queue (poll the \
         CQ, read the CQE, find the connection): assumed one busy-poll iteration, the same order \
         as client_poll_ns (a CQE read is one cache miss on the NIC-written ring).";
    server_handler_ns: 270.0, "ns", [0.0, 1e12],
        "Memory-node CPU time of the service logic for one message apart from the memory it \
         touches (decode, dispatch, compute): assumed. The lines the handler touches are \
         charged on top (server_llc_*, server_dram_ns, server_nvm_read_ns), so a message \
         costs server_poll_ns + server_handler_ns + its memory + server_reply_ns per reply; \
         270 ns keeps typical services at their former ~0.5 us per request, the order of \
         Catfish's fast-messaging server cost (seeds/003 §3): a Catfish R-tree search touches \
         ~39 cached lines (~76 ns, a node's lines read together overlap), a WORT lookup ~9 \
         (~80 ns), an Erda-baseline read ~6.5. Was 350 ns flat for every handler before memory \
         was modelled; the echo service, touching none, now costs 420 ns instead of 500.";
    server_llc_lines: 393216.0, "lines", [1.0, 1e9],
        "Memory-node last-level cache, in 64-byte lines, one per node shared by its handler \
         threads (CLOCK replacement, llc.rs): 393216 lines = 24 MiB, the L3 of the CANRT \
         paper's Xeon server (seeds/000 §4.1: 32 KB/1 MB/24 MB L1/L2/L3). NIC writes are \
         placed in it (DDIO); persisted lines stay cached. A data set much larger than the \
         sim's (the papers load millions of keys) is modelled by scaling this down with it.";
    server_llc_hit_ns: 10.0, "ns", [0.0, 1e9],
        "Memory-node CPU time for a line the handler finds cached: assumed 10 ns, between an \
         L2 hit (~14 cycles, ~5 ns) and an L3 hit (~77 cycles, ~30 ns at 2.6 GHz) on \
         Skylake-SP (AnandTech, 'The Intel Skylake-X review', 2017, cache table); the lines a \
         handler reuses most (ring heads, roots, metadata) sit in L1/L2. Charged once per \
         distinct line per message (a later touch in the same message is an L1 hit, free).";
    server_dram_ns: 90.0, "ns", [0.0, 1e9],
        "Memory-node CPU time for a line missing the LLC on a DRAM node: ~90 ns idle random \
         load latency of local DDR4 (Izraelevitz et al., 'Basic Performance Measurements of \
         the Intel Optane DC Persistent Memory Module', arXiv:1903.05714, 2019: random Optane \
         loads, 305 ns, are about 3x local DRAM's). A store miss fetches the line too \
         (write-allocate), so it costs the same.";
    server_nvm_read_ns: 305.0, "ns", [0.0, 1e9],
        "Memory-node CPU time for a line missing the LLC on a persistent node: 305 ns, the \
         idle random read latency of Optane DC PMM in App Direct mode (Izraelevitz et al., \
         arXiv:1903.05714, 2019; Yang et al., 'An Empirical Guide to the Behavior and Use of \
         Scalable Persistent Memory', FAST'20). A store miss reads the line first (RFO).";
    server_mlp: 10.0, "misses", [1.0, 1024.0],
        "Memory-level parallelism within one contiguous access (one LocalRegion read/write \
         call): the slowest of its new lines costs its full latency (hit or miss), each other \
         new line 1/server_mlp of its own, as the core's fill buffers and prefetchers overlap \
         a sequential access (a Skylake core's 10 L1D line fill buffers bound its outstanding \
         misses: Intel 64 and IA-32 Architectures Optimization Reference Manual); separate \
         calls are dependent accesses (a pointer chase) and do not overlap. Assumed.";
    server_reply_ns: 100.0, "ns", [0.0, 1e9],
        "Memory-node CPU time to post one reply SEND (build the work request, ring the doorbell): \
         the same MMIO doorbell cost as client_post_ns (Kalia et al., ATC'16 §3). Replies are \
         posted without waiting for their acks (an event-based server reaps send completions \
         lazily).";
    server_threads: 1.0, "threads", [1.0, 1024.0],
        "Memory-node CPU threads running handlers (disaggregated memory nodes have near-zero \
         compute: Sherman, seeds/002 §1). Connection k of a node (in connect order) is served \
         by thread k mod server_threads, as an event-based server assigns accepted connections \
         round-robin; each thread serves its messages one at a time, first come first served.";
    server_scan_ns: 0.0, "ns", [0.0, 1e9],
        "Polling-based server (the Catfish paper's event vs polling comparison, seeds/003 \
         Fig. 6): CPU time a handler thread spends checking one connection's request ring for \
         each message it finds, since a polling thread scans its whole share (connections made \
         to the node / server_threads) where an event-based one is told the connection by its \
         completion queue. 0 (default): event-based. Assumed when set (~one cache miss per \
         ring, e.g. 25 ns).";
    client_post_ns: 100.0, "ns", [0.0, 1e9],
        "Client CPU time to build a work request batch and ring the doorbell (MMIO): assumed \
         ~100 ns (Kalia et al., ATC'16 §3: doorbell MMIOs cost ~ hundreds of cycles). One client \
         thread thus posts at most 10 M batches/s.";
    client_cpu_scale: 1.0, "x", [0.0, 1000.0],
        "Multiplier on every client CPU work cost below (the client_*_ns work parameters, \
         not client_post_ns): 1.0 is the host that calibrated them; a paper's hardware \
         profile sets it for a slower (>1) or faster (<1) client CPU.";
    client_crc32c_call_ns: 5.0, "ns", [0.0, 1e9],
        "Client CPU time of one CRC-32C call by slice-by-16 tables (fixed part; Work::Crc32c \
         below client_crc32c_hw_min_bytes): Erda's object checksums through \
         erda::object_checksum below 128 B, and CANRT's item checksums; the line through the \
         40 B and 120 B object_checksum rows (13.8, 31.5 ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). Was 8.25, measured on \
         an older host.";
    client_crc32c_ns_per_byte: 0.221, "ns/B", [0.0, 1e6],
        "Client CPU time per byte of a CRC-32C by slice-by-16 tables; measured as \
         client_crc32c_call_ns (was 0.30). Literature: slice-by-8/16 table CRCs run at ~1-2 \
         cycles/B (Kounavis and Berry, ISCC'05).";
    client_crc32c_hw_call_ns: 12.0, "ns", [0.0, 1e9],
        "Client CPU time of one CRC-32C call through the crc32c crate's SSE4.2/ARMv8 \
         instructions (fixed part), which erda::object_checksum takes from 128 B (the sim \
         charges a Work::Crc32c of at least client_crc32c_hw_min_bytes on this line, as that \
         function does): the line fitted (least maximum error, 3.4%) to the 256 B, 1 KiB and \
         4 KiB object_checksum rows (20.9, 43.3, 144.8 ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17); the crate runs short \
         inputs as one serial crc32 stream and long ones as three. Was 38.0, measured on an \
         older host.";
    client_crc32c_hw_ns_per_byte: 0.032, "ns/B", [0.0, 1e6],
        "Client CPU time per byte of a CRC-32C through the crc32c crate's instructions; \
         measured as client_crc32c_hw_call_ns (was 0.033). Literature: ~0.05 ns/B with three \
         interleaved crc32q streams at 3 GHz (Intel, 'Fast CRC Computation for iSCSI \
         Polynomial Using CRC32 Instruction', 2011).";
    client_crc32c_hw_min_bytes: 128.0, "B", [0.0, 1e9],
        "Checksums at least this long take the CRC-32C instruction line (client_crc32c_hw_*), \
         shorter ones the table line: erda::HW_CRC_MIN_BYTES, where erda::object_checksum \
         switches (the crate's fixed costs lose to the tables below it, measured by \
         erda_crc).";
    client_crc64_call_ns: 11.0, "ns", [0.0, 1e9],
        "Client CPU time of one CRC-64 call by slice-by-16 tables (fixed part; Work::Crc64): \
         the line SMART's leaf checksum (layouts::smart::leaf_crc_table, its fallback) and \
         Catfish's node checks take on a CPU without the carry-less multiply; the line \
         through the 64 B and 1 KiB leaf_crc_table rows (28.7, 293.6 ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). Was 20.0, \
         measured on an older host. Literature: slice-by-8/16 table CRCs run at ~1-2 \
         cycles/B (Kounavis and Berry, 'A Systematic Approach to Building High Performance \
         Software-Based CRC Generators', ISCC'05).";
    client_crc64_ns_per_byte: 0.276, "ns/B", [0.0, 1e6],
        "Client CPU time per byte of a CRC-64 by slice-by-16 tables (Work::Crc64); measured \
         as client_crc64_call_ns (was 0.356).";
    client_crc64clmul_call_ns: 2.56, "ns", [0.0, 1e9],
        "Client CPU time of one CRC-64 call by carry-less multiply (fixed part) and per byte \
         (Work::Crc64Clmul): Catfish's node checks (CRC-64/ECMA-182, \
         remora_layouts::catfish::node_crc) and the checksum SMART computes into a leaf it \
         builds (CRC-64/XZ, the same PCLMULQDQ folding code with other constants), where the \
         CPU has it, as the papers' Xeons do; the line fitted (least maximum error, 0.4%) to \
         the node_crc rows at fanout 16, 30 and 130 (25.8, 45.0, 184.7 ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). SMART's \
         leaf check has its own line (client_leaf_check_*). Was 6.25, measured on an older \
         host. Literature: PCLMULQDQ folding runs CRCs at well under 1 cycle/B (Gopal et al., \
         'Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction', Intel, \
         2009).";
    client_crc64clmul_ns_per_byte: 0.0579, "ns/B", [0.0, 1e6],
        "Per byte of a CRC-64 by carry-less multiply (Work::Crc64Clmul); see \
         client_crc64clmul_call_ns (was 0.0645).";
    client_leaf_check_call_ns: 20.5, "ns", [0.0, 1e9],
        "Client CPU time of one check of a SMART leaf image (Work::LeafCheck), fixed part: \
         core::smart's check_leaf, LeafView::decode of the header words then leaf_crc \
         (CRC-64/XZ by carry-less multiply) over the valid bit, meta word, key and value \
         area, as read_leaf and the scan run it on every leaf read; the line (this and \
         client_leaf_check_ns_per_byte) fitted (least maximum error, 7.0%) to the 64 B, \
         256 B and 1 KiB leaf rows (25.1, 29.9, 71.6 ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). Its own kind: a 64 B \
         leaf's check costs 25 ns where Catfish's CRC line gives 6 ns (a short CRC's serial \
         folds and the decode). Before: charged as Crc64Clmul (0.41x of the measured 64 B \
         leaf).";
    client_leaf_check_ns_per_byte: 0.0451, "ns/B", [0.0, 1e6],
        "Per byte of a SMART leaf checked (Work::LeafCheck); see client_leaf_check_call_ns.";
    client_decode_call_ns: 11.0, "ns", [0.0, 1e9],
        "Client CPU time of one decode of a page image or message (Work::Decode), fixed part: \
         Sherman's PageHeader::decode (header words, then a hash of a leaf's header or of a \
         whole internal page), also charged for WORT replies and Catfish search hits; the \
         line (this and client_decode_ns_per_byte) through Sherman's leaf-header (64 B) and \
         internal-page (1 KiB) rows (15.4, 80.9 ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). SMART's node decode and \
         CHIME's group decode have kinds of their own (client_node_decode_*, \
         client_group_decode_ns). Was 27.2, a line fitted to both Sherman's and SMART's \
         decodes (0.57-1.76x of each) on an older host.";
    client_decode_ns_per_byte: 0.0682, "ns/B", [0.0, 1e6],
        "Client CPU time per byte of a page image or message decoded (Work::Decode); \
         measured as client_decode_call_ns (was 0.162).";
    client_node_decode_call_ns: 35.0, "ns", [0.0, 1e9],
        "Client CPU time of one SMART NodeImg::decode (Work::NodeDecode), fixed part: the \
         header checked, a 256-slot image initialised and moved whatever the node's type; \
         the line (this and client_node_decode_ns_per_slot) fitted (least maximum error, \
         7%) to the Node4, Node16, Node48 and Node256 rows (43.3, 54.2, 107.2, 398.4 ns, \
         the real NodeImg::decode through core::smart::calibrate_node_decode; a copy of \
         its loop measured 38.3, 49.2, 95.5, 348.7), \
         measured by `remora perf --cpu-calibration` (bins/src/bench/cpu_calibration.rs) \
         on an idle host (AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 vCPUs, release, \
         pinned; three invocations, 2026-12-01, load average 1). Was charged as Work::Decode of the node's bytes (0.57-0.78x).";
    client_node_decode_ns_per_slot: 1.45, "ns", [0.0, 1e9],
        "Client CPU time per slot word a SMART NodeImg::decode reads and bounds-checks \
         (Work::NodeDecode); see client_node_decode_call_ns.";
    client_group_decode_ns: 40.5, "ns", [0.0, 1e9],
        "Client CPU time of one CHIME group verified and decoded (Work::GroupDecode): \
         layouts::chime::decode_group, the group's 20 words hashed in one serial chain and \
         its 8 entries decoded; the decode_group row (40.5 ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). Was charged as \
         Work::Decode of the header bytes (a run) or the group's bytes (a speculative read).";
    client_scan_ns: 2.45, "ns", [0.0, 1e9],
        "Client CPU time per entry of a linear scan (Work::Scan): one slot of a Sherman leaf, \
         one item of a CANRT data node, one child of a SMART Node4-256: load, decode and \
         compare one key; Sherman's verify_leaf over a full leaf (39 slots, 95.6 ns), \
         measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). Was 3.27, measured on an older host.";
    client_probe_ns: 14.6, "ns", [0.0, 1e9],
        "Client CPU time of one probe of a client-side cache or hash table (Work::Probe): \
         hash the key, walk one bucket, as SMART's node cache, Sherman's index cache and \
         CANRT's prefix cache do; a probe of Sherman's index cache (a BTreeMap of 4096 pages \
         by low fence, 14.6 ns; 14-33 ns over the day's runs: it is sensitive to other \
         processes' cache use), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). Was 19.5, measured on an older, idle host. Literature: one \
         DRAM-missing hash probe ~80-100 ns, an L2 hit a few ns.";
    client_compare_call_ns: 1.1, "ns", [0.0, 1e9],
        "Client CPU time of one binary search (Work::Compare), fixed part: Sherman's \
         route_for (slicing the page's entries, building the route); the line (this and \
         client_compare_ns) fitted (least maximum error, 5%) to route_for over pages of 4, \
         15 and 59 separators (3, 4, 6 steps: 3.0, 3.8, 4.8 ns on an idle host; 3.5, 5.0, \
         6.8 ns and up to 2x that under load average 15-17), measured by `remora perf \
         --cpu-calibration` (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, \
         at 2.6 GHz, 2 vCPUs, release, pinned; three invocations, 2026-12-01, load \
         average 1).";
    client_compare_ns: 0.63, "ns", [0.0, 1e9],
        "Client CPU time of one step of a binary search (Work::Compare, charged as \
         search_steps(count) steps): Sherman's internal pages; see client_compare_call_ns. \
         Was 0.73, measured on a case that drew its key with a division inside the timing \
         and charged the page's capacity, not its count.";
    client_sort_call_ns: 7.8, "ns", [0.0, 1e9],
        "Client CPU time of one sort (Work::Sort), fixed part: the line (this and \
         client_sort_ns) fitted (least maximum error, 0.3%) to sort_unstable_by_key of 8, \
         20 and 39 (key, slot, len) scan entries, less the copy of the batch (30.3, 77.6, \
         172.3 ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17).";
    client_sort_ns: 0.70, "ns", [0.0, 1e9],
        "Client CPU time per n log2 n of a sort of n items (Work::Sort; the comparison count \
         of a comparison sort): range results and Catfish's collected entries; see \
         client_sort_call_ns. Was 0.83.";
    client_rect_call_ns: 1.65, "ns", [0.0, 1e9],
        "Client CPU time of one R-tree node's entries tested against a search window \
         (Work::Rect), fixed part: the entry loop of Catfish's offloaded search \
         (core/src/catfish/client/offload.rs: Rect::intersects per entry, hits pushed); the \
         line (this and client_rect_ns) through that loop over 16 and 130 entries of 16 \
         nodes in turn, ~6% of entries hit (8.5, 57.3 ns on an idle host; 10.0, 75.2 ns under \
         load average 15-17, and with an earlier build), measured by `remora perf \
         --cpu-calibration` (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, \
         at 2.6 GHz, 2 vCPUs, release, pinned; three invocations, 2026-12-01, load \
         average 1). Was 0 (no fixed part), \
         measured on a vectorised count over bare rectangles.";
    client_rect_ns: 0.428, "ns", [0.0, 1e9],
        "Client CPU time per entry of an R-tree node tested against a search window \
         (Work::Rect); see client_rect_call_ns. Was 0.63.";
    client_keygen_ns: 35.3, "ns", [0.0, 1e9],
        "Client CPU time to draw and format one YCSB key (Work::KeyGen): the zipfian or \
         uniform chooser and the key bytes, which the papers' benchmark clients pay per \
         operation too; the bench's zipfian chooser over 1M keys and an 8 B int key (35.2 \
         ns), measured on this host by `remora perf --cpu-calibration` \
         (bins/src/bench/cpu_calibration.rs: AMD EPYC family 26, Zen 5, at 2.6 GHz, 2 \
         vCPUs, release, pinned; median of 9 invocations of 9 runs of 400 interleaved \
         rounds, 2026-12-01, under load average 15-17). Was 39.0, measured on an older host.";
    client_poll_ns: 50.0, "ns", [1.0, 1e9],
        "Client CPU time of one busy-poll iteration: a coroutine that yields without waiting for \
         a verb resumes this much later (assumed; keeps spin loops from freezing virtual time).";
    recv_depth: 64.0, "receives", [1.0, 65536.0],
        "Receives posted per queue pair (each side); a SEND or WRITE_WITH_IMM finding none gets \
         RNR NAKs. A memory node reposts a receive once its handler has consumed the message; a \
         client, when it takes the completion.";
    max_message: 4096.0, "B", [256.0, 1048576.0],
        "Receive buffer size: the largest SEND payload (one MTU).";
    rnr_timer_ns: 10000.0, "ns", [0.0, 1e12],
        "RNR NAK timer: 0.01 ms, the smallest IB min_rnr_timer value (IBTA table 45).";
    rnr_retry: 7.0, "retries", [0.0, 1000.0],
        "RNR retries before RNR_RETRY_EXC_ERR: 7, the largest finite IB rnr_retry (7 means \
         'infinite' on hardware; the sim keeps it bounded).";
    ack_timeout_ns: 67108864.0, "ns", [1.0, 1e13],
        "Transport ack timeout: 4.096 us x 2^14 = 67 ms (IB local ack timeout 14, a common \
         rdma_cm default).";
    retry_cnt: 7.0, "retries", [0.0, 7.0],
        "Transport retries before RETRY_EXC_ERR: 7 (IB maximum); a dead node is detected after \
         ack_timeout x (retry_cnt + 1).";
    segment_bytes: 64.0, "B", [8.0, 4096.0],
        "Tearing unit: a READ is sampled from and a WRITE applied to target memory in aligned \
         segments of this size, each at its own virtual time (64 B, the PCIe read completion \
         boundary). Must be a power of two >= 8 so aligned 8-byte words stay whole.";
    jitter_ns: 100.0, "ns", [0.0, 1e9],
        "Each one-way flight is one_way_ns +/- jitter_ns, uniform and seeded (switch queueing, \
         PCIe and NIC pipeline variation; tens to hundreds of ns on real fabrics). Symmetric, so \
         mean and median round trips equal the analytic figures. Without any noise, two \
         periodic clients phase-lock through a shared link and never interleave finely, which \
         real hardware does. Per-QP order is preserved whatever the jitter.";
    persist_window: 64.0, "writes", [0.0, 1e9],
        "Persistent regions: un-persisted WRITEs kept per queue pair before the oldest is \
         counted as drained to the persistence domain (models cache eviction). A READ on the \
         same queue pair persists all earlier WRITEs (read-after-write flush, Erda seeds/004).";
    nvm_write_ns: 90.0, "ns", [0.0, 1e9],
        "Persistent regions: server CPU time per cache line a handler's LocalRegion::persist \
         writes back and fences (clwb + sfence). 90 ns: Optane DC PMM write latency to the \
         persistence domain (ADR write-pending queue) measured with clwb/ntstore + sfence, \
         ~90-94 ns (Izraelevitz et al., 'Basic Performance Measurements of the Intel Optane \
         DC Persistent Memory Module', arXiv:1903.05714, 2019; Yang et al., FAST'20). \
         Charged per line in the range, dirty or not; 0 on DRAM nodes (persist is a no-op).";
    unsignaled_at_post: 0.0, "0/1", [0.0, 1.0],
        "1: QueuePair::post_unsignaled resolves once its doorbell is rung, as ibv_post_send of \
         a work request without IBV_SEND_SIGNALED does (no completion is raised; remora's \
         verbs fabric returns at post): the ops still take effect in order and a failure \
         breaks the queue pair for its later posts. 0 (default, the sim's behaviour before \
         this parameter, kept so that profiles measured with it keep their figures): it waits \
         for completion, as post does.";
    background_threads: 0.0, "threads", [0.0, 1.0],
        "1: each memory node has a background thread on a core of its own, on which its \
         handler's background work (Handler::on_background: log cleaning, asynchronous apply) \
         runs concurrently with the request threads, its CPU time counted in the node's \
         (background.rs). 0 (default, the sim's behaviour before this parameter): none, and \
         handlers do that work inline after their messages.";
    server_wake_ns: 0.0, "ns", [0.0, 1e9],
        "Blocking (interrupt-driven) handler threads: a thread that found no message waiting \
         sleeps in the kernel, as a server blocked in ibv_get_cq_event on a completion \
         channel does (the Erda authors' Redo Logging/server.c, Read After Write/server.c and \
         Erda/server/server.c poll_cq threads), and its core idles; the next message's \
         service starts only this long after it arrived (the core leaving its idle state), \
         no CPU counted for the wait. A message already queued when the thread finishes the \
         previous one waits for nothing, so a loaded server does not pay it. The interrupt, \
         the completion event's delivery and the switch back into the thread are not \
         modelled. 0 (default, the sim's behaviour before this parameter): threads busy-poll";
    server_tree_lock: 0.0, "0/1/2", [0.0, 2.0],
        "One lock over each memory node's served structure, held by a handler that states it \
         (LocalRegion::hold_lock) from its handler call to the end of its service (the \
         memory it touched and the CPU it stated), its threads waiting for it in virtual \
         time, spinning (busy CPU). 1: writers exclusive, readers free (remora's Catfish \
         server: inserts under a spin lock, searches lock-free); 2: a reader-writer lock, \
         readers wait for a writer and a writer for every reader (Catfish's paper, seeds/003 \
         §3.2: 'the concurrent lock (ref. 28) to avoid the read-write conflict and write-write \
         conflict'). 0 (default, the sim's behaviour before this parameter): no lock, the \
         threads' services overlap";
    server_wake_cpu_ns: 0.0, "ns", [0.0, 1e9],
        "Blocking handler threads: the CPU one wake costs the woken thread, counted in the \
         node's CPU (the interrupt's end, the switch back into the thread, the return from \
         the blocking read() and ibv_get_cq_event, ibv_ack_cq_events, ibv_req_notify_cq, the \
         polls that drain the queue, and blocking again). A thread that finds no message \
         waiting sleeps (as with server_wake_ns) and pays it when it wakes: once before the \
         service of a message that finds it asleep, and once more for each reply whose send \
         completion finds it asleep, since the Erda authors' servers post every reply \
         signalled and take send and receive completions from one channel (IBV_SEND_SIGNALED \
         in send_msg / write_with_imm, one CQ for both, poll_cq blocking in ibv_get_cq_event \
         in Erda/server/server.c, Redo Logging/server.c and Read After Write/server.c): an \
         idle server wakes twice per request, a loaded one reaps both in its poll loop and \
         wakes for neither. The wake's exit latency (server_wake_ns) precedes it. 0 \
         (default, the sim's behaviour before this parameter): a wake costs no CPU and a \
         reply's completion wakes nothing";
    server_canrt_apply_ns: -1.0, "ns", [-1.0, 1e9],
        "The fixed part of CANRT's applier service for one append notice (a WRITE_WITH_IMM \
         on a memory node whose handler's service is 'canrt'), in place of \
         server_handler_ns: the applier decodes the immediate and the item and flips bits, \
         its memory priced on top as any handler's. Measured on the real code by \
         poller/tests/canrt_applier.rs (the_appliers_own_code_on_this_host: the host time of \
         CanrtServer's append path less its region calls). Negative (default, the sim's \
         behaviour before this parameter): server_handler_ns, as every other message";
    server_store_window: 0.0, "0/1", [0.0, 1.0],
        "1: a handler's CPU stores reach the NIC's view over its service, as its thread writes \
         them (server.rs, memory.rs): each lands at the point of the service where its own \
         access and every access and stated CPU before it have been charged (after any wait \
         for server_tree_lock), a stored line costing at least server_llc_hit_ns even when \
         the handler touched it before; a one-sided READ segment executing earlier copies the \
         bytes the store replaced, so a reader overlapping a rewrite sees it half done \
         (Catfish, seeds/003 §3.2: 'the retrieved R-tree node via RDMA Read is possibly \
         being written by a server thread', detected by a version-number check). The node's \
         CPU and later handlers see every store at once. 0 (default, the sim's behaviour \
         before this parameter): a handler's stores all land at its call";
}

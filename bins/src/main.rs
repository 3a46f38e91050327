//! `remora`: the command-line front of remora.
//!
//! - `remora memnode`: a standalone memory node (soft fabric: shared memory + a Unix control
//!   socket; verbs: rdma_cm listener).
//! - `remora perf`: perftest-style microbenchmark of the fabric verbs, on any fabric.
use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

mod args;
mod bench;
mod lincheck;
mod logger;
mod memnode;
mod perf;
mod perf_sim;
mod report;
mod repro;
mod verbs_cmds;

use args::{FabricKind, PerfArgs};

#[derive(Parser)]
#[command(
    name = "remora",
    version,
    about = "One-sided RDMA index structures: tools"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a standalone memory node.
    Memnode(MemnodeArgs),
    /// Measure fabric verbs: latency and throughput over sizes, threads and coroutines.
    Perf(PerfArgs),
    /// YCSB benchmark of an index (LOAD, A-E) on any fabric.
    Bench(Box<bench::BenchArgs>),
    /// Run the fabric conformance suite against a fabric (and a memnode with `--connect`), or
    /// with `--linearizability` check an index's histories for linearizability.
    Check(Box<lincheck::CheckArgs>),
    /// Reproduce the papers' headline experiments on the sim: JSON, CSV, charts and a
    /// markdown report of each claim next to remora's figure.
    Repro(repro::ReproArgs),
    /// Merge the JSON records of a cluster run's processes (`bench --cluster-size`): summed
    /// throughput and one latency histogram.
    Merge(bench::cluster::MergeArgs),
}

/// The fabrics a standalone memory node can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemnodeFabric {
    /// Shared memory, through a Unix control socket.
    Soft,
    /// Real RDMA verbs (build with `--features verbs`), through rdma_cm.
    Verbs,
}

/// What a memory node runs on its CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Service {
    Echo,
    Canrt,
    Erda,
    Catfish,
    /// WORT, the CANRT paper's server-reply baseline (a persistent radix tree of 4-bit digits).
    Wort,
    /// WOART, WORT with adaptive nodes.
    Woart,
    /// Erda's Redo Logging baseline (`remora bench --index erda-redo`).
    ErdaRedo,
    /// Erda's Read-After-Write baseline (`remora bench --index erda-raw`).
    ErdaRaw,
}

impl Service {
    /// The largest message its protocol needs, if more than a memory node's default.
    pub fn max_message(self) -> Option<usize> {
        match self {
            Service::ErdaRedo | Service::ErdaRaw => Some(remora::core::erda::baseline::MAX_MESSAGE),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct MemnodeArgs {
    /// The fabric to serve on (the sim simulates its memory nodes inside perf, bench, check).
    #[arg(long, value_enum, default_value = "soft")]
    pub fabric: MemnodeFabric,
    /// Control endpoint: a Unix socket path (soft) or host:port (verbs).
    #[arg(long, default_value = "/tmp/remora-memnode.sock")]
    pub listen: String,
    /// This memory node's id in GlobalAddr.
    #[arg(long, default_value_t = 0)]
    pub node_id: u16,
    /// Host region size in MiB (default 256; a --file or --pmem that holds a region keeps
    /// its own size).
    #[arg(long)]
    pub region_mib: Option<u64>,
    /// Device-memory size in KiB (Sherman's lock table needs 256).
    #[arg(long, default_value_t = 256)]
    pub dm_kib: u64,
    /// Allocator chunk size in KiB.
    #[arg(long, default_value_t = 1024)]
    pub chunk_kib: u64,
    /// Pin the serving thread to this core.
    #[arg(long)]
    pub core: Option<usize>,
    /// RDMA device name (verbs).
    #[arg(long)]
    pub device: Option<String>,
    /// Server-side logic on this node: the echo service, or an index's server (CANRT's applier,
    /// Erda's metadata server) for `remora bench --connect ... --index canrt|erda`.
    #[arg(long, value_enum, default_value = "echo")]
    pub service: Service,
    /// Exit after this many seconds (default: serve until killed).
    #[arg(long, value_parser = args::positive_seconds)]
    pub seconds: Option<f64>,
    /// Keep the region in this ordinary file (mapped shared): it survives the memnode's
    /// process, so a memnode restarted on it recovers the service's state. Created with
    /// --region-mib if new; an existing file keeps its own size.
    #[arg(long, value_name = "PATH", conflicts_with = "pmem")]
    pub file: Option<std::path::PathBuf>,
    /// Keep the region in persistent memory: a file on a DAX filesystem, mapped with
    /// MAP_SYNC; persists are cache-line write-backs + sfence. Refused on a non-DAX file.
    #[arg(long, value_name = "PATH")]
    pub pmem: Option<std::path::PathBuf>,
    /// Emulate NVM write latency: nanoseconds per cache line the service persists.
    #[arg(long, default_value_t = 0)]
    pub nvm_write_ns: u32,
    /// Mode of the control socket (octal): who may connect. Default: the owner only.
    #[arg(long, default_value = "600", value_parser = parse_mode)]
    pub socket_mode: u32,
    /// Data connections at most; more are refused with a clear error.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Admit only clients that prove the secret in this key file (made, mode 0600, if it does
    /// not exist). Clients read it from REMORA_KEY_FILE, else (soft) from `<socket>.key`.
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<std::path::PathBuf>,
    /// Server threads: connection k is served by thread k mod N, each with its own handler
    /// where the service can share its state (Catfish); `--core` pins the first (soft). With
    /// `--fabric verbs` each thread has its own shared receive queue and never waits on its
    /// replies; the main thread handles connection events.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Server threads poll their connections without pause instead of giving the CPU away
    /// when idle (the Catfish paper's polling server).
    #[arg(long)]
    pub polling: bool,
    /// Serve Catfish's TCP/IP baseline on this address (HOST:PORT) instead of a soft memory
    /// node (`--service catfish`; `remora bench --index catfish --mode tcp --tcp-connect`).
    #[arg(long, value_name = "HOST:PORT")]
    pub tcp_listen: Option<String>,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("`{s}` is not an octal file mode like 600 or 660"))
}

/// Refuses flags that the chosen fabric would silently ignore, and an unwritable --json,
/// before anything runs.
fn perf_flags_apply(a: &PerfArgs) -> Result<(), String> {
    if let Some(p) = &a.json {
        report::check_writable(p)?;
    }
    args::check_fabric_flags(&args::FabricFlags {
        fabric: a.fabric,
        sim: &a.sim,
        connect: a.connect.is_some(),
        threads: a.threads,
        no_pin: a.no_pin,
        server_core: a.server_core.is_some(),
        region: a.region_mib != 64,
    })
}

fn main() -> ExitCode {
    logger::init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Memnode(a) => match a.fabric {
            MemnodeFabric::Soft => memnode::run(&a),
            MemnodeFabric::Verbs if a.polling || a.tcp_listen.is_some() => {
                Err("--polling and --tcp-listen are for --fabric soft".into())
            }
            MemnodeFabric::Verbs if a.threads == 0 => Err("--threads must be at least 1".into()),
            MemnodeFabric::Verbs => verbs_cmds::memnode(&a),
        },
        Cmd::Bench(a) => bench::run(&a),
        Cmd::Repro(a) => repro::run(&a),
        Cmd::Merge(a) => bench::cluster::run_merge(&a),
        Cmd::Check(c) => c.refuse_unused().and_then(|()| {
            if c.lin.linearizability {
                return lincheck::run(&c.lin, c.perf.fabric, c.perf.threads, c.perf.coroutines);
            }
            let a = &c.perf;
            match a.fabric {
                FabricKind::Soft => perf::check(a, c.allow_revoke),
                FabricKind::Sim => perf_sim::check(a),
                FabricKind::Verbs => verbs_cmds::check(a),
            }
        }),
        Cmd::Perf(a) if a.sim.show_model => perf_sim::show_model(&a.sim),
        Cmd::Perf(a) if a.cpu_calibration => perf_sim::model_from(&a.sim)
            .and_then(|m| bench::cpu_calibration::run(&m, a.out.as_deref())),
        Cmd::Perf(a) => {
            let rows = perf_flags_apply(&a).and_then(|()| match a.fabric {
                FabricKind::Soft => perf::run(&a),
                FabricKind::Sim => perf_sim::run(&a),
                FabricKind::Verbs => verbs_cmds::perf(&a),
            });
            rows.and_then(|rows| {
                report::print_perf_table(&rows, a.json.as_deref());
                match &a.json {
                    Some(p) => {
                        report::write_json(p, &rows).map_err(|e| format!("writing {p}: {e}"))
                    }
                    None => Ok(()),
                }
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("remora: {e}");
            ExitCode::FAILURE
        }
    }
}

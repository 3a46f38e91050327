//! Command-line arguments shared by `remora perf` and `remora bench`.
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Which fabric to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FabricKind {
    /// Shared memory on this machine (in-process memory node, or `--connect` a memnode).
    Soft,
    /// Deterministic simulated cluster in virtual time.
    Sim,
    /// Real RDMA verbs (build with `--features verbs`).
    Verbs,
}

/// The shape and model of a simulated cluster (`--fabric sim`).
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Compute nodes in the simulated cluster.
    #[arg(long, default_value_t = 1)]
    pub compute_nodes: usize,
    /// Client threads per compute node.
    #[arg(long, default_value_t = 1)]
    pub clients_per_node: usize,
    /// Memory nodes in the simulated cluster.
    #[arg(long, default_value_t = 1)]
    pub memory_nodes: usize,
    /// Seed fixing every random choice of the simulation.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A paper's hardware as a named set of model values (`smart`, `sherman`, `canrt`,
    /// `erda`, `catfish`, or `default`), applied before `--model` and `--set`; each value's
    /// source is printed by `--show-model`.
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub profile: String,
    /// Print the profile's table (parameter, value, default, source) and the whole model it
    /// gives, then exit without running.
    #[arg(long)]
    pub show_model: bool,
    /// NIC/network model file (key = value lines); defaults are documented in the model.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Override one model parameter: `--set name=value` (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub overrides: Vec<String>,
    /// Print the per-verb event trace of this operation number.
    #[arg(long)]
    pub trace: Option<u64>,
    /// The memory nodes' host regions are persistent memory: a handler's persist costs
    /// `nvm_write_ns` per cache line, and bench reports the NVM bytes written per operation.
    #[arg(long)]
    pub persistent: bool,
}

/// A verb `remora perf` can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PerfVerb {
    Read,
    Write,
    WriteImm,
    Cas,
    Faa,
    Send,
}

impl PerfVerb {
    pub fn name(self) -> &'static str {
        match self {
            PerfVerb::Read => "READ",
            PerfVerb::Write => "WRITE",
            PerfVerb::WriteImm => "WRITE_WITH_IMM",
            PerfVerb::Cas => "CMP_AND_SWP",
            PerfVerb::Faa => "FETCH_AND_ADD",
            PerfVerb::Send => "SEND",
        }
    }
    /// Atomics have a fixed 8-byte size.
    pub fn is_atomic(self) -> bool {
        matches!(self, PerfVerb::Cas | PerfVerb::Faa)
    }
}

#[derive(Debug, Clone, Args)]
pub struct PerfArgs {
    #[arg(long, value_enum, default_value = "soft")]
    pub fabric: FabricKind,
    /// Verbs to measure, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "read")]
    pub verbs: Vec<PerfVerb>,
    /// Message sizes in bytes, comma-separated (atomics are always 8).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub sizes: Vec<usize>,
    /// Worker threads, each pinned to its own core (soft, verbs).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Coroutines per worker thread (per client on sim).
    #[arg(long, default_value_t = 8)]
    pub coroutines: usize,
    /// Seconds to measure each (verb, size) point (virtual seconds on sim).
    #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
    pub seconds: f64,
    /// Atomics all target one word (contention) instead of one word per coroutine.
    #[arg(long)]
    pub hot: bool,
    /// Memory node to use: a memnode control socket path (soft) or host:port (verbs).
    /// Without it, soft runs an in-process memory node.
    #[arg(long)]
    pub connect: Option<String>,
    /// Size of the in-process memory node's region, in MiB.
    #[arg(long, default_value_t = 64)]
    pub region_mib: u64,
    /// Do not pin worker threads to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Core for the in-process memory node's server thread (default: the first core the
    /// workers leave free; a warning if none is).
    #[arg(long)]
    pub server_core: Option<usize>,
    /// Write JSON records (one line per measurement) here; `-` for stdout.
    #[arg(long)]
    pub json: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub sim: SimArgs,
    /// RDMA device name (verbs), e.g. rxe0 or mlx5_0; default: the first one.
    #[arg(long)]
    pub device: Option<String>,
    /// GID index (verbs, RoCE).
    #[arg(long, default_value_t = 0)]
    pub gid_index: u32,
    /// With `--fabric verbs`: no NIC, the fake verbs device in this process. Prints the
    /// client CPU per lookup of SMART, Sherman and Erda, and per upsert of Erda (its
    /// request-and-reply path), beside a floor loop that only posts and polls the same READs,
    /// with the data path's counters and coroutine polls per operation (`co/op`)
    /// (`--seconds` per index, `--coroutines` on one thread).
    #[arg(long)]
    pub fake: bool,
    /// No fabric: time each kind of client CPU work the sim charges (CRC, decode, scan,
    /// probe, compare, sort, rect, key generation) on this host with the indexes' code
    /// paths, and print it beside the sim model's figure (model ns, measured ns, ratio,
    /// within 10%?, the parameter). `--profile`/`--model`/`--set` choose the model.
    #[arg(long)]
    pub cpu_calibration: bool,
    /// With `--cpu-calibration`: also write the table as markdown to this file (e.g.
    /// docs/cpu-calibration.md), with the host, the date and each parameter's source.
    #[arg(long, requires = "cpu_calibration", value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// A duration in seconds: finite and positive (NaN, infinity, zero and negatives are refused
/// when the arguments are parsed, before anything runs).
pub fn positive_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 || v > 1e9 {
        return Err(format!(
            "`{s}` seconds: give a finite number greater than 0 (at most 1e9)"
        ));
    }
    Ok(v)
}

/// A fraction or size that must be finite and positive.
pub fn positive_f64(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("`{s}`: give a finite number greater than 0"));
    }
    Ok(v)
}

/// The flags a run gave that only some fabrics use.
pub struct FabricFlags<'a> {
    pub fabric: FabricKind,
    pub sim: &'a SimArgs,
    pub connect: bool,
    pub threads: usize,
    pub no_pin: bool,
    pub server_core: bool,
    /// `--region-mib` given (it sizes an in-process memory node only).
    pub region: bool,
}

/// Refuses flags the chosen fabric would silently ignore, naming them.
pub fn check_fabric_flags(f: &FabricFlags<'_>) -> Result<(), String> {
    let sim_shape = f.sim.compute_nodes != 1
        || f.sim.clients_per_node != 1
        || f.sim.memory_nodes != 1
        || f.sim.model.is_some()
        || f.sim.profile != "default"
        || f.sim.show_model
        || !f.sim.overrides.is_empty()
        || f.sim.trace.is_some()
        || f.sim.persistent;
    match f.fabric {
        FabricKind::Sim => {
            if f.connect {
                return Err("--connect names a real memory node; the sim simulates its own".into());
            }
            if f.threads != 1 || f.no_pin || f.server_core {
                return Err(
                    "--threads, --no-pin and --server-core are for real threads; the \
                            sim's clients are --compute-nodes x --clients-per-node"
                        .into(),
                );
            }
        }
        FabricKind::Soft | FabricKind::Verbs => {
            if sim_shape {
                return Err(
                    "--compute-nodes, --clients-per-node, --memory-nodes, --profile, \
                            --model, --set, --show-model, --trace and --persistent shape the sim: use them with \
                            --fabric sim"
                        .into(),
                );
            }
            if f.connect && f.region {
                return Err(
                    "--region-mib sizes the in-process memory node; a --connect \
                            memnode has its own region (remora memnode --region-mib)"
                        .into(),
                );
            }
        }
    }
    Ok(())
}

//! The verb microbenchmark on the simulator, shared by `remora perf --fabric sim` and the
//! calibration tests: every client coroutine issues one verb after another for a stretch of
//! virtual time; completions inside the measurement window count, and the latency of every
//! op that starts inside it is reported.
use super::cluster::{ClientCtx, Sim, SimConfig, SimError};
use super::engine::EngineStats;
use super::model::{Load, ModelVerb, Ps};
use remora_core::Snapshot;
use remora_core::fabric::{Op, QueuePair};
use remora_layouts::{GlobalAddr, NodeId};
use std::cell::{Cell, RefCell};
use std::time::Instant;

/// One measurement: a verb at a size on a cluster shape.
#[derive(Debug, Clone)]
pub struct PerfPoint {
    /// The verb every coroutine issues.
    pub verb: ModelVerb,
    /// Bytes per verb (payload); atomics always move 8 bytes, whatever this says.
    pub size: usize,
    /// Client threads on each compute node (at least 1).
    pub clients_per_node: usize,
    /// Coroutines per client thread, each with one verb in flight (at least 1).
    pub coroutines: usize,
    /// All atomics target one word (contention).
    pub hot: bool,
    /// Virtual time run before the window opens, in nanoseconds (not counted).
    pub warmup_ns: u64,
    /// Length of the measurement window, in virtual nanoseconds.
    pub measure_ns: u64,
}

/// What a measurement found.
#[derive(Debug, Clone)]
pub struct PerfResult {
    /// Ops completed inside the window.
    pub ops: u64,
    /// Window length in virtual seconds.
    pub seconds: f64,
    /// Counters of all client queue pairs over the window.
    pub counters: Snapshot,
    /// Mean latency (ns) of the ops that started inside the window.
    pub mean_latency_ns: f64,
    /// Ops that failed (a healthy run has none).
    pub errors: u64,
    /// CPU time the memory nodes' handler threads were busy inside the window (all nodes).
    pub server_busy_ns: u64,
    /// Handler threads per memory node.
    pub server_threads: usize,
    /// Memory nodes of the cluster.
    pub memory_nodes: usize,
    /// The engine's counters over the whole run, warm-up included.
    pub stats: EngineStats,
    /// Wall-clock seconds the simulation took (build, warm-up and window).
    pub wall_seconds: f64,
    /// The model's idle round trip for this point, in ns (for SEND and WRITE_WITH_IMM, the
    /// echo: request and reply).
    pub expected_latency_ns: f64,
    /// The model's throughput bound for this point's load, in million ops per second.
    pub expected_mops: f64,
    /// The model's server CPU time per op (`Model::server_cpu_per_op_ps`), in ns.
    pub expected_server_ns_per_op: f64,
    /// The trace lines of the run (empty unless the config selected a trace).
    pub trace: Vec<String>,
    /// The seed of the run (replays it exactly).
    pub seed: u64,
}

impl PerfResult {
    /// Throughput inside the window, in million ops per second.
    pub fn mops(&self) -> f64 {
        self.ops as f64 / self.seconds / 1e6
    }
    /// Server CPU time per completed op in ns: the papers' "server CPU cost".
    pub fn server_ns_per_op(&self) -> f64 {
        self.server_busy_ns as f64 / self.ops.max(1) as f64
    }
    /// Share of the memory nodes' handler-thread time that was busy inside the window.
    pub fn server_utilization(&self) -> f64 {
        let capacity = self.seconds * 1e9 * (self.server_threads * self.memory_nodes) as f64;
        if capacity > 0.0 {
            self.server_busy_ns as f64 / capacity
        } else {
            0.0
        }
    }
    /// Simulated verbs per wall-clock second (the simulator's own speed).
    pub fn sim_verbs_per_wall_second(&self) -> f64 {
        self.stats.verbs as f64 / self.wall_seconds.max(1e-9)
    }
}

struct Window {
    start: Ps,
    end: Ps,
    ops: Cell<u64>,
    errors: Cell<u64>,
    lat_sum: Cell<u128>,
    lat_n: Cell<u64>,
}

/// Runs one point on a cluster built from `cfg`; `on_latency` gets every latency in ns.
pub fn run_point(
    cfg: SimConfig,
    p: &PerfPoint,
    on_latency: &mut dyn FnMut(u64),
) -> Result<PerfResult, SimError> {
    let m = cfg.model.clone();
    let size = if matches!(p.verb, ModelVerb::Cas | ModelVerb::Faa) {
        8
    } else {
        p.size
    };
    if p.clients_per_node == 0 || p.coroutines == 0 {
        return Err(SimError(
            "clients_per_node and coroutines must be at least 1".into(),
        ));
    }
    let base = cfg.chunk_size.max(4096);
    let stride = (size as u64).max(64).next_multiple_of(64);
    if base + stride > cfg.region_len {
        return Err(SimError(format!(
            "a {size}-byte transfer does not fit the {}-byte region past its first chunk",
            cfg.region_len
        )));
    }
    if p.verb == ModelVerb::Send && size > m.max_message as usize {
        return Err(SimError(format!(
            "SEND of {size} bytes exceeds the receive buffers ({} bytes, model max_message)",
            m.max_message
        )));
    }
    let slots = ((cfg.region_len - base) / stride).max(1);
    let memory_nodes = cfg.memory_nodes;
    let compute_nodes = cfg.compute_nodes;
    let seed = cfg.seed;
    let warm_ps = p.warmup_ns * 1000;
    let win = Window {
        start: warm_ps,
        end: warm_ps + p.measure_ns * 1000,
        ops: Cell::new(0),
        errors: Cell::new(0),
        lat_sum: Cell::new(0),
        lat_n: Cell::new(0),
    };
    let lat = RefCell::new(on_latency);
    let (win, lat) = (&win, &lat);
    let wall = Instant::now();
    let mut sim = Sim::new(cfg)?;
    let mut ctxs: Vec<ClientCtx> = Vec::new();
    let mut g = 0u64;
    for cn in 0..compute_nodes {
        for _ in 0..p.clients_per_node {
            let ctx = sim.client(cn)?;
            for co in 0..p.coroutines {
                let node = (g % memory_nodes as u64) as NodeId;
                let off = if p.hot {
                    base
                } else {
                    base + (g % slots) * stride
                };
                let addr = GlobalAddr::new(if p.hot { 0 } else { node }, off);
                let verb = p.verb;
                sim.spawn_with(&ctx, co as u64, move |ctx| async move {
                    drive(ctx, verb, addr, size, win, lat).await;
                });
                g += 1;
            }
            ctxs.push(ctx);
        }
    }
    sim.run_for(p.warmup_ns);
    let before = ctxs
        .iter()
        .fold(Snapshot::default(), |a, c| a + c.ep().snapshot());
    let busy_before = sim.server_busy_total_ns();
    sim.run_for(p.measure_ns);
    let after = ctxs
        .iter()
        .fold(Snapshot::default(), |a, c| a + c.ep().snapshot());
    let server_busy_ns = sim.server_busy_total_ns() - busy_before;
    let stats = sim.stats();
    let trace = sim.trace_lines();
    drop(ctxs);
    drop(sim);
    let clients = (compute_nodes * p.clients_per_node) as u64;
    let outstanding = clients * p.coroutines as u64;
    let load = Load {
        outstanding,
        clients,
        compute_nodes: compute_nodes as u64,
        memory_nodes: memory_nodes as u64,
        hot: p.hot,
    };
    let expected_latency_ps = match p.verb {
        ModelVerb::Send | ModelVerb::WriteImm => m.echo_latency_ps(p.verb, size as u64),
        v => m.idle_latency_ps(v, size as u64, false),
    };
    let bound = m.bound_mops(p.verb, size as u64, &load);
    let n = win.lat_n.get();
    Ok(PerfResult {
        ops: win.ops.get(),
        seconds: p.measure_ns as f64 / 1e9,
        counters: after - before,
        mean_latency_ns: if n == 0 {
            0.0
        } else {
            win.lat_sum.get() as f64 / n as f64 / 1000.0
        },
        errors: win.errors.get(),
        server_busy_ns,
        server_threads: m.server_threads as usize,
        memory_nodes,
        stats,
        wall_seconds: wall.elapsed().as_secs_f64(),
        expected_latency_ns: expected_latency_ps as f64 / 1000.0,
        expected_mops: bound,
        expected_server_ns_per_op: m.server_cpu_per_op_ps(p.verb) as f64 / 1000.0,
        trace,
        seed,
    })
}

async fn drive(
    ctx: ClientCtx,
    verb: ModelVerb,
    addr: GlobalAddr,
    size: usize,
    win: &Window,
    lat: &RefCell<&mut dyn FnMut(u64)>,
) {
    let Ok(qp) = ctx.qp(addr.node()) else {
        win.errors.set(win.errors.get() + 1);
        return;
    };
    let mut buf = vec![0u8; size];
    let mut msg = vec![0u8; qp.max_message()];
    let mut guess = 0u64;
    let mut imm = 0u32;
    loop {
        let t0 = ctx.now_ps();
        let r = match verb {
            ModelVerb::Read => qp.read(addr, &mut buf).await,
            ModelVerb::Write => qp.write(addr, &buf).await,
            ModelVerb::Cas => match qp.cas(addr, guess, guess.wrapping_add(1)).await {
                Ok(old) => {
                    guess = if old == guess {
                        old.wrapping_add(1)
                    } else {
                        old
                    };
                    Ok(())
                }
                Err(e) => Err(e),
            },
            ModelVerb::Faa => qp.faa(addr, 1).await.map(|_| ()),
            ModelVerb::Send => match qp.send(&buf).await {
                Ok(()) => qp.recv(&mut msg).await.map(|_| ()),
                Err(e) => Err(e),
            },
            ModelVerb::WriteImm => {
                imm = imm.wrapping_add(1);
                let r = qp
                    .post(&mut [Op::WriteImm {
                        remote: addr,
                        local: &buf,
                        imm,
                    }])
                    .await;
                match r {
                    Ok(()) => qp.recv(&mut msg).await.map(|_| ()),
                    Err(e) => Err(e),
                }
            }
        };
        if r.is_err() {
            win.errors.set(win.errors.get() + 1);
            return;
        }
        let t1 = ctx.now_ps();
        if t1 > win.start && t1 <= win.end {
            win.ops.set(win.ops.get() + 1);
            if t0 >= win.start {
                let l = t1 - t0;
                win.lat_sum.set(win.lat_sum.get() + l as u128);
                win.lat_n.set(win.lat_n.get() + 1);
                if let Ok(mut f) = lat.try_borrow_mut() {
                    (*f)(l / 1000);
                }
            }
        }
    }
}

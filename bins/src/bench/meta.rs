//! What a bench record says about the run itself, as JSON fields rather than free-text
//! notes: the cluster shape, the seed, the sim's model, the factor-analysis step, the
//! warm-up, and the latency CDF read off the phase's histogram.
use super::BenchArgs;
use super::phase::BenchRecord;
use crate::args::FabricKind;
use hdrhistogram::Histogram;
use remora::poller::sim::Model;
use serde::Serialize;
use std::collections::BTreeMap;

/// The quantiles at which the latency CDF is sampled: dense in the tail, where the papers'
/// CDFs differ.
pub const CDF_QUANTILES: &[f64] = &[
    0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.97, 0.99, 0.995, 0.999,
    0.9995, 0.9999, 1.0,
];

/// The cluster a record was measured on.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cluster {
    /// Compute nodes (sim), or 1 machine (soft, verbs).
    pub compute_nodes: usize,
    /// Client threads on each compute node (sim), or worker threads (soft, verbs).
    pub clients_per_node: usize,
    /// Client threads in all.
    pub clients: usize,
    /// Coroutines per client thread.
    pub coroutines: usize,
    pub memory_nodes: usize,
}

/// Run facts of a record (flattened into its JSON).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunInfo {
    /// The factor-analysis step this record measured (`--factors` only); `index` stays the
    /// index's own name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub cluster: Cluster,
    /// The seed of every random choice (workload keys; the sim's whole run).
    pub seed: u64,
    /// The sim's hardware profile (`--profile`; sim only, null elsewhere): `model` is its
    /// values with `--model` and `--set` applied on top.
    pub profile: Option<String>,
    /// The sim's NIC/network model, every parameter (sim only; null elsewhere).
    pub model: Option<BTreeMap<String, f64>>,
    /// Operations of the same workload run, unmeasured, before the measured phase.
    pub warmup_ops: u64,
    /// Virtual seconds the run phase ran before its measured window opened, clients not
    /// paused (`--warmup-seconds`; 0 without).
    pub warmup_s: f64,
    /// Latency CDF: `[latency ns, fraction of operations at or below it]`, at
    /// [`CDF_QUANTILES`].
    pub latency_cdf: Vec<[f64; 2]>,
}

impl RunInfo {
    /// A record's run facts with the CDF of `hist` (the rest is filled by [`annotate`]).
    pub fn with_cdf(hist: &Histogram<u64>) -> RunInfo {
        RunInfo {
            latency_cdf: cdf(hist),
            ..RunInfo::default()
        }
    }
}

/// The CDF of `hist` at [`CDF_QUANTILES`] (empty for an empty histogram).
pub fn cdf(hist: &Histogram<u64>) -> Vec<[f64; 2]> {
    if hist.is_empty() {
        return Vec::new();
    }
    CDF_QUANTILES
        .iter()
        .map(|&q| {
            let v = if q == 0.0 {
                hist.min()
            } else {
                hist.value_at_quantile(q)
            };
            [v as f64, q]
        })
        .collect()
}

/// The sim model's every parameter by name.
pub fn model_map(m: &Model) -> BTreeMap<String, f64> {
    Model::PARAMS
        .iter()
        .filter_map(|p| m.get(p.name).map(|v| (p.name.to_string(), v)))
        .collect()
}

/// Fills the cluster shape, seed, model and warm-up of `recs` from the flags of their run.
pub fn annotate(a: &BenchArgs, recs: &mut [BenchRecord]) -> Result<(), String> {
    let s = &a.sim;
    let catfish = a.index == super::IndexKind::Catfish;
    let coroutines = if catfish { 1 } else { a.coroutines };
    let (cluster, model) = match a.fabric {
        FabricKind::Sim => (
            Cluster {
                compute_nodes: s.compute_nodes,
                clients_per_node: s.clients_per_node,
                clients: s.compute_nodes * s.clients_per_node,
                coroutines,
                memory_nodes: s.memory_nodes,
            },
            Some(model_map(&crate::perf_sim::model_from(s)?)),
        ),
        _ => (
            Cluster {
                compute_nodes: 1,
                clients_per_node: a.threads,
                clients: a.threads,
                coroutines,
                memory_nodes: a
                    .connect
                    .as_deref()
                    .map_or(1, |c| c.split(',').count().max(1)),
            },
            None,
        ),
    };
    for r in recs {
        r.run.cluster = cluster;
        r.run.seed = s.seed;
        r.run.model.clone_from(&model);
        r.run.profile = model.as_ref().map(|_| s.profile.clone());
        r.run.warmup_ops = if r.phase == "run" { a.warmup } else { 0 };
        r.run.warmup_s = if r.phase == "run" {
            a.warmup_seconds.unwrap_or(0.0)
        } else {
            0.0
        };
    }
    Ok(())
}

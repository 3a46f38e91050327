//! `remora bench --fabric verbs`: worker threads pinned to cores, each one compute-node client
//! with its own `VerbsEndpoint` (one RC queue pair per memory node given by `--connect
//! host:port[,host:port...]`), running `--coroutines` coroutines. The memory nodes are
//! `remora memnode --fabric verbs` processes: the one-sided indexes (SMART, Sherman, FG+) need
//! only their echo service; CANRT and Erda need the first node to run their server
//! (`--service canrt|erda`), which is checked before the run.
use super::BenchArgs;
use super::index::IndexCfg;
use super::phase::BenchRecord;
use super::ycsb::Workload;

/// Flags that make no sense over verbs (checked before any connection).
fn refuse_flags(a: &BenchArgs) -> Result<(), String> {
    if a.server_core.is_some() {
        return Err(
            "--server-core applies to the in-process soft memory node; pin a verbs \
                    memory node with `remora memnode --fabric verbs --core N`"
                .into(),
        );
    }
    Ok(())
}

#[cfg(not(feature = "verbs"))]
pub fn run(
    a: &BenchArgs,
    _index: &IndexCfg,
    _workload: Workload,
) -> Result<Vec<BenchRecord>, String> {
    refuse_flags(a)?;
    Err(crate::verbs_cmds::NO_VERBS.into())
}

#[cfg(feature = "verbs")]
pub use real::run;

#[cfg(feature = "verbs")]
mod real {
    use super::super::soft::run_threads;
    use super::*;
    use remora::poller::executor::{ServerCore, plan_cores};
    use remora::verbs::check::CONNECT_TIMEOUT;
    use remora::verbs::wire::DmKind;
    use remora::verbs::{ConnectOptions, NodeInfo, VerbsEndpoint, connect_qp, probe, totals};

    /// The memory nodes of `--connect`, comma-separated host:port.
    fn addresses(a: &BenchArgs) -> Result<Vec<String>, String> {
        let list = a.connect.as_deref().ok_or(
            "`remora bench --fabric verbs` needs `--connect host:port` of a running `remora \
             memnode --fabric verbs --listen host:port` (comma-separated for several)",
        )?;
        let addrs: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if addrs.is_empty() {
            return Err("--connect: no host:port given".into());
        }
        Ok(addrs)
    }

    /// CANRT and Erda need their server on the first memory node; a node running anything
    /// else would answer their messages wrongly, so that is refused up front.
    fn check_service(first: &NodeInfo, index: &IndexCfg) -> Result<(), String> {
        match index.service() {
            Some(want) if first.service != want => Err(format!(
                "the memnode at {} runs the `{}` service, but --index {} needs `{want}`: start \
                 it with `remora memnode --fabric verbs --service {want}`",
                first.addr,
                first.service,
                index.index_name()
            )),
            _ => Ok(()),
        }
    }

    /// The notes on one memory node, from a probe connection.
    fn node_notes(info: &NodeInfo, index: &IndexCfg, notes: &mut Vec<String>) {
        let dm = match info.dm_kind {
            DmKind::Device => format!("on-chip device memory, {} KiB", info.dm_len >> 10),
            DmKind::Host => format!(
                "no on-chip memory on {}: {} KiB of the node's host memory stand in for it",
                info.device,
                info.dm_len >> 10
            ),
            DmKind::None => "no device memory".into(),
        };
        notes.push(format!(
            "memory node {} at {} via {}: {} service, {} MiB region; device memory: {dm}",
            info.node,
            info.addr,
            info.device,
            info.service,
            info.region_len >> 20
        ));
        if let IndexCfg::Sherman { cfg, .. } = index
            && cfg.onchip_locks
            && info.dm_kind == DmKind::Host
        {
            notes.push(format!(
                "Sherman's global lock table is in host memory on node {} (NIC atomics on host \
                 memory, not on-chip): lock latency is not the paper's on-chip figure",
                info.node
            ));
        }
    }

    /// Runs LOAD (and the workload) against the verbs memory nodes of `--connect`.
    pub fn run(
        a: &BenchArgs,
        index: &IndexCfg,
        workload: Workload,
    ) -> Result<Vec<BenchRecord>, String> {
        refuse_flags(a)?;
        let addrs = addresses(a)?;
        probe(a.device.as_deref()).map_err(|e| e.to_string())?;
        let opts = ConnectOptions {
            device: a.device.clone(),
            timeout: CONNECT_TIMEOUT,
        };
        let mut notes = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let (qp, info) = connect_qp(addr, &opts).map_err(|e| e.to_string())?;
            drop(qp);
            if i == 0 {
                check_service(&info, index)?;
            }
            node_notes(&info, index, &mut notes);
        }
        let plan = plan_cores(a.threads, !a.no_pin, ServerCore::None)?;
        for w in &plan.warnings {
            eprintln!("remora: warning: {w}");
        }
        notes.push(format!(
            "{} threads x {} coroutines, each thread one VerbsEndpoint (one RC queue pair per \
             memory node)",
            a.threads, a.coroutines
        ));
        let make_ep = || VerbsEndpoint::connect(&addrs, &opts).map_err(|e| e.to_string());
        // The memory node's server runs in its process: no resize clock to read here.
        let resizes = super::super::resizes::ResizeWatch::default();
        let before = totals();
        let mut recs = run_threads(a, index, workload, "verbs", &make_ep, notes, resizes)?;
        // Every worker's endpoint is gone by now, so the totals hold all of its queue pairs.
        let d = totals() - before;
        let ops: u64 = recs.iter().map(|r| r.ops).sum();
        let note = format!(
            "verbs data path (load and run, all threads): {d}; per operation: {:.2} doorbells,              {:.1} bounced bytes",
            d.doorbells as f64 / ops.max(1) as f64,
            d.bounced() as f64 / ops.max(1) as f64
        );
        for r in &mut recs {
            r.notes.push(note.clone());
        }
        Ok(recs)
    }
}

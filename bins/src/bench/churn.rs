//! `remora bench --churn`: deletes and inserts over a fixed live set, sampling the remote
//! bytes in use, so a leak of remote memory is a number anyone can measure.
//!
//! After loading `--records` keys (the live set), each operation deletes one live key
//! (chosen uniformly) and inserts a fresh one, so the live set stays `--records` keys. Every
//! `--operations / --churn-samples` operations the run READs the region header of every
//! memory node through the fabric; its allocator cursor (`next_chunk`) is the bytes handed
//! out so far, the header's included. An index that reuses freed memory keeps it
//! flat; one that leaks climbs until the node is full. At the end every live key is read
//! back and compared with the value it was given. Sim and soft fabrics (not verbs yet).
//! Catfish, the R-tree, churns rectangles the same way ([`rtree`]).
//!
//! With `--seconds S` the churn also stops after S seconds of wall-clock time, whichever
//! comes first, and samples on the clock too ([`Pace`]); the record keeps the operations
//! actually run.
mod rtree;

use super::BenchArgs;
use super::index::{Handle, IndexCfg};
use super::phase::value_for;
use super::ycsb::Rng;
use crate::args::FabricKind;
use crate::perf_sim::model_from;
use remora::core::block_on::block_on;
use remora::core::fabric::{Endpoint, QueuePair};
use remora::core::index::KvIndex;
use remora::layouts::GlobalAddr;
use remora::layouts::region::{HEADER_LEN, RegionHeader};
use remora::poller::sim::{Sim, SimConfig};
use remora::poller::soft::control;
use serde::Serialize;
use std::cell::RefCell;
use std::io::Write;

/// One sample of a churn run.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Churn operations (one delete + one insert each) done when sampled.
    pub ops: u64,
    /// The allocator cursor of each memory node, capped at its region's length: bytes of its
    /// region handed out so far.
    pub bytes_in_use: Vec<u64>,
    /// Keys in the index (the live set: `--records` throughout).
    pub live_keys: u64,
    /// CHIME only: its leaves, counted along the leaf chain when sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leaves: Option<LeafCensus>,
}

/// A census of CHIME's leaves at a sample (`Chime::census`), and its splits so far.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LeafCensus {
    /// Leaves in the leaf chain.
    pub leaves: u64,
    /// Live entries in them.
    pub entries: u64,
    /// Free slots in them.
    pub free_slots: u64,
    /// Leaf splits of the churn's handle so far (the load's included).
    pub splits: u64,
    /// Leaves those splits allocated: with one client and no merges, `leaves` is one more.
    pub new_leaves: u64,
    /// Of `splits`, those that allocated no leaf: the leaf's entries and the new key fit a
    /// fresh table, so it was rebuilt in place (`hopscotch::pack` makes one table).
    pub rebuilt_in_place: u64,
    /// Leaves with no live entry (reusable if a merge freed them; none is freed now).
    pub empty: u64,
    /// Fewest and most live entries of a leaf.
    pub min_entries: u64,
    pub max_entries: u64,
    /// Leaves left if runs of neighbours fitting `census::MERGE_FILL` keys were merged
    /// (`LeafSpread::merged`): what a merge on delete could bring `leaves` down to.
    pub merged: u64,
}

/// The census of `idx`'s leaves, for an index that has one (CHIME).
async fn census<E: Endpoint>(idx: &Handle<'_, E>) -> Result<Option<LeafCensus>, String> {
    let Handle::Chime(c) = idx else {
        return Ok(None);
    };
    let n = c
        .leaf_spread()
        .await
        .map_err(|e| format!("counting CHIME's leaves: {e}"))?;
    let slots = remora::layouts::chime::SLOTS as u64;
    Ok(Some(LeafCensus {
        leaves: n.leaves,
        entries: n.entries,
        free_slots: (n.leaves * slots).saturating_sub(n.entries),
        empty: n.empty,
        min_entries: n.min,
        max_entries: n.max,
        merged: n.merged,
        splits: c.stats().splits,
        new_leaves: c.stats().new_leaves,
        // A split that allocates makes one new leaf plus its extra leaves.
        rebuilt_in_place: c
            .stats()
            .splits
            .saturating_sub(c.stats().new_leaves.saturating_sub(c.stats().extra_leaves)),
    }))
}

/// The JSON record of one index's churn run.
#[derive(Debug, Clone, Serialize)]
pub struct ChurnRecord {
    pub tool: &'static str,
    pub index: String,
    pub fabric: &'static str,
    pub workload: &'static str,
    pub records: u64,
    pub operations: u64,
    /// Churn operations actually run (fewer than `operations` if `--seconds` stopped it or
    /// an error did).
    pub ops_done: u64,
    /// Wall-clock seconds of the churn phase (after the load, before the final check).
    pub churn_seconds: f64,
    pub value_size: usize,
    pub region_bytes: u64,
    pub seed: u64,
    pub samples: Vec<Sample>,
    /// Bytes in use per million operations (least squares over the samples, summed over
    /// the memory nodes).
    pub slope_bytes_per_mop: f64,
    /// Live keys that read back wrong or missing at the end (null: the check did not run).
    pub final_mismatches: Option<u64>,
    /// Deleted keys that still read back at the end (null: the check did not run).
    pub resurrected: Option<u64>,
    /// The error that stopped the run early, if any.
    pub error: Option<String>,
}

/// Reads the region header of every memory node of `ep`: its allocator cursor, capped at
/// the region's length (a FETCH_AND_ADD that found the node full leaves the cursor past the
/// end), is the bytes handed out so far.
async fn cursors<E: Endpoint>(ep: &E) -> Result<Vec<u64>, String> {
    let mut out = Vec::with_capacity(ep.nodes().len());
    for &node in ep.nodes() {
        let qp = ep
            .qp(node)
            .map_err(|e| format!("memory node {node}: {e}"))?;
        let mut raw = [0u8; HEADER_LEN];
        qp.read(GlobalAddr::new(node, 0), &mut raw)
            .await
            .map_err(|e| format!("reading the region header of node {node}: {e}"))?;
        let h = RegionHeader::decode(&raw)
            .map_err(|e| format!("the region header of node {node}: {e}"))?;
        out.push(h.next_chunk.min(h.region_len));
    }
    Ok(out)
}

/// Least-squares slope of the summed bytes in use, per million operations.
fn slope(samples: &[Sample]) -> f64 {
    let pts: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (s.ops as f64, s.bytes_in_use.iter().sum::<u64>() as f64))
        .collect();
    if pts.len() < 2 {
        return 0.0;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx * 1e6 }
}

/// When a churn samples and when it stops: every `--operations / --churn-samples`
/// operations, and with `--seconds S` also every `S / --churn-samples` of wall-clock time
/// (so a run the clock stops early still has its samples), stopping at S. The clock is read
/// every 1,024 operations.
struct Pace {
    start: std::time::Instant,
    ops: u64,
    every: u64,
    limit: Option<std::time::Duration>,
    tick: Option<std::time::Duration>,
    next: std::time::Duration,
}

impl Pace {
    fn new(a: &BenchArgs, ops: u64) -> Pace {
        let samples = a.churn_samples.max(1);
        let limit = a.seconds.map(std::time::Duration::from_secs_f64);
        let tick = limit.map(|l| l / samples as u32);
        Pace {
            start: std::time::Instant::now(),
            ops,
            every: (ops / samples).max(1),
            limit,
            tick,
            next: tick.unwrap_or_default(),
        }
    }

    /// After `done` operations: (sample now, stop now).
    fn after(&mut self, done: u64) -> (bool, bool) {
        let mut sample = done.is_multiple_of(self.every) || done == self.ops;
        let mut stop = false;
        if done.is_multiple_of(1024) && self.limit.is_some() {
            let t = self.start.elapsed();
            stop = self.limit.is_some_and(|l| t >= l);
            if let Some(tick) = self.tick
                && t >= self.next
            {
                sample = true;
                while self.next <= t {
                    self.next += tick;
                }
            }
            sample |= stop;
        }
        (sample, stop)
    }

    /// Records `done` operations and the churn's seconds in `out`.
    fn finish(&self, out: &RefCell<Outcome>, done: u64) {
        let mut o = out.borrow_mut();
        o.done = done;
        o.churn_seconds = self.start.elapsed().as_secs_f64();
    }
}

/// What the churn task leaves behind (samples survive an error).
#[derive(Default)]
struct Outcome {
    samples: Vec<Sample>,
    done: u64,
    churn_seconds: f64,
    mismatches: Option<u64>,
    resurrected: Option<u64>,
    error: Option<String>,
}

/// Load, churn and check on one client; errors stop it with the samples kept in `out`.
async fn churn<E: Endpoint>(
    a: &BenchArgs,
    ep: &E,
    index: &IndexCfg,
    out: &RefCell<Outcome>,
) -> Result<(), String> {
    let idx = Handle::open(ep, index).await?;
    let ops = a.operations.unwrap_or(a.records);
    let mut key = [0u8; 32];
    let mut val = vec![0u8; a.value_size];
    let mut got = vec![0u8; a.value_size.max(8)];
    let sample = |done: u64, bytes: Vec<u64>, leaves: Option<LeafCensus>| {
        out.borrow_mut().samples.push(Sample {
            ops: done,
            bytes_in_use: bytes,
            live_keys: a.records,
            leaves,
        })
    };
    for n in 0..a.records {
        let kl = a.key(n, &mut key);
        value_for(n, a.value_size, &mut val);
        idx.upsert(&key[..kl], &val)
            .await
            .map_err(|e| format!("loading key {n}: {e}"))?;
    }
    let mut live: Vec<u64> = (0..a.records).collect();
    let mut rng = Rng::new(a.sim.seed ^ 0xC4_0524);
    sample(0, cursors(ep).await?, census(&idx).await?);
    let mut pace = Pace::new(a, ops);
    let mut done = 0u64;
    while done < ops {
        let slot = rng.below(live.len() as u64) as usize;
        let old = live[slot];
        let kl = a.key(old, &mut key);
        let step = async {
            if !idx.delete(&key[..kl]).await? {
                return Err(format!("live key {old} was not found by its delete"));
            }
            let new = a.records + done;
            let kl = a.key(new, &mut key);
            value_for(new, a.value_size, &mut val);
            idx.upsert(&key[..kl], &val).await?;
            Ok(new)
        };
        match step.await {
            Ok(new) => live[slot] = new,
            Err(e) => {
                // The finding: how far it got, and the bytes in use when it stopped.
                if let Ok(b) = cursors(ep).await {
                    sample(done, b, None);
                }
                pace.finish(out, done);
                return Err(format!(
                    "{}: after {done} churn operations: {e}",
                    index.index_name()
                ));
            }
        }
        done += 1;
        let (now, stop) = pace.after(done);
        if now {
            sample(done, cursors(ep).await?, census(&idx).await?);
        }
        if stop {
            break;
        }
    }
    pace.finish(out, done);
    let mut bad = 0u64;
    for &n in &live {
        let kl = a.key(n, &mut key);
        value_for(n, a.value_size, &mut val);
        match idx.get(&key[..kl], &mut got).await? {
            Some(len) if len == a.value_size && got[..len] == val[..] => {}
            _ => bad += 1,
        }
    }
    out.borrow_mut().mismatches = Some(bad);
    // The most recently deleted keys must stay deleted (at most 1,000 of them).
    let mut back = 0u64;
    let mut on = std::collections::HashSet::with_capacity(live.len());
    on.extend(live.iter().copied());
    let newest = a.records + done;
    for n in (newest.saturating_sub(a.records + 1_000)..newest).filter(|n| !on.contains(n)) {
        let kl = a.key(n, &mut key);
        if idx.get(&key[..kl], &mut got).await?.is_some() {
            back += 1;
        }
    }
    out.borrow_mut().resurrected = Some(back);
    if bad > 0 || back > 0 {
        return Err(format!(
            "final check: {bad} of {} live keys read back wrong or missing, {back} deleted keys still read",
            live.len()
        ));
    }
    Ok(())
}

/// One index's churn on the sim.
fn run_sim(a: &BenchArgs, index: &IndexCfg) -> Result<ChurnRecord, String> {
    let s = &a.sim;
    let cfg = SimConfig {
        compute_nodes: 1,
        memory_nodes: s.memory_nodes.max(1),
        region_len: super::region_bytes(a),
        model: model_from(s)?,
        seed: s.seed,
        ..SimConfig::default()
    };
    let region_bytes = cfg.region_len;
    let server = index.server(cfg.region_len, cfg.chunk_size)?;
    // Declared before the sim: its task borrows it.
    let out = RefCell::new(Outcome::default());
    let mut sim = Sim::new(cfg).map_err(|e| e.0)?;
    if let Some((h, _)) = server {
        sim.set_handler(0, h).map_err(|e| e.0)?;
    }
    let base = sim.client(0).map_err(|e| e.0)?;
    sim.spawn_with(&base, 0, |ctx| {
        let out = &out;
        async move {
            if let Err(e) = churn(a, ctx.ep(), index, out).await {
                out.borrow_mut().error = Some(e);
            }
        }
    });
    let report = sim.run();
    drop(sim);
    let mut o = out.into_inner();
    if report.unfinished > 0 && o.error.is_none() {
        o.error = Some(format!(
            "the churn client never finished (seed {}): the index stalled in virtual time",
            report.seed
        ));
    }
    Ok(record(a, index.index_name(), "sim", region_bytes, o))
}

/// One index's churn on the soft fabric: an in-process memory node (or `--connect`'s).
fn run_soft(a: &BenchArgs, index: &IndexCfg) -> Result<ChurnRecord, String> {
    let out = RefCell::new(Outcome::default());
    let (region_bytes, _server, _node, ep) = match &a.connect {
        Some(p) => {
            let path = std::path::PathBuf::from(p);
            let info = control::info(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let ep = control::connect_all(std::slice::from_ref(&path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            (info.region_len, None, None, ep)
        }
        None => {
            let (node, _) = super::soft::local_memory_node(a, index)?;
            let server = node.spawn_server_on(a.server_core);
            let ep = node
                .endpoint()
                .map_err(|e| format!("connecting to the memory node: {e}"))?;
            (super::region_bytes(a), Some(server), Some(node), ep)
        }
    };
    if let Err(e) = block_on(churn(a, &ep, index, &out)) {
        out.borrow_mut().error = Some(e);
    }
    Ok(record(
        a,
        index.index_name(),
        "soft",
        region_bytes,
        out.into_inner(),
    ))
}

fn record(
    a: &BenchArgs,
    index: &str,
    fabric: &'static str,
    region_bytes: u64,
    o: Outcome,
) -> ChurnRecord {
    ChurnRecord {
        tool: "remora bench --churn",
        index: index.to_string(),
        fabric,
        workload: "churn",
        records: a.records,
        operations: a.operations.unwrap_or(a.records),
        ops_done: o.done,
        churn_seconds: o.churn_seconds,
        value_size: a.value_size,
        region_bytes,
        seed: a.sim.seed,
        slope_bytes_per_mop: slope(&o.samples),
        samples: o.samples,
        final_mismatches: o.mismatches,
        resurrected: o.resurrected,
        error: o.error,
    }
}

fn print(r: &ChurnRecord, out: &mut dyn Write) {
    let _ = writeln!(
        out,
        "\nchurn: {} on {}, {} live keys, {} of {} operations (delete + insert) in {:.1} s, region {} MiB",
        r.index,
        r.fabric,
        r.records,
        r.ops_done,
        r.operations,
        r.churn_seconds,
        r.region_bytes >> 20
    );
    let nodes = r.samples.first().map_or(1, |s| s.bytes_in_use.len());
    let mut head = format!("{:>12}", "ops");
    for n in 0..nodes {
        head.push_str(&format!(" {:>16}", format!("node {n} bytes")));
    }
    head.push_str(&format!(
        " {:>10}",
        if r.index == "catfish" {
            "live rects"
        } else {
            "live keys"
        }
    ));
    let leaves = r.samples.iter().any(|s| s.leaves.is_some());
    if leaves {
        head.push_str(&format!(
            " {:>8} {:>10} {:>10} {:>8} {:>10} {:>8} {:>9} {:>4} {:>4} {:>5} {:>6}",
            "leaves",
            "entries",
            "free slots",
            "splits",
            "new leaves",
            "in place",
            "keys/leaf",
            "min",
            "max",
            "empty",
            "merged"
        ));
    }
    let _ = writeln!(out, "{head}");
    for s in &r.samples {
        let mut row = format!("{:>12}", s.ops);
        for b in &s.bytes_in_use {
            row.push_str(&format!(" {b:>16}"));
        }
        row.push_str(&format!(" {:>10}", s.live_keys));
        if let Some(c) = s.leaves {
            row.push_str(&format!(
                " {:>8} {:>10} {:>10} {:>8} {:>10} {:>8} {:>9.1} {:>4} {:>4} {:>5} {:>6}",
                c.leaves,
                c.entries,
                c.free_slots,
                c.splits,
                c.new_leaves,
                c.rebuilt_in_place,
                c.entries as f64 / c.leaves.max(1) as f64,
                c.min_entries,
                c.max_entries,
                c.empty,
                c.merged
            ));
        }
        let _ = writeln!(out, "{row}");
    }
    let _ = writeln!(
        out,
        "slope: {:.0} bytes in use per million operations",
        r.slope_bytes_per_mop
    );
    match (&r.error, r.final_mismatches) {
        (Some(e), _) => {
            let _ = writeln!(out, "stopped: {e}");
        }
        (None, Some(0)) => {
            let _ = writeln!(
                out,
                "final check: all {} live {} read back exactly",
                r.records,
                if r.index == "catfish" {
                    "rectangles found by window searches and"
                } else {
                    "keys"
                }
            );
        }
        _ => {}
    }
}

/// Runs the churn for every `--index`, prints the tables, writes the JSON records and the
/// chart; fails with the first index's error after everything is written.
pub fn run(a: &BenchArgs) -> Result<(), String> {
    if a.fabric == FabricKind::Verbs {
        return Err("--churn runs on the sim and soft fabrics (not verbs yet)".into());
    }
    let mut recs = Vec::new();
    for &kind in &a.indexes {
        let mut one = a.clone();
        one.index = kind;
        // Erda's log sized to the live set, so the churn runs its cleaning (which also
        // empties the buckets of deleted keys); sized to the run's appends it never cleans
        // and its table fills with deleted keys.
        one.erda_clean = true;
        super::validate(&one)?;
        if kind == super::IndexKind::Catfish {
            let r = match a.fabric {
                FabricKind::Soft => rtree::run_soft(&one)?,
                _ => rtree::run_sim(&one, None)?,
            };
            if !a.silent {
                print(&r, &mut *crate::report::human_out(a.json.as_deref()));
            }
            recs.push(r);
            continue;
        }
        let mut index = super::index_cfg(&one)?;
        if let super::index::IndexCfg::Smart { cfg, .. } = &mut index {
            // SMART reuses memory a grace period (3 x (2 leases + the longest back-off))
            // after retiring it: with its 0.5 s default leases (sized for CI's oversubscribed
            // soft threads) that is 3 s of churn in flight; the churn runs with the 10 ms
            // leases of a client on dedicated cores (`LeaseConfig::default_lease`).
            cfg.lease = remora::core::lease::LeaseConfig::default_lease();
        }
        let r = match a.fabric {
            FabricKind::Soft => run_soft(&one, &index)?,
            _ => run_sim(&one, &index)?,
        };
        if !a.silent {
            print(&r, &mut *crate::report::human_out(a.json.as_deref()));
        }
        recs.push(r);
    }
    if recs.len() > 1 && !a.silent {
        let mut out = crate::report::human_out(a.json.as_deref());
        let _ = writeln!(out, "\nslopes (bytes in use per million operations):");
        for r in &recs {
            let _ = writeln!(
                out,
                "{:<10} {:>14.0}  {}",
                r.index,
                r.slope_bytes_per_mop,
                r.error.as_deref().unwrap_or("ok")
            );
        }
    }
    if let Some(p) = &a.json {
        crate::report::write_json(p, &recs).map_err(|e| format!("writing {p}: {e}"))?;
    }
    if let Some(stem) = &a.churn_chart {
        let lines = recs
            .iter()
            .map(|r| {
                let pts = r
                    .samples
                    .iter()
                    .map(|s| {
                        let b = s.bytes_in_use.iter().sum::<u64>();
                        (s.ops as f64, b as f64 / (1u64 << 20) as f64)
                    })
                    .collect();
                (r.index.clone(), pts)
            })
            .collect();
        let spec = crate::repro::plot::ChartSpec::Curve {
            title: format!("churn over {} live keys", a.records),
            x_label: "operations (delete + insert)".into(),
            y_label: "remote MiB in use (allocator cursor)".into(),
            lines,
        };
        crate::repro::plot::write(std::path::Path::new(stem), &spec)?;
    }
    match recs.iter().find_map(|r| r.error.as_ref()) {
        Some(e) => Err(format!("churn: {e}")),
        None => Ok(()),
    }
}

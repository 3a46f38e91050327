//! `remora bench --churn --index catfish`: the churn of the R-tree.
//!
//! After inserting `--records` rectangles (the live set), each operation deletes one live
//! rectangle (chosen uniformly) and inserts a new one, both through the Catfish server, so
//! the tree keeps `--records` entries while its nodes split, condense and are copied on
//! write. The bytes in use are sampled as for the key-value indexes (the allocator cursor:
//! the server's arenas grow only by chunks a client hands it). At the end every live
//! rectangle must be found, exactly once and with its own id, by a window search of that
//! rectangle (offloaded: the client READs the nodes, born-epoch checks included); the
//! latest deleted ones must not be found; and a search of the whole space must return the
//! live set and nothing else.
use super::{ChurnRecord, Outcome, Pace, Sample, cursors, record};
use crate::bench::BenchArgs;
use crate::perf_sim::model_from;
use remora::core::block_on::block_on;
use remora::core::catfish::{CatfishClient, CatfishServer, Entry, Mode, Rect};
use remora::core::fabric::{Endpoint, QueuePair};
use remora::poller::sim::{Sim, SimConfig};
use remora::poller::soft::{NodeConfig, SoftMemoryNode};
use std::cell::RefCell;
use std::collections::HashSet;

/// Side of the square space the rectangles lie in.
const SPACE: u32 = 1 << 20;
/// Longest edge of a rectangle.
const EDGE: u32 = 64;

/// The rectangle of object `n` (a function of the seed and `n` alone, so the final check
/// knows every live and deleted one).
pub(super) fn rect_for(seed: u64, n: u64) -> Rect {
    // SplitMix64 of (seed, n).
    let mut z = (seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let x = (z as u32) % (SPACE - EDGE);
    let y = ((z >> 20) as u32) % (SPACE - EDGE);
    let w = 1 + ((z >> 40) as u32) % EDGE;
    let h = 1 + ((z >> 52) as u32) % EDGE;
    Rect {
        min_x: x as i32,
        min_y: y as i32,
        max_x: (x + w - 1) as i32,
        max_y: (y + h - 1) as i32,
    }
}

/// The Catfish server of a churn run; `reclaim_batch` overrides the retirements per
/// reclamation epoch (tests: a batch no churn reaches never reuses a node).
pub(super) fn server(max_message: usize, reclaim_batch: Option<u64>) -> CatfishServer {
    let s = CatfishServer::new(max_message);
    match reclaim_batch {
        Some(b) => s.with_reclaim_batch(b),
        None => s,
    }
}

/// Creates the tree, loads, churns and checks on one client; errors stop it with the
/// samples kept in `out`.
pub(super) async fn churn<E: Endpoint>(
    a: &BenchArgs,
    ep: &E,
    out: &RefCell<Outcome>,
) -> Result<(), String> {
    let qp = ep.qp(0).map_err(|e| e.to_string())?;
    let mut c = CatfishClient::create_tree(qp, 1, a.spatial.fanout, a.spatial.tree.kind())
        .await
        .map_err(|e| format!("creating the tree: {e}"))?;
    let seed = a.sim.seed;
    let ops = a.operations.unwrap_or(a.records);
    let sample = |done: u64, bytes: Vec<u64>| {
        out.borrow_mut().samples.push(Sample {
            ops: done,
            bytes_in_use: bytes,
            live_keys: a.records,
            leaves: None,
        })
    };
    for n in 0..a.records {
        c.insert(qp, rect_for(seed, n), n)
            .await
            .map_err(|e| format!("loading rectangle {n}: {e}"))?;
    }
    let mut live: Vec<u64> = (0..a.records).collect();
    let mut rng = crate::bench::ycsb::Rng::new(seed ^ 0xC4_0524);
    sample(0, cursors(ep).await?);
    let mut pace = Pace::new(a, ops);
    let mut done = 0u64;
    while done < ops {
        let slot = rng.below(live.len() as u64) as usize;
        let (old, new) = (live[slot], a.records + done);
        let step = async {
            if !c
                .delete(qp, rect_for(seed, old), old)
                .await
                .map_err(|e| e.to_string())?
            {
                return Err(format!("live rectangle {old} was not found by its delete"));
            }
            c.insert(qp, rect_for(seed, new), new)
                .await
                .map_err(|e| e.to_string())
        };
        if let Err(e) = step.await {
            if let Ok(b) = cursors(ep).await {
                sample(done, b);
            }
            pace.finish(out, done);
            return Err(format!("catfish: after {done} churn operations: {e}"));
        }
        live[slot] = new;
        done += 1;
        let (now, stop) = pace.after(done);
        if now {
            sample(done, cursors(ep).await?);
        }
        if stop {
            break;
        }
    }
    pace.finish(out, done);
    let mut hits: Vec<Entry> = Vec::new();
    let mut bad = 0u64;
    for &n in &live {
        let r = rect_for(seed, n);
        search(qp, &mut c, r, &mut hits).await?;
        if hits.iter().filter(|e| e.ptr == n).count() != 1
            || hits.iter().any(|e| e.ptr == n && e.rect != r)
        {
            bad += 1;
        }
    }
    // The whole space: the live set exactly (a lost or duplicated entry changes the count, a
    // deleted one that survived is not in `on`).
    let on: HashSet<u64> = live.iter().copied().collect();
    let all = Rect {
        min_x: 0,
        min_y: 0,
        max_x: SPACE as i32,
        max_y: SPACE as i32,
    };
    search(qp, &mut c, all, &mut hits).await?;
    let strays = hits.iter().filter(|e| !on.contains(&e.ptr)).count() as u64;
    if hits.len() as u64 != a.records {
        bad += a.records.abs_diff(hits.len() as u64).max(1);
    }
    out.borrow_mut().mismatches = Some(bad);
    // The most recently deleted rectangles stay deleted (at most 1,000 of them).
    let mut back = strays;
    let newest = a.records + done;
    for n in (newest.saturating_sub(a.records + 1_000)..newest).filter(|n| !on.contains(n)) {
        search(qp, &mut c, rect_for(seed, n), &mut hits).await?;
        if hits.iter().any(|e| e.ptr == n) {
            back += 1;
        }
    }
    out.borrow_mut().resurrected = Some(back);
    if bad > 0 || back > 0 {
        return Err(format!(
            "final check: {bad} of {} live rectangles not found exactly, {back} deleted ones \
             still found",
            live.len()
        ));
    }
    Ok(())
}

/// Every entry intersecting `w`, found by an offloaded search, into `hits`.
async fn search<Q: QueuePair>(
    qp: &Q,
    c: &mut CatfishClient,
    w: Rect,
    hits: &mut Vec<Entry>,
) -> Result<(), String> {
    hits.clear();
    c.search(qp, w, Mode::Offload, hits)
        .await
        .map(|_| ())
        .map_err(|e| format!("searching {w:?}: {e}"))
}

/// The R-tree churn on the sim; `reclaim_batch` as in [`server`].
pub(super) fn run_sim(a: &BenchArgs, reclaim_batch: Option<u64>) -> Result<ChurnRecord, String> {
    let s = &a.sim;
    let cfg = SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: crate::bench::region_bytes(a),
        model: model_from(s)?,
        seed: s.seed,
        ..SimConfig::default()
    };
    let region_bytes = cfg.region_len;
    // Declared before the sim: its task borrows it.
    let out = RefCell::new(Outcome::default());
    let mut sim = Sim::new(cfg).map_err(|e| e.0)?;
    let max = sim
        .endpoint(0)
        .map_err(|e| e.0)?
        .qp(0)
        .map_err(|e| e.to_string())?
        .max_message();
    sim.set_handler(0, Box::new(server(max, reclaim_batch)))
        .map_err(|e| e.0)?;
    let base = sim.client(0).map_err(|e| e.0)?;
    sim.spawn_with(&base, 0, |ctx| {
        let out = &out;
        async move {
            if let Err(e) = churn(a, ctx.ep(), out).await {
                out.borrow_mut().error = Some(e);
            }
        }
    });
    let report = sim.run();
    drop(sim);
    let mut o = out.into_inner();
    if report.unfinished > 0 && o.error.is_none() {
        o.error = Some(format!(
            "the churn client never finished (seed {}): the tree stalled in virtual time",
            report.seed
        ));
    }
    Ok(record(a, "catfish", "sim", region_bytes, o))
}

/// The R-tree churn on an in-process soft memory node.
pub(super) fn run_soft(a: &BenchArgs) -> Result<ChurnRecord, String> {
    if a.connect.is_some() {
        return Err(
            "--churn --index catfish creates its own tree: it runs on an in-process memory \
             node (no --connect)"
                .into(),
        );
    }
    let cfg = NodeConfig {
        region_len: crate::bench::region_bytes(a),
        ..NodeConfig::default()
    };
    let region_bytes = cfg.region_len;
    let handler = Box::new(server(cfg.max_msg, None));
    let node = SoftMemoryNode::create_with(cfg, handler)
        .map_err(|e| format!("creating the memory node: {e}"))?;
    let _server = node.spawn_server_on(a.server_core);
    let ep = node
        .endpoint()
        .map_err(|e| format!("connecting to the memory node: {e}"))?;
    let out = RefCell::new(Outcome::default());
    if let Err(e) = block_on(churn(a, &ep, &out)) {
        out.borrow_mut().error = Some(e);
    }
    Ok(record(a, "catfish", "soft", region_bytes, out.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::{ChurnRecord, rect_for, run_sim};
    use crate::bench::BenchArgs;

    fn args(line: &str) -> BenchArgs {
        let mut a = crate::repro::run::parse_bench(line).expect("bench flags");
        a.silent = true;
        a.quiet = true;
        a
    }

    const LINE: &str = "--index catfish --fabric sim --churn --records 400 --operations 30000 \
                        --churn-samples 10 --region-mib 8";

    /// What the churn must show: every operation ran, every live rectangle was found exactly
    /// and no deleted one, and the bytes in use did not climb by more than one allocator
    /// chunk (1 MiB) over the run.
    fn verdict(r: &ChurnRecord) -> Result<(), String> {
        if let Some(e) = &r.error {
            return Err(e.clone());
        }
        if r.ops_done != r.operations {
            return Err(format!("{} of {} operations", r.ops_done, r.operations));
        }
        if r.final_mismatches != Some(0) || r.resurrected != Some(0) {
            return Err(format!(
                "{:?} live rectangles lost, {:?} deleted ones found",
                r.final_mismatches, r.resurrected
            ));
        }
        let bytes: Vec<u64> = r.samples.iter().map(|s| s.bytes_in_use[0]).collect();
        let (first, last) = (bytes[0], *bytes.last().expect("samples"));
        if last > first + (1 << 20) {
            return Err(format!("bytes in use climbed: {bytes:?}"));
        }
        Ok(())
    }

    #[test]
    fn rectangles_are_distinct_and_inside_the_space() {
        let rs: std::collections::HashSet<_> = (0..10_000).map(|n| rect_for(7, n)).collect();
        assert!(rs.len() > 9_990, "{}", rs.len());
        assert!(rs.iter().all(|r| r.is_valid()
            && r.min_x >= 0
            && r.max_x < super::SPACE as i32
            && r.max_y < super::SPACE as i32));
    }

    /// The R-tree's churn reuses the nodes it retires: 30,000 deletes and inserts over 400
    /// live rectangles stay within one chunk of the bytes in use after loading, and every
    /// live rectangle is found exactly at the end.
    #[test]
    fn catfish_churn_reuses_memory_and_loses_no_rectangle() {
        let r = run_sim(&args(LINE), None).expect("churn");
        verdict(&r).unwrap();
        assert!(r.samples.len() >= 10, "{}", r.samples.len());
    }

    /// The same churn with reclamation held off (an epoch step no churn reaches, so no
    /// retired node is ever reused) fails the verdict: the check can fail.
    #[test]
    fn catfish_churn_without_reuse_fails_the_check() {
        let r = run_sim(&args(LINE), Some(u64::MAX)).expect("churn");
        let v = verdict(&r);
        assert!(v.is_err(), "a churn that never reuses memory passed: {r:?}");
        eprintln!("without reuse: {}", v.unwrap_err());
    }
}

//! CANRT's LOAD phase by bulk loading (`remora::core::canrt` `CanrtServer::bulk_load`), where
//! the load is not what is measured. Unlike SMART's and Sherman's (`bulk.rs`), built through
//! the fabric by a client, a CANRT tree is built by its memory node's CPU (the server plans
//! every shape), so its image is written straight into the memory node's region before the
//! cluster starts, by the server code a rebuild runs ([`ImageRegion`]); the measured
//! cluster's server then recovers it from the region (as after a restart) and the clients
//! open it. The keys and values are exactly those the LOAD phase would insert (key number
//! `n` gets `value_for(n)`; a key drawn twice keeps its last), 8- or 16-byte keys alike, and
//! the tree is what the server's repack of those keys makes under the run's
//! `--canrt-growth` (see core's `canrt/bulk.rs` for how that compares with an insert-grown
//! tree).
//!
//! Why: the paper's geometry (`--canrt-growth whole-level`) rebuilds the whole tree at every
//! resize, so inserting 200,000 random string keys (the 100,000-key range query's load)
//! took over 9 minutes of host CPU; bulk-loaded, under a second.
use super::BenchArgs;
use super::index::IndexCfg;
use super::phase::value_for;
use super::spatial::ImageRegion;
use remora::core::canrt::CanrtServer;
use remora::core::server::Handler;
use remora::layouts::canrt::DataGeometry;
use remora::poller::sim::{NodeImage, SimConfig};
use std::time::Instant;

/// The sorted (key, value) pairs of a CANRT bulk load, and what preparing them cost.
pub struct CanrtPlan {
    pub pairs: Vec<(u128, Vec<u8>)>,
    pub sort_s: f64,
}

/// The run's `--records` keys as CANRT keys (`key_len`-byte big-endian integers) with their
/// values, sorted; a key drawn twice keeps its last key number's value (the later insert
/// wins).
pub fn plan(a: &BenchArgs, key_len: u32) -> Result<CanrtPlan, String> {
    let t = Instant::now();
    let mut buf = [0u8; 32];
    let mut keyed = Vec::with_capacity(a.records as usize);
    for n in 0..a.records {
        let len = a.key(n, &mut buf);
        if len != key_len as usize {
            return Err(format!(
                "CANRT bulk load: key {n} has {len} bytes, the tree {key_len}"
            ));
        }
        let k = buf[..len].iter().fold(0u128, |k, &b| k << 8 | b as u128);
        keyed.push((k, n));
    }
    keyed.sort_unstable();
    let pairs = with_values(keyed, a.value_size);
    Ok(CanrtPlan {
        pairs,
        sort_s: t.elapsed().as_secs_f64(),
    })
}

/// Writes the CANRT tree of `p` into its memory node's image (no tree there yet) of a sim
/// of `sim`, noting the lines the server touched (`ImageRegion::warming`); a one-line
/// summary of its shape.
pub fn build(
    index: &IndexCfg,
    images: &mut [NodeImage],
    sim: &SimConfig,
    p: &CanrtPlan,
) -> Result<String, String> {
    let IndexCfg::Canrt { cfg, growth } = index else {
        return Err("not a CANRT index".into());
    };
    let g = DataGeometry::new(cfg.slots, cfg.value_cap)
        .and_then(|g| g.with_key_len(cfg.key_len))
        .map_err(|e| format!("CANRT geometry: {e:?}"))?;
    let img = images
        .get_mut(cfg.node as usize)
        .ok_or("no image of CANRT's memory node")?;
    let mut server = CanrtServer::with_growth(*growth);
    let h = server
        .bulk_load(&ImageRegion::warming(img, cfg.node, sim), g, &p.pairs)
        .map_err(|e| format!("CANRT bulk load: {e}"))?;
    let slots = h.n_data as u64 * h.slots as u64;
    Ok(format!(
        "CANRT image of {} keys ({growth:?} growth): height {}, {} data nodes of {} slots, {:.1}% \
         full, prefix array {} B, data array {} MiB",
        p.pairs.len(),
        h.height,
        h.n_data,
        h.slots,
        100.0 * p.pairs.len() as f64 / slots.max(1) as f64,
        h.prefix_len,
        (h.data_cap * h.data_node_size) >> 20
    ))
}

/// Recovers memory node `node`'s server `handler` from the image (as a restarted server
/// does: its volatile state from the region), before the cluster over the image starts.
pub fn recover(
    handler: &mut (dyn Handler + Send),
    images: &mut [NodeImage],
    node: usize,
) -> Result<String, String> {
    let img = images
        .get_mut(node)
        .ok_or("no image of the server's memory node")?;
    handler
        .recover(&ImageRegion::new(&mut img.host, node as u16))
        .map_err(|e| format!("recovering the bulk-loaded tree: {e}"))
}

/// `keyed` (sorted by key, then key number) with one item per key, carrying the value its
/// last key number's insert would write (`value_for`).
pub fn with_values<K: PartialEq>(mut keyed: Vec<(K, u64)>, value_size: usize) -> Vec<(K, Vec<u8>)> {
    super::bulk::last_wins(&mut keyed, |x, y| x.0 == y.0, |k| &mut k.1);
    keyed
        .into_iter()
        .map(|(k, n)| {
            let mut v = vec![0u8; value_size];
            value_for(n, value_size, &mut v);
            (k, v)
        })
        .collect()
}

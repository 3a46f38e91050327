//! Erda's LOAD phase by bulk loading (`remora::core::erda` `ErdaServer::bulk_load`), where
//! the load is not what is measured. As CANRT's and WORT's (`bulk_canrt.rs`,
//! `bulk_wort.rs`), the store is the memory node's own, so it is written straight into the
//! memory node's region image before the cluster starts, by the server's own write path
//! ([`ImageRegion`]); the measured cluster's server then recovers the store from the region
//! (as after a restart: every word names a whole, marked object, so nothing is reverted) and
//! the clients connect to it.
//!
//! The keys and values are exactly those the LOAD phase inserts, in its order (key number
//! `n` gets `value_for(n)`; a key drawn twice is upserted twice, the later value named
//! newest, as the load's later upsert leaves it), each granted as one session's upsert from
//! its first mailbox (head 0, as every client of a `--coroutines 1` load writes from the first
//! of its 16 mailboxes; core's `erda/server/bulk.rs`). A load by concurrent clients
//! interleaves the same grants: log offsets (and which bucket of a full neighbourhood a key
//! takes) can differ, nothing else.
//!
//! The lines the server's load touched go with the image (`ImageRegion::warming`), so the
//! measured cluster's server cache starts as the inserts would leave it: the default where
//! the load is not measured (`bulk.rs`'s `wanted` has the measurements).
use super::BenchArgs;
use super::bulk_wort::WortKey;
use super::index::IndexCfg;
use super::phase::value_for;
use super::spatial::ImageRegion;
use remora::core::erda::{BulkStats, ErdaConfig, ErdaServer};
use remora::poller::sim::{NodeImage, SimConfig};
use std::time::Instant;

/// The keys of an Erda bulk load in key-number order, and what preparing them cost.
pub struct ErdaPlan {
    pub keys: Vec<WortKey>,
    pub value_size: usize,
    pub sort_s: f64,
}

/// The run's `--records` keys in key-number order (1 to 16 bytes each).
pub fn plan(a: &BenchArgs) -> Result<ErdaPlan, String> {
    let t = Instant::now();
    let mut buf = [0u8; 32];
    let keys = (0..a.records)
        .map(|n| {
            let len = a.key(n, &mut buf);
            WortKey::new(&buf[..len])
                .ok_or_else(|| format!("Erda bulk load: key {n} has {len} bytes (1 to 16)"))
        })
        .collect::<Result<_, _>>()?;
    Ok(ErdaPlan {
        keys,
        value_size: a.value_size,
        sort_s: t.elapsed().as_secs_f64(),
    })
}

/// Writes the Erda store of `p` into memory node 0's image (no store there yet); a one-line
/// summary.
pub fn build(
    index: &IndexCfg,
    images: &mut [NodeImage],
    sim: &SimConfig,
    p: &ErdaPlan,
) -> Result<String, String> {
    let IndexCfg::Erda { server, .. } = index else {
        return Err("not an Erda index".into());
    };
    let size = p.value_size;
    let entries = p.keys.iter().enumerate().map(|(n, k)| {
        let mut v = vec![0u8; size];
        value_for(n as u64, size, &mut v);
        (k, v)
    });
    let st = write(*server, images, sim, entries)?;
    Ok(format!(
        "Erda store of {} keys, as one session's upserts in key order leave it: {} buckets \
         filled, {} entries displaced, {} MiB of log, {} log regions chained",
        st.keys,
        st.buckets,
        st.displaced,
        st.log_bytes >> 20,
        st.chained
    ))
}

/// Writes `entries` (key, value), in order, as a store of geometry `cfg` into memory node 0's
/// image (no store there yet) of a sim of `sim` by a server's write path (core's
/// `ErdaServer::bulk_load`), noting the lines it touched (`ImageRegion::warming`).
pub fn write<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    cfg: ErdaConfig,
    images: &mut [NodeImage],
    sim: &SimConfig,
    entries: impl IntoIterator<Item = (K, V)>,
) -> Result<BulkStats, String> {
    let img = images.get_mut(0).ok_or("no image of Erda's memory node")?;
    ErdaServer::new(cfg)
        .bulk_load(&ImageRegion::warming(img, 0, sim), entries)
        .map_err(|e| format!("Erda bulk load: {e}"))
}

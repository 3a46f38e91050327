//! The LOAD phase by bulk loading (`remora::core::{smart, sherman}` `bulk_load`), where the
//! load is not what is measured: the run's `--records` keys are generated, sorted and
//! written as the index's image at memory speed by one client, through the fabric (chunks
//! taken by FETCH_AND_ADD, one WRITE per chunk), before the other clients open the index.
//! The keys and values are exactly those the LOAD phase would insert (key number `n` gets
//! `value_for(n)`), so the run phase sees the same key set.
use super::BenchArgs;
use super::index::{Handle, IndexCfg};
use super::phase::value_for;
use super::ycsb::{KeyType, Workload};
use remora::core::fabric::Endpoint;
use remora::core::sherman::PAPER_FILL_PERCENT;
use remora::core::smart::KeyMode;
use std::time::Instant;

/// One key of a bulk load: its bytes and its key number (for its value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BulkKey {
    key: [u8; 8],
    n: u64,
}

impl AsRef<[u8]> for BulkKey {
    fn as_ref(&self) -> &[u8] {
        &self.key
    }
}

/// The sorted keys of a bulk load, and what preparing them cost.
pub struct BulkPlan {
    pub keys: Vec<BulkKey>,
    pub sort_s: f64,
}

/// Whether the load of this run is bulk-loaded: the index has a bulk loader (SMART with
/// 8-byte keys, Sherman, FG+), the workload is not LOAD itself, and `--no-bulk-load` is off.
pub fn wanted(a: &BenchArgs, index: &IndexCfg, workload: Workload) -> bool {
    let eight = matches!(a.keys, KeyType::Int | KeyType::Seq);
    let able = match index {
        IndexCfg::Smart { cfg, .. } => eight && cfg.key_mode == KeyMode::Fixed(8),
        IndexCfg::Sherman { .. } => eight,
        _ => false,
    };
    able && workload != Workload::Load && !a.no_bulk_load && a.records > 0
}

/// The run's `--records` keys, sorted; a key drawn twice keeps its last key number (as the
/// later insert's value would win).
pub fn plan(a: &BenchArgs) -> BulkPlan {
    let t = Instant::now();
    let mut buf = [0u8; 32];
    let mut keys: Vec<BulkKey> = (0..a.records)
        .map(|n| {
            let len = a.key(n, &mut buf);
            let mut key = [0u8; 8];
            key.copy_from_slice(&buf[..len.min(8)]);
            BulkKey { key, n }
        })
        .collect();
    keys.sort_unstable();
    keys.dedup_by(|later, kept| {
        let same = later.key == kept.key;
        if same {
            kept.n = later.n;
        }
        same
    });
    BulkPlan {
        keys,
        sort_s: t.elapsed().as_secs_f64(),
    }
}

impl<E: Endpoint> Handle<'_, E> {
    /// Bulk-loads `keys` into this freshly created index (before any other handle opens
    /// it); returns a one-line summary.
    pub async fn bulk_load(&self, a: &BenchArgs, keys: &[BulkKey]) -> Result<String, String> {
        let size = a.value_size;
        match self {
            Handle::Smart(s) => {
                let mut val = |i: usize, out: &mut [u8]| {
                    value_for(keys[i].n, size, out);
                    size
                };
                let st = s
                    .bulk_load(keys, &mut val)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "SMART image of {} keys: internal nodes N4/N16/N48/N256 {:?}, {} MiB in {} chunks",
                    st.keys,
                    st.nodes,
                    st.bytes >> 20,
                    st.chunks
                ))
            }
            Handle::Sherman(s) => {
                let mut entry = |i: u64, out: &mut [u8]| {
                    let k = &keys[i as usize];
                    value_for(k.n, size, out);
                    (k.key, size)
                };
                let st = s
                    .bulk_load(keys.len() as u64, PAPER_FILL_PERCENT, &mut entry)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "Sherman image of {} keys, leaves {PAPER_FILL_PERCENT}% full: {} leaves, {} \
                     internal pages, height {}, {} MiB in {} chunks",
                    st.keys,
                    st.leaves,
                    st.internal_pages,
                    st.height + 1,
                    st.bytes >> 20,
                    st.chunks
                ))
            }
            _ => Err("this index has no bulk loader".into()),
        }
    }
}

//! Bulk-loaded SMART and Sherman trees read back through another handle of the loading
//! compute node (`warm_cache`, `lookup_reads`): the keys, the loads and the read-back.
//!
//! Included by the tests that use it (`#[path = "common/cached_reads.rs"] mod cached_reads;`).
use remora_core::fabric::Endpoint;
use remora_core::index::KvIndex;
use remora_core::sherman::{PAPER_FILL_PERCENT, Sherman, ShermanConfig, ShermanNode, WarmStats};
use remora_core::smart::{Smart, SmartConfig, SmartNode};
use std::sync::Arc;

/// Key `i`: spread over the key space as YCSB's hashed keys are (a radix tree several levels
/// high).
pub fn key(i: u64) -> [u8; 8] {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1).to_be_bytes()
}

/// Key `i`'s value.
pub fn value(i: u64) -> [u8; 8] {
    (i | 1 << 40).to_le_bytes()
}

/// Keys `0..n` in key order, each with its `i`.
fn sorted_keys(n: u64) -> Vec<([u8; 8], u64)> {
    let mut k: Vec<([u8; 8], u64)> = (0..n).map(|i| (key(i), i)).collect();
    k.sort_unstable();
    k
}

/// Opens SMART on `ep` (a handle of its own) and bulk-loads `keys` (from [`sorted_keys`])
/// with their values.
async fn load_smart<E: Endpoint>(ep: &E, cfg: SmartConfig, keys: &[([u8; 8], u64)]) {
    let loader = Smart::open(ep, cfg).await.unwrap();
    let ks: Vec<[u8; 8]> = keys.iter().map(|k| k.0).collect();
    loader
        .bulk_load(&ks, &mut |i, v: &mut [u8]| {
            v[..8].copy_from_slice(&value(keys[i].1));
            8
        })
        .await
        .unwrap();
}

/// Creates Sherman on `ep` (a handle of its own) and bulk-loads `keys` (from
/// [`sorted_keys`]) with their values, pages filled as the paper's.
async fn load_sherman<E: Endpoint>(ep: &E, cfg: ShermanConfig, keys: &[([u8; 8], u64)]) {
    let loader = Sherman::create(ep, cfg).await.unwrap();
    loader
        .bulk_load(
            keys.len() as u64,
            PAPER_FILL_PERCENT,
            &mut |i, v: &mut [u8]| {
                let (k, n) = keys[i as usize];
                v[..8].copy_from_slice(&value(n));
                (k, 8)
            },
        )
        .await
        .unwrap();
}

/// SMART with keys `0..n` bulk-loaded (by a handle of its own), then a handle on new
/// compute-node state for `cfg` (cache included), filled first by another handle's warm-up
/// where `warm`: the handle, and what the warm-up kept.
pub async fn smart_reader<E: Endpoint>(
    ep: &E,
    cfg: SmartConfig,
    n: u64,
    warm: bool,
) -> (Smart<'_, E>, Option<WarmStats>) {
    load_smart(ep, cfg, &sorted_keys(n)).await;
    let node = Arc::new(SmartNode::new(&cfg));
    let warmer = Smart::open_on(ep, cfg, node.clone()).await.unwrap();
    let w = if warm {
        Some(warmer.warm_cache().await.unwrap())
    } else {
        None
    };
    (Smart::open_on(ep, cfg, node).await.unwrap(), w)
}

/// [`smart_reader`] for Sherman.
pub async fn sherman_reader<E: Endpoint>(
    ep: &E,
    cfg: ShermanConfig,
    n: u64,
    warm: bool,
) -> (Sherman<'_, E>, Option<WarmStats>) {
    load_sherman(ep, cfg, &sorted_keys(n)).await;
    let node = Arc::new(ShermanNode::new(&cfg));
    let warmer = Sherman::create_on(ep, cfg, node.clone()).await.unwrap();
    let w = if warm {
        Some(warmer.warm_cache().await.unwrap())
    } else {
        None
    };
    (Sherman::create_on(ep, cfg, node).await.unwrap(), w)
}

/// How many of keys `0..n` `reader` finds with their values (one lookup each, in `i` order).
pub async fn found<I: KvIndex>(reader: &I, n: u64) -> u64 {
    let mut found = 0;
    let mut buf = [0u8; 8];
    for i in 0..n {
        if reader.get(&key(i), &mut buf).await.unwrap() == Some(8) && buf == value(i) {
            found += 1;
        }
    }
    found
}

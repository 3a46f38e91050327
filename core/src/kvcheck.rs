//! Oracle-checked histories for any [`KvIndex`]: the correctness harness every index and
//! every fabric shares.
//!
//! Each client runs [`client_history`]: random upserts, updates, deletes, lookups and scans on
//! its own key range, checked exactly against a local `BTreeMap` (the range is the client's
//! alone, so the sequential oracle is exact whatever the others do), plus writes and reads of
//! shared *hot* keys whose values encode `(writer, sequence)`: a read must return a value some
//! writer wrote (or the initial 0), and one reader must never see a writer's sequence go
//! backwards — which a linearizable index guarantees and a torn or stale read breaks.
use crate::index::KvIndex;
use std_alloc::collections::BTreeMap;
use std_alloc::format;
use std_alloc::string::String;
use std_alloc::vec::Vec;

/// One client's share of a history.
#[derive(Debug, Clone, Copy)]
pub struct History {
    /// Client number, 1..=255 (0 marks the initial value of hot keys).
    pub client: u64,
    /// Operations the client issues.
    pub ops: u64,
    /// Keys per client (small ranges force splits, deletes and re-inserts).
    pub range: u64,
    /// Shared hot keys (0: none).
    pub hot: u64,
    /// Seed of the client's operation mix and keys (same seed, same history).
    pub seed: u64,
    /// Value bytes the index stores (>= 8).
    pub value_size: usize,
    /// Include range scans (off for hash indexes, which have none).
    pub scans: bool,
}

/// The hot key `h` (above every client's range).
pub fn hot_key(h: u64) -> [u8; 8] {
    (0x100u64 << 40 | h).to_be_bytes()
}

fn own_key(client: u64, x: u64) -> u64 {
    client << 40 | x
}

/// What a history did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Upserts, updates and deletes, each checked against the oracle.
    pub writes: u64,
    /// Gets of the client's own keys, checked against the oracle.
    pub reads: u64,
    /// Scans of the client's own range, checked against the oracle.
    pub scans: u64,
    /// Reads of shared hot keys, checked to never see a writer's sequence go backwards.
    pub hot_reads: u64,
}

/// Runs one client's history; the first disagreement with the oracle is an error naming
/// the operation.
pub async fn client_history<I: KvIndex>(index: &I, h: &History) -> Result<Tally, String> {
    if !(1..=255).contains(&h.client) || h.value_size < 8 || h.value_size > 256 || h.range == 0 {
        return Err(format!("bad history parameters {h:?}"));
    }
    let mut oracle: BTreeMap<u64, u64> = BTreeMap::new();
    let mut last_seen: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut rng = h.seed ^ h.client.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut value = [0u8; 256];
    let mut out = [0u8; 256];
    let mut t = Tally::default();
    let e = |what: &str, key: u64, r: &dyn core::fmt::Debug| {
        format!("client {}: {what} key {key:#x}: {r:?}", h.client)
    };
    for seq in 1..=h.ops {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = own_key(h.client, rng % h.range);
        let kb = key.to_be_bytes();
        let tagged = h.client << 32 | seq;
        value[..8].copy_from_slice(&tagged.to_le_bytes());
        let v = &value[..h.value_size];
        match (rng >> 40) % 16 {
            0..=4 => {
                index
                    .upsert(&kb, v)
                    .await
                    .map_err(|r| e("upsert", key, &r))?;
                oracle.insert(key, tagged);
                t.writes += 1;
            }
            5 => {
                let present = index
                    .update(&kb, v)
                    .await
                    .map_err(|r| e("update", key, &r))?;
                if present != oracle.contains_key(&key) {
                    return Err(e("update presence", key, &present));
                }
                if present {
                    oracle.insert(key, tagged);
                }
                t.writes += 1;
            }
            6 | 7 => {
                let present = index.delete(&kb).await.map_err(|r| e("delete", key, &r))?;
                if present != oracle.remove(&key).is_some() {
                    return Err(e("delete presence", key, &present));
                }
                t.writes += 1;
            }
            8..=10 => {
                let got = index
                    .get(&kb, &mut out)
                    .await
                    .map_err(|r| e("get", key, &r))?;
                let got = got.map(|_| u64::from_le_bytes(out[..8].try_into().expect("8 bytes")));
                if got != oracle.get(&key).copied() {
                    return Err(e("get", key, &(got, oracle.get(&key))));
                }
                t.reads += 1;
            }
            11 if h.scans => {
                let limit = 1 + (rng % 16) as usize;
                let expect: Vec<(u64, u64)> = oracle
                    .range(key..)
                    .take(limit)
                    .map(|(k, v)| (*k, *v))
                    .collect();
                let mut got: Vec<(u64, u64)> = Vec::new();
                index
                    .scan(&kb, limit, &mut |k, val| {
                        let k = k.try_into().map(u64::from_be_bytes).unwrap_or(u64::MAX);
                        let val = val
                            .get(..8)
                            .and_then(|b| b.try_into().ok())
                            .map(u64::from_le_bytes)
                            .unwrap_or(0);
                        got.push((k, val));
                    })
                    .await
                    .map_err(|r| e("scan", key, &r))?;
                // Keys past this client's range belong to others: only the prefix is ours.
                let own = got.iter().take_while(|(k, _)| k >> 40 == h.client).count();
                let sorted = got.windows(2).all(|w| w[0].0 < w[1].0);
                if got[..own] != expect[..] || got.len() > limit || !sorted {
                    return Err(e("scan", key, &(got, expect)));
                }
                t.scans += 1;
            }
            _ if h.hot > 0 => {
                let hk = hot_key(rng % h.hot);
                if (rng >> 20) & 1 == 0 {
                    index
                        .upsert(&hk, v)
                        .await
                        .map_err(|r| e("hot upsert", rng % h.hot, &r))?;
                } else if index
                    .get(&hk, &mut out)
                    .await
                    .map_err(|r| e("hot get", rng % h.hot, &r))?
                    .is_some()
                {
                    let got = u64::from_le_bytes(out[..8].try_into().expect("8 bytes"));
                    let (writer, wseq) = (got >> 32, got & 0xFFFF_FFFF);
                    if writer > 255 || (writer == 0 && wseq != 0) || wseq > h.ops {
                        return Err(e("hot value never written", rng % h.hot, &got));
                    }
                    let seen = last_seen.entry((rng % h.hot, writer)).or_insert(0);
                    if wseq < *seen {
                        return Err(e(
                            "hot value went backwards",
                            rng % h.hot,
                            &(writer, *seen, wseq),
                        ));
                    }
                    *seen = wseq;
                    t.hot_reads += 1;
                }
            }
            _ => {}
        }
    }
    if h.hot > 0 && h.ops >= 400 && t.hot_reads == 0 {
        return Err(format!(
            "client {}: no hot read returned a value: the hot-key check never ran",
            h.client
        ));
    }
    // Final state: everything the oracle holds, and nothing it does not.
    for (k, v) in &oracle {
        let got = index
            .get(&k.to_be_bytes(), &mut out)
            .await
            .map_err(|r| e("final get", *k, &r))?;
        if got.is_none() || u64::from_le_bytes(out[..8].try_into().expect("8 bytes")) != *v {
            return Err(e("final get", *k, &(got, v)));
        }
    }
    Ok(t)
}

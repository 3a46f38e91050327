//! The workload driver: one client's operations on any [`KvIndex`], recorded for [`check`].
//!
//! Keys follow [`kvcheck`](crate::kvcheck): 8-byte big-endian integers; the client's own
//! *cold* keys are `client << 40 | x`, the shared *hot* keys are [`hot_key`] (above every
//! client's range). Values carry a unique [`tag`] `(client, seq)` in their first 8 bytes
//! (little-endian), the rest zero. Hot keys get upserts, updates, deletes, gets and scans from
//! every client; cold keys the same from their owner only (other clients' scans cross them).
//!
//! Scans collect into the client's own buffer (allocated once, `MAX_SCAN` pairs) and are
//! copied into the recorder's item pool. An index error records the operation with an unknown
//! outcome and stops the client with that error; callers decide whether errors are allowed.
//!
//! [`check`]: super::check
use super::history::{Op, Outcome, tag};
use super::record::Recorder;
use crate::index::KvIndex;
use core::fmt;
use std_alloc::vec::Vec;

pub use crate::kvcheck::hot_key;

/// Longest scan the driver asks for.
pub const MAX_SCAN: usize = 16;

/// Where time comes from: nanoseconds, from one origin shared by all recorders whose
/// histories are merged (virtual time on the sim).
pub trait Clock {
    /// Now, in nanoseconds since the shared origin.
    fn now_ns(&self) -> u64;
}

impl<F: Fn() -> u64> Clock for F {
    fn now_ns(&self) -> u64 {
        self()
    }
}

/// One client's workload.
#[derive(Debug, Clone, Copy)]
pub struct LinSpec {
    /// 1..=255 (the cold key range is `client << 40 | x`).
    pub client: u32,
    /// Operations the client issues.
    pub ops: u64,
    /// Seed of the client's operation mix and keys.
    pub seed: u64,
    /// Shared hot keys (0: none).
    pub hot: u64,
    /// Cold keys of this client (0: none).
    pub cold: u64,
    /// Percentage of operations on hot keys (when there are both).
    pub hot_percent: u64,
    /// Value bytes the index stores, 8..=256.
    pub value_size: usize,
    /// Include range scans (off for hash indexes).
    pub scans: bool,
    /// Key bytes the index takes: 8 (the key's big-endian bytes) or 16 (those, then 8 more
    /// bytes derived from the key: [`wide_key`]; key order is unchanged).
    pub key_len: usize,
    /// Percentage of operations turned into deletes on top of the mix's 15% (0: the mix
    /// alone, whose live sets stay about two thirds full): a delete-heavy history empties
    /// leaves, so CHIME's merges (`chime/merge.rs`) run under the check.
    pub extra_deletes: u64,
    /// Fill-and-drain phases of this many operations each (0: none): in a fill phase 70% of
    /// operations are upserts, in the drain phase after it 70% are deletes, so the live set
    /// grows and empties over and over (`extra_deletes` is then unused). With many cold keys
    /// per client, whole leaves fill and empty: CHIME's merges run under the check
    /// (`remora check --linearizability --index chime --with merge --waves 400`).
    pub waves: u64,
}

/// The 16-byte form of key `k`: its big-endian bytes, then those of a mix of it (so no byte
/// of the 16 is constant across keys, and key order is the first 8 bytes' order).
pub fn wide_key(k: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&k.to_be_bytes());
    out[8..].copy_from_slice(&(k.rotate_left(29) ^ 0xA5C3_5A3C_96E1_7B0D).to_be_bytes());
    out
}

/// The key a scan returned: `key_len` bytes of [`wide_key`] form (u64::MAX for anything else,
/// which no operation writes).
fn decode_key(k: &[u8], key_len: usize) -> u64 {
    let Some(head) = k.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
        return u64::MAX;
    };
    let key = u64::from_be_bytes(head);
    match key_len {
        8 if k.len() == 8 => key,
        16 if k == wide_key(key) => key,
        _ => u64::MAX,
    }
}

impl LinSpec {
    /// A client with 4 hot keys, 64 cold keys, half its operations on hot keys, 8-byte values.
    pub fn new(client: u32, ops: u64, seed: u64, scans: bool) -> LinSpec {
        LinSpec {
            client,
            ops,
            seed,
            hot: 4,
            cold: 64,
            hot_percent: 50,
            value_size: 8,
            scans,
            key_len: 8,
            extra_deletes: 0,
            waves: 0,
        }
    }
}

/// Why a client stopped early.
#[derive(Debug)]
pub enum LinClientError<E> {
    /// The index failed (the operation is recorded with an unknown outcome).
    Index(E),
    /// The recorder had no room left; the operation was not run.
    RecorderFull,
    /// The spec is out of range.
    BadSpec(LinSpec),
}

impl<E: fmt::Display> fmt::Display for LinClientError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinClientError::Index(e) => write!(f, "index error: {e}"),
            LinClientError::RecorderFull => write!(f, "history recorder full"),
            LinClientError::BadSpec(s) => write!(f, "bad workload spec {s:?}"),
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn decode_value(v: &[u8]) -> u64 {
    // A value too short to hold a tag cannot be one the driver wrote: u64::MAX never is.
    v.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(u64::MAX)
}

/// Runs `spec` on `index`, recording every operation in `rec` with times from `clock`.
/// Returns the number of operations run.
pub async fn lin_client<I: KvIndex, C: Clock + ?Sized>(
    index: &I,
    spec: &LinSpec,
    rec: &Recorder,
    clock: &C,
) -> Result<u64, LinClientError<I::Error>> {
    let s = *spec;
    if !(1..=255).contains(&s.client)
        || !(8..=256).contains(&s.value_size)
        || (s.hot == 0 && s.cold == 0)
        || s.hot_percent > 100
        || s.extra_deletes > 100
        || (s.key_len != 8 && s.key_len != 16)
    {
        return Err(LinClientError::BadSpec(s));
    }
    // Every bit of the seed counts (`seed ^ x | 1` made seeds 2k and 2k+1 one mix).
    let mut rng = Rng((s.seed.wrapping_mul(0xD1B5_4A32_D192_ED03)
        ^ (s.client as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        | 1);
    let mut value = [0u8; 256];
    let mut out = [0u8; 256];
    let mut buf: Vec<(u64, u64)> = Vec::with_capacity(MAX_SCAN + 1);
    for seq in 1..=s.ops {
        let r = rng.next();
        let on_hot = s.cold == 0 || (s.hot > 0 && r % 100 < s.hot_percent);
        let key = if on_hot {
            u64::from_be_bytes(hot_key((r >> 8) % s.hot))
        } else {
            ((s.client as u64) << 40) | ((r >> 8) % s.cold)
        };
        let wide = wide_key(key);
        let kb = if s.key_len == 16 {
            &wide[..]
        } else {
            &wide[..8]
        };
        let t = tag(s.client, seq as u32);
        value[..8].copy_from_slice(&t.to_le_bytes());
        let v = &value[..s.value_size];
        // From a hot key, or from anywhere in the client's own range.
        let scan = Op::Scan {
            from: if on_hot { key } else { (s.client as u64) << 40 },
            limit: 1 + ((r >> 48) % MAX_SCAN as u64) as u32,
        };
        let (upsert, update, delete) = (
            Op::Upsert { key, value: t },
            Op::Update { key, value: t },
            Op::Delete { key },
        );
        // The phase, with fill-and-drain phases (`waves` > 0).
        let op = if let Some(phase) = (seq - 1).checked_div(s.waves) {
            // Fill and drain phases: 70% upserts (deletes), then a delete (an upsert), an
            // update, a scan and gets.
            let (bulk, other) = if phase % 2 == 1 {
                (delete, upsert)
            } else {
                (upsert, delete)
            };
            match (r >> 32) % 20 {
                0..=13 => bulk,
                14 => other,
                15 => update,
                16 if s.scans => scan,
                _ => Op::Get { key },
            }
        } else {
            match (r >> 32) % 20 {
                _ if s.extra_deletes > 0 && (r >> 56) % 100 < s.extra_deletes => delete,
                0..=5 => upsert,
                6..=8 => update,
                9..=11 => delete,
                12 if s.scans => scan,
                _ => Op::Get { key },
            }
        };
        let slot = rec
            .invoke(s.client, op, clock.now_ns())
            .ok_or(LinClientError::RecorderFull)?;
        let res = match op {
            Op::Upsert { .. } => index.upsert(kb, v).await.map(|()| Outcome::Done),
            Op::Update { .. } => index.update(kb, v).await.map(Outcome::Present),
            Op::Delete { .. } => index.delete(kb).await.map(Outcome::Present),
            Op::Get { .. } => index
                .get(kb, &mut out)
                .await
                .map(|g| Outcome::Value(g.map(|n| decode_value(&out[..n.min(out.len())])))),
            Op::Scan { from, limit } => {
                buf.clear();
                // The least key of that order at or after `from`.
                let mut fb = [0u8; 16];
                fb[..8].copy_from_slice(&from.to_be_bytes());
                let r = index
                    .scan(&fb[..s.key_len], limit as usize, &mut |k, val| {
                        // One past the longest limit, so an over-long result shows.
                        if buf.len() <= MAX_SCAN {
                            let k = decode_key(k, s.key_len);
                            buf.push((k, decode_value(val)));
                        }
                    })
                    .await;
                match r {
                    Ok(_) => {
                        rec.complete_items(slot, &buf, clock.now_ns());
                        if rec.is_full() {
                            return Err(LinClientError::RecorderFull);
                        }
                        continue;
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Insert { .. } | Op::Remove { .. } | Op::Search { .. } => {
                return Err(LinClientError::BadSpec(s));
            }
        };
        match res {
            Ok(o) => rec.complete(slot, o, clock.now_ns()),
            Err(e) => return Err(LinClientError::Index(e)),
        }
    }
    Ok(s.ops)
}

//! The writers of the memory-node crash tests (`canrt_sim`, `canrt_bulk`, `erda_sim`,
//! `erda_baselines`): what each did before the crash, and the check of what recovery kept
//! against it.
//!
//! Included by the tests that use it (`#[path = "common/crash_writes.rs"] mod crash_writes;`).
#![allow(dead_code)] // Each test uses a part: a scan (ordered trees) or gets (hash stores).
use remora_core::index::KvIndex;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// What one writer did before the crash: per key, the last acknowledged value, and the
/// write in flight when the node died.
#[derive(Default, Clone)]
pub struct Writes {
    pub acked: BTreeMap<u64, u64>,
    pub in_flight: Option<(u64, u64)>,
}

/// Writer `c`'s upserts (value `i` to key `(c + 1) << 32 | (i * 7 % keys)`, `i` from 1)
/// into `logs[c]`, until one fails: its error.
pub async fn write_until_error<I: KvIndex>(
    t: &I,
    c: u64,
    keys: u64,
    logs: &RefCell<Vec<Writes>>,
) -> Result<(), I::Error> {
    for i in 1..u64::MAX {
        let key = (c + 1) << 32 | (i * 7 % keys);
        logs.borrow_mut()[c as usize].in_flight = Some((key, i));
        t.upsert(&key.to_be_bytes(), &i.to_le_bytes()).await?;
        let mut l = logs.borrow_mut();
        l[c as usize].acked.insert(key, i);
        l[c as usize].in_flight = None;
    }
    Ok(())
}

/// Every pair of `t` (8-byte big-endian keys, 8-byte little-endian values), by a scan from
/// key 0 (which must succeed).
pub async fn scan_all<I: KvIndex>(t: &I) -> BTreeMap<u64, u64> {
    let mut found = BTreeMap::new();
    t.scan(&0u64.to_be_bytes(), usize::MAX, &mut |k, v| {
        found.insert(
            u64::from_be_bytes(k.try_into().unwrap()),
            u64::from_le_bytes(v.try_into().unwrap()),
        );
    })
    .await
    .unwrap();
    found
}

/// Asserts that `found` (what recovery kept of the writers' keys) holds every acknowledged
/// write (or the newer one in flight) and nothing never acknowledged; `label` starts each
/// message.
pub fn assert_recovered(logs: &[Writes], found: &BTreeMap<u64, u64>, label: &str) {
    for (c, l) in logs.iter().enumerate() {
        for (k, v) in &l.acked {
            let got = found.get(k).copied();
            let in_flight = l.in_flight == Some((*k, got.unwrap_or(0)));
            assert!(
                got == Some(*v) || in_flight,
                "{label}: writer {c} key {k:#x}: acknowledged {v}, recovered {got:?}"
            );
        }
    }
    for (k, v) in found {
        let l = &logs[((k >> 32) - 1) as usize];
        assert!(
            l.acked.get(k) == Some(v) || l.in_flight == Some((*k, *v)),
            "{label}: key {k:#x} recovered with {v}, never acknowledged"
        );
    }
}

/// Every key of 8 writers that write `keys` keys each (see [`write_until_error`]).
pub fn writer_keys(keys: u64) -> Vec<u64> {
    (0..8u64)
        .flat_map(|c| (0..keys).map(move |x| (c + 1) << 32 | x))
        .collect()
}

/// The value `t` holds for each of `keys` (one get each, which must succeed), `None` where
/// it holds none.
pub async fn get_all<I: KvIndex>(t: &I, keys: &[u64]) -> BTreeMap<u64, Option<u64>> {
    let mut found = BTreeMap::new();
    let mut out = [0u8; 8];
    for &k in keys {
        let got = t.get(&k.to_be_bytes(), &mut out).await.unwrap();
        found.insert(k, got.map(|_| u64::from_le_bytes(out)));
    }
    found
}

/// The acknowledged writes recovery lost: one line per key whose recovered value (`found`)
/// is neither its last acknowledged one nor a present one in flight; and how many keys were
/// acknowledged.
pub fn lost(logs: &[Writes], found: &BTreeMap<u64, Option<u64>>) -> (Vec<String>, usize) {
    let mut lost = Vec::new();
    let mut acked = 0;
    for (c, l) in logs.iter().enumerate() {
        acked += l.acked.len();
        for (k, v) in &l.acked {
            let got = found.get(k).copied().flatten();
            let in_flight = got.is_some() && l.in_flight == Some((*k, got.unwrap_or(0)));
            if got != Some(*v) && !in_flight {
                lost.push(format!(
                    "writer {c} key {k:#x}: acknowledged {v}, recovered {got:?}"
                ));
            }
        }
    }
    (lost, acked)
}

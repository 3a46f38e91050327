//! A SMART tree of variable-length (string) keys, bulk-loaded (`smart/bulk.rs`), under the
//! linearizability workload on the simulated cluster (sim seeds 1..=4), as
//! `bulk_load.rs` checks the 8-byte-key trees.
//!
//! The workload's keys are 8-byte integers, which hold NUL bytes: each client runs on the
//! tree through [`Hex`], which writes key `k` as its 16 hex digits with the trailing `0`s
//! dropped (at least one kept). That is one to one and keeps the integers' order, so the
//! history checker's model is unchanged, and it makes keys that are prefixes of others
//! (`…3d` and `…3d0003`) and long shared prefixes (the loaded keys share 12 digits: chains
//! of Node4s). The loaded keys (`BASE + 3 i`, below every workload key in this order too)
//! are read back with their values and scanned in order after the workload, and again after
//! inserts between them.
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::LinSpec;
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

#[path = "common/loaded_keys.rs"]
mod loaded_keys;
#[path = "common/sim_run.rs"]
mod sim_run;
use loaded_keys::{BASE, scanned_exactly, value};
use sim_run::{lin_run, run_on, spawn_lin_clients};

const CLIENTS: u64 = 16;
const OPS: u64 = 200;
const LOADED: u64 = 3000;

/// Integer `k` as a string key: its hex digits, trailing zeros dropped (one kept for 0).
fn hex(k: u64) -> Vec<u8> {
    let s = format!("{k:016x}");
    let t = s.trim_end_matches('0');
    (if t.is_empty() { "0" } else { t }).as_bytes().to_vec()
}

/// The integer of a string key written by [`hex`] (`u64::MAX`, which no key is, otherwise).
fn unhex(k: &[u8]) -> u64 {
    let s = std::str::from_utf8(k).unwrap_or("");
    if s.is_empty() || s.len() > 16 {
        return u64::MAX;
    }
    u64::from_str_radix(&format!("{s:0<16}"), 16).unwrap_or(u64::MAX)
}

/// An index of 8-byte big-endian integer keys over a string-keyed one (see the module doc).
struct Hex<I>(I);

fn int(key: &[u8]) -> u64 {
    u64::from_be_bytes(key.try_into().expect("the workload's keys are 8 bytes"))
}

impl<I: KvIndex> KvIndex for Hex<I> {
    type Error = I::Error;
    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), I::Error> {
        self.0.upsert(&hex(int(key)), value).await
    }
    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, I::Error> {
        self.0.update(&hex(int(key)), value).await
    }
    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, I::Error> {
        self.0.get(&hex(int(key)), out).await
    }
    async fn delete(&self, key: &[u8]) -> Result<bool, I::Error> {
        self.0.delete(&hex(int(key))).await
    }
    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, I::Error> {
        let from = hex(int(from));
        self.0
            .scan(&from, limit, &mut |k, v| visit(&unhex(k).to_be_bytes(), v))
            .await
    }
}

fn sim_cfg(seed: u64) -> SimConfig {
    SimConfig {
        compute_nodes: 4,
        memory_nodes: 2,
        region_len: 32 << 20,
        seed,
        ..SimConfig::default()
    }
}

fn cfg() -> SmartConfig {
    SmartConfig::new(Techniques::SMART, KeyMode::Variable, 8)
}

/// Every loaded key (and `extra` inserted between them) found with its value, and a scan
/// from the first returns exactly them, ascending.
async fn verify<I: KvIndex>(idx: &Hex<I>, extra: u64) -> Result<(), String> {
    let mut out = [0u8; 8];
    for i in 0..LOADED {
        match idx.get(&(BASE + 3 * i).to_be_bytes(), &mut out).await {
            Ok(Some(8)) if out == value(i) => {}
            other => return Err(format!("loaded key {i}: {other:?} {out:?}")),
        }
    }
    let mut want: Vec<u64> = (0..LOADED).map(|i| BASE + 3 * i).collect();
    want.extend((0..extra).map(|i| BASE + 3 * i + 1));
    want.sort_unstable();
    let mut got = Vec::new();
    idx.scan(&BASE.to_be_bytes(), want.len(), &mut |k, _| {
        got.push(int(k))
    })
    .await
    .map_err(|e| e.to_string())?;
    scanned_exactly(&got, &want)
}

#[test]
fn hex_keys_are_one_to_one_and_keep_the_order() {
    let ks = [
        0,
        1,
        0x10,
        0x100,
        BASE,
        BASE + 3,
        BASE + 0x10_000,
        1 << 40,
        u64::MAX - 1,
    ];
    for w in ks.windows(2) {
        assert!(hex(w[0]) < hex(w[1]), "{:x} {:x}", w[0], w[1]);
    }
    for k in ks {
        assert_eq!(unhex(&hex(k)), k);
    }
    assert_eq!(hex(0x10), b"000000000000001");
}

#[test]
fn bulk_loaded_string_tree_is_linearizable_and_complete() {
    let mut keys: Vec<(Vec<u8>, u64)> = (0..LOADED).map(|i| (hex(BASE + 3 * i), i)).collect();
    keys.sort();
    let (keys, nums): (Vec<Vec<u8>>, Vec<u64>) = keys.into_iter().unzip();
    assert!(
        keys.windows(2).any(|w| w[1].starts_with(&w[0])),
        "some loaded key is a prefix of another"
    );
    for seed in 1..=4 {
        let rec = Recorder::new((CLIENTS * OPS) as usize, (CLIENTS * OPS * 17) as usize);
        let errors = RefCell::new(Vec::<String>::new());
        let mut sim = Sim::new(sim_cfg(seed)).unwrap();
        let stats = run_on(&mut sim, 0, async |ctx| {
            let t = Smart::open(ctx.ep(), cfg()).await.unwrap();
            let mut val = |i: usize, v: &mut [u8]| {
                v[..8].copy_from_slice(&value(nums[i]));
                8
            };
            t.bulk_load(&keys, &mut val).await.unwrap()
        });
        println!("seed {seed}: {stats:?}");
        assert!(stats.nodes[0] > 0 && stats.keys == LOADED);
        let rec_r = &rec;
        spawn_lin_clients(&mut sim, &errors, |ctx, client, c| async move {
            let index = Hex(Smart::open(ctx.ep(), cfg())
                .await
                .map_err(|e| e.to_string())?);
            if c % 2 == 0 {
                index.0.warm_cache().await.map_err(|e| e.to_string())?;
            }
            let spec = LinSpec {
                cold: 32,
                ..LinSpec::new(client, OPS, seed, true)
            };
            lin_run(&index, &spec, rec_r, &ctx).await
        });
        assert_eq!(sim.run().unfinished, 0, "seed {seed}: clients stalled");
        assert!(
            errors.borrow().is_empty(),
            "seed {seed}: {:?}",
            errors.borrow()
        );
        let result = run_on(&mut sim, 1, async |ctx| {
            let idx = Hex(Smart::open(ctx.ep(), cfg())
                .await
                .map_err(|e| e.to_string())?);
            verify(&idx, 0).await?;
            for i in 0..LOADED / 2 {
                idx.upsert(&(BASE + 3 * i + 1).to_be_bytes(), &value(i))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            verify(&idx, LOADED / 2).await
        });
        drop(sim);
        result.unwrap();
        let h = rec.finish().expect("recorder sized for the workload");
        let report = check(&h, &CheckConfig::new(seed));
        println!("seed {seed}: {report}");
        assert!(report.is_ok(), "seed {seed}: {report}");
    }
}

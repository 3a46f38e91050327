//! Bulk-loaded trees (`sherman/bulk.rs`, `smart/bulk.rs`) on the simulated cluster: a tree is
//! bulk-loaded, then 16 clients run the linearizability workload on it (half of them with
//! their index cache warmed first, `warm_cache`; their keys lie above
//! the loaded ones, their scans start above them too, so the history checker sees only its
//! own keys while the tree's shape, splits and descents are the loaded ones); then every
//! loaded key is read back with its value, a scan returns them in order, inserts between
//! loaded keys split the loaded pages, and the whole set is read back again. Last, one byte of
//! a loaded value is flipped in the memory image: reading that key must fail, not return.
use remora_core::index::KvIndex;
use remora_core::lease::LeaseConfig;
use remora_core::lincheck::driver::LinSpec;
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_core::sherman::{PAPER_FILL_PERCENT, Sherman, ShermanConfig};
use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
use remora_poller::sim::{NodeImage, Sim, SimConfig};
use std::cell::RefCell;

#[path = "common/loaded_keys.rs"]
mod loaded_keys;
#[path = "common/sim_run.rs"]
mod sim_run;
use loaded_keys::{BASE, scanned_exactly, value};
use sim_run::{lin_run, run_on, spawn_lin_clients};

const CLIENTS: u64 = 16;
const OPS: u64 = 200;

fn key(i: u64) -> [u8; 8] {
    (BASE + 3 * i).to_be_bytes()
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

fn sherman_cfg() -> ShermanConfig {
    ShermanConfig {
        page_size: 256,
        lease: LeaseConfig {
            lease_ns: 1_000_000,
            deadline_ns: 20_000_000,
            ..LeaseConfig::default_lease()
        },
        ..ShermanConfig::sherman()
    }
}

fn smart_cfg() -> SmartConfig {
    SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8)
}

/// Every loaded key (and `extra` inserted ones) found with its value, and a scan from the
/// first returns exactly them, ascending.
async fn verify<I: KvIndex>(idx: &I, n: u64, extra: u64) -> Result<(), String> {
    let mut out = [0u8; 8];
    for i in 0..n {
        match idx
            .get(&key(i), &mut out)
            .await
            .map_err(|e| e.to_string())?
        {
            Some(8) if out == value(i) => {}
            other => return Err(format!("loaded key {i}: {other:?} {out:?}")),
        }
    }
    let mut want: Vec<u64> = (0..n).map(|i| BASE + 3 * i).collect();
    want.extend((0..extra).map(|i| BASE + 3 * i + 1));
    want.sort_unstable();
    let mut got = Vec::new();
    idx.scan(&key(0), want.len(), &mut |k, _| {
        got.push(u64::from_be_bytes(k.try_into().unwrap_or([0; 8])))
    })
    .await
    .map_err(|e| e.to_string())?;
    scanned_exactly(&got, &want)
}

/// Creates the index (`$open` on `$ep`), bulk-loads `$n` keys with `$load` (on `$idx`), runs
/// the lincheck clients, verifies, inserts between loaded keys, verifies again; returns the
/// memory images.
macro_rules! loaded_then_checked {
    ($seed:expr, $n:expr, |$ep:ident| $open:expr, |$idx:ident| $load:block) => {{
        let (seed, n): (u64, u64) = ($seed, $n);
        let loaded = RefCell::new(None);
        let rec = Recorder::new((CLIENTS * OPS) as usize, (CLIENTS * OPS * 17) as usize);
        let errors = RefCell::new(Vec::<String>::new());
        let mut sim = Sim::new(sim_cfg(seed)).unwrap();
        let c0 = sim.client(0).unwrap();
        sim.spawn_with(&c0, 0, |ctx| {
            let loaded = &loaded;
            async move {
                let $ep = ctx.ep();
                let $idx = $open.await.unwrap();
                let r = async $load.await.map_err(|e| e.to_string());
                *loaded.borrow_mut() = Some(r);
            }
        });
        assert_eq!(sim.run().unfinished, 0, "seed {seed}: the load did not finish");
        let stats = loaded.borrow_mut().take().expect("the load ran").unwrap();
        println!("seed {seed}: {stats:?}");
        let rec_r = &rec;
        spawn_lin_clients(&mut sim, &errors, |ctx, client, c| async move {
            let $ep = ctx.ep();
            let index = $open.await.map_err(|e| e.to_string())?;
            // Half the clients start with their cache filled as the load's inserts would
            // have left it (`warm_cache`), half cold.
            if c % 2 == 0 {
                index.warm_cache().await.map_err(|e| e.to_string())?;
            }
            let spec = LinSpec {
                cold: 32,
                ..LinSpec::new(client, OPS, seed, true)
            };
            lin_run(&index, &spec, rec_r, &ctx).await
        });
        assert_eq!(sim.run().unfinished, 0, "seed {seed}: clients stalled");
        assert!(errors.borrow().is_empty(), "seed {seed}: {:?}", errors.borrow());
        let result = run_on(&mut sim, 1, async |ctx| {
            let $ep = ctx.ep();
            let idx = $open.await.map_err(|e| e.to_string())?;
            verify(&idx, n, 0).await?;
            // Inserts between loaded keys: they split the loaded (80% full) pages.
            for i in 0..n / 2 {
                idx.upsert(&(BASE + 3 * i + 1).to_be_bytes(), &value(i))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            verify(&idx, n, n / 2).await
        });
        let images = sim.into_images();
        result.unwrap();
        let h = rec.finish().expect("recorder sized for the workload");
        let report = check(&h, &CheckConfig::new(seed));
        println!("seed {seed}: {report}");
        assert!(report.is_ok(), "seed {seed}: {report}");
        images
    }};
}

/// Flips the first byte after `pattern` (found exactly once in all images).
fn corrupt_after(images: &mut [NodeImage], pattern: &[u8]) {
    let mut hits = Vec::new();
    for (n, img) in images.iter().enumerate() {
        for (at, w) in img.host.windows(pattern.len()).enumerate() {
            if w == pattern {
                hits.push((n, at));
            }
        }
    }
    assert_eq!(
        hits.len(),
        1,
        "the pattern should be in one place: {hits:?}"
    );
    let (n, at) = hits[0];
    images[n].host[at + pattern.len()] ^= 0x5a;
}

/// Reads key `bad` (must fail) and key `good` (must be found) on a sim started from `images`.
macro_rules! corrupted_is_detected {
    ($images:expr, $bad:expr, $good:expr, |$ep:ident| $open:expr) => {{
        let mut sim = Sim::with_images(sim_cfg(9), $images).unwrap();
        let (bad, good, out) = run_on(&mut sim, 0, async |ctx| {
            let $ep = ctx.ep();
            let idx = $open.await.unwrap();
            let mut out = [0u8; 8];
            let bad = idx
                .get(&key($bad), &mut out)
                .await
                .map_err(|e| e.to_string());
            let good = idx
                .get(&key($good), &mut out)
                .await
                .map_err(|e| e.to_string());
            (bad, good, out)
        });
        drop(sim);
        assert!(
            bad.is_err(),
            "a corrupted loaded value was returned: {bad:?}"
        );
        println!("corrupted key: {}", bad.unwrap_err());
        assert_eq!(good, Ok(Some(8)));
        assert_eq!(out, value($good));
    }};
}

#[test]
fn bulk_loaded_sherman_is_linearizable_complete_and_checked() {
    let n = 3000;
    for seed in 1..=2 {
        let mut images =
            loaded_then_checked!(seed, n, |ep| Sherman::create(ep, sherman_cfg()), |idx| {
                let mut entry = |i, v: &mut [u8]| {
                    v[..8].copy_from_slice(&value(i));
                    (key(i), 8)
                };
                idx.bulk_load(n, PAPER_FILL_PERCENT, &mut entry).await
            });
        // Key 1 is second in the first leaf: never a separator. Entries keep keys little-endian.
        corrupt_after(&mut images, &(BASE + 3).to_le_bytes());
        corrupted_is_detected!(images, 1, n - 1, |ep| Sherman::open(ep, sherman_cfg()));
    }
}

#[test]
fn bulk_loaded_smart_is_linearizable_complete_and_checked() {
    let n = 3000u64;
    let keys: Vec<[u8; 8]> = (0..n).map(key).collect();
    let keys = &keys;
    for seed in 1..=2 {
        let mut images = loaded_then_checked!(seed, n, |ep| Smart::open(ep, smart_cfg()), |idx| {
            let mut val = |i: usize, v: &mut [u8]| {
                v[..8].copy_from_slice(&value(i as u64));
                8
            };
            idx.bulk_load(keys, &mut val).await
        });
        corrupt_after(&mut images, &key(1));
        corrupted_is_detected!(images, 1, n - 1, |ep| Smart::open(ep, smart_cfg()));
    }
}

#[test]
fn bulk_load_refuses_unsorted_keys_and_a_used_tree() {
    let mut sim = Sim::new(sim_cfg(3)).unwrap();
    let out = run_on(&mut sim, 0, async |ctx| {
        let ep = ctx.ep();
        let s = Sherman::create(ep, sherman_cfg()).await.unwrap();
        let down = s
            .bulk_load(10, 80, &mut |i, _| (key(10 - i), 0))
            .await
            .map(drop);
        s.upsert(&key(1), &value(1)).await.unwrap();
        let used = s.bulk_load(10, 80, &mut |i, _| (key(i), 0)).await.map(drop);
        let t = Smart::open(ep, smart_cfg()).await.unwrap();
        let keys = [key(2), key(1)];
        let unsorted = t.bulk_load(&keys, &mut |_, _| 0).await.map(drop);
        vec![
            down.map_err(|e| e.to_string()),
            used.map_err(|e| e.to_string()),
            unsorted.map_err(|e| e.to_string()),
        ]
    });
    drop(sim);
    assert_eq!(out.len(), 3);
    for r in out {
        assert!(r.is_err(), "{r:?}");
        println!("{}", r.unwrap_err());
    }
}

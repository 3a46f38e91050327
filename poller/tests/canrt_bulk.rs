//! CANRT bulk loading (core's `canrt/bulk.rs`) on the simulated cluster, both growth rules,
//! 8- and 16-byte keys:
//!
//! - a bulk-loaded tree holds exactly what an insert-grown tree of the same keys holds
//!   (every key's value, one scan over all of them in order), in the shape the growth rule
//!   gives (same key width, node size and height; split growth's nodes half full where
//!   inserts leave them half to fully used; the paper's geometry one node per character,
//!   none full);
//! - 16 clients then run the linearizability workload on it (their keys lie above the
//!   loaded ones, so the checker sees only its own keys while resizes move the loaded
//!   ones), the loaded keys are all read back, inserts between them grow the tree, and the
//!   whole set is read back again;
//! - a memory-node crash amid writes to a bulk-loaded tree loses no loaded key and no
//!   acknowledged write;
//! - a region that holds a tree, keys out of order and a value over the capacity are
//!   refused, with nothing published.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer, Growth};
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::{LinSpec, wide_key};
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_core::server::{Handler, LocalRegion};
use remora_layouts::canrt::{DataGeometry, FRONT_OFF, Meta, ROOT_SLOT, TreeHeader};
use remora_poller::sim::{NodeImage, Sim, SimConfig};
use std::cell::RefCell;

#[path = "common/crash_writes.rs"]
mod crash_writes;
#[path = "common/loaded_keys.rs"]
mod loaded_keys;
#[path = "common/mem_region.rs"]
mod mem_region;
#[path = "common/sim_run.rs"]
mod sim_run;
use crash_writes::{Writes, assert_recovered, scan_all, write_until_error};
use loaded_keys::{BASE, scanned_exactly, value};
use mem_region::on_image;
use sim_run::{lin_run, run_on, spawn_lin_clients};

const CLIENTS: u64 = 16;
const OPS: u64 = 200;

fn key(i: u64, key_len: u32) -> Vec<u8> {
    let k = BASE + 3 * i;
    match key_len {
        8 => k.to_be_bytes().to_vec(),
        _ => wide_key(k).to_vec(),
    }
}

fn canrt_cfg(key_len: u32) -> CanrtConfig {
    CanrtConfig {
        key_len,
        ..CanrtConfig::new(0)
    }
}

fn sim_cfg(seed: u64) -> SimConfig {
    SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 64 << 20,
        seed,
        ..SimConfig::default()
    }
}

/// The loaded pairs, sorted by key, as CANRT keys (big-endian integers).
fn pairs(n: u64, key_len: u32) -> Vec<(u128, Vec<u8>)> {
    let mut p: Vec<(u128, Vec<u8>)> = (0..n)
        .map(|i| {
            let k = key(i, key_len)
                .iter()
                .fold(0u128, |k, &b| k << 8 | b as u128);
            (k, value(i).to_vec())
        })
        .collect();
    p.sort_by_key(|x| x.0);
    p
}

fn geometry(key_len: u32) -> DataGeometry {
    let c = canrt_cfg(key_len);
    DataGeometry::new(c.slots, c.value_cap)
        .and_then(|g| g.with_key_len(key_len))
        .unwrap()
}

/// Memory images with the tree of `n` keys bulk-loaded (no cluster ran on them).
fn bulk_images(seed: u64, n: u64, key_len: u32, growth: Growth) -> Vec<NodeImage> {
    let mut images = Sim::new(sim_cfg(seed)).unwrap().into_images();
    let mut s = CanrtServer::with_growth(growth);
    on_image(&mut images[0].host, |img| {
        s.bulk_load(img, geometry(key_len), &pairs(n, key_len))
    })
    .unwrap();
    images
}

/// A cluster over `images`, its memory node's server recovered from the image first.
fn start<'a>(seed: u64, mut images: Vec<NodeImage>, growth: Growth) -> Sim<'a> {
    let mut server = CanrtServer::with_growth(growth);
    let said = on_image(&mut images[0].host, |img| {
        Handler::recover(&mut server, img)
    })
    .unwrap();
    assert!(said.contains("0 items replayed"), "{said}");
    let mut sim = Sim::with_images(sim_cfg(seed), images).unwrap();
    sim.set_handler(0, Box::new(server)).unwrap();
    sim
}

/// Every loaded key (and `extra` keys inserted between them) found with its value, and a
/// scan from the first returns exactly them, ascending; the scanned keys.
async fn verify<I: KvIndex>(
    idx: &I,
    n: u64,
    extra: u64,
    key_len: u32,
) -> Result<Vec<Vec<u8>>, String> {
    let mut out = [0u8; 8];
    for i in 0..n {
        match idx
            .get(&key(i, key_len), &mut out)
            .await
            .map_err(|e| e.to_string())?
        {
            Some(8) if out == value(i) => {}
            other => return Err(format!("loaded key {i}: {other:?} {out:?}")),
        }
    }
    let mut want: Vec<Vec<u8>> = (0..n).map(|i| key(i, key_len)).collect();
    want.extend((0..extra).map(|i| between(i, key_len)));
    want.sort_unstable();
    let mut got = Vec::new();
    idx.scan(&key(0, key_len), want.len(), &mut |k, _| {
        got.push(k.to_vec())
    })
    .await
    .map_err(|e| e.to_string())?;
    scanned_exactly(&got, &want)?;
    Ok(got)
}

/// A key between loaded keys `i` and `i + 1`.
fn between(i: u64, key_len: u32) -> Vec<u8> {
    let k = BASE + 3 * i + 1;
    match key_len {
        8 => k.to_be_bytes().to_vec(),
        _ => wide_key(k).to_vec(),
    }
}

/// A tree's shape read from a memory image: its header and the live items of each data
/// node, in data-node order.
fn shape(image: &mut Vec<u8>) -> (TreeHeader, Vec<u32>) {
    on_image(image, |img| {
        let h = CanrtServer::new().tree(img).unwrap();
        let fills = (0..h.n_data)
            .map(|id| {
                Meta(img.load_u64(h.data_node_off(id) + FRONT_OFF).unwrap())
                    .bitmap()
                    .count_ones()
            })
            .collect();
        (h, fills)
    })
}

/// The tree of `n` keys grown by one client's inserts (in a scrambled order), its shape and
/// what a scan of it returns.
fn inserted(n: u64, key_len: u32, growth: Growth) -> (TreeHeader, Vec<u32>, Vec<Vec<u8>>) {
    let mut sim = Sim::new(sim_cfg(7)).unwrap();
    sim.set_handler(0, Box::new(CanrtServer::with_growth(growth)))
        .unwrap();
    let out = run_on(&mut sim, 0, async |ctx| {
        let t = Canrt::open(ctx.ep(), canrt_cfg(key_len))
            .await
            .map_err(|e| e.to_string())?;
        // 7919 is prime, coprime to n: every key once, not in key order.
        for j in 0..n {
            let i = j * 7919 % n;
            t.upsert(&key(i, key_len), &value(i))
                .await
                .map_err(|e| e.to_string())?;
        }
        verify(&t, n, 0, key_len).await
    });
    let mut images = sim.into_images();
    let scanned = out.unwrap();
    let (h, fills) = shape(&mut images[0].host);
    (h, fills, scanned)
}

/// What a scan of the bulk-loaded tree returns (every key checked first), from a cluster
/// started over its image.
fn scanned_bulk(images: Vec<NodeImage>, n: u64, key_len: u32, growth: Growth) -> Vec<Vec<u8>> {
    let mut sim = start(11, images, growth);
    run_on(&mut sim, 2, async |ctx| {
        let t = Canrt::open(ctx.ep(), canrt_cfg(key_len))
            .await
            .map_err(|e| e.to_string())?;
        verify(&t, n, 0, key_len).await
    })
    .unwrap()
}

#[test]
fn a_bulk_loaded_tree_holds_what_inserts_grow_in_the_rule_s_shape() {
    let n = 3000;
    for growth in [Growth::Split, Growth::WholeLevel] {
        for key_len in [8, 16] {
            let (ih, ifill, iscan) = inserted(n, key_len, growth);
            let mut images = bulk_images(1, n, key_len, growth);
            let (bh, bfill) = shape(&mut images[0].host);
            let bscan = scanned_bulk(images, n, key_len, growth);
            let name = format!("{growth:?}, {key_len}-byte keys");
            println!(
                "{name}: inserted height {} nodes {} ({:.1} keys each), bulk height {} nodes {} \
                 ({:.1} keys each)",
                ih.height,
                ih.n_data,
                n as f64 / ih.n_data as f64,
                bh.height,
                bh.n_data,
                n as f64 / bh.n_data as f64
            );
            assert_eq!(iscan, bscan, "{name}: the two trees hold different keys");
            assert_eq!(iscan.len() as u64, n);
            assert_eq!(
                (bh.key_len, bh.slots, bh.value_cap, bh.data_node_size),
                (ih.key_len, ih.slots, ih.value_cap, ih.data_node_size),
                "{name}"
            );
            assert_eq!(bfill.iter().sum::<u32>() as u64, n, "{name}");
            assert_eq!(ifill.iter().sum::<u32>() as u64, n, "{name}");
            let slots = bh.slots;
            match growth {
                Growth::Split => {
                    // The rebuild's packing: half full at most, where inserts leave nodes
                    // half to fully used (splits since the last rebuild). Its prefix array
                    // is planned from the keys (a digit's keys never span two last-level
                    // characters), a split-grown one's from the nodes' key bounds: it may
                    // take a level more.
                    assert!(
                        bh.height >= ih.height && bh.height <= ih.height + 1,
                        "{name}"
                    );
                    assert!(
                        bfill.iter().all(|&f| f >= 1 && f <= slots / 2),
                        "{name}: {bfill:?}"
                    );
                    assert!(
                        bh.n_data >= ih.n_data,
                        "{name}: {} vs {} nodes",
                        bh.n_data,
                        ih.n_data
                    );
                }
                Growth::WholeLevel => {
                    // Every resize is a rebuild by the same rule: the same height.
                    assert_eq!(bh.height, ih.height, "{name}: heights differ");
                    // One node per character, none full; inserts may fill one to `slots`
                    // and gather keys of characters added since the last rebuild.
                    assert!(
                        bfill.iter().all(|&f| f >= 1 && f < slots),
                        "{name}: {bfill:?}"
                    );
                    assert!(ifill.iter().all(|&f| f <= slots), "{name}: {ifill:?}");
                    assert!(
                        bh.n_data >= ih.n_data,
                        "{name}: {} vs {}",
                        bh.n_data,
                        ih.n_data
                    );
                }
            }
        }
    }
}

/// Bulk-loads `n` keys, runs the lincheck clients on the tree, reads every loaded key back,
/// inserts between them and reads all back again.
fn loaded_then_checked(seed: u64, n: u64, key_len: u32, growth: Growth) {
    let images = bulk_images(seed, n, key_len, growth);
    let rec = Recorder::new((CLIENTS * OPS) as usize, (CLIENTS * OPS * 17) as usize);
    let errors = RefCell::new(Vec::<String>::new());
    let mut sim = start(seed, images, growth);
    let rec_r = &rec;
    spawn_lin_clients(&mut sim, &errors, |ctx, client, _| async move {
        let t = Canrt::open(ctx.ep(), canrt_cfg(key_len))
            .await
            .map_err(|e| e.to_string())?;
        let spec = LinSpec {
            cold: 32,
            key_len: key_len as usize,
            ..LinSpec::new(client, OPS, seed, true)
        };
        lin_run(&t, &spec, rec_r, &ctx).await
    });
    assert_eq!(sim.run().unfinished, 0, "seed {seed}: clients stalled");
    assert!(
        errors.borrow().is_empty(),
        "seed {seed}: {:?}",
        errors.borrow()
    );
    let result = run_on(&mut sim, 1, async |ctx| {
        let t = Canrt::open(ctx.ep(), canrt_cfg(key_len))
            .await
            .map_err(|e| e.to_string())?;
        verify(&t, n, 0, key_len).await?;
        for i in 0..n / 2 {
            t.upsert(&between(i, key_len), &value(i))
                .await
                .map_err(|e| e.to_string())?;
        }
        verify(&t, n, n / 2, key_len).await.map(drop)
    });
    drop(sim);
    result.unwrap();
    let h = rec.finish().expect("recorder sized for the workload");
    let report = check(&h, &CheckConfig::new(seed));
    println!("{growth:?}, {key_len}-byte keys, seed {seed}: {report}");
    assert!(report.is_ok(), "seed {seed}: {report}");
    assert!(report.scans > 20, "{report}");
}

#[test]
fn a_bulk_loaded_tree_is_linearizable_and_grows() {
    for seed in 1..=2 {
        loaded_then_checked(seed, 3000, 8, Growth::Split);
        loaded_then_checked(seed, 3000, 16, Growth::WholeLevel);
    }
}

#[test]
fn bulk_load_refuses_a_used_region_unsorted_keys_and_long_values() {
    let g = geometry(8);
    let mut images = Sim::new(sim_cfg(3)).unwrap().into_images();
    on_image(&mut images[0].host, |img| refusals(img, g));
}

/// The refusals of [`bulk_load_refuses_a_used_region_unsorted_keys_and_long_values`] on the
/// unused region `img`.
fn refusals(img: &mem_region::MemRegion, g: DataGeometry) {
    let mut p = pairs(100, 8);
    p.swap(3, 4);
    let unsorted = CanrtServer::new().bulk_load(img, g, &p);
    let mut long = pairs(100, 8);
    long[7].1 = vec![1u8; g.value_cap as usize + 1];
    let too_long = CanrtServer::new().bulk_load(img, g, &long);
    // Nothing published by either.
    assert_eq!(
        img.load_u64(remora_layouts::region::root_offset(ROOT_SLOT))
            .unwrap(),
        0
    );
    CanrtServer::new()
        .bulk_load(img, g, &pairs(100, 8))
        .unwrap();
    let twice = CanrtServer::new().bulk_load(img, g, &pairs(100, 8));
    for r in [unsorted, too_long, twice] {
        let e = r.expect_err("refused");
        println!("{e}");
    }
}

/// A persistent memory node holding a bulk-loaded tree crashes in the middle of 8 writers'
/// upserts (resizes of the loaded tree included); recovery on its image, then a fresh
/// cluster on it: every loaded key keeps its value, every acknowledged write is there, and
/// nothing else but the writes in flight.
#[test]
fn a_memory_node_crash_on_a_bulk_loaded_tree_loses_nothing() {
    let n = 2000u64;
    for growth in [Growth::Split, Growth::WholeLevel] {
        // The paper's growth rebuilds the whole tree at each resize: later crashes.
        let points = match growth {
            Growth::Split => [(1u64, 700_000u64), (2, 3_000_000)],
            Growth::WholeLevel => [(1, 3_000_000), (2, 8_000_000)],
        };
        for (seed, crash_ns) in points {
            let cfg = SimConfig {
                compute_nodes: 2,
                persistent: true,
                faults: remora_poller::sim::Faults::none().crash_node_at(0, crash_ns),
                ..sim_cfg(seed)
            };
            let mut images = Sim::new(cfg.clone()).unwrap().into_images();
            on_image(&mut images[0].host, |img| {
                CanrtServer::with_growth(growth).bulk_load(img, geometry(8), &pairs(n, 8))
            })
            .unwrap();
            let logs = RefCell::new(vec![Writes::default(); 8]);
            let mut sim = Sim::with_images(cfg.clone(), images).unwrap();
            sim.set_handler(0, Box::new(CanrtServer::with_growth(growth)))
                .unwrap();
            for c in 0..8u64 {
                let ctx = sim.client((c % 2) as usize).unwrap();
                let logs = &logs;
                sim.spawn_with(&ctx, 0, move |ctx| async move {
                    let Ok(t) = Canrt::open(ctx.ep(), canrt_cfg(8)).await else {
                        return;
                    };
                    // Below every loaded key.
                    if let Err(e) = write_until_error(&t, c, 61, logs).await {
                        eprintln!("writer {c}: {e}");
                    }
                });
            }
            assert_eq!(sim.run().unfinished, 0, "seed {seed}: writers hung");
            let mut images = sim.into_images();
            let acked: usize = logs.borrow().iter().map(|l| l.acked.len()).sum();
            assert!(acked > 50, "seed {seed}: only {acked} keys written");
            let mut server = CanrtServer::with_growth(growth);
            let report = on_image(&mut images[0].host, |img| server.recover(img)).unwrap();
            let cfg = SimConfig {
                faults: remora_poller::sim::Faults::none(),
                ..cfg
            };
            let mut sim = Sim::with_images(cfg, images).unwrap();
            sim.set_handler(0, Box::new(server)).unwrap();
            let mut found = run_on(&mut sim, 0, async |ctx| {
                let t = Canrt::open(ctx.ep(), canrt_cfg(8)).await.unwrap();
                scan_all(&t).await
            });
            drop(sim);
            for i in 0..n {
                assert_eq!(
                    found.remove(&(BASE + 3 * i)),
                    Some(u64::from_le_bytes(value(i))),
                    "{growth:?} seed {seed}: loaded key {i}"
                );
            }
            assert_recovered(&logs.borrow(), &found, &format!("{growth:?} seed {seed}"));
            println!(
                "{growth:?} seed {seed}: crash at {crash_ns} ns after {acked} acknowledged keys; \
                 recovery {report:?}"
            );
        }
    }
}

//! `--factors`: each technique added in turn, and the in-memory baselines (`--with-local`).

use super::*;

/// YCSB-C on the same keys and distribution against an in-memory map on this thread:
/// `insert(key, n)` loads it, `get(key)` reads; throughput in Mops.
pub(super) fn in_memory_c(
    a: &BenchArgs,
    ops: u64,
    insert: &mut dyn FnMut(&[u8], u64),
    get: &dyn Fn(&[u8]) -> u64,
) -> f64 {
    let mut key = [0u8; 32];
    for n in 0..a.records {
        let kl = key_of(a.keys, n, &mut key);
        insert(&key[..kl], n);
    }
    let mut rng = Rng::new(a.sim.seed);
    let mut chooser = KeyChooser::over(
        a.distribution.unwrap_or(Distribution::Zipfian),
        a.records,
        a.theta,
        a.zipf_items,
    );
    let clock = Clock::get();
    let t0 = clock.now_ns();
    let mut sum = 0u64;
    for _ in 0..ops {
        let n = chooser.next(&mut rng, a.records);
        let kl = key_of(a.keys, n, &mut key);
        sum = sum.wrapping_add(get(&key[..kl]));
    }
    let secs = (clock.now_ns() - t0) as f64 / 1e9;
    std::hint::black_box(sum);
    ops as f64 / secs / 1e6
}

/// std BTreeMap (values of `--value-size` bytes).
pub(super) fn btreemap_c(a: &BenchArgs, ops: u64) -> f64 {
    let map = std::cell::RefCell::new(BTreeMap::<Vec<u8>, Vec<u8>>::new());
    let mut val = vec![0u8; a.value_size];
    in_memory_c(
        a,
        ops,
        &mut |k, n| {
            value_for(n, a.value_size, &mut val);
            map.borrow_mut().insert(k.to_vec(), val.clone());
        },
        &|k| map.borrow().get(k).map_or(0, |v| v[0] as u64),
    )
}

/// congee, an in-memory concurrent ART (8-byte integer keys, usize values).
pub(super) fn art_c(a: &BenchArgs, ops: u64) -> Result<f64, String> {
    if a.keys == KeyType::String {
        return Err("--compare-art needs --keys int (congee takes 8-byte keys)".into());
    }
    let art: congee::Congee<usize, usize> = congee::Congee::default();
    let guard = art.pin();
    let k64 = |k: &[u8]| u64::from_be_bytes(k.try_into().unwrap_or([0; 8])) as usize;
    Ok(in_memory_c(
        a,
        ops,
        &mut |k, n| {
            let _ = art.insert(k64(k), n as usize, &guard);
        },
        &|k| art.get(&k64(k), &guard).unwrap_or(0) as u64,
    ))
}

/// (Mops, round trips per op, p50 ns, p99 ns) of one workload.
pub(super) type FactorCell = (f64, f64, f64, f64);

/// Runs LOAD and `workload` with `index` on the chosen fabric.
pub(super) fn run_phases(
    a: &BenchArgs,
    index: &IndexCfg,
    workload: Workload,
) -> Result<Vec<BenchRecord>, String> {
    match a.fabric {
        FabricKind::Soft => soft::run(a, index, workload),
        FabricKind::Sim => sim::run(a, index, workload),
        FabricKind::Verbs => verbs::run(a, index, workload),
    }
}

/// The factor analysis: one technique added per row.
pub(crate) fn factor_steps(a: &BenchArgs) -> Result<Vec<(&'static str, IndexCfg)>, String> {
    let mut steps = Vec::new();
    match a.index {
        IndexKind::Smart => {
            let mut t = Techniques::BASELINE;
            t.cache = true;
            let names = [
                "ART baseline (+cache)",
                "+ lock-free internal",
                "+ in-place leaf",
                "+ rear lock",
                "+ delegation",
                "+ combining",
            ];
            // The steps before the rear lock take their locks in the authors' on-chip table
            // (dmemsys/SMART: every lock of those steps is a hashed 1-bit lock in NIC
            // device memory; `onchip.rs`), unless --factor-locks host.
            let chip = match a.smart.factor_locks {
                FactorLocks::Onchip => scaled_onchip_locks(a.records),
                FactorLocks::Host => 0,
            };
            for (i, name) in names.iter().enumerate() {
                match i {
                    1 => t.lock_free_internal = true,
                    2 => t.in_place_leaf = true,
                    3 => t.rear_lock = true,
                    4 => t.delegation = true,
                    5 => t.combining = true,
                    _ => {}
                }
                let mut cfg = smart_config(a, t);
                // The in-place steps hand leaf locks over between a compute node's clients
                // as the authors' do (on where `SmartConfig::leaf_handover_on`: in-place
                // leaves, no write combining), unless --factor-no-leaf-handover.
                cfg.leaf_handover = !a.smart.factor_no_leaf_handover;
                if !t.rear_lock {
                    cfg.onchip_locks = chip;
                }
                steps.push((*name, IndexCfg::Smart { cfg, t }));
            }
        }
        IndexKind::Canrt
        | IndexKind::Erda
        | IndexKind::ErdaRedo
        | IndexKind::ErdaRaw
        | IndexKind::Catfish
        | IndexKind::Wort
        | IndexKind::Woart => {
            return Err(
                "--factors: CANRT, Erda (and its baselines), Catfish, WORT and WOART have no technique switches yet"
                    .into(),
            );
        }
        IndexKind::Chime => {
            // CHIME's Fig. 15a order, at one cache size (the flags'); Sherman first.
            let IndexCfg::Chime { cfg } = index_cfg(a)? else {
                return Err("--factors: CHIME's configuration".into());
            };
            let bytes = cfg.sherman.cache_bytes + cfg.hotspot_bytes;
            let names = [
                "Sherman",
                "+ hopscotch leaf (+ replicated metadata)",
                "+ vacancy-aware lock",
                "+ speculative read",
            ];
            for (i, name) in names.iter().enumerate() {
                let c = ChimeConfig {
                    hopscotch: i >= 1,
                    vacancy_lock: i >= 2,
                    speculative: i >= 3,
                    ..cfg
                }
                .with_cache_for(bytes, a.records);
                steps.push((*name, IndexCfg::Chime { cfg: c }));
            }
        }
        IndexKind::Sherman | IndexKind::FgPlus => {
            let mut c = ShermanConfig {
                page_size: a.sherman.page_size,
                value_size: a.value_size,
                ..ShermanConfig::fg_plus()
            };
            let names = [
                "FG+",
                "+ on-chip lock",
                "+ hierarchical lock",
                "+ combination",
                "+ two-level version",
            ];
            for (i, name) in names.iter().enumerate() {
                match i {
                    1 => c.onchip_locks = true,
                    2 => c.hierarchical_locks = true,
                    3 => c.combine_commands = true,
                    4 => c.two_level_versions = true,
                    _ => {}
                }
                steps.push((*name, IndexCfg::Sherman { cfg: c, name }));
            }
        }
    }
    Ok(steps)
}

pub(super) fn factors(a: &BenchArgs) -> Result<Vec<BenchRecord>, String> {
    let steps = factor_steps(a)?;
    let workloads = if a.workloads.is_empty() {
        vec![
            Workload::Load,
            Workload::A,
            Workload::B,
            Workload::C,
            Workload::D,
        ]
    } else {
        a.workloads.clone()
    };
    let mut all = Vec::new();
    let mut table: Vec<(String, Vec<FactorCell>)> = Vec::new();
    for (name, cfg) in &steps {
        let mut row = Vec::new();
        for &w in &workloads {
            let mut recs = run_phases(a, cfg, w)?;
            meta::annotate(a, &mut recs)?;
            for r in &mut recs {
                // The step gets its own field; `index` stays the index's name.
                r.run.step = Some(name.to_string());
                r.index = format!("{:?}", a.index).to_lowercase();
            }
            let r = recs.last().cloned().ok_or("no record")?;
            row.push((
                r.mops,
                r.per_op.round_trips,
                r.latency.p50_ns,
                r.latency.p99_ns,
            ));
            all.extend(recs);
        }
        table.push((name.to_string(), row));
    }
    if a.silent {
        return Ok(all);
    }
    let shape = match a.fabric {
        FabricKind::Sim => format!(
            "sim cluster {} compute nodes x {} clients x {} coroutines, {} memory nodes, seed {}",
            a.sim.compute_nodes,
            a.sim.clients_per_node,
            a.coroutines,
            a.sim.memory_nodes,
            a.sim.seed
        ),
        f => format!(
            "{} fabric, {} threads x {} coroutines",
            if f == FabricKind::Verbs {
                "verbs"
            } else {
                "soft"
            },
            a.threads,
            a.coroutines
        ),
    };
    println!(
        "factor analysis, {:?}: {shape}; {} records, {:?} keys, {:?} θ={}",
        a.index,
        a.records,
        a.keys,
        a.distribution.unwrap_or(Distribution::Zipfian),
        a.theta
    );
    print!("{:<24}", "configuration");
    for w in &workloads {
        print!(" {:>30}", format!("{} Mops (RT/op, p50/p99 µs)", w.name()));
    }
    println!();
    for (name, row) in &table {
        print!("{name:<24}");
        for (m, rt, p50, p99) in row {
            print!(
                " {:>30}",
                format!("{m:.3} ({rt:.2}, {:.1}/{:.1})", p50 / 1e3, p99 / 1e3)
            );
        }
        println!();
    }
    Ok(all)
}

//! The index configuration and memory-node region size a bench run derives from its flags.

use super::*;
use remora::core::lease::LeaseConfig;

/// The index under test, from the flags.
pub(super) fn index_cfg(a: &BenchArgs) -> Result<IndexCfg, String> {
    match a.index {
        IndexKind::Smart => {
            let t = a.smart.techniques()?;
            Ok(IndexCfg::Smart {
                cfg: smart_config(a, t),
                t,
            })
        }
        IndexKind::Sherman | IndexKind::FgPlus => {
            let base = if a.index == IndexKind::FgPlus {
                ShermanConfig::fg_plus()
            } else {
                ShermanConfig::sherman()
            };
            let f = &a.sherman;
            let cfg = ShermanConfig {
                page_size: f.page_size,
                value_size: a.value_size,
                onchip_locks: base.onchip_locks && !f.no_onchip,
                hierarchical_locks: base.hierarchical_locks && !f.no_hierarchical,
                combine_commands: base.combine_commands && !f.no_combination,
                two_level_versions: base.two_level_versions && !f.no_two_level,
                index_cache: !a.smart.no_cache,
                cache_bytes: (a.smart.cache_mib * (1 << 20) as f64) as usize,
                handover_cap: f.handover_cap.unwrap_or(base.handover_cap),
                spin_locks: spin_locks(a, base.spin_locks),
                lease: lease_with(a, base.lease),
                ..base
            };
            Ok(IndexCfg::Sherman {
                cfg,
                name: if a.index == IndexKind::FgPlus {
                    "fg+"
                } else {
                    "sherman"
                },
            })
        }
        IndexKind::Chime => {
            let f = &a.sherman;
            let base = ChimeConfig::chime();
            let cfg = ChimeConfig {
                sherman: ShermanConfig {
                    page_size: f.page_size,
                    value_size: a.value_size,
                    onchip_locks: !f.no_onchip,
                    hierarchical_locks: !f.no_hierarchical,
                    combine_commands: !f.no_combination,
                    two_level_versions: !f.no_two_level,
                    index_cache: !a.smart.no_cache,
                    cache_upper_levels: !f.no_cache_upper,
                    handover_cap: f.handover_cap.unwrap_or(base.sherman.handover_cap),
                    spin_locks: spin_locks(a, base.sherman.spin_locks),
                    lease: lease_with(a, base.sherman.lease),
                    ..base.sherman
                },
                hopscotch: !f.no_hopscotch,
                vacancy_lock: !f.no_vacancy_lock,
                speculative: !f.no_speculative,
                combine_latest: !a.smart.no_combine_latest,
                ..base
            }
            .with_cache_for((a.smart.cache_mib * (1 << 20) as f64) as usize, a.records);
            Ok(IndexCfg::Chime {
                cfg: chime_with(cfg, &a.smart.with)?,
            })
        }
        IndexKind::Canrt => Ok(IndexCfg::Canrt {
            cfg: CanrtConfig {
                // Capacities are multiples of 8: a 15-byte value (the paper's) takes 16.
                value_cap: (a.value_size as u32).next_multiple_of(8),
                key_len: if a.keys == KeyType::String { 16 } else { 8 },
                turn_notices: !a.canrt_poll,
                ack: match a.canrt_ack {
                    CanrtAck::Applied => WriteAck::Applied,
                    CanrtAck::Posted => WriteAck::Posted,
                },
                scan_batch: a
                    .canrt_scan_batch
                    .unwrap_or(remora::core::canrt::SCAN_BATCH as u32),
                slots: a.canrt_slots.unwrap_or(CanrtConfig::new(0).slots),
                ..CanrtConfig::new(0)
            },
            growth: match a.canrt_growth {
                CanrtGrowth::Split => Growth::Split,
                CanrtGrowth::WholeLevel => Growth::WholeLevel,
            },
        }),
        IndexKind::Catfish => Err("Catfish is not a key-value index: see bench/spatial.rs".into()),
        IndexKind::Wort => Ok(IndexCfg::Wort { kind: Kind::Wort }),
        IndexKind::Woart => Ok(IndexCfg::Wort { kind: Kind::Woart }),
        IndexKind::Erda => Ok(IndexCfg::Erda {
            server: erda_geometry(a),
            client: ErdaClientConfig {
                value_size: a.value_size,
                ..ErdaClientConfig::default()
            },
        }),
        IndexKind::ErdaRedo | IndexKind::ErdaRaw => Ok(IndexCfg::ErdaBaseline {
            scheme: if a.index == IndexKind::ErdaRedo {
                Scheme::Redo
            } else {
                Scheme::Raw
            },
            server: erda_geometry(a),
            client: ErdaClientConfig {
                value_size: a.value_size,
                ..ErdaClientConfig::default()
            },
        }),
    }
}

/// `--lock-wait` of a run: `auto` keeps the index's own (`base`).
fn spin_locks(a: &BenchArgs, base: bool) -> bool {
    match a.smart.lock_wait {
        LockWait::Auto => base,
        LockWait::Spin => true,
        LockWait::Backoff => false,
    }
}

/// `--lock-max-backoff-ns` of a run: the longest pause of a lock wait.
fn lease_with(a: &BenchArgs, mut lease: LeaseConfig) -> LeaseConfig {
    if let Some(ns) = a.smart.lock_max_backoff_ns {
        lease.max_backoff_ns = ns;
    }
    lease
}

/// CHIME's `--with`: SMART's read delegation and write combining on CHIME (on in the
/// authors' build, dmemsys/CHIME `exp/params/common.json`; off in `ChimeConfig::chime()`).
pub(crate) fn chime_with(mut cfg: ChimeConfig, with: &[String]) -> Result<ChimeConfig, String> {
    for w in with {
        if !cfg.turn_on(w) {
            return Err(format!(
                "--with {w}: CHIME (--index chime) takes {} (SMART's per-compute-node read \
                 delegation and write combining, leaf merges, lean updates, and prefix-free \
                 writes)",
                ChimeConfig::IDEAS.join(", ")
            ));
        }
    }
    Ok(cfg)
}

/// An Erda store sized for the run: 8 buckets per record (keys take the first free bucket of
/// their 8-bucket neighbourhood; there is no hopscotch displacement yet, so the table is kept
/// sparse), 64 KiB segments, and logs sized for the live data, not for every write: each
/// head is 3 regions of twice its share of the records, and log cleaning starts after half a
/// region of appends (so a `--seconds` run never fills the log: cleaning frees what updates
/// make stale, and a full region chains the next). A run of `--operations` without
/// `--erda-clean` gets regions large enough that it never starts a cleaning.
pub(super) fn erda_geometry(a: &BenchArgs) -> ErdaConfig {
    let object = 64u64 + a.value_size as u64;
    let segment = 64u64 << 10;
    let heads = 2u64;
    let regions = 3u64;
    // Keys go to a head by their first writer's client id, so one head may hold every live
    // key: each region can, counted in whole segments (an object never spans one: at 1 KiB
    // values a 64 KiB segment holds 60 objects, 4 % of it is left over), and a half more:
    // a cleaning copies every live object into its target region while clients go on
    // appending there (about one object per 64 work units of the cleaner: a few thousand
    // appends while it merges and sweeps the table). A region of only the live bytes
    // overflowed into the ring's last free region and the next cleaning found none:
    // `LogFull` at 1 KiB values (2,000 records, update-only).
    let live = a.records.div_ceil((segment / object).max(1)) * segment;
    let live = (live + live / 2 + 4 * segment)
        .next_multiple_of(segment)
        .max(2 << 20);
    // Without --erda-clean, a fixed-count run (not --seconds) never cleans: every append of
    // the run (as if all went to one head) stays under 70 % of the threshold (half a
    // region), below the 75 % where the server starts zeroing the next region ahead.
    let region = if a.erda_clean || a.seconds.is_some() {
        live
    } else {
        let ops = a.operations.unwrap_or(a.records);
        let appends = (a.records + a.warmup + ops) * object;
        live.max((appends * 2 * 10 / 7).next_multiple_of(segment))
    };
    ErdaConfig {
        heads: heads as u32,
        buckets: (8 * a.records).next_power_of_two().max(1 << 14),
        segment_bytes: segment,
        head_bytes: regions * region,
        regions: regions as u32,
        clean_permille: 500,
        ..ErdaConfig::small()
    }
}

/// Bytes of the memory node's region for this run: what the index needs for the records and
/// every write of the run (no index frees memory back to the node), with room to spare, or
/// `--region-mib`.
pub(crate) fn region_bytes(a: &BenchArgs) -> u64 {
    if let Some(m) = a.region_mib {
        return m << 20;
    }
    let ops = match (a.operations, a.seconds) {
        (Some(o), _) => o,
        // A timed run: a generous guess (about 10 s of a fast soft run's writes).
        (None, Some(s)) => (s * 2e6) as u64,
        (None, None) => a.records,
    };
    let writes = a.records + ops;
    // A leaf or entry, its share of internal nodes, the allocator's slack: 4x the record.
    let per = 4 * (a.value_size as u64 + 64 + 32);
    let erda = {
        let g = erda_geometry(a);
        g.heads as u64 * g.head_bytes + g.buckets * 64 + (8 << 20)
    };
    let want = (writes * per).max(if a.index.is_erda() { erda } else { 0 });
    // Every client carves its objects from chunks of its own, per size class: slack per
    // client, spread over the memory nodes.
    let clients = match a.fabric {
        FabricKind::Sim => (a.sim.compute_nodes * a.sim.clients_per_node) as u64,
        _ => a.threads as u64,
    };
    let per_node = want / a.sim.memory_nodes.max(1) as u64 + clients * (8 << 20);
    (per_node + (32 << 20))
        .next_multiple_of(1 << 20)
        .clamp(64 << 20, 1 << 40)
}

pub(super) fn smart_config(a: &BenchArgs, t: Techniques) -> SmartConfig {
    let mode = match a.keys {
        KeyType::Int | KeyType::Seq => KeyMode::Fixed(8),
        KeyType::String => KeyMode::Variable,
    };
    let mut cfg = SmartConfig::new(t, mode, a.value_size);
    cfg.cache_mib = a.smart.cache_mib;
    cfg.onchip_locks = a.smart.onchip_locks;
    cfg.leaf_handover = a.smart.leaf_handover;
    cfg.spin_locks = spin_locks(a, cfg.spin_locks);
    cfg.lease = lease_with(a, cfg.lease);
    cfg.combine_latest = !a.smart.no_combine_latest;
    cfg
}

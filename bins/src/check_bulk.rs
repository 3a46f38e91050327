//! `remora check --linearizability --bulk-load N` (issue 25: "the linearizability checker
//! then runs on bulk-loaded trees too"): before the clients start, the tree is bulk-loaded
//! with `N` keys, as `remora bench` loads it: SMART's, Sherman's/FG+'s and CHIME's by one
//! client through the fabric (core's `smart/bulk.rs`, `sherman/bulk.rs`, Sherman's pages
//! `PAPER_FILL_PERCENT` full, `chime/bulk.rs`, CHIME's leaves as random inserts fill them:
//! `bench/bulk_chime.rs`), CANRT's by its memory node's server into the region image
//! (`bench/bulk_canrt.rs`), which the server then recovers from, and Erda's store the same
//! way (its server's write path, `bench/bulk_erda.rs`). The loaded keys lie below
//! every key of the lincheck workload (its cold keys are `client << 40 | x`, its hot keys
//! above those, and its scans start there), so the history checker sees only its own keys
//! while the clients descend, split and resize the loaded tree. After the workload, one
//! client reads every loaded key back: each must still hold its loaded value.
//!
//! The indexes with a bulk loader wired here: SMART (8-byte keys), Sherman, FG+ and CHIME,
//! on the sim and on soft (loaded by a client through the fabric), and CANRT (8- or 16-byte
//! keys) and Erda (8-byte keys, the lincheck's for it) on the sim only (built into the memory
//! node's image, and the soft fabric's node is created empty). WORT's and WOART's loaders take keys of
//! `bench/bulk_wort.rs`'s own type.
use crate::args::FabricKind;
use crate::bench::bulk_canrt::{CanrtPlan, build, recover};
use crate::bench::bulk_chime::leaf_fill;
use crate::bench::index::{Handle, IndexCfg};
use remora::core::chime::INTERNAL_FILL_PERCENT;
use remora::core::fabric::Endpoint;
use remora::core::index::KvIndex;
use remora::core::lincheck::driver::wide_key;
use remora::core::server::Handler;
use remora::core::sherman::PAPER_FILL_PERCENT;
use remora::core::smart::KeyMode;
use remora::poller::sim::{NodeImage, SimConfig};

/// Loaded key `i` is the integer `LOADED_BASE + 3 * i` (below the lincheck workload's keys,
/// which start at `1 << 40`).
pub const LOADED_BASE: u64 = 1 << 32;

/// The most keys `--bulk-load` takes: all below `1 << 40`.
pub const MAX_LOADED: u64 = ((1 << 40) - LOADED_BASE) / 3;

/// Loaded key `i`, `key_bytes` (8 or 16) long: big-endian, or the workload's wide form.
pub fn loaded_key(i: u64, key_bytes: usize) -> Vec<u8> {
    let k = LOADED_BASE + 3 * i;
    match key_bytes {
        16 => wide_key(k).to_vec(),
        _ => k.to_be_bytes().to_vec(),
    }
}

/// Loaded key `i`'s value (8 bytes, never the workload's: its values are tagged).
pub fn loaded_value(i: u64) -> [u8; 8] {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_le_bytes()
}

/// Refuses `--bulk-load n` where it cannot run: a fabric other than the sim (soft too for
/// the trees a client loads), more keys than fit below the workload's, or an index without
/// a bulk loader here.
pub fn refuse(cfg: &IndexCfg, fabric: FabricKind, n: u64) -> Result<(), String> {
    if n == 0 {
        return Ok(());
    }
    let soft_ok = fabric == FabricKind::Soft && !server_built(cfg);
    if fabric != FabricKind::Sim && !soft_ok {
        return Err(format!(
            "--bulk-load: {} only with --fabric sim",
            cfg.index_name()
        ));
    }
    if n > MAX_LOADED {
        return Err(format!("--bulk-load: at most {MAX_LOADED} keys"));
    }
    match cfg {
        IndexCfg::Smart { cfg, .. } if cfg.key_mode == KeyMode::Fixed(8) => Ok(()),
        IndexCfg::Sherman { .. }
        | IndexCfg::Chime { .. }
        | IndexCfg::Canrt { .. }
        | IndexCfg::Erda { .. } => Ok(()),
        _ => Err(format!(
            "--bulk-load: {} has no bulk loader here (smart, sherman, fg-plus, chime, canrt and \
             erda have)",
            cfg.index_name()
        )),
    }
}

/// Whether `cfg`'s index is built into the memory node's image (CANRT, Erda), not by a
/// client.
pub fn server_built(cfg: &IndexCfg) -> bool {
    matches!(cfg, IndexCfg::Canrt { .. } | IndexCfg::Erda { .. })
}

/// Builds CANRT's tree or Erda's store of `n` loaded keys into `images` and recovers
/// `server` from it; a one-line summary.
pub fn build_image(
    cfg: &IndexCfg,
    images: &mut [NodeImage],
    sim: &SimConfig,
    server: &mut (dyn Handler + Send),
    n: u64,
    key_bytes: usize,
) -> Result<String, String> {
    let said = match cfg {
        IndexCfg::Erda { server, .. } => {
            let entries = (0..n).map(|i| (loaded_key(i, key_bytes), loaded_value(i)));
            let st = crate::bench::bulk_erda::write(*server, images, sim, entries)?;
            format!(
                "Erda: {} keys bulk-loaded, {} entries displaced",
                st.keys, st.displaced
            )
        }
        _ => {
            let pairs = (0..n)
                .map(|i| {
                    let k = loaded_key(i, key_bytes);
                    let k = k.iter().fold(0u128, |k, &b| k << 8 | b as u128);
                    (k, loaded_value(i).to_vec())
                })
                .collect();
            build(cfg, images, sim, &CanrtPlan { pairs, sort_s: 0.0 })?
        }
    };
    recover(server, images, 0)?;
    Ok(said)
}

/// Bulk-loads `n` keys through `h`, a handle on the index just created (before any other
/// handle opens it): SMART's, Sherman's and CHIME's loaders; a one-line summary.
pub async fn client_load<E: Endpoint>(h: &Handle<'_, E>, n: u64) -> Result<String, String> {
    let value = |i: u64, out: &mut [u8]| {
        out[..8].copy_from_slice(&loaded_value(i));
        8
    };
    match h {
        Handle::Smart(s) => {
            let keys: Vec<Vec<u8>> = (0..n).map(|i| loaded_key(i, 8)).collect();
            let mut val = |i: usize, out: &mut [u8]| value(i as u64, out);
            let st = s
                .bulk_load(&keys, &mut val)
                .await
                .map_err(|e| format!("bulk load: {e}"))?;
            Ok(format!("SMART: {} keys bulk-loaded", st.keys))
        }
        Handle::Sherman(s) => {
            let mut entry = |i: u64, out: &mut [u8]| {
                let mut k = [0u8; 8];
                k.copy_from_slice(&loaded_key(i, 8));
                (k, value(i, out))
            };
            let st = s
                .bulk_load(n, PAPER_FILL_PERCENT, &mut entry)
                .await
                .map_err(|e| format!("bulk load: {e}"))?;
            Ok(format!(
                "Sherman: {} keys bulk-loaded, pages {PAPER_FILL_PERCENT}% full: {} leaves, \
                 height {}",
                st.keys,
                st.leaves,
                st.height + 1
            ))
        }
        Handle::Chime(c) => {
            let mut entry = |i: u64, out: &mut [u8]| {
                let mut k = [0u8; 8];
                k.copy_from_slice(&loaded_key(i, 8));
                (k, value(i, out))
            };
            let fill = leaf_fill(c);
            let st = c
                .bulk_load(n, fill, INTERNAL_FILL_PERCENT, &mut entry)
                .await
                .map_err(|e| format!("bulk load: {e}"))?;
            Ok(format!(
                "CHIME: {} keys bulk-loaded, leaves {fill}% full: {} leaves, height {}",
                st.tree.keys,
                st.tree.leaves,
                st.tree.height + 1
            ))
        }
        _ => Err("this index has no bulk loader here".into()),
    }
}

/// Reads every one of the `n` loaded keys back through `h`: each must hold its value.
pub async fn read_back<E: Endpoint>(
    h: &Handle<'_, E>,
    n: u64,
    key_bytes: usize,
) -> Result<(), String> {
    let mut out = [0u8; 64];
    for i in 0..n {
        let got = h.get(&loaded_key(i, key_bytes), &mut out).await?;
        if got.map(|l| &out[..l.min(8)]) != Some(&loaded_value(i)[..]) {
            return Err(format!(
                "loaded key {i} reads back {:?}, loaded {:?}",
                got.map(|l| &out[..l]),
                loaded_value(i)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{LinArgs, index_cfg, run};
    use super::*;
    use crate::bench::IndexKind;
    use crate::bench::index::NodeState;
    use remora::poller::sim::{Sim, SimConfig};
    use std::cell::RefCell;

    fn args(index: IndexKind, key_bytes: usize, bulk_load: u64) -> LinArgs {
        LinArgs {
            linearizability: true,
            index,
            seeds: "1..=2".into(),
            ops: 1600,
            clients: 16,
            hot_keys: 4,
            cold_keys: 32,
            hot_percent: 50,
            extra_deletes: 0,
            waves: 0,
            lease_us: None,
            key_bytes,
            with: Vec::new(),
            baseline: false,
            without: Vec::new(),
            onchip_locks: 0,
            leaf_handover: false,
            no_combine_latest: false,
            bulk_load,
            dump_violations: None,
        }
    }

    #[test]
    fn loaded_trees_are_checked_and_read_back() {
        let n = if cfg!(debug_assertions) { 1000 } else { 5000 };
        for (index, key_bytes) in [
            (IndexKind::Sherman, 8),
            (IndexKind::FgPlus, 8),
            (IndexKind::Smart, 8),
            (IndexKind::Chime, 8),
            (IndexKind::Canrt, 8),
            (IndexKind::Canrt, 16),
            (IndexKind::Erda, 8),
        ] {
            let a = args(index, key_bytes, n);
            run(&a, FabricKind::Sim, 1, 8).unwrap_or_else(|e| panic!("{index:?}: {e}"));
        }
    }

    /// On soft threads too, for the trees a client loads through the fabric.
    #[test]
    fn loaded_trees_are_checked_on_soft() {
        let n = if cfg!(debug_assertions) { 500 } else { 3000 };
        for index in [IndexKind::Chime, IndexKind::Sherman] {
            let a = LinArgs {
                clients: 8,
                ..args(index, 8, n)
            };
            run(&a, FabricKind::Soft, 2, 4).unwrap_or_else(|e| panic!("{index:?}: {e}"));
        }
    }

    #[test]
    fn bulk_load_is_refused_where_it_cannot_run() {
        let wort = args(IndexKind::Wort, 8, 100);
        let e = run(&wort, FabricKind::Sim, 1, 8).unwrap_err();
        assert!(e.contains("no bulk loader"), "{e}");
        // CANRT's tree is built into the memory node's image: the sim's only.
        let soft = args(IndexKind::Canrt, 8, 100);
        let e = run(&soft, FabricKind::Soft, 1, 8).unwrap_err();
        assert!(e.contains("--fabric sim"), "{e}");
        let many = args(IndexKind::Sherman, 8, MAX_LOADED + 1);
        let e = run(&many, FabricKind::Sim, 1, 8).unwrap_err();
        assert!(e.contains("at most"), "{e}");
        // Without --bulk-load every index runs as before.
        let cfg = index_cfg(IndexKind::Chime, 8).unwrap();
        assert!(refuse(&cfg, FabricKind::Soft, 0).is_ok());
    }

    /// The read-back fails on a key that was not loaded (one past the last).
    #[test]
    fn read_back_finds_a_missing_key() {
        let cfg = index_cfg(IndexKind::Sherman, 8).unwrap();
        let out = RefCell::new(None);
        let mut sim = Sim::new(SimConfig {
            compute_nodes: 1,
            memory_nodes: 2,
            region_len: 16 << 20,
            ..SimConfig::default()
        })
        .unwrap();
        let c = sim.client(0).unwrap();
        let (cfg, out_r) = (&cfg, &out);
        sim.spawn_with(&c, 0, move |ctx| async move {
            let h = Handle::open(ctx.ep(), cfg).await.unwrap();
            client_load(&h, 200).await.unwrap();
            let h = Handle::open_on(ctx.ep(), cfg, &NodeState::new(cfg))
                .await
                .unwrap();
            *out_r.borrow_mut() = Some((read_back(&h, 200, 8).await, read_back(&h, 201, 8).await));
        });
        assert_eq!(sim.run().unfinished, 0);
        drop(sim);
        let (good, bad) = out.into_inner().unwrap();
        assert_eq!(good, Ok(()));
        assert!(bad.unwrap_err().contains("loaded key 200"));
    }
}

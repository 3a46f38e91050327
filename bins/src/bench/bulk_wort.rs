//! WORT's and WOART's LOAD phase by bulk loading (`remora::core::wort`
//! `WortServer::bulk_load`), where the load is not what is measured. As CANRT's
//! (`bulk_canrt.rs`), the tree is the memory node's own, so it is written straight into the
//! memory node's region image before the cluster starts, by the server's code
//! ([`ImageRegion`]); the measured cluster's server then opens and recovers it from the
//! region (as after a restart) and the clients connect to it. The keys and values are
//! exactly those the LOAD phase would insert (key number `n` gets `value_for(n)`; a key
//! drawn twice keeps its last), of any width from 1 to 16 bytes, and the tree is, node for
//! node, the one inserting them in sorted order makes (core's `wort/bulk.rs`; only the
//! heap offsets differ).
//!
//! Which server-built loader a run takes ([`ServerPlan`]): CANRT's, WORT's or Erda's
//! (`bulk_erda.rs`).
use super::BenchArgs;
use super::bulk_canrt::{CanrtPlan, with_values};
use super::bulk_erda::ErdaPlan;
use super::index::IndexCfg;
use super::spatial::ImageRegion;
use remora::core::wort::{KEY_MAX, WortServer};
use remora::poller::sim::{NodeImage, SimConfig};
use std::time::Instant;

/// A WORT/WOART key: its bytes, zero-padded, and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WortKey {
    bytes: [u8; KEY_MAX],
    len: u8,
}

impl WortKey {
    /// `key` (1 to [`KEY_MAX`] bytes), or `None`.
    pub fn new(key: &[u8]) -> Option<WortKey> {
        if key.is_empty() || key.len() > KEY_MAX {
            return None;
        }
        let mut bytes = [0u8; KEY_MAX];
        bytes[..key.len()].copy_from_slice(key);
        Some(WortKey {
            bytes,
            len: key.len() as u8,
        })
    }
}

impl AsRef<[u8]> for WortKey {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The sorted (key, value) pairs of a WORT/WOART bulk load, and what preparing them cost.
pub struct WortPlan {
    pub pairs: Vec<(WortKey, Vec<u8>)>,
    pub sort_s: f64,
}

/// The run's `--records` keys with their values, sorted by key; a key drawn twice keeps
/// its last key number's value (the later insert wins).
pub fn plan(a: &BenchArgs) -> Result<WortPlan, String> {
    let t = Instant::now();
    let mut buf = [0u8; 32];
    let mut keyed = Vec::with_capacity(a.records as usize);
    for n in 0..a.records {
        let len = a.key(n, &mut buf);
        let key = WortKey::new(&buf[..len]).ok_or_else(|| {
            format!("WORT/WOART bulk load: key {n} has {len} bytes (1 to {KEY_MAX})")
        })?;
        keyed.push((key, n));
    }
    // Byte order of the keys (a proper prefix first): the trees' order.
    keyed.sort_by(|x, y| x.0.as_ref().cmp(y.0.as_ref()).then(x.1.cmp(&y.1)));
    let pairs = with_values(keyed, a.value_size);
    Ok(WortPlan {
        pairs,
        sort_s: t.elapsed().as_secs_f64(),
    })
}

/// Writes the WORT/WOART tree of `p` into its memory node's image (node 0, no store there
/// yet); a one-line summary of its shape.
pub fn build(
    index: &IndexCfg,
    images: &mut [NodeImage],
    sim: &SimConfig,
    p: &WortPlan,
) -> Result<String, String> {
    let IndexCfg::Wort { kind } = index else {
        return Err("not a WORT/WOART index".into());
    };
    let img = images.get_mut(0).ok_or("no image of WORT's memory node")?;
    let mut server = WortServer::new(*kind);
    let st = server
        .bulk_load(&ImageRegion::warming(img, 0, sim), &p.pairs)
        .map_err(|e| format!("{} bulk load: {e}", kind.name()))?;
    let n = st.nodes;
    let nodes = match kind {
        remora::core::wort::Kind::Wort => format!("{} NODE16", n[0]),
        remora::core::wort::Kind::Woart => {
            format!("NODE4/16/48/256 {} / {} / {} / {}", n[1], n[2], n[3], n[4])
        }
    };
    Ok(format!(
        "{} image of {} keys, as sorted inserts build it: {nodes} inner nodes, height {}, {} KiB",
        kind.name().to_uppercase(),
        st.keys,
        st.height,
        st.bytes >> 10
    ))
}

/// A bulk load built by the memory node's server into its image (no client): CANRT's,
/// WORT's/WOART's or Erda's.
pub enum ServerPlan {
    Canrt(CanrtPlan),
    Wort(WortPlan),
    Erda(ErdaPlan),
}

impl ServerPlan {
    /// The plan of `index`'s server-built bulk load, if it has one (`None`: the index is
    /// bulk-loaded by a client, `bulk.rs`).
    pub fn of(a: &BenchArgs, index: &IndexCfg) -> Result<Option<ServerPlan>, String> {
        Ok(match index {
            IndexCfg::Canrt { cfg, .. } => {
                Some(ServerPlan::Canrt(super::bulk_canrt::plan(a, cfg.key_len)?))
            }
            IndexCfg::Wort { .. } => Some(ServerPlan::Wort(plan(a)?)),
            IndexCfg::Erda { .. } => Some(ServerPlan::Erda(super::bulk_erda::plan(a)?)),
            _ => None,
        })
    }

    /// Whether `index`'s bulk load is server-built.
    pub fn used_by(index: &IndexCfg) -> bool {
        matches!(
            index,
            IndexCfg::Canrt { .. } | IndexCfg::Wort { .. } | IndexCfg::Erda { .. }
        )
    }

    /// (keys, seconds their sorting took).
    pub fn planned(&self) -> (usize, f64) {
        match self {
            ServerPlan::Canrt(p) => (p.pairs.len(), p.sort_s),
            ServerPlan::Wort(p) => (p.pairs.len(), p.sort_s),
            ServerPlan::Erda(p) => (p.keys.len(), p.sort_s),
        }
    }

    /// Writes the tree into the memory node's image; a one-line summary.
    pub fn build(
        &self,
        index: &IndexCfg,
        images: &mut [NodeImage],
        sim: &SimConfig,
    ) -> Result<String, String> {
        match self {
            ServerPlan::Canrt(p) => super::bulk_canrt::build(index, images, sim, p),
            ServerPlan::Wort(p) => build(index, images, sim, p),
            ServerPlan::Erda(p) => super::bulk_erda::build(index, images, sim, p),
        }
    }
}

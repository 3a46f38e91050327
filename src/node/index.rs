//! Which index a handle opens, and each poller's own handle on it.
//!
//! Every poller thread opens its own per-thread handle of the index on its own endpoint
//! ([`PerThread::open`]), on the per-compute-node state (SMART's cache and
//! delegation/combining tables, Sherman's local lock table and index cache, CHIME's
//! hotspot buffer and index cache, CANRT's prefix cache) that [`crate::node::ComputeNode::open`] built once. Catfish's client is per poller
//! (see `spatial.rs`).
use super::error::Error;
use super::spatial::{CatfishOn, SpatialConfig};
use remora_core::canrt::{Canrt, CanrtConfig, CanrtNode, CanrtServer};
use remora_core::catfish::CatfishServer;
use remora_core::chime::{Chime, ChimeConfig, ChimeNode};
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::fabric::Endpoint;
use remora_core::index::KvIndex;
use remora_core::server::Handler;
use remora_core::sherman::{Sherman, ShermanConfig, ShermanNode};
use remora_core::smart::{KeyMode, Smart, SmartConfig, SmartNode, Techniques};
use std::sync::Arc;

/// The root slot [`IndexConfig::fg_plus`] publishes its tree in: no other index's default
/// (SMART 1, Sherman 2, CANRT 3, CHIME and Erda 4, Catfish 5, WORT 6, WOART 7).
pub const FG_PLUS_ROOT_SLOT: usize = 0;

/// An index to open, with its configuration. Every index opens the same way:
/// [`crate::node::ComputeNode::open`] creates it on its memory node if it is not there yet
/// (creators racing agree on one), else opens the one there.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum IndexConfig {
    /// SMART, the adaptive radix tree (published in `root_slot`, 1 by default).
    Smart(SmartConfig),
    /// Sherman, the B+tree (published in `root_slot`, 2 by default).
    Sherman(ShermanConfig),
    /// CANRT, the radix tree whose memory node runs the `canrt` service.
    Canrt(CanrtConfig),
    /// Erda, the log-structured hash store whose memory node runs the `erda` service.
    Erda(ErdaClientConfig),
    /// CHIME, the B+tree with hopscotch-hashed leaves (published in `sherman.root_slot`, 4
    /// by default): its hotspot buffer and Sherman's index cache are per compute node.
    Chime(ChimeConfig),
}

impl IndexConfig {
    /// SMART with all its techniques, variable-length keys (1..=255 bytes, no NUL byte) and
    /// values up to `value_cap` bytes.
    pub fn smart(value_cap: usize) -> IndexConfig {
        IndexConfig::Smart(SmartConfig::new(
            Techniques::SMART,
            KeyMode::Variable,
            value_cap,
        ))
    }

    /// Sherman as its paper runs it (8-byte keys, 8-byte values).
    pub fn sherman() -> IndexConfig {
        IndexConfig::Sherman(ShermanConfig::sherman())
    }

    /// FG+, the one-sided B+tree baseline of Sherman's paper (Sherman's tree with its
    /// techniques off), published in root slot 0 so that it and Sherman (slot 2) can share
    /// a region: opened on Sherman's slot it would run FG+'s lock protocol on Sherman's tree.
    pub fn fg_plus() -> IndexConfig {
        IndexConfig::Sherman(ShermanConfig {
            root_slot: FG_PLUS_ROOT_SLOT,
            ..ShermanConfig::fg_plus()
        })
    }

    /// CHIME with every technique on, as its paper runs it (8-byte keys and values, 100 MB
    /// of cache per compute node).
    pub fn chime() -> IndexConfig {
        IndexConfig::Chime(ChimeConfig::chime())
    }

    /// CANRT on memory node 0 (8-byte keys, values up to 8 bytes).
    pub fn canrt() -> IndexConfig {
        IndexConfig::Canrt(CanrtConfig::default())
    }

    /// Erda on memory node 0.
    pub fn erda() -> IndexConfig {
        IndexConfig::Erda(ErdaClientConfig::default())
    }

    /// The index's name.
    pub fn name(&self) -> &'static str {
        match self {
            IndexConfig::Smart(_) => "smart",
            IndexConfig::Sherman(_) => "sherman",
            IndexConfig::Canrt(_) => "canrt",
            IndexConfig::Erda(_) => "erda",
            IndexConfig::Chime(_) => "chime",
        }
    }

    /// The service the index needs on its memory node (None: one-sided only, any will do).
    pub fn service(&self) -> Option<&'static str> {
        match self {
            IndexConfig::Canrt(_) => Some("canrt"),
            IndexConfig::Erda(_) => Some("erda"),
            _ => None,
        }
    }
}

/// The server-side logic an in-process memory node runs for the indexes that need one.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub enum Service {
    /// One-sided indexes only (SMART, Sherman).
    #[default]
    None,
    /// CANRT's metadata applier and resizer.
    Canrt,
    /// Erda's metadata server, with its store's geometry.
    Erda(ErdaConfig),
    /// Catfish's fast-messaging server (R-tree writes, messaging searches, heartbeats).
    Catfish,
}

impl Service {
    /// The handler to install on a fresh region whose queue pairs take messages of up to
    /// `max_msg` bytes, or why it cannot be served there.
    pub(crate) fn handler(
        &self,
        region_len: u64,
        chunk_size: u64,
        max_msg: usize,
    ) -> Result<Option<Box<dyn Handler + Send>>, Error> {
        Ok(match self {
            Service::None => None,
            Service::Canrt => Some(Box::new(CanrtServer::new())),
            Service::Catfish => Some(Box::new(CatfishServer::new(max_msg))),
            Service::Erda(cfg) => Some(Box::new(
                ErdaServer::for_region(*cfg, region_len, chunk_size).map_err(Error::ErdaConfig)?,
            )),
        })
    }
}

/// What a poller opens: a key-value or a spatial index.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Opening {
    Kv(IndexConfig),
    Spatial(SpatialConfig),
}

impl Opening {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Opening::Kv(c) => c.name(),
            Opening::Spatial(c) => c.name(),
        }
    }

    pub(crate) fn service(&self) -> Option<&'static str> {
        match self {
            Opening::Kv(c) => c.service(),
            Opening::Spatial(c) => Some(c.service()),
        }
    }
}

/// An index's state shared by all pollers of one compute node.
pub(crate) enum NodeState {
    Smart(Arc<SmartNode>),
    Sherman(Arc<ShermanNode>),
    Canrt(Arc<CanrtNode>),
    Chime(Arc<ChimeNode>),
    /// Nothing per node (Erda, Catfish).
    None,
}

impl NodeState {
    pub(crate) fn new(cfg: &Opening) -> NodeState {
        match cfg {
            Opening::Kv(IndexConfig::Smart(c)) => NodeState::Smart(Arc::new(SmartNode::new(c))),
            Opening::Kv(IndexConfig::Sherman(c)) => {
                NodeState::Sherman(Arc::new(ShermanNode::new(c)))
            }
            Opening::Kv(IndexConfig::Canrt(_)) => NodeState::Canrt(Arc::new(CanrtNode::new())),
            Opening::Kv(IndexConfig::Chime(c)) => NodeState::Chime(Arc::new(ChimeNode::new(c))),
            // Erda keeps nothing per node; Catfish's client is per poller (its queue pair).
            Opening::Kv(IndexConfig::Erda(_)) | Opening::Spatial(_) => NodeState::None,
        }
    }
}

/// One poller's handle on an index, on that poller's endpoint.
pub(crate) enum PerThread<'e, E: Endpoint> {
    Smart(Smart<'e, E>),
    /// Boxed, as CHIME: each carries its fixed table of lock words taken past the
    /// local lock table (~0.8 KB).
    Sherman(Box<Sherman<'e, E>>),
    Canrt(Canrt<'e, E>),
    Erda(Erda<'e, E>),
    Chime(Box<Chime<'e, E>>),
    /// Boxed: the client carries ~13 KB of buffers and back-off state.
    Catfish(Box<CatfishOn<'e, E>>),
}

/// What a key-value operation on a spatial index fails with (the handles never send one).
fn not_kv() -> Error {
    Error::Config("catfish is a spatial index: insert, search and delete rectangles".into())
}

impl<'e, E: Endpoint> PerThread<'e, E> {
    /// Opens (creating if needed) the index on `ep`, on the node's shared `state` when
    /// there is one for this index (else with state of its own).
    pub(crate) async fn open(
        ep: &'e E,
        cfg: &Opening,
        state: Option<&NodeState>,
        depth: usize,
    ) -> Result<PerThread<'e, E>, Error> {
        let cfg = match cfg {
            Opening::Spatial(SpatialConfig::Catfish(c)) => {
                return Ok(PerThread::Catfish(Box::new(
                    CatfishOn::open(ep, c, depth).await?,
                )));
            }
            Opening::Kv(c) => c,
        };
        Ok(match (cfg, state) {
            (IndexConfig::Smart(c), Some(NodeState::Smart(n))) => {
                PerThread::Smart(Smart::open_on(ep, *c, n.clone()).await?)
            }
            (IndexConfig::Smart(c), _) => PerThread::Smart(Smart::open(ep, *c).await?),
            (IndexConfig::Sherman(c), Some(NodeState::Sherman(n))) => {
                PerThread::Sherman(Box::new(Sherman::create_on(ep, *c, n.clone()).await?))
            }
            (IndexConfig::Sherman(c), _) => {
                PerThread::Sherman(Box::new(Sherman::create(ep, *c).await?))
            }
            (IndexConfig::Canrt(c), Some(NodeState::Canrt(n))) => {
                PerThread::Canrt(Canrt::open_on(ep, *c, n.clone()).await?)
            }
            (IndexConfig::Canrt(c), _) => PerThread::Canrt(Canrt::open(ep, *c).await?),
            (IndexConfig::Erda(c), _) => PerThread::Erda(Erda::open(ep, *c).await?),
            (IndexConfig::Chime(c), Some(NodeState::Chime(n))) => {
                PerThread::Chime(Box::new(Chime::create_on(ep, *c, n.clone()).await?))
            }
            (IndexConfig::Chime(c), _) => PerThread::Chime(Box::new(Chime::create(ep, *c).await?)),
        })
    }

    /// The spatial index, or an error for a key-value one.
    pub(crate) fn spatial(&self) -> Result<&CatfishOn<'e, E>, Error> {
        match self {
            PerThread::Catfish(c) => Ok(c),
            _ => Err(Error::Config(
                "a key-value index has no spatial operations".into(),
            )),
        }
    }

    pub(crate) async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        match self {
            PerThread::Smart(s) => Ok(s.upsert(key, value).await?),
            PerThread::Sherman(s) => Ok(s.upsert(key, value).await?),
            PerThread::Canrt(s) => Ok(s.upsert(key, value).await?),
            PerThread::Erda(s) => Ok(s.upsert(key, value).await?),
            PerThread::Chime(s) => Ok(s.upsert(key, value).await?),
            PerThread::Catfish(_) => Err(not_kv()),
        }
    }

    pub(crate) async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        match self {
            PerThread::Smart(s) => Ok(s.update(key, value).await?),
            PerThread::Sherman(s) => Ok(s.update(key, value).await?),
            PerThread::Canrt(s) => Ok(s.update(key, value).await?),
            PerThread::Erda(s) => Ok(s.update(key, value).await?),
            PerThread::Chime(s) => Ok(s.update(key, value).await?),
            PerThread::Catfish(_) => Err(not_kv()),
        }
    }

    pub(crate) async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, Error> {
        match self {
            PerThread::Smart(s) => Ok(s.get(key, out).await?),
            PerThread::Sherman(s) => Ok(s.get(key, out).await?),
            PerThread::Canrt(s) => Ok(s.get(key, out).await?),
            PerThread::Erda(s) => Ok(s.get(key, out).await?),
            PerThread::Chime(s) => Ok(s.get(key, out).await?),
            PerThread::Catfish(_) => Err(not_kv()),
        }
    }

    pub(crate) async fn delete(&self, key: &[u8]) -> Result<bool, Error> {
        match self {
            PerThread::Smart(s) => Ok(s.delete(key).await?),
            PerThread::Sherman(s) => Ok(s.delete(key).await?),
            PerThread::Canrt(s) => Ok(s.delete(key).await?),
            PerThread::Erda(s) => Ok(s.delete(key).await?),
            PerThread::Chime(s) => Ok(s.delete(key).await?),
            PerThread::Catfish(_) => Err(not_kv()),
        }
    }

    pub(crate) async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, Error> {
        match self {
            PerThread::Smart(s) => Ok(s.scan(from, limit, visit).await?),
            PerThread::Sherman(s) => Ok(s.scan(from, limit, visit).await?),
            PerThread::Canrt(s) => Ok(s.scan(from, limit, visit).await?),
            PerThread::Erda(s) => Ok(s.scan(from, limit, visit).await?),
            PerThread::Chime(s) => Ok(s.scan(from, limit, visit).await?),
            PerThread::Catfish(_) => Err(not_kv()),
        }
    }
}

//! The indexes `remora bench` drives, behind one enum so a worker opens whichever was asked
//! for and the phase code stays generic over `KvIndex`.
use super::resizes::ResizeWatch;
use remora::core::Snapshot;
use remora::core::canrt::{Canrt, CanrtConfig, CanrtNode, CanrtServer, Growth};
use remora::core::chime::{Chime, ChimeConfig, ChimeNode};
use remora::core::erda::baseline::{Baseline, BaselineServer, Scheme};
use remora::core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora::core::fabric::{Endpoint, QueuePair};
use remora::core::index::KvIndex;
use remora::core::server::Handler;
use remora::core::sherman::{Sherman, ShermanConfig, ShermanNode};
use remora::core::smart::{Smart, SmartConfig, SmartNode, SmartStats, Techniques};
use remora::core::wort::{Kind, Wort, WortClientConfig, WortServer};
use serde::Serialize;
use std::sync::Arc;

/// Which index, configured.
#[derive(Debug, Clone)]
pub enum IndexCfg {
    Smart {
        cfg: SmartConfig,
        t: Techniques,
    },
    /// `name`: "sherman", "fg+", or a breakdown step.
    Sherman {
        cfg: ShermanConfig,
        name: &'static str,
    },
    /// CHIME on Sherman.
    Chime {
        cfg: ChimeConfig,
    },
    /// CANRT; its memory node (node 0) runs `CanrtServer`.
    Canrt {
        cfg: CanrtConfig,
        /// How its memory node grows the tree (`--canrt-growth`).
        growth: Growth,
    },
    /// Erda; its memory node (node 0) runs `ErdaServer` with `server`'s geometry.
    Erda {
        server: ErdaConfig,
        client: ErdaClientConfig,
    },
    /// One of Erda's baselines (Redo Logging, Read-After-Write) on Erda's hash table; its
    /// memory node runs `BaselineServer`.
    ErdaBaseline {
        scheme: Scheme,
        server: ErdaConfig,
        client: ErdaClientConfig,
    },
    /// WORT or WOART; its memory node (node 0) runs `WortServer`.
    Wort {
        kind: Kind,
    },
}

/// A memory node's handler and the resize clock of its CANRT server (empty for others).
pub type ServedBy = (Box<dyn Handler + Send>, ResizeWatch);

impl IndexCfg {
    pub fn index_name(&self) -> &'static str {
        match self {
            IndexCfg::Smart { .. } => "smart",
            IndexCfg::Sherman { name, .. } => name,
            IndexCfg::Chime { .. } => "chime",
            IndexCfg::Canrt { .. } => "canrt",
            IndexCfg::Erda { .. } => "erda",
            IndexCfg::ErdaBaseline { scheme, .. } => scheme.name(),
            IndexCfg::Wort { kind } => kind.name(),
        }
    }

    /// The techniques that are on, for the table and the JSON record.
    pub fn techniques(&self) -> String {
        let on: Vec<&str> = match self {
            IndexCfg::Smart { t, .. } => [
                (t.lock_free_internal, "lock-free"),
                (t.in_place_leaf, "in-place"),
                (t.rear_lock, "rear-lock"),
                (t.delegation, "delegation"),
                (t.combining, "combining"),
                (t.cache, "cache"),
            ]
            .iter()
            .filter(|(b, _)| *b)
            .map(|(_, n)| *n)
            .collect(),
            IndexCfg::Sherman { cfg, .. } => [
                (cfg.onchip_locks, "on-chip"),
                (cfg.hierarchical_locks, "hierarchical"),
                (cfg.combine_commands, "combination"),
                (cfg.two_level_versions, "two-level"),
                (cfg.index_cache, "cache"),
            ]
            .iter()
            .filter(|(b, _)| *b)
            .map(|(_, n)| *n)
            .collect(),
            IndexCfg::Chime { cfg } => [
                (cfg.hopscotch, "hopscotch"),
                (cfg.hopscotch && cfg.vacancy_lock, "vacancy-lock"),
                (cfg.hopscotch && cfg.speculative, "speculative"),
                (cfg.hopscotch && cfg.delegation, "delegation"),
                (cfg.hopscotch && cfg.combining, "combining"),
                (cfg.sherman.onchip_locks, "on-chip"),
                (cfg.sherman.hierarchical_locks, "hierarchical"),
                (cfg.sherman.combine_commands, "combination"),
                (cfg.sherman.index_cache, "cache"),
            ]
            .iter()
            .filter(|(b, _)| *b)
            .map(|(_, n)| *n)
            .collect(),
            IndexCfg::Canrt { cfg, growth } => {
                let mut v = Vec::new();
                if *growth == Growth::WholeLevel {
                    v.push("whole-level growth");
                }
                if cfg.flush_appends && cfg.linearizable() {
                    v.push("flush-appends");
                }
                if !cfg.linearizable() {
                    // The paper's weaker write (`--canrt-ack posted`): named in every record.
                    v.push("posted-writes (not linearizable)");
                }
                v
            }
            IndexCfg::Erda { .. } | IndexCfg::ErdaBaseline { .. } | IndexCfg::Wort { .. } => {
                vec![]
            }
        };
        if on.is_empty() {
            "baseline".into()
        } else {
            on.join("+")
        }
    }

    /// The server-side logic the index needs on its memory node, if any.
    /// The memory-node service the index needs (None: one-sided only, any service will do).
    pub fn service(&self) -> Option<&'static str> {
        match self {
            IndexCfg::Canrt { .. } => Some("canrt"),
            IndexCfg::Erda { .. } => Some("erda"),
            IndexCfg::ErdaBaseline { scheme, .. } => Some(scheme.service()),
            IndexCfg::Wort { kind } => Some(kind.name()),
            _ => None,
        }
    }

    /// The message size the index's protocol needs, if more than any fabric's default.
    pub fn max_message(&self) -> Option<usize> {
        match self {
            IndexCfg::ErdaBaseline { .. } => Some(remora::core::erda::baseline::MAX_MESSAGE),
            _ => None,
        }
    }

    /// The handler for a memory node of a fresh `region_len`-byte region in `chunk_size`
    /// chunks, if the index needs one; an error if the index cannot be served there (Erda's
    /// geometry is checked here, at start, not at a client's first message).
    pub fn server_handler(
        &self,
        region_len: u64,
        chunk_size: u64,
    ) -> Result<Option<Box<dyn Handler + Send>>, String> {
        Ok(self.server(region_len, chunk_size)?.map(|(h, _)| h))
    }

    /// [`Self::server_handler`], and where to read the resize clock of the CANRT server.
    pub fn server(&self, region_len: u64, chunk_size: u64) -> Result<Option<ServedBy>, String> {
        let h: Box<dyn Handler + Send> = match self {
            IndexCfg::Canrt { growth, .. } => {
                let s = CanrtServer::with_growth(*growth);
                let watch = ResizeWatch::of(s.stats());
                return Ok(Some((Box::new(s), watch)));
            }
            IndexCfg::Erda { server, .. } => Box::new(
                ErdaServer::for_region(*server, region_len, chunk_size)
                    .map_err(|e| format!("erda's memory node cannot start: {e}"))?,
            ),
            IndexCfg::ErdaBaseline { scheme, server, .. } => {
                Box::new(BaselineServer::new(*scheme, *server))
            }
            IndexCfg::Wort { kind } => Box::new(WortServer::new(*kind)),
            _ => return Ok(None),
        };
        Ok(Some((h, ResizeWatch::default())))
    }
}

/// The state one compute node's client threads share for the index under test (empty for
/// indexes that keep none): open each thread's handle with [`Handle::open_on`].
#[derive(Clone, Default)]
pub struct NodeState {
    smart: Option<Arc<SmartNode>>,
    sherman: Option<Arc<ShermanNode>>,
    chime: Option<Arc<ChimeNode>>,
    canrt: Option<Arc<CanrtNode>>,
}

impl NodeState {
    /// Fresh state for one compute node of `cfg`'s index.
    pub fn new(cfg: &IndexCfg) -> NodeState {
        match cfg {
            IndexCfg::Smart { cfg, .. } => NodeState {
                smart: Some(Arc::new(SmartNode::new(cfg))),
                ..NodeState::default()
            },
            IndexCfg::Sherman { cfg, .. } => NodeState {
                sherman: Some(Arc::new(ShermanNode::new(cfg))),
                ..NodeState::default()
            },
            IndexCfg::Chime { cfg } => NodeState {
                chime: Some(Arc::new(ChimeNode::new(cfg))),
                ..NodeState::default()
            },
            IndexCfg::Canrt { .. } => NodeState {
                canrt: Some(Arc::new(CanrtNode::new())),
                ..NodeState::default()
            },
            _ => NodeState::default(),
        }
    }

    /// Bytes the state holds now (SMART: the radix cache's index and entries, and the
    /// delegation/combining table; Sherman: the index cache's pages; CANRT: the prefix
    /// array).
    pub fn bytes(&self) -> u64 {
        let smart = self.smart.as_ref().map_or(0, |n| {
            let f = n.footprint();
            f.cache_bytes + f.table_bytes
        });
        smart
            + self.sherman.as_ref().map_or(0, |n| n.cache_bytes() as u64)
            + self.chime.as_ref().map_or(0, |n| n.cache_bytes() as u64)
            + self.canrt.as_ref().map_or(0, |n| n.prefix_bytes() as u64)
    }
}

/// Sherman's own figures.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ShermanSummary {
    /// Page and leaf locks taken (remotely, by hand-over or by takeover).
    pub locks_acquired: u64,
    /// Of those, handed over by a thread of the same compute node (no remote CAS).
    pub lock_handovers: u64,
    pub splits: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// CHIME's own (`ChimeStats`; absent from other indexes' records): speculative reads
    /// tried and those that found their key, group READs refused and retried, and READs of
    /// a sibling's low key (a leaf reached whose sibling its route did not name next).
    #[serde(skip_serializing_if = "is_zero")]
    pub speculative_tries: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub speculative_hits: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub group_retries: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub sibling_reads: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Index counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub smart: SmartStats,
    pub sherman: ShermanSummary,
    pub canrt: remora::core::canrt::ClientStats,
}

/// A Sherman tree's counters (CHIME's are its Sherman's).
fn sherman_stats<E: Endpoint>(s: &Sherman<'_, E>) -> Stats {
    let st = s.stats();
    let (hits, misses, _) = s.cache_stats();
    Stats {
        sherman: ShermanSummary {
            locks_acquired: st.locks_acquired,
            lock_handovers: st.lock_handovers,
            splits: st.splits,
            cache_hits: hits,
            cache_misses: misses,
            ..ShermanSummary::default()
        },
        ..Stats::default()
    }
}

/// One worker's handle on the index under test.
pub enum Handle<'e, E: Endpoint> {
    Smart(Smart<'e, E>),
    /// Boxed, as CHIME: each carries its fixed table of lock words taken past the local
    /// lock table (~0.8 KB).
    Sherman(Box<Sherman<'e, E>>),
    Chime(Box<Chime<'e, E>>),
    Canrt(Canrt<'e, E>),
    Erda(Erda<'e, E>),
    Baseline(Baseline<'e, E>),
    Wort(Wort<'e, E>),
}

impl<'e, E: Endpoint> Handle<'e, E> {
    /// Opens the index, creating it if it is not there yet (safe to race: creators agree),
    /// with per-node state of its own (a compute node of one thread).
    pub async fn open(ep: &'e E, cfg: &IndexCfg) -> Result<Handle<'e, E>, String> {
        Self::open_on(ep, cfg, &NodeState::new(cfg)).await
    }

    /// [`Self::open`], sharing `node` with the other handles of its compute node.
    pub async fn open_on(
        ep: &'e E,
        cfg: &IndexCfg,
        node: &NodeState,
    ) -> Result<Handle<'e, E>, String> {
        Ok(match cfg {
            IndexCfg::Smart { cfg, .. } => {
                let n = match &node.smart {
                    Some(n) => n.clone(),
                    None => Arc::new(SmartNode::new(cfg)),
                };
                Handle::Smart(
                    Smart::open_on(ep, *cfg, n)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            }
            IndexCfg::Sherman { cfg, .. } => {
                let n = match &node.sherman {
                    Some(n) => n.clone(),
                    None => Arc::new(ShermanNode::new(cfg)),
                };
                Handle::Sherman(Box::new(
                    Sherman::create_on(ep, *cfg, n)
                        .await
                        .map_err(|e| e.to_string())?,
                ))
            }
            IndexCfg::Chime { cfg } => {
                let n = match &node.chime {
                    Some(n) => n.clone(),
                    None => Arc::new(ChimeNode::new(cfg)),
                };
                Handle::Chime(Box::new(
                    Chime::create_on(ep, *cfg, n)
                        .await
                        .map_err(|e| e.to_string())?,
                ))
            }
            IndexCfg::Canrt { cfg, .. } => {
                let n = match &node.canrt {
                    Some(n) => n.clone(),
                    None => Arc::new(CanrtNode::new()),
                };
                Handle::Canrt(
                    Canrt::open_on(ep, *cfg, n)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            }
            IndexCfg::Erda { client, .. } => {
                Handle::Erda(Erda::open(ep, *client).await.map_err(|e| e.to_string())?)
            }
            IndexCfg::ErdaBaseline { scheme, client, .. } => Handle::Baseline(
                Baseline::open(ep, *scheme, *client)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            IndexCfg::Wort { .. } => Handle::Wort(
                Wort::open(ep, WortClientConfig::default())
                    .await
                    .map_err(|e| e.to_string())?,
            ),
        })
    }

    /// Settles the server's asynchronous work (the baselines apply every logged record);
    /// nothing for the other indexes.
    pub async fn drain(&self) -> Result<(), String> {
        if let Handle::Baseline(b) = self {
            let left = b.drain().await.map_err(|e| e.to_string())?;
            if left > 0 {
                return Err(format!("{left} ring records never landed"));
            }
        }
        Ok(())
    }

    pub fn stats(&self) -> Stats {
        match self {
            Handle::Smart(s) => Stats {
                smart: s.stats(),
                ..Stats::default()
            },
            Handle::Sherman(s) => sherman_stats(s),
            // CHIME's internal pages, locks and cache are its Sherman's; its per-node
            // delegation and combining count where SMART's do (the record's `smart` fields).
            Handle::Chime(c) => {
                let mut st = sherman_stats(c.sherman());
                let own = c.stats();
                st.smart.delegated_reads = own.delegated_reads;
                st.smart.combined_writes = own.combined_writes;
                st.sherman.speculative_tries = own.speculative_tries;
                st.sherman.speculative_hits = own.speculative_hits;
                st.sherman.group_retries = own.retries;
                st.sherman.sibling_reads = own.sibling_reads;
                st
            }
            Handle::Canrt(s) => Stats {
                canrt: s.stats(),
                ..Stats::default()
            },
            Handle::Erda(_) | Handle::Baseline(_) | Handle::Wort(_) => Stats::default(),
        }
    }
}

impl<E: Endpoint> KvIndex for Handle<'_, E> {
    type Error = String;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self {
            Handle::Smart(s) => s.upsert(key, value).await.map_err(|e| e.to_string()),
            Handle::Sherman(s) => s.upsert(key, value).await.map_err(|e| e.to_string()),
            Handle::Chime(s) => s.upsert(key, value).await.map_err(|e| e.to_string()),
            Handle::Canrt(s) => s.upsert(key, value).await.map_err(|e| e.to_string()),
            Handle::Erda(s) => s.upsert(key, value).await.map_err(|e| e.to_string()),
            Handle::Baseline(s) => s.upsert(key, value).await.map_err(|e| e.to_string()),
            Handle::Wort(s) => s.upsert(key, value).await.map_err(|e| e.to_string()),
        }
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, String> {
        match self {
            Handle::Smart(s) => s.update(key, value).await.map_err(|e| e.to_string()),
            Handle::Sherman(s) => s.update(key, value).await.map_err(|e| e.to_string()),
            Handle::Chime(s) => s.update(key, value).await.map_err(|e| e.to_string()),
            Handle::Canrt(s) => s.update(key, value).await.map_err(|e| e.to_string()),
            Handle::Erda(s) => s.update(key, value).await.map_err(|e| e.to_string()),
            Handle::Baseline(s) => s.update(key, value).await.map_err(|e| e.to_string()),
            Handle::Wort(s) => s.update(key, value).await.map_err(|e| e.to_string()),
        }
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, String> {
        match self {
            Handle::Smart(s) => s.get(key, out).await.map_err(|e| e.to_string()),
            Handle::Sherman(s) => s.get(key, out).await.map_err(|e| e.to_string()),
            Handle::Chime(s) => s.get(key, out).await.map_err(|e| e.to_string()),
            Handle::Canrt(s) => s.get(key, out).await.map_err(|e| e.to_string()),
            Handle::Erda(s) => s.get(key, out).await.map_err(|e| e.to_string()),
            Handle::Baseline(s) => s.get(key, out).await.map_err(|e| e.to_string()),
            Handle::Wort(s) => s.get(key, out).await.map_err(|e| e.to_string()),
        }
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, String> {
        match self {
            Handle::Smart(s) => s.delete(key).await.map_err(|e| e.to_string()),
            Handle::Sherman(s) => s.delete(key).await.map_err(|e| e.to_string()),
            Handle::Chime(s) => s.delete(key).await.map_err(|e| e.to_string()),
            Handle::Canrt(s) => s.delete(key).await.map_err(|e| e.to_string()),
            Handle::Erda(s) => s.delete(key).await.map_err(|e| e.to_string()),
            Handle::Baseline(s) => s.delete(key).await.map_err(|e| e.to_string()),
            Handle::Wort(s) => s.delete(key).await.map_err(|e| e.to_string()),
        }
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, String> {
        match self {
            Handle::Smart(s) => s.scan(from, limit, visit).await.map_err(|e| e.to_string()),
            Handle::Sherman(s) => s.scan(from, limit, visit).await.map_err(|e| e.to_string()),
            Handle::Chime(s) => s.scan(from, limit, visit).await.map_err(|e| e.to_string()),
            Handle::Canrt(s) => s.scan(from, limit, visit).await.map_err(|e| e.to_string()),
            Handle::Erda(s) => s.scan(from, limit, visit).await.map_err(|e| e.to_string()),
            Handle::Baseline(s) => s.scan(from, limit, visit).await.map_err(|e| e.to_string()),
            Handle::Wort(s) => s.scan(from, limit, visit).await.map_err(|e| e.to_string()),
        }
    }
}

/// Every queue pair's counters of an endpoint, summed.
pub fn snapshot_of<E: Endpoint>(ep: &E) -> Snapshot {
    ep.nodes()
        .iter()
        .filter_map(|&n| ep.qp(n).ok())
        .map(|q| q.counters().snapshot())
        .fold(Snapshot::default(), |a, b| a + b)
}

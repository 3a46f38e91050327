//! The conformance-suite harness of the soft fabric: a memory node in this process (with its
//! echo server thread) or a `remora memnode` reached through its control socket; clients are
//! threads, each with its own endpoint.
use super::control;
use super::{NodeConfig, ServerHandle, SoftEndpoint, SoftMemoryNode};
use remora_core::block_on::block_on;
use remora_core::conformance::{Harness, checks};
use remora_core::fabric::SegmentOrder;
use remora_layouts::NodeId;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

enum Target {
    Local {
        node: Arc<SoftMemoryNode>,
        _server: ServerHandle,
    },
    Remote {
        path: PathBuf,
        info: control::Reply,
    },
}

/// The soft fabric's `Harness` for the conformance suite: a memory node in this process or
/// a memnode process (see the module doc); every client gets its own endpoint.
pub struct SoftHarness {
    target: Target,
}

impl SoftHarness {
    /// A memory node in this process, served by a background thread.
    pub fn in_process(cfg: NodeConfig) -> io::Result<SoftHarness> {
        let node = SoftMemoryNode::create(cfg)?;
        let server = node.spawn_server();
        Ok(SoftHarness {
            target: Target::Local {
                node,
                _server: server,
            },
        })
    }

    /// The memnode listening at `path`.
    pub fn remote(path: PathBuf) -> io::Result<SoftHarness> {
        let info = control::info(&path)?;
        Ok(SoftHarness {
            target: Target::Remote { path, info },
        })
    }

    /// A fresh endpoint (a new connection).
    pub fn endpoint(&self) -> io::Result<SoftEndpoint> {
        match &self.target {
            Target::Local { node, .. } => node.endpoint(),
            Target::Remote { path, .. } => Ok(SoftEndpoint::new(vec![control::connect(path)?])),
        }
    }
}

impl Harness for SoftHarness {
    type Ep = SoftEndpoint;

    fn node(&self) -> NodeId {
        match &self.target {
            Target::Local { node, .. } => node.config().node_id,
            Target::Remote { info, .. } => info.node_id,
        }
    }

    fn region_len(&self) -> u64 {
        match &self.target {
            Target::Local { node, .. } => node.config().region_len,
            Target::Remote { info, .. } => info.region_len,
        }
    }

    fn dm_len(&self) -> u64 {
        match &self.target {
            Target::Local { node, .. } => node.config().dm_len,
            Target::Remote { info, .. } => info.dm_len,
        }
    }

    fn run<T, F>(&self, n: usize, task: T)
    where
        T: Fn(usize, SoftEndpoint) -> F + Send + Sync,
        F: Future<Output = ()>,
    {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let task = &task;
                    s.spawn(move || {
                        let ep = self.endpoint().expect("connecting a client endpoint");
                        block_on(task(i, ep));
                    })
                })
                .collect();
            // A client's failure is the check's failure, with the client's own message.
            let mut first = None;
            for h in handles {
                if let Err(p) = h.join() {
                    first.get_or_insert(p);
                }
            }
            if let Some(p) = first {
                std::panic::resume_unwind(p);
            }
        });
    }

    fn revoke_key(&self) {
        match &self.target {
            Target::Local { node, .. } => {
                node.revoke_key();
            }
            Target::Remote { path, .. } => control::revoke(path).expect("revoking the region key"),
        }
    }

    fn segment_order(&self) -> Option<SegmentOrder> {
        Some(match &self.target {
            Target::Local { node, .. } => node.config().segment_order,
            // Client queue pairs of this process pick their own order: the default.
            Target::Remote { .. } => SegmentOrder::default(),
        })
    }
}

/// Runs every conformance check, catching failures: `(name, Ok | Err(message))` each. A
/// failing check's panic is reported as its message, without a backtrace on stderr. Against
/// a remote memnode the key-revocation check is skipped unless `revoke` says otherwise: it
/// would revoke the live node's key and break every other client (`Err` starting "SKIP").
pub fn run_checks(h: &SoftHarness, revoke: bool) -> Vec<(&'static str, Result<(), String>)> {
    let remote = matches!(h.target, Target::Remote { .. });
    let quiet = QuietPanics::new();
    let out = checks::<SoftHarness>()
        .into_iter()
        .map(|(name, check)| {
            if remote && !revoke && name == "revoked_key_is_refused" {
                return (
                    name,
                    Err(
                        "SKIP: revokes the memnode's region key and breaks its other clients; \
                         pass --allow-revoke against a private memnode"
                            .to_string(),
                    ),
                );
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(h)));
            let r = r.map_err(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".into())
            });
            (name, r)
        })
        .collect();
    drop(quiet);
    out
}

/// Silences the panic hook while checks run (their panics are their failure messages), and
/// restores the previous hook afterwards.
type PanicHook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send + 'static>;
struct QuietPanics(Option<PanicHook>);

impl QuietPanics {
    fn new() -> QuietPanics {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        QuietPanics(Some(prev))
    }
}

impl Drop for QuietPanics {
    fn drop(&mut self) {
        if let Some(prev) = self.0.take() {
            std::panic::set_hook(prev);
        }
    }
}

//! The conformance-suite harness of the verbs fabric: a `remora memnode --fabric verbs`
//! reached by rdma_cm, clients as threads each with its own endpoint (its own connection).
use super::endpoint::{
    ConnectOptions, NodeInfo, VerbsEndpoint, connect_qp, connect_qp_as, fence_client, revoke_key,
};
use super::error::VerbsError;
use remora_core::alloc::RemoteAllocator;
use remora_core::block_on::block_on_with;
use remora_core::conformance::{Harness, checks};
use remora_core::fabric::{Endpoint, QueuePair};
use remora_layouts::NodeId;
use std::future::Future;
use std::time::{Duration, Instant};

pub struct VerbsHarness {
    addr: String,
    opts: ConnectOptions,
    info: NodeInfo,
}

impl VerbsHarness {
    /// Connects once to learn the node's geometry.
    pub fn new(addr: &str, opts: ConnectOptions) -> Result<VerbsHarness, VerbsError> {
        let (_qp, info) = connect_qp(addr, &opts)?;
        Ok(VerbsHarness {
            addr: addr.into(),
            opts,
            info,
        })
    }

    pub fn info(&self) -> &NodeInfo {
        &self.info
    }

    /// A fresh endpoint (a new connection).
    pub fn endpoint(&self) -> Result<VerbsEndpoint, VerbsError> {
        VerbsEndpoint::connect(&[&self.addr], &self.opts)
    }
}

/// Spins on `fut`, yielding the core now and then so that the kernel's (Soft-RoCE) and the
/// other clients' threads run on small machines.
pub fn spin_block_on<F: Future>(fut: F) -> F::Output {
    let mut spins = 0u32;
    block_on_with(fut, || {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(32) {
            std::thread::yield_now();
        }
    })
}

impl Harness for VerbsHarness {
    type Ep = VerbsEndpoint;

    fn node(&self) -> NodeId {
        self.info.node
    }

    fn region_len(&self) -> u64 {
        self.info.region_len
    }

    fn dm_len(&self) -> u64 {
        self.info.dm_len
    }

    fn run<T, F>(&self, n: usize, task: T)
    where
        T: Fn(usize, VerbsEndpoint) -> F + Send + Sync,
        F: Future<Output = ()>,
    {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let task = &task;
                    s.spawn(move || {
                        let ep = self
                            .endpoint()
                            .unwrap_or_else(|e| panic!("client {i} could not connect: {e}"));
                        spin_block_on(task(i, ep));
                    })
                })
                .collect();
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
        if let Err(e) = revoke_key(&self.addr, &self.opts) {
            panic!("revoking the region key: {e}");
        }
    }
}

/// A client fenced by another (the lease takeover's first step, `remora_core::lease`) is cut
/// off the node: its WRITE issued after the fence never reaches memory and fails, the fencer
/// keeps working, the fenced id cannot connect again, and fencing a client with no
/// connection left succeeds.
pub fn fenced_client_is_cut_off(h: &VerbsHarness) {
    let node = h.node();
    let a = h.endpoint().expect("client a connects");
    let b = h.endpoint().expect("client b connects");
    let (ida, idb) = (a.client_id(), b.client_id());
    assert!(
        ida != 0 && idb != 0 && ida != idb,
        "client ids {ida:#x} {idb:#x}"
    );
    let (qa, qb) = (a.qp(node).unwrap(), b.qp(node).unwrap());
    let word = spin_block_on(async {
        let alloc = RemoteAllocator::open(qb).await.expect("allocator");
        let w = alloc.alloc_chunk(qb).await.expect("a chunk");
        qa.write(w, &1u64.to_le_bytes())
            .await
            .expect("a writes before the fence");
        w
    });
    spin_block_on(b.fence(node, ida)).expect("b fences a");
    let after = spin_block_on(qa.write(word, &2u64.to_le_bytes()));
    assert!(
        after.is_err(),
        "a's WRITE after its fence completed: {after:?}"
    );
    let mut seen = [0u8; 8];
    spin_block_on(qb.read(word, &mut seen)).expect("b still reads");
    assert_eq!(
        u64::from_le_bytes(seen),
        1,
        "a's WRITE after its fence reached memory"
    );
    spin_block_on(qb.write(word, &3u64.to_le_bytes())).expect("b still writes");
    assert!(
        connect_qp_as(&h.addr, &h.opts, ida).is_err(),
        "a fenced client connected again under its id"
    );
    let again = fence_client(&h.addr, ida, &h.opts).expect("fencing a gone client");
    assert_eq!(again, 0, "nothing left to cut");
}

/// A named check of a verbs memory node.
type Check = (&'static str, fn(&VerbsHarness));

/// Runs every conformance check, and the verbs-only ones, catching failures: `(name,
/// Ok(seconds) | Err(message))`.
pub fn run_checks(
    h: &VerbsHarness,
    mut each: impl FnMut(&str, &Result<f64, String>),
) -> Vec<(&'static str, Result<f64, String>)> {
    let verbs_only: [Check; 1] = [("fenced_client_is_cut_off", fenced_client_is_cut_off)];
    checks::<VerbsHarness>()
        .into_iter()
        .chain(verbs_only)
        .map(|(name, check)| {
            let t0 = Instant::now();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(h)))
                .map(|()| t0.elapsed().as_secs_f64())
                .map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panicked".into())
                });
            each(name, &r);
            (name, r)
        })
        .collect()
}

/// Default step timeout for harness connections.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

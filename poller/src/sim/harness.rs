//! The conformance harness of the sim fabric (`remora_core::conformance::Harness`).
//!
//! Each `run` builds a fresh simulation over the memory image the previous run left (chunks
//! allocated in one run keep their contents in the next), runs the clients as coroutines in
//! virtual time, checks they all finished, and puts the memory back. The region key is an
//! `Arc<AtomicU32>` shared by every simulation, so `revoke_key` works from inside a task.
use super::cluster::{Sim, SimConfig};
use super::exec::Stop;
use super::memory::NodeImage;
use super::model::Model;
use super::qp::SimEndpoint;
use remora_core::conformance::Harness;
use remora_core::fabric::SegmentOrder;
use remora_layouts::NodeId;
use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The sim fabric's `Harness` for the conformance suite: one memory node whose memory
/// outlives each run's simulation (see the module doc).
pub struct SimHarness {
    images: Mutex<Option<Vec<NodeImage>>>,
    key: Arc<AtomicU32>,
    seed: u64,
    model: Model,
    region_len: u64,
    chunk_size: u64,
    dm_len: u64,
    runs: AtomicU64,
    order: SegmentOrder,
}

impl SimHarness {
    /// One memory node of `region_len` bytes (chunks of `chunk_size`) and `dm_len` bytes of
    /// device memory; each run uses seed `seed + run number`.
    pub fn new(
        seed: u64,
        model: Model,
        region_len: u64,
        chunk_size: u64,
        dm_len: u64,
    ) -> Result<SimHarness, String> {
        let img = NodeImage::fresh(region_len, chunk_size, dm_len)
            .map_err(|e| format!("region header: {e:?}"))?;
        Ok(SimHarness {
            key: img.key.clone(),
            images: Mutex::new(Some(vec![img])),
            seed,
            model,
            region_len,
            chunk_size,
            dm_len,
            runs: AtomicU64::new(0),
            order: SegmentOrder::default(),
        })
    }

    /// The same harness with its runs moving segments in `order`.
    pub fn with_segment_order(mut self, order: SegmentOrder) -> SimHarness {
        self.order = order;
        self
    }

    /// The default shape: 16 MiB region, 64 KiB chunks, 4 KiB of device memory.
    pub fn standard(seed: u64, model: Model) -> Result<SimHarness, String> {
        SimHarness::new(seed, model, 16 << 20, 64 << 10, 4096)
    }
}

impl Harness for SimHarness {
    type Ep = SimEndpoint;

    fn node(&self) -> NodeId {
        0
    }
    fn region_len(&self) -> u64 {
        self.region_len
    }
    fn dm_len(&self) -> u64 {
        self.dm_len
    }

    fn run<T, F>(&self, n: usize, task: T)
    where
        T: Fn(usize, SimEndpoint) -> F + Send + Sync,
        F: Future<Output = ()>,
    {
        let run = self.runs.fetch_add(1, Ordering::Relaxed);
        let seed = self.seed.wrapping_add(run);
        let taken = self.images.lock().ok().and_then(|mut g| g.take());
        let Some(images) = taken else {
            panic!("sim harness: memory image lost by an earlier failed run (seed {seed})");
        };
        let cfg = SimConfig {
            compute_nodes: 2,
            memory_nodes: 1,
            chunk_size: self.chunk_size,
            model: self.model.clone(),
            seed,
            segment_order: self.order,
            ..SimConfig::default()
        };
        let mut sim = match Sim::with_images(cfg, images) {
            Ok(s) => s,
            Err(e) => panic!("sim harness: {e}"),
        };
        for i in 0..n {
            match sim.endpoint(i % 2) {
                Ok(ep) => {
                    let client = ep.client();
                    sim.spawn(client, task(i, ep));
                }
                Err(e) => panic!("sim harness: {e}"),
            }
        }
        let r = sim.run();
        assert!(
            r.stop == Stop::AllDone && r.unfinished == 0,
            "sim run {run} did not finish (replay with seed {seed}): {r:?}"
        );
        if let Ok(mut g) = self.images.lock() {
            *g = Some(sim.into_images());
        }
    }

    fn revoke_key(&self) {
        self.key.fetch_add(1, Ordering::AcqRel);
    }

    fn segment_order(&self) -> Option<SegmentOrder> {
        Some(self.order)
    }
}

//! The fabric conformance suite on the sim fabric (harness: `remora_poller::sim::harness`).
use remora_core::conformance::{Harness, run_all, segments_move_in_no_fixed_order};
use remora_core::fabric::SegmentOrder;
use remora_layouts::NodeId;
use remora_poller::sim::Model;
use remora_poller::sim::harness::SimHarness;

#[test]
fn conformance_default_model() {
    run_all(&SimHarness::standard(1, Model::default()).unwrap());
}

#[test]
fn conformance_big_jitter_word_tearing_no_device_memory() {
    let mut m = Model::default();
    m.set("jitter_ns", "500").unwrap();
    m.set("segment_bytes", "8").unwrap();
    run_all(&SimHarness::new(99, m, 16 << 20, 64 << 10, 0).unwrap());
}

#[test]
fn conformance_tiny_receive_queues_and_slow_server() {
    let mut m = Model::default();
    m.set("recv_depth", "1").unwrap();
    m.set("server_handler_ns", "5000").unwrap();
    m.set("rnr_retry", "1000").unwrap();
    run_all(&SimHarness::standard(7, m).unwrap());
}

#[test]
fn conformance_every_segment_order() {
    for order in [SegmentOrder::Ascending, SegmentOrder::ShuffledTailLast] {
        run_all(
            &SimHarness::standard(5, Model::default())
                .unwrap()
                .with_segment_order(order),
        );
    }
}

/// A fabric that claims to shuffle but moves segments in ascending order.
struct Liar(SimHarness);

impl Harness for Liar {
    type Ep = <SimHarness as Harness>::Ep;
    fn node(&self) -> NodeId {
        self.0.node()
    }
    fn region_len(&self) -> u64 {
        self.0.region_len()
    }
    fn dm_len(&self) -> u64 {
        self.0.dm_len()
    }
    fn run<T, F>(&self, n: usize, task: T)
    where
        T: Fn(usize, Self::Ep) -> F + Send + Sync,
        F: std::future::Future<Output = ()>,
    {
        self.0.run(n, task)
    }
    fn revoke_key(&self) {
        self.0.revoke_key()
    }
    fn segment_order(&self) -> Option<SegmentOrder> {
        Some(SegmentOrder::Shuffled)
    }
}

#[test]
fn an_ascending_fabric_that_claims_to_shuffle_is_caught() {
    let liar = Liar(
        SimHarness::standard(3, Model::default())
            .unwrap()
            .with_segment_order(SegmentOrder::Ascending),
    );
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        segments_move_in_no_fixed_order(&liar)
    }));
    let msg = r.expect_err("ascending segments passed as shuffled");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("ascending order"), "{msg}");
    // The honest shuffled fabric passes the same check.
    segments_move_in_no_fixed_order(&SimHarness::standard(3, Model::default()).unwrap());
}

#[test]
fn masked_cas_keeps_other_bits_in_device_and_host_memory() {
    use remora_core::conformance::masked_cas_keeps_other_bits;
    masked_cas_keeps_other_bits(&SimHarness::standard(4, Model::default()).unwrap());
    masked_cas_keeps_other_bits(
        &SimHarness::new(4, Model::default(), 16 << 20, 64 << 10, 0).unwrap(),
    );
}

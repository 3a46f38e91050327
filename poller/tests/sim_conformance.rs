//! The fabric conformance suite on the sim fabric (harness: `remora_poller::sim::harness`).
use remora_core::conformance::run_all;
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

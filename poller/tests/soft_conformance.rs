//! The fabric conformance suite on the soft fabric, within one process.
use remora_core::conformance::run_all;
use remora_poller::soft::NodeConfig;
use remora_poller::soft::harness::SoftHarness;

#[test]
fn conformance_in_process() {
    let h = SoftHarness::in_process(NodeConfig {
        region_len: 32 << 20,
        chunk_size: 64 << 10,
        ..Default::default()
    })
    .expect("memory node");
    run_all(&h);
}

#[test]
fn conformance_without_device_memory() {
    let h = SoftHarness::in_process(NodeConfig {
        region_len: 8 << 20,
        dm_len: 0,
        chunk_size: 64 << 10,
        ..Default::default()
    })
    .expect("memory node");
    remora_core::conformance::device_memory(&h);
    remora_core::conformance::out_of_range_fails_without_touching_memory(&h);
}

#[test]
fn masked_cas_keeps_other_bits_in_device_and_host_memory() {
    for dm_len in [NodeConfig::default().dm_len, 0] {
        let h = SoftHarness::in_process(NodeConfig {
            region_len: 8 << 20,
            dm_len,
            chunk_size: 64 << 10,
            ..Default::default()
        })
        .expect("memory node");
        remora_core::conformance::masked_cas_keeps_other_bits(&h);
    }
}

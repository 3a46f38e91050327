//! Sherman on the simulated cluster: 4 compute nodes × 4 clients on 2 memory nodes, every
//! client running an oracle-checked history, tearing and jitter on, for several seeds.
mod common;
use common::sim_histories;
use remora_core::sherman::{Sherman, ShermanConfig};

#[test]
fn sherman_histories_on_the_sim_cluster() {
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::sherman()
    };
    for seed in 1..=4 {
        sim_histories!(seed, |ep| Sherman::create(ep, cfg));
    }
}

#[test]
fn fg_plus_histories_on_the_sim_cluster() {
    let cfg = ShermanConfig {
        page_size: 256,
        ..ShermanConfig::fg_plus()
    };
    for seed in 1..=2 {
        sim_histories!(seed, |ep| Sherman::create(ep, cfg));
    }
}

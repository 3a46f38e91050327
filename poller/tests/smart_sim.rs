//! SMART on the simulated cluster: 4 compute nodes × 4 clients on 2 memory nodes, every
//! client running an oracle-checked history (`remora_core::kvcheck`), tearing and jitter on,
//! for several seeds and for the ART baseline too.
mod common;
use common::sim_histories;
use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};

#[test]
fn smart_histories_on_the_sim_cluster() {
    let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    // Seed 2 found the frozen-parent-slot race (see `structure::change_slot`).
    for seed in 1..=6 {
        sim_histories!(seed, |ep| Smart::open(ep, cfg));
    }
}

#[test]
fn art_baseline_histories_on_the_sim_cluster() {
    let cfg = SmartConfig::new(Techniques::BASELINE, KeyMode::Fixed(8), 8);
    for seed in 1..=3 {
        sim_histories!(seed, |ep| Smart::open(ep, cfg));
    }
}

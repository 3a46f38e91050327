//! How full CANRT's data nodes are after a load, the figure behind the range-query rows: a
//! range query READs one data node per round trip (`scan_batch` 1, as the paper's §4.4
//! merges only the requests for one node), so its gain over WORT's one request per key is
//! about the keys each node READ returns.
//!
//! remora grows the tree by splitting the full node in two halves (`resize.rs`), so a data
//! node holds about half its slots or more (a rebuild repacks them half full). The paper
//! grows a whole level of prefix nodes at once (`addHeight`, seeds/000 §3.5), which spreads
//! each node's keys over the new level; its 3.1x over WORT at 10,000 keys (§4.4) implies
//! ~2.6-3 keys per node READ. Print the figure with
//! `cargo test --release -p remora-poller --test canrt_fill -- --nocapture`.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer, Growth};
use remora_core::index::KvIndex;
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

fn rng(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Loads `n` random 16-byte keys (15-byte values, the paper's) with one client into data
/// nodes of `slots` slots; returns the reachable data nodes and the slots per node.
fn load(n: u64, slots: u32) -> (usize, u32) {
    let (nodes, slots, _) = load_with(n, slots, Growth::Split, 256);
    (nodes, slots)
}

/// [`load`] with the server growing the tree as `growth` says, over keys of `alphabet`
/// characters per byte (62: `bench --keys string`'s letters and digits; 256: random bytes);
/// also returns the
/// distinct 2-character prefixes of the keys, having read every key back.
fn load_with(n: u64, slots: u32, growth: Growth, alphabet: u64) -> (usize, u32, usize) {
    let out = RefCell::new(None);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        seed: 3,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(CanrtServer::with_growth(growth)))
        .unwrap();
    let ctx = sim.client(0).unwrap();
    let out_ref = &out;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let cfg = CanrtConfig {
            key_len: 16,
            value_cap: 16,
            slots,
            ..CanrtConfig::new(0)
        };
        let t = Canrt::open(ctx.ep(), cfg).await.unwrap();
        let mut s = 0x5eed_u64;
        let mut keys = Vec::new();
        for _ in 0..n {
            let mut k = [0u8; 16];
            if alphabet == 256 {
                k[..8].copy_from_slice(&rng(&mut s).to_be_bytes());
                k[8..].copy_from_slice(&rng(&mut s).to_be_bytes());
            } else {
                for b in &mut k {
                    *b = (rng(&mut s) % alphabet) as u8;
                }
            }
            t.upsert(&k, &[7u8; 15]).await.unwrap();
            keys.push(k);
        }
        let mut buf = [0u8; 16];
        for k in &keys {
            let got = t.get(k, &mut buf).await.unwrap();
            assert_eq!(got.map(|l| &buf[..l]), Some(&[7u8; 15][..]), "key {k:?}");
        }
        let prefixes: std::collections::BTreeSet<[u8; 2]> =
            keys.iter().map(|k| [k[0], k[1]]).collect();
        let v = t.view();
        *out_ref.borrow_mut() = Some((v.order().len(), cfg.slots, prefixes.len()));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    out.into_inner().unwrap()
}

#[test]
fn data_nodes_stay_about_half_full_or_more() {
    for n in [1_000u64, 10_000] {
        let (nodes, slots) = load(n, CanrtConfig::new(0).slots);
        let per = n as f64 / nodes as f64;
        println!(
            "{n} random 16-byte keys: {nodes} reachable data nodes of {slots} slots, {per:.1} \
             keys per node (the paper's range row implies ~2.6-3 per node READ)"
        );
        assert!(
            per >= 0.45 * f64::from(slots) && per <= f64::from(slots),
            "{n} keys in {nodes} nodes of {slots} slots"
        );
    }
}

/// Smaller nodes, smaller fill: 6-slot nodes (`bench --canrt-slots 6`, the repro's `CANRT
/// (6-slot nodes)` range series) hold about 3 keys each, the fill the paper's range ratio
/// implies, with the same halving splits.
#[test]
fn six_slot_nodes_hold_about_three_keys() {
    let n = 10_000u64;
    let (nodes, slots) = load(n, 6);
    let per = n as f64 / nodes as f64;
    println!(
        "{n} random 16-byte keys: {nodes} reachable data nodes of {slots} slots, {per:.2} keys per node"
    );
    assert_eq!(slots, 6);
    assert!((2.6..=4.5).contains(&per), "{per:.2} keys per node");
}

/// The paper's geometry (`Growth::WholeLevel`, `bench --canrt-growth whole-level`): a data
/// node per key prefix, grown a whole level at a time, and keys of prefixes with no node of
/// their own gathered until a node's worth of them triggers a rebuild (addWidth). Random
/// 62-character strings at 10,000 keys take two levels (3,844 prefixes), so a node holds
/// ~2.6 keys, the paper's implied fill, where split growth leaves ~20 (the test above).
#[test]
fn whole_level_growth_gives_each_prefix_its_node() {
    for n in [2_000u64, 10_000] {
        let (nodes, slots, prefixes) = load_with(n, 32, Growth::WholeLevel, 62);
        let per = n as f64 / nodes as f64;
        println!(
            "{n} random 62-character keys, whole-level growth: {nodes} reachable data nodes \
             of {slots} slots, {prefixes} distinct 2-character prefixes, {per:.2} keys per node"
        );
        // Every prefix has its node but for at most a node's worth (`slots`) of keys that
        // arrived after the last rebuild, each of which may share a neighbour's node.
        assert!(
            nodes + slots as usize >= prefixes && nodes <= prefixes,
            "{nodes} nodes for {prefixes} prefixes"
        );
        assert!(per < 4.0, "{per:.2} keys per node");
    }
}

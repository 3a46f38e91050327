//! The paper's geometry (`Growth::WholeLevel`): `plan_per_char` gives every `k`-character
//! prefix its own data node and picks the smallest `k` at which none holds more than the
//! target, where `plan` packs neighbouring prefixes into nodes of up to the target.
use super::super::build::{plan, plan_per_char};
use std_alloc::vec::Vec;

/// `n` distinct 16-byte keys of 62 characters per byte, sorted, as `u128`s.
fn keys62(n: usize) -> Vec<u128> {
    let mut s = 0x9e37_79b9_u64;
    let mut out = Vec::new();
    while out.len() < n {
        let mut k = 0u128;
        for _ in 0..16 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            k = k << 8 | u128::from((s % 62) as u8);
        }
        out.push(k);
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The distinct top-`bytes`-byte prefixes of sorted keys.
fn prefixes(keys: &[u128], bytes: u32) -> usize {
    let mut p: Vec<u128> = keys.iter().map(|k| k >> (128 - 8 * bytes)).collect();
    p.dedup();
    p.len()
}

#[test]
fn per_char_plans_a_data_node_per_prefix() {
    let keys = keys62(10_000);
    let p = plan_per_char(&keys, 31, 16).unwrap().unwrap();
    // 10,000 keys over 62 first characters are ~161 each, over 31: two levels, 3,844
    // possible prefixes, a node each.
    assert_eq!(p.groups.len(), prefixes(&keys, 2));
    for &(a, b) in &p.groups {
        assert!(b > a && b - a <= 31, "a node of {} keys", b - a);
        assert_eq!(keys[a] >> 112, keys[b - 1] >> 112, "one prefix per node");
    }
    // The nodes cover every key once, in key order.
    let mut at = 0;
    for &(a, b) in &p.groups {
        assert_eq!(a, at);
        at = b;
    }
    assert_eq!(at, keys.len());
    // Packing fills nodes up to the target instead: far fewer, fuller nodes.
    let packed = plan(&keys, 16, 16).unwrap().unwrap();
    assert!(packed.groups.len() * 3 < p.groups.len());
}

#[test]
fn per_char_adds_a_level_when_a_prefix_overflows() {
    let keys = keys62(2_000);
    // ~32 keys per first character: one level cannot hold 31, two can.
    let p = plan_per_char(&keys, 31, 16).unwrap().unwrap();
    assert_eq!(p.groups.len(), prefixes(&keys, 2));
    // A target of 1 needs as many levels as it takes to separate every key.
    let p = plan_per_char(&keys, 1, 16).unwrap().unwrap();
    assert_eq!(p.groups.len(), keys.len());
    // A target no prefix reaches keeps one level.
    let p = plan_per_char(&keys, 2_000, 16).unwrap().unwrap();
    assert_eq!(p.groups.len(), prefixes(&keys, 1));
}

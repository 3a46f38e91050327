//! The carry-less CRC-64/ECMA-182 against the `crc` crate's tables and the bitwise definition.
extern crate std;
use super::*;
use proptest::prelude::*;
use std::vec::Vec;

/// The `crc` crate's CRC-64/ECMA-182: what Catfish's nodes were checksummed with before.
fn reference(data: &[u8]) -> u64 {
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_ECMA_182).checksum(data)
}

/// Deterministic bytes (splitmix64).
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

#[test]
fn check_value() {
    let m = b"123456789";
    assert_eq!(CHECK, 0x6C40_DF5F_0B49_7347);
    assert_eq!(crc::CRC_64_ECMA_182.check, CHECK);
    assert_eq!(reference(m), CHECK);
    assert_eq!(checksum(m), CHECK);
    assert_eq!(update_table(INIT, m) ^ XOROUT, CHECK);
    assert_eq!(update_bitwise(INIT, m) ^ XOROUT, CHECK);
    if let Some(r) = update_clmul(INIT, m) {
        assert_eq!(r ^ XOROUT, CHECK);
    }
    assert_eq!(checksum(b""), 0);
}

/// The detection agrees with std's (x86_64: this machine's CPU has the features, so the
/// carry-less path is the one the other tests exercise).
#[test]
fn detection_matches_std() {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    let expected = std::is_x86_feature_detected!("pclmulqdq")
        && std::is_x86_feature_detected!("ssse3")
        && std::is_x86_feature_detected!("sse4.1");
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let expected = false;
    assert_eq!(has_clmul(), expected);
    assert_eq!(update_clmul(INIT, b"x").is_some(), expected);
}

/// Every length 0..=4096 at every start alignment 0..16, from random registers: the
/// carry-less CRC, the dispatcher and the tables agree with the `crc` crate.
#[test]
fn every_length_and_alignment_matches_the_tables() {
    let buf = bytes(1, 4096 + 16);
    let mut state = 0x0123_4567_89AB_CDEFu64;
    for len in 0..=4096usize {
        for align in 0..16 {
            let m = &buf[align..align + len];
            let want = reference(m);
            assert_eq!(checksum(m), want, "len {len} align {align}");
            assert_eq!(update_table(INIT, m) ^ XOROUT, want, "table len {len}");
            if let Some(r) = update_clmul(INIT, m) {
                assert_eq!(r ^ XOROUT, want, "clmul len {len} align {align}");
            }
            // From an arbitrary register (what a second piece of a message starts from).
            state = state.rotate_left(7) ^ want;
            let t = update_table(state, m);
            assert_eq!(
                update(state, m),
                t,
                "state {state:#x} len {len} align {align}"
            );
        }
    }
}

/// The fallback against the bitwise definition (two independent statements of the CRC).
#[test]
fn tables_match_the_bitwise_definition() {
    let buf = bytes(2, 600);
    for len in 0..600 {
        for state in [0, !0, 0xDEAD_BEEF_0BAD_F00D] {
            let m = &buf[..len];
            assert_eq!(
                update_table(state, m),
                update_bitwise(state, m),
                "len {len}"
            );
        }
    }
}

/// Splitting a message anywhere gives the same register: `update` chains.
#[test]
fn pieces_chain() {
    let m = bytes(3, 300);
    let whole = checksum(&m);
    for cut in 0..=m.len() {
        let s = update(INIT, &m[..cut]);
        assert_eq!(update(s, &m[cut..]) ^ XOROUT, whole, "cut at {cut}");
    }
}

/// One flipped bit anywhere changes the checksum (CRCs detect every single-bit error).
#[test]
fn single_bit_flips_are_caught() {
    let m = bytes(4, 200);
    let good = checksum(&m);
    for bit in 0..m.len() * 8 {
        let mut b = m.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        assert_ne!(checksum(&b), good, "bit {bit}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn clmul_equals_tables(data in proptest::collection::vec(any::<u8>(), 0..5000),
                           state in any::<u64>(), skip in 0usize..16) {
        let m = &data[skip.min(data.len())..];
        let t = update_table(state, m);
        prop_assert_eq!(update(state, m), t);
        if let Some(r) = update_clmul(state, m) {
            prop_assert_eq!(r, t);
        }
    }
}

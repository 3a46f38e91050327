//! Micro benchmark of SMART's leaf checksum: the slice-by-16 tables against the carry-less
//! multiply, over leaf sizes, hot (the same leaf again and again) and cold (caches swept
//! between calls, as when a lookup's other work has evicted the 32 KiB of tables).
//!
//! `cargo bench -p remora-layouts --bench leaf_crc` (add `-- --quick` for fewer rounds).
//! Prints ns per checksum: hot from batches of 256 back-to-back calls, cold from single timed
//! calls less an empty timed call; each the mean of the middle half of its samples.
use remora_layouts::smart::{
    LeafStatus, LeafView, encode_leaf, leaf_bytes, leaf_crc, leaf_crc_table,
};
use std::hint::black_box;
use std::time::Instant;

/// Bytes written between cold calls: more than this machine's L2 per core.
const SWEEP: usize = 4 << 20;

fn hot(f: fn(bool, &[u8]) -> u64, data: &[u8], batches: usize) -> f64 {
    const BATCH: u32 = 256;
    let mut acc = 0u64;
    let mut per = Vec::with_capacity(batches);
    for b in 0..batches + batches / 10 {
        let t = Instant::now();
        for _ in 0..BATCH {
            acc ^= f(true, black_box(data));
        }
        if b >= batches / 10 {
            per.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
        }
    }
    black_box(acc);
    trimmed_mean(&mut per)
}

/// The mean of the middle half: robust to preemptions on a shared machine, and finer than
/// the clock's step.
fn trimmed_mean(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    let q = v.len() / 4;
    let mid = &v[q..v.len() - q];
    mid.iter().sum::<f64>() / mid.len() as f64
}

fn cold(f: fn(bool, &[u8]) -> u64, data: &[u8], sweep: &mut [u8], rounds: usize) -> f64 {
    let mut t_crc = Vec::with_capacity(rounds);
    let mut t_empty = Vec::with_capacity(rounds);
    for r in 0..rounds {
        // Evict: write every cache line of the sweep buffer, then bring the leaf back (the
        // NIC or the fake device has just written it, so it is in cache in a real lookup).
        for i in (0..sweep.len()).step_by(64) {
            sweep[i] = sweep[i].wrapping_add(r as u8);
        }
        black_box(&sweep);
        let mut s = 0u8;
        for b in data.iter().step_by(64) {
            s ^= *b;
        }
        black_box(s);
        let t = Instant::now();
        let c = f(true, black_box(data));
        let e = t.elapsed().as_nanos() as f64;
        black_box(c);
        t_crc.push(e);
        let t = Instant::now();
        let e = t.elapsed().as_nanos() as f64;
        t_empty.push(e);
    }
    (trimmed_mean(&mut t_crc) - trimmed_mean(&mut t_empty)).max(0.0)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (batches, rounds) = if quick { (200, 2_000) } else { (2_000, 20_000) };
    let mut sweep = vec![0u8; SWEEP];
    println!(
        "carry-less multiply available: {}",
        remora_layouts::crc64xz::has_clmul()
    );
    println!("leaf B | CRC B | hot table | hot clmul | cold table | cold clmul  (ns per leaf)");
    // 8-byte keys; value areas of 8 B (remora perf / fake verbs), 64, 256, 1000 and the largest.
    for val_cap in [8usize, 64, 256, 1000, 3984] {
        let n = leaf_bytes(8, val_cap);
        let mut buf = vec![0u8; n];
        let val: Vec<u8> = (0..val_cap).map(|i| i as u8).collect();
        encode_leaf(
            &mut buf,
            0,
            LeafStatus::live(true),
            0,
            b"kkkkkkkk",
            &val,
            val_cap,
        )
        .expect("leaf fits");
        let v = LeafView::decode(&buf).expect("leaf decodes");
        let data = v.checksummed();
        assert_eq!(leaf_crc(true, data), leaf_crc_table(true, data));
        let (ht, hc) = (
            hot(leaf_crc_table, data, batches),
            hot(leaf_crc, data, batches),
        );
        let (ct, cc) = (
            cold(leaf_crc_table, data, &mut sweep, rounds),
            cold(leaf_crc, data, &mut sweep, rounds),
        );
        println!(
            "{n:6} | {:5} | {ht:9.1} | {hc:9.1} | {ct:10.1} | {cc:10.1}",
            data.len() + 1
        );
    }
}

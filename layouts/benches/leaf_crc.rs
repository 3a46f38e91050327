//! Micro benchmark of SMART's leaf checksum (CRC-64/XZ) and Catfish's node checksum
//! (CRC-64/ECMA-182): the slice-by-16 tables against the carry-less multiply, over leaf sizes
//! and node fanouts, hot (the same leaf again and again) and cold (caches swept between calls,
//! as when a lookup's other work has evicted the 32 KiB of tables).
//!
//! `cargo bench -p remora-layouts --bench leaf_crc` (add `-- --quick` for fewer rounds).
//! Prints ns per checksum: hot from batches of 256 back-to-back calls, cold from single timed
//! calls less an empty timed call; each the mean of the middle half of its samples.
use remora_layouts::catfish::{Entry, Node, Rect, node_checksum_offset, node_crc};
use remora_layouts::crc64ecma;
use remora_layouts::smart::{
    LeafStatus, LeafView, encode_leaf, leaf_bytes, leaf_crc, leaf_crc_table,
};
use std::hint::black_box;
use std::time::Instant;

/// Bytes written between cold calls: more than this machine's L2 per core.
const SWEEP: usize = 4 << 20;

fn hot(f: impl Fn(&[u8]) -> u64, data: &[u8], batches: usize) -> f64 {
    const BATCH: u32 = 256;
    let mut acc = 0u64;
    let mut per = Vec::with_capacity(batches);
    for b in 0..batches + batches / 10 {
        let t = Instant::now();
        for _ in 0..BATCH {
            acc ^= f(black_box(data));
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

fn cold(f: impl Fn(&[u8]) -> u64, data: &[u8], sweep: &mut [u8], rounds: usize) -> f64 {
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
        let c = f(black_box(data));
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
        let table = |d: &[u8]| leaf_crc_table(true, d);
        let clmul = |d: &[u8]| leaf_crc(true, d);
        let (ht, hc) = (hot(table, data, batches), hot(clmul, data, batches));
        let (ct, cc) = (
            cold(table, data, &mut sweep, rounds),
            cold(clmul, data, &mut sweep, rounds),
        );
        println!(
            "{n:6} | {:5} | {ht:9.1} | {hc:9.1} | {ct:10.1} | {cc:10.1}",
            data.len() + 1
        );
    }
    println!();
    println!("Catfish node checksum (CRC-64/ECMA-182 over head version + entries)");
    println!(
        "fanout | node B | CRC B | hot table | hot clmul | cold table | cold clmul  (ns per node)"
    );
    // The default fanout and the four the paper evaluates (15, 30, 70, 130).
    for fanout in [15usize, 16, 30, 70, 130] {
        let mut node = Node::with_fanout(0, fanout);
        for i in 0..fanout as i32 {
            let r = Rect::new(i * 11, -i, i * 11 + 9, 40 + i).expect("a rectangle");
            node.push(Entry {
                rect: r,
                ptr: i as u64 + 1,
            })
            .expect("node has room");
        }
        let img = node.encode(2);
        let cs = node_checksum_offset(fanout);
        let data = &img[..cs];
        let table = |d: &[u8]| crc64ecma::update_table(crc64ecma::INIT, d);
        assert_eq!(node_crc(data), table(data));
        let (ht, hc) = (hot(table, data, batches), hot(node_crc, data, batches));
        let (ct, cc) = (
            cold(table, data, &mut sweep, rounds),
            cold(node_crc, data, &mut sweep, rounds),
        );
        println!(
            "{fanout:6} | {:6} | {cs:5} | {ht:9.1} | {hc:9.1} | {ct:10.1} | {cc:10.1}",
            img.len()
        );
    }
}

//! The client-CPU calibration table: each kind of client work the sim charges
//! (`remora::core::work::Work`) timed on this host with the code paths that do it, beside the
//! sim model's figure for the same work. Run it in release, alone, and read the table:
//!
//! `cargo test --release -p remora-bins cpu_calibration -- --nocapture`
//!
//! Each figure is the minimum over repetitions of the mean over a batch (the minimum beats a
//! shared machine's noise: interference only ever adds time). The test fails only on a gross
//! error (a ratio outside 0.33-3x), so that a noisy machine does not flake it; the printed
//! ratios are the figure (goal: within 10%).
use super::ycsb::{Distribution, KeyChooser, KeyType, Rng, key_of_within};
use remora::core::erda::object_checksum;
use remora::core::work::Work;
use remora::layouts::catfish::{FANOUT, MAX_FANOUT, Rect, node_checksum_offset, node_crc};
use remora::layouts::sherman::{
    Geometry, KEY_INFINITY, PageHeader, encode_leaf_entry, internal_entry, seal,
    set_internal_entry, verify_leaf,
};
use remora::layouts::smart::leaf_crc;
use remora::poller::sim::Model;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

/// Repetitions per row; each times a batch of `iters` runs.
const REPS: usize = 41;

/// Minimum over [`REPS`] of the mean time of one run of `f`, in ns.
fn time_ns(iters: usize, mut f: impl FnMut(usize)) -> f64 {
    for i in 0..iters {
        f(i); // warm caches and branch predictors
    }
    let mut best = f64::MAX;
    for _ in 0..REPS {
        let t = Instant::now();
        for i in 0..iters {
            f(i);
        }
        best = best.min(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    best
}

/// The sim's CPU time for `w` under model `m`, in ns (as the engine computes it).
fn model_ns(m: &Model, w: Work) -> f64 {
    let s = m.client_cpu_scale;
    let n = w.units() as f64;
    let (call, per) = match w {
        Work::Crc32c(_) => (m.client_crc32c_call_ns, m.client_crc32c_ns_per_byte),
        Work::Crc64(_) => (m.client_crc64_call_ns, m.client_crc64_ns_per_byte),
        Work::Decode(_) => (0.0, m.client_decode_ns_per_byte),
        Work::Scan(_) => (0.0, m.client_scan_ns),
        Work::Probe(_) => (0.0, m.client_probe_ns),
        Work::Compare(_) => (0.0, m.client_compare_ns),
        Work::Sort(_) => (0.0, m.client_sort_ns),
        Work::Rect(_) => (0.0, m.client_rect_ns),
        Work::KeyGen(_) => (0.0, m.client_keygen_ns),
        Work::Crc64Clmul(_) => (m.client_crc64clmul_call_ns, m.client_crc64clmul_ns_per_byte),
    };
    let t = match w {
        // The instruction line from the hardware threshold on, as the engine charges it.
        Work::Crc32c(b) if b as f64 >= m.client_crc32c_hw_min_bytes => {
            m.client_crc32c_hw_call_ns + n * m.client_crc32c_hw_ns_per_byte
        }
        _ => call + n * per,
    };
    s * t
}

/// A sealed Sherman internal page with `n` separators.
fn internal_page(g: &Geometry, n: usize) -> Vec<u8> {
    let mut p = vec![0u8; g.page_size];
    let h = PageHeader {
        front_version: 2,
        meta: PageHeader::pack_meta(1, false, n),
        low_fence: 0,
        high_fence: KEY_INFINITY,
        leftmost: 8,
        ..Default::default()
    };
    h.encode(&mut p);
    for i in 0..n {
        set_internal_entry(&mut p, g, i, 100 * (i as u64 + 1), 64 * (i as u64 + 2));
    }
    seal(&mut p, g);
    p
}

/// A sealed, full Sherman leaf.
fn full_leaf(g: &Geometry) -> Vec<u8> {
    let mut p = vec![0u8; g.page_size];
    let v = 4;
    let h = PageHeader {
        front_version: v,
        meta: PageHeader::pack_meta(0, true, 0),
        low_fence: 0,
        high_fence: KEY_INFINITY,
        ..Default::default()
    };
    h.encode(&mut p);
    for s in 0..g.leaf_capacity() {
        let at = g.leaf_entry_offset(s);
        let out = &mut p[at..at + g.leaf_entry_size()];
        encode_leaf_entry(out, 1000 + s as u64, &[7u8; 8], 1, true, v);
    }
    seal(&mut p, g);
    p
}

/// One row: what was timed, the work as the index code states it, the measured time.
struct Row {
    what: &'static str,
    work: Work,
    measured_ns: f64,
}

fn measure() -> Vec<Row> {
    let mut rows = Vec::new();
    // CRC-32C through Erda's object checksum (header word + key + value), both sides of its
    // hardware threshold.
    let buf = vec![0x5au8; 4096 + 16];
    for (what, len) in [
        ("erda object_checksum, 40 B", 40usize),
        ("erda object_checksum, 120 B", 120),
        ("erda object_checksum, 256 B", 256),
        ("erda object_checksum, 1 KiB", 1024),
        ("erda object_checksum, 4 KiB", 4000),
    ] {
        let t = time_ns(5_000, |i| {
            black_box(object_checksum(
                &buf[..8],
                black_box(&buf[8 + (i & 7)..len + (i & 7)]),
            ));
        });
        rows.push(Row {
            what,
            work: Work::Crc32c(len),
            measured_ns: t,
        });
    }
    // CRC-64, slice-by-16: the table line (both CRC-64s on a CPU without the carry-less
    // multiply, or a target built without SSE).
    let crc64: crc::Crc<u64, crc::Table<16>> =
        crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_ECMA_182);
    for (what, len) in [
        ("crc64 tables (no clmul), 64 B", 64usize),
        ("crc64 tables (no clmul), 1 KiB", 1024),
    ] {
        let t = time_ns(5_000, |i| {
            let mut d = crc64.digest();
            d.update(&[1]);
            d.update(black_box(&buf[(i & 7)..len - 1 + (i & 7)]));
            black_box(d.finalize());
        });
        rows.push(Row {
            what,
            work: Work::Crc64(len),
            measured_ns: t,
        });
    }
    // CRC-64/XZ by carry-less multiply: SMART's leaf checksum as core::smart::remote
    // computes it (the valid byte folded in, then the meta word, key and value area).
    for (what, len) in [
        ("smart leaf_crc (clmul), 64 B", 64usize),
        ("smart leaf_crc (clmul), 1 KiB", 1024),
    ] {
        let t = time_ns(5_000, |i| {
            black_box(leaf_crc(true, black_box(&buf[(i & 7)..len - 1 + (i & 7)])));
        });
        rows.push(Row {
            what,
            work: Work::Crc64Clmul(len),
            measured_ns: t,
        });
    }
    // CRC-64/ECMA-182 by carry-less multiply: Catfish's node check (catfish::node_crc over
    // head version + entries) at the default fanout, 30 and the largest, 130.
    for (what, fanout) in [
        ("catfish node_crc (clmul), fanout 16", FANOUT),
        ("catfish node_crc (clmul), fanout 30", 30),
        ("catfish node_crc (clmul), fanout 130", MAX_FANOUT),
    ] {
        let len = node_checksum_offset(fanout);
        let t = time_ns(5_000, |i| {
            black_box(node_crc(black_box(&buf[(i & 7)..len + (i & 7)])));
        });
        rows.push(Row {
            what,
            work: Work::Crc64Clmul(len),
            measured_ns: t,
        });
    }
    let g = Geometry::new(1024, 8).expect("Sherman's geometry");
    // Decode: a Sherman internal page checked and decoded (its checksum covers the page).
    let page = internal_page(&g, g.internal_capacity());
    let t = time_ns(5_000, |_| {
        black_box(PageHeader::decode(black_box(&page), &g).expect("a sealed page"));
    });
    rows.push(Row {
        what: "sherman internal page decode, 1 KiB",
        work: Work::Decode(g.page_size),
        measured_ns: t,
    });
    // Scan: every slot of a full Sherman leaf verified and matched.
    let leaf = full_leaf(&g);
    let cap = g.leaf_capacity();
    let t = time_ns(5_000, |_| {
        let mut found = 0u64;
        verify_leaf(black_box(&leaf), &g, 4, |s, _| found += s as u64).expect("a whole leaf");
        black_box(found);
    });
    rows.push(Row {
        what: "sherman verify_leaf, 39 slots",
        work: Work::Scan(cap),
        measured_ns: t,
    });
    // Compare: a binary search over the internal page's separators (as sherman's child_for).
    let n = g.internal_capacity();
    let steps = (usize::BITS - n.leading_zeros()) as usize;
    let t = time_ns(10_000, |i| {
        let key = black_box(((i * 7919) % (100 * n)) as u64);
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (k, _) = internal_entry(&page, &g, mid).expect("an entry");
            if k <= key { lo = mid + 1 } else { hi = mid }
        }
        black_box(lo);
    });
    rows.push(Row {
        what: "sherman internal binary search, 59 entries",
        work: Work::Compare(steps),
        measured_ns: t,
    });
    // Probe: Sherman's index cache (a BTreeMap of level-1 pages by low fence), 4096 pages.
    let mut cache: BTreeMap<u64, [u64; 4]> = BTreeMap::new();
    for i in 0..4096u64 {
        cache.insert(i * 1_000_003, [i; 4]);
    }
    let mut rng = Rng::new(7);
    let keys: Vec<u64> = (0..4096).map(|_| rng.below(4096 * 1_000_003)).collect();
    let t = time_ns(10_000, |i| {
        black_box(cache.range(..=keys[i & 4095]).next_back());
    });
    rows.push(Row {
        what: "index cache probe (BTreeMap, 4096 pages)",
        work: Work::Probe(1),
        measured_ns: t,
    });
    // Sort: a leaf's worth of (key, slot, len) entries, as a Sherman scan sorts them.
    let mut rng = Rng::new(11);
    let shuffled: Vec<[(u64, usize, usize); 39]> = (0..64)
        .map(|_| core::array::from_fn(|s| (rng.next_u64(), s, 8)))
        .collect();
    let copy = time_ns(5_000, |i| {
        black_box(shuffled[i & 63]);
    });
    let t = time_ns(5_000, |i| {
        let mut b = shuffled[i & 63];
        b.sort_unstable_by_key(|e| e.0);
        black_box(b);
    });
    rows.push(Row {
        what: "sort of 39 scan entries",
        work: Work::Sort(39),
        measured_ns: (t - copy).max(0.0),
    });
    // Rect: a Catfish node's entries tested against a search window.
    let mut rng = Rng::new(13);
    let rects: Vec<Rect> = (0..64)
        .map(|_| {
            let (x, y) = (rng.below(1 << 20) as i32, rng.below(1 << 20) as i32);
            Rect::new(x, y, x + 500, y + 500).expect("a rectangle")
        })
        .collect();
    let window = Rect::new(1 << 18, 1 << 18, 1 << 19, 1 << 19).expect("a window");
    let t = time_ns(10_000, |_| {
        let w = black_box(window);
        black_box(rects.iter().filter(|r| r.intersects(&w)).count());
    });
    rows.push(Row {
        what: "catfish rect intersects, 64 entries",
        work: Work::Rect(64),
        measured_ns: t,
    });
    // KeyGen: the bench's zipfian chooser and key bytes.
    let mut chooser = KeyChooser::new(Distribution::Zipfian, 1_000_000, 0.99);
    let mut rng = Rng::new(17);
    let mut key = [0u8; 32];
    let t = time_ns(10_000, |_| {
        let n = chooser.next(&mut rng, 1_000_000);
        black_box(key_of_within(KeyType::Int, n, &mut key, 32));
    });
    rows.push(Row {
        what: "ycsb zipfian key, 8 B int",
        work: Work::KeyGen(1),
        measured_ns: t,
    });
    rows
}

#[test]
fn client_cpu_model_matches_the_host() {
    if cfg!(debug_assertions) {
        eprintln!("client-CPU calibration: timings are only meaningful in release; skipped");
        return;
    }
    let m = Model::default();
    let rows = measure();
    println!(
        "{:<44} | {:<14} | {:>9} | {:>11} | {:>5}",
        "code path", "work", "model ns", "measured ns", "ratio"
    );
    let mut bad = Vec::new();
    for r in &rows {
        let model = model_ns(&m, r.work);
        let ratio = model / r.measured_ns.max(1e-3);
        println!(
            "{:<44} | {:<14} | {:>9.1} | {:>11.1} | {:>5.2}",
            r.what,
            format!("{}({})", r.work.name(), r.work.count()),
            model,
            r.measured_ns,
            ratio
        );
        if !(0.33..=3.0).contains(&ratio) {
            bad.push((r.what, ratio));
        }
    }
    assert!(
        bad.is_empty(),
        "client CPU model off by more than 3x on this host: {bad:?}"
    );
}

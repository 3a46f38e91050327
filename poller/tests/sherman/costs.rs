//! What Sherman's mechanisms cost: the counters of an update against FG+, and the CPU of the
//! page verification per READ.
use super::*;

fn counters_of(ep: &SoftEndpoint) -> Snapshot {
    ep.snapshot()
}

/// Bytes and round trips of a non-split update: Sherman writes back one entry and unlocks in
/// the same doorbell; FG+ writes the whole page and unlocks in a second one.
#[test]
fn update_costs_entry_bytes_and_fewer_round_trips_than_fg_plus() {
    let measure = |cfg: ShermanConfig| -> (f64, f64) {
        let n = node();
        let ep = n.endpoint().unwrap();
        block_on(async {
            let t = Sherman::create(&ep, cfg).await.unwrap();
            for i in 0..100u64 {
                t.upsert(&k(i), &v(i)).await.unwrap();
            }
            let mut out = [0u8; 8];
            for i in 0..100u64 {
                t.get(&k(i), &mut out).await.unwrap(); // warm the index cache
            }
            let before = counters_of(&ep);
            for i in 0..100u64 {
                assert!(t.update(&k(i), &v(i + 1)).await.unwrap());
            }
            let d = counters_of(&ep) - before;
            (d.bytes_out as f64 / 100.0, d.round_trips as f64 / 100.0)
        })
    };
    let (sb, sr) = measure(ShermanConfig::sherman());
    let (fb, fr) = measure(ShermanConfig::fg_plus());
    let no_combine = measure(ShermanConfig {
        combine_commands: false,
        ..ShermanConfig::sherman()
    });
    eprintln!(
        "per update: sherman {sb} B out, {sr} RT; fg+ {fb} B out, {fr} RT; sherman w/o combination {} RT",
        no_combine.1
    );
    // lock CAS (16) + redo record (32 + entry) + redo pointer (8) + entry (24) + unlock (8)
    // vs lock CAS + redo record (32 + entry: FG+'s page is rebuilt from it) + redo pointer +
    // whole page (1024) + unlock: the record is what lets the next lock holder repair a
    // write torn by a dying writer.
    assert_eq!(sb, 16.0 + (32.0 + 24.0) + 8.0 + 24.0 + 8.0);
    assert_eq!(fb, 16.0 + (32.0 + 24.0) + 8.0 + 1024.0 + 8.0);
    // lock, read, write-back+unlock vs lock, read, write-back, unlock
    assert_eq!(sr, 3.0);
    assert_eq!(fr, 4.0);
    assert_eq!(no_combine.1, 4.0);
}

/// What the page verification costs per READ, against the old front == rear check: CPU per
/// page image (1 KiB, 8-byte values: a full leaf of 39 entries and a full internal page of 59)
/// and per lookup on the soft fabric. Prints the figures (run with `--release --nocapture`
/// for meaningful numbers) and checks that both checks decide the same on whole pages.
#[test]
fn verification_cost_per_read() {
    use remora_core::fabric::SegmentOrder;
    use remora_core::sherman::PageCheck;
    use remora_layouts::sherman::{
        Geometry, KEY_INFINITY, PageHeader, Slot, encode_leaf_entry, leaf_slot, seal,
        set_internal_entry, verify_leaf,
    };
    use std::hint::black_box;
    use std::time::Instant;
    let g = Geometry::new(1024, 8).unwrap();
    let header = |level: u8, count: usize| PageHeader {
        front_version: 41,
        meta: PageHeader::pack_meta(level, level == 0, count),
        low_fence: 0,
        high_fence: KEY_INFINITY,
        leftmost: 64,
        ..Default::default()
    };
    let mut leaf = vec![0u8; 1024];
    header(0, 0).encode(&mut leaf);
    for s in 0..g.leaf_capacity() {
        let at = g.leaf_entry_offset(s);
        let key = 1000 - s as u64;
        encode_leaf_entry(&mut leaf[at..at + 24], key, &v(key), 1, true, 41);
    }
    seal(&mut leaf, &g);
    let mut internal = vec![0u8; 1024];
    header(1, g.internal_capacity()).encode(&mut internal);
    for i in 0..g.internal_capacity() {
        set_internal_entry(&mut internal, &g, i, i as u64 * 10, 4096 * (i as u64 + 2));
    }
    seal(&mut internal, &g);
    let want = 1000 - 20; // in slot 20
    let new_leaf = |p: &[u8]| -> Option<usize> {
        let h = PageHeader::decode(p, &g).ok()?;
        let mut found = None;
        verify_leaf(p, &g, h.front_version, |s, slot| {
            if matches!(slot, Slot::Live { key, .. } if key == want) {
                found = Some(s);
            }
        })
        .ok()?;
        found
    };
    let old_leaf = |p: &[u8]| -> Option<usize> {
        PageHeader::decode_front_rear(p, &g).ok()?;
        (0..g.leaf_capacity()).find(|&s| {
            let at = g.leaf_entry_offset(s);
            p[at + 8..at + 16] == want.to_le_bytes()
                && matches!(leaf_slot(p, &g, s, 41), Ok(Slot::Live { .. }))
        })
    };
    assert_eq!(new_leaf(&leaf), Some(20));
    assert_eq!(old_leaf(&leaf), Some(20));
    assert!(PageHeader::decode(&internal, &g).is_ok());
    let iters = 20_000u32;
    let time = |f: &dyn Fn() -> bool| {
        let t0 = Instant::now();
        for _ in 0..iters {
            assert!(black_box(f()));
        }
        t0.elapsed().as_nanos() as f64 / iters as f64
    };
    let leaf_new = time(&|| new_leaf(black_box(&leaf)).is_some());
    let leaf_old = time(&|| old_leaf(black_box(&leaf)).is_some());
    let int_new = time(&|| PageHeader::decode(black_box(&internal), &g).is_ok());
    let int_old = time(&|| PageHeader::decode_front_rear(black_box(&internal), &g).is_ok());
    eprintln!(
        "verify a 1 KiB page: leaf {leaf_new:.0} ns (front==rear + one entry: {leaf_old:.0} ns), \
         internal {int_new:.0} ns (front==rear: {int_old:.0} ns)"
    );

    // End to end, on ascending segments so that the old check is sound there too.
    let per_lookup = |check: PageCheck| -> f64 {
        let n = SoftMemoryNode::create(NodeConfig {
            region_len: 64 << 20,
            chunk_size: 256 << 10,
            segment_order: SegmentOrder::Ascending,
            ..NodeConfig::default()
        })
        .unwrap();
        let ep = n.endpoint().unwrap();
        block_on(async {
            let cfg = ShermanConfig {
                page_check: check,
                ..ShermanConfig::sherman()
            };
            let t = Sherman::create(&ep, cfg).await.unwrap();
            for i in 0..2000u64 {
                t.upsert(&k(i * 7), &v(i)).await.unwrap();
            }
            let mut out = [0u8; 8];
            let t0 = Instant::now();
            for r in 0..20_000u64 {
                let i = r * 7919 % 2000;
                assert_eq!(t.get(&k(i * 7), &mut out).await.unwrap(), Some(8));
                assert_eq!(out, v(i));
            }
            t0.elapsed().as_nanos() as f64 / 20_000.0
        })
    };
    let (new, old) = (
        per_lookup(PageCheck::Checksums),
        per_lookup(PageCheck::FrontRearOnly),
    );
    eprintln!("soft-fabric lookup: {new:.0} ns (front==rear: {old:.0} ns)");
}

//! Erda's object checksum: the implementation core was built with (`crc32c` crate with
//! feature `remora-core/hw-crc`, else software) gives the software value bit for bit, and its
//! speed. Figures (release): `cargo test --release -p remora-poller --test erda_crc
//! --features remora-core/hw-crc -- --nocapture`.
use remora_core::erda::{HW_CRC, object_checksum};
use remora_layouts::erda::{decode_object_with, encode_object_with, object_crc_sw};
use std::hint::black_box;
use std::time::Instant;

#[test]
fn the_object_checksum_is_crc32c_whichever_implementation() {
    // The CRC-32C check value.
    assert_eq!(object_checksum(b"1234", b"56789"), 0xE306_9283);
    assert_eq!(object_crc_sw(b"1234", b"56789"), 0xE306_9283);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for (h, b) in [
        (0, 0),
        (8, 0),
        (8, 1),
        (8, 17),
        (8, 120),
        (8, 4096),
        (3, 8000),
    ] {
        let (hd, bd) = (&data[..h], &data[h..h + b]);
        assert_eq!(object_checksum(hd, bd), object_crc_sw(hd, bd), "{h}+{b}");
    }
    // Objects written with one decode with the other.
    let mut obj = [0u8; 256];
    let n = encode_object_with(&mut obj, b"key", &data[..100], false, object_checksum).unwrap();
    assert_eq!(
        decode_object_with(&obj[..n], object_crc_sw).unwrap().value,
        &data[..100]
    );
    // Throughput over an 8-byte header and bodies of typical sizes.
    for body in [32usize, 96, 128, 256, 4096] {
        // The best of 3 runs of 8 MiB each (the machine is shared).
        let rate = |f: fn(&[u8], &[u8]) -> u32| {
            let rounds = (8 << 20) / (body + 8);
            let mut best = 0f64;
            for _ in 0..3 {
                let t = Instant::now();
                let mut acc = 0u32;
                for i in 0..rounds {
                    let o = i % 64;
                    let (h, b) = (&data[o..o + 8], &data[o + 8..o + 8 + body]);
                    acc ^= f(black_box(h), black_box(b));
                }
                black_box(acc);
                let r = (rounds * (body + 8)) as f64 / t.elapsed().as_nanos().max(1) as f64;
                best = best.max(r);
            }
            best
        };
        // Each measured twice, interleaved (order effects show).
        let (sw1, core1) = (rate(object_crc_sw), rate(object_checksum));
        let (core2, sw2) = (rate(object_checksum), rate(object_crc_sw));
        println!(
            "erda object checksum, {} B objects: software {:.2} B/ns, core's object_checksum \
             ({}) {:.2} B/ns",
            body + 8,
            sw1.max(sw2),
            if HW_CRC {
                "crc32c crate from 128 B"
            } else {
                "software"
            },
            core1.max(core2)
        );
    }
}

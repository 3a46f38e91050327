use super::*;
use proptest::prelude::*;

#[test]
fn turn_notices_round_trip_and_reject_garbage() {
    let t = Turn {
        stale: false,
        applied: true,
        ticket: 65_535,
        node: 1 << 20,
        meta: Meta::new(5, 65_535, true, 9),
    };
    assert_eq!(Turn::decode(&t.encode()), Ok(t));
    let mut bad = t.encode();
    bad[0] = 1;
    assert!(Turn::decode(&bad).is_err());
    bad = t.encode();
    bad[1] = 4;
    assert!(Turn::decode(&bad).is_err());
    assert!(Turn::decode(&t.encode()[..15]).is_err());
}

#[test]
fn formulas_match_the_paper() {
    let g = PrefixGeometry::new(&[4, 4, 4]).unwrap();
    assert_eq!(g.base(1), 0);
    assert_eq!(g.base(2), 1);
    assert_eq!(g.base(3), 5);
    assert_eq!(g.level_nodes(3), 16);
    assert_eq!(g.child(1, 0, 2), 3);
    assert_eq!(g.child(2, 3, 1), 5 + 2 * 4 + 1);
    assert_eq!(g.total_nodes(), 21);
    assert_eq!(g.chars_stride(1), 8);
    assert_eq!(g.stride(3), 24);
    assert_eq!(g.level_of(7), Some(3));
    assert_eq!(g.level_of(21), None);
    assert_eq!(g.total_len(), 5 * 8 + 16 * 24);
    let mut a = [0u8; 5 * 8 + 16 * 24];
    g.put_node(&mut a, 7, &[1, 5, 9], &[3, 4, 5]).unwrap();
    assert_eq!(g.chars(&a, 7).unwrap(), &[1, 5, 9]);
    assert_eq!(g.node_id(&a, 7, 2).unwrap(), 5);
    assert!(g.put_node(&mut a, 1, &[1], &[2]).is_err());
    assert!(PrefixGeometry::new(&[256; 9]).is_err());
    // Per-level widths: a wide root does not widen the levels under it.
    let g = PrefixGeometry::new(&[256, 2, 3]).unwrap();
    assert_eq!(g.base(3), 257);
    assert_eq!(g.level_nodes(3), 512);
    assert_eq!(g.child(2, 1 + 255, 1), 257 + 255 * 2 + 1);
}

#[test]
fn items_round_trip_and_tearing_is_caught() {
    let g = DataGeometry::new(8, 16).unwrap();
    let mut b = [0u8; 32];
    g.encode_item(&mut b, 42, b"hello", ItemOp::Update, 77, true)
        .unwrap();
    let it = g.decode_item(&b).unwrap();
    assert_eq!(
        (it.key, it.value, it.op, it.ticket, it.valid),
        (42, &b"hello"[..], ItemOp::Update, 77, true)
    );
    // Clearing the valid bit keeps the checksum.
    let n = b.len();
    let tail = u64::from_le_bytes(b[n - 8..].try_into().unwrap());
    b[n - 8..].copy_from_slice(&tail_processed(tail).to_le_bytes());
    assert!(!g.decode_item(&b).unwrap().valid);
    // A torn item (old key word, new tail) fails.
    b[0] ^= 1;
    assert!(matches!(
        g.decode_item(&b),
        Err(LayoutError::BadChecksum { .. })
    ));
    // A hole's tail: valid, and nothing decodes with it, whatever the rest holds.
    b[0] ^= 1;
    b[n - 8..].copy_from_slice(&hole_tail(77).to_le_bytes());
    assert!(tail_valid(hole_tail(77)));
    assert!(g.decode_item(&b).is_err());
    assert!(
        g.encode_item(&mut b, 1, &[0; 17], ItemOp::Insert, 0, true)
            .is_err()
    );
}

#[test]
fn sixteen_byte_keys_round_trip_whole_and_checked() {
    let g = DataGeometry::new(8, 16).unwrap().with_key_len(16).unwrap();
    assert_eq!(g.item_size(), 40);
    let key = u128::from_be_bytes(*b"random-string-k!");
    let mut b = [0u8; 40];
    g.encode_item(&mut b, key, b"fifteen bytes..", ItemOp::Insert, 3, true)
        .unwrap();
    // Stored as the key's own bytes.
    assert_eq!(&b[..16], b"random-string-k!");
    let it = g.decode_item(&b).unwrap();
    assert_eq!((it.key, it.value), (key, &b"fifteen bytes.."[..]));
    assert_eq!(g.key_from_be(b"random-string-k!"), Some(key));
    assert_eq!(g.key_from_be(b"short"), None);
    let mut kb = [0u8; MAX_KEY];
    assert_eq!(g.key_to_be(key, &mut kb), b"random-string-k!");
    // A changed key byte fails the checksum (the check covers all 16).
    b[15] ^= 1;
    assert!(matches!(
        g.decode_item(&b),
        Err(LayoutError::BadChecksum { .. })
    ));
    // An 8-byte tree refuses keys past 2^64; widths other than 8 and 16 are refused.
    let g8 = DataGeometry::new(8, 16).unwrap();
    assert!(
        g8.encode_item(&mut b, 1 << 64, b"", ItemOp::Insert, 0, true)
            .is_err()
    );
    assert_eq!(g8.key_to_be(0x0102, &mut kb), &[0, 0, 0, 0, 0, 0, 1, 2]);
    assert!(g8.with_key_len(12).is_err());
    let f = Control::decode(&Control::format(g).encode()).unwrap();
    assert_eq!(f.format_geometry(), Ok(g));
    // Segments of a 16-byte tree reach bit 127; a gap is at most 64 bits wide.
    let top = Segment::Level {
        lo: 120,
        width: 8,
        fanout: 3,
    };
    assert_eq!(Segment::decode(top.encode()), Ok(top));
    assert_eq!(top.bits(key), b'r' as u64);
    let wide = Segment::Gap {
        lo: 32,
        width: 65,
        value: 0,
    };
    assert!(Segment::decode(wide.encode()).is_err());
}

#[test]
fn meta_imm_control_round_trip() {
    let m = Meta::new(0b1011, 0xABCD, true, 30_000);
    assert_eq!(
        (m.bitmap(), m.served(), m.frozen(), m.epoch()),
        (0b1011, 0xABCD, true, 30_000)
    );
    assert!(Meta::new(1 << 9, 0, false, 0).check(8).is_err());
    let i = Imm {
        epoch: 130,
        node: 77_000,
        slot: 31,
    };
    let d = Imm::decode(i.encode().unwrap()).unwrap();
    assert_eq!(d, Imm { epoch: 2, ..i });
    assert!(
        Imm {
            epoch: 0,
            node: 1 << 20,
            slot: 0
        }
        .encode()
        .is_err()
    );
    assert!(
        Imm {
            epoch: 0,
            node: 0,
            slot: 32
        }
        .encode()
        .is_err()
    );
    // The widest node id round-trips next to the widest slot and epoch.
    let wide = Imm {
        epoch: 127,
        node: (1 << 20) - 1,
        slot: 31,
    };
    assert_eq!(Imm::decode(wide.encode().unwrap()).unwrap(), wide);
    let c = Control::new(ControlKind::Resize, 5, 3, 9, 1 << 30);
    assert_eq!(Control::decode(&c.encode()).unwrap(), c);
    assert!(Control::decode(&[9; 16]).is_err());
    let skip = Control::new(ControlKind::Skip, 130, 3, SKIP_DRAIN, 70_000);
    let back = Control::decode(&skip.encode()).unwrap();
    assert_eq!(back.kind(), Ok(ControlKind::Skip));
    assert_eq!(
        (back.epoch, back.node, back.ticket),
        (2, SKIP_DRAIN, 70_000 & 0xFFFF)
    );
    let mut bad = skip.encode();
    bad[0] = 7;
    assert!(Control::decode(&bad).is_err());
    let wait = Control::new(ControlKind::Wait, 1, 3, 7, 9);
    assert_eq!(
        Control::decode(&wait.encode()).unwrap().kind(),
        Ok(ControlKind::Wait)
    );
    let quiet = Control::new(ControlKind::Quiet, 0, 0, 0, 0);
    assert_eq!(
        Control::decode(&quiet.encode()).unwrap().kind(),
        Ok(ControlKind::Quiet)
    );
}

#[test]
fn header_round_trips_and_refuses_garbage() {
    let data = DataGeometry::new(16, 8).unwrap();
    let prefix = PrefixGeometry::new(&[2]).unwrap();
    let mut segments = [[0u64; 2]; MAX_SEGMENTS];
    segments[0] = Segment::Gap {
        lo: 8,
        width: 56,
        value: 0,
    }
    .encode();
    segments[1] = Segment::Level {
        lo: 0,
        width: 8,
        fanout: 2,
    }
    .encode();
    let mut h = TreeHeader {
        magic: TREE_MAGIC,
        epoch: 1,
        key_len: 8,
        slots: 16,
        value_cap: 8,
        height: 1,
        width: 2,
        n_segments: 2,
        n_data: 2,
        prefix_off: 4096 + 384,
        prefix_len: prefix.total_len(),
        data_off: 8192,
        data_node_size: data.node_size(),
        area_off: 4096,
        area_len: 4096,
        data_cap: 4,
        array_gen: 1,
        prefix_check: 0,
        header_check: 0,
        reserved: 0,
        segments,
    };
    assert_eq!(prefix.total_len(), 16);
    let mut prefix = [0u8; 16];
    prefix[0] = 2;
    h.seal(&prefix);
    assert_eq!(TreeHeader::decode(&h.encode()), Ok(h));
    assert_eq!(h.check_prefix(&prefix), Ok(()));
    // Each rule is checked on its own (the header resealed, so the checksum holds).
    let refused = |f: fn(&mut TreeHeader)| {
        let mut bad = h;
        f(&mut bad);
        bad.seal(&prefix);
        matches!(
            TreeHeader::decode(&bad.encode()),
            Err(LayoutError::Inconsistent { .. } | LayoutError::OutOfRange { .. })
        )
    };
    assert!(refused(|b| b.n_segments = 1));
    assert!(refused(|b| b.key_len = 12));
    // An 8-byte tree's segments end at bit 64; a 16-byte tree's at bit 128.
    assert!(refused(|b| {
        b.segments[0] = Segment::Gap {
            lo: 8,
            width: 64,
            value: 0,
        }
        .encode()
    }));
    assert!(!refused(|b| {
        b.key_len = 16;
        b.data_node_size = DataGeometry::new(16, 8)
            .unwrap()
            .with_key_len(16)
            .unwrap()
            .node_size();
        b.segments[0] = Segment::Gap {
            lo: 8,
            width: 64,
            value: 0,
        }
        .encode()
    }));
    assert!(refused(|b| b.data_cap = 1));
    assert!(refused(|b| b.area_len = 100));
    // A header or prefix array changed after sealing fails its checksum.
    let mut enc = h.encode();
    enc[36] ^= 1;
    assert!(matches!(
        TreeHeader::decode(&enc),
        Err(LayoutError::BadChecksum { .. })
    ));
    prefix[3] = 1;
    assert!(matches!(
        h.check_prefix(&prefix),
        Err(LayoutError::BadChecksum { .. })
    ));
    assert!(h.check_prefix(&prefix[1..]).is_err());
}

/// A READ of header and prefix array racing the server's rewrite of the area observes
/// each 64-byte segment at its own time: any mix of two sealed versions is refused.
#[test]
fn mixed_segments_of_two_versions_fail_the_checksums() {
    let data = DataGeometry::new(16, 8).unwrap();
    let g = PrefixGeometry::new(&[16, 8]).unwrap();
    const PREFIX: usize = 24 + 16 * 48;
    assert_eq!(g.total_len(), PREFIX as u64);
    let mut seg = [[0u64; 2]; MAX_SEGMENTS];
    seg[0] = Segment::Level {
        lo: 8,
        width: 8,
        fanout: 16,
    }
    .encode();
    seg[1] = Segment::Level {
        lo: 0,
        width: 8,
        fanout: 8,
    }
    .encode();
    let area = |epoch: u32, n_data: u32, fill: u8| {
        let mut h = TreeHeader {
            magic: TREE_MAGIC,
            epoch,
            key_len: 8,
            slots: 16,
            value_cap: 8,
            height: 2,
            width: 16,
            n_segments: 2,
            n_data,
            prefix_off: 4096 + 384,
            prefix_len: g.total_len(),
            data_off: 1 << 20,
            data_node_size: data.node_size(),
            area_off: 4096,
            area_len: 384 + g.total_len(),
            data_cap: 64,
            array_gen: 1,
            prefix_check: 0,
            header_check: 0,
            reserved: 0,
            segments: seg,
        };
        let prefix = [fill; PREFIX];
        h.seal(&prefix);
        let mut img = [0u8; TREE_HEADER_LEN + PREFIX];
        img[..TREE_HEADER_LEN].copy_from_slice(&h.encode());
        img[TREE_HEADER_LEN..].copy_from_slice(&prefix);
        img
    };
    let (old, new) = (area(3, 10, 1), area(5, 11, 2));
    let segs = old.len().div_ceil(64);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut mix = old;
        for s in 0..segs {
            if x >> (s % 64) & 1 == 1 {
                let r = s * 64..((s + 1) * 64).min(mix.len());
                mix[r.clone()].copy_from_slice(&new[r]);
            }
        }
        let whole = mix == old || mix == new;
        let ok = TreeHeader::decode(&mix[..TREE_HEADER_LEN])
            .and_then(|h| h.check_prefix(&mix[TREE_HEADER_LEN..]));
        assert_eq!(ok.is_ok(), whole, "a mix of two versions was accepted");
    }
}

proptest! {
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), w in any::<u64>(), v in any::<u64>()) {
        let _ = TreeHeader::decode(&bytes);
        let _ = Control::decode(&bytes);
        let _ = DataGeometry::new(32, 248).unwrap().decode_item(&bytes);
        let _ = Segment::decode([w, v]);
        let _ = Imm::decode(w as u32);
        let g = PrefixGeometry::new(&[4, 4]).unwrap();
        let _ = g.chars(&bytes, w % 8);
        let _ = g.node_id(&bytes, w % 8, (v % 8) as u32);
    }
}

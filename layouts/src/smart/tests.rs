//! Format tests: encode/decode round trips, and garbage decoded without a panic.
use super::*;
use proptest::prelude::*;

#[test]
fn dead_slot_keeps_its_partial_key() {
    let d = Slot::dead(0x41);
    assert!(d.is_dead() && d.frozen(true).is_dead() && !d.is_empty());
    assert_eq!(d.kind().unwrap(), SlotKind::Dead { pkey: 0x41 });
    assert_eq!(d.frozen(true).pkey(), 0x41);
    let l = Slot::leaf(0x41, GlobalAddr::new(0, 64), 64).unwrap();
    assert!(!l.is_dead() && !Slot::EMPTY.is_dead());
}

#[test]
fn header_round_trip_and_bits() {
    let h = Header::new(9, NodeType::N16, b"abc").unwrap();
    let d = Header::decode(h.raw()).unwrap();
    assert_eq!(d.depth(), 9);
    assert_eq!(d.node_type(), NodeType::N16);
    assert_eq!(&d.prefix()[..d.prefix_len()], b"abc");
    assert_eq!(d.prefix_start(), 6);
    assert!(!d.is_frozen() && !d.is_obsolete());
    let f = d.frozen(true).obsolete();
    assert!(f.is_frozen() && f.is_obsolete());
    assert_eq!(f.clean(), d);
    assert_eq!(d.with_type(NodeType::N48).node_type(), NodeType::N48);
    assert!(Header::new(2, NodeType::N4, b"abc").is_err());
    assert!(Header::new(9, NodeType::N4, b"abcdefg").is_err());
}

#[test]
fn slot_round_trip() {
    let a = GlobalAddr::new(3, 0x1000);
    let s = Slot::leaf(0x41, a, 128).unwrap();
    assert_eq!(
        s.kind().unwrap(),
        SlotKind::Leaf {
            pkey: 0x41,
            addr: a,
            bytes: 128
        }
    );
    let n = Slot::node(7, a, NodeType::N48).unwrap();
    assert_eq!(
        n.kind().unwrap(),
        SlotKind::Node {
            pkey: 7,
            addr: a,
            ty: NodeType::N48
        }
    );
    assert!(n.frozen(true).is_frozen());
    assert_eq!(n.frozen(true).frozen(false), n);
    assert!(Slot::EMPTY.frozen(true).is_empty());
    assert!(Slot::leaf(1, a, 100).is_err());
    assert!(Slot::leaf(1, GlobalAddr::NULL, 64).is_err());
    assert!(Slot::node(1, GlobalAddr::new(300, 64), NodeType::N4).is_err());
}

#[test]
fn leaf_round_trip() {
    let bytes = leaf_bytes(8, 8);
    assert_eq!(bytes, 64);
    let mut buf = [0u8; 64];
    let st = LeafStatus::live(true);
    let m = encode_leaf(&mut buf, 5, st, 77, b"12345678", b"val", 8).unwrap();
    assert_eq!(m.bytes(), 64);
    let v = LeafView::decode(&buf).unwrap();
    assert_eq!(v.key, b"12345678");
    assert_eq!(v.value, b"val");
    assert_eq!(v.checksum, 77);
    assert_eq!(v.reverse, 5);
    assert!(v.status.is_valid());
    assert_eq!(v.lock, 0);
    assert_eq!(v.checksummed().len(), 8 + 8 + 8);
    let fwd = st.forwarded(GlobalAddr::new(1, 4096)).unwrap();
    assert!(fwd.is_obsolete());
    assert_eq!(fwd.forward(), Some(GlobalAddr::new(1, 4096)));
    assert_eq!(LeafStatus::decode(fwd.raw()), Ok(fwd));
    assert!(LeafStatus::decode(2).is_err());
    assert!(LeafView::decode(&buf[..32]).is_err());
    let mut bad = buf;
    bad[30] = 0;
    assert!(LeafView::decode(&bad).is_err());
}

proptest! {
    #[test]
    fn decoders_never_panic(words in proptest::collection::vec(any::<u64>(), 0..64)) {
        let mut bytes = [0u8; 512];
        for (i, w) in words.iter().enumerate() {
            bytes[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
            let _ = Header::decode(*w);
            let _ = Slot::from_raw(*w).kind();
            let _ = LeafStatus::decode(*w);
            let _ = LeafMeta::decode(*w);
            let _ = decode_reverse(*w);
        }
        for len in [0usize, 64, 128, 512] {
            let _ = LeafView::decode(&bytes[..len]);
        }
        let _ = TreeMeta::decode(&bytes[..32]);
    }

    #[test]
    fn headers_round_trip(depth in 6usize..=MAX_KEY_LEN, plen in 0usize..=6, p in any::<[u8; 6]>(), t in 0u64..4) {
        let ty = NodeType::from_bits(t).unwrap();
        let h = Header::new(depth, ty, &p[..plen]).unwrap();
        let d = Header::decode(h.raw()).unwrap();
        prop_assert_eq!(d.depth(), depth);
        prop_assert_eq!(d.node_type(), ty);
        prop_assert_eq!(&d.prefix()[..plen], &p[..plen]);
    }

    #[test]
    fn leaves_round_trip(key in proptest::collection::vec(any::<u8>(), 1..64), val in proptest::collection::vec(any::<u8>(), 0..100)) {
        let cap = val.len() + 3;
        let n = leaf_bytes(key.len(), cap);
        let mut buf = [0u8; 512];
        encode_leaf(&mut buf[..n], 0, LeafStatus::live(true), 1, &key, &val, cap).unwrap();
        let v = LeafView::decode(&buf[..n]).unwrap();
        prop_assert_eq!(v.key, &key[..]);
        prop_assert_eq!(v.value, &val[..]);
    }
}

/// The leaf checksum as it was computed before the carry-less CRC: the `crc` crate's
/// CRC-64/XZ digest of the valid byte, then the checksummed bytes. The stored layout depends
/// on this staying bit-identical.
fn leaf_crc_before(valid: bool, checksummed: &[u8]) -> u64 {
    let c = crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_XZ);
    let mut d = c.digest();
    d.update(&[valid as u8]);
    d.update(checksummed);
    d.finalize()
}

#[test]
fn leaf_crc_of_known_bytes() {
    // The valid byte then "123456789" is CRC-64/XZ of "\x01123456789".
    let want = crc::Crc::<u64>::new(&crc::CRC_64_XZ).checksum(b"\x01123456789");
    assert_eq!(leaf_crc(true, b"123456789"), want);
    assert_eq!(leaf_crc_table(true, b"123456789"), want);
    assert_ne!(leaf_crc(false, b"123456789"), want);
}

proptest! {
    #[test]
    fn leaf_crc_is_unchanged(key in proptest::collection::vec(any::<u8>(), 1..=MAX_KEY_LEN),
                             val in proptest::collection::vec(any::<u8>(), 0..600),
                             extra in 0usize..64, valid in any::<bool>(), rev in any::<u64>()) {
        let cap = val.len() + extra;
        let n = leaf_bytes(key.len(), cap);
        prop_assume!(n <= MAX_LEAF_BYTES);
        let mut buf = [0u8; MAX_LEAF_BYTES];
        encode_leaf(&mut buf[..n], rev, LeafStatus::live(valid), 0, &key, &val, cap).unwrap();
        let v = LeafView::decode(&buf[..n]).unwrap();
        let want = leaf_crc_before(valid, v.checksummed());
        prop_assert_eq!(leaf_crc(valid, v.checksummed()), want);
        prop_assert_eq!(leaf_crc_table(valid, v.checksummed()), want);
    }
}

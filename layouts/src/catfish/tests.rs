use super::*;

fn sample(level: u16, n: usize, salt: i32) -> Node {
    let mut node = Node::empty(level);
    for i in 0..n as i32 {
        let r = Rect::new(i * 3 + salt, -i, i * 3 + 5 + salt, 7 - i + 10).unwrap();
        node.push(Entry {
            rect: r,
            ptr: (i as u64 + 1) * 0x1000 + salt as u64,
        })
        .unwrap();
    }
    node
}

#[test]
fn node_round_trips() {
    for n in [0, 1, FANOUT / 2, FANOUT] {
        let node = sample(3, n, 0);
        let img = node.encode(42);
        let mut back = Node::decode(&img).unwrap();
        assert_eq!(back.version, 42);
        back.version = 0;
        assert_eq!(back, node);
    }
}

#[test]
fn nodes_of_every_paper_fanout_round_trip() {
    for fanout in [MIN_FANOUT, 15, 30, 70, MAX_FANOUT] {
        let mut node = Node::with_fanout(2, fanout);
        for i in 0..fanout as i32 {
            let r = Rect::new(i, -i, i + 9, 100).unwrap();
            node.push(Entry {
                rect: r,
                ptr: i as u64,
            })
            .unwrap();
        }
        assert!(node.is_full() && node.push(node.entries[0]).is_err());
        let img = node.encode(8);
        assert_eq!(img.len(), node_len(fanout));
        let mut back = Node::decode_with(&img, fanout).unwrap();
        back.version = 0;
        assert_eq!(back, node);
        // Read with another tree's fanout, the image does not decode.
        let other = if fanout == 30 { 15 } else { 30 };
        let mut wide = [0u8; MAX_NODE_LEN];
        wide[..img.len()].copy_from_slice(&img);
        assert!(
            Node::decode_with(&wide, other).is_err(),
            "{fanout} as {other}"
        );
        assert!(Node::decode_with(&img[..img.len() - 8], fanout).is_err());
    }
    assert!(Node::decode_with(&[0u8; MAX_NODE_LEN], MAX_FANOUT + 1).is_err());
    assert!(Node::decode_with(&[0u8; MAX_NODE_LEN], 0).is_err());
}

/// The stored layout is the one the `crc` crate's tables wrote: at every paper fanout the
/// checksum word is CRC-64/ECMA-182 (slice-by-16 tables) over head version + body, and an
/// image whose checksum the tables computed decodes.
#[test]
fn node_checksum_is_the_tables_crc64_ecma() {
    let tables = crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_ECMA_182);
    for fanout in [MIN_FANOUT, FANOUT, 15, 30, 70, MAX_FANOUT] {
        for n in [0, 1, fanout / 2, fanout] {
            let mut node = Node::with_fanout(1, fanout);
            for i in 0..n as i32 {
                let r = Rect::new(i * 7, -i, i * 7 + 3, 50 + i).unwrap();
                node.push(Entry {
                    rect: r,
                    ptr: 0x40 * (i as u64 + 1),
                })
                .unwrap();
            }
            let img = node.encode(6);
            let cs = node_checksum_offset(fanout);
            let stored = u64::from_le_bytes(img[cs..cs + 8].try_into().unwrap());
            assert_eq!(stored, tables.checksum(&img[..cs]), "fanout {fanout} n {n}");
            assert_eq!(node_crc(&img[..cs]), stored);
            // Written by the tables (the layout before the carry-less CRC), read now.
            let mut old = img;
            old[cs..cs + 8].copy_from_slice(&tables.checksum(&img[..cs]).to_le_bytes());
            assert!(
                Node::decode_with(&old, fanout).is_ok(),
                "fanout {fanout} n {n}"
            );
        }
    }
}

#[test]
fn every_torn_mix_of_two_versions_is_rejected() {
    let old = sample(0, 9, 0).encode(10);
    let new = sample(0, 12, 1).encode(12);
    // The writer's in-progress image: head odd, the rest still old or already new.
    let mut writing = old;
    writing[0..8].copy_from_slice(&11u64.to_le_bytes());
    for base in [&old, &writing] {
        for cut in (8..NODE_LEN).step_by(8) {
            let mut torn = *base;
            torn[cut..].copy_from_slice(&new[cut..]);
            // A reader sees a prefix from one image and a suffix from the next.
            assert!(Node::decode(&torn).is_err(), "torn at byte {cut} accepted");
            let mut torn = new;
            torn[cut..].copy_from_slice(&base[cut..]);
            assert!(
                Node::decode(&torn).is_err(),
                "reverse tear at {cut} accepted"
            );
        }
    }
    // Head and tail agree but the body is a mix: only the checksum can tell.
    let mut mixed = new;
    mixed[0..8].copy_from_slice(&10u64.to_le_bytes());
    mixed[NODE_TAIL_OFFSET..].copy_from_slice(&10u64.to_le_bytes());
    assert!(matches!(
        Node::decode(&mixed),
        Err(LayoutError::BadChecksum { .. })
    ));
}

#[test]
fn garbage_never_panics() {
    let mut img = sample(1, 5, 2).encode(4);
    for i in 0..NODE_LEN {
        img[i] ^= 0x5a;
        let _ = Node::decode(&img);
    }
    assert!(Node::decode(&img[..100]).is_err());
    assert!(Rect::new(1, 0, 0, 0).is_err());
}

#[test]
fn messages_round_trip() {
    let req = Request {
        op: Opcode::Search,
        acked: 200,
        req_id: 77,
        rect: Rect::new(-5, -6, 7, 8).unwrap(),
        arg0: 9,
        arg1: 10,
    };
    assert_eq!(Request::decode(&req.encode()).unwrap(), req);
    let mut bad = req.encode();
    bad[2] = 99;
    assert!(Request::decode(&bad).is_err());
    let h = ResponseHeader {
        status: Status::Full,
        flags: FLAG_LAST,
        req_id: 5,
        load_permille: 960,
        count: 0,
    };
    assert_eq!(ResponseHeader::decode(&h.encode()).unwrap(), h);
    assert_eq!(
        Heartbeat::decode(
            Heartbeat {
                load_permille: 999,
                seq: 12345
            }
            .encode()
        )
        .seq,
        12345
    );
    assert_eq!(hits_per_message(4096), 170);
    let del = Request {
        op: Opcode::Delete,
        ..req
    };
    assert_eq!(Request::decode(&del.encode()).unwrap(), del);
    for kind in [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert] {
        let arg = init_arg(128 << 10, kind, 30);
        assert_eq!(split_init_arg(arg).unwrap(), (128 << 10, kind, 30));
        assert_eq!(TreeKind::decode(kind as u64).unwrap(), kind);
    }
    assert!(split_init_arg(7 << INIT_LEN_BITS).is_err());
    assert!(TreeKind::decode(3).is_err());
}

#[test]
fn rect_geometry() {
    let a = Rect::new(0, 0, 9, 9).unwrap();
    let b = Rect::new(9, 9, 20, 20).unwrap();
    let c = Rect::new(10, 0, 20, 8).unwrap();
    assert!(a.intersects(&b) && !a.intersects(&c));
    assert_eq!(a.area(), 100);
    let full = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
    assert_eq!(full.area(), 1u128 << 64);
    assert_eq!(a.union(&c), Rect::new(0, 0, 20, 9).unwrap());
}

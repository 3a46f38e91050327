use super::*;
use proptest::prelude::*;

#[test]
fn meta_flips_between_the_two_offsets() {
    let m = Meta::EMPTY.advance(5).unwrap();
    assert_eq!((m.new_tag, m.new_off(), m.old_off()), (true, 5, 0));
    let m = m.advance(9).unwrap();
    // Tag 0: the new offset goes to B, A keeps the previous one.
    assert_eq!((m.new_tag, m.a, m.b), (false, 5, 9));
    assert_eq!((m.new_off(), m.old_off()), (9, 5));
    let m = m.advance(12).unwrap();
    assert_eq!((m.new_tag, m.a, m.b), (true, 12, 9));
    assert_eq!(m.revert().new_off(), 9);
    assert_eq!(m.revert().old_off(), 0);
    assert_eq!(Meta::decode(m.encode()), Ok(m));
    assert_eq!(m.encode() & 1, 0);
    assert!(Meta::decode(1).is_err());
    assert!(m.advance(0).is_err());
    assert!(m.advance(1 << 31).is_err());
    assert_eq!(
        Meta {
            new_tag: true,
            a: MAX_UNITS as u32,
            b: 1
        }
        .encode(),
        1 << 63 | MAX_UNITS << 32 | 1 << 1
    );
}

#[test]
fn objects_round_trip_and_tearing_is_caught() {
    let mut buf = [0u8; OBJECT_MAX];
    let n = encode_object(&mut buf, b"key1", &[7u8; 13], false).unwrap();
    assert_eq!(n, object_len(4, 13));
    assert_eq!(n % 8, 0);
    let o = decode_object(&buf[..n]).unwrap();
    assert_eq!(
        (o.delete, o.key, o.value, o.len),
        (false, &b"key1"[..], &[7u8; 13][..], n)
    );
    for word in 0..n / 8 {
        let mut torn = buf;
        torn[word * 8] ^= 0x10;
        assert!(decode_object(&torn[..n]).is_err(), "flip in word {word}");
    }
    assert!(decode_object(&buf[..n - 8]).is_err());
    assert!(decode_object(&[0u8; 64]).is_err(), "unwritten log space");
    let n = encode_object(&mut buf, b"k", b"ignored", true).unwrap();
    let o = decode_object(&buf[..n]).unwrap();
    assert!(o.delete && o.value.is_empty());
    assert!(encode_object(&mut buf, &[0u8; 17], b"", false).is_err());
    assert!(encode_object(&mut buf, b"k", &[0u8; VALUE_MAX + 1], false).is_err());
}

#[test]
fn buckets_and_messages_round_trip() {
    let m = Meta::EMPTY.advance(3).unwrap();
    let b = Bucket::new(b"abcdefgh", 2, m).unwrap();
    let d = Bucket::decode(&b.encode()).unwrap();
    assert!(d.holds(b"abcdefgh") && !d.holds(b"abcdefg"));
    assert_eq!((d.head(), d.meta()), (2, m));
    assert!(!Bucket::decode(&[0u8; 32]).unwrap().is_used());
    let mut bad = b.encode();
    bad[8] = 17; // key length 17
    assert!(Bucket::decode(&bad).is_err());
    let r = Request::new(ReqOp::Update, 77, b"kk", 100).unwrap();
    assert_eq!(Request::decode(&r.encode()), Ok(r));
    assert!(Request::decode(&[0u8; REQUEST_LEN]).is_err());
    let r = r.with_revoke(77);
    assert_eq!(Request::decode(&r.encode()).map(|d| d.revoke), Ok(77));
    let mut bad = r.encode();
    bad[24..32].copy_from_slice(&(1u64 << 31).to_le_bytes());
    assert!(Request::decode(&bad).is_err(), "a revoke beyond 31 bits");
    assert!(
        Request::decode(&r.encode()[..24]).is_err(),
        "a short request"
    );
    assert_eq!(decode_hello(&hello(9)), Some(9));
    assert_eq!(decode_hello(&HELLO), Some(0));
    assert_eq!(decode_hello(b"ERDAHELX"), None);
    assert_eq!(decode_hello_slots(&hello_slots(9, 8)), Some((9, 8)));
    assert_eq!(decode_hello_slots(&hello_slots(9, 0)), Some((9, 1)));
    assert_eq!(decode_hello_slots(&hello(4)), Some((4, 1)));
    assert_eq!(decode_hello_slots(&GOODBYE), None);
    let g = Request::new(ReqOp::Get, 3, b"k", 0).unwrap();
    assert_eq!(Request::decode(&g.encode()), Ok(g));
    assert!(Request::decode(&Request::new(ReqOp::Get, 3, b"k", 8).unwrap().encode()).is_err());
    assert_eq!(Status::from_u8(Status::Located as u8), Ok(Status::Located));
    assert_eq!(Status::from_u8(Status::Busy as u8), Ok(Status::Busy));
    assert_ne!(durable_mark(8), durable_mark(9));
    assert_ne!(durable_mark(0), 0);
    let p = Reply {
        status: Status::Granted,
        head: 3,
        seq: 9,
        arg: 1234,
        aux: 77,
    };
    assert_eq!(Reply::decode(&p.encode()), Ok(p));
    assert!(Reply::decode(&[0u8; REPLY_LEN]).is_err());
}

fn sb() -> Superblock {
    let mut head_base = [0; MAX_HEADS];
    head_base[0] = 1 << 20;
    head_base[1] = 2 << 20;
    Superblock {
        magic: SUPERBLOCK_MAGIC,
        version: SUPERBLOCK_VERSION,
        heads: 2,
        buckets: 1024 + 7,
        neighborhood: 8,
        max_clients: 64,
        table_off: 4096,
        mailbox_off: 4096 + 1031 * 32,
        segment_bytes: 64 << 10,
        head_bytes: 1 << 20,
        head_base,
    }
}

#[test]
fn superblock_round_trips_and_refuses_bad_geometry() {
    let s = sb();
    assert_eq!(Superblock::decode(&s.encode(), 4 << 20), Ok(s));
    assert!(
        Superblock::decode(&s.encode(), 2 << 20).is_err(),
        "head past the region"
    );
    let mut t = s;
    t.heads = 9;
    assert!(Superblock::decode(&t.encode(), 4 << 20).is_err());
    let mut t = s;
    t.segment_bytes = 1000;
    assert!(Superblock::decode(&t.encode(), 4 << 20).is_err());
    assert_eq!(s.object_off(1, 2), Ok((2 << 20) + 16));
    assert!(s.object_off(2, 2).is_err());
    assert!(s.object_off(0, 0).is_err());
    assert!(s.home(b"x") < 1024);
    // 1031 buckets: 17 stripes of 64, plus one; right after the 64 mailboxes.
    assert_eq!(s.stripes(), 18);
    assert_eq!(s.stripe_off(), s.mailbox_off + 64 * MAILBOX_LEN as u64);
    assert_eq!(s.stripe_of(1030), 16);
    assert_eq!(s.stripe_word_off(17), s.stripe_off() + 17 * 8);
    // Mailboxes at the very end of a 4 MiB region: the stripe words and the head state
    // words must fit too.
    let mut t = s;
    t.mailbox_off = (4 << 20) - 64 * MAILBOX_LEN as u64 - 18 * 8 - MAX_HEADS as u64 * 8;
    assert_eq!(t.head_state_off(7), (4 << 20) - 8);
    assert!(t.validate(4 << 20).is_ok());
    t.mailbox_off += 8;
    assert!(t.validate(4 << 20).is_err(), "stripe words past the region");
}

#[test]
fn head_states_round_trip_and_refuse_nonsense() {
    let h = HeadState {
        epoch: 3,
        first: 3,
        len: 3,
        src: 2,
        regions: 4,
    };
    assert_eq!(HeadState::decode(h.encode()), Ok(h));
    assert_eq!((h.nth(0), h.nth(1), h.nth(2)), (3, 0, 1));
    assert!(h.in_first(0, 2) && !h.in_first(1, 2) && h.in_first(1, 3));
    assert!(HeadState::decode(0).is_err(), "no regions");
    let even = HeadState { epoch: 4, ..h };
    assert!(
        HeadState::decode(even.encode()).is_err(),
        "cleaning, even epoch"
    );
    let long = HeadState { len: 5, ..h };
    assert!(HeadState::decode(long.encode()).is_err());
    assert!(HeadState::decode(h.encode() | 1 << 60).is_err());
}

proptest! {
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_object(&bytes);
        let _ = Bucket::decode(&bytes);
        let _ = Request::decode(&bytes);
        let _ = Reply::decode(&bytes);
        let _ = Superblock::decode(&bytes, 1 << 30);
        if bytes.len() >= 8 {
            let _ = HeadState::decode(u64::from_le_bytes(bytes[..8].try_into().unwrap()));
        }
    }

    #[test]
    fn meta_words_round_trip(tag in any::<bool>(), a in 0u32..(1 << 31), b in 0u32..(1 << 31)) {
        let m = Meta { new_tag: tag, a, b };
        prop_assert_eq!(Meta::decode(m.encode()), Ok(m));
    }
}

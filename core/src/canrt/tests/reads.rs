//! Node READs racing updates under any segment order, and the KvIndex `get` contract and
//! error texts.
use super::*;

/// Lookups and scans of a key whose value another client updates in the middle of each
/// node READ (the update lands between two of the READ's segments). Returns how many
/// returned a value that was never current while they ran, and the reader's torn retries.
fn race_reads(order: SegmentOrder, ascending_check: bool) -> (usize, u64) {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    let mut rng = 0x5DEE_CE66_D1CE_4E5Bu64;
    let mut rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut wrong = 0;
    let reader = block_on(Canrt::open(&ep, cfg(8))).unwrap();
    reader.ascending_check.set(ascending_check);
    // The other client: its own endpoint on the same memory node.
    let write = |node: &Rc<MemNode>, k: u64, v: u64| {
        let ep = mem_ep(node);
        block_on(async {
            let w = Canrt::open(&ep, cfg(8)).await.unwrap();
            w.upsert(&be(k), &v.to_le_bytes()).await.unwrap();
        });
    };
    let size = reader.view().header.data_node_size as usize;
    // Five keys below the raced one fill the first slots, so the raced key's two slots
    // (an update appends to the lowest free slot) sit in another segment than the meta word.
    const K: u64 = 1000;
    for k in 1..=5u64 {
        write(&node, k, k);
    }
    write(&node, K, 0);
    assert_eq!(size.div_ceil(LINE), 4);
    let mut current = 0u64;
    for round in 0..64u64 {
        let next = current + 1;
        let n = node.clone();
        *node.split_next_read.borrow_mut() = Some(SplitRead {
            len: size,
            order,
            seed: rand(),
            pick: rand(),
            event: Box::new(move || write(&n, K, next)),
        });
        let got = block_on(async {
            if round % 2 == 0 {
                let mut out = [0u8; 8];
                let n = reader.get(&be(K), &mut out).await.unwrap();
                n.map(|n| {
                    assert_eq!(n, 8);
                    u64::from_le_bytes(out)
                })
            } else {
                let mut v = None;
                reader
                    .scan(&be(K), 1, &mut |k, val| {
                        if k == be(K) {
                            v = Some(u64::from_le_bytes(val.try_into().unwrap()));
                        }
                    })
                    .await
                    .unwrap();
                v
            }
        });
        assert!(
            node.split_next_read.borrow_mut().take().is_none(),
            "the READ was not split"
        );
        if got != Some(current) && got != Some(next) {
            wrong += 1;
        }
        current = next;
    }
    (wrong, reader.stats().torn_retries)
}

/// Segment order: the meta word READ alone before and after the node catches an update
/// that lands in the middle of the node READ whatever order its segments observe memory
/// in. The node READ's own copy of the meta word serves as the "before" read only when
/// the READ observes ascending addresses (the mutant): shuffled, it returns stale values.
#[test]
fn node_reads_hold_under_any_segment_order() {
    let (wrong, torn) = race_reads(SegmentOrder::Shuffled, false);
    assert_eq!(wrong, 0, "the bracketed snapshot returned stale values");
    assert!(torn > 10, "only {torn} torn snapshots retried");
    let (wrong, _) = race_reads(SegmentOrder::Ascending, false);
    assert_eq!(wrong, 0);
    // The ascending-order check is sound when segments land in ascending order...
    let (wrong, torn) = race_reads(SegmentOrder::Ascending, true);
    assert_eq!(wrong, 0, "the ascending check failed in ascending order");
    assert!(torn > 10);
    // ...and returns values that were never current when they do not.
    let (wrong, _) = race_reads(SegmentOrder::Shuffled, true);
    assert!(wrong > 0, "the ascending-order check was not caught");
    std::println!("ascending-order check under shuffled segments: {wrong} of 64 reads wrong");
}

/// `get` follows the KvIndex contract: it returns the value's own length, copies nothing
/// into a buffer too small for the value (an error), and leaves bytes past the value alone.
#[test]
fn get_returns_the_values_length_and_refuses_a_short_buffer() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(
            &ep,
            CanrtConfig {
                value_cap: 16,
                ..cfg(8)
            },
        )
        .await
        .unwrap();
        t.upsert(&be(1), b"abc").await.unwrap();
        t.upsert(&be(2), &[9u8; 16]).await.unwrap();
        t.upsert(&be(3), b"").await.unwrap();
        let mut out = [0xEEu8; 20];
        assert_eq!(t.get(&be(1), &mut out).await.unwrap(), Some(3));
        assert_eq!(&out[..3], b"abc");
        assert!(out[3..].iter().all(|&b| b == 0xEE));
        assert_eq!(t.get(&be(2), &mut out).await.unwrap(), Some(16));
        assert_eq!(t.get(&be(3), &mut out).await.unwrap(), Some(0));
        let mut short = [0xEEu8; 8];
        let e = t.get(&be(2), &mut short).await.unwrap_err();
        assert_eq!(e, CanrtError::BufferTooSmall { need: 16, got: 8 });
        assert_eq!(short, [0xEE; 8], "a short buffer was written");
        assert_eq!(
            e.to_string(),
            "canrt: value of 16 bytes does not fit the 8-byte buffer"
        );
        assert_eq!(t.get(&be(1), &mut short[..3]).await.unwrap(), Some(3));
        assert_eq!(t.get(&be(3), &mut []).await.unwrap(), Some(0));
        assert_eq!(t.get(&be(4), &mut []).await.unwrap(), None);
    });
}

/// Configuration and key errors name CANRT and its own limits.
#[test]
fn errors_speak_canrts_words() {
    for v in [0u32, 4, 12, 256] {
        let c = CanrtConfig {
            value_cap: v,
            ..cfg(8)
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e, CanrtError::ValueCap { value_cap: v });
        assert_eq!(
            e.to_string(),
            std::format!("canrt: values are 8 to 248 bytes in multiples of 8, not {v}")
        );
    }
    assert!(
        CanrtConfig {
            value_cap: 248,
            ..cfg(8)
        }
        .validate()
        .is_ok()
    );
    assert!(matches!(cfg(1).validate(), Err(CanrtError::Config(_))));
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = mem_ep(&node);
    block_on(async {
        let bad = CanrtConfig {
            value_cap: 256,
            ..cfg(8)
        };
        assert!(matches!(
            Canrt::open(&ep, bad).await,
            Err(CanrtError::ValueCap { value_cap: 256 })
        ));
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        let e = t.upsert(b"key", b"v").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "canrt: this tree's keys are 8 bytes (big-endian integers), got a 3-byte key"
        );
    });
}

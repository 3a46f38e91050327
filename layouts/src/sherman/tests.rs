extern crate std;
use super::*;
use proptest::prelude::*;
use std::vec::Vec;

/// A leaf image of version `v` holding `(key, value)` pairs in its first slots, every other
/// slot free, all bound to `v`.
fn leaf(g: &Geometry, v: u64, entries: &[(u64, &[u8])]) -> [u8; 1024] {
    let mut p = [0u8; 1024];
    let h = PageHeader {
        front_version: v,
        meta: PageHeader::pack_meta(0, true, 0),
        low_fence: 10,
        high_fence: KEY_INFINITY,
        ..Default::default()
    };
    h.encode(&mut p);
    for s in 0..g.leaf_capacity() {
        let at = g.leaf_entry_offset(s);
        let out = &mut p[at..at + g.leaf_entry_size()];
        match entries.get(s) {
            Some(&(k, val)) => encode_leaf_entry(out, k, val, 1, true, v),
            None => encode_leaf_entry(out, 0, &[], 0, false, v),
        }
    }
    seal(&mut p, g);
    p
}

fn internal(g: &Geometry, v: u64, keys: &[u64]) -> [u8; 1024] {
    let mut p = [0u8; 1024];
    let h = PageHeader {
        front_version: v,
        meta: PageHeader::pack_meta(1, false, keys.len()),
        low_fence: 0,
        high_fence: KEY_INFINITY,
        leftmost: 0x1000,
        ..Default::default()
    };
    h.encode(&mut p);
    for (i, k) in keys.iter().enumerate() {
        set_internal_entry(&mut p, g, i, *k, 0x2000 + *k * 64);
    }
    seal(&mut p, g);
    p
}

/// The image a READ sees when segment `i` (64 bytes) came from `b` iff bit `i` of `mask`.
fn mix(a: &[u8; 1024], b: &[u8; 1024], mask: u16) -> [u8; 1024] {
    let mut m = *a;
    for i in 0..16 {
        if mask >> i & 1 == 1 {
            m[i * 64..i * 64 + 64].copy_from_slice(&b[i * 64..i * 64 + 64]);
        }
    }
    m
}

/// What a reader decides from a leaf image: the header and every slot, or an error.
fn read_leaf(p: &[u8], g: &Geometry) -> Result<(PageHeader, [Slot; 39]), LayoutError> {
    let h = PageHeader::decode(p, g)?;
    let mut slots = [Slot::Free { version: 0 }; 39];
    for (s, out) in slots.iter_mut().enumerate() {
        *out = leaf_slot(p, g, s, h.front_version)?;
    }
    Ok((h, slots))
}

#[test]
fn geometry_of_the_paper() {
    let g = Geometry::new(1024, 8).unwrap();
    assert_eq!(g.leaf_entry_size(), 24);
    assert_eq!(g.leaf_capacity(), 39);
    assert_eq!(g.internal_capacity(), 59);
    assert!(Geometry::new(1000, 8).is_err());
    // Whole 64-byte lines need not be a power of two: the SMART paper's 623 B leaf, rounded.
    let g = Geometry::new(640, 8).unwrap();
    assert_eq!(g.leaf_capacity(), 23);
    assert_eq!(g.rear_offset(), 632);
    assert!(Geometry::new(704, 8).is_ok() && Geometry::new(672, 8).is_err());
    assert!(Geometry::new(192, 8).is_err());
    assert!(Geometry::new(256, 256).is_err());
}

#[test]
fn torn_page_and_entries_are_detected() {
    let g = Geometry::new(1024, 8).unwrap();
    let mut p = leaf(&g, 3, &[]);
    assert!(PageHeader::decode(&p, &g).unwrap().covers(10));
    encode_leaf_entry(
        &mut p[g.leaf_entry_offset(2)..g.leaf_entry_offset(3)],
        42,
        &[7, 0, 0],
        1,
        true,
        3,
    );
    assert_eq!(
        leaf_slot(&p, &g, 2, 3),
        Ok(Slot::Live {
            key: 42,
            version: 1,
            len: 3
        })
    );
    assert_eq!(leaf_value(&p, &g, 2, 3), &[7, 0, 0]);
    assert_eq!(leaf_slot(&p, &g, 3, 3), Ok(Slot::Free { version: 0 }));
    // the same entry read against another page version: not this image's
    assert!(leaf_slot(&p, &g, 2, 4).is_err());
    // a value word from another write: checksum mismatch
    let at = g.leaf_entry_offset(2) + 16;
    p[at..at + 8].copy_from_slice(&8u64.to_le_bytes());
    assert!(matches!(
        leaf_slot(&p, &g, 2, 3),
        Err(LayoutError::BadChecksum { .. })
    ));
    // a slot never written (all zero) is not a free slot
    let at = g.leaf_entry_offset(4);
    p[at..at + 24].fill(0);
    assert!(leaf_slot(&p, &g, 4, 3).is_err());
    // a rear version from a newer whole-page write: torn page
    let r = g.rear_offset();
    p[r..r + 8].copy_from_slice(&4u64.to_le_bytes());
    assert!(PageHeader::decode(&p, &g).is_err());
}

/// The old check is fooled by a READ that saw the rear and front segments before a
/// rear-first writer reached them and a body segment after: the checksum is not.
#[test]
fn front_rear_alone_is_fooled_by_segment_order_the_checksum_is_not() {
    let g = Geometry::new(1024, 8).unwrap();
    let old = internal(&g, 5, &[100, 200, 300]);
    let new = internal(&g, 6, &[100, 150, 200, 300]);
    let torn = mix(&old, &new, 0b10); // segment 1 (entries) new, header and rear old
    assert_ne!(torn, old);
    assert!(PageHeader::decode_front_rear(&torn, &g).is_ok());
    assert!(matches!(
        PageHeader::decode(&torn, &g),
        Err(LayoutError::BadChecksum { .. })
    ));
    assert_eq!(PageHeader::decode(&old, &g).unwrap().count(), 3);
    assert_eq!(PageHeader::decode(&new, &g).unwrap().count(), 4);
}

#[test]
fn value_lengths_round_trip() {
    let g = Geometry::new(512, 32).unwrap();
    let mut e = [0xAAu8; 48];
    for len in [0usize, 1, 3, 8, 31, 32] {
        let v: Vec<u8> = (0..len as u8).collect();
        encode_leaf_entry(&mut e, 9, &v, 5, true, 77);
        let mut p = [0u8; 512];
        p[64..112].copy_from_slice(&e);
        assert_eq!(
            leaf_slot(&p, &g, 0, 77),
            Ok(Slot::Live {
                key: 9,
                version: 5,
                len
            })
        );
        assert_eq!(leaf_value(&p, &g, 0, len), &v[..]);
    }
}

proptest! {
    #[test]
    fn any_single_word_change_is_caught(slot in 0usize..39, word in 0usize..3, bits in 1u64..) {
        let g = Geometry::new(1024, 8).unwrap();
        let mut p = leaf(&g, 1, &[]);
        let at0 = g.leaf_entry_offset(slot);
        encode_leaf_entry(&mut p[at0..at0 + 24], 5, &9u64.to_le_bytes(), 2, true, 1);
        let at = at0 + word * 8;
        let w = read_u64(&p, at).unwrap() ^ bits;
        p[at..at + 8].copy_from_slice(&w.to_le_bytes());
        let r = leaf_slot(&p, &g, slot, 1);
        prop_assert!(r.is_err(), "{r:?}");
    }

    /// Any mix of two internal images, by 64-byte segment in any order, is one of them or
    /// rejected.
    #[test]
    fn torn_internal_pages_are_rejected(
        ka in proptest::collection::btree_set(1u64..1000, 0..59),
        kb in proptest::collection::btree_set(1u64..1000, 0..59),
        mask in any::<u16>(),
    ) {
        let g = Geometry::new(1024, 8).unwrap();
        let ka: Vec<u64> = ka.into_iter().collect();
        let kb: Vec<u64> = kb.into_iter().collect();
        let a = internal(&g, 7, &ka);
        let b = internal(&g, 8, &kb);
        let m = mix(&a, &b, mask);
        if PageHeader::decode(&m, &g).is_ok() {
            prop_assert!(m == a || m == b);
        }
    }

    /// A leaf split rewrites the page whole: any segment mix of the old and new image is
    /// either rejected or, header and every slot, exactly one of them.
    #[test]
    fn torn_leaves_are_rejected(
        ka in proptest::collection::btree_set(10u64..1000, 0..39),
        kb in proptest::collection::btree_set(10u64..1000, 0..39),
        mask in any::<u16>(),
    ) {
        let g = Geometry::new(1024, 8).unwrap();
        let val = 3u64.to_le_bytes();
        let ea: Vec<(u64, &[u8])> = ka.iter().map(|&k| (k, &val[..])).collect();
        let eb: Vec<(u64, &[u8])> = kb.iter().rev().map(|&k| (k, &val[..])).collect();
        let a = leaf(&g, 7, &ea);
        let b = leaf(&g, 8, &eb);
        let m = mix(&a, &b, mask);
        let (ra, rb) = (read_leaf(&a, &g).unwrap(), read_leaf(&b, &g).unwrap());
        if let Ok(r) = read_leaf(&m, &g) {
            prop_assert!(r == ra || r == rb, "a torn leaf was accepted");
        }
    }

    /// The four-lane verifier decides exactly what slot-by-slot verification decides, on
    /// whole, torn and random images, for entry sizes with a loop of their own (24 to 48
    /// bytes) and without (56, 72), with and without a remainder of fewer than four slots.
    #[test]
    fn verify_leaf_agrees_with_leaf_slot(
        ka in proptest::collection::btree_set(10u64..1000, 0..39),
        mask in any::<u16>(),
        noise in proptest::collection::vec(any::<u8>(), 1024),
        which in 0u8..3,
        vs in prop_oneof![Just(8usize), Just(16), Just(24), Just(32), Just(40), Just(56)],
        bad in 0usize..64,
    ) {
        let g = Geometry::new(1024, vs).unwrap();
        let val = [5u8; 56];
        let ea: Vec<(u64, &[u8])> = ka.iter().map(|&k| (k, &val[..vs])).collect();
        let ea = &ea[..ea.len().min(g.leaf_capacity())];
        let a = leaf(&g, 7, ea);
        let b = leaf(&g, 8, &[]);
        let p = match which {
            0 => {
                // One flipped byte somewhere among the entries (or none, past them).
                let mut p = a;
                if bad < g.leaf_capacity() {
                    p[g.leaf_entry_offset(bad) + 9] ^= 1;
                }
                p
            }
            1 => mix(&a, &b, mask),
            _ => noise.try_into().unwrap(),
        };
        let mut seen = Vec::new();
        let r = verify_leaf(&p, &g, 7, |s, slot| seen.push((s, slot)));
        let each: Result<Vec<_>, _> = (0..g.leaf_capacity())
            .map(|s| leaf_slot(&p, &g, s, 7).map(|x| (s, x)))
            .collect();
        match (r, each) {
            (Ok(()), Ok(all)) => prop_assert_eq!(seen, all),
            (Err(e1), Err(e2)) => {
                prop_assert_eq!(e1, e2);
                // Every slot before the failing one was reported, none after it.
                let first_bad = (0..g.leaf_capacity())
                    .find(|&s| leaf_slot(&p, &g, s, 7).is_err())
                    .unwrap();
                prop_assert_eq!(seen.len(), first_bad);
            }
            (r, e) => prop_assert!(false, "verify_leaf {:?}, leaf_slot {:?}", r, e),
        }
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let g = Geometry::new(1024, 8).unwrap();
        let _ = PageHeader::decode(&bytes, &g);
        if bytes.len() >= 1024 {
            for s in 0..g.leaf_capacity() {
                let _ = leaf_slot(&bytes, &g, s, 1);
            }
        }
    }
}

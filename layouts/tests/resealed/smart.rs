//! SMART: leaves (CRC-64/XZ over the valid bit, the meta word, the key and the value area),
//! internal nodes (header word, slots, reverse pointer: written by CAS, no checksum) and the
//! tree's meta block.
use super::{interesting, mutate_words, no_panic};
use crate::common::{Rng, rounds};
use remora_layouts::GlobalAddr;
use remora_layouts::smart::{self, LeafStatus, LeafView, NodeType, Slot, SlotKind};

/// A valid leaf image: `key`, `value` in a `cap`-byte value area, sealed as a writer seals it.
fn leaf(key: &[u8], value: &[u8], cap: usize, valid: bool) -> Vec<u8> {
    let mut img = vec![0u8; smart::leaf_bytes(key.len(), cap)];
    let status = LeafStatus::live(valid);
    smart::encode_leaf(&mut img, 0x40, status, 0, key, value, cap).unwrap();
    reseal_leaf(&mut img);
    img
}

/// Re-seals a (possibly mutated) leaf: the CRC-64/XZ over the valid bit and what its meta word
/// says the checksum covers, wherever that fits the image (as a hostile writer would).
fn reseal_leaf(img: &mut [u8]) {
    let word = |img: &[u8], at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    let meta = word(img, 24);
    let (key_len, val_cap) = ((meta & 0xffff) as usize, (meta >> 32 & 0xffff) as usize);
    let end = 32 + key_len.div_ceil(8) * 8 + val_cap.div_ceil(8) * 8;
    if end <= img.len() {
        let valid = word(img, 8) & 1 == 1;
        let sum = smart::leaf_crc(valid, &img[24..end]);
        img[16..24].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Overwrites one 16-bit field of the meta word (key length, value length, capacity, magic).
fn mutate_meta(r: &mut Rng, img: &mut [u8]) {
    let mut meta = u64::from_le_bytes(img[24..32].try_into().unwrap());
    let sh = 16 * r.below(4);
    let old = meta >> sh & 0xffff;
    meta = meta & !(0xffff << sh) | (interesting(r, old) & 0xffff) << sh;
    img[24..32].copy_from_slice(&meta.to_le_bytes());
}

#[test]
fn smart_leaves_resealed() {
    let seeds = [
        leaf(b"k", b"", 8, true),
        leaf(b"some-key", &[7u8; 8], 8, true),
        leaf(&[0xAB; 200], &[1u8; 100], 1000, false),
        leaf(&[0x11; 256], &[2u8; 64], 3000, true),
    ];
    let mut r = Rng(0x5EA1_1EAF);
    let mut accepted = 0u64;
    for round in 0..rounds() {
        let seed = &seeds[(round % seeds.len() as u64) as usize];
        let mut img = seed.clone();
        match r.below(3) {
            0 => mutate_meta(&mut r, &mut img),
            1 => mutate_words(&mut r, &mut img, 0),
            _ => {
                mutate_meta(&mut r, &mut img);
                mutate_words(&mut r, &mut img, 0);
            }
        }
        reseal_leaf(&mut img);
        // The slot may announce another size than the leaf's: a shorter or longer read.
        let units = 1 + r.below(smart::MAX_LEAF_BYTES as u64 / 64) as usize;
        let mut other = img.clone();
        other.resize(units * 64, 0);
        reseal_leaf(&mut other);
        no_panic("smart leaf", round, &&img[..32], || {
            for bytes in [&img[..], &other[..], &img[..img.len().min(64)]] {
                let Ok(v) = LeafView::decode(bytes) else {
                    continue;
                };
                accepted += 1;
                // Its own invariants: what the meta word says, inside the image.
                let m = v.meta;
                assert!((1..=smart::MAX_KEY_LEN).contains(&m.key_len));
                assert!(m.val_len <= m.val_cap && m.bytes() == bytes.len());
                assert!(m.bytes() <= smart::MAX_LEAF_BYTES);
                assert_eq!((v.key.len(), v.value.len()), (m.key_len, m.val_len));
                assert!(m.body_end() <= smart::leaf_lock_offset(bytes.len()));
                assert_eq!(v.status.is_obsolete(), v.status.forward().is_some());
                // The checksum the reader verifies, over what the decoder hands it: the very
                // bytes the writer sealed (a mismatch would refuse a valid leaf).
                let sum = smart::leaf_crc(v.status.is_valid(), v.checksummed());
                assert_eq!(
                    sum, v.checksum,
                    "checksummed() is not what the writer seals"
                );
                let _ = smart::decode_reverse(v.reverse);
            }
        });
    }
    assert!(
        accepted > rounds() / 10,
        "too few re-sealed leaves decoded ({accepted}): the re-sealing is wrong"
    );
}

/// A valid Node`ty` image: a header at `depth` with a prefix, and a few leaf and node slots.
fn node(ty: NodeType, depth: usize, prefix: &[u8]) -> Vec<u8> {
    let mut img = vec![0u8; ty.bytes()];
    let parent = GlobalAddr::new(0, 4096);
    img[0..8].copy_from_slice(&smart::encode_reverse(parent).unwrap().to_le_bytes());
    let h = smart::Header::new(depth, ty, prefix).unwrap();
    img[8..16].copy_from_slice(&h.raw().to_le_bytes());
    for i in 0..ty.capacity().min(5) {
        let addr = GlobalAddr::new(i as u16, 64 * (i as u64 + 1));
        let s = match i {
            0 => Slot::node(3, addr, NodeType::N16).unwrap(),
            4 => Slot::dead(9),
            _ => Slot::leaf(i as u8 * 40, addr, 128).unwrap(),
        };
        let at = smart::slot_offset(i);
        img[at..at + 8].copy_from_slice(&s.raw().to_le_bytes());
    }
    img
}

#[test]
fn smart_internal_nodes_mutated() {
    // Internal nodes carry no checksum (slots change by CAS): a mutated image is already what
    // a hostile writer can store. Every word goes through its own decoder.
    let seeds = [
        node(NodeType::N4, 0, &[]),
        node(NodeType::N16, 6, &[1, 2, 3, 4, 5, 6]),
        node(NodeType::N48, 255, &[9, 9]),
        node(NodeType::N256, smart::MAX_KEY_LEN, &[7]),
    ];
    let mut r = Rng(0x0A27_C0DE);
    let (mut headers, mut slots) = (0u64, 0u64);
    for round in 0..rounds() {
        let seed = &seeds[(round % seeds.len() as u64) as usize];
        let mut img = seed.clone();
        mutate_words(&mut r, &mut img, 0);
        let word = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
        no_panic("smart internal node", round, &word(8), || {
            let _ = smart::decode_reverse(word(0));
            if let Ok(h) = smart::Header::decode(word(8)) {
                headers += 1;
                assert!(h.prefix_len() <= smart::MAX_PREFIX);
                assert!(h.depth() <= smart::MAX_KEY_LEN);
                assert!(h.prefix_start() <= h.depth());
                let _ = (h.prefix(), h.node_type().capacity(), h.clean().frozen(true));
            }
            let cap = (img.len() - smart::NODE_SLOTS_OFFSET) / 8;
            for i in 0..cap {
                match Slot::from_raw(word(smart::slot_offset(i))).kind() {
                    Ok(SlotKind::Leaf { bytes, .. }) => {
                        slots += 1;
                        assert!((64..=smart::MAX_LEAF_BYTES).contains(&bytes));
                    }
                    Ok(SlotKind::Node { ty, .. }) => {
                        slots += 1;
                        assert!(ty.bytes() <= smart::MAX_NODE_BYTES);
                    }
                    _ => {}
                }
            }
        });
    }
    assert!(
        headers > 0 && slots > 0,
        "no mutated header or slot decoded: the seeds are wrong"
    );
}

#[test]
fn smart_tree_meta_mutated() {
    let good = smart::TreeMeta {
        magic: smart::TREE_MAGIC,
        flags: 0,
        root: 0x40,
        shape: 0,
    }
    .encode();
    let mut r = Rng(0x7EEE_3E7A);
    for round in 0..rounds() / 4 {
        let mut img = good.to_vec();
        mutate_words(&mut r, &mut img, 0);
        let cut = r.below(img.len() as u64 + 1) as usize;
        no_panic("smart tree meta", round, &img, || {
            let _ = smart::TreeMeta::decode(&img);
            let _ = smart::TreeMeta::decode(&img[..cut]);
        });
    }
}

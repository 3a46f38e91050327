//! CANRT data nodes: lock word, meta word (bitmap, served, frozen, epoch) and DataItems, each
//! sealed by a CRC-32C in its tail word over key, value area, opflag, length and ticket.
use super::{interesting, mutate_words, no_panic};
use crate::common::{Rng, rounds};
use remora_layouts::canrt::{self, DataGeometry, ItemOp, Meta};

/// CRC-32C, as the format's item check.
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// Re-seals one item as a writer does: the check over its key, its whole value area, the
/// opflag and length bytes and the ticket, from the (possibly crafted) tail word.
fn reseal_item(g: &DataGeometry, item: &mut [u8]) {
    let size = g.item_size() as usize;
    let tail = u64::from_le_bytes(item[size - 8..size].try_into().unwrap());
    let (op, len, ticket) = (tail >> 1 & 3, tail >> 8 & 0xff, tail >> 16 & 0xffff);
    let mut d = CRC32C.digest();
    d.update(&item[..size - 8]);
    d.update(&[op as u8, len as u8]);
    d.update(&ticket.to_le_bytes());
    let tail = tail & 0xffff_ffff | (d.finalize() as u64) << 32;
    item[size - 8..size].copy_from_slice(&tail.to_le_bytes());
}

/// A valid data node of `g`: a lock word, a meta word and items in `slots / 2` slots.
fn data_node(g: &DataGeometry) -> Vec<u8> {
    let mut img = vec![0u8; g.node_size() as usize];
    let mut bitmap = 0u32;
    for s in 0..g.slots / 2 {
        let at = g.slot_off(s) as usize;
        let size = g.item_size() as usize;
        let value = vec![s as u8; (s as usize * 5) % (g.value_cap as usize + 1)];
        let op = [ItemOp::Insert, ItemOp::Update, ItemOp::Delete][s as usize % 3];
        g.encode_item(
            &mut img[at..at + size],
            s as u128 * 11,
            &value,
            op,
            s as u64,
            s % 2 == 0,
        )
        .unwrap();
        bitmap |= 1 << s;
    }
    let meta = Meta::new(bitmap, 7, false, 3);
    img[canrt::FRONT_OFF as usize..][..8].copy_from_slice(&meta.0.to_le_bytes());
    img
}

#[test]
fn canrt_data_nodes_resealed() {
    let geometries = [
        DataGeometry::new(2, 8).unwrap(),
        DataGeometry::new(16, 8).unwrap(),
        DataGeometry::new(32, 248)
            .unwrap()
            .with_key_len(16)
            .unwrap(),
        DataGeometry::new(5, 64).unwrap().with_key_len(16).unwrap(),
    ];
    let mut r = Rng(0xCA27_DA7A);
    let mut accepted = 0u64;
    for g in &geometries {
        let good = data_node(g);
        let size = g.item_size() as usize;
        for round in 0..rounds() / geometries.len() as u64 {
            let mut img = good.clone();
            if r.below(2) == 0 {
                mutate_words(&mut r, &mut img, 0);
            } else {
                // A crafted tail: opflag, length, ticket or valid bit.
                let s = r.below(g.slots as u64) as u32;
                let at = g.tail_off(s) as usize;
                let old = u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
                let tail = match r.below(4) {
                    0 => old & !0b110 | r.below(4) << 1,
                    1 => old & !0xff00 | (interesting(&mut r, old >> 8) & 0xff) << 8,
                    2 => old & !0xffff_0000 | (interesting(&mut r, old >> 16) & 0xffff) << 16,
                    _ => old ^ 1,
                };
                img[at..at + 8].copy_from_slice(&tail.to_le_bytes());
            }
            for s in 0..g.slots {
                let at = g.slot_off(s) as usize;
                reseal_item(g, &mut img[at..at + size]);
            }
            let meta = Meta(u64::from_le_bytes(img[8..16].try_into().unwrap()));
            no_panic("canrt data node", round, &meta, || {
                let bitmap = match meta.check(g.slots) {
                    Ok(m) => m.bitmap(),
                    Err(_) => return,
                };
                let _ = (meta.served(), meta.frozen(), meta.epoch());
                for s in (0..32).filter(|s| bitmap >> s & 1 == 1) {
                    assert!(
                        s < g.slots,
                        "a checked bitmap marks slot {s} of {}",
                        g.slots
                    );
                    let at = g.slot_off(s) as usize;
                    let tail =
                        u64::from_le_bytes(img[at + size - 8..at + size].try_into().unwrap());
                    let _ = (canrt::tail_valid(tail), canrt::tail_processed(tail));
                    if let Ok(it) = g.decode_item(&img[at..]) {
                        // Count the items that decode although they differ from the seed's.
                        accepted += (img[at..at + size] != good[at..at + size]) as u64;
                        assert!(it.value.len() <= g.value_cap as usize);
                        assert!(it.key <= g.max_key() && it.ticket <= canrt::TICKET_MASK);
                        let mut out = [0u8; canrt::MAX_KEY];
                        assert_eq!(g.key_from_be(g.key_to_be(it.key, &mut out)), Some(it.key));
                    }
                    // A read cut short is refused.
                    assert!(g.decode_item(&img[at..at + size - 1]).is_err());
                }
            });
        }
    }
    assert!(
        accepted > rounds() / 10,
        "too few mutated, re-sealed items decoded ({accepted}): the re-sealing is wrong"
    );
}

//! CHIME leaves: the prefix with its replicated group stamps, and groups (stamps, sibling, hop
//! bitmaps, slot states, entries) whose checksum word spans the stamps and the states words.
use super::{interesting, mutate_words, no_panic};
use crate::common::{Rng, rounds};
use remora_layouts::chime::{self, Entry, GroupHeader, LeafPrefix};

/// A valid leaf: every group written with a few live entries, the prefix's stamps replicating
/// each group's own.
fn leaf() -> Vec<u8> {
    let mut img = vec![0u8; chime::LEAF_LEN];
    let mut prefix = LeafPrefix {
        vacancy: 0x0f0f,
        stamps: [0; 2],
        low: 100,
    };
    for g in 0..chime::GROUPS {
        let own = 3 + g as u16;
        let h = GroupHeader {
            stamps: GroupHeader::pack(own, own.wrapping_sub(1), own + 1),
            sibling: if g + 1 == chime::GROUPS { 0x1000 } else { 0 },
        };
        let mut es = [Entry::free(0); chime::NEIGHBOURHOOD];
        for (i, e) in es.iter_mut().enumerate().filter(|(i, _)| (i + g) % 3 != 0) {
            *e = Entry {
                live: true,
                len: (i % (chime::MAX_VALUE + 1)) as u8,
                hop: 1 << i,
                key: 100 + (g * 8 + i) as u64,
                value: [g as u8; chime::MAX_VALUE],
            };
        }
        let at = chime::group_offset(g);
        chime::encode_group(&h, &es, &mut img[at..at + chime::GROUP_LEN]);
        prefix.set_stamp(g, own);
    }
    prefix.encode(&mut img);
    img
}

/// Overwrites a byte or a nibble of the hop or state words (a bitmap bit, a slot state).
fn mutate_bitmaps(r: &mut Rng, group: &mut [u8]) {
    let at = if r.below(2) == 0 { 16 } else { 24 };
    let mut w = u64::from_le_bytes(group[at..at + 8].try_into().unwrap());
    match r.below(3) {
        0 => w ^= 1 << r.below(32),
        1 => w = w & !(0xf << (4 * r.below(8))) | (r.below(16) << (4 * r.below(8))),
        _ => w = w & !0xffff_ffff | interesting(r, w) & 0xffff_ffff,
    }
    group[at..at + 8].copy_from_slice(&w.to_le_bytes());
}

#[test]
fn chime_leaves_resealed() {
    let good = leaf();
    let mut r = Rng(0xC41E_0001);
    let mut accepted = 0u64;
    for round in 0..rounds() {
        let mut img = good.clone();
        // Mutate the prefix, or 1-3 words or bitmaps of one or two groups, then re-seal every
        // group with the format's own seal.
        match r.below(4) {
            0 => mutate_words(&mut r, &mut img[..chime::PREFIX_LEN], 0),
            1 => mutate_words(&mut r, &mut img, chime::PREFIX_LEN),
            _ => {
                for _ in 0..1 + r.below(2) {
                    let g = r.below(chime::GROUPS as u64) as usize;
                    let at = chime::group_offset(g);
                    mutate_bitmaps(&mut r, &mut img[at..at + chime::GROUP_LEN]);
                }
            }
        }
        for g in 0..chime::GROUPS {
            let at = chime::group_offset(g);
            chime::seal_group(&mut img[at..at + chime::GROUP_LEN]).unwrap();
        }
        let cut = r.below(img.len() as u64) as usize;
        no_panic("chime leaf", round, &&img[..chime::PREFIX_LEN], || {
            let p = LeafPrefix::decode(&img).unwrap();
            assert!(LeafPrefix::decode(&img[..cut.min(chime::PREFIX_LEN - 1)]).is_err());
            for g in 0..chime::GROUPS {
                let at = chime::group_offset(g);
                let group = &img[at..at + chime::GROUP_LEN];
                let mut es = [Entry::default(); chime::NEIGHBOURHOOD];
                let Ok(h) = chime::decode_group(group, &mut es) else {
                    continue;
                };
                // Count the groups that decode although they differ from the seed's.
                accepted += (group != &good[at..at + chime::GROUP_LEN]) as u64;
                // Its own invariants: 48-bit stamps, lengths within a value, and a group
                // image that is re-sealed unchanged decodes to the same entries.
                assert!(h.stamps >> 48 == 0);
                for e in &es {
                    assert!(e.len as usize <= chime::MAX_VALUE);
                    assert!(e.live || e.len == 0);
                }
                let mut again = [0u8; chime::GROUP_LEN];
                chime::encode_group(&h, &es, &mut again);
                let mut es2 = [Entry::default(); chime::NEIGHBOURHOOD];
                assert_eq!(chime::decode_group(&again, &mut es2), Ok(h));
                assert_eq!(es, es2);
                let _ = chime::stamp_le(p.stamp(g), h.own());
                let _ = (h.prev(), h.next());
                for e in es.iter().filter(|e| e.live) {
                    let _ = chime::home(e.key);
                }
            }
            // A group cut short is refused, not read past its end.
            let at = chime::group_offset(cut % chime::GROUPS);
            let mut es = [Entry::default(); chime::NEIGHBOURHOOD];
            let short = &img[at..at + cut % chime::GROUP_LEN];
            assert!(chime::decode_group(short, &mut es).is_err());
        });
    }
    assert!(
        accepted > rounds() / 10,
        "too few mutated, re-sealed groups decoded ({accepted}): the re-sealing is wrong"
    );
}

#[test]
fn chime_seal_group_is_what_encode_group_stores() {
    let good = leaf();
    let mut again = good.clone();
    for g in 0..chime::GROUPS {
        let at = chime::group_offset(g);
        chime::seal_group(&mut again[at..at + chime::GROUP_LEN]).unwrap();
    }
    assert_eq!(again, good);
    assert!(chime::seal_group(&mut [0u8; chime::GROUP_LEN - 1]).is_err());
}

//! Leaf images: which groups a key's neighbourhood spans, verifying groups read (each group
//! against its checksum, neighbouring groups against each other's stamps), and encoding the
//! groups a write changes with their new stamps. Format and argument:
//! `remora_layouts::chime`.
use super::hopscotch::Table;
use remora_layouts::LayoutError;
use remora_layouts::chime::{
    Entry, GROUP_LEN, GROUPS, GroupHeader, LEAF_LEN, LeafPrefix, NEIGHBOURHOOD, PREFIX_LEN, SLOTS,
    TORN_PAIR, encode_group, group_offset, stamp_le,
};

/// A cyclic run of groups: `count` groups from `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) first: usize,
    pub(crate) count: usize,
}

impl Run {
    /// The groups holding the neighbourhood of home slot `h` (one, or two).
    pub(crate) fn window(h: usize) -> Run {
        Run {
            first: h / NEIGHBOURHOOD,
            count: if h.is_multiple_of(NEIGHBOURHOOD) {
                1
            } else {
                2
            },
        }
    }

    /// Every group.
    pub(crate) const ALL: Run = Run {
        first: 0,
        count: GROUPS,
    };

    /// This run with the group before it and the one after it (every group if that is
    /// all of them): a writer that rewrites groups of `self` learns their neighbours'
    /// stamps from it.
    pub(crate) fn widened(self) -> Run {
        if self.count + 2 >= GROUPS {
            return Run::ALL;
        }
        Run {
            first: (self.first + GROUPS - 1) % GROUPS,
            count: self.count + 2,
        }
    }

    /// The slots from `h` forward to the end of this run's last group but one: where a
    /// writer that READ this run may put a key of home `h` (in the run, not its last group)
    /// and rewrite groups whose neighbours it read. Every slot if the run is every group.
    pub(crate) fn usable_from(self, h: usize) -> u64 {
        if self.count >= GROUPS {
            return u64::MAX;
        }
        let last = (self.first + self.count - 2) % GROUPS;
        let end = (last + 1) * NEIGHBOURHOOD;
        let n = (end + SLOTS - h) % SLOTS;
        (0..n).fold(0u64, |m, d| m | 1 << ((h + d) % SLOTS))
    }

    /// The groups from the one of slot `a` forward to the one of slot `b`.
    pub(crate) fn span(a: usize, b: usize) -> Run {
        let (ga, gb) = (a / NEIGHBOURHOOD, b / NEIGHBOURHOOD);
        Run {
            first: ga,
            count: (gb + GROUPS - ga) % GROUPS + 1,
        }
    }

    /// The groups in order.
    pub(crate) fn groups(self) -> impl Iterator<Item = usize> {
        (0..self.count).map(move |i| (self.first + i) % GROUPS)
    }

    /// The byte ranges of the leaf to READ (or WRITE) for these groups: one, or two when
    /// the run wraps past the last group.
    pub(crate) fn ranges(self) -> heapless::Vec<(usize, usize), 2> {
        let mut v = heapless::Vec::new();
        let end = self.first + self.count;
        let _ = v.push((group_offset(self.first), group_offset(end.min(GROUPS))));
        if end > GROUPS {
            let _ = v.push((group_offset(0), group_offset(end - GROUPS)));
        }
        v
    }
}

/// Verifies group `g` of leaf image `leaf` and decodes its entries into `t`.
pub(crate) fn decode_group(
    leaf: &[u8],
    g: usize,
    t: &mut Table,
) -> Result<GroupHeader, LayoutError> {
    let at = group_offset(g);
    remora_layouts::chime::decode_group(&leaf[at..at + GROUP_LEN], group_entries(t, g))
}

/// The 8 entries of group `g` in `t`.
pub(crate) fn group_entries(t: &mut Table, g: usize) -> &mut [Entry; NEIGHBOURHOOD] {
    &mut t.e.as_chunks_mut::<NEIGHBOURHOOD>().0[g]
}

/// Encodes group `g` of `t` under header `h` into leaf image `leaf` (its checksum
/// recomputed).
pub(crate) fn encode_group_of(leaf: &mut [u8], t: &Table, g: usize, h: &GroupHeader) {
    let at = group_offset(g);
    encode_group(
        h,
        &t.e.as_chunks::<NEIGHBOURHOOD>().0[g],
        &mut leaf[at..at + GROUP_LEN],
    );
}

/// Verifies every group of `run` in `leaf` into `t`, and each neighbouring pair against the
/// other's stamps (module docs of `remora_layouts::chime`). Returns the first group's header
/// (every header of a verified run carries the same sibling).
pub(crate) fn decode_run(leaf: &[u8], run: Run, t: &mut Table) -> Result<GroupHeader, LayoutError> {
    let mut first = None;
    let mut prev: Option<GroupHeader> = None;
    for g in run.groups() {
        let h = decode_group(leaf, g, t)?;
        if let Some(p) = prev
            && !(stamp_le(p.next(), h.own()) && stamp_le(h.prev(), p.own()))
        {
            return Err(TORN_PAIR);
        }
        if run.count == GROUPS
            && g == (run.first + GROUPS - 1) % GROUPS
            && let Some(f) = first
        {
            // The whole leaf: the last group and the first are neighbours too.
            let f: GroupHeader = f;
            if !(stamp_le(h.next(), f.own()) && stamp_le(f.prev(), h.own())) {
                return Err(TORN_PAIR);
            }
        }
        if let Some(p) = prev
            && p.sibling != h.sibling
        {
            return Err(LayoutError::Inconsistent {
                what: "group headers of one moment disagree on the leaf's metadata",
            });
        }
        first.get_or_insert(h);
        prev = Some(h);
    }
    first.ok_or(LayoutError::Inconsistent {
        what: "an empty run of groups",
    })
}

/// The leaf's metadata: its sibling, as every group header carries it, and its low key, as
/// its prefix does (no fences in the groups: `remora_layouts::chime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) sibling: u64,
    pub(crate) low: u64,
}

impl Meta {
    /// The metadata of a leaf whose groups carry `h` and whose prefix is `p`.
    pub(crate) fn of(h: &GroupHeader, p: &LeafPrefix) -> Meta {
        Meta {
            sibling: h.sibling,
            low: p.low,
        }
    }
}

/// Encodes the groups in `dirty` (bit g) of `t` into `leaf` with new stamps (one more than
/// in `prefix`, which is updated, with the vacancy bits of those groups' slots, and encoded
/// into `leaf` too, with the leaf's low key);
/// each rewritten header records its neighbours' stamps after this write.
pub(crate) fn encode_groups(
    leaf: &mut [u8],
    t: &Table,
    dirty: u8,
    meta: Meta,
    prefix: &mut LeafPrefix,
) {
    for g in 0..GROUPS {
        if dirty & (1 << g) != 0 {
            prefix.set_stamp(g, prefix.stamp(g).wrapping_add(1));
        }
    }
    for g in 0..GROUPS {
        if dirty & (1 << g) == 0 {
            continue;
        }
        let h = GroupHeader {
            stamps: GroupHeader::pack(
                prefix.stamp(g),
                prefix.stamp((g + GROUPS - 1) % GROUPS),
                prefix.stamp((g + 1) % GROUPS),
            ),
            sibling: meta.sibling,
        };
        encode_group_of(leaf, t, g, &h);
    }
    // Only the rewritten groups' slots are known to `t` (a writer may have read only some).
    let known = (0..GROUPS)
        .filter(|g| dirty & (1 << g) != 0)
        .fold(0u64, |m, g| m | 0xff << (g * NEIGHBOURHOOD));
    prefix.vacancy = (prefix.vacancy & !known) | (t.vacancy() & known);
    prefix.low = meta.low;
    prefix.encode(leaf);
}

/// Sets in `prefix` the stamps of the groups of `run` as their headers in `leaf` carry them
/// (verified by [`decode_run`] before): a writer that READs no prefix
/// (`ChimeConfig::prefix_free`) stamps its groups from these. Under the leaf's lock a
/// group's own stamp is its latest.
pub(crate) fn stamps_from(leaf: &[u8], run: Run, prefix: &mut LeafPrefix) {
    for g in run.groups() {
        if let Ok(h) = GroupHeader::decode(&leaf[group_offset(g)..]) {
            prefix.set_stamp(g, h.own());
        }
    }
}

/// A whole leaf image of `t`: every group rewritten (stamps one more than `prefix`'s).
pub(crate) fn encode_leaf(leaf: &mut [u8], t: &Table, meta: Meta, prefix: &mut LeafPrefix) {
    encode_groups(leaf, t, u8::MAX, meta, prefix);
}

/// The groups holding the slots of `mask` (bit s: slot s).
pub(crate) fn groups_of(mask: u64) -> u8 {
    (0..GROUPS)
        .filter(|g| (mask >> (g * NEIGHBOURHOOD)) & 0xff != 0)
        .fold(0, |m, g| m | 1 << g)
}

/// Maximal runs of consecutive groups in `dirty` (not wrapping): byte ranges to WRITE.
pub(crate) fn dirty_ranges(dirty: u8) -> heapless::Vec<(usize, usize), 4> {
    let mut v = heapless::Vec::new();
    let mut g = 0;
    while g < GROUPS {
        if dirty & (1 << g) == 0 {
            g += 1;
            continue;
        }
        let start = g;
        while g < GROUPS && dirty & (1 << g) != 0 {
            g += 1;
        }
        // At most 4 runs of set bits in 8 bits.
        let _ = v.push((group_offset(start), group_offset(g)));
    }
    v
}

const _: () =
    assert!(group_offset(GROUPS) == LEAF_LEN && PREFIX_LEN + GROUPS * GROUP_LEN == LEAF_LEN);

#[cfg(test)]
mod tests {
    use super::*;
    use std_alloc::vec::Vec;

    fn leaf_with(t: &Table, prefix: &mut LeafPrefix) -> [u8; LEAF_LEN] {
        let mut b = [0u8; LEAF_LEN];
        let meta = Meta { sibling: 0, low: 0 };
        encode_leaf(&mut b, t, meta, prefix);
        b
    }

    #[test]
    fn a_group_pair_from_two_moments_is_refused_in_either_order() {
        let mut t = Table::empty();
        let mut p = LeafPrefix::default();
        let old = leaf_with(&t, &mut p);
        // A write of groups 2 and 3 (an entry hopped across them).
        t.e[17] = Entry {
            live: true,
            len: 8,
            key: 5,
            ..Entry::default()
        };
        let mut new = old;
        let meta = Meta { sibling: 0, low: 0 };
        encode_groups(&mut new, &t, 0b1100, meta, &mut p);
        let run = Run { first: 2, count: 2 };
        let mut scratch = Table::empty();
        assert!(decode_run(&old, run, &mut scratch).is_ok());
        assert!(decode_run(&new, run, &mut scratch).is_ok());
        for (a, b) in [(&old, &new), (&new, &old)] {
            let mut mix = *a;
            mix[group_offset(3)..group_offset(4)]
                .copy_from_slice(&b[group_offset(3)..group_offset(4)]);
            assert_eq!(decode_run(&mix, run, &mut scratch), Err(TORN_PAIR));
        }
        // A later write of group 2 alone, read with group 3 from before the pair's write:
        // still refused (the later write recorded group 3's newer stamp).
        let mut later = new;
        encode_groups(&mut later, &t, 0b0100, meta, &mut p);
        let mut mix = later;
        mix[group_offset(3)..group_offset(4)]
            .copy_from_slice(&old[group_offset(3)..group_offset(4)]);
        assert_eq!(decode_run(&mix, run, &mut scratch), Err(TORN_PAIR));
        // And group 3 from the pair's write with group 2 from the later one: one moment.
        let mut ok = later;
        ok[group_offset(3)..group_offset(4)]
            .copy_from_slice(&new[group_offset(3)..group_offset(4)]);
        assert!(decode_run(&ok, run, &mut scratch).is_ok());
    }

    /// A READ of a neighbourhood whose segments come from two writes of one group (a
    /// value update: the entry and its header; an insert: the group rewritten) is refused
    /// for any single word from the other write, in either direction.
    #[test]
    fn a_run_with_a_group_torn_between_two_writes_is_refused() {
        let mut t = Table::empty();
        let mut p = LeafPrefix::default();
        t.e[17] = Entry {
            live: true,
            len: 8,
            key: 5,
            value: *b"oldvalue",
            ..Entry::default()
        };
        let old = leaf_with(&t, &mut p);
        let meta = Meta { sibling: 0, low: 0 };
        let h = GroupHeader::decode(&old[group_offset(2)..]).unwrap();
        let mut tu = t;
        tu.e[17].value = *b"newvalue";
        let mut updated = old;
        encode_group_of(&mut updated, &tu, 2, &h);
        let mut ti = t;
        ti.e[20] = Entry {
            live: true,
            len: 3,
            key: 9,
            ..Entry::default()
        };
        let mut inserted = old;
        encode_groups(&mut inserted, &ti, 0b0100, meta, &mut p);
        let run = Run { first: 2, count: 2 };
        let mut scratch = Table::empty();
        for new in [&updated, &inserted] {
            assert!(decode_run(new, run, &mut scratch).is_ok());
            let words: Vec<usize> = (group_offset(2) / 8..group_offset(3) / 8)
                .filter(|&i| old[i * 8..i * 8 + 8] != new[i * 8..i * 8 + 8])
                .collect();
            assert!(words.len() >= 2);
            for (a, b) in [(&old, new), (new, &old)] {
                for &i in &words {
                    let mut torn = *a;
                    torn[i * 8..i * 8 + 8].copy_from_slice(&b[i * 8..i * 8 + 8]);
                    assert!(
                        decode_run(&torn, run, &mut scratch).is_err(),
                        "word {i} from the other write passes"
                    );
                }
            }
        }
    }

    #[test]
    fn runs_windows_and_ranges() {
        assert_eq!(Run::window(8), Run { first: 1, count: 1 });
        assert_eq!(Run::window(60).ranges().len(), 2);
        assert_eq!(Run::span(60, 3), Run { first: 7, count: 2 });
        assert_eq!(groups_of(1 << 63 | 1), 0b1000_0001);
        assert_eq!(dirty_ranges(0b1000_0011).len(), 2);
        // Widened by a group each side; every group once that is all.
        assert_eq!(Run::window(9).widened(), Run { first: 0, count: 4 });
        assert_eq!(Run::window(0).widened(), Run { first: 7, count: 3 });
        assert_eq!(Run { first: 2, count: 6 }.widened(), Run::ALL);
        // Usable: from the home to the end of the last group but one, cyclically.
        let r = Run::window(9).widened();
        assert_eq!(r.usable_from(9), (9..24).fold(0, |m, s| m | 1u64 << s));
        let r = Run::window(60).widened();
        assert_eq!(r, Run { first: 6, count: 4 });
        assert_eq!(
            r.usable_from(60),
            (60..64).chain(0..8).fold(0, |m, s| m | 1u64 << s)
        );
        assert_eq!(Run::ALL.usable_from(5), u64::MAX);
    }
}

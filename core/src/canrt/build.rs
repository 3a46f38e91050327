//! Building a tree's shape from its keys (the server does this at format and at every
//! resize): which key bits the levels read, the height `k` and width `m` of the prefix
//! array, the prefix nodes' characters and NodeIDs, and which keys go to which data node.
//!
//! Levels read the key bits that differ between keys, most significant first, at most 8 per
//! level; runs of bits equal in every key become gaps (of at most 64 bits). Keys are `u128`s
//! of the tree's width (`key_len` bytes, big-endian). In a 16-byte tree, the paper's, levels
//! and gaps fall on byte boundaries, so a prefix node's characters are key bytes, and every
//! key byte equal in all keys (a shared string prefix) is a gap. `k` is the smallest height that holds
//! every key with at most `target` keys per data node (so each data node starts at most half
//! full, `target` being half its slots), and each level's width `m` is the most characters
//! one of its nodes needs. Inner nodes have one character
//! per distinct key digit; a last-level node's characters are range starts, so one data node
//! holds consecutive keys. Data nodes are numbered in key order.
use remora_layouts::LayoutError;
use remora_layouts::canrt::{MAX_DATA_NODES, MAX_SEGMENTS, PrefixGeometry, Segment};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// A tree's shape and the keys' placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub segments: Vec<Segment>,
    pub geometry: PrefixGeometry,
    pub prefix: Vec<u8>,
    /// Per data node, the range of indexes into the (sorted) keys it holds.
    pub groups: Vec<(usize, usize)>,
}

/// Every segment the keys call for: gaps for runs of at least `min_gap` constant bits, levels
/// of at most 8 bits for the rest (runs of differing bits and the shorter constant runs
/// between them, which a level reads as one constant digit).
fn all_segments(keys: &[u128], min_gap: u32, bits: u32) -> Vec<Segment> {
    let first = keys.first().copied().unwrap_or(0);
    let exact = keys.iter().fold(0u128, |d, k| d | (k ^ first));
    if exact == 0 {
        return vec![Segment::Level {
            lo: (bits - 8) as u8,
            width: 8,
            fanout: 1,
        }];
    }
    let exact = if bits > 64 { whole_bytes(exact) } else { exact };
    let diff = fill_short_gaps(exact, min_gap, bits);
    let mut out = Vec::new();
    let mut hi = bits; // exclusive top of the current run
    while hi > 0 {
        let varying = diff >> (hi - 1) & 1 == 1;
        let mut lo = hi - 1;
        while lo > 0 && (diff >> (lo - 1) & 1 == 1) == varying {
            lo -= 1;
        }
        if varying {
            let mut top = hi;
            while top > lo {
                let w = (top - lo).min(8);
                out.push(Segment::Level {
                    lo: (top - w) as u8,
                    width: w as u8,
                    fanout: 1,
                });
                top -= w;
            }
        } else {
            // A gap holds at most 64 bits: a longer constant run is several.
            let mut top = hi;
            while top > lo {
                let width = (top - lo).min(64);
                top -= width;
                let (lo, width) = (top as u8, width as u8);
                let value = Segment::Gap {
                    lo,
                    width,
                    value: 0,
                }
                .bits(first);
                out.push(Segment::Gap { lo, width, value });
            }
        }
        hi = lo;
    }
    out
}

/// `diff` with every byte that has a differing bit made all differing: levels and gaps then
/// fall on byte boundaries (a level's character is a key byte).
fn whole_bytes(diff: u128) -> u128 {
    let mut out = 0u128;
    for i in 0..16 {
        if diff >> (8 * i) & 0xFF != 0 {
            out |= 0xFF << (8 * i);
        }
    }
    out
}

/// `diff` with every run of zero bits shorter than `min_gap` set (read by a level, not a gap).
fn fill_short_gaps(diff: u128, min_gap: u32, bits: u32) -> u128 {
    let mut out = diff;
    let mut hi = bits;
    while hi > 0 {
        let varying = diff >> (hi - 1) & 1 == 1;
        let mut lo = hi - 1;
        while lo > 0 && (diff >> (lo - 1) & 1 == 1) == varying {
            lo -= 1;
        }
        if !varying && hi - lo < min_gap {
            let width = hi - lo;
            let mask = if width == 128 {
                u128::MAX
            } else {
                ((1u128 << width) - 1) << lo
            };
            out |= mask;
        }
        hi = lo;
    }
    out
}

/// Runs of equal digits of `seg` in `keys[lo..hi]` (sorted keys that agree on every higher
/// level and gap, so equal digits are adjacent): `(digit, start, end)`.
fn runs(keys: &[u128], seg: Segment, lo: usize, hi: usize) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut i = lo;
    while i < hi {
        let d = seg.bits(keys[i]) as u8;
        let mut j = i + 1;
        while j < hi && seg.bits(keys[j]) as u8 == d {
            j += 1;
        }
        out.push((d, i, j));
        i = j;
    }
    if lo == hi {
        out.push((0, lo, hi));
    }
    out
}

/// Packs consecutive runs into data nodes of at most `target` keys: `(first digit, start,
/// end)` per data node, or None if one run alone is over target.
fn pack(runs: &[(u8, usize, usize)], target: usize) -> Option<Vec<(u8, usize, usize)>> {
    let mut out = Vec::new();
    let mut r = 0;
    while r < runs.len() {
        let (d, a, mut b) = runs[r];
        if b - a > target {
            return None;
        }
        r += 1;
        while r < runs.len() && runs[r].2 - a <= target {
            b = runs[r].2;
            r += 1;
        }
        out.push((d, a, b));
    }
    Some(out)
}

/// One data node per run (per character), or None if a run is over `target`.
fn per_char(runs: &[(u8, usize, usize)], target: usize) -> Option<Vec<(u8, usize, usize)>> {
    runs.iter()
        .all(|&(_, a, b)| b - a <= target)
        .then(|| runs.to_vec())
}

/// One prefix node while planning: its index on its level, characters, and per character
/// the key range under it.
struct Pending {
    index: u64,
    chars: Vec<u8>,
    ranges: Vec<(usize, usize)>,
}

/// A planned prefix array: shape, bytes, data-node key ranges, and each level's width.
struct Levels {
    geometry: PrefixGeometry,
    prefix: Vec<u8>,
    groups: Vec<(usize, usize)>,
    widths: Vec<u16>,
}

/// How the last level makes data nodes.
#[derive(Clone, Copy)]
enum Leaves<'a> {
    /// New data nodes of at most this many keys, numbered in key order.
    Pack(usize),
    /// The paper's geometry (§3.1-3.2): one data node per last-level character (the keys
    /// sharing a `k`-character prefix), none holding more than this many keys, numbered in
    /// key order. Adjacent characters are never packed into one node.
    PerChar(usize),
    /// Keys stay in the data nodes they are in: `units[i]` is the data node of `keys[i]`
    /// (each node's keys contiguous in key order).
    Units(&'a [u32]),
}

/// Merges consecutive runs of the same data node; None if a run holds keys of two.
fn by_unit(runs: &[(u8, usize, usize)], units: &[u32]) -> Option<Vec<(u8, usize, usize)>> {
    let mut out: Vec<(u8, usize, usize)> = Vec::new();
    for &(d, a, b) in runs {
        if a == b {
            continue;
        }
        if units[a] != units[b - 1] {
            return None;
        }
        match out.last_mut() {
            Some(last) if units[last.1] == units[a] => last.2 = b,
            _ => out.push((d, a, b)),
        }
    }
    Some(out)
}

/// Plans `k` levels over `levels` (the first `k` level segments): level by level, each
/// level's width is the most characters any of its nodes needs.
fn plan_levels(
    keys: &[u128],
    levels: &[Segment],
    leaves: Leaves<'_>,
) -> Result<Option<Levels>, LayoutError> {
    let k = levels.len();
    let mut nodes = vec![(0u64, 0usize, keys.len())];
    let mut per_level: Vec<Vec<Pending>> = Vec::new();
    let mut widths: Vec<u16> = Vec::new();
    for (i, seg) in levels.iter().enumerate() {
        let last = i + 1 == k;
        let mut level = Vec::new();
        let mut width = 1usize;
        for &(index, lo, hi) in &nodes {
            let r = runs(keys, *seg, lo, hi);
            let r = match (last, leaves) {
                (false, _) => Some(r),
                (true, Leaves::Pack(target)) => pack(&r, target),
                (true, Leaves::PerChar(target)) => per_char(&r, target),
                (true, Leaves::Units(u)) => by_unit(&r, u),
            };
            let Some(r) = r else {
                return Ok(None);
            };
            if r.len() > 256 {
                return Ok(None);
            }
            width = width.max(r.len());
            level.push(Pending {
                index,
                chars: r.iter().map(|x| x.0).collect(),
                ranges: r.iter().map(|x| (x.1, x.2)).collect(),
            });
        }
        nodes = level
            .iter()
            .flat_map(|n| {
                n.ranges
                    .iter()
                    .enumerate()
                    .map(move |(p, &(a, b))| (n.index * width as u64 + p as u64, a, b))
            })
            .collect();
        widths.push(width as u16);
        per_level.push(level);
        if nodes.len() as u64 > MAX_DATA_NODES {
            return Ok(None);
        }
    }
    let Ok(g) = PrefixGeometry::new(&widths) else {
        return Ok(None);
    };
    let mut prefix = vec![0u8; g.total_len() as usize];
    let mut groups = Vec::new();
    for (i, level) in per_level.iter().enumerate() {
        let base = g.base(i as u32 + 1);
        for n in level {
            if i + 1 == k {
                let ids: Vec<u32> = match leaves {
                    Leaves::Pack(_) | Leaves::PerChar(_) => (0..n.chars.len())
                        .map(|j| (groups.len() + j) as u32)
                        .collect(),
                    Leaves::Units(u) => n.ranges.iter().map(|r| u[r.0]).collect(),
                };
                groups.extend_from_slice(&n.ranges);
                g.put_node(&mut prefix, base + n.index, &n.chars, &ids)?;
            } else {
                g.put_node(&mut prefix, base + n.index, &n.chars, &[])?;
            }
        }
    }
    Ok(Some(Levels {
        geometry: g,
        prefix,
        groups,
        widths,
    }))
}

/// Plans a tree of `key_len`-byte keys (8 or 16) for `keys` (sorted, distinct) with at most
/// `target` keys per data node, numbered in key order. `None` when no shape within the
/// format's limits holds them.
pub fn plan(keys: &[u128], target: usize, key_len: u32) -> Result<Option<Plan>, LayoutError> {
    plan_with(keys, Leaves::Pack(target.max(1)), key_len)
}

/// Plans the paper's geometry for `keys` (sorted, distinct): the smallest height `k` at
/// which every data node is one last-level character, the keys sharing a `k`-character
/// prefix, with at most `target` keys each (§3.1: a data node holds the keys with the same
/// prefix; §3.5: a full node grows the tree by a whole level, addHeight). `None` when no
/// shape within the format's limits holds them.
pub fn plan_per_char(
    keys: &[u128],
    target: usize,
    key_len: u32,
) -> Result<Option<Plan>, LayoutError> {
    plan_with(keys, Leaves::PerChar(target.max(1)), key_len)
}

/// Plans a prefix array that keeps every key in the data node it is in: `units[i]` is the
/// data node of `keys[i]` (sorted, distinct keys; each node's keys contiguous). The plan's
/// `groups` are the key ranges of its NodeID entries, in key order. `None` when no shape
/// within the format's limits separates the nodes.
pub fn plan_units(keys: &[u128], units: &[u32], key_len: u32) -> Result<Option<Plan>, LayoutError> {
    if keys.is_empty() || units.len() != keys.len() || !contiguous(units) {
        return Err(LayoutError::Inconsistent {
            what: "data nodes to keep are empty or not contiguous in key order",
        });
    }
    plan_with(keys, Leaves::Units(units), key_len)
}

/// Each value of `units` occupies one contiguous block.
fn contiguous(units: &[u32]) -> bool {
    let mut seen = std_alloc::collections::BTreeSet::new();
    units
        .iter()
        .enumerate()
        .all(|(i, u)| (i > 0 && units[i - 1] == *u) || seen.insert(*u))
}

fn plan_with(keys: &[u128], leaves: Leaves<'_>, key_len: u32) -> Result<Option<Plan>, LayoutError> {
    if key_len != 8 && key_len != 16 {
        return Err(LayoutError::OutOfRange {
            field: "key_len",
            value: key_len as u64,
        });
    }
    let bits = 8 * key_len;
    if keys.windows(2).any(|w| w[0] >= w[1])
        || keys.last().is_some_and(|&k| k >> 1 >> (bits - 1) != 0)
    {
        return Err(LayoutError::Inconsistent {
            what: "keys to plan are not sorted and distinct, or wider than the tree's",
        });
    }
    // Every constant run a gap first (fewest levels); when the keys' differing bits
    // alternate so much that the segments run out before the bits that separate dense keys,
    // fewer and finally no gaps: eight 8-bit levels (sixteen for 16-byte keys) always fit
    // the format's segments.
    // (A 16-byte tree's runs are whole bytes: its steps are every gap, gaps of two bytes or
    // more, none.)
    let steps = if bits > 64 {
        [8, 16, bits + 1]
    } else {
        [1, 8, bits + 1]
    };
    for min_gap in steps {
        if let Some(p) = plan_segments(keys, &all_segments(keys, min_gap, bits), leaves)? {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

fn plan_segments(
    keys: &[u128],
    segs: &[Segment],
    leaves: Leaves<'_>,
) -> Result<Option<Plan>, LayoutError> {
    let mut levels = Vec::new();
    for (cut, s) in segs.iter().enumerate() {
        if !matches!(s, Segment::Level { .. }) {
            continue;
        }
        if cut + 1 > MAX_SEGMENTS {
            break;
        }
        levels.push(*s);
        if let Some(Levels {
            geometry,
            prefix,
            groups,
            widths,
        }) = plan_levels(keys, &levels, leaves)?
        {
            let mut w = widths.iter();
            let segments = segs[..=cut]
                .iter()
                .map(|s| match *s {
                    Segment::Level { lo, width, .. } => Segment::Level {
                        lo,
                        width,
                        fanout: w.next().copied().unwrap_or(1),
                    },
                    g => g,
                })
                .collect();
            return Ok(Some(Plan {
                segments,
                geometry,
                prefix,
                groups,
            }));
        }
    }
    Ok(None)
}

//! The key segments a tree reads and the shape of its pointer-less prefix array (§3.1).
use super::*;
use crate::LayoutError;
use crate::bits::{Field, assert_disjoint, read_u32};

// ---------------------------------------------------------------- segments

/// Which key bits a tree reads, most significant first: constant gaps and levels. Bit
/// numbers count from the key's least significant bit (keys are big-endian integers of the
/// tree's width: bits up to 63 or 127); a gap is at most 64 bits wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Bits `lo .. lo+width` that every key of the tree had equal to `value` when it was
    /// built; a key above or below it goes to the greatest or least data node under here.
    Gap {
        /// Lowest key bit of the gap.
        lo: u8,
        /// Bits in the gap (1..=64).
        width: u8,
        /// The bits' common value.
        value: u64,
    },
    /// Bits `lo .. lo+width` (width 1..=8) are the character of the next prefix level,
    /// whose nodes hold up to `fanout` (1..=256) characters.
    Level {
        /// Lowest key bit of the character.
        lo: u8,
        /// Bits in the character (1..=8).
        width: u8,
        /// Most characters a node of the level holds (1..=256).
        fanout: u16,
    },
}

const S_KIND: Field = Field::new("kind", 0, 2);
const S_LO: Field = Field::new("lo", 8, 8);
const S_WIDTH: Field = Field::new("width", 16, 8);
const S_FANOUT: Field = Field::new("fanout", 24, 9);
const _: () = assert_disjoint(&[S_KIND, S_LO, S_WIDTH, S_FANOUT]);

impl Segment {
    /// Lowest key bit the segment covers.
    pub const fn lo(&self) -> u32 {
        match *self {
            Segment::Gap { lo, .. } | Segment::Level { lo, .. } => lo as u32,
        }
    }
    /// Bits the segment covers.
    pub const fn width(&self) -> u32 {
        match *self {
            Segment::Gap { width, .. } | Segment::Level { width, .. } => width as u32,
        }
    }
    /// The segment's bits of `key` (a segment is at most 64 bits wide).
    pub const fn bits(&self, key: u128) -> u64 {
        let w = self.width();
        let v = key >> self.lo();
        if w >= 64 {
            v as u64
        } else {
            (v & ((1u128 << w) - 1)) as u64
        }
    }
    /// Two words: descriptor, gap value.
    pub const fn encode(&self) -> [u64; 2] {
        match *self {
            Segment::Gap { lo, width, value } => {
                let w = S_KIND.set(0, 1);
                let w = S_LO.set(w, lo as u64);
                [S_WIDTH.set(w, width as u64), value]
            }
            Segment::Level { lo, width, fanout } => {
                let w = S_KIND.set(0, 2);
                let w = S_LO.set(w, lo as u64);
                let w = S_FANOUT.set(w, fanout as u64);
                [S_WIDTH.set(w, width as u64), 0]
            }
        }
    }
    /// Decodes two words written by [`Segment::encode`], checking kind, bit range, fanout and gap
    /// value.
    pub const fn decode(words: [u64; 2]) -> Result<Segment, LayoutError> {
        let lo = S_LO.get(words[0]);
        let width = S_WIDTH.get(words[0]);
        if width == 0
            || width > 64
            || lo + width > 8 * MAX_KEY as u64
            || words[0] & !(S_KIND.mask() | S_LO.mask() | S_WIDTH.mask() | S_FANOUT.mask()) != 0
        {
            return Err(LayoutError::OutOfRange {
                field: "segment",
                value: words[0],
            });
        }
        let fanout = S_FANOUT.get(words[0]);
        match S_KIND.get(words[0]) {
            1 if fanout == 0 => {
                if width < 64 && words[1] >> width != 0 {
                    return Err(LayoutError::OutOfRange {
                        field: "gap value",
                        value: words[1],
                    });
                }
                Ok(Segment::Gap {
                    lo: lo as u8,
                    width: width as u8,
                    value: words[1],
                })
            }
            2 if width <= 8 && words[1] == 0 && fanout >= 1 && fanout <= 256 => {
                Ok(Segment::Level {
                    lo: lo as u8,
                    width: width as u8,
                    fanout: fanout as u16,
                })
            }
            k => Err(LayoutError::OutOfRange {
                field: "segment kind",
                value: k,
            }),
        }
    }
}

// ---------------------------------------------------------------- prefix geometry

/// Shape of the prefix array: `height` levels; every node of level `i` has room for
/// `widths[i-1]` characters (the paper's `m`, here per level, so one wide level does not
/// widen the levels under it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixGeometry {
    /// Prefix levels (1..=[`MAX_SEGMENTS`]).
    pub height: u32,
    /// Characters per node of each level, level 1 first; entries past `height` are 0.
    pub widths: [u16; MAX_SEGMENTS],
}

impl PrefixGeometry {
    /// A shape whose array fits [`MAX_PREFIX_BYTES`].
    pub fn new(widths: &[u16]) -> Result<PrefixGeometry, LayoutError> {
        if widths.is_empty() || widths.len() > MAX_SEGMENTS {
            return Err(LayoutError::OutOfRange {
                field: "height",
                value: widths.len() as u64,
            });
        }
        let mut g = PrefixGeometry {
            height: widths.len() as u32,
            widths: [0; MAX_SEGMENTS],
        };
        for (i, &w) in widths.iter().enumerate() {
            if w == 0 || w > 256 {
                return Err(LayoutError::OutOfRange {
                    field: "width",
                    value: w as u64,
                });
            }
            g.widths[i] = w;
        }
        let mut nodes: u64 = 1;
        let mut len: u64 = 0;
        for level in 1..=g.height {
            len += nodes * g.stride(level);
            nodes *= g.width(level) as u64;
            if len > MAX_PREFIX_BYTES || nodes > MAX_PREFIX_BYTES {
                return Err(LayoutError::OutOfRange {
                    field: "prefix array bytes",
                    value: len,
                });
            }
        }
        Ok(g)
    }
    /// Characters per node of `level` (1-based).
    pub const fn width(&self, level: u32) -> u32 {
        self.widths[level as usize - 1] as u32
    }
    /// Nodes on `level`: the product of the widths above it (`m^(i-1)` when uniform).
    pub const fn level_nodes(&self, level: u32) -> u64 {
        let mut n = 1u64;
        let mut i = 1;
        while i < level {
            n *= self.width(i) as u64;
            i += 1;
        }
        n
    }
    /// Base node id of `level`: eq. (2), summed level by level.
    pub const fn base(&self, level: u32) -> u64 {
        let mut b = 0u64;
        let mut i = 1;
        while i < level {
            b += self.level_nodes(i);
            i += 1;
        }
        b
    }
    /// Child of node `cur` of `level` at position `p`: eq. (3).
    pub const fn child(&self, level: u32, cur: u64, p: u32) -> u64 {
        self.base(level + 1) + (cur - self.base(level)) * self.width(level) as u64 + p as u64
    }
    /// Bytes of a node's `nChars` + `chars` on `level`.
    pub const fn chars_stride(&self, level: u32) -> u64 {
        (2 + self.width(level) as u64).next_multiple_of(8)
    }
    /// Bytes of one node of `level` (the last level adds the NodeID array); a multiple of 8,
    /// so the array and the data nodes after it stay 8-byte aligned.
    pub const fn stride(&self, level: u32) -> u64 {
        if level == self.height {
            (self.chars_stride(level) + 4 * self.width(level) as u64).next_multiple_of(8)
        } else {
            self.chars_stride(level)
        }
    }
    /// Bytes of the whole prefix array.
    pub const fn total_len(&self) -> u64 {
        let mut len = 0;
        let mut i = 1;
        while i <= self.height {
            len += self.level_nodes(i) * self.stride(i);
            i += 1;
        }
        len
    }
    /// Nodes in the whole array.
    pub const fn total_nodes(&self) -> u64 {
        self.base(self.height) + self.level_nodes(self.height)
    }
    /// The level of node `id`, or None past the array.
    pub const fn level_of(&self, id: u64) -> Option<u32> {
        let mut base = 0;
        let mut i = 1;
        while i <= self.height {
            let n = self.level_nodes(i);
            if id < base + n {
                return Some(i);
            }
            base += n;
            i += 1;
        }
        None
    }
    /// Byte offset of node `id` (on `level`) in the array.
    pub const fn node_offset(&self, level: u32, id: u64) -> u64 {
        let mut off = 0;
        let mut i = 1;
        while i < level {
            off += self.level_nodes(i) * self.stride(i);
            i += 1;
        }
        off + (id - self.base(level)) * self.stride(level)
    }

    /// The characters of node `id` (checked: `nChars <= width`, strictly increasing).
    pub fn chars<'a>(&self, prefix: &'a [u8], id: u64) -> Result<&'a [u8], LayoutError> {
        let level = self.level_of(id).ok_or(LayoutError::OutOfRange {
            field: "prefix node id",
            value: id,
        })?;
        let off = self.node_offset(level, id) as usize;
        let n = match prefix.get(off..off + 2) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]) as usize,
            None => {
                return Err(LayoutError::Short {
                    need: off + 2,
                    got: prefix.len(),
                });
            }
        };
        if n > self.width(level) as usize {
            return Err(LayoutError::OutOfRange {
                field: "nChars",
                value: n as u64,
            });
        }
        let chars = prefix.get(off + 2..off + 2 + n).ok_or(LayoutError::Short {
            need: off + 2 + n,
            got: prefix.len(),
        })?;
        if chars.windows(2).any(|w| w[0] >= w[1]) {
            return Err(LayoutError::Inconsistent {
                what: "prefix node characters not strictly increasing",
            });
        }
        Ok(chars)
    }

    /// Entry `p` of the NodeID array of last-level node `id`.
    pub fn node_id(&self, prefix: &[u8], id: u64, p: u32) -> Result<u32, LayoutError> {
        let k = self.height;
        if self.level_of(id) != Some(k) || p >= self.width(k) {
            return Err(LayoutError::OutOfRange {
                field: "NodeID position",
                value: p as u64,
            });
        }
        let at = self.node_offset(k, id) + self.chars_stride(k) + 4 * p as u64;
        read_u32(prefix, at as usize)
    }

    /// Writes node `id`'s characters (and NodeIDs on the last level) into the array.
    pub fn put_node(
        &self,
        prefix: &mut [u8],
        id: u64,
        chars: &[u8],
        node_ids: &[u32],
    ) -> Result<(), LayoutError> {
        let level = self.level_of(id).ok_or(LayoutError::OutOfRange {
            field: "prefix node id",
            value: id,
        })?;
        let last = level == self.height;
        if chars.len() > self.width(level) as usize
            || (last && node_ids.len() != chars.len())
            || (!last && !node_ids.is_empty())
        {
            return Err(LayoutError::Inconsistent {
                what: "prefix node does not fit its level",
            });
        }
        let off = self.node_offset(level, id) as usize;
        let end = off + self.stride(level) as usize;
        if prefix.len() < end {
            return Err(LayoutError::Short {
                need: end,
                got: prefix.len(),
            });
        }
        prefix[off..off + 2].copy_from_slice(&(chars.len() as u16).to_le_bytes());
        prefix[off + 2..off + 2 + chars.len()].copy_from_slice(chars);
        let ids = off + self.chars_stride(level) as usize;
        for (i, n) in node_ids.iter().enumerate() {
            prefix[ids + 4 * i..ids + 4 * i + 4].copy_from_slice(&n.to_le_bytes());
        }
        Ok(())
    }
}

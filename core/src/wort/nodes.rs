//! Inner nodes of both trees, and how each one commits a change with one 8-byte store.
//!
//! | node | layout | add a child | remove a child |
//! |---|---|---|---|
//! | WORT's NODE16, WOART's NODE256 (*direct*) | header, 16 or 256 child words indexed by the digit | store the child word | store 0 |
//! | WOART's NODE4 / NODE16 | header, valid bitmap word, keys (unsorted), child words | write key and child into a slot whose valid bit is clear, persist, then store the bitmap with the bit set | store the bitmap with the bit clear |
//! | WOART's NODE48 | header, 256-byte child index (0: none, i + 1: child word i), 48 child words | write a child word no index entry names, persist, then store the index word naming it | store the index word without it |
//!
//! A full NODE4, NODE16 or NODE48 grows copy-on-write: the next size is written and persisted
//! whole, then one store of its parent's child word publishes it (the old node is not reused).
use super::layout::{Header, Ptr, TreeError};
use crate::server::LocalRegion;

/// Most children an inner node has.
pub const FANOUT_MAX: usize = 256;
/// Bytes of the largest inner node (NODE256).
pub const NODE_MAX: usize = 8 + 8 * 256;

pub const fn node_len(p: Ptr) -> usize {
    match p {
        Ptr::N16Direct(_) => 8 + 8 * 16,
        Ptr::N256(_) => NODE_MAX,
        Ptr::N4(_) => keyed_ptrs(4) + 8 * 4,
        Ptr::N16(_) => keyed_ptrs(16) + 8 * 16,
        Ptr::N48(_) => N48_PTRS + 8 * 48,
        Ptr::Null | Ptr::Leaf(_) => 0,
    }
}

/// NODE4 / NODE16: the bitmap word at 8, keys at 16, child words after the keys.
const BITMAP: u64 = 8;
const KEYS: u64 = 16;
const fn keyed_ptrs(cap: usize) -> usize {
    16 + cap.next_multiple_of(8)
}
/// NODE48: the index at 8, child words at 264.
const N48_INDEX: u64 = 8;
const N48_PTRS: usize = 8 + 256;

fn cap(p: Ptr) -> usize {
    match p {
        Ptr::N4(_) => 4,
        Ptr::N16(_) => 16,
        _ => 0,
    }
}

/// One child of a node: its digit, the offset of its child word, the word.
#[derive(Debug, Clone, Copy, Default)]
pub struct Child {
    pub digit: u8,
    pub slot: u64,
    pub word: u64,
}

/// A node's children in digit order, in a caller's buffer (no allocation).
pub struct Children {
    pub list: [Child; FANOUT_MAX],
    pub len: usize,
}

impl Children {
    pub fn new() -> Children {
        Children {
            list: [Child::default(); FANOUT_MAX],
            len: 0,
        }
    }
    pub fn as_slice(&self) -> &[Child] {
        &self.list[..self.len]
    }
}

impl Default for Children {
    fn default() -> Self {
        Children::new()
    }
}

pub fn header(r: &dyn LocalRegion, p: Ptr) -> Result<Header, TreeError> {
    Ok(Header::decode(r.load_u64(p.offset())?))
}

/// The offset of the child word for `digit`: for direct nodes always (possibly empty), for
/// the others only if a child with that digit exists.
pub fn find_child(r: &dyn LocalRegion, p: Ptr, digit: u8) -> Result<Option<u64>, TreeError> {
    let o = p.offset();
    Ok(match p {
        Ptr::N16Direct(_) => Some(o + 8 + 8 * (digit as u64 & 0xF)),
        Ptr::N256(_) => Some(o + 8 + 8 * digit as u64),
        Ptr::N4(_) | Ptr::N16(_) => {
            let c = cap(p);
            let bits = r.load_u64(o + BITMAP)?;
            let mut keys = [0u8; 16];
            r.read(o + KEYS, &mut keys[..c])?;
            (0..c)
                .find(|&i| bits >> i & 1 == 1 && keys[i] == digit)
                .map(|i| o + keyed_ptrs(c) as u64 + 8 * i as u64)
        }
        Ptr::N48(_) => {
            let w = r.load_u64(o + N48_INDEX + (digit as u64 & !7))?;
            let idx = (w >> (8 * (digit as u64 & 7))) as u8;
            match idx {
                0 => None,
                i if i as usize <= 48 => Some(o + N48_PTRS as u64 + 8 * (i as u64 - 1)),
                i => {
                    return Err(TreeError::Corrupt {
                        off: o,
                        why: remora_layouts::LayoutError::OutOfRange {
                            field: "node48_index",
                            value: i as u64,
                        },
                    });
                }
            }
        }
        Ptr::Null | Ptr::Leaf(_) => None,
    })
}

/// Every non-empty child of `p`, in digit order.
pub fn children(r: &dyn LocalRegion, p: Ptr, out: &mut Children) -> Result<(), TreeError> {
    out.len = 0;
    let o = p.offset();
    let mut push = |digit: u8, slot: u64, word: u64| {
        if word != 0 {
            out.list[out.len] = Child { digit, slot, word };
            out.len += 1;
        }
    };
    match p {
        Ptr::N16Direct(_) | Ptr::N256(_) => {
            let n = if matches!(p, Ptr::N256(_)) { 256 } else { 16 };
            let mut buf = [0u8; NODE_MAX];
            r.read(o, &mut buf[..8 + 8 * n])?;
            for d in 0..n {
                let w = u64::from_le_bytes(buf[8 + 8 * d..16 + 8 * d].try_into().unwrap_or([0; 8]));
                push(d as u8, o + 8 + 8 * d as u64, w);
            }
        }
        Ptr::N4(_) | Ptr::N16(_) => {
            let c = cap(p);
            let mut buf = [0u8; 160];
            let len = node_len(p);
            r.read(o, &mut buf[..len])?;
            let bits = u64::from_le_bytes(buf[8..16].try_into().unwrap_or([0; 8]));
            let mut order = [(0u8, 0usize); 16];
            let mut n = 0;
            for (i, k) in buf[16..16 + c].iter().enumerate() {
                if bits >> i & 1 == 1 {
                    order[n] = (*k, i);
                    n += 1;
                }
            }
            order[..n].sort_unstable();
            let ptrs = keyed_ptrs(c);
            for &(k, i) in &order[..n] {
                let at = ptrs + 8 * i;
                let w = u64::from_le_bytes(buf[at..at + 8].try_into().unwrap_or([0; 8]));
                push(k, o + at as u64, w);
            }
        }
        Ptr::N48(_) => {
            let mut buf = [0u8; N48_PTRS + 8 * 48];
            r.read(o, &mut buf)?;
            for d in 0..256 {
                let i = buf[8 + d] as usize;
                if i == 0 || i > 48 {
                    continue;
                }
                let at = N48_PTRS + 8 * (i - 1);
                let w = u64::from_le_bytes(buf[at..at + 8].try_into().unwrap_or([0; 8]));
                push(d as u8, o + at as u64, w);
            }
        }
        Ptr::Null | Ptr::Leaf(_) => {}
    }
    Ok(())
}

/// A new node's image in a caller's buffer, built and then written in one go.
pub struct Image {
    pub buf: [u8; NODE_MAX],
    pub len: usize,
}

impl Image {
    /// An empty node of `p`'s type with header `h`.
    pub fn new(p: Ptr, h: Header) -> Image {
        let mut img = Image {
            buf: [0u8; NODE_MAX],
            len: node_len(p),
        };
        img.buf[..8].copy_from_slice(&h.encode().to_le_bytes());
        img
    }

    fn put(&mut self, at: usize, w: u64) {
        self.buf[at..at + 8].copy_from_slice(&w.to_le_bytes());
    }

    /// Adds a child to the image (the node type has room: the caller picked it).
    pub fn add(&mut self, p: Ptr, digit: u8, word: u64) {
        match p {
            Ptr::N16Direct(_) => self.put(8 + 8 * (digit as usize & 0xF), word),
            Ptr::N256(_) => self.put(8 + 8 * digit as usize, word),
            Ptr::N4(_) | Ptr::N16(_) => {
                let c = cap(p);
                let bits = u64::from_le_bytes(self.buf[8..16].try_into().unwrap_or([0; 8]));
                let i = (!bits).trailing_zeros() as usize;
                if i < c {
                    self.buf[16 + i] = digit;
                    self.put(keyed_ptrs(c) + 8 * i, word);
                    self.put(8, bits | 1 << i);
                }
            }
            Ptr::N48(_) => {
                let used = self.buf[8..264].iter().filter(|&&b| b != 0).count();
                if used < 48 {
                    self.buf[8 + digit as usize] = used as u8 + 1;
                    self.put(N48_PTRS + 8 * used, word);
                }
            }
            Ptr::Null | Ptr::Leaf(_) => {}
        }
    }
}

/// The type a full node grows into, if it grows.
pub fn grown(p: Ptr, off: u64) -> Option<Ptr> {
    match p {
        Ptr::N4(_) => Some(Ptr::N16(off)),
        Ptr::N16(_) => Some(Ptr::N48(off)),
        Ptr::N48(_) => Some(Ptr::N256(off)),
        _ => None,
    }
}

/// Adds child `word` under `digit` in place, committing with one 8-byte store; `Ok(false)` if
/// the node is full (the caller grows it). Direct nodes never are.
pub fn add_in_place(r: &dyn LocalRegion, p: Ptr, digit: u8, word: u64) -> Result<bool, TreeError> {
    let o = p.offset();
    match p {
        Ptr::N16Direct(_) | Ptr::N256(_) => {
            let slot = find_child(r, p, digit)?.unwrap_or(o + 8);
            r.store_u64(slot, word)?;
            r.persist_evict(slot, 8);
            Ok(true)
        }
        Ptr::N4(_) | Ptr::N16(_) => {
            let c = cap(p);
            let bits = r.load_u64(o + BITMAP)?;
            let i = (!bits).trailing_zeros() as usize;
            if i >= c {
                return Ok(false);
            }
            // The slot is invalid until its bit is set: key and child first, durable.
            let slot = o + keyed_ptrs(c) as u64 + 8 * i as u64;
            let kw = o + KEYS + (i as u64 & !7);
            let mut keys = r.load_u64(kw)?.to_le_bytes();
            keys[i & 7] = digit;
            r.store_u64(kw, u64::from_le_bytes(keys))?;
            r.store_u64(slot, word)?;
            r.persist_evict(kw, 8);
            r.persist_evict(slot, 8);
            r.store_u64(o + BITMAP, bits | 1 << i)?;
            r.persist_evict(o + BITMAP, 8);
            Ok(true)
        }
        Ptr::N48(_) => {
            let mut index = [0u8; 256];
            r.read(o + N48_INDEX, &mut index)?;
            let mut used = [false; 48];
            for &b in &index {
                if b != 0 && b as usize <= 48 {
                    used[b as usize - 1] = true;
                }
            }
            let Some(j) = used.iter().position(|u| !u) else {
                return Ok(false);
            };
            let slot = o + N48_PTRS as u64 + 8 * j as u64;
            r.store_u64(slot, word)?;
            r.persist_evict(slot, 8);
            let iw = o + N48_INDEX + (digit as u64 & !7);
            let mut b = r.load_u64(iw)?.to_le_bytes();
            b[digit as usize & 7] = j as u8 + 1;
            r.store_u64(iw, u64::from_le_bytes(b))?;
            r.persist_evict(iw, 8);
            Ok(true)
        }
        Ptr::Null | Ptr::Leaf(_) => Ok(false),
    }
}

/// Removes the child under `digit` (whose child word is at `slot`) with one 8-byte store.
pub fn remove(r: &dyn LocalRegion, p: Ptr, digit: u8, slot: u64) -> Result<(), TreeError> {
    let o = p.offset();
    let (at, w) = match p {
        Ptr::N16Direct(_) | Ptr::N256(_) => (slot, 0),
        Ptr::N4(_) | Ptr::N16(_) => {
            let i = (slot - o - keyed_ptrs(cap(p)) as u64) / 8;
            (o + BITMAP, r.load_u64(o + BITMAP)? & !(1 << i))
        }
        Ptr::N48(_) => {
            let iw = o + N48_INDEX + (digit as u64 & !7);
            let mut b = r.load_u64(iw)?.to_le_bytes();
            b[digit as usize & 7] = 0;
            (iw, u64::from_le_bytes(b))
        }
        Ptr::Null | Ptr::Leaf(_) => return Ok(()),
    };
    r.store_u64(at, w)?;
    r.persist_evict(at, 8);
    Ok(())
}

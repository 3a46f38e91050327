//! Leaf entries: encoding one bound to a page version, decoding and verifying a slot or a
//! whole leaf, and reading a value.
use super::*;

/// What a leaf slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Free (never used since the last whole-page write, or deleted), with its last version.
    Free {
        /// Entry version of the slot's last write.
        version: u8,
    },
    /// A live entry whose value is `len` bytes.
    Live {
        /// The entry's key.
        key: u64,
        /// Entry version.
        version: u8,
        /// Value length in bytes.
        len: usize,
    },
}

/// Encodes a leaf entry into `out` (`g.leaf_entry_size()` bytes): `value` (at most the value
/// area) zero-padded, its length in the meta word, checksummed and bound to page version
/// `bind`. Entry versions wrap at 128.
pub fn encode_leaf_entry(
    out: &mut [u8],
    key: u64,
    value: &[u8],
    version: u8,
    valid: bool,
    bind: u64,
) {
    let meta = ENTRY_VERSION.set(
        VALUE_LEN.set(VALID.set(0, valid as u64), value.len() as u64),
        version as u64,
    );
    out[0..8].copy_from_slice(&meta.to_le_bytes());
    out[8..16].copy_from_slice(&key.to_le_bytes());
    out[16..16 + value.len()].copy_from_slice(value);
    out[16 + value.len()..].fill(0);
    rebind_entry(out, bind);
}

/// Recomputes the checksum of an encoded entry (`bytes`, a whole entry) for page version
/// `bind`: how a whole-page write moves verified entries into its new version.
pub fn rebind_entry(bytes: &mut [u8], bind: u64) {
    let sum = entry_hash(bytes, bind);
    let meta = CHECKSUM.set(word(bytes, 0), sum);
    bytes[0..8].copy_from_slice(&meta.to_le_bytes());
}

/// The bytes of leaf entry `slot` of a page image.
pub fn leaf_entry_bytes<'p>(page: &'p [u8], g: &Geometry, slot: usize) -> Option<&'p [u8]> {
    let at = g.leaf_entry_offset(slot);
    page.get(at..at + g.leaf_entry_size())
}

/// Decodes the leaf entry in `slot` of a page image, verified against page version `bind`. A
/// torn or corrupt entry, one left from another page image, and a slot never written are
/// errors.
pub fn leaf_slot(page: &[u8], g: &Geometry, slot: usize, bind: u64) -> Result<Slot, LayoutError> {
    let bytes = leaf_entry_bytes(page, g, slot).ok_or(LayoutError::Short {
        need: g.leaf_entry_offset(slot) + g.leaf_entry_size(),
        got: page.len(),
    })?;
    decode_slot(bytes, g, entry_hash(bytes, bind))
}

/// Decodes an entry whose checksum, recomputed, is `computed`.
#[inline(always)]
fn decode_slot(bytes: &[u8], g: &Geometry, computed: u64) -> Result<Slot, LayoutError> {
    let meta = word(bytes, 0);
    if computed != CHECKSUM.get(meta) {
        return Err(LayoutError::BadChecksum {
            stored: CHECKSUM.get(meta),
            computed,
        });
    }
    let version = ENTRY_VERSION.get(meta) as u8;
    let len = VALUE_LEN.get(meta) as usize;
    if len > g.value_size {
        return Err(LayoutError::OutOfRange {
            field: "value_len",
            value: len as u64,
        });
    }
    Ok(if VALID.get(meta) == 1 {
        Slot::Live {
            key: word(bytes, 8),
            version,
            len,
        }
    } else {
        Slot::Free { version }
    })
}

/// Verifies every slot of a leaf image against page version `bind` and calls `f(slot, what)`
/// for each, in slot order; stops at the first slot that fails, with its error (so `f` may
/// have seen earlier slots of an image that turns out torn: use its findings only on `Ok`).
/// Same result as [`leaf_slot`] on each slot, four entries hashed side by side; entries of
/// 24 to 48 bytes (values of 8 to 32) through a copy of the loop for that entry size, whose
/// word reads need no bounds checks.
pub fn verify_leaf(
    page: &[u8],
    g: &Geometry,
    bind: u64,
    mut f: impl FnMut(usize, Slot),
) -> Result<(), LayoutError> {
    let (cap, size) = (g.leaf_capacity(), g.leaf_entry_size());
    let end = g.leaf_entry_offset(cap);
    if page.len() < end {
        return Err(LayoutError::Short {
            need: end,
            got: page.len(),
        });
    }
    let seed = entry_seed(bind);
    let body = &page[HEADER_LEN..end];
    match size {
        24 => verify_sized::<24>(body, g, seed, &mut f),
        32 => verify_sized::<32>(body, g, seed, &mut f),
        40 => verify_sized::<40>(body, g, seed, &mut f),
        48 => verify_sized::<48>(body, g, seed, &mut f),
        _ => verify_any(body, g, size, seed, &mut f),
    }
}

/// [`verify_leaf`] over `body` (the entries, `B` bytes each).
#[inline(always)]
fn verify_sized<const B: usize>(
    body: &[u8],
    g: &Geometry,
    seed: u64,
    f: &mut impl FnMut(usize, Slot),
) -> Result<(), LayoutError> {
    let (entries, _) = body.as_chunks::<B>();
    let (quads, rest) = entries.as_chunks::<4>();
    let mut s = 0;
    for e in quads {
        let mut h = [seed; 4];
        for (l, hl) in h.iter_mut().enumerate() {
            *hl = step(*hl, word(&e[l], 0) & !CHECKSUM.mask());
        }
        for at in (8..B).step_by(8) {
            for (l, hl) in h.iter_mut().enumerate() {
                *hl = step(*hl, word(&e[l], at));
            }
        }
        for l in 0..4 {
            f(s + l, decode_slot(&e[l], g, (h[l] >> CHECKSUM.lo).max(1))?);
        }
        s += 4;
    }
    for e in rest {
        f(s, decode_slot(e, g, entry_hash_from(seed, e))?);
        s += 1;
    }
    Ok(())
}

/// [`verify_leaf`] over `body` (the entries, `size` bytes each), any entry size.
fn verify_any(
    body: &[u8],
    g: &Geometry,
    size: usize,
    seed: u64,
    f: &mut impl FnMut(usize, Slot),
) -> Result<(), LayoutError> {
    let cap = body.len() / size;
    let entry = |s: usize| &body[s * size..(s + 1) * size];
    let mut s = 0;
    while s + 4 <= cap {
        let e = [entry(s), entry(s + 1), entry(s + 2), entry(s + 3)];
        let mut h = [seed; 4];
        for (l, hl) in h.iter_mut().enumerate() {
            *hl = step(*hl, word(e[l], 0) & !CHECKSUM.mask());
        }
        for at in (8..size).step_by(8) {
            for (l, hl) in h.iter_mut().enumerate() {
                *hl = step(*hl, word(e[l], at));
            }
        }
        for l in 0..4 {
            f(s + l, decode_slot(e[l], g, (h[l] >> CHECKSUM.lo).max(1))?);
        }
        s += 4;
    }
    while s < cap {
        f(
            s,
            decode_slot(entry(s), g, entry_hash_from(seed, entry(s)))?,
        );
        s += 1;
    }
    Ok(())
}

/// The value of leaf `slot`, `len` bytes (as [`leaf_slot`] said).
pub fn leaf_value<'p>(page: &'p [u8], g: &Geometry, slot: usize, len: usize) -> &'p [u8] {
    let at = g.leaf_entry_offset(slot) + 16;
    &page[at..at + len.min(g.value_size)]
}

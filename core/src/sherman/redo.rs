//! Redo records: how a leaf torn inside one WRITE by a dead writer is put back together.
//!
//! Every write of a leaf under its lock that can tear (more than one aligned word: an entry,
//! or a whole page) is preceded, in the same doorbell and on the same queue pair, by
//!
//! 1. a WRITE of a *record* — the target page, the offset and the new bytes, hashed — into a
//!    redo slot of the writer's own (slots are per handle and per memory node, reused once the
//!    doorbell completed), and
//! 2. an 8-byte WRITE of the slot's address into the lock's *redo pointer*: one word per lock
//!    word, in a table on the lock's memory node (the descriptor names it), written only by
//!    the lock's holder.
//!
//! Per-queue-pair order places both before the first byte of the page write, so a page torn
//! by a writer that died has a whole record, and the pointer names it. Only the holder of a
//! lock writes the pages under it and dies at most once in the middle of one write, so:
//! **the only leaf under a lock that can be torn is the page of the record its redo pointer
//! names**. Whoever takes a lock over from a dead holder (`tree.rs`, `acquire_page`) reads
//! the pointer and the record before anything else and, if the record is whole, names a page
//! under this same lock, and that page does not verify, writes the record's bytes there
//! again. That is exactly the write the dead holder began, so the page becomes the new image
//! (the dead client's in-flight operation takes effect; it was never acknowledged, so either
//! outcome is linearizable) and no acknowledged write is lost: every earlier write under the
//! lock had completed. Re-applying is idempotent, so a taker-over that dies in the middle of
//! the repair leaves the same record for the next one. A page that verifies is never touched
//! (a stale record is harmless), and a record that names a page under another lock is
//! ignored (its slot was reused after its write completed).
//!
//! Record layout (little-endian words): target page address; offset (low 32 bits) and length
//! (high 32 bits); a 64-bit hash of the two words before it and of the bytes; 0; the bytes.
use remora_layouts::GlobalAddr;

/// Bytes of a record before its payload.
pub(super) const HEADER: usize = 32;

/// One decoded, hash-checked record.
pub(super) struct Record<'a> {
    pub page: GlobalAddr,
    pub off: usize,
    pub bytes: &'a [u8],
}

/// Mixing step (the murmur3 64-bit finalizer over `h ^ w`), as the page checksums use.
const fn step(h: u64, w: u64) -> u64 {
    let mut x = (h ^ w).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn hash(page: u64, span: u64, bytes: &[u8]) -> u64 {
    let mut h = step(step(0x5348_524d_5245_444f, page), span);
    for c in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = step(h, u64::from_le_bytes(w));
    }
    step(h, bytes.len() as u64)
}

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i * 8..i * 8 + 8]);
    u64::from_le_bytes(w)
}

/// Encodes the record of writing `bytes` at `off` of `page` into `out`; returns its length.
/// `out` must hold `HEADER + bytes.len()` bytes.
pub(super) fn encode(out: &mut [u8], page: GlobalAddr, off: usize, bytes: &[u8]) -> usize {
    let span = off as u64 | (bytes.len() as u64) << 32;
    let words = [page.raw(), span, hash(page.raw(), span, bytes), 0];
    for (i, w) in words.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    out[HEADER..HEADER + bytes.len()].copy_from_slice(bytes);
    HEADER + bytes.len()
}

/// The record in `img` (a slot's image), if it is whole and fits a page of `page_size`.
pub(super) fn decode(img: &[u8], page_size: usize) -> Option<Record<'_>> {
    if img.len() < HEADER {
        return None;
    }
    let (page, span, h) = (word(img, 0), word(img, 1), word(img, 2));
    let (off, len) = ((span & 0xffff_ffff) as usize, (span >> 32) as usize);
    if page == 0
        || word(img, 3) != 0
        || len == 0
        || off.checked_add(len)? > page_size
        || HEADER + len > img.len()
    {
        return None;
    }
    let bytes = &img[HEADER..HEADER + len];
    (hash(page, span, bytes) == h).then_some(Record {
        page: GlobalAddr::from_raw(page),
        off,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_any_torn_word_is_refused() {
        let page = GlobalAddr::new(1, 0x4000);
        let bytes: [u8; 40] = core::array::from_fn(|i| i as u8);
        let mut img = [0u8; HEADER + 64];
        let n = encode(&mut img, page, 24, &bytes);
        assert_eq!(n, HEADER + 40);
        let r = decode(&img, 256).expect("whole");
        assert_eq!((r.page, r.off, r.bytes), (page, 24, &bytes[..]));
        // A slot holding a mix of this record and an older one (any word old) is refused.
        for w in 0..n.div_ceil(8) {
            let mut torn = img;
            torn[w * 8] ^= 0x5a;
            assert!(decode(&torn, 256).is_none(), "word {w} torn");
        }
        // Out of the page, empty, or never written: refused.
        assert!(decode(&img, 60).is_none());
        assert!(decode(&[0u8; HEADER + 64], 256).is_none());
        assert!(decode(&img[..HEADER + 8], 256).is_none());
    }
}

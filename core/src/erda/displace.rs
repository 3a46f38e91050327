//! Hopscotch displacement: when every bucket of a new key's neighborhood is taken, find the
//! first free bucket past it and walk that free slot back towards the key's home by moving
//! entries, each to a bucket still inside its own neighborhood.
//!
//! **Concurrent one-sided readers.** A move goes from bucket `j` to a *higher* bucket `f` (the
//! free slot), and runs in this order, each step persisted before the next:
//!
//! 1. `f`'s control word and key (bytes 8..32), then `f`'s metadata word (a copy of `j`'s).
//! 2. `j`'s metadata word is cleared (one 8-byte store).
//! 3. `j`'s control word, then its key, are cleared: `j` reads as unused.
//!
//! The words of one READ may observe memory in any order (only aligned 8-byte words are
//! atomic), so a reader's neighborhood READ can see `f` before step 1 and `j` after step 2 and
//! find the key nowhere. (The design before issue 9 argued from ascending word order, which
//! no NIC promises.) What makes readers correct:
//!
//! - The whole move runs inside a section on the stripe version words of `j` and `f`
//!   (`stripe.rs`). A reader that does not find the key, or finds no whole object of it,
//!   re-reads the neighborhood between two READs of those words and trusts the image only if
//!   both agree and are even: no move overlapped it.
//! - A reader that does find a bucket holding the key, with a metadata word naming an object
//!   that verifies as the key's, may trust it without validation: only the key's bucket and,
//!   during a move, its copy (same word) ever hold a word naming the key's objects, and moves
//!   run on the server's single request thread, so no grant changes the word meanwhile.
//!
//! The step order still matters for crashes (below).
//!
//! **Crash.** A crash between steps leaves the key in two buckets. Recovery ([`dedupe`])
//! keeps the first one unless its word is empty (a crash inside step 2/3), and clears the
//! other, so grants (which take the first holder) and readers agree again.
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use remora_layouts::erda::{BUCKET_LEN, Bucket, Superblock};
use std_alloc::vec::Vec;

use super::server::corrupt;
use super::stripe;

fn load(region: &dyn LocalRegion, sb: &Superblock, i: u64) -> Result<Bucket, FabricError> {
    let mut raw = [0u8; BUCKET_LEN];
    let off = sb.bucket_off(i);
    region.read(off, &mut raw)?;
    Bucket::decode(&raw).map_err(|_| corrupt(region, off))
}

/// Clears bucket `i`: metadata word first (readers skip it from then on), then the rest.
fn clear(region: &dyn LocalRegion, sb: &Superblock, i: u64) -> Result<(), FabricError> {
    let off = sb.bucket_off(i);
    region.store_u64(off, 0)?;
    region.persist(off, 8);
    region.write(off + 8, &[0u8; BUCKET_LEN - 8])?;
    region.persist(off + 8, BUCKET_LEN - 8);
    Ok(())
}

/// Moves the entry of bucket `from` into the unused bucket `to` (> `from`) in the order the
/// module documentation explains.
fn move_entry(
    region: &dyn LocalRegion,
    sb: &Superblock,
    from: u64,
    to: u64,
    b: &Bucket,
) -> Result<(), FabricError> {
    debug_assert!(to > from);
    let section = stripe::Section::enter(region, sb, &[from, to])?;
    let dst = sb.bucket_off(to);
    let raw = b.encode();
    region.write(dst + 8, &raw[8..])?;
    region.persist(dst + 8, BUCKET_LEN - 8);
    region.store_u64(dst, b.meta)?;
    region.persist(dst, 8);
    clear(region, sb, from)?;
    section.leave(region)
}

/// Frees a bucket in the neighborhood of `home` (all of whose buckets are used) by hopscotch
/// displacement. Returns the freed bucket and the number of moves, or `None` when no free
/// bucket lies within reach or no entry can be moved closer to its home. `present` (the
/// server's per-bucket presence bits) moves along with the entries.
pub(super) fn make_room(
    region: &dyn LocalRegion,
    sb: &Superblock,
    home: u64,
    present: &mut [bool],
) -> Result<Option<(u64, u64)>, FabricError> {
    let h = sb.neighborhood as u64;
    let end = sb.buckets.min(home + h + super::server::MAX_PROBE);
    let mut free = None;
    for i in home + h..end {
        if !load(region, sb, i)?.is_used() {
            free = Some(i);
            break;
        }
    }
    let Some(mut free) = free else {
        return Ok(None);
    };
    let mut moves = 0u64;
    while free - home >= h {
        // Buckets free-h+1 .. free-1, farthest from `free` first: the one moved the farthest
        // brings the free slot closest to `home`. All of them are used (the search above
        // walked past them), and all lie at or after home + 1.
        let mut next = None;
        for j in free + 1 - h..free {
            let b = load(region, sb, j)?;
            if !b.is_used() {
                // Cannot happen (single writer), but an unused bucket is as good a slot.
                next = Some((j, None));
                break;
            }
            if free - sb.home(b.key()) < h {
                next = Some((j, Some(b)));
                break;
            }
        }
        let Some((j, entry)) = next else {
            return Ok(None);
        };
        if let Some(b) = entry {
            move_entry(region, sb, j, free, &b)?;
            present[free as usize] = present[j as usize];
            present[j as usize] = false;
            moves += 1;
        }
        free = j;
    }
    Ok(Some((free, moves)))
}

/// Recovery: a key held by two buckets of its neighborhood (a displacement cut short). Keeps
/// the first holder unless its metadata word is empty (the crash came after the copy was
/// whole and the source's word was cleared), and clears the other. Returns buckets cleared.
pub(super) fn dedupe(region: &dyn LocalRegion, sb: &Superblock) -> Result<u64, FabricError> {
    let h = sb.neighborhood as u64;
    let mut cleared = 0;
    let mut window: Vec<(u64, Bucket)> = Vec::with_capacity(h as usize);
    for i in 0..sb.buckets {
        let mut raw = [0u8; BUCKET_LEN];
        region.read(sb.bucket_off(i), &mut raw)?;
        // Undecodable buckets are the main recovery pass's business.
        let Ok(b) = Bucket::decode(&raw) else {
            continue;
        };
        window.retain(|(j, _)| i - j < h);
        if !b.is_used() {
            continue;
        }
        let home = sb.home(b.key());
        let earlier = window
            .iter()
            .position(|(j, e)| *j >= home && i - home < h && e.holds(b.key()));
        match earlier {
            Some(p) if window[p].1.meta().is_empty() => {
                clear(region, sb, window[p].0)?;
                window.remove(p);
                window.push((i, b));
                cleared += 1;
            }
            Some(_) => {
                clear(region, sb, i)?;
                cleared += 1;
            }
            None => window.push((i, b)),
        }
    }
    Ok(cleared)
}

//! Log regions and lock-free log cleaning (the paper's section 4.4), with the decisions the
//! paper leaves open.
//!
//! **Regions.** Each head's log is `regions` equal regions (whole segments), used as a ring:
//! the *run* is `len` regions from `first` ([`HeadState`], one persisted 8-byte word per
//! head that clients read one-sidedly). Appends go to the run's last region; when it is full
//! the next free region of the ring is *chained* (the word names it) instead of answering
//! `LogFull`, which is left for a ring with no free region. A region is chained only once it
//! is zeroed and persisted whole, and that zeroing is done *ahead*, a bounded share at a
//! time ([`zero_ahead`]): at most [`ZERO_PER_MESSAGE`] bytes after each message, paced on how
//! close the head is to needing the region (its last region three quarters full, or three
//! quarters of the way to its cleaning threshold: nothing before, all by 95 %), and [`ZERO_WHEN_IDLE`] per idle
//! call. So no message stalls the server's thread for a whole region (2 MiB took ~2.9 ms of
//! persists on the sim), and a run far from any chain zeroes nothing. A grant that finds its
//! last region full and the next not yet zeroed is answered `Busy` naming no grant (the
//! client asks again after a back-off, each message zeroing a share more); a cleaning due
//! while its target is not zeroed starts a few messages later. Offsets in metadata
//! words are absolute within the head's log, so a region keeps its addresses whichever run
//! it belongs to: clients never learn new head pointers. Where the fabric gives the node a
//! background thread (`Handler::on_background`, the sim's `background_threads`), the
//! cleaning steps and the paced zeroing run there instead of after each message; a grant
//! that must chain still zeroes within its message's budget. (The paper registers a new 1 GB
//! region and links it; here the regions are reserved when the store is formatted, so a
//! client's superblock stays valid for the store's life.)
//!
//! **Cleaning**, per head, once clients appended `clean_permille` of a region since the
//! last one started (the threshold per head):
//! 1. *Start*: the whole run becomes the source (`src = len`), the next free region is
//!    chained as the target, and the epoch becomes odd, in one persisted store. Clients that
//!    read the word see the head is cleaning and read its keys through the server
//!    ([`ReqOp::Get`](remora_layouts::erda::ReqOp), the SEND path) instead of one-sidedly.
//!    From here every grant, adopted copy and cleaner copy of the head goes to the target.
//!    The paper waits a maximum RTT after telling clients: not needed here, a one-sided
//!    reader that crossed the start validates its answer by the epoch (below).
//! 2. *Merge* (the paper's reverse scan): the source regions are scanned from the last
//!    written segment back to the first; objects of each segment are parsed forward and
//!    visited newest first. An object the key's metadata word names as its newest is the
//!    latest version: it is copied to the target and the word becomes (copy, no older) in
//!    one 8-byte store; every other object is a stale version and is overlooked. A newest
//!    object that is a deleted object is not copied: the key's bucket is emptied (deleted
//!    keys' buckets are reclaimed).
//! 3. *Replication*: the paper copies the objects clients wrote into region 1 during the
//!    merge. Here clients wrote into the target all along, so what is left is every word
//!    that still names a source object: a grant in flight when the merge passed (its key is
//!    skipped until the writer finishes or is settled), or a newer write whose older object
//!    is in the source (the word drops the older one once the newer is finished). A sweep
//!    of the table handles them, again until one sweep finds none.
//! 4. *Head swing and tag flip*: the paper flips every word's tag at the end so that the
//!    region-2 offsets become the new ones. Here each word was switched to its copy when
//!    the copy was made (the tag always names the newest, so one-sided readers stay right
//!    during the cleaning too), and the swing is one persisted store: the run drops the
//!    source regions and the epoch becomes even. Clients see the even epoch and go back to
//!    one-sided reads.
//!
//! **Lock-free**: the cleaner is a state machine the server's thread steps a bounded amount
//! after every message (and when idle); no request waits for it, and readers never lock.
//!
//! **Why readers check the epoch**: a region emptied by a cleaning is chained again later,
//! zeroed and overwritten. A one-sided reader that read a metadata word before a cleaning
//! ended could read the named slot after its region was reused. Reuse needs a cleaning end
//! in between, which changes the epoch, so a reader reads the state words before the
//! neighborhood and again after the object (same doorbells, no extra round trip) and
//! starts over if the epoch changed.
//!
//! **Crash safety**: every step keeps the recovery invariants: an object is persisted
//! before a word names it, a word names at most one unfinished object, the state word
//! changes only when nothing names what it drops. A crash in the middle of a cleaning is
//! recovered like any other state (the word says the head is cleaning), and the cleaning
//! begins again: its copies so far are valid objects that words name. A region is zeroed
//! (persisted) whole before the state word chains it, so a slot granted there never holds a
//! stale whole object of its previous life. How far the zeroing got is volatile: a region
//! half-zeroed at a crash is not chained (the word does not name it), and the restarted
//! server zeroes it again from its start. A free region is written by nobody between its
//! zeroing and its chaining: grants, adopted copies and cleaner copies all go to the run's
//! last region, and a source region is dropped only when no word names it and no write to it
//! is in flight.
use super::server::{
    LOG_START, ServerStats, State, corrupt, is_durable, key_buf, locate, read_object_at,
};
use super::stripe;
use crate::fabric::FabricError;
use crate::server::LocalRegion;
use remora_layouts::erda::{
    BUCKET_LEN, HeadState, MAX_UNITS, Meta, OBJECT_MAX, decode_object_with, object_len_from_header,
};
use std_alloc::vec::Vec;

/// Work units one step does (a bucket looked at is 1, an object copied 8, a segment parsed
/// 16).
pub(super) const STEP_AFTER_MESSAGE: u32 = 64;
pub(super) const STEP_WHEN_IDLE: u32 = 1024;

/// The ring index of the region holding `units`.
pub(super) fn region_of(region_bytes: u64, units: u32) -> u8 {
    (units as u64 * 8 / region_bytes.max(1)).min(u8::MAX as u64) as u8
}

/// The first byte of ring region `r` that objects use.
pub(super) fn region_start(region_bytes: u64, r: u8) -> u64 {
    (r as u64 * region_bytes).max(LOG_START)
}

/// Where a head's cleaner is.
#[derive(Debug, Default)]
pub(super) enum Cleaner {
    #[default]
    Idle,
    /// The reverse scan: `pos` source regions and, in region `pos - 1`, `seg` segments are
    /// still to parse (from the end); `objs` are the offsets of the parsed segment's
    /// objects not yet visited (the last one first).
    Merge { pos: u8, seg: u64, objs: Vec<u32> },
    /// The table sweep from bucket `next`; `blocked` if a word still names the source.
    /// `moved`: the server's count of hopscotch moves when the sweep began (an entry moved
    /// during a sweep may have skipped past it: the sweep then runs again).
    Sweep {
        next: u64,
        blocked: bool,
        moved: u64,
    },
}

impl Cleaner {
    /// A cleaning of `run` (cleaning) from the beginning.
    pub(super) fn start(run: HeadState) -> Cleaner {
        Cleaner::Merge {
            pos: run.src,
            seg: u64::MAX,
            objs: Vec::new(),
        }
    }
}

/// Stores and persists head `h`'s state word.
fn set_run(
    region: &dyn LocalRegion,
    st: &mut State,
    h: usize,
    run: HeadState,
) -> Result<(), FabricError> {
    region.store_u64(st.sb.head_state_off(h as u8), run.encode())?;
    region.persist(st.sb.head_state_off(h as u8), 8);
    st.runs[h] = run;
    Ok(())
}

/// Most bytes of a region the server zeroes ahead in one call after a message: the bound on
/// a message's zeroing (1024 cache lines; about 92 µs of persists at the sim's 90 ns a line).
pub(super) const ZERO_PER_MESSAGE: u64 = 64 << 10;
/// Most bytes an idle server zeroes ahead per call.
pub(super) const ZERO_WHEN_IDLE: u64 = 16 << 10;
/// Zeroing ahead is paced on how close the head is to needing its next region (the fuller
/// of its last region and its cleaning threshold, in per-mille): none before `ZERO_FROM`,
/// all of it by `ZERO_BY`, so a run that never comes near a chain zeroes nothing while busy
/// (a whole region over a fifth of a region's appends: 5 bytes zeroed per byte appended,
/// well under `ZERO_PER_MESSAGE` for any object).
const ZERO_FROM: u64 = 750;
const ZERO_BY: u64 = 950;

/// How far a head's next free region is zeroed ahead of its chaining (volatile: a restart
/// zeroes it again from the start, so a region half-zeroed at a crash is never chained).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Prep {
    /// The ring region being zeroed (`u8::MAX`: none yet).
    pub(super) region: u8,
    /// Its bytes zeroed and persisted, from its start.
    pub(super) done: u64,
}

impl Prep {
    pub(super) const NONE: Prep = Prep {
        region: u8::MAX,
        done: 0,
    };
}

/// Where log space came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Space {
    /// Reserved at these units.
    At(u32),
    /// The ring has no free region left (`LogFull`).
    Full,
    /// The last region is full and the next one is still being zeroed: ask again shortly.
    Preparing,
}

/// The ring region head `h` chains next, if one is free.
fn next_free(run: HeadState) -> Option<u8> {
    (run.len < run.regions).then(|| run.nth(run.len))
}

/// Whether ring region `r` of head `h` is zeroed and persisted whole, ready to chain.
fn ready(st: &State, h: usize, r: u8) -> bool {
    st.prep[h].region == r && st.prep[h].done >= st.region_bytes
}

/// Bytes of head `h`'s next free region that should be zeroed by now (see `ZERO_FROM`).
fn zero_due(st: &State, h: usize) -> u64 {
    let run = st.runs[h];
    let rb = st.region_bytes;
    let last = run.nth(run.len - 1);
    let (start, end) = (region_start(rb, last), (last as u64 + 1) * rb);
    let used = st.cursor[h].clamp(start, end) - start;
    let fill = used * 1000 / (end - start).max(1);
    let towards_clean = if run.cleaning() {
        0
    } else {
        st.appended[h] * 1000 / st.threshold.max(1)
    };
    let p = fill.max(towards_clean).clamp(ZERO_FROM, ZERO_BY) - ZERO_FROM;
    // In whole pages: a persist writes back whole lines anyway.
    (rb * p)
        .div_ceil(ZERO_BY - ZERO_FROM)
        .next_multiple_of(4096)
        .min(rb)
}

/// Zeroes (and persists) more of each head's next free region, from where its zeroing
/// stopped: up to what [`zero_due`] asks, or all of it if `eager` (an idle server), within
/// what is left of the call's budget (`State::zero_budget`, set per message or idle call by
/// [`set_zero_budget`]). Returns the bytes zeroed. A region is chained only once zeroed
/// whole ([`ready`]), so no single call zeroes more than its budget.
pub(super) fn zero_ahead(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    eager: bool,
) -> Result<u64, FabricError> {
    let mut zeroed = 0;
    for h in 0..st.sb.heads as usize {
        zeroed += zero_head(region, st, stats, h, eager)?;
    }
    Ok(zeroed)
}

/// The budget of zeroing of the call that begins (a message, an idle call).
pub(super) fn set_zero_budget(st: &mut State, bytes: u64) {
    st.zero_budget = bytes;
}

/// [`zero_ahead`] for head `h`.
fn zero_head(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    h: usize,
    eager: bool,
) -> Result<u64, FabricError> {
    let rb = st.region_bytes;
    let Some(r) = next_free(st.runs[h]) else {
        return Ok(0);
    };
    if st.prep[h].region != r {
        st.prep[h] = Prep { region: r, done: 0 };
    }
    let want = if eager { rb } else { zero_due(st, h) };
    let done = st.prep[h].done;
    let n = want.saturating_sub(done).min(st.zero_budget);
    if n == 0 {
        return Ok(0);
    }
    let at = st.sb.head_base[h] + r as u64 * rb + done;
    let zero = [0u8; 4096];
    let mut k = 0u64;
    while k < n {
        let m = (n - k).min(zero.len() as u64) as usize;
        region.write(at + k, &zero[..m])?;
        k += m as u64;
    }
    region.persist(at, n as usize);
    st.prep[h].done = done + n;
    st.zero_budget -= n;
    stats.zeroed_bytes += n;
    stats.persists += 1;
    Ok(n)
}

/// Chains the next free region of the ring to head `h`'s run, if it is zeroed; else says
/// why not ([`Space::Full`] or [`Space::Preparing`]).
fn chain(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    h: usize,
) -> Result<Result<(), Space>, FabricError> {
    let run = st.runs[h];
    let Some(r) = next_free(run) else {
        return Ok(Err(Space::Full));
    };
    if !ready(st, h, r) {
        // What is left to zero, if this call's budget covers it (a region no larger than a
        // message's share, or one nearly done); else the grant asks again.
        zero_head(region, st, stats, h, true)?;
        if !ready(st, h, r) {
            stats.chain_waits += 1;
            return Ok(Err(Space::Preparing));
        }
    }
    set_run(
        region,
        st,
        h,
        HeadState {
            len: run.len + 1,
            ..run
        },
    )?;
    // Taken: the next region to zero is another one (or this one, in a later life).
    st.prep[h] = Prep::NONE;
    st.cursor[h] = region_start(st.region_bytes, r);
    stats.chained += 1;
    stats.persists += 1;
    Ok(Ok(()))
}

/// Starts cleaning head `h` if it is due and a region is free (and zeroed) for the target.
fn maybe_start(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    h: usize,
) -> Result<(), FabricError> {
    let run = st.runs[h];
    if run.cleaning() || st.appended[h] < st.threshold {
        return Ok(());
    }
    let Some(r) = next_free(run) else {
        return Ok(());
    };
    if !ready(st, h, r) {
        zero_head(region, st, stats, h, true)?;
        if !ready(st, h, r) {
            // The target is still being zeroed: a later grant starts the cleaning.
            return Ok(());
        }
    }
    let next = HeadState {
        epoch: run.epoch.wrapping_add(1) | 1,
        len: run.len + 1,
        src: run.len,
        ..run
    };
    set_run(region, st, h, next)?;
    st.prep[h] = Prep::NONE;
    st.cursor[h] = region_start(st.region_bytes, r);
    st.appended[h] = 0;
    st.cleaners[h] = Cleaner::start(next);
    stats.cleanings_started += 1;
    stats.persists += 1;
    Ok(())
}

/// Reserves `len` bytes in head `head`'s log (an object never spans a segment or a
/// region): in the run's last region, else in a newly chained one (if it is zeroed yet).
/// A client's grant counts towards the head's cleaning threshold, and may start one first.
pub(super) fn reserve(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    head: u8,
    len: u64,
    by_client: bool,
) -> Result<Space, FabricError> {
    let h = head as usize;
    if h >= st.sb.heads as usize {
        return Ok(Space::Full);
    }
    if by_client {
        maybe_start(region, st, stats, h)?;
    }
    let sb = st.sb;
    loop {
        let run = st.runs[h];
        let last = run.nth(run.len - 1);
        let region_end = (last as u64 + 1) * st.region_bytes;
        let mut at = st.cursor[h].max(region_start(st.region_bytes, last));
        let seg_end = (at / sb.segment_bytes + 1) * sb.segment_bytes;
        if at + len > seg_end {
            at = seg_end;
        }
        if at + len <= region_end && at / 8 <= MAX_UNITS {
            st.cursor[h] = at + len;
            if by_client {
                st.appended[h] += len;
            }
            return Ok(Space::At((at / 8) as u32));
        }
        if let Err(why) = chain(region, st, stats, h)? {
            return Ok(why);
        }
    }
}

/// What cleaning one key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Its word names nothing in the source any more (or it is not a key of this head).
    Done,
    /// A write of it is in flight: again later.
    Blocked,
}

/// Whether `units` lies in the source regions of `run`.
fn in_source(st: &State, run: HeadState, units: u32) -> bool {
    units != 0 && run.in_first(region_of(st.region_bytes, units), run.src)
}

/// Makes `key`'s word (head `h`) name nothing in the source: copies its newest object to the
/// target, or drops an older source object, or empties the bucket of a deleted key.
fn clean_key(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    h: usize,
    key: &[u8],
    only: Option<u32>,
) -> Result<Outcome, FabricError> {
    let Some((idx, b)) = locate(region, st, key)? else {
        return Ok(Outcome::Done);
    };
    let run = st.runs[h];
    let meta = b.meta();
    if b.head() as usize != h || only.is_some_and(|u| u != meta.new_off()) {
        // Another head's key, or a stale version (the merge overlooks it).
        return Ok(Outcome::Done);
    }
    let (new, old) = (meta.new_off(), meta.old_off());
    if !in_source(st, run, new) && !in_source(st, run, old) {
        return Ok(Outcome::Done);
    }
    let kb = key_buf(key);
    if let Some(p) = st.pending.get(&kb).copied() {
        if !is_durable(region, &st.sb, &p) {
            return Ok(Outcome::Blocked);
        }
        st.pending.remove(&kb);
    }
    let sb = st.sb;
    let off = sb.bucket_off(idx);
    let mut obj = std_alloc::vec![0u8; OBJECT_MAX];
    let (whole, deleted, len) = read_object_at(region, &sb, h as u8, new, key, &mut obj);
    if !whole {
        // No write in flight, yet the newest never became whole (its writer was settled
        // while this word was read, or a crash left it): the word reverts, as recovery does.
        region.store_u64(off, meta.revert().encode())?;
        region.persist(off, 8);
        stats.persists += 1;
        return Ok(Outcome::Blocked);
    }
    if deleted {
        // The key is deleted and its delete object is the newest: free its bucket. The
        // word first (readers then skip the bucket), inside a stripe section as every
        // change of a bucket's key words.
        let section = stripe::Section::enter(region, &sb, &[idx])?;
        region.store_u64(off, 0)?;
        region.persist(off, 8);
        region.write(off + 8, &[0u8; BUCKET_LEN - 8])?;
        region.persist(off + 8, BUCKET_LEN - 8);
        section.leave(region)?;
        if let Some(p) = st.present.get_mut(idx as usize) {
            *p = false;
        }
        stats.buckets_reclaimed += 1;
        stats.persists += 2;
        return Ok(Outcome::Done);
    }
    let keep = if in_source(st, run, new) {
        // The latest version: copy it to the target, durable before the word names it.
        let Space::At(c) = reserve(region, st, stats, h as u8, len, false)? else {
            return Ok(Outcome::Blocked);
        };
        let at = sb
            .object_off(h as u8, c)
            .map_err(|_| corrupt(region, off))?;
        region.write(at, &obj[..len as usize])?;
        region.persist(at, len as usize);
        stats.cleaned_objects += 1;
        stats.cleaned_bytes += len;
        stats.persists += 1;
        c
    } else {
        // The newest is outside the source and finished: the older one is not needed.
        new
    };
    let word = Meta::EMPTY
        .advance(keep)
        .map_err(|_| corrupt(region, off))?;
    region.store_u64(off, word.encode())?;
    region.persist(off, 8);
    stats.persists += 1;
    Ok(Outcome::Done)
}

/// Parses one segment of the source (ring region `r`, segment `seg`) into the offsets of the
/// objects it holds, in log order: a word that is not an object header (zeroed, a durable
/// mark, never written) is skipped, an object header skips the object.
fn parse_segment(
    region: &dyn LocalRegion,
    st: &State,
    h: usize,
    r: u8,
    seg: u64,
    out: &mut Vec<u32>,
) -> Result<(), FabricError> {
    let sb = st.sb;
    let start = (r as u64 * st.region_bytes + seg * sb.segment_bytes).max(LOG_START);
    let end = r as u64 * st.region_bytes + (seg + 1) * sb.segment_bytes;
    let base = sb.head_base[h];
    let mut buf = std_alloc::vec![0u8; (end - start) as usize];
    region.read(base + start, &mut buf)?;
    let mut p = 0usize;
    while p + 8 <= buf.len() {
        match object_len_from_header(&buf[p..p + 8]) {
            Ok(len) if p + len <= buf.len() => {
                out.push(((start + p as u64) / 8) as u32);
                p += len;
            }
            _ => p += 8,
        }
    }
    Ok(())
}

/// Runs head cleaning for about `budget` work units (see the module docs); true if it did
/// anything.
pub(super) fn step(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    mut budget: u32,
) -> Result<bool, FabricError> {
    let mut worked = false;
    for h in 0..st.sb.heads as usize {
        if !st.runs[h].cleaning() {
            continue;
        }
        while budget > 0 {
            worked = true;
            let run = st.runs[h];
            let segs = st.region_bytes / st.sb.segment_bytes;
            match core::mem::take(&mut st.cleaners[h]) {
                Cleaner::Idle => {
                    st.cleaners[h] = Cleaner::start(run);
                }
                Cleaner::Merge { pos, seg, mut objs } => {
                    if let Some(u) = objs.pop() {
                        budget = budget.saturating_sub(8);
                        let mut buf = std_alloc::vec![0u8; OBJECT_MAX];
                        let sb = st.sb;
                        let key = sb.object_off(h as u8, u).ok().and_then(|at| {
                            let room = sb.head_remaining(u).min(OBJECT_MAX as u64) as usize;
                            region.read(at, &mut buf[..8.min(room)]).ok()?;
                            let len = object_len_from_header(&buf[..8]).ok()?.min(room);
                            region.read(at, &mut buf[..len]).ok()?;
                            let o = decode_object_with(&buf[..len], super::object_checksum).ok()?;
                            Some(key_buf(o.key))
                        });
                        if let Some((k, n)) = key {
                            clean_key(region, st, stats, h, &k[..n as usize], Some(u))?;
                        }
                        st.cleaners[h] = Cleaner::Merge { pos, seg, objs };
                    } else if pos == 0 {
                        st.cleaners[h] = Cleaner::Sweep {
                            next: 0,
                            blocked: false,
                            moved: stats.displaced,
                        };
                    } else {
                        // The next segment back: the last one of region `pos - 1` first.
                        let seg = if seg == u64::MAX { segs } else { seg };
                        if seg == 0 {
                            st.cleaners[h] = Cleaner::Merge {
                                pos: pos - 1,
                                seg: u64::MAX,
                                objs,
                            };
                        } else {
                            budget = budget.saturating_sub(16);
                            parse_segment(region, st, h, run.nth(pos - 1), seg - 1, &mut objs)?;
                            st.cleaners[h] = Cleaner::Merge {
                                pos,
                                seg: seg - 1,
                                objs,
                            };
                        }
                    }
                }
                Cleaner::Sweep {
                    next,
                    blocked,
                    moved,
                } => {
                    if next >= st.sb.buckets {
                        if blocked || moved != stats.displaced {
                            // Writes were in flight, or entries moved: sweep again on later
                            // steps.
                            st.cleaners[h] = Cleaner::Sweep {
                                next: 0,
                                blocked: false,
                                moved: stats.displaced,
                            };
                            break;
                        }
                        finish(region, st, stats, h)?;
                        break;
                    }
                    budget -= 1;
                    let mut raw = [0u8; BUCKET_LEN];
                    region.read(st.sb.bucket_off(next), &mut raw)?;
                    let mut blocked = blocked;
                    if let Ok(b) = remora_layouts::erda::Bucket::decode(&raw)
                        && b.is_used()
                        && b.head() as usize == h
                        && (in_source(st, run, b.meta().new_off())
                            || in_source(st, run, b.meta().old_off()))
                    {
                        let key = key_buf(b.key());
                        budget = budget.saturating_sub(7);
                        if clean_key(region, st, stats, h, &key.0[..key.1 as usize], None)?
                            == Outcome::Blocked
                        {
                            blocked = true;
                        }
                    }
                    st.cleaners[h] = Cleaner::Sweep {
                        next: next + 1,
                        blocked,
                        moved,
                    };
                }
            }
        }
    }
    Ok(worked)
}

/// The swing: no word names the source any more; the run drops it, the epoch turns even.
fn finish(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    h: usize,
) -> Result<(), FabricError> {
    let run = st.runs[h];
    let next = HeadState {
        epoch: run.epoch.wrapping_add(1) & !1,
        first: run.nth(run.src),
        len: run.len - run.src,
        src: 0,
        ..run
    };
    set_run(region, st, h, next)?;
    st.cleaners[h] = Cleaner::Idle;
    stats.cleanings_done += 1;
    stats.persists += 1;
    stats.reclaimed_bytes += run.src as u64 * st.region_bytes;
    Ok(())
}

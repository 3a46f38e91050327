//! The arenas a tree carves its nodes from, and the record of them that survives a restart.
//!
//! Clients give the server allocator chunks as arenas (`Init`, `Grow`). The first
//! [`RECORD_LEN`] bytes of each arena hold its record: a magic, the arena's start and end,
//! the offset of the record of the arena given before it (0: none), and a CRC-64 over those
//! four words. The superblock's word [`ARENAS_WORD`] (past the words clients read, inside
//! the superblock's carved block) names the newest record, so the records form a chain,
//! newest first. A record is written and persisted before the word links it, and nothing
//! is carved from an arena before that, so a linked record is whole (a crash between the
//! two loses the one arena, with nothing carved from it).
//!
//! Nothing else about the arenas is persistent: not the bump cursors, nor which carved
//! pieces are nodes, mailbox blocks or free. A restarted server ([`Arenas::recover`]) takes
//! everything in a linked arena that is neither a record, the superblock nor a node
//! reachable from the root as free: the nodes its previous life retired or had ready for
//! reuse, the nodes of a transaction the crash cut short, every mailbox block (no
//! connection outlives the server) and the arenas' uncarved tails. Those gaps become spans
//! carved like arena tails. So a restart leaks nothing that later restarts do not find
//! again: the free set is recomputed from the reachable tree each time, and what a life
//! wastes (gaps between live pieces smaller than a node) is at most one gap per live piece.
//! Recovery takes time and memory in proportion to the reachable nodes plus the arenas;
//! unreachable memory is never read, so a torn or garbage free node does not matter.
use super::CatfishError;
use crate::server::LocalRegion;
use remora_layouts::catfish::META_LEN;
use remora_layouts::region::HEADER_LEN;
use std_alloc::vec::Vec;

/// Bytes of an arena record, at the start of its arena.
pub const RECORD_LEN: u64 = 64;
/// `b"CFARENA1"`: the first word of an arena record.
pub const RECORD_MAGIC: u64 = u64::from_le_bytes(*b"CFARENA1");
/// The superblock word naming the newest arena record (0 in a tree formatted before arena
/// records existed: such a tree recovers no free space).
pub const ARENAS_WORD: u64 = 48;
/// Bytes carved for the superblock.
pub const SUPERBLOCK_LEN: u64 = 64;
const _: () = assert!(META_LEN as u64 <= ARENAS_WORD);
const _: () = assert!(ARENAS_WORD + 8 <= SUPERBLOCK_LEN);
const _: () = assert!(SUPERBLOCK_LEN.is_multiple_of(64) && RECORD_LEN.is_multiple_of(64));
/// Word offsets inside a record.
const REC_START: u64 = 8;
const REC_END: u64 = 16;
const REC_NEXT: u64 = 24;
const REC_CRC: u64 = 32;
const _: () = assert!(REC_CRC + 8 <= RECORD_LEN);

/// CRC-64/ECMA-182 of a record's words, as Catfish's nodes are checked
/// ([`remora_layouts::crc64ecma`]: the same value as the `crc` crate's).
fn record_crc(start: u64, end: u64, next: u64) -> u64 {
    let mut b = [0u8; 32];
    for (i, w) in [RECORD_MAGIC, start, end, next].into_iter().enumerate() {
        b[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    remora_layouts::crc64ecma::checksum(&b)
}

fn corrupt(what: &'static str) -> CatfishError {
    CatfishError::Corrupt(what)
}

/// Free memory to carve from: `[cursor, end)`.
#[derive(Debug, Clone, Copy)]
struct Span {
    cursor: u64,
    end: u64,
}

impl Span {
    fn free_nodes(&self, node_len: u64) -> u64 {
        (self.end - self.cursor) / node_len
    }
}

/// The tree's arenas: what it was given, and where it carves.
#[derive(Debug)]
pub(super) struct Arenas {
    node_len: u64,
    /// `[start, end)` of every arena, sorted by start, never overlapping: a new arena must
    /// not overlap any of it (carved parts are live memory).
    given: Vec<(u64, u64)>,
    /// Free memory, carved in order: the gaps found by recovery, then each newer arena's tail.
    spans: Vec<Span>,
    /// Spans before this index have no room for a node.
    open: usize,
    /// Nodes that still fit in the spans.
    room: u64,
    /// Offset of the newest record (0: none).
    head: u64,
    /// A tree formatted before arena records: its arenas are unknown, so the records of
    /// new ones are never published (a chain of only those would leave its live nodes
    /// outside every recorded arena, and the next recovery would refuse the tree).
    unrecorded: bool,
}

impl Arenas {
    pub(super) fn new(node_len: u64) -> Arenas {
        Arenas {
            node_len,
            given: Vec::new(),
            spans: Vec::new(),
            open: 0,
            room: 0,
            head: 0,
            unrecorded: false,
        }
    }

    /// Arenas given.
    pub(super) fn count(&self) -> usize {
        self.given.len()
    }

    /// Nodes that still fit.
    pub(super) fn room(&self) -> u64 {
        self.room
    }

    /// Takes the arena `[base, base + len)` and writes its record (persisted, linked to the
    /// previous newest; [`Arenas::link`] publishes it). Refused if it lies outside the region,
    /// holds no node past its record, or overlaps memory the tree was already given.
    pub(super) fn add(
        &mut self,
        region: &dyn LocalRegion,
        base: u64,
        len: u64,
    ) -> Result<(), CatfishError> {
        let bad = super::tree::bad;
        let start = base
            .checked_next_multiple_of(64)
            .ok_or(bad("arena end overflows"))?;
        let end = base.checked_add(len).ok_or(bad("arena end overflows"))?;
        if base < HEADER_LEN as u64 || end > region.len() || start >= end {
            return Err(bad("arena outside the region or empty"));
        }
        if end - start < RECORD_LEN + self.node_len {
            return Err(bad("arena smaller than one node"));
        }
        // Sorted by start: only the neighbours of the insertion point can overlap.
        let at = self.given.partition_point(|a| a.0 < start);
        let overlaps = |a: &(u64, u64)| start < a.1 && a.0 < end;
        if self.given[..at].last().is_some_and(overlaps) || self.given.get(at).is_some_and(overlaps)
        {
            return Err(bad("arena overlaps memory the tree already has"));
        }
        if self.given.try_reserve(1).is_err() || self.spans.try_reserve(1).is_err() {
            return Err(bad("no memory to track another arena"));
        }
        for (w, v) in [
            (0, RECORD_MAGIC),
            (REC_START, start),
            (REC_END, end),
            (REC_NEXT, self.head),
            (REC_CRC, record_crc(start, end, self.head)),
        ] {
            region.store_u64(start + w, v)?;
        }
        region.persist(start, RECORD_LEN as usize);
        self.given.insert(at, (start, end));
        let span = Span {
            cursor: start + RECORD_LEN,
            end,
        };
        self.room += span.free_nodes(self.node_len);
        self.spans.push(span);
        self.head = start;
        Ok(())
    }

    /// Publishes the newest record in the superblock at `meta`.
    pub(super) fn link(&self, region: &dyn LocalRegion, meta: u64) -> Result<(), CatfishError> {
        if self.unrecorded {
            return Ok(());
        }
        region.store_u64(meta + ARENAS_WORD, self.head)?;
        region.persist(meta + ARENAS_WORD, 8);
        Ok(())
    }

    /// Carves `size` bytes at an `align`-aligned offset from the first span with room.
    pub(super) fn carve_aligned(&mut self, size: u64, align: u64) -> Result<u64, CatfishError> {
        for i in self.open..self.spans.len() {
            let s = &mut self.spans[i];
            let at = s.cursor.next_multiple_of(align);
            if at <= s.end && s.end - at >= size {
                let before = s.free_nodes(self.node_len);
                s.cursor = (at + size).next_multiple_of(8).min(s.end);
                self.room = self.room - before + s.free_nodes(self.node_len);
                return Ok(at);
            }
            if s.free_nodes(self.node_len) == 0 && i == self.open {
                self.open += 1;
            }
        }
        Err(CatfishError::Full)
    }

    /// The arenas of a tree a previous life left: the record chain from the superblock at
    /// `meta`, and as free spans everything in them but the records, the superblock and
    /// `live` (offsets of the nodes reachable from the root). Refused with
    /// [`CatfishError::Corrupt`] if a record does not check, two arenas or two live pieces
    /// overlap, or a live node lies outside the arenas.
    pub(super) fn recover(
        region: &dyn LocalRegion,
        meta: u64,
        node_len: u64,
        live: &[u64],
    ) -> Result<Arenas, CatfishError> {
        let mut a = Arenas::new(node_len);
        a.head = region.load_u64(meta + ARENAS_WORD)?;
        if a.head == 0 {
            // Formatted before arena records: nothing known to be free (nothing reused).
            a.unrecorded = true;
            return Ok(a);
        }
        // Each arena holds its record and a node, which bounds the chain.
        let most = region.len() / (RECORD_LEN + node_len) + 1;
        let mut at = a.head;
        while at != 0 {
            if a.given.len() as u64 >= most {
                return Err(corrupt("the arena chain is longer than the region holds"));
            }
            if !at.is_multiple_of(64)
                || at < HEADER_LEN as u64
                || at.checked_add(RECORD_LEN).is_none_or(|e| e > region.len())
            {
                return Err(corrupt("an arena record lies outside the region"));
            }
            let w = |off: u64| region.load_u64(at + off);
            let (start, end, next) = (w(REC_START)?, w(REC_END)?, w(REC_NEXT)?);
            if w(0)? != RECORD_MAGIC || w(REC_CRC)? != record_crc(start, end, next) {
                return Err(corrupt("an arena record does not check"));
            }
            if start != at
                || end > region.len()
                || end
                    .checked_sub(start)
                    .is_none_or(|l| l < RECORD_LEN + node_len)
            {
                return Err(corrupt("an arena record names impossible bounds"));
            }
            a.given
                .try_reserve(1)
                .map_err(|_| corrupt("no memory to track the arenas"))?;
            a.given.push((start, end));
            at = next;
        }
        a.given.sort_unstable();
        if a.given.windows(2).any(|p| p[0].1 > p[1].0) {
            return Err(corrupt("two arena records overlap"));
        }
        // The live pieces (the superblock and the nodes), in address order.
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        pieces
            .try_reserve_exact(live.len() + 1)
            .map_err(|_| corrupt("no memory to sort the linked nodes"))?;
        pieces.push((meta, meta + SUPERBLOCK_LEN));
        pieces.extend(live.iter().map(|&n| (n, n.saturating_add(node_len))));
        pieces.sort_unstable();
        if pieces.windows(2).any(|p| p[0].1 > p[1].0) {
            return Err(corrupt("two linked nodes overlap"));
        }
        let mut pieces = pieces.into_iter();
        let mut piece = pieces.next();
        for k in 0..a.given.len() {
            let (start, end) = a.given[k];
            let mut cursor = start + RECORD_LEN;
            while let Some((lo, hi)) = piece.filter(|p| p.0 < end) {
                if lo < cursor || hi > end {
                    return Err(corrupt(
                        "a linked node overlaps a record, a node or no arena",
                    ));
                }
                a.gap(cursor, lo)?;
                cursor = hi;
                piece = pieces.next();
            }
            a.gap(cursor, end)?;
        }
        if piece.is_some() {
            return Err(corrupt("a linked node lies past every arena"));
        }
        Ok(a)
    }

    /// Frees `[lo, hi)` (kept if a mailbox block fits).
    fn gap(&mut self, lo: u64, hi: u64) -> Result<(), CatfishError> {
        if hi.saturating_sub(lo.next_multiple_of(64)) >= 64 {
            self.spans
                .try_reserve(1)
                .map_err(|_| corrupt("no memory to track the free space"))?;
            let span = Span {
                cursor: lo,
                end: hi,
            };
            self.room += span.free_nodes(self.node_len);
            self.spans.push(span);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tree::Tree;
    use super::super::tree::tests::mem;
    use super::*;
    use remora_layouts::catfish::Rect;

    /// A record that does not check, a chain that loops or leaves out the arena of live
    /// nodes, impossible bounds: the tree is refused with a clear error, and nothing of the
    /// region is written.
    #[test]
    fn a_broken_arena_chain_refuses_the_tree() {
        let r = mem(1 << 20);
        let mut t = Tree::format(&r, 4096, 4096).unwrap();
        for id in 0..200u64 {
            let x = (id * 37 % 1000) as i32;
            let rect = Rect::new(x, x, x + 5, x + 5).unwrap();
            match t.insert(&r, rect, id) {
                Err(CatfishError::Full) => {
                    t.grow(&r, (64 << 10) + id * 4096, 4096).unwrap();
                    t.insert(&r, rect, id).unwrap();
                }
                other => other.unwrap(),
            }
        }
        assert!(t.arenas() >= 2);
        let head = r.load_u64(t.meta() + ARENAS_WORD).unwrap();
        let next = r.load_u64(head + REC_NEXT).unwrap();
        let end = r.load_u64(head + REC_END).unwrap();
        let words = |r: &dyn LocalRegion| -> Vec<u64> {
            (0..r.len() / 8)
                .map(|w| r.load_u64(w * 8).unwrap())
                .collect()
        };
        let whole = words(&r);
        let rewrite = |start: u64, end: u64, next: u64| {
            r.store_u64(head + REC_START, start).unwrap();
            r.store_u64(head + REC_END, end).unwrap();
            r.store_u64(head + REC_NEXT, next).unwrap();
            r.store_u64(head + REC_CRC, record_crc(start, end, next))
                .unwrap();
        };
        let refused = |what: &str| {
            let before = words(&r);
            match Tree::recover(&r) {
                Err(CatfishError::Corrupt(why)) => assert!(why.contains(what), "{why}"),
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("a broken chain was accepted ({what})"),
            }
            assert!(words(&r) == before, "a refused recovery wrote the region");
        };
        r.store_u64(head + REC_END, end - 64).unwrap();
        refused("does not check");
        rewrite(head, end, head);
        refused("longer than the region");
        rewrite(head, end, 0);
        refused("no arena");
        rewrite(head, r.len() + 4096, next);
        refused("impossible bounds");
        rewrite(head + 64, end, next);
        refused("impossible bounds");
        rewrite(head, head - 64, next);
        refused("impossible bounds");
        r.store_u64(t.meta() + ARENAS_WORD, 4096 + 8).unwrap();
        refused("outside the region");
        for (w, v) in whole.iter().enumerate() {
            r.store_u64(w as u64 * 8, *v).unwrap();
        }
        let (t2, report) = Tree::recover(&r).unwrap().unwrap();
        assert_eq!((report.entries, t2.arenas()), (200, t.arenas()));
    }

    /// A tree formatted before arena records (no chain in its superblock) recovers as it
    /// always did, with no free space back, and keeps recovering after it is given new arenas.
    #[test]
    fn a_tree_without_arena_records_still_recovers() {
        let r = mem(1 << 20);
        let mut t = Tree::format(&r, 4096, 64 << 10).unwrap();
        let rect = |id: u64| {
            let x = (id * 37 % 1000) as i32;
            Rect::new(x, x, x + 5, x + 5).unwrap()
        };
        for id in 0..100u64 {
            t.insert(&r, rect(id), id).unwrap();
        }
        r.store_u64(t.meta() + ARENAS_WORD, 0).unwrap();
        let mut next = 128 << 10;
        for life in 0..3u64 {
            let (mut t, report) = Tree::recover(&r).unwrap().unwrap();
            assert_eq!(report.entries, 100 + 100 * life);
            assert_eq!((t.arenas(), t.free_nodes()), (0, 0), "no free space known");
            for id in 0..100u64 {
                let id = 100 * (life + 1) + id;
                if let Err(CatfishError::Full) = t.insert(&r, rect(id), id) {
                    t.grow(&r, next, 64 << 10).unwrap();
                    next += 64 << 10;
                    t.insert(&r, rect(id), id).unwrap();
                }
            }
            assert_eq!(r.load_u64(t.meta() + ARENAS_WORD).unwrap(), 0);
        }
    }
}

//! Node images as a one-sided READ sees them while the server rewrites the node in place:
//! each 64-byte segment of the READ observes memory at its own moment, in ascending address
//! order or in any order. The reader's check ([`Node::decode`]: a CRC-64 over the head
//! version and the body) must accept only whole images whatever the order; a check that
//! trusts the head and tail versions alone holds only when segments land in ascending
//! order (the mutant below), and is caught here under shuffled order.
extern crate std;
use super::tree::Tree;
use crate::fabric::{FabricError, SegmentOrder};
use crate::server::LocalRegion;
use core::cell::RefCell;
use remora_layouts::catfish::{ENTRY_LEN, Entry, NODE_LEN, Node, RECT_LEN, Rect};
use remora_layouts::{LayoutError, NodeId};
use std::vec;
use std::vec::Vec;

/// One write of the server: offset, the bytes it replaced, the bytes it wrote.
pub(super) type Logged = (u64, Vec<u8>, Vec<u8>);

/// A plain-memory region that logs every write, so any node's successive images during
/// one insert can be replayed.
pub(super) struct LogRegion {
    pub(super) mem: RefCell<Vec<u8>>,
    pub(super) log: RefCell<Vec<Logged>>,
}

impl LocalRegion for LogRegion {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.mem.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let m = self.mem.borrow();
        let src = m
            .get(offset as usize..offset as usize + buf.len())
            .ok_or(crate::server::out_of_range(0, offset, buf.len()))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let mut m = self.mem.borrow_mut();
        let dst = m
            .get_mut(offset as usize..offset as usize + data.len())
            .ok_or(crate::server::out_of_range(0, offset, data.len()))?;
        self.log
            .borrow_mut()
            .push((offset, dst.to_vec(), data.to_vec()));
        dst.copy_from_slice(data);
        Ok(())
    }
}

/// Copies the part of a logged write that falls in the node at `node` into `img`.
fn apply(img: &mut [u8], node: u64, at: u64, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        let a = at + i as u64;
        if a >= node && a < node + NODE_LEN as u64 {
            img[(a - node) as usize] = *b;
        }
    }
}

/// Successive images of every node the last insert rewrote in place (its head version
/// stored odd: the seqlock's first store), from before the insert to after it.
fn rewrites(region: &LogRegion) -> Vec<(u64, Vec<Vec<u8>>)> {
    let log = region.log.borrow();
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for (at, old, new) in log.iter() {
        if new.len() != 8 || seen.contains(at) {
            continue;
        }
        let v = u64::from_le_bytes(new[..].try_into().unwrap());
        let was = u64::from_le_bytes(old[..].try_into().unwrap());
        if v & 1 == 0 || was + 1 != v {
            continue;
        }
        seen.push(*at);
        let node = *at;
        let mut img = vec![0u8; NODE_LEN];
        region.read(node, &mut img).unwrap();
        for (a, old, _) in log.iter().rev() {
            apply(&mut img, node, *a, old);
        }
        let mut states = vec![img.clone()];
        for (a, _, new) in log.iter() {
            let before = img.clone();
            apply(&mut img, node, *a, new);
            if img != before {
                states.push(img.clone());
            }
        }
        out.push((node, states));
    }
    out
}

/// The mutant: accepts an image whose head and tail versions are equal and even, without
/// the checksum (as a seqlock reader may when a READ observes ascending addresses and the
/// writer's stores fall between its segments).
fn decode_by_version_pair(img: &[u8]) -> Result<(u16, Vec<Entry>), LayoutError> {
    let word = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    let (head, tail) = (word(0), word(NODE_LEN - 8));
    if head != tail || head & 1 == 1 {
        return Err(LayoutError::Inconsistent {
            what: "versions differ",
        });
    }
    let meta = word(8);
    let count = (meta >> 48) as usize;
    if count > remora_layouts::catfish::FANOUT {
        return Err(LayoutError::Inconsistent { what: "count" });
    }
    let mut entries = Vec::new();
    for i in 0..count {
        let at = 16 + i * ENTRY_LEN;
        entries.push(Entry {
            rect: Rect::decode(img, at)?,
            ptr: word(at + RECT_LEN),
        });
    }
    Ok(((meta >> 32) as u16, entries))
}

fn content(n: &Node) -> (u16, Vec<Entry>) {
    (n.level, n.entries().to_vec())
}

/// READs of nodes being rewritten, their segments observing successive images in `order`.
/// Returns (images accepted, accepted images that are no whole image the node ever had)
/// for the real check and for the mutant.
fn torn_reads(order: SegmentOrder) -> [(u32, u32); 2] {
    let region = LogRegion {
        mem: RefCell::new(vec![0u8; 1 << 20]),
        log: RefCell::new(Vec::new()),
    };
    let mut t = Tree::format(&region, 4096, (1 << 20) - 4096).unwrap();
    let mut x = 0x0123_4567_89AB_CDEFu64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut counts = [(0u32, 0u32); 2];
    for id in 0..300u64 {
        let (px, py) = ((next() % 5000) as i32, (next() % 5000) as i32);
        let r = Rect::new(px, py, px + (next() % 200) as i32, py + 50).unwrap();
        region.log.borrow_mut().clear();
        t.insert(&region, r, id).unwrap();
        for (node, states) in rewrites(&region) {
            let whole: Vec<(u16, Vec<Entry>)> = states
                .iter()
                .filter_map(|s| Node::decode(s).ok())
                .map(|n| content(&n))
                .collect();
            // Before and after each rewrite (an insert may rewrite a node twice).
            assert!(whole.len() >= 2, "an in-place rewrite without whole images");
            for _ in 0..20 {
                let mut segs = Vec::new();
                order.for_each_segment(node, NODE_LEN, false, &mut seed, |s, e| segs.push(s..e));
                // The i-th segment read observes the image at the i-th of these moments.
                let mut when: Vec<usize> = (0..segs.len())
                    .map(|_| (next() % states.len() as u64) as usize)
                    .collect();
                when.sort_unstable();
                let mut img = vec![0u8; NODE_LEN];
                for (r, &w) in segs.into_iter().zip(&when) {
                    img[r.clone()].copy_from_slice(&states[w][r]);
                }
                let got = [
                    Node::decode(&img).ok().map(|n| content(&n)),
                    decode_by_version_pair(&img).ok(),
                ];
                for (c, g) in counts.iter_mut().zip(got) {
                    if let Some(g) = g {
                        c.0 += 1;
                        if !whole.contains(&g) {
                            c.1 += 1;
                        }
                    }
                }
            }
        }
    }
    counts
}

#[test]
fn node_checks_hold_under_any_segment_order() {
    let [real, mutant] = torn_reads(SegmentOrder::Shuffled);
    assert_eq!(real.1, 0, "the CRC-64 check accepted a torn image");
    assert!(real.0 > 500, "only {} images accepted", real.0);
    assert!(mutant.1 > 0, "the version-pair check was not caught");
    std::println!(
        "shuffled segments: the version-pair check accepted {} torn images of {}",
        mutant.1,
        mutant.0
    );
    let [real, mutant] = torn_reads(SegmentOrder::Ascending);
    assert_eq!(real.1, 0);
    // The version pair is sound when segments land in ascending order.
    assert_eq!(
        mutant.1, 0,
        "the version-pair check failed in ascending order"
    );
}

mod server {
    //! The server as a [`Handler`], driven message by message without a fabric.
    use super::super::CatfishServer;
    use crate::fabric::{FabricError, Recv, RecvKind};
    use crate::server::{CpuClock, Handler, LocalRegion, Replies};
    use core::cell::{Cell, RefCell};
    use remora_layouts::catfish::{
        FLAG_LAST, FLAG_MORE, Heartbeat, META_HEARTBEAT_OFFSET, Opcode, ROOT_SLOT, Rect, Request,
        ResponseHeader, Status, decode_hit, hits_per_message,
    };
    use remora_layouts::region::root_offset;
    use remora_layouts::{GlobalAddr, NodeId};
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    struct Region {
        mem: RefCell<Vec<u8>>,
        clock: Cell<Option<CpuClock>>,
    }

    impl LocalRegion for Region {
        fn node(&self) -> NodeId {
            0
        }
        fn len(&self) -> u64 {
            self.mem.borrow().len() as u64
        }
        fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
            let m = self.mem.borrow();
            let src = m
                .get(offset as usize..offset as usize + buf.len())
                .ok_or(crate::server::out_of_range(0, offset, buf.len()))?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
            let mut m = self.mem.borrow_mut();
            m.get_mut(offset as usize..offset as usize + data.len())
                .ok_or(crate::server::out_of_range(0, offset, data.len()))?
                .copy_from_slice(data);
            Ok(())
        }
        fn cpu_clock(&self) -> Option<CpuClock> {
            self.clock.get()
        }
    }

    const MSG: usize = 256;

    /// The replies one message got: (status, flags, hits) each, or the refusal.
    type Got = Result<Vec<(Status, u8, u32)>, FabricError>;

    struct Rig {
        region: Region,
        server: CatfishServer,
        replies: Replies,
        /// Replies received per connection (the client's ack counter).
        got: [u8; 8],
        next_id: u32,
    }

    fn rect(x: i32) -> Rect {
        Rect::new(x, 0, x + 2, 2).unwrap()
    }

    impl Rig {
        fn new(window: usize) -> Rig {
            let mut rig = Rig {
                region: Region {
                    mem: RefCell::new(vec![0u8; 4 << 20]),
                    clock: Cell::new(None),
                },
                server: CatfishServer::new(MSG).with_window(window),
                replies: Replies::new(),
                got: [0; 8],
                next_id: 1,
            };
            let (_, s) = rig.call(
                0,
                Opcode::Init,
                rect(0),
                GlobalAddr::new(0, 8192).raw(),
                1 << 20,
            );
            assert_eq!(s, Ok(vec![(Status::Ok, FLAG_LAST, 0)]));
            rig
        }

        fn raw(&mut self, conn: usize, recv: Recv, msg: &[u8]) -> Got {
            self.replies.clear();
            self.server
                .on_message(&self.region, conn, recv, msg, &mut self.replies)?;
            let mut out = Vec::new();
            for m in self.replies.iter() {
                let h = ResponseHeader::decode(m).unwrap();
                self.got[conn] = self.got[conn].wrapping_add(1);
                out.push((h.status, h.flags, h.count));
            }
            Ok(out)
        }

        /// One request from `conn` acknowledging every reply it got; returns its id and the
        /// replies (status, flags, hits) sent now.
        fn call(
            &mut self,
            conn: usize,
            op: Opcode,
            rect: Rect,
            arg0: u64,
            arg1: u64,
        ) -> (u32, Got) {
            let id = self.next_id;
            self.next_id += 1;
            (id, self.call_id(conn, op, id, rect, arg0, arg1))
        }

        fn call_id(
            &mut self,
            conn: usize,
            op: Opcode,
            req_id: u32,
            rect: Rect,
            arg0: u64,
            arg1: u64,
        ) -> Got {
            let bytes = Request {
                op,
                acked: self.got[conn],
                req_id,
                rect,
                arg0,
                arg1,
            }
            .encode();
            let recv = Recv {
                kind: RecvKind::Send,
                len: bytes.len() as u32,
                imm: None,
            };
            self.raw(conn, recv, &bytes)
        }

        fn fill(&mut self, n: u64) {
            for id in 0..n {
                let (_, r) = self.call(0, Opcode::Insert, rect(id as i32 * 3), id, 0);
                assert_eq!(r, Ok(vec![(Status::Ok, FLAG_LAST, 0)]));
            }
        }
    }

    /// Issue 14.2: a reply is sent a window at a time; the rest waits at the server until its
    /// client asks, so a client that stops reading holds only its own receive slots.
    #[test]
    fn a_reply_goes_out_a_window_at_a_time() {
        let per = hits_per_message(MSG) as u64;
        let mut rig = Rig::new(4);
        rig.fill(per * 10 + 3);
        let all = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
        let (id, first) = rig.call(1, Opcode::Search, all, 0, 0);
        let first = first.unwrap();
        assert_eq!(first.len(), 4, "one window");
        assert_eq!(first[3].1, FLAG_MORE);
        assert!(first[..3].iter().all(|m| m.1 == 0));
        assert_eq!(rig.server.queued_replies(), 7);
        // Meanwhile another client is served at once.
        let (_, other) = rig.call(2, Opcode::Search, rect(0), 0, 0);
        assert_eq!(other.unwrap(), vec![(Status::Ok, FLAG_LAST, 1)]);
        // A More that acknowledges nothing new gets nothing (the window is still unread).
        let stale = rig.got[1].wrapping_sub(4);
        let bytes = Request {
            op: Opcode::More,
            acked: stale,
            req_id: id,
            rect: all,
            arg0: 0,
            arg1: 0,
        }
        .encode();
        let recv = Recv {
            kind: RecvKind::Send,
            len: bytes.len() as u32,
            imm: None,
        };
        assert_eq!(rig.raw(1, recv, &bytes).unwrap(), vec![]);
        let mut hits: u32 = first.iter().map(|m| m.2).sum();
        loop {
            let more = rig.call_id(1, Opcode::More, id, all, 0, 0).unwrap();
            assert!(more.len() <= 4);
            hits += more.iter().map(|m| m.2).sum::<u32>();
            if more.last().unwrap().1 == FLAG_LAST {
                break;
            }
            assert_eq!(more.last().unwrap().1, FLAG_MORE);
        }
        assert_eq!(u64::from(hits), per * 10 + 3);
        assert_eq!(rig.server.queued_replies(), 0);
        // More with nothing queued, or a new request while a reply is queued: refused.
        assert!(rig.call_id(1, Opcode::More, id, all, 0, 0).is_err());
        let (_, r) = rig.call(3, Opcode::Search, all, 0, 0);
        assert_eq!(r.unwrap().len(), 4);
        assert!(
            rig.call(3, Opcode::Search, all, 0, 0).1.is_err(),
            "pipelined"
        );
    }

    /// Issue 10: everything the server keeps for a connection goes with it.
    #[test]
    fn a_closed_connection_leaves_nothing_behind() {
        let mut rig = Rig::new(2);
        rig.fill(100);
        let all = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
        let (_, mb) = rig.call(1, Opcode::Mailbox, rect(0), 0, 0);
        assert_eq!(mb.unwrap(), vec![(Status::Ok, FLAG_LAST, 1)]);
        let mailbox = {
            let m = rig.replies.iter().next().unwrap();
            GlobalAddr::from_raw(decode_hit(m, 0).unwrap().ptr)
        };
        // Asking twice gives the same mailbox.
        rig.call(1, Opcode::Mailbox, rect(0), 0, 0).1.unwrap();
        let again = GlobalAddr::from_raw(
            decode_hit(rig.replies.iter().next().unwrap(), 0)
                .unwrap()
                .ptr,
        );
        assert_eq!(again, mailbox);
        // The client dies in the middle of a long reply.
        rig.call(1, Opcode::Search, all, 0, 0).1.unwrap();
        assert!(rig.server.queued_replies() > 0);
        // Connection 0 (the inserts) and connection 1.
        assert_eq!(rig.server.connections(), 2);
        rig.server.on_disconnect(&rig.region, 1);
        assert_eq!(rig.server.queued_replies(), 0);
        assert_eq!(rig.server.connections(), 1);
        // Its mailbox is reused by the next client, not carved again.
        rig.call(2, Opcode::Mailbox, rect(0), 0, 0).1.unwrap();
        let next = GlobalAddr::from_raw(
            decode_hit(rig.replies.iter().next().unwrap(), 0)
                .unwrap()
                .ptr,
        );
        assert_eq!(next, mailbox);
        // A WRITE_WITH_IMM naming another connection's mailbox is refused.
        let imm = |a: GlobalAddr| Recv {
            kind: RecvKind::WriteImm,
            len: remora_layouts::catfish::REQUEST_LEN as u32,
            imm: Some((a.offset() / 8) as u32),
        };
        let req = Request {
            op: Opcode::Search,
            acked: 0,
            req_id: 99,
            rect: rect(0),
            arg0: 0,
            arg1: 0,
        };
        rig.region.write(next.offset(), &req.encode()).unwrap();
        assert!(
            rig.raw(3, imm(next), &[]).is_err(),
            "someone else's mailbox"
        );
        assert_eq!(
            rig.raw(2, imm(next), &[]).unwrap(),
            vec![(Status::Ok, FLAG_LAST, 1)]
        );
        assert_eq!(rig.server.service(), "catfish");
    }

    #[test]
    fn recover_reports_what_it_found() {
        let mut rig = Rig::new(8);
        rig.fill(300);
        let mut fresh = CatfishServer::new(MSG);
        let said = fresh.recover(&rig.region).unwrap();
        assert!(said.contains("300 entries"), "{said}");
        assert!(said.contains("1 arenas recovered"), "{said}");
        // The recovered server serves the tree, inserts into the free space it recovered,
        // and grows it when asked.
        rig.server = fresh;
        rig.got = [0; 8];
        let (_, r) = rig.call(1, Opcode::Search, rect(2), 0, 0);
        assert_eq!(r.unwrap(), vec![(Status::Ok, FLAG_LAST, 2)]);
        let (_, r) = rig.call(1, Opcode::Insert, rect(5), 1000, 0);
        assert_eq!(r.unwrap(), vec![(Status::Ok, FLAG_LAST, 0)]);
        let (_, r) = rig.call(
            1,
            Opcode::Grow,
            rect(0),
            GlobalAddr::new(0, 2 << 20).raw(),
            1 << 20,
        );
        assert_eq!(r.unwrap(), vec![(Status::Ok, FLAG_LAST, 0)]);
        let (_, r) = rig.call(1, Opcode::Insert, rect(5), 1001, 0);
        assert_eq!(r.unwrap(), vec![(Status::Ok, FLAG_LAST, 0)]);
        // A superblock whose magic is gone: reported, and the tree is not served.
        let meta = GlobalAddr::from_raw(rig.region.load_u64(root_offset(ROOT_SLOT)).unwrap());
        rig.region.store_u64(meta.offset(), 0).unwrap();
        let mut fresh = CatfishServer::new(MSG);
        let said = fresh.recover(&rig.region).unwrap();
        assert!(said.contains("broken"), "{said}");
        rig.server = fresh;
        rig.got = [0; 8];
        let (_, r) = rig.call(1, Opcode::Search, rect(3), 0, 0);
        assert_eq!(r.unwrap(), vec![(Status::NotInitialized, FLAG_LAST, 0)]);
    }

    /// Issue 14.4: where the fabric reports the node's CPU clock, the load is busy time over
    /// real time, not a count of events (which reads 100 % on a fabric that never idles).
    #[test]
    fn the_load_is_cpu_time_where_the_fabric_reports_it() {
        let mut rig = Rig::new(8);
        rig.server = CatfishServer::new(MSG).with_heartbeat_interval_ns(1_000_000);
        rig.got = [0; 8];
        rig.region.clock.set(Some(CpuClock {
            now_ns: 0,
            busy_ns: 0,
            threads: 1,
        }));
        // Re-init on the new server (same region): a fresh tree over another arena.
        rig.region.store_u64(root_offset(ROOT_SLOT), 0).unwrap();
        let (_, r) = rig.call(
            0,
            Opcode::Init,
            rect(0),
            GlobalAddr::new(0, 2 << 20).raw(),
            1 << 20,
        );
        assert_eq!(r.unwrap()[0].0, Status::Ok);
        let meta = GlobalAddr::from_raw(rig.region.load_u64(root_offset(ROOT_SLOT)).unwrap());
        // 10 ms of messages, the CPU busy 15 % of the time.
        for k in 1..=100u64 {
            rig.region.clock.set(Some(CpuClock {
                now_ns: k * 100_000,
                busy_ns: k * 15_000,
                threads: 1,
            }));
            rig.call(1, Opcode::Search, rect(0), 0, 0).1.unwrap();
        }
        assert_eq!(rig.server.load_permille(), 150);
        let hb = Heartbeat::decode(
            rig.region
                .load_u64(meta.offset() + META_HEARTBEAT_OFFSET)
                .unwrap(),
        );
        assert_eq!(hb.load_permille, 150);
        assert!(
            (9..=10).contains(&hb.seq),
            "one heartbeat per ms: {}",
            hb.seq
        );
        // Without a clock, the event meter: only messages, so it climbs towards 100 %.
        let mut rig = Rig::new(8);
        for _ in 0..200 {
            rig.call(1, Opcode::Search, rect(0), 0, 0).1.unwrap();
        }
        assert!(rig.server.load_permille() > 900);
    }
}

/// A one-sided search replayed against every moment of the server's restructuring writes
/// (R*'s forced reinsert, Hilbert redistribution and 2-to-3 splits, condense-tree): each
/// node read at its own moment, no earlier than the moment its parent was read, and nothing
/// more (an offloading client's level-by-level rounds and a server thread's lock-free
/// depth-first walk are both such schedules). A torn or mid-write image is read again later. The search must find every entry present before
/// and after the operation that meets its window, and return only entries present before
/// or after. The mutant writes every transaction in place (`set_exclusive`, no copy on
/// write) and must be caught.
mod concurrent_reader {
    use super::*;
    use remora_layouts::GlobalAddr;
    use remora_layouts::catfish::{META_ROOT_OFFSET, TreeKind, node_len};
    use std::collections::BTreeSet;

    struct Replay<'a> {
        base: &'a [u8],
        log: &'a [Logged],
    }

    impl Replay<'_> {
        /// Bytes `[at, at + len)` after the first `moment` writes of the operation.
        fn read(&self, at: u64, len: usize, moment: usize) -> Vec<u8> {
            let mut img = self.base[at as usize..at as usize + len].to_vec();
            for (w, _, new) in &self.log[..moment] {
                let (lo, hi) = (at.max(*w), (at + len as u64).min(*w + new.len() as u64));
                if lo < hi {
                    img[(lo - at) as usize..(hi - at) as usize]
                        .copy_from_slice(&new[(lo - w) as usize..(hi - w) as usize]);
                }
            }
            img
        }
    }

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// One schedule of a search for `window`; `None` if an image never decoded.
    fn search(
        rp: &Replay<'_>,
        meta: u64,
        fanout: usize,
        window: &Rect,
        rng: &mut u64,
    ) -> Option<BTreeSet<(Rect, u64)>> {
        let n = rp.log.len();
        let len = node_len(fanout);
        let pick = |lo: usize, rng: &mut u64| lo + (xorshift(rng) % (n - lo + 1) as u64) as usize;
        let m0 = pick(0, rng);
        let root = u64::from_le_bytes(rp.read(meta + META_ROOT_OFFSET, 8, m0).try_into().unwrap());
        let mut pending = vec![(GlobalAddr::from_raw(root).offset(), m0)];
        let mut found = BTreeSet::new();
        while let Some((off, after)) = pending.pop() {
            let mut m = pick(after, rng);
            let node = loop {
                match Node::decode_with(&rp.read(off, len, m), fanout) {
                    Ok(node) => break node,
                    Err(_) if m < n => m += 1,
                    Err(_) => return None,
                }
            };
            for e in node.entries().iter().filter(|e| e.rect.intersects(window)) {
                if node.level == 0 {
                    found.insert((e.rect, e.ptr));
                } else {
                    pending.push((GlobalAddr::from_raw(e.ptr).offset(), m));
                }
            }
        }
        Some(found)
    }

    fn all(t: &mut Tree, region: &LogRegion) -> BTreeSet<(Rect, u64)> {
        let mut hits = Vec::new();
        let everything = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
        t.search(region, &everything, &mut hits).unwrap();
        hits.into_iter().map(|e| (e.rect, e.ptr)).collect()
    }

    /// (searches replayed, searches that missed an entry present throughout, searches that
    /// returned an entry never present).
    fn run(kind: TreeKind, in_place: bool) -> (u64, u64, u64) {
        let fanout = 6;
        let region = LogRegion {
            mem: RefCell::new(vec![0u8; 4 << 20]),
            log: RefCell::new(Vec::new()),
        };
        let mut t = Tree::format_kind(&region, 4096, (4 << 20) - 4096, fanout, kind).unwrap();
        t.set_exclusive(in_place);
        let mut rng = 0x5DEE_CE66_D1CE_F00Du64 ^ kind as u64;
        let mut live: Vec<(Rect, u64)> = Vec::new();
        let (mut searches, mut missed, mut ghosts) = (0, 0, 0);
        for step in 0..400u64 {
            let before = all(&mut t, &region);
            let base = region.mem.borrow().clone();
            region.log.borrow_mut().clear();
            if live.len() < 60 || xorshift(&mut rng).is_multiple_of(2) {
                let (x, y) = (
                    (xorshift(&mut rng) % 1000) as i32,
                    (xorshift(&mut rng) % 1000) as i32,
                );
                let rect = Rect::new(x, y, x + 20, y + 20).unwrap();
                t.insert(&region, rect, step).unwrap();
                live.push((rect, step));
            } else {
                let k = (xorshift(&mut rng) % live.len() as u64) as usize;
                let (rect, id) = live.swap_remove(k);
                assert!(t.delete(&region, rect, id).unwrap());
            }
            let after = all(&mut t, &region);
            let log = region.log.borrow();
            if step < 60 || log.is_empty() {
                continue;
            }
            let rp = Replay {
                base: &base,
                log: &log,
            };
            let throughout: BTreeSet<_> = before.intersection(&after).copied().collect();
            for _ in 0..12 {
                let (x, y) = (
                    (xorshift(&mut rng) % 900) as i32,
                    (xorshift(&mut rng) % 900) as i32,
                );
                let window = Rect::new(x, y, x + 300, y + 300).unwrap();
                let Some(got) = search(&rp, t.meta(), fanout, &window, &mut rng) else {
                    missed += 1;
                    continue;
                };
                searches += 1;
                if throughout
                    .iter()
                    .any(|e| e.0.intersects(&window) && !got.contains(e))
                {
                    missed += 1;
                }
                if got
                    .iter()
                    .any(|e| !before.contains(e) && !after.contains(e))
                {
                    ghosts += 1;
                }
            }
        }
        (searches, missed, ghosts)
    }

    #[test]
    fn restructuring_never_hides_an_entry_from_a_concurrent_search() {
        for kind in [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert] {
            let (searches, missed, ghosts) = run(kind, false);
            assert!(searches > 2000, "{kind:?}: only {searches} searches");
            assert_eq!((missed, ghosts), (0, 0), "{kind:?}: of {searches} searches");
            std::println!("{kind:?}: {searches} concurrent searches, none wrong");
        }
        // In-place transactions (the mutant) let a search miss moved entries.
        let (searches, missed, ghosts) = run(TreeKind::RStar, true);
        std::println!("in place: {missed} of {searches} searches missed, {ghosts} ghosts");
        assert!(
            missed + ghosts > 0,
            "in-place restructuring was not caught in {searches} searches"
        );
    }
}

//! Erda's one-sided reads under an adversarial fabric: the words of one READ observe memory
//! in any order (only aligned 8-byte words are atomic; ops of one queue pair are ordered).
//!
//! The server runs in-process on a test region that keeps an image after every 8-byte store
//! while a displacing insert runs (entries move between buckets, a bucket is filled, the
//! client writes its object). Readers then run real gets on a test queue pair that replays
//! that timeline: each READ takes its words from images of its choosing, never earlier than
//! what an earlier op of the queue pair saw (a legal execution of the contract), some in
//! descending address order, some at random. Every key must read back, and the reader of
//! the old design (one trusted neighborhood READ, correct only for ascending word order) must
//! be caught.
use remora_core::NodeId;
use remora_core::block_on::block_on;
use remora_core::counters::Counters;
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv, RecvKind};
use remora_core::index::KvIndex;
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::region::RegionHeader;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

/// A memory node's region: plain bytes, and while recording an image after every store.
struct Mem {
    bytes: RefCell<Vec<u8>>,
    images: RefCell<Option<Vec<Rc<Vec<u8>>>>>,
}

impl Mem {
    fn new(len: usize) -> Mem {
        let mut b = vec![0u8; len];
        let h = RegionHeader::new(len as u64, 64 << 10, 0).unwrap();
        b[..128].copy_from_slice(&h.encode());
        Mem {
            bytes: RefCell::new(b),
            images: RefCell::new(None),
        }
    }
    /// Starts recording (the first image is the current state), or stops and returns them.
    fn record(&self, on: bool) -> Vec<Rc<Vec<u8>>> {
        let taken = self.images.borrow_mut().take().unwrap_or_default();
        if on {
            *self.images.borrow_mut() = Some(vec![Rc::new(self.bytes.borrow().clone())]);
        }
        taken
    }
    fn check(&self, off: u64, len: usize) -> Result<usize, FabricError> {
        let o = off as usize;
        if o.checked_add(len)
            .is_none_or(|e| e > self.bytes.borrow().len())
        {
            return Err(remora_core::server::out_of_range(0, off, len));
        }
        Ok(o)
    }
    fn snap(&self) {
        if let Some(images) = self.images.borrow_mut().as_mut() {
            images.push(Rc::new(self.bytes.borrow().clone()));
        }
    }
}

impl LocalRegion for Mem {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.bytes.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let o = self.check(offset, buf.len())?;
        buf.copy_from_slice(&self.bytes.borrow()[o..o + buf.len()]);
        Ok(())
    }
    /// Word by word, an image after each (a CPU's or NIC's stores land one word at a time).
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let o = self.check(offset, data.len())?;
        for (i, w) in data.chunks(8).enumerate() {
            let at = o + i * 8;
            self.bytes.borrow_mut()[at..at + w.len()].copy_from_slice(w);
            self.snap();
        }
        Ok(())
    }
}

/// A recorded timeline a reader's queue pair replays: `images[t]` is memory at time `t`.
struct Timeline {
    images: Vec<Rc<Vec<u8>>>,
    /// Earliest time the next op may observe (ops of a queue pair are ordered).
    clock: usize,
    rng: u64,
    /// Words of a READ observed from the highest address down (else in random order).
    descending: bool,
}

impl Timeline {
    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
    /// Fills `buf` from `off` as one READ that starts at the clock and ends at a time of the
    /// timeline's choosing, each word observed at some time in between.
    fn read(&mut self, off: usize, buf: &mut [u8]) {
        let last = self.images.len() - 1;
        let start = self.clock;
        let end = start + (self.next() as usize % (last - start + 1));
        let words = buf.len().div_ceil(8);
        for (i, w) in buf.chunks_mut(8).enumerate() {
            let t = if self.descending {
                // Highest word first: times grow as addresses fall.
                start + (end - start) * (words - 1 - i) / (words - 1).max(1)
            } else {
                start + self.next() as usize % (end - start + 1)
            };
            let at = off + i * 8;
            w.copy_from_slice(&self.images[t.min(end)][at..at + w.len()]);
        }
        self.clock = end;
    }
}

/// The server, shared by the test's queue pairs and called synchronously.
struct Node {
    mem: Mem,
    server: RefCell<ErdaServer>,
}

/// A queue pair to the in-process node; READs replay `timeline` while one is armed.
struct TestQp<'n> {
    node: &'n Node,
    conn: usize,
    replies: RefCell<VecDeque<Vec<u8>>>,
    timeline: RefCell<Option<Timeline>>,
    counters: Counters,
    broken: Cell<bool>,
}

impl<'n> TestQp<'n> {
    fn new(node: &'n Node, conn: usize) -> TestQp<'n> {
        TestQp {
            node,
            conn,
            replies: RefCell::new(VecDeque::new()),
            timeline: RefCell::new(None),
            counters: Counters::new(),
            broken: Cell::new(false),
        }
    }
    fn deliver(&self, recv: Recv, msg: &[u8]) -> Result<(), FabricError> {
        let mut r = Replies::new();
        self.node
            .server
            .borrow_mut()
            .on_message(&self.node.mem, self.conn, recv, msg, &mut r)?;
        self.replies
            .borrow_mut()
            .extend(r.iter().map(|m| m.to_vec()));
        Ok(())
    }
    fn run(&self, op: &mut Op<'_>) -> Result<(), FabricError> {
        let mem = &self.node.mem;
        match op {
            Op::Read { remote, local } => {
                let off = mem.check(remote.offset(), local.len())?;
                match self.timeline.borrow_mut().as_mut() {
                    Some(t) => t.read(off, local),
                    None => mem.read(remote.offset(), local)?,
                }
            }
            Op::Write { remote, local } => mem.write(remote.offset(), local)?,
            Op::WriteImm { remote, local, imm } => {
                mem.write(remote.offset(), local)?;
                let recv = Recv {
                    kind: RecvKind::WriteImm,
                    len: local.len() as u32,
                    imm: Some(*imm),
                };
                self.deliver(recv, &[])?;
            }
            Op::Send { local } => {
                let recv = Recv {
                    kind: RecvKind::Send,
                    len: local.len() as u32,
                    imm: None,
                };
                self.deliver(recv, local)?;
            }
            Op::Cas { .. } | Op::Faa { .. } => {
                return Err(FabricError::Unsupported {
                    what: "no atomics in this test",
                });
            }
        }
        Ok(())
    }
}

impl QueuePair for TestQp<'_> {
    fn peer(&self) -> NodeId {
        0
    }
    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        self.counters.count_post(ops);
        for op in ops.iter_mut() {
            self.counters.count_op(op);
            self.run(op)?;
        }
        self.counters.count_round_trip();
        Ok(())
    }
    async fn recv<'a>(&'a self, buf: &'a mut [u8]) -> Result<Recv, FabricError> {
        self.try_recv(buf)?
            .ok_or(FabricError::RetryExceeded { node: 0 })
    }
    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        let Some(m) = self.replies.borrow_mut().pop_front() else {
            return Ok(None);
        };
        buf[..m.len()].copy_from_slice(&m);
        Ok(Some(Recv {
            kind: RecvKind::Send,
            len: m.len() as u32,
            imm: None,
        }))
    }
    fn max_message(&self) -> usize {
        64
    }
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn is_broken(&self) -> bool {
        self.broken.get()
    }
}

struct TestEp<'n> {
    qp: TestQp<'n>,
}

impl<'n> Endpoint for TestEp<'n> {
    type Qp = TestQp<'n>;
    fn qp(&self, node: NodeId) -> Result<&TestQp<'n>, FabricError> {
        if node == 0 {
            Ok(&self.qp)
        } else {
            Err(FabricError::UnknownNode { node })
        }
    }
    fn nodes(&self) -> &[NodeId] {
        &[0]
    }
}

fn key(x: u64) -> [u8; 8] {
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()
}

/// 64 home buckets, neighborhoods of 4: displacement starts around half full.
fn cfg() -> ErdaConfig {
    ErdaConfig {
        heads: 1,
        buckets: 64,
        neighborhood: 4,
        max_clients: 4,
        segment_bytes: 8192,
        head_bytes: 8 * 8192,
    }
}

/// Inserts keys 0, 1, ... until one insert moves entries; returns the timeline of that
/// insert (grant, moves, bucket fill, the client's object WRITE) and the key inserted.
fn displacing_insert(node: &Node, writer: &Erda<'_, TestEp<'_>>) -> (Vec<Rc<Vec<u8>>>, u64) {
    for x in 0..64u64 {
        let before = node.server.borrow().stats().displaced;
        node.mem.record(true);
        block_on(writer.upsert(&key(x), &x.to_le_bytes())).unwrap();
        let images = node.mem.record(false);
        if node.server.borrow().stats().displaced > before {
            return (images, x);
        }
    }
    panic!("no insert displaced an entry");
}

/// Runs `get` of every key under `schedules` replayed timelines per key; returns the wrong
/// answers (key, schedule, answer).
fn wrong_answers(
    reader: &Erda<'_, TestEp<'_>>,
    ep: &TestEp<'_>,
    images: &[Rc<Vec<u8>>],
    last: u64,
    schedules: u64,
) -> Vec<(u64, u64, Option<u64>)> {
    let mut wrong = Vec::new();
    for x in 0..=last {
        for s in 0..schedules {
            *ep.qp.timeline.borrow_mut() = Some(Timeline {
                images: images.to_vec(),
                clock: 0,
                rng: 0x9E37_79B9_7F4A_7C15 ^ (x << 20) ^ (s + 1),
                descending: s % 2 == 0,
            });
            let mut out = [0u8; 8];
            let got = block_on(reader.get(&key(x), &mut out))
                .unwrap()
                .map(|_| u64::from_le_bytes(out));
            *ep.qp.timeline.borrow_mut() = None;
            // The key being inserted may read as absent (its upsert is concurrent).
            let ok = got == Some(x) || (x == last && got.is_none());
            if !ok {
                wrong.push((x, s, got));
            }
        }
    }
    wrong
}

#[test]
fn reads_in_any_word_order_never_miss_a_key_being_moved() {
    let node = Node {
        mem: Mem::new(256 << 10),
        server: RefCell::new(ErdaServer::new(cfg())),
    };
    let wep = TestEp {
        qp: TestQp::new(&node, 1),
    };
    let rep = TestEp {
        qp: TestQp::new(&node, 2),
    };
    let mep = TestEp {
        qp: TestQp::new(&node, 3),
    };
    let writer = block_on(Erda::open(&wep, ErdaClientConfig::default())).unwrap();
    let cfg = ErdaClientConfig {
        read_retries: 50,
        ..ErdaClientConfig::default()
    };
    let reader = block_on(Erda::open(&rep, cfg)).unwrap();
    let mutant = block_on(Erda::open(
        &mep,
        ErdaClientConfig {
            assume_ascending_reads: true,
            ..cfg
        },
    ))
    .unwrap();
    let (images, last) = displacing_insert(&node, &writer);
    let moved = node.server.borrow().stats().displaced;
    println!(
        "erda order: insert of key {last} moved {moved} entries; timeline of {} images",
        images.len()
    );
    let wrong = wrong_answers(&reader, &rep, &images, last, 200);
    let st = reader.stats();
    println!(
        "erda order: reader validated {} neighborhood READs, {} caught a change",
        st.validated, st.unstable
    );
    assert!(
        wrong.is_empty(),
        "wrong answers (key, schedule, got): {wrong:?}"
    );
    assert!(st.unstable > 0, "no validated READ overlapped a change");
    // The mutant trusts one READ and must be caught by the same schedules.
    let caught = wrong_answers(&mutant, &mep, &images, last, 200);
    println!(
        "erda order: the ascending-order mutant gave {} wrong answers",
        caught.len()
    );
    assert!(
        !caught.is_empty(),
        "the schedules never caught the reader that relies on ascending word order"
    );
    // After the timeline, every key reads back on an ordinary queue pair.
    for x in 0..=last {
        let mut out = [0u8; 8];
        assert_eq!(block_on(reader.get(&key(x), &mut out)).unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), x);
    }
}

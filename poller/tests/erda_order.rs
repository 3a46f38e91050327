//! Erda's one-sided reads under an adversarial fabric: the words of one READ observe memory
//! in any order (only aligned 8-byte words are atomic; ops of one queue pair are ordered).
//!
//! The server runs in-process on a test region that records every 8-byte store while a small
//! table fills (grants, bucket fills, hopscotch moves, the clients' object WRITEs). Readers
//! then run real gets on a test queue pair that replays that history: each READ takes each of
//! its words from some instant between its start and its end, never earlier than what an
//! earlier op of the queue pair saw (a legal execution of the contract), the words in
//! descending address order or at random. Every answer must fit the key's upsert interval,
//! and the reader of the old design (one trusted neighborhood READ, correct only for
//! ascending word order) must be caught.
use remora_core::NodeId;
use remora_core::block_on::block_on;
use remora_core::counters::Counters;
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv, RecvKind};
use remora_core::index::KvIndex;
use remora_core::server::{Handler, LocalRegion, Replies};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

#[path = "common/mem_region.rs"]
mod mem_region;
use mem_region::{MemRegion, Observer};

/// One recorded 8-byte store: the word's offset and its new value.
type Store = (usize, [u8; 8]);

/// A memory node's region: plain bytes, and while recording a log of every 8-byte store.
type Mem = MemRegion<StoreLog>;

/// While recording: every aligned word a store touched, with its new value, each one event of
/// the timeline (a CPU's or NIC's stores land one aligned word at a time).
#[derive(Default)]
struct StoreLog(RefCell<Option<Vec<Store>>>);

impl StoreLog {
    /// Stores recorded so far (the current time of the timeline).
    fn now(&self) -> usize {
        self.0.borrow().as_ref().map_or(0, |l| l.len())
    }
}

impl Observer for StoreLog {
    fn stored(&self, mem: &[u8], offset: usize, len: usize) {
        if let Some(log) = self.0.borrow_mut().as_mut() {
            for word in (offset & !7..offset + len).step_by(8) {
                log.push((word, mem[word..word + 8].try_into().unwrap()));
            }
        }
    }
}

/// The recorded history of the region: `base`, then one store per event.
struct History {
    base: Vec<u8>,
    /// Each word's stores as (time, value); event `i` of the log happens at time `i + 1`.
    words: HashMap<usize, Vec<(usize, [u8; 8])>>,
    len: usize,
}

impl History {
    fn new(base: Vec<u8>, log: &[Store]) -> History {
        let mut words: HashMap<usize, Vec<(usize, [u8; 8])>> = HashMap::new();
        for (i, &(at, v)) in log.iter().enumerate() {
            words.entry(at).or_default().push((i + 1, v));
        }
        History {
            base,
            words,
            len: log.len(),
        }
    }
    /// The aligned word at `at` as of time `t`.
    fn word(&self, at: usize, t: usize) -> [u8; 8] {
        if let Some(h) = self.words.get(&at) {
            let n = h.partition_point(|&(k, _)| k <= t);
            if n > 0 {
                return h[n - 1].1;
            }
        }
        self.base[at..at + 8].try_into().unwrap()
    }
}

/// A reader's queue pair replaying the history: one legal execution of the contract.
struct Timeline {
    history: Rc<History>,
    /// Earliest time the next op may observe (ops of a queue pair are ordered).
    clock: usize,
    /// Most events one READ may straddle.
    window: usize,
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
        assert!(
            off.is_multiple_of(8) && buf.len().is_multiple_of(8),
            "unaligned READ"
        );
        let start = self.clock;
        let reach = self.window.min(self.history.len - start);
        let end = start + self.next() as usize % (reach + 1);
        let words = buf.len() / 8;
        for (i, w) in buf.chunks_mut(8).enumerate() {
            let t = if self.descending {
                // Highest word first: times grow as addresses fall.
                start + (end - start) * (words - 1 - i) / (words - 1).max(1)
            } else {
                start + self.next() as usize % (end - start + 1)
            };
            w.copy_from_slice(&self.history.word(off + i * 8, t));
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
                let off = mem.range(remote.offset(), local.len())?.start;
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
            Op::Cas { .. } | Op::MaskedCas { .. } | Op::Faa { .. } => {
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
        regions: 1,
        clean_permille: 1000,
    }
}

/// Inserts keys 0..64 into a table of 64 home buckets (until it refuses), recording every
/// store: grants, bucket fills, hopscotch moves, the clients' object WRITEs. Returns the
/// history and each key's upsert interval in its time (`None`: refused).
fn fill(node: &Node, writer: &Erda<'_, TestEp<'_>>) -> (History, Vec<Option<(usize, usize)>>) {
    let base = node.mem.image();
    *node.mem.obs.0.borrow_mut() = Some(Vec::new());
    let mut spans = Vec::new();
    for x in 0..KEYS {
        let begin = node.mem.obs.now();
        let r = block_on(writer.upsert(&key(x), &x.to_le_bytes()));
        spans.push(r.is_ok().then(|| (begin, node.mem.obs.now())));
    }
    let log = node.mem.obs.0.borrow_mut().take().unwrap();
    (History::new(base, &log), spans)
}

const KEYS: u64 = 64;

/// Gets every key under `schedules` replayed executions each; returns the answers no
/// linearization allows, as (key, schedule, answer).
fn wrong_answers(
    reader: &Erda<'_, TestEp<'_>>,
    ep: &TestEp<'_>,
    history: &Rc<History>,
    spans: &[Option<(usize, usize)>],
    schedules: u64,
) -> Vec<(u64, u64, Option<u64>)> {
    let mut wrong = Vec::new();
    for x in 0..KEYS {
        for s in 0..schedules {
            let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (x << 24) ^ (s + 1);
            rng ^= rng << 13;
            rng ^= rng >> 7;
            let window = [2, 8, 32, 128][(s % 4) as usize];
            let start = match spans[x as usize] {
                // Around the key's own insert, or anywhere.
                Some((b, _)) if s % 3 != 0 => {
                    b.saturating_sub(window) + rng as usize % (window * 2)
                }
                _ => rng as usize % (history.len + 1),
            }
            .min(history.len);
            *ep.qp.timeline.borrow_mut() = Some(Timeline {
                history: history.clone(),
                clock: start,
                window,
                rng,
                descending: s % 2 == 0,
            });
            let mut out = [0u8; 8];
            let got = block_on(reader.get(&key(x), &mut out))
                .unwrap()
                .map(|_| u64::from_le_bytes(out));
            let end = ep.qp.timeline.borrow_mut().take().unwrap().clock;
            // The get ran over [start, end]; the upsert over its span.
            let ok = match spans[x as usize] {
                None => got.is_none(),
                Some((_, done)) if done <= start => got == Some(x),
                Some((begin, _)) if begin >= end => got.is_none(),
                Some(_) => got.is_none() || got == Some(x),
            };
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
        lease: remora_core::lease::LeaseConfig {
            max_attempts: 50,
            ..remora_core::lease::LeaseConfig::default()
        },
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
    let (history, spans) = fill(&node, &writer);
    let history = Rc::new(history);
    let moved = node.server.borrow().stats().displaced;
    let inserted = spans.iter().flatten().count();
    println!(
        "erda order: {inserted} of {KEYS} keys inserted, {moved} entries moved, a history of {} \
         stores",
        history.len
    );
    assert!(moved >= 4, "too little displacement to test");
    let wrong = wrong_answers(&reader, &rep, &history, &spans, 120);
    let st = reader.stats();
    println!(
        "erda order: reader validated {} neighborhood READs, {} caught a change",
        st.validated, st.unstable
    );
    assert!(
        wrong.is_empty(),
        "{} wrong answers (key, schedule, got), first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(st.unstable > 0, "no validated READ overlapped a change");
    // The mutant trusts one READ and must be caught by the same schedules.
    let caught = wrong_answers(&mutant, &mep, &history, &spans, 120);
    println!(
        "erda order: the ascending-order mutant gave {} wrong answers",
        caught.len()
    );
    assert!(
        !caught.is_empty(),
        "the schedules never caught the reader that relies on ascending word order"
    );
    // After the history, every inserted key reads back on an ordinary queue pair.
    for x in 0..KEYS {
        let mut out = [0u8; 8];
        let got = block_on(reader.get(&key(x), &mut out)).unwrap();
        let want = spans[x as usize].map(|_| x);
        assert_eq!(got.map(|_| u64::from_le_bytes(out)), want, "key {x}");
    }
}

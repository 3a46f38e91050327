//! Catfish on the soft fabric: several client threads against one memory node whose CPU runs
//! the Catfish server. Searches in every mode must equal a brute-force oracle; offloaded
//! searches racing the server's writes must never miss an entry inserted before they began
//! nor invent one; torn node READs are detected and re-read.
use remora_core::Snapshot;
use remora_core::block_on::{block_on, yield_now};
use remora_core::catfish::client::TORN_RETRIES;
use remora_core::catfish::server::DEFAULT_WINDOW;
use remora_core::catfish::{
    CatfishClient, CatfishError, CatfishServer, Entry, Mode, Rect, Transport,
};
use remora_core::counters::Counters;
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv};
use remora_layouts::GlobalAddr;
use remora_layouts::catfish::NODE_LEN;
use remora_poller::soft::{NodeConfig, SoftMemoryNode, SoftQp};
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

#[path = "common/observed.rs"]
mod observed;
use observed::Observed;

const SPACE: i32 = 100_000;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The `i`-th data rectangle (deterministic, so every thread can rebuild the oracle).
fn data_rect(i: u64) -> Rect {
    let h = mix(i);
    let x = (h % SPACE as u64) as i32;
    let y = ((h >> 20) % SPACE as u64) as i32;
    let w = ((h >> 40) % 2000) as i32;
    let d = ((h >> 52) % 2000) as i32;
    Rect::new(x, y, x + w, y + d).unwrap()
}

fn query_rect(seed: u64) -> Rect {
    let h = mix(seed ^ 0xabcdef);
    let x = (h % SPACE as u64) as i32 - 5000;
    let y = ((h >> 20) % SPACE as u64) as i32 - 5000;
    let w = ((h >> 40) % 12_000) as i32;
    Rect::new(x, y, x + w, y + w / 2 + 1).unwrap()
}

fn oracle(ids: impl Iterator<Item = u64>, q: &Rect) -> Vec<u64> {
    let mut v: Vec<u64> = ids.filter(|&i| data_rect(i).intersects(q)).collect();
    v.sort_unstable();
    v
}

fn ids_of(hits: &[Entry]) -> Vec<u64> {
    let mut v: Vec<u64> = hits.iter().map(|e| e.ptr).collect();
    v.sort_unstable();
    v
}

fn node(chunk_size: u64) -> Arc<SoftMemoryNode> {
    let cfg = NodeConfig {
        chunk_size,
        ..NodeConfig::default()
    };
    let max = cfg.max_msg;
    SoftMemoryNode::create_with(cfg, Box::new(CatfishServer::new(max))).unwrap()
}

fn diff(a: &Snapshot, b: &Snapshot) -> (u64, u64, u64) {
    (
        b.round_trips - a.round_trips,
        b.doorbells - a.doorbells,
        b.posted_verbs() - a.posted_verbs(),
    )
}

#[test]
fn soft_searches_match_the_oracle_in_every_mode() {
    // Small chunks so the tree outgrows its first arena and inserts must grow it.
    let node = node(64 << 10);
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    block_on(CatfishClient::create(ep.qp(0).unwrap(), 1)).unwrap();
    const THREADS: u64 = 4;
    const PER: u64 = 400;
    let barrier = Barrier::new(THREADS as usize);
    let figures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (node, barrier, figures) = (&node, &barrier, &figures);
            s.spawn(move || {
                let ep = node.endpoint().unwrap();
                let qp = ep.qp(0).unwrap();
                let mut c = block_on(CatfishClient::open(qp)).unwrap();
                // Half the clients reach the server by WRITE_WITH_IMM, half by SEND.
                if t % 2 == 1 {
                    c.set_transport(Transport::WriteImm);
                }
                // A failed insert still reaches the barrier (else the others wait forever).
                let inserted: Result<(), CatfishError> = ((t * PER)..((t + 1) * PER))
                    .try_for_each(|i| block_on(c.insert(qp, data_rect(i), i)));
                barrier.wait();
                if let Err(e) = inserted {
                    panic!("thread {t}: insert failed: {e}");
                }
                block_on(c.reload(qp)).unwrap();
                let all = 0..THREADS * PER;
                let mut hits = Vec::new();
                for mode in [Mode::Messaging, Mode::Offload, Mode::Adaptive] {
                    let before = qp.counters().snapshot();
                    let n = 60;
                    for k in 0..n {
                        let q = query_rect(t * 1000 + k);
                        hits.clear();
                        block_on(c.search(qp, q, mode, &mut hits)).unwrap();
                        assert_eq!(ids_of(&hits), oracle(all.clone(), &q), "{mode:?} {q:?}");
                    }
                    let (rt, db, verbs) = diff(&before, &qp.counters().snapshot());
                    match mode {
                        Mode::Messaging => assert_eq!(rt, n, "one round trip per messaging search"),
                        // Superblock + root in one doorbell, then one per level below.
                        _ => assert!(rt <= 4 * n, "{rt} round trips for {n} offloaded searches"),
                    }
                    figures.lock().unwrap().push((
                        t,
                        mode,
                        rt as f64 / n as f64,
                        db as f64 / n as f64,
                        verbs as f64 / n as f64,
                    ));
                }
                // A search covering everything spans several reply messages.
                let everything = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
                for mode in [Mode::Messaging, Mode::Offload] {
                    hits.clear();
                    block_on(c.search(qp, everything, mode, &mut hits)).unwrap();
                    assert_eq!(ids_of(&hits), all.clone().collect::<Vec<_>>());
                }
                c.stats()
            });
        }
    });
    for (t, mode, rt, db, verbs) in figures.into_inner().unwrap() {
        println!(
            "thread {t} {mode:?}: {rt:.2} round trips, {db:.2} doorbells, {verbs:.2} verbs per search"
        );
    }
}

#[test]
fn offloaded_searches_racing_inserts_never_miss_nor_invent() {
    let node = node(1 << 20);
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut w = block_on(CatfishClient::create(qp, 2)).unwrap();
    const N: u64 = 1500;
    let begun = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let torn = AtomicU64::new(0);
    // Set if the writer fails, so the readers stop instead of waiting for it forever.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let failed = std::thread::scope(|s| {
        for r in 0..3u64 {
            let (node, begun, done, torn, stop) = (&node, &begun, &done, &torn, &stop);
            s.spawn(move || {
                let ep = node.endpoint().unwrap();
                let qp = ep.qp(0).unwrap();
                let mut c = block_on(CatfishClient::open(qp)).unwrap();
                let mut hits = Vec::new();
                let mut k = 0;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let q = query_rect(r * 100_000 + k);
                    k += 1;
                    hits.clear();
                    block_on(c.search(qp, q, Mode::Offload, &mut hits)).unwrap();
                    let upper = begun.load(Ordering::Acquire);
                    let got = ids_of(&hits);
                    let must = oracle(0..finished, &q);
                    let may = oracle(0..upper, &q);
                    assert!(
                        must.iter().all(|i| got.binary_search(i).is_ok()),
                        "missed an entry"
                    );
                    assert!(
                        got.iter().all(|i| may.binary_search(i).is_ok()),
                        "invented an entry"
                    );
                    assert!(got.windows(2).all(|w| w[0] != w[1]), "duplicate hit");
                    if finished == N || stop.load(Ordering::Acquire) {
                        break;
                    }
                }
                torn.fetch_add(c.stats().torn_retries, Ordering::Relaxed);
            });
        }
        for i in 0..N {
            begun.store(i + 1, Ordering::Release);
            if let Err(e) = block_on(w.insert(qp, data_rect(i), i)) {
                stop.store(true, Ordering::Release);
                return Some((i, e));
            }
            done.store(i + 1, Ordering::Release);
        }
        None
    });
    if let Some((i, e)) = failed {
        panic!("insert {i} failed: {e}");
    }
    println!(
        "torn node images detected and re-read by racing readers: {}",
        torn.load(Ordering::Relaxed)
    );
}

/// A queue pair that tears node READs: a word in the middle of every `every`-th node image
/// is overwritten, as if the server's rewrite had landed between two of the READ's words.
/// Node reads at `poison` are always torn.
struct TearingQp<'a> {
    inner: &'a SoftQp,
    every: u64,
    seen: Cell<u64>,
    poison: Option<GlobalAddr>,
}

impl QueuePair for TearingQp<'_> {
    fn peer(&self) -> u16 {
        self.inner.peer()
    }
    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        self.inner.post(ops).await?;
        for op in ops.iter_mut() {
            if let Op::Read { remote, local } = op
                && local.len() == NODE_LEN
            {
                self.seen.set(self.seen.get() + 1);
                if self.seen.get().is_multiple_of(self.every) || Some(*remote) == self.poison {
                    local[200..208].copy_from_slice(&0xdead_beef_u64.to_le_bytes());
                }
            }
        }
        Ok(())
    }
    async fn recv<'a>(&'a self, buf: &'a mut [u8]) -> Result<Recv, FabricError> {
        self.inner.recv(buf).await
    }
    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        self.inner.try_recv(buf)
    }
    fn max_message(&self) -> usize {
        self.inner.max_message()
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn is_broken(&self) -> bool {
        self.inner.is_broken()
    }
}

#[test]
fn torn_node_reads_are_detected_and_retried() {
    let node = node(1 << 20);
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut c = block_on(CatfishClient::create(qp, 1)).unwrap();
    const N: u64 = 600;
    for i in 0..N {
        block_on(c.insert(qp, data_rect(i), i)).unwrap();
    }
    let tq = TearingQp {
        inner: qp,
        every: 3,
        seen: Cell::new(0),
        poison: None,
    };
    let mut hits = Vec::new();
    for k in 0..50 {
        let q = query_rect(k);
        hits.clear();
        block_on(c.search(&tq, q, Mode::Offload, &mut hits)).unwrap();
        assert_eq!(ids_of(&hits), oracle(0..N, &q));
    }
    let st = c.stats();
    assert!(st.torn_retries > 0, "no torn image was ever seen");
    println!(
        "node reads {}, torn images re-read {}",
        st.node_reads, st.torn_retries
    );
    // A node that never reads whole ends the search with an error, not a hang.
    let everything = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
    let mut meta = [0u8; 24];
    block_on(qp.read(c.meta(), &mut meta)).unwrap();
    let root = GlobalAddr::from_raw(u64::from_le_bytes(meta[8..16].try_into().unwrap()));
    let bad = TearingQp {
        inner: qp,
        every: u64::MAX,
        seen: Cell::new(0),
        poison: Some(root),
    };
    hits.clear();
    let err = block_on(c.search(&bad, everything, Mode::Offload, &mut hits)).unwrap_err();
    assert!(
        matches!(err, CatfishError::TornRetriesExhausted { .. }),
        "{err}"
    );
    let reads = c.stats().node_reads - st.node_reads;
    assert!(
        reads > u64::from(TORN_RETRIES),
        "gave up after {reads} reads, before the retry bound"
    );
}

#[test]
fn adaptive_mode_offloads_while_the_server_reports_busy() {
    let probe = Arc::new(AtomicU32::new(100));
    let cfg = NodeConfig::default();
    let max = cfg.max_msg;
    let node = SoftMemoryNode::create_with(
        cfg,
        Box::new(CatfishServer::new(max).with_load_probe(probe.clone())),
    )
    .unwrap();
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut c = block_on(CatfishClient::create(qp, 1)).unwrap();
    for i in 0..300 {
        block_on(c.insert(qp, data_rect(i), i)).unwrap();
    }
    let mut hits = Vec::new();
    let mut run = |c: &mut CatfishClient, n: u64| {
        let mut offloaded = 0;
        for k in 0..n {
            let q = query_rect(k);
            hits.clear();
            if block_on(c.search(qp, q, Mode::Adaptive, &mut hits)).unwrap() == Mode::Offload {
                offloaded += 1;
            }
            assert_eq!(ids_of(&hits), oracle(0..300, &q));
        }
        offloaded
    };
    assert_eq!(run(&mut c, 50), 0, "an idle server gets every search");
    probe.store(990, Ordering::Relaxed);
    let busy = run(&mut c, 100);
    assert!(
        busy >= 80,
        "a busy server should see most searches offloaded, got {busy}/100"
    );
    probe.store(100, Ordering::Relaxed);
    // Pending offloaded rounds run out, then the client returns to messaging for good.
    let left = c.stats().offloaded_searches;
    let mut back = 0;
    for _ in 0..2000 {
        hits.clear();
        let m = block_on(c.search(qp, query_rect(7), Mode::Adaptive, &mut hits)).unwrap();
        if m == Mode::Messaging {
            back += 1;
            if back == 20 {
                break;
            }
        } else {
            back = 0;
        }
    }
    assert_eq!(back, 20, "the client never went back to messaging");
    println!("busy phase: {busy}/100 offloaded; offloaded before calm: {left}");
}

#[test]
fn bad_requests_get_errors_not_panics() {
    let node = node(1 << 20);
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    // Before any tree exists, opening says so.
    assert!(matches!(
        block_on(CatfishClient::open(qp)),
        Err(CatfishError::NotCreated)
    ));
    let mut c = block_on(CatfishClient::create(qp, 1)).unwrap();
    // A second create would strand the first tree's clients: refused.
    let ep2 = node.endpoint().unwrap();
    assert!(matches!(
        block_on(CatfishClient::create(ep2.qp(0).unwrap(), 1)),
        Err(CatfishError::Server(
            remora_core::catfish::Status::BadRequest
        ))
    ));
    block_on(c.insert(qp, data_rect(1), 1)).unwrap();
    // Garbage drops that connection only; the client sees an error, the node keeps serving.
    let ep3 = node.endpoint().unwrap();
    let bad = ep3.qp(0).unwrap();
    block_on(bad.send(b"not a catfish request")).unwrap();
    let mut reply = [0u8; 64];
    assert!(block_on(bad.recv(&mut reply)).is_err());
    let mut hits = Vec::new();
    block_on(c.search(qp, data_rect(1), Mode::Messaging, &mut hits)).unwrap();
    assert_eq!(ids_of(&hits), vec![1]);
}

/// A queue pair whose receives wait while `stalled` is set: a client that stopped reading.
struct StallingQp<'a> {
    inner: &'a SoftQp,
    stalled: &'a std::sync::atomic::AtomicBool,
}

impl QueuePair for StallingQp<'_> {
    fn peer(&self) -> u16 {
        self.inner.peer()
    }
    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        self.inner.post(ops).await
    }
    async fn recv<'a>(&'a self, buf: &'a mut [u8]) -> Result<Recv, FabricError> {
        while self.stalled.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.inner.recv(buf).await
    }
    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        self.inner.try_recv(buf)
    }
    fn max_message(&self) -> usize {
        self.inner.max_message()
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn is_broken(&self) -> bool {
        self.inner.is_broken()
    }
}

/// A slow reader's long reply against a node with `ring_depth`-slot receive rings and a
/// server sending `window` messages unread at most: the other client's searches, and the
/// slow client's whole answer once it reads again. Returns (other client's searches done
/// while the slow reply was held back, the slow client's answer, reply messages still
/// queued at the end). Timing-free: the slow client stays stalled until the other client's
/// searches are all done, however long the machine takes.
const SLOW_N: u64 = 300;

fn slow_reader_run(ring_depth: usize, window: usize) -> (u64, Result<Vec<u64>, String>, u64) {
    // 512-byte messages carry 20 hits: the slow reply is 15 messages, twice a ring.
    let cfg = NodeConfig {
        ring_depth,
        max_msg: 512,
        ..NodeConfig::default()
    };
    let max = cfg.max_msg;
    let (server, seen) = Observed::new(CatfishServer::new(max).with_window(window));
    let (handled, queued) = (&seen.handled, &seen.queued);
    let node = SoftMemoryNode::create_with(cfg, Box::new(server)).unwrap();
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut c = block_on(CatfishClient::create(qp, 1)).unwrap();
    for i in 0..SLOW_N {
        block_on(c.insert(qp, data_rect(i), i)).unwrap();
    }
    let stalled = std::sync::atomic::AtomicBool::new(true);
    // The server's handled count before the slow client's search (u64::MAX: not yet).
    let before = AtomicU64::new(u64::MAX);
    let everything = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
    std::thread::scope(|s| {
        let slow = s.spawn(|| {
            let ep = node.endpoint().unwrap();
            let inner = ep.qp(0).unwrap();
            let mut slow = block_on(CatfishClient::open(inner)).unwrap();
            let sq = StallingQp {
                inner,
                stalled: &stalled,
            };
            before.store(handled.load(Ordering::Acquire), Ordering::Release);
            let mut hits = Vec::new();
            block_on(slow.search(&sq, everything, Mode::Messaging, &mut hits))
                .map(|_| ids_of(&hits))
                .map_err(|e| e.to_string())
        });
        // Wait until the server has handled the slow client's search (its first window is
        // then on its way into the client's ring). Bounded only so that a broken server
        // fails the test instead of hanging it.
        let t0 = std::time::Instant::now();
        loop {
            let b = before.load(Ordering::Acquire);
            if b != u64::MAX && handled.load(Ordering::Acquire) > b {
                break;
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(120),
                "the server never handled the slow client's search"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut served_while_held = 0;
        let mut worst = std::time::Duration::ZERO;
        let mut hits = Vec::new();
        for k in 0..40 {
            let q = data_rect(k * 7);
            hits.clear();
            let t = std::time::Instant::now();
            block_on(c.search(qp, q, Mode::Messaging, &mut hits)).unwrap();
            worst = worst.max(t.elapsed());
            assert_eq!(ids_of(&hits), oracle(0..SLOW_N, &q));
            if queued.load(Ordering::Acquire) > 0 {
                served_while_held += 1;
            }
        }
        // Informational only: on a loaded machine this is scheduling noise, not the server.
        println!("worst one-hit search while a client stalled: {worst:?}");
        stalled.store(false, Ordering::Release);
        let got = slow.join().unwrap();
        (served_while_held, got, queued.load(Ordering::Acquire))
    })
}

/// Issue 14.2: a client that stops reading in the middle of a long search reply does not
/// stall the server. Its reply (15 messages) is larger than its receive ring (8 slots);
/// before replies had flow control, the server's single event loop blocked in `send` until
/// the RNR retries ran out and then dropped the slow client. Now the server sends one window
/// (8 messages: what the ring holds) and keeps the rest until the client asks for it, so
/// another client's searches are all served while the slow client holds its window, and
/// the slow client still gets its whole answer when it reads again. No wall-clock bound:
/// the slow client stays stalled until the others are done (a server blocked on its ring
/// could only get free by dropping it), so the test means the same on a loaded machine.
#[test]
fn a_slow_reader_does_not_stall_the_others() {
    let (served, got, left) = slow_reader_run(8, DEFAULT_WINDOW);
    assert_eq!(
        got,
        Ok((0..SLOW_N).collect::<Vec<_>>()),
        "the slow client lost its answer"
    );
    assert_eq!(
        served, 40,
        "searches served while the slow client's reply was held back"
    );
    assert_eq!(
        left, 0,
        "reply messages left queued after the slow client read"
    );
}

/// A server whose window is larger than the clients' receive ring holds nothing back
/// itself; the soft fabric then keeps the replies the slow client has no receive for (as a
/// NIC retries a SEND that met no receive) and serves the others meanwhile. Before issue
/// 26 the server thread blocked on the slow client's full ring, gave up when the RNR
/// retries ran out, and dropped it (its answer lost): a slow reader is not a dead one.
#[test]
fn a_window_larger_than_the_ring_keeps_the_slow_reader() {
    let (served, got, _) = slow_reader_run(8, 64);
    assert_eq!(
        served, 0,
        "something was held back: the window covers the reply"
    );
    assert_eq!(
        got,
        Ok((0..SLOW_N).collect::<Vec<_>>()),
        "the slow client lost its answer"
    );
}

/// Issue 14.3: the tree grows past the old cap of 64 arenas, and when the memory node has
/// no chunk left an insert says so ([`CatfishError::NodeFull`]); the tree keeps serving.
#[test]
fn the_tree_grows_until_the_node_is_full_and_says_so() {
    let cfg = NodeConfig {
        region_len: 320 << 10,
        chunk_size: 4096,
        ..NodeConfig::default()
    };
    let max = cfg.max_msg;
    let node = SoftMemoryNode::create_with(cfg, Box::new(CatfishServer::new(max))).unwrap();
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut c = block_on(CatfishClient::create(qp, 1)).unwrap();
    c.set_transport(Transport::WriteImm);
    let mut n = 0u64;
    let err = loop {
        match block_on(c.insert(qp, data_rect(n), n)) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 1_000_000, "the node never filled");
    };
    assert!(matches!(err, CatfishError::NodeFull { .. }), "{err}");
    assert!(err.to_string().contains("full"), "{err}");
    let grows = c.stats().grows;
    assert!(grows > 64, "only {grows} arenas: the old cap was 64");
    // Full stays full, with the same error, and takes no chunk.
    let again = block_on(c.insert(qp, data_rect(n), n)).unwrap_err();
    assert!(matches!(again, CatfishError::NodeFull { .. }), "{again}");
    assert_eq!(c.stats().grows, grows);
    let everything = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
    for mode in [Mode::Messaging, Mode::Offload] {
        let mut hits = Vec::new();
        block_on(c.search(qp, everything, mode, &mut hits)).unwrap();
        assert_eq!(ids_of(&hits), (0..n).collect::<Vec<_>>(), "{mode:?}");
    }
    println!("{n} entries in {grows} grows of 4 KiB before the 320 KiB node was full");
}

/// Algorithm 1 with heartbeats on the soft fabric (a real clock): the server sends its load
/// to each connection as a heartbeat message, the client takes it at most once per `Inv`,
/// and offloads while it says busy.
#[test]
fn heartbeat_slots_drive_the_adaptive_search() {
    let probe = Arc::new(AtomicU32::new(100));
    let cfg = NodeConfig::default();
    let max = cfg.max_msg;
    let node = SoftMemoryNode::create_with(
        cfg,
        Box::new(CatfishServer::new(max).with_load_probe(probe.clone())),
    )
    .unwrap();
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut c = block_on(CatfishClient::create(qp, 1)).unwrap();
    for i in 0..300 {
        block_on(c.insert(qp, data_rect(i), i)).unwrap();
    }
    c.set_heartbeat_interval_ns(1);
    let mut hits = Vec::new();
    let mut run = |c: &mut CatfishClient, n: u64| {
        let mut offloaded = 0;
        for k in 0..n {
            let q = query_rect(k);
            hits.clear();
            if block_on(c.search_adaptive(&ep, q, &mut hits)).unwrap() == Mode::Offload {
                offloaded += 1;
            }
            assert_eq!(ids_of(&hits), oracle(0..300, &q));
            // Let the server loop write the next heartbeat.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        offloaded
    };
    assert_eq!(run(&mut c, 40), 0, "calm server: all messaging");
    probe.store(990, Ordering::Relaxed);
    let busy = run(&mut c, 100);
    assert!(busy >= 40, "busy server: {busy}/100 offloaded");
    probe.store(100, Ordering::Relaxed);
    // The rounds drawn while busy run out (up to r_busy * N of them), then messaging stays.
    let mut calm = 0;
    for _ in 0..100 {
        if run(&mut c, 20) == 0 {
            calm += 1;
            if calm == 2 {
                break;
            }
        }
    }
    assert_eq!(calm, 2, "the client never went back to messaging");
    assert!(c.stats().heartbeats >= 10, "{:?}", c.stats());
    println!(
        "heartbeats: {busy}/100 offloaded while busy; {:?}",
        c.stats()
    );
}

/// A queue pair whose clock jumps 10 s ahead once, in the middle of the first reply wait
/// after `armed`: as if the client's thread had been descheduled that long (a loaded
/// machine) while the server, which answers at once, was not.
struct AwayQp<'a> {
    inner: &'a SoftQp,
    jump: Cell<u64>,
    armed: Cell<bool>,
}

impl AwayQp<'_> {
    fn now(&self) -> u64 {
        self.inner.clock_ns().unwrap_or(0) + self.jump.get()
    }
}

impl QueuePair for AwayQp<'_> {
    fn peer(&self) -> u16 {
        self.inner.peer()
    }
    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        self.inner.post(ops).await
    }
    async fn recv<'a>(&'a self, buf: &'a mut [u8]) -> Result<Recv, FabricError> {
        // Two polls end pending, the second after the thread "was away".
        yield_now().await;
        if self.armed.replace(false) {
            self.jump.set(self.jump.get() + 10_000_000_000);
        }
        yield_now().await;
        self.inner.recv(buf).await
    }
    fn try_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        self.inner.try_recv(buf)
    }
    fn max_message(&self) -> usize {
        self.inner.max_message()
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn is_broken(&self) -> bool {
        self.inner.is_broken()
    }
    fn clock_ns(&self) -> Option<u64> {
        Some(self.now())
    }
    fn pause(&self, ns: u64) -> impl std::future::Future<Output = ()> {
        let until = self.now().saturating_add(ns);
        async move {
            loop {
                yield_now().await;
                if self.now() >= until {
                    return;
                }
            }
        }
    }
}

/// The reply deadline counts only time the client watched: a client whose thread was away
/// for 10 s (five times its 2 s deadline) in the middle of a wait still takes the reply a
/// live server sent, instead of calling the server hung (`NoReply`, the client closed).
#[test]
fn a_client_that_was_descheduled_does_not_call_a_live_server_hung() {
    let node = node(1 << 20);
    let _server = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut c = block_on(CatfishClient::create(qp, 1)).unwrap();
    block_on(c.insert(qp, data_rect(1), 1)).unwrap();
    let away = AwayQp {
        inner: qp,
        jump: Cell::new(0),
        armed: Cell::new(true),
    };
    block_on(c.insert(&away, data_rect(2), 2)).unwrap();
    assert!(!away.armed.get(), "the wait never saw the jump");
    let mut hits = Vec::new();
    let everything = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
    block_on(c.search(&away, everything, Mode::Messaging, &mut hits)).unwrap();
    assert_eq!(ids_of(&hits), vec![1, 2]);
}

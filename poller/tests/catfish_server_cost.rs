//! What remora's Catfish server code costs per request kind, on this host, beside what the
//! sim charges for it (issue 22: "calibrate the parameters against the real code").
//!
//! `host_search_and_insert_costs` builds each of the three trees (basic, R*, Hilbert) at
//! node size 30 with the server's own code over plain memory, as a server builds it (copy on
//! write: offloading clients may read it), then runs the paper's 90/10 request mix on it
//! through the server's code paths: a search is `SharedTree::search` (what the server runs for
//! a search message: lock-free, every node image checked), an insert the writers' lock and
//! `Tree::insert` (forced reinsertion and splits included). It prints the mean thread-CPU ns
//! of each (lowest of 10 rounds of 4,000 requests) and their ratio; the sim charges an
//! insert the difference on top of a search's cost (`repro/catfish/mixed.rs`), and
//! `the_sim_charges_an_insert_its_stated_cpu` checks that it does. The paper's setup (seeds/003 §5.2): rectangles with edges uniform in
//! (0, 0.0001] of the side, placed uniformly; searches and inserts with edges in (0, 0.00001],
//! searches placed uniformly, inserts by the paper's power law on (0.5, 1.0] reflected to a
//! random quadrant. Rectangles loaded: 200,000 (height 4 at node size 30);
//! `CATFISH_COST_RECTS=2000000` runs the paper's 2 million (height 5). Run it in release:
//! `cargo test --release -p remora-poller --test catfish_server_cost -- --nocapture`.
use remora_core::NodeId;
use remora_core::catfish::shared::SharedTree;
use remora_core::catfish::tree::Tree;
use remora_core::catfish::{Entry, Rect, TreeKind};
use remora_core::fabric::FabricError;
use remora_core::server::LocalRegion;
use std::cell::RefCell;

/// The bench's space: 2^20 units a side.
const SPACE: i64 = 1 << 20;
const FANOUT: usize = 30;

/// Plain bytes, one thread (no lock on the path: the host cost is the tree code's).
/// Counts its reads, and its writes and the bytes they store.
struct Plain(
    RefCell<Vec<u8>>,
    std::cell::Cell<u64>,
    std::cell::Cell<(u64, u64)>,
);

impl Plain {
    fn range(&self, off: u64, len: usize) -> Result<std::ops::Range<usize>, FabricError> {
        let l = self.0.borrow().len();
        let o = usize::try_from(off).map_err(|_| remora_core::server::out_of_range(0, off, len))?;
        if o.checked_add(len).is_none_or(|e| e > l) {
            return Err(remora_core::server::out_of_range(0, off, len));
        }
        Ok(o..o + len)
    }
}

impl LocalRegion for Plain {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.0.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        self.1.set(self.1.get() + 1);
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.0.borrow()[r]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let r = self.range(offset, data.len())?;
        let (n, b) = self.2.get();
        self.2.set((n + 1, b + data.len() as u64));
        self.0.borrow_mut()[r].copy_from_slice(data);
        Ok(())
    }
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// An edge uniform in (0, `bound`] of the side, in whole units.
fn edge(r: &mut Rng, bound: f64) -> i64 {
    (((1.0 - r.unit()) * bound) * SPACE as f64) as i64
}

fn placed(x: i64, y: i64, w: i64, h: i64) -> Rect {
    let c = |v: i64| v.clamp(0, SPACE) as i32;
    Rect::new(c(x), c(y), c(x + w), c(y + h)).unwrap()
}

/// A tree rectangle: edges in (0, 0.0001], placed uniformly.
fn object(r: &mut Rng) -> Rect {
    let (w, h) = (edge(r, 0.0001), edge(r, 0.0001));
    placed(
        r.below((SPACE - w + 1) as u64) as i64,
        r.below((SPACE - h + 1) as u64) as i64,
        w,
        h,
    )
}

/// A search window at scale 0.00001, placed uniformly.
fn window(r: &mut Rng) -> Rect {
    let (w, h) = (edge(r, 0.00001), edge(r, 0.00001));
    placed(
        r.below((SPACE - w + 1) as u64) as i64,
        r.below((SPACE - h + 1) as u64) as i64,
        w,
        h,
    )
}

/// An inserted rectangle: scale 0.00001, corner by the paper's power law (f(t) ∝ t^-0.99 on
/// (0.5, 1.0]) reflected to a random quadrant.
fn inserted(r: &mut Rng) -> Rect {
    let (w, h) = (edge(r, 0.00001), edge(r, 0.00001));
    let mut at = |side: i64| {
        const E: f64 = 1.0 - 0.99;
        let (a, b) = (0.5f64.powf(E), 1.0f64.powf(E));
        let v = (a + r.unit() * (b - a)).powf(1.0 / E).clamp(0.5, 1.0);
        let v = if r.below(2) == 0 { v } else { 1.0 - v };
        ((v * SPACE as f64) as i64).min(SPACE - side)
    };
    let (x, y) = (at(w), at(h));
    placed(x, y, w, h)
}

/// A served tree of `n` rectangles of `kind` behind the server threads' shared handle.
fn served(kind: TreeKind, n: u64) -> (Plain, SharedTree) {
    // Served trees hold nodes in their grace period too; room for the measured inserts.
    let bytes = (n as usize * 24 * 8).max(8 << 20) + (16 << 20);
    let region = Plain(
        RefCell::new(vec![0u8; bytes]),
        Default::default(),
        Default::default(),
    );
    let mut t = Tree::format_kind(&region, 4096, bytes as u64 - 8192, FANOUT, kind).unwrap();
    t.set_exclusive(false);
    let mut r = Rng(1);
    for i in 0..n {
        t.insert(&region, object(&mut r), i).unwrap();
    }
    let shared = SharedTree::default();
    shared.lock().tree = Some(t);
    (region, shared)
}

/// Host cost of one kind of server work.
#[derive(Debug, Clone, Copy)]
struct Cost {
    search_ns: f64,
    insert_ns: f64,
    /// Region reads per search (the epoch and root words, then one per node).
    reads: f64,
    /// Per insert: region writes (node images, superblock words), the bytes they store,
    /// and nodes the tree carved (`Tree::nodes`: fresh memory, past the retired nodes it
    /// reuses, so about one per split; a forced reinsert carves none).
    writes: f64,
    written: f64,
    new_nodes: f64,
}

/// This thread's CPU time in ns (time the machine's other load takes is not counted).
fn cpu_ns() -> u128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(r, 0, "clock_gettime");
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

/// Runs `rounds` of the 90/10 mix (`ops` requests each: nine searches, timed together, then
/// one insert) on the served tree; the mean thread-CPU ns of a search and of an insert, the
/// lowest round's of each (least disturbed by the machine's other load, which also evicts
/// the caches).
fn measure(region: &Plain, shared: &SharedTree, ops: u64, rounds: usize, first_id: u64) -> Cost {
    let mut r = Rng(7);
    let (mut hits, mut stack) = (Vec::<Entry>::new(), Vec::new());
    let mut id = first_id;
    let mut best = Cost {
        search_ns: f64::MAX,
        insert_ns: f64::MAX,
        reads: 0.0,
        writes: 0.0,
        written: 0.0,
        new_nodes: 0.0,
    };
    let nodes = || shared.lock().tree.as_ref().map_or(0, |t| t.nodes());
    for _ in 0..rounds {
        let (mut s_ns, mut s_n, mut i_ns, mut i_n) = (0u128, 0u64, 0u128, 0u64);
        let reads0 = region.1.get();
        let (w0, nodes0) = (region.2.get(), nodes());
        for _ in 0..ops / 10 {
            let qs: Vec<Rect> = (0..9).map(|_| window(&mut r)).collect();
            let rect = inserted(&mut r);
            let t0 = cpu_ns();
            for q in &qs {
                hits.clear();
                shared.search(region, q, &mut hits, &mut stack).unwrap();
            }
            let t1 = cpu_ns();
            let reads1 = region.1.get();
            let mut w = shared.lock();
            w.tree.as_mut().unwrap().insert(region, rect, id).unwrap();
            drop(w);
            let t2 = cpu_ns();
            // Reads by inserts are not a search's.
            region.1.set(reads1);
            s_ns += t1 - t0;
            s_n += 9;
            i_ns += t2 - t1;
            i_n += 1;
            id += 1;
        }
        best.reads = (region.1.get() - reads0) as f64 / s_n as f64;
        let w1 = region.2.get();
        best.writes = (w1.0 - w0.0) as f64 / i_n as f64;
        best.written = (w1.1 - w0.1) as f64 / i_n as f64;
        best.new_nodes = (nodes() - nodes0) as f64 / i_n as f64;
        best.search_ns = best.search_ns.min(s_ns as f64 / s_n as f64);
        best.insert_ns = best.insert_ns.min(i_ns as f64 / i_n as f64);
    }
    best
}

fn rects() -> u64 {
    std::env::var("CATFISH_COST_RECTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000)
}

#[test]
fn host_search_and_insert_costs() {
    let n = if cfg!(debug_assertions) {
        5_000
    } else {
        rects()
    };
    println!("host cost of Catfish's server code, {n} rectangles, node size {FANOUT}, 90/10 mix:");
    println!(
        "{:>8} {:>12} {:>12} {:>14} {:>16} {:>14} {:>14} {:>14}",
        "tree",
        "search ns",
        "insert ns",
        "insert/search",
        "reads/search",
        "writes/insert",
        "bytes/insert",
        "nodes/insert"
    );
    for kind in [TreeKind::Guttman, TreeKind::RStar, TreeKind::Hilbert] {
        let (region, shared) = served(kind, n);
        let c = measure(&region, &shared, 4_000, 10, n);
        println!(
            "{:>8} {:>12.0} {:>12.0} {:>14.2} {:>16.2} {:>14.2} {:>14.0} {:>14.3}",
            kind.name(),
            c.search_ns,
            c.insert_ns,
            c.insert_ns / c.search_ns,
            c.reads,
            c.writes,
            c.written,
            c.new_nodes
        );
        // An insert descends the tree as a search does, then writes: never cheaper.
        assert!(c.insert_ns > 0.0 && c.search_ns > 0.0, "{kind:?}: {c:?}");
        // An insert stores at least the leaf it adds to.
        assert!(c.writes >= 1.0 && c.written > 0.0, "{kind:?}: {c:?}");
    }
}

/// Server CPU (virtual ns, the sim's accounting) of each search and each insert one client
/// sends, through a server stating `insert_cpu_ns` per insert, on an R*-tree of 300
/// rectangles. Returns (mean search, mean insert).
fn sim_costs(insert_cpu_ns: u64) -> (f64, f64) {
    use remora_core::catfish::{CatfishClient, CatfishServer, Mode};
    use remora_core::fabric::{Endpoint, QueuePair};
    use remora_poller::sim::{Sim, SimConfig};
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: 16 << 20,
        chunk_size: 128 << 10,
        ..SimConfig::default()
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    let server = CatfishServer::new(max).with_insert_cpu_ns(insert_cpu_ns);
    sim.set_handler(0, Box::new(server)).unwrap();
    let ctx = sim.client(0).unwrap();
    let out = std::rc::Rc::new(std::cell::Cell::new((0.0, 0.0)));
    let o = out.clone();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut c = CatfishClient::create_tree(qp, 1, FANOUT, TreeKind::RStar)
            .await
            .unwrap();
        let mut r = Rng(3);
        for i in 0..300 {
            c.insert(qp, object(&mut r), i).await.unwrap();
        }
        let (mut s, mut i_) = (0u64, 0u64);
        let mut hits = Vec::new();
        const N: u64 = 50;
        for k in 0..N {
            let b0 = ctx.server_busy_ns();
            hits.clear();
            c.search(qp, window(&mut r), Mode::Messaging, &mut hits)
                .await
                .unwrap();
            let b1 = ctx.server_busy_ns();
            c.insert(qp, inserted(&mut r), 1000 + k).await.unwrap();
            s += b1 - b0;
            i_ += ctx.server_busy_ns() - b1;
        }
        o.set((s as f64 / N as f64, i_ as f64 / N as f64));
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    out.get()
}

/// The sim charges an insert the CPU its server states beyond a search
/// (`CatfishServer::with_insert_cpu_ns`, `LocalRegion::charge_cpu_ns`): without the
/// statement an insert costs about what a search does (the fixed `server_handler_ns` and its
/// memory), with it that much more, whatever the tree's memory costs.
#[test]
fn the_sim_charges_an_insert_its_stated_cpu() {
    const EXTRA: u64 = 59_000;
    let (s0, i0) = sim_costs(0);
    let (s1, i1) = sim_costs(EXTRA);
    println!(
        "sim server CPU, ns: search {s0:.0}, insert {i0:.0} (no statement); search {s1:.0}, \
         insert {i1:.0} (insert states {EXTRA} ns)"
    );
    // Without the statement the two differ by their memory only (a few µs at most).
    assert!((i0 - s0).abs() < 5_000.0, "search {s0}, insert {i0}");
    // Searches are untouched; each insert costs the stated time more (the same run, so the
    // same memory, but for the virtual times the extra CPU shifts).
    assert!((s1 - s0).abs() < 1_000.0, "search {s0} vs {s1}");
    let extra = i1 - i0;
    assert!(
        (extra - EXTRA as f64).abs() < 1_000.0,
        "insert {i0} -> {i1}: {extra} ns more, stated {EXTRA}"
    );
}

/// Under model `server_tree_lock = lock`, on a server of 3 threads whose inserts state 1 ms
/// of CPU: an insert from one client, then, 20 µs later, a search
/// and a second insert from two more clients (each connection on its own server thread).
/// Returns the search's and the second insert's latencies (virtual ns).
fn behind_an_insert(lock: u32) -> (u64, u64) {
    use remora_core::catfish::{CatfishClient, CatfishServer, Mode};
    use remora_core::fabric::{Endpoint, QueuePair};
    use remora_poller::sim::{Model, Sim, SimConfig};
    let mut model = Model::default();
    model.set("server_threads", "3").unwrap();
    model.set("server_tree_lock", &lock.to_string()).unwrap();
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        memory_nodes: 1,
        region_len: 16 << 20,
        chunk_size: 128 << 10,
        model,
        ..SimConfig::default()
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    let server = CatfishServer::new(max).with_insert_cpu_ns(1_000_000);
    sim.set_handler(0, Box::new(server)).unwrap();
    let setup = sim.client(0).unwrap();
    sim.spawn_with(&setup, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut c = CatfishClient::create_tree(qp, 1, FANOUT, TreeKind::RStar)
            .await
            .unwrap();
        let mut r = Rng(5);
        for i in 0..20 {
            c.insert(qp, object(&mut r), i).await.unwrap();
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    // Well after the setup and the clients' opening.
    let start = sim.now_ns() + 1_000_000;
    let out = std::rc::Rc::new(std::cell::Cell::new((0u64, 0u64)));
    // Connections 1, 2, 3: server threads 1, 2, 0 (connect order modulo the threads).
    for role in 0..3u64 {
        let ctx = sim.client(0).unwrap();
        let o = out.clone();
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::open(qp).await.unwrap();
            let at = start + if role == 0 { 0 } else { 20_000 };
            ctx.ep().pause(at - ctx.ep().now_ns()).await;
            let t0 = ctx.ep().now_ns();
            let mut r = Rng(11 + role);
            match role {
                0 => c.insert(qp, inserted(&mut r), 100).await.unwrap(),
                1 => {
                    let mut hits = Vec::new();
                    c.search(qp, window(&mut r), Mode::Messaging, &mut hits)
                        .await
                        .unwrap();
                    o.set((ctx.ep().now_ns() - t0, o.get().1));
                }
                _ => {
                    c.insert(qp, inserted(&mut r), 101).await.unwrap();
                    o.set((o.get().0, ctx.ep().now_ns() - t0));
                }
            }
        });
    }
    assert_eq!(sim.run().unfinished, 0);
    out.get()
}

/// The sim serialises the server threads under the tree's lock (model `server_tree_lock`):
/// with no lock a search and an insert sent while another insert is being served go ahead
/// on their own threads; with the writers' lock (remora's server: inserts under a spin lock,
/// searches lock-free) the insert waits for the one in progress and the search does not;
/// with the paper's reader-writer lock (seeds/003 §3.2) both wait.
#[test]
fn searches_and_inserts_queue_behind_an_insert_holding_the_lock() {
    let (s0, i0) = behind_an_insert(0);
    let (s1, i1) = behind_an_insert(1);
    let (s2, i2) = behind_an_insert(2);
    println!(
        "latency ns (search, second insert): no lock ({s0}, {i0}); writers ({s1}, {i1}); \
         reader-writer ({s2}, {i2})"
    );
    // The first insert holds the lock for its stated 1 ms from 1 ms; the others arrive 20 µs
    // later.
    assert!(s0 < 200_000 && i0 < 1_200_000, "no lock: {s0}, {i0}");
    assert!(s1 < 200_000, "writers' lock: the search waited ({s1})");
    assert!(
        i1 > 1_900_000,
        "writers' lock: the insert did not wait ({i1})"
    );
    assert!(
        s2 > 900_000,
        "reader-writer lock: the search did not wait ({s2})"
    );
    assert!(
        i2 > 1_900_000,
        "reader-writer lock: the insert did not wait ({i2})"
    );
}

//! Erda zeroes a free log region ahead of its chaining, a bounded share per message
//! (`core/src/erda/clean.rs`, `zero_ahead`): no message does more than a bounded amount of
//! server work while cleanings chain region after region, and a region half-zeroed at a
//! crash is zeroed again before it is chained (no stale whole object of its previous life is
//! left in it). Driven on the server alone, as `erda_clean.rs` does, and on the sim (server
//! CPU per message on a persistent node).
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::fabric::{FabricError, Recv, RecvKind};
use remora_core::index::KvIndex;
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::erda::{
    Bucket, HeadState, Reply, ReqOp, Request, Status, Superblock, decode_object, durable_mark,
    encode_object, hello, object_len,
};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

#[path = "common/mem_region.rs"]
mod mem_region;
use mem_region::{MemRegion, Observer};

/// The most bytes one message may store or persist: 64 KiB of zeroing, and room for the
/// request's own stores and a cleaner step's copies (a few objects).
const BOUND: u64 = 80 << 10;

/// A memory node's region that counts the bytes its CPU stores and persists, and keeps the
/// image at chosen zeroing persists (a crash right after them).
type Mem = MemRegion<Counts>;

/// What [`Mem`] counts and keeps.
#[derive(Default)]
struct Counts {
    stored: AtomicU64,
    persisted: AtomicU64,
    /// Persists of at least a page (zeroing) so far, and the ones to keep an image of.
    zero_persists: AtomicU64,
    keep: Mutex<Vec<u64>>,
    images: Mutex<Vec<Vec<u8>>>,
}

impl Counts {
    /// Bytes stored and persisted since the last call.
    fn take(&self) -> (u64, u64) {
        (
            self.stored.swap(0, Ordering::Relaxed),
            self.persisted.swap(0, Ordering::Relaxed),
        )
    }
}

impl Observer for Counts {
    fn stored(&self, _mem: &[u8], _offset: usize, len: usize) {
        self.stored.fetch_add(len as u64, Ordering::Relaxed);
    }
    fn persisted(&self, mem: &[u8], _offset: u64, len: usize) {
        self.persisted.fetch_add(len as u64, Ordering::Relaxed);
        if len >= 4096 {
            let n = self.zero_persists.fetch_add(1, Ordering::Relaxed);
            if self.keep.lock().unwrap().contains(&n) {
                self.images.lock().unwrap().push(mem.to_vec());
            }
        }
    }
}

/// One head of four 256 KiB regions (a region is four times what one message may zero) in
/// 64 KiB segments; a cleaning starts after half a region of appends.
fn cfg() -> ErdaConfig {
    ErdaConfig {
        heads: 1,
        buckets: 1024,
        segment_bytes: 64 << 10,
        head_bytes: 4 * (256 << 10),
        regions: 4,
        clean_permille: 500,
        ..ErdaConfig::small()
    }
}

/// Drives the server directly through mailbox `id` of connection 1; the client's object
/// WRITE and durable mark done by hand (as `erda_clean.rs`).
struct Client {
    id: u32,
    seq: u32,
    /// The most bytes stored / persisted by one message so far, and `Busy` answers.
    max_stored: u64,
    max_persisted: u64,
    busy: u64,
}

impl Client {
    fn open(srv: &mut ErdaServer, mem: &Mem) -> Client {
        let mut r = Replies::new();
        let recv = Recv {
            kind: RecvKind::Send,
            len: 12,
            imm: None,
        };
        srv.on_message(mem, 1, recv, &hello(1), &mut r).unwrap();
        let rep = Reply::decode(r.iter().next().unwrap()).unwrap();
        assert_eq!(rep.status, Status::Welcome);
        Client {
            id: rep.seq,
            seq: 0,
            max_stored: 0,
            max_persisted: 0,
            busy: 0,
        }
    }
    /// An upsert, asked again while the server answers `Busy` (its next region is still
    /// being zeroed); returns the grant.
    fn upsert(&mut self, srv: &mut ErdaServer, mem: &Mem, key: &[u8], value: &[u8]) -> Reply {
        for _ in 0..1000 {
            self.seq += 1;
            let req = Request::new(ReqOp::Upsert, self.seq, key, value.len())
                .unwrap()
                .encode();
            let sb = srv.superblock().unwrap().1;
            mem.write(sb.mailbox(self.id), &req).unwrap();
            mem.obs.take();
            let mut r = Replies::new();
            let recv = Recv {
                kind: RecvKind::WriteImm,
                len: 32,
                imm: Some(self.id),
            };
            srv.on_message(mem, 1, recv, &[], &mut r).unwrap();
            let (stored, persisted) = mem.obs.take();
            self.max_stored = self.max_stored.max(stored);
            self.max_persisted = self.max_persisted.max(persisted);
            let rep = Reply::decode(r.iter().next().unwrap()).unwrap();
            match rep.status {
                Status::Busy => {
                    assert_eq!(rep.arg, 0, "a Busy naming a grant: none is in flight");
                    self.busy += 1;
                }
                Status::Granted => {
                    let mut obj = vec![0u8; object_len(key.len(), value.len())];
                    encode_object(&mut obj, key, value, false).unwrap();
                    let off = sb.object_off(rep.head, rep.arg as u32).unwrap();
                    mem.write(off, &obj).unwrap();
                    let mark = durable_mark(rep.arg as u32).to_le_bytes();
                    mem.write(off + obj.len() as u64, &mark).unwrap();
                    return rep;
                }
                s => panic!("upsert answered {s:?}"),
            }
        }
        panic!("the server kept answering Busy");
    }
}

fn head_state(mem: &Mem, sb: &Superblock) -> HeadState {
    HeadState::decode(mem.load_u64(sb.head_state_off(0)).unwrap()).unwrap()
}

/// The bucket holding `key`.
fn bucket_of(mem: &Mem, sb: &Superblock, key: &[u8]) -> Option<Bucket> {
    let home = sb.home(key);
    (0..sb.neighborhood as u64).find_map(|j| {
        let mut b = [0u8; 32];
        mem.read(sb.bucket_off(home + j), &mut b).unwrap();
        Bucket::decode(&b).ok().filter(|b| b.holds(key))
    })
}

/// What a one-sided reader of `key` takes (newest whole object, else the previous one).
fn read_back(mem: &Mem, sb: &Superblock, key: &[u8]) -> Option<Vec<u8>> {
    let b = bucket_of(mem, sb, key)?;
    for units in [b.meta().new_off(), b.meta().old_off()] {
        if units == 0 {
            return None;
        }
        let room = sb.head_remaining(units).min(4200) as usize;
        let mut obj = vec![0u8; room];
        mem.read(sb.object_off(b.head(), units).unwrap(), &mut obj)
            .unwrap();
        if let Ok(o) = decode_object(&obj) {
            return (!o.delete).then(|| o.value.to_vec());
        }
    }
    None
}

/// Whole objects in ring region `r` of head 0 that no metadata word names: stale versions
/// of a previous life of the region.
fn unnamed_objects(mem: &Mem, sb: &Superblock, region_bytes: u64, r: u8) -> Vec<u32> {
    let start = (r as u64 * region_bytes).max(64);
    let end = (r as u64 + 1) * region_bytes;
    let mut buf = vec![0u8; (end - start) as usize];
    mem.read(sb.object_off(0, (start / 8) as u32).unwrap(), &mut buf)
        .unwrap();
    let mut stale = Vec::new();
    let mut p = 0usize;
    while p + 8 <= buf.len() {
        let units = ((start + p as u64) / 8) as u32;
        match decode_object(&buf[p..]) {
            Ok(o) => {
                let named = bucket_of(mem, sb, o.key)
                    .is_some_and(|b| b.meta().new_off() == units || b.meta().old_off() == units);
                if !named {
                    stale.push(units);
                }
                p += object_len(o.key.len(), o.value.len());
            }
            Err(_) => p += 8,
        }
    }
    stale
}

/// 40 keys written over and over, about 12 times the whole log, driven by messages only (as
/// on the sim, which calls no `on_idle`): cleanings start and end and regions are chained
/// again and again, yet no message stores or persists more than `BOUND` (a synchronous
/// zeroing of a chained region stored 256 KiB in one message), and every value is right.
#[test]
fn no_message_zeroes_a_whole_region_while_cleanings_chain_regions() {
    let mem = Mem::new(4 << 20);
    let mut srv = ErdaServer::new(cfg());
    let mut c = Client::open(&mut srv, &mem);
    let sb = srv.superblock().unwrap().1;
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for i in 0..36_000u64 {
        let key = format!("key{}", i % 40).into_bytes();
        let value = vec![(i % 251) as u8; 80 + (i % 7) as usize * 20];
        c.upsert(&mut srv, &mem, &key, &value);
        want.insert(key, value);
    }
    let s = srv.stats();
    println!(
        "max per message: {} B stored, {} B persisted; {} Busy; {s:?}",
        c.max_stored, c.max_persisted, c.busy
    );
    assert!(
        s.chained + s.cleanings_started >= 12 && s.cleanings_done >= 8,
        "regions chained again and again: {s:?}"
    );
    assert!(
        s.zeroed_bytes >= 12 * (256 << 10),
        "every chained region zeroed: {s:?}"
    );
    assert!(
        c.max_stored <= BOUND && c.max_persisted <= BOUND,
        "one message stored {} B and persisted {} B (bound {BOUND})",
        c.max_stored,
        c.max_persisted
    );
    for (k, v) in &want {
        assert_eq!(read_back(&mem, &sb, k).as_ref(), Some(v));
    }
}

/// Crash images taken while a free region that holds stale versions is being zeroed (after
/// one zeroing persist of many): the restarted server does not chain that region half
/// zeroed: once it is chained, it holds no whole object that no word names.
#[test]
fn a_region_half_zeroed_at_a_crash_is_zeroed_again_before_it_is_chained() {
    let mem = Mem::new(4 << 20);
    let mut srv = ErdaServer::new(cfg());
    let mut c = Client::open(&mut srv, &mem);
    let sb = srv.superblock().unwrap().1;
    let region_bytes = sb.head_bytes / 4;
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut i = 0u64;
    let mut put = |srv: &mut ErdaServer, c: &mut Client, mem: &Mem| {
        let key = format!("key{}", i % 40).into_bytes();
        let value = vec![(i % 251) as u8; 200];
        c.upsert(srv, mem, &key, &value);
        want.insert(key, value);
        i += 1;
    };
    // Until every region has held objects and two cleanings emptied regions: the next free
    // region is then full of stale versions.
    while srv.stats().cleanings_done < 2 {
        put(&mut srv, &mut c, &mem);
    }
    let first = srv.stats().zeroed_bytes;
    // Images at the 2nd and 9th zeroing persists from here (a 256 KiB region takes dozens).
    let base = mem.obs.zero_persists.load(Ordering::Relaxed);
    *mem.obs.keep.lock().unwrap() = vec![base + 1, base + 8];
    while mem.obs.images.lock().unwrap().len() < 2 {
        put(&mut srv, &mut c, &mem);
    }
    assert!(srv.stats().zeroed_bytes - first < region_bytes, "partway");
    let images = std::mem::take(&mut *mem.obs.images.lock().unwrap());
    for (n, img) in images.into_iter().enumerate() {
        let m = Mem::from_image(img);
        let mut srv2 = ErdaServer::new(cfg());
        srv2.open(&m).unwrap();
        let mut c2 = Client::open(&mut srv2, &m);
        let mut chained = 0;
        for j in 0..20_000u64 {
            let before = head_state(&m, &sb);
            let key = format!("key{}", j % 40).into_bytes();
            c2.upsert(&mut srv2, &m, &key, &[7u8; 200]);
            let after = head_state(&m, &sb);
            if after.len > before.len {
                // A region chained by this message (by a full region or a cleaning start).
                let r = after.nth(after.len - 1);
                let stale = unnamed_objects(&m, &sb, region_bytes, r);
                assert!(
                    stale.is_empty(),
                    "image {n}: region {r} chained with stale objects at {stale:?}"
                );
                chained += 1;
                if chained == 3 {
                    break;
                }
            }
        }
        assert_eq!(chained, 3, "image {n}: {:?}", srv2.stats());
    }
}

/// The server on a sim memory node, measuring the node's CPU per message: with one handler
/// thread, the busy time between two handler calls is what the earlier message cost (its
/// handler, persists and reply). The first message, which formats the store (its whole
/// table), is not counted.
struct Meter<'a> {
    srv: &'a RefCell<ErdaServer>,
    /// The busy time when the previous message began, if the store was open by then.
    last_busy: Option<u64>,
    max_ns: &'a Cell<u64>,
}

impl Handler for Meter<'_> {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        if let Some(c) = region.cpu_clock() {
            if let Some(b) = self.last_busy {
                self.max_ns.set(self.max_ns.get().max(c.busy_ns - b));
            }
            let open = self.srv.borrow().superblock().is_some();
            self.last_busy = open.then_some(c.busy_ns);
        }
        self.srv
            .borrow_mut()
            .on_message(region, conn, recv, msg, replies)
    }
    fn on_disconnect(&mut self, region: &dyn LocalRegion, conn: usize) {
        self.srv.borrow_mut().on_disconnect(region, conn)
    }
    fn service(&self) -> &'static str {
        "erda"
    }
}

/// 8 sim clients update 64 keys over and over on a persistent node (2 heads of four 256
/// KiB regions): cleanings chain regions during the run, and no message costs the server
/// more than ~150 µs of CPU (64 KiB of zeroing is 1024 lines at the sim's 90 ns, ~92 µs; a
/// whole region zeroed in one message cost ~370 µs).
#[test]
fn on_the_sim_no_message_holds_the_server_for_a_whole_region() {
    let srv = RefCell::new(ErdaServer::new(ErdaConfig {
        heads: 2,
        buckets: 4096,
        ..cfg()
    }));
    let max_ns = Cell::new(0u64);
    let errors = RefCell::new(Vec::<String>::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 2,
        memory_nodes: 1,
        region_len: 32 << 20,
        persistent: true,
        seed: 7,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(
        0,
        Box::new(Meter {
            srv: &srv,
            last_busy: None,
            max_ns: &max_ns,
        }),
    )
    .unwrap();
    for c in 0..8u64 {
        let ctx = sim.client(c as usize % 2).unwrap();
        let errors = &errors;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let e = match Erda::open(ctx.ep(), ErdaClientConfig::default()).await {
                Ok(e) => e,
                Err(err) => return errors.borrow_mut().push(format!("open: {err}")),
            };
            for i in 0..1200u64 {
                let key = format!("k{c}-{}", i % 8);
                if let Err(err) = e.upsert(key.as_bytes(), &[i as u8; 200]).await {
                    return errors.borrow_mut().push(format!("client {c}: {err}"));
                }
            }
        });
    }
    let r = sim.run();
    assert!(errors.borrow().is_empty(), "{:?}", errors.borrow());
    assert_eq!(r.unfinished, 0);
    drop(sim);
    let s = srv.borrow().stats();
    println!("most server CPU in one message: {} ns; {s:?}", max_ns.get());
    assert!(s.cleanings_done >= 4, "cleanings chain regions: {s:?}");
    assert!(
        max_ns.get() < 150_000,
        "one message held the server for {} ns",
        max_ns.get()
    );
}

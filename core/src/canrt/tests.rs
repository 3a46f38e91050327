//! Unit tests over an in-memory fabric whose memory node runs the metadata applier inline
//! (every WRITE_WITH_IMM and SEND is handled before the post completes), and a persistence
//! model that keeps a durable image next to the current one: crash images at every
//! persistence point, with and without random early evictions of dirty cache lines.
//! The threaded and simulated runs live in poller/tests/canrt_*.rs.
extern crate std;
use super::build::{Plan, plan};
use super::view::{Found, NodeView};
use super::*;
use crate::block_on::block_on;
use crate::counters::Counters;
use crate::fabric::{Endpoint, Op, QueuePair, Recv, RecvKind, SegmentOrder, Verb};
use crate::index::KvIndex;
use crate::server::{Handler, LocalRegion, Replies};
use crate::testing::OneNode;
use core::cell::{Cell, RefCell};
use proptest::prelude::*;
use remora_layouts::canrt::{ROOT_SLOT, TreeHeader};
use remora_layouts::region::{RegionHeader, root_offset};
use std::boxed::Box;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::string::ToString;
use std::vec;
use std::vec::Vec;

const LINE: usize = 64;

type Hook = Box<dyn FnMut(Vec<u8>, Vec<u8>, bool)>;

/// Persistent memory model: stores hit `cur`; `persist` copies whole cache lines to
/// `durable`. At each persistence point the hook gets two crash images: the durable one,
/// and the durable one plus a random subset of dirty lines (evicted early).
struct Pm {
    cur: RefCell<Vec<u8>>,
    durable: RefCell<Vec<u8>>,
    dirty: RefCell<BTreeSet<usize>>,
    hook: RefCell<Option<Hook>>,
    rng: Cell<u64>,
    /// The persist in progress is the NIC's: a WRITE_WITH_IMM reached the persistence
    /// domain (ADR, as the paper's platform) before the applier ran.
    nic: Cell<bool>,
}

impl Pm {
    fn new(len: usize, chunk: u64) -> Pm {
        let mut img = vec![0u8; len];
        img[..128].copy_from_slice(&RegionHeader::new(len as u64, chunk, 0).unwrap().encode());
        Pm::from_image(img)
    }
    fn from_image(img: Vec<u8>) -> Pm {
        Pm {
            durable: RefCell::new(img.clone()),
            cur: RefCell::new(img),
            dirty: RefCell::new(BTreeSet::new()),
            hook: RefCell::new(None),
            rng: Cell::new(0x9E37_79B9_7F4A_7C15),
            nic: Cell::new(false),
        }
    }
    fn range(&self, off: u64, len: usize) -> Result<core::ops::Range<usize>, FabricError> {
        let end = off
            .checked_add(len as u64)
            .filter(|&e| e <= self.cur.borrow().len() as u64);
        match end {
            Some(e) => Ok(off as usize..e as usize),
            None => Err(crate::server::out_of_range(0, off, len)),
        }
    }
    fn touch(&self, r: core::ops::Range<usize>) {
        let mut d = self.dirty.borrow_mut();
        for l in r.start / LINE..r.end.div_ceil(LINE) {
            d.insert(l);
        }
    }
    fn next_rand(&self) -> u64 {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x
    }
}

impl LocalRegion for Pm {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.cur.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.cur.borrow()[r]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let r = self.range(offset, data.len())?;
        self.cur.borrow_mut()[r.clone()].copy_from_slice(data);
        self.touch(r);
        Ok(())
    }
    fn persist(&self, offset: u64, len: usize) {
        let Ok(r) = self.range(offset, len) else {
            return;
        };
        {
            let cur = self.cur.borrow();
            let mut dur = self.durable.borrow_mut();
            let mut dirty = self.dirty.borrow_mut();
            for l in r.start / LINE..r.end.div_ceil(LINE) {
                let lr = l * LINE..((l + 1) * LINE).min(cur.len());
                dur[lr.clone()].copy_from_slice(&cur[lr]);
                dirty.remove(&l);
            }
        }
        let hook = self.hook.borrow_mut().take();
        if let Some(mut h) = hook {
            let durable = self.durable.borrow().clone();
            let mut evicted = durable.clone();
            {
                let cur = self.cur.borrow();
                for &l in self.dirty.borrow().iter() {
                    if self.next_rand() & 1 == 1 {
                        let lr = l * LINE..((l + 1) * LINE).min(cur.len());
                        evicted[lr.clone()].copy_from_slice(&cur[lr]);
                    }
                }
            }
            h(durable, evicted, self.nic.get());
            *self.hook.borrow_mut() = Some(h);
        }
    }
}

/// A memory node: the persistence model and the applier, run inline.
struct MemNode {
    pm: Pm,
    server: RefCell<CanrtServer>,
    /// Flip a bit of the next appended item before the applier sees it (a torn append).
    corrupt_next: Cell<bool>,
    /// The next READ of this many bytes is split (see [`SplitRead`]).
    split_next_read: RefCell<Option<SplitRead>>,
    /// Runs just before the next WRITE_WITH_IMM lands (a holder stalled before its append).
    before_next_append: RefCell<Option<Box<dyn FnOnce()>>>,
}

/// A READ whose 64-byte segments observe memory one at a time, in `order` (seeded by
/// `seed`), with `event` run after `pick % segments` of them: another client's operations
/// landing in the middle of the READ, as on a NIC that splits a READ into PCIe reads
/// completing in any order.
struct SplitRead {
    len: usize,
    order: SegmentOrder,
    seed: u64,
    pick: u64,
    event: Box<dyn FnOnce()>,
}

impl MemNode {
    fn new(pm: Pm) -> Rc<MemNode> {
        Rc::new(MemNode {
            pm,
            server: RefCell::new(CanrtServer::new()),
            corrupt_next: Cell::new(false),
            split_next_read: RefCell::new(None),
            before_next_append: RefCell::new(None),
        })
    }
    fn deliver(&self, kind: RecvKind, imm: Option<u32>, msg: &[u8]) -> Result<(), FabricError> {
        let recv = Recv {
            kind,
            len: msg.len() as u32,
            imm,
        };
        let mut replies = Replies::new();
        self.server
            .borrow_mut()
            .on_message(&self.pm, 0, recv, msg, &mut replies)
    }
}

struct MemQp {
    node: Rc<MemNode>,
    counters: Counters,
}

impl QueuePair for MemQp {
    crate::post_only_qp!();
    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        self.counters.count_post(ops);
        self.counters.count_round_trip();
        let pm = &self.node.pm;
        for op in ops.iter_mut() {
            match op {
                Op::Read { remote, local } => {
                    let split = self
                        .node
                        .split_next_read
                        .borrow_mut()
                        .take_if(|r| r.len == local.len());
                    match split {
                        None => pm.read(remote.offset(), local)?,
                        Some(r) => {
                            let mut segs = Vec::new();
                            let mut rng = r.seed;
                            r.order.for_each_segment(
                                remote.offset(),
                                local.len(),
                                false,
                                &mut rng,
                                |s, e| segs.push((s, e)),
                            );
                            let after = (r.pick % segs.len() as u64) as usize;
                            let mut event = Some(r.event);
                            for (i, &(at, end)) in segs.iter().enumerate() {
                                if i == after
                                    && let Some(e) = event.take()
                                {
                                    e();
                                }
                                pm.read(remote.offset() + at as u64, &mut local[at..end])?;
                            }
                        }
                    }
                }
                Op::Write { remote, local } => pm.write(remote.offset(), local)?,
                Op::WriteImm { remote, local, imm } => {
                    let event = self.node.before_next_append.borrow_mut().take();
                    if let Some(e) = event {
                        e();
                    }
                    pm.write(remote.offset(), local)?;
                    pm.nic.set(true);
                    pm.persist(remote.offset(), local.len());
                    pm.nic.set(false);
                    if self.node.corrupt_next.replace(false) {
                        let b = pm.load_u64(remote.offset())?;
                        pm.store_u64(remote.offset(), b ^ 1)?;
                    }
                    self.node.deliver(RecvKind::WriteImm, Some(*imm), &[])?;
                }
                Op::Cas { remote, .. } | Op::Faa { remote, .. }
                    if !remote.offset().is_multiple_of(8) =>
                {
                    return Err(FabricError::RemoteInvalid {
                        wr: 0,
                        addr: *remote,
                        why: "misaligned atomic",
                    });
                }
                Op::Cas {
                    remote,
                    compare,
                    swap,
                    old,
                } => **old = pm.cas_u64(remote.offset(), *compare, *swap)?,
                Op::Faa { remote, add, old } => {
                    let v = pm.load_u64(remote.offset())?;
                    pm.store_u64(remote.offset(), v.wrapping_add(*add))?;
                    **old = v;
                }
                Op::Send { local } => self.node.deliver(RecvKind::Send, None, local)?,
                Op::MaskedCas { .. } => {
                    return Err(FabricError::Unsupported {
                        what: "masked CMP_AND_SWP",
                    });
                }
            }
        }
        Ok(())
    }
}

type MemEp = OneNode<MemQp>;

/// The endpoint of one client of `node`.
fn mem_ep(node: &Rc<MemNode>) -> MemEp {
    OneNode::new(MemQp {
        node: node.clone(),
        counters: Counters::new(),
    })
}

fn cfg(slots: u32) -> CanrtConfig {
    CanrtConfig {
        slots,
        ..CanrtConfig::new(0)
    }
}

/// Scans `t` for `limit` pairs from `from` and checks them against `model`: the scan visits
/// the model's pairs from `from` on, in order, and counts as many. Returns them.
async fn scan_matches<E: Endpoint>(
    t: &Canrt<'_, E>,
    model: &BTreeMap<u64, u64>,
    from: u64,
    limit: usize,
) -> Vec<(u64, u64)> {
    let mut got = Vec::new();
    let n = t
        .scan(&be(from), limit, &mut |k, v| {
            got.push((
                u64::from_be_bytes(k.try_into().unwrap()),
                u64::from_le_bytes(v.try_into().unwrap()),
            ))
        })
        .await
        .unwrap();
    let want: Vec<(u64, u64)> = model
        .range(from..)
        .take(limit)
        .map(|(k, v)| (*k, *v))
        .collect();
    assert_eq!(got, want, "scan from {from:#x}, limit {limit}");
    assert_eq!(n, want.len());
    want
}

/// Every live pair of the published tree, read directly from an image (no holders).
fn dump(region: &dyn LocalRegion) -> BTreeMap<u64, u64> {
    dump_keys(region)
        .into_iter()
        .map(|(k, v)| (k as u64, u64::from_le_bytes(v.try_into().unwrap())))
        .collect()
}

/// [`dump`] for any key width and value: key (big-endian integer) to value bytes.
fn dump_keys(region: &dyn LocalRegion) -> BTreeMap<u128, Vec<u8>> {
    let mut out = BTreeMap::new();
    let root = region.load_u64(root_offset(ROOT_SLOT)).unwrap();
    if root == 0 {
        return out;
    }
    let off = GlobalAddr::from_raw(root).offset();
    let mut hb = [0u8; 384];
    region.read(off, &mut hb).unwrap();
    let h = TreeHeader::decode(&hb).unwrap();
    let mut prefix = vec![0u8; h.prefix_len as usize];
    region.read(h.prefix_off, &mut prefix).unwrap();
    let view = TreeView::new(h, root, prefix).unwrap();
    let mut buf = vec![0u8; h.data_node_size as usize];
    for id in 0..h.n_data {
        region.read(h.data_node_off(id), &mut buf).unwrap();
        let nv = NodeView::parse(h.data(), &buf).unwrap();
        assert!(!nv.has_holder(), "a lock is held after recovery");
        assert!(!nv.front.frozen(), "a node is frozen after recovery");
        assert_eq!(
            nv.front.epoch(),
            view.epoch_tag(),
            "a node of another epoch"
        );
        nv.for_each_live(|k, v| {
            assert_eq!(
                view.locate(k).unwrap(),
                id,
                "key {k:#x} in a node it is not routed to"
            );
            assert!(out.insert(k, v.to_vec()).is_none(), "key {k:#x} live twice");
        })
        .unwrap();
    }
    out
}

fn be(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

#[derive(Debug, Clone, Copy)]
enum Act {
    Upsert(u64, u64),
    Update(u64, u64),
    Delete(u64),
}

fn script(n: usize, seed: u64, range: u64) -> Vec<Act> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % range) * 0x1_0000_0001 + (x >> 60);
            match (x >> 32) % 8 {
                0..=4 => Act::Upsert(k, i as u64 + 1),
                5 => Act::Update(k, i as u64 + 1),
                _ => Act::Delete(k),
            }
        })
        .collect()
}

fn oracle_states(acts: &[Act]) -> Vec<BTreeMap<u64, u64>> {
    let mut m = BTreeMap::new();
    let mut out = vec![m.clone()];
    for a in acts {
        match *a {
            Act::Upsert(k, v) => {
                m.insert(k, v);
            }
            Act::Update(k, v) => {
                if let Some(x) = m.get_mut(&k) {
                    *x = v;
                }
            }
            Act::Delete(k) => {
                m.remove(&k);
            }
        }
        out.push(m.clone());
    }
    out
}

async fn run_act<I: KvIndex>(t: &I, a: Act, model: &mut BTreeMap<u64, u64>) {
    run_act_keyed(t, a, model, 8).await
}

/// Key `k` of a `key_len`-byte tree: its big-endian bytes, behind 8 constant bytes in a
/// 16-byte tree (so the key's low 64 bits are `k`, as [`dump`] reads them).
fn key_in(k: u64, key_len: u32) -> Vec<u8> {
    let mut out = Vec::new();
    if key_len == 16 {
        out.extend_from_slice(b"canrt-k:");
    }
    out.extend_from_slice(&be(k));
    out
}

async fn run_act_keyed<I: KvIndex>(t: &I, a: Act, model: &mut BTreeMap<u64, u64>, key_len: u32) {
    let be = |k| key_in(k, key_len);
    match a {
        Act::Upsert(k, v) => {
            t.upsert(&be(k), &v.to_le_bytes()).await.unwrap();
            model.insert(k, v);
        }
        Act::Update(k, v) => {
            let p = t.update(&be(k), &v.to_le_bytes()).await.unwrap();
            assert_eq!(p, model.contains_key(&k), "update presence of {k:#x}");
            if p {
                model.insert(k, v);
            }
        }
        Act::Delete(k) => {
            let p = t.delete(&be(k)).await.unwrap();
            assert_eq!(p, model.remove(&k).is_some(), "delete presence of {k:#x}");
        }
    }
}

use remora_layouts::canrt::ItemOp as ItemOpT;

/// Crash images at every persistence point of a client's history (formats, appends,
/// resizes); each recovers to the state after the last acknowledged write, or after the one
/// in flight, and the recovered tree takes new writes.
#[test]
fn every_crash_image_recovers_without_losing_an_acknowledged_write() {
    // CANRT_CRASH_SEEDS=n checks n histories (a longer soak than CI's 2).
    let n = std::env::var("CANRT_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2u64);
    for seed in 0..n {
        crash_history(11 + seed, 40 + seed % 5 * 10, 8);
    }
}

fn crash_history(seed: u64, range: u64, key_len: u32) {
    let be = move |k| key_in(k, key_len);
    let cfg = move |slots| CanrtConfig {
        key_len,
        ..cfg(slots)
    };
    let acts = script(140, seed, range);
    let states = Rc::new(oracle_states(&acts));
    let acked = Rc::new(Cell::new(0usize));
    let formatted = Rc::new(Cell::new(false));
    let checked = Rc::new(Cell::new(0u64));
    let replayed = Rc::new(Cell::new(0u64));
    let trimmed = Rc::new(Cell::new(0u64));
    let node = MemNode::new(Pm::new(512 << 10, 1 << 12));
    {
        let (states, acked, formatted, checked, replayed, trimmed) = (
            states.clone(),
            acked.clone(),
            formatted.clone(),
            checked.clone(),
            replayed.clone(),
            trimmed.clone(),
        );
        *node.pm.hook.borrow_mut() = Some(Box::new(move |durable, evicted, nic| {
            for img in [durable, evicted] {
                let pm = Pm::from_image(img);
                let mut srv = CanrtServer::new();
                let report = srv.recover(&pm).unwrap();
                trimmed.set(trimmed.get() + report.trimmed as u64);
                let got = dump(&pm);
                let a = acked.get();
                // Once the appended item is durable (the NIC's write completed), the write
                // was visible to readers, so recovery must keep it.
                let ok = if nic {
                    got == states[a + 1]
                } else {
                    got == states[a] || (a + 1 < states.len() && got == states[a + 1])
                };
                assert!(
                    ok,
                    "crash after {a} acknowledged writes (appended item durable: {nic}) \
                     recovered {got:?}, expected {:?}",
                    states[a]
                );
                if nic {
                    replayed.set(replayed.get() + 1);
                }
                let n = checked.get();
                checked.set(n + 1);
                if formatted.get() && n % 61 == 0 {
                    // The recovered tree serves a new client.
                    let node2 = MemNode::new(pm);
                    *node2.server.borrow_mut() = srv;
                    let ep = mem_ep(&node2);
                    block_on(async {
                        let t = Canrt::open(&ep, cfg(4)).await.unwrap();
                        t.upsert(&be(u64::MAX - 1), &9u64.to_le_bytes())
                            .await
                            .unwrap();
                        let mut out = [0u8; 8];
                        assert_eq!(t.get(&be(u64::MAX - 1), &mut out).await.unwrap(), Some(8));
                        for (k, v) in got.iter().take(5) {
                            assert_eq!(t.get(&be(*k), &mut out).await.unwrap(), Some(8));
                            assert_eq!(u64::from_le_bytes(out), *v);
                        }
                    });
                }
            }
        }));
    }
    let ep = mem_ep(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(4)).await.unwrap();
        formatted.set(true);
        let mut model = BTreeMap::new();
        for (i, a) in acts.iter().enumerate() {
            run_act_keyed(&t, *a, &mut model, key_len).await;
            acked.set(i + 1);
        }
        assert_eq!(model, states[acts.len()]);
    });
    node.pm.hook.borrow_mut().take();
    assert!(
        node.server
            .borrow()
            .stats()
            .resizes
            .load(core::sync::atomic::Ordering::Relaxed)
            > 3
    );
    assert!(checked.get() > 500, "only {} crash images", checked.get());
    assert!(
        replayed.get() > 100,
        "only {} images with an unapplied item",
        replayed.get()
    );
    assert!(
        trimmed.get() > 0,
        "no image caught a split between publish and trim"
    );
    std::println!(
        "crash images checked: {}, of which {} held an appended item not yet applied; \
         {} items trimmed from split nodes by recovery",
        checked.get(),
        replayed.get(),
        trimmed.get()
    );
}

fn view_of(p: &Plan, slots: u32) -> TreeView {
    view_keyed(p, slots, 8)
}

/// A client's view of plan `p` for a tree of `key_len`-byte keys.
fn view_keyed(p: &Plan, slots: u32, key_len: u32) -> TreeView {
    let mut segments = [[0u64; 2]; remora_layouts::canrt::MAX_SEGMENTS];
    for (i, s) in p.segments.iter().enumerate() {
        segments[i] = s.encode();
    }
    let g = remora_layouts::canrt::DataGeometry::new(slots, 8)
        .and_then(|g| g.with_key_len(key_len))
        .unwrap();
    let n = p.groups.len() as u64;
    let mut h = TreeHeader {
        magic: remora_layouts::canrt::TREE_MAGIC,
        epoch: 1,
        key_len,
        slots,
        value_cap: 8,
        height: p.geometry.height,
        width: p.geometry.widths.iter().copied().max().unwrap() as u32,
        n_segments: p.segments.len() as u32,
        n_data: n as u32,
        prefix_off: 4096 + 384,
        prefix_len: p.geometry.total_len(),
        data_off: 4096 + 384 + p.geometry.total_len(),
        data_node_size: g.node_size(),
        area_off: 4096,
        area_len: 384 + p.geometry.total_len(),
        data_cap: n,
        array_gen: 1,
        prefix_check: 0,
        header_check: 0,
        reserved: 0,
        segments,
    };
    h.seal(&p.prefix);
    TreeView::new(h, 4096, p.prefix.clone()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Every key lands in its planned data node, no node is over target, and any key (planned
    /// or not) maps monotonically: key order is data-node order.
    #[test]
    fn plans_place_keys_and_keep_key_order(
        raw in proptest::collection::vec(any::<u64>(), 0..400),
        mask in prop_oneof![Just(u64::MAX), Just(0xFFFF), Just(0x00FF_0000_0000_00FF), Just(0x1F00_0000_FF00)],
        probes in proptest::collection::vec(any::<u64>(), 1..64),
    ) {
        let mut keys: Vec<u64> = raw.iter().map(|k| k & mask).collect();
        keys.sort_unstable();
        keys.dedup();
        let keys: Vec<u128> = keys.iter().map(|&k| k.into()).collect();
        let p = plan(&keys, 4, 8).unwrap().expect("a plan");
        let v = view_of(&p, 8);
        for (id, &(a, b)) in p.groups.iter().enumerate() {
            prop_assert!(b - a <= 4);
            for k in &keys[a..b] {
                prop_assert_eq!(v.locate(*k).unwrap(), id as u32);
            }
        }
        let mut all: Vec<u128> = probes.iter().map(|k| (k & mask).into()).chain(probes.iter().map(|&k| k.into())).chain(keys.iter().copied()).collect();
        all.sort_unstable();
        let ids: Vec<u32> = all.iter().map(|k| v.locate(*k).unwrap()).collect();
        prop_assert!(ids.windows(2).all(|w| w[0] <= w[1]), "not monotone");
    }
}

/// A tree of more data nodes than 17 bits of node id name (the immediate's old width):
/// 600,000 keys, 2 a node, plan into 300,000 data nodes, and a client's view of the plan
/// routes keys to them, the last ones past 2^17 included.
#[test]
fn a_tree_takes_more_than_two_to_the_17_data_nodes() {
    let keys: Vec<u128> = (0..600_000u128).map(|i| i * 3 + 7).collect();
    let p = plan(&keys, 2, 8)
        .unwrap()
        .expect("a plan past 2^17 data nodes");
    assert!(p.groups.len() > 1 << 17, "{} data nodes", p.groups.len());
    let v = view_of(&p, 8);
    let last = p.groups.len() - 1;
    let (a, b) = p.groups[last];
    for k in &keys[a..b] {
        assert_eq!(v.locate(*k).unwrap(), last as u32);
    }
    let (a, _) = p.groups[1 << 17];
    assert_eq!(v.locate(keys[a]).unwrap(), 1 << 17);
}

mod basics;
mod growth;
pub(super) mod issue13;
mod keys16;
mod killed_holder;
mod node_share;
mod partial_resize;
mod reads;
mod reclaim;
mod resize_clock;
mod resizing;
mod scan;

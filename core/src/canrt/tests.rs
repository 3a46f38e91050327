//! Unit tests over an in-memory fabric whose memory node runs the metadata applier inline
//! (every WRITE_WITH_IMM and SEND is handled before the post completes), and a persistence
//! model that keeps a durable image next to the current one: crash images at every
//! persistence point, with and without random early evictions of dirty cache lines.
//! The threaded and simulated runs live in poller/tests/canrt_*.rs.
extern crate std;
use super::*;
use crate::block_on::block_on;
use crate::counters::Counters;
use crate::fabric::{Endpoint, Op, QueuePair, Recv, RecvKind, SegmentOrder, Verb};
use crate::index::KvIndex;
use crate::server::{Handler, LocalRegion, Replies};
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
    fn peer(&self) -> NodeId {
        0
    }
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
            }
        }
        Ok(())
    }
    async fn recv<'a>(&'a self, _buf: &'a mut [u8]) -> Result<Recv, FabricError> {
        Err(FabricError::Unsupported { what: "recv" })
    }
    fn try_recv(&self, _buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        Ok(None)
    }
    fn max_message(&self) -> usize {
        4096
    }
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn is_broken(&self) -> bool {
        false
    }
}

struct MemEp {
    qp: MemQp,
    nodes: [NodeId; 1],
}

impl MemEp {
    fn new(node: &Rc<MemNode>) -> MemEp {
        MemEp {
            qp: MemQp {
                node: node.clone(),
                counters: Counters::new(),
            },
            nodes: [0],
        }
    }
}

impl Endpoint for MemEp {
    type Qp = MemQp;
    fn qp(&self, node: NodeId) -> Result<&MemQp, FabricError> {
        if node == 0 {
            Ok(&self.qp)
        } else {
            Err(FabricError::UnknownNode { node })
        }
    }
    fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }
}

fn cfg(slots: u32) -> CanrtConfig {
    CanrtConfig {
        slots,
        ..CanrtConfig::new(0)
    }
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

#[test]
fn single_client_matches_a_btreemap_through_resizes() {
    let node = MemNode::new(Pm::new(8 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        let mut model = BTreeMap::new();
        let mut out = [0u8; 8];
        for (i, a) in script(3000, 7, 700).into_iter().enumerate() {
            run_act(&t, a, &mut model).await;
            if i % 97 == 0 {
                // Scans from a few points agree with the model.
                let from = (i as u64 % 700) * 0x1_0000_0001;
                let mut got = Vec::new();
                t.scan(&be(from), 20, &mut |k, v| {
                    got.push((
                        u64::from_be_bytes(k.try_into().unwrap()),
                        u64::from_le_bytes(v.try_into().unwrap()),
                    ))
                })
                .await
                .unwrap();
                let want: Vec<(u64, u64)> = model
                    .range(from..)
                    .take(20)
                    .map(|(k, v)| (*k, *v))
                    .collect();
                assert_eq!(got, want, "scan from {from:#x}");
            }
        }
        for (k, v) in &model {
            assert_eq!(t.get(&be(*k), &mut out).await.unwrap(), Some(8));
            assert_eq!(u64::from_le_bytes(out), *v);
        }
        assert_eq!(t.get(&be(3), &mut out).await.unwrap(), None);
        assert_eq!(dump(&node.pm), model);
        let st = node.server.borrow().stats();
        assert!(st.resizes.load(core::sync::atomic::Ordering::Relaxed) > 3);
        assert!(t.stats().refreshes > 3);
        // Bad input is refused with errors.
        assert!(matches!(
            t.get(b"short", &mut out).await,
            Err(CanrtError::BadKey { len: 5, width: 8 })
        ));
        assert!(matches!(
            t.upsert(&be(1), &[0; 9]).await,
            Err(CanrtError::ValueTooLong { len: 9, max: 8 })
        ));
    });
}

#[test]
fn warm_lookup_is_one_doorbell_and_one_round_trip() {
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(32)).await.unwrap();
        for k in 0..500u64 {
            t.upsert(&be(k * 977), &k.to_le_bytes()).await.unwrap();
        }
        let c = ep.qp.counters();
        let before = c.snapshot();
        let mut out = [0u8; 8];
        for k in 0..500u64 {
            assert_eq!(t.get(&be(k * 977), &mut out).await.unwrap(), Some(8));
        }
        let d = c.snapshot() - before;
        // The node READ and the meta word alone before and after it, in one doorbell.
        assert_eq!(d.verb(Verb::Read), 3 * 500);
        assert_eq!(d.posted_verbs(), 3 * 500);
        assert_eq!(d.doorbells, 500);
        assert_eq!(d.round_trips, 500);
        // An uncontended upsert: FETCH_AND_ADD + snapshot READs in one doorbell, then
        // WRITE_WITH_IMM
        let before = c.snapshot();
        for k in 0..100u64 {
            t.upsert(&be(k * 977), &(k + 1).to_le_bytes())
                .await
                .unwrap();
        }
        let d = c.snapshot() - before;
        assert_eq!(d.verb(Verb::Faa), 100);
        // (and in the WRITE_WITH_IMM's doorbell the meta word, to notice a skipped ticket,
        // and the read-after-write flush READ)
        assert_eq!(d.verb(Verb::Read), 5 * 100);
        assert_eq!(d.verb(Verb::WriteImm), 100);
        assert_eq!(d.doorbells, 200);
        assert_eq!(d.round_trips, 200);
    });
}

#[test]
fn a_torn_append_is_refused_and_never_read() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(5), &1u64.to_le_bytes()).await.unwrap();
        node.corrupt_next.set(true);
        // The applier refuses the torn item (the connection would drop) but frees the lock.
        assert!(t.upsert(&be(5), &2u64.to_le_bytes()).await.is_err());
        let mut out = [0u8; 8];
        assert_eq!(t.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 1);
        t.upsert(&be(5), &3u64.to_le_bytes()).await.unwrap();
        assert_eq!(t.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 3);
    });
}

#[test]
fn a_holders_item_stays_invisible_until_the_applier_runs() {
    // Hand-made node: the holder (ticket 1) has written its item but the server has not
    // applied (persisted and committed) it. Readers see only the applied value: the NIC's
    // write may not be durable yet, so a value read from it could vanish in a crash (issue
    // 13). The write path still recognizes the holder's record (`pending`), a torn copy of
    // it not.
    let g = remora_layouts::canrt::DataGeometry::new(4, 8).unwrap();
    let mut node = vec![0u8; g.node_size() as usize];
    let put = |node: &mut Vec<u8>, slot: u32, k: u64, v: u64, op, ticket, valid| {
        let at = g.slot_off(slot) as usize;
        g.encode_item(
            &mut node[at..at + 24],
            k.into(),
            &v.to_le_bytes(),
            op,
            ticket,
            valid,
        )
        .unwrap();
    };
    let put_item = |node: &mut Vec<u8>, slot: u32, k: u64, v: u64, op, ticket| {
        put(node, slot, k, v, op, ticket, true)
    };
    // Applied: processed (valid clear).
    put(&mut node, 0, 7, 70, ItemOpT::Insert, 0, false);
    let m = remora_layouts::canrt::Meta::new(0b1, 1, false, 1);
    node[8..16].copy_from_slice(&m.0.to_le_bytes());
    node[0..8].copy_from_slice(&2u64.to_le_bytes()); // ticket 1 handed out
    put_item(&mut node, 1, 7, 71, ItemOpT::Update, 1);
    let nv = NodeView::parse(g, &node).unwrap();
    assert_eq!(nv.find(7).unwrap(), Found::Present(&70u64.to_le_bytes()));
    assert_eq!(
        nv.pending().map(|p| p.value),
        Some(&71u64.to_le_bytes()[..])
    );
    let mut seen = Vec::new();
    nv.for_each_live(|k, v| seen.push((k, v.to_vec()))).unwrap();
    assert_eq!(seen, vec![(7, 70u64.to_le_bytes().to_vec())]);
    // Torn: the key word of the pending item is stale.
    let mut torn = node.clone();
    torn[g.slot_off(1) as usize] ^= 0x40;
    let nv = NodeView::parse(g, &torn).unwrap();
    assert!(nv.pending().is_none());
    assert_eq!(nv.find(7).unwrap(), Found::Present(&70u64.to_le_bytes()));
    // A pending delete does not hide the key before it is applied either.
    put_item(&mut node, 1, 7, 0, ItemOpT::Delete, 1);
    assert_eq!(
        NodeView::parse(g, &node).unwrap().find(7).unwrap(),
        Found::Present(&70u64.to_le_bytes())
    );
    // A processed item (valid bit clear) with the served ticket, as a free slot keeps one
    // 2^16 tickets later, is not the holder's.
    let tail_at = g.tail_off(1) as usize;
    let tail = u64::from_le_bytes(node[tail_at..tail_at + 8].try_into().unwrap());
    let mut old = node.clone();
    old[tail_at..tail_at + 8]
        .copy_from_slice(&remora_layouts::canrt::tail_processed(tail).to_le_bytes());
    assert!(NodeView::parse(g, &old).unwrap().pending().is_none());
    // No holder (lock == served): a stale item with the served ticket is not pending.
    node[0..8].copy_from_slice(&1u64.to_le_bytes());
    assert!(NodeView::parse(g, &node).unwrap().pending().is_none());
    // A snapshot holds only if the meta word read alone before and after is the node's.
    let nv = NodeView::parse(g, &node).unwrap();
    assert!(nv.stable(m.0, m.0));
    let m2 = m.with_served(2);
    assert!(!nv.stable(m.0, m2.0));
    assert!(!nv.stable(m2.0, m2.0));
    // A live slot whose tail has `valid` set is reserved (a skipped holder's hole, or its
    // late append, whole or landing): skipped, whatever its other bytes hold, never an
    // error to retry on.
    let mut res = node.clone();
    res[8..16].copy_from_slice(&m.with_bitmap(0b111).0.to_le_bytes());
    put(&mut res, 2, 9, 90, ItemOpT::Insert, 0, false);
    let at = g.tail_off(1) as usize;
    res[at..at + 8].copy_from_slice(&remora_layouts::canrt::hole_tail(1).to_le_bytes());
    let nv = NodeView::parse(g, &res).unwrap();
    assert!(nv.reserved(1) && !nv.reserved(0) && !nv.reserved(2));
    assert_eq!(nv.live_slots().collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(nv.find(7).unwrap(), Found::Present(&70u64.to_le_bytes()));
    let mut seen = Vec::new();
    nv.for_each_live(|k, _| seen.push(k)).unwrap();
    assert_eq!(seen, vec![7, 9]);
    // A late item of key 7 landing in it (whole, or torn) does not show either.
    put_item(&mut res, 1, 7, 71, ItemOpT::Update, 1);
    assert_eq!(
        NodeView::parse(g, &res).unwrap().find(7).unwrap(),
        Found::Present(&70u64.to_le_bytes())
    );
    res[g.slot_off(1) as usize] ^= 0x40;
    assert_eq!(
        NodeView::parse(g, &res).unwrap().find(7).unwrap(),
        Found::Present(&70u64.to_le_bytes())
    );
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
                    let ep = MemEp::new(&node2);
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
    let ep = MemEp::new(&node);
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

/// Non-blocking resizing: while a resize waits for a slow lock holder of the full node, the
/// valid tree still serves every lookup, and writes to the nodes it does not split go on; once the holder hands its ticket back the new
/// tree is built, published, and takes writes.
#[test]
fn reads_go_on_while_a_resize_drains() {
    use remora_layouts::canrt::{Control, ControlKind, FRONT_OFF, LOCK_OFF, Meta};
    let node = MemNode::new(Pm::new(4 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        for k in 0..200u64 {
            t.upsert(&be(k << 20), &k.to_le_bytes()).await.unwrap();
        }
        t.get(&be(0), &mut [0u8; 8]).await.unwrap();
        let v = t.view();
        assert!(v.header.n_data >= 3);
        let qp = ep.qp(0).unwrap();
        // Take the lock of two data nodes as another client would (FETCH_AND_ADD).
        let holder = |id: u32| {
            let off = v.header.data_node_off(id);
            let served = Meta(node.pm.load_u64(off + FRONT_OFF).unwrap()).served();
            (off, served)
        };
        // The holder of node 1, and a slow client queued behind it.
        let (full_off, full_ticket) = holder(1);
        qp.faa(GlobalAddr::new(0, full_off + LOCK_OFF), 1)
            .await
            .unwrap();
        let slow_ticket = full_ticket + 1;
        qp.faa(GlobalAddr::new(0, full_off + LOCK_OFF), 1)
            .await
            .unwrap();
        // The holder of node 1 reports it full: node 1 freezes and drains.
        let resize = Control::new(
            ControlKind::Resize,
            v.epoch_tag(),
            v.header.array_gen,
            1,
            full_ticket,
        );
        qp.send(&resize.encode()).await.unwrap();
        assert!(Meta(node.pm.load_u64(full_off + FRONT_OFF).unwrap()).frozen());
        let stats = node.server.borrow().stats();
        let resizes = stats.resizes.load(core::sync::atomic::Ordering::Relaxed);
        // Lookups go on, on the frozen tree.
        let mut out = [0u8; 8];
        for k in 0..200u64 {
            assert_eq!(t.get(&be(k << 20), &mut out).await.unwrap(), Some(8));
            assert_eq!(u64::from_le_bytes(out), k);
        }
        // (A writer of node 1 would queue behind the slow holder, whose turn finds the node
        // frozen.)
        let impatient = Canrt::open(
            &ep,
            CanrtConfig {
                resize_polls: 5,
                ..cfg(8)
            },
        )
        .await
        .unwrap();
        let on = |id: u32| {
            (0..200u64)
                .find(|k| v.locate(u128::from(k << 20)) == Ok(id))
                .unwrap()
                << 20
        };
        assert!(on(1) > 0);
        // Writes to a node the resize does not split go on meanwhile.
        let other = (0..v.header.n_data)
            .find(|&id| {
                let m = Meta(
                    node.pm
                        .load_u64(v.header.data_node_off(id) + FRONT_OFF)
                        .unwrap(),
                );
                !m.frozen() && v.rank(id).is_some()
            })
            .expect("a node the resize leaves alone");
        impatient
            .upsert(&be(on(other)), &77u64.to_le_bytes())
            .await
            .unwrap();
        assert_eq!(
            stats.resizes.load(core::sync::atomic::Ordering::Relaxed),
            resizes
        );
        // The slow holder's turn comes, on a frozen node: it hands its ticket back, the
        // drain ends, the new tree is published.
        let unlock = Control::new(
            ControlKind::Unlock,
            v.epoch_tag(),
            v.header.array_gen,
            1,
            slow_ticket,
        );
        qp.send(&unlock.encode()).await.unwrap();
        assert_eq!(
            stats.resizes.load(core::sync::atomic::Ordering::Relaxed),
            resizes + 1
        );
        t.upsert(&be(5), &55u64.to_le_bytes()).await.unwrap();
        assert!(t.view().header.epoch > v.header.epoch);
        for k in 0..200u64 {
            assert_eq!(t.get(&be(k << 20), &mut out).await.unwrap(), Some(8));
            let want = if k << 20 == on(other) { 77 } else { k };
            assert_eq!(u64::from_le_bytes(out), want);
        }
        assert_eq!(t.get(&be(5), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 55);
    });
}

/// Ascending inserts all land in the rightmost data node, so the tree resizes every
/// `slots / 2` inserts there; this records what that costs (resizes, region bytes taken by
/// trees, retired ones included) next to a random order of the same keys.
#[test]
fn ascending_and_random_loads_resize_and_stay_correct() {
    for ascending in [true, false] {
        let node = MemNode::new(Pm::new(64 << 20, 1 << 16));
        let ep = MemEp::new(&node);
        const N: u64 = 2000;
        block_on(async {
            let t = Canrt::open(&ep, cfg(32)).await.unwrap();
            for i in 0..N {
                let k = if ascending { i } else { i * 7919 % N };
                t.upsert(&be(k), &k.to_le_bytes()).await.unwrap();
            }
            let mut got = 0u64;
            let n = t
                .scan(&be(0), N as usize + 1, &mut |k, v| {
                    assert_eq!(k, be(got));
                    assert_eq!(v, got.to_le_bytes());
                    got += 1;
                })
                .await
                .unwrap();
            assert_eq!(n as u64, N);
        });
        let resizes = node
            .server
            .borrow()
            .stats()
            .resizes
            .load(core::sync::atomic::Ordering::Relaxed);
        let used = node.pm.load_u64(32).unwrap();
        std::println!(
            "{} load of {N} keys: {resizes} resizes, {} KiB of region taken by trees",
            if ascending { "ascending" } else { "random" },
            used >> 10
        );
        assert!(resizes < N);
    }
}

/// Lookups and scans of a key whose value another client updates in the middle of each
/// node READ (the update lands between two of the READ's segments). Returns how many
/// returned a value that was never current while they ran, and the reader's torn retries.
fn race_reads(order: SegmentOrder, ascending_check: bool) -> (usize, u64) {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    let mut rng = 0x5DEE_CE66_D1CE_4E5Bu64;
    let mut rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut wrong = 0;
    let reader = block_on(Canrt::open(&ep, cfg(8))).unwrap();
    reader.ascending_check.set(ascending_check);
    // The other client: its own endpoint on the same memory node.
    let write = |node: &Rc<MemNode>, k: u64, v: u64| {
        let ep = MemEp::new(node);
        block_on(async {
            let w = Canrt::open(&ep, cfg(8)).await.unwrap();
            w.upsert(&be(k), &v.to_le_bytes()).await.unwrap();
        });
    };
    let size = reader.view().header.data_node_size as usize;
    // Five keys below the raced one fill the first slots, so the raced key's two slots
    // (an update appends to the lowest free slot) sit in another segment than the meta word.
    const K: u64 = 1000;
    for k in 1..=5u64 {
        write(&node, k, k);
    }
    write(&node, K, 0);
    assert_eq!(size.div_ceil(LINE), 4);
    let mut current = 0u64;
    for round in 0..64u64 {
        let next = current + 1;
        let n = node.clone();
        *node.split_next_read.borrow_mut() = Some(SplitRead {
            len: size,
            order,
            seed: rand(),
            pick: rand(),
            event: Box::new(move || write(&n, K, next)),
        });
        let got = block_on(async {
            if round % 2 == 0 {
                let mut out = [0u8; 8];
                let n = reader.get(&be(K), &mut out).await.unwrap();
                n.map(|n| {
                    assert_eq!(n, 8);
                    u64::from_le_bytes(out)
                })
            } else {
                let mut v = None;
                reader
                    .scan(&be(K), 1, &mut |k, val| {
                        if k == be(K) {
                            v = Some(u64::from_le_bytes(val.try_into().unwrap()));
                        }
                    })
                    .await
                    .unwrap();
                v
            }
        });
        assert!(
            node.split_next_read.borrow_mut().take().is_none(),
            "the READ was not split"
        );
        if got != Some(current) && got != Some(next) {
            wrong += 1;
        }
        current = next;
    }
    (wrong, reader.stats().torn_retries)
}

/// Segment order: the meta word READ alone before and after the node catches an update
/// that lands in the middle of the node READ whatever order its segments observe memory
/// in. The node READ's own copy of the meta word serves as the "before" read only when
/// the READ observes ascending addresses (the mutant): shuffled, it returns stale values.
#[test]
fn node_reads_hold_under_any_segment_order() {
    let (wrong, torn) = race_reads(SegmentOrder::Shuffled, false);
    assert_eq!(wrong, 0, "the bracketed snapshot returned stale values");
    assert!(torn > 10, "only {torn} torn snapshots retried");
    let (wrong, _) = race_reads(SegmentOrder::Ascending, false);
    assert_eq!(wrong, 0);
    // The ascending-order check is sound when segments land in ascending order...
    let (wrong, torn) = race_reads(SegmentOrder::Ascending, true);
    assert_eq!(wrong, 0, "the ascending check failed in ascending order");
    assert!(torn > 10);
    // ...and returns values that were never current when they do not.
    let (wrong, _) = race_reads(SegmentOrder::Shuffled, true);
    assert!(wrong > 0, "the ascending-order check was not caught");
    std::println!("ascending-order check under shuffled segments: {wrong} of 64 reads wrong");
}

/// `get` follows the KvIndex contract: it returns the value's own length, copies nothing
/// into a buffer too small for the value (an error), and leaves bytes past the value alone.
#[test]
fn get_returns_the_values_length_and_refuses_a_short_buffer() {
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    block_on(async {
        let t = Canrt::open(
            &ep,
            CanrtConfig {
                value_cap: 16,
                ..cfg(8)
            },
        )
        .await
        .unwrap();
        t.upsert(&be(1), b"abc").await.unwrap();
        t.upsert(&be(2), &[9u8; 16]).await.unwrap();
        t.upsert(&be(3), b"").await.unwrap();
        let mut out = [0xEEu8; 20];
        assert_eq!(t.get(&be(1), &mut out).await.unwrap(), Some(3));
        assert_eq!(&out[..3], b"abc");
        assert!(out[3..].iter().all(|&b| b == 0xEE));
        assert_eq!(t.get(&be(2), &mut out).await.unwrap(), Some(16));
        assert_eq!(t.get(&be(3), &mut out).await.unwrap(), Some(0));
        let mut short = [0xEEu8; 8];
        let e = t.get(&be(2), &mut short).await.unwrap_err();
        assert_eq!(e, CanrtError::BufferTooSmall { need: 16, got: 8 });
        assert_eq!(short, [0xEE; 8], "a short buffer was written");
        assert_eq!(
            e.to_string(),
            "canrt: value of 16 bytes does not fit the 8-byte buffer"
        );
        assert_eq!(t.get(&be(1), &mut short[..3]).await.unwrap(), Some(3));
        assert_eq!(t.get(&be(3), &mut []).await.unwrap(), Some(0));
        assert_eq!(t.get(&be(4), &mut []).await.unwrap(), None);
    });
}

/// Configuration and key errors name CANRT and its own limits.
#[test]
fn errors_speak_canrts_words() {
    for v in [0u32, 4, 12, 256] {
        let c = CanrtConfig {
            value_cap: v,
            ..cfg(8)
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e, CanrtError::ValueCap { value_cap: v });
        assert_eq!(
            e.to_string(),
            std::format!("canrt: values are 8 to 248 bytes in multiples of 8, not {v}")
        );
    }
    assert!(
        CanrtConfig {
            value_cap: 248,
            ..cfg(8)
        }
        .validate()
        .is_ok()
    );
    assert!(matches!(cfg(1).validate(), Err(CanrtError::Config(_))));
    let node = MemNode::new(Pm::new(1 << 20, 1 << 16));
    let ep = MemEp::new(&node);
    block_on(async {
        let bad = CanrtConfig {
            value_cap: 256,
            ..cfg(8)
        };
        assert!(matches!(
            Canrt::open(&ep, bad).await,
            Err(CanrtError::ValueCap { value_cap: 256 })
        ));
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        let e = t.upsert(b"key", b"v").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "canrt: this tree's keys are 8 bytes (big-endian integers), got a 3-byte key"
        );
    });
}

mod issue13;
mod keys16;
mod killed_holder;
mod node_share;
mod partial_resize;
mod resize_clock;

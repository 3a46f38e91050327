//! Unit and property tests over an in-memory, single-threaded fabric (the soft fabric tests
//! with real threads and tearing live in poller/tests/smart_*.rs).
extern crate std;
use super::*;
use crate::counters::Counters;
use crate::fabric::{FabricError, Op};
use crate::testing::OneNode;
use core::cell::RefCell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Waker};
use proptest::prelude::*;
use remora_layouts::region::RegionHeader;
use remora_layouts::smart::SlotKind;
use std::boxed::Box;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::string::String;
use std::vec;
use std::vec::Vec;

/// One memory node: host memory in a Vec and device memory in another (empty unless the
/// test gives it some); every post executes at once, then yields once.
pub(super) struct MemQp {
    mem: Rc<RefCell<Vec<u8>>>,
    dev: Rc<RefCell<Vec<u8>>>,
    counters: Counters,
}

pub(super) fn word(m: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(m[at..at + 8].try_into().unwrap())
}

impl QueuePair for MemQp {
    crate::post_only_qp!();
    async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        self.counters.count_post(ops);
        {
            let (mut h, mut d) = (self.mem.borrow_mut(), self.dev.borrow_mut());
            for (wr, op) in ops.iter_mut().enumerate() {
                let (addr, len) = (op.remote().unwrap_or_default(), op.len());
                let m: &mut Vec<u8> = if addr.is_device() { &mut d } else { &mut h };
                let at = addr.offset() as usize;
                if at + len > m.len() || addr.node() != 0 {
                    return Err(FabricError::RemoteAccess { wr, addr, len });
                }
                match op {
                    Op::Read { local, .. } => local.copy_from_slice(&m[at..at + len]),
                    Op::Write { local, .. } => m[at..at + len].copy_from_slice(local),
                    Op::Cas {
                        compare, swap, old, ..
                    } => {
                        assert_eq!(at % 8, 0, "misaligned CAS");
                        **old = word(m, at);
                        if **old == *compare {
                            m[at..at + 8].copy_from_slice(&swap.to_le_bytes());
                        }
                    }
                    Op::MaskedCas {
                        compare,
                        swap,
                        mask,
                        old,
                        ..
                    } => {
                        **old = word(m, at);
                        if **old & *mask == *compare & *mask {
                            let v = **old & !*mask | *swap & *mask;
                            m[at..at + 8].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                    Op::Faa { add, old, .. } => {
                        **old = word(m, at);
                        let v = old.wrapping_add(*add);
                        m[at..at + 8].copy_from_slice(&v.to_le_bytes());
                    }
                    _ => return Err(FabricError::Unsupported { what: "two-sided" }),
                }
            }
        }
        crate::block_on::yield_now().await;
        self.counters.count_round_trip();
        Ok(())
    }
}

pub(super) type MemEp = OneNode<MemQp>;

pub(super) fn memory(len: usize) -> Rc<RefCell<Vec<u8>>> {
    let mut m = vec![0u8; len];
    let h = RegionHeader::new(len as u64, 1 << 16, 0).unwrap();
    m[..128].copy_from_slice(&h.encode());
    Rc::new(RefCell::new(m))
}

pub(super) fn endpoint(m: &Rc<RefCell<Vec<u8>>>) -> MemEp {
    with_device(m, &Rc::default())
}

/// [`endpoint`] to a node that also has the device memory `dev`.
pub(super) fn with_device(m: &Rc<RefCell<Vec<u8>>>, dev: &Rc<RefCell<Vec<u8>>>) -> MemEp {
    OneNode::new(MemQp {
        mem: m.clone(),
        dev: dev.clone(),
        counters: Counters::new(),
    })
}

/// Round-robin executor over boxed futures (what the poller's executor does).
pub(super) fn run_all<'a>(mut futs: Vec<Pin<Box<dyn Future<Output = ()> + 'a>>>) {
    let mut cx = Context::from_waker(Waker::noop());
    let mut done = vec![false; futs.len()];
    while done.iter().any(|d| !d) {
        for (i, f) in futs.iter_mut().enumerate() {
            if !done[i] && f.as_mut().poll(&mut cx).is_ready() {
                done[i] = true;
            }
        }
    }
}

pub(super) fn block<F: Future>(f: F) -> F::Output {
    crate::block_on::block_on(f)
}

fn all_configs() -> Vec<Techniques> {
    let mut v = Vec::new();
    for bits in 0..16u32 {
        v.push(Techniques {
            lock_free_internal: bits & 1 != 0,
            in_place_leaf: bits & 2 != 0,
            rear_lock: bits & 4 != 0,
            delegation: bits & 8 != 0,
            combining: bits & 8 != 0,
            cache: bits & 8 != 0,
        });
    }
    v
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Applies a random mix of operations to the tree and an oracle and compares every result.
fn check_against_oracle(t: Techniques, mode: KeyMode, keys: &[Vec<u8>], ops: usize, seed: u64) {
    let m = memory(64 << 20);
    let ep = endpoint(&m);
    let mut cfg = SmartConfig::new(t, mode, 16);
    cfg.cache_mib = 1.0;
    let s = block(Smart::open(&ep, cfg)).unwrap();
    let mut oracle: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = seed | 1;
    let mut out = [0u8; 16];
    for i in 0..ops {
        let k = &keys[(xorshift(&mut rng) % keys.len() as u64) as usize];
        let v = (i as u64).to_le_bytes();
        match xorshift(&mut rng) % 10 {
            0..=3 => {
                block(s.upsert(k, &v)).unwrap();
                oracle.insert(k.clone(), v.to_vec());
            }
            4 => {
                let had = block(s.update(k, &v)).unwrap();
                assert_eq!(had, oracle.contains_key(k), "update {k:?} ({t:?})");
                if had {
                    oracle.insert(k.clone(), v.to_vec());
                }
            }
            5 => {
                let had = block(s.delete(k)).unwrap();
                assert_eq!(had, oracle.remove(k).is_some(), "delete {k:?} ({t:?})");
            }
            6 => {
                let mut got = Vec::new();
                let n =
                    block(s.scan(k, 5, &mut |k, v| got.push((k.to_vec(), v.to_vec())))).unwrap();
                let want: Vec<_> = oracle
                    .range(k.clone()..)
                    .take(5)
                    .map(|(a, b)| (a.clone(), b.clone()))
                    .collect();
                assert_eq!(n, want.len());
                assert_eq!(got, want, "scan from {k:?} ({t:?})");
            }
            _ => {
                let r = block(s.get(k, &mut out)).unwrap();
                assert_eq!(
                    r.map(|n| out[..n].to_vec()),
                    oracle.get(k).cloned(),
                    "get {k:?} ({t:?})"
                );
            }
        }
    }
    for k in keys {
        let r = block(s.get(k, &mut out)).unwrap();
        assert_eq!(
            r.map(|n| out[..n].to_vec()),
            oracle.get(k).cloned(),
            "final get {k:?} ({t:?})"
        );
    }
    let mut all = Vec::new();
    block(s.scan(&[], usize::MAX, &mut |k, v| {
        all.push((k.to_vec(), v.to_vec()))
    }))
    .unwrap();
    let want: Vec<_> = oracle.into_iter().collect();
    assert_eq!(all, want, "full scan ({t:?})");
}

#[test]
fn every_configuration_agrees_with_the_oracle() {
    let mut rng = 7u64;
    let ints: Vec<Vec<u8>> = (0..600)
        .map(|_| (xorshift(&mut rng) % 5000).to_be_bytes().to_vec())
        .collect();
    let strs: Vec<Vec<u8>> = (0..300)
        .map(|i| std::format!("user{}", (xorshift(&mut rng) % 100_000) * (i % 3 + 1)).into_bytes())
        .collect();
    for t in all_configs() {
        check_against_oracle(t, KeyMode::Fixed(8), &ints, 3000, 11);
        check_against_oracle(t, KeyMode::Variable, &strs, 1500, 13);
    }
}

#[test]
fn nodes_grow_through_every_type() {
    for t in [Techniques::SMART, Techniques::BASELINE] {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, SmartConfig::new(t, KeyMode::Fixed(8), 8))).unwrap();
        // 256 keys differing only in the last byte, under one depth-1 node.
        for b in 0..=255u8 {
            block(s.upsert(&[1, 2, 3, 4, 5, 6, 7, b], &[b])).unwrap();
        }
        assert_eq!(s.stats().grows, 3, "N4 -> N16 -> N48 -> N256 ({t:?})");
        let mut out = [0u8; 8];
        for b in 0..=255u8 {
            assert_eq!(
                block(s.get(&[1, 2, 3, 4, 5, 6, 7, b], &mut out)).unwrap(),
                Some(1)
            );
            assert_eq!(out[0], b);
        }
        assert_eq!(
            block(s.get(&[1, 2, 3, 4, 5, 6, 8, 0], &mut out)).unwrap(),
            None
        );
    }
}

/// Once the cache is warm, a lookup is one READ of its leaf, in SMART and in the lock-based
/// baseline with the cache (whose internal nodes carry no reverse pointer: read as a stale
/// parent, every remote read of one dropped its cached parent, 1.3 invalidations per insert
/// in the 2M-key factor LOAD).
#[test]
fn warm_cache_lookup_is_one_read() {
    let baseline = Techniques {
        cache: true,
        ..Techniques::BASELINE
    };
    for t in [Techniques::SMART, baseline] {
        warm_cache_lookups(t);
    }
}

fn warm_cache_lookups(t: Techniques) {
    let m = memory(16 << 20);
    let ep = endpoint(&m);
    let s = block(Smart::open(&ep, SmartConfig::new(t, KeyMode::Fixed(8), 8))).unwrap();
    for k in 0..2000u64 {
        block(s.upsert(&(k * 7919).to_be_bytes(), &k.to_le_bytes())).unwrap();
    }
    let mut out = [0u8; 8];
    for k in 0..2000u64 {
        block(s.get(&(k * 7919).to_be_bytes(), &mut out)).unwrap();
    }
    let before = s.counters();
    let invalidated = s.stats().cache_invalidations;
    for k in 0..2000u64 {
        assert_eq!(
            block(s.get(&(k * 7919).to_be_bytes(), &mut out)).unwrap(),
            Some(8)
        );
        assert_eq!(u64::from_le_bytes(out), k);
    }
    let d = s.counters() - before;
    assert_eq!(d.verb(crate::fabric::Verb::Read), 2000, "{t:?}");
    assert_eq!(d.round_trips, 2000, "{t:?}");
    assert_eq!(d.posted_verbs(), 2000, "{t:?}");
    assert_eq!(s.stats().cache_invalidations, invalidated, "{t:?}");
}

#[test]
fn a_cached_slot_follows_a_forward_chain_once() {
    // Out-of-place leaves with the cache (the factor analysis's "+ lock-free internal"
    // step): another compute node updates a key ten times, each update a new leaf that the
    // old one forwards to. The reader's cached slot still names the first leaf: its next
    // lookup follows the chain (11 READs), and then reads the live leaf at once instead of
    // following the chain again on every lookup.
    let t = Techniques {
        in_place_leaf: false,
        rear_lock: false,
        delegation: false,
        combining: false,
        ..Techniques::SMART
    };
    let m = memory(16 << 20);
    let (ep_r, ep_w) = (endpoint(&m), endpoint(&m));
    let cfg = SmartConfig::new(t, KeyMode::Fixed(8), 8);
    let reader = block(Smart::open(&ep_r, cfg)).unwrap();
    let writer = block(Smart::open(&ep_w, cfg)).unwrap();
    let key = |k: u64| (k * 7919).to_be_bytes();
    for k in 0..200u64 {
        block(writer.upsert(&key(k), &k.to_le_bytes())).unwrap();
    }
    let mut out = [0u8; 8];
    for _ in 0..2 {
        for k in 0..200u64 {
            block(reader.get(&key(k), &mut out)).unwrap();
        }
    }
    for v in 1..=10u64 {
        block(writer.upsert(&key(77), &v.to_le_bytes())).unwrap();
    }
    let reads = |f: &dyn Fn()| {
        let before = reader.counters();
        f();
        (reader.counters() - before).verb(crate::fabric::Verb::Read)
    };
    let get = || {
        assert_eq!(
            block(reader.get(&key(77), &mut out.clone())).unwrap(),
            Some(8)
        );
    };
    assert_eq!(
        reads(&get),
        11,
        "the chain of ten replaced leaves, then the live one"
    );
    assert_eq!(reads(&get), 1, "the cached slot now names the live leaf");
    let mut v = [0u8; 8];
    block(reader.get(&key(77), &mut v)).unwrap();
    assert_eq!(u64::from_le_bytes(v), 10);
}

#[test]
fn coroutines_and_handles_interleave_correctly() {
    // Four handles (compute nodes) with four coroutines each, all on one hot key set,
    // interleaved at every round trip; then every key holds a value some writer wrote last.
    for t in [Techniques::SMART, Techniques::BASELINE] {
        let m = memory(64 << 20);
        let eps: Vec<MemEp> = (0..4).map(|_| endpoint(&m)).collect();
        let handles: Vec<Smart<'_, MemEp>> = eps
            .iter()
            .map(|e| block(Smart::open(e, SmartConfig::new(t, KeyMode::Fixed(8), 16))).unwrap())
            .collect();
        let last: RefCell<BTreeMap<u64, Vec<(u64, u64)>>> = RefCell::new(BTreeMap::new());
        let mut futs: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
        for (h, s) in handles.iter().enumerate() {
            for c in 0..4u64 {
                let last = &last;
                let writer = h as u64 * 4 + c;
                futs.push(Box::pin(async move {
                    let mut rng = writer + 99;
                    let mut out = [0u8; 16];
                    for seq in 1..=300u64 {
                        let k = xorshift(&mut rng) % 40;
                        if xorshift(&mut rng).is_multiple_of(2) {
                            let mut v = [0u8; 16];
                            v[..8].copy_from_slice(&writer.to_le_bytes());
                            v[8..].copy_from_slice(&seq.to_le_bytes());
                            s.upsert(&k.to_be_bytes(), &v).await.unwrap();
                            last.borrow_mut().entry(k).or_default().push((writer, seq));
                        } else if let Some(n) = s.get(&k.to_be_bytes(), &mut out).await.unwrap() {
                            assert_eq!(n, 16);
                            let w = u64::from_le_bytes(out[..8].try_into().unwrap());
                            let q = u64::from_le_bytes(out[8..].try_into().unwrap());
                            assert!(
                                w < 16 && (1..=300).contains(&q),
                                "value never written: {w} {q}"
                            );
                        }
                    }
                }));
            }
        }
        run_all(futs);
        let mut out = [0u8; 16];
        for (k, writes) in last.borrow().iter() {
            assert_eq!(
                block(handles[0].get(&k.to_be_bytes(), &mut out)).unwrap(),
                Some(16)
            );
            let w = u64::from_le_bytes(out[..8].try_into().unwrap());
            let q = u64::from_le_bytes(out[8..].try_into().unwrap());
            assert!(
                writes.contains(&(w, q)),
                "key {k} holds ({w},{q}), never written"
            );
        }
        if t == Techniques::SMART {
            let combined: u64 = handles.iter().map(|h| h.stats().combined_writes).sum();
            assert!(combined > 0, "no write was combined");
        }
    }
}

/// A grow or a prefix split of a node whose parent is being grown (parent header and slots
/// frozen) must not swing the frozen parent slot: the parent's copy holds the old value, so
/// it would keep pointing at the node that the grow or split retired, and every later search
/// through the copy would restart forever (the livelock the simulated cluster found).
#[test]
fn nothing_swings_a_slot_of_a_node_being_grown() {
    for cache in [true, false] {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let mut t = Techniques::SMART;
        t.cache = cache;
        let mut cfg = SmartConfig::new(t, KeyMode::Fixed(8), 8);
        cfg.max_restarts = 20;
        let s = block(Smart::open(&ep, cfg)).unwrap();
        // P (depth 1, under root slot 1): slot 0 -> N (a full Node4 at depth 7 with the
        // compressed prefix 0 0 0 0 0), slot 1 -> the leaf of [1, 1, 0, ..].
        let own = |b: u8| [1, 0, 0, 0, 0, 0, 0, b];
        for b in 0..4 {
            block(s.upsert(&own(b), &[b])).unwrap();
        }
        block(s.upsert(&[1, 1, 0, 0, 0, 0, 0, 0], b"p")).unwrap();
        let root = block(s.read_node(s.root, NodeType::N256)).unwrap();
        let Ok(SlotKind::Node { addr: p, ty, .. }) = root.slots[1].kind() else {
            panic!("root slot 1 is not a node: {:?}", root.slots[1]);
        };
        let pimg = block(s.read_node(p, ty)).unwrap();
        assert_eq!((ty, pimg.header.depth()), (NodeType::N4, 1));
        let Ok(SlotKind::Node {
            addr: n, ty: nty, ..
        }) = pimg.slots[0].kind()
        else {
            panic!("P slot 0 is not a node: {:?}", pimg.slots[0]);
        };
        assert_eq!(nty, NodeType::N4);
        // Freeze P as a grower does (header, then every slot), and keep it frozen.
        let (po, no) = (p.offset() as usize, n.offset() as usize);
        let (psz, nsz) = (NodeType::N4.bytes(), NodeType::N4.bytes());
        let frozen: Vec<u8> = {
            let mut mm = m.borrow_mut();
            for w in 1..psz / 8 {
                mm[po + 8 * w + 7] |= 0x80;
            }
            mm[po..po + psz].to_vec()
        };
        let n_before = m.borrow()[no..no + nsz].to_vec();
        // A grow of N (a fifth key) and a prefix split of N (a key leaving N's prefix at
        // position 3) both need P's slot 0: they must wait for P's grow, not write into P.
        for key in [own(4), [1, 0, 0, 9, 0, 0, 0, 0]] {
            let r = block(s.upsert(&key, b"x"));
            assert!(
                matches!(
                    r,
                    Err(SmartError::Contention { .. } | SmartError::Held { holder: 0, .. })
                ),
                "upsert {key:?} under a frozen parent: {r:?} (cache {cache})"
            );
            let mm = m.borrow();
            assert_eq!(&mm[po..po + psz], &frozen[..], "the frozen parent changed");
            assert_eq!(&mm[no..no + nsz], &n_before[..], "the child changed");
        }
        // Once P's grow gives up (unfrozen again), both inserts go through.
        {
            let mut mm = m.borrow_mut();
            for w in 1..psz / 8 {
                mm[po + 8 * w + 7] &= 0x7f;
            }
        }
        block(s.upsert(&own(4), &[4])).unwrap();
        block(s.upsert(&[1, 0, 0, 9, 0, 0, 0, 0], b"q")).unwrap();
        let mut out = [0u8; 8];
        for b in 0..5 {
            assert_eq!(block(s.get(&own(b), &mut out)).unwrap(), Some(1));
            assert_eq!(out[0], b);
        }
        for (k, v) in [
            ([1, 1, 0, 0, 0, 0, 0, 0], b"p"),
            ([1, 0, 0, 9, 0, 0, 0, 0], b"q"),
        ] {
            assert_eq!(block(s.get(&k, &mut out)).unwrap(), Some(1));
            assert_eq!(&out[..1], v);
        }
    }
}

#[test]
fn delegation_shares_reads_and_stays_linearizable() {
    // Eight coroutines read one key while a ninth keeps updating it: readers that arrive
    // while a read is in flight share the next read, and no reader sees a value older than
    // one it saw before (each reader's sequence numbers never go backwards).
    let m = memory(4 << 20);
    let ep = endpoint(&m);
    let s = block(Smart::open(
        &ep,
        SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8),
    ))
    .unwrap();
    block(s.upsert(&5u64.to_be_bytes(), &0u64.to_le_bytes())).unwrap();
    let before = s.counters();
    let s = &s;
    let mut futs: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for _ in 0..8 {
        futs.push(Box::pin(async move {
            let mut out = [0u8; 8];
            let mut seen = 0u64;
            for _ in 0..200 {
                assert_eq!(s.get(&5u64.to_be_bytes(), &mut out).await.unwrap(), Some(8));
                let v = u64::from_le_bytes(out);
                assert!(v >= seen, "went backwards: {v} after {seen}");
                seen = v;
            }
        }));
    }
    futs.push(Box::pin(async move {
        for i in 1..=100u64 {
            s.upsert(&5u64.to_be_bytes(), &i.to_le_bytes())
                .await
                .unwrap();
        }
    }));
    run_all(futs);
    let d = s.counters() - before;
    let st = s.stats();
    assert!(st.delegated_reads > 400, "delegated {}", st.delegated_reads);
    assert!(d.verb(crate::fabric::Verb::Read) < 1600 - 400);
}

#[test]
fn bad_keys_and_values_are_errors() {
    let m = memory(4 << 20);
    let ep = endpoint(&m);
    let s = block(Smart::open(
        &ep,
        SmartConfig::new(Techniques::SMART, KeyMode::Variable, 8),
    ))
    .unwrap();
    assert!(matches!(
        block(s.upsert(b"a\0b", b"x")),
        Err(SmartError::BadKey { .. })
    ));
    assert!(matches!(
        block(s.upsert(b"ab", &[0; 9])),
        Err(SmartError::ValueTooLarge { .. })
    ));
    block(s.upsert(b"ab", &[7; 8])).unwrap();
    let mut small = [0u8; 4];
    assert!(matches!(
        block(s.get(b"ab", &mut small)),
        Err(SmartError::BufferTooSmall { .. })
    ));
    // Another configuration cannot open the same tree.
    let ep2 = endpoint(&m);
    assert!(matches!(
        block(Smart::open(
            &ep2,
            SmartConfig::new(Techniques::BASELINE, KeyMode::Variable, 8)
        )),
        Err(SmartError::Mismatch { .. })
    ));
}

#[test]
fn corrupt_leaf_is_an_error_not_a_panic() {
    let m = memory(4 << 20);
    let ep = endpoint(&m);
    let mut cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    cfg.max_checksum_retries = 5;
    let s = block(Smart::open(&ep, cfg)).unwrap();
    block(s.upsert(&1u64.to_be_bytes(), b"abcdefgh")).unwrap();
    // Find the value bytes in memory and flip one.
    {
        let mut mem = m.borrow_mut();
        let at = mem.windows(8).position(|w| w == b"abcdefgh").unwrap();
        mem[at] ^= 1;
    }
    let mut out = [0u8; 8];
    assert!(matches!(
        block(s.get(&1u64.to_be_bytes(), &mut out)),
        Err(SmartError::Checksum { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Strings over a two-letter alphabet share long prefixes: every insert order causes
    /// leaf splits (with chains of nodes past 6 common bytes) and prefix splits.
    #[test]
    fn prefix_and_leaf_splits_keep_every_key(
        keys in proptest::collection::btree_set("[ab]{1,20}", 1..80),
        order in any::<u64>(),
        lock_free in any::<bool>(),
    ) {
        let mut keys: Vec<Vec<u8>> = keys.into_iter().map(String::into_bytes).collect();
        let mut r = order | 1;
        for i in (1..keys.len()).rev() {
            keys.swap(i, (xorshift(&mut r) % (i as u64 + 1)) as usize);
        }
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let mut t = Techniques::SMART;
        t.lock_free_internal = lock_free;
        let s = block(Smart::open(&ep, SmartConfig::new(t, KeyMode::Variable, 8))).unwrap();
        for (i, k) in keys.iter().enumerate() {
            block(s.upsert(k, &(i as u64).to_le_bytes())).unwrap();
        }
        let mut out = [0u8; 8];
        for (i, k) in keys.iter().enumerate() {
            prop_assert_eq!(block(s.get(k, &mut out)).unwrap(), Some(8));
            prop_assert_eq!(u64::from_le_bytes(out), i as u64);
        }
        prop_assert_eq!(block(s.get(b"c", &mut out)).unwrap(), None);
        let mut all = Vec::new();
        block(s.scan(b"", usize::MAX, &mut |k, _| all.push(k.to_vec()))).unwrap();
        let mut sorted = keys.clone();
        sorted.sort();
        prop_assert_eq!(all, sorted);
        if keys.len() > 10 {
            prop_assert!(s.stats().leaf_splits > 0);
        }
    }

    /// Integer keys with random byte patterns exercise growth at every depth.
    #[test]
    fn growth_keeps_every_key(keys in proptest::collection::btree_set(0u64..1 << 20, 1..400)) {
        let m = memory(32 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8))).unwrap();
        for k in &keys {
            block(s.upsert(&(k << 20).to_be_bytes(), &k.to_le_bytes())).unwrap();
        }
        let mut out = [0u8; 8];
        for k in &keys {
            prop_assert_eq!(block(s.get(&(k << 20).to_be_bytes(), &mut out)).unwrap(), Some(8));
            prop_assert_eq!(u64::from_le_bytes(out), *k);
        }
        let mut n = 0;
        block(s.scan(&[], usize::MAX, &mut |_, _| n += 1)).unwrap();
        prop_assert_eq!(n, keys.len());
    }
}

/// Lock waits spin as the authors' code does (`spin_locks`, the default with write
/// combining): every retry pauses 1 ns, where a backing-off wait (the default without)
/// doubles from `min_backoff_ns`; without a clock the attempt cap stays the bound.
#[test]
fn lock_waits_spin_with_combining_and_back_off_without() {
    let m = memory(16 << 20);
    let ep = endpoint(&m);
    let default = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    assert!(default.spin_locks);
    let no_combining = Techniques {
        combining: false,
        ..Techniques::SMART
    };
    let backing_off = SmartConfig::new(no_combining, KeyMode::Fixed(8), 8);
    assert!(!backing_off.spin_locks);
    let b = block(Smart::open(&ep, backing_off)).unwrap();
    assert_eq!(b.lock_lease(5), backing_off.lease);
    let mut w = crate::lease::Waiter::new(b.lock_lease(5), 5);
    let first = backing_off.lease.min_backoff_ns;
    assert_eq!(w.observe(42, 6), Verdict::Wait(first));
    assert_eq!(w.observe(42, 9), Verdict::Wait(2 * first));
    let spin_cfg = SmartConfig {
        techniques: no_combining,
        ..default
    };
    let s = block(Smart::open(&ep, spin_cfg)).unwrap();
    let on_clock = s.lock_lease(5);
    assert_eq!((on_clock.min_backoff_ns, on_clock.max_backoff_ns), (1, 1));
    assert_eq!(on_clock.max_attempts, u32::MAX);
    assert_eq!(on_clock.lease_ns, spin_cfg.lease.lease_ns);
    assert_eq!(on_clock.deadline_ns, spin_cfg.lease.deadline_ns);
    assert_eq!(s.lock_lease(0).max_attempts, spin_cfg.lease.max_attempts);
    let mut w = crate::lease::Waiter::new(on_clock, 5);
    assert_eq!(w.observe(42, 6), Verdict::Wait(1));
    assert_eq!(w.observe(42, 9), Verdict::Wait(1));
}

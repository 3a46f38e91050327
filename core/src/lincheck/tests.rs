//! Hand-built histories, randomized linearizable histories and their mutants.
extern crate std;
use super::*;
use std::collections::BTreeMap;
use std::println;
use std::string::ToString;
use std::vec::Vec;

const K: u64 = 0x10;

/// A hand-built history: `call`/`ret` are both order stamps and printed times.
#[derive(Default)]
struct Hb(History);

impl Hb {
    fn op(&mut self, client: u32, call: u64, ret: u64, op: Op, outcome: Outcome) -> &mut Self {
        let e = Event {
            client,
            call,
            ret,
            call_ns: call,
            ret_ns: ret,
            op,
            outcome,
        };
        self.0.push(e, &[]);
        self
    }
    fn items(
        &mut self,
        client: u32,
        call: u64,
        ret: u64,
        op: Op,
        items: &[(u64, u64)],
    ) -> &mut Self {
        let e = Event {
            client,
            call,
            ret,
            call_ns: call,
            ret_ns: ret,
            op,
            outcome: Outcome::Items { start: 0, len: 0 },
        };
        self.0.push(e, items);
        self
    }
    fn upsert(&mut self, c: u32, call: u64, ret: u64, key: u64, value: u64) -> &mut Self {
        self.op(c, call, ret, Op::Upsert { key, value }, Outcome::Done)
    }
    fn update(&mut self, c: u32, call: u64, ret: u64, key: u64, value: u64, r: bool) -> &mut Self {
        self.op(c, call, ret, Op::Update { key, value }, Outcome::Present(r))
    }
    fn delete(&mut self, c: u32, call: u64, ret: u64, key: u64, r: bool) -> &mut Self {
        self.op(c, call, ret, Op::Delete { key }, Outcome::Present(r))
    }
    fn get(&mut self, c: u32, call: u64, ret: u64, key: u64, r: Option<u64>) -> &mut Self {
        self.op(c, call, ret, Op::Get { key }, Outcome::Value(r))
    }
    fn report(&self) -> Report {
        let r = check(&self.0, &CheckConfig::new(7));
        println!("{r}");
        r
    }
    fn passes(&self) {
        let r = self.report();
        assert!(r.is_ok(), "expected linearizable:\n{r}");
    }
    fn fails(&self) -> Report {
        let r = self.report();
        assert!(!r.violations.is_empty(), "expected a violation:\n{r}");
        assert!(r.violations[0].to_string().contains("seed 7"));
        r
    }
}

fn a() -> u64 {
    tag(1, 1)
}
fn b() -> u64 {
    tag(2, 1)
}

#[test]
fn erda_delete_update_get_is_a_violation() {
    let mut h = Hb::default();
    h.upsert(1, 0, 10, K, a())
        .delete(1, 20, 30, K, true)
        .update(2, 22, 28, K, b(), false)
        .get(3, 40, 50, K, Some(a()));
    let r = h.fails();
    assert_eq!(r.violations[0].subject, "key 0x10");
    // The update may race the delete; the get after both cannot see the old value.
    let mut ok = Hb::default();
    ok.upsert(1, 0, 10, K, a())
        .delete(1, 20, 30, K, true)
        .update(2, 22, 28, K, b(), false)
        .get(3, 40, 50, K, None);
    ok.passes();
}

#[test]
fn classic_concurrent_histories_pass() {
    let mut h = Hb::default();
    h.upsert(1, 0, 100, K, a())
        .get(2, 10, 20, K, Some(a()))
        .get(3, 5, 15, K, None)
        .upsert(4, 30, 60, K, b())
        .get(3, 35, 40, K, Some(a()))
        .get(2, 70, 80, K, Some(b()))
        .update(1, 110, 120, K, tag(1, 2), true)
        .delete(2, 115, 130, K, true)
        .delete(3, 118, 125, K, false)
        .get(4, 140, 150, K, None);
    h.passes();
    // Two concurrent writers, readers disagreeing on the order only while both run.
    let mut w = Hb::default();
    w.upsert(1, 0, 50, K, a())
        .upsert(2, 0, 50, K, b())
        .get(3, 10, 20, K, Some(b()))
        .get(4, 30, 40, K, Some(a()))
        .get(3, 60, 70, K, Some(a()));
    w.passes();
}

#[test]
fn stale_read_after_a_completed_write_fails() {
    let mut h = Hb::default();
    h.upsert(1, 0, 10, K, a())
        .upsert(2, 20, 30, K, b())
        .get(3, 40, 50, K, Some(a()));
    h.fails();
    // Readers that see the new value and then the old one, both after the write began.
    let mut r = Hb::default();
    r.upsert(1, 0, 10, K, a())
        .upsert(2, 20, 100, K, b())
        .get(3, 30, 40, K, Some(b()))
        .get(4, 50, 60, K, Some(a()));
    r.fails();
    // Read of a value never written.
    let mut n = Hb::default();
    n.get(1, 0, 10, K, Some(tag(9, 9)));
    n.fails();
}

#[test]
fn a_delete_racing_gets() {
    let mut h = Hb::default();
    h.upsert(1, 0, 10, K, a())
        .delete(2, 20, 60, K, true)
        .get(3, 25, 30, K, Some(a()))
        .get(4, 35, 40, K, None)
        .get(3, 45, 50, K, None);
    h.passes();
    let mut f = Hb::default();
    f.upsert(1, 0, 10, K, a())
        .delete(2, 20, 60, K, true)
        .get(3, 25, 30, K, None)
        .get(4, 35, 40, K, Some(a()));
    f.fails();
    // Conditional ops on an absent key.
    let mut u = Hb::default();
    u.update(1, 0, 10, K, a(), true);
    u.fails();
    let mut d = Hb::default();
    d.delete(1, 0, 10, K, true);
    d.fails();
}

#[test]
fn unknown_outcomes_count_both_ways() {
    let pending = |h: &mut Hb, c, call, op| {
        h.op(c, call, PENDING, op, Outcome::Unknown);
    };
    // A delete of unknown outcome: later gets may see it done, or not done.
    for seen in [None, Some(a())] {
        let mut h = Hb::default();
        h.upsert(1, 0, 10, K, a());
        pending(&mut h, 2, 20, Op::Delete { key: K });
        h.get(3, 50, 60, K, seen);
        h.passes();
    }
    // ...but not both, in that order.
    let mut h = Hb::default();
    h.upsert(1, 0, 10, K, a());
    pending(&mut h, 2, 20, Op::Delete { key: K });
    h.get(3, 50, 60, K, None).get(3, 70, 80, K, Some(a()));
    h.fails();
    // An upsert of unknown outcome may explain a read, not before its invocation.
    let mut h = Hb::default();
    pending(&mut h, 1, 20, Op::Upsert { key: K, value: a() });
    h.get(2, 30, 40, K, Some(a())).get(2, 50, 60, K, Some(a()));
    h.passes();
    let mut h = Hb::default();
    pending(&mut h, 1, 20, Op::Upsert { key: K, value: a() });
    h.get(2, 0, 10, K, Some(a()));
    h.fails();
    // An update of unknown outcome on an absent key changes nothing.
    let mut h = Hb::default();
    pending(&mut h, 1, 0, Op::Update { key: K, value: a() });
    h.get(2, 30, 40, K, Some(a()));
    h.fails();
    // An unknown get says nothing.
    let mut h = Hb::default();
    pending(&mut h, 1, 0, Op::Get { key: K });
    h.passes();
}

#[test]
fn shrinking_keeps_the_failure_small() {
    let mut h = Hb::default();
    h.upsert(1, 0, 10, K, a());
    // Noise: a long linearizable run of another client's updates and gets.
    for i in 0..60u64 {
        let t = 100 + i * 20;
        h.update(4, t, t + 5, K, tag(4, i as u32 + 1), true).get(
            5,
            t + 8,
            t + 12,
            K,
            Some(tag(4, i as u32 + 1)),
        );
    }
    h.delete(1, 2000, 2010, K, true)
        .update(2, 2002, 2008, K, b(), false)
        .get(3, 2020, 2030, K, Some(tag(4, 60)));
    let r = h.fails();
    let w = &r.violations[0].witness;
    assert!(w.events.len() <= 4, "not shrunk:\n{r}");
    // The witness fails on its own.
    assert!(!check(w, &CheckConfig::new(7)).is_ok());
    // An upsert racing everything leaves no quiescent point: the witness keeps the writes,
    // and a short core is found as well.
    h.upsert(9, 50, 5000, K, tag(9, 1));
    let r = h.fails();
    let v = &r.violations[0];
    assert!(v.witness.events.len() > 12, "{r}");
    let core = v.core.as_ref().expect("a core for a long witness");
    assert!(core.events.len() <= 4, "{r}");
    assert!(!check(core, &CheckConfig::new(7)).is_ok() || v.omitted_before > 0);
}

#[test]
fn scans_returning_a_value_never_present_fail() {
    let mut h = Hb::default();
    h.upsert(1, 0, 10, 1, a())
        .upsert(1, 20, 30, 1, tag(1, 2))
        .items(2, 40, 50, Op::Scan { from: 0, limit: 8 }, &[(1, a())]);
    h.fails();
    // Concurrent with the overwrite: either value may be returned.
    let mut h = Hb::default();
    h.upsert(1, 0, 10, 1, a())
        .upsert(1, 20, 45, 1, tag(1, 2))
        .items(2, 40, 50, Op::Scan { from: 0, limit: 8 }, &[(1, a())]);
    h.passes();
    // Deleted before the scan began.
    let mut h = Hb::default();
    h.upsert(1, 0, 10, 1, a()).delete(1, 20, 30, 1, true).items(
        2,
        40,
        50,
        Op::Scan { from: 0, limit: 8 },
        &[(1, a())],
    );
    h.fails();
    // Never written, or not sorted.
    let mut h = Hb::default();
    h.items(2, 40, 50, Op::Scan { from: 0, limit: 8 }, &[(1, a())]);
    h.fails();
    let mut h = Hb::default();
    h.upsert(1, 0, 10, 1, a()).upsert(1, 0, 10, 2, b()).items(
        2,
        40,
        50,
        Op::Scan { from: 0, limit: 8 },
        &[(2, b()), (1, a())],
    );
    h.fails();
}

#[test]
fn scans_missing_a_key_present_throughout_fail() {
    let base = |h: &mut Hb| {
        h.upsert(1, 0, 10, 1, a())
            .upsert(1, 0, 10, 2, b())
            .upsert(1, 0, 10, 3, tag(3, 1));
    };
    let mut h = Hb::default();
    base(&mut h);
    h.items(
        2,
        40,
        50,
        Op::Scan { from: 0, limit: 8 },
        &[(1, a()), (3, tag(3, 1))],
    );
    let r = h.fails();
    assert!(r.violations[0].reason.contains("missed 0x2"), "{r}");
    // A delete racing the scan excuses the miss.
    let mut h = Hb::default();
    base(&mut h);
    h.delete(3, 45, 60, 2, true).items(
        2,
        40,
        50,
        Op::Scan { from: 0, limit: 8 },
        &[(1, a()), (3, tag(3, 1))],
    );
    h.passes();
    // A delete of unknown outcome excuses it too.
    let mut h = Hb::default();
    base(&mut h);
    h.op(3, 20, PENDING, Op::Delete { key: 2 }, Outcome::Unknown);
    h.items(
        2,
        40,
        50,
        Op::Scan { from: 0, limit: 8 },
        &[(1, a()), (3, tag(3, 1))],
    );
    h.passes();
    // With the limit reached, keys past the last one returned are not required.
    let mut h = Hb::default();
    base(&mut h);
    h.items(
        2,
        40,
        50,
        Op::Scan { from: 0, limit: 2 },
        &[(1, a()), (2, b())],
    );
    h.passes();
    // Below `from`: not required.
    let mut h = Hb::default();
    base(&mut h);
    h.items(
        2,
        40,
        50,
        Op::Scan { from: 2, limit: 8 },
        &[(2, b()), (3, tag(3, 1))],
    );
    h.passes();
    // Inserted during the scan: optional.
    let mut h = Hb::default();
    h.upsert(1, 0, 10, 1, a()).upsert(3, 42, 48, 2, b()).items(
        2,
        40,
        50,
        Op::Scan { from: 0, limit: 8 },
        &[(1, a())],
    );
    h.passes();
}

fn r(x0: i32, y0: i32, x1: i32, y1: i32) -> Rect {
    Rect::new(x0, y0, x1, y1).unwrap()
}

#[test]
fn rectangle_searches() {
    let (r1, r2, far) = (r(0, 0, 10, 10), r(5, 5, 20, 20), r(100, 100, 110, 110));
    let win = r(0, 0, 12, 12);
    let build = |h: &mut Hb| {
        h.op(1, 0, 10, Op::Insert { rect: r1, id: 1 }, Outcome::Done)
            .op(1, 0, 10, Op::Insert { rect: r2, id: 2 }, Outcome::Done)
            .op(1, 0, 10, Op::Insert { rect: far, id: 3 }, Outcome::Done);
    };
    let s = Op::Search { window: win };
    let mut h = Hb::default();
    build(&mut h);
    h.items(2, 40, 50, s, &[(1, 0), (2, 0)]);
    h.passes();
    // Missed an entry present throughout that intersects the window.
    let mut h = Hb::default();
    build(&mut h);
    h.items(2, 40, 50, s, &[(1, 0)]);
    h.fails();
    // Returned an entry outside the window.
    let mut h = Hb::default();
    build(&mut h);
    h.items(2, 40, 50, s, &[(1, 0), (2, 0), (3, 0)]);
    h.fails();
    // Returned an entry removed before the search.
    let mut h = Hb::default();
    build(&mut h);
    h.op(
        3,
        20,
        30,
        Op::Remove { rect: r2, id: 2 },
        Outcome::Present(true),
    );
    h.items(2, 40, 50, s, &[(1, 0), (2, 0)]);
    h.fails();
    // Removed during the search: either way.
    for got in [&[(1, 0), (2, 0)][..], &[(1, 0)][..]] {
        let mut h = Hb::default();
        build(&mut h);
        h.op(
            3,
            42,
            48,
            Op::Remove { rect: r2, id: 2 },
            Outcome::Present(true),
        );
        h.items(2, 40, 50, s, got);
        h.passes();
    }
    // Per-entry insert/remove histories are searched like keys.
    let mut h = Hb::default();
    h.op(1, 0, 10, Op::Insert { rect: r1, id: 1 }, Outcome::Done)
        .op(
            1,
            20,
            30,
            Op::Remove { rect: r1, id: 1 },
            Outcome::Present(true),
        )
        .op(
            2,
            40,
            50,
            Op::Remove { rect: r1, id: 1 },
            Outcome::Present(true),
        );
    h.fails();
}

/// A small xorshift generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A linearizable history: `clients` clients, each with one operation at a time; each
/// operation takes effect (on a sequential model) at a random point inside its interval.
fn generate(seed: u64, clients: u32, ops: usize, keys: u64, scans: bool) -> History {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    // (lin point, client, call, ret, op)
    let mut heap = std::collections::BinaryHeap::new();
    let mut seqs = std::vec![0u32; clients as usize + 1];
    let next_op = |rng: &mut Rng, c: u32, seqs: &mut Vec<u32>| -> Op {
        let key = rng.below(keys);
        seqs[c as usize] += 1;
        let value = tag(c, seqs[c as usize]);
        match rng.below(20) {
            0..=5 => Op::Upsert { key, value },
            6..=8 => Op::Update { key, value },
            9..=11 => Op::Delete { key },
            12 if scans => Op::Scan {
                from: key,
                limit: 1 + rng.below(4) as u32,
            },
            _ => Op::Get { key },
        }
    };
    for c in 1..=clients {
        let call = rng.below(50);
        let lin = call + 1 + rng.below(40);
        let ret = lin + 1 + rng.below(40);
        let op = next_op(&mut rng, c, &mut seqs);
        heap.push(core::cmp::Reverse((lin, c, call, ret, op_key(op), op)));
    }
    let mut done = Vec::new();
    let mut h = History::default();
    while done.len() < ops {
        let core::cmp::Reverse((_, c, call, ret, _, op)) = heap.pop().unwrap();
        let (outcome, items) = match op {
            Op::Upsert { key, value } => {
                model.insert(key, value);
                (Outcome::Done, Vec::new())
            }
            Op::Update { key, value } => match model.get_mut(&key) {
                Some(v) => {
                    *v = value;
                    (Outcome::Present(true), Vec::new())
                }
                None => (Outcome::Present(false), Vec::new()),
            },
            Op::Delete { key } => (Outcome::Present(model.remove(&key).is_some()), Vec::new()),
            Op::Get { key } => (Outcome::Value(model.get(&key).copied()), Vec::new()),
            Op::Scan { from, limit } => {
                let items: Vec<(u64, u64)> = model
                    .range(from..)
                    .take(limit as usize)
                    .map(|(k, v)| (*k, *v))
                    .collect();
                (Outcome::Items { start: 0, len: 0 }, items)
            }
            _ => unreachable!(),
        };
        done.push((
            Event {
                client: c,
                call,
                ret,
                call_ns: call,
                ret_ns: ret,
                op,
                outcome,
            },
            items,
        ));
        let call2 = ret + 1 + rng.below(10);
        let lin = call2 + 1 + rng.below(40);
        let ret2 = lin + 1 + rng.below(40);
        let op2 = next_op(&mut rng, c, &mut seqs);
        heap.push(core::cmp::Reverse((lin, c, call2, ret2, op_key(op2), op2)));
    }
    for (e, items) in done {
        h.push(e, &items);
    }
    h
}

/// Ops are not `Ord`: order heap entries by a number instead.
fn op_key(op: Op) -> u64 {
    match op {
        Op::Upsert { value, .. } | Op::Update { value, .. } => value,
        _ => 0,
    }
}

/// Changes one result so that it disagrees with the sequential model.
fn mutate(h: &mut History, rng: &mut Rng) -> bool {
    for _ in 0..100 {
        let i = rng.below(h.events.len() as u64) as usize;
        let e = &mut h.events[i];
        e.outcome = match (e.op, e.outcome) {
            (_, Outcome::Present(x)) => Outcome::Present(!x),
            (_, Outcome::Value(None)) => Outcome::Value(Some(tag(1, 1))),
            (_, Outcome::Value(Some(v))) => {
                if rng.below(2) == 0 {
                    Outcome::Value(None)
                } else {
                    Outcome::Value(Some(v ^ 1))
                }
            }
            _ => continue,
        };
        return true;
    }
    false
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn random_linearizable_histories_pass(seed in 1u64..u64::MAX, clients in 1u32..12, keys in 1u64..5) {
        let mut h = generate(seed, clients, 300, keys, true);
        // Forgetting some outcomes (a client crash) keeps a history linearizable.
        let mut rng = Rng(seed | 1);
        for e in h.events.iter_mut() {
            if rng.below(30) == 0 {
                e.outcome = Outcome::Unknown;
                e.ret = PENDING;
            }
        }
        let r = check(&h, &CheckConfig::new(seed));
        proptest::prop_assert!(r.is_ok(), "{}", r);
    }
}

#[test]
fn mutating_one_result_usually_fails() {
    let mut rng = Rng(12345);
    let (mut tried, mut failed) = (0, 0);
    for seed in 1..=60u64 {
        let mut h = generate(seed, 6, 200, 3, false);
        assert!(check(&h, &CheckConfig::new(seed)).is_ok());
        if !mutate(&mut h, &mut rng) {
            continue;
        }
        tried += 1;
        let r = check(&h, &CheckConfig::new(seed));
        if !r.violations.is_empty() {
            failed += 1;
            // The shrunk witness fails on its own.
            assert!(!check(&r.violations[0].witness, &CheckConfig::new(seed)).is_ok());
        }
    }
    println!("{failed}/{tried} mutants refuted");
    assert!(tried >= 50 && failed * 10 >= tried * 7, "{failed}/{tried}");
}

#[test]
fn recorder_is_bounded_and_says_when_full() {
    let rec = Recorder::new(2, 4);
    let s = rec.invoke(1, Op::Upsert { key: 1, value: a() }, 5).unwrap();
    rec.complete(s, Outcome::Done, 9);
    let s2 = rec.invoke(2, Op::Scan { from: 0, limit: 8 }, 10).unwrap();
    rec.complete_items(s2, &[(1, a())], 12);
    assert!(rec.invoke(1, Op::Get { key: 1 }, 13).is_none());
    assert!(rec.is_full());
    let e = rec.finish().unwrap_err();
    assert!(e.to_string().contains("recorder full"));
    // Record order gives the stamps; a pending op stays pending.
    let rec = Recorder::new(4, 4);
    let s = rec.invoke(1, Op::Upsert { key: 1, value: a() }, 0).unwrap();
    rec.complete(s, Outcome::Done, 0);
    let g = rec.invoke(2, Op::Get { key: 1 }, 0).unwrap();
    rec.complete(g, Outcome::Value(None), 0);
    let d = rec.invoke(3, Op::Delete { key: 1 }, 0).unwrap();
    rec.complete(d, Outcome::Unknown, 0);
    let h = rec.finish().unwrap();
    assert_eq!(h.events[2].ret, PENDING);
    // Same clock time, but the get came after the upsert returned: stale.
    assert!(!check(&h, &CheckConfig::new(1)).is_ok());
    // Merged by clock time instead, equal times are concurrent: fine.
    assert!(check(&History::merge(std::vec![h]), &CheckConfig::new(1)).is_ok());
}

/// Throughput figure (printed, not asserted): 10^5-operation histories (10^6 in release
/// builds): 64 clients on one key, 32 clients on 4 hot keys, 64 clients on 10 000 keys.
#[test]
fn throughput_figure() {
    let n = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    for (clients, keys) in [(64u32, 1u64), (32u32, 4u64), (64, 10_000)] {
        let h = generate(99, clients, n, keys, false);
        let t0 = std::time::Instant::now();
        let r = check(&h, &CheckConfig::new(99));
        let dt = t0.elapsed().as_secs_f64();
        assert!(r.is_ok(), "{r}");
        println!(
            "lincheck: {} ops, {clients} clients, {keys} keys: {:.2} s, {:.0} ops/s, {} nodes",
            r.ops,
            dt,
            r.ops as f64 / dt,
            r.nodes
        );
    }
}

/// A toy index over a `BTreeMap`, each operation yielding before and after it takes effect
/// (so clients overlap), with optional bugs.
struct Toy {
    map: core::cell::RefCell<BTreeMap<u64, u64>>,
    /// Previous value of each key (for the stale-read bug).
    prev: core::cell::RefCell<BTreeMap<u64, u64>>,
    bug: Option<&'static str>,
    n: core::cell::Cell<u64>,
}

impl Toy {
    fn new(bug: Option<&'static str>) -> Toy {
        Toy {
            map: Default::default(),
            prev: Default::default(),
            bug,
            n: Default::default(),
        }
    }
    async fn pause(&self) {
        self.n.set(self.n.get() + 1);
        for _ in 0..(self.n.get() * 7919) % 3 {
            crate::block_on::yield_now().await;
        }
    }
    fn key(k: &[u8]) -> u64 {
        u64::from_be_bytes(k.try_into().unwrap())
    }
    fn tag_of(v: &[u8]) -> u64 {
        u64::from_le_bytes(v[..8].try_into().unwrap())
    }
    fn set(&self, k: u64, v: u64) {
        if let Some(old) = self.map.borrow_mut().insert(k, v) {
            self.prev.borrow_mut().insert(k, old);
        }
    }
}

impl crate::index::KvIndex for Toy {
    type Error = &'static str;
    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), &'static str> {
        self.pause().await;
        self.set(Self::key(key), Self::tag_of(value));
        self.pause().await;
        Ok(())
    }
    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, &'static str> {
        self.pause().await;
        let k = Self::key(key);
        let present = self.map.borrow().contains_key(&k);
        if present {
            self.set(k, Self::tag_of(value));
        }
        self.pause().await;
        Ok(present)
    }
    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, &'static str> {
        self.pause().await;
        let k = Self::key(key);
        let mut v = self.map.borrow().get(&k).copied();
        if self.bug == Some("stale") && self.n.get().is_multiple_of(5) {
            v = self.prev.borrow().get(&k).copied().or(v);
        }
        self.pause().await;
        Ok(v.map(|v| {
            out[..8].copy_from_slice(&v.to_le_bytes());
            8
        }))
    }
    async fn delete(&self, key: &[u8]) -> Result<bool, &'static str> {
        self.pause().await;
        let k = Self::key(key);
        let keep = self.bug == Some("lost delete") && self.n.get().is_multiple_of(3);
        let present = if keep {
            self.map.borrow().contains_key(&k)
        } else {
            self.map.borrow_mut().remove(&k).is_some()
        };
        self.pause().await;
        Ok(present)
    }
    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, &'static str> {
        self.pause().await;
        let skip = self.bug == Some("scan skips");
        let items: Vec<(u64, u64)> = self
            .map
            .borrow()
            .range(Self::key(from)..)
            .skip(usize::from(skip && self.n.get().is_multiple_of(2)))
            .take(limit)
            .map(|(k, v)| (*k, *v))
            .collect();
        self.pause().await;
        for (k, v) in &items {
            visit(&k.to_be_bytes(), &v.to_le_bytes());
        }
        Ok(items.len())
    }
}

/// Runs `clients` drivers concurrently on `toy` (round robin on one thread).
fn drive(toy: &Toy, clients: u32, ops: u64, err_after: Option<u64>) -> History {
    use core::future::Future;
    use core::task::{Context, Poll, Waker};
    let rec = Recorder::new(clients as usize * ops as usize, 1 << 16);
    let t = core::cell::Cell::new(0u64);
    let clock = || {
        t.set(t.get() + 1);
        t.get()
    };
    let specs: Vec<driver::LinSpec> = (1..=clients)
        .map(|c| driver::LinSpec {
            cold: 8,
            ..driver::LinSpec::new(c, ops, 5, true)
        })
        .collect();
    let mut futs: Vec<_> = specs
        .iter()
        .map(|s| std::boxed::Box::pin(driver::lin_client(toy, s, &rec, &clock)))
        .collect();
    let mut done = std::vec![false; futs.len()];
    let mut cx = Context::from_waker(Waker::noop());
    let mut steps = 0u64;
    while done.iter().any(|d| !d) {
        for (i, f) in futs.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            steps += 1;
            if err_after.is_some_and(|n| steps > n) && i == 0 {
                // Client 1 "crashes": its in-flight operation never completes.
                done[i] = true;
                continue;
            }
            if let Poll::Ready(r) = f.as_mut().poll(&mut cx) {
                r.unwrap();
                done[i] = true;
            }
        }
    }
    drop(futs);
    rec.finish().unwrap()
}

#[test]
fn driver_histories_on_a_correct_toy_index_pass() {
    let toy = Toy::new(None);
    let h = drive(&toy, 8, 300, None);
    let r = check(&h, &CheckConfig::new(5));
    assert!(r.is_ok(), "{r}");
    assert!(r.scans > 20 && r.keys > 10, "{r}");
    // A client that dies mid-operation leaves it pending; still linearizable.
    let toy = Toy::new(None);
    let h = drive(&toy, 8, 300, Some(500));
    assert!(h.events.iter().any(|e| e.ret == PENDING));
    let r = check(&h, &CheckConfig::new(5));
    assert!(r.is_ok(), "{r}");
}

#[test]
fn driver_histories_on_buggy_toy_indexes_fail() {
    for bug in ["stale", "lost delete", "scan skips"] {
        let toy = Toy::new(Some(bug));
        let h = drive(&toy, 8, 300, None);
        let r = check(&h, &CheckConfig::new(5));
        println!("{bug}: {r}");
        assert!(!r.violations.is_empty(), "{bug} not caught");
    }
}

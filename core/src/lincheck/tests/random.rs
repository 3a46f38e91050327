//! Randomized linearizable histories, their mutants, and the checker's throughput figure.
use super::*;

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

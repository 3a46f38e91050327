//! Hand-built histories and the recorder; randomized histories and their mutants in
//! `random`, the driver on a toy index in `toy`.
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

mod random;
mod toy;

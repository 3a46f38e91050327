//! The table on its own, with a test flavor (8-byte keys and values) and gated reads.
use super::write::RESULTS;
use super::*;
use core::cell::Cell;
use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};

mod pick;

/// 8-byte keys and values, as CHIME's.
enum Test {}

impl Flavor for Test {
    type Key = Inline<8>;
    type Value = Inline<8>;
    type Kind = ();
    type Error = (usize, usize);
    type Scratch = [u8; 8];
    const KEY_CAP: usize = 8;
    const SHARES_ERRORS: bool = false;
    fn home(key: &[u8]) -> u64 {
        key.iter().fold(0, |h, b| h << 8 | *b as u64)
    }
    fn scratch() -> [u8; 8] {
        [0; 8]
    }
    fn too_small(need: usize, got: usize) -> (usize, usize) {
        (need, got)
    }
    fn is_too_small(_: &(usize, usize)) -> bool {
        true
    }
}

fn poll<F: Future>(f: core::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

/// A reader's claim: whether it leads, and the generation it leads or waits for.
fn claim(t: &Table<Test>, key: u64) -> Option<(At, bool, u64)> {
    let key = key.to_be_bytes();
    let f = t.claim(&key, Entry::join_read);
    match poll(pin!(f)) {
        Poll::Ready(r) => r.map(|(at, (lead, g))| (at, lead, g)),
        Poll::Pending => panic!("bucket busy"),
    }
}

/// No clock; a leader seen in flight for 3 polls counts as stuck.
struct NoClock;

impl Host for NoClock {
    fn now_ns(&self) -> u64 {
        0
    }
    fn lease(&self) -> LeaseConfig {
        LeaseConfig {
            max_attempts: 3,
            ..LeaseConfig::default()
        }
    }
    fn value_cap(&self) -> usize {
        8
    }
    fn count(&self, _: Counted) {}
}

/// A remote read that stays in flight until `open` is set.
async fn gated(open: &Cell<bool>, out: &mut [u8]) -> Result<Option<usize>, (usize, usize)> {
    core::future::poll_fn(|_| {
        if open.get() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out[..8].copy_from_slice(&[5; 8]);
    Ok(Some(8))
}

/// Whether `key`'s entry has a read in flight, and its generation.
fn reading(t: &Table<Test>, key: &[u8]) -> (bool, u64) {
    let b = (Test::home(key) as usize) & (t.buckets.len() - 1);
    let g = t.buckets[b].try_lock().unwrap();
    let e = g
        .iter()
        .find(|e| e.users > 0 && e.key.get() == key)
        .unwrap();
    (e.reading, e.read_gen)
}

/// A waiter that leads after a replaced leader's replacer was dropped opens a fresh
/// generation, so the replaced leader, coming back, matches nothing. (When it took its
/// own generation number instead, which the replaced leader held too, the one coming
/// back published, released a count it no longer had and freed the entry under the
/// waiter's read in flight.)
#[test]
fn a_replaced_leader_coming_back_finds_no_generation_of_its_own() {
    use std_alloc::boxed::Box;
    let t = Table::<Test>::with_entries(16, 8);
    let key = 9u64.to_be_bytes();
    let host = NoClock;
    let gates: [Cell<bool>; 4] = Default::default();
    let mut outs = [[0u8; 8]; 4];
    let [o_p, o_l, o_w, o_z] = &mut outs;
    let (g_p, g_l, g_w, g_z) = (&gates[0], &gates[1], &gates[2], &gates[3]);
    let mut p = pin!(t.get(&host, &key, o_p, async |o: &mut [u8]| gated(g_p, o).await));
    assert!(poll(p.as_mut()).is_pending(), "leads generation 1");
    let mut l = pin!(t.get(&host, &key, o_l, async |o: &mut [u8]| gated(g_l, o).await));
    let mut w = pin!(t.get(&host, &key, o_w, async |o: &mut [u8]| gated(g_w, o).await));
    assert!(poll(l.as_mut()).is_pending() && poll(w.as_mut()).is_pending());
    g_p.set(true);
    assert_eq!(poll(p.as_mut()), Poll::Ready(Ok(Some(8))));
    // L (a waiter for generation 2) leads it; Z arrives and replaces it as stuck.
    assert!(poll(l.as_mut()).is_pending());
    assert_eq!(reading(&t, &key), (true, 2));
    let mut z = Box::pin(t.get(&host, &key, o_z, async |o: &mut [u8]| gated(g_z, o).await));
    for _ in 0..20 {
        assert!(poll(z.as_mut()).is_pending());
    }
    assert_eq!(reading(&t, &key), (true, 4), "Z replaced L");
    // Z dies mid-read; W (also a waiter for generation 2) leads next.
    drop(z);
    assert!(!reading(&t, &key).0);
    for _ in 0..2 {
        assert!(poll(w.as_mut()).is_pending());
    }
    assert_eq!(reading(&t, &key), (true, 5), "a fresh generation, not 2");
    // L comes back: it publishes and releases nothing; W's read and count stand.
    g_l.set(true);
    assert_eq!(poll(l.as_mut()), Poll::Ready(Ok(Some(8))));
    assert_eq!(reading(&t, &key), (true, 5));
    assert_eq!(t.users(&key), 1, "only W's count is left");
    g_w.set(true);
    assert_eq!(poll(w.as_mut()), Poll::Ready(Ok(Some(8))));
    assert_eq!(t.users(&key), 0);
}

#[test]
fn a_second_reader_waits_for_the_next_generation() {
    let t = Table::<Test>::with_entries(16, 8);
    let (a, lead, g) = claim(&t, 7).unwrap();
    assert!(lead && g == 1);
    // Arrives while generation 1 is in flight: waits for generation 2, not 1's result.
    let (b, lead, g) = claim(&t, 7).unwrap();
    assert!(!lead && g == 2);
    assert_eq!((a.0, a.1), (b.0, b.1));
    assert_eq!(t.users(&7u64.to_be_bytes()), 2);
    // Another key takes an entry of its own.
    let (_, lead, _) = claim(&t, 8).unwrap();
    assert!(lead);
}

#[test]
fn a_dropped_leader_releases_its_lead_and_count() {
    let t = Table::<Test>::with_entries(16, 8);
    let (at, _, g) = claim(&t, 3).unwrap();
    let _ = claim(&t, 3).unwrap();
    drop(Claim {
        table: &t,
        at,
        lead: Some(Lead::Read(g)),
        seq: None,
        armed: true,
    });
    assert_eq!(
        t.users(&3u64.to_be_bytes()),
        1,
        "the waiter's count is left"
    );
    let g = t.buckets[at.0].try_lock().unwrap();
    assert!(!g[at.1].reading, "the waiter may lead at once");
}

#[test]
fn a_full_bucket_sends_the_reader_direct() {
    let t = Table::<Test>::with_entries(PROBE, 8);
    for k in 0..PROBE as u64 {
        assert!(claim(&t, k).is_some());
    }
    assert!(claim(&t, 1000).is_none());
    let empty = Table::<Test>::with_entries(0, 8);
    assert!(empty.buckets.is_empty());
    assert!(claim(&empty, 1).is_none());
}

/// A clock the test moves; a leader counts as stuck after 1 µs of it.
struct Clocked {
    clock: park::testing::Clock,
    takeovers: Cell<u32>,
}

impl Host for Clocked {
    fn now_ns(&self) -> u64 {
        self.clock.now.get()
    }
    fn lease(&self) -> LeaseConfig {
        LeaseConfig {
            lease_ns: 1_000,
            ..LeaseConfig::default()
        }
    }
    fn value_cap(&self) -> usize {
        8
    }
    fn count(&self, what: Counted) {
        if matches!(what, Counted::TakenOver) {
            self.takeovers.set(self.takeovers.get() + 1);
        }
    }
    fn pause(&self, ns: u64) -> impl Future<Output = ()> {
        self.clock.timer(ns)
    }
}

/// Readers waiting for a read in flight are not polled while it is in flight (they were
/// polled at every executor round, every 50 ns on the sim, before they parked): each is
/// polled once to park and once when its leader publishes.
#[test]
fn waiting_readers_park_until_their_leader_publishes() {
    use park::testing::Task;
    let t = Table::<Test>::with_entries(16, 8);
    let host = Clocked {
        clock: Default::default(),
        takeovers: Cell::new(0),
    };
    let key = 4u64.to_be_bytes();
    let gate = Cell::new(false);
    let mut outs = [[0u8; 8]; 3];
    let [o_l, o_a, o_b] = &mut outs;
    let mut l = Task::new(t.get(&host, &key, o_l, async |o: &mut [u8]| gated(&gate, o).await));
    assert!(!l.poll(), "leads, its read in flight");
    // They arrived during generation 1: generation 2 serves them, read by one of them.
    let mut a = Task::new(t.get(&host, &key, o_a, async |o: &mut [u8]| gated(&gate, o).await));
    let mut b = Task::new(t.get(&host, &key, o_b, async |o: &mut [u8]| gated(&gate, o).await));
    assert!(!a.poll() && !b.poll());
    // 400 ns of executor rounds, the leader's read still in flight: nobody wakes them.
    for _ in 0..8 {
        host.clock.now.set(host.clock.now.get() + 50);
        assert!(!a.poll_if_woken() && !b.poll_if_woken());
    }
    assert_eq!((a.polls, b.polls), (1, 1), "parked, not polled");
    gate.set(true);
    assert!(l.poll(), "the leader publishes");
    // A is woken and leads generation 2 (its read completes at once here), and its
    // publish wakes B.
    assert!(
        a.poll_if_woken() && b.poll_if_woken(),
        "woken by the publishes"
    );
    assert_eq!((a.polls, b.polls), (2, 2));
    assert_eq!(a.out, Some(Ok(Some(8))));
    assert_eq!(b.out, Some(Ok(Some(8))));
    assert_eq!(host.takeovers.get(), 0);
    assert_eq!(t.users(&key), 0);
}

/// A parked reader whose leader died (its read never ends, nobody wakes the reader) is
/// still woken by its timer (every sixteenth of the lease), and leads a read of its own
/// once it has watched the leader for a lease.
#[test]
fn a_parked_reader_replaces_a_dead_leader_at_its_lease() {
    use park::testing::Task;
    let t = Table::<Test>::with_entries(16, 8);
    let host = Clocked {
        clock: Default::default(),
        takeovers: Cell::new(0),
    };
    host.clock.now.set(10_000);
    let key = 5u64.to_be_bytes();
    let (dead, open) = (Cell::new(false), Cell::new(true));
    let mut outs = [[0u8; 8]; 2];
    let [o_l, o_w] = &mut outs;
    let mut l = Task::new(t.get(&host, &key, o_l, async |o: &mut [u8]| gated(&dead, o).await));
    assert!(!l.poll());
    let mut w = Task::new(t.get(&host, &key, o_w, async |o: &mut [u8]| gated(&open, o).await));
    assert!(!w.poll());
    assert!(
        host.clock.due.get().is_some(),
        "a parked waiter arms a timer"
    );
    // A round of the executor before its timer: nothing wakes it.
    host.clock.now.set(10_050);
    assert!(!w.poll_if_woken());
    assert_eq!(w.polls, 1);
    // Its timers' events (the sim polls the task then): a sixteenth of the lease apart at
    // most, it leads once it has watched the leader for a lease.
    let mut timers = 0;
    while w.out.is_none() {
        let due = host.clock.due.take().expect("a timer");
        assert!(
            due - host.clock.now.get() <= 1_000 / 16,
            "a sixteenth at most"
        );
        host.clock.now.set(due);
        timers += 1;
        w.poll();
        w.poll_if_woken();
        assert!(timers <= 17, "leads once it watched a lease");
    }
    let now = host.clock.now.get();
    assert!((11_000..=11_000 + 1_000 / 16).contains(&now), "{now}");
    assert_eq!(w.out, Some(Ok(Some(8))));
    assert_eq!(host.takeovers.get(), 1);
    assert!(w.polls <= 2 * 17 + 1, "{} polls", w.polls);
    // The dead leader's claim, dropped (its thread unwound), leaves the entry free.
    drop(l);
    assert_eq!(t.users(&key), 0);
}

/// Writers whose values wait for a write in flight are not polled until it is applied.
#[test]
fn waiting_writers_park_until_their_value_is_applied() {
    use park::testing::Task;
    let t = Table::<Test>::with_entries(16, 8);
    let host = Clocked {
        clock: Default::default(),
        takeovers: Cell::new(0),
    };
    let key = 6u64.to_be_bytes();
    let gate = Cell::new(false);
    let writes = Cell::new(0u32);
    let write = async |_: (), _: &[u8], _: &mut Pick<'_, Test>| {
        core::future::poll_fn(|_| {
            if gate.get() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        writes.set(writes.get() + 1);
        Ok(true)
    };
    let mut l = Task::new(t.write(&host, &key, (), &[1; 8], write));
    assert!(!l.poll());
    let mut a = Task::new(t.write(&host, &key, (), &[2; 8], write));
    let mut b = Task::new(t.write(&host, &key, (), &[3; 8], write));
    assert!(!a.poll() && !b.poll());
    for _ in 0..8 {
        host.clock.now.set(host.clock.now.get() + 50);
        assert!(!a.poll_if_woken() && !b.poll_if_woken());
    }
    assert_eq!((a.polls, b.polls), (1, 1), "parked, not polled");
    gate.set(true);
    assert!(
        l.poll(),
        "the leader writes its value, then the latest pending one"
    );
    assert!(
        a.poll_if_woken() && b.poll_if_woken(),
        "both covered by that write"
    );
    assert_eq!((a.polls, b.polls), (2, 2));
    assert_eq!(writes.get(), 2);
    assert_eq!(t.users(&key), 0);
}

/// A live write leader that took a waiter's value and is slow to write it (a thread
/// descheduled for milliseconds under CPU contention) is not replaced at its lease: the
/// replacer would write the value and return, and the slow leader would write it again
/// later, over writes that returned in between (seen by `remora check --linearizability
/// --index smart --fabric soft --threads 2 --coroutines 8` beside two busy loops). A
/// leader whose future was dropped is replaced after a lease, as before.
#[test]
fn a_slow_live_write_leader_is_waited_for_and_a_dropped_one_replaced() {
    use park::testing::Task;
    let t = Table::<Test>::with_entries(16, 8);
    let host = Clocked {
        clock: Default::default(),
        takeovers: Cell::new(0),
    };
    host.clock.now.set(10_000);
    let key = 4u64.to_be_bytes();
    let (allowed, writes) = (Cell::new(0u32), Cell::new(0u32));
    let write = async |_: (), _: &[u8], _: &mut Pick<'_, Test>| {
        let mine = writes.get();
        core::future::poll_fn(|_| {
            if mine < allowed.get() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        writes.set(mine + 1);
        Ok(true)
    };
    let mut l = Task::new(t.write(&host, &key, (), &[1; 8], write));
    assert!(!l.poll(), "leads, its own write in flight");
    let mut w = Task::new(t.write(&host, &key, (), &[2; 8], write));
    assert!(!w.poll(), "deposits its value and waits");
    allowed.set(1);
    assert!(
        !l.poll(),
        "its own write done, it writes the waiter's value"
    );
    assert_eq!(writes.get(), 1);
    for _ in 0..20 {
        host.clock.now.set(host.clock.now.get() + 1_000);
        assert!(!w.poll(), "a live leader is waited for past its lease");
    }
    assert_eq!(host.takeovers.get(), 0);
    allowed.set(2);
    assert!(l.poll());
    assert!(w.poll(), "served by the leader's write");
    assert_eq!(w.out, Some(Ok(true)));
    assert_eq!(writes.get(), 2, "the waiter's value was written once");
    assert_eq!(t.users(&key), 0);

    // The same with the leader's future dropped mid-write: replaced after a lease.
    let mut l = Task::new(t.write(&host, &key, (), &[3; 8], write));
    assert!(!l.poll());
    let mut w = Task::new(t.write(&host, &key, (), &[4; 8], write));
    assert!(!w.poll());
    allowed.set(3);
    assert!(!l.poll(), "it writes the waiter's value");
    drop(l);
    let mut rounds = 0;
    while !w.poll() {
        host.clock.now.set(host.clock.now.get() + 500);
        allowed.set(writes.get() + 1);
        rounds += 1;
        assert!(rounds < 10, "replaced within a lease or so");
    }
    assert_eq!(host.takeovers.get(), 1);
    assert_eq!(w.out, Some(Ok(true)));
    assert_eq!(t.users(&key), 0);
}

/// A remote read that stays in flight until `open` is set, then returns `val`'s bytes (the
/// value the READ found when it was issued).
async fn gated_val(
    open: &Cell<bool>,
    val: u8,
    out: &mut [u8],
) -> Result<Option<usize>, (usize, usize)> {
    core::future::poll_fn(|_| {
        if open.get() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out[..8].copy_from_slice(&[val; 8]);
    Ok(Some(8))
}

/// A read leader replaced at its lease (its thread descheduled past it) whose entry then
/// emptied and was taken again for the same key must, coming back, find nothing of its
/// own in it: its READ predates the new users (a write may have returned in between).
/// When a claim restarted the entry's generations at 0, the old leader's generation (2)
/// named the new users' second read, so the old leader published its old value as that
/// read's result to a reader that started after the write returned, and released a
/// count it no longer had (seen by `remora check --linearizability --index smart
/// --fabric soft --threads 2 --coroutines 8` beside two busy loops: a get returning a
/// value no order of the writes allows).
#[test]
fn a_replaced_leader_finds_nothing_of_its_own_in_its_entry_taken_again() {
    let t = Table::<Test>::with_entries(16, 8);
    let key = 3u64.to_be_bytes();
    let host = NoClock;
    let gates: [Cell<bool>; 6] = Default::default();
    let mut outs = [[0u8; 8]; 6];
    let [g_p, g_l, g_z, g_n1, g_n2, g_n3] = &gates;
    {
        let [o_p, o_l, o_z, o_n1, o_n2, o_n3] = &mut outs;
        // The old users: P leads generation 1, L waits for 2 and leads it; its READ finds 1s.
        let mut p = pin!(t.get(&host, &key, o_p, async |o: &mut [u8]| {
            gated_val(g_p, 1, o).await
        }));
        assert!(poll(p.as_mut()).is_pending());
        let mut l = pin!(t.get(&host, &key, o_l, async |o: &mut [u8]| {
            gated_val(g_l, 1, o).await
        }));
        assert!(poll(l.as_mut()).is_pending());
        g_p.set(true);
        assert_eq!(poll(p.as_mut()), Poll::Ready(Ok(Some(8))));
        assert!(poll(l.as_mut()).is_pending());
        assert_eq!(reading(&t, &key), (true, 2), "L leads generation 2");
        // L's thread is descheduled; Z replaces it, reads and returns. The entry empties.
        g_z.set(true);
        let mut z = pin!(t.get(&host, &key, o_z, async |o: &mut [u8]| {
            gated_val(g_z, 1, o).await
        }));
        let mut rounds = 0;
        while poll(z.as_mut()).is_pending() {
            rounds += 1;
            assert!(rounds < 10, "replaces L after its lease");
        }
        assert_eq!(t.users(&key), 0, "L's count released by Z");
        // A write of 2s returns here. New users take the entry again: N1 leads, N2 and N3
        // arrive during its read, N2 leads the next read, and N3 waits for it.
        let mut n1 = pin!(t.get(&host, &key, o_n1, async |o: &mut [u8]| {
            gated_val(g_n1, 2, o).await
        }));
        assert!(poll(n1.as_mut()).is_pending());
        let mut n2 = pin!(t.get(&host, &key, o_n2, async |o: &mut [u8]| {
            gated_val(g_n2, 2, o).await
        }));
        let mut n3 = pin!(t.get(&host, &key, o_n3, async |o: &mut [u8]| {
            gated_val(g_n3, 2, o).await
        }));
        assert!(poll(n2.as_mut()).is_pending() && poll(n3.as_mut()).is_pending());
        g_n1.set(true);
        assert_eq!(poll(n1.as_mut()), Poll::Ready(Ok(Some(8))));
        assert!(poll(n2.as_mut()).is_pending(), "N2 leads the next read");
        assert!(poll(n3.as_mut()).is_pending(), "N3 waits for it");
        // L comes back with the 1s its READ found before the write returned.
        g_l.set(true);
        assert_eq!(poll(l.as_mut()), Poll::Ready(Ok(Some(8))));
        assert_eq!(t.users(&key), 2, "L released no count of the new users");
        assert!(poll(n3.as_mut()).is_pending(), "N3 is not served L's read");
        g_n2.set(true);
        assert_eq!(poll(n2.as_mut()), Poll::Ready(Ok(Some(8))));
        assert_eq!(poll(n3.as_mut()), Poll::Ready(Ok(Some(8))));
    }
    assert_eq!(outs[5], [2; 8], "N3 started after the write of 2s returned");
    assert_eq!(t.users(&key), 0);
}

/// A writer whose value a leader wrote returns that write's result, even when its thread
/// was descheduled until a later write of the key had returned another (seen by `remora
/// check --linearizability --index smart --fabric soft --threads 2 --coroutines 8` beside
/// two busy loops: an update returned `false` while a get returned its value). The later
/// result goes to another record of the entry's ring.
#[test]
fn a_slow_combined_writer_gets_its_own_writes_result() {
    let t = Table::<Test>::with_entries(16, 8);
    let host = NoClock;
    let key = 2u64.to_be_bytes();
    let open = Cell::new(false);
    // Each value says what its write returns: 4s find the key absent (deleted in between).
    let write = async |_: (), v: &[u8], _: &mut Pick<'_, Test>| {
        core::future::poll_fn(|_| {
            if open.get() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        Ok(v[0] != 4)
    };
    let mut l = pin!(t.write(&host, &key, (), &[1; 8], write));
    assert!(poll(l.as_mut()).is_pending(), "L leads");
    let mut w = pin!(t.write(&host, &key, (), &[2; 8], write));
    assert!(poll(w.as_mut()).is_pending(), "W deposits its value");
    open.set(true);
    assert_eq!(
        poll(l.as_mut()),
        Poll::Ready(Ok(true)),
        "L wrote 1s, then 2s"
    );
    // W's thread is descheduled. X leads a write, Y's value is combined into it.
    open.set(false);
    let mut x = pin!(t.write(&host, &key, (), &[3; 8], write));
    assert!(poll(x.as_mut()).is_pending(), "X leads");
    let mut y = pin!(t.write(&host, &key, (), &[4; 8], write));
    assert!(poll(y.as_mut()).is_pending(), "Y deposits its value");
    open.set(true);
    assert_eq!(
        poll(x.as_mut()),
        Poll::Ready(Ok(true)),
        "X publishes Y's result into another record"
    );
    assert_eq!(poll(y.as_mut()), Poll::Ready(Ok(false)));
    // W comes back: its value was written, by a write that found the key present.
    assert_eq!(poll(w.as_mut()), Poll::Ready(Ok(true)));
    assert_eq!(t.users(&key), 0);
}

/// A gated write of a key whose result is in its value: 4s find the key absent.
async fn gated_write(open: &Cell<bool>, v: &[u8]) -> Result<bool, (usize, usize)> {
    core::future::poll_fn(|_| {
        if open.get() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    Ok(v[0] != 4)
}

/// A combined writer whose thread is descheduled after its value was written holds up no
/// later write of the key: while the entry's ring has a free record, the next groups'
/// leaders publish and return at once (before, each waited for the slow writer to pick up
/// its result), and the slow writer, back, still gets its own write's result.
#[test]
fn a_descheduled_combined_writer_holds_up_no_later_write() {
    let t = Table::<Test>::with_entries(16, 8);
    let host = NoClock;
    let key = 3u64.to_be_bytes();
    let open = Cell::new(false);
    let write = async |_: (), v: &[u8], _: &mut Pick<'_, Test>| gated_write(&open, v).await;
    let mut l = pin!(t.write(&host, &key, (), &[1; 8], write));
    assert!(poll(l.as_mut()).is_pending(), "L leads");
    let mut w = pin!(t.write(&host, &key, (), &[2; 8], write));
    assert!(poll(w.as_mut()).is_pending(), "W deposits its value");
    open.set(true);
    assert_eq!(poll(l.as_mut()), Poll::Ready(Ok(true)), "L wrote 1s, 2s");
    // W is descheduled; groups of a leader X and a combined writer Y follow, each Y's write
    // finding the key absent (4s) or present (5s) in turn.
    for i in 0..2 * RESULTS {
        open.set(false);
        let v = if i % 2 == 0 { [4; 8] } else { [5; 8] };
        let mut x = pin!(t.write(&host, &key, (), &[3; 8], write));
        assert!(poll(x.as_mut()).is_pending(), "X leads");
        let mut y = pin!(t.write(&host, &key, (), &v, write));
        assert!(poll(y.as_mut()).is_pending(), "Y deposits its value");
        open.set(true);
        assert_eq!(
            poll(x.as_mut()),
            Poll::Ready(Ok(true)),
            "group {i}: X publishes Y's result without waiting for W"
        );
        assert_eq!(poll(y.as_mut()), Poll::Ready(Ok(i % 2 == 1)), "group {i}");
    }
    assert_eq!(
        poll(w.as_mut()),
        Poll::Ready(Ok(true)),
        "W gets its own write's result, not the latest one (false)"
    );
    assert_eq!(t.users(&key), 0);
}

/// With every record of the ring held by a descheduled writer, the next leader waits for
/// one to be picked up (it would publish over a result not yet taken), and publishes once
/// one is; each slow writer gets its own write's result.
#[test]
fn a_leader_waits_only_while_every_record_is_held() {
    use std_alloc::boxed::Box;
    let t = Table::<Test>::with_entries(16, 8);
    let host = NoClock;
    let key = 4u64.to_be_bytes();
    let open = Cell::new(false);
    let write = async |_: (), v: &[u8], _: &mut Pick<'_, Test>| gated_write(&open, v).await;
    let vals: [[u8; 8]; RESULTS] = core::array::from_fn(|i| [if i % 2 == 0 { 4 } else { 5 }; 8]);
    let mut slow = Vec::new();
    for v in &vals {
        open.set(false);
        let mut x = pin!(t.write(&host, &key, (), &[3; 8], write));
        assert!(poll(x.as_mut()).is_pending(), "X leads");
        let mut y = Box::pin(t.write(&host, &key, (), v, write));
        assert!(poll(y.as_mut()).is_pending(), "Y deposits its value");
        open.set(true);
        assert_eq!(poll(x.as_mut()), Poll::Ready(Ok(true)), "a record was free");
        // Y is descheduled, holding its record.
        slow.push(y);
    }
    open.set(false);
    let mut x = pin!(t.write(&host, &key, (), &[3; 8], write));
    assert!(poll(x.as_mut()).is_pending(), "X leads");
    let mut z = pin!(t.write(&host, &key, (), &[5; 8], write));
    assert!(poll(z.as_mut()).is_pending(), "Z deposits its value");
    open.set(true);
    assert!(poll(x.as_mut()).is_pending(), "every record held: X waits");
    assert!(poll(z.as_mut()).is_pending(), "Z's result is not published");
    assert_eq!(
        poll(slow[0].as_mut()),
        Poll::Ready(Ok(false)),
        "the first Y's own"
    );
    assert_eq!(
        poll(x.as_mut()),
        Poll::Ready(Ok(true)),
        "X publishes into its record"
    );
    assert_eq!(poll(z.as_mut()), Poll::Ready(Ok(true)));
    for (i, y) in slow.iter_mut().enumerate().skip(1) {
        assert_eq!(poll(y.as_mut()), Poll::Ready(Ok(i % 2 == 1)), "Y {i}'s own");
    }
    assert_eq!(t.users(&key), 0);
}

/// A writer picking up its result wakes nobody unless a leader waits for a free record: the
/// entry's other waiters (here a writer whose value waits for the next write) are not
/// polled for it (a wake-up per pickup cost SMART 11% of its YCSB-A throughput on the sim,
/// 28.548 -> 25.417 Mops at 16 nodes x 4 threads x 4 coroutines).
#[test]
fn a_pickup_wakes_nobody_unless_a_leader_waits() {
    use park::testing::Task;
    let t = Table::<Test>::with_entries(16, 8);
    let host = Clocked {
        clock: Default::default(),
        takeovers: Cell::new(0),
    };
    let key = 5u64.to_be_bytes();
    let open = Cell::new(false);
    let write = async |_: (), v: &[u8], _: &mut Pick<'_, Test>| gated_write(&open, v).await;
    let mut l = Task::new(t.write(&host, &key, (), &[1; 8], write));
    assert!(!l.poll(), "L leads");
    let mut a = Task::new(t.write(&host, &key, (), &[2; 8], write));
    assert!(!a.poll(), "A deposits its value");
    open.set(true);
    assert!(l.poll(), "L wrote 1s, then 2s");
    open.set(false);
    let mut x = Task::new(t.write(&host, &key, (), &[3; 8], write));
    assert!(!x.poll(), "X leads");
    let mut b = Task::new(t.write(&host, &key, (), &[5; 8], write));
    assert!(!b.poll(), "B deposits its value");
    assert!(a.poll_if_woken(), "A was woken by its write, and picks up");
    assert_eq!(a.out, Some(Ok(true)));
    assert!(!b.poll_if_woken());
    assert_eq!(b.polls, 1, "B was not woken by A's pickup");
    open.set(true);
    assert!(x.poll() && b.poll_if_woken(), "B woken by its write");
    assert_eq!((b.polls, b.out), (2, Some(Ok(true))));
    assert_eq!(t.users(&key), 0);
}

/// A leader whose future is dropped after it took two waiters' values is replaced by one
/// of them at its lease; the other, once nobody writes, writes its value itself instead of
/// waiting for a later write of the key that may never come.
#[test]
fn both_writers_a_dropped_leader_took_from_end() {
    use park::testing::Task;
    let t = Table::<Test>::with_entries(16, 8);
    let host = Clocked {
        clock: Default::default(),
        takeovers: Cell::new(0),
    };
    let key = 7u64.to_be_bytes();
    // Writes that may complete.
    let budget = Cell::new(0u32);
    let written = Cell::new(0u32);
    let write = async |_: (), _: &[u8], _: &mut Pick<'_, Test>| {
        core::future::poll_fn(|_| {
            if budget.get() > 0 {
                budget.set(budget.get() - 1);
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        written.set(written.get() + 1);
        Ok(true)
    };
    let mut l = Task::new(t.write(&host, &key, (), &[1; 8], write));
    assert!(!l.poll(), "L leads");
    let mut a = Task::new(t.write(&host, &key, (), &[2; 8], write));
    let mut b = Task::new(t.write(&host, &key, (), &[3; 8], write));
    assert!(!a.poll() && !b.poll(), "A and B deposit their values");
    budget.set(1);
    assert!(!l.poll(), "L wrote its value, took B's (covering A's)");
    drop(l);
    budget.set(100);
    let mut rounds = 0;
    // Polled at each of their timers (a lease apart).
    while !(a.poll() & b.poll()) {
        rounds += 1;
        assert!(rounds < 20, "A and B end");
        host.clock.now.set(host.clock.now.get() + 1_000);
    }
    assert_eq!(host.takeovers.get(), 1, "one of them replaced L");
    assert_eq!(
        written.get(),
        3,
        "L's value, then A's and B's each by its own writer"
    );
    assert_eq!((a.out, b.out), (Some(Ok(true)), Some(Ok(true))));
    assert_eq!(t.users(&key), 0);
}

/// Issue 26: a waiter stopped with its process for five leases (its leader, a sibling
/// coroutine, stopped with it) does not take the leader for stuck when it resumes; a leader
/// that stays in flight while the waiter watches is still stuck after one lease of watching,
/// looked at every sixteenth of it (the parked waiter's timer).
#[test]
fn a_waiter_stopped_for_five_leases_replaces_no_live_leader() {
    let lease = LeaseConfig::default();
    let bound = lease.lease_ns;
    let mut s = Stuck::new();
    assert!(!s.expired(7, 1_000, bound, &lease), "first seen");
    assert_eq!(s.left(bound), bound / 16, "a timer of a sixteenth");
    let mut now = 1_000 + 5 * bound;
    assert!(
        !s.expired(7, now, bound, &lease),
        "stuck after a stall of 5 leases"
    );
    let mut looks = 0;
    while !s.expired(7, now, bound, &lease) {
        now += s.left(bound);
        looks += 1;
        assert!(looks <= 16, "never stuck");
    }
    // The stall counted two sixteenths: 14 more looks a sixteenth apart.
    assert_eq!(looks, 14);
    // A new generation starts over.
    assert!(!s.expired(8, now, bound, &lease));
}

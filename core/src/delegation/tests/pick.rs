//! The write leader's pick-up of the latest queued value ([`Pick`]).
use super::*;

/// [`NoClock`] with the leader's pick-up on ([`Host::combine_latest`]).
struct Picking;

impl Host for Picking {
    fn now_ns(&self) -> u64 {
        0
    }
    fn lease(&self) -> LeaseConfig {
        NoClock.lease()
    }
    fn value_cap(&self) -> usize {
        8
    }
    fn count(&self, _: Counted) {}
    fn combine_latest(&self) -> bool {
        true
    }
}

/// Waits until `g` is set.
async fn gate(g: &Cell<bool>) {
    core::future::poll_fn(|_| {
        if g.get() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}

/// A remote write as a picking index's: it waits for `lock` (the key's lock), picks up the
/// latest queued value, waits for `wire` (the write in flight), and records the first byte
/// of the value it wrote; it returns whether a value was written before it (the key was
/// present).
async fn picking_write(
    lock: &Cell<bool>,
    wire: &Cell<bool>,
    written: &core::cell::RefCell<Vec<u8>>,
    v: &[u8],
    pick: &mut Pick<'_, Test>,
) -> Result<bool, (usize, usize)> {
    gate(lock).await;
    let mut latest = [0u8; 8];
    let v = match pick.latest(&mut latest).await {
        Some(n) => &latest[..n],
        None => v,
    };
    gate(wire).await;
    let mut w = written.borrow_mut();
    let was = !w.is_empty();
    w.push(v[0]);
    Ok(was)
}

/// With the pick-up, a leader that holds the key's lock takes the latest value queued and
/// writes once (not its own value, then the latest); the writers queued before the pick-up
/// return with that write, found the key present (linearized after the leader's own). A
/// writer that queues after the pick-up is not acknowledged by it: its value is written by
/// the next leader. That leader, leading with its own queued value, covers the writer its
/// value superseded and, with its pick-up, the ones queued since.
#[test]
fn a_leader_picks_up_the_latest_value_once_it_holds_the_lock() {
    let t = Table::<Test>::with_entries(16, 8);
    let host = Picking;
    let key = 9u64.to_be_bytes();
    let (lock, wire) = (Cell::new(false), Cell::new(false));
    let written = core::cell::RefCell::new(Vec::new());
    let write = async |_: (), v: &[u8], p: &mut Pick<'_, Test>| {
        picking_write(&lock, &wire, &written, v, p).await
    };
    let mut l = pin!(t.write(&host, &key, (), &[1; 8], write));
    assert!(poll(l.as_mut()).is_pending(), "L leads, waits for the lock");
    let mut a = pin!(t.write(&host, &key, (), &[2; 8], write));
    let mut b = pin!(t.write(&host, &key, (), &[3; 8], write));
    assert!(poll(a.as_mut()).is_pending() && poll(b.as_mut()).is_pending());
    lock.set(true);
    assert!(
        poll(l.as_mut()).is_pending(),
        "L picks up 3s, its write in flight"
    );
    // C and D queue after the pick-up; D's value supersedes C's.
    let mut c = pin!(t.write(&host, &key, (), &[4; 8], write));
    let mut d = pin!(t.write(&host, &key, (), &[5; 8], write));
    assert!(poll(c.as_mut()).is_pending() && poll(d.as_mut()).is_pending());
    wire.set(true);
    assert_eq!(poll(l.as_mut()), Poll::Ready(Ok(false)), "L's own result");
    assert_eq!(*written.borrow(), [3], "one write, of the latest value");
    assert_eq!(poll(a.as_mut()), Poll::Ready(Ok(true)));
    assert_eq!(poll(b.as_mut()), Poll::Ready(Ok(true)));
    assert!(
        poll(c.as_mut()).is_pending(),
        "C was not covered by L's write"
    );
    // D leads with its own value; E queues before D's pick-up.
    lock.set(false);
    wire.set(false);
    assert!(poll(d.as_mut()).is_pending(), "D leads, waits for the lock");
    let mut e = pin!(t.write(&host, &key, (), &[6; 8], write));
    assert!(poll(e.as_mut()).is_pending());
    lock.set(true);
    wire.set(true);
    assert_eq!(poll(d.as_mut()), Poll::Ready(Ok(true)));
    assert_eq!(*written.borrow(), [3, 6], "D wrote E's value once");
    assert_eq!(
        poll(c.as_mut()),
        Poll::Ready(Ok(true)),
        "covered by D's write"
    );
    assert_eq!(poll(e.as_mut()), Poll::Ready(Ok(true)));
    assert_eq!(t.users(&key), 0);
}

/// A pick-up picks nothing for a leader that was replaced (its generation gone), and the
/// switch off picks nothing: the leader writes its own value, then the latest queued.
#[test]
fn a_pick_up_needs_the_switch_and_the_lead() {
    let t = Table::<Test>::with_entries(16, 8);
    let key = 10u64.to_be_bytes();
    let (lock, wire) = (Cell::new(true), Cell::new(false));
    let written = core::cell::RefCell::new(Vec::new());
    let write = async |_: (), v: &[u8], p: &mut Pick<'_, Test>| {
        picking_write(&lock, &wire, &written, v, p).await
    };
    let mut l = pin!(t.write(&NoClock, &key, (), &[1; 8], write));
    assert!(poll(l.as_mut()).is_pending());
    let mut a = pin!(t.write(&NoClock, &key, (), &[2; 8], write));
    assert!(poll(a.as_mut()).is_pending());
    wire.set(true);
    assert_eq!(poll(l.as_mut()), Poll::Ready(Ok(false)));
    assert_eq!(*written.borrow(), [1, 2], "off: own value, then the latest");
    assert_eq!(poll(a.as_mut()), Poll::Ready(Ok(true)));
    // A stale generation picks nothing, and leaves the value queued.
    let (at, ()) = match poll(pin!(t.claim(&key, |e| {
        e.writing = true;
        e.write_gen += 1;
        e.pending = Some(());
        e.pending_val.set(&[7; 8]);
        e.pending_seq += 1;
        e.open += 1;
    }))) {
        Poll::Ready(Some(c)) => c,
        _ => panic!("entry claimed"),
    };
    let lead_gen = match poll(pin!(t.with(at, |e| e.write_gen))) {
        Poll::Ready(g) => g,
        Poll::Pending => panic!("bucket busy"),
    };
    let mut stale = Pick::none(());
    stale.src = Some((&t, at, lead_gen - 1));
    let mut buf = [0u8; 8];
    assert_eq!(poll(pin!(stale.latest(&mut buf))), Poll::Ready(None));
    let mut live = Pick::none(());
    live.src = Some((&t, at, lead_gen));
    assert_eq!(poll(pin!(live.latest(&mut buf))), Poll::Ready(Some(8)));
    assert_eq!(buf, [7; 8]);
    assert_eq!(
        poll(pin!(live.latest(&mut buf))),
        Poll::Ready(None),
        "at most once"
    );
}

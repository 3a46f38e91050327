//! Idle server threads of the verbs memory node sleep (issue 26, `idle.rs`), on the fake
//! device's shared receive queue (`fake_srq.rs`): the thread's own loop (`Server::run`)
//! serves while the test plays the control thread (handing a connection over) and the NIC
//! (landing a message). Idle, the thread polls only while it spins and twice per bounded
//! sleep; its inbox's bell and a completion event (not a timeout) wake it. Prints the
//! figures: `cargo test --release -p remora --features verbs --lib memnode::idle_tests --
//! --nocapture`.
use super::idle::{MAX_DOUBLINGS, QUIET_STEP, sleep_bound_ns};
use super::shard::{Conn, Ctl, Hub, Server, Srq, ThreadHandler};
use super::*;
use crate::verbs::FakeNode;
use crate::verbs::clock::now_ns;
use crate::verbs::qp::idle::{BLOCK_AT_MOST_NS, SPIN_BEFORE_BLOCK_NS};
use std::sync::atomic::AtomicBool;

/// When each connection and message reached the service (`now_ns`).
#[derive(Default)]
struct Arrivals {
    connects: Vec<u64>,
    messages: Vec<u64>,
}

struct Stamp(Arc<Mutex<Arrivals>>);

impl Handler for Stamp {
    fn on_message(
        &mut self,
        _region: &dyn remora_core::server::LocalRegion,
        _conn: usize,
        _recv: Recv,
        _msg: &[u8],
        _replies: &mut Replies,
    ) -> Result<(), remora_core::fabric::FabricError> {
        lock(&self.0).messages.push(now_ns());
        Ok(())
    }

    fn on_connect(
        &mut self,
        _region: &dyn remora_core::server::LocalRegion,
        _conn: usize,
        _peer: u32,
    ) {
        lock(&self.0).connects.push(now_ns());
    }
}

/// This thread's CPU time so far (ns).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A connection on the fake device whose receives come from `srq` (queue pair number 0).
fn fake_conn(srq: &Arc<Srq>) -> Conn {
    let node = FakeNode::new(0, 4 << 20, 1 << 20, 0, Box::new(Echo)).expect("a fake node");
    let qp = VerbsQp::fake(&node, None).expect("a fake queue pair");
    // The queue pair now holds the node's only `Rc`: it may move to the server thread.
    drop(node);
    assert_eq!(qp.qp_num(), 0);
    Conn {
        qp,
        ctl: Arc::new(Ctl {
            id: 1,
            client: 1,
            cm_id: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            dead: AtomicBool::new(false),
            told: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            rnr: AtomicBool::new(false),
        }),
        srq: srq.clone(),
        introduced: false,
    }
}

/// Waits (polling every 50 µs, at most 5 s) until `f` holds; whether it did.
fn until(f: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() > Duration::from_secs(5) {
            return false;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    true
}

/// Runs server thread 0 of `hub` with `handler` on this thread until `quit`: its stats and
/// the CPU time it took.
fn serve(
    hub: &Hub,
    handler: &Mutex<Box<dyn Handler + Send>>,
    quit: &AtomicBool,
) -> (VerbsStats, u64) {
    let arena = Arena::new(1 << 16).expect("an arena");
    let region = local_region(&arena, 0);
    let cpu0 = thread_cpu_ns();
    let stats = Server {
        t: 0,
        hub,
        handler: ThreadHandler::Shared(handler),
        region,
        verbose: false,
    }
    .run(quit);
    let cpu = thread_cpu_ns() - cpu0;
    // A connection, back in the inbox, is dropped here, where it was served.
    drop(std::mem::take(&mut *lock(&hub.inbox[0])));
    (stats, cpu)
}

/// Hands a connection over to server thread 0 of `hub` once it says it is asleep (a thread
/// that never does is handed one all the same, to fail later); nanoseconds until its service
/// was told of it.
fn hand_over_when_asleep(hub: &Hub, srq: &Arc<Srq>, arrivals: &Mutex<Arrivals>) -> u64 {
    until(|| hub.asleep[0].load(Ordering::SeqCst));
    let handed = now_ns();
    hub.hand_over(fake_conn(srq));
    assert!(
        until(|| !lock(arrivals).connects.is_empty()),
        "never introduced"
    );
    lock(arrivals).connects[0] - handed
}

/// Stops the server thread when the test ends, failed or not (else the scope would wait for
/// it forever).
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn an_idle_server_thread_sleeps_and_events_wake_it() {
    const IDLE: Duration = Duration::from_millis(300);
    let hub = Hub::new(1).expect("a hub");
    let srq = Arc::new(Srq::fake().expect("a fake shared receive queue"));
    let arrivals = Arc::new(Mutex::new(Arrivals::default()));
    let handler: Mutex<Box<dyn Handler + Send>> = Mutex::new(Box::new(Stamp(arrivals.clone())));
    let quit = AtomicBool::new(false);
    let asleep = || hub.asleep[0].load(Ordering::SeqCst);
    let t0 = Instant::now();
    let (stats, cpu, conn_ns, msg_ns) = std::thread::scope(|s| {
        let server = s.spawn(|| serve(&hub, &handler, &quit));
        let stop = Stop(&quit);
        // No connection yet: the thread sleeps on its bell alone; handing one over (once it
        // says it is asleep) rings it.
        std::thread::sleep(IDLE / 3);
        let conn_ns = hand_over_when_asleep(&hub, &srq, &arrivals);
        // Idle with a connection: asleep on its receive queue's channel as well; the message
        // lands while it sleeps, on the queue it armed before its last poll.
        std::thread::sleep(IDLE);
        until(asleep);
        let landed = now_ns();
        assert!(srq.fake_deliver(0, b"ping"), "no posted buffer");
        assert!(
            until(|| !lock(&arrivals).messages.is_empty()),
            "never served"
        );
        let msg_ns = lock(&arrivals).messages[0] - landed;
        until(asleep);
        drop(stop);
        let (stats, cpu) = server.join().expect("the server thread");
        (stats, cpu, conn_ns, msg_ns)
    });
    let ran = t0.elapsed();
    eprintln!(
        "idle memnode thread: {:.3} ms CPU in {ran:?} ({:.3}% of a core); {} receive polls, \
         {} sleeps, {} woken by an event; served {:.1} µs after a connection was handed \
         over, {:.1} µs after a message landed",
        cpu as f64 / 1e6,
        cpu as f64 / ran.as_nanos() as f64 * 100.0,
        stats.recv_polls,
        stats.server_sleeps,
        stats.server_wakeups,
        conn_ns as f64 / 1e3,
        msg_ns as f64 / 1e3,
    );
    assert_eq!(stats.server_messages, 1);
    // Woken by the bell and by the message's completion event.
    assert!(
        stats.server_wakeups >= 2,
        "{} wakeups",
        stats.server_wakeups
    );
    // A sleep no event ends lasts BLOCK_AT_MOST_NS or more (`idle::sleep_bound_ns`): no more
    // of them than fit in the run (a sleep that returned at once, an fd left readable, would
    // add up fast).
    let most = ran.as_nanos() as u64 / BLOCK_AT_MOST_NS + stats.server_wakeups + 2;
    assert!(
        (2..=most).contains(&stats.server_sleeps),
        "{} sleeps in {ran:?}",
        stats.server_sleeps
    );
    // Busy-polling, the thread would poll on every round of the 400 ms idle: millions of
    // polls (the 20 µs naps this replaced made thousands, and no sleep). Here: only while it
    // spins after the connection and after the message (SPIN_BEFORE_BLOCK_NS = 100 µs each;
    // a round takes more than 5 ns), then twice per sleep (once more after arming, once
    // after waking).
    let bound = 2 * (SPIN_BEFORE_BLOCK_NS / 5 + 64) + 2 * stats.server_sleeps + 8;
    assert!(
        stats.recv_polls <= bound,
        "{} receive polls (at most {bound} without spinning while idle)",
        stats.recv_polls
    );
}

/// A server thread left idle sleeps longer and longer, up to 16 ms a sleep: over 700 ms with
/// nothing to do it sleeps no more often than the doubling bound allows (about 220 times; a
/// 1 ms bound throughout would make about 700). (That its bell still wakes it at once is
/// `an_idle_server_thread_sleeps_and_events_wake_it`'s; this one prints how soon.)
#[test]
fn a_long_idle_server_thread_sleeps_longer() {
    const IDLE: Duration = Duration::from_millis(700);
    assert_eq!(sleep_bound_ns(0), BLOCK_AT_MOST_NS);
    assert_eq!(sleep_bound_ns(QUIET_STEP), 2 * BLOCK_AT_MOST_NS);
    assert_eq!(
        sleep_bound_ns(u32::MAX),
        BLOCK_AT_MOST_NS << MAX_DOUBLINGS,
        "the bound stops doubling"
    );
    let hub = Hub::new(1).expect("a hub");
    let srq = Arc::new(Srq::fake().expect("a fake shared receive queue"));
    let arrivals = Arc::new(Mutex::new(Arrivals::default()));
    let handler: Mutex<Box<dyn Handler + Send>> = Mutex::new(Box::new(Stamp(arrivals.clone())));
    let quit = AtomicBool::new(false);
    let t0 = Instant::now();
    let (stats, conn_ns) = std::thread::scope(|s| {
        let server = s.spawn(|| serve(&hub, &handler, &quit).0);
        let stop = Stop(&quit);
        std::thread::sleep(IDLE);
        let conn_ns = hand_over_when_asleep(&hub, &srq, &arrivals);
        drop(stop);
        (server.join().expect("the server thread"), conn_ns)
    });
    let ran = t0.elapsed().as_nanos() as u64;
    // The most sleeps that fit in the run when each lasts its bound.
    let (mut most, mut slept) = (0u32, 0u64);
    while slept < ran {
        slept += sleep_bound_ns(most);
        most += 1;
    }
    eprintln!(
        "long-idle memnode thread: {} sleeps in {:.0} ms (at most {most} fit; {} with a 1 ms \
         bound), served a connection {:.1} us after it was handed over",
        stats.server_sleeps,
        ran as f64 / 1e6,
        ran / BLOCK_AT_MOST_NS,
        conn_ns as f64 / 1e3
    );
    assert!(
        stats.server_sleeps <= u64::from(most) + 4,
        "{} sleeps in {ran} ns: more than the doubling bound allows ({most})",
        stats.server_sleeps
    );
}

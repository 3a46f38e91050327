//! A poller's lives: the endpoint it runs on, and a new one after a lost connection.
//!
//! A poller runs on one endpoint until an operation fails in a way that means the
//! connection is gone ([`Error::is_connection_lost`]: a broken queue pair, a memory node
//! that stopped answering, a revoked region key). That operation returns its error; the
//! poller admits nothing more, lets the operations already running finish (they fail or
//! complete on the old connection), drops its handles and the endpoint, and is down. The
//! next operation submitted to it connects again — [`RECONNECT_TRIES`] attempts, backing off
//! from [`FIRST_BACKOFF`] and doubling — reopens every index the poller had open (the
//! per-node state, SMART's cache or Sherman's lock table, is kept), and runs. If every
//! attempt fails, the operations queued then fail with [`Error::Reconnect`] and the poller
//! stays down until the next one. A memory node that came back empty (a DRAM node
//! restarted) has lost its data: an index is then created anew there, as on a first open.
use super::error::Error;
use super::index::{NodeState, Opening, PerThread};
use super::poller::{self, End, MAX_INDEXES};
use super::slot::PollerShared;
use super::spin::Patience;
use remora_core::fabric::Endpoint;
use std::cell::{Cell, OnceCell, RefCell};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Connection attempts after a lost connection before the queued operations fail.
pub(crate) const RECONNECT_TRIES: u32 = 5;

/// The wait after the first failed attempt (then doubled: 50 + 100 + 200 + 400 ms in all).
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// What a poller remembers across its lives: the indexes it has open (to reopen them on a
/// new endpoint), and whether the current life lost its connection.
pub(crate) struct Life {
    pub(crate) states: std::sync::Arc<[OnceLock<NodeState>]>,
    open: RefCell<[Option<Opening>; MAX_INDEXES]>,
    pub(crate) lost: Cell<bool>,
}

impl Life {
    /// Index `id` was opened with `cfg` on this poller.
    pub(crate) fn opened(&self, id: usize, cfg: Opening) {
        if let Some(o) = self.open.borrow_mut().get_mut(id) {
            *o = Some(cfg);
        }
    }
}

/// A FIFO ticket lock. The fake verbs device is one device for every poller, run at post
/// time on the posting thread; a poller holds the gate while it runs its tasks (so while
/// they post), connects, or drops its endpoint, so the device is used by one at a time.
#[derive(Default)]
pub(crate) struct Gate {
    next: AtomicU32,
    serving: AtomicU32,
}

/// The gate, held until dropped.
pub(crate) struct Held<'a>(&'a Gate);

impl Gate {
    /// Waits for this caller's turn (spinning briefly, then yielding the core).
    pub(crate) fn enter(&self) -> Held<'_> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let mut spins = 0u32;
        while self.serving.load(Ordering::Acquire) != ticket {
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Held(self)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.serving.fetch_add(1, Ordering::Release);
    }
}

/// The poller thread's body: runs submissions on `first`, then on a new endpoint from
/// `connect` after each lost connection, until asked to stop and idle.
pub(crate) fn run<E: Endpoint>(
    shared: &PollerShared,
    first: E,
    connect: &dyn Fn() -> Result<E, Error>,
    patience: Patience,
    gate: Option<&Gate>,
) {
    shared.set_thread();
    let life = Life {
        states: shared.states.clone(),
        open: RefCell::new([None; MAX_INDEXES]),
        lost: Cell::new(false),
    };
    let mut ep = Some(first);
    loop {
        if let Some(e) = &ep {
            life.lost.set(false);
            match live(shared, e, &life, patience, gate) {
                Ok(End::Stopped) => {
                    let _g = gate.map(Gate::enter);
                    drop(ep.take());
                    return;
                }
                Ok(End::Lost) => log::warn!(
                    "remora: a poller lost its memory-node connection; it reconnects at its \
                     next operation"
                ),
                Err(e) => fail_queued(shared, 1, &e),
            }
            let _g = gate.map(Gate::enter);
            drop(ep.take());
        }
        if !wait_for_work(shared, patience) {
            return;
        }
        match reconnect(connect, gate) {
            Ok(e) => ep = Some(e),
            Err((tries, e)) => fail_queued(shared, tries, &e),
        }
    }
}

/// One life on `ep`: reopens the indexes the poller had open, then runs submissions until
/// the node stops or the connection is lost. Err: an index did not reopen.
fn live<E: Endpoint>(
    shared: &PollerShared,
    ep: &E,
    life: &Life,
    patience: Patience,
    gate: Option<&Gate>,
) -> Result<End, Error> {
    // Declared before the handles, so dropped after them: they may use the device as they
    // go, so the gate is held then (`held`, taken at the end).
    let held;
    let handles: Vec<OnceCell<PerThread<'_, E>>> =
        (0..MAX_INDEXES).map(|_| OnceCell::new()).collect();
    let depth = shared.slots.len();
    let g = gate.map(Gate::enter);
    let open = *life.open.borrow();
    let mut reopened = Ok(());
    for (id, cfg) in open.iter().enumerate() {
        let Some(cfg) = cfg else { continue };
        let state = life.states.get(id).and_then(|s| s.get());
        match remora_core::block_on::block_on(PerThread::open(ep, cfg, state, depth)) {
            Ok(h) => {
                let _ = handles[id].set(h);
            }
            Err(e) => {
                log::warn!("remora: reopening {} after a reconnect: {e}", cfg.name());
                reopened = Err(e);
                break;
            }
        }
    }
    drop(g);
    let end = match reopened {
        Ok(()) => Ok(poller::drive(shared, patience, gate, &life.lost, |i| {
            poller::task(ep, &handles, life, &shared.slots[i], depth)
        })),
        Err(e) => Err(e),
    };
    held = gate.map(Gate::enter);
    let _ = &held;
    end
}

/// Waits (spinning, then parking: [`poller::Idle`]) until an operation is queued: false if
/// the node stopped first.
fn wait_for_work(shared: &PollerShared, patience: Patience) -> bool {
    let mut idle = poller::Idle::new(patience);
    loop {
        if !shared.submitted.is_empty() {
            return true;
        }
        if shared.stop.load(Ordering::SeqCst) {
            return false;
        }
        idle.wait(shared);
    }
}

/// Connects again: up to [`RECONNECT_TRIES`] attempts, backing off between them. Err: the
/// attempts made and the last attempt's error.
fn reconnect<E>(
    connect: &dyn Fn() -> Result<E, Error>,
    gate: Option<&Gate>,
) -> Result<E, (u32, Error)> {
    let mut wait = FIRST_BACKOFF;
    let mut tries = 0;
    loop {
        tries += 1;
        let r = {
            let _g = gate.map(Gate::enter);
            connect()
        };
        match r {
            Ok(e) => {
                log::info!("remora: a poller reconnected (attempt {tries})");
                return Ok(e);
            }
            Err(e) if tries >= RECONNECT_TRIES => return Err((tries, e)),
            Err(e) => {
                log::debug!("remora: reconnect attempt {tries} failed: {e}");
                std::thread::sleep(wait);
                wait *= 2;
            }
        }
    }
}

/// Fails every queued operation with [`Error::Reconnect`] (`tries` attempts, then `why`).
fn fail_queued(shared: &PollerShared, tries: u32, why: &Error) {
    log::warn!("remora: a poller could not reconnect after {tries} attempts: {why}");
    while let Some(i) = shared.submitted.pop() {
        shared.slots[i as usize].data().result = Err(Error::Reconnect {
            tries,
            last: why.to_string(),
        });
        shared.complete(i);
    }
}

//! The hierarchical on-chip lock.
//!
//! Global level: one 8-byte lock word per hash bucket of page addresses, on the page's memory
//! node — in device memory when `onchip_locks`, else in a host-memory table. The word is an
//! owned lock ([`crate::lease`]): CMP_AND_SWP(0 → `owner_word(client, tag)`, a fresh tag per
//! acquisition), released by a WRITE of 0, which command combination posts in the same
//! doorbell as the page write-back (per-queue-pair order makes the write-back land first).
//! Waiters retry the CAS at once (`spin_locks`, as the authors' code does) or back off
//! exponentially on the fabric clock; a word unchanged for a lease has a dead holder, who is
//! fenced off the node before the waiter CASes the word to its own and reports
//! [`Got::TookOver`] (the caller then repairs what the holder may have left half-done). A
//! handle never fences itself: a word naming this client belongs to one of its own
//! coroutines (FG+ has no local table), which is alive.
//!
//! Local level (`hierarchical_locks`): coroutines of one compute node (of all its client
//! threads: the table is the node's, [`super::node::ShermanNode`]) that want the same global
//! lock queue in a local table instead of hammering the NIC (a fixed table, [`super::local`]:
//! a word whose bucket has no free entry is taken at the global level alone, as FG+ takes it,
//! and its release leaves the table alone); the releasing holder hands the
//! global lock straight to a local waiter — of any thread of the node — (no unlock, no CAS)
//! up to `handover_cap` times in a row. A local waiter parks ([`crate::delegation::park`]):
//! it leaves its waker under its ticket, and whoever passes the turn on wakes the waiter whose
//! turn it is (only that one), so a waiter is polled once per hand-over, not at every round
//! of its executor; timers bound the wait (one every sixteenth of its deadline at most, the
//! deadline counted in time watched: [`crate::lease`], "Stalls"). The lock word keeps naming
//! the thread that CASed it until the lock is released: a handed-over holder is covered by
//! that thread's lease.
//! So with the table shared, the unit of failure is the compute node (the process, as in
//! the paper): a thread that dies holding a local turn leaves the node's waiters for that
//! word to their deadline ([`ShermanError::LockHeld`]), and a waiter of another node that
//! outwaits the lease fences the thread the word names, which may be the one that handed the
//! lock over. Per-thread state (`Sherman::create`/`open`) keeps the unit a thread.
use super::ShermanError;
use super::node::ShermanNode;
use super::pace;
use crate::block_on::yield_now;
use crate::delegation::park::{self, Check};
use crate::fabric::{Endpoint, FabricError, Op, QueuePair};
use crate::lease::{LeaseConfig, Stretch, Verdict, Waiter, Watched, holder, owner_word};
use core::cell::{Cell, RefCell};
use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll};
use remora_layouts::GlobalAddr;
use std_alloc::sync::Arc;

/// Waiters of one lock word that park (the ones behind them poll until a slot frees).
pub(super) const PARKED: usize = 4;

/// Lock words that one handle's coroutines can hold at once after finding their entry's
/// bucket of the local table full ([`Locks::bypassed`]); a coroutine that would exceed it
/// waits for an entry or for one of them to be released.
const BYPASSED: usize = 32;

pub(super) struct Locks {
    client: u32,
    tag: Cell<u32>,
    hierarchical: bool,
    combine: bool,
    spin: bool,
    /// Paced waits (`pace.rs`); never with `spin`.
    paced: bool,
    cap: u32,
    lease: LeaseConfig,
    /// The compute node's state: its local lock table.
    node: Arc<ShermanNode>,
    /// Words this handle's coroutines hold that were taken without an entry of the local
    /// table (its bucket was full): their release must not touch the table, where the word
    /// may have an entry by then, serving other coroutines. A holder excludes every other
    /// holder of its word, so a word here is the releasing coroutine's own.
    bypassed: RefCell<heapless::Vec<GlobalAddr, BYPASSED>>,
    /// Coroutines of this handle taking a word without an entry (room kept for each).
    bypassing: Cell<usize>,
}

/// How a lock was obtained (for counters and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Got {
    Acquired,
    HandedOver,
    /// Taken over from `from`, fenced after its lease ran out: what it protected may be
    /// half-written.
    TookOver {
        from: u32,
    },
}

/// How the local level of an acquisition ended ([`Locks::local_turn`]).
enum Turn {
    /// The previous holder handed the global word over: held.
    HandedOver,
    /// Our turn, the node not holding the global word: take it.
    Ours,
    /// No entry for the word: take the global word alone.
    NoEntry,
    /// Gave up waiting for our turn.
    Failed(ShermanError),
}

/// Room kept in [`Locks::bypassed`] by a coroutine taking a word without an entry, given
/// back when its attempt ends (also if its future is dropped halfway).
struct Room<'a>(&'a Cell<usize>);

impl<'a> Room<'a> {
    fn keep(count: &'a Cell<usize>) -> Room<'a> {
        count.set(count.get() + 1);
        Room(count)
    }
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

const ZERO: [u8; 8] = [0; 8];

/// The work requests of one doorbell: at most a new page, a redo record and its pointer, a
/// page written whole (one WRITE; three for the test-only front == rear mutant) and the
/// unlock — fixed capacity, so a write allocates nothing.
pub(crate) type Batch<'b> = heapless::Vec<Op<'b>, 8>;

impl Locks {
    pub(super) fn new(
        client: u32,
        hierarchical: bool,
        combine: bool,
        spin: bool,
        cap: u32,
        lease: LeaseConfig,
        node: Arc<ShermanNode>,
    ) -> Locks {
        Locks {
            client,
            tag: Cell::new(0),
            hierarchical,
            combine,
            spin,
            paced: false,
            cap,
            lease,
            node,
            bypassed: RefCell::new(heapless::Vec::new()),
            bypassing: Cell::new(0),
        }
    }

    /// With paced waits for the global word (`pace.rs`), which do not spin.
    pub(super) fn paced(mut self, on: bool) -> Locks {
        self.paced = on;
        self.spin &= !on;
        self
    }

    /// This handle's next lock word (a tag never used before by it, so a waiter sees every
    /// acquisition as a change of the word).
    fn next_word(&self) -> u64 {
        let t = self.tag.get().wrapping_add(1).max(1);
        self.tag.set(t);
        owner_word(self.client, t)
    }

    /// Takes the lock word at `lock` (on its memory node): the local queue first (bounded by
    /// the deadline on the fabric clock, and by `max_attempts`), then the global word under
    /// the lease protocol. `seen`: the word was already found holding `word`, by a reader
    /// that has watched what the lock protects for the [`Stretch`] since; if the global word
    /// is still that word, that time counts towards its lease.
    pub(super) async fn acquire<E: Endpoint>(
        &self,
        ep: &E,
        lock: GlobalAddr,
        seen: Option<(u64, Stretch)>,
    ) -> Result<Got, ShermanError> {
        let (mut local, mut room) = (false, None);
        if self.hierarchical {
            match self.local_turn(ep, lock).await {
                Turn::HandedOver => return Ok(Got::HandedOver),
                Turn::Failed(e) => return Err(e),
                Turn::Ours => local = true,
                Turn::NoEntry => room = Some(Room::keep(&self.bypassing)),
            }
        }
        let r = self.acquire_global(ep, lock, seen).await;
        if local {
            match r {
                Ok(_) => {
                    self.node.locks.with(lock, |e| e.global = true).await;
                }
                Err(_) => self.give_up(lock).await,
            }
        } else if let Some(room) = room {
            drop(room);
            if r.is_ok() {
                // Room was kept for it (`local_turn`).
                let _ = self.bypassed.borrow_mut().push(lock);
            }
        }
        r
    }

    /// The local level of an acquisition: a ticket of `lock`'s entry in the node's table,
    /// then the wait for its turn, parked (the holder that passes the turn on wakes us),
    /// bounded by the deadline (a timer) and the attempt cap (looks at the queue). Without
    /// an entry (every one of its bucket busy with other words) the caller goes straight to
    /// the global word ([`Turn::NoEntry`]), with room kept in [`Self::bypassed`] (a handle
    /// whose room is all taken waits until an entry or the room frees).
    async fn local_turn<E: Endpoint>(&self, ep: &E, lock: GlobalAddr) -> Turn {
        let table = &self.node.locks;
        let ticket = loop {
            let t = table
                .claim(lock, |e| {
                    e.next += 1;
                    e.next - 1
                })
                .await;
            match t {
                Some(t) => break t,
                None if self.bypassed.borrow().len() + self.bypassing.get() < BYPASSED => {
                    return Turn::NoEntry;
                }
                None => yield_now().await,
            }
        };
        let mut spins = 0u32;
        // The deadline in time watched (`crate::lease`, "Stalls"): the timer of a parked
        // waiter is at most a sixteenth of it, so a timer that fires late because the
        // process was stopped counts two sixteenths, and the waiter parks again.
        let mut watch = None::<Watched>;
        let budget = self.lease.deadline_ns.saturating_add(1);
        let check = |cx: &mut Context<'_>| {
            let now = ep.now_ns();
            let waker = cx.waker();
            let look = pin!(table.with(lock, |e| {
                if e.serving == ticket {
                    return Check::Done(Ok(e.global));
                }
                spins = spins.saturating_add(1);
                let w = watch.get_or_insert_with(|| Watched::new(now, budget));
                if spins > self.lease.max_attempts || w.note(now) == 0 {
                    e.abandoned.insert(ticket);
                    e.parked.forget(ticket);
                    return Check::Done(Err(ShermanError::LockHeld {
                        lock,
                        holder: self.client,
                        word: 0,
                        waited_ns: w.wall_ns(now),
                    }));
                }
                if e.parked.park(ticket, waker) {
                    Check::Park(w.pause_ns())
                } else {
                    Check::Retry
                }
            }));
            // The bucket busy: its lock's future has asked for another poll.
            match look.poll(&mut Context::from_waker(waker)) {
                Poll::Ready(Some(c)) => c,
                // Our ticket keeps the entry ours: not reached.
                Poll::Ready(None) => Check::Done(Ok(false)),
                Poll::Pending => Check::Retry,
            }
        };
        match park::wait(check, |ns| ep.timer(ns)).await {
            Ok(true) => Turn::HandedOver,
            Ok(false) => Turn::Ours,
            Err(e) => Turn::Failed(e),
        }
    }

    /// The global word under the lease protocol of [`crate::lease`].
    async fn acquire_global<E: Endpoint>(
        &self,
        ep: &E,
        lock: GlobalAddr,
        seen: Option<(u64, Stretch)>,
    ) -> Result<Got, ShermanError> {
        let qp = ep.qp_for(lock)?;
        let mine = self.next_word();
        let mut expected = 0u64;
        // A paced wait times its CASes (`pace.rs`): when the last one was sent.
        let mut sent = if self.paced { ep.now_ns() } else { 0 };
        let found = qp.cas(lock, expected, mine).await?;
        if found == expected {
            return Ok(Got::Acquired);
        }
        // Held: from here on the clock runs.
        let start = ep.now_ns();
        // The lease counts only the time this waiter (and the reader before it) watched: a
        // waiter stopped with its process fences no live holder for it.
        let mut w = Waiter::new(self.wait_config(start), start).watching();
        if let Some((word, before)) = seen
            && word != 0
        {
            w.seen_for(word, before, start);
        }
        let mut found = Some(found);
        loop {
            let found = match found.take() {
                Some(f) => f,
                None => {
                    if self.paced {
                        sent = ep.now_ns();
                    }
                    qp.cas(lock, expected, mine).await?
                }
            };
            if found == expected {
                return Ok(if expected == 0 {
                    Got::Acquired
                } else {
                    Got::TookOver {
                        from: holder(expected),
                    }
                });
            }
            expected = 0;
            let held = |word: u64, waited_ns: u64| ShermanError::LockHeld {
                lock,
                holder: holder(word),
                word,
                waited_ns,
            };
            let now = ep.now_ns();
            match w.observe(found, now) {
                // Paced: the round trip of the CAS that found the word held.
                Verdict::Wait(_) if self.paced => {
                    ep.pause(pace::pause(now.saturating_sub(sent), &self.lease))
                        .await
                }
                Verdict::Wait(ns) => ep.pause(ns).await,
                // Our own coroutine holds it: alive, keep waiting.
                Verdict::Expired { word } if self.client != 0 && holder(word) == self.client => {}
                Verdict::Expired { word } if holder(word) == 0 => {
                    // A word naming no client cannot be fenced: never broken.
                    return Err(held(word, ep.now_ns().saturating_sub(start)));
                }
                Verdict::Expired { word } => match ep.fence(lock.node(), holder(word)).await {
                    Ok(()) => expected = word,
                    Err(FabricError::Unsupported { .. }) => {
                        return Err(held(word, ep.now_ns().saturating_sub(start)));
                    }
                    Err(e) => return Err(e.into()),
                },
                Verdict::GiveUp { word, waited_ns } => return Err(held(word, waited_ns)),
            }
        }
    }

    /// The bounds of one wait for the global word: spinning (`spin`,
    /// [`LeaseConfig::spinning`]) or backing off.
    fn wait_config(&self, now: u64) -> LeaseConfig {
        if self.spin {
            self.lease.spinning(now)
        } else {
            self.lease
        }
    }

    /// Our turn ends without the global lock: the next waiter tries.
    async fn give_up(&self, lock: GlobalAddr) {
        self.node.locks.with(lock, |e| e.pass_on()).await;
    }

    /// Whether this handle holds `lock` taken without an entry of the local table (tests).
    #[cfg(test)]
    pub(super) fn bypassed_now(&self, lock: GlobalAddr) -> bool {
        self.bypassed.borrow().contains(&lock)
    }

    /// Whether `lock`, held by the caller, was taken through the local table (else it is
    /// one of [`Self::bypassed`], forgotten now).
    fn held_locally(&self, lock: GlobalAddr) -> bool {
        if !self.hierarchical {
            return false;
        }
        let mut b = self.bypassed.borrow_mut();
        match b.iter().position(|&w| w == lock) {
            Some(i) => {
                b.swap_remove(i);
                false
            }
            None => true,
        }
    }

    /// Posts `writeback` and releases `lock`: hands it to a local waiter, or unlocks it in
    /// the same doorbell (combination) or in a second one.
    pub(super) async fn release<Q: QueuePair>(
        &self,
        qp: &Q,
        lock: GlobalAddr,
        writeback: &mut Batch<'_>,
    ) -> Result<(), ShermanError> {
        let cap = self.cap;
        let local = self.held_locally(lock);
        let hand_over = local
            && self
                .node
                .locks
                .with(lock, |e| {
                    if e.waiting() > 0 && e.handovers < cap {
                        e.handovers += 1;
                        true
                    } else {
                        e.handovers = 0;
                        false
                    }
                })
                .await
                == Some(true);
        let result = if hand_over {
            if writeback.is_empty() {
                Ok(())
            } else {
                qp.post(writeback).await
            }
        } else if writeback.is_empty() {
            // A bare unlock: nothing of the operation's effect waits on it, so it is posted
            // unsignaled where the fabric can (a failure shows on this queue pair's next
            // post; a lock left held is taken over after its lease, as a dead holder's).
            qp.post_unsignaled(&mut [Op::Write {
                remote: lock,
                local: &ZERO,
            }])
            .await
        } else if self.combine {
            // Write-back and unlock in one doorbell, waited for: the operation returns only
            // once its data is in the page (linearizability), so this one stays signaled.
            writeback
                .push(Op::Write {
                    remote: lock,
                    local: &ZERO,
                })
                .expect("a batch has room for the unlock");
            qp.post(writeback).await
        } else {
            // Without combination, as the authors' `write_page_and_unlock` without
            // CONFIG_ENABLE_OP_COUPLE: `write_sync` of the page, then `unlock_addr(...,
            // async = need_split)`, a synchronous `cas_dm_sync` after an ordinary write-back
            // (thustorage/Sherman src/Tree.cpp): the unlock's round trip is waited for, and
            // only then does the local lock pass on. That round trip is what combination
            // saves (posting the unlock unsignaled here would save it without combination).
            match qp.post(writeback).await {
                Ok(()) => {
                    qp.post(&mut [Op::Write {
                        remote: lock,
                        local: &ZERO,
                    }])
                    .await
                }
                Err(e) => Err(e),
            }
        };
        if local {
            // Handed over: the next waiter holds the global lock already. Otherwise it was
            // released (or, on an error, is in an unknown state: the next holder CASes).
            let handed = hand_over && result.is_ok();
            self.node
                .locks
                .with(lock, |e| {
                    e.global = handed;
                    e.pass_on();
                })
                .await;
        }
        result.map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Counters;
    use crate::fabric::Recv;
    use core::cell::RefCell;
    use remora_layouts::NodeId;
    use std_alloc::vec::Vec;

    /// A queue pair that executes nothing and records each post: (ops, signaled).
    #[derive(Default)]
    struct Recorder {
        posts: RefCell<Vec<(usize, bool)>>,
        counters: Counters,
    }

    impl QueuePair for Recorder {
        fn peer(&self) -> NodeId {
            0
        }
        async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
            self.posts.borrow_mut().push((ops.len(), true));
            Ok(())
        }
        async fn post_unsignaled<'a, 'b>(
            &'a self,
            ops: &'a mut [Op<'b>],
        ) -> Result<(), FabricError> {
            self.posts.borrow_mut().push((ops.len(), false));
            Ok(())
        }
        async fn recv<'a>(&'a self, _buf: &'a mut [u8]) -> Result<Recv, FabricError> {
            Err(FabricError::Unsupported { what: "recv" })
        }
        fn try_recv(&self, _buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
            Err(FabricError::Unsupported { what: "recv" })
        }
        fn max_message(&self) -> usize {
            0
        }
        fn counters(&self) -> &Counters {
            &self.counters
        }
        fn is_broken(&self) -> bool {
            false
        }
    }

    /// The posts of one release of a written-back page.
    fn release_posts(combine: bool) -> Vec<(usize, bool)> {
        let lease = LeaseConfig::default_lease();
        let node = Arc::new(ShermanNode::new(&super::super::ShermanConfig::sherman()));
        let locks = Locks::new(7, false, combine, true, 8, lease, node);
        let qp = Recorder::default();
        let page = [0u8; 64];
        let mut wb = Batch::new();
        wb.push(Op::Write {
            remote: GlobalAddr::new(0, 4096),
            local: &page,
        })
        .expect("room");
        crate::block_on::block_on(locks.release(&qp, GlobalAddr::new(0, 64), &mut wb))
            .expect("release");
        qp.posts.into_inner()
    }

    #[test]
    fn without_combination_the_unlock_is_a_second_waited_round_trip() {
        // The authors' non-combined release waits for its unlock (`cas_dm_sync`); the
        // combined one posts write-back and unlock in one doorbell.
        assert_eq!(release_posts(false), [(1, true), (1, true)]);
        assert_eq!(release_posts(true), [(2, true)]);
    }

    fn locks(spin: bool) -> Locks {
        let lease = LeaseConfig {
            max_attempts: 1000,
            ..LeaseConfig::default_lease()
        };
        let node = Arc::new(ShermanNode::new(&super::super::ShermanConfig::sherman()));
        Locks::new(7, false, false, spin, 8, lease, node)
    }

    #[test]
    fn a_spinning_wait_retries_at_once_and_is_bounded_by_time_on_a_clock() {
        let spin = locks(true);
        let on_clock = spin.wait_config(5);
        assert_eq!((on_clock.min_backoff_ns, on_clock.max_backoff_ns), (1, 1));
        assert_eq!(on_clock.max_attempts, u32::MAX);
        assert_eq!(on_clock.lease_ns, spin.lease.lease_ns);
        assert_eq!(on_clock.deadline_ns, spin.lease.deadline_ns);
        // Without a clock (stuck at 0) the attempt cap is the only bound: kept.
        assert_eq!(spin.wait_config(0).max_attempts, 1000);
        // The first pause of a spinning waiter is 1 ns, and stays 1 ns.
        let mut w = Waiter::new(on_clock, 5);
        assert_eq!(w.observe(42, 6), Verdict::Wait(1));
        assert_eq!(w.observe(42, 8), Verdict::Wait(1));
    }

    #[test]
    fn a_backing_off_wait_keeps_the_lease_config() {
        let b = locks(false);
        let c = b.wait_config(5);
        assert_eq!(c, b.lease);
        let mut w = Waiter::new(c, 5);
        let first = w.observe(42, 6);
        assert_eq!(first, Verdict::Wait(c.min_backoff_ns));
        assert_eq!(w.observe(42, 7), Verdict::Wait(2 * c.min_backoff_ns));
    }

    /// A fabric whose clock and timers the test drives.
    #[derive(Default)]
    struct Clocked {
        clock: crate::delegation::park::testing::Clock,
        qp: Recorder,
    }

    impl Endpoint for Clocked {
        type Qp = Recorder;
        fn qp(&self, _node: NodeId) -> Result<&Recorder, FabricError> {
            Ok(&self.qp)
        }
        fn nodes(&self) -> &[NodeId] {
            &[0]
        }
        fn now_ns(&self) -> u64 {
            self.clock.now.get()
        }
        fn pause(&self, ns: u64) -> impl Future<Output = ()> {
            self.clock.timer(ns)
        }
    }

    /// Hierarchical locks of one node with a deadline of 10 µs for a local turn.
    fn local(node: &Arc<ShermanNode>) -> Locks {
        let lease = LeaseConfig {
            deadline_ns: 10_000,
            ..LeaseConfig::default_lease()
        };
        Locks::new(7, true, true, true, 8, lease, node.clone())
    }

    /// The turn passes on as `release` passes it after a hand-over.
    fn hand_over(node: &ShermanNode, lock: GlobalAddr) {
        crate::block_on::block_on(node.locks.with(lock, |e| {
            e.global = true;
            e.pass_on();
        }))
        .expect("the word's entry");
    }

    /// Local waiters park: not polled while the lock is held (they were polled at every
    /// executor round, every 50 ns on the sim, before), and only the waiter whose turn comes
    /// is woken, once per hand-over.
    #[test]
    fn a_local_waiter_is_polled_once_per_hand_over() {
        use crate::delegation::park::testing::Task;
        let node = Arc::new(ShermanNode::new(&super::super::ShermanConfig::sherman()));
        let locks = local(&node);
        let ep = Clocked::default();
        let lock = GlobalAddr::device(0, 64);
        // Ticket 0 holds the lock word (and the global lock).
        crate::block_on::block_on(node.locks.claim(lock, |e| {
            e.next = 1;
            e.global = true;
        }))
        .expect("an entry");
        let mut a = Task::new(locks.acquire(&ep, lock, None));
        let mut b = Task::new(locks.acquire(&ep, lock, None));
        assert!(!a.poll() && !b.poll());
        for _ in 0..100 {
            ep.clock.now.set(ep.clock.now.get() + 50);
            assert!(!a.poll_if_woken() && !b.poll_if_woken());
        }
        assert_eq!((a.polls, b.polls), (1, 1), "parked, not polled");
        hand_over(&node, lock);
        assert!(a.poll_if_woken(), "a's turn: woken");
        assert!(!b.poll_if_woken());
        assert_eq!(b.polls, 1, "b's turn has not come: not woken");
        assert!(matches!(a.out, Some(Ok(Got::HandedOver))));
        hand_over(&node, lock);
        assert!(b.poll_if_woken());
        assert!(matches!(b.out, Some(Ok(Got::HandedOver))));
        assert_eq!((a.polls, b.polls), (2, 2));
        assert_eq!(ep.qp.posts.borrow().len(), 0, "no verb");
    }

    /// Sherman's default cap serves a global acquisition to 8 holders of a compute node in a
    /// row (the one that CASed it and 7 hand-overs), as the authors' `kMaxHandOverTime` = 8
    /// counts them, then releases it although waiters remain.
    #[test]
    fn a_global_acquisition_serves_eight_holders_as_the_authors_hocl() {
        let cfg = super::super::ShermanConfig::sherman();
        let node = Arc::new(ShermanNode::new(&cfg));
        let lease = LeaseConfig::default_lease();
        let locks = Locks::new(7, true, true, true, cfg.handover_cap, lease, node.clone());
        let lock = GlobalAddr::device(0, 192);
        // Ticket 0 holds the global lock, 19 tickets wait behind it.
        crate::block_on::block_on(node.locks.claim(lock, |e| {
            e.next = 20;
            e.global = true;
        }))
        .expect("an entry");
        let qp = Recorder::default();
        let mut holders = 1;
        loop {
            let mut wb = Batch::new();
            crate::block_on::block_on(locks.release(&qp, lock, &mut wb)).expect("release");
            if crate::block_on::block_on(node.locks.with(lock, |e| e.global)) != Some(true) {
                break;
            }
            holders += 1;
        }
        assert_eq!(holders, 8);
        assert_eq!(qp.posts.borrow().len(), 1, "one unlock, at the 8th release");
    }

    /// A parked waiter whose holder died (nobody passes the turn on) is woken by its timer
    /// every sixteenth of its deadline (`crate::lease`, "Stalls"), gives its ticket up once
    /// it has watched for the deadline, and the turn skips it.
    #[test]
    fn a_parked_local_waiter_of_a_dead_holder_ends_at_its_deadline() {
        use crate::delegation::park::testing::Task;
        let node = Arc::new(ShermanNode::new(&super::super::ShermanConfig::sherman()));
        let locks = local(&node);
        let ep = Clocked::default();
        ep.clock.now.set(1_000);
        let lock = GlobalAddr::device(0, 128);
        crate::block_on::block_on(node.locks.claim(lock, |e| {
            e.next = 1;
            e.global = true;
        }))
        .expect("an entry");
        let mut a = Task::new(locks.acquire(&ep, lock, None));
        assert!(!a.poll());
        let mut timers = 0;
        while a.out.is_none() {
            let due = ep.clock.due.take().expect("a timer");
            assert!(
                due - ep.clock.now.get() <= 10_001 / 16,
                "a timer of a sixteenth at most"
            );
            timers += 1;
            ep.clock.now.set(due);
            // The timer's event polls the task; the check follows at its next poll.
            a.poll();
            while a.out.is_none() && ep.clock.due.get().is_none() {
                assert!(
                    a.poll_if_woken() || a.polls < 1000,
                    "ends once its timer fired"
                );
            }
            assert!(timers <= 17, "watched for its deadline");
        }
        let Some(Err(ShermanError::LockHeld { waited_ns, .. })) = a.out else {
            panic!("{:?}", a.out)
        };
        assert!(
            waited_ns > 10_000 && waited_ns <= 10_001 + 625,
            "{waited_ns}"
        );
        crate::block_on::block_on(node.locks.with(lock, |e| {
            assert_eq!(e.parked.len(), 0, "its slot is free");
            e.pass_on();
            assert_eq!(e.serving, 2, "its ticket is skipped");
        }))
        .expect("the word's entry");
    }

    /// Issue 26: a parked waiter whose process was stopped for five deadlines (its timer
    /// fires that late, the holder, a sibling coroutine, stopped with it) parks again instead
    /// of failing, and gets its turn when the holder passes it on.
    #[test]
    fn a_parked_local_waiter_stopped_past_its_deadline_waits_on_for_a_live_holder() {
        use crate::delegation::park::testing::Task;
        let node = Arc::new(ShermanNode::new(&super::super::ShermanConfig::sherman()));
        let locks = local(&node);
        let ep = Clocked::default();
        ep.clock.now.set(1_000);
        let lock = GlobalAddr::device(0, 256);
        crate::block_on::block_on(node.locks.claim(lock, |e| {
            e.next = 1;
            e.global = true;
        }))
        .expect("an entry");
        let mut a = Task::new(locks.acquire(&ep, lock, None));
        assert!(!a.poll());
        ep.clock.due.take().expect("a timer");
        // Stopped: the timer fires five deadlines late.
        ep.clock.now.set(1_000 + 5 * 10_000);
        a.poll();
        for _ in 0..4 {
            a.poll_if_woken();
        }
        assert!(a.out.is_none(), "gave up after a stall: {:?}", a.out);
        // The holder, resumed, passes the turn on.
        hand_over(&node, lock);
        while !a.poll_if_woken() {
            assert!(a.polls < 100, "woken by the hand-over");
        }
        assert!(matches!(a.out, Some(Ok(Got::HandedOver))), "{:?}", a.out);
    }
}

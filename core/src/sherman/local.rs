//! The local lock table of a compute node (the local level of HOCL, seeds/002 §4.2): per
//! global lock word that the node's coroutines (of all its threads) want, a ticket queue and
//! whether the node holds the word, so that a releasing holder can hand it to the next local
//! waiter ([`super::lock`]).
//!
//! As in the paper, the table is a fixed array made when the node's state is
//! ([`super::node::ShermanNode::new`]), indexed by a hash of the lock word's address: taking,
//! waiting for, handing over and releasing a lock allocate nothing. Unlike the paper's array,
//! which has one entry per lock word of every memory node, its entries are fewer than the
//! lock words (32,768 per memory node by default), so an entry is tagged with the word it
//! serves while any coroutine holds or waits for that word, and is free for another word once
//! idle (no ticket outstanding, the global lock not held by the node). A word's entry lives in
//! its home bucket ([`WAYS`] entries under one try-lock, held between awaits only) or nowhere:
//! two words never share an entry, so colliding words never queue behind each other (which
//! would let one holder in behind the other's back, or make a coroutine wait on a word it
//! holds). A word that finds every entry of its bucket busy with other words is taken at the
//! global level alone, as FG+ takes it ([`super::lock::Locks::acquire`]): correct, since the
//! global word is what excludes holders (a hand-over passes a word the node holds, only
//! between users of the word's entry), and rare, since busy entries are bounded by the node's
//! coroutines.
use super::lock::PARKED;
use crate::block_on::yield_now;
use crate::delegation::park::Parked;
use crate::smart::shared::{TryLock, TryLockGuard};
use remora_layouts::GlobalAddr;
use std_alloc::collections::BTreeSet;
use std_alloc::vec::Vec;

/// Buckets of a node's table when its trees use the local level.
pub(crate) const BUCKETS: usize = 256;
/// Entries per bucket: at most this many words of one bucket are served locally at once.
pub(crate) const WAYS: usize = 8;

/// One global lock word as this compute node sees it: a ticket queue (FIFO, so a coroutine
/// that just released cannot barge ahead of the ones waiting), and whether the node holds the
/// global lock.
#[derive(Default)]
pub(crate) struct LocalLock {
    pub(super) next: u64,
    pub(super) serving: u64,
    pub(super) global: bool,
    pub(super) handovers: u32,
    /// Tickets whose coroutine gave up waiting (at its deadline); skipped when their turn
    /// comes.
    pub(super) abandoned: BTreeSet<u64>,
    /// Waiters parked for their turn, under their tickets: the one whose turn comes is woken
    /// (only it), by whoever passes the turn on.
    pub(super) parked: Parked<PARKED>,
}

impl LocalLock {
    /// Coroutines still waiting behind the current holder.
    pub(super) fn waiting(&self) -> u64 {
        self.next - self.serving - 1 - self.abandoned.len() as u64
    }

    /// The turn passes to the next ticket still wanted, whose waiter is woken.
    pub(super) fn pass_on(&mut self) {
        self.serving += 1;
        while self.abandoned.remove(&self.serving) {
            self.serving += 1;
        }
        let serving = self.serving;
        self.parked.wake_if(|ticket| ticket <= serving);
    }

    /// Nobody holds or waits for the word here, and the node does not hold it: the entry
    /// may serve another word.
    fn idle(&self) -> bool {
        self.next == self.serving && !self.global
    }
}

/// An entry of the table: the word it serves (while not idle) and its queue.
#[derive(Default)]
struct Way {
    word: Option<GlobalAddr>,
    lock: LocalLock,
}

type Bucket = [Way; WAYS];

/// The local level of HOCL for one compute node (see the module).
pub(crate) struct LocalLocks {
    buckets: Vec<TryLock<Bucket>>,
}

impl LocalLocks {
    /// A table of `buckets` buckets (at least one) of [`WAYS`] entries.
    pub(crate) fn new(buckets: usize) -> LocalLocks {
        LocalLocks {
            buckets: (0..buckets.max(1))
                .map(|_| TryLock::new(core::array::from_fn(|_| Way::default())))
                .collect(),
        }
    }

    /// The bucket of `lock`, locked (polls the executor while another thread holds it).
    async fn bucket(&self, lock: GlobalAddr) -> TryLockGuard<'_, Bucket> {
        let h = lock.raw().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let b = &self.buckets[h as usize % self.buckets.len()];
        loop {
            if let Some(g) = b.try_lock() {
                return g;
            }
            yield_now().await;
        }
    }

    /// Runs `f` on the entry of `lock`, made from an idle entry of its bucket if it has none;
    /// `None` (and `f` not run) when every entry of the bucket serves another word.
    pub(crate) async fn claim<R>(
        &self,
        lock: GlobalAddr,
        f: impl FnOnce(&mut LocalLock) -> R,
    ) -> Option<R> {
        let mut b = self.bucket(lock).await;
        if let Some(w) = b.iter_mut().find(|w| w.word == Some(lock)) {
            return Some(f(&mut w.lock));
        }
        let w = b.iter_mut().find(|w| w.word.is_none() || w.lock.idle())?;
        w.word = Some(lock);
        // Idle: no ticket outstanding, so nobody is parked or abandoned; the hand-over
        // count belongs to the word it served.
        w.lock.handovers = 0;
        w.lock.abandoned.clear();
        w.lock.parked.clear();
        Some(f(&mut w.lock))
    }

    /// Runs `f` on the entry of `lock` (`None`: it has none; never the case while the
    /// caller holds a ticket of it, which keeps the entry from being idle).
    pub(crate) async fn with<R>(
        &self,
        lock: GlobalAddr,
        f: impl FnOnce(&mut LocalLock) -> R,
    ) -> Option<R> {
        let mut b = self.bucket(lock).await;
        let w = b.iter_mut().find(|w| w.word == Some(lock))?;
        Some(f(&mut w.lock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_on::block_on;
    use crate::fabric::Endpoint;

    /// A word of node 0's device memory.
    fn word(i: u64) -> GlobalAddr {
        GlobalAddr::device(0, i * 8)
    }

    /// Takes a ticket of `lock` (`None`: its bucket is full).
    fn ticket(t: &LocalLocks, lock: GlobalAddr) -> Option<u64> {
        block_on(t.claim(lock, |e| {
            e.next += 1;
            e.next - 1
        }))
    }

    #[test]
    fn colliding_words_get_their_own_entries_until_the_bucket_is_full() {
        // One bucket: every word collides.
        let t = LocalLocks::new(1);
        for i in 0..WAYS as u64 {
            assert_eq!(ticket(&t, word(i)), Some(0), "word {i}: its own queue");
        }
        assert_eq!(
            ticket(&t, word(0)),
            Some(1),
            "a word's second ticket queues"
        );
        assert_eq!(ticket(&t, word(99)), None, "every entry busy: no entry");
        assert_eq!(block_on(t.with(word(99), |e| e.next)), None);
        // Word 1's holder releases: its entry is idle and serves the next word.
        block_on(t.with(word(1), |e| e.pass_on())).expect("word 1's entry");
        assert_eq!(
            ticket(&t, word(99)),
            Some(1),
            "the idle entry, its counters kept"
        );
        assert_eq!(
            block_on(t.with(word(1), |e| e.next)),
            None,
            "word 1 lost it"
        );
        // Word 0 has a waiter: its entry is not idle after its holder passes the turn on.
        block_on(t.with(word(0), |e| e.pass_on())).expect("word 0's entry");
        assert_eq!(ticket(&t, word(100)), None);
        assert_eq!(block_on(t.with(word(0), |e| e.serving)), Some(1));
    }

    #[test]
    fn an_entry_whose_node_holds_the_global_word_is_not_reused() {
        let t = LocalLocks::new(1);
        for i in 0..WAYS as u64 {
            assert_eq!(ticket(&t, word(i)), Some(0));
        }
        for i in 0..WAYS as u64 {
            // Handed over to nobody yet: the node keeps the word between two holders.
            block_on(t.with(word(i), |e| {
                e.global = true;
                e.pass_on();
            }))
            .expect("entry");
        }
        assert_eq!(ticket(&t, word(99)), None, "held globally: busy");
        block_on(t.with(word(3), |e| e.global = false)).expect("entry");
        assert_eq!(ticket(&t, word(99)), Some(1));
    }

    /// Words in a map; every post executes at once, then yields once (so coroutines
    /// interleave between a CAS and what follows it).
    struct Words {
        mem: core::cell::RefCell<std_alloc::collections::BTreeMap<u64, u64>>,
        counters: crate::counters::Counters,
    }

    impl crate::fabric::QueuePair for Words {
        crate::post_only_qp!();
        async fn post<'a, 'b>(
            &'a self,
            ops: &'a mut [crate::fabric::Op<'b>],
        ) -> Result<(), crate::fabric::FabricError> {
            use crate::fabric::Op;
            for op in ops.iter_mut() {
                let mut m = self.mem.borrow_mut();
                match op {
                    Op::Cas {
                        remote,
                        compare,
                        swap,
                        old,
                    } => {
                        let w = m.entry(remote.raw()).or_default();
                        **old = *w;
                        if *w == *compare {
                            *w = *swap;
                        }
                    }
                    Op::Write { remote, local } => {
                        let v = u64::from_le_bytes((*local).try_into().expect("a word"));
                        m.insert(remote.raw(), v);
                    }
                    _ => unreachable!("lock words are CASed and written"),
                }
            }
            yield_now().await;
            Ok(())
        }
    }

    /// Two handles (client threads) of one compute node, 6 coroutines each, take 10 lock
    /// words that all fall in one bucket of 8 entries: some words get an entry and hand the
    /// lock over, the others are taken without one, and a word served both ways over time
    /// never has two holders, and every coroutine finishes (no deadlock).
    #[test]
    fn colliding_words_never_let_two_holders_in_nor_deadlock() {
        use super::super::lock::{Got, Locks};
        use super::super::node::ShermanNode;
        use crate::lease::LeaseConfig;
        use crate::testing::OneNode;
        use core::cell::Cell;
        use core::future::Future;
        use core::pin::Pin;
        use core::task::{Context, Waker};
        use std_alloc::boxed::Box;
        use std_alloc::sync::Arc;
        use std_alloc::vec;

        // Node state made for trees without the local level: a table of one bucket.
        let mut cfg = super::super::ShermanConfig::sherman();
        cfg.hierarchical_locks = false;
        let node = Arc::new(ShermanNode::new(&cfg));
        let ep = OneNode::new(Words {
            mem: Default::default(),
            counters: crate::counters::Counters::new(),
        });
        let lease = LeaseConfig::default_lease();
        let handles = [7, 8].map(|c| Locks::new(c, true, true, true, 7, lease, node.clone()));
        const WORDS: u64 = 10;
        let inside: [Cell<bool>; WORDS as usize] = Default::default();
        let (handed, bypassed, taken) = (Cell::new(0u32), Cell::new(0u32), Cell::new(0u32));
        let mut coros: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
        for (h, locks) in handles.iter().enumerate() {
            for c in 0..6u64 {
                let (ep, inside) = (&ep, &inside);
                let (handed, bypassed, taken) = (&handed, &bypassed, &taken);
                coros.push(Box::pin(async move {
                    for i in 0..300u64 {
                        let w = (i * 7 + c * 3 + h as u64) % WORDS;
                        let lock = word(w);
                        let got = locks.acquire(ep, lock, None).await.expect("acquire");
                        if got == Got::HandedOver {
                            handed.set(handed.get() + 1);
                        }
                        if locks.bypassed_now(lock) {
                            bypassed.set(bypassed.get() + 1);
                        }
                        let me = &inside[w as usize];
                        assert!(!me.get(), "two holders of word {w}");
                        me.set(true);
                        for _ in 0..(i % 3) {
                            yield_now().await;
                        }
                        me.set(false);
                        taken.set(taken.get() + 1);
                        let qp = ep.qp_for(lock).expect("qp");
                        let mut none = super::super::lock::Batch::new();
                        locks.release(qp, lock, &mut none).await.expect("release");
                    }
                }));
            }
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut done = vec![false; coros.len()];
        let mut rounds = 0u32;
        while done.iter().any(|d| !d) {
            rounds += 1;
            assert!(rounds < 1_000_000, "coroutines stuck: a deadlock");
            for (i, f) in coros.iter_mut().enumerate() {
                if !done[i] && f.as_mut().poll(&mut cx).is_ready() {
                    done[i] = true;
                }
            }
        }
        drop(coros);
        assert_eq!(taken.get(), 12 * 300);
        assert!(handed.get() > 0, "no hand-over");
        assert!(bypassed.get() > 0, "no word taken without an entry");
        assert!(
            ep.qp.mem.borrow().values().all(|&v| v == 0),
            "every word released"
        );
        for w in 0..WORDS {
            // Every entry idle again: the next claims get entries.
            block_on(node.locks.with(word(w), |e| assert!(e.idle())));
        }
    }
}

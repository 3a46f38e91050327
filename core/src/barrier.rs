//! A barrier held in a memory node, for compute-node processes on different hosts that must
//! start a phase together (the papers' clusters use memcached for this; remora needs nothing
//! beyond the memory node).
//!
//! One 8-byte word of the region header ([`BARRIER_OFFSET`], the header's first reserved
//! word): the high 32 bits are the generation, the low 32 bits the arrivals in it. A process
//! arrives with FETCH_AND_ADD 1; the one that makes the count reach `n` releases the others
//! with a second FETCH_AND_ADD that adds one generation and takes `n` arrivals off; the
//! others READ the word until its generation moves on. One-sided only, so any memory node
//! service and any fabric (verbs included) carries it, and each use is a new generation: a
//! second run on the same memory node does not see the first one's count.
use crate::fabric::{FabricError, QueuePair};
use remora_layouts::GlobalAddr;

/// Remote offset of the barrier word in every region header (its `reserved[0]`, which
/// nothing else uses).
pub const BARRIER_OFFSET: u64 = 48;

const COUNT_MASK: u64 = 0xffff_ffff;
const GEN_ONE: u64 = 1 << 32;

/// Why a barrier did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierError {
    /// The fabric failed.
    Fabric(FabricError),
    /// Not all `n` processes arrived before the bound; `arrived` had (this one included,
    /// though it withdrew its arrival on the way out when it could).
    Timeout {
        /// Processes that had arrived.
        arrived: u64,
        /// Processes the barrier waits for.
        n: u64,
    },
    /// The word holds more arrivals than `n`: processes with another cluster size, or
    /// arrivals left by an earlier run that died inside a barrier (restart the memory node).
    Overfull {
        /// Arrivals the word holds.
        arrived: u64,
        /// Processes this one expects.
        n: u64,
    },
    /// `n` is 0 or does not fit the 32-bit count.
    BadSize {
        /// The cluster size given.
        n: u64,
    },
}

impl From<FabricError> for BarrierError {
    fn from(e: FabricError) -> Self {
        BarrierError::Fabric(e)
    }
}

impl core::fmt::Display for BarrierError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BarrierError::Fabric(e) => write!(f, "barrier: {e}"),
            BarrierError::Timeout { arrived, n } => write!(
                f,
                "barrier timed out: {arrived} of {n} compute-node processes arrived"
            ),
            BarrierError::Overfull { arrived, n } => write!(
                f,
                "barrier word holds {arrived} arrivals for a cluster of {n}: another cluster \
                 size, or arrivals left by a run that died in a barrier (restart the memnode)"
            ),
            BarrierError::BadSize { n } => write!(f, "barrier size {n} is not in 1..2^32"),
        }
    }
}

impl core::error::Error for BarrierError {}

/// How long [`wait`] polls before it gives up.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// Give up after this many ns of [`QueuePair::clock_ns`] (fabrics with a clock).
    pub timeout_ns: u64,
    /// Give up after this many READs whatever the clock says (fabrics without one).
    pub max_polls: u64,
    /// Back-off between READs ([`QueuePair::pause`]).
    pub pause_ns: u64,
}

/// Arrives at the barrier word of `qp`'s memory node and waits until `n` processes in all
/// have arrived in this generation. Returns the generation released.
pub async fn wait<Q: QueuePair>(qp: &Q, n: u64, bound: Bound) -> Result<u64, BarrierError> {
    if n == 0 || n > COUNT_MASK {
        return Err(BarrierError::BadSize { n });
    }
    let word = GlobalAddr::new(qp.peer(), BARRIER_OFFSET);
    let old = qp.faa(word, 1).await?;
    let generation = old >> 32;
    let arrived = (old & COUNT_MASK) + 1;
    if arrived > n {
        withdraw(qp, word, generation).await;
        return Err(BarrierError::Overfull { arrived, n });
    }
    if arrived == n {
        // Next generation, n arrivals fewer (wrapping: adds 2^32 - n).
        qp.faa(word, GEN_ONE.wrapping_sub(n)).await?;
        return Ok(generation);
    }
    let start = qp.clock_ns();
    let mut buf = [0u8; 8];
    let mut seen = arrived;
    for _ in 0..bound.max_polls {
        qp.read(word, &mut buf).await?;
        let v = u64::from_le_bytes(buf);
        if v >> 32 != generation {
            return Ok(generation);
        }
        seen = v & COUNT_MASK;
        if let (Some(s), Some(now)) = (start, qp.clock_ns())
            && now.saturating_sub(s) > bound.timeout_ns
        {
            break;
        }
        qp.pause(bound.pause_ns).await;
    }
    withdraw(qp, word, generation).await;
    Err(BarrierError::Timeout { arrived: seen, n })
}

/// Takes one arrival back off generation `generation`, unless it was released meanwhile
/// (CMP_AND_SWP, a few attempts: a withdrawal that loses every race is left in place).
async fn withdraw<Q: QueuePair>(qp: &Q, word: GlobalAddr, generation: u64) {
    let mut buf = [0u8; 8];
    for _ in 0..16 {
        if qp.read(word, &mut buf).await.is_err() {
            return;
        }
        let v = u64::from_le_bytes(buf);
        if v >> 32 != generation || v & COUNT_MASK == 0 {
            return;
        }
        match qp.cas(word, v, v - 1).await {
            Ok(old) if old == v => return,
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::counters::Counters;
    use crate::fabric::{Op, Recv};
    use core::cell::Cell;
    use core::pin::Pin;
    use core::task::{Context, Poll, Waker};
    use std::boxed::Box;
    use std::vec::Vec;

    /// An in-memory queue pair over one word: every verb lands on it at once (a clock
    /// that ticks once per poll of the word, so timeouts are in polls).
    struct WordQp<'a> {
        word: &'a Cell<u64>,
        tick: &'a Cell<u64>,
        counters: Counters,
    }

    impl QueuePair for WordQp<'_> {
        fn peer(&self) -> remora_layouts::NodeId {
            0
        }
        async fn post<'a, 'b>(&'a self, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
            for op in ops.iter_mut() {
                assert_eq!(op.remote().map(|r| r.offset()), Some(BARRIER_OFFSET));
                let v = self.word.get();
                match op {
                    Op::Read { local, .. } => local.copy_from_slice(&v.to_le_bytes()),
                    Op::Faa { add, old, .. } => {
                        **old = v;
                        self.word.set(v.wrapping_add(*add));
                    }
                    Op::Cas {
                        compare, swap, old, ..
                    } => {
                        **old = v;
                        if v == *compare {
                            self.word.set(*swap);
                        }
                    }
                    _ => panic!("the barrier only reads and adds"),
                }
            }
            Ok(())
        }
        async fn recv<'a>(&'a self, _buf: &'a mut [u8]) -> Result<Recv, FabricError> {
            Err(FabricError::Unsupported { what: "recv" })
        }
        fn try_recv(&self, _buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
            Ok(None)
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
        fn clock_ns(&self) -> Option<u64> {
            self.tick.set(self.tick.get() + 1);
            Some(self.tick.get())
        }
    }

    const BOUND: Bound = Bound {
        timeout_ns: 1000,
        max_polls: 100_000,
        pause_ns: 0,
    };

    type Waiting<'a> = Pin<Box<dyn Future<Output = Result<u64, BarrierError>> + 'a>>;

    /// Polls all `futs` round-robin until each is done; the outputs in order.
    fn join(mut futs: Vec<Waiting<'_>>) -> Vec<Result<u64, BarrierError>> {
        let mut out: Vec<Option<Result<u64, BarrierError>>> = futs.iter().map(|_| None).collect();
        let mut cx = Context::from_waker(Waker::noop());
        while out.iter().any(Option::is_none) {
            for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
                if o.is_none()
                    && let Poll::Ready(v) = f.as_mut().poll(&mut cx)
                {
                    *o = Some(v);
                }
            }
        }
        out.into_iter().map(Option::unwrap).collect()
    }

    #[test]
    fn releases_all_together_then_a_second_run_starts_clean() {
        let word = Cell::new(0u64);
        let tick = Cell::new(0u64);
        let qps: Vec<WordQp> = (0..4)
            .map(|_| WordQp {
                word: &word,
                tick: &tick,
                counters: Counters::default(),
            })
            .collect();
        for run in 0..3u64 {
            let futs: Vec<Waiting> = qps
                .iter()
                .map(|q| Box::pin(wait(q, 4, BOUND)) as _)
                .collect();
            let got = join(futs);
            assert!(got.iter().all(|r| *r == Ok(run)), "run {run}: {got:?}");
            assert_eq!(
                word.get(),
                (run + 1) << 32,
                "count back to 0, next generation"
            );
        }
    }

    #[test]
    fn nobody_leaves_before_the_last_arrives() {
        let word = Cell::new(0u64);
        let tick = Cell::new(0u64);
        let qp = WordQp {
            word: &word,
            tick: &tick,
            counters: Counters::default(),
        };
        let mut cx = Context::from_waker(Waker::noop());
        let mut early = Box::pin(wait(
            &qp,
            2,
            Bound {
                timeout_ns: u64::MAX,
                ..BOUND
            },
        ));
        for _ in 0..100 {
            assert!(early.as_mut().poll(&mut cx).is_pending(), "left alone");
        }
        let late = WordQp {
            word: &word,
            tick: &tick,
            counters: Counters::default(),
        };
        assert_eq!(crate::block_on::block_on(wait(&late, 2, BOUND)), Ok(0));
        assert_eq!(early.as_mut().poll(&mut cx), Poll::Ready(Ok(0)));
    }

    #[test]
    fn a_timeout_names_the_arrivals_and_withdraws() {
        let word = Cell::new(0u64);
        let tick = Cell::new(0u64);
        let qp = WordQp {
            word: &word,
            tick: &tick,
            counters: Counters::default(),
        };
        // Two of three arrive; the second gives up after the bound.
        word.set(1);
        let r = crate::block_on::block_on(wait(&qp, 3, BOUND));
        assert_eq!(r, Err(BarrierError::Timeout { arrived: 2, n: 3 }));
        assert_eq!(word.get(), 1, "its own arrival taken back");
        assert_eq!(
            crate::block_on::block_on(wait(&qp, 0, BOUND)),
            Err(BarrierError::BadSize { n: 0 })
        );
        // More arrivals than the cluster: refused at once.
        word.set(5);
        let r = crate::block_on::block_on(wait(&qp, 3, BOUND));
        assert_eq!(r, Err(BarrierError::Overfull { arrived: 6, n: 3 }));
    }
}

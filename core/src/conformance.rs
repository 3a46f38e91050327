//! The fabric conformance suite: what every fabric must do, checked the same way everywhere.
//!
//! A fabric implements [`Harness`] in its tests (one memory node running the echo service of
//! [`crate::echo`], and a way to run concurrent clients) and calls [`run_all`]. Each check
//! panics with a message naming the broken rule of [`crate::fabric`].
use crate::alloc::RemoteAllocator;
use crate::echo::parse_imm_reply;
use crate::fabric::{Endpoint, FabricError, Op, QueuePair, RecvKind, SegmentOrder, Verb};
use core::future::Future;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use remora_layouts::{GlobalAddr, NodeId};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// What a fabric provides to be checked.
pub trait Harness: Sync {
    /// The endpoint each client of [`Harness::run`] gets.
    type Ep: Endpoint;
    /// The memory node under test; its echo service must be running.
    fn node(&self) -> NodeId;
    /// Bytes in the node's host region, header included.
    fn region_len(&self) -> u64;
    /// Bytes of the node's device memory (0: none).
    fn dm_len(&self) -> u64;
    /// Runs `n` clients concurrently to completion, client `i` running `task(i, endpoint)` on
    /// a fresh endpoint of its own. Concurrent means truly interleaved: threads, processes,
    /// or coroutines in virtual time, as the fabric does it.
    fn run<T, F>(&self, n: usize, task: T)
    where
        T: Fn(usize, Self::Ep) -> F + Send + Sync,
        F: Future<Output = ()>;
    /// Revokes the region's key and registers it again under a new one (what a memory node
    /// restart does). Endpoints made before keep the old key. May be called from a task.
    fn revoke_key(&self);
    /// The segment order the fabric promises to produce (rule 2 promises none; software
    /// fabrics shuffle on purpose). A real NIC's is whatever the hardware does: `None`.
    fn segment_order(&self) -> Option<SegmentOrder> {
        None
    }
}

/// Every check by name, in an order where each relies only on those before it.
#[allow(clippy::type_complexity)]
pub fn checks<H: Harness>() -> Vec<(&'static str, fn(&H))> {
    vec![
        ("read_write_round_trip", read_write_round_trip::<H>),
        (
            "batch_takes_effect_in_order",
            batch_takes_effect_in_order::<H>,
        ),
        (
            "order_is_visible_to_other_clients",
            order_is_visible_to_other_clients::<H>,
        ),
        ("torn_reads_are_observable", torn_reads_are_observable::<H>),
        (
            "segments_move_in_no_fixed_order",
            segments_move_in_no_fixed_order::<H>,
        ),
        ("faa_is_linearizable", faa_is_linearizable::<H>),
        ("cas_is_linearizable", cas_is_linearizable::<H>),
        (
            "misaligned_atomic_is_refused",
            misaligned_atomic_is_refused::<H>,
        ),
        (
            "out_of_range_fails_without_touching_memory",
            out_of_range_fails_without_touching_memory::<H>,
        ),
        ("unknown_node_is_an_error", unknown_node_is_an_error::<H>),
        (
            "write_imm_delivers_its_immediate",
            write_imm_delivers_its_immediate::<H>,
        ),
        ("send_recv_round_trip", send_recv_round_trip::<H>),
        ("device_memory", device_memory::<H>),
        (
            "counters_count_what_was_done",
            counters_count_what_was_done::<H>,
        ),
        ("revoked_key_is_refused", revoked_key_is_refused::<H>),
    ]
}

/// Runs every check; panics at the first failure.
pub fn run_all<H: Harness>(h: &H) {
    for (_, check) in checks::<H>() {
        check(h);
    }
}

/// Sets a stop flag when dropped: a reader that fails (panics) still stops its writer.
struct StopOnDrop<'a>(&'a AtomicBool);
impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// Writes a racing writer makes at most, whatever its reader does.
const MAX_WRITES: u64 = 5_000_000;

/// The racing writer of the tearing checks: rewrites `len` bytes at `base` with every word
/// equal to 1, 2, 3, ... (publishing the count in `writes`) until `stop` or `MAX_WRITES`.
async fn rewrite_until_stopped<Q: QueuePair>(
    qp: &Q,
    base: GlobalAddr,
    len: usize,
    stop: &AtomicBool,
    writes: &AtomicU64,
) {
    let mut v = 0u64;
    let mut img = vec![0u8; len];
    while !stop.load(Relaxed) && v < MAX_WRITES {
        v += 1;
        for w in img.chunks_mut(8) {
            w.copy_from_slice(&v.to_le_bytes());
        }
        qp.write(base, &img).await.expect("writer");
        writes.store(v, Relaxed);
    }
}

/// Takes a fresh chunk on the node under test and returns its address.
pub fn fresh_chunk<H: Harness>(h: &H) -> GlobalAddr {
    let out = AtomicU64::new(0);
    let node = h.node();
    h.run(1, |_, ep| {
        let out = &out;
        async move {
            let qp = ep.qp(node).expect("endpoint has a queue pair to the node");
            let a = RemoteAllocator::open(qp)
                .await
                .expect("region header decodes");
            out.store(a.alloc_chunk(qp).await.expect("chunk").raw(), SeqCst);
        }
    });
    GlobalAddr::from_raw(out.load(SeqCst))
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

/// READ returns what WRITE wrote, at every size and alignment.
pub fn read_write_round_trip<H: Harness>(h: &H) {
    let base = fresh_chunk(h);
    let node = h.node();
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        for (i, &(off, len)) in [
            (0u64, 8usize),
            (3, 1),
            (5, 13),
            (64, 64),
            (100, 1000),
            (8, 4096),
        ]
        .iter()
        .enumerate()
        {
            let data = pattern(i as u64 + 1, len);
            qp.write(base.add(off), &data).await.expect("write");
            let mut back = vec![0u8; len];
            qp.read(base.add(off), &mut back).await.expect("read");
            assert_eq!(back, data, "READ after WRITE at +{off} len {len} differs");
        }
        let mut empty = [0u8; 0];
        qp.read(base, &mut empty)
            .await
            .expect("zero-length read succeeds");
    });
}

/// Ops of one batch, and batches of one queue pair, take effect in posting order.
pub fn batch_takes_effect_in_order<H: Harness>(h: &H) {
    let base = fresh_chunk(h);
    let node = h.node();
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        let one = 1u64.to_le_bytes();
        let (mut back, mut old_cas, mut old_faa) = ([0u8; 8], 0u64, 0u64);
        let mut ops = [
            Op::Write {
                remote: base,
                local: &one,
            },
            Op::Cas {
                remote: base,
                compare: 1,
                swap: 10,
                old: &mut old_cas,
            },
            Op::Faa {
                remote: base,
                add: 5,
                old: &mut old_faa,
            },
            Op::Read {
                remote: base,
                local: &mut back,
            },
        ];
        qp.post(&mut ops).await.expect("batch");
        assert_eq!(old_cas, 1, "CAS did not see the WRITE posted before it");
        assert_eq!(old_faa, 10, "FAA did not see the CAS posted before it");
        assert_eq!(
            u64::from_le_bytes(back),
            15,
            "READ did not see the FAA posted before it"
        );
    });
}

/// A reader on another queue pair that sees a later WRITE of a queue pair also sees the
/// earlier ones (data then flag, read as flag then data).
pub fn order_is_visible_to_other_clients<H: Harness>(h: &H) {
    const ROUNDS: u64 = 2000;
    let base = fresh_chunk(h);
    let (flag, data) = (base, base.add(64));
    let node = h.node();
    let done = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    h.run(2, |i, ep| {
        let (done, checks) = (&done, &checks);
        async move {
            let qp = ep.qp(node).unwrap();
            if i == 0 {
                for r in 1..=ROUNDS {
                    let d = [r; 8].map(u64::to_le_bytes).concat();
                    let f = r.to_le_bytes();
                    let mut ops = [
                        Op::Write {
                            remote: data,
                            local: &d,
                        },
                        Op::Write {
                            remote: flag,
                            local: &f,
                        },
                    ];
                    qp.post(&mut ops).await.expect("writer batch");
                }
                done.store(true, SeqCst);
            } else {
                let mut last = 0;
                while last < ROUNDS {
                    let (mut f, mut d) = ([0u8; 8], [0u8; 64]);
                    let mut ops = [
                        Op::Read {
                            remote: flag,
                            local: &mut f,
                        },
                        Op::Read {
                            remote: data,
                            local: &mut d,
                        },
                    ];
                    qp.post(&mut ops).await.expect("reader batch");
                    let f = u64::from_le_bytes(f);
                    for w in d.chunks(8) {
                        let w = u64::from_le_bytes(w.try_into().unwrap());
                        assert!(w >= f, "saw flag {f} but a data word {w}: order broken");
                    }
                    assert!(f >= last, "flag went backwards {last} -> {f}");
                    last = f;
                    checks.fetch_add(1, Relaxed);
                    if done.load(SeqCst) && f == ROUNDS {
                        break;
                    }
                }
            }
        }
    });
    assert!(checks.load(SeqCst) > 0);
}

/// A 1 KiB READ racing a 1 KiB WRITE sees a mix of old and new words at least once, and
/// never a word no one wrote.
pub fn torn_reads_are_observable<H: Harness>(h: &H) {
    const LEN: usize = 1024;
    const MAX_READS: u64 = 200_000;
    let base = fresh_chunk(h);
    let node = h.node();
    let stop = AtomicBool::new(false);
    let torn = AtomicU64::new(0);
    let writes = AtomicU64::new(0);
    h.run(2, |i, ep| {
        let (stop, torn, writes) = (&stop, &torn, &writes);
        async move {
            let qp = ep.qp(node).unwrap();
            if i == 0 {
                rewrite_until_stopped(qp, base, LEN, stop, writes).await;
            } else {
                let _stop = StopOnDrop(stop);
                let mut img = vec![0u8; LEN];
                for _ in 0..MAX_READS {
                    qp.read(base, &mut img).await.expect("reader");
                    let hi = writes.load(Relaxed) + 1;
                    let words: Vec<u64> = img
                        .chunks(8)
                        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
                        .collect();
                    for &w in &words {
                        assert!(w <= hi, "word {w} was never written (latest {hi})");
                    }
                    if words.iter().any(|&w| w != words[0]) {
                        torn.fetch_add(1, Relaxed);
                        if torn.load(Relaxed) >= 3 {
                            break;
                        }
                    }
                }
                stop.store(true, Relaxed);
            }
        }
    });
    assert!(
        torn.load(SeqCst) > 0,
        "no torn read in {MAX_READS} reads racing {} writes: the fabric hides tearing",
        writes.load(SeqCst)
    );
}

/// Rule 2: no order among the segments of one transfer. A fabric that says it shuffles must
/// show it: a 16-segment WRITE racing READs of the same bytes yields snapshots whose segments
/// alternate between old and new values several times along the addresses (in ascending order
/// a snapshot changes value at most once or twice), and every word is one some WRITE wrote.
pub fn segments_move_in_no_fixed_order<H: Harness>(h: &H) {
    const LEN: usize = 1024;
    const MAX_READS: u64 = 200_000;
    let Some(order) = h.segment_order() else {
        return;
    };
    if order == SegmentOrder::Ascending {
        return;
    }
    let base = fresh_chunk(h);
    let node = h.node();
    let stop = AtomicBool::new(false);
    let mixed = AtomicU64::new(0);
    let writes = AtomicU64::new(0);
    let reads = AtomicU64::new(0);
    h.run(2, |i, ep| {
        let (stop, mixed, writes, reads) = (&stop, &mixed, &writes, &reads);
        async move {
            let qp = ep.qp(node).unwrap();
            if i == 0 {
                rewrite_until_stopped(qp, base, LEN, stop, writes).await;
            } else {
                let _stop = StopOnDrop(stop);
                let mut img = vec![0u8; LEN];
                for _ in 0..MAX_READS {
                    qp.read(base, &mut img).await.expect("reader");
                    reads.fetch_add(1, Relaxed);
                    let hi = writes.load(Relaxed) + 1;
                    let seg =
                        |k: usize| u64::from_le_bytes(img[k * 64..k * 64 + 8].try_into().unwrap());
                    let mut changes = 0;
                    for k in 0..LEN / 64 {
                        assert!(
                            seg(k) <= hi,
                            "word {} was never written (latest {hi})",
                            seg(k)
                        );
                        if k > 0 && seg(k) != seg(k - 1) {
                            changes += 1;
                        }
                    }
                    if changes >= 3 && mixed.fetch_add(1, Relaxed) >= 2 {
                        break;
                    }
                }
                stop.store(true, Relaxed);
            }
        }
    });
    assert!(
        mixed.load(SeqCst) > 0,
        "the fabric says its segment order is {}, but in {} reads racing {} writes no snapshot \
         alternated between old and new segments more than twice: segments move in ascending \
         order",
        order.name(),
        reads.load(SeqCst),
        writes.load(SeqCst)
    );
}

struct Seen(Vec<AtomicU64>);
impl Seen {
    fn new(n: u64) -> Seen {
        Seen((0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }
    /// Marks `v`; false if it was already marked or out of range.
    fn mark(&self, v: u64) -> bool {
        match self.0.get((v / 64) as usize) {
            Some(w) => w.fetch_or(1 << (v % 64), SeqCst) & (1 << (v % 64)) == 0,
            None => false,
        }
    }
}

const CLIENTS: usize = 8;
const PER_CLIENT: u64 = 300;

/// Many clients' FETCH_AND_ADDs on one word: every prior value distinct, exact final sum.
pub fn faa_is_linearizable<H: Harness>(h: &H) {
    let word = fresh_chunk(h);
    let node = h.node();
    let seen = Seen::new(CLIENTS as u64 * PER_CLIENT);
    h.run(CLIENTS, |_, ep| {
        let seen = &seen;
        async move {
            let qp = ep.qp(node).unwrap();
            for _ in 0..PER_CLIENT {
                let old = qp.faa(word, 1).await.expect("faa");
                assert!(
                    seen.mark(old),
                    "FAA returned prior value {old} twice (or out of range)"
                );
            }
        }
    });
    let fin = AtomicU64::new(0);
    h.run(1, |_, ep| {
        let fin = &fin;
        async move {
            let mut b = [0u8; 8];
            ep.qp(node).unwrap().read(word, &mut b).await.unwrap();
            fin.store(u64::from_le_bytes(b), SeqCst);
        }
    });
    assert_eq!(
        fin.load(SeqCst),
        CLIENTS as u64 * PER_CLIENT,
        "FAA lost an increment"
    );
}

/// Many clients incrementing one word by CMP_AND_SWP loops: exact final value.
pub fn cas_is_linearizable<H: Harness>(h: &H) {
    let word = fresh_chunk(h);
    let node = h.node();
    let seen = Seen::new(CLIENTS as u64 * PER_CLIENT);
    let fin = AtomicU64::new(0);
    h.run(CLIENTS, |_, ep| {
        let (seen, fin) = (&seen, &fin);
        async move {
            let qp = ep.qp(node).unwrap();
            let mut guess = 0;
            for _ in 0..PER_CLIENT {
                loop {
                    let old = qp.cas(word, guess, guess + 1).await.expect("cas");
                    if old == guess {
                        assert!(
                            seen.mark(old),
                            "two CAS succeeded from the same value {old}"
                        );
                        guess += 1;
                        break;
                    }
                    guess = old;
                }
            }
            fin.fetch_max(guess, SeqCst);
        }
    });
    assert_eq!(
        fin.load(SeqCst),
        CLIENTS as u64 * PER_CLIENT,
        "CAS increments lost"
    );
}

/// An atomic on a word that is not 8-byte aligned is refused and breaks the queue pair.
pub fn misaligned_atomic_is_refused<H: Harness>(h: &H) {
    let base = fresh_chunk(h);
    let node = h.node();
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        match qp.cas(base.add(4), 0, 1).await {
            Err(FabricError::RemoteInvalid { wr: 0, .. }) => {}
            other => panic!("misaligned CAS gave {other:?}, expected RemoteInvalid"),
        }
        assert!(qp.is_broken(), "queue pair still usable after an error");
        assert_eq!(qp.faa(base, 1).await, Err(FabricError::Flushed));
    });
}

/// Out-of-range access: remote access error, no memory touched (not even by the valid
/// prefix of the same op), earlier ops of the batch done, later ones flushed, QP broken.
pub fn out_of_range_fails_without_touching_memory<H: Harness>(h: &H) {
    let base = fresh_chunk(h);
    let node = h.node();
    let last = GlobalAddr::new(node, h.region_len() - 8);
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        let canary = 0xC0DE_C0DE_C0DE_C0DEu64.to_le_bytes();
        qp.write(last, &canary)
            .await
            .expect("last word of the region is writable");
        let mut big = [0u8; 16];
        match qp.read(last, &mut big).await {
            Err(FabricError::RemoteAccess { wr: 0, .. }) => {}
            other => panic!("READ across the region end gave {other:?}"),
        }
        assert!(
            qp.is_broken(),
            "queue pair still usable after a remote access error"
        );
        let mut b = [0u8; 8];
        assert_eq!(qp.read(base, &mut b).await, Err(FabricError::Flushed));
    });
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        let (a, b, bad) = (7u64.to_le_bytes(), 9u64.to_le_bytes(), [0xFFu8; 16]);
        let mut ops = [
            Op::Write {
                remote: base,
                local: &a,
            },
            Op::Write {
                remote: last,
                local: &bad,
            },
            Op::Write {
                remote: base.add(8),
                local: &b,
            },
        ];
        match qp.post(&mut ops).await {
            Err(FabricError::RemoteAccess { wr: 1, .. }) => {}
            other => panic!("batch with an out-of-range WRITE gave {other:?}"),
        }
    });
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        let mut w = [0u8; 16];
        qp.read(base, &mut w).await.unwrap();
        assert_eq!(
            &w[..8],
            &7u64.to_le_bytes(),
            "the op before the failed one was not done"
        );
        assert_eq!(
            &w[8..],
            &[0u8; 8],
            "the op after the failed one took effect"
        );
        let mut c = [0u8; 8];
        qp.read(last, &mut c).await.unwrap();
        assert_eq!(
            c,
            0xC0DE_C0DE_C0DE_C0DEu64.to_le_bytes(),
            "failed WRITE touched memory"
        );
        let far = GlobalAddr::new(node, GlobalAddr::MAX_OFFSET - 4);
        assert!(matches!(
            qp.faa(far, 1).await,
            Err(FabricError::RemoteAccess { .. })
        ));
    });
}

/// An address on a node the endpoint has no queue pair to is an error, not a panic.
pub fn unknown_node_is_an_error<H: Harness>(h: &H) {
    let node = h.node();
    h.run(1, |_, ep| async move {
        let other = node.wrapping_add(4321);
        assert!(matches!(ep.qp(other), Err(FabricError::UnknownNode { .. })));
        assert!(ep.nodes().contains(&node));
    });
}

/// WRITE_WITH_IMM writes its data and hands its immediate to the target's receive queue.
pub fn write_imm_delivers_its_immediate<H: Harness>(h: &H) {
    let base = fresh_chunk(h);
    let node = h.node();
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        for (k, len) in [0usize, 8, 256, 3000].into_iter().enumerate() {
            let data = pattern(99 + k as u64, len);
            let imm = 0xC0FF_EE00 + k as u32;
            qp.post(&mut [Op::WriteImm {
                remote: base,
                local: &data,
                imm,
            }])
            .await
            .expect("write_imm");
            let mut msg = vec![0u8; qp.max_message()];
            let r = qp.recv(&mut msg).await.expect("echo reply");
            assert_eq!(r.kind, RecvKind::Send);
            assert_eq!(
                parse_imm_reply(&msg[..r.len as usize]),
                Some((imm, len as u32)),
                "target's receive completion lacked the immediate or length"
            );
            let mut back = vec![0u8; len];
            qp.read(base, &mut back).await.unwrap();
            assert_eq!(back, data, "WRITE_WITH_IMM did not write its data");
        }
    });
}

/// SEND reaches the target's receive queue; the echo comes back; oversize is refused.
pub fn send_recv_round_trip<H: Harness>(h: &H) {
    let node = h.node();
    h.run(4, |i, ep| async move {
        let qp = ep.qp(node).unwrap();
        let max = qp.max_message();
        assert!(
            max >= 256,
            "receive buffers of {max} bytes are too small to be useful"
        );
        let mut buf = vec![0u8; max];
        for k in 0..20u64 {
            let msg = pattern(k * 17 + i as u64, 1 + (k as usize * 13) % max);
            qp.send(&msg).await.expect("send");
            let r = qp.recv(&mut buf).await.expect("recv");
            assert_eq!((r.kind, r.imm), (RecvKind::Send, None));
            assert_eq!(&buf[..r.len as usize], &msg[..], "echo payload differs");
        }
        if i == 0 {
            let too_big = vec![1u8; max + 1];
            match qp.send(&too_big).await {
                Err(FabricError::LocalLength { .. }) => {}
                other => panic!("oversize SEND gave {other:?}"),
            }
        }
    });
}

/// Device memory: atomics and bounds, or a clean refusal where the node has none.
pub fn device_memory<H: Harness>(h: &H) {
    let node = h.node();
    let dm = h.dm_len();
    if dm < 64 {
        h.run(1, |_, ep| async move {
            let r = ep
                .qp(node)
                .unwrap()
                .faa(GlobalAddr::device(node, 0), 1)
                .await;
            assert!(matches!(r, Err(FabricError::RemoteAccess { .. })), "{r:?}");
        });
        return;
    }
    let word = GlobalAddr::device(node, 8);
    let total = AtomicUsize::new(0);
    let start = AtomicU64::new(0);
    h.run(1, |_, ep| {
        let start = &start;
        async move {
            let mut b = [0u8; 8];
            ep.qp(node)
                .unwrap()
                .read(word, &mut b)
                .await
                .expect("device READ");
            start.store(u64::from_le_bytes(b), SeqCst);
        }
    });
    h.run(4, |_, ep| {
        let total = &total;
        async move {
            let qp = ep.qp(node).unwrap();
            for _ in 0..100 {
                qp.faa(word, 1).await.expect("device FAA");
                total.fetch_add(1, Relaxed);
            }
        }
    });
    h.run(1, |_, ep| {
        let start = &start;
        async move {
            let qp = ep.qp(node).unwrap();
            let mut b = [0u8; 8];
            qp.read(word, &mut b).await.unwrap();
            assert_eq!(
                u64::from_le_bytes(b),
                start.load(SeqCst) + 400,
                "device FAA lost updates"
            );
            let r = qp.read(GlobalAddr::device(node, dm - 4), &mut b).await;
            assert!(matches!(r, Err(FabricError::RemoteAccess { .. })), "{r:?}");
        }
    });
}

/// Masked CMP_AND_SWP ([`Op::MaskedCas`], not in [`checks`]: the verbs fabric refuses it):
/// four clients each take and release their own 16 bits of one word (device memory where
/// the node has some) at once, every masked CAS succeeding whatever the other bits do; a
/// masked CAS whose bits differ fails and changes nothing.
pub fn masked_cas_keeps_other_bits<H: Harness>(h: &H) {
    let node = h.node();
    let word = if h.dm_len() >= 64 {
        GlobalAddr::device(node, 16)
    } else {
        fresh_chunk(h)
    };
    h.run(1, |_, ep| async move {
        ep.qp(node).unwrap().write(word, &[0; 8]).await.unwrap();
    });
    h.run(4, |c, ep| async move {
        let qp = ep.qp(node).unwrap();
        for round in 0..3 {
            for b in 0..16 {
                let mask = 1u64 << (c * 16 + b);
                let old = qp.masked_cas(word, 0, !0, mask).await.expect("masked CAS");
                assert_eq!(old & mask, 0, "client {c} bit {b} round {round}: taken");
            }
            if round < 2 {
                for b in 0..16 {
                    let mask = 1u64 << (c * 16 + b);
                    let old = qp.masked_cas(word, !0, 0, mask).await.expect("unlock");
                    assert_eq!(old & mask, mask, "client {c} bit {b}: not held");
                }
            }
        }
    });
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        let mut b = [0u8; 8];
        qp.read(word, &mut b).await.unwrap();
        assert_eq!(
            u64::from_le_bytes(b),
            u64::MAX,
            "a masked CAS lost other bits"
        );
        let old = qp.masked_cas(word, 0, 0, 1 << 5).await.unwrap();
        assert_eq!(old, u64::MAX);
        qp.read(word, &mut b).await.unwrap();
        assert_eq!(u64::from_le_bytes(b), u64::MAX, "a failed masked CAS wrote");
    });
}

/// Counters: verbs by kind, bytes each way, doorbells and round trips.
pub fn counters_count_what_was_done<H: Harness>(h: &H) {
    let base = fresh_chunk(h);
    let node = h.node();
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        let before = qp.counters().snapshot();
        let (mut r, w, mut o1, mut o2) = ([0u8; 64], [1u8; 32], 0, 0);
        let mut ops = [
            Op::Read {
                remote: base,
                local: &mut r,
            },
            Op::Write {
                remote: base.add(64),
                local: &w,
            },
            Op::Cas {
                remote: base.add(128),
                compare: 0,
                swap: 1,
                old: &mut o1,
            },
        ];
        qp.post(&mut ops).await.unwrap();
        qp.post(&mut [Op::Faa {
            remote: base.add(136),
            add: 1,
            old: &mut o2,
        }])
        .await
        .unwrap();
        let d = qp.counters().snapshot() - before;
        assert_eq!(d.doorbells, 2, "{d:?}");
        assert_eq!(d.round_trips, 2, "{d:?}");
        assert_eq!((d.verb(Verb::Read), d.verb(Verb::Write)), (1, 1), "{d:?}");
        assert_eq!((d.verb(Verb::Cas), d.verb(Verb::Faa)), (1, 1), "{d:?}");
        assert_eq!(d.bytes_in, 64 + 8 + 8, "{d:?}");
        assert_eq!(d.bytes_out, 32 + 16 + 8, "{d:?}");
    });
}

/// After the region's key is revoked, old queue pairs get remote access errors; new ones work.
pub fn revoked_key_is_refused<H: Harness>(h: &H) {
    let base = fresh_chunk(h);
    let node = h.node();
    h.run(1, |_, ep| async move {
        let qp = ep.qp(node).unwrap();
        let mut b = [0u8; 8];
        qp.read(base, &mut b).await.expect("read before revocation");
        h.revoke_key();
        let r = qp.read(base, &mut b).await;
        assert!(
            matches!(r, Err(FabricError::RemoteAccess { .. })),
            "stale key read gave {r:?}"
        );
    });
    h.run(1, |_, ep| async move {
        let mut b = [0u8; 8];
        ep.qp(node)
            .unwrap()
            .read(base, &mut b)
            .await
            .expect("fresh endpoint after revocation");
    });
}

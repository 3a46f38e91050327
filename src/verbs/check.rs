//! The conformance-suite harness of the verbs fabric: a `remora memnode --fabric verbs`
//! reached by rdma_cm, clients as threads each with its own endpoint (its own connection).
use super::endpoint::{
    ConnectOptions, NodeInfo, VerbsEndpoint, connect_qp, connect_qp_as, revoke_key,
};
use super::error::VerbsError;
use super::fence::{fence_client, fence_retrying};
use remora_core::alloc::RemoteAllocator;
use remora_core::block_on::block_on_with;
use remora_core::conformance::{Harness, checks};
use remora_core::fabric::{Endpoint, Op, QueuePair};
use remora_layouts::NodeId;
use std::future::Future;
use std::time::{Duration, Instant};

/// The conformance suite's harness against one running memory node (which must run the echo
/// service): it knows the node's address and geometry, and gives each client thread a fresh
/// endpoint of its own.
pub struct VerbsHarness {
    addr: String,
    opts: ConnectOptions,
    info: NodeInfo,
}

impl VerbsHarness {
    /// Connects once to learn the node's geometry.
    pub fn new(addr: &str, opts: ConnectOptions) -> Result<VerbsHarness, VerbsError> {
        let (_qp, info) = connect_qp(addr, &opts)?;
        Ok(VerbsHarness {
            addr: addr.into(),
            opts,
            info,
        })
    }

    /// What the first connection learned about the node (its id, region and device memory,
    /// service).
    pub fn info(&self) -> &NodeInfo {
        &self.info
    }

    /// A fresh endpoint (a new connection).
    pub fn endpoint(&self) -> Result<VerbsEndpoint, VerbsError> {
        VerbsEndpoint::connect(&[&self.addr], &self.opts)
    }
}

/// Spins on `fut`, yielding the core now and then so that the kernel's (Soft-RoCE) and the
/// other clients' threads run on small machines.
pub fn spin_block_on<F: Future>(fut: F) -> F::Output {
    let mut spins = 0u32;
    block_on_with(fut, || {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(32) {
            std::thread::yield_now();
        }
    })
}

impl Harness for VerbsHarness {
    type Ep = VerbsEndpoint;

    fn node(&self) -> NodeId {
        self.info.node
    }

    fn region_len(&self) -> u64 {
        self.info.region_len
    }

    fn dm_len(&self) -> u64 {
        self.info.dm_len
    }

    fn run<T, F>(&self, n: usize, task: T)
    where
        T: Fn(usize, VerbsEndpoint) -> F + Send + Sync,
        F: Future<Output = ()>,
    {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let task = &task;
                    s.spawn(move || {
                        let ep = self
                            .endpoint()
                            .unwrap_or_else(|e| panic!("client {i} could not connect: {e}"));
                        spin_block_on(task(i, ep));
                    })
                })
                .collect();
            let mut first = None;
            for h in handles {
                if let Err(p) = h.join() {
                    first.get_or_insert(p);
                }
            }
            if let Some(p) = first {
                std::panic::resume_unwind(p);
            }
        });
    }

    fn revoke_key(&self) {
        if let Err(e) = revoke_key(&self.addr, &self.opts) {
            panic!("revoking the region key: {e}");
        }
    }
}

/// A client fenced by another (the lease takeover's first step, `remora_core::lease`) is cut
/// off the node: its WRITE issued after the fence never reaches memory and fails, the fencer
/// keeps working, the fenced id cannot connect again, and fencing a client with no
/// connection left succeeds.
pub fn fenced_client_is_cut_off(h: &VerbsHarness) {
    let node = h.node();
    let a = h.endpoint().expect("client a connects");
    let b = h.endpoint().expect("client b connects");
    let (ida, idb) = (a.client_id(), b.client_id());
    assert!(
        ida != 0 && idb != 0 && ida != idb,
        "client ids {ida:#x} {idb:#x}"
    );
    let (qa, qb) = (a.qp(node).unwrap(), b.qp(node).unwrap());
    let word = spin_block_on(async {
        let alloc = RemoteAllocator::open(qb).await.expect("allocator");
        let w = alloc.alloc_chunk(qb).await.expect("a chunk");
        qa.write(w, &1u64.to_le_bytes())
            .await
            .expect("a writes before the fence");
        w
    });
    spin_block_on(b.fence(node, ida)).expect("b fences a");
    let after = spin_block_on(qa.write(word, &2u64.to_le_bytes()));
    assert!(
        after.is_err(),
        "a's WRITE after its fence completed: {after:?}"
    );
    let mut seen = [0u8; 8];
    spin_block_on(qb.read(word, &mut seen)).expect("b still reads");
    assert_eq!(
        u64::from_le_bytes(seen),
        1,
        "a's WRITE after its fence reached memory"
    );
    spin_block_on(qb.write(word, &3u64.to_le_bytes())).expect("b still writes");
    assert!(
        connect_qp_as(&h.addr, &h.opts, ida).is_err(),
        "a fenced client connected again under its id"
    );
    let again = fence_client(&h.addr, ida, &h.opts).expect("fencing a gone client");
    assert_eq!(again, 0, "nothing left to cut");
}

/// Fences of one client sent at once from several threads (as from several processes of one
/// host, whose requests a connection manager cannot tell apart: see `fence.rs`) all land:
/// each returns the node's answer. Prints how many single exchanges sent at once were turned
/// down by the connection manager itself, which the retrying fences absorb.
pub fn fences_at_once_all_land(h: &VerbsHarness) {
    const AT_ONCE: usize = 4;
    // Kept connected: the fences must cut its one connection, once in all.
    let victim = h.endpoint().expect("a client connects");
    let gone = victim.client_id();
    let at_once = |f: fn(&str, u32, &ConnectOptions) -> Result<u32, VerbsError>| {
        let barrier = std::sync::Barrier::new(AT_ONCE);
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..AT_ONCE)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        f(&h.addr, gone, &h.opts)
                    })
                })
                .collect();
            runs.into_iter()
                .map(|t| t.join().expect("a fencing thread panicked"))
                .collect::<Vec<_>>()
        })
    };
    let single = at_once(fence_client);
    let turned_down = single.iter().filter(|r| r.is_err()).count();
    eprintln!(
        "fences at once: {turned_down} of {AT_ONCE} single exchanges refused ({:?})",
        single.iter().find(|r| r.is_err())
    );
    let mut cut: u32 = single.iter().filter_map(|r| r.as_ref().ok()).sum();
    for r in at_once(fence_retrying) {
        cut += r.expect("a fence sent beside others");
    }
    assert_eq!(cut, 1, "the victim's one connection, cut once in all");
    drop(victim);
}

/// READs, atomics and a non-inline WRITE on buffers of the endpoint's registered pool are
/// posted in place: the results are right and not one byte is bounced through staging; the
/// same ops on ordinary buffers are bounced and counted.
pub fn pool_buffers_are_used_in_place(h: &VerbsHarness) {
    let ep = h.endpoint().expect("a client connects");
    let q = ep.qp(h.node()).unwrap();
    let pool = ep.pool();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let before = q.stats();
    let (mut wbuf, mut rbuf, mut cas, mut faa) = (
        pool.take(4096).expect("a pool buffer"),
        pool.take(4096).expect("a pool buffer"),
        pool.take(8).expect("a pool buffer"),
        pool.take(8).expect("a pool buffer"),
    );
    wbuf.copy_from_slice(&pattern);
    let at = spin_block_on(async {
        let alloc = RemoteAllocator::open(q).await.expect("allocator");
        let at = alloc.alloc_chunk(q).await.expect("a chunk");
        q.post(&mut [Op::Write {
            remote: at,
            local: &wbuf,
        }])
        .await
        .expect("WRITE from the pool");
        let word = at.add(8192);
        q.post(&mut [
            Op::Read {
                remote: at,
                local: &mut rbuf,
            },
            Op::Cas {
                remote: word,
                compare: 0,
                swap: 5,
                old: cas.word(),
            },
            Op::Faa {
                remote: word,
                add: 2,
                old: faa.word(),
            },
        ])
        .await
        .expect("READ and atomics into the pool");
        at
    });
    assert_eq!(&rbuf[..], &pattern[..], "READ into the pool");
    assert_eq!(
        (*cas.word(), *faa.word()),
        (0, 5),
        "atomic results in the pool"
    );
    let d = q.stats() - before;
    // The allocator's own READs and atomics use ordinary buffers: only ours are in place.
    assert_eq!(
        d.in_place,
        4096 + 4096 + 16,
        "in-place bytes (bounced: {})",
        d.bounced()
    );
    let mut plain = vec![0u8; 4096];
    let b0 = q.stats();
    spin_block_on(q.read(at, &mut plain)).expect("READ into a plain buffer");
    assert_eq!(plain, pattern);
    let d = q.stats() - b0;
    assert_eq!(
        (d.bounced_read, d.in_place),
        (4096, 0),
        "a plain buffer is bounced"
    );
}

/// Unsignaled posts (`QueuePair::post_unsignaled`) resolve once posted, take effect in
/// posting order before a later signaled post, and leave the caller's buffer free at once;
/// more of them than the send queue holds go through (credit returned by the signaled ones
/// every `SIGNAL_EVERY`). READs are refused.
pub fn unsignaled_posts_take_effect_in_order(h: &VerbsHarness) {
    let ep = h.endpoint().expect("a client connects");
    let q = ep.qp(h.node()).unwrap();
    spin_block_on(async {
        let alloc = RemoteAllocator::open(q).await.expect("allocator");
        let at = alloc.alloc_chunk(q).await.expect("a chunk");
        let before = q.stats();
        let mut big = vec![0u8; 1024];
        for i in 0..1000u64 {
            let v = i.to_le_bytes();
            q.post_unsignaled(&mut [Op::Write {
                remote: at,
                local: &v,
            }])
            .await
            .expect("an unsignaled WRITE");
            if i % 100 == 0 {
                big.fill(i as u8);
                q.post_unsignaled(&mut [Op::Write {
                    remote: at.add(64),
                    local: &big,
                }])
                .await
                .expect("a staged detached WRITE");
                big.fill(0xee);
            }
        }
        let mut seen = [0u8; 8];
        let mut tail = vec![0u8; 1024];
        q.read(at, &mut seen).await.expect("READ after them");
        q.read(at.add(64), &mut tail)
            .await
            .expect("READ after them");
        assert_eq!(u64::from_le_bytes(seen), 999, "the last unsignaled WRITE");
        assert!(
            tail.iter().all(|&b| b == (900 % 256) as u8),
            "the staged WRITE's data"
        );
        let d = q.stats() - before;
        assert!(
            d.unsignaled >= 900,
            "unsignaled work requests: {}",
            d.unsignaled
        );
        let mut r = [0u8; 8];
        assert!(
            q.post_unsignaled(&mut [Op::Read {
                remote: at,
                local: &mut r,
            }])
            .await
            .is_err(),
            "an unsignaled READ is refused"
        );
    });
}

/// A named check of a verbs memory node.
type Check = (&'static str, fn(&VerbsHarness));

/// Runs every conformance check, and the verbs-only ones, catching failures: `(name,
/// Ok(seconds) | Err(message))`.
pub fn run_checks(
    h: &VerbsHarness,
    mut each: impl FnMut(&str, &Result<f64, String>),
) -> Vec<(&'static str, Result<f64, String>)> {
    let verbs_only: [Check; 4] = [
        ("fenced_client_is_cut_off", fenced_client_is_cut_off),
        ("fences_at_once_all_land", fences_at_once_all_land),
        (
            "pool_buffers_are_used_in_place",
            pool_buffers_are_used_in_place,
        ),
        (
            "unsignaled_posts_take_effect_in_order",
            unsignaled_posts_take_effect_in_order,
        ),
    ];
    checks::<VerbsHarness>()
        .into_iter()
        .chain(verbs_only)
        .map(|(name, check)| {
            let t0 = Instant::now();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(h)))
                .map(|()| t0.elapsed().as_secs_f64())
                .map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panicked".into())
                });
            each(name, &r);
            (name, r)
        })
        .collect()
}

/// Default step timeout for harness connections.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

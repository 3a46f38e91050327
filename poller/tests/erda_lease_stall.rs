//! A stall of the whole client machine (every thread descheduled at once, as on an
//! oversubscribed 2-core box or a throttled cgroup) must not make an Erda writer fence a live
//! writer of the same key: the waiter saw nothing during the stall, and the holder could not
//! run either.
//!
//! Before `lease::Waiter` counted only watched time, this is how `lin_soft`'s Erda test
//! flaked under load ("the queue pair is in the error state"): a waiter got `Busy` on a key,
//! its thread (and the holder's) was descheduled for more than the 100 ms lease, and its first
//! look after the stall fenced the holder, whose grant finished microseconds later.
//!
//! Here both handles run as coroutines of one thread; the holder's object WRITE is held back
//! until the waiter is waiting, then the thread sleeps 150 ms inside the waiter's first poll
//! of the durable mark (the stall), and the holder writes right after it.
#[path = "common/hooked.rs"]
mod hooked;

use hooked::{HookedEp, PostHook};
use remora_core::block_on::yield_now;
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer, LEASE_NS};
use remora_core::fabric::{FabricError, Op, QueuePair};
use remora_core::index::KvIndex;
use remora_poller::executor::run_coroutines;
use remora_poller::soft::{NodeConfig, SoftMemoryNode, SoftQp};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// What the two handles tell each other.
#[derive(Default)]
struct Script {
    /// The holder's object WRITE is waiting to be let through.
    holding: Cell<bool>,
    /// The stall is over: the holder may write.
    released: Cell<bool>,
    stalled: Cell<bool>,
}

/// The holder's hook: its granted object's doorbell (WRITE, READ, WRITE) waits for the
/// release.
struct Holder<'s>(&'s Script);

impl PostHook<SoftQp> for Holder<'_> {
    async fn post<'a, 'b>(
        &'a self,
        qp: &'a SoftQp,
        ops: &'a mut [Op<'b>],
    ) -> Result<(), FabricError> {
        if ops.len() == 3 && !self.0.released.get() {
            self.0.holding.set(true);
            while !self.0.released.get() {
                yield_now().await;
            }
        }
        qp.post(ops).await
    }
}

/// The waiter's hook: its first 8-byte READ (a poll of the holder's durable mark) stalls the
/// whole thread for longer than a lease, then releases the holder.
struct Waiting<'s>(&'s Script);

impl PostHook<SoftQp> for Waiting<'_> {
    async fn post<'a, 'b>(
        &'a self,
        qp: &'a SoftQp,
        ops: &'a mut [Op<'b>],
    ) -> Result<(), FabricError> {
        if !self.0.stalled.get() && matches!(ops, [Op::Read { local, .. }] if local.len() == 8) {
            self.0.stalled.set(true);
            // Every coroutine of this thread, the holder's included, is stopped meanwhile.
            std::thread::sleep(Duration::from_nanos(LEASE_NS * 3 / 2));
            self.0.released.set(true);
        }
        qp.post(ops).await
    }
}

#[test]
fn a_stall_of_waiter_and_holder_together_fences_nobody() {
    let node = SoftMemoryNode::create_with(
        NodeConfig {
            region_len: 64 << 20,
            chunk_size: 256 << 10,
            ..NodeConfig::default()
        },
        Box::new(ErdaServer::new(ErdaConfig::small())),
    )
    .unwrap();
    let _srv = node.spawn_server();
    let (ep_a, ep_b) = (node.endpoint().unwrap(), node.endpoint().unwrap());
    let script = Script::default();
    let hooked_a = HookedEp::new(&ep_a, |_| Holder(&script));
    let hooked_b = HookedEp::new(&ep_b, |_| Waiting(&script));
    let cfg = ErdaClientConfig::default();
    let a = remora_core::block_on::block_on(Erda::open(&hooked_a, cfg)).unwrap();
    let b = remora_core::block_on::block_on(Erda::open(&hooked_b, cfg)).unwrap();
    let key = b"stalled!";
    type Task<'t> = Pin<Box<dyn Future<Output = Result<(), String>> + 't>>;
    let holder: Task = Box::pin(async {
        a.upsert(key, b"holder-1")
            .await
            .map_err(|e| format!("holder: {e}"))?;
        // Still connected: a fenced holder's next verb fails.
        let mut out = [0u8; 8];
        a.get(key, &mut out)
            .await
            .map_err(|e| format!("holder's get after the stall: {e}"))?;
        Ok(())
    });
    let waiter: Task = Box::pin(async {
        while !script.holding.get() {
            yield_now().await;
        }
        b.upsert(key, b"waiter-2")
            .await
            .map_err(|e| format!("waiter: {e}"))
    });
    for r in run_coroutines(vec![holder, waiter]) {
        r.unwrap();
    }
    assert!(
        script.stalled.get(),
        "the waiter never polled the holder's mark"
    );
    assert_eq!(b.stats().busy, 1, "{:?}", b.stats());
    assert_eq!(b.stats().fenced, 0, "{:?}", b.stats());
    let mut out = [0u8; 8];
    let n = remora_core::block_on::block_on(a.get(key, &mut out)).unwrap();
    assert_eq!(&out[..n.unwrap()], b"waiter-2");
}

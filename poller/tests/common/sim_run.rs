//! Running clients on the simulated cluster: one coroutine whose result the test reads back,
//! and the lincheck workload's grid of 16 clients.
//!
//! Included by the tests that use it (`#[path = "common/sim_run.rs"] mod sim_run;`).
#![allow(dead_code)] // Each test uses a part: one client, or the lincheck grid too.

use remora_core::index::KvIndex;
use remora_core::lincheck::Recorder;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_poller::sim::{ClientCtx, Sim};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

/// Runs `f` as coroutine 0 of compute node `node`'s client, runs `sim` until every
/// coroutine is done (asserting none is left unfinished) and returns what `f` returned.
pub fn run_on<'a, T: 'a>(
    sim: &mut Sim<'a>,
    node: usize,
    f: impl AsyncFnOnce(ClientCtx) -> T + 'a,
) -> T {
    let out = Rc::new(RefCell::new(None));
    let c = sim.client(node).unwrap();
    let slot = out.clone();
    sim.spawn_with(&c, 0, move |ctx| async move {
        let r = f(ctx).await;
        *slot.borrow_mut() = Some(r);
    });
    assert_eq!(sim.run().unfinished, 0);
    out.borrow_mut().take().expect("the coroutine finished")
}

/// Spawns the lincheck workload's 16 clients, 4 on each of compute nodes 0..4 (client ids
/// 1..=16, `c` 0..4 on its node): each runs `body(ctx, client, c)`, and an error it returns
/// is pushed to `errors` as `client {client}: {error}`. The caller runs the sim.
pub fn spawn_lin_clients<'a, F, Fut>(sim: &mut Sim<'a>, errors: &'a RefCell<Vec<String>>, body: F)
where
    F: Fn(ClientCtx, u32, u32) -> Fut,
    Fut: Future<Output = Result<u64, String>> + 'a,
{
    let body = &body;
    for node in 0..4 {
        for c in 0..4u32 {
            let ctx = sim.client(node).unwrap();
            let client = 1 + node as u32 * 4 + c;
            sim.spawn_with(&ctx, 0, move |ctx| {
                let run = body(ctx, client, c);
                async move {
                    if let Err(e) = run.await {
                        errors.borrow_mut().push(format!("client {client}: {e}"));
                    }
                }
            });
        }
    }
}

/// `lin_client` on `index` with `spec`, recording into `rec` on the sim's clock of `ctx`;
/// its error as text.
pub async fn lin_run<I: KvIndex>(
    index: &I,
    spec: &LinSpec,
    rec: &Recorder,
    ctx: &ClientCtx,
) -> Result<u64, String> {
    let clock = || ctx.now_ns();
    lin_client(index, spec, rec, &clock)
        .await
        .map_err(|e| e.to_string())
}

//! A sim client's doorbells, counted as the sim numbers them for
//! `Faults::crash_client_at_post` (non-empty posts on a queue pair not yet broken), so that
//! a dry run tells a crash campaign which doorbells an operation rings.
//!
//! Included by the tests that use it (`#[path = "common/post_count.rs"] mod post_count;`,
//! with `common/hooked.rs` as `hooked`).
use super::hooked::{HookedEp, PostHook};
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair};
use remora_poller::sim::{SimEndpoint, SimQp};
use std::cell::Cell;

/// Counts the doorbells its client rings (and, if asked, when the last was rung).
pub struct Count<'a> {
    ep: &'a SimEndpoint,
    posts: &'a Cell<u64>,
    last_post_ns: Option<&'a Cell<u64>>,
}

impl PostHook<SimQp> for Count<'_> {
    async fn post<'a, 'b>(
        &'a self,
        qp: &'a SimQp,
        ops: &'a mut [Op<'b>],
    ) -> Result<(), FabricError> {
        if !ops.is_empty() && !qp.is_broken() {
            self.posts.set(self.posts.get() + 1);
            if let Some(t) = self.last_post_ns {
                t.set(self.ep.now_ns());
            }
        }
        qp.post(ops).await
    }
}

/// `ep` with its doorbells counted in `posts`.
#[allow(dead_code)] // not every test that includes this file uses both
pub fn count_ep<'a>(
    ep: &'a SimEndpoint,
    posts: &'a Cell<u64>,
) -> HookedEp<'a, SimEndpoint, Count<'a>> {
    HookedEp::new(ep, |_| Count {
        ep,
        posts,
        last_post_ns: None,
    })
}

/// [`count_ep`], the time of the last doorbell kept in `last_post_ns`.
#[allow(dead_code)]
pub fn count_ep_timed<'a>(
    ep: &'a SimEndpoint,
    posts: &'a Cell<u64>,
    last_post_ns: &'a Cell<u64>,
) -> HookedEp<'a, SimEndpoint, Count<'a>> {
    HookedEp::new(ep, |_| Count {
        ep,
        posts,
        last_post_ns: Some(last_post_ns),
    })
}

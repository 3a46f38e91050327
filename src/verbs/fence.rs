//! Fencing a client off a memory node over rdma_cm (the node's side: `memnode/control.rs`).
//!
//! A fence is a connect request carrying a fence hello, which the node answers with a reject
//! carrying `wire::Fenced` once the client's queue pairs are in the error state. The request
//! names queue pair 1 (the GSI queue pair's number, which no connected queue pair has), so
//! the connection manager never takes it for a live connection of this host.
//!
//! Two fences of one host in flight at once therefore carry the same address and queue pair
//! number, and the node's connection manager may reject one of them itself, before the node
//! sees it: a reject whose reason is not the application's, with no `Fenced` in it. Seen in
//! the Soft-RoCE guest (`check::fences_at_once_all_land`: 1 of 4 single exchanges sent at
//! once, in 2 of 9 runs), and the likely cause of a Sherman bench there reporting a lock of a
//! killed client "held ... and it could not be fenced". So a process sends its fences one at
//! a time ([`fence_patiently`]), and a reject by the connection manager rather than the node
//! is tried again after a random pause (other processes of the host may be fencing too), as
//! is an exchange that was lost or timed out.
use super::cm::{Event, REJ_CONSUMER_DEFINED};
use super::endpoint::{ConnectOptions, ask, expect};
use super::error::VerbsError;
use super::sys;
use super::wire::{Fenced, Request, Unauthorized};
use std::sync::Mutex;
use std::time::Duration;

/// Attempts of one fence whose exchange is lost, times out, or is turned down by the
/// connection manager (not by the node).
const FENCE_TRIES: u32 = 5;

/// The stage of a fence turned down by the connection manager rather than the node.
const CM_REJECT: &str = "fence (rejected by the connection manager, not by the node)";

/// This process's fences, one at a time (see the module docs).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Asks the memory node at `addr` to fence client `client` (see `memnode.rs`): when this
/// returns `Ok`, none of that client's verbs reaches the node's memory any more. Returns how
/// many of its connections the node cut (0: it had none left). One exchange, blocking for up
/// to `opts.timeout`; [`fence_patiently`] is what a lock waiter uses.
pub fn fence_client(addr: &str, client: u32, opts: &ConnectOptions) -> Result<u32, VerbsError> {
    let ev = ask(addr, opts, Request::Fence, client, "fence")?;
    answer(ev, addr, client)
}

/// What the answer to a fence request says: the connections cut, or why not.
fn answer(ev: Event, addr: &str, client: u32) -> Result<u32, VerbsError> {
    // An unreachable node or a failed exchange is `Unreachable` (worth another try), any
    // other event than a reject a protocol error.
    let ev = expect(ev, sys::RDMA_CM_EVENT_REJECTED, addr, "fence")?;
    if let Some(u) = Unauthorized::decode(&ev.private) {
        return Err(VerbsError::Unauthorized {
            addr: addr.into(),
            why: u.explain(),
        });
    }
    match Fenced::decode(&ev.private) {
        Ok(f) if f.client == client => Ok(f.connections),
        Ok(_) => Err(VerbsError::Protocol {
            addr: addr.into(),
            why: "the node fenced another client than the one named",
        }),
        // Turned down by the connection manager before the node saw it: try again.
        Err(_) if ev.status != REJ_CONSUMER_DEFINED => {
            log::debug!(
                "fence of client {client:#x} at {addr}: rejected by the connection manager \
                 (reason {})",
                ev.status
            );
            Err(VerbsError::Unreachable {
                addr: addr.into(),
                stage: CM_REJECT,
            })
        }
        Err(why) => Err(VerbsError::Protocol {
            addr: addr.into(),
            why,
        }),
    }
}

/// [`fence_retrying`], one fence of this process at a time: what a lock waiter uses.
pub(crate) fn fence_patiently(
    addr: &str,
    client: u32,
    opts: &ConnectOptions,
) -> Result<u32, VerbsError> {
    // A poisoned lock only means another fence panicked: the exchange holds no state.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    fence_retrying(addr, client, opts)
}

/// [`fence_client`], tried up to [`FENCE_TRIES`] times in all while the exchange is lost,
/// times out or is turned down by the connection manager, with a random pause of 10-73 ms
/// times the attempt between tries. Turned down every time, it is the node's refusal
/// (`Protocol`): a waiter then reports the lock held rather than the node unreachable.
pub(crate) fn fence_retrying(
    addr: &str,
    client: u32,
    opts: &ConnectOptions,
) -> Result<u32, VerbsError> {
    let mut r = fence_client(addr, client, opts);
    for attempt in 1..FENCE_TRIES {
        if !again(&r) {
            return r;
        }
        std::thread::sleep(pause(attempt));
        r = fence_client(addr, client, opts);
    }
    match r {
        Err(VerbsError::Unreachable { stage, .. }) if stage == CM_REJECT => {
            Err(VerbsError::Protocol {
                addr: addr.into(),
                why: "the connection manager turned every fence request down",
            })
        }
        r => r,
    }
}

/// Whether a fence's outcome is worth another try.
fn again(r: &Result<u32, VerbsError>) -> bool {
    matches!(
        r,
        Err(VerbsError::Unreachable { .. } | VerbsError::Timeout { .. })
    )
}

/// A pause of 10-73 ms times `attempt`, drawn from the clock and the process id (processes
/// that collided must not collide again in step).
fn pause(attempt: u32) -> Duration {
    let seed = super::clock::now_ns() ^ u64::from(std::process::id()).rotate_left(17);
    let ms = 10 + (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58);
    Duration::from_millis(ms * u64::from(attempt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reject(status: i32, private: Vec<u8>) -> Event {
        Event {
            kind: sys::RDMA_CM_EVENT_REJECTED,
            id: std::ptr::null_mut(),
            private,
            status,
            initiator_depth: 0,
            responder_resources: 0,
        }
    }

    /// rdma_cm hands a reject 148 bytes of private data, zeros where the rejecter gave none.
    fn padded(mut b: Vec<u8>) -> Vec<u8> {
        b.resize(148, 0);
        b
    }

    #[test]
    fn a_reject_by_the_connection_manager_is_tried_again() {
        // Reason 10: a stale connection (another fence of this host in flight).
        let r = answer(reject(10, padded(vec![])), "n:1", 5);
        assert!(matches!(r, Err(VerbsError::Unreachable { .. })), "{r:?}");
        assert!(again(&r));
    }

    #[test]
    fn the_nodes_answer_is_taken_as_it_is() {
        let f = Fenced {
            client: 5,
            connections: 2,
        }
        .encode();
        let ok = answer(reject(REJ_CONSUMER_DEFINED, padded(f.to_vec())), "n:1", 5);
        assert_eq!(ok.unwrap(), 2);
        // The node refused (its queue pair would not move): said, not tried again.
        let refused = answer(reject(REJ_CONSUMER_DEFINED, padded(vec![])), "n:1", 5);
        assert!(
            matches!(refused, Err(VerbsError::Protocol { .. })),
            "{refused:?}"
        );
        assert!(!again(&refused));
        // Another client fenced than the one named.
        let other = answer(reject(REJ_CONSUMER_DEFINED, padded(f.to_vec())), "n:1", 6);
        assert!(
            matches!(other, Err(VerbsError::Protocol { .. })),
            "{other:?}"
        );
        // A connect error (lost exchange) is worth another try; another event is not.
        let mut lost = reject(0, vec![]);
        lost.kind = sys::RDMA_CM_EVENT_CONNECT_ERROR;
        assert!(again(&answer(lost, "n:1", 5)));
        let mut odd = reject(0, vec![]);
        odd.kind = sys::RDMA_CM_EVENT_ESTABLISHED;
        assert!(!again(&answer(odd, "n:1", 5)));
    }

    #[test]
    fn pauses_grow_with_the_attempt_and_stay_bounded() {
        for attempt in 1..FENCE_TRIES {
            let p = pause(attempt).as_millis() as u32;
            assert!(
                (10 * attempt..=80 * attempt).contains(&p),
                "attempt {attempt}: {p} ms"
            );
        }
    }
}

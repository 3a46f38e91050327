//! A client stopped while it waits for a server's reply (issue 26, "no false deaths"): a WORT
//! client (`remora memnode --service wort`, request deadline 1 s) writes keys; once armed,
//! the doorbell that posts a request (its WRITE_WITH_IMM into the ring) stops the process
//! right after the post, for 5 s: the server replies meanwhile. After SIGCONT the request
//! must complete (the deadline counts only the time the client watched, `remora_core::lease`'s
//! "Stalls"; before, it failed with `WortError::Timeout` after 5 s of wall time), every later
//! request too, and every key reads back through a fresh connection.
use super::procs::{Client, ROLE, memnode, stopped_then_resumed};
use super::{STOPPED_FOR, key, say, stop_myself, value};
use remora::core::block_on::block_on;
use remora::core::fabric::{FabricError, Op, QueuePair};
use remora::core::index::KvIndex;
use remora::core::wort::{Wort, WortClientConfig};
use remora::poller::soft::{SoftQp, control};
use std::cell::Cell;
use std::path::PathBuf;
use std::time::Duration;

use super::hooked::{HookedEp, PostHook};

const KEYS: u64 = 200;

fn cfg() -> WortClientConfig {
    WortClientConfig {
        deadline_ns: 1_000_000_000,
        ..WortClientConfig::default()
    }
}

/// Stops the process (once armed, once) right after it posts a request.
struct RequestStop<'a> {
    armed: &'a Cell<bool>,
    fired: &'a Cell<bool>,
}

impl PostHook<SoftQp> for RequestStop<'_> {
    async fn post<'a, 'b>(
        &'a self,
        qp: &'a SoftQp,
        ops: &'a mut [Op<'b>],
    ) -> Result<(), FabricError> {
        let r = qp.post(ops).await;
        let request = ops.iter().any(|op| matches!(op, Op::WriteImm { .. }));
        if r.is_ok() && request && self.armed.get() && !self.fired.get() {
            self.fired.set(true);
            say("WAITING".into());
            stop_myself();
            say("RESUMED".into());
        }
        r
    }
}

/// The WORT client: writes its keys, arms the stop, rewrites and reads them all back. Any
/// error panics (a non-zero exit).
pub fn wort_client(path: &PathBuf) {
    let ep = control::connect_all(std::slice::from_ref(path)).unwrap();
    let (armed, fired) = (Cell::new(false), Cell::new(false));
    let hooked = HookedEp::new(&ep, |_| RequestStop {
        armed: &armed,
        fired: &fired,
    });
    block_on(async {
        let t = Wort::open(&hooked, cfg()).await.unwrap();
        for i in 0..KEYS {
            t.upsert(&key(4, i), &value(4, 0, i)).await.unwrap();
        }
        armed.set(true);
        for i in 0..KEYS {
            t.upsert(&key(4, i), &value(4, 1, i))
                .await
                .unwrap_or_else(|e| panic!("upsert {i}: {e}"));
        }
        let mut out = [0u8; 8];
        for i in 0..KEYS {
            let n = t.get(&key(4, i), &mut out).await.unwrap();
            assert!(n == Some(8) && out == value(4, 1, i), "key {i}: {n:?}");
        }
    });
    assert!(fired.get(), "never stopped");
    say("DONE".into());
}

/// Issue 26: a client stopped 5 s (five deadlines) while it waits for a WORT reply resumes
/// without an error, and its keys read back through a fresh connection. Fails before the fix
/// with `WortError::Timeout` (the deadline counted the stop).
#[test]
fn a_client_stopped_waiting_for_a_reply_resumes_without_an_error() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let (mut m, path) = memnode("wort", "wort");
    let mut a = Client::spawn("wort", &[("SIGSTOP_SOCK", path.display().to_string())]);
    stopped_then_resumed(&mut a, "WAITING", Duration::from_secs(60), STOPPED_FOR);
    assert!(m.0.try_wait().unwrap().is_none(), "the memnode died");
    let ep = control::connect_all(std::slice::from_ref(&path)).unwrap();
    block_on(async {
        let t = Wort::open(&ep, cfg()).await.unwrap();
        let mut out = [0u8; 8];
        for i in 0..KEYS {
            let n = t.get(&key(4, i), &mut out).await.unwrap();
            assert!(n == Some(8) && out == value(4, 1, i), "key {i}: {n:?}");
        }
    });
}

//! What the soft-fabric kill tests (`kill_clients`, `sherman_kill`) share: writer processes
//! (the test binary re-executed) that publish their acknowledged rounds in a progress word
//! each and stop where they are told, the parent that SIGKILLs them there, and the survivor
//! that then checks and rewrites every writer's keys.
//!
//! Included by the tests that use it (`#[path = "common/kill.rs"] mod kill;`).
use remora_core::GlobalAddr;
use remora_core::alloc::RemoteAllocator;
use remora_core::block_on::block_on;
use remora_core::fabric::{Endpoint, FabricError, QueuePair};
use remora_core::index::KvIndex;
use remora_poller::soft::SoftEndpoint;
use std::cell::Cell;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub const WRITERS: u64 = 3;

/// Set in a writer's progress word once it stopped where it was told to.
pub const STOPPED: u64 = 1 << 63;

/// Writer `writer`'s key `i`.
pub fn key(writer: u64, i: u64) -> [u8; 8] {
    ((writer + 1) << 32 | i).to_be_bytes()
}

/// Kills the child when the test ends, however it ends.
pub struct Kid(pub Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writer `me`: this test binary re-executed to run only `child_entry`, with `child` set to
/// its number and `env` set.
pub fn spawn_writer(child: &str, me: u64, env: &[(&str, String)]) -> Kid {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(child, me.to_string());
    for (k, v) in env {
        c.env(k, v);
    }
    Kid(c.spawn().expect("spawning a writer process"))
}

/// The writers' progress words, zeroed: one a writer, in a chunk of the node behind `qp`,
/// then one more a writer for what a test wants them to publish.
pub fn progress_words(qp: &impl QueuePair) -> GlobalAddr {
    block_on(async {
        let a = RemoteAllocator::open(qp).await.unwrap();
        let p = a.alloc_chunk(qp).await.unwrap();
        qp.write(p, &[0u8; 16 * WRITERS as usize]).await.unwrap();
        p
    })
}

/// A writer's side of stopping: publishes `STOPPED` in its progress word and waits for the
/// SIGKILL. Returns only the error that kept it from publishing (the writer was fenced): it
/// then fails and exits, and is not counted as stopped.
pub async fn halt(qp: &impl QueuePair, progress: GlobalAddr) -> FabricError {
    let mut b = [0u8; 8];
    if let Err(e) = qp.read(progress, &mut b).await {
        return e;
    }
    let w = u64::from_le_bytes(b) | STOPPED;
    if let Err(e) = qp.write(progress, &w.to_le_bytes()).await {
        return e;
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Kills each writer once `done(writer, progress word)` says so, it stopped, or it exited.
/// Returns how many had stopped where they were told.
pub fn kill_when(
    name: &str,
    kids: &mut [Kid],
    qp: &impl QueuePair,
    progress: GlobalAddr,
    done: impl Fn(usize, u64) -> bool,
) -> u32 {
    let start = Instant::now();
    let mut stopped = 0;
    for (me, kid) in kids.iter_mut().enumerate() {
        loop {
            let mut b = [0u8; 8];
            block_on(qp.read(progress.add(me as u64 * 8), &mut b)).unwrap();
            let w = u64::from_le_bytes(b);
            if w & STOPPED != 0 {
                stopped += 1;
                break;
            }
            if done(me, w) || kid.0.try_wait().unwrap().is_some() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{name}: writer {me} never stopped where it was told (progress {w})"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        kid.0.kill().unwrap();
        kid.0.wait().unwrap();
    }
    stopped
}

/// A writer's work: round `i` upserts key `i` (value `i + 1`: new keys), rewrites key
/// `i / 2` in place, deletes and re-inserts every seventh key, then publishes `i + 1` as the
/// count of acknowledged rounds. Arms `armed` after `rounds` rounds.
pub async fn write_rounds<I: KvIndex>(
    t: &I,
    ep: &SoftEndpoint,
    me: u64,
    progress: GlobalAddr,
    rounds: u64,
    armed: &Cell<bool>,
) {
    let qp = ep.qp(progress.node()).unwrap();
    for i in 0u64.. {
        armed.set(i >= rounds);
        let r = async {
            t.upsert(&key(me, i), &(i + 1).to_le_bytes()).await?;
            t.upsert(&key(me, i / 2), &(i / 2 + 1).to_le_bytes())
                .await?;
            if i % 7 == 0 {
                t.delete(&key(me, i)).await?;
                t.upsert(&key(me, i), &(i + 1).to_le_bytes()).await?;
            }
            Ok::<_, I::Error>(())
        };
        if let Err(e) = r.await {
            // A live writer preempted past a lease is fenced: it stops, as a dead one.
            eprintln!("writer {me}: round {i}: {e}");
            return;
        }
        qp.write(progress, &(i + 1).to_le_bytes()).await.unwrap();
    }
}

/// What the survivor measured.
pub struct Survey {
    /// Rounds the writers had acknowledged.
    pub acked: u64,
    /// The survivor's first write completed this long after the last kill.
    pub first_write: Duration,
    /// Its slowest operation.
    pub slowest: Duration,
    pub total: Duration,
    pub failures: Vec<String>,
}

/// The survivor: reads back every acknowledged key, then writes and reads the whole range.
pub async fn survive<I: KvIndex>(t: &I, qp: &impl QueuePair, progress: GlobalAddr) -> Survey {
    let killed = Instant::now();
    let mut out = [0u8; 8];
    let mut s = Survey {
        acked: 0,
        first_write: Duration::ZERO,
        slowest: Duration::ZERO,
        total: Duration::ZERO,
        failures: Vec::new(),
    };
    let mut first_write = None;
    for me in 0..WRITERS {
        let mut b = [0u8; 8];
        qp.read(progress.add(me * 8), &mut b).await.unwrap();
        let done = u64::from_le_bytes(b) & !STOPPED;
        s.acked += done;
        let mut slowest = Duration::ZERO;
        let r: Result<(), String> = async {
            for i in 0..done {
                let t0 = Instant::now();
                match t.get(&key(me, i), &mut out).await {
                    Ok(Some(8)) if u64::from_le_bytes(out) == i + 1 => {}
                    Ok(other) => return Err(format!("key {i}: {other:?}")),
                    Err(e) => return Err(format!("key {i}: {e}")),
                }
                slowest = slowest.max(t0.elapsed());
            }
            for i in 0..done + 200 {
                let t0 = Instant::now();
                t.upsert(&key(me, i), &(i + 7).to_le_bytes())
                    .await
                    .map_err(|e| format!("rewrite key {i}: {e}"))?;
                slowest = slowest.max(t0.elapsed());
                first_write.get_or_insert_with(|| killed.elapsed());
            }
            for i in 0..done + 200 {
                match t.get(&key(me, i), &mut out).await {
                    Ok(Some(8)) if u64::from_le_bytes(out) == i + 7 => {}
                    Ok(other) => return Err(format!("re-read key {i}: {other:?}")),
                    Err(e) => return Err(format!("re-read key {i}: {e}")),
                }
            }
            Ok(())
        }
        .await;
        s.slowest = s.slowest.max(slowest);
        if let Err(e) = r {
            s.failures.push(format!("writer {me}: {e}"));
        }
    }
    s.first_write = first_write.unwrap_or_default();
    s.total = killed.elapsed();
    s
}

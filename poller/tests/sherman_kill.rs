//! Sherman and FG+ on the soft fabric with writer *processes* killed (SIGKILL) in the middle
//! of their work, the reviewer's measurement of issue 10: before owned locks and repair, 61–88
//! keys (Sherman) and 86–118 (FG+) failed for good after one kill. Here, after killing every
//! writer at a random moment, one survivor reads back every key each writer had acknowledged,
//! then writes and reads the whole key range again (splits and in-place writes through
//! whatever the dead writers left: held locks, unlinked splits, an ungrown root, torn internal
//! pages). Nothing acknowledged may be missing and nothing may fail, except on a leaf torn
//! inside a WRITE by a killed writer, which is reported as a corrupt page (not repaired yet,
//! see `remora_core::sherman`; 3 runs of 44 on the loaded 2-core test machine, all FG+:
//! its whole-page write-back is the longest copy a writer does under a lock) and is printed.
//!
//! Child processes are this test binary re-executed with `SHERMAN_KILL_CHILD` set.
use remora_core::GlobalAddr;
use remora_core::alloc::RemoteAllocator;
use remora_core::block_on::block_on;
use remora_core::fabric::{Endpoint, QueuePair};
use remora_core::index::KvIndex;
use remora_core::lease::LeaseConfig;
use remora_core::sherman::{Sherman, ShermanConfig};
use remora_poller::soft::{NodeConfig, SoftMemoryNode, control};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const CHILD: &str = "SHERMAN_KILL_CHILD";
const WRITERS: u64 = 3;

fn cfg(fg_plus: bool) -> ShermanConfig {
    let base = if fg_plus {
        ShermanConfig::fg_plus()
    } else {
        ShermanConfig::sherman()
    };
    ShermanConfig {
        page_size: 256,
        lease: LeaseConfig {
            lease_ns: 200_000_000,
            deadline_ns: 1_000_000_000,
            ..LeaseConfig::default()
        },
        ..base
    }
}

fn key(writer: u64, i: u64) -> [u8; 8] {
    ((writer + 1) << 32 | i).to_be_bytes()
}

/// Kills the child when the test ends, however it ends.
struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Not a test on its own: the body of the writer processes. Round `i` upserts key `i` (value
/// `i + 1`: new keys, so leaves split), rewrites key `i / 2` in place, deletes and re-inserts
/// every seventh key, then publishes `i + 1` as its count of acknowledged rounds.
#[test]
fn child_entry() {
    let Ok(me) = std::env::var(CHILD) else {
        return;
    };
    let me: u64 = me.parse().unwrap();
    let path = PathBuf::from(std::env::var("SHERMAN_KILL_SOCK").unwrap());
    let fg = std::env::var("SHERMAN_KILL_FG").unwrap() == "1";
    let progress = GlobalAddr::from_raw(
        std::env::var("SHERMAN_KILL_PROGRESS")
            .unwrap()
            .parse()
            .unwrap(),
    )
    .add(me * 8);
    let ep = control::connect_all(&[path]).unwrap();
    block_on(async {
        let t = Sherman::open(&ep, cfg(fg)).await.unwrap();
        let qp = ep.qp(progress.node()).unwrap();
        for i in 0u64.. {
            let r = async {
                t.upsert(&key(me, i), &(i + 1).to_le_bytes()).await?;
                t.upsert(&key(me, i / 2), &(i / 2 + 1).to_le_bytes())
                    .await?;
                if i % 7 == 0 {
                    t.delete(&key(me, i)).await?;
                    t.upsert(&key(me, i), &(i + 1).to_le_bytes()).await?;
                }
                Ok::<_, remora_core::sherman::ShermanError>(())
            };
            if let Err(e) = r.await {
                // A live writer preempted past a lease is fenced: it stops, as a dead one.
                eprintln!("writer {me}: round {i}: {e}");
                return;
            }
            qp.write(progress, &(i + 1).to_le_bytes()).await.unwrap();
        }
    });
}

fn run(fg: bool) {
    let name = if fg { "fg+" } else { "sherman" };
    let path = std::env::temp_dir().join(format!(
        "remora-sherman-kill-{}-{name}.sock",
        std::process::id()
    ));
    let node = SoftMemoryNode::create(NodeConfig {
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap();
    let _l = control::listen(&node, &path).unwrap();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let t = block_on(Sherman::create(&ep, cfg(fg))).unwrap();
    let progress = block_on(async {
        let a = RemoteAllocator::open(qp).await.unwrap();
        let p = a.alloc_chunk(qp).await.unwrap();
        qp.write(p, &[0u8; 8 * WRITERS as usize]).await.unwrap();
        p
    });
    let mut kids: Vec<Kid> = (0..WRITERS)
        .map(|me| {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
                .env(CHILD, me.to_string())
                .env("SHERMAN_KILL_SOCK", path.display().to_string())
                .env("SHERMAN_KILL_FG", if fg { "1" } else { "0" })
                .env("SHERMAN_KILL_PROGRESS", progress.raw().to_string());
            Kid(c.spawn().expect("spawning a writer process"))
        })
        .collect();
    // Kill each writer at its own moment, once it has acknowledged some rounds.
    let start = Instant::now();
    let mut seed = std::process::id() as u64 | 1;
    for (me, kid) in kids.iter_mut().enumerate() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let min_rounds = 100 + seed % 400;
        loop {
            let mut b = [0u8; 8];
            block_on(qp.read(progress.add(me as u64 * 8), &mut b)).unwrap();
            let exited = kid.0.try_wait().unwrap().is_some();
            if u64::from_le_bytes(b) >= min_rounds || exited {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{name}: writer {me} makes no progress"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        kid.0.kill().unwrap();
        kid.0.wait().unwrap();
    }
    // The survivor: everything acknowledged is there; then the whole range again. A leaf
    // torn *inside* a WRITE by a killed writer is the one thing not repaired (see
    // `remora_core::sherman`): it must be reported as such (a corrupt leaf), and stops that
    // writer's checks; anything else fails the test.
    let t0 = Instant::now();
    let mut failures = Vec::new();
    let mut torn_leaves = Vec::new();
    let mut acked = 0;
    block_on(async {
        let mut out = [0u8; 8];
        for me in 0..WRITERS {
            let mut b = [0u8; 8];
            qp.read(progress.add(me * 8), &mut b).await.unwrap();
            let done = u64::from_le_bytes(b);
            acked += done;
            let r: Result<(), String> = async {
                for i in 0..done {
                    match t.get(&key(me, i), &mut out).await {
                        Ok(Some(8)) if u64::from_le_bytes(out) == i + 1 => {}
                        Ok(other) => return Err(format!("key {i}: {other:?}")),
                        Err(e) => return Err(format!("{e:?}")),
                    }
                }
                for i in 0..done + 200 {
                    t.upsert(&key(me, i), &(i + 7).to_le_bytes())
                        .await
                        .map_err(|e| format!("{e:?}"))?;
                }
                for i in 0..done + 200 {
                    match t.get(&key(me, i), &mut out).await {
                        Ok(Some(8)) if u64::from_le_bytes(out) == i + 7 => {}
                        Ok(other) => return Err(format!("re-read key {i}: {other:?}")),
                        Err(e) => return Err(format!("{e:?}")),
                    }
                }
                Ok(())
            }
            .await;
            if let Err(e) = r {
                let leaf = torn_leaf(&e, qp).await;
                if leaf {
                    torn_leaves.push(format!("writer {me}: {e}"));
                } else {
                    failures.push(format!("writer {me}: {e}"));
                }
            }
        }
    });
    println!(
        "{name}: {WRITERS} writer processes killed after {acked} acknowledged rounds; the \
         survivor checked and rewrote every key in {:?} with repairs {:?}; leaves torn inside \
         a WRITE (reported, not repaired): {torn_leaves:?}; failures: {failures:?}",
        t0.elapsed(),
        t.repairs(),
    );
    assert!(failures.is_empty(), "{name}: {failures:?}");
}

/// The error is `Corrupt` for a page whose (unverified) header says leaf.
async fn torn_leaf(e: &str, qp: &remora_poller::soft::SoftQp) -> bool {
    // `Corrupt { addr: 0:host+0x149700, ...`
    let Some(rest) = e.strip_prefix("Corrupt { addr: 0:host+0x") else {
        return false;
    };
    let hex: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    let Ok(off) = u64::from_str_radix(&hex, 16) else {
        return false;
    };
    let mut meta = [0u8; 8];
    qp.read(GlobalAddr::new(0, off + 8), &mut meta)
        .await
        .unwrap();
    remora_layouts::sherman::LEAF.get(u64::from_le_bytes(meta)) == 1
}

#[test]
fn sherman_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    run(false);
}

#[test]
fn fg_plus_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    run(true);
}

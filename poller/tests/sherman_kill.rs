//! Sherman, FG+ and CHIME (on Sherman: its leaves hopscotch tables, written after a redo
//! record as Sherman's) on the soft fabric with writer *processes* killed (SIGKILL) in the middle
//! of their work, the reviewer's measurement of issue 10: before owned locks and repair, 61–88
//! keys (Sherman) and 86–118 (FG+) failed for good after one kill. Three writers die: one at a
//! random moment; one right after it took a lock (its queue pair, [`Stop`], rings no more
//! doorbells once a CMP_AND_SWP of its own lock word from 0 succeeded); one in the middle of
//! a leaf write (its queue pair posts the redo record and a random part of the leaf WRITE's
//! changed words, as a process killed mid-copy leaves it, then stops). Each stopped writer
//! is killed where it stands. Then one survivor reads back every key each writer had acknowledged,
//! then writes and reads the whole key range again (splits and in-place writes through
//! whatever the dead writers left: held locks, unlinked splits, an ungrown root, torn internal
//! pages, leaves torn inside a WRITE). Nothing acknowledged may be missing and nothing may
//! fail: before redo records, a leaf torn inside a WRITE by a killed writer stayed a corrupt
//! page (3 runs of 44, all FG+); now the next holder of its lock redoes it. The survivor's
//! slowest operation must stay under six leases plus 2 s. `SHERMAN_KILL_TRIALS` (default 1)
//! repeats the whole campaign.
//!
//! Child processes are this test binary re-executed with `SHERMAN_KILL_CHILD` set (and the
//! tree's name in `SHERMAN_KILL_INDEX`).
use remora_core::GlobalAddr;
use remora_core::block_on::block_on;
use remora_core::chime::ChimeConfig;
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, SegmentOrder};
use remora_core::lease::LeaseConfig;
use remora_core::sherman::ShermanConfig;
use remora_poller::soft::{NodeConfig, SoftMemoryNode, SoftQp, control};
use std::cell::Cell;
use std::path::PathBuf;
use std::time::Duration;

#[path = "common/env.rs"]
mod env;
#[path = "common/hooked.rs"]
mod hooked;
#[path = "common/kill.rs"]
mod kill;
#[path = "common/trees.rs"]
mod trees;
use env::env_count;
use hooked::{HookedEp, PostHook};
use kill::{
    Kid, Survey, WRITERS, halt, kill_when, progress_words, spawn_writer, survive, write_rounds,
};
use trees::Base;

const CHILD: &str = "SHERMAN_KILL_CHILD";

/// The tree named `name` (`sherman`, `fg+`, `chime` or a CHIME with one of remora's ideas),
/// with 256-byte pages and 200 ms leases.
fn cfg(name: &str) -> Base {
    let base = match name {
        "sherman" => Base::Sherman(ShermanConfig::sherman()),
        "fg+" => Base::Sherman(ShermanConfig::fg_plus()),
        "chime" => Base::Chime(ChimeConfig::chime().with_cache(1 << 20)),
        "chime-prefix-free" => Base::Chime(
            ChimeConfig {
                prefix_free: true,
                ..ChimeConfig::chime()
            }
            .with_cache(1 << 20),
        ),
        "chime-paced" => {
            let mut c = ChimeConfig::chime().with_cache(1 << 20);
            c.sherman.paced_locks = true;
            Base::Chime(c)
        }
        other => panic!("no tree {other}"),
    };
    base.with(ShermanConfig {
        page_size: 256,
        lease: LeaseConfig {
            lease_ns: 200_000_000,
            deadline_ns: 1_000_000_000,
            ..LeaseConfig::default()
        },
        ..base.sherman()
    })
}

/// Where a writer stops (and is killed), once armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Never,
    /// At the first doorbell after a CMP_AND_SWP of its own lock word from 0 succeeded.
    Lock,
    /// In the middle of its next logged leaf write (a doorbell with two WRITEs of more than a
    /// word: the redo record, then the entry or page): the WRITEs before the leaf's go whole,
    /// the leaf's only partly (a random proper subset of its changed words).
    TornLeaf,
}

struct StopHook<'a> {
    how: Stop,
    client: u32,
    armed: &'a Cell<bool>,
    took: &'a Cell<bool>,
    progress: GlobalAddr,
    /// Where this writer publishes how many locks it took over from dead holders (a lock
    /// writer 1 left can be taken over by writer 0 or 2 before the survivor runs).
    takeovers: GlobalAddr,
    taken: &'a Cell<u64>,
    seed: u64,
}

impl StopHook<'_> {
    /// Posts `ops[..t]` whole and part of the WRITE `ops[t]`.
    async fn tear(&self, qp: &SoftQp, ops: &[Op<'_>], t: usize) -> Result<(), FabricError> {
        let Op::Write { remote, local: new } = ops[t] else {
            return Ok(());
        };
        let mut old = vec![0u8; new.len()];
        qp.read(remote, &mut old).await?;
        let differ: Vec<usize> = (0..new.len() / 8)
            .filter(|&i| new[i * 8..i * 8 + 8] != old[i * 8..i * 8 + 8])
            .collect();
        let (start, stride) = SegmentOrder::permutation(differ.len(), self.seed);
        let n = 1 + self.seed as usize % differ.len().saturating_sub(1).max(1);
        let mut part: Vec<Op<'_>> = ops[..t]
            .iter()
            .filter_map(|op| match *op {
                Op::Write { remote, local } => Some(Op::Write { remote, local }),
                _ => None,
            })
            .collect();
        for j in 0..n.min(differ.len().saturating_sub(1)) {
            let i = differ[(start + j * stride) % differ.len()];
            part.push(Op::Write {
                remote: remote.add(i as u64 * 8),
                local: &new[i * 8..i * 8 + 8],
            });
        }
        qp.post(&mut part).await
    }
}

impl PostHook<SoftQp> for StopHook<'_> {
    async fn post<'a, 'b>(
        &'a self,
        qp: &'a SoftQp,
        ops: &'a mut [Op<'b>],
    ) -> Result<(), FabricError> {
        if self.armed.get() && !ops.is_empty() {
            if self.how == Stop::Lock && self.took.get() {
                return Err(halt(qp, self.progress).await);
            }
            let big: Vec<usize> = (0..ops.len())
                .filter(|&i| matches!(ops[i], Op::Write { local, .. } if local.len() > 8))
                .collect();
            if self.how == Stop::TornLeaf && big.len() >= 2 {
                self.tear(qp, ops, big[big.len() - 1]).await?;
                return Err(halt(qp, self.progress).await);
            }
        }
        let mine: Vec<bool> = ops
            .iter()
            .map(|op| {
                matches!(*op, Op::Cas { compare: 0, swap, .. }
                    if self.client != 0 && swap >> 32 == self.client as u64)
            })
            .collect();
        let over: Vec<bool> = ops
            .iter()
            .map(|op| {
                matches!(*op, Op::Cas { compare, swap, .. }
                    if compare != 0 && swap >> 32 == self.client as u64)
            })
            .collect();
        let r = qp.post(ops).await;
        let took = ops
            .iter()
            .zip(&mine)
            .any(|(op, &m)| m && matches!(op, Op::Cas { old, .. } if **old == 0));
        self.took.set(r.is_ok() && took);
        // A CAS from another holder's word to ours that found that word: a takeover.
        let taken = ops
            .iter()
            .zip(&over)
            .filter(|&(op, &o)| {
                o && matches!(op, Op::Cas { old, compare, .. } if **old == *compare)
            })
            .count() as u64;
        if r.is_ok() && taken > 0 {
            self.taken.set(self.taken.get() + taken);
            qp.write(self.takeovers, &self.taken.get().to_le_bytes())
                .await?;
        }
        r
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
    let name = std::env::var("SHERMAN_KILL_INDEX").unwrap();
    let base = GlobalAddr::from_raw(
        std::env::var("SHERMAN_KILL_PROGRESS")
            .unwrap()
            .parse()
            .unwrap(),
    );
    let progress = base.add(me * 8);
    let ep = control::connect_all(&[path]).unwrap();
    let rounds: u64 = std::env::var("SHERMAN_KILL_ROUNDS")
        .unwrap()
        .parse()
        .unwrap();
    let (armed, took, taken) = (Cell::new(false), Cell::new(false), Cell::new(0));
    let stop = HookedEp::new(&ep, |_| StopHook {
        how: match me {
            1 => Stop::Lock,
            2 => Stop::TornLeaf,
            _ => Stop::Never,
        },
        client: ep.client_id(),
        armed: &armed,
        took: &took,
        progress,
        takeovers: takeover_word(base, me),
        taken: &taken,
        seed: rounds,
    });
    block_on(async {
        let t = cfg(&name).open(&stop).await.unwrap();
        write_rounds(&t, &ep, me, progress, rounds, &armed).await
    });
}

/// Writer `me`'s count of locks it took over, after the progress words.
fn takeover_word(progress: GlobalAddr, me: u64) -> GlobalAddr {
    progress.add((WRITERS + me) * 8)
}

fn run(name: &str) {
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
    let t = block_on(cfg(name).create(&ep)).unwrap();
    let progress = progress_words(qp);
    let mut seed = std::process::id() as u64 | 1;
    let mut min_rounds = [0u64; WRITERS as usize];
    for r in min_rounds.iter_mut() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        *r = 100 + seed % 400;
    }
    let mut kids: Vec<Kid> = (0..WRITERS)
        .map(|me| {
            let env = [
                ("SHERMAN_KILL_SOCK", path.display().to_string()),
                ("SHERMAN_KILL_INDEX", name.to_string()),
                ("SHERMAN_KILL_PROGRESS", progress.raw().to_string()),
                ("SHERMAN_KILL_ROUNDS", min_rounds[me as usize].to_string()),
            ];
            spawn_writer(CHILD, me, &env)
        })
        .collect();
    // Kill each writer once it has acknowledged its rounds (writer 0) or stopped where it
    // was told to (writers 1 and 2).
    let stopped = kill_when(name, &mut kids, qp, progress, |me, w| {
        me == 0 && w >= min_rounds[0]
    });
    // The survivor: everything acknowledged is there; then the whole range again, through
    // whatever the dead writers left (a leaf torn inside a WRITE included: the next holder of
    // its lock redoes it from the dead writer's redo record). Nothing may fail.
    let Survey {
        acked,
        first_write,
        slowest,
        total,
        failures,
    } = block_on(survive(&t, qp, progress));
    let lease = Duration::from_nanos(cfg(name).sherman().lease.lease_ns);
    println!(
        "{name}: {WRITERS} writer processes killed after {acked} acknowledged rounds; the \
         survivor's first write completed {:?} after the last kill, its slowest operation took \
         {slowest:?} (lease {lease:?}); it checked and rewrote every key in {:?} with repairs \
         {:?}; failures: {failures:?}",
        first_write,
        total,
        t.sherman().repairs(),
    );
    assert!(failures.is_empty(), "{name}: {failures:?}");
    assert_eq!(stopped, 2, "{name}: writers 1 and 2 stop where told");
    // Writers 1 and 2 died holding a lock each (the same one when writer 2 took writer 1's
    // over); a live writer may take a dead one's over before it is killed itself, and then
    // the survivor takes over what that writer held. Each stop leaves a lock someone took.
    let by_writers: u64 = (0..WRITERS)
        .map(|me| {
            let mut b = [0u8; 8];
            block_on(qp.read(takeover_word(progress, me), &mut b)).unwrap();
            u64::from_le_bytes(b)
        })
        .sum();
    let r = t.sherman().repairs();
    assert!(
        r.takeovers + by_writers >= 2 && r.takeovers >= 1 && r.leaves_redone >= 1,
        "{name}: the locks of both stopped writers must be taken over (survivor {r:?}, \
         writers {by_writers}) and the survivor must redo the torn leaf"
    );
    // A survivor operation waits out at most a few dead holders' leases (a leaf's, a
    // parent's during a separator insert; a reader that finds a torn leaf waits a lease
    // before it takes the lock over, which costs another), plus scheduling on a loaded
    // machine.
    let bound = 6 * lease + Duration::from_secs(2);
    assert!(slowest < bound, "{name}: an operation took {slowest:?}");
}

#[test]
fn sherman_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    for _ in 0..env_count("SHERMAN_KILL_TRIALS", 1) {
        run("sherman");
    }
}

#[test]
fn fg_plus_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    for _ in 0..env_count("SHERMAN_KILL_TRIALS", 1) {
        run("fg+");
    }
}

#[test]
fn chime_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    for _ in 0..env_count("SHERMAN_KILL_TRIALS", 1) {
        run("chime");
    }
}

/// With remora's prefix-free writes (`ChimeConfig::prefix_free`): a leaf torn by a killed
/// writer is told by its groups alone and redone.
#[test]
fn chime_prefix_free_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    for _ in 0..env_count("SHERMAN_KILL_TRIALS", 1) {
        run("chime-prefix-free");
    }
}

/// With remora's paced lock waits (`ShermanConfig::paced_locks`): the survivor waits for a
/// killed writer's lock pausing a round trip of wall-clock time between CASes, and still
/// reaches its lease, fences the dead process and takes the lock over.
#[test]
fn chime_paced_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    for _ in 0..env_count("SHERMAN_KILL_TRIALS", 1) {
        run("chime-paced");
    }
}

//! SMART, its ART baseline and CANRT on the soft fabric with writer *processes* killed
//! (SIGKILL) in the middle of their work — issue 10's "must show" on a real process: a writer
//! dies holding whatever it held (a SMART leaf or node lock, a frozen node of a grow, a
//! half-done prefix split; a CANRT lock ticket, a resize request in flight), and a client in
//! another process then reads back every key each writer had acknowledged and writes and
//! reads the whole key range again. Nothing acknowledged may be missing, nothing may fail,
//! and no survivor operation may take longer than the bound stated in [`bound`] (a few
//! leases plus scheduling slack). The survivor's first completed write after the last kill
//! and its slowest operation are printed per trial, and p50/p99 over the trials.
//!
//! The writers insert new keys every round (SMART grows and splits nodes, CANRT data nodes
//! fill and resize), rewrite an older key in place, and delete and re-insert every seventh
//! key. Each is killed *while it holds a lock*: once it has acknowledged its rounds (50-250,
//! random per writer), its queue pair ([`StopQp`]) waits for the next atomic that takes
//! something — a CMP_AND_SWP from 0 that succeeds (SMART: a leaf or node lock, or an empty
//! slot filled by a split or grow) or a FETCH_AND_ADD (CANRT: a lock ticket) — lets it
//! complete and then, at the writer's next doorbell (its write-back, its unlock, the rest of
//! its split), stops, tells the test, and is killed there. The survivor's repair counters
//! are printed. `KILL_TRIALS` (default 1) repeats each campaign.
//!
//! Child processes are this test binary re-executed with `KILL_CHILD` set.
use remora_core::GlobalAddr;
use remora_core::block_on::block_on;
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair};
use remora_core::lease::LeaseConfig;
use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
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
use env::env_count;
use hooked::{HookedEp, PostHook};
use kill::{
    Kid, Survey, WRITERS, halt, kill_when, progress_words, spawn_writer, survive, write_rounds,
};

const CHILD: &str = "KILL_CHILD";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Smart,
    Art,
    Canrt,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Smart => "smart",
            Which::Art => "art",
            Which::Canrt => "canrt",
        }
    }
    fn parse(s: &str) -> Which {
        match s {
            "smart" => Which::Smart,
            "art" => Which::Art,
            _ => Which::Canrt,
        }
    }
    /// The lease every client of the campaign uses: long enough that a live writer
    /// descheduled on a loaded 2-core machine is rarely taken for dead, short enough that a
    /// trial takes seconds.
    fn lease_ns(self) -> u64 {
        200_000_000
    }
}

fn lease(which: Which) -> LeaseConfig {
    LeaseConfig {
        lease_ns: which.lease_ns(),
        deadline_ns: 10 * which.lease_ns(),
        ..LeaseConfig::default()
    }
}

fn smart_cfg(which: Which) -> SmartConfig {
    let t = if which == Which::Art {
        Techniques::BASELINE
    } else {
        Techniques::SMART
    };
    let mut c = SmartConfig::new(t, KeyMode::Fixed(8), 8);
    c.cache_mib = 4.0;
    c.lease = lease(which);
    c
}

fn canrt_cfg() -> CanrtConfig {
    CanrtConfig {
        slots: 16,
        lease: lease(Which::Canrt),
        ..CanrtConfig::new(0)
    }
}

/// The bound on any survivor operation: it may wait out a few dead holders' leases in a row
/// (SMART: a leaf lock, then a frozen node or a node lock on the way; CANRT: a dead ticket,
/// then a resize the dead writer had asked for), plus 2 s of scheduling on a loaded machine.
fn bound(which: Which) -> Duration {
    6 * Duration::from_nanos(which.lease_ns()) + Duration::from_secs(2)
}

/// The writer's side of "killed while holding a lock": once armed, after an atomic that took
/// something completed, the next doorbell is not rung; the queue pair publishes `STOPPED` in
/// the writer's progress word's high bit and waits for the SIGKILL.
struct StopHook<'a> {
    /// What counts as taking something.
    what: Take,
    /// This client's id (its lock words name it).
    client: u32,
    armed: &'a Cell<bool>,
    /// The last doorbell took something (an atomic from 0 that succeeded, a ticket).
    took: &'a Cell<bool>,
    progress: GlobalAddr,
}

/// What a writer stops holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// An owned lock word (`owner_word(client, tag)`, CASed from 0): SMART's leaf lock, the
    /// ART baseline's node and leaf locks.
    Lock,
    /// A node frozen for a grow (a CAS setting one bit of a nonzero word): SMART mid-grow.
    Freeze,
    /// A FETCH_AND_ADD: CANRT's lock ticket.
    Ticket,
}

impl Take {
    /// If a CAS `compare -> swap` takes this, the old value it must find.
    fn takes(self, compare: u64, swap: u64, client: u32) -> Option<u64> {
        let t = match self {
            Take::Lock => compare == 0 && swap >> 32 == client as u64 && client != 0,
            Take::Freeze => {
                compare != 0 && swap & compare == compare && (swap & !compare).count_ones() == 1
            }
            Take::Ticket => false,
        };
        t.then_some(compare)
    }
}

impl PostHook<SoftQp> for StopHook<'_> {
    async fn post<'a, 'b>(
        &'a self,
        qp: &'a SoftQp,
        ops: &'a mut [Op<'b>],
    ) -> Result<(), FabricError> {
        if self.armed.get() && self.took.get() && !ops.is_empty() {
            return Err(halt(qp, self.progress).await);
        }
        // The old value each CAS must find to take what we wait for.
        let wanted: Vec<Option<u64>> = ops
            .iter()
            .map(|op| match *op {
                Op::Cas { compare, swap, .. } => self.what.takes(compare, swap, self.client),
                _ => None,
            })
            .collect();
        let faa = self.what == Take::Ticket && ops.iter().any(|op| matches!(op, Op::Faa { .. }));
        let r = qp.post(ops).await;
        let took = faa
            || ops
                .iter()
                .zip(&wanted)
                .any(|(op, w)| matches!((op, w), (Op::Cas { old, .. }, Some(c)) if **old == *c));
        self.took.set(r.is_ok() && took);
        r
    }
}

/// Not a test on its own: the body of the writer processes.
#[test]
fn child_entry() {
    let Ok(me) = std::env::var(CHILD) else {
        return;
    };
    let me: u64 = me.parse().unwrap();
    let which = Which::parse(&std::env::var("KILL_INDEX").unwrap());
    let path = PathBuf::from(std::env::var("KILL_SOCK").unwrap());
    let progress =
        GlobalAddr::from_raw(std::env::var("KILL_PROGRESS").unwrap().parse().unwrap()).add(me * 8);
    let rounds: u64 = std::env::var("KILL_ROUNDS").unwrap().parse().unwrap();
    let ep = control::connect_all(&[path]).unwrap();
    let (armed, took) = (Cell::new(false), Cell::new(false));
    let what = match which {
        Which::Canrt => Take::Ticket,
        Which::Smart if me == 1 => Take::Freeze,
        _ => Take::Lock,
    };
    let stop = HookedEp::new(&ep, |_| StopHook {
        what,
        client: ep.client_id(),
        armed: &armed,
        took: &took,
        progress,
    });
    block_on(async {
        match which {
            Which::Canrt => {
                let t = Canrt::open(&stop, canrt_cfg()).await.unwrap();
                write_rounds(&t, &ep, me, progress, rounds, &armed).await
            }
            _ => {
                let t = Smart::open(&stop, smart_cfg(which)).await.unwrap();
                write_rounds(&t, &ep, me, progress, rounds, &armed).await
            }
        }
    });
}

/// What one trial measured.
struct Trial {
    survey: Survey,
    /// Writers killed while holding what they had just taken.
    stopped: u32,
    /// SMART/ART: locks the survivor took over plus half-done changes it repaired.
    fixed: u64,
}

fn run(which: Which, trial_no: u32) -> Trial {
    let name = which.name();
    let path = std::env::temp_dir().join(format!(
        "remora-kill-{}-{name}-{trial_no}.sock",
        std::process::id()
    ));
    let cfg = NodeConfig {
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    };
    let node = match which {
        Which::Canrt => SoftMemoryNode::create_with(cfg, Box::new(CanrtServer::new())),
        _ => SoftMemoryNode::create(cfg),
    }
    .unwrap();
    let _srv = node.spawn_server();
    let _l = control::listen(&node, &path).unwrap();
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let progress = progress_words(qp);
    // The tree exists before the writers start (so they do not race to create it).
    let smart = match which {
        Which::Canrt => None,
        _ => Some(block_on(Smart::open(&ep, smart_cfg(which))).unwrap()),
    };
    let canrt = match which {
        Which::Canrt => Some(block_on(Canrt::open(&ep, canrt_cfg())).unwrap()),
        _ => None,
    };
    let mut seed = (std::process::id() as u64) << 8 | trial_no as u64 | 1;
    let mut kids: Vec<Kid> = (0..WRITERS)
        .map(|me| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let rounds = 50 + seed % 200;
            let env = [
                ("KILL_INDEX", name.to_string()),
                ("KILL_SOCK", path.display().to_string()),
                ("KILL_PROGRESS", progress.raw().to_string()),
                ("KILL_ROUNDS", rounds.to_string()),
            ];
            spawn_writer(CHILD, me, &env)
        })
        .collect();
    // Each writer is killed once it stopped holding what it took.
    let stopped = kill_when(name, &mut kids, qp, progress, |_, _| false);
    let survey = match (&smart, &canrt) {
        (Some(t), _) => block_on(survive(t, qp, progress)),
        (_, Some(t)) => block_on(survive(t, qp, progress)),
        _ => unreachable!("one index is open"),
    };
    let mut fixed = 0;
    let repairs = match (&smart, &canrt) {
        (Some(t), _) => {
            let s = t.stats();
            fixed = s.takeovers + s.repairs;
            format!("takeovers {}, repairs {}", s.takeovers, s.repairs)
        }
        (_, Some(t)) => {
            let s = t.stats();
            format!(
                "skip requests {}, lock waits {}",
                s.skip_requests, s.lock_waits
            )
        }
        _ => String::new(),
    };
    println!(
        "{name}: {WRITERS} writer processes killed ({stopped} holding what they had just \
         taken) after {} acknowledged rounds; the \
         survivor's first write completed {:?} after the last kill, its slowest operation took \
         {:?} (lease {:?}); all keys checked and rewritten in {:?}; {repairs}; failures: {:?}",
        survey.acked,
        survey.first_write,
        survey.slowest,
        Duration::from_nanos(which.lease_ns()),
        survey.total,
        survey.failures
    );
    Trial {
        survey,
        stopped,
        fixed,
    }
}

fn campaign(which: Which) {
    let mut first = Vec::new();
    let mut slowest = Vec::new();
    for n in 0..env_count("KILL_TRIALS", 1) as u32 {
        let t = run(which, n);
        assert!(
            t.survey.failures.is_empty(),
            "{}: {:?}",
            which.name(),
            t.survey.failures
        );
        assert!(
            t.survey.slowest < bound(which),
            "{}: an operation took {:?}, over the bound {:?}",
            which.name(),
            t.survey.slowest,
            bound(which)
        );
        assert_eq!(
            t.stopped,
            WRITERS as u32,
            "{}: every writer stops holding",
            which.name()
        );
        if which != Which::Canrt {
            assert!(
                t.fixed > 0,
                "{}: the survivor repaired nothing",
                which.name()
            );
        }
        first.push(t.survey.first_write);
        slowest.push(t.survey.slowest);
    }
    first.sort_unstable();
    slowest.sort_unstable();
    let pct = |v: &[Duration], p: usize| v[(v.len() - 1) * p / 100];
    println!(
        "{}: {} trials; survivor's first write after the kill p50 {:?} p99 {:?}; slowest \
         operation p50 {:?} p99 {:?} (bound {:?})",
        which.name(),
        first.len(),
        pct(&first, 50),
        pct(&first, 99),
        pct(&slowest, 50),
        pct(&slowest, 99),
        bound(which)
    );
}

#[test]
fn smart_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    campaign(Which::Smart);
}

#[test]
fn art_baseline_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    campaign(Which::Art);
}

#[test]
fn canrt_survives_writer_processes_killed_mid_operation() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    campaign(Which::Canrt);
}

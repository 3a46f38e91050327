//! Linearizability across two client processes: each child's share of the history, and the
//! parent merging and checking them.
use super::*;

const LIN_COROS: u32 = 4;
const LIN_OPS: u64 = 2000;

/// A child's share of a two-process linearizability history: `LIN_COROS` `lin_client`s on
/// one endpoint, stamped with `CLOCK_MONOTONIC` (one clock for both processes), printed one
/// event a line for the parent to merge and check.
pub(super) fn lin_child(ep: &remora::poller::soft::SoftEndpoint, index: &str, me: u32) {
    use remora::core::lincheck::driver::{LinSpec, lin_client};
    use remora::core::lincheck::{Op, Outcome, PENDING, Recorder};
    use remora::poller::executor::run_coroutines;
    let rec = Recorder::new((LIN_COROS as u64 * LIN_OPS) as usize, 16);
    let clock = remora::poller::clock::monotonic_ns;
    macro_rules! clients {
        ($idx:expr) => {{
            let idx = $idx;
            let coros: Vec<_> = (0..LIN_COROS)
                .map(|c| {
                    let spec = LinSpec {
                        cold: 16,
                        ..LinSpec::new(1 + me * LIN_COROS + c, LIN_OPS, 11, false)
                    };
                    let (idx, rec) = (&idx, &rec);
                    async move {
                        lin_client(idx, &spec, rec, &clock)
                            .await
                            .map_err(|e| e.to_string())
                    }
                })
                .collect();
            // Both processes start their clients together (the memory node's barrier), so
            // that a loaded machine's scheduler does not run one to the end before the other.
            let bound = remora::core::barrier::Bound {
                timeout_ns: 30_000_000_000,
                max_polls: u64::MAX,
                pause_ns: 1_000,
            };
            block_on(remora::core::barrier::wait(ep.qp(0).unwrap(), 2, bound)).unwrap();
            for r in run_coroutines(coros) {
                r.unwrap();
            }
        }};
    }
    match index {
        "smart" => {
            clients!(block_on(remora::core::smart::Smart::open(ep, smart_config())).unwrap())
        }
        _ => {
            clients!(block_on(remora::core::sherman::Sherman::open(ep, sherman_config())).unwrap())
        }
    }
    let h = rec.finish().expect("recorder sized for the workload");
    for e in &h.events {
        let (kind, key, value) = match e.op {
            Op::Upsert { key, value } => ("upsert", key, value),
            Op::Update { key, value } => ("update", key, value),
            Op::Delete { key } => ("delete", key, 0),
            Op::Get { key } => ("get", key, 0),
            other => panic!("no scans in this history: {other:?}"),
        };
        let out = match e.outcome {
            Outcome::Unknown => "unknown".to_string(),
            Outcome::Done => "done".into(),
            Outcome::Present(b) => format!("present:{b}"),
            Outcome::Value(None) => "none".into(),
            Outcome::Value(Some(v)) => format!("value:{v}"),
            Outcome::Items { .. } => unreachable!("no scans"),
        };
        let ret = if e.ret == PENDING { u64::MAX } else { e.ret_ns };
        println!(
            "EV {} {} {ret} {kind} {key} {value} {out}",
            e.client, e.call_ns
        );
    }
}

/// Linearizability across two client processes: each runs `LIN_COROS` clients on shared hot
/// keys, stamps its events with `CLOCK_MONOTONIC`, and the parent merges and checks them.
/// The check means something only if the two processes' operations overlap in time: they
/// start together through the memory node's barrier, and on a loaded machine one may still
/// finish before the other runs, so a run without overlap (still checked) is repeated on a
/// fresh node, up to three times.
fn lin_two_processes(index: &str) {
    for attempt in 1..=3 {
        if lin_two_processes_once(index, attempt) {
            return;
        }
        eprintln!("{index}: attempt {attempt}: the two processes did not overlap; again");
    }
    panic!("{index}: in three attempts the two processes never ran at the same time");
}

/// One run; whether the processes' operations overlapped.
fn lin_two_processes_once(index: &str, attempt: u32) -> bool {
    use remora::core::lincheck::{CheckConfig, Event, History, Op, Outcome, PENDING, check};
    let path = sock(&format!("lin-{index}-{attempt}"));
    let node = SoftMemoryNode::create(NodeConfig {
        region_len: 64 << 20,
        chunk_size: 256 << 10,
        ..small_node()
    })
    .unwrap();
    let _l = control::listen(&node, &path).unwrap();
    let ep = node.endpoint().unwrap();
    match index {
        "smart" => drop(block_on(remora::core::smart::Smart::open(&ep, smart_config())).unwrap()),
        _ => drop(
            block_on(remora::core::sherman::Sherman::create(
                &ep,
                sherman_config(),
            ))
            .unwrap(),
        ),
    }
    let run = |me: u32| {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD, "lin")
            .env("REMORA_SOCK", path.display().to_string())
            .env("REMORA_INDEX", index)
            .env("REMORA_ME", me.to_string())
            .stdout(std::process::Stdio::piped());
        c.spawn().expect("spawning a client process")
    };
    let kids = [run(0), run(1)];
    let mut h = History::default();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(out.status.success(), "a {index} client process failed");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // The test harness may print its own words before ours on the first line.
            let Some(at) = line.find("EV ") else {
                continue;
            };
            let f: Vec<&str> = line[at..].split_whitespace().collect();
            if f.first() != Some(&"EV") || f.len() != 8 {
                continue;
            }
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            let (key, value) = (n(5), n(6));
            let op = match f[4] {
                "upsert" => Op::Upsert { key, value },
                "update" => Op::Update { key, value },
                "delete" => Op::Delete { key },
                _ => Op::Get { key },
            };
            let outcome = match f[7] {
                "unknown" => Outcome::Unknown,
                "done" => Outcome::Done,
                "none" => Outcome::Value(None),
                o if o.starts_with("present:") => Outcome::Present(o.ends_with("true")),
                o => Outcome::Value(Some(o["value:".len()..].parse().unwrap())),
            };
            let ret = if n(3) == u64::MAX { PENDING } else { n(3) };
            h.push(
                Event {
                    client: n(1) as u32,
                    call: n(2),
                    ret,
                    call_ns: n(2),
                    ret_ns: n(3),
                    op,
                    outcome,
                },
                &[],
            );
        }
    }
    assert_eq!(
        h.events.len() as u64,
        2 * LIN_COROS as u64 * LIN_OPS,
        "events missing"
    );
    // The check means something only if the processes' operations really overlap in time.
    let (a, b): (Vec<&Event>, Vec<&Event>) = h.events.iter().partition(|e| e.client <= LIN_COROS);
    let (a0, a1) = (
        a.iter().map(|e| e.call_ns).min(),
        a.iter().map(|e| e.ret_ns).max(),
    );
    let (b0, b1) = (
        b.iter().map(|e| e.call_ns).min(),
        b.iter().map(|e| e.ret_ns).max(),
    );
    let r = check(&h, &CheckConfig::new(11));
    println!("{index} across two processes: {r}");
    assert!(r.is_ok(), "{index}: {r}");
    a0 < b1 && b0 < a1
}

#[test]
fn smart_is_linearizable_across_two_client_processes() {
    lin_two_processes("smart");
}

#[test]
fn sherman_is_linearizable_across_two_client_processes() {
    lin_two_processes("sherman");
}

//! End-to-end tests of the soft fabric across processes: a memory node in one process,
//! clients in others. Child processes are this test binary re-executed with
//! `REMORA_TEST_CHILD` set (see `child_entry`).
use remora::core::GlobalAddr;
use remora::core::alloc::RemoteAllocator;
use remora::core::block_on::block_on;
use remora::core::conformance::run_all;
use remora::core::fabric::{Endpoint, FabricError, QueuePair};
use remora::poller::executor::run_coroutines;
use remora::poller::soft::harness::SoftHarness;
use remora::poller::soft::{NodeConfig, SoftMemoryNode, control};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const CHILD: &str = "REMORA_TEST_CHILD";
const FAA_COROUTINES: u64 = 64;
const FAA_PER_COROUTINE: u64 = 2000;
const TEAR_LEN: usize = 1024;

fn sock(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("remora-test-{}-{name}.sock", std::process::id()))
}

/// Kills the child when the test ends, however it ends.
struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(role: &str, envs: &[(&str, String)]) -> Kid {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, role);
    for (k, v) in envs {
        c.env(k, v);
    }
    Kid(c.spawn().expect("spawning a child process"))
}

fn wait_for_memnode(path: &Path) {
    let t = Instant::now();
    while control::info(path).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "memnode at {} never came up",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn small_node() -> NodeConfig {
    NodeConfig {
        region_len: 16 << 20,
        chunk_size: 64 << 10,
        ..NodeConfig::default()
    }
}

/// Not a test on its own: the body of the child processes.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(CHILD) else {
        return;
    };
    let path = PathBuf::from(std::env::var("REMORA_SOCK").unwrap());
    match role.as_str() {
        "memnode" => {
            let node = SoftMemoryNode::create(small_node()).unwrap();
            let _l = control::listen(&node, &path).unwrap();
            node.serve_until(
                &AtomicBool::new(false),
                Some(Instant::now() + Duration::from_secs(120)),
            );
        }
        "foreign-revoke" => {
            // Drop to another user, then try to revoke the node's key.
            // SAFETY: setuid has no memory-safety preconditions; the test runs as root.
            let r = unsafe { libc::setuid(65534) };
            assert_eq!(r, 0, "setuid(nobody) failed");
            let e = control::revoke(&path).expect_err("a foreign user revoked the key");
            println!("REFUSED: {e}");
        }
        "faa" => {
            let word = GlobalAddr::from_raw(std::env::var("REMORA_WORD").unwrap().parse().unwrap());
            let ep = control::connect_all(&[path]).unwrap();
            let qp = ep.qp(word.node()).unwrap();
            let coros = (0..FAA_COROUTINES)
                .map(|_| async move {
                    for _ in 0..FAA_PER_COROUTINE {
                        qp.faa(word, 1).await.expect("faa");
                    }
                })
                .collect();
            run_coroutines(coros);
        }
        "writer" => {
            let base = GlobalAddr::from_raw(std::env::var("REMORA_WORD").unwrap().parse().unwrap());
            let ep = control::connect_all(&[path]).unwrap();
            let qp = ep.qp(base.node()).unwrap();
            let stop = base.add(TEAR_LEN as u64);
            let t = Instant::now();
            let mut v = 0u64;
            while t.elapsed() < Duration::from_secs(30) {
                v += 1;
                let img: Vec<u8> = (0..TEAR_LEN / 8).flat_map(|_| v.to_le_bytes()).collect();
                block_on(qp.write(base, &img)).unwrap();
                let mut s = [0u8; 8];
                block_on(qp.read(stop, &mut s)).unwrap();
                if s != [0; 8] {
                    break;
                }
            }
        }
        "kv" => {
            let me: u64 = std::env::var("REMORA_ME").unwrap().parse().unwrap();
            let ep = control::connect_all(&[path]).unwrap();
            let index = std::env::var("REMORA_INDEX").unwrap();
            block_on(kv_history(&ep, &index, me));
        }
        "durable-node" => durable_node(&path),
        "durable-writer" => durable_writer(&path),
        "lin" => {
            let me: u32 = std::env::var("REMORA_ME").unwrap().parse().unwrap();
            let ep = control::connect_all(&[path]).unwrap();
            let index = std::env::var("REMORA_INDEX").unwrap();
            lin_child(&ep, &index, me);
        }
        other => panic!("unknown child role {other}"),
    }
}

const LIN_COROS: u32 = 4;
const LIN_OPS: u64 = 400;

/// A child's share of a two-process linearizability history: `LIN_COROS` `lin_client`s on
/// one endpoint, stamped with `CLOCK_MONOTONIC` (one clock for both processes), printed one
/// event a line for the parent to merge and check.
fn lin_child(ep: &remora::poller::soft::SoftEndpoint, index: &str, me: u32) {
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

fn sherman_config() -> remora::core::sherman::ShermanConfig {
    remora::core::sherman::ShermanConfig {
        page_size: 256,
        ..remora::core::sherman::ShermanConfig::sherman()
    }
}

fn smart_config() -> remora::core::smart::SmartConfig {
    use remora::core::smart::{KeyMode, SmartConfig, Techniques};
    SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8)
}

/// One client's share of a two-process history (`remora::core::kvcheck`) on `index`.
async fn kv_history(ep: &remora::poller::soft::SoftEndpoint, index: &str, me: u64) {
    use remora::core::kvcheck::{History, client_history};
    let h = History {
        client: me,
        ops: 3000,
        range: 500,
        hot: 4,
        seed: 7,
        value_size: 8,
        scans: true,
    };
    match index {
        "smart" => {
            let t = remora::core::smart::Smart::open(ep, smart_config())
                .await
                .unwrap();
            client_history(&t, &h).await.unwrap();
        }
        "sherman" => {
            let t = remora::core::sherman::Sherman::open(ep, sherman_config())
                .await
                .unwrap();
            client_history(&t, &h).await.unwrap();
        }
        other => panic!("unknown index {other}"),
    }
}

/// Creates `index` on a memory node of this process, then runs two client processes on it.
fn two_client_processes(index: &str) {
    let path = sock(index);
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
    let env = |me: &str| {
        [
            ("REMORA_SOCK", path.display().to_string()),
            ("REMORA_INDEX", index.into()),
            ("REMORA_ME", me.into()),
        ]
    };
    let mut kids = [spawn("kv", &env("1")), spawn("kv", &env("2"))];
    for k in &mut kids {
        assert!(
            k.0.wait().unwrap().success(),
            "a {index} client process failed"
        );
    }
}

#[test]
fn smart_across_two_client_processes_agrees_with_its_oracles() {
    two_client_processes("smart");
}

#[test]
fn sherman_across_two_client_processes_agrees_with_its_oracles() {
    two_client_processes("sherman");
}

#[test]
fn conformance_across_processes() {
    let path = sock("conf");
    let _memnode = spawn("memnode", &[("REMORA_SOCK", path.display().to_string())]);
    wait_for_memnode(&path);
    run_all(&SoftHarness::remote(path).unwrap());
}

#[test]
fn two_processes_of_many_coroutines_faa_to_the_exact_sum() {
    let path = sock("faa");
    let node = SoftMemoryNode::create(small_node()).unwrap();
    let _l = control::listen(&node, &path).unwrap();
    let _server = node.spawn_server();
    let qp = node.qp().unwrap();
    let alloc = block_on(RemoteAllocator::open(&qp)).unwrap();
    let word = block_on(alloc.alloc(&qp, 8)).unwrap();
    let env = [
        ("REMORA_SOCK", path.display().to_string()),
        ("REMORA_WORD", word.raw().to_string()),
    ];
    let mut kids = [spawn("faa", &env), spawn("faa", &env)];
    for k in &mut kids {
        assert!(k.0.wait().unwrap().success(), "a FAA client process failed");
    }
    let mut b = [0u8; 8];
    block_on(qp.read(word, &mut b)).unwrap();
    assert_eq!(
        u64::from_le_bytes(b),
        2 * FAA_COROUTINES * FAA_PER_COROUTINE
    );
}

#[test]
fn tearing_is_real_across_processes() {
    let path = sock("tear");
    let node = SoftMemoryNode::create(small_node()).unwrap();
    let _l = control::listen(&node, &path).unwrap();
    let qp = node.qp().unwrap();
    let alloc = block_on(RemoteAllocator::open(&qp)).unwrap();
    let base = block_on(alloc.alloc(&qp, 2 * TEAR_LEN as u64)).unwrap();
    let env = [
        ("REMORA_SOCK", path.display().to_string()),
        ("REMORA_WORD", base.raw().to_string()),
    ];
    let _writer = spawn("writer", &env);
    let mut img = vec![0u8; TEAR_LEN];
    let (mut reads, mut torn) = (0u64, 0u64);
    let t = Instant::now();
    while torn == 0 && t.elapsed() < Duration::from_secs(20) {
        block_on(qp.read(base, &mut img)).unwrap();
        reads += 1;
        let w: Vec<u64> = img
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        if w[0] != 0 && w.iter().any(|&x| x != w[0]) {
            torn += 1;
            eprintln!(
                "torn 1 KiB read after {reads} reads: words range {}..={}",
                w.iter().min().unwrap(),
                w.iter().max().unwrap()
            );
        }
    }
    block_on(qp.write(base.add(TEAR_LEN as u64), &1u64.to_le_bytes())).unwrap();
    assert!(
        torn > 0,
        "no torn read in {reads} reads of a region another process kept rewriting"
    );
}

#[test]
fn garbage_connections_are_refused_and_the_memnode_keeps_serving() {
    let path = sock("garbage");
    let node = SoftMemoryNode::create(small_node()).unwrap();
    let _l = control::listen(&node, &path).unwrap();
    let _server = node.spawn_server();
    let good = control::connect(&path).unwrap();
    // Garbage bytes, a wrong protocol version, and a peer that says nothing at all.
    UnixStream::connect(&path)
        .unwrap()
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .unwrap();
    let mut wrong = [0u8; 16];
    wrong[..8].copy_from_slice(&control::HELLO_MAGIC.to_le_bytes());
    wrong[8..12].copy_from_slice(&99u32.to_le_bytes());
    UnixStream::connect(&path)
        .unwrap()
        .write_all(&wrong)
        .unwrap();
    // Thirty peers that say nothing: handshakes run concurrently, so they delay nobody.
    let silent: Vec<UnixStream> = (0..30)
        .map(|_| UnixStream::connect(&path).unwrap())
        .collect();
    // The existing client keeps working meanwhile, one- and two-sided.
    let mut b = [0u8; 8];
    block_on(good.read(GlobalAddr::new(0, 64), &mut b)).unwrap();
    block_on(good.send(b"still here")).unwrap();
    let mut msg = [0u8; 64];
    let r = block_on(good.recv(&mut msg)).unwrap();
    assert_eq!(&msg[..r.len as usize], b"still here");
    // A new client gets in at once, while the silent ones are still waited for (the bound
    // stated in the README: 500 ms, against a 1 s handshake deadline per silent peer).
    let t = std::time::Instant::now();
    let fresh = control::connect(&path).unwrap();
    let waited = t.elapsed();
    assert!(
        waited < std::time::Duration::from_millis(500),
        "a new client waited {waited:?} behind 30 silent connections"
    );
    block_on(fresh.read(GlobalAddr::new(0, 64), &mut b)).unwrap();
    // The silent ones are dropped after the handshake deadline.
    let t = std::time::Instant::now();
    while !node.recent_log().join("\n").contains("no hello")
        && t.elapsed() < std::time::Duration::from_secs(5)
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(silent);
    let log = node.recent_log().join("\n");
    assert!(
        log.contains("refused connection: bad hello magic"),
        "log: {log}"
    );
    assert!(log.contains("protocol version 99"), "log: {log}");
    assert!(log.contains("no hello"), "log: {log}");
}

#[test]
fn out_of_range_read_is_a_remote_access_error_and_breaks_the_queue_pair() {
    let path = sock("oob");
    let node = SoftMemoryNode::create(small_node()).unwrap();
    let _l = control::listen(&node, &path).unwrap();
    let qp = control::connect(&path).unwrap();
    let mut b = [0u8; 64];
    let end = GlobalAddr::new(0, small_node().region_len - 32);
    match block_on(qp.read(end, &mut b)) {
        Err(FabricError::RemoteAccess { .. }) => {}
        other => panic!("expected a remote access error, got {other:?}"),
    }
    assert!(qp.is_broken());
    assert_eq!(
        block_on(qp.read(GlobalAddr::new(0, 64), &mut b)),
        Err(FabricError::Flushed)
    );
}

#[test]
fn a_dead_memnode_is_reported_not_waited_for() {
    let path = sock("dead");
    let mut memnode = spawn("memnode", &[("REMORA_SOCK", path.display().to_string())]);
    wait_for_memnode(&path);
    let qp = control::connect(&path).unwrap();
    block_on(qp.send(b"ping")).unwrap();
    let mut m = [0u8; 64];
    block_on(qp.recv(&mut m)).unwrap();
    memnode.0.kill().unwrap();
    memnode.0.wait().unwrap();
    let t = Instant::now();
    let r = block_on(async {
        qp.send(b"anyone?").await?;
        qp.recv(&mut m).await
    });
    assert!(matches!(r, Err(FabricError::RetryExceeded { .. })), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_dead_memnode_fails_one_sided_verbs_too() {
    let path = sock("dead1");
    let mut memnode = spawn("memnode", &[("REMORA_SOCK", path.display().to_string())]);
    wait_for_memnode(&path);
    let qp = control::connect(&path).unwrap();
    let at = GlobalAddr::new(0, 4096);
    block_on(qp.write(at, &7u64.to_le_bytes())).unwrap();
    memnode.0.kill().unwrap();
    memnode.0.wait().unwrap();
    // Writes into the dead node's orphaned memory must stop within the watchdog's bound.
    let t = Instant::now();
    let mut acked_after_death = 0u64;
    let r = loop {
        match block_on(qp.write(at, &8u64.to_le_bytes())) {
            Ok(()) => acked_after_death += 1,
            Err(e) => break e,
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "one-sided writes never failed"
        );
    };
    let waited = t.elapsed();
    assert!(matches!(r, FabricError::RetryExceeded { .. }), "{r:?}");
    // A NIC reports a dead responder after its ack timeout (hundreds of ms to seconds); the
    // watchdog looks every 2 ms, so 1 s leaves a loaded machine room to schedule it.
    assert!(waited < Duration::from_secs(1), "noticed after {waited:?}");
    eprintln!("dead memnode noticed after {waited:?} ({acked_after_death} writes acknowledged)");
    // And the queue pair stays broken.
    assert!(block_on(qp.read(at, &mut [0u8; 8])).is_err());
}

#[test]
fn listen_never_deletes_what_is_not_a_stale_socket() {
    // A regular file survives.
    let file = sock("regular");
    std::fs::write(&file, b"precious").unwrap();
    let node = SoftMemoryNode::create(small_node()).unwrap();
    let e = control::listen(&node, &file)
        .err()
        .expect("listened over a regular file");
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"precious");
    std::fs::remove_file(&file).unwrap();
    // A directory is named in the error.
    let dir = std::env::temp_dir();
    let e = control::listen(&node, &dir)
        .err()
        .expect("listened on a directory");
    assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
    // A live memnode's socket is not taken over: the second refuses, the first still serves.
    let path = sock("twice");
    let first = control::listen(&node, &path).unwrap();
    let other = SoftMemoryNode::create(small_node()).unwrap();
    let e = control::listen(&other, &path)
        .err()
        .expect("took over a live socket");
    assert!(e.to_string().contains("already listening"), "{e}");
    let qp = control::connect(&path).unwrap();
    block_on(qp.read(GlobalAddr::new(0, 64), &mut [0u8; 8])).unwrap();
    drop(qp);
    drop(first);
    assert!(
        !path.exists(),
        "the first node's socket file is removed when it stops"
    );
    // A stale socket (nobody listening) is replaced.
    let stale = sock("stale");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let _l2 = control::listen(&other, &stale).expect("a stale socket is replaced");
    // The socket is private by default.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&stale).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn the_hello_names_the_service_and_the_cap_refuses_clearly() {
    let path = sock("cap");
    let node = SoftMemoryNode::create(small_node()).unwrap();
    let _l = control::listen_with(
        &node,
        &path,
        control::ListenOptions {
            max_connections: 2,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(control::info(&path).unwrap().service_name(), "echo");
    let _a = control::connect(&path).unwrap();
    let _b = control::connect(&path).unwrap();
    let e = control::connect(&path)
        .err()
        .expect("a third connection past a cap of 2");
    assert!(e.to_string().contains("connection cap of 2 reached"), "{e}");
}

#[test]
fn another_user_cannot_revoke_the_key() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot become another user to try; skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("remora-test-{}-uid", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = dir.join("node.sock");
    let node = SoftMemoryNode::create(small_node()).unwrap();
    let _l = control::listen_with(
        &node,
        &path,
        control::ListenOptions {
            mode: 0o666,
            ..Default::default()
        },
    )
    .unwrap();
    let key = control::info(&path).unwrap().key;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, "foreign-revoke")
        .env("REMORA_SOCK", path.display().to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("REFUSED") && text.contains("may not revoke"),
        "{text}"
    );
    assert_eq!(control::info(&path).unwrap().key, key, "the key changed");
    // The owner may.
    control::revoke(&path).unwrap();
    assert_ne!(control::info(&path).unwrap().key, key);
}

/// Linearizability across two client processes: each runs `LIN_COROS` clients on shared hot
/// keys, stamps its events with `CLOCK_MONOTONIC`, and the parent merges and checks them.
fn lin_two_processes(index: &str) {
    use remora::core::lincheck::{CheckConfig, Event, History, Op, Outcome, PENDING, check};
    let path = sock(&format!("lin-{index}"));
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
    assert!(
        a0 < b1 && b0 < a1,
        "the two processes did not run at the same time"
    );
    let r = check(&h, &CheckConfig::new(11));
    println!("{index} across two processes: {r}");
    assert!(r.is_ok(), "{index}: {r}");
}

#[test]
fn smart_is_linearizable_across_two_client_processes() {
    lin_two_processes("smart");
}

#[test]
fn sherman_is_linearizable_across_two_client_processes() {
    lin_two_processes("sherman");
}

// ---- Durable memory nodes: SIGKILL and restart on the same file (issue 11). ----

const DURABLE_KEYS: u64 = 48;

fn durable_service() -> String {
    std::env::var("REMORA_SERVICE").unwrap()
}

/// A memory node on `REMORA_FILE` running the CANRT or Erda service until it is killed; a
/// restart on an existing region runs the service's recovery first and prints how long it took.
fn durable_node(path: &Path) {
    use remora::core::server::Handler;
    use remora::poller::soft::Backing;
    let file = PathBuf::from(std::env::var("REMORA_FILE").unwrap());
    let handler: Box<dyn Handler + Send> = match durable_service().as_str() {
        "canrt" => Box::new(remora::core::canrt::CanrtServer::new()),
        _ => Box::new(remora::core::erda::ErdaServer::new(
            remora::core::erda::ErdaConfig::small(),
        )),
    };
    let t = Instant::now();
    let (node, opened) = SoftMemoryNode::create_backed(
        NodeConfig {
            region_len: 32 << 20,
            chunk_size: 256 << 10,
            ..small_node()
        },
        handler,
        &Backing::File {
            path: file,
            dax: false,
        },
    )
    .unwrap();
    if opened.restarted {
        println!(
            "RECOVERED {} us: {}",
            t.elapsed().as_micros(),
            opened.recovery.replace('\n', " ")
        );
    }
    let _l = control::listen(&node, path).unwrap();
    node.serve_until(
        &AtomicBool::new(false),
        Some(Instant::now() + Duration::from_secs(120)),
    );
}

/// Writes key `seq % DURABLE_KEYS` = `seq` for seq = 1, 2, ...: prints `TRY key seq` before
/// each write and `ACK key seq` after it is acknowledged; when the node dies, reconnects
/// (the node comes back on the same file) and goes on, until `REMORA_STOP` exists.
fn durable_writer(path: &Path) {
    use std::io::Write as _;
    let stop = PathBuf::from(std::env::var("REMORA_STOP").unwrap());
    let service = durable_service();
    let mut seq = 1u64;
    // The log goes to a file: a pipe nobody reads until the end would fill and stall us.
    let mut out = std::fs::File::create(std::env::var("REMORA_LOG").unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !stop.exists() && Instant::now() < deadline {
        let Ok(ep) = control::connect_all(&[path.to_path_buf()]) else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        macro_rules! write_until_error {
            ($idx:expr) => {{
                let idx = $idx;
                let _ = writeln!(out, "CONNECTED {seq}");
                while !stop.exists() {
                    let key = seq % DURABLE_KEYS;
                    let _ = writeln!(out, "TRY {key} {seq}");
                    let _ = out.flush();
                    let t = Instant::now();
                    if let Err(e) = block_on(remora::core::index::KvIndex::upsert(
                        &idx,
                        &key.to_be_bytes(),
                        &seq.to_le_bytes(),
                    )) {
                        let _ = writeln!(out, "ERR after {:?}: {e}", t.elapsed());
                        break;
                    }
                    if t.elapsed() > Duration::from_millis(10) {
                        let _ = writeln!(out, "SLOW {:?} for key {key} seq {seq}", t.elapsed());
                    }
                    let _ = writeln!(out, "ACK {key} {seq}");
                    let _ = out.flush();
                    seq += 1;
                }
            }};
        }
        if service == "canrt" {
            match block_on(remora::core::canrt::Canrt::open(
                &ep,
                remora::core::canrt::CanrtConfig::new(0),
            )) {
                Ok(i) => write_until_error!(i),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        } else {
            match block_on(remora::core::erda::Erda::open(
                &ep,
                remora::core::erda::ErdaClientConfig::default(),
            )) {
                Ok(i) => write_until_error!(i),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

/// SIGKILLs of the memory node per run.
const KILLS: usize = 20;

/// The node is killed with SIGKILL `KILLS` times mid-write and restarted on its file; every
/// restart runs the service's recovery, the writer reconnects and goes on, and afterwards
/// every key holds its last acknowledged value or the newer one that was in flight.
fn durable_kill_restart(service: &str) {
    let dir = std::env::temp_dir().join(format!("remora-durable-{}-{service}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (file, sock, stop) = (dir.join("region"), dir.join("node.sock"), dir.join("stop"));
    let log = dir.join("writer.log");
    let env = vec![
        ("REMORA_LOG", log.display().to_string()),
        ("REMORA_SOCK", sock.display().to_string()),
        ("REMORA_FILE", file.display().to_string()),
        ("REMORA_SERVICE", service.to_string()),
        ("REMORA_STOP", stop.display().to_string()),
    ];
    let start_node = || {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD, "durable-node")
            .stdout(std::process::Stdio::piped());
        for (k, v) in &env {
            c.env(k, v);
        }
        let kid = c.spawn().unwrap();
        wait_for_memnode(&sock);
        kid
    };
    let mut node = start_node();
    let mut writer = Command::new(std::env::current_exe().unwrap());
    writer
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, "durable-writer")
        .stdout(std::process::Stdio::piped());
    for (k, v) in &env {
        writer.env(k, v);
    }
    let writer = writer.spawn().unwrap();
    let mut rng = 0x2545_F491_4F6C_DD1Du64 ^ std::process::id() as u64;
    let mut recoveries = Vec::new();
    let mut collect = |kid: std::process::Child| {
        let out = kid.wait_with_output().unwrap();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(at) = l.find("RECOVERED ") {
                recoveries.push(l[at..].to_string());
            }
        }
    };
    for _ in 0..KILLS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(40 + rng % 120));
        node.kill().unwrap();
        collect(node);
        node = start_node();
    }
    std::thread::sleep(Duration::from_millis(100));
    std::fs::write(&stop, b"").unwrap();
    assert!(writer.wait_with_output().unwrap().status.success());
    node.kill().unwrap();
    collect(node);
    let text = std::fs::read_to_string(&log).unwrap();
    // The writer's log: last acknowledged and last tried sequence per key.
    let mut acked = std::collections::BTreeMap::<u64, u64>::new();
    let mut tried = std::collections::BTreeMap::<u64, u64>::new();
    for l in text.lines() {
        let Some(at) = l.find("ACK ").or_else(|| l.find("TRY ")) else {
            continue;
        };
        let f: Vec<u64> = l[at + 4..]
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() != 2 {
            continue;
        }
        let m = if l[at..].starts_with("ACK") {
            &mut acked
        } else {
            &mut tried
        };
        m.insert(f[0], f[1]);
    }
    let writes: u64 = acked.values().max().copied().unwrap_or(0);
    let connects = text.matches("CONNECTED").count();
    let slow: Vec<&str> = text.lines().filter(|l| l.starts_with("SLOW")).collect();
    let errs = text.lines().filter(|l| l.starts_with("ERR")).count();
    println!(
        "{service}: the writer reconnected {} times after {errs} errors; {} writes took over 10 \
         ms: {slow:?}",
        connects.saturating_sub(1),
        slow.len()
    );
    // Every restart must be survived: the writer comes back after (nearly) every kill.
    assert!(
        connects > KILLS / 2,
        "{service}: the writer reconnected only {connects} times"
    );
    assert!(writes > 200, "{service}: only {writes} acknowledged writes");
    // A last restart, then every key is read back by a fresh client.
    let node = start_node();
    let ep = control::connect_all(std::slice::from_ref(&sock)).unwrap();
    let mut buf = [0u8; 64];
    // One Erda session per connection (issue 12): one handle reads every key.
    let erda = (service != "canrt").then(|| {
        block_on(remora::core::erda::Erda::open(
            &ep,
            remora::core::erda::ErdaClientConfig::default(),
        ))
        .unwrap()
    });
    let mut read = |k: u64| -> Option<u64> {
        let got = if service == "canrt" {
            let i = block_on(remora::core::canrt::Canrt::open(
                &ep,
                remora::core::canrt::CanrtConfig::new(0),
            ))
            .unwrap();
            block_on(remora::core::index::KvIndex::get(
                &i,
                &k.to_be_bytes(),
                &mut buf,
            ))
            .unwrap()
        } else {
            let i = erda.as_ref().expect("opened above");
            block_on(remora::core::index::KvIndex::get(
                i,
                &k.to_be_bytes(),
                &mut buf,
            ))
            .unwrap()
        };
        got.map(|n| u64::from_le_bytes(buf[..n.min(8)].try_into().unwrap_or([0; 8])))
    };
    let mut lost = Vec::new();
    for (&k, &a) in &acked {
        let t = tried.get(&k).copied().unwrap_or(a);
        // The last acknowledged value, or a newer one of this key that was in flight.
        match read(k) {
            Some(v) if v == a || (v > a && v <= t && v % DURABLE_KEYS == k) => {}
            other => lost.push((k, a, t, other)),
        }
    }
    drop(erda);
    drop(ep);
    let mut node = node;
    let _ = node.kill();
    collect(node);
    let _ = std::fs::remove_dir_all(&dir);
    let mut us: Vec<u64> = recoveries
        .iter()
        .filter_map(|r| r.split_whitespace().nth(1)?.parse().ok())
        .collect();
    us.sort_unstable();
    println!(
        "{service}: {writes} acknowledged writes over {KILLS} SIGKILLs, none lost; {} \
         recoveries, p50 {} us, max {} us; last: {}",
        recoveries.len(),
        us.get(us.len() / 2).copied().unwrap_or(0),
        us.last().copied().unwrap_or(0),
        recoveries.last().map_or("", |r| r.as_str())
    );
    assert!(
        lost.is_empty(),
        "{service}: lost acknowledged writes (key, acked, tried, found): {lost:?}"
    );
    assert_eq!(
        recoveries.len(),
        KILLS + 1,
        "{service}: a restart did not recover"
    );
}

#[test]
fn canrt_on_a_file_survives_sigkill_and_restart() {
    durable_kill_restart("canrt");
}

#[test]
fn erda_on_a_file_survives_sigkill_and_restart() {
    durable_kill_restart("erda");
}

//! End-to-end tests of the soft fabric across processes: a memory node in one process,
//! clients in others. Child processes are this test binary re-executed with
//! `REMORA_TEST_CHILD` set (see `child_entry`). Here: the process plumbing, two-process
//! oracle histories, conformance, FAA and tearing; linearizability across processes in
//! `soft_processes/lin.rs`, bad input and dead nodes in `soft_processes/refusals.rs`,
//! durable nodes killed and restarted in `soft_processes/durable.rs`.
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

#[path = "soft_processes/durable.rs"]
mod durable;
#[path = "soft_processes/lin.rs"]
mod lin;
#[path = "soft_processes/refusals.rs"]
mod refusals;
use durable::{durable_node, durable_writer};
use lin::lin_child;

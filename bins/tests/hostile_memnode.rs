//! Hostile clients against a real `remora memnode --fabric soft` process, one per service:
//! an honest client stores keys (or echoes), a hostile client then sends random bytes,
//! truncated and oversized copies of a greeting, floods of SENDs it never reads replies of,
//! and WRITE_WITH_IMMs of no bytes with random immediates to random in-range offsets,
//! reconnecting whenever the node drops it. Afterwards the node process is still alive, a
//! fresh honest client reads every key back intact, and the node still serves new clients.
//! Deterministic messages (seeded); `HOSTILE_MSGS=n` per service (default 400).
use remora::core::GlobalAddr;
use remora::core::block_on::block_on;
use remora::core::canrt::{Canrt, CanrtConfig};
use remora::core::erda::baseline::{Baseline, Scheme};
use remora::core::erda::{Erda, ErdaClientConfig};
use remora::core::fabric::{Endpoint, Op, QueuePair};
use remora::core::index::KvIndex;
use remora::core::wort::Wort;
use remora::poller::soft::SoftEndpoint;
use remora::poller::soft::control;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn memnode(service: &str) -> (Kid, PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "remora-hostile-{}-{service}.sock",
        std::process::id()
    ));
    let kid = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["memnode", "--listen", path.to_str().unwrap()])
        .args([
            "--service",
            service,
            "--region-mib",
            "32",
            "--chunk-kib",
            "256",
        ])
        .args(["--seconds", "120"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting remora memnode");
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "memnode did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (Kid(kid), path)
}

fn connect(path: &Path) -> SoftEndpoint {
    control::connect_all(&[path.to_path_buf()]).expect("connecting to the memnode")
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// The hostile client: `msgs` messages, reconnecting when dropped. Returns (sent, reconnects).
fn hostile(path: &Path, seed: u64, msgs: u64) -> (u64, u64) {
    let mut rng = Rng(seed);
    let mut ep = connect(path);
    let (mut sent, mut reconnects) = (0, 0);
    let region_len = 32u64 << 20;
    while sent < msgs {
        if ep.qp(0).unwrap().is_broken() {
            ep = connect(path);
            reconnects += 1;
        }
        let qp = ep.qp(0).unwrap();
        let max = qp.max_message();
        let mut buf = vec![0u8; max];
        let r = match rng.below(5) {
            0 | 1 => {
                let n = rng.below(max as u64 + 1) as usize;
                let m: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                sent += 1;
                block_on(qp.send(&m))
            }
            2 => {
                // A greeting-like prefix (the WORT hello is 8 bytes), then junk.
                let mut m = b"WORTHELO".to_vec();
                m.truncate(rng.below(9) as usize);
                m.extend((0..rng.below(64)).map(|_| rng.next() as u8));
                sent += 1;
                block_on(qp.send(&m))
            }
            3 => {
                let ms: Vec<Vec<u8>> = (0..16 + rng.below(48))
                    .map(|_| (0..rng.below(64)).map(|_| rng.next() as u8).collect())
                    .collect();
                let mut ops: Vec<Op> = ms.iter().map(|m| Op::Send { local: m }).collect();
                sent += ops.len() as u64;
                block_on(qp.post(&mut ops))
            }
            _ => {
                let mut ops = [Op::WriteImm {
                    remote: GlobalAddr::new(0, rng.below(region_len / 8) * 8),
                    local: &[],
                    imm: rng.next() as u32,
                }];
                sent += 1;
                block_on(qp.post(&mut ops))
            }
        };
        let _ = r;
        while let Ok(Some(_)) = qp.try_recv(&mut buf) {}
    }
    (sent, reconnects)
}

fn key(i: u64) -> [u8; 8] {
    (7u64 << 40 | i).to_be_bytes()
}

const KEYS: u64 = 200;

/// Stores KEYS keys honestly, attacks, then reads them back through a fresh client.
/// (A macro: each service's handle borrows its endpoint.)
macro_rules! kv_campaign {
    ($service:expr, |$ep:ident| $open:expr) => {{
        let service: &str = $service;
        let msgs = std::env::var("HOSTILE_MSGS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(400);
        let (mut kid, path) = memnode(service);
        let ep = connect(&path);
        let honest = {
            let $ep = &ep;
            $open
        };
        for i in 0..KEYS {
            block_on(honest.upsert(&key(i), &(i * 3).to_le_bytes())).unwrap();
        }
        let (sent, reconnects) = std::thread::scope(|s| {
            let h = s.spawn(|| hostile(&path, 0x5eed ^ service.len() as u64, msgs));
            // Honest traffic alongside: updates of half the keys.
            for i in (0..KEYS).step_by(2) {
                block_on(honest.upsert(&key(i), &(i * 5).to_le_bytes())).unwrap();
            }
            h.join().expect("hostile client")
        });
        println!("{service}: hostile sent {sent} messages, reconnected {reconnects} times");
        assert!(
            kid.0.try_wait().unwrap().is_none(),
            "{service}: the memnode died under hostile clients"
        );
        let ep2 = connect(&path);
        let fresh = {
            let $ep = &ep2;
            $open
        };
        let mut out = [0u8; 64];
        for i in 0..KEYS {
            let want = if i % 2 == 0 { i * 5 } else { i * 3 };
            let n = block_on(fresh.get(&key(i), &mut out))
                .unwrap()
                .unwrap_or_else(|| panic!("{service}: key {i} lost"));
            assert_eq!(out[..n], want.to_le_bytes(), "{service}: key {i} corrupted");
        }
    }};
}

#[test]
fn wort_memnode_survives_hostile_clients() {
    kv_campaign!("wort", |ep| block_on(Wort::open(ep, Default::default()))
        .unwrap());
}

#[test]
fn canrt_memnode_survives_hostile_clients() {
    kv_campaign!("canrt", |ep| {
        block_on(Canrt::open(ep, CanrtConfig::default())).unwrap()
    });
}

#[test]
fn erda_memnode_survives_hostile_clients() {
    kv_campaign!("erda", |ep| {
        block_on(Erda::open(ep, ErdaClientConfig::default())).unwrap()
    });
}

#[test]
fn erda_redo_memnode_survives_hostile_clients() {
    kv_campaign!("erda-redo", |ep| {
        block_on(Baseline::open(
            ep,
            Scheme::Redo,
            ErdaClientConfig::default(),
        ))
        .unwrap()
    });
}

#[test]
fn echo_memnode_survives_hostile_clients() {
    let (mut kid, path) = memnode("echo");
    let (sent, _) = hostile(&path, 9, 400);
    assert!(sent >= 400);
    assert!(kid.0.try_wait().unwrap().is_none(), "echo memnode died");
    let ep = connect(&path);
    let qp = ep.qp(0).unwrap();
    let mut buf = vec![0u8; qp.max_message()];
    block_on(qp.send(b"still here")).unwrap();
    let r = block_on(qp.recv(&mut buf)).unwrap();
    assert_eq!(&buf[..r.len as usize], b"still here");
}

#[test]
fn catfish_memnode_survives_hostile_clients() {
    use remora::core::catfish::{CatfishClient, Mode, Rect, TreeKind};
    let (mut kid, path) = memnode("catfish");
    let ep = connect(&path);
    let qp = ep.qp(0).unwrap();
    let mut cf = block_on(CatfishClient::create_tree(qp, 1, 8, TreeKind::RStar)).unwrap();
    let rect = |i: u64| {
        let (x, y) = ((i * 37 % 3000) as i32, (i * 91 % 3000) as i32);
        Rect::new(x, y, x + 3, y + 3).unwrap()
    };
    for i in 0..150 {
        block_on(cf.insert(qp, rect(i), 1000 + i)).unwrap();
    }
    let (sent, reconnects) = hostile(&path, 0xca7, 400);
    println!("catfish: hostile sent {sent} messages, reconnected {reconnects} times");
    assert!(kid.0.try_wait().unwrap().is_none(), "catfish memnode died");
    let ep2 = connect(&path);
    let qp2 = ep2.qp(0).unwrap();
    let mut fresh = block_on(CatfishClient::open(qp2)).unwrap();
    let mut out = Vec::new();
    for i in 0..150 {
        for mode in [Mode::Messaging, Mode::Offload] {
            out.clear();
            block_on(fresh.search(qp2, rect(i), mode, &mut out)).unwrap();
            assert!(
                out.iter().any(|e| e.ptr == 1000 + i && e.rect == rect(i)),
                "catfish: entry {i} lost ({mode:?})"
            );
        }
    }
}

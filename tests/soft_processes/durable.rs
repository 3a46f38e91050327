//! Durable memory nodes: SIGKILL and restart on the same file, the node and writer children
//! and the parent that kills and checks them.
use super::*;

const DURABLE_KEYS: u64 = 48;

fn durable_service() -> String {
    std::env::var("REMORA_SERVICE").unwrap()
}

/// A memory node on `REMORA_FILE` running the CANRT or Erda service until it is killed; a
/// restart on an existing region runs the service's recovery first and prints how long it took.
pub(super) fn durable_node(path: &Path) {
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
pub(super) fn durable_writer(path: &Path) {
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

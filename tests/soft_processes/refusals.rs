//! Bad input and dead peers across processes: garbage connections, out-of-range verbs, a dead
//! memory node, stale sockets, the hello and the client cap, a foreign user's revoke.
use super::*;

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

//! `remora memnode` processes and what runs against them: `check`, `perf`, restarts on a file,
//! pmem refusals, other services' clients, a node dying under `check`.
use super::*;

#[test]
fn check_passes_against_a_memnode_process() {
    let (_m, path) = memnode("check");
    let out = remora(&[
        "check",
        "--fabric",
        "soft",
        "--connect",
        path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("PASS torn_reads_are_observable"),
        "{stdout}"
    );
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

#[test]
fn perf_against_a_memnode_process_writes_json() {
    let (_m, path) = memnode("perf");
    let json = std::env::temp_dir().join(format!("remora-cli-{}.json", std::process::id()));
    let out = remora(&[
        "perf",
        "--connect",
        path.to_str().unwrap(),
        "--verbs",
        "read,faa,send",
        "--sizes",
        "64",
        "--coroutines",
        "4",
        "--seconds",
        "0.2",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("READ") && stdout.contains("FETCH_AND_ADD"),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["ops"].as_u64().unwrap() > 0, "{l}");
        assert!(v["latency"]["p50_ns"].as_f64().unwrap() > 0.0, "{l}");
        assert!(v["per_op"]["round_trips"].as_f64().unwrap() >= 1.0, "{l}");
    }
}

#[test]
fn memnode_listen_leaves_files_and_live_memnodes_alone() {
    let regular = std::env::temp_dir().join(format!("remora-cli-{}-regular", std::process::id()));
    std::fs::write(&regular, b"keep me").unwrap();
    let out = remora(&[
        "memnode",
        "--listen",
        regular.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not a socket"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&regular).unwrap(), b"keep me");
    std::fs::remove_file(&regular).unwrap();
    // A second memnode on a live memnode's path refuses; the first keeps serving.
    let (_m, path) = memnode("twice");
    let out = remora(&[
        "memnode",
        "--listen",
        path.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("already listening"),
        "{}",
        stderr(&out)
    );
    let out = remora(&["check", "--connect", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn memnode_on_a_file_restarts_on_it_and_refuses_a_second_user() {
    let dir = std::env::temp_dir();
    let id = std::process::id();
    let file = dir.join(format!("remora-cli-{id}-region.img"));
    let sock = dir.join(format!("remora-cli-{id}-file.sock"));
    let _ = std::fs::remove_file(&file);
    let start = |secs: &str| {
        Command::new(env!("CARGO_BIN_EXE_remora"))
            .args(["memnode", "--listen", sock.to_str().unwrap(), "--file"])
            .arg(&file)
            .args(["--region-mib", "16", "--chunk-kib", "64", "--seconds", secs])
            .output()
            .unwrap()
    };
    let first = start("0.5");
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(!String::from_utf8_lossy(&first.stdout).contains("restarted"));
    let again = start("0.5");
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("restarted on its region"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    // The wrong size, a file that is not a region, and a file in use are clear errors.
    let out = remora(&[
        "memnode",
        "--listen",
        "/tmp/x.sock",
        "--file",
        file.to_str().unwrap(),
        "--region-mib",
        "32",
        "--seconds",
        "1",
    ]);
    assert!(
        stderr(&out).contains("holds a region of 16777216 bytes"),
        "{}",
        stderr(&out)
    );
    let junk = dir.join(format!("remora-cli-{id}-junk.img"));
    std::fs::write(&junk, vec![7u8; 1 << 20]).unwrap();
    let out = remora(&[
        "memnode",
        "--listen",
        "/tmp/y.sock",
        "--file",
        junk.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(
        stderr(&out).contains("does not hold a remora region"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_file(&junk);
    let _holder = Kid(Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["memnode", "--listen", sock.to_str().unwrap(), "--file"])
        .arg(&file)
        .args(["--seconds", "20"])
        .spawn()
        .unwrap());
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let other = dir.join(format!("remora-cli-{id}-other.sock"));
    let out = remora(&[
        "memnode",
        "--listen",
        other.to_str().unwrap(),
        "--file",
        file.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(
        stderr(&out).contains("in use by another memory node"),
        "{}",
        stderr(&out)
    );
    drop(_holder);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn pmem_refuses_a_file_that_is_not_on_dax() {
    let f = std::env::temp_dir().join(format!("remora-cli-{}-pmem.img", std::process::id()));
    let _ = std::fs::remove_file(&f);
    let out = remora(&[
        "memnode",
        "--listen",
        "/tmp/z.sock",
        "--pmem",
        f.to_str().unwrap(),
        "--region-mib",
        "16",
        "--seconds",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not on a DAX filesystem"),
        "{}",
        stderr(&out)
    );
    assert!(!f.exists(), "a refused --pmem file is left behind");
}

#[test]
fn check_leaves_a_live_memnode_and_its_clients_alone() {
    let (_m, path) = memnode("harmless");
    // A client connected before the check keeps working through and after it.
    let qp = remora::poller::soft::control::connect(&path).unwrap();
    let at = remora::core::GlobalAddr::new(0, 1 << 20);
    remora::core::block_on::block_on(remora::core::QueuePair::write(&qp, at, &[5u8; 8])).unwrap();
    let out = remora(&["check", "--connect", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(stdout.contains("SKIP revoked_key_is_refused"), "{stdout}");
    assert!(stdout.contains(" 0 failed, 1 skipped"), "{stdout}");
    let mut b = [0u8; 8];
    remora::core::block_on::block_on(remora::core::QueuePair::read(&qp, at, &mut b))
        .expect("the check broke a concurrent client");
    assert_eq!(b, [5u8; 8]);
}

#[test]
fn a_client_of_another_service_hears_both_names() {
    let dir = std::env::temp_dir();
    let sock = dir.join(format!("remora-cli-{}-names.sock", std::process::id()));
    let _m = Kid(Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "memnode",
            "--listen",
            sock.to_str().unwrap(),
            "--service",
            "erda",
        ])
        .args(["--region-mib", "64", "--seconds", "60"])
        .spawn()
        .unwrap());
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = remora(&["check", "--connect", sock.to_str().unwrap()]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("`erda` service") && e.contains("`echo`"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    let out = remora(&[
        "bench",
        "--index",
        "canrt",
        "--connect",
        sock.to_str().unwrap(),
        "--records",
        "10",
    ]);
    let e = stderr(&out);
    assert!(e.contains("`erda` service") && e.contains("`canrt`"), "{e}");
}

#[test]
fn check_refuses_flags_it_would_ignore_and_memnode_offers_no_sim() {
    for (args, what) in [
        (&["check", "--verbs", "send"][..], "--verbs"),
        (&["check", "--seconds", "5"], "--seconds"),
        (&["check", "--threads", "2"], "--threads"),
        (&["check", "--allow-revoke"], "--allow-revoke"),
        (
            &["check", "--linearizability", "--connect", "/tmp/x.sock"],
            "--connect",
        ),
    ] {
        let out = remora(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr(&out).contains(what), "{args:?}: {}", stderr(&out));
    }
    let out = remora(&["memnode", "--fabric", "sim"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("invalid value 'sim'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_with_allow_revoke_runs_the_revocation_on_a_private_memnode() {
    let (_m, path) = memnode("revoke");
    let out = remora(&[
        "check",
        "--connect",
        path.to_str().unwrap(),
        "--allow-revoke",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(stdout.contains("PASS revoked_key_is_refused"), "{stdout}");
    assert!(!stdout.contains("SKIP"), "{stdout}");
}

#[test]
fn check_against_a_memnode_that_dies_ends_with_an_error_not_a_panic_or_hang() {
    let (mut m, path) = memnode("dies");
    let check = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["check", "--connect", path.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let _ = m.0.kill();
    let _ = m.0.wait();
    let t = Instant::now();
    let out = check.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "check hung after the memnode died"
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("panicked at"), "{text}");
    assert!(!text.contains("stack backtrace"), "{text}");
    assert!(!text.contains("a scoped thread panicked"), "{text}");
}

#[test]
fn a_memnode_serves_erda_and_its_baselines_to_bench() {
    for (service, other) in [
        ("erda", "erda-redo"),
        ("erda-redo", "erda-raw"),
        ("erda-raw", "erda-redo"),
    ] {
        let sock = std::env::temp_dir().join(format!(
            "remora-cli-{}-svc-{service}.sock",
            std::process::id()
        ));
        let _m = Kid(Command::new(env!("CARGO_BIN_EXE_remora"))
            .args(["memnode", "--listen", sock.to_str().unwrap()])
            .args([
                "--service",
                service,
                "--region-mib",
                "64",
                "--seconds",
                "60",
            ])
            .spawn()
            .unwrap());
        let t = Instant::now();
        while !sock.exists() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let run = |index: &str| {
            remora(&[
                "bench",
                "--connect",
                sock.to_str().unwrap(),
                "--index",
                index,
                "--workload",
                "a",
                "--records",
                "200",
                "--operations",
                "500",
                "--threads",
                "1",
                "--value-size",
                "1024",
                "--quiet",
            ])
        };
        let out = run(service);
        assert!(out.status.success(), "{service}: {}", stderr(&out));
        // The other baseline is refused by name, not run against the wrong server.
        let out = run(other);
        assert!(!out.status.success(), "{other} ran against {service}");
        assert!(stderr(&out).contains("service"), "{}", stderr(&out));
    }
}

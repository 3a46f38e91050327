//! `remora` end to end for Catfish's server side: a multi-threaded memnode killed under a
//! running bench (the bench ends with an error, never hangs), and the TCP/IP baseline.
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn remora() -> Command {
    Command::new(env!("CARGO_BIN_EXE_remora"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn catfish_memnode(name: &str) -> (Kid, PathBuf) {
    let path = std::env::temp_dir().join(format!("remora-cf-{}-{name}.sock", std::process::id()));
    let kid = remora()
        .args(["memnode", "--listen", path.to_str().unwrap()])
        .args(["--service", "catfish", "--threads", "2"])
        .args([
            "--region-mib",
            "32",
            "--chunk-kib",
            "256",
            "--seconds",
            "120",
        ])
        .stdout(Stdio::null())
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

/// Issue 11: Catfish clients waited forever for a reply when the node died mid-request.
/// Now the bench ends with an error within 15 s of a `kill -9` of its memnode (the soft
/// fabric reports a dead peer, and every reply wait has a deadline), at every moment tried.
#[test]
fn a_catfish_bench_ends_with_an_error_when_its_memnode_is_killed() {
    for (k, first_ms) in [150u64, 400, 900].into_iter().enumerate() {
        let mut ms = first_ms;
        for attempt in 0.. {
            let (mut m, path) = catfish_memnode(&format!("kill{k}-{attempt}"));
            let bench = remora()
                .args([
                    "bench",
                    "--index",
                    "catfish",
                    "--connect",
                    path.to_str().unwrap(),
                ])
                .args(["--mode", "messaging", "--workload", "b", "--records", "300"])
                .args(["--seconds", "60", "--threads", "1", "--no-pin"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(ms));
            let _ = m.0.kill();
            let _ = m.0.wait();
            let t = Instant::now();
            let out = bench.wait_with_output().unwrap();
            let waited = t.elapsed();
            let s = text(&out);
            assert!(
                waited < Duration::from_secs(15),
                "killed at {ms} ms: bench took {waited:?}"
            );
            assert!(
                !out.status.success(),
                "killed at {ms} ms: the bench succeeded: {s}"
            );
            assert!(!s.contains("panicked at"), "{s}");
            // It was running until the kill, and says why it stopped. A kill that came
            // before the bench was connected (`Connection refused`, or the node gone during
            // the handshake: a loaded machine starts the bench late) ended it with a clear
            // error too, but tests nothing more: the same point again, later.
            if !s.contains("memory node 0") && attempt < 5 {
                assert!(
                    s.contains("Connection refused") || s.contains("handshake"),
                    "killed at {ms} ms: {s}"
                );
                ms *= 2;
                continue;
            }
            assert!(s.contains("memory node 0"), "killed at {ms} ms: {s}");
            println!(
                "memnode killed {ms} ms in: bench ended {waited:?} later: {}",
                s.lines().last().unwrap_or("")
            );
            break;
        }
    }
}

#[test]
fn the_tcp_baseline_runs_in_process_and_against_a_tcp_memnode() {
    let out = remora()
        .args([
            "bench",
            "--index",
            "catfish",
            "--mode",
            "tcp",
            "--workload",
            "b",
        ])
        .args([
            "--records",
            "300",
            "--operations",
            "300",
            "--threads",
            "1",
            "--no-pin",
        ])
        .output()
        .unwrap();
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    assert!(s.contains("tcp fanout=30") && s.contains("loopback"), "{s}");
    // A TCP memnode on a free port, and a bench against it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let _m = Kid(remora()
        .args(["memnode", "--service", "catfish", "--tcp-listen", &addr])
        .args(["--region-mib", "16", "--seconds", "120"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap());
    let t = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "tcp memnode did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = remora()
        .args([
            "bench",
            "--index",
            "catfish",
            "--mode",
            "tcp",
            "--tcp-connect",
            &addr,
        ])
        .args(["--workload", "c", "--records", "300", "--operations", "300"])
        .args(["--threads", "2", "--no-pin"])
        .output()
        .unwrap();
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    assert!(s.contains(&format!("TCP server at {addr}")), "{s}");
    // Flags that would be ignored are refused.
    let out = remora()
        .args([
            "bench", "--index", "catfish", "--mode", "tcp", "--fabric", "sim",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out).contains("--mode tcp"));
    let out = remora()
        .args(["memnode", "--tcp-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out).contains("--service catfish"));
}

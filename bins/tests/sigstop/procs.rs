//! The processes of the SIGSTOP tests: a `remora memnode`, client processes (this test binary
//! re-executed to run only `child_entry`, with `SIGSTOP_ROLE` set) whose stdout lines the
//! parent reads with a deadline, and SIGSTOP/SIGCONT with a check that the target really
//! stopped (its state in `/proc/PID/stat`).
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

pub const ROLE: &str = "SIGSTOP_ROLE";

/// Kills the process when the test ends, however it ends (a stopped one too: SIGKILL ends
/// a stopped process).
pub struct Kid(pub Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `remora memnode` on a fresh socket, running `service`, once its socket exists.
pub fn memnode(name: &str, service: &str) -> (Kid, PathBuf) {
    let path =
        std::env::temp_dir().join(format!("remora-sigstop-{}-{name}.sock", std::process::id()));
    let kid = Kid(Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["memnode", "--listen", path.to_str().unwrap()])
        .args([
            "--service",
            service,
            "--region-mib",
            "64",
            "--chunk-kib",
            "256",
        ])
        .args(["--seconds", "300"])
        .stdout(Stdio::null())
        .spawn()
        .expect("starting remora memnode"));
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "memnode did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (kid, path)
}

/// A client process and the lines it prints.
pub struct Client {
    pub kid: Kid,
    lines: Receiver<String>,
    /// Every line seen so far (for failure messages).
    pub seen: Vec<String>,
}

impl Client {
    /// This test binary re-executed as `role`, with `env` set.
    pub fn spawn(role: &str, env: &[(&str, String)]) -> Client {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .stdout(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut kid = Kid(c.spawn().expect("spawning a client process"));
        let out = kid.0.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { return };
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Client {
            kid,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line (from now on) that holds `prefix`, from there on; None if the process closed its
    /// stdout (ended) first. Panics after `within`.
    pub fn line(&mut self, prefix: &str, within: Duration) -> Option<String> {
        let t = Instant::now();
        loop {
            let left = within.saturating_sub(t.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    // The harness's `test child_entry ... ` may open the line.
                    if let Some(at) = l.find(prefix) {
                        return Some(l[at..].to_string());
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!("no `{prefix}` line within {within:?}; seen {:?}", self.seen)
                }
            }
        }
    }

    /// Waits for the process to end, at most `within`; its exit code.
    pub fn wait(&mut self, within: Duration) -> Option<i32> {
        let t = Instant::now();
        loop {
            if let Some(s) = self.kid.0.try_wait().unwrap() {
                // The rest of what it printed.
                while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push(l);
                }
                return s.code();
            }
            assert!(
                t.elapsed() < within,
                "client still running after {within:?}; printed {:?}",
                self.seen
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A client that stops itself inside a wait: once it has printed `ready` (within
/// `ready_within`) and stopped, it is left stopped for `stopped_for`, then resumed; it must
/// end with exit code 0 having printed `DONE`. Returns everything it printed.
pub fn stopped_then_resumed(
    a: &mut Client,
    ready: &str,
    ready_within: Duration,
    stopped_for: Duration,
) -> String {
    let pid = a.kid.0.id();
    assert!(
        a.line(ready, ready_within).is_some(),
        "the client ended before its stop ({ready}): {:?}",
        a.seen
    );
    wait_stopped(pid);
    std::thread::sleep(stopped_for);
    assert_eq!(state(pid), 'T', "the client ran before SIGCONT");
    resume(pid);
    let code = a.wait(Duration::from_secs(120));
    let text = a.seen.join("\n");
    println!("the resumed client ended with {code:?}: {text}");
    assert_eq!(code, Some(0), "the resumed client failed: {text}");
    assert!(text.contains("DONE"), "{text}");
    text
}

/// Sends `sig` to process `pid` (one this test spawned and has not reaped).
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) only sends a signal; `pid` is a child of this process that has not been
    // reaped, so the id names it and no other process.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// Process `pid`'s state letter in `/proc/PID/stat` (`T`: stopped by a signal).
pub fn state(pid: u32) -> char {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    s.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .unwrap_or('?')
}

/// Waits until process `pid` is stopped (by its own SIGSTOP or ours).
pub fn wait_stopped(pid: u32) {
    let t = Instant::now();
    while state(pid) != 'T' {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "process {pid} did not stop (state {})",
            state(pid)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SIGSTOPs `pid` and waits until it is stopped.
pub fn stop(pid: u32) {
    signal(pid, libc::SIGSTOP);
    wait_stopped(pid);
}

/// SIGCONTs `pid` and waits until it runs again.
pub fn resume(pid: u32) {
    signal(pid, libc::SIGCONT);
    let t = Instant::now();
    while state(pid) == 'T' {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "process {pid} did not resume"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

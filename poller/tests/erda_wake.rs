//! The CPU a blocking server thread spends per wake, on this host: the cost the Erda
//! authors' servers pay per completion event, which the sim charges as the model's
//! `server_wake_cpu_ns` (the `erda` profile's value is this figure scaled to the paper's
//! core; `server_wake_ns` is the idle core's wake latency, no CPU).
//!
//! The authors' three servers (Erda/server/server.c, Redo Logging/server.c, Read After
//! Write/server.c) block in `ibv_get_cq_event`, a read() on the completion channel's file
//! descriptor, between completions, and post every reply signalled, so a request costs the
//! poll_cq thread a wake for its receive and one for its reply's send completion. `top`
//! (the paper's CPU measure, seeds/004 §5.4) counts the thread's own time in those
//! syscalls and switches. This test times the woken side of the same cycle with an
//! eventfd in place of the completion channel and prints it:
//!
//! `cargo test --release -p remora-poller --test erda_wake -- --nocapture`
//!
//! It checks that the cycle did block (the woken thread's voluntary context switches), not
//! how long it took.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// This thread's CPU time (the scheduler's exact runtime, user + system: CLOCK_THREAD_CPUTIME_ID,
/// not the tick-sampled rusage times) and its voluntary context switches.
fn thread_usage() -> (Duration, i64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid and writable for the call.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime: {}", std::io::Error::last_os_error());
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is valid and writable for the call; RUSAGE_THREAD reads this thread's.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(r, 0, "getrusage: {}", std::io::Error::last_os_error());
    let cpu = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    (cpu, ru.ru_nvcsw)
}

fn eventfd() -> i32 {
    // SAFETY: plain syscall wrapper; the result is checked.
    let fd = unsafe { libc::eventfd(0, 0) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    fd
}

fn signal(fd: i32) {
    let one = 1u64;
    // SAFETY: writes the 8 bytes of `one`, live for the call, to our own eventfd.
    let n = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    assert_eq!(n, 8, "eventfd write: {}", std::io::Error::last_os_error());
}

fn wait(fd: i32) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into `v`, live and writable for the call, from our own eventfd.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    assert_eq!(n, 8, "eventfd read: {}", std::io::Error::last_os_error());
}

#[test]
fn a_blocking_wake_costs_the_woken_thread_cpu() {
    const CYCLES: i64 = 4000;
    let (to_server, to_client) = (eventfd(), eventfd());
    let started = AtomicBool::new(false);
    let (cpu, switches) = std::thread::scope(|s| {
        let server = s.spawn(|| {
            let (c0, v0) = thread_usage();
            started.store(true, Ordering::Release);
            for _ in 0..CYCLES {
                // Block for the next "completion", then "reply" (one syscall, subtracted
                // below as the eventfd write it is).
                wait(to_server);
                signal(to_client);
            }
            let (c1, v1) = thread_usage();
            (c1 - c0, v1 - v0)
        });
        while !started.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        for _ in 0..CYCLES {
            signal(to_server);
            wait(to_client);
            // Give the server time to block again before the next wake, as a lightly loaded
            // server (the paper's writers sleep 500 µs before each write) does.
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
        }
        server.join().unwrap()
    });
    // One eventfd write + read that never block, for the reply's syscall.
    let scratch = eventfd();
    let (c0, _) = thread_usage();
    for _ in 0..CYCLES {
        signal(scratch);
        wait(scratch);
    }
    let (c1, _) = thread_usage();
    // SAFETY: closing our own descriptors, used no more.
    unsafe {
        libc::close(to_server);
        libc::close(to_client);
        libc::close(scratch);
    }
    let syscall_ns = (c1 - c0).as_nanos() as f64 / CYCLES as f64 / 2.0;
    let cycle_ns = cpu.as_nanos() as f64 / CYCLES as f64 - syscall_ns;
    println!(
        "blocking wake: {cycle_ns:.0} ns of the woken thread's CPU per wake ({syscall_ns:.0} ns \
         per non-blocking eventfd syscall subtracted), {switches} voluntary switches in \
         {CYCLES} wakes"
    );
    // Most wakes found the thread blocked (each is a voluntary switch out of read()).
    assert!(
        switches >= CYCLES / 2,
        "{switches} switches in {CYCLES} wakes"
    );
    assert!(cpu > Duration::ZERO);
}

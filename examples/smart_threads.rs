//! Application threads sharing one SMART handle over an in-process memory node (soft
//! fabric), with blocking calls. Each thread writes its own keys, reads them back and checks
//! every value; the example exits non-zero on a wrong answer and prints the operations/s.
//!
//! `cargo run --release --example smart_threads [-- --threads N --ops N --cores LIST]`
//! (`--cores` as numactl takes them, e.g. `0` or `2-3`: one pinned poller per core; default
//! one unpinned poller). `--direct` runs the same work without the runtime, each thread on
//! its own endpoint and per-thread SMART handle (what `remora bench` does), for comparison.
//! `--idle-spins N`: empty loops a poller spins before it parks.
use remora::core::index::KvIndex;
use remora::core::smart::Smart;
use remora::node::{ComputeNode, CoreList, Error, Index, IndexConfig};
use std::time::Instant;

struct Args {
    threads: u64,
    ops: u64,
    cores: Option<CoreList>,
    direct: bool,
    idle_spins: Option<u32>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        threads: 2,
        ops: 20_000,
        cores: None,
        direct: false,
        idle_spins: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--threads" => a.threads = val()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--ops" => a.ops = val()?.parse().map_err(|e| format!("--ops: {e}"))?,
            "--cores" => a.cores = Some(CoreList::parse(&val()?).map_err(|e| e.to_string())?),
            "--direct" => a.direct = true,
            "--idle-spins" => {
                a.idle_spins = Some(val()?.parse().map_err(|e| format!("--idle-spins: {e}"))?)
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn key(w: u64, i: u64) -> String {
    format!("user{w:02}-{i:08}")
}

fn value(w: u64, i: u64) -> [u8; 8] {
    (w * 1_000_000 + i).to_le_bytes()
}

/// One thread's work through the shared runtime handle.
fn through_runtime(smart: &Index, w: u64, ops: u64) -> Result<(), String> {
    for i in 0..ops {
        let k = key(w, i);
        smart
            .upsert(k.as_bytes(), &value(w, i))
            .wait()
            .map_err(|e| e.to_string())?;
    }
    for i in 0..ops {
        let k = key(w, i);
        match smart.get(k.as_bytes()).wait().map_err(|e| e.to_string())? {
            Some(v) if v == value(w, i) => {}
            other => return Err(format!("{k}: read {other:?}, wrote {:?}", value(w, i))),
        }
    }
    Ok(())
}

/// The same work on this thread's own endpoint and SMART handle, spin-polled.
fn direct(node: &ComputeNode, w: u64, ops: u64) -> Result<(), String> {
    use remora::core::block_on::block_on;
    let IndexConfig::Smart(cfg) = IndexConfig::smart(16) else {
        unreachable!()
    };
    let ep = node
        .memory_node()
        .expect("in-process")
        .endpoint()
        .map_err(|e| e.to_string())?;
    let smart = block_on(Smart::open(&ep, cfg)).map_err(|e| e.to_string())?;
    let mut out = [0u8; 16];
    for i in 0..ops {
        let k = key(w, i);
        block_on(smart.upsert(k.as_bytes(), &value(w, i))).map_err(|e| e.to_string())?;
    }
    for i in 0..ops {
        let k = key(w, i);
        let n = block_on(smart.get(k.as_bytes(), &mut out)).map_err(|e| e.to_string())?;
        if n.map(|n| &out[..n]) != Some(&value(w, i)[..]) {
            return Err(format!("{k}: read {n:?}"));
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let mut builder = ComputeNode::builder().in_process_default();
    if let Some(cores) = &a.cores {
        builder = builder.cores(cores.clone());
    }
    if let Some(n) = a.idle_spins {
        builder = builder.idle_spins(n);
    }
    let node = builder.start()?;
    let smart = node.open(IndexConfig::smart(16))?;

    let t = Instant::now();
    std::thread::scope(|s| -> Result<(), String> {
        let workers: Vec<_> = (0..a.threads)
            .map(|w| {
                let smart = smart.clone(); // a handle is cheap to clone and Send + Sync
                let node = &node;
                s.spawn(move || {
                    if a.direct {
                        direct(node, w, a.ops)
                    } else {
                        through_runtime(&smart, w, a.ops)
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "a worker panicked".to_string())??;
        }
        Ok(())
    })?;
    let secs = t.elapsed().as_secs_f64();
    let total = 2 * a.threads * a.ops;

    // Every thread's keys are there, in order: a bounded scan with an end key.
    let end = key(0, 10);
    let first = smart
        .scan(b"user00-", Some(end.as_bytes()), 100)
        .collect::<Result<Vec<_>, Error>>()?;
    let want: Vec<_> = (0..a.ops.min(10)).map(|i| key(0, i).into_bytes()).collect();
    if first.iter().map(|(k, _)| k).ne(want.iter()) {
        return Err(format!("scan of user00's first keys: {first:?}").into());
    }
    let (pollers, cores) = node.pollers();
    println!(
        "smart_threads: {} app threads, {}: {total} ops (upsert+get, all checked) in {secs:.2} s \
         = {:.0} ops/s",
        a.threads,
        if a.direct {
            "direct per-thread handles (no runtime)".to_string()
        } else if cores.is_empty() {
            format!("{pollers} unpinned poller(s)")
        } else {
            format!("{pollers} poller(s) on cores {cores:?}")
        },
        total as f64 / secs
    );
    Ok(())
}

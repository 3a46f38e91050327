//! Application threads sharing one SMART handle over an in-process memory node (soft
//! fabric), with blocking calls. Each thread writes its own keys, reads them back and checks
//! every value; the example exits non-zero on a wrong answer and prints the operations/s.
//!
//! `cargo run --release --example smart_threads [-- THREADS OPS_PER_THREAD [CORES]]`
//! (CORES as numactl takes them, e.g. `0` or `2-3`: pinned pollers; default one unpinned).
use remora::node::{ComputeNode, CoreList, IndexConfig};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threads: usize = args.first().map_or(Ok(2), |a| a.parse())?;
    let ops: u32 = args.get(1).map_or(Ok(20_000), |a| a.parse())?;
    let mut builder = ComputeNode::builder().in_process_default();
    if let Some(cores) = args.get(2) {
        builder = builder.cores(CoreList::parse(cores)?);
    }
    let node = builder.start()?;
    let smart = node.open(IndexConfig::smart(16))?;

    let t = Instant::now();
    std::thread::scope(|s| -> Result<(), String> {
        let workers: Vec<_> = (0..threads)
            .map(|w| {
                let smart = smart.clone(); // a handle is cheap to clone and Send + Sync
                s.spawn(move || -> Result<(), String> {
                    for i in 0..ops {
                        let key = format!("user{w:02}-{i:08}");
                        let value = (w as u64 * 1_000_000 + i as u64).to_le_bytes();
                        smart
                            .upsert(key.as_bytes(), &value)
                            .wait()
                            .map_err(|e| e.to_string())?;
                    }
                    for i in 0..ops {
                        let key = format!("user{w:02}-{i:08}");
                        let want = (w as u64 * 1_000_000 + i as u64).to_le_bytes();
                        match smart
                            .get(key.as_bytes())
                            .wait()
                            .map_err(|e| e.to_string())?
                        {
                            Some(v) if v == want => {}
                            other => return Err(format!("{key}: read {other:?}, wrote {want:?}")),
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "a worker panicked".to_string())??;
        }
        Ok(())
    })?;
    let secs = t.elapsed().as_secs_f64();
    let total = 2 * threads as u64 * ops as u64;

    // Every key is there, in order, once: a bounded scan with an end key.
    let first: Vec<_> = smart
        .scan(b"user00-", Some(b"user00-00000010"), 100)
        .collect::<Result<_, _>>()?;
    assert_eq!(
        first.len(),
        10.min(ops as usize),
        "scan of user00's first keys"
    );
    let (pollers, cores) = node.pollers();
    println!(
        "smart_threads: {threads} app threads, {pollers} poller(s) {}: {total} ops (upsert+get, \
         all checked) in {secs:.2} s = {:.0} ops/s",
        if cores.is_empty() {
            "unpinned".to_string()
        } else {
            format!("on cores {cores:?}")
        },
        total as f64 / secs
    );
    Ok(())
}

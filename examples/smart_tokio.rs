//! One SMART handle shared by tokio tasks on a multi-thread runtime, over an in-process
//! memory node: operations are awaited (the poller wakes the task), many in flight at once.
//! Exits non-zero on a wrong answer; prints the operations/s.
//!
//! `cargo run --release --example smart_tokio [-- TASKS OPS_PER_TASK]`
use remora::node::{ComputeNode, Error, IndexConfig};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tasks: u32 = args.first().map_or(Ok(16), |a| a.parse())?;
    let ops: u32 = args.get(1).map_or(Ok(2_500), |a| a.parse())?;
    let node = ComputeNode::builder().in_process_default().start()?;
    let smart = node.open(IndexConfig::smart(16))?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let t = Instant::now();
    rt.block_on(async {
        let mut joins = Vec::new();
        for task in 0..tasks {
            let smart = smart.clone();
            joins.push(tokio::spawn(async move {
                for i in 0..ops {
                    let key = format!("task{task:03}-{i:08}");
                    smart.upsert(key.as_bytes(), &i.to_le_bytes()).await?;
                }
                for i in 0..ops {
                    let key = format!("task{task:03}-{i:08}");
                    let got = smart.get(key.as_bytes()).await?;
                    if got.as_deref() != Some(&i.to_le_bytes()[..]) {
                        return Err(Error::Config(format!("{key}: read {got:?}, wrote {i}")));
                    }
                }
                // And a scan, awaited batch by batch.
                let from = format!("task{task:03}-");
                let mut scan = smart.scan(from.as_bytes(), None, ops as usize);
                let mut n = 0u32;
                while let Some(pair) = scan.next_async().await {
                    let (_, v) = pair?;
                    if v != n.to_le_bytes() {
                        return Err(Error::Config(format!("scan: pair {n} has value {v:?}")));
                    }
                    n += 1;
                }
                if n != ops {
                    return Err(Error::Config(format!("scan saw {n} of {ops} keys")));
                }
                Ok::<(), Error>(())
            }));
        }
        for j in joins {
            j.await.map_err(|e| Error::Config(e.to_string()))??;
        }
        Ok::<(), Error>(())
    })?;
    let secs = t.elapsed().as_secs_f64();
    let total = 3 * tasks as u64 * ops as u64;
    println!(
        "smart_tokio: {tasks} tokio tasks on 2 runtime threads, 1 poller: {total} ops \
         (upsert+get+scanned pair, all checked) in {secs:.2} s = {:.0} ops/s",
        total as f64 / secs
    );
    Ok(())
}

//! A compute node over verbs: several pollers, each with its own queue pair to every memory
//! node, and application threads sharing one SMART and one Sherman handle. Every key is read
//! back, and a Sherman scan must return them all in order; exits non-zero otherwise.
//!
//! Against `remora memnode --fabric verbs` processes (feature `verbs`):
//!
//! ```text
//! cargo run --release --features verbs --example verbs_cluster -- 10.0.0.1:7471,10.0.0.2:7471 --pollers 3
//! ```
//!
//! With no address it runs over the fake verbs device (one memory node in this process,
//! shared by the pollers; no NIC needed).
use remora::node::{ComputeNode, Error, IndexConfig, Memory, NodeConfig, Service};
use remora::verbs::ConnectOptions;
use std::time::Instant;

struct Args {
    addrs: Vec<String>,
    pollers: usize,
    threads: u64,
    keys: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        addrs: Vec::new(),
        pollers: 3,
        threads: 4,
        keys: 500,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |what: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v| v > 0)
                .ok_or(format!("{what} takes a positive number"))
        };
        match arg.as_str() {
            "--pollers" => a.pollers = num("--pollers")? as usize,
            "--threads" => a.threads = num("--threads")?,
            "--keys" => a.keys = num("--keys")?,
            s if s.starts_with("--") => {
                return Err(format!(
                    "unknown option {s} (usage: verbs_cluster [HOST:PORT,...] [--pollers N] \
                     [--threads N] [--keys N per thread])"
                ));
            }
            s => a
                .addrs
                .extend(s.split(',').filter(|x| !x.is_empty()).map(String::from)),
        }
    }
    Ok(a)
}

fn smart_key(k: u64) -> Vec<u8> {
    format!("user{k:010}").into_bytes()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let builder = ComputeNode::builder().pollers(a.pollers);
    let (node, nodes) = if a.addrs.is_empty() {
        let memory = Memory::VerbsFake {
            config: NodeConfig {
                region_len: 64 << 20,
                ..NodeConfig::default()
            },
            service: Service::None,
        };
        (builder.memory(memory).start()?, "1 fake".to_string())
    } else {
        let n = a.addrs.len();
        (
            builder
                .verbs(a.addrs.clone(), ConnectOptions::default())
                .start()?,
            n.to_string(),
        )
    };
    let smart = node.open(IndexConfig::smart(8))?;
    let sherman = node.open(IndexConfig::sherman())?;
    let total = a.threads * a.keys;

    let t0 = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..a.threads)
            .map(|t| {
                let (smart, sherman) = (smart.clone(), sherman.clone());
                s.spawn(move || -> Result<(), Error> {
                    for k in t * a.keys..(t + 1) * a.keys {
                        smart.upsert(&smart_key(k), &k.to_le_bytes()).wait()?;
                        sherman
                            .upsert(&(k + 1).to_be_bytes(), &k.to_le_bytes())
                            .wait()?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a writer thread panicked"))
    })?;
    let wrote = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let wrong = std::thread::scope(|s| {
        let readers: Vec<_> = (0..a.threads)
            .map(|t| {
                let (smart, sherman) = (smart.clone(), sherman.clone());
                s.spawn(move || -> Result<u64, Error> {
                    let mut wrong = 0;
                    for k in t * a.keys..(t + 1) * a.keys {
                        let want = Some(k.to_le_bytes().to_vec());
                        wrong += u64::from(smart.get(&smart_key(k)).wait()? != want);
                        wrong += u64::from(sherman.get(&(k + 1).to_be_bytes()).wait()? != want);
                    }
                    Ok(wrong)
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().expect("a reader thread panicked"))
            .sum::<Result<u64, Error>>()
    })?;
    let read = t1.elapsed().as_secs_f64();
    if wrong > 0 {
        return Err(format!("{wrong} of {} reads came back wrong", 2 * total).into());
    }
    let mut next = 1u64;
    for pair in sherman.scan(&1u64.to_be_bytes(), None, usize::MAX) {
        let (k, v) = pair?;
        let k = u64::from_be_bytes(k.as_slice().try_into()?);
        if k != next || v != (k - 1).to_le_bytes() {
            return Err(format!("Sherman's scan gave key {k} where {next} was due").into());
        }
        next += 1;
    }
    if next != total + 1 {
        return Err(format!("Sherman's scan ended at key {next} of {total}").into());
    }
    println!(
        "verbs cluster: {total} keys into SMART and Sherman on {nodes} memory node(s) by {} \
         pollers from {} threads: written in {wrote:.2} s ({:.0} upserts/s), all read back in \
         {read:.2} s ({:.0} gets/s), a Sherman scan returned all {total} in order",
        a.pollers,
        a.threads,
        2.0 * total as f64 / wrote,
        2.0 * total as f64 / read,
    );
    Ok(())
}

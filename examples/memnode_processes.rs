//! A memory node in one process and a compute node in another, on the soft fabric (shared
//! memory between the processes, reached through the memory node's control socket): what
//! `remora memnode --listen PATH` and `ComputeNode::builder().memnode(PATH)` do.
//!
//! The example starts itself a second time as the memory node (`serve PATH`), waits for its
//! socket, writes and checks keys through SMART from this process, and stops the memory
//! node by closing its stdin. Exits non-zero on a wrong answer.
use remora::node::{ComputeNode, IndexConfig};
use remora::poller::soft::{NodeConfig, SoftMemoryNode, control};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        return serve(Path::new(args.get(2).ok_or("serve PATH")?));
    }
    let path = std::env::temp_dir().join(format!("remora-example-{}.sock", std::process::id()));
    let mut memnode = Command::new(std::env::current_exe()?)
        .arg("serve")
        .arg(&path)
        .stdin(Stdio::piped())
        .spawn()?;
    let r = client(&path);
    drop(memnode.stdin.take()); // the memory node's cue to stop
    let status = memnode.wait()?;
    r?;
    if !status.success() {
        return Err(format!("the memory node process ended with {status}").into());
    }
    Ok(())
}

fn client(path: &PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    while control::info(path).is_err() {
        if t.elapsed() > Duration::from_secs(20) {
            return Err("the memory node process did not start listening in 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let node = ComputeNode::builder().memnode(path).start()?;
    let smart = node.open(IndexConfig::smart(32))?;
    for i in 0..2000u32 {
        smart
            .upsert(format!("k{i}").as_bytes(), format!("v{i}").as_bytes())
            .wait()?;
    }
    for i in 0..2000u32 {
        let v = smart.get(format!("k{i}").as_bytes()).wait()?;
        if v.as_deref() != Some(format!("v{i}").as_bytes()) {
            return Err(format!("k{i}: read {v:?}").into());
        }
    }
    println!(
        "memnode_processes: 2000 keys written and read back through memory node {} of another \
         process (service `{}`)",
        control::info(path)?.node_id,
        node.service()
    );
    Ok(())
}

/// The memory-node process: serves until its stdin closes.
fn serve(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let node = SoftMemoryNode::create(NodeConfig::default())?;
    let _server = node.spawn_server();
    let _listener = control::listen(&node, path)?;
    let mut sink = Vec::new();
    std::io::stdin().read_to_end(&mut sink)?;
    Ok(())
}

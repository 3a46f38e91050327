//! `remora memnode --fabric soft`: a standalone memory node serving its region to client
//! processes of this machine through a Unix control socket.
use crate::MemnodeArgs;
use remora::poller::soft::{NodeConfig, SoftMemoryNode, control};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

pub fn run(a: &MemnodeArgs) -> Result<(), String> {
    let cfg = NodeConfig {
        node_id: a.node_id,
        region_len: a.region_mib << 20,
        dm_len: a.dm_kib << 10,
        chunk_size: a.chunk_kib << 10,
        ..NodeConfig::default()
    };
    let node = SoftMemoryNode::create(cfg).map_err(|e| format!("creating the memory node: {e}"))?;
    let listener = control::listen(&node, Path::new(&a.listen)).map_err(|e| e.to_string())?;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    if let Some(c) = a.core
        && !core_pin(c)
    {
        eprintln!("memnode: could not pin to core {c}; serving unpinned");
    }
    println!(
        "memnode {}: {} MiB region on {}, {} KiB device memory, {} KiB chunks; listening on {}",
        cfg.node_id,
        a.region_mib,
        node.pages(),
        a.dm_kib,
        a.chunk_kib,
        listener.path().display()
    );
    let deadline = a
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    node.serve_until(&STOP, deadline);
    println!("memnode {}: stopped", cfg.node_id);
    Ok(())
}

fn core_pin(core: usize) -> bool {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.id == core)
        .is_some_and(core_affinity::set_for_current)
}

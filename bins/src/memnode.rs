//! `remora memnode --fabric soft`: a standalone memory node serving its region to client
//! processes of this machine through a Unix control socket.
use crate::{MemnodeArgs, Service};
use remora::core::canrt::CanrtServer;
use remora::core::erda::{ErdaConfig, ErdaServer};
use remora::core::server::{Echo, Handler};
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
    let handler: Box<dyn Handler + Send> = match a.service {
        Service::Echo => Box::new(Echo),
        Service::Canrt => Box::new(CanrtServer::new()),
        Service::Erda => {
            // Half the region for two head logs, 16 Mi buckets at most, in 8 MiB segments.
            let segment = 8u64 << 20;
            let head_bytes = (cfg.region_len / 4 / segment).max(1) * segment;
            Box::new(ErdaServer::new(ErdaConfig {
                heads: 2,
                buckets: (cfg.region_len / 8 / 32)
                    .next_power_of_two()
                    .clamp(1 << 14, 1 << 24)
                    / 2,
                segment_bytes: segment,
                head_bytes,
                ..ErdaConfig::small()
            }))
        }
    };
    let node = SoftMemoryNode::create_with(cfg, handler)
        .map_err(|e| format!("creating the memory node: {e}"))?;
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
        "memnode {}: {:?} service, {} MiB region on {}, {} KiB device memory, {} KiB chunks; listening on {}",
        cfg.node_id,
        a.service,
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

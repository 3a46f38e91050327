//! `remora memnode --fabric soft`: a standalone memory node serving its region to client
//! processes of this machine through a Unix control socket.
use crate::bench::tcp::TcpServer;
use crate::{MemnodeArgs, Service};
use remora::core::canrt::CanrtServer;
use remora::core::catfish::CatfishServer;
use remora::core::catfish::server::MAX_WINDOW;
use remora::core::erda::baseline::{BaselineServer, Scheme};
use remora::core::erda::{ErdaConfig, ErdaServer};
use remora::core::server::{Echo, Handler};
use remora::core::wort::{Kind, WortServer};
use remora::poller::soft::{Backing, NodeConfig, ServeMode, SoftMemoryNode, control};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const DEFAULT_REGION_MIB: u64 = 256;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// The server-side logic of `--service` for a fresh node of `region_len` bytes in
/// `chunk_size` chunks whose messages are at most `max_msg` bytes (soft and verbs memory
/// nodes alike), or why the service cannot be served there (an Erda store that does not fit).
pub(crate) fn handler_for(
    service: Service,
    region_len: u64,
    chunk_size: u64,
    max_msg: usize,
) -> Result<Box<dyn Handler + Send>, String> {
    let erda = || {
        let g = erda_geometry(region_len);
        g.check(region_len, chunk_size)
            .map(|_| g)
            .map_err(|e| format!("--service {service:?}: {e} (--region-mib, --chunk-kib)"))
    };
    Ok(match service {
        Service::Echo => Box::new(Echo),
        Service::Canrt => Box::new(CanrtServer::new()),
        Service::Wort => Box::new(WortServer::new(Kind::Wort)),
        Service::Woart => Box::new(WortServer::new(Kind::Woart)),
        Service::Catfish => Box::new(CatfishServer::new(max_msg)),
        Service::Erda => Box::new(
            ErdaServer::for_region(erda_geometry(region_len), region_len, chunk_size)
                .map_err(|e| format!("--service {service:?}: {e} (--region-mib, --chunk-kib)"))?,
        ),
        // The baselines' store (the same table, two logs of `head_bytes`, one mailbox) is
        // no larger than Erda's of this two-head geometry: Erda's check covers it.
        Service::ErdaRedo => Box::new(BaselineServer::new(Scheme::Redo, erda()?)),
        Service::ErdaRaw => Box::new(BaselineServer::new(Scheme::Raw, erda()?)),
    })
}

/// Erda's (and its baselines') hash table and logs for a region of `region_len` bytes: half
/// the region for two heads, each a ring of four log regions (cleaning needs a spare), cut in
/// segments of an eighth of a log region (64 KiB to 8 MiB), 16 Mi buckets at most.
fn erda_geometry(region_len: u64) -> ErdaConfig {
    let regions = 4u64;
    let per_region = region_len / 4 / regions;
    let eighth = (per_region / 8).max(1);
    let segment = (1u64 << (63 - eighth.leading_zeros())).clamp(64 << 10, 8 << 20);
    ErdaConfig {
        heads: 2,
        buckets: (region_len / 8 / 32)
            .next_power_of_two()
            .clamp(1 << 14, 1 << 24)
            / 2,
        segment_bytes: segment,
        head_bytes: regions * (per_region / segment * segment),
        regions: regions as u32,
        ..ErdaConfig::small()
    }
}

/// Installs the SIGINT/SIGTERM handlers that set `STOP`.
fn on_signals() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// `--tcp-listen`: Catfish's TCP/IP baseline server instead of a soft memory node.
fn run_tcp(a: &MemnodeArgs, listen: &str) -> Result<(), String> {
    if a.service != Service::Catfish {
        return Err("--tcp-listen serves the Catfish TCP baseline: add --service catfish".into());
    }
    if a.file.is_some() || a.pmem.is_some() {
        return Err("--tcp-listen keeps its tree in process memory: no --file or --pmem".into());
    }
    let region = a.region_mib.unwrap_or(DEFAULT_REGION_MIB) << 20;
    // The paper's main tree, as `remora bench --index catfish` creates by default.
    let kind = remora::core::catfish::TreeKind::RStar;
    let server = TcpServer::start(listen, region, kind, TCP_FANOUT, MAX_WINDOW)?;
    on_signals();
    println!(
        "memnode (Catfish TCP baseline): R*-tree of fanout {TCP_FANOUT} in a {} MiB region; \
         listening on {} (remora bench --index catfish --mode tcp --tcp-connect {})",
        region >> 20,
        server.addr(),
        server.addr()
    );
    let deadline = a
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    while !STOP.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    println!("memnode (Catfish TCP baseline): stopped");
    Ok(())
}

/// Entries per node of the TCP baseline's tree (the paper's node size).
const TCP_FANOUT: usize = 30;

pub fn run(a: &MemnodeArgs) -> Result<(), String> {
    if let Some(l) = &a.tcp_listen {
        return run_tcp(a, l);
    }
    if a.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    // An existing region file keeps its size (a different --region-mib is refused when it
    // is opened); anything else gets --region-mib or the default.
    let path = a.file.as_ref().or(a.pmem.as_ref());
    let existing = path
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    let region_len = match (a.region_mib, existing) {
        (Some(m), _) => m << 20,
        (None, 0) => DEFAULT_REGION_MIB << 20,
        (None, n) => n,
    };
    let cfg = NodeConfig {
        node_id: a.node_id,
        region_len,
        dm_len: a.dm_kib << 10,
        chunk_size: a.chunk_kib << 10,
        nvm_write_ns: a.nvm_write_ns,
        max_msg: a
            .service
            .max_message()
            .map_or(NodeConfig::default().max_msg, |m| {
                m.max(NodeConfig::default().max_msg)
            }),
        ..NodeConfig::default()
    };
    let handler = handler_for(a.service, cfg.region_len, cfg.chunk_size, cfg.max_msg)?;
    let backing = match (&a.file, &a.pmem) {
        (Some(p), _) => Backing::File {
            path: p.clone(),
            dax: false,
        },
        (None, Some(p)) => Backing::File {
            path: p.clone(),
            dax: true,
        },
        (None, None) => Backing::Memory,
    };
    let t = Instant::now();
    let (node, opened) = SoftMemoryNode::create_backed(cfg, handler, &backing)
        .map_err(|e| format!("creating the memory node: {e}"))?;
    if opened.restarted {
        println!(
            "memnode {}: restarted on its region; {:?} recovery took {:.1} ms{}{}",
            cfg.node_id,
            a.service,
            t.elapsed().as_secs_f64() * 1e3,
            if opened.recovery.is_empty() { "" } else { ": " },
            opened.recovery
        );
    }
    let key = match &a.key_file {
        Some(p) => Some(remora::poller::soft::auth::load_or_create(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let listener = control::listen_with(
        &node,
        Path::new(&a.listen),
        control::ListenOptions {
            mode: a.socket_mode,
            max_connections: a.max_connections,
            key,
        },
    )
    .map_err(|e| e.to_string())?;
    if let Some(p) = &a.key_file {
        println!(
            "memnode {}: clients need the key in {} (REMORA_KEY_FILE, or {}.key)",
            cfg.node_id,
            p.display(),
            a.listen
        );
    }
    on_signals();
    if let Some(c) = a.core
        && !core_pin(c)
    {
        eprintln!("memnode: could not pin to core {c}; serving unpinned");
    }
    println!(
        "memnode {}: {:?} service, {} MiB region on {}, {} KiB device memory, {} KiB chunks; listening on {}",
        cfg.node_id,
        a.service,
        node.config().region_len >> 20,
        node.pages(),
        node.config().dm_len >> 10,
        node.config().chunk_size >> 10,
        listener.path().display()
    );
    let deadline = a
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    if a.threads == 1 && !a.polling {
        node.serve_until(&STOP, deadline);
    } else {
        let mode = if a.polling {
            ServeMode::Polling
        } else {
            ServeMode::Event
        };
        let cores: Vec<usize> = a.core.into_iter().collect();
        let servers = node.spawn_servers(a.threads, mode, &cores);
        println!(
            "memnode {}: {} server threads, {mode:?} mode",
            cfg.node_id, a.threads
        );
        while !STOP.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(servers);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erda_services_refuse_a_region_their_store_does_not_fit_at_start() {
        let mib = 1u64 << 20;
        for service in [Service::Erda, Service::ErdaRedo, Service::ErdaRaw] {
            // 8 MiB passed the old "at least 8 MiB" rule, but in 4 MiB chunks the store has
            // only the second chunk: the node started and dropped every Erda connection.
            let err = handler_for(service, 8 * mib, 4 * mib, 4096)
                .err()
                .expect("8 MiB in 4 MiB chunks is refused");
            assert!(err.contains("does not fit"), "{service:?}: {err}");
            assert!(err.contains("--region-mib"), "{service:?}: {err}");
            for len in [8 * mib, 64 * mib, 256 * mib] {
                assert!(
                    handler_for(service, len, 256 << 10, 4096).is_ok(),
                    "{service:?}: {len} bytes"
                );
            }
            assert!(handler_for(service, mib, 256 << 10, 4096).is_err());
        }
    }
}

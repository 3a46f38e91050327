//! `--fabric verbs` commands: `remora perf`, `remora memnode` and `remora check` over real
//! RDMA verbs (rdma-core). Built only with `--features verbs`; without it each command says so
//! in one line.
use crate::MemnodeArgs;
use crate::args::PerfArgs;
use crate::report::PerfRecord;

#[cfg(not(feature = "verbs"))]
pub(crate) const NO_VERBS: &str = "this build has no verbs fabric: rebuild with `cargo build --features verbs` \
                        (needs libibverbs-dev, librdmacm-dev and libclang-dev), or use `--fabric soft`";

#[cfg(not(feature = "verbs"))]
pub fn perf(_a: &PerfArgs) -> Result<Vec<PerfRecord>, String> {
    Err(NO_VERBS.into())
}

#[cfg(not(feature = "verbs"))]
pub fn memnode(_a: &MemnodeArgs) -> Result<(), String> {
    Err(NO_VERBS.into())
}

#[cfg(not(feature = "verbs"))]
pub fn check(_a: &PerfArgs) -> Result<(), String> {
    Err(NO_VERBS.into())
}

#[cfg(feature = "verbs")]
pub use real::{check, memnode, perf};

#[cfg(feature = "verbs")]
#[path = "verbs_fake.rs"]
mod fake;

#[cfg(feature = "verbs")]
mod real {
    use super::*;
    use remora::verbs::check::{CONNECT_TIMEOUT, VerbsHarness, run_checks};
    use remora::verbs::qp::RECV_LEN;
    use remora::verbs::{
        ConnectOptions, Memnode, MemnodeConfig, NodeInfo, VerbsEndpoint, connect_qp, probe, totals,
    };
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    static STOP: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_signal(_: libc::c_int) {
        STOP.store(true, Ordering::Relaxed);
    }

    fn options(a: &PerfArgs) -> ConnectOptions {
        ConnectOptions {
            device: a.device.clone(),
            timeout: CONNECT_TIMEOUT,
        }
    }

    /// The memory node to use: `--connect host:port` (after checking there is a device).
    fn target(a: &PerfArgs, cmd: &str) -> Result<String, String> {
        probe(a.device.as_deref()).map_err(|e| e.to_string())?;
        a.connect.clone().ok_or_else(|| {
            format!(
                "`remora {cmd} --fabric verbs` needs `--connect host:port` of a running `remora \
                 memnode --fabric verbs --listen host:port` (an address on an RDMA interface)"
            )
        })
    }

    /// The conformance suite and perf's SEND/WRITE_WITH_IMM measurements need the echo
    /// service: another service would answer their messages as its own requests.
    fn need_echo(info: &NodeInfo, what: &str) -> Result<(), String> {
        if info.service == "echo" {
            return Ok(());
        }
        Err(format!(
            "the memnode at {} runs the `{}` service; {what} needs the `echo` service (start a \
             separate `remora memnode --fabric verbs --service echo`)",
            info.addr, info.service
        ))
    }

    /// `remora perf --fabric verbs --connect host:port`, or `--fake` (see `verbs_fake.rs`).
    pub fn perf(a: &PerfArgs) -> Result<Vec<PerfRecord>, String> {
        if a.fake {
            return super::fake::run(a).map(|()| Vec::new());
        }
        let addr = target(a, "perf")?;
        let opts = options(a);
        let (qp, info) = connect_qp(&addr, &opts).map_err(|e| e.to_string())?;
        need_echo(&info, "`remora perf`")?;
        let notes = vec![
            format!(
                "memory node {} at {} via {} ({} MiB region; device memory: {:?}, {} KiB)",
                info.node,
                addr,
                info.device,
                info.region_len >> 20,
                info.dm_kind,
                info.dm_len >> 10
            ),
            format!(
                "staging buffers on {}; inline up to {} bytes; one doorbell per post, last work \
                 request signaled",
                qp.staging_pages()
                    .map_or("none yet (mapped on the first bounce)".to_string(), |k| k
                        .to_string()),
                info.max_inline
            ),
        ];
        drop(qp);
        let before = totals();
        let mut recs = crate::perf::run_generic(
            a,
            "verbs",
            |_| VerbsEndpoint::connect(&[&addr], &opts).map_err(|e| e.to_string()),
            notes,
        )?;
        let note = format!(
            "verbs data path (every point, warm-up included): {}",
            totals() - before
        );
        println!("{note}");
        for r in &mut recs {
            r.notes.push(note.clone());
        }
        Ok(recs)
    }

    /// `remora memnode --fabric verbs --listen host:port`.
    pub fn memnode(a: &MemnodeArgs) -> Result<(), String> {
        let cfg = MemnodeConfig {
            listen: a.listen.clone(),
            node: a.node_id,
            region_len: a.region_mib.unwrap_or(256) << 20,
            chunk_size: a.chunk_kib << 10,
            dm_len: a.dm_kib << 10,
            device: a.device.clone(),
            verbose: false,
            threads: a.threads,
            key: match &a.key_file {
                Some(p) => {
                    Some(remora::poller::soft::auth::load_or_create(p).map_err(|e| e.to_string())?)
                }
                None => None,
            },
            client_keys: match &a.key_file {
                Some(p) => {
                    remora::poller::soft::auth::read_keys(p)
                        .map_err(|e| e.to_string())?
                        .clients
                }
                None => Vec::new(),
            },
        };
        if !a.listen.contains(':') {
            return Err(format!(
                "`remora memnode --fabric verbs` listens on host:port (an address of an RDMA \
                 interface), not {:?}",
                a.listen
            ));
        }
        let region_len = cfg.region_len;
        let handler = crate::memnode::handler_for(a.service, region_len, cfg.chunk_size, RECV_LEN)?;
        let mut node = Memnode::start_with(cfg, handler).map_err(|e| e.to_string())?;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
            libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        }
        if let Some(c) = a.core {
            let pinned = core_affinity::get_core_ids()
                .unwrap_or_default()
                .into_iter()
                .find(|x| x.id == c)
                .is_some_and(core_affinity::set_for_current);
            if !pinned {
                eprintln!("memnode: could not pin to core {c}; serving unpinned");
            }
        }
        let s = node.summary();
        println!(
            "memnode {} (verbs): {} service, {} MiB region on {}, {} KiB device memory ({}), {} KiB \
             chunks; device {}; listening on {}",
            a.node_id,
            s.service,
            a.region_mib.unwrap_or(256),
            s.region_pages,
            a.dm_kib,
            s.dm,
            a.chunk_kib,
            s.device,
            s.listen
        );
        if let Some(p) = &a.key_file {
            println!(
                "memnode {} (verbs): clients need the key in {} (REMORA_KEY_FILE)",
                a.node_id,
                p.display()
            );
        }
        let _ = std::io::stdout().flush();
        let limit = a.seconds.map(Duration::from_secs_f64);
        node.serve(&STOP, limit).map_err(|e| e.to_string())?;
        let (served, conns) = node.stats();
        let s = node.summary();
        println!(
            "memnode {} (verbs) data path: {}",
            a.node_id,
            node.verbs_stats()
        );
        println!(
            "memnode {} (verbs): stopped after {conns} connections, {served} messages served; \
             device memory was {}",
            a.node_id, s.dm
        );
        println!(
            "memnode {} (verbs): {} server threads, each with a shared receive queue of {} \
             buffers; receiver-not-ready timer {:.2} ms (IB code {}) read back on {} of {conns} \
             connections",
            a.node_id,
            a.threads,
            remora::verbs::SRQ_DEPTH,
            remora::verbs::qp::MIN_RNR_TIMER_MS,
            remora::verbs::qp::MIN_RNR_TIMER,
            node.rnr_timer_set()
        );
        if let Some(b) = node.per_connection_bytes() {
            println!(
                "memnode {} (verbs): footprint {} KiB per connection (resident + hugetlb memory \
                 grown across the first accept)",
                a.node_id,
                b >> 10
            );
        }
        Ok(())
    }

    /// `remora check --fabric verbs --connect host:port`: the conformance suite.
    pub fn check(a: &PerfArgs) -> Result<(), String> {
        let addr = target(a, "check")?;
        let h = VerbsHarness::new(&addr, options(a)).map_err(|e| e.to_string())?;
        let i = h.info();
        need_echo(i, "the conformance suite")?;
        println!(
            "conformance over verbs: memory node {} at {addr} via {}, {} MiB region, device \
             memory {:?} ({} KiB)",
            i.node,
            i.device,
            i.region_len >> 20,
            i.dm_kind,
            i.dm_len >> 10
        );
        let results = run_checks(&h, |name, r| {
            match r {
                Ok(s) => println!("PASS {name} ({s:.1} s)"),
                Err(e) => println!("FAIL {name}: {e}"),
            }
            let _ = std::io::stdout().flush();
        });
        let failed = results.iter().filter(|(_, r)| r.is_err()).count();
        println!("{} passed, {failed} failed", results.len() - failed);
        if failed > 0 {
            return Err(format!("{failed} conformance checks failed over verbs"));
        }
        Ok(())
    }
}

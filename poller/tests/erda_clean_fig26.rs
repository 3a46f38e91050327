//! The paper's Fig. 26 on the sim (issue 12): average latency of Erda's reads and writes
//! during log cleaning and outside it, for YCSB-C, B, A and update-only with 1 KiB values,
//! and the log space cleaning reclaims. Eight measured clients run the workload on 200 keys
//! while a ninth keeps updating them, so that cleanings start whatever the workload; an
//! operation counts as "during cleaning" if its interval overlaps one (the server's
//! cleaning intervals are taken from its clock). Prints the table; asserts only what the
//! paper's figure shows (reads slower during cleaning on the SEND path, every operation
//! correct). Run with `--nocapture` to see the figures.
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer, ServerStats};
use remora_core::fabric::{FabricError, Recv};
use remora_core::index::KvIndex;
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

const VALUE: usize = 1024;
const KEYS: u64 = 200;
const CLIENTS: u32 = 8;
const OPS: u32 = 300;

/// One head of four 512 KiB regions; a cleaning starts after 256 KiB of appends.
fn store() -> ErdaConfig {
    ErdaConfig {
        heads: 1,
        buckets: 4096,
        segment_bytes: 64 << 10,
        head_bytes: 4 * (512 << 10),
        regions: 4,
        clean_permille: 500,
        ..ErdaConfig::small()
    }
}

/// The server, recording when each cleaning starts and ends (virtual time).
struct Probe<'a> {
    srv: &'a RefCell<ErdaServer>,
    spans: &'a RefCell<Vec<(u64, u64)>>,
}

impl Handler for Probe<'_> {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let mut srv = self.srv.borrow_mut();
        let before = srv.stats();
        let r = srv.on_message(region, conn, recv, msg, replies);
        let after = srv.stats();
        let now = region.cpu_clock().map_or(0, |c| c.now_ns);
        let mut spans = self.spans.borrow_mut();
        if after.cleanings_started > before.cleanings_started {
            spans.push((now, u64::MAX));
        }
        if after.cleanings_done > before.cleanings_done
            && let Some(s) = spans.iter_mut().rev().find(|s| s.1 == u64::MAX)
        {
            s.1 = now;
        }
        r
    }
    fn service(&self) -> &'static str {
        "erda"
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Workload {
    C,
    B,
    A,
    UpdateOnly,
}

impl Workload {
    /// Percentage of reads.
    fn reads(self) -> u64 {
        match self {
            Workload::C => 100,
            Workload::B => 95,
            Workload::A => 50,
            Workload::UpdateOnly => 0,
        }
    }
}

struct Figures {
    /// (read?, start, end) of every measured operation.
    ops: Vec<(bool, u64, u64)>,
    spans: Vec<(u64, u64)>,
    stats: ServerStats,
    server_reads: u64,
}

fn run(w: Workload, send_reads: bool) -> Figures {
    let srv = RefCell::new(ErdaServer::new(store()));
    let spans = RefCell::new(Vec::new());
    let ops = RefCell::new(Vec::new());
    let errors = RefCell::new(Vec::<String>::new());
    let server_reads = RefCell::new(0u64);
    let done = std::cell::Cell::new(0u32);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 64 << 20,
        seed: 26,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(
        0,
        Box::new(Probe {
            srv: &srv,
            spans: &spans,
        }),
    )
    .unwrap();
    let cfg = ErdaClientConfig {
        value_size: VALUE,
        send_reads_while_cleaning: send_reads,
        ..ErdaClientConfig::default()
    };
    // Load, then the background writer.
    let c0 = sim.client(0).unwrap();
    {
        let (errors, done) = (&errors, &done);
        sim.spawn_with(&c0, 0, move |ctx| async move {
            let e = Erda::open(ctx.ep(), cfg).await.unwrap();
            for k in 0..KEYS {
                e.upsert(&k.to_be_bytes(), &[k as u8; VALUE]).await.unwrap();
            }
            let mut i = 0u64;
            while done.get() < CLIENTS {
                let k = (i * 7919) % KEYS;
                if let Err(err) = e.upsert(&k.to_be_bytes(), &[k as u8; VALUE]).await {
                    errors.borrow_mut().push(format!("writer: {err}"));
                    return;
                }
                i += 1;
                ctx.sleep(2_000).await;
            }
        });
    }
    for c in 0..CLIENTS {
        let ctx = sim.client(1 + c as usize % 3).unwrap();
        let (ops, errors, server_reads, done) = (&ops, &errors, &server_reads, &done);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            ctx.sleep(2_000_000).await;
            let e = Erda::open(ctx.ep(), cfg).await.unwrap();
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1);
            let mut out = [0u8; VALUE];
            for _ in 0..OPS {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = x % KEYS;
                let read = x / KEYS % 100 < w.reads();
                let t0 = ctx.now_ns();
                let r = if read {
                    e.get(&k.to_be_bytes(), &mut out).await.map(|g| {
                        // Every key holds a value of its own byte.
                        g == Some(VALUE) && out[0] == k as u8
                    })
                } else {
                    e.update(&k.to_be_bytes(), &[k as u8; VALUE]).await
                };
                match r {
                    Ok(true) => ops.borrow_mut().push((read, t0, ctx.now_ns())),
                    other => errors.borrow_mut().push(format!("key {k}: {other:?}")),
                }
            }
            *server_reads.borrow_mut() += e.stats().server_reads;
            done.set(done.get() + 1);
        });
    }
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    drop(sim);
    let errs = errors.into_inner();
    assert!(
        errs.is_empty(),
        "{w:?}: {} failures, first {}",
        errs.len(),
        errs[0]
    );
    let stats = srv.borrow().stats();
    Figures {
        ops: ops.into_inner(),
        spans: spans.into_inner(),
        stats,
        server_reads: server_reads.into_inner(),
    }
}

/// (mean ns, count) of the operations matching `pick`.
fn mean(ops: &[(bool, u64, u64)], pick: impl Fn(&(bool, u64, u64)) -> bool) -> (f64, usize) {
    let v: Vec<u64> = ops.iter().filter(|o| pick(o)).map(|o| o.2 - o.1).collect();
    let n = v.len();
    ((v.iter().sum::<u64>() as f64) / n.max(1) as f64, n)
}

#[test]
fn latency_during_and_outside_log_cleaning() {
    println!(
        "Erda on the sim, 1 KiB values, {CLIENTS} clients x {OPS} ops on {KEYS} keys and one \
         background writer; mean latency in ns (operations)"
    );
    println!(
        "{:<14} {:>10} {:>22} {:>22} {:>22} {:>22}",
        "workload", "reads via", "reads outside", "reads during", "writes outside", "writes during"
    );
    let mut c_gap = 0.0;
    for (w, send) in [
        (Workload::C, true),
        (Workload::B, true),
        (Workload::A, true),
        (Workload::UpdateOnly, true),
        (Workload::C, false),
    ] {
        let f = run(w, send);
        let during = |o: &(bool, u64, u64)| f.spans.iter().any(|s| o.1 < s.1 && o.2 > s.0);
        let ro = mean(&f.ops, |o| o.0 && !during(o));
        let rd = mean(&f.ops, |o| o.0 && during(o));
        let wo = mean(&f.ops, |o| !o.0 && !during(o));
        let wd = mean(&f.ops, |o| !o.0 && during(o));
        let cell = |(m, n): (f64, usize)| {
            if n == 0 {
                "-".to_string()
            } else {
                format!("{m:.0} ({n})")
            }
        };
        println!(
            "{:<14} {:>10} {:>22} {:>22} {:>22} {:>22}",
            format!("{w:?}"),
            if send { "SEND" } else { "one-sided" },
            cell(ro),
            cell(rd),
            cell(wo),
            cell(wd)
        );
        let s = f.stats;
        println!(
            "{:<14} {} cleanings, {} gets through the server; {} KiB of regions freed, {} KiB \
             of live objects copied: {} KiB reclaimed",
            "",
            s.cleanings_done,
            f.server_reads,
            s.reclaimed_bytes >> 10,
            s.cleaned_bytes >> 10,
            (s.reclaimed_bytes - s.cleaned_bytes) >> 10
        );
        assert!(s.cleanings_done >= 1, "{w:?}: {s:?}");
        assert!(s.reclaimed_bytes > s.cleaned_bytes);
        if w == Workload::C && send {
            assert!(ro.1 > 0 && rd.1 > 0, "reads on both sides of a cleaning");
            c_gap = rd.0 - ro.0;
        }
    }
    // The paper's observation: YCSB-C reads are slower during cleaning (SEND path).
    assert!(
        c_gap > 0.0,
        "reads during cleaning were not slower ({c_gap} ns)"
    );
}

//! Linearizability of Erda while its logs are being cleaned (issue 12): 16 sim clients run
//! `lin_client` workloads on a store whose small log regions make the server clean each
//! head again and again during the run; the whole history is checked. Run with the paper's
//! SEND-path reads during cleaning and with one-sided reads throughout.
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer, ServerStats};
use remora_core::fabric::{FabricError, Recv};
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;

const CLIENTS: u64 = 16;
const OPS: u64 = 300;

/// Two heads of four 32 KiB regions: a cleaning starts after 8 KiB of appends to a head.
fn store() -> ErdaConfig {
    ErdaConfig {
        heads: 2,
        buckets: 4096,
        segment_bytes: 8192,
        head_bytes: 4 * 32768,
        regions: 4,
        clean_permille: 250,
        ..ErdaConfig::small()
    }
}

/// The server, shared with the test so that it can read its counters after the run.
struct Probe<'a>(&'a RefCell<ErdaServer>);

impl Handler for Probe<'_> {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        self.0
            .borrow_mut()
            .on_message(region, conn, recv, msg, replies)
    }
    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        self.0.borrow_mut().on_idle(region)
    }
    fn on_disconnect(&mut self, region: &dyn LocalRegion, conn: usize) {
        self.0.borrow_mut().on_disconnect(region, conn)
    }
    fn service(&self) -> &'static str {
        "erda"
    }
}

fn run(seed: u64, send_reads: bool) -> ServerStats {
    let srv = RefCell::new(ErdaServer::new(store()));
    let rec = Recorder::new((CLIENTS * OPS) as usize, (CLIENTS * OPS * 17) as usize);
    let errors = RefCell::new(Vec::<String>::new());
    let reads = RefCell::new((0u64, 0u64));
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(Probe(&srv))).unwrap();
    let cfg = ErdaClientConfig {
        send_reads_while_cleaning: send_reads,
        ..ErdaClientConfig::default()
    };
    for c in 0..CLIENTS as u32 {
        let ctx = sim.client(c as usize % 4).unwrap();
        let (rec, errors, reads) = (&rec, &errors, &reads);
        let client = 1 + c;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let e = match Erda::open(ctx.ep(), cfg).await {
                Ok(e) => e,
                Err(err) => return errors.borrow_mut().push(format!("open: {err}")),
            };
            let spec = LinSpec {
                cold: 32,
                ..LinSpec::new(client, OPS, seed, false)
            };
            let clock = || ctx.now_ns();
            if let Err(err) = lin_client(&e, &spec, rec, &clock).await {
                errors.borrow_mut().push(format!("client {client}: {err}"));
            }
            let mut r = reads.borrow_mut();
            r.0 += e.stats().server_reads;
            r.1 += e.stats().epoch_retries;
        });
    }
    let r = sim.run();
    let errs = errors.borrow().clone();
    assert!(
        errs.is_empty(),
        "seed {seed}: {} clients failed, first: {}",
        errs.len(),
        errs[0]
    );
    assert_eq!(r.unfinished, 0, "seed {seed}: clients never finished");
    drop(sim);
    let h = rec.finish().expect("recorder sized for the workload");
    assert_eq!(h.events.len() as u64, CLIENTS * OPS);
    let report = check(&h, &CheckConfig::new(seed));
    let s = srv.borrow().stats();
    let (server_reads, epoch_retries) = *reads.borrow();
    println!(
        "seed {seed}, send reads {send_reads}: {report}; {} cleanings ({} objects copied, {} \
         buckets reclaimed, {} regions chained), {server_reads} gets through the server, \
         {epoch_retries} gets started over",
        s.cleanings_done, s.cleaned_objects, s.buckets_reclaimed, s.chained
    );
    assert!(report.is_ok(), "seed {seed}: {report}");
    assert!(
        s.cleanings_done >= 8,
        "seed {seed}: too few cleanings: {s:?}"
    );
    if send_reads {
        assert!(
            server_reads > 0,
            "seed {seed}: no get went through the server"
        );
    }
    s
}

#[test]
fn erda_is_linearizable_while_its_logs_are_cleaned() {
    let seeds: u64 = std::env::var("ERDA_CLEAN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    for seed in 1..=seeds {
        run(seed, true);
    }
    run(seeds + 1, false);
}

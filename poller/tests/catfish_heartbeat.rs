//! Algorithm 1's heartbeat on the sim is the paper's: the server sends it to each client
//! ("sent to all active clients by the aforementioned fast messaging design", seeds/003
//! §4.1) and the client takes it from its own memory, so an adaptive client that stays on
//! fast messaging posts no READ (before, the heartbeat sat in a slot on the memory node and
//! every look at it was a READ and a WRITE). A busy server's heartbeats still make it offload.
use remora_core::catfish::{CatfishClient, CatfishServer, Mode, Rect};
use remora_core::fabric::{Endpoint, QueuePair, Verb};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Heartbeat interval (Algorithm 1's `Inv`) of server and client, in ns.
const INV_NS: u64 = 20_000;

fn rect(i: u64) -> Rect {
    let x = (i * 7919 % 10_000) as i32;
    let y = (i * 104_729 % 10_000) as i32;
    Rect::new(x, y, x + 50, y + 50).unwrap()
}

#[test]
fn heartbeats_reach_the_client_without_a_read() {
    let probe = Arc::new(AtomicU32::new(200));
    // (phase load, searches, offloaded, READs posted, heartbeats taken)
    let out = RefCell::new(Vec::<(u32, u64, u64, u64, u64)>::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        seed: 5,
        chunk_size: 128 << 10,
        ..SimConfig::default()
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    let server = CatfishServer::new(max)
        .with_load_probe(probe.clone())
        .with_heartbeat_interval_ns(INV_NS);
    sim.set_handler(0, Box::new(server)).unwrap();
    let ctx = sim.client(0).unwrap();
    let (out_ref, p) = (&out, probe.clone());
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut c = CatfishClient::create(qp, 1).await.unwrap();
        for i in 0..100 {
            c.insert(qp, rect(i), i).await.unwrap();
        }
        c.set_heartbeat_interval_ns(INV_NS);
        let mut hits = Vec::new();
        for phase in [200u32, 990] {
            p.store(phase, Ordering::Relaxed);
            let reads0 = qp.counters().snapshot().verb(Verb::Read);
            let hb0 = c.stats().heartbeats;
            let mut offloaded = 0;
            for k in 0..300 {
                hits.clear();
                let q = rect(k * 3 + 1);
                let m = c.search_adaptive(ctx.ep(), q, &mut hits).await.unwrap();
                offloaded += u64::from(m == Mode::Offload);
                assert!(hits.iter().all(|e| e.rect.intersects(&q)));
            }
            let reads = qp.counters().snapshot().verb(Verb::Read) - reads0;
            let hbs = c.stats().heartbeats - hb0;
            out_ref
                .borrow_mut()
                .push((phase, 300, offloaded, reads, hbs));
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let out = out.into_inner();
    println!("(load, searches, offloaded, READs, heartbeats taken): {out:?}");
    let (_, _, off, reads, hbs) = out[0];
    assert_eq!(off, 0, "a calm server: all messaging");
    assert!(hbs >= 10, "heartbeats taken while calm: {hbs}");
    assert_eq!(
        reads, 0,
        "looking at the heartbeat must not READ: {reads} READs"
    );
    let (_, _, off, _, hbs) = out[1];
    assert!(hbs >= 5, "heartbeats taken while busy: {hbs}");
    assert!(off >= 100, "a busy server: {off}/300 offloaded");
}

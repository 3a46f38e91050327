//! Catfish's server threads on the sim: event-based vs polling-based (the paper's Fig. 6
//! comparison, `server_scan_ns`) and throughput vs server threads.
use remora_core::catfish::{CatfishClient, CatfishServer, Mode, Rect};
use remora_core::fabric::{Endpoint, QueuePair};
use remora_poller::sim::{Model, Sim, SimConfig};

const SEARCHES: u64 = 20;

/// Virtual ns for `clients` clients (on 4 compute nodes) to run `SEARCHES` messaging
/// searches each, and the node's CPU busy ns meanwhile.
fn run(clients: usize, threads: u32, scan_ns: u32) -> (u64, u64) {
    let mut model = Model::default();
    model.set("server_threads", &threads.to_string()).unwrap();
    model.set("server_scan_ns", &scan_ns.to_string()).unwrap();
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 4,
        model,
        seed: 5,
        ..SimConfig::default()
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    sim.set_handler(0, Box::new(CatfishServer::new(max)))
        .unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut c = CatfishClient::create(qp, 1).await.unwrap();
        for i in 0..100 {
            c.insert(
                qp,
                Rect::new(i * 10, i * 10, i * 10 + 5, i * 10 + 5).unwrap(),
                i as u64,
            )
            .await
            .unwrap();
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    let (t0, b0) = (sim.now_ns(), sim.server_busy_ns(0).unwrap());
    for n in 0..clients {
        let ctx = sim.client(n % 4).unwrap();
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::open(qp).await.unwrap();
            let mut hits = Vec::new();
            for k in 0..SEARCHES {
                let x = ((n as u64 * 31 + k * 7) % 100) as i32 * 10;
                hits.clear();
                c.search(
                    qp,
                    Rect::new(x, x, x + 5, x + 5).unwrap(),
                    Mode::Messaging,
                    &mut hits,
                )
                .await
                .unwrap();
                assert_eq!(hits.len(), 1);
            }
        });
    }
    assert_eq!(sim.run().unfinished, 0);
    (sim.now_ns() - t0, sim.server_busy_ns(0).unwrap() - b0)
}

#[test]
fn more_server_threads_serve_more_until_the_clients_are_the_limit() {
    let one = run(64, 1, 0).0;
    let four = run(64, 4, 0).0;
    println!("64 clients: 1 thread {one} ns, 4 threads {four} ns");
    assert!(four * 3 < one, "4 threads: {four} ns vs 1 thread: {one} ns");
}

#[test]
fn a_polling_server_pays_for_its_rings_and_an_event_based_one_does_not() {
    for clients in [16, 64] {
        let (event, event_busy) = run(clients, 2, 0);
        let (polling, polling_busy) = run(clients, 2, 25);
        println!(
            "{clients} clients, 2 threads: event {event} ns ({event_busy} busy), polling \
             {polling} ns ({polling_busy} busy)"
        );
        // Each search message costs 25 ns per ring of the thread's share (clients / 2, plus
        // the setup's connections), on top of the event-based service.
        let msgs = clients as u64 * SEARCHES;
        let extra = polling_busy - event_busy;
        assert!(
            extra >= msgs * 25 * (clients as u64 / 2),
            "{clients} clients: polling cost only {extra} ns more"
        );
    }
    // The gap grows with the clients (the paper's Fig. 6 shape).
    let (e16, p16) = (run(16, 2, 0).0, run(16, 2, 25).0);
    let (e64, p64) = (run(64, 2, 0).0, run(64, 2, 25).0);
    assert!(p64 * e16 > p16 * e64, "16: {e16}/{p16}, 64: {e64}/{p64}");
}

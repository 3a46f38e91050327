//! Catfish crash campaigns on the sim (issues 10 and 11).
//!
//! - **A client dies at every verb** of each kind of operation (insert by SEND, insert by
//!   WRITE_WITH_IMM into a mailbox it asks for first, a messaging search long enough to need
//!   a `More`, an offloaded search, an adaptive search with heartbeats): a dry run counts the
//!   victim's doorbells during its operation, then the run is repeated with the victim dying
//!   at each of them (`Faults::crash_client_at_post`). Three survivors run recorded
//!   insert/search workloads meanwhile; each must finish without an error, the whole history
//!   (the victim's operation pending: it may or may not have taken effect) must pass the
//!   rectangle linearizability checker, and no survivor operation may take longer than a
//!   bound. Default 2 seeds; `CATFISH_CRASH_SEEDS=n` sweeps n.
//! - **The memory node dies mid-request**: eight clients run mixed workloads (both
//!   transports, every search mode) and the node crashes at one of many moments spread over
//!   the run. Every client must end, each either done or with `NoReply` (it was waiting for
//!   a reply; `CatfishClient::set_reply_timeout_ns`) or the fabric's `RetryExceeded` /
//!   `Flushed`, within a stated bound of the crash. Before the reply deadline existed, a
//!   client waiting for a reply at the crash waited forever.
use remora_core::alloc::AllocError;
use remora_core::catfish::client::DEFAULT_REPLY_TIMEOUT_NS;
use remora_core::catfish::{CatfishClient, CatfishError, CatfishServer, Mode, Rect, Transport};
use remora_core::fabric::{Endpoint, FabricError, QueuePair};
use remora_core::lincheck::{CheckConfig, Op, Outcome, Recorder, check};
use remora_poller::sim::{Faults, Sim, SimConfig};
use std::cell::RefCell;

const CREATOR: u32 = 250;
const VICTIM: u32 = 251;
const SURVIVORS: u32 = 3;
const OPS: u64 = 30;
/// Entries the creator inserts first: a search of everything then needs several reply
/// messages, more than the server's window of 2.
const PRELOAD: u64 = 400;
const LATE_NS: u64 = 20_000;
/// The sim's number of the victim client.
const VICTIM_CLIENT: u32 = 3;
const SIDE: u64 = 4000;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn rect_at(h: u64, w: u64) -> Rect {
    let (x, y) = ((h % SIDE) as i32, ((h >> 20) % SIDE) as i32);
    let (dx, dy) = (((h >> 40) % w) as i32, ((h >> 50) % w) as i32);
    Rect::new(x, y, x + dx, y + dy).unwrap()
}

fn everything() -> Rect {
    Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap()
}

fn seeds() -> u64 {
    std::env::var("CATFISH_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2)
}

/// A sim of `compute` nodes and one memory node serving Catfish with a reply window of 2,
/// and a tree created on it.
fn sim_with_tree<'a>(seed: u64, compute: usize, faults: Faults) -> Sim<'a> {
    let mut sim = Sim::new(SimConfig {
        compute_nodes: compute,
        memory_nodes: 1,
        region_len: 16 << 20,
        chunk_size: 128 << 10,
        seed,
        faults,
        ..SimConfig::default()
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    sim.set_handler(0, Box::new(CatfishServer::new(max).with_window(2)))
        .unwrap();
    let c0 = sim.client(0).unwrap();
    sim.spawn_with(&c0, 0, |ctx| async move {
        if let Err(e) = CatfishClient::create(ctx.qp(0).unwrap(), 1).await {
            panic!("create: {e}");
        }
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "seed {seed}: create did not finish: {r:?}");
    sim
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    InsertSend,
    InsertWriteImm,
    SearchMessaging,
    SearchOffload,
    SearchAdaptive,
}

const KINDS: [Kind; 5] = [
    Kind::InsertSend,
    Kind::InsertWriteImm,
    Kind::SearchMessaging,
    Kind::SearchOffload,
    Kind::SearchAdaptive,
];

#[derive(Debug, Default)]
struct Run {
    /// The victim's doorbells before and after its operation (dry run).
    posts: Option<(u64, u64)>,
    /// Longest survivor operation, virtual ns.
    stall_ns: u64,
}

fn client_crash_run(kind: Kind, seed: u64, crash_at: Option<u64>) -> Run {
    let mut faults = Faults::none();
    if let Some(k) = crash_at {
        // Clients are numbered as made: the server's endpoint probe, the tree's creator, the
        // loader, then the victim.
        faults = faults.crash_client_at_post(VICTIM_CLIENT, k);
    }
    let rec = Recorder::new(
        (PRELOAD + 1 + SURVIVORS as u64 * OPS) as usize,
        (PRELOAD as usize + 64) * 8 + 4096,
    );
    let errors = RefCell::new(Vec::<String>::new());
    let posts = RefCell::new(None);
    let mut sim = sim_with_tree(seed, 4, faults);
    // The creator loads the tree (recorded, so the checker knows what is there).
    let creator = sim.client(0).unwrap();
    {
        let (rec, errors) = (&rec, &errors);
        sim.spawn_with(&creator, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::open(qp).await.unwrap();
            for i in 0..PRELOAD {
                let (rect, id) = (rect_at(mix(seed ^ i << 8), 64), 1 << 40 | i);
                let slot = rec
                    .invoke(CREATOR, Op::Insert { rect, id }, ctx.now_ns())
                    .unwrap();
                match c.insert(qp, rect, id).await {
                    Ok(()) => rec.complete(slot, Outcome::Done, ctx.now_ns()),
                    Err(e) => errors.borrow_mut().push(format!("creator: {e}")),
                }
            }
        });
    }
    assert_eq!(
        sim.run().unfinished,
        0,
        "seed {seed}: the creator did not finish"
    );
    let victim = sim.client(1).unwrap();
    assert_eq!(victim.ep().client(), VICTIM_CLIENT);
    {
        let (rec, errors, posts) = (&rec, &errors, &posts);
        sim.spawn_with(&victim, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let mut c = CatfishClient::open(qp).await.unwrap();
            let before = qp.counters().snapshot().doorbells;
            let r = match kind {
                Kind::InsertSend | Kind::InsertWriteImm => {
                    if kind == Kind::InsertWriteImm {
                        c.set_transport(Transport::WriteImm);
                    }
                    let (rect, id) = (rect_at(mix(seed ^ 0xdead), 64), 2 << 40);
                    let slot = rec
                        .invoke(VICTIM, Op::Insert { rect, id }, ctx.now_ns())
                        .unwrap();
                    c.insert(qp, rect, id)
                        .await
                        .map(|()| rec.complete(slot, Outcome::Done, ctx.now_ns()))
                }
                _ => {
                    let window = everything();
                    let slot = rec
                        .invoke(VICTIM, Op::Search { window }, ctx.now_ns())
                        .unwrap();
                    let mut hits = Vec::new();
                    let r = match kind {
                        Kind::SearchMessaging => {
                            c.search(qp, window, Mode::Messaging, &mut hits).await
                        }
                        Kind::SearchOffload => c.search(qp, window, Mode::Offload, &mut hits).await,
                        _ => c.search_adaptive(ctx.ep(), window, &mut hits).await,
                    };
                    r.map(|_| {
                        let items: Vec<(u64, u64)> = hits.iter().map(|e| (e.ptr, 0)).collect();
                        rec.complete_items(slot, &items, ctx.now_ns());
                    })
                }
            };
            if let Err(e) = r {
                errors.borrow_mut().push(format!("victim: {e}"));
            }
            *posts.borrow_mut() = Some((before, qp.counters().snapshot().doorbells));
        });
    }
    for s in 1..=SURVIVORS {
        let ctx = sim.client(s as usize % 3).unwrap();
        let (rec, errors) = (&rec, &errors);
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            if s > 1 {
                ctx.sleep(LATE_NS).await;
            }
            let qp = ctx.qp(0).unwrap();
            let mut c = match CatfishClient::open(qp).await {
                Ok(c) => c,
                Err(e) => {
                    errors.borrow_mut().push(format!("survivor {s}: open: {e}"));
                    return;
                }
            };
            if s == 2 {
                c.set_transport(Transport::WriteImm);
            }
            let mut hits = Vec::new();
            for i in 0..OPS {
                let h = mix(seed << 40 ^ u64::from(s) << 24 ^ i);
                let r = if h % 10 < 4 {
                    let (rect, id) = (rect_at(h >> 4, 64), u64::from(s) << 32 | i);
                    let slot = rec
                        .invoke(s, Op::Insert { rect, id }, ctx.now_ns())
                        .unwrap();
                    c.insert(qp, rect, id)
                        .await
                        .map(|()| rec.complete(slot, Outcome::Done, ctx.now_ns()))
                } else {
                    let window = rect_at(h >> 4, 600);
                    let mode = [Mode::Messaging, Mode::Offload, Mode::Adaptive][(h % 3) as usize];
                    let slot = rec.invoke(s, Op::Search { window }, ctx.now_ns()).unwrap();
                    hits.clear();
                    c.search(qp, window, mode, &mut hits).await.map(|_| {
                        let items: Vec<(u64, u64)> = hits.iter().map(|e| (e.ptr, 0)).collect();
                        rec.complete_items(slot, &items, ctx.now_ns());
                    })
                };
                if let Err(e) = r {
                    errors.borrow_mut().push(format!("survivor {s}: {e}"));
                    return;
                }
            }
        });
    }
    let r = sim.run();
    let label = format!("{kind:?} seed {seed} crash at {crash_at:?}");
    let errs = errors.borrow();
    assert!(errs.is_empty(), "{label}: {errs:?}");
    assert_eq!(
        r.unfinished,
        usize::from(crash_at.is_some()),
        "{label}: {r:?}"
    );
    drop(errs);
    drop(sim);
    let h = rec.finish().expect("recorder sized for the workload");
    let report = check(&h, &CheckConfig::new(seed));
    assert!(report.is_ok(), "{label}: {report}");
    let survivors = h.events.iter().filter(|e| e.client <= SURVIVORS);
    let done = survivors.clone().count() as u64;
    assert_eq!(
        done,
        SURVIVORS as u64 * OPS,
        "{label}: survivors' operations"
    );
    Run {
        posts: *posts.borrow(),
        stall_ns: survivors
            .map(|e| e.ret_ns.saturating_sub(e.call_ns))
            .max()
            .unwrap_or(0),
    }
}

/// A survivor never waits on the dead client: none of its operations takes longer than this
/// (virtual time; a survivor operation normally takes a few µs, queueing behind the others'
/// at the one server thread included).
const SURVIVOR_OP_BOUND_NS: u64 = 2_000_000;

#[test]
fn catfish_survives_a_client_crash_at_every_verb() {
    let (mut points, mut worst) = (0u64, 0u64);
    for kind in KINDS {
        let mut kind_points = 0;
        for seed in 1..=seeds() {
            let dry = client_crash_run(kind, seed, None);
            let (from, to) = dry.posts.expect("the victim finished its dry run");
            assert!(to > from, "{kind:?}: the operation rang no doorbell");
            for k in from..to {
                let r = client_crash_run(kind, seed, Some(k));
                assert!(
                    r.stall_ns < SURVIVOR_OP_BOUND_NS,
                    "{kind:?} seed {seed} crash at {k}: a survivor's operation took {} ns",
                    r.stall_ns
                );
                worst = worst.max(r.stall_ns);
                kind_points += 1;
            }
        }
        println!("catfish {kind:?}: {kind_points} crash points");
        points += kind_points;
    }
    println!(
        "catfish: {points} client crash points over {} seeds; survivors' longest operation \
         {worst} ns of virtual time",
        seeds()
    );
}

/// How one client of the node-crash campaign ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Done,
    NoReply,
    Dead,
}

/// Eight clients, mixed workload; the memory node crashes at `crash_ns` (if given). Returns
/// each client's end and when it came, and when the workload started.
fn node_crash_run(seed: u64, crash_ns: Option<u64>) -> (u64, Vec<(End, u64)>) {
    const CLIENTS: usize = 8;
    const N: u64 = 60;
    let mut faults = Faults::none();
    if let Some(t) = crash_ns {
        faults = faults.crash_node_at(0, t);
    }
    let ends = RefCell::new(Vec::new());
    let mut sim = sim_with_tree(seed, 4, faults);
    let start = sim.now_ns();
    for n in 0..CLIENTS {
        let ctx = sim.client(n % 4).unwrap();
        let ends = &ends;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let qp = ctx.qp(0).unwrap();
            let end = async {
                let mut c = CatfishClient::open(qp).await?;
                if n % 2 == 1 {
                    c.set_transport(Transport::WriteImm);
                }
                let mut hits = Vec::new();
                for i in 0..N {
                    let h = mix(seed << 40 ^ (n as u64) << 24 ^ i);
                    hits.clear();
                    match h % 5 {
                        0 | 1 => {
                            c.insert(qp, rect_at(h >> 4, 64), (n as u64) << 32 | i)
                                .await?
                        }
                        2 => {
                            c.search(qp, rect_at(h >> 4, 1500), Mode::Messaging, &mut hits)
                                .await?;
                        }
                        3 => {
                            c.search(qp, rect_at(h >> 4, 1500), Mode::Offload, &mut hits)
                                .await?;
                        }
                        _ => {
                            c.search_adaptive(ctx.ep(), rect_at(h >> 4, 1500), &mut hits)
                                .await?;
                        }
                    }
                }
                Ok::<(), CatfishError>(())
            }
            .await;
            let end = match end {
                Ok(()) => End::Done,
                Err(CatfishError::NoReply { .. }) => End::NoReply,
                Err(
                    CatfishError::Fabric(FabricError::RetryExceeded { .. } | FabricError::Flushed)
                    | CatfishError::Alloc(AllocError::Fabric(
                        FabricError::RetryExceeded { .. } | FabricError::Flushed,
                    )),
                ) => End::Dead,
                Err(e) => panic!("client {n}: unexpected error {e}"),
            };
            ends.borrow_mut().push((end, ctx.now_ns()));
        });
    }
    let r = sim.run();
    assert_eq!(
        r.unfinished, 0,
        "seed {seed} crash at {crash_ns:?}: clients hung"
    );
    drop(sim);
    (start, ends.into_inner())
}

#[test]
fn catfish_clients_end_when_the_memory_node_dies_mid_request() {
    // Dead peer bound of the sim's NIC model: ack_timeout x (retry_cnt + 1).
    let dead_ns = 67_108_864 * 8;
    let bound = DEFAULT_REPLY_TIMEOUT_NS + dead_ns + 10_000_000;
    let moments: u64 = 24;
    let (mut runs, mut no_reply, mut dead, mut done, mut worst) = (0, 0, 0, 0, 0u64);
    for seed in 1..=seeds() {
        let (start, dry) = node_crash_run(seed, None);
        assert!(dry.iter().all(|e| e.0 == End::Done), "seed {seed}: {dry:?}");
        let finish = dry.iter().map(|e| e.1).max().unwrap();
        for k in 0..moments {
            let crash = start + (finish - start) * k / moments;
            let (_, ends) = node_crash_run(seed, Some(crash));
            assert_eq!(ends.len(), 8);
            for (end, at) in ends {
                match end {
                    End::Done => done += 1,
                    End::NoReply => no_reply += 1,
                    End::Dead => dead += 1,
                }
                if end != End::Done {
                    let after = at.saturating_sub(crash);
                    assert!(
                        after <= bound,
                        "seed {seed} crash at {crash}: a client ended {after} ns after it"
                    );
                    worst = worst.max(after);
                }
            }
            runs += 1;
        }
    }
    println!(
        "catfish node crash: {runs} runs, 0 hung; client ends: {done} done, {no_reply} by the \
         reply deadline, {dead} by the fabric's dead-peer error; longest end {worst} ns after \
         the crash (bound {bound} ns)"
    );
    assert!(no_reply > 0, "no crash caught a client waiting for a reply");
}

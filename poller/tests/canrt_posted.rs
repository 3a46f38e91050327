//! CANRT's paper-semantics write (`WriteAck::Posted`) on the simulated cluster: it returns
//! once its WRITE_WITH_IMM is posted (unsignaled; on a fabric that waits for unsignaled
//! posts, once it completes), before the server applied it, so it is faster than the
//! default (`WriteAck::Applied`, which waits for the server's acknowledgement) and is not
//! read-your-writes at once; the server still applies every item, so a later read sees it.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer, WriteAck};
use remora_core::fabric::{Endpoint, QueuePair, Verb};
use remora_core::index::KvIndex;
use remora_poller::sim::{ClientCtx, Model, Sim, SimConfig, SimEndpoint};
use std::cell::RefCell;

#[path = "common/sim_run.rs"]
mod sim_run;

const KEYS: u64 = 64;

/// What one client's timed updates cost.
struct Run {
    /// Mean virtual ns per update.
    per: u64,
    /// Keys a reader found with their new value after a pause of 100 µs.
    found: u64,
    /// Round trips (dependent waits) the updates took.
    round_trips: u64,
    /// Messages the client received while it updated (the server's acknowledgements).
    recvs: u64,
}

fn run(ack: WriteAck) -> (u64, u64) {
    let r = run_on(ack, Model::default());
    (r.per, r.found)
}

/// A sim of `model`: one compute node, CANRT's server on the memory node.
fn canrt_sim<'a>(model: Model) -> Sim<'a> {
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        seed: 3,
        model,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
    sim
}

/// A tree of 8-slot nodes written with `ack`, holding `KEYS` keys (value 0, upserted with
/// splits), and 100 µs for the server to apply them.
async fn loaded(ctx: &ClientCtx, ack: WriteAck) -> Canrt<'_, SimEndpoint> {
    let cfg = CanrtConfig {
        slots: 8,
        ack,
        ..CanrtConfig::new(0)
    };
    let t = Canrt::open(ctx.ep(), cfg).await.unwrap();
    for k in 0..KEYS {
        t.upsert(&(k << 20).to_be_bytes(), &0u64.to_le_bytes())
            .await
            .unwrap();
    }
    ctx.sleep(100_000).await;
    t
}

/// `KEYS` updates by one client on a sim of `model`.
fn run_on(ack: WriteAck, model: Model) -> Run {
    let mut sim = canrt_sim(model);
    sim_run::run_on(&mut sim, 0, async move |ctx| {
        // Load first (with splits), then time updates of the loaded keys.
        let t = loaded(&ctx, ack).await;
        let qp = ctx.ep().qp(0).unwrap();
        let before = qp.counters().snapshot();
        // Each update alone (the server idle, the node's lock free): its own latency.
        let mut total = 0;
        for k in 0..KEYS {
            let start = ctx.now_ns();
            t.upsert(&(k << 20).to_be_bytes(), &(k + 1).to_le_bytes())
                .await
                .unwrap();
            total += ctx.now_ns() - start;
            ctx.sleep(20_000).await;
        }
        let per = total / KEYS;
        let after = qp.counters().snapshot();
        let round_trips = after.round_trips - before.round_trips;
        let recvs = after.verb(Verb::Recv) - before.verb(Verb::Recv);
        ctx.sleep(100_000).await;
        let mut found = 0;
        let mut w = [0u8; 8];
        for k in 0..KEYS {
            if t.get(&(k << 20).to_be_bytes(), &mut w)
                .await
                .unwrap()
                .is_some()
                && u64::from_le_bytes(w) == k + 1
            {
                found += 1;
            }
        }
        Run {
            per,
            found,
            round_trips,
            recvs,
        }
    })
}

#[test]
fn posted_writes_return_before_the_server_applies_and_are_applied_later() {
    let (applied, found_a) = run(WriteAck::Applied);
    let (posted, found_p) = run(WriteAck::Posted);
    println!("update: applied {applied} ns, posted {posted} ns");
    assert_eq!(found_a, KEYS);
    assert_eq!(found_p, KEYS, "the server applies every posted item");
    // The applied write also waits for the server's apply and its acknowledgement (and
    // posts a flush READ): at least the server's service and a one-way trip more.
    assert!(
        posted + 500 < applied,
        "posted {posted} ns, applied {applied} ns"
    );
    assert!(
        !CanrtConfig {
            ack: WriteAck::Posted,
            ..CanrtConfig::new(0)
        }
        .linearizable()
    );
    assert!(CanrtConfig::new(0).linearizable());
}

/// With unsignaled posts returning at the doorbell (as on verbs; the canrt profile's
/// `unsignaled_at_post`), a posted update waits only for its lock round trip (the
/// FETCH_AND_ADD with the meta word's READ): one round trip per write, a whole round trip faster
/// than waiting for the append's completion. Its connection is quiet: the server sends no
/// acknowledgement, so the writer receives only its credits.
#[test]
fn a_posted_write_waits_for_its_lock_round_trip_only_and_hears_only_credits() {
    let waited = run_on(WriteAck::Posted, Model::default());
    let at_post = run_on(
        WriteAck::Posted,
        Model {
            unsignaled_at_post: 1.0,
            ..Model::default()
        },
    );
    println!(
        "posted update: {} ns ({} round trips) waiting for the append, {} ns ({} round \
         trips) returning at its doorbell",
        waited.per, waited.round_trips, at_post.per, at_post.round_trips
    );
    assert_eq!(at_post.found, KEYS, "the server applies every posted item");
    // (A few lock polls and torn retries on top.)
    assert!(waited.round_trips >= 2 * KEYS, "{}", waited.round_trips);
    assert!(
        at_post.round_trips <= KEYS + KEYS / 8,
        "{}",
        at_post.round_trips
    );
    // The append's round trip: two one-way trips at least.
    let one_way = Model::default().one_way_ns as u64;
    assert!(
        at_post.per + 2 * one_way <= waited.per,
        "{} ns vs {} ns",
        at_post.per,
        waited.per
    );
    // No acknowledgement sent to a quiet connection: only its credits (flow control, one
    // per half window of appends).
    let credits = KEYS / (u64::from(CanrtConfig::new(0).posted_window) / 2);
    assert!(at_post.recvs <= credits + 1, "{} received", at_post.recvs);
    assert!(waited.recvs <= credits + 1, "{} received", waited.recvs);
}

/// Posted appends are flow-controlled: a writer keeps fewer of them unconsumed by the
/// server than the server has receives on its connection. Without it a writer that runs
/// ahead of the applier (here a server of 8 receives per connection, slowed down, and
/// writes to many data nodes, whose locks are free) uses up the server's receives, its
/// WRITE_WITH_IMMs are RNR NAKed past the retry limit and the queue pair breaks ("work
/// request flushed: the queue pair is in the error state").
#[test]
fn posted_writes_never_outrun_the_servers_receives() {
    const N: u64 = 600;
    let out = RefCell::new(None);
    let model = Model {
        recv_depth: 8.0,
        unsignaled_at_post: 1.0,
        // An applier much slower than the writer's lock round trip (a resize-sized stall
        // at every message).
        server_handler_ns: 200_000.0,
        ..Model::default()
    };
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 1,
        seed: 5,
        model,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(CanrtServer::new())).unwrap();
    let ctx = sim.client(0).unwrap();
    let out_ref = &out;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let cfg = CanrtConfig {
            slots: 16,
            ack: WriteAck::Posted,
            // Below the server's 8 receives (less room for the control messages).
            posted_window: 4,
            ..CanrtConfig::new(0)
        };
        let t = Canrt::open(ctx.ep(), cfg).await.unwrap();
        let mut errors = Vec::new();
        for k in 0..N {
            if let Err(e) = t
                .upsert(&(k << 40).to_be_bytes(), &0u64.to_le_bytes())
                .await
            {
                errors.push(format!("insert {k}: {e}"));
                break;
            }
        }
        ctx.sleep(500_000_000).await;
        // Updates striding over the data nodes: each finds its node's lock free.
        for i in 0..N {
            let k = i * 17 % N;
            if let Err(e) = t.upsert(&(k << 40).to_be_bytes(), &k.to_le_bytes()).await {
                errors.push(format!("update {k}: {e}"));
                break;
            }
        }
        ctx.sleep(500_000_000).await;
        let mut found = 0;
        let mut w = [0u8; 8];
        for k in 0..N {
            match t.get(&(k << 40).to_be_bytes(), &mut w).await {
                Ok(Some(_)) if u64::from_le_bytes(w) == k => found += 1,
                Ok(_) => {}
                Err(e) => {
                    errors.push(format!("get {k}: {e}"));
                    break;
                }
            }
        }
        let rnr = ctx.ep().qp(0).unwrap().counters().snapshot();
        *out_ref.borrow_mut() = Some((errors, found, rnr, t.stats()));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let (errors, found, c, st) = out.into_inner().unwrap();
    println!("{found} of {N} found; {c:?}; {st:?}");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(found, N, "the server applies every posted item");
    // The applier is ~200 us a message: the updates wait for credits, and say so.
    assert!(
        st.credit_waits >= N / 4 && st.credit_wait_ns >= st.credit_waits * 100_000,
        "credit waits counted: {st:?}"
    );
}

/// What `update`s of `KEYS` loaded keys, one at a time, and of one absent key cost one
/// client: READ (and atomic result) bytes per update, and whether the absent key was then
/// found.
fn updates(ack: WriteAck) -> (u64, bool, bool) {
    let mut sim = canrt_sim(Model::default());
    sim_run::run_on(&mut sim, 0, async move |ctx| {
        let t = loaded(&ctx, ack).await;
        let qp = ctx.ep().qp(0).unwrap();
        let before = qp.counters().snapshot();
        for k in 0..KEYS {
            assert!(
                t.update(&(k << 20).to_be_bytes(), &(k + 1).to_le_bytes())
                    .await
                    .unwrap()
            );
            // The server idle again and the node's lock free before the next update.
            ctx.sleep(20_000).await;
        }
        let read = qp.counters().snapshot().bytes_in - before.bytes_in;
        let absent = (KEYS << 20) | 1;
        let said = t
            .update(&absent.to_be_bytes(), &7u64.to_le_bytes())
            .await
            .unwrap();
        ctx.sleep(100_000).await;
        let mut w = [0u8; 8];
        let found = t
            .get(&absent.to_be_bytes(), &mut w)
            .await
            .unwrap()
            .is_some();
        (read / KEYS, said, found)
    })
}

/// The paper's update (Algorithm 1: every write's client steps are the same but the
/// opflag) locks with 8-byte words only, the lock's FETCH_AND_ADD and the meta word, and
/// appends without reading the node; so an update of an absent key inserts it, as the
/// paper's server validates the new item whether or not it found an old one. The default
/// update reads the node under its lock: it reports an absent key and does not insert it.
#[test]
fn a_posted_update_reads_no_node_and_the_default_update_does() {
    let (posted, said_p, found_p) = updates(WriteAck::Posted);
    let (applied, said_a, found_a) = updates(WriteAck::Applied);
    println!("bytes read per update: posted {posted}, applied {applied}");
    // A node of 8 slots of 8-byte keys and values is 16 + 8 x 24 = 208 bytes: the default
    // update READs it (and its two bracketing words) every time; the posted one reads the
    // FETCH_AND_ADD's 8 bytes and the meta word's 8, and its share of the credits and of
    // the resizes' prefix reloads (full nodes: 39 B in all when this was written).
    assert!(applied >= 208, "applied update read {applied} B");
    assert!(
        posted < 64 && posted * 4 < applied,
        "posted update read {posted} B"
    );
    assert!(
        said_p && found_p,
        "posted update of an absent key: {said_p} {found_p}"
    );
    assert!(
        !said_a && !found_a,
        "applied update of an absent key: {said_a} {found_a}"
    );
}

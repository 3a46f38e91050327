//! What Erda's server believes of its clients, end to end on the simulated cluster: the
//! holder it names to waiters (who then fence it) is the connection's client as the fabric
//! knows it (`Handler::on_connect`), never the id a hello claims.
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer, LEASE_NS};
use remora_core::fabric::{Endpoint, Op, QueuePair};
use remora_core::index::KvIndex;
use remora_layouts::GlobalAddr;
use remora_layouts::erda::{
    Reply, ReqOp, Request, SUPERBLOCK_LEN, Status, Superblock, hello_slots,
};
use remora_poller::sim::{Sim, SimConfig};
use std::cell::{Cell, RefCell};

const REGION: u64 = 32 << 20;

/// Finding 4a of the hostile-client campaign (`poller/tests/hostile_clients.rs`): a client
/// whose hello names another client's fabric id (the victim's) takes a grant and never
/// writes it. The key's next writer waits a lease and fences the holder the server named:
/// that used to be the victim, whose next write then failed. Now the lying hello is
/// refused; the liar's own session (naming no id) is quoted under its real id, it is the
/// one fenced, and the victim writes on.
#[test]
fn a_hello_naming_another_client_gets_nobody_else_fenced() {
    let victim_out = Cell::new(None);
    let lie_out = Cell::new(None);
    let waited_out = RefCell::new(None);
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 3,
        memory_nodes: 1,
        region_len: REGION,
        seed: 3,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(ErdaServer::new(ErdaConfig::small())))
        .unwrap();
    let victim = sim.client(0).unwrap();
    let liar = sim.client(1).unwrap();
    let waiter = sim.client(2).unwrap();
    let victim_id = victim.ep().client_id();
    assert_ne!(victim_id, liar.ep().client_id());
    let ms = 1_000_000;
    let (victim_ok, lie, waited) = (&victim_out, &lie_out, &waited_out);
    sim.spawn_with(&victim, 0, move |ctx| async move {
        let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
            .await
            .unwrap();
        e.upsert(b"mine", &[1; 8]).await.unwrap();
        ctx.ep().pause(3 * LEASE_NS).await;
        let later = e.upsert(b"mine", &[2; 8]).await;
        victim_ok.set(Some(later.map_err(|e| e.to_string())));
    });
    sim.spawn_with(&liar, 1, move |ctx| async move {
        ctx.ep().pause(ms).await;
        let qp = ctx.qp(0).unwrap();
        let mut buf = [0u8; 64];
        let hello = |claim: u32| {
            let qp = &qp;
            async move {
                qp.send(&hello_slots(claim, 1)).await.unwrap();
                let mut buf = [0u8; 64];
                let r = qp.recv(&mut buf).await.unwrap();
                Reply::decode(&buf[..r.len as usize]).unwrap()
            }
        };
        let mut w = hello(victim_id).await;
        lie.set(Some(w.status));
        if w.status != Status::Welcome {
            w = hello(0).await;
        }
        assert_eq!(w.status, Status::Welcome);
        let mut raw = [0u8; SUPERBLOCK_LEN];
        qp.read(GlobalAddr::new(0, w.arg), &mut raw).await.unwrap();
        let sb = Superblock::decode(&raw, REGION).unwrap();
        let req = Request::new(ReqOp::Upsert, 1, b"k", 8).unwrap().encode();
        qp.post(&mut [Op::WriteImm {
            remote: GlobalAddr::new(0, sb.mailbox(w.seq)),
            local: &req,
            imm: w.seq,
        }])
        .await
        .unwrap();
        let r = qp.recv(&mut buf).await.unwrap();
        let g = Reply::decode(&buf[..r.len as usize]).unwrap();
        assert_eq!(g.status, Status::Granted);
        // Never written; the connection stays open.
        ctx.ep().pause(4 * LEASE_NS).await;
    });
    sim.spawn_with(&waiter, 2, move |ctx| async move {
        ctx.ep().pause(2 * ms).await;
        let e = Erda::open(ctx.ep(), ErdaClientConfig::default())
            .await
            .unwrap();
        let r = e.upsert(b"k", &[3; 8]).await.map_err(|e| e.to_string());
        *waited.borrow_mut() = Some((r, e.stats().fenced));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let (r, fenced) = waited.take().unwrap();
    assert_eq!(r, Ok(()), "the waiter's write");
    assert_eq!(fenced, 1, "the waiter fenced the grant's holder");
    assert_eq!(
        victim_ok.take(),
        Some(Ok(())),
        "the victim was not fenced in the liar's place"
    );
    assert_eq!(lie_out.get(), Some(Status::BadRequest), "the lying hello");
}

/// On the soft fabric: a writer takes a grant and never writes it (here by hand, through
/// its own mailbox). The key's next writer waits a lease and fences it; the revoke it then
/// sends is no longer trusted, so the grant is settled only because the node ends a fenced
/// client's connection and Erda settles its grants then (`Handler::on_disconnect`). The
/// holder the waiter fenced is the one the node knows (`Handler::on_connect`).
#[test]
fn on_soft_a_fenced_writers_grant_is_settled_when_its_connection_ends() {
    use remora_core::block_on::block_on;
    use remora_core::lease::LeaseConfig;
    use remora_poller::soft::{NodeConfig, SoftMemoryNode};
    let n = SoftMemoryNode::create_with(
        NodeConfig {
            region_len: REGION,
            ..NodeConfig::default()
        },
        Box::new(ErdaServer::new(ErdaConfig::small())),
    )
    .unwrap();
    let _srv = n.spawn_server();
    let (ep_a, ep_b) = (n.endpoint().unwrap(), n.endpoint().unwrap());
    let cfg = ErdaClientConfig {
        lease: LeaseConfig {
            lease_ns: 20_000_000,
            deadline_ns: 5_000_000_000,
            ..LeaseConfig::default()
        },
        ..ErdaClientConfig::default()
    };
    block_on(async {
        let a = Erda::open(&ep_a, cfg).await.unwrap();
        a.upsert(b"k", &[1; 8]).await.unwrap();
        let qp = ep_a.qp(0).unwrap();
        let req = Request::new(ReqOp::Upsert, 9, b"k", 8).unwrap().encode();
        qp.post(&mut [Op::WriteImm {
            remote: GlobalAddr::new(0, a.superblock().mailbox(a.client_id())),
            local: &req,
            imm: a.client_id(),
        }])
        .await
        .unwrap();
        let mut buf = [0u8; 64];
        let r = qp.recv(&mut buf).await.unwrap();
        let g = Reply::decode(&buf[..r.len as usize]).unwrap();
        assert_eq!(g.status, Status::Granted);
        let b = Erda::open(&ep_b, cfg).await.unwrap();
        let t = ep_b.now_ns();
        b.upsert(b"k", &[2; 8]).await.unwrap();
        let took = ep_b.now_ns() - t;
        assert_eq!(b.stats().fenced, 1);
        assert!(took < 2_000_000_000, "the wait took {took} ns");
        let mut out = [0u8; 8];
        assert_eq!(b.get(b"k", &mut out).await.unwrap(), Some(8));
        assert_eq!(out, [2; 8]);
        assert!(
            a.upsert(b"k", &[3; 8]).await.is_err(),
            "the fenced writer is cut off"
        );
    });
}

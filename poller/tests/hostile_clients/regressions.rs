//! Bugs the campaigns found, each pinned by a seed-free test.
use super::*;

/// Found by this campaign (seed-free: any replay of a hello): one WORT connection that
/// greeted the node again and again took a new request ring each time, until all
/// `MAX_CLIENTS` were its own and every later client was refused `TooManyClients`. A
/// connection now keeps the one ring it has (its hello is answered with it again).
#[test]
fn a_wort_connection_replaying_its_hello_takes_one_ring() {
    use remora_core::wort::MAX_CLIENTS;
    use remora_core::wort::layout::{HELLO, decode_reply};
    let opened = RefCell::new(None);
    let mut sim = Sim::new(sim_cfg(1, 32 << 20)).unwrap();
    sim.set_handler(0, Box::new(WortServer::new(Kind::Wort)))
        .unwrap();
    let hostile = sim.client(3).unwrap();
    sim.spawn_with(&hostile, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut buf = vec![0u8; qp.max_message()];
        let mut ids = std::collections::BTreeSet::new();
        for _ in 0..MAX_CLIENTS + 8 {
            qp.send(&HELLO).await.unwrap();
            let r = qp.recv(&mut buf).await.unwrap();
            let reply = decode_reply(&buf[..r.len as usize]).unwrap();
            ids.insert((reply.status as u8, reply.seq));
        }
        assert_eq!(ids.len(), 1, "one connection took {} rings", ids.len());
    });
    assert_eq!(sim.run().unfinished, 0);
    let honest = sim.client(0).unwrap();
    let opened = &opened;
    sim.spawn_with(&honest, 0, move |ctx| async move {
        let r = Wort::open(ctx.ep(), Default::default()).await;
        *opened.borrow_mut() = Some(r.map(|_| ()).map_err(|e| e.to_string()));
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    let r = opened.borrow_mut().take().expect("the honest open ran");
    assert!(r.is_ok(), "an honest client was refused: {r:?}");
}

/// Found by reading the Catfish server against the campaign's "names another client's
/// state" case: a `Grow` naming memory beyond the region allocator's bump pointer (a chunk
/// no client has been given yet) was taken into the tree's arenas; the honest client that
/// was later handed that chunk had its own `Grow` refused as overlapping, and its insert
/// failed. The server now takes only allocated memory.
#[test]
fn catfish_refuses_a_grow_of_memory_nobody_allocated() {
    use remora_layouts::catfish::{Opcode, Request, ResponseHeader, Status};
    use remora_layouts::region::NEXT_CHUNK_OFFSET;
    let chunk = 16u64 << 10;
    let failures = RefCell::new(Vec::<String>::new());
    let mut sim = Sim::new(SimConfig {
        chunk_size: chunk,
        ..sim_cfg(1, 4 << 20)
    })
    .unwrap();
    let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
    sim.set_handler(0, Box::new(CatfishServer::new(max)))
        .unwrap();
    let c0 = sim.client(0).unwrap();
    let failures = &failures;
    sim.spawn_with(&c0, 0, move |ctx| async move {
        CatfishClient::create_tree(ctx.qp(0).unwrap(), 1, 8, TreeKind::RStar)
            .await
            .unwrap();
    });
    assert_eq!(sim.run().unfinished, 0);
    let evil = sim.client(1).unwrap();
    sim.spawn_with(&evil, 0, move |ctx| async move {
        // The hostile request: the next chunk the allocator will hand out.
        let qp = ctx.qp(0).unwrap();
        let mut next = [0u8; 8];
        qp.read(GlobalAddr::new(0, NEXT_CHUNK_OFFSET), &mut next)
            .await
            .unwrap();
        let grow = Request {
            op: Opcode::Grow,
            acked: 0,
            req_id: 7,
            rect: Rect::new(0, 0, 0, 0).unwrap(),
            arg0: GlobalAddr::new(0, u64::from_le_bytes(next)).raw(),
            arg1: chunk,
        };
        qp.send(&grow.encode()).await.unwrap();
        let mut buf = vec![0u8; qp.max_message()];
        let r = qp.recv(&mut buf).await.unwrap();
        let status = ResponseHeader::decode(&buf[..r.len as usize])
            .unwrap()
            .status;
        if status == Status::Ok {
            failures
                .borrow_mut()
                .push("a grow of unallocated memory was taken".into());
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    let honest = sim.client(2).unwrap();
    sim.spawn_with(&honest, 0, move |ctx| async move {
        // The honest client grows the tree through that chunk and on.
        let qp = ctx.qp(0).unwrap();
        let mut cf = CatfishClient::open(qp).await.unwrap();
        for i in 0..1500u64 {
            let x = (i * 37 % 3000) as i32;
            let rect = Rect::new(x, x / 2, x + 2, x / 2 + 2).unwrap();
            if let Err(e) = cf.insert(qp, rect, i).await {
                failures
                    .borrow_mut()
                    .push(format!("honest insert {i}: {e}"));
                return;
            }
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    drop(sim);
    assert!(failures.borrow().is_empty(), "{:?}", failures.borrow());
}

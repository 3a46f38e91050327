//! The campaigns: every memory-node service (WORT, WOART, CANRT, Erda and its baselines,
//! echo, Catfish) under hostile clients while honest clients run a checked workload.
use super::*;

/// A key-value service: honest `lin_client`s on compute nodes 0..3 (after `prepare` ran
/// alone), hostile clients on node 3, and the honest history checked.
macro_rules! kv_campaign {
    ($name:expr, $region_len:expr, $handler:expr, |$ep:ident| $open:expr, prepare: $prepare:expr,
     own_writes: $own_writes:expr, foreign: $foreign:expr) => {{
        for seed in 1..=env_or("HOSTILE_SEEDS", 2) {
            println!("{} seed {seed}: running", $name);
            let region_len: u64 = $region_len;
            let log = Rc::new(RefCell::new(Log::default()));
            let sent = Rc::new(RefCell::new(Sent::default()));
            let rec = Recorder::new(
                (HONEST as u64 * OPS) as usize,
                (HONEST as u64 * OPS * 17) as usize,
            );
            let errors = RefCell::new(Vec::<String>::new());
            let mut sim = Sim::new(sim_cfg(seed, region_len)).unwrap();
            sim.set_handler(
                0,
                Box::new(Tap {
                    inner: $handler,
                    log: log.clone(),
                }),
            )
            .unwrap();
            if $prepare {
                let c0 = sim.client(0).unwrap();
                sim.spawn_with(&c0, 0, move |ctx| async move {
                    let $ep = ctx.ep();
                    $open.await.unwrap();
                });
                assert_eq!(sim.run().unfinished, 0, "seed {seed}: prepare");
            }
            for c in 0..HONEST {
                let ctx = sim.client(c as usize % 3).unwrap();
                let (rec, errors) = (&rec, &errors);
                sim.spawn_with(&ctx, 0, move |ctx| async move {
                    let $ep = ctx.ep();
                    let run = async {
                        let t = $open.await.map_err(|e| format!("open: {e}"))?;
                        let spec = LinSpec {
                            cold: 32,
                            ..LinSpec::new(1 + c, OPS, seed, false)
                        };
                        let clock = || ctx.now_ns();
                        lin_client(&t, &spec, rec, &clock)
                            .await
                            .map_err(|e| e.to_string())
                    };
                    if let Err(e) = run.await {
                        errors.borrow_mut().push(format!("honest client {c}: {e}"));
                    }
                });
            }
            for hc in 0..HOSTILE {
                let ctx = sim.client(3).unwrap();
                let (log, sent) = (log.clone(), sent.clone());
                let rng = Rng(seed << 8 | hc as u64);
                sim.spawn_with(&ctx, 100 + hc as u64, move |ctx| async move {
                    // First an own workload on own keys through a recording handle: the
                    // valid messages the attack replays and mutates.
                    let own = Recording(Rc::default());
                    {
                        let hooked = HookedEp::new(ctx.ep(), |_| own.clone());
                        let $ep = &hooked;
                        if let Ok(t) = $open.await {
                            let mut out = [0u8; 512];
                            for j in 0..24u64 {
                                let k = own_key(j % 6 + 6 * hc as u64);
                                let v = [j as u8; 8];
                                let _ = match j % 4 {
                                    0 => t.upsert(&k, &v).await.map(|_| ()),
                                    1 => t.update(&k, &v).await.map(|_| ()),
                                    2 => t.get(&k, &mut out).await.map(|_| ()),
                                    _ => t.delete(&k).await.map(|_| ()),
                                };
                            }
                        }
                    }
                    let own = own.0;
                    hostile(
                        ctx,
                        Attack {
                            log,
                            own,
                            own_writes: $own_writes,
                            foreign: $foreign,
                            rng,
                            msgs: hostile_msgs(),
                            region_len,
                            sent,
                        },
                    )
                    .await
                });
            }
            let r = sim.run();
            // No honest client may fail. (Erda's Read-After-Write baseline once did: a
            // hostile copy of a reservation request naming an honest key, never written,
            // blocked that key for good, seeds 1, 6 and 8; reservations have a lease now.)
            assert!(
                errors.borrow().is_empty(),
                "{} seed {seed}: {:?}",
                $name,
                errors.borrow()
            );
            assert_eq!(r.unfinished, 0, "{} seed {seed}: a client hung", $name);
            drop(sim);
            let h = rec.finish().expect("recorder sized for the workload");
            assert_eq!(h.events.len() as u64, HONEST as u64 * OPS);
            let lin = check(&h, &CheckConfig::new(seed));
            report($name, seed, &log, &sent);
            assert!(lin.is_ok(), "{} seed {seed}: {lin}", $name);
        }
    }};
}

#[test]
fn wort_survives_hostile_clients() {
    kv_campaign!("wort", 32 << 20, Box::new(WortServer::new(Kind::Wort)),
        |ep| Wort::open(ep, Default::default()), prepare: false, own_writes: true, foreign: true);
}

#[test]
fn woart_survives_hostile_clients() {
    kv_campaign!("woart", 32 << 20, Box::new(WortServer::new(Kind::Woart)),
        |ep| Wort::open(ep, Default::default()), prepare: false, own_writes: true, foreign: true);
}

#[test]
fn canrt_survives_hostile_clients() {
    let cfg = CanrtConfig {
        slots: 8,
        ..CanrtConfig::new(0)
    };
    kv_campaign!("canrt", 32 << 20, Box::new(CanrtServer::new()),
        |ep| Canrt::open(ep, cfg), prepare: true, own_writes: false, foreign: true);
}

#[test]
fn erda_survives_hostile_clients() {
    kv_campaign!("erda", 32 << 20, Box::new(ErdaServer::new(ErdaConfig::small())),
        |ep| Erda::open(ep, ErdaClientConfig::default()), prepare: false, own_writes: true, foreign: true);
}

fn baseline_store() -> ErdaConfig {
    ErdaConfig {
        buckets: 4096,
        segment_bytes: 8 << 10,
        head_bytes: 64 << 10,
        ..ErdaConfig::small()
    }
}

#[test]
fn erda_redo_survives_hostile_clients() {
    kv_campaign!("erda-redo", 16 << 20,
        Box::new(BaselineServer::new(Scheme::Redo, baseline_store())),
        |ep| Baseline::open(ep, Scheme::Redo, ErdaClientConfig::default()), prepare: false, own_writes: false, foreign: false);
}

#[test]
fn erda_raw_survives_hostile_clients() {
    kv_campaign!("erda-raw", 16 << 20,
        Box::new(BaselineServer::new(Scheme::Raw, baseline_store())),
        |ep| Baseline::open(ep, Scheme::Raw, ErdaClientConfig::default()), prepare: false, own_writes: false, foreign: false);
}

#[test]
fn echo_survives_hostile_clients() {
    for seed in 1..=env_or("HOSTILE_SEEDS", 2) {
        let region_len = 4 << 20;
        let log = Rc::new(RefCell::new(Log::default()));
        let sent = Rc::new(RefCell::new(Sent::default()));
        let errors = RefCell::new(Vec::<String>::new());
        let mut sim = Sim::new(sim_cfg(seed, region_len)).unwrap();
        sim.set_handler(
            0,
            Box::new(Tap {
                inner: Box::new(Echo),
                log: log.clone(),
            }),
        )
        .unwrap();
        for c in 0..HONEST {
            let ctx = sim.client(c as usize % 3).unwrap();
            let errors = &errors;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let qp = ctx.qp(0).unwrap();
                let mut buf = vec![0u8; qp.max_message()];
                for i in 0..OPS {
                    let n = ctx.rand_below(256) as usize;
                    let m: Vec<u8> = (0..n)
                        .map(|j| (i as usize * 31 + j + c as usize) as u8)
                        .collect();
                    let ok = async {
                        qp.send(&m).await?;
                        let r = qp.recv(&mut buf).await?;
                        Ok::<_, FabricError>(buf[..r.len as usize] == m[..])
                    };
                    match ok.await {
                        Ok(true) => {}
                        Ok(false) => return errors.borrow_mut().push(format!("{c}: wrong echo")),
                        Err(e) => return errors.borrow_mut().push(format!("{c}: {e}")),
                    }
                }
            });
        }
        spawn_hostile(&mut sim, &log, seed, region_len, &sent);
        let r = sim.run();
        assert!(
            errors.borrow().is_empty(),
            "echo seed {seed}: {:?}",
            errors.borrow()
        );
        assert_eq!(r.unfinished, 0, "echo seed {seed}: a client hung");
        drop(sim);
        report("echo", seed, &log, &sent);
    }
}

/// Catfish: honest clients insert rectangles of their own ids, then find every one of them
/// by fast messaging and by offloading, while the hostile clients send.
#[test]
fn catfish_survives_hostile_clients() {
    for seed in 1..=env_or("HOSTILE_SEEDS", 2) {
        println!("catfish seed {seed}: running");
        let region_len = 32 << 20;
        let log = Rc::new(RefCell::new(Log::default()));
        let sent = Rc::new(RefCell::new(Sent::default()));
        let errors = RefCell::new(Vec::<String>::new());
        let mut sim = Sim::new(sim_cfg(seed, region_len)).unwrap();
        let max = sim.endpoint(0).unwrap().qp(0).unwrap().max_message();
        sim.set_handler(
            0,
            Box::new(Tap {
                inner: Box::new(CatfishServer::new(max)),
                log: log.clone(),
            }),
        )
        .unwrap();
        let c0 = sim.client(0).unwrap();
        sim.spawn_with(&c0, 0, |ctx| async move {
            CatfishClient::create_tree(ctx.qp(0).unwrap(), 1, 8, TreeKind::RStar)
                .await
                .unwrap();
        });
        assert_eq!(sim.run().unfinished, 0, "seed {seed}: create");
        for c in 0..HONEST {
            let ctx = sim.client(c as usize % 3).unwrap();
            let errors = &errors;
            sim.spawn_with(&ctx, 0, move |ctx| async move {
                let qp = ctx.qp(0).unwrap();
                let run = async {
                    let mut cf = CatfishClient::open(qp).await.map_err(|e| e.to_string())?;
                    let mut mine = Vec::new();
                    for i in 0..OPS / 3 {
                        let x = ctx.rand_below(4000) as i32;
                        let y = ctx.rand_below(4000) as i32;
                        let rect = Rect::new(x, y, x + 5, y + 5).unwrap();
                        let id = (c as u64) << 32 | i;
                        cf.insert(qp, rect, id).await.map_err(|e| e.to_string())?;
                        mine.push((rect, id));
                    }
                    let mut out = Vec::new();
                    for (k, &(rect, id)) in mine.iter().enumerate() {
                        let mode = if k % 2 == 0 {
                            Mode::Messaging
                        } else {
                            Mode::Offload
                        };
                        out.clear();
                        cf.search(qp, rect, mode, &mut out)
                            .await
                            .map_err(|e| e.to_string())?;
                        if !out.iter().any(|e| e.ptr == id && e.rect == rect) {
                            return Err(format!("entry {id:#x} at {rect:?} lost ({mode:?})"));
                        }
                    }
                    Ok::<_, String>(())
                };
                if let Err(e) = run.await {
                    errors.borrow_mut().push(format!("honest client {c}: {e}"));
                }
            });
        }
        spawn_hostile(&mut sim, &log, seed, region_len, &sent);
        let r = sim.run();
        assert!(
            errors.borrow().is_empty(),
            "catfish seed {seed}: {:?}",
            errors.borrow()
        );
        assert_eq!(r.unfinished, 0, "catfish seed {seed}: a client hung");
        drop(sim);
        report("catfish", seed, &log, &sent);
    }
}

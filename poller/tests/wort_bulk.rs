//! WORT and WOART bulk loading (core's `wort/bulk.rs`) on the simulated cluster, behind the
//! servers' request rings:
//!
//! - the same clients' requests on a bulk-loaded tree and on a tree the clients built by
//!   inserting the same keys answer the same, and as a model map does: every key's value,
//!   range scans from random probes (keys of lengths 1 to 16 from a small alphabet, so they
//!   share long prefixes and end inside each other), then inserts, updates and deletes
//!   among the loaded keys, and everything read back again;
//! - a memory-node crash and restart (`Handler::recover` on the persistent region) after
//!   writes to a bulk-loaded tree finds every loaded key and every acknowledged write.
use remora_core::index::KvIndex;
use remora_core::wort::{Kind, Wort, WortClientConfig, WortError, WortServer};
use remora_poller::sim::{Faults, NodeImage, Sim, SimConfig, SimEndpoint};
use std::cell::RefCell;
use std::collections::BTreeMap;

#[path = "common/mem_region.rs"]
mod mem_region;
use mem_region::on_image;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn rng(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A key of 1 to 16 bytes, mostly from a 4-letter alphabet (shared prefixes), some wide.
fn key(s: &mut u64) -> Vec<u8> {
    let len = 1 + (rng(s) % 16) as usize;
    let wide = rng(s).is_multiple_of(4);
    (0..len)
        .map(|_| {
            let r = rng(s);
            if wide {
                r as u8
            } else {
                b"\0ab\xff"[(r % 4) as usize]
            }
        })
        .collect()
}

/// `n` random keys with values of 1 to 12 bytes (a key drawn twice keeps its last).
fn model(seed: u64, n: usize) -> Model {
    let mut s = seed;
    let mut m = Model::new();
    for i in 0..n {
        let v = (0..1 + i % 12).map(|j| (i * 7 + j) as u8).collect();
        m.insert(key(&mut s), v);
    }
    m
}

fn sim_cfg(seed: u64, faults: Faults) -> SimConfig {
    SimConfig {
        compute_nodes: 2,
        memory_nodes: 1,
        region_len: 32 << 20,
        seed,
        persistent: true,
        faults,
        ..SimConfig::default()
    }
}

fn open(
    ep: &SimEndpoint,
) -> impl std::future::Future<Output = Result<Wort<'_, SimEndpoint>, WortError>> {
    Wort::open(
        ep,
        WortClientConfig {
            deadline_ns: 5_000_000,
            ..WortClientConfig::default()
        },
    )
}

/// Memory images of a fresh cluster with `m` bulk-loaded by a `kind` server.
fn bulk_images(kind: Kind, seed: u64, m: &Model) -> Vec<NodeImage> {
    let mut images = Sim::new(sim_cfg(seed, Faults::none()))
        .unwrap()
        .into_images();
    let pairs: Vec<(&Vec<u8>, &Vec<u8>)> = m.iter().collect();
    let st = on_image(&mut images[0].host, |r| {
        WortServer::new(kind).bulk_load(r, &pairs)
    })
    .unwrap();
    assert_eq!(st.keys as usize, m.len());
    images
}

/// A `kind` server recovered from images[0] (as the bench starts a bulk-loaded run); what
/// its recovery said.
fn recovered(kind: Kind, images: &mut [NodeImage]) -> (WortServer, String) {
    let mut server = WortServer::new(kind);
    let said = on_image(&mut images[0].host, |r| {
        remora_core::server::Handler::recover(&mut server, r)
    })
    .unwrap();
    (server, said)
}

/// Every key of `m` with its value, and scans of up to 20 keys from 50 random probes; one
/// line per answer (the same lines for the same tree contents), checked against `m`.
async fn read_all<I: KvIndex>(t: &I, m: &Model, seed: u64, log: &mut Vec<String>)
where
    I::Error: std::fmt::Display,
{
    let mut out = [0u8; 256];
    for (k, v) in m {
        let got = t.get(k, &mut out).await.map_err(|e| e.to_string());
        let got = got.map(|n| n.map(|n| out[..n].to_vec()));
        assert_eq!(got, Ok(Some(v.clone())), "get {k:?}");
        log.push(format!("get {k:?} {got:?}"));
    }
    let mut s = seed ^ 0x5ca9;
    for _ in 0..50 {
        let from = key(&mut s);
        let mut got = Vec::new();
        t.scan(&from, 20, &mut |k, v| got.push((k.to_vec(), v.to_vec())))
            .await
            .map_err(|e| e.to_string())
            .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = m
            .range(from.clone()..)
            .take(20)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "scan from {from:?}");
        log.push(format!("scan {from:?} {got:?}"));
    }
}

/// Inserts, updates and deletes (half on loaded keys), answered as `m` says; `m` follows.
async fn write_some<I: KvIndex>(t: &I, m: &mut Model, seed: u64, log: &mut Vec<String>)
where
    I::Error: std::fmt::Display,
{
    let loaded: Vec<Vec<u8>> = m.keys().cloned().collect();
    let mut s = seed ^ 0x3717;
    for i in 0..600u64 {
        let k = if rng(&mut s).is_multiple_of(2) {
            loaded[(rng(&mut s) % loaded.len() as u64) as usize].clone()
        } else {
            key(&mut s)
        };
        let v = i.to_le_bytes()[..1 + (i % 8) as usize].to_vec();
        let what = match rng(&mut s) % 3 {
            0 => {
                t.upsert(&k, &v).await.map_err(|e| e.to_string()).unwrap();
                m.insert(k.clone(), v);
                "upsert".to_string()
            }
            1 => {
                let was = t.update(&k, &v).await.map_err(|e| e.to_string()).unwrap();
                assert_eq!(was, m.contains_key(&k), "update {k:?}");
                if was {
                    m.insert(k.clone(), v);
                }
                format!("update {was}")
            }
            _ => {
                let was = t.delete(&k).await.map_err(|e| e.to_string()).unwrap();
                assert_eq!(was, m.remove(&k).is_some(), "delete {k:?}");
                format!("delete {was}")
            }
        };
        log.push(format!("{what} {k:?}"));
    }
}

/// One client reads everything, writes, reads everything again; its answers.
/// The cluster starts from `start` (images and their recovered server) or empty, where the
/// client first inserts every key of `m`.
fn session(
    kind: Kind,
    seed: u64,
    start: Option<(Vec<NodeImage>, WortServer)>,
    m: &Model,
) -> Vec<String> {
    let log = RefCell::new(Vec::new());
    let insert_first = start.is_none();
    let mut sim = match start {
        Some((images, server)) => {
            let mut sim = Sim::with_images(sim_cfg(seed, Faults::none()), images).unwrap();
            sim.set_handler(0, Box::new(server)).unwrap();
            sim
        }
        None => {
            let mut sim = Sim::new(sim_cfg(seed, Faults::none())).unwrap();
            sim.set_handler(0, Box::new(WortServer::new(kind))).unwrap();
            sim
        }
    };
    let ctx = sim.client(1).unwrap();
    let log_ref = &log;
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let t = open(ctx.ep()).await.unwrap();
        let mut m = m.clone();
        let mut log = Vec::new();
        if insert_first {
            for (k, v) in &m {
                t.upsert(k, v).await.unwrap();
            }
        }
        read_all(&t, &m, seed, &mut log).await;
        write_some(&t, &mut m, seed, &mut log).await;
        read_all(&t, &m, seed ^ 1, &mut log).await;
        *log_ref.borrow_mut() = log;
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "{kind:?} seed {seed}");
    drop(sim);
    log.into_inner()
}

fn bulk_answers_as_inserted(kind: Kind, seed: u64) {
    let m = model(seed, 1500);
    let mut images = bulk_images(kind, seed, &m);
    let (server, said) = recovered(kind, &mut images);
    assert!(
        said.contains(&format!("{} keys, 0 node headers repaired", m.len())),
        "{said}"
    );
    let bulk = session(kind, seed, Some((images, server)), &m);
    let inserted = session(kind, seed, None, &m);
    assert_eq!(bulk.len(), inserted.len());
    assert!(bulk.len() > 2 * m.len() + 600);
    for (b, i) in bulk.iter().zip(&inserted) {
        assert_eq!(b, i, "{kind:?} seed {seed}: bulk-loaded vs inserted");
    }
}

#[test]
fn wort_bulk_loaded_answers_as_inserted() {
    for seed in 1..=2 {
        bulk_answers_as_inserted(Kind::Wort, seed);
    }
}

#[test]
fn woart_bulk_loaded_answers_as_inserted() {
    for seed in 1..=2 {
        bulk_answers_as_inserted(Kind::Woart, seed);
    }
}

const CRASH_NS: u64 = 4_000_000;
const RESTART_NS: u64 = 5_000_000;

/// Writes to a bulk-loaded tree until the memory node crashes; after its restart (a new
/// server recovering the persistent region) every loaded key and every acknowledged write
/// is there (the write in flight either way).
fn restart_after_bulk_load(kind: Kind, seed: u64) {
    let m = model(seed, 3000);
    let faults = Faults::none()
        .crash_node_at(0, CRASH_NS)
        .restart_node_at(0, RESTART_NS);
    let state = RefCell::new((m.clone(), None::<(Vec<u8>, Vec<u8>)>, 0usize));
    let checked = RefCell::new(0usize);
    let images = bulk_images(kind, seed, &m);
    let mut sim = Sim::with_images(sim_cfg(seed, faults), images).unwrap();
    // A server process that opens (and recovers) the bulk-loaded store at the first
    // message, and a new one at the restart.
    sim.set_handler_with(0, move || Box::new(WortServer::new(kind)))
        .unwrap();
    let ctx = sim.client(1).unwrap();
    let (state_ref, checked_ref) = (&state, &checked);
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let t = open(ctx.ep()).await.unwrap();
        let mut s = seed ^ 0x77;
        for i in 0u64.. {
            let k = key(&mut s);
            let v = i.to_le_bytes().to_vec();
            state_ref.borrow_mut().1 = Some((k.clone(), v.clone()));
            if t.upsert(&k, &v).await.is_err() {
                break;
            }
            let mut st = state_ref.borrow_mut();
            st.0.insert(k, v);
            st.1 = None;
            st.2 += 1;
        }
        if ctx.now_ns() < RESTART_NS {
            ctx.sleep(RESTART_NS - ctx.now_ns()).await;
        }
        let fresh = ctx.reconnect();
        let t = open(fresh.ep()).await.unwrap();
        let (want, in_flight, _) = state_ref.borrow().clone();
        let mut out = [0u8; 256];
        for (k, v) in &want {
            let n = t.get(k, &mut out).await.unwrap();
            let got = n.map(|n| out[..n].to_vec());
            let flight = in_flight
                .as_ref()
                .is_some_and(|(fk, fv)| fk == k && got.as_ref() == Some(fv));
            assert!(
                got.as_ref() == Some(v) || flight,
                "{kind:?} seed {seed}: {k:?} lost ({got:?})"
            );
        }
        let mut scanned = 0;
        t.scan(&[0], usize::MAX, &mut |_, _| scanned += 1)
            .await
            .unwrap();
        assert!(
            scanned == want.len() || scanned == want.len() + 1,
            "{scanned} vs {}",
            want.len()
        );
        *checked_ref.borrow_mut() = want.len();
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0, "{kind:?} seed {seed}");
    let acked = state.borrow().2;
    assert!(
        acked > 50,
        "{kind:?} seed {seed}: only {acked} writes before the crash"
    );
    assert!(
        *checked.borrow() >= m.len(),
        "the check after the restart ran"
    );
    let reports = sim.recovery_reports();
    assert_eq!(reports.len(), 1);
    let report = reports[0].report.clone().unwrap();
    println!("{kind:?} seed {seed}: {acked} writes acknowledged; recovery: {report}");
    assert!(report.contains(" keys,"), "{report}");
}

#[test]
fn a_restart_recovers_a_bulk_loaded_tree() {
    for seed in 1..=2 {
        restart_after_bulk_load(Kind::Wort, seed);
        restart_after_bulk_load(Kind::Woart, seed);
    }
}

//! Erda's log regions and lock-free log cleaning (issue 12, `core/src/erda/clean.rs`), driven
//! on the server alone: a full head chains a region instead of answering `LogFull`, cleaning
//! reclaims stale versions and deleted keys' buckets, and a crash at every persistence point
//! of a cleaning loses nothing acknowledged.
use remora_core::erda::{ErdaConfig, ErdaServer};
use remora_core::server::{Handler, LocalRegion};
use remora_layouts::erda::{Bucket, HeadState, ReqOp, Status, Superblock};
use std::collections::BTreeMap;

#[path = "common/erda_direct.rs"]
mod erda_direct;
#[path = "common/mem_region.rs"]
mod mem_region;
use erda_direct::{Client, Mem, read_back};

/// One head of four 16 KiB regions in 8 KiB segments; cleaning starts after 8 KiB of
/// appends.
fn cfg() -> ErdaConfig {
    ErdaConfig {
        heads: 1,
        buckets: 1024,
        segment_bytes: 8192,
        head_bytes: 4 * 16384,
        regions: 4,
        clean_permille: 500,
        ..ErdaConfig::small()
    }
}

fn head_state(mem: &Mem, sb: &Superblock) -> HeadState {
    HeadState::decode(mem.load_u64(sb.head_state_off(0)).unwrap()).unwrap()
}

fn used_buckets(mem: &Mem, sb: &Superblock) -> usize {
    (0..sb.buckets)
        .filter(|&i| {
            let mut b = [0u8; 32];
            mem.read(sb.bucket_off(i), &mut b).unwrap();
            Bucket::decode(&b).unwrap().is_used()
        })
        .count()
}

/// 40 keys written over and over (about 20 times the whole log), a quarter of them then
/// deleted: the log is cleaned again and again, never full, every value right.
#[test]
fn cleaning_keeps_a_small_log_going_and_reclaims_deleted_keys_buckets() {
    let mem = Mem::new(4 << 20);
    let mut srv = ErdaServer::new(cfg());
    let mut c = Client::open(&mut srv, &mem);
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut bytes = 0u64;
    for round in 0..160u64 {
        for k in 0..40u64 {
            let key = format!("key{k}").into_bytes();
            let value = vec![(round + k) as u8; 200];
            let r = c.put(&mut srv, &mem, ReqOp::Upsert, &key, &value);
            assert_eq!(r.status, Status::Granted, "round {round} key {k}");
            bytes += 232;
            want.insert(key, value);
        }
    }
    for k in (0..40u64).step_by(4) {
        let key = format!("key{k}").into_bytes();
        assert_eq!(
            c.put(&mut srv, &mem, ReqOp::Delete, &key, b"").status,
            Status::Granted
        );
        want.remove(&key);
    }
    let sb = srv.superblock().unwrap().1;
    assert_eq!(used_buckets(&mem, &sb), 40);
    // Let the cleaner finish what it started, and run one more cleaning for the deletes.
    let mut idle = 0;
    while srv.on_idle(&mem) {
        idle += 1;
        assert!(idle < 10_000, "the cleaner never settles");
    }
    let before = srv.stats();
    for k in 0..64u64 {
        let key = format!("fill{}", k % 2).into_bytes();
        c.put(&mut srv, &mem, ReqOp::Upsert, &key, &[9u8; 200]);
        want.insert(key, vec![9u8; 200]);
    }
    while srv.on_idle(&mem) {}
    let s = srv.stats();
    println!(
        "{} bytes appended to a {} byte log: {s:?}",
        bytes, sb.head_bytes
    );
    assert!(
        bytes > 20 * sb.head_bytes,
        "the test writes far more than the log"
    );
    assert!(s.cleanings_done >= 20, "{s:?}");
    assert_eq!(s.cleanings_started, s.cleanings_done);
    assert!(s.cleanings_done > before.cleanings_done);
    assert!(s.buckets_reclaimed >= 10, "deleted keys' buckets: {s:?}");
    assert_eq!(
        used_buckets(&mem, &sb),
        30 + 2,
        "30 live keys and the 2 fill keys"
    );
    assert!(!head_state(&mem, &sb).cleaning());
    for (k, v) in &want {
        assert_eq!(
            read_back(&mem, &sb, k).as_ref(),
            Some(v),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    for k in (0..40u64).step_by(4) {
        assert_eq!(read_back(&mem, &sb, format!("key{k}").as_bytes()), None);
    }
    // A server restarted on this image agrees (and answers from it).
    let img = Mem::from_image(mem.image());
    let mut srv2 = ErdaServer::new(cfg());
    srv2.open(&img).unwrap();
    let mut c2 = Client::open(&mut srv2, &img);
    let r = c2.put(&mut srv2, &img, ReqOp::Update, b"key0", b"back");
    assert_eq!(r.status, Status::Absent, "key0 was deleted");
    let r = c2.put(&mut srv2, &img, ReqOp::Update, b"key1", b"back");
    assert_eq!(r.status, Status::Granted);
}

/// With live data larger than one region, a full region chains the next (no `LogFull`),
/// and a ring with no free region left answers `LogFull`.
#[test]
fn a_full_region_chains_the_next_and_a_full_ring_refuses() {
    let mem = Mem::new(4 << 20);
    let mut srv = ErdaServer::new(ErdaConfig {
        clean_permille: 100_000, // no cleaning
        ..cfg()
    });
    let mut c = Client::open(&mut srv, &mem);
    let mut n = 0u64;
    loop {
        let key = format!("k{n}").into_bytes();
        let r = c.put(&mut srv, &mem, ReqOp::Upsert, &key, &[1u8; 1000]);
        if r.status != Status::Granted {
            assert_eq!(r.status, Status::LogFull);
            break;
        }
        n += 1;
    }
    let sb = srv.superblock().unwrap().1;
    let s = srv.stats();
    println!("{n} objects of 1 KiB, {s:?}, {:?}", head_state(&mem, &sb));
    assert_eq!(s.chained, 3, "three regions chained to the first");
    assert_eq!(head_state(&mem, &sb).len, 4);
    // Every object still readable: chaining moved nothing.
    for k in 0..n {
        assert_eq!(
            read_back(&mem, &sb, format!("k{k}").as_bytes()),
            Some(vec![1u8; 1000])
        );
    }
}

/// A crash at every persistence point of a whole cleaning (and of the writes and deletes
/// that run during it): recovery finds every acknowledged value and every delete, the
/// recovered server finishes the cleaning, and still nothing is lost.
#[test]
fn a_crash_at_every_persistence_point_of_a_cleaning_loses_nothing() {
    let mem = Mem::new(2 << 20);
    let mut srv = ErdaServer::new(cfg());
    let mut c = Client::open(&mut srv, &mem);
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    // Fill up to just below the threshold: 8 KiB of appends starts a cleaning.
    for k in 0..36u64 {
        let key = format!("key{k}").into_bytes();
        let value = vec![k as u8; 180];
        c.put(&mut srv, &mem, ReqOp::Upsert, &key, &value);
        want.insert(key, value);
    }
    c.put(&mut srv, &mem, ReqOp::Delete, b"key35", b"");
    want.remove(&b"key35"[..]);
    assert_eq!(srv.stats().cleanings_started, 0);
    let sb = srv.superblock().unwrap().1;
    // From here on, every persistence point is a crash image, with what was acknowledged
    // by then (the images of one put are taken before it returns: the put's own value or
    // the one before it may be found).
    mem.obs.record(true);
    type Racing = Option<(Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>)>;
    type Acked = (usize, BTreeMap<Vec<u8>, Vec<u8>>, Racing);
    let mut acked: Vec<Acked> = Vec::new();
    let mut images = Vec::new();
    let mut step = 0u64;
    while srv.stats().cleanings_done == 0 {
        step += 1;
        assert!(step < 2000, "the cleaning never finished");
        let k = step % 14;
        let key = format!("key{k}").into_bytes();
        let (op, value) = if step.is_multiple_of(9) {
            (ReqOp::Delete, None)
        } else {
            (ReqOp::Upsert, Some(vec![(step % 250) as u8; 150]))
        };
        let r = c.put(&mut srv, &mem, op, &key, value.as_deref().unwrap_or(b""));
        let new = mem.obs.record(true);
        // Images of this put: the key may have either its old or its new value.
        let old = want.get(&key).cloned();
        let granted = (r.status == Status::Granted)
            .then(|| value.clone())
            .flatten();
        for img in new {
            acked.push((
                images.len(),
                want.clone(),
                Some((key.clone(), old.clone(), granted.clone())),
            ));
            images.push(img);
        }
        if r.status == Status::Granted {
            match value {
                Some(v) => {
                    want.insert(key, v);
                }
                None => {
                    want.remove(&key);
                }
            }
        }
    }
    // The cleaner's own steps after the last put.
    while srv.on_idle(&mem) {}
    for img in mem.obs.record(false) {
        acked.push((images.len(), want.clone(), None));
        images.push(img);
    }
    let s = srv.stats();
    println!(
        "{} crash images over a cleaning ({} objects copied, {} buckets reclaimed)",
        images.len(),
        s.cleaned_objects,
        s.buckets_reclaimed
    );
    assert!(images.len() > 50 && s.cleaned_objects >= 25 && s.buckets_reclaimed > 0);
    let mut in_cleaning = 0;
    for (i, want, racing) in &acked {
        let m = Mem::from_image(images[*i].clone());
        if head_state(&m, &sb).cleaning() {
            in_cleaning += 1;
        }
        let mut srv2 = ErdaServer::new(cfg());
        srv2.open(&m).unwrap();
        let check = |m: &Mem, when: &str| {
            for k in 0..36u64 {
                let key = format!("key{k}").into_bytes();
                let got = read_back(m, &sb, &key);
                let ok = match racing {
                    Some((rk, old, new)) if *rk == key => got == *old || got == *new,
                    _ => got.as_ref() == want.get(&key),
                };
                assert!(
                    ok,
                    "image {i} {when}: key{k} reads {got:?}, want {:?}",
                    want.get(&key)
                );
            }
        };
        check(&m, "after recovery");
        // The recovered server finishes any cleaning in progress.
        while srv2.on_idle(&m) {}
        assert!(
            !head_state(&m, &sb).cleaning(),
            "image {i}: cleaning left unfinished"
        );
        check(&m, "after the cleaning resumed");
    }
    assert!(
        in_cleaning > 20,
        "only {in_cleaning} images inside the cleaning"
    );
}

/// A table kept nearly full (64 home buckets, neighborhoods of 4): new keys displace
/// entries (hopscotch moves) and deletes free buckets while cleanings run; no key is lost,
/// none is left naming a freed region (its value would then read wrong after the region is
/// reused). (A move that carries an entry past a running sweep makes the sweep run again;
/// this history has moves, not necessarily one crossing a sweep.)
#[test]
fn cleaning_under_hopscotch_moves_loses_no_key() {
    let mem = Mem::new(4 << 20);
    let cfg = ErdaConfig {
        buckets: 64,
        neighborhood: 4,
        ..cfg()
    };
    let mut srv = ErdaServer::new(cfg);
    let mut c = Client::open(&mut srv, &mem);
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let key = |x: u64| x.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec();
    let mut next = 0u64;
    for round in 0..400u64 {
        // Mostly updates of live keys, now and then a new key (until the table refuses) and
        // a delete.
        let k = if round % 5 == 0 {
            next += 1;
            key(next)
        } else {
            key(1 + round * 7 % next.max(1))
        };
        let value = vec![(round % 251) as u8; 300];
        let r = c.put(&mut srv, &mem, ReqOp::Upsert, &k, &value);
        match r.status {
            Status::Granted => {
                want.insert(k, value);
            }
            Status::TableFull => next -= 1,
            s => panic!("round {round}: {s:?}"),
        }
        if round % 13 == 0 && next > 4 {
            let d = key(next - 3);
            if want.remove(&d).is_some() {
                c.put(&mut srv, &mem, ReqOp::Delete, &d, b"");
            }
        }
    }
    while srv.on_idle(&mem) {}
    let s = srv.stats();
    println!("{} keys live: {s:?}", want.len());
    assert!(s.displaced > 0 && s.cleanings_done >= 5, "{s:?}");
    let sb = srv.superblock().unwrap().1;
    for (k, v) in &want {
        assert_eq!(read_back(&mem, &sb, k).as_ref(), Some(v));
    }
}

/// A write granted while its key's head is being cleaned, and not yet written: the cleaner
/// must neither copy the key's older object over it nor revert it (its writer is about to
/// land it), and the cleaning cannot end while it is in flight; once it lands, the cleaning
/// ends and the new value stands.
#[test]
fn a_write_in_flight_holds_the_cleaning_and_is_not_lost() {
    let mem = Mem::new(4 << 20);
    let mut srv = ErdaServer::new(cfg());
    let mut c = Client::open(&mut srv, &mem);
    for k in 0..20u64 {
        c.put(
            &mut srv,
            &mem,
            ReqOp::Upsert,
            format!("key{k}").as_bytes(),
            &[1u8; 300],
        );
    }
    let sb = srv.superblock().unwrap().1;
    let mut n = 0;
    while !head_state(&mem, &sb).cleaning() {
        c.put(&mut srv, &mem, ReqOp::Upsert, b"filler", &[2u8; 300]);
        n += 1;
        assert!(n < 100, "no cleaning started");
    }
    // Granted during the cleaning; its writer is slow.
    let g = c.ask(&mut srv, &mem, ReqOp::Update, b"key7", 300);
    assert_eq!(g.status, Status::Granted);
    for _ in 0..50 {
        srv.on_idle(&mem);
        c.put(&mut srv, &mem, ReqOp::Upsert, b"other", &[3u8; 300]);
    }
    assert!(
        head_state(&mem, &sb).cleaning(),
        "the cleaning ended with a write of key7 in flight"
    );
    Client::land(&srv, &mem, &g, b"key7", &[9u8; 300]);
    let mut n = 0;
    while head_state(&mem, &sb).cleaning() {
        srv.on_idle(&mem);
        n += 1;
        assert!(n < 1000, "the cleaning never ended after the write landed");
    }
    assert_eq!(read_back(&mem, &sb, b"key7"), Some(vec![9u8; 300]));
    for k in (0..20u64).filter(|&k| k != 7) {
        assert_eq!(
            read_back(&mem, &sb, format!("key{k}").as_bytes()),
            Some(vec![1u8; 300])
        );
    }
}

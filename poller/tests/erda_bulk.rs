//! Erda's bulk load (issue 25, core's `erda/server/bulk.rs`: the server's write path applied
//! to the region without the fabric), on the server alone:
//! - The store it writes is, byte for byte, the one a session's upserts of the same keys in
//!   the same order leave (requests through its mailbox, the client's object WRITE and
//!   durable mark by hand): the table (hopscotch displacement at work), the head states and
//!   every log region (regions chained and cleanings run on the way); only the session's
//!   request mailbox differs, and is left out of the comparison.
//! - Every crash image of a bulk load (a crash right after each of its persistence points)
//!   recovers to the store of a prefix of its keys, every one with its value, the prefix
//!   never shrinking from one image to the next and the last holding every key; the
//!   recovered whole store then takes upserts and reads them back.
use remora_core::erda::{ErdaConfig, ErdaServer};
use remora_core::server::{Handler, LocalRegion};
use remora_layouts::erda::{MAILBOX_LEN, ROOT_SLOT, ReqOp, Status};
use remora_layouts::region::root_offset;
use std::sync::{Mutex, OnceLock};

#[path = "common/erda_direct.rs"]
mod erda_direct;
#[path = "common/mem_region.rs"]
mod mem_region;
use erda_direct::{Client, Mem, read_back};
use mem_region::{MemRegion, Observer};

/// One head of four 16 KiB regions in 8 KiB segments (cleaning after 8 KiB of appends), a
/// table of 512 buckets: a few hundred keys fill neighbourhoods, chain regions and clean.
fn cleaning() -> ErdaConfig {
    ErdaConfig {
        heads: 1,
        buckets: 512,
        max_clients: 64,
        segment_bytes: 8192,
        head_bytes: 4 * 16384,
        regions: 4,
        clean_permille: 500,
        ..ErdaConfig::small()
    }
}

/// Key `i` and its value (of varying length, so objects meet segment ends).
fn entry(i: u64) -> (Vec<u8>, Vec<u8>) {
    let key = format!("key-{:x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40).into_bytes();
    let len = 16 + (i * 37 % 90) as usize;
    (key, vec![(i % 251) as u8 + 1; len])
}

/// The region with every mailbox zeroed (the session's requests are the only bytes a store
/// written by upserts holds and a bulk-loaded one does not).
fn without_mailboxes(mem: &Mem, srv: &ErdaServer) -> Vec<u8> {
    let sb = srv.superblock().expect("opened").1;
    let mut img = mem.image();
    let at = sb.mailbox(0) as usize;
    let len = sb.max_clients as usize * MAILBOX_LEN;
    img[at..at + len].fill(0);
    img
}

#[test]
fn a_bulk_load_writes_the_store_a_sessions_upserts_leave() {
    const N: u64 = 300;
    let entries: Vec<_> = (0..N).map(entry).collect();
    let inserted = Mem::new(512 << 10);
    let mut by_requests = ErdaServer::new(cleaning());
    let mut c = Client::open(&mut by_requests, &inserted);
    assert_eq!(c.id, 0, "the first session's first mailbox");
    for (k, v) in &entries {
        // A `Busy` naming no grant: the next region is still being zeroed; ask again.
        let mut tries = 0;
        while c
            .put(&mut by_requests, &inserted, ReqOp::Upsert, k, v)
            .status
            != Status::Granted
        {
            tries += 1;
            assert!(tries < 100, "never granted");
        }
    }
    let loaded = Mem::new(512 << 10);
    let mut bulk = ErdaServer::new(cleaning());
    let st = bulk
        .bulk_load(&loaded, entries.iter().map(|(k, v)| (k, v)))
        .unwrap();
    let (a, b) = (by_requests.stats(), bulk.stats());
    println!("bulk {st:?}\nupserts {a:?}");
    assert_eq!(st.keys, N);
    assert!(st.displaced > 0 && st.chained > 0, "{st:?}");
    assert!(b.cleanings_started > 0, "{b:?}");
    assert_eq!(
        (
            a.inserts,
            a.displaced,
            a.chained,
            a.cleanings_started,
            a.cleaned_objects
        ),
        (
            b.inserts,
            b.displaced,
            b.chained,
            b.cleanings_started,
            b.cleaned_objects
        )
    );
    assert!(
        without_mailboxes(&inserted, &by_requests) == without_mailboxes(&loaded, &bulk),
        "the bulk-loaded region differs from the upserted one"
    );
    let sb = bulk.superblock().unwrap().1;
    for (k, v) in &entries {
        assert_eq!(read_back(&loaded, &sb, k).as_ref(), Some(v));
    }
    // A store already there is refused.
    assert!(bulk.bulk_load(&loaded, [(b"k", b"v")]).is_err());
    let mut again = ErdaServer::new(cleaning());
    assert!(again.bulk_load(&loaded, [(b"k", b"v")]).is_err());
    // So are a key too long and a value too large, with an error, not a panic.
    let fresh = Mem::new(512 << 10);
    let long = [7u8; 17];
    assert!(
        ErdaServer::new(cleaning())
            .bulk_load(&fresh, [(&long[..], &b"v"[..])])
            .is_err()
    );
    let fresh = Mem::new(512 << 10);
    let huge = vec![1u8; 1 << 16];
    assert!(
        ErdaServer::new(cleaning())
            .bulk_load(&fresh, [(&b"k"[..], &huge[..])])
            .is_err()
    );
}

/// Two heads of two 64 KiB regions (no cleaning, no chaining): the crash images are of the
/// load alone.
fn plain() -> ErdaConfig {
    ErdaConfig {
        heads: 2,
        buckets: 256,
        max_clients: 16,
        segment_bytes: 8192,
        head_bytes: 2 * 65536,
        regions: 2,
        clean_permille: 1000,
        ..ErdaConfig::small()
    }
}

/// At every persistence point: a server recovered from a copy of the region, and how many of
/// the keys (in load order) a reader finds there with their values, all of them first.
#[derive(Default)]
struct Prefixes {
    keys: OnceLock<Vec<(Vec<u8>, Vec<u8>)>>,
    found: Mutex<Vec<Result<usize, String>>>,
}

impl Observer for Prefixes {
    fn persisted(&self, mem: &[u8], _offset: u64, _len: usize) {
        let keys = self.keys.get().expect("keys set");
        let img: MemRegion = MemRegion::from_image(mem.to_vec());
        if img.load_u64(root_offset(ROOT_SLOT)) == Ok(0) {
            // Formatting, the store not published yet: a restart formats again.
            self.found.lock().unwrap().push(Ok(0));
            return;
        }
        let mut srv = ErdaServer::new(plain());
        let r = srv
            .recover(&img)
            .map_err(|e| format!("recovery: {e}"))
            .and_then(|_| {
                let sb = srv.superblock().expect("opened").1;
                let found: Vec<bool> = keys
                    .iter()
                    .map(|(k, v)| read_back(&img, &sb, k).as_ref() == Some(v))
                    .collect();
                let m = found.iter().take_while(|f| **f).count();
                match found[m..].iter().any(|f| *f) {
                    false => Ok(m),
                    true => Err(format!("keys found past the first {m} missing")),
                }
            });
        self.found.lock().unwrap().push(r);
    }
}

#[test]
fn every_crash_image_of_a_bulk_load_recovers_to_a_prefix_of_its_keys() {
    let n = if cfg!(debug_assertions) { 60 } else { 160 };
    let entries: Vec<_> = (0..n).map(entry).collect();
    let mem: MemRegion<Prefixes> = MemRegion::new(512 << 10);
    mem.obs.keys.set(entries.clone()).unwrap();
    let mut srv = ErdaServer::new(plain());
    let st = srv
        .bulk_load(&mem, entries.iter().map(|(k, v)| (k, v)))
        .unwrap();
    assert_eq!(st.keys, n);
    let found = std::mem::take(&mut *mem.obs.found.lock().unwrap());
    assert!(
        found.len() as u64 > 2 * n,
        "only {} persistence points",
        found.len()
    );
    let mut prefix = 0;
    for (i, f) in found.iter().enumerate() {
        let m = f.clone().unwrap_or_else(|e| panic!("crash image {i}: {e}"));
        assert!(m >= prefix, "crash image {i}: {m} keys after {prefix}");
        prefix = m;
    }
    assert_eq!(prefix, n as usize, "the last image lost keys");
    // The whole load recovered (nothing to repair) takes upserts and reads back.
    let img = Mem::from_image(mem.into_image());
    let mut srv = ErdaServer::new(plain());
    let said = srv.recover(&img).unwrap();
    assert!(
        said.contains(" 0 metadata words reverted to their previous object, 0 emptied"),
        "{said}"
    );
    let mut c = Client::open(&mut srv, &img);
    let (k, _) = entry(3);
    assert_eq!(
        c.put(&mut srv, &img, ReqOp::Upsert, &k, b"new").status,
        Status::Granted
    );
    let sb = srv.superblock().unwrap().1;
    assert_eq!(read_back(&img, &sb, &k), Some(b"new".to_vec()));
    for (k, v) in entries.iter().skip(4) {
        assert_eq!(read_back(&img, &sb, k).as_ref(), Some(v));
    }
    assert_eq!(img.len(), 512 << 10);
}

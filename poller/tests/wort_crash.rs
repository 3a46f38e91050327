//! WORT and WOART survive a crash at every persistence point: the trees run on the pmem
//! crash-image recorder (`remora_pmem::recorder`), and before every fence each crash image
//! the recorder allows (pending cache lines reached the media or not) is recovered by
//! `Tree::recover` and checked: every operation finished before the crash is there, the one
//! in flight is wholly there or wholly absent, and the tree answers gets and an ordered walk
//! like the oracle. Some image must need a header repair (a split cut short), or the test
//! has not reached the window WORT's depth field exists for.
use remora_core::fabric::FabricError;
use remora_core::server::{LocalRegion, out_of_range};
use remora_core::wort::{Kind, Tree, VALUE_MAX};
use remora_layouts::NodeId;
use remora_layouts::region::RegionHeader;
use remora_pmem::PersistMem;
use remora_pmem::recorder::{CrashState, Recorder};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const REGION: usize = 256 << 10;
/// Crash images checked per persistence point (the recorder yields the adversarial extremes
/// first: none, all, each line alone, all but each line).
const IMAGES: usize = 6;

struct Pm<'a>(&'a Recorder);

impl LocalRegion for Pm<'_> {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        self.0
            .read(offset as usize, buf)
            .map_err(|_| out_of_range(0, offset, buf.len()))
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        self.0
            .write(offset as usize, data)
            .map_err(|_| out_of_range(0, offset, data.len()))
    }
    fn persist(&self, offset: u64, len: usize) {
        let _ = self.0.persist(offset as usize, len);
    }
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// The oracle as of the last finished operation, and the one in flight (key, value after it:
/// None for a delete).
#[derive(Default)]
struct Oracle {
    done: Map,
    in_flight: Option<(Vec<u8>, Option<Vec<u8>>)>,
}

#[derive(Default)]
struct Tally {
    images: u64,
    repaired: u64,
    failures: Vec<String>,
}

fn tree_contents(kind: Kind, image: Vec<u8>) -> Result<(Map, u64), String> {
    let rec = Recorder::from_image(image);
    let r = Pm(&rec);
    let sb = r
        .load_u64(remora_layouts::region::root_offset(kind.root_slot()))
        .map_err(|e| e.to_string())?;
    if sb == 0 {
        return Ok((Map::new(), 0));
    }
    let mut t = Tree::open(&r, kind, sb).map_err(|e| e.to_string())?;
    let (_, leaves, repaired) = t.recover(&r).map_err(|e| e.to_string())?;
    let mut out = Map::new();
    let (mut kb, mut vb) = ([0u8; 16], [0u8; VALUE_MAX]);
    let mut cur = t.next(&r, &[0], false).map_err(|e| e.to_string())?;
    while let Some(l) = cur {
        let (kl, vl) = t
            .read_leaf(&r, l, &mut kb, &mut vb)
            .map_err(|e| e.to_string())?;
        out.insert(kb[..kl].to_vec(), vb[..vl].to_vec());
        cur = t.next(&r, &kb[..kl], true).map_err(|e| e.to_string())?;
    }
    if leaves as usize != out.len() {
        return Err(format!("{leaves} leaves but the walk found {}", out.len()));
    }
    for (k, v) in &out {
        let l = t.get(&r, k).map_err(|e| e.to_string())?;
        let Some(l) = l else {
            return Err(format!("walked key {k:?} not found by get"));
        };
        let (_, vl) = t
            .read_leaf(&r, l, &mut kb, &mut vb)
            .map_err(|e| e.to_string())?;
        if &vb[..vl] != v.as_slice() {
            return Err(format!("get {k:?} disagrees with the walk"));
        }
    }
    Ok((out, repaired))
}

fn check_state(kind: Kind, state: &CrashState, oracle: &Oracle, tally: &mut Tally, seed: u64) {
    for img in state.crash_images(seed, IMAGES).take(IMAGES) {
        tally.images += 1;
        let (got, repaired) = match tree_contents(kind, img.image) {
            Ok(x) => x,
            Err(e) => {
                tally.failures.push(format!("recovery failed: {e}"));
                continue;
            }
        };
        tally.repaired += repaired;
        let mut after = oracle.done.clone();
        if let Some((k, v)) = &oracle.in_flight {
            match v {
                Some(v) => after.insert(k.clone(), v.clone()),
                None => after.remove(k),
            };
        }
        if got != oracle.done && got != after {
            let diff: Vec<_> = got
                .iter()
                .filter(|(k, v)| oracle.done.get(*k) != Some(*v))
                .map(|(k, _)| k.clone())
                .chain(
                    oracle
                        .done
                        .keys()
                        .filter(|k| !got.contains_key(*k))
                        .cloned(),
                )
                .take(4)
                .collect();
            tally.failures.push(format!(
                "image at fence {}: {} keys, expected {} (in flight {:?}); differing keys {diff:?}",
                state.fences_completed(),
                got.len(),
                oracle.done.len(),
                oracle.in_flight.as_ref().map(|x| &x.0)
            ));
        }
    }
}

fn campaign(kind: Kind, seed: u64, ops: usize) -> Tally {
    let rec = Arc::new(Recorder::new(REGION));
    let hdr = RegionHeader::new(REGION as u64, 4096, 0).unwrap();
    rec.write(0, &hdr.encode()).unwrap();
    rec.persist(0, 128).unwrap();
    let oracle = Arc::new(Mutex::new(Oracle::default()));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let r = Pm(&rec);
    let mut t = Tree::format(&r, kind, 1, 1).unwrap();
    {
        let (oracle, tally) = (oracle.clone(), tally.clone());
        rec.set_fence_hook(move |state| {
            let o = oracle.lock().unwrap();
            let mut ta = tally.lock().unwrap();
            check_state(kind, state, &o, &mut ta, seed);
        });
    }
    let mut s = seed;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for i in 0..ops {
        // Keys sharing prefixes of every length, so inserts split compressed paths.
        let x = next();
        let len = 1 + (x % 6) as usize;
        let key: Vec<u8> = (0..len)
            .map(|j| b"\x10\x11\x20"[((x >> (8 + 2 * j)) % 3) as usize])
            .collect();
        let value = (i as u64).to_le_bytes()[..1 + i % 8].to_vec();
        let delete = next() % 5 == 0;
        oracle.lock().unwrap().in_flight =
            Some((key.clone(), if delete { None } else { Some(value.clone()) }));
        if delete {
            t.delete(&r, &key).unwrap();
        } else {
            t.put(&r, &key, &value, false).unwrap();
        }
        let mut o = oracle.lock().unwrap();
        if delete {
            o.done.remove(&key);
        } else {
            o.done.insert(key, value);
        }
        o.in_flight = None;
    }
    rec.clear_fence_hook();
    let mut ta = Arc::try_unwrap(tally).ok().unwrap().into_inner().unwrap();
    let o = oracle.lock().unwrap();
    check_state(kind, &rec.snapshot(), &o, &mut ta, seed);
    ta
}

fn run(kind: Kind) {
    let mut repaired = 0;
    for seed in 1..=2 {
        let t = campaign(kind, seed, 120);
        println!(
            "{kind:?} seed {seed}: {} crash images recovered, {} headers repaired",
            t.images, t.repaired
        );
        assert!(
            t.failures.is_empty(),
            "{kind:?} seed {seed}: {:?}",
            &t.failures[..t.failures.len().min(5)]
        );
        assert!(t.images > 500, "{}", t.images);
        repaired += t.repaired;
    }
    assert!(
        repaired > 0,
        "{kind:?}: no crash image fell inside a path-compression split"
    );
}

#[test]
fn wort_recovers_every_crash_image() {
    run(Kind::Wort);
}

#[test]
fn woart_recovers_every_crash_image() {
    run(Kind::Woart);
}

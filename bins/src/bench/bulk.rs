//! The LOAD phase by bulk loading (`remora::core::{smart, sherman}` `bulk_load`), where the
//! load is not what is measured: the run's `--records` keys are generated, sorted and
//! written as the index's image at memory speed by one client, through the fabric (chunks
//! taken by FETCH_AND_ADD, one WRITE per chunk), before the other clients open the index.
//! The keys and values are exactly those the LOAD phase would insert (key number `n` gets
//! `value_for(n)`), so the run phase sees the same key set. CHIME's (`bulk_chime.rs`) is
//! loaded the same way. CANRT's tree is built by its
//! memory node's CPU instead, straight into the region image (`bulk_canrt.rs`).
//!
//! The papers' clients load by inserting, which leaves every compute node's index cache
//! holding the internal nodes their inserts read; after a bulk load, one client per
//! compute-node state fills its cache the same way ([`Handle::warm_cache`], top down until
//! the cache's capacity) before the warm-up, unless `--cold-cache`. Measured at full scale
//! (2M keys, the SMART profile, 16 x 24 x 2 clients, YCSB-A): cold, SMART ran 19.7 Mops at
//! 2.84 round trips per operation; warmed, 53.4 Mops at 2.27.
use super::BenchArgs;
use super::index::{Handle, IndexCfg};
use super::phase::value_for;
use super::ycsb::{KeyType, Workload};
use remora::core::fabric::Endpoint;
use remora::core::sherman::PAPER_FILL_PERCENT;
use remora::core::smart::KeyMode;
use remora::layouts::region::{HEADER_LEN, NEXT_CHUNK_OFFSET, RegionHeader};
use remora::poller::sim::{NodeImage, SimConfig};
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// One key of a bulk load: its bytes and its key number (for its value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BulkKey {
    pub(super) key: [u8; 8],
    pub(super) n: u64,
}

impl AsRef<[u8]> for BulkKey {
    fn as_ref(&self) -> &[u8] {
        &self.key
    }
}

/// One string key of a bulk load (SMART's `--keys string`, at most 32 bytes: "user" and
/// the key's hash in decimal, `ycsb::key_of`): its bytes and its key number. Ordered by its
/// bytes, as the tree orders them (`KeyMode::Variable`: a key before those it is a prefix
/// of), then by key number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrKey {
    key: [u8; 32],
    len: u8,
    n: u64,
}

impl AsRef<[u8]> for StrKey {
    fn as_ref(&self) -> &[u8] {
        &self.key[..self.len as usize]
    }
}

impl Ord for StrKey {
    fn cmp(&self, o: &StrKey) -> std::cmp::Ordering {
        self.as_ref().cmp(o.as_ref()).then(self.n.cmp(&o.n))
    }
}

impl PartialOrd for StrKey {
    fn partial_cmp(&self, o: &StrKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// The sorted keys of a bulk load (8-byte keys in `keys`, or SMART's string keys in
/// `strings`), and what preparing them cost.
pub struct BulkPlan {
    pub keys: Vec<BulkKey>,
    pub strings: Vec<StrKey>,
    pub sort_s: f64,
}

/// Whether the load of this run is bulk-loaded: the index has a bulk loader (SMART with
/// 8-byte or string keys, Sherman, FG+, CHIME, CANRT, WORT, WOART, Erda), the workload is
/// not LOAD itself, and `--no-bulk-load` is off.
pub fn wanted(a: &BenchArgs, index: &IndexCfg, workload: Workload) -> bool {
    let eight = matches!(a.keys, KeyType::Int | KeyType::Seq);
    let able = match index {
        IndexCfg::Smart { cfg, .. } => match cfg.key_mode {
            KeyMode::Fixed(8) => eight,
            // String keys (ART on DM's too), sorted in the tree's byte order by `plan`. The
            // repro's string-key bar shape at 200,000 keys, YCSB-C: ART on DM (no cache)
            // 4.402 Mops bulk-loaded, 4.389 inserted (8.07 RT/op both); SMART 111.6 against
            // 36.7, its warmed caches holding the whole index (0.99 RT/op against 2.44; 49.1
            // with --cold-cache), as with 8-byte keys (122.6 against 69.7). The warmed
            // figure is the inserted load's steady state, not a head start: inserted, the
            // same run reaches it as its warm-up grows (`--warmup` 51,200 / 512,000 /
            // 2,048,000 / 8,192,000 ops: 38.4 / 66.7 / 91.3 / 113.4 Mops, 2.42 / 1.62 /
            // 1.19 / 1.01 RT/op), where the bulk-loaded run reads 114.8 and 114.6 at the
            // first two (`remora bench --fabric sim --profile smart --set
            // server_llc_lines=66 --records 200000 --operations 20000 --compute-nodes 16
            // --memory-nodes 2 --clients-per-node 4 --coroutines 4 --index smart --keys
            // string --workload c [--no-bulk-load] --warmup N`).
            KeyMode::Variable => a.keys == KeyType::String,
            KeyMode::Fixed(_) => false,
        },
        IndexCfg::Sherman { .. } | IndexCfg::Chime { .. } => eight,
        // Any key width: built by the server's code (`bulk_canrt.rs`).
        IndexCfg::Canrt { .. } => true,
        // Any key width (1 to 16 bytes): built by the server's code (`bulk_wort.rs`).
        IndexCfg::Wort { .. } => true,
        // Any key width (1 to 16 bytes): the inserts' store, built by the server's grant
        // path (`bulk_erda.rs`), its server's cache started as the load left it
        // (`ImageRegion::warming`). YCSB-A, 4 x 4 x 4, 2 x records ops: 4.381 Mops and
        // 0.0047 LLC misses per op bulk-loaded against 4.381 and 0.0044 inserted at 20,000
        // keys, 4.057 / 0.613 against 4.050 / 0.630 at 200,000 (a cold cache: 3.948 and
        // 0.987 at 20,000).
        IndexCfg::Erda { .. } => true,
        _ => false,
    };
    able && workload != Workload::Load && !a.no_bulk_load && a.records > 0
}

/// The run's `--records` keys, sorted; a key drawn twice keeps its last key number (as the
/// later insert's value would win). String keys (`--keys string`, SMART's only) are sorted
/// by their bytes, the tree's order.
pub fn plan(a: &BenchArgs) -> BulkPlan {
    let t = Instant::now();
    let mut buf = [0u8; 32];
    if a.keys == KeyType::String {
        let mut strings: Vec<StrKey> = (0..a.records)
            .map(|n| {
                let len = a.key(n, &mut buf);
                let mut key = [0u8; 32];
                key[..len].copy_from_slice(&buf[..len]);
                StrKey {
                    key,
                    len: len as u8,
                    n,
                }
            })
            .collect();
        strings.sort_unstable();
        last_wins(&mut strings, |x, y| x.as_ref() == y.as_ref(), |k| &mut k.n);
        return BulkPlan {
            keys: Vec::new(),
            strings,
            sort_s: t.elapsed().as_secs_f64(),
        };
    }
    let mut keys: Vec<BulkKey> = (0..a.records)
        .map(|n| {
            let len = a.key(n, &mut buf);
            let mut key = [0u8; 8];
            key.copy_from_slice(&buf[..len.min(8)]);
            BulkKey { key, n }
        })
        .collect();
    keys.sort_unstable();
    last_wins(&mut keys, |x, y| x.key == y.key, |k| &mut k.n);
    BulkPlan {
        keys,
        strings: Vec::new(),
        sort_s: t.elapsed().as_secs_f64(),
    }
}

/// Drops the repeats of a key from `sorted` (sorted by key, then key number), keeping one
/// item per key with the last key number: the later insert's value wins.
pub fn last_wins<T>(
    sorted: &mut Vec<T>,
    same_key: impl Fn(&T, &T) -> bool,
    n: impl Fn(&mut T) -> &mut u64,
) {
    sorted.dedup_by(|later, kept| {
        let same = same_key(later, kept);
        if same {
            *n(kept) = *n(later);
        }
        same
    });
}

impl<E: Endpoint> Handle<'_, E> {
    /// Bulk-loads the keys of `p` into this freshly created index (before any other handle
    /// opens it); returns a one-line summary.
    pub async fn bulk_load(&self, a: &BenchArgs, p: &BulkPlan) -> Result<String, String> {
        let size = a.value_size;
        let keys = &p.keys[..];
        match self {
            Handle::Smart(s) => {
                let strings = &p.strings[..];
                let mut val = |i: usize, out: &mut [u8]| {
                    let n = if strings.is_empty() {
                        keys[i].n
                    } else {
                        strings[i].n
                    };
                    value_for(n, size, out);
                    size
                };
                let st = if strings.is_empty() {
                    s.bulk_load(keys, &mut val).await
                } else {
                    s.bulk_load(strings, &mut val).await
                }
                .map_err(|e| e.to_string())?;
                Ok(format!(
                    "SMART image of {} keys: internal nodes N4/N16/N48/N256 {:?}, {} MiB in {} chunks",
                    st.keys,
                    st.nodes,
                    st.bytes >> 20,
                    st.chunks
                ))
            }
            Handle::Sherman(s) => {
                let mut entry = |i: u64, out: &mut [u8]| {
                    let k = &keys[i as usize];
                    value_for(k.n, size, out);
                    (k.key, size)
                };
                let st = s
                    .bulk_load(keys.len() as u64, PAPER_FILL_PERCENT, &mut entry)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "Sherman image of {} keys, leaves {PAPER_FILL_PERCENT}% full: {} leaves, {} \
                     internal pages, height {}, {} MiB in {} chunks",
                    st.keys,
                    st.leaves,
                    st.internal_pages,
                    st.height + 1,
                    st.bytes >> 20,
                    st.chunks
                ))
            }
            Handle::Chime(c) => super::bulk_chime::load(c, a, keys).await,
            _ => Err("this index has no bulk loader".into()),
        }
    }

    /// Fills this handle's compute-node cache after a bulk load, as the clients' inserts of
    /// the same keys would have (`warm_cache` of SMART and Sherman); a one-line summary, or
    /// `None` for an index without such a cache.
    pub async fn warm_cache(&self) -> Result<Option<String>, String> {
        let st = match self {
            Handle::Smart(s) => s.warm_cache().await.map_err(|e| e.to_string())?,
            Handle::Sherman(s) => s.warm_cache().await.map_err(|e| e.to_string())?,
            Handle::Chime(c) => c.warm_cache().await.map_err(|e| e.to_string())?,
            _ => return Ok(None),
        };
        Ok(Some(format!(
            "{} internal nodes read over {} levels, {} cached{}",
            st.read,
            st.levels,
            st.cached,
            if st.full {
                " (the cache's capacity stopped it)"
            } else {
                ""
            }
        )))
    }
}

/// Whether a run's compute-node caches are warmed after its bulk load (see
/// [`Handle::warm_cache`]; `--cold-cache` leaves them cold).
pub fn warms(a: &BenchArgs, bulk_loaded: bool) -> bool {
    bulk_loaded && !a.cold_cache
}

/// Load once, measure many: the memory images of the last bulk-loaded cluster, by what was
/// loaded (see [`load_identity`]). Each run that finds its load here starts a fresh sim from
/// a copy (`Sim::with_images`) instead of loading again; the first run starts from a copy
/// too, so a point's figures are the same whether its load was made or found.
struct Loaded {
    identity: String,
    images: Vec<NodeImage>,
}

thread_local! {
    static LOADED: RefCell<Option<Loaded>> = const { RefCell::new(None) };
}

/// What makes two runs' loaded clusters the same: the index and its configuration, the keys
/// and values, the memory nodes and the seed. Not the region length (it grows with the
/// client count): a copy is made as long as the run's region (see [`saved`]).
pub fn load_identity(a: &BenchArgs, index: &IndexCfg, cfg: &SimConfig) -> String {
    format!(
        "{index:?}|{}|{:?}|{}|{}|{}|{}|{}|{}",
        a.records,
        a.keys,
        a.value_size,
        cfg.memory_nodes,
        cfg.chunk_size,
        cfg.dm_len,
        cfg.persistent,
        cfg.seed
    )
}

/// A copy of images, each region at least `region_len` bytes (a longer region says so in its
/// header: the chunks past the old end are free), with the lines their loads left cached
/// (`NodeImage::warm`). Only the allocated part of each region is copied (up to the region
/// header's chunk cursor), and of it only the pages holding a non-zero byte: the rest stays
/// untouched zero pages, so a copy's resident memory is what its load wrote, not what it
/// allocated (`remora repro erda --scale full --only erda-paced`, whose second point starts
/// from a copy of Erda's 600,000-value load in a 12.4 GiB region: killed by the kernel at
/// 23.9 GB resident when every allocated byte was copied; 3.3 GB peak now).
pub fn copy_images(images: &[NodeImage], region_len: u64) -> Vec<NodeImage> {
    images
        .iter()
        .map(|img| {
            let at = NEXT_CHUNK_OFFSET as usize;
            let used = img
                .host
                .get(at..at + 8)
                .map_or(img.host.len(), |w| {
                    u64::from_le_bytes(w.try_into().unwrap_or([0xff; 8])) as usize
                })
                .min(img.host.len());
            let len = img.host.len().max(region_len as usize);
            let mut host = vec![0u8; len];
            copy_written(&mut host[..used], &img.host[..used]);
            if len > img.host.len()
                && let Ok(mut h) = RegionHeader::decode(&host[..HEADER_LEN])
            {
                h.region_len = len as u64;
                host[..HEADER_LEN].copy_from_slice(&h.encode());
            }
            NodeImage {
                host,
                dm: img.dm.clone(),
                key: Arc::new(AtomicU32::new(img.key.load(Ordering::Relaxed))),
                warm: img.warm.clone(),
            }
        })
        .collect()
}

/// Copies `src` into `dst` (of the same length, all zero) page by page, skipping the pages
/// of `src` that are all zero: reading an untouched page of `src` maps the shared zero page,
/// and `dst`'s page is never touched, so neither grows the process's resident memory.
fn copy_written(dst: &mut [u8], src: &[u8]) {
    const PAGE: usize = 4096;
    for (d, s) in dst.chunks_mut(PAGE).zip(src.chunks(PAGE)) {
        // An OR over the page (no early exit, so it vectorises).
        if s.iter().fold(0u8, |a, &b| a | b) != 0 {
            d.copy_from_slice(s);
        }
    }
}

/// A copy of the saved load `identity` in regions of at least `region_len` bytes, if it is
/// the one saved.
pub fn saved(identity: &str, region_len: u64) -> Option<Vec<NodeImage>> {
    LOADED.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|s| s.identity == identity)
            .map(|s| copy_images(&s.images, region_len))
    })
}

/// Keeps `images` (a copy) as the saved load `identity`, replacing any other. The old load
/// is dropped before the copy is made, so no more than two clusters' regions (the running
/// one and the saved one) are mapped at once.
pub fn save(identity: String, images: &[NodeImage]) {
    forget();
    let images = copy_images(images, 0);
    LOADED.with(|l| *l.borrow_mut() = Some(Loaded { identity, images }));
}

/// Drops the saved load (its memory).
pub fn forget() {
    LOADED.with(|l| *l.borrow_mut() = None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora::poller::sim::{LlcStats, Sim};

    /// A page is copied when any one of its bytes is non-zero, wherever that byte is, and a
    /// short last page too; the copy equals the source byte for byte.
    #[test]
    fn a_copy_keeps_every_written_byte() {
        let mut src = vec![0u8; 4096 * 5 + 100];
        src[0] = 1; // first byte of page 0
        src[4096 * 2 + 4095] = 2; // last byte of page 2
        src[4096 * 5 + 99] = 3; // last byte of the short last page
        let mut dst = vec![0u8; src.len()];
        copy_written(&mut dst, &src);
        assert_eq!(dst, src);
    }

    fn args(line: &str) -> BenchArgs {
        #[derive(clap::Parser)]
        #[command(no_binary_name = true)]
        struct Line {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let mut a = <Line as clap::Parser>::try_parse_from(line.split_whitespace())
            .unwrap()
            .bench;
        a.silent = true;
        a
    }

    /// A sweep's second point starts from the first point's loaded cluster (its note says
    /// so) and measures exactly what it measures run alone; and both see every loaded key
    /// (YCSB-C finds them all).
    #[test]
    fn a_restored_load_measures_what_a_fresh_one_does() {
        // CANRT: built into the image by its server's code, which the measured cluster's
        // server recovers (`bulk_canrt.rs`).
        for index in [
            "smart",
            "smart --keys string",
            "sherman",
            "chime",
            "canrt",
            "wort",
            "woart",
            "erda",
        ] {
            let base = format!(
                "--index {index} --fabric sim --workload c --records 5000 --operations 4000 \
                 --compute-nodes 2 --coroutines 2"
            );
            let swept =
                super::super::records(&args(&format!("{base} --sweep clients=2,4"))).unwrap();
            let alone =
                super::super::records(&args(&format!("{base} --clients-per-node 2"))).unwrap();
            assert_eq!(
                (swept.len(), alone.len()),
                (2, 1),
                "no LOAD records when bulk-loaded"
            );
            let (restored, fresh) = (&swept[1], &alone[0]);
            assert!(
                restored
                    .notes
                    .iter()
                    .any(|n| n.contains("copy of the loaded")),
                "{index}: {:?}",
                restored.notes
            );
            assert!(
                fresh
                    .notes
                    .iter()
                    .any(|n| n.contains("bulk-loaded, not measured"))
            );
            assert_eq!(restored.ops, fresh.ops);
            assert_eq!(
                restored.op_counts.misses, 0,
                "{index}: a loaded key was missing"
            );
            assert_eq!(
                (
                    restored.seconds,
                    restored.latency.p99_ns,
                    restored.per_op.bytes_in
                ),
                (fresh.seconds, fresh.latency.p99_ns, fresh.per_op.bytes_in),
                "{index}"
            );
        }
        forget();
    }

    /// A cluster started from a server-built bulk load (Erda's store, WORT's tree, CANRT's)
    /// starts with its server's cache as the load left it (`ImageRegion::warming`): its
    /// first run misses the cache (nearly) as rarely as the run after inserting the same
    /// keys, where a cold start missed on most operations (Erda's YCSB-A at 20,000 keys:
    /// 0.987 misses per operation cold, 0.004 inserted), and (Erda's store and WORT's tree
    /// being the inserts' own) runs as fast.
    #[test]
    fn a_server_built_load_starts_with_the_inserts_cache() {
        for index in ["erda", "wort", "canrt"] {
            let base = format!(
                "--index {index} --fabric sim --workload a --records 4000 --operations 4000 \
                 --compute-nodes 2 --clients-per-node 2 --coroutines 2"
            );
            let misses = |extra: &str| {
                let recs = super::super::records(&args(&format!("{base}{extra}"))).unwrap();
                let run = recs.last().expect("a run record");
                let cpu = run.server_cpu.expect("the server's cache counted");
                assert!(cpu.lines > 0.5, "{index}: {cpu:?}");
                (cpu.llc_misses, run.mops)
            };
            let (bulk, bulk_mops) = misses(" --bulk-load");
            let (inserted, ins_mops) = misses(" --no-bulk-load");
            assert!(
                bulk <= inserted + 0.02,
                "{index}: {bulk} LLC misses per operation bulk-loaded, {inserted} inserted"
            );
            // CANRT's repacked tree is not the insert-grown one (fewer lines per operation).
            assert!(
                index == "canrt" || (bulk_mops / ins_mops - 1.0).abs() < 0.02,
                "{index}: {bulk_mops} Mops bulk-loaded, {ins_mops} inserted"
            );
        }
        forget();
    }

    /// A bulk load keeps no more warm lines than the model's cache holds, the last it
    /// touched: a 5,000-key Erda load touches far more than 300 lines.
    #[test]
    fn a_loads_warm_lines_are_bounded_by_the_cache() {
        let mut a = args("--index erda --fabric sim --workload c --records 5000");
        a.index = a.indexes[0];
        let index = super::super::config::index_cfg(&a).unwrap();
        let mut cfg = SimConfig {
            region_len: 64 << 20,
            ..SimConfig::default()
        };
        cfg.model.server_llc_lines = 300.0;
        let mut images = Sim::new(cfg.clone()).unwrap().into_images();
        assert!(
            images[0].warm.is_empty(),
            "a sim's image carries no warm lines"
        );
        let plan = super::super::bulk_wort::ServerPlan::of(&a, &index)
            .unwrap()
            .expect("Erda's store is built by its server");
        plan.build(&index, &mut images, &cfg).unwrap();
        let warm = &images[0].warm;
        assert_eq!((warm.len(), warm.capacity()), (300, 300));
        let lines: Vec<u64> = warm.lines().collect();
        let mut distinct = lines.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 300, "distinct lines");
        // The copy a saved load is restored from carries them.
        let copy = copy_images(&images, 0);
        assert_eq!(copy[0].warm.lines().collect::<Vec<_>>(), lines);
        // Started from it, the node's cache holds them: a handler's first touches hit.
        let sim = Sim::with_images(cfg, copy).unwrap();
        let mut held: Vec<u64> = sim.cached_lines(0).lines().collect();
        held.sort_unstable();
        assert_eq!(held, distinct);
        assert_eq!(
            sim.server_llc_total(),
            LlcStats::default(),
            "warming counted nothing"
        );
    }

    /// A copy into a longer region keeps the contents and says the new length in the header.
    #[test]
    fn copies_grow_the_region() {
        let img = NodeImage::fresh(1 << 20, 1 << 16, 0).unwrap();
        let copy = copy_images(&[img], 4 << 20);
        let h = RegionHeader::decode(&copy[0].host[..HEADER_LEN]).unwrap();
        assert_eq!((copy[0].host.len(), h.region_len), (4 << 20, 4 << 20));
        assert_eq!(h.chunk_size, 1 << 16);
    }
}

//! The sizes of Erda's runs: the flags they share and the keys the value-size sweep loads
//! (its 4 KiB runs do not fit this machine at the full scale's key count).
use crate::repro::Scale;

/// The most keys the paper's runs can have loaded (it states no count): its baselines'
/// servers hold at most 20000 (`#define HASHCapacity 20000`, Redo Logging/DS_s.h and Read
/// After Write/DS_s.h in csXinxinLiu/Erda, buckets of a hopscotch table with
/// `MAX_SEARCH_RANGE 2`), and the three systems ran the same YCSB files.
pub(super) const PAPER_KEYS_MAX: u64 = 20_000;

/// The cluster flags every Erda run shares, after the scale's key and operation counts.
pub(super) fn sized_flags(s: &Scale) -> String {
    sized_flags_on(s, super::NODES)
}

/// [`sized_flags`] on `nodes` compute nodes.
pub(super) fn sized_flags_on(s: &Scale, nodes: usize) -> String {
    let llc = match llc_lines(s) {
        Some(lines) => format!(" --set server_llc_lines={lines}"),
        None => String::new(),
    };
    format!(
        "{} --profile erda{llc} --compute-nodes {nodes} --memory-nodes 1 \
         --persistent --coroutines 1",
        s.kv_flags(),
    )
}

/// The modelled LLC of a run that loads more keys than the paper's can have
/// ([`PAPER_KEYS_MAX`]): the profile's 12 MiB x keys loaded / [`PAPER_KEYS_MAX`], so the
/// run's data set is to its cache as the paper's was to its 12 MiB L3 (or smaller); `None`
/// (the profile's) at or below it. Without it the full scale's 600k keys miss a cache the
/// paper's data set fitted: Redo's request thread spent 616 ns per YCSB-C read instead of
/// 453 (16 clients, 64 B), and every row that binds on it moved (Redo / Erda YCSB-C mean
/// latency 2.23x where the quick scale and the paper have 1.6x and 1.48x).
pub(super) fn llc_lines(s: &Scale) -> Option<u64> {
    if s.records <= PAPER_KEYS_MAX {
        return None;
    }
    let full = remora::poller::sim::profiles::profile("erda")
        .map(|p| p.model().server_llc_lines)
        .unwrap_or(remora::poller::sim::Model::default().server_llc_lines);
    Some((full * s.records as f64 / PAPER_KEYS_MAX as f64).round() as u64)
}

/// The flags of the value-size sweep (`erda-values`) after [`sized_flags`]: 16 client threads.
pub(super) const SIZED: &str = "--clients-per-node 8";

/// Bytes of memory-node region one run of the value-size sweep may ask for: 8 GiB, a third
/// of this 24 GiB build machine (shared with other work, no swap) and below the 12 GB
/// address-space cap (`ulimit -v 12000000`) the full-scale runs are taken under. The region
/// is allocated whole and zeroed lazily: a fixed-count Erda run asks for about 17x the bytes
/// it appends (`bench/config.rs`, `erda_geometry`: 2 heads x 3 regions, each 2 x 10/7 of
/// every append of the run, so that it never starts a cleaning) and touches the appended
/// bytes and the bucket table. Within 8 GiB a head's log (a third of it at most) also stays
/// below the format's 16 GiB (31-bit offsets of 8-byte units, `MAX_UNITS`): at 600k keys of
/// 4 KiB the geometry asked 18.8 GB per head, every such run failed with `head_bytes out
/// of range`, and the process then aborted allocating the 48.9 GB region.
pub(super) const VALUES_RUN_BYTES: u64 = 8 << 30;

/// Keys the value-size sweep loads at `value`-byte values: the scale's, or, where that run's
/// region (`bench::region_bytes` of its command line) would pass [`VALUES_RUN_BYTES`], the
/// most that keep it within (rounded down to a thousand). Fewer keys do not make the run
/// cheaper to fit than its warm-up and measured writes: if even one key does not fit, the
/// run keeps the scale's count and `memory::check_fits` refuses it before it starts.
pub(super) fn records_at(s: &Scale, value: usize) -> u64 {
    let region = |records: u64| {
        let mut sv = s.clone();
        sv.records = records;
        let line = format!(
            "{} {SIZED} --value-size {value} --index erda",
            sized_flags(&sv)
        );
        crate::repro::run::parse_bench(&line)
            .map(|mut a| {
                // `--index` fills `indexes`; bench sets `index` per run.
                a.index = a.indexes.first().copied().unwrap_or(a.index);
                crate::bench::region_bytes(&a)
            })
            .unwrap_or(u64::MAX)
    };
    if region(s.records) <= VALUES_RUN_BYTES {
        return s.records;
    }
    if region(1) > VALUES_RUN_BYTES {
        return s.records;
    }
    // The region grows with the keys: the most that fit, by bisection.
    let (mut lo, mut hi) = (1, s.records);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if region(mid) <= VALUES_RUN_BYTES {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if lo >= 10_000 { lo / 1000 * 1000 } else { lo }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repro::ScaleSel;

    /// Every run gives its server the paper's cache per key or more: at most
    /// [`PAPER_KEYS_MAX`] keys keep the profile's 12 MiB (the quick scale's commands carry
    /// no `server_llc_lines`), and a run with more scales it by its keys (full: 600k keys,
    /// 30x the lines).
    #[test]
    fn llc_scales_with_keys_past_the_papers() {
        let full_llc = remora::poller::sim::profiles::profile("erda")
            .expect("the erda profile")
            .model()
            .server_llc_lines;
        for scale in [ScaleSel::Tiny, ScaleSel::Quick, ScaleSel::Full] {
            let s = Scale::of(scale).for_paper("erda");
            let p = super::super::paper(&s);
            let mut scaled = 0;
            for series in p.experiments.iter().flat_map(|e| &e.series) {
                let a = crate::repro::run::parse_bench(&series.args).unwrap();
                let set = series
                    .args
                    .split("server_llc_lines=")
                    .nth(1)
                    .map(|t| t.split(' ').next().unwrap().parse::<f64>().unwrap());
                if a.records <= PAPER_KEYS_MAX {
                    assert_eq!(set, None, "{}", series.args);
                    continue;
                }
                let lines = set.unwrap_or_else(|| panic!("no LLC: {}", series.args));
                let per_key = lines / a.records as f64;
                let paper = full_llc / PAPER_KEYS_MAX as f64;
                assert!((per_key / paper - 1.0).abs() < 1e-3, "{}", series.args);
                scaled += 1;
            }
            assert_eq!(scaled > 0, scale == ScaleSel::Full, "{}", s.name);
        }
    }

    /// The value-size sweep's runs fit their region budget at every scale (at full, 600k keys
    /// of 4 KiB asked 48.9 GB and aborted the run), and only the runs that would not fit load
    /// fewer keys than the scale's.
    #[test]
    fn value_size_runs_fit_their_region_budget() {
        for scale in [ScaleSel::Tiny, ScaleSel::Quick, ScaleSel::Full] {
            let s = Scale::of(scale).for_paper("erda");
            let p = super::super::paper(&s);
            let e = p
                .experiments
                .iter()
                .find(|e| e.id == "erda-values")
                .unwrap();
            let mut fewer = 0;
            for series in &e.series {
                let mut a = crate::repro::run::parse_bench(&series.args).unwrap();
                a.index = a.indexes.first().copied().unwrap_or(a.index);
                assert!(a.index.is_erda(), "{}", series.args);
                let region = crate::bench::region_bytes(&a);
                println!(
                    "{} {}: {} keys, region {:.2} GiB",
                    s.name,
                    series.label,
                    a.records,
                    region as f64 / (1u64 << 30) as f64
                );
                assert!(region <= VALUES_RUN_BYTES, "{}: {region} B", series.args);
                assert!(a.records <= s.records && a.records > 0, "{}", series.args);
                if a.records < s.records {
                    fewer += 1;
                    // The most that fit: a thousand more keys would not.
                    let mut more = a.clone();
                    more.records += 1000;
                    assert!(crate::bench::region_bytes(&more) > VALUES_RUN_BYTES);
                }
            }
            if scale == ScaleSel::Full {
                assert!(fewer >= 3, "the 4 KiB runs load fewer keys");
            } else {
                assert_eq!(fewer, 0, "{}", s.name);
            }
        }
    }
}

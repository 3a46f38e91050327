//! A row measured over several seeds: its ratio is the median of the per-seed ratios, and
//! the smallest and the largest stand beside it, so a reader sees how far one seed's figure
//! (a p99 of 10k operations) moves with the seed. The class comes from the median.
use serde::{Deserialize, Serialize};

/// One seed's ratio.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct SeedRatio {
    pub seed: u64,
    pub ratio: f64,
}

/// A row's ratios over its seeds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Seeds {
    /// How many seeds gave a ratio.
    pub n: usize,
    /// The median of their ratios (the row's `remora`): the middle one for an odd count,
    /// the mean of the two middle ones for an even count.
    pub median: f64,
    pub min: SeedRatio,
    pub max: SeedRatio,
    /// The seed whose two points the row shows (its `measured`, `seed`, figures): the
    /// median's own (the lower of the two middle ones for an even count).
    pub shown: u64,
    /// Every seed's ratio, by seed.
    pub ratios: Vec<SeedRatio>,
}

/// The median and spread of `ratios` (one per seed, any order; non-finite ones left out);
/// None if fewer than two seeds gave a ratio (a single seed is the plain row).
pub fn aggregate(ratios: &[SeedRatio]) -> Option<Seeds> {
    let mut by_ratio: Vec<SeedRatio> = ratios
        .iter()
        .copied()
        .filter(|r| r.ratio.is_finite())
        .collect();
    if by_ratio.len() < 2 {
        return None;
    }
    by_ratio.sort_by(|a, b| a.ratio.total_cmp(&b.ratio).then(a.seed.cmp(&b.seed)));
    let n = by_ratio.len();
    let lower = by_ratio[(n - 1) / 2];
    let median = if n % 2 == 1 {
        lower.ratio
    } else {
        (lower.ratio + by_ratio[n / 2].ratio) / 2.0
    };
    let mut by_seed = by_ratio.clone();
    by_seed.sort_by_key(|r| r.seed);
    Some(Seeds {
        n,
        median,
        min: by_ratio[0],
        max: by_ratio[n - 1],
        shown: lower.seed,
        ratios: by_seed,
    })
}

impl Seeds {
    /// `median of 5 seeds (41.46x .. 83.04x)`.
    pub fn text(&self) -> String {
        format!(
            "median of {} seeds ({:.2}x seed {} .. {:.2}x seed {})",
            self.n, self.min.ratio, self.min.seed, self.max.ratio, self.max.seed
        )
    }

    /// The seeds, as a range where they are consecutive: `1-5`, else `1, 3, 4`.
    pub fn seed_list(&self) -> String {
        let s: Vec<u64> = self.ratios.iter().map(|r| r.seed).collect();
        match (s.first(), s.last()) {
            (Some(&a), Some(&b)) if s.windows(2).all(|w| w[1] == w[0] + 1) => {
                format!("{a}-{b}")
            }
            _ => s.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{claim, exps, paper, pt, report};
    use super::super::{ExpReport, Report, evaluate};
    use super::*;
    use crate::repro::{Metric, Pick};

    fn sr(v: &[(u64, f64)]) -> Vec<SeedRatio> {
        v.iter()
            .map(|&(seed, ratio)| SeedRatio { seed, ratio })
            .collect()
    }

    /// The median, not the first seed's ratio nor the mean: seed 1 is the lowest here and
    /// one seed far out pulls the mean away from the middle.
    #[test]
    fn median_and_spread_not_first_seed_nor_mean() {
        let r = sr(&[(1, 41.5), (2, 83.0), (3, 55.0), (4, 200.0), (5, 60.0)]);
        let s = aggregate(&r).unwrap();
        let mean = r.iter().map(|x| x.ratio).sum::<f64>() / 5.0;
        assert_eq!(s.median, 60.0);
        assert_ne!(s.median, r[0].ratio, "took the first seed");
        assert!((s.median - mean).abs() > 1.0, "took the mean {mean}");
        assert_eq!(s.shown, 5, "the median's own seed is shown");
        assert_eq!(s.n, 5);
        assert_eq!(
            (s.min, s.max),
            (
                SeedRatio {
                    seed: 1,
                    ratio: 41.5
                },
                SeedRatio {
                    seed: 4,
                    ratio: 200.0
                }
            )
        );
        assert_eq!(
            s.ratios.iter().map(|x| x.seed).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        assert_eq!(s.seed_list(), "1-5");
        assert_eq!(
            s.text(),
            "median of 5 seeds (41.50x seed 1 .. 200.00x seed 4)"
        );
        // The input's order does not matter.
        let mut rev = r.clone();
        rev.reverse();
        assert_eq!(aggregate(&rev), Some(s));
    }

    #[test]
    fn even_counts_and_too_few() {
        // Even: the mean of the two middle ones; the lower middle's points are shown.
        let s = aggregate(&sr(&[(2, 1.0), (3, 4.0), (7, 2.0), (9, 10.0)])).unwrap();
        assert_eq!(s.median, 3.0);
        assert_eq!(s.shown, 7);
        assert_eq!(s.seed_list(), "2, 3, 7, 9");
        // A seed whose ratio is not finite is left out; one seed alone is no spread.
        let s = aggregate(&sr(&[(1, 2.0), (2, f64::NAN), (3, 3.0), (4, 5.0)])).unwrap();
        assert_eq!((s.n, s.median, s.shown), (3, 3.0, 3));
        assert_eq!(aggregate(&sr(&[(1, 2.0), (2, f64::INFINITY)])), None);
        assert_eq!(aggregate(&[]), None);
        // Ties keep the seed order.
        let s = aggregate(&sr(&[(3, 1.0), (1, 1.0), (2, 1.0)])).unwrap();
        assert_eq!((s.min.seed, s.shown, s.max.seed), (1, 2, 3));
    }

    /// Points of series a and b at 16 clients, one pair per seed, a's throughput `ratio`
    /// times b's.
    fn seeded(ratios: &[(u64, f64)]) -> Vec<ExpReport> {
        let mut e = exps();
        e[0].points.clear();
        for &(seed, ratio) in ratios {
            for (series, mops) in [("a", ratio), ("b", 1.0)] {
                let mut p = pt(series, "C", 16, mops, 1000.0);
                p.seed = seed;
                e[0].points.push(p);
            }
        }
        e
    }

    fn pick() -> Option<(Pick, Pick)> {
        Some((Pick::new("e", "a", "C"), Pick::new("e", "b", "C")))
    }

    /// A claim measured at five seeds: the row's ratio is their median and its class the
    /// median's, against the paper's 2-3x: seed 1's 6.0x would be rough, the mean (10.46x)
    /// off, the median (2.5x, seed 2) is faithful. The median seed's points are shown.
    #[test]
    fn a_row_over_seeds_is_graded_by_its_median() {
        let e = seeded(&[(1, 6.0), (2, 2.5), (3, 40.0), (4, 2.2), (5, 1.6)]);
        let r = evaluate(&paper(vec![]), &claim("x", Metric::Mops, false, pick()), &e);
        assert_eq!(r.remora, Some(2.5));
        assert_eq!(r.class, "faithful");
        assert_eq!(r.of_paper, Some(1.0));
        assert_eq!(r.seed, Some(2));
        assert!(r.measured.contains("a 2.500 Mops"), "{}", r.measured);
        let s = r.seeds.clone().unwrap();
        assert_eq!((s.n, s.min.seed, s.max.seed), (5, 5, 3));
        assert_eq!((s.min.ratio, s.max.ratio), (1.6, 40.0));
        assert_eq!(
            s.ratios[0],
            SeedRatio {
                seed: 1,
                ratio: 6.0
            }
        );
        let md = report(vec![r.clone()]).markdown();
        assert!(
            md.contains(
                "2.50x (median of 5 seeds (1.60x seed 5 .. 40.00x seed 3), classes faithful .. off)"
            ),
            "{md}"
        );
        assert!(
            md.contains("(seed 2, the median of seeds 1-5; faithful)"),
            "{md}"
        );
        // report.json carries the spread and reads back.
        let back: Report =
            serde_json::from_str(&serde_json::to_string(&report(vec![r.clone()])).unwrap())
                .unwrap();
        assert_eq!(back.rows().next().unwrap().seeds, Some(s));
        // A class that got worse over seeds says so in `--check`'s message.
        let mut worse = r.clone();
        (worse.remora, worse.of_paper) = (Some(6.0), Some(2.0));
        let d = super::super::check::diff(&report(vec![r.clone()]), &report(vec![worse]));
        assert!(
            d.len() == 1 && d[0].contains("rough (6.00x, the median of 5 seeds (1.60x seed 5"),
            "{d:?}"
        );
        // One seed measured on both sides (b at seed 1 only): the plain row of seed 1.
        let mut one = e.clone();
        one[0].points.retain(|p| p.series == "a" || p.seed == 1);
        let r = evaluate(
            &paper(vec![]),
            &claim("x", Metric::Mops, false, pick()),
            &one,
        );
        assert_eq!((r.remora, r.seeds, r.seed), (Some(6.0), None, Some(1)));
        assert_eq!(r.class, "rough");
        // No seed in common: no pair.
        let mut none = e;
        none[0]
            .points
            .retain(|p| (p.series == "a") == (p.seed == 1));
        let r = evaluate(
            &paper(vec![]),
            &claim("x", Metric::Mops, false, pick()),
            &none,
        );
        assert!(r.remora.is_none() && r.missing.contains("no measured pair"));
    }

    /// The committed quick report, from before seeds (no `seeds` field), reads as a report
    /// whose rows have none: `--check` (.ci/repro-check.sh) compares with it unchanged.
    #[test]
    fn the_committed_report_reads_back() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/repro/report.json");
        let old: Report = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(old.rows().count() > 40);
        assert!(
            old.rows()
                .any(|r| r.paper == "sherman" && r.id == "write-p99")
        );
        assert!(super::super::check::diff(&old, &old).is_empty());
    }
}

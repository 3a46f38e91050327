//! How close a row's ratio is to the paper's: its class, from `of_paper` (remora's ratio
//! over the paper's, against the nearest end of the paper's range), and the class of each
//! absolute figure beside it (remora's figure over the paper's, same thresholds).
use super::{Figure, OPEN_ENDED, Row};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Within this factor of the paper's ratio (either way): faithful.
pub const FAITHFUL: f64 = 1.5;
/// Within this factor: rough; further: off.
pub const ROUGH: f64 = 3.0;

/// A row's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// remora's ratio within 0.67-1.5x of the paper's.
    Faithful,
    /// Within 0.33-3x.
    Rough,
    /// Further off.
    Off,
    /// The paper says only "more than 1x" (an open range): remora's side of 1 is all there is
    /// to compare (`agrees`).
    DirectionOnly,
    /// No ratio measured.
    Unmeasured,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Faithful => "faithful",
            Class::Rough => "rough",
            Class::Off => "off",
            Class::DirectionOnly => "direction only",
            Class::Unmeasured => "unmeasured",
        }
    }

    /// Faithful 0, rough 1, off 2; None for the classes with no distance to the paper.
    pub fn rank(self) -> Option<u8> {
        match self {
            Class::Faithful => Some(0),
            Class::Rough => Some(1),
            Class::Off => Some(2),
            _ => None,
        }
    }

    pub const ALL: [Class; 5] = [
        Class::Faithful,
        Class::Rough,
        Class::Off,
        Class::DirectionOnly,
        Class::Unmeasured,
    ];
}

/// What a paper's range `lo..=hi` claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A ratio or a range of ratios on one side of 1 (1.53x, 7.44-11.15x): graded by
    /// `of_paper`, the distance to its nearest end.
    Ratio,
    /// "The same", "similar": a closeness band around 1 (0.9-1.1). remora's ratio within
    /// the band is faithful, within [`near_band`] (0.67-1.5) rough, further off.
    Close,
    /// "More than x" (top at [`OPEN_ENDED`] or more): only the side of 1 is graded.
    Open,
}

/// The kind of claim the paper's range `lo..=hi` states.
pub fn kind(lo: f64, hi: f64) -> Kind {
    if hi >= OPEN_ENDED {
        Kind::Open
    } else if lo <= 1.0 && hi >= 1.0 {
        Kind::Close
    } else {
        Kind::Ratio
    }
}

/// The rough band of a closeness claim `lo..=hi`: 0.67-1.5 ([`FAITHFUL`] either way), or
/// the paper's own band where it is wider. A ratio in it is also "near" 1
/// (`evaluate::side`): on the paper's side, so within it a closeness row is never off for
/// its side, only outside it.
pub fn near_band(lo: f64, hi: f64) -> (f64, f64) {
    (lo.min(1.0 / FAITHFUL), hi.max(FAITHFUL))
}

/// remora's ratio over the paper's: over the nearest end of the paper's range (1 inside it);
/// None for an open range ("more than x") or no ratio.
pub fn of_paper(remora: Option<f64>, lo: f64, hi: f64) -> Option<f64> {
    let r = remora?;
    if hi >= OPEN_ENDED || !(r.is_finite() && lo > 0.0) {
        return None;
    }
    Some(if r < lo {
        r / lo
    } else if r > hi {
        r / hi
    } else {
        1.0
    })
}

/// The class of a ratio `remora` against the paper's range `lo..=hi`, by magnitude only
/// (see [`with_side`]). A closeness band ([`Kind::Close`]): faithful inside it, rough
/// inside [`near_band`], off further.
pub fn classify(remora: Option<f64>, lo: f64, hi: f64) -> Class {
    let Some(r) = remora else {
        return Class::Unmeasured;
    };
    if kind(lo, hi) == Kind::Close && r.is_finite() {
        let (nlo, nhi) = near_band(lo, hi);
        return if (lo..=hi).contains(&r) {
            Class::Faithful
        } else if (nlo..=nhi).contains(&r) {
            Class::Rough
        } else {
            Class::Off
        };
    }
    let Some(q) = of_paper(remora, lo, hi) else {
        return Class::DirectionOnly;
    };
    by_distance(q)
}

/// The class of a quotient `q` of remora's figure over the paper's by its distance from 1
/// either way (0.5 is as far as 2).
fn by_distance(q: f64) -> Class {
    if !(q.is_finite() && q > 0.0) {
        return Class::Off;
    }
    let d = q.max(1.0 / q);
    if d <= FAITHFUL {
        Class::Faithful
    } else if d <= ROUGH {
        Class::Rough
    } else {
        Class::Off
    }
}

/// A class made off when the row is on the other side of 1 from the paper (`agrees` false:
/// outside the "near 1" band, on the other side), however near in magnitude: 0.95x against
/// the paper's 1.34x says the mechanism does not help. So is a direction-only row ("more
/// than 1x") on the other side: its side is all it is graded by. Only an unmeasured row
/// (no side) keeps its class.
pub fn with_side(c: Class, agrees: Option<bool>) -> Class {
    match c {
        Class::Unmeasured => c,
        _ if agrees == Some(false) => Class::Off,
        c => c,
    }
}

/// The class of an absolute figure: remora's over the paper's (`of_paper`), by the ratio
/// classes' thresholds (0.67-1.5 faithful, 0.33-3 rough, off further); unmeasured where
/// remora has no figure. A figure whose paper value is a measurement artefact keeps its
/// class: the row's note says why, the class states the gap.
pub fn of_figure(f: &Figure) -> Class {
    match f.of_paper {
        Some(q) => by_distance(q),
        None => Class::Unmeasured,
    }
}

/// The classes an absolute figure can have, in the order the summary names them.
pub const FIGURE_CLASSES: [Class; 4] =
    [Class::Faithful, Class::Rough, Class::Off, Class::Unmeasured];

/// How many absolute figures of each class, by name (every figure class named, zeros
/// included): a count separate from the rows' ([`counts`]).
pub fn figure_counts<'a>(rows: impl Iterator<Item = &'a Row>) -> BTreeMap<String, usize> {
    let mut m: BTreeMap<String, usize> = FIGURE_CLASSES
        .iter()
        .map(|c| (c.name().to_string(), 0))
        .collect();
    for f in rows.flat_map(|r| r.figures.iter()) {
        *m.entry(of_figure(f).name().to_string()).or_default() += 1;
    }
    m
}

/// The figure counts as one line: `faithful 20, rough 5, off 8, unmeasured 0`.
pub fn figure_summary(counts: &BTreeMap<String, usize>) -> String {
    FIGURE_CLASSES
        .iter()
        .map(|c| format!("{} {}", c.name(), counts.get(c.name()).unwrap_or(&0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The class of `row`, from its ratio, the paper's range and its side of 1 (a report from
/// before classes had no `class` field: computed the same way).
pub fn of_row(row: &Row) -> Class {
    with_side(classify(row.remora, row.paper_lo, row.paper_hi), row.agrees)
}

/// How many rows of each class, by name (every class named, zeros included).
pub fn counts<'a>(rows: impl Iterator<Item = &'a Row>) -> BTreeMap<String, usize> {
    let mut m: BTreeMap<String, usize> = Class::ALL
        .iter()
        .map(|c| (c.name().to_string(), 0))
        .collect();
    for r in rows {
        *m.entry(of_row(r).name().to_string()).or_default() += 1;
    }
    m
}

/// The counts as one line: `faithful 8, rough 21, off 11, direction only 4, unmeasured 1`.
pub fn summary(counts: &BTreeMap<String, usize>) -> String {
    Class::ALL
        .iter()
        .map(|c| format!("{} {}", c.name(), counts.get(c.name()).unwrap_or(&0)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_from_the_nearest_end_of_the_papers_range() {
        // A point figure: remora / paper, either way.
        assert_eq!(classify(Some(1.53), 1.53, 1.53), Class::Faithful);
        assert_eq!(classify(Some(2.2), 1.5, 1.5), Class::Faithful);
        assert_eq!(classify(Some(2.3), 1.5, 1.5), Class::Rough);
        assert_eq!(classify(Some(1.01), 1.5, 1.5), Class::Faithful);
        assert_eq!(classify(Some(0.99), 1.5, 1.5), Class::Rough);
        assert_eq!(with_side(Class::Rough, Some(false)), Class::Off);
        assert_eq!(with_side(Class::Faithful, Some(false)), Class::Off);
        assert_eq!(with_side(Class::Faithful, Some(true)), Class::Faithful);
        // A direction-only row on the other side of 1 is off too (catfish
        // node-size-offloading 0.72x against "more than 1x"); on its side it stays.
        assert_eq!(with_side(Class::DirectionOnly, Some(false)), Class::Off);
        assert_eq!(
            with_side(Class::DirectionOnly, Some(true)),
            Class::DirectionOnly
        );
        assert_eq!(with_side(Class::Unmeasured, None), Class::Unmeasured);
        assert_eq!(classify(Some(0.49), 1.5, 1.5), Class::Off);
        assert_eq!(classify(Some(4.6), 1.5, 1.5), Class::Off);
        // A range: the nearest end, 1 inside.
        assert_eq!(of_paper(Some(9.0), 7.44, 11.15), Some(1.0));
        assert_eq!(of_paper(Some(1.24), 7.44, 11.15), Some(1.24 / 7.44));
        assert_eq!(of_paper(Some(33.0), 7.44, 11.15), Some(33.0 / 11.15));
        assert_eq!(classify(Some(1.24), 7.44, 11.15), Class::Off);
        assert_eq!(classify(Some(5.2), 7.44, 11.15), Class::Faithful);
        assert_eq!(classify(Some(4.65), 7.44, 11.15), Class::Rough);
        assert_eq!(classify(Some(33.0), 7.44, 11.15), Class::Rough);
        assert_eq!(classify(Some(34.0), 7.44, 11.15), Class::Off);
        // "More than 1x": direction only; no ratio: unmeasured.
        assert_eq!(classify(Some(11.7), 1.01, OPEN_ENDED), Class::DirectionOnly);
        assert_eq!(of_paper(Some(11.7), 1.01, OPEN_ENDED), None);
        assert_eq!(classify(None, 3.7, 3.83), Class::Unmeasured);
        // Ranks order the distance; the others have none.
        assert!(Class::Faithful.rank() < Class::Rough.rank());
        assert!(Class::Rough.rank() < Class::Off.rank());
        assert_eq!(Class::DirectionOnly.rank(), None);
    }

    #[test]
    fn a_closeness_band_is_faithful_inside_rough_within_two_thirds_to_one_and_a_half() {
        assert_eq!(kind(0.9, 1.1), Kind::Close);
        assert_eq!(kind(1.0, OPEN_ENDED), Kind::Open);
        assert_eq!(kind(1.53, 1.53), Kind::Ratio);
        assert_eq!(classify(Some(1.0), 0.9, 1.1), Class::Faithful);
        assert_eq!(classify(Some(0.9), 0.9, 1.1), Class::Faithful);
        assert_eq!(classify(Some(1.1), 0.9, 1.1), Class::Faithful);
        // Outside the band: rough, though of_paper (1.138 / 1.1) is only 1.03.
        assert_eq!(classify(Some(1.138), 0.9, 1.1), Class::Rough);
        assert_eq!(classify(Some(0.7), 0.9, 1.1), Class::Rough);
        assert_eq!(classify(Some(1.5), 0.9, 1.1), Class::Rough);
        assert_eq!(classify(Some(1.6), 0.9, 1.1), Class::Off);
        assert_eq!(classify(Some(0.6), 0.9, 1.1), Class::Off);
        assert_eq!(classify(None, 0.9, 1.1), Class::Unmeasured);
        // A band wider than 0.67-1.5 is rough to its own ends' distance.
        assert_eq!(near_band(0.5, 2.0), (0.5, 2.0));
        assert_eq!(near_band(0.9, 1.1), (1.0 / FAITHFUL, FAITHFUL));
    }

    #[test]
    fn absolute_figures_are_graded_by_the_ratio_thresholds() {
        let fig = |paper: f64, remora: Option<f64>| Figure {
            series: "s".into(),
            clients: 1,
            unit: "Mops".into(),
            paper,
            remora,
            of_paper: remora.map(|v| v / paper),
            class: String::new(),
            source: String::new(),
        };
        assert_eq!(of_figure(&fig(0.4, Some(0.433))), Class::Faithful);
        assert_eq!(of_figure(&fig(20000.0, Some(15515.0))), Class::Faithful);
        assert_eq!(of_figure(&fig(1.0, Some(0.5))), Class::Rough);
        assert_eq!(of_figure(&fig(1.0, Some(2.9))), Class::Rough);
        // Erda's throughput 35x the paper's, its latency 14x lower: off.
        assert_eq!(of_figure(&fig(0.096, Some(3.58))), Class::Off);
        assert_eq!(of_figure(&fig(62.84, Some(4.395))), Class::Off);
        assert_eq!(of_figure(&fig(1.0, None)), Class::Unmeasured);
        // Counted apart from the rows' classes.
        use super::super::tests as t;
        let c = t::claim("x", crate::repro::Metric::Mops, false, None);
        let mut row = super::super::evaluate(&t::paper(vec![]), &c, &[]);
        row.figures = vec![fig(1.0, Some(1.0)), fig(1.0, Some(10.0)), fig(1.0, None)];
        let c = figure_counts(std::iter::once(&row));
        assert_eq!(
            figure_summary(&c),
            "faithful 1, rough 0, off 1, unmeasured 1"
        );
        assert_eq!(c.get("direction only"), None);
    }
}

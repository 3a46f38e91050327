//! How close a row's ratio is to the paper's: its class, from `of_paper` (remora's ratio
//! over the paper's, against the nearest end of the paper's range).
use super::{OPEN_ENDED, Row};
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
/// (see [`with_side`]).
pub fn classify(remora: Option<f64>, lo: f64, hi: f64) -> Class {
    if remora.is_none() {
        return Class::Unmeasured;
    }
    let Some(q) = of_paper(remora, lo, hi) else {
        return Class::DirectionOnly;
    };
    // Distance either way: 0.5 is as far as 2.
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
/// the paper's 1.34x says the mechanism does not help. Direction-only and unmeasured rows
/// keep their class.
pub fn with_side(c: Class, agrees: Option<bool>) -> Class {
    match c {
        Class::Faithful | Class::Rough if agrees == Some(false) => Class::Off,
        c => c,
    }
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
        assert_eq!(
            with_side(Class::DirectionOnly, Some(false)),
            Class::DirectionOnly
        );
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
}
